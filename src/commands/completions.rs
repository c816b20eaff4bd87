//! `shepherd completions bash|zsh|fish` and `shepherd man`: print the scripts
//! and the man page `args::complete` generates from the flag and subcommand
//! tables, and `shepherd completions names KIND`, the hidden listing the
//! scripts call at completion time for the names config.json holds.
//!
//! The listing never fails loudly: a missing or broken config file lists
//! nothing, so a completion never prints an error into the user's line.

use std::io::Write;
use std::path::Path;

use super::{usage, CommandError};
use crate::args::complete;
use crate::args::subcommands::{self, NameKind};
use crate::config;

/// Runs `shepherd completions ARGS...`; names are read from the config file at `path`.
pub fn run(args: &[String], path: &Path, out: &mut dyn Write) -> Result<(), CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let text = match words.as_slice() {
        ["bash"] => complete::bash(),
        ["zsh"] => complete::zsh(),
        ["fish"] => complete::fish(),
        ["names", kind] => return names(kind, path, out),
        _ => {
            return Err(usage(format!(
                "completions needs a shell: bash, zsh or fish\n{}",
                subcommands::usage("completions")
            )))
        }
    };
    out.write_all(text.as_bytes())?;
    Ok(())
}

/// Runs `shepherd man`: the man page in roff.
pub fn run_man(args: &[String], out: &mut dyn Write) -> Result<(), CommandError> {
    if let Some(extra) = args.first() {
        return Err(usage(format!(
            "unexpected argument '{extra}'\n{}",
            subcommands::usage("man")
        )));
    }
    out.write_all(complete::man_page().as_bytes())?;
    Ok(())
}

fn names(kind: &str, path: &Path, out: &mut dyn Write) -> Result<(), CommandError> {
    let kind = NameKind::parse(kind).ok_or_else(|| {
        let kinds: Vec<&str> = NameKind::ALL.iter().map(|k| k.as_str()).collect();
        usage(format!(
            "unknown kind '{kind}'; kinds: {}",
            kinds.join(", ")
        ))
    })?;
    for name in list(kind, path) {
        writeln!(out, "{name}")?;
    }
    Ok(())
}

fn list(kind: NameKind, path: &Path) -> Vec<String> {
    let owned = |names: &[&str]| names.iter().map(|n| n.to_string()).collect();
    match kind {
        NameKind::ConfigKeys => owned(&super::config::key_names()),
        NameKind::ProviderFields => owned(&super::PROVIDER_FIELDS),
        _ => {
            let Ok(file) = config::load(path) else {
                return Vec::new();
            };
            match kind {
                NameKind::Providers => owned(&file.provider_names()),
                NameKind::Profiles => config::profile::all(&file)
                    .into_iter()
                    .map(|p| p.name)
                    .collect(),
                _ => config::profile::configured_mcp_servers(&file),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::temp_dir;

    fn names_of(kind: &str, path: &Path) -> String {
        let mut out = Vec::new();
        run(&["names".to_string(), kind.to_string()], path, &mut out).expect("lists");
        String::from_utf8(out).expect("UTF-8")
    }

    #[test]
    fn names_come_from_the_config_and_a_missing_file_lists_nothing() {
        let path = temp_dir("complete-names").join("config.json");
        assert_eq!(names_of("providers", &path), "");
        let mut out = Vec::new();
        let add = ["add", "work", "--type", "ollama"].map(String::from);
        super::super::run_provider(&add, &path, &mut out).expect("added");
        assert_eq!(names_of("providers", &path), "work\n");
        assert!(names_of("config-keys", &path).contains("temperature\n"));
        assert!(names_of("provider-fields", &path).contains("base_url\n"));
        assert!(names_of("profiles", &path).lines().count() >= 1);
        assert!(run(&["names".into(), "bogus".into()], &path, &mut Vec::new()).is_err());
    }
}

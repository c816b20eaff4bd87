//! `shepherd profile ...`: list, add, edit, show, use and remove the profiles
//! in config.json. The profile model and its edits live in [`crate::config::profile`];
//! this is only the command line over them.

use std::io::Write;
use std::path::Path;

use super::CommandError;
use crate::config::profile::*;
use crate::config::{self, ConfigFile};

impl From<EditError> for CommandError {
    fn from(error: EditError) -> CommandError {
        match error {
            EditError::Profile(e) => CommandError::Usage(e.to_string()),
            EditError::Config(e) => CommandError::Config(e),
            EditError::Io(e) => CommandError::Io(e),
        }
    }
}

// ---------------------------------------------------------------------------
// `shepherd profile ...`

fn profile_usage() -> String {
    crate::args::subcommands::usage("profile")
}

/// Runs `shepherd profile ARGS...` against the config file at `path`.
pub fn run_profile(args: &[String], path: &Path, out: &mut dyn Write) -> Result<(), CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] | ["list"] => {
            let file = config::load(path)?;
            list(&file, out)
        }
        ["help"] | ["-h"] | ["--help"] => Ok(write!(out, "{}", super::command_help("profile"))?),
        ["show", name] | [name, "show"] => {
            let file = config::load(path)?;
            let profile = find(&file, name).map_err(|e| CommandError::Usage(e.to_string()))?;
            show(&profile, &file, out)
        }
        ["add", name, rest @ ..] => {
            let mut profile = Profile::named(name);
            apply_options(&mut profile, rest)?;
            let warning = unknown_servers(path, &profile);
            edit_config(path, |file| create(file, profile))?;
            print_warning(out, warning)?;
            Ok(writeln!(out, "added profile '{name}'")?)
        }
        ["edit", name, rest @ ..] => {
            let mut profile =
                find(&config::load(path)?, name).map_err(|e| CommandError::Usage(e.to_string()))?;
            apply_options(&mut profile, rest)?;
            let warning = unknown_servers(path, &profile);
            edit_config(path, |file| update(file, name, profile))?;
            print_warning(out, warning)?;
            Ok(writeln!(out, "updated profile '{name}'")?)
        }
        ["use", name] | [name, "use"] => {
            edit_config(path, |file| set_active(file, name))?;
            Ok(writeln!(out, "profile '{name}' is now used by default")?)
        }
        ["remove", name] | [name, "remove"] => {
            edit_config(path, |file| remove(file, name))?;
            Ok(writeln!(out, "removed profile '{name}'")?)
        }
        _ => Err(CommandError::Usage(format!(
            "unknown profile command\n{}",
            profile_usage()
        ))),
    }
}

/// Reads `--tools`, `--mcp` and `--guidelines` (also as `--flag=value`).
fn apply_options(profile: &mut Profile, rest: &[&str]) -> Result<(), CommandError> {
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((flag, value)) => (flag, Some(value)),
            None => (*word, None),
        };
        let mut value = || {
            inline
                .or_else(|| words.next().copied())
                .ok_or_else(|| CommandError::Usage(format!("{flag} needs a value")))
        };
        let list = |v: &str| -> Vec<String> {
            v.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect()
        };
        match flag {
            "--tools" => profile.tools = list(value()?),
            "--mcp" => profile.mcp_servers = list(value()?),
            "--guidelines" => profile.guidelines = value()?.to_string(),
            other => {
                return Err(CommandError::Usage(format!(
                    "unknown option '{other}'\n{}",
                    profile_usage()
                )))
            }
        }
    }
    Ok(())
}

/// A warning when the profile names MCP servers config.json does not have.
fn unknown_servers(path: &Path, profile: &Profile) -> Option<String> {
    let known = config::load(path)
        .map(|f| configured_mcp_servers(&f))
        .ok()?;
    let missing: Vec<&str> = profile
        .mcp_servers
        .iter()
        .filter(|s| !known.contains(s))
        .map(String::as_str)
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "warning: no MCP server named {} is configured (yet)",
            missing.join(", ")
        )
    })
}

fn print_warning(out: &mut dyn Write, warning: Option<String>) -> Result<(), CommandError> {
    if let Some(warning) = warning {
        writeln!(out, "{warning}")?;
    }
    Ok(())
}

fn list(file: &ConfigFile, out: &mut dyn Write) -> Result<(), CommandError> {
    let active = active_name(file);
    for profile in all(file) {
        let mark = if profile.name == active { "*" } else { " " };
        let tools = if profile.tools.is_empty() {
            "all tools".to_string()
        } else {
            profile.tools.join(",")
        };
        writeln!(out, "{mark} {} ({tools})", profile.name)?;
    }
    Ok(())
}

fn show(profile: &Profile, file: &ConfigFile, out: &mut dyn Write) -> Result<(), CommandError> {
    let or_all = |list: &[String]| {
        if list.is_empty() {
            "(all)".to_string()
        } else {
            list.join(", ")
        }
    };
    writeln!(out, "name: {}", profile.name)?;
    writeln!(out, "active: {}", profile.name == active_name(file))?;
    writeln!(out, "tools: {}", or_all(&profile.tools))?;
    writeln!(out, "mcp_servers: {}", or_all(&profile.mcp_servers))?;
    writeln!(out, "guidelines: {}", profile.guidelines)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::temp_dir;

    fn run(path: &Path, words: &[&str]) -> Result<String, CommandError> {
        let args: Vec<String> = words.iter().map(|w| w.to_string()).collect();
        let mut out = Vec::new();
        run_profile(&args, path, &mut out)?;
        Ok(String::from_utf8(out).unwrap())
    }

    #[test]
    fn command_line_round_trip() {
        let path = temp_dir("profile-cmd").join("config.json");
        std::fs::write(
            &path,
            r#"{"mcp_servers": [{"name": "fs", "command": "x"}], "zeta": 1}"#,
        )
        .unwrap();
        let out = run(
            &path,
            &[
                "add",
                "review",
                "--tools",
                "read,grep",
                "--mcp=fs,web",
                "--guidelines",
                "Only read.",
            ],
        )
        .unwrap();
        assert!(out.contains("no MCP server named web"), "{out}");
        let out = run(&path, &["show", "review"]).unwrap();
        assert!(out.contains("tools: read, grep"), "{out}");
        assert!(out.contains("mcp_servers: fs, web"), "{out}");
        run(&path, &["use", "review"]).unwrap();
        let out = run(&path, &["list"]).unwrap();
        assert_eq!(out, "  default (all tools)\n* review (read,grep)\n");
        run(&path, &["edit", "review", "--tools", ""]).unwrap();
        assert!(run(&path, &["show", "review"])
            .unwrap()
            .contains("tools: (all)"));
        let error = run(&path, &["remove", "default"]).unwrap_err();
        assert!(error.to_string().contains("cannot be deleted"), "{error}");
        assert_eq!(error.exit_code(), 2);
        assert!(run(&path, &["add", "x", "--bogus", "1"]).is_err());
        assert!(run(&path, &["add", "x", "--tools"]).is_err());
        run(&path, &["remove", "review"]).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let saved: serde_json::Value = serde_json::from_str(&text).unwrap();
        assert_eq!(saved["zeta"], 1, "unknown keys survive");
        assert!(saved.get("active_profile").is_none(), "{text}");
        assert_eq!(saved["profiles"], serde_json::Value::Null, "{text}");
    }
}

//! `shepherd config ...`: list, show and set the top-level settings of
//! config.json (the providers have `shepherd provider`, in [`super`]).

use std::io::Write;
use std::path::Path;

use super::{optional, parse_int, save_checked, usage, CommandError};
use crate::args;
use crate::config::{self, ConfigFile};

/// The type of a top-level config key, for parsing `config KEY VALUE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Bool,
    Int,
    Float,
    Text,
    List,
}

/// A top-level key `shepherd config` can show and set.
struct ConfigKey {
    name: &'static str,
    kind: KeyKind,
    /// Shown when the key is unset; the values themselves live in `config::resolve`.
    default: &'static str,
}

const fn key(name: &'static str, kind: KeyKind, default: &'static str) -> ConfigKey {
    ConfigKey {
        name,
        kind,
        default,
    }
}

static CONFIG_KEYS: [ConfigKey; 16] = [
    key("streaming", KeyKind::Bool, "true"),
    key("system_prompt", KeyKind::Text, "(built in)"),
    key("max_rounds", KeyKind::Int, "50"),
    key("max_tokens", KeyKind::Int, "0 (automatic)"),
    key("temperature", KeyKind::Float, "(the provider's)"),
    key("top_p", KeyKind::Float, "(the provider's)"),
    key("top_k", KeyKind::Int, "(the provider's)"),
    key("context_size", KeyKind::Int, "0 (the model's)"),
    key("tools_enabled", KeyKind::Bool, "true"),
    key("disabled_tools", KeyKind::List, "(none)"),
    key("thinking", KeyKind::Bool, "false"),
    key("stats", KeyKind::Bool, "false"),
    key("timeout", KeyKind::Int, "300"),
    key(
        "models_dir",
        KeyKind::Text,
        "~/.local/share/shepherd/models",
    ),
    key("kv_cache_max_mb", KeyKind::Int, "1024"),
    key("max_reply_mb", KeyKind::Int, "16"),
];

/// The keys `shepherd config` knows, for completion.
pub fn key_names() -> Vec<&'static str> {
    CONFIG_KEYS.iter().map(|k| k.name).collect()
}

/// Runs `shepherd config ARGS...` against the config file at `path`.
pub fn run_config(args: &[String], path: &Path, out: &mut dyn Write) -> Result<(), CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        ["help"] | ["-h"] | ["--help"] => write!(out, "{}", super::command_help("config"))?,
        [] | ["show"] => list_config(&config::load(path)?, out)?,
        [name] | ["show", name] => show_config_key(&config::load(path)?, lookup_key(name)?, out)?,
        [name, value] | ["set", name, value] => {
            set_config_key(path, lookup_key(name)?, value, out)?
        }
        _ => {
            return Err(usage(format!(
                "too many arguments\n{}",
                args::subcommands::usage("config")
            )))
        }
    }
    Ok(())
}

fn lookup_key(name: &str) -> Result<&'static ConfigKey, CommandError> {
    if name == "providers" {
        return Err(usage("providers are managed with: shepherd provider ..."));
    }
    CONFIG_KEYS.iter().find(|k| k.name == name).ok_or_else(|| {
        let known: Vec<&str> = CONFIG_KEYS.iter().map(|k| k.name).collect();
        usage(format!(
            "unknown config key '{name}'; known keys: {}",
            known.join(", ")
        ))
    })
}

fn list_config(file: &ConfigFile, out: &mut dyn Write) -> Result<(), CommandError> {
    for key in &CONFIG_KEYS {
        let shown = match key_value(file, key.name) {
            // One line per key: a multi-line prompt is shown JSON-quoted.
            Some(text) if key.kind == KeyKind::Text => serde_json::to_string(&text).unwrap_or(text),
            Some(text) => text,
            None => format!("{} (default)", key.default),
        };
        writeln!(out, "{} = {shown}", key.name)?;
    }
    Ok(())
}

fn show_config_key(
    file: &ConfigFile,
    key: &ConfigKey,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    match key_value(file, key.name) {
        Some(text) => writeln!(out, "{text}")?,
        None => writeln!(out, "{} (default)", key.default)?,
    }
    Ok(())
}

/// The key's value as text, `None` when unset.
fn key_value(file: &ConfigFile, name: &str) -> Option<String> {
    fn show<T: ToString>(v: Option<T>) -> Option<String> {
        v.map(|x| x.to_string())
    }
    match name {
        "streaming" => show(file.streaming),
        "system_prompt" => file.system_prompt.clone(),
        "max_rounds" => show(file.max_rounds),
        "max_tokens" => show(file.max_tokens),
        "temperature" => show(file.temperature),
        "top_p" => show(file.top_p),
        "top_k" => show(file.top_k),
        "context_size" => show(file.context_size),
        "tools_enabled" => show(file.tools_enabled),
        "disabled_tools" => {
            (!file.disabled_tools.is_empty()).then(|| file.disabled_tools.join(","))
        }
        "thinking" => show(file.thinking),
        "stats" => show(file.stats),
        "timeout" => show(file.timeout),
        "models_dir" => file.models_dir.clone(),
        "kv_cache_max_mb" => show(file.kv_cache_max_mb),
        "max_reply_mb" => show(file.max_reply_mb),
        _ => None,
    }
}

fn set_config_key(
    path: &Path,
    key: &ConfigKey,
    value: &str,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let mut file = config::load(path)?;
    apply_key(&mut file, key, value).map_err(usage)?;
    save_checked(path, &mut file)?;
    if value.is_empty() {
        writeln!(out, "{} restored to its default.", key.name)?;
    } else {
        writeln!(out, "{} = {value}", key.name)?;
    }
    Ok(())
}

/// Parses `value` by the key's type and stores it; range checks follow in `validate`.
fn apply_key(file: &mut ConfigFile, key: &ConfigKey, value: &str) -> Result<(), String> {
    let name = key.name;
    let boolean = |v: &str| optional(name, v, parse_bool);
    match name {
        "streaming" => file.streaming = boolean(value)?,
        "tools_enabled" => file.tools_enabled = boolean(value)?,
        "thinking" => file.thinking = boolean(value)?,
        "stats" => file.stats = boolean(value)?,
        "system_prompt" => file.system_prompt = (!value.is_empty()).then(|| value.to_string()),
        "models_dir" => file.models_dir = (!value.is_empty()).then(|| value.to_string()),
        "max_rounds" => file.max_rounds = optional(name, value, args::max_rounds)?,
        "max_tokens" => file.max_tokens = optional(name, value, args::max_tokens)?,
        "temperature" => {
            file.temperature = optional(name, value, |v| args::parse_unit_float(v, 2.0))?
        }
        "top_p" => file.top_p = optional(name, value, |v| args::parse_unit_float(v, 1.0))?,
        "top_k" => file.top_k = optional(name, value, parse_int)?,
        "context_size" => file.context_size = optional(name, value, parse_int)?,
        "timeout" => file.timeout = optional(name, value, parse_timeout)?,
        "kv_cache_max_mb" => file.kv_cache_max_mb = optional(name, value, parse_int)?,
        "max_reply_mb" => file.max_reply_mb = optional(name, value, parse_reply_mb)?,
        "disabled_tools" => file.disabled_tools = args::split_globs(value).collect(),
        _ => return Err(format!("unknown config key '{name}'")),
    }
    Ok(())
}

/// Booleans as people type them in shells and config files.
pub fn parse_bool(value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        _ => Err("true/false, 1/0 or on/off".to_string()),
    }
}

fn parse_timeout(value: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err("a number of seconds of at least 1".to_string()),
    }
}

/// A reply cap in MiB: at least 1, at most 1 TiB.
fn parse_reply_mb(value: &str) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(n) if (1..=1 << 20).contains(&n) => Ok(n),
        _ => Err("a number of MiB from 1 to 1048576".to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::temp_dir;
    use std::path::PathBuf;

    fn config_cmd(path: &Path, args: &[&str]) -> Result<String, CommandError> {
        let mut out = Vec::new();
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        run_config(&args, path, &mut out).map(|()| String::from_utf8_lossy(&out).into_owned())
    }

    fn fresh(label: &str) -> PathBuf {
        temp_dir(label).join("config.json")
    }

    fn loaded(path: &Path) -> ConfigFile {
        config::load(path).expect("the commands write valid files")
    }

    #[test]
    fn config_lists_shows_and_sets() {
        let path = fresh("cfg");
        let all = config_cmd(&path, &[]).expect("defaults list");
        for key in &CONFIG_KEYS {
            assert!(all.contains(&format!("{} = ", key.name)), "{all}");
        }
        assert!(all.contains("streaming = true (default)"));
        config_cmd(&path, &["streaming", "off"]).expect("bool");
        config_cmd(&path, &["stats", "1"]).expect("bool");
        config_cmd(&path, &["temperature", "0.3"]).expect("float");
        config_cmd(&path, &["set", "max_rounds", "12"]).expect("legacy form");
        config_cmd(&path, &["disabled_tools", "bash,web*"]).expect("list");
        config_cmd(&path, &["system_prompt", "line one\nline two"]).expect("text");
        let file = loaded(&path);
        assert_eq!((file.streaming, file.stats), (Some(false), Some(true)));
        assert_eq!((file.temperature, file.max_rounds), (Some(0.3), Some(12)));
        assert_eq!(file.disabled_tools, ["bash", "web*"]);
        assert_eq!(config_cmd(&path, &["temperature"]).expect("show"), "0.3\n");
        let all = config_cmd(&path, &["show"]).expect("list");
        assert!(
            all.contains("system_prompt = \"line one\\nline two\"\n"),
            "{all}"
        );
        config_cmd(&path, &["streaming", ""]).expect("reset");
        assert_eq!(loaded(&path).streaming, None);
        assert_eq!(
            config_cmd(&path, &["streaming"]).expect("show"),
            "true (default)\n"
        );
    }

    #[test]
    fn config_rejects_bad_keys_and_values() {
        let path = fresh("cfg-err");
        let check = |args: &[&str], expect: &str| match config_cmd(&path, args) {
            Ok(out) => panic!("{args:?} should fail, printed {out}"),
            Err(e) => {
                assert_eq!(e.exit_code(), 2);
                assert!(
                    e.to_string().contains(expect),
                    "{args:?}: '{e}' lacks '{expect}'"
                );
            }
        };
        check(&["colour", "red"], "known keys: streaming, system_prompt");
        check(&["providers"], "shepherd provider");
        check(&["streaming", "maybe"], "maybe");
        check(&["max_rounds", "0"], "max_rounds");
        check(&["max_rounds", "x"], "max_rounds");
        check(&["temperature", "NaN"], "temperature");
        check(&["top_p", "2"], "top_p");
        check(&["timeout", "0"], "timeout");
        check(&["context_size", "20000000"], "context_size");
        check(&["a", "b", "c"], "too many");
        assert!(!path.exists(), "failed sets write nothing");
    }

    #[test]
    fn booleans_accept_the_usual_words() {
        for (word, expect) in [
            ("true", true),
            ("ON", true),
            ("1", true),
            ("off", false),
            ("0", false),
            ("False", false),
        ] {
            assert_eq!(parse_bool(word), Ok(expect), "{word}");
        }
        assert!(parse_bool("2").is_err());
    }
}

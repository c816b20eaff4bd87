//! config.json: where it lives, its shape, loading with precise errors, and atomic saving.
//!
//! The file is our own persisted format, so [`ConfigFile`] and [`ProviderConfig`]
//! derive serde directly and their field names are a compatibility promise.
//! Keys we do not know are kept in `extra` and written back unchanged, so an
//! older shepherd never deletes what a newer one wrote.
//!
//! Stage two of the command line lives in [`resolve`]: it layers defaults, this
//! file, `SHEPHERD_*` variables and flags into [`resolve::Settings`]. `commands` edits the
//! file through [`load`] and [`save`] (atomically, by [`crate::util::fs::write_atomic`]).

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::args::{MAX_ROUNDS_LIMIT, MAX_TOKEN_COUNT};

/// The `mcp_servers` section.
pub mod mcp;
/// The `profiles` section: named sets of tools, MCP servers and guidelines.
pub mod profile;
/// Stage two: [`resolve::Settings`] from defaults, this file, the environment and flags.
pub mod resolve;

/// Read when the user has no config file of their own.
pub const SYSTEM_CONFIG: &str = "/etc/shepherd/config.json";
/// A provider's priority when the file does not give one; lower wins.
pub const DEFAULT_PRIORITY: u32 = 100;

/// Looks up an environment variable; tests pass a map instead of the process environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`].
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

/// A config that cannot be used. The front-end prints it and exits with status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// The file is not valid JSON or a value has the wrong type.
    Parse {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// A file could not be read.
    Read { path: PathBuf, message: String },
    /// A value is out of range or contradicts another; `origin` names where it came from.
    Invalid { origin: String, message: String },
}

impl ConfigError {
    pub fn invalid(origin: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid {
            origin: origin.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigError::Parse {
                path,
                line,
                column,
                message,
            } => write!(
                f,
                "{}: line {line}, column {column}: {message}",
                path.display()
            ),
            ConfigError::Read { path, message } => {
                write!(f, "cannot read {}: {message}", path.display())
            }
            ConfigError::Invalid { origin, message } => write!(f, "{origin}: {message}"),
        }
    }
}

impl std::error::Error for ConfigError {}

/// The kind of backend a provider talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProviderKind {
    #[default]
    Openai,
    Anthropic,
    Gemini,
    Ollama,
    Llamacpp,
    Tensorrt,
    Cli,
}

impl ProviderKind {
    pub const ALL: [ProviderKind; 7] = [
        ProviderKind::Openai,
        ProviderKind::Anthropic,
        ProviderKind::Gemini,
        ProviderKind::Ollama,
        ProviderKind::Llamacpp,
        ProviderKind::Tensorrt,
        ProviderKind::Cli,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            ProviderKind::Openai => "openai",
            ProviderKind::Anthropic => "anthropic",
            ProviderKind::Gemini => "gemini",
            ProviderKind::Ollama => "ollama",
            ProviderKind::Llamacpp => "llamacpp",
            ProviderKind::Tensorrt => "tensorrt",
            ProviderKind::Cli => "cli",
        }
    }

    pub fn parse(name: &str) -> Option<ProviderKind> {
        Self::ALL.into_iter().find(|k| k.as_str() == name)
    }

    /// The conventional variables holding this provider's API key, in lookup order.
    pub fn key_env_vars(self) -> &'static [&'static str] {
        match self {
            ProviderKind::Openai => &["OPENAI_API_KEY"],
            ProviderKind::Anthropic => &["ANTHROPIC_API_KEY"],
            ProviderKind::Gemini => &["GEMINI_API_KEY", "GOOGLE_API_KEY"],
            _ => &[],
        }
    }
}

fn default_priority() -> u32 {
    DEFAULT_PRIORITY
}

fn is_default_priority(p: &u32) -> bool {
    *p == DEFAULT_PRIORITY
}

/// One entry of `providers[]`: a backend and how to reach it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProviderConfig {
    pub name: String,
    #[serde(rename = "type", default)]
    pub kind: ProviderKind,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key: Option<String>,
    #[serde(default, alias = "api_base", skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(
        default = "default_priority",
        skip_serializing_if = "is_default_priority"
    )]
    pub priority: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra_headers: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_param_name: Option<String>,
    /// Keys this version does not know, written back as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ProviderConfig {
    pub fn new(name: &str, kind: ProviderKind) -> ProviderConfig {
        ProviderConfig {
            name: name.to_string(),
            kind,
            model: None,
            api_key: None,
            base_url: None,
            priority: DEFAULT_PRIORITY,
            context_size: None,
            temperature: None,
            top_p: None,
            top_k: None,
            max_tokens: None,
            extra_headers: BTreeMap::new(),
            model_path: None,
            deployment_name: None,
            api_version: None,
            max_tokens_param_name: None,
            extra: Map::new(),
        }
    }
}

/// The whole of config.json. Unset values are `None` so that defaults live in
/// one place (`resolve`) and are not frozen into the file on the first save.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ConfigFile {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub providers: Vec<ProviderConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub streaming: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system_prompt: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_rounds: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_k: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools_enabled: Option<bool>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub disabled_tools: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stats: Option<bool>,
    /// Seconds an API request may take.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
    /// The prompt cache's cap on disk, in MiB (0 turns it off).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_cache_max_mb: Option<u64>,
    /// The cap on one reply from an API provider, in MiB (content, reasoning and
    /// tool-call arguments together; default 16).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_reply_mb: Option<u64>,
    /// The token the servers require (`--auth-token`, `SHEPHERD_AUTH_TOKEN`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth_token: Option<String>,
    /// Web origins the servers send CORS headers to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cors_origins: Vec<String>,
    /// Tool approval rules (`--approve`, `--deny` add to them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approvals: Option<ApprovalsConfig>,
    /// `HOST:PORT` of a `shepherd --toolserver` that runs the tools (`--tool-backend`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_backend: Option<String>,
    /// The token that tool server requires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_backend_token: Option<String>,
    /// Named sets of tools, MCP servers and guidelines (`shepherd profile`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profiles: Vec<crate::config::profile::Profile>,
    /// The profile used when `--profile` is not given; unset means `default`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_profile: Option<String>,
    /// Where `shepherd models` and `-m NAME` look for GGUF files first
    /// (default `$XDG_DATA_HOME/shepherd/models`); the model cache follows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub models_dir: Option<String>,
    /// MCP servers by name (`shepherd mcp ...`).
    #[serde(
        default,
        deserialize_with = "mcp::deserialize_servers",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub mcp_servers: mcp::McpServers,
    /// Keys this version does not know, written back as they were.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `approvals` in config.json: tool-name globs per decision, and how long to wait.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ApprovalsConfig {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ask: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub deny: Vec<String>,
    /// Seconds to wait for the user before a call is denied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<u64>,
}

impl ConfigFile {
    pub fn provider(&self, name: &str) -> Option<&ProviderConfig> {
        self.providers.iter().find(|p| p.name == name)
    }

    pub fn provider_mut(&mut self, name: &str) -> Option<&mut ProviderConfig> {
        self.providers.iter_mut().find(|p| p.name == name)
    }

    /// Puts providers in failover order. The sort is stable, so equal
    /// priorities keep the order the user wrote them in.
    pub fn sort_providers(&mut self) {
        self.providers.sort_by_key(|p| p.priority);
    }

    pub fn provider_names(&self) -> Vec<&str> {
        self.providers.iter().map(|p| p.name.as_str()).collect()
    }
}

/// Where the config is read from and where changes are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigLocation {
    /// Saves go here: `-c FILE` or the user's file, never the system one.
    pub path: PathBuf,
    /// Loads come from here: `path`, or the system file while the user has none.
    pub read_from: PathBuf,
}

/// `$XDG_CONFIG_HOME/shepherd/config.json`, else `$HOME/.config/shepherd/config.json`.
pub fn user_config_path(env: EnvLookup) -> PathBuf {
    let non_empty = |name| env(name).filter(|v: &String| !v.is_empty());
    let base = match non_empty("XDG_CONFIG_HOME") {
        // The XDG spec says relative values are invalid and must be ignored.
        Some(xdg) if Path::new(&xdg).is_absolute() => PathBuf::from(xdg),
        _ => PathBuf::from(non_empty("HOME").unwrap_or_else(|| ".".into())).join(".config"),
    };
    base.join("shepherd").join("config.json")
}

/// Chooses the config file: `-c FILE`, else the user's, else `system` if the user has none.
pub fn locate(explicit: Option<&Path>, env: EnvLookup, system: &Path) -> ConfigLocation {
    if let Some(path) = explicit {
        return ConfigLocation {
            path: path.to_path_buf(),
            read_from: path.to_path_buf(),
        };
    }
    let path = user_config_path(env);
    let read_from = if !path.exists() && system.exists() {
        system.to_path_buf()
    } else {
        path.clone()
    };
    ConfigLocation { path, read_from }
}

/// Loads and checks `path`; a missing file gives the defaults.
pub fn load(path: &Path) -> Result<ConfigFile, ConfigError> {
    match fs::read_to_string(path) {
        Ok(text) => parse(&text, path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(ConfigFile::default()),
        Err(e) => Err(ConfigError::Read {
            path: path.to_path_buf(),
            message: e.to_string(),
        }),
    }
}

/// Parses config text; `path` is only used to name the file in errors.
pub fn parse(text: &str, path: &Path) -> Result<ConfigFile, ConfigError> {
    let mut file: ConfigFile = serde_json::from_str(text).map_err(|e| parse_error(&e, path))?;
    validate(&file).map_err(|message| ConfigError::invalid(path.display().to_string(), message))?;
    file.sort_providers();
    Ok(file)
}

fn parse_error(err: &serde_json::Error, path: &Path) -> ConfigError {
    // serde_json's Display appends " at line L column C"; we print the
    // position in the usual file:line:col form instead.
    let text = err.to_string();
    let suffix = format!(" at line {} column {}", err.line(), err.column());
    let message = text.strip_suffix(&suffix).unwrap_or(&text).to_string();
    ConfigError::Parse {
        path: path.to_path_buf(),
        line: err.line(),
        column: err.column(),
        message,
    }
}

/// Checks the ranges that serde's types cannot express. The message names the key.
pub fn validate(file: &ConfigFile) -> Result<(), String> {
    check_common(
        "",
        file.temperature,
        file.top_p,
        file.max_tokens,
        file.context_size,
    )?;
    if let Some(n) = file.max_rounds {
        if !(1..=MAX_ROUNDS_LIMIT).contains(&n) {
            return Err(format!(
                "max_rounds is {n}, expected 1 to {MAX_ROUNDS_LIMIT}"
            ));
        }
    }
    if file.timeout == Some(0) {
        return Err("timeout is 0, expected a number of seconds of at least 1".into());
    }
    if let Some(n) = file.approvals.as_ref().and_then(|a| a.timeout) {
        if !(1..=86_400).contains(&n) {
            return Err(format!("approvals.timeout is {n}, expected 1 to 86400"));
        }
    }
    if let Some(address) = &file.tool_backend {
        crate::args::parse_host_port(address)
            .map_err(|e| format!("tool_backend is '{address}', expected {e}"))?;
    }
    file.providers.iter().try_for_each(validate_provider)?;
    crate::config::profile::validate(file)?;
    for (name, server) in &file.mcp_servers {
        mcp::validate_server(name, server)?;
    }
    check_unique_names(file)
}

fn validate_provider(p: &ProviderConfig) -> Result<(), String> {
    check_provider_name(&p.name)?;
    let prefix = format!("provider '{}': ", p.name);
    if p.priority == 0 {
        return Err(format!(
            "{prefix}priority 0 is reserved for command-line providers; use 1 or more"
        ));
    }
    check_common(
        &prefix,
        p.temperature,
        p.top_p,
        p.max_tokens,
        p.context_size,
    )
}

/// Names that would be mistaken for `provider` actions on the command line.
pub const RESERVED_NAMES: [&str; 10] = [
    "add", "remove", "show", "set", "edit", "use", "list", "next", "help", "cmdline",
];

/// A provider name must be a plain word: it is typed on command lines and shown in lists.
pub fn check_provider_name(name: &str) -> Result<(), String> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
    if name.is_empty() || !name.chars().all(plain) {
        return Err(format!(
            "provider name '{name}' must be letters, digits, '-', '_' or '.'"
        ));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(format!("provider name '{name}' is reserved"));
    }
    Ok(())
}

fn check_unique_names(file: &ConfigFile) -> Result<(), String> {
    for (i, p) in file.providers.iter().enumerate() {
        if file.providers[..i].iter().any(|q| q.name == p.name) {
            return Err(format!("provider '{}' is defined twice", p.name));
        }
    }
    Ok(())
}

fn check_common(
    prefix: &str,
    temperature: Option<f32>,
    top_p: Option<f32>,
    max_tokens: Option<i64>,
    context_size: Option<u64>,
) -> Result<(), String> {
    let out_of = |key: &str, value: String, expected: &str| {
        Err(format!("{prefix}{key} is {value}, expected {expected}"))
    };
    if let Some(t) = temperature.filter(|t| !(0.0..=2.0).contains(t)) {
        return out_of("temperature", t.to_string(), "0 to 2");
    }
    if let Some(p) = top_p.filter(|p| !(0.0..=1.0).contains(p)) {
        return out_of("top_p", p.to_string(), "0 to 1");
    }
    if let Some(n) = max_tokens.filter(|n| *n < -1 || *n > MAX_TOKEN_COUNT as i64) {
        return out_of(
            "max_tokens",
            n.to_string(),
            "-1, 0 or a count up to 10000000",
        );
    }
    if let Some(n) = context_size.filter(|n| *n > MAX_TOKEN_COUNT) {
        return out_of("context_size", n.to_string(), "at most 10000000");
    }
    Ok(())
}

/// Writes `file` to `path` atomically, readable only by the owner (it holds API keys).
pub fn save(path: &Path, file: &ConfigFile) -> io::Result<()> {
    let mut bytes = serde_json::to_vec_pretty(file).map_err(io::Error::other)?;
    bytes.push(b'\n');
    crate::util::fs::write_atomic(path, &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::temp_dir;
    use crate::util::fs::write_atomic;

    fn parse_ok(text: &str) -> ConfigFile {
        match parse(text, Path::new("c.json")) {
            Ok(f) => f,
            Err(e) => panic!("should parse: {e}"),
        }
    }

    fn parse_err(text: &str) -> String {
        match parse(text, Path::new("/x/c.json")) {
            Ok(f) => panic!("should fail: {f:?}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn malformed_file_names_file_line_and_column() {
        let err = parse(
            "{\n  \"streaming\": true,\n  \"max_rounds\": ,\n}",
            Path::new("/x/c.json"),
        );
        match err {
            Err(ConfigError::Parse {
                path, line, column, ..
            }) => {
                assert_eq!(path, PathBuf::from("/x/c.json"));
                assert_eq!((line, column), (3, 17));
            }
            other => panic!("expected a parse error, got {other:?}"),
        }
        let msg = parse_err("{\n  \"streaming\": true,\n  \"max_rounds\": ,\n}");
        assert!(msg.starts_with("/x/c.json: line 3, column 17: "), "{msg}");
        assert!(!msg.contains(" at line "), "{msg}");
    }

    #[test]
    fn wrong_types_and_ranges_are_errors() {
        assert!(parse_err(r#"{"streaming": "yes"}"#).starts_with("/x/c.json: line 1,"));
        assert!(parse_err(r#"{"top_k": -1}"#).contains("/x/c.json: line 1,"));
        assert!(parse_err(r#"{"providers": [{"name": "a", "type": "grok"}]}"#).contains("grok"));
        let cases = [
            (r#"{"temperature": 3}"#, "temperature is 3"),
            (r#"{"top_p": 1.5}"#, "top_p is 1.5"),
            (r#"{"max_tokens": -2}"#, "max_tokens is -2"),
            (r#"{"context_size": 20000000}"#, "context_size"),
            (r#"{"max_rounds": 0}"#, "max_rounds is 0"),
            (r#"{"timeout": 0}"#, "timeout is 0"),
            (
                r#"{"providers": [{"name": "a"}, {"name": "a"}]}"#,
                "defined twice",
            ),
            (r#"{"providers": [{"name": "list"}]}"#, "reserved"),
            (r#"{"providers": [{"name": "a b"}]}"#, "must be letters"),
            (
                r#"{"providers": [{"name": "a", "priority": 0}]}"#,
                "priority 0",
            ),
            (
                r#"{"providers": [{"name": "a", "temperature": 9}]}"#,
                "provider 'a': temperature",
            ),
        ];
        for (text, expect) in cases {
            let msg = parse_err(text);
            assert!(msg.starts_with("/x/c.json: "), "{msg}");
            assert!(msg.contains(expect), "{text}: '{msg}' lacks '{expect}'");
        }
    }

    #[test]
    fn providers_get_defaults_aliases_and_order() {
        let file = parse_ok(
            r#"{"providers": [
                {"name": "late", "priority": 200},
                {"name": "a", "type": "ollama", "api_base": "http://h:11434"},
                {"name": "b", "priority": 100},
                {"name": "first", "priority": 5, "type": "anthropic"}
            ]}"#,
        );
        assert_eq!(file.provider_names(), ["first", "a", "b", "late"]);
        let a = file.provider("a").expect("a was in the file");
        assert_eq!(a.kind, ProviderKind::Ollama);
        assert_eq!(a.base_url.as_deref(), Some("http://h:11434"));
        assert_eq!(
            file.provider("late").map(|p| p.kind),
            Some(ProviderKind::Openai)
        );
        assert_eq!(
            file.provider("b").map(|p| p.priority),
            Some(DEFAULT_PRIORITY)
        );
    }

    #[test]
    fn unknown_keys_survive_a_round_trip() {
        let text = r#"{"smcp_servers": [{"name": "fs"}], "streaming": false,
            "providers": [{"name": "p", "pricing": {"prompt_per_million": 3}, "extra_headers": {"X-A": "1"}}],
            "zeta": 1}"#;
        let file = parse_ok(text);
        assert_eq!(
            file.extra.keys().collect::<Vec<_>>(),
            ["smcp_servers", "zeta"]
        );
        let saved = serde_json::to_string(&file).expect("a config always serialises");
        let again = parse_ok(&saved);
        assert_eq!(again, file);
        let v: Value = serde_json::from_str(&saved).expect("we wrote JSON");
        assert_eq!(v["providers"][0]["pricing"]["prompt_per_million"], 3);
        assert_eq!(v["providers"][0]["extra_headers"]["X-A"], "1");
        assert_eq!(v["smcp_servers"][0]["name"], "fs");
        // Defaults are not frozen into the file.
        assert!(v.get("max_rounds").is_none());
        assert!(v["providers"][0].get("priority").is_none());
    }

    #[test]
    fn missing_file_gives_defaults_and_unreadable_names_it() {
        let dir = temp_dir("load");
        assert_eq!(load(&dir.join("none.json")), Ok(ConfigFile::default()));
        // A directory cannot be read as a file, even by root.
        match load(&dir) {
            Err(e @ ConfigError::Read { .. }) => {
                assert!(e.to_string().contains(&*dir.to_string_lossy()))
            }
            other => panic!("expected a read error, got {other:?}"),
        }
    }

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn user_path_prefers_xdg_then_home() {
        let p = user_config_path(&env_of(&[("XDG_CONFIG_HOME", "/xdg"), ("HOME", "/h")]));
        assert_eq!(p, PathBuf::from("/xdg/shepherd/config.json"));
        let p = user_config_path(&env_of(&[("XDG_CONFIG_HOME", "rel"), ("HOME", "/h")]));
        assert_eq!(p, PathBuf::from("/h/.config/shepherd/config.json"));
        let p = user_config_path(&env_of(&[("XDG_CONFIG_HOME", ""), ("HOME", "/h")]));
        assert_eq!(p, PathBuf::from("/h/.config/shepherd/config.json"));
    }

    #[test]
    fn locate_falls_back_to_system_only_without_user_file() {
        let dir = temp_dir("locate");
        let system = dir.join("etc.json");
        let xdg = dir.join("xdg");
        let xdg_str = xdg.to_string_lossy().to_string();
        let env = move |name: &str| (name == "XDG_CONFIG_HOME").then(|| xdg_str.clone());
        let user = xdg.join("shepherd/config.json");
        // Neither exists: read and write the user file.
        let loc = locate(None, &env, &system);
        assert_eq!(
            (loc.path.clone(), loc.read_from),
            (user.clone(), user.clone())
        );
        fs::write(&system, "{}").expect("temp dir is writable");
        let loc = locate(None, &env, &system);
        assert_eq!(
            (loc.path.clone(), loc.read_from),
            (user.clone(), system.clone())
        );
        write_atomic(&user, b"{}").expect("temp dir is writable");
        assert_eq!(locate(None, &env, &system).read_from, user);
        let explicit = dir.join("mine.json");
        assert_eq!(locate(Some(&explicit), &env, &system).read_from, explicit);
    }

    #[test]
    fn save_then_load_round_trips() {
        let dir = temp_dir("save");
        let path = dir.join("config.json");
        let mut file = ConfigFile {
            temperature: Some(0.7),
            ..ConfigFile::default()
        };
        file.providers
            .push(ProviderConfig::new("p", ProviderKind::Gemini));
        save(&path, &file).expect("writable");
        let text = fs::read_to_string(&path).expect("written");
        assert!(text.contains("\"temperature\": 0.7"), "{text}");
        assert_eq!(load(&path), Ok(file));
    }

    #[test]
    fn key_env_vars_per_kind() {
        assert_eq!(ProviderKind::Openai.key_env_vars(), ["OPENAI_API_KEY"]);
        assert_eq!(
            ProviderKind::Gemini.key_env_vars(),
            ["GEMINI_API_KEY", "GOOGLE_API_KEY"]
        );
        assert!(ProviderKind::Ollama.key_env_vars().is_empty());
        for k in ProviderKind::ALL {
            assert_eq!(ProviderKind::parse(k.as_str()), Some(k));
            assert!(crate::args::BACKEND_NAMES.contains(&k.as_str()));
        }
    }
}

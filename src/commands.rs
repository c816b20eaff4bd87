//! The management commands: `shepherd provider ...` here, the others beside it.
//!
//! Each takes the words after its name (as kept by `args`), the config file
//! path (`Settings::config_path`) and somewhere to print. They load the file
//! with `config::load`, change it, and write it back with `config::save`, which
//! keeps keys this version does not know. The interactive front-ends can call
//! the same functions for their `/provider` and `/config` slash commands.
//!
//! The other subcommands sit beside this file: [`config`] (`shepherd config
//! ...`), [`profile`] (`shepherd profile ...`), [`mcp`] (`shepherd mcp ...`), [`models`]
//! (`shepherd models`), [`sessions`] (`shepherd sessions ...`) and [`completions`]
//! (`shepherd completions ...`, `shepherd man`). Usage lines and help come from
//! the subcommand table in `args::subcommands`. Nothing below `commands` depends on
//! it; only the front-end dispatch calls in.

pub mod completions;
pub mod config;
pub mod mcp;
pub mod models;
pub mod profile;
pub mod ps;
pub mod pull;
pub mod sessions;

use std::fmt;
use std::io::{self, Write};
use std::path::Path;

use crate::args;
use crate::config::{check_provider_name, ConfigError, ConfigFile, ProviderConfig, ProviderKind};

/// Why a command failed; [`CommandError::exit_code`] maps it to the process status.
#[derive(Debug)]
pub enum CommandError {
    /// The command line was wrong (exit 2).
    Usage(String),
    /// The config file is malformed or invalid (exit 2).
    Config(ConfigError),
    /// Reading, writing or printing failed (exit 1).
    Io(io::Error),
    /// The command could not do what was asked (a missing session; exit 1).
    Failed(String),
}

/// How the front-end shows untrusted text on a terminal (`frontend::sanitize::visible`).
pub type Visible = for<'t> fn(&'t str) -> std::borrow::Cow<'t, str>;

/// Where a command prints, and how it shows untrusted text (model output,
/// tool results, file names).
pub struct Output<'a> {
    pub out: &'a mut dyn Write,
    pub visible: Visible,
    /// Whether `out` is a terminal: whole texts then go through `visible` too.
    pub terminal: bool,
}

impl Output<'_> {
    /// Writes untrusted `text`, sanitized when `out` is a terminal.
    pub fn write_text(&mut self, text: &str) -> Result<(), CommandError> {
        if self.terminal {
            self.out.write_all((self.visible)(text).as_bytes())?;
        } else {
            self.out.write_all(text.as_bytes())?;
        }
        Ok(())
    }
}

impl CommandError {
    pub fn exit_code(&self) -> i32 {
        match self {
            CommandError::Usage(_) | CommandError::Config(_) => 2,
            CommandError::Io(_) | CommandError::Failed(_) => 1,
        }
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CommandError::Usage(msg) => f.write_str(msg),
            CommandError::Config(err) => err.fmt(f),
            CommandError::Io(err) => err.fmt(f),
            CommandError::Failed(msg) => f.write_str(msg),
        }
    }
}

impl std::error::Error for CommandError {}

impl From<io::Error> for CommandError {
    fn from(err: io::Error) -> CommandError {
        CommandError::Io(err)
    }
}

impl From<ConfigError> for CommandError {
    fn from(err: ConfigError) -> CommandError {
        CommandError::Config(err)
    }
}

fn usage(msg: impl Into<String>) -> CommandError {
    CommandError::Usage(msg.into())
}

fn provider_usage() -> String {
    args::subcommands::usage("provider")
}

/// A command's whole `--help` text, from the subcommand table.
pub fn command_help(name: &str) -> String {
    match args::subcommands::find(name) {
        Some(command) => args::subcommands::help_text(args::subcommands::HelpTopic {
            command,
            action: None,
        }),
        None => String::new(),
    }
}

/// What a `provider` command line asks for.
#[derive(Debug, PartialEq, Eq)]
enum ProviderAction<'a> {
    List,
    Help,
    Add(&'a [String]),
    Show(&'a str),
    Set(&'a str, &'a str, &'a str),
    Use(&'a str),
    Remove(&'a str),
}

/// Accepts both orders, `NAME show` and `show NAME`, so either spelling users type works.
fn provider_action(args: &[String]) -> Result<ProviderAction<'_>, CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    let action = match words.as_slice() {
        [] | ["list"] => ProviderAction::List,
        ["help"] | ["-h"] | ["--help"] => ProviderAction::Help,
        ["add", ..] => ProviderAction::Add(&args[1..]),
        ["show", name] | [name, "show"] | [name] => ProviderAction::Show(name),
        ["use", name] | [name, "use"] => ProviderAction::Use(name),
        ["remove", name] | [name, "remove"] => ProviderAction::Remove(name),
        [name, "set", field, value] => ProviderAction::Set(name, field, value),
        [_, "set", ..] => return Err(usage("usage: shepherd provider NAME set FIELD VALUE")),
        _ => {
            return Err(usage(format!(
                "unknown provider command\n{}",
                provider_usage()
            )))
        }
    };
    Ok(action)
}

/// Runs `shepherd provider ARGS...` against the config file at `path`.
pub fn run_provider(args: &[String], path: &Path, out: &mut dyn Write) -> Result<(), CommandError> {
    let action = provider_action(args)?;
    if action == ProviderAction::Help {
        write!(out, "{}", command_help("provider"))?;
        return Ok(());
    }
    let mut file = crate::config::load(path)?;
    match action {
        ProviderAction::List => return list_providers(&file, out),
        ProviderAction::Show(name) => return show_provider(find(&file, name)?, out),
        ProviderAction::Add(rest) => add_provider(&mut file, rest, out)?,
        ProviderAction::Set(name, field, value) => {
            set_provider_field(&mut file, name, field, value, out)?
        }
        ProviderAction::Use(name) => use_provider(&mut file, name, out)?,
        ProviderAction::Remove(name) => remove_provider(&mut file, name, out)?,
        ProviderAction::Help => {}
    }
    save_checked(path, &mut file)
}

/// Checks the edited file as a load would, then writes it.
fn save_checked(path: &Path, file: &mut ConfigFile) -> Result<(), CommandError> {
    crate::config::validate(file).map_err(usage)?;
    file.sort_providers();
    crate::config::save(path, file)?;
    Ok(())
}

fn find<'a>(file: &'a ConfigFile, name: &str) -> Result<&'a ProviderConfig, CommandError> {
    file.provider(name)
        .ok_or_else(|| unknown_provider(file, name))
}

fn unknown_provider(file: &ConfigFile, name: &str) -> CommandError {
    if file.providers.is_empty() {
        return usage(format!(
            "unknown provider '{name}'; no providers are configured"
        ));
    }
    usage(format!(
        "unknown provider '{name}'; known providers: {}",
        file.provider_names().join(", ")
    ))
}

fn list_providers(file: &ConfigFile, out: &mut dyn Write) -> Result<(), CommandError> {
    if file.providers.is_empty() {
        writeln!(
            out,
            "No providers configured. Add one with: shepherd provider add NAME --type TYPE"
        )?;
        return Ok(());
    }
    let width = file
        .providers
        .iter()
        .map(|p| p.name.len())
        .max()
        .unwrap_or(0);
    // Providers are kept sorted, so the first is the one tried first.
    for (idx, p) in file.providers.iter().enumerate() {
        let marker = if idx == 0 { '*' } else { ' ' };
        let model = p.model.as_deref().unwrap_or("-");
        writeln!(
            out,
            "{marker} {:width$}  {:9}  priority {:<5}  {model}",
            p.name,
            p.kind.as_str(),
            p.priority
        )?;
    }
    Ok(())
}

fn show_provider(p: &ProviderConfig, out: &mut dyn Write) -> Result<(), CommandError> {
    writeln!(out, "name: {}", p.name)?;
    for field in PROVIDER_FIELDS {
        if let Some(value) = provider_field(p, field) {
            writeln!(out, "{field}: {value}")?;
        }
    }
    for (key, value) in &p.extra {
        writeln!(out, "{key}: {value}")?;
    }
    Ok(())
}

/// Shows enough of an API key to tell keys apart without revealing it: `sk-X...abcd`.
pub fn mask_key(key: &str) -> String {
    let chars: Vec<char> = key.chars().collect();
    if chars.len() < 12 {
        return "*".repeat(chars.len().min(8));
    }
    let head: String = chars[..4].iter().collect();
    let tail: String = chars[chars.len() - 4..].iter().collect();
    format!("{head}...{tail}")
}

/// Fields `provider NAME set` accepts, in the order `show` prints them.
pub const PROVIDER_FIELDS: [&str; 15] = [
    "type",
    "model",
    "api_key",
    "base_url",
    "priority",
    "context_size",
    "temperature",
    "top_p",
    "top_k",
    "max_tokens",
    "extra_headers",
    "model_path",
    "deployment_name",
    "api_version",
    "max_tokens_param_name",
];

/// A field's value for `show`, `None` when unset. The API key is masked.
fn provider_field(p: &ProviderConfig, field: &str) -> Option<String> {
    fn num<T: ToString>(v: Option<T>) -> Option<String> {
        v.map(|n| n.to_string())
    }
    match field {
        "type" => Some(p.kind.as_str().to_string()),
        "model" => p.model.clone(),
        "api_key" => p.api_key.as_deref().map(mask_key),
        "base_url" => p.base_url.clone(),
        "priority" => Some(p.priority.to_string()),
        "context_size" => num(p.context_size),
        "temperature" => num(p.temperature),
        "top_p" => num(p.top_p),
        "top_k" => num(p.top_k),
        "max_tokens" => num(p.max_tokens),
        "extra_headers" if !p.extra_headers.is_empty() => {
            serde_json::to_string(&p.extra_headers).ok()
        }
        "model_path" => p.model_path.clone(),
        "deployment_name" => p.deployment_name.clone(),
        "api_version" => p.api_version.clone(),
        "max_tokens_param_name" => p.max_tokens_param_name.clone(),
        _ => None,
    }
}

/// Options of `provider add`, parsed with lexopt like the main command line.
fn add_provider(
    file: &mut ConfigFile,
    rest: &[String],
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let provider = parse_add(rest)?;
    check_provider_name(&provider.name).map_err(usage)?;
    if file.provider(&provider.name).is_some() {
        return Err(usage(format!(
            "provider '{}' already exists; change it with: shepherd provider {} set FIELD VALUE",
            provider.name, provider.name
        )));
    }
    writeln!(
        out,
        "Added provider '{}' ({}).",
        provider.name,
        provider.kind.as_str()
    )?;
    file.providers.push(provider);
    Ok(())
}

fn parse_add(rest: &[String]) -> Result<ProviderConfig, CommandError> {
    let mut parser = lexopt::Parser::from_args(rest);
    let mut name: Option<String> = None;
    let mut provider = ProviderConfig::new("", ProviderKind::Openai);
    while let Some(arg) = parser.next().map_err(|e| usage(e.to_string()))? {
        match arg {
            lexopt::Arg::Value(word) if name.is_none() => {
                name = Some(word.to_string_lossy().into_owned());
            }
            lexopt::Arg::Value(word) => {
                // The original silently ignored `add NAME TYPE`; say how to give the type.
                return Err(usage(format!(
                    "unexpected argument '{}'; give the type with --type TYPE",
                    word.to_string_lossy()
                )));
            }
            lexopt::Arg::Long(flag) => {
                let flag = flag.to_string();
                let value = parser
                    .value()
                    .map_err(|_| usage(format!("--{flag} needs a value")))?;
                let value = value.to_string_lossy();
                let field = add_flag_field(&flag)?;
                set_field(&mut provider, field, &value).map_err(usage)?;
            }
            lexopt::Arg::Short(c) => {
                return Err(usage(format!("unknown option '-{c}' for provider add")))
            }
        }
    }
    provider.name =
        name.ok_or_else(|| usage(format!("provider add needs a NAME\n{}", provider_usage())))?;
    Ok(provider)
}

fn add_flag_field(flag: &str) -> Result<&'static str, CommandError> {
    let field = match flag {
        "type" => "type",
        "model" => "model",
        "api-key" => "api_key",
        "base-url" | "api-base" => "base_url",
        "priority" => "priority",
        "context-size" => "context_size",
        "model-path" => "model_path",
        _ => {
            return Err(usage(format!(
                "unknown option '--{flag}' for provider add\n{}",
                provider_usage()
            )))
        }
    };
    Ok(field)
}

fn set_provider_field(
    file: &mut ConfigFile,
    name: &str,
    field: &str,
    value: &str,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    let known = file.provider_names().join(", ");
    let provider = file.provider_mut(name).ok_or_else(|| {
        usage(format!(
            "unknown provider '{name}'; known providers: {known}"
        ))
    })?;
    let field = if field == "api_base" {
        "base_url"
    } else {
        field
    };
    set_field(provider, field, value).map_err(usage)?;
    writeln!(out, "Set {field} of provider '{name}'.")?;
    Ok(())
}

/// Sets one provider field from text; an empty value clears an optional field.
fn set_field(p: &mut ProviderConfig, field: &str, value: &str) -> Result<(), String> {
    let text = || (!value.is_empty()).then(|| value.to_string());
    match field {
        "type" => p.kind = parse_kind(value)?,
        "model" => p.model = text(),
        "api_key" => p.api_key = text(),
        "base_url" => p.base_url = text(),
        "priority" => p.priority = parse_priority(value)?,
        "context_size" => p.context_size = optional(field, value, parse_int)?,
        "temperature" => {
            p.temperature = optional(field, value, |v| args::parse_unit_float(v, 2.0))?
        }
        "top_p" => p.top_p = optional(field, value, |v| args::parse_unit_float(v, 1.0))?,
        "top_k" => p.top_k = optional(field, value, parse_int)?,
        "max_tokens" => p.max_tokens = optional(field, value, args::max_tokens)?,
        "extra_headers" => p.extra_headers = parse_headers(value)?,
        "model_path" => p.model_path = text(),
        "deployment_name" => p.deployment_name = text(),
        "api_version" => p.api_version = text(),
        "max_tokens_param_name" => p.max_tokens_param_name = text(),
        _ => {
            return Err(format!(
                "unknown provider field '{field}'; fields: {}",
                PROVIDER_FIELDS.join(", ")
            ))
        }
    }
    Ok(())
}

/// Parses `value` unless it is empty, which clears the field.
fn optional<T>(
    field: &str,
    value: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    if value.is_empty() {
        return Ok(None);
    }
    parse(value)
        .map(Some)
        .map_err(|expected| format!("invalid value '{value}' for {field}: expected {expected}"))
}

fn parse_int<T: std::str::FromStr>(value: &str) -> Result<T, String> {
    value
        .trim()
        .parse()
        .map_err(|_| "a whole number of 0 or more".to_string())
}

fn parse_kind(value: &str) -> Result<ProviderKind, String> {
    ProviderKind::parse(value).ok_or_else(|| {
        format!(
            "invalid type '{value}': expected one of {}",
            args::BACKEND_NAMES.join(", ")
        )
    })
}

fn parse_priority(value: &str) -> Result<u32, String> {
    match value.trim().parse::<u32>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!(
            "invalid priority '{value}': expected a whole number of 1 or more (lower is preferred)"
        )),
    }
}

fn parse_headers(value: &str) -> Result<std::collections::BTreeMap<String, String>, String> {
    if value.is_empty() {
        return Ok(Default::default());
    }
    serde_json::from_str(value)
        .map_err(|_| format!("invalid extra_headers '{value}': expected a JSON object of strings, e.g. {{\"X-Team\": \"a\"}}"))
}

/// Makes `name` the preferred provider: strictly the lowest priority, never below 1.
fn use_provider(
    file: &mut ConfigFile,
    name: &str,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    find(file, name)?;
    let lowest_other = file
        .providers
        .iter()
        .filter(|p| p.name != name)
        .map(|p| p.priority)
        .min();
    let chosen = match lowest_other {
        Some(low) if low > 1 => low - 1,
        Some(_) => {
            // No room below the others: move them all up one, keeping their order.
            file.providers
                .iter_mut()
                .filter(|p| p.name != name)
                .for_each(|p| p.priority = p.priority.saturating_add(1));
            1
        }
        None => crate::config::DEFAULT_PRIORITY,
    };
    if let Some(p) = file.provider_mut(name) {
        p.priority = chosen;
    }
    writeln!(
        out,
        "Provider '{name}' is now preferred (priority {chosen})."
    )?;
    Ok(())
}

fn remove_provider(
    file: &mut ConfigFile,
    name: &str,
    out: &mut dyn Write,
) -> Result<(), CommandError> {
    find(file, name)?;
    file.providers.retain(|p| p.name != name);
    writeln!(out, "Removed provider '{name}'.")?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::temp_dir;
    use std::path::PathBuf;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(String::from).collect()
    }

    /// Runs `shepherd provider LINE` and returns what it printed.
    fn provider(path: &Path, line: &str) -> String {
        let mut out = Vec::new();
        if let Err(e) = run_provider(&words(line), path, &mut out) {
            panic!("provider {line}: {e}");
        }
        String::from_utf8(out).expect("we print UTF-8")
    }

    fn provider_err(path: &Path, line: &str) -> CommandError {
        match run_provider(&words(line), path, &mut Vec::new()) {
            Ok(()) => panic!("provider {line} should fail"),
            Err(e) => e,
        }
    }

    fn fresh(label: &str) -> PathBuf {
        temp_dir(label).join("config.json")
    }

    fn loaded(path: &Path) -> ConfigFile {
        crate::config::load(path).expect("the commands write valid files")
    }

    #[test]
    fn provider_round_trip() {
        let path = fresh("prov-round");
        assert!(provider(&path, "list").contains("No providers"));
        provider(
            &path,
            "add work --type anthropic --model claude-x --api-key sk-ant-1234567890wxyz",
        );
        provider(
            &path,
            "add home --type ollama --base-url http://h:11434 --priority 50",
        );
        provider(&path, "add cloud");
        let file = loaded(&path);
        assert_eq!(file.provider_names(), ["home", "work", "cloud"]);
        assert_eq!(
            file.provider("cloud").map(|p| p.kind),
            Some(ProviderKind::Openai)
        );

        let shown = provider(&path, "work show");
        assert!(
            shown.contains("type: anthropic") && shown.contains("model: claude-x"),
            "{shown}"
        );
        assert!(shown.contains("api_key: sk-a...wxyz"), "{shown}");
        assert!(
            !shown.contains("1234567890"),
            "the key must be masked: {shown}"
        );
        assert_eq!(provider(&path, "show work"), shown);

        provider(&path, "work set model claude-y");
        provider(&path, "work set temperature 0.4");
        provider(&path, "work set api_base http://proxy");
        let work = loaded(&path)
            .provider("work")
            .cloned()
            .expect("still there");
        assert_eq!(work.model.as_deref(), Some("claude-y"));
        assert_eq!(work.temperature, Some(0.4));
        assert_eq!(work.base_url.as_deref(), Some("http://proxy"));

        provider(&path, "cloud use");
        let file = loaded(&path);
        assert_eq!(file.provider_names()[0], "cloud");
        assert_eq!(file.provider("cloud").map(|p| p.priority), Some(49));
        assert!(provider(&path, "list")
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("* cloud")));

        provider(&path, "remove home");
        provider(&path, "work remove");
        assert_eq!(loaded(&path).provider_names(), ["cloud"]);
    }

    #[test]
    fn set_with_empty_value_clears_a_field() {
        let path = fresh("prov-clear");
        provider(&path, "add a --model m");
        let args: Vec<String> = ["a", "set", "model", ""].map(String::from).to_vec();
        run_provider(&args, &path, &mut Vec::new()).expect("clearing is allowed");
        assert_eq!(
            loaded(&path).provider("a").and_then(|p| p.model.clone()),
            None
        );
    }

    #[test]
    fn use_makes_room_at_priority_one() {
        let path = fresh("prov-use");
        provider(&path, "add a --priority 1");
        provider(&path, "add b --priority 2");
        provider(&path, "add c --priority 7");
        provider(&path, "c use");
        let file = loaded(&path);
        let prio = |n: &str| file.provider(n).map(|p| p.priority);
        assert_eq!(
            (prio("c"), prio("a"), prio("b")),
            (Some(1), Some(2), Some(3))
        );
        assert_eq!(file.provider_names(), ["c", "a", "b"]);
        provider(&path, "use c");
        assert_eq!(loaded(&path).provider_names(), ["c", "a", "b"]);
    }

    #[test]
    fn unknown_keys_survive_provider_edits() {
        let path = fresh("prov-extra");
        let text = r#"{"smcp_servers": [{"name": "fs", "command": "x"}],
            "providers": [{"name": "p", "rate_limits": {"rpm": 5}}]}"#;
        std::fs::write(&path, text).expect("writable");
        provider(&path, "p set model m");
        provider(&path, "add q --type gemini");
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("written")).expect("JSON");
        assert_eq!(v["smcp_servers"][0]["command"], "x");
        assert_eq!(v["providers"][0]["rate_limits"]["rpm"], 5);
        assert_eq!(v["providers"][0]["model"], "m");
        assert!(provider(&path, "p show").contains("rate_limits: {\"rpm\":5}"));
    }

    #[test]
    fn provider_usage_errors() {
        let path = fresh("prov-err");
        provider(&path, "add a");
        let check = |line: &str, expect: &str| {
            let err = provider_err(&path, line);
            assert_eq!(err.exit_code(), 2, "{line}");
            assert!(
                err.to_string().contains(expect),
                "{line}: '{err}' lacks '{expect}'"
            );
        };
        check("add a", "already exists");
        check("add list", "reserved");
        check("add bad/name", "must be letters");
        check("add x openai", "--type");
        check("add x --type grok", "grok");
        check("add x --priority 0", "priority");
        check("add x --colour red", "--colour");
        check("add x --model", "needs a value");
        check("add", "needs a NAME");
        check("nope show", "known providers: a");
        check("use nope", "unknown provider 'nope'");
        check("a set colour red", "unknown provider field 'colour'");
        check("a set temperature 3", "temperature");
        check("a set top_k -1", "top_k");
        check("a set extra_headers nope", "JSON object");
        check("a set model", "set FIELD VALUE");
        check("a frobnicate", "unknown provider command");
        // Nothing was written by the failed commands.
        assert_eq!(loaded(&path).provider_names(), ["a"]);
    }

    #[test]
    fn malformed_config_is_a_config_error() {
        let path = fresh("prov-bad");
        std::fs::write(&path, "{\"providers\": [}").expect("writable");
        let err = provider_err(&path, "list");
        assert_eq!(err.exit_code(), 2);
        assert!(
            err.to_string()
                .starts_with(&format!("{}: line 1,", path.display())),
            "{err}"
        );
    }

    /// An output that refuses every write, like a closed pipe.
    struct ClosedPipe;

    impl Write for ClosedPipe {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn io_failures_exit_one_and_read_failures_two() {
        let path = fresh("prov-io");
        provider(&path, "add a");
        let err = run_provider(&words("list"), &path, &mut ClosedPipe).map_err(|e| e.exit_code());
        assert_eq!(err, Err(1));
        let err = config::run_config(&[], &path, &mut ClosedPipe).map_err(|e| e.exit_code());
        assert_eq!(err, Err(1));
        // A directory where the file should be cannot be read: a config problem.
        let dir = path.parent().expect("a temp file has a parent");
        assert_eq!(provider_err(dir, "list").exit_code(), 2);
    }

    #[test]
    fn masking() {
        let check = |key: &str, expect: &str| assert_eq!(mask_key(key), expect, "{key}");
        check("sk-X1234567890abcd", "sk-X...abcd");
        check("sk-proj-ünïcödé-keyzz", "sk-p...eyzz");
        check("short", "*****");
        check("", "");
        check("abcdefghijk", "********");
    }

    #[test]
    fn action_first_and_name_first_agree() {
        let cases: [(&str, ProviderAction<'_>); 6] = [
            ("", ProviderAction::List),
            ("x", ProviderAction::Show("x")),
            ("use x", ProviderAction::Use("x")),
            ("x use", ProviderAction::Use("x")),
            ("remove x", ProviderAction::Remove("x")),
            ("x set model m", ProviderAction::Set("x", "model", "m")),
        ];
        for (line, expect) in cases {
            let args = words(line);
            assert_eq!(provider_action(&args).ok(), Some(expect), "{line}");
        }
    }
}

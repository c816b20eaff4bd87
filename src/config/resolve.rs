//! Stage two of the command line: layers built-in defaults, config.json,
//! `SHEPHERD_*` variables and flags (lowest to highest) into [`Settings`].
//!
//! [`Settings`] is a plain record of values the front-ends, the agent and the
//! backend factory read; nothing here opens a connection. The environment is
//! passed in as a lookup function so tests never touch the process environment.

mod env;
mod in_process;
mod providers;
mod servers;

use env::*;
use in_process::local;
pub use in_process::LocalSettings;
pub use providers::models_dirs;
use providers::*;
use servers::{llama_server_key, server, server_auth, DEFAULT_QUEUE_SIZE};
pub use servers::{ServerAuth, ServerSettings, VertexRoutes};
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{
    load, locate, ConfigError, ConfigFile, EnvLookup, ProviderConfig, ProviderKind, SYSTEM_CONFIG,
};
use crate::args::{self, LowArgs, Subcommand, MAX_TOKEN_COUNT};
use crate::backend::http::DEFAULT_MAX_REPLY_BYTES;
use crate::backend::models::FindError;
use crate::backend::recording::Tape;
use crate::backend::Sampling;
use crate::core::SpecMode;
use crate::llama::{CacheType, Pooling, SplitMode};
use crate::tools::approval::Policy;
use crate::util::log::Category;
use crate::util::redact;

/// Used when no flag, variable or config key gives a system prompt.
pub const DEFAULT_SYSTEM_PROMPT: &str = "You are shepherd, a capable assistant running on the \
user's own machine. You can call tools to read and change files and to run commands; file tools \
operate in the current working directory, and relative paths are resolved against it. Use a tool \
when it gives a more reliable answer than guessing, check results before relying on them, and say \
plainly when something failed. Keep answers concise.";

const DEFAULT_MAX_ROUNDS: u32 = 50;
const DEFAULT_TIMEOUT_SECS: u64 = 300;
const DEFAULT_HOST: &str = "127.0.0.1";
const DEFAULT_PORT: u16 = 8000;
/// The tool server's port when `--port` is not given (the port `--tool-backend` clients expect).
const DEFAULT_TOOLSERVER_PORT: u16 = 9876;
const DEFAULT_APPROVAL_TIMEOUT_SECS: u64 = 300;
/// The name of the provider built from `--backend`/`--api-base` when no `-p` is given.
pub const CMDLINE_PROVIDER: &str = "cmdline";

/// What shepherd was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mode {
    Chat,
    JsonLines,
    CliServer,
    ApiServer,
    /// `--toolserver`: the tools over JSON-RPC, no model.
    ToolServer,
    /// `--rpc-worker`: this box's devices lent over ggml's RPC, no model, no config file.
    RpcWorker,
    /// `shepherd provider ...`, with the words after `provider`.
    Provider(Vec<String>),
    /// `shepherd config ...`, with the words after `config`.
    Config(Vec<String>),
    /// `shepherd profile ...`, with the words after `profile`.
    Profile(Vec<String>),
    /// `shepherd mcp ...`, with the words after `mcp`.
    Mcp(Vec<String>),
    /// `shepherd models ...`, with the words after `models`.
    Models(Vec<String>),
    /// `shepherd sessions ...`, with the words after `sessions`.
    Sessions(Vec<String>),
    /// `shepherd ps`, with the words after `ps`.
    Ps(Vec<String>),
    /// `shepherd pull`, with the words after `pull`.
    Pull(Vec<String>),
    /// `--list-models`: what the first provider offers.
    ListModels,
    /// `shepherd completions ...`, with the words after `completions`.
    Completions(Vec<String>),
    /// `shepherd man`, with any words after it (refused).
    Man(Vec<String>),
    /// `shepherd bench ...`: llama-bench's tests on the local model, with the words after `bench`.
    Bench(Vec<String>),
    Version,
    Help,
}

/// The reply-length request: a count, or `0` (and llama-server's `-1`) for
/// no cap of shepherd's: the in-process model stops when the context is full,
/// an API applies its own default.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokens {
    #[default]
    Uncapped,
    Limit(u32),
}

impl MaxTokens {
    fn from_count(n: i64) -> MaxTokens {
        match n {
            n if n > 0 => MaxTokens::Limit(n.min(MAX_TOKEN_COUNT as i64) as u32),
            _ => MaxTokens::Uncapped,
        }
    }

    fn limit(self) -> Option<u32> {
        match self {
            MaxTokens::Limit(n) => Some(n),
            _ => None,
        }
    }
}

/// Which tool calls run without asking, and how long asking may take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalSettings {
    /// config.json's `approvals` with `--approve`/`--deny` added.
    pub policy: Policy,
    pub timeout: Duration,
}

/// A tool server to run the tools on (`--tool-backend`, `SHEPHERD_TOOL_BACKEND`, config.json).
#[derive(Clone, PartialEq, Eq)]
pub struct ToolBackendSettings {
    pub address: String,
    pub token: Option<String>,
}

/// Never prints the token.
impl std::fmt::Debug for ToolBackendSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolBackendSettings")
            .field("address", &self.address)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// One layer's generation settings: sampling, reply length and context size
/// (config.json, a provider, environment and flags); `None` means "this layer says nothing".
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct GenerationLayer {
    temperature: Option<f32>,
    top_p: Option<f32>,
    top_k: Option<u32>,
    max_tokens: Option<i64>,
    context_size: Option<u64>,
    /// `--seed` only: no file or provider key sets it.
    seed: Option<u64>,
}

impl GenerationLayer {
    /// `self` with every value that `top` sets replaced by `top`'s.
    fn under(self, top: GenerationLayer) -> GenerationLayer {
        GenerationLayer {
            temperature: top.temperature.or(self.temperature),
            top_p: top.top_p.or(self.top_p),
            top_k: top.top_k.or(self.top_k),
            max_tokens: top.max_tokens.or(self.max_tokens),
            context_size: top.context_size.or(self.context_size),
            seed: top.seed.or(self.seed),
        }
    }

    fn of_file(file: &ConfigFile) -> GenerationLayer {
        GenerationLayer {
            temperature: file.temperature,
            top_p: file.top_p,
            top_k: file.top_k,
            max_tokens: file.max_tokens,
            context_size: file.context_size,
            seed: None,
        }
    }

    fn of_provider(p: &ProviderConfig) -> GenerationLayer {
        GenerationLayer {
            temperature: p.temperature,
            top_p: p.top_p,
            top_k: p.top_k,
            max_tokens: p.max_tokens,
            context_size: p.context_size,
            seed: None,
        }
    }

    fn to_sampling(self) -> Sampling {
        Sampling {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            max_tokens: self
                .max_tokens
                .map(MaxTokens::from_count)
                .and_then(MaxTokens::limit),
            seed: self.seed,
            ..Sampling::default()
        }
    }
}

/// Everything the front-ends need, resolved to plain values.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    pub mode: Mode,
    /// The failover chain, first choice first. Empty when nothing is configured.
    pub providers: Vec<ProviderConfig>,
    pub system_prompt: String,
    pub stream: bool,
    pub tools_enabled: bool,
    pub enable_tools: Vec<String>,
    /// config.json's `disabled_tools` followed by `--disable-tools`.
    pub disable_tools: Vec<String>,
    pub max_rounds: u32,
    pub prompt: Option<String>,
    /// `--image`: attached to `prompt`, before its text.
    pub images: Vec<PathBuf>,
    pub show_thinking: bool,
    pub stats: bool,
    pub timeout_secs: u64,
    /// The cap on one reply from an API provider (`max_reply_mb`).
    pub max_reply_bytes: u64,
    pub debug: Vec<Category>,
    /// The file `provider`/`config` commands and saves write to.
    pub config_path: PathBuf,
    pub server: ServerSettings,
    pub server_auth: ServerAuth,
    /// `--use-tools`: the API server runs shepherd's tools for its clients.
    pub use_tools: bool,
    /// `--queue-size`: API-server requests that may wait for a slot.
    pub queue_size: usize,
    pub local: LocalSettings,
    /// `Some` when `--tui`/`--no-tui` was given; always `Some(false)` outside chat mode.
    pub tui: Option<bool>,
    pub colors: bool,
    pub continue_session: bool,
    /// The profile in use (`--profile`, `SHEPHERD_PROFILE`, `active_profile`, else `default`).
    pub profile: crate::config::profile::Profile,
    /// `--fresh`: the CLI server ignores its saved session.
    pub fresh_session: bool,
    /// `--record DIR` or `--replay DIR`; off otherwise.
    pub tape: Tape,
    pub reasoning: Option<String>,
    pub mcp_enabled: bool,
    pub approvals: ApprovalSettings,
    pub tool_backend: Option<ToolBackendSettings>,
    /// config.json's `mcp_servers` (empty with `--nomcp`).
    pub mcp_servers: crate::config::mcp::McpServers,
    file_layer: GenerationLayer,
    override_layer: GenerationLayer,
}

impl Settings {
    /// Sampling for one provider: config.json < the provider's own values < environment < flags.
    pub fn sampling_for(&self, provider: &ProviderConfig) -> Sampling {
        self.layers_for(provider).to_sampling()
    }

    /// The context size to use with `provider`; `None` means the model's own.
    pub fn context_size_for(&self, provider: &ProviderConfig) -> Option<u64> {
        self.layers_for(provider).context_size.filter(|n| *n > 0)
    }

    fn layers_for(&self, provider: &ProviderConfig) -> GenerationLayer {
        self.file_layer
            .under(GenerationLayer::of_provider(provider))
            .under(self.override_layer)
    }
}

/// The system prompt: flag text, flag file, environment, config.json, built-in default.
fn system_prompt(low: &LowArgs, env: &EnvLayer, file: &ConfigFile) -> Result<String, ConfigError> {
    if let Some(text) = &low.system_prompt {
        return Ok(text.clone());
    }
    if let Some(path) = &low.system_prompt_file {
        return std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.clone(),
            message: e.to_string(),
        });
    }
    let configured = env
        .system_prompt
        .clone()
        .or_else(|| file.system_prompt.clone());
    Ok(configured.unwrap_or_else(|| DEFAULT_SYSTEM_PROMPT.to_string()))
}

/// `--chat-template`'s text, or `--chat-template-file`'s contents.
fn chat_template(low: &LowArgs) -> Result<Option<String>, ConfigError> {
    let Some(path) = &low.chat_template_file else {
        return Ok(low.chat_template.clone());
    };
    let read = |message: String| ConfigError::Read {
        path: path.clone(),
        message,
    };
    let text = std::fs::read_to_string(path).map_err(|e| read(e.to_string()))?;
    if text.trim().is_empty() {
        return Err(read("the chat template file is empty".into()));
    }
    Ok(Some(text))
}

fn mode(low: &LowArgs) -> Mode {
    if low.help {
        return Mode::Help;
    }
    if low.version {
        return Mode::Version;
    }
    match &low.subcommand {
        Some(Subcommand::Provider(rest)) => Mode::Provider(rest.clone()),
        Some(Subcommand::Config(rest)) => Mode::Config(rest.clone()),
        Some(Subcommand::Profile(rest)) => Mode::Profile(rest.clone()),
        Some(Subcommand::Mcp(rest)) => Mode::Mcp(rest.clone()),
        Some(Subcommand::Models(rest)) => Mode::Models(rest.clone()),
        Some(Subcommand::Sessions(rest)) => Mode::Sessions(rest.clone()),
        Some(Subcommand::Ps(rest)) => Mode::Ps(rest.clone()),
        Some(Subcommand::Pull(rest)) => Mode::Pull(rest.clone()),
        Some(Subcommand::Completions(rest)) => Mode::Completions(rest.clone()),
        Some(Subcommand::Man(rest)) => Mode::Man(rest.clone()),
        Some(Subcommand::Bench(rest)) => Mode::Bench(rest.clone()),
        None if low.rpc_worker => Mode::RpcWorker,
        None if low.list_models => Mode::ListModels,
        None if low.json => Mode::JsonLines,
        None if low.cliserver => Mode::CliServer,
        None if low.server => Mode::ApiServer,
        None if low.toolserver => Mode::ToolServer,
        None => Mode::Chat,
    }
}

/// Locates and loads config.json, reads the process-independent `env`, and resolves.
///
/// Help, version and the `provider`/`config` commands do not read the file here:
/// help must work with a broken config, and the commands load it themselves.
/// The credentials it resolves are registered with [`crate::util::redact`] here.
pub fn resolve(low: &LowArgs, env: EnvLookup) -> Result<Settings, ConfigError> {
    let location = locate(low.config.as_deref(), env, Path::new(SYSTEM_CONFIG));
    match mode(low) {
        Mode::Chat
        | Mode::JsonLines
        | Mode::CliServer
        | Mode::ApiServer
        | Mode::ToolServer
        | Mode::ListModels => {
            if let Some(explicit) = &low.config {
                check_explicit_config(explicit)?;
            }
            let file = load(&location.read_from)?;
            let settings = resolve_with(low, &file, location.path, env)?;
            register_secrets(&settings, &file, env);
            Ok(settings)
        }
        _ => resolve_with(low, &ConfigFile::default(), location.path, &|_| None),
    }
}

/// A config file named with `-c` must exist for a run (the `provider` and `config`
/// commands create it). llama-server's `-c` is the context size, so `-c 4096` is
/// more likely that habit than a file named 4096: say so instead of running
/// without the config.
fn check_explicit_config(path: &Path) -> Result<(), ConfigError> {
    if path.exists() {
        return Ok(());
    }
    let shown = path.display();
    let hint = match shown.to_string().parse::<u64>() {
        Ok(n) => format!(
            "; for a context window of {n} tokens use --context-size {n} (llama-server's -c)"
        ),
        Err(_) => String::new(),
    };
    Err(ConfigError::invalid(
        "-c",
        format!("the config file '{shown}' does not exist{hint}"),
    ))
}

/// Registers every credential shepherd was given with [`crate::util::redact`], so
/// debug output, the audit log and saved sessions never show one: the
/// provider keys (the chain's, every configured provider's and the usual
/// `*_API_KEY` variables, for a later provider switch), secret-named provider
/// headers, the server and tool-backend tokens and MCP servers' credentials.
fn register_secrets(settings: &Settings, file: &ConfigFile, env: EnvLookup) {
    for provider in settings.providers.iter().chain(&file.providers) {
        let headers = provider.extra_headers.iter();
        let secret_headers = headers.filter(|(name, _)| redact::is_secret_name(name));
        let values = secret_headers
            .map(|(_, value)| value)
            .chain(&provider.api_key);
        values.for_each(|value| redact::register_secret(value));
    }
    let key_vars = ProviderKind::ALL
        .iter()
        .flat_map(|kind| kind.key_env_vars());
    key_vars
        .filter_map(|name| env(name))
        .for_each(|key| redact::register_secret(&key));
    let tool_backend_token = settings
        .tool_backend
        .as_ref()
        .and_then(|t| t.token.as_ref());
    let tokens = settings.server_auth.token.iter().chain(tool_backend_token);
    tokens.for_each(|token| redact::register_secret(token));
    super::mcp::register_secrets(&file.mcp_servers, env);
}

/// Resolves `low` over an already-loaded `file`; `config_path` is recorded as is.
pub fn resolve_with(
    low: &LowArgs,
    file: &ConfigFile,
    config_path: PathBuf,
    env: EnvLookup,
) -> Result<Settings, ConfigError> {
    let env_layer = read_env(env)?;
    let mode = mode(low);
    let providers = provider_chain(file, &selection(low, &env_layer), env)?;
    let key_as_token = llama_server_key(low, &mode, &providers);
    let file_layer = GenerationLayer::of_file(file);
    let override_layer = overrides(low, &env_layer);
    let interactive = mode == Mode::Chat;
    Ok(Settings {
        providers,
        system_prompt: system_prompt(low, &env_layer, file)?,
        stream: !low.no_stream && file.streaming.unwrap_or(true),
        tools_enabled: !low.no_tools && file.tools_enabled.unwrap_or(true),
        enable_tools: low.enable_tools.clone(),
        disable_tools: [file.disabled_tools.as_slice(), &low.disable_tools].concat(),
        max_rounds: low
            .max_rounds
            .or(file.max_rounds)
            .unwrap_or(DEFAULT_MAX_ROUNDS),
        prompt: low.prompt.clone(),
        images: low.images.clone(),
        show_thinking: low.thinking || file.thinking.unwrap_or(false),
        stats: low.stats || file.stats.unwrap_or(false),
        timeout_secs: file.timeout.unwrap_or(DEFAULT_TIMEOUT_SECS),
        max_reply_bytes: file
            .max_reply_mb
            .map_or(DEFAULT_MAX_REPLY_BYTES, |mb| mb.saturating_mul(1024 * 1024)),
        debug: low
            .debug
            .clone()
            .or(env_layer.debug.clone())
            .unwrap_or_default(),
        config_path,
        server: server(low, &mode, env)?,
        server_auth: server_auth(low, env, file, key_as_token)?,
        use_tools: low.use_tools,
        queue_size: low.queue_size.map_or(DEFAULT_QUEUE_SIZE, |n| n as usize),
        local: LocalSettings {
            chat_template: chat_template(low)?,
            ..local(low, file)?
        },
        tui: if interactive { low.tui } else { Some(false) },
        colors: !low.no_colors && env("NO_COLOR").is_none_or(|v| v.is_empty()),
        continue_session: low.continue_session,
        profile: profile(low, env, file)?,
        fresh_session: low.fresh,
        tape: tape(low),
        reasoning: low.reasoning.clone(),
        mcp_enabled: !low.no_mcp,
        approvals: approvals(low, file),
        tool_backend: tool_backend(low, &env_layer, file),
        mcp_servers: if low.no_mcp {
            Default::default()
        } else {
            file.mcp_servers.clone()
        },
        mode,
        file_layer,
        override_layer,
    })
}

/// The profile named by `--profile`, `SHEPHERD_PROFILE` or config.json.
fn profile(
    low: &LowArgs,
    env: EnvLookup,
    file: &ConfigFile,
) -> Result<crate::config::profile::Profile, ConfigError> {
    let (origin, name) = match (
        &low.profile,
        env("SHEPHERD_PROFILE").filter(|v| !v.is_empty()),
    ) {
        (Some(name), _) => ("--profile", name.clone()),
        (None, Some(name)) => ("SHEPHERD_PROFILE", name),
        (None, None) => (
            "active_profile",
            crate::config::profile::active_name(file).to_string(),
        ),
    };
    crate::config::profile::find(file, &name)
        .map_err(|e| ConfigError::invalid(origin, e.to_string()))
}

/// The environment's sampling values with the flags laid over them.
fn overrides(low: &LowArgs, env: &EnvLayer) -> GenerationLayer {
    GenerationLayer {
        temperature: low.temperature.or(env.temperature),
        top_p: low.top_p,
        top_k: low.top_k,
        max_tokens: low.max_tokens.or(env.max_tokens),
        context_size: low.context_size.or(env.context_size),
        seed: low.seed,
    }
}

/// config.json's rules, then the flags' (`--approve` is an allow rule, `--deny` a deny rule).
/// The tape is only named here; the directory is touched when a backend is opened.
fn tape(low: &LowArgs) -> Tape {
    match (&low.record, &low.replay) {
        (Some(dir), _) => Tape::record(dir),
        (None, Some(dir)) => Tape::replay(dir),
        (None, None) => Tape::off(),
    }
}

fn approvals(low: &LowArgs, file: &ConfigFile) -> ApprovalSettings {
    let configured = file.approvals.clone().unwrap_or_default();
    let timeout = low
        .approval_timeout
        .or(configured.timeout)
        .unwrap_or(DEFAULT_APPROVAL_TIMEOUT_SECS);
    ApprovalSettings {
        policy: Policy {
            allow: [configured.allow.as_slice(), &low.approve].concat(),
            ask: configured.ask,
            deny: [configured.deny.as_slice(), &low.deny].concat(),
        },
        timeout: Duration::from_secs(timeout),
    }
}

/// Flag, environment, config.json; the token from the same layers.
fn tool_backend(low: &LowArgs, env: &EnvLayer, file: &ConfigFile) -> Option<ToolBackendSettings> {
    let address = low
        .tool_backend
        .clone()
        .or_else(|| env.tool_backend.clone())
        .or_else(|| file.tool_backend.clone())?;
    let token = low
        .tool_backend_token
        .clone()
        .or_else(|| env.tool_backend_token.clone())
        .or_else(|| file.tool_backend_token.clone())
        .filter(|t| !t.trim().is_empty());
    Some(ToolBackendSettings { address, token })
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::*;
    use crate::util::fs::test_support::temp_dir;

    const FILE: &str = r#"{
        "temperature": 0.5, "top_p": 0.8, "max_tokens": 1000, "context_size": 8192,
        "max_rounds": 20, "streaming": false, "system_prompt": "from file",
        "disabled_tools": ["bash"], "timeout": 60, "thinking": true,
        "providers": [
            {"name": "local", "type": "ollama", "model": "qwen", "priority": 10},
            {"name": "cloud", "model": "gpt-x", "priority": 20, "temperature": 0.9, "max_tokens": 4000},
            {"name": "claude", "type": "anthropic", "model": "c", "priority": 30, "api_key": "own"}
        ]
    }"#;

    fn file() -> ConfigFile {
        parse(FILE, Path::new("t.json")).expect("the fixture is valid")
    }

    fn low(argv: &[&str]) -> LowArgs {
        args::parse(argv).expect("test argv is valid")
    }

    fn env_map(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            owned
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    fn settings(argv: &[&str], env: &[(&str, &str)], file: &ConfigFile) -> Settings {
        resolve_with(&low(argv), file, PathBuf::from("c.json"), &env_map(env))
            .unwrap_or_else(|e| panic!("{argv:?} / {env:?} should resolve: {e}"))
    }

    fn resolve_err(argv: &[&str], env: &[(&str, &str)]) -> String {
        match resolve_with(&low(argv), &file(), PathBuf::from("c.json"), &env_map(env)) {
            Ok(s) => panic!("should fail: {s:?}"),
            Err(e) => e.to_string(),
        }
    }

    fn names(s: &Settings) -> Vec<&str> {
        s.providers.iter().map(|p| p.name.as_str()).collect()
    }

    /// The fixture's `local` provider, which sets no sampling of its own: what
    /// the product reads for it shows the file, environment and flag layers.
    fn plain_provider() -> ProviderConfig {
        file().provider("local").expect("in fixture").clone()
    }

    #[test]
    fn defaults_without_file_env_or_flags() {
        let s = settings(&[], &[], &ConfigFile::default());
        assert_eq!(s.mode, Mode::Chat);
        assert!(s.providers.is_empty());
        assert_eq!(s.system_prompt, DEFAULT_SYSTEM_PROMPT);
        assert!(s.system_prompt.contains("working directory"));
        assert_eq!(s.sampling_for(&plain_provider()), Sampling::default());
        assert_eq!(s.context_size_for(&plain_provider()), None);
        assert!(s.stream && s.tools_enabled && s.colors && !s.stats && !s.show_thinking);
        assert_eq!((s.max_rounds, s.timeout_secs), (50, 300));
        assert_eq!(
            s.server,
            ServerSettings {
                host: "127.0.0.1".into(),
                port: 8000,
                aliases: Vec::new(),
                tags: Vec::new(),
                responses_store: 100,
                verbose: false,
                slots: true,
                allow_image_urls: false,
                vertex: None,
            }
        );
        assert!(s.debug.is_empty());
    }

    #[test]
    fn vertex_ai_prediction_mode_names_its_routes_and_port() {
        let server =
            |env: &[(&str, &str)]| settings(&["--server", "--port", "9000"], env, &file()).server;
        assert_eq!(server(&[]).vertex, None);
        assert_eq!(server(&[("AIP_MODE", "TRAINING")]).vertex, None);
        let plain = server(&[("AIP_MODE", "PREDICTION")]);
        let predict = VertexRoutes {
            predict: "/predict".into(),
            health: None,
        };
        assert_eq!((plain.vertex, plain.port), (Some(predict), 9000));
        let named = server(&[
            ("AIP_MODE", "PREDICTION"),
            ("AIP_PREDICT_ROUTE", "v1/endpoints/e:predict"),
            ("AIP_HEALTH_ROUTE", "/ping"),
            ("AIP_HTTP_PORT", "8080"),
        ]);
        let routes = VertexRoutes {
            predict: "/v1/endpoints/e:predict".into(),
            health: Some("/ping".into()),
        };
        assert_eq!((named.vertex, named.port), (Some(routes), 8080));
        let error = resolve_err(
            &["--server"],
            &[("AIP_MODE", "PREDICTION"), ("AIP_HTTP_PORT", "x")],
        );
        assert!(error.contains("AIP_HTTP_PORT"), "{error}");
        assert!(
            !settings(&["--server", "--no-slots"], &[], &file())
                .server
                .slots
        );
    }

    #[test]
    fn file_values_beat_defaults() {
        let s = settings(&[], &[], &file());
        assert_eq!(names(&s), ["local", "cloud", "claude"]);
        let sampling = s.sampling_for(&s.providers[0]);
        assert_eq!(sampling.temperature, Some(0.5));
        assert_eq!(sampling.top_p, Some(0.8));
        assert_eq!(sampling.max_tokens, Some(1000));
        assert_eq!(s.context_size_for(&s.providers[0]), Some(8192));
        assert_eq!((s.max_rounds, s.timeout_secs), (20, 60));
        assert!(!s.stream && s.show_thinking);
        assert_eq!(s.system_prompt, "from file");
        assert_eq!(s.disable_tools, ["bash"]);
    }

    #[test]
    fn env_beats_file_and_flags_beat_env() {
        let env = [
            ("SHEPHERD_TEMPERATURE", "1.5"),
            ("SHEPHERD_MAX_TOKENS", "-1"),
            ("SHEPHERD_CONTEXT_SIZE", "4096"),
            ("SHEPHERD_SYSTEM_PROMPT", "from env"),
            ("SHEPHERD_DEBUG", "tools"),
        ];
        let s = settings(&[], &env, &file());
        let plain = plain_provider();
        assert_eq!(s.sampling_for(&plain).temperature, Some(1.5));
        assert_eq!(s.sampling_for(&plain).max_tokens, None);
        assert_eq!(s.context_size_for(&plain), Some(4096));
        assert_eq!(s.system_prompt, "from env");
        assert_eq!(s.debug, [Category::Tools]);

        let argv = [
            "--temperature",
            "0.1",
            "--max-tokens",
            "77",
            "--context-size",
            "2048",
            "--system-prompt",
            "from flag",
            "-d",
            "--max-rounds",
            "3",
            "--nostream",
        ];
        let s = settings(&argv, &env, &file());
        assert_eq!(s.sampling_for(&plain).temperature, Some(0.1));
        assert_eq!(s.sampling_for(&plain).max_tokens, Some(77));
        assert_eq!(s.context_size_for(&plain), Some(2048));
        assert_eq!(s.system_prompt, "from flag");
        assert_eq!(s.debug, Category::ALL);
        assert_eq!(s.max_rounds, 3);
        assert!(!s.stream);
    }

    #[test]
    fn provider_values_sit_between_file_and_env() {
        let f = file();
        let cloud = f.provider("cloud").expect("in fixture");
        let s = settings(&[], &[], &f);
        assert_eq!(s.sampling_for(cloud).temperature, Some(0.9));
        assert_eq!(
            s.sampling_for(cloud).top_p,
            Some(0.8),
            "file value shows through"
        );
        assert_eq!(s.sampling_for(cloud).max_tokens, Some(4000));
        let s = settings(&[], &[("SHEPHERD_TEMPERATURE", "0.3")], &f);
        assert_eq!(s.sampling_for(cloud).temperature, Some(0.3));
        let s = settings(
            &["--temperature", "0", "--top-k", "5", "--max-tokens", "0"],
            &[],
            &f,
        );
        assert_eq!(s.sampling_for(cloud).temperature, Some(0.0));
        assert_eq!(s.sampling_for(cloud).top_k, Some(5));
        assert_eq!(s.sampling_for(cloud).max_tokens, None);
        assert_eq!(s.context_size_for(cloud), Some(8192));
    }

    #[test]
    fn bad_env_values_name_the_variable() {
        let cases = [
            ("SHEPHERD_TEMPERATURE", "hot"),
            ("SHEPHERD_TEMPERATURE", "NaN"),
            ("SHEPHERD_MAX_TOKENS", "-5"),
            ("SHEPHERD_CONTEXT_SIZE", "big"),
            ("SHEPHERD_BACKEND", "grok"),
            ("SHEPHERD_DEBUG", "net"),
        ];
        for (name, value) in cases {
            let msg = resolve_err(&[], &[(name, value)]);
            assert!(msg.contains(name) && msg.contains(value), "{msg}");
        }
    }

    #[test]
    fn provider_flag_selects_and_overrides() {
        let s = settings(
            &[
                "-p",
                "cloud",
                "-m",
                "other",
                "--api-base",
                "http://b",
                "--api-key",
                "k",
            ],
            &[],
            &file(),
        );
        assert_eq!(names(&s), ["cloud"]);
        let p = &s.providers[0];
        assert_eq!(p.model.as_deref(), Some("other"));
        assert_eq!(p.base_url.as_deref(), Some("http://b"));
        assert_eq!(p.api_key.as_deref(), Some("k"));
        let s = settings(
            &[],
            &[("SHEPHERD_PROVIDER", "claude"), ("SHEPHERD_MODEL", "m2")],
            &file(),
        );
        assert_eq!(names(&s), ["claude"]);
        assert_eq!(s.providers[0].model.as_deref(), Some("m2"));
        let s = settings(
            &["-p", "local"],
            &[("SHEPHERD_PROVIDER", "claude")],
            &file(),
        );
        assert_eq!(names(&s), ["local"], "the flag beats the variable");
    }

    #[test]
    fn unknown_provider_lists_known_names() {
        let msg = resolve_err(&["-p", "nope"], &[]);
        assert!(
            msg.contains("'nope'") && msg.contains("local, cloud, claude"),
            "{msg}"
        );
        assert!(msg.starts_with("-p: "), "{msg}");
        let msg = resolve_err(&[], &[("SHEPHERD_PROVIDER", "nope")]);
        assert!(msg.starts_with("SHEPHERD_PROVIDER: "), "{msg}");
        let empty = ConfigFile::default();
        let err = resolve_with(&low(&["-p", "x"]), &empty, PathBuf::new(), &|_| None);
        assert!(err
            .map_err(|e| e.to_string())
            .unwrap_err()
            .contains("no providers are configured"));
    }

    #[test]
    fn backend_or_api_base_builds_a_cmdline_provider() {
        let s = settings(&["--backend", "ollama", "-m", "llama3"], &[], &file());
        assert_eq!(names(&s), ["cmdline"]);
        let p = &s.providers[0];
        assert_eq!(
            (p.kind, p.model.as_deref(), p.priority),
            (ProviderKind::Ollama, Some("llama3"), 0)
        );
        // Without --backend the type comes from the preferred provider.
        let s = settings(&["--api-base", "http://x"], &[], &file());
        assert_eq!(s.providers[0].kind, ProviderKind::Ollama);
        assert_eq!(s.providers[0].base_url.as_deref(), Some("http://x"));
        // ...or is openai when nothing is configured.
        let s = settings(&["--api-base", "http://x"], &[], &ConfigFile::default());
        assert_eq!(s.providers[0].kind, ProviderKind::Openai);
        let s = settings(
            &[],
            &[
                ("SHEPHERD_BACKEND", "gemini"),
                ("SHEPHERD_API_BASE", "http://g"),
            ],
            &file(),
        );
        assert_eq!(
            (names(&s), s.providers[0].kind),
            (vec!["cmdline"], ProviderKind::Gemini)
        );
    }

    #[test]
    fn model_alone_applies_to_the_preferred_provider() {
        let s = settings(&["-m", "qwen3"], &[], &file());
        assert_eq!(names(&s), ["local"]);
        assert_eq!(s.providers[0].model.as_deref(), Some("qwen3"));
        // With nothing configured, a name that is not local needs a provider's key.
        let s = settings(
            &["-m", "gpt-y"],
            &[("OPENAI_API_KEY", "sk")],
            &ConfigFile::default(),
        );
        assert_eq!(names(&s), ["cmdline"]);
    }

    #[test]
    fn a_gguf_model_file_means_the_in_process_backend() {
        for config in [file(), ConfigFile::default()] {
            let s = settings(&["-m", "/models/Small.GGUF"], &[], &config);
            assert_eq!(names(&s), ["cmdline"]);
            assert_eq!(s.providers[0].kind, ProviderKind::Llamacpp);
        }
        let s = settings(
            &["-m", "x.gguf", "--api-base", "http://h/v1"],
            &[],
            &ConfigFile::default(),
        );
        assert_eq!(s.providers[0].kind, ProviderKind::Openai);
    }

    #[test]
    fn a_model_name_that_is_nowhere_is_not_sent_to_openai_without_a_key() {
        let dir = crate::util::fs::test_support::temp_dir("near-names");
        for name in [
            "Qwen2.5-7B-Instruct-Q4_K_M.gguf",
            "gemma-3-270m-q4_k_m.gguf",
        ] {
            std::fs::write(dir.join(name), b"GGUF").unwrap();
        }
        let file: ConfigFile =
            serde_json::from_value(serde_json::json!({"models_dir": dir.display().to_string()}))
                .unwrap();
        let low = args::parse(["-m", "qwen2.5:7b", "-e", "hi"]).unwrap();
        let error =
            resolve_with(&low, &file, PathBuf::from("c.json"), &|_| None).expect_err("not found");
        let text = error.to_string();
        assert!(
            text.contains("not found") && text.contains(&dir.display().to_string()),
            "{text}"
        );
        assert!(
            text.contains("did you mean Qwen2.5-7B-Instruct-Q4_K_M"),
            "{text}"
        );
        assert!(!text.contains("gemma"), "{text}");
        // With a key it is OpenAI's model, as before.
        let key = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-x".to_string());
        let s = resolve_with(&low, &file, PathBuf::from("c.json"), &key).expect("openai");
        assert_eq!(s.providers[0].kind, ProviderKind::Openai);
        // A prefix of a local name is local.
        let low = args::parse(["-m", "gemma-3", "-e", "hi"]).unwrap();
        let s = resolve_with(&low, &file, PathBuf::from("c.json"), &|_| None).expect("local");
        assert_eq!(s.providers[0].kind, ProviderKind::Llamacpp);
    }

    #[test]
    fn llama_server_habits_on_the_command_line() {
        // `--server --api-key` with the model in process: the key clients must send.
        let s = settings(
            &["--server", "-m", "m.gguf", "--api-key", "k-123"],
            &[],
            &file(),
        );
        assert_eq!(s.server_auth.token.as_deref(), Some("k-123"));
        let s = settings(
            &[
                "--server",
                "-m",
                "m.gguf",
                "--api-key",
                "k",
                "--auth-token",
                "t",
            ],
            &[],
            &file(),
        );
        assert_eq!(
            s.server_auth.token.as_deref(),
            Some("t"),
            "--auth-token wins"
        );
        // In front of a provider it stays the provider's key.
        let s = settings(
            &[
                "--server",
                "--backend",
                "openai",
                "-m",
                "x",
                "--api-key",
                "sk",
            ],
            &[],
            &file(),
        );
        assert_eq!(s.server_auth.token, None);
        assert_eq!(s.providers[0].api_key.as_deref(), Some("sk"));
        // `-c 4096` is llama-server's context size, not a config file here.
        let low = args::parse(["-c", "4096", "-e", "hi"]).expect("parses");
        let error = resolve(&low, &|_| None).expect_err("no such config file");
        assert!(error.to_string().contains("--context-size 4096"), "{error}");
        // Its spellings of shepherd's flags.
        let low =
            args::parse(["-ngl", "99", "--ctx-size", "4096", "--cache-type-k", "q8_0"]).unwrap();
        assert_eq!((low.gpu_layers, low.context_size), (Some(99), Some(4096)));
        assert_eq!(low.cache_type.as_deref(), Some("q8_0"));
        let mixed = args::parse(["--cache-type-k", "q8_0", "--cache-type-v", "f16"]);
        assert!(mixed.is_err(), "one type for K and V");
    }

    #[test]
    fn llama_words_are_read_once_into_their_types() {
        let s = settings(&[], &[], &file());
        assert_eq!(
            (
                s.local.cache_type,
                s.local.pooling,
                s.local.split_mode,
                s.local.spec
            ),
            (CacheType::F16, Pooling::Mean, SplitMode::Layer, None)
        );
        let argv = [
            "--cache-type-k",
            "q8_0",
            "--pooling",
            "cls",
            "--split-mode",
            "row",
            "--spec",
            "off",
        ];
        let s = settings(&argv, &[], &file());
        assert_eq!(
            (
                s.local.cache_type,
                s.local.pooling,
                s.local.split_mode,
                s.local.spec
            ),
            (
                CacheType::Q8_0,
                Pooling::Cls,
                SplitMode::Row,
                Some(SpecMode::Off)
            )
        );
        assert_eq!(
            settings(&["--rerank"], &[], &file()).local.pooling,
            Pooling::Rank
        );
        // A word the type does not know: the flag and every word it has.
        let cases: [(&str, &[&str]); 4] = [
            ("--cache-type", &CacheType::NAMES),
            ("--pooling", &Pooling::NAMES),
            ("--split-mode", &SplitMode::NAMES),
            ("--spec", &SpecMode::NAMES),
        ];
        for (flag, names) in cases {
            let error = resolve_err(&[flag, "bogus"], &[]);
            let listed = format!("expected one of {}", names.join(", "));
            assert!(error.starts_with(flag), "{error}");
            assert!(
                error.contains("'bogus'") && error.contains(&listed),
                "{error}"
            );
        }
    }

    #[test]
    fn every_listed_word_parses() {
        assert!(CacheType::NAMES
            .iter()
            .all(|n| CacheType::parse(n).is_some()));
        assert!(Pooling::NAMES.iter().all(|n| Pooling::parse(n).is_some()));
        assert!(SplitMode::NAMES
            .iter()
            .all(|n| SplitMode::parse(n).is_some()));
        assert!(SpecMode::NAMES.iter().all(|n| SpecMode::parse(n).is_some()));
    }

    #[test]
    fn api_keys_come_from_the_usual_variables() {
        let env = [
            ("OPENAI_API_KEY", "sk-env"),
            ("ANTHROPIC_API_KEY", "ant-env"),
        ];
        let s = settings(&[], &env, &file());
        let key = |name: &str| {
            s.providers
                .iter()
                .find(|p| p.name == name)
                .and_then(|p| p.api_key.clone())
        };
        assert_eq!(key("cloud").as_deref(), Some("sk-env"));
        assert_eq!(
            key("claude").as_deref(),
            Some("own"),
            "a configured key wins"
        );
        assert_eq!(key("local"), None, "ollama takes no key");
        let s = settings(
            &["--backend", "gemini"],
            &[("GOOGLE_API_KEY", "g")],
            &file(),
        );
        assert_eq!(s.providers[0].api_key.as_deref(), Some("g"));
        let s = settings(
            &["--backend", "gemini"],
            &[("GEMINI_API_KEY", "a"), ("GOOGLE_API_KEY", "g")],
            &file(),
        );
        assert_eq!(s.providers[0].api_key.as_deref(), Some("a"));
    }

    #[test]
    fn system_prompt_file_is_read_and_missing_file_named() {
        let dir = temp_dir("sysprompt");
        let path = dir.join("sp.txt");
        std::fs::write(&path, "from a file").expect("writable");
        let argv = [
            "--system-prompt-file",
            path.to_str().expect("utf-8 temp path"),
        ];
        assert_eq!(
            settings(&argv, &[("SHEPHERD_SYSTEM_PROMPT", "env")], &file()).system_prompt,
            "from a file"
        );
        let missing = dir.join("gone.txt");
        let msg = resolve_err(
            &["--system-prompt-file", missing.to_str().expect("utf-8")],
            &[],
        );
        assert!(msg.contains("gone.txt"), "{msg}");
    }

    #[test]
    fn chat_template_seed_and_alias_reach_the_settings() {
        let dir = temp_dir("chattemplate");
        let path = dir.join("t.jinja");
        std::fs::write(&path, "{{ messages[0].content }}").expect("writable");
        let file_arg = path.to_str().expect("utf-8 temp path");
        let s = settings(
            &[
                "--chat-template-file",
                file_arg,
                "--seed",
                "9",
                "--alias",
                "m",
            ],
            &[],
            &file(),
        );
        assert_eq!(
            s.local.chat_template.as_deref(),
            Some("{{ messages[0].content }}")
        );
        assert_eq!(s.sampling_for(&plain_provider()).seed, Some(9));
        assert_eq!(s.server.aliases, ["m"]);
        let many = settings(
            &["--alias", "tiny,fim,code", "--tags", "b,a,b"],
            &[],
            &file(),
        );
        assert_eq!(many.server.aliases, ["code", "fim", "tiny"]);
        assert_eq!(many.server.tags, ["a", "b"]);
        let given = settings(&["--chat-template", "chatml"], &[], &file());
        assert_eq!(given.local.chat_template.as_deref(), Some("chatml"));
        std::fs::write(&path, " \n").expect("writable");
        assert!(resolve_err(&["--chat-template-file", file_arg], &[]).contains("empty"));
        let missing = dir.join("gone.jinja");
        let msg = resolve_err(
            &["--chat-template-file", missing.to_str().expect("utf-8")],
            &[],
        );
        assert!(msg.contains("gone.jinja"), "{msg}");
    }

    #[test]
    fn modes_and_switches() {
        let check =
            |argv: &[&str], expect: Mode| assert_eq!(settings(argv, &[], &file()).mode, expect);
        check(&["--json"], Mode::JsonLines);
        check(&["--cliserver"], Mode::CliServer);
        check(&["--server"], Mode::ApiServer);
        check(&["-v", "--json"], Mode::Version);
        check(&["-h", "-v"], Mode::Help);
        check(&["provider", "list"], Mode::Provider(vec!["list".into()]));
        check(&["config"], Mode::Config(vec![]));
        let s = settings(
            &["--server", "--tui", "--port", "9000", "--host", "0.0.0.0"],
            &[],
            &file(),
        );
        assert_eq!(
            (s.tui, s.server.port, s.server.host.as_str()),
            (Some(false), 9000, "0.0.0.0")
        );
        let s = settings(
            &[
                "--notools",
                "--disable-tools",
                "web*",
                "--enable-tools",
                "read",
            ],
            &[("NO_COLOR", "1")],
            &file(),
        );
        assert!(!s.tools_enabled && !s.colors);
        assert_eq!(s.disable_tools, ["bash", "web*"]);
        assert_eq!(s.enable_tools, ["read"]);
    }

    #[test]
    fn help_works_with_a_broken_config_file() {
        let dir = temp_dir("broken");
        let path = dir.join("config.json");
        std::fs::write(&path, "{ nope").expect("writable");
        let path_arg = path.to_str().expect("utf-8");
        let s = resolve(&low(&["-c", path_arg, "-h"]), &|_| None).expect("help ignores the file");
        assert_eq!((s.mode, s.config_path), (Mode::Help, path.clone()));
        let err = resolve(&low(&["-c", path_arg]), &|_| None).map_err(|e| e.to_string());
        assert!(err
            .unwrap_err()
            .starts_with(&format!("{}: line 1, column 3: ", path.display())));
    }

    #[test]
    fn resolved_credentials_are_registered_for_redaction() {
        let dir = temp_dir("secrets");
        let path = dir.join("config.json");
        let config = r#"{
            "providers": [
                {"name": "a", "type": "openai", "api_key": "cfg-key-a-0123456789"},
                {"name": "b", "type": "openai", "api_key": "cfg-key-b-0123456789",
                 "extra_headers": {"X-Org-Token": "hdr-tok-0123456789", "X-Team": "team-name-public"}}
            ],
            "mcp_servers": {"m": {"url": "http://h/mcp", "headers": {"Authorization": "Bearer ${MCP_T}"},
                                  "env": {"GH_TOKEN": "mcp-env-0123456789"}}}
        }"#;
        std::fs::write(&path, config).unwrap();
        let argv = [
            "-c",
            path.to_str().unwrap(),
            "-p",
            "a",
            "--auth-token",
            "auth-flag-0123456789",
            "--tool-backend",
            "127.0.0.1:9",
            "--tool-backend-token",
            "tb-flag-0123456789",
        ];
        let env = env_map(&[
            ("ANTHROPIC_API_KEY", "env-ant-0123456789"),
            ("MCP_T", "mcp-bearer-0123456789"),
        ]);
        resolve(&low(&argv), &env).expect("resolves");
        let secrets = [
            "cfg-key-a-0123456789",
            "cfg-key-b-0123456789",
            "hdr-tok-0123456789",
            "env-ant-0123456789",
            "auth-flag-0123456789",
            "tb-flag-0123456789",
            "mcp-bearer-0123456789",
            "mcp-env-0123456789",
        ];
        for secret in secrets {
            let text = format!("prose mentions {secret} once");
            assert_eq!(
                redact::known_secrets(&text),
                "prose mentions [REDACTED] once",
                "{secret} was not registered"
            );
        }
        assert_eq!(
            redact::known_secrets("team-name-public"),
            "team-name-public"
        );
    }

    #[test]
    fn server_token_layers_and_never_prints() {
        let with_token = ConfigFile {
            auth_token: Some("from-file".into()),
            cors_origins: vec!["https://a.example".into()],
            ..ConfigFile::default()
        };
        let env = [("SHEPHERD_AUTH_TOKEN", "from-env")];
        let token = |argv: &[&str], env: &[(&str, &str)]| {
            settings(argv, env, &with_token).server_auth.token
        };
        assert_eq!(token(&[], &[]).as_deref(), Some("from-file"));
        assert_eq!(token(&[], &env).as_deref(), Some("from-env"));
        assert_eq!(
            token(&["--auth-token", "flag"], &env).as_deref(),
            Some("flag")
        );
        let dir = crate::util::fs::test_support::temp_dir("token");
        let path = dir.join("token");
        std::fs::write(&path, "  from-token-file \nignored\n").unwrap();
        let argv = ["--auth-token-file", path.to_str().unwrap()];
        assert_eq!(token(&argv, &env).as_deref(), Some("from-token-file"));
        let auth = settings(&["--cors-origin", "https://b.example"], &env, &with_token).server_auth;
        assert_eq!(
            auth.cors_origins,
            ["https://a.example", "https://b.example"]
        );
        assert!(!format!("{auth:?}").contains("from-env"));
        std::fs::write(&path, "\n").unwrap();
        assert!(resolve_with(&low(&argv), &with_token, PathBuf::new(), &|_| None).is_err());
    }
}

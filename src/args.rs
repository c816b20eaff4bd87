//! Stage one of the command line: what the user typed, as a plain record.
//!
//! [`parse`] turns argv into [`LowArgs`] with lexopt. It checks syntax and
//! number ranges but knows nothing about the config file; `config::resolve`
//! (stage two) layers these values over defaults, config.json and the
//! environment to build `config::Settings`.
//!
//! One static table, [`FLAGS`], says which flags exist, which take a value and
//! how they are described; the parser and the generated `--help` text both
//! read it, so the two cannot drift apart.
//!
//! The first positional word is a subcommand (`provider`, `config`, ...; the
//! table in [`subcommands`]): everything after it is kept verbatim for
//! `commands`, which parses it itself. [`complete`] turns both tables into
//! shell completion scripts and the man page.

pub mod complete;
pub mod subcommands;
mod values;

pub use values::*;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::log::Category;

/// The one-line usage shown with every usage error and at the top of `--help`.
pub const USAGE: &str = "Usage: shepherd [FLAGS] [COMMAND [ACTION] [ARGS...]]";

/// What shepherd is, in the help's and the man page's first line.
pub const DESCRIPTION: &str = "LLM chat client and tool-running agent";

/// A command line that cannot be understood. The front-end prints it with
/// [`USAGE`] and exits with status 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError(pub String);

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UsageError {}

/// Which part of `--help` a flag is listed under, in display order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Provider,
    Generation,
    Prompting,
    Tools,
    Output,
    Modes,
    Local,
    General,
}

impl Section {
    pub const ALL: [Section; 8] = [
        Section::Provider,
        Section::Generation,
        Section::Prompting,
        Section::Tools,
        Section::Output,
        Section::Modes,
        Section::Local,
        Section::General,
    ];

    pub fn title(self) -> &'static str {
        match self {
            Section::Provider => "Provider and model",
            Section::Generation => "Generation and sampling",
            Section::Prompting => "Prompting",
            Section::Tools => "Tools",
            Section::Output => "Output",
            Section::Modes => "Front-end modes and servers",
            Section::Local => "Local models (llama.cpp)",
            Section::General => "General",
        }
    }
}

/// Whether a flag takes a value, and how the value is named in `--help`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Takes {
    Nothing,
    Value(&'static str),
    /// Only as `--flag=VALUE` or `-fVALUE`; a following separate word is not taken.
    OptionalValue(&'static str),
}

/// Identifies a flag so the parser's dispatch is checked for completeness by the compiler.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlagId {
    Provider,
    ListModels,
    Model,
    Backend,
    ApiBase,
    ApiKey,
    Prompt,
    SystemPrompt,
    SystemPromptFile,
    MaxTokens,
    Temperature,
    TopP,
    TopK,
    ContextSize,
    NoStream,
    NoTools,
    EnableTools,
    DisableTools,
    MaxRounds,
    Json,
    Stats,
    Thinking,
    Config,
    Debug,
    Version,
    Help,
    CliServer,
    Server,
    Host,
    Port,
    AuthToken,
    AuthTokenFile,
    NoAuth,
    CorsOrigin,
    Tui,
    NoTui,
    NoColors,
    Continue,
    GpuLayers,
    SplitMode,
    TensorSplit,
    MainGpu,
    Rpc,
    RpcWorker,
    RpcAllowRemote,
    ModelPath,
    Threads,
    NBatch,
    UBatch,
    CacheType,
    FlashAttn,
    Parallel,
    Pooling,
    NoPromptCache,
    Spec,
    DraftMax,
    ModelDraft,
    Reasoning,
    NoMcp,
    UseTools,
    QueueSize,
    ToolServer,
    ToolBackend,
    ToolBackendToken,
    Approve,
    Deny,
    ApprovalTimeout,
    Profile,
    Fresh,
    Record,
    Replay,
    Seed,
    Alias,
    ChatTemplate,
    ChatTemplateFile,
    SlotSavePath,
}

/// One row of the flag table.
#[derive(Debug, Clone, Copy)]
pub struct Flag {
    pub id: FlagId,
    pub long: &'static str,
    /// Other accepted long spellings (llama-server's among them), shown beside
    /// the flag in `--help`, not on lines of their own.
    pub aliases: &'static [&'static str],
    pub short: Option<char>,
    pub takes: Takes,
    pub help: &'static str,
    pub section: Section,
}

const fn flag(
    id: FlagId,
    long: &'static str,
    short: Option<char>,
    takes: Takes,
    section: Section,
    help: &'static str,
) -> Flag {
    Flag {
        id,
        long,
        aliases: &[],
        short,
        takes,
        help,
        section,
    }
}

const fn aliased(base: Flag, aliases: &'static [&'static str]) -> Flag {
    Flag { aliases, ..base }
}

use Section as S;
use Takes::{Nothing, OptionalValue as Opt, Value as Val};

/// Every flag shepherd accepts. The parser and `--help` are both driven by this table.
// One row per line reads as a table; rustfmt would explode each row into eight lines.
#[rustfmt::skip]
pub const FLAGS: &[Flag] = &[
    flag(FlagId::Provider, "provider", Some('p'), Val("NAME"), S::Provider, "Use the configured provider NAME only"),
    flag(FlagId::Model, "model", Some('m'), Val("MODEL"), S::Provider, "Model name (overrides the provider's model); a local GGUF file by path, name or unique prefix"),
    flag(FlagId::ListModels, "list-models", None, Nothing, S::Provider, "List the models the provider offers (local GGUF files for the in-process model), then exit"),
    flag(FlagId::Backend, "backend", None, Val("TYPE"), S::Provider, "openai|anthropic|gemini|ollama|llamacpp|tensorrt|cli; builds a one-off provider"),
    flag(FlagId::ApiBase, "api-base", None, Val("URL"), S::Provider, "Base URL of the API; builds a one-off provider"),
    flag(FlagId::ApiKey, "api-key", None, Val("KEY"), S::Provider, "API key (prefer the config file or *_API_KEY: argv is visible in ps)"),
    flag(FlagId::MaxTokens, "max-tokens", None, Val("N"), S::Generation, "Reply length: -1 = model maximum, 0 = automatic, N = at most N tokens"),
    flag(FlagId::Temperature, "temperature", None, Val("T"), S::Generation, "Sampling temperature, 0 to 2"),
    flag(FlagId::TopP, "top-p", None, Val("P"), S::Generation, "Nucleus sampling, 0 to 1"),
    flag(FlagId::TopK, "top-k", None, Val("K"), S::Generation, "Top-k sampling, 0 or more"),
    flag(FlagId::Seed, "seed", None, Val("N"), S::Generation, "Sampling seed, for answers that repeat (default: a new one each time)"),
    aliased(flag(FlagId::ContextSize, "context-size", None, Val("N"), S::Generation, "Context window in tokens (0 = the model's full context)"), &["ctx-size"]),
    flag(FlagId::Reasoning, "reasoning", None, Val("LEVEL"), S::Generation, "Reasoning effort: off|low|medium|high"),
    flag(FlagId::Prompt, "prompt", Some('e'), Val("TEXT"), S::Prompting, "Answer TEXT once, then exit"),
    flag(FlagId::SystemPrompt, "system-prompt", None, Val("TEXT"), S::Prompting, "System prompt text"),
    flag(FlagId::SystemPromptFile, "system-prompt-file", None, Val("FILE"), S::Prompting, "Read the system prompt from FILE"),
    flag(FlagId::NoTools, "notools", None, Nothing, S::Tools, "Offer no tools to the model"),
    flag(FlagId::EnableTools, "enable-tools", None, Val("GLOB[,GLOB]"), S::Tools, "Enable only matching tools (repeatable; applied after --disable-tools)"),
    flag(FlagId::DisableTools, "disable-tools", None, Val("GLOB[,GLOB]"), S::Tools, "Disable matching tools (repeatable)"),
    flag(FlagId::MaxRounds, "max-rounds", None, Val("N"), S::Tools, "Most model calls per turn, 1 to 1000 (default 50)"),
    flag(FlagId::NoMcp, "nomcp", None, Nothing, S::Tools, "Do not start MCP servers"),
    flag(FlagId::Approve, "approve", None, Val("GLOB[,GLOB]"), S::Tools, "Run matching tools without asking; 'all' for every tool (repeatable)"),
    flag(FlagId::Deny, "deny", None, Val("GLOB[,GLOB]"), S::Tools, "Never run matching tools (repeatable; beats --approve)"),
    flag(FlagId::ApprovalTimeout, "approval-timeout", None, Val("SECS"), S::Tools, "Seconds an approval may take before the call is denied, 1 to 86400 (default 300)"),
    flag(FlagId::ToolBackend, "tool-backend", None, Val("HOST:PORT"), S::Tools, "Run tools on a `shepherd --toolserver` there instead of here"),
    flag(FlagId::ToolBackendToken, "tool-backend-token", None, Val("TOKEN"), S::Tools, "Token for --tool-backend (prefer SHEPHERD_TOOL_BACKEND_TOKEN: argv is visible in ps)"),
    flag(FlagId::Profile, "profile", None, Val("NAME"), S::Tools, "Use profile NAME: its tools, MCP servers and guidelines"),
    flag(FlagId::NoStream, "nostream", None, Nothing, S::Output, "Wait for whole replies instead of streaming"),
    flag(FlagId::Stats, "stats", None, Nothing, S::Output, "Show token counts and speed after each reply"),
    flag(FlagId::Thinking, "thinking", None, Nothing, S::Output, "Show the model's reasoning"),
    flag(FlagId::Tui, "tui", None, Nothing, S::Output, "Use the full-screen interface"),
    flag(FlagId::NoTui, "no-tui", None, Nothing, S::Output, "Use the line interface"),
    flag(FlagId::NoColors, "no-colors", None, Nothing, S::Output, "No colours in the output"),
    flag(FlagId::Json, "json", None, Nothing, S::Modes, "JSON lines on stdin and stdout"),
    flag(FlagId::CliServer, "cliserver", None, Nothing, S::Modes, "Serve one shared session over HTTP for `--backend cli` clients"),
    flag(FlagId::Server, "server", None, Nothing, S::Modes, "Serve an OpenAI-compatible API"),
    flag(FlagId::ToolServer, "toolserver", None, Nothing, S::Modes, "Serve the tools as JSON-RPC lines over TCP (default port 9876)"),
    flag(FlagId::RpcWorker, "rpc-worker", None, Nothing, S::Modes, "Lend this box's GPUs (else its CPU) to --rpc hosts over ggml's RPC (port 50052; no authentication)"),
    flag(FlagId::RpcAllowRemote, "rpc-allow-remote", None, Nothing, S::Modes, "--rpc-worker: allow a --host that is not loopback (trusted networks only)"),
    flag(FlagId::Host, "host", None, Val("ADDR[,ADDR]"), S::Modes, "Address the servers listen on (--server and --cliserver: several, comma-separated)"),
    flag(FlagId::Port, "port", None, Val("PORT"), S::Modes, "Port the servers listen on, 1 to 65535 (0 = any free port)"),
    flag(FlagId::AuthToken, "auth-token", None, Val("TOKEN"), S::Modes, "Token the servers require (prefer --auth-token-file: argv is visible in ps)"),
    flag(FlagId::AuthTokenFile, "auth-token-file", None, Val("FILE"), S::Modes, "Read the servers' token from FILE"),
    flag(FlagId::NoAuth, "no-auth", None, Nothing, S::Modes, "Servers: no token (loopback only; any local user can then run tools as you)"),
    flag(FlagId::CorsOrigin, "cors-origin", None, Val("ORIGIN"), S::Modes, "Web origin allowed to call the servers (repeatable)"),
    flag(FlagId::UseTools, "use-tools", None, Nothing, S::Modes, "--server runs shepherd's own tools for its clients"),
    flag(FlagId::Alias, "alias", None, Val("NAME"), S::Modes, "--server: the model id clients see (default: the model's file name)"),
    flag(FlagId::QueueSize, "queue-size", None, Val("N"), S::Modes, "--server: requests that may wait for a slot, 0 to 4096 (default 16)"),
    flag(FlagId::Continue, "continue", None, Nothing, S::Modes, "Continue the last saved session in this directory"),
    flag(FlagId::Fresh, "fresh", None, Nothing, S::Modes, "CLI server: start with an empty session instead of the saved one"),
    flag(FlagId::Record, "record", None, Val("DIR"), S::General, "Record every upstream request and response (secrets redacted) into DIR, for bug reports"),
    flag(FlagId::Replay, "replay", None, Val("DIR"), S::General, "Serve the upstream responses recorded in DIR instead of contacting the provider"),
    aliased(flag(FlagId::ModelPath, "model-path", None, Val("PATH"), S::Local, "GGUF model file or directory"), &["model_path"]),
    aliased(flag(FlagId::GpuLayers, "gpu-layers", None, Val("N"), S::Local, "Layers on the GPU (-1 = all; llama-server's -ngl too)"), &["n-gpu-layers"]),
    flag(FlagId::SplitMode, "split-mode", None, Val("MODE"), S::Local, "Several GPUs: none (all on --main-gpu), layer (default) or row"),
    flag(FlagId::TensorSplit, "tensor-split", None, Val("A,B,..."), S::Local, "Several GPUs: each GPU's share of the layers, e.g. 3,1 (default: by free memory)"),
    flag(FlagId::MainGpu, "main-gpu", None, Val("N"), S::Local, "The GPU for the whole model with --split-mode none, else for its small tensors (default 0)"),
    flag(FlagId::Rpc, "rpc", None, Val("HOST:PORT,..."), S::Local, "Spread the model's layers over these `shepherd --rpc-worker`s (trusted network only)"),
    flag(FlagId::Threads, "threads", None, Val("N"), S::Local, "CPU threads (default: one per core up to 16; 2 with every layer on a GPU)"),
    flag(FlagId::NBatch, "n_batch", None, Val("N"), S::Local, "Logical batch size"),
    flag(FlagId::UBatch, "ubatch", None, Val("N"), S::Local, "Physical batch size (default 512; 256 on the CPU without flash attention)"),
    aliased(flag(FlagId::CacheType, "cache-type", None, Val("TYPE"), S::Local, "KV cache type, K and V alike: f16|f32|q8_0|q4_0"), &["cache-type-k", "cache-type-v"]),
    flag(FlagId::FlashAttn, "flash-attn", None, Opt("on|off|auto"), S::Local, "Flash attention; alone = on (default auto: off on the CPU for heads up to 64 wide)"),
    flag(FlagId::Parallel, "parallel", None, Val("N"), S::Local, "Requests decoded together in one batch (slots), 1 to 64 (default 1)"),
    flag(FlagId::ChatTemplate, "chat-template", None, Val("JINJA|chatml"), S::Local, "Chat template instead of the model's own: Jinja source, or chatml"),
    flag(FlagId::ChatTemplateFile, "chat-template-file", None, Val("FILE"), S::Local, "Read the chat template (Jinja) from FILE"),
    flag(FlagId::SlotSavePath, "slot-save-path", None, Val("DIR"), S::Local, "--server: where POST /slots/N?action=save|restore keeps slot caches (off without it)"),
    flag(FlagId::Pooling, "pooling", None, Val("TYPE"), S::Local, "--server: how /v1/embeddings pools a sequence: mean|cls|last (default mean)"),
    flag(FlagId::NoPromptCache, "no-prompt-cache", None, Nothing, S::Local, "Neither restore nor save decoded prompts on disk (kv_cache_max_mb caps them)"),
    flag(FlagId::Spec, "spec", None, Val("MODE"), S::Local, "Speculative decoding: off, ngram (default: drafts from the context itself) or draft (--model-draft)"),
    flag(FlagId::DraftMax, "draft-max", None, Val("N"), S::Local, "Speculative decoding: most tokens drafted at once, 1 to 64 (default 64)"),
    flag(FlagId::ModelDraft, "model-draft", None, Val("FILE"), S::Local, "A small GGUF model with the model's vocabulary that drafts for it (implies --spec draft)"),
    flag(FlagId::Config, "config", Some('c'), Val("FILE"), S::General, "Read and write FILE instead of the default config.json"),
    flag(FlagId::Debug, "debug", Some('d'), Opt("llm,tools,http"), S::General, "Debug output to stderr for these categories (none given = all)"),
    flag(FlagId::Version, "version", Some('v'), Nothing, S::General, "Print the version and exit"),
    flag(FlagId::Help, "help", Some('h'), Nothing, S::General, "Print this help and exit"),
];

/// A subcommand and the words after it, kept for `commands` to parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subcommand {
    Provider(Vec<String>),
    Config(Vec<String>),
    Profile(Vec<String>),
    Mcp(Vec<String>),
    Models(Vec<String>),
    Sessions(Vec<String>),
    Ps(Vec<String>),
    Pull(Vec<String>),
    Completions(Vec<String>),
    Man(Vec<String>),
    Bench(Vec<String>),
}

impl Subcommand {
    /// The command's name, as in [`subcommands::COMMANDS`].
    pub fn name(&self) -> &'static str {
        match self {
            Subcommand::Provider(_) => "provider",
            Subcommand::Config(_) => "config",
            Subcommand::Profile(_) => "profile",
            Subcommand::Mcp(_) => "mcp",
            Subcommand::Models(_) => "models",
            Subcommand::Sessions(_) => "sessions",
            Subcommand::Ps(_) => "ps",
            Subcommand::Pull(_) => "pull",
            Subcommand::Completions(_) => "completions",
            Subcommand::Man(_) => "man",
            Subcommand::Bench(_) => "bench",
        }
    }

    /// The words after the command's name.
    pub fn words(&self) -> &[String] {
        match self {
            Subcommand::Provider(w)
            | Subcommand::Config(w)
            | Subcommand::Profile(w)
            | Subcommand::Mcp(w)
            | Subcommand::Models(w)
            | Subcommand::Sessions(w)
            | Subcommand::Ps(w)
            | Subcommand::Pull(w)
            | Subcommand::Completions(w)
            | Subcommand::Man(w)
            | Subcommand::Bench(w) => w,
        }
    }
}

/// Everything that was typed, checked for syntax and ranges, with no defaults applied.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LowArgs {
    pub subcommand: Option<Subcommand>,
    pub provider: Option<String>,
    pub list_models: bool,
    pub model: Option<String>,
    pub backend: Option<String>,
    pub api_base: Option<String>,
    pub api_key: Option<String>,
    pub prompt: Option<String>,
    pub system_prompt: Option<String>,
    pub system_prompt_file: Option<PathBuf>,
    pub max_tokens: Option<i64>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub context_size: Option<u64>,
    pub reasoning: Option<String>,
    pub no_stream: bool,
    pub no_tools: bool,
    pub enable_tools: Vec<String>,
    pub disable_tools: Vec<String>,
    pub max_rounds: Option<u32>,
    pub no_mcp: bool,
    /// `--approve` globs, in order.
    pub approve: Vec<String>,
    /// `--deny` globs, in order.
    pub deny: Vec<String>,
    pub approval_timeout: Option<u64>,
    pub tool_backend: Option<String>,
    pub tool_backend_token: Option<String>,
    pub toolserver: bool,
    pub json: bool,
    pub stats: bool,
    pub thinking: bool,
    /// `Some(true)` for `--tui`, `Some(false)` for `--no-tui`; the last one typed wins.
    pub tui: Option<bool>,
    pub no_colors: bool,
    pub cliserver: bool,
    pub server: bool,
    pub use_tools: bool,
    pub queue_size: Option<u32>,
    pub host: Option<String>,
    pub port: Option<u16>,
    pub auth_token: Option<String>,
    pub auth_token_file: Option<PathBuf>,
    pub cors_origins: Vec<String>,
    pub continue_session: bool,
    pub profile: Option<String>,
    pub fresh: bool,
    /// `--record DIR`.
    pub record: Option<PathBuf>,
    /// `--replay DIR`.
    pub replay: Option<PathBuf>,
    pub no_auth: bool,
    pub model_path: Option<PathBuf>,
    pub gpu_layers: Option<i32>,
    pub split_mode: Option<String>,
    pub tensor_split: Option<Vec<f32>>,
    pub main_gpu: Option<u32>,
    /// `--rpc` workers, in order (repeatable, comma-separated).
    pub rpc: Vec<String>,
    pub rpc_worker: bool,
    pub rpc_allow_remote: bool,
    pub threads: Option<u32>,
    pub n_batch: Option<u32>,
    pub ubatch: Option<u32>,
    pub cache_type: Option<String>,
    /// `Some(true)`/`Some(false)` forced on or off; `None` is auto.
    pub flash_attn: Option<bool>,
    pub no_prompt_cache: bool,
    /// `--spec`, `--draft-max`, `--model-draft`.
    pub spec: Option<String>,
    pub draft_max: Option<u32>,
    pub model_draft: Option<PathBuf>,
    pub parallel: Option<u32>,
    pub pooling: Option<String>,
    /// `--chat-template` (Jinja source or `chatml`), `--chat-template-file`.
    pub chat_template: Option<String>,
    pub chat_template_file: Option<PathBuf>,
    /// `--slot-save-path`: the directory slot saves and restores use.
    pub slot_save_path: Option<PathBuf>,
    pub seed: Option<u64>,
    pub alias: Option<String>,
    pub config: Option<PathBuf>,
    /// `Some` when `-d` was given: the categories named, or all of them.
    pub debug: Option<Vec<Category>>,
    pub version: bool,
    pub help: bool,
}

/// Largest accepted `--max-tokens` and `--context-size`: well above any real model,
/// low enough that arithmetic on it cannot overflow.
pub const MAX_TOKEN_COUNT: u64 = 10_000_000;
/// Upper bound of `--parallel` (llama.cpp sequences in one context).
pub const MAX_PARALLEL: u32 = 64;
/// Upper bound of `--max-rounds`; 0 (unlimited) is refused so a looping model always stops.
pub const MAX_ROUNDS_LIMIT: u32 = 1000;

/// Parses the process's own arguments (without the program name).
pub fn parse_env() -> Result<LowArgs, UsageError> {
    parse(std::env::args_os().skip(1))
}

/// Parses `args` (without the program name) into a [`LowArgs`].
pub fn parse<I>(args: I) -> Result<LowArgs, UsageError>
where
    I: IntoIterator,
    I::Item: Into<OsString>,
{
    let args = args.into_iter().map(|arg| {
        let arg: OsString = arg.into();
        // llama-server's one single-dash long flag people type from habit.
        match arg.to_str() {
            Some("-ngl") => OsString::from("--gpu-layers"),
            _ => arg,
        }
    });
    let mut parser = lexopt::Parser::from_args(args);
    let mut low = LowArgs::default();
    while let Some(arg) = parser.next().map_err(lexopt_error)? {
        match arg {
            lexopt::Arg::Long(name) => {
                let found = find_long(name).ok_or_else(|| unknown(&format!("--{name}")))?;
                take_flag(&mut parser, &mut low, found)?;
            }
            lexopt::Arg::Short(c) => {
                let found = find_short(c).ok_or_else(|| unknown(&format!("-{c}")))?;
                take_flag(&mut parser, &mut low, found)?;
            }
            lexopt::Arg::Value(word) => {
                low.subcommand = Some(subcommand(word, &mut parser)?);
            }
        }
    }
    check_combinations(&low)?;
    Ok(low)
}

fn find_long(name: &str) -> Option<&'static Flag> {
    FLAGS
        .iter()
        .find(|f| f.long == name || f.aliases.contains(&name))
}

fn find_short(c: char) -> Option<&'static Flag> {
    FLAGS.iter().find(|f| f.short == Some(c))
}

fn unknown(spelled: &str) -> UsageError {
    UsageError(format!("unknown flag '{spelled}' (see --help)"))
}

fn lexopt_error(err: lexopt::Error) -> UsageError {
    match err {
        lexopt::Error::UnexpectedValue { option, value } => UsageError(format!(
            "flag '{option}' takes no value, but was given '{}'",
            value.to_string_lossy()
        )),
        other => UsageError(other.to_string()),
    }
}

/// Takes the first positional word as the subcommand and keeps everything after it.
fn subcommand(word: OsString, parser: &mut lexopt::Parser) -> Result<Subcommand, UsageError> {
    let word = utf8(word, "argument")?;
    let make = match word.as_str() {
        "provider" => Subcommand::Provider,
        "config" => Subcommand::Config,
        "profile" => Subcommand::Profile,
        "mcp" => Subcommand::Mcp,
        "models" => Subcommand::Models,
        "sessions" => Subcommand::Sessions,
        "ps" => Subcommand::Ps,
        "pull" => Subcommand::Pull,
        "completions" => Subcommand::Completions,
        "man" => Subcommand::Man,
        "bench" => Subcommand::Bench,
        _ => {
            return Err(UsageError(format!(
                "unexpected argument '{word}' (commands are {}; use -e TEXT for a prompt)",
                subcommands::command_names()
            )))
        }
    };
    let rest = parser.raw_args().map_err(lexopt_error)?;
    let rest = rest
        .map(|a| utf8(a, "argument"))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(make(rest))
}

fn utf8(value: OsString, what: &str) -> Result<String, UsageError> {
    value.into_string().map_err(|v| {
        UsageError(format!(
            "{what} '{}' is not valid UTF-8",
            v.to_string_lossy()
        ))
    })
}

/// Reads the flag's value, if it takes one, and records it.
fn take_flag(
    parser: &mut lexopt::Parser,
    low: &mut LowArgs,
    flag: &'static Flag,
) -> Result<(), UsageError> {
    let value = match flag.takes {
        Takes::Nothing => None,
        Takes::Value(name) => Some(parser.value().map_err(|_| missing(flag, name))?),
        Takes::OptionalValue(_) => parser.optional_value(),
    };
    match value {
        None => set_switch(low, flag.id),
        Some(raw) if is_path_flag(flag.id) => set_path(low, flag.id, PathBuf::from(raw)),
        Some(raw) => set_value(
            low,
            flag,
            &utf8(raw, &format!("value for --{}", flag.long))?,
        )?,
    }
    Ok(())
}

fn missing(flag: &Flag, value_name: &str) -> UsageError {
    UsageError(format!("flag --{} needs a value ({value_name})", flag.long))
}

fn is_path_flag(id: FlagId) -> bool {
    matches!(
        id,
        FlagId::Config
            | FlagId::SystemPromptFile
            | FlagId::ModelPath
            | FlagId::ModelDraft
            | FlagId::AuthTokenFile
            | FlagId::ChatTemplateFile
            | FlagId::SlotSavePath
            | FlagId::Record
            | FlagId::Replay
    )
}

fn set_path(low: &mut LowArgs, id: FlagId, path: PathBuf) {
    match id {
        FlagId::Config => low.config = Some(path),
        FlagId::SystemPromptFile => low.system_prompt_file = Some(path),
        FlagId::AuthTokenFile => low.auth_token_file = Some(path),
        FlagId::Record => low.record = Some(path),
        FlagId::Replay => low.replay = Some(path),
        FlagId::ModelDraft => low.model_draft = Some(path),
        FlagId::ChatTemplateFile => low.chat_template_file = Some(path),
        FlagId::SlotSavePath => low.slot_save_path = Some(path),
        _ => low.model_path = Some(path),
    }
}

/// Records a flag that was given without a value.
fn set_switch(low: &mut LowArgs, id: FlagId) {
    match id {
        FlagId::NoStream => low.no_stream = true,
        FlagId::NoTools => low.no_tools = true,
        FlagId::NoMcp => low.no_mcp = true,
        FlagId::Json => low.json = true,
        FlagId::Stats => low.stats = true,
        FlagId::Thinking => low.thinking = true,
        FlagId::Tui => low.tui = Some(true),
        FlagId::NoTui => low.tui = Some(false),
        FlagId::NoColors => low.no_colors = true,
        FlagId::NoPromptCache => low.no_prompt_cache = true,
        FlagId::CliServer => low.cliserver = true,
        FlagId::Server => low.server = true,
        FlagId::UseTools => low.use_tools = true,
        FlagId::ToolServer => low.toolserver = true,
        FlagId::Continue => low.continue_session = true,
        FlagId::Fresh => low.fresh = true,
        FlagId::ListModels => low.list_models = true,
        FlagId::RpcWorker => low.rpc_worker = true,
        FlagId::RpcAllowRemote => low.rpc_allow_remote = true,
        FlagId::NoAuth => low.no_auth = true,
        FlagId::FlashAttn => low.flash_attn = Some(true),
        FlagId::Version => low.version = true,
        FlagId::Help => low.help = true,
        // `-d` alone turns every category on.
        FlagId::Debug => low.debug = Some(Category::ALL.to_vec()),
        // Flags with a required value never arrive here without one.
        _ => {}
    }
}

/// Records a flag's value, converting and range-checking numbers.
fn set_value(low: &mut LowArgs, flag: &Flag, raw: &str) -> Result<(), UsageError> {
    let text = || Some(raw.to_string());
    match flag.id {
        FlagId::Provider => low.provider = text(),
        FlagId::Profile => low.profile = text(),
        FlagId::Model => low.model = text(),
        FlagId::Backend => low.backend = Some(backend_name(raw)?),
        FlagId::ApiBase => low.api_base = text(),
        FlagId::ApiKey => low.api_key = text(),
        FlagId::Prompt => low.prompt = text(),
        FlagId::SystemPrompt => low.system_prompt = text(),
        FlagId::Reasoning => low.reasoning = Some(choice(flag, raw, &REASONING_LEVELS)?),
        FlagId::Pooling => low.pooling = Some(choice(flag, raw, &POOLING_MODES)?),
        FlagId::Spec => low.spec = Some(choice(flag, raw, &SPEC_MODES)?),
        FlagId::CacheType => {
            let chosen = choice(flag, raw, &CACHE_TYPES)?;
            // `--cache-type-k` and `--cache-type-v` (llama-server) name one type here.
            if low
                .cache_type
                .as_ref()
                .is_some_and(|before| *before != chosen)
            {
                return Err(UsageError(format!(
                    "--{}: shepherd keeps K and V in one cache type; give one --cache-type",
                    flag.long
                )));
            }
            low.cache_type = Some(chosen);
        }
        FlagId::FlashAttn => {
            low.flash_attn = match choice(flag, raw, &FLASH_ATTN_MODES)?.as_str() {
                "on" => Some(true),
                "off" => Some(false),
                _ => None,
            }
        }
        FlagId::Host => low.host = Some(hosts(flag, raw)?),
        FlagId::Alias => low.alias = Some(alias(flag, raw)?),
        FlagId::ChatTemplate => low.chat_template = Some(chat_template(flag, raw)?),
        FlagId::AuthToken => low.auth_token = text(),
        FlagId::CorsOrigin => low.cors_origins.push(raw.to_string()),
        FlagId::EnableTools => low.enable_tools.extend(split_globs(raw)),
        FlagId::DisableTools => low.disable_tools.extend(split_globs(raw)),
        FlagId::Approve => low.approve.extend(split_globs(raw)),
        FlagId::Deny => low.deny.extend(split_globs(raw)),
        FlagId::ToolBackend => low.tool_backend = Some(host_port(flag, raw)?),
        FlagId::Rpc => low.rpc.extend(rpc_workers(flag, raw)?),
        FlagId::ToolBackendToken => low.tool_backend_token = text(),
        FlagId::Debug => low.debug = Some(debug_categories(raw).map_err(|e| bad(flag, raw, &e))?),
        _ => set_number(low, flag, raw)?,
    }
    Ok(())
}

/// Rejects flag combinations that contradict each other.
fn check_combinations(low: &LowArgs) -> Result<(), UsageError> {
    let conflicts = [
        (
            low.system_prompt.is_some() && low.system_prompt_file.is_some(),
            "--system-prompt",
            "--system-prompt-file",
        ),
        (
            low.chat_template.is_some() && low.chat_template_file.is_some(),
            "--chat-template",
            "--chat-template-file",
        ),
        (low.json && low.server, "--json", "--server"),
        (low.json && low.cliserver, "--json", "--cliserver"),
        (low.server && low.cliserver, "--server", "--cliserver"),
        (
            low.record.is_some() && low.replay.is_some(),
            "--record",
            "--replay",
        ),
        (low.toolserver && low.json, "--toolserver", "--json"),
        (low.toolserver && low.server, "--toolserver", "--server"),
        (
            low.toolserver && low.cliserver,
            "--toolserver",
            "--cliserver",
        ),
    ];
    if let Some((_, a, b)) = conflicts.iter().find(|(clash, _, _)| *clash) {
        return Err(UsageError(format!("{a} and {b} cannot be used together")));
    }
    check_rpc_worker(low)
}

/// `--rpc-worker` is a mode of its own: it serves devices, no model, no front-end.
fn check_rpc_worker(low: &LowArgs) -> Result<(), UsageError> {
    if low.rpc_allow_remote && !low.rpc_worker {
        return Err(UsageError(
            "--rpc-allow-remote only applies to --rpc-worker".into(),
        ));
    }
    if !low.rpc_worker {
        return Ok(());
    }
    let others = [
        (!low.rpc.is_empty(), "--rpc"),
        (low.server, "--server"),
        (low.cliserver, "--cliserver"),
        (low.toolserver, "--toolserver"),
        (low.json, "--json"),
        (low.prompt.is_some(), "--prompt"),
        (low.model.is_some(), "--model"),
    ];
    match others.iter().find(|(given, _)| *given) {
        Some((_, other)) => Err(UsageError(format!(
            "--rpc-worker and {other} cannot be used together: a worker only lends its devices"
        ))),
        None => Ok(()),
    }
}

/// The full `--help` text, generated from [`FLAGS`] and grouped by [`Section`].
pub fn help_text() -> String {
    let mut out = format!(
        "shepherd {}: {DESCRIPTION}\n\n{USAGE}\n\n{}",
        env!("CARGO_PKG_VERSION"),
        subcommands::commands_help()
    );
    let width = FLAGS.iter().map(|f| flag_label(f).len()).max().unwrap_or(0);
    for section in Section::ALL {
        out.push_str(&format!("\n{}:\n", section.title()));
        for f in FLAGS.iter().filter(|f| f.section == section) {
            out.push_str(&format!("  {:width$}  {}\n", flag_label(f), f.help));
        }
    }
    out
}

/// `-m, --model MODEL` as shown in the help's left column.
fn flag_label(f: &Flag) -> String {
    // Long-only flags are indented so every `--name` starts in the same column.
    let short = f
        .short
        .map_or_else(|| "    ".to_string(), |c| format!("-{c}, "));
    let alias: String = f.aliases.iter().map(|a| format!(", --{a}")).collect();
    let value = match f.takes {
        Takes::Nothing => String::new(),
        Takes::Value(name) => format!(" {name}"),
        Takes::OptionalValue(name) => format!("[={name}]"),
    };
    format!("{short}--{}{alias}{value}", f.long)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(args: &[&str]) -> LowArgs {
        match parse(args) {
            Ok(low) => low,
            Err(e) => panic!("{args:?} should parse, got: {e}"),
        }
    }

    /// Asserts that `args` is refused with a message containing every piece of `expect`.
    fn check_err(args: &[&str], expect: &[&str]) {
        match parse(args) {
            Ok(low) => panic!("{args:?} should fail, parsed as {low:?}"),
            Err(UsageError(msg)) => {
                for piece in expect {
                    assert!(msg.contains(piece), "{args:?}: '{msg}' lacks '{piece}'");
                }
            }
        }
    }

    #[test]
    fn text_flags_long_and_short() {
        let low = ok(&[
            "-p",
            "work",
            "--model=gpt-x",
            "--backend",
            "ollama",
            "--api-base",
            "http://h:1",
            "--api-key",
            "k1",
            "-e",
            "hi",
            "--system-prompt",
            "be brief",
        ]);
        assert_eq!(low.provider.as_deref(), Some("work"));
        assert_eq!(low.model.as_deref(), Some("gpt-x"));
        assert_eq!(low.backend.as_deref(), Some("ollama"));
        assert_eq!(low.api_base.as_deref(), Some("http://h:1"));
        assert_eq!(low.api_key.as_deref(), Some("k1"));
        assert_eq!(low.prompt.as_deref(), Some("hi"));
        assert_eq!(low.system_prompt.as_deref(), Some("be brief"));
        assert_eq!(ok(&["-mfoo"]).model.as_deref(), Some("foo"));
    }

    #[test]
    fn numbers_in_range() {
        let low = ok(&[
            "--max-tokens",
            "-1",
            "--temperature",
            "0.25",
            "--top-p",
            "1",
            "--top-k",
            "0",
            "--context-size",
            "10000000",
            "--max-rounds",
            "1000",
            "--port",
            "65535",
            "--gpu-layers",
            "-1",
            "--threads",
            "8",
            "--n_batch",
            "512",
            "--ubatch",
            "256",
            "--parallel",
            "64",
        ]);
        assert_eq!(low.max_tokens, Some(-1));
        assert_eq!(low.temperature, Some(0.25));
        assert_eq!(low.top_p, Some(1.0));
        assert_eq!(low.top_k, Some(0));
        assert_eq!(low.context_size, Some(10_000_000));
        assert_eq!(low.max_rounds, Some(1000));
        assert_eq!(low.port, Some(65535));
        assert_eq!(low.gpu_layers, Some(-1));
        assert_eq!(
            (low.threads, low.n_batch, low.ubatch),
            (Some(8), Some(512), Some(256))
        );
        assert_eq!(low.parallel, Some(64));
        assert_eq!(ok(&["--max-tokens", "0"]).max_tokens, Some(0));
    }

    #[test]
    fn numbers_out_of_range_name_the_flag_and_value() {
        check_err(
            &["--temperature", "2.5"],
            &["--temperature", "'2.5'", "0 to 2"],
        );
        check_err(&["--temperature", "NaN"], &["--temperature", "NaN"]);
        check_err(&["--temperature", "inf"], &["--temperature", "inf"]);
        check_err(&["--temperature", "-0.1"], &["--temperature", "-0.1"]);
        check_err(&["--top-p", "1.01"], &["--top-p", "1.01", "0 to 1"]);
        check_err(&["--top-k", "-3"], &["--top-k", "-3"]);
        check_err(&["--max-tokens", "-2"], &["--max-tokens", "-2"]);
        check_err(&["--max-tokens", "10000001"], &["--max-tokens", "10000001"]);
        check_err(&["--max-tokens", "lots"], &["--max-tokens", "lots"]);
        check_err(&["--context-size", "10000001"], &["--context-size"]);
        check_err(
            &["--max-rounds", "0"],
            &["--max-rounds", "'0'", "1 to 1000"],
        );
        check_err(&["--max-rounds", "1001"], &["--max-rounds", "1001"]);
        check_err(&["--port", "-1"], &["--port", "'-1'", "0 to 65535"]);
        check_err(&["--port", "65536"], &["--port", "65536"]);
        check_err(&["--gpu-layers", "-2"], &["--gpu-layers", "-2"]);
        check_err(&["--threads", "0"], &["--threads"]);
        check_err(&["--parallel", "0"], &["--parallel", "'0'", "1 to 64"]);
        check_err(&["--parallel", "65"], &["--parallel", "65"]);
    }

    #[test]
    fn unknown_flags_and_missing_values() {
        check_err(&["--frobnicate"], &["unknown flag", "--frobnicate"]);
        check_err(&["-x"], &["unknown flag", "-x"]);
        check_err(&["--model"], &["--model", "needs a value", "MODEL"]);
        check_err(&["-p"], &["--provider", "needs a value"]);
        check_err(&["--nostream=yes"], &["nostream", "takes no value", "yes"]);
        check_err(&["hello"], &["unexpected argument", "hello"]);
    }

    #[test]
    fn choices_are_checked() {
        check_err(&["--backend", "grok"], &["--backend", "grok", "openai"]);
        check_err(&["--reasoning", "max"], &["--reasoning", "max", "high"]);
        check_err(&["--cache-type", "q2"], &["--cache-type", "q2"]);
        assert_eq!(
            ok(&["--cache-type", "q8_0"]).cache_type.as_deref(),
            Some("q8_0")
        );
        check_err(&["--pooling", "none"], &["--pooling", "none", "mean"]);
        assert_eq!(ok(&["--pooling", "cls"]).pooling.as_deref(), Some("cls"));
        check_err(&["--flash-attn=1"], &["--flash-attn", "on, off, auto"]);
        assert_eq!(ok(&["--flash-attn=off"]).flash_attn, Some(false));
        assert_eq!(ok(&["--flash-attn=on"]).flash_attn, Some(true));
        assert_eq!(ok(&["--flash-attn", "--flash-attn=auto"]).flash_attn, None);
        assert_eq!(ok(&[]).flash_attn, None);
    }

    #[test]
    fn conflicting_flags_are_refused() {
        check_err(
            &["--system-prompt", "a", "--system-prompt-file", "f"],
            &["--system-prompt", "--system-prompt-file"],
        );
        check_err(&["--json", "--server"], &["--json", "--server"]);
        check_err(&["--cliserver", "--server"], &["--server", "--cliserver"]);
    }

    #[test]
    fn switches() {
        let low = ok(&[
            "--nostream",
            "--notools",
            "--json",
            "--stats",
            "--thinking",
            "--no-colors",
            "--continue",
            "--flash-attn",
            "--nomcp",
            "-v",
            "-h",
        ]);
        assert!(low.no_stream && low.no_tools && low.json && low.stats && low.thinking);
        assert!(low.no_colors && low.continue_session && low.no_mcp);
        assert_eq!(low.flash_attn, Some(true));
        assert!(low.version && low.help);
        assert_eq!(ok(&["--tui", "--no-tui"]).tui, Some(false));
        assert_eq!(ok(&["--no-tui", "--tui"]).tui, Some(true));
        assert!(ok(&["--cliserver"]).cliserver);
        assert!(ok(&["--server", "--host", "::1"]).server);
        assert_eq!(LowArgs::default(), ok(&[]));
    }

    #[test]
    fn tool_globs_repeat_and_split_on_commas() {
        let low = ok(&[
            "--enable-tools",
            "read_*,grep",
            "--enable-tools",
            "web*",
            "--disable-tools",
            " bash ,",
        ]);
        assert_eq!(low.enable_tools, ["read_*", "grep", "web*"]);
        assert_eq!(low.disable_tools, ["bash"]);
    }

    #[test]
    fn approvals_and_the_tool_backend() {
        let low = ok(&[
            "--approve",
            "read,grep",
            "--approve=all",
            "--deny",
            "bash",
            "--approval-timeout",
            "5",
            "--tool-backend",
            "[::1]:9876",
            "--toolserver",
        ]);
        assert_eq!(low.approve, ["read", "grep", "all"]);
        assert_eq!(low.deny, ["bash"]);
        assert_eq!(low.approval_timeout, Some(5));
        assert_eq!(low.tool_backend.as_deref(), Some("[::1]:9876"));
        assert!(low.toolserver);
        check_err(
            &["--tool-backend", "localhost"],
            &["--tool-backend", "HOST:PORT"],
        );
        check_err(&["--tool-backend", "h:0"], &["--tool-backend"]);
        check_err(&["--approval-timeout", "0"], &["--approval-timeout"]);
        check_err(&["--toolserver", "--json"], &["--toolserver", "--json"]);
    }

    #[test]
    fn debug_takes_an_optional_list() {
        assert_eq!(ok(&["-d"]).debug, Some(Category::ALL.to_vec()));
        assert_eq!(ok(&["--debug"]).debug, Some(Category::ALL.to_vec()));
        assert_eq!(
            ok(&["--debug=http,llm"]).debug,
            Some(vec![Category::Http, Category::Llm])
        );
        assert_eq!(ok(&["-dtools"]).debug, Some(vec![Category::Tools]));
        // A separate word after -d is not its value.
        let low = ok(&["-d", "config"]);
        assert_eq!(low.debug, Some(Category::ALL.to_vec()));
        assert_eq!(low.subcommand, Some(Subcommand::Config(vec![])));
        check_err(&["--debug=net"], &["--debug", "net"]);
        assert_eq!(ok(&[]).debug, None);
    }

    #[test]
    fn paths_and_aliases() {
        let low = ok(&[
            "-c",
            "/tmp/x.json",
            "--model_path",
            "/m.gguf",
            "--system-prompt-file",
            "sp.txt",
        ]);
        assert_eq!(low.config, Some(PathBuf::from("/tmp/x.json")));
        assert_eq!(low.model_path, Some(PathBuf::from("/m.gguf")));
        assert_eq!(low.system_prompt_file, Some(PathBuf::from("sp.txt")));
        assert_eq!(
            ok(&["--model-path", "a"]).model_path,
            Some(PathBuf::from("a"))
        );
    }

    #[test]
    fn subcommand_keeps_the_rest_verbatim() {
        let low = ok(&[
            "-c", "f.json", "provider", "add", "x", "--type", "ollama", "-h",
        ]);
        assert_eq!(low.config, Some(PathBuf::from("f.json")));
        let rest = ["add", "x", "--type", "ollama", "-h"]
            .map(String::from)
            .to_vec();
        assert_eq!(low.subcommand, Some(Subcommand::Provider(rest)));
        assert!(!low.help, "flags after the subcommand belong to it");
        let low = ok(&["config", "temperature", "0.3"]);
        assert_eq!(
            low.subcommand,
            Some(Subcommand::Config(vec!["temperature".into(), "0.3".into()]))
        );
    }

    #[test]
    fn help_lists_every_flag_by_section() {
        let help = help_text();
        assert!(help.starts_with("shepherd "));
        assert!(help.contains(USAGE));
        for f in FLAGS {
            assert!(
                help.contains(&format!("--{}", f.long)),
                "help lacks --{}",
                f.long
            );
            assert!(help.contains(f.help), "help lacks the text of --{}", f.long);
            if let Some(c) = f.short {
                assert!(help.contains(&format!("-{c}, --{}", f.long)));
            }
            for a in f.aliases {
                assert!(help.contains(&format!("--{a}")));
            }
        }
        for s in Section::ALL {
            assert!(help.contains(&format!("\n{}:\n", s.title())));
        }
    }

    #[test]
    fn every_value_flag_is_parsed_by_the_table() {
        // Each flag that takes a value must accept some value and reject nonsense
        // only with its own name in the message: proves the dispatch covers the table.
        for f in FLAGS.iter().filter(|f| matches!(f.takes, Takes::Value(_))) {
            if let Err(UsageError(msg)) = parse([format!("--{}", f.long), "zzz".to_string()]) {
                assert!(msg.contains(&format!("--{}", f.long)), "{msg}");
                assert!(!msg.contains("not understood"), "{msg}");
            }
        }
    }

    #[test]
    fn llama_servers_seed_alias_and_chat_template_flags() {
        let low = ok(&[
            "--seed",
            "42",
            "--alias",
            "my model",
            "--chat-template",
            "chatml",
        ]);
        assert_eq!(low.seed, Some(42));
        assert_eq!(low.alias.as_deref(), Some("my model"));
        assert_eq!(low.chat_template.as_deref(), Some("chatml"));
        let jinja = "{% for m in messages %}{{ m.content }}{% endfor %}";
        assert_eq!(
            ok(&["--chat-template", jinja]).chat_template.as_deref(),
            Some(jinja)
        );
        assert_eq!(
            ok(&["--chat-template-file", "t.jinja"]).chat_template_file,
            Some(PathBuf::from("t.jinja"))
        );
        check_err(&["--seed", "-1"], &["--seed", "whole number"]);
        check_err(&["--alias", " padded"], &["--alias"]);
        check_err(&["--alias", ""], &["--alias"]);
        check_err(
            &["--chat-template", "llama3"],
            &["chatml", "--chat-template-file"],
        );
        check_err(
            &[
                "--chat-template",
                "chatml",
                "--chat-template-file",
                "t.jinja",
            ],
            &["--chat-template", "--chat-template-file"],
        );
    }

    #[test]
    fn short_flags_are_unique() {
        for (i, a) in FLAGS.iter().enumerate() {
            for b in &FLAGS[i + 1..] {
                assert!(
                    a.short.is_none() || a.short != b.short,
                    "{} / {}",
                    a.long,
                    b.long
                );
                assert_ne!(a.long, b.long);
            }
        }
    }
}

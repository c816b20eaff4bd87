//! Stage one of the command line: what the user typed, as a plain record.
//!
//! [`parse`] turns argv into [`LowArgs`] with lexopt. It checks syntax and
//! number ranges but knows nothing about the config file; `config::resolve`
//! (stage two) layers these values over defaults, config.json and the
//! environment to build `config::Settings`.
//!
//! One static table, [`FLAGS`], defines each flag once: its spellings, its
//! value, its help, what its value completes from and how it updates
//! [`LowArgs`] ([`Apply`]). The parser, `--help`, the completion scripts and the
//! man page all read it, so they cannot drift apart; `scripts/check-flags.py`
//! (run by `make check-layers`) fails on a second table.
//!
//! The first positional word is a subcommand (`provider`, `config`, ...; the
//! table in [`subcommands`]): everything after it is kept verbatim for
//! `commands`, which parses it itself. [`complete`] turns both tables into
//! shell completion scripts and the man page.

pub mod complete;
mod flag;
pub mod subcommands;
mod values;

use flag::flag;
pub use flag::{Apply, Flag, Section, Takes};
pub use values::*;

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

use crate::util::log::Category;

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

use subcommands::{NameKind, Values};
use Section as S;
use Takes::{Nothing, OptionalValue as Opt, Value as Val};

/// Every flag shepherd accepts, each defined here once (see [`Flag`]).
// Each flag's lines read as one entry; rustfmt would explode them.
#[rustfmt::skip]
pub const FLAGS: &[Flag] = &[
    flag("provider", Some('p'), Val("NAME"), S::Provider, "Use the configured provider NAME only")
        .values(Values::Names(NameKind::Providers))
        .text(|low, raw| low.provider = Some(raw)),
    flag("model", Some('m'), Val("MODEL"), S::Provider, "Model name (overrides the provider's model); a local GGUF file by path, name or unique prefix")
        .text(|low, raw| low.model = Some(raw)),
    flag("list-models", None, Nothing, S::Provider, "List the models the provider offers (local GGUF files for the in-process model), then exit")
        .switch(|low| low.list_models = true),
    flag("backend", None, Val("TYPE"), S::Provider, "openai|anthropic|gemini|ollama|llamacpp|tensorrt|cli; builds a one-off provider")
        .values(Values::Choices(&BACKEND_NAMES))
        .value(|low, _, raw| { low.backend = Some(backend_name(raw)?); Ok(()) }),
    flag("api-base", None, Val("URL"), S::Provider, "Base URL of the API; builds a one-off provider")
        .text(|low, raw| low.api_base = Some(raw)),
    flag("api-key", None, Val("KEY"), S::Provider, "API key (prefer the config file or *_API_KEY: argv is visible in ps)")
        .text(|low, raw| low.api_key = Some(raw)),
    flag("max-tokens", None, Val("N"), S::Generation, "Reply length: N = at most N tokens; 0, or -1 as llama-server spells it, = no cap (in process: until the context is full; an API: its default)")
        .value(|low, flag, raw| { low.max_tokens = Some(max_tokens(raw).map_err(|e| bad(flag, raw, &e))?); Ok(()) }),
    flag("temperature", None, Val("T"), S::Generation, "Sampling temperature, 0 to 2")
        .value(|low, flag, raw| { low.temperature = Some(ranged_f32(flag, raw, 2.0)?); Ok(()) }),
    flag("top-p", None, Val("P"), S::Generation, "Nucleus sampling, 0 to 1")
        .value(|low, flag, raw| { low.top_p = Some(ranged_f32(flag, raw, 1.0)?); Ok(()) }),
    flag("top-k", None, Val("K"), S::Generation, "Top-k sampling, 0 or more")
        .value(|low, flag, raw| { low.top_k = Some(ranged(flag, raw, 0, u32::MAX as u64)? as u32); Ok(()) }),
    flag("seed", None, Val("N"), S::Generation, "Sampling seed, for answers that repeat (default: a new one each time)")
        .value(|low, flag, raw| { low.seed = Some(ranged(flag, raw, 0, u64::from(u32::MAX) - 1)?); Ok(()) }),
    flag("context-size", None, Val("N"), S::Generation, "Context window in tokens (0 = the model's full context)")
        .aliases(&["ctx-size"])
        .value(|low, flag, raw| { low.context_size = Some(ranged(flag, raw, 0, MAX_TOKEN_COUNT)?); Ok(()) }),
    flag("reasoning", None, Val("LEVEL"), S::Generation, "Reasoning: off|on|auto (the model's default)|low|medium|high")
        .values(Values::Choices(&REASONING_LEVELS))
        .value(|low, flag, raw| { low.reasoning = Some(choice(flag, raw, &REASONING_LEVELS)?); Ok(()) }),
    flag("prompt", Some('e'), Val("TEXT"), S::Prompting, "Answer TEXT once, then exit")
        .text(|low, raw| low.prompt = Some(raw)),
    flag("image", None, Val("FILE|URL"), S::Prompting, "Attach an image (PNG, JPEG, WebP, GIF) to the -e prompt, before its text (repeatable)")
        .path(|low, path| low.images.push(path)),
    flag("system-prompt", None, Val("TEXT"), S::Prompting, "System prompt text")
        .text(|low, raw| low.system_prompt = Some(raw)),
    flag("system-prompt-file", None, Val("FILE"), S::Prompting, "Read the system prompt from FILE")
        .path(|low, path| low.system_prompt_file = Some(path)),
    flag("notools", None, Nothing, S::Tools, "Offer no tools to the model")
        .switch(|low| low.no_tools = true),
    flag("enable-tools", None, Val("GLOB[,GLOB]"), S::Tools, "Enable only matching tools (repeatable; applied after --disable-tools)")
        .text(|low, raw| low.enable_tools.extend(split_globs(&raw))),
    flag("disable-tools", None, Val("GLOB[,GLOB]"), S::Tools, "Disable matching tools (repeatable)")
        .text(|low, raw| low.disable_tools.extend(split_globs(&raw))),
    flag("max-rounds", None, Val("N"), S::Tools, "Most model calls per turn, 1 to 1000 (default 50)")
        .value(|low, flag, raw| { low.max_rounds = Some(max_rounds(raw).map_err(|e| bad(flag, raw, &e))?); Ok(()) }),
    flag("nomcp", None, Nothing, S::Tools, "Do not start MCP servers")
        .switch(|low| low.no_mcp = true),
    flag("approve", None, Val("GLOB[,GLOB]"), S::Tools, "Run matching tools without asking; 'all' for every tool (repeatable)")
        .values(Values::Choices(&APPROVE_WORDS))
        .text(|low, raw| low.approve.extend(split_globs(&raw))),
    flag("deny", None, Val("GLOB[,GLOB]"), S::Tools, "Never run matching tools (repeatable; beats --approve)")
        .text(|low, raw| low.deny.extend(split_globs(&raw))),
    flag("approval-timeout", None, Val("SECS"), S::Tools, "Seconds an approval may take before the call is denied, 1 to 86400 (default 300)")
        .value(|low, flag, raw| { low.approval_timeout = Some(ranged(flag, raw, 1, 86_400)?); Ok(()) }),
    flag("tool-backend", None, Val("HOST:PORT"), S::Tools, "Run tools on a `shepherd --toolserver` there instead of here")
        .value(|low, flag, raw| { low.tool_backend = Some(host_port(flag, raw)?); Ok(()) }),
    flag("tool-backend-token", None, Val("TOKEN"), S::Tools, "Token for --tool-backend (prefer SHEPHERD_TOOL_BACKEND_TOKEN: argv is visible in ps)")
        .text(|low, raw| low.tool_backend_token = Some(raw)),
    flag("profile", None, Val("NAME"), S::Tools, "Use profile NAME: its tools, MCP servers and guidelines")
        .values(Values::Names(NameKind::Profiles))
        .text(|low, raw| low.profile = Some(raw)),
    flag("nostream", None, Nothing, S::Output, "Wait for whole replies instead of streaming")
        .switch(|low| low.no_stream = true),
    flag("stats", None, Nothing, S::Output, "Show token counts and speed after each reply")
        .switch(|low| low.stats = true),
    flag("thinking", None, Nothing, S::Output, "Show the model's reasoning")
        .switch(|low| low.thinking = true),
    flag("tui", None, Nothing, S::Output, "Use the full-screen interface")
        .switch(|low| low.tui = Some(true)),
    flag("no-tui", None, Nothing, S::Output, "Use the line interface")
        .switch(|low| low.tui = Some(false)),
    flag("no-colors", None, Nothing, S::Output, "No colours in the output")
        .switch(|low| low.no_colors = true),
    flag("json", None, Nothing, S::Modes, "JSON lines on stdin and stdout")
        .switch(|low| low.json = true),
    flag("cliserver", None, Nothing, S::Modes, "Serve one shared session over HTTP for `--backend cli` clients")
        .switch(|low| low.cliserver = true),
    flag("server", None, Nothing, S::Modes, "Serve an OpenAI-compatible API")
        .switch(|low| low.server = true),
    flag("toolserver", None, Nothing, S::Modes, "Serve the tools as JSON-RPC lines over TCP (default port 9876)")
        .switch(|low| low.toolserver = true),
    flag("rpc-worker", None, Nothing, S::Modes, "Lend this box's GPUs (else its CPU) to --rpc hosts over ggml's RPC (port 50052; no authentication)")
        .switch(|low| low.rpc_worker = true),
    flag("rpc-allow-remote", None, Nothing, S::Modes, "--rpc-worker: allow a --host that is not loopback (trusted networks only)")
        .switch(|low| low.rpc_allow_remote = true),
    flag("host", None, Val("ADDR[,ADDR]"), S::Modes, "Address the servers listen on (--server and --cliserver: several, comma-separated)")
        .value(|low, flag, raw| { low.host = Some(hosts(flag, raw)?); Ok(()) }),
    flag("port", None, Val("PORT"), S::Modes, "Port the servers listen on, 1 to 65535 (0 = any free port)")
        .value(|low, flag, raw| { low.port = Some(ranged(flag, raw, 0, 65535)? as u16); Ok(()) }),
    flag("auth-token", None, Val("TOKEN"), S::Modes, "Token the servers require (prefer --auth-token-file: argv is visible in ps)")
        .text(|low, raw| low.auth_token = Some(raw)),
    flag("auth-token-file", None, Val("FILE"), S::Modes, "Read the servers' token from FILE")
        .path(|low, path| low.auth_token_file = Some(path)),
    flag("no-auth", None, Nothing, S::Modes, "Servers: no token (loopback only; any local user can then run tools as you)")
        .switch(|low| low.no_auth = true),
    flag("cors-origin", None, Val("ORIGIN"), S::Modes, "Web origin allowed to call the servers (repeatable)")
        .text(|low, raw| low.cors_origins.push(raw)),
    flag("use-tools", None, Nothing, S::Modes, "--server runs shepherd's own tools for its clients")
        .switch(|low| low.use_tools = true),
    flag("alias", None, Val("NAMES"), S::Modes, "--server: the model's names, comma-separated; the first in sorted order is the id clients see (default: the model's file name)")
        .value(|low, flag, raw| { low.alias.extend(names(flag, raw)?); Ok(()) }),
    flag("tags", None, Val("TAGS"), S::Modes, "--server: tags listed with the model in /v1/models, comma-separated (informational)")
        .value(|low, flag, raw| { low.tags.extend(names(flag, raw)?); Ok(()) }),
    flag("queue-size", None, Val("N"), S::Modes, "--server: requests that may wait for a slot, 0 to 4096 (default 16)")
        .value(|low, flag, raw| { low.queue_size = Some(ranged(flag, raw, 0, 4096)? as u32); Ok(()) }),
    flag("responses-store", None, Val("N"), S::Modes, "--server: /v1/responses answers kept for previous_response_id, oldest dropped first, 0 to 100000 (default 100; 0 keeps none)")
        .value(|low, flag, raw| { low.responses_store = Some(ranged(flag, raw, 0, 100_000)? as u32); Ok(()) }),
    flag("verbose", None, Nothing, S::Modes, "--server: answers carry llama-server's __verbose object, with the rendered prompt (off by default: prompts can hold secrets)")
        .switch(|low| low.verbose = true),
    flag("allow-image-urls", None, Nothing, S::Modes, "--server: image parts may be http(s) URLs, which the server fetches (public addresses only, as webfetch; else send data: URLs)")
        .switch(|low| low.allow_image_urls = true),
    flag("no-slots", None, Nothing, S::Modes, "--server: GET /slots answers 501 (llama-server's --no-slots)")
        .switch(|low| low.slots = Some(false)),
    flag("slots", None, Nothing, S::Modes, "--server: serve GET /slots (the default)")
        .switch(|low| low.slots = Some(true)),
    flag("metrics", None, Nothing, S::Modes, "--server: accepted for llama-server's command line; /metrics is always served")
        .switch(|_| {}),
    flag("continue", None, Nothing, S::Modes, "Continue the last saved session in this directory")
        .switch(|low| low.continue_session = true),
    flag("fresh", None, Nothing, S::Modes, "CLI server: start with an empty session instead of the saved one")
        .switch(|low| low.fresh = true),
    flag("record", None, Val("DIR"), S::General, "Record every upstream request and response (secrets redacted) into DIR, for bug reports")
        .path(|low, path| low.record = Some(path)),
    flag("replay", None, Val("DIR"), S::General, "Serve the upstream responses recorded in DIR instead of contacting the provider")
        .path(|low, path| low.replay = Some(path)),
    flag("model-path", None, Val("PATH"), S::Local, "GGUF model file or directory")
        .aliases(&["model_path"])
        .path(|low, path| low.model_path = Some(path)),
    flag("gpu-layers", None, Val("N"), S::Local, "Layers on the GPU (-1 = all; llama-server's -ngl too)")
        .aliases(&["n-gpu-layers"])
        .value(|low, flag, raw| { low.gpu_layers = Some(gpu_layers(flag, raw)?); Ok(()) }),
    flag("split-mode", None, Val("MODE"), S::Local, "Several GPUs: none (all on --main-gpu), layer (default) or row")
        .values(Values::Choices(&SPLIT_MODES))
        .text(|low, raw| low.split_mode = Some(raw)),
    flag("tensor-split", None, Val("A,B,..."), S::Local, "Several GPUs: each GPU's share of the layers, e.g. 3,1 (default: by free memory)")
        .value(|low, flag, raw| { low.tensor_split = Some(tensor_split(flag, raw)?); Ok(()) }),
    flag("main-gpu", None, Val("N"), S::Local, "The GPU for the whole model with --split-mode none, else for its small tensors (default 0)")
        .value(|low, flag, raw| { low.main_gpu = Some(ranged(flag, raw, 0, 255)? as u32); Ok(()) }),
    flag("rpc", None, Val("HOST:PORT,..."), S::Local, "Spread the model's layers over these `shepherd --rpc-worker`s (trusted network only)")
        .value(|low, flag, raw| { low.rpc.extend(rpc_workers(flag, raw)?); Ok(()) }),
    flag("threads", None, Val("N"), S::Local, "CPU threads (default: one per core up to 16; 2 with every layer on a GPU)")
        .value(|low, flag, raw| { low.threads = Some(ranged(flag, raw, 1, 1024)? as u32); Ok(()) }),
    flag("n_batch", None, Val("N"), S::Local, "Logical batch size")
        .value(|low, flag, raw| { low.n_batch = Some(ranged(flag, raw, 1, 1 << 20)? as u32); Ok(()) }),
    flag("ubatch", None, Val("N"), S::Local, "Physical batch size (default 512; 256 on the CPU without flash attention)")
        .value(|low, flag, raw| { low.ubatch = Some(ranged(flag, raw, 1, 1 << 20)? as u32); Ok(()) }),
    flag("cache-type", None, Val("TYPE"), S::Local, "KV cache type, K and V alike: f16|f32|q8_0|q4_0")
        .aliases(&["cache-type-k", "cache-type-v"])
        .values(Values::Choices(&CACHE_TYPES))
        .value(cache_type),
    flag("flash-attn", None, Opt("on|off|auto"), S::Local, "Flash attention; alone = on (default auto: off on the CPU for heads up to 64 wide)")
        .values(Values::Choices(&FLASH_ATTN_MODES))
        .switch(|low| low.flash_attn = Some(true))
        .value(flash_attn),
    flag("parallel", None, Val("N"), S::Local, "Requests decoded together in one batch (slots), 1 to 64 (default 1)")
        .value(|low, flag, raw| { low.parallel = Some(ranged(flag, raw, 1, MAX_PARALLEL as u64)? as u32); Ok(()) }),
    flag("chat-template", None, Val("JINJA|NAME"), S::Local, "Chat template instead of the model's own: Jinja source, or a llama.cpp built-in name (chatml, llama3, gemma, ...)")
        .value(|low, flag, raw| { low.chat_template = Some(chat_template(flag, raw)?); Ok(()) }),
    flag("chat-template-file", None, Val("FILE"), S::Local, "Read the chat template (Jinja) from FILE")
        .path(|low, path| low.chat_template_file = Some(path)),
    flag("chat-template-kwargs", None, Val("JSON"), S::Local, "Variables every chat template render gets, a JSON object (e.g. '{\"enable_thinking\": false}')")
        .value(|low, flag, raw| { low.chat_template_kwargs = Some(json_object(flag, raw)?); Ok(()) }),
    flag("slot-save-path", None, Val("DIR"), S::Local, "--server: where POST /slots/N?action=save|restore keeps slot caches (off without it)")
        .path(|low, path| low.slot_save_path = Some(path)),
    flag("sleep-idle-seconds", None, Val("N"), S::Local, "Free the model after N seconds without work and load it again for the next request that needs it (-1 = never, the default)")
        .value(|low, flag, raw| { low.sleep_idle_seconds = sleep_idle(flag, raw)?; Ok(()) }),
    flag("pooling", None, Val("TYPE"), S::Local, "--server: how /v1/embeddings pools a sequence: mean|cls|last (default mean), or rank: a reranker's scores for /rerank")
        .values(Values::Choices(&POOLING_MODES))
        .text(|low, raw| low.pooling = Some(raw)),
    flag("reranking", None, Nothing, S::Local, "--server: serve /rerank with a reranker model (the same as --pooling rank)")
        .aliases(&["rerank"])
        .switch(|low| low.pooling = Some("rank".into())),
    flag("no-prompt-cache", None, Nothing, S::Local, "Neither restore nor save decoded prompts on disk (kv_cache_max_mb caps them)")
        .switch(|low| low.no_prompt_cache = true),
    flag("spec", None, Val("MODE"), S::Local, "Speculative decoding: off, ngram (default: drafts from the context itself) or draft (--model-draft)")
        .values(Values::Choices(&SPEC_MODES))
        .text(|low, raw| low.spec = Some(raw)),
    flag("draft-max", None, Val("N"), S::Local, "Speculative decoding: most tokens drafted at once, 1 to 64 (default 64)")
        .value(|low, flag, raw| { low.draft_max = Some(ranged(flag, raw, 1, 64)? as u32); Ok(()) }),
    flag("model-draft", None, Val("FILE"), S::Local, "A small GGUF model with the model's vocabulary that drafts for it (implies --spec draft)")
        .path(|low, path| low.model_draft = Some(path)),
    flag("mmproj", None, Val("FILE"), S::Local, "A vision model's projector GGUF (default: the one mmproj-*.gguf beside the model)")
        .path(|low, path| low.mmproj = Some(path)),
    flag("no-mmproj", None, Nothing, S::Local, "Load no vision projector, even one found beside the model")
        .switch(|low| low.no_mmproj = true),
    flag("config", Some('c'), Val("FILE"), S::General, "Read and write FILE instead of the default config.json")
        .path(|low, path| low.config = Some(path)),
    flag("debug", Some('d'), Opt("llm,tools,http"), S::General, "Debug output to stderr for these categories (none given = all)")
        .values(Values::Choices(&["llm", "tools", "http", "all"]))
        .switch(|low| low.debug = Some(Category::ALL.to_vec()))
        .value(|low, flag, raw| { low.debug = Some(debug_categories(raw).map_err(|e| bad(flag, raw, &e))?); Ok(()) }),
    flag("version", Some('v'), Nothing, S::General, "Print the version and exit")
        .switch(|low| low.version = true),
    flag("help", Some('h'), Nothing, S::General, "Print this help and exit")
        .switch(|low| low.help = true),
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
    /// `--image`: files or URLs attached to the `-e` prompt, in order.
    pub images: Vec<PathBuf>,
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
    /// `--responses-store N`.
    pub responses_store: Option<u32>,
    /// `--verbose`.
    pub verbose: bool,
    /// `--allow-image-urls`: the API server fetches http(s) image URLs.
    pub allow_image_urls: bool,
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
    /// `--mmproj FILE`, `--no-mmproj`: the vision projector.
    pub mmproj: Option<PathBuf>,
    pub no_mmproj: bool,
    pub parallel: Option<u32>,
    pub pooling: Option<String>,
    /// `--slots` (`Some(true)`) or `--no-slots`: whether `GET /slots` is served.
    pub slots: Option<bool>,
    /// `--chat-template` (Jinja source or `chatml`), `--chat-template-file`.
    pub chat_template: Option<String>,
    pub chat_template_file: Option<PathBuf>,
    /// `--chat-template-kwargs`: a JSON object.
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// `--slot-save-path`: the directory slot saves and restores use.
    pub slot_save_path: Option<PathBuf>,
    /// `--sleep-idle-seconds`; `None` also for -1.
    pub sleep_idle_seconds: Option<u32>,
    pub seed: Option<u64>,
    /// `--alias`: the model's names.
    pub alias: Vec<String>,
    /// `--tags`: listed with the model.
    pub tags: Vec<String>,
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
    let text = |raw: OsString| utf8(raw, &format!("value for --{}", flag.long));
    match (flag.apply, value) {
        (Apply::Switch(set) | Apply::Optional(set, _), None) => set(low),
        (Apply::Text(set), Some(raw)) => set(low, text(raw)?),
        (Apply::Path(set), Some(raw)) => set(low, PathBuf::from(raw)),
        (Apply::Value(set) | Apply::Optional(_, set), Some(raw)) => set(low, flag, &text(raw)?)?,
        _ => {
            return Err(UsageError(format!(
                "flag --{} was not understood",
                flag.long
            )))
        }
    }
    Ok(())
}

fn missing(flag: &Flag, value_name: &str) -> UsageError {
    UsageError(format!("flag --{} needs a value ({value_name})", flag.long))
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
    if !low.images.is_empty() && low.prompt.is_none() {
        return Err(UsageError(
            "--image attaches to the -e prompt; in the REPL and the TUI use /image PATH".into(),
        ));
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

    #[test]
    fn max_tokens_help_promises_only_what_minus_one_does() {
        // -1 and 0 both leave the reply uncapped by shepherd: no "model maximum"
        // that an API could not honour.
        let flag = FLAGS
            .iter()
            .find(|f| f.long == "max-tokens")
            .expect("the flag");
        assert!(!flag.help.contains("model maximum"), "{}", flag.help);
        assert!(
            flag.help.contains("-1") && flag.help.contains("no cap"),
            "{}",
            flag.help
        );
    }

    #[test]
    fn each_flag_updates_the_arguments_as_its_value_says() {
        for f in FLAGS {
            let fits = matches!(
                (f.takes, f.apply),
                (Takes::Nothing, Apply::Switch(_))
                    | (
                        Takes::Value(_),
                        Apply::Text(_) | Apply::Value(_) | Apply::Path(_)
                    )
                    | (Takes::OptionalValue(_), Apply::Optional(..))
            );
            assert!(fits, "--{}: {:?} with {:?}", f.long, f.takes, f.apply);
            // A path completes from the file system.
            if matches!(f.apply, Apply::Path(_)) {
                assert_eq!(f.values, subcommands::Values::File, "--{}", f.long);
            }
        }
    }

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
        // The llama.cpp words (--cache-type, --pooling, --split-mode, --spec)
        // are kept as typed here and read once in stage two (config::resolve).
        assert_eq!(
            ok(&["--cache-type", "q8_0"]).cache_type.as_deref(),
            Some("q8_0")
        );
        assert_eq!(ok(&["--pooling", "cls"]).pooling.as_deref(), Some("cls"));
        assert_eq!(ok(&["--reranking"]).pooling.as_deref(), Some("rank"));
        assert_eq!(ok(&["--rerank"]).pooling.as_deref(), Some("rank"));
        assert_eq!(ok(&["--no-slots"]).slots, Some(false));
        assert!(ok(&["--allow-image-urls"]).allow_image_urls);
        assert!(!ok(&[]).allow_image_urls);
        assert_eq!(ok(&["--no-slots", "--slots"]).slots, Some(true));
        assert_eq!(ok(&["--metrics"]).slots, None);
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
        assert_eq!(low.alias, ["my model"]);
        let names = ok(&["--alias", "b, a,,c", "--alias", "d", "--tags", "x,y"]);
        assert_eq!(names.alias, ["b", "a", "c", "d"]);
        assert_eq!(names.tags, ["x", "y"]);
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
        check_err(&["--alias", " , "], &["--alias"]);
        check_err(&["--alias", ""], &["--alias"]);
        check_err(&["--tags", "a\u{7}"], &["--tags"]);
        // Any of llama.cpp's built-in names, as llama-server takes them.
        assert_eq!(
            ok(&["--chat-template", "llama3"]).chat_template.as_deref(),
            Some("llama3")
        );
        check_err(
            &["--chat-template", "llama99"],
            &["chatml", "llama3", "--chat-template-file"],
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

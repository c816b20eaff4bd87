//! Front-ends and the program's entry: arguments in, one front-end run, an exit code out.
//!
//! Exit codes are named once, in [`exit`]: 0 for success, 1 for a runtime
//! failure (a provider error, an unreachable API), 2 for a usage or
//! configuration error; this module maps a chat run's errors to them, each
//! server mode (and the signal watcher) its own ending. Everything below returns
//! typed errors.

mod bench;
mod chat;
mod connect;
mod exit;
mod progress;
pub(crate) mod serve;
mod signals;
mod wiring;

use std::io::{self, IsTerminal};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;

use crate::agent::{AgentConfig, AgentHandle};
use crate::args::{self, USAGE};
use crate::backend::{BackendInfo, ToolChoice};
use crate::commands;
use crate::config::resolve::{self, Mode, Settings};
use crate::config::{self};
use crate::core::Message;
use crate::tools::approval::{Approver, ChannelApprover, Gate, Headless};
use crate::tools::audit::AuditLog;
use crate::util::log;

use chat::render::RenderOptions;
use exit::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use serve::access::{Access, ServerKind};
use wiring::{interactive, tool_registry};

/// Parses the command line, runs the chosen front-end and ends the process with
/// its exit code ([`signals::exit`]: no MCP server outlives it, whichever way the
/// front-end ended).
pub fn run_main() -> ! {
    signals::exit(run_mode())
}

/// Runs the mode the arguments chose: long because it is one arm per mode.
fn run_mode() -> i32 {
    let low = match args::parse_env() {
        Ok(low) => low,
        Err(error) => {
            eprintln!("shepherd: {error}\n{USAGE}\nTry 'shepherd --help' for more.");
            return EXIT_USAGE;
        }
    };
    // `shepherd provider add --help`: answered from the subcommand table before
    // anything else, so help works whatever the rest of the line or the config says.
    if let Some(topic) = low
        .subcommand
        .as_ref()
        .and_then(|sub| args::subcommands::help_request(sub, low.help))
    {
        return print_out(&args::subcommands::help_text(topic));
    }
    let settings = match resolve::resolve(&low, &config::process_env) {
        Ok(settings) => settings,
        Err(error) => {
            eprintln!("shepherd: {error}");
            return EXIT_USAGE;
        }
    };
    log::enable(&settings.debug);
    match &settings.mode {
        Mode::Help => print_out(&args::help_text()),
        Mode::Version => print_out(&format!("{}\n", version_text())),
        Mode::Provider(words) => subcommand(commands::run_provider(
            words,
            &settings.config_path,
            &mut io::stdout(),
        )),
        Mode::Config(words) => subcommand(commands::config::run_config(
            words,
            &settings.config_path,
            &mut io::stdout(),
        )),
        Mode::Profile(words) => subcommand(commands::profile::run_profile(
            words,
            &settings.config_path,
            &mut io::stdout(),
        )),
        Mode::Mcp(words) => subcommand(commands::mcp::run(
            words,
            &settings.config_path,
            &mut io::stdout(),
        )),
        Mode::Models(words) => subcommand(commands::models::run(
            words,
            &settings.config_path,
            &mut command_output(&mut io::stdout()),
        )),
        Mode::Sessions(words) => subcommand(commands::sessions::run(
            words,
            &crate::store::Store::user(),
            &mut command_output(&mut io::stdout()),
        )),
        Mode::Ps(words) => subcommand(commands::ps::run(
            words,
            &mut command_output(&mut io::stdout()),
        )),
        Mode::Pull(words) => subcommand(commands::pull::run(
            words,
            &settings.config_path,
            &mut io::stdout(),
        )),
        Mode::ListModels => list_models(&settings),
        Mode::Completions(words) => subcommand(commands::completions::run(
            words,
            &settings.config_path,
            &mut io::stdout(),
        )),
        Mode::Man(words) => subcommand(commands::completions::run_man(words, &mut io::stdout())),
        Mode::Bench(words) => bench::run(&settings, words),
        Mode::CliServer => cli_server_mode(&settings),
        Mode::ApiServer => serve::api_server::run(&settings),
        Mode::ToolServer => tool_server_mode(&settings),
        Mode::RpcWorker => serve::rpc_worker::run(&settings),
        Mode::Chat | Mode::JsonLines => chat(&settings),
    }
}

/// Writes `text` to stdout. A reader that stopped early (`shepherd --version | head -1`)
/// is not an error: `print!` would panic on the broken pipe.
fn print_out(text: &str) -> i32 {
    use std::io::Write;
    let mut out = io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => EXIT_OK,
        Err(e) if e.kind() == io::ErrorKind::BrokenPipe => EXIT_OK,
        Err(e) => {
            eprintln!("shepherd: cannot write to stdout: {e}");
            EXIT_FAILURE
        }
    }
}

fn subcommand(result: Result<(), commands::CommandError>) -> i32 {
    match result {
        Ok(()) => EXIT_OK,
        Err(error) => {
            eprintln!("shepherd: {error}");
            error.exit_code()
        }
    }
}

/// Where a subcommand prints: stdout, with untrusted text made visible on a terminal.
fn command_output(out: &mut dyn io::Write) -> commands::Output<'_> {
    commands::Output {
        out,
        visible: chat::sanitize::visible,
        terminal: io::stdout().is_terminal(),
    }
}

/// `--list-models`: the first provider's models; for the in-process model,
/// the local models directories as `shepherd models` shows them.
fn list_models(settings: &Settings) -> i32 {
    let provider = match connect::first_provider(settings) {
        Ok(provider) => provider,
        Err(connect::OpenError::Usage(message)) => {
            eprintln!("shepherd: {message}");
            return EXIT_USAGE;
        }
    };
    if provider.kind == config::ProviderKind::Llamacpp {
        let dirs = &settings.local.models_dirs;
        return subcommand(commands::models::list(
            dirs,
            &mut command_output(&mut io::stdout()),
        ));
    }
    match connect::list_models(settings, &provider) {
        Ok(models) => {
            let lines: Vec<String> = models
                .iter()
                .map(|m| chat::sanitize::visible(m).into_owned())
                .collect();
            print_out(&lines.iter().map(|l| format!("{l}\n")).collect::<String>())
        }
        Err(message) => {
            // The message may quote the provider's error body, escapes included.
            eprintln!(
                "shepherd: cannot list the models of provider '{}': {}",
                provider.name,
                chat::sanitize::visible(&message)
            );
            EXIT_FAILURE
        }
    }
}

/// `shepherd VERSION (git REV)`, how it was built, the compiled-in features and
/// llama.cpp's build (ggml version, the crate that pins its sources, CPU features).
pub fn version_text() -> String {
    let features = COMPILED_FEATURES
        .iter()
        .chain([&("rpc", crate::llama::rpc::supported())])
        .map(|(name, on)| format!("{name} {}", if *on { "yes" } else { "no" }))
        .collect::<Vec<_>>()
        .join(", ");
    let (ggml, commit) = crate::llama::ggml_build();
    // The crate's sources carry no git metadata, so ggml's commit is usually unknown.
    let commit = match commit.as_str() {
        "" | "unknown" => String::new(),
        known => format!("commit {known}, "),
    };
    let linkage = if cfg!(target_feature = "crt-static") {
        "static"
    } else {
        "dynamic"
    };
    format!(
        "shepherd {} (git {}, {}-{}, {linkage})\nfeatures: {features}\n{}\
         llama.cpp: ggml {ggml} ({commit}llama-cpp-sys-2 {})\n{}\n{}",
        env!("CARGO_PKG_VERSION"),
        env!("SHEPHERD_GIT_REV"),
        std::env::consts::ARCH,
        std::env::consts::OS,
        cuda_text(),
        env!("SHEPHERD_LLAMA_CRATE"),
        crate::llama::system_info(),
        crate::llama::devices::report()
    )
}

/// A CUDA build's toolkit, runtime linkage and GPU architectures (set by build.rs),
/// and the notice when it found no GPU here; empty on other builds.
fn cuda_text() -> String {
    let Some(cuda) = option_env!("SHEPHERD_CUDA") else {
        return String::new();
    };
    let notice = crate::llama::devices::no_gpu_notice()
        .map(|n| format!("{n}\n"))
        .unwrap_or_default();
    let cublas = match crate::llama::devices::cublas_library() {
        Some(Ok(name)) => format!("cublas: {name}\n"),
        Some(Err(())) => {
            "cublas: none found (libcublas.so.13 or .12; set LD_LIBRARY_PATH or SHEPHERD_CUBLAS)\n"
                .into()
        }
        None => String::new(),
    };
    format!("cuda: {cuda}\n{cublas}{notice}")
}

/// Optional backends and whether this binary has them. (`rpc` is asked of ggml
/// itself: a target directory whose llama.cpp predates GGML_RPC=ON lacks it.)
const COMPILED_FEATURES: [(&str, bool); 2] = [
    ("cuda", cfg!(feature = "cuda")),
    ("tensorrt", cfg!(feature = "tensorrt")),
];

/// Runs the chat front-ends: `-e`, piped lines, or `--json`.
fn chat(settings: &Settings) -> i32 {
    // `--image` files are read before anything starts: a bad one is a usage error.
    let first = match one_shot_message(settings) {
        Ok(first) => first,
        Err(code) => return code,
    };
    let (agent, provider, info) = match start_agent(settings) {
        Ok(started) => started,
        Err(code) => return code,
    };
    if interactive(settings) {
        return run_interactive(&agent, settings, provider, &info);
    }
    let interrupted = watch_signals(&agent);
    let ok = run_front_end(&agent, settings, first, &interrupted.stop);
    agent.shutdown();
    match interrupted.signal.load(Ordering::SeqCst) {
        0 if ok => EXIT_OK,
        0 => EXIT_FAILURE,
        signum => 128 + signum,
    }
}

/// `--cliserver`: the access policy is checked before anything starts, so a
/// refused bind exits before listening.
fn cli_server_mode(settings: &Settings) -> i32 {
    let access = match Access::decide(&settings.server, &settings.server_auth, ServerKind::Cli) {
        Ok(access) => access,
        Err(message) => {
            eprintln!("shepherd: {message}");
            return EXIT_USAGE;
        }
    };
    let (agent, provider, info) = match start_agent(settings) {
        Ok(started) => started,
        Err(code) => return code,
    };
    let model = provider
        .model
        .clone()
        .unwrap_or_else(|| provider.name.clone());
    // The backend's own context size: the in-process model's real window once
    // loaded, not the configured one (0 when `--context-size` is left to the model).
    let mut config = serve::cli_server::CliServerConfig::new(model, info.context_size);
    let persist = serve::cli_server::Persist::for_port(settings.server.port);
    let prompt = settings.profile.system_prompt(&settings.system_prompt);
    match persist.restore(&agent, &prompt, settings.fresh_session) {
        Ok(line) => eprintln!("shepherd: {line}"),
        Err(message) => {
            eprintln!("shepherd: {message}");
            return EXIT_USAGE;
        }
    }
    config.persist = Some(persist);
    // The cliserver registers itself with the API's emergency stop.
    let api = serve::agent_api::for_settings(settings);
    serve::cli_server::run(&settings.server, &access, agent, config, Some(api))
}

/// `--toolserver`: the same tools the agent would get, served over TCP.
fn tool_server_mode(settings: &Settings) -> i32 {
    let access = match Access::decide(&settings.server, &settings.server_auth, ServerKind::Tools) {
        Ok(access) => access,
        Err(message) => {
            eprintln!("shepherd: {message}");
            return EXIT_USAGE;
        }
    };
    let tools = match tool_registry(settings) {
        Ok(tools) => tools,
        Err(code) => return code,
    };
    let config = serve::tool_server::ToolServerConfig::new(
        settings.server.host.clone(),
        settings.server.port,
        access.token().map(str::to_string),
        settings.approvals.policy.clone(),
    );
    serve::tool_server::run(tools, config, &access, AuditLog::open_default())
}

/// The approval gate for this mode: front-ends that can ask the user get a
/// [`ChannelApprover`]; `-e` and piped input have no one to ask.
fn gate(settings: &Settings) -> Gate {
    let timeout = settings.approvals.timeout;
    let (approver, mode): (Box<dyn Approver>, &'static str) = match settings.mode {
        Mode::Chat if interactive(settings) => {
            let mode = if settings.tui == Some(true) {
                "tui"
            } else {
                "repl"
            };
            (Box::new(ChannelApprover::new(timeout)), mode)
        }
        Mode::JsonLines => (Box::new(ChannelApprover::new(timeout)), "json"),
        Mode::CliServer => (Box::new(ChannelApprover::new(timeout)), "cliserver"),
        _ => (Box::new(Headless), "headless"),
    };
    Gate::new(settings.approvals.policy.clone(), approver, mode)
        .with_audit(AuditLog::open_default())
}

/// Opens the first provider and starts the agent with the configured tools;
/// with the backend's own description (model, context size).
fn start_agent(
    settings: &Settings,
) -> Result<(AgentHandle, config::ProviderConfig, BackendInfo), i32> {
    let (backend, provider) = match connect::open_backend(settings) {
        Ok(opened) => opened,
        Err(connect::OpenError::Usage(message)) => {
            eprintln!("shepherd: {message}");
            return Err(EXIT_USAGE);
        }
    };
    log::debug(log::Category::Llm, || {
        format!("provider {} ({})", provider.name, provider.kind.as_str())
    });
    let mut tools = tool_registry(settings)?;
    settings.profile.apply_tools(&mut tools);
    let agent_config = AgentConfig {
        system_prompt: settings.profile.system_prompt(&settings.system_prompt),
        sampling: settings.sampling_for(&provider),
        stream: settings.stream,
        max_rounds: settings.max_rounds,
        tools_enabled: settings.tools_enabled,
        first_tool_choice: ToolChoice::Auto,
    };
    let root = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    let info = backend.info();
    match AgentHandle::spawn_gated(backend, tools, root, agent_config, gate(settings)) {
        Ok(agent) => Ok((agent, provider, info)),
        Err(error) => {
            eprintln!("shepherd: cannot start the agent thread: {error}");
            Err(EXIT_FAILURE)
        }
    }
}

/// Runs the REPL (or `--tui`). They watch signals themselves: in raw mode
/// Ctrl-C is a key, and a SIGTERM must leave the terminal restored.
fn run_interactive(
    agent: &AgentHandle,
    settings: &Settings,
    provider: config::ProviderConfig,
    info: &BackendInfo,
) -> i32 {
    let result = if settings.tui == Some(true) {
        chat::tui::run(agent, settings, provider, info)
    } else {
        chat::repl::run(agent, settings, provider, info)
    };
    match result {
        Ok(true) => EXIT_OK,
        Ok(false) => EXIT_FAILURE,
        Err(error) => {
            eprintln!("shepherd: terminal error: {error}");
            EXIT_FAILURE
        }
    }
}

/// What the signal watcher tells the front-end.
struct Interrupted {
    /// Set on the first signal: take no further input.
    stop: Arc<AtomicBool>,
    /// The first signal received, 0 while none.
    signal: Arc<AtomicI32>,
}

/// Ctrl-C and SIGTERM cancel the running turn (killing any tool process group)
/// and stop further input; when no turn is running, or on a second signal,
/// shepherd exits at once.
fn watch_signals(agent: &AgentHandle) -> Interrupted {
    let stop = Arc::new(AtomicBool::new(false));
    let cancel = agent.cancel_flag();
    let busy = agent.busy_flag();
    let stopping = stop.clone();
    let signal = signals::watch(signals::Watch {
        busy: Box::new(move || busy.load(Ordering::SeqCst)),
        cancel: Box::new(move || {
            stopping.store(true, Ordering::SeqCst);
            cancel.store(true, Ordering::SeqCst);
        }),
        exit_after: None,
    });
    Interrupted { stop, signal }
}

/// The `-e` prompt as a user message, its `--image`s in front of the text.
fn one_shot_message(settings: &Settings) -> Result<Option<Message>, i32> {
    let Some(prompt) = &settings.prompt else {
        return Ok(None);
    };
    match chat::attach::load_args(&settings.images) {
        Ok(images) => Ok(Some(chat::attach::user_message(prompt.clone(), images))),
        Err(error) => {
            eprintln!("shepherd: --image: {error}");
            Err(EXIT_USAGE)
        }
    }
}

fn run_front_end(
    agent: &AgentHandle,
    settings: &Settings,
    first: Option<Message>,
    stop: &AtomicBool,
) -> bool {
    let stdin = io::stdin();
    if settings.mode == Mode::JsonLines {
        return chat::json::run(agent, first, chat::json::stdin_lines(), stop);
    }
    let options = RenderOptions {
        colors: chat::render::colors_wanted(io::stdout().is_terminal(), !settings.colors),
        show_thinking: settings.show_thinking,
        stats: settings.stats,
    };
    match first {
        Some(message) => chat::line::run_once(agent, message, options),
        None => chat::line::run_lines(agent, stdin.lock(), options, stop),
    }
}

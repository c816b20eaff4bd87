//! The one signal watcher and the one exit cleanup, for every mode that does
//! not take signals on its own `select!` (the REPL and TUI do, and leave
//! through [`run_main`](super::run_main)'s cleanup).
//!
//! Ctrl-C or SIGTERM cancels the running work (the agent's turn, a server's
//! request, the tool server's tools: their process groups are killed). A
//! second signal, or a signal while nothing runs, exits at once. Servers also
//! exit once the cancelled work wound down, bounded by a grace period; the
//! chat front-ends instead keep running, so the cancelled turn is shown and
//! input ends on its own. Every exit goes through [`exit`], which runs
//! [`cleanup`] (no destructor runs at an exit, so MCP servers would outlive
//! shepherd and token files would stay behind otherwise) and ends the process
//! without the C++ static destructors.

use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{mcp, util::auth, util::log, util::sys};

/// How long a server waits for cancelled work to wind down before it exits.
const SERVER_GRACE: Duration = Duration::from_secs(2);
const POLL: Duration = Duration::from_millis(20);

/// Everything that must happen before the process ends, whichever way it ends:
/// MCP servers' process groups killed, published token files removed.
pub fn cleanup() {
    mcp::kill_all();
    auth::remove_published();
}

/// How long the exit waits for standard output to take what is buffered (a
/// writer blocked on a full pipe holds it).
const FLUSH_LIMIT: Duration = Duration::from_millis(200);

/// Cleans up, flushes standard output and exits, without the C++ static
/// destructors `std::process::exit` runs: they destroy llama.cpp's tables (its
/// Unicode flags among them) under the generation thread still inside it, and a
/// SIGTERM that came while it tokenized ended in SIGSEGV.
pub fn exit(code: i32) -> ! {
    cleanup();
    let (done, flushed) = crossbeam_channel::bounded(1);
    let flusher = std::thread::Builder::new()
        .name("shepherd-exit".into())
        .spawn(move || {
            use std::io::Write;
            let _ = std::io::stdout().flush();
            let _ = done.send(());
        });
    if flusher.is_ok() {
        let _ = flushed.recv_timeout(FLUSH_LIMIT);
    }
    sys::exit_now(code)
}

/// Ends the process when an RPC worker was lost (called from ggml's abort
/// callback, on ggml's thread, through `llama::rpc::on_lost_worker`): says why,
/// cleans up as [`exit`] does, and ends at once, without the C++ static
/// destructors `process::exit` would run under the threads still inside llama.cpp.
pub fn lost_worker(message: &str) -> ! {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "shepherd: {message}");
    cleanup();
    sys::exit_now(super::exit::EXIT_FAILURE)
}

/// What the watcher asks of the mode it watches over.
pub struct Watch {
    /// Whether work is running now.
    pub busy: Box<dyn Fn() -> bool + Send>,
    /// Cancels the running work.
    pub cancel: Box<dyn Fn() + Send>,
    /// `Some` for servers: exit once `busy` is false, waiting at most this long.
    /// `None` for the chat front-ends: keep running after cancelling.
    pub exit_after: Option<Duration>,
}

impl Watch {
    /// A server's watch: cancel, wait for the work to wind down, exit.
    pub fn server(busy: Box<dyn Fn() -> bool + Send>, cancel: Box<dyn Fn() + Send>) -> Watch {
        Watch {
            busy,
            cancel,
            exit_after: Some(SERVER_GRACE),
        }
    }
}

/// Starts the watcher thread. Returns the first signal's number (0 while none),
/// which the chat front-ends turn into their exit code.
pub fn watch(watch: Watch) -> Arc<AtomicI32> {
    let first = Arc::new(AtomicI32::new(0));
    let signals = match sys::interrupt_signals() {
        Ok(signals) => signals,
        Err(error) => {
            log::debug(log::Category::Tools, || {
                format!("signal handling unavailable: {error}")
            });
            return first;
        }
    };
    let seen = first.clone();
    let watcher = std::thread::Builder::new()
        .name("shepherd-interrupt".into())
        .spawn(move || {
            for signum in signals.iter() {
                if seen.swap(signum, Ordering::SeqCst) != 0 || !(watch.busy)() {
                    exit(128 + signum);
                }
                (watch.cancel)();
                if let Some(grace) = watch.exit_after {
                    let end = Instant::now() + grace;
                    while (watch.busy)() && Instant::now() < end {
                        if let Ok(again) = signals.recv_timeout(POLL) {
                            exit(128 + again);
                        }
                    }
                    exit(128 + signum);
                }
            }
        });
    if let Err(error) = watcher {
        eprintln!("shepherd: cannot start the signal watcher: {error}");
    }
    first
}

//! The stdio transport: the server is a child process speaking line-delimited
//! JSON-RPC on stdin/stdout.
//!
//! The child runs under a [`reaper`] (which ends everything the server starts),
//! in its own process group, and gets SIGTERM if the thread that spawned it
//! dies ([`crate::util::sys::term_with_parent`]). One reader thread
//! per server turns stdout lines into messages for the [`Router`] (oversized
//! and malformed lines are logged and skipped, never fatal); another drains
//! stderr into the debug log, so a chatty server never blocks on a full pipe.
//! When stdout ends the router is closed with the server's last stderr lines,
//! so a server that dies at start is reported at once and says why. Closing
//! ends stdin, gives the server a moment to exit, then asks the reaper to end
//! it all; every live server is also listed in [`LIVE`] so that [`kill_all`]
//! can clean up on any exit path, signals included.

use std::io::{BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio as Pipe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{McpError, Router, Transport};
use super::reaper;
use crate::config::mcp::{expand_vars, McpServerConfig};
use crate::stream::{read_capped_line, CappedLine};
use crate::util::log::{self, Category};
use crate::util::sync::lock;

/// The largest message accepted from a server; longer lines are skipped.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How long a server may take to exit after its stdin closed.
const EXIT_GRACE: Duration = Duration::from_millis(300);
/// Longest stderr line kept in the log.
const MAX_LOG_LINE: usize = 2000;

/// How long a reaper may take to end its server's processes once asked.
const REAPER_GRACE: Duration = Duration::from_secs(2);

/// Every running stdio server in this process: the pid of what was started
/// (the reaper, or the server itself where reapers are not available), which
/// also leads its process group.
static LIVE: Mutex<Vec<Started>> = Mutex::new(Vec::new());

#[derive(Clone, Copy, PartialEq, Eq)]
struct Started {
    pid: u32,
    reaped: bool,
}

impl Started {
    /// Asks a reaper to end everything its server started (it needs the time
    /// to do so, so SIGTERM, not SIGKILL); a server without one loses its group.
    fn end(self) {
        let _ = match self.reaped {
            true => crate::util::sys::signal_process(self.pid, crate::util::sys::SIGTERM),
            false => crate::util::sys::kill_process_group(self.pid),
        };
    }
}

/// Ends every server still running. Called on every exit path of the program,
/// because `process::exit` runs no destructors. A reaper finishes its work
/// after shepherd has gone.
pub fn kill_all() {
    for started in lock(&LIVE).drain(..) {
        started.end();
    }
}

/// A running stdio server.
pub struct StdioTransport {
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
    started: Started,
    closed: AtomicBool,
}

impl StdioTransport {
    /// Spawns the server of `config` (under a [`reaper`]), named `name` in logs and thread names.
    pub fn spawn(
        name: &str,
        config: &McpServerConfig,
        router: Arc<Router>,
    ) -> Result<StdioTransport, McpError> {
        let program = config
            .command
            .as_deref()
            .ok_or_else(|| McpError::Spawn("no command configured".into()))?;
        let (mut command, reaped) = match reaper::command(program) {
            Some(command) => (command, true),
            None => (Command::new(program), false),
        };
        command
            .args(&config.args)
            .stdin(Pipe::piped())
            .stdout(Pipe::piped())
            .stderr(Pipe::piped())
            .process_group(0);
        for (key, _) in std::env::vars_os() {
            if crate::tools::bash::is_secret(&key.to_string_lossy()) {
                command.env_remove(key);
            }
        }
        for (key, value) in &config.env {
            command.env(key, expand_vars(value, &crate::config::process_env));
        }
        crate::util::sys::term_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| McpError::Spawn(format!("{program}: {e}")))?;
        let started = Started {
            pid: child.id(),
            reaped,
        };
        lock(&LIVE).push(started);
        let stderr_done = child
            .stderr
            .take()
            .map(|stderr| spawn_stderr_logger(name, stderr));
        if let Some(stdout) = child.stdout.take() {
            spawn_reader(name, stdout, router.clone(), stderr_done);
        }
        Ok(StdioTransport {
            stdin: Mutex::new(child.stdin.take()),
            child: Mutex::new(child),
            started,
            closed: AtomicBool::new(false),
        })
    }
}

impl Transport for StdioTransport {
    fn send(&self, message: &Value) -> Result<(), McpError> {
        // serde_json escapes newlines inside strings, so one message is one line.
        let mut line =
            serde_json::to_vec(message).map_err(|e| McpError::Protocol(e.to_string()))?;
        line.push(b'\n');
        let mut stdin = lock(&self.stdin);
        let pipe = stdin
            .as_mut()
            .ok_or_else(|| McpError::Closed("the server's input is closed".into()))?;
        pipe.write_all(&line)
            .and_then(|()| pipe.flush())
            .map_err(|e| McpError::Closed(format!("cannot write to the server: {e}")))
    }

    fn close(&self) {
        if self.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        lock(&self.stdin).take();
        let mut child = lock(&self.child);
        // The server may end by itself once its input is closed (its reaper with it).
        if !exited_within(&mut child, EXIT_GRACE) {
            self.started.end();
            if self.started.reaped && !exited_within(&mut child, REAPER_GRACE) {
                let _ = crate::util::sys::kill_process_group(self.started.pid);
            }
        }
        // Without a reaper, the whole group, also when the server exited: its children must not stay.
        if !self.started.reaped {
            let _ = crate::util::sys::kill_process_group(self.started.pid);
        }
        let _ = child.wait();
        lock(&LIVE).retain(|s| *s != self.started);
    }
}

/// Whether `child` exits within `limit`.
fn exited_within(child: &mut Child, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        match child.try_wait() {
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(10)),
            Ok(None) => return false,
            _ => return true,
        }
    }
}

impl Drop for StdioTransport {
    fn drop(&mut self) {
        self.close();
    }
}

fn spawn_thread(name: String, body: impl FnOnce() + Send + 'static) {
    if let Err(e) = thread::Builder::new().name(name.clone()).spawn(body) {
        log::debug(Category::Tools, || {
            format!("cannot start thread {name}: {e}")
        });
    }
}

/// Reads stdout line by line until EOF, then closes the router, naming what
/// the server last said on stderr (why it exited, most often).
fn spawn_reader(
    name: &str,
    stdout: impl Read + Send + 'static,
    router: Arc<Router>,
    stderr: Option<StderrTail>,
) {
    let server = name.to_string();
    spawn_thread(format!("mcp-{name}-out"), move || {
        let mut reader = BufReader::with_capacity(64 * 1024, stdout);
        loop {
            match read_capped_line(&mut reader, MAX_MESSAGE_BYTES) {
                Ok(CappedLine::Eof) | Err(_) => break,
                Ok(CappedLine::TooLong { len, .. }) => {
                    log::debug(Category::Tools, || {
                        format!("mcp {server}: skipped a {len}-byte message (limit {MAX_MESSAGE_BYTES})")
                    })
                }
                Ok(CappedLine::Text(line)) => route_line(&server, &line, &router),
            }
        }
        let said = stderr.map(|tail| tail.last_words()).unwrap_or_default();
        match said.is_empty() {
            true => router.close("the server exited"),
            false => router.close(&format!("the server exited: {said}")),
        }
    });
}

/// What a server wrote last on stderr, for the report when it exits.
struct StderrTail {
    lines: Arc<Mutex<Vec<String>>>,
    /// Disconnects when the logger has read stderr to its end.
    done: crossbeam_channel::Receiver<()>,
}

impl StderrTail {
    /// How many of the last lines are kept.
    const LINES: usize = 3;
    /// How long to wait for stderr's end after stdout's.
    const WAIT: Duration = Duration::from_secs(1);

    /// The last lines, joined, once stderr has ended (or after [`Self::WAIT`]).
    fn last_words(&self) -> String {
        let _ = self.done.recv_timeout(Self::WAIT);
        lock(&self.lines).join(" / ")
    }
}

fn route_line(server: &str, line: &[u8], router: &Router) {
    let text = String::from_utf8_lossy(line);
    let text = text.trim();
    if text.is_empty() {
        return;
    }
    match serde_json::from_str::<Value>(text) {
        Ok(message @ Value::Object(_)) => router.dispatch(message),
        _ => log::debug(Category::Tools, || {
            let start: String = text.chars().take(200).collect();
            format!("mcp {server}: not a JSON-RPC message on stdout: {start}")
        }),
    }
}

fn spawn_stderr_logger(name: &str, stderr: impl Read + Send + 'static) -> StderrTail {
    let server = name.to_string();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let (finished, done) = crossbeam_channel::bounded::<()>(0);
    let kept = lines.clone();
    spawn_thread(format!("mcp-{name}-err"), move || {
        let _finished = finished;
        let mut reader = BufReader::new(stderr);
        // A long line is logged cut to its head.
        while let Ok(CappedLine::Text(line) | CappedLine::TooLong { head: line, .. }) =
            read_capped_line(&mut reader, MAX_LOG_LINE)
        {
            let text = String::from_utf8_lossy(&line).trim_end().to_string();
            log::debug(Category::Tools, || format!("mcp {server} stderr: {text}"));
            if !text.is_empty() {
                let mut kept = lock(&kept);
                if kept.len() == StderrTail::LINES {
                    kept.remove(0);
                }
                kept.push(text);
            }
        }
    });
    StderrTail { lines, done }
}

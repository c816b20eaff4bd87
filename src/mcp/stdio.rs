//! The stdio transport: the server is a child process speaking line-delimited
//! JSON-RPC on stdin/stdout.
//!
//! The child runs in its own process group and gets SIGTERM if the thread
//! that spawned it dies ([`crate::sys::term_with_parent`]). One reader thread
//! per server turns stdout lines into messages for the [`Router`] (oversized
//! and malformed lines are logged and skipped, never fatal); another drains
//! stderr into the debug log, so a chatty server never blocks on a full pipe.
//! Closing ends stdin, gives the server a moment to exit, then kills the
//! whole group; every live group is also listed in [`LIVE_GROUPS`] so that
//! [`kill_all`] can clean up on any exit path, signals included.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio as Pipe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{lock, McpError, Router, Transport};
use crate::config::mcp::{expand_vars, McpServerConfig};
use crate::log::{self, Category};

/// The largest message accepted from a server; longer lines are skipped.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How long a server may take to exit after its stdin closed.
const EXIT_GRACE: Duration = Duration::from_millis(300);
/// Longest stderr line kept in the log.
const MAX_LOG_LINE: usize = 2000;

/// Process groups of every running stdio server in this process.
static LIVE_GROUPS: Mutex<Vec<u32>> = Mutex::new(Vec::new());

/// Kills every server process group still running. Called on every exit path
/// of the program, because `process::exit` runs no destructors.
pub fn kill_all() {
    for pgid in lock(&LIVE_GROUPS).drain(..) {
        let _ = crate::sys::kill_process_group(pgid);
    }
}

/// A running stdio server.
pub struct StdioTransport {
    stdin: Mutex<Option<ChildStdin>>,
    child: Mutex<Child>,
    pgid: u32,
    closed: AtomicBool,
}

impl StdioTransport {
    /// Spawns the server of `config`, named `name` in logs and thread names.
    pub fn spawn(
        name: &str,
        config: &McpServerConfig,
        router: Arc<Router>,
    ) -> Result<StdioTransport, McpError> {
        let program = config
            .command
            .as_deref()
            .ok_or_else(|| McpError::Spawn("no command configured".into()))?;
        let mut command = Command::new(program);
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
        crate::sys::term_with_parent(&mut command);
        let mut child = command
            .spawn()
            .map_err(|e| McpError::Spawn(format!("{program}: {e}")))?;
        let pgid = child.id();
        lock(&LIVE_GROUPS).push(pgid);
        if let Some(stdout) = child.stdout.take() {
            spawn_reader(name, stdout, router.clone());
        }
        if let Some(stderr) = child.stderr.take() {
            spawn_stderr_logger(name, stderr);
        }
        Ok(StdioTransport {
            stdin: Mutex::new(child.stdin.take()),
            child: Mutex::new(child),
            pgid,
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
        let deadline = Instant::now() + EXIT_GRACE;
        while Instant::now() < deadline {
            match child.try_wait() {
                Ok(None) => thread::sleep(Duration::from_millis(10)),
                _ => break,
            }
        }
        // The whole group, also when the server exited: its children must not stay.
        let _ = crate::sys::kill_process_group(self.pgid);
        let _ = child.wait();
        lock(&LIVE_GROUPS).retain(|g| *g != self.pgid);
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

/// Reads stdout line by line until EOF, then closes the router.
fn spawn_reader(name: &str, stdout: impl Read + Send + 'static, router: Arc<Router>) {
    let server = name.to_string();
    spawn_thread(format!("mcp-{name}-out"), move || {
        let mut reader = BufReader::with_capacity(64 * 1024, stdout);
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line_capped(&mut reader, &mut line, MAX_MESSAGE_BYTES) {
                Ok(Line::Eof) | Err(_) => break,
                Ok(Line::TooLong(n)) => log::debug(Category::Tools, || {
                    format!("mcp {server}: skipped a {n}-byte message (limit {MAX_MESSAGE_BYTES})")
                }),
                Ok(Line::Complete) => route_line(&server, &line, &router),
            }
        }
        router.close("the server exited");
    });
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

enum Line {
    Complete,
    TooLong(usize),
    Eof,
}

/// Reads one `\n`-terminated line into `out`, keeping at most `cap` bytes; a
/// longer line is consumed to its end and reported instead of kept.
fn read_line_capped(
    reader: &mut impl BufRead,
    out: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Line> {
    let mut total = 0usize;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(if total == 0 {
                Line::Eof
            } else {
                finished(total, cap)
            });
        }
        let (chunk, done) = match buf.iter().position(|b| *b == b'\n') {
            Some(i) => (&buf[..i], i + 1),
            None => (buf, buf.len()),
        };
        if total + chunk.len() <= cap {
            out.extend_from_slice(chunk);
        }
        total += chunk.len();
        let found = done > chunk.len();
        reader.consume(done);
        if found {
            return Ok(finished(total, cap));
        }
    }
}

fn finished(total: usize, cap: usize) -> Line {
    if total > cap {
        Line::TooLong(total)
    } else {
        Line::Complete
    }
}

fn spawn_stderr_logger(name: &str, stderr: impl Read + Send + 'static) {
    let server = name.to_string();
    spawn_thread(format!("mcp-{name}-err"), move || {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        while let Ok(Line::Complete | Line::TooLong(_)) =
            read_line_capped(&mut reader, &mut line, MAX_LOG_LINE)
        {
            let text = String::from_utf8_lossy(&line);
            log::debug(Category::Tools, || {
                format!("mcp {server} stderr: {}", text.trim_end())
            });
            line.clear();
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(input: &[u8], cap: usize) -> Vec<String> {
        let mut reader = BufReader::with_capacity(4, input);
        let mut out = Vec::new();
        let mut line = Vec::new();
        loop {
            line.clear();
            match read_line_capped(&mut reader, &mut line, cap).unwrap() {
                Line::Eof => return out,
                Line::TooLong(n) => out.push(format!("<{n}>")),
                Line::Complete => out.push(String::from_utf8(line.clone()).unwrap()),
            }
        }
    }

    #[test]
    fn long_lines_are_skipped_whole() {
        assert_eq!(
            lines(b"ab\n0123456789\ncd\nlast", 5),
            ["ab", "<10>", "cd", "last"]
        );
        assert_eq!(lines(b"", 5), Vec::<String>::new());
        assert_eq!(lines(b"\n\n", 5), ["", ""]);
    }
}

//! The `bash` tool: runs one shell command in the workspace, with a timeout,
//! an output cap and cancellation.
//!
//! The command runs in its own process group. When it times out, is cancelled,
//! or simply finishes, the whole group is killed through [`crate::util::sys`], so
//! anything it left in the background (`sleep 100 &`) dies with it: this tool
//! has no background mode, and nothing it starts outlives the call. Pipes are
//! read on helper threads that feed one channel, so output arrives merged in
//! order and a grandchild that keeps a pipe open (for example after escaping
//! the group with `setsid`) cannot make us wait past a short grace period.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Value};

use super::{args, Tool, ToolContext, ToolOutput};

/// The longest timeout a call may ask for.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// How often the wait loop looks at the cancel flag and the child.
const POLL: Duration = Duration::from_millis(20);
/// How long to keep reading pipes after the process group was killed.
const DRAIN_GRACE: Duration = Duration::from_millis(500);

pub struct Bash;

impl Tool for Bash {
    fn name(&self) -> &str {
        "bash"
    }

    fn description(&self) -> &str {
        "Runs a shell command with bash in the workspace directory and returns its stdout and stderr \
         (merged) and exit code. stdin is empty; background processes are killed when the command ends. \
         'timeout' is in seconds (default 120, at most 600)."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line to run"},
                "timeout": {"type": "number", "description": "Timeout in seconds"},
                "description": {"type": "string", "description": "What the command does, in a few words"}
            },
            "required": ["command"]
        })
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let timeout = args::opt_f64(args, "timeout")
            .filter(|t| t.is_finite() && *t > 0.0)
            .map_or(ctx.bash_timeout, |t| {
                Duration::from_secs_f64(t.min(MAX_TIMEOUT.as_secs_f64()))
            });
        match run_command(args::string(args, "command"), ctx, timeout) {
            Ok(run) => run.into_output(timeout),
            Err(e) => ToolOutput::fail(format!("Error: cannot start the shell: {e}")),
        }
    }
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
}

struct Run {
    ending: Ending,
    output: Vec<u8>,
    dropped: usize,
}

fn shell() -> &'static str {
    let has_bash = std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join("bash").is_file()));
    if has_bash {
        "bash"
    } else {
        "sh"
    }
}

/// Whether an environment variable looks like a credential that the child must not see.
pub(crate) fn is_secret(name: &str) -> bool {
    let upper = name.to_ascii_uppercase();
    ["API_KEY", "APIKEY", "TOKEN", "SECRET", "PASSWORD"]
        .iter()
        .any(|s| upper.contains(s))
}

fn spawn(command: &str, ctx: &ToolContext) -> std::io::Result<Child> {
    let mut cmd = Command::new(shell());
    cmd.arg("-c")
        .arg(command)
        .current_dir(&ctx.root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    for (name, _) in std::env::vars_os() {
        if is_secret(&name.to_string_lossy()) {
            cmd.env_remove(name);
        }
    }
    cmd.spawn()
}

fn run_command(command: &str, ctx: &ToolContext, timeout: Duration) -> std::io::Result<Run> {
    let mut child = spawn(command, ctx)?;
    let (tx, rx) = crossbeam_channel::unbounded();
    if let Some(stdout) = child.stdout.take() {
        pipe_reader("bash-stdout", stdout, tx.clone());
    }
    if let Some(stderr) = child.stderr.take() {
        pipe_reader("bash-stderr", stderr, tx);
    }
    let mut collector = Collector {
        output: Vec::new(),
        dropped: 0,
        cap: ctx.output_cap,
    };
    let ending = wait(&mut child, &rx, &mut collector, ctx, timeout);
    // The group dies in every case: on timeout and cancel by design, and after
    // a normal exit so that background children do not outlive the call.
    let _ = crate::util::sys::kill_process_group(child.id());
    let ending = match ending {
        Some(ending) => ending,
        None => Ending::Exited(child.wait()?),
    };
    if ending != Ending::Cancelled {
        collector.drain(&rx, Instant::now() + DRAIN_GRACE);
    }
    let _ = child.wait();
    Ok(Run {
        ending,
        output: collector.output,
        dropped: collector.dropped,
    })
}

/// Copies one pipe into the channel until EOF, on its own thread.
fn pipe_reader(name: &str, mut pipe: impl Read + Send + 'static, tx: Sender<Vec<u8>>) {
    let spawned = thread::Builder::new().name(name.into()).spawn(move || {
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = pipe.read(&mut buf) {
            if tx.send(buf[..n].to_vec()).is_err() {
                break;
            }
        }
    });
    if let Err(e) = spawned {
        crate::util::log::debug(crate::util::log::Category::Tools, || {
            format!("cannot start {name} reader: {e}")
        });
    }
}

struct Collector {
    output: Vec<u8>,
    dropped: usize,
    cap: usize,
}

impl Collector {
    fn add(&mut self, chunk: &[u8]) {
        let room = self.cap.saturating_sub(self.output.len());
        let keep = room.min(chunk.len());
        self.output.extend_from_slice(&chunk[..keep]);
        self.dropped += chunk.len() - keep;
    }

    /// Reads what is left in the pipes until both close or `deadline` passes.
    fn drain(&mut self, rx: &Receiver<Vec<u8>>, deadline: Instant) {
        while let Ok(chunk) = rx.recv_deadline(deadline) {
            self.add(&chunk);
        }
    }
}

/// Waits for the shell to exit, collecting output. `Some` for a timeout or a
/// cancel; `None` when the shell exited (its status is reaped by the caller).
fn wait(
    child: &mut Child,
    rx: &Receiver<Vec<u8>>,
    collector: &mut Collector,
    ctx: &ToolContext,
    timeout: Duration,
) -> Option<Ending> {
    let deadline = Instant::now() + timeout;
    loop {
        if ctx.cancelled() {
            return Some(Ending::Cancelled);
        }
        if Instant::now() >= deadline {
            return Some(Ending::TimedOut);
        }
        if matches!(child.try_wait(), Ok(Some(_)) | Err(_)) {
            return None;
        }
        match rx.recv_timeout(POLL.min(deadline.saturating_duration_since(Instant::now()))) {
            Ok(chunk) => collector.add(&chunk),
            // Both pipes closed: only the exit status is left to wait for.
            Err(RecvTimeoutError::Disconnected) => thread::sleep(POLL),
            Err(RecvTimeoutError::Timeout) => {}
        }
    }
}

impl Run {
    fn into_output(self, timeout: Duration) -> ToolOutput {
        let mut text = String::from_utf8_lossy(&self.output).into_owned();
        let lines = text.lines().count();
        if self.dropped > 0 {
            text.push_str(&format!(
                "\n[output truncated: {} more bytes not shown]",
                self.dropped
            ));
        }
        let (status, error) = match self.ending {
            Ending::Exited(status) => (exit_description(status), !status.success()),
            Ending::TimedOut => (
                format!(
                    "timed out after {} s; the process group was killed",
                    timeout.as_secs_f64()
                ),
                true,
            ),
            Ending::Cancelled => ("cancelled; the process group was killed".to_string(), true),
        };
        let summary = format!("{status}, {lines} lines");
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&format!("[{status}]"));
        ToolOutput {
            content: text,
            summary,
            error,
            images: Vec::new(),
        }
    }
}

fn exit_description(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(signal)) => format!("killed by signal {signal}"),
        (None, None) => "exit unknown".to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::TempDir;
    use std::sync::atomic::Ordering;

    fn bash(ctx: &ToolContext, arguments: Value) -> ToolOutput {
        Bash.run(&arguments, ctx)
    }

    fn unique_marker(label: &str) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        format!("shepherd-marker-{label}-{}-{nanos}", std::process::id())
    }

    /// Whether any process has `marker` in its command line.
    fn marker_alive(marker: &str) -> bool {
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return false;
        };
        entries.flatten().any(|entry| {
            std::fs::read(entry.path().join("cmdline"))
                .is_ok_and(|cmdline| String::from_utf8_lossy(&cmdline).contains(marker))
        })
    }

    /// Polls /proc until no process carries `marker`, or the deadline passes.
    fn gone_within(marker: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while Instant::now() < deadline {
            if !marker_alive(marker) {
                return true;
            }
            thread::yield_now();
        }
        !marker_alive(marker)
    }

    #[test]
    fn runs_in_the_root_and_reports_exit() {
        let dir = TempDir::new("bash-ok");
        let ctx = ToolContext::new(&dir.0);
        let out = bash(&ctx, json!({"command": "pwd; echo err >&2"}));
        assert!(!out.error, "{}", out.content);
        // The two pipes are merged in arrival order, which is not fixed between them.
        assert!(
            out.content.contains(&format!("{}\n", dir.0.display())),
            "{}",
            out.content
        );
        assert!(out.content.contains("err\n"), "{}", out.content);
        assert!(out.content.ends_with("\n[exit 0]"), "{}", out.content);
        assert_eq!(out.summary, "exit 0, 2 lines");
    }

    #[test]
    fn non_zero_exit_is_an_error_with_output() {
        let ctx = ToolContext::new(std::env::temp_dir());
        let out = bash(&ctx, json!({"command": "echo partial; exit 3"}));
        assert!(out.error);
        assert_eq!(out.content, "partial\n[exit 3]");
        assert_eq!(out.summary, "exit 3, 1 lines");
    }

    #[test]
    fn timeout_kills_the_whole_group() {
        let ctx = ToolContext::new(std::env::temp_dir());
        let marker = unique_marker("timeout");
        // One sleeper in the background and one in the foreground: both must die.
        let command = format!("(exec -a {marker}-bg sleep 100) & exec -a {marker} sleep 100");
        let started = Instant::now();
        let out = bash(&ctx, json!({"command": command, "timeout": 1}));
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
        assert!(out.error);
        assert!(
            out.summary.starts_with("timed out after 1 s"),
            "{}",
            out.summary
        );
        assert!(
            gone_within(&marker, Duration::from_secs(2)),
            "a process survived"
        );
    }

    #[test]
    fn background_children_do_not_outlive_the_call() {
        let ctx = ToolContext::new(std::env::temp_dir());
        let marker = unique_marker("bg");
        let out = bash(
            &ctx,
            json!({"command": format!("(exec -a {marker} sleep 100) & echo started")}),
        );
        assert_eq!(out.summary, "exit 0, 1 lines");
        assert!(
            gone_within(&marker, Duration::from_secs(2)),
            "background process survived"
        );
    }

    #[test]
    fn cancel_stops_a_running_command() {
        let ctx = ToolContext::new(std::env::temp_dir());
        let marker = unique_marker("cancel");
        let cancel = ctx.cancel.clone();
        let (started_tx, started_rx) = crossbeam_channel::bounded(1);
        let worker_ctx = ctx.clone();
        let command = format!("exec -a {marker} sleep 100");
        let worker = thread::spawn(move || {
            let _ = started_tx.send(());
            bash(&worker_ctx, json!({"command": command}))
        });
        started_rx.recv().unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !marker_alive(&marker) && Instant::now() < deadline {
            thread::yield_now();
        }
        let cancelled_at = Instant::now();
        cancel.store(true, Ordering::Relaxed);
        let out = worker.join().unwrap();
        assert!(cancelled_at.elapsed() < Duration::from_secs(1));
        assert!(
            out.error && out.summary.starts_with("cancelled"),
            "{}",
            out.summary
        );
        assert!(gone_within(&marker, Duration::from_secs(2)));
    }

    #[test]
    fn output_is_capped() {
        let mut ctx = ToolContext::new(std::env::temp_dir());
        ctx.output_cap = 1000;
        let out = bash(
            &ctx,
            json!({"command": "head -c 5000 /dev/zero | tr '\\0' 'x'"}),
        );
        assert!(out.content.starts_with(&"x".repeat(1000)));
        assert!(
            out.content
                .contains("[output truncated: 4000 more bytes not shown]"),
            "{}",
            out.content
        );
        assert!(!out.error);
    }

    #[test]
    fn secrets_are_not_passed_on() {
        assert!(is_secret("OPENAI_API_KEY"));
        assert!(is_secret("github_token"));
        assert!(!is_secret("PATH"));
    }
}

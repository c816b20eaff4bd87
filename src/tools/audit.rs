//! The audit log: one JSON line per tool call, appended to
//! `$XDG_STATE_HOME/shepherd/audit.jsonl` (or `~/.local/state/shepherd/`).
//!
//! Every mode that runs tools writes here (REPL, TUI, headless, the servers,
//! the tool server), so one file answers "what ran on this machine, who
//! allowed it, how long it took and how it ended". The file is opened with
//! `O_APPEND` and each record is one `write` of a whole line, so records from
//! several shepherd processes interleave without tearing. Records hold the
//! tool's arguments and one-line summary, never its output. [`AuditLog::append`]
//! passes the whole record through [`crate::util::redact::value`] first, so
//! configured keys and secret-shaped values in the arguments (an
//! `Authorization` header, `?api_key=`, `GITHUB_TOKEN=` in a command line)
//! are written as `[REDACTED]`.
//!
//! The record is our own persisted format: its field names are a
//! compatibility promise. [`Verdict`] and [`DecidedBy`] live here, below
//! `approval`: the gate produces them and the log records them, so the
//! dependency runs one way (approval uses audit).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde_json::Value;

use crate::core::ToolCall;
use crate::tools::ToolOutput;
use crate::util::time::strftime;

/// `$XDG_STATE_HOME/shepherd/audit.jsonl`, else `$HOME/.local/state/shepherd/audit.jsonl`.
pub fn default_path() -> PathBuf {
    crate::util::dirs::state_dir().join("audit.jsonl")
}

/// Who or what settled a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// A rule, or the default for read-only calls.
    Policy,
    /// The user answered.
    User,
    /// The user chose "always" for this tool earlier in the session.
    Session,
    /// Nobody answered in time.
    Timeout,
    /// The turn was cancelled while waiting.
    Cancelled,
    /// No one can be asked (headless mode, the tool server).
    NoApprover,
}

impl DecidedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Policy => "policy",
            DecidedBy::User => "user",
            DecidedBy::Session => "session",
            DecidedBy::Timeout => "timeout",
            DecidedBy::Cancelled => "cancelled",
            DecidedBy::NoApprover => "no_approver",
        }
    }
}

/// The outcome of the gate for one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub allowed: bool,
    pub by: DecidedBy,
}

/// An open audit log; cheap to clone and shared between threads.
#[derive(Clone)]
pub struct AuditLog {
    file: Arc<Mutex<File>>,
}

impl AuditLog {
    /// Opens (creating with mode 0600, its directory 0700) `path` for appending.
    pub fn open(path: &Path) -> std::io::Result<AuditLog> {
        if let Some(dir) = path.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)?;
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(path)?;
        Ok(AuditLog {
            file: Arc::new(Mutex::new(file)),
        })
    }

    /// Opens the default log; a log that cannot be opened is reported once on
    /// stderr and tool calls go on without it.
    pub fn open_default() -> Option<AuditLog> {
        let path = default_path();
        match AuditLog::open(&path) {
            Ok(log) => Some(log),
            Err(error) => {
                eprintln!(
                    "shepherd: cannot open the audit log {}: {error}",
                    path.display()
                );
                None
            }
        }
    }

    /// Appends one record, redacted, as one line in a single write.
    pub fn append(&self, record: &AuditRecord<'_>) {
        let Ok(record) = serde_json::to_value(record) else {
            return;
        };
        let mut line = crate::util::redact::value(&record).to_string();
        line.push('\n');
        let mut file = crate::util::sync::lock(&self.file);
        if let Err(error) = file.write_all(line.as_bytes()) {
            crate::util::log::debug(crate::util::log::Category::Tools, || {
                format!("audit log write failed: {error}")
            });
        }
    }
}

/// One line of the audit log.
#[derive(Serialize)]
pub struct AuditRecord<'a> {
    /// UTC, ISO 8601.
    pub time: String,
    pub unix_ms: u128,
    pub pid: u32,
    /// Who asked for the call: the agent of `repl`, `tui`, `headless`, `json` or
    /// `cliserver`; `server` (`--use-tools`), `toolserver`, or `api` (`POST /v1/tools/call`).
    pub mode: &'a str,
    pub tool: &'a str,
    pub call_id: &'a str,
    pub arguments: &'a Value,
    /// `allow` or `deny`.
    pub decision: &'static str,
    /// `policy`, `user`, `session`, `timeout`, `cancelled` or `no_approver`.
    pub decided_by: &'static str,
    pub duration_ms: u128,
    /// `ok`, `error`, or `not_run` for a refused call.
    pub outcome: &'static str,
    pub summary: &'a str,
}

impl<'a> AuditRecord<'a> {
    pub fn new(
        mode: &'a str,
        call: &'a ToolCall,
        verdict: Verdict,
        took: Duration,
        output: &'a ToolOutput,
    ) -> AuditRecord<'a> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let outcome = match (verdict.allowed, output.error) {
            (false, _) => "not_run",
            (true, false) => "ok",
            (true, true) => "error",
        };
        AuditRecord {
            time: strftime("%Y-%m-%dT%H:%M:%SZ", now.as_secs() as i64),
            unix_ms: now.as_millis(),
            pid: std::process::id(),
            mode,
            tool: &call.name,
            call_id: &call.id,
            arguments: &call.arguments,
            decision: if verdict.allowed { "allow" } else { "deny" },
            decided_by: verdict.by.as_str(),
            duration_ms: took.as_millis(),
            outcome,
            summary: &output.summary,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn records_are_appended_as_json_lines() {
        let dir = std::env::temp_dir().join(format!("shepherd-audit-{}", std::process::id()));
        let path = dir.join("sub/audit.jsonl");
        let _ = std::fs::remove_dir_all(&dir);
        let call = ToolCall {
            id: "c1".into(),
            name: "write".into(),
            arguments: json!({"file_path": "a", "content": "line\nbreak"}),
        };
        let output = ToolOutput::ok("wrote", "wrote 1 line");
        let verdicts = [
            Verdict {
                allowed: true,
                by: DecidedBy::User,
            },
            Verdict {
                allowed: false,
                by: DecidedBy::Timeout,
            },
        ];
        for verdict in verdicts {
            // Each record reopens, as separate processes would.
            let log = AuditLog::open(&path).unwrap();
            log.append(&AuditRecord::new(
                "repl",
                &call,
                verdict,
                Duration::from_millis(3),
                &output,
            ));
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["decision"], "allow");
        assert_eq!(lines[0]["decided_by"], "user");
        assert_eq!(lines[0]["outcome"], "ok");
        assert_eq!(lines[0]["arguments"]["content"], "line\nbreak");
        assert_eq!(lines[1]["decided_by"], "timeout");
        assert_eq!(lines[1]["outcome"], "not_run");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn secrets_in_arguments_and_summaries_are_redacted() {
        let dir = std::env::temp_dir().join(format!("shepherd-audit-r-{}", std::process::id()));
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_dir_all(&dir);
        crate::util::redact::register_secret("audit-test-key-0123456789");
        let call = ToolCall {
            id: "c1".into(),
            name: "http_request".into(),
            arguments: json!({
                "url": "https://h/x?api_key=q-secret",
                "headers": {"Authorization": "Bearer h-secret", "Accept": "text/plain"},
                "body": "audit-test-key-0123456789",
            }),
        };
        let output = ToolOutput::ok("", "GET https://h/x?api_key=q-secret (200)");
        let verdict = Verdict {
            allowed: true,
            by: DecidedBy::Policy,
        };
        let log = AuditLog::open(&path).unwrap();
        log.append(&AuditRecord::new(
            "headless",
            &call,
            verdict,
            Duration::ZERO,
            &output,
        ));
        let text = std::fs::read_to_string(&path).unwrap();
        for secret in ["q-secret", "h-secret", "audit-test-key-0123456789"] {
            assert!(!text.contains(secret), "{secret} in {text}");
        }
        let line: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            line["arguments"]["headers"]["Authorization"],
            "Bearer [REDACTED]"
        );
        assert_eq!(line["arguments"]["headers"]["Accept"], "text/plain");
        assert_eq!(line["arguments"]["body"], "[REDACTED]");
        assert_eq!(line["summary"], "GET https://h/x?api_key=[REDACTED] (200)");
        assert_eq!(line["tool"], "http_request");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

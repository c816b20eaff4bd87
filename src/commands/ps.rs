//! `shepherd ps`: this user's running shepherd servers, from the token files
//! each publishes at start ([`crate::util::auth::running`]): kind, address and pid,
//! never the token. Only servers whose file still names the live process that
//! wrote it (same start time, same executable) are listed; files of servers
//! that were killed, or whose pid went to another process, are removed on the
//! way. Without `/proc` nothing can be checked, and `ps` says so.
//!
//! The fields come from files, not from shepherd's own memory, so each goes
//! through the front-end's sanitizer ([`Output::visible`]) whether or not the
//! output is a terminal, and a newline or tab, which it keeps, is spelled out
//! too: one server is one line of the table.

use std::borrow::Cow;

use super::{CommandError, Output};
use crate::util::auth;

/// Runs `shepherd ps ARGS...`.
pub fn run(args: &[String], out: &mut Output<'_>) -> Result<(), CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] | ["list"] => {
            let running = auth::running().map_err(|e| CommandError::Failed(e.to_string()))?;
            list(&running, out)
        }
        ["help"] | ["-h"] | ["--help"] => Ok(write!(out.out, "{}", super::command_help("ps"))?),
        _ => Err(CommandError::Usage(format!(
            "unknown ps command\n{}",
            crate::args::subcommands::usage("ps")
        ))),
    }
}

/// `field` as one printable cell: sanitized, with newlines and tabs spelled out.
fn cell(field: &str, out: &Output<'_>) -> String {
    match (out.visible)(field) {
        Cow::Borrowed(text) if !text.contains(['\n', '\t']) => text.to_string(),
        shown => shown.replace('\n', "\\n").replace('\t', "\\t"),
    }
}

fn list(running: &[auth::Running], out: &mut Output<'_>) -> Result<(), CommandError> {
    if running.is_empty() {
        writeln!(out.out, "no shepherd servers are running for this user")?;
        return Ok(());
    }
    let rows: Vec<(String, String, u32)> = running
        .iter()
        .map(|r| (cell(&r.kind, out), cell(&r.address, out), r.pid))
        .collect();
    let width = rows
        .iter()
        .map(|(_, address, _)| address.chars().count())
        .max()
        .unwrap_or(0)
        .max(7);
    writeln!(out.out, "{:<10}  {:<width$}  PID", "KIND", "ADDRESS")?;
    for (kind, address, pid) in rows {
        writeln!(out.out, "{kind:<10}  {address:<width$}  {pid}")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The front-end's sanitizer as far as these tests need it (the real one
    /// is checked end to end in tests/it/auth.rs).
    fn shown(text: &str) -> Cow<'_, str> {
        Cow::Owned(text.replace('\x1b', "\\x1b"))
    }

    /// What `list` prints for `running` into a pipe.
    fn listed(running: &[auth::Running]) -> String {
        let mut bytes = Vec::new();
        let mut out = Output {
            out: &mut bytes,
            visible: shown,
            terminal: false,
        };
        list(running, &mut out).unwrap();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn lists_kind_address_and_pid_aligned() {
        let running = [
            auth::Running {
                kind: "server".into(),
                address: "http://127.0.0.1:8000".into(),
                pid: 41,
            },
            auth::Running {
                kind: "toolserver".into(),
                address: "127.0.0.1:9876".into(),
                pid: 42,
            },
        ];
        let text = listed(&running);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "KIND        ADDRESS                PID");
        assert_eq!(lines[1], "server      http://127.0.0.1:8000  41");
        assert_eq!(lines[2], "toolserver  127.0.0.1:9876         42");
        assert!(listed(&[]).contains("no shepherd servers"));
    }

    #[test]
    fn fields_from_token_files_are_neutralised_even_in_a_pipe() {
        let running = [auth::Running {
            kind: "server\x1b[31m".into(),
            address: "127.0.0.1:1\x1b[2J\nfake\tline".into(),
            pid: 7,
        }];
        let text = listed(&running);
        assert!(!text.contains(['\x1b', '\t']), "{text:?}");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "one line per server: {text:?}");
        assert_eq!(
            lines[1],
            "server\\x1b[31m  127.0.0.1:1\\x1b[2J\\nfake\\tline  7"
        );
    }
}

//! `shepherd ps`: this user's running shepherd servers, from the token files
//! each publishes at start ([`crate::auth::running`]): kind, address and pid,
//! never the token. Files of servers that were killed are removed on the way.

use std::io::Write;

use super::CommandError;
use crate::auth;

/// Runs `shepherd ps ARGS...`.
pub fn run(args: &[String], out: &mut dyn Write) -> Result<(), CommandError> {
    let words: Vec<&str> = args.iter().map(String::as_str).collect();
    match words.as_slice() {
        [] | ["list"] => list(&auth::running(), out),
        ["help"] | ["-h"] | ["--help"] => Ok(write!(out, "{}", super::command_help("ps"))?),
        _ => Err(CommandError::Usage(format!(
            "unknown ps command\n{}",
            crate::args::subcommands::usage("ps")
        ))),
    }
}

fn list(running: &[auth::Running], out: &mut dyn Write) -> Result<(), CommandError> {
    if running.is_empty() {
        writeln!(out, "no shepherd servers are running for this user")?;
        return Ok(());
    }
    let width = running
        .iter()
        .map(|r| r.address.len())
        .max()
        .unwrap_or(0)
        .max(7);
    writeln!(out, "{:<10}  {:<width$}  PID", "KIND", "ADDRESS")?;
    for r in running {
        writeln!(out, "{:<10}  {:<width$}  {}", r.kind, r.address, r.pid)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut out = Vec::new();
        list(&running, &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "KIND        ADDRESS                PID");
        assert_eq!(lines[1], "server      http://127.0.0.1:8000  41");
        assert_eq!(lines[2], "toolserver  127.0.0.1:9876         42");
        let mut out = Vec::new();
        list(&[], &mut out).unwrap();
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("no shepherd servers"));
    }
}

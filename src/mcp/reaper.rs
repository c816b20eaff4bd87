//! The small process between shepherd and each stdio MCP server, so that
//! whatever a server starts ends with it and with shepherd, as systemd's
//! `KillMode=control-group` promises, without privileges.
//!
//! shepherd starts itself again as `shepherd __mcp-reaper PROGRAM ARGS...`
//! ([`command`]), in a process group of its own and with a parent-death signal.
//! The reaper becomes a child subreaper, starts the server with the same stdio
//! (the JSON-RPC pipes pass straight through) in a group of its own, and waits.
//! When the server exits, or the reaper gets SIGTERM, SIGINT or SIGHUP (from
//! shepherd's close, its exit, or the parent-death signal when shepherd itself
//! was killed), it kills the server's group and then, round after round, every
//! child it has: a process that left the group with `setsid` or by
//! double-forking was reparented to the reaper when its parent died, so it is
//! one of those children. Then it exits with the server's code.
//!
//! A program that cannot be started is reported on stderr and exits 127, so
//! shepherd sees it as a server that exited at once and names why.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::util::sys;

/// The first argument that makes this binary a reaper.
const ARG: &str = "__mcp-reaper";

/// How often the reaper looks for ended children between signals.
const POLL: Duration = Duration::from_millis(20);

/// Rounds of "kill every child, reap" before the reaper gives up on a process
/// that keeps forking faster than it can be killed.
const MAX_ROUNDS: usize = 200;

/// Set by `main` before anything else: this binary dispatches [`ARG`], so
/// servers can be started through it. (Test binaries never run `main` and
/// start servers directly.)
static AVAILABLE: AtomicBool = AtomicBool::new(false);

/// Runs the reaper and exits when this process was started as one; else
/// marks reapers available and returns.
pub fn run_if_asked() {
    let mut args = std::env::args_os().skip(1);
    if args.next().as_deref() != Some(std::ffi::OsStr::new(ARG)) {
        AVAILABLE.store(true, Ordering::SeqCst);
        return;
    }
    let code = match args.next() {
        Some(program) => run(&program, args.collect()),
        None => {
            eprintln!("shepherd {ARG}: no program to run");
            2
        }
    };
    std::process::exit(code)
}

/// The command that runs `program` under a reaper, or `None` where reapers are
/// not available (then the caller starts `program` itself).
pub fn command(program: &str) -> Option<Command> {
    if !AVAILABLE.load(Ordering::SeqCst) {
        return None;
    }
    // The running image itself, even if the file was replaced since.
    let mut command = Command::new(Path::new("/proc/self/exe"));
    command.arg(ARG).arg(program);
    Some(command)
}

fn run(program: &OsString, args: Vec<OsString>) -> i32 {
    if let Err(e) = sys::become_subreaper() {
        eprintln!("shepherd {ARG}: cannot become a subreaper ({e}); stray processes may survive");
    }
    let signals = sys::interrupt_signals().ok();
    sys::route_signal(sys::SIGHUP);
    let mut command = Command::new(program);
    command.args(args).process_group(0);
    sys::term_with_parent(&mut command);
    let server = match command.spawn() {
        Ok(child) => child.id(),
        Err(e) => {
            eprintln!("{}: {e}", program.to_string_lossy());
            return 127;
        }
    };
    let code = wait(server, signals.as_ref());
    end_all(server);
    code
}

/// Waits until `server` exits (its code) or a signal comes (128 + the signal),
/// reaping adopted orphans meanwhile.
fn wait(server: u32, signals: Option<&crossbeam_channel::Receiver<i32>>) -> i32 {
    loop {
        while let Some((pid, code)) = sys::reap_one() {
            if pid == server {
                return code;
            }
        }
        match signals {
            Some(rx) => {
                if let Ok(signum) = rx.recv_timeout(POLL) {
                    return 128 + signum;
                }
            }
            None => std::thread::sleep(POLL),
        }
    }
}

/// Kills the server's group, then every child of the reaper until none is left.
fn end_all(server: u32) {
    let _ = sys::kill_process_group(server);
    for _ in 0..MAX_ROUNDS {
        let children = sys::children();
        if children.is_empty() {
            return;
        }
        for pid in children {
            // The child and any group it leads (`setsid` makes it a leader).
            let _ = sys::kill_process_group(pid);
            let _ = sys::signal_process(pid, sys::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
        while sys::reap_one().is_some() {}
    }
}

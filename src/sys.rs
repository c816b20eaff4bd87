//! The few libc calls shepherd needs that std does not offer, declared by hand.
//!
//! This is the only file outside the llama.cpp bindings allowed to hold
//! `unsafe`. The tool runner (`tools::bash`) uses it to kill a whole process
//! group, so that children a command put in the background die with it; the
//! front-ends use [`interrupt_signals`] so that Ctrl-C or SIGTERM cancels the
//! running turn (and with it any tool process group) instead of killing
//! shepherd and orphaning its children.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use crossbeam_channel::Receiver;

const SIGKILL: i32 = 9;
pub const SIGINT: i32 = 2;
pub const SIGTERM: i32 = 15;

/// `sighandler_t` for the handler we install.
type SignalHandler = extern "C" fn(i32);

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    #[cfg(test)]
    fn getpgid(pid: i32) -> i32;
    fn pipe(fds: *mut i32) -> i32;
    fn write(fd: i32, buf: *const u8, count: usize) -> isize;
    fn signal(signum: i32, handler: SignalHandler) -> usize;
    fn prctl(option: i32, ...) -> i32;
}

/// Write end of the self-pipe the signal handler reports to; -1 until installed.
static SIGNAL_PIPE: AtomicI32 = AtomicI32::new(-1);
static SIGNALS: OnceLock<Receiver<i32>> = OnceLock::new();

/// The signal handler: only async-signal-safe work (an atomic load and `write`).
extern "C" fn on_signal(signum: i32) {
    let fd = SIGNAL_PIPE.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = u8::try_from(signum).unwrap_or(0);
        // SAFETY: `byte` lives for the duration of the call and the length is 1;
        // `write` is async-signal-safe. A full pipe just drops the report.
        unsafe {
            write(fd, &byte, 1);
        }
    }
}

/// Routes SIGINT and SIGTERM to a channel (the self-pipe trick) and returns
/// its receiving end. Installed once per process; later calls return the same
/// channel.
pub fn interrupt_signals() -> io::Result<Receiver<i32>> {
    if let Some(rx) = SIGNALS.get() {
        return Ok(rx.clone());
    }
    let mut fds = [-1i32; 2];
    // SAFETY: `fds` is a valid, writable array of two ints, as `pipe` requires.
    if unsafe { pipe(fds.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `pipe` just returned this descriptor to us and nothing else owns it.
    let mut reader = unsafe { File::from_raw_fd(fds[0]) };
    SIGNAL_PIPE.store(fds[1], Ordering::Relaxed);
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::Builder::new()
        .name("shepherd-signals".into())
        .spawn(move || {
            let mut byte = [0u8; 1];
            while reader.read_exact(&mut byte).is_ok() {
                if tx.send(i32::from(byte[0])).is_err() {
                    break;
                }
            }
        })?;
    for signum in [SIGINT, SIGTERM] {
        // SAFETY: `on_signal` is an `extern "C" fn(i32)` that only performs
        // async-signal-safe operations, as a signal handler must.
        unsafe {
            signal(signum, on_signal);
        }
    }
    Ok(SIGNALS.get_or_init(|| rx).clone())
}

/// Sends SIGKILL to every process in the group `pgid`.
///
/// A group that is already gone (ESRCH) counts as success: the caller only
/// wants it dead.
pub fn kill_process_group(pgid: u32) -> io::Result<()> {
    let pgid = checked_pid(pgid)?;
    // SAFETY: `kill` takes two plain integers and touches no memory of ours;
    // a negative pid addresses the process group, and `checked_pid` rules out
    // 0 and 1, which would address our own group or every process we may signal.
    let rc = unsafe { kill(-pgid, SIGKILL) };
    if rc == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    if err.raw_os_error() == Some(ESRCH) {
        Ok(())
    } else {
        Err(err)
    }
}

const PR_SET_PDEATHSIG: i32 = 1;

/// Makes the child started by `command` receive SIGTERM when the thread that
/// spawned it dies, so a server outlives neither a crashed nor a SIGKILLed
/// shepherd. (Its own children are reached through the process group.)
pub fn term_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let hook = || {
        // SAFETY: runs in the forked child before exec; `prctl` is
        // async-signal-safe and takes plain integers, no memory of ours.
        if unsafe { prctl(PR_SET_PDEATHSIG, SIGTERM as std::ffi::c_ulong) } == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    };
    // SAFETY: the hook only calls `prctl`, which is safe between fork and
    // exec: it allocates nothing and takes no locks.
    unsafe {
        command.pre_exec(hook);
    }
}

/// The process group of `pid`, or `None` when no such process exists.
#[cfg(test)]
pub fn process_group_of(pid: u32) -> Option<u32> {
    let pid = checked_pid(pid).ok()?;
    // SAFETY: `getpgid` takes a plain integer and only reads kernel state.
    let pgid = unsafe { getpgid(pid) };
    u32::try_from(pgid).ok()
}

const ESRCH: i32 = 3;

/// Rejects pids that would turn a group kill into "everything" or "init".
fn checked_pid(pid: u32) -> io::Result<i32> {
    match i32::try_from(pid) {
        Ok(p) if p > 1 => Ok(p),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("refusing to signal pid {pid}"),
        )),
    }
}

extern "C" {
    fn geteuid() -> u32;
}

/// The effective user id: whose files this process may trust (token files).
pub fn effective_uid() -> u32 {
    // SAFETY: `geteuid` takes no arguments, cannot fail and touches no memory of ours.
    unsafe { geteuid() }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::Command;

    #[test]
    fn kills_a_process_group() {
        let mut child = Command::new("sleep")
            .arg("100")
            .process_group(0)
            .spawn()
            .expect("sleep must be available for the test");
        assert_eq!(process_group_of(child.id()), Some(child.id()));
        kill_process_group(child.id()).expect("kill must succeed");
        let status = child.wait().expect("wait");
        assert!(!status.success());
    }

    #[test]
    fn refuses_dangerous_pids() {
        assert!(kill_process_group(0).is_err());
        assert!(kill_process_group(1).is_err());
        assert!(kill_process_group(u32::MAX).is_err());
    }
}

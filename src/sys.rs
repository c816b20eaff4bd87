//! The few libc calls shepherd needs that std does not offer, declared by hand.
//!
//! This is the only file outside the llama.cpp bindings allowed to hold
//! `unsafe`. The tool runner (`tools::bash`) uses it to kill a whole process
//! group, so that children a command put in the background die with it.

use std::io;

const SIGKILL: i32 = 9;

extern "C" {
    fn kill(pid: i32, sig: i32) -> i32;
    #[cfg(test)]
    fn getpgid(pid: i32) -> i32;
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

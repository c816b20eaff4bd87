//! The few libc calls shepherd needs that std does not offer, declared by hand.
//!
//! Besides the FFI modules (the llama.cpp bindings under `llama/`, the
//! TensorRT-LLM executor's `backend/tensorrt/ffi.rs`), this is the only file
//! allowed to hold `unsafe`. The tool runner (`tools::bash`) uses it to kill a whole process
//! group, so that children a command put in the background die with it; the
//! front-ends use [`interrupt_signals`] so that Ctrl-C or SIGTERM cancels the
//! running turn (and with it any tool process group) instead of killing
//! shepherd and orphaning its children.
//!
//! The file tools (`tools::paths`, `tools::fs`, `tools::walk`) use the `*at`
//! calls in [`at`]: every open, create, rename and listing there is relative to
//! a directory handle they already hold and never follows a symlink, which is
//! what keeps them inside the workspace while its contents change under them.
//!
//! The MCP reaper (`mcp::reaper`) uses [`become_subreaper`], [`reap_one`] and
//! [`children`] to end everything a server started, however it got away.
//!
//! [`exit_now`] ends the process from a thread that cannot return to `main`
//! (ggml's abort callback when an RPC worker is lost); [`tcp`] gives ggml's
//! connections to RPC workers keepalive.

#![allow(unsafe_code)] // FFI module: every block carries a `// SAFETY:` comment.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::FromRawFd;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::OnceLock;

use crossbeam_channel::Receiver;

pub const SIGKILL: i32 = 9;
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
    gone_is_done(rc)
}

/// `kill`'s result, where a target that is already gone (ESRCH) counts as done.
fn gone_is_done(rc: i32) -> io::Result<()> {
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

/// Sends `signum` to the process `pid` alone; one that is already gone counts as done.
pub fn signal_process(pid: u32, signum: i32) -> io::Result<()> {
    let pid = checked_pid(pid)?;
    // SAFETY: `kill` takes two plain integers and touches no memory of ours; a
    // positive pid above 1 (`checked_pid`) addresses exactly one process.
    let rc = unsafe { kill(pid, signum) };
    gone_is_done(rc)
}

const PR_SET_CHILD_SUBREAPER: i32 = 36;
const WNOHANG: i32 = 1;
pub const SIGHUP: i32 = 1;

extern "C" {
    fn waitpid(pid: i32, status: *mut i32, options: i32) -> i32;
}

/// Makes this process the parent of every orphan among its descendants (Linux's
/// child subreaper): a process that calls `setsid` or double-forks to get away
/// is still one of ours when its parent dies, so it can be found and ended.
pub fn become_subreaper() -> io::Result<()> {
    // SAFETY: `prctl` with this option takes one plain integer and touches no memory of ours.
    if unsafe { prctl(PR_SET_CHILD_SUBREAPER, 1 as std::ffi::c_ulong) } == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reaps one child that has ended, without waiting: its pid and exit code (128 +
/// the signal when a signal ended it), or `None` while none has ended (or there are
/// no children).
pub fn reap_one() -> Option<(u32, i32)> {
    let mut status = 0i32;
    // SAFETY: `status` is a valid, writable int for the duration of the call;
    // pid -1 with WNOHANG asks for any ended child and never blocks.
    let pid = unsafe { waitpid(-1, &mut status, WNOHANG) };
    let pid = u32::try_from(pid).ok().filter(|p| *p > 0)?;
    let code = match status & 0x7f {
        0 => (status >> 8) & 0xff,
        signal => 128 + signal,
    };
    Some((pid, code))
}

/// Every child of this process (all its threads' children), from `/proc`.
pub fn children() -> Vec<u32> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return Vec::new();
    };
    let mut out: Vec<u32> = tasks
        .filter_map(Result::ok)
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .flat_map(|list| {
            list.split_whitespace()
                .filter_map(|pid| pid.parse().ok())
                .collect::<Vec<u32>>()
        })
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// Routes `signum` too to the channel of [`interrupt_signals`] (installed first).
pub fn route_signal(signum: i32) {
    // SAFETY: as in `interrupt_signals`: `on_signal` only does async-signal-safe work.
    unsafe {
        signal(signum, on_signal);
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
    fn _exit(status: i32) -> !;
}

/// Ends the process at once with `code`: no destructors, no `atexit` handlers, no
/// flushing of buffers. For a thread that must stop the process while others are
/// inside C++ code (ggml's abort callback, `llama::rpc`), where the static
/// destructors `std::process::exit` runs could crash or deadlock under them.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: `_exit` takes a plain integer and never returns; skipping every
    // destructor is its purpose, and nothing of ours needs one to stay sound.
    unsafe { _exit(code) }
}

/// The effective user id: whose files this process may trust (token files).
pub fn effective_uid() -> u32 {
    // SAFETY: `geteuid` takes no arguments, cannot fail and touches no memory of ours.
    unsafe { geteuid() }
}

pub mod tcp {
    //! TCP options on connections this process holds but did not open: ggml's
    //! RPC connections to its workers (`llama::rpc`), found by their peer
    //! (`getpeername`) and given keepalive and a user timeout (`setsockopt`), so
    //! that a worker box that vanishes turns into an error instead of a wait
    //! without end.

    use std::ffi::c_void;
    use std::io;
    use std::net::{Ipv4Addr, SocketAddrV4};

    const AF_INET: u16 = 2;
    const SOL_SOCKET: i32 = 1;
    const SO_KEEPALIVE: i32 = 9;
    const IPPROTO_TCP: i32 = 6;
    const TCP_KEEPIDLE: i32 = 4;
    const TCP_KEEPINTVL: i32 = 5;
    const TCP_KEEPCNT: i32 = 6;
    const TCP_USER_TIMEOUT: i32 = 18;

    extern "C" {
        fn getpeername(fd: i32, addr: *mut u8, len: *mut u32) -> i32;
        fn setsockopt(fd: i32, level: i32, name: i32, value: *const c_void, len: u32) -> i32;
        #[cfg(test)]
        fn getsockopt(fd: i32, level: i32, name: i32, value: *mut c_void, len: *mut u32) -> i32;
    }

    /// The IPv4 peer of `fd`, or `None` when it is no connected IPv4 socket.
    pub fn peer_v4(fd: i32) -> Option<SocketAddrV4> {
        // Room for any `struct sockaddr` (`sockaddr_storage` is 128 bytes).
        let mut buf = [0u8; 128];
        let mut len = buf.len() as u32;
        // SAFETY: `buf` is writable for `len` bytes and `len` is a valid `socklen_t`;
        // the kernel writes at most `len` bytes and only reads `fd`, whatever it is.
        if unsafe { getpeername(fd, buf.as_mut_ptr(), &mut len) } != 0 || len < 8 {
            return None;
        }
        // `struct sockaddr_in`: family (host order), port and address (network order).
        if u16::from_ne_bytes([buf[0], buf[1]]) != AF_INET {
            return None;
        }
        let port = u16::from_be_bytes([buf[2], buf[3]]);
        let ip = Ipv4Addr::new(buf[4], buf[5], buf[6], buf[7]);
        Some(SocketAddrV4::new(ip, port))
    }

    /// When a silent peer counts as gone.
    #[derive(Debug, Clone, Copy)]
    pub struct KeepAlive {
        /// Seconds of silence before the first probe.
        pub idle_secs: i32,
        pub interval_secs: i32,
        /// Unanswered probes before the connection fails.
        pub probes: i32,
        /// How long sent data may stay unacknowledged before the connection fails.
        pub user_timeout_ms: i32,
    }

    /// Turns keepalive on for the TCP socket `fd`, with `keep`'s timings.
    pub fn keep_alive(fd: i32, keep: &KeepAlive) -> io::Result<()> {
        set(fd, SOL_SOCKET, SO_KEEPALIVE, 1)?;
        set(fd, IPPROTO_TCP, TCP_KEEPIDLE, keep.idle_secs)?;
        set(fd, IPPROTO_TCP, TCP_KEEPINTVL, keep.interval_secs)?;
        set(fd, IPPROTO_TCP, TCP_KEEPCNT, keep.probes)?;
        set(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, keep.user_timeout_ms)
    }

    fn set(fd: i32, level: i32, name: i32, value: i32) -> io::Result<()> {
        // SAFETY: `value` is an `int` that lives for the call, and its size is passed;
        // the kernel only reads it.
        let rc = unsafe { setsockopt(fd, level, name, (&raw const value).cast(), 4) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// An `int` socket option of `fd` (tests check what `keep_alive` set).
    #[cfg(test)]
    pub fn get(fd: i32, level: i32, name: i32) -> io::Result<i32> {
        let mut value = 0i32;
        let mut len = 4u32;
        // SAFETY: `value` is a writable `int` and `len` says so; the kernel writes at most that.
        let rc = unsafe { getsockopt(fd, level, name, (&raw mut value).cast(), &mut len) };
        if rc == 0 {
            Ok(value)
        } else {
            Err(io::Error::last_os_error())
        }
    }

    #[cfg(test)]
    pub const KEEPALIVE_OPTION: (i32, i32) = (SOL_SOCKET, SO_KEEPALIVE);
    #[cfg(test)]
    pub const KEEPIDLE_OPTION: (i32, i32) = (IPPROTO_TCP, TCP_KEEPIDLE);
}

pub mod at {
    //! Safe wrappers over `openat`, `mkdirat`, `renameat`, `unlinkat`,
    //! `readlinkat` and `fdopendir`/`readdir`: each takes a directory handle and
    //! one entry name, and none follows a symlink in that name.

    use std::ffi::{c_char, CStr, CString, OsStr, OsString};
    use std::fs::File;
    use std::io;
    use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd};
    use std::os::unix::ffi::{OsStrExt, OsStringExt};

    #[cfg(not(all(target_os = "linux", target_pointer_width = "64")))]
    compile_error!("sys::at declares Linux's 64-bit `struct dirent` and open flags by hand");

    // Open flags. The generic values; ARM and AArch64 move the directory ones.
    const O_RDONLY: i32 = 0;
    const O_WRONLY: i32 = 0o1;
    const O_CREAT: i32 = 0o100;
    const O_EXCL: i32 = 0o200;
    const O_NONBLOCK: i32 = 0o4000;
    #[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
    const O_DIRECTORY: i32 = 0o40000;
    #[cfg(any(target_arch = "aarch64", target_arch = "arm"))]
    const O_NOFOLLOW: i32 = 0o100000;
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    ))]
    const O_DIRECTORY: i32 = 0o200000;
    #[cfg(any(
        target_arch = "x86_64",
        target_arch = "x86",
        target_arch = "riscv64",
        target_arch = "loongarch64"
    ))]
    const O_NOFOLLOW: i32 = 0o400000;
    const O_CLOEXEC: i32 = 0o2000000;
    const O_PATH: i32 = 0o10000000;
    const DT_DIR: u8 = 4;
    const DT_REG: u8 = 8;
    const DT_LNK: u8 = 10;
    const DT_UNKNOWN: u8 = 0;
    /// Longest symlink target Linux stores (`PATH_MAX` less the NUL).
    const MAX_LINK_TARGET: usize = 4095;

    /// The head of Linux's `struct dirent` on 64-bit targets (glibc and musl
    /// agree); `d_name` is NUL-terminated within the record.
    #[repr(C)]
    struct Dirent {
        d_ino: u64,
        d_off: i64,
        d_reclen: u16,
        d_type: u8,
        d_name: [c_char; 256],
    }

    /// libc's opaque `DIR`.
    #[repr(C)]
    struct Dir {
        _private: [u8; 0],
    }

    extern "C" {
        fn openat(dirfd: i32, path: *const c_char, flags: i32, ...) -> i32;
        fn mkdirat(dirfd: i32, path: *const c_char, mode: u32) -> i32;
        fn renameat(
            olddirfd: i32,
            oldpath: *const c_char,
            newdirfd: i32,
            newpath: *const c_char,
        ) -> i32;
        fn unlinkat(dirfd: i32, path: *const c_char, flags: i32) -> i32;
        fn readlinkat(dirfd: i32, path: *const c_char, buf: *mut c_char, size: usize) -> isize;
        fn fdopendir(fd: i32) -> *mut Dir;
        fn readdir(dir: *mut Dir) -> *mut Dirent;
        fn closedir(dir: *mut Dir) -> i32;
        fn __errno_location() -> *mut i32;
        #[cfg(test)]
        fn renameat2(
            olddirfd: i32,
            oldpath: *const c_char,
            newdirfd: i32,
            newpath: *const c_char,
            flags: u32,
        ) -> i32;
    }

    /// What [`open`] opens a name as. Every kind is close-on-exec and refuses
    /// to follow a symlink in the name (`O_NOFOLLOW`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum OpenAs {
        /// A directory, as a handle for further `*at` calls only (`O_PATH`):
        /// needs search permission, not read permission. A symlink fails
        /// with `ENOTDIR`.
        DirHandle,
        /// A directory to list or sync.
        Dir,
        /// Any entry, for its metadata only (`O_PATH`); a symlink opens as itself.
        Entry,
        /// A file to read; `O_NONBLOCK`, so that a FIFO does not block the open.
        /// A symlink fails with `ELOOP`.
        Read,
        /// A new file to write (mode 0o666 less the umask); fails if the name exists.
        CreateNew,
    }

    impl OpenAs {
        fn flags(self) -> i32 {
            let kind = match self {
                OpenAs::DirHandle => O_PATH | O_DIRECTORY,
                OpenAs::Dir => O_RDONLY | O_DIRECTORY,
                OpenAs::Entry => O_PATH,
                OpenAs::Read => O_RDONLY | O_NONBLOCK,
                OpenAs::CreateNew => O_WRONLY | O_CREAT | O_EXCL,
            };
            kind | O_NOFOLLOW | O_CLOEXEC
        }
    }

    /// The type `readdir` reports for an entry, without a `stat`.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum EntryType {
        Dir,
        File,
        Symlink,
        Other,
        /// The file system does not say; ask with [`OpenAs::Entry`] and `metadata`.
        Unknown,
    }

    fn c_name(name: &OsStr) -> io::Result<CString> {
        Ok(CString::new(name.as_bytes())?)
    }

    fn check(rc: i32) -> io::Result<()> {
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Opens `name` in the directory `dir`.
    pub fn open(dir: BorrowedFd<'_>, name: &OsStr, how: OpenAs) -> io::Result<File> {
        let name = c_name(name)?;
        let mode: u32 = 0o666;
        // SAFETY: `name` is a NUL-terminated string that outlives the call,
        // `dir` is an open descriptor for the duration of the borrow, and the
        // variadic mode is passed as the `unsigned int` a `mode_t` promotes to.
        let fd = unsafe { openat(dir.as_raw_fd(), name.as_ptr(), how.flags(), mode) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `openat` just returned this descriptor and nothing else owns it.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    /// Creates the directory `name` in `dir` (mode 0o777 less the umask).
    pub fn mkdir(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
        let name = c_name(name)?;
        // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is open.
        check(unsafe { mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o777) })
    }

    /// Renames `from` in `from_dir` to `to` in `to_dir`, replacing `to`
    /// itself (never what a symlink there points to).
    pub fn rename(
        from_dir: BorrowedFd<'_>,
        from: &OsStr,
        to_dir: BorrowedFd<'_>,
        to: &OsStr,
    ) -> io::Result<()> {
        let (from, to) = (c_name(from)?, c_name(to)?);
        // SAFETY: both names are NUL-terminated and outlive the call; both
        // descriptors are open for the duration of their borrows.
        check(unsafe {
            renameat(
                from_dir.as_raw_fd(),
                from.as_ptr(),
                to_dir.as_raw_fd(),
                to.as_ptr(),
            )
        })
    }

    /// Removes the non-directory `name` from `dir` (a symlink itself, not its target).
    pub fn unlink(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<()> {
        let name = c_name(name)?;
        // SAFETY: `name` is NUL-terminated and outlives the call; `dir` is open.
        check(unsafe { unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) })
    }

    /// The target of the symlink `name` in `dir`; `EINVAL` when `name` is not a symlink.
    pub fn read_link(dir: BorrowedFd<'_>, name: &OsStr) -> io::Result<OsString> {
        let name = c_name(name)?;
        let mut buf = vec![0u8; MAX_LINK_TARGET + 1];
        // SAFETY: `buf` is writable for `buf.len()` bytes, `name` is
        // NUL-terminated and outlives the call, and `dir` is open.
        let n = unsafe {
            readlinkat(
                dir.as_raw_fd(),
                name.as_ptr(),
                buf.as_mut_ptr().cast(),
                buf.len(),
            )
        };
        let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
        if n >= buf.len() {
            return Err(io::Error::other("symlink target too long"));
        }
        buf.truncate(n);
        Ok(OsString::from_vec(buf))
    }

    /// The entries of the directory `dir` (without `.` and `..`), unsorted.
    pub fn list(dir: BorrowedFd<'_>) -> io::Result<Vec<(OsString, EntryType)>> {
        // fdopendir takes ownership of its descriptor, so it gets a fresh one.
        let own = OwnedFd::from(open(dir, OsStr::new("."), OpenAs::Dir)?);
        let fd = own.into_raw_fd();
        // SAFETY: `fd` is an open directory descriptor we own; on success the
        // stream owns it (closed by `closedir` below), on failure we close it.
        let stream = unsafe { fdopendir(fd) };
        if stream.is_null() {
            let err = io::Error::last_os_error();
            // SAFETY: fdopendir failed, so `fd` is still ours alone to close.
            drop(unsafe { OwnedFd::from_raw_fd(fd) });
            return Err(err);
        }
        let entries = read_entries(stream);
        // SAFETY: `stream` came from `fdopendir` and is closed exactly once.
        unsafe { closedir(stream) };
        entries
    }

    fn read_entries(stream: *mut Dir) -> io::Result<Vec<(OsString, EntryType)>> {
        let mut entries = Vec::new();
        loop {
            // SAFETY: `__errno_location` returns this thread's errno, which
            // readdir only sets on error, so it is cleared first.
            unsafe { *__errno_location() = 0 };
            // SAFETY: `stream` is an open directory stream used by this thread only.
            let entry = unsafe { readdir(stream) };
            if entry.is_null() {
                let err = io::Error::last_os_error();
                return match err.raw_os_error() {
                    Some(0) | None => Ok(entries),
                    Some(_) => Err(err),
                };
            }
            // SAFETY: readdir returned a valid record that stays valid until the
            // next readdir on this stream; only its fixed head and its
            // NUL-terminated name are read, through raw pointers, so no
            // reference spans bytes past the record's actual length.
            let (name, d_type) = unsafe {
                let name = CStr::from_ptr(std::ptr::addr_of!((*entry).d_name).cast::<c_char>());
                (name.to_bytes(), std::ptr::addr_of!((*entry).d_type).read())
            };
            if name == b"." || name == b".." {
                continue;
            }
            entries.push((OsStr::from_bytes(name).to_os_string(), entry_type(d_type)));
        }
    }

    fn entry_type(d_type: u8) -> EntryType {
        match d_type {
            DT_DIR => EntryType::Dir,
            DT_REG => EntryType::File,
            DT_LNK => EntryType::Symlink,
            DT_UNKNOWN => EntryType::Unknown,
            _ => EntryType::Other,
        }
    }

    /// Swaps two directory entries atomically (`renameat2` with
    /// `RENAME_EXCHANGE`); the file-tool race test flips a directory and a
    /// symlink with it.
    #[cfg(test)]
    pub fn exchange(a: &std::path::Path, b: &std::path::Path) -> io::Result<()> {
        const AT_FDCWD: i32 = -100;
        const RENAME_EXCHANGE: u32 = 2;
        let (a, b) = (c_name(a.as_os_str())?, c_name(b.as_os_str())?);
        // SAFETY: both paths are NUL-terminated strings that outlive the call.
        check(unsafe { renameat2(AT_FDCWD, a.as_ptr(), AT_FDCWD, b.as_ptr(), RENAME_EXCHANGE) })
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
    fn at_calls_stay_in_their_directory_and_never_follow_symlinks() {
        use super::at::{self, EntryType, OpenAs};
        use std::ffi::OsStr;
        use std::os::fd::AsFd;
        let dir = crate::util::fs::test_support::TempDir::new("sys-at");
        let handle = File::open(&dir.0).expect("temp dir opens");
        let fd = handle.as_fd();
        let name = |s: &str| OsStr::new(s).to_os_string();
        at::mkdir(fd, &name("sub")).expect("mkdir");
        let mut file = at::open(fd, &name("new.txt"), OpenAs::CreateNew).expect("create");
        std::io::Write::write_all(&mut file, b"hi").expect("write");
        assert!(at::open(fd, &name("new.txt"), OpenAs::CreateNew).is_err());
        at::rename(fd, &name("new.txt"), fd, &name("a.txt")).expect("rename");
        std::os::unix::fs::symlink("/etc/passwd", dir.0.join("link")).expect("symlink");
        assert_eq!(
            at::read_link(fd, &name("link")).expect("readlink"),
            name("/etc/passwd")
        );
        assert!(at::read_link(fd, &name("a.txt")).is_err());
        assert!(at::open(fd, &name("link"), OpenAs::Read).is_err());
        assert!(at::open(fd, &name("link"), OpenAs::DirHandle).is_err());
        let entry = at::open(fd, &name("link"), OpenAs::Entry).expect("O_PATH on a link");
        assert!(entry.metadata().expect("fstat").is_symlink());
        let mut listed = at::list(fd).expect("list");
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            listed,
            [
                (name("a.txt"), EntryType::File),
                (name("link"), EntryType::Symlink),
                (name("sub"), EntryType::Dir)
            ]
        );
        at::unlink(fd, &name("link")).expect("unlink");
        assert!(!dir.0.join("link").exists());
        assert!(at::open(fd, &name("a\0b"), OpenAs::Read).is_err());
    }

    #[test]
    fn refuses_dangerous_pids() {
        assert!(kill_process_group(0).is_err());
        assert!(kill_process_group(1).is_err());
        assert!(kill_process_group(u32::MAX).is_err());
    }
}

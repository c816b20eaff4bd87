//! Server tokens: made at start when none is configured, published to this
//! user's own clients through a private file, compared in constant time.
//!
//! Loopback is not a trust boundary on a shared GPU box: every local user can
//! connect to 127.0.0.1. So every server that can run tools needs a token, and
//! when the user configured none, one is generated (32 random bytes) and
//! written, with the port, to `$XDG_RUNTIME_DIR/shepherd/server-PORT.json`
//! (else `$XDG_STATE_HOME/shepherd/run/`): the directory is `0700`, the file
//! `0600`, both owned by the user, as Jupyter keeps its `jpserver-*.json`.
//! shepherd's own clients (`--backend cli`, `--tool-backend`) running as the
//! same user look there when they have no token of their own, and only for a
//! loopback address; like OpenSSH with its keys, they ignore a file that
//! another user owns or that others could read. The file is removed when the
//! server exits ([`remove_published`], on every exit path).
//!
//! A pid alone does not say which server wrote a file: a server killed with
//! `SIGKILL` leaves its file behind, and the kernel gives its pid to the next
//! process, which may be anything, listening anywhere. So the file also
//! records which process the server is ([`ProcessIdentity`]): its start time
//! (field 22 of `/proc/PID/stat`, in clock ticks since boot; fixed for the
//! life of a process and different for the next one to get the pid) and its
//! executable as the `(device, inode)` of `/proc/PID/exe`. The inode, not the
//! path: upgrading shepherd replaces the file at the path while the running
//! server keeps its old inode (its `exe` link then reads `... (deleted)`), so
//! a path would turn every server running across an upgrade into a stranger,
//! while the inode stays the server's own for as long as it runs. Before a
//! token is sent ([`find`]) or a server listed ([`running`]) the record is
//! checked against the live `/proc/PID`: the process must be this user's, and
//! its start time and executable must be the recorded ones (the start time is
//! read before and after the executable, so a pid reused in between is
//! caught). Anything else, a file of an older version without these fields
//! included, is not used. A file whose process is gone or is another one is
//! stale and removed, but only from our own private directory, and only the
//! very file that was judged: it is first renamed aside and put back if a
//! server wrote a fresh one at that name meanwhile. Without `/proc` (not
//! Linux, or not mounted) nothing can be checked, so nothing is sent: a
//! server cannot publish its token then and says so, and `shepherd ps` says
//! why it cannot list.

use std::fs;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::util::net;

/// Random bytes in a generated token (hex-encoded: 64 characters).
const TOKEN_BYTES: usize = 32;

/// What a token file holds.
#[derive(Debug, Serialize, Deserialize)]
struct TokenRecord {
    /// `cliserver`, `toolserver` or `server`.
    kind: String,
    /// The address as clients reach it (`http://127.0.0.1:8000` or `127.0.0.1:9876`).
    address: String,
    port: u16,
    pid: u32,
    token: String,
    /// Which process `pid` was when the file was written; absent in files of
    /// older versions, which are therefore never trusted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    process: Option<ProcessIdentity>,
}

/// What tells one process from a later one that got the same pid: its start
/// time and the `(device, inode)` of its executable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
struct ProcessIdentity {
    /// Field 22 (`starttime`) of `/proc/PID/stat`: clock ticks after boot.
    start_time: u64,
    /// `st_dev` of `/proc/PID/exe`.
    exe_dev: u64,
    /// `st_ino` of `/proc/PID/exe`.
    exe_ino: u64,
}

/// Why a token file is not used.
#[derive(Debug)]
enum Unverified {
    /// Its process is gone: the file is stale.
    Gone,
    /// Its pid is now another process (or another user's): the file is stale.
    Other,
    /// It does not say which process wrote it (an older version's file).
    Unrecorded,
    /// The process could not be checked (no `/proc`, no access).
    Unknown(io::Error),
}

impl Unverified {
    /// Whether the file is stale, so that removing it loses nothing.
    fn is_stale(&self) -> bool {
        matches!(self, Unverified::Gone | Unverified::Other)
    }
}

impl std::fmt::Display for Unverified {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Unverified::Gone => f.write_str("the server that wrote it is gone"),
            Unverified::Other => f.write_str("its pid is now another process"),
            Unverified::Unrecorded => f.write_str("it does not say which process wrote it"),
            Unverified::Unknown(error) => write!(f, "its process cannot be checked: {error}"),
        }
    }
}

/// A token file as read: the record and the file's `(device, inode)`, so a
/// stale file is removed only when the name still holds that very file.
#[derive(Debug)]
struct Published {
    record: TokenRecord,
    file: (u64, u64),
}

/// Files this process published, removed at exit.
static PUBLISHED: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

/// A new token: 32 bytes from the kernel's random source, hex-encoded.
pub fn generate() -> io::Result<String> {
    let mut bytes = [0u8; TOKEN_BYTES];
    fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// Whether `given` is the token, compared without stopping at the first
/// difference, so timing tells nothing about how much of a guess was right.
/// Exact bytes: no trimming, no case folding.
pub fn token_matches(given: &str, token: &str) -> bool {
    let (a, b) = (given.as_bytes(), token.as_bytes());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

/// The directory token files live in: `$XDG_RUNTIME_DIR/shepherd` (a per-user
/// tmpfs the system empties at logout), else `$XDG_STATE_HOME/shepherd/run`.
pub fn token_dir() -> PathBuf {
    match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(dir) if dir.is_absolute() => dir.join("shepherd"),
        _ => crate::util::dirs::state_dir().join("run"),
    }
}

/// The token file of the server on `port`.
pub fn token_file(port: u16) -> PathBuf {
    file_in(&token_dir(), port)
}

/// The token file of the server on `port` in the token directory `dir`.
fn file_in(dir: &Path, port: u16) -> PathBuf {
    dir.join(format!("server-{port}.json"))
}

/// Writes the token file for a server listening on `addr` (mode 0600 in a
/// 0700 directory), with this process's [`ProcessIdentity`], and remembers it
/// for [`remove_published`]. Fails without `/proc`: a file that clients could
/// not check would never be used.
pub fn publish(kind: &str, address: &str, addr: SocketAddr, token: &str) -> io::Result<PathBuf> {
    let process = identity(std::process::id()).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot record which process this is ({error}); clients check it in /proc"),
        )
    })?;
    let dir = token_dir();
    ensure_private_dir(&dir)?;
    remove_stale(&dir);
    let path = file_in(&dir, addr.port());
    let record = TokenRecord {
        kind: kind.to_string(),
        address: address.to_string(),
        port: addr.port(),
        pid: std::process::id(),
        token: token.to_string(),
        process: Some(process),
    };
    let mut text = serde_json::to_string_pretty(&record).map_err(io::Error::other)?;
    text.push('\n');
    crate::util::fs::write_atomic(&path, text.as_bytes())?;
    if let Ok(mut published) = PUBLISHED.lock() {
        published.push(path.clone());
    }
    Ok(path)
}

/// Removes the token files this process published (when they are still its own).
pub fn remove_published() {
    let Ok(mut published) = PUBLISHED.lock() else {
        return;
    };
    for path in published.drain(..) {
        if let Ok(read) = read_record(&path) {
            if read.record.pid == std::process::id() {
                remove_if_unchanged(&path, read.file);
            }
        }
    }
}

/// The token of this user's shepherd server at `host:port`, if it published
/// one and the process it names is still that server (see the module doc).
/// Only for loopback hosts: a token is never sent to another machine.
pub fn find(host: &str, port: u16) -> Option<String> {
    if !net::is_loopback_host(host) {
        return None;
    }
    find_in(&token_dir(), port)
}

/// [`find`] in the token directory `dir`.
fn find_in(dir: &Path, port: u16) -> Option<String> {
    let path = file_in(dir, port);
    let read = match read_record(&path) {
        Ok(read) => read,
        Err(error) => {
            if error.kind() != io::ErrorKind::NotFound {
                crate::util::log::debug(crate::util::log::Category::Http, || {
                    format!("ignoring the token file {}: {error}", path.display())
                });
            }
            return None;
        }
    };
    if read.record.port != port {
        return None;
    }
    match verify(&read.record) {
        Ok(()) => {
            crate::util::redact::register_secret(&read.record.token);
            Some(read.record.token)
        }
        Err(why) => {
            crate::util::log::debug(crate::util::log::Category::Http, || {
                format!("not using the token file {}: {why}", path.display())
            });
            if why.is_stale() {
                remove_stale_file(&path, read.file);
            }
            None
        }
    }
}

/// [`find`] for a base URL (`http://127.0.0.1:8000/v1`).
pub fn find_for_url(url: &str) -> Option<String> {
    find(net::url_host(url), net::url_port(url)?)
}

/// [`find`] for a `HOST:PORT` address.
pub fn find_for_address(address: &str) -> Option<String> {
    let (host, port) = net::host_and_port(address)?;
    find(host, port)
}

/// One of this user's running servers, as its token file describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Running {
    /// `cliserver`, `toolserver` or `server`.
    pub kind: String,
    pub address: String,
    pub pid: u32,
}

/// This user's running shepherd servers, by port: those whose token file
/// names a live process that is still the one that wrote it. Stale files are
/// removed on the way. Fails when `/proc` cannot be read, since then no file
/// can be checked.
pub fn running() -> io::Result<Vec<Running>> {
    running_in(&token_dir())
}

/// [`running`] with the token directory `dir`.
fn running_in(dir: &Path) -> io::Result<Vec<Running>> {
    identity(std::process::id()).map_err(|error| {
        io::Error::new(
            error.kind(),
            format!("cannot check which servers run: /proc/self cannot be read ({error})"),
        )
    })?;
    let mut found: Vec<(u16, Running)> = token_files(dir)
        .into_iter()
        .filter_map(|path| {
            let read = read_record(&path).ok()?;
            match verify(&read.record) {
                Ok(()) => Some(read.record),
                Err(why) => {
                    if why.is_stale() {
                        remove_stale_file(&path, read.file);
                    }
                    None
                }
            }
        })
        .map(|r| {
            let running = Running {
                kind: r.kind,
                address: r.address,
                pid: r.pid,
            };
            (r.port, running)
        })
        .collect();
    found.sort_by_key(|(port, _)| *port);
    Ok(found.into_iter().map(|(_, r)| r).collect())
}

/// The `server-*.json` files in `dir`.
fn token_files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("server-") && n.ends_with(".json"))
        })
        .collect()
}

/// Which process `pid` is now, from `/proc/PID`. The start time is read
/// before and after the executable, so that a pid that changed hands in
/// between is an error rather than a mix of two processes.
fn identity(pid: u32) -> io::Result<ProcessIdentity> {
    let dir = Path::new("/proc").join(pid.to_string());
    let before = start_time(&dir)?;
    let exe = fs::metadata(dir.join("exe"))?;
    let after = start_time(&dir)?;
    if before != after {
        return Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("process {pid} changed while it was checked"),
        ));
    }
    Ok(ProcessIdentity {
        start_time: before,
        exe_dev: exe.dev(),
        exe_ino: exe.ino(),
    })
}

/// The start time in `DIR/stat`.
fn start_time(dir: &Path) -> io::Result<u64> {
    let stat = fs::read_to_string(dir.join("stat"))?;
    parse_start_time(&stat).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}/stat has no start time", dir.display()),
        )
    })
}

/// Field 22 (`starttime`) of a `/proc/PID/stat` line. Field 2 is the command
/// name in parentheses, which may itself hold spaces and `)`: the fields
/// after it start after the last `)` (the name is at most 16 bytes, so the
/// rest of the line can hold no `)`).
fn parse_start_time(stat: &str) -> Option<u64> {
    let (_, rest) = stat.rsplit_once(')')?;
    // `rest` starts at field 3 (state), so field 22 is its 20th.
    rest.split_ascii_whitespace().nth(19)?.parse().ok()
}

/// Whether `record` names a live process of this user that is the one that
/// wrote it.
fn verify(record: &TokenRecord) -> Result<(), Unverified> {
    // Gone only when /proc itself is there to say so.
    let unavailable = |error: io::Error| {
        if error.kind() == io::ErrorKind::NotFound && proc_mounted() {
            Unverified::Gone
        } else {
            Unverified::Unknown(error)
        }
    };
    // /proc/PID belongs to the process's effective uid: another user's
    // process is not this user's server, whatever its start time.
    let owner = fs::metadata(Path::new("/proc").join(record.pid.to_string()))
        .map_err(unavailable)?
        .uid();
    if owner != crate::util::sys::effective_uid() {
        return Err(Unverified::Other);
    }
    let now = identity(record.pid).map_err(unavailable)?;
    match record.process {
        None => Err(Unverified::Unrecorded),
        Some(recorded) if recorded != now => Err(Unverified::Other),
        Some(_) => Ok(()),
    }
}

/// Whether `/proc` is there to ask (this process's own entry can be read).
fn proc_mounted() -> bool {
    Path::new("/proc/self/stat").exists()
}

/// Removes the token files in `dir` whose server is gone (killed, so it never
/// cleaned up) or whose pid is now another process; files this user does not
/// own, or cannot read, are left alone, and so are files that cannot be
/// checked.
fn remove_stale(dir: &Path) {
    for path in token_files(dir) {
        if let Ok(read) = read_record(&path) {
            if verify(&read.record).is_err_and(|why| why.is_stale()) {
                remove_stale_file(&path, read.file);
            }
        }
    }
}

/// Removes a stale token file, when the directory it is in is this user's
/// own private one (a file elsewhere is not ours to remove).
fn remove_stale_file(path: &Path, file: (u64, u64)) {
    let private = path.parent().is_some_and(|dir| {
        fs::symlink_metadata(dir).is_ok_and(|m| {
            m.is_dir() && m.uid() == crate::util::sys::effective_uid() && m.mode() & 0o077 == 0
        })
    });
    if private {
        remove_if_unchanged(path, file);
    }
}

/// Removes `path` if it still is the file `file` (`(device, inode)`) that was
/// read. A server may publish a fresh file at that name at any moment (by
/// rename), so the name is first renamed aside, which takes whichever file is
/// there at once; if that was a fresh one, it is linked back (`link` never
/// replaces a yet newer one).
fn remove_if_unchanged(path: &Path, file: (u64, u64)) {
    static ASIDE: AtomicU64 = AtomicU64::new(0);
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let aside = dir.join(format!(
        ".{}.removing-{}-{}",
        name.to_string_lossy(),
        std::process::id(),
        ASIDE.fetch_add(1, Ordering::Relaxed)
    ));
    if fs::rename(path, &aside).is_err() {
        return;
    }
    let taken = fs::symlink_metadata(&aside).map(|m| (m.dev(), m.ino()));
    if taken.is_ok_and(|taken| taken != file) {
        let _ = fs::hard_link(&aside, path);
    }
    let _ = fs::remove_file(&aside);
}

/// Reads a token file, trusting it only when this user owns it and nobody
/// else can read or write it (as OpenSSH treats private keys).
fn read_record(path: &Path) -> io::Result<Published> {
    let file = fs::File::open(path)?;
    let meta = file.metadata()?;
    check_private(path, &meta, 0o077)?;
    let mut text = String::new();
    file.take(64 * 1024).read_to_string(&mut text)?;
    let record =
        serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    Ok(Published {
        record,
        file: (meta.dev(), meta.ino()),
    })
}

/// Creates `dir` with mode 0700, or checks that an existing one is ours and
/// private (tightening its mode when it is ours but too open).
fn ensure_private_dir(dir: &Path) -> io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)?;
    let meta = fs::symlink_metadata(dir)?;
    if !meta.is_dir() {
        return Err(io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    if meta.uid() != crate::util::sys::effective_uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} belongs to another user", dir.display()),
        ));
    }
    if meta.mode() & 0o077 != 0 {
        fs::set_permissions(dir, fs::Permissions::from_mode(0o700))?;
    }
    Ok(())
}

fn check_private(path: &Path, meta: &fs::Metadata, forbidden: u32) -> io::Result<()> {
    if meta.uid() != crate::util::sys::effective_uid() {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{} belongs to another user", path.display()),
        ));
    }
    if meta.mode() & forbidden != 0 {
        return Err(io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "{} can be read by other users (mode {:o}); it must be 0600",
                path.display(),
                meta.mode() & 0o777
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_compared_exactly() {
        let a = generate().unwrap();
        let b = generate().unwrap();
        assert_eq!(a.len(), 2 * TOKEN_BYTES);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
        assert!(token_matches(&a, &a));
        assert!(!token_matches(&b, &a));
        assert!(!token_matches(&a.to_uppercase(), &a));
        assert!(!token_matches(&format!("{a} "), &a));
        assert!(!token_matches(&a[..a.len() - 1], &a));
        assert!(!token_matches("", &a));
        assert!(token_matches("", ""));
    }

    #[test]
    fn private_files_only() {
        let dir = std::env::temp_dir().join(format!("shepherd-auth-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        let mode = fs::metadata(&dir).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o700);
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        ensure_private_dir(&dir).unwrap();
        assert_eq!(fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);

        let path = dir.join("server-1.json");
        let record =
            r#"{"kind":"toolserver","address":"127.0.0.1:1","port":1,"pid":1,"token":"t"}"#;
        crate::util::fs::write_atomic(&path, record.as_bytes()).unwrap();
        assert_eq!(fs::metadata(&path).unwrap().mode() & 0o777, 0o600);
        assert_eq!(read_record(&path).unwrap().record.token, "t");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let error = read_record(&path).unwrap_err();
        assert!(error.to_string().contains("0600"), "{error}");
        let _ = fs::remove_dir_all(&dir);
    }

    /// A private directory of its own for one test.
    fn private_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("shepherd-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        dir
    }

    /// Writes a token file for `port` naming `pid` as `process`.
    fn write_record(dir: &Path, port: u16, pid: u32, process: Option<ProcessIdentity>) -> PathBuf {
        let record = TokenRecord {
            kind: "server".into(),
            address: format!("127.0.0.1:{port}"),
            port,
            pid,
            token: format!("token-{port}"),
            process,
        };
        let path = file_in(dir, port);
        let text = serde_json::to_string(&record).unwrap();
        crate::util::fs::write_atomic(&path, text.as_bytes()).unwrap();
        path
    }

    #[test]
    fn start_time_is_field_22_after_the_last_parenthesis() {
        let tail = "S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 123456 20 21";
        assert_eq!(
            parse_start_time(&format!("42 (shepherd) {tail}")),
            Some(123456)
        );
        // A command name may hold spaces, ')' and digits that look like fields.
        let tricky = format!("42 (a) S 1 2 ) 9 9 (x)) {tail}");
        assert_eq!(parse_start_time(&tricky), Some(123456));
        assert_eq!(parse_start_time("42 (shepherd) S 1 2"), None);
        assert_eq!(parse_start_time("42 shepherd S"), None);
        assert_eq!(parse_start_time(""), None);
        let mine = identity(std::process::id()).unwrap();
        let stat = fs::read_to_string("/proc/self/stat").unwrap();
        assert_eq!(parse_start_time(&stat), Some(mine.start_time));
    }

    #[test]
    fn a_token_goes_only_to_the_process_that_wrote_it() {
        let dir = private_dir("verify");
        let me = std::process::id();
        let mine = identity(me).unwrap();
        let good = write_record(&dir, 1, me, Some(mine));
        assert_eq!(
            find_in(&dir, 1).as_deref(),
            Some("token-1"),
            "the server's own file"
        );
        // The pid is alive but is another process: started at another time...
        let later = ProcessIdentity {
            start_time: mine.start_time + 1,
            ..mine
        };
        let restarted = write_record(&dir, 2, me, Some(later));
        // ...or running another program.
        let program = ProcessIdentity {
            exe_ino: mine.exe_ino ^ 1,
            ..mine
        };
        let other_exe = write_record(&dir, 3, me, Some(program));
        // An older version's file says nothing to check: unverified.
        let old = write_record(&dir, 4, me, None);
        // A live child that is not the server (its start time and program differ).
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let child_file = write_record(&dir, 5, child.id(), Some(mine));
        for port in 2..=5 {
            assert_eq!(find_in(&dir, port), None, "port {port}");
        }
        let listed = running_in(&dir).unwrap();
        assert_eq!(
            listed,
            vec![Running {
                kind: "server".into(),
                address: "127.0.0.1:1".into(),
                pid: me,
            }]
        );
        assert!(good.exists(), "a good file stays");
        assert!(
            !restarted.exists() && !other_exe.exists() && !child_file.exists(),
            "files naming another process are stale and removed"
        );
        assert!(old.exists(), "an unverifiable file is left alone");
        let _ = child.kill();
        let _ = child.wait();
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn stale_files_are_removed_only_from_a_private_directory() {
        let dir = private_dir("open-dir");
        let mine = identity(std::process::id()).unwrap();
        let wrong = ProcessIdentity {
            start_time: mine.start_time + 1,
            ..mine
        };
        let path = write_record(&dir, 1, std::process::id(), Some(wrong));
        fs::set_permissions(&dir, fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(find_in(&dir, 1), None);
        assert!(
            path.exists(),
            "not ours to remove from a directory others can read"
        );
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_fresh_file_published_meanwhile_is_not_removed() {
        let dir = private_dir("fresh");
        let mine = identity(std::process::id()).unwrap();
        let stale = write_record(&dir, 1, std::process::id(), None);
        let judged = read_record(&stale).unwrap().file;
        // A server publishes anew after the stale file was read.
        let fresh = write_record(&dir, 1, std::process::id(), Some(mine));
        remove_stale_file(&fresh, judged);
        assert_eq!(find_in(&dir, 1).as_deref(), Some("token-1"));
        let names: Vec<_> = fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(names.len(), 1, "nothing left aside: {names:?}");
        remove_stale_file(&fresh, read_record(&fresh).unwrap().file);
        assert!(!fresh.exists(), "the very file judged is removed");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn token_files_of_servers_that_are_gone_are_removed() {
        let dir = private_dir("stale");
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let mine = identity(std::process::id()).unwrap();
        let stale = write_record(&dir, 1, gone, None);
        let live = write_record(&dir, 2, std::process::id(), Some(mine));
        let other = dir.join("notes.json");
        fs::write(&other, "{}").unwrap();
        remove_stale(&dir);
        assert!(!stale.exists(), "the killed server's file is gone");
        assert!(live.exists() && other.exists(), "the rest stays");
        let _ = fs::remove_dir_all(&dir);
    }
}

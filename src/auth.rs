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

use std::fs;
use std::io::{self, Read};
use std::net::SocketAddr;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
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
    token_dir().join(format!("server-{port}.json"))
}

/// Writes the token file for a server listening on `addr` (mode 0600 in a
/// 0700 directory) and remembers it for [`remove_published`].
pub fn publish(kind: &str, address: &str, addr: SocketAddr, token: &str) -> io::Result<PathBuf> {
    let dir = token_dir();
    ensure_private_dir(&dir)?;
    remove_stale(&dir);
    let path = dir.join(format!("server-{}.json", addr.port()));
    let record = TokenRecord {
        kind: kind.to_string(),
        address: address.to_string(),
        port: addr.port(),
        pid: std::process::id(),
        token: token.to_string(),
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
        if read_record(&path).is_ok_and(|r| r.pid == std::process::id()) {
            let _ = fs::remove_file(&path);
        }
    }
}

/// The token of this user's shepherd server at `host:port`, if it published
/// one. Only for loopback hosts: a token is never sent to another machine.
pub fn find(host: &str, port: u16) -> Option<String> {
    if !net::is_loopback_host(host) {
        return None;
    }
    let path = token_file(port);
    match read_record(&path) {
        // The server that wrote it is gone: whatever listens there now is not it.
        Ok(record) if !alive(record.pid) => {
            let _ = fs::remove_file(&path);
            None
        }
        Ok(record) if record.port == port => {
            crate::redact::register_secret(&record.token);
            Some(record.token)
        }
        Ok(_) => None,
        Err(error) => {
            if error.kind() != io::ErrorKind::NotFound {
                crate::log::debug(crate::log::Category::Http, || {
                    format!("ignoring the token file {}: {error}", path.display())
                });
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

/// This user's running shepherd servers, by port; token files of servers that
/// are gone are removed on the way.
pub fn running() -> Vec<Running> {
    let dir = token_dir();
    remove_stale(&dir);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u16, Running)> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("server-"))
        })
        .filter_map(|p| read_record(&p).ok())
        .filter(|r| alive(r.pid))
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
    found.into_iter().map(|(_, r)| r).collect()
}

/// Whether process `pid` still runs (its `/proc` entry is there).
fn alive(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes the token files in `dir` whose server is gone (killed, so it never
/// cleaned up); files this user does not own, or cannot read, are left alone.
fn remove_stale(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for path in entries.flatten().map(|e| e.path()) {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with("server-") && name.ends_with(".json")) {
            continue;
        }
        if read_record(&path).is_ok_and(|r| !alive(r.pid)) {
            let _ = fs::remove_file(&path);
        }
    }
}

/// Reads a token file, trusting it only when this user owns it and nobody
/// else can read or write it (as OpenSSH treats private keys).
fn read_record(path: &Path) -> io::Result<TokenRecord> {
    let file = fs::File::open(path)?;
    let meta = file.metadata()?;
    check_private(path, &meta, 0o077)?;
    let mut text = String::new();
    file.take(64 * 1024).read_to_string(&mut text)?;
    serde_json::from_str(&text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
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
    if meta.uid() != crate::sys::effective_uid() {
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
    if meta.uid() != crate::sys::effective_uid() {
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
        assert_eq!(read_record(&path).unwrap().token, "t");
        fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
        let error = read_record(&path).unwrap_err();
        assert!(error.to_string().contains("0600"), "{error}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn token_files_of_servers_that_are_gone_are_removed() {
        let dir = std::env::temp_dir().join(format!("shepherd-stale-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        ensure_private_dir(&dir).unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let gone = child.id();
        child.wait().unwrap();
        let write = |port: u16, pid: u32| {
            let record = format!(
                r#"{{"kind":"server","address":"127.0.0.1:{port}","port":{port},"pid":{pid},"token":"t"}}"#
            );
            let path = dir.join(format!("server-{port}.json"));
            crate::util::fs::write_atomic(&path, record.as_bytes()).unwrap();
            path
        };
        let (stale, live) = (write(1, gone), write(2, std::process::id()));
        let other = dir.join("notes.json");
        fs::write(&other, "{}").unwrap();
        assert!(!alive(gone) && alive(std::process::id()));
        remove_stale(&dir);
        assert!(!stale.exists(), "the killed server's file is gone");
        assert!(live.exists() && other.exists(), "the rest stays");
        let _ = fs::remove_dir_all(&dir);
    }
}

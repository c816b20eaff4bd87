//! Confining file tools to the workspace root.
//!
//! A requested path is joined to the root, the longest prefix of it that
//! exists is canonicalised (resolving every symlink, and failing on a dangling
//! one), and the not-yet-existing rest may only hold plain names. The result
//! must lie under the canonical root, compared by components, never by string
//! prefix (`/ws_evil` is not inside `/ws`).
//!
//! Residual risk, documented rather than hidden: between this check and the
//! open, a process with write access to the workspace could swap a directory
//! for a symlink. Closing that needs `openat2(RESOLVE_BENEATH)`; the model
//! itself cannot race us, since tools run one at a time.

use std::io;
use std::path::{Component, Path, PathBuf};

/// Resolves `requested` (relative to `root`, or absolute inside it) to a canonical path under `root`.
pub fn resolve(root: &Path, requested: &str) -> Result<PathBuf, String> {
    if requested.contains('\0') {
        return Err("path contains a NUL byte".into());
    }
    let root = root
        .canonicalize()
        .map_err(|e| format!("workspace root {} is not usable: {e}", root.display()))?;
    let joined = root.join(requested.trim());
    let resolved =
        canonical_prefix(&joined).map_err(|e| format!("cannot resolve {requested}: {e}"))?;
    if resolved.starts_with(&root) {
        Ok(resolved)
    } else {
        Err(format!(
            "access denied: {requested} is outside the workspace {}",
            root.display()
        ))
    }
}

/// Canonicalises the longest existing prefix of `path` and appends the rest.
fn canonical_prefix(path: &Path) -> io::Result<PathBuf> {
    let mut existing = path.to_path_buf();
    let mut rest = Vec::new();
    // `symlink_metadata` sees a dangling symlink as existing, so canonicalize
    // fails on it below instead of letting a write follow it out of the root.
    while existing.symlink_metadata().is_err() {
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => break,
        }
    }
    let mut resolved = existing.canonicalize()?;
    for name in rest.iter().rev() {
        resolved.push(name);
    }
    check_plain_tail(path, &existing)?;
    Ok(resolved)
}

/// A missing tail may not hold `..` or `.`: the OS could not resolve them either.
fn check_plain_tail(path: &Path, existing: &Path) -> io::Result<()> {
    let tail = path.strip_prefix(existing).unwrap_or(path);
    if tail.components().all(|c| matches!(c, Component::Normal(_))) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::NotFound,
            "a directory named before '..' does not exist",
        ))
    }
}

/// `path` shown relative to `root` for messages to the model.
pub fn display(root: &Path, path: &Path) -> String {
    let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
    match path.strip_prefix(&root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".into(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    /// A unique temporary directory, removed on drop.
    pub(crate) struct TempDir(pub PathBuf);

    impl TempDir {
        pub(crate) fn new(label: &str) -> Self {
            static COUNTER: AtomicU32 = AtomicU32::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir()
                .join(format!("shepherd-test-{label}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).expect("temp dir must be creatable");
            TempDir(dir.canonicalize().expect("temp dir exists"))
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn inside_paths_resolve() {
        let dir = TempDir::new("paths-in");
        std::fs::create_dir(dir.0.join("sub")).unwrap();
        assert_eq!(resolve(&dir.0, "sub").unwrap(), dir.0.join("sub"));
        assert_eq!(
            resolve(&dir.0, "sub/../new.txt").unwrap(),
            dir.0.join("new.txt")
        );
        assert_eq!(
            resolve(&dir.0, "a/b/c.txt").unwrap(),
            dir.0.join("a/b/c.txt")
        );
        let absolute = dir.0.join("sub/x").display().to_string();
        assert_eq!(resolve(&dir.0, &absolute).unwrap(), dir.0.join("sub/x"));
        assert_eq!(resolve(&dir.0, "").unwrap(), dir.0);
    }

    #[test]
    fn escapes_are_refused() {
        let dir = TempDir::new("paths-out");
        let sibling = format!("{}_evil/x", dir.0.display());
        for bad in [
            "../x",
            "/etc/passwd",
            "sub/../../x",
            &sibling,
            "a\0b",
            "missing/../../x",
        ] {
            assert!(resolve(&dir.0, bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn symlinks_out_are_refused() {
        let dir = TempDir::new("paths-link");
        std::os::unix::fs::symlink("/etc", dir.0.join("etc")).unwrap();
        std::os::unix::fs::symlink("/nonexistent-shepherd/x", dir.0.join("dangling")).unwrap();
        assert!(resolve(&dir.0, "etc/passwd").is_err());
        assert!(resolve(&dir.0, "etc/new-file").is_err());
        assert!(resolve(&dir.0, "dangling").is_err());
    }
}

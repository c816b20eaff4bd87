//! Confining file tools to the workspace root, with no window for a race.
//!
//! [`Root::resolve`] walks a requested path one component at a time from a
//! handle on the root directory: each directory is opened relative to the
//! previous one with `O_NOFOLLOW` (`sys::at`), so what the walk checked is the
//! very object it holds, and the tools then open, create and rename the final
//! name relative to the handle of its directory. No path is ever handed to
//! the kernel whole, so a directory or file swapped for a symlink halfway
//! through cannot lead a call outside the root.
//!
//! Symlinks are resolved here, not by the kernel: a link is read
//! (`readlinkat`) and its target walked the same way, from the link's own
//! directory (relative target) or from the root (absolute target inside the
//! root). A target outside the root, a `..` above the root, or more than 40
//! links is refused. `..` steps back to the directory the walk came from,
//! which is what the kernel does when no symlink is involved, and never above
//! the root.
//!
//! What remains: a process that may write both inside and outside the root
//! could move a directory the walk holds out of the root; such a process can
//! already write outside, and the model cannot race us (tools run one at a
//! time).

use std::ffi::{OsStr, OsString};
use std::fmt;
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Component, Path, PathBuf};

use crate::util::sys::at::{self, OpenAs};

/// Symlinks one resolution follows at most, as the kernel's `ELOOP` limit.
const MAX_SYMLINKS: usize = 40;
/// Errors that mean "this name is not a directory" when opening it as one.
const ENOTDIR: i32 = 20;
const ELOOP: i32 = 40;
const EINVAL: i32 = 22;

/// The workspace root, held open.
pub struct Root {
    dir: File,
    /// The canonical path, for absolute paths and symlink targets.
    canonical: PathBuf,
    /// The path as configured (made absolute), which users and models also write.
    given: PathBuf,
}

/// Why a path could not be resolved.
#[derive(Debug)]
pub enum ResolveError {
    /// The path leads outside the root (or holds a NUL byte); the message says so.
    Denied(String),
    /// The file system said no (a missing directory, a permission).
    Io(io::Error),
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::Denied(message) => f.write_str(message),
            ResolveError::Io(e) => e.fmt(f),
        }
    }
}

impl From<io::Error> for ResolveError {
    fn from(e: io::Error) -> Self {
        ResolveError::Io(e)
    }
}

/// What [`Root::resolve`] does about directories that do not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Missing {
    /// A missing directory is an error (`ENOENT`).
    Fail,
    /// Missing directories are created (for `write`), except before a `..`.
    Create,
}

/// A resolved path: the directory that holds it and its name there.
pub struct Resolved {
    /// The directory holding the target, inside the root.
    pub dir: File,
    /// The target's name in `dir` (not a symlink when resolved, though it may
    /// not exist); `None` when the target is `dir` itself.
    pub name: Option<OsString>,
    /// The target relative to the root, `/`-separated, symlinks resolved
    /// (empty for the root itself).
    pub rel: String,
}

impl Resolved {
    /// Opens the target as `how`; the root itself or a path ending in `..` opens `dir`.
    pub fn open(&self, how: OpenAs) -> io::Result<File> {
        match &self.name {
            Some(name) => at::open(self.dir.as_fd(), name, how),
            None => at::open(self.dir.as_fd(), OsStr::new("."), how),
        }
    }
}

/// One step of the walk still to take.
enum Step {
    Up,
    Name(OsString),
}

impl Root {
    /// Opens the root directory (symlinks in the root's own path are the user's choice and followed).
    pub fn open(root: &Path) -> Result<Root, String> {
        let unusable =
            |e: io::Error| format!("workspace root {} is not usable: {e}", root.display());
        let canonical = root.canonicalize().map_err(unusable)?;
        let dir = File::open(&canonical).map_err(unusable)?;
        let given = std::path::absolute(root).unwrap_or_else(|_| root.to_path_buf());
        Ok(Root {
            dir,
            canonical,
            given,
        })
    }

    /// The canonical path of the root.
    pub fn path(&self) -> &Path {
        &self.canonical
    }

    /// Resolves `requested` (relative to the root, or absolute inside it).
    pub fn resolve(&self, requested: &str, missing: Missing) -> Result<Resolved, ResolveError> {
        if requested.contains('\0') {
            return Err(ResolveError::Denied("path contains a NUL byte".into()));
        }
        let relative = self
            .inside(Path::new(requested.trim()))
            .ok_or_else(|| self.outside(requested))?;
        let mut walk = Walk {
            root: self,
            requested,
            todo: Vec::new(),
            chain: Vec::new(),
            links: 0,
        };
        walk.push(relative)?;
        walk.run(missing)
    }

    /// `path` relative to the root, or `None` for an absolute path elsewhere.
    fn inside<'a>(&self, path: &'a Path) -> Option<&'a Path> {
        if !path.is_absolute() {
            return Some(path);
        }
        [&self.canonical, &self.given]
            .into_iter()
            .find_map(|root| path.strip_prefix(root).ok())
    }

    fn outside(&self, requested: &str) -> ResolveError {
        ResolveError::Denied(format!(
            "access denied: {requested} is outside the workspace {}",
            self.canonical.display()
        ))
    }
}

/// The state of one resolution.
struct Walk<'r> {
    root: &'r Root,
    requested: &'r str,
    /// Steps still to take, the next one last.
    todo: Vec<Step>,
    /// The directories entered below the root, with their names.
    chain: Vec<(File, OsString)>,
    links: usize,
}

impl Walk<'_> {
    /// Queues the components of `path` (relative) before the steps already queued.
    fn push(&mut self, path: &Path) -> Result<(), ResolveError> {
        let mut steps = Vec::new();
        for component in path.components() {
            match component {
                Component::CurDir => {}
                Component::ParentDir => steps.push(Step::Up),
                Component::Normal(name) => steps.push(Step::Name(name.to_os_string())),
                Component::RootDir | Component::Prefix(_) => {
                    return Err(self.root.outside(self.requested))
                }
            }
        }
        self.todo.extend(steps.into_iter().rev());
        Ok(())
    }

    fn run(mut self, missing: Missing) -> Result<Resolved, ResolveError> {
        while let Some(step) = self.todo.pop() {
            match step {
                Step::Up if self.chain.pop().is_none() => {
                    return Err(self.root.outside(self.requested))
                }
                Step::Up => {}
                Step::Name(name) if self.todo.is_empty() => {
                    if !self.follow_if_link(&name)? {
                        return self.finish(Some(name));
                    }
                }
                Step::Name(name) => self.enter(name, missing)?,
            }
        }
        self.finish(None)
    }

    /// The directory the walk stands in.
    fn here(&self) -> BorrowedFd<'_> {
        self.chain
            .last()
            .map_or(self.root.dir.as_fd(), |(dir, _)| dir.as_fd())
    }

    /// Steps into the directory `name`: opened, created, or followed as a symlink.
    fn enter(&mut self, name: OsString, missing: Missing) -> Result<(), ResolveError> {
        let opened = match at::open(self.here(), &name, OpenAs::DirHandle) {
            Err(e) if e.kind() == io::ErrorKind::NotFound && self.may_create(missing) => {
                match at::mkdir(self.here(), &name) {
                    Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e.into()),
                    _ => at::open(self.here(), &name, OpenAs::DirHandle),
                }
            }
            other => other,
        };
        match opened {
            Ok(dir) => {
                self.chain.push((dir, name));
                Ok(())
            }
            Err(e) if matches!(e.raw_os_error(), Some(ENOTDIR | ELOOP)) => {
                if self.follow_if_link(&name)? {
                    Ok(())
                } else {
                    Err(e.into())
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// A missing directory is created only when no `..` follows: `a/../b`
    /// must not leave an `a` behind, and the kernel would not resolve it either.
    fn may_create(&self, missing: Missing) -> bool {
        missing == Missing::Create && !self.todo.iter().any(|s| matches!(s, Step::Up))
    }

    /// If `name` is a symlink, queues its target in its place and says true.
    fn follow_if_link(&mut self, name: &OsStr) -> Result<bool, ResolveError> {
        let target = match at::read_link(self.here(), name) {
            Ok(target) => target,
            Err(e) if e.raw_os_error() == Some(EINVAL) || e.kind() == io::ErrorKind::NotFound => {
                return Ok(false)
            }
            Err(e) => return Err(e.into()),
        };
        self.links += 1;
        if self.links > MAX_SYMLINKS {
            return Err(io::Error::other("too many levels of symbolic links").into());
        }
        let target = Path::new(&target);
        if target.is_absolute() {
            let inside = self
                .root
                .inside(target)
                .ok_or_else(|| self.root.outside(self.requested))?;
            self.chain.clear();
            self.push(inside)?;
        } else {
            self.push(target)?;
        }
        Ok(true)
    }

    fn finish(mut self, name: Option<OsString>) -> Result<Resolved, ResolveError> {
        let mut parts: Vec<&OsStr> = self.chain.iter().map(|(_, n)| n.as_os_str()).collect();
        parts.extend(name.as_deref());
        let rel = parts
            .iter()
            .map(|p| p.to_string_lossy())
            .collect::<Vec<_>>()
            .join("/");
        let dir = match self.chain.pop() {
            Some((dir, _)) => dir,
            None => self.root.dir.try_clone()?,
        };
        Ok(Resolved { dir, name, rel })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::util::fs::test_support::TempDir;

    /// Resolves and describes the result as `rel` plus whether a name is left.
    fn resolve(root: &Path, requested: &str) -> Result<String, ResolveError> {
        let root = Root::open(root).expect("root opens");
        let resolved = root.resolve(requested, Missing::Fail)?;
        Ok(resolved.rel)
    }

    #[test]
    fn inside_paths_resolve() {
        let dir = TempDir::new("paths-in");
        std::fs::create_dir(dir.0.join("sub")).unwrap();
        std::os::unix::fs::symlink("sub", dir.0.join("alias")).unwrap();
        std::os::unix::fs::symlink(dir.0.join("sub/x"), dir.0.join("abs")).unwrap();
        std::os::unix::fs::symlink("../sub", dir.0.join("sub/up")).unwrap();
        let absolute = dir.0.join("sub/x").display().to_string();
        for (requested, rel) in [
            ("sub", "sub"),
            ("sub/../new.txt", "new.txt"),
            ("sub/x", "sub/x"),
            (absolute.as_str(), "sub/x"),
            ("", ""),
            (".", ""),
            ("sub/..", ""),
            ("alias/x", "sub/x"),
            ("alias", "sub"),
            ("abs", "sub/x"),
            ("sub/up/up/x", "sub/x"),
        ] {
            assert_eq!(resolve(&dir.0, requested).unwrap(), rel, "{requested}");
        }
    }

    #[test]
    fn escapes_are_refused() {
        let dir = TempDir::new("paths-out");
        std::fs::create_dir(dir.0.join("sub")).unwrap();
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
        std::os::unix::fs::symlink("..", dir.0.join("up")).unwrap();
        std::os::unix::fs::symlink("loop", dir.0.join("loop")).unwrap();
        for bad in ["etc/passwd", "etc/new-file", "dangling", "up/x", "up"] {
            let result = resolve(&dir.0, bad);
            assert!(
                matches!(result, Err(ResolveError::Denied(_))),
                "{bad}: {result:?}"
            );
        }
        let looped = resolve(&dir.0, "loop");
        assert!(
            looped
                .as_ref()
                .is_err_and(|e| e.to_string().contains("symbolic links")),
            "{looped:?}"
        );
    }

    #[test]
    fn create_makes_missing_directories_but_not_before_dot_dot() {
        let dir = TempDir::new("paths-create");
        let root = Root::open(&dir.0).unwrap();
        let resolved = root.resolve("a/b/c.txt", Missing::Create).unwrap();
        assert_eq!(resolved.rel, "a/b/c.txt");
        assert!(dir.0.join("a/b").is_dir());
        assert!(root.resolve("m/../x", Missing::Create).is_err());
        assert!(!dir.0.join("m").exists());
        assert!(root.resolve("q/r", Missing::Fail).is_err());
        assert!(!dir.0.join("q").exists());
    }
}

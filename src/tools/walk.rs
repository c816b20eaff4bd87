//! The directory walk `glob` and `grep` share, confined like every file tool.
//!
//! [`walk`] visits everything under a directory depth first, each
//! directory's entries sorted by name and a directory right before its
//! contents, which is the order of the paths sorted component by component.
//! Each directory is opened relative to its parent's handle with
//! `O_NOFOLLOW` (`sys::at`), so a directory swapped for a symlink during the
//! walk is not entered; symlinks are visited, never followed.
//!
//! `.git` is skipped.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::os::fd::{AsFd, BorrowedFd};

use super::paths::Resolved;
use super::ToolContext;
use crate::sys::at::{self, EntryType, OpenAs};

/// What an entry is, without following a symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Dir,
    File,
    Symlink,
    Other,
}

/// One visited entry.
pub struct Entry<'a> {
    /// The directory that holds the entry, for opening it with `sys::at`.
    pub dir: BorrowedFd<'a>,
    pub name: &'a OsStr,
    /// The `/`-separated path relative to where the walk started.
    pub rel: &'a str,
    pub kind: Kind,
}

/// A directory being walked: its handle and its entries still to visit.
struct Frame {
    dir: File,
    rel: String,
    /// Sorted in reverse, so the next one is popped from the end.
    entries: Vec<(OsString, EntryType)>,
}

impl Frame {
    fn new(dir: File, rel: String) -> Frame {
        let mut entries = at::list(dir.as_fd()).unwrap_or_default();
        entries.sort_by(|a, b| b.0.cmp(&a.0));
        Frame { dir, rel, entries }
    }
}

/// Visits every entry under `base` (not `base` itself) in sorted depth-first
/// order; `visit` returns false to stop. A `base` that is not a directory
/// visits nothing.
pub fn walk(base: &Resolved, ctx: &ToolContext, visit: &mut dyn FnMut(&Entry<'_>) -> bool) {
    let Ok(dir) = base.open(OpenAs::Dir) else {
        return;
    };
    let mut stack = vec![Frame::new(dir, String::new())];
    while let Some(frame) = stack.last_mut() {
        if ctx.cancelled() {
            return;
        }
        let Some((name, entry_type)) = frame.entries.pop() else {
            stack.pop();
            continue;
        };
        if name == ".git" {
            continue;
        }
        let rel = join(&frame.rel, &name.to_string_lossy());
        let kind = kind_of(frame.dir.as_fd(), &name, entry_type);
        let entry = Entry {
            dir: frame.dir.as_fd(),
            name: &name,
            rel: &rel,
            kind,
        };
        if !visit(&entry) {
            return;
        }
        if kind == Kind::Dir {
            if let Ok(child) = at::open(frame.dir.as_fd(), &name, OpenAs::Dir) {
                stack.push(Frame::new(child, rel));
            }
        }
    }
}

/// `parent/name`, or `name` when `parent` is empty.
pub fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

/// The entry's kind, asking the file system only when `readdir` did not say.
fn kind_of(dir: BorrowedFd<'_>, name: &OsStr, entry_type: EntryType) -> Kind {
    match entry_type {
        EntryType::Dir => Kind::Dir,
        EntryType::File => Kind::File,
        EntryType::Symlink => Kind::Symlink,
        EntryType::Other => Kind::Other,
        EntryType::Unknown => match at::open(dir, name, OpenAs::Entry).and_then(|f| f.metadata()) {
            Ok(meta) if meta.is_dir() => Kind::Dir,
            Ok(meta) if meta.is_file() => Kind::File,
            Ok(meta) if meta.is_symlink() => Kind::Symlink,
            _ => Kind::Other,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tools::paths::tests::TempDir;
    use crate::tools::paths::{Missing, Root};
    use std::fs;

    /// Walks `start` under a tree made of `files` and returns the visited paths.
    fn check(files: &[(&str, &str)], start: &str, expected: &[&str]) {
        let dir = TempDir::new("walk");
        for (file, text) in files {
            let path = dir.0.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        let root = Root::open(&dir.0).unwrap();
        let base = root.resolve(start, Missing::Fail).unwrap();
        let mut seen = Vec::new();
        walk(&base, &ToolContext::new(&dir.0), &mut |entry| {
            seen.push(entry.rel.to_string());
            true
        });
        assert_eq!(seen, expected, "start {start}");
    }

    #[test]
    fn sorted_depth_first() {
        let files = [
            ("b", ""),
            ("a/z", ""),
            ("a-b/y", ""),
            ("a.rs", ""),
            (".git/HEAD", ""),
        ];
        check(&files, "", &["a", "a/z", "a-b", "a-b/y", "a.rs", "b"]);
        check(&files, "a", &["z"]);
        check(&files, "b", &[]);
    }
}

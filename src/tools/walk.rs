//! The directory walk `glob` and `grep` share, confined like every file tool.
//!
//! [`walk`] visits everything under a directory depth first, each
//! directory's entries sorted by name and a directory right before its
//! contents, which is the order of the paths sorted component by component.
//! Each directory is opened relative to its parent's handle with
//! `O_NOFOLLOW` (`sys::at`), so a directory swapped for a symlink during the
//! walk is not entered; symlinks are visited, never followed.
//!
//! Skipped, as ripgrep skips them: `.git`, and whatever the `.gitignore` and
//! `.ignore` files of the walked directories and of the directories between
//! the root and the walk's start, and `.git/info/exclude`, exclude. Git's
//! rules apply (through the `ignore` crate's matcher): the deepest file
//! decides, `.ignore` wins over `.gitignore` in one directory, the last
//! matching line wins, and `!` re-includes. Unlike ripgrep, the rules apply
//! without a `.git` directory, hidden files are visited (an agent often needs
//! `.github/` or `.env.example`), and ignore files above the root are not read
//! (nothing outside the root is). The directory the walk starts in is walked
//! even when ignored: a path the caller names is searched, as with `rg PATH`.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::Read as _;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::{Path, PathBuf};

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use super::paths::{Missing, Resolved, Root};
use super::ToolContext;
use crate::util::sys::at::{self, EntryType, OpenAs};

/// The files in one directory that hold ignore rules, the stronger last.
const IGNORE_FILES: [&str; 2] = [".gitignore", ".ignore"];
/// An ignore file larger than this is not read.
const MAX_IGNORE_FILE_BYTES: u64 = 1024 * 1024;

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
pub fn walk(
    root: &Root,
    base: &Resolved,
    ctx: &ToolContext,
    visit: &mut dyn FnMut(&Entry<'_>) -> bool,
) {
    let Ok(dir) = base.open(OpenAs::Dir) else {
        return;
    };
    let logical_base = root.path().join(&base.rel);
    let mut rules = Rules::down_to(root, &base.rel);
    let mut stack = vec![Frame::new(dir, String::new())];
    while let Some(frame) = stack.last_mut() {
        if ctx.cancelled() {
            return;
        }
        let Some((name, entry_type)) = frame.entries.pop() else {
            stack.pop();
            rules.leave();
            continue;
        };
        if name == ".git" {
            continue;
        }
        let rel = join(&frame.rel, &name.to_string_lossy());
        let kind = kind_of(frame.dir.as_fd(), &name, entry_type);
        if rules.ignores(&logical_base.join(&rel), kind == Kind::Dir) {
            continue;
        }
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
                rules.enter(child.as_fd(), logical_base.join(&rel));
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

/// The ignore rules in force: one matcher per directory from the root down
/// to the one being walked, after `.git/info/exclude`.
struct Rules {
    levels: Vec<Gitignore>,
}

impl Rules {
    /// The rules for walking `base_rel`: the exclude file, then the ignore
    /// files of the root and of every directory down to `base_rel` itself.
    fn down_to(root: &Root, base_rel: &str) -> Rules {
        let mut levels = vec![exclude_file(root)];
        let mut prefix = String::new();
        let parts = base_rel.split('/').filter(|p| !p.is_empty());
        for part in std::iter::once("").chain(parts) {
            prefix = join(&prefix, part);
            let dir = root
                .resolve(&prefix, Missing::Fail)
                .ok()
                .and_then(|r| r.open(OpenAs::Dir).ok());
            let logical = root.path().join(&prefix);
            levels.push(dir.map_or_else(Gitignore::empty, |d| ignore_files(d.as_fd(), logical)));
        }
        Rules { levels }
    }

    fn enter(&mut self, dir: BorrowedFd<'_>, logical: PathBuf) {
        self.levels.push(ignore_files(dir, logical));
    }

    fn leave(&mut self) {
        self.levels.pop();
    }

    /// Whether the deepest rule that says anything about `path` excludes it.
    fn ignores(&self, path: &Path, is_dir: bool) -> bool {
        for level in self.levels.iter().rev() {
            match level.matched(path, is_dir) {
                Match::Ignore(_) => return true,
                Match::Whitelist(_) => return false,
                Match::None => {}
            }
        }
        false
    }
}

/// The matcher for one directory's ignore files; `logical` is its path (for matching only).
fn ignore_files(dir: BorrowedFd<'_>, logical: PathBuf) -> Gitignore {
    let mut builder = GitignoreBuilder::new(logical);
    for file in IGNORE_FILES {
        add_lines(&mut builder, dir, file);
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

/// The root's `.git/info/exclude`, read through handles like everything else.
fn exclude_file(root: &Root) -> Gitignore {
    let mut builder = GitignoreBuilder::new(root.path());
    let info = root
        .resolve(".git/info", Missing::Fail)
        .and_then(|r| r.open(OpenAs::DirHandle).map_err(Into::into));
    if let Ok(info) = info {
        add_lines(&mut builder, info.as_fd(), "exclude");
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

/// Adds the lines of the small regular file `name` in `dir`; a line that is
/// not a valid glob is skipped, as git skips it.
fn add_lines(builder: &mut GitignoreBuilder, dir: BorrowedFd<'_>, name: &str) {
    let Ok(file) = at::open(dir, OsStr::new(name), OpenAs::Read) else {
        return;
    };
    if !file
        .metadata()
        .is_ok_and(|m| m.is_file() && m.len() <= MAX_IGNORE_FILE_BYTES)
    {
        return;
    }
    let mut bytes = Vec::new();
    if file
        .take(MAX_IGNORE_FILE_BYTES)
        .read_to_end(&mut bytes)
        .is_err()
    {
        return;
    }
    for line in String::from_utf8_lossy(&bytes).lines() {
        let _ = builder.add_line(None, line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::util::fs::test_support::TempDir;
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
        walk(&root, &base, &ToolContext::new(&dir.0), &mut |entry| {
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

    #[test]
    fn ignore_rules_nest() {
        let files = [
            (".gitignore", "*.log\n/build\nnested/\n"),
            (".git/info/exclude", "secret*\n"),
            ("a.log", ""),
            ("build/x", ""),
            ("src/build/y", ""),
            ("src/.ignore", "!keep.log\n"),
            ("src/keep.log", ""),
            ("src/drop.log", ""),
            ("src/nested/z", ""),
            ("secret.txt", ""),
            ("src/sub/.gitignore", "*.rs\n!main.rs\n"),
            ("src/sub/lib.rs", ""),
            ("src/sub/main.rs", ""),
        ];
        let all = [
            ".gitignore",
            "src",
            "src/.ignore",
            "src/build",
            "src/build/y",
            "src/keep.log",
            "src/sub",
            "src/sub/.gitignore",
            "src/sub/main.rs",
        ];
        check(&files, "", &all);
        // The rules above the start still apply; the start itself is walked.
        check(&files, "src/sub", &[".gitignore", "main.rs"]);
        check(&files, "build", &["x"]);
    }
}

//! File tools: `read`, `write`, `edit`, `list_directory` and `glob`.
//!
//! Every path goes through [`Root::resolve`], and every open, create, rename
//! and listing after it is relative to the directory handle the resolution
//! returned (`sys::at`, never following a symlink), so these tools never
//! touch anything outside [`super::ToolContext::root`], even while its
//! contents change under them. Writes are atomic (temp file in the same
//! directory, fsync, rename, fsync of the directory): an interrupted write
//! leaves the old file, never half a new one.

use std::ffi::{OsStr, OsString};
use std::fs::{File, Metadata};
use std::io::{self, Read as _, Write};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::{AtomicU32, Ordering};

use serde_json::{json, Value};

use super::paths::{Missing, ResolveError, Resolved, Root};
use super::{args, pattern, walk, Tool, ToolContext, ToolOutput};
use crate::core::image::decode::Format;
use crate::core::Image;
use crate::util::sys::at::{self, OpenAs};

/// Lines `read` returns when the call gives no limit.
pub const DEFAULT_READ_LINES: usize = 2000;
/// Files larger than this are not read whole (`read` of a log file must not eat the memory).
const MAX_READ_BYTES: u64 = 64 * 1024 * 1024;
/// Entries `glob` lists at most.
const MAX_GLOB_RESULTS: usize = 1000;

pub fn tools() -> Vec<Box<dyn Tool>> {
    vec![
        Box::new(Read),
        Box::new(WriteFile),
        Box::new(Edit),
        Box::new(ListDirectory),
        Box::new(Glob),
    ]
}

/// Resolves a path argument or explains why not; `action` names what failed
/// ("read", "list", ...) when the file system said no.
pub(super) fn resolve(
    ctx: &ToolContext,
    requested: &str,
    missing: Missing,
    action: &str,
) -> Result<Resolved, ToolOutput> {
    let root = Root::open(&ctx.root).map_err(|e| ToolOutput::fail(format!("Error: {e}")))?;
    root.resolve(requested, missing).map_err(|e| match e {
        ResolveError::Denied(message) => ToolOutput::fail(format!("Error: {message}")),
        ResolveError::Io(e) => ToolOutput::fail(format!("Error: cannot {action} {requested}: {e}")),
    })
}

pub struct Read;

impl Tool for Read {
    fn name(&self) -> &str {
        "read"
    }

    fn description(&self) -> &str {
        "Reads a file in the workspace. Returns its text (no line numbers), at most 2000 lines unless \
         'limit' says otherwise (-1 = the whole file); 'offset' is the 1-based line to start at. \
         Binary files come back as base64; an image file (PNG, JPEG, WebP, GIF) comes back as the \
         image when the model reads images."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path of the file, relative to the workspace or absolute inside it"},
                "offset": {"type": "integer", "description": "1-based line number to start at"},
                "limit": {"type": "integer", "description": "Number of lines to read; -1 reads everything"}
            },
            "required": ["file_path"]
        })
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let requested = args::string(args, "file_path");
        let target = match resolve(ctx, requested, Missing::Fail, "read") {
            Ok(target) => target,
            Err(out) => return out,
        };
        let bytes = match read_bytes(&target) {
            Ok(bytes) => bytes,
            Err(e) => return ToolOutput::fail(format!("Error: cannot read {requested}: {e}")),
        };
        if ctx.takes_images && Format::sniff(&bytes).is_ok() {
            // An image file goes to a model that reads images as one; one that
            // does not decode comes back as base64 below, as other binaries do.
            if let Ok(image) = Image::from_bytes(bytes.clone()) {
                return ToolOutput::image_file(requested, image);
            }
        }
        match String::from_utf8(bytes) {
            Ok(text) if !text.contains('\0') => read_lines(&text, args),
            Ok(text) => binary(requested, text.into_bytes(), ctx.output_cap),
            Err(e) => binary(requested, e.into_bytes(), ctx.output_cap),
        }
    }
}

/// Reads the resolved file for `read` and `edit`.
fn read_bytes(target: &Resolved) -> io::Result<Vec<u8>> {
    read_capped(
        target,
        MAX_READ_BYTES,
        "read allows; use bash (head, sed -n) or grep",
    )
}

/// Reads the resolved file if it holds at most `max` bytes: the size is
/// checked before reading, and the read stops at `max` in case the file grew.
/// `allows` ends the error when it is larger ("read allows; ..."). The final
/// name is opened with `O_NOFOLLOW`: if it became a symlink since it was
/// resolved, the read fails.
pub(super) fn read_capped(target: &Resolved, max: u64, allows: &str) -> io::Result<Vec<u8>> {
    let file = target.open(OpenAs::Read)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::other("it is a directory (use list_directory)"));
    }
    if !meta.is_file() {
        // A FIFO or a device could block or never end.
        return Err(io::Error::other("it is not a regular file"));
    }
    if meta.len() > max {
        return Err(io::Error::other(format!(
            "file is {} bytes, more than the {max} bytes {allows}",
            meta.len()
        )));
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(max).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Picks the requested window of lines and says how to get the rest.
fn read_lines(text: &str, args: &Value) -> ToolOutput {
    let lines: Vec<&str> = text.lines().collect();
    let start = args::opt_i64(args, "offset").unwrap_or(1).max(1) as usize - 1;
    let limit = match args::opt_i64(args, "limit") {
        Some(n) if n < 0 => usize::MAX,
        Some(n) => n as usize,
        None => DEFAULT_READ_LINES,
    };
    let end = start.saturating_add(limit).min(lines.len());
    let start = start.min(end);
    let mut content = lines[start..end].join("\n");
    if end < lines.len() {
        content.push_str(&format!(
            "\n[Showing lines {}-{end} of {}. Use offset={} to read more, or limit=-1 for everything.]",
            start + 1,
            lines.len(),
            end + 1
        ));
    }
    let summary = format!("{} lines", end - start);
    ToolOutput::ok(content, summary)
}

fn binary(requested: &str, mut bytes: Vec<u8>, cap: usize) -> ToolOutput {
    let total = bytes.len();
    // base64 grows by 4/3; keep the encoded text within the output cap.
    let keep = cap / 4 * 3;
    bytes.truncate(keep);
    let mut content = format!("[{requested} is a binary file of {total} bytes; base64 follows]\n");
    content.push_str(&crate::util::base64::encode(&bytes));
    if total > bytes.len() {
        content.push_str(&format!(
            "\n[base64 covers the first {} of {total} bytes]",
            bytes.len()
        ));
    }
    ToolOutput::ok(content, format!("binary, {total} bytes"))
}

pub struct WriteFile;

impl Tool for WriteFile {
    fn name(&self) -> &str {
        "write"
    }

    fn description(&self) -> &str {
        "Writes a file in the workspace, replacing it if it exists and creating missing parent directories."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path of the file, relative to the workspace or absolute inside it"},
                "content": {"type": "string", "description": "The complete new content"}
            },
            "required": ["file_path", "content"]
        })
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let requested = args::string(args, "file_path");
        let content = args::string(args, "content");
        let target = match resolve(ctx, requested, Missing::Create, "create the directory for") {
            Ok(target) => target,
            Err(out) => return out,
        };
        match write_atomic(&target, content.as_bytes()) {
            Ok(()) => ToolOutput::ok(
                format!("Wrote {} bytes to {requested}", content.len()),
                format!("{} lines, {} bytes", content.lines().count(), content.len()),
            ),
            Err(e) => ToolOutput::fail(format!("Error: cannot write {requested}: {e}")),
        }
    }
}

/// Replaces the resolved file with `data` so that readers see the old or the
/// new file, never a mix. The temp file is created with `O_EXCL|O_NOFOLLOW`
/// and renamed over the name in the same directory handle, which replaces
/// whatever is there now (a symlink itself, never its target).
fn write_atomic(target: &Resolved, data: &[u8]) -> io::Result<()> {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let Some(name) = &target.name else {
        return Err(io::Error::other("it is a directory"));
    };
    let dir = target.dir.as_fd();
    let existing = match at::open(dir, name, OpenAs::Entry) {
        Ok(file) => Some(file.metadata()?),
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(e) => return Err(e),
    };
    if existing.as_ref().is_some_and(Metadata::is_dir) {
        return Err(io::Error::other("it is a directory"));
    }
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut temp = OsString::from(".");
    temp.push(name);
    temp.push(format!(".shepherd-{}-{n}.tmp", std::process::id()));
    let result = write_and_rename(dir, &temp, name, data, existing.as_ref());
    if result.is_err() {
        let _ = at::unlink(dir, &temp);
    }
    result?;
    // The rename itself is only durable once the directory is synced.
    at::open(dir, OsStr::new("."), OpenAs::Dir)?.sync_all()
}

fn write_and_rename(
    dir: BorrowedFd<'_>,
    temp: &OsStr,
    name: &OsStr,
    data: &[u8],
    existing: Option<&Metadata>,
) -> io::Result<()> {
    let mut file = at::open(dir, temp, OpenAs::CreateNew)?;
    file.write_all(data)?;
    if let Some(meta) = existing.filter(|m| m.is_file()) {
        // Keep an existing file's mode (an edited script stays executable).
        file.set_permissions(meta.permissions())?;
    }
    file.sync_all()?;
    at::rename(dir, temp, dir, name)
}

pub struct Edit;

impl Tool for Edit {
    fn name(&self) -> &str {
        "edit"
    }

    fn description(&self) -> &str {
        "Replaces exact text in a file. 'old_string' must occur exactly once unless 'replace_all' is true; \
         include enough surrounding lines to make it unique."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "file_path": {"type": "string", "description": "Path of the file to edit"},
                "old_string": {"type": "string", "description": "Exact text to replace"},
                "new_string": {"type": "string", "description": "Replacement text"},
                "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)"}
            },
            "required": ["file_path", "old_string", "new_string"]
        })
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let requested = args::string(args, "file_path");
        let target = match resolve(ctx, requested, Missing::Fail, "read") {
            Ok(target) => target,
            Err(out) => return out,
        };
        let text = match read_bytes(&target).map(String::from_utf8) {
            Ok(Ok(text)) => text,
            Ok(Err(_)) => {
                return ToolOutput::fail(format!("Error: {requested} is not a text file"))
            }
            Err(e) => return ToolOutput::fail(format!("Error: cannot read {requested}: {e}")),
        };
        let edited = match replace(&text, args) {
            Ok(edited) => edited,
            Err(message) => return ToolOutput::fail(format!("Error: {message} in {requested}")),
        };
        match write_atomic(&target, edited.text.as_bytes()) {
            Ok(()) => ToolOutput::ok(
                format!(
                    "Edited {requested}: replaced {} occurrence(s)",
                    edited.count
                ),
                format!("replaced {} occurrence(s)", edited.count),
            ),
            Err(e) => ToolOutput::fail(format!("Error: cannot write {requested}: {e}")),
        }
    }
}

struct Edited {
    text: String,
    count: usize,
}

fn replace(text: &str, args: &Value) -> Result<Edited, String> {
    let old = args::string(args, "old_string");
    let new = args::string(args, "new_string");
    if old.is_empty() {
        return Err("old_string is empty".into());
    }
    if old == new {
        return Err("old_string and new_string are the same".into());
    }
    let count = text.matches(old).count();
    match count {
        0 => Err("old_string was not found".into()),
        1 => Ok(Edited { text: text.replacen(old, new, 1), count }),
        _ if args::flag(args, "replace_all", false) => Ok(Edited { text: text.replace(old, new), count }),
        _ => Err(format!(
            "old_string occurs {count} times; add surrounding text to make it unique, or set replace_all"
        )),
    }
}

pub struct ListDirectory;

impl Tool for ListDirectory {
    fn name(&self) -> &str {
        "list_directory"
    }

    fn description(&self) -> &str {
        "Lists a directory of the workspace: entries sorted by name, directories marked with '/', files with their size."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string", "description": "Directory to list (default: the workspace root)"}
            },
            "required": []
        })
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let requested = args::opt_string(args, "path").unwrap_or(".");
        let target = match resolve(ctx, requested, Missing::Fail, "list") {
            Ok(target) => target,
            Err(out) => return out,
        };
        match target.open(OpenAs::Dir).and_then(|dir| list(&dir)) {
            Ok(lines) if lines.is_empty() => ToolOutput::ok("(empty directory)", "0 entries"),
            Ok(lines) => {
                let summary = format!("{} entries", lines.len());
                ToolOutput::ok(lines.join("\n"), summary)
            }
            Err(e) => ToolOutput::fail(format!("Error: cannot list {requested}: {e}")),
        }
    }
}

fn list(dir: &File) -> io::Result<Vec<String>> {
    let mut entries: Vec<(String, String)> = Vec::new();
    for (name, _) in at::list(dir.as_fd())? {
        let line = describe_entry(dir.as_fd(), &name);
        entries.push((name.to_string_lossy().into_owned(), line));
    }
    entries.sort();
    Ok(entries.into_iter().map(|(_, line)| line).collect())
}

/// `name/` for a directory, `name@ -> target` for a symlink, else `name  (N bytes)`.
fn describe_entry(dir: BorrowedFd<'_>, name: &OsStr) -> String {
    let shown = name.to_string_lossy();
    let Ok(meta) = at::open(dir, name, OpenAs::Entry).and_then(|f| f.metadata()) else {
        return shown.into_owned();
    };
    if meta.is_dir() {
        format!("{shown}/")
    } else if meta.is_symlink() {
        match at::read_link(dir, name) {
            Ok(target) => format!("{shown}@ -> {}", target.to_string_lossy()),
            Err(_) => format!("{shown}@"),
        }
    } else {
        format!("{shown}  ({} bytes)", meta.len())
    }
}

pub struct Glob;

impl Tool for Glob {
    fn name(&self) -> &str {
        "glob"
    }

    fn description(&self) -> &str {
        "Finds files whose path (relative to 'path') matches a glob: '*' and '?' within a name, \
         '[abc]' classes, '**' for any number of directories (e.g. '**/*.rs'). Skips .git and what \
         .gitignore/.ignore files exclude (as rg does; hidden files are included, symlinks listed but \
         not followed); a 'path' named explicitly is searched even if ignored."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Glob pattern, e.g. 'src/**/*.rs'"},
                "path": {"type": "string", "description": "Directory to search (default: the workspace root)"}
            },
            "required": ["pattern"]
        })
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let glob = args::string(args, "pattern");
        let requested = args::opt_string(args, "path").unwrap_or(".");
        let root = match Root::open(&ctx.root) {
            Ok(root) => root,
            Err(e) => return ToolOutput::fail(format!("Error: {e}")),
        };
        let base = match search_base(&root, requested) {
            Ok(Some(base)) => base,
            Ok(None) => return glob_output(Vec::new(), ctx.cancelled()),
            Err(out) => return out,
        };
        let mut found = Vec::new();
        walk::walk(&root, &base, ctx, &mut |entry| {
            if pattern::path_match(glob, entry.rel) {
                found.push(walk::join(&base.rel, entry.rel));
            }
            found.len() <= MAX_GLOB_RESULTS
        });
        glob_output(found, ctx.cancelled())
    }
}

fn glob_output(mut found: Vec<String>, cancelled: bool) -> ToolOutput {
    if cancelled {
        return ToolOutput::fail("Error: cancelled");
    }
    if found.is_empty() {
        return ToolOutput::ok("No files matched.", "0 files");
    }
    found.sort();
    let mut content = found
        .iter()
        .take(MAX_GLOB_RESULTS)
        .cloned()
        .collect::<Vec<_>>()
        .join("\n");
    if found.len() > MAX_GLOB_RESULTS {
        content.push_str(&format!(
            "\n[More than {MAX_GLOB_RESULTS} matches; narrow the pattern.]"
        ));
    }
    let summary = format!("{} files", found.len().min(MAX_GLOB_RESULTS));
    ToolOutput::ok(content, summary)
}

/// Resolves where `glob` or `grep` starts; a path that does not exist finds
/// nothing (`Ok(None)`), one outside the root is an error.
pub fn search_base(root: &Root, requested: &str) -> Result<Option<Resolved>, ToolOutput> {
    match root.resolve(requested, Missing::Fail) {
        Ok(base) => Ok(Some(base)),
        Err(ResolveError::Io(e)) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(ResolveError::Denied(message)) => Err(ToolOutput::fail(format!("Error: {message}"))),
        Err(ResolveError::Io(e)) => Err(ToolOutput::fail(format!(
            "Error: cannot resolve {requested}: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ToolCall;
    use crate::tools::ToolRegistry;
    use crate::util::fs::test_support::TempDir;
    use std::fs;
    use std::path::Path;

    fn run(ctx: &ToolContext, name: &str, arguments: Value) -> ToolOutput {
        let call = ToolCall {
            id: "1".into(),
            name: name.into(),
            arguments,
        };
        ToolRegistry::builtin().run(&call, ctx)
    }

    fn setup(label: &str) -> (TempDir, ToolContext) {
        let dir = TempDir::new(label);
        let ctx = ToolContext::new(&dir.0);
        (dir, ctx)
    }

    #[test]
    fn write_then_read() {
        let (dir, ctx) = setup("fs-rw");
        let out = run(
            &ctx,
            "write",
            json!({"file_path": "a/b/c.txt", "content": "one\ntwo\nthree\n"}),
        );
        assert!(!out.error, "{}", out.content);
        assert_eq!(
            fs::read_to_string(dir.0.join("a/b/c.txt")).unwrap(),
            "one\ntwo\nthree\n"
        );
        let out = run(&ctx, "read", json!({"file_path": "a/b/c.txt"}));
        assert_eq!(out.content, "one\ntwo\nthree");
        assert_eq!(out.summary, "3 lines");
        let out = run(
            &ctx,
            "read",
            json!({"file_path": "a/b/c.txt", "offset": 2, "limit": 1}),
        );
        assert!(
            out.content
                .starts_with("two\n[Showing lines 2-2 of 3. Use offset=3"),
            "{}",
            out.content
        );
        let no_temp_left = fs::read_dir(dir.0.join("a/b")).unwrap().count() == 1;
        assert!(no_temp_left);
    }

    #[test]
    fn read_limits_long_files_by_default() {
        let (dir, ctx) = setup("fs-long");
        let text: String = (1..=2500).map(|i| format!("line {i}\n")).collect();
        fs::write(dir.0.join("long.txt"), &text).unwrap();
        let out = run(&ctx, "read", json!({"file_path": "long.txt"}));
        assert_eq!(out.summary, "2000 lines");
        assert!(out
            .content
            .contains("line 2000\n[Showing lines 1-2000 of 2500. Use offset=2001"));
        let out = run(&ctx, "read", json!({"file_path": "long.txt", "limit": -1}));
        assert_eq!(out.summary, "2500 lines");
        assert!(out.content.ends_with("line 2500"));
    }

    #[test]
    fn read_binary_as_base64() {
        let (dir, ctx) = setup("fs-bin");
        fs::write(dir.0.join("b.bin"), [0u8, 159, 146, 150]).unwrap();
        let out = run(&ctx, "read", json!({"file_path": "b.bin"}));
        assert!(!out.error);
        assert!(
            out.content.contains("binary file of 4 bytes"),
            "{}",
            out.content
        );
        assert!(out.content.ends_with("AJ+Slg=="), "{}", out.content);
    }

    #[test]
    fn read_errors() {
        let (dir, ctx) = setup("fs-read-err");
        fs::create_dir(dir.0.join("d")).unwrap();
        assert!(run(&ctx, "read", json!({"file_path": "missing.txt"})).error);
        let out = run(&ctx, "read", json!({"file_path": "d"}));
        assert!(
            out.error && out.content.contains("directory"),
            "{}",
            out.content
        );
    }

    #[test]
    fn file_tools_stay_inside_the_root() {
        let (dir, ctx) = setup("fs-escape");
        std::os::unix::fs::symlink("/etc", dir.0.join("out")).unwrap();
        std::os::unix::fs::symlink("/tmp/shepherd-never-created", dir.0.join("dangling")).unwrap();
        for path in [
            "../x",
            "/etc/passwd",
            "out/passwd",
            "out/new-file",
            "dangling",
        ] {
            let read = run(&ctx, "read", json!({"file_path": path}));
            assert!(
                read.error && read.content.contains("Error"),
                "read {path}: {}",
                read.content
            );
            let write = run(&ctx, "write", json!({"file_path": path, "content": "x"}));
            assert!(write.error, "write {path}: {}", write.content);
        }
        assert!(!Path::new("/tmp/shepherd-never-created").exists());
        assert!(run(&ctx, "list_directory", json!({"path": ".."})).error);
        assert!(run(&ctx, "glob", json!({"pattern": "*", "path": "/etc"})).error);
    }

    #[test]
    fn absolute_paths_inside_the_root_work() {
        let (dir, ctx) = setup("fs-abs");
        let path = dir.0.join("x.txt").display().to_string();
        assert!(!run(&ctx, "write", json!({"file_path": path, "content": "hi"})).error);
        assert_eq!(run(&ctx, "read", json!({"file_path": path})).content, "hi");
    }

    #[test]
    fn edit_requires_unique_match() {
        let (dir, ctx) = setup("fs-edit");
        fs::write(dir.0.join("e.txt"), "a = 1\nb = 1\n").unwrap();
        let out = run(
            &ctx,
            "edit",
            json!({"file_path": "e.txt", "old_string": "= 1", "new_string": "= 2"}),
        );
        assert!(
            out.error && out.content.contains("occurs 2 times"),
            "{}",
            out.content
        );
        let out = run(
            &ctx,
            "edit",
            json!({"file_path": "e.txt", "old_string": "zzz", "new_string": "y"}),
        );
        assert!(
            out.error && out.content.contains("not found"),
            "{}",
            out.content
        );
        let out = run(
            &ctx,
            "edit",
            json!({"file_path": "e.txt", "old_string": "a = 1", "new_string": "a = 3"}),
        );
        assert!(!out.error, "{}", out.content);
        assert_eq!(
            fs::read_to_string(dir.0.join("e.txt")).unwrap(),
            "a = 3\nb = 1\n"
        );
        let out = run(
            &ctx,
            "edit",
            json!({"file_path": "e.txt", "old_string": " = ", "new_string": ": ", "replace_all": true}),
        );
        assert_eq!(out.summary, "replaced 2 occurrence(s)");
        assert_eq!(
            fs::read_to_string(dir.0.join("e.txt")).unwrap(),
            "a: 3\nb: 1\n"
        );
    }

    #[test]
    fn edit_keeps_permissions() {
        use std::os::unix::fs::PermissionsExt;
        let (dir, ctx) = setup("fs-perm");
        let path = dir.0.join("s.sh");
        fs::write(&path, "echo hi\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        run(
            &ctx,
            "edit",
            json!({"file_path": "s.sh", "old_string": "hi", "new_string": "ho"}),
        );
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o755
        );
    }

    #[test]
    fn list_directory_sorted_and_marked() {
        let (dir, ctx) = setup("fs-list");
        fs::create_dir(dir.0.join("sub")).unwrap();
        fs::write(dir.0.join("b.txt"), "12345").unwrap();
        fs::write(dir.0.join("a.txt"), "").unwrap();
        let out = run(&ctx, "list_directory", json!({}));
        assert_eq!(out.content, "a.txt  (0 bytes)\nb.txt  (5 bytes)\nsub/");
        assert_eq!(out.summary, "3 entries");
    }

    #[test]
    fn glob_with_double_star() {
        let (dir, ctx) = setup("fs-glob");
        for file in [
            "main.rs",
            "src/lib.rs",
            "src/tools/fs.rs",
            "src/notes.md",
            ".git/x.rs",
        ] {
            let path = dir.0.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, "").unwrap();
        }
        let out = run(&ctx, "glob", json!({"pattern": "**/*.rs"}));
        assert_eq!(out.content, "main.rs\nsrc/lib.rs\nsrc/tools/fs.rs");
        let out = run(&ctx, "glob", json!({"pattern": "*.rs", "path": "src"}));
        assert_eq!(out.content, "src/lib.rs");
        let out = run(&ctx, "glob", json!({"pattern": "*.none"}));
        assert_eq!(out.summary, "0 files");
    }

    #[test]
    fn glob_skips_gitignored_paths() {
        let (dir, ctx) = setup("fs-glob-ignore");
        for (file, text) in [
            (".gitignore", "/target\n*.tmp\n"),
            ("src/lib.rs", ""),
            ("src/scratch.tmp", ""),
            ("target/debug/build.rs", ""),
            ("sub/target/kept.rs", ""),
        ] {
            let path = dir.0.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        let out = run(&ctx, "glob", json!({"pattern": "**/*"}));
        assert_eq!(
            out.content,
            ".gitignore\nsrc\nsrc/lib.rs\nsub\nsub/target\nsub/target/kept.rs"
        );
    }

    /// An in-workspace symlink is followed; the tools see its target.
    #[test]
    fn symlinks_inside_the_root_are_followed() {
        let (dir, ctx) = setup("fs-inlink");
        fs::create_dir(dir.0.join("real")).unwrap();
        fs::write(dir.0.join("real/a.txt"), "alpha\n").unwrap();
        std::os::unix::fs::symlink("real", dir.0.join("alias")).unwrap();
        std::os::unix::fs::symlink("real/a.txt", dir.0.join("a-link")).unwrap();
        assert_eq!(
            run(&ctx, "read", json!({"file_path": "alias/a.txt"})).content,
            "alpha"
        );
        assert_eq!(
            run(&ctx, "read", json!({"file_path": "a-link"})).content,
            "alpha"
        );
        let out = run(
            &ctx,
            "write",
            json!({"file_path": "a-link", "content": "beta\n"}),
        );
        assert!(!out.error, "{}", out.content);
        assert!(fs::symlink_metadata(dir.0.join("a-link"))
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(
            fs::read_to_string(dir.0.join("real/a.txt")).unwrap(),
            "beta\n"
        );
    }

    /// Regression: paths were canonicalised and then opened by name, so a
    /// directory or file swapped for a symlink in between let `read`, `write`
    /// and `edit` reach outside the root.
    #[test]
    fn symlink_swaps_during_calls_never_escape_the_root() {
        use std::sync::atomic::AtomicBool;
        use std::sync::Arc;
        use std::time::{Duration, Instant};
        const MARKER: &str = "SECRET-MARKER-5d1e";
        let (dir, ctx) = setup("fs-race");
        let outside = TempDir::new("fs-race-outside");
        let secret = outside.0.join("secret.txt");
        fs::write(&secret, format!("{MARKER} hello\n")).unwrap();
        let secret_before = (
            fs::read(&secret).unwrap(),
            mtime(&secret),
            mtime(&outside.0),
        );
        // "d" is a real directory and "f" a real file; their ".swap" twins are
        // symlinks out of the root, and the flipper exchanges them atomically.
        fs::create_dir(dir.0.join("d")).unwrap();
        fs::write(dir.0.join("d/secret.txt"), "inside hello\n").unwrap();
        fs::write(dir.0.join("f"), "inside hello\n").unwrap();
        std::os::unix::fs::symlink(&outside.0, dir.0.join("d.swap")).unwrap();
        std::os::unix::fs::symlink(&secret, dir.0.join("f.swap")).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let flipper = {
            let (root, secret, stop) = (dir.0.clone(), secret.clone(), Arc::clone(&stop));
            std::thread::spawn(move || flip_until(&root, &secret, &stop))
        };
        let deadline = Instant::now() + Duration::from_secs(8);
        let mut reads_ok = 0;
        for round in 0..1500 {
            if Instant::now() > deadline {
                break;
            }
            for path in ["d/secret.txt", "f"] {
                let (old, new) = if round % 2 == 0 {
                    ("hello", "howdy")
                } else {
                    ("howdy", "hello")
                };
                for (name, args) in [
                    ("read", json!({"file_path": path})),
                    (
                        "write",
                        json!({"file_path": path, "content": format!("written {old}\n")}),
                    ),
                    (
                        "edit",
                        json!({"file_path": path, "old_string": old, "new_string": new}),
                    ),
                    ("read", json!({"file_path": path})),
                ] {
                    let out = run(&ctx, name, args);
                    assert!(
                        !out.content.contains(MARKER),
                        "{name} {path} leaked: {}",
                        out.content
                    );
                    reads_ok += usize::from(name == "read" && !out.error);
                }
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let flips = flipper.join().expect("flipper thread");
        assert!(
            flips > 100 && reads_ok > 100,
            "flips {flips}, reads {reads_ok}"
        );
        let secret_after = (
            fs::read(&secret).unwrap(),
            mtime(&secret),
            mtime(&outside.0),
        );
        assert!(
            secret_after == secret_before,
            "the outside file or its directory changed"
        );
        assert_eq!(fs::read_dir(&outside.0).unwrap().count(), 1);
        assert_no_marker_under(&dir.0, MARKER);
    }

    fn mtime(path: &Path) -> std::time::SystemTime {
        fs::symlink_metadata(path).unwrap().modified().unwrap()
    }

    /// Swaps "d" with "d.swap" and "f" with "f.swap" until `stop`; returns the swaps made.
    /// A write may replace "f" while it is the symlink; the symlink is then made again.
    fn flip_until(root: &Path, secret: &Path, stop: &std::sync::atomic::AtomicBool) -> u64 {
        let mut flips = 0;
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            for name in ["d", "f"] {
                let swap = root.join(format!("{name}.swap"));
                flips += u64::from(crate::util::sys::at::exchange(&root.join(name), &swap).is_ok());
            }
            let is_link = |p: &Path| fs::symlink_metadata(p).is_ok_and(|m| m.is_symlink());
            if !is_link(&root.join("f")) && !is_link(&root.join("f.swap")) {
                let temp = root.join("f.link-tmp");
                let _ = std::os::unix::fs::symlink(secret, &temp);
                let _ = fs::rename(&temp, root.join("f.swap"));
            }
        }
        flips
    }

    fn assert_no_marker_under(dir: &Path, marker: &str) {
        for entry in fs::read_dir(dir).unwrap().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                assert_no_marker_under(&entry.path(), marker);
            } else if kind.is_file() {
                let text = fs::read(entry.path()).unwrap();
                let text = String::from_utf8_lossy(&text);
                assert!(
                    !text.contains(marker),
                    "{} holds the secret",
                    entry.path().display()
                );
            }
        }
    }
}

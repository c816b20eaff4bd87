//! The `grep` tool: a recursive search with the built-in matcher of [`super::regex`].
//!
//! It does not shell out to `rg`/`grep`: one matcher means one documented
//! pattern language and no subprocess to police. Binary files, files over
//! 10 MiB and `.git` are skipped; output is capped at the context's output cap.

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::{json, Value};

use super::regex::Regex;
use super::{args, fs as file_tools, paths, pattern, Tool, ToolContext, ToolOutput};

const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

pub struct Grep;

impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Searches file contents recursively. 'pattern' is a regular expression (supported: . ^ $ * + ? {n,m} \
         [a-z] [^x] \\d \\w \\s ( ) |); matching is per line. output_mode: files_with_matches (default), \
         content, or count. Skips binary files and .git."
    }

    fn parameters(&self) -> Value {
        json!({
            "type": "object",
            "properties": {
                "pattern": {"type": "string", "description": "Regular expression to search for"},
                "path": {"type": "string", "description": "File or directory to search (default: the workspace root)"},
                "output_mode": {"type": "string", "enum": ["content", "files_with_matches", "count"]},
                "case_insensitive": {"type": "boolean"},
                "line_numbers": {"type": "boolean", "description": "Show line numbers in content mode (default true)"},
                "context_before": {"type": "integer", "description": "Lines of context before each match (content mode)"},
                "context_after": {"type": "integer", "description": "Lines of context after each match (content mode)"},
                "glob": {"type": "string", "description": "Only search files whose name or relative path matches, e.g. '*.rs'"},
                "head_limit": {"type": "integer", "description": "Return at most this many lines or files"}
            },
            "required": ["pattern"]
        })
    }

    fn side_effecting(&self, _args: &Value) -> bool {
        false
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        let options = match Options::from_args(args) {
            Ok(options) => options,
            Err(message) => return ToolOutput::fail(format!("Error: {message}")),
        };
        let requested = args::opt_string(args, "path").unwrap_or(".");
        let base = match paths::resolve(&ctx.root, requested) {
            Ok(path) => path,
            Err(e) => return ToolOutput::fail(format!("Error: {e}")),
        };
        let files = candidate_files(&base, args::opt_string(args, "glob"), ctx);
        if ctx.cancelled() {
            return ToolOutput::fail("Error: cancelled");
        }
        search(&files, &options, ctx)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Content,
    FilesWithMatches,
    Count,
}

struct Options {
    regex: Regex,
    mode: Mode,
    line_numbers: bool,
    before: usize,
    after: usize,
    head_limit: usize,
}

impl Options {
    fn from_args(args: &Value) -> Result<Options, String> {
        let case_insensitive = args::flag(args, "case_insensitive", false);
        let regex = Regex::new(args::string(args, "pattern"), case_insensitive)
            .map_err(|e| format!("invalid pattern: {e}"))?;
        let mode = match args::opt_string(args, "output_mode").unwrap_or("files_with_matches") {
            "content" => Mode::Content,
            "files_with_matches" => Mode::FilesWithMatches,
            "count" => Mode::Count,
            other => {
                return Err(format!(
                    "unknown output_mode '{other}' (content, files_with_matches, count)"
                ))
            }
        };
        let count = |name| args::opt_i64(args, name).unwrap_or(0).clamp(0, 1000) as usize;
        Ok(Options {
            regex,
            mode,
            line_numbers: args::flag(args, "line_numbers", true),
            before: count("context_before"),
            after: count("context_after"),
            head_limit: args::opt_i64(args, "head_limit")
                .filter(|&n| n > 0)
                .map_or(usize::MAX, |n| n as usize),
        })
    }
}

/// The files to search under `base` (or `base` itself), filtered by `glob`, sorted.
fn candidate_files(base: &Path, glob: Option<&str>, ctx: &ToolContext) -> Vec<PathBuf> {
    if base.is_file() {
        return vec![base.to_path_buf()];
    }
    let mut files = Vec::new();
    file_tools::walk(base, ctx, &mut |path, rel| {
        let name = rel.rsplit('/').next().unwrap_or(rel);
        let wanted = glob.is_none_or(|g| pattern::fnmatch(g, name) || pattern::path_match(g, rel));
        if wanted && path.symlink_metadata().is_ok_and(|m| m.is_file()) {
            files.push(path.to_path_buf());
        }
        true
    });
    files.sort();
    files
}

/// Reads a file as text, or `None` for binary, huge or unreadable files.
fn text_of(path: &Path) -> Option<String> {
    if fs::metadata(path).ok()?.len() > MAX_FILE_BYTES {
        return None;
    }
    let text = String::from_utf8(fs::read(path).ok()?).ok()?;
    let head = &text.as_bytes()[..text.len().min(8192)];
    (!head.contains(&0)).then_some(text)
}

/// Collected output, stopping at the head limit or the byte cap.
struct Report {
    lines: Vec<String>,
    bytes: usize,
    cap: usize,
    head_limit: usize,
    cut: bool,
}

impl Report {
    /// Adds a line; false once no more lines may be added.
    fn push(&mut self, line: String) -> bool {
        if self.lines.len() >= self.head_limit || self.bytes + line.len() > self.cap {
            self.cut = true;
            return false;
        }
        self.bytes += line.len() + 1;
        self.lines.push(line);
        true
    }
}

fn search(files: &[PathBuf], options: &Options, ctx: &ToolContext) -> ToolOutput {
    let mut report = Report {
        lines: Vec::new(),
        bytes: 0,
        cap: ctx.output_cap,
        head_limit: options.head_limit,
        cut: false,
    };
    let mut matched_files = 0;
    for path in files {
        if ctx.cancelled() {
            return ToolOutput::fail("Error: cancelled");
        }
        let Some(text) = text_of(path) else { continue };
        let shown = paths::display(&ctx.root, path);
        let lines: Vec<&str> = text.lines().collect();
        let hits: Vec<usize> = (0..lines.len())
            .filter(|&i| options.regex.is_match(lines[i]))
            .collect();
        if hits.is_empty() {
            continue;
        }
        matched_files += 1;
        let more = match options.mode {
            Mode::FilesWithMatches => report.push(shown),
            Mode::Count => report.push(format!("{shown}:{}", hits.len())),
            Mode::Content => content_lines(&mut report, &shown, &lines, &hits, options),
        };
        if !more {
            break;
        }
    }
    finish(report, matched_files)
}

/// Adds a file's matching lines with their context; groups that do not touch are separated by `--`.
fn content_lines(
    report: &mut Report,
    shown: &str,
    lines: &[&str],
    hits: &[usize],
    options: &Options,
) -> bool {
    let mut printed_up_to: Option<usize> = None;
    for &hit in hits {
        let start = hit.saturating_sub(options.before);
        let end = (hit + options.after).min(lines.len() - 1);
        let from = printed_up_to.map_or(start, |p| start.max(p + 1));
        if printed_up_to.is_some_and(|p| from > p + 1) && !report.push("--".into()) {
            return false;
        }
        for (i, text) in lines.iter().enumerate().take(end + 1).skip(from) {
            let is_hit = hits.binary_search(&i).is_ok();
            if !report.push(format_line(
                shown,
                i + 1,
                text,
                is_hit,
                options.line_numbers,
            )) {
                return false;
            }
        }
        printed_up_to = Some(end.max(printed_up_to.unwrap_or(0)));
    }
    true
}

/// `path:12:text` for a match, `path-12-text` for context (grep's convention).
fn format_line(shown: &str, number: usize, text: &str, is_hit: bool, line_numbers: bool) -> String {
    let separator = if is_hit { ':' } else { '-' };
    let mut line = String::with_capacity(shown.len() + text.len() + 8);
    let _ = write!(line, "{shown}{separator}");
    if line_numbers {
        let _ = write!(line, "{number}{separator}");
    }
    line.push_str(text);
    line
}

fn finish(report: Report, matched_files: usize) -> ToolOutput {
    if report.lines.is_empty() {
        return ToolOutput::ok("No matches found.", "0 matches");
    }
    let summary = format!("{} lines, {matched_files} files", report.lines.len());
    let mut content = report.lines.join("\n");
    if report.cut {
        content.push_str(
            "\n[Output limited; use head_limit, glob or a narrower pattern to see other results.]",
        );
    }
    ToolOutput::ok(content, summary)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::ToolCall;
    use crate::tools::paths::tests::TempDir;
    use crate::tools::ToolRegistry;

    fn setup() -> (TempDir, ToolContext) {
        let dir = TempDir::new("grep");
        for (file, text) in [
            ("a.rs", "fn main() {\n    let x = 1;\n    run(x);\n}\n"),
            ("src/b.rs", "fn run(x: u32) {}\nfn walk() {}\n"),
            ("notes.md", "run the tests\nRUN again\n"),
            (".git/config", "fn run\n"),
            ("bin.dat", "fn run\0\n"),
        ] {
            let path = dir.0.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        let ctx = ToolContext::new(&dir.0);
        (dir, ctx)
    }

    fn grep(ctx: &ToolContext, arguments: Value) -> ToolOutput {
        let call = ToolCall {
            id: "1".into(),
            name: "grep".into(),
            arguments,
        };
        ToolRegistry::builtin().run(&call, ctx)
    }

    #[test]
    fn files_with_matches_is_the_default() {
        let (_dir, ctx) = setup();
        let out = grep(&ctx, json!({"pattern": "run"}));
        assert_eq!(out.content, "a.rs\nnotes.md\nsrc/b.rs");
        let out = grep(
            &ctx,
            json!({"pattern": "run", "case_insensitive": true, "glob": "*.md"}),
        );
        assert_eq!(out.content, "notes.md");
    }

    #[test]
    fn count_mode() {
        let (_dir, ctx) = setup();
        let out = grep(
            &ctx,
            json!({"pattern": "(?:run|RUN)", "output_mode": "count"}),
        );
        assert_eq!(out.content, "a.rs:1\nnotes.md:2\nsrc/b.rs:1");
    }

    #[test]
    fn content_mode_with_context() {
        let (_dir, ctx) = setup();
        let out = grep(
            &ctx,
            json!({"pattern": "^fn \\w+\\(", "output_mode": "content", "path": "src"}),
        );
        assert_eq!(
            out.content,
            "src/b.rs:1:fn run(x: u32) {}\nsrc/b.rs:2:fn walk() {}"
        );
        let out = grep(
            &ctx,
            json!({"pattern": "let", "output_mode": "content", "path": "a.rs", "context_before": 1, "context_after": 1}),
        );
        assert_eq!(
            out.content,
            "a.rs-1-fn main() {\na.rs:2:    let x = 1;\na.rs-3-    run(x);"
        );
        let out = grep(
            &ctx,
            json!({"pattern": "[{}]$", "output_mode": "content", "path": "a.rs", "line_numbers": false}),
        );
        assert_eq!(out.content, "a.rs:fn main() {\n--\na.rs:}");
    }

    #[test]
    fn head_limit_and_no_match() {
        let (_dir, ctx) = setup();
        let out = grep(&ctx, json!({"pattern": "run", "head_limit": 1}));
        assert!(
            out.content.starts_with("a.rs\n[Output limited"),
            "{}",
            out.content
        );
        let out = grep(&ctx, json!({"pattern": "zzz"}));
        assert_eq!(
            (out.content.as_str(), out.error),
            ("No matches found.", false)
        );
    }

    #[test]
    fn errors() {
        let (_dir, ctx) = setup();
        assert!(grep(&ctx, json!({"pattern": "(unclosed"})).error);
        assert!(grep(&ctx, json!({"pattern": "x", "output_mode": "lines"})).error);
        assert!(grep(&ctx, json!({"pattern": "root", "path": "/etc"})).error);
    }
}

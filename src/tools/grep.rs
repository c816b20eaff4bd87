//! The `grep` tool: a recursive search with the `regex` crate, ripgrep's own
//! matcher.
//!
//! It does not shell out to `rg`/`grep`: one matcher means one documented
//! pattern language (Rust regex syntax, as rg's) and no subprocess to police.
//! Matching is linear in the text (no backtracking), and a pattern whose
//! compiled form would pass [`MAX_REGEX_BYTES`] is refused, so no pattern can
//! hang the agent or eat its memory. Files come from [`super::walk`] (so
//! `.git` and gitignored paths are skipped) and are opened through its
//! directory handles; binary files and files over 10 MiB are skipped; output
//! is capped at the context's output cap.

use std::fmt::Write as _;
use std::fs::File;
use std::io::Read as _;

use regex::{Regex, RegexBuilder};
use serde_json::{json, Value};

use super::paths::{Resolved, Root};
use super::walk::{self, Kind};
use super::{args, fs as file_tools, pattern, Tool, ToolContext, ToolOutput};
use crate::util::sys::at::{self, OpenAs};

const MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;
/// Most bytes a compiled pattern may take (its NFA; the lazy DFA's cache is
/// bounded separately by the crate's default of 2 MiB). Measured: ordinary
/// patterns need under 128 KiB, but each copy of a Unicode class such as
/// `\w` costs about 80 KiB, so `\w{100}` (8 MiB) still fits and
/// `\w{200}` or `(?:\w{100}){100}` (512 MiB) is refused, within tens of
/// milliseconds, before the memory is taken. (The same value as the crate's
/// default, written out because this limit is what stands between a model's
/// pattern and the agent's memory.)
const MAX_REGEX_BYTES: usize = 10 << 20;

pub struct Grep;

impl Tool for Grep {
    fn name(&self) -> &str {
        "grep"
    }

    fn description(&self) -> &str {
        "Searches file contents recursively. 'pattern' is a regular expression in Rust/ripgrep syntax \
         (no look-around or backreferences; escape literal '(' '{' '.' with '\\'); matching is per line. \
         output_mode: files_with_matches (default), content, or count. Skips binary files, .git and what \
         .gitignore/.ignore files exclude (as rg does; hidden files are searched, symlinks are not \
         followed); a 'path' named explicitly is searched even if ignored."
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
        let root = match Root::open(&ctx.root) {
            Ok(root) => root,
            Err(e) => return ToolOutput::fail(format!("Error: {e}")),
        };
        let mut search = Search::new(&options, ctx);
        match file_tools::search_base(&root, requested) {
            Ok(Some(base)) => search.under(&root, &base, args::opt_string(args, "glob")),
            Ok(None) => {}
            Err(out) => return out,
        }
        if ctx.cancelled() {
            return ToolOutput::fail("Error: cancelled");
        }
        finish(search.report, search.matched_files)
    }
}

/// Compiles `pattern`, explaining a refusal in words the model can act on.
fn compile(pattern: &str, case_insensitive: bool) -> Result<Regex, String> {
    let built = RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(MAX_REGEX_BYTES)
        .build();
    built.map_err(|e| match e {
        regex::Error::CompiledTooBig(limit) => format!(
            "pattern too large: compiled, it would pass the {limit}-byte limit; \
             use fewer or smaller repetitions (e.g. \\w+ instead of \\w{{500}})"
        ),
        e => format!("invalid pattern: {e}"),
    })
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
        let regex = compile(args::string(args, "pattern"), case_insensitive)?;
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

/// Reads a file as text, or `None` for binary, huge or unreadable files.
fn text_of(file: File) -> Option<String> {
    let meta = file.metadata().ok()?;
    if !meta.is_file() || meta.len() > MAX_FILE_BYTES {
        return None;
    }
    let mut bytes = Vec::new();
    file.take(MAX_FILE_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8(bytes).ok()?;
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

/// One search: the options, and the output so far.
struct Search<'a> {
    options: &'a Options,
    ctx: &'a ToolContext,
    report: Report,
    matched_files: usize,
}

impl<'a> Search<'a> {
    fn new(options: &'a Options, ctx: &'a ToolContext) -> Self {
        let report = Report {
            lines: Vec::new(),
            bytes: 0,
            cap: ctx.output_cap,
            head_limit: options.head_limit,
            cut: false,
        };
        Search {
            options,
            ctx,
            report,
            matched_files: 0,
        }
    }

    /// Searches `base`: the file itself, or the files under it in path order
    /// whose name or relative path matches `glob`.
    fn under(&mut self, root: &Root, base: &Resolved, glob: Option<&str>) {
        if let Ok(file) = base.open(OpenAs::Read) {
            if file.metadata().is_ok_and(|m| m.is_file()) {
                self.file(file, &base.rel);
                return;
            }
        }
        let ctx = self.ctx;
        walk::walk(root, base, ctx, &mut |entry| {
            let name = entry.rel.rsplit('/').next().unwrap_or(entry.rel);
            let wanted =
                glob.is_none_or(|g| pattern::fnmatch(g, name) || pattern::path_match(g, entry.rel));
            if entry.kind != Kind::File || !wanted {
                return true;
            }
            match at::open(entry.dir, entry.name, OpenAs::Read) {
                Ok(file) => self.file(file, &walk::join(&base.rel, entry.rel)),
                Err(_) => true,
            }
        });
    }

    /// Searches one open file shown as `shown`; false once the output is full.
    fn file(&mut self, file: File, shown: &str) -> bool {
        let Some(text) = text_of(file) else {
            return true;
        };
        let lines: Vec<&str> = text.lines().collect();
        let hits: Vec<usize> = (0..lines.len())
            .filter(|&i| self.options.regex.is_match(lines[i]))
            .collect();
        if hits.is_empty() {
            return true;
        }
        self.matched_files += 1;
        let report = &mut self.report;
        match self.options.mode {
            Mode::FilesWithMatches => report.push(shown.to_string()),
            Mode::Count => report.push(format!("{shown}:{}", hits.len())),
            Mode::Content => content_lines(report, shown, &lines, &hits, self.options),
        }
    }
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
    use crate::tools::ToolRegistry;
    use crate::util::fs::test_support::TempDir;
    use std::fs;
    use std::time::{Duration, Instant};

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
        assert!(grep(&ctx, json!({"pattern": "x", "output_mode": "lines"})).error);
        assert!(grep(&ctx, json!({"pattern": "root", "path": "/etc"})).error);
    }

    #[test]
    fn invalid_pattern_is_a_clear_error() {
        let (_dir, ctx) = setup();
        let out = grep(&ctx, json!({"pattern": "(unclosed"}));
        assert!(out.error);
        assert!(
            out.content.starts_with("Error: invalid pattern") && out.content.contains("unclosed"),
            "{}",
            out.content
        );
    }

    #[test]
    fn huge_pattern_is_an_error() {
        let (_dir, ctx) = setup();
        let out = grep(&ctx, json!({"pattern": "(?:\\w{100}){100}"}));
        assert!(out.error, "{}", out.content);
        assert!(out.content.contains("too large"), "{}", out.content);
    }

    fn check(pattern: &str, line: &str, expected: bool) {
        let regex = compile(pattern, false).unwrap_or_else(|e| panic!("{pattern}: {e}"));
        assert_eq!(regex.is_match(line), expected, "{pattern} vs {line:?}");
    }

    /// The cases the hand-written matcher was tested with, now against the crate.
    #[test]
    fn matching() {
        check("foo", "a foo b", true);
        check("foo", "a fo b", false);
        check("^foo", "foo bar", true);
        check("^foo", "a foo", false);
        check("bar$", "foo bar", true);
        check("bar$", "bar foo", false);
        check("^$", "", true);
        check("f.o", "fxo", true);
        check("fo+b", "fb", false);
        check("colou?r", "color", true);
        check("^a{2,3}$", "aaaa", false);
        check("^a{2,}$", "aaaa", true);
        check("[abc]+d", "zzbcad", true);
        check("[^abc]", "abc", false);
        check("\\d+\\.\\d+", "version 1.25", true);
        check("\\d+\\.\\d+", "version 125", false);
        check("\\w+\\s\\w+", "hello world", true);
        check("\\S", "   ", false);
        check("fn (main|run)\\(", "pub fn run()", true);
        check("(?:ab)+c", "ababc", true);
        check("(a*)*b", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", false);
        check("é.", "café!", true);
        assert!(compile("Hello [A-Z]+", true)
            .unwrap()
            .is_match("say HELLO world"));
        for bad in ["(abc", "abc)", "[abc", "*a", "a\\", "x{y"] {
            assert!(compile(bad, false).is_err(), "{bad} should not compile");
        }
    }

    #[test]
    fn ordinary_patterns_compile() {
        for pattern in [
            "\\w+",
            "(?i)\\bfn\\s+\\w+\\s*\\(",
            "^\\s*(pub\\s+)?(async\\s+)?fn\\s+\\w+",
            "[\\p{L}\\p{N}_]{1,64}",
            "\\w{100}",
            "[0-9a-f]{40}",
            "\\d{4}-\\d{2}-\\d{2}",
        ] {
            assert!(compile(pattern, true).is_ok(), "{pattern}");
        }
    }

    /// Regression: the old matcher shared one step budget across all start
    /// positions and reported "no match" once a pattern used it up.
    #[test]
    fn nested_repeats_find_the_later_match() {
        let (dir, ctx) = setup();
        fs::write(dir.0.join("x.txt"), "xxxxxxxxxxxxxxxx-xxy\n").unwrap();
        let out = grep(
            &ctx,
            json!({"pattern": "(x+x+)+y", "output_mode": "content", "path": "x.txt"}),
        );
        assert_eq!(out.content, "x.txt:1:xxxxxxxxxxxxxxxx-xxy");
    }

    #[test]
    fn pathological_pattern_is_linear() {
        let (dir, ctx) = setup();
        let line = "a".repeat(100_000);
        fs::write(dir.0.join("a.txt"), format!("{line}\n{line}b\n")).unwrap();
        let args = json!({"pattern": "(a*)*b", "output_mode": "content", "path": "a.txt", "line_numbers": true});
        // Best of three, so that a busy machine does not fail the bound; a
        // backtracking matcher takes seconds or gives up, never 100 ms.
        let mut fastest = Duration::MAX;
        for _ in 0..3 {
            let started = Instant::now();
            let out = grep(&ctx, args.clone());
            fastest = fastest.min(started.elapsed());
            assert!(
                out.content.starts_with("a.txt:2:aaaa") && out.content.ends_with("ab"),
                "{}",
                &out.content[..out.content.len().min(200)]
            );
            assert_eq!(out.summary, "1 lines, 1 files");
        }
        assert!(fastest < Duration::from_millis(100), "took {fastest:?}");
    }

    #[test]
    fn gitignored_files_are_skipped() {
        let (dir, ctx) = setup();
        for (file, text) in [
            (".gitignore", "target/\n*.log\n!keep.log\n"),
            ("target/debug/out.rs", "fn run\n"),
            ("build.log", "run\n"),
            ("keep.log", "run\n"),
            ("src/.gitignore", "gen.rs\n"),
            ("src/gen.rs", "fn run\n"),
            ("node_modules/x/index.js", "run\n"),
        ] {
            let path = dir.0.join(file);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
        fs::write(dir.0.join(".ignore"), "node_modules/\n").unwrap();
        let out = grep(&ctx, json!({"pattern": "run"}));
        assert_eq!(out.content, "a.rs\nkeep.log\nnotes.md\nsrc/b.rs");
        // A path named explicitly is searched even when ignored, as rg does.
        let out = grep(&ctx, json!({"pattern": "run", "path": "target"}));
        assert_eq!(out.content, "target/debug/out.rs");
    }
}

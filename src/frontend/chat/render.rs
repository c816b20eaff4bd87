//! Plain-terminal rendering of agent events, shared by the one-shot and line modes.
//!
//! Answer text goes to stdout as it streams; tool calls and results are one
//! line each; notices, errors and `--stats` lines go to stderr so a pipe
//! receives only the conversation. Colours are used only on a terminal and
//! never when `NO_COLOR` is set or `TERM=dumb`.
//!
//! Event text is untrusted: on a terminal, every piece of it passes through
//! [`sanitize::visible`] at the one place text is written (`text`, `line`,
//! `note`), before any colour is added, so escape sequences in model or tool
//! output are shown, never obeyed. A stream that is not a terminal (a pipe, a
//! file) gets the exact text when the caller says so with [`ExactText`].

use std::borrow::Cow;
use std::io::{self, IsTerminal, Write};

use serde_json::Value;

use crate::core::{Event, FinishReason, Stats, ToolCall, ToolResultEvent};

use super::sanitize;

/// Longest argument value shown in a tool-call line before it is cut.
const MAX_ARG_CHARS: usize = 47;

/// What to show and how.
#[derive(Debug, Clone, Copy, Default)]
pub struct RenderOptions {
    pub colors: bool,
    pub show_thinking: bool,
    pub stats: bool,
}

/// Which of the renderer's streams take untrusted text exactly as it came.
/// The default, for terminals, spells out control characters on both.
#[derive(Debug, Clone, Copy, Default)]
pub struct ExactText {
    pub out: bool,
    pub err: bool,
}

impl ExactText {
    /// Exact text on whichever of stdout and stderr is not a terminal.
    pub fn for_stdio() -> ExactText {
        ExactText {
            out: !io::stdout().is_terminal(),
            err: !io::stderr().is_terminal(),
        }
    }
}

/// Writes events as text.
pub struct Renderer<O: Write, E: Write> {
    out: O,
    err: E,
    options: RenderOptions,
    exact: ExactText,
    /// Whether the last byte written to `out` ended a line.
    at_line_start: bool,
    in_thinking: bool,
    in_code: bool,
    /// Markdown table lines held back until the table ends, so columns can be aligned.
    table: Vec<String>,
    /// A table line still being streamed.
    table_line: Option<String>,
}

const GREEN: &str = "\x1b[32m";
const RED: &str = "\x1b[31m";
const YELLOW: &str = "\x1b[33m";
const CYAN: &str = "\x1b[36m";
const GRAY: &str = "\x1b[90m";
const RESET: &str = "\x1b[0m";

impl<O: Write, E: Write> Renderer<O, E> {
    pub fn new(out: O, err: E, options: RenderOptions) -> Self {
        Renderer {
            out,
            err,
            options,
            exact: ExactText::default(),
            at_line_start: true,
            in_thinking: false,
            in_code: false,
            table: Vec::new(),
            table_line: None,
        }
    }

    /// Writes untrusted text unchanged to the streams `exact` names (those
    /// that are not terminals); by default both are sanitized.
    pub fn with_exact_text(mut self, exact: ExactText) -> Self {
        self.exact = exact;
        self
    }

    /// Renders one event. Write errors (a closed pipe) are returned to the caller.
    pub fn render(&mut self, event: &Event) -> io::Result<()> {
        if self.in_thinking && !matches!(event, Event::Thinking(_)) {
            self.in_thinking = false;
            self.end_line()?;
        }
        if !matches!(event, Event::Content(_)) {
            self.flush_table()?;
        }
        // A code block starts and ends on a line of its own.
        if self.in_code != matches!(event, Event::CodeBlock(_)) {
            self.in_code = !self.in_code;
            self.end_line()?;
        }
        match event {
            Event::Content(text) => self.content(text)?,
            Event::CodeBlock(text) => self.text(text, Some(CYAN))?,
            Event::Thinking(text) if self.options.show_thinking => {
                self.in_thinking = true;
                self.text(text, Some(GRAY))?;
            }
            Event::Thinking(_) | Event::UserPrompt(_) => {}
            Event::ToolCall(call) => {
                let line = format!("* {}", tool_call_line(call));
                self.line(&line, YELLOW)?;
            }
            Event::ToolResult(result) => {
                let (mark, color) = if result.success {
                    ("✓", GREEN)
                } else {
                    ("✗", RED)
                };
                self.line(&format!("  {mark} {}", result_line(result)), color)?;
            }
            Event::ApprovalRequired(request) => {
                self.line(&approval_question(&request.call), YELLOW)?;
            }
            Event::System(text) => self.note(&format!("[{text}]"), GRAY)?,
            Event::Error { message, .. } => self.note(&format!("error: {message}"), RED)?,
            Event::Stats(stats) if self.options.stats => self.note(&stats_line(stats), GRAY)?,
            Event::Stats(_) | Event::Logprobs(_) | Event::Prefilled { .. } | Event::Progress(_) => {
            }
            Event::Stop(FinishReason::Cancelled) => self.note("[Cancelled]", GRAY)?,
            Event::Stop(_) => {
                self.end_line()?;
            }
        }
        self.out.flush()
    }

    /// Answer text, with markdown table lines held back for alignment.
    /// Control characters are spelled out first, so columns are aligned on
    /// what is shown (`text` finds nothing left to change).
    fn content(&mut self, text: &str) -> io::Result<()> {
        let text = shown(text, self.exact.out);
        for piece in text.split_inclusive('\n') {
            let starts_table = self.at_line_start && piece.starts_with('|');
            if self.table_line.is_none() && !starts_table {
                if self.at_line_start {
                    self.flush_table()?;
                }
                self.text(piece, None)?;
                continue;
            }
            let line = self.table_line.get_or_insert_with(String::new);
            line.push_str(piece.trim_end_matches('\n'));
            if piece.ends_with('\n') {
                let done = self.table_line.take().unwrap_or_default();
                self.table.push(done);
            }
        }
        Ok(())
    }

    /// Writes the held table with its columns aligned.
    fn flush_table(&mut self) -> io::Result<()> {
        self.table.extend(self.table_line.take());
        if self.table.is_empty() {
            return Ok(());
        }
        let rows = std::mem::take(&mut self.table);
        for line in align_table(&rows) {
            self.text(&(line + "\n"), None)?;
        }
        Ok(())
    }

    fn paint(&self, text: &str, color: Option<&str>) -> String {
        match color {
            Some(c) if self.options.colors => format!("{c}{text}{RESET}"),
            _ => text.to_string(),
        }
    }

    fn text(&mut self, text: &str, color: Option<&str>) -> io::Result<()> {
        if text.is_empty() {
            return Ok(());
        }
        let shown = shown(text, self.exact.out);
        let painted = self.paint(&shown, color);
        self.out.write_all(painted.as_bytes())?;
        self.at_line_start = text.ends_with('\n');
        Ok(())
    }

    fn end_line(&mut self) -> io::Result<()> {
        if !self.at_line_start {
            self.out.write_all(b"\n")?;
            self.at_line_start = true;
        }
        Ok(())
    }

    fn line(&mut self, text: &str, color: &str) -> io::Result<()> {
        self.end_line()?;
        let shown = shown(text, self.exact.out);
        let painted = self.paint(&shown, Some(color));
        writeln!(self.out, "{painted}")
    }

    fn note(&mut self, text: &str, color: &str) -> io::Result<()> {
        self.end_line()?;
        self.out.flush()?;
        let shown = shown(text, self.exact.err);
        let painted = self.paint(&shown, Some(color));
        writeln!(self.err, "{painted}")
    }
}

/// `text` as it may be written to a stream: exact when the caller asked for
/// exact text there, otherwise with its control characters spelled out.
fn shown(text: &str, exact: bool) -> Cow<'_, str> {
    match exact {
        true => Cow::Borrowed(text),
        false => sanitize::visible(text),
    }
}

/// Markdown table rows with every column padded to its widest cell;
/// separator rows (`|---|:--:|`) become dashes of the column's width.
pub fn align_table(rows: &[String]) -> Vec<String> {
    let cells: Vec<Vec<String>> = rows.iter().map(|r| table_cells(r)).collect();
    let columns = cells.iter().map(Vec::len).max().unwrap_or(0);
    // Three is the narrowest a separator (`---`) can be.
    let mut widths = vec![3usize; columns];
    for row in cells.iter().filter(|r| !is_separator(r)) {
        for (index, cell) in row.iter().enumerate() {
            widths[index] = widths[index].max(cell.chars().count());
        }
    }
    cells
        .iter()
        .map(|row| {
            let separator = is_separator(row);
            let padded: Vec<String> = (0..columns)
                .map(|index| {
                    let cell = row.get(index).map_or("", String::as_str);
                    match separator {
                        true => "-".repeat(widths[index]),
                        false => {
                            format!("{cell}{}", " ".repeat(widths[index] - cell.chars().count()))
                        }
                    }
                })
                .collect();
            format!("| {} |", padded.join(" | "))
        })
        .collect()
}

fn table_cells(row: &str) -> Vec<String> {
    let inner = row.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    inner.split('|').map(|c| c.trim().to_string()).collect()
}

fn is_separator(cells: &[String]) -> bool {
    cells
        .iter()
        .all(|c| !c.is_empty() && c.chars().all(|ch| matches!(ch, '-' | ':')))
}

/// What the interactive front-ends show for an approval request: the call's
/// whole arguments, nothing cut (the tool-call line above shortens long
/// values to their first line; what is approved must be what was seen), as
/// JSON, so a newline inside a value shows as `\n`; then the question.
pub fn approval_question(call: &ToolCall) -> String {
    let arguments = serde_json::to_string_pretty(&call.arguments).unwrap_or_default();
    let arguments: String = arguments.lines().map(|l| format!("  {l}\n")).collect();
    format!(
        "{arguments}? allow {}? [y]es / [n]o / [a]lways for {} this session",
        call.name, call.name
    )
}

/// `name(key=value, ...)` with long values cut.
pub fn tool_call_line(call: &ToolCall) -> String {
    let args = match &call.arguments {
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| format!("{k}={}", cut(&value_text(v), MAX_ARG_CHARS)))
            .collect::<Vec<_>>()
            .join(", "),
        Value::Null => String::new(),
        other => cut(&other.to_string(), MAX_ARG_CHARS),
    };
    format!("{}({args})", call.name)
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The first line of `text`, at most `max` characters, with `...` when cut.
fn cut(text: &str, max: usize) -> String {
    let first = text.lines().next().unwrap_or("");
    let multi_line = first.len() < text.trim_end().len();
    if first.chars().count() > max {
        let kept: String = first.chars().take(max).collect();
        format!("{kept}...")
    } else if multi_line {
        format!("{first}...")
    } else {
        first.to_string()
    }
}

fn result_line(result: &ToolResultEvent) -> String {
    if result.summary.is_empty() {
        cut(&result.content, 100)
    } else {
        cut(&result.summary, 200)
    }
}

fn stats_line(stats: &Stats) -> String {
    let speed = |tps: Option<f64>| tps.map_or(String::new(), |t| format!(", {t:.1} t/s"));
    let context = if stats.context_size > 0 {
        format!("{}/{}", stats.context_used, stats.context_size)
    } else {
        stats.context_used.to_string()
    };
    let provider = stats
        .provider
        .as_ref()
        .map_or(String::new(), |p| format!(" [Provider: {p}]"));
    // The prefill speed counts only the tokens decoded, not those reused from a cache.
    let cached = match stats.cached_tokens {
        0 => String::new(),
        n => format!(" ({n} cached)"),
    };
    // Speculative decoding: how many drafted tokens the model accepted.
    let drafts = match stats.draft_tokens {
        0 => String::new(),
        n => format!(", drafts: {} of {n} accepted", stats.draft_accepted),
    };
    format!(
        "[Prefill: {} tokens{cached}{}, context: {context}] [Decode: {} tokens{}{drafts}]{provider}",
        stats.prompt_tokens,
        speed(stats.prefill_tps),
        stats.completion_tokens,
        speed(stats.decode_tps)
    )
}

/// Whether colours are wanted on a stream that is (or is not) a terminal.
pub fn colors_wanted(is_terminal: bool, no_colors_flag: bool) -> bool {
    let no_color_env = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let dumb = std::env::var("TERM").is_ok_and(|t| t == "dumb");
    is_terminal && !no_colors_flag && !no_color_env && !dumb
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(events: &[Event], options: RenderOptions) -> (String, String) {
        let mut out = Vec::new();
        let mut err = Vec::new();
        {
            let mut r = Renderer::new(&mut out, &mut err, options);
            for e in events {
                r.render(e).unwrap();
            }
        }
        (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    #[test]
    fn tool_lines_start_on_their_own_line() {
        let call = ToolCall {
            id: "c1".into(),
            name: "read".into(),
            arguments: json!({"file_path": "a.txt"}),
        };
        let result = ToolResultEvent {
            id: "c1".into(),
            name: "read".into(),
            success: true,
            summary: "3 lines".into(),
            content: "x".into(),
        };
        let (out, _) = render(
            &[
                Event::Content("Let me look".into()),
                Event::ToolCall(call),
                Event::ToolResult(result),
                Event::Content("Done.".into()),
                Event::Stop(FinishReason::Stop),
            ],
            RenderOptions::default(),
        );
        assert_eq!(
            out,
            "Let me look\n* read(file_path=a.txt)\n  ✓ 3 lines\nDone.\n"
        );
    }

    #[test]
    fn long_and_multi_line_values_are_cut() {
        let call = ToolCall {
            id: "c".into(),
            name: "write".into(),
            arguments: json!({"content": "x".repeat(60), "file_path": "f"}),
        };
        assert_eq!(
            tool_call_line(&call),
            format!("write(content={}..., file_path=f)", "x".repeat(47))
        );
        let call = ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: json!({"command": "echo 1\necho 2"}),
        };
        assert_eq!(tool_call_line(&call), "bash(command=echo 1...)");
    }

    #[test]
    fn thinking_hidden_unless_asked_and_notices_go_to_stderr() {
        let events = [
            Event::Thinking("hmm".into()),
            Event::Content("hi".into()),
            Event::Error {
                kind: crate::core::error::ErrorKind::Http,
                message: "boom".into(),
            },
        ];
        let (out, err) = render(&events, RenderOptions::default());
        assert_eq!(out, "hi\n");
        assert_eq!(err, "error: boom\n");
        let shown = RenderOptions {
            show_thinking: true,
            ..RenderOptions::default()
        };
        let (out, _) = render(&events, shown);
        assert_eq!(out, "hmm\nhi\n");
    }

    #[test]
    fn tables_are_aligned_even_when_streamed_in_pieces() {
        let text = "Here:\n| a | bb |\n|---|:-:|\n| ccc ✓ | d |\nDone.";
        let expected = "Here:\n| a     | bb  |\n| ----- | --- |\n| ccc ✓ | d   |\nDone.\n";
        let chars: Vec<char> = text.chars().collect();
        for split in 0..=chars.len() {
            let first: String = chars[..split].iter().collect();
            let second: String = chars[split..].iter().collect();
            let events = [
                Event::Content(first),
                Event::Content(second),
                Event::Stop(FinishReason::Stop),
            ];
            let (out, _) = render(&events, RenderOptions::default());
            assert_eq!(out, expected, "split at {split}");
        }
        // A table at the very end is written when the turn stops.
        let events = [
            Event::Content("| x | y |".into()),
            Event::Stop(FinishReason::Stop),
        ];
        assert_eq!(
            render(&events, RenderOptions::default()).0,
            "| x   | y   |\n"
        );
    }

    #[test]
    fn code_blocks_are_set_apart() {
        let events = [
            Event::Content("Run".into()),
            Event::CodeBlock("ls -l".into()),
            Event::Content("then".into()),
            Event::Stop(FinishReason::Stop),
        ];
        let (out, _) = render(&events, RenderOptions::default());
        assert_eq!(out, "Run\nls -l\nthen\n");
    }

    /// A reply that tries to act on the terminal, as it would arrive.
    const HOSTILE: &str = "clip:\x1b]52;c;aGVsbG8=\x07 clear:\x1b[2J home:\x1b[H \
         link:\x1b]8;;http://evil.example/\x1b\\here\x1b]8;;\x1b\\ csi8:\u{9b}31m \
         bidi:\u{202e}gnp.exe\u{202c} cr:a\rb ✓\n";

    fn hostile_call() -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: "bash\x1b[8m".into(),
            arguments: json!({"command": "ls\r\x1b[2Krm -rf ~"}),
        }
    }

    #[test]
    fn the_stats_line_says_how_much_of_the_prompt_came_from_a_cache() {
        let stats = Stats {
            prompt_tokens: 1618,
            cached_tokens: 1617,
            prefill_tps: Some(54.9),
            completion_tokens: 7,
            ..Stats::default()
        };
        let line = stats_line(&stats);
        assert!(
            line.starts_with("[Prefill: 1618 tokens (1617 cached), 54.9 t/s"),
            "{line}"
        );
        let cold = stats_line(&Stats {
            cached_tokens: 0,
            ..stats
        });
        assert!(
            cold.starts_with("[Prefill: 1618 tokens, 54.9 t/s"),
            "{cold}"
        );
    }

    #[test]
    fn the_stats_line_says_how_many_drafted_tokens_were_accepted() {
        let stats = Stats {
            completion_tokens: 120,
            decode_tps: Some(300.0),
            draft_tokens: 110,
            draft_accepted: 96,
            ..Stats::default()
        };
        let line = stats_line(&stats);
        assert!(
            line.ends_with("[Decode: 120 tokens, 300.0 t/s, drafts: 96 of 110 accepted]"),
            "{line}"
        );
        let plain = stats_line(&Stats {
            draft_tokens: 0,
            draft_accepted: 0,
            ..stats
        });
        assert!(
            plain.ends_with("[Decode: 120 tokens, 300.0 t/s]"),
            "{plain}"
        );
    }

    #[test]
    fn an_approval_shows_every_argument_whole() {
        let hidden = format!("{}; rm -rf ~", "x".repeat(80));
        let call = ToolCall {
            id: "c".into(),
            name: "bash".into(),
            arguments: json!({"command": format!("echo hi\n{hidden}"), "timeout": 5}),
        };
        // The call line cuts the value at its first line...
        assert!(!tool_call_line(&call).contains("rm -rf"));
        // ...the approval does not: the second line, past 80 characters, is there.
        let question = approval_question(&call);
        assert!(
            question.contains(&format!("echo hi\\n{hidden}")),
            "{question}"
        );
        assert!(question.contains("\"timeout\": 5"), "{question}");
        assert!(question.ends_with("? allow bash? [y]es / [n]o / [a]lways for bash this session"));
    }

    /// Every kind of event that carries untrusted text, each holding `text`.
    fn every_text_event(text: &str) -> Vec<Event> {
        vec![
            Event::Thinking(text.into()),
            Event::Content(text.into()),
            Event::CodeBlock(text.into()),
            Event::ToolCall(hostile_call()),
            Event::ApprovalRequired(crate::core::ApprovalRequest {
                id: "a".into(),
                call: hostile_call(),
            }),
            Event::ToolResult(ToolResultEvent {
                id: "c".into(),
                name: "bash".into(),
                success: false,
                summary: String::new(),
                content: text.into(),
            }),
            Event::System(text.into()),
            Event::Error {
                kind: crate::core::error::ErrorKind::Http,
                message: format!("upstream said: {text}"),
            },
            Event::Stop(FinishReason::Stop),
        ]
    }

    fn shown_thinking_in_colour() -> RenderOptions {
        RenderOptions {
            colors: true,
            show_thinking: true,
            stats: false,
        }
    }

    /// Removes the renderer's own colour sequences, so what is left of ESC is untrusted.
    fn without_own_colours(text: &str) -> String {
        [GREEN, RED, YELLOW, CYAN, GRAY, RESET]
            .iter()
            .fold(text.to_string(), |t, colour| t.replace(colour, ""))
    }

    #[test]
    fn control_characters_from_every_event_are_shown_not_written() {
        let (out, err) = render(&every_text_event(HOSTILE), shown_thinking_in_colour());
        for stream in [&out, &err] {
            let untrusted = without_own_colours(stream);
            assert!(
                !untrusted.chars().any(|c| c.is_control() && c != '\n')
                    && !untrusted.contains('\u{202e}'),
                "{untrusted:?}"
            );
        }
        // Shepherd's own colours still work.
        assert!(out.contains(YELLOW) && err.contains(RED));
        assert!(out.contains("clip:\\x1b]52;c;aGVsbG8=\\x07 clear:\\x1b[2J"));
        assert!(out.contains("link:\\x1b]8;;http://evil.example/\\x1b\\here"));
        assert!(out.contains("csi8:<U+009B>31m bidi:<U+202E>gnp.exe<U+202C> cr:a\\rb ✓"));
        assert!(out.contains("* bash\\x1b[8m(command=ls\\r\\x1b[2Krm -rf ~)"));
        assert!(out.contains("? allow bash\\x1b[8m?"));
        assert!(err.contains("error: upstream said: clip:\\x1b]52;"));
        assert!(err.contains("[clip:\\x1b]52;"), "system events: {err:?}");
    }

    #[test]
    fn exact_text_is_kept_on_streams_that_are_not_terminals() {
        let mut out = Vec::new();
        let mut err = Vec::new();
        {
            let exact = ExactText {
                out: true,
                err: false,
            };
            let mut r =
                Renderer::new(&mut out, &mut err, RenderOptions::default()).with_exact_text(exact);
            for event in every_text_event(HOSTILE) {
                r.render(&event).unwrap();
            }
        }
        let (out, err) = (
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        );
        assert!(out.starts_with(&format!("{HOSTILE}{HOSTILE}")), "{out:?}");
        assert!(
            !err.contains('\x1b') && err.contains("\\x1b]52;"),
            "{err:?}"
        );
    }

    #[test]
    fn a_sequence_split_across_deltas_is_shown_as_if_whole() {
        let whole = render(&[Event::Content(HOSTILE.into())], RenderOptions::default()).0;
        for split in (0..=HOSTILE.len()).filter(|&i| HOSTILE.is_char_boundary(i)) {
            let (first, second) = HOSTILE.split_at(split);
            let events = [Event::Content(first.into()), Event::Content(second.into())];
            let (out, _) = render(&events, RenderOptions::default());
            assert_eq!(out, whole, "split at byte {split}");
        }
        assert!(!whole.contains('\x1b'));
    }

    #[test]
    fn a_table_with_control_characters_is_aligned_on_what_is_shown() {
        let events = [
            Event::Content("| a\x1b | b |\n|---|---|\n| ccccccc | d |\n".into()),
            Event::Stop(FinishReason::Stop),
        ];
        let (out, _) = render(&events, RenderOptions::default());
        assert_eq!(
            out,
            "| a\\x1b   | b   |\n| ------- | --- |\n| ccccccc | d   |\n"
        );
    }

    #[test]
    fn no_escape_codes_without_colors() {
        let (out, _) = render(
            &[Event::CodeBlock("let x = 1;\n".into())],
            RenderOptions::default(),
        );
        assert!(!out.contains('\x1b'));
    }
}

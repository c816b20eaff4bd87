//! The output filter: model text in, typed events out.
//!
//! Every backend sends the text it receives from the model through one
//! [`OutputFilter`]. `<think>`/`<thinking>` blocks become [`Event::Thinking`],
//! fenced code becomes [`Event::CodeBlock`] (fences and language tag
//! stripped), everything else [`Event::Content`]. Tool-call markup is held
//! back, parsed by [`super::textcalls`] and validated against the registered
//! tool names; a valid call is collected (never shown), anything else is
//! flushed as plain text. Tags may be split across pushes at any point.
//!
//! Detection rules, chosen so ordinary prose is never held for long:
//! fences count only at the start of a line; a bare JSON call must start a
//! line with `{"`; markup inside a code fence or a think block is text.

use super::textcalls;
use super::toolcall::ensure_ids;
use crate::core::{Event, EventSink, Flow, ToolCall};

/// Held tool-call text beyond this size is shown as text instead.
const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;

const FENCE: &str = "```";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Opener {
    Think(&'static str),
    Fence,
    Markup(&'static str),
}

/// Tags that switch mode, with what they switch to. Longer tags sharing a
/// prefix with a shorter one differ before the shorter one ends, so the first
/// full match is the right one.
const OPENERS: [(&str, Opener); 7] = [
    ("<think>", Opener::Think("</think>")),
    ("<thinking>", Opener::Think("</thinking>")),
    (FENCE, Opener::Fence),
    ("<tool_call>", Opener::Markup("</tool_call>")),
    ("<function_calls>", Opener::Markup("</function_calls>")),
    ("<tool>", Opener::Markup("</tool>")),
    ("<function=", Opener::Markup("</function>")),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Text,
    Think(&'static str),
    /// After an opening fence, until the end of the language-tag line.
    FenceHeader,
    Code,
    /// Holding tool-call markup (it starts `pending`) until `close`; `scanned`
    /// bytes were already searched.
    Markup {
        close: &'static str,
        scanned: usize,
    },
    /// Holding a possible bare JSON call (it starts `pending`).
    Json(JsonScan),
}

/// Incremental brace matching over held JSON text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct JsonScan {
    pos: usize,
    depth: usize,
    in_string: bool,
    escaped: bool,
    /// The first key's quote was seen (so `{` starting prose is let go at once).
    keyed: bool,
}

enum JsonProgress {
    Complete(usize),
    Incomplete,
    NotACall,
}

/// Where a scan of text stopped.
enum Scan {
    /// An opener starts at this byte.
    Opener(usize, Opener),
    /// A possible bare JSON call starts at this byte.
    Json(usize),
    /// The text from this byte may be the start of a tag: hold it.
    Hold(usize),
    Clear,
}

/// What one processing step achieved.
enum Step {
    Again,
    Wait,
    Cancel,
}

/// Splits model text into typed events; see the module docs.
pub struct OutputFilter {
    tool_names: Vec<String>,
    mode: Mode,
    /// Text received but not yet emitted.
    pending: String,
    /// Whether the next character starts a line (only whitespace since the last newline).
    line_start: bool,
    visible: String,
    thinking: String,
    tool_calls: Vec<ToolCall>,
}

impl OutputFilter {
    /// A filter that recognises calls to these tools only.
    pub fn new(tool_names: Vec<String>) -> Self {
        OutputFilter {
            tool_names,
            mode: Mode::Text,
            pending: String::new(),
            line_start: true,
            visible: String::new(),
            thinking: String::new(),
            tool_calls: Vec::new(),
        }
    }

    /// Feeds model text; returns `Cancel` as soon as the sink asks to stop.
    pub fn push(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        self.pending.push_str(text);
        self.process(sink)
    }

    /// Ends the text: whatever is held is resolved (a tool call whose closing
    /// tag never came is still parsed) and emitted.
    pub fn finish(&mut self, sink: &mut dyn EventSink) -> Flow {
        if self.process(sink) == Flow::Cancel {
            return Flow::Cancel;
        }
        let rest = std::mem::take(&mut self.pending);
        let mode = std::mem::replace(&mut self.mode, Mode::Text);
        let flow = match mode {
            Mode::Text | Mode::Json(_) => self.show(&rest, sink),
            Mode::Think(_) => self.think(&rest, sink),
            Mode::FenceHeader => {
                self.visible.push_str(&rest);
                Flow::Continue
            }
            Mode::Code => self.code(&rest, sink),
            Mode::Markup { .. } => self.resolve_markup(&rest, sink),
        };
        ensure_ids(&mut self.tool_calls);
        flow
    }

    /// The text the user saw, code fences included, as the model wrote it.
    pub fn content(&self) -> &str {
        &self.visible
    }

    pub fn thinking(&self) -> &str {
        &self.thinking
    }

    pub fn take_tool_calls(&mut self) -> Vec<ToolCall> {
        std::mem::take(&mut self.tool_calls)
    }

    fn process(&mut self, sink: &mut dyn EventSink) -> Flow {
        loop {
            let step = match self.mode {
                Mode::Text => self.step_text(sink),
                Mode::Think(close) => self.step_think(close, sink),
                Mode::FenceHeader => self.step_fence_header(),
                Mode::Code => self.step_code(sink),
                Mode::Markup { close, scanned } => self.step_markup(close, scanned, sink),
                Mode::Json(scan) => self.step_json(scan, sink),
            };
            match step {
                Step::Again => continue,
                Step::Wait => return Flow::Continue,
                Step::Cancel => return Flow::Cancel,
            }
        }
    }

    /// Emits `pending[..at]` as content and drops `pending[..drop]`.
    fn emit_prefix(&mut self, at: usize, drop: usize, sink: &mut dyn EventSink) -> Flow {
        let head: String = self.pending.drain(..drop).collect();
        self.show(&head[..at], sink)
    }

    fn step_text(&mut self, sink: &mut dyn EventSink) -> Step {
        let scan = scan_text(&self.pending, self.line_start);
        let (flow, step) = match scan {
            Scan::Clear => (
                self.emit_prefix(self.pending.len(), self.pending.len(), sink),
                Step::Wait,
            ),
            Scan::Hold(at) => (self.emit_prefix(at, at, sink), Step::Wait),
            Scan::Json(at) => {
                self.mode = Mode::Json(JsonScan::default());
                (self.emit_prefix(at, at, sink), Step::Again)
            }
            Scan::Opener(at, opener) => (self.open(at, opener, sink), Step::Again),
        };
        if flow == Flow::Cancel {
            return Step::Cancel;
        }
        step
    }

    fn open(&mut self, at: usize, opener: Opener, sink: &mut dyn EventSink) -> Flow {
        let tag_len = OPENERS
            .iter()
            .find(|(_, o)| *o == opener)
            .map_or(0, |(tag, _)| tag.len());
        match opener {
            Opener::Think(close) => {
                self.mode = Mode::Think(close);
                self.emit_prefix(at, at + tag_len, sink)
            }
            Opener::Fence => {
                self.mode = Mode::FenceHeader;
                let flow = self.emit_prefix(at, at + tag_len, sink);
                self.visible.push_str(FENCE);
                flow
            }
            Opener::Markup(close) => {
                self.mode = Mode::Markup {
                    close,
                    scanned: tag_len,
                };
                self.emit_prefix(at, at, sink)
            }
        }
    }

    fn step_think(&mut self, close: &'static str, sink: &mut dyn EventSink) -> Step {
        let (emit, drop, done) = match self.pending.find(close) {
            Some(at) => (at, at + close.len(), true),
            None => {
                let keep = partial_suffix(&self.pending, close);
                (self.pending.len() - keep, self.pending.len() - keep, false)
            }
        };
        let head: String = self.pending.drain(..drop).collect();
        if done {
            self.mode = Mode::Text;
        }
        match self.think(&head[..emit], sink) {
            Flow::Cancel => Step::Cancel,
            Flow::Continue if done => Step::Again,
            Flow::Continue => Step::Wait,
        }
    }

    fn step_fence_header(&mut self) -> Step {
        let Some(newline) = self.pending.find('\n') else {
            return Step::Wait;
        };
        let header: String = self.pending.drain(..=newline).collect();
        self.visible.push_str(&header);
        self.mode = Mode::Code;
        self.line_start = true;
        Step::Again
    }

    fn step_code(&mut self, sink: &mut dyn EventSink) -> Step {
        let (emit, closed) = match scan_fence(&self.pending, self.line_start) {
            Scan::Opener(at, _) => (at, true),
            Scan::Hold(at) => (at, false),
            _ => (self.pending.len(), false),
        };
        let head: String = self.pending.drain(..emit).collect();
        if self.code(&head, sink) == Flow::Cancel {
            return Step::Cancel;
        }
        if !closed {
            return Step::Wait;
        }
        self.pending.drain(..FENCE.len());
        self.visible.push_str(FENCE);
        self.line_start = false;
        self.mode = Mode::Text;
        Step::Again
    }

    fn step_markup(
        &mut self,
        close: &'static str,
        scanned: usize,
        sink: &mut dyn EventSink,
    ) -> Step {
        let mut from = scanned.saturating_sub(close.len()).min(self.pending.len());
        while !self.pending.is_char_boundary(from) {
            from -= 1;
        }
        let Some(found) = self.pending[from..].find(close) else {
            if self.pending.len() <= MAX_HELD_BYTES {
                self.mode = Mode::Markup {
                    close,
                    scanned: self.pending.len(),
                };
                return Step::Wait;
            }
            self.mode = Mode::Text;
            let held = std::mem::take(&mut self.pending);
            return flow_step(self.show(&held, sink));
        };
        let end = from + found + close.len();
        let markup: String = self.pending.drain(..end).collect();
        self.mode = Mode::Text;
        flow_step(self.resolve_markup(&markup, sink))
    }

    fn step_json(&mut self, mut scan: JsonScan, sink: &mut dyn EventSink) -> Step {
        match scan.advance(self.pending.as_bytes()) {
            JsonProgress::Incomplete if scan.pos <= MAX_HELD_BYTES => {
                self.mode = Mode::Json(scan);
                Step::Wait
            }
            JsonProgress::Complete(end) => {
                self.mode = Mode::Text;
                let candidate: String = self.pending.drain(..end).collect();
                match textcalls::parse_json_call(&candidate, &self.tool_names) {
                    Some(call) => {
                        self.tool_calls.push(call);
                        Step::Again
                    }
                    None => flow_step(self.show(&candidate, sink)),
                }
            }
            // Not a call after all: show the brace and look at the rest as text.
            _ => {
                self.mode = Mode::Text;
                flow_step(self.emit_prefix(1, 1, sink))
            }
        }
    }

    fn resolve_markup(&mut self, markup: &str, sink: &mut dyn EventSink) -> Flow {
        match textcalls::parse_markup(markup, &self.tool_names) {
            Some(calls) => {
                self.tool_calls.extend(calls);
                Flow::Continue
            }
            None => {
                // Tool-call markup that names no offered tool (or does not parse) is a
                // failed call the user should hear about, not silently plain text.
                let notice = "the model wrote a tool call that names no available tool \
                              or could not be parsed; it is shown as text";
                if sink.emit(Event::System(notice.into())) == Flow::Cancel {
                    return Flow::Cancel;
                }
                self.show(markup, sink)
            }
        }
    }

    fn show(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        if text.is_empty() {
            return Flow::Continue;
        }
        self.visible.push_str(text);
        self.line_start = ends_at_line_start(text, self.line_start);
        sink.emit(Event::Content(text.to_string()))
    }

    fn think(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        if text.is_empty() {
            return Flow::Continue;
        }
        self.thinking.push_str(text);
        sink.emit(Event::Thinking(text.to_string()))
    }

    fn code(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        if text.is_empty() {
            return Flow::Continue;
        }
        self.visible.push_str(text);
        self.line_start = ends_at_line_start(text, self.line_start);
        sink.emit(Event::CodeBlock(text.to_string()))
    }
}

fn flow_step(flow: Flow) -> Step {
    match flow {
        Flow::Continue => Step::Again,
        Flow::Cancel => Step::Cancel,
    }
}

/// Whether the character after `text` would start a line.
fn ends_at_line_start(text: &str, before: bool) -> bool {
    let tail = match text.rfind('\n') {
        Some(newline) => &text[newline + 1..],
        None if before => text,
        None => return false,
    };
    tail.chars().all(char::is_whitespace)
}

fn update_line_start(line_start: bool, c: char) -> bool {
    if c == '\n' {
        true
    } else {
        line_start && c.is_whitespace()
    }
}

/// Finds the first opener (fences only at a line start), possible JSON call,
/// or possible partial tag at the end of `text`.
fn scan_text(text: &str, mut line_start: bool) -> Scan {
    for (i, c) in text.char_indices() {
        if c == '<' || c == '`' {
            let rest = &text[i..];
            let eligible = |tag: &&str| *tag != FENCE || line_start;
            if let Some((_, opener)) = OPENERS
                .iter()
                .filter(|(t, _)| eligible(t))
                .find(|(t, _)| rest.starts_with(t))
            {
                return Scan::Opener(i, *opener);
            }
            if OPENERS
                .iter()
                .filter(|(t, _)| eligible(t))
                .any(|(t, _)| t.starts_with(rest))
            {
                return Scan::Hold(i);
            }
        }
        if c == '{' && line_start {
            return Scan::Json(i);
        }
        line_start = update_line_start(line_start, c);
    }
    Scan::Clear
}

/// Finds a closing fence at a line start inside code.
fn scan_fence(text: &str, mut line_start: bool) -> Scan {
    for (i, c) in text.char_indices() {
        if c == '`' && line_start {
            let rest = &text[i..];
            if rest.starts_with(FENCE) {
                return Scan::Opener(i, Opener::Fence);
            }
            if FENCE.starts_with(rest) {
                return Scan::Hold(i);
            }
        }
        line_start = update_line_start(line_start, c);
    }
    Scan::Clear
}

/// The length of the longest proper prefix of `tag` that ends `text`.
fn partial_suffix(text: &str, tag: &str) -> usize {
    (1..tag.len())
        .rev()
        .find(|&n| {
            text.len() >= n && text.is_char_boundary(text.len() - n) && text.ends_with(&tag[..n])
        })
        .unwrap_or(0)
}

impl JsonScan {
    /// Scans on from `self.pos`; `bytes[0]` is the opening brace. Structural
    /// characters are ASCII, so scanning bytes never misreads UTF-8.
    fn advance(&mut self, bytes: &[u8]) -> JsonProgress {
        while self.pos < bytes.len() {
            let b = bytes[self.pos];
            self.pos += 1;
            if self.depth > 0 && !self.keyed {
                if b.is_ascii_whitespace() {
                    continue;
                }
                if b != b'"' {
                    return JsonProgress::NotACall;
                }
                self.keyed = true;
            }
            if self.in_string {
                self.scan_string_byte(b);
                continue;
            }
            match b {
                b'"' => self.in_string = true,
                b'{' | b'[' => self.depth += 1,
                b'}' | b']' => {
                    self.depth = self.depth.saturating_sub(1);
                    if self.depth == 0 {
                        return JsonProgress::Complete(self.pos);
                    }
                }
                _ => {}
            }
        }
        JsonProgress::Incomplete
    }

    fn scan_string_byte(&mut self, b: u8) {
        if self.escaped {
            self.escaped = false;
        } else if b == b'\\' {
            self.escaped = true;
        } else if b == b'"' {
            self.in_string = false;
        }
    }
}

/// Everything the filter produced, in one piece (for tests).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq)]
pub struct FilterOutput {
    pub content: String,
    pub thinking: String,
    pub tool_calls: Vec<ToolCall>,
}

#[cfg(test)]
impl OutputFilter {
    pub fn into_output(self) -> FilterOutput {
        FilterOutput {
            content: self.visible,
            thinking: self.thinking,
            tool_calls: self.tool_calls,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn names() -> Vec<String> {
        ["read", "bash"].map(String::from).to_vec()
    }

    /// Adjacent events of the same text kind merged, since chunking changes granularity.
    fn coalesce(events: Vec<Event>) -> Vec<Event> {
        let mut out: Vec<Event> = Vec::new();
        for event in events {
            match (out.last_mut(), event) {
                (Some(Event::Content(a)), Event::Content(b))
                | (Some(Event::Thinking(a)), Event::Thinking(b))
                | (Some(Event::CodeBlock(a)), Event::CodeBlock(b)) => a.push_str(&b),
                (_, event) => out.push(event),
            }
        }
        out
    }

    fn run(chunks: &[&str]) -> (Vec<Event>, FilterOutput) {
        let mut filter = OutputFilter::new(names());
        let mut events = Vec::new();
        for chunk in chunks {
            assert_eq!(filter.push(chunk, &mut events), Flow::Continue);
        }
        assert_eq!(filter.finish(&mut events), Flow::Continue);
        (coalesce(events), filter.into_output())
    }

    fn c(text: &str) -> Event {
        Event::Content(text.into())
    }
    fn t(text: &str) -> Event {
        Event::Thinking(text.into())
    }
    fn code(text: &str) -> Event {
        Event::CodeBlock(text.into())
    }

    /// Checks the events and calls, then that every way of chunking the input
    /// (one split at every char boundary, every byte offset rounded to a char
    /// boundary, one char at a time) gives the same result.
    fn check(input: &str, expected: &[Event], calls: &[(&str, Value)]) {
        let whole = run(&[input]);
        assert_eq!(whole.0, expected, "events for {input:?}");
        let got_calls: Vec<(String, Value)> = whole
            .1
            .tool_calls
            .iter()
            .map(|c| (c.name.clone(), c.arguments.clone()))
            .collect();
        let want_calls: Vec<(String, Value)> = calls
            .iter()
            .map(|(n, a)| (n.to_string(), a.clone()))
            .collect();
        assert_eq!(got_calls, want_calls, "calls for {input:?}");
        for byte in 0..=input.len() {
            let mut at = byte;
            while !input.is_char_boundary(at) {
                at -= 1;
            }
            assert_eq!(
                run(&[&input[..at], &input[at..]]),
                whole,
                "{input:?} split at {at}"
            );
        }
        let chars: Vec<String> = input.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(&chars), whole, "{input:?} char by char");
    }

    #[test]
    fn plain_text_passes_through() {
        check("héllo ✓ 日本 🦀", &[c("héllo ✓ 日本 🦀")], &[]);
        check("a < b and x <thin y", &[c("a < b and x <thin y")], &[]);
        check("", &[], &[]);
    }

    #[test]
    fn think_blocks_become_thinking() {
        check(
            "<think>plan ✓</think>Answer",
            &[t("plan ✓"), c("Answer")],
            &[],
        );
        check("<thinking>a</thinking>b", &[t("a"), c("b")], &[]);
        check("<think>unclosed 🦀", &[t("unclosed 🦀")], &[]);
        check(
            "<think><tool_call>{\"name\":\"read\"}</tool_call></think>",
            &[t("<tool_call>{\"name\":\"read\"}</tool_call>")],
            &[],
        );
    }

    #[test]
    fn code_fences_become_code_blocks() {
        check(
            "Look:\n```rust\nfn main() {}\n```\nDone",
            &[c("Look:\n"), code("fn main() {}\n"), c("\nDone")],
            &[],
        );
        check(
            "inline ```x``` stays text",
            &[c("inline ```x``` stays text")],
            &[],
        );
        check(
            "```\n<tool_call>{\"name\":\"read\"}</tool_call>\n```",
            &[code("<tool_call>{\"name\":\"read\"}</tool_call>\n")],
            &[],
        );
        check("```py\nprint('日本')", &[code("print('日本')")], &[]);
    }

    #[test]
    fn markup_tool_calls_are_collected_not_shown() {
        check(
            "Reading.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"日本.txt\"}}\n</tool_call>",
            &[c("Reading.\n")],
            &[("read", json!({"path":"日本.txt"}))],
        );
        check(
            "<tool_call>\n<function=bash>\n<parameter=command>\nls\n</parameter>\n</function>\n</tool_call>after",
            &[c("after")],
            &[("bash", json!({"command":"ls"}))],
        );
        check(
            "<function_calls><invoke name=\"read\"><parameter name=\"path\">a</parameter></invoke></function_calls>",
            &[],
            &[("read", json!({"path":"a"}))],
        );
        check(
            "<tool>{\"name\":\"bash\"}</tool>",
            &[],
            &[("bash", json!({}))],
        );
        // Generation often stops on the closing tag.
        check(
            "<tool_call>{\"name\":\"read\",\"arguments\":{}}",
            &[],
            &[("read", json!({}))],
        );
    }

    #[test]
    fn unknown_or_broken_markup_is_shown_as_text() {
        let warned = |text: &str| {
            vec![
                Event::System(
                    "the model wrote a tool call that names no available tool or could not \
                     be parsed; it is shown as text"
                        .into(),
                ),
                c(text),
            ]
        };
        let unknown = "<tool_call>{\"name\":\"rm\"}</tool_call>";
        check(unknown, &warned(unknown), &[]);
        let broken = "<tool_call>not json</tool_call>";
        check(broken, &warned(broken), &[]);
    }

    #[test]
    fn bare_json_calls_at_line_start() {
        check(
            "Sure:\n{\"name\": \"bash\", \"parameters\": {\"command\": \"echo }\"}}",
            &[c("Sure:\n")],
            &[("bash", json!({"command":"echo }"}))],
        );
        check("{not json} text", &[c("{not json} text")], &[]);
        check("x {\"name\":\"bash\"}", &[c("x {\"name\":\"bash\"}")], &[]);
        check("{\"name\":\"nope\"} y", &[c("{\"name\":\"nope\"} y")], &[]);
        check("{\"name\":\"bash\"", &[c("{\"name\":\"bash\"")], &[]);
    }

    #[test]
    fn visible_text_keeps_fences_and_drops_calls_and_thinking() {
        let (_, out) =
            run(&["<think>hm</think>Hi\n```sh\nls\n```\n<tool>{\"name\":\"bash\"}</tool>"]);
        assert_eq!(out.content, "Hi\n```sh\nls\n```\n");
        assert_eq!(out.thinking, "hm");
        assert_eq!(out.tool_calls[0].id, "call_0");
    }

    #[test]
    fn cancel_stops_at_once() {
        let mut filter = OutputFilter::new(names());
        let mut count = 0;
        let mut sink = |_event: Event| {
            count += 1;
            Flow::Cancel
        };
        assert_eq!(filter.push("<think>a</think>b", &mut sink), Flow::Cancel);
        assert_eq!(count, 1);
    }
}

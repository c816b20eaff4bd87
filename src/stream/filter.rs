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

use super::format::{
    self, HarmonyMessage, LearntCall, Marker, Opener, PromptEnd, FENCE, MARKERS, RECIPIENT,
    RESPONSE_CLOSE, RESPONSE_OPEN,
};
use super::textcalls::{self, Offered};
use super::toolcall::ensure_ids;
use crate::core::{Event, EventSink, Flow, ToolCall, ToolSpec};
use serde_json::Value;

/// Held tool-call text beyond this size is shown as text instead.
const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;

const FENCE_MARKER: Marker = Marker {
    tag: FENCE,
    opener: Opener::Fence,
    line_start: true,
    ends_reasoning: false,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Text,
    Think(&'static [&'static str]),
    /// After an opening fence, until the end of the language-tag line.
    FenceHeader,
    Code,
    /// Holding tool-call markup (it starts `pending`) until `close`; `scanned`
    /// bytes were already searched.
    Markup {
        close: &'static [&'static str],
        scanned: usize,
    },
    /// Holding a harmony header (it starts `pending`) until `<|message|>`.
    Header,
    /// Holding a Functionary recipient line until its newline.
    Recipient,
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
    /// A marker starts at this byte.
    Opener(usize, Marker),
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
    tools: Vec<Offered>,
    mode: Mode,
    /// Text received but not yet emitted.
    pending: String,
    /// Whether the next character starts a line (only whitespace since the last newline).
    line_start: bool,
    /// The tool a harmony header or recipient line addressed: the held markup is
    /// its arguments.
    recipient: Option<String>,
    /// Inside a reasoning block the prompt opened: a tool call ends it (models
    /// that think before calling may never write the closing marker).
    prompt_think: bool,
    /// Shown text ended inside inline code (see [`Position`]).
    inline_code: bool,
    /// Nothing of the reply was read yet (see `step_text`).
    reply_start: bool,
    /// A call at a line start in a block the prompt opened is held (it starts
    /// `pending`) until the block closes or the text ends; the bytes searched.
    think_held: Option<usize>,
    /// Whether the next reasoning character starts a line (a block's start does).
    think_line_start: bool,
    /// The prompt ended with Functionary's `>>>`: each `>>>` starts a recipient line.
    recipients: bool,
    /// The call syntax of a template whose markers the table does not know.
    learnt: Option<LearntCall>,
    /// A reasoning block just closed: a `<response>` wrapper may follow.
    after_think: bool,
    /// The answer is wrapped in `<response>`: its `</response>` is dropped.
    in_response: bool,
    visible: String,
    thinking: String,
    tool_calls: Vec<ToolCall>,
    /// The text ended inside the last of `tool_calls` (see [`OutputFilter::finish_as`]).
    cut_call: bool,
}

/// The notice for a call to `name` the model did not finish.
pub fn cut_notice(name: &str) -> String {
    format!("the call to {name} was cut off before the model finished it (at the length limit or a stop); it was not run")
}

/// How a reply's text came to its end, for [`OutputFilter::finish_as`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TextEnd {
    /// The model ended it: its end-of-turn token, or the provider's own end of
    /// the stream.
    Model,
    /// It was cut: the length limit, a stop string of the request, a cancel.
    Cut,
}

impl OutputFilter {
    /// A filter that recognises calls to these tools only.
    pub fn new(tool_names: Vec<String>) -> Self {
        OutputFilter::offered(Offered::names(tool_names))
    }

    /// A filter for calls to `tools`, whose schemas type the values of formats that
    /// write every value as text.
    pub fn for_tools(tools: &[ToolSpec]) -> Self {
        let offered = |t: &ToolSpec| Offered {
            name: t.name.clone(),
            parameters: Some(t.parameters.clone()),
        };
        OutputFilter::offered(tools.iter().map(offered).collect())
    }

    fn offered(tools: Vec<Offered>) -> Self {
        OutputFilter {
            tools,
            mode: Mode::Text,
            pending: String::new(),
            line_start: true,
            recipient: None,
            prompt_think: false,
            think_held: None,
            think_line_start: true,
            reply_start: true,
            inline_code: false,
            recipients: false,
            learnt: None,
            after_think: false,
            in_response: false,
            visible: String::new(),
            thinking: String::new(),
            tool_calls: Vec::new(),
            cut_call: false,
        }
    }

    /// Starts where the prompt left off ([`format::prompt_end`]): inside a reasoning
    /// block, before a harmony header, or before a recipient line. Call before the
    /// first push.
    pub fn after_prompt(&mut self, end: PromptEnd) {
        if self.mode != Mode::Text || !self.pending.is_empty() {
            return;
        }
        self.mode = match end {
            PromptEnd::Reasoning(close) => {
                self.prompt_think = true;
                self.think_line_start = true;
                Mode::Think(close)
            }
            PromptEnd::Header => Mode::Header,
            PromptEnd::Recipient => {
                self.recipients = true;
                Mode::Recipient
            }
        };
    }

    /// Reads calls in a syntax learnt from the template ([`format::CallSyntax::learnt`]).
    pub fn learn(&mut self, learnt: LearntCall) {
        self.learnt = Some(learnt);
    }

    /// Feeds model text; returns `Cancel` as soon as the sink asks to stop.
    pub fn push(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        self.pending.push_str(text);
        self.process(sink)
    }

    /// Ends text the model ended itself: whatever is held is resolved (a call
    /// whose format has no closing tag, or whose closing tag is the end of the
    /// turn, ends with the text) and emitted.
    pub fn finish(&mut self, sink: &mut dyn EventSink) -> Flow {
        self.finish_as(TextEnd::Model, sink)
    }

    /// Ends the text as `end` says. Cut text (the length limit, a stop string, a
    /// cancel) holding call markup ends inside a call the model did not finish:
    /// that call never runs. It is kept, its arguments as far as the model wrote
    /// them (never closed into a whole value), for an API client to see with
    /// finish reason `length`, and a notice names it.
    pub fn finish_as(&mut self, end: TextEnd, sink: &mut dyn EventSink) -> Flow {
        if self.process(sink) == Flow::Cancel {
            return Flow::Cancel;
        }
        let rest = std::mem::take(&mut self.pending);
        let mode = std::mem::replace(&mut self.mode, Mode::Text);
        let flow = match mode {
            Mode::Text | Mode::Json(_) | Mode::Header | Mode::Recipient => self.show(&rest, sink),
            // A call held in a block the prompt opened, and the block never closed:
            // the model acted. Read the rest as text from the call on.
            Mode::Think(_) if self.think_held.take().is_some() => {
                self.prompt_think = false;
                self.after_think = true;
                self.pending = rest;
                return self.finish_as(end, sink);
            }
            Mode::Think(_) => self.think(&rest, sink),
            Mode::FenceHeader => {
                self.visible.push_str(&rest);
                Flow::Continue
            }
            Mode::Code => self.code(&rest, sink),
            Mode::Markup { .. } if end == TextEnd::Cut => self.cut_markup(&rest, sink),
            Mode::Markup { .. } => self.resolve_markup(&rest, sink),
        };
        ensure_ids(&mut self.tool_calls);
        flow
    }

    /// Whether the text ended inside a call (see [`OutputFilter::finish_as`]): the
    /// last of the tool calls is that unfinished one, and no call may run.
    pub fn cut_call(&self) -> bool {
        self.cut_call
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
                Mode::Header => self.step_header(sink),
                Mode::Recipient => self.step_recipient(),
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
        if self.reply_start {
            // A reply that starts by closing a reasoning block its template left out
            // (`</think>` after a prompt that closed one, MiniMax M3's `</mm:think>`):
            // the empty block's closer is not text.
            let rest = self.pending.trim_start();
            let closers = || format::reasoning_closers();
            if rest.is_empty() || closers().any(|c| c.len() > rest.len() && c.starts_with(rest)) {
                return Step::Wait;
            }
            self.reply_start = false;
            if let Some(closer) = closers().find(|c| rest.starts_with(c)) {
                let at = self.pending.len() - rest.len();
                self.pending.drain(..at + closer.len());
                self.after_think = true;
            }
        }
        if self.after_think {
            let rest = self.pending.trim_start();
            if rest.len() < RESPONSE_OPEN.len() && RESPONSE_OPEN.starts_with(rest) {
                return Step::Wait;
            }
            self.after_think = false;
            if rest.starts_with(RESPONSE_OPEN) {
                let at = self.pending.len() - rest.len();
                self.in_response = true;
                self.pending.drain(..at + RESPONSE_OPEN.len());
            }
        }
        let extra = [
            self.recipients.then_some(RECIPIENT),
            self.in_response.then_some(RESPONSE_CLOSE),
            self.learnt.map(|l| l.opener()),
        ];
        let at = Position {
            line_start: self.line_start,
            inline_code: self.inline_code,
        };
        let scan = scan_text(&self.pending, at, &extra);
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
            Scan::Opener(at, marker) => (self.open(at, marker, sink), Step::Again),
        };
        if flow == Flow::Cancel {
            return Step::Cancel;
        }
        step
    }

    fn open(&mut self, at: usize, marker: Marker, sink: &mut dyn EventSink) -> Flow {
        let tag_len = marker.tag.len();
        match marker.opener {
            Opener::Think(close) => {
                self.mode = Mode::Think(close);
                self.think_line_start = true;
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
            Opener::Header => {
                self.mode = Mode::Header;
                self.emit_prefix(at, at, sink)
            }
            Opener::Drop => self.emit_prefix(at, at + tag_len, sink),
            Opener::Recipient => {
                self.mode = Mode::Recipient;
                self.emit_prefix(at, at + tag_len, sink)
            }
        }
    }

    fn step_think(&mut self, close: &'static [&'static str], sink: &mut dyn EventSink) -> Step {
        // Past a held call, only the bytes not yet searched (less a closer's length).
        let longest = close.iter().map(|c| c.len()).max().unwrap_or(0);
        let mut from = self.think_held.map_or(0, |scanned| {
            scanned.saturating_sub(longest).min(self.pending.len())
        });
        while !self.pending.is_char_boundary(from) {
            from -= 1;
        }
        let closed = find_any(&self.pending, from, close);
        // Markup inside reasoning is reasoning, except a call of a family that
        // writes its calls there (`ending_call`), or one a model that never closes
        // its block acts with (`acting_call`: held until the block closes, which
        // makes it reasoning, or the text ends, which makes it a call).
        let ending =
            ending_call(&self.pending).filter(|&call| closed.is_none_or(|(at, _)| call < at));
        let (emit, drop, done) = match (ending, closed) {
            (Some(at), _) => (at, at, true),
            (None, Some((at, len))) => (at, at + len, true),
            (None, None) if self.think_held.is_some() => {
                if self.pending.len() <= MAX_HELD_BYTES {
                    self.think_held = Some(self.pending.len());
                    return Step::Wait;
                }
                // Too long to be held: reasoning, as it stands.
                self.think_held = None;
                (self.pending.len(), self.pending.len(), false)
            }
            (None, None) => {
                let acting = self
                    .prompt_think
                    .then(|| acting_call(&self.pending, self.think_line_start))
                    .flatten();
                if let Some(at) = acting {
                    let head: String = self.pending.drain(..at).collect();
                    self.think_held = Some(self.pending.len());
                    return match self.think(&head, sink) {
                        Flow::Cancel => Step::Cancel,
                        Flow::Continue => Step::Wait,
                    };
                }
                let calls = MARKERS
                    .iter()
                    .filter(|m| m.ends_reasoning || (self.prompt_think && is_call(m)));
                let keep = close
                    .iter()
                    .copied()
                    .chain(calls.map(|m| m.tag))
                    .map(|c| partial_suffix(&self.pending, c))
                    .max()
                    .unwrap_or(0);
                (self.pending.len() - keep, self.pending.len() - keep, false)
            }
        };
        let head: String = self.pending.drain(..drop).collect();
        if done {
            self.mode = Mode::Text;
            self.prompt_think = false;
            self.think_held = None;
            self.after_think = true;
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
        close: &'static [&'static str],
        scanned: usize,
        sink: &mut dyn EventSink,
    ) -> Step {
        let longest = close.iter().map(|c| c.len()).max().unwrap_or(0);
        let mut from = scanned.saturating_sub(longest).min(self.pending.len());
        while !self.pending.is_char_boundary(from) {
            from -= 1;
        }
        let Some((at, len)) = find_any(&self.pending, from, close) else {
            if self.pending.len() <= MAX_HELD_BYTES {
                self.mode = Mode::Markup {
                    close,
                    scanned: self.pending.len(),
                };
                return Step::Wait;
            }
            self.mode = Mode::Text;
            self.recipient = None;
            let held = std::mem::take(&mut self.pending);
            return flow_step(self.show(&held, sink));
        };
        // The next recipient marker starts the next message: it stays.
        let end = if self.pending[at..].starts_with(RECIPIENT.tag) {
            at
        } else {
            at + len
        };
        let markup: String = self.pending.drain(..end).collect();
        self.mode = Mode::Text;
        flow_step(self.resolve_markup(&markup, sink))
    }

    /// A harmony header: what follows `<|message|>` is reasoning, answer, or a call.
    fn step_header(&mut self, sink: &mut dyn EventSink) -> Step {
        let Some(at) = self.pending.find(format::HARMONY_MESSAGE) else {
            if self.pending.len() <= format::MAX_HEADER_BYTES {
                return Step::Wait;
            }
            // Too long for a header: it was text after all.
            self.mode = Mode::Text;
            return flow_step(self.emit_prefix(1, 1, sink));
        };
        let header: String = self
            .pending
            .drain(..at + format::HARMONY_MESSAGE.len())
            .collect();
        self.mode = match format::harmony_header(&header[..at]) {
            HarmonyMessage::Call(name) => {
                self.recipient = Some(name);
                Mode::Markup {
                    close: format::HARMONY_END,
                    scanned: 0,
                }
            }
            HarmonyMessage::Reasoning => {
                self.think_line_start = true;
                Mode::Think(format::HARMONY_END)
            }
            HarmonyMessage::Answer => Mode::Text,
        };
        Step::Again
    }

    /// A Functionary recipient line: `all` introduces text, a tool's name its arguments.
    fn step_recipient(&mut self) -> Step {
        let Some(newline) = self.pending.find('\n') else {
            return Step::Wait;
        };
        let line: String = self.pending.drain(..=newline).collect();
        self.mode = match line.trim() {
            "all" => Mode::Text,
            name => {
                self.recipient = Some(name.to_string());
                Mode::Markup {
                    close: &[RECIPIENT.tag],
                    scanned: 0,
                }
            }
        };
        self.line_start = true;
        Step::Again
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
                match textcalls::parse_json_call(&candidate, &self.tools) {
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

    /// The calls held `markup` writes, read as if it were whole.
    fn parse_held(&mut self, markup: &str) -> Option<Vec<ToolCall>> {
        let learnt = self
            .learnt
            .filter(|l| markup.trim_start().starts_with(l.marker));
        match (self.recipient.take(), learnt) {
            (Some(name), _) => textcalls::parse_addressed(&name, markup, &self.tools),
            (None, Some(learnt)) => learnt
                .read(markup)
                .and_then(|calls| textcalls::named_calls(calls, &self.tools)),
            (None, None) => textcalls::parse_markup(markup, &self.tools),
        }
    }

    /// Markup the text ended inside: a call the model did not finish (see
    /// [`OutputFilter::finish_as`]). Its arguments stay as far as written: the
    /// value read as if whole, without the closing the model never wrote.
    fn cut_markup(&mut self, markup: &str, sink: &mut dyn EventSink) -> Flow {
        let recipient = self.recipient.clone();
        let calls: Vec<ToolCall> = match self.parse_held(markup) {
            Some(calls) => calls
                .into_iter()
                .map(|call| ToolCall {
                    arguments: Value::String(textcalls::unclosed(&call.arguments)),
                    ..call
                })
                .collect(),
            // JSON cut short does not parse: its name and its text as written.
            None => match recipient {
                Some(name) => textcalls::cut_addressed(&name, markup, &self.tools),
                None => textcalls::cut_json_call(markup, &self.tools),
            }
            .into_iter()
            .collect(),
        };
        let notice = cut_notice(calls.last().map_or("a tool", |c| c.name.as_str()));
        self.cut_call = true;
        self.tool_calls.extend(calls);
        sink.emit(Event::System(notice))
    }

    fn resolve_markup(&mut self, markup: &str, sink: &mut dyn EventSink) -> Flow {
        let parsed = self.parse_held(markup);
        match parsed {
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
        let at = Position {
            line_start: self.line_start,
            inline_code: self.inline_code,
        };
        self.inline_code = at.after_text(text).inline_code;
        sink.emit(Event::Content(text.to_string()))
    }

    fn think(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        if text.is_empty() {
            return Flow::Continue;
        }
        self.think_line_start = ends_at_line_start(text, self.think_line_start);
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

fn is_call(marker: &Marker) -> bool {
    matches!(marker.opener, Opener::Markup(_))
}

/// Where the first call marker of a family that writes its calls inside its
/// reasoning ([`Marker::ends_reasoning`], Kimi's) starts in reasoning `text`: it
/// ends the block wherever it stands.
fn ending_call(text: &str) -> Option<usize> {
    let ends = MARKERS.iter().filter(|m| m.ends_reasoning);
    ends.filter_map(|m| text.find(m.tag)).min()
}

/// Where, in a block the prompt opened, the first call marker at the start of a
/// line starts (`line_start`: the text follows a line's start): a model that never
/// closes its reasoning starts to act there (Qwen3.5), if the block does not close
/// after it. A marker inside a sentence is reasoning text.
fn acting_call(text: &str, line_start: bool) -> Option<usize> {
    let at_line_start = |at: usize| {
        let before = &text[..at];
        let line = match before.rfind('\n') {
            Some(newline) => &before[newline + 1..],
            None if line_start => before,
            None => return false,
        };
        line.chars().all(char::is_whitespace)
    };
    MARKERS
        .iter()
        .filter(|m| is_call(m))
        .flat_map(|m| {
            let found = text.match_indices(m.tag).map(|(at, _)| at);
            found.filter(|&at| at_line_start(at)).take(1)
        })
        .min()
}

/// The first of `tags` found in `text` from byte `from`: its start and length.
fn find_any(text: &str, from: usize, tags: &[&str]) -> Option<(usize, usize)> {
    tags.iter()
        .filter_map(|tag| text[from..].find(tag).map(|at| (from + at, tag.len())))
        .min()
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

/// Finds the first marker (some only at a line start), possible JSON call, or
/// possible partial marker at the end of `text`. A marker inside inline code (after
/// an unclosed backtick on the line) is text: prose quoting a format.
fn scan_text(text: &str, mut at: Position, extra: &[Option<Marker>]) -> Scan {
    let markers = || MARKERS.iter().chain(extra.iter().flatten());
    let mut previous = None;
    for (i, c) in text.char_indices() {
        if markers().any(|m| m.tag.starts_with(c)) {
            let rest = &text[i..];
            let eligible = |m: &&Marker| (!m.line_start || at.line_start) && !at.inline_code;
            if let Some(marker) = markers().filter(eligible).find(|m| rest.starts_with(m.tag)) {
                return Scan::Opener(i, *marker);
            }
            if markers().filter(eligible).any(|m| m.tag.starts_with(rest)) {
                return Scan::Hold(i);
            }
        }
        if c == '{' && at.line_start {
            return Scan::Json(i);
        }
        at = at.after(c, previous);
        previous = Some(c);
    }
    Scan::Clear
}

/// Where shown text stands: at the start of a line (only whitespace since the
/// last newline), inside inline code (an odd number of backtick runs since it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    line_start: bool,
    inline_code: bool,
}

impl Position {
    /// The position after `c`, which follows `previous`.
    fn after(self, c: char, previous: Option<char>) -> Position {
        Position {
            line_start: update_line_start(self.line_start, c),
            inline_code: match c {
                '\n' => false,
                '`' if previous != Some('`') => !self.inline_code,
                _ => self.inline_code,
            },
        }
    }

    /// The position after `text`.
    fn after_text(self, text: &str) -> Position {
        let mut at = self;
        let mut previous = None;
        for c in text.chars() {
            at = at.after(c, previous);
            previous = Some(c);
        }
        at
    }
}

/// Finds a closing fence at a line start inside code.
fn scan_fence(text: &str, mut line_start: bool) -> Scan {
    for (i, c) in text.char_indices() {
        if c == '`' && line_start {
            let rest = &text[i..];
            if rest.starts_with(FENCE) {
                return Scan::Opener(i, FENCE_MARKER);
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
            tag.is_char_boundary(n)
                && text.len() >= n
                && text.is_char_boundary(text.len() - n)
                && text.ends_with(&tag[..n])
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

    /// Markup inside reasoning is reasoning: a call a model writes while thinking
    /// never runs, and the block's end is still found after it, whether the model
    /// opened the block or the prompt did (there a call at the start of a line that
    /// the block never closes after is the model acting: Qwen3.5 never closes it).
    #[test]
    fn a_call_inside_reasoning_is_reasoning() {
        let call =
            r#"<tool_call>{"name": "bash", "arguments": {"command": "rm -rf ~"}}</tool_call>"#;
        let input = format!("<think>I could run {call} but no</think>Done.");
        check(
            &input,
            &[t(&format!("I could run {call} but no")), c("Done.")],
            &[],
        );
        // In a block the prompt opened; the same whole and split at every byte.
        let reasoning = |text: &str| {
            let read = |chunks: &[&str]| {
                let mut filter = OutputFilter::new(names());
                filter.after_prompt(PromptEnd::Reasoning(&["</think>"]));
                let mut events = Vec::new();
                for chunk in chunks {
                    filter.push(chunk, &mut events);
                }
                filter.finish(&mut events);
                filter.into_output()
            };
            let whole = read(&[text]);
            for at in (1..text.len()).filter(|&at| text.is_char_boundary(at)) {
                assert_eq!(read(&[&text[..at], &text[at..]]), whole, "{text:?} at {at}");
            }
            whole
        };
        let opened = reasoning(&format!("Maybe {call} later\n</think>\nNo call."));
        assert!(opened.tool_calls.is_empty(), "{opened:?}");
        assert!(opened.thinking.contains("rm -rf"));
        assert_eq!(opened.content.trim(), "No call.");
        // At the start of a line, then the block closes: still reasoning (DeepSeek
        // R1 distills think about calls that way).
        let considered = reasoning(&format!("I could run\n{call}\nbut no.\n</think>\nAnswer."));
        assert!(considered.tool_calls.is_empty(), "{considered:?}");
        assert!(considered.thinking.contains("but no."));
        assert_eq!(considered.content.trim(), "Answer.");
        // At the start of a line, and the block never closes: the model acts.
        let acting = reasoning(&format!("Need to look.\n{call}"));
        assert_eq!(acting.tool_calls.len(), 1);
        assert_eq!(acting.thinking.trim(), "Need to look.");
    }

    /// Prose that quotes a format runs nothing: a plain-word marker inside a
    /// sentence, or any call marker inside inline code, is text.
    #[test]
    fn a_quoted_marker_is_text() {
        let tools = vec!["get_time".to_string()];
        let read = |text: &str| {
            let mut filter = OutputFilter::new(tools.clone());
            let mut events = Vec::new();
            filter.push(text, &mut events);
            filter.finish(&mut events);
            filter.into_output()
        };
        for text in [
            "To call it, write `<function=get_time>` then the JSON {\"tz\": \"UTC\"} and stop.",
            "Write <function=get_time>{}</function> to ask the time; that is all.",
            "Hermes models write `<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>` here.",
        ] {
            let out = read(text);
            assert!(out.tool_calls.is_empty(), "{text}: {out:?}");
            assert_eq!(out.content, text);
        }
        // The same markup at the start of a line is a call.
        let out = read("<function=get_time>{}</function>");
        assert_eq!(out.tool_calls.len(), 1);
    }

    /// A reply cut inside a call (the length limit, a stop string) yields no
    /// runnable call: the call is kept with its arguments as far as written, the
    /// filter says it was cut, and a notice names it; split at every byte alike.
    /// Ended by the model itself, the same text is a call (formats whose call has
    /// no closing tag end it with the turn).
    #[test]
    fn a_call_the_text_was_cut_inside_is_never_a_call_to_run() {
        let cases: &[(&str, &str, &str)] = &[
            // Qwen3-Coder's XML parameters, cut inside a value.
            (
                "Checking.\n<tool_call>\n<function=bash>\n<parameter=command>\nrm -rf /tm",
                "bash",
                r#"{"command":"rm -rf /tm"#,
            ),
            // Hermes JSON, cut inside the arguments: they do not parse.
            (
                "<tool_call>\n{\"name\": \"bash\", \"arguments\": {\"command\": \"rm -rf /tm",
                "bash",
                r#"{"command": "rm -rf /tm"#,
            ),
        ];
        for &(text, name, arguments) in cases {
            for at in 0..=text.len() {
                if !text.is_char_boundary(at) {
                    continue;
                }
                let mut filter = OutputFilter::new(names());
                let mut events = Vec::new();
                for chunk in [&text[..at], &text[at..]] {
                    assert_eq!(filter.push(chunk, &mut events), Flow::Continue);
                }
                assert_eq!(filter.finish_as(TextEnd::Cut, &mut events), Flow::Continue);
                assert!(filter.cut_call(), "{text:?} split at {at}");
                let notices: Vec<&Event> = events
                    .iter()
                    .filter(|e| matches!(e, Event::System(_)))
                    .collect();
                assert!(
                    matches!(notices[..], [Event::System(n)] if n.contains(name) && n.contains("not run")),
                    "{text:?} split at {at}: {notices:?}"
                );
                let calls = filter.take_tool_calls();
                assert_eq!(calls.len(), 1, "{text:?} split at {at}");
                assert_eq!(calls[0].name, name);
                assert_eq!(
                    calls[0].arguments,
                    Value::String(arguments.into()),
                    "{text:?}"
                );
                assert!(
                    !filter.content().contains("rm -rf"),
                    "{:?}",
                    filter.content()
                );
            }
            // The model's own end: the XML call is whole as far as it goes (its
            // closing tags are the end of the turn); the cut JSON is no call.
            let mut filter = OutputFilter::new(names());
            let mut events = Vec::new();
            filter.push(text, &mut events);
            filter.finish_as(TextEnd::Model, &mut events);
            assert!(!filter.cut_call());
        }
        // Whole calls before the cut stay whole; text after them cut is no call.
        let mut filter = OutputFilter::new(names());
        let mut events = Vec::new();
        filter.push(
            "<tool_call>\n{\"name\": \"read\", \"arguments\": {}}\n</tool_call>\nand then",
            &mut events,
        );
        filter.finish_as(TextEnd::Cut, &mut events);
        assert!(!filter.cut_call());
        assert_eq!(filter.take_tool_calls().len(), 1);
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

    /// One row of `format_cases.json`: a family's model output and what it means.
    #[derive(serde::Deserialize)]
    struct FormatCase {
        family: String,
        source: String,
        #[serde(default)]
        opened_reasoning: bool,
        tools: Vec<String>,
        text: String,
        content: String,
        reasoning: String,
        calls: Vec<CaseCall>,
    }

    #[derive(serde::Deserialize)]
    struct CaseCall {
        name: String,
        arguments: Value,
    }

    /// What the filter made of `chunks` for `case`: content, reasoning (both trimmed) and calls.
    fn read_case(case: &FormatCase, chunks: &[&str]) -> (String, String, Vec<(String, Value)>) {
        let mut filter = OutputFilter::new(case.tools.clone());
        // How the family's generation prompt ends.
        let prompt = if case.opened_reasoning {
            // With the opening marker whose closer the answer holds.
            let opener = MARKERS
                .iter()
                .filter(|m| matches!(m.opener, Opener::Think(close) if close.iter().any(|c| case.text.contains(c))))
                .map(|m| m.tag)
                .next()
                .unwrap_or("<think>");
            format!("<|im_start|>assistant\n{opener}\n")
        } else if case.family == "gpt-oss" {
            "<|start|>user<|message|>hi<|end|><|start|>assistant".to_string()
        } else if case.family == "functionary-v3.2" {
            "<|start_header_id|>assistant<|end_header_id|>\n\n>>>".to_string()
        } else {
            String::new()
        };
        if let Some(end) = format::prompt_end(&prompt) {
            filter.after_prompt(end);
        }
        let mut events = Vec::new();
        for chunk in chunks {
            filter.push(chunk, &mut events);
        }
        filter.finish(&mut events);
        let out = filter.into_output();
        let calls = out.tool_calls.into_iter().map(|c| (c.name, c.arguments));
        (
            out.content.trim().to_string(),
            out.thinking.trim().to_string(),
            calls.collect(),
        )
    }

    /// Every family's documented output (src/stream/format_cases.json, taken from
    /// llama.cpp's tests/test-chat.cpp and the families' templates) gives the right
    /// content, reasoning and calls, whole, split at every byte offset (rounded to a
    /// character), and one character at a time.
    #[test]
    fn every_family_in_the_format_table_parses() {
        let cases: Vec<FormatCase> =
            serde_json::from_str(include_str!("format_cases.json")).expect("format_cases.json");
        let mut failed = Vec::new();
        let mut families = std::collections::BTreeSet::new();
        for case in &cases {
            families.insert(case.family.as_str());
            let want = (
                case.content.trim().to_string(),
                case.reasoning.trim().to_string(),
                case.calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect::<Vec<_>>(),
            );
            let whole = read_case(case, &[&case.text]);
            if whole != want {
                failed.push(format!(
                    "{} ({}): got {whole:?}, want {want:?}",
                    case.family, case.source
                ));
                continue;
            }
            let text = case.text.as_str();
            for byte in 0..=text.len() {
                let mut at = byte;
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                let split = read_case(case, &[&text[..at], &text[at..]]);
                assert_eq!(split, whole, "{} split at {at}", case.family);
            }
            let chars: Vec<String> = text.chars().map(String::from).collect();
            let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
            assert_eq!(
                read_case(case, &chars),
                whole,
                "{} char by char",
                case.family
            );
        }
        println!(
            "format table: {} of {} cases, {} families",
            cases.len() - failed.len(),
            cases.len(),
            families.len()
        );
        assert!(failed.is_empty(), "{}", failed.join("\n"));
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

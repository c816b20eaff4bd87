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

mod markup;
mod scan;

use super::format::{
    self, HarmonyMessage, LearntCall, Marker, Opener, PromptEnd, FENCE, MARKERS, RECIPIENT,
    RESPONSE_CLOSE, RESPONSE_OPEN,
};
use super::textcalls::{self, Offered};
use super::toolcall::ensure_ids;
use crate::core::{Event, EventSink, Flow, ToolCall, ToolSpec};
use scan::{
    acting_call, ending_call, ends_at_line_start, find_any, is_call, partial_suffix, scan_fence,
    scan_text, JsonProgress, JsonScan, Position, Scan,
};

/// Held tool-call text beyond this size is shown as text instead.
const MAX_HELD_BYTES: usize = 4 * 1024 * 1024;

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

    /// Reads calls in a syntax learnt from the template (`syntax::CallSyntax::learnt`).
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
            Opener::Markup(call) => {
                self.mode = Mode::Markup {
                    close: call.close,
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

fn flow_step(flow: Flow) -> Step {
    match flow {
        Flow::Continue => Step::Again,
        Flow::Cancel => Step::Cancel,
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
mod tests;

//! What each model family writes around its reasoning and its tool calls: the
//! one table of markers that the output filter ([`super::filter`]) scans for,
//! that the in-process backends decode as text (llama-server's "preserved
//! tokens"), and that a rendered prompt is checked against to know whether it
//! already opened a reasoning block.
//!
//! The markers of every family are recognised in every text, whatever model
//! wrote it: they are unambiguous (`[TOOL_CALLS]`, `<|python_tag|>`,
//! DeepSeek's `<｜tool▁calls▁begin｜>`), so text an OpenAI-compatible upstream
//! returns as plain content is read the same way as the in-process model's.
//! Each family's row names its tool-call parser (in [`super::textcalls`]):
//! [`parse_markup`] reads a stretch of markup by the row of its opening marker.

use super::textcalls::{self, Offered};
use crate::core::ToolCall;

/// What an opening marker switches the filter to.
#[derive(Debug, Clone, Copy)]
pub enum Opener {
    /// Reasoning, until one of these closing markers.
    Think(&'static [&'static str]),
    /// A fenced code block (only at the start of a line).
    Fence,
    /// Tool-call markup: held until its closing marker, then read as its row says.
    Markup(Call),
    /// A harmony (gpt-oss) message header, up to `<|message|>`: its channel and
    /// recipient decide what the message is.
    Header,
    /// A control marker that only frames the answer: removed from what is shown.
    Drop,
    /// Functionary v3.2's `>>>`: a recipient line follows (`all` or a tool's name).
    Recipient,
}

/// How one family's tool-call markup ends and who reads it.
#[derive(Debug, Clone, Copy)]
pub struct Call {
    /// The markup is held until one of these closing markers (none: until the text
    /// ends, for formats whose calls end at the end-of-generation token).
    pub close: &'static [&'static str],
    pub read: Read,
}

/// A family's parser: the calls its markup writes, `None` when it writes none.
pub type Parse = fn(&str, &[Offered]) -> Option<Vec<ToolCall>>;

/// Which text of the markup a family's parser reads.
#[derive(Debug, Clone, Copy)]
pub enum Read {
    /// The body: the text between the opening marker and the first closing one.
    Body(Parse),
    /// The markup whole, opening marker included: the marker starts every call
    /// (`<function=NAME>`, `<invoke`) and the parser finds each by it.
    Whole(Parse),
    /// A syntax learnt from the template ([`LearntCall::read`]), not a row of the table.
    Learnt,
}

/// An opening marker: its text, what it opens, whether it counts only at the start
/// of a line, and whether it ends a reasoning block it appears in.
#[derive(Debug, Clone, Copy)]
pub struct Marker {
    pub tag: &'static str,
    pub opener: Opener,
    pub line_start: bool,
    /// The family writes its calls inside its reasoning (Kimi K2 Thinking): this
    /// call marker ends a reasoning block wherever it appears. Every other marker
    /// inside reasoning is reasoning text.
    pub ends_reasoning: bool,
}

const fn marker(tag: &'static str, opener: Opener) -> Marker {
    Marker {
        tag,
        opener,
        line_start: false,
        ends_reasoning: false,
    }
}

/// A family's tool-call marker whose parser reads the body.
const fn body(tag: &'static str, close: &'static [&'static str], parse: Parse) -> Marker {
    let read = Read::Body(parse);
    marker(tag, Opener::Markup(Call { close, read }))
}

/// A family's tool-call marker whose parser reads the markup whole.
const fn whole(tag: &'static str, close: &'static [&'static str], parse: Parse) -> Marker {
    let read = Read::Whole(parse);
    marker(tag, Opener::Markup(Call { close, read }))
}

const fn at_line_start(marker: Marker) -> Marker {
    Marker {
        line_start: true,
        ..marker
    }
}

const fn in_reasoning(marker: Marker) -> Marker {
    Marker {
        ends_reasoning: true,
        ..marker
    }
}

pub const FENCE: &str = "```";

/// Where a harmony message body ends (Muse Glimmer's `<|eom|>` and `<|eot|>` too).
pub const HARMONY_END: &[&str] = &["<|end|>", "<|call|>", "<|return|>", "<|eom|>", "<|eot|>"];
/// The harmony header ends here; its body starts after it.
pub const HARMONY_MESSAGE: &str = "<|message|>";
/// Longest harmony header accepted; a longer "header" is shown as text.
pub const MAX_HEADER_BYTES: usize = 512;

/// Every opening marker, and for each family's tool calls the closing marker and
/// the parser ([`parse_markup`] reads by the row). Two markers never share a full
/// prefix (each pair differs before the shorter one ends), so the first full match
/// is the right one. A new family is one row here and its case in
/// `format_cases.json`.
pub const MARKERS: &[Marker] = &[
    // Reasoning.
    marker("<think>", Opener::Think(&["</think>"])),
    marker("<thinking>", Opener::Think(&["</thinking>"])),
    marker("[THINK]", Opener::Think(&["[/THINK]"])),
    marker("<seed:think>", Opener::Think(&["</seed:think>"])),
    marker("<|START_THINKING|>", Opener::Think(&["<|END_THINKING|>"])),
    marker("<|inner_prefix|>", Opener::Think(&["<|inner_suffix|>"])),
    marker("<|channel>thought", Opener::Think(&["<channel|>"])),
    marker("<mm:think>", Opener::Think(&["</mm:think>"])),
    marker(
        "<|open|>think<|sep|>",
        Opener::Think(&["<|close|>think<|sep|>"]),
    ),
    at_line_start(marker(FENCE, Opener::Fence)),
    // Tool calls.
    body(
        "<tool_call>",
        &["</tool_call>"],
        textcalls::parse_tool_call_body,
    ),
    body("<tool_calls>", &["</tool_calls>"], |text, _| {
        textcalls::json_calls(text)
    }),
    whole("<function_calls>", &["</function_calls>"], |text, tools| {
        textcalls::parse_invokes(text, "", tools)
    }),
    body("<tool>", &["</tool>"], |text, _| {
        textcalls::parse_json_object(text).map(|c| vec![c])
    }),
    // Plain words that prose quotes ("write <function=get_time> then…"): only at
    // the start of a line.
    at_line_start(whole(
        "<function=",
        &["</function>"],
        textcalls::parse_functions,
    )),
    at_line_start(whole(
        "<function name=",
        &["</function>"],
        textcalls::parse_named_functions,
    )),
    body("[TOOL_CALLS]", &[], |text, _| {
        textcalls::parse_mistral(text)
    }),
    body("<|python_tag|>", &[], |text, _| {
        textcalls::parse_python_tag(text)
    }),
    body(
        "<｜tool▁calls▁begin｜>",
        &["<｜tool▁calls▁end｜>"],
        |text, _| textcalls::parse_deepseek(text),
    ),
    whole(
        "<｜DSML｜function_calls>",
        &["</｜DSML｜function_calls>"],
        textcalls::parse_dsml,
    ),
    whole(
        "<｜DSML｜tool_calls>",
        &["</｜DSML｜tool_calls>"],
        textcalls::parse_dsml,
    ),
    whole(
        "]<]minimax[>[<tool_call>",
        &["]<]minimax[>[</tool_call>"],
        textcalls::parse_minimax_m3,
    ),
    // Kimi K3's message sections end its reasoning.
    in_reasoning(body(
        "<|open|>tools<|sep|>",
        &["<|close|>tools<|sep|>"],
        textcalls::parse_open_calls,
    )),
    in_reasoning(body(
        "<|tool_calls_section_begin|>",
        &["<|tool_calls_section_end|>"],
        |text, _| textcalls::parse_kimi(text),
    )),
    // Kimi K2 Thinking's call without its section: its calls end the turn.
    in_reasoning(whole("<|tool_call_begin|>", &[], |text, _| {
        textcalls::parse_kimi(text)
    })),
    body("<|tool_call|>", &[], |text, _| textcalls::json_calls(text)),
    body("<|START_ACTION|>", &["<|END_ACTION|>"], |text, _| {
        textcalls::json_calls(text)
    }),
    whole(
        "<minimax:tool_call>",
        &["</minimax:tool_call>"],
        |text, tools| textcalls::parse_invokes(text, "", tools),
    ),
    body(
        "<seed:tool_call>",
        &["</seed:tool_call>"],
        textcalls::parse_functions,
    ),
    body("<TOOLCALL>", &["</TOOLCALL>"], |text, _| {
        textcalls::json_calls(text)
    }),
    body("<|tools_prefix|>", &["<|tools_suffix|>"], |text, _| {
        textcalls::json_calls(text)
    }),
    body("<|tool_call_start|>", &["<|tool_call_end|>"], |text, _| {
        textcalls::python_calls(text)
    }),
    body("<|tool_call>", &["<tool_call|>"], |text, _| {
        textcalls::parse_gemma4(text)
    }),
    at_line_start(whole("functools[", &[], |text, _| {
        textcalls::json_after_word(text)
    })),
    at_line_start(body("Action:\n```json", &["\n```"], |text, _| {
        textcalls::json_calls(text)
    })),
    // gpt-oss harmony headers.
    marker("<|start|>", Opener::Header),
    marker("<|channel|>", Opener::Header),
    // Framing that is not text.
    marker("<|end|>", Opener::Drop),
    marker("<|return|>", Opener::Drop),
    marker("<|call|>", Opener::Drop),
    marker("<|START_RESPONSE|>", Opener::Drop),
    marker("<|END_RESPONSE|>", Opener::Drop),
    marker("<|END_THINKING|>", Opener::Drop),
    marker("</tool_call>", Opener::Drop),
    in_reasoning(marker("<|open|>response<|sep|>", Opener::Drop)),
    marker("<|close|>response<|sep|>", Opener::Drop),
    marker("<|close|>message<|sep|>", Opener::Drop),
    marker("<|eom|>", Opener::Drop),
    marker("<|eot|>", Opener::Drop),
    marker("<channel|>", Opener::Drop),
    marker("<|START_TEXT|>", Opener::Drop),
    marker("<|END_TEXT|>", Opener::Drop),
    marker("<|END_OF_TURN_TOKEN|>", Opener::Drop),
    marker("<|CHATBOT_TOKEN|>", Opener::Drop),
    marker("<|role_end|>", Opener::Drop),
];

/// Parses one stretch of tool-call markup (it starts with its opening marker) by
/// its marker's row; text that starts with no call marker is read as a bare JSON
/// call. `None` when it is not a well-formed call to an offered tool (then the
/// filter shows it as plain text).
pub fn parse_markup(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let text = text.trim();
    let row = MARKERS.iter().find_map(|m| match m.opener {
        Opener::Markup(call) if text.starts_with(m.tag) => Some((m.tag, call)),
        _ => None,
    });
    let calls = match row.map(|(tag, call)| (tag, call.close, call.read)) {
        Some((tag, close, Read::Body(parse))) => {
            parse(before_any(&text[tag.len()..], close), tools)
        }
        Some((_, _, Read::Whole(parse))) => parse(text, tools),
        Some((_, _, Read::Learnt)) | None => textcalls::parse_json_object(text).map(|c| vec![c]),
    }?;
    textcalls::validate(calls, tools)
}

/// A harmony message's body: the text before its end marker (all of it when the
/// marker never came).
pub fn message_body(text: &str) -> &str {
    before_any(text, HARMONY_END)
}

/// The text before the first of `close`, or all of it when none came.
fn before_any<'a>(text: &'a str, close: &[&str]) -> &'a str {
    let end = close.iter().filter_map(|c| text.find(c)).min();
    end.map_or(text, |end| &text[..end])
}

/// Reasoning blocks that only a prompt opens, with words rather than a marker (so
/// they are not markers in the model's text): Apriel 1.6 prefills its reasoning
/// with these words and ends it with `[BEGIN FINAL RESPONSE]`.
pub const PROMPT_REASONING: &[(&str, &[&str])] =
    &[("Here are my reasoning steps:", &["[BEGIN FINAL RESPONSE]"])];

/// Functionary v3.2's recipient marker: a marker only where the prompt ended with it
/// (elsewhere `>>>` is a Python prompt or a quote).
pub const RECIPIENT: Marker = marker(">>>", Opener::Recipient);

/// Granite 3.3 wraps its answer in `<response>…</response>` after its reasoning:
/// markers only there (elsewhere they are a model talking about XML).
pub const RESPONSE_OPEN: &str = "<response>";
pub const RESPONSE_CLOSE: Marker = marker("</response>", Opener::Drop);

/// Texts inside markers that are special tokens of their own (a marker such as
/// `<|open|>think<|sep|>` is several tokens) and that no marker spells whole.
const MARKER_PARTS: &[&str] = &[
    HARMONY_MESSAGE,
    "<|constrain|>",
    "<｜tool▁call▁begin｜>",
    "<｜tool▁sep｜>",
    "<|tool_call_argument_begin|>",
    "[ARGS]",
    "[CALL_ID]",
    "<|\"|>",
    "<|open|>",
    "<|close|>",
];

/// Whether a special token with this `text` belongs to a marker (is one, or a part
/// of one): the in-process backends decode such a control token as text, for the
/// filter, and hide every other.
pub fn is_marker(text: &str) -> bool {
    // Special tokens that are words ("think") are text anyway.
    if text.chars().count() < 3 || text.starts_with(char::is_alphanumeric) {
        return false;
    }
    let closers = MARKERS.iter().flat_map(|m| match m.opener {
        Opener::Think(close) | Opener::Markup(Call { close, .. }) => close,
        _ => &[],
    });
    let whole = MARKERS
        .iter()
        .map(|m| m.tag)
        .chain(closers.copied())
        .chain(HARMONY_END.iter().copied())
        .chain([RECIPIENT.tag]);
    MARKER_PARTS.contains(&text) || whole.into_iter().any(|m| m.contains(text))
}

/// How a rendered prompt ends, where that decides how the answer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PromptEnd {
    /// Inside a reasoning block the prompt opened and left open (Qwen3.5, QwQ,
    /// DeepSeek-R1 distills, GLM 4.7, … end their generation prompt with `<think>`),
    /// closed by one of these markers.
    Reasoning(&'static [&'static str]),
    /// A harmony header is next (gpt-oss's prompt ends `<|start|>assistant`).
    Header,
    /// A recipient line is next (Functionary v3.2's prompt ends `>>>`).
    Recipient,
}

/// What the end of the rendered `prompt` says about the answer's start.
pub fn prompt_end(prompt: &str) -> Option<PromptEnd> {
    let tail = prompt.trim_end();
    if tail.ends_with("<|channel|>analysis<|message|>") {
        return Some(PromptEnd::Reasoning(HARMONY_END));
    }
    if tail.ends_with("<|start|>assistant") {
        return Some(PromptEnd::Header);
    }
    if prompt.ends_with(RECIPIENT.tag) {
        return Some(PromptEnd::Recipient);
    }
    let words = PROMPT_REASONING
        .iter()
        .find(|(opener, _)| tail.ends_with(opener));
    if let Some((_, close)) = words {
        return Some(PromptEnd::Reasoning(close));
    }
    MARKERS.iter().find_map(|m| match m.opener {
        Opener::Think(close) if tail.ends_with(m.tag) => Some(PromptEnd::Reasoning(close)),
        _ => None,
    })
}

/// Every closing marker of a reasoning block.
pub fn reasoning_closers() -> impl Iterator<Item = &'static str> {
    let closers = MARKERS.iter().flat_map(|m| match m.opener {
        Opener::Think(close) => close,
        _ => &[],
    });
    closers.copied()
}

/// What a harmony header says the message is.
#[derive(Debug, PartialEq, Eq)]
pub enum HarmonyMessage {
    /// A call to the tool after `to=` (`functions.` removed).
    Call(String),
    Reasoning,
    Answer,
}

/// Reads a harmony header (the text from `<|start|>` or `<|channel|>` up to
/// `<|message|>`, gpt-oss's and Muse Glimmer's): `to=NAME` addresses a tool
/// (`functions.` removed), except `to=user` and `to=all` (the answer), `to=self`
/// (reasoning) and `to=assistant`; otherwise the last channel decides: `analysis`
/// is reasoning, anything else (`final`, a `commentary` preamble) is answer.
pub fn harmony_header(header: &str) -> HarmonyMessage {
    let word = |from: &str| {
        from.split(|c: char| c.is_whitespace() || c == '<')
            .next()
            .unwrap_or("")
            .to_string()
    };
    let recipient = header.find("to=").map(|at| word(&header[at + 3..]));
    match recipient.as_deref() {
        Some("self") => return HarmonyMessage::Reasoning,
        Some("user" | "all" | "assistant") | None => {}
        Some(recipient) => {
            let name = recipient.strip_prefix("functions.").unwrap_or(recipient);
            return HarmonyMessage::Call(name.to_string());
        }
    }
    let channel = header
        .rfind("<|channel|>")
        .map(|at| word(&header[at + "<|channel|>".len()..]));
    match channel.as_deref() {
        Some("analysis") => HarmonyMessage::Reasoning,
        _ => HarmonyMessage::Answer,
    }
}

/// The call syntax of a template whose markers the table does not know, learnt from
/// its probe: the opening text of a call becomes a marker of its own, and calls are
/// read by the syntax itself (`before NAME between JSON after`, one or more). The
/// texts are leaked: one syntax per loaded template, for the life of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LearntCall {
    pub marker: &'static str,
    /// Where a call's markup ends: the closing marker after the arguments, none
    /// when the call runs to the end of the answer.
    pub close: &'static [&'static str],
    pub before: &'static str,
    pub between: &'static str,
    pub after: &'static str,
}

impl LearntCall {
    /// The opening marker, as the filter scans for it.
    pub fn opener(&self) -> Marker {
        let read = Read::Learnt;
        marker(
            self.marker,
            Opener::Markup(Call {
                close: self.close,
                read,
            }),
        )
    }

    /// The calls (name, arguments) in `text`, one or more written in this syntax.
    pub fn read(&self, text: &str) -> Option<Vec<(String, serde_json::Value)>> {
        let mut calls = Vec::new();
        let mut rest = text.trim();
        while !rest.is_empty() {
            let call = rest.strip_prefix(self.before)?;
            let (name, arguments) = call.split_once(self.between)?;
            let mut values = serde_json::Deserializer::from_str(arguments.trim_start())
                .into_iter::<serde_json::Value>();
            let value = values.next()?.ok()?;
            let skipped = arguments.len() - arguments.trim_start().len();
            let tail = arguments[skipped + values.byte_offset()..].trim_start();
            calls.push((name.trim().to_string(), value));
            rest = tail.strip_prefix(self.after).unwrap_or(tail).trim_start();
            if !rest.starts_with(self.before) {
                break;
            }
        }
        (!calls.is_empty()).then_some(calls)
    }

    /// Whether a special token with this text belongs to this syntax's markers.
    pub fn holds(&self, text: &str) -> bool {
        text.chars().count() >= 3
            && !text.starts_with(char::is_alphanumeric)
            && [self.marker, self.before, self.after]
                .iter()
                .any(|m| m.contains(text))
    }
}

#[cfg(test)]
mod tests;

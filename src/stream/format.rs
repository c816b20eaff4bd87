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
//! Which stretch belongs to which family's parser is decided by its opening
//! marker in [`super::textcalls`].

/// What an opening marker switches the filter to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opener {
    /// Reasoning, until one of these closing markers.
    Think(&'static [&'static str]),
    /// A fenced code block (only at the start of a line).
    Fence,
    /// Tool-call markup, held until one of these closing markers (none: until the
    /// text ends, for formats whose calls end at the end-of-generation token).
    Markup(&'static [&'static str]),
    /// A harmony (gpt-oss) message header, up to `<|message|>`: its channel and
    /// recipient decide what the message is.
    Header,
    /// A control marker that only frames the answer: removed from what is shown.
    Drop,
    /// Functionary v3.2's `>>>`: a recipient line follows (`all` or a tool's name).
    Recipient,
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

const fn at_line_start(tag: &'static str, opener: Opener) -> Marker {
    Marker {
        line_start: true,
        ..marker(tag, opener)
    }
}

const fn in_reasoning(tag: &'static str, opener: Opener) -> Marker {
    Marker {
        ends_reasoning: true,
        ..marker(tag, opener)
    }
}

pub const FENCE: &str = "```";

/// Where a harmony message body ends (Muse Glimmer's `<|eom|>` and `<|eot|>` too).
pub const HARMONY_END: &[&str] = &["<|end|>", "<|call|>", "<|return|>", "<|eom|>", "<|eot|>"];
/// The harmony header ends here; its body starts after it.
pub const HARMONY_MESSAGE: &str = "<|message|>";
/// Longest harmony header accepted; a longer "header" is shown as text.
pub const MAX_HEADER_BYTES: usize = 512;

/// Every opening marker. Two markers never share a full prefix (each pair differs
/// before the shorter one ends), so the first full match is the right one.
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
    at_line_start(FENCE, Opener::Fence),
    // Tool calls.
    marker("<tool_call>", Opener::Markup(&["</tool_call>"])),
    marker("<tool_calls>", Opener::Markup(&["</tool_calls>"])),
    marker("<function_calls>", Opener::Markup(&["</function_calls>"])),
    marker("<tool>", Opener::Markup(&["</tool>"])),
    // Plain words that prose quotes ("write <function=get_time> then…"): only at
    // the start of a line.
    at_line_start("<function=", Opener::Markup(&["</function>"])),
    at_line_start("<function name=", Opener::Markup(&["</function>"])),
    marker("[TOOL_CALLS]", Opener::Markup(&[])),
    marker("<|python_tag|>", Opener::Markup(&[])),
    marker(
        "<｜tool▁calls▁begin｜>",
        Opener::Markup(&["<｜tool▁calls▁end｜>"]),
    ),
    marker(
        "<｜DSML｜function_calls>",
        Opener::Markup(&["</｜DSML｜function_calls>"]),
    ),
    marker(
        "<｜DSML｜tool_calls>",
        Opener::Markup(&["</｜DSML｜tool_calls>"]),
    ),
    marker(
        "]<]minimax[>[<tool_call>",
        Opener::Markup(&["]<]minimax[>[</tool_call>"]),
    ),
    // Kimi K3's message sections end its reasoning.
    in_reasoning(
        "<|open|>tools<|sep|>",
        Opener::Markup(&["<|close|>tools<|sep|>"]),
    ),
    in_reasoning(
        "<|tool_calls_section_begin|>",
        Opener::Markup(&["<|tool_calls_section_end|>"]),
    ),
    // Kimi K2 Thinking's call without its section: its calls end the turn.
    in_reasoning("<|tool_call_begin|>", Opener::Markup(&[])),
    marker("<|tool_call|>", Opener::Markup(&[])),
    marker("<|START_ACTION|>", Opener::Markup(&["<|END_ACTION|>"])),
    marker(
        "<minimax:tool_call>",
        Opener::Markup(&["</minimax:tool_call>"]),
    ),
    marker("<seed:tool_call>", Opener::Markup(&["</seed:tool_call>"])),
    marker("<TOOLCALL>", Opener::Markup(&["</TOOLCALL>"])),
    marker("<|tools_prefix|>", Opener::Markup(&["<|tools_suffix|>"])),
    marker(
        "<|tool_call_start|>",
        Opener::Markup(&["<|tool_call_end|>"]),
    ),
    marker("<|tool_call>", Opener::Markup(&["<tool_call|>"])),
    at_line_start("functools[", Opener::Markup(&[])),
    at_line_start("Action:\n```json", Opener::Markup(&["\n```"])),
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
    in_reasoning("<|open|>response<|sep|>", Opener::Drop),
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
        Opener::Think(close) | Opener::Markup(close) => close,
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
        marker(self.marker, Opener::Markup(self.close))
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
mod tests {
    use super::*;

    #[test]
    fn no_marker_is_a_prefix_of_another() {
        for a in MARKERS {
            for b in MARKERS {
                if a.tag != b.tag {
                    assert!(!b.tag.starts_with(a.tag), "{} prefixes {}", a.tag, b.tag);
                }
            }
        }
    }

    #[test]
    fn markers_include_closers_and_framing() {
        for text in ["<think>", "</think>", "<|end|>", "[ARGS]", "<|message|>"] {
            assert!(is_marker(text), "{text}");
        }
        assert!(!is_marker("<|im_start|>"));
        assert!(!is_marker("think"));
    }

    #[test]
    fn the_end_of_a_prompt_says_how_the_answer_starts() {
        let qwen = "<|im_start|>assistant\n<think>\n";
        assert_eq!(prompt_end(qwen), Some(PromptEnd::Reasoning(&["</think>"])));
        let closed = "<|im_start|>assistant\n<think>\n\n</think>\n\n";
        assert_eq!(prompt_end(closed), None);
        assert_eq!(prompt_end("[INST]hi[/INST]"), None);
        let oss = "<|start|>assistant<|channel|>analysis<|message|>";
        assert_eq!(prompt_end(oss), Some(PromptEnd::Reasoning(HARMONY_END)));
        assert_eq!(prompt_end("<|start|>assistant"), Some(PromptEnd::Header));
        assert_eq!(
            prompt_end("<|from|>assistant\n>>>"),
            Some(PromptEnd::Recipient)
        );
    }

    #[test]
    fn harmony_headers() {
        let call = "<|channel|>commentary to=functions.get_weather <|constrain|>json";
        assert_eq!(
            harmony_header(call),
            HarmonyMessage::Call("get_weather".into())
        );
        let before = "<|start|>assistant to=functions.read<|channel|>commentary json";
        assert_eq!(harmony_header(before), HarmonyMessage::Call("read".into()));
        let analysis = "<|channel|>analysis";
        assert_eq!(harmony_header(analysis), HarmonyMessage::Reasoning);
        let fin = "<|start|>assistant<|channel|>final";
        assert_eq!(harmony_header(fin), HarmonyMessage::Answer);
    }
}

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

/// The tool a template is asked to render a call of, to learn its call syntax.
pub const PROBE_TOOL: &str = "probe_tool";
/// The probe call's id, as shepherd writes ids.
pub const PROBE_ID: &str = "call_0";

/// The probe call's arguments, and the ways a template may write them.
pub fn probe_arguments() -> serde_json::Value {
    serde_json::json!({"probe_arg": "probe_value"})
}
const PROBE_ARGUMENT_TEXTS: [&str; 2] = [
    r#"{"probe_arg": "probe_value"}"#,
    r#"{"probe_arg":"probe_value"}"#,
];

/// How a template writes one tool call, learnt from a probe (see [`call_syntax`]):
/// `before` NAME `between` ARGUMENTS (JSON) `after`, up to the end of the turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallSyntax {
    pub before: String,
    pub between: String,
    pub after: String,
    /// The id as the template wrote it into the text, when it did (a grammar lets
    /// the model write one of the same shape).
    pub id: Option<String>,
    /// The tool-call marker a call's text holds, when it holds one: a grammar may
    /// wait for it (lazily) and leave the text before it free, reasoning included.
    /// (Not a harmony header: its reasoning starts with the same marker.)
    pub trigger: Option<&'static str>,
    /// How the prompt ends (the filter must know to read the call back).
    pub prompt_end: Option<PromptEnd>,
}

impl CallSyntax {
    /// The text of a call to `name` with `arguments` (JSON text) in this syntax.
    pub fn write(&self, name: &str, arguments: &str) -> String {
        format!(
            "{}{name}{}{arguments}{}",
            self.before, self.between, self.after
        )
    }

    /// `before` from the trigger on: what a lazy grammar constrains once the
    /// trigger appears (an empty reasoning block before it, say, is the model's).
    pub fn trigger_onward(&self) -> Option<&str> {
        let at = self.before.find(self.trigger?)?;
        Some(&self.before[at..])
    }
}

/// Learns a template's call syntax from two renderings: `plain`, a user message
/// and the generation prompt, and `with_call`, the same user message followed by
/// the assistant's call to [`PROBE_TOOL`] with [`probe_arguments`] and id
/// [`PROBE_ID`] (or `short_id`, where the template demands ids of its own shape).
/// `turn_end` gives the length of the text after the arguments that comes before
/// the end of the turn (the end-of-turn token is the model's to write, not the
/// grammar's). `None` when the call does not follow the prompt, its arguments are
/// not JSON, or the output filter would not read the call back.
pub fn call_syntax(
    plain: &str,
    with_call: &str,
    short_id: &str,
    turn_end: impl Fn(&str) -> usize,
) -> Option<CallSyntax> {
    let call = with_call.strip_prefix(plain)?;
    let name_at = call.find(PROBE_TOOL)?;
    let rest = &call[name_at + PROBE_TOOL.len()..];
    let (args_at, args_len) = PROBE_ARGUMENT_TEXTS
        .iter()
        .filter_map(|text| rest.find(text).map(|at| (at, text.len())))
        .min()?;
    let tail = &rest[args_at + args_len..];
    let after = &tail[..turn_end(tail).min(tail.len())];
    let before = &call[..name_at];
    let between = &rest[..args_at];
    let written = [before, between, after];
    let id = [PROBE_ID, short_id]
        .into_iter()
        .find(|id| written.iter().any(|part| part.contains(id)))
        .map(str::to_string);
    let trigger = MARKERS
        .iter()
        .filter(|m| matches!(m.opener, Opener::Markup(_)) && !m.line_start)
        .filter_map(|m| before.find(m.tag).map(|at| (at, m.tag)))
        .min()
        .map(|(_, tag)| tag);
    let syntax = CallSyntax {
        before: before.to_string(),
        between: between.to_string(),
        after: after.to_string(),
        id,
        trigger,
        prompt_end: prompt_end(plain),
    };
    reads_back(&syntax).then_some(syntax)
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

impl CallSyntax {
    /// The syntax as a [`LearntCall`], for a template whose calls start with a tag the
    /// marker table does not know (`<|fn|>{"name": …}` of some new family). `None`
    /// where a known marker, bare JSON or a harmony header starts the call.
    pub fn learnt(&self) -> Option<LearntCall> {
        if self.trigger.is_some() || self.prompt_end.is_some() {
            return None;
        }
        let before = self.before.trim_start();
        let open_end = before.find(['{', '"', '\n']).unwrap_or(before.len());
        let marker = before[..open_end].trim_end();
        let tag_like = marker.starts_with(['<', '[']) && marker.chars().count() >= 3;
        let known = MARKERS
            .iter()
            .any(|m| m.tag.starts_with(marker) || marker.starts_with(m.tag));
        if !tag_like || known || !self.between.chars().any(|c| !c.is_whitespace()) {
            return None;
        }
        let after = self.after.trim();
        let close = after.find(['<', '[']).map(|at| after[at..].trim());
        let leak = |text: &str| -> &'static str { Box::leak(text.to_string().into_boxed_str()) };
        let close: &'static [&'static str] = match close.filter(|c| !c.is_empty()) {
            Some(close) => Box::leak(vec![leak(close)].into_boxed_slice()),
            None => &[],
        };
        Some(LearntCall {
            marker: leak(marker),
            close,
            before: leak(before),
            between: leak(&self.between),
            after: leak(after),
        })
    }
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

/// Whether the output filter reads the probe call written in `syntax` back.
fn reads_back(syntax: &CallSyntax) -> bool {
    let mut filter = super::filter::OutputFilter::new(vec![PROBE_TOOL.to_string()]);
    if let Some(end) = syntax.prompt_end {
        filter.after_prompt(end);
    }
    if let Some(learnt) = syntax.learnt() {
        filter.learn(learnt);
    }
    let mut ignore = |_: crate::core::Event| crate::core::Flow::Continue;
    filter.push(
        &syntax.write(PROBE_TOOL, PROBE_ARGUMENT_TEXTS[0]),
        &mut ignore,
    );
    filter.finish(&mut ignore);
    let calls = filter.take_tool_calls();
    calls.len() == 1 && calls[0].name == PROBE_TOOL && calls[0].arguments == probe_arguments()
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

    /// Renderings of a probe call as three families' templates write them.
    #[test]
    fn a_call_syntax_is_learnt_from_a_probe() {
        let plain = "<|im_start|>user\nCall.<|im_end|>\n<|im_start|>assistant\n";
        let hermes = format!(
            "<|im_start|>user\nCall.<|im_end|>\n<|im_start|>assistant\n<tool_call>\n{{\"name\": \"probe_tool\", \"arguments\": {}}}\n</tool_call><|im_end|>\n",
            PROBE_ARGUMENT_TEXTS[0]
        );
        let end = |tail: &str| tail.find("<|im_end|>").unwrap_or(tail.len());
        let syntax = call_syntax(plain, &hermes, "x", end).expect("hermes");
        assert_eq!(syntax.before, "<tool_call>\n{\"name\": \"");
        assert_eq!(syntax.between, "\", \"arguments\": ");
        assert_eq!(syntax.after, "}\n</tool_call>");
        assert_eq!(syntax.trigger, Some("<tool_call>"));
        assert_eq!(syntax.id, None);

        let nemo_plain = "[INST]Call.[/INST]";
        let nemo = "[INST]Call.[/INST][TOOL_CALLS][{\"name\": \"probe_tool\", \"arguments\": {\"probe_arg\": \"probe_value\"}, \"id\": \"Ab3dEf9hI\"}]</s>";
        let end = |tail: &str| tail.find("</s>").unwrap_or(tail.len());
        let syntax = call_syntax(nemo_plain, nemo, "Ab3dEf9hI", end).expect("nemo");
        assert_eq!(syntax.after, ", \"id\": \"Ab3dEf9hI\"}]");
        assert_eq!(syntax.id.as_deref(), Some("Ab3dEf9hI"));

        let oss_plain = "<|start|>user<|message|>Call.<|end|><|start|>assistant";
        let oss = "<|start|>user<|message|>Call.<|end|><|start|>assistant<|channel|>commentary to=functions.probe_tool <|constrain|>json<|message|>{\"probe_arg\":\"probe_value\"}<|call|>";
        let end = |tail: &str| tail.find("<|call|>").unwrap_or(tail.len());
        let syntax = call_syntax(oss_plain, oss, "x", end).expect("gpt-oss");
        assert_eq!(syntax.before, "<|channel|>commentary to=functions.");
        assert_eq!(syntax.prompt_end, Some(PromptEnd::Header));
        assert_eq!(syntax.trigger, None);

        // A call after an empty reasoning block: a lazy grammar starts at the call.
        let qwen = format!("{plain}<think>\n\n</think>\n\n<tool_call>\n{{\"name\": \"probe_tool\", \"arguments\": {}}}\n</tool_call>", PROBE_ARGUMENT_TEXTS[0]);
        let syntax = call_syntax(plain, &qwen, "x", |t: &str| t.len()).expect("qwen3");
        assert_eq!(syntax.trigger, Some("<tool_call>"));
        assert_eq!(syntax.trigger_onward(), Some("<tool_call>\n{\"name\": \""));

        // Arguments the template does not write as JSON: no syntax to force.
        let xml = format!("{plain}<tool_call>\n<function=probe_tool>\n<parameter=probe_arg>\nprobe_value\n</parameter>\n</function>\n</tool_call>");
        assert_eq!(call_syntax(plain, &xml, "x", |t: &str| t.len()), None);
    }

    /// A family the table does not know: its call's opening tag is learnt.
    #[test]
    fn an_unknown_familys_call_syntax_is_learnt() {
        let plain = "<|user|>Call.<|end_user|><|bot|>";
        let call = format!(
            "{plain}<|fn|>{{\"name\": \"probe_tool\", \"arguments\": {}}}<|/fn|><|end_bot|>",
            PROBE_ARGUMENT_TEXTS[0]
        );
        let end = |tail: &str| tail.find("<|end_bot|>").unwrap_or(tail.len());
        let syntax =
            call_syntax(plain, &call, "x", end).expect("read back through the learnt marker");
        let learnt = syntax.learnt().expect("learnt");
        assert_eq!((learnt.marker, learnt.close), ("<|fn|>", &["<|/fn|>"][..]));
        assert!(learnt.holds("<|fn|>") && learnt.holds("<|/fn|>") && !learnt.holds("<|end_bot|>"));
        let two = "<|fn|>{\"name\": \"a\", \"arguments\": {\"x\": 1}}<|/fn|>\n<|fn|>{\"name\": \"b\", \"arguments\": {}}<|/fn|>";
        let calls = learnt.read(two).expect("two calls");
        assert_eq!(
            calls,
            vec![
                ("a".into(), serde_json::json!({"x": 1})),
                ("b".into(), serde_json::json!({}))
            ]
        );
        assert_eq!(learnt.read("<|fn|>not a call"), None);
        // Known markers are never learnt again.
        let hermes = format!(
            "{plain}<tool_call>\n{{\"name\": \"probe_tool\", \"arguments\": {}}}\n</tool_call>",
            PROBE_ARGUMENT_TEXTS[0]
        );
        let known = call_syntax(plain, &hermes, "x", |t: &str| t.len()).expect("hermes");
        assert_eq!(known.learnt(), None);
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

//! A template's own tool-call syntax, learnt from a probe: the template renders
//! a call to [`PROBE_TOOL`], and the text around the probe's name and arguments
//! is how this model writes a call ([`CallSyntax`]). The in-process backends use
//! it to force a call's shape with a grammar (`tool_choice: required`), and to
//! read calls of a family the marker table ([`super::format`]) does not know
//! ([`CallSyntax::learnt`]). A syntax is kept only when the output filter reads
//! the probe call back.

use super::filter::OutputFilter;
use super::format::{prompt_end, LearntCall, Opener, PromptEnd, MARKERS};

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

/// Whether the output filter reads the probe call written in `syntax` back.
fn reads_back(syntax: &CallSyntax) -> bool {
    let mut filter = OutputFilter::new(vec![PROBE_TOOL.to_string()]);
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
}

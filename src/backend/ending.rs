//! The end of a reply, written once. For every API backend (OpenAI, Anthropic,
//! Gemini, Ollama), [`assemble`]: flush the output filter, merge the provider's
//! native tool calls with the calls parsed from its text (renumbered after the
//! native ones, so ids stay unique and stable), give every call an id, emit the
//! figures, pick the finish reason by [`finish_reason`], and build the
//! [`Reply`]. Each backend maps its own events; only the ending is shared. For
//! the in-process models (llama.cpp, TensorRT-LLM), whose generation side has
//! flushed the filter and shown the figures already, [`finish_local`] reads the
//! filter into the reply under the same finish rule.

use super::{Reply, Usage};
use crate::core::{Artefact, Event, EventSink, FinishReason, Flow, Stats, ToolCall};
use crate::stream::filter::{cut_notice, OutputFilter, TextEnd};
use crate::stream::toolcall::ensure_ids;

/// What a backend read besides the text: the parts of its reply that are not
/// the output filter's.
#[derive(Debug, Default)]
pub struct Ending {
    /// The provider's own tool calls, in order.
    pub calls: Vec<ToolCall>,
    /// Reasoning the provider sent apart from the text.
    pub thinking: String,
    /// The finish reason as the provider reported it (mapped), if it did.
    pub finish: Option<FinishReason>,
    pub usage: Option<Usage>,
    pub stats: Stats,
    pub artefacts: Vec<Artefact>,
    /// A notice for the user, shown after the text and before the figures.
    pub notice: Option<String>,
}

/// The figures of a provider that reports only token counts: the tokens the
/// conversation now fills, in a context of `context_size` (0 when unknown).
pub fn counted_stats(usage: Option<Usage>, context_size: u64) -> Stats {
    let counted = usage.unwrap_or_default();
    Stats {
        prompt_tokens: counted.prompt_tokens,
        completion_tokens: counted.completion_tokens,
        context_used: counted.prompt_tokens + counted.completion_tokens,
        context_size,
        ..Stats::default()
    }
}

/// The one finish rule: a reply cut inside a call (`cut`: its last call is one
/// the model did not finish) ended at its length, and runs no call; a reply with
/// tool calls ends for them; one announced as calls whose calls did not survive
/// parsing (or with no reason at all) simply stopped; any other reason the
/// provider gave stands.
pub fn finish_reason(has_calls: bool, cut: bool, reported: Option<FinishReason>) -> FinishReason {
    match reported {
        Some(FinishReason::Cancelled) if cut => FinishReason::Cancelled,
        _ if cut => FinishReason::Length,
        _ if has_calls => FinishReason::ToolCalls,
        Some(FinishReason::ToolCalls) | None => FinishReason::Stop,
        Some(reason) => reason,
    }
}

/// Ends a streamed reply (see the module docs); `None` when the sink cancelled
/// while the filter flushed, for the backend's own cancelled reply.
pub fn assemble(
    filter: &mut OutputFilter,
    ending: Ending,
    sink: &mut dyn EventSink,
) -> Option<Reply> {
    let end = match ending.finish {
        Some(FinishReason::Stop | FinishReason::ToolCalls) | None => TextEnd::Model,
        Some(_) => TextEnd::Cut,
    };
    if filter.finish_as(end, sink) == Flow::Cancel {
        return None;
    }
    // A provider's own call at the length limit is one it did not finish.
    let native_cut = ending.finish == Some(FinishReason::Length) && !ending.calls.is_empty();
    if let Some(call) = ending.calls.last().filter(|_| native_cut) {
        sink.emit(Event::System(cut_notice(&call.name)));
    }
    let cut = native_cut || filter.cut_call();
    let mut tool_calls = ending.calls;
    tool_calls.extend(filter.take_tool_calls().into_iter().map(|mut call| {
        call.id.clear();
        call
    }));
    ensure_ids(&mut tool_calls);
    if let Some(notice) = ending.notice {
        sink.emit(Event::System(notice));
    }
    sink.emit(Event::Stats(ending.stats));
    Some(Reply {
        content: unless_blank(filter.content()),
        thinking: unless_blank(&(ending.thinking + filter.thinking())),
        finish: finish_reason(!tool_calls.is_empty(), cut, ending.finish),
        tool_calls,
        usage: ending.usage,
        artefacts: ending.artefacts,
        stop_sequence: None,
    })
}

/// Ends an in-process model's reply, whose filter was flushed and whose figures
/// were shown on the generation side: the filter's view of the text (visible
/// content, thinking, the calls it recognised) goes into `reply`, and the finish
/// follows [`finish_reason`]. A cancelled reply keeps its reason and runs no
/// calls.
pub fn finish_local(reply: &mut Reply, filter: &mut OutputFilter) {
    reply.content = unless_blank(filter.content());
    reply.thinking = unless_blank(filter.thinking());
    if reply.finish == FinishReason::Cancelled {
        return;
    }
    reply.tool_calls = filter.take_tool_calls();
    reply.finish = finish_reason(
        !reply.tool_calls.is_empty(),
        filter.cut_call(),
        Some(reply.finish),
    );
}

/// A reply's text, or nothing where it is only whitespace (the `\n\n` around an
/// empty reasoning block before a forced call is no content and no reasoning).
fn unless_blank(text: &str) -> String {
    match text.trim().is_empty() {
        true => String::new(),
        false => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn bash_tools() -> [crate::core::ToolSpec; 1] {
        [crate::core::ToolSpec {
            name: "bash".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }]
    }

    /// `text` from a provider that reported `finish`, assembled with `bash` offered.
    fn assemble_text(text: &str, finish: FinishReason) -> Reply {
        let mut filter = OutputFilter::for_tools(&bash_tools());
        let mut events = Vec::new();
        filter.push(text, &mut events);
        let ending = Ending {
            finish: Some(finish),
            ..Ending::default()
        };
        assemble(&mut filter, ending, &mut events).unwrap()
    }

    /// A forced call after an empty reasoning block (Qwen3 writes
    /// `<think>\n\n</think>\n\n`) is a reply with no content and no reasoning.
    #[test]
    fn blank_content_and_reasoning_are_empty() {
        let text = "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"bash\", \"arguments\": {}}\n</tool_call>";
        let reply = assemble_text(text, FinishReason::Stop);
        assert_eq!((reply.content.as_str(), reply.thinking.as_str()), ("", ""));
        assert_eq!(reply.tool_calls.len(), 1);
        assert_eq!(reply.finish, FinishReason::ToolCalls);
    }

    #[test]
    fn one_finish_rule_for_every_dialect() {
        use FinishReason::*;
        // (calls, what the provider reported, the reply's reason), with the
        // dialects' words: OpenAI finish_reason, Anthropic stop_reason, Gemini
        // finishReason, Ollama done_reason.
        let table = [
            (true, false, None, ToolCalls), // calls, no reason (a cut stream)
            (true, false, Some(Stop), ToolCalls), // "stop" / "end_turn" / "STOP" beside calls
            (true, false, Some(Length), ToolCalls), // whole calls, then text cut off
            (true, true, Some(Length), Length), // the text ended inside a call
            (true, true, Some(Stop), Length), // a stop string cut a call
            (true, true, Some(Cancelled), Cancelled), // cancelled inside a call
            (false, false, Some(ToolCalls), Stop), // "tool_calls" / "tool_use", none survived
            (false, false, None, Stop),     // no reason at all
            (false, false, Some(Stop), Stop), // "stop" / "end_turn" / "STOP"
            (false, false, Some(Length), Length), // "length" / "max_tokens" / "MAX_TOKENS"
            (false, false, Some(Error), Error), // "content_filter" / "SAFETY" mapped to an error
        ];
        for (calls, cut, reported, expected) in table {
            assert_eq!(
                finish_reason(calls, cut, reported),
                expected,
                "{calls} {cut} {reported:?}"
            );
        }
    }

    /// A provider's stream cut at its length limit inside a call, native or in the
    /// text: the reply ends `Length` (the agent runs none of its calls), the cut
    /// call keeps its arguments as written, and a notice names it.
    #[test]
    fn a_reply_cut_inside_a_call_ends_at_its_length() {
        let tools = bash_tools();
        // A native call whose arguments the length limit cut.
        let mut filter = OutputFilter::for_tools(&tools);
        let mut events = Vec::new();
        let cut = ToolCall {
            id: "call_1".into(),
            name: "bash".into(),
            arguments: Value::String(r#"{"command": "rm -rf /tm"#.into()),
        };
        let ending = Ending {
            calls: vec![cut.clone()],
            finish: Some(FinishReason::Length),
            ..Ending::default()
        };
        let reply = assemble(&mut filter, ending, &mut events).unwrap();
        assert_eq!(reply.finish, FinishReason::Length);
        assert_eq!(reply.tool_calls[0].arguments, cut.arguments);
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::System(n) if n.contains("bash") && n.contains("not run"))));
        // Qwen3-Coder's XML in the text, cut inside a value.
        let text = assemble_text;
        let xml = "<tool_call>\n<function=bash>\n<parameter=command>\n";
        let reply = text(&format!("{xml}rm -rf /tm"), FinishReason::Length);
        assert_eq!(reply.finish, FinishReason::Length);
        assert_eq!(
            reply.tool_calls[0].arguments,
            Value::String(r#"{"command":"rm -rf /tm"#.into())
        );
        // The same text ended by the model: its call (its closing tags are the end
        // of the turn) runs.
        let reply = text(&format!("{xml}ls"), FinishReason::Stop);
        assert_eq!(reply.finish, FinishReason::ToolCalls);
        assert_eq!(reply.tool_calls[0].arguments, json!({"command": "ls"}));
    }

    #[test]
    fn calls_from_the_text_come_after_the_native_ones_and_all_get_ids() {
        let tools = [crate::core::ToolSpec {
            name: "get_time".into(),
            description: String::new(),
            parameters: json!({"type": "object"}),
        }];
        let mut filter = OutputFilter::for_tools(&tools);
        let mut events = Vec::new();
        filter.push(
            "<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>",
            &mut events,
        );
        let native = ToolCall {
            id: "call_native".into(),
            name: "get_time".into(),
            arguments: json!({}),
        };
        let ending = Ending {
            calls: vec![native],
            stats: Stats {
                completion_tokens: 3,
                ..Stats::default()
            },
            notice: Some("cut short".into()),
            ..Ending::default()
        };
        let reply = assemble(&mut filter, ending, &mut events).expect("not cancelled");
        assert_eq!(reply.tool_calls.len(), 2);
        assert_eq!(reply.tool_calls[0].id, "call_native");
        assert!(!reply.tool_calls[1].id.is_empty());
        assert_ne!(reply.tool_calls[1].id, "call_native");
        assert_eq!(reply.finish, FinishReason::ToolCalls);
        // The notice, then the figures, last.
        let tail: Vec<&Event> = events.iter().rev().take(2).collect();
        assert!(matches!(tail[0], Event::Stats(s) if s.completion_tokens == 3));
        assert!(matches!(tail[1], Event::System(n) if n == "cut short"));
    }
}

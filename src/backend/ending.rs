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
use crate::stream::filter::OutputFilter;
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

/// The one finish rule: a reply with tool calls ends for them; one announced
/// as calls whose calls did not survive parsing (or with no reason at all)
/// simply stopped; any other reason the provider gave stands.
pub fn finish_reason(has_calls: bool, reported: Option<FinishReason>) -> FinishReason {
    match reported {
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
    if filter.finish(sink) == Flow::Cancel {
        return None;
    }
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
        content: filter.content().to_string(),
        thinking: ending.thinking + filter.thinking(),
        finish: finish_reason(!tool_calls.is_empty(), ending.finish),
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
    reply.content = filter.content().to_string();
    reply.thinking = filter.thinking().to_string();
    if reply.finish == FinishReason::Cancelled {
        return;
    }
    reply.tool_calls = filter.take_tool_calls();
    reply.finish = finish_reason(!reply.tool_calls.is_empty(), Some(reply.finish));
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn one_finish_rule_for_every_dialect() {
        use FinishReason::*;
        // (calls, what the provider reported, the reply's reason), with the
        // dialects' words: OpenAI finish_reason, Anthropic stop_reason, Gemini
        // finishReason, Ollama done_reason.
        let table = [
            (true, None, ToolCalls),         // calls, no reason (a cut stream)
            (true, Some(Stop), ToolCalls),   // "stop" / "end_turn" / "STOP" beside calls
            (true, Some(Length), ToolCalls), // calls parsed from a cut-off text
            (false, Some(ToolCalls), Stop),  // "tool_calls" / "tool_use", none survived
            (false, None, Stop),             // no reason at all
            (false, Some(Stop), Stop),       // "stop" / "end_turn" / "STOP"
            (false, Some(Length), Length),   // "length" / "max_tokens" / "MAX_TOKENS"
            (false, Some(Error), Error),     // "content_filter" / "SAFETY" mapped to an error
        ];
        for (calls, reported, expected) in table {
            assert_eq!(
                finish_reason(calls, reported),
                expected,
                "{calls} {reported:?}"
            );
        }
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

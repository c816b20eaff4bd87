//! Reading a Chat Completions reply: the response wire structs and the
//! decoding state ([`ReplyStream`]) that turns SSE chunks, or one whole
//! `chat.completion`, into events and a [`Reply`], reasoning fields and
//! llama-server's `timings` included.

use serde::Deserialize;
use serde_json::Value;

use crate::backend::ending::{assemble, Ending};
use crate::backend::hosted::{self, SseReply};
use crate::backend::http;
use crate::backend::{Reply, Usage};
use crate::core::{BackendError, Event, EventSink, FinishReason, Flow, Stats};
use crate::stream::filter::OutputFilter;
use crate::stream::toolcall::{ToolCallAccumulator, ToolCallDelta};

// ---- response wire structs ----

/// A streamed chunk or a whole completion; every field optional, since
/// compatible servers differ in what they send.
#[derive(Debug, Default, Deserialize)]
pub struct WireResponse {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    timings: Option<WireTimings>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireChoice {
    /// Streamed chunks carry `delta`, whole completions `message`; both have the same fields.
    #[serde(default, alias = "message")]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Debug, Default, Deserialize)]
struct WireToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
struct WireFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    /// A string fragment normally; a few servers send an object.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// llama-server's per-request timings.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct WireTimings {
    #[serde(default)]
    prompt_n: Option<u64>,
    #[serde(default)]
    prompt_per_second: Option<f64>,
    #[serde(default)]
    predicted_n: Option<u64>,
    #[serde(default)]
    predicted_per_second: Option<f64>,
    /// Speculative decoding's drafted and accepted tokens.
    #[serde(default)]
    draft_n: Option<u64>,
    #[serde(default)]
    draft_n_accepted: Option<u64>,
}

/// What one generation has produced so far.
pub struct ReplyStream {
    filter: OutputFilter,
    calls: ToolCallAccumulator,
    /// Reasoning that arrived in its own field (not as `<think>` text).
    reasoning: String,
    finish: Option<FinishReason>,
    usage: Option<WireUsage>,
    timings: Option<WireTimings>,
    context_size: u64,
}

impl ReplyStream {
    fn apply_delta(&mut self, delta: WireDelta, sink: &mut dyn EventSink) -> Flow {
        for reasoning in [delta.reasoning_content, delta.reasoning]
            .into_iter()
            .flatten()
        {
            if reasoning.is_empty() {
                continue;
            }
            self.reasoning.push_str(&reasoning);
            if sink.emit(Event::Thinking(reasoning)) == Flow::Cancel {
                return Flow::Cancel;
            }
        }
        for call in delta.tool_calls.unwrap_or_default() {
            self.push_call(call);
        }
        match delta.content {
            Some(text) if !text.is_empty() => self.filter.push(&text, sink),
            _ => Flow::Continue,
        }
    }

    /// A call without an index but with a new id (whole calls in a
    /// non-streamed reply) starts a new call in the accumulator.
    fn push_call(&mut self, call: WireToolCallDelta) {
        let function = call.function.unwrap_or_default();
        let arguments = match function.arguments {
            Some(Value::String(s)) => Some(s),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        };
        self.calls.push(ToolCallDelta {
            index: call.index,
            id: call.id.as_deref(),
            name: function.name.as_deref(),
            arguments: arguments.as_deref(),
        });
    }

    fn map_finish(&self, reason: &str, sink: &mut dyn EventSink) -> FinishReason {
        match reason {
            "length" => FinishReason::Length,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "content_filter" => {
                let note = "the provider's content filter stopped the reply".to_string();
                sink.emit(Event::System(note));
                FinishReason::Stop
            }
            _ => FinishReason::Stop,
        }
    }

    /// Usage as reported, or as llama-server's timings count it.
    fn usage(&self) -> Option<WireUsage> {
        self.usage.or_else(|| {
            let t = self.timings?;
            Some(WireUsage {
                prompt_tokens: t.prompt_n?,
                completion_tokens: t.predicted_n?,
            })
        })
    }

    fn stats(&self) -> Stats {
        let usage = self.usage().unwrap_or_default();
        let timings = self.timings.unwrap_or_default();
        Stats {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            prefill_tps: timings.prompt_per_second,
            decode_tps: timings.predicted_per_second,
            context_used: usage.prompt_tokens + usage.completion_tokens,
            context_size: self.context_size,
            cached_tokens: 0,
            draft_tokens: timings.draft_n.unwrap_or(0),
            draft_accepted: timings.draft_n_accepted.unwrap_or(0),
            provider: None,
        }
    }
}

/// Read until `[DONE]`; a stream without it is accepted when a finish reason
/// arrived (see the module docs).
impl SseReply for ReplyStream {
    type Event = WireResponse;
    const END: Option<&'static str> = Some("[DONE]");

    fn new(filter: OutputFilter, context_size: u64) -> Self {
        ReplyStream {
            filter,
            calls: ToolCallAccumulator::new(),
            reasoning: String::new(),
            finish: None,
            usage: None,
            timings: None,
            context_size,
        }
    }

    fn parse(data: &str) -> Result<WireResponse, BackendError> {
        parse_json(data)
    }

    /// Applies one chunk (or a whole completion).
    fn apply(
        &mut self,
        response: WireResponse,
        sink: &mut dyn EventSink,
    ) -> Result<Flow, BackendError> {
        if let Some(error) = response.error.filter(|e| !e.is_null()) {
            return Err(http::error_from_value(
                &serde_json::json!({ "error": error }),
            ));
        }
        self.usage = response.usage.or(self.usage);
        self.timings = response.timings.or(self.timings);
        for choice in response.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason.as_deref() {
                self.finish = Some(self.map_finish(reason, sink));
            }
            if let Some(delta) = choice.delta {
                if self.apply_delta(delta, sink) == Flow::Cancel {
                    return Ok(Flow::Cancel);
                }
            }
        }
        Ok(Flow::Continue)
    }

    fn missing(&self, closed: bool) -> Option<&'static str> {
        (!closed && self.finish.is_none()).then_some("the reply was complete")
    }

    fn cancelled(self) -> Reply {
        hosted::cancelled_reply(&self.filter, self.reasoning)
    }

    fn complete(mut self, sink: &mut dyn EventSink) -> Reply {
        let ending = Ending {
            calls: std::mem::take(&mut self.calls).finish(),
            thinking: self.reasoning.clone(),
            finish: self.finish,
            usage: self.usage().map(|u| Usage {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
            }),
            stats: self.stats(),
            ..Ending::default()
        };
        match assemble(&mut self.filter, ending, sink) {
            Some(reply) => reply,
            None => self.cancelled(),
        }
    }
}

fn parse_json(text: &str) -> Result<WireResponse, BackendError> {
    serde_json::from_str(text).map_err(|e| {
        let start: String = text.chars().take(200).collect();
        BackendError::Protocol(format!("bad JSON from the server ({e}): {start}"))
    })
}

/// The fuzzer's entry (`crate::fuzz`).
#[cfg(test)]
pub(crate) fn fuzz_reply(bytes: &[u8]) {
    hosted::fuzz_sse::<ReplyStream>(bytes);
}

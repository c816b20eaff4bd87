//! Reading a Messages reply: the response wire structs and the decoding
//! state ([`ReplyStream`]) that turns the named SSE events, or one whole
//! message replayed as those events, into events and a [`Reply`], with the
//! thinking blocks kept as artefacts.

use serde::Deserialize;
use serde_json::Value;

use crate::backend::ending::{assemble, counted_stats, Ending};
use crate::backend::hosted::{self, SseReply};
use crate::backend::http;
use crate::backend::{Reply, Usage};
use crate::core::{Artefact, BackendError, Event, EventSink, FinishReason, Flow};
use crate::stream::filter::OutputFilter;
use crate::stream::toolcall::{ToolCallAccumulator, ToolCallDelta};
use crate::util::log::{self, Category};

/// The backend kind, also the origin tag of the artefacts a reply stores
/// (only these are sent back, and only to an `anthropic` backend).
pub const KIND: &str = "anthropic";

// ---- response wire structs ----

/// One streamed event, by its `type`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum StreamEvent {
    MessageStart {
        message: WireMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: WireBlockStart,
    },
    ContentBlockDelta {
        index: usize,
        delta: WireDelta,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: WireMessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    #[serde(other)]
    Ignored,
}

/// `message_start`'s message, and a whole non-streamed reply.
#[derive(Debug, Default, Deserialize)]
pub struct WireMessage {
    #[serde(default)]
    content: Vec<WireBlockStart>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireBlockStart {
    Text {
        #[serde(default)]
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    Thinking {
        #[serde(default)]
        thinking: String,
        #[serde(default)]
        signature: String,
    },
    RedactedThinking {
        data: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum WireDelta {
    TextDelta {
        text: String,
    },
    InputJsonDelta {
        partial_json: String,
    },
    ThinkingDelta {
        thinking: String,
    },
    SignatureDelta {
        signature: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Deserialize)]
pub struct WireMessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
pub struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

/// A thinking block being streamed.
#[derive(Debug, Default)]
struct OpenThinking {
    index: usize,
    text: String,
    signature: String,
}

/// What one generation has produced so far.
pub struct ReplyStream {
    filter: OutputFilter,
    calls: ToolCallAccumulator,
    thinking: String,
    open: Vec<OpenThinking>,
    artefacts: Vec<Artefact>,
    finish: Option<FinishReason>,
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    stopped: bool,
    context_size: u64,
}

impl ReplyStream {
    fn usage(&mut self, usage: Option<WireUsage>) {
        let Some(usage) = usage else { return };
        if let Some(input) = usage.input_tokens {
            let cached = usage.cache_creation_input_tokens.unwrap_or(0)
                + usage.cache_read_input_tokens.unwrap_or(0);
            self.prompt_tokens = Some(input + cached);
        }
        // `output_tokens` is cumulative, so the last one counts.
        self.completion_tokens = usage.output_tokens.or(self.completion_tokens);
    }

    fn start_block(
        &mut self,
        index: usize,
        block: WireBlockStart,
        sink: &mut dyn EventSink,
    ) -> Flow {
        match block {
            WireBlockStart::Text { text } => return self.text(&text, sink),
            WireBlockStart::ToolUse { id, name, input } => {
                // Streamed calls start with `input: {}` and send the JSON as deltas.
                let whole = input.as_object().is_some_and(|o| !o.is_empty());
                let arguments = whole.then(|| input.to_string());
                self.calls.push(ToolCallDelta {
                    index: Some(index),
                    id: Some(&id),
                    name: Some(&name),
                    arguments: arguments.as_deref(),
                });
            }
            WireBlockStart::Thinking {
                thinking,
                signature,
            } => {
                self.open.push(OpenThinking {
                    index,
                    text: String::new(),
                    signature,
                });
                return self.think(index, thinking, sink);
            }
            WireBlockStart::RedactedThinking { data } => {
                self.artefacts.push(Artefact::RedactedThinking {
                    origin: KIND.into(),
                    data,
                })
            }
            WireBlockStart::Other => {}
        }
        Flow::Continue
    }

    fn delta(&mut self, index: usize, delta: WireDelta, sink: &mut dyn EventSink) -> Flow {
        match delta {
            WireDelta::TextDelta { text } => return self.text(&text, sink),
            WireDelta::InputJsonDelta { partial_json } => self.calls.push(ToolCallDelta {
                index: Some(index),
                arguments: Some(&partial_json),
                ..ToolCallDelta::default()
            }),
            WireDelta::ThinkingDelta { thinking } => return self.think(index, thinking, sink),
            WireDelta::SignatureDelta { signature } => {
                if let Some(open) = self.open.iter_mut().find(|o| o.index == index) {
                    open.signature.push_str(&signature);
                }
            }
            WireDelta::Other => {}
        }
        Flow::Continue
    }

    fn text(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        if text.is_empty() {
            return Flow::Continue;
        }
        self.filter.push(text, sink)
    }

    fn think(&mut self, index: usize, text: String, sink: &mut dyn EventSink) -> Flow {
        if text.is_empty() {
            return Flow::Continue;
        }
        if let Some(open) = self.open.iter_mut().find(|o| o.index == index) {
            open.text.push_str(&text);
        }
        self.thinking.push_str(&text);
        sink.emit(Event::Thinking(text))
    }

    /// A finished thinking block becomes an artefact; other blocks need nothing.
    fn stop_block(&mut self, index: usize) {
        if let Some(at) = self.open.iter().position(|o| o.index == index) {
            let open = self.open.remove(at);
            self.artefacts.push(Artefact::Thinking {
                origin: KIND.into(),
                text: open.text,
                signature: open.signature,
            });
        }
    }

    fn reply_usage(&self) -> Option<Usage> {
        if self.prompt_tokens.is_none() && self.completion_tokens.is_none() {
            return None;
        }
        Some(Usage {
            prompt_tokens: self.prompt_tokens.unwrap_or(0),
            completion_tokens: self.completion_tokens.unwrap_or(0),
        })
    }
}

/// Read until `message_stop`, which must come; `ping` and unknown events are ignored.
impl SseReply for ReplyStream {
    type Event = StreamEvent;

    fn new(filter: OutputFilter, context_size: u64) -> Self {
        ReplyStream {
            filter,
            calls: ToolCallAccumulator::new(),
            thinking: String::new(),
            open: Vec::new(),
            artefacts: Vec::new(),
            finish: None,
            prompt_tokens: None,
            completion_tokens: None,
            stopped: false,
            context_size,
        }
    }

    /// One event's data: an `error` event becomes its typed error.
    fn parse(data: &str) -> Result<StreamEvent, BackendError> {
        let value = http::parse_json(data)?;
        if value["type"] == "error" {
            return Err(http::error_from_value(&value));
        }
        serde_json::from_value(value)
            .map_err(|e| BackendError::Protocol(format!("bad event from the server ({e})")))
    }

    fn apply(
        &mut self,
        event: StreamEvent,
        sink: &mut dyn EventSink,
    ) -> Result<Flow, BackendError> {
        match event {
            StreamEvent::MessageStart { message } => self.usage(message.usage),
            StreamEvent::ContentBlockStart {
                index,
                content_block,
            } => return Ok(self.start_block(index, content_block, sink)),
            StreamEvent::ContentBlockDelta { index, delta } => {
                return Ok(self.delta(index, delta, sink))
            }
            StreamEvent::ContentBlockStop { index } => self.stop_block(index),
            StreamEvent::MessageDelta { delta, usage } => {
                self.usage(usage);
                if let Some(reason) = delta.stop_reason {
                    self.finish = Some(map_stop(&reason, sink));
                }
            }
            StreamEvent::MessageStop => self.stopped = true,
            StreamEvent::Ignored => {}
        }
        Ok(Flow::Continue)
    }

    fn ended(&self) -> bool {
        self.stopped
    }

    fn missing(&self, _: bool) -> Option<&'static str> {
        (!self.stopped).then_some("message_stop")
    }

    fn cancelled(self) -> Reply {
        hosted::cancelled_reply(&self.filter, self.thinking)
    }

    fn complete(mut self, sink: &mut dyn EventSink) -> Reply {
        let usage = self.reply_usage();
        let ending = Ending {
            calls: std::mem::take(&mut self.calls).finish(),
            thinking: self.thinking.clone(),
            finish: self.finish,
            usage,
            stats: counted_stats(usage, self.context_size),
            artefacts: std::mem::take(&mut self.artefacts),
            notice: None,
        };
        match assemble(&mut self.filter, ending, sink) {
            Some(reply) => reply,
            None => self.cancelled(),
        }
    }

    /// Reads a whole message by replaying it as the events a stream would have carried.
    fn read_whole(
        mut self,
        body: impl std::io::Read,
        sink: &mut dyn EventSink,
        url: &str,
    ) -> Result<Reply, BackendError> {
        let text = http::read_text(body, url)?;
        let message: WireMessage = serde_json::from_value(http::parse_json(&text)?)
            .map_err(|e| BackendError::Protocol(format!("{url}: bad message ({e})")))?;
        let stop_reason = message.stop_reason.clone();
        let mut events = vec![StreamEvent::MessageStart {
            message: WireMessage {
                usage: message.usage,
                ..WireMessage::default()
            },
        }];
        for (index, block) in message.content.into_iter().enumerate() {
            events.push(StreamEvent::ContentBlockStart {
                index,
                content_block: block,
            });
            events.push(StreamEvent::ContentBlockStop { index });
        }
        events.push(StreamEvent::MessageDelta {
            delta: WireMessageDelta { stop_reason },
            usage: None,
        });
        for event in events {
            if self.apply(event, sink)? == Flow::Cancel {
                return Ok(self.cancelled());
            }
        }
        Ok(self.complete(sink))
    }
}

/// Maps `stop_reason`, telling the user about the unusual ones.
fn map_stop(reason: &str, sink: &mut dyn EventSink) -> FinishReason {
    let note = match reason {
        "end_turn" | "stop_sequence" | "pause_turn" => return FinishReason::Stop,
        "tool_use" => return FinishReason::ToolCalls,
        "max_tokens" => return FinishReason::Length,
        "model_context_window_exceeded" => "the reply filled the model's context window",
        "refusal" => "the model declined to answer",
        other => {
            log::debug(Category::Llm, || format!("unknown stop_reason {other}"));
            return FinishReason::Stop;
        }
    };
    sink.emit(Event::System(note.into()));
    if reason == "refusal" {
        FinishReason::Stop
    } else {
        FinishReason::Length
    }
}

/// The fuzzer's entry (`crate::fuzz`).
#[cfg(test)]
pub(crate) fn fuzz_reply(bytes: &[u8]) {
    hosted::fuzz_sse::<ReplyStream>(bytes);
}

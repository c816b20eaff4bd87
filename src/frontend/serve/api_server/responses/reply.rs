//! [`ResponsesWriter`]: a Responses API answer, whole (a `response` object,
//! kept in the [`super::super::stored`] store when asked) or as its stream's
//! `response.*` events, each numbered in sequence.

use std::io;
use std::sync::Arc;

use serde_json::{Map, Value};

use super::super::error::ApiError;
use super::super::stored::Store;
use super::super::text::{Assembler, Piece};
use super::super::tool_types::{self, ToolKinds};
use super::super::wire::encode;
use super::super::wire::openai::Timings;
use super::super::wire::responses as wire;
use super::super::writer::ReplyWriter;
use super::super::Usage;
use crate::backend::Reply;
use crate::core::{FinishReason, PromptProgress, TokenLogprobs, ToolCall};
use crate::frontend::serve::http::{Responder, SseStream};

/// What kind of output item is open in a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Reasoning,
    Message,
}

/// An output item streamed so far: its kind, id and text.
#[derive(Debug)]
struct Streamed {
    kind: Kind,
    id: String,
    text: String,
}

/// Writes one response, whole or as events.
pub struct ResponsesWriter {
    pub id: String,
    pub created: u64,
    pub model: String,
    echo: Map<String, Value>,
    sequence: u64,
    /// The items streamed so far; the last is open while `open` says so.
    items: Vec<Streamed>,
    open: bool,
    /// Which offered tools were custom or `local_shell`.
    kinds: ToolKinds,
    /// Where the finished response is kept, with the input items it read.
    keep: Option<(Arc<Store>, Vec<Value>)>,
}

impl ResponsesWriter {
    pub fn new(
        id: String,
        created: u64,
        model: String,
        echo: Map<String, Value>,
    ) -> ResponsesWriter {
        ResponsesWriter {
            id,
            created,
            model,
            echo,
            sequence: 0,
            items: Vec::new(),
            open: false,
            kinds: ToolKinds::default(),
            keep: None,
        }
    }

    /// The answer of a request whose response is kept in `store`, with the
    /// input items it read (`None`: not kept).
    pub fn kept_in(self, store: &Arc<Store>, items: Option<Vec<Value>>) -> ResponsesWriter {
        let keep = items.map(|items| (store.clone(), items));
        ResponsesWriter { keep, ..self }
    }

    /// Stores a finished response, when its request is to be kept.
    pub fn keep(&self, response: &wire::Response<'_>) {
        if let Some((store, items)) = &self.keep {
            store.keep_response(&self.id, response, items);
        }
    }

    /// The answer of a request whose tools were of `kinds`.
    pub fn with_kinds(self, kinds: ToolKinds) -> ResponsesWriter {
        ResponsesWriter { kinds, ..self }
    }

    /// A call's item id (`fc_`, `ctc_` or `lsc_`), its text as streamed
    /// (arguments, a custom tool's input; none for `local_shell`), and its item.
    fn call_item<'a>(
        &self,
        index: usize,
        call: &'a ToolCall,
        done: bool,
    ) -> (String, Option<String>, wire::Item<'a>) {
        let status = if done { "completed" } else { "in_progress" };
        if self.kinds.is_custom(&call.name) {
            let id = self.item_id("ctc", index);
            let input = tool_types::custom_input(call);
            let item = wire::Item::CustomToolCall {
                id: id.clone(),
                call_id: &call.id,
                name: &call.name,
                input: if done { input.clone() } else { String::new() },
                status,
            };
            return (id, Some(input), item);
        }
        if self.kinds.is_local_shell(&call.name) {
            let id = self.item_id("lsc", index);
            let item = wire::Item::LocalShellCall {
                id: id.clone(),
                call_id: &call.id,
                status,
                action: tool_types::local_shell_action(call),
            };
            return (id, None, item);
        }
        let id = self.item_id("fc", index);
        let arguments = call.arguments.to_string();
        let shown = if done {
            arguments.clone()
        } else {
            String::new()
        };
        let item = function_item(id.clone(), call, shown, status);
        (id, Some(arguments), item)
    }

    fn item_id(&self, prefix: &str, index: usize) -> String {
        let stem = self.id.strip_prefix("resp_").unwrap_or(&self.id);
        format!("{prefix}_{stem}{index}")
    }

    fn send(&mut self, sse: &mut SseStream, event: wire::Event<'_>) -> io::Result<()> {
        self.send_with(sse, event, None)
    }

    /// Sends `event` with llama-server's figures (`timings_per_token`).
    fn send_with(
        &mut self,
        sse: &mut SseStream,
        event: wire::Event<'_>,
        timings: Option<Timings>,
    ) -> io::Result<()> {
        let name = event.name();
        let sequenced = wire::Sequenced {
            event,
            sequence_number: self.sequence,
            timings,
            prompt_progress: None,
        };
        self.sequence += 1;
        sse.send_event(name, &encode(&sequenced))
    }

    /// The `response` object with `output`, its status and usage.
    fn response<'a>(
        &'a self,
        output: Vec<wire::Item<'a>>,
        finished: Option<(&Reply, &Usage)>,
    ) -> wire::Response<'a> {
        let incomplete = finished.is_some_and(|(reply, _)| reply.finish == FinishReason::Length);
        wire::Response {
            id: &self.id,
            object: "response",
            created_at: self.created,
            status: match finished {
                None => "in_progress",
                Some(_) if incomplete => "incomplete",
                Some(_) => "completed",
            },
            model: &self.model,
            output,
            usage: finished.map(|(_, usage)| wire_usage(usage)),
            incomplete_details: incomplete.then_some(wire::Incomplete {
                reason: "max_output_tokens",
            }),
            error: None,
            echo: &self.echo,
        }
    }

    fn open_item(&mut self, sse: &mut SseStream, kind: Kind) -> io::Result<()> {
        let index = self.items.len();
        let prefix = if kind == Kind::Message { "msg" } else { "rs" };
        let id = self.item_id(prefix, index);
        let (item, part) = match kind {
            Kind::Message => (
                message_item(id.clone(), "in_progress", Vec::new()),
                output_text(""),
            ),
            Kind::Reasoning => (reasoning_item(id.clone(), Vec::new()), reasoning_text("")),
        };
        self.send(
            sse,
            wire::Event::ItemAdded {
                output_index: index,
                item,
            },
        )?;
        self.send(
            sse,
            wire::Event::PartAdded {
                item_id: &id,
                output_index: index,
                content_index: 0,
                part,
            },
        )?;
        self.items.push(Streamed {
            kind,
            id,
            text: String::new(),
        });
        self.open = true;
        Ok(())
    }

    /// Ends the open item: its text's `done`, its part's, its own.
    fn close(&mut self, sse: &mut SseStream) -> io::Result<()> {
        if !self.open {
            return Ok(());
        }
        self.open = false;
        let index = self.items.len() - 1;
        let Streamed { kind, id, text } = &self.items[index];
        let (kind, id, text) = (*kind, id.clone(), text.clone());
        let (done, part, item) = match kind {
            Kind::Message => (
                wire::Event::TextDone {
                    item_id: &id,
                    output_index: index,
                    content_index: 0,
                    text: &text,
                },
                output_text(&text),
                message_item(id.clone(), "completed", vec![output_text(&text)]),
            ),
            Kind::Reasoning => (
                wire::Event::ReasoningDone {
                    item_id: &id,
                    output_index: index,
                    content_index: 0,
                    text: &text,
                },
                reasoning_text(&text),
                reasoning_item(id.clone(), vec![reasoning_text(&text)]),
            ),
        };
        self.send(sse, done)?;
        let part_done = wire::Event::PartDone {
            item_id: &id,
            output_index: index,
            content_index: 0,
            part,
        };
        self.send(sse, part_done)?;
        self.send(
            sse,
            wire::Event::ItemDone {
                output_index: index,
                item,
            },
        )
    }

    fn calls<'a>(&self, reply: &'a Reply, first: usize) -> Vec<wire::Item<'a>> {
        let items = reply.tool_calls.iter().enumerate();
        items
            .map(|(k, call)| self.call_item(first + k, call, true).2)
            .collect()
    }

    /// The whole `response`.
    pub fn whole<'a>(
        &'a self,
        text: &'a Assembler,
        reply: &'a Reply,
        usage: &Usage,
    ) -> wire::Response<'a> {
        let mut output = Vec::new();
        if !text.reasoning.is_empty() {
            let content = vec![reasoning_text(&text.reasoning)];
            output.push(reasoning_item(self.item_id("rs", output.len()), content));
        }
        if !text.text.is_empty() || reply.tool_calls.is_empty() {
            let content = vec![output_text(&text.text)];
            let id = self.item_id("msg", output.len());
            output.push(message_item(id, "completed", content));
        }
        let first = output.len();
        output.extend(self.calls(reply, first));
        self.response(output, Some((reply, usage)))
    }
}

impl ReplyWriter for ResponsesWriter {
    fn start(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        _prefilled: Option<(u64, u64)>,
    ) -> io::Result<()> {
        let created = wire::Event::Created {
            response: self.response(Vec::new(), None),
        };
        let created = encode(&wire::Sequenced {
            event: created,
            sequence_number: 0,
            timings: None,
            prompt_progress: None,
        });
        let in_progress = encode(&wire::Sequenced {
            event: wire::Event::InProgress {
                response: self.response(Vec::new(), None),
            },
            sequence_number: 1,
            timings: None,
            prompt_progress: None,
        });
        self.sequence = 2;
        sse.send_event("response.created", &created)?;
        sse.send_event("response.in_progress", &in_progress)
    }
    /// How far the prompt is: `response.in_progress` with `prompt_progress`, as
    /// llama-server sends it.
    fn progress(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        prompt: &PromptProgress,
        timings: Option<Timings>,
    ) -> io::Result<()> {
        // The response borrows `self`: written before the count moves on.
        let sequenced = wire::Sequenced {
            event: wire::Event::InProgress {
                response: self.response(Vec::new(), None),
            },
            sequence_number: self.sequence,
            timings,
            prompt_progress: Some(super::super::wire::openai::wire_progress(prompt)),
        };
        let text = encode(&sequenced);
        self.sequence += 1;
        sse.send_event("response.in_progress", &text)
    }
    fn piece(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        piece: Piece,
        _logprobs: &[TokenLogprobs],
        timings: Option<Timings>,
    ) -> io::Result<()> {
        let (kind, delta) = match piece {
            Piece::Text(text) => (Kind::Message, text),
            Piece::Reasoning(text) => (Kind::Reasoning, text),
        };
        if !self.open || self.items.last().map(|i| i.kind) != Some(kind) {
            self.close(sse)?;
            self.open_item(sse, kind)?;
        }
        let index = self.items.len() - 1;
        let id = self.items[index].id.clone();
        self.items[index].text.push_str(&delta);
        let event = match kind {
            Kind::Message => wire::Event::TextDelta {
                item_id: &id,
                output_index: index,
                content_index: 0,
                delta: &delta,
            },
            Kind::Reasoning => wire::Event::ReasoningDelta {
                item_id: &id,
                output_index: index,
                content_index: 0,
                delta: &delta,
            },
        };
        self.send_with(sse, event, timings)
    }
    /// The tool calls as items, then `response.completed` (or `.incomplete`).
    fn finish(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        reply: &Reply,
        usage: &Usage,
    ) -> io::Result<()> {
        self.close(sse)?;
        let first = self.items.len();
        for (k, call) in reply.tool_calls.iter().enumerate() {
            let index = first + k;
            let (id, text, added) = self.call_item(index, call, false);
            self.send(
                sse,
                wire::Event::ItemAdded {
                    output_index: index,
                    item: added,
                },
            )?;
            let custom = self.kinds.is_custom(&call.name);
            if let Some(text) = &text {
                let (delta, done) = if custom {
                    (
                        wire::Event::CustomInputDelta {
                            item_id: &id,
                            output_index: index,
                            delta: text,
                        },
                        wire::Event::CustomInputDone {
                            item_id: &id,
                            output_index: index,
                            input: text,
                        },
                    )
                } else {
                    (
                        wire::Event::ArgumentsDelta {
                            item_id: &id,
                            output_index: index,
                            delta: text,
                        },
                        wire::Event::ArgumentsDone {
                            item_id: &id,
                            output_index: index,
                            arguments: text,
                        },
                    )
                };
                self.send(sse, delta)?;
                self.send(sse, done)?;
            }
            let (_, _, item) = self.call_item(index, call, true);
            self.send(
                sse,
                wire::Event::ItemDone {
                    output_index: index,
                    item,
                },
            )?;
        }
        let mut output: Vec<wire::Item<'_>> = self.items.iter().map(streamed_item).collect();
        output.extend(self.calls(reply, first));
        let response = self.response(output, Some((reply, usage)));
        self.keep(&response);
        let event = if response.status == "incomplete" {
            wire::Event::Incomplete { response }
        } else {
            wire::Event::Completed { response }
        };
        let name = event.name();
        let sequenced = wire::Sequenced {
            event,
            sequence_number: self.sequence,
            timings: super::super::wire::openai::wire_timings(usage),
            prompt_progress: None,
        };
        sse.send_event(name, &encode(&sequenced))
    }
    /// An error after the stream started: the `error` event.
    fn fail(&mut self, sse: &mut SseStream, error: &ApiError) -> io::Result<()> {
        let event = wire::Event::Error {
            code: error.code.as_deref(),
            message: &error.message,
            param: error.param.as_deref(),
        };
        self.send(sse, event)
    }

    fn respond(
        &self,
        responder: Responder,
        (text, reply): (&Assembler, &Reply),
        _choices: &[(Assembler, Reply)],
        usage: &Usage,
    ) {
        let response = self.whole(text, reply, usage);
        self.keep(&response);
        responder.json(200, &response);
    }
}

fn output_text(text: &str) -> wire::Part<'_> {
    wire::Part::OutputText {
        text,
        annotations: [],
    }
}

fn reasoning_text(text: &str) -> wire::Part<'_> {
    wire::Part::ReasoningText { text }
}

fn message_item<'a>(
    id: String,
    status: &'static str,
    content: Vec<wire::Part<'a>>,
) -> wire::Item<'a> {
    wire::Item::Message {
        id,
        status,
        role: "assistant",
        content,
    }
}

fn reasoning_item<'a>(id: String, content: Vec<wire::Part<'a>>) -> wire::Item<'a> {
    wire::Item::Reasoning {
        id,
        summary: [],
        content,
    }
}

fn function_item<'a>(
    id: String,
    call: &'a ToolCall,
    arguments: String,
    status: &'static str,
) -> wire::Item<'a> {
    wire::Item::FunctionCall {
        id,
        call_id: &call.id,
        name: &call.name,
        arguments,
        status,
    }
}

fn streamed_item(item: &Streamed) -> wire::Item<'_> {
    match item.kind {
        Kind::Message => message_item(item.id.clone(), "completed", vec![output_text(&item.text)]),
        Kind::Reasoning => reasoning_item(item.id.clone(), vec![reasoning_text(&item.text)]),
    }
}

fn wire_usage(usage: &Usage) -> wire::Usage {
    wire::Usage {
        input_tokens: usage.prompt,
        input_tokens_details: wire::InputDetails {
            cached_tokens: usage.cached.unwrap_or(0),
        },
        output_tokens: usage.completion,
        output_tokens_details: wire::OutputDetails {
            reasoning_tokens: 0,
        },
        total_tokens: usage.prompt + usage.completion,
    }
}

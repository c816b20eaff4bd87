//! [`OllamaWriter`]: an answer of Ollama's `/api/chat` or `/api/generate`,
//! whole (one JSON object) or streamed (NDJSON lines, the last with
//! `done: true` and the figures).

use std::io;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::super::error::ApiError;
use super::super::text::{Assembler, Piece};
use super::super::wire::encode;
use super::super::wire::openai::Timings;
use super::super::writer::ReplyWriter;
use super::super::Usage;
use super::{wire, Route};
use crate::backend::Reply;
use crate::core::{FinishReason, TokenLogprobs, ToolCall};
use crate::frontend::serve::http::{Responder, SseStream};

/// Writes one generation's answer in Ollama's shape.
pub struct OllamaWriter {
    pub model: String,
    pub route: Route,
    pub hide_thinking: bool,
    /// When the request arrived (`total_duration`).
    pub started: Instant,
}

fn done_reason(reply: &Reply) -> &'static str {
    match reply.finish {
        FinishReason::Length => "length",
        _ => "stop",
    }
}

/// RFC 3339 in UTC with nanoseconds, as Ollama writes `created_at`.
pub(super) fn timestamp(at: SystemTime) -> String {
    let since = at.duration_since(UNIX_EPOCH).unwrap_or_default();
    let seconds = crate::util::time::strftime("%Y-%m-%dT%H:%M:%S", since.as_secs() as i64);
    format!("{seconds}.{:09}Z", since.subsec_nanos())
}

fn wire_calls(calls: &[ToolCall]) -> Vec<wire::ToolCall<'_>> {
    calls
        .iter()
        .enumerate()
        .map(|(index, call)| wire::ToolCall {
            id: &call.id,
            function: wire::Function {
                index,
                name: &call.name,
                arguments: match &call.arguments {
                    Value::String(raw) => {
                        serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone()))
                    }
                    other => other.clone(),
                },
            },
        })
        .collect()
}

impl OllamaWriter {
    /// A line with `text` (or `thinking`) and, for chat, `calls`.
    pub(super) fn line<'a>(
        &'a self,
        text: &'a str,
        thinking: Option<&'a str>,
        calls: Vec<wire::ToolCall<'a>>,
    ) -> wire::Line<'a> {
        let thinking = thinking.filter(|t| !t.is_empty() && !self.hide_thinking);
        let (message, response, top_thinking) = match self.route {
            Route::Chat => (
                Some(wire::OutMessage {
                    role: "assistant",
                    content: text,
                    thinking,
                    tool_calls: calls,
                }),
                None,
                None,
            ),
            Route::Generate => (None, Some(text), thinking),
        };
        wire::Line {
            model: &self.model,
            created_at: timestamp(SystemTime::now()),
            message,
            response,
            thinking: top_thinking,
            done: false,
            figures: None,
        }
    }

    /// The figures of the last line, in nanoseconds. Speeds the backend
    /// measured give the prompt's and the answer's durations; without them the
    /// answer is given the whole time.
    fn figures(&self, reply: &Reply, usage: &Usage) -> wire::Figures {
        let total = self.started.elapsed().as_nanos() as u64;
        let nanos = |secs: Option<f64>| secs.map(|s| (s * 1e9) as u64);
        let prompt_eval_duration = nanos(usage.prompt_secs()).unwrap_or(0);
        let eval_duration = nanos(usage.generation_secs())
            .unwrap_or_else(|| total.saturating_sub(prompt_eval_duration))
            .max(1);
        wire::Figures {
            done_reason: done_reason(reply),
            total_duration: total,
            load_duration: 0,
            prompt_eval_count: usage.prompt,
            prompt_eval_duration,
            eval_count: usage.completion,
            eval_duration,
        }
    }

    pub fn whole<'a>(
        &'a self,
        text: &'a Assembler,
        reply: &'a Reply,
        usage: &Usage,
    ) -> wire::Line<'a> {
        let calls = match self.route {
            Route::Chat => wire_calls(&reply.tool_calls),
            Route::Generate => Vec::new(),
        };
        wire::Line {
            done: true,
            figures: Some(self.figures(reply, usage)),
            ..self.line(&text.text, Some(&text.reasoning), calls)
        }
    }

    /// The answer to a request with nothing to generate: the model is loaded,
    /// or with `keep_alive: 0` unloaded.
    pub(super) fn loaded(&self, unloaded: bool) -> wire::Line<'_> {
        wire::Line {
            done: true,
            figures: Some(wire::Figures {
                done_reason: if unloaded { "unload" } else { "load" },
                ..wire::Figures::default()
            }),
            ..self.line("", None, Vec::new())
        }
    }
}

impl ReplyWriter for OllamaWriter {
    fn piece(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        piece: Piece,
        _logprobs: &[TokenLogprobs],
        _timings: Option<Timings>,
    ) -> io::Result<()> {
        let line = match &piece {
            Piece::Text(text) => self.line(text, None, Vec::new()),
            Piece::Reasoning(_) if self.hide_thinking => return Ok(()),
            Piece::Reasoning(text) => self.line("", Some(text), Vec::new()),
        };
        sse.send(&encode(&line))
    }
    /// The tool calls (one line, whole), then the last line with the figures.
    fn finish(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        reply: &Reply,
        usage: &Usage,
    ) -> io::Result<()> {
        if self.route == Route::Chat && !reply.tool_calls.is_empty() {
            sse.send(&encode(&self.line("", None, wire_calls(&reply.tool_calls))))?;
        }
        let last = wire::Line {
            done: true,
            figures: Some(self.figures(reply, usage)),
            ..self.line("", None, Vec::new())
        };
        sse.send(&encode(&last))
    }
    /// An error after the stream started: a line `{"error": "..."}`.
    fn fail(&mut self, sse: &mut SseStream, error: &ApiError) -> io::Result<()> {
        sse.send(&encode(&error.ollama_body()))
    }

    fn ndjson(&self) -> bool {
        true
    }

    fn error(&self, responder: Responder, error: &ApiError) {
        responder.json_with(error.status, &error.ollama_body(), &error.headers());
    }

    fn respond(
        &self,
        responder: Responder,
        (text, reply): (&Assembler, &Reply),
        _choices: &[(Assembler, Reply)],
        usage: &Usage,
    ) {
        responder.json(200, &self.whole(text, reply, usage));
    }
}

// ---------------------------------------------------------------------------
// The model routes.

//! [`ChatWriter`]: a chat completion's answer, whole (`chat.completion`) or
//! streamed (`chat.completion.chunk` events, then `[DONE]`).

use std::io;

use serde_json::Value;

use super::super::native;
use super::super::text::{Assembler, Piece};
use super::super::tool_types::{self, ToolKinds};
use super::super::wire::openai::{
    self as wire, finish_reason, wire_logprobs, wire_progress, wire_timings, wire_usage,
};
use super::super::wire::{encode, Null};
use super::super::writer::ReplyWriter;
use super::super::Usage;
use crate::backend::Reply;
use crate::core::{PromptProgress, TokenLogprobs, ToolCall};
use crate::frontend::serve::http::{Responder, SseStream};

/// Writes one request's answer; `id`, `created` and `model` are shared by
/// every chunk.
pub struct ChatWriter {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub include_usage: bool,
    /// The request asked for `logprobs`.
    pub logprobs: bool,
    /// What the offered tools were: custom calls and legacy `functions`
    /// answer in their own shape.
    pub kinds: ToolKinds,
    /// With `verbose` (or `--verbose`): the native answer a whole answer
    /// repeats as `__verbose`, its prompt the rendered one.
    pub verbose: Option<native::NativeWriter>,
}

fn wire_function(call: &ToolCall) -> wire::FunctionCall<'_> {
    wire::FunctionCall {
        name: &call.name,
        arguments: match &call.arguments {
            Value::String(raw) => raw.clone(),
            other => other.to_string(),
        },
    }
}

/// The calls as `tool_calls` (custom tools' as `custom`), or, for a request
/// that sent legacy `functions`, the first as `function_call`.
pub(super) fn wire_calls<'a>(
    calls: &'a [ToolCall],
    streamed: bool,
    kinds: &ToolKinds,
) -> (Vec<wire::ToolCall<'a>>, Option<wire::FunctionCall<'a>>) {
    if kinds.legacy {
        return (Vec::new(), calls.first().map(wire_function));
    }
    let calls = calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let custom = kinds.is_custom(&call.name);
            wire::ToolCall {
                id: &call.id,
                kind: if custom { "custom" } else { "function" },
                function: (!custom).then(|| wire_function(call)),
                custom: custom.then(|| wire::CustomCall {
                    name: &call.name,
                    input: tool_types::custom_input(call),
                }),
                index: streamed.then_some(i),
            }
        })
        .collect();
    (calls, None)
}

impl ChatWriter {
    /// [`finish_reason`], legacy `function_call` for a request that sent
    /// `functions`.
    fn finish_reason(&self, reply: &Reply) -> &'static str {
        match finish_reason(reply) {
            "tool_calls" if self.kinds.legacy => "function_call",
            reason => reason,
        }
    }

    pub(super) fn chunk<'a>(
        &'a self,
        index: u32,
        delta: wire::Delta<'a>,
        finish: Option<&'static str>,
    ) -> wire::Chunk<'a> {
        wire::Chunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            system_fingerprint: super::super::FINGERPRINT,
            choices: [wire::ChunkChoice {
                index,
                delta,
                logprobs: None,
                finish_reason: finish,
            }],
            timings: None,
            prompt_progress: None,
        }
    }

    /// `logprobs` for `probs`: `None` (null) unless the request asked for them.
    fn logprobs<'a>(&self, probs: &'a [TokenLogprobs]) -> Option<wire::Logprobs<'a>> {
        self.logprobs.then(|| wire::Logprobs {
            content: wire_logprobs(probs),
            refusal: Null,
        })
    }

    /// The chunk after the finish reason when `include_usage` asked for it.
    pub(super) fn usage_chunk(&self, usage: &Usage) -> wire::UsageChunk<'_> {
        wire::UsageChunk {
            id: &self.id,
            object: "chat.completion.chunk",
            created: self.created,
            model: &self.model,
            choices: [],
            usage: wire_usage(usage),
            timings: wire_timings(usage),
        }
    }

    /// Choice `index` of a whole answer.
    fn choice<'a>(&'a self, index: u32, text: &'a Assembler, reply: &'a Reply) -> wire::Choice<'a> {
        let (tool_calls, function_call) = wire_calls(&reply.tool_calls, false, &self.kinds);
        let content = (tool_calls.is_empty() && function_call.is_none() || !text.text.is_empty())
            .then_some(text.text.as_str());
        wire::Choice {
            index,
            message: wire::AssistantMessage {
                role: "assistant",
                content,
                reasoning_content: (!text.reasoning.is_empty()).then_some(text.reasoning.as_str()),
                tool_calls,
                function_call,
            },
            logprobs: self.logprobs(&text.logprobs),
            finish_reason: self.finish_reason(reply),
        }
    }

    /// The whole `chat.completion` of `choices`, in order.
    pub fn whole<'a>(
        &'a self,
        choices: &'a [(Assembler, Reply)],
        usage: &Usage,
    ) -> wire::Completion<'a> {
        wire::Completion {
            id: &self.id,
            object: "chat.completion",
            created: self.created,
            model: &self.model,
            system_fingerprint: super::super::FINGERPRINT,
            choices: (0u32..)
                .zip(choices)
                .map(|(i, (text, reply))| self.choice(i, text, reply))
                .collect(),
            usage: wire_usage(usage),
            timings: wire_timings(usage),
            verbose: self.verbose(choices, usage),
        }
    }

    /// `__verbose` with `verbose`: the first choice as llama-server's native
    /// answer, its prompt the rendered one.
    fn verbose<'a>(
        &'a self,
        choices: &'a [(Assembler, Reply)],
        usage: &Usage,
    ) -> Option<Box<super::super::wire::llama::Completion<'a>>> {
        let native = self.verbose.as_ref()?;
        let (text, reply) = choices.first()?;
        let prompt = text.rendered.as_deref().unwrap_or_default();
        let completion = native.completion(0, prompt, &text.text, &[], reply, usage);
        Some(Box::new(completion))
    }
}

impl ReplyWriter for ChatWriter {
    /// Choice `index`'s opening chunk: the role and a `null` content, as
    /// OpenAI and llama-server open (a reply that goes straight to tool calls
    /// never shows an empty text).
    fn start(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        _prefilled: Option<(u64, u64)>,
    ) -> io::Result<()> {
        sse.send(&encode(&self.chunk(index, opening(), None)))
    }
    /// How far choice `index`'s prompt is: an opening delta with
    /// `prompt_progress`, as llama-server sends it.
    fn progress(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        prompt: &PromptProgress,
        timings: Option<wire::Timings>,
    ) -> io::Result<()> {
        let chunk = wire::Chunk {
            timings,
            prompt_progress: Some(wire_progress(prompt)),
            ..self.chunk(index, opening(), None)
        };
        sse.send(&encode(&chunk))
    }
    fn piece(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        piece: Piece,
        logprobs: &[TokenLogprobs],
        timings: Option<wire::Timings>,
    ) -> io::Result<()> {
        let delta = match &piece {
            Piece::Text(text) => wire::Delta {
                content: Some(Some(text)),
                ..wire::Delta::default()
            },
            Piece::Reasoning(text) => wire::Delta {
                reasoning_content: Some(text),
                ..wire::Delta::default()
            },
        };
        let mut chunk = self.chunk(index, delta, None);
        chunk.choices[0].logprobs = self.logprobs(logprobs);
        chunk.timings = timings;
        sse.send(&encode(&chunk))
    }
    /// Choice `index`'s tool calls (one chunk, whole arguments) and finish
    /// reason, with the generation's `timings`.
    fn finish(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        reply: &Reply,
        usage: &Usage,
    ) -> io::Result<()> {
        if !reply.tool_calls.is_empty() {
            let (tool_calls, function_call) = wire_calls(&reply.tool_calls, true, &self.kinds);
            let delta = wire::Delta {
                tool_calls,
                function_call,
                ..wire::Delta::default()
            };
            sse.send(&encode(&self.chunk(index, delta, None)))?;
        }
        let last = wire::Chunk {
            timings: wire_timings(usage),
            ..self.chunk(
                index,
                wire::Delta::default(),
                Some(self.finish_reason(reply)),
            )
        };
        sse.send(&encode(&last))
    }
    /// The usage chunk when asked for (the usage of every choice), and `[DONE]`.
    fn end(&mut self, sse: &mut SseStream, usage: &Usage) -> io::Result<()> {
        if self.include_usage {
            sse.send(&encode(&self.usage_chunk(usage)))?;
        }
        sse.send("[DONE]")
    }

    fn respond(
        &self,
        responder: Responder,
        _first: (&Assembler, &Reply),
        choices: &[(Assembler, Reply)],
        usage: &Usage,
    ) {
        responder.json(200, &self.whole(choices, usage));
    }
}

/// A chunk's delta that opens an answer: the role, and `null` content.
pub(super) fn opening<'a>() -> wire::Delta<'a> {
    wire::Delta {
        role: Some("assistant"),
        content: Some(None),
        ..wire::Delta::default()
    }
}

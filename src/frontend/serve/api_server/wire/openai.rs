//! OpenAI's shapes: `chat.completion`, its chunks, text completions,
//! embeddings, the model list and the error object.

use serde::Serialize;

pub use super::llama::{PromptProgress, Timings, TokenLogprob};
use super::Null;
use crate::backend::Reply;
use crate::core::{FinishReason, PromptProgress as Progress, TokenLogprobs, TokenProb};
use crate::frontend::serve::api_server::Usage as Served;

/// `chat.completion`: a whole answer.
#[derive(Debug, Serialize)]
pub struct Completion<'a> {
    pub id: &'a str,
    /// `chat.completion`.
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub system_fingerprint: &'static str,
    pub choices: Vec<Choice<'a>>,
    pub usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// llama-server's native answer, with the rendered prompt (`verbose`).
    #[serde(rename = "__verbose", skip_serializing_if = "Option::is_none")]
    pub verbose: Option<Box<super::llama::Completion<'a>>>,
}

#[derive(Debug, Serialize)]
pub struct Choice<'a> {
    pub index: u32,
    pub message: AssistantMessage<'a>,
    /// `null` unless the request asked for `logprobs`.
    pub logprobs: Option<Logprobs<'a>>,
    pub finish_reason: &'static str,
}

/// Chat's `logprobs`: one entry per generated token.
#[derive(Debug, Serialize)]
pub struct Logprobs<'a> {
    pub content: Vec<TokenLogprob<'a>>,
    pub refusal: Null,
}

/// Text completions' (legacy) `logprobs`: parallel lists per token.
#[derive(Debug, Serialize)]
pub struct TextLogprobs {
    pub tokens: Vec<String>,
    pub token_logprobs: Vec<f32>,
    /// The likeliest tokens at each place, token text to log-probability.
    pub top_logprobs: Vec<serde_json::Map<String, serde_json::Value>>,
    /// Where each token starts in the completion's text, in bytes.
    pub text_offset: Vec<usize>,
}

#[derive(Debug, Serialize)]
pub struct AssistantMessage<'a> {
    /// `assistant`.
    pub role: &'static str,
    /// `null` when the answer is tool calls and no text.
    pub content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
    /// The legacy call, for a request that sent `functions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall<'a>>,
}

/// One tool call, in a whole answer or (with `index`) a chunk.
#[derive(Debug, Serialize)]
pub struct ToolCall<'a> {
    pub id: &'a str,
    /// `function` or `custom`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function: Option<FunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub custom: Option<CustomCall<'a>>,
    /// The call's position, in streamed calls only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub index: Option<usize>,
}

/// A custom tool's call: its input as text.
#[derive(Debug, Serialize)]
pub struct CustomCall<'a> {
    pub name: &'a str,
    pub input: String,
}

#[derive(Debug, Serialize)]
pub struct FunctionCall<'a> {
    pub name: &'a str,
    /// The arguments as JSON text.
    pub arguments: String,
}

/// `chat.completion.chunk`: one streamed step.
#[derive(Debug, Serialize)]
pub struct Chunk<'a> {
    pub id: &'a str,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub system_fingerprint: &'static str,
    pub choices: [ChunkChoice<'a>; 1],
    /// llama-server's figures, on the chunk with the finish reason (and on
    /// every chunk with `timings_per_token`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// How far the prompt is, with `return_progress`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_progress: Option<PromptProgress>,
}

#[derive(Debug, Serialize)]
pub struct ChunkChoice<'a> {
    pub index: u32,
    pub delta: Delta<'a>,
    /// The chunk's tokens' log-probabilities, when asked for.
    pub logprobs: Option<Logprobs<'a>>,
    /// `null` until the last content chunk.
    pub finish_reason: Option<&'static str>,
}

/// What a chunk adds; `{}` on the finishing chunk.
#[derive(Debug, Default, Serialize)]
pub struct Delta<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<&'static str>,
    /// `Some(None)` is `null`: the opening chunk's, as OpenAI and
    /// llama-server send it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Option<&'a str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall<'a>>,
}

/// The chunk `stream_options.include_usage` asks for, after the finish
/// reason: no choices, the usage.
#[derive(Debug, Serialize)]
pub struct UsageChunk<'a> {
    pub id: &'a str,
    /// `chat.completion.chunk`.
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    /// Always empty.
    pub choices: [ChunkChoice<'a>; 0],
    pub usage: Usage,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Serialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub total_tokens: u64,
    /// Only when the backend knows how many prompt tokens were cached.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<TokenDetails>,
}

#[derive(Debug, Serialize)]
pub struct TokenDetails {
    pub cached_tokens: u64,
}

/// `text_completion` (`/v1/completions`): a whole answer, or one streamed
/// chunk (no usage, `finish_reason` null until the last).
#[derive(Debug, Serialize)]
pub struct TextCompletion<'a> {
    pub id: &'a str,
    /// `text_completion`.
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    pub system_fingerprint: &'static str,
    pub choices: Vec<TextChoice<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
}

#[derive(Debug, Serialize)]
pub struct TextChoice<'a> {
    pub text: &'a str,
    pub index: u32,
    pub logprobs: Option<TextLogprobs>,
    pub finish_reason: Option<&'static str>,
}

/// A streamed text completion's usage chunk: no choices, the usage.
#[derive(Debug, Serialize)]
pub struct TextUsageChunk<'a> {
    pub id: &'a str,
    /// `text_completion`.
    pub object: &'static str,
    pub created: u64,
    pub model: &'a str,
    /// Always empty.
    pub choices: [TextChoice<'a>; 0],
    pub usage: Usage,
}

/// `/v1/embeddings`.
#[derive(Debug, Serialize)]
pub struct EmbeddingList<'a> {
    /// `list`.
    pub object: &'static str,
    pub data: Vec<Embedding>,
    pub model: &'a str,
    pub usage: EmbeddingUsage,
}

#[derive(Debug, Serialize)]
pub struct Embedding {
    /// `embedding`.
    pub object: &'static str,
    pub index: usize,
    pub embedding: Vector,
}

/// `encoding_format` `float` (numbers) or `base64` (little-endian f32 bytes).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Vector {
    Float(Vec<f32>),
    Base64(String),
}

#[derive(Debug, Serialize)]
pub struct EmbeddingUsage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

/// `GET /v1/models`.
#[derive(Debug, Serialize)]
pub struct ModelList<'a> {
    /// `list`.
    pub object: &'static str,
    pub data: [Model<'a>; 1],
}

/// One model; `GET /v1/models/{id}` adds `backend`.
#[derive(Debug, Serialize)]
pub struct Model<'a> {
    pub id: &'a str,
    /// Every name the model answers to (`--alias`), as llama-server lists them.
    pub aliases: &'a [String],
    /// `--tags`.
    pub tags: &'a [String],
    /// `model`.
    pub object: &'static str,
    pub created: u64,
    pub owned_by: &'static str,
    pub max_model_len: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backend: Option<&'static str>,
}

/// `{"error": {message, type, param, code}}`, `param` and `code` `null`
/// when there is none.
#[derive(Debug, Serialize)]
pub struct Error<'a> {
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail<'a> {
    pub message: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub param: Option<&'a str>,
    pub code: Option<&'a str>,
}

/// OpenAI's name for how the reply ended: `length` wins over calls (the last
/// one is then cut, its arguments as far as the model wrote them).
pub fn finish_reason(reply: &Reply) -> &'static str {
    if reply.finish == FinishReason::Length {
        return "length";
    }
    if !reply.tool_calls.is_empty() {
        return "tool_calls";
    }
    match reply.finish {
        FinishReason::ToolCalls => "tool_calls",
        _ => "stop",
    }
}

/// Token probabilities in chat's shape (and llama-server's).
pub fn wire_logprobs(probs: &[TokenLogprobs]) -> Vec<TokenLogprob<'_>> {
    fn entry(p: &TokenProb) -> TokenLogprob<'_> {
        TokenLogprob {
            id: p.id,
            token: String::from_utf8_lossy(&p.bytes).into_owned(),
            bytes: &p.bytes,
            logprob: p.logprob,
            top_logprobs: None,
        }
    }
    probs
        .iter()
        .map(|t| TokenLogprob {
            top_logprobs: Some(t.top.iter().map(entry).collect()),
            ..entry(&t.chosen)
        })
        .collect()
}

pub fn wire_usage(usage: &Served) -> Usage {
    Usage {
        prompt_tokens: usage.prompt,
        completion_tokens: usage.completion,
        total_tokens: usage.prompt + usage.completion,
        prompt_tokens_details: usage
            .cached
            .map(|cached_tokens| TokenDetails { cached_tokens }),
    }
}

/// llama-server's `prompt_progress`.
pub fn wire_progress(progress: &Progress) -> PromptProgress {
    PromptProgress {
        total: progress.total,
        cache: progress.cached,
        processed: progress.processed,
        time_ms: u64::try_from(progress.elapsed.as_millis()).unwrap_or(u64::MAX),
    }
}

/// llama.cpp's `timings`, for clients that show speed.
pub fn wire_timings(usage: &Served) -> Option<Timings> {
    let stats = usage.stats.as_ref()?;
    let ms = |secs: Option<f64>| secs.map_or(0.0, |s| 1000.0 * s);
    let per_token = |rate: Option<f64>| super::super::usage::secs_at(1000, rate).unwrap_or(0.0);
    Some(Timings {
        prompt_n: usage.decoded(),
        cache_n: usage.cached.unwrap_or(0),
        prompt_ms: ms(usage.prompt_secs()),
        prompt_per_token_ms: per_token(stats.prefill_tps),
        prompt_per_second: stats.prefill_tps.unwrap_or(0.0),
        predicted_n: usage.completion,
        predicted_ms: ms(usage.generation_secs()),
        predicted_per_token_ms: per_token(stats.decode_tps),
        predicted_per_second: stats.decode_tps.unwrap_or(0.0),
        draft_n: (stats.draft_tokens > 0).then_some(stats.draft_tokens),
        draft_n_accepted: (stats.draft_tokens > 0).then_some(stats.draft_accepted),
    })
}

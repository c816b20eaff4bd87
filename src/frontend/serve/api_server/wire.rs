//! The API server's answers as typed wire shapes, as the backends type
//! theirs: OpenAI's `chat.completion`, `chat.completion.chunk`, model list
//! and error object ([`openai`]), Anthropic's `message`, stream events and
//! error ([`anthropic`]), and `/health`.
//!
//! Fields serialize in the order written here, which is the order the
//! providers themselves send. A field the protocol always has but this
//! server never fills is [`Null`] (`"logprobs": null`); one that is absent
//! when empty skips.

use serde::Serialize;

/// Serializes as `null`: a field clients expect to see that this server
/// never fills (`logprobs`, a stream's opening `stop_sequence`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Null;

/// The JSON text of an answer or event. These shapes have only string keys,
/// so serializing cannot fail; an empty string would mean a bug.
pub fn encode(value: &impl Serialize) -> String {
    serde_json::to_string(value).unwrap_or_default()
}

/// `GET /health`: `{"status": "ok"}`, or `"loading"` with a 503.
#[derive(Debug, Serialize)]
pub struct Health {
    pub status: &'static str,
}

/// OpenAI's shapes.
pub mod openai;

/// llama-server's own shapes.
pub mod llama;

/// OpenAI's Responses API (`POST /v1/responses`).
pub mod responses;

/// Anthropic's shapes.
pub mod anthropic;

//! The `cli` backend's wire structs, its twin of the shapes
//! `frontend::cli_server` writes (kept in step by the end-to-end tests): the
//! bodies it posts, the `/updates` lines it reads, and what each line's event
//! stands for here.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::core::error::ErrorKind;
use crate::core::{Event, FinishReason, Stats, ToolCall, ToolResultEvent};

#[derive(Serialize)]
pub(super) struct PromptBody<'a> {
    pub(super) prompt: &'a str,
    /// The message's images as `data:` URLs; the server puts them before the text.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub(super) images: Vec<String>,
    #[serde(rename = "async")]
    pub(super) queue: bool,
}

#[derive(Serialize)]
pub(super) struct Empty {}

#[derive(Serialize)]
pub(super) struct ApproveBody<'a> {
    pub(super) decision: &'a str,
}

#[derive(Deserialize)]
pub(super) struct QueuedBody {
    pub(super) request_id: u64,
}

#[derive(Deserialize)]
pub(super) struct WireLine {
    #[serde(default)]
    pub(super) seq: Option<u64>,
    #[serde(default)]
    pub(super) request_id: Option<u64>,
    #[serde(flatten)]
    pub(super) event: WireEvent,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum WireEvent {
    Connected {},
    UserPrompt {},
    Delta {
        content: String,
    },
    Thinking {
        content: String,
    },
    Codeblock {
        content: String,
    },
    ToolCall {
        name: String,
        #[serde(default)]
        args: Value,
        id: String,
    },
    ToolResult {
        name: String,
        id: String,
        success: bool,
        #[serde(default)]
        summary: String,
        #[serde(default)]
        content: String,
    },
    System {
        content: String,
    },
    Stats(WireStats),
    Error {
        message: String,
        #[serde(default)]
        error_type: String,
    },
    ResponseComplete {
        finish_reason: String,
    },
    /// The server's tool call waits for someone to `POST /approve/{id}`.
    ApprovalRequired {
        id: String,
        name: String,
        #[serde(default)]
        args: Value,
        #[serde(default)]
        tool_call_id: String,
    },
    #[serde(other)]
    Unknown,
}

#[derive(Deserialize)]
pub(super) struct WireStats {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
    prefill_tps: Option<f64>,
    decode_tps: Option<f64>,
    #[serde(default)]
    context_used: u64,
    #[serde(default)]
    context_size: u64,
    #[serde(default)]
    cached_tokens: u64,
    #[serde(default)]
    draft_tokens: u64,
    #[serde(default)]
    draft_accepted: u64,
    provider: Option<String>,
}

/// The event a wire event stands for; `None` for ones the local agent makes itself.
pub(super) fn to_event(event: WireEvent) -> Option<Event> {
    Some(match event {
        WireEvent::Delta { content } => Event::Content(content),
        WireEvent::Thinking { content } => Event::Thinking(content),
        WireEvent::Codeblock { content } => Event::CodeBlock(content),
        WireEvent::ToolCall { name, args, id } => Event::ToolCall(ToolCall {
            id,
            name,
            arguments: args,
        }),
        WireEvent::ToolResult {
            name,
            id,
            success,
            summary,
            content,
        } => Event::ToolResult(ToolResultEvent {
            id,
            name,
            success,
            summary,
            content,
        }),
        WireEvent::System { content } => Event::System(content),
        WireEvent::Stats(s) => Event::Stats(Stats {
            prompt_tokens: s.prompt_tokens,
            completion_tokens: s.completion_tokens,
            prefill_tps: s.prefill_tps,
            decode_tps: s.decode_tps,
            context_used: s.context_used,
            context_size: s.context_size,
            cached_tokens: s.cached_tokens,
            draft_tokens: s.draft_tokens,
            draft_accepted: s.draft_accepted,
            provider: s.provider,
        }),
        WireEvent::Error {
            message,
            error_type,
        } => Event::Error {
            kind: error_kind(&error_type),
            message,
        },
        // `follow` answers approval requests through the local gate.
        WireEvent::Connected {}
        | WireEvent::UserPrompt {}
        | WireEvent::ResponseComplete { .. }
        | WireEvent::ApprovalRequired { .. }
        | WireEvent::Unknown => return None,
    })
}

pub(super) fn error_kind(name: &str) -> ErrorKind {
    const KINDS: [ErrorKind; 8] = [
        ErrorKind::ContextOverflow,
        ErrorKind::Http,
        ErrorKind::Auth,
        ErrorKind::Connect,
        ErrorKind::Timeout,
        ErrorKind::Protocol,
        ErrorKind::Config,
        ErrorKind::Cancelled,
    ];
    KINDS
        .into_iter()
        .find(|k| k.as_str() == name)
        .unwrap_or(ErrorKind::Http)
}

pub(super) fn finish_from(reason: &str) -> FinishReason {
    match reason {
        "stop" => FinishReason::Stop,
        "length" => FinishReason::Length,
        "cancelled" => FinishReason::Cancelled,
        // The server's tool rounds are over when it says so; here that is a stop.
        "tool_calls" => FinishReason::Stop,
        _ => FinishReason::Error,
    }
}

//! Wire shapes: the one conversion from `core::Event` to the typed SSE events,
//! and the first event an `/updates` observer gets.

use serde::Serialize;
use serde_json::Value;

use crate::core::Event;
use crate::frontend::chat::stats_line::StatsLine;

/// One event as sent: its sequence number, the request it belongs to, and the event.
#[derive(Serialize)]
pub(super) struct WireLine<'a> {
    pub(super) seq: u64,
    pub(super) request_id: u64,
    #[serde(flatten)]
    pub(super) event: WireEvent<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(super) enum WireEvent<'a> {
    UserPrompt {
        content: &'a str,
    },
    Delta {
        content: &'a str,
    },
    Thinking {
        content: &'a str,
    },
    Codeblock {
        content: &'a str,
    },
    ToolCall {
        name: &'a str,
        args: &'a Value,
        id: &'a str,
    },
    ToolResult {
        name: &'a str,
        id: &'a str,
        success: bool,
        summary: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
    },
    System {
        content: &'a str,
    },
    Stats(StatsLine<'a>),
    Error {
        message: &'a str,
        error_type: &'a str,
    },
    ResponseComplete {
        finish_reason: &'a str,
    },
    /// Answer with `POST /approve/{id}`.
    ApprovalRequired {
        id: &'a str,
        name: &'a str,
        args: &'a Value,
        tool_call_id: &'a str,
    },
}

/// The typed SSE shape of `event`; `None` for what this stream does not carry:
/// token probabilities (its requests never ask for them) and the prefill's
/// figures (the stats at the end say the same).
pub(super) fn wire_event(event: &Event) -> Option<WireEvent<'_>> {
    Some(match event {
        Event::UserPrompt(text) => WireEvent::UserPrompt { content: text },
        Event::Content(text) => WireEvent::Delta { content: text },
        Event::Thinking(text) => WireEvent::Thinking { content: text },
        Event::CodeBlock(text) => WireEvent::Codeblock { content: text },
        Event::ToolCall(call) => WireEvent::ToolCall {
            name: &call.name,
            args: &call.arguments,
            id: &call.id,
        },
        Event::ToolResult(r) => WireEvent::ToolResult {
            name: &r.name,
            id: &r.id,
            success: r.success,
            summary: &r.summary,
            content: &r.content,
            error: (!r.success).then_some(r.content.as_str()),
        },
        Event::System(text) => WireEvent::System { content: text },
        Event::Stats(stats) => WireEvent::Stats(stats.into()),
        Event::Error { kind, message } => WireEvent::Error {
            message,
            error_type: kind.as_str(),
        },
        Event::Stop(reason) => WireEvent::ResponseComplete {
            finish_reason: reason.as_str(),
        },
        Event::ApprovalRequired(request) => WireEvent::ApprovalRequired {
            id: &request.id,
            name: &request.call.name,
            args: &request.call.arguments,
            tool_call_id: &request.call.id,
        },
        Event::Logprobs(_) | Event::Prefilled { .. } | Event::Progress(_) => return None,
    })
}

/// The first event on `/updates`.
#[derive(Serialize)]
pub(super) struct Connected {
    #[serde(rename = "type")]
    pub(super) kind: &'static str,
    pub(super) client_id: String,
    /// The sequence number of the last event sent before this observer joined.
    pub(super) seq: u64,
}

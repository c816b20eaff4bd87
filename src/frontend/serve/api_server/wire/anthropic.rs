//! Anthropic's shapes: a whole `message`, its stream's events, the error.

use serde::Serialize;
use serde_json::Value;

use super::Null;

/// A whole `message`.
#[derive(Debug, Serialize)]
pub struct Message<'a> {
    pub id: &'a str,
    /// `message`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `assistant`.
    pub role: &'static str,
    pub model: &'a str,
    pub content: Vec<Block<'a>>,
    pub stop_reason: &'static str,
    /// The request's stop sequence that ended the message, else `null`.
    pub stop_sequence: Option<&'a str>,
    pub usage: Usage,
}

/// The message as `message_start` opens it: no content, no stop reason
/// yet (`content` before `model`, as Anthropic sends it there).
#[derive(Debug, Serialize)]
pub struct Opening<'a> {
    pub id: &'a str,
    /// `message`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// `assistant`.
    pub role: &'static str,
    /// Always empty.
    pub content: [Block<'a>; 0],
    pub model: &'a str,
    pub stop_reason: Null,
    pub stop_sequence: Null,
    pub usage: Usage,
}

/// Token counts: all three in a message, `output_tokens` alone in
/// `message_delta`.
#[derive(Debug, Serialize)]
pub struct Usage {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    pub output_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cache_read_input_tokens: Option<u64>,
}

/// A content block, whole or as `content_block_start` opens it (empty).
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block<'a> {
    Text {
        text: &'a str,
    },
    Thinking {
        thinking: &'a str,
        /// `""` in a whole message; absent when a block opens.
        #[serde(skip_serializing_if = "Option::is_none")]
        signature: Option<&'a str>,
    },
    ToolUse {
        id: std::borrow::Cow<'a, str>,
        name: &'a str,
        input: &'a Value,
    },
}

/// What a `content_block_delta` adds to its block.
#[derive(Debug, Serialize)]
#[serde(tag = "type")]
pub enum BlockDelta<'a> {
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    /// A tool call's whole input, as JSON text.
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
}

/// `message_delta`'s `delta`.
#[derive(Debug, Serialize)]
pub struct StopDelta<'a> {
    pub stop_reason: &'static str,
    pub stop_sequence: Option<&'a str>,
}

/// One stream event; its `type` is also the SSE event name.
#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Event<'a> {
    MessageStart {
        message: Opening<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: Block<'a>,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: StopDelta<'a>,
        usage: Usage,
    },
    MessageStop,
}

impl Event<'_> {
    /// The SSE event name: the same as the `type` field.
    pub fn name(&self) -> &'static str {
        match self {
            Event::MessageStart { .. } => "message_start",
            Event::ContentBlockStart { .. } => "content_block_start",
            Event::ContentBlockDelta { .. } => "content_block_delta",
            Event::ContentBlockStop { .. } => "content_block_stop",
            Event::MessageDelta { .. } => "message_delta",
            Event::MessageStop => "message_stop",
        }
    }
}

/// `{"type": "error", "error": {type, message}}`, an answer or the
/// `error` event.
#[derive(Debug, Serialize)]
pub struct Error<'a> {
    /// `error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub error: ErrorDetail<'a>,
}

#[derive(Debug, Serialize)]
pub struct ErrorDetail<'a> {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub message: &'a str,
}

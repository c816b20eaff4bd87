//! OpenAI's Responses API (`POST /v1/responses`): the `response` object, its
//! items and parts, and its stream's events.

use serde::Serialize;
use serde_json::{Map, Value};

/// A `response` object: whole, or inside a stream's `response.*` events.
#[derive(Debug, Serialize)]
pub struct Response<'a> {
    pub id: &'a str,
    /// `response`.
    pub object: &'static str,
    pub created_at: u64,
    /// `in_progress`, `completed`, `incomplete` or `failed`.
    pub status: &'static str,
    pub model: &'a str,
    pub output: Vec<Item<'a>>,
    pub usage: Option<Usage>,
    pub incomplete_details: Option<Incomplete>,
    pub error: Option<Value>,
    /// The request's settings echoed (`instructions`, `tools`, `temperature`, ...).
    #[serde(flatten)]
    pub echo: &'a Map<String, Value>,
}

#[derive(Debug, Serialize)]
pub struct Incomplete {
    /// `max_output_tokens`.
    pub reason: &'static str,
}

#[derive(Debug, Serialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub input_tokens_details: InputDetails,
    pub output_tokens: u64,
    pub output_tokens_details: OutputDetails,
    pub total_tokens: u64,
}

#[derive(Debug, Serialize)]
pub struct InputDetails {
    pub cached_tokens: u64,
}

#[derive(Debug, Serialize)]
pub struct OutputDetails {
    pub reasoning_tokens: u64,
}

/// One output item.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Item<'a> {
    Reasoning {
        id: String,
        summary: [Value; 0],
        content: Vec<Part<'a>>,
    },
    Message {
        id: String,
        status: &'static str,
        role: &'static str,
        content: Vec<Part<'a>>,
    },
    FunctionCall {
        id: String,
        call_id: &'a str,
        name: &'a str,
        arguments: String,
        status: &'static str,
    },
    CustomToolCall {
        id: String,
        call_id: &'a str,
        name: &'a str,
        input: String,
        status: &'static str,
    },
    LocalShellCall {
        id: String,
        call_id: &'a str,
        status: &'static str,
        action: Value,
    },
}

/// A part of a message's or reasoning item's content.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Part<'a> {
    OutputText {
        text: &'a str,
        annotations: [Value; 0],
    },
    ReasoningText {
        text: &'a str,
    },
}

/// A stream event; its `type` is also the SSE event name.
#[derive(Debug, Serialize)]
#[serde(tag = "type")]
pub enum Event<'a> {
    #[serde(rename = "response.created")]
    Created { response: Response<'a> },
    #[serde(rename = "response.in_progress")]
    InProgress { response: Response<'a> },
    #[serde(rename = "response.output_item.added")]
    ItemAdded { output_index: usize, item: Item<'a> },
    #[serde(rename = "response.output_item.done")]
    ItemDone { output_index: usize, item: Item<'a> },
    #[serde(rename = "response.content_part.added")]
    PartAdded {
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        part: Part<'a>,
    },
    #[serde(rename = "response.content_part.done")]
    PartDone {
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        part: Part<'a>,
    },
    #[serde(rename = "response.output_text.delta")]
    TextDelta {
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        delta: &'a str,
    },
    #[serde(rename = "response.output_text.done")]
    TextDone {
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        text: &'a str,
    },
    #[serde(rename = "response.reasoning_text.delta")]
    ReasoningDelta {
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        delta: &'a str,
    },
    #[serde(rename = "response.reasoning_text.done")]
    ReasoningDone {
        item_id: &'a str,
        output_index: usize,
        content_index: usize,
        text: &'a str,
    },
    #[serde(rename = "response.function_call_arguments.delta")]
    ArgumentsDelta {
        item_id: &'a str,
        output_index: usize,
        delta: &'a str,
    },
    #[serde(rename = "response.function_call_arguments.done")]
    ArgumentsDone {
        item_id: &'a str,
        output_index: usize,
        arguments: &'a str,
    },
    #[serde(rename = "response.custom_tool_call_input.delta")]
    CustomInputDelta {
        item_id: &'a str,
        output_index: usize,
        delta: &'a str,
    },
    #[serde(rename = "response.custom_tool_call_input.done")]
    CustomInputDone {
        item_id: &'a str,
        output_index: usize,
        input: &'a str,
    },
    #[serde(rename = "response.completed")]
    Completed { response: Response<'a> },
    #[serde(rename = "response.incomplete")]
    Incomplete { response: Response<'a> },
    #[serde(rename = "error")]
    Error {
        code: Option<&'a str>,
        message: &'a str,
        param: Option<&'a str>,
    },
}

impl Event<'_> {
    /// The SSE event name: the `type`.
    pub fn name(&self) -> &'static str {
        match self {
            Event::Created { .. } => "response.created",
            Event::InProgress { .. } => "response.in_progress",
            Event::ItemAdded { .. } => "response.output_item.added",
            Event::ItemDone { .. } => "response.output_item.done",
            Event::PartAdded { .. } => "response.content_part.added",
            Event::PartDone { .. } => "response.content_part.done",
            Event::TextDelta { .. } => "response.output_text.delta",
            Event::TextDone { .. } => "response.output_text.done",
            Event::ReasoningDelta { .. } => "response.reasoning_text.delta",
            Event::ReasoningDone { .. } => "response.reasoning_text.done",
            Event::ArgumentsDelta { .. } => "response.function_call_arguments.delta",
            Event::ArgumentsDone { .. } => "response.function_call_arguments.done",
            Event::CustomInputDelta { .. } => "response.custom_tool_call_input.delta",
            Event::CustomInputDone { .. } => "response.custom_tool_call_input.done",
            Event::Completed { .. } => "response.completed",
            Event::Incomplete { .. } => "response.incomplete",
            Event::Error { .. } => "error",
        }
    }
}

/// An event with its place in the stream.
#[derive(Debug, Serialize)]
pub struct Sequenced<'a> {
    #[serde(flatten)]
    pub event: Event<'a>,
    pub sequence_number: u64,
    /// llama-server's figures: on `response.completed`, and on each delta
    /// with `timings_per_token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<super::llama::Timings>,
    /// How far the prompt is, on `response.in_progress` with `return_progress`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_progress: Option<super::llama::PromptProgress>,
}

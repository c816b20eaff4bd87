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
pub mod openai {
    use serde::Serialize;

    use super::Null;

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

    /// One token's log-probability, in chat's shape with llama-server's `id`
    /// (its `/completion` reports the same entries as `completion_probabilities`).
    #[derive(Debug, Serialize)]
    pub struct TokenLogprob<'a> {
        pub id: i32,
        pub token: String,
        pub bytes: &'a [u8],
        pub logprob: f32,
        /// The likeliest tokens at this place; absent inside that list.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub top_logprobs: Option<Vec<TokenLogprob<'a>>>,
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

    /// llama-server's `prompt_progress`: the prompt's tokens, those reused from
    /// the cache, those in the cache now, and the milliseconds since it started.
    #[derive(Debug, Serialize)]
    pub struct PromptProgress {
        pub total: u64,
        pub cache: u64,
        pub processed: u64,
        pub time_ms: u64,
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

    /// llama.cpp's `timings`, for clients that show speed.
    #[derive(Debug, Serialize)]
    pub struct Timings {
        /// Prompt tokens decoded (not those read from the cache), as llama-server counts.
        pub prompt_n: u64,
        pub cache_n: u64,
        /// 0 where not measured (yet), as llama-server writes it.
        pub prompt_ms: f64,
        pub prompt_per_token_ms: f64,
        pub prompt_per_second: f64,
        pub predicted_n: u64,
        pub predicted_ms: f64,
        pub predicted_per_token_ms: f64,
        pub predicted_per_second: f64,
        /// Speculative decoding's drafted and accepted tokens (as llama-server).
        #[serde(skip_serializing_if = "Option::is_none")]
        pub draft_n: Option<u64>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub draft_n_accepted: Option<u64>,
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
}

/// llama-server's own shapes.
pub mod llama;

/// OpenAI's Responses API (`POST /v1/responses`).
pub mod responses {
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
        pub timings: Option<super::openai::Timings>,
        /// How far the prompt is, on `response.in_progress` with `return_progress`.
        #[serde(skip_serializing_if = "Option::is_none")]
        pub prompt_progress: Option<super::openai::PromptProgress>,
    }
}

/// Anthropic's shapes.
pub mod anthropic {
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
}

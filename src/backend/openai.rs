//! The OpenAI-compatible backend: Chat Completions over HTTP, streamed (SSE)
//! or not, for OpenAI, Azure, vLLM, SGLang, llama-server and friends.
//!
//! Its wire structs live here and are converted from the core types in one
//! place ([`build_request`]); responses are turned into [`Event`]s through the
//! shared stream layer: the SSE decoder, the tool-call accumulator and the
//! output filter (for text-written tool calls and `<think>` tags). Failing and
//! retrying is [`super::http`]'s job.
//!
//! Decisions worth knowing:
//! - A sink that answers [`Flow::Cancel`] ends the read; the reply comes back
//!   `Ok` with `finish: Cancelled` and the partial text, so nothing shown is lost.
//! - A stream that ends without `[DONE]` is accepted when a `finish_reason`
//!   arrived (some servers omit the marker); otherwise it is a `Protocol`
//!   error, because the reply was cut off.
//! - A message with images goes as `content` parts (`text`, `image_url` with a
//!   `data:` URL, GIF as PNG); a `tool` message cannot carry images, so a tool
//!   result's go in a `user` message after the turn's tool messages.
//! - The backend emits content, thinking, code, `System` notices and one
//!   `Stats`; tool calls come back in [`Reply::tool_calls`] and the agent
//!   announces them, as it also emits `Stop`.

use super::ending::{assemble, Ending};
use std::borrow::Cow;
use std::io::Read;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::estimate::TokenEstimator;
use super::hosted::{self, Dialect};
use super::http::{self, Limits, RetryPolicy};
use super::recording::Tape;
use super::{GenerateRequest, Reply, ResponseFormat, ToolChoice, Usage};
use crate::core::{
    BackendError, ContentPart, Event, EventSink, FinishReason, Flow, Message, Role, Session, Stats,
    ToolCall,
};
use crate::log::{self, Category};
use crate::stream::filter::OutputFilter;
use crate::stream::sse::SseDecoder;
use crate::stream::toolcall::{ToolCallAccumulator, ToolCallDelta};

/// Which request field carries the answer's length limit (newer OpenAI models
/// reject `max_tokens`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MaxTokensParam {
    #[default]
    MaxTokens,
    MaxCompletionTokens,
}

/// An Azure OpenAI deployment: changes the URL and the key header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AzureDeployment {
    pub deployment: String,
    pub api_version: String,
}

/// Everything the backend needs, passed as a value.
#[derive(Debug, Clone, PartialEq)]
pub struct OpenAiConfig {
    /// Conventionally ends in `/v1`; `/chat/completions` is appended.
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// Context window in tokens, 0 when unknown.
    pub context_size: u64,
    pub extra_headers: Vec<(String, String)>,
    pub limits: Limits,
    pub max_retries: u32,
    pub azure: Option<AzureDeployment>,
    pub max_tokens_param: MaxTokensParam,
    /// Where exchanges are recorded to or replayed from (`--record`, `--replay`).
    pub tape: Tape,
}

impl OpenAiConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            context_size: 0,
            extra_headers: Vec::new(),
            limits: Limits::default(),
            max_retries: RetryPolicy::default().max_retries,
            azure: None,
            max_tokens_param: MaxTokensParam::default(),
            tape: Tape::off(),
        }
    }
}

/// A Chat Completions endpoint.
pub struct OpenAiBackend {
    config: OpenAiConfig,
    agent: ureq::Agent,
    estimator: TokenEstimator,
}

impl OpenAiBackend {
    pub fn new(config: OpenAiConfig) -> Self {
        let agent = http::build_agent(&config.base_url, &config.limits);
        OpenAiBackend {
            config,
            agent,
            estimator: TokenEstimator::default(),
        }
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> String {
        let base = self.config.base_url.trim_end_matches('/');
        match &self.config.azure {
            Some(azure) => format!(
                "{base}/openai/deployments/{}/chat/completions?api-version={}",
                azure.deployment, azure.api_version
            ),
            None => format!("{base}/chat/completions"),
        }
    }

    /// Hosted OpenAI (and Azure) reject parameters other servers accept.
    fn strict_host(&self) -> bool {
        self.config.azure.is_some()
            || crate::util::net::url_host(&self.config.base_url).ends_with("openai.com")
    }

    fn attempt(
        &self,
        url: &str,
        body: &[u8],
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let response = http::send(self.post(url, request.stream), body, url, &self.config.tape)?;
        let turn = Turn::new(
            OutputFilter::for_tools(request.tools),
            self.config.context_size,
        );
        let reader = http::body_reader(response, &self.config.limits, request.stream);
        if request.stream {
            read_stream(reader, turn, sink, url)
        } else {
            read_whole(reader, turn, sink, url)
        }
    }

    fn post(&self, url: &str, stream: bool) -> ureq::RequestBuilder<ureq::typestate::WithBody> {
        let mut builder = self
            .agent
            .post(url)
            .header("Content-Type", "application/json")
            .header(
                "Accept",
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
            );
        if let Some(key) = &self.config.api_key {
            builder = match self.config.azure {
                Some(_) => builder.header("api-key", key),
                None => builder.header("Authorization", format!("Bearer {key}")),
            };
        }
        for (name, value) in &self.config.extra_headers {
            builder = builder.header(name, value);
        }
        builder
    }
}

impl Dialect for OpenAiBackend {
    const KIND: &'static str = "openai";

    fn model(&self) -> (String, u64) {
        (self.config.model.clone(), self.config.context_size)
    }

    /// Builds, sends and reads one request (with retries), names already in wire form.
    fn send(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let wire = build_request(&self.config, self.strict_host(), session, request)?;
        let body = http::encode(&wire)?;
        let url = self.endpoint();
        log::debug(Category::Llm, || {
            format!(
                "request: {} messages, {} bytes",
                wire.messages.len(),
                body.len()
            )
        });
        if let Some(key) = &self.config.api_key {
            log::debug(Category::Http, || {
                format!("POST {url} with key {}", log::redact(key))
            });
        }
        let policy = RetryPolicy {
            max_retries: self.config.max_retries,
            reply_bytes: self.config.limits.reply_bytes,
            ..RetryPolicy::default()
        };
        http::with_retries(&policy, sink, |sink| {
            self.attempt(&url, &body, request, sink)
        })
    }

    /// The model ids `GET /models` lists (vLLM, llama-server and shepherd's
    /// own `--server` answer it too).
    fn models(&self) -> Result<Vec<String>, BackendError> {
        if self.config.azure.is_some() {
            return Err(BackendError::Config(
                "an Azure deployment serves one model; list them in the Azure portal".into(),
            ));
        }
        let url = format!("{}/models", self.config.base_url.trim_end_matches('/'));
        let mut builder = self.agent.get(&url).header("Accept", "application/json");
        if let Some(key) = &self.config.api_key {
            builder = builder.header("Authorization", format!("Bearer {key}"));
        }
        for (name, value) in &self.config.extra_headers {
            builder = builder.header(name, value);
        }
        let value = http::get_json(builder, &url)?;
        Ok(super::anthropic::ids_in(&value["data"], "id"))
    }

    fn estimator(&self) -> &TokenEstimator {
        &self.estimator
    }

    fn estimator_mut(&mut self) -> &mut TokenEstimator {
        &mut self.estimator
    }
}

// ---- request wire structs ----

#[derive(Debug, Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptions>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_completion_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    frequency_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    presence_penalty: Option<f32>,
    /// llama.cpp's and vLLM's extras, left out for strict hosts like top_k.
    #[serde(skip_serializing_if = "Option::is_none")]
    min_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repeat_penalty: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    repeat_last_n: Option<i32>,
    /// llama-server's GBNF `grammar` (a host that does not know it answers 400).
    #[serde(skip_serializing_if = "Option::is_none")]
    grammar: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    /// `null` for an assistant message that only calls tools.
    content: Option<WireContent<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

/// A message's content: a plain string, or text and image parts when it has images.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Text(&'a str),
    Parts(Vec<WirePart<'a>>),
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WirePart<'a> {
    Text { text: Cow<'a, str> },
    ImageUrl { image_url: WireImageUrl },
}

#[derive(Debug, Serialize)]
struct WireImageUrl {
    /// A `data:` URL.
    url: String,
}

/// The image types Chat Completions takes; others (GIF, which it takes only
/// unanimated) go as PNG.
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/webp"];

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionCall<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    name: &'a str,
    /// The arguments as a JSON string, as the API wants them.
    arguments: String,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireFunctionSpec<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunctionSpec<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum WireToolChoice<'a> {
    Mode(&'static str),
    Named {
        #[serde(rename = "type")]
        kind: &'static str,
        function: WireName<'a>,
    },
}

#[derive(Debug, Serialize)]
struct WireName<'a> {
    name: &'a str,
}

/// Converts the session and request into the wire request: the one place
/// core types meet OpenAI's request shape.
fn build_request<'a>(
    config: &'a OpenAiConfig,
    strict_host: bool,
    session: &'a Session,
    request: &GenerateRequest<'a>,
) -> Result<ChatRequest<'a>, BackendError> {
    let sampling = request.sampling;
    let (max_tokens, max_completion_tokens) = match config.max_tokens_param {
        MaxTokensParam::MaxTokens => (sampling.max_tokens, None),
        MaxTokensParam::MaxCompletionTokens => (None, sampling.max_tokens),
    };
    Ok(ChatRequest {
        model: &config.model,
        messages: wire_messages(session)?,
        tools: request.tools.iter().map(wire_tool).collect(),
        tool_choice: (!request.tools.is_empty()).then(|| wire_tool_choice(request.tool_choice)),
        stream: request.stream,
        stream_options: request.stream.then_some(StreamOptions {
            include_usage: true,
        }),
        max_tokens,
        max_completion_tokens,
        temperature: sampling.temperature,
        top_p: sampling.top_p,
        top_k: sampling.top_k.filter(|_| !strict_host),
        seed: sampling.seed,
        stop: &sampling.stop,
        response_format: sampling
            .response_format
            .as_ref()
            .and_then(wire_response_format),
        frequency_penalty: sampling.frequency_penalty,
        presence_penalty: sampling.presence_penalty,
        min_p: sampling.min_p.filter(|_| !strict_host),
        repeat_penalty: sampling.repeat_penalty.filter(|_| !strict_host),
        repeat_last_n: sampling.repeat_last_n.filter(|_| !strict_host),
        grammar: match &sampling.response_format {
            Some(ResponseFormat::Grammar(grammar)) => Some(grammar),
            _ => None,
        },
    })
}

/// `response_format` for a format OpenAI's API has (a grammar goes as `grammar`).
fn wire_response_format(format: &ResponseFormat) -> Option<Value> {
    Some(match format {
        ResponseFormat::JsonObject => serde_json::json!({"type": "json_object"}),
        ResponseFormat::Grammar(_) => return None,
        ResponseFormat::JsonSchema {
            name,
            schema,
            strict,
        } => serde_json::json!({
            "type": "json_schema",
            "json_schema": {"name": name, "schema": schema, "strict": strict},
        }),
    })
}

/// The system prompt and the history. Chat Completions has no image parts in a
/// `tool` message, so a tool result's images go in a `user` message right after
/// the turn's tool messages (as OpenAI's own agents SDK sends them), each tool's
/// introduced by a line naming its call; the tool message keeps the text.
fn wire_messages(session: &Session) -> Result<Vec<WireMessage<'_>>, BackendError> {
    let mut wire: Vec<WireMessage<'_>> = Vec::with_capacity(session.messages.len() + 1);
    if !session.system_prompt.is_empty() {
        wire.push(plain("system", &session.system_prompt));
    }
    let mut tool_images: Vec<WirePart<'_>> = Vec::new();
    for message in &session.messages {
        if message.role != Role::Tool && !tool_images.is_empty() {
            wire.push(image_message(std::mem::take(&mut tool_images)));
        }
        if message.role == Role::Tool && !message.images.is_empty() {
            tool_images.extend(tool_result_images(message)?);
        }
        wire.push(wire_message(message)?);
    }
    if !tool_images.is_empty() {
        wire.push(image_message(tool_images));
    }
    Ok(wire)
}

fn plain<'a>(role: &'static str, content: &'a str) -> WireMessage<'a> {
    WireMessage {
        role,
        content: Some(WireContent::Text(content)),
        tool_calls: Vec::new(),
        tool_call_id: None,
    }
}

fn image_message(parts: Vec<WirePart<'_>>) -> WireMessage<'_> {
    WireMessage {
        content: Some(WireContent::Parts(parts)),
        ..plain("user", "")
    }
}

/// A tool result's images for the `user` message after the tool messages,
/// after a line that says which call returned them.
fn tool_result_images(message: &Message) -> Result<Vec<WirePart<'_>>, BackendError> {
    let intro = format!(
        "The images returned by the {} call {}:",
        message.tool_name.as_deref().unwrap_or("tool"),
        message.tool_call_id.as_deref().unwrap_or_default()
    );
    let mut parts = vec![WirePart::Text {
        text: Cow::Owned(intro),
    }];
    for part in &message.images {
        parts.push(image_part(&part.image)?);
    }
    Ok(parts)
}

fn image_part(image: &crate::core::Image) -> Result<WirePart<'static>, BackendError> {
    Ok(WirePart::ImageUrl {
        image_url: WireImageUrl {
            url: hosted::wire_image(image, IMAGE_TYPES)?.data_url(),
        },
    })
}

fn wire_message(message: &Message) -> Result<WireMessage<'_>, BackendError> {
    let tool_calls: Vec<WireToolCall<'_>> = message.tool_calls.iter().map(wire_tool_call).collect();
    let content = if message.content.is_empty() && !tool_calls.is_empty() {
        None
    } else if message.images.is_empty() || message.role != Role::User {
        Some(WireContent::Text(&message.content))
    } else {
        Some(WireContent::Parts(content_parts(message)?))
    };
    Ok(WireMessage {
        role: message.role.as_str(),
        content,
        tool_calls,
        tool_call_id: match message.role {
            Role::Tool => Some(message.tool_call_id.as_deref().unwrap_or_default()),
            _ => None,
        },
    })
}

/// A user message's text and images in text order.
fn content_parts(message: &Message) -> Result<Vec<WirePart<'_>>, BackendError> {
    message
        .parts()
        .into_iter()
        .map(|part| match part {
            ContentPart::Text(text) => Ok(WirePart::Text {
                text: Cow::Borrowed(text),
            }),
            ContentPart::Image(image) => image_part(image),
        })
        .collect()
}

fn wire_tool_call(call: &ToolCall) -> WireToolCall<'_> {
    let arguments = match &call.arguments {
        // Malformed arguments were kept as the raw text; send them back as written.
        Value::String(raw) => raw.clone(),
        other => other.to_string(),
    };
    WireToolCall {
        id: &call.id,
        kind: "function",
        function: WireFunctionCall {
            name: &call.name,
            arguments,
        },
    }
}

fn wire_tool(spec: &crate::core::ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunctionSpec {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.parameters,
        },
    }
}

fn wire_tool_choice(choice: &ToolChoice) -> WireToolChoice<'_> {
    match choice {
        ToolChoice::Auto => WireToolChoice::Mode("auto"),
        ToolChoice::None => WireToolChoice::Mode("none"),
        ToolChoice::Required => WireToolChoice::Mode("required"),
        ToolChoice::Named(name) => WireToolChoice::Named {
            kind: "function",
            function: WireName { name },
        },
    }
}

// ---- response wire structs ----

/// A streamed chunk or a whole completion; every field optional, since
/// compatible servers differ in what they send.
#[derive(Debug, Default, Deserialize)]
struct WireResponse {
    #[serde(default)]
    choices: Option<Vec<WireChoice>>,
    #[serde(default)]
    usage: Option<WireUsage>,
    #[serde(default)]
    timings: Option<WireTimings>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug, Default, Deserialize)]
struct WireChoice {
    /// Streamed chunks carry `delta`, whole completions `message`; both have the same fields.
    #[serde(default, alias = "message")]
    delta: Option<WireDelta>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireDelta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default)]
    reasoning_content: Option<String>,
    #[serde(default)]
    reasoning: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<WireToolCallDelta>>,
}

#[derive(Debug, Default, Deserialize)]
struct WireToolCallDelta {
    #[serde(default)]
    index: Option<usize>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<WireFunctionDelta>,
}

#[derive(Debug, Default, Deserialize)]
struct WireFunctionDelta {
    #[serde(default)]
    name: Option<String>,
    /// A string fragment normally; a few servers send an object.
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

/// llama-server's per-request timings.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct WireTimings {
    #[serde(default)]
    prompt_n: Option<u64>,
    #[serde(default)]
    prompt_per_second: Option<f64>,
    #[serde(default)]
    predicted_n: Option<u64>,
    #[serde(default)]
    predicted_per_second: Option<f64>,
    /// Speculative decoding's drafted and accepted tokens.
    #[serde(default)]
    draft_n: Option<u64>,
    #[serde(default)]
    draft_n_accepted: Option<u64>,
}

/// What one generation has produced so far.
struct Turn {
    filter: OutputFilter,
    calls: ToolCallAccumulator,
    /// Reasoning that arrived in its own field (not as `<think>` text).
    reasoning: String,
    finish: Option<FinishReason>,
    usage: Option<WireUsage>,
    timings: Option<WireTimings>,
    context_size: u64,
}

impl Turn {
    fn new(filter: OutputFilter, context_size: u64) -> Self {
        Turn {
            filter,
            calls: ToolCallAccumulator::new(),
            reasoning: String::new(),
            finish: None,
            usage: None,
            timings: None,
            context_size,
        }
    }

    /// Applies one chunk (or a whole completion).
    fn apply(
        &mut self,
        response: WireResponse,
        sink: &mut dyn EventSink,
    ) -> Result<Flow, BackendError> {
        if let Some(error) = response.error.filter(|e| !e.is_null()) {
            return Err(http::error_from_value(
                &serde_json::json!({ "error": error }),
            ));
        }
        self.usage = response.usage.or(self.usage);
        self.timings = response.timings.or(self.timings);
        for choice in response.choices.unwrap_or_default() {
            if let Some(reason) = choice.finish_reason.as_deref() {
                self.finish = Some(self.map_finish(reason, sink));
            }
            if let Some(delta) = choice.delta {
                if self.apply_delta(delta, sink) == Flow::Cancel {
                    return Ok(Flow::Cancel);
                }
            }
        }
        Ok(Flow::Continue)
    }

    fn apply_delta(&mut self, delta: WireDelta, sink: &mut dyn EventSink) -> Flow {
        for reasoning in [delta.reasoning_content, delta.reasoning]
            .into_iter()
            .flatten()
        {
            if reasoning.is_empty() {
                continue;
            }
            self.reasoning.push_str(&reasoning);
            if sink.emit(Event::Thinking(reasoning)) == Flow::Cancel {
                return Flow::Cancel;
            }
        }
        for call in delta.tool_calls.unwrap_or_default() {
            self.push_call(call);
        }
        match delta.content {
            Some(text) if !text.is_empty() => self.filter.push(&text, sink),
            _ => Flow::Continue,
        }
    }

    /// A call without an index but with a new id (whole calls in a
    /// non-streamed reply) starts a new call in the accumulator.
    fn push_call(&mut self, call: WireToolCallDelta) {
        let function = call.function.unwrap_or_default();
        let arguments = match function.arguments {
            Some(Value::String(s)) => Some(s),
            Some(Value::Null) | None => None,
            Some(other) => Some(other.to_string()),
        };
        self.calls.push(ToolCallDelta {
            index: call.index,
            id: call.id.as_deref(),
            name: function.name.as_deref(),
            arguments: arguments.as_deref(),
        });
    }

    fn map_finish(&self, reason: &str, sink: &mut dyn EventSink) -> FinishReason {
        match reason {
            "length" => FinishReason::Length,
            "tool_calls" | "function_call" => FinishReason::ToolCalls,
            "content_filter" => {
                let note = "the provider's content filter stopped the reply".to_string();
                sink.emit(Event::System(note));
                FinishReason::Stop
            }
            _ => FinishReason::Stop,
        }
    }

    /// The partial reply after a cancel: what was shown so far.
    fn cancelled(self) -> Reply {
        let thinking = self.reasoning + self.filter.thinking();
        Reply {
            content: self.filter.content().to_string(),
            thinking,
            tool_calls: Vec::new(),
            finish: FinishReason::Cancelled,
            usage: None,
            artefacts: Vec::new(),
            stop_sequence: None,
        }
    }

    /// Flushes the filter, emits `Stats` and builds the reply.
    fn complete(mut self, sink: &mut dyn EventSink) -> Reply {
        let ending = Ending {
            calls: std::mem::take(&mut self.calls).finish(),
            thinking: self.reasoning.clone(),
            finish: self.finish,
            usage: self.usage().map(|u| Usage {
                prompt_tokens: u.prompt_tokens,
                completion_tokens: u.completion_tokens,
            }),
            stats: self.stats(),
            ..Ending::default()
        };
        match assemble(&mut self.filter, ending, sink) {
            Some(reply) => reply,
            None => self.cancelled(),
        }
    }

    /// Usage as reported, or as llama-server's timings count it.
    fn usage(&self) -> Option<WireUsage> {
        self.usage.or_else(|| {
            let t = self.timings?;
            Some(WireUsage {
                prompt_tokens: t.prompt_n?,
                completion_tokens: t.predicted_n?,
            })
        })
    }

    fn stats(&self) -> Stats {
        let usage = self.usage().unwrap_or_default();
        let timings = self.timings.unwrap_or_default();
        Stats {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            prefill_tps: timings.prompt_per_second,
            decode_tps: timings.predicted_per_second,
            context_used: usage.prompt_tokens + usage.completion_tokens,
            context_size: self.context_size,
            cached_tokens: 0,
            draft_tokens: timings.draft_n.unwrap_or(0),
            draft_accepted: timings.draft_n_accepted.unwrap_or(0),
            provider: None,
        }
    }
}

fn parse_json(text: &str) -> Result<WireResponse, BackendError> {
    serde_json::from_str(text).map_err(|e| {
        let start: String = text.chars().take(200).collect();
        BackendError::Protocol(format!("bad JSON from the server ({e}): {start}"))
    })
}

/// Reads an SSE stream until `[DONE]` (see the module docs for a missing one).
fn read_stream(
    reader: impl std::io::BufRead,
    mut turn: Turn,
    sink: &mut dyn EventSink,
    url: &str,
) -> Result<Reply, BackendError> {
    let mut done = false;
    for event in SseDecoder::new(reader) {
        let event = event.map_err(|e| http::io_error(e, url))?;
        let data = event.data.trim();
        if data == "[DONE]" {
            done = true;
            break;
        }
        if data.is_empty() {
            continue;
        }
        if turn.apply(parse_json(data)?, sink)? == Flow::Cancel || sink.cancelled() {
            return Ok(turn.cancelled());
        }
    }
    if !done && turn.finish.is_none() {
        return Err(BackendError::Protocol(format!(
            "{url}: the stream ended before the reply was complete"
        )));
    }
    Ok(turn.complete(sink))
}

/// The fuzzer's entry (`crate::fuzz`): a body read as a stream and as a whole reply.
#[cfg(test)]
pub(crate) fn fuzz_reply(bytes: &[u8]) {
    let turn = || Turn::new(OutputFilter::new(vec!["read".into()]), 0);
    let _ = read_stream(bytes, turn(), &mut Vec::new(), "fuzz");
    let _ = read_whole(bytes, turn(), &mut Vec::new(), "fuzz");
}

/// Reads a whole `chat.completion` body.
fn read_whole(
    reader: impl Read,
    mut turn: Turn,
    sink: &mut dyn EventSink,
    url: &str,
) -> Result<Reply, BackendError> {
    let text = http::read_text(reader, url)?;
    if turn.apply(parse_json(&text)?, sink)? == Flow::Cancel {
        return Ok(turn.cancelled());
    }
    Ok(turn.complete(sink))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{fake, Backend, Sampling};
    use crate::core::ToolSpec;
    use crate::stream::tests_support::sse_fixture;
    use crossbeam_channel::{Receiver, Sender};
    use serde_json::json;
    use std::thread::JoinHandle;
    use std::time::Instant;

    /// A response the fake server will give.
    struct Canned {
        status: u16,
        headers: Vec<(&'static str, &'static str)>,
        body: Vec<u8>,
    }

    fn sse(name: &str) -> Canned {
        Canned {
            status: 200,
            headers: vec![("Content-Type", "text/event-stream")],
            body: sse_fixture(name),
        }
    }

    fn json_response(status: u16, body: Value) -> Canned {
        Canned {
            status,
            headers: vec![("Content-Type", "application/json")],
            body: body.to_string().into_bytes(),
        }
    }

    /// A request the fake server received.
    #[derive(Debug, Clone, PartialEq)]
    struct Recorded {
        url: String,
        headers: Vec<(String, String)>,
        body: Value,
    }

    impl Recorded {
        fn header(&self, name: &str) -> Option<&str> {
            self.headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
        }
    }

    /// A real HTTP server on 127.0.0.1:0 that answers with `responses` in
    /// order, recording every request, then stops.
    struct FakeServer {
        base_url: String,
        requests: Receiver<Recorded>,
        thread: Option<JoinHandle<()>>,
    }

    impl FakeServer {
        fn start(responses: Vec<Canned>) -> Self {
            let server = tiny_http::Server::http("127.0.0.1:0").expect("bind loopback");
            let addr = server.server_addr().to_ip().expect("an IP listener");
            let (tx, rx) = crossbeam_channel::unbounded();
            let thread = std::thread::Builder::new()
                .name("fake-openai".into())
                .spawn(move || serve(server, responses, tx))
                .expect("spawn server thread");
            FakeServer {
                base_url: format!("http://{addr}/v1"),
                requests: rx,
                thread: Some(thread),
            }
        }

        /// Every request received, once the server answered them all.
        fn finish(mut self) -> Vec<Recorded> {
            if let Some(thread) = self.thread.take() {
                thread.join().expect("server thread");
            }
            self.requests.try_iter().collect()
        }
    }

    fn serve(server: tiny_http::Server, responses: Vec<Canned>, tx: Sender<Recorded>) {
        for canned in responses {
            let Ok(mut request) = server.recv() else {
                return;
            };
            let mut body = String::new();
            request
                .as_reader()
                .read_to_string(&mut body)
                .expect("request body");
            let headers = request
                .headers()
                .iter()
                .map(|h| (h.field.to_string(), h.value.to_string()))
                .collect();
            let recorded = Recorded {
                url: request.url().to_string(),
                headers,
                body: serde_json::from_str(&body).unwrap_or(Value::Null),
            };
            tx.send(recorded).expect("test still listening");
            let mut response =
                tiny_http::Response::from_data(canned.body).with_status_code(canned.status);
            for (name, value) in canned.headers {
                let header = tiny_http::Header::from_bytes(name, value).expect("valid header");
                response.add_header(header);
            }
            // The client may have gone (e.g. after a cancel); that is not the server's failure.
            let _ = request.respond(response);
        }
    }

    fn backend(base_url: &str) -> OpenAiBackend {
        let mut config = OpenAiConfig::new(base_url, "test-model");
        config.api_key = Some("sk-test-123".into());
        config.context_size = 4096;
        OpenAiBackend::new(config)
    }

    fn session() -> Session {
        let mut session = Session::new("Be brief.");
        session.messages.push(Message::user("hi"));
        session
    }

    fn tools() -> Vec<ToolSpec> {
        ["read", "bash"]
            .map(|name| ToolSpec {
                name: name.into(),
                description: format!("the {name} tool"),
                parameters: json!({"type":"object"}),
            })
            .to_vec()
    }

    fn generate(
        server: &FakeServer,
        stream: bool,
        events: &mut Vec<Event>,
    ) -> Result<Reply, BackendError> {
        let tools = tools();
        let sampling = Sampling {
            max_tokens: Some(100),
            temperature: Some(0.5),
            ..Sampling::default()
        };
        let request = GenerateRequest {
            tools: &tools,
            tool_choice: &ToolChoice::Auto,
            sampling: &sampling,
            stream,
        };
        backend(&server.base_url).generate(&session(), &request, events)
    }

    fn text_of(events: &[Event], pick: fn(&Event) -> Option<&str>) -> String {
        events.iter().filter_map(pick).collect()
    }

    fn content(event: &Event) -> Option<&str> {
        match event {
            Event::Content(text) => Some(text),
            _ => None,
        }
    }

    fn thinking(event: &Event) -> Option<&str> {
        match event {
            Event::Thinking(text) => Some(text),
            _ => None,
        }
    }

    fn stats(events: &[Event]) -> Vec<&Stats> {
        events
            .iter()
            .filter_map(|e| match e {
                Event::Stats(stats) => Some(stats),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn models_are_listed_with_the_key() {
        let body = json!({"object": "list", "data": [{"id": "gpt-a", "object": "model"}, {"id": "gpt-b"}]});
        let server = FakeServer::start(vec![json_response(200, body)]);
        let models = backend(&format!("{}/", server.base_url)).list_models();
        assert_eq!(models.expect("models"), ["gpt-a", "gpt-b"]);
        let request = &server.finish()[0];
        assert_eq!(request.url, "/v1/models");
        assert_eq!(request.header("authorization"), Some("Bearer sk-test-123"));
    }

    #[test]
    fn plain_text_stream_with_usage_and_a_well_formed_request() {
        let server = FakeServer::start(vec![sse("text.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, true, &mut events).expect("reply");
        assert_eq!(reply.content, "héllo ✓ 日本 🦀");
        assert_eq!(text_of(&events, content), "héllo ✓ 日本 🦀");
        assert_eq!(reply.finish, FinishReason::Stop);
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 5
            })
        );
        let stats = stats(&events);
        assert_eq!(stats.len(), 1);
        assert_eq!((stats[0].context_used, stats[0].context_size), (17, 4096));
        let requests = server.finish();
        assert_eq!(requests.len(), 1);
        let request = &requests[0];
        assert_eq!(request.url, "/v1/chat/completions");
        assert_eq!(request.header("Authorization"), Some("Bearer sk-test-123"));
        assert_eq!(request.body["model"], "test-model");
        assert_eq!(
            request.body["messages"],
            json!([{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}])
        );
        assert_eq!(request.body["stream"], true);
        assert_eq!(
            request.body["stream_options"],
            json!({"include_usage": true})
        );
        assert_eq!(request.body["max_tokens"], 100);
        assert_eq!(request.body["temperature"], 0.5);
        assert_eq!(request.body["tool_choice"], "auto");
        assert_eq!(request.body["tools"][1]["function"]["name"], "bash");
        assert!(request.body.get("top_p").is_none() && request.body.get("stop").is_none());
    }

    #[test]
    fn reasoning_deltas_and_think_tags_become_thinking() {
        let server = FakeServer::start(vec![sse("reasoning.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, true, &mut events).expect("reply");
        assert_eq!(text_of(&events, thinking), "Let me think about ✓ it.inline");
        assert_eq!(reply.thinking, "Let me think about ✓ it.inline");
        assert_eq!(reply.content, "Answer: 42");
        // llama-server timings stand in for usage.
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt_tokens: 20,
                completion_tokens: 8
            })
        );
        assert_eq!(stats(&events)[0].decode_tps, Some(40.25));
        server.finish();
    }

    #[test]
    fn parallel_tool_calls_split_across_chunks() {
        let server = FakeServer::start(vec![sse("tool_calls.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, true, &mut events).expect("reply");
        assert_eq!(reply.content, "Checking both.");
        assert_eq!(reply.finish, FinishReason::ToolCalls);
        let calls: Vec<(&str, &str, &Value)> = reply
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_Ab12", "read", &json!({"path": "日本.txt"})),
                ("call_Cd34", "bash", &json!({"command": "ls"})),
            ]
        );
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt_tokens: 40,
                completion_tokens: 30
            })
        );
        server.finish();
    }

    #[test]
    fn every_fixture_decodes_the_same_split_at_every_offset() {
        fake::check_splits("openai", "sse", |reader, sink| {
            let names = fake::tools().into_iter().map(|t| t.name).collect();
            let turn = Turn::new(OutputFilter::new(names), 0);
            read_stream(reader, turn, sink, "test")
        });
    }

    #[test]
    fn mid_stream_error_is_typed_and_not_retried_after_output() {
        let server = FakeServer::start(vec![sse("midstream_error.sse")]);
        let mut events = Vec::new();
        let error = generate(&server, true, &mut events).expect_err("an error");
        assert!(
            matches!(&error, BackendError::Http { message, .. } if message == "The server is overloaded")
        );
        assert_eq!(text_of(&events, content), "partial");
        assert_eq!(server.finish().len(), 1);
    }

    #[test]
    fn stream_without_done_but_with_finish_is_accepted() {
        let server = FakeServer::start(vec![sse("no_done.sse")]);
        let reply = generate(&server, true, &mut Vec::new()).expect("reply");
        assert_eq!(
            (reply.content.as_str(), reply.finish),
            ("no done marker", FinishReason::Length)
        );
        server.finish();
    }

    #[test]
    fn truncated_stream_is_a_protocol_error() {
        let truncated = Canned {
            status: 200,
            headers: vec![("Content-Type", "text/event-stream")],
            body: b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"cut\"}}]}\n\n"
                .to_vec(),
        };
        let server = FakeServer::start(vec![truncated]);
        let error = generate(&server, true, &mut Vec::new()).expect_err("an error");
        assert!(matches!(error, BackendError::Protocol(_)), "{error:?}");
        server.finish();
    }

    #[test]
    fn rate_limit_is_retried_after_retry_after_with_the_same_request() {
        let limited = Canned {
            status: 429,
            headers: vec![("Content-Type", "application/json"), ("Retry-After", "1")],
            body: br#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#
                .to_vec(),
        };
        let server = FakeServer::start(vec![limited, sse("text.sse")]);
        let mut events = Vec::new();
        let started = Instant::now();
        let reply = generate(&server, true, &mut events).expect("reply after retry");
        assert!(started.elapsed() >= std::time::Duration::from_millis(900));
        assert_eq!(reply.content, "héllo ✓ 日本 🦀");
        let notices: Vec<&Event> = events
            .iter()
            .filter(|e| matches!(e, Event::System(_)))
            .collect();
        assert!(
            matches!(notices[..], [Event::System(ref m)] if m.starts_with("retrying in 1.0s: HTTP 429")),
            "{notices:?}"
        );
        let requests = server.finish();
        assert_eq!(requests.len(), 2);
        assert_eq!(requests[0], requests[1]);
    }

    #[test]
    fn context_overflow_carries_token_counts() {
        let body = json!({"error": {
            "message": "This model's maximum context length is 4096 tokens. However, your messages resulted in 5000 tokens.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
        let server = FakeServer::start(vec![json_response(400, body)]);
        let error = generate(&server, true, &mut Vec::new()).expect_err("an error");
        assert!(
            matches!(
                error,
                BackendError::ContextOverflow {
                    prompt_tokens: Some(5000),
                    limit: Some(4096),
                    ..
                }
            ),
            "{error:?}"
        );
        assert_eq!(error.tokens_over(), Some(904));
        assert_eq!(server.finish().len(), 1);
    }

    #[test]
    fn closed_port_is_a_connect_error_naming_the_url() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("address").port();
        drop(listener);
        let mut config = OpenAiConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
        config.max_retries = 0;
        let tools = tools();
        let request = GenerateRequest {
            tools: &tools,
            tool_choice: &ToolChoice::Auto,
            sampling: &Sampling::default(),
            stream: true,
        };
        let error = OpenAiBackend::new(config)
            .generate(&session(), &request, &mut Vec::new())
            .expect_err("nothing listens");
        match error {
            BackendError::Connect(message) => {
                assert!(message.contains(&format!("127.0.0.1:{port}")), "{message}")
            }
            other => panic!("expected a connect error, got {other:?}"),
        }
    }

    #[test]
    fn non_streaming_completion_with_native_and_text_calls() {
        let body = json!({"object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
            "message": {"role": "assistant", "reasoning_content": "hmm",
                "content": "Sure.\n<tool_call>{\"name\": \"bash\", \"arguments\": {\"command\": \"pwd\"}}</tool_call>",
                "tool_calls": [{"id": "call_x", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"a\"}"}}]}}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13}});
        let server = FakeServer::start(vec![json_response(200, body)]);
        let mut events = Vec::new();
        let reply = generate(&server, false, &mut events).expect("reply");
        assert_eq!(reply.content, "Sure.\n");
        assert_eq!(reply.thinking, "hmm");
        let calls: Vec<(&str, &str)> = reply
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str()))
            .collect();
        assert_eq!(calls, [("call_x", "read"), ("call_1", "bash")]);
        assert_eq!(reply.tool_calls[1].arguments, json!({"command": "pwd"}));
        let requests = server.finish();
        assert_eq!(requests[0].body["stream"], false);
        assert!(requests[0].body.get("stream_options").is_none());
    }

    #[test]
    fn cancel_keeps_the_partial_text() {
        let server = FakeServer::start(vec![sse("text.sse")]);
        let tools = tools();
        let request = GenerateRequest {
            tools: &tools,
            tool_choice: &ToolChoice::Auto,
            sampling: &Sampling::default(),
            stream: true,
        };
        let mut sink = |_event: Event| Flow::Cancel;
        let reply = backend(&server.base_url)
            .generate(&session(), &request, &mut sink)
            .expect("a cancelled reply");
        assert_eq!(
            (reply.content.as_str(), reply.finish),
            ("héllo ✓ ", FinishReason::Cancelled)
        );
        server.finish();
    }

    #[test]
    fn history_with_tool_calls_and_results_on_the_wire() {
        let mut session = session();
        let call = ToolCall {
            id: "call_9".into(),
            name: "read".into(),
            arguments: json!({"path": "x"}),
        };
        let mut assistant = Message::assistant("");
        assistant.tool_calls.push(call.clone());
        session.messages.push(assistant);
        session
            .messages
            .push(Message::tool_result(&call, "contents"));
        let config = OpenAiConfig::new("https://api.openai.com/v1", "gpt");
        let sampling = Sampling {
            top_k: Some(5),
            stop: vec!["END".into()],
            ..Sampling::default()
        };
        let request = GenerateRequest {
            tools: &[],
            tool_choice: &ToolChoice::Required,
            sampling: &sampling,
            stream: false,
        };
        let wire = serde_json::to_value(
            build_request(&config, true, &session, &request).expect("request"),
        )
        .expect("serialisable");
        assert_eq!(
            wire["messages"][2],
            json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_9", "type": "function", "function": {"name": "read", "arguments": "{\"path\":\"x\"}"}}]})
        );
        assert_eq!(
            wire["messages"][3],
            json!({"role": "tool", "content": "contents", "tool_call_id": "call_9"})
        );
        assert!(
            wire.get("top_k").is_none()
                && wire.get("tools").is_none()
                && wire.get("tool_choice").is_none()
        );
        assert_eq!(wire["stop"], json!(["END"]));
        let named = ToolChoice::Named("bash".into());
        assert_eq!(
            serde_json::to_value(wire_tool_choice(&named)).expect("serialisable"),
            json!({"type": "function", "function": {"name": "bash"}})
        );
    }

    #[test]
    fn azure_endpoint_and_key_header() {
        let mut config = OpenAiConfig::new("https://res.openai.azure.com/", "gpt");
        config.azure = Some(AzureDeployment {
            deployment: "dep1".into(),
            api_version: "2024-06-01".into(),
        });
        config.max_tokens_param = MaxTokensParam::MaxCompletionTokens;
        let backend = OpenAiBackend::new(config.clone());
        assert_eq!(backend.endpoint(), "https://res.openai.azure.com/openai/deployments/dep1/chat/completions?api-version=2024-06-01");
        let sampling = Sampling {
            max_tokens: Some(7),
            ..Sampling::default()
        };
        let request = GenerateRequest {
            tools: &[],
            tool_choice: &ToolChoice::Auto,
            sampling: &sampling,
            stream: true,
        };
        let wire = serde_json::to_value(
            build_request(&config, true, &session(), &request).expect("request"),
        )
        .expect("serialisable");
        assert_eq!(
            (wire.get("max_tokens"), &wire["max_completion_tokens"]),
            (None, &json!(7))
        );
    }

    fn generate_with(
        server: &FakeServer,
        model: &str,
        session: &Session,
    ) -> Result<Reply, BackendError> {
        let mut config = OpenAiConfig::new(&server.base_url, model);
        config.api_key = Some("sk-test-123".into());
        let sampling = Sampling::default();
        let request = fake::request(&[], &sampling, true);
        OpenAiBackend::new(config).generate(session, &request, &mut Vec::new())
    }

    /// The bytes a `data:` URL carries, after checking its type.
    fn data_url_bytes(url: &Value, mime: &str) -> Vec<u8> {
        let url = url.as_str().expect("a URL string");
        let payload = url
            .strip_prefix(&format!("data:{mime};base64,"))
            .expect("a base64 data URL of the type");
        fake::base64_of(&json!(payload))
    }

    #[test]
    fn images_go_as_image_url_parts_and_a_tool_results_images_in_a_user_message_after_it() {
        let image = fake::png_image();
        let server = FakeServer::start(vec![sse("text.sse")]);
        generate_with(&server, "gpt-4o", &fake::image_session(&image)).expect("reply");
        let body = &server.finish()[0].body;
        let messages = body["messages"].as_array().expect("messages");
        assert_eq!(messages.len(), 6, "{body}");
        let user = &messages[1]["content"];
        assert_eq!(user[0], json!({"type": "text", "text": "look:"}));
        assert_eq!(user[1]["type"], "image_url");
        assert_eq!(user[2], json!({"type": "text", "text": " what is it?"}));
        assert_eq!(
            data_url_bytes(&user[1]["image_url"]["url"], "image/png"),
            *image.bytes
        );
        assert_eq!(messages[2]["tool_calls"][0]["id"], "call_1");
        assert_eq!(
            messages[3],
            json!({"role": "tool", "content": "a screenshot", "tool_call_id": "call_1"})
        );
        assert_eq!(messages[4]["role"], "user");
        let after = &messages[4]["content"];
        assert_eq!(
            after[0],
            json!({"type": "text", "text": "The images returned by the read call call_1:"})
        );
        assert_eq!(
            data_url_bytes(&after[1]["image_url"]["url"], "image/png"),
            *image.bytes
        );
        assert_eq!(messages[5], json!({"role": "user", "content": "and now?"}));
    }

    #[test]
    fn a_gif_goes_as_a_png_of_its_first_frame() {
        let image = fake::gif_image();
        let server = FakeServer::start(vec![sse("text.sse")]);
        generate_with(&server, "gpt-4o", &fake::image_session(&image)).expect("reply");
        let body = &server.finish()[0].body;
        let bytes = data_url_bytes(
            &body["messages"][1]["content"][1]["image_url"]["url"],
            "image/png",
        );
        let sent = crate::core::Image::from_bytes(bytes).expect("a PNG");
        let pixels = |image: &crate::core::Image| image.rgb().map(|rgb| rgb.data).expect("decodes");
        assert_eq!((sent.width, sent.height), (2, 1));
        assert_eq!(pixels(&sent), pixels(&image));
    }

    #[test]
    fn a_text_only_model_refuses_images_before_sending() {
        let image = fake::png_image();
        for model in [
            "gpt-3.5-turbo",
            "deepseek-chat",
            "openrouter/openai/o3-mini",
        ] {
            let server = FakeServer::start(Vec::new());
            let result = generate_with(&server, model, &fake::image_session(&image));
            fake::assert_refused_for_images(result, model);
            assert_eq!(server.finish(), Vec::new(), "{model}: nothing sent");
            assert!(!backend_for(model).takes_images(), "{model}");
        }
        for model in ["gpt-4o", "gpt-4.1-mini", "o3", "test-model"] {
            assert!(backend_for(model).takes_images(), "{model}");
        }
        // A text-only model still takes a session without images.
        let server = FakeServer::start(vec![sse("text.sse")]);
        generate_with(&server, "gpt-3.5-turbo", &session()).expect("reply");
        assert_eq!(server.finish().len(), 1);
    }

    fn backend_for(model: &str) -> OpenAiBackend {
        OpenAiBackend::new(OpenAiConfig::new("http://127.0.0.1:9", model))
    }

    #[test]
    fn an_image_without_its_bytes_is_refused_before_sending() {
        let mut image = fake::png_image();
        image.bytes = Default::default();
        let server = FakeServer::start(Vec::new());
        let error =
            generate_with(&server, "gpt-4o", &fake::image_session(&image)).expect_err("refused");
        assert!(
            matches!(&error, BackendError::Invalid(m) if m.contains("has no bytes")),
            "{error:?}"
        );
        assert_eq!(server.finish(), Vec::new());
    }
}

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

mod reply;

use reply::ReplyStream;
use std::borrow::Cow;

use serde::Serialize;
use serde_json::Value;

use super::hosted::{self, Body, Call, Client, Dialect};
use super::http::ApiSettings;
use super::{GenerateRequest, ResponseFormat, ToolChoice};
use crate::core::{BackendError, ContentPart, Message, Role, Session, ToolCall};

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
    /// `base_url` conventionally ends in `/v1`; `/chat/completions` is appended.
    pub api: ApiSettings,
    pub azure: Option<AzureDeployment>,
    pub max_tokens_param: MaxTokensParam,
}

/// A Chat Completions endpoint.
pub struct OpenAiBackend {
    config: OpenAiConfig,
    client: Client,
}

impl OpenAiBackend {
    pub fn new(config: OpenAiConfig) -> Self {
        let client = Client::new(&config.api);
        OpenAiBackend { config, client }
    }

    /// The URL requests go to.
    pub fn endpoint(&self) -> String {
        let base = self.config.api.base();
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
            || crate::util::net::url_host(&self.config.api.base_url).ends_with("openai.com")
    }
}

impl Dialect for OpenAiBackend {
    const KIND: &'static str = "openai";
    type Reader = ReplyStream;

    fn client(&self) -> (&ApiSettings, &Client) {
        (&self.config.api, &self.client)
    }

    fn url(&self, _: &GenerateRequest<'_>) -> String {
        self.endpoint()
    }

    /// SSE or JSON out; the key as a bearer token, or Azure's `api-key`.
    fn headers(&self, call: Call) -> Vec<(&'static str, String)> {
        let accept = match call {
            Call::Post { stream: true } => "text/event-stream",
            Call::Post { stream: false } | Call::ModelList => "application/json",
        };
        let mut headers = vec![("Accept", accept.to_string())];
        match (&self.config.api.api_key, &self.config.azure) {
            (Some(key), Some(_)) => headers.push(("api-key", key.clone())),
            (Some(key), None) => headers.push(("Authorization", format!("Bearer {key}"))),
            (None, _) => {}
        }
        headers
    }

    fn body(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
    ) -> Result<Body, BackendError> {
        let wire = build_request(&self.config, self.strict_host(), session, request)?;
        Body::encode(&wire, wire.messages.len())
    }

    /// `GET /models` (vLLM, llama-server and shepherd's own `--server` answer it too).
    fn models_url(&self) -> Result<String, BackendError> {
        match self.config.azure {
            Some(_) => Err(BackendError::Config(
                "an Azure deployment serves one model; list them in the Azure portal".into(),
            )),
            None => Ok(format!("{}/models", self.config.api.base())),
        }
    }

    fn model_ids(&self, list: &Value) -> Vec<String> {
        hosted::ids_in(&list["data"], "id")
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
        model: &config.api.model,
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

#[cfg(test)]
pub(crate) use reply::fuzz_reply;

#[cfg(test)]
mod tests;

//! The Anthropic Messages backend (`POST /v1/messages`), streamed (SSE with
//! named events) or whole; also what llama.cpp, Ollama and mistral.rs serve
//! under the same path.
//!
//! Mirrors [`super::openai`]: its own wire structs, converted from the core
//! types in one place ([`build_request`]); bodies read through the shared SSE
//! decoder, tool-call accumulator and output filter; failing and retrying is
//! [`super::http`]'s job.
//!
//! Decisions worth knowing:
//! - The system prompt is the top-level `system` field; tool results travel
//!   as `tool_result` blocks in the user turn after the `tool_use` turn, and
//!   consecutive same-role turns are merged, since the API wants them alternating.
//! - Images go as base64 `image` blocks in text order, in the user turn and
//!   inside a `tool_result`'s content (which is then a block list, not a string).
//! - `thinking` blocks (with their `signature`) and `redacted_thinking` blocks
//!   are kept as [`Artefact`]s on the assistant message and sent back unchanged,
//!   but only to an `anthropic` backend; another kind's artefacts are dropped.
//! - A stream must end with `message_stop`; without it the reply was cut off
//!   and that is a `Protocol` error. `ping` and unknown events are ignored.
//! - `stop_reason: model_context_window_exceeded` means the *answer* ran into
//!   the window after output was shown: it ends the reply as `Length` with a
//!   notice rather than an overflow error, which would re-run shown text.

mod reply;

use reply::ReplyStream;

use serde::Serialize;
use serde_json::Value;

use super::hosted::{self, Body, Call, Client, Dialect};
use super::http::ApiSettings;
use super::{GenerateRequest, ToolChoice};
use crate::core::ToolSpec;
use crate::core::{Artefact, BackendError, ContentPart, Message, Role, Session};

pub use reply::KIND;
/// The API version header every request carries.
const API_VERSION: &str = "2023-06-01";
/// `max_tokens` is required; this is used when nothing else was asked for.
const DEFAULT_MAX_TOKENS: u32 = 8192;

/// Everything the backend needs, passed as a value.
#[derive(Debug, Clone, PartialEq)]
pub struct AnthropicConfig {
    /// `https://api.anthropic.com` (with or without `/v1`).
    pub api: ApiSettings,
    /// Thinking budget in tokens (`--reasoning`); `None` leaves thinking off.
    pub thinking_budget: Option<u32>,
}

/// The thinking budget for a `--reasoning` level; `off` (or nothing) is none.
pub fn thinking_budget(level: Option<&str>) -> Option<u32> {
    match level? {
        "low" => Some(2048),
        "medium" | "on" => Some(8192),
        "high" => Some(24_576),
        _ => None,
    }
}

/// A Messages endpoint.
pub struct AnthropicBackend {
    config: AnthropicConfig,
    client: Client,
}

impl AnthropicBackend {
    pub fn new(config: AnthropicConfig) -> Self {
        let client = Client::new(&config.api);
        AnthropicBackend { config, client }
    }

    /// `{base}/v1/<path>`, whether or not the base already ends in `/v1`.
    fn url_of(&self, path: &str) -> String {
        let base = self.config.api.base();
        match base.strip_suffix("/v1") {
            Some(root) => format!("{root}/v1/{path}"),
            None => format!("{base}/v1/{path}"),
        }
    }
}

impl Dialect for AnthropicBackend {
    const KIND: &'static str = KIND;
    const ENTRIES: &'static str = "turns";
    type Reader = ReplyStream;

    fn client(&self) -> (&ApiSettings, &Client) {
        (&self.config.api, &self.client)
    }

    fn url(&self, _: &GenerateRequest<'_>) -> String {
        self.url_of("messages")
    }

    /// The version, then the key (OAuth tokens as bearer, API keys as `x-api-key`).
    fn headers(&self, _: Call) -> Vec<(&'static str, String)> {
        let mut headers = vec![("anthropic-version", API_VERSION.to_string())];
        match self.config.api.api_key.as_deref() {
            Some(key) if key.starts_with("sk-ant-oat") => {
                headers.push(("Authorization", format!("Bearer {key}")))
            }
            Some(key) => headers.push(("x-api-key", key.to_string())),
            None => {}
        }
        headers
    }

    fn body(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
    ) -> Result<Body, BackendError> {
        let wire = build_request(&self.config, session, request)?;
        Body::encode(&wire, wire.messages.len())
    }

    /// `/v1/models`.
    fn models_url(&self) -> Result<String, BackendError> {
        Ok(self.url_of("models"))
    }

    fn model_ids(&self, list: &Value) -> Vec<String> {
        hosted::ids_in(&list["data"], "id")
    }
}

// ---- request wire structs ----

#[derive(Debug, Serialize)]
struct MessagesRequest<'a> {
    model: &'a str,
    max_tokens: u32,
    #[serde(skip_serializing_if = "str::is_empty")]
    system: &'a str,
    messages: Vec<WireTurn<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_choice: Option<WireToolChoice<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<WireThinking>,
}

#[derive(Debug, Serialize)]
struct WireThinking {
    #[serde(rename = "type")]
    kind: &'static str,
    budget_tokens: u32,
}

#[derive(Debug, Serialize)]
struct WireTurn<'a> {
    role: &'static str,
    content: Vec<WireBlock<'a>>,
}

#[derive(Debug, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock<'a> {
    Text {
        text: &'a str,
    },
    Thinking {
        thinking: &'a str,
        signature: &'a str,
    },
    RedactedThinking {
        data: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
    ToolResult {
        tool_use_id: &'a str,
        content: WireToolContent<'a>,
    },
    Image {
        source: WireImageSource,
    },
}

/// A tool result's content: its text, or text and image blocks when it returned images.
#[derive(Debug, Serialize)]
#[serde(untagged)]
enum WireToolContent<'a> {
    Text(&'a str),
    Blocks(Vec<WireBlock<'a>>),
}

#[derive(Debug, Serialize)]
struct WireImageSource {
    /// Always `base64`.
    #[serde(rename = "type")]
    kind: &'static str,
    media_type: String,
    data: String,
}

/// The image types the Messages API takes (every type shepherd decodes).
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/webp", "image/gif"];

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    name: &'a str,
    description: &'a str,
    input_schema: &'a Value,
}

#[derive(Debug, Serialize)]
struct WireToolChoice<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
}

/// Converts the session and request into the wire request: the one place
/// core types meet Anthropic's request shape.
fn build_request<'a>(
    config: &'a AnthropicConfig,
    session: &'a Session,
    request: &GenerateRequest<'a>,
) -> Result<MessagesRequest<'a>, BackendError> {
    let sampling = request.sampling;
    let budget = config.thinking_budget;
    let asked = sampling.max_tokens.unwrap_or(DEFAULT_MAX_TOKENS);
    // The budget counts inside max_tokens, which must leave room for the answer.
    let max_tokens = budget.map_or(asked, |b| asked.max(b + 1024));
    Ok(MessagesRequest {
        model: &config.api.model,
        max_tokens,
        system: &session.system_prompt,
        messages: wire_turns(session)?,
        tools: request.tools.iter().map(wire_tool).collect(),
        tool_choice: (!request.tools.is_empty()).then(|| wire_tool_choice(request.tool_choice)),
        stream: request.stream,
        stop_sequences: &sampling.stop,
        // Extended thinking accepts neither a temperature nor top_k.
        temperature: sampling.temperature.filter(|_| budget.is_none()),
        top_p: sampling.top_p,
        top_k: sampling.top_k.filter(|_| budget.is_none()),
        thinking: budget.map(|budget_tokens| WireThinking {
            kind: "enabled",
            budget_tokens,
        }),
    })
}

/// The history as alternating turns: tool results join the user turn that follows the calls.
fn wire_turns(session: &Session) -> Result<Vec<WireTurn<'_>>, BackendError> {
    let mut turns: Vec<WireTurn<'_>> = Vec::new();
    for message in &session.messages {
        let (role, blocks) = match message.role {
            Role::Assistant => ("assistant", assistant_blocks(message)),
            Role::Tool => ("user", vec![tool_result_block(message)?]),
            Role::User | Role::System => ("user", content_blocks(message)?),
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some(last) if last.role == role => last.content.extend(blocks),
            _ => turns.push(WireTurn {
                role,
                content: blocks,
            }),
        }
    }
    Ok(turns)
}

/// The API rejects empty text blocks.
fn text_blocks(text: &str) -> Vec<WireBlock<'_>> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![WireBlock::Text { text }]
    }
}

/// A message's text and images in text order.
fn content_blocks(message: &Message) -> Result<Vec<WireBlock<'_>>, BackendError> {
    let mut blocks = Vec::new();
    for part in message.parts() {
        match part {
            ContentPart::Text(text) => blocks.push(WireBlock::Text { text }),
            ContentPart::Image(image) => {
                let wire = hosted::wire_image(image, IMAGE_TYPES)?;
                blocks.push(WireBlock::Image {
                    source: WireImageSource {
                        kind: "base64",
                        media_type: wire.mime.clone(),
                        data: wire.base64(),
                    },
                });
            }
        }
    }
    Ok(blocks)
}

/// Thinking first (as the API requires), then text, then the calls.
fn assistant_blocks(message: &Message) -> Vec<WireBlock<'_>> {
    let mut blocks: Vec<WireBlock<'_>> = message
        .artefacts
        .iter()
        .filter_map(|artefact| match artefact {
            Artefact::Thinking {
                origin,
                text,
                signature,
            } if origin == KIND => Some(WireBlock::Thinking {
                thinking: text,
                signature,
            }),
            Artefact::RedactedThinking { origin, data } if origin == KIND => {
                Some(WireBlock::RedactedThinking { data })
            }
            _ => None,
        })
        .collect();
    blocks.extend(text_blocks(&message.content));
    blocks.extend(message.tool_calls.iter().map(|call| WireBlock::ToolUse {
        id: &call.id,
        name: &call.name,
        // `input` must be an object; malformed arguments were kept as text.
        input: match &call.arguments {
            object @ Value::Object(_) => object.clone(),
            _ => Value::Object(serde_json::Map::new()),
        },
    }));
    blocks
}

/// A tool's text as a string, as before images; with images, the blocks.
fn tool_result_block(message: &Message) -> Result<WireBlock<'_>, BackendError> {
    let content = if message.images.is_empty() {
        WireToolContent::Text(&message.content)
    } else {
        WireToolContent::Blocks(content_blocks(message)?)
    };
    Ok(WireBlock::ToolResult {
        tool_use_id: message.tool_call_id.as_deref().unwrap_or_default(),
        content,
    })
}

fn wire_tool(spec: &ToolSpec) -> WireTool<'_> {
    WireTool {
        name: &spec.name,
        description: &spec.description,
        input_schema: &spec.parameters,
    }
}

fn wire_tool_choice(choice: &ToolChoice) -> WireToolChoice<'_> {
    let (kind, name) = match choice {
        ToolChoice::Auto => ("auto", None),
        ToolChoice::None => ("none", None),
        ToolChoice::Required => ("any", None),
        ToolChoice::Named(name) => ("tool", Some(name.as_str())),
    };
    WireToolChoice { kind, name }
}

#[cfg(test)]
pub(crate) use reply::fuzz_reply;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::{self, Canned, FakeServer};
    use crate::backend::hosted::SseReply;
    use crate::backend::{Backend, Sampling};
    use crate::backend::{Reply, Usage};
    use crate::core::ToolCall;
    use crate::core::{Event, FinishReason, Flow};
    use crate::stream::filter::OutputFilter;
    use serde_json::json;

    fn backend(server: &FakeServer, budget: Option<u32>) -> AnthropicBackend {
        let mut api = ApiSettings::new(&server.base_url, "claude-test");
        api.api_key = Some("sk-ant-test".into());
        api.context_size = 200_000;
        api.max_retries = 2;
        AnthropicBackend::new(AnthropicConfig {
            api,
            thinking_budget: budget,
        })
    }

    fn generate(
        server: &FakeServer,
        session: &Session,
        events: &mut Vec<Event>,
    ) -> Result<Reply, BackendError> {
        let tools = fake::tools();
        let sampling = Sampling {
            max_tokens: Some(100),
            temperature: Some(0.5),
            ..Sampling::default()
        };
        let request = fake::request(&tools, &sampling, true);
        backend(server, None).generate(session, &request, events)
    }

    fn stream(name: &str) -> Canned {
        Canned::sse(fake::fixture("anthropic", name))
    }

    #[test]
    fn mcp_tool_names_are_encoded_on_the_wire_and_decoded_back() {
        let events = [
            json!({"type": "message_start", "message": {"id": "m", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 5, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_1", "name": "files__read_file", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \"a\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
            json!({"type": "message_stop"}),
        ];
        let body: String = events
            .iter()
            .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap()))
            .collect();
        let server = FakeServer::start(vec![Canned::sse(body.into_bytes())]);
        let tools = [ToolSpec {
            name: "files:read_file".into(),
            description: "reads".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }];
        let sampling = Sampling::default();
        let request = fake::request(&tools, &sampling, true);
        let reply = backend(&server, None)
            .generate(&fake::session(), &request, &mut Vec::<Event>::new())
            .expect("reply");
        assert_eq!(reply.tool_calls[0].name, "files:read_file");
        assert_eq!(
            server.finish()[0].body["tools"][0]["name"],
            "files__read_file"
        );
    }

    #[test]
    fn every_fixture_decodes_the_same_split_at_every_offset() {
        fake::check_splits("anthropic", "sse", |reader, sink| {
            let state = ReplyStream::new(OutputFilter::new(vec!["read".into()]), 0);
            hosted::read_sse(reader, state, sink, "test")
        });
    }

    #[test]
    fn text_with_usage_and_a_well_formed_request() {
        let server = FakeServer::start(vec![stream("text.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, &fake::session(), &mut events).expect("reply");
        assert_eq!(reply.content, "héllo ✓ 日本 🦀");
        assert_eq!(fake::content(&events), "héllo ✓ 日本 🦀");
        assert_eq!(reply.finish, FinishReason::Stop);
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt_tokens: 25 + 3,
                completion_tokens: 7
            })
        );
        let requests = server.finish();
        let request = &requests[0];
        assert_eq!(request.url, "/v1/messages");
        assert_eq!(request.header("x-api-key"), Some("sk-ant-test"));
        assert_eq!(request.header("anthropic-version"), Some(API_VERSION));
        assert_eq!(request.body["system"], "Be brief.");
        assert_eq!(
            request.body["messages"],
            json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}])
        );
        assert_eq!(request.body["max_tokens"], 100);
        assert_eq!(
            request.body["tools"][1]["input_schema"],
            json!({"type": "object"})
        );
        assert_eq!(request.body["tool_choice"], json!({"type": "auto"}));
    }

    #[test]
    fn thinking_is_streamed_and_its_signature_kept() {
        let server = FakeServer::start(vec![stream("thinking.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, &fake::session(), &mut events).expect("reply");
        assert_eq!(fake::thinking(&events), "Let me think ✓.");
        assert_eq!(reply.content, "42");
        assert_eq!(
            reply.artefacts,
            [
                Artefact::Thinking {
                    origin: KIND.into(),
                    text: "Let me think ✓.".into(),
                    signature: "EqQBCgIYAh==".into()
                },
                Artefact::RedactedThinking {
                    origin: KIND.into(),
                    data: "opaque-bytes".into()
                }
            ]
        );
        server.finish();
    }

    #[test]
    fn two_tool_calls_with_fragmented_arguments() {
        let server = FakeServer::start(vec![stream("tool_calls.sse")]);
        let reply = generate(&server, &fake::session(), &mut Vec::new()).expect("reply");
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
                ("toolu_01", "read", &json!({"path": "日本.txt"})),
                ("toolu_02", "bash", &json!({"command": "ls"})),
            ]
        );
        server.finish();
    }

    #[test]
    fn mid_stream_error_is_typed_and_not_retried_after_output() {
        let server = FakeServer::start(vec![stream("midstream_error.sse")]);
        let mut events = Vec::new();
        let error = generate(&server, &fake::session(), &mut events).expect_err("error");
        assert!(
            matches!(&error, BackendError::Http { status: 529, code, .. } if code == "overloaded_error"),
            "{error:?}"
        );
        assert!(error.is_retryable());
        assert_eq!(fake::content(&events), "partial");
        assert_eq!(server.finish().len(), 1);
    }

    #[test]
    fn overloaded_before_output_is_retried() {
        let overloaded = Canned::json(
            529,
            json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
        );
        let limited = Canned::json(
            429,
            json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}),
        )
        .with_header("retry-after", "0");
        let server = FakeServer::start(vec![overloaded, limited, stream("text.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, &fake::session(), &mut events).expect("reply");
        assert_eq!(reply.content, "héllo ✓ 日本 🦀");
        assert_eq!(fake::notices(&events).len(), 2);
        let requests = server.finish();
        assert_eq!(requests.len(), 3);
        assert_eq!(requests[0].body, requests[2].body);
    }

    #[test]
    fn overflow_and_auth_errors_are_typed() {
        let too_long = Canned::json(
            400,
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "prompt is too long: 208310 tokens > 200000 maximum"}}),
        );
        let server = FakeServer::start(vec![too_long]);
        let error = generate(&server, &fake::session(), &mut Vec::new()).expect_err("error");
        assert_eq!(error.tokens_over(), Some(8310));
        server.finish();
        let denied = Canned::json(
            401,
            json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
        );
        let server = FakeServer::start(vec![denied]);
        let error = generate(&server, &fake::session(), &mut Vec::new()).expect_err("error");
        assert_eq!(error.kind(), crate::core::error::ErrorKind::Auth);
        assert_eq!(server.finish().len(), 1);
    }

    #[test]
    fn truncated_stream_is_a_protocol_error_and_ping_is_ignored() {
        let body = "event: ping\ndata: {\"type\":\"ping\"}\n\nevent: whatever\ndata: {\"type\":\"future_event\"}\n\n";
        let server = FakeServer::start(vec![Canned::sse(body.as_bytes().to_vec())]);
        let error = generate(&server, &fake::session(), &mut Vec::new()).expect_err("error");
        assert!(matches!(error, BackendError::Protocol(_)), "{error:?}");
        server.finish();
    }

    fn history() -> Session {
        let mut session = fake::session();
        let calls: Vec<ToolCall> = ["toolu_a", "toolu_b"]
            .iter()
            .map(|id| ToolCall {
                id: id.to_string(),
                name: "read".into(),
                arguments: json!({"path": id}),
            })
            .collect();
        let mut assistant = Message::assistant("");
        assistant.tool_calls = calls.clone();
        assistant.artefacts = vec![
            Artefact::Thinking {
                origin: KIND.into(),
                text: "plan".into(),
                signature: "sig-1".into(),
            },
            Artefact::Signature {
                origin: "gemini".into(),
                call_id: None,
                signature: "gemini-only".into(),
            },
        ];
        session.messages.push(assistant);
        for call in &calls {
            session
                .messages
                .push(Message::tool_result(call, "contents"));
        }
        session.messages.push(Message::user("and now?"));
        session
    }

    #[test]
    fn tool_results_answer_every_tool_use_in_the_next_user_turn() {
        let sampling = Sampling::default();
        let config = AnthropicConfig {
            api: ApiSettings::new("http://x", "m"),
            thinking_budget: thinking_budget(Some("medium")),
        };
        let session = history();
        let request = fake::request(&[], &sampling, false);
        let wire =
            serde_json::to_value(build_request(&config, &session, &request).expect("request"))
                .expect("json");
        assert_eq!(
            wire["messages"][1],
            json!({"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                {"type": "tool_use", "id": "toolu_a", "name": "read", "input": {"path": "toolu_a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "read", "input": {"path": "toolu_b"}}]})
        );
        assert_eq!(
            wire["messages"][2],
            json!({"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "contents"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "contents"},
                {"type": "text", "text": "and now?"}]})
        );
        assert_eq!(wire["messages"].as_array().map(Vec::len), Some(3));
        assert_eq!(
            wire["thinking"],
            json!({"type": "enabled", "budget_tokens": 8192})
        );
        assert_eq!(wire["max_tokens"], 8192 + 1024);
        assert!(!wire.to_string().contains("gemini-only"));
    }

    #[test]
    fn whole_reply_without_streaming() {
        let body = json!({"id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                        {"type": "text", "text": "Sure."},
                        {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {"command": "pwd"}}],
            "stop_reason": "tool_use", "usage": {"input_tokens": 9, "output_tokens": 4}});
        let server = FakeServer::start(vec![Canned::json(200, body)]);
        let tools = fake::tools();
        let sampling = Sampling::default();
        let request = fake::request(&tools, &sampling, false);
        let reply = backend(&server, None)
            .generate(&fake::session(), &request, &mut Vec::new())
            .expect("reply");
        assert_eq!(
            (reply.content.as_str(), reply.thinking.as_str()),
            ("Sure.", "hm")
        );
        assert_eq!(reply.tool_calls[0].arguments, json!({"command": "pwd"}));
        assert_eq!(reply.finish, FinishReason::ToolCalls);
        assert_eq!(server.finish()[0].body["stream"], false);
    }

    #[test]
    fn cancel_keeps_the_partial_text() {
        let server = FakeServer::start(vec![stream("text.sse")]);
        let tools = fake::tools();
        let sampling = Sampling::default();
        let request = fake::request(&tools, &sampling, true);
        let mut sink = |_event: Event| Flow::Cancel;
        let reply = backend(&server, None)
            .generate(&fake::session(), &request, &mut sink)
            .expect("cancelled reply");
        assert_eq!(reply.finish, FinishReason::Cancelled);
        assert_eq!(reply.content, "héllo ✓ ");
        server.finish();
    }

    #[test]
    fn models_are_listed() {
        let body = json!({"data": [{"type": "model", "id": "claude-a"}, {"type": "model", "id": "claude-b"}], "has_more": false});
        let server = FakeServer::start(vec![Canned::json(200, body)]);
        let models = backend(&server, None).list_models().expect("models");
        assert_eq!(models, ["claude-a", "claude-b"]);
        assert_eq!(server.finish()[0].url, "/v1/models");
    }

    fn generate_with(
        server: &FakeServer,
        model: &str,
        session: &Session,
    ) -> Result<Reply, BackendError> {
        let mut backend = backend(server, None);
        backend.config.api.model = model.into();
        let sampling = Sampling::default();
        let request = fake::request(&[], &sampling, true);
        backend.generate(session, &request, &mut Vec::new())
    }

    #[test]
    fn images_go_as_base64_image_blocks_in_user_turns_and_tool_results() {
        let image = fake::png_image();
        let server = FakeServer::start(vec![stream("text.sse")]);
        generate_with(&server, "claude-sonnet-4-5", &fake::image_session(&image)).expect("reply");
        let body = &server.finish()[0].body;
        let turns = body["messages"].as_array().expect("turns");
        assert_eq!(turns.len(), 3, "{body}");
        let source = |block: &Value| {
            assert_eq!(block["type"], "image");
            assert_eq!(block["source"]["type"], "base64");
            assert_eq!(block["source"]["media_type"], "image/png");
            fake::base64_of(&block["source"]["data"])
        };
        let user = &turns[0]["content"];
        assert_eq!(user[0], json!({"type": "text", "text": "look:"}));
        assert_eq!(source(&user[1]), *image.bytes);
        assert_eq!(user[2], json!({"type": "text", "text": " what is it?"}));
        assert_eq!(turns[1]["content"][0]["type"], "tool_use");
        let result = &turns[2]["content"][0];
        assert_eq!(result["type"], "tool_result");
        assert_eq!(result["tool_use_id"], "call_1");
        assert_eq!(
            result["content"][0],
            json!({"type": "text", "text": "a screenshot"})
        );
        assert_eq!(source(&result["content"][1]), *image.bytes);
        assert_eq!(
            turns[2]["content"][1],
            json!({"type": "text", "text": "and now?"})
        );
    }

    #[test]
    fn a_gif_goes_as_it_is() {
        let image = fake::gif_image();
        let server = FakeServer::start(vec![stream("text.sse")]);
        generate_with(&server, "claude-test", &fake::image_session(&image)).expect("reply");
        let block = &server.finish()[0].body["messages"][0]["content"][1];
        assert_eq!(block["source"]["media_type"], "image/gif");
        assert_eq!(fake::base64_of(&block["source"]["data"]), *image.bytes);
    }

    #[test]
    fn a_text_only_model_refuses_images_before_sending() {
        let image = fake::png_image();
        for model in ["claude-2.1", "claude-instant-1.2"] {
            let server = FakeServer::start(Vec::new());
            let result = generate_with(&server, model, &fake::image_session(&image));
            fake::assert_refused_for_images(result, model);
            assert_eq!(server.finish(), Vec::new(), "{model}: nothing sent");
        }
        let server = FakeServer::start(Vec::new());
        assert!(backend(&server, None).takes_images());
    }
}

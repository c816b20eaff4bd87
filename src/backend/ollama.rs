//! The Ollama native backend: `POST /api/chat`, NDJSON (streamed, or one
//! object when not streaming), context size from `POST /api/show`, models
//! from `GET /api/tags`.
//!
//! Mirrors [`super::openai`]: its own wire structs, converted from the core
//! types in one place ([`build_request`]); bodies read through the shared
//! NDJSON reader, tool-call accumulator and output filter; failing and
//! retrying is [`super::http`]'s job.
//!
//! Decisions worth knowing:
//! - Ollama truncates an over-long prompt silently to `num_ctx`. So `num_ctx`
//!   is always sent (the configured context size, else the model's
//!   `context_length` capped at [`NUM_CTX_CAP`] to spare the user's memory),
//!   and a session whose estimate does not fit is refused *before* sending
//!   with [`BackendError::ContextOverflow`], which makes the agent evict and
//!   retry as with every other provider. If `prompt_eval_count` still shows the
//!   window was filled, a `System` notice says the server may have truncated.
//! - Whether the model reads images is `/api/show`'s `capabilities` (`vision`
//!   among them), asked once together with the context length; a server too
//!   old to say falls back to [`super::hosted::TEXT_ONLY_MODELS`]. Images go as
//!   the message's `images` (base64), the text whole in `content`.
//! - Tool-call arguments are JSON objects both ways; calls arrive whole and
//!   get ids by position when Ollama sends none.
//! - The stream ends with a `done: true` line carrying counts and durations
//!   (ns), which become the `Stats`; without it the reply was cut off.

use super::ending::{assemble, Ending};
use std::io::BufRead;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::hosted::{self, Body, Call, Client, Dialect, ReadReply, ReplyStart};
use super::http::{self, ApiSettings, BodyReader};
use super::{GenerateRequest, Reply, Sampling, Usage};
use crate::core::ToolSpec;
use crate::core::{
    BackendError, Event, EventSink, FinishReason, Flow, Message, Role, Session, Stats,
};
use crate::stream::filter::OutputFilter;
use crate::stream::ndjson::NdjsonReader;
use crate::stream::toolcall::ToolCallAccumulator;
use crate::util::log::{self, Category};

pub const KIND: &str = "ollama";
/// Largest `num_ctx` chosen on the user's behalf from the model's own context length.
pub const NUM_CTX_CAP: u64 = 32_768;
/// `num_ctx` when neither the configuration nor `/api/show` gives one.
const FALLBACK_NUM_CTX: u64 = 4096;

/// Everything the backend needs, passed as a value.
#[derive(Debug, Clone, PartialEq)]
pub struct OllamaConfig {
    /// E.g. `http://localhost:11434`; `context_size` 0 asks `/api/show`.
    pub api: ApiSettings,
    /// `think`: `Some(false)` for `--reasoning off`, `Some(true)` for a level.
    pub think: Option<bool>,
}

/// `think` for a `--reasoning` level.
pub fn think(level: Option<&str>) -> Option<bool> {
    level.filter(|&l| l != "auto").map(|l| l != "off")
}

/// An Ollama server.
pub struct OllamaBackend {
    config: OllamaConfig,
    client: Client,
    /// The `num_ctx` in use, once known.
    num_ctx: Option<u64>,
    /// What `/api/show` said of the model, asked once when first needed.
    shown: OnceLock<Shown>,
}

/// What `/api/show` tells of the model; `None` where it said nothing (or failed).
#[derive(Debug, Default)]
struct Shown {
    context_length: Option<u64>,
    /// `vision` among them for a model that reads images (Ollama 0.6.4 and later).
    capabilities: Option<Vec<String>>,
}

impl OllamaBackend {
    pub fn new(config: OllamaConfig) -> Self {
        let client = Client::new(&config.api);
        let num_ctx = Some(config.api.context_size).filter(|n| *n > 0);
        OllamaBackend {
            config,
            client,
            num_ctx,
            shown: OnceLock::new(),
        }
    }

    fn url_of(&self, path: &str) -> String {
        let base = self.config.api.base();
        let root = base.strip_suffix("/v1").unwrap_or(base);
        format!("{root}/api/{path}")
    }

    /// The context window: configured, else what `/api/show` said.
    fn num_ctx(&mut self) -> u64 {
        if let Some(n) = self.num_ctx {
            return n;
        }
        let n = self
            .shown()
            .context_length
            .map_or(FALLBACK_NUM_CTX, |length| length.min(NUM_CTX_CAP));
        self.num_ctx = Some(n);
        n
    }

    /// `/api/show`'s answer, asked once; a failure is logged and taken as silence.
    fn shown(&self) -> &Shown {
        self.shown.get_or_init(|| {
            self.show().unwrap_or_else(|error| {
                log::debug(Category::Llm, || format!("/api/show failed: {error}"));
                Shown::default()
            })
        })
    }

    fn show(&self) -> Result<Shown, BackendError> {
        let url = self.url_of("show");
        let body = serde_json::to_vec(&ShowRequest {
            model: &self.config.api.model,
        })
        .map_err(|e| BackendError::Protocol(e.to_string()))?;
        let builder = hosted::post(self, &url, Call::Post { stream: false });
        let response = http::send(builder, &body, &url, &self.config.api.tape)?;
        let text = http::read_text(response.into_body().into_reader(), &url)?;
        let show: ShowResponse = serde_json::from_value(http::parse_json(&text)?)
            .map_err(|e| BackendError::Protocol(format!("{url}: {e}")))?;
        Ok(Shown {
            context_length: show
                .model_info
                .iter()
                .find(|(key, _)| key.ends_with(".context_length"))
                .and_then(|(_, value)| value.as_u64()),
            capabilities: show.capabilities,
        })
    }
}

/// Refuses a session that cannot fit, so the agent evicts instead of Ollama truncating.
fn check_fits(session: &Session, num_ctx: u64, sampling: &Sampling) -> Result<(), BackendError> {
    let needed = session.estimated_tokens() + sampling.answer_reserve(num_ctx);
    if needed <= num_ctx {
        return Ok(());
    }
    Err(BackendError::ContextOverflow {
        message: format!(
            "the conversation (about {needed} tokens with the reply's reserve) does not fit num_ctx {num_ctx}"
        ),
        prompt_tokens: Some(needed),
        limit: Some(num_ctx),
    })
}

impl Dialect for OllamaBackend {
    const KIND: &'static str = KIND;
    const WIRE_NAMES: bool = false;
    type Reader = ReplyStream;

    fn client(&self) -> (&ApiSettings, &Client) {
        (&self.config.api, &self.client)
    }

    /// The `num_ctx` in use, once known.
    fn context_size(&self) -> u64 {
        self.num_ctx.unwrap_or(0)
    }

    fn url(&self, _: &GenerateRequest<'_>) -> String {
        self.url_of("chat")
    }

    /// The key as a bearer token on a `POST`; the model list goes without it.
    fn headers(&self, call: Call) -> Vec<(&'static str, String)> {
        match (call, &self.config.api.api_key) {
            (Call::Post { .. }, Some(key)) => vec![("Authorization", format!("Bearer {key}"))],
            _ => Vec::new(),
        }
    }

    /// Refuses a session that cannot fit `num_ctx` before building the body.
    fn body(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
    ) -> Result<Body, BackendError> {
        let num_ctx = self.num_ctx();
        check_fits(session, num_ctx, request.sampling)?;
        let wire = build_request(&self.config, num_ctx, session, request)?;
        Body::encode(&wire, wire.messages.len())
    }

    /// NDJSON either way, so always held to the stream's cap.
    fn streamed(&self, _: &GenerateRequest<'_>) -> bool {
        true
    }

    /// `/api/tags`.
    fn models_url(&self) -> Result<String, BackendError> {
        Ok(self.url_of("tags"))
    }

    fn model_ids(&self, list: &Value) -> Vec<String> {
        hosted::ids_in(&list["models"], "name")
    }

    /// What `/api/show`'s `capabilities` say; the table where it says nothing.
    fn reads_images(&self) -> bool {
        match &self.shown().capabilities {
            Some(capabilities) => capabilities.iter().any(|c| c == "vision"),
            None => !hosted::known_text_only(&self.config.api.model),
        }
    }
}

// ---- request wire structs ----

#[derive(Debug, Serialize)]
struct ShowRequest<'a> {
    model: &'a str,
}

#[derive(Debug, Default, Deserialize)]
struct ShowResponse {
    #[serde(default)]
    model_info: serde_json::Map<String, Value>,
    #[serde(default)]
    capabilities: Option<Vec<String>>,
}

#[derive(Debug, Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    think: Option<bool>,
    options: WireOptions<'a>,
}

#[derive(Debug, Serialize)]
struct WireOptions<'a> {
    num_ctx: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    num_predict: Option<u32>,
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
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    content: &'a str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
    /// The message's images in base64, in text order (the text stays whole in `content`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<String>,
}

/// The image types Ollama's runners all read; WebP and GIF go as PNG.
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg"];

#[derive(Debug, Serialize)]
struct WireToolCall<'a> {
    function: WireFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireFunction<'a> {
    name: &'a str,
    /// An object, never a string.
    arguments: Value,
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

/// Converts the session and request into the wire request: the one place
/// core types meet Ollama's request shape.
fn build_request<'a>(
    config: &'a OllamaConfig,
    num_ctx: u64,
    session: &'a Session,
    request: &GenerateRequest<'a>,
) -> Result<ChatRequest<'a>, BackendError> {
    let sampling = request.sampling;
    let system = (!session.system_prompt.is_empty()).then(|| WireMessage {
        role: "system",
        content: &session.system_prompt,
        tool_calls: Vec::new(),
        tool_name: None,
        images: Vec::new(),
    });
    let history = session
        .messages
        .iter()
        .map(wire_message)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(ChatRequest {
        model: &config.api.model,
        messages: system.into_iter().chain(history).collect(),
        tools: request.tools.iter().map(wire_tool).collect(),
        stream: request.stream,
        think: config.think,
        options: WireOptions {
            num_ctx,
            num_predict: sampling.max_tokens,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: sampling.top_k,
            seed: sampling.seed,
            stop: &sampling.stop,
        },
    })
}

fn wire_message(message: &Message) -> Result<WireMessage<'_>, BackendError> {
    let images = message
        .images
        .iter()
        .map(|part| Ok(hosted::wire_image(&part.image, IMAGE_TYPES)?.base64()))
        .collect::<Result<Vec<String>, BackendError>>()?;
    Ok(WireMessage {
        role: message.role.as_str(),
        content: &message.content,
        tool_calls: message
            .tool_calls
            .iter()
            .map(|call| WireToolCall {
                function: WireFunction {
                    name: &call.name,
                    arguments: match &call.arguments {
                        object @ Value::Object(_) => object.clone(),
                        _ => Value::Object(serde_json::Map::new()),
                    },
                },
            })
            .collect(),
        tool_name: match message.role {
            Role::Tool => message.tool_name.as_deref(),
            _ => None,
        },
        images,
    })
}

fn wire_tool(spec: &ToolSpec) -> WireTool<'_> {
    WireTool {
        kind: "function",
        function: WireFunctionSpec {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.parameters,
        },
    }
}

// ---- response wire structs ----

#[derive(Debug, Default, Deserialize)]
struct WireLine {
    #[serde(default)]
    message: Option<WireReplyMessage>,
    #[serde(default)]
    done: bool,
    #[serde(default)]
    done_reason: Option<String>,
    #[serde(default)]
    prompt_eval_count: Option<u64>,
    #[serde(default)]
    prompt_eval_duration: Option<u64>,
    #[serde(default)]
    eval_count: Option<u64>,
    #[serde(default)]
    eval_duration: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
struct WireReplyMessage {
    #[serde(default)]
    content: String,
    #[serde(default)]
    thinking: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireReplyCall>,
}

#[derive(Debug, Default, Deserialize)]
struct WireReplyCall {
    #[serde(default)]
    id: Option<String>,
    function: WireReplyFunction,
}

#[derive(Debug, Default, Deserialize)]
struct WireReplyFunction {
    name: String,
    #[serde(default)]
    arguments: Value,
}

/// What one generation has produced so far.
pub struct ReplyStream {
    filter: OutputFilter,
    calls: ToolCallAccumulator,
    thinking: String,
    last: Option<WireLine>,
    num_ctx: u64,
}

impl ReplyStream {
    fn new(filter: OutputFilter, num_ctx: u64) -> Self {
        ReplyStream {
            filter,
            calls: ToolCallAccumulator::new(),
            thinking: String::new(),
            last: None,
            num_ctx,
        }
    }

    fn apply(&mut self, mut line: WireLine, sink: &mut dyn EventSink) -> Flow {
        if let Some(message) = line.message.take() {
            for call in message.tool_calls {
                let function = call.function;
                self.calls
                    .push_whole(call.id.as_deref(), &function.name, &function.arguments);
            }
            if let Some(thinking) = message.thinking.filter(|t| !t.is_empty()) {
                self.thinking.push_str(&thinking);
                if sink.emit(Event::Thinking(thinking)) == Flow::Cancel {
                    return Flow::Cancel;
                }
            }
            if !message.content.is_empty()
                && self.filter.push(&message.content, sink) == Flow::Cancel
            {
                return Flow::Cancel;
            }
        }
        if line.done {
            self.last = Some(line);
        }
        Flow::Continue
    }

    fn cancelled(self) -> Reply {
        hosted::cancelled_reply(&self.filter, self.thinking)
    }

    /// Flushes the filter, warns about truncation, emits `Stats` and builds the reply.
    fn complete(mut self, done: WireLine, sink: &mut dyn EventSink) -> Reply {
        let prompt = done.prompt_eval_count.unwrap_or(0);
        let notice = (self.num_ctx > 0 && prompt >= self.num_ctx).then(|| {
            format!(
                "Ollama read {prompt} prompt tokens with num_ctx {}: it may have dropped the start of the conversation",
                self.num_ctx
            )
        });
        let ending = Ending {
            calls: std::mem::take(&mut self.calls).finish(),
            thinking: self.thinking.clone(),
            finish: (done.done_reason.as_deref() == Some("length")).then_some(FinishReason::Length),
            usage: (done.prompt_eval_count.is_some() || done.eval_count.is_some()).then(|| Usage {
                prompt_tokens: prompt,
                completion_tokens: done.eval_count.unwrap_or(0),
            }),
            stats: stats(&done, self.num_ctx),
            artefacts: Vec::new(),
            notice,
        };
        match assemble(&mut self.filter, ending, sink) {
            Some(reply) => reply,
            None => self.cancelled(),
        }
    }
}

/// Tokens per second from a count and a duration in nanoseconds.
fn per_second(count: Option<u64>, nanos: Option<u64>) -> Option<f64> {
    let nanos = nanos.filter(|n| *n > 0)?;
    Some(count? as f64 * 1e9 / nanos as f64)
}

fn stats(done: &WireLine, num_ctx: u64) -> Stats {
    let prompt = done.prompt_eval_count.unwrap_or(0);
    let completion = done.eval_count.unwrap_or(0);
    Stats {
        prompt_tokens: prompt,
        completion_tokens: completion,
        prefill_tps: per_second(done.prompt_eval_count, done.prompt_eval_duration),
        decode_tps: per_second(done.eval_count, done.eval_duration),
        context_used: prompt + completion,
        context_size: num_ctx,
        cached_tokens: 0,
        ..Stats::default()
    }
}

/// One line: `{"error": …}` becomes its typed error.
fn parse_line(value: Value) -> Result<WireLine, BackendError> {
    if value.get("error").is_some_and(|e| !e.is_null()) {
        return Err(http::error_from_value(&value));
    }
    serde_json::from_value(value)
        .map_err(|e| BackendError::Protocol(format!("bad line from the server ({e})")))
}

/// The fuzzer's entry (`crate::fuzz`): a body read as an NDJSON stream.
#[cfg(test)]
pub(crate) fn fuzz_reply(bytes: &[u8]) {
    let state = ReplyStream::new(OutputFilter::new(vec!["read".into()]), 64);
    let _ = read_stream(bytes, state, &mut Vec::new(), "fuzz");
}

/// NDJSON, streamed or not.
impl ReadReply for ReplyStream {
    fn read(
        body: BodyReader,
        start: ReplyStart,
        sink: &mut dyn EventSink,
        url: &str,
    ) -> Result<Reply, BackendError> {
        let state = ReplyStream::new(start.filter, start.context_size);
        read_stream(body, state, sink, url)
    }
}

/// Reads NDJSON lines until `done: true` (a whole reply is the same, one line).
fn read_stream(
    reader: impl BufRead,
    mut state: ReplyStream,
    sink: &mut dyn EventSink,
    url: &str,
) -> Result<Reply, BackendError> {
    for value in NdjsonReader::new(reader) {
        let value = value.map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => BackendError::Protocol(format!("{url}: {e}")),
            _ => http::io_error(e, url),
        })?;
        if state.apply(parse_line(value)?, sink) == Flow::Cancel || sink.cancelled() {
            return Ok(state.cancelled());
        }
        if let Some(done) = state.last.take() {
            return Ok(state.complete(done, sink));
        }
    }
    Err(BackendError::Protocol(format!(
        "{url}: the stream ended before the done line"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::{self, Canned, FakeServer};
    use crate::backend::{Backend, Sampling};
    use crate::core::{Image, ToolCall};
    use serde_json::json;

    fn backend(server: &FakeServer, context_size: u64) -> OllamaBackend {
        let mut api = ApiSettings::new(&server.base_url, "qwen3");
        api.context_size = context_size;
        api.max_retries = 2;
        OllamaBackend::new(OllamaConfig {
            api,
            think: think(Some("high")),
        })
    }

    fn generate(
        backend: &mut OllamaBackend,
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
        backend.generate(session, &request, events)
    }

    fn stream(name: &str) -> Canned {
        Canned::with_type(fake::fixture("ollama", name), "application/x-ndjson")
    }

    #[test]
    fn every_fixture_decodes_the_same_split_at_every_offset() {
        fake::check_splits("ollama", "ndjson", |reader, sink| {
            let state = ReplyStream::new(OutputFilter::new(vec!["read".into()]), 64);
            read_stream(reader, state, sink, "test")
        });
    }

    #[test]
    fn text_stats_and_a_well_formed_request_with_context_from_show() {
        let show =
            json!({"model_info": {"general.architecture": "qwen3", "qwen3.context_length": 40960}});
        let server = FakeServer::start(vec![Canned::json(200, show), stream("text.ndjson")]);
        let mut backend = backend(&server, 0);
        let mut events = Vec::new();
        let reply = generate(&mut backend, &fake::session(), &mut events).expect("reply");
        assert_eq!(reply.content, "héllo ✓ 日本 🦀");
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 5
            })
        );
        let stats: Vec<&Stats> = events
            .iter()
            .filter_map(|e| match e {
                Event::Stats(s) => Some(s),
                _ => None,
            })
            .collect();
        assert_eq!(stats[0].decode_tps, Some(50.0));
        assert_eq!(stats[0].prefill_tps, Some(120.0));
        assert_eq!(backend.info().context_size, NUM_CTX_CAP);
        let requests = server.finish();
        assert_eq!(requests[0].url, "/api/show");
        assert_eq!(requests[0].body, json!({"model": "qwen3"}));
        let body = &requests[1].body;
        assert_eq!(requests[1].url, "/api/chat");
        assert_eq!(
            body["options"],
            json!({"num_ctx": NUM_CTX_CAP, "num_predict": 100, "temperature": 0.5})
        );
        assert_eq!(body["think"], true);
        assert_eq!(
            body["messages"][0],
            json!({"role": "system", "content": "Be brief."})
        );
        assert_eq!(body["tools"][0]["function"]["name"], "read");
    }

    #[test]
    fn thinking_and_whole_tool_calls() {
        let server =
            FakeServer::start(vec![stream("thinking.ndjson"), stream("tool_calls.ndjson")]);
        let mut backend = backend(&server, 8192);
        let mut events = Vec::new();
        let reply = generate(&mut backend, &fake::session(), &mut events).expect("reply");
        assert_eq!(fake::thinking(&events), "Hmm ✓.");
        assert_eq!(reply.content, "42");
        let reply = generate(&mut backend, &fake::session(), &mut Vec::new()).expect("reply");
        let calls: Vec<(&str, &str, &Value)> = reply
            .tool_calls
            .iter()
            .map(|c| (c.id.as_str(), c.name.as_str(), &c.arguments))
            .collect();
        assert_eq!(
            calls,
            [
                ("call_0", "read", &json!({"path": "日本.txt"})),
                ("call_1", "bash", &json!({"command": "ls"})),
            ]
        );
        assert_eq!(reply.finish, FinishReason::ToolCalls);
        server.finish();
    }

    #[test]
    fn arguments_go_back_as_objects_with_tool_names() {
        let mut session = fake::session();
        let call = ToolCall {
            id: "call_0".into(),
            name: "read".into(),
            arguments: json!({"path": "x"}),
        };
        let mut assistant = Message::assistant("");
        assistant.tool_calls.push(call.clone());
        session.messages.push(assistant);
        session
            .messages
            .push(Message::tool_result(&call, "contents"));
        let server = FakeServer::start(vec![stream("text.ndjson")]);
        generate(&mut backend(&server, 8192), &session, &mut Vec::new()).expect("reply");
        let body = &server.finish()[0].body;
        assert_eq!(
            body["messages"][2],
            json!({"role": "assistant", "content": "",
                "tool_calls": [{"function": {"name": "read", "arguments": {"path": "x"}}}]})
        );
        assert_eq!(
            body["messages"][3],
            json!({"role": "tool", "content": "contents", "tool_name": "read"})
        );
    }

    #[test]
    fn mid_stream_error_and_rate_limit_then_success() {
        let server = FakeServer::start(vec![stream("midstream_error.ndjson")]);
        let mut events = Vec::new();
        let error = generate(&mut backend(&server, 8192), &fake::session(), &mut events)
            .expect_err("error");
        assert!(
            matches!(&error, BackendError::Http { message, .. } if message.contains("runner")),
            "{error:?}"
        );
        assert_eq!(fake::content(&events), "partial");
        server.finish();
        let limited = Canned::json(429, json!({"error": "too many requests"}))
            .with_header("Retry-After", "0");
        let server = FakeServer::start(vec![limited, stream("text.ndjson")]);
        let mut events = Vec::new();
        let reply =
            generate(&mut backend(&server, 8192), &fake::session(), &mut events).expect("reply");
        assert_eq!(reply.content, "héllo ✓ 日本 🦀");
        assert_eq!(fake::notices(&events).len(), 1);
        assert_eq!(server.finish().len(), 2);
    }

    #[test]
    fn a_session_that_cannot_fit_is_refused_before_sending() {
        let mut session = fake::session();
        session.messages[0].tokens = 950;
        let server = FakeServer::start(Vec::new());
        let error =
            generate(&mut backend(&server, 1000), &session, &mut Vec::new()).expect_err("overflow");
        assert_eq!(error.tokens_over(), Some(950 + 100 - 1000));
        assert!(server.finish().is_empty());
    }

    #[test]
    fn a_filled_window_is_reported() {
        let server = FakeServer::start(vec![stream("text.ndjson")]);
        let mut events = Vec::new();
        generate(&mut backend(&server, 12), &fake::session(), &mut events).expect("reply");
        assert!(
            fake::notices(&events)
                .iter()
                .any(|n| n.contains("num_ctx 12")),
            "{events:?}"
        );
        server.finish();
    }

    #[test]
    fn cut_off_stream_and_model_list() {
        let cut = Canned::with_type(
            b"{\"message\":{\"role\":\"assistant\",\"content\":\"cut\"},\"done\":false}\n".to_vec(),
            "application/x-ndjson",
        );
        let tags = json!({"models": [{"name": "qwen3:8b", "model": "qwen3:8b"}, {"name": "llama3.2:latest"}]});
        let server = FakeServer::start(vec![cut, Canned::json(200, tags)]);
        let mut backend = backend(&server, 8192);
        let error = generate(&mut backend, &fake::session(), &mut Vec::new()).expect_err("cut");
        assert!(matches!(error, BackendError::Protocol(_)), "{error:?}");
        assert_eq!(
            backend.list_models().expect("models"),
            ["qwen3:8b", "llama3.2:latest"]
        );
        assert_eq!(server.finish()[1].url, "/api/tags");
    }

    fn show_with(capabilities: Value) -> Canned {
        Canned::json(
            200,
            json!({"model_info": {"qwen3.context_length": 40960}, "capabilities": capabilities}),
        )
    }

    #[test]
    fn images_go_as_base64_on_the_message_for_a_vision_model() {
        let image = fake::png_image();
        let show = show_with(json!(["completion", "vision"]));
        let server = FakeServer::start(vec![show, stream("text.ndjson")]);
        let mut backend = backend(&server, 4096);
        assert!(backend.takes_images());
        let session = fake::image_session(&image);
        generate(&mut backend, &session, &mut Vec::new()).expect("reply");
        let requests = server.finish();
        assert_eq!(requests.len(), 2, "one /api/show, one /api/chat");
        assert_eq!(requests[0].url, "/api/show");
        let messages = &requests[1].body["messages"];
        assert_eq!(messages[1]["content"], "look: what is it?");
        assert_eq!(fake::base64_of(&messages[1]["images"][0]), *image.bytes);
        assert_eq!(messages[3]["role"], "tool");
        assert_eq!(messages[3]["content"], "a screenshot");
        assert_eq!(fake::base64_of(&messages[3]["images"][0]), *image.bytes);
        assert!(messages[4].get("images").is_none());
    }

    #[test]
    fn a_gif_goes_as_a_png() {
        let image = fake::gif_image();
        let show = show_with(json!(["completion", "vision"]));
        let server = FakeServer::start(vec![show, stream("text.ndjson")]);
        let mut backend = backend(&server, 4096);
        generate(&mut backend, &fake::image_session(&image), &mut Vec::new()).expect("reply");
        let body = &server.finish()[1].body;
        let sent = Image::from_bytes(fake::base64_of(&body["messages"][1]["images"][0]));
        assert_eq!(sent.expect("an image").mime, "image/png");
    }

    #[test]
    fn a_model_without_vision_refuses_images_after_asking_show_only() {
        let image = fake::png_image();
        let show = show_with(json!(["completion", "tools"]));
        let server = FakeServer::start(vec![show]);
        let mut backend = backend(&server, 0);
        let result = generate(&mut backend, &fake::image_session(&image), &mut Vec::new());
        fake::assert_refused_for_images(result, "qwen3");
        let requests = server.finish();
        assert_eq!(requests.len(), 1, "no /api/chat");
        assert_eq!(requests[0].url, "/api/show");
        // The one /api/show answered the context length too.
        assert_eq!(backend.num_ctx(), NUM_CTX_CAP);
    }

    #[test]
    fn a_server_that_names_no_capabilities_falls_back_to_the_table() {
        let check = |model: &str, reads: bool| {
            let show = Canned::json(200, json!({"model_info": {}}));
            let server = FakeServer::start(vec![show]);
            let mut api = ApiSettings::new(&server.base_url, model);
            api.context_size = 4096;
            let backend = OllamaBackend::new(OllamaConfig { api, think: None });
            assert_eq!(backend.takes_images(), reads, "{model}");
            assert_eq!(server.finish().len(), 1);
        };
        check("deepseek-r1:7b", false);
        check("gemma3:4b", true);
    }
}

//! The Gemini backend: `models/{model}:streamGenerateContent?alt=sse` (or
//! `:generateContent` when not streaming) with an `x-goog-api-key`.
//!
//! Mirrors [`super::openai`]: its own wire structs, converted from the core
//! types in one place ([`build_request`]); bodies read through the shared SSE
//! decoder, tool-call accumulator and output filter; failing and retrying is
//! [`super::http`]'s job.
//!
//! Decisions worth knowing:
//! - `functionCall` parts arrive whole, often without an id; ids are
//!   synthesised by position (`call_0`, …), so the same reply always gets the same ids.
//! - Every `thoughtSignature` is kept as an [`Artefact::Signature`] on the
//!   assistant message (tied to its call id, or to the first text part) and
//!   echoed unchanged on the same part later: Gemini 3 rejects history
//!   without it. Signatures of other kinds are never sent here, nor these elsewhere.
//! - The stream has no terminator; a stream that ends without any
//!   `finishReason` was cut off and is a `Protocol` error.
//! - Images go as `inlineData` parts in text order (GIF, which Gemini does not
//!   take, as PNG); a tool result's follow its `functionResponse` part.
//! - Thought-summary parts (`thought: true`) become thinking, and are not sent back.

use super::ending::{assemble, counted_stats, Ending};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::hosted::{self, Body, Call, Client, Dialect, SseReply};
use super::http::{self, ApiSettings};
use super::{GenerateRequest, Reply, ToolChoice, Usage};
use crate::core::ToolSpec;
use crate::core::{
    Artefact, BackendError, ContentPart, Event, EventSink, FinishReason, Flow, Image, Message,
    Role, Session,
};
use crate::stream::filter::OutputFilter;
use crate::stream::toolcall::ToolCallAccumulator;

/// The backend kind, also the origin tag of the artefacts it stores.
pub const KIND: &str = "gemini";

/// Everything the backend needs, passed as a value.
#[derive(Debug, Clone, PartialEq)]
pub struct GeminiConfig {
    /// E.g. `https://generativelanguage.googleapis.com/v1beta`.
    pub api: ApiSettings,
    /// Thinking budget in tokens (`--reasoning`; 0 turns thinking off); `None` is the model's default.
    pub thinking_budget: Option<u32>,
}

/// The thinking budget for a `--reasoning` level.
pub fn thinking_budget(level: Option<&str>) -> Option<u32> {
    match level? {
        "off" => Some(0),
        "low" => Some(1024),
        "medium" => Some(8192),
        "high" => Some(24_576),
        _ => None,
    }
}

/// A Gemini API endpoint.
pub struct GeminiBackend {
    config: GeminiConfig,
    client: Client,
}

impl GeminiBackend {
    pub fn new(config: GeminiConfig) -> Self {
        let client = Client::new(&config.api);
        GeminiBackend { config, client }
    }
}

impl Dialect for GeminiBackend {
    const KIND: &'static str = KIND;
    const ENTRIES: &'static str = "contents";
    type Reader = ReplyStream;

    fn client(&self) -> (&ApiSettings, &Client) {
        (&self.config.api, &self.client)
    }

    fn url(&self, request: &GenerateRequest<'_>) -> String {
        let base = self.config.api.base();
        let model = http::path_segment(self.config.api.model.trim_start_matches("models/"));
        if request.stream {
            format!("{base}/models/{model}:streamGenerateContent?alt=sse")
        } else {
            format!("{base}/models/{model}:generateContent")
        }
    }

    /// The key as `x-goog-api-key`.
    fn headers(&self, _: Call) -> Vec<(&'static str, String)> {
        let key = self.config.api.api_key.clone();
        key.map(|key| ("x-goog-api-key", key)).into_iter().collect()
    }

    fn body(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
    ) -> Result<Body, BackendError> {
        let wire = build_request(&self.config, session, request)?;
        Body::encode(&wire, wire.contents.len())
    }

    fn models_url(&self) -> Result<String, BackendError> {
        Ok(format!("{}/models", self.config.api.base()))
    }

    /// The model names, without their `models/` prefix.
    fn model_ids(&self, list: &Value) -> Vec<String> {
        let names = hosted::ids_in(&list["models"], "name");
        names
            .into_iter()
            .map(|n| n.trim_start_matches("models/").to_string())
            .collect()
    }
}

// ---- request wire structs ----

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct GenerateContentRequest<'a> {
    contents: Vec<WireContent<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    system_instruction: Option<WireSystem<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTools<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_config: Option<WireToolConfig<'a>>,
    generation_config: WireGenerationConfig<'a>,
}

#[derive(Debug, Serialize)]
struct WireSystem<'a> {
    parts: Vec<WirePart<'a>>,
}

#[derive(Debug, Serialize)]
struct WireContent<'a> {
    role: &'static str,
    parts: Vec<WirePart<'a>>,
}

#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
struct WirePart<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_call: Option<WireFunctionCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    function_response: Option<WireFunctionResponse<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    inline_data: Option<WireBlob>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thought_signature: Option<&'a str>,
}

/// An image inline: its type and the file in base64.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireBlob {
    mime_type: String,
    data: String,
}

/// The image types Gemini takes; a GIF goes as PNG.
const IMAGE_TYPES: &[&str] = &["image/png", "image/jpeg", "image/webp"];

#[derive(Debug, Serialize)]
struct WireFunctionCall<'a> {
    id: &'a str,
    name: &'a str,
    args: Value,
}

#[derive(Debug, Serialize)]
struct WireFunctionResponse<'a> {
    id: &'a str,
    name: &'a str,
    response: WireToolOutput<'a>,
}

/// `response` must be an object; the tool's text goes under `result`.
#[derive(Debug, Serialize)]
struct WireToolOutput<'a> {
    result: &'a str,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireTools<'a> {
    function_declarations: Vec<WireDeclaration<'a>>,
}

#[derive(Debug, Serialize)]
struct WireDeclaration<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireToolConfig<'a> {
    function_calling_config: WireCallingConfig<'a>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireCallingConfig<'a> {
    mode: &'static str,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    allowed_function_names: Vec<&'a str>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireGenerationConfig<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<f32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_k: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop_sequences: &'a [String],
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking_config: Option<WireThinkingConfig>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct WireThinkingConfig {
    thinking_budget: u32,
    include_thoughts: bool,
}

/// Converts the session and request into the wire request: the one place
/// core types meet Gemini's request shape.
fn build_request<'a>(
    config: &'a GeminiConfig,
    session: &'a Session,
    request: &GenerateRequest<'a>,
) -> Result<GenerateContentRequest<'a>, BackendError> {
    let sampling = request.sampling;
    let declarations: Vec<WireDeclaration<'a>> = request
        .tools
        .iter()
        .map(|spec: &'a ToolSpec| WireDeclaration {
            name: &spec.name,
            description: &spec.description,
            parameters: &spec.parameters,
        })
        .collect();
    let tools = if declarations.is_empty() {
        Vec::new()
    } else {
        vec![WireTools {
            function_declarations: declarations,
        }]
    };
    Ok(GenerateContentRequest {
        contents: wire_contents(session)?,
        system_instruction: (!session.system_prompt.is_empty()).then(|| WireSystem {
            parts: vec![text_part(&session.system_prompt, None)],
        }),
        tool_config: (!tools.is_empty()).then(|| wire_tool_config(request.tool_choice)),
        tools,
        generation_config: WireGenerationConfig {
            max_output_tokens: sampling.max_tokens,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: sampling.top_k,
            seed: sampling.seed,
            stop_sequences: &sampling.stop,
            thinking_config: config.thinking_budget.map(|budget| WireThinkingConfig {
                thinking_budget: budget,
                include_thoughts: budget > 0,
            }),
        },
    })
}

fn wire_tool_config(choice: &ToolChoice) -> WireToolConfig<'_> {
    let (mode, allowed) = match choice {
        ToolChoice::Auto => ("AUTO", Vec::new()),
        ToolChoice::None => ("NONE", Vec::new()),
        ToolChoice::Required => ("ANY", Vec::new()),
        ToolChoice::Named(name) => ("ANY", vec![name.as_str()]),
    };
    WireToolConfig {
        function_calling_config: WireCallingConfig {
            mode,
            allowed_function_names: allowed,
        },
    }
}

fn text_part<'a>(text: &'a str, signature: Option<&'a str>) -> WirePart<'a> {
    WirePart {
        text: Some(text),
        thought_signature: signature,
        ..WirePart::default()
    }
}

/// The history as `user`/`model` contents; consecutive same-role ones merge.
/// A tool result's images follow its `functionResponse` part in the same content.
fn wire_contents(session: &Session) -> Result<Vec<WireContent<'_>>, BackendError> {
    let mut contents: Vec<WireContent<'_>> = Vec::new();
    for message in &session.messages {
        let (role, parts) = match message.role {
            Role::Assistant => ("model", model_parts(message)),
            Role::Tool => {
                let mut parts = vec![function_response(message)];
                for part in &message.images {
                    parts.push(image_part(&part.image)?);
                }
                ("user", parts)
            }
            Role::User | Role::System => ("user", user_parts(message)?),
        };
        if parts.is_empty() {
            continue;
        }
        match contents.last_mut() {
            Some(last) if last.role == role => last.parts.extend(parts),
            _ => contents.push(WireContent { role, parts }),
        }
    }
    Ok(contents)
}

/// A user message's text and images in text order (empty text left out).
fn user_parts(message: &Message) -> Result<Vec<WirePart<'_>>, BackendError> {
    message
        .parts()
        .into_iter()
        .map(|part| match part {
            ContentPart::Text(text) => Ok(text_part(text, None)),
            ContentPart::Image(image) => image_part(image),
        })
        .collect()
}

fn image_part(image: &Image) -> Result<WirePart<'static>, BackendError> {
    let wire = hosted::wire_image(image, IMAGE_TYPES)?;
    Ok(WirePart {
        inline_data: Some(WireBlob {
            mime_type: wire.mime.clone(),
            data: wire.base64(),
        }),
        ..WirePart::default()
    })
}

/// The signature Gemini attached to the part of `call_id` (`None`: the text part).
fn signature_for<'a>(message: &'a Message, call_id: Option<&str>) -> Option<&'a str> {
    message
        .artefacts
        .iter()
        .find_map(|artefact| match artefact {
            Artefact::Signature {
                origin,
                call_id: id,
                signature,
            } if origin == KIND && id.as_deref() == call_id => Some(signature.as_str()),
            _ => None,
        })
}

fn model_parts(message: &Message) -> Vec<WirePart<'_>> {
    let mut parts = Vec::new();
    if !message.content.is_empty() {
        parts.push(text_part(&message.content, signature_for(message, None)));
    }
    parts.extend(message.tool_calls.iter().map(|call| WirePart {
        function_call: Some(WireFunctionCall {
            id: &call.id,
            name: &call.name,
            args: match &call.arguments {
                object @ Value::Object(_) => object.clone(),
                _ => Value::Object(serde_json::Map::new()),
            },
        }),
        thought_signature: signature_for(message, Some(&call.id)),
        ..WirePart::default()
    }));
    parts
}

fn function_response(message: &Message) -> WirePart<'_> {
    WirePart {
        function_response: Some(WireFunctionResponse {
            id: message.tool_call_id.as_deref().unwrap_or_default(),
            name: message.tool_name.as_deref().unwrap_or_default(),
            response: WireToolOutput {
                result: &message.content,
            },
        }),
        ..WirePart::default()
    }
}

// ---- response wire structs ----

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WireResponse {
    #[serde(default)]
    candidates: Vec<WireCandidate>,
    #[serde(default)]
    usage_metadata: Option<WireUsage>,
    #[serde(default)]
    prompt_feedback: Option<WirePromptFeedback>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireCandidate {
    #[serde(default)]
    content: Option<WireReplyContent>,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireReplyContent {
    #[serde(default)]
    parts: Vec<WireReplyPart>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireReplyPart {
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    thought: bool,
    #[serde(default)]
    function_call: Option<WireReplyCall>,
    #[serde(default)]
    thought_signature: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
struct WireReplyCall {
    #[serde(default)]
    id: Option<String>,
    name: String,
    #[serde(default)]
    args: Value,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WirePromptFeedback {
    #[serde(default)]
    block_reason: Option<String>,
}

/// What one generation has produced so far.
pub struct ReplyStream {
    filter: OutputFilter,
    calls: ToolCallAccumulator,
    /// Signatures by call position (in arrival order), resolved to ids at the end.
    call_signatures: Vec<(usize, String)>,
    call_count: usize,
    text_signature: Option<String>,
    thinking: String,
    finish: Option<FinishReason>,
    usage: Option<WireUsage>,
    context_size: u64,
}

impl ReplyStream {
    fn part(&mut self, part: WireReplyPart, sink: &mut dyn EventSink) -> Flow {
        if let Some(call) = part.function_call {
            if let Some(signature) = part.thought_signature {
                self.call_signatures.push((self.call_count, signature));
            }
            self.call_count += 1;
            self.calls
                .push_whole(call.id.as_deref(), &call.name, &call.args);
            return Flow::Continue;
        }
        let text = part.text.unwrap_or_default();
        if part.thought {
            if text.is_empty() {
                return Flow::Continue;
            }
            self.thinking.push_str(&text);
            return sink.emit(Event::Thinking(text));
        }
        if let Some(signature) = part.thought_signature {
            self.text_signature.get_or_insert(signature);
        }
        if text.is_empty() {
            return Flow::Continue;
        }
        self.filter.push(&text, sink)
    }
}

/// Read to the body's end (Gemini sends no terminator); a stream without any
/// `finishReason` was cut off.
impl SseReply for ReplyStream {
    type Event = WireResponse;

    fn new(filter: OutputFilter, context_size: u64) -> Self {
        ReplyStream {
            filter,
            calls: ToolCallAccumulator::new(),
            call_signatures: Vec::new(),
            call_count: 0,
            text_signature: None,
            thinking: String::new(),
            finish: None,
            usage: None,
            context_size,
        }
    }

    /// One payload: an error object becomes its typed error.
    fn parse(data: &str) -> Result<WireResponse, BackendError> {
        let value = http::parse_json(data)?;
        if value.get("error").is_some_and(|e| !e.is_null()) {
            return Err(http::error_from_value(&value));
        }
        serde_json::from_value(value)
            .map_err(|e| BackendError::Protocol(format!("bad response from the server ({e})")))
    }

    fn apply(
        &mut self,
        response: WireResponse,
        sink: &mut dyn EventSink,
    ) -> Result<Flow, BackendError> {
        self.usage = response.usage_metadata.or(self.usage);
        if let Some(reason) = response.prompt_feedback.and_then(|f| f.block_reason) {
            sink.emit(Event::System(format!("the prompt was blocked ({reason})")));
            self.finish = Some(FinishReason::Stop);
        }
        for candidate in response.candidates.into_iter().take(1) {
            if let Some(reason) = candidate.finish_reason.as_deref() {
                self.finish = Some(map_finish(reason, sink));
            }
            for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
                if self.part(part, sink) == Flow::Cancel {
                    return Ok(Flow::Cancel);
                }
            }
        }
        Ok(Flow::Continue)
    }

    fn missing(&self, _: bool) -> Option<&'static str> {
        self.finish.is_none().then_some("a finishReason")
    }

    fn cancelled(self) -> Reply {
        hosted::cancelled_reply(&self.filter, self.thinking)
    }

    fn complete(mut self, sink: &mut dyn EventSink) -> Reply {
        let calls = std::mem::take(&mut self.calls).finish();
        // Signatures name the native calls they belong to, before text-parsed
        // calls join them.
        let mut artefacts: Vec<Artefact> = self
            .text_signature
            .take()
            .map(|signature| Artefact::Signature {
                origin: KIND.into(),
                call_id: None,
                signature,
            })
            .into_iter()
            .collect();
        artefacts.extend(
            self.call_signatures
                .drain(..)
                .filter_map(|(at, signature)| {
                    Some(Artefact::Signature {
                        origin: KIND.into(),
                        call_id: Some(calls.get(at)?.id.clone()),
                        signature,
                    })
                }),
        );
        let usage = self.usage.map(|u| Usage {
            prompt_tokens: u.prompt_token_count,
            completion_tokens: u.candidates_token_count + u.thoughts_token_count,
        });
        let ending = Ending {
            calls,
            thinking: self.thinking.clone(),
            finish: self.finish,
            usage,
            stats: counted_stats(usage, self.context_size),
            artefacts,
            notice: None,
        };
        match assemble(&mut self.filter, ending, sink) {
            Some(reply) => reply,
            None => self.cancelled(),
        }
    }
}

/// Maps `finishReason`, telling the user about the ones that cut a reply short.
fn map_finish(reason: &str, sink: &mut dyn EventSink) -> FinishReason {
    match reason {
        "STOP" | "FINISH_REASON_UNSPECIFIED" => FinishReason::Stop,
        "MAX_TOKENS" => FinishReason::Length,
        other => {
            sink.emit(Event::System(format!("Gemini stopped the reply ({other})")));
            FinishReason::Stop
        }
    }
}

/// The fuzzer's entry (`crate::fuzz`).
#[cfg(test)]
pub(crate) fn fuzz_reply(bytes: &[u8]) {
    hosted::fuzz_sse::<ReplyStream>(bytes);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::fake::{self, Canned, FakeServer};
    use crate::backend::{Backend, Sampling};
    use crate::core::ToolCall;
    use serde_json::json;

    fn backend(server: &FakeServer) -> GeminiBackend {
        let mut api = ApiSettings::new(format!("{}/v1beta", server.base_url), "gemini-test");
        api.api_key = Some("g-key".into());
        api.max_retries = 2;
        GeminiBackend::new(GeminiConfig {
            api,
            thinking_budget: thinking_budget(Some("low")),
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
            top_k: Some(3),
            ..Sampling::default()
        };
        let request = fake::request(&tools, &sampling, true);
        backend(server).generate(session, &request, events)
    }

    fn stream(name: &str) -> Canned {
        Canned::sse(fake::fixture("gemini", name))
    }

    #[test]
    fn every_fixture_decodes_the_same_split_at_every_offset() {
        fake::check_splits("gemini", "sse", |reader, sink| {
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
        assert_eq!(fake::content(&events), reply.content);
        assert_eq!(
            reply.usage,
            Some(Usage {
                prompt_tokens: 12,
                completion_tokens: 5
            })
        );
        let requests = server.finish();
        let request = &requests[0];
        assert_eq!(
            request.url,
            "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
        );
        assert_eq!(request.header("x-goog-api-key"), Some("g-key"));
        assert_eq!(
            request.body["systemInstruction"],
            json!({"parts": [{"text": "Be brief."}]})
        );
        assert_eq!(
            request.body["contents"],
            json!([{"role": "user", "parts": [{"text": "hi"}]}])
        );
        assert_eq!(
            request.body["tools"][0]["functionDeclarations"][1]["name"],
            "bash"
        );
        assert_eq!(
            request.body["generationConfig"],
            json!({"maxOutputTokens": 100, "topK": 3,
                "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": true}})
        );
        assert_eq!(
            request.body["toolConfig"],
            json!({"functionCallingConfig": {"mode": "AUTO"}})
        );
    }

    #[test]
    fn thought_parts_are_thinking_and_signatures_are_kept() {
        let server = FakeServer::start(vec![stream("thinking.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, &fake::session(), &mut events).expect("reply");
        assert_eq!(fake::thinking(&events), "Pondering ✓.");
        assert_eq!(reply.content, "42");
        assert_eq!(
            reply.artefacts,
            [Artefact::Signature {
                origin: KIND.into(),
                call_id: None,
                signature: "c2lnLXRleHQ=".into()
            }]
        );
        server.finish();
    }

    #[test]
    fn mcp_tool_names_are_encoded_on_the_wire_and_decoded_back() {
        let call = json!({"candidates": [{"content": {"role": "model", "parts": [
            {"functionCall": {"name": "files__read_file", "args": {"path": "a"}}}]},
            "finishReason": "STOP"}]});
        let server = FakeServer::start(vec![Canned::sse(
            format!("data: {call}\r\n\r\n").into_bytes(),
        )]);
        let tools = [ToolSpec {
            name: "files:read_file".into(),
            description: "reads".into(),
            parameters: json!({"type": "object", "properties": {}}),
        }];
        let sampling = Sampling::default();
        let request = fake::request(&tools, &sampling, true);
        let reply = backend(&server)
            .generate(&fake::session(), &request, &mut Vec::<Event>::new())
            .expect("reply");
        assert_eq!(reply.tool_calls[0].name, "files:read_file");
        let body = &server.finish()[0].body;
        assert_eq!(
            body["tools"][0]["functionDeclarations"][0]["name"],
            "files__read_file"
        );
    }

    #[test]
    fn whole_function_calls_get_stable_ids_and_their_signatures() {
        let server = FakeServer::start(vec![stream("tool_calls.sse")]);
        let reply = generate(&server, &fake::session(), &mut Vec::new()).expect("reply");
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
        assert_eq!(
            reply.artefacts,
            [Artefact::Signature {
                origin: KIND.into(),
                call_id: Some("call_0".into()),
                signature: "c2lnLWNhbGw=".into()
            }]
        );
        server.finish();
    }

    #[test]
    fn function_responses_and_signatures_go_back_unchanged() {
        let mut session = fake::session();
        let calls: Vec<ToolCall> = ["call_0", "call_1"]
            .iter()
            .map(|id| ToolCall {
                id: id.to_string(),
                name: "read".into(),
                arguments: json!({"path": id}),
            })
            .collect();
        let mut assistant = Message::assistant("Reading.");
        assistant.tool_calls = calls.clone();
        assistant.artefacts = vec![
            Artefact::Signature {
                origin: KIND.into(),
                call_id: Some("call_0".into()),
                signature: "sig-A".into(),
            },
            Artefact::Thinking {
                origin: "anthropic".into(),
                text: "t".into(),
                signature: "anthropic-only".into(),
            },
        ];
        session.messages.push(assistant);
        for call in &calls {
            session.messages.push(Message::tool_result(call, "data"));
        }
        let server = FakeServer::start(vec![stream("text.sse")]);
        generate(&server, &session, &mut Vec::new()).expect("reply");
        let body = &server.finish()[0].body;
        assert_eq!(
            body["contents"][1],
            json!({"role": "model", "parts": [
                {"text": "Reading."},
                {"functionCall": {"id": "call_0", "name": "read", "args": {"path": "call_0"}}, "thoughtSignature": "sig-A"},
                {"functionCall": {"id": "call_1", "name": "read", "args": {"path": "call_1"}}}]})
        );
        assert_eq!(
            body["contents"][2],
            json!({"role": "user", "parts": [
                {"functionResponse": {"id": "call_0", "name": "read", "response": {"result": "data"}}},
                {"functionResponse": {"id": "call_1", "name": "read", "response": {"result": "data"}}}]})
        );
        assert!(!body.to_string().contains("anthropic-only"));
    }

    #[test]
    fn mid_stream_error_is_typed() {
        let server = FakeServer::start(vec![stream("midstream_error.sse")]);
        let mut events = Vec::new();
        let error = generate(&server, &fake::session(), &mut events).expect_err("error");
        assert!(
            matches!(&error, BackendError::Http { status: 503, code, .. } if code == "UNAVAILABLE"),
            "{error:?}"
        );
        assert_eq!(fake::content(&events), "partial");
        assert_eq!(server.finish().len(), 1);
    }

    #[test]
    fn rate_limit_then_success_and_overflow_is_typed() {
        let limited = Canned::json(
            429,
            json!({"error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}}),
        )
        .with_header("Retry-After", "0");
        let server = FakeServer::start(vec![limited, stream("text.sse")]);
        let mut events = Vec::new();
        let reply = generate(&server, &fake::session(), &mut events).expect("reply");
        assert_eq!(reply.content, "héllo ✓ 日本 🦀");
        assert_eq!(fake::notices(&events).len(), 1);
        assert_eq!(server.finish().len(), 2);
        let overflow = Canned::json(
            400,
            json!({"error": {"code": 400, "status": "INVALID_ARGUMENT",
                "message": "The input token count (1200000) exceeds the maximum number of tokens allowed (1048576)."}}),
        );
        let server = FakeServer::start(vec![overflow]);
        let error = generate(&server, &fake::session(), &mut Vec::new()).expect_err("error");
        assert_eq!(error.tokens_over(), Some(1_200_000 - 1_048_576));
        server.finish();
    }

    #[test]
    fn cut_off_stream_is_a_protocol_error() {
        let body = "data: {\"candidates\":[{\"content\":{\"role\":\"model\",\"parts\":[{\"text\":\"cut\"}]}}]}\n\n";
        let server = FakeServer::start(vec![Canned::sse(body.as_bytes().to_vec())]);
        let error = generate(&server, &fake::session(), &mut Vec::new()).expect_err("error");
        assert!(matches!(error, BackendError::Protocol(_)), "{error:?}");
        server.finish();
    }

    /// A model name goes into the URL path as one segment: it can never climb out
    /// of `models/` or add a query.
    #[test]
    fn a_model_name_is_one_path_segment() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "ok"}]}, "finishReason": "STOP"}]});
        let server = FakeServer::start(vec![Canned::json(200, body)]);
        let mut api = ApiSettings::new(format!("{}/v1beta", server.base_url), "a/../../admin?x");
        api.api_key = Some("g-key".into());
        let mut backend = GeminiBackend::new(GeminiConfig {
            api,
            thinking_budget: None,
        });
        let tools = fake::tools();
        let sampling = Sampling::default();
        let request = fake::request(&tools, &sampling, false);
        backend
            .generate(&fake::session(), &request, &mut Vec::new())
            .expect("reply");
        let requests = server.finish();
        assert_eq!(
            requests[0].url,
            "/v1beta/models/a%2F..%2F..%2Fadmin%3Fx:generateContent"
        );
    }

    #[test]
    fn whole_response_and_model_list() {
        let body = json!({"candidates": [{"content": {"role": "model", "parts": [{"text": "Done."}]}, "finishReason": "MAX_TOKENS"}],
            "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 2}});
        let models = json!({"models": [{"name": "models/gemini-a"}, {"name": "models/gemini-b"}]});
        let server = FakeServer::start(vec![Canned::json(200, body), Canned::json(200, models)]);
        let tools = fake::tools();
        let sampling = Sampling::default();
        let request = fake::request(&tools, &sampling, false);
        let backend = {
            let mut backend = backend(&server);
            let reply = backend
                .generate(&fake::session(), &request, &mut Vec::new())
                .expect("reply");
            assert_eq!(
                (reply.content.as_str(), reply.finish),
                ("Done.", FinishReason::Length)
            );
            backend
        };
        assert_eq!(
            backend.list_models().expect("models"),
            ["gemini-a", "gemini-b"]
        );
        let requests = server.finish();
        assert_eq!(
            requests[0].url,
            "/v1beta/models/gemini-test:generateContent"
        );
        assert_eq!(requests[1].url, "/v1beta/models");
    }

    fn generate_with(
        server: &FakeServer,
        model: &str,
        session: &Session,
    ) -> Result<Reply, BackendError> {
        let mut backend = backend(server);
        backend.config.api.model = model.into();
        let sampling = Sampling::default();
        let request = fake::request(&[], &sampling, true);
        backend.generate(session, &request, &mut Vec::new())
    }

    /// Checks an `inlineData` part's type and gives its bytes.
    fn inline(part: &Value, mime: &str) -> Vec<u8> {
        assert_eq!(part["inlineData"]["mimeType"], mime, "{part}");
        fake::base64_of(&part["inlineData"]["data"])
    }

    #[test]
    fn images_go_as_inline_data_and_a_tool_results_after_its_function_response() {
        let image = fake::png_image();
        let server = FakeServer::start(vec![stream("text.sse")]);
        generate_with(&server, "gemini-2.5-flash", &fake::image_session(&image)).expect("reply");
        let body = &server.finish()[0].body;
        let contents = body["contents"].as_array().expect("contents");
        assert_eq!(contents.len(), 3, "{body}");
        let user = &contents[0]["parts"];
        assert_eq!(user[0], json!({"text": "look:"}));
        assert_eq!(inline(&user[1], "image/png"), *image.bytes);
        assert_eq!(user[2], json!({"text": " what is it?"}));
        assert!(contents[1]["parts"][0]["functionCall"].is_object());
        let after = &contents[2]["parts"];
        assert_eq!(
            after[0],
            json!({"functionResponse": {"id": "call_1", "name": "read", "response": {"result": "a screenshot"}}})
        );
        assert_eq!(inline(&after[1], "image/png"), *image.bytes);
        assert_eq!(after[2], json!({"text": "and now?"}));
    }

    #[test]
    fn a_gif_goes_as_a_png_of_its_first_frame() {
        let image = fake::gif_image();
        let server = FakeServer::start(vec![stream("text.sse")]);
        generate_with(&server, "gemini-test", &fake::image_session(&image)).expect("reply");
        let body = &server.finish()[0].body;
        let bytes = inline(&body["contents"][0]["parts"][1], "image/png");
        let sent = Image::from_bytes(bytes).expect("a PNG");
        let pixels = |image: &Image| image.rgb().map(|rgb| rgb.data).expect("decodes");
        assert_eq!(pixels(&sent), pixels(&image));
    }

    #[test]
    fn a_text_only_model_refuses_images_before_sending() {
        let image = fake::png_image();
        for model in ["gemini-1.0-pro", "models/gemini-pro"] {
            let server = FakeServer::start(Vec::new());
            let result = generate_with(&server, model, &fake::image_session(&image));
            fake::assert_refused_for_images(result, model);
            assert_eq!(server.finish(), Vec::new(), "{model}: nothing sent");
        }
        let server = FakeServer::start(Vec::new());
        assert!(backend(&server).takes_images());
    }
}

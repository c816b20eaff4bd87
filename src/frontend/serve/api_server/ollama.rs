//! Ollama's API on the same `--server`, so `shepherd --server --port 11434 -m
//! FILE.gguf` serves Ollama's clients (the `ollama` Python package, Open WebUI,
//! `curl localhost:11434/api/chat`).
//!
//! Generation (`POST /api/chat`, `POST /api/generate`) goes through the same
//! checks and pool as chat completions: `options` are read by
//! [`openai::sampling`] (the names match: `temperature`, `top_p`, `top_k`,
//! `min_p`, `seed`, `stop`, `repeat_penalty`, `repeat_last_n`,
//! `presence_penalty`, `frequency_penalty`) plus Ollama's `num_predict`;
//! `num_ctx` is checked and not applied (the context is the server's);
//! `format` is `"json"` or a JSON schema ([`openai::schema_format`]); `tools` are
//! chat's ([`openai::tools`]). Answers stream as `application/x-ndjson` (one
//! object a line, the last `done: true` with the figures in nanoseconds) unless
//! `stream: false`. `think: false` tells the template (`enable_thinking: false`,
//! which Qwen3's and others' honour) and hides whatever reasoning the model still
//! writes; otherwise it is `message.thinking`.
//! `keep_alive` ([`keep_alive`]) sets how long the in-process model stays in
//! memory once the request is done (`0`: it leaves at once; a request with nothing
//! to generate and `keep_alive: 0` answers `done_reason: "unload"`); API backends
//! ignore it. `GET /api/ps` lists the model only while it is in memory, with the
//! time it leaves as `expires_at`. A generate `template` override is refused with a 400 (the
//! model's own template is used); `raw: true` continues the prompt as it is,
//! like `/v1/completions` (the in-process model only). `images` (base64, on a
//! user or tool message and on generate) stand before the text, as Ollama places
//! them, read by [`super::images`]; with `raw` they open the prompt.
//!
//! Model routes describe the served model: `POST /api/show`, `GET /api/ps`;
//! `GET /api/tags` lists it, then the GGUF files of the models directories
//! ([`files`]); `GET /api/version`; embeddings with the in-process model
//! (`POST /api/embed`, legacy `POST /api/embeddings`). `POST /api/pull`
//! fetches a GGUF file from a URL into the models directory ([`pull`]);
//! `DELETE /api/delete` and `POST /api/copy` work on that directory's files
//! ([`files`]); `push` and `create` answer 501. A generation or `show`
//! naming a model other than the served one gets Ollama's 404; an empty name
//! means the served one. Errors are Ollama's `{"error": "..."}`.

use std::time::Instant;

use serde_json::{Map, Value};

use super::error::ApiError;
use super::fields::{json_body, unknown_fields, Fields};
use super::images::{Content, Images};
use super::pool::Work;
use super::sampling_fields;
use super::{local, openai, ApiServer, Defaults, Loaded};
use crate::backend::llamacpp::EmbedInput;
use crate::backend::{PromptPart, ResponseFormat, Sampling, ToolChoice};
use crate::core::{Image, Message, Role, Session, ToolCall};
use crate::frontend::serve::http::{Request, Responder};
use keep_alive::KeepAlive;
use models::{digest, facts};
pub use reply::OllamaWriter;

mod files;
mod keep_alive;
mod models;
mod pull;
mod reply;
pub mod wire;

/// The Ollama API level `GET /api/version` reports: clients that compare
/// versions (for tools, `think`, structured `format`) find these features
/// there. shepherd's own version is beside it.
pub const API_VERSION: &str = "0.12.0";

/// The routes this module answers, for the 405 of a wrong method.
pub const ROUTES: [&str; 11] = [
    "/api/chat",
    "/api/generate",
    "/api/tags",
    "/api/show",
    "/api/ps",
    "/api/version",
    "/api/embed",
    "/api/embeddings",
    "/api/pull",
    "/api/copy",
    "/api/delete",
];

/// Ollama's model management not served here.
pub const UNSERVED: [&str; 2] = ["/api/push", "/api/create"];

/// Fields accepted and changing nothing (see the module docs).
const IGNORED: [&str; 2] = ["truncate", "shift"];

const CHAT_FIELDS: [&str; 8] = [
    "model",
    "messages",
    "tools",
    "format",
    "options",
    "stream",
    "think",
    "keep_alive",
];

const GENERATE_FIELDS: [&str; 13] = [
    "model",
    "prompt",
    "suffix",
    "system",
    "template",
    "context",
    "raw",
    "images",
    "format",
    "options",
    "stream",
    "think",
    "keep_alive",
];

/// Which route an answer is for: their lines differ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    Chat,
    Generate,
}

/// A checked `/api/chat` or `/api/generate` request.
#[derive(Debug)]
pub struct OllamaRequest {
    pub work: Work,
    pub stream: bool,
    pub model: String,
    /// `think: false` hides the reasoning.
    pub hide_thinking: bool,
    /// Nothing to generate (no messages, an empty prompt): Ollama loads the
    /// model and answers `done_reason: "load"` at once.
    pub load_only: bool,
    /// How long the model stays after this request ([`keep_alive`]).
    pub keep_alive: Option<KeepAlive>,
    pub ignored: Vec<String>,
}

/// The model a request names, as echoed: the served one (also as
/// `NAME:latest`), or the served one when the name is empty; any other is
/// Ollama's 404.
pub fn served_model(name: Option<&str>, defaults: &Defaults) -> Result<String, ApiError> {
    match name.unwrap_or("") {
        "" => Ok(defaults.model.clone()),
        name if name == defaults.model || name == format!("{}:latest", defaults.model) => {
            Ok(name.to_string())
        }
        name => Err(ApiError::new(
            404,
            "not_found_error",
            format!("model \"{name}\" not found, try pulling it first"),
        )),
    }
}

/// `POST /api/chat`.
pub fn parse_chat(body: &[u8], defaults: &Defaults) -> Result<OllamaRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let model = served_model(f.str("model")?, defaults)?;
    let (system, messages) = messages(&f, &mut Images::new(&defaults.image_urls))?;
    // Ollama's tools are functions; another type is refused or dropped as on chat.
    let (tools, _kinds) = openai::tools(&f)?;
    let mut session = Session::new(system.unwrap_or_else(|| defaults.system_prompt.clone()));
    let load_only = messages.is_empty();
    session.messages = messages;
    Ok(OllamaRequest {
        work: Work {
            session,
            tools,
            tool_choice: ToolChoice::Auto,
            sampling: sampling(&f, defaults)?,
            use_tools: defaults.use_tools,
            raw_prompt: None,
        },
        stream: f.bool("stream")?.unwrap_or(true),
        model,
        hide_thinking: !think(&f)?,
        load_only,
        keep_alive: keep_alive::parse(f.get("keep_alive"))?,
        ignored: unknown_fields(&value, &CHAT_FIELDS, &IGNORED),
    })
}

/// `POST /api/generate`: one user turn (`prompt`, with `system`), or with
/// `raw` the prompt as it is.
pub fn parse_generate(body: &[u8], defaults: &Defaults) -> Result<OllamaRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let model = served_model(f.str("model")?, defaults)?;
    let images = base64_images(&f, &mut Images::new(&defaults.image_urls))?;
    if f.str("template")?.is_some_and(|t| !t.is_empty()) {
        return Err(ApiError::invalid(
            "template",
            "'template' overrides are not supported: the model's own chat template is used (send raw: true with a prompt already formatted)",
        ));
    }
    f.unsupported("suffix", &[Value::String(String::new())])?;
    f.unsupported("context", &[Value::Array(Vec::new())])?;
    let prompt = f.str("prompt")?.unwrap_or("");
    let raw = f.bool("raw")?.unwrap_or(false);
    let system = f.str("system")?.unwrap_or(&defaults.system_prompt);
    let mut session = Session::new(system.to_string());
    let load_only = prompt.is_empty() && images.is_empty();
    let raw_prompt = raw.then(|| {
        let mut parts: Vec<PromptPart> = images.iter().cloned().map(PromptPart::Image).collect();
        parts.push(PromptPart::Text(prompt.to_string()));
        parts
    });
    session
        .messages
        .push(images_then(images, prompt).into_message(Message::user));
    Ok(OllamaRequest {
        work: Work {
            session,
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            sampling: sampling(&f, defaults)?,
            use_tools: false,
            raw_prompt,
        },
        stream: f.bool("stream")?.unwrap_or(true),
        model,
        hide_thinking: !think(&f)?,
        load_only,
        keep_alive: keep_alive::parse(f.get("keep_alive"))?,
        ignored: unknown_fields(&value, &GENERATE_FIELDS, &IGNORED),
    })
}

/// `images`: base64 strings, read by `images`.
fn base64_images(f: &Fields<'_>, images: &mut Images) -> Result<Vec<Image>, ApiError> {
    let mut out = Vec::new();
    for (i, item) in f.array("images")?.into_iter().flatten().enumerate() {
        let field = format!("{}[{i}]", f.name("images"));
        let Value::String(data) = item else {
            return Err(ApiError::invalid(
                &field,
                format!("'{field}' must be a base64 string"),
            ));
        };
        out.push(images.base64(data, None, &field)?);
    }
    Ok(out)
}

/// A message's images, then its text: Ollama puts the images first.
fn images_then(images: Vec<Image>, text: &str) -> Content {
    let mut content = Content::default();
    for image in images {
        content.push_image(image);
    }
    content.push_text(text, "");
    content
}

/// `think`: a boolean, or a level (`low`, `medium`, `high`) that means on.
fn think(f: &Fields<'_>) -> Result<bool, ApiError> {
    match f.get("think") {
        None | Some(Value::Bool(true)) => Ok(true),
        Some(Value::Bool(false)) => Ok(false),
        Some(Value::String(level)) if ["low", "medium", "high"].contains(&level.as_str()) => {
            Ok(true)
        }
        Some(_) => Err(ApiError::invalid(
            "think",
            "'think' must be a boolean or low, medium or high",
        )),
    }
}

/// `options` over the server's defaults, and `format`.
fn sampling(f: &Fields<'_>, defaults: &Defaults) -> Result<Sampling, ApiError> {
    let mut sampling = match f.object("options")? {
        Some(options) => {
            let mut sampling = sampling_fields::sampling(&options, defaults)?;
            // -1 (no cap) and -2 (fill the context) both end at the context's end.
            let limit = defaults.max_tokens_limit();
            if let Some(n) = options.integer("num_predict", -2, limit)? {
                sampling.max_tokens = u32::try_from(n).ok().filter(|&n| n > 0);
            }
            options.integer("num_ctx", 1, i64::from(u32::MAX))?;
            sampling
        }
        None => defaults.sampling.clone(),
    };
    if let Some(format) = format(f)? {
        sampling.response_format = Some(format);
    }
    if !think(f)? {
        let off = Value::Bool(false);
        sampling
            .chat_template_kwargs
            .insert("enable_thinking".into(), off);
    }
    Ok(sampling)
}

/// `format`: `"json"` (any JSON object) or a JSON schema.
fn format(f: &Fields<'_>) -> Result<Option<ResponseFormat>, ApiError> {
    match f.get("format") {
        None => Ok(None),
        Some(Value::String(s)) if s.is_empty() => Ok(None),
        Some(Value::String(s)) if s == "json" => Ok(Some(ResponseFormat::JsonObject)),
        Some(schema @ Value::Object(_)) => {
            sampling_fields::schema_format("format", schema).map(Some)
        }
        Some(_) => Err(ApiError::invalid(
            "format",
            "'format' must be \"json\" or a JSON schema object",
        )),
    }
}

/// The system prompt (when the request has one) and the other messages; the
/// images of user and tool messages are read by `images`.
fn messages(
    f: &Fields<'_>,
    images: &mut Images,
) -> Result<(Option<String>, Vec<Message>), ApiError> {
    let mut system: Option<String> = None;
    let mut out: Vec<Message> = Vec::new();
    for (i, item) in f.array("messages")?.into_iter().flatten().enumerate() {
        let m = Fields::of(item, &format!("messages[{i}]"))?;
        let role = m
            .choice("role", &["system", "user", "assistant", "tool"])?
            .ok_or_else(|| m.missing("role", "system, user, assistant or tool"))?;
        let mut text_only = Images::text_only("a system or assistant message");
        let reader = match role {
            "user" | "tool" => &mut *images,
            _ => &mut text_only,
        };
        let attached = base64_images(&m, reader)?;
        let content = m.str("content")?.unwrap_or("");
        match role {
            "system" => match &mut system {
                Some(s) => {
                    s.push_str("\n\n");
                    s.push_str(content);
                }
                None => system = Some(content.to_string()),
            },
            "user" => out.push(images_then(attached, content).into_message(Message::user)),
            "assistant" => out.push(assistant(&m, i, content)?),
            _ => {
                let call = answered_call(&m, &out)?.clone();
                let content = images_then(attached, content);
                out.push(content.into_message(|text| Message::tool_result(&call, text)));
            }
        }
    }
    Ok((system, out))
}

/// An assistant turn: its text, `thinking` and `tool_calls` (arguments an
/// object; a call without an `id` gets one, stable for the same history).
fn assistant(m: &Fields<'_>, i: usize, content: &str) -> Result<Message, ApiError> {
    let mut message = Message::assistant(content);
    if let Some(thinking) = m.str("thinking")?.filter(|t| !t.is_empty()) {
        message.thinking = Some(thinking.to_string());
    }
    for (j, call) in m.array("tool_calls")?.into_iter().flatten().enumerate() {
        let c = Fields::of(call, &format!("{}[{j}]", m.name("tool_calls")))?;
        let function = c
            .object("function")?
            .ok_or_else(|| c.missing("function", "an object"))?;
        let arguments = match function.get("arguments") {
            None => Value::Object(Map::new()),
            Some(args @ Value::Object(_)) => args.clone(),
            // Some clients send OpenAI's string; keep it when it is JSON.
            Some(Value::String(raw)) => {
                serde_json::from_str(raw).map_err(|_| function.missing("arguments", "an object"))?
            }
            Some(_) => return Err(function.missing("arguments", "an object")),
        };
        message.tool_calls.push(ToolCall {
            id: c
                .str("id")?
                .map_or_else(|| format!("call_{i}_{j}"), str::to_string),
            name: function.required_str("name")?.to_string(),
            arguments,
        });
    }
    Ok(message)
}

/// The call a `tool` message answers: the one its `tool_call_id` names, else
/// the latest one named `tool_name`, else the next one of the latest assistant
/// turn not answered yet (Ollama's order).
fn answered_call<'a>(m: &Fields<'_>, earlier: &'a [Message]) -> Result<&'a ToolCall, ApiError> {
    if let Some(id) = m.str("tool_call_id")? {
        return super::earlier_call(earlier, id).ok_or_else(|| {
            ApiError::invalid(
                &m.name("tool_call_id"),
                format!("tool_call_id '{id}' answers no earlier assistant tool call"),
            )
        });
    }
    let calls = || {
        earlier
            .iter()
            .rev()
            .filter(|msg| msg.role == Role::Assistant)
            .flat_map(|msg| msg.tool_calls.iter())
    };
    if let Some(name) = m.str("tool_name")? {
        return calls().find(|call| call.name == name).ok_or_else(|| {
            ApiError::invalid(
                &m.name("tool_name"),
                format!("tool_name '{name}' names no earlier assistant tool call"),
            )
        });
    }
    let last = earlier.iter().rposition(|msg| msg.role == Role::Assistant);
    let next = last.and_then(|a| {
        let answered = earlier[a + 1..]
            .iter()
            .filter(|msg| msg.role == Role::Tool)
            .count();
        earlier[a].tool_calls.get(answered)
    });
    next.ok_or_else(|| {
        ApiError::invalid(
            &m.name("role"),
            "a tool message must answer a tool call of an earlier assistant message",
        )
    })
}

// ---------------------------------------------------------------------------
// Answers.

impl ApiServer {
    /// A request refused before any work, in Ollama's shape.
    fn refuse_ollama(&self, responder: Responder, error: &ApiError) {
        self.metrics
            .rejected_invalid
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        responder.json_with(error.status, &error.ollama_body(), &error.headers());
    }

    pub(super) fn ollama_generation(&self, route: Route, request: &Request, responder: Responder) {
        let started = Instant::now();
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        let parsed = match route {
            Route::Chat => parse_chat(&request.body, &loaded.defaults),
            Route::Generate => parse_generate(&request.body, &loaded.defaults),
        };
        let parsed = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse_ollama(responder, &error),
        };
        let name = match route {
            Route::Chat => "/api/chat",
            Route::Generate => "/api/generate",
        };
        super::log_ignored(name, &parsed.ignored);
        if parsed.work.raw_prompt.is_some() && loaded.local.is_none() {
            return self.refuse_ollama(responder, &local::unsupported("raw: true"));
        }
        let answer = OllamaWriter {
            model: parsed.model,
            route,
            hide_thinking: parsed.hide_thinking,
            started,
        };
        if parsed.load_only {
            let unload = parsed.keep_alive.is_some_and(KeepAlive::unloads);
            if let (false, Some(model)) = (unload, &loaded.local) {
                if let Err(error) = model.wake() {
                    return self.refuse_ollama(responder, &local::from_model(error, "model"));
                }
            }
            keep_alive(loaded, parsed.keep_alive);
            return responder.json(200, &answer.loaded(unload));
        }
        let counter = match route {
            Route::Chat => &self.metrics.chat_requests,
            Route::Generate => &self.metrics.completions_requests,
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.serve(loaded, answer, parsed.work, 1, parsed.stream, responder);
        keep_alive(loaded, parsed.keep_alive);
    }

    /// `POST /api/embed` (`input`: a string or strings → `embeddings`) and the
    /// legacy `POST /api/embeddings` (`prompt` → `embedding`).
    pub(super) fn ollama_embed(&self, route: EmbedRoute, request: &Request, responder: Responder) {
        let legacy = route == EmbedRoute::Legacy;
        let started = Instant::now();
        self.metrics
            .embeddings_requests
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        let Some(model) = &loaded.local else {
            let route = if legacy {
                "/api/embeddings"
            } else {
                "/api/embed"
            };
            return self.refuse_ollama(responder, &local::unsupported(route));
        };
        let parsed = json_body(&request.body).and_then(|value| {
            let f = Fields::of(&value, "")?;
            let name = served_model(f.str("model")?, &loaded.defaults)?;
            let keep = keep_alive::parse(f.get("keep_alive"))?;
            Ok((name, embed_inputs(&f, legacy)?, keep))
        });
        let (name, inputs, keep) = match parsed {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse_ollama(responder, &error),
        };
        let embedded = match inputs.is_empty() {
            true => Ok(Vec::new()),
            false => model
                .embed(inputs)
                .map_err(|e| local::from_model(e, "input")),
        };
        keep_alive(loaded, keep);
        let embeddings = match embedded {
            Ok(embeddings) => embeddings,
            Err(error) => return self.refuse_ollama(responder, &error),
        };
        if legacy {
            let embedding = embeddings.into_iter().next().map(|e| e.vector);
            return responder.json(
                200,
                &wire::Embedding {
                    embedding: embedding.unwrap_or_default(),
                },
            );
        }
        let prompt_eval_count = embeddings.iter().map(|e| e.n_tokens as u64).sum();
        responder.json(
            200,
            &wire::Embed {
                model: name,
                embeddings: embeddings.into_iter().map(|e| e.vector).collect(),
                total_duration: started.elapsed().as_nanos() as u64,
                load_duration: 0,
                prompt_eval_count,
            },
        );
    }

    pub(super) fn ollama_tags(&self, responder: Responder) {
        let Some((loaded, responder)) = self.loaded(responder) else {
            return;
        };
        let facts = facts(loaded);
        let model = &loaded.defaults.model;
        let files = files::listed(loaded, &self.models_dirs);
        let mut models = vec![wire::TagEntry {
            name: model,
            model,
            modified_at: facts.modified_at,
            size: facts.size,
            digest: digest(model),
            details: facts.details,
        }];
        models.extend(files.iter().map(files::tag_entry));
        responder.json(200, &wire::Tags { models });
    }
}

/// Hands a request's `keep_alive` to the in-process model once the request is
/// done; API backends have nothing to unload.
fn keep_alive(loaded: &Loaded, keep: Option<KeepAlive>) {
    if let (Some(model), Some(keep)) = (&loaded.local, keep) {
        // A generation thread that is gone has nothing to keep.
        let _ = model.keep_alive(keep.limit());
    }
}

/// `/api/embed`, or the legacy `/api/embeddings`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbedRoute {
    Embed,
    Legacy,
}

/// The texts to embed: `input` (a string or strings) or, legacy, `prompt`; an
/// empty one is no input (Ollama answers it with no vector).
fn embed_inputs(f: &Fields<'_>, legacy: bool) -> Result<Vec<EmbedInput>, ApiError> {
    let wrong = || ApiError::invalid("input", "'input' must be a string or an array of strings");
    let texts: Vec<String> = match (legacy, f.get(if legacy { "prompt" } else { "input" })) {
        (_, None) => Vec::new(),
        (_, Some(Value::String(text))) => vec![text.clone()],
        (false, Some(Value::Array(items))) => items
            .iter()
            .map(|item| item.as_str().map(str::to_string).ok_or_else(wrong))
            .collect::<Result<_, _>>()?,
        (true, Some(_)) => return Err(f.missing("prompt", "a string")),
        (false, Some(_)) => return Err(wrong()),
    };
    Ok(texts
        .into_iter()
        .filter(|t| !t.is_empty())
        .map(EmbedInput::Text)
        .collect())
}

/// `GET /api/version`.
pub fn version(responder: Responder) {
    responder.json(
        200,
        &wire::Version {
            version: API_VERSION,
            shepherd: env!("CARGO_PKG_VERSION"),
        },
    );
}

/// The model management routes not served: 501, saying why.
pub fn unserved(path: &str, responder: Responder) {
    let message =
        format!("{path} is not supported: this server serves the one model it was started with");
    let error = ApiError::new(501, "not_supported_error", message);
    responder.json(501, &error.ollama_body());
}

/// Ollama's shape for the answer to a route of its API: a wrong method is
/// a 405.
pub fn wrong_method(responder: Responder) {
    let error = ApiError::new(405, "invalid_request_error", "method not allowed");
    responder.json(405, &error.ollama_body());
}

impl ApiError {
    /// Ollama's `{"error": "message"}`.
    pub fn ollama_body(&self) -> wire::Error<'_> {
        wire::Error {
            error: &self.message,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::super::images::tests as pictures;
    use super::super::text::Assembler;
    use super::super::wire::encode;
    use super::super::Usage;
    use super::reply::timestamp;
    use super::*;
    use crate::backend::Reply;
    use crate::core::FinishReason;
    use serde_json::json;

    fn defaults() -> Defaults {
        Defaults {
            model: "served".into(),
            system_prompt: "server prompt".into(),
            ..Defaults::default()
        }
    }

    fn chat(body: Value) -> Result<OllamaRequest, ApiError> {
        parse_chat(body.to_string().as_bytes(), &defaults())
    }

    #[test]
    fn a_chat_history_with_calls_and_results_becomes_messages() {
        let request = chat(json!({
            "model": "served:latest",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"function": {"name": "weather", "arguments": {"city": "Paris"}}},
                    {"function": {"name": "time", "arguments": {}}}
                ]},
                {"role": "tool", "content": "sunny", "tool_name": "weather"},
                {"role": "tool", "content": "noon"}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
            "options": {"temperature": 0, "num_predict": 7, "seed": 3, "stop": ["END"], "num_ctx": 4096},
            "format": {"type": "object", "properties": {"a": {"type": "integer"}}},
            "keep_alive": "5m",
            "think": false
        }))
        .unwrap();
        let messages = &request.work.session.messages;
        assert_eq!(request.work.session.system_prompt, "be brief");
        assert_eq!(request.model, "served:latest");
        assert!(request.stream && request.hide_thinking && !request.load_only);
        assert_eq!(messages[1].tool_calls[0].id, "call_2_0");
        assert_eq!(
            messages[1].tool_calls[0].arguments,
            json!({"city": "Paris"})
        );
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_2_0"));
        assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_2_1"));
        let sampling = &request.work.sampling;
        assert_eq!(
            (sampling.temperature, sampling.max_tokens, sampling.seed),
            (Some(0.0), Some(7), Some(3))
        );
        assert_eq!(sampling.stop, vec!["END".to_string()]);
        assert!(matches!(
            sampling.response_format,
            Some(ResponseFormat::JsonSchema { .. })
        ));
        assert!(request.ignored.is_empty(), "{:?}", request.ignored);
    }

    #[test]
    fn faults_are_ollama_errors_naming_the_field() {
        for (body, status, message) in [
            (
                json!({"model": "other", "messages": []}),
                404,
                "model \"other\" not found, try pulling it first",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x", "images": ["aGk="]}]}),
                400,
                "'messages[0].images[0]': unsupported image type (the file's first bytes are none of PNG, JPEG, WebP or GIF): PNG, JPEG, WebP and GIF are accepted",
            ),
            (
                json!({"messages": [{"role": "tool", "content": "x"}]}),
                400,
                "a tool message must answer a tool call of an earlier assistant message",
            ),
            (
                json!({"messages": [], "format": "xml"}),
                400,
                "'format' must be \"json\" or a JSON schema object",
            ),
            (
                json!({"messages": [], "options": {"temperature": "hot"}}),
                400,
                "'options.temperature' must be a number from 0 to 2",
            ),
        ] {
            let error = chat(body.clone()).unwrap_err();
            assert_eq!(
                (error.status, error.message.as_str()),
                (status, message),
                "{body}"
            );
            assert_eq!(
                encode(&error.ollama_body()),
                encode(&json!({"error": message}))
            );
        }
        let template = json!({"prompt": "hi", "template": "{{ .Prompt }}"});
        let error = parse_generate(template.to_string().as_bytes(), &defaults()).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("template"));
    }

    #[test]
    fn generate_takes_a_prompt_its_system_and_raw() {
        let body = json!({"model": "", "prompt": "1, 2,", "system": "count", "raw": true, "stream": false});
        let request = parse_generate(body.to_string().as_bytes(), &defaults()).unwrap();
        assert_eq!(request.model, "served");
        assert!(!request.stream);
        assert_eq!(request.work.session.system_prompt, "count");
        assert_eq!(
            request.work.raw_prompt,
            Some(vec![PromptPart::Text("1, 2,".into())])
        );
        let empty = parse_generate(b"{}", &defaults()).unwrap();
        assert!(empty.load_only);
    }

    #[test]
    fn images_stand_before_the_text_of_their_message() {
        let data = pictures::png_base64();
        let request = chat(json!({"messages": [
            {"role": "user", "content": "what is it?", "images": [data, data]},
            {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "shot"}}]},
            {"role": "tool", "content": "taken", "images": [data]}
        ]}))
        .unwrap();
        let messages = &request.work.session.messages;
        assert_eq!(messages[0].content, "what is it?");
        let at: Vec<usize> = messages[0].images.iter().map(|p| p.at).collect();
        assert_eq!(at, [0, 0]);
        assert_eq!(
            (messages[2].role, messages[2].images.len()),
            (Role::Tool, 1)
        );
        let generate = |body: Value| parse_generate(body.to_string().as_bytes(), &defaults());
        let plain = generate(json!({"prompt": "describe", "images": [data]})).unwrap();
        let message = &plain.work.session.messages[0];
        assert_eq!(
            (message.content.as_str(), message.images[0].at),
            ("describe", 0)
        );
        let raw = generate(json!({"prompt": "describe", "images": [data], "raw": true})).unwrap();
        let parts = raw.work.raw_prompt.unwrap();
        assert!(matches!(parts[0], PromptPart::Image(ref image) if image.width == 2));
        assert_eq!(parts[1], PromptPart::Text("describe".into()));
        // An image alone is something to generate from.
        assert!(!generate(json!({"images": [data]})).unwrap().load_only);
    }

    #[test]
    fn images_that_cannot_be_read_are_400s_naming_the_field() {
        let data = pictures::png_base64();
        for (body, param, words) in [
            (
                json!({"messages": [{"role": "user", "content": "x", "images": [data, "@@@"]}]}),
                "messages[0].images[1]",
                "not valid base64",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x", "images": [7]}]}),
                "messages[0].images[0]",
                "must be a base64 string",
            ),
            (
                json!({"messages": [{"role": "system", "content": "x", "images": [data]}]}),
                "messages[0].images[0]",
                "carries text only",
            ),
        ] {
            let error = chat(body.clone()).unwrap_err();
            assert_eq!(
                (error.status, error.param.as_deref()),
                (400, Some(param)),
                "{body}"
            );
            assert!(error.message.contains(words), "{body}: {}", error.message);
        }
        let many = vec![data; crate::core::image::MAX_IMAGES + 1];
        let body = json!({"prompt": "x", "images": many});
        let error = parse_generate(body.to_string().as_bytes(), &defaults()).unwrap_err();
        assert_eq!(error.param.as_deref(), Some("images[64]"));
        assert!(
            error.message.contains("too many images"),
            "{}",
            error.message
        );
    }

    #[test]
    fn lines_are_chat_or_generate_shaped_and_the_last_has_the_figures() {
        let answer = |route| OllamaWriter {
            model: "m".into(),
            route,
            hide_thinking: false,
            started: Instant::now(),
        };
        let value = |line: &wire::Line<'_>| {
            let mut v: Value = serde_json::from_str(&encode(line)).unwrap();
            v.as_object_mut().unwrap().remove("created_at");
            v
        };
        let chat = answer(Route::Chat);
        assert_eq!(
            value(&chat.line("hi", Some("hmm"), Vec::new())),
            json!({"model": "m", "message": {"role": "assistant", "content": "hi", "thinking": "hmm"}, "done": false})
        );
        let generate = answer(Route::Generate);
        assert_eq!(
            value(&generate.line("hi", None, Vec::new())),
            json!({"model": "m", "response": "hi", "done": false})
        );
        let reply = Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: vec![ToolCall {
                id: "c1".into(),
                name: "weather".into(),
                arguments: json!({"city": "Paris"}),
            }],
            finish: FinishReason::Stop,
            usage: None,
            artefacts: Vec::new(),
            stop_sequence: None,
        };
        let usage = Usage {
            prompt: 10,
            completion: 4,
            ..Usage::default()
        };
        let whole = value(&chat.whole(&Assembler::new(), &reply, &usage));
        assert_eq!(
            whole["message"]["tool_calls"],
            json!([{"id": "c1", "function": {"index": 0, "name": "weather", "arguments": {"city": "Paris"}}}])
        );
        assert_eq!(whole["done"], json!(true));
        assert_eq!(whole["done_reason"], json!("stop"));
        assert_eq!(
            (
                whole["prompt_eval_count"].as_u64(),
                whole["eval_count"].as_u64()
            ),
            (Some(10), Some(4))
        );
        assert!(whole["eval_duration"].as_u64().unwrap() > 0);
        assert!(timestamp(UNIX_EPOCH).starts_with("1970-01-01T00:00:00.000000000Z"));
    }
}

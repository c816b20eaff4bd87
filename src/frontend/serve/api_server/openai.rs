//! `POST /v1/chat/completions`: OpenAI's request checked field by field into
//! a [`Work`], and the answer written as `chat.completion` or as
//! `chat.completion.chunk` events.
//!
//! Stateless: the request's `messages` are the whole conversation. System
//! (and developer) messages become the system prompt; without one the
//! server's `--system-prompt` is used. User and tool messages take `image_url`
//! parts (a `data:` URL, or an http(s) URL with `--allow-image-urls`, read by
//! [`super::images`]); other messages are text.
//! Tools of every type are read by [`tools`] and [`tool_choice`], which the
//! Responses API shares (custom, local_shell, hosted ones dropped: see
//! [`super::tool_types`]); legacy `functions`/`function_call` too.

mod reply;
mod tools;

use std::sync::atomic::Ordering;

use serde_json::{Map, Value};

use super::error::ApiError;
use super::fields::{json_body, unknown_fields, Fields};
use super::images::{Content, Images};
use super::native;
use super::pool::Work;
use super::sampling_fields::{
    response_format, sampling, stream_options, telemetry, template_kwargs, MAX_CHOICES,
};
use super::tool_types::{self, ToolKinds};
use super::Defaults;
use super::{local_sampling, log_ignored, now_secs, warn_dropped, ApiServer};
use crate::core::Image;
use crate::core::{Message, Session, ToolCall};
use crate::frontend::serve::http::{Request, Responder};
pub use reply::ChatWriter;
pub use tools::{tool_choice, tools};

/// A checked chat-completions request.
#[derive(Debug)]
pub struct ChatRequest {
    pub work: Work,
    pub stream: bool,
    pub include_usage: bool,
    /// Echoed in every answer.
    pub model: String,
    /// Fields this server does not know and ignored ([`unknown_fields`]).
    pub ignored: Vec<String>,
    /// How many choices to generate (`n`).
    pub n: u32,
    /// What the offered tools were, for the answer's shape and warnings.
    pub kinds: ToolKinds,
}

/// Fields accepted but with no effect here (documented as such): llama-server's
/// `cache_prompt` (shepherd always reuses the cache) and `id_slot` (the slot is the
/// one whose cache shares most with the prompt).
const IGNORED: [&str; 7] = [
    "user",
    "metadata",
    "store",
    "parallel_tool_calls",
    "service_tier",
    "cache_prompt",
    "id_slot",
];

/// Every field this server reads; any other is ignored and named in a debug line.
const KNOWN: [&str; 38] = [
    "chat_template_kwargs",
    "return_progress",
    "timings_per_token",
    "verbose",
    "add_generation_prompt",
    "continue_final_message",
    "reasoning_effort",
    "functions",
    "function_call",
    "grammar",
    "json_schema",
    "model",
    "n_predict",
    "messages",
    "tools",
    "tool_choice",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "frequency_penalty",
    "presence_penalty",
    "seed",
    "stop",
    "n",
    "logprobs",
    "top_logprobs",
    "response_format",
    "use_tools",
    "logit_bias",
    "modalities",
    "prediction",
];

/// Parses and checks the body; nothing reaches a backend unless this succeeds.
/// Long on purpose: one check per request field, in the order of the OpenAI
/// reference, so a reader can tick them off against it.
pub fn parse(body: &[u8], defaults: &Defaults) -> Result<ChatRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let ignored = unknown_fields(&value, &KNOWN, &IGNORED);
    let model = f.str("model")?.unwrap_or(&defaults.model).to_string();
    let (system, messages) = messages(&f, &mut Images::new(&defaults.image_urls))?;
    let (mut tools, mut kinds) = tools(&f)?;
    let tool_choice = tool_choice(&f, &mut tools, &mut kinds)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = stream_options(&f, stream)?;
    let n = f.integer("n", 1, MAX_CHOICES)?.unwrap_or(1) as u32;
    let logprobs = f.bool("logprobs")?.unwrap_or(false);
    let top_logprobs = f.integer("top_logprobs", 0, 20)?;
    if top_logprobs.is_some() && !logprobs {
        return Err(ApiError::invalid(
            "top_logprobs",
            "'top_logprobs' needs 'logprobs': true",
        ));
    }
    f.unsupported("modalities", &[Value::Array(vec!["text".into()])])?;
    f.unsupported("prediction", &[])?;
    let use_tools = match f.bool("use_tools")? {
        Some(true) if !defaults.use_tools => {
            return Err(ApiError::invalid(
                "use_tools",
                "'use_tools' needs a server started with --use-tools",
            ))
        }
        Some(wanted) => wanted,
        None => defaults.use_tools,
    };
    let mut sampling = sampling(&f, defaults)?;
    sampling.logprobs = logprobs.then(|| top_logprobs.unwrap_or(0) as u32);
    sampling.telemetry = telemetry(&f, stream)?;
    sampling.telemetry.prompt = f.bool("verbose")?.unwrap_or(defaults.verbose);
    if let Some(format) = response_format(&f)? {
        sampling.response_format = Some(format);
    }
    sampling.chat_template_kwargs = template_kwargs(&f)?;
    let mut session = Session::new(system.unwrap_or_else(|| defaults.system_prompt.clone()));
    session.messages = messages;
    Ok(ChatRequest {
        work: Work {
            session,
            tools,
            tool_choice,
            sampling,
            use_tools,
            raw_prompt: None,
        },
        stream,
        include_usage,
        model,
        ignored,
        n,
        kinds,
    })
}

/// The system prompt (when the request has one) and the other messages, their
/// images read by `images`.
fn messages(
    f: &Fields<'_>,
    images: &mut Images,
) -> Result<(Option<String>, Vec<Message>), ApiError> {
    let items = f
        .array("messages")?
        .ok_or_else(|| f.missing("messages", "a non-empty array"))?;
    if items.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "'messages' must be a non-empty array",
        ));
    }
    // A final assistant turn is continued (prefill); one before it too is a
    // 400, as llama-server refuses it.
    let answer = |item: &Value| item.get("role").and_then(Value::as_str) == Some("assistant");
    if let [.., a, b] = items.as_slice() {
        if answer(a) && answer(b) {
            return Err(ApiError::invalid(
                "messages",
                "cannot have 2 or more assistant messages at the end of the list",
            ));
        }
    }
    // A final assistant turn is continued, never followed by a new one: asking
    // for both is a 400, as in llama-server.
    let continued = f
        .get("continue_final_message")
        .is_some_and(|c| c != &Value::Bool(false));
    if continued && f.bool("add_generation_prompt")? == Some(true) {
        return Err(ApiError::invalid(
            "continue_final_message",
            "cannot set both add_generation_prompt and continue_final_message to true",
        ));
    }
    let mut system: Option<String> = None;
    let mut out: Vec<Message> = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let m = Fields::of(item, &format!("messages[{i}]"))?;
        let role = m.required_str("role")?;
        match role {
            "system" | "developer" => {
                let text = content(&m, &mut Images::text_only("a system message"))?
                    .ok_or_else(|| m.missing("content", "text"))?
                    .text;
                match &mut system {
                    Some(s) => {
                        s.push_str("\n\n");
                        s.push_str(&text);
                    }
                    None => system = Some(text),
                }
            }
            "user" => {
                let content = content(&m, images)?.ok_or_else(|| m.missing("content", "text"))?;
                out.push(content.into_message(Message::user));
            }
            "assistant" => out.push(assistant(&m, &out, i + 1 == items.len())?),
            "tool" => out.push(tool_result(&m, &out, images)?),
            "function" => out.push(function_result(&m, &out)?),
            other => {
                return Err(ApiError::invalid(
                    &m.name("role"),
                    format!(
                    "unknown role '{other}': expected system, developer, user, assistant, tool or function"
                ),
                ))
            }
        }
    }
    Ok((system, out))
}

/// `content`: a string or an array of parts, text parts joined with a newline
/// as llama-server joins them for a template that reads text, images read by
/// `images`.
fn content(m: &Fields<'_>, images: &mut Images) -> Result<Option<Content>, ApiError> {
    content_joined(m, "\n", images)
}

/// [`content`], its text parts joined with `delimiter`.
fn content_joined(
    m: &Fields<'_>,
    delimiter: &str,
    images: &mut Images,
) -> Result<Option<Content>, ApiError> {
    let name = m.name("content");
    match m.get("content") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(Content::text(s.clone()))),
        Some(Value::Array(parts)) => content_parts(parts, &name, delimiter, images).map(Some),
        Some(_) => Err(ApiError::invalid(
            &name,
            format!("'{name}' must be a string or an array of content parts"),
        )),
    }
}

/// The text of content `parts` (field `name`) that may hold no image (an
/// embedding's input), joined with `delimiter`.
pub(super) fn text_parts(parts: &[Value], name: &str, delimiter: &str) -> Result<String, ApiError> {
    let mut images = Images::text_only("an embedding's input");
    content_parts(parts, name, delimiter, &mut images).map(|content| content.text)
}

/// Content `parts` (field `name`): `text` parts joined with `delimiter`,
/// `image_url` parts read by `images`.
fn content_parts(
    parts: &[Value],
    name: &str,
    delimiter: &str,
    images: &mut Images,
) -> Result<Content, ApiError> {
    let mut content = Content::default();
    for (j, part) in parts.iter().enumerate() {
        let p = Fields::of(part, &format!("{name}[{j}]"))?;
        match p.required_str("type")? {
            "text" => content.push_text(p.required_str("text")?, delimiter),
            "image_url" => {
                images.taken(&p.name("type"))?;
                content.push_image(image_url(&p, images)?);
            }
            other => {
                return Err(ApiError::invalid(
                    &p.name("type"),
                    format!(
                        "content parts of type '{other}' are not supported; send text or image_url"
                    ),
                ))
            }
        }
    }
    Ok(content)
}

/// An `image_url` part's image: `{"url", "detail"}` (the detail is the
/// projector's to decide), or the URL alone, as some clients send it.
fn image_url(p: &Fields<'_>, images: &mut Images) -> Result<Image, ApiError> {
    let url = match p.get("image_url") {
        Some(Value::String(url)) => url.as_str(),
        _ => p
            .object("image_url")?
            .ok_or_else(|| p.missing("image_url", "an object with a 'url'"))?
            .required_str("url")?,
    };
    images.reference(url, &p.name("image_url"))
}

/// An assistant turn: its text, reasoning and tool calls (`function` and
/// `custom` ones, and the legacy `function_call`, whose id is made up from the
/// calls before it: `call_fn_N`).
/// The final one, which the model continues, joins its text parts with a
/// blank line, as llama-server's continuation does.
fn assistant(m: &Fields<'_>, earlier: &[Message], last: bool) -> Result<Message, ApiError> {
    let delimiter = if last { "\n\n" } else { "\n" };
    let mut images = Images::text_only("an assistant message");
    let text = content_joined(m, delimiter, &mut images)?.map(|content| content.text);
    let mut message = Message::assistant(text.unwrap_or_default());
    if let Some(reasoning) = m.str("reasoning_content")? {
        message.thinking = Some(reasoning.to_string());
    }
    for (j, call) in m.array("tool_calls")?.into_iter().flatten().enumerate() {
        let c = Fields::of(call, &format!("{}[{j}]", m.name("tool_calls")))?;
        let kind = c.choice("type", &["function", "custom"])?;
        let id = c.required_str("id")?;
        if kind == Some("custom") {
            let custom = c
                .object("custom")?
                .ok_or_else(|| c.missing("custom", "an object"))?;
            let input = custom.str("input")?.unwrap_or("");
            let name = custom.required_str("name")?;
            message
                .tool_calls
                .push(tool_types::custom_call(id, name, input));
            continue;
        }
        let function = c
            .object("function")?
            .ok_or_else(|| c.missing("function", "an object"))?;
        message.tool_calls.push(function_call(id, &function)?);
    }
    if let Some(function) = m.object("function_call")? {
        let made = earlier.iter().map(|m| m.tool_calls.len()).sum::<usize>();
        message
            .tool_calls
            .push(function_call(&format!("call_fn_{made}"), &function)?);
    }
    Ok(message)
}

/// A function call of history: `name` and `arguments` as JSON text.
fn function_call(id: &str, function: &Fields<'_>) -> Result<ToolCall, ApiError> {
    let name = function.required_str("name")?;
    let raw = function.str("arguments")?.unwrap_or("{}");
    let arguments = match raw.trim() {
        "" => Value::Object(Map::new()),
        text => serde_json::from_str(text).unwrap_or_else(|_| Value::String(raw.to_string())),
    };
    Ok(ToolCall {
        id: id.to_string(),
        name: name.to_string(),
        arguments,
    })
}

/// A legacy `role: function` message: the result of the latest call of the
/// function it names.
fn function_result(m: &Fields<'_>, earlier: &[Message]) -> Result<Message, ApiError> {
    let name = m.required_str("name")?;
    let text = content(m, &mut Images::text_only("a function message"))?
        .ok_or_else(|| m.missing("content", "text"))?
        .text;
    let call = earlier
        .iter()
        .rev()
        .flat_map(|m| m.tool_calls.iter().rev())
        .find(|call| call.name == name)
        .ok_or_else(|| {
            ApiError::invalid(
                &m.name("name"),
                format!("function '{name}' answers no earlier function_call"),
            )
        })?;
    Ok(Message::tool_result(call, text))
}

/// A tool result must answer a call made earlier in the conversation; its
/// images are read by `images`.
fn tool_result(
    m: &Fields<'_>,
    earlier: &[Message],
    images: &mut Images,
) -> Result<Message, ApiError> {
    let id = m.required_str("tool_call_id")?;
    let call = super::earlier_call(earlier, id).ok_or_else(|| {
        ApiError::invalid(
            &m.name("tool_call_id"),
            format!("tool_call_id '{id}' answers no earlier assistant tool call"),
        )
    })?;
    let content = content(m, images)?.ok_or_else(|| m.missing("content", "text"))?;
    Ok(content.into_message(|text| Message::tool_result(call, text)))
}

impl ApiServer {
    /// `POST /v1/chat/completions`.
    pub(super) fn chat(&self, request: &Request, responder: Responder) {
        self.metrics.chat_requests.fetch_add(1, Ordering::Relaxed);
        let Some((loaded, mut responder)) = self.loaded(responder) else {
            return;
        };
        let mut parsed = match parse(&request.body, &loaded.defaults) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.metrics
                    .rejected_invalid
                    .fetch_add(1, Ordering::Relaxed);
                return responder.json_with(error.status, &error.openai_body(), &error.headers());
            }
        };
        log_ignored("/v1/chat/completions", &parsed.ignored);
        warn_dropped(
            "/v1/chat/completions",
            &parsed.kinds.dropped,
            &mut responder,
        );
        if let Err(error) = local_sampling(loaded, &mut parsed.work.sampling) {
            return self.refuse(responder, &error);
        }
        let verbose = (parsed.work.sampling.telemetry.prompt).then(|| {
            native::NativeWriter::verbose(parsed.model.clone(), parsed.work.sampling.clone())
        });
        let answer = ChatWriter {
            id: self.new_id("chatcmpl-"),
            created: now_secs(),
            model: parsed.model,
            include_usage: parsed.include_usage,
            logprobs: parsed.work.sampling.logprobs.is_some(),
            kinds: parsed.kinds,
            verbose,
        };
        self.serve(
            loaded,
            answer,
            parsed.work,
            parsed.n,
            parsed.stream,
            responder,
        );
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::images::tests as pictures;
    use super::super::text::Assembler;
    use super::super::tool_types::ToolKinds;
    use super::super::wire::encode;
    use super::super::wire::openai as wire;
    use super::super::Usage;
    use super::reply::{opening, wire_calls};
    use super::*;
    use crate::backend::{Reply, ResponseFormat, ToolChoice};
    use crate::core::{FinishReason, ToolSpec};

    fn defaults() -> Defaults {
        Defaults {
            model: "served".into(),
            system_prompt: "server prompt".into(),
            ..Defaults::default()
        }
    }

    fn ok(body: Value) -> ChatRequest {
        parse(body.to_string().as_bytes(), &defaults()).expect("valid request")
    }

    fn err(body: Value) -> ApiError {
        parse(body.to_string().as_bytes(), &defaults()).expect_err("an invalid request")
    }

    fn user() -> Value {
        json!([{"role": "user", "content": "hi"}])
    }

    fn image_at(message: &Message) -> Vec<(usize, u32, u32)> {
        let size = |p: &crate::core::ImagePart| (p.at, p.image.width, p.image.height);
        message.images.iter().map(size).collect()
    }

    #[test]
    fn image_url_parts_stand_where_they_were_in_the_text() {
        let url = pictures::png_data_url();
        let request = ok(json!({"messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "one"},
                {"type": "text", "text": "two"},
                {"type": "image_url", "image_url": {"url": url, "detail": "low"}},
                {"type": "text", "text": "three"},
                {"type": "image_url", "image_url": pictures::png_base64()}
            ]},
            {"role": "assistant", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "shot", "arguments": "{}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": [
                {"type": "image_url", "image_url": {"url": url}}
            ]}
        ]}));
        let messages = &request.work.session.messages;
        // Joined as llama-server joins parts: a newline between text parts, none
        // next to an image.
        assert_eq!(messages[0].content, "one\ntwothree");
        assert_eq!(image_at(&messages[0]), [(7, 2, 3), (12, 2, 3)]);
        assert_eq!(messages[0].images[0].image.mime, "image/png");
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(image_at(&messages[2]), [(0, 2, 3)]);
        let plain = ok(json!({"messages": user()}));
        assert!(plain.work.session.messages[0].images.is_empty());
    }

    #[test]
    fn image_parts_that_cannot_be_read_are_400s_naming_the_field() {
        let url = pictures::png_data_url();
        let user_parts = |parts: Value| json!({"messages": [{"role": "user", "content": parts}]});
        let cases = [
            (
                user_parts(
                    json!([{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]),
                ),
                "messages[0].content[0].image_url",
                "--allow-image-urls",
            ),
            (
                user_parts(
                    json!([{"type": "text", "text": "x"}, {"type": "image_url", "image_url": {"url": "data:image/png;base64,@@"}}]),
                ),
                "messages[0].content[1].image_url",
                "not valid base64",
            ),
            (
                user_parts(
                    json!([{"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]),
                ),
                "messages[0].content[0].image_url",
                "unsupported image type",
            ),
            (
                user_parts(json!([{"type": "input_audio", "input_audio": {"data": "AAAA"}}])),
                "messages[0].content[0].type",
                "'input_audio' are not supported",
            ),
            (
                json!({"messages": [{"role": "system", "content": [{"type": "image_url", "image_url": {"url": url}}]}, {"role": "user", "content": "x"}]}),
                "messages[0].content[0].type",
                "a system message carries text only",
            ),
            (
                json!({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": [{"type": "image_url", "image_url": url}]}]}),
                "messages[1].content[0].type",
                "an assistant message carries text only",
            ),
        ];
        for (body, param, words) in cases {
            let error = err(body.clone());
            assert_eq!(error.status, 400, "{body}");
            assert_eq!(error.kind, "invalid_request_error");
            assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
            assert!(error.message.contains(words), "{body}: {}", error.message);
        }
    }

    #[test]
    fn more_than_max_images_in_one_request_is_a_400() {
        let part = json!({"type": "image_url", "image_url": {"url": pictures::png_data_url()}});
        let half = vec![part; crate::core::image::MAX_IMAGES / 2 + 1];
        let error = err(json!({"messages": [
            {"role": "user", "content": half.clone()},
            {"role": "assistant", "content": "seen"},
            {"role": "user", "content": half}
        ]}));
        assert_eq!(error.status, 400);
        let last = crate::core::image::MAX_IMAGES / 2 - 1;
        assert_eq!(
            error.param.as_deref(),
            Some(format!("messages[2].content[{last}].image_url").as_str())
        );
        assert!(
            error.message.contains("too many images"),
            "{}",
            error.message
        );
    }

    #[test]
    fn a_full_request_becomes_work() {
        let request = ok(json!({
            "model": "m",
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": [{"type": "text", "text": "weather?"}]},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}
                ]},
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"}
            ],
            "tools": [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}],
            "tool_choice": {"type": "function", "function": {"name": "weather"}},
            "stream": true,
            "stream_options": {"include_usage": true},
            "max_completion_tokens": 20,
            "temperature": 0,
            "top_k": 5,
            "min_p": 0.1,
            "seed": 42,
            "stop": ["\n\n"],
            "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": {"type": "object"}}}
        }));
        let work = &request.work;
        assert_eq!(request.model, "m");
        assert!(request.stream && request.include_usage);
        assert_eq!(work.session.system_prompt, "be brief");
        assert_eq!(work.session.messages.len(), 3);
        assert_eq!(
            work.session.messages[1].tool_calls[0].arguments,
            json!({"city": "Paris"})
        );
        assert_eq!(
            work.session.messages[2].tool_name.as_deref(),
            Some("weather")
        );
        assert_eq!(work.tool_choice, ToolChoice::Named("weather".into()));
        assert_eq!(work.sampling.max_tokens, Some(20));
        assert_eq!(work.sampling.temperature, Some(0.0));
        assert_eq!(
            (work.sampling.top_k, work.sampling.seed),
            (Some(5), Some(42))
        );
        assert_eq!(work.sampling.stop, vec!["\n\n".to_string()]);
        assert!(matches!(
            work.sampling.response_format,
            Some(ResponseFormat::JsonSchema { .. })
        ));
        let plain = ok(json!({"messages": user()}));
        assert_eq!(plain.model, "served");
        assert_eq!(plain.work.session.system_prompt, "server prompt");
    }

    #[test]
    fn a_schema_needs_no_name_and_json_object_takes_llama_servers_schema() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}}});
        let format = |response_format: Value| {
            ok(json!({"messages": user(), "response_format": response_format}))
                .work
                .sampling
                .response_format
        };
        for response_format in [
            json!({"type": "json_schema", "json_schema": {"schema": schema}}),
            json!({"type": "json_object", "schema": schema}),
        ] {
            assert_eq!(
                format(response_format.clone()),
                Some(ResponseFormat::JsonSchema {
                    name: "response".into(),
                    schema: schema.clone(),
                    strict: false,
                }),
                "{response_format}"
            );
        }
        assert_eq!(
            format(json!({"type": "json_object"})),
            Some(ResponseFormat::JsonObject)
        );
    }

    #[test]
    fn malformed_bodies_are_400s_never_panics() {
        let valid = json!({"messages": [{"role": "user", "content": "héllo"}],
                           "tools": [{"type": "function", "function": {"name": "t"}}],
                           "max_tokens": 5, "stop": ["x"], "stream": true})
        .to_string();
        for cut in 0..valid.len() {
            let result = parse(&valid.as_bytes()[..cut], &defaults());
            assert_eq!(result.map(|_| ()).unwrap_err().status, 400, "cut at {cut}");
        }
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        let bodies = [
            deep.as_bytes(),
            b"\xff\xfe{}",
            b"",
            br#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e400}"#,
            br#"{"messages": [{"role": "user", "content": "x"}], "seed": 1e30}"#,
            br#"{"messages": [{"role": "user", "content": "x"}, {"role": "user"}]}"#,
        ];
        for body in bodies {
            assert_eq!(parse(body, &defaults()).unwrap_err().status, 400);
        }
    }

    #[test]
    fn llama_server_fields_are_read_and_unknown_ones_ignored_by_name() {
        // What a client written for llama-server sends: its n_predict caps the
        // answer, cache_prompt and id_slot are accepted, a field nobody knows is
        // ignored (as llama-server ignores it) and named.
        let body = json!({
            "messages": user(),
            "n_predict": 20,
            "cache_prompt": true,
            "id_slot": 0,
            "temprature": 1,
            "t_max_predict_ms": 500,
        });
        let parsed = parse(body.to_string().as_bytes(), &defaults()).unwrap();
        assert_eq!(parsed.work.sampling.max_tokens, Some(20));
        assert_eq!(parsed.ignored, ["temprature", "t_max_predict_ms"]);
        // -1 is llama-server's "no cap"; max_tokens wins over n_predict.
        let endless = json!({"messages": user(), "n_predict": -1});
        let parsed = parse(endless.to_string().as_bytes(), &defaults()).unwrap();
        assert_eq!(
            parsed.work.sampling.max_tokens,
            defaults().sampling.max_tokens
        );
        let both = json!({"messages": user(), "n_predict": 5, "max_tokens": 9});
        let parsed = parse(both.to_string().as_bytes(), &defaults()).unwrap();
        assert_eq!(parsed.work.sampling.max_tokens, Some(9));
        assert!(parsed.ignored.is_empty());
        // A wrong value of a field it does read is still a 400 naming it.
        let bad = json!({"messages": user(), "n_predict": -2});
        assert_eq!(err(bad).param.as_deref(), Some("n_predict"));
    }

    #[test]
    fn logprobs_and_logit_bias_in_both_dialects_reach_the_sampling() {
        let body = json!({
            "messages": user(), "logprobs": true, "top_logprobs": 3,
            "logit_bias": {"15": -100, " 7": 2.5}
        });
        let parsed = parse(body.to_string().as_bytes(), &defaults()).unwrap();
        assert_eq!(parsed.work.sampling.logprobs, Some(3));
        let mut bias = parsed.work.sampling.logit_bias.clone();
        bias.sort_by_key(|&(id, _)| id);
        assert_eq!(bias, [(7, 2.5), (15, -100.0)]);
        // llama-server's pairs, where false bans the token; logprobs alone
        // reports the chosen token only.
        let body = json!({
            "messages": user(), "logprobs": true, "logit_bias": [[3, false], [4, 1]]
        });
        let parsed = parse(body.to_string().as_bytes(), &defaults()).unwrap();
        assert_eq!(parsed.work.sampling.logprobs, Some(0));
        assert_eq!(
            parsed.work.sampling.logit_bias,
            [(3, f32::NEG_INFINITY), (4, 1.0)]
        );
        // Text, as keys or as a pair's first: tokenized later, by the model.
        let body = json!({"messages": user(), "logit_bias": {" Paris": false, "8": 1}});
        let sampling = parse(body.to_string().as_bytes(), &defaults())
            .unwrap()
            .work
            .sampling;
        assert_eq!(sampling.logit_bias, [(8, 1.0)]);
        assert_eq!(
            sampling.logit_bias_text,
            [(" Paris".to_string(), f32::NEG_INFINITY)]
        );
        let body = json!({"messages": user(), "logit_bias": [["hello", -5], [2, 3]]});
        let sampling = parse(body.to_string().as_bytes(), &defaults())
            .unwrap()
            .work
            .sampling;
        assert_eq!(sampling.logit_bias, [(2, 3.0)]);
        assert_eq!(sampling.logit_bias_text, [("hello".to_string(), -5.0)]);
        let plain = parse(
            json!({"messages": user()}).to_string().as_bytes(),
            &defaults(),
        );
        assert_eq!(plain.unwrap().work.sampling.logprobs, None);
    }

    #[test]
    fn every_bad_field_is_a_400_naming_it() {
        let cases = [
            (json!({"messages": []}), "messages"),
            (json!({"messages": "hi"}), "messages"),
            (json!({"messages": [123]}), "messages[0]"),
            (json!({"messages": [{}]}), "messages[0].role"),
            (
                json!({"messages": [{"role": "wizard", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"messages": [{"role": "user", "content": 5}]}),
                "messages[0].content",
            ),
            (
                json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
                "messages[0].content[0].image_url",
            ),
            (
                json!({"messages": [{"role": "tool", "tool_call_id": "x", "content": "r"}]}),
                "messages[0].tool_call_id",
            ),
            (json!({"messages": user(), "max_tokens": -1}), "max_tokens"),
            (json!({"messages": user(), "max_tokens": 0}), "max_tokens"),
            (
                json!({"messages": user(), "max_tokens": 1_000_000_000_000_u64}),
                "max_tokens",
            ),
            (
                json!({"messages": user(), "max_tokens": "10"}),
                "max_tokens",
            ),
            (json!({"messages": user(), "temperature": 3}), "temperature"),
            (
                json!({"messages": user(), "temperature": "hot"}),
                "temperature",
            ),
            (json!({"messages": user(), "top_p": 1.5}), "top_p"),
            (json!({"messages": user(), "top_k": -1}), "top_k"),
            (json!({"messages": user(), "seed": -1}), "seed"),
            (json!({"messages": user(), "n": 0}), "n"),
            (json!({"messages": user(), "n": 17}), "n"),
            (json!({"messages": user(), "stream": "yes"}), "stream"),
            (
                json!({"messages": user(), "stream_options": {"include_usage": true}}),
                "stream_options",
            ),
            (json!({"messages": user(), "stop": [1]}), "stop"),
            (
                json!({"messages": user(), "stop": ["a", "b", "c", "d", "e"]}),
                "stop",
            ),
            (
                json!({"messages": user(), "tool_choice": "required"}),
                "tool_choice",
            ),
            (
                json!({"messages": user(), "tool_choice": "sometimes"}),
                "tool_choice",
            ),
            (
                json!({"messages": user(), "tools": [{"type": "function", "function": {"name": "bad name"}}]}),
                "tools[0].function.name",
            ),
            (
                json!({"messages": user(), "response_format": {"type": "xml"}}),
                "response_format.type",
            ),
            (json!({"messages": user(), "logprobs": 1}), "logprobs"),
            (
                json!({"messages": user(), "top_logprobs": 2}),
                "top_logprobs",
            ),
            (
                json!({"messages": user(), "logprobs": true, "top_logprobs": 21}),
                "top_logprobs",
            ),
            (
                json!({"messages": user(), "logit_bias": {"x": "high"}}),
                "logit_bias",
            ),
            (
                json!({"messages": user(), "logit_bias": {"": 1}}),
                "logit_bias",
            ),
            (
                json!({"messages": user(), "logit_bias": [[["x"], 1]]}),
                "logit_bias",
            ),
            (json!({"messages": user(), "logit_bias": "x"}), "logit_bias"),
            (
                json!({"messages": user(), "logit_bias": {"5": 101}}),
                "logit_bias",
            ),
            (
                json!({"messages": user(), "logit_bias": [[5]]}),
                "logit_bias",
            ),
            (
                json!({"messages": user(), "logit_bias": {"-1": 1}}),
                "logit_bias",
            ),
            (json!({"messages": user(), "use_tools": true}), "use_tools"),
            (
                json!({"messages": user(), "repeat_penalty": -1}),
                "repeat_penalty",
            ),
        ];
        for (body, param) in cases {
            let error = err(body.clone());
            assert_eq!(error.status, 400, "{body}");
            assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
            assert_eq!(error.openai_body().error.kind, "invalid_request_error");
        }
        assert_eq!(err(json!(null)).status, 400);
        let broken = parse(b"{\"messages\": [", &defaults()).unwrap_err();
        assert_eq!(broken.status, 400);
        let nan = parse(b"{\"messages\": [], \"temperature\": NaN}", &defaults()).unwrap_err();
        assert_eq!(nan.status, 400);
    }

    fn answer() -> ChatWriter {
        ChatWriter {
            id: "chatcmpl-1".into(),
            created: 7,
            model: "m".into(),
            include_usage: true,
            logprobs: false,
            kinds: ToolKinds::default(),
            verbose: None,
        }
    }

    fn reply(tool_calls: Vec<ToolCall>) -> Reply {
        Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls,
            finish: FinishReason::Stop,
            usage: None,
            artefacts: Vec::new(),
            stop_sequence: None,
        }
    }

    fn weather_call() -> ToolCall {
        ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: json!({"city": "Paris"}),
        }
    }

    fn value(wire: &impl serde::Serialize) -> Value {
        serde_json::from_str(&encode(wire)).expect("JSON")
    }

    #[test]
    fn a_whole_answer_keeps_its_nulls_and_leaves_out_what_is_empty() {
        let usage = Usage {
            prompt: 10,
            completion: 4,
            cached: Some(6),
            stats: Some(crate::core::Stats {
                prefill_tps: Some(100.0),
                ..Default::default()
            }),
        };
        let mut text = Assembler::new();
        text.reasoning = "hmm".into();
        let a = answer();
        let choices = [(text, reply(vec![weather_call()]))];
        assert_eq!(
            value(&a.whole(&choices, &usage)),
            json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 7, "model": "m",
                "system_fingerprint": super::super::FINGERPRINT,
                "choices": [{
                    "index": 0,
                    "message": {
                        "role": "assistant", "content": null, "reasoning_content": "hmm",
                        "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}],
                    },
                    "logprobs": null,
                    "finish_reason": "tool_calls",
                }],
                "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14,
                          "prompt_tokens_details": {"cached_tokens": 6}},
                "timings": {"prompt_n": 4, "cache_n": 6, "prompt_ms": 40.0,
                            "prompt_per_token_ms": 10.0, "prompt_per_second": 100.0,
                            "predicted_n": 4, "predicted_ms": 0.0,
                            "predicted_per_token_ms": 0.0, "predicted_per_second": 0.0},
            })
        );
        let mut text = Assembler::new();
        text.text = "hi".into();
        let plain = [(text, reply(Vec::new()))];
        assert_eq!(
            value(&a.whole(&plain, &Usage::default()))["choices"][0]["message"],
            json!({"role": "assistant", "content": "hi"})
        );
        let body = value(&a.whole(&plain, &Usage::default()));
        assert_eq!(
            body["usage"],
            json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
        );
        assert!(body.get("timings").is_none(), "{body}");
    }

    #[test]
    fn chunks_keep_their_nulls_and_leave_out_what_is_empty() {
        let a = answer();
        assert_eq!(
            value(&a.chunk(0, opening(), None)),
            json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m",
                "system_fingerprint": super::super::FINGERPRINT,
                "choices": [{"index": 0, "delta": {"role": "assistant", "content": null},
                             "logprobs": null, "finish_reason": null}],
            })
        );
        let calls = [weather_call()];
        let delta = wire::Delta {
            tool_calls: wire_calls(&calls, true, &ToolKinds::default()).0,
            ..wire::Delta::default()
        };
        assert_eq!(
            value(&a.chunk(0, delta, None))["choices"][0]["delta"],
            json!({"tool_calls": [{"id": "c1", "type": "function", "index": 0,
                "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}}]})
        );
        let last = value(&a.chunk(0, wire::Delta::default(), Some("stop")));
        assert_eq!(
            last["choices"][0],
            json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"})
        );
        let usage = Usage {
            prompt: 3,
            completion: 2,
            ..Usage::default()
        };
        assert_eq!(
            value(&a.usage_chunk(&usage)),
            json!({
                "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m",
                "choices": [],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
            })
        );
    }

    fn names(tools: &[ToolSpec]) -> Vec<&str> {
        tools.iter().map(|t| t.name.as_str()).collect()
    }

    #[test]
    fn custom_local_shell_and_hosted_tools_are_offered_or_dropped() {
        let parsed = ok(json!({
            "messages": user(),
            "tools": [
                {"type": "function", "function": {"name": "weather"}},
                {"type": "custom", "custom": {"name": "apply_patch", "description": "Patch",
                    "format": {"type": "grammar", "syntax": "lark", "definition": "start: PATCH"}}},
                {"type": "custom", "name": "flat_custom"},
                {"type": "local_shell"},
                {"type": "web_search"},
                {"type": "web_search_preview_2025_03_11"},
                {"type": "file_search"}, {"type": "code_interpreter"},
                {"type": "computer_use_preview"}, {"type": "image_generation"}, {"type": "mcp"},
            ],
            "tool_choice": {"type": "custom", "custom": {"name": "apply_patch"}},
        }));
        let tools = &parsed.work.tools;
        assert_eq!(
            names(tools),
            ["weather", "apply_patch", "flat_custom", "local_shell"]
        );
        assert_eq!(tools[1].parameters["required"], json!(["input"]));
        assert!(tools[1].description.contains("start: PATCH"));
        assert_eq!(tools[3].parameters["required"], json!(["command"]));
        assert!(parsed.kinds.is_custom("apply_patch") && parsed.kinds.is_custom("flat_custom"));
        assert!(parsed.kinds.is_local_shell("local_shell"));
        assert_eq!(parsed.kinds.dropped.len(), 7, "{:?}", parsed.kinds.dropped);
        assert_eq!(
            parsed.work.tool_choice,
            ToolChoice::Named("apply_patch".into())
        );
        for (choice, expected) in [
            (
                json!({"type": "custom", "name": "apply_patch"}),
                ToolChoice::Named("apply_patch".into()),
            ),
            (
                json!({"type": "local_shell"}),
                ToolChoice::Named("local_shell".into()),
            ),
            (json!({"type": "web_search"}), ToolChoice::Auto),
        ] {
            let parsed = ok(json!({"messages": user(), "tool_choice": choice,
                "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "local_shell"}]}));
            assert_eq!(parsed.work.tool_choice, expected, "{choice}");
        }
        let error = err(json!({"messages": user(), "tools": [{"type": "teleport"}]}));
        assert_eq!(error.param.as_deref(), Some("tools[0].type"));
    }

    #[test]
    fn allowed_tools_narrow_the_offer() {
        let tools = json!([
            {"type": "function", "function": {"name": "a"}},
            {"type": "function", "function": {"name": "b"}},
            {"type": "custom", "custom": {"name": "c"}},
        ]);
        let parsed = ok(json!({"messages": user(), "tools": tools, "tool_choice":
            {"type": "allowed_tools", "mode": "required", "tools": [
                {"type": "function", "name": "a"}, {"type": "custom", "name": "c"}, {"type": "web_search"}]}}));
        assert_eq!(names(&parsed.work.tools), ["a", "c"]);
        assert_eq!(parsed.work.tool_choice, ToolChoice::Required);
        let parsed = ok(json!({"messages": user(), "tools": tools, "tool_choice":
            {"type": "allowed_tools", "allowed_tools": {"mode": "auto",
                "tools": [{"type": "function", "function": {"name": "b"}}]}}}));
        assert_eq!(names(&parsed.work.tools), ["b"]);
        assert_eq!(parsed.work.tool_choice, ToolChoice::Auto);
        let error = err(json!({"messages": user(), "tools": tools, "tool_choice":
            {"type": "allowed_tools", "mode": "auto", "tools": [{"type": "function", "name": "zz"}]}}));
        assert_eq!(error.param.as_deref(), Some("tool_choice.tools[0].name"));
    }

    #[test]
    fn legacy_functions_and_custom_history_are_read() {
        let parsed = ok(json!({
            "messages": [
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": null,
                 "function_call": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"role": "function", "name": "weather", "content": "sunny"},
                {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "p1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}]},
                {"role": "tool", "tool_call_id": "p1", "content": "done"},
            ],
            "functions": [{"name": "weather", "parameters": {"type": "object"}}],
            "function_call": {"name": "weather"},
        }));
        assert!(parsed.kinds.legacy);
        assert_eq!(names(&parsed.work.tools), ["weather"]);
        assert_eq!(parsed.work.tool_choice, ToolChoice::Named("weather".into()));
        let messages = &parsed.work.session.messages;
        assert_eq!(messages[1].tool_calls[0].id, "call_fn_0");
        assert_eq!(
            messages[1].tool_calls[0].arguments,
            json!({"city": "Paris"})
        );
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_fn_0"));
        assert_eq!(
            messages[3].tool_calls[0].arguments,
            json!({"input": "*** Begin"})
        );
        let none =
            ok(json!({"messages": user(), "functions": [{"name": "f"}], "function_call": "none"}));
        assert_eq!(none.work.tool_choice, ToolChoice::None);
        for (body, param) in [
            (
                json!({"messages": user(), "functions": [{"name": "f"}], "tools": []}),
                "functions",
            ),
            (
                json!({"messages": user(), "function_call": "auto", "tool_choice": "auto"}),
                "function_call",
            ),
            (
                json!({"messages": user(), "functions": [{"name": "f"}], "function_call": {"name": "g"}}),
                "function_call",
            ),
            (
                json!({"messages": [{"role": "function", "name": "f", "content": "x"}]}),
                "messages[0].name",
            ),
        ] {
            assert_eq!(err(body.clone()).param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn custom_and_legacy_calls_answer_in_their_shape() {
        let call = ToolCall {
            id: "p1".into(),
            name: "apply_patch".into(),
            arguments: json!({"input": "*** Begin"}),
        };
        let mut a = answer();
        a.kinds.custom.insert("apply_patch".into());
        let choices = [(Assembler::new(), reply(vec![call.clone()]))];
        let whole = value(&a.whole(&choices, &Usage::default()));
        assert_eq!(
            whole["choices"][0]["message"]["tool_calls"],
            json!([{"id": "p1", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin"}}])
        );
        let (calls, _) = wire_calls(std::slice::from_ref(&call), true, &a.kinds);
        assert_eq!(
            value(&calls),
            json!([{"id": "p1", "type": "custom", "index": 0,
                    "custom": {"name": "apply_patch", "input": "*** Begin"}}])
        );
        let mut legacy = answer();
        legacy.kinds.legacy = true;
        let weather = reply(vec![weather_call()]);
        let choices = [(Assembler::new(), weather)];
        let whole = value(&legacy.whole(&choices, &Usage::default()));
        let choice = &whole["choices"][0];
        assert_eq!(choice["finish_reason"], "function_call");
        assert_eq!(choice["message"]["function_call"]["name"], "weather");
        assert!(choice["message"].get("tool_calls").is_none(), "{choice}");
    }
}

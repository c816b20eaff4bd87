//! `POST /v1/responses`: OpenAI's Responses API, which Codex and the OpenAI
//! Agents SDK speak, over the same pool as chat completions.
//!
//! The request carries its conversation in `input`, after the stored one of
//! its `previous_response_id` when it names one (answers are kept unless the
//! request says `store: false`, [`super::stored`]; an id not kept is a 404);
//! `conversation` and `item_reference` items need OpenAI's conversation
//! objects and are a 400 saying so. `input` is a string or a list of items: messages (`user`,
//! `assistant`, and `system`/`developer`, which join `instructions` as the
//! system prompt) whose content is a string or text parts (a user message's
//! also `input_image` parts: an `image_url` that is a `data:` URL, or an http(s)
//! URL with `--allow-image-urls`, read by [`super::images`]; a `file_id` is a
//! 400, files are not stored here), `function_call`,
//! `custom_tool_call`, `local_shell_call` items and their `*_output`s, and
//! `reasoning` items (skipped: the model reasons afresh). `tools` are
//! `function`, `custom` and `local_shell` tools (the flat shape); hosted ones
//! (web search, file search, ...) are dropped with a `Warning` header
//! ([`super::tool_types`]). `tool_choice`,
//! `max_output_tokens`, `temperature`, `top_p`, `text.format` (`json_schema`,
//! `json_object`) work as in chat completions; `include`,
//! `parallel_tool_calls`, `reasoning` and `metadata` are accepted and echoed.
//!
//! The answer is a `response` with `reasoning`, `message`, `function_call`,
//! `custom_tool_call` and `local_shell_call` output items; streamed, the documented events from `response.created` to
//! `response.completed` (`response.incomplete` when `max_output_tokens` cut it),
//! each with its `sequence_number`.

mod reply;

use std::sync::atomic::Ordering;

use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::fields::{json_body, unknown_fields, Fields};
use super::images::{Content, Images};
use super::openai;
use super::pool::Work;
use super::sampling_fields;
use super::stored::{self, Store};
use super::tool_types::{self, ToolKinds};
use super::Defaults;
use crate::backend::ResponseFormat;
use crate::core::{Image, Message, Session, ToolCall};
use crate::frontend::serve::http::{Request, Responder};
pub use reply::ResponsesWriter;

/// A checked `/v1/responses` request.
#[derive(Debug)]
pub struct ResponsesRequest {
    pub work: Work,
    pub stream: bool,
    pub model: String,
    /// The settings the `response` object echoes.
    pub echo: Map<String, Value>,
    pub ignored: Vec<String>,
    /// What the offered tools were, for the answer's items and warnings.
    pub kinds: ToolKinds,
    /// The input items read (a chain's earlier ones first), when the answer is
    /// to be stored.
    pub keep: Option<Vec<Value>>,
}

/// Fields accepted that change nothing here.
const IGNORED: [&str; 7] = [
    "include",
    "parallel_tool_calls",
    "reasoning",
    "metadata",
    "user",
    "truncation",
    "service_tier",
];

/// Every field this route reads.
const KNOWN: [&str; 19] = [
    "store",
    "return_progress",
    "timings_per_token",
    "grammar",
    "json_schema",
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "temperature",
    "top_p",
    "stream",
    "text",
    "previous_response_id",
    "conversation",
    "background",
    "top_logprobs",
];

/// Checks a `/v1/responses` body field by field; `previous_response_id` is
/// looked up in `store`.
pub fn parse(
    body: &[u8],
    defaults: &Defaults,
    store: &Store,
) -> Result<ResponsesRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let ignored = unknown_fields(&value, &KNOWN, &IGNORED);
    if f.get("conversation").is_some() {
        return Err(ApiError::invalid(
            "conversation",
            "'conversation' needs OpenAI's conversation objects, which this server does not keep: chain answers by 'previous_response_id', or send the whole conversation in 'input'",
        ));
    }
    let mut items = match f.str("previous_response_id")? {
        Some(id) => store
            .get(id)
            .ok_or_else(|| stored::previous_not_found(id))?
            .conversation
            .clone(),
        None => Vec::new(),
    };
    f.unsupported("background", &[Value::Bool(false)])?;
    f.unsupported("top_logprobs", &[Value::from(0)])?;
    let model = f.str("model")?.unwrap_or(&defaults.model).to_string();
    let instructions = f.str("instructions")?;
    let earlier = items.len();
    items.extend(input_items(&f)?);
    let kept = f.bool("store")?.unwrap_or(true) && store.enabled();
    let (system, messages) = input(&items, earlier, &mut Images::new(&defaults.image_urls))?;
    f.unsupported("functions", &[])?;
    f.unsupported("function_call", &[])?;
    let (mut tools, mut kinds) = openai::tools(&f)?;
    let tool_choice = openai::tool_choice(&f, &mut tools, &mut kinds)?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let mut sampling = sampling_fields::sampling(&f, defaults)?;
    sampling.telemetry = sampling_fields::telemetry(&f, stream)?;
    if let Some(n) = f.integer("max_output_tokens", 1, defaults.max_tokens_limit())? {
        sampling.max_tokens = u32::try_from(n).ok();
    }
    if let Some(format) = text_format(&f)? {
        sampling.response_format = Some(format);
    }
    let system = [instructions.map(str::to_string), system]
        .into_iter()
        .flatten()
        .reduce(|a, b| format!("{a}\n\n{b}"));
    let mut session = Session::new(system.unwrap_or_else(|| defaults.system_prompt.clone()));
    session.messages = messages;
    Ok(ResponsesRequest {
        work: Work {
            session,
            tools,
            tool_choice,
            sampling,
            use_tools: defaults.use_tools,
            raw_prompt: None,
        },
        stream,
        model,
        echo: echo(&f, kept),
        ignored,
        kinds,
        keep: kept.then_some(items),
    })
}

/// The settings a `response` object shows, as the request gave them.
fn echo(f: &Fields<'_>, stored: bool) -> Map<String, Value> {
    let given = |key: &str, default: Value| f.get(key).cloned().unwrap_or(default);
    let mut echo = Map::new();
    echo.insert("instructions".into(), given("instructions", Value::Null));
    echo.insert(
        "max_output_tokens".into(),
        given("max_output_tokens", Value::Null),
    );
    echo.insert("temperature".into(), given("temperature", Value::Null));
    echo.insert("top_p".into(), given("top_p", Value::Null));
    echo.insert("tools".into(), given("tools", json!([])));
    echo.insert("tool_choice".into(), given("tool_choice", json!("auto")));
    echo.insert(
        "parallel_tool_calls".into(),
        given("parallel_tool_calls", json!(true)),
    );
    echo.insert(
        "text".into(),
        given("text", json!({"format": {"type": "text"}})),
    );
    echo.insert(
        "reasoning".into(),
        given("reasoning", json!({"effort": null, "summary": null})),
    );
    echo.insert("metadata".into(), given("metadata", json!({})));
    echo.insert("user".into(), given("user", Value::Null));
    echo.insert("store".into(), json!(stored));
    echo.insert(
        "previous_response_id".into(),
        given("previous_response_id", Value::Null),
    );
    echo.insert("truncation".into(), json!("disabled"));
    echo
}

/// `text.format`: `text`, `json_object`, or `json_schema` with `name`,
/// `schema` and `strict` beside the type (the Responses API's flat shape).
fn text_format(f: &Fields<'_>) -> Result<Option<ResponseFormat>, ApiError> {
    let Some(text) = f.object("text")? else {
        return Ok(None);
    };
    match text.object("format")? {
        Some(format) => sampling_fields::format_of(&format, &format),
        None => Ok(None),
    }
}

/// `input` as items: a string is one user message.
fn input_items(f: &Fields<'_>) -> Result<Vec<Value>, ApiError> {
    match f.get("input") {
        Some(Value::String(text)) => Ok(vec![json!({"role": "user", "content": text})]),
        Some(Value::Array(items)) if !items.is_empty() => Ok(items.clone()),
        _ => Err(f.missing("input", "a string or a non-empty array of items")),
    }
}

/// The system text the input items' `system`/`developer` messages add, and the
/// conversation.
/// Items before `earlier` came from the stored chain (and were checked then); the
/// others are named by their place in this request's `input`. Images are read by
/// `images`. Long: one arm per item type.
fn input(
    items: &[Value],
    earlier: usize,
    images: &mut Images,
) -> Result<(Option<String>, Vec<Message>), ApiError> {
    let mut system: Option<String> = None;
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let it = Fields::of(item, &format!("input[{}]", i.saturating_sub(earlier)))?;
        match it.str("type")?.unwrap_or("message") {
            "message" => message(&it, &mut system, images, &mut out)?,
            "function_call" => function_call(&it, &mut out)?,
            "custom_tool_call" => {
                let input = it.required_str("input")?;
                let call =
                    tool_types::custom_call(it.required_str("call_id")?, it.required_str("name")?, input);
                push_call(call, &mut out);
            }
            "local_shell_call" => {
                let id = it.str("call_id")?.map_or_else(|| it.required_str("id"), Ok)?;
                let action = it.object("action")?.map(|_| &item["action"]);
                push_call(tool_types::local_shell_call(id, action), &mut out);
            }
            "function_call_output" | "custom_tool_call_output" | "local_shell_call_output" => {
                let key = if it.has("call_id") || !it.has("id") { "call_id" } else { "id" };
                let id = it.required_str(key)?;
                let call = super::earlier_call(&out, id).ok_or_else(|| {
                    ApiError::invalid(
                        &it.name(key),
                        format!("{key} '{id}' answers no earlier call item"),
                    )
                })?;
                let output = content_of(&it, "output", images)?;
                out.push(output.into_message(|text| Message::tool_result(call, text)));
            }
            "reasoning" => {}
            other => {
                return Err(ApiError::invalid(
                    &it.name("type"),
                    format!("input items of type '{other}' are not supported here (no item references, no built-in tools)"),
                ))
            }
        }
    }
    Ok((system, out))
}

/// A message item: a user message's images are read by `images`; the others
/// are text.
fn message(
    it: &Fields<'_>,
    system: &mut Option<String>,
    images: &mut Images,
    out: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let role = it
        .choice("role", &["user", "assistant", "system", "developer"])?
        .ok_or_else(|| it.missing("role", "user, assistant, system or developer"))?;
    match role {
        "user" => out.push(content_of(it, "content", images)?.into_message(Message::user)),
        "assistant" => {
            let text = text_of(it, "content", "an assistant message")?;
            out.push(Message::assistant(text));
        }
        _ => {
            let text = text_of(it, "content", "a system message")?;
            *system = Some(match system.take() {
                Some(before) => format!("{before}\n\n{text}"),
                None => text,
            })
        }
    }
    Ok(())
}

/// A `function_call` item: a call of the assistant turn before it (or of a
/// turn of its own).
fn function_call(it: &Fields<'_>, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let arguments = it.required_str("arguments")?;
    let arguments: Value = serde_json::from_str(arguments).map_err(|e| {
        ApiError::invalid(
            &it.name("arguments"),
            format!("'arguments' must be a JSON object as text: {e}"),
        )
    })?;
    let call = ToolCall {
        id: it.required_str("call_id")?.to_string(),
        name: it.required_str("name")?.to_string(),
        arguments,
    };
    push_call(call, out);
    Ok(())
}

/// A call item of history joins the assistant turn before it (or starts one).
fn push_call(call: ToolCall, out: &mut Vec<Message>) {
    match out.last_mut() {
        Some(last) if last.role == crate::core::Role::Assistant => last.tool_calls.push(call),
        _ => {
            let mut turn = Message::assistant(String::new());
            turn.tool_calls.push(call);
            out.push(turn);
        }
    }
}

/// [`content_of`] where `what` (e.g. "a system message") takes no image.
fn text_of(it: &Fields<'_>, key: &str, what: &'static str) -> Result<String, ApiError> {
    content_of(it, key, &mut Images::text_only(what)).map(|content| content.text)
}

/// A string, or parts: text (`input_text`, `output_text`, `text`, `refusal`)
/// joined, and `input_image` parts read by `images`; a file is a 400.
fn content_of(it: &Fields<'_>, key: &str, images: &mut Images) -> Result<Content, ApiError> {
    let parts = match it.get(key) {
        Some(Value::String(text)) => return Ok(Content::text(text.clone())),
        Some(Value::Array(parts)) => parts,
        _ => return Err(it.missing(key, "a string or an array of content parts")),
    };
    let mut content = Content::default();
    for (k, part) in parts.iter().enumerate() {
        let p = Fields::of(part, &format!("{}[{k}]", it.name(key)))?;
        match p.required_str("type")? {
            "input_text" | "output_text" | "text" => {
                content.push_text(p.required_str("text")?, "");
            }
            "refusal" => content.push_text(p.required_str("refusal")?, ""),
            "input_image" => {
                images.taken(&p.name("type"))?;
                content.push_image(input_image(&p, images)?);
            }
            other => {
                return Err(ApiError::invalid(
                    &p.name("type"),
                    format!(
                    "content parts of type '{other}' are not supported (text and input_image only)"
                ),
                ))
            }
        }
    }
    Ok(content)
}

/// An `input_image` part's image: its `image_url`, a `data:` URL (or an
/// http(s) URL with `--allow-image-urls`). A `file_id` names a file this server
/// does not keep.
fn input_image(p: &Fields<'_>, images: &mut Images) -> Result<Image, ApiError> {
    match p.str("image_url")? {
        Some(url) => images.reference(url, &p.name("image_url")),
        None if p.has("file_id") => Err(ApiError::invalid(
            &p.name("file_id"),
            "files are not stored on this server: send the image as 'image_url' (a data: URL)",
        )),
        None => Err(p.missing("image_url", "a data: URL or an http(s) URL")),
    }
}

// ---------------------------------------------------------------------------
// Answers.

impl super::ApiServer {
    /// `POST /v1/responses`.
    pub(super) fn responses(&self, request: &Request, responder: Responder) {
        self.metrics.chat_requests.fetch_add(1, Ordering::Relaxed);
        let Some((loaded, mut responder)) = self.loaded(responder) else {
            return;
        };
        let parsed = match parse(&request.body, &loaded.defaults, &self.responses) {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse(responder, &error),
        };
        super::log_ignored("/v1/responses", &parsed.ignored);
        super::warn_dropped("/v1/responses", &parsed.kinds.dropped, &mut responder);
        let id = self.new_id("resp_");
        let answer = ResponsesWriter::new(id, super::now_secs(), parsed.model, parsed.echo)
            .with_kinds(parsed.kinds);
        let answer = answer.kept_in(&self.responses, parsed.keep);
        self.serve(loaded, answer, parsed.work, 1, parsed.stream, responder);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::images::tests as pictures;
    use super::super::text::Assembler;
    use super::super::wire::responses as wire;
    use super::super::Usage;
    use super::*;
    use crate::backend::Reply;
    use crate::core::FinishReason;
    use crate::core::Role;

    fn parse_json(body: Value) -> Result<ResponsesRequest, ApiError> {
        parse_in(body, &Store::new(10))
    }

    fn parse_in(body: Value, store: &Store) -> Result<ResponsesRequest, ApiError> {
        let defaults = Defaults {
            model: "served".into(),
            system_prompt: "server prompt".into(),
            ..Defaults::default()
        };
        parse(body.to_string().as_bytes(), &defaults, store)
    }

    #[test]
    fn input_image_parts_become_images_of_user_messages_and_outputs() {
        let url = pictures::png_data_url();
        let request = parse_json(json!({"input": [
            {"role": "user", "content": [
                {"type": "input_text", "text": "Compare "},
                {"type": "input_image", "image_url": url, "detail": "auto"},
                {"type": "input_text", "text": " and "},
                {"type": "input_image", "image_url": url}
            ]},
            {"type": "function_call", "call_id": "c1", "name": "shot", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": [
                {"type": "input_image", "image_url": url}
            ]}
        ]}))
        .unwrap();
        let messages = &request.work.session.messages;
        assert_eq!(messages[0].content, "Compare  and ");
        let at: Vec<usize> = messages[0].images.iter().map(|p| p.at).collect();
        assert_eq!(at, [8, 13]);
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[2].images.len(), 1);
    }

    #[test]
    fn input_images_that_cannot_be_read_are_400s_naming_the_field() {
        let user = |part: Value| json!({"input": [{"role": "user", "content": [part]}]});
        for (body, param, words) in [
            (
                user(json!({"type": "input_image", "file_id": "file-1"})),
                "input[0].content[0].file_id",
                "files are not stored",
            ),
            (
                user(json!({"type": "input_image", "image_url": "http://example.com/a.png"})),
                "input[0].content[0].image_url",
                "--allow-image-urls",
            ),
            (
                user(json!({"type": "input_image", "image_url": "data:image/png;base64,###"})),
                "input[0].content[0].image_url",
                "not valid base64",
            ),
            (
                user(json!({"type": "input_file", "file_id": "file-1"})),
                "input[0].content[0].type",
                "not supported",
            ),
            (
                json!({"input": [{"role": "developer", "content": [
                    {"type": "input_image", "image_url": pictures::png_data_url()}]}]}),
                "input[0].content[0].type",
                "a system message carries text only",
            ),
        ] {
            let error = parse_json(body.clone()).expect_err("a 400");
            assert_eq!(error.status, 400, "{body}");
            assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
            assert!(error.message.contains(words), "{body}: {}", error.message);
        }
    }

    #[test]
    fn a_previous_response_id_reads_its_stored_conversation_first() {
        let store = Arc::new(Store::new(10));
        let first = parse_in(
            json!({"input": "Weather?", "instructions": "Be brief."}),
            &store,
        )
        .unwrap();
        assert_eq!(first.echo["store"], json!(true));
        let call = ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: json!({"city": "Paris"}),
        };
        let reply = Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: vec![call],
            finish: FinishReason::ToolCalls,
            usage: None,
            artefacts: Vec::new(),
            stop_sequence: None,
        };
        let answer = ResponsesWriter::new("resp_1".into(), 7, "m".into(), first.echo)
            .kept_in(&store, first.keep);
        let text = Assembler::new();
        answer.keep(&answer.whole(&text, &reply, &Usage::default()));
        let stored = store.get("resp_1").expect("stored");
        assert_eq!(stored.response["id"], "resp_1");
        assert_eq!(stored.conversation.len(), 2, "{:?}", stored.conversation);
        // The next turn answers the stored call; instructions are not carried over.
        let second = parse_in(
            json!({"previous_response_id": "resp_1", "store": false,
                   "input": [{"type": "function_call_output", "call_id": "c1", "output": "sunny"}]}),
            &store,
        )
        .unwrap();
        let roles: Vec<Role> = second
            .work
            .session
            .messages
            .iter()
            .map(|m| m.role)
            .collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool]);
        assert_eq!(second.work.session.messages[0].content, "Weather?");
        assert_eq!(second.work.session.system_prompt, "server prompt");
        assert_eq!(second.echo["previous_response_id"], "resp_1");
        assert!(second.keep.is_none() && second.echo["store"] == json!(false));
        // An id not stored is OpenAI's 404.
        let error = parse_in(
            json!({"previous_response_id": "resp_9", "input": "hi"}),
            &store,
        )
        .expect_err("a 404");
        assert_eq!(error.status, 404);
        assert_eq!(error.code.as_deref(), Some("previous_response_not_found"));
        assert_eq!(error.param.as_deref(), Some("previous_response_id"));
        assert_eq!(
            error.message,
            "Previous response with id 'resp_9' not found."
        );
    }

    #[test]
    fn an_agents_conversation_becomes_the_session() {
        let request = parse_json(json!({
            "model": "m", "instructions": "Be brief.", "store": false,
            "include": ["reasoning.encrypted_content"],
            "input": [
                {"role": "developer", "content": "Use tools."},
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
                {"type": "reasoning", "id": "rs_1", "summary": []},
                {"type": "function_call", "call_id": "c1", "name": "weather",
                 "arguments": "{\"city\": \"Paris\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
            ],
            "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}],
            "tool_choice": {"type": "function", "name": "weather"},
            "max_output_tokens": 50, "temperature": 0.2,
            "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}}},
        }))
        .unwrap();
        let session = &request.work.session;
        assert_eq!(session.system_prompt, "Be brief.\n\nUse tools.");
        let roles: Vec<Role> = session.messages.iter().map(|m| m.role).collect();
        assert_eq!(roles, [Role::User, Role::Assistant, Role::Tool]);
        assert_eq!(
            session.messages[1].tool_calls[0].arguments,
            json!({"city": "Paris"})
        );
        assert_eq!(request.work.sampling.max_tokens, Some(50));
        assert!(matches!(
            request.work.sampling.response_format,
            Some(ResponseFormat::JsonSchema { .. })
        ));
        assert_eq!(
            request.work.tool_choice,
            crate::backend::ToolChoice::Named("weather".into())
        );
        assert_eq!(request.echo["instructions"], json!("Be brief."));
        assert_eq!(request.echo["store"], json!(false));
        assert!(request.ignored.is_empty(), "{:?}", request.ignored);
    }

    #[test]
    fn what_needs_stored_state_or_other_tools_is_a_400_naming_it() {
        for (body, param) in [
            (
                json!({"input": "hi", "conversation": "conv_1"}),
                "conversation",
            ),
            (
                json!({"input": "hi", "previous_response_id": 7}),
                "previous_response_id",
            ),
            (json!({"input": []}), "input"),
            (json!({}), "input"),
            (
                json!({"input": [{"type": "item_reference", "id": "x"}]}),
                "input[0].type",
            ),
            (
                json!({"input": [{"role": "user", "content": [{"type": "input_image"}]}]}),
                "input[0].content[0].image_url",
            ),
            (
                json!({"input": [{"type": "function_call_output", "call_id": "c9", "output": "x"}]}),
                "input[0].call_id",
            ),
            (
                json!({"input": "hi", "tools": [{"type": "teleport"}]}),
                "tools[0].type",
            ),
            (
                json!({"input": "hi", "max_output_tokens": 0}),
                "max_output_tokens",
            ),
        ] {
            let error = parse_json(body.clone()).expect_err("a 400");
            assert_eq!(error.status, 400, "{body}");
            assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
        }
    }

    #[test]
    fn a_whole_response_has_its_items_in_order() {
        let answer = ResponsesWriter::new("resp_x".into(), 7, "m".into(), Map::new());
        let mut text = Assembler::new();
        text.reasoning = "hmm".into();
        let call = ToolCall {
            id: "c1".into(),
            name: "weather".into(),
            arguments: json!({"city": "Paris"}),
        };
        let reply = Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: vec![call],
            finish: FinishReason::ToolCalls,
            usage: None,
            artefacts: Vec::new(),
            stop_sequence: None,
        };
        let usage = Usage {
            prompt: 10,
            completion: 4,
            cached: Some(6),
            stats: None,
        };
        let body = serde_json::to_value(answer.whole(&text, &reply, &usage)).unwrap();
        assert_eq!(body["status"], json!("completed"));
        assert_eq!(body["output"][0]["type"], json!("reasoning"));
        assert_eq!(body["output"][0]["content"][0]["text"], json!("hmm"));
        assert_eq!(body["output"][1]["type"], json!("function_call"));
        assert_eq!(body["output"][1]["call_id"], json!("c1"));
        assert_eq!(
            body["output"][1]["arguments"],
            json!("{\"city\":\"Paris\"}")
        );
        assert_eq!(
            body["usage"]["input_tokens_details"]["cached_tokens"],
            json!(6)
        );
        assert_eq!(body["usage"]["total_tokens"], json!(14));
    }

    #[test]
    fn codex_tools_and_their_history_are_read() {
        let request = parse_json(json!({
            "input": [
                {"type": "message", "role": "user", "content": "fix it"},
                {"type": "custom_tool_call", "call_id": "p1", "name": "apply_patch", "input": "*** Begin"},
                {"type": "custom_tool_call_output", "call_id": "p1", "output": "applied"},
                {"type": "local_shell_call", "id": "ls1", "call_id": "s1", "status": "completed",
                 "action": {"type": "exec", "command": ["ls", "-a"], "working_directory": "/w",
                            "timeout_ms": 1000, "env": {}, "user": null}},
                {"type": "local_shell_call_output", "call_id": "s1", "output": "a b"},
            ],
            "tools": [
                {"type": "function", "name": "weather", "parameters": {"type": "object"}},
                {"type": "custom", "name": "apply_patch", "description": "Patch",
                 "format": {"type": "grammar", "syntax": "lark", "definition": "start: x"}},
                {"type": "local_shell"},
                {"type": "web_search"},
            ],
            "tool_choice": {"type": "custom", "name": "apply_patch"},
        }))
        .unwrap();
        let names: Vec<&str> = request.work.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["weather", "apply_patch", "local_shell"]);
        assert_eq!(request.kinds.dropped, ["web_search"]);
        assert_eq!(
            request.work.tool_choice,
            crate::backend::ToolChoice::Named("apply_patch".into())
        );
        let messages = &request.work.session.messages;
        assert_eq!(messages.len(), 5);
        assert_eq!(
            messages[1].tool_calls[0].arguments,
            json!({"input": "*** Begin"})
        );
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(
            messages[3].tool_calls[0].arguments,
            json!({"command": ["ls", "-a"], "workdir": "/w", "timeout_ms": 1000, "env": {}})
        );
        assert_eq!(messages[4].tool_call_id.as_deref(), Some("s1"));
        let allowed = parse_json(json!({"input": "hi",
            "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "local_shell"}],
            "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "local_shell"}]}}))
        .unwrap();
        assert_eq!(allowed.work.tools.len(), 1);
        let legacy = parse_json(json!({"input": "hi", "functions": [{"name": "f"}]}));
        assert_eq!(legacy.unwrap_err().param.as_deref(), Some("functions"));
    }

    #[test]
    fn custom_and_shell_calls_are_their_own_items() {
        let mut kinds = ToolKinds::default();
        kinds.custom.insert("apply_patch".into());
        kinds.local_shell = true;
        let answer =
            ResponsesWriter::new("resp_x".into(), 7, "m".into(), Map::new()).with_kinds(kinds);
        let calls = vec![
            ToolCall {
                id: "p1".into(),
                name: "apply_patch".into(),
                arguments: json!({"input": "*** Begin"}),
            },
            ToolCall {
                id: "s1".into(),
                name: "local_shell".into(),
                arguments: json!({"command": ["ls"], "workdir": "/w"}),
            },
        ];
        let reply = Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: calls,
            finish: FinishReason::ToolCalls,
            usage: None,
            artefacts: Vec::new(),
            stop_sequence: None,
        };
        let body = serde_json::to_value(answer.whole(&Assembler::new(), &reply, &Usage::default()))
            .unwrap();
        assert_eq!(
            body["output"][0],
            json!({"type": "custom_tool_call", "id": "ctc_x0", "call_id": "p1",
                   "name": "apply_patch", "input": "*** Begin", "status": "completed"})
        );
        assert_eq!(
            body["output"][1],
            json!({"type": "local_shell_call", "id": "lsc_x1", "call_id": "s1", "status": "completed",
                   "action": {"type": "exec", "command": ["ls"], "working_directory": "/w",
                              "timeout_ms": null, "env": {}, "user": null}})
        );
        let event = wire::Event::CustomInputDone {
            item_id: "ctc_x0",
            output_index: 0,
            input: "x",
        };
        assert_eq!(event.name(), "response.custom_tool_call_input.done");
    }
}

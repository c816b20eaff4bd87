//! `POST /v1/messages`: Anthropic's Messages API over the same pool, so
//! Anthropic clients work too.
//!
//! Request: `system` (string or text blocks), `messages` of `user`/`assistant`
//! turns whose content is a string or `text`, `tool_use` and `tool_result`
//! blocks (and an assistant turn's `thinking` blocks, its reasoning, which the
//! template reads as `reasoning_content`; a user turn's `image` blocks, base64
//! or url sources, read by [`super::images`], also inside a `tool_result`), `tools[{name, description, input_schema}]` (and `bash_*`,
//! `text_editor_*` with their documented schemas; server tools such as
//! `web_search_*` are dropped with a `Warning` header), `tool_choice`,
//! `max_tokens` (required), `stop_sequences`, `temperature`, `top_p`,
//! `top_k`, `stream`. Answer: a `message`, or the named SSE events
//! `message_start`, `content_block_start|delta|stop`, `message_delta`,
//! `message_stop`.

use std::io;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value};

use super::error::ApiError;
use super::fields::{json_body, stop_list, valid_tool_name, Fields};
use super::images::{Content, Images};
use super::pool::Work;
use super::text::{Assembler, Piece};
use super::tool_types::{self, ToolKinds};
use super::wire::anthropic as wire;
use super::wire::openai::Timings;
use super::wire::{encode, Null};
use super::writer::ReplyWriter;
use super::{warn_dropped, ApiServer, Defaults, Usage};
use crate::backend::{Reply, ToolChoice};
use crate::core::{FinishReason, Message, Session, TokenLogprobs, ToolCall};
use crate::core::{Image, ToolSpec};
use crate::frontend::serve::http::{Request, Responder, SseStream};

#[derive(Debug)]
pub struct MessagesRequest {
    pub work: Work,
    pub stream: bool,
    pub model: String,
    /// Server tools dropped, for the warning.
    pub dropped: Vec<String>,
}

/// `/v1/messages/count_tokens`: a messages request without `max_tokens` (Anthropic's
/// shape: `model`, `system`, `messages`, `tools`, `tool_choice`, `thinking`).
pub fn parse_count(body: &[u8], defaults: &Defaults) -> Result<Work, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    f.str("model")?;
    let system = system(&f)?;
    let messages = messages(&f, &mut Images::new(&defaults.image_urls))?;
    let (tools, _) = tools(&f)?;
    tool_choice(&f, &tools)?;
    let mut session = Session::new(system.unwrap_or_else(|| defaults.system_prompt.clone()));
    session.messages = messages;
    Ok(Work {
        session,
        tools,
        tool_choice: ToolChoice::Auto,
        sampling: defaults.sampling.clone(),
        use_tools: false,
        raw_prompt: None,
    })
}

pub fn parse(body: &[u8], defaults: &Defaults) -> Result<MessagesRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let model = f.str("model")?.unwrap_or(&defaults.model).to_string();
    let max_tokens = f
        .integer("max_tokens", 1, defaults.max_tokens_limit())?
        .ok_or_else(|| f.missing("max_tokens", "a positive integer"))?;
    let system = system(&f)?;
    let messages = messages(&f, &mut Images::new(&defaults.image_urls))?;
    let (tools, dropped) = tools(&f)?;
    let tool_choice = tool_choice(&f, &tools)?;
    let mut sampling = defaults.sampling.clone();
    sampling.max_tokens = u32::try_from(max_tokens).ok();
    if let Some(t) = f.number("temperature", 0.0, 1.0)? {
        sampling.temperature = Some(t);
    }
    if let Some(p) = f.number("top_p", 0.0, 1.0)? {
        sampling.top_p = Some(p);
    }
    if let Some(k) = f.integer("top_k", 0, 1_000_000)? {
        sampling.top_k = u32::try_from(k).ok();
    }
    if f.has("stop_sequences") {
        sampling.stop = stop_list(&f, "stop_sequences", 16)?;
    }
    f.object("metadata")?;
    let mut session = Session::new(system.unwrap_or_else(|| defaults.system_prompt.clone()));
    session.messages = messages;
    Ok(MessagesRequest {
        work: Work {
            session,
            tools,
            tool_choice,
            sampling,
            use_tools: defaults.use_tools,
            raw_prompt: None,
        },
        stream: f.bool("stream")?.unwrap_or(false),
        model,
        dropped,
    })
}

fn system(f: &Fields<'_>) -> Result<Option<String>, ApiError> {
    match f.get("system") {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            for (i, block) in blocks.iter().enumerate() {
                let b = Fields::of(block, &format!("system[{i}]"))?;
                b.choice("type", &["text"])?;
                text.push_str(b.required_str("text")?);
            }
            Ok(Some(text))
        }
        Some(_) => Err(ApiError::invalid(
            "system",
            "'system' must be a string or an array of text blocks",
        )),
    }
}

/// The turns, their images read by `images`.
fn messages(f: &Fields<'_>, images: &mut Images) -> Result<Vec<Message>, ApiError> {
    let items = f
        .array("messages")?
        .ok_or_else(|| f.missing("messages", "a non-empty array"))?;
    if items.is_empty() {
        return Err(ApiError::invalid(
            "messages",
            "'messages' must be a non-empty array",
        ));
    }
    let mut out = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let m = Fields::of(item, &format!("messages[{i}]"))?;
        let role = m
            .choice("role", &["user", "assistant"])?
            .ok_or_else(|| m.missing("role", "user or assistant"))?;
        match m.get("content") {
            Some(Value::String(text)) if role == "user" => out.push(Message::user(text.clone())),
            Some(Value::String(text)) => out.push(Message::assistant(text.clone())),
            Some(Value::Array(blocks)) => blocks_to_messages(&m, role, blocks, images, &mut out)?,
            _ => return Err(m.missing("content", "a string or an array of blocks")),
        }
    }
    Ok(out)
}

/// One turn's blocks: an assistant turn is one message (text, reasoning from
/// its `thinking` blocks, and tool calls); a user turn gives one tool message per
/// `tool_result`, then its text and images. Long: one arm per block type.
fn blocks_to_messages(
    m: &Fields<'_>,
    role: &str,
    blocks: &[Value],
    images: &mut Images,
    out: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let mut text = Content::default();
    let mut thinking = String::new();
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let b = Fields::of(block, &format!("{}[{j}]", m.name("content")))?;
        match (b.required_str("type")?, role) {
            ("text", _) => text.push_text(b.required_str("text")?, ""),
            ("image", "user") => text.push_image(image_block(&b, images)?),
            // The template gets it as `reasoning_content`, as llama.cpp passes it
            // (Qwen3's and DeepSeek's render it or drop it themselves); a redacted
            // block's text is encrypted: nothing to read.
            ("thinking", "assistant") => thinking.push_str(b.required_str("thinking")?),
            ("redacted_thinking", "assistant") => {}
            ("tool_use", "assistant") => {
                let input = match b.get("input") {
                    Some(input @ Value::Object(_)) => input.clone(),
                    None => Value::Object(Map::new()),
                    Some(_) => return Err(b.missing("input", "an object")),
                };
                calls.push(ToolCall {
                    id: b.required_str("id")?.to_string(),
                    name: b.required_str("name")?.to_string(),
                    arguments: input,
                });
            }
            ("tool_result", "user") => {
                let id = b.required_str("tool_use_id")?;
                let error = b.bool("is_error")?.unwrap_or(false);
                let call = super::earlier_call(out, id).ok_or_else(|| {
                    ApiError::invalid(
                        &b.name("tool_use_id"),
                        format!("tool_use_id '{id}' answers no earlier tool_use block"),
                    )
                })?;
                let mut content = result_content(&b, images)?;
                if error {
                    content.prepend("Error: ");
                }
                results.push(content.into_message(|text| Message::tool_result(call, text)));
            }
            (other, _) => {
                return Err(ApiError::invalid(
                    &b.name("type"),
                    format!("blocks of type '{other}' are not supported in a {role} turn"),
                ))
            }
        }
    }
    if role == "assistant" {
        let mut message = Message::assistant(text.text);
        message.tool_calls = calls;
        message.thinking = (!thinking.is_empty()).then_some(thinking);
        out.push(message);
    } else {
        out.extend(results);
        if !text.text.is_empty() || !text.images.is_empty() {
            out.push(text.into_message(Message::user));
        }
    }
    Ok(())
}

/// A `tool_result`'s content: a string, or `text` and `image` blocks.
fn result_content(b: &Fields<'_>, images: &mut Images) -> Result<Content, ApiError> {
    match b.get("content") {
        None => Ok(Content::default()),
        Some(Value::String(s)) => Ok(Content::text(s.clone())),
        Some(Value::Array(parts)) => {
            let mut content = Content::default();
            for (k, part) in parts.iter().enumerate() {
                let p = Fields::of(part, &format!("{}[{k}]", b.name("content")))?;
                match p.choice("type", &["text", "image"])? {
                    Some("image") => content.push_image(image_block(&p, images)?),
                    _ => content.push_text(p.required_str("text")?, ""),
                }
            }
            Ok(content)
        }
        Some(_) => Err(b.missing("content", "a string or text and image blocks")),
    }
}

/// An `image` block's image: its `source` is `base64` data of a declared
/// `media_type`, or a `url` (fetched only with `--allow-image-urls`).
fn image_block(b: &Fields<'_>, images: &mut Images) -> Result<Image, ApiError> {
    let source = b
        .object("source")?
        .ok_or_else(|| b.missing("source", "an object"))?;
    let field = b.name("source");
    match source.required_str("type")? {
        "base64" => {
            let mime = source.required_str("media_type")?;
            images.base64(source.required_str("data")?, Some(mime), &field)
        }
        "url" => images.reference(source.required_str("url")?, &field),
        "file" => Err(ApiError::invalid(
            &source.name("type"),
            "files are not stored on this server: send the image as a base64 or url source",
        )),
        other => Err(ApiError::invalid(
            &source.name("type"),
            format!("image sources of type '{other}' are not supported: send base64 or url"),
        )),
    }
}

/// `tools`: custom tools (`{name, description, input_schema}`, `type`
/// absent or `custom`), the client-run `bash_*` and `text_editor_*` with their
/// documented schemas, and server tools (web search, code execution, ...)
/// dropped, their types returned for the warning.
fn tools(f: &Fields<'_>) -> Result<(Vec<ToolSpec>, Vec<String>), ApiError> {
    let mut specs: Vec<ToolSpec> = Vec::new();
    let mut kinds = ToolKinds::default();
    for (i, item) in f.array("tools")?.into_iter().flatten().enumerate() {
        let t = Fields::of(item, &format!("tools[{i}]"))?;
        let kind = t.str("type")?.unwrap_or("custom");
        let name = t.required_str("name")?;
        if !valid_tool_name(name) || specs.iter().any(|s| s.name == name) {
            return Err(ApiError::invalid(
                &t.name("name"),
                format!("tool name '{name}' is invalid or given twice"),
            ));
        }
        if kind != "custom" {
            match tool_types::anthropic_client_tool(kind, name) {
                Some(spec) => specs.push(spec),
                None => kinds.drop_hosted(kind),
            }
            continue;
        }
        let parameters = match t.get("input_schema") {
            Some(schema @ Value::Object(_)) => schema.clone(),
            _ => return Err(t.missing("input_schema", "a JSON schema object")),
        };
        specs.push(ToolSpec {
            name: name.to_string(),
            description: t.str("description")?.unwrap_or("").to_string(),
            parameters,
        });
    }
    Ok((specs, kinds.dropped))
}

fn tool_choice(f: &Fields<'_>, tools: &[ToolSpec]) -> Result<ToolChoice, ApiError> {
    let Some(choice) = f.object("tool_choice")? else {
        return Ok(ToolChoice::Auto);
    };
    let kind = choice
        .choice("type", &["auto", "any", "tool", "none"])?
        .ok_or_else(|| choice.missing("type", "auto, any, tool or none"))?;
    choice.bool("disable_parallel_tool_use")?;
    match kind {
        "auto" => Ok(ToolChoice::Auto),
        "none" => Ok(ToolChoice::None),
        "any" if !tools.is_empty() => Ok(ToolChoice::Required),
        "tool" => {
            let name = choice.required_str("name")?;
            if tools.iter().any(|t| t.name == name) {
                Ok(ToolChoice::Named(name.to_string()))
            } else {
                Err(ApiError::invalid(
                    "tool_choice.name",
                    format!("tool_choice names '{name}', which is not in 'tools'"),
                ))
            }
        }
        _ => Err(ApiError::invalid(
            "tool_choice",
            "tool_choice 'any' needs tools",
        )),
    }
}

// ---------------------------------------------------------------------------
// Answers.

pub struct MessagesWriter {
    pub id: String,
    pub model: String,
    /// Index of the open content block and its type.
    open: Option<(usize, &'static str)>,
    next_index: usize,
}

fn stop_reason(reply: &Reply) -> &'static str {
    if !reply.tool_calls.is_empty() && reply.finish != FinishReason::Length {
        return "tool_use";
    }
    match (reply.finish, &reply.stop_sequence) {
        (FinishReason::Length, _) => "max_tokens",
        (_, Some(_)) => "stop_sequence",
        _ => "end_turn",
    }
}

impl MessagesWriter {
    pub fn new(id: String, model: String) -> MessagesWriter {
        MessagesWriter {
            id,
            model,
            open: None,
            next_index: 0,
        }
    }

    fn send(sse: &mut SseStream, event: &wire::Event<'_>) -> io::Result<()> {
        sse.send_event(event.name(), &encode(event))
    }

    /// `message_start`: the message, empty; the input as far as known.
    fn opening(&self, prefilled: Option<(u64, u64)>) -> wire::Event<'_> {
        let (prompt, cached) = prefilled.unwrap_or((0, 0));
        let message = wire::Opening {
            id: &self.id,
            kind: "message",
            role: "assistant",
            content: [],
            model: &self.model,
            stop_reason: Null,
            stop_sequence: Null,
            usage: wire::Usage {
                input_tokens: Some(prompt.saturating_sub(cached)),
                output_tokens: 0,
                cache_read_input_tokens: prefilled.map(|_| cached),
            },
        };
        wire::Event::MessageStart { message }
    }

    /// Opens a block of `kind` unless one is open already.
    fn block(&mut self, sse: &mut SseStream, kind: &'static str) -> io::Result<usize> {
        if let Some((index, open)) = self.open {
            if open == kind {
                return Ok(index);
            }
            self.close(sse)?;
        }
        let index = self.next_index;
        self.next_index += 1;
        let content_block = match kind {
            "thinking" => wire::Block::Thinking {
                thinking: "",
                signature: None,
            },
            _ => wire::Block::Text { text: "" },
        };
        Self::send(
            sse,
            &wire::Event::ContentBlockStart {
                index,
                content_block,
            },
        )?;
        self.open = Some((index, kind));
        Ok(index)
    }

    fn close(&mut self, sse: &mut SseStream) -> io::Result<()> {
        if let Some((index, _)) = self.open.take() {
            Self::send(sse, &wire::Event::ContentBlockStop { index })?;
        }
        Ok(())
    }

    /// The `tool_use` id of a call: a provider's own id as it came; one shepherd
    /// made up for the reply (`call_N`, the same in every turn) made unique to
    /// this message (`toolu_<message>_N`), as Anthropic's ids are, so that no two
    /// calls of a conversation share one.
    fn tool_use_id<'a>(&self, id: &'a str) -> std::borrow::Cow<'a, str> {
        match id.strip_prefix("call_") {
            Some(n) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => {
                let message = self.id.strip_prefix("msg_").unwrap_or(&self.id);
                std::borrow::Cow::Owned(format!("toolu_{message}_{n}"))
            }
            _ => std::borrow::Cow::Borrowed(id),
        }
    }

    pub fn whole<'a>(
        &'a self,
        text: &'a Assembler,
        reply: &'a Reply,
        usage: &Usage,
    ) -> wire::Message<'a> {
        let mut content = Vec::new();
        if !text.reasoning.is_empty() {
            content.push(wire::Block::Thinking {
                thinking: &text.reasoning,
                signature: Some(""),
            });
        }
        if !text.text.is_empty() {
            content.push(wire::Block::Text { text: &text.text });
        }
        for call in &reply.tool_calls {
            content.push(wire::Block::ToolUse {
                id: self.tool_use_id(&call.id),
                name: &call.name,
                input: &call.arguments,
            });
        }
        wire::Message {
            id: &self.id,
            kind: "message",
            role: "assistant",
            model: &self.model,
            content,
            stop_reason: stop_reason(reply),
            stop_sequence: reply.stop_sequence.as_deref(),
            usage: wire::Usage {
                input_tokens: Some(uncached_input(usage)),
                output_tokens: usage.completion,
                cache_read_input_tokens: Some(usage.cached.unwrap_or(0)),
            },
        }
    }
}

impl ReplyWriter for MessagesWriter {
    /// `message_start`, with the prompt's tokens when the backend said them
    /// before its first output (`prefilled`: the prompt and its cached part).
    fn start(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        prefilled: Option<(u64, u64)>,
    ) -> io::Result<()> {
        Self::send(sse, &self.opening(prefilled))
    }
    fn piece(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        piece: Piece,
        _logprobs: &[TokenLogprobs],
        _timings: Option<Timings>,
    ) -> io::Result<()> {
        let (kind, delta) = match &piece {
            Piece::Text(text) => ("text", wire::BlockDelta::Text { text }),
            Piece::Reasoning(text) => ("thinking", wire::BlockDelta::Thinking { thinking: text }),
        };
        let index = self.block(sse, kind)?;
        Self::send(sse, &wire::Event::ContentBlockDelta { index, delta })
    }
    fn finish(
        &mut self,
        sse: &mut SseStream,
        _choice: u32,
        reply: &Reply,
        usage: &Usage,
    ) -> io::Result<()> {
        self.close(sse)?;
        let no_input = Value::Object(Map::new());
        for call in &reply.tool_calls {
            let index = self.next_index;
            self.next_index += 1;
            let content_block = wire::Block::ToolUse {
                id: self.tool_use_id(&call.id),
                name: &call.name,
                input: &no_input,
            };
            Self::send(
                sse,
                &wire::Event::ContentBlockStart {
                    index,
                    content_block,
                },
            )?;
            let delta = wire::BlockDelta::InputJson {
                partial_json: call.arguments.to_string(),
            };
            Self::send(sse, &wire::Event::ContentBlockDelta { index, delta })?;
            Self::send(sse, &wire::Event::ContentBlockStop { index })?;
        }
        Self::send(
            sse,
            &wire::Event::MessageDelta {
                delta: wire::StopDelta {
                    stop_reason: stop_reason(reply),
                    stop_sequence: reply.stop_sequence.as_deref(),
                },
                // Cumulative, as Anthropic's are: the input is known only now (the
                // `message_start` went out before the prompt was read).
                usage: wire::Usage {
                    input_tokens: Some(uncached_input(usage)),
                    output_tokens: usage.completion,
                    cache_read_input_tokens: Some(usage.cached.unwrap_or(0)),
                },
            },
        )?;
        Self::send(sse, &wire::Event::MessageStop)
    }
    fn fail(&mut self, sse: &mut SseStream, error: &ApiError) -> io::Result<()> {
        sse.send_event("error", &encode(&error.anthropic_body()))
    }

    fn error(&self, responder: Responder, error: &ApiError) {
        responder.json_with(error.status, &error.anthropic_body(), &error.headers());
    }

    fn respond(
        &self,
        responder: Responder,
        (text, reply): (&Assembler, &Reply),
        _choices: &[(Assembler, Reply)],
        usage: &Usage,
    ) {
        responder.json(200, &self.whole(text, reply, usage));
    }
}

/// Anthropic counts the input read from the cache apart: `input_tokens` plus
/// `cache_read_input_tokens` is the whole prompt, so neither counts it twice.
fn uncached_input(usage: &Usage) -> u64 {
    usage.prompt.saturating_sub(usage.cached.unwrap_or(0))
}

impl ApiServer {
    /// `POST /v1/messages`.
    pub(super) fn messages(&self, request: &Request, responder: Responder) {
        self.metrics
            .messages_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((loaded, mut responder)) = self.loaded(responder) else {
            return;
        };
        let parsed = match parse(&request.body, &loaded.defaults) {
            Ok(parsed) => parsed,
            Err(error) => {
                self.metrics
                    .rejected_invalid
                    .fetch_add(1, Ordering::Relaxed);
                return responder.json_with(
                    error.status,
                    &error.anthropic_body(),
                    &error.headers(),
                );
            }
        };
        warn_dropped("/v1/messages", &parsed.dropped, &mut responder);
        let answer = MessagesWriter::new(self.new_id("msg_"), parsed.model);
        self.serve(loaded, answer, parsed.work, 1, parsed.stream, responder);
    }
}

#[cfg(test)]
mod tests {
    use super::super::images::tests as pictures;
    use super::*;
    use crate::core::Role;
    use serde_json::json;

    fn defaults() -> Defaults {
        Defaults {
            model: "served".into(),
            system_prompt: "server prompt".into(),
            ..Defaults::default()
        }
    }

    fn base64_block() -> Value {
        json!({"type": "image", "source": {
            "type": "base64", "media_type": "image/png", "data": pictures::png_base64()}})
    }

    #[test]
    fn image_blocks_become_images_also_inside_tool_results() {
        let body = json!({"max_tokens": 5, "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is "},
                base64_block(),
                {"type": "text", "text": "?"}
            ]},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "t1", "name": "shot", "input": {}}
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "is_error": true,
                 "content": [{"type": "text", "text": "blurred"}, base64_block()]},
                base64_block()
            ]}
        ]});
        let request = parse(body.to_string().as_bytes(), &defaults()).unwrap();
        let messages = &request.work.session.messages;
        assert_eq!(messages[0].content, "What is ?");
        assert_eq!(messages[0].images[0].at, 8);
        assert_eq!(messages[0].images[0].image.width, 2);
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[2].content, "Error: blurred");
        assert_eq!(messages[2].images[0].at, "Error: blurred".len());
        // A user turn of an image alone is a message of its own.
        assert_eq!(
            (messages[3].role, messages[3].content.as_str()),
            (Role::User, "")
        );
        assert_eq!(messages[3].images.len(), 1);
    }

    #[test]
    fn image_sources_that_cannot_be_read_are_400s_naming_the_field() {
        let source = |source: Value| {
            json!({"max_tokens": 5, "messages": [{"role": "user", "content": [
                {"type": "image", "source": source}]}]})
        };
        let field = "messages[0].content[0].source";
        for (body, param, words) in [
            (
                source(json!({"type": "url", "url": "https://example.com/cat.png"})),
                field,
                "--allow-image-urls",
            ),
            (
                source(json!({"type": "base64", "media_type": "image/png", "data": "%%%"})),
                field,
                "not valid base64",
            ),
            (
                source(
                    json!({"type": "base64", "media_type": "image/bmp", "data": pictures::png_base64()}),
                ),
                field,
                "image/bmp",
            ),
            (
                source(json!({"type": "file", "file_id": "file_1"})),
                "messages[0].content[0].source.type",
                "files are not stored",
            ),
            (
                source(json!({"type": "base64", "data": pictures::png_base64()})),
                "messages[0].content[0].source.media_type",
                "required",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": "x"},
                    {"role": "assistant", "content": [base64_block()]}]}),
                "messages[1].content[0].type",
                "not supported in a assistant turn",
            ),
        ] {
            let error = parse(body.to_string().as_bytes(), &defaults()).unwrap_err();
            assert_eq!(
                (error.status, error.param.as_deref()),
                (400, Some(param)),
                "{body}"
            );
            assert!(error.message.contains(words), "{body}: {}", error.message);
            assert_eq!(error.anthropic_body().error.kind, "invalid_request_error");
        }
        let url = source(json!({"type": "url", "url": pictures::png_data_url()}));
        let request = parse(url.to_string().as_bytes(), &defaults()).unwrap();
        assert_eq!(request.work.session.messages[0].images.len(), 1);
    }

    #[test]
    fn thinking_blocks_become_the_assistant_turns_reasoning() {
        let body = json!({
            "model": "claude", "max_tokens": 50,
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "I should ", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "thinking", "thinking": "call it."},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}}
                ]},
                {"role": "assistant", "content": [{"type": "text", "text": "no thoughts"}]},
            ],
        });
        let request = parse(body.to_string().as_bytes(), &defaults()).unwrap();
        let messages = &request.work.session.messages;
        assert_eq!(messages[1].thinking.as_deref(), Some("I should call it."));
        assert_eq!(messages[1].tool_calls.len(), 1);
        assert_eq!(messages[2].thinking, None);
        let template = crate::template::TemplateMessage::from_message(&messages[1]);
        assert_eq!(
            template.reasoning_content.as_deref(),
            Some("I should call it.")
        );
        let bad = json!({"model": "claude", "max_tokens": 5, "messages": [
            {"role": "assistant", "content": [{"type": "thinking"}]}]});
        let error = parse(bad.to_string().as_bytes(), &defaults()).expect_err("a 400");
        assert_eq!(
            error.param.as_deref(),
            Some("messages[0].content[0].thinking")
        );
    }

    #[test]
    fn blocks_become_messages_and_bad_ones_are_refused() {
        let body = json!({
            "model": "claude", "max_tokens": 50,
            "system": [{"type": "text", "text": "be brief"}],
            "messages": [
                {"role": "user", "content": "weather?"},
                {"role": "assistant", "content": [
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]},
                    {"type": "text", "text": "thanks"}
                ]}
            ],
            "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "stop_sequences": ["END"],
            "stream": true
        });
        let request = parse(body.to_string().as_bytes(), &defaults()).unwrap();
        let messages = &request.work.session.messages;
        assert_eq!(request.work.session.system_prompt, "be brief");
        assert_eq!(messages.len(), 4);
        assert_eq!(
            messages[1].tool_calls[0].arguments,
            json!({"city": "Paris"})
        );
        assert_eq!(messages[2].role, Role::Tool);
        assert_eq!(messages[2].content, "sunny");
        assert_eq!(messages[3].content, "thanks");
        assert_eq!(request.work.tool_choice, ToolChoice::Required);
        assert_eq!(request.work.sampling.stop, vec!["END".to_string()]);
        assert!(request.stream);
        for (bad, param) in [
            (
                json!({"messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "system", "content": "x"}]}),
                "messages[0].role",
            ),
            (
                json!({"max_tokens": -5, "messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (
                json!({"max_tokens": 5, "temperature": 1.5, "messages": [{"role": "user", "content": "x"}]}),
                "temperature",
            ),
            (
                json!({"max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image"}]}]}),
                "messages[0].content[0].source",
            ),
        ] {
            let error = parse(bad.to_string().as_bytes(), &defaults()).unwrap_err();
            assert_eq!(
                (error.status, error.param.as_deref()),
                (400, Some(param)),
                "{bad}"
            );
            assert_eq!(error.anthropic_body().kind, "error");
        }
    }

    fn value(wire: &impl serde::Serialize) -> Value {
        serde_json::from_str(&encode(wire)).expect("JSON")
    }

    #[test]
    fn a_whole_message_has_its_blocks_in_order() {
        let a = MessagesWriter::new("msg_1".into(), "m".into());
        let mut text = Assembler::new();
        text.reasoning = "hmm".into();
        text.text = "checking".into();
        let reply = Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: vec![ToolCall {
                id: "t1".into(),
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
        assert_eq!(
            value(&a.whole(&text, &reply, &usage)),
            json!({
                "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
                "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": ""},
                    {"type": "text", "text": "checking"},
                    {"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}},
                ],
                "stop_reason": "tool_use",
                "stop_sequence": null,
                "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 0},
            })
        );
        // Tokens read from the prompt cache are counted once, apart from the rest.
        let cached = Usage {
            prompt: 10,
            completion: 4,
            cached: Some(6),
            ..Usage::default()
        };
        let usage = value(&a.whole(&text, &reply, &cached))["usage"].clone();
        assert_eq!(
            usage,
            json!({"input_tokens": 4, "output_tokens": 4, "cache_read_input_tokens": 6})
        );
    }

    #[test]
    fn stream_events_are_typed_by_their_name() {
        let a = MessagesWriter::new("msg_1".into(), "m".into());
        let start = a.opening(None);
        assert_eq!(start.name(), "message_start");
        assert_eq!(
            value(&start),
            json!({"type": "message_start", "message": {
                "id": "msg_1", "type": "message", "role": "assistant", "content": [],
                "model": "m", "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0},
            }})
        );
        // The prompt's figures, when the backend said them first: the cached
        // part apart, as Anthropic counts it.
        assert_eq!(
            value(&a.opening(Some((100, 60))))["message"]["usage"],
            json!({"input_tokens": 40, "output_tokens": 0, "cache_read_input_tokens": 60})
        );
        let input = json!({});
        let events = [
            (
                wire::Event::ContentBlockStart {
                    index: 0,
                    content_block: wire::Block::Thinking {
                        thinking: "",
                        signature: None,
                    },
                },
                json!({"type": "content_block_start", "index": 0,
                       "content_block": {"type": "thinking", "thinking": ""}}),
            ),
            (
                wire::Event::ContentBlockStart {
                    index: 1,
                    content_block: wire::Block::ToolUse {
                        id: "t1".into(),
                        name: "weather",
                        input: &input,
                    },
                },
                json!({"type": "content_block_start", "index": 1, "content_block":
                       {"type": "tool_use", "id": "t1", "name": "weather", "input": {}}}),
            ),
            (
                wire::Event::ContentBlockDelta {
                    index: 1,
                    delta: wire::BlockDelta::InputJson {
                        partial_json: "{}".into(),
                    },
                },
                json!({"type": "content_block_delta", "index": 1,
                       "delta": {"type": "input_json_delta", "partial_json": "{}"}}),
            ),
            (
                wire::Event::ContentBlockStop { index: 1 },
                json!({"type": "content_block_stop", "index": 1}),
            ),
            (
                wire::Event::MessageDelta {
                    delta: wire::StopDelta {
                        stop_reason: "end_turn",
                        stop_sequence: None,
                    },
                    usage: wire::Usage {
                        input_tokens: None,
                        output_tokens: 3,
                        cache_read_input_tokens: None,
                    },
                },
                json!({"type": "message_delta",
                       "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                       "usage": {"output_tokens": 3}}),
            ),
            (wire::Event::MessageStop, json!({"type": "message_stop"})),
        ];
        for (event, expected) in events {
            assert_eq!(event.name(), expected["type"], "{expected}");
            assert_eq!(value(&event), expected);
        }
    }

    #[test]
    fn client_tools_get_their_schemas_and_server_tools_are_dropped() {
        let body = json!({
            "max_tokens": 50,
            "messages": [{"role": "user", "content": "hi"}],
            "tools": [
                {"name": "weather", "input_schema": {"type": "object"}},
                {"type": "custom", "name": "lookup", "input_schema": {"type": "object"}},
                {"type": "bash_20250124", "name": "bash"},
                {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
                {"type": "web_fetch_20250910", "name": "web_fetch"},
                {"type": "code_execution_20250825", "name": "code_execution"},
            ],
        });
        let request = parse(body.to_string().as_bytes(), &defaults()).unwrap();
        let names: Vec<&str> = request.work.tools.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(
            names,
            ["weather", "lookup", "bash", "str_replace_based_edit_tool"]
        );
        assert_eq!(
            request.work.tools[2].parameters["properties"]["restart"]["type"],
            "boolean"
        );
        assert_eq!(
            request.work.tools[3].parameters["required"],
            json!(["command", "path"])
        );
        assert_eq!(
            request.dropped,
            [
                "web_search_20250305",
                "web_fetch_20250910",
                "code_execution_20250825"
            ]
        );
    }

    #[test]
    fn made_up_call_ids_are_unique_to_their_message_and_provider_ids_kept() {
        let first = MessagesWriter::new("msg_7".into(), "m".into());
        let second = MessagesWriter::new("msg_8".into(), "m".into());
        assert_eq!(first.tool_use_id("call_0"), "toolu_7_0");
        assert_eq!(second.tool_use_id("call_0"), "toolu_8_0");
        assert_eq!(first.tool_use_id("toolu_01AbC"), "toolu_01AbC");
        assert_eq!(first.tool_use_id("call_x"), "call_x");
        assert_eq!(first.tool_use_id("call_"), "call_");
    }
}

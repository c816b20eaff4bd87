//! `POST /v1/completions`: OpenAI's legacy text completions (LangChain,
//! Continue and older SDKs call it), for the in-process model only.
//!
//! The prompt is continued as it is: no chat template, no system prompt, no
//! tools, no output filter (the backend's raw-prompt path,
//! [`Backend::complete`](crate::backend::Backend::complete)). Sampling fields
//! are chat completions' ([`sampling_fields::sampling`]), `logprobs` (0 to 20
//! alternatives) is reported in the legacy shape (`tokens`, `token_logprobs`,
//! `top_logprobs`, `text_offset`); what this server cannot do (`echo`,
//! `suffix`, `best_of` above `n`) is a 400
//! naming the field rather than silently ignored; a field it does not know at
//! all is ignored, as llama-server ignores it, and named in a debug line. Answers are
//! `text_completion` objects, streamed as chunks of the same shape ending in
//! `data: [DONE]`.

use std::cell::RefCell;
use std::io;
use std::sync::atomic::Ordering;

use serde_json::{Map, Value};

use super::error::ApiError;
use super::fields::{json_body, unknown_fields, Fields};
use super::images::Images;
use super::pool::Work;
use super::sampling_fields;
use super::text::{Assembler, Piece};
use super::wire::encode;
use super::wire::openai as wire;
use super::wire::openai::{finish_reason, wire_timings, wire_usage};
use super::writer::ReplyWriter;
use super::{local_sampling, log_ignored, now_secs, ApiServer, Defaults, Usage};
use crate::backend::{PromptPart, Reply, ToolChoice, MEDIA_MARKER};
use crate::core::{Session, TokenLogprobs};
use crate::frontend::serve::http::{Request, Responder, SseStream};

/// A checked `/v1/completions` request.
#[derive(Debug)]
pub struct CompletionRequest {
    pub work: Work,
    pub stream: bool,
    pub include_usage: bool,
    pub model: String,
    /// Fields this server does not know and ignored ([`unknown_fields`]).
    pub ignored: Vec<String>,
    /// How many choices to generate (`n`).
    pub n: u32,
}

/// Fields accepted and ignored (llama-server's `cache_prompt` and `id_slot`: see
/// chat completions').
const IGNORED: [&str; 3] = ["user", "cache_prompt", "id_slot"];

/// Every field this server reads; any other is ignored and named in a debug line.
const KNOWN: [&str; 26] = [
    "grammar",
    "json_schema",
    "model",
    "n_predict",
    "prompt",
    "stream",
    "stream_options",
    "max_tokens",
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
    "best_of",
    "echo",
    "logprobs",
    "logit_bias",
    "suffix",
    "use_tools",
    "response_format",
];

/// Checks a `/v1/completions` body field by field.
pub fn parse(
    body: &[u8],
    defaults: &Defaults,
    n_vocab: i32,
) -> Result<CompletionRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let ignored = unknown_fields(&value, &KNOWN, &IGNORED);
    let model = f.str("model")?.unwrap_or(&defaults.model).to_string();
    let prompt = prompt(&f, n_vocab, &mut Images::new(&defaults.image_urls))?;
    let stream = f.bool("stream")?.unwrap_or(false);
    let include_usage = sampling_fields::stream_options(&f, stream)?;
    let n = f
        .integer("n", 1, sampling_fields::MAX_CHOICES)?
        .unwrap_or(1);
    // `best_of` generates more and returns the `n` likeliest; only all of them
    // (the same number) is what this server does.
    if f.integer("best_of", 1, sampling_fields::MAX_CHOICES)?
        .is_some_and(|b| b != n)
    {
        return Err(ApiError::invalid(
            "best_of",
            "'best_of' other than 'n' is not supported by this server",
        ));
    }
    f.unsupported("echo", &[Value::Bool(false)])?;
    let logprobs = f.integer("logprobs", 0, 20)?;
    f.unsupported("suffix", &[Value::String(String::new())])?;
    f.unsupported("use_tools", &[Value::Bool(false)])?;
    f.unsupported("response_format", &[])?;
    let mut sampling = sampling_fields::sampling(&f, defaults)?;
    sampling.logprobs = logprobs.map(|n| n as u32);
    Ok(CompletionRequest {
        work: Work {
            session: Session::new(String::new()),
            tools: Vec::new(),
            tool_choice: ToolChoice::None,
            sampling,
            use_tools: false,
            raw_prompt: Some(prompt),
        },
        stream,
        include_usage,
        model,
        ignored,
        n: n as u32,
    })
}

/// The one prompt, as OpenAI and llama-server take it ([`prompts`]); several
/// prompts would be several choices, which this route does not produce.
pub(super) fn prompt(
    f: &Fields<'_>,
    n_vocab: i32,
    images: &mut Images,
) -> Result<Vec<PromptPart>, ApiError> {
    let mut prompts = prompts(f, n_vocab, images)?;
    if prompts.len() > 1 {
        return Err(ApiError::invalid(
            "prompt",
            "one prompt per request: this server returns one choice",
        ));
    }
    Ok(prompts.remove(0))
}

/// The prompts of `prompt`, as llama-server reads them: a string, token ids,
/// an array mixing the two, or llama-server's `{"prompt_string": ...,
/// "multimodal_data": [...]}` object (its multimodal form, [`media_prompt`]) is
/// one prompt; an array holding no token id is one prompt per item. Token ids
/// must be in the model's vocabulary (`n_vocab`); images are read by `images`.
pub(super) fn prompts(
    f: &Fields<'_>,
    n_vocab: i32,
    images: &mut Images,
) -> Result<Vec<Vec<PromptPart>>, ApiError> {
    let items: Vec<(String, &Value)> = match f.get("prompt") {
        None => return Err(f.missing("prompt", "a string or token ids")),
        Some(Value::Array(items)) if !items.iter().any(Value::is_i64) => items
            .iter()
            .enumerate()
            .map(|(i, item)| (format!("prompt[{i}]"), item))
            .collect(),
        Some(one) => vec![("prompt".to_string(), one)],
    };
    if items.is_empty() {
        return Err(ApiError::invalid("prompt", "'prompt' must not be empty"));
    }
    items
        .into_iter()
        .map(|(name, item)| subprompt(item, &name, n_vocab, images))
        .collect()
}

/// One prompt of [`prompts`], named `name` in errors about its images.
fn subprompt(
    value: &Value,
    name: &str,
    n_vocab: i32,
    images: &mut Images,
) -> Result<Vec<PromptPart>, ApiError> {
    let wrong = || {
        ApiError::invalid(
            "prompt",
            "'prompt' must be a string, an array of token ids, an array mixing the two, a {\"prompt_string\": ...} object, or an array of those",
        )
    };
    let parts = match value {
        Value::String(text) => vec![PromptPart::Text(text.clone())],
        Value::Array(items) => mixed(items, n_vocab).ok_or_else(wrong)??,
        Value::Object(object) => {
            let media_name = format!("{name}.multimodal_data");
            let media = match object.get("multimodal_data") {
                None | Some(Value::Null) => None,
                Some(Value::Array(media)) => Some(media.as_slice()),
                Some(_) => {
                    return Err(ApiError::invalid(
                        &media_name,
                        format!("'{media_name}' must be an array of base64 strings"),
                    ))
                }
            };
            match (object.get("prompt_string"), media) {
                (Some(Value::String(text)), Some(media)) => {
                    media_prompt(text, media, name, images)?
                }
                (Some(Value::String(text)), None) => vec![PromptPart::Text(text.clone())],
                (Some(Value::Array(items)), None) => mixed(items, n_vocab).ok_or_else(wrong)??,
                (Some(Value::Array(_)), Some(_)) => {
                    return Err(ApiError::invalid(
                        &format!("{name}.prompt_string"),
                        format!(
                            "'{name}.prompt_string' must be a string when '{media_name}' is given"
                        ),
                    ))
                }
                _ => return Err(wrong()),
            }
        }
        _ => return Err(wrong()),
    };
    let empty = |part: &PromptPart| match part {
        PromptPart::Text(text) => text.is_empty(),
        PromptPart::Tokens(ids) => ids.is_empty(),
        PromptPart::Infill(_) | PromptPart::Image(_) => false,
    };
    if parts.iter().all(empty) {
        return Err(ApiError::invalid("prompt", "'prompt' must not be empty"));
    }
    Ok(parts)
}

/// llama-server's multimodal prompt: `text` split at each [`MEDIA_MARKER`], the
/// images of `media` (base64, read by `images`) in the markers' places, in order;
/// as many markers as images, else a 400 (llama-server's "Failed to tokenize
/// prompt", here with both counts). Empty text between markers is left out.
fn media_prompt(
    text: &str,
    media: &[Value],
    name: &str,
    images: &mut Images,
) -> Result<Vec<PromptPart>, ApiError> {
    let media_name = format!("{name}.multimodal_data");
    let markers = text.matches(MEDIA_MARKER).count();
    if markers != media.len() {
        return Err(ApiError::invalid(
            &media_name,
            format!(
                "'{name}.prompt_string' has {markers} {MEDIA_MARKER} markers and '{media_name}' has {} items: each marker stands for one item, in order",
                media.len()
            ),
        ));
    }
    let mut parts = Vec::new();
    for (k, segment) in text.split(MEDIA_MARKER).enumerate() {
        if k > 0 {
            let field = format!("{media_name}[{}]", k - 1);
            let Some(Value::String(data)) = media.get(k - 1) else {
                return Err(ApiError::invalid(
                    &field,
                    format!("'{field}' must be a base64 string"),
                ));
            };
            parts.push(PromptPart::Image(images.base64(data, None, &field)?));
        }
        if !segment.is_empty() {
            parts.push(PromptPart::Text(segment.to_string()));
        }
    }
    Ok(parts)
}

/// One prompt of token ids and strings in any order; `None` when an item is
/// neither, a 400 when an id is outside the vocabulary.
fn mixed(items: &[Value], n_vocab: i32) -> Option<Result<Vec<PromptPart>, ApiError>> {
    let mut parts: Vec<PromptPart> = Vec::new();
    for item in items {
        match item {
            Value::String(text) => parts.push(PromptPart::Text(text.clone())),
            Value::Number(n) => {
                let id = n.as_i64().filter(|id| (0..i64::from(n_vocab)).contains(id));
                let Some(id) = id.and_then(|id| i32::try_from(id).ok()) else {
                    return Some(Err(ApiError::invalid(
                        "prompt",
                        format!(
                            "token id {n} is outside the vocabulary (0 to {})",
                            n_vocab - 1
                        ),
                    )));
                };
                match parts.last_mut() {
                    Some(PromptPart::Tokens(ids)) => ids.push(id),
                    _ => parts.push(PromptPart::Tokens(vec![id])),
                }
            }
            _ => return None,
        }
    }
    Some(Ok(parts))
}

/// How one text completion is answered, whole or streamed.
#[derive(Debug)]
pub struct TextWriter {
    pub id: String,
    pub created: u64,
    pub model: String,
    pub include_usage: bool,
    /// The request asked for `logprobs`.
    pub logprobs: bool,
    /// Where each choice's next streamed token starts in its text.
    pub offsets: RefCell<Vec<usize>>,
}

/// Text completions' `logprobs` for `probs`, whose first token starts at
/// byte `offset` of the completion; the offset after the last token.
fn text_logprobs(probs: &[TokenLogprobs], mut offset: usize) -> (wire::TextLogprobs, usize) {
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let mut out = wire::TextLogprobs {
        tokens: Vec::with_capacity(probs.len()),
        token_logprobs: Vec::with_capacity(probs.len()),
        top_logprobs: Vec::with_capacity(probs.len()),
        text_offset: Vec::with_capacity(probs.len()),
    };
    for p in probs {
        out.tokens.push(text(&p.chosen.bytes));
        out.token_logprobs.push(p.chosen.logprob);
        out.top_logprobs.push(
            p.top
                .iter()
                .map(|t| (text(&t.bytes), Value::from(t.logprob)))
                .collect::<Map<String, Value>>(),
        );
        out.text_offset.push(offset);
        offset += p.chosen.bytes.len();
    }
    (out, offset)
}

impl TextWriter {
    /// `logprobs` for the tokens `probs` of choice `index`, whose text so far
    /// (`offset` is where the next token starts) came in streamed chunks;
    /// `None` unless asked for.
    fn logprobs(&self, index: u32, probs: &[TokenLogprobs]) -> Option<wire::TextLogprobs> {
        if !self.logprobs {
            return None;
        }
        let mut offsets = self.offsets.borrow_mut();
        let at = index as usize;
        if offsets.len() <= at {
            offsets.resize(at + 1, 0);
        }
        let (out, next) = text_logprobs(probs, offsets[at]);
        offsets[at] = next;
        Some(out)
    }

    fn chunk<'a>(
        &'a self,
        index: u32,
        text: &'a str,
        finish: Option<&'static str>,
    ) -> wire::TextCompletion<'a> {
        wire::TextCompletion {
            id: &self.id,
            object: "text_completion",
            created: self.created,
            model: &self.model,
            system_fingerprint: super::FINGERPRINT,
            choices: vec![wire::TextChoice {
                text,
                index,
                logprobs: None,
                finish_reason: finish,
            }],
            usage: None,
            timings: None,
        }
    }

    /// The whole `text_completion` of `choices`, in order.
    pub fn whole<'a>(
        &'a self,
        choices: &'a [(Assembler, Reply)],
        usage: &Usage,
    ) -> wire::TextCompletion<'a> {
        let choices = (0u32..)
            .zip(choices)
            .map(|(index, (text, reply))| wire::TextChoice {
                text: &text.text,
                index,
                logprobs: self.logprobs(index, &text.logprobs),
                finish_reason: Some(finish_reason(reply)),
            })
            .collect();
        wire::TextCompletion {
            usage: Some(wire_usage(usage)),
            timings: wire_timings(usage),
            choices,
            ..self.chunk(0, "", None)
        }
    }
}

impl ReplyWriter for TextWriter {
    fn piece(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        piece: Piece,
        logprobs: &[TokenLogprobs],
        _timings: Option<wire::Timings>,
    ) -> io::Result<()> {
        match piece {
            Piece::Text(text) => {
                let mut chunk = self.chunk(index, &text, None);
                chunk.choices[0].logprobs = self.logprobs(index, logprobs);
                sse.send(&encode(&chunk))
            }
            // The raw path has no output filter, so no reasoning is ever split off.
            Piece::Reasoning(_) => Ok(()),
        }
    }
    /// Choice `index`'s finish reason, with the generation's `timings`.
    fn finish(
        &mut self,
        sse: &mut SseStream,
        index: u32,
        reply: &Reply,
        usage: &Usage,
    ) -> io::Result<()> {
        let last = wire::TextCompletion {
            timings: wire_timings(usage),
            ..self.chunk(index, "", Some(finish_reason(reply)))
        };
        sse.send(&encode(&last))
    }
    /// The usage chunk when asked for (every choice's), and `[DONE]`.
    fn end(&mut self, sse: &mut SseStream, usage: &Usage) -> io::Result<()> {
        if self.include_usage {
            let chunk = wire::TextUsageChunk {
                id: &self.id,
                object: "text_completion",
                created: self.created,
                model: &self.model,
                choices: [],
                usage: wire_usage(usage),
            };
            sse.send(&encode(&chunk))?;
        }
        sse.send("[DONE]")
    }

    fn respond(
        &self,
        responder: Responder,
        _first: (&Assembler, &Reply),
        choices: &[(Assembler, Reply)],
        usage: &Usage,
    ) {
        responder.json(200, &self.whole(choices, usage));
    }
}

impl ApiServer {
    /// `POST /v1/completions`.
    pub(super) fn completions(&self, request: &Request, responder: Responder) {
        self.metrics
            .completions_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((loaded, model, responder)) = self.local_model("/v1/completions", responder)
        else {
            return;
        };
        let n_vocab = model.props().n_vocab;
        let mut parsed = match parse(&request.body, &loaded.defaults, n_vocab) {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse(responder, &error),
        };
        log_ignored("/v1/completions", &parsed.ignored);
        if let Err(error) = local_sampling(loaded, &mut parsed.work.sampling) {
            return self.refuse(responder, &error);
        }
        let answer = TextWriter {
            id: self.new_id("cmpl-"),
            created: now_secs(),
            model: parsed.model,
            include_usage: parsed.include_usage,
            logprobs: parsed.work.sampling.logprobs.is_some(),
            offsets: std::cell::RefCell::new(Vec::new()),
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
    use super::*;
    use serde_json::json;

    fn defaults() -> Defaults {
        Defaults {
            model: "served".into(),
            ..Defaults::default()
        }
    }

    fn parse_json(body: Value) -> Result<CompletionRequest, ApiError> {
        parse(body.to_string().as_bytes(), &defaults(), 1000)
    }

    /// Each malformed body is a 400 naming `param`.
    fn check_invalid(body: Value, param: &str) {
        let error = parse_json(body.clone()).expect_err("an invalid request");
        assert_eq!(error.status, 400, "{body}");
        assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
    }

    #[test]
    fn a_multimodal_prompt_object_is_read_here_too() {
        let data = super::super::images::tests::png_base64();
        let body =
            json!({"prompt": {"prompt_string": "Say <__media__>", "multimodal_data": [data]}});
        let request = parse_json(body).unwrap();
        let parts = request.work.raw_prompt.unwrap();
        assert_eq!(parts[0], PromptPart::Text("Say ".into()));
        assert!(matches!(&parts[1], PromptPart::Image(image) if image.mime == "image/png"));
        check_invalid(
            json!({"prompt": {"prompt_string": "Say", "multimodal_data": [data]}}),
            "prompt.multimodal_data",
        );
    }

    #[test]
    fn a_prompt_becomes_raw_work_with_the_sampling_fields() {
        let request = parse_json(json!({
            "prompt": ["Once upon a time"], "max_tokens": 7, "temperature": 0,
            "stop": "\n", "seed": 3, "stream": true,
            "stream_options": {"include_usage": true}
        }))
        .unwrap();
        assert_eq!(
            request.work.raw_prompt,
            Some(vec![PromptPart::Text("Once upon a time".into())])
        );
        assert_eq!(request.work.sampling.max_tokens, Some(7));
        assert_eq!(request.work.sampling.temperature, Some(0.0));
        assert_eq!(request.work.sampling.stop, vec!["\n".to_string()]);
        assert_eq!(request.work.sampling.seed, Some(3));
        assert!(request.stream && request.include_usage);
        assert_eq!(request.model, "served");
        assert!(request.work.session.messages.is_empty());
        assert_eq!(request.work.session.system_prompt, "");
    }

    #[test]
    fn token_ids_and_mixed_prompts_are_taken_as_llama_server_takes_them() {
        let raw = |prompt: Value| {
            parse_json(json!({ "prompt": prompt }))
                .unwrap()
                .work
                .raw_prompt
        };
        let ids = Some(vec![PromptPart::Tokens(vec![1, 2])]);
        assert_eq!(raw(json!([1, 2])), ids);
        assert_eq!(raw(json!([[1, 2]])), ids);
        assert_eq!(
            raw(json!([7, "a b", 8, 9])),
            Some(vec![
                PromptPart::Tokens(vec![7]),
                PromptPart::Text("a b".into()),
                PromptPart::Tokens(vec![8, 9]),
            ])
        );
    }

    #[test]
    fn malformed_and_unsupported_fields_are_400s_naming_the_field() {
        check_invalid(json!({}), "prompt");
        check_invalid(json!({"prompt": ""}), "prompt");
        check_invalid(json!({"prompt": 5}), "prompt");
        check_invalid(json!({"prompt": ["a", "b"]}), "prompt");
        check_invalid(json!({"prompt": [[1, 2], [3]]}), "prompt");
        check_invalid(json!({"prompt": [1, 1000]}), "prompt");
        check_invalid(json!({"prompt": [1, -1]}), "prompt");
        check_invalid(json!({"prompt": [1.5]}), "prompt");
        check_invalid(json!({"prompt": [1, {"a": 1}]}), "prompt");
        check_invalid(json!({"prompt": []}), "prompt");
        check_invalid(json!({"prompt": "a", "n": 17}), "n");
        check_invalid(json!({"prompt": "a", "n": 2, "best_of": 3}), "best_of");
        assert_eq!(parse_json(json!({"prompt": "a", "n": 2})).unwrap().n, 2);
        check_invalid(json!({"prompt": "a", "echo": true}), "echo");
        check_invalid(json!({"prompt": "a", "logprobs": 21}), "logprobs");
        check_invalid(json!({"prompt": "a", "logprobs": true}), "logprobs");
        let asked = parse_json(json!({"prompt": "a", "logprobs": 2})).unwrap();
        assert_eq!(asked.work.sampling.logprobs, Some(2));
        check_invalid(json!({"prompt": "a", "suffix": "x"}), "suffix");
        check_invalid(json!({"prompt": "a", "max_tokens": 0}), "max_tokens");
        check_invalid(json!({"prompt": "a", "temperature": "hot"}), "temperature");
        // A field this route does not read is ignored and named, as llama-server
        // ignores it; n_predict is llama-server's max_tokens.
        let chat = parse_json(json!({"prompt": "a", "messages": [], "n_predict": 3})).unwrap();
        assert_eq!(chat.ignored, ["messages"]);
        assert_eq!(chat.work.sampling.max_tokens, Some(3));
        check_invalid(
            json!({"prompt": "a", "stream_options": {}}),
            "stream_options",
        );
        let error = parse(b"{not json", &defaults(), 1000).unwrap_err();
        assert_eq!(error.status, 400);
    }
}

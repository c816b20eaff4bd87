//! The routes only the in-process model answers: `POST /v1/embeddings`
//! (OpenAI's shape), and llama-server's `POST /embedding` (its own shape, one
//! code path with OpenAI's), `POST /tokenize`, `POST /detokenize`,
//! `GET /props` and `GET /slots`, so tools written for llama-server find what
//! they look for. Served on the connection's thread through the model's
//! [`LocalModel`] handle (one job each on the generation thread); with any
//! other backend they answer 501.
//!
//! Bodies are checked field by field like chat completions'; a fault is a 400
//! naming the field, and token ids are checked against the vocabulary on the
//! generation thread before llama.cpp sees them.

use std::sync::atomic::Ordering;

use serde_json::Value;

use super::error::ApiError;
use super::fields::{json_body, only_known, Fields};
use super::wire::{llama as lwire, openai as owire};
use super::Defaults;
use crate::backend::llamacpp::{EmbedInput, LocalModel, ModelError, SlotReport};
use crate::frontend::serve::http::{Request, Responder};
use crate::llama::Token;

/// Most inputs one embeddings request may carry (OpenAI's limit).
pub(super) const MAX_INPUTS: usize = 2048;

/// A checked `/v1/embeddings` request.
#[derive(Debug, PartialEq)]
pub struct EmbeddingsRequest {
    pub inputs: Vec<EmbedInput>,
    pub base64: bool,
    pub model: String,
}

/// The 501 for a route the configured backend cannot serve.
pub fn unsupported(route: &str) -> ApiError {
    ApiError::new(
        501,
        "not_supported_error",
        format!("{route} needs the in-process model (--server -m FILE.gguf); this server's backend cannot serve it"),
    )
}

/// Checks an embeddings body: `input` a string, an array of strings, an array
/// of token ids or an array of such arrays (an item may also be llama-server's
/// `{"content": [text parts]}`, its text joined); `encoding_format` float or base64;
/// `dimensions`, when given, the model's own.
pub fn parse_embeddings(
    body: &[u8],
    defaults: &Defaults,
    n_embd: usize,
) -> Result<EmbeddingsRequest, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    only_known(
        &value,
        &["input", "model", "encoding_format", "dimensions", "user"],
        &[],
    )?;
    let inputs = embedding_inputs(f.get("input"), "input")?;
    let base64 = f.choice("encoding_format", &["float", "base64"])? == Some("base64");
    if let Some(asked) = f.integer("dimensions", 1, 1 << 20)? {
        if usize::try_from(asked).ok() != Some(n_embd) {
            return Err(ApiError::invalid(
                "dimensions",
                format!("this model's embeddings have {n_embd} dimensions; 'dimensions' cannot change that"),
            ));
        }
    }
    Ok(EmbeddingsRequest {
        inputs,
        base64,
        model: f.str("model")?.unwrap_or(&defaults.model).to_string(),
    })
}

/// The inputs in field `name` (`input`, or `/embedding`'s `content`).
fn embedding_inputs(input: Option<&Value>, name: &str) -> Result<Vec<EmbedInput>, ApiError> {
    let wrong = || {
        ApiError::invalid(
            name,
            format!("'{name}' must be a string, an array of strings, an array of token ids or an array of arrays of token ids"),
        )
    };
    let inputs = match input {
        None => return Err(ApiError::invalid(name, format!("'{name}' is required"))),
        Some(Value::String(text)) => vec![EmbedInput::Text(text.clone())],
        Some(item @ Value::Object(_)) => vec![content_input(item, name)?],
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            vec![EmbedInput::Tokens(token_ids(items, name)?)]
        }
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(text) => Ok(EmbedInput::Text(text.clone())),
                Value::Array(ids) => {
                    Ok(EmbedInput::Tokens(token_ids(ids, &format!("{name}[{i}]"))?))
                }
                Value::Object(_) => content_input(item, &format!("{name}[{i}]")),
                _ => Err(wrong()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(wrong()),
    };
    if inputs.is_empty() || inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            name,
            format!("'{name}' must hold 1 to {MAX_INPUTS} inputs"),
        ));
    }
    for (i, input) in inputs.iter().enumerate() {
        let empty = match input {
            EmbedInput::Text(text) => text.is_empty(),
            EmbedInput::Tokens(tokens) => tokens.is_empty(),
            EmbedInput::Pair { .. } => false,
        };
        if empty {
            return Err(ApiError::invalid(name, format!("input {i} is empty")));
        }
    }
    Ok(inputs)
}

/// llama-server's `{"content": [{"type": "text", "text": ...}, ...]}` input
/// (OpenAI's content parts; text only here): the parts' text joined.
fn content_input(item: &Value, name: &str) -> Result<EmbedInput, ApiError> {
    let f = Fields::of(item, name)?;
    let parts =
        (f.array("content")?).ok_or_else(|| f.missing("content", "an array of text parts"))?;
    super::openai::text_parts(parts, &f.name("content"), "").map(EmbedInput::Text)
}

/// Token ids: integers in `i32` (the vocabulary check comes later).
fn token_ids(items: &[Value], name: &str) -> Result<Vec<Token>, ApiError> {
    items
        .iter()
        .map(|item| {
            item.as_i64()
                .and_then(|n| Token::try_from(n).ok())
                .ok_or_else(|| {
                    ApiError::invalid(name, format!("'{name}' must hold token ids (integers)"))
                })
        })
        .collect()
}

/// The status and body for a model failure: the client's input, or the model.
pub(super) fn from_model(error: ModelError, param: &str) -> ApiError {
    match error {
        ModelError::Invalid { index, message } => {
            let param = index.map_or(param.to_string(), |i| format!("{param}[{i}]"));
            ApiError::invalid(&param, message)
        }
        ModelError::Failed(message) => ApiError::new(500, "server_error", message),
        ModelError::NotFound(message) => ApiError::new(404, "not_found_error", message),
        ModelError::Unsupported(message) => ApiError::new(501, "not_supported_error", message),
    }
}

/// `/v1/embeddings`: the vectors, in input order.
pub fn embeddings<'a>(
    model: &LocalModel,
    request: &'a EmbeddingsRequest,
) -> Result<owire::EmbeddingList<'a>, ApiError> {
    let embeddings = model
        .embed(request.inputs.clone())
        .map_err(|e| from_model(e, "input"))?;
    let prompt_tokens: usize = embeddings.iter().map(|e| e.n_tokens).sum();
    let data = embeddings
        .into_iter()
        .enumerate()
        .map(|(index, e)| owire::Embedding {
            object: "embedding",
            index,
            embedding: if request.base64 {
                owire::Vector::Base64(base64_floats(&e.vector))
            } else {
                owire::Vector::Float(e.vector)
            },
        })
        .collect();
    Ok(owire::EmbeddingList {
        object: "list",
        data,
        model: &request.model,
        usage: owire::EmbeddingUsage {
            prompt_tokens: prompt_tokens as u64,
            total_tokens: prompt_tokens as u64,
        },
    })
}

/// A checked llama-server `/embedding` request: its inputs, and the fields it
/// ignores (for the debug line).
#[derive(Debug, PartialEq)]
pub struct NativeEmbeddings {
    pub inputs: Vec<EmbedInput>,
    /// The field they came in (`content`, or `input`), for errors.
    pub field: &'static str,
    pub ignored: Vec<String>,
}

/// Checks llama-server's `/embedding` body: `content` (or, as it also reads,
/// `input`) in any shape `/v1/embeddings` takes; `embd_normalize` only 2 (the
/// Euclidean norm every vector here has); `encoding_format` float or base64
/// (this shape always answers floats, as llama-server's does). A `pooling`
/// field is a 400 saying why: this server pools every input (`--pooling`), so
/// per-token vectors (llama-server's `--pooling none`) are not served. Other
/// fields are ignored, as llama-server ignores them.
pub fn parse_native_embeddings(body: &[u8]) -> Result<NativeEmbeddings, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    let known = [
        "content",
        "input",
        "embd_normalize",
        "encoding_format",
        "model",
    ];
    let ignored = super::fields::unknown_fields(&value, &known, &["pooling"]);
    if f.get("pooling").is_some() {
        return Err(ApiError::invalid(
            "pooling",
            "per-token embeddings (pooling none) are not served: this server pools each input as --pooling (mean, cls or last) set it at start",
        ));
    }
    if let Some(norm) = f.integer("embd_normalize", -1, i64::from(i32::MAX))? {
        if norm != 2 {
            return Err(ApiError::invalid(
                "embd_normalize",
                format!("'embd_normalize' {norm} is not supported: this server's vectors have the Euclidean norm (2)"),
            ));
        }
    }
    f.choice("encoding_format", &["float", "base64"])?;
    let name = if f.get("input").is_some() {
        "input"
    } else {
        "content"
    };
    let inputs = embedding_inputs(f.get(name), name)?;
    Ok(NativeEmbeddings {
        inputs,
        field: name,
        ignored,
    })
}

/// llama-server's `/embedding` answer: per input, in order, `{index,
/// embedding}` with the pooled vector as a list of one.
pub fn native_embeddings(
    model: &LocalModel,
    request: NativeEmbeddings,
) -> Result<Vec<lwire::Embedding>, ApiError> {
    let embeddings = (model.embed(request.inputs)).map_err(|e| from_model(e, request.field))?;
    Ok((embeddings.into_iter().enumerate())
        .map(|(index, e)| lwire::Embedding {
            index,
            embedding: [e.vector],
        })
        .collect())
}

/// `encoding_format: "base64"`: the floats' little-endian bytes, base64.
pub fn base64_floats(vector: &[f32]) -> String {
    let bytes: Vec<u8> = vector.iter().flat_map(|x| x.to_le_bytes()).collect();
    crate::util::base64::encode(&bytes)
}

/// `/tokenize` `{content, add_special?, parse_special?, with_pieces?}`.
pub fn tokenize(model: &LocalModel, body: &[u8]) -> Result<lwire::Tokens, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    only_known(
        &value,
        &["content", "add_special", "parse_special", "with_pieces"],
        &[],
    )?;
    let content = f.required_str("content")?;
    let add_special = f.bool("add_special")?.unwrap_or(false);
    // llama.cpp's tokenizer is always called with special-token parsing here.
    f.unsupported("parse_special", &[Value::Bool(true)])?;
    let with_pieces = f.bool("with_pieces")?.unwrap_or(false);
    let pieces = model
        .tokenize(content.to_string(), add_special)
        .map_err(|e| from_model(e, "content"))?;
    let tokens = pieces
        .into_iter()
        .map(|(id, bytes)| match with_pieces {
            false => lwire::Token::Id(id),
            true => lwire::Token::WithPiece {
                id,
                piece: piece_text(bytes),
            },
        })
        .collect();
    Ok(lwire::Tokens { tokens })
}

fn piece_text(bytes: Vec<u8>) -> lwire::PieceText {
    match String::from_utf8(bytes) {
        Ok(text) => lwire::PieceText::Text(text),
        Err(error) => lwire::PieceText::Bytes(error.into_bytes()),
    }
}

/// `/detokenize` `{tokens}`.
pub fn detokenize(model: &LocalModel, body: &[u8]) -> Result<lwire::Detokenized, ApiError> {
    let value = json_body(body)?;
    let f = Fields::of(&value, "")?;
    only_known(&value, &["tokens"], &[])?;
    let items = f
        .array("tokens")?
        .ok_or_else(|| f.missing("tokens", "an array of token ids"))?;
    let tokens = token_ids(items, "tokens")?;
    let content = model
        .detokenize(tokens)
        .map_err(|e| from_model(e, "tokens"))?;
    Ok(lwire::Detokenized { content })
}

/// `/props`: the model, its context per slot, the slots, the chat template and
/// the sampling a request gets by default.
pub fn props<'a>(model: &'a LocalModel, defaults: &'a Defaults) -> lwire::Props<'a> {
    let props = model.props();
    lwire::Props {
        default_generation_settings: lwire::GenerationSettings {
            n_ctx: props.n_ctx_slot,
            params: lwire::params(&defaults.sampling),
        },
        total_slots: props.slots,
        model_alias: &defaults.model,
        model_ftype: &props.ftype,
        model_path: &props.model_path,
        chat_template: &props.chat_template,
        chat_template_caps: props.template_caps.iter().copied().collect(),
        bos_token: &props.bos_token,
        eos_token: &props.eos_token,
        modalities: lwire::Modalities {
            vision: props.vision,
            audio: false,
        },
        build_info: super::FINGERPRINT,
        is_sleeping: model.is_sleeping(),
    }
}

/// `GET /slots`, as a JSON value (the slots' requests are borrowed while it is built).
pub fn slots(model: &LocalModel) -> Result<Value, ApiError> {
    let slots = model.slots().map_err(|e| from_model(e, ""))?;
    let wire: Vec<lwire::Slot> = (slots.iter())
        .map(|s| lwire::Slot {
            id: s.id,
            n_ctx: s.n_ctx,
            speculative: s.speculative,
            is_processing: s.is_processing,
            n_cached: s.n_cached,
            n_decoded: s.n_decoded,
            task: s.task.as_ref().map(|t| lwire::SlotTask {
                id_task: t.id,
                n_prompt_tokens: s.n_cached,
                n_prompt_tokens_processed: t.n_prompt_processed,
                n_prompt_tokens_cache: t.n_prompt_cached,
                params: lwire::params(&t.sampling),
                next_token: [lwire::NextToken {
                    has_next_token: t.has_next_token,
                    has_new_line: t.has_new_line,
                    n_remain: t.n_remain,
                    n_decoded: s.n_decoded,
                }],
            }),
        })
        .collect();
    Ok(serde_json::to_value(wire).unwrap_or_default())
}

/// `POST /slots/{id}?action=save|restore|erase`, the file named in the body's
/// `filename`; answers as llama-server does. `action` given twice is a 400
/// naming it, not a guess at which was meant.
pub fn slot_action(model: &LocalModel, id: &str, request: &Request) -> Result<Value, ApiError> {
    let slot: usize = id
        .parse()
        .map_err(|_| ApiError::invalid("id_slot", format!("'{id}' is not a slot number")))?;
    let action = request
        .single_query_param("action")
        .map_err(|message| ApiError::invalid("action", message))?
        .unwrap_or_default();
    let body = &request.body;
    let value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(serde_json::Map::new())
    } else {
        json_body(body)?
    };
    let f = Fields::of(&value, "")?;
    let filename = f.str("filename")?;
    let report = model
        .slot_action(slot, &action, filename)
        .map_err(|e| from_model(e, "filename"))?;
    let done = match &report {
        SlotReport::Saved {
            filename,
            n_tokens,
            n_bytes,
            ms,
        } => lwire::SlotDone::Saved {
            id_slot: slot,
            filename,
            n_saved: *n_tokens,
            n_written: *n_bytes,
            timings: lwire::SaveTimings { save_ms: *ms },
        },
        SlotReport::Restored {
            filename,
            n_tokens,
            n_bytes,
            ms,
        } => lwire::SlotDone::Restored {
            id_slot: slot,
            filename,
            n_restored: *n_tokens,
            n_read: *n_bytes,
            timings: lwire::RestoreTimings { restore_ms: *ms },
        },
        SlotReport::Erased { n_tokens } => lwire::SlotDone::Erased {
            id_slot: slot,
            n_erased: *n_tokens,
        },
    };
    Ok(serde_json::to_value(&done).unwrap_or_default())
}

impl super::ApiServer {
    /// `POST /embeddings`, llama-server's unprefixed spelling: its own shape
    /// ([`Self::native_embeddings`]) for a body in its own words (`content`), else
    /// OpenAI's, which the `openai` SDKs given the server's root expect.
    pub(super) fn unprefixed_embeddings(&self, request: &Request, responder: Responder) {
        let body: serde_json::Value = serde_json::from_slice(&request.body).unwrap_or_default();
        if body.get("content").is_some() && body.get("input").is_none() {
            self.native_embeddings("/embeddings", request, responder);
        } else {
            self.embeddings(request, responder);
        }
    }

    /// llama-server's `POST /embedding`: its own shape, `[{index, embedding: [[...]]}]`.
    pub(super) fn native_embeddings(&self, route: &str, request: &Request, responder: Responder) {
        self.metrics
            .embeddings_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((_, model, responder)) = self.local_model(route, responder) else {
            return;
        };
        let answer = parse_native_embeddings(&request.body).and_then(|parsed| {
            super::log_ignored(route, &parsed.ignored);
            native_embeddings(model, parsed)
        });
        match answer {
            Ok(list) => responder.json(200, &list),
            Err(error) => self.refuse(responder, &error),
        }
    }

    /// `POST /v1/embeddings`, OpenAI's shape.
    pub(super) fn embeddings(&self, request: &Request, responder: Responder) {
        self.metrics
            .embeddings_requests
            .fetch_add(1, Ordering::Relaxed);
        let Some((loaded, model, responder)) = self.local_model("/v1/embeddings", responder) else {
            return;
        };
        let n_embd = model.props().n_embd;
        let parsed = match parse_embeddings(&request.body, &loaded.defaults, n_embd) {
            Ok(parsed) => parsed,
            Err(error) => return self.refuse(responder, &error),
        };
        match embeddings(model, &parsed) {
            Ok(list) => responder.json(200, &list),
            Err(error) => self.refuse(responder, &error),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(body: Value) -> Result<EmbeddingsRequest, ApiError> {
        parse_embeddings(body.to_string().as_bytes(), &Defaults::default(), 576)
    }

    /// Each malformed body is a 400 naming `param`.
    fn check_invalid(body: Value, param: &str) {
        let error = parse(body.clone()).expect_err("an invalid request");
        assert_eq!(error.status, 400, "{body}");
        assert_eq!(error.param.as_deref(), Some(param), "{body}: {error:?}");
    }

    #[test]
    fn every_input_shape_openai_allows_is_taken() {
        let text = |s: &str| EmbedInput::Text(s.into());
        let cases = [
            (json!("a"), vec![text("a")]),
            (json!(["a", "b"]), vec![text("a"), text("b")]),
            (json!([1, 2]), vec![EmbedInput::Tokens(vec![1, 2])]),
            (
                json!([[1], [2, 3]]),
                vec![EmbedInput::Tokens(vec![1]), EmbedInput::Tokens(vec![2, 3])],
            ),
            (
                json!(["a", {"content": [{"type": "text", "text": "b"}, {"type": "text", "text": "c"}]}]),
                vec![text("a"), text("bc")],
            ),
        ];
        for (input, expected) in cases {
            let request = parse(json!({"input": input})).unwrap();
            assert_eq!(request.inputs, expected, "{input}");
            assert!(!request.base64);
        }
        let request = parse(json!({"input": "a", "encoding_format": "base64", "dimensions": 576}));
        assert!(request.unwrap().base64);
    }

    #[test]
    fn malformed_embedding_requests_are_400s_naming_the_field() {
        check_invalid(json!({}), "input");
        check_invalid(json!({"input": ""}), "input");
        check_invalid(json!({"input": []}), "input");
        check_invalid(json!({"input": 7}), "input");
        check_invalid(json!({"input": [{"text": "a"}]}), "input[0].content");
        check_invalid(json!({"input": {"content": "a"}}), "input.content");
        check_invalid(
            json!({"input": [{"content": [{"type": "image_url"}]}]}),
            "input[0].content[0].type",
        );
        check_invalid(json!({"input": [1.5]}), "input");
        check_invalid(json!({"input": [[1], [1_u64 << 40]]}), "input[1]");
        check_invalid(
            json!({"input": "a", "encoding_format": "int8"}),
            "encoding_format",
        );
        check_invalid(json!({"input": "a", "dimensions": 128}), "dimensions");
        check_invalid(json!({"input": "a", "pooling": "mean"}), "pooling");
        let error = parse_embeddings(b"[", &Defaults::default(), 576).unwrap_err();
        assert_eq!(error.status, 400);
    }

    #[test]
    fn base64_embeddings_are_little_endian_f32_bytes() {
        // 1.0 = 00 00 80 3f, -2.0 = 00 00 00 c0.
        assert_eq!(base64_floats(&[1.0, -2.0]), "AACAPwAAAMA=");
    }

    #[test]
    fn model_errors_map_to_the_input_at_fault_or_a_500() {
        let invalid = ModelError::Invalid {
            index: Some(2),
            message: "too long".into(),
        };
        let error = from_model(invalid, "input");
        assert_eq!(
            (error.status, error.param.as_deref()),
            (400, Some("input[2]"))
        );
        let failed = from_model(ModelError::Failed("decode".into()), "input");
        assert_eq!(failed.status, 500);
    }
}

//! The routes only the in-process model answers: `POST /v1/embeddings`
//! (OpenAI's shape), and llama-server's `POST /tokenize`, `POST /detokenize`
//! and `GET /props`, so tools written for llama-server find what they look
//! for. Served on the connection's thread through the model's
//! [`LocalModel`] handle (one job each on the generation thread); with any
//! other backend they answer 501.
//!
//! Bodies are checked field by field like chat completions'; a fault is a 400
//! naming the field, and token ids are checked against the vocabulary on the
//! generation thread before llama.cpp sees them.

use serde_json::Value;

use super::error::ApiError;
use super::fields::{json_body, only_known, Fields};
use super::wire::{llama as lwire, openai as owire};
use super::Defaults;
use crate::backend::llamacpp::{EmbedInput, LocalModel, ModelError, ModelProps, SlotReport};
use crate::backend::Sampling;
use crate::frontend::http::Request;
use crate::llama::{SamplerParams, Token};

/// Most inputs one embeddings request may carry (OpenAI's limit).
const MAX_INPUTS: usize = 2048;

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
/// of token ids or an array of such arrays; `encoding_format` float or base64;
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
    let inputs = embedding_inputs(f.get("input"))?;
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

fn embedding_inputs(input: Option<&Value>) -> Result<Vec<EmbedInput>, ApiError> {
    let wrong = || {
        ApiError::invalid(
            "input",
            "'input' must be a string, an array of strings, an array of token ids or an array of arrays of token ids",
        )
    };
    let inputs = match input {
        None => return Err(ApiError::invalid("input", "'input' is required")),
        Some(Value::String(text)) => vec![EmbedInput::Text(text.clone())],
        Some(Value::Array(items)) if items.iter().all(Value::is_number) => {
            vec![EmbedInput::Tokens(token_ids(items, "input")?)]
        }
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(i, item)| match item {
                Value::String(text) => Ok(EmbedInput::Text(text.clone())),
                Value::Array(ids) => {
                    Ok(EmbedInput::Tokens(token_ids(ids, &format!("input[{i}]"))?))
                }
                _ => Err(wrong()),
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err(wrong()),
    };
    if inputs.is_empty() || inputs.len() > MAX_INPUTS {
        return Err(ApiError::invalid(
            "input",
            format!("'input' must hold 1 to {MAX_INPUTS} inputs"),
        ));
    }
    for (i, input) in inputs.iter().enumerate() {
        let empty = match input {
            EmbedInput::Text(text) => text.is_empty(),
            EmbedInput::Tokens(tokens) => tokens.is_empty(),
        };
        if empty {
            return Err(ApiError::invalid("input", format!("input {i} is empty")));
        }
    }
    Ok(inputs)
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
pub fn props<'a>(props: &'a ModelProps, defaults: &'a Defaults) -> lwire::Props<'a> {
    lwire::Props {
        default_generation_settings: lwire::GenerationSettings {
            n_ctx: props.n_ctx_slot,
            params: params(&defaults.sampling),
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
            vision: false,
            audio: false,
        },
        build_info: super::FINGERPRINT,
    }
}

/// `GET /slots`.
pub fn slots(model: &LocalModel) -> Result<Vec<lwire::Slot>, ApiError> {
    let slots = model.slots().map_err(|e| from_model(e, ""))?;
    Ok(slots
        .into_iter()
        .map(|s| lwire::Slot {
            id: s.id,
            n_ctx: s.n_ctx,
            speculative: s.speculative,
            is_processing: s.is_processing,
            n_cached: s.n_cached,
            n_decoded: s.n_decoded,
        })
        .collect())
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

/// The sampling `sampling` comes to, llama.cpp's defaults filled in for what it
/// leaves out (`/props`, and `/completion`'s `generation_settings`).
pub fn params(sampling: &Sampling) -> lwire::Params<'_> {
    let fallback = SamplerParams::default();
    lwire::Params {
        temperature: sampling.temperature.unwrap_or(fallback.temperature),
        top_k: sampling
            .top_k
            .map_or(fallback.top_k, |k| i32::try_from(k).unwrap_or(i32::MAX)),
        top_p: sampling.top_p.unwrap_or(fallback.top_p),
        min_p: sampling.min_p.unwrap_or(fallback.min_p),
        repeat_penalty: sampling.repeat_penalty.unwrap_or(fallback.repeat_penalty),
        n_predict: sampling.max_tokens.map_or(-1, i64::from),
        seed: sampling.seed.unwrap_or(u64::from(fallback.seed)),
        stop: &sampling.stop,
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
        check_invalid(json!({"input": [{"text": "a"}]}), "input");
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

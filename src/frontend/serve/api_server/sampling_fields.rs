//! The generation fields that OpenAI's chat and text completions,
//! llama-server's `/completion`, the Responses API and Ollama's options
//! share: sampling (with llama-server's extensions and `logit_bias`), the
//! streamed reports (`timings_per_token`, `return_progress`), the chat template's
//! kwargs, `stream_options` and the response formats (a JSON schema checked
//! against what the grammar can enforce).

use serde_json::{json, Map, Value};

use super::error::ApiError;
use super::fields::{stop_list, Fields};
use super::Defaults;
use crate::backend::{ResponseFormat, Sampling, Telemetry};

/// The most choices one request may ask for.
pub const MAX_CHOICES: i64 = 16;

/// llama-server's reports a streamed answer may ask for: the prompt's progress
/// (`return_progress`) and the figures with every chunk (`timings_per_token`);
/// a whole answer has its figures at the end, so it asks for neither.
pub fn telemetry(f: &Fields<'_>, stream: bool) -> Result<Telemetry, ApiError> {
    Ok(Telemetry {
        progress: f.bool("return_progress")?.unwrap_or(false) && stream,
        timings: f.bool("timings_per_token")?.unwrap_or(false) && stream,
        prompt: false,
    })
}

/// The chat template's variables a request gives, as llama-server reads them:
/// `chat_template_kwargs` (an object; `enable_thinking` in it a boolean), and
/// OpenAI's `reasoning_effort`, where `none` turns thinking off and a level is
/// passed on as `reasoning_effort` (gpt-oss's template reads it).
pub fn template_kwargs(f: &Fields<'_>) -> Result<Map<String, Value>, ApiError> {
    let mut kwargs = match f.get("chat_template_kwargs") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(map)) => map.clone(),
        Some(_) => {
            return Err(ApiError::invalid(
                "chat_template_kwargs",
                "'chat_template_kwargs' must be an object",
            ))
        }
    };
    if kwargs
        .get("enable_thinking")
        .is_some_and(|v| !v.is_boolean())
    {
        return Err(ApiError::invalid(
            "chat_template_kwargs",
            "'chat_template_kwargs.enable_thinking' must be true or false",
        ));
    }
    match f.str("reasoning_effort")? {
        None | Some("") => {}
        Some("none") => {
            kwargs.insert("enable_thinking".into(), Value::Bool(false));
        }
        Some(level) => {
            kwargs.insert("reasoning_effort".into(), Value::String(level.into()));
        }
    }
    Ok(kwargs)
}

/// The sampling and length fields chat and text completions share, over the
/// server's defaults.
pub fn sampling(f: &Fields<'_>, defaults: &Defaults) -> Result<Sampling, ApiError> {
    let mut sampling = defaults.sampling.clone();
    let max_len = defaults.max_tokens_limit();
    // llama-server's `n_predict` too, where -1 (or 0) means no cap but the context.
    let length = f
        .integer("max_completion_tokens", 1, max_len)?
        .or(f.integer("max_tokens", 1, max_len)?)
        .or(f.integer("n_predict", -1, max_len)?.filter(|&n| n > 0));
    if let Some(n) = length {
        sampling.max_tokens = u32::try_from(n).ok();
    }
    if let Some(t) = f.number("temperature", 0.0, 2.0)? {
        sampling.temperature = Some(t);
    }
    if let Some(p) = f.number("top_p", 0.0, 1.0)? {
        sampling.top_p = Some(p);
    }
    if let Some(k) = f.integer("top_k", 0, 1_000_000)? {
        sampling.top_k = u32::try_from(k).ok();
    }
    sampling.min_p = f.number("min_p", 0.0, 1.0)?.or(sampling.min_p);
    sampling.repeat_penalty = f
        .number("repeat_penalty", 0.0, 10.0)?
        .or(sampling.repeat_penalty);
    sampling.repeat_last_n = f
        .integer("repeat_last_n", -1, 1 << 20)?
        .map(|n| n as i32)
        .or(sampling.repeat_last_n);
    sampling.frequency_penalty = f
        .number("frequency_penalty", -2.0, 2.0)?
        .or(sampling.frequency_penalty);
    sampling.presence_penalty = f
        .number("presence_penalty", -2.0, 2.0)?
        .or(sampling.presence_penalty);
    if let Some(seed) = f.unsigned("seed")? {
        sampling.seed = Some(seed);
    }
    if f.has("stop") {
        sampling.stop = stop_list(f, "stop", 4)?;
    }
    sampling.response_format = llama_server_format(f)?.or(sampling.response_format);
    (sampling.logit_bias, sampling.logit_bias_text) = logit_bias(f)?;
    Ok(sampling)
}

/// Biases by token id, and by text.
type Biases = (Vec<(i32, f32)>, Vec<(String, f32)>);
/// A `logit_bias` key: a token id, or text to tokenize.
type BiasKey = Result<i32, String>;

/// `logit_bias`: OpenAI's object of token id to bias (-100 to 100), or
/// llama-server's array of `[id, bias]` pairs, where a bias of `false` bans the
/// token; as in llama-server, a key that is text and not an id (or a pair's
/// first that is a string) biases each token of that text (tokenized by
/// [`super::local_sampling`], which also checks ids against the vocabulary).
/// The id-keyed biases, then the text-keyed ones.
pub fn logit_bias(f: &Fields<'_>) -> Result<Biases, ApiError> {
    let wrong = || {
        ApiError::invalid(
            "logit_bias",
            "'logit_bias' maps token ids or text to a bias from -100 to 100 (or false to ban it)",
        )
    };
    let bias = |value: &Value| match value {
        Value::Bool(false) => Some(f32::NEG_INFINITY),
        value => value
            .as_f64()
            .filter(|b| (-100.0..=100.0).contains(b))
            .map(|b| b as f32),
    };
    // A key that reads as a whole number is an id (a negative one is no id);
    // other text is tokenized, empty text is nothing to bias.
    let key = |text: &str| match text.trim().parse::<i64>() {
        Ok(n) => i32::try_from(n).ok().filter(|&n| n >= 0).map(Ok),
        Err(_) => (!text.is_empty()).then(|| Err(text.to_string())),
    };
    let pairs: Vec<(Option<BiasKey>, Option<f32>)> = match f.get("logit_bias") {
        None => return Ok((Vec::new(), Vec::new())),
        Some(Value::Object(map)) => map.iter().map(|(k, v)| (key(k), bias(v))).collect(),
        Some(Value::Array(items)) => items
            .iter()
            .map(|item| match item.as_array().map(Vec::as_slice) {
                // A pair's string is text, even one that reads as a number.
                Some([Value::String(text), b]) => {
                    ((!text.is_empty()).then(|| Err(text.clone())), bias(b))
                }
                Some([token, b]) => (token.as_i64().and_then(|n| key(&n.to_string())), bias(b)),
                _ => (None, None),
            })
            .collect(),
        Some(_) => return Err(wrong()),
    };
    let (mut ids, mut texts) = (Vec::new(), Vec::new());
    for pair in pairs {
        match pair {
            (Some(Ok(token)), Some(bias)) => ids.push((token, bias)),
            (Some(Err(text)), Some(bias)) => texts.push((text, bias)),
            _ => return Err(wrong()),
        }
    }
    Ok((ids, texts))
}

/// llama-server's own constraints: a GBNF `grammar`, or a top-level
/// `json_schema` (checked as `response_format`'s is).
pub fn llama_server_format(f: &Fields<'_>) -> Result<Option<ResponseFormat>, ApiError> {
    if let Some(grammar) = f.str("grammar")?.filter(|g| !g.trim().is_empty()) {
        return Ok(Some(ResponseFormat::Grammar(grammar.to_string())));
    }
    let Some(schema) = f.get("json_schema") else {
        return Ok(None);
    };
    schema_format("json_schema", schema).map(Some)
}

/// A bare JSON schema as a strict constraint (llama-server's `json_schema`,
/// Ollama's `format`), checked as `response_format`'s is; `param` names the field.
pub fn schema_format(param: &str, schema: &Value) -> Result<ResponseFormat, ApiError> {
    if !schema.is_object() {
        return Err(ApiError::invalid(
            param,
            format!("'{param}' must be a JSON schema object"),
        ));
    }
    crate::llama::grammar::check_schema(schema).map_err(|e| {
        let mut error = ApiError::invalid(param, e.to_string());
        error.code = Some("unsupported_schema".into());
        error
    })?;
    Ok(ResponseFormat::JsonSchema {
        name: param.into(),
        schema: schema.clone(),
        strict: true,
    })
}

/// `stream_options.include_usage`; the options need `stream`.
pub fn stream_options(f: &Fields<'_>, stream: bool) -> Result<bool, ApiError> {
    let Some(options) = f.object("stream_options")? else {
        return Ok(false);
    };
    if !stream {
        return Err(ApiError::invalid(
            "stream_options",
            "'stream_options' is only allowed when 'stream' is true",
        ));
    }
    Ok(options.bool("include_usage")?.unwrap_or(false))
}

pub fn response_format(f: &Fields<'_>) -> Result<Option<ResponseFormat>, ApiError> {
    let Some(format) = f.object("response_format")? else {
        return Ok(None);
    };
    match format.object("json_schema")? {
        Some(spec) => format_of(&format, &spec),
        None => format_of(&format, &format),
    }
}

/// A response format from its `type` in `format` and, for `json_schema`, the
/// `name`, `schema` and `strict` in `spec` (chat nests them in `json_schema`,
/// the Responses API puts them beside the type). `name` may be left out, as
/// OpenAI allows (`response` then); a `json_object` with a `schema` beside its
/// type is that schema, as in llama-server. A schema is checked here: a keyword
/// the grammar cannot enforce is a 400 naming it, never ignored.
pub fn format_of(
    format: &Fields<'_>,
    spec: &Fields<'_>,
) -> Result<Option<ResponseFormat>, ApiError> {
    let kind = format
        .choice("type", &["text", "json_object", "json_schema"])?
        .ok_or_else(|| format.missing("type", "text, json_object or json_schema"))?;
    Ok(match kind {
        "text" => None,
        "json_object" if !format.has("schema") => Some(ResponseFormat::JsonObject),
        _ => {
            let spec = if kind == "json_object" { format } else { spec };
            if !spec.has("name") && !format.has("json_schema") && !format.has("schema") {
                return Err(format.missing("json_schema", "an object"));
            }
            let name = spec.str("name")?.unwrap_or("response").to_string();
            let schema = match spec.get("schema") {
                Some(schema @ Value::Object(_)) => schema.clone(),
                None => json!({"type": "object"}),
                Some(_) => {
                    return Err(ApiError::invalid(
                        &spec.name("schema"),
                        "'schema' must be a JSON schema object",
                    ))
                }
            };
            crate::llama::grammar::check_schema(&schema).map_err(|e| {
                let mut error = ApiError::invalid(&spec.name("schema"), e.to_string());
                error.code = Some("unsupported_schema".into());
                error
            })?;
            let strict = spec.bool("strict")?.unwrap_or(false);
            Some(ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            })
        }
    })
}

//! A request in the generation thread's terms: the prompt's tokens, the grammar
//! that forces a tool call, the sampler; and the generated text back as a
//! [`Reply`], a forced call parsed.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use super::prompt_tokens::PromptTokens;
use crate::backend::{Reply, ResponseFormat, Sampling, ToolChoice};
use crate::core::{BackendError, FinishReason, ToolCall, ToolSpec};
use crate::llama::{self, Model, SamplerParams, Token};

pub(super) fn tokenize_prompt(
    model: &Model,
    cache: &mut PromptTokens,
    prompt: &str,
) -> Result<Vec<Token>, BackendError> {
    let bos = model.bos_text();
    let add_bos = model.adds_bos() && (bos.is_empty() || !prompt.starts_with(&bos));
    let tokens = cache
        .tokenize(model, prompt, add_bos)
        .map_err(|e| BackendError::Config(e.to_string()))?;
    if tokens.is_empty() {
        return Err(BackendError::Config("the rendered prompt is empty".into()));
    }
    Ok(tokens)
}

pub(super) fn common_prefix(a: &[Token], b: &[Token]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// The tools a grammar must force, or `None` when the model may answer freely.
pub(super) fn forced_tools(
    tools: &[ToolSpec],
    choice: &ToolChoice,
) -> Result<Option<String>, BackendError> {
    let selected: Vec<&ToolSpec> = match choice {
        ToolChoice::Required => tools.iter().collect(),
        ToolChoice::Named(name) => tools.iter().filter(|t| &t.name == name).collect(),
        ToolChoice::Auto | ToolChoice::None => return Ok(None),
    };
    if selected.is_empty() {
        return Err(BackendError::Config(format!(
            "tool_choice {choice:?} names no offered tool"
        )));
    }
    let pairs = selected.iter().map(|t| (t.name.as_str(), &t.parameters));
    Ok(Some(llama::grammar::tool_call_grammar(pairs)))
}

pub(super) fn sampler_params(
    sampling: &Sampling,
    grammar: Option<&str>,
) -> Result<SamplerParams, BackendError> {
    let defaults = SamplerParams::default();
    // A forced tool call wins over `response_format`: the call is JSON already.
    let grammar = grammar.map(str::to_string).or_else(|| {
        sampling
            .response_format
            .as_ref()
            .map(|format| match format {
                ResponseFormat::JsonObject => llama::grammar::json_grammar(None),
                ResponseFormat::JsonSchema { schema, .. } => {
                    llama::grammar::json_grammar(Some(schema))
                }
            })
    });
    let params = SamplerParams {
        temperature: sampling.temperature.unwrap_or(defaults.temperature),
        top_p: sampling.top_p.unwrap_or(defaults.top_p),
        top_k: sampling
            .top_k
            .map_or(defaults.top_k, |k| i32::try_from(k).unwrap_or(i32::MAX)),
        seed: sampling.seed.map_or(defaults.seed, |s| s as u32),
        min_p: sampling.min_p.unwrap_or(defaults.min_p),
        repeat_penalty: sampling.repeat_penalty.unwrap_or(defaults.repeat_penalty),
        penalty_last_n: sampling.repeat_last_n.unwrap_or(defaults.penalty_last_n),
        frequency_penalty: sampling
            .frequency_penalty
            .unwrap_or(defaults.frequency_penalty),
        presence_penalty: sampling
            .presence_penalty
            .unwrap_or(defaults.presence_penalty),
        grammar,
    };
    params
        .validate()
        .map_err(|e| BackendError::Config(e.to_string()))?;
    Ok(params)
}

/// The reply for the generated `text`: a forced tool call parsed, else the text.
pub(super) fn finish_reply(
    forced_tools: bool,
    text: String,
    finish: FinishReason,
) -> Result<Reply, BackendError> {
    let mut reply = Reply {
        content: String::new(),
        thinking: String::new(),
        tool_calls: Vec::new(),
        finish,
        usage: None,
        artefacts: Vec::new(),
    };
    if finish == FinishReason::Cancelled {
        reply.content = text;
        return Ok(reply);
    }
    if forced_tools {
        reply.tool_calls.push(parse_forced_call(&text)?);
        reply.finish = FinishReason::ToolCalls;
        return Ok(reply);
    }
    // The caller's output filter turns this text into content, thinking and tool calls.
    reply.content = text;
    Ok(reply)
}

/// Parses the grammar-forced `{"name": ..., "arguments": {...}}` object.
fn parse_forced_call(text: &str) -> Result<ToolCall, BackendError> {
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| {
        BackendError::Protocol(format!("forced tool call is not JSON ({e}): {text}"))
    })?;
    call_from_json(&value)
        .ok_or_else(|| BackendError::Protocol(format!("forced tool call has no name: {text}")))
}

fn call_from_json(value: &Value) -> Option<ToolCall> {
    // Ids must be unique across the whole conversation, not just one reply.
    static NEXT_ID: AtomicU64 = AtomicU64::new(1);
    let name = value.get("name")?.as_str()?.to_string();
    let arguments = value
        .get("arguments")
        .cloned()
        .unwrap_or_else(|| serde_json::json!({}));
    let id = format!("call_forced_{}", NEXT_ID.fetch_add(1, Ordering::Relaxed));
    Some(ToolCall {
        id,
        name,
        arguments,
    })
}

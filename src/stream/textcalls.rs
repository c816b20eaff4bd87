//! Parsers for tool calls that models write as text instead of using the API's
//! native field, one per family's syntax: bare JSON; Hermes/Qwen
//! `<tool_call>{…}</tool_call>`; Qwen3-Coder and Seed-OSS `<function=…><parameter=…>`;
//! Llama 3.1 and Functionary `<function=NAME>{…}</function>` and `<|python_tag|>`;
//! GLM `<arg_key>/<arg_value>`; Anthropic, MiniMax and DeepSeek V3.2 (DSML)
//! `<invoke name=…>`; Mistral `[TOOL_CALLS]` (a JSON array, or `NAME[ARGS]{…}`);
//! DeepSeek R1 and V3.1 `<｜tool▁call▁begin｜>`; Kimi K2 `functions.NAME:N`; Granite
//! `<|tool_call|>[…]`; Command R `<|START_ACTION|>`; Nemotron `<TOOLCALL>`; Apertus
//! `<|tools_prefix|>`; LFM2's Python calls; Gemma 4 `<|tool_call>call:NAME{…}`;
//! Firefunction `functools[…]`; gpt-oss harmony messages addressed `to=functions.NAME`.
//!
//! The output filter ([`super::filter`]) decides which stretch of text is
//! markup (by the opening markers of [`super::format`]) and hands it here whole.
//! Every call is validated against the registered tool names; an id is kept
//! when the format carries one, else left empty for the filter to synthesise.
//! A missing closing tag is tolerated: generation often stops on it.

mod python;
mod tags;
mod typed;

use serde_json::{Map, Value};

use crate::core::ToolCall;
pub use python::{parse_gemma4, parse_python_tag, python_calls};
pub use tags::{
    parse_dsml, parse_functions, parse_invokes, parse_minimax_m3, parse_named_functions,
    parse_open_calls, parse_tool_call_body,
};

/// A tool the model may call: its name and, where known, its parameters' JSON schema,
/// which types the values of the formats that write every value as text (a string
/// parameter `123` stays the string "123", as llama.cpp's parsers keep it).
#[derive(Debug, Clone)]
pub struct Offered {
    pub name: String,
    pub parameters: Option<Value>,
}

impl Offered {
    /// Tools known by name only: values are typed by how they read.
    pub fn names(names: Vec<String>) -> Vec<Offered> {
        let offered = |name| Offered {
            name,
            parameters: None,
        };
        names.into_iter().map(offered).collect()
    }
}

/// The body of a message addressed to tool `name` (gpt-oss harmony, up to the
/// message's end marker; Functionary): its JSON arguments.
pub fn parse_addressed(name: &str, body: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let body = body.trim();
    // Muse Glimmer writes its calls as `<atem:function_calls><atem:invoke …>`.
    if body.starts_with("<atem:function_calls>") {
        let plain = body.replace("<atem:", "<").replace("</atem:", "</");
        return validate(parse_invokes(&plain, "", tools)?, tools);
    }
    let arguments = if body.is_empty() {
        Value::Object(Map::new())
    } else {
        serde_json::from_str(body).ok()?
    };
    validate(vec![call(name, arguments)], tools)
}

/// Calls read by a learnt syntax (`format::LearntCall::read`), kept when every
/// one names an offered tool.
pub fn named_calls(calls: Vec<(String, Value)>, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let calls = calls
        .into_iter()
        .map(|(name, arguments)| call(&name, arguments));
    validate(calls.collect(), tools)
}

/// The arguments of a call the model did not finish, as far as it wrote them:
/// `value` (read from the cut text as if whole) as JSON text without the
/// closing the model never wrote (`{"city": "Par"}` was `{"city": "Par`).
pub fn unclosed(value: &Value) -> String {
    let text = value.to_string();
    let open = text.trim_end_matches(['}', ']']);
    open.strip_suffix('"').unwrap_or(open).to_string()
}

/// A JSON call cut before its end (`{"name": "bash", "arguments": {"command": "ls -`):
/// its name, when it names an offered tool, and its arguments' text exactly as far
/// as written (empty when the cut came before them).
pub fn cut_json_call(text: &str, tools: &[Offered]) -> Option<ToolCall> {
    let (name, arguments) = cut_json_parts(text)?;
    let mut calls = validate(vec![call(name, Value::Null)], tools)?;
    let mut found = calls.pop()?;
    found.arguments = Value::String(arguments.to_string());
    Some(found)
}

/// A JSON call cut before its end: its name and its arguments' text as far as
/// written (empty when the cut came before them).
pub fn cut_json_parts(text: &str) -> Option<(&str, &str)> {
    let after_key = |key: &str| {
        let at = text.find(&format!("\"{key}\""))? + key.len() + 2;
        let rest = text[at..].trim_start().strip_prefix(':')?;
        Some(rest.trim_start())
    };
    let named = after_key("name")?.strip_prefix('"')?;
    let name = &named[..named.find('"')?];
    let arguments = after_key("arguments")
        .or_else(|| after_key("parameters"))
        .unwrap_or("");
    Some((name, arguments.trim_end()))
}

/// A message addressed to tool `name` (harmony, Functionary) cut before its end: the
/// call, when `name` is offered, with its body's text exactly as far as written.
pub fn cut_addressed(name: &str, body: &str, tools: &[Offered]) -> Option<ToolCall> {
    let mut found = validate(vec![call(name, Value::Null)], tools)?.pop()?;
    found.arguments = Value::String(body.trim().to_string());
    Some(found)
}

/// Parses a bare JSON call `{"name": …, "arguments"|"parameters": {…}}`.
pub fn parse_json_call(text: &str, tools: &[Offered]) -> Option<ToolCall> {
    let call = parse_json_object(text)?;
    validate(vec![call], tools)?.pop()
}

/// Keeps the calls only when every one names a registered tool (matched
/// case-insensitively, reported with the registered spelling).
pub fn validate(calls: Vec<ToolCall>, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    if calls.is_empty() {
        return None;
    }
    calls
        .into_iter()
        .map(|mut call| {
            call.name = resolve(&call.name, tools)?.name.clone();
            Some(call)
        })
        .collect()
}

/// The offered tool `name` names: the exact spelling, else matched ignoring case.
fn resolve<'a>(name: &str, tools: &'a [Offered]) -> Option<&'a Offered> {
    let name = name.trim();
    tools
        .iter()
        .find(|t| t.name == name)
        .or_else(|| tools.iter().find(|t| t.name.eq_ignore_ascii_case(name)))
}

/// The text before `close`, or all of it when the closing tag never came.
fn inner<'a>(text: &'a str, close: &str) -> &'a str {
    text.find(close).map_or(text, |end| &text[..end])
}

fn call(name: &str, arguments: Value) -> ToolCall {
    ToolCall {
        id: String::new(),
        name: name.trim().to_string(),
        arguments,
    }
}

/// `{"name", "arguments"|"parameters"}`, also the OpenAI `{"function": {…}}` shape.
pub fn parse_json_object(text: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let object = value.as_object()?;
    if let Some(function) = object.get("function").and_then(Value::as_object) {
        return call_from_object(function);
    }
    call_from_object(object)
}

/// `{"name", "arguments"|"parameters", "id"?}`, Command R's `{"tool_name",
/// "parameters", "tool_call_id"}`, or Apertus's `{"NAME": {arguments}}`.
fn call_from_object(object: &Map<String, Value>) -> Option<ToolCall> {
    let Some(name) = object.get("name").or_else(|| object.get("tool_name")) else {
        return match object.iter().next() {
            Some((name, arguments @ Value::Object(_))) if object.len() == 1 => {
                Some(call(name, arguments.clone()))
            }
            _ => None,
        };
    };
    let arguments = match object.get("arguments").or_else(|| object.get("parameters")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => super::toolcall::parse_arguments(s),
        Some(other) => other.clone(),
    };
    let mut found = call(name.as_str()?, arguments);
    let id = object.get("id").or_else(|| object.get("tool_call_id"));
    if let Some(id) = id.and_then(Value::as_str) {
        found.id = id.to_string();
    }
    Some(found)
}

/// The JSON value at the start of `text` and the text after it.
fn leading_json(text: &str) -> Option<(Value, &str)> {
    let text = text.trim_start();
    let mut values = serde_json::Deserializer::from_str(text).into_iter::<Value>();
    let value = values.next()?.ok()?;
    Some((value, &text[values.byte_offset()..]))
}

/// A JSON array of call objects, or one call object.
pub fn json_calls(text: &str) -> Option<Vec<ToolCall>> {
    match leading_json(text)?.0 {
        Value::Array(items) => items
            .iter()
            .map(|item| call_from_object(item.as_object()?))
            .collect(),
        Value::Object(object) => call_from_object(&object).map(|c| vec![c]),
        _ => None,
    }
}

/// Firefunction's `functools[…]`: the JSON calls after the word.
pub fn json_after_word(text: &str) -> Option<Vec<ToolCall>> {
    json_calls(text.trim_start_matches(|c: char| c.is_ascii_alphabetic()))
}

/// Mistral: `[{"name", "arguments", "id"}]` (Nemo), or `NAME[ARGS]{…}` with an
/// optional `[CALL_ID]ID` before `[ARGS]` (Small 3.2, Magistral, Devstral), each
/// further call after another `[TOOL_CALLS]`.
pub fn parse_mistral(rest: &str) -> Option<Vec<ToolCall>> {
    if rest.trim_start().starts_with('[') {
        return json_calls(rest);
    }
    let mut calls = Vec::new();
    for part in rest.split("[TOOL_CALLS]") {
        if part.trim().is_empty() {
            continue;
        }
        let (head, arguments) = part.split_once("[ARGS]")?;
        let (name, id) = head.split_once("[CALL_ID]").unwrap_or((head, ""));
        let mut found = call(name, leading_json(arguments)?.0);
        found.id = id.trim().to_string();
        calls.push(found);
    }
    Some(calls)
}

/// DeepSeek R1 (`function<｜tool▁sep｜>NAME\n```json\n{…}\n````) and V3.1
/// (`NAME<｜tool▁sep｜>{…}`) calls, each between `<｜tool▁call▁begin｜>` and
/// `<｜tool▁call▁end｜>`.
pub fn parse_deepseek(body: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    for part in body.split("<｜tool▁call▁begin｜>").skip(1) {
        let part = inner(part, "<｜tool▁call▁end｜>");
        let (head, rest) = part.split_once("<｜tool▁sep｜>")?;
        let (name, arguments) = if head.trim() == "function" || head.trim().is_empty() {
            let (name, fenced) = rest.split_once('\n').unwrap_or((rest, ""));
            let json = fenced
                .trim()
                .trim_start_matches("```json")
                .trim_start_matches("```");
            (name, leading_json(json)?.0)
        } else {
            (head, leading_json(rest)?.0)
        };
        calls.push(call(name, arguments));
    }
    Some(calls)
}

/// Kimi K2: `<|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>{…}<|tool_call_end|>`;
/// `functions.NAME:N` is the call's id.
pub fn parse_kimi(body: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    for part in body.split("<|tool_call_begin|>").skip(1) {
        let part = inner(part, "<|tool_call_end|>");
        let (id, arguments) = part.split_once("<|tool_call_argument_begin|>")?;
        let id = id.trim();
        let name = id.strip_prefix("functions.").unwrap_or(id);
        let name = name.rsplit_once(':').map_or(name, |(name, _)| name);
        let mut found = call(name, leading_json(arguments)?.0);
        found.id = id.to_string();
        calls.push(found);
    }
    Some(calls)
}

#[cfg(test)]
mod tests {
    use super::typed::param_value;
    use serde_json::json;

    #[test]
    fn param_values() {
        assert_eq!(param_value("\n42\n"), json!(42));
        assert_eq!(param_value("hello"), json!("hello"));
        assert_eq!(param_value("\n  indented\n"), json!("  indented"));
        assert_eq!(param_value("[1, 2]"), json!([1, 2]));
    }
}

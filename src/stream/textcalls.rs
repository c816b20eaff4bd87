//! Parsers for tool calls that models write as text instead of using the API's
//! native field: bare JSON, Hermes/ChatML `<tool_call>{…}</tool_call>`,
//! Qwen3-Coder `<function=…><parameter=…>`, GLM `<arg_key>/<arg_value>`,
//! `<tool>{…}</tool>` and Anthropic-style `<function_calls><invoke>`.
//!
//! The output filter ([`super::filter`]) decides which stretch of text is
//! markup and hands it here whole. Every call is validated against the
//! registered tool names; ids are left empty for the filter to synthesise.
//! A missing closing tag is tolerated: generation often stops on it.

use serde_json::{Map, Value};

use crate::core::ToolCall;

/// Parses one stretch of tool-call markup. `None` when it is not a well-formed
/// call to a registered tool (then the filter shows it as plain text).
pub fn parse_markup(text: &str, tool_names: &[String]) -> Option<Vec<ToolCall>> {
    let text = text.trim();
    let calls = if text.starts_with("<function_calls>") {
        parse_invokes(text)
    } else if let Some(rest) = text.strip_prefix("<tool_call>") {
        parse_tool_call_body(inner(rest, "</tool_call>"))
    } else if let Some(rest) = text.strip_prefix("<tool>") {
        parse_json_object(inner(rest, "</tool>")).map(|c| vec![c])
    } else if text.starts_with("<function=") {
        parse_functions(text)
    } else {
        parse_json_object(text).map(|c| vec![c])
    }?;
    validate(calls, tool_names)
}

/// Parses a bare JSON call `{"name": …, "arguments"|"parameters": {…}}`.
pub fn parse_json_call(text: &str, tool_names: &[String]) -> Option<ToolCall> {
    let call = parse_json_object(text)?;
    validate(vec![call], tool_names)?.pop()
}

/// Keeps the calls only when every one names a registered tool (matched
/// case-insensitively, reported with the registered spelling).
fn validate(calls: Vec<ToolCall>, tool_names: &[String]) -> Option<Vec<ToolCall>> {
    if calls.is_empty() {
        return None;
    }
    calls
        .into_iter()
        .map(|mut call| {
            call.name = resolve_name(&call.name, tool_names)?;
            Some(call)
        })
        .collect()
}

fn resolve_name(name: &str, tool_names: &[String]) -> Option<String> {
    let name = name.trim();
    tool_names
        .iter()
        .find(|t| t.as_str() == name)
        .or_else(|| tool_names.iter().find(|t| t.eq_ignore_ascii_case(name)))
        .cloned()
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
fn parse_json_object(text: &str) -> Option<ToolCall> {
    let value: Value = serde_json::from_str(text.trim()).ok()?;
    let object = value.as_object()?;
    if let Some(function) = object.get("function").and_then(Value::as_object) {
        return call_from_object(function);
    }
    call_from_object(object)
}

fn call_from_object(object: &Map<String, Value>) -> Option<ToolCall> {
    let name = object.get("name")?.as_str()?;
    let arguments = match object.get("arguments").or_else(|| object.get("parameters")) {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) => super::toolcall::parse_arguments(s),
        Some(other) => other.clone(),
    };
    Some(call(name, arguments))
}

/// The inside of `<tool_call>`: JSON, Qwen3-Coder functions, or GLM argument pairs.
fn parse_tool_call_body(body: &str) -> Option<Vec<ToolCall>> {
    let body = body.trim();
    if body.starts_with('{') {
        return parse_json_object(body).map(|c| vec![c]);
    }
    if body.starts_with("<function=") {
        return parse_functions(body);
    }
    parse_glm(body).map(|c| vec![c])
}

/// Qwen3-Coder: `<function=NAME><parameter=K>V</parameter>…</function>`, one or more.
fn parse_functions(text: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<function=") {
        let after = &rest[start + "<function=".len()..];
        let (name, body) = after.split_once('>')?;
        let body_end = body.find("</function>").unwrap_or(body.len());
        let arguments = tagged_params(&body[..body_end], "<parameter=", ">", "</parameter>")?;
        calls.push(call(name, arguments));
        rest = &body[body_end..];
    }
    Some(calls)
}

/// GLM: `NAME<arg_key>K</arg_key><arg_value>V</arg_value>…`.
fn parse_glm(body: &str) -> Option<ToolCall> {
    let name_end = body.find("<arg_key>").unwrap_or(body.len());
    let name = body[..name_end].trim();
    if name.is_empty() || name.contains(['<', '>', '{', '\n']) {
        return None;
    }
    let mut arguments = Map::new();
    let mut rest = &body[name_end..];
    while let Some(start) = rest.find("<arg_key>") {
        let after = &rest[start + "<arg_key>".len()..];
        let (key, after_key) = after.split_once("</arg_key>")?;
        let value_start = after_key.find("<arg_value>")? + "<arg_value>".len();
        let value_text = &after_key[value_start..];
        let value_end = value_text.find("</arg_value>").unwrap_or(value_text.len());
        arguments.insert(
            key.trim().to_string(),
            param_value(&value_text[..value_end]),
        );
        rest = &value_text[value_end..];
    }
    Some(call(name, Value::Object(arguments)))
}

/// Anthropic style: `<invoke name="X"><parameter name="K">V</parameter></invoke>`.
fn parse_invokes(text: &str) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<invoke") {
        let after = &rest[start + "<invoke".len()..];
        let (attributes, body) = after.split_once('>')?;
        let name = attribute(attributes, "name")?;
        let body_end = body.find("</invoke>").unwrap_or(body.len());
        let arguments = named_params(&body[..body_end])?;
        calls.push(call(&name, arguments));
        rest = &body[body_end..];
    }
    Some(calls)
}

/// `<parameter name="K">V</parameter>` pairs.
fn named_params(body: &str) -> Option<Value> {
    let mut arguments = Map::new();
    let mut rest = body;
    while let Some(start) = rest.find("<parameter") {
        let after = &rest[start + "<parameter".len()..];
        let (attributes, value_text) = after.split_once('>')?;
        let key = attribute(attributes, "name")?;
        let value_end = value_text.find("</parameter>").unwrap_or(value_text.len());
        arguments.insert(key, param_value(&value_text[..value_end]));
        rest = &value_text[value_end..];
    }
    Some(Value::Object(arguments))
}

/// `<open KEY close_key>V</close>` pairs, e.g. `<parameter=K>V</parameter>`.
fn tagged_params(body: &str, open: &str, close_key: &str, close: &str) -> Option<Value> {
    let mut arguments = Map::new();
    let mut rest = body;
    while let Some(start) = rest.find(open) {
        let after = &rest[start + open.len()..];
        let (key, value_text) = after.split_once(close_key)?;
        let value_end = value_text.find(close).unwrap_or(value_text.len());
        arguments.insert(
            key.trim().to_string(),
            param_value(&value_text[..value_end]),
        );
        rest = &value_text[value_end..];
    }
    Some(Value::Object(arguments))
}

/// The value of `key="…"` (or single-quoted) in a tag's attribute text.
fn attribute(attributes: &str, key: &str) -> Option<String> {
    let at = attributes.find(&format!("{key}="))? + key.len() + 1;
    let rest = &attributes[at..];
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'')?;
    let value = &rest[1..];
    let end = value.find(quote)?;
    Some(value[..end].to_string())
}

/// A parameter value: JSON when it parses as JSON, else the text. One leading
/// and one trailing newline are layout, not content.
pub fn param_value(raw: &str) -> Value {
    let text = raw.strip_prefix('\n').unwrap_or(raw);
    let text = text.strip_suffix('\n').unwrap_or(text);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| Value::String(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names() -> Vec<String> {
        ["read", "write", "bash"].map(String::from).to_vec()
    }

    fn check(text: &str, expected: Option<Vec<(&str, Value)>>) {
        let got = parse_markup(text, &names()).map(|calls| {
            calls
                .into_iter()
                .map(|c| (c.name, c.arguments))
                .collect::<Vec<_>>()
        });
        let expected = expected.map(|calls| {
            calls
                .into_iter()
                .map(|(n, a)| (n.to_string(), a))
                .collect::<Vec<_>>()
        });
        assert_eq!(got, expected, "text {text:?}");
    }

    #[test]
    fn json_forms() {
        check(
            r#"{"name":"read","arguments":{"path":"a"}}"#,
            Some(vec![("read", json!({"path":"a"}))]),
        );
        check(
            r#"{"name":"read","parameters":{"n":1}}"#,
            Some(vec![("read", json!({"n":1}))]),
        );
        check(
            r#"{"name":"read","arguments":"{\"p\":2}"}"#,
            Some(vec![("read", json!({"p":2}))]),
        );
        check(r#"{"name":"READ"}"#, Some(vec![("read", json!({}))]));
        check(
            r#"{"function":{"name":"bash","arguments":{}}}"#,
            Some(vec![("bash", json!({}))]),
        );
        check(r#"{"name":"unknown","arguments":{}}"#, None);
        check(r#"{"title":"read"}"#, None);
        check(r#"{"name":"read""#, None);
    }

    #[test]
    fn hermes_and_tool_tags() {
        check(
            "<tool_call>\n{\"name\": \"write\", \"arguments\": {\"x\": true}}\n</tool_call>",
            Some(vec![("write", json!({"x":true}))]),
        );
        check(
            "<tool_call>{\"name\":\"write\"}",
            Some(vec![("write", json!({}))]),
        );
        check(
            "<tool>{\"name\":\"bash\",\"arguments\":{\"command\":\"ls\"}}</tool>",
            Some(vec![("bash", json!({"command":"ls"}))]),
        );
        check("<tool_call>{\"name\":\"nope\"}</tool_call>", None);
    }

    #[test]
    fn qwen3_coder() {
        check(
            "<tool_call>\n<function=write>\n<parameter=path>\na.txt\n</parameter>\n<parameter=n>\n3\n</parameter>\n</function>\n</tool_call>",
            Some(vec![("write", json!({"path":"a.txt","n":3}))]),
        );
        check(
            "<function=bash><parameter=command>echo \"hi\"\n</parameter></function>",
            Some(vec![("bash", json!({"command":"echo \"hi\""}))]),
        );
        check("<tool_call><function=bogus></function></tool_call>", None);
    }

    #[test]
    fn glm() {
        check(
            "<tool_call>read\n<arg_key>path</arg_key>\n<arg_value>/tmp/x</arg_value>\n<arg_key>limit</arg_key><arg_value>10</arg_value></tool_call>",
            Some(vec![("read", json!({"path":"/tmp/x","limit":10}))]),
        );
        check("<tool_call>just some words here</tool_call>", None);
    }

    #[test]
    fn anthropic_invokes() {
        check(
            "<function_calls>\n<invoke name=\"read\">\n<parameter name=\"path\">b.rs</parameter>\n</invoke>\n<invoke name='bash'><parameter name=\"command\">ls -l</parameter></invoke>\n</function_calls>",
            Some(vec![("read", json!({"path":"b.rs"})), ("bash", json!({"command":"ls -l"}))]),
        );
        check(
            "<function_calls><invoke name=\"read\"><parameter name=\"o\">{\"a\":[1]}</parameter>",
            Some(vec![("read", json!({"o":{"a":[1]}}))]),
        );
        check(
            "<function_calls><invoke name=\"rm\"></invoke></function_calls>",
            None,
        );
        check("<function_calls></function_calls>", None);
    }

    #[test]
    fn param_values() {
        assert_eq!(param_value("\n42\n"), json!(42));
        assert_eq!(param_value("hello"), json!("hello"));
        assert_eq!(param_value("\n  indented\n"), json!("  indented"));
        assert_eq!(param_value("[1, 2]"), json!([1, 2]));
    }
}

//! Calls whose arguments are tags: Qwen3-Coder and Seed-OSS `<function=…>
//! <parameter=…>`, MiniCPM's `<function name=…><param name=…>`, GLM's
//! `<arg_key>/<arg_value>`, Anthropic, MiniMax and DeepSeek V3.2 `<invoke name=…>`,
//! Kimi K3's `<|open|>call`. Values written as text are typed by [`super::typed`].

use serde_json::{Map, Value};

use super::typed::{param_value, schema_types, typed, typed_value};
use super::{call, inner, parse_json_object, resolve, Offered};
use crate::core::ToolCall;

/// The inside of `<tool_call>`: JSON, Qwen3-Coder functions, or GLM argument pairs.
pub fn parse_tool_call_body(body: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let body = body.trim();
    if body.starts_with('{') {
        return parse_json_object(body).map(|c| vec![c]);
    }
    if body.starts_with("<function=") {
        return parse_functions(body, tools);
    }
    parse_glm(body, tools).map(|c| vec![c])
}

/// Qwen3-Coder and Seed-OSS `<function=NAME><parameter=K>V</parameter>…</function>`,
/// or Llama 3.1 and Functionary v3.1 `<function=NAME>{…}</function>`, one or more.
pub fn parse_functions(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<function=") {
        let after = &rest[start + "<function=".len()..];
        let (name, body) = after.split_once('>')?;
        let body_end = body.find("</function>").unwrap_or(body.len());
        let inside = body[..body_end].trim();
        let arguments = if inside.starts_with('{') {
            serde_json::from_str(inside).ok()?
        } else {
            let value = |key: &str, raw: &str| typed_value(tools, name, key, raw);
            tagged_params(inside, "<parameter=", ">", "</parameter>", &value)?
        };
        calls.push(call(name, arguments));
        rest = &body[body_end..];
    }
    Some(calls)
}

/// MiniCPM 5: `<function name="NAME"><param name="K">V</param>…</function>`, a value
/// possibly in `<![CDATA[…]]>` (then taken exactly).
pub fn parse_named_functions(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    const CDATA: &str = "<![CDATA[";
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<function") {
        let (attributes, mut body) = rest[start + "<function".len()..].split_once('>')?;
        let name = attribute(attributes, "name")?;
        let mut arguments = Map::new();
        loop {
            body = body.trim_start();
            let Some(after) = body.strip_prefix("<param") else {
                break;
            };
            let (attributes, value_text) = after.split_once('>')?;
            let key = attribute(attributes, "name")?;
            let (value, after_value) = match value_text.strip_prefix(CDATA) {
                Some(data) => {
                    let (data, after) = data.split_once("]]>")?;
                    (Value::String(data.to_string()), after)
                }
                None => {
                    let end = value_text.find("</param>").unwrap_or(value_text.len());
                    let raw = &value_text[..end];
                    (typed_value(tools, &name, &key, raw), &value_text[end..])
                }
            };
            arguments.insert(key, value);
            body = after_value.strip_prefix("</param>").unwrap_or(after_value);
        }
        calls.push(call(&name, Value::Object(arguments)));
        rest = body.strip_prefix("</function>").unwrap_or(body);
    }
    Some(calls)
}

/// GLM: `NAME<arg_key>K</arg_key><arg_value>V</arg_value>…`.
fn parse_glm(body: &str, tools: &[Offered]) -> Option<ToolCall> {
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
        let key = key.trim();
        arguments.insert(
            key.to_string(),
            typed_value(tools, name, key, &value_text[..value_end]),
        );
        rest = &value_text[value_end..];
    }
    Some(call(name, Value::Object(arguments)))
}

/// MiniMax M3 writes this before every tag of its calls.
const MINIMAX_M3: &str = "]<]minimax[>[";

/// DeepSeek V3.2's DSML: Anthropic-style invokes with every tag's name after
/// `｜DSML｜`.
pub fn parse_dsml(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let plain = text.replace("<｜DSML｜", "<").replace("</｜DSML｜", "</");
    parse_invokes(&plain, "", tools)
}

/// MiniMax M3's invokes, each tag after [`MINIMAX_M3`].
pub fn parse_minimax_m3(text: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    parse_invokes(text, MINIMAX_M3, tools)
}

/// Anthropic style: `<invoke name="X"><parameter name="K">V</parameter></invoke>`,
/// or MiniMax M3's `<invoke name="X"><K>V</K></invoke>`, each tag after `prefix`.
pub fn parse_invokes(text: &str, prefix: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find("<invoke") {
        let after = &rest[start + "<invoke".len()..];
        let (attributes, body) = after.split_once('>')?;
        let name = attribute(attributes, "name")?;
        let body_end = body.find("</invoke>").unwrap_or(body.len());
        let inside = body[..body_end]
            .strip_suffix(prefix)
            .unwrap_or(&body[..body_end]);
        let arguments = if inside.contains("<parameter") {
            let value = |key: &str, raw: &str| typed_value(tools, &name, key, raw);
            named_params(inside, &value)?
        } else {
            let schema = resolve(&name, tools).and_then(|t| t.parameters.as_ref());
            element_params(inside, prefix, schema)?
        };
        calls.push(call(&name, arguments));
        rest = &body[body_end..];
    }
    Some(calls)
}

/// `<parameter name="K">V</parameter>` pairs.
fn named_params(body: &str, value: &dyn Fn(&str, &str) -> Value) -> Option<Value> {
    let mut arguments = Map::new();
    let mut rest = body;
    while let Some(start) = rest.find("<parameter") {
        let after = &rest[start + "<parameter".len()..];
        let (attributes, value_text) = after.split_once('>')?;
        let key = attribute(attributes, "name")?;
        let value_end = value_text.find("</parameter>").unwrap_or(value_text.len());
        let raw = &value_text[..value_end];
        // DeepSeek V3.2 marks which values are strings: `string="true"`.
        let typed = match attribute(attributes, "string").as_deref() {
            Some("true") => Value::String(raw.to_string()),
            Some(_) => param_value(raw),
            None => value(&key, raw),
        };
        arguments.insert(key, typed);
        rest = &value_text[value_end..];
    }
    Some(Value::Object(arguments))
}

/// MiniMax M3's `<KEY>V</KEY>` elements (each tag after `prefix`), typed by
/// `schema`, the object's: a value whose schema allows an object or an array (and
/// not a string) is itself elements, `<item>` for each of an array's.
fn element_params(body: &str, prefix: &str, schema: Option<&Value>) -> Option<Value> {
    let mut arguments = Map::new();
    for (key, raw) in elements(body, prefix)? {
        let field = schema.and_then(|s| object_member(s)?.get("properties")?.get(key));
        arguments.insert(key.to_string(), element_value(raw, prefix, field));
    }
    Some(Value::Object(arguments))
}

/// The `(KEY, inner text)` of each `<KEY>…</KEY>` element in `body`, in order.
fn elements<'a>(body: &'a str, prefix: &str) -> Option<Vec<(&'a str, &'a str)>> {
    let mut found = Vec::new();
    let mut rest = body.trim();
    while !rest.is_empty() {
        let after = rest.strip_prefix(prefix)?.strip_prefix('<')?;
        let (key, value_text) = after.split_once('>')?;
        let close = format!("{prefix}</{key}>");
        let value_end = value_text.find(&close)?;
        found.push((key, &value_text[..value_end]));
        rest = value_text[value_end + close.len()..].trim_start();
    }
    Some(found)
}

/// One element's value: nested elements where its schema asks for an object or an
/// array and allows no string, else [`typed`] text.
fn element_value(raw: &str, prefix: &str, schema: Option<&Value>) -> Value {
    let Some(schema) = schema else {
        return typed(None, raw);
    };
    let types = schema_types(schema);
    let nested = raw.trim_start().starts_with(&format!("{prefix}<"));
    if !nested || types.contains(&"string") {
        return typed(Some(schema), raw);
    }
    if types.contains(&"array") {
        let items = array_member(schema).and_then(|a| a.get("items"));
        let children = elements(raw, prefix).filter(|c| c.iter().all(|(k, _)| *k == "item"));
        if let Some(children) = children {
            let values = children
                .into_iter()
                .map(|(_, v)| element_value(v, prefix, items));
            return Value::Array(values.collect());
        }
    }
    if types.contains(&"object") {
        if let Some(object) = element_params(raw, prefix, Some(schema)) {
            return object;
        }
    }
    typed(Some(schema), raw)
}

/// The member of a (possibly union) schema that describes an object.
fn object_member(schema: &Value) -> Option<&Value> {
    union_member(schema, "object")
}

fn array_member(schema: &Value) -> Option<&Value> {
    union_member(schema, "array")
}

/// `schema` itself when it has `kind`'s keywords, else its `anyOf`/`oneOf` member
/// of type `kind`.
fn union_member<'a>(schema: &'a Value, kind: &str) -> Option<&'a Value> {
    let own = match kind {
        "object" => "properties",
        _ => "items",
    };
    if schema.get(own).is_some() {
        return Some(schema);
    }
    ["anyOf", "oneOf"]
        .iter()
        .filter_map(|u| schema.get(*u)?.as_array())
        .flatten()
        .find(|m| m.get("type").and_then(Value::as_str) == Some(kind))
}

/// Kimi K3: `<|open|>call tool="NAME" index="N"<|sep|>` with arguments
/// `<|open|>argument key="K" type="T"<|sep|>V<|close|>argument<|sep|>`.
pub fn parse_open_calls(body: &str, tools: &[Offered]) -> Option<Vec<ToolCall>> {
    let mut calls = Vec::new();
    for part in body.split("<|open|>call").skip(1) {
        let (attributes, rest) = part.split_once("<|sep|>")?;
        let name = attribute(attributes, "tool")?;
        let mut arguments = Map::new();
        for argument in rest.split("<|open|>argument").skip(1) {
            let (attributes, value) = argument.split_once("<|sep|>")?;
            let value = inner(value, "<|close|>argument");
            let key = attribute(attributes, "key")?;
            let value = match attribute(attributes, "type").as_deref() {
                Some("string") => Value::String(value.to_string()),
                Some(_) => param_value(value),
                None => typed_value(tools, &name, &key, value),
            };
            arguments.insert(key, value);
        }
        calls.push(call(&name, Value::Object(arguments)));
    }
    Some(calls)
}

/// `<open KEY close_key>V</close>` pairs, e.g. `<parameter=K>V</parameter>`.
fn tagged_params(
    body: &str,
    open: &str,
    close_key: &str,
    close: &str,
    value: &dyn Fn(&str, &str) -> Value,
) -> Option<Value> {
    let mut arguments = Map::new();
    let mut rest = body;
    while let Some(start) = rest.find(open) {
        let after = &rest[start + open.len()..];
        let (key, value_text) = after.split_once(close_key)?;
        let value_end = value_text.find(close).unwrap_or(value_text.len());
        let key = key.trim();
        arguments.insert(key.to_string(), value(key, &value_text[..value_end]));
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

//! Values that a family writes as text (`<parameter=K>V</parameter>`, GLM's
//! `<arg_value>`), typed as llama.cpp's parsers type them: by the offered tool's
//! JSON schema where it names the parameter's type, else by how the text reads.

use serde_json::Value;

use super::{resolve, Offered};

/// A value written as text, typed by parameter `key`'s schema in `tool` ([`typed`]).
pub(super) fn typed_value(tools: &[Offered], tool: &str, key: &str, raw: &str) -> Value {
    typed(param_schema(tools, tool, key), raw)
}

/// The JSON schema of parameter `key` of the offered tool `tool`.
fn param_schema<'a>(tools: &'a [Offered], tool: &str, key: &str) -> Option<&'a Value> {
    let schema = resolve(tool, tools)?.parameters.as_ref()?;
    schema.get("properties")?.get(key)
}

/// The types a schema allows: its `type` (one or a list) and its `anyOf`/`oneOf`
/// members' types.
pub(super) fn schema_types(schema: &Value) -> Vec<&str> {
    let mut types: Vec<&str> = match schema.get("type") {
        Some(Value::String(kind)) => vec![kind.as_str()],
        Some(Value::Array(kinds)) => kinds.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    };
    for union in ["anyOf", "oneOf"] {
        if let Some(Value::Array(members)) = schema.get(union) {
            types.extend(members.iter().flat_map(schema_types));
        }
    }
    types
}

/// A value written as text, as llama.cpp's parsers type it: `null` where the schema
/// allows null; JSON where it parses as a JSON value of a type the schema allows
/// other than a string (`{"a": 1}` for a string-or-object); else the text itself, as
/// written (quotes included), where the schema allows a string; else JSON where it
/// parses ([`param_value`]). Without a schema (or one that names no type) the value
/// is typed by how it reads.
pub(super) fn typed(schema: Option<&Value>, raw: &str) -> Value {
    let types = schema.map(schema_types).unwrap_or_default();
    let text = layout(raw);
    if types.contains(&"null") && text.trim() == "null" {
        return Value::Null;
    }
    if !types.contains(&"string") {
        return param_value(raw);
    }
    let allowed = |value: &Value| match value {
        Value::Bool(_) => types.contains(&"boolean"),
        Value::Number(n) => {
            types.contains(&"number") || (types.contains(&"integer") && !n.is_f64())
        }
        Value::Object(_) => types.contains(&"object"),
        Value::Array(_) => types.contains(&"array"),
        Value::Null | Value::String(_) => false,
    };
    match serde_json::from_str::<Value>(text.trim()) {
        Ok(value) if allowed(&value) => value,
        _ => Value::String(text.to_string()),
    }
}

/// A value's text without its layout: a newline after the opening tag pairs with
/// one before the closing tag.
fn layout(raw: &str) -> &str {
    match raw.strip_prefix('\n') {
        Some(text) => text.strip_suffix('\n').unwrap_or(text),
        None => raw,
    }
}

/// A parameter value: JSON when it parses as JSON, else the text. One leading
/// and one trailing newline are layout, not content.
pub fn param_value(raw: &str) -> Value {
    let text = layout(raw);
    serde_json::from_str(text.trim()).unwrap_or_else(|_| Value::String(text.to_string()))
}

//! JSON schema to GBNF, for forcing a tool call (`tool_choice` "required" or a named tool).
//!
//! The grammar accepts exactly `{"name": "<tool>", "arguments": {...}}` where the
//! arguments follow the tool's JSON schema: required properties in schema order,
//! then optional ones, each optional one in order (an optional property can only be
//! given when the ones before it are; enough for small models to emit valid calls).
//! Types the converter does not understand fall back to any JSON value.
//! Pure Rust; the GBNF goes to `super::Sampler` through `SamplerParams::grammar`.

#![forbid(unsafe_code)]

use serde_json::Value;

/// Shared rules for generic JSON.
const JSON_RULES: &str = r#"ws ::= [ \t\n]{0,4}
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
integer ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
number ::= integer ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
boolean ::= "true" | "false"
null ::= "null"
value ::= object | array | string | number | boolean | null
object ::= "{" ws ( string ws ":" ws value ( ws "," ws string ws ":" ws value )* )? ws "}"
array ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
"#;

/// A grammar whose root is a call of one of `tools` (name and parameters schema).
pub fn tool_call_grammar<'a>(tools: impl IntoIterator<Item = (&'a str, &'a Value)>) -> String {
    let mut builder = Builder::default();
    let calls: Vec<String> = tools
        .into_iter()
        .enumerate()
        .map(|(i, (name, schema))| builder.call(i, name, schema))
        .collect();
    let root = if calls.is_empty() {
        "object".to_string()
    } else {
        calls.join(" | ")
    };
    let mut out = format!("root ::= {root}\n");
    for (name, body) in &builder.rules {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    out.push_str(JSON_RULES);
    out
}

/// How a model family writes one call, as literal text around the tool's name and
/// its JSON arguments; `id`, where the template wrote an id into that text, becomes
/// any id of the same length.
pub struct CallShape<'a> {
    pub before: &'a str,
    pub between: &'a str,
    pub after: &'a str,
    pub id: Option<&'a str>,
}

/// A grammar whose root is one call (or, with `repeat`, one or more) of `tools` in
/// the family's own syntax `shape`.
pub fn shaped_call_grammar<'a>(
    shape: &CallShape<'_>,
    tools: impl IntoIterator<Item = (&'a str, &'a Value)>,
    repeat: bool,
) -> String {
    let mut builder = Builder::default();
    let id = shape.id.map(|id| {
        let body = format!("[a-zA-Z0-9_]{{{}}}", id.chars().count());
        builder.rule("call-id".into(), body)
    });
    // A literal part as grammar items: its text, with the id's places as `id`.
    let items = |part: &str| -> Vec<String> {
        let mut out = Vec::new();
        let pieces: Vec<&str> = match shape.id {
            Some(shown) if id.is_some() => part.split(shown).collect(),
            _ => vec![part],
        };
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 {
                out.extend(id.clone());
            }
            if !piece.is_empty() {
                out.push(literal(piece));
            }
        }
        out
    };
    let calls: Vec<String> = tools
        .into_iter()
        .enumerate()
        .map(|(i, (name, schema))| {
            let args = builder.value(&format!("call{i}-args"), schema);
            let mut body = items(shape.before);
            body.push(literal(name));
            body.extend(items(shape.between));
            body.push(args);
            body.extend(items(shape.after));
            builder.rule(format!("call{i}"), body.join(" "))
        })
        .collect();
    let call = builder.rule("call".into(), calls.join(" | "));
    let root = if repeat {
        format!("{call} ( ws {call} )*")
    } else {
        call
    };
    let mut out = format!("root ::= {root}\n");
    for (name, body) in &builder.rules {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    out.push_str(JSON_RULES);
    out
}

/// A grammar for `response_format`: a value following `schema`, or any JSON
/// object when there is no schema (`json_object`).
pub fn json_grammar(schema: Option<&Value>) -> String {
    let mut builder = Builder::default();
    let root = match schema {
        Some(schema) => builder.value("reply", schema),
        None => "object".to_string(),
    };
    let mut out = format!("root ::= ws {root} ws\n");
    for (name, body) in &builder.rules {
        out.push_str(&format!("{name} ::= {body}\n"));
    }
    out.push_str(JSON_RULES);
    out
}

#[derive(Default)]
struct Builder {
    rules: Vec<(String, String)>,
}

impl Builder {
    fn call(&mut self, i: usize, name: &str, schema: &Value) -> String {
        let args = self.value(&format!("call{i}-args"), schema);
        let body = format!(
            "\"{{\" ws {} ws \":\" ws {} ws \",\" ws {} ws \":\" ws {args} ws \"}}\"",
            literal("\"name\""),
            literal(&json_text(name)),
            literal("\"arguments\""),
        );
        self.rule(format!("call{i}"), body)
    }

    fn rule(&mut self, name: String, body: String) -> String {
        self.rules.push((name.clone(), body));
        name
    }

    /// The rule (or inline expression) for a value matching `schema`.
    fn value(&mut self, name: &str, schema: &Value) -> String {
        if let Some(choices) = schema.get("enum").and_then(Value::as_array) {
            let alts: Vec<String> = choices.iter().map(|v| literal(&v.to_string())).collect();
            return self.rule(name.to_string(), alts.join(" | "));
        }
        if let Some(constant) = schema.get("const") {
            return literal(&constant.to_string());
        }
        match schema.get("type").and_then(Value::as_str) {
            Some("string") => "string".into(),
            Some("integer") => "integer".into(),
            Some("number") => "number".into(),
            Some("boolean") => "boolean".into(),
            Some("null") => "null".into(),
            Some("array") => self.array(name, schema),
            Some("object") | None if schema.get("properties").is_some() => {
                self.object(name, schema)
            }
            Some("object") => "object".into(),
            _ => "value".into(),
        }
    }

    fn array(&mut self, name: &str, schema: &Value) -> String {
        let item = match schema.get("items") {
            Some(items) => self.value(&format!("{name}-item"), items),
            None => "value".into(),
        };
        let body = format!("\"[\" ws ( {item} ( ws \",\" ws {item} )* )? ws \"]\"");
        self.rule(name.to_string(), body)
    }

    fn object(&mut self, name: &str, schema: &Value) -> String {
        let empty = serde_json::Map::new();
        let props = schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or(&empty);
        let required: Vec<&str> = schema
            .get("required")
            .and_then(Value::as_array)
            .map(|r| r.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let is_required = |key: &str| required.contains(&key);
        let ordered = props.iter().filter(|(k, _)| is_required(k));
        let ordered: Vec<_> = ordered
            .chain(props.iter().filter(|(k, _)| !is_required(k)))
            .collect();
        let mut parts = Vec::new();
        for (idx, (key, prop_schema)) in ordered.iter().enumerate() {
            let value = self.value(&format!("{name}-p{idx}"), prop_schema);
            let pair = format!("{} ws \":\" ws {value}", literal(&json_text(key)));
            parts.push((pair, is_required(key)));
        }
        let body = format!("\"{{\" ws {} ws \"}}\"", join_members(&parts));
        self.rule(name.to_string(), body)
    }
}

/// Required members joined by commas, then each optional one nested in the one before.
fn join_members(parts: &[(String, bool)]) -> String {
    let mut out = String::new();
    let mut optional_depth = 0;
    for (pair, required) in parts {
        let sep = if out.is_empty() { "" } else { " ws \",\" ws " };
        if *required {
            out.push_str(&format!("{sep}{pair}"));
        } else {
            out.push_str(&format!(" ( {}{pair}", sep.trim_start()));
            optional_depth += 1;
        }
    }
    for _ in 0..optional_depth {
        out.push_str(" )?");
    }
    out.trim_start().to_string()
}

/// A JSON string literal for `text`.
fn json_text(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// `text` as a GBNF string literal.
fn literal(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check_literal(input: &str, expected: &str) {
        assert_eq!(literal(input), expected);
    }

    #[test]
    fn a_call_in_a_familys_own_syntax() {
        let shape = CallShape {
            before: "[TOOL_CALLS][{\"name\": \"",
            between: "\", \"arguments\": ",
            after: ", \"id\": \"Ab3dEf9hI\"}]",
            id: Some("Ab3dEf9hI"),
        };
        let schema =
            json!({"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]});
        let grammar = shaped_call_grammar(&shape, [("search", &schema)], false);
        assert!(grammar.starts_with("root ::= call\n"), "{grammar}");
        assert!(
            grammar.contains("call-id ::= [a-zA-Z0-9_]{9}\n"),
            "{grammar}"
        );
        assert!(
            grammar.contains(r#"call0 ::= "[TOOL_CALLS][{\"name\": \"" "search" "\", \"arguments\": " call0-args ", \"id\": \"" call-id "\"}]""#),
            "{grammar}"
        );
        let repeated = shaped_call_grammar(&shape, [("search", &schema)], true);
        assert!(
            repeated.starts_with("root ::= call ( ws call )*\n"),
            "{repeated}"
        );
    }

    #[test]
    fn literals_escape_quotes_and_backslashes() {
        check_literal("\"name\"", r#""\"name\"""#);
        check_literal("a\\b\n", r#""a\\b\n""#);
    }

    #[test]
    fn required_properties_come_first_and_optional_ones_nest() {
        let schema = json!({
            "type": "object",
            "properties": {"unit": {"type": "string"}, "city": {"type": "string"}},
            "required": ["city"]
        });
        let grammar = tool_call_grammar([("weather", &schema)]);
        let rule = grammar
            .lines()
            .find(|l| l.starts_with("call0-args ::="))
            .unwrap();
        assert_eq!(
            rule,
            r#"call0-args ::= "{" ws "\"city\"" ws ":" ws string ( ws "," ws "\"unit\"" ws ":" ws string )? ws "}""#
        );
        assert!(grammar.starts_with("root ::= call0\n"));
    }

    #[test]
    fn response_format_grammars() {
        let schema = json!({
            "type": "object",
            "properties": {"answer": {"type": "integer"}},
            "required": ["answer"]
        });
        let grammar = json_grammar(Some(&schema));
        assert!(grammar.starts_with("root ::= ws reply ws\n"), "{grammar}");
        assert!(grammar.contains(r#"reply ::= "{" ws "\"answer\"" ws ":" ws integer ws "}""#));
        assert!(json_grammar(None).starts_with("root ::= ws object ws\n"));
    }

    #[test]
    fn enums_arrays_and_unknown_types() {
        let schema = json!({
            "type": "object",
            "properties": {
                "mode": {"enum": ["a", "b"]},
                "tags": {"type": "array", "items": {"type": "integer"}},
                "any": {}
            },
            "required": ["mode", "tags", "any"]
        });
        let grammar = tool_call_grammar([("t", &schema), ("u", &json!({}))]);
        assert!(grammar.starts_with("root ::= call0 | call1\n"));
        assert!(grammar.contains(r#"call0-args-p0 ::= "\"a\"" | "\"b\"""#));
        assert!(grammar
            .contains(r#"call0-args-p1 ::= "[" ws ( integer ( ws "," ws integer )* )? ws "]""#));
        assert!(grammar.contains(r#""\"any\"" ws ":" ws value"#));
    }
}

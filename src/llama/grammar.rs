//! JSON Schema to GBNF (llama.cpp's grammar format): the grammar of a
//! `response_format` schema, and of a forced tool call (`tool_choice`
//! "required" or a named tool) whose arguments follow the tool's schema.
//! Pure Rust; the GBNF goes to `super::Sampler` through `SamplerParams::grammar`.
//!
//! # One converter, llama.cpp's subset
//!
//! [`schema`] parses a schema into typed nodes and [`emit`] writes them as
//! rules, the way llama.cpp's own converter (`common/json-schema-to-grammar.cpp`)
//! does, with its rule names. Supported, with llama.cpp's meaning:
//!
//! - `type` (a name, or an array of names: one alternative per type), `enum`,
//!   `const`, `anyOf`, `oneOf` (generated as `anyOf`), `allOf` (of objects,
//!   merged, or of enums, intersected), `$ref` to any `#/...` pointer of the
//!   same document (`#/$defs/x`, `#/definitions/x`; recursive ones too);
//! - objects: `properties`, `required`, `additionalProperties` (`false`,
//!   `true` or a schema). Members come in schema order: the required ones,
//!   then any ordered subset of the optional ones. Without
//!   `additionalProperties`, an object with `properties` gets no other members;
//! - arrays: `items`, `prefixItems` (an array of schemas is a tuple of
//!   exactly those items), `minItems`, `maxItems`;
//! - strings: `minLength`, `maxLength`, `pattern` (an `^...$` regex; see
//!   [`pattern`]), `format` `date`, `time`, `date-time`, `uuid` (`uuid1`..`uuid5`);
//! - integers: `minimum`, `maximum`, `exclusiveMinimum`, `exclusiveMaximum`
//!   (digit ranges; fractional bounds round inwards).
//!
//! Annotations are ignored: `title`, `description`, `default`, `examples`,
//! `$schema`, `$id`, `$anchor`, `$comment`, `$defs`, `definitions`,
//! `deprecated`, `readOnly`, `writeOnly`, the `content*` keywords, OpenAPI's
//! `example`, `discriminator`, `externalDocs`, `xml`, and `x-` extensions. So
//! is a keyword that cannot apply to what its subschema generates
//! (`maxLength` beside `"type": "integer"`).
//!
//! # Never silent
//!
//! llama.cpp ignores what it does not support; here every other keyword is a
//! [`SchemaError`] naming it and the JSON pointer of its subschema: `not`,
//! `if`/`then`/`else`, `multipleOf`, `uniqueItems`, `contains`,
//! `patternProperties`, `propertyNames`, `dependentRequired`,
//! `minProperties`, `minimum` on a `number`, a remote `$ref`, an unknown
//! `format`, a `pattern` outside the subset, a keyword that loses to another in
//! llama.cpp's precedence (`minLength` beside `pattern`, `prefixItems` beside
//! `items`), a `required` name that is not a property, and counts past the
//! 2000 repetitions llama.cpp's grammar engine expands. Where llama.cpp would
//! generate invalid JSON or values outside the schema, this converter does not
//! (see [`pattern`], [`range`], and the additional-member keys in [`emit`]).
//!
//! # Strict and lenient
//!
//! Response formats are strict ([`schema_grammar`], [`check_schema`],
//! [`json_grammar`]): an error goes back to the client (the API server answers
//! 400). Tool schemas come from MCP servers with all sorts of keywords, so the
//! tool-call grammars ([`tool_call_grammar`], [`shaped_call_grammar`]) are
//! lenient: a subschema with an unsupported keyword (or nested too deep, or a
//! left-recursive `$ref`) accepts any JSON value instead, and the rest of the
//! schema still holds.

#![forbid(unsafe_code)]

mod combine;
mod emit;
mod error;
mod keywords;
pub mod limits;
mod node;
mod pattern;
mod range;
mod schema;
#[cfg(test)]
mod tests;

use serde_json::Value;

use emit::{literal, Rules};
pub use error::SchemaError;
use schema::Mode;

/// Whitespace around and between the parts of a call (shepherd's own text, not
/// the schema's).
const WS_RULE: &str = "[ \\t\\n]{0,4}";

/// A grammar for a value following `schema`, with optional whitespace around
/// it; an error for a schema outside the supported subset.
pub fn schema_grammar(schema: &Value) -> Result<String, SchemaError> {
    let doc = schema::parse(schema, Mode::Strict)?;
    let mut rules = grammar_rules();
    let value = rules.schema(&doc, "reply");
    Ok(rules.render(&format!("ws {value} ws")))
}

/// Checks that [`schema_grammar`] can convert `schema`, without writing the
/// grammar: for the API server, at request-parse time (a 400, not a failed
/// generation).
pub fn check_schema(schema: &Value) -> Result<(), SchemaError> {
    schema::parse(schema, Mode::Strict).map(|_| ())
}

/// A grammar for `response_format`: a value following `schema`, or any JSON
/// object when there is no schema (`json_object`).
pub fn json_grammar(schema: Option<&Value>) -> Result<String, SchemaError> {
    match schema {
        Some(schema) => schema_grammar(schema),
        None => {
            let mut rules = grammar_rules();
            let object = rules.primitive("object");
            Ok(rules.render(&format!("ws {object} ws")))
        }
    }
}

/// A grammar whose root is a call of one of `tools` (name and parameters
/// schema): `{"name": "<tool>", "arguments": {...}}`.
pub fn tool_call_grammar<'a>(tools: impl IntoIterator<Item = (&'a str, &'a Value)>) -> String {
    let mut rules = grammar_rules();
    let calls: Vec<String> = tools
        .into_iter()
        .enumerate()
        .map(|(i, (name, schema))| {
            let args = lenient_value(&mut rules, schema, &format!("call{i}-args"));
            let body = format!(
                "\"{{\" ws {} ws \":\" ws {} ws \",\" ws {} ws \":\" ws {args} ws \"}}\"",
                literal("\"name\""),
                literal(&Value::String(name.to_string()).to_string()),
                literal("\"arguments\""),
            );
            rules.add(&format!("call{i}"), body)
        })
        .collect();
    let root = if calls.is_empty() {
        rules.primitive("object")
    } else {
        calls.join(" | ")
    };
    rules.render(&root)
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
    let mut rules = grammar_rules();
    let id = shape.id.map(|id| {
        let body = format!("[a-zA-Z0-9_]{{{}}}", id.chars().count());
        rules.add("call-id", body)
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
            let args = lenient_value(&mut rules, schema, &format!("call{i}-args"));
            let mut body = items(shape.before);
            body.push(literal(name));
            body.extend(items(shape.between));
            body.push(args);
            body.extend(items(shape.after));
            rules.add(&format!("call{i}"), body.join(" "))
        })
        .collect();
    let call = rules.add("call", calls.join(" | "));
    let root = if repeat {
        format!("{call} ( ws {call} )*")
    } else {
        call
    };
    rules.render(&root)
}

/// A rule table with shepherd's `ws` rule in it.
fn grammar_rules() -> Rules {
    let mut rules = Rules::new();
    rules.add("ws", WS_RULE.to_string());
    rules
}

/// The rule for a value following a tool's `schema`, leniently.
fn lenient_value(rules: &mut Rules, schema: &Value, name: &str) -> String {
    match schema::parse(schema, Mode::Lenient) {
        Ok(doc) => rules.schema(&doc, name),
        // Lenient parsing does not fail; any value if it ever did.
        Err(_) => rules.primitive("value"),
    }
}

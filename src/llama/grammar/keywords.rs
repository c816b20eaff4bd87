//! What the keywords of JSON Schema constrain: the JSON types a node can
//! generate, the keywords that constrain nothing (annotations), and the types
//! each other keyword applies to. The parser uses them to decide whether a
//! keyword it does not honour matters.

use serde_json::Value;

use super::error::{invalid, SchemaError};

/// The JSON types a node can generate, as a bit set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Types(u8);

impl Types {
    pub(super) const NONE: Types = Types(0);
    pub(super) const NULL: Types = Types(1);
    pub(super) const BOOLEAN: Types = Types(2);
    pub(super) const INTEGER: Types = Types(4);
    pub(super) const NUMBER: Types = Types(8);
    pub(super) const STRING: Types = Types(16);
    pub(super) const ARRAY: Types = Types(32);
    pub(super) const OBJECT: Types = Types(64);
    pub(super) const ALL: Types = Types(127);

    pub(super) fn or(self, other: Types) -> Types {
        Types(self.0 | other.0)
    }

    pub(super) fn intersects(self, other: Types) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether every value of the types `other` has one of these types (an
    /// integer is a number too).
    pub(super) fn covers(self, other: Types) -> bool {
        let own = if self.intersects(Types::NUMBER) {
            self.or(Types::INTEGER)
        } else {
            self
        };
        other.0 & !own.0 == 0
    }

    pub(super) fn named(name: &str) -> Option<Types> {
        Some(match name {
            "null" => Types::NULL,
            "boolean" => Types::BOOLEAN,
            "integer" => Types::INTEGER,
            "number" => Types::NUMBER,
            "string" => Types::STRING,
            "array" => Types::ARRAY,
            "object" => Types::OBJECT,
            _ => return None,
        })
    }

    pub(super) fn of_value(value: &Value) -> Types {
        match value {
            Value::Null => Types::NULL,
            Value::Bool(_) => Types::BOOLEAN,
            Value::Number(n) if n.is_i64() || n.is_u64() => Types::INTEGER,
            Value::Number(n) if n.as_f64().is_some_and(|f| f.fract() == 0.0) => Types::INTEGER,
            Value::Number(_) => Types::NUMBER,
            Value::String(_) => Types::STRING,
            Value::Array(_) => Types::ARRAY,
            Value::Object(_) => Types::OBJECT,
        }
    }
}

/// Keywords that constrain nothing: metadata, identifiers, containers of
/// definitions, and OpenAPI's annotations. `x-` extensions count too.
const ANNOTATIONS: &[&str] = &[
    "$schema",
    "$id",
    "$anchor",
    "$dynamicAnchor",
    "$recursiveAnchor",
    "$vocabulary",
    "$comment",
    "$defs",
    "definitions",
    "title",
    "description",
    "default",
    "examples",
    "deprecated",
    "readOnly",
    "writeOnly",
    "contentEncoding",
    "contentMediaType",
    "contentSchema",
    "example",
    "discriminator",
    "externalDocs",
    "xml",
];

pub(super) fn is_annotation(keyword: &str) -> bool {
    ANNOTATIONS.contains(&keyword) || keyword.starts_with("x-")
}

/// The types a keyword constrains; `None` for keywords that constrain any value.
pub(super) fn keyword_types(keyword: &str) -> Option<Types> {
    Some(match keyword {
        "properties"
        | "required"
        | "additionalProperties"
        | "patternProperties"
        | "propertyNames"
        | "minProperties"
        | "maxProperties"
        | "dependentRequired"
        | "dependentSchemas"
        | "dependencies"
        | "unevaluatedProperties" => Types::OBJECT,
        "items" | "prefixItems" | "additionalItems" | "minItems" | "maxItems" | "uniqueItems"
        | "contains" | "minContains" | "maxContains" | "unevaluatedItems" => Types::ARRAY,
        "minLength" | "maxLength" | "pattern" | "format" => Types::STRING,
        "minimum" | "maximum" | "exclusiveMinimum" | "exclusiveMaximum" | "multipleOf" => {
            Types::NUMBER.or(Types::INTEGER)
        }
        _ => return None,
    })
}

/// The types a `type` keyword declares.
pub(super) fn declared_types(value: &Value, path: &str) -> Result<Types, SchemaError> {
    let names: Vec<&Value> = match value {
        Value::Array(names) => names.iter().collect(),
        name => vec![name],
    };
    let mut types = Types::NONE;
    for name in names {
        match name.as_str().map(|n| (n, Types::named(n))) {
            Some((_, Some(named))) => types = types.or(named),
            Some((n, None)) => return invalid("type", path, format!("unknown type '{n}'")),
            None => return invalid("type", path, "must be a string or an array of strings"),
        }
    }
    Ok(types)
}

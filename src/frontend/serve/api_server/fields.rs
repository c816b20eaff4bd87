//! Typed access to a JSON request object, with one 400 per wrong field.
//!
//! Every numeric field is attacker input (reference: llama.cpp's advisories):
//! each getter checks the type and the range and names the field in the
//! error, so nothing out of range ever reaches a backend or FFI. `null`
//! counts as absent, as OpenAI's own API treats it.

use serde_json::{Map, Value};

use super::error::ApiError;

/// The fields of one JSON object; `path` prefixes field names in errors.
#[derive(Clone)]
pub struct Fields<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

/// A request body as JSON, else a 400 saying why it is not.
pub fn json_body(body: &[u8]) -> Result<Value, ApiError> {
    crate::util::json::parse_strict(body)
        .map_err(|e| ApiError::invalid("", format!("the body is not valid JSON: {e}")))
}

/// Refuses a top-level field that neither `known` nor `ignored` names, in
/// OpenAI's words, so a client learns of a typo instead of being ignored (the
/// tokenizer and embedding routes).
pub fn only_known(value: &Value, known: &[&str], ignored: &[&str]) -> Result<(), ApiError> {
    match unknown_fields(value, known, ignored).first() {
        Some(unknown) => Err(ApiError::invalid(
            unknown,
            format!("unrecognized request argument supplied: {unknown}"),
        )),
        None => Ok(()),
    }
}

/// The top-level fields that neither `known` nor `ignored` names. The completion
/// routes ignore them, as llama-server does with a field it does not know (clients
/// written for it send its own extensions and more), and say which in a debug line.
pub fn unknown_fields(value: &Value, known: &[&str], ignored: &[&str]) -> Vec<String> {
    let Value::Object(map) = value else {
        return Vec::new();
    };
    let named = |k: &String| known.contains(&k.as_str()) || ignored.contains(&k.as_str());
    map.keys().filter(|k| !named(k)).cloned().collect()
}

impl<'a> Fields<'a> {
    /// `value` must be an object.
    pub fn of(value: &'a Value, path: &str) -> Result<Fields<'a>, ApiError> {
        match value {
            Value::Object(map) => Ok(Fields {
                map,
                path: path.to_string(),
            }),
            _ => Err(ApiError::invalid(
                path,
                format!("{} must be an object", name_or(path, "the body")),
            )),
        }
    }

    /// The full name of field `key`, for errors.
    pub fn name(&self, key: &str) -> String {
        if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.path)
        }
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn wrong(&self, key: &str, what: &str) -> ApiError {
        let name = self.name(key);
        ApiError::invalid(&name, format!("'{name}' must be {what}"))
    }

    pub fn str(&self, key: &str) -> Result<Option<&'a str>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(self.wrong(key, "a string")),
        }
    }

    pub fn required_str(&self, key: &str) -> Result<&'a str, ApiError> {
        self.str(key)?.ok_or_else(|| self.missing(key, "a string"))
    }

    pub fn missing(&self, key: &str, what: &str) -> ApiError {
        let name = self.name(key);
        ApiError::invalid(&name, format!("'{name}' is required and must be {what}"))
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(self.wrong(key, "a boolean")),
        }
    }

    pub fn array(&self, key: &str) -> Result<Option<&'a Vec<Value>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(_) => Err(self.wrong(key, "an array")),
        }
    }

    pub fn object(&self, key: &str) -> Result<Option<Fields<'a>>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => Fields::of(value, &self.name(key)).map(Some),
        }
    }

    /// A finite number within `lo..=hi`.
    pub fn number(&self, key: &str, lo: f64, hi: f64) -> Result<Option<f32>, ApiError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let what = format!("a number from {lo} to {hi}");
        match value.as_f64() {
            Some(n) if n.is_finite() && (lo..=hi).contains(&n) => Ok(Some(n as f32)),
            _ => Err(self.wrong(key, &what)),
        }
    }

    /// An integer within `lo..=hi`.
    pub fn integer(&self, key: &str, lo: i64, hi: i64) -> Result<Option<i64>, ApiError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let what = format!("an integer from {lo} to {hi}");
        match value.as_i64() {
            Some(n) if (lo..=hi).contains(&n) => Ok(Some(n)),
            _ => Err(self.wrong(key, &what)),
        }
    }

    /// A non-negative integer up to `u64::MAX` (seeds).
    pub fn unsigned(&self, key: &str) -> Result<Option<u64>, ApiError> {
        match self.get(key) {
            None => Ok(None),
            Some(value) => value
                .as_u64()
                .map(Some)
                .ok_or_else(|| self.wrong(key, "a non-negative integer")),
        }
    }

    /// A string from `allowed`.
    pub fn choice(&self, key: &str, allowed: &[&str]) -> Result<Option<&'a str>, ApiError> {
        match self.str(key)? {
            None => Ok(None),
            Some(s) if allowed.contains(&s) => Ok(Some(s)),
            Some(_) => Err(self.wrong(key, &format!("one of {}", allowed.join(", ")))),
        }
    }

    /// Fields the server does not implement must be absent (or their no-op value).
    pub fn unsupported(&self, key: &str, harmless: &[Value]) -> Result<(), ApiError> {
        match self.get(key) {
            Some(value) if !harmless.contains(value) => {
                let name = self.name(key);
                Err(ApiError::invalid(
                    &name,
                    format!("'{name}' is not supported by this server"),
                ))
            }
            _ => Ok(()),
        }
    }
}

fn name_or<'a>(path: &'a str, fallback: &'a str) -> &'a str {
    if path.is_empty() {
        fallback
    } else {
        path
    }
}

/// Stop strings: one string or an array of at most `max` non-empty strings.
pub fn stop_list(fields: &Fields<'_>, key: &str, max: usize) -> Result<Vec<String>, ApiError> {
    let name = fields.name(key);
    let bad = || {
        ApiError::invalid(
            &name,
            format!("'{name}' must be a string or an array of at most {max} non-empty strings"),
        )
    };
    match fields.get(key) {
        None => Ok(Vec::new()),
        Some(Value::String(s)) if !s.is_empty() => Ok(vec![s.clone()]),
        Some(Value::Array(items)) if items.len() <= max => items
            .iter()
            .map(|item| match item {
                Value::String(s) if !s.is_empty() => Ok(s.clone()),
                _ => Err(bad()),
            })
            .collect(),
        Some(_) => Err(bad()),
    }
}

/// A tool or function name as OpenAI allows it: `[A-Za-z0-9_-]{1,64}`.
pub fn valid_tool_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.')
}

//! Checking a call's arguments against a tool's JSON schema, and reading them.
//!
//! [`validate`] runs once in [`super::ToolRegistry::run`] so every tool can
//! rely on its required arguments being present with the right type. Models
//! often quote numbers and booleans (`"10"`, `"true"`); both the check and the
//! getters accept those, so a harmless slip does not cost a round trip.

use serde_json::{Map, Value};

/// Checks `args` against the `properties`/`required` of `schema`.
pub fn validate(schema: &Value, args: &Value) -> Result<(), String> {
    let Some(object) = args.as_object() else {
        return Err(not_an_object(args));
    };
    for name in schema["required"].as_array().into_iter().flatten() {
        let name = name.as_str().unwrap_or_default();
        if object.get(name).is_none_or(Value::is_null) {
            return Err(format!("missing required argument '{name}'"));
        }
    }
    let properties = schema["properties"].as_object();
    for (name, value) in object {
        let wanted = properties.and_then(|p| p.get(name)).map(|p| &p["type"]);
        if let Some(Value::String(wanted)) = wanted {
            check_type(name, wanted, value)?;
        }
    }
    Ok(())
}

fn not_an_object(args: &Value) -> String {
    let shown: String = match args {
        Value::String(raw) => raw.chars().take(200).collect(),
        other => other.to_string().chars().take(200).collect(),
    };
    format!("the arguments are not a JSON object (invalid JSON?); got: {shown}")
}

fn check_type(name: &str, wanted: &str, value: &Value) -> Result<(), String> {
    let ok = value.is_null()
        || match wanted {
            "string" => value.is_string(),
            "integer" => as_i64(value).is_some(),
            "number" => as_f64(value).is_some(),
            "boolean" => as_bool(value).is_some(),
            "object" => value.is_object(),
            "array" => value.is_array(),
            _ => true,
        };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "'{name}' must be a{} {wanted}, got {value}",
            article(wanted)
        ))
    }
}

fn article(word: &str) -> &'static str {
    if word.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "n"
    } else {
        ""
    }
}

fn as_i64(value: &Value) -> Option<i64> {
    match value {
        Value::Number(n) => n.as_i64().or_else(|| {
            n.as_f64()
                .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                .map(|f| f as i64)
        }),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn as_f64(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

fn as_bool(value: &Value) -> Option<bool> {
    match value {
        Value::Bool(b) => Some(*b),
        Value::String(s) if s.eq_ignore_ascii_case("true") => Some(true),
        Value::String(s) if s.eq_ignore_ascii_case("false") => Some(false),
        _ => None,
    }
}

/// A string argument; empty when absent (required ones were checked by [`validate`]).
pub fn string<'a>(args: &'a Value, name: &str) -> &'a str {
    args[name].as_str().unwrap_or_default()
}

pub fn opt_string<'a>(args: &'a Value, name: &str) -> Option<&'a str> {
    args[name].as_str()
}

pub fn opt_i64(args: &Value, name: &str) -> Option<i64> {
    as_i64(&args[name])
}

pub fn opt_f64(args: &Value, name: &str) -> Option<f64> {
    as_f64(&args[name])
}

/// A boolean argument, `default` when absent.
pub fn flag(args: &Value, name: &str, default: bool) -> bool {
    as_bool(&args[name]).unwrap_or(default)
}

pub fn opt_object<'a>(args: &'a Value, name: &str) -> Option<&'a Map<String, Value>> {
    args[name].as_object()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "properties": {
                "path": {"type": "string"},
                "limit": {"type": "integer"},
                "all": {"type": "boolean"},
                "headers": {"type": "object"}
            },
            "required": ["path"]
        })
    }

    fn check(args: Value, expected: Result<(), &str>) {
        assert_eq!(
            validate(&schema(), &args),
            expected.map_err(str::to_string),
            "{args}"
        );
    }

    #[test]
    fn validation() {
        check(json!({"path": "a"}), Ok(()));
        check(json!({"path": "a", "limit": 5, "all": true}), Ok(()));
        check(json!({"path": "a", "limit": "5", "all": "false"}), Ok(()));
        check(json!({"path": "a", "extra": 1}), Ok(()));
        check(json!({}), Err("missing required argument 'path'"));
        check(
            json!({"path": null}),
            Err("missing required argument 'path'"),
        );
        check(json!({"path": 1}), Err("'path' must be a string, got 1"));
        check(
            json!({"path": "a", "limit": 1.5}),
            Err("'limit' must be an integer, got 1.5"),
        );
        check(
            json!({"path": "a", "all": "yes"}),
            Err("'all' must be a boolean, got \"yes\""),
        );
        check(
            json!({"path": "a", "headers": []}),
            Err("'headers' must be an object, got []"),
        );
    }

    #[test]
    fn raw_strings_are_not_objects() {
        let err = validate(&schema(), &json!("{\"path\": \"a")).unwrap_err();
        assert!(err.contains("not a JSON object"), "{err}");
        assert!(err.contains("{\"path\""), "{err}");
    }

    #[test]
    fn getters_coerce_quoted_values() {
        let args = json!({"n": "7", "b": "TRUE", "f": 2.0});
        assert_eq!(opt_i64(&args, "n"), Some(7));
        assert_eq!(opt_i64(&args, "f"), Some(2));
        assert!(flag(&args, "b", false));
        assert!(flag(&args, "missing", true));
        assert_eq!(opt_string(&args, "n"), Some("7"));
        assert_eq!(string(&args, "missing"), "");
    }
}

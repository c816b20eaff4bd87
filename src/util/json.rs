//! Strict JSON for what peers send: a key twice in one object is an error,
//! not "the last one wins". Two parsers that pick different copies (a proxy
//! in front of shepherd and shepherd itself) would otherwise see two different
//! requests in the same bytes.

use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Parses `bytes` as one JSON value, refusing a duplicate key at any depth.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, serde_json::Error> {
    serde_json::from_slice::<Strict>(bytes).map(|strict| strict.0)
}

/// [`parse_strict`], then typed.
pub fn parse_strict_as<T: de::DeserializeOwned>(bytes: &[u8]) -> Result<T, serde_json::Error> {
    serde_json::from_value(parse_strict(bytes)?)
}

/// A `Value` whose objects had no key twice.
struct Strict(Value);

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_string()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(Strict(value)) = seq.next_element()? {
            out.push(value);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(value) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!("duplicate key `{key}`")));
            }
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_twice_in_any_object_is_refused() {
        for text in [
            r#"{"a": 1, "a": 2}"#,
            r#"{"model": "x", "messages": [{"role": "user", "role": "system"}]}"#,
            r#"[{"x": {"y": 1, "y": 1}}]"#,
        ] {
            let error = parse_strict(text.as_bytes()).expect_err(text);
            assert!(
                error.to_string().contains("duplicate key"),
                "{text}: {error}"
            );
        }
    }

    #[test]
    fn everything_else_parses_as_serde_json_parses_it() {
        for text in [
            r#"{"a": 1, "b": [1, 2.5, -3, "s", null, true], "c": {"a": {}}}"#,
            r#"[]"#,
            r#""\u00e9\ud83d\ude00""#,
            r#"18446744073709551615"#,
            r#"-9223372036854775808"#,
            r#"1e300"#,
            r#"{"same": {"k": 1}, "other": {"k": 2}}"#,
        ] {
            let strict = parse_strict(text.as_bytes()).expect(text);
            let plain: Value = serde_json::from_str(text).expect(text);
            assert_eq!(strict, plain, "{text}");
        }
        for bad in ["", "{", r#"{"a" 1}"#, "[1,]", "nul", "{} x"] {
            assert!(parse_strict(bad.as_bytes()).is_err(), "{bad:?}");
        }
        let deep = "[".repeat(10_000) + &"]".repeat(10_000);
        assert!(
            parse_strict(deep.as_bytes()).is_err(),
            "the depth limit holds"
        );
    }
}

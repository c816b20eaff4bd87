//! The values of a schema's keywords, read and checked: counts (`minItems`, ...)
//! within llama.cpp's repetition limit, integer bounds, `required`, local JSON
//! pointers; and [`Used`], the keywords a node honours.

use serde_json::{Map, Value};

use super::super::error::{invalid, unsupported, SchemaError};
use super::super::limits::MAX_REPEAT;
use super::super::node::Node;

/// Integer bounds are clamped to this magnitude (a narrowing: no 20-digit output).
const BOUND_LIMIT: i64 = 1_000_000_000_000_000_000;

/// Unbounded integers have at most 16 digits (llama.cpp's `integral-part`).
const MAX_16_DIGITS: i64 = 9_999_999_999_999_999;

/// The keywords a node honours.
#[derive(Default)]
pub(super) struct Used {
    pub(super) keywords: Vec<&'static str>,
    /// Every keyword was checked already (by the alternatives of a `type` array).
    pub(super) all: bool,
}

impl Used {
    pub(super) fn add(&mut self, keyword: &'static str) {
        self.keywords.push(keyword);
    }

    pub(super) fn has(&self, keyword: &str) -> bool {
        self.all || self.keywords.contains(&keyword)
    }
}

/// The `required` names, in their order.
pub(super) fn required_names<'v>(
    object: &'v Map<String, Value>,
    path: &str,
) -> Result<Vec<&'v str>, SchemaError> {
    let Some(value) = object.get("required") else {
        return Ok(Vec::new());
    };
    let names = value
        .as_array()
        .and_then(|names| names.iter().map(Value::as_str).collect::<Option<_>>());
    match names {
        Some(names) => Ok(names),
        None => invalid("required", path, "must be an array of strings"),
    }
}

/// A count keyword (`minItems`, `maxLength`, ...), within llama.cpp's repetition limit.
pub(super) fn count(
    object: &Map<String, Value>,
    key: &str,
    path: &str,
) -> Result<Option<u32>, SchemaError> {
    let Some(value) = object.get(key) else {
        return Ok(None);
    };
    match value.as_u64() {
        Some(n) if n <= u64::from(MAX_REPEAT) => Ok(u32::try_from(n).ok()),
        Some(n) => {
            let why = format!(
                "{n} is over the {MAX_REPEAT} repetitions that llama.cpp's grammars expand"
            );
            unsupported(key, path, why)
        }
        None => invalid(key, path, "must be a non-negative integer"),
    }
}

pub(super) fn check_order(
    min: Option<u32>,
    max: Option<u32>,
    key: &str,
    path: &str,
) -> Result<(), SchemaError> {
    match (min, max) {
        (Some(min), Some(max)) if min > max => {
            invalid(key, path, format!("{min} is over the maximum {max}"))
        }
        _ => Ok(()),
    }
}

/// `minimum`, `maximum` and their exclusive forms (the tighter bound wins);
/// fractional bounds round inwards, as in llama.cpp.
pub(super) fn integer(
    object: &Map<String, Value>,
    path: &str,
    used: &mut Used,
) -> Result<Node, SchemaError> {
    for key in ["minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"] {
        used.add(key);
    }
    let lower = [
        bound(object, "minimum", path, f64::ceil, 0)?,
        bound(object, "exclusiveMinimum", path, f64::floor, 1)?,
    ];
    let upper = [
        bound(object, "maximum", path, f64::floor, 0)?,
        bound(object, "exclusiveMaximum", path, f64::ceil, -1)?,
    ];
    let mut min = lower.into_iter().flatten().max();
    let mut max = upper.into_iter().flatten().min();
    // llama.cpp's one-sided ranges stop at 16 digits: bound the other side there.
    match (min, max) {
        (Some(low), None) if low > MAX_16_DIGITS / 10 => max = Some(MAX_16_DIGITS),
        (None, Some(high)) if high < -(MAX_16_DIGITS / 10) => min = Some(-MAX_16_DIGITS),
        _ => {}
    }
    if let (Some(low), Some(high)) = (min, max) {
        if low > high {
            let key = if object.contains_key("minimum") {
                "minimum"
            } else {
                "exclusiveMinimum"
            };
            let why = "no integer lies within the bounds (a lone bound admits 16 digits at most)";
            return invalid(key, path, why);
        }
    }
    Ok(Node::Integer { min, max })
}

/// A bound as an integer: `round` for fractions, then `shift` (exclusive bounds).
pub(super) fn bound(
    object: &Map<String, Value>,
    key: &str,
    path: &str,
    round: fn(f64) -> f64,
    shift: i128,
) -> Result<Option<i64>, SchemaError> {
    let Some(value) = object.get(key) else {
        return Ok(None);
    };
    let limit = i128::from(BOUND_LIMIT);
    let whole = match (value.as_i64(), value.as_u64(), value.as_f64()) {
        (Some(n), _, _) => i128::from(n),
        (None, Some(n), _) => i128::from(n),
        (None, None, Some(f)) => round(f).clamp(-1e18, 1e18) as i128,
        _ => return invalid(key, path, "must be a number"),
    };
    let clamped = (whole + shift).clamp(-limit, limit);
    Ok(i64::try_from(clamped).ok())
}

/// The value a local JSON pointer (`/$defs/a`, RFC 6901) points at in `root`.
pub(super) fn resolve_pointer<'v>(root: &'v Value, pointer: &str) -> Option<&'v Value> {
    let mut target = root;
    for token in pointer.split('/').skip(1) {
        let token = token.replace("~1", "/").replace("~0", "~");
        target = match target {
            Value::Object(members) => members.get(&token)?,
            Value::Array(items) => items.get(token.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(target)
}

/// `name` as one JSON pointer token.
pub(super) fn escape_pointer(name: &str) -> String {
    name.replace('~', "~0").replace('/', "~1")
}

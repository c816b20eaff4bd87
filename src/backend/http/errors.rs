//! A provider's error answer read into a typed [`BackendError`]: the shapes
//! its error object comes in (OpenAI's, Anthropic's, Gemini's, llama-server's,
//! Azure's array), the HTTP status a symbolic type stands for, and the one
//! context-overflow classifier (wire-formats §3.6) with the token counts
//! providers write into their messages.

use std::time::Duration;

use serde_json::Value;

use crate::core::BackendError;

/// The HTTP status a provider's symbolic error type stands for, for error
/// objects that arrive inside a 200 stream (Anthropic `error` events, Gemini statuses).
fn status_for_type(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" | "INVALID_ARGUMENT" | "FAILED_PRECONDITION" => 400,
        "authentication_error" | "UNAUTHENTICATED" => 401,
        "permission_error" | "PERMISSION_DENIED" => 403,
        "not_found_error" | "NOT_FOUND" => 404,
        "request_too_large" => 413,
        "rate_limit_error" | "RESOURCE_EXHAUSTED" => 429,
        "api_error" | "INTERNAL" => 500,
        "UNAVAILABLE" => 503,
        "DEADLINE_EXCEEDED" => 504,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// The parts of a provider's error object that matter.
#[derive(Debug, Default, PartialEq)]
struct ErrorParts {
    message: String,
    code: String,
    kind: String,
    /// llama-server's `n_prompt_tokens` and `n_ctx`.
    n_prompt_tokens: Option<u64>,
    n_ctx: Option<u64>,
}

/// Turns an error response into a typed error: an overflow when the
/// classifier says so, otherwise `Http` with the provider's message.
pub fn error_from_body(status: u16, body: &str, retry_after: Option<Duration>) -> BackendError {
    let parts = match serde_json::from_str::<Value>(body) {
        Ok(value) => error_parts(&value),
        Err(_) => ErrorParts {
            message: body.trim().chars().take(500).collect(),
            ..ErrorParts::default()
        },
    };
    typed_error(status, parts, retry_after)
}

/// The same for an error object that arrived inside a stream (`data: {"error":…}`),
/// where the HTTP status was already 200; `status` is the object's own code when numeric.
pub fn error_from_value(value: &Value) -> BackendError {
    let parts = error_parts(value);
    let status = value
        .get("error")
        .and_then(|e| e.get("code"))
        .and_then(Value::as_u64)
        .and_then(|c| u16::try_from(c).ok())
        .filter(|c| (400..600).contains(c))
        .or_else(|| status_for_type(&parts.kind))
        .unwrap_or(500);
    typed_error(status, parts, None)
}

fn typed_error(status: u16, parts: ErrorParts, retry_after: Option<Duration>) -> BackendError {
    if let Some(overflow) = classify_overflow(status, &parts) {
        return overflow;
    }
    let message = if parts.message.is_empty() {
        format!("status {status}")
    } else {
        parts.message
    };
    let code = if parts.kind.is_empty() {
        parts.code
    } else {
        parts.kind
    };
    BackendError::Http {
        status,
        code,
        message,
        retry_after,
    }
}

/// Reads `{"error":{message,type,code}}`, `{"error":"text"}`, the Azure
/// array form and a root-level `message`.
fn error_parts(value: &Value) -> ErrorParts {
    let value = match value {
        Value::Array(items) => items.first().unwrap_or(&Value::Null),
        other => other,
    };
    let object = match value.get("error") {
        Some(Value::String(message)) => {
            return ErrorParts {
                message: message.clone(),
                ..ErrorParts::default()
            }
        }
        Some(inner @ Value::Object(_)) => inner,
        _ => value,
    };
    ErrorParts {
        message: text_field(object, "message"),
        code: text_field(object, "code"),
        // Gemini puts its symbolic code in `status`.
        kind: match text_field(object, "type") {
            kind if kind.is_empty() => text_field(object, "status"),
            kind => kind,
        },
        n_prompt_tokens: object.get("n_prompt_tokens").and_then(Value::as_u64),
        n_ctx: object.get("n_ctx").and_then(Value::as_u64),
    }
}

fn text_field(object: &Value, key: &str) -> String {
    match object.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

const OVERFLOW_CODES: [&str; 2] = ["context_length_exceeded", "exceed_context_size_error"];

/// The §3.6 phrases, plus Anthropic's "exceed context limit".
const OVERFLOW_PHRASES: [&str; 7] = [
    "context length",
    "context limit",
    "context window",
    "prompt is too long",
    "input token count",
    "exceeds the available context",
    "maximum context length",
];

/// The one context-overflow classifier (wire-formats §3.6).
fn classify_overflow(status: u16, parts: &ErrorParts) -> Option<BackendError> {
    let lower = parts.message.to_ascii_lowercase();
    let by_code = matches!(status, 400 | 413 | 500)
        && OVERFLOW_CODES
            .iter()
            .any(|c| parts.code == *c || parts.kind == *c);
    let by_message = OVERFLOW_PHRASES.iter().any(|p| lower.contains(p));
    if !by_code && !by_message {
        return None;
    }
    let (prompt_tokens, limit) = match (parts.n_prompt_tokens, parts.n_ctx) {
        (Some(prompt), Some(limit)) => (Some(prompt), Some(limit)),
        _ => overflow_counts(&lower),
    };
    Some(BackendError::ContextOverflow {
        message: parts.message.clone(),
        prompt_tokens,
        limit,
    })
}

/// Token counts (needed, limit) from the overflow messages providers write.
pub fn overflow_counts(message: &str) -> (Option<u64>, Option<u64>) {
    let m = message.to_ascii_lowercase();
    let pairs: [(&str, &str); 5] = [
        ("resulted in", "maximum context length is"),
        ("you requested", "maximum context length is"),
        ("request (", "context size ("),
        ("input token count (", "tokens allowed ("),
        ("would need", "limit is"),
    ];
    for (needed, limit) in pairs {
        if let (Some(n), Some(l)) = (number_after(&m, needed), number_after(&m, limit)) {
            return (Some(n), Some(l));
        }
    }
    anthropic_counts(&m)
}

/// Anthropic: "prompt is too long: N tokens > M maximum" and "…: a + b > c".
fn anthropic_counts(m: &str) -> (Option<u64>, Option<u64>) {
    if let Some(at) = m.find("prompt is too long:") {
        let numbers = numbers_in(&m[at..]);
        if let [needed, limit, ..] = numbers[..] {
            return (Some(needed), Some(limit));
        }
    }
    if let Some(at) = m.find("context limit:") {
        let numbers = numbers_in(&m[at..]);
        if let [a, b, limit, ..] = numbers[..] {
            return (Some(a.saturating_add(b)), Some(limit));
        }
    }
    (None, None)
}

/// The first number after `marker`, skipping spaces, `(` and `:`.
fn number_after(text: &str, marker: &str) -> Option<u64> {
    let at = text.find(marker)? + marker.len();
    let rest = text[at..].trim_start_matches([' ', '(', ':']);
    leading_number(rest)
}

/// Digits at the start of `text`, allowing thousands separators (`128,000`).
pub(super) fn leading_number(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    let mut value: u64 = 0;
    let mut digits = 0;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        let separator = b == b',' && digits > 0 && bytes.get(i + 1).is_some_and(u8::is_ascii_digit);
        if b.is_ascii_digit() {
            value = value.checked_mul(10)?.checked_add(u64::from(b - b'0'))?;
            digits += 1;
        } else if !separator {
            break;
        }
        i += 1;
    }
    (digits > 0).then_some(value)
}

/// Every number in `text`, in order.
pub(super) fn numbers_in(text: &str) -> Vec<u64> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_digit()) {
        rest = &rest[start..];
        let end = rest
            .find(|c: char| !c.is_ascii_digit() && c != ',')
            .unwrap_or(rest.len());
        if let Some(n) = leading_number(&rest[..end]) {
            out.push(n);
        }
        rest = &rest[end..];
    }
    out
}

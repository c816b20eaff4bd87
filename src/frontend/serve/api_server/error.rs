//! The API server's errors: one type, two wire shapes (OpenAI's and Anthropic's),
//! and the one mapping from [`BackendError`] to an HTTP status.

use super::wire;
use crate::core::BackendError;

/// An error answer, decided before any byte of a success answer was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    /// OpenAI's `type`: `invalid_request_error`, `server_error`, ...
    pub kind: &'static str,
    /// The request field at fault, when there is one.
    pub param: Option<String>,
    pub code: Option<String>,
    /// Seconds for `Retry-After` (busy and upstream rate limits).
    pub retry_after: Option<u64>,
}

impl ApiError {
    /// A 400 about one field.
    pub fn invalid(param: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: (!param.is_empty()).then(|| param.to_string()),
            code: None,
            retry_after: None,
        }
    }

    pub fn with_code(mut self, code: &str) -> ApiError {
        self.code = Some(code.to_string());
        self
    }

    pub fn new(status: u16, kind: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: None,
            retry_after: None,
        }
    }

    /// Slots and queue are full, or the model is still loading.
    pub fn busy(message: &str, retry_after: u64) -> ApiError {
        ApiError {
            retry_after: Some(retry_after),
            ..ApiError::new(503, "server_busy", message)
        }
    }

    /// `{"error": {message, type, param, code}}`.
    pub fn openai_body(&self) -> wire::openai::Error<'_> {
        wire::openai::Error {
            error: wire::openai::ErrorDetail {
                message: &self.message,
                kind: self.kind,
                param: self.param.as_deref(),
                code: self.code.as_deref(),
            },
        }
    }

    /// `{"type": "error", "error": {type, message}}` with Anthropic's type names.
    pub fn anthropic_body(&self) -> wire::anthropic::Error<'_> {
        let kind = match self.status {
            400 | 422 => "invalid_request_error",
            401 => "authentication_error",
            403 => "permission_error",
            404 => "not_found_error",
            413 => "request_too_large",
            429 => "rate_limit_error",
            503 | 529 => "overloaded_error",
            _ => "api_error",
        };
        wire::anthropic::Error {
            kind: "error",
            error: wire::anthropic::ErrorDetail {
                kind,
                message: &self.message,
            },
        }
    }

    /// Extra headers of the answer.
    pub fn headers(&self) -> Vec<(&'static str, String)> {
        self.retry_after
            .map(|secs| vec![("Retry-After", secs.to_string())])
            .unwrap_or_default()
    }
}

/// The status and shape a backend failure gets. Context overflow is the
/// client's to fix (400 `context_length_exceeded`); the upstream's own
/// client errors pass through; anything else is a gateway problem.
pub fn from_backend(error: &BackendError) -> ApiError {
    match error {
        BackendError::ContextOverflow { .. } => {
            ApiError::invalid("messages", error.to_string()).with_code("context_length_exceeded")
        }
        BackendError::Http {
            status,
            code,
            message,
            retry_after,
        } => {
            let status = match status {
                // Our own credentials are wrong: not the client's fault.
                401 | 403 => 502,
                400..=499 => *status,
                503 | 529 => 503,
                _ => 502,
            };
            let kind = if status == 400 || status == 404 || status == 422 {
                "invalid_request_error"
            } else if status == 429 {
                "rate_limit_error"
            } else {
                "upstream_error"
            };
            let mut api = ApiError::new(status, kind, format!("upstream: {message}"));
            api.code = (!code.is_empty()).then(|| code.clone());
            api.retry_after = retry_after.map(|d| d.as_secs().max(1));
            api
        }
        BackendError::Connect(_) => ApiError::new(502, "upstream_error", error.to_string()),
        BackendError::Timeout(_) => ApiError::new(504, "upstream_error", error.to_string()),
        BackendError::Protocol(_) | BackendError::TooLarge(_) => {
            ApiError::new(502, "upstream_error", error.to_string())
        }
        BackendError::Cancelled => ApiError::new(499, "cancelled", "cancelled"),
        BackendError::Config(message) => ApiError::new(500, "server_error", message.clone()),
        BackendError::Invalid { param, message } => {
            ApiError::invalid(param.unwrap_or_default(), message.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn backend_errors_map_to_statuses() {
        let overflow = BackendError::ContextOverflow {
            message: "too long".into(),
            prompt_tokens: Some(10),
            limit: Some(5),
        };
        let api = from_backend(&overflow);
        assert_eq!(api.status, 400);
        assert_eq!(
            api.openai_body().error.code,
            Some("context_length_exceeded")
        );
        let limited = BackendError::Http {
            status: 429,
            code: "rate_limit".into(),
            message: "slow down".into(),
            retry_after: Some(Duration::from_secs(7)),
        };
        let api = from_backend(&limited);
        assert_eq!((api.status, api.retry_after), (429, Some(7)));
        assert_eq!(api.anthropic_body().error.kind, "rate_limit_error");
        let denied = BackendError::Http {
            status: 401,
            code: String::new(),
            message: "bad key".into(),
            retry_after: None,
        };
        assert_eq!(from_backend(&denied).status, 502);
        assert_eq!(
            from_backend(&BackendError::Timeout("read".into())).status,
            504
        );
    }

    #[test]
    fn a_request_the_model_cannot_take_is_a_400_in_the_backends_words() {
        // The in-process model without a projector refuses an image part so.
        let words = "this model takes no images: it has no vision projector";
        let api = from_backend(&BackendError::invalid(words));
        assert_eq!((api.status, api.kind), (400, "invalid_request_error"));
        assert_eq!(api.message, words);
        // No one field is at fault: no `param` (it said "grammar" here once).
        assert_eq!(api.param, None);
        assert_eq!(api.anthropic_body().error.kind, "invalid_request_error");
        assert_eq!(api.ollama_body().error, words);
    }

    #[test]
    fn both_error_shapes_keep_their_nulls() {
        let error = ApiError::new(503, "server_busy", "full");
        let openai: serde_json::Value =
            serde_json::from_str(&wire::encode(&error.openai_body())).unwrap();
        assert_eq!(
            openai,
            serde_json::json!({"error": {"message": "full", "type": "server_busy",
                                         "param": null, "code": null}})
        );
        let anthropic: serde_json::Value =
            serde_json::from_str(&wire::encode(&error.anthropic_body())).unwrap();
        assert_eq!(
            anthropic,
            serde_json::json!({"type": "error",
                               "error": {"type": "overloaded_error", "message": "full"}})
        );
    }
}

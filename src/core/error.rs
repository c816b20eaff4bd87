//! Typed errors shared across layers.
//!
//! Retryability is a method on the error, not a string match at the call site.
//! Each boundary (exit code, HTTP status, SSE error event) maps these in one place.

use std::fmt;
use std::time::Duration;

/// The category of an [`crate::core::Event::Error`], also used as a stable string on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    ContextOverflow,
    Http,
    Auth,
    Connect,
    Timeout,
    Protocol,
    Config,
    Cancelled,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::ContextOverflow => "context_overflow",
            ErrorKind::Http => "http_error",
            ErrorKind::Auth => "auth_error",
            ErrorKind::Connect => "connect_error",
            ErrorKind::Timeout => "timeout",
            ErrorKind::Protocol => "protocol_error",
            ErrorKind::Config => "config_error",
            ErrorKind::Cancelled => "cancelled",
        }
    }
}

/// Why a backend could not produce a reply.
#[derive(Debug, Clone, PartialEq)]
pub enum BackendError {
    /// The prompt (plus the answer's reserve) does not fit the model's context.
    ContextOverflow {
        message: String,
        /// Tokens the request needed, when the provider said so.
        prompt_tokens: Option<u64>,
        /// The context window, when the provider said so.
        limit: Option<u64>,
    },
    /// The provider answered with an error status (or an error object mid-stream).
    Http {
        status: u16,
        /// The provider's error type or code, e.g. `rate_limit_error`.
        code: String,
        message: String,
        /// How long the provider asked us to wait before retrying.
        retry_after: Option<Duration>,
    },
    /// The connection could not be made (refused, DNS failure, TLS failure).
    Connect(String),
    /// A timeout elapsed (connect, between reads, or overall).
    Timeout(String),
    /// The provider's answer did not follow its documented format.
    Protocol(String),
    /// The provider sent more than a cap allows (one reply, one body); the
    /// message names the cap and how to raise it. Never retried: the same
    /// request would likely do it again.
    TooLarge(String),
    /// The sink asked to stop.
    Cancelled,
    /// The backend is misconfigured (no API key, no model).
    Config(String),
    /// The request asks for what cannot be done with it as given (a GBNF
    /// grammar that does not parse, an image for a model without vision): the
    /// client's fault, never retried. `param` names the request's field where
    /// one field alone is at fault (an API error's `param`).
    Invalid {
        param: Option<&'static str>,
        message: String,
    },
}

impl BackendError {
    /// [`BackendError::Invalid`] with no one field at fault.
    pub fn invalid(message: impl Into<String>) -> BackendError {
        BackendError::Invalid {
            param: None,
            message: message.into(),
        }
    }

    /// Whether retrying the same request may succeed. Only meaningful before any output was shown.
    pub fn is_retryable(&self) -> bool {
        match self {
            BackendError::Connect(_) | BackendError::Timeout(_) => true,
            BackendError::Http { status, .. } => matches!(status, 408 | 409 | 429 | 500..=599),
            _ => false,
        }
    }

    pub fn kind(&self) -> ErrorKind {
        match self {
            BackendError::ContextOverflow { .. } => ErrorKind::ContextOverflow,
            BackendError::Http {
                status: 401 | 403, ..
            } => ErrorKind::Auth,
            BackendError::Http { .. } => ErrorKind::Http,
            BackendError::Connect(_) => ErrorKind::Connect,
            BackendError::Timeout(_) => ErrorKind::Timeout,
            BackendError::Protocol(_) | BackendError::TooLarge(_) => ErrorKind::Protocol,
            BackendError::Cancelled => ErrorKind::Cancelled,
            BackendError::Config(_) | BackendError::Invalid { .. } => ErrorKind::Config,
        }
    }

    /// Tokens that must go for the request to fit, when the provider's message says so.
    pub fn tokens_over(&self) -> Option<u64> {
        match self {
            BackendError::ContextOverflow {
                prompt_tokens: Some(needed),
                limit: Some(limit),
                ..
            } => Some(needed.saturating_sub(*limit)),
            _ => None,
        }
    }
}

impl fmt::Display for BackendError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BackendError::ContextOverflow { message, .. } => {
                write!(f, "context length exceeded: {message}")
            }
            BackendError::Http {
                status,
                code,
                message,
                ..
            } => {
                if code.is_empty() {
                    write!(f, "HTTP {status}: {message}")
                } else {
                    write!(f, "HTTP {status} ({code}): {message}")
                }
            }
            BackendError::Connect(m) => write!(f, "cannot connect: {m}"),
            BackendError::Timeout(m) => write!(f, "timed out: {m}"),
            BackendError::Protocol(m) => write!(f, "unexpected response: {m}"),
            BackendError::TooLarge(m) => write!(f, "too large: {m}"),
            BackendError::Cancelled => write!(f, "cancelled"),
            BackendError::Config(m) | BackendError::Invalid { message: m, .. } => write!(f, "{m}"),
        }
    }
}

impl std::error::Error for BackendError {}

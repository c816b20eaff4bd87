//! One error type per C operation of the wrapper, so callers can tell what failed.
//!
//! The generation thread in `crate::backend::llamacpp` maps these onto
//! `crate::core::BackendError` in one place.

#![forbid(unsafe_code)]

use std::fmt;

/// A parameter was out of the range the C API accepts; checked before any C call.
#[derive(Debug, Clone, PartialEq)]
pub struct InvalidParam {
    pub name: &'static str,
    pub message: String,
}

impl InvalidParam {
    pub fn new(name: &'static str, message: impl Into<String>) -> Self {
        InvalidParam {
            name,
            message: message.into(),
        }
    }
}

impl fmt::Display for InvalidParam {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.name, self.message)
    }
}

/// `llama_model_load_from_file` failed.
#[derive(Debug, Clone, PartialEq)]
pub enum LoadError {
    NotFound(String),
    InvalidPath(String),
    Param(InvalidParam),
    /// llama.cpp returned null (corrupt file, unsupported architecture, out of memory).
    Failed(String),
}

/// `llama_init_from_model` failed.
#[derive(Debug, Clone, PartialEq)]
pub enum InitError {
    Param(InvalidParam),
    Failed(String),
}

/// `llama_tokenize` or `llama_token_to_piece` failed.
#[derive(Debug, Clone, PartialEq)]
pub enum TokenizeError {
    TooLong(usize),
    Failed(i32),
}

/// `llama_decode` failed.
#[derive(Debug, Clone, PartialEq)]
pub enum DecodeError {
    /// The batch would run past the context window (checked before calling C).
    ContextFull { needed: usize, n_ctx: usize },
    /// Return code 1: no KV slot for the batch.
    NoKvSlot,
    /// Return code 2: aborted through the abort callback.
    Aborted,
    /// Any other non-zero return code.
    Failed(i32),
    /// The batch was empty or larger than its capacity.
    BadBatch(String),
}

/// A sampler could not be created (bad parameter, or a grammar llama.cpp rejected).
#[derive(Debug, Clone, PartialEq)]
pub enum SamplerError {
    Param(InvalidParam),
    Grammar(String),
    /// A grammar past `grammar::limits::LIMITS` (the message names the limit).
    Limit(String),
    Failed(&'static str),
}

/// A chat template could not be applied.
#[derive(Debug, Clone, PartialEq)]
pub enum TemplateError {
    Failed(String),
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::NotFound(p) => write!(f, "model file not found: {p}"),
            LoadError::InvalidPath(p) => write!(f, "model path is not valid: {p}"),
            LoadError::Param(p) => write!(f, "{p}"),
            LoadError::Failed(p) => write!(f, "llama.cpp could not load the model {p}"),
        }
    }
}

impl fmt::Display for InitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InitError::Param(p) => write!(f, "{p}"),
            InitError::Failed(m) => write!(f, "llama.cpp could not create a context: {m}"),
        }
    }
}

impl fmt::Display for TokenizeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenizeError::TooLong(n) => write!(f, "text too long to tokenize ({n} bytes)"),
            TokenizeError::Failed(code) => write!(f, "tokenizer failed (code {code})"),
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::ContextFull { needed, n_ctx } => {
                write!(f, "context full: {needed} tokens needed, {n_ctx} available")
            }
            DecodeError::NoKvSlot => write!(f, "no KV cache slot for the batch"),
            DecodeError::Aborted => write!(f, "decode aborted"),
            DecodeError::Failed(code) => write!(f, "llama_decode failed (code {code})"),
            DecodeError::BadBatch(m) => write!(f, "bad batch: {m}"),
        }
    }
}

impl fmt::Display for SamplerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SamplerError::Param(p) => write!(f, "{p}"),
            SamplerError::Grammar(m) => write!(f, "grammar rejected by llama.cpp: {m}"),
            SamplerError::Limit(m) => write!(f, "{m}"),
            SamplerError::Failed(what) => write!(f, "could not create the {what} sampler"),
        }
    }
}

impl fmt::Display for TemplateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TemplateError::Failed(m) => write!(f, "chat template failed: {m}"),
        }
    }
}

impl std::error::Error for LoadError {}
impl std::error::Error for InitError {}
impl std::error::Error for TokenizeError {}
impl std::error::Error for DecodeError {}
impl std::error::Error for SamplerError {}
impl std::error::Error for TemplateError {}

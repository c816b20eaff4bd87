//! The `Backend` trait: one small boundary between the agent and every model provider.
//!
//! A backend turns a [`Session`] into a [`Reply`], streaming what it produces
//! into an [`EventSink`] as it goes. Backends never evict and never run tools:
//! a context overflow comes back as [`BackendError::ContextOverflow`] and tool
//! calls come back in [`Reply::tool_calls`]; the agent decides what happens next.

use serde_json::Value;

use crate::core::{
    Artefact, BackendError, EventSink, FinishReason, Message, Session, ToolCall, ToolSpec,
};

pub mod anthropic;
pub mod cli;
pub mod estimate;
pub mod failover;
#[cfg(test)]
pub(crate) mod fake;
pub mod gemini;
pub mod http;
pub mod llamacpp;
pub mod local;
pub mod models;
pub mod ollama;
pub mod openai;
pub mod recording;
#[cfg(feature = "tensorrt")]
pub mod tensorrt;
pub mod toolnames;

/// Whether and which tool the model must call.
// `None`, `Required` and `Named` come from API-server requests and the
// grammar-forced path of local backends; the CLI always sends `Auto`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum ToolChoice {
    #[default]
    Auto,
    None,
    Required,
    Named(String),
}

/// Sampling and length settings for one generation. `None` means "the provider's default".
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sampling {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<u32>,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub seed: Option<u64>,
    /// llama.cpp's extra sampling fields (the API server passes them through).
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    /// How many recent tokens the penalties look at (-1 = the whole context).
    pub repeat_last_n: Option<i32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    /// Constrains the reply to JSON (the API server's `response_format`).
    pub response_format: Option<ResponseFormat>,
}

/// A structured-output constraint: local models enforce it with a grammar,
/// API backends pass it on.
#[derive(Debug, Clone, PartialEq)]
pub enum ResponseFormat {
    /// Any JSON object.
    JsonObject,
    /// A JSON value following `schema`.
    JsonSchema {
        name: String,
        schema: Value,
        strict: bool,
    },
}

/// What the agent asks of a backend for one generation.
#[derive(Debug, Clone, Copy)]
pub struct GenerateRequest<'a> {
    pub tools: &'a [ToolSpec],
    pub tool_choice: &'a ToolChoice,
    pub sampling: &'a Sampling,
    /// Stream deltas as they arrive; when false the sink gets the whole text once.
    pub stream: bool,
}

/// Token usage reported by the provider (or measured by a local backend).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
}

/// The result of one generation.
#[derive(Debug, Clone, PartialEq)]
pub struct Reply {
    /// Visible assistant text (tool-call markup and reasoning removed).
    pub content: String,
    /// Reasoning text, empty when there was none.
    pub thinking: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish: FinishReason,
    pub usage: Option<Usage>,
    /// Reasoning artefacts to store on the assistant message and send back later.
    pub artefacts: Vec<Artefact>,
}

/// How a backend describes itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackendInfo {
    /// The backend type, e.g. `openai`.
    pub kind: &'static str,
    pub model: String,
    /// Context window in tokens, 0 when unknown.
    pub context_size: u64,
    /// True for in-process models, false for remote APIs.
    pub local: bool,
}

/// A model provider.
pub trait Backend: Send {
    fn info(&self) -> BackendInfo;

    /// Generates the next assistant message for `session`.
    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError>;

    /// Continues `prompt` as plain text: no chat template, no tools, no output
    /// filter (the API server's `/v1/completions`). Only the in-process model
    /// can; the others refuse.
    fn complete(
        &mut self,
        _prompt: &str,
        _request: &GenerateRequest<'_>,
        _sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        Err(BackendError::Config(format!(
            "the {} backend cannot continue a raw prompt; only the in-process model can",
            self.info().kind
        )))
    }

    /// Estimates the tokens `message` occupies, for eviction decisions.
    fn count_tokens(&self, message: &Message) -> u32;

    /// A hint that `session` waits for its next user message, to be sent with
    /// `tools`: an in-process model decodes the part of that prompt already known
    /// (system prompt, tool descriptions) while the user types. Remote APIs ignore it.
    fn warm(&mut self, _session: &Session, _tools: &[ToolSpec]) {}

    /// The model ids this provider offers (`--list-models`, `/model list`).
    /// The in-process backends are not asked: their models are the local
    /// models directories (`models.rs`), listed without loading one.
    fn list_models(&self) -> Result<Vec<String>, BackendError> {
        Err(BackendError::Config(format!(
            "the {} backend cannot list models",
            self.info().kind
        )))
    }
}

//! Ollama's wire shapes (server side; the client side is `backend::ollama`'s).

use serde::Serialize;
use serde_json::{Map, Value};

/// `{"error": "..."}`.
#[derive(Debug, Serialize)]
pub struct Error<'a> {
    pub error: &'a str,
}

/// One line of a generation (or the whole answer, `done: true`).
#[derive(Debug, Serialize)]
pub struct Line<'a> {
    pub model: &'a str,
    pub created_at: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<OutMessage<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<&'a str>,
    pub done: bool,
    #[serde(flatten)]
    pub figures: Option<Figures>,
}

#[derive(Debug, Serialize)]
pub struct OutMessage<'a> {
    pub role: &'static str,
    pub content: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thinking: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall<'a>>,
}

#[derive(Debug, Serialize)]
pub struct ToolCall<'a> {
    pub id: &'a str,
    pub function: Function<'a>,
}

#[derive(Debug, Serialize)]
pub struct Function<'a> {
    pub index: usize,
    pub name: &'a str,
    /// An object, not a string as in OpenAI's shape.
    pub arguments: Value,
}

/// The last line's figures; durations in nanoseconds.
#[derive(Debug, Default, Serialize)]
pub struct Figures {
    pub done_reason: &'static str,
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: u64,
    pub prompt_eval_duration: u64,
    pub eval_count: u64,
    pub eval_duration: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Details {
    pub parent_model: String,
    pub format: String,
    pub family: String,
    pub families: Vec<String>,
    pub parameter_size: String,
    pub quantization_level: String,
}

#[derive(Debug, Serialize)]
pub struct Tags<'a> {
    pub models: Vec<TagEntry<'a>>,
}

#[derive(Debug, Serialize)]
pub struct TagEntry<'a> {
    pub name: &'a str,
    pub model: &'a str,
    pub modified_at: String,
    pub size: u64,
    pub digest: String,
    pub details: Details,
}

#[derive(Debug, Serialize)]
pub struct Show<'a> {
    pub modified_at: String,
    pub template: &'a str,
    pub modelfile: &'a str,
    pub license: &'a str,
    pub parameters: String,
    pub details: Details,
    pub model_info: Map<String, Value>,
    pub capabilities: Vec<&'static str>,
}

#[derive(Debug, Serialize)]
pub struct Ps<'a> {
    pub models: Vec<PsEntry<'a>>,
}

#[derive(Debug, Serialize)]
pub struct PsEntry<'a> {
    pub name: &'a str,
    pub model: &'a str,
    pub size: u64,
    pub digest: String,
    pub details: Details,
    pub expires_at: String,
    pub size_vram: u64,
    pub context_length: u64,
}

#[derive(Debug, Serialize)]
pub struct Embed {
    pub model: String,
    pub embeddings: Vec<Vec<f32>>,
    pub total_duration: u64,
    pub load_duration: u64,
    pub prompt_eval_count: u64,
}

#[derive(Debug, Serialize)]
pub struct Embedding {
    pub embedding: Vec<f32>,
}

#[derive(Debug, Serialize)]
pub struct Version {
    pub version: &'static str,
    pub shepherd: &'static str,
}

/// A line of `/api/pull`'s progress; the non-streamed answer is its last,
/// `{"status": "success"}`.
#[derive(Debug, Serialize)]
pub struct Progress<'a> {
    pub status: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub digest: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completed: Option<u64>,
}

impl<'a> Progress<'a> {
    /// A line with a status only (`{"status": "success"}`).
    pub fn status(status: &'a str) -> Progress<'a> {
        Progress {
            status,
            digest: None,
            total: None,
            completed: None,
        }
    }
}

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
pub mod ending;
pub mod estimate;
pub mod failover;
#[cfg(test)]
pub(crate) mod fake;
pub mod gemini;
pub mod hosted;
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
    /// Report each generated token's log-probability and this many likeliest
    /// alternatives ([`crate::core::Event::Logprobs`]); the in-process model only.
    pub logprobs: Option<u32>,
    /// Added to a token's logit before sampling (token id, bias); `-inf` bans the
    /// token. The in-process model only.
    pub logit_bias: Vec<(i32, f32)>,
    /// Variables for the chat template beside the messages (llama-server's
    /// `chat_template_kwargs`, e.g. `enable_thinking`), over the configured ones.
    /// The in-process models only.
    pub chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Biases keyed by text (llama-server's `logit_bias` string keys), for each
    /// token of the text: the API server tokenizes them into `logit_bias`
    /// before generation.
    pub logit_bias_text: Vec<(String, f32)>,
    /// What the in-process model reports beside the answer (llama-server's
    /// `return_progress`, `timings_per_token`, `verbose`); other backends ignore it.
    pub telemetry: Telemetry,
}

/// Reports a request may ask of the in-process model; each costs nothing unasked.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Telemetry {
    /// The prompt's decode, before its first batch and after each
    /// ([`crate::core::Event::Progress`] with `prompt`).
    pub progress: bool,
    /// The figures so far before each piece of text ([`crate::core::Event::Progress`]).
    pub timings: bool,
    /// The rendered prompt's text, in [`crate::core::Event::Prefilled`].
    pub prompt: bool,
}

/// The most tokens a prompt must leave free for its answer, [`Sampling::answer_reserve`].
pub const ANSWER_RESERVE: u32 = 512;

impl Sampling {
    /// The tokens a prompt must leave free in a context of `n_ctx` for the answer
    /// to have room: the request's `max_tokens`, but never more than
    /// [`ANSWER_RESERVE`] or a quarter of the context (at least one). `max_tokens` is
    /// a cap, not a reservation, as llama-server and the hosted APIs treat it: an
    /// answer that reaches the end of the context stops there with
    /// `finish_reason: length`, so a `max_tokens` of 32,000 on an 8k context is no
    /// error. The one rule for every backend that checks a prompt's fit (in-process,
    /// Ollama) and for the agent's eviction.
    pub fn answer_reserve(&self, n_ctx: u64) -> u64 {
        let cap = u64::from(self.max_tokens.unwrap_or(ANSWER_RESERVE));
        cap.min(u64::from(ANSWER_RESERVE)).min(n_ctx / 4).max(1)
    }
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
    /// Text following a GBNF grammar (llama-server's `grammar` field).
    Grammar(String),
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

/// The text that stands for an image in a raw prompt (llama-server's, and
/// libmtmd's default marker).
pub const MEDIA_MARKER: &str = "<__media__>";

/// One part of a prompt continued as it is: text, or token ids (OpenAI's
/// `/v1/completions` and llama-server's `/completion` take either, llama-server
/// both mixed in one array).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PromptPart {
    Text(String),
    Tokens(Vec<i32>),
    /// llama-server's `/infill`: a fill-in-the-middle prompt, laid out with the
    /// model's FIM tokens where its vocabulary is at hand.
    Infill(Infill),
    /// An image at this point of the prompt (llama-server's `multimodal_data`
    /// in place of a `<__media__>` marker); only a model with a projector takes it.
    Image(crate::core::Image),
}

/// The code around a gap to fill (`/infill`): what comes before and after it,
/// text that starts the middle, and other files for context (file name, text).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Infill {
    pub prefix: String,
    pub suffix: String,
    pub prompt: String,
    pub extra: Vec<(String, String)>,
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
    /// The request's stop string that ended the reply, when one did (never the
    /// template's own end-of-turn text): Anthropic's `stop_sequence`,
    /// llama-server's `stopping_word`.
    pub stop_sequence: Option<String>,
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

    /// Whether the model reads images ([`crate::core::ImagePart`]s): the in-process
    /// model with a vision projector, a provider whose model takes them. The agent
    /// gives a text-only model an image's [`crate::core::Image::summary`] instead.
    fn takes_images(&self) -> bool {
        false
    }

    /// Generates the next assistant message for `session`.
    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError>;

    /// Continues `prompt` as it is: no chat template, no tools, no output
    /// filter (the API server's `/v1/completions` and `/completion`). Only the
    /// in-process model can; the others refuse.
    fn complete(
        &mut self,
        _prompt: &[PromptPart],
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_reserve_is_max_tokens_capped_by_the_reserve_and_a_quarter_of_the_context() {
        let reserve = |max_tokens: Option<u32>, n_ctx: u64| {
            Sampling {
                max_tokens,
                ..Sampling::default()
            }
            .answer_reserve(n_ctx)
        };
        // A cap, not a reservation: 32,000 on an 8k context reserves what a
        // request without max_tokens does.
        assert_eq!(reserve(Some(32_000), 8192), ANSWER_RESERVE as u64);
        assert_eq!(reserve(Some(8192), 8192), ANSWER_RESERVE as u64);
        assert_eq!(reserve(None, 8192), ANSWER_RESERVE as u64);
        // A smaller max_tokens reserves only that.
        assert_eq!(reserve(Some(16), 8192), 16);
        // A small context keeps three quarters for the prompt.
        assert_eq!(reserve(None, 256), 64);
        assert_eq!(reserve(Some(1000), 256), 64);
        // Never nothing, even where the context is unknown.
        assert_eq!(reserve(None, 0), 1);
    }
}

//! llama-server's own shapes: `/tokenize`, `/detokenize`, `/props`, `/slots`
//! and its slot actions, `/completion` and its stream, `/embedding` and
//! `/apply-template`, `/rerank` (Jina's and TEI's shapes, as llama-server
//! answers them) and Vertex AI's `/predict`; and the extensions llama-server
//! adds to OpenAI's shapes too: `timings`, `prompt_progress`, and the token
//! probabilities in chat's shape, which its `/completion` shares.

use serde::Serialize;

use crate::backend::Sampling;
use crate::llama::SamplerParams;

/// One entry of `GET /slots`, llama-server's fields and two of shepherd's
/// own (`n_cached`, `n_decoded`).
#[derive(Debug, Serialize)]
pub struct Slot<'a> {
    pub id: usize,
    pub n_ctx: usize,
    pub speculative: bool,
    pub is_processing: bool,
    /// Tokens the slot's cache holds (what a request sharing them reuses).
    pub n_cached: usize,
    /// Tokens generated so far by the request it serves.
    pub n_decoded: usize,
    /// The request it serves, else the last one it served; absent before
    /// its first, as llama-server leaves them out.
    #[serde(flatten)]
    pub task: Option<SlotTask<'a>>,
}

/// A slot's request, in llama-server's words.
#[derive(Debug, Serialize)]
pub struct SlotTask<'a> {
    pub id_task: u64,
    /// Tokens in the slot's cache (prompt, then what was generated).
    pub n_prompt_tokens: usize,
    pub n_prompt_tokens_processed: usize,
    pub n_prompt_tokens_cache: usize,
    pub params: Params<'a>,
    /// One entry, as llama-server sends it.
    pub next_token: [NextToken; 1],
}

#[derive(Debug, Serialize)]
pub struct NextToken {
    pub has_next_token: bool,
    pub has_new_line: bool,
    /// -1: no limit but the context, or nothing to come.
    pub n_remain: i64,
    pub n_decoded: usize,
}

/// `POST /slots/N?action=save|restore|erase`, in llama-server's words.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum SlotDone<'a> {
    Saved {
        id_slot: usize,
        filename: &'a str,
        n_saved: usize,
        n_written: usize,
        timings: SaveTimings,
    },
    Restored {
        id_slot: usize,
        filename: &'a str,
        n_restored: usize,
        n_read: usize,
        timings: RestoreTimings,
    },
    Erased {
        id_slot: usize,
        n_erased: usize,
    },
}

#[derive(Debug, Serialize)]
pub struct SaveTimings {
    pub save_ms: f64,
}

#[derive(Debug, Serialize)]
pub struct RestoreTimings {
    pub restore_ms: f64,
}

/// `{"tokens": [...]}`: ids, or `{id, piece}` with `with_pieces`.
#[derive(Debug, Serialize)]
pub struct Tokens {
    pub tokens: Vec<Token>,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Token {
    Id(i32),
    WithPiece { id: i32, piece: PieceText },
}

/// A piece as text when it is UTF-8 on its own, else its bytes.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum PieceText {
    Text(String),
    Bytes(Vec<u8>),
}

/// `{"content": "..."}`.
#[derive(Debug, Serialize)]
pub struct Detokenized {
    pub content: String,
}

/// `GET /props`.
#[derive(Debug, Serialize)]
pub struct Props<'a> {
    pub default_generation_settings: GenerationSettings<'a>,
    pub total_slots: u32,
    /// The id clients see (`--alias`, else the model's name).
    pub model_alias: &'a str,
    /// The weights' type as llama.cpp names it.
    pub model_ftype: &'a str,
    pub model_path: &'a str,
    pub chat_template: &'a str,
    /// What the template can render, llama-server's `supports_*` flags.
    pub chat_template_caps: std::collections::BTreeMap<&'static str, bool>,
    pub bos_token: &'a str,
    pub eos_token: &'a str,
    pub modalities: Modalities,
    pub build_info: &'static str,
    /// The model is out of memory until a request needs it (`--sleep-idle-seconds`).
    pub is_sleeping: bool,
}

#[derive(Debug, Serialize)]
pub struct GenerationSettings<'a> {
    /// The context each slot (each request) has.
    pub n_ctx: u32,
    pub params: Params<'a>,
}

/// The sampling a request gets for the fields it leaves out.
#[derive(Debug, Serialize)]
pub struct Params<'a> {
    pub temperature: f32,
    pub top_k: i32,
    pub top_p: f32,
    pub min_p: f32,
    pub repeat_penalty: f32,
    pub repeat_last_n: i32,
    pub presence_penalty: f32,
    pub frequency_penalty: f32,
    /// -1: until the context is full or the model stops.
    pub n_predict: i64,
    /// The same as `n_predict`, as llama-server repeats it.
    pub max_tokens: i64,
    /// Likeliest alternatives reported per token (0: none).
    pub n_probs: u32,
    pub seed: u64,
    pub stop: &'a [String],
    pub logit_bias: Vec<Bias>,
}

#[derive(Debug, Serialize)]
pub struct Modalities {
    pub vision: bool,
    pub audio: bool,
}

/// `POST /completion`: the whole answer, or a stream's last chunk (content
/// empty there: it was streamed).
#[derive(Debug, Serialize)]
pub struct Completion<'a> {
    pub index: u32,
    pub content: &'a str,
    /// The answer's token ids with `return_tokens` (else empty).
    pub tokens: Vec<i32>,
    pub id_slot: i32,
    pub stop: bool,
    pub model: &'a str,
    pub tokens_predicted: u64,
    pub tokens_evaluated: u64,
    pub generation_settings: Params<'a>,
    pub prompt: &'a str,
    pub has_new_line: bool,
    pub truncated: bool,
    /// `eos`, `word` (a stop string), `limit` (`n_predict` or the context).
    pub stop_type: &'static str,
    pub stopping_word: &'a str,
    pub tokens_cached: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// With `n_probs`: each token's probability and the likeliest others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_probabilities: Option<Probabilities<'a>>,
}

/// `completion_probabilities`: log-probabilities (`logprob`, `top_logprobs`),
/// or with `post_sampling_probs` probabilities (`prob`, `top_probs`).
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Probabilities<'a> {
    Log(Vec<TokenLogprob<'a>>),
    Post(Vec<TokenProb<'a>>),
}

/// One token's probability, as llama-server writes it with `post_sampling_probs`.
#[derive(Debug, Serialize)]
pub struct TokenProb<'a> {
    pub id: i32,
    pub token: String,
    pub bytes: &'a [u8],
    pub prob: f32,
    /// The likeliest tokens at this place; absent inside that list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_probs: Option<Vec<TokenProb<'a>>>,
}

/// A logit bias in `generation_settings`; `bias` is `null` for a banned token
/// (-infinity, as `ignore_eos` bans the end-of-generation tokens).
#[derive(Debug, Serialize)]
pub struct Bias {
    pub bias: f32,
    pub token: i32,
}

/// `/completion`'s whole answer: one, or with several prompts the list.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub enum Completions<'a> {
    One(Box<Completion<'a>>),
    Many(Vec<Completion<'a>>),
}

/// One streamed piece of a `/completion` answer.
#[derive(Debug, Serialize)]
pub struct CompletionChunk<'a> {
    pub index: u32,
    pub content: &'a str,
    /// The chunk's token ids with `return_tokens` (else empty).
    pub tokens: Vec<i32>,
    pub stop: bool,
    pub id_slot: i32,
    /// With `n_probs`: each token's probability and the likeliest others.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_probabilities: Option<Probabilities<'a>>,
    /// The figures so far, with `timings_per_token`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timings: Option<Timings>,
    /// How far the prompt is, with `return_progress`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_progress: Option<PromptProgress>,
}

/// One input's entry in llama-server's `/embedding` answer: the pooled
/// vector, as the one entry of a list (with `--pooling none` llama-server
/// lists one per token; this server always pools).
#[derive(Debug, Serialize)]
pub struct Embedding {
    pub index: usize,
    pub embedding: [Vec<f32>; 1],
}

/// `POST /apply-template`: the prompt the model would read.
#[derive(Debug, Serialize)]
pub struct Applied {
    pub prompt: String,
}

/// `POST /rerank` in Jina's (and Cohere's) shape: the documents by relevance.
#[derive(Debug, Serialize)]
pub struct Reranked<'a> {
    pub model: &'a str,
    pub object: &'static str,
    pub usage: RerankUsage,
    pub results: Vec<Ranked<'a>>,
}

/// The tokens a rerank read (query and document, every pair).
#[derive(Debug, Serialize)]
pub struct RerankUsage {
    pub prompt_tokens: u64,
    pub total_tokens: u64,
}

/// One document's place in Jina's shape; `document` with `return_documents`.
#[derive(Debug, Serialize)]
pub struct Ranked<'a> {
    pub index: usize,
    pub relevance_score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<DocumentText<'a>>,
}

/// `{"text": ...}`, a document as Jina returns it.
#[derive(Debug, Serialize)]
pub struct DocumentText<'a> {
    pub text: &'a str,
}

/// One text's place in TEI's shape (the answer is a bare list of them);
/// `text` with `return_text`.
#[derive(Debug, Serialize)]
pub struct TeiRanked<'a> {
    pub index: usize,
    pub score: f32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<&'a str>,
}

/// Vertex AI's `/predict` answer: each instance's answer body, in order.
#[derive(Debug, Serialize)]
pub struct Predictions {
    pub predictions: Vec<serde_json::Value>,
}

/// One token's log-probability, in chat's shape with llama-server's `id`
/// (its `/completion` reports the same entries as `completion_probabilities`).
#[derive(Debug, Serialize)]
pub struct TokenLogprob<'a> {
    pub id: i32,
    pub token: String,
    pub bytes: &'a [u8],
    pub logprob: f32,
    /// The likeliest tokens at this place; absent inside that list.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub top_logprobs: Option<Vec<TokenLogprob<'a>>>,
}

/// llama-server's `prompt_progress`: the prompt's tokens, those reused from
/// the cache, those in the cache now, and the milliseconds since it started.
#[derive(Debug, Serialize)]
pub struct PromptProgress {
    pub total: u64,
    pub cache: u64,
    pub processed: u64,
    pub time_ms: u64,
}

/// llama.cpp's `timings`, for clients that show speed.
#[derive(Debug, Serialize)]
pub struct Timings {
    /// Prompt tokens decoded (not those read from the cache), as llama-server counts.
    pub prompt_n: u64,
    pub cache_n: u64,
    /// 0 where not measured (yet), as llama-server writes it.
    pub prompt_ms: f64,
    pub prompt_per_token_ms: f64,
    pub prompt_per_second: f64,
    pub predicted_n: u64,
    pub predicted_ms: f64,
    pub predicted_per_token_ms: f64,
    pub predicted_per_second: f64,
    /// Speculative decoding's drafted and accepted tokens (as llama-server).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_n: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draft_n_accepted: Option<u64>,
}

/// The sampling `sampling` comes to, llama.cpp's defaults filled in for what it
/// leaves out (`/props`, and `/completion`'s `generation_settings`).
pub fn params(sampling: &Sampling) -> Params<'_> {
    let fallback = SamplerParams::default();
    Params {
        temperature: sampling.temperature.unwrap_or(fallback.temperature),
        top_k: sampling
            .top_k
            .map_or(fallback.top_k, |k| i32::try_from(k).unwrap_or(i32::MAX)),
        top_p: sampling.top_p.unwrap_or(fallback.top_p),
        min_p: sampling.min_p.unwrap_or(fallback.min_p),
        repeat_penalty: sampling.repeat_penalty.unwrap_or(fallback.repeat_penalty),
        repeat_last_n: sampling.repeat_last_n.unwrap_or(fallback.penalty_last_n),
        presence_penalty: (sampling.presence_penalty).unwrap_or(fallback.presence_penalty),
        frequency_penalty: (sampling.frequency_penalty).unwrap_or(fallback.frequency_penalty),
        n_predict: sampling.max_tokens.map_or(-1, i64::from),
        max_tokens: sampling.max_tokens.map_or(-1, i64::from),
        n_probs: sampling.logprobs.unwrap_or(0),
        seed: sampling.seed.unwrap_or(u64::from(fallback.seed)),
        stop: &sampling.stop,
        logit_bias: (sampling.logit_bias.iter())
            .map(|&(token, bias)| Bias { bias, token })
            .collect(),
    }
}

//! What the in-process model offers besides chat generation, for the API
//! server's llama-server-style routes: embeddings (`/v1/embeddings`), the
//! tokenizer (`/tokenize`, `/detokenize`) and the model's properties
//! (`/props`).
//!
//! [`LocalModel`] is a `Send + Sync + Clone` handle to the same `llama-gen`
//! thread as the [`LlamaBackend`](super::LlamaBackend) it came from; each call
//! is one job on that thread, answered on its own channel. The thread-side
//! halves are the free functions here ([`embed`], [`tokenize`],
//! [`detokenize`]); the scheduler in `slots.rs` decides when they run.
//!
//! **Embeddings** are computed in an idle slot's sequence, between two
//! generation steps: the sequence is cleared, the input decoded with the
//! context's embeddings output on (`llama_set_embeddings`), the pooled vector
//! (`--pooling`, mean by default, chosen when the context is created) read
//! with `llama_get_embeddings_seq`, and the sequence cleared again. That slot
//! loses its cached prefix (its mirror is emptied with it, so the next
//! request there decodes its prompt whole); the other slots, generating or
//! not, keep theirs. llama.cpp pools within one physical batch, so an input
//! may have at most `n_ubatch` tokens. Vectors are L2-normalised, as OpenAI's
//! are and llama-server's are by default.
//!
//! **Reranking** is the same path with `--pooling rank`: each input is a
//! query and a document ([`EmbedInput::Pair`]), tokenized as llama-server
//! does ([`pair_tokens`]), and what llama.cpp pools is the model's relevance
//! score, passed on as it is (never normalised). Under rank pooling only pairs
//! are taken, and pairs only under it: a vector of scores is no embedding, and
//! a score needs a reranker's pooling.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crossbeam_channel::{bounded, Sender};

use super::{worker_gone, Job, Shared};
use crate::core::BackendError;
use crate::llama::{Batch, Context, Model, Pooling, Token};

pub mod jobs;
use jobs::{SlotInfo, SlotJob, SlotReport};

/// One input of an embedding request.
#[derive(Debug, Clone, PartialEq)]
pub enum EmbedInput {
    /// Text, tokenized with the model's special tokens (BOS where it adds one).
    Text(String),
    /// Token ids, used as they are.
    Tokens(Vec<Token>),
    /// A query and a document to score (`--pooling rank`).
    Pair { query: String, document: String },
}

/// One input's embedding.
#[derive(Debug, Clone, PartialEq)]
pub struct Embedding {
    /// L2-normalised, `n_embd` long; under rank pooling the pair's scores as the
    /// model gives them (`n_cls_out` long, the first the relevance).
    pub vector: Vec<f32>,
    /// The tokens the input had.
    pub n_tokens: usize,
}

/// Why a request to the model failed: the client's fault, or the model's.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelError {
    /// An input the model cannot take (empty, too long, a token id outside the
    /// vocabulary); `index` is the input's place in the request, when it has one.
    Invalid {
        index: Option<usize>,
        message: String,
    },
    /// The model failed, or its thread is gone.
    Failed(String),
    /// What the request names is not there (a slot, a saved file).
    NotFound(String),
    /// The server was not started for this (`--slot-save-path`).
    Unsupported(String),
}

impl From<BackendError> for ModelError {
    fn from(error: BackendError) -> Self {
        ModelError::Failed(error.to_string())
    }
}

impl std::fmt::Display for ModelError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelError::Invalid { message, .. }
            | ModelError::Failed(message)
            | ModelError::NotFound(message)
            | ModelError::Unsupported(message) => f.write_str(message),
        }
    }
}

/// One token of `/tokenize`: its id and its bytes (not always UTF-8 alone).
pub type Piece = (Token, Vec<u8>);

/// The model's fixed properties (`/props`), read once when it loads.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelProps {
    pub model_path: String,
    /// The whole context, and what each slot gets of it.
    pub n_ctx: u32,
    pub n_ctx_slot: u32,
    pub slots: u32,
    /// The GGUF file's chat template, empty when it has none (ChatML is used).
    pub chat_template: String,
    pub n_embd: usize,
    pub n_vocab: i32,
    pub pooling: Pooling,
    /// The most tokens one embedding input may have.
    pub n_ubatch: u32,
    /// The model's begin and end tokens as text (empty where it has none).
    pub bos_token: String,
    pub eos_token: String,
    /// The weights' type as llama.cpp names it (`Q4_1`, `Q4_K - Medium`).
    pub ftype: String,
    /// What the chat template in use can render ([`crate::template::ChatTemplate::capabilities`]).
    pub template_caps: Vec<(&'static str, bool)>,
    /// Where slot files go (`--slot-save-path`); `None`: slot saves are refused.
    pub slot_save_path: Option<std::path::PathBuf>,
    /// The model has fill-in-the-middle tokens (`/infill`).
    pub infill: bool,
    /// The end-of-generation tokens (what `ignore_eos` bans).
    pub eog_tokens: Vec<i32>,
    /// A vision projector is loaded: prompts may hold images.
    pub vision: bool,
}

/// What the generation thread counts as it works, for llama-server's
/// `llamacpp:*` metrics; updated there, read by any handle without a job.
#[derive(Debug, Default)]
pub struct DecodeCounters {
    /// `llama_decode` calls for requests and embeddings (not the warm-up's,
    /// nor a draft model's), and the slots busy at each, summed.
    pub(super) n_decode: AtomicU64,
    pub(super) n_busy_slots: AtomicU64,
    /// Speculative drafts checked by the model (verification steps).
    pub(super) n_drafts: AtomicU64,
    /// Embedding inputs' tokens, and the microseconds their decodes took.
    pub(super) embed_tokens: AtomicU64,
    pub(super) embed_micros: AtomicU64,
}

impl DecodeCounters {
    /// One decode with `busy` slots serving a request.
    pub(super) fn decoded(&self, busy: usize) {
        self.n_decode.fetch_add(1, Ordering::Relaxed);
        self.n_busy_slots.fetch_add(busy as u64, Ordering::Relaxed);
    }
}

/// A reading of [`DecodeCounters`].
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DecodeFigures {
    pub n_decode: u64,
    pub n_busy_slots: u64,
    pub n_drafts: u64,
    pub embed_tokens: u64,
    pub embed_secs: f64,
}

/// A job for the generation thread besides generation.
pub(super) enum ModelJob {
    Embed(Vec<EmbedInput>, Sender<Result<Vec<Embedding>, ModelError>>),
    Tokenize {
        text: String,
        add_special: bool,
        reply: Sender<Result<Vec<Piece>, ModelError>>,
    },
    Detokenize(Vec<Token>, Sender<Result<String, ModelError>>),
    /// The text a chat prompt renders to with its tools, as a request's would
    /// (`/apply-template`, `/v1/messages/count_tokens`).
    RenderChat {
        conversation: Vec<crate::template::TemplateMessage>,
        tools: Vec<crate::core::ToolSpec>,
        /// The request's template variables (`chat_template_kwargs`).
        kwargs: serde_json::Map<String, serde_json::Value>,
        /// Whether the assistant's opening follows (a request's prompt), or the
        /// text ends with the last message (`add_generation_prompt: false`).
        generation_prompt: bool,
        reply: Sender<Result<String, ModelError>>,
    },
    /// Every slot's state (`GET /slots`).
    Slots(Sender<Result<Vec<SlotInfo>, ModelError>>),
    /// A slot's cache saved, restored or erased, once the slot is free.
    SlotAction(SlotJob),
    /// Nothing but the model in memory (Ollama's load request): answered once it is.
    Wake(Sender<Result<(), ModelError>>),
}

impl ModelJob {
    /// Answers the job with `error` without running it.
    pub(super) fn refuse(self, error: ModelError) {
        // Each reply has its own answer type; a caller that is gone needs none.
        match self {
            ModelJob::Embed(_, reply) => drop(reply.send(Err(error))),
            ModelJob::Tokenize { reply, .. } => drop(reply.send(Err(error))),
            ModelJob::Detokenize(_, reply) => drop(reply.send(Err(error))),
            ModelJob::RenderChat { reply, .. } => drop(reply.send(Err(error))),
            ModelJob::Slots(reply) => drop(reply.send(Err(error))),
            ModelJob::SlotAction(job) => drop(job.reply.send(Err(error))),
            ModelJob::Wake(reply) => drop(reply.send(Err(error))),
        }
    }
}

/// A handle to the in-process model for the non-generating routes.
#[derive(Clone)]
pub struct LocalModel {
    pub(super) shared: Arc<Shared>,
    pub(super) props: Arc<ModelProps>,
}

impl LocalModel {
    pub fn props(&self) -> &ModelProps {
        &self.props
    }

    /// Whether the model is out of memory until a job needs it
    /// (`--sleep-idle-seconds`; no job: never waits, never wakes it).
    pub fn is_sleeping(&self) -> bool {
        self.shared.residency.is_asleep()
    }

    /// When the model leaves memory if nothing else comes (Ollama's
    /// `expires_at`); `None` when it stays. No job: never waits.
    pub fn expires_at(&self) -> Option<std::time::SystemTime> {
        self.shared
            .residency
            .expires_at(std::time::SystemTime::now())
    }

    /// Ollama's `keep_alive` for the request just done: how long the model may
    /// then stay idle before it leaves memory (`Some(0)`: at once; `None`: until
    /// another request sets a limit). Never wakes a sleeping model.
    pub fn keep_alive(&self, limit: Option<std::time::Duration>) -> Result<(), ModelError> {
        let sender = self.shared.jobs.as_ref().ok_or_else(worker_gone)?;
        sender
            .send(Job::KeepAlive(limit))
            .map_err(|_| ModelError::from(worker_gone()))
    }

    /// Loads the model if it is asleep; answers once it is in memory.
    pub fn wake(&self) -> Result<(), ModelError> {
        self.ask(ModelJob::Wake)
    }

    /// What the generation thread has counted so far (no job: never waits).
    pub fn counters(&self) -> DecodeFigures {
        let c = &self.shared.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        DecodeFigures {
            n_decode: get(&c.n_decode),
            n_busy_slots: get(&c.n_busy_slots),
            n_drafts: get(&c.n_drafts),
            embed_tokens: get(&c.embed_tokens),
            embed_secs: get(&c.embed_micros) as f64 / 1e6,
        }
    }

    fn ask<T>(
        &self,
        job: impl FnOnce(Sender<Result<T, ModelError>>) -> ModelJob,
    ) -> Result<T, ModelError> {
        let (reply, result) = bounded(1);
        let sender = self.shared.jobs.as_ref().ok_or_else(worker_gone)?;
        sender
            .send(Job::Model(job(reply)))
            .map_err(|_| worker_gone())?;
        result.recv().map_err(|_| worker_gone())?
    }

    /// The pooled, normalised embedding of each input, in order. Waits for an
    /// idle slot (see the module docs).
    pub fn embed(&self, inputs: Vec<EmbedInput>) -> Result<Vec<Embedding>, ModelError> {
        self.ask(|reply| ModelJob::Embed(inputs, reply))
    }

    /// `text`'s tokens with their pieces; special-token markup is parsed.
    pub fn tokenize(&self, text: String, add_special: bool) -> Result<Vec<Piece>, ModelError> {
        self.ask(|reply| ModelJob::Tokenize {
            text,
            add_special,
            reply,
        })
    }

    /// How many tokens `session` with `tools` takes as a prompt: rendered with the
    /// model's chat template as a request would be, then tokenized.
    pub fn count_chat(
        &self,
        session: &crate::core::Session,
        tools: Vec<crate::core::ToolSpec>,
    ) -> Result<usize, ModelError> {
        let prompt = self.render_chat(session, tools, serde_json::Map::new(), true)?;
        Ok(self.tokenize(prompt, false)?.len())
    }

    /// The prompt `session` with `tools` and the template variables `kwargs`
    /// renders to with the model's chat template, as a request's would, up to
    /// where the answer starts (without that opening when `generation_prompt` is
    /// false).
    pub fn render_chat(
        &self,
        session: &crate::core::Session,
        tools: Vec<crate::core::ToolSpec>,
        kwargs: serde_json::Map<String, serde_json::Value>,
        generation_prompt: bool,
    ) -> Result<String, ModelError> {
        let conversation = crate::template::conversation(&session.system_prompt, &session.messages);
        self.ask(|reply| ModelJob::RenderChat {
            conversation,
            tools,
            kwargs,
            generation_prompt,
            reply,
        })
    }

    /// The text of `tokens` (special tokens written out).
    pub fn detokenize(&self, tokens: Vec<Token>) -> Result<String, ModelError> {
        self.ask(|reply| ModelJob::Detokenize(tokens, reply))
    }

    /// Every slot: its context, whether it serves a request, what it caches.
    pub fn slots(&self) -> Result<Vec<SlotInfo>, ModelError> {
        self.ask(ModelJob::Slots)
    }

    /// Saves slot `slot`'s cache to `filename` in the `--slot-save-path`
    /// directory, restores it from there, or erases it; waits until the slot
    /// has finished the request it serves. A file name is a plain name (no
    /// directory, no `..`), as llama-server checks it.
    pub fn slot_action(
        &self,
        slot: usize,
        action: &str,
        filename: Option<&str>,
    ) -> Result<SlotReport, ModelError> {
        let action = jobs::action(self.props.slot_save_path.as_deref(), action, filename)?;
        if slot >= self.props.slots as usize {
            return Err(ModelError::NotFound(format!(
                "no slot {slot}: this server has {} (0 to {})",
                self.props.slots,
                self.props.slots.saturating_sub(1)
            )));
        }
        self.ask(|reply| {
            ModelJob::SlotAction(SlotJob {
                slot,
                action,
                reply,
            })
        })
    }
}

// ------------------------------------------------------------ generation thread

/// Tokens of `text` with their pieces.
pub(super) fn tokenize(
    model: &Model,
    text: &str,
    add_special: bool,
) -> Result<Vec<Piece>, ModelError> {
    let tokens = model
        .tokenize(text, add_special)
        .map_err(|e| ModelError::Failed(e.to_string()))?;
    tokens
        .into_iter()
        .map(|token| {
            let bytes = model
                .piece_bytes(token, true)
                .map_err(|e| ModelError::Failed(e.to_string()))?;
            Ok((token, bytes))
        })
        .collect()
}

/// The first token id outside the vocabulary, as a client error.
fn check_tokens(model: &Model, tokens: &[Token], index: Option<usize>) -> Result<(), ModelError> {
    match tokens.iter().find(|&&t| t < 0 || t >= model.n_vocab()) {
        Some(bad) => Err(ModelError::Invalid {
            index,
            message: format!(
                "token id {bad} is outside the vocabulary (0..{})",
                model.n_vocab()
            ),
        }),
        None => Ok(()),
    }
}

/// The text of `tokens`; an id outside the vocabulary is refused (llama.cpp
/// would read past its table).
pub(super) fn detokenize(model: &Model, tokens: &[Token]) -> Result<String, ModelError> {
    check_tokens(model, tokens, None)?;
    let mut bytes = Vec::new();
    for &token in tokens {
        let piece = model
            .piece_bytes(token, true)
            .map_err(|e| ModelError::Failed(e.to_string()))?;
        bytes.extend_from_slice(&piece);
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// What the context's pooling takes: pairs under rank pooling, else texts and
/// token ids (the routes check first; this keeps every caller to it).
fn check_pooling(pooling: Pooling, inputs: &[EmbedInput]) -> Result<(), ModelError> {
    let is_pair = |input: &EmbedInput| matches!(input, EmbedInput::Pair { .. });
    match pooling {
        Pooling::Rank if !inputs.iter().all(is_pair) => Err(ModelError::Invalid {
            index: None,
            message: RANK_NOT_EMBEDDINGS.into(),
        }),
        Pooling::Rank => Ok(()),
        _ if inputs.iter().any(is_pair) => Err(ModelError::Unsupported(NOT_RERANKING.into())),
        _ => Ok(()),
    }
}

/// Why a server started with `--pooling rank` makes no embeddings.
const RANK_NOT_EMBEDDINGS: &str = "this server scores query and document pairs (--pooling rank): its pooled outputs are relevance scores, not embeddings; use /rerank, or start it with --pooling mean, cls or last for embeddings";

/// Why a server without rank pooling does not rerank (llama-server's words, and ours).
pub const NOT_RERANKING: &str = "This server does not support reranking. Start it with `--reranking` (or `--pooling rank`) and a reranker model";

/// A query and document's tokens, as llama-server makes them: the model's
/// `rerank` template with both filled in (its special-token markup parsed), else
/// BOS, the query, EOS, SEP, the document, EOS, each special token where the
/// vocabulary adds it (EOS falling back to SEP), the texts tokenized plainly.
pub(super) fn pair_tokens(
    model: &Model,
    query: &str,
    document: &str,
) -> Result<Vec<Token>, ModelError> {
    let failed = |e: crate::llama::error::TokenizeError| ModelError::Failed(e.to_string());
    if let Some(template) = model.rerank_template() {
        let prompt = template
            .replace("{query}", query)
            .replace("{document}", document);
        return model.tokenize(&prompt, false).map_err(failed);
    }
    let eos = model.adds_eos().then(|| model.eos_or_sep()).flatten();
    let sep = model.adds_sep().then(|| model.sep()).flatten();
    let mut tokens: Vec<Token> = model.bos_added().into_iter().collect();
    tokens.extend(model.tokenize_plain(query).map_err(failed)?);
    tokens.extend(eos);
    tokens.extend(sep);
    tokens.extend(model.tokenize_plain(document).map_err(failed)?);
    tokens.extend(eos);
    Ok(tokens)
}

/// Every input's tokens, checked before anything is decoded: what `pooling`
/// takes, in the vocabulary, and short enough.
pub(super) fn input_tokens(
    model: &Model,
    pooling: Pooling,
    inputs: &[EmbedInput],
    max_tokens: usize,
) -> Result<Vec<Vec<Token>>, ModelError> {
    check_pooling(pooling, inputs)?;
    let mut out = Vec::with_capacity(inputs.len());
    for (index, input) in inputs.iter().enumerate() {
        let tokens = match input {
            EmbedInput::Text(text) => model
                .tokenize(text, true)
                .map_err(|e| ModelError::Failed(e.to_string()))?,
            EmbedInput::Tokens(tokens) => tokens.clone(),
            EmbedInput::Pair { query, document } => pair_tokens(model, query, document)?,
        };
        check_tokens(model, &tokens, Some(index))?;
        let invalid = |message: String| {
            Err(ModelError::Invalid {
                index: Some(index),
                message,
            })
        };
        if tokens.is_empty() {
            return invalid(format!("input {index} has no tokens"));
        }
        if tokens.len() > max_tokens {
            return invalid(format!(
                "input {index} has {} tokens; at most {max_tokens} fit one physical batch (raise --ubatch)",
                tokens.len()
            ));
        }
        out.push(tokens);
    }
    Ok(out)
}

/// The embedding of `tokens`, decoded in sequence `seq`, which is cleared
/// before and after: normalised, but for rank pooling's scores.
pub(super) fn embed(
    ctx: &mut Context<'_>,
    batch: &mut Batch,
    seq: i32,
    tokens: &[Token],
) -> Result<Vec<f32>, ModelError> {
    ctx.truncate_seq(seq, 0);
    batch.clear();
    for (pos, &token) in tokens.iter().enumerate() {
        batch
            .push_seq(token, pos, seq, true)
            .map_err(|e| ModelError::Failed(e.to_string()))?;
    }
    ctx.set_embeddings(true);
    let decoded = ctx.decode(batch);
    let vector = decoded.map(|()| ctx.embedding_seq(seq));
    ctx.set_embeddings(false);
    ctx.truncate_seq(seq, 0);
    batch.clear();
    match vector {
        Ok(Some(scores)) if ctx.pooling() == Pooling::Rank => Ok(scores),
        Ok(Some(vector)) => Ok(normalize(vector)),
        Ok(None) => Err(ModelError::Failed(
            "llama.cpp returned no pooled embedding".into(),
        )),
        Err(error) => Err(ModelError::Failed(format!("embedding decode: {error}"))),
    }
}

/// `vector` scaled to unit length (a zero vector stays zero).
pub(super) fn normalize(mut vector: Vec<f32>) -> Vec<f32> {
    let norm = vector
        .iter()
        .map(|&x| f64::from(x) * f64::from(x))
        .sum::<f64>()
        .sqrt();
    if norm > 0.0 {
        for x in &mut vector {
            *x = (f64::from(*x) / norm) as f32;
        }
    }
    vector
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_gives_unit_length_and_keeps_zero() {
        let v = normalize(vec![3.0, 4.0]);
        assert_eq!(v, vec![0.6, 0.8]);
        assert_eq!(normalize(vec![0.0, 0.0]), vec![0.0, 0.0]);
    }
}

//! The generation thread's scheduler: `parallel` slots over one llama.cpp context,
//! decoded together (continuous batching).
//!
//! Each slot is one sequence id of the context (`0..parallel`) with its own share of
//! the cache (`n_ctx / parallel` positions, as llama-server splits it with an explicit
//! `--parallel`) and its own mirror of the tokens in that share. A request takes the
//! idle slot whose mirror shares the longest prefix with its prompt (ties: the least
//! recently used), removes the rest of that sequence and decodes only the new tokens.
//! Where another slot holds a longer prefix of the prompt (a new conversation with a
//! running one's system prompt), the slot first takes a copy of that slot's cache
//! ([`Context::copy_seq`]) and cuts it to the prefix: the other conversation keeps
//! its cache, and the shared opening is decoded once.
//! Requests beyond the slots wait in FIFO order.
//!
//! Every step builds one batch: one token per generating slot, then prompt chunks of
//! prefilling slots up to `n_batch`; decodes it once; and samples each slot that got
//! logits with that slot's own sampler chain. The sinks answer each text with a
//! [`Flow`] on their own threads while the next token decodes: a slot's token joins
//! a batch only once every text but the last one it sent was answered (one event in
//! flight), so a cancel (or a client that is gone) stops that slot within one token
//! while the others go on, and a slow client holds back only itself; the step waits
//! only briefly for slow answers.
//!
//! **Warm-up.** When a conversation's answer is complete and nothing else is
//! running, the slot decodes the part of the next prompt that does not depend on the
//! user's next message (the end of the answer's turn and the opening of the user's:
//! `<|im_end|>\n<|im_start|>user\n` in ChatML) while the user reads and types, so
//! the next turn decodes only the message. A request that arrives meanwhile stops
//! that decode at once ([`Preempt`]); a next prompt that does not follow is handled
//! by prefix reuse like any other. A session that waits for a message without an
//! answer just given (a new session, `/clear`, a restored or re-profiled one) is
//! announced by the caller (`Job::Warm`, from `Backend::warm`): its opening (system
//! prompt, tool descriptions, restored turns) is decoded the same way, chunk by chunk,
//! into the slot a request with that prompt would take.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, TryRecvError};

pub(super) mod files;

use super::checkpoints::{Checkpoints, CHECKPOINT_MIN};
use super::model::{self, EmbedInput, Embedding, ModelError, ModelJob, ModelProps};
use super::prompt_cache::PromptCache;
use super::prompt_tokens::PromptTokens;
use super::request::{
    common_prefix, finish_reply, raw_tokens, sampler_error, sampler_params, tokenize_prompt,
    tool_grammar, InfillRoom,
};
use super::speculative::{copy_len, ngram_copy, DraftModel, SlotSpec, SpecMode};
use super::{
    load_template, tuning, BackendError, Event, FinishReason, Flow, Job, LlamaConfig,
    PrefillReport, Prompt, RequestJob, ToolChoice, ToolSpec, Usage, WorkerMsg,
};
use crate::backend::local::{self, overflow, render, StopMatcher};
use crate::core::{Message, Stats, TokenLogprobs, TokenProb};
use crate::llama::{self, utf8::Utf8Stream, Batch, Context, ContextParams, Model, Sampler, Token};
use crate::stream::filter::OutputFilter;
use crate::stream::format;
use crate::template::{self, ChatTemplate, TemplateMessage};

/// Where an embedding request's answer goes.
type EmbedReply = crossbeam_channel::Sender<Result<Vec<Embedding>, ModelError>>;

/// How long a step waits for the answers of slots that just sent text, so that they
/// join the next batch rather than skip a step. A slower client only delays itself.
const FLOW_GRACE: Duration = Duration::from_millis(5);
/// A cached prompt on disk is restored when it holds at least this many more of
/// the prompt than the slot does (fewer decode faster than a file loads).
const RESTORE_MIN: usize = 64;
/// A slot's cache is saved to disk when it decoded at least this many prompt
/// tokens that were not cached (an agent's opening is about 1,500).
const SAVE_MIN: usize = 256;
/// How often a worker with nothing to decode looks at the cancel flags.
const IDLE_POLL: Duration = Duration::from_millis(50);
/// How long the worker stays idle after an answer before it warms up the next turn:
/// a caller that asks again at once (an agent, a script) is not made to wait.
const WARM_QUIET: Duration = Duration::from_millis(20);
/// How many sliding-window checkpoints ([`super::checkpoints`]) are kept per slot,
/// and the most bytes all of them take.
const CHECKPOINTS_PER_SLOT: usize = 2;
const CHECKPOINT_BYTES: usize = 512 << 20;
/// See [`copy_min`].
const COPY_MIN_TOKENS: usize = 8;
/// See [`copy_min`].
const COPY_CELLS_PER_TOKEN: usize = 256;
/// Most tokens a warm-up decodes.
const WARM_MAX: usize = 64;
/// Most tokens of the cache a warm-up may give back: a rendered answer can end in
/// other tokens than the ones sampled; more than this means it does not follow.
const WARM_REWIND: usize = 4;

/// Lets a request that arrives interrupt the idle worker's warm-up decode. The flag
/// is the context's abort flag; the lock makes "warming, so abort" and "done, so
/// clear the abort" exclusive, so a late preempt never aborts a request's decode.
#[derive(Clone)]
pub(super) struct Preempt {
    warming: Arc<Mutex<bool>>,
    abort: Arc<AtomicBool>,
}

impl Preempt {
    pub(super) fn new(abort: Arc<AtomicBool>) -> Preempt {
        Preempt {
            warming: Arc::new(Mutex::new(false)),
            abort,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, bool> {
        self.warming.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request was queued: stop the warm-up decode if one is running.
    pub(super) fn request_arrived(&self) {
        if *self.lock() {
            self.abort.store(true, Ordering::Relaxed);
        }
    }

    /// Runs a warm-up decode that a request may abort. Clearing the flag afterwards
    /// also clears a shutdown's abort, which is harmless: shutdown closes the job
    /// channel too, and the worker stops at its next receive.
    fn run<T>(&self, decode: impl FnOnce() -> T) -> T {
        *self.lock() = true;
        let result = decode();
        let mut warming = self.lock();
        *warming = false;
        self.abort.store(false, Ordering::Relaxed);
        result
    }
}

/// The state the generation thread owns: the context (borrowing the model) and its slots.
pub(super) struct Worker<'m> {
    pub(super) ctx: Context<'m>,
    template: ChatTemplate,
    /// The control tokens that are chat-format markers, decoded as text for the
    /// output filter in a chat (sorted; see [`crate::stream::format::is_marker`]).
    markers: Vec<Token>,
    /// How the template writes a tool call, for grammars in the family's own syntax.
    call_syntax: Option<format::CallSyntax>,
    /// That syntax as a marker of its own, where the table knows none of its markers.
    learnt_call: Option<format::LearntCall>,
    batch: Batch,
    slots: Vec<Slot>,
    queue: VecDeque<Box<RequestJob>>,
    /// Positions each slot may use.
    n_ctx_slot: usize,
    /// Ticks on every finished request, for least-recently-used slot choice.
    clock: u64,
    /// When the last request finished: the warm-up waits [`WARM_QUIET`] after it.
    finished_at: Instant,
    preempt: Preempt,
    /// Recent prompts and their tokens: a turn tokenizes only its new text.
    prompt_tokens: PromptTokens,
    /// The session the caller said waits for its next message ([`Job::Warm`]).
    waiting: Option<NextTurn>,
    /// Embedding requests waiting for an idle slot.
    embeds: VecDeque<(Vec<EmbedInput>, EmbedReply)>,
    /// Decoded prompts on disk, for cold starts (`None`: `--no-prompt-cache`).
    prompt_cache: Option<PromptCache>,
    /// The sliding-window layers' state at the start of recent prompts' newest
    /// messages, for a model with such layers (see [`super::checkpoints`]).
    checkpoints: Checkpoints,
    /// Which drafter guesses generating slots' next tokens (`Off` where the model
    /// cannot rewind a sequence), and the most it drafts at once.
    spec: SpecMode,
    draft_max: usize,
    /// Slots whose pending token is in this step's batch (what a draft costs depends
    /// on it: [`super::speculative::draft_token_cost`]).
    generating: usize,
    /// The draft model's context, for [`SpecMode::Draft`].
    drafter: Option<DraftModel<'m>>,
    /// The context's flash attention and physical batch, for the bench's report.
    settings: (Option<bool>, u32),
    /// What a saved sequence state depends on ([`cache_key`]): a slot file saved
    /// under another key is not restored.
    state_key: String,
    /// Slot saves and restores waiting for their slot to finish its request.
    slot_actions: VecDeque<files::SlotJob>,
}

struct Slot {
    /// The sequence id in the context.
    seq: i32,
    /// The tokens this slot's sequence holds in the cache, position by position.
    mirror: Vec<Token>,
    last_used: u64,
    task: Option<Task>,
    /// The conversation this slot just answered, to warm up its next turn.
    next_turn: Option<NextTurn>,
}

/// A conversation with its new answer, and the tools it was rendered with.
struct NextTurn {
    conversation: Vec<TemplateMessage>,
    tools: Vec<ToolSpec>,
}

/// The request a slot is serving.
struct Task {
    job: Box<RequestJob>,
    prompt: Vec<Token>,
    sampler: Sampler,
    max_tokens: usize,
    forced_tools: bool,
    /// Whether chat-format markers are decoded as text (a chat whose text the
    /// output filter reads), not hidden like other control tokens.
    markers: bool,
    report: PrefillReport,
    phase: Phase,
    /// Tokens this slot put into the batch being decoded.
    in_batch: usize,
    /// Where this slot's logits are in the batch just decoded.
    logits_at: Option<usize>,
    started: Instant,
    prefill_secs: f64,
    /// When the first token was sampled.
    generating_since: Option<Instant>,
    utf8: Utf8Stream,
    stops: StopMatcher,
    text: String,
    n_tokens: usize,
    /// For each text sent and not yet answered, the length of `text` once the sink
    /// has it: a cancel keeps the reply to what the sink saw.
    unanswered: VecDeque<usize>,
    /// The draft in the batch being decoded, after the pending token.
    drafts: Vec<Token>,
    spec: SlotSpec,
    /// Where the prompt's newest message starts, when the sliding-window layers'
    /// state is to be kept there ([`super::checkpoints`]): the prefill stops a batch
    /// at it and saves the checkpoint.
    checkpoint_at: Option<usize>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Prompt tokens `mirror.len()..prompt.len()` are still to be decoded.
    Prefill,
    /// A sampled token to decode in the next batch (once the sink keeps up).
    Decode(Token),
}

/// How many texts a slot may have sent and not had answered while its next token
/// decodes: one, so the sink works in parallel with the decode, and a cancel
/// costs at most the one token already decoding.
const IN_FLIGHT: usize = 1;

impl Task {
    /// Whether the slot waits for its sink before its next token may decode.
    fn blocked(&self) -> bool {
        self.unanswered.len() > IN_FLIGHT
    }
}

/// What a sequence's saved state depends on: the llama.cpp build, the model
/// file (path, size, modification time) and every context parameter that
/// changes the cache's layout or contents.
fn cache_key(config: &LlamaConfig, params: &ContextParams, n_ctx_seq: u32) -> String {
    let path = std::fs::canonicalize(&config.model_path).unwrap_or(config.model_path.clone());
    let meta = std::fs::metadata(&path).ok();
    let modified = meta
        .as_ref()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    format!(
        "shepherd {}\nggml {:?}\nmodel {} {} {modified}\ncontext {n_ctx_seq} per sequence, cache {:?}, flash attention {:?}, ubatch {}, gpu layers {}",
        env!("CARGO_PKG_VERSION"),
        llama::ggml_build(),
        path.display(),
        meta.map_or(0, |m| m.len()),
        params.cache_type,
        params.flash_attn,
        params.n_ubatch,
        config.gpu_layers,
    )
}

/// The context's parameters: the size, batches, threads and flash attention
/// chosen for where the model runs (see [`tuning`]).
fn context_params(model: &Model, config: &LlamaConfig, preempt: &Preempt) -> ContextParams {
    let n_ctx = choose_context(config.context_size, model.n_ctx_train());
    let defaults = ContextParams::default();
    let parallel = config.parallel.max(1);
    // Every generating slot needs a place in each batch.
    let n_batch = config.n_batch.max(parallel).min(n_ctx);
    let heads = tuning::CpuHeads {
        head_dim: model.head_dim(),
        avx2_kernels: crate::llama::avx2_kernels(),
    };
    let flash_attn = tuning::flash_attn_for(
        config.flash_attn,
        config.gpu_layers,
        config.cache_type,
        heads,
    );
    let n_ubatch = tuning::ubatch_for(config.ubatch, flash_attn, config.gpu_layers);
    ContextParams {
        n_ctx,
        n_batch,
        n_ubatch: n_ubatch.min(n_batch),
        n_threads: tuning::threads_for(
            config.threads,
            tuning::all_on_gpu(config.gpu_layers, model.n_layer()),
            defaults.n_threads,
        ),
        n_seq_max: parallel,
        cache_type: config.cache_type,
        flash_attn,
        pooling: config.pooling,
        abort: Arc::clone(&preempt.abort),
    }
}

/// The drafter the worker speculates with, and the draft model's context: none
/// where the model cannot rewind its cache (see [`Model::can_rewind`]), nor for a
/// sliding-window model with several slots.
fn speculation<'m>(
    model: &'m Model,
    draft: Option<&'m Model>,
    config: &LlamaConfig,
    params: &ContextParams,
) -> Result<(SpecMode, Option<DraftModel<'m>>), BackendError> {
    let drafter = match draft {
        Some(draft) => Some(DraftModel::new(draft, params).map_err(BackendError::Config)?),
        None => None,
    };
    let spec = match config.spec.mode {
        SpecMode::Draft if drafter.is_none() => SpecMode::Off,
        _ if !model.can_rewind() => SpecMode::Off,
        // Measured on Gemma 3 with 4 slots and short chats: 71 t/s in all with
        // speculation against 88 without (one slot gains: an edit 1.2x llama-server's
        // best drafter). Until the cost of drafting beside other slots in a
        // sliding-window cache is understood, such a model speculates alone only.
        _ if model.n_swa() > 0 && config.parallel > 1 => SpecMode::Off,
        mode => mode,
    };
    Ok((spec, drafter))
}

/// The context size: the one requested, else the training context, capped.
pub(super) fn choose_context(requested: Option<u32>, trained: u32) -> u32 {
    match requested {
        Some(n) if n > 0 => n,
        _ if trained == 0 => 2048,
        _ => trained.min(tuning::DEFAULT_CONTEXT_CAP),
    }
}

impl<'m> Worker<'m> {
    pub(super) fn new(
        model: &'m Model,
        draft: Option<&'m Model>,
        config: &LlamaConfig,
        preempt: Preempt,
    ) -> Result<Self, BackendError> {
        let params = context_params(model, config, &preempt);
        let flash_attn = params.flash_attn;
        let ctx = Context::new(model, &params).map_err(|e| BackendError::Config(e.to_string()))?;
        crate::log::debug(crate::log::Category::Llm, || {
            format!(
                "context: {} tokens, {} slot(s) of {}, flash attention {} (heads of {:?}), ubatch {}, {} thread(s)",
                ctx.n_ctx(),
                ctx.n_seq_max(),
                ctx.n_ctx_seq(),
                tuning::flash_attn_label(flash_attn),
                model.head_dim(),
                params.n_ubatch,
                params.n_threads
            )
        });
        let batch =
            Batch::new(ctx.n_batch() as usize).map_err(|e| BackendError::Config(e.to_string()))?;
        let slots: Vec<Slot> = (0..ctx.n_seq_max() as i32)
            .map(|seq| Slot {
                seq,
                mirror: Vec::new(),
                last_used: 0,
                task: None,
                next_turn: None,
            })
            .collect();
        // Each slot's last prompt, and the two renderings of each warm-up.
        let prompt_tokens = PromptTokens::new(model, 3 * slots.len());
        let state_key = cache_key(config, &params, ctx.n_ctx_seq());
        let prompt_cache = config.prompt_cache.as_ref().map(|cache| {
            let cache = PromptCache::new(cache, state_key.clone());
            if model.n_swa() > 0 {
                cache.whole_prefixes()
            } else {
                cache
            }
        });
        let (spec, drafter) = speculation(model, draft, config, &params)?;
        let template = load_template(model, config.chat_template.as_deref())?;
        let call_syntax = local::call_syntax(&template, |tail| end_of_turn(model, tail));
        let learnt = call_syntax.as_ref().and_then(format::CallSyntax::learnt);
        crate::log::debug(crate::log::Category::Llm, || {
            format!("the template's tool-call syntax: {call_syntax:?}")
        });
        Ok(Worker {
            template,
            call_syntax,
            markers: model.control_tokens(|text| {
                format::is_marker(text) || learnt.is_some_and(|l| l.holds(text))
            }),
            learnt_call: learnt,
            prompt_tokens,
            waiting: None,
            embeds: VecDeque::new(),
            prompt_cache,
            checkpoints: Checkpoints::new(CHECKPOINTS_PER_SLOT * slots.len(), CHECKPOINT_BYTES),
            spec,
            draft_max: config.spec.draft_max,
            generating: 0,
            drafter,
            n_ctx_slot: ctx.n_ctx_seq() as usize,
            ctx,
            batch,
            slots,
            queue: VecDeque::new(),
            clock: 0,
            finished_at: Instant::now(),
            preempt,
            settings: (flash_attn, params.n_ubatch),
            state_key,
            slot_actions: VecDeque::new(),
        })
    }

    fn model(&self) -> &'m Model {
        self.ctx.model()
    }

    /// What `/props` reports.
    pub(super) fn props(&self, config: &LlamaConfig) -> ModelProps {
        let model = self.model();
        ModelProps {
            model_path: config.model_path.display().to_string(),
            n_ctx: self.ctx.n_ctx(),
            n_ctx_slot: self.ctx.n_ctx_seq(),
            slots: self.ctx.n_seq_max(),
            chat_template: config
                .chat_template
                .clone()
                .unwrap_or_else(|| model.chat_template().unwrap_or_default()),
            n_embd: usize::try_from(model.n_embd()).unwrap_or(0),
            n_vocab: model.n_vocab(),
            pooling: config.pooling,
            n_ubatch: self.ctx.n_ubatch(),
            bos_token: model.bos_text(),
            eos_token: model.eos_text(),
            ftype: model.ftype_name(),
            template_caps: self.template.capabilities(),
            slot_save_path: config.slot_save_path.clone(),
            infill: {
                let fim = model.fim_tokens();
                fim.pre.is_some() && fim.suf.is_some() && fim.mid.is_some()
            },
        }
    }

    /// Answers the waiting embedding requests, each in an idle slot's sequence
    /// (the one caching least), between two generation steps; that slot's cache
    /// is cleared (see `model.rs`). They wait while every slot generates.
    fn embed_waiting(&mut self) {
        while !self.embeds.is_empty() {
            let idle = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.task.is_none());
            let Some(index) = idle.min_by_key(|(_, s)| s.mirror.len()).map(|(i, _)| i) else {
                return;
            };
            let Some((inputs, reply)) = self.embeds.pop_front() else {
                return;
            };
            let _ = reply.send(self.embed(index, &inputs));
        }
    }

    fn embed(&mut self, index: usize, inputs: &[EmbedInput]) -> Result<Vec<Embedding>, ModelError> {
        let max_tokens = (self.ctx.n_ubatch() as usize).min(self.n_ctx_slot);
        let inputs = model::input_tokens(self.model(), inputs, max_tokens)?;
        let slot = &mut self.slots[index];
        slot.mirror.clear();
        slot.next_turn = None;
        let seq = slot.seq;
        inputs
            .iter()
            .map(|tokens| {
                let vector = model::embed(&mut self.ctx, &mut self.batch, seq, tokens)?;
                Ok(Embedding {
                    vector,
                    n_tokens: tokens.len(),
                })
            })
            .collect()
    }

    /// The context each request sees.
    pub(super) fn slot_context(&self) -> usize {
        self.n_ctx_slot
    }

    /// Serves jobs until every handle is gone.
    pub(super) fn serve(&mut self, jobs: &Receiver<Job>) {
        while self.receive(jobs) {
            self.embed_waiting();
            self.run_slot_actions();
            self.assign();
            self.await_flows(jobs);
            self.step();
        }
    }

    fn idle(&self) -> bool {
        self.queue.is_empty()
            && self.embeds.is_empty()
            && self.slot_actions.is_empty()
            && self.slots.iter().all(|s| s.task.is_none())
    }

    /// Takes the jobs that arrived (blocking while there is nothing to do); false once
    /// the channel is closed, i.e. the last handle is gone.
    fn receive(&mut self, jobs: &Receiver<Job>) -> bool {
        while self.idle() {
            let warm = self.waiting.is_some() || self.slots.iter().any(|s| s.next_turn.is_some());
            let job = if warm {
                let quiet_until = self.finished_at + WARM_QUIET;
                match jobs.recv_deadline(quiet_until) {
                    Ok(job) => job,
                    Err(RecvTimeoutError::Timeout) => {
                        self.warm_up();
                        continue;
                    }
                    Err(RecvTimeoutError::Disconnected) => return false,
                }
            } else {
                match jobs.recv() {
                    Ok(job) => job,
                    Err(_) => return false,
                }
            };
            self.accept(job);
        }
        loop {
            match jobs.try_recv() {
                Ok(job) => self.accept(job),
                Err(TryRecvError::Empty) => return true,
                Err(TryRecvError::Disconnected) => return false,
            }
        }
    }

    fn accept(&mut self, job: Job) {
        match job {
            Job::Request(job) => self.queue.push_back(job),
            Job::Count(text, reply) => {
                let _ = reply.send(self.model().tokenize(&text, false).ok().map(|t| t.len()));
            }
            Job::Model(ModelJob::Embed(inputs, reply)) => self.embeds.push_back((inputs, reply)),
            Job::Model(ModelJob::Tokenize {
                text,
                add_special,
                reply,
            }) => {
                let _ = reply.send(model::tokenize(self.model(), &text, add_special));
            }
            Job::Model(ModelJob::Detokenize(tokens, reply)) => {
                let _ = reply.send(model::detokenize(self.model(), &tokens));
            }
            Job::Model(ModelJob::Slots(reply)) => {
                let _ = reply.send(Ok(self.slot_list()));
            }
            Job::Model(ModelJob::SlotAction(job)) => self.slot_actions.push_back(job),
            Job::Model(ModelJob::RenderChat {
                conversation,
                tools,
                reply,
            }) => {
                let rendered = render(&self.template, &conversation, &tools)
                    .map_err(|e| ModelError::Failed(e.to_string()));
                let _ = reply.send(rendered);
            }
            Job::Warm(conversation, tools) => {
                self.waiting = Some(NextTurn {
                    conversation,
                    tools,
                });
                // The quiet period counts from the hint: a prompt that follows at once
                // (`-e`, a script) finds the worker idle, not decoding.
                self.finished_at = Instant::now();
            }
            Job::Bench(test, reply) => {
                let _ = reply.send(self.bench(test));
            }
            #[cfg(test)]
            Job::Cached(reply) => {
                let _ = reply.send(self.slots.iter().map(|s| s.mirror.len()).collect());
            }
        }
    }

    /// Gives queued requests (FIFO) to free slots.
    fn assign(&mut self) {
        while self.slots.iter().any(|s| s.task.is_none()) {
            let Some(job) = self.queue.pop_front() else {
                return;
            };
            if job.cancel.load(Ordering::Relaxed) {
                let _ = job.prefilled.send(Err(BackendError::Cancelled));
                continue;
            }
            if let Err((job, err)) = self.start(job) {
                let _ = job.prefilled.send(Err(err));
            }
        }
    }

    /// Renders and tokenizes the request, checks that it fits a slot, picks the slot
    /// and keeps the part of its cache the prompt shares.
    fn start(&mut self, job: Box<RequestJob>) -> Result<(), (Box<RequestJob>, BackendError)> {
        let prepared = match self.prepare(&job) {
            Ok(prepared) => prepared,
            Err(err) => return Err((job, err)),
        };
        let (prompt, sampler, forced_tools, max_tokens, stops, prompt_end) = prepared;
        let markers = !forced_tools && matches!(job.prompt, Prompt::Chat(_));
        let index = self.choose_slot(&prompt);
        self.adopt_prefix(index, &prompt);
        self.restore(index, &prompt);
        // A request came: the session it continues waits no longer.
        self.waiting = None;
        self.slots[index].next_turn = None;
        let keep = self.keep_prefix(index, &prompt);
        let checkpoint_at = self.checkpoint_at(&job, &prompt, keep);
        let slot = &mut self.slots[index];
        let report = PrefillReport {
            prompt_tokens: prompt.len(),
            reused_tokens: keep,
            decoded_tokens: prompt.len() - keep,
            prompt_end,
            learnt_call: self.learnt_call,
        };
        crate::log::debug(crate::log::Category::Llm, || {
            format!(
                "slot {}: {} prompt tokens, {keep} reused, {} to decode",
                slot.seq,
                prompt.len(),
                report.decoded_tokens
            )
        });
        slot.task = Some(Task {
            job,
            prompt,
            sampler,
            max_tokens,
            forced_tools,
            markers,
            report,
            phase: Phase::Prefill,
            in_batch: 0,
            logits_at: None,
            started: Instant::now(),
            prefill_secs: 0.0,
            generating_since: None,
            utf8: Utf8Stream::default(),
            stops,
            text: String::new(),
            n_tokens: 0,
            unanswered: VecDeque::new(),
            drafts: Vec::new(),
            spec: SlotSpec::default(),
            checkpoint_at,
        });
        Ok(())
    }

    /// Cuts slot `index`'s cache to what it shares with `prompt` (all but the last
    /// token at most: something must decode to give logits) and returns its length.
    /// Where the sliding-window layers no longer hold what that cut needs, a
    /// checkpoint puts them back at a shorter shared prefix; without one the slot
    /// starts over.
    fn keep_prefix(&mut self, index: usize, prompt: &[Token]) -> usize {
        let Worker {
            ctx,
            slots,
            checkpoints,
            ..
        } = self;
        let slot = &mut slots[index];
        let mut keep = common_prefix(&slot.mirror, prompt).min(prompt.len() - 1);
        if keep < slot.mirror.len() && !ctx.holds_window(slot.seq, keep) {
            let shared = keep;
            keep = match checkpoints.best(prompt, shared) {
                Some(c) if ctx.restore_window(slot.seq, &c.state, c.tokens.len()) => c.tokens.len(),
                _ => {
                    ctx.truncate_seq(slot.seq, 0);
                    0
                }
            };
            crate::log::debug(crate::log::Category::Llm, || {
                format!(
                    "slot {}: {shared} tokens shared, past the sliding window: {keep} kept",
                    slot.seq
                )
            });
        } else if keep < slot.mirror.len() && !ctx.truncate_seq(slot.seq, keep) {
            keep = 0;
        }
        slot.mirror.truncate(keep);
        keep
    }

    /// Where `prompt`'s newest message starts, when a checkpoint is to be made there
    /// ([`super::checkpoints`]): a model with sliding-window layers, a chat prompt,
    /// at least [`CHECKPOINT_MIN`] tokens before it, past what the slot keeps, and
    /// no checkpoint for those tokens yet. The start is where the prompt parts from
    /// the same conversation rendered with another newest message.
    fn checkpoint_at(&mut self, job: &RequestJob, prompt: &[Token], keep: usize) -> Option<usize> {
        let Prompt::Chat(conversation) = &job.prompt else {
            return None;
        };
        if self.model().n_swa() == 0 || conversation.is_empty() {
            return None;
        }
        let tools: &[ToolSpec] = if job.tool_choice == ToolChoice::None {
            &[]
        } else {
            &job.tools
        };
        let mut other = conversation.clone();
        let last = other.last_mut()?;
        last.content = if last.content == "A" { "B" } else { "A" }.to_string();
        let text = render(&self.template, &other, tools).ok()?;
        let tokens = tokenize_prompt(self.model(), &mut self.prompt_tokens, &text).ok()?;
        let at = common_prefix(&tokens, prompt);
        (at >= CHECKPOINT_MIN && at > keep && at < prompt.len())
            .then_some(at)
            .filter(|&at| !self.checkpoints.covers(&prompt[..at]))
    }

    #[allow(clippy::type_complexity)]
    fn prepare(
        &mut self,
        job: &RequestJob,
    ) -> Result<
        (
            Vec<Token>,
            Sampler,
            bool,
            usize,
            StopMatcher,
            Option<format::PromptEnd>,
        ),
        BackendError,
    > {
        let tools: &[ToolSpec] = if job.tool_choice == ToolChoice::None {
            &[]
        } else {
            &job.tools
        };
        let grammar = tool_grammar(tools, &job.tool_choice, self.call_syntax.as_ref())?;
        // A call in the generic JSON shape is parsed at the end, never shown.
        let forced = grammar.as_ref().filter(|g| g.json);
        let (tokens, prompt_end) = match &job.prompt {
            Prompt::Chat(conversation) => {
                let prompt = render(&self.template, conversation, tools)?;
                let tokens = tokenize_prompt(self.model(), &mut self.prompt_tokens, &prompt)?;
                let end = forced.is_none().then(|| format::prompt_end(&prompt));
                (tokens, end.flatten())
            }
            Prompt::Raw(parts) => {
                let room = InfillRoom {
                    n_batch: self.ctx.n_batch() as usize,
                    n_ctx: self.n_ctx_slot,
                    n_predict: job.sampling.max_tokens.unwrap_or(0) as usize,
                };
                let tokens = raw_tokens(self.model(), &mut self.prompt_tokens, parts, room)?;
                (tokens, None)
            }
        };
        let n_ctx = self.n_ctx_slot;
        let reserve = job.sampling.answer_reserve(n_ctx as u64) as usize;
        if tokens.len() + reserve > n_ctx {
            return Err(overflow(tokens.len(), reserve, n_ctx));
        }
        let params = sampler_params(&job.sampling, grammar.as_ref())?;
        let sampler =
            Sampler::new(self.model(), &params).map_err(|e| sampler_error(e, &job.sampling))?;
        let room = n_ctx - tokens.len();
        let max_tokens = job
            .sampling
            .max_tokens
            .map_or(room, |n| (n as usize).min(room));
        let stops = match job.prompt {
            Prompt::Chat(_) => self.template.stop_strings(&job.sampling.stop),
            // No template, so no end-of-turn text of its own: the model's end token
            // and the request's stop strings end it.
            Prompt::Raw(_) => job.sampling.stop.clone(),
        };
        let stops = StopMatcher::new(stops);
        Ok((
            tokens,
            sampler,
            forced.is_some(),
            max_tokens,
            stops,
            prompt_end,
        ))
    }

    fn choose_slot(&self, prompt: &[Token]) -> usize {
        let free = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.task.is_none());
        pick_slot(
            free.map(|(i, s)| (i, s.mirror.as_slice(), s.last_used)),
            prompt,
        )
    }

    /// Gives slot `index` the longest prefix of `tokens` that another slot holds,
    /// copied within llama.cpp's cache (see the module docs), when that is at least
    /// [`copy_min`] tokens more than the slot shares with `tokens` itself.
    fn adopt_prefix(&mut self, index: usize, tokens: &[Token]) {
        let own = common_prefix(&self.slots[index].mirror, tokens);
        let donor = (self.slots.iter().enumerate())
            .filter(|&(i, _)| i != index)
            .map(|(i, slot)| (common_prefix(&slot.mirror, tokens), i))
            .max_by_key(|&(shared, i)| (shared, std::cmp::Reverse(i)));
        let Some((shared, donor)) = donor else {
            return;
        };
        let (src, dst) = (self.slots[donor].seq, self.slots[index].seq);
        // Where the donor's sliding-window layers no longer hold what the cut needs,
        // the copy could not be cut to the prefix.
        let keep = shared.min(tokens.len().saturating_sub(1));
        if shared < own + copy_min(self.n_ctx_slot) || !self.ctx.holds_window(src, keep) {
            return;
        }
        let copied = self.ctx.copy_seq(src, dst);
        let mirror = if copied {
            self.slots[donor].mirror.clone()
        } else {
            Vec::new()
        };
        crate::log::debug(crate::log::Category::Llm, || {
            format!("slot {dst}: {shared} prompt tokens from slot {src}'s cache: copied {copied}")
        });
        self.slots[index].mirror = mirror;
    }

    /// Decodes the opening of each answered conversation's next turn, then that of
    /// the session the caller said is waiting (see the module docs); stops at the
    /// first decode a request interrupted.
    fn warm_up(&mut self) {
        for index in 0..self.slots.len() {
            let Some(next) = self.slots[index].next_turn.take() else {
                continue;
            };
            let Some(tokens) = self.next_turn_opening(&next) else {
                continue;
            };
            // A few tokens right after the slot's cache: the answer's own tokens may
            // differ from its rendering by a few, no more.
            let most = WARM_MAX.min(self.batch.capacity());
            if !self.warm_slot(index, &tokens, most, WARM_REWIND) {
                return;
            }
        }
        let Some(waiting) = self.waiting.take() else {
            return;
        };
        let Some(tokens) = self.next_turn_opening(&waiting) else {
            return;
        };
        // Its opening can be a whole system prompt, in the slot a request with this
        // prompt would take, in place of what that slot held.
        let index = self.choose_slot(&tokens);
        self.adopt_prefix(index, &tokens);
        self.restore(index, &tokens);
        let before = common_prefix(&self.slots[index].mirror, &tokens);
        let most = self.n_ctx_slot / 2;
        if self.warm_slot(index, &tokens, most, usize::MAX) {
            let decoded = common_prefix(&self.slots[index].mirror, &tokens) - before;
            self.save(index, decoded);
        }
    }

    /// Restores into slot `index` the cached prompt on disk that shares the longest
    /// prefix with `tokens`, when that is [`RESTORE_MIN`] tokens more than the slot
    /// holds already (the caller then cuts it to the shared prefix).
    fn restore(&mut self, index: usize, tokens: &[Token]) {
        let Some(cache) = &mut self.prompt_cache else {
            return;
        };
        let slot = &mut self.slots[index];
        let held = common_prefix(&slot.mirror, tokens);
        let Some(entry) = cache.best(tokens, held + RESTORE_MIN) else {
            return;
        };
        let restored = self.ctx.set_seq_state(slot.seq, &entry.state);
        crate::log::debug(crate::log::Category::Llm, || {
            let n = entry.tokens.len();
            format!(
                "slot {}: restored {n} cached tokens from disk: {restored}",
                slot.seq
            )
        });
        slot.mirror = if restored { entry.tokens } else { Vec::new() };
    }

    /// Saves slot `index`'s cache to disk when it decoded at least [`SAVE_MIN`]
    /// prompt tokens that were not cached (what a later cold start would redo).
    fn save(&mut self, index: usize, decoded: usize) {
        let Some(cache) = &mut self.prompt_cache else {
            return;
        };
        let slot = &self.slots[index];
        if decoded < SAVE_MIN || slot.mirror.is_empty() {
            return;
        }
        if let Some(state) = self.ctx.seq_state(slot.seq) {
            cache.save(slot.mirror.clone(), state);
        }
    }

    /// Decodes `tokens` into slot `index` beyond what its cache shares with them,
    /// when that is at most `most` tokens and gives back at most `rewind` cached
    /// ones; false when a request interrupted it.
    fn warm_slot(&mut self, index: usize, tokens: &[Token], most: usize, rewind: usize) -> bool {
        let Worker {
            ctx,
            batch,
            slots,
            preempt,
            ..
        } = self;
        let slot = &mut slots[index];
        let keep = common_prefix(&slot.mirror, tokens);
        let new = tokens.len().saturating_sub(keep);
        if new == 0 || new > most || slot.mirror.len() - keep > rewind {
            return true;
        }
        if keep < slot.mirror.len() && !ctx.truncate_seq(slot.seq, keep) {
            slot.mirror.clear();
            return true;
        }
        slot.mirror.truncate(keep);
        // Chunk by chunk: what a request interrupts, it finds decoded up to there.
        for chunk in tokens[keep..].chunks(batch.capacity().max(1)) {
            let at = slot.mirror.len();
            batch.clear();
            for (j, &token) in chunk.iter().enumerate() {
                if batch.push_seq(token, at + j, slot.seq, false).is_err() {
                    return false;
                }
            }
            let decoded = preempt.run(|| ctx.decode(batch));
            crate::log::debug(crate::log::Category::Llm, || {
                let n = chunk.len();
                format!(
                    "slot {}: warm-up of {n} tokens at {at}: {decoded:?}",
                    slot.seq
                )
            });
            if decoded.is_err() {
                // Interrupted (or failed): whatever it left in the cache goes.
                if !ctx.truncate_seq(slot.seq, at) {
                    slot.mirror.clear();
                }
                return false;
            }
            slot.mirror.extend_from_slice(chunk);
        }
        true
    }

    /// The tokens every next prompt of `next` starts with, whatever the user says:
    /// the common prefix of two renderings with different user messages.
    fn next_turn_opening(&mut self, next: &NextTurn) -> Option<Vec<Token>> {
        let mut tokens_with = |message: &str| {
            let mut conversation = next.conversation.clone();
            conversation.push(TemplateMessage::new("user", message));
            let prompt = render(&self.template, &conversation, &next.tools).ok()?;
            tokenize_prompt(self.model(), &mut self.prompt_tokens, &prompt).ok()
        };
        let mut a = tokens_with("A")?;
        let b = tokens_with("B")?;
        a.truncate(common_prefix(&a, &b));
        Some(a)
    }

    /// Collects the sinks' answers. With something to decode it waits at most
    /// [`FLOW_GRACE`] for the rest; with nothing, until an answer or a job arrives.
    fn await_flows(&mut self, jobs: &Receiver<Job>) {
        self.poll_flows();
        let deadline = Instant::now() + FLOW_GRACE;
        while self.awaiting() {
            if self.runnable() {
                let now = Instant::now();
                if now >= deadline || !self.wait_any(None, deadline - now) {
                    return;
                }
                self.poll_flows();
                continue;
            }
            if self.wait_any(Some(jobs), IDLE_POLL) {
                while let Ok(job) = jobs.try_recv() {
                    self.accept(job);
                }
                self.assign();
            }
            self.poll_flows();
            if jobs.is_empty() && self.idle() {
                return;
            }
        }
    }

    fn awaiting(&self) -> bool {
        self.tasks().any(Task::blocked)
    }

    fn runnable(&self) -> bool {
        self.tasks().any(|t| !t.blocked())
    }

    fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.slots.iter().filter_map(|s| s.task.as_ref())
    }

    /// Blocks until a waiting slot's answer (or a job, when `jobs` is given) is ready.
    fn wait_any(&self, jobs: Option<&Receiver<Job>>, timeout: Duration) -> bool {
        let mut select = Select::new();
        for task in self.tasks() {
            if task.blocked() {
                select.recv(&task.job.flow);
            }
        }
        if let Some(jobs) = jobs {
            select.recv(jobs);
        }
        select.ready_timeout(timeout).is_ok()
    }

    /// Applies every answer that has arrived; a cancel flag counts as one.
    fn poll_flows(&mut self) {
        for index in 0..self.slots.len() {
            let Some(task) = self.slots[index].task.as_mut() else {
                continue;
            };
            while let Some(&shown) = task.unanswered.front() {
                match task.job.flow.try_recv() {
                    Ok(Flow::Continue) => {
                        task.unanswered.pop_front();
                    }
                    Ok(Flow::Cancel) | Err(TryRecvError::Disconnected) => {
                        // The reply is what the sink saw, not the token decoded since.
                        task.text.truncate(shown);
                        self.finish(index, FinishReason::Cancelled);
                        break;
                    }
                    Err(TryRecvError::Empty) if task.job.cancel.load(Ordering::Relaxed) => {
                        self.finish(index, FinishReason::Cancelled);
                        break;
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
        }
    }

    /// Puts each generating slot's pending token, and its draft after it, into the
    /// batch (cancelled requests end here; a slow sink's slot sits this step out).
    fn push_generating(&mut self) {
        for index in 0..self.slots.len() {
            if self.cancelled(index) {
                continue;
            }
            let Some(task) = self.slots[index].task.as_mut() else {
                continue;
            };
            task.in_batch = 0;
            task.logits_at = None;
            task.drafts.clear();
        }
        self.generating = 0;
        let decoding: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .task
                    .as_ref()
                    .is_some_and(|t| !t.blocked() && matches!(t.phase, Phase::Decode(_)))
            })
            .collect();
        for (k, &index) in decoding.iter().enumerate() {
            // Room for a draft: what the batch holds less a token for this slot and
            // each decoding slot after it.
            let room =
                (self.batch.capacity() - self.batch.len()).saturating_sub(decoding.len() - k);
            let drafts = self.propose(index, room);
            let slot = &mut self.slots[index];
            let Some(task) = slot.task.as_mut() else {
                continue;
            };
            let Phase::Decode(token) = task.phase else {
                continue;
            };
            let at = slot.mirror.len();
            if self.batch.push_seq(token, at, slot.seq, true).is_err() {
                continue;
            }
            task.in_batch = 1;
            task.logits_at = Some(self.batch.len() - 1);
            self.generating += 1;
            for (j, &draft) in drafts.iter().enumerate() {
                if self
                    .batch
                    .push_seq(draft, at + 1 + j, slot.seq, true)
                    .is_err()
                {
                    break;
                }
                task.drafts.push(draft);
                task.in_batch += 1;
            }
        }
    }

    /// One batch: a token per generating slot (with its draft), then prompt chunks;
    /// one decode; samples.
    fn step(&mut self) {
        self.batch.clear();
        self.push_generating();
        let generated = self.batch.len();
        for slot in &mut self.slots {
            let Some(task) = slot.task.as_mut() else {
                continue;
            };
            if task.phase != Phase::Prefill {
                continue;
            }
            let from = slot.mirror.len();
            let room = self.batch.capacity() - self.batch.len();
            let mut n = room.min(task.prompt.len() - from);
            // The batch stops where a checkpoint is to be made.
            if let Some(at) = task.checkpoint_at.filter(|&at| from < at && at < from + n) {
                n = at - from;
            }
            for (j, &token) in task.prompt[from..from + n].iter().enumerate() {
                let last = from + j + 1 == task.prompt.len();
                if self
                    .batch
                    .push_seq(token, from + j, slot.seq, last)
                    .is_err()
                {
                    break;
                }
                task.in_batch += 1;
                if last {
                    task.logits_at = Some(self.batch.len() - 1);
                }
            }
        }
        if self.batch.is_empty() {
            return;
        }
        // A lone generating slot, or one verifying a draft, with no prompt in the
        // batch, where drafts may be verified: batch-invariant kernels, so that a
        // verified token gets the logits it would get decoded alone (see
        // `speculative`). Without speculation nothing is verified.
        let drafting = generated > self.generating;
        let prompt = self.batch.len() > generated;
        let speculating = self.spec != SpecMode::Off;
        let decoded = if speculating && !prompt && (self.generating == 1 || drafting) {
            self.ctx.decode_batch_invariant(&self.batch)
        } else {
            self.ctx.decode(&self.batch)
        };
        if let Err(err) = decoded {
            self.decode_failed(err);
            return;
        }
        for index in 0..self.slots.len() {
            self.after_decode(index);
        }
    }

    /// The draft for slot `index`'s next tokens after its pending one, at most
    /// `room` long (and within its context and `max_tokens`).
    fn propose(&mut self, index: usize, room: usize) -> Vec<Token> {
        if self.spec == SpecMode::Off {
            return Vec::new();
        }
        let n_ctx = self.n_ctx_slot;
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return Vec::new();
        };
        let Phase::Decode(token) = task.phase else {
            return Vec::new();
        };

        // The pending token goes at `mirror.len()`; the draft after it, and the
        // request needs no more than the tokens it may still generate.
        let most = room
            .min(n_ctx.saturating_sub(slot.mirror.len() + 1))
            .min(task.max_tokens.saturating_sub(task.n_tokens + 1));
        let len = task.spec.draft_len(task.n_tokens, most.min(self.draft_max));
        if len == 0 {
            return Vec::new();
        }
        slot.mirror.push(token);
        let drafts = match (&mut self.drafter, self.spec) {
            (Some(drafter), SpecMode::Draft) => drafter.draft(slot.seq, &slot.mirror, len),
            _ => {
                let cap = most.min(self.draft_max);
                let shortest = task.spec.shortest_match();
                let (mut tokens, run) = ngram_copy(&slot.mirror, cap, shortest);
                tokens.truncate(copy_len(run, len, cap));
                tokens
            }
        };
        slot.mirror.pop();
        drafts
    }

    /// Whether slot `index`'s request was cancelled (and is now finished).
    fn cancelled(&mut self, index: usize) -> bool {
        let Some(task) = &self.slots[index].task else {
            return false;
        };
        if !task.job.cancel.load(Ordering::Relaxed) {
            return false;
        }
        if task.generating_since.is_none() {
            self.fail(index, BackendError::Cancelled);
        } else {
            self.finish(index, FinishReason::Cancelled);
        }
        true
    }

    /// Records what slot `index` decoded; samples when its logits are ready.
    fn after_decode(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let from = slot.mirror.len();
        match task.phase {
            Phase::Prefill => slot
                .mirror
                .extend_from_slice(&task.prompt[from..from + task.in_batch]),
            Phase::Decode(token) if task.in_batch > 0 => slot.mirror.push(token),
            _ => {}
        }
        if task.phase == Phase::Prefill && task.checkpoint_at == Some(slot.mirror.len()) {
            task.checkpoint_at = None;
            let decoded = slot.mirror.len() - task.report.reused_tokens;
            self.checkpoint(index, decoded);
        }
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let Some(at) = task.logits_at.take() else {
            return;
        };
        if task.phase == Phase::Prefill {
            task.prefill_secs = task.started.elapsed().as_secs_f64();
            task.generating_since = Some(Instant::now());
            // The prefill phase's answer comes before any output; a caller that is
            // gone no longer wants the rest.
            if task.job.prefilled.send(Ok(task.report)).is_err() {
                self.release(index);
                return;
            }
        }
        self.sample(index, at);
    }

    /// Slot `index` holds the opening of its prompt up to the newest message: keeps
    /// the sliding-window layers' state there ([`super::checkpoints`]), and the whole
    /// state in the prompt cache on disk when `decoded` of those tokens were not
    /// cached, so that a cold start with the same opening finds it (the state saved
    /// at the request's end cannot be cut back to it on such a model).
    fn checkpoint(&mut self, index: usize, decoded: usize) {
        let slot = &self.slots[index];
        if let Some(state) = self.ctx.window_state(slot.seq) {
            crate::log::debug(crate::log::Category::Llm, || {
                let (n, kb) = (slot.mirror.len(), state.len() >> 10);
                format!(
                    "slot {}: checkpoint of the sliding window at {n} ({kb} KiB)",
                    slot.seq
                )
            });
            self.checkpoints.insert(slot.mirror.clone(), state);
            self.save(index, decoded);
        }
    }

    /// Samples slot `index`'s next token at batch entry `at`, and after it each
    /// draft token the sampler agrees with (see [`super::speculative`]); keeps the
    /// agreed draft in the cache, drops the rest, and passes the tokens on.
    fn sample(&mut self, index: usize, at: usize) {
        let Worker {
            ctx,
            slots,
            draft_max,
            generating,
            ..
        } = self;
        let slot = &mut slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let drafts = std::mem::take(&mut task.drafts);
        let mut tokens = Vec::with_capacity(drafts.len() + 1);
        let mut probs = Vec::new();
        loop {
            let entry = at + tokens.len();
            let token = match task.sampler.sample_at(ctx, entry) {
                Ok(token) => token,
                Err(err) => return self.fail(index, BackendError::Protocol(err.to_string())),
            };
            if let Some(top) = task.job.sampling.logprobs {
                probs.push(token_logprobs(ctx, entry, token, top as usize));
            }
            let agreed = drafts.get(tokens.len()) == Some(&token);
            tokens.push(token);
            if !agreed || ctx.model().is_eog(token) {
                break;
            }
        }
        if !drafts.is_empty() {
            // Every token sampled but the last agreed with the draft.
            let accepted = tokens.len() - 1;
            slot.mirror.extend_from_slice(&drafts[..accepted]);
            task.spec.verified(drafts.len(), accepted, *draft_max);
            if accepted < drafts.len() && !ctx.truncate_seq(slot.seq, slot.mirror.len()) {
                slot.mirror.clear();
                let err = "the cache could not drop a rejected draft (run with --spec off)";
                return self.fail(index, BackendError::Protocol(err.into()));
            }
            task.spec
                .judge(tokens.len(), drafts.len(), task.n_tokens, *generating);
        }
        self.emit(index, &tokens, probs);
    }

    /// Passes the sampled `tokens` on as one text, in order, up to the first that
    /// ends the request (an end token, a stop string, the length); the last left is
    /// decoded next step. Their `probs`, when the request asked for them, go first.
    fn emit(&mut self, index: usize, tokens: &[Token], mut probs: Vec<TokenLogprobs>) {
        let n_ctx = self.n_ctx_slot;
        let model = self.ctx.model();
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let mut shown = String::new();
        let mut end = None;
        let n_before = task.n_tokens;
        for (i, &token) in tokens.iter().enumerate() {
            if model.is_eog(token) {
                end = Some(FinishReason::Stop);
                break;
            }
            task.n_tokens += 1;
            let marker = task.markers && self.markers.binary_search(&token).is_ok();
            let bytes = match model.piece_bytes(token, marker) {
                Ok(bytes) => bytes,
                Err(err) => return self.fail(index, BackendError::Protocol(err.to_string())),
            };
            let (visible, stopped) = task.stops.push(&task.utf8.push(&bytes));
            task.text.push_str(&visible);
            shown.push_str(&visible);
            if stopped {
                end = Some(FinishReason::Stop);
                break;
            }
            // Tokens before the last are in the cache already; the last goes next.
            let full = i + 1 == tokens.len() && slot.mirror.len() >= n_ctx;
            if task.n_tokens >= task.max_tokens || full {
                end = Some(FinishReason::Length);
                break;
            }
            task.phase = Phase::Decode(token);
        }
        // The tokens passed on: all up to the one that ended the request, that
        // one included unless it is an end token.
        probs.truncate(task.n_tokens - n_before);
        if !task.forced_tools && !probs.is_empty() {
            let _ = task.job.events.send(WorkerMsg::Logprobs(probs));
        }
        // A forced tool call is JSON for the agent, never text for the user.
        if !task.forced_tools && !shown.is_empty() {
            if task
                .job
                .events
                .send(WorkerMsg::Event(Event::Content(shown)))
                .is_err()
            {
                return self.finish(index, FinishReason::Cancelled);
            }
            task.unanswered.push_back(task.text.len());
        }
        if let Some(reason) = end {
            self.finish(index, reason);
        }
    }

    /// Ends slot `index`'s request: the held-back text, the stats, the reply.
    fn finish(&mut self, index: usize, reason: FinishReason) {
        let n_ctx = self.n_ctx_slot;
        let slot = &mut self.slots[index];
        let Some(mut task) = slot.task.take() else {
            return;
        };
        if reason != FinishReason::Cancelled {
            let rest = task.stops.finish(&task.utf8.finish());
            task.text.push_str(&rest);
            if !task.forced_tools && !rest.is_empty() {
                let _ = task.job.events.send(WorkerMsg::Event(Event::Content(rest)));
            }
        }
        // A whole answer (or one cut at its length): the user's turn comes next.
        let answered = matches!(reason, FinishReason::Stop | FinishReason::Length);
        let chat = match &mut task.job.prompt {
            Prompt::Chat(conversation) => Some(std::mem::take(conversation)),
            Prompt::Raw(_) => None,
        };
        slot.next_turn = chat
            .filter(|_| answered && !task.forced_tools)
            .map(|mut conversation| {
                let answer = answer_message(&task.text, &task.job.tools, task.report);
                conversation.extend(template::conversation("", &[answer]));
                let tools = match task.job.tool_choice {
                    ToolChoice::None => Vec::new(),
                    _ => std::mem::take(&mut task.job.tools),
                };
                NextTurn {
                    conversation,
                    tools,
                }
            });
        let decode_secs = task
            .generating_since
            .map_or(0.0, |t| t.elapsed().as_secs_f64());
        let rate = |n: usize, secs: f64| (secs > 0.0 && n > 0).then(|| n as f64 / secs);
        let stats = Stats {
            prompt_tokens: task.report.prompt_tokens as u64,
            completion_tokens: task.n_tokens as u64,
            prefill_tps: rate(task.report.decoded_tokens, task.prefill_secs),
            decode_tps: rate(task.n_tokens, decode_secs),
            context_used: slot.mirror.len() as u64,
            context_size: n_ctx as u64,
            cached_tokens: task.report.reused_tokens as u64,
            draft_tokens: task.spec.drafted,
            draft_accepted: task.spec.accepted,
            provider: None,
        };
        let reply = finish_reply(task.forced_tools, std::mem::take(&mut task.text), reason);
        let reply = reply.map(|mut reply| {
            let user_stop = |s: &&str| task.job.sampling.stop.iter().any(|u| u == s);
            reply.stop_sequence = task.stops.matched().filter(user_stop).map(String::from);
            let _ = task
                .job
                .events
                .send(WorkerMsg::Event(Event::Stats(stats.clone())));
            reply.usage = Some(Usage {
                prompt_tokens: stats.prompt_tokens,
                completion_tokens: stats.completion_tokens,
            });
            reply
        });
        let _ = task.job.events.send(WorkerMsg::Done(reply));
        self.save(index, task.report.decoded_tokens);
        self.release(index);
    }

    /// Ends slot `index`'s request with an error, in whichever phase it is.
    fn fail(&mut self, index: usize, err: BackendError) {
        let Some(task) = self.slots[index].task.as_ref() else {
            return;
        };
        // Until the prefill's answer went out, the caller waits for that answer; after
        // it, for events (the first sample may still fail).
        if task.generating_since.is_none() {
            let _ = task.job.prefilled.send(Err(err));
        } else {
            let _ = task.job.events.send(WorkerMsg::Done(Err(err)));
        }
        self.release(index);
    }

    /// Frees slot `index`; its cache stays for the next request that shares it.
    fn release(&mut self, index: usize) {
        self.clock += 1;
        self.finished_at = Instant::now();
        let slot = &mut self.slots[index];
        slot.task = None;
        slot.last_used = self.clock;
    }

    /// After a failed decode the cache content of every slot in the batch is unknown:
    /// those slots start over, and their requests get the error.
    fn decode_failed(&mut self, err: llama::DecodeError) {
        let n_ctx = self.n_ctx_slot;
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            if slot.task.as_ref().is_none_or(|t| t.in_batch == 0) {
                continue;
            }
            self.ctx.truncate_seq(slot.seq, 0);
            slot.mirror.clear();
            let err = match &err {
                llama::DecodeError::Aborted => BackendError::Cancelled,
                llama::DecodeError::ContextFull { needed, n_ctx } => overflow(*needed, 0, *n_ctx),
                llama::DecodeError::NoKvSlot => overflow(n_ctx, 1, n_ctx),
                other => BackendError::Protocol(other.to_string()),
            };
            self.fail(index, err);
        }
    }
}

/// The fewest more prompt tokens another slot's cache must hold for a slot to copy
/// it ([`Worker::adopt_prefix`]) rather than decode them: a copy moves a whole share
/// of the cache (`n_ctx_slot` cells) where decoding computes only the tokens it needs,
/// and per cell the copy is hundreds of times cheaper.
fn copy_min(n_ctx_slot: usize) -> usize {
    COPY_MIN_TOKENS.max(n_ctx_slot / COPY_CELLS_PER_TOKEN)
}

/// Of the free slots `(index, mirror, last_used)`, the one whose cache shares the
/// longest prefix with `prompt`, when that keeps at least half of what it holds (a
/// conversation coming back) or holds the whole prompt (the same request again: a
/// regenerated answer, a retry); otherwise the least recently used, so a new
/// conversation that shares only a system prompt does not evict another
/// conversation's cache while an older or empty slot is free.
fn pick_slot<'a>(free: impl Iterator<Item = (usize, &'a [Token], u64)>, prompt: &[Token]) -> usize {
    let free: Vec<_> = free.collect();
    let longest = free
        .iter()
        .max_by_key(|(_, mirror, used)| (common_prefix(mirror, prompt), std::cmp::Reverse(*used)));
    if let Some(&(index, mirror, _)) = longest {
        let common = common_prefix(mirror, prompt);
        if common > 0 && (common * 2 >= mirror.len() || common == prompt.len()) {
            return index;
        }
    }
    let oldest = free.iter().min_by_key(|(index, _, used)| (*used, *index));
    oldest.map_or(0, |(index, _, _)| *index)
}

// ---------------------------------------------------------------- benchmark

impl Worker<'_> {
    /// Like llama-bench's pp and tg tests, on slot 0 from an empty cache (then `depth`
    /// untimed tokens); only while no request is running. Leaves every slot empty.
    fn bench(&mut self, test: super::BenchTest) -> Result<super::BenchReport, BackendError> {
        if !self.idle() {
            return Err(BackendError::Config("bench needs an idle backend".into()));
        }
        let super::BenchTest {
            n_prompt,
            n_gen,
            depth,
        } = test;
        let n_vocab = self.model().n_vocab().max(1) as usize;
        // Arbitrary but valid tokens, as llama-bench uses.
        let arbitrary = |n: usize, step: usize| -> Vec<Token> {
            (0..n).map(|i| ((i * step) % n_vocab) as Token).collect()
        };
        let (filler, tokens) = (arbitrary(depth, 6151), arbitrary(n_prompt, 7919));
        self.clear_all();
        self.bench_decode(&filler, 0)?;
        let started = Instant::now();
        self.bench_decode(&tokens, depth)?;
        let pp_secs = started.elapsed().as_secs_f64();
        self.clear_all();
        self.bench_decode(&filler, 0)?;
        let started = Instant::now();
        for i in 0..n_gen {
            self.bench_decode(&[((i * 104_729) % n_vocab) as Token], depth + i)?;
        }
        let tg_secs = started.elapsed().as_secs_f64();
        self.clear_all();
        let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        Ok(super::BenchReport {
            pp_tps: rate(n_prompt, pp_secs),
            tg_tps: rate(n_gen, tg_secs),
            flash_attn: self.settings.0,
            n_ubatch: self.settings.1,
        })
    }

    fn clear_all(&mut self) {
        for slot in &mut self.slots {
            self.ctx.truncate_seq(slot.seq, 0);
            slot.mirror.clear();
            slot.next_turn = None;
        }
        self.waiting = None;
    }

    fn bench_decode(&mut self, tokens: &[Token], start: usize) -> Result<(), BackendError> {
        let chunk = self.batch.capacity();
        for (i, piece) in tokens.chunks(chunk).enumerate() {
            self.batch.clear();
            for (j, &token) in piece.iter().enumerate() {
                let last = i * chunk + j + 1 == tokens.len();
                let pushed = self.batch.push_seq(token, start + i * chunk + j, 0, last);
                pushed.map_err(|e| BackendError::Config(e.to_string()))?;
            }
            self.ctx
                .decode(&self.batch)
                .map_err(|e| BackendError::Protocol(e.to_string()))?;
            // As llama-bench does after every decode, and as reading the logits does in
            // a real turn: the time is the device's, not only the launch's.
            self.ctx.synchronize();
        }
        Ok(())
    }
}

/// The length of `text` before the first end-of-generation token in it.
fn end_of_turn(model: &Model, text: &str) -> usize {
    let Ok(tokens) = model.tokenize(text, false) else {
        return text.len();
    };
    tokens
        .into_iter()
        .filter(|&t| model.is_eog(t))
        .filter_map(|t| model.piece_bytes(t, true).ok())
        .filter_map(|piece| text.find(std::str::from_utf8(&piece).ok()?))
        .min()
        .unwrap_or(text.len())
}

/// The assistant message the agent will store for `text`: what the output filter
/// makes of it (content, reasoning, calls with ids), so the next turn's prompt is
/// rendered as it will be asked for.
fn answer_message(text: &str, tools: &[ToolSpec], report: PrefillReport) -> Message {
    let mut filter = OutputFilter::for_tools(tools);
    if let Some(end) = report.prompt_end {
        filter.after_prompt(end);
    }
    if let Some(learnt) = report.learnt_call {
        filter.learn(learnt);
    }
    let mut ignore = |_: Event| Flow::Continue;
    filter.push(text, &mut ignore);
    filter.finish(&mut ignore);
    let mut message = Message::assistant(filter.content());
    if !filter.thinking().is_empty() {
        message.thinking = Some(filter.thinking().to_string());
    }
    message.tool_calls = filter.take_tool_calls();
    message
}

/// Token `token`'s log-probability at batch entry `entry` of the last decode, and
/// the `top` likeliest tokens there ([`llama::log_probs`]).
fn token_logprobs(ctx: &Context<'_>, entry: usize, token: Token, top: usize) -> TokenLogprobs {
    let model = ctx.model();
    let prob = |id: Token, logprob: f32| TokenProb {
        id,
        bytes: model.piece_bytes(id, true).unwrap_or_default(),
        logprob,
    };
    let (logprob, best) = ctx.logits_at(entry).map_or((0.0, Vec::new()), |logits| {
        llama::log_probs(logits, token, top)
    });
    TokenLogprobs {
        chosen: prob(token, logprob),
        top: best.into_iter().map(|(id, lp)| prob(id, lp)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_aborts_only_a_running_warm_up() {
        let abort = Arc::new(AtomicBool::new(false));
        let preempt = Preempt::new(Arc::clone(&abort));
        // No warm-up running: a request must not abort the decode that serves it.
        preempt.request_arrived();
        assert!(!abort.load(Ordering::Relaxed));
        // A request during the warm-up aborts it; the flag is clear afterwards.
        let seen = preempt.run(|| {
            assert!(!abort.load(Ordering::Relaxed));
            let other = preempt.clone();
            std::thread::spawn(move || other.request_arrived())
                .join()
                .unwrap();
            abort.load(Ordering::Relaxed)
        });
        assert!(seen);
        assert!(!abort.load(Ordering::Relaxed));
        preempt.request_arrived();
        assert!(!abort.load(Ordering::Relaxed));
    }

    #[test]
    fn a_request_takes_the_slot_sharing_the_longest_prefix_else_the_oldest() {
        let (a, b, empty): (Vec<Token>, Vec<Token>, Vec<Token>) =
            (vec![1, 2, 3, 4, 5, 6], vec![1, 2, 9, 9, 9], vec![]);
        let slots = |used: [u64; 3]| {
            [
                (0, a.as_slice(), used[0]),
                (1, b.as_slice(), used[1]),
                (2, empty.as_slice(), used[2]),
            ]
        };
        // A conversation coming back: its own slot, however recently used.
        assert_eq!(
            pick_slot(slots([9, 1, 0]).into_iter(), &[1, 2, 3, 4, 5, 6, 7]),
            0
        );
        assert_eq!(pick_slot(slots([1, 9, 0]).into_iter(), &[1, 2, 9, 9, 8]), 1);
        // Sharing only a short prefix (2 of 6 and 2 of 5 tokens): the oldest slot.
        assert_eq!(pick_slot(slots([5, 3, 4]).into_iter(), &[1, 2, 7]), 1);
        assert_eq!(pick_slot(slots([5, 3, 0]).into_iter(), &[1, 2, 7]), 2);
        // Equal prefixes: the least recently used of them.
        assert_eq!(
            pick_slot([(0, &a[..4], 7), (1, &a[..4], 2)].into_iter(), &a),
            1
        );
        // The same prompt again (a regenerated answer): the slot holding it, even
        // though its answer is longer than the prompt and another slot is empty.
        let answered = [1, 2, 3, 10, 11, 12, 13, 14, 15, 16];
        assert_eq!(
            pick_slot(
                [(0, &answered[..], 9), (1, &empty[..], 0)].into_iter(),
                &[1, 2, 3]
            ),
            0
        );
        // Only busy slots elsewhere: whichever is free.
        assert_eq!(pick_slot([(3, b.as_slice(), 8)].into_iter(), &a), 3);
    }
}

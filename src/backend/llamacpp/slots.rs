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
//!
//! This file holds the worker's state, its loop and the admission of requests;
//! each other job is a submodule: [`cache`] (which slot, prefixes, the prompt
//! cache on disk, checkpoints, warm-up), [`decode`] (the batch, sampling,
//! speculation, the text passed on, a request's end), [`embed`] (embeddings and
//! the bench) and [`files`] (llama-server's slot save, restore and erase).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Select, TryRecvError};

mod cache;
mod decode;
mod embed;
mod emit;
pub(super) mod files;
mod sampling;
mod setup;
#[cfg(test)]
pub(super) use setup::choose_context;

use super::checkpoints::{Checkpoints, CHECKPOINT_MIN};
use super::model::{self, DecodeCounters, EmbedInput, Embedding, ModelError, ModelJob, ModelProps};
use super::prompt_cache::PromptCache;
use super::prompt_tokens::PromptTokens;
use super::request::{
    chat_tokens, common_prefix, finish_reply, raw_tokens, sampler_error, sampler_params,
    tokenize_prompt, tool_grammar, InfillRoom, PromptImage, Tokens,
};
use super::residency::{IdleTimer, Served};
use super::speculative::{copy_len, ngram_copy, DraftModel, SlotSpec, SpecMode};
use super::{
    load_template, tuning, BackendError, Event, FinishReason, Flow, Job, LlamaConfig,
    PrefillReport, Prompt, RequestJob, ToolChoice, ToolSpec, Usage, WorkerMsg,
};
use crate::backend::local::{self, overflow, render, render_turn, StopMatcher};
use crate::core::{Message, Progress, PromptProgress, Stats, TokenLogprobs, TokenProb};
use crate::llama::vision::Vision;
use crate::llama::{self, utf8::Utf8Stream, Batch, Context, ContextParams, Model, Sampler, Token};
use crate::stream::filter::{OutputFilter, TextEnd};
use crate::stream::format;
use crate::stream::syntax;
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
        crate::util::sync::lock(&self.warming)
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
    call_syntax: Option<syntax::CallSyntax>,
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
    slot_actions: VecDeque<model::jobs::SlotJob>,
    /// The thread that samples while a grammar constrains ([`sampling`]).
    helper: sampling::Helper,
    /// The last request's serial ([`Task::serial`]).
    serials: u64,
    /// Decodes, busy slots and drafts counted for `/metrics`.
    counters: Arc<DecodeCounters>,
    /// The decode's threads as configured, and as set now: one fewer while the
    /// sampling helper works, which would otherwise preempt one of the decode's
    /// threads and hold all of them at ggml's barriers.
    threads: (i32, i32),
    /// How long the worker has had nothing to do, and how long it may
    /// (`--sleep-idle-seconds`, Ollama's `keep_alive`).
    timer: IdleTimer,
    /// The vision projector (`--mmproj`): images in prompts.
    vision: Option<Vision<'m>>,
}

struct Slot {
    /// The sequence id in the context.
    seq: i32,
    /// The tokens this slot's sequence holds in the cache, position by position.
    mirror: Vec<Token>,
    last_used: u64,
    task: Option<Task>,
    /// The last request it served, as `GET /slots` shows an idle slot.
    served: Option<model::jobs::SlotTask>,
    /// The conversation this slot just answered, to warm up its next turn.
    next_turn: Option<NextTurn>,
}

/// A conversation with its new answer, and the tools it was rendered with.
struct NextTurn {
    conversation: Vec<TemplateMessage>,
    tools: Vec<ToolSpec>,
}

/// A request rendered and tokenized, its sampler built: what a slot starts from.
struct Prepared {
    tokens: Tokens,
    sampler: Sampler,
    /// A call forced in the generic JSON shape, parsed at the end.
    forced_tools: bool,
    max_tokens: usize,
    stops: StopMatcher,
    prompt_end: Option<format::PromptEnd>,
    /// The rendered prompt, when the request asked for it (`__verbose`).
    rendered: Option<String>,
}

/// The request a slot is serving.
struct Task {
    job: Box<RequestJob>,
    prompt: Vec<Token>,
    /// The prompt's images, in order, and the first of them not yet decoded
    /// into the slot's cache.
    images: Vec<PromptImage>,
    next_image: usize,
    /// `None` while the sampling helper has it ([`Phase::Sampling`]).
    sampler: Option<Sampler>,
    /// Tells this request from a later one in the same slot.
    serial: u64,
    /// How long the last sample took while the grammar constrained.
    sample_cost: Option<Duration>,
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
    /// When the prompt's logits were ready (its last batch decoded).
    generating_since: Option<Instant>,
    /// When the first token and the latest one were sampled: the decode steps
    /// after the first token took the time between them.
    sampled: Option<(Instant, Instant)>,
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
    /// The sampling helper has the sampler and the logits ([`sampling`]).
    Sampling,
}

/// How many texts a slot may have sent and not had answered while its next token
/// decodes: one, so the sink works in parallel with the decode, and a cancel
/// costs at most the one token already decoding.
const IN_FLIGHT: usize = 1;

impl Task {
    /// Whether the slot waits for its sink before its next token may decode.
    fn blocked(&self) -> bool {
        self.unanswered.len() > IN_FLIGHT || self.phase == Phase::Sampling
    }
}

impl<'m> Worker<'m> {
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
            eog_tokens: (0..model.n_vocab()).filter(|&t| model.is_eog(t)).collect(),
            vision: self.vision.is_some(),
        }
    }

    /// The context each request sees.
    pub(super) fn slot_context(&self) -> usize {
        self.n_ctx_slot
    }

    /// Serves jobs until every handle is gone ([`Served::Closed`]) or nothing came
    /// for the idle limit ([`Served::Idle`]: the model is to leave memory).
    pub(super) fn serve(&mut self, jobs: &Receiver<Job>) -> Served {
        loop {
            if let Some(end) = self.receive(jobs) {
                return end;
            }
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

    /// Nothing to decode: the pool's workers sleep rather than spin on the cores
    /// the HTTP workers, tools and clients want ([`Context::rest_threads`]; the
    /// draft model's context computes on the same pool, made with the same
    /// threads: [`Context::sharing_threads`]).
    fn rest_threads(&self) {
        self.ctx.rest_threads();
    }

    /// Takes the jobs that arrived, blocking while there is nothing to do (up to
    /// the warm-up's quiet time and the idle limit); `Some` when serving ends:
    /// the channel is closed (the last handle is gone) or the idle limit passed.
    fn receive(&mut self, jobs: &Receiver<Job>) -> Option<Served> {
        if self.idle() {
            self.timer.idle();
            self.rest_threads();
        }
        while self.idle() {
            let warm = self.waiting.is_some() || self.slots.iter().any(|s| s.next_turn.is_some());
            let quiet_until = warm.then(|| self.finished_at + WARM_QUIET);
            let deadline = [quiet_until, self.timer.deadline()]
                .into_iter()
                .flatten()
                .min();
            let received = match deadline {
                Some(deadline) => jobs.recv_deadline(deadline),
                None => jobs.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match received {
                Ok(job) => {
                    self.accept(job);
                    if self.idle() {
                        self.timer.idle();
                    }
                }
                // No warm-up for a model about to leave memory.
                Err(RecvTimeoutError::Timeout) if self.timer.due(Instant::now()) => {
                    return Some(Served::Idle)
                }
                Err(RecvTimeoutError::Timeout) => {
                    self.warm_up();
                    self.rest_threads();
                }
                Err(RecvTimeoutError::Disconnected) => return Some(Served::Closed),
            }
        }
        self.timer.busy();
        loop {
            match jobs.try_recv() {
                Ok(job) => self.accept(job),
                Err(TryRecvError::Empty) => return None,
                Err(TryRecvError::Disconnected) => return Some(Served::Closed),
            }
        }
    }

    /// Takes one job: answered at once, or queued for the loop.
    pub(super) fn accept(&mut self, job: Job) {
        if job.needs_model() {
            self.timer.job();
        }
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
            Job::Model(ModelJob::Wake(reply)) => {
                let _ = reply.send(Ok(()));
            }
            Job::Model(ModelJob::RenderChat {
                conversation,
                tools,
                kwargs,
                generation_prompt,
                reply,
            }) => {
                let rendered = render_turn(
                    &self.template,
                    &conversation,
                    &tools,
                    &kwargs,
                    generation_prompt,
                )
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
            Job::KeepAlive(limit) => self.timer.keep(limit),
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
        let Prepared {
            tokens: (prompt, images),
            sampler,
            forced_tools,
            max_tokens,
            stops,
            prompt_end,
            rendered,
        } = prepared;
        let markers = !forced_tools && matches!(job.prompt, Prompt::Chat(_));
        let index = self.choose_slot(&prompt);
        self.adopt_prefix(index, &prompt);
        self.restore(index, &prompt);
        // A request came: the session it continues waits no longer.
        self.waiting = None;
        self.slots[index].next_turn = None;
        let keep = self.keep_prefix(index, &prompt);
        let checkpoint_at = self.checkpoint_at(&job, &prompt, keep);
        self.serials += 1;
        let serial = self.serials;
        let slot = &mut self.slots[index];
        let report = PrefillReport {
            prompt_tokens: prompt.len(),
            reused_tokens: keep,
            decoded_tokens: prompt.len() - keep,
            prompt_end,
            learnt_call: self.learnt_call,
            rendered,
        };
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!(
                "slot {}: {} prompt tokens, {keep} reused, {} to decode",
                slot.seq,
                prompt.len(),
                report.decoded_tokens
            )
        });
        let next_image = images.iter().take_while(|i| i.start < keep).count();
        slot.task = Some(Task {
            job,
            prompt,
            images,
            next_image,
            sampler: Some(sampler),
            serial,
            sample_cost: None,
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
            sampled: None,
            utf8: Utf8Stream::default(),
            stops,
            text: String::new(),
            n_tokens: 0,
            unanswered: VecDeque::new(),
            drafts: Vec::new(),
            spec: SlotSpec::default(),
            checkpoint_at,
        });
        // The first progress report: nothing decoded yet, the reused part in place.
        self.report_progress(index);
        Ok(())
    }

    fn prepare(&mut self, job: &RequestJob) -> Result<Prepared, BackendError> {
        let tools: &[ToolSpec] = if job.tool_choice == ToolChoice::None {
            &[]
        } else {
            &job.tools
        };
        let grammar = tool_grammar(tools, &job.tool_choice, self.call_syntax.as_ref())?;
        // A call in the generic JSON shape is parsed at the end, never shown.
        let forced = grammar.as_ref().filter(|g| g.json);
        let (tokens, prompt_end, rendered) = match &job.prompt {
            Prompt::Chat(conversation) => {
                let kwargs = &job.sampling.chat_template_kwargs;
                let prompt = render(&self.template, conversation, tools, kwargs)?;
                let (model, vision) = (self.ctx.model(), self.vision.as_ref());
                let tokens =
                    chat_tokens(model, &mut self.prompt_tokens, vision, &prompt, &job.images)?;
                let end = forced.is_none().then(|| format::prompt_end(&prompt));
                let rendered = job.sampling.telemetry.prompt.then_some(prompt);
                (tokens, end.flatten(), rendered)
            }
            Prompt::Raw(parts) => {
                let room = InfillRoom {
                    n_batch: self.ctx.n_batch() as usize,
                    n_ctx: self.n_ctx_slot,
                    n_predict: job.sampling.max_tokens.unwrap_or(0) as usize,
                };
                let (model, vision) = (self.ctx.model(), self.vision.as_ref());
                let tokens = raw_tokens(model, &mut self.prompt_tokens, vision, parts, room)?;
                (tokens, None, None)
            }
        };
        let n_ctx = self.n_ctx_slot;
        let reserve = job.sampling.answer_reserve(n_ctx as u64) as usize;
        if tokens.0.len() + reserve > n_ctx {
            return Err(overflow(tokens.0.len(), reserve, n_ctx));
        }
        let params = sampler_params(&job.sampling, grammar.as_ref())?;
        let sampler =
            Sampler::new(self.model(), &params).map_err(|e| sampler_error(e, &job.sampling))?;
        let room = n_ctx - tokens.0.len();
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
        Ok(Prepared {
            tokens,
            sampler,
            forced_tools: forced.is_some(),
            max_tokens,
            stops,
            prompt_end,
            rendered,
        })
    }
}

// ---------------------------------------------------------------- benchmark

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

#[cfg(test)]
mod tests {
    use super::cache::pick_slot;
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

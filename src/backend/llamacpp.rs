//! The in-process llama.cpp backend: a [`Backend`] whose model runs inside shepherd.
//!
//! **Threading.** llama.cpp state never crosses threads. [`LlamaBackend`] is a small
//! `Send + Clone` handle to one named generation thread (`llama-gen`) that loads the
//! [`Model`], creates the context borrowing it, and then serves [`Job`]s from a
//! crossbeam channel until the last clone of the handle is dropped (that closes the
//! channel and joins). Each clone keeps its own per-request state (output filter,
//! estimator, the request in flight), so several threads can generate at once.
//! While generating, the thread hands each event to the caller and decodes that
//! request's next token while the sink answers with its [`Flow`]; at most one event
//! per request is unanswered, so a cancel stops it within one token.
//! With `--sleep-idle-seconds` (or Ollama's `keep_alive`) the thread frees the
//! model and its contexts when idle and loads them again for the next job that
//! needs them ([`residency`]).
//!
//! **Slots** (`--parallel N`, [`slots`]): the thread runs N sequences over one context
//! and decodes them together, one batch per step (continuous batching); requests
//! beyond N wait in FIFO order.
//!
//! **Two phases**, prefill then generate: [`LlamaBackend::prefill_until`] renders the conversation,
//! tokenizes it, checks it fits a slot (prompt plus the answer's reserve, else the
//! typed [`BackendError::ContextOverflow`] that API backends raise too) and decodes the
//! new tokens into the KV cache; [`LlamaBackend::generate_prefilled`] then streams the
//! answer. Both travel as one job, so clones never interleave their phases.
//!
//! **KV prefix reuse.** Each slot keeps a mirror of the tokens in its sequence. A
//! request takes the slot sharing the longest prefix with its rendered prompt, keeps
//! that prefix, removes the rest with `llama_memory_seq_rm`, and decodes only the new
//! tokens ([`Stats::cached_tokens`](crate::core::Stats) says how many were reused).
//!
//! **Tool calls.** With `tool_choice` required or named, a grammar built from the tools'
//! JSON schemas forces a `{"name", "arguments"}` object, parsed here. Free-form text
//! goes through the shared [`OutputFilter`] on the caller's side of the channel, like
//! every other backend's text: thinking tags, code blocks and tool-call markup are
//! recognised there, never here.
//!
//! **Raw prompts.** [`Backend::complete`] runs the same request path with a prompt
//! given as text, not rendered through the chat template and not filtered (the API
//! server's `/v1/completions`). [`LocalModel`] (`model.rs`) is the handle for what
//! the model offers besides generation: embeddings, the tokenizer, its properties.

mod checkpoints;
mod model;
pub mod prompt_cache;
mod prompt_tokens;
mod reply;
mod request;
mod residency;
mod slots;
pub mod speculative;
use reply::*;
mod thread;
use thread::*;
pub mod tuning;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{bounded, select, unbounded, Receiver, RecvTimeoutError, Sender};

use super::ending;
use super::estimate::TokenEstimator;
use super::local::{self, message_text};
use super::{
    Backend, BackendInfo, GenerateRequest, PromptPart, Reply, Sampling, ToolChoice, Usage,
};
use crate::core::{
    BackendError, Event, EventSink, FinishReason, Flow, Message, Progress, Session, Stats,
    TokenLogprobs,
};
use crate::core::{Image, ToolSpec};
use crate::llama::{CacheType, GpuSplit, LoadProgress, Model, ModelParams, Pooling};
use crate::stream::filter::{OutputFilter, TextEnd};
use crate::template::{self, ChatTemplate, TemplateMessage};
use crate::util::dirs::{model_cache_dir, DEFAULT_MODEL_FILE};
pub use model::jobs::SlotReport;
pub use model::{DecodeFigures, EmbedInput, LocalModel, ModelError, ModelProps, NOT_RERANKING};
pub use residency::Residency;
use residency::{IdleTimer, Served};

/// How often a handle waiting for the generation thread asks its caller about a cancel.
const POLL: Duration = Duration::from_millis(50);

/// Longest `count_tokens` waits for the generation thread before it estimates.
const COUNT_DEADLINE: Duration = Duration::from_secs(1);

/// Settings for loading the model and creating its context (`--context-size`, `--gpu-layers`, ...).
#[derive(Debug, Clone)]
pub struct LlamaConfig {
    pub model_path: PathBuf,
    /// Requests decoded together (`--parallel`), each in its own slot of the context.
    pub parallel: u32,
    /// `None`: the training context, capped at [`tuning::DEFAULT_CONTEXT_CAP`].
    pub context_size: Option<u32>,
    pub gpu_layers: i32,
    /// How the offloaded layers go over several GPUs (`--split-mode`, ...).
    pub split: GpuSplit,
    /// `None`: all available cores.
    pub threads: Option<i32>,
    pub n_batch: u32,
    /// `None`: decided with flash attention (see [`ubatch_for`]).
    pub ubatch: Option<u32>,
    pub cache_type: CacheType,
    /// Forced on or off; `None` is auto (see [`flash_attn_for`]).
    pub flash_attn: Option<bool>,
    /// How `/v1/embeddings` pools a sequence (`--pooling`).
    pub pooling: Pooling,
    /// Where loading progress goes (see [`crate::llama::LoadProgress`]).
    pub progress: Option<LoadProgress>,
    /// The prompt cache on disk; `None` with `--no-prompt-cache`.
    pub prompt_cache: Option<prompt_cache::PromptCacheConfig>,
    /// Speculative decoding (`--spec`, `--draft-max`, `--model-draft`).
    pub spec: speculative::SpecConfig,
    /// `--chat-template`: Jinja source used instead of the model's own template
    /// (and its `tool_use` one); `chatml` is the built-in ChatML.
    pub chat_template: Option<String>,
    /// Variables every render of the template gets (`--chat-template-kwargs`,
    /// `--reasoning`); a request's `chat_template_kwargs` go over them.
    pub chat_template_kwargs: serde_json::Map<String, serde_json::Value>,
    /// Where slot saves and restores go (`--slot-save-path`); `None`: refused.
    pub slot_save_path: Option<PathBuf>,
    /// `--sleep-idle-seconds`: how long the thread may have nothing to do before
    /// the model leaves memory ([`residency`]); `None`: it stays.
    pub sleep_idle: Option<Duration>,
    /// The vision projector (`--mmproj`, or the one found beside the model).
    pub mmproj: Option<PathBuf>,
}

impl LlamaConfig {
    pub fn new(model_path: PathBuf) -> Self {
        LlamaConfig {
            model_path,
            parallel: 1,
            context_size: None,
            gpu_layers: 0,
            split: GpuSplit::default(),
            threads: None,
            n_batch: 512,
            ubatch: None,
            cache_type: CacheType::F16,
            flash_attn: None,
            pooling: Pooling::Mean,
            progress: None,
            prompt_cache: None,
            spec: speculative::SpecConfig::default(),
            chat_template: None,
            chat_template_kwargs: serde_json::Map::new(),
            slot_save_path: None,
            sleep_idle: None,
            mmproj: None,
        }
    }
}

/// The embedded default model, or a message saying how to get it.
pub fn default_model() -> Result<PathBuf, BackendError> {
    let path = model_cache_dir().join(DEFAULT_MODEL_FILE);
    if path.is_file() {
        return Ok(path);
    }
    Err(BackendError::Config(format!(
        "no provider configured and no model given; the default model {} is missing: run `make model` (or pass -m FILE.gguf)",
        path.display()
    )))
}

/// What the prefill phase did, for stats and tests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrefillReport {
    /// Tokens of the whole rendered prompt.
    pub prompt_tokens: usize,
    /// Tokens kept from the KV cache of the previous turn.
    pub reused_tokens: usize,
    /// Tokens actually decoded this turn.
    pub decoded_tokens: usize,
    /// How the rendered prompt ends, where that decides how the answer starts
    /// ([`crate::stream::format::prompt_end`]).
    pub prompt_end: Option<crate::stream::format::PromptEnd>,
    /// The call syntax learnt from a template whose markers the table does not know.
    pub learnt_call: Option<crate::stream::format::LearntCall>,
    /// The rendered prompt's text, when the request asked for it
    /// ([`super::Telemetry::prompt`]; a chat only).
    pub rendered: Option<String>,
}

/// Benchmark figures in the units llama-bench prints (`shepherd bench`, and `make
/// bench` through the test binary in release mode).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BenchReport {
    pub pp_tps: f64,
    pub tg_tps: f64,
    /// The context's flash attention (`None`: llama.cpp's auto) and physical batch.
    pub flash_attn: Option<bool>,
    pub n_ubatch: u32,
}

/// One llama-bench style test: `n_prompt` tokens decoded as one prompt, then `n_gen`
/// tokens one at a time, both after `depth` tokens already in the cache (llama-bench's
/// `-d`; filling the cache is not timed).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BenchTest {
    pub n_prompt: usize,
    pub n_gen: usize,
    pub depth: usize,
}

enum Job {
    /// Prefill, then (when it succeeded) generate: one job, so that requests from
    /// several handles never interleave their phases.
    Request(Box<RequestJob>),
    Count(String, Sender<Option<usize>>),
    /// Decode the known opening of this conversation's next prompt while idle.
    Warm(Vec<TemplateMessage>, Vec<ToolSpec>),
    /// Embeddings and the tokenizer ([`LocalModel`]).
    Model(model::ModelJob),
    Bench(BenchTest, Sender<Result<BenchReport, BackendError>>),
    /// How long the model may stay after the request just done (Ollama's
    /// `keep_alive`; `None`: until another limit is set). See [`residency`].
    KeepAlive(Option<Duration>),
    /// How many tokens each slot's cache holds.
    #[cfg(test)]
    Cached(Sender<Vec<usize>>),
}

impl Job {
    /// Whether the job needs the model: a warm-up hint and a keep-alive do not
    /// wake a sleeping one.
    fn needs_model(&self) -> bool {
        !matches!(self, Job::Warm(..) | Job::KeepAlive(_))
    }

    /// Answers the job with `error` without running it (the model could not be
    /// loaded again after sleeping).
    fn refuse(self, error: BackendError) {
        match self {
            Job::Request(job) => {
                let _ = job.prefilled.send(Err(error));
            }
            // The caller estimates instead.
            Job::Count(_, reply) => {
                let _ = reply.send(None);
            }
            Job::Warm(..) | Job::KeepAlive(_) => {}
            Job::Model(job) => job.refuse(ModelError::from(error)),
            Job::Bench(_, reply) => {
                let _ = reply.send(Err(error));
            }
            #[cfg(test)]
            Job::Cached(reply) => {
                let _ = reply.send(Vec::new());
            }
        }
    }
}

/// What a request asks the model to continue.
enum Prompt {
    /// A conversation, rendered with the chat template (and the tools).
    Chat(Vec<TemplateMessage>),
    /// Text or token ids continued as they are: no template, no tools, no
    /// output filter.
    Raw(Vec<PromptPart>),
}

struct RequestJob {
    prompt: Prompt,
    /// A chat prompt's images, in the order of their markers
    /// ([`request::image_marker`]) in the rendered prompt.
    images: Vec<Image>,
    tools: Vec<ToolSpec>,
    tool_choice: ToolChoice,
    sampling: Sampling,
    /// The prefill phase's answer, sent before any event.
    prefilled: Sender<Result<PrefillReport, BackendError>>,
    /// Generated text (always token by token; the handle holds it back when the
    /// caller did not ask for streaming), then stats, then `Done`.
    events: Sender<WorkerMsg>,
    /// The sink's answer to each event.
    flow: Receiver<Flow>,
    /// Set by the handle when its sink is cancelled while nothing is emitted.
    cancel: Arc<AtomicBool>,
}

/// What the generation thread sends a request's handle: the model's raw text
/// (reasoning and tool-call markup included: the output filter's input, never
/// shown as it is), then the figures, then the reply. Its own type, so raw text
/// never travels as [`Event::Content`], which carries only filtered text.
enum WorkerMsg {
    /// Raw text, answered with a [`Flow`].
    Text(String),
    /// The probabilities of the tokens whose text comes next; not answered.
    Logprobs(Vec<TokenLogprobs>),
    /// The figures so far, when the request asked ([`super::Telemetry`]): the
    /// prompt's progress while it is decoded, then before each text; not answered.
    Progress(Progress),
    /// The generation's figures, after its last text, and how the text ended;
    /// answered with a [`Flow`].
    Stats(Stats, TextEnd),
    Done(Result<Reply, BackendError>),
}

/// The handle the agent owns; the model lives on its generation thread.
///
/// Clones share that one thread (and model); each clone keeps its own per-request
/// state, so several threads can each run `generate` on their own clone at once.
/// The thread stops when the last clone is dropped.
pub struct LlamaBackend {
    shared: Arc<Shared>,
    info: BackendInfo,
    props: Arc<ModelProps>,
    estimator: TokenEstimator,
    last_prefill: Option<PrefillReport>,
    /// The output filter for the prefilled request's free-form text; `None` when a
    /// grammar forces a tool call (that JSON is for the agent, never for the user).
    filter: Option<OutputFilter>,
    /// The prefilled request whose events `generate_prefilled` reads.
    pending: Option<Pending>,
}

/// What every clone of a [`LlamaBackend`] shares: the way to the generation thread.
struct Shared {
    jobs: Option<Sender<Job>>,
    worker: Option<JoinHandle<()>>,
    /// The context's abort flag: stops a running decode at shutdown.
    abort: Arc<AtomicBool>,
    /// Lets a new request interrupt the idle worker's warm-up decode.
    preempt: slots::Preempt,
    /// What the generation thread counts (`/metrics`).
    counters: Arc<model::DecodeCounters>,
    /// Whether the model is asleep, and until when it stays ([`residency`]).
    residency: Arc<Residency>,
}

impl Drop for Shared {
    /// The last handle is gone: stop the thread (closing its channel) and join it.
    fn drop(&mut self) {
        self.abort.store(true, Ordering::Relaxed);
        self.jobs.take();
        if let Some(worker) = self.worker.take() {
            let _ = worker.join();
        }
    }
}

/// The handle's side of a prefilled request.
struct Pending {
    /// A message read while waiting for the prefill's answer, to be handled first.
    early: Option<WorkerMsg>,
    events: Receiver<WorkerMsg>,
    flow: Sender<Flow>,
    cancel: Arc<AtomicBool>,
}

impl Clone for LlamaBackend {
    /// A new handle to the same generation thread, with fresh per-request state.
    fn clone(&self) -> Self {
        LlamaBackend {
            shared: Arc::clone(&self.shared),
            info: self.info.clone(),
            props: Arc::clone(&self.props),
            estimator: self.estimator.clone(),
            last_prefill: None,
            filter: None,
            pending: None,
        }
    }
}

/// The generation thread's stack (see `llama::grammar::limits::LIMITS`).
const GEN_STACK: usize = 64 << 20;

impl LlamaBackend {
    /// Loads the model on a new generation thread; returns once it is ready (or failed).
    pub fn new(config: LlamaConfig) -> Result<LlamaBackend, BackendError> {
        let (job_tx, job_rx) = unbounded();
        let (ready_tx, ready_rx) = bounded(1);
        let abort = Arc::new(AtomicBool::new(false));
        let preempt = slots::Preempt::new(Arc::clone(&abort));
        let counters = Arc::new(model::DecodeCounters::default());
        let residency = Arc::new(Residency::default());
        let thread = Thread {
            config,
            preempt: preempt.clone(),
            counters: Arc::clone(&counters),
            residency: Arc::clone(&residency),
        };
        let worker = std::thread::Builder::new()
            .name("llama-gen".into())
            // llama.cpp's grammar parser and stack builder recurse once per nested
            // group and referenced rule; `llama::grammar::limits` bounds both with
            // this stack in mind (reserved, not committed, until used).
            .stack_size(GEN_STACK)
            .spawn(move || run_worker(thread, ready_tx, job_rx))
            .map_err(|e| {
                BackendError::Config(format!("cannot start the generation thread: {e}"))
            })?;
        let info = ready_rx.recv().map_err(|_| {
            BackendError::Config("the generation thread stopped while loading".into())
        })?;
        let (info, props) = match info {
            Ok(loaded) => loaded,
            Err(err) => {
                let _ = worker.join();
                return Err(err);
            }
        };
        let shared = Shared {
            jobs: Some(job_tx),
            worker: Some(worker),
            abort,
            preempt,
            counters,
            residency,
        };
        Ok(LlamaBackend {
            shared: Arc::new(shared),
            info,
            props: Arc::new(props),
            estimator: TokenEstimator::default(),
            last_prefill: None,
            filter: None,
            pending: None,
        })
    }

    /// A handle for embeddings, the tokenizer and the model's properties.
    pub fn local_model(&self) -> LocalModel {
        LocalModel {
            shared: Arc::clone(&self.shared),
            props: Arc::clone(&self.props),
        }
    }

    fn send(&self, job: Job) -> Result<(), BackendError> {
        let sender = self.shared.jobs.as_ref().ok_or_else(worker_gone)?;
        let request = matches!(job, Job::Request(_));
        sender.send(job).map_err(|_| worker_gone())?;
        if request {
            self.shared.preempt.request_arrived();
        }
        Ok(())
    }

    /// Phase one: render, check the fit, and decode the new prompt tokens into the
    /// cache. The prompt's progress goes to `sink` when the request asked for it.
    /// Gives up with [`BackendError::Cancelled`] once the sink is cancelled (asked every
    /// 50 ms while the request waits for a slot or its prompt is decoded), freeing its
    /// queue entry or slot: a server whose client hung up before the first token.
    pub fn prefill_until(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<PrefillReport, BackendError> {
        // A call forced in the generic JSON shape bypasses the filter (the worker
        // parses it and sends no text); every other answer is read through it.
        let filter = Some(OutputFilter::for_tools(request.tools));
        let (messages, images) = request::marked_messages(&session.messages);
        let conversation = template::conversation(&session.system_prompt, &messages);
        self.prefill(Prompt::Chat(conversation), images, request, filter, sink)
    }

    /// Phase one for either kind of prompt; `filter` reads the generated text.
    fn prefill(
        &mut self,
        prompt: Prompt,
        images: Vec<Image>,
        request: &GenerateRequest<'_>,
        filter: Option<OutputFilter>,
        sink: &mut dyn EventSink,
    ) -> Result<PrefillReport, BackendError> {
        // A request prefilled but never generated is dropped here: its events stop.
        self.pending = None;
        self.filter = filter;
        let (prefilled, result) = bounded(1);
        let (events_tx, events) = unbounded();
        let (flow_tx, flow) = unbounded();
        let cancel = Arc::new(AtomicBool::new(false));
        let job = RequestJob {
            prompt,
            images,
            tools: request.tools.to_vec(),
            tool_choice: request.tool_choice.clone(),
            sampling: request.sampling.clone(),
            prefilled,
            events: events_tx,
            flow,
            cancel: Arc::clone(&cancel),
        };
        self.send(Job::Request(Box::new(job)))?;
        let (report, early) = await_prefill(&result, &events, &cancel, sink)?;
        self.last_prefill = Some(report.clone());
        if let Some(filter) = self.filter.as_mut() {
            if let Some(end) = report.prompt_end {
                filter.after_prompt(end);
            }
            if let Some(learnt) = report.learnt_call {
                filter.learn(learnt);
            }
        }
        self.pending = Some(Pending {
            early,
            events,
            flow: flow_tx,
            cancel,
        });
        Ok(report)
    }

    /// Phase two: sample the answer into `sink`.
    pub fn generate_prefilled(
        &mut self,
        stream: bool,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let pending = self.pending.take().ok_or_else(|| {
            BackendError::Config("generate called without a successful prefill".into())
        })?;
        let mut filter = self.filter.take();
        // Without streaming, the text is held back and shown whole before the stats.
        let mut held = String::new();
        // Once the sink said stop, the token the worker was already decoding (it does
        // not wait for each answer) is dropped, not shown.
        let mut stopped = false;
        let mut early = pending.early.map(Ok);
        loop {
            let next = early.take();
            match next.unwrap_or_else(|| pending.events.recv_timeout(POLL)) {
                Ok(WorkerMsg::Logprobs(probs)) => {
                    if !stopped {
                        sink.emit(Event::Logprobs(probs));
                    }
                }
                Ok(WorkerMsg::Progress(progress)) => {
                    if !stopped {
                        sink.emit(Event::Progress(progress));
                    }
                }
                Ok(WorkerMsg::Text(_)) if stopped => {
                    let _ = pending.flow.send(Flow::Cancel);
                }
                Ok(WorkerMsg::Text(text)) if !stream => {
                    held.push_str(&text);
                    let answer = if sink.cancelled() {
                        Flow::Cancel
                    } else {
                        Flow::Continue
                    };
                    stopped = answer == Flow::Cancel;
                    let _ = pending.flow.send(answer);
                }
                Ok(message @ (WorkerMsg::Text(_) | WorkerMsg::Stats(..))) => {
                    flush_held(&mut held, &mut filter, sink);
                    let mut answer = match message {
                        WorkerMsg::Text(text) => show(text, &mut filter, sink),
                        // The figures come after whatever the filter still holds.
                        _ => close(message, &mut filter, sink),
                    };
                    if sink.cancelled() {
                        answer = Flow::Cancel;
                    }
                    stopped |= answer == Flow::Cancel;
                    let _ = pending.flow.send(answer);
                }
                Ok(WorkerMsg::Done(result)) => {
                    flush_held(&mut held, &mut filter, sink);
                    return filtered_reply(result, filter, sink);
                }
                // Nothing emitted for a while (a long decode): pass on a cancel from the sink.
                Err(RecvTimeoutError::Timeout) if sink.cancelled() => {
                    pending.cancel.store(true, Ordering::Relaxed)
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Err(worker_gone()),
            }
        }
    }

    /// What the last prefill did (tokens reused and decoded).
    #[cfg(test)]
    pub fn last_prefill(&self) -> Option<PrefillReport> {
        self.last_prefill.clone()
    }

    /// How many tokens each slot's cache holds.
    #[cfg(test)]
    pub fn cached_tokens(&self) -> Vec<usize> {
        let (reply, result) = bounded(1);
        self.send(Job::Cached(reply)).unwrap();
        result.recv().unwrap()
    }

    /// Measures prompt processing and generation as llama-bench's pp/tg tests do
    /// (see [`BenchTest`]). Clears the cache.
    pub fn bench(&mut self, test: BenchTest) -> Result<BenchReport, BackendError> {
        let (reply, result) = bounded(1);
        self.send(Job::Bench(test, reply))?;
        result.recv().map_err(|_| worker_gone())?
    }
}

impl Backend for LlamaBackend {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn takes_images(&self) -> bool {
        self.props.vision
    }

    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let report = self.prefill_until(session, request, sink)?;
        prefilled(&report, sink);
        self.generate_prefilled(request.stream, sink)
    }

    fn complete(
        &mut self,
        prompt: &[PromptPart],
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let prompt = Prompt::Raw(prompt.to_vec());
        let report = self.prefill(prompt, Vec::new(), request, None, sink)?;
        prefilled(&report, sink);
        self.generate_prefilled(request.stream, sink)
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        let (reply, result) = bounded(1);
        let text = message_text(message);
        // The generation thread answers between steps; one long step (a big
        // prompt's batch) must not stall the caller: the estimate stands in.
        let counted = self
            .send(Job::Count(text, reply))
            .ok()
            .and_then(|()| result.recv_timeout(COUNT_DEADLINE).ok().flatten());
        match counted {
            Some(n) => u32::try_from(n).unwrap_or(u32::MAX).saturating_add(4),
            None => self.estimator.count_message(message),
        }
    }

    fn warm(&mut self, session: &Session, tools: &[ToolSpec]) {
        // An image is decoded only with the request that shows it.
        if session.messages.iter().any(|m| !m.images.is_empty()) {
            return;
        }
        let conversation = template::conversation(&session.system_prompt, &session.messages);
        // A hint: a backend that stopped has nothing to warm.
        let _ = self.send(Job::Warm(conversation, tools.to_vec()));
    }
}

#[cfg(test)]
mod tests;

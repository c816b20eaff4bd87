//! The TensorRT-LLM backend: a [`Backend`] whose model runs in NVIDIA's
//! TensorRT-LLM executor, in-process, reached through shepherd's own C ABI
//! (`ffi/trtllm.h`, wrapped safely in [`ffi`]). Only built with the cargo feature
//! `tensorrt` (or `tensorrt-testlib`, which links the scripted test library).
//!
//! The executor takes token ids and streams token ids back; everything around
//! that is here: the engine directory's tokenizer and chat template
//! ([`tokenizer`], rendered through the same [`crate::template`] path as
//! llama.cpp), cumulative detokenisation, stop strings that span tokens (the
//! llama backend's `StopMatcher`), end-of-turn ids, the shared [`OutputFilter`]
//! for thinking and tool-call markup, and the stats event.
//!
//! **Two phases** (prepare, then generate): [`TensorRtBackend::prepare`] renders, tokenizes and
//! checks that the prompt plus the answer's reserve fit the engine's context
//! (else the typed [`BackendError::ContextOverflow`] the agent evicts on, before
//! anything is enqueued); [`TensorRtBackend::generate_prepared`] enqueues and
//! streams. The executor keeps the conversation's prefix in its KV cache by
//! itself (block reuse is on), so there is no cache mirror here.
//!
//! **Threading.** The executor runs its own threads; this backend only enqueues
//! and waits, on the caller's thread. It waits in short slices so a cancel from
//! the sink is seen between responses as well as at every response, and a
//! cancelled request is cancelled in the executor too and drained to its final
//! response.

mod ffi;
mod tokenizer;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use self::ffi::{Awaited, Executor, ExecutorOptions, FfiError, Finish, RequestId, RequestOptions};
use self::tokenizer::{Detokenizer, EngineTokenizer};
use super::ending;
use super::estimate::TokenEstimator;
use super::local::{self, message_text, overflow, StopMatcher};
use super::{Backend, BackendInfo, GenerateRequest, Reply, Sampling, ToolChoice, Usage};
use crate::core::{
    BackendError, Event, EventSink, FinishReason, Flow, Message, Session, Stats, ToolSpec,
};
use crate::stream::filter::{OutputFilter, TextEnd};
use crate::stream::format::{self, PromptEnd};
use crate::template::{self, ChatTemplate};

/// How long one wait for a response lasts before the sink's cancel flag is checked.
const POLL: Duration = Duration::from_millis(50);
/// How long a cancelled request is drained for its final response.
const DRAIN_LIMIT: Duration = Duration::from_secs(10);

/// Settings for `--backend tensorrt -m ENGINE_DIR`.
#[derive(Debug, Clone)]
pub struct TensorRtConfig {
    /// trtllm-build's output directory, with the tokenizer files copied beside it.
    pub engine_dir: PathBuf,
    /// Caps the engine's own `max_seq_len` (`--context-size`).
    pub context_size: Option<u32>,
    /// Share of free GPU memory for the KV cache, `None` for the executor's 0.9.
    pub kv_cache_free_gpu_memory_fraction: Option<f32>,
}

impl TensorRtConfig {
    pub fn new(engine_dir: PathBuf) -> Self {
        TensorRtConfig {
            engine_dir,
            context_size: None,
            kv_cache_free_gpu_memory_fraction: None,
        }
    }
}

/// The limits trtllm-build baked into the engine (its `config.json`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EngineLimits {
    /// Prompt plus generated tokens of one sequence.
    pub max_seq_len: u32,
    /// Prompt tokens of one sequence, when the engine says.
    pub max_input_len: Option<u32>,
}

/// Reads `config.json` of an engine: `build_config` (current trtllm-build),
/// `builder_config` (older), or the model's `max_position_embeddings`.
pub fn engine_limits(dir: &Path) -> Result<EngineLimits, BackendError> {
    let path = dir.join("config.json");
    let text = std::fs::read_to_string(&path).map_err(|e| {
        BackendError::Config(format!(
            "{}: {e} (is {} a trtllm-build engine directory?)",
            path.display(),
            dir.display()
        ))
    })?;
    let config: Value = serde_json::from_str(&text)
        .map_err(|e| BackendError::Config(format!("{}: {e}", path.display())))?;
    let number = |pointer: &str| {
        config
            .pointer(pointer)
            .and_then(Value::as_u64)
            .and_then(|n| u32::try_from(n).ok())
    };
    let max_input_len =
        number("/build_config/max_input_len").or(number("/builder_config/max_input_len"));
    let old_style = number("/builder_config/max_output_len")
        .zip(max_input_len)
        .map(|(o, i)| o + i);
    let max_seq_len = number("/build_config/max_seq_len")
        .or(old_style)
        .or(number("/pretrained_config/max_position_embeddings"))
        .ok_or_else(|| {
            BackendError::Config(format!(
                "{}: no build_config.max_seq_len, so the context size is unknown",
                path.display()
            ))
        })?;
    Ok(EngineLimits {
        max_seq_len,
        max_input_len,
    })
}

/// What phase one decided, ready to enqueue.
#[derive(Debug, Clone)]
pub struct Prepared {
    tokens: Vec<u32>,
    options: RequestOptions,
    stops: Vec<String>,
    tools: Vec<ToolSpec>,
    /// How the prompt ends, where that decides how the answer starts.
    prompt_end: Option<PromptEnd>,
    stream: bool,
}

impl Prepared {
    /// Tokens of the rendered prompt.
    #[cfg(test)]
    pub fn prompt_tokens(&self) -> usize {
        self.tokens.len()
    }
}

/// The TensorRT-LLM backend: an executor, the engine's tokenizer and template.
pub struct TensorRtBackend {
    executor: Executor,
    tokenizer: EngineTokenizer,
    template: ChatTemplate,
    info: BackendInfo,
    n_ctx: u32,
    max_input_len: Option<u32>,
    estimator: TokenEstimator,
}

impl TensorRtBackend {
    /// Loads the tokenizer and template, then starts the executor on the engine.
    pub fn new(config: TensorRtConfig) -> Result<TensorRtBackend, BackendError> {
        let dir = &config.engine_dir;
        let limits = engine_limits(dir)?;
        let n_ctx = config
            .context_size
            .map_or(limits.max_seq_len, |n| n.min(limits.max_seq_len));
        let tokenizer = EngineTokenizer::load(dir)?;
        let template = load_template(&tokenizer);
        let options = ExecutorOptions {
            kv_cache_free_gpu_memory_fraction: config.kv_cache_free_gpu_memory_fraction,
            kv_cache_max_tokens: None,
            disable_block_reuse: false,
        };
        let executor =
            Executor::create(dir, &options).map_err(|e| BackendError::Config(e.to_string()))?;
        Ok(TensorRtBackend {
            executor,
            tokenizer,
            template,
            info: BackendInfo {
                kind: "tensorrt",
                model: dir.display().to_string(),
                context_size: u64::from(n_ctx),
                local: true,
            },
            n_ctx,
            max_input_len: limits.max_input_len,
            estimator: TokenEstimator::default(),
        })
    }

    /// Phase one: render, tokenize and check the fit; nothing reaches the executor.
    pub fn prepare(
        &self,
        session: &Session,
        request: &GenerateRequest<'_>,
    ) -> Result<Prepared, BackendError> {
        let tools = if *request.tool_choice == ToolChoice::None {
            &[][..]
        } else {
            request.tools
        };
        let conversation = template::conversation(&session.system_prompt, &session.messages);
        let kwargs = &request.sampling.chat_template_kwargs;
        let prompt = local::render(&self.template, &conversation, tools, kwargs)?;
        let tokens = self.tokenizer.encode(&prompt)?;
        if tokens.is_empty() {
            return Err(BackendError::Config("the rendered prompt is empty".into()));
        }
        let max_tokens = self.check_fit(tokens.len(), request.sampling)?;
        Ok(Prepared {
            options: self.request_options(max_tokens, request.sampling),
            tokens,
            stops: self.template.stop_strings(&request.sampling.stop),
            tools: tools.to_vec(),
            prompt_end: format::prompt_end(&prompt),
            stream: request.stream,
        })
    }

    /// The request's `max_tokens` once the prompt and the answer's reserve fit the context.
    fn check_fit(&self, n_prompt: usize, sampling: &Sampling) -> Result<u32, BackendError> {
        let n_ctx = self.n_ctx as usize;
        let reserve = sampling.answer_reserve(u64::from(self.n_ctx)) as usize;
        if n_prompt + reserve > n_ctx {
            return Err(overflow(n_prompt, reserve, n_ctx));
        }
        if let Some(max_input) = self.max_input_len.filter(|&m| n_prompt > m as usize) {
            return Err(overflow(n_prompt, 0, max_input as usize));
        }
        let room = (n_ctx - n_prompt) as u32;
        Ok(sampling.max_tokens.map_or(room, |n| n.min(room)).max(1))
    }

    fn request_options(&self, max_tokens: u32, sampling: &Sampling) -> RequestOptions {
        RequestOptions {
            max_tokens,
            temperature: sampling.temperature,
            top_p: sampling.top_p,
            top_k: sampling.top_k,
            seed: sampling.seed,
            end_id: self.tokenizer.eos_id,
            stop_token_ids: self
                .tokenizer
                .end_ids
                .iter()
                .copied()
                .filter(|&id| Some(id) != self.tokenizer.eos_id)
                .collect(),
            streaming: true,
        }
    }

    /// Phase two: enqueue and stream the answer into `sink`.
    pub fn generate_prepared(
        &mut self,
        prepared: Prepared,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let id = self
            .executor
            .enqueue(&prepared.tokens, &prepared.options)
            .map_err(ffi_error)?;
        let mut state = ReplyStream::new(&prepared);
        let result = self.stream(id, &mut state, sink);
        if let Some(stats) = self.executor.iteration_stats() {
            crate::util::log::debug(crate::util::log::Category::Llm, || {
                format!("executor: {stats:?}")
            });
        }
        result?;
        Ok(state.into_reply(&self.tokenizer, prepared.tokens.len(), self.n_ctx, sink))
    }

    /// Awaits responses until the request ends, handing text to `state`.
    fn stream(
        &mut self,
        id: RequestId,
        state: &mut ReplyStream,
        sink: &mut dyn EventSink,
    ) -> Result<(), BackendError> {
        loop {
            if sink.cancelled() {
                state.finish = FinishReason::Cancelled;
                return self.stop_request(id);
            }
            let response = match self.executor.await_response(id, POLL).map_err(ffi_error)? {
                Awaited::Timeout => continue,
                Awaited::Response(response) => response,
            };
            state.first_response.get_or_insert_with(Instant::now);
            let ended = state.take(&self.tokenizer, &response.tokens, sink);
            if ended {
                return match response.finish {
                    Some(_) => Ok(()),
                    None => self.stop_request(id),
                };
            }
            if let Some(finish) = response.finish {
                state.finish = finish_reason(finish);
                return Ok(());
            }
        }
    }

    /// Cancels `id` in the executor and drains it to its final response.
    fn stop_request(&mut self, id: RequestId) -> Result<(), BackendError> {
        self.executor.cancel(id).map_err(ffi_error)?;
        let deadline = Instant::now() + DRAIN_LIMIT;
        while Instant::now() < deadline {
            match self.executor.await_response(id, POLL) {
                Ok(Awaited::Response(r)) if r.finish.is_some() => return Ok(()),
                Ok(_) => {}
                // A request that failed or is already gone needs no more draining.
                Err(_) => return Ok(()),
            }
        }
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!("request {id:?} did not end within {DRAIN_LIMIT:?} of its cancel")
        });
        Ok(())
    }
}

fn ffi_error(err: FfiError) -> BackendError {
    BackendError::Protocol(err.to_string())
}

fn finish_reason(finish: Finish) -> FinishReason {
    match finish {
        Finish::EndId | Finish::StopWord | Finish::Other => FinishReason::Stop,
        Finish::Length => FinishReason::Length,
        Finish::Cancelled => FinishReason::Cancelled,
    }
}

fn load_template(tokenizer: &EngineTokenizer) -> ChatTemplate {
    let source = tokenizer.chat_template.as_deref();
    let (bos, eos) = (&tokenizer.bos_text, &tokenizer.eos_text);
    local::load_template(source, bos, eos)
}

/// One generation's state between responses.
struct ReplyStream {
    detokenizer: Detokenizer,
    stops: StopMatcher,
    filter: OutputFilter,
    stream: bool,
    /// Visible text not yet shown (when not streaming).
    held: String,
    /// A stop string ended the text.
    cut: bool,
    n_tokens: usize,
    finish: FinishReason,
    started: Instant,
    first_response: Option<Instant>,
}

impl ReplyStream {
    fn new(prepared: &Prepared) -> ReplyStream {
        let mut filter = OutputFilter::for_tools(&prepared.tools);
        if let Some(end) = prepared.prompt_end {
            filter.after_prompt(end);
        }
        ReplyStream {
            detokenizer: Detokenizer::default(),
            stops: StopMatcher::new(prepared.stops.clone()),
            filter,
            stream: prepared.stream,
            held: String::new(),
            cut: false,
            n_tokens: 0,
            finish: FinishReason::Length,
            started: Instant::now(),
            first_response: None,
        }
    }

    /// Takes one response's tokens; true when the turn ended here (end-of-turn id,
    /// stop string, or the sink cancelled).
    fn take(
        &mut self,
        tokenizer: &EngineTokenizer,
        tokens: &[u32],
        sink: &mut dyn EventSink,
    ) -> bool {
        let end_at = tokens.iter().position(|id| tokenizer.end_ids.contains(id));
        let tokens = &tokens[..end_at.unwrap_or(tokens.len())];
        self.n_tokens += tokens.len();
        let text = self.detokenizer.push(tokenizer, tokens);
        let (visible, hit) = self.stops.push(&text);
        if self.show(&visible, sink) == Flow::Cancel {
            self.finish = FinishReason::Cancelled;
            return true;
        }
        self.cut = hit;
        if hit || end_at.is_some() {
            self.finish = FinishReason::Stop;
            return true;
        }
        false
    }

    fn show(&mut self, text: &str, sink: &mut dyn EventSink) -> Flow {
        if text.is_empty() {
            return Flow::Continue;
        }
        if !self.stream {
            self.held.push_str(text);
            return Flow::Continue;
        }
        let flow = self.filter.push(text, sink);
        if sink.cancelled() {
            Flow::Cancel
        } else {
            flow
        }
    }

    /// Flushes what is held back, emits the stats and builds the reply.
    fn into_reply(
        mut self,
        tokenizer: &EngineTokenizer,
        n_prompt: usize,
        n_ctx: u32,
        sink: &mut dyn EventSink,
    ) -> Reply {
        if self.finish != FinishReason::Cancelled {
            // After a stop string, whatever was held back lies beyond it.
            if !self.cut {
                let rest = self.detokenizer.finish(tokenizer);
                let rest = self.stops.finish(&rest);
                self.show(&rest, sink);
            }
            if !self.held.is_empty() {
                let held = std::mem::take(&mut self.held);
                self.filter.push(&held, sink);
            }
            // An end-of-turn id is the model's own end; a stop string or the
            // length cut the text (a call it holds was not finished).
            let end = if self.finish == FinishReason::Stop && !self.cut {
                TextEnd::Model
            } else {
                TextEnd::Cut
            };
            self.filter.finish_as(end, sink);
        }
        let stats = self.stats(n_prompt, n_ctx);
        sink.emit(Event::Stats(stats.clone()));
        let mut reply = Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: Vec::new(),
            finish: self.finish,
            usage: Some(Usage {
                prompt_tokens: stats.prompt_tokens,
                completion_tokens: stats.completion_tokens,
            }),
            artefacts: Vec::new(),
            stop_sequence: None,
        };
        ending::finish_local(&mut reply, &mut self.filter);
        reply
    }

    fn stats(&self, n_prompt: usize, n_ctx: u32) -> Stats {
        let end = Instant::now();
        let first = self.first_response.unwrap_or(end);
        let rate = |n: usize, secs: f64| (secs > 0.0 && n > 0).then(|| n as f64 / secs);
        Stats {
            prompt_tokens: n_prompt as u64,
            completion_tokens: self.n_tokens as u64,
            prefill_tps: rate(n_prompt, (first - self.started).as_secs_f64()),
            decode_tps: rate(self.n_tokens.saturating_sub(1), (end - first).as_secs_f64()),
            context_used: (n_prompt + self.n_tokens) as u64,
            context_size: u64::from(n_ctx),
            // The executor reuses KV blocks itself and does not report per request how many.
            cached_tokens: 0,
            ..Stats::default()
        }
    }
}

impl Backend for TensorRtBackend {
    fn info(&self) -> BackendInfo {
        self.info.clone()
    }

    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        // The executor is fed token ids alone: an image would be dropped unseen.
        if session.messages.iter().any(|m| !m.images.is_empty()) {
            return Err(BackendError::invalid(
                "the TensorRT-LLM backend takes no images; send text only, or run a vision model in process (--mmproj)",
            ));
        }
        let prepared = self.prepare(session, request)?;
        self.generate_prepared(prepared, sink)
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        match self.tokenizer.encode(&message_text(message)) {
            Ok(ids) => u32::try_from(ids.len())
                .unwrap_or(u32::MAX)
                .saturating_add(4),
            Err(_) => self.estimator.count_message(message),
        }
    }
}

#[cfg(all(test, feature = "tensorrt-testlib"))]
pub(crate) mod tests;

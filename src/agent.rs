//! The agent loop: generate, run the tool calls, append the results, generate again.
//!
//! The agent runs on its own named thread and owns the [`Session`], the backend
//! and the tool registry. Front-ends talk to it through an [`AgentHandle`]:
//! operations ([`Op`]) go in over one crossbeam channel, [`Event`]s come back
//! over another, and cancellation is an `AtomicBool` that the backend sees at
//! every token (through [`EventSink::cancelled`] and the sink's [`Flow`]) and
//! the loop checks between tools. Every prompt ends with exactly one
//! [`Event::Stop`].
//!
//! Context overflow reported by a backend triggers the session's two-pass
//! eviction and one retry; the backend itself never evicts.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::backend::{Backend, GenerateRequest, Reply, Sampling, ToolChoice, ToolSpec, Usage};
use crate::core::{
    BackendError, Event, EventSink, FinishReason, Flow, Message, Session, ToolCall, ToolResultEvent,
};
use crate::log::{self, Category};
use crate::tools::{truncate, ToolContext, ToolOutput, ToolRegistry};

/// What a front-end can ask of the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Run one user prompt to completion (tool rounds included).
    Prompt(String),
    /// Forget the conversation, keep the system prompt.
    Clear,
}

/// The agent's own settings, passed as values.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    pub system_prompt: String,
    pub sampling: Sampling,
    pub stream: bool,
    /// Most generations per prompt before the loop stops with `length`.
    pub max_rounds: u32,
    /// Whether tools are offered to the model at all.
    pub tools_enabled: bool,
}

/// The front-end's side of a running agent.
pub struct AgentHandle {
    ops: Option<Sender<Op>>,
    events: Receiver<Event>,
    cancel: Arc<AtomicBool>,
    /// True while a prompt is being processed.
    busy: Arc<AtomicBool>,
    thread: Option<JoinHandle<Session>>,
}

impl AgentHandle {
    /// Starts the agent thread.
    pub fn spawn(
        backend: Box<dyn Backend>,
        tools: ToolRegistry,
        tool_root: PathBuf,
        config: AgentConfig,
    ) -> std::io::Result<AgentHandle> {
        let (op_tx, op_rx) = crossbeam_channel::unbounded();
        let (event_tx, event_rx) = crossbeam_channel::unbounded();
        let cancel = Arc::new(AtomicBool::new(false));
        let busy = Arc::new(AtomicBool::new(false));
        let mut tool_ctx = ToolContext::new(tool_root);
        tool_ctx.cancel = cancel.clone();
        let mut agent = Agent {
            session: Session::new(config.system_prompt.clone()),
            backend,
            tools,
            tool_ctx,
            config,
            events: event_tx,
            cancel: cancel.clone(),
            busy: busy.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("shepherd-agent".into())
            .spawn(move || {
                agent.init_session();
                agent.serve(op_rx);
                agent.session
            })?;
        Ok(AgentHandle {
            ops: Some(op_tx),
            events: event_rx,
            cancel,
            busy,
            thread: Some(thread),
        })
    }

    /// Queues an operation. Returns false when the agent thread is gone.
    pub fn send(&self, op: Op) -> bool {
        self.ops.as_ref().is_some_and(|tx| tx.send(op).is_ok())
    }

    /// Asks the running prompt to stop as soon as possible.
    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    /// The cancel flag itself, for threads that must cancel without holding the handle.
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }

    /// A flag that is true while the agent is processing a prompt.
    pub fn busy_flag(&self) -> Arc<AtomicBool> {
        self.busy.clone()
    }

    /// Runs one prompt, handing every event to `on_event` until the turn's
    /// [`Event::Stop`]. A failing handler (a closed pipe) cancels the turn.
    pub fn run_prompt(
        &self,
        prompt: String,
        mut on_event: impl FnMut(&Event) -> std::io::Result<()>,
    ) -> FinishReason {
        if !self.send(Op::Prompt(prompt)) {
            return FinishReason::Error;
        }
        let mut handler_ok = true;
        for event in self.events.iter() {
            if handler_ok && on_event(&event).is_err() {
                handler_ok = false;
                self.cancel();
            }
            if let Event::Stop(reason) = event {
                return reason;
            }
        }
        FinishReason::Error
    }

    /// Stops the agent after the queued operations and returns its final session.
    pub fn shutdown(mut self) -> Option<Session> {
        self.ops.take();
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl Drop for AgentHandle {
    fn drop(&mut self) {
        self.ops.take();
        self.cancel.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

struct Agent {
    session: Session,
    backend: Box<dyn Backend>,
    tools: ToolRegistry,
    tool_ctx: ToolContext,
    config: AgentConfig,
    events: Sender<Event>,
    cancel: Arc<AtomicBool>,
    busy: Arc<AtomicBool>,
}

/// Forwards backend events to the front-end and reports cancellation.
struct ChannelSink<'a> {
    events: &'a Sender<Event>,
    cancel: &'a AtomicBool,
}

impl EventSink for ChannelSink<'_> {
    fn emit(&mut self, event: Event) -> Flow {
        // A front-end that went away is the same as a cancel.
        if self.events.send(event).is_err() {
            self.cancel.store(true, Ordering::SeqCst);
        }
        if self.cancelled() {
            Flow::Cancel
        } else {
            Flow::Continue
        }
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }
}

/// How one generation attempt ended, as far as the loop is concerned.
enum Round {
    Reply(Reply),
    Failed(BackendError),
}

impl Agent {
    fn init_session(&mut self) {
        let system = Message::system(self.session.system_prompt.clone());
        self.session.system_tokens = self.backend.count_tokens(&system);
        self.session.total_tokens = u64::from(self.session.system_tokens);
    }

    fn serve(&mut self, ops: Receiver<Op>) {
        for op in ops {
            match op {
                Op::Prompt(prompt) => {
                    self.busy.store(true, Ordering::SeqCst);
                    self.cancel.store(false, Ordering::SeqCst);
                    let reason = self.run_turn(prompt);
                    self.busy.store(false, Ordering::SeqCst);
                    self.emit(Event::Stop(reason));
                }
                Op::Clear => self.session.clear(),
            }
        }
    }

    fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::SeqCst)
    }

    fn push_message(&mut self, mut message: Message) {
        if message.tokens == 0 {
            message.tokens = self.backend.count_tokens(&message);
        }
        self.session.total_tokens += u64::from(message.tokens);
        self.session.messages.push(message);
    }

    /// Runs one prompt through as many tool rounds as the model needs.
    fn run_turn(&mut self, prompt: String) -> FinishReason {
        self.emit(Event::UserPrompt(prompt.clone()));
        self.push_message(Message::user(prompt));
        for _ in 0..self.config.max_rounds {
            let reply = match self.generate_with_eviction() {
                Round::Reply(reply) => reply,
                Round::Failed(BackendError::Cancelled) => return FinishReason::Cancelled,
                Round::Failed(error) => {
                    self.emit(Event::Error {
                        kind: error.kind(),
                        message: error.to_string(),
                    });
                    return FinishReason::Error;
                }
            };
            let finish = reply.finish;
            let calls = self.record_reply(reply);
            if finish == FinishReason::Cancelled {
                return FinishReason::Cancelled;
            }
            if calls.is_empty() {
                return finish;
            }
            if !self.run_tools(&calls) {
                return FinishReason::Cancelled;
            }
        }
        self.emit(Event::System(format!(
            "stopped after {} tool rounds (raise --max-rounds to allow more)",
            self.config.max_rounds
        )));
        FinishReason::Length
    }

    /// One generation, with one eviction-and-retry when the context overflows.
    fn generate_with_eviction(&mut self) -> Round {
        match self.generate_once() {
            Round::Failed(error @ BackendError::ContextOverflow { .. }) => {
                if self.evict_for(&error) {
                    self.generate_once()
                } else {
                    Round::Failed(error)
                }
            }
            other => other,
        }
    }

    fn generate_once(&mut self) -> Round {
        let specs: Vec<ToolSpec> = if self.config.tools_enabled {
            self.tools.specs()
        } else {
            Vec::new()
        };
        let choice = ToolChoice::Auto;
        let request = GenerateRequest {
            tools: &specs,
            tool_choice: &choice,
            sampling: &self.config.sampling,
            stream: self.config.stream,
        };
        let mut sink = ChannelSink {
            events: &self.events,
            cancel: &self.cancel,
        };
        let first_new = self.unmeasured_from();
        match self.backend.generate(&self.session, &request, &mut sink) {
            Ok(reply) => {
                if let Some(usage) = reply.usage {
                    self.correct_tokens(usage, first_new);
                }
                Round::Reply(reply)
            }
            Err(error) => Round::Failed(error),
        }
    }

    /// Index of the first message whose token count is still an estimate
    /// (everything after the last assistant message).
    fn unmeasured_from(&self) -> usize {
        self.session
            .messages
            .iter()
            .rposition(|m| m.role == crate::core::Role::Assistant)
            .map_or(0, |i| i + 1)
    }

    /// Replaces estimates with what the provider measured: the prompt tokens not
    /// accounted for by earlier messages are shared among the new ones.
    fn correct_tokens(&mut self, usage: Usage, first_new: usize) {
        let session = &mut self.session;
        let known: u64 = u64::from(session.system_tokens)
            + session.messages[..first_new]
                .iter()
                .map(|m| u64::from(m.tokens))
                .sum::<u64>();
        let new = &mut session.messages[first_new..];
        let estimated: u64 = new.iter().map(|m| u64::from(m.tokens)).sum();
        if usage.prompt_tokens > known && estimated > 0 {
            let measured = usage.prompt_tokens - known;
            for message in new.iter_mut() {
                let share = u64::from(message.tokens) * measured / estimated;
                message.tokens = u32::try_from(share.max(1)).unwrap_or(u32::MAX);
            }
        }
        session.last_prompt_tokens = usage.prompt_tokens;
        session.last_assistant_message_tokens = usage.completion_tokens;
        session.total_tokens = usage.prompt_tokens + usage.completion_tokens;
    }

    /// Evicts enough of the conversation for the failed request to fit. False when impossible.
    fn evict_for(&mut self, error: &BackendError) -> bool {
        let estimated = self.session.estimated_tokens();
        let reserve = u64::from(self.config.sampling.max_tokens.unwrap_or(1024));
        let needed = match (error.tokens_over(), error) {
            (Some(over), BackendError::ContextOverflow { limit, .. }) => {
                over + reserve.min(limit.unwrap_or(0) / 4)
            }
            _ => (estimated / 4).max(1),
        };
        // Estimates can be off; if the plan cannot free the full amount, free all
        // that may go and let the retry tell.
        let plan = self
            .session
            .plan_eviction(needed)
            .or_else(|| self.session.plan_full_eviction());
        let Some(plan) = plan else {
            log::debug(Category::Llm, || {
                format!("context overflow: nothing left to evict for {needed} tokens")
            });
            return false;
        };
        let count: usize = plan.ranges.iter().map(|r| r.len()).sum();
        self.session.evict(&plan);
        self.emit(Event::System(format!(
            "context full: evicted {count} old messages ({} tokens) and retrying",
            plan.tokens_freed
        )));
        true
    }

    /// Appends the assistant message and returns the tool calls to run.
    fn record_reply(&mut self, reply: Reply) -> Vec<ToolCall> {
        let calls = if reply.finish == FinishReason::Cancelled {
            Vec::new()
        } else {
            reply.tool_calls
        };
        let mut message = Message::assistant(reply.content);
        message.tool_calls = calls.clone();
        if !reply.thinking.is_empty() {
            message.thinking = Some(reply.thinking);
        }
        if let Some(usage) = reply.usage {
            message.tokens = u32::try_from(usage.completion_tokens.max(1)).unwrap_or(u32::MAX);
        }
        if !message.content.is_empty() || !message.tool_calls.is_empty() {
            self.push_message(message);
        }
        calls
    }

    /// Runs each call in order. Every call gets a result message, even when the
    /// user cancels halfway, so the history stays valid for every provider.
    /// Returns false when cancelled.
    fn run_tools(&mut self, calls: &[ToolCall]) -> bool {
        for call in calls {
            if self.cancelled() {
                let output = ToolOutput {
                    content: "Cancelled by the user before this tool ran.".into(),
                    summary: "cancelled".into(),
                    error: true,
                };
                self.push_message(Message::tool_result(call, output.content));
                continue;
            }
            self.emit(Event::ToolCall(call.clone()));
            let output = self.run_tool(call);
            self.emit(Event::ToolResult(ToolResultEvent {
                id: call.id.clone(),
                name: call.name.clone(),
                success: !output.error,
                summary: output.summary.clone(),
                content: output.content.clone(),
            }));
            self.push_message(Message::tool_result(call, output.content));
        }
        !self.cancelled()
    }

    fn run_tool(&self, call: &ToolCall) -> ToolOutput {
        log::debug(Category::Tools, || {
            format!("run {}({})", call.name, call.arguments)
        });
        let output = self.tools.run(call, &self.tool_ctx);
        let limit = self.tool_output_limit_chars();
        truncate::truncate_output(output, limit)
    }

    /// The share of the free context a tool result may take, in characters.
    fn tool_output_limit_chars(&self) -> usize {
        let info = self.backend.info();
        let context = if info.context_size > 0 {
            info.context_size
        } else {
            DEFAULT_CONTEXT_ASSUMED
        };
        let last = |role| {
            self.session
                .messages
                .iter()
                .rev()
                .find(|m| m.role == role)
                .map_or(0, |m| u64::from(m.tokens))
        };
        let tokens = truncate::context_limit_tokens(
            context,
            u64::from(self.session.system_tokens),
            last(crate::core::Role::User),
            last(crate::core::Role::Assistant),
        );
        usize::try_from(tokens.saturating_mul(CHARS_PER_TOKEN)).unwrap_or(usize::MAX)
    }
}

/// Context assumed for truncation when a backend cannot tell its window.
const DEFAULT_CONTEXT_ASSUMED: u64 = 32_768;
/// Conservative characters-per-token ratio for sizing tool output.
const CHARS_PER_TOKEN: u64 = 3;

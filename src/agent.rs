//! The agent thread: the session, the backend and the tools of one
//! conversation, driven by a front-end.
//!
//! The agent runs on its own named thread and owns the [`Session`], the backend
//! and the tool registry. Front-ends talk to it through an [`AgentHandle`]:
//! operations ([`Op`]) go in over one crossbeam channel, [`Event`]s come back
//! over another, and cancellation is an `AtomicBool` that the backend sees at
//! every token (through [`EventSink::cancelled`] and the sink's [`Flow`]) and
//! the loop checks between tools. Every prompt ends with exactly one
//! [`Event::Stop`].
//!
//! Each prompt runs through the loop in [`turn`] (generate, gate each call,
//! run it, record, generate again; eviction and one retry on context
//! overflow), the same code the API server's `--use-tools` workers drive.
//! The agent's part is the [`Gate`] it was given (policy, then the
//! front-end's approver; a refused call gets a tool result saying so, and
//! every call is written to the audit log), its channel as the event sink,
//! and its registry, all of whose calls it runs.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use crossbeam_channel::{Receiver, Sender};

use crate::backend::{Backend, Sampling, ToolChoice};
use crate::core::ToolSpec;
use crate::core::{BackendError, ChannelSink, Event, FinishReason, Message, Session};
use crate::tools::approval::{Approvals, Gate};
use crate::tools::{ToolContext, ToolRegistry};

pub mod turn;

use turn::{Outcome, Toolbox, Turn, TurnConfig};

/// What a front-end can ask of the agent. Operations run in the order sent.
pub enum Op {
    /// Run one user message to completion (tool rounds included): its text,
    /// and any images the user attached, which enter the session as they are.
    Prompt(Message),
    /// Forget the conversation, keep the system prompt.
    Clear,
    /// Send a copy of the session (for display, `/session`, saving).
    Snapshot(Sender<Session>),
    /// Replace the conversation (e.g. `--continue`); token counts are re-estimated.
    Restore(Session),
    /// Switch to another backend (provider switch or failover), keeping the conversation.
    SetBackend(Box<dyn Backend>),
    /// Change which tools are offered (`/tools`); replies with the enabled names.
    Tools(ToolsOp, Sender<Vec<String>>),
    /// Switch profile (`/profile use`, the profiles API): the system prompt
    /// with its guidelines and the tool globs it offers (empty: all).
    ApplyProfile {
        system_prompt: String,
        tools: Vec<String>,
    },
}

/// A change to the set of offered tools.
pub enum ToolsOp {
    List,
    Enable(String),
    Disable(String),
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
    /// `tool_choice` for the first generation of each prompt (later rounds use
    /// `Auto`, so a forced call cannot loop): `Required` or `Named` make local
    /// models call a tool through a grammar.
    pub first_tool_choice: ToolChoice,
}

/// The front-end's side of a running agent.
pub struct AgentHandle {
    ops: Option<Sender<Op>>,
    events: Receiver<Event>,
    cancel: Arc<AtomicBool>,
    /// True while a prompt is being processed.
    busy: Arc<AtomicBool>,
    thread: Option<JoinHandle<Session>>,
    /// Answers the gate's approval requests, when its approver asks the front-end.
    approvals: Option<Approvals>,
}

impl AgentHandle {
    /// Starts the agent thread with no one to ask for approvals: side-effecting
    /// calls are refused unless a policy allows them (see [`Gate::headless`]).
    /// Front-ends pass their own gate to [`AgentHandle::spawn_gated`]; this is for tests.
    #[cfg(test)]
    pub fn spawn(
        backend: Box<dyn Backend>,
        tools: ToolRegistry,
        tool_root: PathBuf,
        config: AgentConfig,
    ) -> std::io::Result<AgentHandle> {
        Self::spawn_gated(backend, tools, tool_root, config, Gate::headless())
    }

    /// Starts the agent thread; every tool call passes `gate` first.
    pub fn spawn_gated(
        backend: Box<dyn Backend>,
        tools: ToolRegistry,
        tool_root: PathBuf,
        config: AgentConfig,
        gate: Gate,
    ) -> std::io::Result<AgentHandle> {
        let approvals = gate.approvals();
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
            gate,
            config,
            events: event_tx,
            cancel: cancel.clone(),
            busy: busy.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("shepherd-agent".into())
            .spawn(move || {
                agent.init_session();
                agent.warm();
                agent.serve(op_rx);
                agent.session
            })?;
        Ok(AgentHandle {
            ops: Some(op_tx),
            events: event_rx,
            cancel,
            busy,
            thread: Some(thread),
            approvals,
        })
    }

    /// The handle for answering approval requests ([`Event::ApprovalRequired`]).
    pub fn approvals(&self) -> Option<&Approvals> {
        self.approvals.as_ref()
    }

    /// Queues an operation. Returns false when the agent thread is gone.
    pub fn send(&self, op: Op) -> bool {
        self.ops.as_ref().is_some_and(|tx| tx.send(op).is_ok())
    }

    /// The event stream, for front-ends that `select!` over it together with
    /// their own input instead of calling [`AgentHandle::run_message`].
    pub fn events(&self) -> &Receiver<Event> {
        &self.events
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

    /// Runs one user message (its text and any images), handing every event to
    /// `on_event` until the turn's [`Event::Stop`]. A failing handler (a closed
    /// pipe) cancels the turn.
    pub fn run_message(
        &self,
        message: Message,
        mut on_event: impl FnMut(&Event) -> std::io::Result<()>,
    ) -> FinishReason {
        if !self.send(Op::Prompt(message)) {
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
    gate: Gate,
    config: AgentConfig,
    events: Sender<Event>,
    cancel: Arc<AtomicBool>,
    busy: Arc<AtomicBool>,
}

/// The agent's tools: its registry, refreshed before each generation and
/// offered unless tools are off. Every call the model makes is the agent's
/// to run (an unknown name gets the registry's error as its result).
struct AgentToolbox<'a> {
    registry: &'a mut ToolRegistry,
    offered: bool,
}

impl AgentToolbox<'_> {
    fn of<'a>(registry: &'a mut ToolRegistry, config: &AgentConfig) -> AgentToolbox<'a> {
        AgentToolbox {
            registry,
            offered: config.tools_enabled,
        }
    }
}

impl Toolbox for AgentToolbox<'_> {
    fn offer(&mut self) -> Vec<ToolSpec> {
        self.registry.refresh();
        if self.offered {
            self.registry.specs()
        } else {
            Vec::new()
        }
    }

    fn registry(&self) -> &ToolRegistry {
        self.registry
    }
}

impl Agent {
    fn init_session(&mut self) {
        let system = Message::system(self.session.system_prompt.clone());
        self.session.system_tokens = self.backend.count_tokens(&system);
        self.session.total_tokens = u64::from(self.session.system_tokens);
    }

    fn serve(&mut self, ops: Receiver<Op>) {
        for op in ops {
            // Everything but a prompt and a snapshot changes what the next prompt
            // starts with (conversation, system prompt, tools, backend).
            let changes_prompt = !matches!(op, Op::Prompt(_) | Op::Snapshot(_));
            match op {
                Op::Prompt(message) => {
                    self.busy.store(true, Ordering::SeqCst);
                    self.cancel.store(false, Ordering::SeqCst);
                    let reason = self.run_turn(message);
                    self.busy.store(false, Ordering::SeqCst);
                    self.emit(Event::Stop(reason));
                }
                Op::Clear => self.session.clear(),
                Op::Snapshot(reply) => {
                    let _ = reply.send(self.session.clone());
                }
                Op::Restore(session) => self.restore(session),
                Op::SetBackend(backend) => {
                    self.backend = backend;
                    self.recount_tokens();
                }
                Op::Tools(change, reply) => {
                    self.tools.refresh();
                    match change {
                        ToolsOp::List => {}
                        // `/tools disable a,b`: several globs, as the flags take them.
                        ToolsOp::Enable(globs) => {
                            globs.split(',').for_each(|g| self.tools.enable(g.trim()))
                        }
                        ToolsOp::Disable(globs) => {
                            globs.split(',').for_each(|g| self.tools.disable(g.trim()))
                        }
                    }
                    let _ = reply.send(self.tools.names());
                }
                Op::ApplyProfile {
                    system_prompt,
                    tools,
                } => {
                    self.tools.restrict(&tools);
                    self.session.system_prompt = system_prompt;
                    self.recount_tokens();
                }
            }
            if changes_prompt {
                self.warm();
            }
        }
    }

    /// Tells the backend that the session waits for its next message, with the
    /// tools the next request will offer ([`Backend::warm`]).
    fn warm(&mut self) {
        let specs = AgentToolbox::of(&mut self.tools, &self.config).offer();
        self.backend.warm(&self.session, &specs);
    }

    fn emit(&self, event: Event) {
        let _ = self.events.send(event);
    }

    fn restore(&mut self, session: Session) {
        self.session = session;
        self.recount_tokens();
    }

    /// Re-estimates every token count with the current backend's tokenizer or estimator.
    fn recount_tokens(&mut self) {
        let system = Message::system(self.session.system_prompt.clone());
        self.session.system_tokens = self.backend.count_tokens(&system);
        for index in 0..self.session.messages.len() {
            let tokens = self.backend.count_tokens(&self.session.messages[index]);
            self.session.messages[index].tokens = tokens;
        }
        self.session.total_tokens = self.session.estimated_tokens();
    }

    /// Runs one user message through the loop ([`Turn`]) and says how it
    /// finished; a failure is also an [`Event::Error`].
    fn run_turn(&mut self, message: Message) -> FinishReason {
        self.emit(Event::UserPrompt(message.content.clone()));
        turn::push_message(&mut self.session, &*self.backend, message);
        let mut toolbox = AgentToolbox::of(&mut self.tools, &self.config);
        let mut sink = ChannelSink {
            out: &self.events,
            cancel: &self.cancel,
            wrap: Some,
        };
        let outcome = Turn {
            backend: &mut *self.backend,
            session: &mut self.session,
            toolbox: &mut toolbox,
            gate: &mut self.gate,
            tool_ctx: &self.tool_ctx,
            sink: &mut sink,
            config: TurnConfig {
                sampling: &self.config.sampling,
                stream: self.config.stream,
                max_rounds: self.config.max_rounds,
                first_tool_choice: &self.config.first_tool_choice,
            },
        }
        .run();
        match outcome {
            Outcome::Answered(reply) => reply.finish,
            Outcome::RoundCap(_) => FinishReason::Length,
            Outcome::Failed(BackendError::Cancelled) => FinishReason::Cancelled,
            Outcome::Failed(error) => {
                // Upstream error bodies can echo a key or a token back.
                self.emit(Event::Error {
                    kind: error.kind(),
                    message: crate::util::redact::text(&error.to_string()),
                });
                FinishReason::Error
            }
        }
    }
}

#[cfg(test)]
mod tests;

#[cfg(all(test, feature = "tensorrt-testlib"))]
mod tensorrt_tests;

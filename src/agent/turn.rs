//! One prompt's run through the agent loop: generate, gate each call, run it,
//! record the results, generate again, until a reply asks for no tool this
//! turn runs, the round cap is hit, or the turn is cancelled.
//!
//! Two drivers share this code. The agent thread ([`crate::agent`]) keeps its
//! session across prompts, offers its registry and may ask the user about a
//! call. The API server's `--use-tools` workers
//! (`frontend::api_server::pool`) take the conversation a client sent, have
//! no one to ask, and hand calls to the client's own tools back to the
//! client. What differs is a parameter of [`Turn`]: the [`Toolbox`] (what is
//! offered, which calls the turn runs), the [`Gate`] (policy and approver),
//! the [`EventSink`] and the [`TurnConfig`]. Everything else is here once:
//! eviction and one retry on context overflow, recording each reply with its
//! thinking and reasoning artefacts (so Anthropic signatures and Gemini
//! thought signatures go back on the next round), token accounting, the
//! size limit of tool results, the round cap, and a result for every call
//! when the turn is cancelled halfway. A tool result's images (an MCP tool's
//! `image` content, `read_image`) stay images in the session; a backend that
//! reads none ([`Backend::takes_images`] false) is given their summaries in
//! the text instead (`tool_images_as_text`).

use std::sync::atomic::AtomicBool;

use crate::backend::{Backend, GenerateRequest, Reply, Sampling, ToolChoice, Usage};
use crate::core::ToolSpec;
use crate::core::{
    Answer, BackendError, Event, EventSink, FinishReason, Flow, Message, Role, Session, ToolCall,
    ToolResultEvent,
};
use crate::tools::approval::Gate;
use crate::tools::{truncate, ToolContext, ToolOutput, ToolRegistry};
use crate::util::log::{self, Category};

/// Context assumed for truncation when a backend cannot tell its window.
const DEFAULT_CONTEXT_ASSUMED: u64 = 32_768;
/// Conservative characters-per-token ratio for sizing tool output.
const CHARS_PER_TOKEN: u64 = 3;

/// The tools one turn offers and runs.
pub trait Toolbox {
    /// The tools to offer the next generation (asked before each one, so
    /// tools that appear mid-turn, such as an MCP server's, are offered).
    fn offer(&mut self) -> Vec<ToolSpec>;

    /// The registry that runs the calls the turn keeps.
    fn registry(&self) -> &ToolRegistry;

    /// Whether the turn runs `call` itself. A call it does not run ends the
    /// turn and goes back to the driver in [`Outcome::Answered`].
    fn runs(&self, _call: &ToolCall) -> bool {
        true
    }
}

/// The settings of one turn, borrowed from the driver's own config.
#[derive(Debug, Clone, Copy)]
pub struct TurnConfig<'a> {
    pub sampling: &'a Sampling,
    pub stream: bool,
    /// Most generations in the turn.
    pub max_rounds: u32,
    /// `tool_choice` of the first generation; later ones use `Auto`, so a
    /// forced call cannot loop.
    pub first_tool_choice: &'a ToolChoice,
}

/// How a turn ended.
#[derive(Debug)]
pub enum Outcome {
    /// The model's last reply: an answer, a cancelled reply, or calls the turn
    /// does not run (left in `tool_calls`). Its `usage` is the whole turn's.
    Answered(Reply),
    /// `max_rounds` generations all asked for tools; the turn's usage.
    RoundCap(Usage),
    /// A backend error eviction could not cure, or a cancel between tools.
    Failed(BackendError),
}

/// The sink a backend generates into: the turn's own, with the gate to ask
/// when the backend relays another shepherd's approval request.
struct AskingSink<'a> {
    inner: &'a mut dyn EventSink,
    gate: &'a mut Gate,
    cancel: &'a AtomicBool,
}

impl EventSink for AskingSink<'_> {
    fn emit(&mut self, event: Event) -> Flow {
        self.inner.emit(event)
    }

    fn cancelled(&self) -> bool {
        self.inner.cancelled()
    }

    fn approve(&mut self, call: &ToolCall) -> Answer {
        let inner = &mut *self.inner;
        let mut notify = |event: Event| {
            inner.emit(event);
        };
        self.gate.answer_remote(call, &mut notify, self.cancel)
    }
}

/// One turn: the session to extend and everything the loop needs. The last
/// message of `session` is the one to answer (a user prompt or a tool result).
pub struct Turn<'a> {
    pub backend: &'a mut dyn Backend,
    pub session: &'a mut Session,
    pub toolbox: &'a mut dyn Toolbox,
    pub gate: &'a mut Gate,
    pub tool_ctx: &'a ToolContext,
    pub sink: &'a mut dyn EventSink,
    pub config: TurnConfig<'a>,
}

impl Turn<'_> {
    /// Runs the loop to its end.
    pub fn run(mut self) -> Outcome {
        let mut usage = Usage::default();
        for round in 0..self.config.max_rounds {
            let mut reply = match self.generate_with_eviction(round == 0) {
                Ok(reply) => reply,
                Err(error) => return Outcome::Failed(error),
            };
            if let Some(used) = reply.usage {
                usage.prompt_tokens = usage.prompt_tokens.saturating_add(used.prompt_tokens);
                usage.completion_tokens = usage
                    .completion_tokens
                    .saturating_add(used.completion_tokens);
            }
            let (ours, theirs) = self.split_calls(&reply);
            self.record_reply(&reply, &ours);
            reply.usage = Some(usage);
            reply.tool_calls = theirs;
            if ours.is_empty() {
                return Outcome::Answered(reply);
            }
            if !self.run_tools(&ours) {
                return Outcome::Failed(BackendError::Cancelled);
            }
            if !reply.tool_calls.is_empty() {
                return Outcome::Answered(reply);
            }
        }
        self.sink.emit(Event::System(format!(
            "stopped after {} tool rounds (raise --max-rounds to allow more)",
            self.config.max_rounds
        )));
        Outcome::RoundCap(usage)
    }

    /// The calls this turn runs and the ones it hands back. A cancelled reply
    /// runs none, nor does one whose calls end at the length limit: its last call
    /// is one the model did not finish (the finish rule of `backend::ending`).
    fn split_calls(&self, reply: &Reply) -> (Vec<ToolCall>, Vec<ToolCall>) {
        if matches!(reply.finish, FinishReason::Cancelled | FinishReason::Length) {
            return (Vec::new(), reply.tool_calls.clone());
        }
        reply
            .tool_calls
            .iter()
            .cloned()
            .partition(|call| self.toolbox.runs(call))
    }

    /// One generation, with one eviction-and-retry when the context overflows.
    fn generate_with_eviction(&mut self, first_round: bool) -> Result<Reply, BackendError> {
        match self.generate_once(first_round) {
            Err(error @ BackendError::ContextOverflow { .. }) => {
                if self.evict_for(&error) {
                    self.generate_once(first_round)
                } else {
                    Err(error)
                }
            }
            other => other,
        }
    }

    fn generate_once(&mut self, first_round: bool) -> Result<Reply, BackendError> {
        let specs = self.toolbox.offer();
        let choice = if first_round {
            self.config.first_tool_choice.clone()
        } else {
            ToolChoice::Auto
        };
        let request = GenerateRequest {
            tools: &specs,
            tool_choice: &choice,
            sampling: self.config.sampling,
            stream: self.config.stream,
        };
        let first_new = unmeasured_from(self.session);
        let mut sink = AskingSink {
            inner: &mut *self.sink,
            gate: &mut *self.gate,
            cancel: &self.tool_ctx.cancel,
        };
        // Asked only of a session that holds images: the answer can cost a
        // request (Ollama's `/api/show`).
        let holds_images = self.session.messages.iter().any(|m| !m.images.is_empty());
        let text_only = if !holds_images || self.backend.takes_images() {
            None
        } else {
            tool_images_as_text(self.session)
        };
        let session = text_only.as_ref().unwrap_or(&*self.session);
        let reply = self.backend.generate(session, &request, &mut sink)?;
        if let Some(usage) = reply.usage {
            correct_tokens(self.session, usage, first_new);
        }
        Ok(reply)
    }

    /// Evicts enough of the conversation for the failed request to fit. False when impossible.
    fn evict_for(&mut self, error: &BackendError) -> bool {
        count_unmeasured(self.session, &*self.backend);
        let estimated = self.session.estimated_tokens();
        let needed = match (error.tokens_over(), error) {
            (Some(over), BackendError::ContextOverflow { limit, .. }) => {
                over + (self.config.sampling).answer_reserve(limit.unwrap_or(0))
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
        self.sink.emit(Event::System(format!(
            "context full: evicted {count} old messages ({} tokens) and retrying",
            plan.tokens_freed
        )));
        true
    }

    /// Appends the assistant message, with its thinking and artefacts and the
    /// calls the turn runs, unless it is empty.
    fn record_reply(&mut self, reply: &Reply, calls: &[ToolCall]) {
        let mut message = Message::assistant(reply.content.clone());
        message.tool_calls = calls.to_vec();
        if !reply.thinking.is_empty() {
            message.thinking = Some(reply.thinking.clone());
        }
        message.artefacts = reply.artefacts.clone();
        if let Some(usage) = reply.usage {
            message.tokens = u32::try_from(usage.completion_tokens.max(1)).unwrap_or(u32::MAX);
        }
        if !message.content.is_empty() || !message.tool_calls.is_empty() {
            push_message(self.session, &*self.backend, message);
        }
    }

    /// Runs each call in order. Every call gets a result message, even when the
    /// turn is cancelled halfway, so the history stays valid for every provider.
    /// Returns false when cancelled.
    fn run_tools(&mut self, calls: &[ToolCall]) -> bool {
        for call in calls {
            if self.sink.cancelled() {
                let message =
                    Message::tool_result(call, "Cancelled by the user before this tool ran.");
                push_message(self.session, &*self.backend, message);
                continue;
            }
            self.sink.emit(Event::ToolCall(call.clone()));
            let output = self.run_gated(call);
            self.sink.emit(Event::ToolResult(ToolResultEvent {
                id: call.id.clone(),
                name: call.name.clone(),
                success: !output.error,
                summary: output.summary.clone(),
                content: output.text_with_summaries(),
            }));
            let mut message = Message::tool_result(call, output.content);
            message.images = output.images;
            push_message(self.session, &*self.backend, message);
        }
        !self.sink.cancelled()
    }

    /// Runs `call` if the gate lets it, and records it in the audit log.
    /// A tool that does not exist (or is disabled) needs no approval: the
    /// registry answers it with an error and runs nothing.
    fn run_gated(&mut self, call: &ToolCall) -> ToolOutput {
        let limit = self.tool_output_limit_chars();
        let registry = self.toolbox.registry();
        let side_effecting = registry
            .get(&call.name)
            .map(|tool| tool.side_effecting(&call.arguments));
        // Asked at each call that reads a file (a provider switch mid-session
        // changes the answer), and only then: it can cost a request.
        let ctx = &ToolContext {
            takes_images: call.name == "read" && self.backend.takes_images(),
            ..self.tool_ctx.clone()
        };
        let sink = &mut *self.sink;
        let mut notify = |event: Event| {
            sink.emit(event);
        };
        self.gate
            .run(call, side_effecting, &mut notify, &ctx.cancel, || {
                log::debug(Category::Tools, || {
                    format!("run {}({})", call.name, call.arguments)
                });
                truncate::truncate_output(registry.run(call, ctx), limit)
            })
    }

    /// The share of the free context a tool result may take, in characters.
    fn tool_output_limit_chars(&self) -> usize {
        let context = match self.backend.info().context_size {
            0 => DEFAULT_CONTEXT_ASSUMED,
            n => n,
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
            last(Role::User),
            last(Role::Assistant),
        );
        usize::try_from(tokens.saturating_mul(CHARS_PER_TOKEN)).unwrap_or(usize::MAX)
    }
}

/// `session` as a model that reads no images is given it: each tool result's
/// images written as their summaries where they stood. `None` when no tool
/// result carries an image. The session itself keeps the images, so a later
/// switch to a model that reads them shows them again.
fn tool_images_as_text(session: &Session) -> Option<Session> {
    let is_tool_image = |m: &Message| m.role == Role::Tool && !m.images.is_empty();
    if !session.messages.iter().any(is_tool_image) {
        return None;
    }
    let mut view = session.clone();
    view.messages
        .iter_mut()
        .filter(|m| m.role == Role::Tool)
        .for_each(Message::inline_image_summaries);
    Some(view)
}

/// Appends `message`, counting its tokens first when nobody has.
pub fn push_message(session: &mut Session, backend: &dyn Backend, mut message: Message) {
    if message.tokens == 0 {
        message.tokens = backend.count_tokens(&message);
    }
    session.total_tokens += u64::from(message.tokens);
    session.messages.push(message);
}

/// Counts the system prompt and messages nobody counted yet (a conversation
/// an API client sent: counting each up front would cost the in-process
/// model a tokenizer round trip per message on every request, so it waits
/// until an eviction needs the sizes).
fn count_unmeasured(session: &mut Session, backend: &dyn Backend) {
    let mut counted = 0;
    if session.system_tokens == 0 && !session.system_prompt.is_empty() {
        session.system_tokens =
            backend.count_tokens(&Message::system(session.system_prompt.clone()));
        counted += u64::from(session.system_tokens);
    }
    for message in session.messages.iter_mut().filter(|m| m.tokens == 0) {
        message.tokens = backend.count_tokens(message);
        counted += u64::from(message.tokens);
    }
    session.total_tokens += counted;
}

/// Index of the first message whose token count is still an estimate
/// (everything after the last assistant message).
fn unmeasured_from(session: &Session) -> usize {
    session
        .messages
        .iter()
        .rposition(|m| m.role == Role::Assistant)
        .map_or(0, |i| i + 1)
}

/// Replaces estimates with what the provider measured: the prompt tokens not
/// accounted for by earlier messages are shared among the new ones. When an
/// earlier message has no count at all (an API client's conversation), the
/// difference is not the new messages' alone, so the estimates stay.
fn correct_tokens(session: &mut Session, usage: Usage, first_new: usize) {
    let earlier = &session.messages[..first_new];
    let all_counted = earlier.iter().all(|m| m.tokens > 0)
        && (session.system_tokens > 0 || session.system_prompt.is_empty());
    let known: u64 =
        u64::from(session.system_tokens) + earlier.iter().map(|m| u64::from(m.tokens)).sum::<u64>();
    let new = &mut session.messages[first_new..];
    let estimated: u64 = new.iter().map(|m| u64::from(m.tokens)).sum();
    if all_counted && usage.prompt_tokens > known && estimated > 0 {
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

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use serde_json::json;

    use super::*;
    use crate::backend::BackendInfo;
    use crate::core::{Artefact, Flow};

    /// Replays scripted replies and keeps the sessions it was given.
    struct Scripted {
        script: VecDeque<Result<Reply, BackendError>>,
        seen: Vec<Session>,
    }

    impl Backend for Scripted {
        fn info(&self) -> BackendInfo {
            BackendInfo {
                kind: "scripted",
                model: "m".into(),
                context_size: 1000,
                local: false,
            }
        }

        fn generate(
            &mut self,
            session: &Session,
            _request: &GenerateRequest<'_>,
            _sink: &mut dyn EventSink,
        ) -> Result<Reply, BackendError> {
            self.seen.push(session.clone());
            self.script
                .pop_front()
                .unwrap_or_else(|| Err(BackendError::Config("script exhausted".into())))
        }

        fn count_tokens(&self, message: &Message) -> u32 {
            10 + message.content.len() as u32 / 4
        }
    }

    /// Runs `get_time` itself; every other name is the caller's.
    struct TimeOnly(ToolRegistry);

    impl Toolbox for TimeOnly {
        fn offer(&mut self) -> Vec<ToolSpec> {
            self.0.specs()
        }

        fn registry(&self) -> &ToolRegistry {
            &self.0
        }

        fn runs(&self, call: &ToolCall) -> bool {
            call.name == "get_time"
        }
    }

    fn reply(calls: &[(&str, &str)], usage: Option<Usage>) -> Result<Reply, BackendError> {
        Ok(Reply {
            content: String::new(),
            thinking: String::new(),
            tool_calls: calls
                .iter()
                .map(|(id, name)| ToolCall {
                    id: id.to_string(),
                    name: name.to_string(),
                    arguments: json!({}),
                })
                .collect(),
            finish: if calls.is_empty() {
                FinishReason::Stop
            } else {
                FinishReason::ToolCalls
            },
            usage,
            artefacts: Vec::new(),
            stop_sequence: None,
        })
    }

    fn usage(prompt_tokens: u64, completion_tokens: u64) -> Option<Usage> {
        Some(Usage {
            prompt_tokens,
            completion_tokens,
        })
    }

    /// Runs one turn over `session` with no one to ask; returns the outcome,
    /// the sessions the backend saw and the events.
    fn run(
        script: Vec<Result<Reply, BackendError>>,
        session: &mut Session,
        max_rounds: u32,
    ) -> (Outcome, Vec<Session>, Vec<Event>) {
        let mut backend = Scripted {
            script: script.into(),
            seen: Vec::new(),
        };
        let mut toolbox = TimeOnly(ToolRegistry::builtin());
        let mut gate = Gate::headless();
        let ctx = ToolContext::new(std::env::temp_dir());
        let mut events: Vec<Event> = Vec::new();
        let mut sink = |event: Event| {
            events.push(event);
            Flow::Continue
        };
        let outcome = Turn {
            backend: &mut backend,
            session,
            toolbox: &mut toolbox,
            gate: &mut gate,
            tool_ctx: &ctx,
            sink: &mut sink,
            config: TurnConfig {
                sampling: &Sampling::default(),
                stream: true,
                max_rounds,
                first_tool_choice: &ToolChoice::Auto,
            },
        }
        .run();
        (outcome, backend.seen, events)
    }

    fn asked(text: &str) -> Session {
        let mut session = Session::new("sys");
        session.messages.push(Message::user(text));
        session
    }

    #[test]
    fn calls_the_turn_does_not_run_go_back_with_the_whole_turns_usage() {
        let mut session = asked("time, then the client's tool");
        let script = vec![
            reply(&[("t1", "get_time")], usage(50, 5)),
            reply(&[("t2", "get_time"), ("c1", "client_tool")], usage(80, 7)),
        ];
        let (outcome, seen, _) = run(script, &mut session, 10);
        let Outcome::Answered(last) = outcome else {
            panic!("answered expected, got {outcome:?}");
        };
        let names: Vec<&str> = last.tool_calls.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["client_tool"]);
        assert_eq!(last.usage, usage(130, 12));
        assert_eq!(seen.len(), 2);
        // The server's call ran and its result is in the session; the client's was not run.
        let answered: Vec<&str> = session
            .messages
            .iter()
            .filter_map(|m| m.tool_call_id.as_deref())
            .collect();
        assert_eq!(answered, ["t1", "t2"]);
    }

    #[test]
    fn the_next_round_sees_the_replys_thinking_and_artefacts() {
        let mut session = asked("time?");
        let mut first = reply(&[("t1", "get_time")], None).unwrap();
        first.thinking = "let me look".into();
        first.artefacts = vec![Artefact::Thinking {
            origin: "anthropic".into(),
            text: "let me look".into(),
            signature: "sig-1".into(),
        }];
        let (outcome, seen, _) = run(vec![Ok(first.clone()), reply(&[], None)], &mut session, 10);
        assert!(matches!(outcome, Outcome::Answered(_)));
        let assistant = &seen[1].messages[1];
        assert_eq!(assistant.role, Role::Assistant);
        assert_eq!(assistant.thinking.as_deref(), Some("let me look"));
        assert_eq!(assistant.artefacts, first.artefacts);
        assert_eq!(assistant.tool_calls, first.tool_calls);
    }

    #[test]
    fn an_uncounted_conversation_is_counted_then_evicted_on_overflow() {
        // As an API client sends it: no message carries a token count.
        let mut session = Session::new("sys");
        for text in ["old question", "old answer", "new question"] {
            let mut message = Message::user(text);
            if text == "old answer" {
                message.role = Role::Assistant;
            }
            session.messages.push(message);
        }
        let overflow = Err(BackendError::ContextOverflow {
            message: "prompt is too long".into(),
            prompt_tokens: Some(1010),
            limit: Some(1000),
        });
        let (outcome, seen, events) = run(vec![overflow, reply(&[], None)], &mut session, 10);
        assert!(matches!(outcome, Outcome::Answered(_)), "{outcome:?}");
        let contents: Vec<&str> = seen[1]
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(contents, ["new question"]);
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::System(s) if s.contains("evicted 2"))));
    }

    #[test]
    fn the_round_cap_ends_a_looping_turn_with_its_usage() {
        let mut session = asked("loop");
        let script = (0..3)
            .map(|n| reply(&[(&format!("t{n}"), "get_time")], usage(10, 1)))
            .collect();
        let (outcome, seen, events) = run(script, &mut session, 2);
        assert!(
            matches!(outcome, Outcome::RoundCap(u) if u == Usage { prompt_tokens: 20, completion_tokens: 2 }),
            "{outcome:?}"
        );
        assert_eq!(seen.len(), 2);
        assert!(events
            .iter()
            .any(|e| matches!(e, Event::System(s) if s.contains("2 tool rounds"))));
    }
}

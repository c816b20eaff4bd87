//! The one closed event enum that flows from backends and the agent to front-ends.
//!
//! Every wire format is converted into [`Event`] in exactly one place (its
//! backend), and every front-end renders from it. Reasoning and tool calls
//! never travel inside [`Event::Content`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crossbeam_channel::Sender;

use super::error::ErrorKind;
use super::message::ToolCall;

/// Why a generation (or a whole agent turn) ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    Stop,
    Length,
    ToolCalls,
    Cancelled,
    Error,
}

impl FinishReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::Cancelled => "cancelled",
            FinishReason::Error => "error",
        }
    }
}

/// Performance and context figures for one generation. Not a wire shape:
/// the formats that write it have their own (`frontend::stats_line`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stats {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Prompt tokens per second, when the backend can measure it.
    pub prefill_tps: Option<f64>,
    /// Generated tokens per second, when the backend can measure it: over the
    /// decode steps after the first token (which comes from the prompt's own
    /// logits), as llama-server counts it; none for a single token.
    pub decode_tps: Option<f64>,
    /// Tokens the conversation occupies in the context after this generation.
    pub context_used: u64,
    /// The context window size, 0 when unknown.
    pub context_size: u64,
    /// Prompt tokens reused from the KV cache instead of being decoded again
    /// (the in-process model's prefix reuse; 0 for backends that do not say).
    pub cached_tokens: u64,
    /// Tokens speculative decoding drafted, and how many of them the model accepted
    /// (the in-process model; 0 without speculation).
    pub draft_tokens: u64,
    pub draft_accepted: u64,
    /// The provider that answered, when several are configured (`backend::failover`).
    pub provider: Option<String>,
}

/// How far the decode of a request's prompt is ([`Progress::prompt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PromptProgress {
    /// Tokens of the whole prompt.
    pub total: u64,
    /// Of them, those reused from the cache (never decoded).
    pub cached: u64,
    /// Of them, those in the cache now: the reused ones and those decoded so far.
    pub processed: u64,
    /// Since the request took its slot.
    pub elapsed: Duration,
}

/// The in-process model's figures while a request runs, sent only when the
/// request asked ([`crate::backend::Telemetry`]): with `prompt` before the
/// prompt's first batch and after each, and without it before each piece of text.
#[derive(Debug, Clone, PartialEq)]
pub struct Progress {
    pub prompt: Option<PromptProgress>,
    /// The figures so far, as [`Event::Stats`] gives them at the end, except that
    /// `prompt_tokens` counts only the prompt tokens in the cache so far.
    pub stats: Stats,
}

/// One token and its log-probability (natural log) under the model, before any
/// sampling setting changed the odds: what OpenAI's `logprobs` report.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenProb {
    /// The token's id in the model's vocabulary.
    pub id: i32,
    /// The token's text as bytes (a piece of a multi-byte character is not UTF-8).
    pub bytes: Vec<u8>,
    pub logprob: f32,
}

/// A generated token's probability and the likeliest tokens at its place, most
/// likely first ([`Event::Logprobs`]).
#[derive(Debug, Clone, PartialEq)]
pub struct TokenLogprobs {
    pub chosen: TokenProb,
    pub top: Vec<TokenProb>,
}

/// A finished tool run, as shown to front-ends.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolResultEvent {
    pub id: String,
    pub name: String,
    pub success: bool,
    /// One line for display.
    pub summary: String,
    /// The full text handed to the model.
    pub content: String,
}

/// The user's answer to one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    Allow,
    /// Allow, and allow this tool without asking for the rest of the session.
    Always,
    Deny,
}

impl Answer {
    /// `allow`, `always` or `deny` (also `y`, `a`, `n`), as typed or posted.
    pub fn parse(word: &str) -> Option<Answer> {
        match word.trim().to_ascii_lowercase().as_str() {
            "allow" | "y" | "yes" => Some(Answer::Allow),
            "always" | "a" => Some(Answer::Always),
            "deny" | "n" | "no" => Some(Answer::Deny),
            _ => None,
        }
    }

    /// The word `POST /approve/{id}` takes: `allow`, `always` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Allow => "allow",
            Answer::Always => "always",
            Answer::Deny => "deny",
        }
    }
}

/// A tool call waiting for the user's decision. Front-ends answer it through
/// [`crate::tools::approval::Approvals`] with the same `id`; nothing the model or a
/// tool produces can answer it.
#[derive(Debug, Clone, PartialEq)]
pub struct ApprovalRequest {
    pub id: String,
    pub call: ToolCall,
}

/// Everything a front-end can be told.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// Assistant text outside code blocks.
    Content(String),
    /// Reasoning text.
    Thinking(String),
    /// Text inside a fenced code block (fences and language tag stripped).
    CodeBlock(String),
    /// The model asked for a tool.
    ToolCall(ToolCall),
    /// A tool finished.
    ToolResult(ToolResultEvent),
    /// The user's prompt, echoed for observers.
    UserPrompt(String),
    /// A notice from shepherd itself (eviction, retries, provider switches).
    System(String),
    /// Something failed; the turn may still continue (e.g. a retry) or stop.
    Error { kind: ErrorKind, message: String },
    /// The turn is over.
    Stop(FinishReason),
    /// Figures for the generation that just ended.
    Stats(Stats),
    /// A side-effecting tool call waits for the user's approval.
    ApprovalRequired(ApprovalRequest),
    /// The prompt is read and the answer begins: its size in tokens and how many
    /// of them came from the cache (the in-process model says so before its first
    /// token; an API server reports it at the start of an Anthropic stream).
    Prefilled {
        prompt_tokens: u64,
        cached_tokens: u64,
        /// The rendered prompt's text, only when the request asked for it
        /// ([`crate::backend::Telemetry::prompt`]).
        rendered: Option<String>,
    },
    /// How far the request is, only when it asked ([`Progress`]).
    Progress(Progress),
    /// The probabilities of tokens just generated, sent before their text and only
    /// when the request asked for them ([`crate::backend::Sampling::logprobs`]):
    /// they cover every generated token, reasoning and tool-call text included.
    Logprobs(Vec<TokenLogprobs>),
}

/// What a sink tells the producer after each event: the seeds' callback returning `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    Continue,
    Cancel,
}

/// Receives events. Returning [`Flow::Cancel`] asks the producer to stop as soon as it can.
pub trait EventSink {
    fn emit(&mut self, event: Event) -> Flow;

    /// Whether the consumer wants the producer to stop, asked while nothing is
    /// being emitted (e.g. while waiting to retry or while a tool runs).
    fn cancelled(&self) -> bool {
        false
    }

    /// Asks the user's side about a tool call that another shepherd (the
    /// cliserver behind `--backend cli`) waits to run. The agent's sink asks
    /// its gate, as for a local call; a sink with no one to ask refuses.
    /// Sinks that wrap another pass this on.
    fn approve(&mut self, call: &ToolCall) -> Answer {
        let _ = call;
        Answer::Deny
    }
}

impl<F: FnMut(Event) -> Flow> EventSink for F {
    fn emit(&mut self, event: Event) -> Flow {
        self(event)
    }
}

/// Forwards events to another thread over a channel (the agent's to its
/// front-end, an API job's to its connection) and answers with a cancel flag; a
/// receiver that is gone is the same as a cancel.
pub struct ChannelSink<'a, T> {
    pub out: &'a Sender<T>,
    pub cancel: &'a AtomicBool,
    /// What goes on the channel for an event; `None` keeps it off.
    pub wrap: fn(Event) -> Option<T>,
}

impl<T> EventSink for ChannelSink<'_, T> {
    fn emit(&mut self, event: Event) -> Flow {
        if let Some(item) = (self.wrap)(event) {
            if self.out.send(item).is_err() {
                self.cancel.store(true, Ordering::SeqCst);
            }
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

/// A sink that collects events, handy for tests and for non-streaming callers.
impl EventSink for Vec<Event> {
    fn emit(&mut self, event: Event) -> Flow {
        self.push(event);
        Flow::Continue
    }
}

//! `shepherd --cliserver`: one shared, persistent session served over HTTP;
//! prompts come from anywhere, the tools run here, and every observer sees the
//! same typed events live.
//!
//! Threads: the HTTP layer ([`super::http`]) runs one thread per connection;
//! one worker thread (`shepherd-cliserver`) drains a bounded queue of jobs and
//! runs them one at a time through the one [`AgentHandle`], so synchronous,
//! streamed and queued prompts keep their order. Each event of a job is
//! converted to its wire shape once ([`wire_event`], the one place that knows
//! the typed SSE shape), numbered, and handed to the job's own client (for a
//! streamed request) and to every `/updates` observer.
//!
//! Policies:
//! - A slow observer never stalls the agent: each has a bounded buffer, and an
//!   observer that falls that far behind is dropped. It receives an `error`
//!   event saying so and the stream ends; sequence numbers let it see what it
//!   missed, and it can resync with `/session`.
//! - A client that disconnects from a streaming `/request` cancels that
//!   request: the generation stops and tool process groups are killed. A
//!   non-streaming request runs to the end even if its client left.
//! - `POST /cancel` is the emergency stop: it cancels the running request and
//!   empties the queue (queued requests are answered as cancelled).
//! - The shared session survives restarts: it is saved to the session store
//!   (id `cliserver-<port>`) after every completed request and every
//!   `/clear`, and loaded at start unless `--fresh` is given. A saved file
//!   that cannot be read stops the start instead of being overwritten.
//! - The agent management endpoints ([`super::agent_api`]: MCP servers, profiles,
//!   direct tool calls, emergency stop) are mounted too;
//!   their emergency stop also empties the queue.
//!
//! The file is longer than most because the serde twin structs of all seven
//! routes live beside the handlers that fill them.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::{AgentHandle, Op};
use crate::approval::Answer;
use crate::core::{Event, FinishReason, Message, Role, Session, Stats, ToolCall};

use crate::config::resolve::ServerSettings;
use crate::stop::StopGuard;
use crate::store::{Store, StoreError};

use super::access::Access;
use super::agent_api::{self, AgentApi};
use super::http::{Handler, Request, Responder, SseStream};
use super::signals;

/// The CLI server's own settings.
#[derive(Debug, Clone)]
pub struct CliServerConfig {
    pub model: String,
    pub context_size: u64,
    /// Jobs waiting behind the running one; more get `503`.
    pub queue_limit: usize,
    /// Events an observer may fall behind before it is dropped.
    pub observer_buffer: usize,
    /// Longest silence on an SSE stream before a keep-alive comment.
    pub keepalive: Duration,
    /// Where the shared session is saved after each request; `None` keeps it in memory.
    pub persist: Option<Persist>,
}

/// The session file of a CLI server.
#[derive(Debug, Clone)]
pub struct Persist {
    pub store: Store,
    pub id: String,
}

impl Persist {
    /// The default place: the user's store, one session per port.
    pub fn for_port(port: u16) -> Persist {
        Persist {
            store: Store::user(),
            id: format!("cliserver-{port}"),
        }
    }

    fn save(&self, session: &Session) {
        if let Err(error) = self.store.save_session(&self.id, session) {
            eprintln!("shepherd: cannot save the session: {error}");
        }
    }

    /// Loads the saved session into `agent`, unless `fresh`. With `fresh`, a
    /// file that cannot be read is moved aside (kept, never overwritten).
    /// Returns a line for the log, or why the server must not start.
    pub fn restore(
        &self,
        agent: &AgentHandle,
        system_prompt: &str,
        fresh: bool,
    ) -> Result<String, String> {
        let loaded = self.store.load(&self.id);
        match (loaded, fresh) {
            (Ok(saved), false) => {
                let count = saved.session.messages.len();
                agent.send(Op::Restore(saved.into_session(system_prompt)));
                Ok(format!("restored session {} ({count} messages)", self.id))
            }
            (Err(StoreError::NotFound(_)), _) => Ok(format!("new session {}", self.id)),
            (Ok(_), true) => Ok(format!(
                "fresh session {} (replacing the saved one)",
                self.id
            )),
            (Err(error), true) => {
                let path = self.store.path(&self.id).map_err(|e| e.to_string())?;
                let aside =
                    path.with_extension(format!("json.unreadable-{}", crate::store::now_unix()));
                std::fs::rename(&path, &aside)
                    .map_err(|e| format!("{error}; moving it aside failed: {e}"))?;
                Ok(format!(
                    "fresh session {}; the unreadable file is kept as {}",
                    self.id,
                    aside.display()
                ))
            }
            (Err(error), false) => Err(format!(
                "{error}\nstart with --fresh to begin a new session (the file is then kept aside)"
            )),
        }
    }
}

impl CliServerConfig {
    pub fn new(model: String, context_size: u64) -> Self {
        CliServerConfig {
            model,
            context_size,
            queue_limit: 64,
            observer_buffer: 4096,
            keepalive: Duration::from_secs(10),
            persist: None,
        }
    }
}

/// How often a waiting stream checks whether its client is still there.
const TICK: Duration = Duration::from_millis(100);
/// How long `/session` waits for the agent before answering from the cache.
const SNAPSHOT_WAIT: Duration = Duration::from_millis(200);

// ---------------------------------------------------------------------------
// Wire shapes: the one conversion from `core::Event` to the typed SSE events.

/// One event as sent: its sequence number, the request it belongs to, and the event.
#[derive(Serialize)]
struct WireLine<'a> {
    seq: u64,
    request_id: u64,
    #[serde(flatten)]
    event: WireEvent<'a>,
}

#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireEvent<'a> {
    UserPrompt {
        content: &'a str,
    },
    Delta {
        content: &'a str,
    },
    Thinking {
        content: &'a str,
    },
    Codeblock {
        content: &'a str,
    },
    ToolCall {
        name: &'a str,
        args: &'a Value,
        id: &'a str,
    },
    ToolResult {
        name: &'a str,
        id: &'a str,
        success: bool,
        summary: &'a str,
        content: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<&'a str>,
    },
    System {
        content: &'a str,
    },
    Stats(&'a Stats),
    Error {
        message: &'a str,
        error_type: &'a str,
    },
    ResponseComplete {
        finish_reason: &'a str,
    },
    /// Answer with `POST /approve/{id}`.
    ApprovalRequired {
        id: &'a str,
        name: &'a str,
        args: &'a Value,
        tool_call_id: &'a str,
    },
}

/// The typed SSE shape of `event`.
fn wire_event(event: &Event) -> WireEvent<'_> {
    match event {
        Event::UserPrompt(text) => WireEvent::UserPrompt { content: text },
        Event::Content(text) => WireEvent::Delta { content: text },
        Event::Thinking(text) => WireEvent::Thinking { content: text },
        Event::CodeBlock(text) => WireEvent::Codeblock { content: text },
        Event::ToolCall(call) => WireEvent::ToolCall {
            name: &call.name,
            args: &call.arguments,
            id: &call.id,
        },
        Event::ToolResult(r) => WireEvent::ToolResult {
            name: &r.name,
            id: &r.id,
            success: r.success,
            summary: &r.summary,
            content: &r.content,
            error: (!r.success).then_some(r.content.as_str()),
        },
        Event::System(text) => WireEvent::System { content: text },
        Event::Stats(stats) => WireEvent::Stats(stats),
        Event::Error { kind, message } => WireEvent::Error {
            message,
            error_type: kind.as_str(),
        },
        Event::Stop(reason) => WireEvent::ResponseComplete {
            finish_reason: reason.as_str(),
        },
        Event::ApprovalRequired(request) => WireEvent::ApprovalRequired {
            id: &request.id,
            name: &request.call.name,
            args: &request.call.arguments,
            tool_call_id: &request.call.id,
        },
    }
}

/// The first event on `/updates`.
#[derive(Serialize)]
struct Connected {
    #[serde(rename = "type")]
    kind: &'static str,
    client_id: String,
    /// The sequence number of the last event sent before this observer joined.
    seq: u64,
}

// ---------------------------------------------------------------------------
// Broadcasting to observers.

struct Observer {
    tx: Sender<Arc<str>>,
}

#[derive(Default)]
struct HubState {
    seq: u64,
    next_client: u64,
    observers: Vec<Observer>,
}

/// Numbers every event and fans it out to the observers.
struct Hub {
    state: Mutex<HubState>,
    buffer: usize,
}

impl Hub {
    fn new(buffer: usize) -> Hub {
        Hub {
            state: Mutex::new(HubState::default()),
            buffer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new observer: its id, the last sequence number so far, and its feed.
    fn subscribe(&self) -> (u64, u64, Receiver<Arc<str>>) {
        let (tx, rx) = crossbeam_channel::bounded(self.buffer);
        let mut state = self.lock();
        state.next_client += 1;
        state.observers.push(Observer { tx });
        (state.next_client, state.seq, rx)
    }

    /// Numbers and serialises `event` once and sends it to every observer;
    /// returns the line for the request's own client. Numbering and sending
    /// happen under one lock so every observer sees the same order.
    fn publish(&self, request_id: u64, event: &Event) -> Arc<str> {
        let mut state = self.lock();
        state.seq += 1;
        let line = WireLine {
            seq: state.seq,
            request_id,
            event: wire_event(event),
        };
        let line: Arc<str> = serde_json::to_string(&line).unwrap_or_default().into();
        state
            .observers
            .retain(|observer| match observer.tx.try_send(line.clone()) {
                Ok(()) => true,
                // Too slow (see the module docs) or gone: drop it.
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            });
        line
    }

    fn observers(&self) -> usize {
        self.lock().observers.len()
    }
}

// ---------------------------------------------------------------------------
// Jobs.

/// How a job's result goes back to its client.
enum JobReply {
    /// A non-streaming request waits for the outcome.
    Whole(Sender<Outcome>),
    /// A streaming request gets every event line.
    Stream(Sender<Arc<str>>),
    /// An `async` request gets nothing; observers see its events.
    Queued,
}

struct Job {
    id: u64,
    prompt: String,
    cancelled: Arc<AtomicBool>,
    reply: JobReply,
}

/// The end of a non-streaming request.
struct Outcome {
    finish: FinishReason,
    response: String,
    error: Option<String>,
}

/// The running job, for cancelling it.
struct Running {
    id: u64,
    cancelled: Arc<AtomicBool>,
}

/// The server's shared state.
pub struct CliServer {
    agent: AgentHandle,
    jobs: Sender<Job>,
    /// The other end of `jobs`, for `/cancel` to empty the queue.
    pending: Receiver<Job>,
    hub: Hub,
    running: Mutex<Option<Running>>,
    next_id: AtomicU64,
    served: AtomicU64,
    started: Instant,
    /// The session as of the last finished job, for `/session` during a job.
    session: Mutex<Session>,
    config: CliServerConfig,
    /// The agent management endpoints, when mounted.
    api: Option<AgentApi>,
    /// Keeps this server registered with the API's emergency stop.
    stop_guards: Mutex<Vec<StopGuard>>,
}

impl CliServer {
    /// Wraps `agent` and starts the worker thread.
    pub fn start(
        agent: AgentHandle,
        config: CliServerConfig,
        api: Option<AgentApi>,
    ) -> io::Result<Arc<CliServer>> {
        let (jobs, pending) = crossbeam_channel::bounded(config.queue_limit);
        let server = Arc::new(CliServer {
            agent,
            jobs,
            pending: pending.clone(),
            hub: Hub::new(config.observer_buffer),
            running: Mutex::new(None),
            next_id: AtomicU64::new(1),
            served: AtomicU64::new(0),
            started: Instant::now(),
            session: Mutex::new(Session::default()),
            config,
            api,
            stop_guards: Mutex::new(Vec::new()),
        });
        server.connect_api();
        let worker = server.clone();
        std::thread::Builder::new()
            .name("shepherd-cliserver".into())
            .spawn(move || {
                worker.refresh_session();
                for job in pending.iter() {
                    worker.run_job(job);
                }
            })?;
        Ok(server)
    }

    /// Registers with the API's emergency stop and points profile changes at the agent.
    fn connect_api(self: &Arc<Self>) {
        let Some(api) = &self.api else { return };
        let weak = Arc::downgrade(self);
        let guard = api.stops().register(move || {
            if let Some(server) = weak.upgrade() {
                server.stop_everything();
            }
        });
        lock(&self.stop_guards).push(guard);
        let weak = Arc::downgrade(self);
        api.set_profile_hook(Box::new(move |profile, prompt| {
            if let Some(server) = weak.upgrade() {
                server.agent.send(Op::ApplyProfile {
                    system_prompt: prompt.to_string(),
                    tools: profile.tools.clone(),
                });
            }
        }));
    }

    /// Asks the running job to stop (the agent kills tool process groups).
    pub fn cancel_running(&self) -> bool {
        let running = lock(&self.running);
        if let Some(job) = running.as_ref() {
            job.cancelled.store(true, Ordering::SeqCst);
        }
        self.agent.cancel();
        running.is_some()
    }

    /// Whether a job is running.
    pub fn busy(&self) -> bool {
        lock(&self.running).is_some()
    }

    fn run_job(&self, job: Job) {
        if job.cancelled.load(Ordering::SeqCst) {
            return self.answer_cancelled(job);
        }
        *lock(&self.running) = Some(Running {
            id: job.id,
            cancelled: job.cancelled.clone(),
        });
        let mut error = None;
        let finish = self.agent.run_prompt(job.prompt.clone(), |event| {
            // A cancel that raced with the start of the turn is applied here.
            if job.cancelled.load(Ordering::SeqCst) {
                self.agent.cancel();
            }
            if let Event::Error { message, .. } = event {
                error = Some(message.clone());
            }
            let line = self.hub.publish(job.id, event);
            match &job.reply {
                // The streaming client is gone: `run_prompt` cancels the turn.
                JobReply::Stream(tx) => tx.send(line).map_err(|_| io::ErrorKind::BrokenPipe)?,
                JobReply::Whole(_) | JobReply::Queued => {}
            }
            Ok(())
        });
        *lock(&self.running) = None;
        self.served.fetch_add(1, Ordering::SeqCst);
        let session = self.refresh_session();
        if let Some(persist) = &self.config.persist {
            persist.save(&session);
        }
        if let JobReply::Whole(tx) = job.reply {
            let _ = tx.send(Outcome {
                finish,
                response: last_answer(&session),
                error,
            });
        }
    }

    /// Answers a job that was cancelled before it ran.
    fn answer_cancelled(&self, job: Job) {
        let line = self
            .hub
            .publish(job.id, &Event::Stop(FinishReason::Cancelled));
        match job.reply {
            JobReply::Whole(tx) => {
                let _ = tx.send(Outcome {
                    finish: FinishReason::Cancelled,
                    response: String::new(),
                    error: Some("cancelled before it ran".into()),
                });
            }
            JobReply::Stream(tx) => {
                let _ = tx.send(line);
            }
            JobReply::Queued => {}
        }
    }

    /// Takes a fresh snapshot when the agent answers quickly; the cache otherwise.
    fn refresh_session(&self) -> Session {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.agent.send(Op::Snapshot(tx)) {
            if let Ok(session) = rx.recv_timeout(SNAPSHOT_WAIT) {
                *lock(&self.session) = session.clone();
                return session;
            }
        }
        lock(&self.session).clone()
    }

    /// Queues a job; `None` when the queue is full.
    fn enqueue(&self, prompt: String, reply: JobReply) -> Option<(u64, Arc<AtomicBool>)> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let cancelled = Arc::new(AtomicBool::new(false));
        let job = Job {
            id,
            prompt,
            cancelled: cancelled.clone(),
            reply,
        };
        self.jobs.try_send(job).ok()?;
        Some((id, cancelled))
    }

    /// Cancels one job, queued or running.
    fn cancel_job(&self, id: u64, cancelled: &AtomicBool) {
        cancelled.store(true, Ordering::SeqCst);
        if lock(&self.running).as_ref().is_some_and(|r| r.id == id) {
            self.agent.cancel();
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// The last assistant text of the last turn.
fn last_answer(session: &Session) -> String {
    let turn_start = session
        .messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(0);
    session.messages[turn_start..]
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.content.is_empty())
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------
// Routes.

impl Handler for CliServer {
    fn handle(&self, request: Request, responder: Responder) {
        match (request.method.as_str(), request.path.as_str()) {
            ("GET", "/health") => responder.json(200, &Health::ok()),
            ("GET", "/status") => responder.json(200, &self.status()),
            ("GET", "/session") => {
                responder.json(200, &session_body(&self.refresh_session(), &self.config))
            }
            ("POST", "/clear") => self.clear(responder),
            ("POST", "/cancel") => self.emergency_stop(responder),
            ("POST", "/request") => self.request(&request, responder),
            ("GET", "/updates") => self.updates(&request, responder),
            ("POST", path) if path.starts_with("/approve/") => {
                self.approve(&request, &path["/approve/".len()..], responder)
            }
            (_, path) if path.starts_with("/approve/") => {
                responder.error(405, "method not allowed")
            }
            (
                _,
                "/health" | "/status" | "/session" | "/clear" | "/cancel" | "/request" | "/updates",
            ) => responder.error(405, "method not allowed"),
            _ => {
                let unrouted = match &self.api {
                    Some(api) => agent_api::route(&request, responder, api),
                    None => Some(responder),
                };
                if let Some(responder) = unrouted {
                    responder.error(404, "no such route");
                }
            }
        }
    }
}

#[derive(Serialize)]
struct Health {
    status: &'static str,
    server_type: &'static str,
}

impl Health {
    fn ok() -> Health {
        Health {
            status: "ok",
            server_type: "cliserver",
        }
    }
}

#[derive(Serialize)]
struct StatusBody<'a> {
    status: &'static str,
    server_type: &'static str,
    model: &'a str,
    context_size: u64,
    uptime_seconds: u64,
    processing: bool,
    queue_depth: usize,
    requests_served: u64,
    observers: usize,
    pid: u32,
    /// Each MCP server: state (starting, ready, restarting, failed), tool count.
    mcp_servers: Vec<crate::mcp::ServerStatus>,
}

#[derive(Serialize)]
struct SessionBody<'a> {
    success: bool,
    model: &'a str,
    context_size: u64,
    total_tokens: u64,
    system_tokens: u32,
    system_message: &'a str,
    messages: Vec<SessionMessage<'a>>,
}

#[derive(Serialize)]
struct SessionMessage<'a> {
    role: &'static str,
    content: &'a str,
    tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    thinking: Option<&'a str>,
}

#[derive(Serialize)]
struct WireToolCall<'a> {
    id: &'a str,
    name: &'a str,
    args: &'a Value,
}

fn session_body<'a>(session: &'a Session, config: &'a CliServerConfig) -> SessionBody<'a> {
    SessionBody {
        success: true,
        model: &config.model,
        context_size: config.context_size,
        total_tokens: session.total_tokens,
        system_tokens: session.system_tokens,
        system_message: &session.system_prompt,
        messages: session.messages.iter().map(session_message).collect(),
    }
}

fn session_message(message: &Message) -> SessionMessage<'_> {
    SessionMessage {
        role: message.role.as_str(),
        content: &message.content,
        tokens: message.tokens,
        tool_name: message.tool_name.as_deref(),
        tool_call_id: message.tool_call_id.as_deref(),
        tool_calls: message.tool_calls.iter().map(wire_tool_call).collect(),
        thinking: message.thinking.as_deref(),
    }
}

fn wire_tool_call(call: &ToolCall) -> WireToolCall<'_> {
    WireToolCall {
        id: &call.id,
        name: &call.name,
        args: &call.arguments,
    }
}

/// `POST /request`'s body.
/// Other fields clients send (`max_tokens`, `memory`) are accepted and not
/// applied yet: a per-request length needs a per-prompt sampling override in
/// the agent.
#[derive(Deserialize)]
struct PromptBody {
    prompt: Option<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default, rename = "async")]
    queue: bool,
}

/// Reads the prompt: a JSON body, or (for non-JSON content types) the body
/// itself when it is not a JSON object.
fn parse_prompt(request: &Request) -> Result<PromptBody, String> {
    let text = std::str::from_utf8(&request.body).map_err(|_| "body is not UTF-8".to_string())?;
    let is_json = request
        .header("content-type")
        .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
    let looks_like_object = text.trim_start().starts_with('{');
    let body = if is_json || looks_like_object {
        serde_json::from_str::<PromptBody>(text).map_err(|e| format!("invalid JSON body: {e}"))?
    } else {
        PromptBody {
            prompt: Some(text.to_string()),
            stream: false,
            queue: false,
        }
    };
    match &body.prompt {
        Some(prompt) if !prompt.trim().is_empty() => Ok(body),
        _ => Err("missing prompt".into()),
    }
}

#[derive(Serialize)]
struct QueuedBody {
    success: bool,
    queued: bool,
    queue_position: usize,
    request_id: u64,
}

#[derive(Serialize)]
struct WholeBody<'a> {
    success: bool,
    response: &'a str,
    finish_reason: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

#[derive(Serialize)]
struct ClearBody {
    success: bool,
    message: &'static str,
}

/// `POST /approve/{id}`'s body.
#[derive(Deserialize)]
struct ApproveBody {
    decision: String,
}

#[derive(Serialize)]
struct ApprovedBody<'a> {
    success: bool,
    id: &'a str,
    decision: &'a str,
}

#[derive(Serialize)]
struct CancelBody {
    success: bool,
    cancelled_running: bool,
    dropped_queued: usize,
}

impl CliServer {
    fn status(&self) -> StatusBody<'_> {
        StatusBody {
            status: "ok",
            server_type: "cliserver",
            model: &self.config.model,
            context_size: self.config.context_size,
            uptime_seconds: self.started.elapsed().as_secs(),
            processing: self.busy(),
            queue_depth: self.pending.len(),
            requests_served: self.served.load(Ordering::SeqCst),
            observers: self.hub.observers(),
            pid: std::process::id(),
            mcp_servers: crate::mcp::statuses(),
        }
    }

    fn clear(&self, responder: Responder) {
        self.agent.send(Op::Clear);
        lock(&self.session).clear();
        if let Some(persist) = &self.config.persist {
            persist.save(&lock(&self.session));
        }
        self.hub
            .publish(0, &Event::System("session cleared".into()));
        responder.json(
            200,
            &ClearBody {
                success: true,
                message: "session cleared",
            },
        );
    }

    /// Answers a pending `approval_required` event; an id nobody waits on
    /// (never sent, answered, or timed out) gets `404`.
    fn approve(&self, request: &Request, id: &str, responder: Responder) {
        let body = match serde_json::from_slice::<ApproveBody>(&request.body) {
            Ok(body) => body,
            Err(error) => {
                return responder.error(
                    400,
                    &format!(
                    "invalid JSON body: {error}; expected {{\"decision\": \"allow\" or \"deny\"}}"
                ),
                )
            }
        };
        let answer = match body.decision.as_str() {
            "allow" => Answer::Allow,
            "always" => Answer::Always,
            "deny" => Answer::Deny,
            other => {
                return responder.error(
                    400,
                    &format!(
                        "unknown decision '{other}'; expected \"allow\", \"always\" or \"deny\""
                    ),
                )
            }
        };
        let answered = self
            .agent
            .approvals()
            .is_some_and(|approvals| approvals.answer(id, answer).is_ok());
        if !answered {
            return responder.error(404, "no approval with this id is pending");
        }
        responder.json(
            200,
            &ApprovedBody {
                success: true,
                id,
                decision: &body.decision,
            },
        );
    }

    /// Cancels the running request and answers every queued one as cancelled.
    fn stop_everything(&self) -> (bool, usize) {
        let cancelled_running = self.cancel_running();
        let mut dropped_queued = 0;
        while let Ok(job) = self.pending.try_recv() {
            dropped_queued += 1;
            self.answer_cancelled(job);
        }
        (cancelled_running, dropped_queued)
    }

    fn emergency_stop(&self, responder: Responder) {
        let (cancelled_running, dropped_queued) = self.stop_everything();
        responder.json(
            200,
            &CancelBody {
                success: true,
                cancelled_running,
                dropped_queued,
            },
        );
    }

    fn request(&self, request: &Request, responder: Responder) {
        let body = match parse_prompt(request) {
            Ok(body) => body,
            Err(message) => return responder.error(400, &message),
        };
        let prompt = body.prompt.unwrap_or_default();
        if body.stream {
            let (tx, rx) = crossbeam_channel::unbounded();
            match self.enqueue(prompt, JobReply::Stream(tx)) {
                Some((id, cancelled)) => self.stream_job(responder, id, &cancelled, &rx),
                None => queue_full(responder),
            }
        } else if body.queue {
            match self.enqueue(prompt, JobReply::Queued) {
                Some((request_id, _)) => responder.json(
                    200,
                    &QueuedBody {
                        success: true,
                        queued: true,
                        queue_position: self.pending.len(),
                        request_id,
                    },
                ),
                None => queue_full(responder),
            }
        } else {
            let (tx, rx) = crossbeam_channel::bounded(1);
            match self.enqueue(prompt, JobReply::Whole(tx)) {
                Some(_) => answer_whole(responder, rx.recv().ok()),
                None => queue_full(responder),
            }
        }
    }

    /// Relays a streaming job's events; a client that leaves cancels the job.
    fn stream_job(
        &self,
        responder: Responder,
        id: u64,
        cancelled: &AtomicBool,
        rx: &Receiver<Arc<str>>,
    ) {
        let Ok(mut sse) = responder.sse() else {
            return self.cancel_job(id, cancelled);
        };
        if relay(&mut sse, rx, self.config.keepalive).is_err() {
            return self.cancel_job(id, cancelled);
        }
        sse.finish();
    }

    /// `GET /updates`: every event of every request, until the client leaves.
    fn updates(&self, request: &Request, responder: Responder) {
        let (client, seq, rx) = self.hub.subscribe();
        let client_id = request
            .header("x-client-id")
            .map(|id| id.chars().filter(|c| !c.is_control()).take(64).collect())
            .unwrap_or_else(|| format!("{}#{client}", request.peer.ip()));
        let Ok(mut sse) = responder.sse() else { return };
        let connected = Connected {
            kind: "connected",
            client_id,
            seq,
        };
        let line = serde_json::to_string(&connected).unwrap_or_default();
        if sse.send(&line).is_err() || relay(&mut sse, &rx, self.config.keepalive).is_err() {
            return;
        }
        // The hub dropped this observer for falling behind.
        let _ = sse.send(&dropped_line());
        sse.finish();
    }
}

#[derive(Serialize)]
struct DroppedEvent {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'static str,
    error_type: &'static str,
}

fn dropped_line() -> String {
    let event = DroppedEvent {
        kind: "error",
        message: "this observer fell too far behind and was dropped; reconnect and reload /session",
        error_type: "observer_dropped",
    };
    serde_json::to_string(&event).unwrap_or_default()
}

/// Writes lines from `rx` until its sender is gone (`Ok`) or the client is (`Err`).
fn relay(sse: &mut SseStream, rx: &Receiver<Arc<str>>, keepalive: Duration) -> io::Result<()> {
    loop {
        match rx.recv_timeout(TICK) {
            Ok(line) => sse.send(&line)?,
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
            Err(RecvTimeoutError::Timeout) => {
                if sse.client_gone() {
                    return Err(io::ErrorKind::BrokenPipe.into());
                }
                if sse.idle() >= keepalive {
                    sse.comment("keepalive")?;
                }
            }
        }
    }
}

fn queue_full(responder: Responder) {
    responder.error_with(
        503,
        "the request queue is full; retry later",
        &[("Retry-After", "5".into())],
    );
}

fn answer_whole(responder: Responder, outcome: Option<Outcome>) {
    let Some(outcome) = outcome else {
        return responder.error(500, "the agent stopped");
    };
    let body = WholeBody {
        success: outcome.finish != FinishReason::Error && outcome.finish != FinishReason::Cancelled,
        response: &outcome.response,
        finish_reason: outcome.finish.as_str(),
        error: outcome.error.as_deref(),
    };
    let status = if outcome.finish == FinishReason::Error {
        500
    } else {
        200
    };
    responder.json(status, &body);
}

// ---------------------------------------------------------------------------
// Start-up.

/// Serves until the process is stopped. Returns the exit code.
pub fn run(
    server: &ServerSettings,
    access: &Access,
    agent: AgentHandle,
    config: CliServerConfig,
    api: Option<AgentApi>,
) -> i32 {
    let listener = match access.bind(server) {
        Ok(listener) => listener,
        Err(code) => return code,
    };
    let cli = match CliServer::start(agent, config, api) {
        Ok(cli) => cli,
        Err(error) => {
            eprintln!("shepherd: cannot start the cliserver worker: {error}");
            return 1;
        }
    };
    let (busy, cancel) = (cli.clone(), cli.clone());
    signals::watch(signals::Watch::server(
        Box::new(move || busy.busy()),
        Box::new(move || {
            cancel.cancel_running();
        }),
    ));
    match listener.local_addr() {
        Ok(addr) => access.announce(addr, &format!("cliserver listening on http://{addr}")),
        Err(error) => eprintln!("shepherd: cliserver listening (address unknown: {error})"),
    }
    listener.run(cli);
    0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::error::ErrorKind;
    use crate::core::ToolResultEvent;
    use serde_json::json;

    fn line(event: &Event) -> Value {
        let hub = Hub::new(4);
        serde_json::from_str(&hub.publish(7, event)).unwrap()
    }

    #[test]
    fn every_event_has_its_typed_shape() {
        let call = ToolCall {
            id: "c1".into(),
            name: "bash".into(),
            arguments: json!({"command": "ls"}),
        };
        let failed = ToolResultEvent {
            id: "c1".into(),
            name: "bash".into(),
            success: false,
            summary: "exit 1".into(),
            content: "boom".into(),
        };
        let cases = [
            (
                Event::Content("hi".into()),
                json!({"type": "delta", "content": "hi"}),
            ),
            (
                Event::Thinking("hm".into()),
                json!({"type": "thinking", "content": "hm"}),
            ),
            (
                Event::CodeBlock("x".into()),
                json!({"type": "codeblock", "content": "x"}),
            ),
            (
                Event::ToolCall(call),
                json!({"type": "tool_call", "name": "bash", "args": {"command": "ls"}, "id": "c1"}),
            ),
            (
                Event::ToolResult(failed),
                json!({"type": "tool_result", "name": "bash", "id": "c1", "success": false,
                       "summary": "exit 1", "content": "boom", "error": "boom"}),
            ),
            (
                Event::Error {
                    kind: ErrorKind::Http,
                    message: "bad".into(),
                },
                json!({"type": "error", "message": "bad", "error_type": "http_error"}),
            ),
            (
                Event::Stop(FinishReason::ToolCalls),
                json!({"type": "response_complete", "finish_reason": "tool_calls"}),
            ),
        ];
        for (event, expected) in cases {
            let mut got = line(&event);
            assert_eq!(got["seq"], 1);
            assert_eq!(got["request_id"], 7);
            let object = got.as_object_mut().unwrap();
            object.remove("seq");
            object.remove("request_id");
            assert_eq!(got, expected);
        }
        let stats = line(&Event::Stats(Stats {
            prompt_tokens: 3,
            ..Stats::default()
        }));
        assert_eq!(
            (stats["type"].clone(), stats["prompt_tokens"].clone()),
            (json!("stats"), json!(3))
        );
    }

    #[test]
    fn a_slow_observer_is_dropped_and_others_keep_every_event() {
        let hub = Hub::new(2);
        let (_, _, slow) = hub.subscribe();
        let (_, _, fast) = hub.subscribe();
        let mut seen = Vec::new();
        for n in 0..5 {
            hub.publish(1, &Event::Content(n.to_string()));
            seen.push(fast.recv().unwrap());
        }
        assert_eq!(hub.observers(), 1);
        let seqs: Vec<u64> = seen
            .iter()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["seq"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5]);
        assert_eq!(
            slow.iter().count(),
            2,
            "the slow one got its buffer, then the end"
        );
    }

    fn post(body: &str, content_type: Option<&str>) -> Request {
        let mut headers = Vec::new();
        if let Some(t) = content_type {
            headers.push(("Content-Type".to_string(), t.to_string()));
        }
        Request {
            method: "POST".into(),
            path: "/request".into(),
            headers,
            body: body.as_bytes().to_vec(),
            peer: "127.0.0.1:1".parse().unwrap(),
        }
    }

    #[test]
    fn prompt_bodies() {
        let ok =
            |body, t| parse_prompt(&post(body, t)).map(|b| (b.prompt.unwrap(), b.stream, b.queue));
        assert_eq!(
            ok("just text", None),
            Ok(("just text".into(), false, false))
        );
        assert_eq!(
            ok(r#"{"prompt":"p","stream":true}"#, None),
            Ok(("p".into(), true, false))
        );
        assert_eq!(
            ok(r#"{"prompt":"p","async":true}"#, Some("application/json")),
            Ok(("p".into(), false, true))
        );
        let err = |body, t| parse_prompt(&post(body, t)).err().unwrap();
        assert!(err("{broken", Some("application/json")).starts_with("invalid JSON"));
        assert!(err("not json", Some("application/json")).starts_with("invalid JSON"));
        assert!(err(r#"{"prompt": 5}"#, None).starts_with("invalid JSON"));
        assert_eq!(err(r#"{"stream": true}"#, None), "missing prompt");
        assert_eq!(err("   ", None), "missing prompt");
    }

    #[test]
    fn last_answer_is_the_final_assistant_text_of_the_turn() {
        let mut session = Session::new("s");
        session.messages = vec![
            Message::user("old"),
            Message::assistant("old answer"),
            Message::user("new"),
            Message::assistant("looking"),
            Message::assistant("found it"),
        ];
        assert_eq!(last_answer(&session), "found it");
        session.messages.truncate(3);
        assert_eq!(last_answer(&session), "");
    }
}

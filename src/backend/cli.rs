//! The `cli` backend: this shepherd becomes a thin front-end for a remote
//! `shepherd --cliserver`, where the model is called and the tools run.
//!
//! A dedicated listener thread (`shepherd-cli-listen`) keeps a `GET /updates`
//! stream open, reconnecting with backoff, and passes every typed event it
//! decodes (through the one SSE decoder, [`crate::stream::sse`]) over a
//! channel. [`CliBackend::generate`] queues the prompt with
//! `POST /request {"async": true}` (its images as data URLs in `images`,
//! docs/CLISERVER.md), then turns the events of that request id
//! back into [`Event`]s for the sink until `response_complete`. The reply
//! never carries tool calls: they already ran on the server, and their
//! `tool_call`/`tool_result` events were shown as they happened.
//!
//! A local `/clear` (the agent's session starting over) is forwarded as
//! `POST /clear` before the next prompt; a local cancel is forwarded as
//! `POST /cancel`. A server's `approval_required` is asked of the local user
//! through the sink ([`EventSink::approve`]: the agent's gate, so the REPL,
//! TUI and `--json` ask as for a local call and `-e` refuses), and the answer
//! goes back as `POST /approve/{id}`. This module owns its wire structs: the server's shape is
//! defined in `frontend::cli_server`, and the two are kept in step by the
//! end-to-end tests.

mod wire;

use std::io::{self, BufReader};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender, TrySendError};
use serde::Serialize;

use super::estimate::TokenEstimator;
use super::http::{self, Limits};
use super::{Backend, BackendInfo, GenerateRequest, Reply, Usage};
use crate::core::{
    BackendError, Event, EventSink, FinishReason, Flow, Message, Role, Session, ToolCall,
};
use crate::stream::sse::SseDecoder;
use wire::{
    finish_from, to_event, ApproveBody, Empty, PromptBody, QueuedBody, WireEvent, WireLine,
};

/// Where the server is and how to reach it.
#[derive(Debug, Clone)]
pub struct CliConfig {
    pub base_url: String,
    pub api_key: Option<String>,
    /// Shown as the model name; the server decides the real one.
    pub model: String,
    /// Connect and per-read limits; the longest silence tolerated while a
    /// request runs is `per_read` (the server sends keep-alives every 10 s).
    pub limits: Limits,
}

/// Events the listener may hold while nobody is generating; more are dropped
/// (they belong to other clients' requests, which this front-end does not show).
const FEED_CAPACITY: usize = 8192;
/// How long `generate` waits for the listener's first connection.
const CONNECT_WAIT: Duration = Duration::from_secs(10);
/// How often `generate` looks at the sink's cancel flag while waiting.
const TICK: Duration = Duration::from_millis(100);
/// How long to wait for the server to confirm a cancel.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

pub struct CliBackend {
    config: CliConfig,
    agent: ureq::Agent,
    feed: Option<Receiver<Feed>>,
    /// The next sequence number expected on `/updates`, to notice gaps.
    next_seq: Option<u64>,
    turns: u64,
    estimator: TokenEstimator,
}

impl CliBackend {
    pub fn new(config: CliConfig) -> Self {
        let agent = http::build_agent(&config.base_url, &config.limits);
        CliBackend {
            config,
            agent,
            feed: None,
            next_seq: None,
            turns: 0,
            estimator: TokenEstimator::default(),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.config.base_url.trim_end_matches('/'))
    }

    /// The configured key, else the token this user's own server on that
    /// loopback port published (read per request: a restarted server has a new one).
    fn key(&self) -> Option<String> {
        server_key(self.config.api_key.as_deref(), &self.config.base_url)
    }

    /// Starts the listener on first use and waits for its first connection.
    fn ensure_feed(&mut self) -> Result<(), BackendError> {
        if self.feed.is_some() {
            return Ok(());
        }
        let feed = spawn_listener(
            self.url("/updates"),
            self.config.api_key.clone(),
            self.config.base_url.clone(),
        )
        .map_err(|e| BackendError::Config(format!("cannot start the listener thread: {e}")))?;
        let end = Instant::now() + CONNECT_WAIT;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match feed.recv_timeout(left) {
                Ok(Feed::Connected(seq)) => {
                    self.next_seq = Some(seq + 1);
                    self.feed = Some(feed);
                    return Ok(());
                }
                Ok(Feed::Failed(error)) => return Err(error),
                Ok(Feed::Line(_)) => {}
                Err(_) => {
                    return Err(BackendError::Connect(format!(
                        "{}: no answer on /updates",
                        self.config.base_url
                    )))
                }
            }
        }
    }

    fn post(&self, path: &str, body: &impl Serialize) -> Result<String, BackendError> {
        let url = self.url(path);
        let bytes = super::http::encode(body)?;
        let mut builder = self
            .agent
            .post(&url)
            .header("Content-Type", "application/json");
        if let Some(key) = self.key() {
            builder = builder.header("Authorization", format!("Bearer {key}"));
        }
        let response = builder
            .send(&bytes[..])
            .map_err(|e| http::transport_error(e, &url))?;
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| http::parse_retry_after(v, std::time::SystemTime::now()));
        let text = response
            .into_body()
            .read_to_string()
            .map_err(|e| http::transport_error(e, &url))?;
        if !(200..300).contains(&status) {
            return Err(http::error_from_body(status, &text, retry_after));
        }
        Ok(text)
    }

    fn queue_prompt(&self, message: &Message) -> Result<u64, BackendError> {
        let text = self.post(
            "/request",
            &PromptBody {
                prompt: &message.content,
                images: message
                    .images
                    .iter()
                    .map(|part| part.image.data_url())
                    .collect(),
                queue: true,
            },
        )?;
        let queued: QueuedBody = serde_json::from_str(&text)
            .map_err(|e| BackendError::Protocol(format!("unexpected /request answer: {e}")))?;
        Ok(queued.request_id)
    }

    /// Follows request `id` on the feed until it completes.
    /// Asks the local user's side (the agent's gate, through `sink`) about a
    /// call the server waits to run, and posts the answer to `/approve/{id}`.
    fn answer_approval(&self, id: &str, call: &ToolCall, sink: &mut dyn EventSink) {
        let answer = sink.approve(call);
        let body = ApproveBody {
            decision: answer.as_str(),
        };
        if let Err(error) = self.post(&format!("/approve/{id}"), &body) {
            // Someone else (another client, the chat page) may have answered first.
            sink.emit(Event::System(format!(
                "could not answer the server's approval of '{}': {error}",
                call.name
            )));
        }
    }

    fn follow(&mut self, id: u64, sink: &mut dyn EventSink) -> Result<Reply, BackendError> {
        let mut turn = TurnText::default();
        let mut cancel_sent: Option<Instant> = None;
        let mut silent = Duration::ZERO;
        loop {
            if cancel_sent.is_none() && sink.cancelled() {
                cancel_sent = Some(self.send_cancel());
            }
            if cancel_sent.is_some_and(|at| at.elapsed() > CANCEL_WAIT) {
                return Ok(turn.reply(FinishReason::Cancelled));
            }
            let Some(feed) = self.feed.clone() else {
                return Err(BackendError::Protocol("the listener is gone".into()));
            };
            let line = match feed.recv_timeout(TICK) {
                Ok(Feed::Line(line)) => line,
                Ok(Feed::Connected(seq)) => {
                    self.next_seq = Some(seq + 1);
                    sink.emit(Event::System(
                        "reconnected to the cliserver; events sent meanwhile were missed".into(),
                    ));
                    continue;
                }
                Ok(Feed::Failed(error)) => {
                    sink.emit(Event::System(format!(
                        "lost the cliserver's event stream ({error}); reconnecting"
                    )));
                    continue;
                }
                Err(RecvTimeoutError::Timeout) => {
                    silent += TICK;
                    if silent > self.config.limits.per_read {
                        return Err(BackendError::Timeout(format!(
                            "{}: no event for {:?}",
                            self.config.base_url, self.config.limits.per_read
                        )));
                    }
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(BackendError::Protocol("the listener stopped".into()))
                }
            };
            silent = Duration::ZERO;
            self.check_gap(line.seq, sink);
            if line.request_id != Some(id) {
                continue;
            }
            match line.event {
                WireEvent::ResponseComplete { finish_reason } => {
                    return Ok(turn.reply(finish_from(&finish_reason)))
                }
                WireEvent::ApprovalRequired {
                    id,
                    name,
                    args,
                    tool_call_id,
                } => {
                    let call = ToolCall {
                        id: tool_call_id,
                        name,
                        arguments: args,
                    };
                    self.answer_approval(&id, &call, sink);
                    continue;
                }
                _ => {}
            }
            let Some(event) = to_event(line.event) else {
                continue;
            };
            turn.note(&event);
            self.check_cap(&turn)?;
            if sink.emit(event) == Flow::Cancel && cancel_sent.is_none() {
                cancel_sent = Some(self.send_cancel());
            }
        }
    }

    /// Stops the server's turn once the reply passed its cap.
    fn check_cap(&self, turn: &TurnText) -> Result<(), BackendError> {
        let cap = self.config.limits.reply_bytes;
        if turn.bytes() <= cap {
            return Ok(());
        }
        self.send_cancel();
        Err(http::too_large("the reply", cap))
    }

    fn send_cancel(&self) -> Instant {
        let _ = self.post("/cancel", &Empty {});
        Instant::now()
    }

    fn check_gap(&mut self, seq: Option<u64>, sink: &mut dyn EventSink) {
        let Some(seq) = seq else { return };
        if let Some(expected) = self.next_seq {
            if seq > expected {
                sink.emit(Event::System(format!(
                    "missed {} events from the cliserver",
                    seq - expected
                )));
            }
        }
        self.next_seq = Some(seq + 1);
    }

    /// Drops what arrived while idle (other clients' requests), keeping the numbering.
    fn drain_idle(&mut self) {
        let Some(feed) = self.feed.clone() else {
            return;
        };
        while let Ok(message) = feed.try_recv() {
            match message {
                Feed::Line(line) => self.next_seq = line.seq.map(|s| s + 1).or(self.next_seq),
                Feed::Connected(seq) => self.next_seq = Some(seq + 1),
                Feed::Failed(_) => {}
            }
        }
    }
}

impl Backend for CliBackend {
    fn info(&self) -> BackendInfo {
        BackendInfo {
            kind: "cli",
            model: self.config.model.clone(),
            context_size: 0,
            local: false,
        }
    }

    /// The server's model decides: images are sent on, and a server whose
    /// model takes none answers that itself.
    fn takes_images(&self) -> bool {
        true
    }

    fn generate(
        &mut self,
        session: &Session,
        _request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let prompt = match session.messages.last() {
            Some(message) if message.role == Role::User => message,
            _ => {
                return Err(BackendError::Protocol(
                    "the cli backend sends user prompts only".into(),
                ))
            }
        };
        self.ensure_feed()?;
        // A fresh local session after earlier turns means the user cleared it.
        if self.turns > 0 && session.messages.len() == 1 {
            self.post("/clear", &Empty {})?;
        }
        self.drain_idle();
        let id = self.queue_prompt(prompt)?;
        self.turns += 1;
        self.follow(id, sink)
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        self.estimator.count_message(message)
    }
}

// ---------------------------------------------------------------------------
// The listener thread.

/// What the listener tells `generate`.
enum Feed {
    /// (Re)connected; the server's last sequence number so far.
    Connected(u64),
    Line(WireLine),
    /// The stream failed or ended; the listener retries.
    Failed(BackendError),
}

/// [`CliBackend::key`] for the listener thread, which has no backend.
fn server_key(configured: Option<&str>, base_url: &str) -> Option<String> {
    configured
        .map(str::to_string)
        .or_else(|| crate::util::auth::find_for_url(base_url))
}

fn spawn_listener(
    url: String,
    api_key: Option<String>,
    base_url: String,
) -> io::Result<Receiver<Feed>> {
    let (tx, rx) = crossbeam_channel::bounded(FEED_CAPACITY);
    std::thread::Builder::new()
        .name("shepherd-cli-listen".into())
        .spawn(move || listen(&url, api_key.as_deref(), &base_url, &tx))?;
    Ok(rx)
}

/// Keeps `/updates` open until the backend is dropped, reconnecting with backoff.
fn listen(url: &str, api_key: Option<&str>, base_url: &str, tx: &Sender<Feed>) {
    // No overall limit: the stream is meant to stay open; keep-alives reset the per-read one.
    let limits = Limits {
        connect: Duration::from_secs(10),
        per_read: Duration::from_secs(60),
        overall: Duration::from_secs(365 * 24 * 3600),
        ..Limits::default()
    };
    let agent = http::build_agent(url, &limits);
    let mut backoff = Duration::from_millis(250);
    loop {
        let key = server_key(api_key, base_url);
        let result = listen_once(&agent, url, key.as_deref(), tx, &mut backoff);
        let error = match result {
            Ok(()) => BackendError::Connect(format!("{url}: stream ended")),
            Err(error) => error,
        };
        if matches!(
            tx.try_send(Feed::Failed(error)),
            Err(TrySendError::Disconnected(_))
        ) {
            return;
        }
        std::thread::sleep(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(5));
    }
}

fn listen_once(
    agent: &ureq::Agent,
    url: &str,
    api_key: Option<&str>,
    tx: &Sender<Feed>,
    backoff: &mut Duration,
) -> Result<(), BackendError> {
    let mut builder = agent.get(url).header("Accept", "text/event-stream");
    if let Some(key) = api_key {
        builder = builder.header("Authorization", format!("Bearer {key}"));
    }
    let response = builder.call().map_err(|e| http::transport_error(e, url))?;
    let status = response.status().as_u16();
    if status != 200 {
        let text = response.into_body().read_to_string().unwrap_or_default();
        return Err(http::error_from_body(status, &text, None));
    }
    *backoff = Duration::from_millis(250);
    let reader = BufReader::new(response.into_body().into_reader());
    for event in SseDecoder::new(reader) {
        let event = event.map_err(|e| http::io_error(e, url))?;
        let Some(feed) = decode_feed(&event.data) else {
            continue;
        };
        match tx.try_send(feed) {
            Ok(()) | Err(TrySendError::Full(_)) => {}
            Err(TrySendError::Disconnected(_)) => return Ok(()),
        }
    }
    Ok(())
}

/// One `data:` payload; `None` for shapes this version does not know.
fn decode_feed(data: &str) -> Option<Feed> {
    let line: WireLine = serde_json::from_str(data).ok()?;
    match line.event {
        WireEvent::Connected { .. } => Some(Feed::Connected(line.seq.unwrap_or(0))),
        WireEvent::Unknown => None,
        _ => Some(Feed::Line(line)),
    }
}

/// The reply text gathered from a request's events.
#[derive(Default)]
struct TurnText {
    content: String,
    thinking: String,
    in_code: bool,
    usage: Option<Usage>,
}

impl TurnText {
    /// What the reply holds so far, for its cap.
    fn bytes(&self) -> u64 {
        (self.content.len() + self.thinking.len()) as u64
    }

    fn note(&mut self, event: &Event) {
        match event {
            Event::Content(text) => {
                self.close_code();
                self.content.push_str(text);
            }
            // Code blocks arrive without their fences; put them back for the history.
            Event::CodeBlock(text) => {
                if !self.in_code {
                    self.in_code = true;
                    self.content.push_str("```\n");
                }
                self.content.push_str(text);
            }
            Event::Thinking(text) => self.thinking.push_str(text),
            Event::Stats(stats) => {
                self.usage = Some(Usage {
                    prompt_tokens: stats.prompt_tokens,
                    completion_tokens: stats.completion_tokens,
                })
            }
            _ => {}
        }
    }

    fn close_code(&mut self) {
        if self.in_code {
            self.in_code = false;
            if !self.content.ends_with('\n') {
                self.content.push('\n');
            }
            self.content.push_str("```\n");
        }
    }

    fn reply(mut self, finish: FinishReason) -> Reply {
        self.close_code();
        Reply {
            content: self.content,
            thinking: self.thinking,
            tool_calls: Vec::new(),
            finish,
            usage: self.usage,
            artefacts: Vec::new(),
            stop_sequence: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::wire::error_kind;
    use super::*;
    use crate::core::error::ErrorKind;
    use crate::core::Stats;
    use crate::stream::ChunkReader;

    /// A recorded `/updates` stream of a tool-using request.
    const UPDATES: &str = concat!(
        "data: {\"type\":\"connected\",\"client_id\":\"1\",\"seq\":4}\n\n",
        ": keepalive\n\n",
        "data: {\"seq\":5,\"request_id\":2,\"type\":\"user_prompt\",\"content\":\"hi ✓\"}\n\n",
        "data: {\"seq\":6,\"request_id\":2,\"type\":\"thinking\",\"content\":\"hm\"}\n\n",
        "data: {\"seq\":7,\"request_id\":2,\"type\":\"tool_call\",\"name\":\"bash\",\"args\":{\"command\":\"ls\"},\"id\":\"c1\"}\n\n",
        "data: {\"seq\":8,\"request_id\":2,\"type\":\"tool_result\",\"name\":\"bash\",\"id\":\"c1\",\"success\":true,\"summary\":\"ok\",\"content\":\"a\\nb\"}\n\n",
        "data: {\"seq\":9,\"request_id\":2,\"type\":\"delta\",\"content\":\"Done ✓\"}\n\n",
        "data: {\"seq\":10,\"request_id\":2,\"type\":\"stats\",\"prompt_tokens\":5,\"completion_tokens\":2,\"context_used\":7,\"context_size\":0}\n\n",
        "data: {\"seq\":11,\"request_id\":2,\"type\":\"something_new\"}\n\n",
        "data: {\"seq\":12,\"request_id\":2,\"type\":\"response_complete\",\"finish_reason\":\"stop\"}\n\n",
    );

    /// Decodes a stream into a readable summary, one entry per feed item.
    fn decode(reader: impl io::BufRead) -> Vec<String> {
        SseDecoder::new(reader)
            .map(|e| e.expect("event"))
            .filter_map(|e| decode_feed(&e.data))
            .map(|feed| match feed {
                Feed::Connected(seq) => format!("connected {seq}"),
                Feed::Failed(e) => format!("failed {e}"),
                Feed::Line(line) => {
                    let seq = line.seq.unwrap_or(0);
                    match line.event {
                        WireEvent::ResponseComplete { finish_reason } => {
                            format!("{seq} complete {finish_reason}")
                        }
                        other => format!("{seq} {:?}", to_event(other)),
                    }
                }
            })
            .collect()
    }

    #[test]
    fn every_event_type_survives_the_hop() {
        let events = decode(UPDATES.as_bytes());
        assert_eq!(events.len(), 8, "the unknown type is skipped: {events:#?}");
        assert_eq!(events[0], "connected 4");
        assert_eq!(events[1], "5 None");
        assert!(events[2].contains("Thinking(\"hm\")"));
        assert!(events[3].contains("ToolCall") && events[3].contains("\"command\""));
        assert!(events[4].contains("ToolResult") && events[4].contains("success: true"));
        assert!(events[5].contains("Content(\"Done ✓\")"));
        assert!(events[6].contains("prompt_tokens: 5"));
        assert_eq!(events[7], "12 complete stop");
    }

    #[test]
    fn the_stream_decodes_the_same_at_every_split() {
        let whole = decode(UPDATES.as_bytes());
        let bytes = UPDATES.as_bytes();
        for at in 0..=bytes.len() {
            assert_eq!(
                decode(ChunkReader::split_at(bytes, at)),
                whole,
                "split at {at}"
            );
        }
        assert_eq!(decode(ChunkReader::bytewise(bytes)), whole);
    }

    #[test]
    fn reply_text_keeps_code_fences_and_usage() {
        let mut turn = TurnText::default();
        for event in [
            Event::Content("Run:\n".into()),
            Event::CodeBlock("ls\n".into()),
            Event::Content("Then look.".into()),
            Event::Stats(Stats {
                prompt_tokens: 9,
                completion_tokens: 3,
                ..Stats::default()
            }),
        ] {
            turn.note(&event);
        }
        let reply = turn.reply(FinishReason::Stop);
        assert_eq!(reply.content, "Run:\n```\nls\n```\nThen look.");
        assert!(reply.tool_calls.is_empty());
        assert_eq!(reply.usage.map(|u| u.prompt_tokens), Some(9));
    }

    #[test]
    fn finish_reasons_and_error_kinds_map_back() {
        assert_eq!(finish_from("stop"), FinishReason::Stop);
        assert_eq!(finish_from("cancelled"), FinishReason::Cancelled);
        assert_eq!(finish_from("weird"), FinishReason::Error);
        assert_eq!(error_kind("timeout"), ErrorKind::Timeout);
        assert_eq!(error_kind("auth_error"), ErrorKind::Auth);
        assert_eq!(error_kind("?"), ErrorKind::Http);
    }
}

//! Routes: the HTTP handler, beside the serde twin structs of the bodies it
//! reads and writes, and the relay that feeds a stream or an observer.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::Op;
use crate::core::image::{Image, MAX_IMAGES};
use crate::core::{Event, FinishReason, Message, Session, ToolCall};
use crate::frontend::chat::attach;
use crate::frontend::serve::agent_api;
use crate::frontend::serve::http::{Handler, Request, Responder, SseStream};
use crate::frontend::serve::ui;
use crate::tools::approval::Answer;

use super::jobs::{CliServer, JobReply, Outcome};
use super::wire::Connected;
use super::{CliServerConfig, TICK};
use crate::util::sync::lock;

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
                let Some(responder) = ui::route(&request, responder) else {
                    return;
                };
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
    /// The provider that answered the last request, when several are configured.
    #[serde(skip_serializing_if = "Option::is_none")]
    last_provider: Option<String>,
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
    /// The images the message carries, described (the bytes stay on the server).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    images: Vec<SessionImage<'a>>,
}

#[derive(Serialize)]
struct SessionImage<'a> {
    /// Byte offset in `content` where the image stands.
    at: usize,
    mime: &'a str,
    width: u32,
    height: u32,
    sha256: &'a str,
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
        images: message
            .images
            .iter()
            .map(|part| SessionImage {
                at: part.at,
                mime: &part.image.mime,
                width: part.image.width,
                height: part.image.height,
                sha256: &part.image.sha256,
            })
            .collect(),
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
    /// Images as `data:image/...;base64,...` URLs, placed before the text.
    #[serde(default)]
    images: Vec<String>,
    #[serde(default)]
    stream: bool,
    #[serde(default, rename = "async")]
    queue: bool,
}

/// A `POST /request` as the job queue takes it.
pub(super) struct PromptRequest {
    /// The user message: the prompt and its images.
    pub(super) message: Message,
    pub(super) stream: bool,
    pub(super) queue: bool,
}

/// Reads the prompt: a JSON body, or (for non-JSON content types) the body
/// itself when it is not a JSON object. Every image is decoded here, so a bad
/// one is the client's `400` and never reaches the agent.
pub(super) fn parse_prompt(request: &Request) -> Result<PromptRequest, String> {
    let text = std::str::from_utf8(&request.body).map_err(|_| "body is not UTF-8".to_string())?;
    let is_json = request
        .header("content-type")
        .is_some_and(|t| t.to_ascii_lowercase().contains("json"));
    let looks_like_object = text.trim_start().starts_with('{');
    let body = if is_json || looks_like_object {
        crate::util::json::parse_strict_as::<PromptBody>(text.as_bytes())
            .map_err(|e| format!("invalid JSON body: {e}"))?
    } else {
        PromptBody {
            prompt: Some(text.to_string()),
            images: Vec::new(),
            stream: false,
            queue: false,
        }
    };
    let images = decode_images(&body.images)?;
    let prompt = body.prompt.unwrap_or_default();
    if prompt.trim().is_empty() && images.is_empty() {
        return Err("missing prompt".into());
    }
    Ok(PromptRequest {
        message: attach::user_message(prompt, images),
        stream: body.stream,
        queue: body.queue,
    })
}

/// The request's `images`, each a checked [`Image`]; the first bad one is named.
fn decode_images(urls: &[String]) -> Result<Vec<Image>, String> {
    if urls.len() > MAX_IMAGES {
        return Err(format!(
            "{} images; a request carries at most {MAX_IMAGES}",
            urls.len()
        ));
    }
    urls.iter()
        .enumerate()
        .map(|(n, url)| {
            Image::from_data_url(url).map_err(|error| {
                format!("images[{n}]: {error} (images are data:image/...;base64,... URLs)")
            })
        })
        .collect()
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
            last_provider: lock(&self.last_provider).clone(),
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
        let body = match crate::util::json::parse_strict_as::<ApproveBody>(&request.body) {
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
    pub(super) fn stop_everything(&self) -> (bool, usize) {
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
        let prompt = body.message;
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

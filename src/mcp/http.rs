//! The streamable HTTP transport (MCP 2025-03-26 and later): every message
//! is a `POST` to one endpoint; the answer is `202` (notifications), a JSON
//! body, or an SSE stream carrying notifications and then the response.
//!
//! Each message is posted on its own short-lived thread, so a slow answer
//! never holds up the caller: the client waits on the [`Router`] with its own
//! deadline and cancel flag, exactly as for stdio. The `Mcp-Session-Id` the
//! server returns is echoed on every later request with the negotiated
//! `MCP-Protocol-Version`; a `404` on a session means the server forgot it,
//! so the connection is closed and the supervisor re-initialises. SSE bodies
//! go through the one SSE decoder, [`crate::stream::SseDecoder`].

use std::io::{BufReader, Read};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use super::client::{lock, McpError, Router, Transport};
use super::stdio::MAX_MESSAGE_BYTES;
use crate::backend::http::{build_agent, Timeouts};
use crate::config::mcp::{expand_vars, McpServerConfig};
use crate::log::{self, Category};
use crate::stream::sse::SseDecoder;

/// A connection to one streamable HTTP server.
pub struct HttpTransport {
    shared: Arc<Shared>,
}

struct Shared {
    name: String,
    url: String,
    headers: Vec<(String, String)>,
    agent: ureq::Agent,
    router: Arc<Router>,
    session: Mutex<Option<String>>,
    version: Mutex<Option<String>>,
    closed: AtomicBool,
}

impl HttpTransport {
    pub fn connect(
        name: &str,
        config: &McpServerConfig,
        router: Arc<Router>,
    ) -> Result<HttpTransport, McpError> {
        let url = config
            .url
            .clone()
            .ok_or_else(|| McpError::Spawn("no url configured".into()))?;
        let env = &crate::config::process_env;
        let mut headers: Vec<(String, String)> = config
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), expand_vars(v, env)))
            .collect();
        if let Some(token) = &config.bearer_token {
            headers.push((
                "Authorization".into(),
                format!("Bearer {}", expand_vars(token, env)),
            ));
        }
        let call = config.call_timeout().max(config.startup_timeout());
        let timeouts = Timeouts {
            connect: config.startup_timeout().min(Duration::from_secs(10)),
            per_read: call,
            overall: call + Duration::from_secs(30),
        };
        let agent = build_agent(&url, &timeouts);
        Ok(HttpTransport {
            shared: Arc::new(Shared {
                name: name.to_string(),
                url,
                headers,
                agent,
                router,
                session: Mutex::new(None),
                version: Mutex::new(None),
                closed: AtomicBool::new(false),
            }),
        })
    }
}

impl Transport for HttpTransport {
    fn send(&self, message: &Value) -> Result<(), McpError> {
        if self.shared.closed.load(Ordering::SeqCst) {
            return Err(McpError::Closed("the connection is closed".into()));
        }
        let body = serde_json::to_vec(message).map_err(|e| McpError::Protocol(e.to_string()))?;
        let request_id = message
            .get("method")
            .and(message.get("id"))
            .and_then(Value::as_u64);
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-{}-post", self.shared.name))
            .spawn(move || {
                if let Err(error) = shared.post(&body) {
                    log::debug(Category::Tools, || format!("mcp {}: {error}", shared.name));
                    if let Some(id) = request_id {
                        shared.router.fail(id, error);
                    }
                }
            });
        spawned
            .map(|_| ())
            .map_err(|e| McpError::Transport(format!("cannot start a request thread: {e}")))
    }

    fn set_protocol_version(&self, version: &str) {
        *lock(&self.shared.version) = Some(version.to_string());
    }

    fn close(&self) {
        if self.shared.closed.swap(true, Ordering::SeqCst) {
            return;
        }
        self.shared.router.close("closed by shepherd");
        let Some(session) = lock(&self.shared.session).clone() else {
            return;
        };
        // Ends the session on the server; best effort, never waited for.
        let shared = self.shared.clone();
        let _ = std::thread::Builder::new()
            .name(format!("mcp-{}-delete", self.shared.name))
            .spawn(move || {
                let request = shared
                    .agent
                    .delete(&shared.url)
                    .header("Mcp-Session-Id", &session);
                let _ = shared.with_headers(request).call();
            });
    }
}

impl Drop for HttpTransport {
    fn drop(&mut self) {
        self.close();
    }
}

impl Shared {
    fn with_headers<B>(&self, mut request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        for (name, value) in &self.headers {
            request = request.header(name, value);
        }
        if let Some(version) = lock(&self.version).as_deref() {
            request = request.header("MCP-Protocol-Version", version);
        }
        request
    }

    /// Posts one message and routes whatever comes back.
    fn post(&self, body: &[u8]) -> Result<(), McpError> {
        let session = lock(&self.session).clone();
        let mut request = self
            .agent
            .post(&self.url)
            .header("Content-Type", "application/json")
            .header("Accept", "application/json, text/event-stream");
        if let Some(session) = &session {
            request = request.header("Mcp-Session-Id", session);
        }
        let response = self
            .with_headers(request)
            .send(body)
            .map_err(|e| McpError::Transport(format!("{}: {e}", self.url)))?;
        let status = response.status().as_u16();
        if status == 404 && session.is_some() {
            self.router.close("the server ended the session");
            return Err(McpError::Closed(
                "the server ended the session (404)".into(),
            ));
        }
        if !(200..300).contains(&status) {
            let mut text = String::new();
            let _ = response
                .into_body()
                .into_reader()
                .take(2000)
                .read_to_string(&mut text);
            return Err(McpError::Transport(format!(
                "{} answered HTTP {status}: {}",
                self.url,
                text.trim()
            )));
        }
        if let Some(id) = header(&response, "mcp-session-id") {
            *lock(&self.session) = Some(id);
        }
        let is_sse = header(&response, "content-type")
            .is_some_and(|t| t.to_ascii_lowercase().starts_with("text/event-stream"));
        let reader = response
            .into_body()
            .into_reader()
            .take(MAX_MESSAGE_BYTES as u64);
        if is_sse {
            self.route_sse(BufReader::new(reader))
        } else {
            self.route_json(reader)
        }
    }

    fn route_sse(&self, reader: impl std::io::BufRead) -> Result<(), McpError> {
        for event in SseDecoder::new(reader) {
            let event = event.map_err(|e| McpError::Transport(format!("{}: {e}", self.url)))?;
            if event.data.trim().is_empty() {
                continue;
            }
            self.route_text(&event.data)?;
        }
        Ok(())
    }

    fn route_json(&self, mut reader: impl Read) -> Result<(), McpError> {
        let mut text = String::new();
        reader
            .read_to_string(&mut text)
            .map_err(|e| McpError::Transport(format!("{}: {e}", self.url)))?;
        if text.trim().is_empty() {
            return Ok(());
        }
        self.route_text(&text)
    }

    /// One JSON-RPC message, or a batch of them.
    fn route_text(&self, text: &str) -> Result<(), McpError> {
        let value: Value = serde_json::from_str(text).map_err(|e| {
            let start: String = text.chars().take(200).collect();
            McpError::Protocol(format!("bad JSON from {} ({e}): {start}", self.url))
        })?;
        match value {
            Value::Array(messages) => messages.into_iter().for_each(|m| self.router.dispatch(m)),
            message => self.router.dispatch(message),
        }
        Ok(())
    }
}

fn header(response: &ureq::http::Response<ureq::Body>, name: &str) -> Option<String> {
    response
        .headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

//! The streamable HTTP transport (MCP 2025-03-26 and later): every message
//! is a `POST` to one endpoint; the answer is `202` (notifications), a JSON
//! body, or an SSE stream carrying notifications and then the response.
//!
//! Each request is posted on its own short-lived thread, so a slow answer
//! never holds up the caller (notifications go out in order on the caller's
//! thread): the client waits on the [`Router`] with its own
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

use super::client::{McpError, Router, Transport};
use super::stdio::MAX_MESSAGE_BYTES;
use crate::backend::http::{build_agent, Limits};
use crate::config::mcp::{expand_vars, McpServerConfig};
use crate::stream::sse::SseDecoder;
use crate::util::log::{self, Category};
use crate::util::sync::lock;

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
        let limits = Limits {
            connect: config.startup_timeout().min(Duration::from_secs(10)),
            per_read: call,
            overall: call + Duration::from_secs(30),
            ..Limits::default()
        };
        let agent = build_agent(&url, &limits);
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
        let Some(request_id) = request_id else {
            // Notifications and our answers are posted in order, on this
            // thread: `initialized` must reach the server before the next
            // request does, and the server answers them at once with 202.
            return self.shared.post(&body);
        };
        let shared = self.shared.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("mcp-{}-post", self.shared.name))
            .spawn(move || {
                if let Err(error) = shared.post(&body) {
                    log::debug(Category::Tools, || format!("mcp {}: {error}", shared.name));
                    shared.router.fail(request_id, error);
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;
    use crate::backend::fake::{Canned, FakeServer};
    use crate::mcp::client::Client;

    #[test]
    fn session_version_and_auth_headers_json_and_sse_answers() {
        let initialized = json!({"jsonrpc": "2.0", "id": 1, "result": {
            "protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake", "version": "1"}}});
        let page = json!({"jsonrpc": "2.0", "id": 2, "result": {"tools": [{"name": "t", "inputSchema": {}}]}});
        let log =
            json!({"jsonrpc": "2.0", "method": "notifications/message", "params": {"data": "hi"}});
        let sse = format!("event: message\ndata: {log}\n\n: keep-alive\n\ndata: {page}\n\n");
        let fake = FakeServer::start(vec![
            Canned::json(200, initialized).with_header("Mcp-Session-Id", "sess-1"),
            Canned::with_type(Vec::new(), "text/plain").with_status(202),
            Canned::sse(sse.into_bytes()),
            Canned::json(404, json!({})),
        ]);
        let config = McpServerConfig {
            url: Some(format!("{}/mcp", fake.base_url)),
            headers: [("X-Extra".to_string(), "yes".to_string())].into(),
            bearer_token: Some("tok-123".into()),
            ..McpServerConfig::default()
        };
        let (router, ends) = Router::new();
        let transport = HttpTransport::connect("fake", &config, router.clone()).unwrap();
        let client = Client::connect(Box::new(transport), router, Duration::from_secs(10)).unwrap();
        assert_eq!(client.info.protocol_version, "2025-06-18");
        let tools = client.list_tools(Duration::from_secs(10)).unwrap();
        assert_eq!(tools[0].name, "t");
        assert_eq!(
            ends.inbox.recv().unwrap()["method"],
            "notifications/message"
        );
        let gone = client.call_tool("t", &json!({}), Duration::from_secs(10), None);
        assert!(matches!(gone, Err(McpError::Closed(_))), "{gone:?}");
        assert!(
            ends.ended.recv().is_err(),
            "a 404 on the session ends the connection"
        );
        let requests = fake.finish();
        let methods: Vec<&str> = requests
            .iter()
            .map(|r| r.body["method"].as_str().unwrap())
            .collect();
        assert_eq!(
            methods,
            [
                "initialize",
                "notifications/initialized",
                "tools/list",
                "tools/call"
            ]
        );
        for (index, request) in requests.iter().enumerate() {
            assert_eq!(request.url, "/mcp");
            assert_eq!(
                request.header("Accept"),
                Some("application/json, text/event-stream")
            );
            assert_eq!(request.header("Authorization"), Some("Bearer tok-123"));
            assert_eq!(request.header("X-Extra"), Some("yes"));
            let (session, version) = if index == 0 {
                (None, None)
            } else {
                (Some("sess-1"), Some("2025-06-18"))
            };
            assert_eq!(request.header("Mcp-Session-Id"), session);
            assert_eq!(request.header("MCP-Protocol-Version"), version);
        }
    }
}

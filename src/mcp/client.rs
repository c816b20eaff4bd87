//! The MCP client over any transport: JSON-RPC 2.0 requests matched to their
//! responses by id, the `initialize` handshake with version negotiation, and
//! the typed methods shepherd uses (`tools/list` with pagination,
//! `tools/call`, `resources/list`, `resources/read`).
//!
//! A transport ([`super::stdio`], [`super::http`]) only sends messages; what
//! the server sends arrives on another thread and goes through the
//! [`Router`]: responses to the waiting request's channel, everything else
//! (notifications, server requests such as `ping`) to the supervisor's inbox.
//! A request waits with a deadline and watches a cancel flag; on either it
//! sends `notifications/cancelled` so the server can stop the work too.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};
use serde_json::{json, Map, Value};

use crate::core::image::MAX_IMAGES;
use crate::core::{Image, ImagePart};
use crate::tools::rpc;
use crate::util::sync::lock;

/// The protocol versions shepherd speaks, newest first; the first is offered.
pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];

/// How often a waiting request looks at its cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(25);

/// Why an MCP operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpError {
    /// The server process could not be started.
    Spawn(String),
    /// Sending failed, or an HTTP request failed before any JSON-RPC answer.
    Transport(String),
    /// The server closed the connection (the process exited, the session ended).
    Closed(String),
    /// No answer within the deadline.
    Timeout { method: String, after: Duration },
    /// The user cancelled the turn.
    Cancelled,
    /// The server answered with a JSON-RPC error.
    Rpc { code: i64, message: String },
    /// The answer was not what the protocol says (bad shape, unsupported version).
    Protocol(String),
}

impl fmt::Display for McpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            McpError::Spawn(m) => write!(f, "cannot start the server: {m}"),
            McpError::Transport(m) => write!(f, "transport error: {m}"),
            McpError::Closed(m) => write!(f, "the server closed the connection: {m}"),
            McpError::Timeout { method, after } => {
                write!(
                    f,
                    "no answer to {method} within {:.1} s",
                    after.as_secs_f64()
                )
            }
            McpError::Cancelled => f.write_str("cancelled"),
            McpError::Rpc { code, message } => write!(f, "server error {code}: {message}"),
            McpError::Protocol(m) => write!(f, "protocol error: {m}"),
        }
    }
}

impl std::error::Error for McpError {}

/// Sends messages to one server. Whatever the server sends back is handed to
/// the [`Router`] the transport was created with.
pub trait Transport: Send + Sync {
    /// Sends one JSON-RPC message.
    fn send(&self, message: &Value) -> Result<(), McpError>;
    /// Records the negotiated version (HTTP sends it as a header).
    fn set_protocol_version(&self, _version: &str) {}
    /// Ends the connection and everything it started. Idempotent.
    fn close(&self);
}

type Pending = HashMap<u64, Sender<Result<Value, McpError>>>;

/// Routes incoming messages: responses to their waiting request, the rest to
/// the inbox. Closing it fails every waiting and later request.
pub struct Router {
    pending: Mutex<Pending>,
    closed: Mutex<Option<String>>,
    inbox: Sender<Value>,
    /// Server-initiated messages put in the inbox, and those the supervisor has handled.
    received: AtomicU64,
    handled: AtomicU64,
    /// Dropped on close, so a supervisor can `select!` on the connection's end.
    alive: Mutex<Option<Sender<()>>>,
}

/// The receiving ends of a [`Router`]: server-initiated messages, and a
/// channel that disconnects when the connection ends.
pub struct RouterEnds {
    pub inbox: Receiver<Value>,
    pub ended: Receiver<()>,
}

impl Router {
    pub fn new() -> (Arc<Router>, RouterEnds) {
        let (inbox_tx, inbox_rx) = crossbeam_channel::unbounded();
        let (alive_tx, alive_rx) = crossbeam_channel::bounded(0);
        let router = Router {
            pending: Mutex::new(HashMap::new()),
            closed: Mutex::new(None),
            inbox: inbox_tx,
            received: AtomicU64::new(0),
            handled: AtomicU64::new(0),
            alive: Mutex::new(Some(alive_tx)),
        };
        let ends = RouterEnds {
            inbox: inbox_rx,
            ended: alive_rx,
        };
        (Arc::new(router), ends)
    }

    /// Hands one message from the server to whoever waits for it.
    pub fn dispatch(&self, message: Value) {
        let is_response = message.get("method").is_none()
            && (message.get("result").is_some() || message.get("error").is_some());
        if !is_response {
            self.received.fetch_add(1, Ordering::SeqCst);
            let _ = self.inbox.send(message);
            return;
        }
        let Some(id) = message.get("id").and_then(Value::as_u64) else {
            crate::util::log::debug(crate::util::log::Category::Tools, || {
                format!("mcp: response with an id we never sent: {}", message["id"])
            });
            return;
        };
        if let Some(waiter) = lock(&self.pending).remove(&id) {
            let _ = waiter.send(response_result(&message));
        }
    }

    /// Fails the request `id` (an HTTP request that got no JSON-RPC answer).
    pub fn fail(&self, id: u64, error: McpError) {
        if let Some(waiter) = lock(&self.pending).remove(&id) {
            let _ = waiter.send(Err(error));
        }
    }

    /// Marks the connection as ended: every waiting request fails with `reason`.
    pub fn close(&self, reason: &str) {
        lock(&self.closed).get_or_insert_with(|| reason.to_string());
        for (_, waiter) in lock(&self.pending).drain() {
            let _ = waiter.send(Err(McpError::Closed(reason.to_string())));
        }
        lock(&self.alive).take();
    }

    pub fn closed_reason(&self) -> Option<String> {
        lock(&self.closed).clone()
    }

    /// Counts one inbox message as handled (by the supervisor).
    pub fn mark_handled(&self) {
        self.handled.fetch_add(1, Ordering::SeqCst);
    }

    fn register(&self, id: u64) -> Result<Receiver<Result<Value, McpError>>, McpError> {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let mut pending = lock(&self.pending);
        // Checked under the pending lock, so a close cannot slip in between.
        if let Some(reason) = self.closed_reason() {
            return Err(McpError::Closed(reason));
        }
        pending.insert(id, tx);
        Ok(rx)
    }

    fn forget(&self, id: u64) {
        lock(&self.pending).remove(&id);
    }
}

fn response_result(message: &Value) -> Result<Value, McpError> {
    match message.get("error") {
        Some(error) => Err(McpError::Rpc {
            code: error.get("code").and_then(Value::as_i64).unwrap_or(0),
            message: error
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("(no message)")
                .to_string(),
        }),
        None => Ok(message.get("result").cloned().unwrap_or(Value::Null)),
    }
}

/// What the server said about itself in `initialize`.
#[derive(Debug, Clone, Default)]
pub struct ServerInfo {
    pub protocol_version: String,
    pub name: String,
    pub version: String,
    pub capabilities: Value,
    pub instructions: Option<String>,
}

impl ServerInfo {
    pub fn has(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(Value::is_object)
    }
}

/// One tool as the server described it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolInfo {
    pub name: String,
    pub description: String,
    pub input_schema: Value,
    /// `readOnlyHint`, `destructiveHint`, … as sent (an object, or null).
    pub annotations: Value,
}

/// A `tools/call` result, reduced to what the model gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallResult {
    pub text: String,
    /// The `image` items (and image resources), each where it stood among the text items.
    pub images: Vec<ImagePart>,
    pub is_error: bool,
}

/// MCP content items (a tool's result, a resource's contents) as text and
/// images in their order: text items joined by newlines, each image at the
/// end of the text before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Content {
    pub text: String,
    pub images: Vec<ImagePart>,
    /// Text items so far (an empty one still takes its line).
    texts: usize,
}

/// One content item, read.
enum Part {
    Text(String),
    Image(Image),
}

impl Content {
    /// Plain text, no images.
    pub fn from_text(text: String) -> Content {
        Content {
            text,
            images: Vec::new(),
            texts: 1,
        }
    }

    fn push(&mut self, part: Part) {
        match part {
            Part::Image(image) if self.images.len() < MAX_IMAGES => {
                let at = self.text.len();
                self.images.push(ImagePart { at, image });
            }
            Part::Image(image) => self.push(Part::Text(format!(
                "[image content: {}, left out: more than {MAX_IMAGES} images in one result]",
                image.mime
            ))),
            Part::Text(text) => {
                if self.texts > 0 {
                    self.text.push('\n');
                }
                self.texts += 1;
                self.text.push_str(&text);
            }
        }
    }
}

/// A connected, initialised MCP session.
pub struct Client {
    transport: Box<dyn Transport>,
    router: Arc<Router>,
    next_id: AtomicU64,
    pub info: ServerInfo,
}

impl Client {
    /// Runs the handshake on a fresh transport: `initialize`, a version check,
    /// then `notifications/initialized`.
    pub fn connect(
        transport: Box<dyn Transport>,
        router: Arc<Router>,
        timeout: Duration,
    ) -> Result<Client, McpError> {
        let mut client = Client {
            transport,
            router,
            next_id: AtomicU64::new(1),
            info: ServerInfo::default(),
        };
        let params = json!({
            "protocolVersion": PROTOCOL_VERSIONS[0],
            "capabilities": {},
            "clientInfo": {"name": "shepherd", "version": env!("CARGO_PKG_VERSION")},
        });
        let result = client.request("initialize", params, timeout, None)?;
        client.info = server_info(&result)?;
        client
            .transport
            .set_protocol_version(&client.info.protocol_version);
        client.notify("notifications/initialized", None)?;
        Ok(client)
    }

    /// Sends a request and waits for its answer until `timeout` or a cancel.
    pub fn request(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
    ) -> Result<Value, McpError> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let answer = self.router.register(id)?;
        let message = rpc::Request::call(method, params, id).to_value();
        if let Err(error) = self.transport.send(&message) {
            self.router.forget(id);
            return Err(error);
        }
        let deadline = Instant::now() + timeout;
        loop {
            let wait = deadline
                .saturating_duration_since(Instant::now())
                .min(CANCEL_POLL);
            match answer.recv_timeout(wait) {
                Ok(result) => return result,
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(McpError::Closed("the connection ended".into()))
                }
                Err(RecvTimeoutError::Timeout) => {}
            }
            let stop = if cancel.is_some_and(|c| c.load(Ordering::SeqCst)) {
                Some((McpError::Cancelled, "cancelled by the user"))
            } else if Instant::now() >= deadline {
                let error = McpError::Timeout {
                    method: method.to_string(),
                    after: timeout,
                };
                Some((error, "timed out"))
            } else {
                None
            };
            if let Some((error, reason)) = stop {
                self.router.forget(id);
                let params = json!({"requestId": id, "reason": reason});
                let _ = self.notify("notifications/cancelled", Some(params));
                return Err(error);
            }
        }
    }

    /// Sends a notification (no answer expected).
    pub fn notify(&self, method: &str, params: Option<Value>) -> Result<(), McpError> {
        let message = rpc::Request::notification(method, params.unwrap_or(Value::Null));
        self.transport.send(&message.to_value())
    }

    /// Answers a request the server sent us: `ping` gets `{}`, anything else
    /// "method not found" (shepherd offers no sampling, roots or elicitation).
    pub fn answer_server_request(&self, request: &Value) {
        let Some(id) = request.get("id").cloned() else {
            return;
        };
        let method = request["method"].as_str().unwrap_or_default();
        let reply = if method == "ping" {
            rpc::Response::ok(id, json!({}))
        } else {
            let message = format!("shepherd does not support {method}");
            rpc::Response::err(id, rpc::RpcError::new(rpc::METHOD_NOT_FOUND, message))
        };
        let _ = self
            .transport
            .send(&serde_json::to_value(&reply).unwrap_or(Value::Null));
    }

    /// Every tool, following `nextCursor` through the pages.
    pub fn list_tools(&self, timeout: Duration) -> Result<Vec<ToolInfo>, McpError> {
        let mut tools = Vec::new();
        for page in self.pages("tools/list", "tools", timeout)? {
            tools.push(tool_info(&page)?);
        }
        Ok(tools)
    }

    /// Every resource, as `{uri, name, mimeType?, description?}` objects.
    pub fn list_resources(&self, timeout: Duration) -> Result<Vec<Value>, McpError> {
        self.pages("resources/list", "resources", timeout)
    }

    /// The contents of a resource: texts, and images from image blobs (other
    /// blobs are described, not decoded).
    pub fn read_resource(
        &self,
        uri: &str,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
    ) -> Result<Content, McpError> {
        let result = self.request("resources/read", json!({"uri": uri}), timeout, cancel)?;
        resource_contents(&result)
    }

    /// Runs a tool. A tool that failed (`isError`) is a successful call.
    pub fn call_tool(
        &self,
        name: &str,
        arguments: &Value,
        timeout: Duration,
        cancel: Option<&AtomicBool>,
    ) -> Result<CallResult, McpError> {
        let params = json!({"name": name, "arguments": arguments});
        let result = self.request("tools/call", params, timeout, cancel)?;
        call_result(&result)
    }

    /// Collects the `key` arrays of every page of a paginated list method.
    fn pages(&self, method: &str, key: &str, timeout: Duration) -> Result<Vec<Value>, McpError> {
        const MAX_PAGES: usize = 1000;
        let mut items = Vec::new();
        let mut cursor: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let params = match &cursor {
                Some(cursor) => json!({"cursor": cursor}),
                None => json!({}),
            };
            let result = self.request(method, params, timeout, None)?;
            let page = result[key].as_array().ok_or_else(|| {
                McpError::Protocol(format!("{method} answer has no '{key}' list"))
            })?;
            items.extend(page.iter().cloned());
            match result.get("nextCursor").and_then(Value::as_str) {
                Some(next) if !next.is_empty() && cursor.as_deref() != Some(next) => {
                    cursor = Some(next.to_string())
                }
                _ => return Ok(items),
            }
        }
        Err(McpError::Protocol(format!(
            "{method} returned more than {MAX_PAGES} pages"
        )))
    }

    /// Waits until every message the server sent so far has been handled
    /// (or `limit` passes), so that a `tools/list_changed` sent during a call
    /// is applied before the model is asked again.
    pub fn settle(&self, limit: Duration) {
        let target = self.router.received.load(Ordering::SeqCst);
        let deadline = Instant::now() + limit;
        while self.router.handled.load(Ordering::SeqCst) < target
            && self.router.closed_reason().is_none()
            && Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Counts one server message as handled.
    pub fn mark_handled(&self) {
        self.router.mark_handled();
    }

    /// Why the connection ended, once it has.
    pub fn closed_reason(&self) -> Option<String> {
        self.router.closed_reason()
    }

    pub fn close(&self) {
        self.transport.close();
        self.router.close("closed by shepherd");
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.close();
    }
}

fn server_info(result: &Value) -> Result<ServerInfo, McpError> {
    let version = result["protocolVersion"].as_str().unwrap_or_default();
    if !PROTOCOL_VERSIONS.contains(&version) {
        return Err(McpError::Protocol(format!(
            "the server speaks protocol version '{version}'; shepherd supports {}",
            PROTOCOL_VERSIONS.join(", ")
        )));
    }
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Ok(ServerInfo {
        protocol_version: version.to_string(),
        name: text(&result["serverInfo"]["name"]),
        version: text(&result["serverInfo"]["version"]),
        capabilities: result.get("capabilities").cloned().unwrap_or(Value::Null),
        instructions: result["instructions"].as_str().map(String::from),
    })
}

fn tool_info(item: &Value) -> Result<ToolInfo, McpError> {
    let name = item["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| McpError::Protocol(format!("a tool without a name: {item}")))?;
    let description = item["description"]
        .as_str()
        .or(item["title"].as_str())
        .unwrap_or_default();
    Ok(ToolInfo {
        name: name.to_string(),
        description: description.to_string(),
        input_schema: object_schema(item.get("inputSchema")),
        annotations: item.get("annotations").cloned().unwrap_or(Value::Null),
    })
}

/// The tool's input schema as an object schema with `properties`, which is
/// what every provider requires even for tools without arguments.
fn object_schema(schema: Option<&Value>) -> Value {
    let mut schema = match schema {
        Some(Value::Object(map)) => map.clone(),
        _ => Map::new(),
    };
    schema.insert("type".into(), Value::String("object".into()));
    if !schema.get("properties").is_some_and(Value::is_object) {
        schema.insert("properties".into(), Value::Object(Map::new()));
    }
    Value::Object(schema)
}

/// Reduces a `tools/call` result to text and images: text items as they
/// are, images decoded, other content described in one line,
/// `structuredContent` when there is no content.
pub fn call_result(result: &Value) -> Result<CallResult, McpError> {
    let is_error = result["isError"].as_bool().unwrap_or(false);
    let mut content = Content::default();
    match result.get("content") {
        Some(Value::Array(items)) => items
            .iter()
            .for_each(|item| content.push(content_part(item))),
        None | Some(Value::Null) => {}
        Some(other) => {
            return Err(McpError::Protocol(format!(
                "tools/call content is not a list: {other}"
            )))
        }
    }
    if content.text.is_empty() && content.images.is_empty() {
        if let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null()) {
            content.text = structured.to_string();
        }
    }
    Ok(CallResult {
        text: content.text,
        images: content.images,
        is_error,
    })
}

/// A `resources/read` result's `contents`.
fn resource_contents(result: &Value) -> Result<Content, McpError> {
    let items = result["contents"]
        .as_array()
        .ok_or_else(|| McpError::Protocol("resources/read without contents".into()))?;
    let mut content = Content::default();
    items
        .iter()
        .for_each(|item| content.push(resource_part(item)));
    Ok(content)
}

fn content_part(item: &Value) -> Part {
    let field = |name: &str| item[name].as_str().unwrap_or_default();
    match field("type") {
        "text" => Part::Text(field("text").to_string()),
        "image" => image_part(field("data"), field("mimeType")),
        "audio" => Part::Text(format!(
            "[audio content: {}, {} bytes of base64]",
            field("mimeType"),
            field("data").len()
        )),
        "resource_link" => Part::Text(format!(
            "[resource link: {} {}]",
            field("uri"),
            field("name")
        )),
        "resource" => resource_part(&item["resource"]),
        other => Part::Text(format!("[unsupported content type '{other}']")),
    }
}

/// Base64 image data; one that does not decode becomes a note saying why, so
/// the model learns the tool sent an image it cannot be shown.
fn image_part(data: &str, mime: &str) -> Part {
    match Image::from_base64(data) {
        Ok(image) => Part::Image(image),
        Err(error) => Part::Text(format!("[image content: {mime}, not readable: {error}]")),
    }
}

/// An embedded or read resource: its text, an image blob as an image, any
/// other blob described.
fn resource_part(resource: &Value) -> Part {
    let mime = resource["mimeType"].as_str().unwrap_or("unknown type");
    match (resource["text"].as_str(), resource["blob"].as_str()) {
        (Some(text), _) => Part::Text(text.to_string()),
        (None, Some(blob)) if mime.to_ascii_lowercase().starts_with("image/") => {
            image_part(blob, mime)
        }
        _ => Part::Text(format!(
            "[binary resource {} ({mime})]",
            resource["uri"].as_str().unwrap_or_default(),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_become_text_and_errors_stay_errors() {
        let result = json!({"content": [
            {"type": "text", "text": "one"},
            {"type": "audio", "data": "AAAA", "mimeType": "audio/wav"},
            {"type": "resource", "resource": {"uri": "f://a", "text": "inline"}},
        ]});
        let out = call_result(&result).unwrap();
        assert_eq!(
            out.text,
            "one\n[audio content: audio/wav, 4 bytes of base64]\ninline"
        );
        assert!(!out.is_error && out.images.is_empty());
        let failed =
            call_result(&json!({"content": [{"type":"text","text":"bad"}], "isError": true}));
        assert_eq!(
            failed.unwrap(),
            CallResult {
                text: "bad".into(),
                images: Vec::new(),
                is_error: true
            }
        );
        let structured = call_result(&json!({"content": [], "structuredContent": {"a": 1}}));
        assert_eq!(structured.unwrap().text, r#"{"a":1}"#);
        assert!(call_result(&json!({"content": "x"})).is_err());
    }

    #[test]
    fn images_and_image_resources_become_images_where_they_stood() {
        let png = crate::core::image::test_png(2, 3, [7, 8, 9]);
        let data = crate::util::base64::encode(&png);
        let result = json!({"content": [
            {"type": "text", "text": "before"},
            {"type": "image", "data": data, "mimeType": "image/png"},
            {"type": "text", "text": "after"},
            {"type": "image", "data": "AAAA", "mimeType": "image/png"},
            {"type": "resource", "resource": {"uri": "s://shot", "mimeType": "image/png", "blob": data}},
            {"type": "resource", "resource": {"uri": "s://z", "mimeType": "application/zip", "blob": "UEs="}},
        ]});
        let out = call_result(&result).unwrap();
        let expected = Image::from_bytes(png.clone()).unwrap();
        let at: Vec<usize> = out.images.iter().map(|p| p.at).collect();
        assert_eq!(at, [6, out.text.find("\n[binary").unwrap()]);
        assert!(out.images.iter().all(|p| p.image == expected));
        assert!(
            out.text.starts_with(
                "before\nafter\n[image content: image/png, not readable: unsupported image type"
            ),
            "{}",
            out.text
        );
        assert!(
            out.text
                .ends_with("\n[binary resource s://z (application/zip)]"),
            "{}",
            out.text
        );
        let read = resource_contents(&json!({"contents": [
            {"uri": "s://shot", "mimeType": "image/png", "blob": data},
        ]}))
        .unwrap();
        assert_eq!((read.text.as_str(), read.images.len()), ("", 1));
        assert_eq!(*read.images[0].image.bytes, png);
    }

    #[test]
    fn images_past_the_cap_become_notes() {
        let data = crate::util::base64::encode(&crate::core::image::test_png(1, 1, [0, 0, 0]));
        let item = json!({"type": "image", "data": data, "mimeType": "image/png"});
        let items = vec![item; MAX_IMAGES + 2];
        let out = call_result(&json!({ "content": items })).unwrap();
        assert_eq!(out.images.len(), MAX_IMAGES);
        assert_eq!(
            out.text.matches("left out: more than").count(),
            2,
            "{}",
            out.text
        );
    }

    #[test]
    fn schemas_become_object_schemas() {
        assert_eq!(
            object_schema(None),
            json!({"type": "object", "properties": {}})
        );
        let given =
            json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]});
        assert_eq!(object_schema(Some(&given)), given);
    }

    #[test]
    fn unsupported_versions_are_refused() {
        let ok =
            server_info(&json!({"protocolVersion": "2024-11-05", "serverInfo": {"name": "s"}}));
        assert_eq!(ok.unwrap().name, "s");
        let err = server_info(&json!({"protocolVersion": "1999-01-01"})).unwrap_err();
        assert!(err.to_string().contains("1999-01-01"), "{err}");
    }

    fn raw_server() -> crate::config::mcp::McpServerConfig {
        let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/raw_server.py");
        crate::config::mcp::McpServerConfig {
            command: Some(python),
            args: vec![script.into(), "normal".into()],
            ..Default::default()
        }
    }

    #[test]
    fn cancel_and_timeout_send_notifications_cancelled() {
        let (client, _, _ends) = crate::mcp::hub::connect("raw", &raw_server()).unwrap();
        let cancel = Arc::new(AtomicBool::new(false));
        let result = std::thread::scope(|scope| {
            let call = scope.spawn(|| {
                client.call_tool("hang", &json!({}), Duration::from_secs(60), Some(&cancel))
            });
            // The request is registered before it is sent, so once it is
            // pending the cancel can only come after it.
            while lock(&client.router.pending).is_empty() {
                std::thread::sleep(Duration::from_millis(5));
            }
            cancel.store(true, Ordering::SeqCst);
            call.join().unwrap()
        });
        assert_eq!(result, Err(McpError::Cancelled));
        let timed_out = client.call_tool("hang", &json!({}), Duration::from_millis(200), None);
        assert!(
            matches!(timed_out, Err(McpError::Timeout { .. })),
            "{timed_out:?}"
        );
        let seen = client
            .call_tool("cancelled", &json!({}), Duration::from_secs(10), None)
            .unwrap();
        let seen: Value = serde_json::from_str(&seen.text).unwrap();
        // Id 1 was initialize; 2 and 3 were the two pages of tools/list.
        assert_eq!(
            seen,
            json!([[4, "cancelled by the user"], [5, "timed out"]])
        );
    }

    #[test]
    fn router_matches_ids_and_fails_waiters_on_close() {
        let (router, ends) = Router::new();
        let first = router.register(1).unwrap();
        let second = router.register(2).unwrap();
        router.dispatch(json!({"jsonrpc": "2.0", "id": 1, "result": {"ok": true}}));
        router.dispatch(json!({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}));
        router.dispatch(json!({"jsonrpc": "2.0", "id": 99, "result": {}}));
        assert_eq!(first.recv().unwrap(), Ok(json!({"ok": true})));
        assert_eq!(
            ends.inbox.recv().unwrap()["method"],
            "notifications/tools/list_changed"
        );
        router.close("gone");
        assert_eq!(second.recv().unwrap(), Err(McpError::Closed("gone".into())));
        assert!(ends.ended.recv().is_err());
        assert!(matches!(router.register(3), Err(McpError::Closed(_))));
    }
}

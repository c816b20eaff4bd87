//! Tools that run on a tool server (`--tool-backend HOST:PORT`).
//!
//! [`ToolBackend`] speaks the line protocol of [`super::rpc`]: one TCP
//! connection per call (with `auth` first when a token is set or this user's
//! own tool server published one, see `crate::util::auth`), a connect
//! timeout, and a deadline for the answer; while waiting it checks the
//! agent's cancel flag, so a cancelled turn stops waiting at once (the
//! server's own timeouts bound the tool). [`registry`] lists the server's
//! tools and wraps each in a [`RemoteTool`], so the agent, approvals and the
//! audit log treat them like local ones. Failures are typed
//! ([`RemoteError`]) and reach the model as failed tool results.

use std::fmt;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::rpc::{self, Failure, Request, Response, ToolEntry};
use super::{Tool, ToolContext, ToolOutput, ToolRegistry};

/// Longest answer line accepted from a server.
const MAX_RESPONSE_LINE: usize = 32 * 1024 * 1024;
/// How often a waiting call checks the cancel flag.
const POLL: Duration = Duration::from_millis(100);

/// Where the tool server is and how long to wait for it.
#[derive(Clone)]
pub struct BackendConfig {
    /// `HOST:PORT`.
    pub address: String,
    pub token: Option<String>,
    pub connect_timeout: Duration,
    /// For `listTools`, `auth` and `sideEffecting`.
    pub query_timeout: Duration,
    /// For `executeTool`; tools have their own, shorter timeouts on the server.
    pub call_timeout: Duration,
}

/// Never prints the token.
impl fmt::Debug for BackendConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendConfig")
            .field("address", &self.address)
            .field("token", &self.token.as_ref().map(|_| "***"))
            .finish()
    }
}

impl BackendConfig {
    pub fn new(address: impl Into<String>, token: Option<String>) -> BackendConfig {
        BackendConfig {
            address: address.into(),
            token,
            connect_timeout: Duration::from_secs(10),
            query_timeout: Duration::from_secs(30),
            call_timeout: Duration::from_secs(600),
        }
    }
}

/// Why a call to the tool server failed.
#[derive(Debug, Clone, PartialEq)]
pub enum RemoteError {
    Connect(String),
    Timeout,
    Cancelled,
    Io(String),
    /// The answer was not a JSON-RPC response to our request.
    Protocol(String),
    /// The server answered with a JSON-RPC error.
    Rpc(rpc::RpcError),
}

impl fmt::Display for RemoteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RemoteError::Connect(m) => write!(f, "cannot connect to the tool server: {m}"),
            RemoteError::Timeout => f.write_str("the tool server did not answer in time"),
            RemoteError::Cancelled => f.write_str("cancelled while the tool server worked"),
            RemoteError::Io(m) => write!(f, "connection to the tool server failed: {m}"),
            RemoteError::Protocol(m) => write!(f, "the tool server sent an invalid answer: {m}"),
            RemoteError::Rpc(e) => write!(f, "the tool server refused: {} ({})", e.message, e.code),
        }
    }
}

impl std::error::Error for RemoteError {}

/// A client of one tool server.
pub struct ToolBackend {
    config: BackendConfig,
    next_id: AtomicU64,
}

impl ToolBackend {
    pub fn new(config: BackendConfig) -> ToolBackend {
        ToolBackend {
            config,
            next_id: AtomicU64::new(1),
        }
    }

    /// The server's tools.
    pub fn list(&self) -> Result<Vec<ToolEntry>, RemoteError> {
        let never = AtomicBool::new(false);
        let result = self.call("listTools", Value::Null, self.config.query_timeout, &never)?;
        serde_json::from_value(result).map_err(|e| RemoteError::Protocol(e.to_string()))
    }

    /// Runs one tool there; the failures of the tool itself come back as an error output.
    pub fn execute(&self, name: &str, arguments: &Value, cancel: &AtomicBool) -> ToolOutput {
        let params = json!({"name": name, "arguments": arguments});
        match self.call("executeTool", params, self.config.call_timeout, cancel) {
            Ok(Value::String(text)) => ToolOutput::ok(text.clone(), summary_of(&text)),
            Ok(other) => ToolOutput::ok(other.to_string(), summary_of(&other.to_string())),
            Err(RemoteError::Rpc(error)) if error.code == rpc::TOOL_FAILED => {
                tool_failure(error.data)
            }
            Err(error) => ToolOutput::fail(format!("Error: {error}")),
        }
    }

    /// Asks the server whether a call changes anything; true when it cannot tell.
    pub fn side_effecting(&self, name: &str, arguments: &Value) -> bool {
        let never = AtomicBool::new(false);
        let params = json!({"name": name, "arguments": arguments});
        !matches!(
            self.call("sideEffecting", params, self.config.query_timeout, &never),
            Ok(Value::Bool(false))
        )
    }

    /// One request on a fresh connection; `auth` first when a token is set.
    fn call(
        &self,
        method: &str,
        params: Value,
        timeout: Duration,
        cancel: &AtomicBool,
    ) -> Result<Value, RemoteError> {
        let deadline = Instant::now() + timeout;
        let mut conn = Conn {
            stream: self.connect()?,
            pending: Vec::new(),
        };
        // The configured token, else the one this user's own tool server on that
        // loopback port published (read per call: a restarted server has a new one).
        let token = self
            .config
            .token
            .clone()
            .or_else(|| crate::util::auth::find_for_address(&self.config.address));
        if let Some(token) = token {
            let params = json!({"token": token});
            self.exchange(&mut conn, "auth", params, deadline, cancel)?;
        }
        self.exchange(&mut conn, method, params, deadline, cancel)
    }

    fn connect(&self) -> Result<TcpStream, RemoteError> {
        let addresses: Vec<SocketAddr> = self
            .config
            .address
            .to_socket_addrs()
            .map_err(|e| RemoteError::Connect(format!("{}: {e}", self.config.address)))?
            .collect();
        let mut last = format!("{}: no address", self.config.address);
        for address in addresses {
            match TcpStream::connect_timeout(&address, self.config.connect_timeout) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = format!("{address}: {e}"),
            }
        }
        Err(RemoteError::Connect(last))
    }

    fn exchange(
        &self,
        conn: &mut Conn,
        method: &str,
        params: Value,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Value, RemoteError> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let request = Request::call(method, params, id);
        let mut line = serde_json::to_vec(&request).map_err(|e| RemoteError::Io(e.to_string()))?;
        line.push(b'\n');
        conn.stream
            .set_write_timeout(Some(self.config.query_timeout))
            .map_err(io_error)?;
        conn.stream.write_all(&line).map_err(io_error)?;
        let answer = conn.read_answer(deadline, cancel)?;
        let response: Response =
            serde_json::from_slice(&answer).map_err(|e| RemoteError::Protocol(e.to_string()))?;
        if response.id != id {
            return Err(RemoteError::Protocol(format!(
                "answer for id {} to request {id}",
                response.id
            )));
        }
        match (response.result, response.error) {
            (_, Some(error)) => Err(RemoteError::Rpc(error)),
            (Some(result), None) => Ok(result),
            (None, None) => Err(RemoteError::Protocol("neither result nor error".into())),
        }
    }
}

/// One connection and the bytes read past the last answer.
struct Conn {
    stream: TcpStream,
    pending: Vec<u8>,
}

impl Conn {
    /// Waits for one answer line until `deadline`, giving up early on `cancel`.
    fn read_answer(
        &mut self,
        deadline: Instant,
        cancel: &AtomicBool,
    ) -> Result<Vec<u8>, RemoteError> {
        let mut chunk = [0u8; 8192];
        loop {
            if let Some(line) = self.take_line() {
                return Ok(line);
            }
            if self.pending.len() > MAX_RESPONSE_LINE {
                return Err(RemoteError::Protocol("answer too long".into()));
            }
            if cancel.load(Ordering::SeqCst) {
                return Err(RemoteError::Cancelled);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RemoteError::Timeout);
            }
            self.stream
                .set_read_timeout(Some(left.min(POLL)))
                .map_err(io_error)?;
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(RemoteError::Io("the server closed the connection".into())),
                Ok(n) => self.pending.extend_from_slice(&chunk[..n]),
                Err(e) if is_wait(&e) => {}
                Err(e) => return Err(io_error(e)),
            }
        }
    }

    /// The first complete, non-blank line in `pending`, without its `\n`.
    fn take_line(&mut self) -> Option<Vec<u8>> {
        while let Some(at) = self.pending.iter().position(|b| *b == b'\n') {
            let mut line: Vec<u8> = self.pending.drain(..=at).collect();
            line.pop();
            if !line.iter().all(u8::is_ascii_whitespace) {
                return Some(line);
            }
        }
        None
    }
}

fn is_wait(error: &io::Error) -> bool {
    matches!(
        error.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

fn io_error(error: io::Error) -> RemoteError {
    RemoteError::Io(error.to_string())
}

fn tool_failure(data: Option<Value>) -> ToolOutput {
    match data.and_then(|d| serde_json::from_value::<Failure>(d).ok()) {
        Some(failure) => ToolOutput {
            summary: if failure.summary.is_empty() {
                summary_of(&failure.content)
            } else {
                failure.summary
            },
            content: failure.content,
            error: true,
            images: Vec::new(),
        },
        None => ToolOutput::fail("Error: the tool failed on the tool server"),
    }
}

/// A one-line summary of a result text the server sent without one.
fn summary_of(text: &str) -> String {
    let lines = text.lines().count();
    let first: String = text.lines().next().unwrap_or("").chars().take(60).collect();
    if lines > 1 {
        format!("{first} (+{} lines)", lines - 1)
    } else {
        first
    }
}

/// One tool of the server.
pub struct RemoteTool {
    entry: ToolEntry,
    backend: Arc<ToolBackend>,
}

impl Tool for RemoteTool {
    fn name(&self) -> &str {
        &self.entry.name
    }

    fn description(&self) -> &str {
        &self.entry.description
    }

    fn parameters(&self) -> Value {
        self.entry.parameters.clone()
    }

    fn run(&self, args: &Value, ctx: &ToolContext) -> ToolOutput {
        self.backend.execute(&self.entry.name, args, &ctx.cancel)
    }

    fn side_effecting(&self, args: &Value) -> bool {
        self.backend.side_effecting(&self.entry.name, args)
    }
}

/// A registry of every tool the server offers.
pub fn registry(config: BackendConfig) -> Result<ToolRegistry, RemoteError> {
    let backend = Arc::new(ToolBackend::new(config));
    let mut registry = ToolRegistry::empty();
    for mut entry in backend.list()? {
        // Servers other than shepherd may leave the schema out.
        if !entry.parameters.is_object() {
            entry.parameters = json!({"type": "object", "properties": {}});
        }
        let backend = backend.clone();
        registry.register(Box::new(RemoteTool { entry, backend }));
    }
    Ok(registry)
}

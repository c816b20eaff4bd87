//! `shepherd --toolserver`: shepherd's tools served over TCP as JSON-RPC 2.0,
//! one JSON object per line (the wire format is in [`crate::tools::rpc`]).
//!
//! No model runs here: a client (another shepherd with `--tool-backend`, or
//! anything that writes JSON lines) lists the tools with `listTools` and runs
//! them with `executeTool`. The registry is the one the agent would get, so
//! every tool shepherd has is offered.
//!
//! Threads and limits: one accept loop (`accept.rs`, the HTTP servers' own:
//! backing off on errors such as EMFILE instead of dying), one named thread per
//! connection up to [`ToolServerConfig::max_connections`], lines capped at
//! [`ToolServerConfig::max_line`]. A connection has 10 s from accept, however
//! slowly its bytes come, to send its first request and, with a token, to
//! authenticate; until then it is the first to give way at the cap (the oldest
//! such one is closed for a newcomer), so connections that never authenticate
//! cannot lock out the token holder; only when none is left does a newcomer get
//! a [`rpc::BUSY`] error. A client that stays silent for
//! [`ToolServerConfig::idle_timeout`] later is closed.
//!
//! Framing: a connection must open with a JSON-RPC request. Another protocol
//! talking to the port is refused before any later line runs: an HTTP request
//! or header line (a web page can `fetch` this port and put JSON lines in the
//! body), or a blank first line, closes the connection without an answer; a
//! line that is not JSON gets one parse error and closes it. JSON that is no
//! valid request is answered and the connection goes on: invalid request,
//! "method not found", "invalid params"; only JSON-RPC notifications
//! (requests without `id`) are answered with silence, as the spec requires.
//!
//! Security: loopback by default; with a token (required for any other bind)
//! a connection must first call `auth {token}` (compared in constant time);
//! a wrong token is answered and the connection closed. Nobody can be asked
//! here, so calls go through the approval policy with no approver: read-only
//! tools run, side-effecting ones only when `--approve` (or config) allows
//! them. Every `executeTool` is written to the audit log.

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use serde::Deserialize;
use serde_json::{json, Value};

use crate::core::ToolCall;
use crate::stream::{read_capped_line, CappedLine};
use crate::tools::approval::{self, Headless, Policy};
use crate::tools::audit::AuditLog;
use crate::tools::rpc::{self, Frame, Response, RpcError, ToolEntry};
use crate::tools::{args, ToolContext, ToolOutput, ToolRegistry};

use super::accept::{self, ConnectionCap, DeadlineReader, Place, Reading};
use super::access::Access;
use crate::frontend::signals;

/// The tool server's settings, passed as values.
pub struct ToolServerConfig {
    pub host: String,
    pub port: u16,
    pub token: Option<String>,
    pub policy: Policy,
    /// File tools stay inside it; `bash` starts in it.
    pub root: PathBuf,
    pub max_connections: usize,
    pub max_line: usize,
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
}

impl ToolServerConfig {
    pub fn new(host: String, port: u16, token: Option<String>, policy: Policy) -> Self {
        ToolServerConfig {
            host,
            port,
            token,
            policy,
            root: std::env::current_dir().unwrap_or_else(|_| PathBuf::from(".")),
            max_connections: 64,
            max_line: 4 * 1024 * 1024,
            idle_timeout: Duration::from_secs(300),
            write_timeout: Duration::from_secs(30),
        }
    }
}

/// What every connection shares.
struct Shared {
    tools: ToolRegistry,
    config: ToolServerConfig,
    /// Where a client without the token finds it ([`Access::refusal_hint`]).
    hint: String,
    audit: Option<AuditLog>,
    /// Tool runs in progress, for a clean exit on a signal.
    running: AtomicUsize,
    /// Set on a signal: running tools stop and kill their process groups.
    cancel: Arc<AtomicBool>,
}

/// Serves until the process is stopped. Returns the exit code.
pub fn run(
    tools: ToolRegistry,
    config: ToolServerConfig,
    access: &Access,
    audit: Option<AuditLog>,
) -> i32 {
    let listener = match TcpListener::bind((config.host.as_str(), config.port)) {
        Ok(listener) => listener,
        Err(error) => {
            eprintln!(
                "shepherd: cannot listen on {}:{}: {error}",
                config.host, config.port
            );
            return 1;
        }
    };
    // The watcher is in place before the listening line: a signal right after
    // it still goes through the one cleanup.
    let port = listener.local_addr().map_or(config.port, |a| a.port());
    let shared = Arc::new(Shared {
        tools,
        hint: access.refusal_hint(port),
        config,
        audit,
        running: AtomicUsize::new(0),
        cancel: Arc::new(AtomicBool::new(false)),
    });
    let (busy, cancel) = (shared.clone(), shared.clone());
    signals::watch(signals::Watch::server(
        Box::new(move || busy.running.load(Ordering::SeqCst) > 0),
        Box::new(move || cancel.cancel.store(true, Ordering::SeqCst)),
    ));
    match listener.local_addr() {
        Ok(addr) => access.announce(
            addr,
            &format!(
                "toolserver listening on {addr} ({} tools)",
                shared.tools.names().len()
            ),
        ),
        Err(error) => eprintln!("shepherd: toolserver listening (address unknown: {error})"),
    }
    serve(&listener, &shared);
    0
}

/// The accept loop ([`accept::run`]): each connection within the cap gets its own
/// thread; one over it, when no unauthenticated connection is left to give way,
/// gets [`rpc::BUSY`] and is closed.
fn serve(listener: &TcpListener, shared: &Arc<Shared>) {
    accept::run(
        listener,
        shared.config.max_connections,
        |stream, peer, place, cap| start_connection(stream, peer, place, cap, shared),
        refuse_busy,
    );
}

fn refuse_busy(stream: TcpStream) {
    let error = RpcError::new(rpc::BUSY, "too many connections; try again later");
    let _ = answer_and_close(stream, &Response::err(Value::Null, error));
}

fn start_connection(
    stream: TcpStream,
    peer: SocketAddr,
    place: Place,
    cap: &Arc<ConnectionCap>,
    shared: &Arc<Shared>,
) {
    // Until it has authenticated (and sent a request), the connection may be
    // evicted to make room: see `accept`.
    let reading = stream.try_clone().ok().map(|s| cap.reading(Arc::new(s)));
    let shared = shared.clone();
    let spawned = std::thread::Builder::new()
        .name("shepherd-toolconn".into())
        .spawn(move || {
            if let Err(error) = serve_connection(stream, &shared, reading) {
                crate::util::log::debug(crate::util::log::Category::Tools, || {
                    format!("toolserver connection {peer}: {error}")
                });
            }
            drop(place);
        });
    if let Err(error) = spawned {
        eprintln!("shepherd: cannot start a toolserver connection thread: {error}");
    }
}

fn answer_and_close(mut stream: TcpStream, response: &Response) -> io::Result<()> {
    stream.set_write_timeout(Some(Duration::from_secs(5)))?;
    write_response(&mut stream, response)
}

fn write_response(out: &mut impl Write, response: &Response) -> io::Result<()> {
    let mut line = serde_json::to_vec(response).map_err(io::Error::other)?;
    line.push(b'\n');
    out.write_all(&line)?;
    out.flush()
}

/// Per-connection state.
struct Connection<'a> {
    shared: &'a Shared,
    authenticated: bool,
    /// Set after a failed `auth`: answer, then hang up.
    close: bool,
    /// The connection's socket, watched while a tool runs; `None` in unit tests.
    socket: Option<TcpStream>,
}

/// How long after it was accepted a connection may take to send its first
/// request and, where a token is set, to authenticate: a hard deadline, however
/// slowly its bytes trickle in (OpenSSH's `LoginGraceTime`). After that the idle
/// timeout applies. A client does both as soon as it has connected, so this only
/// stops sockets that never become clients from holding places of the cap.
const PRE_AUTH_DEADLINE: Duration = Duration::from_secs(10);

/// How long a closing connection reads (and drops) what its client still
/// sends, so the last answer is not lost to a reset.
const LINGER: Duration = Duration::from_millis(500);

/// The line loop. A connection must open with a JSON-RPC request: anything
/// else is another protocol talking to this port (a web page's `fetch` sends
/// an HTTP request line first) and is closed before a later line runs.
fn serve_connection(
    stream: TcpStream,
    shared: &Shared,
    mut reading: Option<Reading>,
) -> io::Result<()> {
    let deadline = Instant::now() + PRE_AUTH_DEADLINE.min(shared.config.idle_timeout);
    stream.set_write_timeout(Some(shared.config.write_timeout))?;
    let socket = stream.try_clone()?;
    let mut reader = BufReader::new(DeadlineReader {
        stream: &socket,
        deadline: Some(deadline),
    });
    let mut writer = BufWriter::new(stream.try_clone()?);
    let mut conn = Connection {
        shared,
        authenticated: shared.config.token.is_none(),
        close: false,
        socket: Some(stream.try_clone()?),
    };
    let mut greeted = false;
    loop {
        // An idle timeout or a reset ends the connection; there is no request to answer.
        let (reply, after) = match read_capped_line(&mut reader, shared.config.max_line)? {
            CappedLine::Eof => return Ok(()),
            CappedLine::TooLong { .. } => too_long(shared.config.max_line, greeted),
            CappedLine::Text(bytes) => conn.step(&bytes, greeted),
        };
        if let Some(reply) = reply {
            write_reply(&mut writer, &reply)?;
        }
        match after {
            After::HangUp => return Ok(()),
            After::Close => break,
            _ if conn.close => break,
            After::Read => {}
            After::Greeted => greeted = true,
        }
        // A client now: no deadline but the idle timeout, and never evicted.
        if greeted && conn.authenticated && reading.take().is_some() {
            reader.get_mut().deadline = None;
            stream.set_read_timeout(Some(shared.config.idle_timeout))?;
        }
    }
    linger_close(&stream, &mut reader);
    Ok(())
}

/// What the line loop does after answering a line.
#[derive(Debug, PartialEq, Eq)]
enum After {
    /// Read the next line.
    Read,
    /// The first line was a request: the peer speaks JSON-RPC; read on.
    Greeted,
    /// The answer was the last one: close, reading what is still in flight.
    Close,
    /// Not JSON-RPC: close at once, answering nothing.
    HangUp,
}

/// A line over the cap is answered; it ends a connection that has not sent a
/// request yet (nothing shows that it speaks JSON-RPC).
fn too_long(max_line: usize, greeted: bool) -> (Option<Reply>, After) {
    let reply = Reply::error(
        rpc::INVALID_REQUEST,
        format!("line longer than {max_line} bytes"),
    );
    (
        Some(reply),
        if greeted { After::Read } else { After::Close },
    )
}

fn write_reply(writer: &mut impl Write, reply: &Reply) -> io::Result<()> {
    match reply {
        Reply::One(response) => write_response(writer, response),
        Reply::Batch(responses) => {
            let mut line = serde_json::to_vec(responses).map_err(io::Error::other)?;
            line.push(b'\n');
            writer.write_all(&line)?;
            writer.flush()
        }
    }
}

/// Closes after a final answer: stop sending, then read and drop what the
/// client is still sending for a moment, so the answer is not lost to a reset.
fn linger_close(stream: &TcpStream, reader: &mut impl Read) {
    let _ = stream.shutdown(Shutdown::Write);
    let end = Instant::now() + LINGER;
    let mut sink = [0u8; 8192];
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left.is_zero() || stream.set_read_timeout(Some(left)).is_err() {
            return;
        }
        if !matches!(reader.read(&mut sink), Ok(n) if n > 0) {
            return;
        }
    }
}

/// What one line is answered with.
enum Reply {
    One(Box<Response>),
    Batch(Vec<Response>),
}

impl Reply {
    /// An error about the line itself, so without an id.
    fn error(code: i64, message: String) -> Reply {
        Reply::One(Box::new(Response::err(
            Value::Null,
            RpcError::new(code, message),
        )))
    }
}

impl Connection<'_> {
    /// Answers one line. Blank lines between requests are skipped; a line
    /// that is not JSON gets one parse error and ends the connection (a
    /// client that sends garbage is out of step); HTTP lines, and a first
    /// line that is blank, end it without an answer.
    fn step(&mut self, bytes: &[u8], greeted: bool) -> (Option<Reply>, After) {
        match rpc::frame(bytes) {
            Frame::Blank if greeted => (None, After::Read),
            Frame::Blank | Frame::Http => (None, After::HangUp),
            Frame::NotJson(error) => {
                let message = format!("parse error: {error}");
                (Some(Reply::error(rpc::PARSE_ERROR, message)), After::Close)
            }
            Frame::Json(value) if greeted => (self.handle_json(value), After::Read),
            Frame::Json(value) if rpc::is_request_shaped(&value) => {
                (self.handle_json(value), After::Greeted)
            }
            Frame::Json(_) => {
                let message = "the first line of a connection must be a JSON-RPC 2.0 request";
                let reply = Reply::error(rpc::INVALID_REQUEST, message.into());
                (Some(reply), After::Close)
            }
        }
    }

    /// Answers a request or a batch; `None` when there is nothing to answer.
    fn handle_json(&mut self, value: Value) -> Option<Reply> {
        match value {
            Value::Array(items) if items.is_empty() => {
                Some(Reply::error(rpc::INVALID_REQUEST, "empty batch".into()))
            }
            Value::Array(items) => {
                let responses: Vec<Response> =
                    items.into_iter().filter_map(|v| self.handle(v)).collect();
                (!responses.is_empty()).then_some(Reply::Batch(responses))
            }
            single => self.handle(single).map(|r| Reply::One(Box::new(r))),
        }
    }

    /// Answers one request object; `None` for a notification.
    fn handle(&mut self, value: Value) -> Option<Response> {
        let request = match rpc::parse_request(value) {
            Ok(request) => request,
            Err(response) => return Some(*response),
        };
        let outcome = self.dispatch(&request.method, request.params);
        let id = request.id?;
        Some(match outcome {
            Ok(result) => Response::ok(id, result),
            Err(error) => Response::err(id, error),
        })
    }

    fn dispatch(&mut self, method: &str, params: Value) -> Result<Value, RpcError> {
        if method == "auth" {
            return self.auth(params);
        }
        if !self.authenticated {
            // A client that does not start with `auth` is not one of ours: answer
            // how to get in, then hang up.
            self.close = true;
            return Err(RpcError::new(
                rpc::UNAUTHORIZED,
                format!(
                    "this tool server requires a token: call auth with {{\"token\": ...}} \
                     first; {}",
                    self.shared.hint
                ),
            ));
        }
        match method {
            "listTools" => Ok(self.list_tools()),
            "executeTool" => self.execute(params),
            "sideEffecting" => self.side_effecting(params),
            other => Err(RpcError::new(
                rpc::METHOD_NOT_FOUND,
                format!(
                    "method not found: {other} (methods: listTools, executeTool, \
                     sideEffecting, auth)"
                ),
            )),
        }
    }

    fn auth(&mut self, params: Value) -> Result<Value, RpcError> {
        let Some(expected) = &self.shared.config.token else {
            self.authenticated = true;
            return Ok(Value::Bool(true));
        };
        let given = params.get("token").and_then(Value::as_str).unwrap_or("");
        if crate::util::auth::token_matches(given, expected) {
            self.authenticated = true;
            Ok(Value::Bool(true))
        } else {
            self.close = true;
            Err(RpcError::new(rpc::UNAUTHORIZED, "invalid token"))
        }
    }

    fn list_tools(&self) -> Value {
        let entries: Vec<ToolEntry> = self
            .shared
            .tools
            .specs()
            .into_iter()
            .map(|spec| ToolEntry {
                name: spec.name,
                description: spec.description,
                parameters: spec.parameters,
            })
            .collect();
        serde_json::to_value(entries).unwrap_or(Value::Array(Vec::new()))
    }

    fn execute(&self, params: Value) -> Result<Value, RpcError> {
        let call = tool_call(params)?;
        let tool = self.shared.tools.get(&call.name).ok_or_else(|| {
            invalid_params(format!(
                "unknown tool '{}' (tools: {})",
                call.name,
                self.shared.tools.names().join(", ")
            ))
        })?;
        if let Err(message) = args::validate(&tool.parameters(), &call.arguments) {
            return Err(invalid_params(format!(
                "invalid arguments for '{}': {message}",
                call.name
            )));
        }
        let side_effecting = tool.side_effecting(&call.arguments);
        // Nobody to ask here: what the rules do not allow is refused.
        let policy = self.shared.config.policy.clone();
        let mut gate = approval::Gate::new(policy, Box::new(Headless), "toolserver")
            .with_audit(self.shared.audit.clone());
        let (verdict, output) = gate.run_judged(
            &call,
            Some(side_effecting),
            &mut |_| {},
            &AtomicBool::new(false),
            || self.run_watched(&call),
        );
        if !verdict.allowed {
            return Err(RpcError::new(rpc::DENIED, output.content));
        }
        if output.error {
            let mut error = RpcError::new(rpc::TOOL_FAILED, "the tool reported a failure");
            error.data = Some(json!({"content": output.content, "summary": output.summary}));
            return Err(error);
        }
        // The line protocol carries text only: an image (`read_image`, an MCP
        // tool's) travels as its summary.
        Ok(Value::String(output.text_with_summaries()))
    }

    /// Runs an allowed call while a watcher cancels it when the client hangs
    /// up (or the server is stopped), so its process group does not outlive
    /// the request.
    fn run_watched(&self, call: &ToolCall) -> ToolOutput {
        let cancel = Arc::new(AtomicBool::new(false));
        let mut ctx = ToolContext::new(self.shared.config.root.clone());
        ctx.cancel = cancel.clone();
        self.shared.running.fetch_add(1, Ordering::SeqCst);
        let output = std::thread::scope(|scope| {
            // Dropping `done` (when the tool returns) ends the watcher at once.
            let (done, finished) = crossbeam_channel::bounded::<()>(0);
            if let Some(socket) = &self.socket {
                let stop = &self.shared.cancel;
                let cancel = &cancel;
                scope.spawn(move || watch_peer(socket, cancel, &finished, stop));
            }
            let output = self.shared.tools.run(call, &ctx);
            drop(done);
            output
        });
        self.shared.running.fetch_sub(1, Ordering::SeqCst);
        output
    }

    fn side_effecting(&self, params: Value) -> Result<Value, RpcError> {
        let call = tool_call(params)?;
        match self.shared.tools.get(&call.name) {
            Some(tool) => Ok(Value::Bool(tool.side_effecting(&call.arguments))),
            None => Err(invalid_params(format!("unknown tool '{}'", call.name))),
        }
    }
}

/// How often a running call checks whether its client is still there.
const PEEK_POLL: Duration = Duration::from_millis(100);

/// Sets `cancel` when the peer closes the connection or `stop` is set; ends
/// when `finished` closes. The connection thread is inside the tool meanwhile,
/// so switching the socket to non-blocking for each peek cannot disturb it.
fn watch_peer(socket: &TcpStream, cancel: &AtomicBool, finished: &Receiver<()>, stop: &AtomicBool) {
    let mut byte = [0u8; 1];
    while let Err(RecvTimeoutError::Timeout) = finished.recv_timeout(PEEK_POLL) {
        if stop.load(Ordering::SeqCst) {
            cancel.store(true, Ordering::SeqCst);
            return;
        }
        if socket.set_nonblocking(true).is_err() {
            return;
        }
        let peeked = socket.peek(&mut byte);
        let _ = socket.set_nonblocking(false);
        match peeked {
            // Data waiting (the next request) means the client is there.
            Ok(n) if n > 0 => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            // End of stream or a reset: the client hung up.
            _ => {
                cancel.store(true, Ordering::SeqCst);
                return;
            }
        }
    }
}

fn invalid_params(message: impl Into<String>) -> RpcError {
    RpcError::new(rpc::INVALID_PARAMS, message)
}

/// `{name, arguments}` of `executeTool` and `sideEffecting`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CallParams {
    name: String,
    #[serde(default)]
    arguments: Option<Value>,
}

fn tool_call(params: Value) -> Result<ToolCall, RpcError> {
    let params: CallParams = serde_json::from_value(params).map_err(|e| {
        invalid_params(format!(
            "expected {{\"name\": string, \"arguments\": object}}: {e}"
        ))
    })?;
    let arguments = match params.arguments {
        None | Some(Value::Null) => json!({}),
        Some(object @ Value::Object(_)) => object,
        Some(_) => return Err(invalid_params("arguments must be an object")),
    };
    Ok(ToolCall {
        id: "toolserver".into(),
        name: params.name,
        arguments,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shared(token: Option<&str>, policy: Policy) -> Shared {
        let mut config =
            ToolServerConfig::new("127.0.0.1".into(), 0, token.map(String::from), policy);
        config.root = std::env::temp_dir();
        Shared {
            tools: ToolRegistry::builtin(),
            hint: String::new(),
            config,
            audit: None,
            running: AtomicUsize::new(0),
            cancel: Arc::default(),
        }
    }

    /// Sends `line` on a connection that has made its first request and
    /// returns the answer as JSON (`Null` for no answer).
    fn check(conn: &mut Connection<'_>, line: &str) -> Value {
        match conn.step(line.as_bytes(), true).0 {
            Some(Reply::One(r)) => serde_json::to_value(r).unwrap(),
            Some(Reply::Batch(r)) => serde_json::to_value(r).unwrap(),
            None => Value::Null,
        }
    }

    fn code(answer: &Value) -> i64 {
        answer["error"]["code"].as_i64().unwrap_or(0)
    }

    #[test]
    fn envelope_errors_have_their_codes() {
        let shared = shared(None, Policy::default());
        let mut conn = Connection {
            shared: &shared,
            authenticated: true,
            close: false,
            socket: None,
        };
        let cases = [
            ("{not json", rpc::PARSE_ERROR, Value::Null),
            ("[]", rpc::INVALID_REQUEST, Value::Null),
            ("7", rpc::INVALID_REQUEST, Value::Null),
            (
                r#"{"jsonrpc":"1.0","method":"listTools","id":1}"#,
                rpc::INVALID_REQUEST,
                json!(1),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"x"}"#,
                rpc::INVALID_REQUEST,
                json!("x"),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"listTools","id":{}}"#,
                rpc::INVALID_REQUEST,
                Value::Null,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"nope","id":2}"#,
                rpc::METHOD_NOT_FOUND,
                json!(2),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"executeTool","id":3}"#,
                rpc::INVALID_PARAMS,
                json!(3),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"zz"},"id":4}"#,
                rpc::INVALID_PARAMS,
                json!(4),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"read","arguments":[1]},"id":5}"#,
                rpc::INVALID_PARAMS,
                json!(5),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"read","arguments":{}},"id":6}"#,
                rpc::INVALID_PARAMS,
                json!(6),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"write","arguments":{"file_path":"x","content":"y"}},"id":7}"#,
                rpc::DENIED,
                json!(7),
            ),
        ];
        for (line, expected, id) in cases {
            let answer = check(&mut conn, line);
            assert_eq!(code(&answer), expected, "{line} → {answer}");
            assert_eq!(answer["id"], id, "{line} → {answer}");
            assert_eq!(answer["jsonrpc"], "2.0");
        }
        // A notification runs but is not answered; a batch answers its requests.
        assert_eq!(
            check(&mut conn, r#"{"jsonrpc":"2.0","method":"listTools"}"#),
            Value::Null
        );
        let batch = check(
            &mut conn,
            r#"[{"jsonrpc":"2.0","method":"listTools","id":1},{"jsonrpc":"2.0","method":"x"},5]"#,
        );
        assert_eq!(batch.as_array().unwrap().len(), 2, "{batch}");
        assert!(batch[0]["result"].is_array());
        assert_eq!(code(&batch[1]), rpc::INVALID_REQUEST);
    }

    /// A tool server on a free port, serving in the background.
    fn listening(shared: Shared) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(shared);
        std::thread::spawn(move || serve(&listener, &shared));
        addr
    }

    /// One line of answer (`Null` when the server closed instead).
    fn answer(reader: &mut impl std::io::BufRead) -> Value {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(n) if n > 0 => serde_json::from_str(&line).unwrap(),
            _ => Value::Null,
        }
    }

    #[test]
    fn a_connection_over_the_cap_gets_an_answer_then_closes() {
        let mut over = shared(None, Policy::default());
        over.config.max_connections = 0;
        let addr = listening(over);
        let client = TcpStream::connect(addr).unwrap();
        let mut reader = std::io::BufReader::new(client);
        assert_eq!(code(&answer(&mut reader)), rpc::BUSY);
        assert_eq!(answer(&mut reader), Value::Null, "closed after the answer");
    }

    #[test]
    fn connections_that_never_authenticate_cannot_lock_out_the_token_holder() {
        // 70 connections past the cap of 64, each having sent part of a line and
        // going on a byte at a time: each newcomer takes the place of the oldest
        // of them, so the token holder always gets in.
        let addr = listening(shared(Some("s3cret"), Policy::default()));
        let mut drips = Vec::new();
        for _ in 0..70 {
            let mut stream = TcpStream::connect(addr).unwrap();
            stream.write_all(b"{\"jsonrpc\"").unwrap();
            drips.push(stream);
        }
        for round in 0..5 {
            for stream in &mut drips {
                let _ = stream.write_all(b" ");
            }
            let client = TcpStream::connect(addr).unwrap();
            let mut writer = client.try_clone().unwrap();
            let mut reader = std::io::BufReader::new(client);
            let auth = r#"{"jsonrpc":"2.0","method":"auth","params":{"token":"s3cret"},"id":1}"#;
            let list = r#"{"jsonrpc":"2.0","method":"listTools","id":2}"#;
            writer
                .write_all(format!("{auth}\n{list}\n").as_bytes())
                .unwrap();
            assert_eq!(answer(&mut reader)["result"], true, "round {round}");
            assert!(answer(&mut reader)["result"].is_array(), "round {round}");
            drips.push(TcpStream::connect(addr).unwrap());
        }
    }

    #[test]
    fn a_connection_that_trickles_bytes_is_closed_at_its_deadline() {
        // The deadline counts from accept, not from the last byte.
        let mut config = shared(Some("s3cret"), Policy::default());
        config.config.idle_timeout = Duration::from_millis(400);
        let addr = listening(config);
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let started = Instant::now();
        let mut byte = [0u8; 1];
        let closed = loop {
            if stream.write_all(b" ").is_err() {
                break true;
            }
            match stream.read(&mut byte) {
                Ok(0) => break true,
                Ok(_) => break false,
                Err(_) if started.elapsed() < Duration::from_secs(10) => continue,
                Err(_) => break false,
            }
        };
        assert!(closed, "still open after {:?}", started.elapsed());
    }

    #[test]
    fn every_malformed_line_gets_exactly_one_error_and_nothing_panics() {
        let shared = shared(None, Policy::default());
        let mut conn = Connection {
            shared: &shared,
            authenticated: true,
            close: false,
            socket: None,
        };
        let valid = r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"read","arguments":{"file_path":"x"}},"id":42}"#;
        let mut corpus: Vec<Vec<u8>> = (1..valid.len())
            .map(|at| valid.as_bytes()[..at].to_vec())
            .collect();
        let nested = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        for line in [
            nested.as_str(),
            r#"{"jsonrpc":"2.0","method":"listTools","id":1e400}"#,
            r#"{"jsonrpc":2,"method":"listTools","id":1}"#,
            r#"{"jsonrpc":"2.0","method":7,"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"executeTool","params":"read","id":1}"#,
            r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":3},"id":1}"#,
            r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"read","extra":1},"id":1}"#,
            "null",
            "\"listTools\"",
            "{}",
        ] {
            corpus.push(line.as_bytes().to_vec());
        }
        corpus.push(vec![0xc3, 0x28, b'{', 0xff]);
        for line in &corpus {
            let (reply, after) = conn.step(line, true);
            let answer = match reply {
                Some(Reply::One(r)) => serde_json::to_value(r).unwrap(),
                other => panic!(
                    "{:?}: expected one answer, got {}",
                    String::from_utf8_lossy(line),
                    other.is_some()
                ),
            };
            let code = answer["error"]["code"].as_i64().unwrap_or(0);
            assert!(code < -32000, "{answer}");
            // Not JSON: answered, then the connection ends; JSON errors are the client's to fix.
            let expected = if code == rpc::PARSE_ERROR {
                After::Close
            } else {
                After::Read
            };
            assert_eq!(after, expected, "{answer}");
        }
        assert!(!conn.close);
        let list = check(
            &mut conn,
            r#"{"jsonrpc":"2.0","method":"listTools","id":1}"#,
        );
        assert!(list["result"].is_array());
    }

    #[test]
    fn a_connection_must_open_with_a_request() {
        let shared = shared(None, Policy::default());
        let mut conn = Connection {
            shared: &shared,
            authenticated: true,
            close: false,
            socket: None,
        };
        let mut first = |line: &str| {
            let (reply, after) = conn.step(line.as_bytes(), false);
            let code = match reply {
                Some(Reply::One(r)) => r.error.map_or(0, |e| e.code),
                Some(Reply::Batch(_)) => 1,
                None => -1,
            };
            (code, after)
        };
        let cases = [
            ("POST / HTTP/1.1\r", -1, After::HangUp),
            ("Host: 127.0.0.1\r", -1, After::HangUp),
            ("", -1, After::HangUp),
            ("\r", -1, After::HangUp),
            ("hello", rpc::PARSE_ERROR, After::Close),
            ("7", rpc::INVALID_REQUEST, After::Close),
            ("[]", rpc::INVALID_REQUEST, After::Close),
            (
                r#"[{"jsonrpc":"2.0","method":"listTools","id":1},5]"#,
                rpc::INVALID_REQUEST,
                After::Close,
            ),
            (
                r#"{"jsonrpc":"1.0","method":"listTools","id":1}"#,
                rpc::INVALID_REQUEST,
                After::Close,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"listTools","id":1}"#,
                0,
                After::Greeted,
            ),
            (
                r#"[{"jsonrpc":"2.0","method":"listTools","id":1}]"#,
                1,
                After::Greeted,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"nope","id":1}"#,
                rpc::METHOD_NOT_FOUND,
                After::Greeted,
            ),
        ];
        for (line, code, after) in cases {
            assert_eq!(first(line), (code, after), "{line:?}");
        }
        assert_eq!(too_long(10, false).1, After::Close);
        assert_eq!(too_long(10, true).1, After::Read);
    }

    #[test]
    fn tokens_gate_every_method_but_auth() {
        let shared = shared(Some("s3cret"), Policy::default());
        let mut conn = Connection {
            shared: &shared,
            authenticated: false,
            close: false,
            socket: None,
        };
        let list = r#"{"jsonrpc":"2.0","method":"listTools","id":1}"#;
        assert_eq!(code(&check(&mut conn, list)), rpc::UNAUTHORIZED);
        let good = r#"{"jsonrpc":"2.0","method":"auth","params":{"token":"s3cret"},"id":2}"#;
        assert_eq!(check(&mut conn, good)["result"], true);
        assert!(check(&mut conn, list)["result"].is_array());
        let bad = r#"{"jsonrpc":"2.0","method":"auth","params":{"token":"s3cre"},"id":3}"#;
        assert_eq!(code(&check(&mut conn, bad)), rpc::UNAUTHORIZED);
        assert!(conn.close, "a wrong token ends the connection");
    }

    #[test]
    fn runs_tools_and_reports_failures_and_side_effects() {
        let policy = Policy {
            allow: vec!["all".into()],
            ..Policy::default()
        };
        let shared = shared(None, policy);
        let mut conn = Connection {
            shared: &shared,
            authenticated: true,
            close: false,
            socket: None,
        };
        let time = check(
            &mut conn,
            r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"get_time","arguments":{"format":"%Y"}},"id":1}"#,
        );
        assert!(
            time["result"].as_str().unwrap().ends_with("(UTC)"),
            "{time}"
        );
        let missing = check(
            &mut conn,
            r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"read","arguments":{"file_path":"no-such-file-here"}},"id":2}"#,
        );
        assert_eq!(code(&missing), rpc::TOOL_FAILED, "{missing}");
        assert!(missing["error"]["data"]["content"].is_string());
        let side = |args: &str| {
            let line = format!(
                r#"{{"jsonrpc":"2.0","method":"sideEffecting","params":{{"name":"http_request","arguments":{args}}},"id":9}}"#
            );
            check(
                &mut Connection {
                    shared: &shared,
                    authenticated: true,
                    close: false,
                    socket: None,
                },
                &line,
            )["result"]
                .clone()
        };
        assert_eq!(side(r#"{"url":"http://x","method":"get"}"#), json!(false));
        assert_eq!(side(r#"{"url":"http://x","method":"POST"}"#), json!(true));
    }
}

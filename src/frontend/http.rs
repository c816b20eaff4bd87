//! The HTTP/1.1 server layer shared by every server mode (the CLI server now,
//! the OpenAI API server later): the only module that touches sockets for our
//! servers.
//!
//! Why not tiny_http: as measured (reference "tiny_http 0.12.0"), its accept
//! loop exits for good on the first `accept()` error (EMFILE), it starts a
//! thread per connection without a cap, has no socket timeouts and no header
//! size limit, and its `respond()` path holds 8 KiB before sending anything.
//! None of that can be fixed from outside because the accept loop and the
//! connection threads are private, so this module is a small HTTP/1.1 server
//! of its own (see docs/DEPENDENCIES.md). What it does:
//!
//! - The accept loop survives every error, backing off on resource exhaustion.
//! - One named thread per connection, at most [`Limits::max_connections`]; a
//!   connection over the cap gets `503` and is closed at once.
//! - An absolute deadline for the request head and body (slow-loris), a cap on
//!   the head (`431`) and on the body (`413`, decided from `Content-Length`
//!   before reading it).
//! - One request per connection (`Connection: close`), so an idle keep-alive
//!   connection never holds a thread.
//! - [`Policy`]: `Host` and `Origin` checks against DNS rebinding, CORS for
//!   configured origins only, a bearer token compared in constant time.
//! - [`SseStream`] writes chunked frames itself and flushes every event, and
//!   notices a client that went away (for cancelling its request).
//! - One access-log line per request on stderr: method, path (no query),
//!   status, duration. Headers are never logged, so neither is a token.
//!
//! A [`Handler`] gets a parsed [`Request`] and a [`Responder`] that must be
//! used once: a JSON answer, or turned into an SSE stream.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::auth;
use crate::util::net;

/// Size and time limits of the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Connections served at once (each has one thread); more get `503`.
    pub max_connections: usize,
    /// The request line and headers together.
    pub max_head_bytes: usize,
    pub max_headers: usize,
    /// Largest accepted body.
    pub max_body_bytes: usize,
    /// From accepting the connection to having the whole request.
    pub request_deadline: Duration,
    /// Longest a single write may block (a client that stopped reading).
    pub write_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            max_head_bytes: 16 * 1024,
            max_headers: 100,
            max_body_bytes: 10 * 1024 * 1024,
            request_deadline: Duration::from_secs(10),
            write_timeout: Duration::from_secs(10),
        }
    }
}

/// Who may talk to the server, and from which web pages.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    /// When set, every route except the public ones needs it.
    pub auth_token: Option<String>,
    /// Web origins (`https://app.example`) that get CORS headers.
    pub cors_origins: Vec<String>,
    /// Paths that need no token (`/health`).
    pub public_paths: Vec<String>,
    /// Where a refused client can find the token, for the 401 message.
    pub token_hint: Option<String>,
}

/// A parsed request, body included.
#[derive(Debug)]
pub struct Request {
    pub method: String,
    /// The path without the query string.
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
}

impl Request {
    /// The first header called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Serves requests; called on the connection's own thread.
pub trait Handler: Send + Sync {
    fn handle(&self, request: Request, responder: Responder);
}

/// A bound listener, not yet serving.
pub struct Server {
    listener: TcpListener,
    limits: Limits,
    policy: Arc<Policy>,
    loopback: bool,
}

impl Server {
    /// Binds `host:port` (port 0 picks a free port).
    #[cfg(test)]
    pub fn bind(host: &str, port: u16, limits: Limits, policy: Policy) -> io::Result<Server> {
        Server::bind_with(host, port, limits, |_| policy)
    }

    /// [`Server::bind`] with the policy made once the address is known (its
    /// refusals name the port).
    pub fn bind_with(
        host: &str,
        port: u16,
        limits: Limits,
        policy: impl FnOnce(SocketAddr) -> Policy,
    ) -> io::Result<Server> {
        let listener = TcpListener::bind((host, port))?;
        let addr = listener.local_addr()?;
        Ok(Server {
            listener,
            limits,
            policy: Arc::new(policy(addr)),
            loopback: addr.ip().is_loopback(),
        })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Accepts connections forever.
    pub fn run(self, handler: Arc<dyn Handler>) {
        let active = Arc::new(AtomicUsize::new(0));
        let mut backoff = AcceptBackoff::default();
        loop {
            match self.listener.accept() {
                Ok((stream, peer)) => {
                    backoff.reset();
                    self.dispatch(stream, peer, &active, &handler);
                }
                Err(error) => backoff.wait(&error),
            }
        }
    }

    fn dispatch(
        &self,
        stream: TcpStream,
        peer: SocketAddr,
        active: &Arc<AtomicUsize>,
        handler: &Arc<dyn Handler>,
    ) {
        if active.fetch_add(1, Ordering::SeqCst) >= self.limits.max_connections {
            active.fetch_sub(1, Ordering::SeqCst);
            refuse_busy(stream);
            return;
        }
        let guard = ActiveGuard(active.clone());
        let connection = Connection {
            stream,
            peer,
            limits: self.limits,
            policy: self.policy.clone(),
            loopback: self.loopback,
        };
        let handler = handler.clone();
        let spawned = std::thread::Builder::new()
            .name("shepherd-http".into())
            .stack_size(512 * 1024)
            .spawn(move || {
                let _guard = guard;
                connection.serve(&*handler);
            });
        if let Err(error) = spawned {
            eprintln!("shepherd: cannot start a connection thread: {error}");
        }
    }
}

/// Decrements the connection count when a connection thread ends (or never started).
struct ActiveGuard(Arc<AtomicUsize>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits after a failed `accept()`: out of descriptors or memory, retrying at
/// once would spin, and giving up would take the server down for good.
#[derive(Default)]
struct AcceptBackoff {
    delay_ms: u64,
}

impl AcceptBackoff {
    fn reset(&mut self) {
        self.delay_ms = 0;
    }

    fn wait(&mut self, error: &io::Error) {
        if matches!(
            error.kind(),
            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
        ) {
            return;
        }
        self.delay_ms = (self.delay_ms * 2).clamp(10, 1000);
        eprintln!(
            "shepherd: accept failed ({error}); retrying in {} ms",
            self.delay_ms
        );
        std::thread::sleep(Duration::from_millis(self.delay_ms));
    }
}

/// Over the connection cap: a short 503 and close, without reading the request.
fn refuse_busy(stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let body = error_body("server busy: too many connections", "server_busy");
    let mut writer = &stream;
    let _ = write_head(
        &mut writer,
        503,
        &[
            ("Content-Type", "application/json".into()),
            ("Retry-After", "1".into()),
        ],
        Some(body.len()),
    )
    .and_then(|()| writer.write_all(body.as_bytes()));
    let _ = stream.shutdown(Shutdown::Both);
}

/// One accepted connection, served on its own thread.
struct Connection {
    stream: TcpStream,
    peer: SocketAddr,
    limits: Limits,
    policy: Arc<Policy>,
    loopback: bool,
}

/// Why a request could not be read.
#[derive(Debug)]
enum ReadError {
    /// Answer with this status and message, then close.
    Reject(u16, String),
    /// The client went away or was too slow: just close.
    Gone,
}

impl Connection {
    fn serve(self, handler: &dyn Handler) {
        let _ = self
            .stream
            .set_write_timeout(Some(self.limits.write_timeout));
        let started = Instant::now();
        let deadline = started + self.limits.request_deadline;
        let request = match read_request(&self.stream, self.peer, &self.limits, deadline) {
            Ok(request) => request,
            Err(ReadError::Gone) => return,
            Err(ReadError::Reject(status, message)) => {
                let log = AccessLog::new("-", "-", started);
                self.into_responder(log, None).error(status, &message);
                return;
            }
        };
        let log = AccessLog::new(&request.method, &request.path, started);
        let cors = self.allowed_cors(request.header("origin"));
        let checked = self.check(&request);
        let responder = self.into_responder(log, cors);
        match checked {
            Err((status, message)) => responder.error(status, &message),
            Ok(()) if request.method == "OPTIONS" => responder.preflight(),
            Ok(()) => handler.handle(request, responder),
        }
    }

    /// Hands the socket to the one responder of this connection.
    fn into_responder(self, log: AccessLog, cors: Option<String>) -> Responder {
        Responder {
            stream: Some(self.stream),
            log,
            cors_origin: cors,
        }
    }

    /// The origin to echo in CORS headers: only a configured one.
    fn allowed_cors(&self, origin: Option<&str>) -> Option<String> {
        let origin = origin?;
        self.policy
            .cors_origins
            .iter()
            .any(|o| o == origin || o == "*")
            .then(|| origin.to_string())
    }

    /// Host, Origin and token, in that order: the one check every route of
    /// every HTTP server passes before its handler sees the request.
    fn check(&self, request: &Request) -> Result<(), (u16, String)> {
        if self.loopback && !net::is_loopback_host(request.header("host").unwrap_or("")) {
            return Err((
                403,
                "Host header is not a loopback name (use http://127.0.0.1:PORT or \
                 http://localhost:PORT)"
                    .into(),
            ));
        }
        if let Some(origin) = request.header("origin") {
            if !origin_is_loopback(origin) && self.allowed_cors(Some(origin)).is_none() {
                return Err((
                    403,
                    "Origin is not allowed: web pages from other sites may not call this \
                     server (allow one with --cors-origin ORIGIN)"
                        .into(),
                ));
            }
        }
        if request.method == "OPTIONS" {
            return Ok(());
        }
        let public = self.policy.public_paths.contains(&request.path);
        match &self.policy.auth_token {
            Some(token) if !public => {
                check_token(request, token).map_err(|message| match &self.policy.token_hint {
                    Some(hint) => (401, format!("{message}; {hint}")),
                    None => (401, message),
                })
            }
            _ => Ok(()),
        }
    }
}

/// Whether the token in `Authorization: Bearer` or `x-api-key` matches,
/// byte for byte; the refusal says what was wrong and how to send it.
fn check_token(request: &Request, token: &str) -> Result<(), String> {
    let given = match (request.header("authorization"), request.header("x-api-key")) {
        (Some(value), _) => match value.split_once(' ') {
            Some((scheme, rest)) if scheme.eq_ignore_ascii_case("bearer") => {
                rest.trim_start_matches([' ', '\t'])
            }
            _ => {
                return Err(
                    "this server takes its token as 'Authorization: Bearer TOKEN' \
                            (or 'x-api-key: TOKEN'), not another scheme"
                        .into(),
                )
            }
        },
        (None, Some(key)) => key,
        (None, None) => {
            return Err("this server requires a token: send 'Authorization: Bearer TOKEN'".into())
        }
    };
    if auth::token_matches(given, token) {
        Ok(())
    } else {
        Err("invalid token".into())
    }
}

/// `http://localhost:3000` and the like: pages served from this machine.
fn origin_is_loopback(origin: &str) -> bool {
    let rest = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    rest.is_some_and(|authority| !authority.contains('/') && net::is_loopback_host(authority))
}

/// A `Read` over the socket that gives up at an absolute deadline, however
/// slowly the bytes trickle in.
struct DeadlineReader<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        (&*self.stream).read(buf)
    }
}

fn read_request(
    stream: &TcpStream,
    peer: SocketAddr,
    limits: &Limits,
    deadline: Instant,
) -> Result<Request, ReadError> {
    let mut reader = BufReader::new(DeadlineReader { stream, deadline });
    let head = read_head(&mut reader, limits)?;
    let (method, target) = parse_request_line(&head[0])?;
    let headers = parse_headers(&head[1..])?;
    let request = Request {
        method,
        path: target.split('?').next().unwrap_or("").to_string(),
        headers,
        body: Vec::new(),
        peer,
    };
    let body = read_body(&mut reader, &request, limits)?;
    Ok(Request { body, ..request })
}

/// The request line and header lines, without terminators.
fn read_head(reader: &mut impl BufRead, limits: &Limits) -> Result<Vec<String>, ReadError> {
    let mut lines = Vec::new();
    let mut used = 0usize;
    loop {
        let mut line = Vec::new();
        let cap = (limits.max_head_bytes - used.min(limits.max_head_bytes)) as u64 + 1;
        let n = reader
            .take(cap)
            .read_until(b'\n', &mut line)
            .map_err(|_| ReadError::Gone)?;
        used += n;
        if n == 0 {
            return Err(ReadError::Gone);
        }
        if !line.ends_with(b"\n") || used > limits.max_head_bytes {
            return Err(ReadError::Reject(431, "request head too large".into()));
        }
        let text = String::from_utf8(line)
            .map_err(|_| ReadError::Reject(400, "request head is not UTF-8".into()))?;
        let text = text.trim_end_matches(['\r', '\n']).to_string();
        if text.is_empty() {
            if lines.is_empty() {
                continue; // tolerated: stray CRLF before a request
            }
            return Ok(lines);
        }
        if lines.len() > limits.max_headers {
            return Err(ReadError::Reject(431, "too many headers".into()));
        }
        lines.push(text);
    }
}

fn parse_request_line(line: &str) -> Result<(String, String), ReadError> {
    let mut parts = line.split(' ');
    match (parts.next(), parts.next(), parts.next(), parts.next()) {
        (Some(method), Some(target), Some(version), None)
            if !method.is_empty() && target.starts_with('/') && version.starts_with("HTTP/1.") =>
        {
            Ok((method.to_string(), target.to_string()))
        }
        _ => Err(ReadError::Reject(400, "malformed request line".into())),
    }
}

fn parse_headers(lines: &[String]) -> Result<Vec<(String, String)>, ReadError> {
    lines
        .iter()
        .map(|line| {
            let (name, value) = line
                .split_once(':')
                .filter(|(name, _)| !name.is_empty() && !name.contains(' '))
                .ok_or_else(|| ReadError::Reject(400, "malformed header line".into()))?;
            Ok((
                name.to_string(),
                value.trim_matches([' ', '\t']).to_string(),
            ))
        })
        .collect()
}

fn read_body(
    reader: &mut impl Read,
    request: &Request,
    limits: &Limits,
) -> Result<Vec<u8>, ReadError> {
    if request.header("transfer-encoding").is_some() {
        return Err(ReadError::Reject(
            411,
            "chunked request bodies are not supported; send Content-Length".into(),
        ));
    }
    let length = match request.header("content-length") {
        None => return Ok(Vec::new()),
        Some(raw) => raw
            .parse::<u64>()
            .map_err(|_| ReadError::Reject(400, "bad Content-Length".into()))?,
    };
    if length > limits.max_body_bytes as u64 {
        return Err(ReadError::Reject(
            413,
            format!("request body over {} bytes", limits.max_body_bytes),
        ));
    }
    let mut body = Vec::with_capacity(length as usize);
    reader
        .take(length)
        .read_to_end(&mut body)
        .map_err(|_| ReadError::Gone)?;
    if body.len() as u64 != length {
        return Err(ReadError::Gone);
    }
    Ok(body)
}

/// The access-log line of one request, written when the response is done.
struct AccessLog {
    method: String,
    path: String,
    started: Instant,
    status: u16,
}

impl AccessLog {
    fn new(method: &str, path: &str, started: Instant) -> AccessLog {
        AccessLog {
            method: escape_log(method),
            path: escape_log(path),
            started,
            status: 0,
        }
    }
}

impl Drop for AccessLog {
    fn drop(&mut self) {
        let ms = self.started.elapsed().as_millis();
        eprintln!("{} {} {} {ms}ms", self.method, self.path, self.status);
    }
}

/// Control characters escaped, so a request cannot forge log lines.
fn escape_log(text: &str) -> String {
    text.chars()
        .take(200)
        .flat_map(|c| {
            if c.is_control() {
                c.escape_default().collect::<Vec<_>>()
            } else {
                vec![c]
            }
        })
        .collect()
}

/// The error object every server answers with.
#[derive(Serialize)]
struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    code: String,
}

fn error_body(message: &str, kind: &str) -> String {
    error_json(message, kind, 0)
}

fn error_json(message: &str, kind: &str, status: u16) -> String {
    let body = ErrorBody {
        error: ErrorDetail {
            message,
            kind,
            code: status.to_string(),
        },
    };
    serde_json::to_string(&body).unwrap_or_default()
}

fn error_kind(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 | 503 => "server_busy",
        400..=499 => "invalid_request_error",
        _ => "server_error",
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Status",
    }
}

fn write_head(
    out: &mut impl Write,
    status: u16,
    headers: &[(&str, String)],
    content_length: Option<usize>,
) -> io::Result<()> {
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nConnection: close\r\n",
        reason(status)
    );
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    match content_length {
        Some(n) => head.push_str(&format!("Content-Length: {n}\r\n\r\n")),
        None => head.push_str("Transfer-Encoding: chunked\r\n\r\n"),
    }
    out.write_all(head.as_bytes())
}

/// Answers one request, once.
pub struct Responder {
    stream: Option<TcpStream>,
    log: AccessLog,
    cors_origin: Option<String>,
}

impl Responder {
    fn base_headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![("Cache-Control", "no-store".to_string())];
        if let Some(origin) = &self.cors_origin {
            headers.push(("Access-Control-Allow-Origin", origin.clone()));
            headers.push(("Vary", "Origin".into()));
        }
        headers
    }

    /// A JSON answer.
    pub fn json(self, status: u16, value: &impl Serialize) {
        self.json_with(status, value, &[]);
    }

    /// A JSON answer with extra headers (`Retry-After`).
    pub fn json_with(self, status: u16, value: &impl Serialize, extra: &[(&'static str, String)]) {
        let body = serde_json::to_string(value).unwrap_or_default();
        self.send(status, extra, body.as_bytes());
    }

    /// A plain-text answer (`/metrics`).
    pub fn text(mut self, status: u16, content_type: &str, body: &str) {
        self.log.status = status;
        let Some(stream) = self.stream.take() else {
            return;
        };
        let mut headers = self.base_headers();
        headers.push(("Content-Type", content_type.to_string()));
        let mut writer = &stream;
        let result = write_head(&mut writer, status, &headers, Some(body.len()))
            .and_then(|()| writer.write_all(body.as_bytes()))
            .and_then(|()| writer.flush());
        if result.is_ok() {
            linger_close(&stream);
        }
    }

    /// `{"error": {message, type, code}}` with the status.
    pub fn error(self, status: u16, message: &str) {
        self.error_with(status, message, &[]);
    }

    pub fn error_with(self, status: u16, message: &str, extra: &[(&'static str, String)]) {
        let body = error_json(message, error_kind(status), status);
        self.send(status, extra, body.as_bytes());
    }

    fn preflight(self) {
        let extra = [
            (
                "Access-Control-Allow-Methods",
                "GET, POST, PUT, PATCH, DELETE, OPTIONS".into(),
            ),
            (
                "Access-Control-Allow-Headers",
                "Authorization, Content-Type, X-Api-Key".into(),
            ),
            ("Access-Control-Max-Age", "600".into()),
        ];
        self.send(204, &extra, b"");
    }

    fn send(mut self, status: u16, extra: &[(&'static str, String)], body: &[u8]) {
        self.log.status = status;
        let Some(stream) = self.stream.take() else {
            return;
        };
        let mut headers = self.base_headers();
        headers.push(("Content-Type", "application/json".into()));
        headers.extend(extra.iter().cloned());
        let mut writer = &stream;
        let result = write_head(&mut writer, status, &headers, Some(body.len()))
            .and_then(|()| writer.write_all(body))
            .and_then(|()| writer.flush());
        if result.is_ok() {
            linger_close(&stream);
        }
    }

    /// Whether the client went away before the answer started (a queued or
    /// prefilling request whose client hung up).
    pub fn client_gone(&self) -> bool {
        self.stream.as_ref().is_none_or(peer_closed)
    }

    /// Starts a `text/event-stream` answer.
    pub fn sse(mut self) -> io::Result<SseStream> {
        self.log.status = 200;
        let stream = self
            .stream
            .take()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        let mut headers = self.base_headers();
        headers.push(("Content-Type", "text/event-stream".into()));
        headers.push(("X-Accel-Buffering", "no".into()));
        // Events are small and must leave at once: no Nagle delay behind an unacked one.
        stream.set_nodelay(true)?;
        let mut writer = &stream;
        write_head(&mut writer, 200, &headers, None)?;
        writer.flush()?;
        Ok(SseStream {
            stream,
            _log: self.log,
            last_write: Instant::now(),
        })
    }
}

/// Whether the peer closed its side. The request is fully read, so any
/// readable state means end of stream or an error; a peek with a 1 ms timeout
/// tells without consuming anything.
fn peer_closed(stream: &TcpStream) -> bool {
    if stream
        .set_read_timeout(Some(Duration::from_millis(1)))
        .is_err()
    {
        return true;
    }
    let mut byte = [0u8; 1];
    match stream.peek(&mut byte) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
        ),
    }
}

/// Closes gracefully: stop sending, then read (and drop) what the client was
/// still sending for a moment, so an early answer (413) is not lost to a reset.
fn linger_close(stream: &TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut reader = DeadlineReader { stream, deadline };
    let mut sink = [0u8; 8192];
    while let Ok(n) = reader.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
}

/// A server-sent-events stream: every event is one chunk, flushed at once.
pub struct SseStream {
    stream: TcpStream,
    _log: AccessLog,
    last_write: Instant,
}

impl SseStream {
    /// Sends `data: <line>` as one event.
    pub fn send(&mut self, data: &str) -> io::Result<()> {
        let mut frame = String::with_capacity(data.len() + 8);
        for line in data.split('\n') {
            frame.push_str("data: ");
            frame.push_str(line);
            frame.push('\n');
        }
        frame.push('\n');
        self.chunk(frame.as_bytes())
    }

    /// Sends `: text`, which clients ignore: it keeps proxies and idle clients
    /// from timing out and shows whether the client is still there.
    pub fn comment(&mut self, text: &str) -> io::Result<()> {
        self.chunk(format!(": {text}\n\n").as_bytes())
    }

    /// Time since anything was written.
    pub fn idle(&self) -> Duration {
        self.last_write.elapsed()
    }

    /// One event is one write: separate writes for the size line, the data and the
    /// CRLF cost three syscalls and wake the client up to three times per token.
    fn chunk(&mut self, data: &[u8]) -> io::Result<()> {
        let size = format!("{:x}\r\n", data.len());
        let mut frame = Vec::with_capacity(size.len() + data.len() + 2);
        frame.extend_from_slice(size.as_bytes());
        frame.extend_from_slice(data);
        frame.extend_from_slice(b"\r\n");
        let mut writer = &self.stream;
        writer.write_all(&frame)?;
        writer.flush()?;
        self.last_write = Instant::now();
        Ok(())
    }

    /// Whether the client closed its side: a write would only tell after the
    /// next event, so peek at the socket (the request is fully read, so any
    /// readable state means end of stream or an error).
    pub fn client_gone(&self) -> bool {
        peer_closed(&self.stream)
    }

    /// Sends `event: <name>` and `data: <line>` as one event (Anthropic's named events).
    pub fn send_event(&mut self, name: &str, data: &str) -> io::Result<()> {
        let frame = format!("event: {name}\ndata: {data}\n\n");
        self.chunk(frame.as_bytes())
    }

    /// Ends the stream cleanly.
    pub fn finish(self) {
        let mut writer = &self.stream;
        let _ = writer.write_all(b"0\r\n\r\n").and_then(|()| writer.flush());
        let _ = self.stream.shutdown(Shutdown::Both);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Echoes the body length, or streams three events on `/sse`.
    struct Echo {
        gone: Arc<Mutex<Option<crossbeam_channel::Sender<()>>>>,
    }

    impl Handler for Echo {
        fn handle(&self, request: Request, responder: Responder) {
            if request.path == "/sse" {
                let mut sse = responder.sse().expect("sse");
                for i in 0..3 {
                    sse.send(&format!("{{\"n\":{i}}}")).expect("send");
                }
                sse.finish();
            } else if request.path == "/hold" {
                let sse = responder.sse().expect("sse");
                while !sse.client_gone() {
                    std::thread::yield_now();
                }
                if let Some(tx) = self.gone.lock().unwrap().take() {
                    let _ = tx.send(());
                }
            } else {
                responder.json(200, &serde_json::json!({"len": request.body.len()}));
            }
        }
    }

    fn start(limits: Limits, policy: Policy) -> (SocketAddr, crossbeam_channel::Receiver<()>) {
        let server = Server::bind("127.0.0.1", 0, limits, policy).expect("bind");
        let addr = server.local_addr().expect("addr");
        let (tx, rx) = crossbeam_channel::bounded(1);
        let handler = Arc::new(Echo {
            gone: Arc::new(Mutex::new(Some(tx))),
        });
        std::thread::spawn(move || server.run(handler));
        (addr, rx)
    }

    /// Sends raw bytes and reads the whole answer.
    fn raw(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request).expect("write");
        let mut out = Vec::new();
        let _ = stream.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    fn status(answer: &str) -> u16 {
        answer
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or(0)
    }

    fn get(path: &str, extra: &str) -> Vec<u8> {
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n").into_bytes()
    }

    #[test]
    fn body_is_read_by_content_length() {
        let (addr, _) = start(Limits::default(), Policy::default());
        let answer = raw(
            addr,
            b"POST /x HTTP/1.1\r\nHost: localhost:8000\r\nContent-Length: 5\r\n\r\nhello",
        );
        assert_eq!(status(&answer), 200, "{answer}");
        assert!(answer.ends_with("{\"len\":5}"), "{answer}");
    }

    #[test]
    fn limits_give_clear_statuses() {
        let limits = Limits {
            max_body_bytes: 100,
            max_head_bytes: 256,
            ..Limits::default()
        };
        let (addr, _) = start(limits, Policy::default());
        let big = b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 101\r\n\r\n";
        let answer = raw(addr, big);
        assert_eq!(status(&answer), 413, "{answer}");
        assert!(
            answer.contains("\"type\":\"request_too_large\""),
            "{answer}"
        );
        let long = get("/x", &format!("X-Pad: {}\r\n", "a".repeat(300)));
        assert_eq!(status(&raw(addr, &long)), 431);
        assert_eq!(status(&raw(addr, b"BROKEN\r\n\r\n")), 400);
        assert_eq!(
            status(&raw(addr, b"GET /x HTTP/1.1\r\nnocolon\r\n\r\n")),
            400
        );
        let chunked = get("/x", "Transfer-Encoding: chunked\r\n");
        assert_eq!(status(&raw(addr, &chunked)), 411);
    }

    #[test]
    fn slow_client_is_dropped_at_the_deadline() {
        let limits = Limits {
            request_deadline: Duration::from_millis(200),
            ..Limits::default()
        };
        let (addr, _) = start(limits, Policy::default());
        let started = Instant::now();
        let answer = raw(addr, b"GET /x HTTP/1.1\r\n");
        assert_eq!(answer, "");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn connections_over_the_cap_get_503() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let (addr, _) = start(limits, Policy::default());
        let idle: Vec<TcpStream> = (0..2).map(|_| TcpStream::connect(addr).unwrap()).collect();
        // The accept loop sees the idle pair before the third connection.
        let answer = raw(addr, &get("/x", ""));
        assert_eq!(status(&answer), 503, "{answer}");
        assert!(answer.contains("Retry-After: 1"));
        drop(idle);
        let served = (0..200).any(|_| status(&raw(addr, &get("/x", ""))) == 200);
        assert!(served, "the server recovers when connections close");
    }

    #[test]
    fn auth_host_and_origin_checks() {
        let policy = Policy {
            auth_token: Some("s3cret".into()),
            cors_origins: vec!["https://app.example".into()],
            public_paths: vec!["/health".into()],
            token_hint: None,
        };
        let (addr, _) = start(Limits::default(), policy);
        let check = |path: &str, extra: &str| status(&raw(addr, &get(path, extra)));
        assert_eq!(check("/x", ""), 401);
        assert_eq!(check("/x", "Authorization: Bearer wrong\r\n"), 401);
        assert_eq!(check("/x", "Authorization: Basic s3cret\r\n"), 401);
        assert_eq!(check("/x", "Authorization: Bearer s3cret\r\n"), 200);
        assert_eq!(check("/x", "authorization: bearer s3cret\r\n"), 200);
        assert_eq!(check("/x", "X-Api-Key: s3cret\r\n"), 200);
        assert_eq!(check("/health", ""), 200);
        let evil = |host: &str| {
            let request = format!("GET /health HTTP/1.1\r\nHost: {host}\r\n\r\n");
            status(&raw(addr, request.as_bytes()))
        };
        for host in [
            "evil.test",
            "localhost.evil.test",
            "127.0.0.1.nip.io",
            "",
            ":8000",
        ] {
            assert_eq!(evil(host), 403, "host {host:?}");
        }
        assert_eq!(evil("[::1]:8000"), 200);
        assert_eq!(check("/health", "Origin: https://evil.test\r\n"), 403);
        let allowed = raw(addr, &get("/health", "Origin: https://app.example\r\n"));
        assert!(allowed.contains("Access-Control-Allow-Origin: https://app.example"));
        let local = raw(addr, &get("/health", "Origin: http://localhost:3000\r\n"));
        assert_eq!(status(&local), 200);
        assert!(!local.contains("Access-Control-Allow-Origin"), "{local}");
        let preflight =
            "OPTIONS /x HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://app.example\r\n\r\n";
        assert_eq!(status(&raw(addr, preflight.as_bytes())), 204);
    }

    #[test]
    fn sse_frames_are_chunked_and_a_closed_client_is_noticed() {
        let (addr, gone) = start(Limits::default(), Policy::default());
        let answer = raw(addr, &get("/sse", ""));
        assert!(answer.contains("Transfer-Encoding: chunked"), "{answer}");
        assert!(answer.contains("f\r\ndata: {\"n\":0}\n\n\r\n"), "{answer}");
        assert!(answer.ends_with("0\r\n\r\n"), "{answer}");
        let mut stream = TcpStream::connect(addr).unwrap();
        stream.write_all(&get("/hold", "")).unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).unwrap();
        drop(stream);
        assert!(gone.recv_timeout(Duration::from_secs(5)).is_ok());
    }

    #[test]
    fn origins_and_log_escapes() {
        assert!(origin_is_loopback("http://127.0.0.1:8000"));
        assert!(origin_is_loopback("http://localhost:3000"));
        assert!(!origin_is_loopback("http://127.0.0.1.evil.test"));
        assert!(!origin_is_loopback("http://127.evil.com"));
        assert!(!origin_is_loopback("null"));
        assert!(!origin_is_loopback("file://"));
        assert_eq!(escape_log("/a\r\nGET /forged"), "/a\\r\\nGET /forged");
    }
}

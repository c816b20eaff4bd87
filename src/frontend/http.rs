//! The HTTP/1.1 server layer shared by the HTTP server modes (the CLI server
//! and the OpenAI API server). The tool server speaks JSON-RPC over TCP on its
//! own (sharing the accept loop of `accept.rs`), and `--rpc-worker` hands its
//! socket to ggml's RPC server.
//!
//! Why not tiny_http: as measured (reference "tiny_http 0.12.0"), its accept
//! loop exits for good on the first `accept()` error (EMFILE), it starts a
//! thread per connection without a cap, has no socket timeouts and no header
//! size limit, and its `respond()` path holds 8 KiB before sending anything.
//! None of that can be fixed from outside because the accept loop and the
//! connection threads are private, so this module is a small HTTP/1.1 server
//! of its own (see docs/DEPENDENCIES.md). What it does:
//!
//! - The accept loop survives every error, backing off on resource exhaustion
//!   (`accept.rs`, shared with the tool server).
//! - One named thread per connection, at most [`Limits::max_connections`]. At
//!   the cap the oldest connection still reading its request is shut down to
//!   make room (slow-loris); only when every connection is past its head does
//!   a newcomer get `503` and close at once.
//! - A connection that cannot be a request is answered or closed at once: a
//!   request line that is no HTTP/1.x one (`GET /` of HTTP/0.9) or a first byte
//!   no method starts with gets `400` without waiting for more; a TLS or SSLv2
//!   hello is closed unanswered; a head or body that stops arriving gets `408`.
//! - An absolute deadline for the request head and body (slow-loris), a cap on
//!   the head (`431`) and on the body (`413`, decided from `Content-Length`
//!   before reading it).
//! - A strict head: token method and header names, no control characters,
//!   one `Host`, `HTTP/1.0` or `1.1`, origin- or absolute-form targets. The
//!   body is framed by `Content-Length` alone (digits, all agreeing); any
//!   `Transfer-Encoding` is refused (`411`), so a chunked body is never read
//!   as a request. `Expect: 100-continue` is answered once the request has
//!   passed the [`Policy`], before its body is read.
//! - Keep-alive for HTTP/1.1 clients that ask for it (`Connection:
//!   keep-alive`, as the SDKs' HTTP clients and browsers do; others get
//!   `Connection: close`): after a whole answer the connection
//!   waits for the next request under the same deadline and may be evicted
//!   while it waits, so an idle one never locks out a new client; at most
//!   [`MAX_REQUESTS_PER_CONNECTION`] per connection. Bytes a client sent
//!   before the answer began (a pipelined request) are never parsed: that
//!   answer says `Connection: close`. A stream always closes.
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
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::accept::{self, DeadlineReader, Gate, Reading, Slot};
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
    /// The query string after `?`, as sent (empty without one).
    pub query: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    pub peer: SocketAddr,
}

impl Request {
    /// The value of query parameter `name` (`?action=save`), percent-decoded;
    /// the first where it repeats.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
            .find(|(key, _)| *key == name)
            .map(|(_, value)| percent_decode(value))
    }

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

/// Bound listeners (one per address, `--host a,b`), not yet serving.
pub struct Server {
    listeners: Vec<TcpListener>,
    limits: Limits,
    policy: Arc<Policy>,
}

impl Server {
    /// Binds `host:port` (port 0 picks a free port).
    #[cfg(test)]
    pub fn bind(host: &str, port: u16, limits: Limits, policy: Policy) -> io::Result<Server> {
        Server::bind_with(&[host], port, limits, |_| policy)
    }

    /// Binds every one of `hosts` on `port`, with the policy made once the
    /// address is known (its refusals name the port). Port 0 picks a free port
    /// on the first address, and the others take the same.
    pub fn bind_with(
        hosts: &[&str],
        port: u16,
        limits: Limits,
        policy: impl FnOnce(SocketAddr) -> Policy,
    ) -> io::Result<Server> {
        let (first, others) = hosts.split_first().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, "no address to listen on")
        })?;
        let listener = TcpListener::bind((*first, port))?;
        let addr = listener.local_addr()?;
        let mut listeners = vec![listener];
        for host in others {
            listeners.push(TcpListener::bind((*host, addr.port()))?);
        }
        Ok(Server {
            listeners,
            limits,
            policy: Arc::new(policy(addr)),
        })
    }

    /// The first address's (where port 0 was chosen).
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listeners[0].local_addr()
    }

    /// Every address listened on, as `http://ADDR` joined with `and`.
    pub fn urls(&self) -> String {
        let urls: Vec<String> = self
            .listeners
            .iter()
            .filter_map(|l| l.local_addr().ok())
            .map(|addr| format!("http://{addr}"))
            .collect();
        urls.join(" and ")
    }

    /// Accepts connections forever: on this thread for the first address, on
    /// one thread each for the others, all within one connection cap.
    pub fn run(self, handler: Arc<dyn Handler>) {
        let gate = Arc::new(accept::Gate::default());
        let Server {
            mut listeners,
            limits,
            policy,
        } = self;
        let first = listeners.remove(0);
        for listener in listeners {
            let (gate, handler, policy) = (gate.clone(), handler.clone(), policy.clone());
            let spawned = std::thread::Builder::new()
                .name("shepherd-accept".into())
                .spawn(move || serve_listener(&listener, &gate, limits, &policy, &handler));
            if let Err(error) = spawned {
                eprintln!("shepherd: cannot start an accept thread: {error}");
            }
        }
        serve_listener(&first, &gate, limits, &policy, &handler);
    }
}

/// One listener's accept loop ([`accept::run`]) under the shared `gate`.
fn serve_listener(
    listener: &TcpListener,
    gate: &Arc<Gate>,
    limits: Limits,
    policy: &Arc<Policy>,
    handler: &Arc<dyn Handler>,
) {
    accept::run_gated(
        listener,
        gate,
        limits.max_connections,
        |stream, peer, slot, gate| dispatch(stream, peer, slot, gate, limits, policy, handler),
        refuse_busy,
    );
}

/// Serves an admitted connection on a thread of its own. Loopback is the
/// address it reached: the Host check guards a loopback listener only.
fn dispatch(
    stream: TcpStream,
    peer: SocketAddr,
    slot: Slot,
    gate: &Arc<Gate>,
    limits: Limits,
    policy: &Arc<Policy>,
    handler: &Arc<dyn Handler>,
) {
    let loopback = stream
        .local_addr()
        .is_ok_and(|addr| addr.ip().is_loopback());
    let stream = Arc::new(stream);
    // Registered here, in the accept loop, so the cap sees it before the next accept.
    let reading = gate.reading(stream.clone());
    let connection = Connection {
        stream,
        peer,
        limits,
        policy: policy.clone(),
        loopback,
        gate: gate.clone(),
    };
    let handler = handler.clone();
    let spawned = std::thread::Builder::new()
        .name("shepherd-http".into())
        .stack_size(512 * 1024)
        .spawn(move || {
            let _slot = slot;
            connection.serve(&*handler, reading);
        });
    if let Err(error) = spawned {
        eprintln!("shepherd: cannot start a connection thread: {error}");
    }
}

/// Over the connection cap: a short 503 and close, without reading the request.
fn refuse_busy(stream: TcpStream) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let body = error_json("server busy: too many connections", "server_busy", 503);
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
    stream: Arc<TcpStream>,
    peer: SocketAddr,
    limits: Limits,
    policy: Arc<Policy>,
    loopback: bool,
    /// Where a connection waiting for its next request registers as evictable.
    gate: Arc<Gate>,
}

/// Most requests one kept-alive connection serves before it closes.
const MAX_REQUESTS_PER_CONNECTION: usize = 1000;

/// Why a request could not be read.
#[derive(Debug)]
enum ReadError {
    /// Answer with this status and message, then close.
    Reject(u16, String),
    /// The client went away or was too slow: just close.
    Gone,
}

impl Connection {
    /// Serves requests one after the other while the client keeps the
    /// connection open (see [`Connection::serve_one`]); each has the request
    /// deadline from when the previous answer ended, and while it is awaited
    /// the connection may be evicted to make room for a new one.
    fn serve(self, handler: &dyn Handler, first: Reading) {
        let _ = self
            .stream
            .set_write_timeout(Some(self.limits.write_timeout));
        let stream = self.stream.clone();
        let mut reader = BufReader::new(DeadlineReader {
            stream: &stream,
            deadline: None,
        });
        let mut first = Some(first);
        for served in 1..=MAX_REQUESTS_PER_CONNECTION {
            let started = Instant::now();
            reader.get_mut().deadline = Some(started + self.limits.request_deadline);
            let reading = first
                .take()
                .unwrap_or_else(|| self.gate.reading(stream.clone()));
            let last = served == MAX_REQUESTS_PER_CONNECTION;
            if !self.serve_one(handler, &mut reader, reading, started, last) {
                return;
            }
        }
    }

    /// Head, checks, body, handler; whether the connection stays open for the
    /// next request. Host, Origin and token are checked before the body is
    /// read (and before `100 Continue`), so a refused client never uploads it.
    /// It stays open only for an HTTP/1.1 client that did not ask to close and
    /// sent nothing after this request before the answer began: bytes that came
    /// that early (a pipelined request) are never read as a request.
    fn serve_one(
        &self,
        handler: &dyn Handler,
        reader: &mut BufReader<DeadlineReader<'_>>,
        reading: Reading,
        started: Instant,
        last: bool,
    ) -> bool {
        let (request, framing) = match read_head(reader, self.peer, &self.limits) {
            Ok(head) => head,
            Err(error) => {
                self.refuse(|| AccessLog::new("-", "-", started), None, error);
                return false;
            }
        };
        let log = AccessLog::new(&request.method, &request.path, started);
        let cors = self.allowed_cors(request.header("origin"));
        if let Err((status, message)) = self.check(&request) {
            self.responder(log, cors, None).error(status, &message);
            return false;
        }
        let body = match read_body(reader, &self.stream, &framing) {
            Ok(body) => body,
            Err(error) => {
                self.refuse(|| log, cors, error);
                return false;
            }
        };
        drop(reading);
        let request = Request { body, ..request };
        let kept = (framing.keep_alive && !last && reader.buffer().is_empty())
            .then(|| Arc::new(AtomicBool::new(false)));
        let responder = self.responder(log, cors, kept.clone());
        if request.method == "OPTIONS" {
            responder.preflight(request.header("access-control-request-headers"));
        } else {
            handler.handle(request, responder);
        }
        kept.is_some_and(|kept| kept.load(Ordering::SeqCst))
    }

    /// Answers a request that could not be read, or just closes.
    fn refuse(&self, log: impl FnOnce() -> AccessLog, cors: Option<String>, error: ReadError) {
        if let ReadError::Reject(status, message) = error {
            self.responder(log(), cors, None).error(status, &message);
        }
    }

    /// The one responder of a request; `kept`, where the connection may stay
    /// open, is set once a whole answer went out promising so.
    fn responder(
        &self,
        log: AccessLog,
        cors: Option<String>,
        kept: Option<Arc<AtomicBool>>,
    ) -> Responder {
        Responder {
            stream: Some(self.stream.clone()),
            log,
            cors_origin: cors,
            kept,
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

/// How a request's body is framed, decided from its head.
#[derive(Debug)]
struct BodyFraming {
    length: u64,
    /// `Expect: 100-continue` from an HTTP/1.1 client: say `100 Continue`
    /// before reading, or it waits a second (curl) before sending the body.
    expect_continue: bool,
    /// An HTTP/1.1 request that asked to keep the connection open
    /// (`Connection: keep-alive`, as httpx, urllib3, undici and browsers send
    /// it): it may stay open for the next one. Without the word it closes, as
    /// HTTP lets a server decide.
    keep_alive: bool,
}

/// Reads and parses the request line and headers.
fn read_head(
    reader: &mut impl BufRead,
    peer: SocketAddr,
    limits: &Limits,
) -> Result<(Request, BodyFraming), ReadError> {
    refuse_non_http(reader)?;
    let mut used = 0usize;
    // Stray CRLFs before a request are tolerated (RFC 9112 §2.2).
    let first = loop {
        match read_head_line(reader, limits, &mut used)? {
            Some(line) if line.is_empty() => continue,
            Some(line) => break line,
            None => return Err(ReadError::Gone),
        }
    };
    // Checked before the headers are read: an HTTP/0.9 line (`GET /`) or any
    // other line that is no request gets its 400 at once, not at the deadline.
    let line = parse_request_line(&first)?;
    let header_lines = read_header_lines(reader, limits, &mut used)?;
    let mut headers = parse_headers(&header_lines)?;
    if let Some(authority) = line.authority {
        // RFC 9112 §3.2.2: the target's authority replaces the Host header.
        headers.retain(|(name, _)| !name.eq_ignore_ascii_case("host"));
        headers.push(("Host".into(), authority));
    }
    let (path, query) = line.target.split_once('?').unwrap_or((&line.target, ""));
    let request = Request {
        method: line.method.clone(),
        path: path.to_string(),
        query: query.to_string(),
        headers,
        body: Vec::new(),
        peer,
    };
    let framing = body_framing(&request, line.http11, limits)?;
    Ok((request, framing))
}

/// The fuzzer's entry (`crate::fuzz`): a request head as a peer sends it.
#[cfg(test)]
pub(crate) fn fuzz_head(bytes: &[u8]) {
    let peer = SocketAddr::from(([127, 0, 0, 1], 9));
    let _ = read_head(&mut &bytes[..], peer, &Limits::default());
}

/// Closes at once on a connection whose first byte cannot start a request: a TLS
/// or SSLv2 hello (a client speaking HTTPS to a plain port) gets no answer it could
/// read, any other such byte a 400. Waits for the first byte within the deadline.
fn refuse_non_http(reader: &mut impl BufRead) -> Result<(), ReadError> {
    let first = match reader.fill_buf() {
        Ok([]) => return Err(ReadError::Gone),
        Ok(bytes) => bytes[0],
        Err(_) => return Err(ReadError::Gone),
    };
    match first {
        // A TLS record (handshake) or an SSLv2 hello.
        0x16 | 0x80 => Err(ReadError::Gone),
        b'\r' | b'\n' => Ok(()),
        b if is_token(std::str::from_utf8(&[b]).unwrap_or("")) => Ok(()),
        _ => Err(ReadError::Reject(400, "not an HTTP request".into())),
    }
}

/// One line of the head without its terminator, `None` at the end of the stream
/// before any byte of it. `used` counts the head's bytes against its cap. A head
/// that stops arriving partway is answered 408 at the deadline (nginx's and
/// Apache's rule); a connection that sent nothing is just closed.
fn read_head_line(
    reader: &mut impl BufRead,
    limits: &Limits,
    used: &mut usize,
) -> Result<Option<String>, ReadError> {
    let mut line = Vec::new();
    let cap = (limits.max_head_bytes - (*used).min(limits.max_head_bytes)) as u64 + 1;
    let started = *used;
    let n = reader
        .take(cap)
        .read_until(b'\n', &mut line)
        .map_err(|e| timed_out(&e, started + line.len() > 0, "request head"))?;
    *used += n;
    let ended = line.ends_with(b"\n");
    // End of stream before the head is complete: the client gave up.
    if !ended && (n as u64) < cap {
        return if n == 0 {
            Ok(None)
        } else {
            Err(ReadError::Gone)
        };
    }
    if !ended || *used > limits.max_head_bytes {
        return Err(ReadError::Reject(431, "request head too large".into()));
    }
    let text = String::from_utf8(line)
        .map_err(|_| ReadError::Reject(400, "request head is not UTF-8".into()))?;
    // CRLF or a bare LF (RFC 9112 §2.2); a bare CR stays and is refused later.
    let text = text.strip_suffix('\n').unwrap_or(&text);
    Ok(Some(text.strip_suffix('\r').unwrap_or(text).to_string()))
}

/// The header lines up to the empty line that ends the head.
fn read_header_lines(
    reader: &mut impl BufRead,
    limits: &Limits,
    used: &mut usize,
) -> Result<Vec<String>, ReadError> {
    let mut lines = Vec::new();
    loop {
        let Some(text) = read_head_line(reader, limits, used)? else {
            return Err(ReadError::Gone);
        };
        if text.is_empty() {
            return Ok(lines);
        }
        if lines.len() >= limits.max_headers {
            return Err(ReadError::Reject(431, "too many headers".into()));
        }
        lines.push(text);
    }
}

/// A read that failed: 408 when it timed out after part of `what` arrived (the
/// client is told, as nginx and Apache tell it), else the client is gone.
fn timed_out(error: &io::Error, partial: bool, what: &str) -> ReadError {
    let timeout = matches!(
        error.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    );
    if timeout && partial {
        ReadError::Reject(408, format!("{what} not received in time"))
    } else {
        ReadError::Gone
    }
}

/// A parsed request line.
#[derive(Debug, PartialEq)]
struct RequestLine {
    method: String,
    /// The path and query (origin-form).
    target: String,
    /// The authority of an absolute-form target (`http://host:port/path`).
    authority: Option<String>,
    http11: bool,
}

/// `METHOD SP target SP HTTP/1.x`, one space each, with a token method and
/// a target of visible ASCII characters.
fn parse_request_line(line: &str) -> Result<RequestLine, ReadError> {
    let malformed = || ReadError::Reject(400, "malformed request line".into());
    let mut parts = line.split(' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(malformed());
    };
    let http11 = match version {
        "HTTP/1.1" => true,
        "HTTP/1.0" => false,
        _ if is_http_version(version) => {
            return Err(ReadError::Reject(505, "only HTTP/1.0 and 1.1".into()))
        }
        _ => return Err(malformed()),
    };
    if !is_token(method) || target.is_empty() || !target.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(malformed());
    }
    let (target, authority) = split_target(target).ok_or_else(malformed)?;
    Ok(RequestLine {
        method: method.to_string(),
        target,
        authority,
        http11,
    })
}

/// `HTTP/<digit>.<digit>`.
fn is_http_version(version: &str) -> bool {
    let bytes = version.as_bytes();
    bytes.len() == 8
        && version.starts_with("HTTP/")
        && bytes[5].is_ascii_digit()
        && bytes[6] == b'.'
        && bytes[7].is_ascii_digit()
}

/// Origin-form (`/path?query`) as is; absolute-form (`http://host/path`)
/// split into its path and authority. Other forms (`*`, authority-form) are
/// not served here.
fn split_target(target: &str) -> Option<(String, Option<String>)> {
    if target.starts_with('/') {
        return Some((target.to_string(), None));
    }
    let scheme_end = target.find("://")?;
    let scheme = &target[..scheme_end];
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return None;
    }
    let rest = &target[scheme_end + 3..];
    let path_at = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(path_at);
    if authority.is_empty() || authority.contains('@') {
        return None;
    }
    let path = match path {
        "" => "/".to_string(),
        query if query.starts_with('?') => format!("/{query}"),
        path => path.to_string(),
    };
    Some((path, Some(authority.to_string())))
}

/// `%XX` escapes and `+` (a space, in a form-encoded query) decoded; a bad
/// escape stays as it is, and bytes that are not UTF-8 are replaced.
fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match bytes[i] {
            b'%' if i + 2 < bytes.len() => match (hex(bytes[i + 1]), hex(bytes[i + 2])) {
                (Some(hi), Some(lo)) => {
                    out.push((hi * 16 + lo) as u8);
                    i += 3;
                    continue;
                }
                _ => out.push(b'%'),
            },
            b'+' => out.push(b' '),
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// An RFC 9110 token: what a method and a header name are made of.
fn is_token(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(crate::util::net::is_http_tchar)
}

/// `Name: value` lines. A name must be a token (no spaces, no folded
/// continuation lines); a value may not hold control characters other than
/// tab (NUL, a bare CR). More than one `Host` is refused (RFC 9112 §3.2),
/// since two parties could each believe a different one.
fn parse_headers(lines: &[String]) -> Result<Vec<(String, String)>, ReadError> {
    let headers = lines
        .iter()
        .map(|line| parse_header(line))
        .collect::<Result<Vec<_>, _>>()?;
    let hosts = headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("host"))
        .count();
    if hosts > 1 {
        return Err(ReadError::Reject(400, "more than one Host header".into()));
    }
    Ok(headers)
}

fn parse_header(line: &str) -> Result<(String, String), ReadError> {
    let (name, value) = line
        .split_once(':')
        .filter(|(name, _)| is_token(name))
        .ok_or_else(|| ReadError::Reject(400, "malformed header line".into()))?;
    let value = value.trim_matches([' ', '\t']);
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Err(ReadError::Reject(
            400,
            "control character in a header value".into(),
        ));
    }
    Ok((name.to_string(), value.to_string()))
}

/// `Content-Length` only: a transfer coding is refused (`411`) rather than
/// guessed at, so a chunked body is never read as the next request; every
/// `Content-Length` must be plain digits and agree (`400`), and a length
/// over the cap is refused before anything is read (`413`).
fn body_framing(
    request: &Request,
    http11: bool,
    limits: &Limits,
) -> Result<BodyFraming, ReadError> {
    if request.header("transfer-encoding").is_some() {
        return Err(ReadError::Reject(
            411,
            "chunked request bodies are not supported; send Content-Length".into(),
        ));
    }
    let length = content_length(request)?;
    if length > limits.max_body_bytes as u64 {
        return Err(ReadError::Reject(
            413,
            format!("request body over {} bytes", limits.max_body_bytes),
        ));
    }
    let expect_continue = match request.header("expect") {
        None => false,
        Some(value) if value.eq_ignore_ascii_case("100-continue") => http11,
        Some(_) => {
            return Err(ReadError::Reject(
                417,
                "the only expectation served is 100-continue".into(),
            ))
        }
    };
    let tokens = request.header("connection").unwrap_or("");
    let said = |word: &str| {
        tokens
            .split(',')
            .any(|t| t.trim().eq_ignore_ascii_case(word))
    };
    Ok(BodyFraming {
        length,
        expect_continue,
        keep_alive: http11 && said("keep-alive") && !said("close"),
    })
}

/// The declared body length; 0 without `Content-Length`.
fn content_length(request: &Request) -> Result<u64, ReadError> {
    let mut length = None;
    let values = request
        .headers
        .iter()
        .filter(|(name, _)| name.eq_ignore_ascii_case("content-length"));
    for (_, value) in values {
        if value.is_empty() || !value.bytes().all(|b| b.is_ascii_digit()) {
            return Err(ReadError::Reject(400, "bad Content-Length".into()));
        }
        // More digits than a u64 holds: larger than any cap.
        let n = value.parse::<u64>().unwrap_or(u64::MAX);
        if length.is_some_and(|seen| seen != n) {
            return Err(ReadError::Reject(
                400,
                "conflicting Content-Length headers".into(),
            ));
        }
        length = Some(n);
    }
    Ok(length.unwrap_or(0))
}

/// Reads exactly the declared body, after `100 Continue` when asked for.
/// Bytes after it are read only as the next request of a kept-alive
/// connection, and only when none had come before the answer began.
fn read_body(
    reader: &mut impl Read,
    stream: &TcpStream,
    framing: &BodyFraming,
) -> Result<Vec<u8>, ReadError> {
    if framing.length == 0 {
        return Ok(Vec::new());
    }
    if framing.expect_continue {
        let mut writer = stream;
        writer
            .write_all(b"HTTP/1.1 100 Continue\r\n\r\n")
            .map_err(|_| ReadError::Gone)?;
    }
    // Grown as bytes arrive: a declared length is not memory to set aside.
    let mut body = Vec::with_capacity(framing.length.min(64 * 1024) as usize);
    reader
        .take(framing.length)
        .read_to_end(&mut body)
        .map_err(|e| timed_out(&e, true, "request body"))?;
    if body.len() as u64 != framing.length {
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
        417 => "Expectation Failed",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        _ => "Status",
    }
}

fn write_head(
    out: &mut impl Write,
    status: u16,
    headers: &[(&str, String)],
    content_length: Option<usize>,
) -> io::Result<()> {
    write_head_kept(out, status, headers, content_length, false)
}

/// The status line and headers; `keep_alive` says the connection stays open.
fn write_head_kept(
    out: &mut impl Write,
    status: u16,
    headers: &[(&str, String)],
    content_length: Option<usize>,
    keep_alive: bool,
) -> io::Result<()> {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nConnection: {connection}\r\n",
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
    stream: Option<Arc<TcpStream>>,
    log: AccessLog,
    cors_origin: Option<String>,
    /// Where the connection may stay open: set once a whole answer went out
    /// saying so (a stream always closes).
    kept: Option<Arc<AtomicBool>>,
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
    pub fn text(self, status: u16, content_type: &str, body: &str) {
        self.text_with(status, content_type, body, &[]);
    }

    /// A text answer with extra headers (the chat page's security headers).
    pub fn text_with(
        mut self,
        status: u16,
        content_type: &str,
        body: &str,
        extra: &[(&'static str, String)],
    ) {
        self.log.status = status;
        let Some(stream) = self.stream.take() else {
            return;
        };
        let mut headers = self.base_headers();
        headers.push(("Content-Type", content_type.to_string()));
        headers.extend(extra.iter().cloned());
        self.write_whole(&stream, status, &headers, body.as_bytes());
    }

    /// Writes a whole answer. The connection stays open where it may and the
    /// client sent nothing more yet (else what it sent is a pipelined request,
    /// which is not served): `Connection: keep-alive`, and the connection's
    /// thread reads the next request. Otherwise it closes gracefully.
    fn write_whole(
        &self,
        stream: &TcpStream,
        status: u16,
        headers: &[(&str, String)],
        body: &[u8],
    ) {
        let keep = self.kept.is_some() && !pending_bytes(stream);
        let mut writer = stream;
        let result = write_head_kept(&mut writer, status, headers, Some(body.len()), keep)
            .and_then(|()| writer.write_all(body))
            .and_then(|()| writer.flush());
        match (&self.kept, result) {
            (Some(kept), Ok(())) if keep => kept.store(true, Ordering::SeqCst),
            (_, Ok(())) => linger_close(stream),
            (_, Err(_)) => {}
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

    /// Answers a CORS preflight. The headers it allows are those the preflight asks
    /// for (`Access-Control-Request-Headers`, each a valid header name), as nginx's
    /// and most API servers' CORS setups do: an allowed origin is trusted with any
    /// header it sends (the openai JS SDK sends `X-Stainless-*` on every request);
    /// the origin itself was checked before this. Without the question, the ones
    /// shepherd reads.
    fn preflight(self, requested: Option<&str>) {
        let asked = requested
            .map(|list| list.split(',').map(str::trim).collect::<Vec<_>>())
            .filter(|names| names.iter().all(|name| is_token(name)));
        let headers = asked.map_or_else(
            || "Authorization, Content-Type, X-Api-Key".to_string(),
            |names| names.join(", "),
        );
        let extra = [
            (
                "Access-Control-Allow-Methods",
                "GET, POST, PUT, PATCH, DELETE, OPTIONS".into(),
            ),
            ("Access-Control-Allow-Headers", headers),
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
        self.write_whole(&stream, status, &headers, body);
    }

    /// Whether the client went away before the answer started (a queued or
    /// prefilling request whose client hung up).
    pub fn client_gone(&self) -> bool {
        match (self.stream.as_deref(), &self.kept) {
            (None, _) => true,
            // The next request may be on its way: look, do not read it.
            (Some(stream), Some(_)) => peer_closed_keeping(stream),
            (Some(stream), None) => peer_closed(stream),
        }
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
        let mut writer = &*stream;
        write_head(&mut writer, 200, &headers, None)?;
        writer.flush()?;
        Ok(SseStream {
            stream,
            _log: self.log,
            last_write: Instant::now(),
        })
    }
}

/// Whether the peer closed its side. The request is fully read, so what is
/// still readable is end of stream, an error, or bytes after the request (a
/// pipelined request, never served): those are read and dropped, so they do
/// not hide a close behind them. A 1 ms read timeout keeps the check short.
fn peer_closed(stream: &TcpStream) -> bool {
    if stream
        .set_read_timeout(Some(Duration::from_millis(1)))
        .is_err()
    {
        return true;
    }
    let mut sink = [0u8; 4096];
    let mut reader = stream;
    for _ in 0..16 {
        match reader.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) => {
                return !matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock
                        | io::ErrorKind::TimedOut
                        | io::ErrorKind::Interrupted
                )
            }
        }
    }
    false
}

/// Whether the peer closed its side, without consuming what it sent: on a
/// connection that may stay open, bytes waiting are its next request.
fn peer_closed_keeping(stream: &TcpStream) -> bool {
    if stream
        .set_read_timeout(Some(Duration::from_millis(1)))
        .is_err()
    {
        return true;
    }
    match stream.peek(&mut [0u8; 1]) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
        ),
    }
}

/// Whether bytes from the client wait on the socket (a pipelined request, or
/// a close).
fn pending_bytes(stream: &TcpStream) -> bool {
    if stream.set_nonblocking(true).is_err() {
        return true;
    }
    let waiting = !matches!(
        stream.peek(&mut [0u8; 1]),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock
    );
    stream.set_nonblocking(false).is_err() || waiting
}

/// Closes gracefully: stop sending, then read (and drop) what the client was
/// still sending for a moment, so an early answer (413) is not lost to a reset.
fn linger_close(stream: &TcpStream) {
    let _ = stream.shutdown(Shutdown::Write);
    let deadline = Instant::now() + Duration::from_millis(500);
    let mut reader = DeadlineReader {
        stream,
        deadline: Some(deadline),
    };
    let mut sink = [0u8; 8192];
    while let Ok(n) = reader.read(&mut sink) {
        if n == 0 {
            break;
        }
    }
}

/// A server-sent-events stream: every event is one chunk, flushed at once.
pub struct SseStream {
    stream: Arc<TcpStream>,
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
        let mut writer = &*self.stream;
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
        let mut writer = &*self.stream;
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

    /// Sends `request` without closing the writing side and reads what comes back
    /// before `patience` passes: what the server says (or that it closed) on its
    /// own, while the client still waits.
    fn held(addr: SocketAddr, request: &[u8], patience: Duration) -> (String, bool) {
        let mut stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(patience)).unwrap();
        stream.write_all(request).expect("write");
        let mut out = Vec::new();
        let closed = stream.read_to_end(&mut out).is_ok();
        (String::from_utf8_lossy(&out).into_owned(), closed)
    }

    #[test]
    fn junk_connections_get_an_answer_or_a_prompt_close() {
        // A deadline far past the client's patience: whatever comes, comes early.
        let slow = Limits {
            request_deadline: Duration::from_secs(60),
            ..Limits::default()
        };
        let (addr, _) = start(slow, Policy::default());
        let patience = Duration::from_secs(5);
        // HTTP/0.9: a request line with no version, then nothing more.
        let (answer, closed) = held(addr, b"GET /\r\n", patience);
        assert_eq!((status(&answer), closed), (400, true), "{answer}");
        // Binary that cannot start a request.
        let (answer, closed) = held(addr, b"\x00\x01\x02", patience);
        assert_eq!((status(&answer), closed), (400, true), "{answer}");
        // A TLS hello and an SSLv2 one: closed, with nothing a TLS client could read.
        for hello in [
            &b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"[..],
            b"\x80\x2e\x01\x00\x02",
        ] {
            let (answer, closed) = held(addr, hello, patience);
            assert_eq!((answer.as_str(), closed), ("", true));
        }
        // A head or a body that stops arriving: 408 at the deadline.
        let (addr, _) = start(
            Limits {
                request_deadline: Duration::from_millis(300),
                ..Limits::default()
            },
            Policy::default(),
        );
        let (answer, closed) = held(addr, b"GET /x HTTP/1.1\r\nHost: 127", patience);
        assert_eq!((status(&answer), closed), (408, true), "{answer}");
        let body = b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10\r\n\r\nab";
        let (answer, closed) = held(addr, body, patience);
        assert_eq!((status(&answer), closed), (408, true), "{answer}");
        assert!(answer.contains("not received in time"), "{answer}");
        // A connection that sends nothing is closed at the deadline, unanswered.
        let (answer, closed) = held(addr, b"", patience);
        assert_eq!((answer.as_str(), closed), ("", true));
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
    fn malformed_heads_and_framing_get_clear_statuses() {
        let (addr, _) = start(Limits::default(), Policy::default());
        let cases: &[(&str, u16)] = &[
            ("GET /x HTTP/1.1\r\nHost: a\r\n\r\n", 403),
            ("GET /x HTTP/1.1\nHost: 127.0.0.1\n\n", 200),
            ("\r\n\r\nGET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 200),
            ("GET  /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET /x HTTP/1.1 \r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET /x HTTP/1.1x\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET /x HTTP/2.0\r\nHost: 127.0.0.1\r\n\r\n", 505),
            ("G(T /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET /x\0 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET /x\ry HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET http://127.0.0.1:8/x?q HTTP/1.1\r\nHost: evil.test\r\n\r\n", 200),
            ("GET http://evil.test/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 403),
            ("GET http://u@127.0.0.1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET ftp://127.0.0.1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n", 400),
            ("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: evil.test\r\n\r\n", 400),
            ("GET /x HTTP/1.1\r\nHost : 127.0.0.1\r\n\r\n", 400),
            ("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n folded\r\n\r\n", 400),
            ("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\n\tX: y\r\n\r\n", 400),
            ("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\0b\r\n\r\n", 400),
            ("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\rb\r\n\r\n", 400),
            ("GET /x HTTP/1.1\r\nHost: 127.0.0.1\r\nX: a\tb\r\n\r\n", 200),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: -1\r\n\r\n", 400),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: +1\r\n\r\nx", 400),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1, 1\r\n\r\nx", 400),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length:\r\n\r\n", 400),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxy", 400),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 200),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n", 411),
            ("POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: magic\r\nContent-Length: 1\r\n\r\nx", 417),
        ];
        for (request, expected) in cases {
            let answer = raw(addr, request.as_bytes());
            assert_eq!(status(&answer), *expected, "{request:?} → {answer}");
        }
        let head = [b"GET /\xff HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".as_slice()];
        assert_eq!(status(&raw(addr, head[0])), 400);
    }

    #[test]
    fn expect_100_continue_is_answered_before_the_body() {
        let (addr, _) = start(Limits::default(), Policy::default());
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let head = "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n";
        stream.write_all(head.as_bytes()).unwrap();
        let mut interim = [0u8; 25];
        stream.read_exact(&mut interim).unwrap();
        assert_eq!(&interim, b"HTTP/1.1 100 Continue\r\n\r\n");
        stream.write_all(b"abc").unwrap();
        let answer = read_to_close(&mut stream).unwrap();
        let answer = String::from_utf8_lossy(&answer);
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        assert!(answer.ends_with("{\"len\":3}"), "{answer}");
    }

    #[test]
    fn a_refused_request_never_gets_100_continue() {
        let policy = Policy {
            auth_token: Some("s3cret".into()),
            ..Policy::default()
        };
        let (addr, _) = start(Limits::default(), policy);
        let head = "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
        let answer = raw(addr, head.as_bytes());
        assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    }

    /// Writes `request` on `stream` and reads one whole answer (its head and
    /// `Content-Length` body) without waiting for a close.
    fn one_answer(stream: &mut TcpStream, request: &[u8]) -> String {
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(request).expect("write");
        let mut out = Vec::new();
        let mut buffer = [0u8; 4096];
        loop {
            let text = String::from_utf8_lossy(&out).into_owned();
            if let Some((head, body)) = text.split_once("\r\n\r\n") {
                let length = head
                    .lines()
                    .find_map(|l| l.strip_prefix("Content-Length: "))
                    .and_then(|n| n.parse::<usize>().ok());
                if length.is_some_and(|n| body.len() >= n) {
                    return text;
                }
            }
            match stream.read(&mut buffer) {
                Ok(0) | Err(_) => return text,
                Ok(n) => out.extend_from_slice(&buffer[..n]),
            }
        }
    }

    #[test]
    fn a_client_that_asks_keeps_its_connection_for_the_next_requests() {
        let (addr, _) = start(Limits::default(), Policy::default());
        let mut stream = TcpStream::connect(addr).unwrap();
        let keep = "Connection: keep-alive\r\n";
        for path in ["/x", "/y", "/z"] {
            let answer = one_answer(&mut stream, &get(path, keep));
            assert_eq!(status(&answer), 200, "{answer}");
            assert!(answer.contains("Connection: keep-alive"), "{answer}");
        }
        // Asked to close: the answer says so and the connection ends.
        let answer = one_answer(&mut stream, &get("/x", "Connection: close\r\n"));
        assert!(answer.contains("Connection: close"), "{answer}");
        let mut rest = Vec::new();
        assert_eq!(
            stream.read_to_end(&mut rest).map(|_| rest.len()).ok(),
            Some(0)
        );
        // Not asked (curl, raw clients): one request, then closed, as before.
        let answer = raw(addr, &get("/x", ""));
        assert!(answer.contains("Connection: close"), "{answer}");
        // A stream closes when it ends, asked or not.
        let answer = raw(addr, &get("/sse", keep));
        assert!(answer.contains("Connection: close"), "{answer}");
        // Two requests sent at once: the first answered with a close, the second
        // never read (a pipelined request is never parsed).
        let answer = raw(addr, &[get("/x", keep), get("/y", keep)].concat());
        assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer}");
        assert!(answer.contains("Connection: close"), "{answer}");
    }

    #[test]
    fn a_pipelined_request_is_dropped_and_does_not_hide_a_close() {
        let (addr, gone) = start(Limits::default(), Policy::default());
        let answer = raw(addr, &[get("/x", ""), get("/sse", "")].concat());
        assert_eq!(answer.matches("HTTP/1.1").count(), 1, "{answer}");
        assert!(answer.ends_with("{\"len\":0}"), "{answer}");
        let mut stream = TcpStream::connect(addr).unwrap();
        stream
            .write_all(&[get("/hold", ""), get("/x", "")].concat())
            .unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).unwrap();
        drop(stream);
        assert!(gone.recv_timeout(Duration::from_secs(5)).is_ok());
    }

    #[test]
    fn query_parameters_are_found_by_name_and_decoded() {
        let request = |query: &str| Request {
            method: "POST".into(),
            path: "/slots/0".into(),
            query: query.into(),
            headers: Vec::new(),
            body: Vec::new(),
            peer: "127.0.0.1:1".parse().unwrap(),
        };
        let r = request("action=save&name=a%20b+c&flag&action=erase&bad=%zz%4");
        assert_eq!(r.query_param("action").as_deref(), Some("save"));
        assert_eq!(r.query_param("name").as_deref(), Some("a b c"));
        assert_eq!(r.query_param("flag").as_deref(), Some(""));
        assert_eq!(r.query_param("bad").as_deref(), Some("%zz%4"));
        assert_eq!(r.query_param("missing"), None);
        assert_eq!(request("").query_param("action"), None);
        assert_eq!(
            request("x=%C3%A9%FF").query_param("x").as_deref(),
            Some("é\u{fffd}")
        );
    }

    #[test]
    fn request_targets() {
        let split = |t: &str| split_target(t);
        assert_eq!(split("/a?b"), Some(("/a?b".into(), None)));
        assert_eq!(
            split("http://127.0.0.1:8/a"),
            Some(("/a".into(), Some("127.0.0.1:8".into())))
        );
        assert_eq!(split("HTTPS://h"), Some(("/".into(), Some("h".into()))));
        assert_eq!(split("http://h?x"), Some(("/?x".into(), Some("h".into()))));
        for bad in [
            "*",
            "h:80",
            "http://",
            "http:///x",
            "http://a@h/",
            "file://h/x",
        ] {
            assert_eq!(split(bad), None, "{bad}");
        }
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
        // Told why, as nginx and Apache tell it, then closed.
        assert_eq!(status(&answer), 408, "{answer}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    /// Reads until the server closes the connection; `None` if it does not within 5 s.
    fn read_to_close(stream: &mut TcpStream) -> Option<Vec<u8>> {
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut out = Vec::new();
        match stream.read_to_end(&mut out) {
            Ok(_) => Some(out),
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => Some(out),
            Err(_) => None,
        }
    }

    #[test]
    fn at_the_cap_the_oldest_reader_gives_way_and_busy_handlers_get_503() {
        let limits = Limits {
            max_connections: 2,
            ..Limits::default()
        };
        let (addr, _) = start(limits, Policy::default());
        // Two half-sent requests fill the cap; the accept loop sees them first.
        let mut idle: Vec<TcpStream> = (0..2)
            .map(|_| {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.write_all(b"GET /x HTTP/1.1\r\n").unwrap();
                stream
            })
            .collect();
        let answer = raw(addr, &get("/x", ""));
        assert_eq!(status(&answer), 200, "{answer}");
        assert_eq!(
            read_to_close(&mut idle[0]),
            Some(Vec::new()),
            "the oldest gave way"
        );
        // The other one hangs up; once its socket is closed it is no reader any more.
        idle[1].shutdown(Shutdown::Write).unwrap();
        assert!(read_to_close(&mut idle[1]).is_some());
        // Two streams past their head hold the cap (the slot of a closing
        // connection may still be taken for a moment: try again until both stream).
        let hold = || {
            let end = Instant::now() + Duration::from_secs(5);
            loop {
                let mut stream = TcpStream::connect(addr).unwrap();
                stream.write_all(&get("/hold", "")).unwrap();
                let mut head = [0u8; 12];
                stream.read_exact(&mut head).unwrap();
                if &head == b"HTTP/1.1 200" || Instant::now() > end {
                    return stream;
                }
            }
        };
        let holds = [hold(), hold()];
        // Connections past their head do not give way: the next one gets 503.
        let answer = raw(addr, &get("/x", ""));
        assert_eq!(status(&answer), 503, "{answer}");
        assert!(answer.contains("Retry-After: 1"));
        drop(holds);
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
        let answer = raw(addr, preflight.as_bytes());
        assert_eq!(status(&answer), 204);
        assert!(answer.contains("Access-Control-Allow-Headers: Authorization, Content-Type"));
        // What the openai JS SDK asks for: every header it names is allowed.
        let sdk = "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                   Origin: https://app.example\r\nAccess-Control-Request-Method: POST\r\n\
                   Access-Control-Request-Headers: authorization,content-type,\
                   x-stainless-arch,x-stainless-lang,x-stainless-retry-count\r\n\r\n";
        let answer = raw(addr, sdk.as_bytes());
        assert_eq!(status(&answer), 204);
        assert!(
            answer.contains(
                "Access-Control-Allow-Headers: authorization, content-type, \
                 x-stainless-arch, x-stainless-lang, x-stainless-retry-count\r\n"
            ),
            "{answer}"
        );
        assert!(answer.contains("Access-Control-Allow-Origin: https://app.example"));
        // A name that is no header name gets the plain list, never an echo.
        let odd = "OPTIONS /x HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://app.example\r\n\
                   Access-Control-Request-Headers: x-a, bad name\r\n\r\n";
        let answer = raw(addr, odd.as_bytes());
        assert!(!answer.contains("bad name"), "{answer}");
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

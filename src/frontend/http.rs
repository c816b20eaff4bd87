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
//!
//! This file holds the server loop, the connections and the policy checks;
//! [`parse`] reads a request, [`respond`] answers it.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

mod parse;
mod respond;

#[cfg(test)]
pub(crate) use parse::fuzz_head;
pub use respond::{Responder, SseStream};

use super::accept::{self, DeadlineReader, Gate, Reading, Slot};
use crate::auth;
use crate::util::net;
use parse::*;
use respond::*;

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

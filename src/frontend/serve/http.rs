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
//! - An absolute deadline for the request head and body (slow-loris), longer
//!   by a second for each MiB the body announces; a cap on the head (`431`)
//!   and on the body (32 MiB: `413`, decided from `Content-Length` before
//!   reading it).
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
pub use respond::{Captured, Responder, SseStream};

use super::accept::{self, ConnectionCap, DeadlineReader, Place, Reading};
use crate::util::auth;
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
    /// From accepting the connection to having the whole request, plus
    /// [`BODY_TIME_PER_MIB`] for each MiB its `Content-Length` announces.
    pub request_deadline: Duration,
    /// Longest a single write may block (a client that stopped reading).
    pub write_timeout: Duration,
}

/// The time a request's deadline grows by for each MiB of body it announces:
/// a large upload (an image) over a slow link still arrives, and a client that
/// sends less than 1 MiB a second still gets its `408`.
pub const BODY_TIME_PER_MIB: Duration = Duration::from_secs(1);

impl Limits {
    /// The deadline for a request begun at `started` whose body is `length` bytes.
    fn deadline(&self, started: Instant, length: u64) -> Instant {
        let mib = u32::try_from(length.div_ceil(1024 * 1024)).unwrap_or(u32::MAX);
        started + self.request_deadline + BODY_TIME_PER_MIB.saturating_mul(mib)
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 512,
            max_head_bytes: 16 * 1024,
            max_headers: 100,
            // One image at OpenAI's own limit per image (20 MB, `MAX_IMAGE_BYTES`)
            // as a base64 data URL (27 MB), and the conversation around it.
            max_body_bytes: 32 * 1024 * 1024,
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
        self.query_pairs()
            .find(|(key, _)| *key == name)
            .map(|(_, value)| percent_decode(value))
    }

    /// [`Request::query_param`] for a parameter that may be given once: `Err`
    /// (a message naming it) when it repeats, since which of two values was
    /// meant cannot be told.
    pub fn single_query_param(&self, name: &str) -> Result<Option<String>, String> {
        if self.query_pairs().filter(|(key, _)| *key == name).count() > 1 {
            return Err(format!("query parameter '{name}' is given more than once"));
        }
        Ok(self.query_param(name))
    }

    /// The query's `key=value` pairs as sent (a bare `key` has an empty value).
    fn query_pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        self.query
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
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
        let cap = Arc::new(accept::ConnectionCap::default());
        let Server {
            mut listeners,
            limits,
            policy,
        } = self;
        let first = listeners.remove(0);
        for listener in listeners {
            let (cap, handler, policy) = (cap.clone(), handler.clone(), policy.clone());
            let spawned = std::thread::Builder::new()
                .name("shepherd-accept".into())
                .spawn(move || serve_listener(&listener, &cap, limits, &policy, &handler));
            if let Err(error) = spawned {
                eprintln!("shepherd: cannot start an accept thread: {error}");
            }
        }
        serve_listener(&first, &cap, limits, &policy, &handler);
    }
}

/// One listener's accept loop ([`accept::run`]) under the shared `cap`.
fn serve_listener(
    listener: &TcpListener,
    cap: &Arc<ConnectionCap>,
    limits: Limits,
    policy: &Arc<Policy>,
    handler: &Arc<dyn Handler>,
) {
    accept::run_capped(
        listener,
        cap,
        limits.max_connections,
        |stream, peer, place, cap| dispatch(stream, peer, place, cap, limits, policy, handler),
        refuse_busy,
    );
}

/// Serves an admitted connection on a thread of its own. Loopback is the
/// address it reached: the Host check guards a loopback listener only.
fn dispatch(
    stream: TcpStream,
    peer: SocketAddr,
    place: Place,
    cap: &Arc<ConnectionCap>,
    limits: Limits,
    policy: &Arc<Policy>,
    handler: &Arc<dyn Handler>,
) {
    let loopback = stream
        .local_addr()
        .is_ok_and(|addr| addr.ip().is_loopback());
    let stream = Arc::new(stream);
    // Registered here, in the accept loop, so the cap sees it before the next accept.
    let reading = cap.reading(stream.clone());
    let connection = Connection {
        stream,
        peer,
        limits,
        policy: policy.clone(),
        loopback,
        cap: cap.clone(),
    };
    let handler = handler.clone();
    let spawned = std::thread::Builder::new()
        .name("shepherd-http".into())
        .stack_size(512 * 1024)
        .spawn(move || {
            let _place = place;
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
    let headers = [
        ("Content-Type", "application/json".into()),
        ("Retry-After", "1".into()),
    ];
    let _ = write_answer(&mut &stream, 503, &headers, body.as_bytes(), false);
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
    cap: Arc<ConnectionCap>,
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
            reader.get_mut().deadline = Some(self.limits.deadline(started, 0));
            let reading = first
                .take()
                .unwrap_or_else(|| self.cap.reading(stream.clone()));
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
        reader.get_mut().deadline = Some(self.limits.deadline(started, framing.length));
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
            added: Vec::new(),
            capture: None,
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
mod tests;

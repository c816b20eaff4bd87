//! Answering: the one [`Responder`] of a request (JSON and text answers, the
//! CORS preflight, keep-alive or a graceful close), [`SseStream`] for streamed
//! answers, whether a client went away, the status reasons and error bodies,
//! and the access-log line written when an answer is done. A responder may
//! also answer a request made inside another ([`Responder::capture`]): its
//! answer comes back to the caller instead of going out.

use super::*;

/// The access-log line of one request, written when the response is done.
pub(super) struct AccessLog {
    method: String,
    path: String,
    started: Instant,
    status: u16,
}

impl AccessLog {
    pub(super) fn new(method: &str, path: &str, started: Instant) -> AccessLog {
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
pub(super) fn escape_log(text: &str) -> String {
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
pub(super) struct ErrorBody<'a> {
    error: ErrorDetail<'a>,
}

#[derive(Serialize)]
pub(super) struct ErrorDetail<'a> {
    message: &'a str,
    #[serde(rename = "type")]
    kind: &'a str,
    code: String,
}

pub(super) fn error_json(message: &str, kind: &str, status: u16) -> String {
    let body = ErrorBody {
        error: ErrorDetail {
            message,
            kind,
            code: status.to_string(),
        },
    };
    serde_json::to_string(&body).unwrap_or_default()
}

pub(super) fn error_kind(status: u16) -> &'static str {
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

/// The reason phrase of every status the servers send (RFC 9110 §15; 499 is
/// nginx's), one table for every answer; [`reason`] looks it up.
pub(super) const REASONS: &[(u16, &str)] = &[
    (100, "Continue"),
    (200, "OK"),
    (201, "Created"),
    (202, "Accepted"),
    (204, "No Content"),
    (301, "Moved Permanently"),
    (302, "Found"),
    (304, "Not Modified"),
    (307, "Temporary Redirect"),
    (308, "Permanent Redirect"),
    (400, "Bad Request"),
    (401, "Unauthorized"),
    (402, "Payment Required"),
    (403, "Forbidden"),
    (404, "Not Found"),
    (405, "Method Not Allowed"),
    (406, "Not Acceptable"),
    (408, "Request Timeout"),
    (409, "Conflict"),
    (410, "Gone"),
    (411, "Length Required"),
    (412, "Precondition Failed"),
    (413, "Content Too Large"),
    (414, "URI Too Long"),
    (415, "Unsupported Media Type"),
    (416, "Range Not Satisfiable"),
    (417, "Expectation Failed"),
    (421, "Misdirected Request"),
    (422, "Unprocessable Content"),
    (426, "Upgrade Required"),
    (428, "Precondition Required"),
    (429, "Too Many Requests"),
    (431, "Request Header Fields Too Large"),
    (451, "Unavailable For Legal Reasons"),
    (499, "Client Closed Request"),
    (500, "Internal Server Error"),
    (501, "Not Implemented"),
    (502, "Bad Gateway"),
    (503, "Service Unavailable"),
    (504, "Gateway Timeout"),
    (505, "HTTP Version Not Supported"),
    (507, "Insufficient Storage"),
    (511, "Network Authentication Required"),
];

/// The reason phrase of `status`: from [`REASONS`], else its class's (an
/// upstream's unusual 4xx passed on), which clients read the same way.
pub(super) fn reason(status: u16) -> &'static str {
    if let Some((_, phrase)) = REASONS.iter().find(|(code, _)| *code == status) {
        return phrase;
    }
    match status {
        100..=199 => "Informational",
        200..=299 => "Success",
        300..=399 => "Redirection",
        400..=499 => "Client Error",
        _ => "Server Error",
    }
}

/// The status line and headers; `keep_alive` says the connection stays open,
/// a `content_length` of `None` that a chunked body follows.
pub(super) fn head(
    status: u16,
    headers: &[(&str, String)],
    content_length: Option<usize>,
    keep_alive: bool,
) -> String {
    let connection = if keep_alive { "keep-alive" } else { "close" };
    let mut head = format!(
        "HTTP/1.1 {status} {}\r\nConnection: {connection}\r\n",
        reason(status)
    );
    for (name, value) in headers {
        head.push_str(name);
        head.push_str(": ");
        head.push_str(value);
        head.push_str("\r\n");
    }
    match content_length {
        Some(n) => head.push_str(&format!("Content-Length: {n}\r\n\r\n")),
        None => head.push_str("Transfer-Encoding: chunked\r\n\r\n"),
    }
    head
}

/// Largest whole answer copied into one buffer to go out in one write.
pub(super) const ONE_WRITE_MAX: usize = 64 * 1024;

/// Writes a whole answer (head and `Content-Length` body) and flushes once:
/// up to [`ONE_WRITE_MAX`] in one write, so it leaves in as few segments as
/// it can and the client wakes up once; a larger one as two (the socket's
/// `TCP_NODELAY`, set at accept, keeps its last segment from waiting).
pub(super) fn write_answer(
    out: &mut impl Write,
    status: u16,
    headers: &[(&str, String)],
    body: &[u8],
    keep_alive: bool,
) -> io::Result<()> {
    let head = head(status, headers, Some(body.len()), keep_alive);
    if head.len() + body.len() <= ONE_WRITE_MAX {
        let mut frame = Vec::with_capacity(head.len() + body.len());
        frame.extend_from_slice(head.as_bytes());
        frame.extend_from_slice(body);
        out.write_all(&frame)?;
    } else {
        out.write_all(head.as_bytes())?;
        out.write_all(body)?;
    }
    out.flush()
}

/// A whole answer given to a [`Responder::capture`] responder.
#[derive(Debug, Clone, PartialEq)]
pub struct Captured {
    pub status: u16,
    pub body: Vec<u8>,
}

/// Answers one request, once.
pub struct Responder {
    pub(super) stream: Option<Arc<TcpStream>>,
    pub(super) log: AccessLog,
    pub(super) cors_origin: Option<String>,
    /// Where the connection may stay open: set once a whole answer went out
    /// saying so (a stream always closes).
    pub(super) kept: Option<Arc<AtomicBool>>,
    /// Headers every answer of this request carries (`Warning`).
    pub(super) added: Vec<(&'static str, String)>,
    /// Where the answer goes instead of the client (a request inside another).
    pub(super) capture: Option<crossbeam_channel::Sender<Captured>>,
}

impl Responder {
    /// Adds a header to whatever answer this request gets, whole or streamed.
    pub fn add_header(&mut self, name: &'static str, value: String) {
        self.added.push((name, value));
    }

    /// A responder for a request made inside this one (Vertex AI's `/predict`
    /// sends each instance through its route): its whole answer comes back on
    /// the receiver instead of going out, and it sees this request's client go
    /// (without reading what that client sends next). It cannot stream.
    pub fn capture(
        &self,
        method: &str,
        path: &str,
    ) -> (Responder, crossbeam_channel::Receiver<Captured>) {
        let (answer, answered) = crossbeam_channel::bounded(1);
        let responder = Responder {
            stream: self.stream.clone(),
            log: AccessLog::new(method, path, Instant::now()),
            cors_origin: None,
            kept: Some(Arc::new(AtomicBool::new(false))),
            added: Vec::new(),
            capture: Some(answer),
        };
        (responder, answered)
    }

    /// Hands a captured responder's answer back; `false` for one that answers a client.
    fn captured(&mut self, status: u16, body: &[u8]) -> bool {
        let Some(capture) = self.capture.take() else {
            return false;
        };
        self.log.status = status;
        self.stream = None;
        let _ = capture.send(Captured {
            status,
            body: body.to_vec(),
        });
        true
    }

    fn base_headers(&self) -> Vec<(&'static str, String)> {
        let mut headers = vec![("Cache-Control", "no-store".to_string())];
        headers.extend(self.added.iter().cloned());
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
        if self.captured(status, body.as_bytes()) {
            return;
        }
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
        let result = write_answer(&mut writer, status, headers, body, keep);
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
    pub(super) fn preflight(self, requested: Option<&str>) {
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
        if self.captured(status, body) {
            return;
        }
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
    pub fn sse(self) -> io::Result<SseStream> {
        self.stream_as("text/event-stream", false)
    }

    /// Starts an `application/x-ndjson` answer (Ollama's streams): the same
    /// stream, each [`SseStream::send`] one line of JSON, and no keep-alive
    /// comments (a blank or non-JSON line would break a line-by-line reader).
    pub fn ndjson(self) -> io::Result<SseStream> {
        self.stream_as("application/x-ndjson", true)
    }

    fn stream_as(mut self, content_type: &str, ndjson: bool) -> io::Result<SseStream> {
        if self.capture.is_some() {
            let message = "an answer given back to its caller cannot stream";
            return Err(io::Error::new(io::ErrorKind::Unsupported, message));
        }
        self.log.status = 200;
        let stream = self
            .stream
            .take()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))?;
        let mut headers = self.base_headers();
        headers.push(("Content-Type", content_type.into()));
        headers.push(("X-Accel-Buffering", "no".into()));
        // Events are small and must leave at once: no Nagle delay behind an
        // unacked one (set at accept already; a stream cannot do without it).
        stream.set_nodelay(true)?;
        let mut writer = &*stream;
        writer.write_all(head(200, &headers, None, false).as_bytes())?;
        writer.flush()?;
        Ok(SseStream {
            stream,
            _log: self.log,
            last_write: Instant::now(),
            ndjson,
        })
    }
}

/// Whether the peer closed its side. The request is fully read, so what is
/// still readable is end of stream, an error, or bytes after the request (a
/// pipelined request, never served): those are read and dropped, so they do
/// not hide a close behind them. A 1 ms read timeout keeps the check short.
pub(super) fn peer_closed(stream: &TcpStream) -> bool {
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
pub(super) fn peer_closed_keeping(stream: &TcpStream) -> bool {
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
pub(super) fn pending_bytes(stream: &TcpStream) -> bool {
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
pub(super) fn linger_close(stream: &TcpStream) {
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
    /// Lines of JSON rather than events ([`Responder::ndjson`]).
    ndjson: bool,
}

impl SseStream {
    /// Sends `data: <line>` as one event (on an NDJSON stream, `<line>` and a
    /// newline; `data` is one line of JSON there).
    pub fn send(&mut self, data: &str) -> io::Result<()> {
        if self.ndjson {
            return self.chunk(format!("{data}\n").as_bytes());
        }
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
        if self.ndjson {
            return Ok(());
        }
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

//! HTTP plumbing shared by the API backends: ureq agents with timeouts, the
//! caps on what a provider may send (one reply, one body after decompression), the
//! mapping of transport failures and provider error bodies to
//! [`BackendError`] (the bodies and the one context-overflow classifier in
//! `http/errors.rs`), and the retry loop.
//!
//! The hosted backends (`super::hosted`) build their requests and parse their
//! streams themselves; everything about failing and retrying lives here so it
//! behaves the same for every provider.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io::{self, Read};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;

mod errors;

pub use errors::{error_from_body, error_from_value};

use super::recording::{RequestHead, Tape};
use crate::core::{Answer, BackendError, Event, EventSink, Flow, ToolCall};
use crate::util::log::{self, Category};
use crate::util::net::is_loopback_url;

/// Largest error or non-streamed body read into memory, after decompression.
pub const MAX_BODY_BYTES: u64 = 64 * 1024 * 1024;

/// What one reply may grow to by default (content, reasoning and tool-call
/// arguments together): far above any model's output limit (128k tokens are about
/// 0.5 MiB), far below what would strain memory. The config key is `max_reply_mb`.
pub const DEFAULT_MAX_REPLY_BYTES: u64 = 16 * 1024 * 1024;

/// A streamed body may be this many times the reply cap (after decompression), for
/// the JSON around each delta; never less than [`MAX_BODY_BYTES`].
const STREAM_OVERHEAD: u64 = 4;

/// Timeouts and size caps for one backend's requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connection setup, TLS included.
    pub connect: Duration,
    /// Longest silence between two reads; on a stream, the longest pause between tokens.
    pub per_read: Duration,
    /// The whole request, body included.
    pub overall: Duration,
    /// The largest reply (see [`DEFAULT_MAX_REPLY_BYTES`]).
    pub reply_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            connect: Duration::from_secs(10),
            per_read: Duration::from_secs(120),
            overall: Duration::from_secs(600),
            reply_bytes: DEFAULT_MAX_REPLY_BYTES,
        }
    }
}

impl Limits {
    /// The cap on a response body after decompression: a stream carries a whole
    /// reply in many small JSON events, a plain body one JSON document.
    pub fn body_bytes(&self, stream: bool) -> u64 {
        match stream {
            true => self
                .reply_bytes
                .saturating_mul(STREAM_OVERHEAD)
                .max(MAX_BODY_BYTES),
            false => MAX_BODY_BYTES.max(self.reply_bytes),
        }
    }
}

/// What every remote API backend needs to reach its provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiSettings {
    pub base_url: String,
    pub api_key: Option<String>,
    pub model: String,
    /// Context window in tokens, 0 when unknown.
    pub context_size: u64,
    pub extra_headers: Vec<(String, String)>,
    pub limits: Limits,
    pub max_retries: u32,
    /// Where exchanges are recorded to or replayed from (`--record`, `--replay`).
    pub tape: Tape,
}

impl ApiSettings {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ApiSettings {
            base_url: base_url.into(),
            api_key: None,
            model: model.into(),
            context_size: 0,
            extra_headers: Vec::new(),
            limits: Limits::default(),
            max_retries: RetryPolicy::default().max_retries,
            tape: Tape::off(),
        }
    }

    /// The retry policy these settings ask for.
    pub fn policy(&self) -> RetryPolicy {
        RetryPolicy {
            max_retries: self.max_retries,
            reply_bytes: self.limits.reply_bytes,
            ..RetryPolicy::default()
        }
    }

    /// `base_url` without a trailing slash.
    pub fn base(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }

    /// Adds the configured extra headers to a request.
    pub fn with_headers<B>(&self, mut builder: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        for (name, value) in &self.extra_headers {
            builder = builder.header(name, value);
        }
        builder
    }
}

/// An agent for requests to `url`. Error statuses come back as responses so
/// their bodies and `Retry-After` can be read; loopback hosts bypass any
/// proxy from the environment (ureq honours `HTTP(S)_PROXY` by default).
pub fn build_agent(url: &str, limits: &Limits) -> ureq::Agent {
    let builder = ureq::Agent::config_builder()
        .timeout_connect(Some(limits.connect))
        .timeout_per_read(Some(limits.per_read))
        .timeout_global(Some(limits.overall))
        .http_status_as_error(false);
    let builder = if is_loopback_url(url) {
        builder.proxy(None)
    } else {
        builder
    };
    ureq::Agent::new_with_config(builder.build())
}

/// Maps a failure to send a request or read its head.
pub fn transport_error(error: ureq::Error, url: &str) -> BackendError {
    match error {
        ureq::Error::Timeout(which) => BackendError::Timeout(format!("{url}: {which}")),
        ureq::Error::Io(e) => io_error(e, url),
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::Tls(_) => {
            BackendError::Connect(format!("{url}: {error}"))
        }
        ureq::Error::BadUri(_) | ureq::Error::InvalidProxyUrl => {
            BackendError::Config(format!("bad URL {url}: {error}"))
        }
        other => BackendError::Protocol(format!("{url}: {other}")),
    }
}

/// Maps an I/O failure, also one while reading a streamed body (ureq wraps
/// its own errors, timeouts included, inside `io::Error`); a body over its cap
/// becomes [`BackendError::TooLarge`].
pub fn io_error(error: io::Error, url: &str) -> BackendError {
    use io::ErrorKind as K;
    if let Some(Oversize(cap)) = error.get_ref().and_then(|e| e.downcast_ref::<Oversize>()) {
        return too_large(&format!("{url}: the response body"), *cap);
    }
    if let Some(ureq::Error::Timeout(which)) = error
        .get_ref()
        .and_then(|e| e.downcast_ref::<ureq::Error>())
    {
        return BackendError::Timeout(format!("{url}: {which}"));
    }
    match error.kind() {
        K::TimedOut | K::WouldBlock => BackendError::Timeout(format!("{url}: {error}")),
        K::ConnectionRefused
        | K::ConnectionReset
        | K::ConnectionAborted
        | K::NotConnected
        | K::AddrNotAvailable => BackendError::Connect(format!("{url}: {error}")),
        _ => BackendError::Protocol(format!("{url}: {error}")),
    }
}

/// Sends `body`; a 2xx response comes back for reading, anything else as its
/// typed error. Every API backend's requests pass here, so this is where the
/// `tape` records them or serves them from a recording instead.
pub fn send(
    builder: ureq::RequestBuilder<ureq::typestate::WithBody>,
    body: &[u8],
    url: &str,
    tape: &Tape,
) -> Result<ureq::http::Response<ureq::Body>, BackendError> {
    let started = Instant::now();
    let head = match tape.is_on() {
        true => RequestHead::of(&builder, body),
        false => RequestHead::default(),
    };
    let response = tape.exchange(&head, || {
        builder.send(body).map_err(|e| transport_error(e, url))
    })?;
    checked(response, url, started)
}

/// `GET url` and parse its JSON body (the providers' model lists).
pub fn get_json(
    builder: ureq::RequestBuilder<ureq::typestate::WithoutBody>,
    url: &str,
) -> Result<Value, BackendError> {
    let started = Instant::now();
    let response = builder.call().map_err(|e| transport_error(e, url))?;
    let response = checked(response, url, started)?;
    let text = read_text(response.into_body().into_reader(), url)?;
    serde_json::from_str(&text)
        .map_err(|e| BackendError::Protocol(format!("{url}: bad JSON ({e})")))
}

fn checked(
    response: ureq::http::Response<ureq::Body>,
    url: &str,
    started: Instant,
) -> Result<ureq::http::Response<ureq::Body>, BackendError> {
    let status = response.status().as_u16();
    log::debug(Category::Http, || {
        format!("{url} -> {status} after {:?}", started.elapsed())
    });
    if (200..300).contains(&status) {
        Ok(response)
    } else {
        Err(error_response(response, status))
    }
}

/// Reads an error response into a typed error, honouring `Retry-After`.
pub fn error_response(response: ureq::http::Response<ureq::Body>, status: u16) -> BackendError {
    let retry_after = response
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| parse_retry_after(v, SystemTime::now()));
    let mut text = String::new();
    let mut reader = response.into_body().into_reader().take(MAX_BODY_BYTES);
    // A body that cannot be read still leaves the status to report.
    let _ = reader.read_to_string(&mut text);
    log::debug(Category::Http, || format!("error body: {text}"));
    error_from_body(status, &text, retry_after)
}

/// Reads a whole (non-streamed) body; one over [`MAX_BODY_BYTES`] is an error.
pub fn read_text(reader: impl Read, url: &str) -> Result<String, BackendError> {
    let mut text = String::new();
    Capped::new(reader, MAX_BODY_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| io_error(e, url))?;
    Ok(text)
}

/// A response's body as it arrives (decompressed), capped as `limits` says for
/// a stream or a plain body; past the cap a read fails with [`BackendError::TooLarge`]
/// (through [`io_error`]).
pub fn body_reader(
    response: ureq::http::Response<ureq::Body>,
    limits: &Limits,
    stream: bool,
) -> BodyReader {
    let cap = limits.body_bytes(stream);
    io::BufReader::new(Capped::new(response.into_body().into_reader(), cap))
}

/// A response body as [`body_reader`] gives it.
pub type BodyReader = io::BufReader<Capped<ureq::BodyReader<'static>>>;

/// A reader that fails once more than `cap` bytes came through, rather than
/// cutting the body short (a cut JSON document would read as a bad one).
pub struct Capped<R> {
    inner: R,
    cap: u64,
    read: u64,
}

impl<R: Read> Capped<R> {
    pub fn new(inner: R, cap: u64) -> Self {
        Capped {
            inner,
            cap,
            read: 0,
        }
    }
}

impl<R: Read> Read for Capped<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // One byte past the cap is enough to know the body is over it.
        let room = (self.cap - self.read.min(self.cap)).saturating_add(1);
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.read += n as u64;
        if self.read > self.cap {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                Oversize(self.cap),
            ));
        }
        Ok(n)
    }
}

/// The error a [`Capped`] reader fails with: its cap.
#[derive(Debug)]
struct Oversize(u64);

impl std::fmt::Display for Oversize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "body over {} bytes", self.0)
    }
}

impl std::error::Error for Oversize {}

/// `text` as one URL path segment: every byte but RFC 3986's unreserved characters
/// percent-encoded, so a name (a model's) can never change the path or add a query
/// (`a/../../admin?x`).
pub fn path_segment(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// Parses a JSON body or stream payload; bad JSON is a `Protocol` error quoting its start.
pub fn parse_json(text: &str) -> Result<Value, BackendError> {
    serde_json::from_str(text).map_err(|e| {
        let start: String = text.chars().take(200).collect();
        BackendError::Protocol(format!("bad JSON from the server ({e}): {start}"))
    })
}

/// Longest wait a provider's `Retry-After` may impose.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Parses `Retry-After` (delay-seconds or an HTTP date), capped at [`MAX_RETRY_AFTER`].
pub fn parse_retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let value = value.trim();
    let delay = match value.parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds >= 0.0 => {
            Duration::from_secs_f64(seconds.min(MAX_RETRY_AFTER.as_secs_f64()))
        }
        Ok(_) => return None,
        Err(_) => {
            let at = UNIX_EPOCH + Duration::from_secs(parse_http_date(value)?);
            at.duration_since(now).unwrap_or(Duration::ZERO)
        }
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

/// Seconds since the epoch of an IMF-fixdate such as `Sun, 06 Nov 1994 08:49:37 GMT`.
fn parse_http_date(value: &str) -> Option<u64> {
    let fields: Vec<&str> = value.split_whitespace().collect();
    let [_, day, month, year, time, "GMT"] = fields[..] else {
        return None;
    };
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let month = MONTHS.iter().position(|m| *m == month)? as u64 + 1;
    let day: u64 = day.parse().ok()?;
    let year: u64 = year.parse().ok()?;
    let mut hms = time.split(':').map(|p| p.parse::<u64>().ok());
    let (h, m, s) = (hms.next()??, hms.next()??, hms.next()??);
    Some(crate::util::time::days_from_civil(year, month, day)? * 86_400 + h * 3600 + m * 60 + s)
}

/// How often and how long to retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_retries: u32,
    /// The cap each attempt's reply is held to ([`Limits::reply_bytes`]).
    pub reply_bytes: u64,
    /// The first backoff; each further one doubles, jittered by ±25 %.
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_retries: 3,
            reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            base_delay: Duration::from_millis(250),
            max_delay: Duration::from_secs(8),
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `attempt` (0-based): the provider's
    /// `retry_after` when it gave one, else jittered exponential backoff.
    pub fn delay(&self, attempt: u32, retry_after: Option<Duration>) -> Duration {
        if let Some(wait) = retry_after {
            return wait.min(MAX_RETRY_AFTER);
        }
        let exponential = self
            .base_delay
            .saturating_mul(1u32 << attempt.min(16))
            .min(self.max_delay);
        exponential.mul_f64(0.75 + 0.5 * jitter_fraction(attempt))
    }
}

/// A number in [0, 1) that differs between calls, from std's randomly keyed hasher.
fn jitter_fraction(attempt: u32) -> f64 {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u32(attempt);
    (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
}

/// Passes events on and remembers whether anything reached the user, which
/// makes a retry unsafe (the user would see the text twice); counts the reply's
/// text and stops the attempt once it passes the cap.
struct AttemptSink<'a> {
    inner: &'a mut dyn EventSink,
    shown: bool,
    /// Bytes of content, reasoning and tool-call arguments so far.
    bytes: u64,
    cap: u64,
}

impl AttemptSink<'_> {
    fn over(&self) -> bool {
        self.bytes > self.cap
    }
}

impl EventSink for AttemptSink<'_> {
    fn emit(&mut self, event: Event) -> Flow {
        self.shown = true;
        self.bytes += reply_bytes_of(&event);
        if self.over() {
            return Flow::Cancel;
        }
        self.inner.emit(event)
    }

    fn cancelled(&self) -> bool {
        self.over() || self.inner.cancelled()
    }

    fn approve(&mut self, call: &ToolCall) -> Answer {
        self.inner.approve(call)
    }
}

/// What an event adds to the reply: its text, or a tool call's name and arguments.
fn reply_bytes_of(event: &Event) -> u64 {
    let len = match event {
        Event::Content(text) | Event::Thinking(text) | Event::CodeBlock(text) => text.len(),
        Event::ToolCall(call) => call.name.len() + call.arguments.to_string().len(),
        _ => 0,
    };
    len as u64
}

/// The error for a reply or body past its cap, naming the cap and how to raise it.
pub fn too_large(what: &str, cap: u64) -> BackendError {
    BackendError::TooLarge(format!(
        "{what} passed {} MiB; raise the cap with \"max_reply_mb\" in the config file \
         (a stream may carry {STREAM_OVERHEAD} times that, a plain body at least {} MiB)",
        cap.div_ceil(1024 * 1024),
        MAX_BODY_BYTES / (1024 * 1024)
    ))
}

/// Runs `attempt` until it succeeds, fails for good, or `policy` runs out.
/// A reply whose text passes `policy.reply_bytes` is stopped there and ends
/// with [`BackendError::TooLarge`], never retried.
/// A retryable error is retried only when the failed attempt showed nothing;
/// before each wait a `System` notice says why; a cancel during the wait
/// ends with [`BackendError::Cancelled`].
pub fn with_retries<T>(
    policy: &RetryPolicy,
    sink: &mut dyn EventSink,
    mut attempt: impl FnMut(&mut dyn EventSink) -> Result<T, BackendError>,
) -> Result<T, BackendError> {
    let mut retries = 0;
    loop {
        let mut shown = AttemptSink {
            inner: &mut *sink,
            shown: false,
            bytes: 0,
            cap: policy.reply_bytes,
        };
        let result = attempt(&mut shown);
        if shown.over() {
            return Err(too_large("the reply", policy.reply_bytes));
        }
        let error = match result {
            Ok(value) => return Ok(value),
            Err(error) => error,
        };
        if shown.shown || !error.is_retryable() || retries >= policy.max_retries {
            return Err(error);
        }
        let retry_after = match &error {
            BackendError::Http { retry_after, .. } => *retry_after,
            _ => None,
        };
        let delay = policy.delay(retries, retry_after);
        let notice = format!("retrying in {:.1}s: {error}", delay.as_secs_f64());
        if sink.emit(Event::System(notice)) == Flow::Cancel || !wait_unless_cancelled(delay, sink) {
            return Err(BackendError::Cancelled);
        }
        retries += 1;
    }
}

/// Waits `delay` in small slices so a cancel is noticed promptly; false when cancelled.
pub fn wait_unless_cancelled(delay: Duration, sink: &dyn EventSink) -> bool {
    const SLICE: Duration = Duration::from_millis(50);
    let deadline = Instant::now() + delay;
    loop {
        if sink.cancelled() {
            return false;
        }
        let now = Instant::now();
        if now >= deadline {
            return true;
        }
        std::thread::sleep(SLICE.min(deadline - now));
    }
}

/// Encodes a wire request once, so retries resend the very same bytes.
pub fn encode<T: serde::Serialize>(wire: &T) -> Result<Vec<u8>, BackendError> {
    serde_json::to_vec(wire)
        .map_err(|e| BackendError::Protocol(format!("cannot encode request: {e}")))
}

#[cfg(test)]
mod tests {
    use super::errors::{leading_number, numbers_in};
    use super::*;

    #[test]
    fn a_path_segment_encodes_all_but_unreserved_characters() {
        assert_eq!(path_segment("gemini-2.5-flash_x~1"), "gemini-2.5-flash_x~1");
        assert_eq!(path_segment("a/../b?c=d#e f"), "a%2F..%2Fb%3Fc%3Dd%23e%20f");
        assert_eq!(path_segment("é"), "%C3%A9");
    }
    use std::cell::Cell;

    fn overflow(prompt: Option<u64>, limit: Option<u64>) -> (Option<u64>, Option<u64>) {
        (prompt, limit)
    }

    fn check_overflow(status: u16, body: &str, expected: Option<(Option<u64>, Option<u64>)>) {
        let got = match error_from_body(status, body, None) {
            BackendError::ContextOverflow {
                prompt_tokens,
                limit,
                ..
            } => Some((prompt_tokens, limit)),
            _ => None,
        };
        assert_eq!(got, expected, "body {body}");
    }

    #[test]
    fn overflow_messages_of_every_provider() {
        check_overflow(
            400,
            r#"{"error":{"message":"This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#,
            Some(overflow(Some(9000), Some(8192))),
        );
        check_overflow(
            400,
            r#"{"error":{"message":"This model's maximum context length is 4,097 tokens, however you requested 5,000 tokens (4000 in the messages, 1000 in the completion).","code":null}}"#,
            Some(overflow(Some(5000), Some(4097))),
        );
        check_overflow(
            400,
            r#"{"error":{"code":400,"message":"request (9000 tokens) exceeds the available context size (8192 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":9001,"n_ctx":8192}}"#,
            Some(overflow(Some(9001), Some(8192))),
        );
        check_overflow(
            500,
            r#"{"error":{"message":"request (300 tokens) exceeds the available context size (256 tokens), try increasing it","type":"exceed_context_size_error"}}"#,
            Some(overflow(Some(300), Some(256))),
        );
        check_overflow(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"}}"#,
            Some(overflow(Some(208310), Some(200000))),
        );
        check_overflow(
            400,
            r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 195000 + 8192 > 200000, decrease input length or `max_tokens` and try again"}}"#,
            Some(overflow(Some(203192), Some(200000))),
        );
        check_overflow(
            400,
            r#"{"error":{"code":400,"message":"The input token count (1200000) exceeds the maximum number of tokens allowed (1048576).","status":"INVALID_ARGUMENT"}}"#,
            Some(overflow(Some(1200000), Some(1048576))),
        );
        check_overflow(
            400,
            r#"{"error":{"message":"Your input exceeds the context window of this model.","code":"context_length_exceeded"}}"#,
            Some(overflow(None, None)),
        );
        check_overflow(
            400,
            r#"{"error":{"message":"Invalid value for temperature","code":"invalid_value"}}"#,
            None,
        );
        check_overflow(429, r#"{"error":{"message":"Rate limit reached"}}"#, None);
    }

    fn check_http(body: &str, status: u16, code: &str, message: &str) {
        let expected = BackendError::Http {
            status,
            code: code.into(),
            message: message.into(),
            retry_after: None,
        };
        assert_eq!(error_from_body(status, body, None), expected, "body {body}");
    }

    #[test]
    fn error_body_shapes() {
        check_http(
            r#"{"error":{"message":"bad key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#,
            401,
            "invalid_request_error",
            "bad key",
        );
        check_http(r#"{"error":"model not found"}"#, 404, "", "model not found");
        check_http(
            r#"[{"error":{"code":"429","message":"slow down"}}]"#,
            429,
            "429",
            "slow down",
        );
        check_http(
            r#"{"object":"error","message":"vllm says no","type":"BadRequestError","code":400}"#,
            400,
            "BadRequestError",
            "vllm says no",
        );
        check_http(
            r#"{"error":{"code":503,"message":"overloaded","status":"UNAVAILABLE"}}"#,
            503,
            "UNAVAILABLE",
            "overloaded",
        );
        check_http(
            "<html>Bad Gateway</html>",
            502,
            "",
            "<html>Bad Gateway</html>",
        );
        check_http("", 500, "", "status 500");
    }

    #[test]
    fn mid_stream_error_objects() {
        let value: Value =
            serde_json::from_str(r#"{"error":{"message":"overloaded","type":"server_error"}}"#)
                .expect("valid JSON");
        assert!(matches!(
            error_from_value(&value),
            BackendError::Http { status: 500, .. }
        ));
        let value: Value = serde_json::from_str(r#"{"error":{"message":"maximum context length is 10 tokens. However, your messages resulted in 12 tokens","code":400}}"#).expect("valid JSON");
        assert_eq!(error_from_value(&value).tokens_over(), Some(2));
    }

    #[test]
    fn retry_after_seconds_dates_and_caps() {
        let now = UNIX_EPOCH + Duration::from_secs(784_111_777); // Sun, 06 Nov 1994 08:49:37 GMT
        let check = |value: &str, expected: Option<Duration>| {
            assert_eq!(parse_retry_after(value, now), expected, "{value}");
        };
        check("1", Some(Duration::from_secs(1)));
        check(" 2.5 ", Some(Duration::from_millis(2500)));
        check("3600", Some(MAX_RETRY_AFTER));
        check(
            "Sun, 06 Nov 1994 08:49:47 GMT",
            Some(Duration::from_secs(10)),
        );
        check("Sun, 06 Nov 1994 08:49:00 GMT", Some(Duration::ZERO));
        check("-1", None);
        check("soon", None);
        check("Sun, 06 Foo 1994 08:49:47 GMT", None);
    }

    #[test]
    fn backoff_doubles_with_jitter_and_honours_retry_after() {
        let policy = RetryPolicy::default();
        for attempt in 0..4 {
            let nominal = 250.0 * f64::from(1u32 << attempt);
            let got = policy.delay(attempt, None).as_secs_f64() * 1000.0;
            assert!(
                got >= nominal * 0.75 && got < nominal * 1.25,
                "attempt {attempt}: {got}"
            );
        }
        assert!(policy.delay(20, None) <= Duration::from_secs(10));
        assert_eq!(
            policy.delay(0, Some(Duration::from_secs(99))),
            MAX_RETRY_AFTER
        );
    }

    fn fast_policy() -> RetryPolicy {
        RetryPolicy {
            max_retries: 2,
            reply_bytes: DEFAULT_MAX_REPLY_BYTES,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        }
    }

    fn busy() -> BackendError {
        BackendError::Http {
            status: 503,
            code: String::new(),
            message: "busy".into(),
            retry_after: None,
        }
    }

    #[test]
    fn retries_until_success_with_notices() {
        let mut events = Vec::new();
        let calls = Cell::new(0);
        let result = with_retries(&fast_policy(), &mut events, |_| {
            calls.set(calls.get() + 1);
            if calls.get() < 3 {
                Err(busy())
            } else {
                Ok(7)
            }
        });
        assert_eq!(result, Ok(7));
        assert_eq!(calls.get(), 3);
        let notices = events
            .iter()
            .filter(|e| matches!(e, Event::System(m) if m.starts_with("retrying in")))
            .count();
        assert_eq!(notices, 2);
    }

    #[test]
    fn gives_up_after_max_retries_and_on_permanent_errors() {
        let calls = Cell::new(0);
        let result: Result<(), _> = with_retries(&fast_policy(), &mut Vec::new(), |_| {
            calls.set(calls.get() + 1);
            Err(busy())
        });
        assert_eq!(result, Err(busy()));
        assert_eq!(calls.get(), 3);
        calls.set(0);
        let result: Result<(), _> = with_retries(&fast_policy(), &mut Vec::new(), |_| {
            calls.set(calls.get() + 1);
            Err(BackendError::Protocol("bad".into()))
        });
        assert!(result.is_err());
        assert_eq!(calls.get(), 1);
    }

    #[test]
    fn a_reply_past_its_cap_is_stopped_there_and_named() {
        let policy = RetryPolicy {
            reply_bytes: 10,
            ..fast_policy()
        };
        let calls = Cell::new(0);
        let mut events = Vec::new();
        let result: Result<(), _> = with_retries(&policy, &mut events, |sink| {
            calls.set(calls.get() + 1);
            let mut sent = 0;
            // An endless reply: only the sink can stop it.
            while sink.emit(Event::Content("four".into())) == Flow::Continue {
                sent += 1;
                assert!(sent < 1000, "the cap never stopped the reply");
            }
            Ok(())
        });
        let error = result.expect_err("a reply over its cap is an error");
        assert!(matches!(error, BackendError::TooLarge(_)), "{error:?}");
        assert!(error.to_string().contains("max_reply_mb"), "{error}");
        assert_eq!(calls.get(), 1, "never retried");
        // What passed on stayed within the cap: two pieces of four bytes.
        assert_eq!(events.len(), 2, "{events:?}");
        // Exactly at the cap is still a reply.
        let exact: Result<(), _> = with_retries(&policy, &mut Vec::new(), |sink| {
            sink.emit(Event::Content("0123456789".into()));
            Ok(())
        });
        assert_eq!(exact, Ok(()));
    }

    #[test]
    fn a_body_past_its_cap_fails_instead_of_being_cut() {
        for (len, cap, fits) in [
            (0, 0, true),
            (10, 10, true),
            (11, 10, false),
            (5000, 4096, false),
        ] {
            let body = vec![b'x'; len];
            // One byte per read and whole reads: the boundary holds either way.
            for bytewise in [false, true] {
                let mut reader: Box<dyn Read> = match bytewise {
                    true => Box::new(crate::stream::ChunkReader::new(
                        body.iter().map(|b| vec![*b]).collect(),
                    )),
                    false => Box::new(&body[..]),
                };
                let mut out = Vec::new();
                let result = Capped::new(&mut reader, cap).read_to_end(&mut out);
                match result {
                    Ok(n) => assert!(fits && n == len, "{len} over {cap} read whole"),
                    Err(e) => {
                        assert!(!fits, "{len} within {cap} refused: {e}");
                        assert!(
                            out.len() as u64 <= cap + 1,
                            "read {} past the cap",
                            out.len()
                        );
                        let error = io_error(e, "http://x");
                        assert!(matches!(error, BackendError::TooLarge(_)), "{error:?}");
                    }
                }
            }
        }
        let plain = Limits::default();
        assert_eq!(plain.body_bytes(false), MAX_BODY_BYTES);
        assert_eq!(plain.body_bytes(true), 4 * DEFAULT_MAX_REPLY_BYTES);
    }

    #[test]
    fn no_retry_once_output_was_shown() {
        let calls = Cell::new(0);
        let result: Result<(), _> = with_retries(&fast_policy(), &mut Vec::new(), |sink| {
            calls.set(calls.get() + 1);
            sink.emit(Event::Content("partial".into()));
            Err(busy())
        });
        assert_eq!(result, Err(busy()));
        assert_eq!(calls.get(), 1);
    }

    struct CancelledSink;

    impl EventSink for CancelledSink {
        fn emit(&mut self, _event: Event) -> Flow {
            Flow::Continue
        }
        fn cancelled(&self) -> bool {
            true
        }
    }

    #[test]
    fn cancel_during_the_wait_ends_promptly() {
        let policy = RetryPolicy {
            base_delay: Duration::from_secs(5),
            ..RetryPolicy::default()
        };
        let started = Instant::now();
        let result: Result<(), _> = with_retries(&policy, &mut CancelledSink, |_| Err(busy()));
        assert_eq!(result, Err(BackendError::Cancelled));
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    #[test]
    fn numbers() {
        assert_eq!(leading_number("128,000 tokens"), Some(128_000));
        assert_eq!(leading_number("12, and"), Some(12));
        assert_eq!(leading_number("x"), None);
        assert_eq!(leading_number("99999999999999999999999"), None);
        assert_eq!(numbers_in("a 1 + 2 > 3,000."), vec![1, 2, 3000]);
    }
}

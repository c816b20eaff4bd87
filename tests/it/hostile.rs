//! Hostile input against the servers, over raw sockets: hundreds of generated
//! malformed HTTP requests for `--cliserver` and `--server` (one HTTP layer,
//! `frontend::http`), malformed and oversized lines for `--toolserver`, and a
//! slow-loris attack on the connection cap.
//!
//! Every case must end in a 4xx JSON error (or the exact status the case
//! names) or a clean close, within its deadline; between batches the server
//! process must still be alive, must not have logged a panic, and must still
//! answer `/health` (or `listTools`). Nothing smuggled may reach the model:
//! the fake upstream must never be called.

use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fake_openai::{text_stream, Canned, FakeOpenAi};
use crate::harness::Sandbox;

const TOKEN: &str = "hostile-token-5e1d";

/// How long one case may take, from connecting to the server's close.
const CASE_DEADLINE: Duration = Duration::from_secs(5);

/// A running server, killed on drop.
struct Daemon {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
    _sandbox: Sandbox,
}

impl Daemon {
    fn start(args: &[&str]) -> Daemon {
        let sandbox = Sandbox::new("hostile");
        let mut child = sandbox.spawn(args);
        let (address, log) = crate::harness::wait_listening(&mut child);
        Daemon {
            child,
            addr: address.trim_start_matches("http://").to_string(),
            log,
            _sandbox: sandbox,
        }
    }

    /// `--cliserver` or `--server` in front of the fake upstream, with a token.
    fn http(mode: &str, fake: &FakeOpenAi) -> Daemon {
        let server = Daemon::start(&[
            mode,
            "--port",
            "0",
            "--backend",
            "openai",
            "--api-base",
            &fake.base_url,
            "-m",
            "test",
            "--auth-token",
            TOKEN,
        ]);
        let ready = crate::harness::poll_until(Duration::from_secs(30), || {
            server.get("/health").status() == Some(200)
        });
        assert!(ready, "never healthy: {}", server.log());
        server
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    fn get(&self, path: &str) -> Answer {
        let request = format!("GET {path} HTTP/1.1\r\nHost: {}\r\n\r\n", self.addr);
        exchange(&self.addr, request.as_bytes())
    }

    /// Still running, no panic logged, and `/health` answers.
    fn assert_healthy(&mut self, batch: &str) {
        self.assert_alive(batch);
        let health = self.get("/health");
        assert_eq!(health.status(), Some(200), "after {batch}: {health:?}");
    }

    fn assert_alive(&mut self, batch: &str) {
        let exited = self.child.try_wait().expect("try_wait");
        assert!(
            exited.is_none(),
            "after {batch} the server exited: {exited:?}"
        );
        let log = self.log();
        assert!(!log.contains("panicked"), "after {batch}: {log}");
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What came back on one connection.
struct Answer {
    bytes: Vec<u8>,
    /// The server closed (or reset) the connection before the deadline.
    closed: bool,
    took: Duration,
}

impl std::fmt::Debug for Answer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = String::from_utf8_lossy(&self.bytes);
        let shown: String = text.chars().take(400).collect();
        write!(f, "closed={} took={:?} {shown:?}", self.closed, self.took)
    }
}

impl Answer {
    /// The text after an optional `100 Continue`.
    fn final_response(&self) -> &[u8] {
        let interim = b"HTTP/1.1 100 Continue\r\n\r\n";
        self.bytes.strip_prefix(interim).unwrap_or(&self.bytes)
    }

    fn status(&self) -> Option<u16> {
        let text = std::str::from_utf8(self.final_response()).ok()?;
        text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
    }

    fn json_body(&self) -> Option<Value> {
        let response = self.final_response();
        let at = response.windows(4).position(|w| w == b"\r\n\r\n")?;
        serde_json::from_slice(&response[at + 4..]).ok()
    }
}

/// Connects, sends `request` (the server may hang up first: a failed write
/// is fine) and reads until the server closes or [`CASE_DEADLINE`] passes.
fn exchange(addr: &str, request: &[u8]) -> Answer {
    exchange_with(addr, request, false)
}

/// As [`exchange`]; with `hang_up`, the client closes its sending side
/// after the request (a request cut short).
fn exchange_with(addr: &str, request: &[u8], hang_up: bool) -> Answer {
    let started = Instant::now();
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream.set_write_timeout(Some(CASE_DEADLINE)).unwrap();
    let _ = stream.write_all(request);
    if hang_up {
        let _ = stream.shutdown(Shutdown::Write);
    }
    let (bytes, closed) = read_until_closed(&mut stream, started + CASE_DEADLINE);
    Answer {
        bytes,
        closed,
        took: started.elapsed(),
    }
}

/// Reads until end of stream or a reset (`true`), or the deadline (`false`).
fn read_until_closed(stream: &mut TcpStream, deadline: Instant) -> (Vec<u8>, bool) {
    let mut bytes = Vec::new();
    let mut buffer = [0u8; 16 * 1024];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return (bytes, false);
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut buffer) {
            Ok(0) => return (bytes, true),
            Ok(n) => bytes.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (bytes, false)
            }
            Err(_) => return (bytes, true),
        }
    }
}

/// What a case must end in.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Want {
    /// This status, with a JSON error body when it is 4xx.
    Status(u16),
    /// Any 4xx JSON error.
    ClientError,
    /// A close without a byte (a request cut short).
    Closed,
}

struct Case {
    name: String,
    request: Vec<u8>,
    want: Want,
    /// The client closes its sending side after the request.
    hang_up: bool,
}

fn case(name: impl Into<String>, request: Vec<u8>, want: Want) -> Case {
    Case {
        name: name.into(),
        request,
        want,
        hang_up: false,
    }
}

/// `line`, `Host`, the extra header lines, a blank line and the body.
fn request(line: &[u8], headers: &[&[u8]], body: &[u8]) -> Vec<u8> {
    let mut out = line.to_vec();
    out.extend_from_slice(b"\r\nHost: 127.0.0.1\r\n");
    for header in headers {
        out.extend_from_slice(header);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Runs every batch, checking the server's health after each, and fails
/// with every case that did not end as it must. Returns the number of cases.
fn run_batches(server: &mut Daemon, batches: &[(&str, Vec<Case>)]) -> usize {
    let mut failures = Vec::new();
    for (batch, cases) in batches {
        for case in cases {
            let answer = exchange_with(&server.addr, &case.request, case.hang_up);
            if let Some(why) = verdict(case.want, &answer) {
                failures.push(format!("{batch} / {}: {why}: {answer:?}", case.name));
            }
        }
        server.assert_healthy(batch);
    }
    let total: usize = batches.iter().map(|(_, cases)| cases.len()).sum();
    assert!(
        failures.is_empty(),
        "{} of {total} cases failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
    total
}

/// Why `answer` is not what `want` asks for; `None` when it is.
fn verdict(want: Want, answer: &Answer) -> Option<&'static str> {
    let status = answer.status();
    if !answer.closed {
        return Some("no close within the deadline");
    }
    let as_wanted = match want {
        Want::Closed => answer.bytes.is_empty(),
        Want::Status(wanted) => status == Some(wanted),
        Want::ClientError => status.is_some_and(|s| (400..500).contains(&s)),
    };
    if !as_wanted {
        return Some("unexpected answer");
    }
    let error_body = answer
        .json_body()
        .is_some_and(|body| body["error"]["message"].is_string());
    if status.is_some_and(|s| s >= 400) && !error_body {
        return Some("not a JSON error");
    }
    None
}

/// Bytes that may not appear raw in a request line or header value.
fn control_bytes() -> impl Iterator<Item = u8> {
    (0u8..0x20)
        .chain([0x7f])
        .filter(|b| !matches!(b, b'\n' | b'\t'))
}

const INVALID_UTF8: [&[u8]; 7] = [
    b"\xff",
    b"\xc3\x28",
    b"\xe2\x82",
    b"\xf0\x28\x8c\xbc",
    b"\xc0\xaf",
    b"\xed\xa0\x80",
    b"\xf8\x88\x80\x80\x80",
];

/// Broken request lines, each followed by a valid `Host`.
fn request_line_cases() -> Vec<Case> {
    let mut cases = Vec::new();
    let lines: &[(&str, u16)] = &[
        ("", 400),
        ("GET", 400),
        ("GET /health", 400),
        ("GET /health HTTP/1.1 extra", 400),
        (" GET /health HTTP/1.1", 400),
        ("GET  /health HTTP/1.1", 400),
        ("GET /health  HTTP/1.1", 400),
        ("GET\t/health\tHTTP/1.1", 400),
        ("GET /health HTTP/1.1\r", 400),
        ("GET /health http/1.1", 400),
        ("GET /health HTTP/1", 400),
        ("GET /health HTTP/1.1.1", 400),
        ("GET /health HTTP/11", 400),
        ("GET /health HTTP/", 400),
        ("GET /health HTTX/1.1", 400),
        ("GET /health HTTP/2.0", 505),
        ("GET /health HTTP/0.9", 505),
        ("G@T /health HTTP/1.1", 400),
        ("GE(T /health HTTP/1.1", 400),
        ("/health HTTP/1.1", 400),
        ("GET health HTTP/1.1", 400),
        ("GET * HTTP/1.1", 400),
        ("OPTIONS * HTTP/1.1", 400),
        ("CONNECT 127.0.0.1:80 HTTP/1.1", 400),
        ("GET ftp://127.0.0.1/health HTTP/1.1", 400),
        ("GET http:/health HTTP/1.1", 400),
        ("GET http://@127.0.0.1/health HTTP/1.1", 400),
        ("GET http://user:pw@127.0.0.1/health HTTP/1.1", 400),
        ("GET http:// HTTP/1.1", 400),
        ("GET /he lth HTTP/1.1", 400),
        ("GET /h\u{e9}alth HTTP/1.1", 400),
        ("GET http://evil.example/health HTTP/1.1", 403),
        ("POST http://127.0.0.1/request HTTP/1.1", 401),
    ];
    for (line, status) in lines {
        let want = Want::Status(*status);
        cases.push(case(
            format!("line {line:?}"),
            request(line.as_bytes(), &[], b""),
            want,
        ));
    }
    let long_method = format!("{} /health HTTP/1.1", "G".repeat(10_000));
    cases.push(case(
        "10 KB method",
        request(long_method.as_bytes(), &[], b""),
        Want::ClientError,
    ));
    for byte in control_bytes() {
        let path = [b"GET /hea".as_slice(), &[byte], b"lth HTTP/1.1"].concat();
        cases.push(case(
            format!("path byte {byte:#x}"),
            request(&path, &[], b""),
            Want::Status(400),
        ));
        let method = [b"G".as_slice(), &[byte], b"T /health HTTP/1.1"].concat();
        cases.push(case(
            format!("method byte {byte:#x}"),
            request(&method, &[], b""),
            Want::Status(400),
        ));
    }
    for (n, bad) in INVALID_UTF8.iter().enumerate() {
        let path = [b"GET /health".as_slice(), bad, b" HTTP/1.1"].concat();
        cases.push(case(
            format!("UTF-8 path {n}"),
            request(&path, &[], b""),
            Want::Status(400),
        ));
        let method = [*bad, b" /health HTTP/1.1"].concat();
        cases.push(case(
            format!("UTF-8 method {n}"),
            request(&method, &[], b""),
            Want::Status(400),
        ));
    }
    cases
}

/// Header names and values that are not allowed.
fn header_cases() -> Vec<Case> {
    let get = b"GET /health HTTP/1.1".as_slice();
    let mut cases = Vec::new();
    for c in " \t()<>@,;=?[]\\{}\"/\x7f\x00\x01\u{e9}".chars() {
        let header = format!("X{c}Y: v");
        let want = Want::Status(400);
        cases.push(case(
            format!("name char {c:?}"),
            request(get, &[header.as_bytes()], b""),
            want,
        ));
    }
    let lines: [&[u8]; 8] = [
        b": empty name",
        b"NoColon",
        b"Host : 127.0.0.1",
        b" Folded: x",
        b"\tFolded: x",
        b"Host: evil.example",
        b"X-A: b\r\n  continued",
        b"X-A: b\r\n\tcontinued",
    ];
    for line in lines {
        let name = format!("header {:?}", String::from_utf8_lossy(line));
        cases.push(case(name, request(get, &[line], b""), Want::Status(400)));
    }
    for byte in control_bytes() {
        let value = [b"X-V: a".as_slice(), &[byte], b"b"].concat();
        let name = format!("value byte {byte:#x}");
        cases.push(case(name, request(get, &[&value], b""), Want::Status(400)));
    }
    for (n, bad) in INVALID_UTF8.iter().enumerate() {
        let value = [b"X-V: a".as_slice(), bad].concat();
        cases.push(case(
            format!("UTF-8 value {n}"),
            request(get, &[&value], b""),
            Want::Status(400),
        ));
        let name = [b"X-".as_slice(), bad, b": v"].concat();
        cases.push(case(
            format!("UTF-8 name {n}"),
            request(get, &[&name], b""),
            Want::Status(400),
        ));
    }
    // A value may hold a tab and surrounding whitespace.
    let fine = request(get, &[b"X-V: \ta\tb \t"], b"");
    cases.push(case("tab in a value", fine, Want::Status(200)));
    cases
}

/// `Content-Length`, `Transfer-Encoding` and `Expect`. Every chunked body
/// carries a complete authenticated request after its last chunk: if the
/// server read the body as the next request, the fake upstream would see it.
fn framing_cases() -> Vec<Case> {
    let post = b"POST /request HTTP/1.1".as_slice();
    let mut cases = Vec::new();
    let bad_lengths = [
        "-1", "+5", "5,5", "5, 5", "0x5", "5.0", "1e3", "", "5 5", "five", "-0", "\u{665}",
    ];
    for value in bad_lengths {
        let header = format!("Content-Length: {value}");
        let name = format!("Content-Length {value:?}");
        cases.push(case(
            name,
            request(post, &[header.as_bytes()], b"hello"),
            Want::Status(400),
        ));
    }
    let conflicting = request(
        post,
        &[b"Content-Length: 5", b"Content-Length: 6"],
        b"hello!",
    );
    cases.push(case("two Content-Lengths", conflicting, Want::Status(400)));
    let agreeing = request(
        post,
        &[b"Content-Length: 5", b"content-length: 5"],
        b"hello",
    );
    cases.push(case(
        "agreeing Content-Lengths",
        agreeing,
        Want::Status(401),
    ));
    for value in ["1073741824", "33554433", "99999999999999999999999"] {
        let header = format!("Content-Length: {value}");
        let name = format!("declared {value} bytes");
        cases.push(case(
            name,
            request(post, &[header.as_bytes()], b""),
            Want::Status(413),
        ));
    }
    let smuggled = format!(
        "0\r\n\r\nPOST /request HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 17\r\n\r\n{{\"prompt\":\"pwn\"}}"
    );
    let codings = [
        "chunked",
        "Chunked",
        "CHUNKED",
        "gzip, chunked",
        "chunked, identity",
        "identity",
        " chunked",
        "chunked\t",
        "x",
    ];
    for coding in codings {
        let te = format!("Transfer-Encoding: {coding}");
        let cl = format!("Content-Length: {}", smuggled.len());
        let auth = format!("Authorization: Bearer {TOKEN}");
        for with_length in [false, true] {
            let mut headers = vec![te.as_bytes(), auth.as_bytes()];
            if with_length {
                headers.push(cl.as_bytes());
            }
            let name = format!("TE {coding:?} with CL {with_length}");
            let bytes = request(post, &headers, smuggled.as_bytes());
            cases.push(case(name, bytes, Want::Status(411)));
        }
    }
    let te_name = request(post, &[b"Transfer-Encoding : chunked"], smuggled.as_bytes());
    cases.push(case("TE with a space", te_name, Want::Status(400)));
    let expect = request(post, &[b"Expect: magic", b"Content-Length: 1"], b"x");
    cases.push(case("Expect: magic", expect, Want::Status(417)));
    cases
}

/// Heads over the size caps, and long targets under them.
fn size_cases() -> Vec<Case> {
    let get = b"GET /health HTTP/1.1".as_slice();
    let mut cases = Vec::new();
    let huge = format!("X-Big: {}", "a".repeat(1 << 20));
    cases.push(case(
        "1 MB header line",
        request(get, &[huge.as_bytes()], b""),
        Want::Status(431),
    ));
    let many: Vec<Vec<u8>> = (0..10_000)
        .map(|n| format!("X-{n}: v").into_bytes())
        .collect();
    let many: Vec<&[u8]> = many.iter().map(Vec::as_slice).collect();
    cases.push(case(
        "10,000 headers",
        request(get, &many, b""),
        Want::Status(431),
    ));
    let small: Vec<&[u8]> = vec![b"a:b".as_slice(); 150];
    cases.push(case(
        "150 short headers",
        request(get, &small, b""),
        Want::Status(431),
    ));
    let uri = format!("GET /{} HTTP/1.1", "a".repeat(8 * 1024));
    cases.push(case(
        "8 KB URI",
        request(uri.as_bytes(), &[], b""),
        Want::Status(401),
    ));
    let uri = format!("GET /health?{} HTTP/1.1", "q".repeat(8 * 1024));
    cases.push(case(
        "8 KB query",
        request(uri.as_bytes(), &[], b""),
        Want::Status(200),
    ));
    let uri = format!("GET /{} HTTP/1.1", "a".repeat(17 * 1024));
    cases.push(case(
        "17 KB URI",
        request(uri.as_bytes(), &[], b""),
        Want::Status(431),
    ));
    let blank = [b"\r\n".repeat(10_000), request(get, &[], b"")].concat();
    cases.push(case("10,000 blank lines first", blank, Want::Status(431)));
    cases
}

/// A valid, authenticated request cut short at every byte, the client
/// closing its side: nothing to answer, nothing to run.
fn truncated_cases() -> Vec<Case> {
    let full = format!(
        "POST /request HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 17\r\n\r\n{{\"prompt\":\"pwn\"}}"
    );
    (1..full.len())
        .map(|at| Case {
            name: format!("cut at {at}"),
            request: full.as_bytes()[..at].to_vec(),
            want: Want::Closed,
            hang_up: true,
        })
        .collect()
}

/// Authenticated bodies a handler must refuse: 100,000-deep JSON (serde's
/// recursion limit, on a 512 KiB connection stack), invalid UTF-8.
fn body_cases(path: &str, want: Want) -> Vec<Case> {
    let line = format!("POST {path} HTTP/1.1");
    let auth = format!("Authorization: Bearer {TOKEN}");
    let deep = 100_000;
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        ("deep array", "[".repeat(deep).into_bytes()),
        (
            "deep closed array",
            format!("{}{}", "[".repeat(deep), "]".repeat(deep)).into_bytes(),
        ),
        (
            "deep field",
            format!("{{\"prompt\":{}", "[".repeat(deep)).into_bytes(),
        ),
        ("deep objects", "{\"a\":".repeat(deep).into_bytes()),
        (
            "deep messages",
            format!(
                "{{\"model\":\"test\",\"messages\":[{{\"role\":\"user\",\"content\":{}",
                "[".repeat(deep)
            )
            .into_bytes(),
        ),
        (
            "deep stream flag",
            format!("{{\"prompt\":\"hi\",\"stream\":{}", "[".repeat(deep)).into_bytes(),
        ),
        ("invalid UTF-8", b"{\"prompt\":\"\xff\xfe\"}".to_vec()),
        ("NUL", b"{\"prompt\":\"a\x00b\"}".to_vec()),
        ("not JSON", b"{\"prompt\":".to_vec()),
        ("number", b"7".to_vec()),
        // Two parsers that keep different copies see two different requests.
        (
            "duplicate key",
            br#"{"prompt":"hi","prompt":"bye","model":"test","messages":[]}"#.to_vec(),
        ),
        (
            "nested duplicate key",
            br#"{"prompt":"hi","model":"test","messages":[{"role":"user","role":"system","content":"hi"}]}"#
                .to_vec(),
        ),
    ];
    bodies
        .into_iter()
        .map(|(name, body)| {
            let length = format!("Content-Length: {}", body.len());
            let headers: [&[u8]; 3] = [
                auth.as_bytes(),
                b"Content-Type: application/json",
                length.as_bytes(),
            ];
            case(
                format!("{path} {name}"),
                request(line.as_bytes(), &headers, &body),
                want,
            )
        })
        .collect()
}

/// Everything the HTTP layer must refuse, in batches.
fn http_batches() -> Vec<(&'static str, Vec<Case>)> {
    vec![
        ("request lines", request_line_cases()),
        ("headers", header_cases()),
        ("framing", framing_cases()),
        ("sizes", size_cases()),
        ("truncated requests", truncated_cases()),
    ]
}

#[test]
fn the_cli_server_survives_hundreds_of_malformed_requests() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["ok"]))]);
    let mut server = Daemon::http("--cliserver", &fake);
    let mut batches = http_batches();
    batches.push(("bodies", body_cases("/request", Want::Status(400))));
    let total = run_batches(&mut server, &batches);
    assert!(total >= 300, "only {total} cases");
    assert!(
        fake.requests().is_empty(),
        "something reached the model: {:?}",
        fake.requests()
    );
    eprintln!("hostile: {total} malformed requests against --cliserver");
}

#[test]
fn the_api_server_survives_hundreds_of_malformed_requests() {
    let fake = FakeOpenAi::start(Vec::new());
    let mut server = Daemon::http("--server", &fake);
    let mut batches = http_batches();
    batches.push((
        "chat bodies",
        body_cases("/v1/chat/completions", Want::ClientError),
    ));
    batches.push((
        "messages bodies",
        body_cases("/v1/messages", Want::ClientError),
    ));
    let total = run_batches(&mut server, &batches);
    assert!(total >= 300, "only {total} cases");
    assert!(
        fake.requests().is_empty(),
        "something reached the model: {:?}",
        fake.requests()
    );
    eprintln!("hostile: {total} malformed requests against --server");
}

#[test]
fn pipelined_and_absolute_form_requests_run_once_or_not_at_all() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["ok"]))]);
    let mut server = Daemon::http("--cliserver", &fake);
    let second = format!(
        "POST /request HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Type: application/json\r\nContent-Length: 17\r\n\r\n{{\"prompt\":\"pwn\"}}"
    );
    // One request per connection: what follows the first is dropped unread.
    for first in [
        "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_string(),
        "POST /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}".to_string(),
        "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\nConnection: keep-alive\r\n\r\n".to_string(),
    ] {
        let answer = exchange(&server.addr, format!("{first}{second}").as_bytes());
        let text = String::from_utf8_lossy(&answer.bytes);
        assert!(answer.closed, "{answer:?}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{answer:?}");
        assert!(text.contains("Connection: close"), "{answer:?}");
    }
    assert!(fake.requests().is_empty(), "a pipelined request ran");
    // Absolute-form: the target's authority is the host that is checked.
    let absolute = format!(
        "GET http://{}/health HTTP/1.1\r\nHost: evil.example\r\n\r\n",
        server.addr
    );
    assert_eq!(
        exchange(&server.addr, absolute.as_bytes()).status(),
        Some(200)
    );
    server.assert_healthy("pipelining");
}

#[test]
fn curl_with_expect_100_continue_and_a_100_kb_body_is_not_delayed() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["Got it."]))]);
    let server = Daemon::http("--cliserver", &fake);
    let sandbox = Sandbox::new("hostile-curl");
    let body = json!({"prompt": "x".repeat(100 * 1024)}).to_string();
    let body_file = sandbox.root.path().join("body.json");
    std::fs::write(&body_file, &body).unwrap();
    let started = Instant::now();
    // curl waits --expect100-timeout (10 s here) for a server that never says 100.
    let output = std::process::Command::new("curl")
        .args([
            "-sS",
            "--noproxy",
            "*",
            "--max-time",
            "30",
            "--expect100-timeout",
            "10",
        ])
        .args([
            "-H",
            "Expect: 100-continue",
            "-H",
            "Content-Type: application/json",
        ])
        .args(["-H", &format!("Authorization: Bearer {TOKEN}")])
        .args(["--data-binary", &format!("@{}", body_file.display())])
        .arg(format!("http://{}/request", server.addr))
        .output()
        .expect("run curl");
    let took = started.elapsed();
    let answer: Value = serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&output.stderr)));
    assert_eq!(answer["response"], "Got it.", "{answer}");
    assert!(took < Duration::from_secs(5), "curl took {took:?}");
    let sent = &fake.requests()[0].body["messages"];
    let last = sent
        .as_array()
        .and_then(|m| m.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["content"].as_str().map(str::len), Some(100 * 1024));
}

/// How long `/health` takes on a fresh connection.
fn health_latency(server: &Daemon) -> Duration {
    let answer = server.get("/health");
    assert_eq!(answer.status(), Some(200), "{answer:?}");
    answer.took
}

#[test]
fn slow_loris_connections_do_not_lock_out_health_or_a_real_client() {
    let fake = FakeOpenAi::start(Vec::new());
    let mut server = Daemon::http("--cliserver", &fake);
    // More half-sent heads than the cap of 512 connections.
    let opened = Instant::now();
    let mut idle: Vec<TcpStream> = (0..600)
        .map(|_| {
            let mut stream = TcpStream::connect(&server.addr).expect("connect");
            let _ = stream.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n");
            stream
        })
        .collect();
    let mut worst = Duration::ZERO;
    for _ in 0..5 {
        worst = worst.max(health_latency(&server));
    }
    let status =
        format!("GET /status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\r\n");
    let authenticated = exchange(&server.addr, status.as_bytes());
    assert_eq!(authenticated.status(), Some(200), "{authenticated:?}");
    worst = worst.max(authenticated.took);
    eprintln!("hostile: worst /health or /status latency under slow-loris: {worst:?}");
    assert!(worst < Duration::from_secs(3), "{worst:?}");
    // Every idle one ends by the 10 s request deadline: the oldest ones earlier,
    // closed unanswered to make room, the rest told 408 at the deadline.
    let deadline = opened + Duration::from_secs(15);
    for (n, stream) in idle.iter_mut().enumerate() {
        let (bytes, closed) = read_until_closed(stream, deadline);
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            closed && (bytes.is_empty() || text.starts_with("HTTP/1.1 408 Request Timeout\r\n")),
            "idle connection {n}: {closed} {text}"
        );
    }
    assert!(opened.elapsed() < Duration::from_secs(15));
    drop(idle);
    server.assert_healthy("slow-loris");
}

/// Writes `request` on a kept-alive connection and reads one answer framed by
/// its `Content-Length`: the status and the whole text.
fn kept_answer(reader: &mut BufReader<TcpStream>, request: &[u8]) -> (u16, String) {
    reader.get_mut().write_all(request).expect("write");
    let mut head = String::new();
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) => panic!("closed after {head:?}"),
            Ok(_) => head.push_str(&line),
            Err(e) => panic!("no answer within the deadline ({e}) after {head:?}"),
        }
        if line == "\r\n" {
            break;
        }
    }
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no Content-Length: {head}"));
    let mut body = vec![0u8; length];
    reader.read_exact(&mut body).expect("the body");
    let status = head.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, head + &String::from_utf8_lossy(&body))
}

/// Twenty requests over one kept-alive connection take about what twenty on
/// fresh connections take. An answer whose last bytes wait for the client's
/// delayed ACK (Nagle's algorithm, an answer in two writes) costs 40 ms on a
/// reused connection (the first packets of a new one are ACKed at once):
/// 800 ms for twenty, a floor the bound below does not let through.
#[test]
fn requests_on_a_kept_alive_connection_wait_no_more_than_on_fresh_ones() {
    let fake = FakeOpenAi::start(Vec::new());
    let server = Daemon::http("--server", &fake);
    let auth = format!("Host: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n");
    let models = (format!("GET /v1/models HTTP/1.1\r\n{auth}"), "", 200);
    let malformed = (
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: 9\r\n"
        ),
        "{\"model\":",
        400,
    );
    for (head, body, want) in [models, malformed] {
        let fresh_started = Instant::now();
        for _ in 0..20 {
            let answer = exchange(&server.addr, format!("{head}\r\n{body}").as_bytes());
            assert_eq!(answer.status(), Some(want), "{answer:?}");
        }
        let fresh = fresh_started.elapsed();
        let stream = TcpStream::connect(&server.addr).expect("connect");
        stream.set_nodelay(true).unwrap();
        stream.set_read_timeout(Some(CASE_DEADLINE)).unwrap();
        let mut reader = BufReader::new(stream);
        let request = format!("{head}Connection: keep-alive\r\n\r\n{body}");
        let kept_started = Instant::now();
        for n in 0..20 {
            let (status, answer) = kept_answer(&mut reader, request.as_bytes());
            assert_eq!(status, want, "request {n}: {answer}");
            assert!(answer.contains("Connection: keep-alive"), "{answer}");
        }
        let kept = kept_started.elapsed();
        eprintln!("hostile: 20 x {head:?}: kept-alive {kept:?}, fresh {fresh:?}");
        assert!(
            kept <= fresh * 2 + Duration::from_millis(300),
            "20 requests on one kept-alive connection took {kept:?}, on fresh ones {fresh:?}"
        );
    }
    assert!(fake.requests().is_empty(), "{:?}", fake.requests());
}

/// A line client of the tool server.
struct Lines {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Lines {
    /// Connects and makes the first request, `auth` with [`TOKEN`].
    fn open(addr: &str) -> Lines {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(CASE_DEADLINE)).unwrap();
        let mut lines = Lines {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
        };
        let auth = json!({"jsonrpc": "2.0", "method": "auth", "params": {"token": TOKEN}, "id": 0});
        lines.send(auth.to_string().as_bytes());
        let answer = lines.answer().expect("an answer to auth");
        assert_eq!(answer["result"], true, "{answer}");
        lines
    }

    fn send(&mut self, line: &[u8]) {
        let _ = self.writer.write_all(line);
        let _ = self.writer.write_all(b"\n");
    }

    /// The next answer; `None` when the server closed the connection.
    fn answer(&mut self) -> Option<Value> {
        let mut line = Vec::new();
        match self.reader.read_until(b'\n', &mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_slice(&line).expect("an answer is JSON")),
            Err(e) if e.kind() == ErrorKind::ConnectionReset => None,
            Err(e) => panic!("no answer within the deadline: {e}"),
        }
    }
}

/// The error code of an answer, or of a batch answer's first item.
fn rpc_code(answer: &Value) -> i64 {
    let first = answer.get(0).unwrap_or(answer);
    first["error"]["code"].as_i64().unwrap_or(0)
}

/// Lines of JSON that are not valid requests, with the error code each gets
/// on a connection that has made its first request (which stays open).
fn rpc_cases() -> Vec<(String, i64)> {
    let mut cases: Vec<(String, i64)> = Vec::new();
    for id in ["{}", "[]", "true", "[1]", "{\"a\":1}"] {
        cases.push((
            format!(r#"{{"jsonrpc":"2.0","method":"listTools","id":{id}}}"#),
            -32600,
        ));
    }
    for method in ["7", "null", "[]", "{}", "true", "1.5"] {
        cases.push((
            format!(r#"{{"jsonrpc":"2.0","method":{method},"id":1}}"#),
            -32600,
        ));
    }
    for method in ["\"\"", "\"listtools\"", "\"\\u0000\"", "\"rpc.discover\""] {
        cases.push((
            format!(r#"{{"jsonrpc":"2.0","method":{method},"id":1}}"#),
            -32601,
        ));
    }
    for params in ["\"x\"", "7", "true", "1.5"] {
        cases.push((
            format!(r#"{{"jsonrpc":"2.0","method":"executeTool","params":{params},"id":1}}"#),
            -32600,
        ));
    }
    for params in [
        "{}",
        "[]",
        "null",
        "{\"name\":7}",
        "{\"name\":\"read\",\"arguments\":\"x\"}",
        "{\"name\":\"read\",\"arguments\":[]}",
        "{\"name\":\"read\",\"arguments\":{\"file_path\":7}}",
        "{\"name\":\"read\",\"arguments\":{}}",
        "{\"name\":\"read\",\"extra\":1}",
        "{\"name\":\"../../bin/sh\",\"arguments\":{}}",
    ] {
        cases.push((
            format!(r#"{{"jsonrpc":"2.0","method":"executeTool","params":{params},"id":1}}"#),
            -32602,
        ));
    }
    for version in ["\"1.0\"", "2", "2.0", "null", "\"2.0 \""] {
        cases.push((
            format!(r#"{{"jsonrpc":{version},"method":"listTools","id":1}}"#),
            -32600,
        ));
    }
    cases.push((r#"{"method":"listTools","id":1}"#.into(), -32600));
    for value in [
        "7",
        "\"listTools\"",
        "null",
        "true",
        "[]",
        "[1,2]",
        "[[]]",
        "{}",
    ] {
        cases.push((value.into(), -32600));
    }
    cases
}

/// Lines that are not JSON at all: one parse error, then the connection ends.
fn not_json_cases() -> Vec<Vec<u8>> {
    let deep = 100_000;
    let mut cases: Vec<Vec<u8>> = vec![
        "[".repeat(deep).into_bytes(),
        format!("{}{}", "[".repeat(deep), "]".repeat(deep)).into_bytes(),
        format!(
            r#"{{"jsonrpc":"2.0","method":"executeTool","params":{}{}}}"#,
            "{\"a\":".repeat(deep),
            "}".repeat(deep)
        )
        .into_bytes(),
        br#"{"jsonrpc":"2.0","method":"listTools","id":1e400}"#.to_vec(),
        br#"{"jsonrpc":"2.0","method":"listTools","id":1"#.to_vec(),
        b"{\"jsonrpc\":\"2.0\",\"method\":\"list\x00Tools\",\"id\":1}".to_vec(),
        b"\x00".to_vec(),
        b"nonsense".to_vec(),
    ];
    for bad in INVALID_UTF8 {
        cases.push(
            [
                br#"{"jsonrpc":"2.0","method":""#.as_slice(),
                bad,
                br#"","id":1}"#,
            ]
            .concat(),
        );
        cases.push(bad.to_vec());
    }
    cases
}

/// The tool server, with a token (a client authenticates first, as it must
/// once tokens are required by default).
fn tool_server() -> Daemon {
    Daemon::start(&[
        "--toolserver",
        "--port",
        "0",
        "--approve",
        "all",
        "--auth-token",
        TOKEN,
    ])
}

#[test]
fn the_tool_server_survives_malformed_lines() {
    let mut server = tool_server();
    let mut total = 0;
    // JSON that is no request: answered, and the connection goes on.
    let mut client = Lines::open(&server.addr);
    for (line, code) in rpc_cases() {
        client.send(line.as_bytes());
        let answer = client.answer().expect("an answer");
        assert_eq!(rpc_code(&answer), code, "{line} → {answer}");
        total += 1;
    }
    client.send(b"");
    client.send(br#"{"jsonrpc":"2.0","method":"listTools","id":"after"}"#);
    assert_eq!(client.answer().expect("an answer")["id"], "after");
    assert_tool_server_healthy(&mut server, "JSON errors");

    // Not JSON: one parse error, then the connection ends.
    for line in not_json_cases() {
        let mut client = Lines::open(&server.addr);
        client.send(&line);
        let answer = client.answer().expect("a parse error");
        assert_eq!(rpc_code(&answer), -32700, "{answer}");
        assert_eq!(client.answer(), None, "closed after a parse error");
        total += 1;
    }
    assert_tool_server_healthy(&mut server, "parse errors");

    // Over the 4 MiB line cap: answered; it ends a connection only before its first request.
    let huge = vec![b'{'; 5 * 1024 * 1024];
    let mut client = Lines::open(&server.addr);
    client.send(&huge);
    assert_eq!(rpc_code(&client.answer().expect("an answer")), -32600);
    client.send(br#"{"jsonrpc":"2.0","method":"listTools","id":1}"#);
    let list = client.answer().expect("open after a long line");
    assert!(list["result"].is_array(), "{list}");
    let (answer, closed) = raw_lines(&server.addr, &[huge.as_slice(), b"\n"].concat());
    assert!(closed && answer.contains("-32600"), "{answer}");
    // HTTP in the middle of a conversation: closed without an answer.
    client.send(b"GET / HTTP/1.1");
    assert_eq!(client.answer(), None);
    total += 3;
    assert_tool_server_healthy(&mut server, "long lines");

    total += pipelined(&server.addr, 2_000);
    assert_tool_server_healthy(&mut server, "pipelining");
    eprintln!("hostile: {total} malformed lines against --toolserver");
}

/// Sends `bytes` on a fresh connection and reads until the server closes it.
fn raw_lines(addr: &str, bytes: &[u8]) -> (String, bool) {
    let mut stream = TcpStream::connect(addr).expect("connect");
    let _ = stream.write_all(bytes);
    let (answer, closed) = read_until_closed(&mut stream, Instant::now() + CASE_DEADLINE);
    (String::from_utf8_lossy(&answer).into_owned(), closed)
}

/// `count` requests in one write: every one is answered, in order.
fn pipelined(addr: &str, count: u64) -> usize {
    let mut client = Lines::open(addr);
    let mut batch = Vec::new();
    for id in 1..=count {
        let request = json!({"jsonrpc": "2.0", "method": "sideEffecting", "params": {"name": "write", "arguments": {}}, "id": id});
        batch.extend_from_slice(request.to_string().as_bytes());
        batch.push(b'\n');
    }
    let mut writer = client.writer.try_clone().unwrap();
    let sender = std::thread::spawn(move || writer.write_all(&batch));
    for id in 1..=count {
        let answer = client.answer().expect("an answer");
        assert_eq!(
            (answer["id"].as_u64(), &answer["result"]),
            (Some(id), &json!(true)),
            "{answer}"
        );
    }
    sender.join().unwrap().expect("the batch was sent");
    count as usize
}

fn assert_tool_server_healthy(server: &mut Daemon, batch: &str) {
    server.assert_alive(batch);
    let mut client = Lines::open(&server.addr);
    client.send(br#"{"jsonrpc":"2.0","method":"listTools","id":"health"}"#);
    let answer = client.answer().expect("listTools answers");
    assert!(answer["result"].is_array(), "after {batch}: {answer}");
}

#[test]
fn idle_tool_server_connections_give_way_and_are_closed_at_their_deadline() {
    let mut server = tool_server();
    let opened = Instant::now();
    // The cap is 64: idle sockets take it all. They have sent no request, so a
    // newcomer takes the place of the oldest, which is closed unanswered.
    let mut idle: Vec<TcpStream> = (0..64)
        .map(|_| TcpStream::connect(&server.addr).expect("connect"))
        .collect();
    let mut client = Lines::open(&server.addr);
    client.send(br#"{"jsonrpc":"2.0","method":"listTools","id":1}"#);
    let answer = client.answer().expect("listTools answers");
    assert!(answer["result"].is_array(), "{answer}");
    let (bytes, closed) = read_until_closed(&mut idle[0], opened + Duration::from_secs(5));
    assert!(closed && bytes.is_empty(), "the oldest gave way");
    // 10 s from accept, nothing sent: every idle one is closed, and the server serves again.
    for (n, stream) in idle.iter_mut().enumerate() {
        let (bytes, closed) = read_until_closed(stream, opened + Duration::from_secs(15));
        assert!(closed && bytes.is_empty(), "idle connection {n}");
    }
    assert_tool_server_healthy(&mut server, "idle connections");
}

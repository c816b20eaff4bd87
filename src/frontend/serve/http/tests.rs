//! Tests of [`super`] (http.rs).

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
    assert!(
        answer.starts_with("HTTP/1.1 408 Request Timeout\r\n"),
        "{answer}"
    );
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

/// Regression (issue 59, a 100 MB data URL): a client that sends the whole of a
/// body far over the cap gets the 413 with its JSON body, not a reset, and the
/// server serves the next request.
#[test]
fn a_100_mb_body_is_refused_with_json_and_the_server_serves_on() {
    let (addr, _) = start(Limits::default(), Policy::default());
    let size = 100 * 1024 * 1024;
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).expect("head");
    // The server answers from the head; once it has closed, writing fails.
    let chunk = vec![b'A'; 1 << 20];
    for _ in 0..size / chunk.len() {
        if stream.write_all(&chunk).is_err() {
            break;
        }
    }
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    let answer = String::from_utf8_lossy(&out);
    assert_eq!(status(&answer), 413, "{answer}");
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("");
    let json: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(json["error"]["type"], "request_too_large", "{answer}");
    let next = raw(
        addr,
        b"POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\nhi",
    );
    assert_eq!(status(&next), 200, "{next}");
    assert!(next.ends_with("{\"len\":2}"), "{next}");
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
    let head =
        "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-Continue\r\nContent-Length: 3\r\n\r\n";
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
    let head =
        "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n";
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
fn a_parameter_that_may_be_given_once_is_refused_when_it_repeats() {
    let request = |query: &str| Request {
        method: "POST".into(),
        path: "/slots/0".into(),
        query: query.into(),
        headers: Vec::new(),
        body: Vec::new(),
        peer: "127.0.0.1:1".parse().unwrap(),
    };
    let twice = request("action=save&action=erase").single_query_param("action");
    assert!(twice.is_err_and(|message| message.contains("'action'")));
    // Even the same value twice, even bare.
    assert!(request("action=save&action=save")
        .single_query_param("action")
        .is_err());
    assert!(request("action&action")
        .single_query_param("action")
        .is_err());
    let r = request("action=save&x=1&x=2&name=a%20b");
    assert_eq!(r.single_query_param("action"), Ok(Some("save".into())));
    assert_eq!(r.single_query_param("name"), Ok(Some("a b".into())));
    assert_eq!(r.single_query_param("missing"), Ok(None));
    // The other routes' helper keeps taking the first.
    assert_eq!(r.query_param("x").as_deref(), Some("1"));
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

/// A large body over a slow link still arrives: the deadline grows by a second
/// for each MiB the body announces (the head alone keeps the bare deadline).
#[test]
fn a_large_body_gets_a_second_per_mib_beyond_the_deadline() {
    let limits = Limits {
        request_deadline: Duration::from_millis(200),
        ..Limits::default()
    };
    let started = Instant::now();
    let mib = 1024 * 1024;
    assert_eq!(
        limits.deadline(started, 0),
        started + Duration::from_millis(200)
    );
    for (length, seconds) in [(1, 1), (mib, 1), (mib + 1, 2), (32 * mib, 32)] {
        assert_eq!(
            limits.deadline(started, length),
            started + Duration::from_millis(200) + Duration::from_secs(seconds),
            "{length} bytes"
        );
    }
    let (addr, _) = start(limits, Policy::default());
    let body = vec![b'x'; 2 * mib as usize];
    let mut stream = TcpStream::connect(addr).unwrap();
    let head = format!(
        "POST /x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).unwrap();
    let (first, rest) = body.split_at(mib as usize);
    stream.write_all(first).unwrap();
    // The link is slow: the rest comes well after the bare deadline.
    std::thread::sleep(Duration::from_millis(600));
    stream.write_all(rest).unwrap();
    let answer =
        String::from_utf8_lossy(&read_to_close(&mut stream).expect("an answer")).to_string();
    assert_eq!(status(&answer), 200, "{answer}");
    assert!(
        answer.ends_with(&format!("{{\"len\":{}}}", body.len())),
        "{answer}"
    );
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
    // Two streams past their head hold the cap (the place of a closing
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
    let preflight = "OPTIONS /x HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: https://app.example\r\n\r\n";
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

#[test]
fn every_status_sent_has_its_reason_phrase() {
    let expected = [
        (400, "Bad Request"),
        (401, "Unauthorized"),
        (403, "Forbidden"),
        (404, "Not Found"),
        (405, "Method Not Allowed"),
        (408, "Request Timeout"),
        (409, "Conflict"),
        (411, "Length Required"),
        (413, "Content Too Large"),
        (414, "URI Too Long"),
        (415, "Unsupported Media Type"),
        (417, "Expectation Failed"),
        (422, "Unprocessable Content"),
        (429, "Too Many Requests"),
        (431, "Request Header Fields Too Large"),
        (499, "Client Closed Request"),
        (500, "Internal Server Error"),
        (501, "Not Implemented"),
        (502, "Bad Gateway"),
        (503, "Service Unavailable"),
        (504, "Gateway Timeout"),
        (505, "HTTP Version Not Supported"),
        (507, "Insufficient Storage"),
    ];
    for (status, phrase) in expected {
        assert_eq!(reason(status), phrase, "{status}");
    }
    // One entry per status, in order, each a real phrase.
    for pair in REASONS.windows(2) {
        assert!(pair[0].0 < pair[1].0, "{pair:?}");
    }
    assert!(REASONS.iter().all(|(_, phrase)| !phrase.is_empty()));
    // A status missing from the table (an upstream's unusual one) gets its class.
    assert_eq!(reason(460), "Client Error");
    assert_eq!(reason(599), "Server Error");
    assert_eq!(reason(299), "Success");
}

/// Counts the writes it is given.
#[derive(Default)]
struct Writes {
    calls: usize,
    bytes: Vec<u8>,
}

impl Write for Writes {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.calls += 1;
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_whole_answer_goes_out_in_one_write() {
    let headers = [("Content-Type", "application/json".to_string())];
    let mut out = Writes::default();
    write_answer(&mut out, 404, &headers, b"{\"a\":1}", true).unwrap();
    assert_eq!(out.calls, 1);
    assert_eq!(
        String::from_utf8_lossy(&out.bytes),
        "HTTP/1.1 404 Not Found\r\nConnection: keep-alive\r\n\
         Content-Type: application/json\r\nContent-Length: 7\r\n\r\n{\"a\":1}"
    );
    // Past the limit, head and body as they are: two writes, nothing copied.
    let big = vec![b'x'; ONE_WRITE_MAX];
    let mut out = Writes::default();
    write_answer(&mut out, 200, &headers, &big, false).unwrap();
    assert_eq!(out.calls, 2);
    assert!(out.bytes.ends_with(&big));
}

/// Twenty GETs over one kept-alive connection against twenty on fresh ones:
/// with Nagle's algorithm on (or head and body in two writes), each kept one
/// waits for the client's delayed ACK (40 ms), 800 ms in all.
#[test]
fn requests_on_a_kept_connection_are_not_delayed() {
    let (addr, _) = start(Limits::default(), Policy::default());
    let fresh_started = Instant::now();
    for _ in 0..20 {
        assert_eq!(status(&raw(addr, &get("/x", ""))), 200);
    }
    let fresh = fresh_started.elapsed();
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.set_nodelay(true).unwrap();
    let kept_started = Instant::now();
    for _ in 0..20 {
        let answer = one_answer(&mut stream, &get("/x", "Connection: keep-alive\r\n"));
        assert!(answer.contains("Connection: keep-alive"), "{answer}");
    }
    let kept = kept_started.elapsed();
    assert!(
        kept <= fresh * 2 + Duration::from_millis(300),
        "20 kept-alive requests took {kept:?}, 20 on fresh connections {fresh:?}"
    );
}

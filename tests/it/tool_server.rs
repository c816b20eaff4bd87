//! End-to-end tests of `shepherd --toolserver` (JSON-RPC lines over TCP) and of
//! `--tool-backend`: a plain `TcpStream` client, and a second shepherd whose
//! agent loop runs its tools on the first.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{text_stream, tool_call_stream, Canned, FakeOpenAi};
use crate::harness::{Sandbox, TOKEN};

/// A running `shepherd --toolserver`, killed on drop.
pub struct ToolServer {
    child: Child,
    pub addr: String,
    pub log: Arc<Mutex<String>>,
    pub sandbox: Sandbox,
}

impl ToolServer {
    pub fn start(extra: &[&str]) -> ToolServer {
        let sandbox = Sandbox::new("toolserver");
        let mut args = vec!["--toolserver", "--port", "0"];
        if !extra
            .iter()
            .any(|a| a.starts_with("--auth-token") || *a == "--no-auth")
        {
            args.extend_from_slice(&["--auth-token", TOKEN]);
        }
        args.extend_from_slice(extra);
        let mut child = sandbox.spawn(&args);
        let (addr, log) = crate::harness::wait_listening(&mut child);
        ToolServer {
            child,
            addr,
            log,
            sandbox,
        }
    }

    pub fn audit_log(&self) -> PathBuf {
        self.sandbox
            .root
            .path()
            .join("home/state/shepherd/audit.jsonl")
    }
}

impl Drop for ToolServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A plain line client.
struct Client {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Client {
    fn connect(addr: &str) -> Client {
        let stream = TcpStream::connect(addr).expect("connect to the tool server");
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .expect("read timeout");
        Client {
            reader: BufReader::new(stream.try_clone().expect("clone")),
            writer: stream,
        }
    }

    /// Connects and authenticates with the tests' [`TOKEN`].
    fn authed(addr: &str) -> Client {
        let mut client = Client::connect(addr);
        let answer = client.request(0, "auth", json!({ "token": TOKEN }));
        assert_eq!(answer["result"], true, "{answer}");
        client
    }

    fn send_raw(&mut self, line: &[u8]) {
        self.writer.write_all(line).expect("send");
        self.writer.write_all(b"\n").expect("send");
    }

    /// The next answer line, `None` when the server closed the connection.
    fn answer(&mut self) -> Option<Value> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => None,
            Ok(_) => Some(serde_json::from_str(&line).expect("answer is JSON")),
            Err(e) => panic!("no answer: {e}"),
        }
    }

    fn call(&mut self, line: &str) -> Value {
        self.send_raw(line.as_bytes());
        self.answer().expect("an answer")
    }

    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        let request = json!({"jsonrpc": "2.0", "method": method, "params": params, "id": id});
        let answer = self.call(&request.to_string());
        assert_eq!(answer["jsonrpc"], "2.0", "{answer}");
        assert_eq!(answer["id"], id, "{answer}");
        answer
    }
}

fn code(answer: &Value) -> i64 {
    answer["error"]["code"].as_i64().unwrap_or(0)
}

fn names(list: &Value) -> Vec<String> {
    list["result"]
        .as_array()
        .expect("listTools result is an array")
        .iter()
        .map(|t| t["name"].as_str().unwrap_or_default().to_string())
        .collect()
}

#[test]
fn a_plain_tcp_client_lists_runs_and_gets_errors_for_malformed_lines() {
    let server = ToolServer::start(&[]);
    let work = server.sandbox.work();
    std::fs::write(work.join("hello.txt"), "hi from the server\n").unwrap();
    let mut client = Client::authed(&server.addr);

    let list = client.request(1, "listTools", Value::Null);
    let tools = names(&list);
    for expected in [
        "read",
        "write",
        "edit",
        "bash",
        "grep",
        "get_time",
        "http_request",
    ] {
        assert!(
            tools.iter().any(|n| n == expected),
            "{expected} in {tools:?}"
        );
    }
    for tool in list["result"].as_array().unwrap() {
        assert!(tool["description"].as_str().is_some_and(|d| !d.is_empty()));
        assert_eq!(tool["parameters"]["type"], "object", "{tool}");
    }
    let read = client.request(
        2,
        "executeTool",
        json!({"name": "read", "arguments": {"file_path": "hello.txt"}}),
    );
    assert!(
        read["result"]
            .as_str()
            .is_some_and(|t| t.contains("hi from the server")),
        "{read}"
    );

    // JSON that is not a valid request gets a JSON-RPC error and the
    // connection stays usable.
    let cases: [(&str, i64, Value); 4] = [
        ("[]", -32600, Value::Null),
        (
            r#"{"jsonrpc":"2.0","method":"frobnicate","id":3}"#,
            -32601,
            json!(3),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"executeTool","id":"four"}"#,
            -32602,
            json!("four"),
        ),
        (
            r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"nope","arguments":{}},"id":5}"#,
            -32602,
            json!(5),
        ),
    ];
    for (line, expected, id) in cases {
        let answer = client.call(line);
        assert_eq!(code(&answer), expected, "{line} → {answer}");
        assert_eq!(answer["id"], id, "{line} → {answer}");
        assert!(answer["error"]["message"].is_string());
    }
    // A line over the 4 MiB cap is answered and skipped.
    let huge = vec![b'x'; 5 * 1024 * 1024];
    client.send_raw(&huge);
    assert_eq!(code(&client.answer().unwrap()), -32600);
    // A line that is not JSON gets one parse error, then the connection ends.
    for garbage in [
        &b"{\"jsonrpc\": \"2.0\", \"method\": "[..],
        b"not json at all",
        &[0xff, 0xfe, b'{'],
    ] {
        let mut other = Client::authed(&server.addr);
        assert!(!names(&other.request(1, "listTools", Value::Null)).is_empty());
        other.send_raw(garbage);
        assert_eq!(code(&other.answer().unwrap()), -32700);
        assert_eq!(other.answer(), None, "closed after a parse error");
    }

    // Without --approve, nobody can approve a side-effecting call here.
    let write = client.request(
        6,
        "executeTool",
        json!({"name": "write", "arguments": {"file_path": "nope.txt", "content": "x"}}),
    );
    assert_eq!(code(&write), -32003, "{write}");
    assert!(!work.join("nope.txt").exists());

    let again = client.request(7, "listTools", json!({}));
    assert_eq!(names(&again), tools);
}

#[test]
fn non_loopback_binds_need_a_token_and_tokens_are_checked() {
    let sandbox = Sandbox::new("toolserver-bind");
    let run = sandbox.run(&["--toolserver", "--host", "0.0.0.0", "--port", "0"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("refusing"), "{}", run.stderr);

    let token = "tool-token-7f3a9c";
    let token_file = sandbox.root.path().join("token");
    std::fs::write(&token_file, format!("{token}\n")).unwrap();
    let server = ToolServer::start(&["--auth-token-file", token_file.to_str().unwrap()]);
    let mut client = Client::connect(&server.addr);
    let refused = client.request(1, "listTools", Value::Null);
    assert_eq!(code(&refused), -32001, "{refused}");
    let message = refused["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("call auth"), "{refused}");
    // The token file of the port it really bound, not of `--port 0`.
    let port = server.addr.rsplit(':').next().unwrap();
    assert!(
        message.contains(&format!("server-{port}.json")),
        "{refused}"
    );
    assert_eq!(
        client.answer(),
        None,
        "a client that skips auth is hung up on"
    );
    let mut client = Client::connect(&server.addr);
    let wrong = client.request(2, "auth", json!({"token": "tool-token-7f3a9"}));
    assert_eq!(code(&wrong), -32001, "{wrong}");
    assert_eq!(client.answer(), None, "a wrong token ends the connection");

    let mut client = Client::connect(&server.addr);
    assert_eq!(
        client.request(1, "auth", json!({"token": token}))["result"],
        true
    );
    assert!(!names(&client.request(2, "listTools", Value::Null)).is_empty());
    let time = client.request(
        3,
        "executeTool",
        json!({"name": "get_time", "arguments": {}}),
    );
    assert!(time["result"].is_string(), "{time}");
    let audit = std::fs::read_to_string(server.audit_log()).expect("audit log");
    assert!(audit.contains("\"tool\":\"get_time\""), "{audit}");
    assert!(!audit.contains(token));
    assert!(!server.log.lock().unwrap().contains(token));
}

/// Reads the audit log lines of a sandbox.
pub fn audit_lines(sandbox: &Sandbox) -> Vec<Value> {
    let path = sandbox.root.path().join("home/state/shepherd/audit.jsonl");
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("audit line is JSON"))
        .collect()
}

#[test]
fn a_second_shepherd_runs_its_tools_on_the_tool_server() {
    let server = ToolServer::start(&["--approve", "all"]);
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_w",
            "write",
            json!({"file_path": "remote.txt", "content": "written remotely"}),
        )),
        Canned::sse(&text_stream(&["Done."])),
        Canned::sse(&tool_call_stream(
            "call_w2",
            "write",
            json!({"file_path": "unapproved.txt", "content": "x"}),
        )),
        Canned::sse(&text_stream(&["Not done."])),
    ]);
    let client = Sandbox::new("toolclient");
    let base = [
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
        "--tool-backend",
        &server.addr,
    ];
    let mut args = base.to_vec();
    args.extend(["--approve", "write", "-e", "write it"]);
    let run = client.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stdout.ends_with("Done.\n"), "{}", run.stdout);

    // The file is in the tool server's directory, not the client's.
    let written = server.sandbox.work().join("remote.txt");
    assert_eq!(
        std::fs::read_to_string(written).unwrap(),
        "written remotely"
    );
    assert!(!client.work().join("remote.txt").exists());
    let requests = fake.requests();
    let offered: Vec<&str> = requests[0].body["tools"]
        .as_array()
        .expect("tools offered")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert!(
        offered.contains(&"write") && offered.contains(&"bash"),
        "{offered:?}"
    );
    let tool_message = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool_message["tool_call_id"], "call_w");
    assert!(
        !tool_message["content"].as_str().unwrap().contains("Error"),
        "{tool_message}"
    );

    // The client's user did not approve the second write: it never reaches the server.
    let mut args = base.to_vec();
    args.extend(["-e", "write another"]);
    let run = client.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(!server.sandbox.work().join("unapproved.txt").exists());
    let refused = fake.requests()[3].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        refused["content"].as_str().unwrap().contains("not run"),
        "{refused}"
    );

    // Both sides audit: the server what it ran, the client what it allowed and refused.
    let server_side = audit_lines(&server.sandbox);
    assert_eq!(server_side.len(), 1, "{server_side:?}");
    assert_eq!(server_side[0]["mode"], "toolserver");
    assert_eq!(server_side[0]["tool"], "write");
    assert_eq!(server_side[0]["outcome"], "ok");
    let client_side = audit_lines(&client);
    let decisions: Vec<(&str, &str)> = client_side
        .iter()
        .map(|l| {
            (
                l["decision"].as_str().unwrap(),
                l["decided_by"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(decisions, [("allow", "policy"), ("deny", "no_approver")]);
}

#[test]
fn an_unreachable_tool_backend_is_a_clear_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    drop(listener);
    let sandbox = Sandbox::new("toolclient-down");
    let run = sandbox.run(
        &[
            "--backend",
            "openai",
            "--api-base",
            "http://127.0.0.1:9/v1",
            "-m",
            "test",
            "--tool-backend",
            &addr,
            "-e",
            "hi",
        ],
        "",
    );
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("tool backend"), "{}", run.stderr);
}

#[test]
fn a_client_that_hangs_up_stops_its_running_tool() {
    let server = ToolServer::start(&["--approve", "bash"]);
    let marker = format!("107.{}3", std::process::id());
    let mut client = Client::authed(&server.addr);
    let request = json!({
        "jsonrpc": "2.0",
        "method": "executeTool",
        "params": {"name": "bash", "arguments": {"command": format!("sleep {marker}")}},
        "id": 1,
    });
    client.send_raw(request.to_string().as_bytes());
    let needle = format!("sleep {marker}");
    assert!(
        crate::harness::poll_until(Duration::from_secs(20), || {
            crate::harness::process_running(&needle)
        }),
        "the tool never started"
    );
    drop(client);
    assert!(
        crate::harness::poll_until(Duration::from_secs(10), || {
            !crate::harness::process_running(&needle)
        }),
        "the tool outlived its client"
    );
    // The server goes on serving.
    let mut client = Client::authed(&server.addr);
    assert!(!names(&client.request(2, "listTools", Value::Null)).is_empty());
}

/// Sends `bytes` on a fresh connection and reads until the server closes it
/// (at most 10 s). Returns what came back and whether the server closed.
fn send_and_read_to_close(addr: &str, bytes: &[u8]) -> (Vec<u8>, bool) {
    use std::io::Read;
    let mut stream = TcpStream::connect(addr).expect("connect to the tool server");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    // The server may hang up before reading everything: a failed write is fine.
    let _ = stream.write_all(bytes);
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer) {
            Ok(0) => return (answer, true),
            Ok(n) => answer.extend_from_slice(&buffer[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return (answer, true),
            Err(_) => return (answer, false),
        }
    }
}

/// Regression: a web page could `fetch("http://127.0.0.1:9876/", {method:
/// "POST", mode: "no-cors", body: "\n{...executeTool...}\n"})`; the server
/// answered each HTTP head line with a parse error and ran the JSON line of
/// the body. Now a connection whose first line is not JSON-RPC is closed
/// without an answer, with and without a token, with and without `--approve`.
#[test]
fn json_rpc_smuggled_in_an_http_request_runs_nothing() {
    let list = r#"{"jsonrpc":"2.0","method":"listTools","id":1}"#;
    let write = r#"{"jsonrpc":"2.0","method":"executeTool","params":{"name":"write","arguments":{"file_path":"pwned.txt","content":"x"}},"id":2}"#;
    let variants: [&[&str]; 4] = [
        &[],
        &["--approve", "all"],
        &["--auth-token", "smuggle-token-1"],
        &["--approve", "all", "--auth-token", "smuggle-token-1"],
    ];
    for extra in variants {
        let server = ToolServer::start(extra);
        for body in [format!("\n{list}\n{write}\n"), format!("{write}\n{list}\n")] {
            let request = format!(
                "POST / HTTP/1.1\r\nHost: {}\r\nOrigin: http://evil.example\r\n\
                 Content-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
                server.addr,
                body.len()
            );
            let (answer, closed) = send_and_read_to_close(&server.addr, request.as_bytes());
            let answer = String::from_utf8_lossy(&answer);
            assert!(closed, "{extra:?}: the connection stays open: {answer}");
            assert_eq!(answer, "", "{extra:?}: an HTTP request gets no JSON back");
            assert!(
                !server.sandbox.work().join("pwned.txt").exists(),
                "{extra:?}: the smuggled write ran"
            );
        }
        // A request line alone, a header line alone, or a blank first line: closed, silently.
        for opening in [
            "GET / HTTP/1.1\r\n",
            "OPTIONS * HTTP/1.0\r\n",
            "Host: 127.0.0.1\r\n",
            "\r\n",
        ] {
            let bytes = format!("{opening}{list}\n");
            let (answer, closed) = send_and_read_to_close(&server.addr, bytes.as_bytes());
            assert!(
                closed && answer.is_empty(),
                "{extra:?} {opening:?}: {answer:?}"
            );
        }
        // A legitimate client still gets its answers.
        // (Started without --auth-token, the fixture gives the server the tests' token.)
        let token = if extra.contains(&"--auth-token") {
            "smuggle-token-1"
        } else {
            TOKEN
        };
        let mut client = Client::connect(&server.addr);
        let auth = client.request(1, "auth", json!({ "token": token }));
        assert_eq!(auth["result"], true, "{auth}");
        assert!(!names(&client.request(2, "listTools", Value::Null)).is_empty());
    }
}

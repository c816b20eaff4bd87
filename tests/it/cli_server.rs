//! End-to-end tests of `shepherd --cliserver` (and the `cli` client backend):
//! the real binary against the fake OpenAI upstream, checked with a plain
//! HTTP client and raw sockets.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::api_server::test_model;
use crate::approvals::JsonSession;
use crate::fake_openai::{text_stream, tool_call_stream, Canned, FakeOpenAi};
use crate::harness::{collect, finish, http_agent, poll_until, process_running, Sandbox, TOKEN};

/// A running `shepherd --cliserver`, killed on drop.
struct CliServer {
    child: Child,
    base: String,
    addr: String,
    _log: Arc<Mutex<String>>,
    sandbox: Sandbox,
}

impl CliServer {
    fn start(fake: &FakeOpenAi, extra: &[&str]) -> CliServer {
        let backend = [
            "--backend",
            "openai",
            "--api-base",
            &fake.base_url,
            "-m",
            "test",
        ];
        CliServer::spawn(&backend, extra)
    }

    /// With the in-process test model instead of the fake upstream.
    fn start_local(extra: &[&str]) -> CliServer {
        let model = test_model();
        CliServer::spawn(&["-m", model.to_str().expect("UTF-8 path")], extra)
    }

    fn spawn(backend: &[&str], extra: &[&str]) -> CliServer {
        let sandbox = Sandbox::new("cliserver");
        let mut args = vec!["--cliserver", "--port", "0"];
        args.extend_from_slice(backend);
        if !extra
            .iter()
            .any(|a| a.starts_with("--auth-token") || *a == "--no-auth")
        {
            args.extend_from_slice(&["--auth-token", TOKEN]);
        }
        args.extend_from_slice(extra);
        let mut child = sandbox.spawn(&args);
        let (address, log) = crate::harness::wait_listening(&mut child);
        let addr = address.trim_start_matches("http://").to_string();
        CliServer {
            child,
            base: format!("http://{addr}"),
            addr,
            _log: log,
            sandbox,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

impl Drop for CliServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    http_agent(Duration::from_secs(60))
}

fn post(server: &CliServer, path: &str, body: &str) -> (u16, Value) {
    let response = agent()
        .post(&server.url(path))
        .header("Content-Type", "application/json")
        .send(body)
        .expect("post");
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

fn get(server: &CliServer, path: &str) -> (u16, Value) {
    let response = agent().get(&server.url(path)).call().expect("get");
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The `data:` objects of an SSE body, read until `stop` says so.
struct Events {
    reader: Box<dyn BufRead + Send>,
}

impl Events {
    fn next(&mut self) -> Option<Value> {
        let mut line = String::new();
        loop {
            line.clear();
            if self.reader.read_line(&mut line).ok()? == 0 {
                return None;
            }
            if let Some(data) = line.trim_end().strip_prefix("data: ") {
                return Some(serde_json::from_str(data).expect("event JSON"));
            }
        }
    }

    /// Events up to and including the `response_complete` of `count` requests.
    fn until_complete(&mut self, count: usize) -> Vec<Value> {
        let mut out = Vec::new();
        let mut done = 0;
        while done < count {
            let event = self.next().expect("stream ended early");
            done += usize::from(event["type"] == "response_complete");
            out.push(event);
        }
        out
    }
}

fn stream_request(server: &CliServer, prompt: &str) -> Events {
    let body = json!({"prompt": prompt, "stream": true}).to_string();
    let response = agent()
        .post(&server.url("/request"))
        .send(&body)
        .expect("post");
    assert_eq!(response.status().as_u16(), 200);
    Events {
        reader: Box::new(BufReader::new(response.into_body().into_reader())),
    }
}

/// Connects an observer and returns it with its `connected` event.
fn observe(server: &CliServer) -> (Events, Value) {
    let response = agent()
        .get(&server.url("/updates"))
        .call()
        .expect("updates");
    assert_eq!(response.status().as_u16(), 200);
    let mut events = Events {
        reader: Box::new(BufReader::new(response.into_body().into_reader())),
    };
    let connected = events.next().expect("connected event");
    assert_eq!(connected["type"], "connected");
    (events, connected)
}

/// A tool round (bash `echo hi`) and then the answer.
fn tool_script() -> Vec<Canned> {
    vec![
        Canned::sse(&tool_call_stream(
            "call_1",
            "bash",
            json!({"command": "echo hi"}),
        )),
        Canned::sse(&text_stream(&["The tool ", "said hi."])),
    ]
}

/// The events with empty deltas and stats left out, as `type` names.
fn kinds(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| !(e["type"] == "delta" && e["content"] == "") && e["type"] != "stats")
        .map(|e| e["type"].as_str().unwrap_or("?").to_string())
        .collect()
}

#[test]
fn streamed_tool_prompt_sends_typed_events_in_order() {
    let fake = FakeOpenAi::start(tool_script());
    let server = CliServer::start(&fake, &["--approve", "all"]);
    let events = stream_request(&server, "say hi with a tool").until_complete(1);
    assert_eq!(
        kinds(&events),
        [
            "user_prompt",
            "tool_call",
            "tool_result",
            "delta",
            "delta",
            "response_complete"
        ],
        "{events:#?}"
    );
    let call = events.iter().find(|e| e["type"] == "tool_call").unwrap();
    assert_eq!(
        (&call["name"], &call["args"], &call["id"]),
        (
            &json!("bash"),
            &json!({"command": "echo hi"}),
            &json!("call_1")
        )
    );
    let result = events.iter().find(|e| e["type"] == "tool_result").unwrap();
    assert_eq!(
        (&result["name"], &result["id"], &result["success"]),
        (&json!("bash"), &json!("call_1"), &json!(true))
    );
    assert!(
        result["content"].as_str().unwrap().contains("hi"),
        "{result}"
    );
    assert_eq!(events.last().unwrap()["finish_reason"], "stop");
    assert!(events.iter().any(|e| e["type"] == "stats"));
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");
    // The tool ran here, and the model got its result.
    let second = &fake.requests()[1].body;
    let last = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (last["role"].as_str(), last["tool_call_id"].as_str()),
        (Some("tool"), Some("call_1"))
    );
}

#[test]
fn tool_call_markup_never_reaches_delta() {
    let markup = "Checking.<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call>";
    let pieces: Vec<String> = markup
        .chars()
        .collect::<Vec<_>>()
        .chunks(7)
        .map(|c| c.iter().collect())
        .collect();
    let refs: Vec<&str> = pieces.iter().map(String::as_str).collect();
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&refs)),
        Canned::sse(&text_stream(&["Done."])),
    ]);
    let server = CliServer::start(&fake, &[]);
    let events = stream_request(&server, "time?").until_complete(1);
    let text: String = events
        .iter()
        .filter(|e| e["type"] == "delta")
        .map(|e| e["content"].as_str().unwrap())
        .collect();
    assert_eq!(text, "Checking.Done.", "{events:#?}");
    assert!(events
        .iter()
        .any(|e| e["type"] == "tool_call" && e["name"] == "get_time"));
}

/// Regression: `/status` and `/session` reported the configured context size,
/// 0 when it is left to the model, instead of the loaded model's window.
#[test]
fn status_and_session_report_the_backend_s_context_size() {
    let server = CliServer::start_local(&["--notools"]);
    let (_, status) = get(&server, "/status");
    let size = status["context_size"].as_u64().expect("context_size");
    assert!(
        size > 0,
        "the model's window, not the unset setting: {status}"
    );
    let (_, session) = get(&server, "/session");
    assert_eq!(session["context_size"], size, "{session}");
}

#[test]
fn ps_lists_the_running_servers_without_their_tokens() {
    let fake = FakeOpenAi::start(Vec::new());
    let mut server = CliServer::start(&fake, &[]);
    let run = server.sandbox.run(&["ps"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let pid = server.child.id().to_string();
    let line = run
        .stdout
        .lines()
        .find(|l| l.split_whitespace().last() == Some(pid.as_str()))
        .unwrap_or_else(|| panic!("no line for pid {pid}: {}", run.stdout));
    assert!(
        line.starts_with("cliserver") && line.contains(&server.addr),
        "{line}"
    );
    assert!(!run.stdout.contains(TOKEN), "a token was printed");
    let _ = server.child.kill();
    let _ = server.child.wait();
    let run = server.sandbox.run(&["ps"], "");
    assert!(
        !run.stdout
            .lines()
            .any(|l| l.split_whitespace().last() == Some(pid.as_str())),
        "a killed server is still listed: {}",
        run.stdout
    );
}

#[test]
fn non_streaming_request_answers_once() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["Hello", " there"])),
        Canned::sse(&text_stream(&["Plain"])),
    ]);
    let server = CliServer::start(&fake, &[]);
    let (status, body) = post(&server, "/request", r#"{"prompt": "hi"}"#);
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        (&body["response"], &body["success"]),
        (&json!("Hello there"), &json!(true))
    );
    // A body that is not JSON is the prompt.
    let response = agent()
        .post(&server.url("/request"))
        .header("Content-Type", "text/plain")
        .send("just words")
        .unwrap();
    let body: Value =
        serde_json::from_str(&response.into_body().read_to_string().unwrap()).unwrap();
    assert_eq!(body["response"], "Plain");
    assert_eq!(
        fake.requests()[1].body["messages"]
            .as_array()
            .unwrap()
            .last()
            .unwrap()["content"],
        "just words"
    );
    let (status, body) = post(&server, "/request", r#"{"stream": false}"#);
    assert_eq!(
        (status, body["error"]["type"].as_str()),
        (400, Some("invalid_request_error"))
    );
    let (_, session) = get(&server, "/session");
    let roles: Vec<&str> = session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"]);
    assert_eq!(session["model"], "test");
}

#[test]
fn two_observers_see_every_event_in_the_same_order() {
    let fake = FakeOpenAi::start(tool_script());
    let server = CliServer::start(&fake, &["--approve", "all"]);
    let (mut first, hello_first) = observe(&server);
    let (mut second, hello_second) = observe(&server);
    assert_ne!(hello_first["client_id"], hello_second["client_id"]);
    let own = stream_request(&server, "go").until_complete(1);
    let a = first.until_complete(1);
    let b = second.until_complete(1);
    assert_eq!(a, b);
    assert_eq!(a, own, "observers see exactly what the requester saw");
    let start = hello_first["seq"].as_u64().unwrap();
    for (i, event) in a.iter().enumerate() {
        assert_eq!(
            event["seq"].as_u64(),
            Some(start + 1 + i as u64),
            "gap at {i}"
        );
    }
}

#[test]
fn async_prompts_are_queued_and_run_in_order() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["one"])),
        Canned::sse(&text_stream(&["two"])),
        Canned::sse(&text_stream(&["three"])),
    ]);
    let server = CliServer::start(&fake, &[]);
    let (mut observer, _) = observe(&server);
    let mut ids = Vec::new();
    for prompt in ["p1", "p2", "p3"] {
        let (status, body) = post(
            &server,
            "/request",
            &json!({"prompt": prompt, "async": true}).to_string(),
        );
        assert_eq!(status, 200);
        assert_eq!(
            (&body["success"], &body["queued"]),
            (&json!(true), &json!(true))
        );
        assert!(body["queue_position"].as_u64().is_some());
        ids.push(body["request_id"].as_u64().unwrap());
    }
    let events = observer.until_complete(3);
    let answers: Vec<(u64, &str)> = events
        .iter()
        .filter(|e| e["type"] == "delta" && e["content"] != "")
        .map(|e| {
            (
                e["request_id"].as_u64().unwrap(),
                e["content"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        answers,
        [(ids[0], "one"), (ids[1], "two"), (ids[2], "three")]
    );
    let prompts: Vec<String> = fake
        .requests()
        .iter()
        .map(|r| r.body["messages"].as_array().unwrap().last().unwrap()["content"].clone())
        .map(|content| content.as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(prompts, ["p1", "p2", "p3"]);
    assert!(poll_until(Duration::from_secs(5), || get(
        &server, "/status"
    )
    .1["requests_served"]
        == 3));
}

/// A tool round running `sleep 100` with a unique marker in its command line.
fn sleeping_tool(marker: &str) -> Vec<Canned> {
    vec![Canned::sse(&tool_call_stream(
        "call_s",
        "bash",
        json!({"command": format!("sleep 100 && echo {marker}")}),
    ))]
}

/// Starts a streamed request whose tool sleeps, and waits until the sleep runs.
fn start_sleep(server: &CliServer, marker: &str) -> Events {
    let mut events = stream_request(server, "sleep");
    loop {
        let event = events.next().expect("events before the tool");
        if event["type"] == "tool_call" {
            break;
        }
    }
    assert!(poll_until(Duration::from_secs(10), || process_running(
        marker
    )));
    events
}

#[test]
fn cancel_stops_a_running_tool_within_a_second() {
    let marker = format!("cs-cancel-{}", std::process::id());
    let fake = FakeOpenAi::start(sleeping_tool(&marker));
    let server = CliServer::start(&fake, &["--approve", "all"]);
    let mut events = start_sleep(&server, &marker);
    let started = Instant::now();
    let (status, body) = post(&server, "/cancel", "");
    assert_eq!((status, &body["cancelled_running"]), (200, &json!(true)));
    let rest = events.until_complete(1);
    assert_eq!(rest.last().unwrap()["finish_reason"], "cancelled");
    assert!(poll_until(Duration::from_secs(1), || !process_running(
        &marker
    )));
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(get(&server, "/status").1["processing"], false);
}

#[test]
fn closing_a_streaming_client_cancels_its_request() {
    let marker = format!("cs-close-{}", std::process::id());
    let fake = FakeOpenAi::start(sleeping_tool(&marker));
    let server = CliServer::start(&fake, &["--approve", "all"]);
    let events = start_sleep(&server, &marker);
    drop(events);
    let started = Instant::now();
    assert!(
        poll_until(Duration::from_secs(1), || !process_running(&marker)),
        "tool still running"
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    assert!(poll_until(Duration::from_secs(2), || get(
        &server, "/status"
    )
    .1["processing"]
        == false));
}

#[test]
fn non_loopback_bind_without_a_token_is_refused_before_listening() {
    let sandbox = Sandbox::new("bind");
    let run = sandbox.run(
        &[
            "--cliserver",
            "--host",
            "0.0.0.0",
            "--port",
            "0",
            "--backend",
            "openai",
            "--api-base",
            "http://127.0.0.1:9/v1",
            "-m",
            "m",
        ],
        "",
    );
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("without an auth token"),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("listening"), "{}", run.stderr);
}

#[test]
fn bad_input_gets_json_errors_and_idle_connections_do_not_block() {
    let fake = FakeOpenAi::start(Vec::new());
    let server = CliServer::start(&fake, &[]);
    let (status, body) = post(&server, "/request", "{\"prompt\": ");
    assert_eq!(status, 400);
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("invalid JSON"));
    // A body over the 32 MiB cap is refused from its Content-Length, before it is read.
    let mut stream = TcpStream::connect(&server.addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let head = format!(
        "POST /request HTTP/1.1\r\nHost: {}\r\nContent-Length: {}\r\n\r\n",
        server.addr,
        32 * 1024 * 1024 + 1
    );
    stream.write_all(head.as_bytes()).unwrap();
    let _ = stream.write_all(&vec![b'x'; 64 * 1024]);
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(answer.contains("\"request_too_large\""), "{answer}");
    // 300 idle connections do not stop a new client from being served.
    let idle: Vec<TcpStream> = (0..300)
        .map(|_| TcpStream::connect(&server.addr).unwrap())
        .collect();
    let started = Instant::now();
    assert_eq!(get(&server, "/health").0, 200);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    drop(idle);
    assert_eq!(get(&server, "/health").0, 200);
}

#[test]
fn cli_client_prints_what_a_local_run_prints() {
    let sandbox = Sandbox::new("local");
    let local_fake = FakeOpenAi::start(tool_script());
    let local = sandbox.run(
        &[
            "--backend",
            "openai",
            "--api-base",
            &local_fake.base_url,
            "-m",
            "test",
            "--approve",
            "all",
            "-e",
            "say hi",
        ],
        "",
    );
    assert_eq!(local.status, Some(0), "{}", local.stderr);
    let fake = FakeOpenAi::start(tool_script());
    let server = CliServer::start(&fake, &["--approve", "all"]);
    let remote = server.sandbox.run(
        &[
            "--backend",
            "cli",
            "--api-base",
            &server.base,
            "-e",
            "say hi",
        ],
        "",
    );
    assert_eq!(remote.status, Some(0), "{}", remote.stderr);
    assert_eq!(remote.stdout, local.stdout);
    assert!(
        remote.stdout.contains("* bash(command=echo hi)"),
        "{}",
        remote.stdout
    );
    assert!(
        remote.stdout.ends_with("The tool said hi.\n"),
        "{}",
        remote.stdout
    );
    // The tool ran on the server: its model saw the result.
    assert_eq!(fake.requests().len(), 2);
    let (_, session) = get(&server, "/session");
    assert_eq!(session["messages"].as_array().unwrap().len(), 4);
}

/// A write tool round per prompt, each followed by an answer.
fn write_script(files: &[&str]) -> Vec<Canned> {
    files
        .iter()
        .enumerate()
        .flat_map(|(n, file)| {
            [
                Canned::sse(&tool_call_stream(
                    &format!("call_{n}"),
                    "write",
                    json!({"file_path": file, "content": "approved content"}),
                )),
                Canned::sse(&text_stream(&["Answered."])),
            ]
        })
        .collect()
}

/// Reads events until the approval request and returns it.
fn approval_request(events: &mut Events) -> Value {
    loop {
        let event = events.next().expect("events before the approval");
        if event["type"] == "approval_required" {
            return event;
        }
        assert_ne!(event["type"], "tool_result", "ran without asking: {event}");
    }
}

/// The `tool_result` event of the rest of the request.
fn tool_result(events: &mut Events) -> Value {
    let rest = events.until_complete(1);
    rest.into_iter()
        .find(|e| e["type"] == "tool_result")
        .expect("a tool result")
}

#[test]
fn approval_round_trip_allow_deny_and_timeout() {
    let fake = FakeOpenAi::start(write_script(&["allowed.txt", "denied.txt", "late.txt"]));
    let server = CliServer::start(&fake, &["--approval-timeout", "2"]);
    let work = server.sandbox.work();

    let mut events = stream_request(&server, "write allowed");
    let request = approval_request(&mut events);
    assert_eq!(request["name"], "write");
    assert_eq!(request["args"]["file_path"], "allowed.txt");
    assert_eq!(request["tool_call_id"], "call_0");
    let id = request["id"].as_str().expect("approval id").to_string();
    assert!(
        !work.join("allowed.txt").exists(),
        "nothing runs before the answer"
    );
    let (status, body) = post(
        &server,
        &format!("/approve/{id}"),
        r#"{"decision":"maybe"}"#,
    );
    assert_eq!(status, 400, "{body}");
    let (status, body) = post(&server, &format!("/approve/{id}"), "not json");
    assert_eq!(
        (status, body["error"]["message"].is_string()),
        (400, true),
        "{body}"
    );
    let (status, body) = post(
        &server,
        &format!("/approve/{id}"),
        r#"{"decision":"allow"}"#,
    );
    assert_eq!((status, &body["success"]), (200, &json!(true)), "{body}");
    assert_eq!(tool_result(&mut events)["success"], true);
    assert!(work.join("allowed.txt").exists());
    let (status, body) = post(
        &server,
        &format!("/approve/{id}"),
        r#"{"decision":"allow"}"#,
    );
    assert_eq!(status, 404, "an answered id is gone: {body}");
    let (status, body) = post(&server, "/approve/no-such-id", r#"{"decision":"allow"}"#);
    assert_eq!(
        (status, body["error"]["message"].is_string()),
        (404, true),
        "{body}"
    );

    let mut events = stream_request(&server, "write denied");
    let id = approval_request(&mut events)["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, _) = post(&server, &format!("/approve/{id}"), r#"{"decision":"deny"}"#);
    assert_eq!(status, 200);
    let result = tool_result(&mut events);
    assert_eq!(result["success"], false, "{result}");
    assert!(!work.join("denied.txt").exists());
    let refused = fake.requests()[3].body["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert!(
        refused["content"]
            .as_str()
            .unwrap()
            .contains("The user denied"),
        "{refused}"
    );

    // Nobody answers: after --approval-timeout the call is denied.
    let mut events = stream_request(&server, "write late");
    let id = approval_request(&mut events)["id"]
        .as_str()
        .unwrap()
        .to_string();
    let result = tool_result(&mut events);
    assert_eq!(result["success"], false, "{result}");
    assert!(
        result["content"]
            .as_str()
            .unwrap()
            .contains("arrived in time"),
        "{result}"
    );
    assert!(!work.join("late.txt").exists());
    let (status, _) = post(
        &server,
        &format!("/approve/{id}"),
        r#"{"decision":"allow"}"#,
    );
    assert_eq!(status, 404, "a timed-out id cannot be approved later");
    assert!(!work.join("late.txt").exists());

    let audit = std::fs::read_to_string(
        server
            .sandbox
            .root
            .path()
            .join("home/state/shepherd/audit.jsonl"),
    )
    .expect("audit log");
    let decided: Vec<(String, String)> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .map(|l| (l["decision"].to_string(), l["decided_by"].to_string()))
        .collect();
    let expected = [("allow", "user"), ("deny", "user"), ("deny", "timeout")]
        .map(|(d, b)| (format!("\"{d}\""), format!("\"{b}\"")));
    assert_eq!(decided, expected);
}

#[test]
fn a_cli_client_answers_the_server_s_approvals_for_its_user() {
    let fake = FakeOpenAi::start(write_script(&["allowed.txt", "denied.txt"]));
    let server = CliServer::start(&fake, &[]);
    let mut child =
        server
            .sandbox
            .spawn(&["--backend", "cli", "--api-base", &server.base, "--json"]);
    let mut client = JsonSession::attach(&mut child);
    let collected = collect(child);
    for (file, decision, ran) in [
        ("allowed.txt", "allow", true),
        ("denied.txt", "deny", false),
    ] {
        client.send(&json!({"type": "user", "content": format!("write {file}")}));
        // The client asks its own user, as for a local call, with the call's arguments.
        let request = client.until("approval_required").pop().unwrap();
        assert_eq!(request["name"], "write", "{request}");
        assert_eq!(request["params"]["file_path"], file, "{request}");
        assert!(
            !server.sandbox.work().join(file).exists(),
            "not before the answer"
        );
        client.send(&json!({"type": "approval", "id": request["id"], "decision": decision}));
        let seen = client.until("end_turn");
        let result = seen
            .iter()
            .find(|l| l["type"] == "tool_result")
            .unwrap_or_else(|| panic!("the server's result: {seen:?}"));
        assert_eq!(result["success"], ran, "{result}");
        assert_eq!(server.sandbox.work().join(file).exists(), ran, "{file}");
    }
    drop(client);
    let run = finish(collected, Duration::from_secs(30)).expect("exits at end of input");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(last_user_text(&fake.requests()[3].body).contains("denied"));
}

#[test]
fn a_headless_cli_client_refuses_the_server_s_approvals_at_once() {
    let fake = FakeOpenAi::start(write_script(&["headless.txt"]));
    // Left alone, the server would wait ten minutes for someone to answer.
    let server = CliServer::start(&fake, &["--approval-timeout", "600"]);
    let run = server.sandbox.run(
        &[
            "--backend",
            "cli",
            "--api-base",
            &server.base,
            "-e",
            "write it",
        ],
        "",
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stdout.ends_with("Answered.\n"), "{}", run.stdout);
    assert!(!server.sandbox.work().join("headless.txt").exists());
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert!(last_user_text(&requests[1].body).contains("denied"));
}

/// The content of the last message of a chat request (the tool result in round two).
fn last_user_text(body: &Value) -> String {
    let last = body["messages"].as_array().and_then(|m| m.last());
    last.and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// `--image` on a `--backend cli` client: the file goes to the cliserver as a
/// data URL, and its session's user message carries it, before the text.
#[test]
fn an_image_given_to_the_cli_client_reaches_the_server_s_session() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["A red ", "square."]))]);
    let server = CliServer::start(&fake, &[]);
    let png = server.sandbox.work().join("red.png");
    crate::harness::write_png(&png, 4, 3);
    let run = server.sandbox.run(
        &[
            "--backend",
            "cli",
            "--api-base",
            &server.base,
            "--image",
            "red.png",
            "-e",
            "what is this?",
        ],
        "",
    );
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(run.stdout, "A red square.\n");
    let (_, session) = get(&server, "/session");
    let user = &session["messages"][0];
    assert_eq!(user["role"], "user");
    assert_eq!(user["content"], "what is this?");
    let images = user["images"].as_array().expect("the message's images");
    assert_eq!(images.len(), 1, "{user}");
    assert_eq!(images[0]["at"], 0);
    assert_eq!(images[0]["mime"], "image/png");
    assert_eq!(
        (&images[0]["width"], &images[0]["height"]),
        (&json!(4), &json!(3))
    );
    assert_eq!(images[0]["sha256"], crate::harness::sha256_of(&png));
}

/// A bad image in `POST /request` is the client's 400 with a JSON body, before
/// any model call; the server goes on serving.
#[test]
fn the_cliserver_refuses_a_bad_image_with_a_json_400() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["fine"]))]);
    let server = CliServer::start(&fake, &[]);
    let truncated = "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAQAAAAD";
    for (images, expect) in [
        (json!([truncated]), "images[0]: the image does not decode"),
        (
            json!(["data:text/plain;base64,aGk="]),
            "images[0]: unsupported image type",
        ),
        (
            json!(["https://example.com/cat.png"]),
            "images[0]: the image is not valid",
        ),
    ] {
        let body = json!({"prompt": "look", "images": images}).to_string();
        let (status, answer) = post(&server, "/request", &body);
        assert_eq!(status, 400, "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error");
        let message = answer["error"]["message"].as_str().unwrap_or_default();
        assert!(message.starts_with(expect), "{message}");
    }
    assert!(
        fake.requests().is_empty(),
        "no model call for a refused image"
    );
    let (status, answer) = post(&server, "/request", r#"{"prompt": "hi"}"#);
    assert_eq!((status, &answer["response"]), (200, &json!("fine")));
}

/// `/image` in the REPL of a `--backend cli` client: Tab completes the
/// command, the attachment is shown and listed, goes with the next message
/// into the server's session, and is gone afterwards.
#[test]
fn repl_image_attaches_to_the_next_message_of_a_cli_client() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["A red square."]))]);
    let server = CliServer::start(&fake, &[]);
    let png = server.sandbox.work().join("red.png");
    crate::harness::write_png(&png, 4, 3);
    let args = [
        "--backend",
        "cli",
        "--api-base",
        &server.base,
        "--api-key",
        TOKEN,
    ];
    let tmux = crate::terminal::Tmux::start(&server.sandbox, &args);
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.type_text("/im");
    tmux.key("Tab");
    // tmux trims the trailing space; typing on shows it was there.
    tmux.wait_text("> /image");
    for (line, expected) in [
        ("red.png", "attached: red.png (4x3, image/png)"),
        (
            "/image missing.png",
            "error: cannot read the image missing.png",
        ),
        ("/image", "1. red.png (4x3, image/png)"),
        ("what is it?", "A red square."),
        ("/image clear", "[0 attachments dropped]"),
    ] {
        tmux.type_text(line);
        tmux.key("Enter");
        tmux.wait_text(expected);
    }
    let (_, session) = get(&server, "/session");
    let user = &session["messages"][0];
    assert_eq!(user["content"], "what is it?");
    assert_eq!(user["images"][0]["sha256"], crate::harness::sha256_of(&png));
    assert_eq!(user["images"].as_array().map(Vec::len), Some(1));
}

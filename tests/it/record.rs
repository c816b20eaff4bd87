//! `--record DIR` and `--replay DIR` end to end: a run against a fake
//! upstream is recorded with its key redacted, then replayed with the fake
//! gone (and a closed port as the API base) to the same output and events.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use serde_json::{json, Value};

use crate::fake_openai::{text_stream, tool_call_stream, Canned, FakeOpenAi};
use crate::harness::{Run, Sandbox};

const KEY: &str = "sk-test-SECRET123";
const ANSWER: &str = "There are two files: a.txt and b.txt.";

fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

fn sandbox(tag: &str) -> Sandbox {
    let sandbox = Sandbox::new(tag);
    std::fs::write(sandbox.work().join("a.txt"), "a").unwrap();
    std::fs::write(sandbox.work().join("b.txt"), "b").unwrap();
    sandbox
}

fn run(
    sandbox: &Sandbox,
    kind: &str,
    base: &str,
    tape: [&str; 2],
    extra: &[&str],
    stdin: &str,
) -> Run {
    let mut all = vec![
        "--backend",
        kind,
        "--api-base",
        base,
        "-m",
        "test",
        "--api-key",
        KEY,
        "--context-size",
        "8192",
    ];
    all.extend_from_slice(&tape);
    all.extend_from_slice(extra);
    sandbox.run(&all, stdin)
}

/// Every file of the recording: no key in any, all private, two exchanges.
fn check_recording(dir: &Path) {
    assert_eq!(
        std::fs::metadata(dir).unwrap().permissions().mode() & 0o777,
        0o700
    );
    let mut requests = 0;
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let bytes = std::fs::read(&path).unwrap();
        let text = String::from_utf8_lossy(&bytes);
        assert!(
            !text.contains("SECRET123"),
            "{} leaks the key",
            path.display()
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{}", path.display());
        if path.to_string_lossy().ends_with("-request.json") {
            requests += 1;
            assert!(text.contains("[REDACTED]"), "{text}");
        }
    }
    assert_eq!(requests, 2, "a tool call round, then the answer");
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["model"], "test");
}

/// Records a tool round and an answer with `-e`, and again with `--json`,
/// then replays both with the fake stopped: same stdout, same events.
fn record_then_replay(kind: &str, script: Vec<Canned>) -> Sandbox {
    let fake = FakeOpenAi::start([script.clone(), script].concat());
    let sandbox = sandbox(kind);
    let text_dir = sandbox.root.path().join("text");
    let json_dir = sandbox.root.path().join("json");
    let text_tape = text_dir.to_str().unwrap();
    let json_tape = json_dir.to_str().unwrap();
    let question = "what files are here?";
    let input = json!({"type": "user", "content": question}).to_string() + "\n";
    let recorded = run(
        &sandbox,
        kind,
        &fake.base_url,
        ["--record", text_tape],
        &["-e", question],
        "",
    );
    assert_eq!(recorded.status, Some(0), "stderr: {}", recorded.stderr);
    assert!(
        recorded.stdout.ends_with(&format!("{ANSWER}\n")),
        "{}",
        recorded.stdout
    );
    let recorded_json = run(
        &sandbox,
        kind,
        &fake.base_url,
        ["--record", json_tape],
        &["--json"],
        &input,
    );
    assert_eq!(
        recorded_json.status,
        Some(0),
        "stderr: {}",
        recorded_json.stderr
    );
    assert_eq!(fake.requests().len(), 4);
    drop(fake);
    check_recording(&text_dir);
    check_recording(&json_dir);

    let closed = closed_port_url();
    let replayed = run(
        &sandbox,
        kind,
        &closed,
        ["--replay", text_tape],
        &["-e", question],
        "",
    );
    assert_eq!(replayed.status, Some(0), "stderr: {}", replayed.stderr);
    assert_eq!(replayed.stdout, recorded.stdout);
    let replayed_json = run(
        &sandbox,
        kind,
        &closed,
        ["--replay", json_tape],
        &["--json"],
        &input,
    );
    assert_eq!(
        replayed_json.status,
        Some(0),
        "stderr: {}",
        replayed_json.stderr
    );
    assert_eq!(replayed_json.json_lines(), recorded_json.json_lines());
    sandbox
}

fn openai_script() -> Vec<Canned> {
    vec![
        Canned::sse(&tool_call_stream(
            "call_ls",
            "list_directory",
            json!({"path": "."}),
        )),
        Canned::sse(&text_stream(&["There are two files: ", "a.txt and b.txt."])),
    ]
}

fn anthropic_sse(events: &[Value]) -> Canned {
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    Canned::sse_raw(&body)
}

fn anthropic_script() -> Vec<Canned> {
    let start = |id: &str| json!({"type": "message_start", "message": {"id": id, "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 50, "output_tokens": 1}}});
    vec![
        anthropic_sse(&[
            start("msg_1"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_ls", "name": "list_directory", "input": {}}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{\"path\": \".\"}"}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}}),
            json!({"type": "message_stop"}),
        ]),
        anthropic_sse(&[
            start("msg_2"),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": ANSWER}}),
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 40}}),
            json!({"type": "message_stop"}),
        ]),
    ]
}

#[test]
fn record_openai_then_replay_without_the_upstream() {
    let sandbox = record_then_replay("openai", openai_script());
    let tape = sandbox.root.path().join("text");
    let diverged = run(
        &sandbox,
        "anthropic",
        &closed_port_url(),
        ["--replay", tape.to_str().unwrap()],
        &["-e", "what files are here?"],
        "",
    );
    assert_eq!(diverged.status, Some(1), "stderr: {}", diverged.stderr);
    assert!(
        diverged.stderr.contains(
            "replay: request 1 is POST /v1/messages but the recording has POST /v1/chat/completions"
        ),
        "{}",
        diverged.stderr
    );
}

#[test]
fn record_anthropic_then_replay_without_the_upstream() {
    let sandbox = record_then_replay("anthropic", anthropic_script());
    let request =
        std::fs::read_to_string(sandbox.root.path().join("text/0001-request.json")).unwrap();
    let request: Value = serde_json::from_str(&request).unwrap();
    assert_eq!(request["headers"]["x-api-key"], "[REDACTED]");
    assert_eq!(request["method"], "POST");
}

#[test]
fn record_and_replay_refuse_what_they_cannot_do() {
    let sandbox = Sandbox::new("record-usage");
    let both = sandbox.run(&["--record", "a", "--replay", "b", "-e", "hi"], "");
    assert_eq!(both.status, Some(2), "stderr: {}", both.stderr);
    assert!(
        both.stderr
            .contains("--record and --replay cannot be used together"),
        "{}",
        both.stderr
    );
    let local = sandbox.run(
        &[
            "--backend",
            "llamacpp",
            "-m",
            "/nonexistent/model.gguf",
            "--record",
            "rec",
            "-e",
            "hi",
        ],
        "",
    );
    assert_eq!(local.status, Some(2), "stderr: {}", local.stderr);
    assert!(
        local.stderr.contains("sends no upstream requests"),
        "{}",
        local.stderr
    );
    let missing = sandbox.run(
        &[
            "--backend",
            "openai",
            "--api-base",
            &closed_port_url(),
            "-m",
            "t",
            "--replay",
            "nothing-here",
            "-e",
            "hi",
        ],
        "",
    );
    assert_eq!(missing.status, Some(2), "stderr: {}", missing.stderr);
    assert!(
        missing.stderr.contains("manifest.json"),
        "{}",
        missing.stderr
    );
}

fn gemini_parts(parts: Value) -> Canned {
    let chunk = json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 40, "totalTokenCount": 90}
    });
    Canned::sse_raw(&format!("data: {chunk}\r\n\r\n"))
}

#[test]
fn record_gemini_then_replay_without_the_upstream() {
    let call = json!([{"functionCall": {"name": "list_directory", "args": {"path": "."}}, "thoughtSignature": "U0lH"}]);
    let sandbox = record_then_replay(
        "gemini",
        vec![gemini_parts(call), gemini_parts(json!([{"text": ANSWER}]))],
    );
    let request =
        std::fs::read_to_string(sandbox.root.path().join("json/0002-request.json")).unwrap();
    let request: Value = serde_json::from_str(&request).unwrap();
    assert_eq!(request["headers"]["x-goog-api-key"], "[REDACTED]");
    assert!(
        request["url"]
            .as_str()
            .unwrap()
            .contains(":streamGenerateContent"),
        "{request}"
    );
}

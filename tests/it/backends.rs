//! End-to-end tests of the Anthropic, Gemini and Ollama backends and of the
//! provider failover chain, and the agent on calls the upstream cut, through
//! the built binary.
//!
//! The upstreams are the same real tiny_http server as `fake_openai` (it
//! replays whatever bytes it is given and records requests); the streams
//! here are written from each provider's documented wire format.

use serde_json::{json, Value};

use crate::fake_openai::{chunk, text_stream, Canned, FakeOpenAi};
use crate::harness::Sandbox;

/// A named-event Anthropic SSE body.
fn anthropic_sse(events: &[Value]) -> Canned {
    let body: String = events
        .iter()
        .map(|e| format!("event: {}\ndata: {e}\n\n", e["type"].as_str().unwrap_or("")))
        .collect();
    Canned::sse_raw(&body)
}

fn anthropic_tool_call(id: &str, name: &str, args: &str) -> Canned {
    let (head, tail) = args.split_at(args.len() / 2);
    anthropic_sse(&[
        json!({"type": "message_start", "message": {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": 50, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": id, "name": name, "input": {}}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": head}}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": tail}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}}),
        json!({"type": "message_stop"}),
    ])
}

fn anthropic_text(text: &str, input_tokens: u64) -> Canned {
    anthropic_sse(&[
        json!({"type": "message_start", "message": {"id": "msg_2", "type": "message", "role": "assistant", "content": [], "usage": {"input_tokens": input_tokens, "output_tokens": 1}}}),
        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        json!({"type": "ping"}),
        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
        json!({"type": "content_block_stop", "index": 0}),
        json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 40}}),
        json!({"type": "message_stop"}),
    ])
}

/// A Gemini SSE body: bare `data:` lines, ended by EOF.
fn gemini_sse(chunks: &[Value]) -> Canned {
    let body: String = chunks
        .iter()
        .map(|c| format!("data: {c}\r\n\r\n"))
        .collect();
    Canned::sse_raw(&body)
}

fn gemini_parts(parts: Value, prompt_tokens: u64) -> Canned {
    gemini_sse(&[json!({
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": 40, "totalTokenCount": prompt_tokens + 40}
    })])
}

fn ollama_ndjson(lines: &[Value]) -> Canned {
    let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
    Canned {
        status: 200,
        headers: vec![("Content-Type".into(), "application/x-ndjson".into())],
        body: body.into_bytes(),
        hold: None,
    }
}

fn ollama_done() -> Value {
    json!({"model": "test", "message": {"role": "assistant", "content": ""}, "done": true, "done_reason": "stop",
        "prompt_eval_count": 50, "prompt_eval_duration": 1_000_000, "eval_count": 10, "eval_duration": 2_000_000})
}

fn args<'a>(kind: &'a str, fake: &'a FakeOpenAi, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![
        "--backend",
        kind,
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
        "--api-key",
        "k-123",
        "--context-size",
        "8192",
    ];
    all.extend_from_slice(extra);
    all
}

/// The foundation's end-to-end tool-use test, on another wire format:
/// returns the second request's body for wire checks.
fn list_directory_round_trip(kind: &str, script: Vec<Canned>) -> Value {
    let fake = FakeOpenAi::start(script);
    let sandbox = Sandbox::new(kind);
    std::fs::write(sandbox.work().join("a.txt"), "a").unwrap();
    std::fs::write(sandbox.work().join("b.txt"), "b").unwrap();
    let run = sandbox.run(&args(kind, &fake, &["-e", "what files are here?"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let mut lines = run.stdout.lines();
    assert_eq!(lines.next(), Some("* list_directory(path=.)"));
    assert!(lines.next().unwrap().starts_with("  ✓ "));
    assert_eq!(lines.next(), Some("There are two files: a.txt and b.txt."));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2, "{requests:?}");
    requests[1].body.clone()
}

const ANSWER: &str = "There are two files: a.txt and b.txt.";

#[test]
fn anthropic_agent_loop_with_tool_results_in_the_next_user_turn() {
    let body = list_directory_round_trip(
        "anthropic",
        vec![
            anthropic_tool_call("toolu_ls", "list_directory", r#"{"path": "."}"#),
            anthropic_text(ANSWER, 80),
        ],
    );
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3);
    assert_eq!(
        messages[1]["content"],
        json!([{"type": "tool_use", "id": "toolu_ls", "name": "list_directory", "input": {"path": "."}}])
    );
    let result = &messages[2]["content"][0];
    assert_eq!(
        (&messages[2]["role"], &result["type"]),
        (&json!("user"), &json!("tool_result"))
    );
    assert_eq!(result["tool_use_id"], "toolu_ls");
    assert!(result["content"].as_str().unwrap().contains("b.txt"));
    assert!(body["system"].as_str().is_some_and(|s| !s.is_empty()));
}

#[test]
fn gemini_agent_loop_echoes_the_thought_signature() {
    let call = json!([{"functionCall": {"name": "list_directory", "args": {"path": "."}}, "thoughtSignature": "U0lH"}]);
    let body = list_directory_round_trip(
        "gemini",
        vec![
            gemini_parts(call, 50),
            gemini_parts(json!([{"text": ANSWER}]), 80),
        ],
    );
    let contents = body["contents"].as_array().unwrap();
    assert_eq!(
        contents[1],
        json!({"role": "model", "parts": [{"functionCall": {"id": "call_0", "name": "list_directory", "args": {"path": "."}}, "thoughtSignature": "U0lH"}]})
    );
    let response = &contents[2]["parts"][0]["functionResponse"];
    assert_eq!(
        (&response["id"], &response["name"]),
        (&json!("call_0"), &json!("list_directory"))
    );
    assert!(response["response"]["result"]
        .as_str()
        .unwrap()
        .contains("a.txt"));
}

#[test]
fn ollama_agent_loop_sends_argument_objects() {
    let call = json!({"model": "test", "message": {"role": "assistant", "content": "",
        "tool_calls": [{"function": {"name": "list_directory", "arguments": {"path": "."}}}]}, "done": false});
    let text = json!({"model": "test", "message": {"role": "assistant", "content": ANSWER}, "done": false});
    let body = list_directory_round_trip(
        "ollama",
        vec![
            ollama_ndjson(&[call, ollama_done()]),
            ollama_ndjson(&[text, ollama_done()]),
        ],
    );
    let messages = body["messages"].as_array().unwrap();
    let assistant = &messages[messages.len() - 2];
    assert_eq!(
        assistant["tool_calls"],
        json!([{"function": {"name": "list_directory", "arguments": {"path": "."}}}])
    );
    let tool = messages.last().unwrap();
    assert_eq!(
        (&tool["role"], &tool["tool_name"]),
        (&json!("tool"), &json!("list_directory"))
    );
    assert_eq!(body["options"]["num_ctx"], 8192);
}

/// Three questions; the third overflows once, is evicted and retried.
fn overflow_then_retry(kind: &str, answers: Vec<Canned>, overflow: Canned) -> Vec<Value> {
    let mut script = answers;
    let last = script.pop().expect("three answers");
    script.push(overflow);
    script.push(last);
    let fake = FakeOpenAi::start(script);
    let sandbox = Sandbox::new(kind);
    let input: String = ["first question", "second question", "third question"]
        .iter()
        .map(|l| json!({"type": "user", "content": l}).to_string() + "\n")
        .collect();
    let run = sandbox.run(&args(kind, &fake, &["--json", "--notools"]), &input);
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let lines = run.json_lines();
    assert!(
        lines
            .iter()
            .any(|l| l["type"] == "system" && l["content"].as_str().unwrap().contains("evicted")),
        "{lines:?}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    assert!(requests[3].body_len < requests[2].body_len);
    assert!(!requests[3].body.to_string().contains("first question"));
    assert!(requests[3].body.to_string().contains("third question"));
    lines
}

#[test]
fn anthropic_overflow_evicts_and_retries() {
    let overflow = Canned::json(
        400,
        json!({"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 8300 tokens > 8192 maximum"}}),
    );
    let answers = ["one", "two", "three"]
        .iter()
        .map(|t| anthropic_text(t, 100))
        .collect();
    overflow_then_retry("anthropic", answers, overflow);
}

#[test]
fn gemini_overflow_evicts_and_retries() {
    let overflow = Canned::json(
        400,
        json!({"error": {"code": 400, "status": "INVALID_ARGUMENT", "message": "The input token count (8300) exceeds the maximum number of tokens allowed (8192)."}}),
    );
    let answers = ["one", "two", "three"]
        .iter()
        .map(|t| gemini_parts(json!([{"text": t}]), 100))
        .collect();
    overflow_then_retry("gemini", answers, overflow);
}

#[test]
fn ollama_overflow_error_evicts_and_retries() {
    let overflow = Canned::json(
        400,
        json!({"error": "the input length exceeds the context length"}),
    );
    let answers = ["one", "two", "three"]
        .iter()
        .map(|t| {
            let line = json!({"model": "test", "message": {"role": "assistant", "content": t}, "done": false});
            ollama_ndjson(&[line, ollama_done()])
        })
        .collect();
    overflow_then_retry("ollama", answers, overflow);
}

/// Writes a config.json with `providers` to the sandbox.
fn write_config(sandbox: &Sandbox, providers: Value) {
    let dir = sandbox.config_dir().join("shepherd");
    std::fs::create_dir_all(&dir).unwrap();
    let config = json!({"providers": providers});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

fn closed_port_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

#[test]
fn a_refused_provider_fails_over_to_the_next_and_says_so() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["answered by B"]))]);
    let sandbox = Sandbox::new("failover");
    write_config(
        &sandbox,
        json!([
            {"name": "A", "type": "anthropic", "model": "m", "api_key": "k", "base_url": closed_port_url(), "priority": 1},
            {"name": "B", "type": "openai", "model": "test", "base_url": fake.base_url, "priority": 2},
        ]),
    );
    let run = sandbox.run(&["--notools", "-e", "hello"], "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "answered by B\n");
    assert!(
        run.stderr.contains("provider A failed (cannot connect")
            && run.stderr.contains("switching to B"),
        "{}",
        run.stderr
    );
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn an_auth_error_does_not_fail_over_and_says_why() {
    let denied = FakeOpenAi::start(vec![Canned::json(
        401,
        json!({"type": "error", "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
    )]);
    let spare = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["should not be used"]))]);
    let sandbox = Sandbox::new("noauth");
    write_config(
        &sandbox,
        json!([
            {"name": "A", "type": "anthropic", "model": "m", "api_key": "k-secret-77", "base_url": denied.base_url, "priority": 1},
            {"name": "B", "type": "openai", "model": "test", "base_url": spare.base_url, "priority": 2},
        ]),
    );
    let run = sandbox.run(&["--notools", "-e", "hello"], "");
    assert_eq!(run.status, Some(1), "stderr: {}", run.stderr);
    assert!(
        run.stderr
            .contains("not switching to B: authentication errors are not transient"),
        "{}",
        run.stderr
    );
    assert!(
        !run.stderr.contains("k-secret-77"),
        "the key must not be shown: {}",
        run.stderr
    );
    assert_eq!(denied.requests().len(), 1);
    assert_eq!(
        denied.requests()[0].header("x-api-key"),
        Some("k-secret-77")
    );
    assert!(spare.requests().is_empty());
}

/// Two providers of equal priority in front of two fakes, each answering with its own name.
fn fleet_config(sandbox: &Sandbox, one: &FakeOpenAi, two: &FakeOpenAi) {
    write_config(
        sandbox,
        json!([
            {"name": "one", "type": "openai", "model": "test", "base_url": one.base_url, "priority": 5},
            {"name": "two", "type": "openai", "model": "test", "base_url": two.base_url, "priority": 5},
        ]),
    );
}

fn named_answers(name: &str, n: usize) -> Vec<Canned> {
    (0..n)
        .map(|_| Canned::sse(&text_stream(&[&format!("from {name}")])))
        .collect()
}

#[test]
fn a_fleet_of_equal_providers_shares_the_server_s_load() {
    use std::time::Duration;
    let (release, held) = crossbeam_channel::bounded::<()>(0);
    // `one`'s first answer waits until the test lets it go.
    let mut first = named_answers("one", 3);
    first[0] = first[0].clone().held(held);
    let one = FakeOpenAi::start(first);
    let two = FakeOpenAi::start(named_answers("two", 3));
    let sandbox = Sandbox::new("fleet");
    fleet_config(&sandbox, &one, &two);
    let mut child = sandbox.spawn(&["--server", "--port", "0", "--parallel", "2"]);
    let (address, log) = crate::harness::wait_listening(&mut child);
    let agent = crate::harness::http_agent(Duration::from_secs(30));
    let ask = move |agent: &ureq::Agent| -> String {
        let body = json!({"model": "test", "messages": [{"role": "user", "content": "hi"}]});
        let response = agent
            .post(&format!("{address}/v1/chat/completions"))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .expect("the server answers");
        let text = response.into_body().read_to_string().expect("body");
        let value: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        value["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_string()
    };
    let waiting = {
        let (agent, ask) = (agent.clone(), ask.clone());
        std::thread::spawn(move || ask(&agent))
    };
    let busy = crate::harness::poll_until(Duration::from_secs(30), || one.requests().len() == 1);
    assert!(
        busy,
        "the first request reached `one`; log: {}",
        log.lock().unwrap()
    );
    // While `one` is busy, the other worker's requests go to the idle `two`.
    assert_eq!(ask(&agent), "from two");
    assert_eq!(ask(&agent), "from two");
    release.send(()).expect("`one` answers");
    assert_eq!(waiting.join().expect("joins"), "from one");
    // Both idle again: they take turns.
    let mut turns = vec![ask(&agent), ask(&agent)];
    turns.sort();
    assert_eq!(turns, ["from one", "from two"]);
    assert_eq!((one.requests().len(), two.requests().len()), (2, 3));
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn the_stats_say_which_provider_of_a_fleet_answered() {
    let one = FakeOpenAi::start(named_answers("one", 2));
    let two = FakeOpenAi::start(Vec::new());
    let sandbox = Sandbox::new("fleetstats");
    fleet_config(&sandbox, &one, &two);
    let run = sandbox.run(&["--notools", "--stats", "-e", "hello"], "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    // A new process starts at the first of its fleet.
    assert_eq!(run.stdout, "from one\n");
    assert!(run.stderr.contains("[Provider: one]"), "{}", run.stderr);
    let run = sandbox.run(&["--notools", "--json", "-e", "hello"], "");
    let stats = run.json_stats();
    assert_eq!(stats["provider"], "one", "{stats}");
    assert!(two.requests().is_empty());
}

#[test]
fn the_cli_server_s_status_names_the_provider_that_answered_last() {
    use std::time::Duration;
    let one = FakeOpenAi::start(named_answers("one", 1));
    let two = FakeOpenAi::start(named_answers("two", 1));
    let sandbox = Sandbox::new("fleetstatus");
    fleet_config(&sandbox, &one, &two);
    let mut child = sandbox.spawn(&[
        "--cliserver",
        "--port",
        "0",
        "--notools",
        "--auth-token",
        crate::harness::TOKEN,
    ]);
    let (address, _log) = crate::harness::wait_listening(&mut child);
    let agent = crate::harness::http_agent(Duration::from_secs(30));
    let call = |method: &str, path: &str| -> Value {
        let url = format!("{address}{path}");
        let response = match method {
            "POST" => agent
                .post(&url)
                .header("Content-Type", "application/json")
                .send(r#"{"prompt": "hi"}"#),
            _ => agent.get(&url).call(),
        };
        let text = response.expect("answered").into_body().read_to_string();
        serde_json::from_str(&text.expect("body")).unwrap_or(Value::Null)
    };
    assert!(call("GET", "/status").get("last_provider").is_none());
    assert_eq!(call("POST", "/request")["response"], "from one");
    assert_eq!(call("GET", "/status")["last_provider"], "one");
    assert_eq!(call("POST", "/request")["response"], "from two");
    assert_eq!(call("GET", "/status")["last_provider"], "two");
    let _ = child.kill();
    let _ = child.wait();
}

/// A call the upstream's text cut at the length limit never runs: Qwen3-Coder's XML
/// parameters, Hermes JSON and a harmony message, each cut inside the `write`
/// call's content. The same call finished by the model runs (the control), so the
/// cut one is refused for being cut, not for anything else: no file, one request
/// (no round of tool results), and a notice naming the tool.
#[test]
fn a_call_the_upstream_cut_at_the_length_limit_never_runs_in_the_agent() {
    let forms = [
        (
            "qwen3-coder",
            "Saving.\n<tool_call>\n<function=write>\n<parameter=file_path>\nsaved.txt\n</parameter>\n<parameter=content>\nhel",
            "lo\n</parameter>\n</function>\n</tool_call>",
        ),
        (
            "hermes",
            "Saving.\n<tool_call>\n{\"name\": \"write\", \"arguments\": {\"file_path\": \"saved.txt\", \"content\": \"hel",
            "lo\"}}\n</tool_call>",
        ),
        (
            "harmony",
            "<|start|>assistant<|channel|>commentary to=functions.write <|constrain|>json<|message|>{\"file_path\": \"saved.txt\", \"content\": \"hel",
            "lo\"}<|call|>",
        ),
    ];
    for (form, cut, rest) in forms {
        for finished in [true, false] {
            let text = match finished {
                true => format!("{cut}{rest}"),
                false => cut.to_string(),
            };
            let mut chunks = text_stream(&[&text]);
            if !finished {
                chunks.pop();
                chunks.push(chunk(json!({}), Some("length")));
            }
            let answer = Canned::sse(&text_stream(&["Done."]));
            let fake = FakeOpenAi::start(vec![Canned::sse(&chunks), answer]);
            let sandbox = Sandbox::new("cut-call");
            let flags = ["--approve", "write", "-e", "save hello"];
            let run = sandbox.run(&args("openai", &fake, &flags), "");
            let saved = sandbox.work().join("saved.txt");
            let requests = fake.requests().len();
            let shown = format!("{}{}", run.stdout, run.stderr);
            if finished {
                assert_eq!(
                    std::fs::read_to_string(&saved).ok().as_deref(),
                    Some("hello"),
                    "{form}, finished: the call runs; {shown}"
                );
                assert_eq!(requests, 2, "{form}, finished: {shown}");
            } else {
                assert!(!saved.exists(), "{form}, cut: the call ran; {shown}");
                assert_eq!(requests, 1, "{form}, cut: no round of tool results");
                assert!(
                    shown.contains("write was cut off") && shown.contains("not run"),
                    "{form}, cut: a notice names the tool: {shown}"
                );
            }
        }
    }
}

//! `--sleep-idle-seconds` and Ollama's `keep_alive` on `shepherd --server` with
//! SmolLM2: the model leaves memory when idle (`/props`' `is_sleeping`, the
//! process's resident memory), the read-only routes answer without waking it,
//! `/metrics` while asleep, the requests that need the model wake it (the same
//! greedy answer as before), a model that cannot load again fails only that
//! request, and `keep_alive` with `/api/ps`' `expires_at`. Cases after llama.cpp's
//! `tools/server/tests/unit/test_sleep.py`.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::api_server::ApiServer;
use crate::harness::{poll_until, TempDir};

const SLEEP: [&str; 2] = ["--sleep-idle-seconds", "1"];

fn props(server: &ApiServer) -> Value {
    let (status, body) = server.get("/props");
    assert_eq!(status, 200, "{body}");
    serde_json::from_str(&body).expect("/props is JSON")
}

fn is_sleeping(server: &ApiServer) -> bool {
    let props = props(server);
    props["is_sleeping"]
        .as_bool()
        .unwrap_or_else(|| panic!("no is_sleeping in {props}"))
}

/// Polls `/props` until the model is asleep (the test's idle limit is 1 s).
fn wait_for_sleep(server: &ApiServer) {
    let asleep = poll_until(Duration::from_secs(30), || is_sleeping(server));
    assert!(asleep, "never fell asleep; log: {}", server.log());
}

/// A greedy `/completion`'s text.
fn complete(server: &ApiServer) -> String {
    let body = json!({"prompt": "The capital of France is", "n_predict": 12, "temperature": 0});
    let (status, answer) = server.post("/completion", &body);
    assert_eq!(status, 200, "{answer}; log: {}", server.log());
    answer["content"].as_str().expect("content").to_string()
}

/// The server process's resident memory in KiB (`VmRSS`).
fn rss_kib(server: &ApiServer) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).expect("status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmRSS in {status}"))
}

fn metrics(server: &ApiServer) -> String {
    let (status, text) = server.get("/metrics");
    assert_eq!(status, 200, "{text}");
    text
}

fn metric(text: &str, name: &str) -> f64 {
    let prefix = format!("llamacpp:{name} ");
    let values: Vec<f64> = text
        .lines()
        .filter_map(|line| line.strip_prefix(&prefix)?.parse().ok())
        .collect();
    assert_eq!(values.len(), 1, "{name} in {text}");
    values[0]
}

#[test]
fn an_idle_model_leaves_memory_and_read_only_routes_leave_it_asleep() {
    let server = ApiServer::with_model(&SLEEP);
    // Resident memory with the model and its context in use: read right after an
    // answer, and known to be awake when /props says so after the reading.
    let awake = loop {
        complete(&server);
        let rss = rss_kib(&server);
        if !is_sleeping(&server) {
            break rss;
        }
    };
    wait_for_sleep(&server);
    let asleep = rss_kib(&server);
    eprintln!("resident memory: {awake} KiB awake, {asleep} KiB asleep");
    assert!(
        asleep + 40 * 1024 < awake,
        "the model did not leave memory: {awake} KiB awake, {asleep} KiB asleep"
    );
    assert_eq!(server.get("/health").0, 200);
    for path in ["/v1/models", "/models"] {
        let (status, body) = server.get(path);
        assert_eq!(status, 200, "{path}: {body}");
        let list: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(list["data"].as_array().map(Vec::len), Some(1), "{body}");
    }
    metrics(&server);
    let (status, body) = server.get("/api/ps");
    assert_eq!(status, 200, "{body}");
    let ps: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(ps["models"], json!([]), "asleep, nothing is loaded: {ps}");
    assert!(is_sleeping(&server), "a read-only route woke the model");
    assert!(rss_kib(&server) + 40 * 1024 < awake);
}

#[test]
fn a_completion_wakes_the_model_with_the_same_greedy_answer() {
    let server = ApiServer::with_model(&SLEEP);
    let before = complete(&server);
    wait_for_sleep(&server);
    let after = complete(&server);
    assert_eq!(after, before, "the model woke up different");
    assert!(!is_sleeping(&server), "awake after the completion");
    // And it falls asleep again, and wakes again.
    wait_for_sleep(&server);
    assert_eq!(complete(&server), before);
}

#[test]
fn tokenizing_and_counting_tokens_wake_the_model() {
    let server = ApiServer::with_model(&SLEEP);
    let messages = json!([{"role": "user", "content": "Hello world"}]);
    let requests = [
        ("/tokenize", json!({"content": "Hello"}), "tokens"),
        (
            "/v1/chat/completions/input_tokens",
            json!({"messages": messages}),
            "input_tokens",
        ),
        (
            "/v1/responses/input_tokens",
            json!({"input": "Hello world"}),
            "input_tokens",
        ),
        (
            "/v1/messages/count_tokens",
            json!({"model": "m", "messages": messages}),
            "input_tokens",
        ),
        ("/v1/embeddings", json!({"input": "Hello"}), "data"),
    ];
    for (path, body, field) in requests {
        wait_for_sleep(&server);
        let (status, answer) = server.post(path, &body);
        assert_eq!(status, 200, "{path}: {answer}");
        let answered = match &answer[field] {
            Value::Number(n) => n.as_u64().is_some_and(|n| n > 0),
            Value::Array(items) => !items.is_empty(),
            _ => false,
        };
        assert!(answered, "{path}: {answer}");
        assert!(!is_sleeping(&server), "{path} did not wake the model");
    }
}

#[test]
fn metrics_while_asleep_are_those_of_the_moment_it_fell_asleep() {
    let server = ApiServer::with_model(&SLEEP);
    complete(&server);
    // The first scrape starts a new throughput window, so the second reads as a
    // scrape while asleep does.
    metrics(&server);
    let awake = metrics(&server);
    assert!(metric(&awake, "tokens_predicted_total") > 0.0, "{awake}");
    wait_for_sleep(&server);
    assert_eq!(metrics(&server), awake);
    assert!(is_sleeping(&server), "/metrics woke the model");
}

#[test]
fn the_throughput_window_while_asleep_reports_the_last_answer_once() {
    let server = ApiServer::with_model(&SLEEP);
    complete(&server);
    wait_for_sleep(&server);
    assert!(metric(&metrics(&server), "predicted_tokens_seconds") > 0.0);
    assert_eq!(metric(&metrics(&server), "predicted_tokens_seconds"), 0.0);
    assert!(is_sleeping(&server));
    let (status, answer) = server.post("/tokenize", &json!({"content": "Hello"}));
    assert_eq!(status, 200, "{answer}");
    assert!(!is_sleeping(&server));
    // Waking does not report the window again.
    assert_eq!(metric(&metrics(&server), "predicted_tokens_seconds"), 0.0);
}

#[test]
fn a_model_that_cannot_load_again_fails_that_request_and_the_server_lives_on() {
    let dir = TempDir::new("sleep-model");
    let model = dir.path().join("model.gguf");
    std::fs::copy(crate::api_server::test_model(), &model).expect("copy the model");
    let server = ApiServer::with_gguf(&model, &SLEEP);
    wait_for_sleep(&server);
    let gone = dir.path().join("moved-away.gguf");
    std::fs::rename(&model, &gone).unwrap();
    let body = json!({"prompt": "Hello", "n_predict": 1});
    let (status, answer) = server.post("/completion", &body);
    assert_eq!(status, 500, "{answer}");
    assert!(
        answer
            .to_string()
            .contains("could not be loaded again after sleeping"),
        "{answer}"
    );
    let (status, answer) = server.post("/tokenize", &json!({"content": "Hello"}));
    assert_eq!(status, 500, "{answer}");
    assert_eq!(server.get("/health").0, 200);
    assert!(is_sleeping(&server));
    // Once the file is back, the next request loads it.
    std::fs::rename(&gone, &model).unwrap();
    let (status, answer) = server.post("/completion", &body);
    assert_eq!(status, 200, "{answer}");
    assert!(!is_sleeping(&server));
}

/// `/api/ps`' one model's `expires_at` in Unix seconds (none listed: `None`).
fn ps_expiry(server: &ApiServer) -> Option<u64> {
    let (status, body) = server.get("/api/ps");
    assert_eq!(status, 200, "{body}");
    let ps: Value = serde_json::from_str(&body).unwrap();
    let models = ps["models"].as_array().expect("models");
    let model = models.first()?;
    let stamp = model["expires_at"].as_str().expect("expires_at");
    Some(unix_seconds(stamp))
}

/// `2026-01-02T03:04:05.000000000Z` in Unix seconds.
fn unix_seconds(stamp: &str) -> u64 {
    let number = |range: std::ops::Range<usize>| -> i64 {
        stamp[range].parse().unwrap_or_else(|_| panic!("{stamp}"))
    };
    let (y, m, d) = (number(0..4), number(5..7), number(8..10));
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + number(11..13) * 3600 + number(14..16) * 60 + number(17..19);
    secs as u64
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

#[test]
fn ollama_keep_alive_unloads_or_keeps_the_model_and_ps_tells_when() {
    // No --sleep-idle-seconds: the model stays unless a request says otherwise.
    let server = ApiServer::with_model(&[]);
    let year = 365 * 24 * 3600;
    let expiry = ps_expiry(&server).expect("listed while loaded");
    assert!(expiry > now() + year - 3600, "stays: {expiry}");
    let generate = |keep_alive: Value| {
        let body = json!({"prompt": "Hi", "stream": false, "keep_alive": keep_alive,
                          "options": {"num_predict": 2}});
        let (status, answer) = server.post("/api/generate", &body);
        assert_eq!(status, 200, "{answer}");
        answer
    };
    // keep_alive 0: out of memory once the answer is given.
    generate(json!(0));
    wait_for_sleep(&server);
    assert_eq!(ps_expiry(&server), None, "asleep: not listed");
    // A duration wakes it and sets when it leaves.
    generate(json!("10m"));
    assert!(!is_sleeping(&server));
    let listed = poll_until(Duration::from_secs(10), || {
        ps_expiry(&server).is_some_and(|at| at.abs_diff(now() + 600) <= 5)
    });
    assert!(
        listed,
        "expires_at not 10 minutes on: {:?}",
        ps_expiry(&server)
    );
    // Nothing to generate and keep_alive 0: Ollama's unload.
    let (status, answer) = server.post(
        "/api/chat",
        &json!({"messages": [], "keep_alive": 0, "stream": false}),
    );
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["done_reason"], json!("unload"), "{answer}");
    wait_for_sleep(&server);
    // Nothing to generate otherwise: Ollama's load, which wakes it.
    let (status, answer) = server.post("/api/chat", &json!({"messages": [], "stream": false}));
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["done_reason"], json!("load"), "{answer}");
    assert!(!is_sleeping(&server));
    // A malformed keep_alive is Ollama's 400.
    let (status, answer) = server.post(
        "/api/generate",
        &json!({"prompt": "Hi", "keep_alive": "soon", "stream": false}),
    );
    assert_eq!(status, 400, "{answer}");
}

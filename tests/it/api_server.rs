//! End-to-end tests of `shepherd --server`: the real binary, in front of the
//! real SmolLM2 model or a fake OpenAI upstream, driven by curl and by the
//! official `openai` Python package.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Value};

use crate::fake_openai::{chunk, text_stream, tool_call_stream, Canned, FakeOpenAi};
use crate::harness::{poll_until, Sandbox};

/// The model the tests use: `SHEPHERD_TEST_MODEL` (set by `make test`), else the `make model` cache.
pub(crate) fn test_model() -> PathBuf {
    let path = std::env::var_os("SHEPHERD_TEST_MODEL").map_or_else(
        || {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(".cache/shepherd/models/SmolLM2-135M-Instruct.Q4_1.gguf")
        },
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "test model {} is missing: run `make model`",
        path.display()
    );
    path
}

/// A running `shepherd --server`, killed on drop.
pub(crate) struct ApiServer {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
    _sandbox: Sandbox,
}

impl ApiServer {
    fn start(args: &[&str]) -> ApiServer {
        ApiServer::start_in(args, &[])
    }

    /// A server started with `args` and these environment variables set.
    fn start_in(args: &[&str], env: &[(&str, &str)]) -> ApiServer {
        let sandbox = Sandbox::new("apiserver");
        let mut all = vec!["--server", "--port", "0"];
        if args.contains(&"--use-tools") && !args.iter().any(|a| a.starts_with("--auth-token")) {
            all.extend_from_slice(&["--auth-token", crate::harness::TOKEN]);
        }
        all.extend_from_slice(args);
        let mut command = sandbox.command_of(env!("CARGO_BIN_EXE_shepherd"), &all);
        let mut child = command
            .envs(env.iter().copied())
            .spawn()
            .expect("spawn shepherd");
        let (address, log) = crate::harness::wait_listening(&mut child);
        let addr = address.trim_start_matches("http://").to_string();
        let server = ApiServer {
            child,
            base: format!("http://{addr}"),
            log,
            _sandbox: sandbox,
        };
        let ready = poll_until(Duration::from_secs(60), || server.get("/health").0 == 200);
        assert!(ready, "never healthy; log: {}", server.log());
        server
    }

    fn with_fake(fake_url: &str, extra: &[&str]) -> ApiServer {
        let mut args = vec!["--backend", "openai", "--api-base", fake_url, "-m", "test"];
        args.extend_from_slice(extra);
        ApiServer::start(&args)
    }

    pub(crate) fn with_model(extra: &[&str]) -> ApiServer {
        ApiServer::with_gguf(&test_model(), extra)
    }

    /// A server on the GGUF file `model`, with a short system prompt configured.
    pub(crate) fn with_gguf(model: &std::path::Path, extra: &[&str]) -> ApiServer {
        let mut args = vec!["--system-prompt", "You are a helpful assistant."];
        args.extend_from_slice(extra);
        ApiServer::on_gguf(model, &args)
    }

    /// A server on the test model with no system prompt configured.
    pub(crate) fn with_model_unprompted(extra: &[&str]) -> ApiServer {
        ApiServer::on_gguf(&test_model(), extra)
    }

    /// A server on the test model with these environment variables set.
    pub(crate) fn with_model_env(extra: &[&str], env: &[(&str, &str)]) -> ApiServer {
        ApiServer::on_gguf_in(&test_model(), extra, env)
    }

    fn on_gguf(model: &std::path::Path, extra: &[&str]) -> ApiServer {
        ApiServer::on_gguf_in(model, extra, &[])
    }

    fn on_gguf_in(model: &std::path::Path, extra: &[&str], env: &[(&str, &str)]) -> ApiServer {
        let model = model.to_str().expect("UTF-8 model path").to_string();
        let mut args = vec![
            "--backend",
            "llamacpp",
            "-m",
            &model,
            "--threads",
            crate::harness::MODEL_THREADS,
        ];
        args.extend_from_slice(extra);
        ApiServer::start_in(&args, env)
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// The server's models directory (`models_dir` unset: the data directory's
    /// `models` in its sandbox's HOME), where `/api/pull` writes.
    pub(crate) fn models_dir(&self) -> PathBuf {
        self._sandbox
            .root
            .path()
            .join("home/.local/share/shepherd/models")
    }

    /// The server process's id.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub(crate) fn get(&self, path: &str) -> (u16, String) {
        match agent().get(&self.url(path)).call() {
            Ok(response) => {
                let status = response.status().as_u16();
                (
                    status,
                    response.into_body().read_to_string().unwrap_or_default(),
                )
            }
            Err(_) => (0, String::new()),
        }
    }

    pub(crate) fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let response = agent()
            .post(&self.url(path))
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .expect("post");
        let status = response.status().as_u16();
        let text = response.into_body().read_to_string().expect("body");
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    /// A Prometheus sample's value.
    fn metric(&self, name: &str) -> f64 {
        let (_, text) = self.get("/metrics");
        text.lines()
            .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no metric {name} in {text}"))
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    crate::harness::http_agent(Duration::from_secs(120))
}

/// curl's answer: status, headers (lower-cased names) and body.
pub(crate) struct Curl {
    pub(crate) status: u16,
    pub(crate) headers: String,
    pub(crate) body: String,
}

impl Curl {
    pub(crate) fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.body))
    }
}

pub(crate) fn have_curl() -> bool {
    Command::new("curl").arg("--version").output().is_ok()
}

/// `curl -sS -i -X POST url -d body` (and extra arguments).
pub(crate) fn curl_post(url: &str, body: &str, extra: &[&str]) -> Curl {
    let output = Command::new("curl")
        .args([
            "-sS",
            "-i",
            "--max-time",
            "120",
            "-H",
            "Content-Type: application/json",
        ])
        .args(extra)
        .args(["--data-binary", body, url])
        .output()
        .expect("run curl");
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Curl {
        status,
        headers: head.to_ascii_lowercase(),
        body: body.to_string(),
    }
}

/// The `data:` payloads of an SSE body, with their `event:` names.
pub(crate) fn sse_events(body: &str) -> Vec<(String, String)> {
    let mut events = Vec::new();
    let mut name = String::new();
    for line in body.lines() {
        if let Some(n) = line.strip_prefix("event: ") {
            name = n.to_string();
        } else if let Some(data) = line.strip_prefix("data: ") {
            events.push((std::mem::take(&mut name), data.to_string()));
        }
    }
    events
}

fn user(text: &str) -> Value {
    json!([{"role": "user", "content": text}])
}

#[test]
fn every_invalid_field_is_a_400_json_error_and_nothing_reaches_the_backend() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed (make test installs it)");
        return;
    }
    let fake = FakeOpenAi::start(vec![]);
    let server = ApiServer::with_fake(&fake.base_url, &[]);
    let url = server.url("/v1/chat/completions");
    let cases: Vec<(String, &str)> = vec![
        ("{\"messages\": [".into(), ""),
        ("[]".into(), ""),
        (json!({}).to_string(), "messages"),
        (json!({"messages": null}).to_string(), "messages"),
        (json!({"messages": "hi"}).to_string(), "messages"),
        (json!({"messages": [123]}).to_string(), "messages[0]"),
        (json!({"messages": [{}]}).to_string(), "messages[0].role"),
        (json!({"messages": [{"role": "king", "content": "x"}]}).to_string(), "messages[0].role"),
        (json!({"messages": [{"role": "user", "content": {"a": 1}}]}).to_string(), "messages[0].content"),
        (json!({"messages": user("x"), "max_tokens": -5}).to_string(), "max_tokens"),
        (json!({"messages": user("x"), "max_tokens": 99_999_999_999_u64}).to_string(), "max_tokens"),
        (json!({"messages": user("x"), "max_completion_tokens": 0}).to_string(), "max_completion_tokens"),
        ("{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}], \"temperature\": NaN}".into(), ""),
        (json!({"messages": user("x"), "temperature": 1e300}).to_string(), "temperature"),
        (json!({"messages": user("x"), "temperature": "0.5"}).to_string(), "temperature"),
        (json!({"messages": user("x"), "top_p": -0.1}).to_string(), "top_p"),
        (json!({"messages": user("x"), "top_k": -1}).to_string(), "top_k"),
        (json!({"messages": user("x"), "min_p": 2}).to_string(), "min_p"),
        (json!({"messages": user("x"), "repeat_last_n": -2}).to_string(), "repeat_last_n"),
        (json!({"messages": user("x"), "seed": -3}).to_string(), "seed"),
        (json!({"messages": user("x"), "n": 17}).to_string(), "n"),
        (json!({"messages": user("x"), "logit_bias": {"5": 1}}).to_string(), "logit_bias"),
        (json!({"messages": user("x"), "stop": 7}).to_string(), "stop"),
        (json!({"messages": user("x"), "stream": 1}).to_string(), "stream"),
        (json!({"messages": user("x"), "stream_options": {"include_usage": true}}).to_string(), "stream_options"),
        (json!({"messages": user("x"), "tools": [{"type": "function", "function": {}}]}).to_string(), "tools[0].function.name"),
        (json!({"messages": user("x"), "tool_choice": {"type": "function", "function": {"name": "nope"}}}).to_string(), "tool_choice"),
        (json!({"messages": user("x"), "response_format": {"type": "json_schema"}}).to_string(), "response_format.json_schema"),
        (json!({"messages": user("x"), "logprobs": true}).to_string(), "logprobs"),
        (json!({"messages": user("x"), "use_tools": true}).to_string(), "use_tools"),
    ];
    for (body, param) in &cases {
        let answer = curl_post(&url, body, &[]);
        assert_eq!(answer.status, 400, "{body}: {}", answer.body);
        let error = &answer.json()["error"];
        assert_eq!(error["type"], "invalid_request_error", "{body}");
        assert!(error["message"].as_str().is_some_and(|m| !m.is_empty()));
        let expected = if param.is_empty() {
            Value::Null
        } else {
            json!(param)
        };
        assert_eq!(error["param"], expected, "{body}: {error}");
    }
    let anthropic = curl_post(
        &server.url("/v1/messages"),
        &json!({"messages": user("x")}).to_string(),
        &[],
    );
    assert_eq!(anthropic.status, 400);
    assert_eq!(anthropic.json()["error"]["type"], "invalid_request_error");
    assert_eq!(server.get("/health").0, 200, "still healthy");
    assert!(
        fake.requests().is_empty(),
        "no invalid request reached the upstream"
    );
    assert_eq!(
        server.metric("shepherd_requests_rejected_total{reason=\"invalid\"}"),
        (cases.len() + 1) as f64
    );
}

#[test]
fn an_api_backend_is_proxied_and_upstream_errors_are_mapped() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["Hello", " there"])),
        Canned::json(
            400,
            json!({"error": {"message": "bad thing", "type": "invalid_request_error", "code": "bad"}}),
        ),
    ]);
    let server = ApiServer::with_fake(&fake.base_url, &["--max-tokens", "100"]);
    let (status, body) = server.post(
        "/v1/chat/completions",
        &json!({"model": "gpt-x", "messages": user("hi"), "temperature": 0.5, "seed": 7,
                "response_format": {"type": "json_object"}}),
    );
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "gpt-x", "the model is echoed");
    assert!(body["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(body["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(body["choices"][0]["message"]["content"], "Hello there");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let sent = &fake.requests()[0].body;
    assert_eq!(sent["temperature"], json!(0.5));
    assert_eq!(sent["seed"], 7);
    assert_eq!(sent["response_format"], json!({"type": "json_object"}));
    let (status, body) = server.post("/v1/chat/completions", &json!({"messages": user("hi")}));
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("bad thing")),
        "{body}"
    );
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["id"], "test");
    assert_eq!(server.get("/v1/models/test").0, 200);
    assert_eq!(server.get("/v1/models/other").0, 404);
}

/// A fake OpenAI upstream that sends one chunk, then holds every stream open
/// until the test releases them all, recording how many requests arrived.
struct HeldFake {
    base_url: String,
    arrived: Arc<Mutex<usize>>,
    release: Option<Sender<()>>,
}

impl HeldFake {
    fn start() -> HeldFake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let arrived = Arc::new(Mutex::new(0));
        let (release, gate) = crossbeam_channel::unbounded::<()>();
        let counter = arrived.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().map_while(Result::ok) {
                let (counter, gate) = (counter.clone(), gate.clone());
                std::thread::spawn(move || hold_one(stream, &counter, &gate));
            }
        });
        HeldFake {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            arrived,
            release: Some(release),
        }
    }

    fn arrived(&self) -> usize {
        *self.arrived.lock().unwrap()
    }

    fn release(&mut self) {
        self.release.take();
    }
}

fn hold_one(stream: TcpStream, arrived: &Mutex<usize>, gate: &Receiver<()>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone"));
    let mut length = 0;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
            length = v.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    *arrived.lock().unwrap() += 1;
    let mut stream = stream;
    let head = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    let first = chunk(json!({"role": "assistant", "content": "held"}), None);
    let last = chunk(json!({}), Some("stop"));
    let _ = (|| -> std::io::Result<()> {
        stream.write_all(head.as_bytes())?;
        send_chunk(&mut stream, &format!("data: {first}\n\n"))?;
        // Blocks until the test drops the sender.
        let _ = gate.recv();
        send_chunk(&mut stream, &format!("data: {last}\n\ndata: [DONE]\n\n"))?;
        send_chunk(&mut stream, "")
    })();
}

fn send_chunk(stream: &mut TcpStream, data: &str) -> std::io::Result<()> {
    write!(stream, "{:x}\r\n{data}\r\n", data.len())?;
    stream.flush()
}

#[test]
fn a_full_queue_answers_503_with_retry_after_and_a_gone_client_frees_its_entry() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed (make test installs it)");
        return;
    }
    let mut fake = HeldFake::start();
    let server = ApiServer::with_fake(&fake.base_url, &["--queue-size", "1"]);
    let slots = server.metric("shepherd_slots") as usize;
    let body = json!({"messages": user("hi"), "stream": true}).to_string();
    let url = server.url("/v1/chat/completions");
    let running: Vec<_> = (0..slots)
        .map(|_| {
            let (url, body) = (url.clone(), body.clone());
            std::thread::spawn(move || curl_post(&url, &body, &["-N"]))
        })
        .collect();
    assert!(
        poll_until(Duration::from_secs(30), || fake.arrived() == slots),
        "every slot is busy upstream"
    );
    // A raw client takes the one queue entry, then hangs up.
    let queued = raw_post(&server, "/v1/chat/completions", &body);
    assert!(poll_until(Duration::from_secs(10), || server
        .metric("shepherd_queue_depth")
        == 1.0));
    let refused = curl_post(&url, &body, &[]);
    assert_eq!(refused.status, 503, "{}", refused.body);
    assert!(
        refused.headers.contains("retry-after: 1"),
        "{}",
        refused.headers
    );
    assert_eq!(refused.json()["error"]["type"], "server_busy");
    drop(queued);
    assert!(
        poll_until(Duration::from_secs(5), || server
            .metric("shepherd_queue_depth")
            == 0.0),
        "the gone client's queue entry is freed"
    );
    fake.release();
    for handle in running {
        let answer = handle.join().unwrap();
        assert_eq!(answer.status, 200);
        let events = sse_events(&answer.body);
        let text: String = events
            .iter()
            .filter_map(|(_, data)| serde_json::from_str::<Value>(data).ok())
            .filter_map(|c| {
                c["choices"][0]["delta"]["content"]
                    .as_str()
                    .map(String::from)
            })
            .collect();
        assert_eq!(text, "held", "running streams were not disturbed");
        assert_eq!(events.last().unwrap().1, "[DONE]");
    }
    assert_eq!(
        fake.arrived(),
        slots,
        "the cancelled entry never reached upstream"
    );
}

#[test]
fn messages_stream_in_anthropic_shape() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed (make test installs it)");
        return;
    }
    let mut chunks = text_stream(&["Hi", " you"]);
    chunks.push(crate::fake_openai::usage_chunk(12, 2));
    let fake = FakeOpenAi::start(vec![Canned::sse(&chunks)]);
    let server = ApiServer::with_fake(&fake.base_url, &[]);
    let body = json!({"model": "claude-x", "max_tokens": 64, "stream": true,
                      "system": "be kind", "messages": user("hello")});
    let answer = curl_post(&server.url("/v1/messages"), &body.to_string(), &["-N"]);
    assert_eq!(answer.status, 200, "{}", answer.body);
    let events = sse_events(&answer.body);
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "message_start",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    let data: Vec<Value> = events
        .iter()
        .map(|(_, d)| serde_json::from_str(d).unwrap())
        .collect();
    assert_eq!(data[0]["message"]["model"], "claude-x");
    assert!(data[0]["message"]["id"]
        .as_str()
        .unwrap()
        .starts_with("msg_"));
    assert_eq!(
        data[2]["delta"],
        json!({"type": "text_delta", "text": "Hi"})
    );
    assert_eq!(data[5]["delta"]["stop_reason"], "end_turn");
    // The counts come at the end (the start went out before the prompt was read).
    assert_eq!(
        data[5]["usage"],
        json!({"input_tokens": 12, "output_tokens": 2, "cache_read_input_tokens": 0})
    );
    let sent = &fake.requests()[0].body;
    assert_eq!(
        sent["messages"][0],
        json!({"role": "system", "content": "be kind"})
    );
    assert_eq!(sent["max_tokens"], 64);
}

#[test]
fn context_overflow_is_a_400_before_any_output() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed (make test installs it)");
        return;
    }
    let server = ApiServer::with_model(&["--context-size", "256"]);
    let long = "tell me about the sea and the sky and the land. ".repeat(60);
    let url = server.url("/v1/chat/completions");
    for stream in [false, true] {
        let body = json!({"messages": user(&long), "stream": stream, "max_tokens": 16});
        let answer = curl_post(&url, &body.to_string(), &[]);
        assert_eq!(answer.status, 400, "stream {stream}: {}", answer.body);
        assert!(
            answer.headers.contains("application/json"),
            "{}",
            answer.headers
        );
        let error = &answer.json()["error"];
        assert_eq!(error["code"], "context_length_exceeded");
        assert_eq!(error["type"], "invalid_request_error");
    }
    let (status, models) = server.get("/v1/models");
    assert_eq!(status, 200);
    let models: Value = serde_json::from_str(&models).unwrap();
    assert_eq!(models["data"][0]["max_model_len"], 256);
    assert_eq!(server.get("/health").0, 200);
}

/// The CPU time (user and system, in clock ticks) of the threads of `pid`
/// named `name`; 0 where /proc cannot tell.
fn thread_cpu(pid: u32, name: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    tasks
        .flatten()
        .filter(|task| {
            std::fs::read_to_string(task.path().join("comm")).is_ok_and(|comm| comm.trim() == name)
        })
        .filter_map(|task| std::fs::read_to_string(task.path().join("stat")).ok())
        .map(|stat| {
            // After the name in parentheses: state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let tick = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok());
            tick(11).unwrap_or(0) + tick(12).unwrap_or(0)
        })
        .sum()
}

/// SIGTERM while the generation thread is deep inside llama.cpp (tokenizing a
/// 9 MB prompt, which outlasts the 2 s a server waits for cancelled work) ends
/// the process with 143, never with SIGSEGV: the exit runs no C++ static
/// destructors under it. It did: llama.cpp's Unicode tables were freed under
/// the tokenizer's byte-pair split, and such an exit crashed.
#[test]
fn sigterm_while_llama_cpp_tokenizes_ends_with_143_not_a_crash() {
    let words: String = (0..320_000)
        .map(|i| format!("alpha{i} beta gamma, delta! "))
        .collect();
    let body = json!({"messages": user(&words), "max_tokens": 1}).to_string();
    let post = |server: &ApiServer| {
        let url = server.url("/v1/chat/completions");
        let sent = body.clone();
        std::thread::spawn(move || {
            let _ = agent()
                .post(&url)
                .header("Content-Type", "application/json")
                .send(sent);
        })
    };
    // What the whole prompt costs the generation thread here (it is refused:
    // far over the context), so that each round below signals a quarter of the
    // way in, on a fast machine or a slow one: within the pre-tokenizer's
    // split, which reads the Unicode tables for every character (measured:
    // from about a tenth to a half of the whole).
    let whole = {
        let server = ApiServer::with_model_unprompted(&["--context-size", "1024"]);
        let idle = thread_cpu(server.child.id(), "llama-gen");
        post(&server).join().expect("the request");
        thread_cpu(server.child.id(), "llama-gen") - idle
    };
    assert!(
        whole >= 20,
        "tokenizing took {whole} ticks: too short to interrupt"
    );
    for round in 0..3 {
        let mut server = ApiServer::with_model_unprompted(&["--context-size", "1024"]);
        let pid = server.child.id();
        let idle = thread_cpu(pid, "llama-gen");
        let client = post(&server);
        let inside = poll_until(Duration::from_secs(60), || {
            thread_cpu(pid, "llama-gen") >= idle + whole / 4
        });
        assert!(inside, "round {round}: the prompt never reached llama.cpp");
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill -TERM");
        let mut status = None;
        let ended = poll_until(Duration::from_secs(30), || {
            status = server.child.try_wait().ok().flatten();
            status.is_some()
        });
        assert!(ended, "round {round}: no exit after SIGTERM");
        let status = status.expect("an exit status");
        assert_eq!(
            status.code(),
            Some(143),
            "round {round}: {status:?}; log: {}",
            server.log()
        );
        let _ = client.join();
    }
}

#[test]
fn a_non_loopback_bind_without_a_token_is_refused() {
    let sandbox = Sandbox::new("apiserver-refuse");
    let run = sandbox.run(&["--server", "--host", "0.0.0.0", "--port", "0"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("without an auth token"),
        "{}",
        run.stderr
    );
}

/// Runs `tests/it/SCRIPT` (a client written with the official `openai` or
/// `anthropic` package, each given its base URL and key in its own variables)
/// against `--server` on SmolLM2; it prints "all checks passed" when every check held.
fn run_client_script(script: &str) {
    let Some(python) = std::env::var_os("SHEPHERD_OPENAI_PYTHON") else {
        eprintln!("skipped: SHEPHERD_OPENAI_PYTHON is not set (make test installs the openai package and sets it)");
        return;
    };
    let server = ApiServer::with_model(&["--context-size", "2048", "--auth-token", "t0ken"]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it")
        .join(script);
    let output = Command::new(python)
        .arg(script)
        .env("OPENAI_BASE_URL", server.url("/v1"))
        .env("OPENAI_API_KEY", "t0ken")
        .env("ANTHROPIC_BASE_URL", server.url(""))
        .env("ANTHROPIC_API_KEY", "t0ken")
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "client failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
    assert!(stdout.contains("all checks passed"), "{stdout}");
}

#[test]
fn the_official_openai_client_works_against_smollm2() {
    run_client_script("openai_client.py");
}

#[test]
fn reasoning_streams_as_reasoning_content_and_tool_calls_come_back_whole() {
    let reasoning = vec![
        chunk(
            json!({"role": "assistant", "reasoning_content": "think"}),
            None,
        ),
        chunk(json!({"content": "ok"}), None),
        chunk(json!({}), Some("stop")),
    ];
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&reasoning),
        Canned::sse(&tool_call_stream("call_9", "lookup", json!({"q": "x"}))),
    ]);
    let server = ApiServer::with_fake(&fake.base_url, &[]);
    let body = json!({"messages": user("hi"), "stream": true});
    let answer = curl_post(
        &server.url("/v1/chat/completions"),
        &body.to_string(),
        &["-N"],
    );
    let chunks: Vec<Value> = sse_events(&answer.body)
        .iter()
        .filter_map(|(_, d)| serde_json::from_str(d).ok())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let deltas: Vec<&Value> = chunks.iter().map(|c| &c["choices"][0]["delta"]).collect();
    assert!(
        deltas.contains(&&json!({"reasoning_content": "think"})),
        "{deltas:?}"
    );
    assert!(deltas.contains(&&json!({"content": "ok"})), "{deltas:?}");
    let tools = json!([{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]);
    let (status, whole) = server.post(
        "/v1/chat/completions",
        &json!({"messages": user("find x"), "tools": tools, "tool_choice": "required"}),
    );
    assert_eq!(status, 200, "{whole}");
    let choice = &whole["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["id"], "call_9");
    assert_eq!(call["function"]["name"], "lookup");
    assert_eq!(call["function"]["arguments"], "{\"q\":\"x\"}");
    let sent = &fake.requests()[1].body;
    assert_eq!(sent["tool_choice"], "required");
    assert_eq!(sent["tools"][0]["function"]["name"], "lookup");
}

#[test]
fn use_tools_runs_shepherds_tools_and_streams_them_as_content() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream("call_1", "get_time", json!({}))),
        Canned::sse(&text_stream(&["It is late."])),
    ]);
    let server = ApiServer::with_fake(&fake.base_url, &["--use-tools"]);
    let (status, body) = server.post(
        "/v1/chat/completions",
        &json!({"messages": user("what time is it?")}),
    );
    assert_eq!(status, 200, "{body}");
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.starts_with("get_time({})\n"), "{content}");
    assert!(content.ends_with("It is late."), "{content}");
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    let second = &fake.requests()[1].body;
    crate::fake_openai::assert_tool_results_answer_calls(second);
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages.last().unwrap()["role"], "tool");
    assert_eq!(messages.last().unwrap()["tool_call_id"], "call_1");
}

/// A POST of `body` to `path` on a raw connection, which the caller can hang up.
fn raw_post(server: &ApiServer, path: &str, body: &str) -> TcpStream {
    let mut client = TcpStream::connect(server.base.trim_start_matches("http://")).unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    client.write_all(request.as_bytes()).unwrap();
    client
}

/// `client`, whose request is running, hangs up: its slot is freed within
/// seconds and the request counted as cancelled.
fn hang_up_frees_the_slot(server: &ApiServer, client: TcpStream) {
    drop(client);
    assert!(
        poll_until(Duration::from_secs(5), || server
            .metric("shepherd_requests_running")
            == 0.0),
        "the slot is freed"
    );
    assert_eq!(server.metric("shepherd_requests_cancelled_total"), 1.0);
}

#[test]
fn a_streaming_client_that_hangs_up_frees_its_slot() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let body = json!({"messages": user("Write a very long story about a dragon."),
                      "stream": true, "max_tokens": 1500, "temperature": 0.8})
    .to_string();
    let mut client = raw_post(&server, "/v1/chat/completions", &body);
    let mut first = [0u8; 256];
    let n = client.read(&mut first).unwrap();
    assert!(String::from_utf8_lossy(&first[..n]).starts_with("HTTP/1.1 200"));
    assert_eq!(server.metric("shepherd_requests_running"), 1.0);
    hang_up_frees_the_slot(&server, client);
    let (status, answer) = server.post(
        "/v1/chat/completions",
        &json!({"messages": user("Say hi."), "max_tokens": 8, "temperature": 0}),
    );
    assert_eq!(status, 200, "{answer}");
}

/// A client of a whole (not streamed) answer that hangs up while tokens keep
/// coming frees its slot at once: it is looked at while the answer runs, not
/// only when the model goes quiet (llama-server's `test_cancel_request`).
#[test]
fn a_client_of_a_whole_answer_that_hangs_up_mid_answer_frees_its_slot() {
    let server = ApiServer::with_model(&["--context-size", "4096"]);
    // About 3,000 tokens: half a minute or more on this model, were it not stopped.
    let body = json!({"prompt": "I believe the meaning of life is", "n_predict": 3000,
                      "ignore_eos": true, "temperature": 0})
    .to_string();
    let client = raw_post(&server, "/completion", &body);
    let decoding = || {
        let (status, slots) = server.get("/slots");
        let slots: Value = serde_json::from_str(&slots).unwrap_or_default();
        status == 200 && slots[0]["n_decoded"].as_u64().unwrap_or(0) >= 5
    };
    assert!(poll_until(Duration::from_secs(30), decoding), "decoding");
    hang_up_frees_the_slot(&server, client);
}

#[test]
fn with_a_token_every_route_but_health_needs_it() {
    if !have_curl() {
        eprintln!("skipped: curl is not installed (make test installs it)");
        return;
    }
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["fine"]))]);
    let server = ApiServer::with_fake(&fake.base_url, &["--auth-token", "s3cret"]);
    let get = |path: &str, extra: &[&str]| {
        let output = Command::new("curl")
            .args(["-s", "-o", "/dev/null", "-w", "%{http_code}"])
            .args(extra)
            .arg(server.url(path))
            .output()
            .expect("curl");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    for path in ["/v1/models", "/v1/models/test", "/metrics"] {
        assert_eq!(get(path, &[]), "401", "{path}");
        assert_eq!(
            get(path, &["-H", "Authorization: Bearer wrong"]),
            "401",
            "{path}"
        );
        assert_eq!(
            get(path, &["-H", "Authorization: Bearer s3cret"]),
            "200",
            "{path}"
        );
    }
    assert_eq!(get("/health", &[]), "200");
    let body = json!({"messages": user("hi"), "max_tokens": 5, "model": "m"}).to_string();
    for path in ["/v1/chat/completions", "/v1/messages"] {
        let refused = curl_post(&server.url(path), &body, &[]);
        assert_eq!(refused.status, 401, "{path}");
    }
    let allowed = curl_post(
        &server.url("/v1/messages"),
        &body,
        &["-H", "x-api-key: s3cret"],
    );
    assert_eq!(allowed.status, 200, "{}", allowed.body);
    assert_eq!(allowed.json()["content"][0]["text"], "fine");
    assert_eq!(
        fake.requests().len(),
        1,
        "only the authorised request reached upstream"
    );
}

#[test]
fn a_request_that_extends_the_previous_one_decodes_only_the_new_tokens() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let mut messages = vec![json!({"role": "user", "content": "Name three colors."})];
    let ask = |messages: &Vec<Value>| {
        let (status, body) = server.post(
            "/v1/chat/completions",
            &json!({"messages": messages, "max_tokens": 24, "temperature": 0}),
        );
        assert_eq!(status, 200, "{body}");
        body
    };
    let first = ask(&messages);
    let first_prompt = first["usage"]["prompt_tokens"].as_u64().unwrap();
    assert_eq!(first["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
    messages.push(json!({"role": "assistant",
                         "content": first["choices"][0]["message"]["content"]}));
    messages.push(json!({"role": "user", "content": "And three fruits?"}));
    let second = ask(&messages);
    let prompt = second["usage"]["prompt_tokens"].as_u64().unwrap();
    let cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        cached >= first_prompt,
        "the first request's {first_prompt} prompt tokens are reused, got {cached} of {prompt}"
    );
    assert!(cached < prompt);
    assert_eq!(
        server.metric("shepherd_prompt_tokens_reused_total"),
        cached as f64
    );
    assert_eq!(
        server.metric("shepherd_prompt_tokens_decoded_total"),
        (first_prompt + prompt - cached) as f64
    );
}

#[test]
fn parallel_slots_on_the_in_process_model_serve_requests_together() {
    let server = ApiServer::with_model(&[
        "--context-size",
        "2048",
        "--parallel",
        "2",
        "--queue-size",
        "0",
    ]);
    assert_eq!(server.metric("shepherd_slots"), 2.0);
    assert_eq!(server.metric("shepherd_queue_capacity"), 0.0);
    let url = server.url("/v1/chat/completions");
    let clients: Vec<_> = ["Name a color.", "Name a fruit."]
        .iter()
        .map(|question| {
            let body = json!({"messages": user(question), "max_tokens": 12, "temperature": 0});
            let url = url.clone();
            std::thread::spawn(move || {
                let response = agent()
                    .post(&url)
                    .header("Content-Type", "application/json")
                    .send(body.to_string())
                    .expect("post");
                let status = response.status().as_u16();
                let text = response.into_body().read_to_string().unwrap_or_default();
                (status, text)
            })
        })
        .collect();
    for client in clients {
        let (status, text) = client.join().unwrap();
        assert_eq!(status, 200, "{text}");
        let body: Value = serde_json::from_str(&text).unwrap();
        assert!(body["usage"]["completion_tokens"].as_u64().unwrap() > 0);
    }
    assert_eq!(
        server.metric("shepherd_requests_rejected_total{reason=\"busy\"}"),
        0.0
    );
}

#[test]
fn use_tools_obeys_the_approval_rules_and_mounts_the_agent_endpoints() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_w",
            "write",
            json!({"file_path": "pwned.txt", "content": "x"}),
        )),
        Canned::sse(&text_stream(&["I could not write it."])),
    ]);
    let server = ApiServer::with_fake(&fake.base_url, &["--use-tools"]);
    let (status, body) = server.post(
        "/v1/chat/completions",
        &json!({"messages": user("write a file")}),
    );
    assert_eq!(status, 200, "{body}");
    // A server has no one to ask: a side-effecting call the rules do not allow is
    // refused, and the model is told so in the tool result.
    assert!(!server._sandbox.work().join("pwned.txt").exists());
    let second = &fake.requests()[1].body;
    let result = second["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(result["tool_call_id"], "call_w");
    let text = result["content"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        text.contains("was not run") && text.contains("--approve write"),
        "{result}"
    );
    // Seed 002's endpoints are mounted beside the OpenAI routes.
    let (status, profiles) = server.get("/v1/profiles");
    assert_eq!(status, 200, "{profiles}");
    assert!(profiles.contains("\"default\""), "{profiles}");
    let (status, stopped) = server.post("/v1/emergency-stop", &json!({}));
    assert_eq!(status, 200, "{stopped}");
}

#[test]
fn the_official_openai_client_completes_text_and_embeds_against_smollm2() {
    run_client_script("openai_routes.py");
}

#[test]
fn the_official_openai_client_speaks_the_responses_api_and_gets_its_schemas_kept() {
    run_client_script("responses_client.py");
}

#[test]
fn stored_responses_past_the_count_are_evicted_oldest_first() {
    let server = ApiServer::with_model(&["--context-size", "2048", "--responses-store", "1"]);
    let ask = |body: Value| {
        let (status, answer) = server.post("/v1/responses", &body);
        assert_eq!(status, 200, "{answer}");
        answer["id"].as_str().expect("an id").to_string()
    };
    let first = ask(json!({"input": "Say one.", "max_output_tokens": 2}));
    let (status, kept) = server.get(&format!("/v1/responses/{first}"));
    assert_eq!(status, 200, "{kept}");
    // A second answer, chained to the first, takes the one place.
    let second = ask(json!({"input": "Say two.", "max_output_tokens": 2,
                            "previous_response_id": first}));
    let (status, gone) = server.get(&format!("/v1/responses/{first}"));
    assert_eq!(status, 404, "{gone}");
    let (status, refused) = server.post(
        "/v1/responses",
        &json!({"input": "Say three.", "previous_response_id": first}),
    );
    assert_eq!(status, 404, "{refused}");
    assert_eq!(
        refused,
        json!({"error": {
            "message": format!("Previous response with id '{first}' not found."),
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }})
    );
    let (status, kept) = server.get(&format!("/responses/{second}"));
    assert_eq!(status, 200, "{kept}");
    let kept: Value = serde_json::from_str(&kept).unwrap();
    assert_eq!(kept["previous_response_id"], json!(first), "{kept}");
    // `--responses-store 0` keeps none.
    let none = ApiServer::with_model(&["--context-size", "2048", "--responses-store", "0"]);
    let (status, answer) = none.post(
        "/v1/responses",
        &json!({"input": "Hi.", "max_output_tokens": 2}),
    );
    assert_eq!((status, &answer["store"]), (200, &json!(false)), "{answer}");
    let id = answer["id"].as_str().unwrap();
    assert_eq!(none.get(&format!("/v1/responses/{id}")).0, 404);
}

#[test]
fn the_official_anthropic_client_sees_the_stop_sequence_that_ended_the_message() {
    run_client_script("anthropic_routes.py");
}

#[test]
fn count_tokens_counts_what_the_model_will_read() {
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let messages = json!([{"role": "user", "content": "Name three colours of the sea."}]);
    let (status, counted) = server.post(
        "/v1/messages/count_tokens",
        &json!({"model": "m", "messages": messages}),
    );
    assert_eq!(status, 200, "{counted}");
    let counted = counted["input_tokens"].as_u64().expect("input_tokens");
    // The same prompt, generated: what the model read is what was counted.
    let request = json!({"model": "m", "max_tokens": 4, "messages": messages});
    let (status, answer) = server.post("/v1/messages", &request);
    assert_eq!(status, 200, "{answer}");
    let usage = &answer["usage"];
    let read = usage["input_tokens"].as_u64().unwrap()
        + usage["cache_read_input_tokens"].as_u64().unwrap();
    assert_eq!(counted, read, "{answer}");
    // Tools are part of the prompt; a bad body is a 400 in Anthropic's shape.
    let tool = json!({"name": "weather", "description": "The weather in a city",
                      "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}});
    let (_, with_tool) = server.post(
        "/v1/messages/count_tokens",
        &json!({"model": "m", "messages": messages, "tools": [tool]}),
    );
    assert!(
        with_tool["input_tokens"].as_u64().unwrap() > counted,
        "{with_tool}"
    );
    let (status, bad) = server.post("/v1/messages/count_tokens", &json!({"model": "m"}));
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["type"], "error", "{bad}");
}

#[test]
fn tokenize_detokenize_and_props_answer_in_llama_servers_shapes() {
    let server = ApiServer::with_model(&["--context-size", "2048", "--parallel", "2"]);
    let text = "Hello world, <|im_start|>user";
    let (status, plain) = server.post("/tokenize", &json!({"content": text}));
    assert_eq!(status, 200, "{plain}");
    let ids: Vec<i64> = plain["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_i64().expect("an id"))
        .collect();
    assert!(ids.len() >= 4, "{plain}");
    // Special-token markup is parsed: `<|im_start|>` is one token (SmolLM2's id 1).
    assert!(ids.contains(&1), "{plain}");
    let (_, pieces) = server.post("/tokenize", &json!({"content": text, "with_pieces": true}));
    let spelled: String = pieces["tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t["piece"].as_str().expect("a text piece"))
        .collect();
    assert_eq!(spelled, text, "{pieces}");
    assert_eq!(pieces["tokens"][0]["id"], json!(ids[0]));
    let (status, back) = server.post("/detokenize", &json!({"tokens": ids}));
    assert_eq!(
        (status, back["content"].as_str()),
        (200, Some(text)),
        "{back}"
    );

    for (path, body, param) in [
        ("/detokenize", json!({"tokens": [1, 99_999_999]}), "tokens"),
        ("/detokenize", json!({"tokens": [-1]}), "tokens"),
        ("/detokenize", json!({"tokens": "1"}), "tokens"),
        ("/detokenize", json!({}), "tokens"),
        ("/tokenize", json!({}), "content"),
        (
            "/tokenize",
            json!({"content": "a", "with_pieces": "yes"}),
            "with_pieces",
        ),
        (
            "/tokenize",
            json!({"content": "a", "parse_special": false}),
            "parse_special",
        ),
        ("/tokenize", json!({"content": "a", "extra": 1}), "extra"),
        (
            "/v1/embeddings",
            json!({"input": [[1, 99_999_999]]}),
            "input[0]",
        ),
        ("/v1/embeddings", json!({"input": ""}), "input"),
        ("/v1/completions", json!({"prompt": ["a", "b"]}), "prompt"),
    ] {
        let (status, error) = server.post(path, &body);
        assert_eq!(status, 400, "{path} {body}: {error}");
        assert_eq!(
            error["error"]["param"],
            json!(param),
            "{path} {body}: {error}"
        );
    }

    let (status, props) = server.get("/props");
    assert_eq!(status, 200, "{props}");
    let props: Value = serde_json::from_str(&props).expect("JSON");
    assert_eq!(props["total_slots"], json!(2), "{props}");
    assert_eq!(
        props["default_generation_settings"]["n_ctx"],
        json!(1024),
        "{props}"
    );
    let path = props["model_path"].as_str().expect("model_path");
    assert!(path.ends_with(".gguf"), "{props}");
    let template = props["chat_template"].as_str().expect("chat_template");
    assert!(template.contains("<|im_start|>"), "{props}");
    // What llama-server's clients read besides: the name they should send, the
    // weights' type, the model's own end token, what the template can render
    // (SmolLM2's renders system turns, and neither tools nor calls).
    let (_, models) = server.get("/v1/models");
    let models: Value = serde_json::from_str(&models).expect("JSON");
    assert_eq!(props["model_alias"], models["data"][0]["id"], "{props}");
    assert_eq!(props["model_ftype"], json!("Q4_1"), "{props}");
    assert_eq!(props["eos_token"], json!("<|im_end|>"), "{props}");
    assert!(props["bos_token"].is_string(), "{props}");
    let caps = &props["chat_template_caps"];
    assert_eq!(caps["supports_system_role"], json!(true), "{props}");
    assert_eq!(caps["supports_tool_calls"], json!(false), "{props}");
    assert_eq!(
        server.metric("shepherd_requests_total{endpoint=\"tokenize\"}"),
        11.0
    );
    assert_eq!(
        server.metric("shepherd_requests_total{endpoint=\"embeddings\"}"),
        2.0
    );
}

#[test]
fn an_embedding_between_two_chats_leaves_the_answer_unchanged() {
    // One slot: the embedding runs in the very sequence the chat cached.
    let server = ApiServer::with_model(&["--context-size", "2048"]);
    let chat = json!({
        "messages": [{"role": "user", "content": "Name three colours."}],
        "temperature": 0,
        "max_tokens": 16,
    });
    let (status, first) = server.post("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{first}");
    let (status, embedded) = server.post(
        "/v1/embeddings",
        &json!({"input": ["An unrelated sentence about ships.", "And another."]}),
    );
    assert_eq!(status, 200, "{embedded}");
    assert_eq!(
        embedded["data"][1]["embedding"].as_array().map(Vec::len),
        Some(576)
    );
    let (status, second) = server.post("/v1/chat/completions", &chat);
    assert_eq!(status, 200, "{second}");
    assert_eq!(
        second["choices"][0]["message"]["content"], first["choices"][0]["message"]["content"],
        "{first}\n{second}"
    );
    // The embedding cleared the slot, and its mirror with it: nothing stale is reused.
    assert_eq!(
        second["usage"]["prompt_tokens_details"]["cached_tokens"],
        json!(0),
        "{second}"
    );
}

#[test]
fn routes_of_the_in_process_model_answer_501_for_an_api_backend() {
    let fake = FakeOpenAi::start(Vec::new());
    let server = ApiServer::with_fake(&fake.base_url, &[]);
    for (path, body) in [
        ("/v1/completions", json!({"prompt": "Once"})),
        ("/v1/embeddings", json!({"input": "Once"})),
        ("/tokenize", json!({"content": "Once"})),
        ("/detokenize", json!({"tokens": [1]})),
    ] {
        let (status, error) = server.post(path, &body);
        assert_eq!(status, 501, "{path}: {error}");
        assert!(
            error["error"]["message"]
                .as_str()
                .unwrap_or("")
                .contains("in-process model"),
            "{path}: {error}"
        );
    }
    assert_eq!(server.get("/props").0, 501);
    assert_eq!(fake.requests().len(), 0, "nothing reached the backend");
}

//! What a hostile upstream sends: a valid reply that never ends, plain and
//! gzip-encoded. `-e`, `--cliserver` and `--server` must end the turn with an
//! error that names the cap, stay under 256 MB of resident memory, and (the
//! servers) go on answering.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::harness::{http_agent, wait_listening, Sandbox, TOKEN};

/// The most resident memory any mode may reach.
const MAX_RSS_KB: u64 = 256 * 1024;

/// How long a capped turn may take to end.
const DEADLINE: Duration = Duration::from_secs(120);

/// One SSE chunk of about 4 KB of content, repeated for ever.
fn endless_chunk() -> Vec<u8> {
    let piece = "all work and no play makes jack a dull boy. ".repeat(90);
    let chunk = json!({
        "id": "chatcmpl-endless",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": null}],
    });
    format!("data: {chunk}\n\n").into_bytes()
}

/// Repeats one chunk until whoever reads it goes away.
struct Endless {
    chunk: Vec<u8>,
    at: usize,
}

impl Read for Endless {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(self.chunk.len() - self.at);
        buf[..n].copy_from_slice(&self.chunk[self.at..self.at + n]);
        self.at = (self.at + n) % self.chunk.len();
        Ok(n)
    }
}

/// The endless stream through `gzip -1`, as a server that compresses would send it.
struct Gzipped {
    child: Child,
    feeder: Option<JoinHandle<()>>,
}

impl Gzipped {
    fn start() -> Gzipped {
        let mut child = Command::new("gzip")
            .args(["-1", "-c"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("gzip on PATH");
        let mut stdin = child.stdin.take().expect("piped");
        let feeder = std::thread::spawn(move || {
            let mut source = Endless {
                chunk: endless_chunk(),
                at: 0,
            };
            let _ = std::io::copy(&mut source, &mut stdin);
        });
        Gzipped {
            child,
            feeder: Some(feeder),
        }
    }
}

impl Read for Gzipped {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.child.stdout.as_mut().expect("piped").read(buf)
    }
}

impl Drop for Gzipped {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(feeder) = self.feeder.take() {
            let _ = feeder.join();
        }
    }
}

/// An OpenAI-shaped upstream whose chat completions never end; `/models` answers.
struct Upstream {
    base_url: String,
    server: Arc<tiny_http::Server>,
    /// Completion requests seen.
    calls: Arc<AtomicUsize>,
    threads: Vec<JoinHandle<()>>,
}

impl Upstream {
    fn start(gzip: bool) -> Upstream {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
        let port = server.server_addr().to_ip().expect("ip").port();
        let calls = Arc::new(AtomicUsize::new(0));
        // Several workers, so a stream in flight never blocks the next request.
        let threads = (0..4)
            .map(|_| {
                let server = server.clone();
                let calls = calls.clone();
                std::thread::spawn(move || serve(&server, gzip, &calls))
            })
            .collect();
        Upstream {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            server,
            calls,
            threads,
        }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        for _ in &self.threads {
            self.server.unblock();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

fn serve(server: &tiny_http::Server, gzip: bool, calls: &AtomicUsize) {
    for mut request in server.incoming_requests() {
        let _ = std::io::copy(request.as_reader(), &mut std::io::sink());
        if !request.url().ends_with("/chat/completions") {
            let body = json!({"object": "list", "data": [{"id": "test", "object": "model"}]});
            let _ = request.respond(tiny_http::Response::from_string(body.to_string()));
            continue;
        }
        calls.fetch_add(1, Ordering::SeqCst);
        let mut headers = vec![header("Content-Type", "text/event-stream")];
        let reader: Box<dyn Read + Send> = if gzip {
            headers.push(header("Content-Encoding", "gzip"));
            Box::new(Gzipped::start())
        } else {
            Box::new(Endless {
                chunk: endless_chunk(),
                at: 0,
            })
        };
        let response = tiny_http::Response::new(200.into(), headers, reader, None, None);
        // Ends when shepherd hangs up.
        let _ = request.respond(response);
    }
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
}

/// The peak resident set (`VmHWM`) of a live process, in kB.
fn peak_rss_kb(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Waits for `child` to exit by itself, sampling its peak memory meanwhile;
/// (exit code, stderr, the largest peak seen).
fn wait_sampling(mut child: Child) -> (Option<i32>, String, u64) {
    let mut stderr = child.stderr.take().expect("piped");
    let reader = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let mut stdout = child.stdout.take().expect("piped");
    let drain = std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
    let deadline = Instant::now() + DEADLINE;
    let mut peak = 0;
    let status = loop {
        if let Some(kb) = peak_rss_kb(child.id()) {
            peak = peak.max(kb);
        }
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("shepherd did not end the endless reply within {DEADLINE:?} (peak {peak} kB)");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let _ = drain.join();
    (status.code(), reader.join().expect("stderr"), peak)
}

fn upstream_args(upstream: &Upstream) -> Vec<String> {
    [
        "--backend",
        "openai",
        "--api-base",
        &upstream.base_url,
        "-m",
        "test",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A sandbox whose config sets `max_reply_mb` (a debug build reads 16 MiB of
/// deltas in about 30 s, so only the first run keeps the default).
fn sandbox_capped(tag: &str, reply_mb: Option<u64>) -> Sandbox {
    let sandbox = Sandbox::new(tag);
    if let Some(mb) = reply_mb {
        let dir = sandbox.config_dir().join("shepherd");
        std::fs::create_dir_all(&dir).expect("config dir");
        let config = json!({ "max_reply_mb": mb }).to_string();
        std::fs::write(dir.join("config.json"), config).expect("config");
    }
    sandbox
}

#[test]
fn an_endless_reply_ends_one_shot_runs_with_the_cap_named_in_bounded_memory() {
    for (gzip, reply_mb, named) in [(false, None, "16 MiB"), (true, Some(4), "4 MiB")] {
        let upstream = Upstream::start(gzip);
        let sandbox = sandbox_capped("peers-oneshot", reply_mb);
        let mut args = upstream_args(&upstream);
        args.extend(["--notools", "-e", "hello"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = sandbox.spawn(&args);
        drop(child.stdin.take());
        let (code, stderr, peak) = wait_sampling(child);
        assert_ne!(code, Some(0), "gzip {gzip}: {stderr}");
        assert!(
            stderr.contains(named) && stderr.contains("max_reply_mb"),
            "gzip {gzip}: the error names the cap and its key: {stderr}"
        );
        assert!(
            peak <= MAX_RSS_KB,
            "gzip {gzip}: peak RSS {peak} kB over {MAX_RSS_KB} kB"
        );
        assert_eq!(upstream.calls.load(Ordering::SeqCst), 1, "never retried");
    }
}

/// A server in front of the endless upstream; the peak memory is sampled
/// while `exercise` runs.
fn with_server(mode: &str, exercise: impl FnOnce(&str, &ureq::Agent)) {
    let upstream = Upstream::start(true);
    let sandbox = sandbox_capped("peers-server", Some(4));
    let mut args = upstream_args(&upstream);
    args.extend([mode, "--port", "0", "--auth-token", TOKEN].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = sandbox.spawn(&args);
    let (address, log) = wait_listening(&mut child);
    let pid = child.id();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut peak = 0;
            while !done.load(Ordering::SeqCst) {
                peak = peak.max(peak_rss_kb(pid).unwrap_or(0));
                std::thread::sleep(Duration::from_millis(5));
            }
            peak.max(peak_rss_kb(pid).unwrap_or(0))
        })
    };
    exercise(&address, &http_agent(DEADLINE));
    done.store(true, Ordering::SeqCst);
    let peak = sampler.join().expect("sampler");
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        peak <= MAX_RSS_KB,
        "{mode}: peak RSS {peak} kB over {MAX_RSS_KB} kB; log: {}",
        log.lock().unwrap()
    );
}

fn body_of(response: ureq::http::Response<ureq::Body>) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().unwrap_or_default();
    (
        status,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[test]
fn servers_end_an_endless_reply_with_the_cap_named_and_go_on_serving() {
    with_server("--server", |address, agent| {
        let request = json!({"model": "test", "messages": [{"role": "user", "content": "hi"}]});
        let (status, body) = post(agent, &format!("{address}/v1/chat/completions"), &request);
        assert_eq!(status, 502, "{body}");
        let message = body["error"]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("4 MiB") && message.contains("max_reply_mb"),
            "{body}"
        );
        let (status, body) = body_of(agent.get(format!("{address}/v1/models")).call().unwrap());
        assert_eq!(status, 200, "still serving: {body}");
    });
    with_server("--cliserver", |address, agent| {
        let (_, body) = post(
            agent,
            &format!("{address}/request"),
            &json!({"prompt": "hi"}),
        );
        assert_eq!(body["success"], false, "{body}");
        assert!(
            body.to_string().contains("max_reply_mb"),
            "the error names the cap: {body}"
        );
        let (status, session) = body_of(agent.get(format!("{address}/session")).call().unwrap());
        assert_eq!(status, 200, "still serving: {session}");
        let roles: Vec<&str> = session["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|m| m["role"].as_str()).collect())
            .unwrap_or_default();
        assert!(
            !roles.contains(&"assistant"),
            "no partial reply kept: {roles:?}"
        );
    });
}

fn post(agent: &ureq::Agent, url: &str, body: &Value) -> (u16, Value) {
    let response = agent
        .post(url)
        .header("Content-Type", "application/json")
        .send(body.to_string())
        .expect("an answer");
    body_of(response)
}

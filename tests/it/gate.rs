//! Every way to run a tool passes the one approval gate, which writes exactly
//! one audit line per call: the agent (`-e` here; the REPL, TUI and `--json`
//! share its gate), the cliserver's agent, `--server --use-tools`, a direct
//! `POST /v1/tools/call` on each server that offers it, and the tool server's
//! `executeTool`. Each runs `get_time` once in a fresh sandbox, and once a call
//! the rules deny, which must be refused and audited as refused.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{text_stream, tool_call_stream, Canned, FakeOpenAi};
use crate::harness::{http_agent, poll_until, wait_listening, Sandbox, TOKEN};
use crate::tool_server::audit_lines;

/// The model asks for `get_time`, then for `bash` (denied by the rules), then answers.
fn script() -> Vec<Canned> {
    vec![
        Canned::sse(&tool_call_stream("call_t", "get_time", json!({}))),
        Canned::sse(&tool_call_stream(
            "call_b",
            "bash",
            json!({"command": "touch denied.txt"}),
        )),
        Canned::sse(&text_stream(&["Done."])),
    ]
}

fn upstream(fake: &FakeOpenAi) -> Vec<String> {
    [
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// One line per call: `get_time` allowed, `bash` refused by the policy, in that order.
fn assert_audited(path: &str, sandbox: &Sandbox, mode: &str) {
    let lines = audit_lines(sandbox);
    let seen: Vec<(String, bool, String)> = lines
        .iter()
        .map(|l| {
            (
                l["tool"].as_str().unwrap_or_default().to_string(),
                l["decision"] == "allow",
                l["mode"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("get_time".to_string(), true, mode.to_string()),
            ("bash".to_string(), false, mode.to_string()),
        ],
        "{path}: {lines:?}"
    );
    assert!(
        !sandbox.work().join("denied.txt").exists(),
        "{path}: a denied call ran"
    );
}

/// A server of `mode` on port 0 with the token and `extra`; killed on drop.
struct Running {
    child: std::process::Child,
    address: String,
}

impl Running {
    fn start(sandbox: &Sandbox, mut args: Vec<String>) -> Running {
        args.extend(["--port", "0", "--auth-token", TOKEN, "--deny", "bash"].map(String::from));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let mut child = sandbox.spawn(&args);
        let (address, _log) = wait_listening(&mut child);
        Running { child, address }
    }

    /// POSTs `body`; a 503 (`--server` listens before its backend is loaded, and
    /// says so) is asked again, as a client honouring its Retry-After would.
    fn post(&self, path: &str, body: &Value) -> (u16, Value) {
        let mut answer = (0, Value::Null);
        poll_until(Duration::from_secs(60), || {
            let response = http_agent(Duration::from_secs(60))
                .post(format!("{}{path}", self.address))
                .header("Content-Type", "application/json")
                .send(body.to_string())
                .expect("an answer");
            let status = response.status().as_u16();
            let text = response.into_body().read_to_string().unwrap_or_default();
            answer = (status, serde_json::from_str(&text).unwrap_or(Value::Null));
            status != 503
        });
        answer
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Both calls directly, as an authenticated client would make them.
fn direct_calls(server: &Running) {
    let (status, body) = server.post(
        "/v1/tools/call",
        &json!({"name": "get_time", "arguments": {}}),
    );
    assert_eq!(status, 200, "{body}");
    let bash = json!({"name": "bash", "arguments": {"command": "touch denied.txt"}});
    let (status, body) = server.post("/v1/tools/call", &bash);
    assert_eq!(status, 403, "{body}");
}

#[test]
fn every_way_to_run_a_tool_passes_the_gate_and_leaves_one_audit_line_per_call() {
    // The agent, headless.
    let sandbox = Sandbox::new("gate-agent");
    let fake = FakeOpenAi::start(script());
    let mut args = upstream(&fake);
    args.extend(["--deny", "bash", "-e", "what time is it"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_audited("-e", &sandbox, "headless");

    // The cliserver's agent.
    let sandbox = Sandbox::new("gate-cliserver");
    let fake = FakeOpenAi::start(script());
    let mut args = upstream(&fake);
    args.push("--cliserver".into());
    let server = Running::start(&sandbox, args);
    let (_, body) = server.post("/request", &json!({"prompt": "what time is it"}));
    assert_eq!(body["success"], true, "{body}");
    assert_audited("cliserver agent", &sandbox, "cliserver");

    // The cliserver's direct calls.
    let sandbox = Sandbox::new("gate-cliserver-direct");
    let fake = FakeOpenAi::start(Vec::new());
    let mut args = upstream(&fake);
    args.push("--cliserver".into());
    direct_calls(&Running::start(&sandbox, args));
    assert_audited("cliserver /v1/tools/call", &sandbox, "api");

    // The API server's own tools.
    let sandbox = Sandbox::new("gate-server");
    let fake = FakeOpenAi::start(script());
    let mut args = upstream(&fake);
    args.extend(["--server", "--use-tools"].map(String::from));
    let server = Running::start(&sandbox, args);
    let request = json!({"model": "test", "messages": [{"role": "user", "content": "time?"}]});
    let (status, body) = server.post("/v1/chat/completions", &request);
    assert_eq!(status, 200, "{body}");
    assert_audited("--server --use-tools", &sandbox, "server");

    // The API server's direct calls.
    let sandbox = Sandbox::new("gate-server-direct");
    let fake = FakeOpenAi::start(Vec::new());
    let mut args = upstream(&fake);
    args.extend(["--server", "--use-tools"].map(String::from));
    direct_calls(&Running::start(&sandbox, args));
    assert_audited("--server /v1/tools/call", &sandbox, "api");

    // The tool server.
    let sandbox = Sandbox::new("gate-toolserver");
    let server = Running::start(&sandbox, vec!["--toolserver".into()]);
    let mut stream = TcpStream::connect(server.address.trim_start_matches("http://"))
        .expect("connect to the tool server");
    let mut lines = BufReader::new(stream.try_clone().expect("clone"));
    let mut call = |id: u64, method: &str, params: Value| {
        let request = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        writeln!(stream, "{request}").expect("send");
        let mut answer = String::new();
        lines.read_line(&mut answer).expect("answer");
        serde_json::from_str::<Value>(&answer).expect("JSON answer")
    };
    let answer = call(1, "auth", json!({"token": TOKEN}));
    assert_eq!(answer["result"], true, "{answer}");
    let answer = call(
        2,
        "executeTool",
        json!({"name": "get_time", "arguments": {}}),
    );
    assert!(answer.get("result").is_some(), "{answer}");
    let bash = json!({"name": "bash", "arguments": {"command": "touch denied.txt"}});
    let answer = call(3, "executeTool", bash);
    assert!(answer.get("error").is_some(), "{answer}");
    assert_audited("--toolserver", &sandbox, "toolserver");
}

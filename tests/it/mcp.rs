//! MCP end to end: real MCP servers (built with the `mcp` package from PyPI,
//! `tests/mcp/fixture_server.py`, and the reference "everything" server from
//! npm) over stdio and streamable HTTP, driven through the built binary and
//! the fake OpenAI upstream.
//!
//! `make test` installs both and sets `SHEPHERD_TEST_PYTHON` and
//! `SHEPHERD_TEST_MCP_EVERYTHING`; without them these tests print why and return.

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{
    assert_tool_results_answer_calls, chunk, text_stream, tool_call_stream, tool_delta, Canned,
    FakeOpenAi,
};
use crate::harness::{poll_until, process_running, Sandbox};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/mcp/fixture_server.py");

/// The Python that has the `mcp` package, or `None` (with the reason printed).
pub fn python() -> Option<String> {
    let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let ok = Command::new(&python)
        .args(["-c", "import mcp.server.fastmcp"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Some(python)
    } else {
        eprintln!("skipped: {python} cannot import the `mcp` package (run `make test`)");
        None
    }
}

/// A word unique to this test run, put in server argv to find the processes.
pub fn marker(tag: &str) -> String {
    format!("shepherd-mcp-{tag}-{}", std::process::id())
}

pub fn stdio_server(python: &str, marker: &str, extra: Value) -> Value {
    let mut server = json!({"command": python, "args": [FIXTURE, "stdio", marker]});
    if let Value::Object(extra) = extra {
        for (key, value) in extra {
            server[key] = value;
        }
    }
    server
}

pub fn write_config(sandbox: &Sandbox, servers: Value) {
    let dir = sandbox.config_dir().join("shepherd");
    std::fs::create_dir_all(&dir).unwrap();
    let config = json!({"mcp_servers": servers});
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
}

/// A sandbox whose config has the one fixture server `fx` over stdio, its argv
/// carrying `server_marker`.
fn fx_sandbox(python: &str, tag: &str, server_marker: &str) -> Sandbox {
    let sandbox = Sandbox::new(tag);
    write_config(
        &sandbox,
        json!({"fx": stdio_server(python, server_marker, json!({}))}),
    );
    sandbox
}

/// These tests are about MCP, not approvals: every tool is allowed explicitly.
fn args<'a>(fake: &'a FakeOpenAi, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![
        "--approve",
        "all",
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
    ];
    all.extend_from_slice(extra);
    all
}

/// Two tool calls in one assistant message.
fn two_calls(first: (&str, &str, Value), second: (&str, &str, Value)) -> Canned {
    Canned::sse(&[
        chunk(json!({"role": "assistant", "content": null}), None),
        tool_delta(0, Some(first.0), Some(first.1), &first.2.to_string()),
        tool_delta(1, Some(second.0), Some(second.1), &second.2.to_string()),
        chunk(json!({}), Some("tool_calls")),
    ])
}

fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| {
                    t["function"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string()
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The `tool` messages of a request, as (call id, content).
fn tool_results(body: &Value) -> Vec<(String, String)> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| {
            let text = |k: &str| m[k].as_str().unwrap_or_default().to_string();
            (text("tool_call_id"), text("content"))
        })
        .collect()
}

/// An HTTP fixture server on a free port, killed on drop.
struct HttpServer {
    child: Child,
    url: String,
}

impl HttpServer {
    /// Starts the fixture on a free port. Python's imports can take long on a
    /// loaded 2-core machine (they once took more than 30 s), so it waits up to
    /// two minutes, but not for a process that already ended: the port may have
    /// been taken between choosing it and binding it, and the next try picks
    /// another.
    fn start(python: &str, marker: &str) -> HttpServer {
        let mut ended = Vec::new();
        for _ in 0..3 {
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let mut child = Command::new(python)
                .args([FIXTURE, "http", &port.to_string(), marker])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start the HTTP fixture server");
            let mut status = None;
            let up = poll_until(Duration::from_secs(120), || {
                status = child.try_wait().ok().flatten();
                status.is_some() || std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
            });
            match status {
                None if up => {
                    return HttpServer {
                        child,
                        url: format!("http://127.0.0.1:{port}/mcp"),
                    }
                }
                None => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("the HTTP fixture server did not listen within 2 minutes");
                }
                Some(status) => ended.push(status),
            }
        }
        panic!("the HTTP fixture server ended before listening, 3 times: {ended:?}");
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn mcp_test_lists_tools_over_stdio_and_http() {
    let Some(python) = python() else { return };
    let http = HttpServer::start(&python, &marker("list-http"));
    let sandbox = Sandbox::new("mcp-list");
    write_config(
        &sandbox,
        json!({"fx": stdio_server(&python, &marker("list"), json!({})), "web": {"url": http.url}}),
    );
    for name in ["fx", "web"] {
        let run = sandbox.run(&["mcp", name, "test"], "");
        assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
        assert!(
            run.stdout
                .contains(&format!("connected to '{name}': shepherd-fixture")),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout
                .contains(&format!("  {name}:echo [read-only]  Returns its text")),
            "{}",
            run.stdout
        );
        assert!(
            run.stdout.contains(&format!("  {name}:add  Adds")),
            "{}",
            run.stdout
        );
    }
    let listed = sandbox.run(&["mcp", "list"], "");
    assert!(listed.stdout.contains("web  http"), "{}", listed.stdout);
    let missing = sandbox.run(&["mcp", "nope", "test"], "");
    assert_eq!(missing.status, Some(2));
    assert!(
        missing.stderr.contains("known servers: fx, web"),
        "{}",
        missing.stderr
    );
}

#[test]
fn encoded_tool_names_reach_the_model_and_calls_come_back_to_the_server() {
    let Some(python) = python() else { return };
    let http = HttpServer::start(&python, &marker("names-http"));
    let sandbox = Sandbox::new("mcp-names");
    write_config(
        &sandbox,
        json!({"fx": stdio_server(&python, &marker("names"), json!({})), "web": {"url": http.url}}),
    );
    let fake = FakeOpenAi::start(vec![
        two_calls(
            ("call_1", "fx__echo", json!({"text": "over stdio"})),
            ("call_2", "web__add", json!({"a": 2, "b": 40})),
        ),
        Canned::sse(&text_stream(&["Both worked."])),
    ]);
    let run = sandbox.run(&args(&fake, &["--json", "-e", "use the tools"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let offered = offered_tools(&requests[0].body);
    for name in [
        "fx__echo",
        "fx__add",
        "web__echo",
        "web__add",
        "read",
        "bash",
    ] {
        assert!(
            offered.iter().any(|o| o == name),
            "{name} not in {offered:?}"
        );
    }
    assert!(!offered.iter().any(|o| o.contains(':')), "{offered:?}");
    // Shepherd decoded the calls back to server:tool and ran them on the right servers.
    let lines = run.json_lines();
    let used: Vec<&str> = lines
        .iter()
        .filter(|l| l["type"] == "tool_use")
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(used, ["fx:echo", "web:add"]);
    assert_tool_results_answer_calls(&requests[1].body);
    assert_eq!(
        tool_results(&requests[1].body),
        [
            ("call_1".to_string(), "echo: over stdio".to_string()),
            ("call_2".to_string(), "42".to_string())
        ]
    );
    // The history keeps the wire names, so the model sees what it called.
    let assistant = &requests[1].body["messages"].as_array().unwrap()[2];
    assert_eq!(assistant["tool_calls"][0]["function"]["name"], "fx__echo");
}

#[test]
fn tool_errors_reach_the_model_as_failures() {
    let Some(python) = python() else { return };
    let sandbox = fx_sandbox(&python, "mcp-errors", &marker("errors"));
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_f",
            "fx__fail",
            json!({"message": "disk on fire"}),
        )),
        Canned::sse(&text_stream(&["It failed."])),
    ]);
    let run = sandbox.run(&args(&fake, &["--json", "-e", "try"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let lines = run.json_lines();
    let result = lines.iter().find(|l| l["type"] == "tool_result").unwrap();
    assert_eq!(result["success"], false);
    let content = &tool_results(&fake.requests()[1].body)[0].1;
    assert!(content.contains("disk on fire"), "{content}");
}

#[test]
fn a_crashed_server_is_restarted() {
    let Some(python) = python() else { return };
    let sandbox = fx_sandbox(&python, "mcp-crash", &marker("crash"));
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream("call_c", "fx__crash", json!({}))),
        Canned::sse(&tool_call_stream(
            "call_e",
            "fx__echo",
            json!({"text": "back"}),
        )),
        Canned::sse(&text_stream(&["Recovered."])),
    ]);
    let input = "{\"type\":\"user\",\"content\":\"crash it\"}\n{\"type\":\"mcp_status\"}\n";
    let run = sandbox.run(&args(&fake, &["--json"]), input);
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let results = tool_results(&requests[2].body);
    assert!(
        results[0].1.contains("closed the connection"),
        "{results:?}"
    );
    assert_eq!(results[1].1, "echo: back");
    let lines = run.json_lines();
    let status = lines.iter().find(|l| l["type"] == "mcp_status").unwrap();
    let server = &status["servers"][0];
    assert_eq!(server["name"], "fx");
    assert_eq!(server["state"], "ready");
    assert_eq!(server["tools"], 8);
    assert!(server["restarts"].as_u64().unwrap() >= 1, "{status}");
}

#[test]
fn a_server_that_never_answers_times_out_without_blocking_others() {
    let Some(python) = python() else { return };
    let sandbox = Sandbox::new("mcp-hang");
    write_config(
        &sandbox,
        json!({
            "slow": stdio_server(&python, &marker("hang"), json!({"call_timeout": 2})),
            "fx": stdio_server(&python, &marker("hang-other"), json!({})),
        }),
    );
    let fake = FakeOpenAi::start(vec![
        two_calls(
            ("call_h", "slow__hang", json!({})),
            ("call_e", "fx__echo", json!({"text": "still here"})),
        ),
        Canned::sse(&text_stream(&["One timed out."])),
    ]);
    let run = sandbox.run(&args(&fake, &["--json", "-e", "go"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let results = tool_results(&fake.requests()[1].body);
    assert!(
        results[0]
            .1
            .contains("no answer to tools/call within 2.0 s"),
        "{results:?}"
    );
    assert_eq!(results[1].1, "echo: still here");
}

#[test]
fn a_changed_tool_list_is_offered_next_round() {
    let Some(python) = python() else { return };
    let sandbox = fx_sandbox(&python, "mcp-grow", &marker("grow"));
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream("call_g", "fx__grow", json!({}))),
        Canned::sse(&tool_call_stream("call_n", "fx__grown", json!({}))),
        Canned::sse(&text_stream(&["Grown."])),
    ]);
    let run = sandbox.run(&args(&fake, &["--json", "-e", "grow"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let requests = fake.requests();
    assert!(!offered_tools(&requests[0].body).contains(&"fx__grown".to_string()));
    assert!(offered_tools(&requests[1].body).contains(&"fx__grown".to_string()));
    assert_eq!(tool_results(&requests[2].body)[1].1, "grown");
}

#[test]
fn no_server_process_remains_after_exit() {
    let Some(python) = python() else { return };
    let server_marker = marker("orphans");
    let sleeper_marker = marker("orphans-sleeper");
    let sandbox = fx_sandbox(&python, "mcp-orphans", &server_marker);
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_s",
            "fx__spawn_sleeper",
            json!({"marker": sleeper_marker}),
        )),
        Canned::sse(&text_stream(&["Started."])),
    ]);
    let run = sandbox.run(&args(&fake, &["--json", "-e", "start a sleeper"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(tool_results(&fake.requests()[1].body)[0].1, "started");
    // shepherd has exited; its server and the server's child must be gone too.
    let gone = poll_until(Duration::from_secs(5), || {
        !process_running(&server_marker) && !process_running(&sleeper_marker)
    });
    assert!(gone, "an MCP process outlived shepherd");

    // --nomcp starts nothing at all.
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["No tools."]))]);
    let run = sandbox.run(&args(&fake, &["--nomcp", "-e", "hi"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert!(!offered_tools(&fake.requests()[0].body)
        .iter()
        .any(|t| t.starts_with("fx__")));
}

#[test]
fn a_tool_that_writes_without_destroying_still_needs_approval() {
    let Some(python) = python() else { return };
    let sandbox = fx_sandbox(&python, "mcp-readonly", &marker("readonly"));
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_m",
            "fx__make_dir",
            json!({"name": "made"}),
        )),
        Canned::sse(&text_stream(&["Not made."])),
    ]);
    let no_approvals = [
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
        "-e",
        "make a dir",
    ];
    let run = sandbox.run(&no_approvals, "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let result = &tool_results(&fake.requests()[1].body)[0].1;
    assert!(result.contains("needs approval"), "{result}");
    assert!(
        !sandbox.work().join("made").exists(),
        "it ran with nobody to approve it"
    );
}

/// A script whose first call starts a sleeper in a session of its own
/// (`setsid`, out of the server's process group), then `then`.
fn detached_sleeper_script(sleeper_marker: &str, then: Canned) -> Vec<Canned> {
    vec![
        Canned::sse(&tool_call_stream(
            "call_d",
            "fx__spawn_sleeper",
            json!({"marker": sleeper_marker, "detach": true}),
        )),
        then,
    ]
}

#[test]
fn a_grandchild_that_calls_setsid_ends_with_shepherd() {
    let Some(python) = python() else { return };
    let server_marker = marker("setsid");
    let sleeper_marker = marker("setsid-sleeper");
    let sandbox = fx_sandbox(&python, "mcp-setsid", &server_marker);
    let fake = FakeOpenAi::start(detached_sleeper_script(
        &sleeper_marker,
        Canned::sse(&text_stream(&["Started."])),
    ));
    let run = sandbox.run(&args(&fake, &["-e", "start a detached sleeper"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(tool_results(&fake.requests()[1].body)[0].1, "started");
    let gone = poll_until(Duration::from_secs(5), || {
        !process_running(&server_marker) && !process_running(&sleeper_marker)
    });
    assert!(gone, "a process the MCP server started outlived shepherd");
}

#[test]
fn a_grandchild_that_calls_setsid_ends_when_shepherd_is_killed() {
    let Some(python) = python() else { return };
    let server_marker = marker("sigkill");
    let sleeper_marker = marker("sigkill-sleeper");
    let sandbox = fx_sandbox(&python, "mcp-sigkill", &server_marker);
    let fake = FakeOpenAi::start(detached_sleeper_script(
        &sleeper_marker,
        Canned::sse(&tool_call_stream("call_h", "fx__hang", json!({}))),
    ));
    let mut child = sandbox.spawn(&args(&fake, &["-e", "start a sleeper, then hang"]));
    let started = poll_until(Duration::from_secs(30), || {
        fake.requests().len() >= 2 && process_running(&sleeper_marker)
    });
    assert!(started, "the detached sleeper never started");
    // No cleanup code of shepherd's runs after SIGKILL.
    child.kill().expect("kill -9 shepherd");
    let _ = child.wait();
    let gone = poll_until(Duration::from_secs(5), || {
        !process_running(&server_marker) && !process_running(&sleeper_marker)
    });
    assert!(
        gone,
        "a process the MCP server started outlived a killed shepherd"
    );
}

#[test]
fn a_server_that_dies_at_start_is_reported_at_once_with_its_last_words() {
    let Some(python) = python() else { return };
    let sandbox = Sandbox::new("mcp-dies");
    write_config(
        &sandbox,
        json!({
            // Far longer than the harness's deadline: only an early report passes.
            "dead": {
                "command": "sh",
                "args": ["-c", "echo 'ModuleNotFoundError: no module named mcp' >&2; exit 3"],
                "startup_timeout": 600,
            },
            "fx": stdio_server(&python, &marker("dies"), json!({})),
        }),
    );
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["Fine."]))]);
    let run = sandbox.run(&args(&fake, &["-e", "go"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert!(
        run.stderr.contains("MCP server dead") && run.stderr.contains("no module named mcp"),
        "the report names the server and why: {}",
        run.stderr
    );
    assert!(offered_tools(&fake.requests()[0].body).contains(&"fx__echo".to_string()));
}

#[test]
fn a_dying_servers_last_words_reach_the_terminal_with_escapes_spelled_out() {
    let sandbox = Sandbox::new("mcp-dies-escapes");
    write_config(
        &sandbox,
        json!({
            "dead": {
                "command": "sh",
                // A title change, a screen clear and a bell in the server's own words.
                "args": ["-c", "printf 'bad \\033]0;pwned\\007 \\033[2J end\\n' >&2; exit 3"],
                "startup_timeout": 600,
            },
        }),
    );
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["Fine."]))]);
    let run = sandbox.run(&args(&fake, &["-e", "go"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert!(run.stderr.contains("MCP server dead"), "{}", run.stderr);
    assert!(
        !run.stderr.contains('\x1b') && !run.stderr.contains('\x07'),
        "a control character reached the terminal: {:?}",
        run.stderr
    );
    assert!(run.stderr.contains("\\x1b]0;pwned"), "{:?}", run.stderr);
}

#[test]
fn sigterm_during_a_call_cancels_it_and_leaves_no_server_behind() {
    let Some(python) = python() else { return };
    let server_marker = marker("sigterm");
    let sandbox = fx_sandbox(&python, "mcp-sigterm", &server_marker);
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream("call_h", "fx__hang", json!({}))),
        Canned::sse(&text_stream(&["should not be asked for"])),
    ]);
    let child = sandbox.spawn(&args(&fake, &["-e", "hang"]));
    let pid = child.id();
    let collected = crate::harness::collect(child);
    // The model asked for the call; the server is up and the agent is busy with it.
    let busy = poll_until(Duration::from_secs(30), || {
        !fake.requests().is_empty() && process_running(&server_marker)
    });
    assert!(busy, "the call never started");
    Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill -TERM");
    let run = crate::harness::finish(collected, Duration::from_secs(20))
        .expect("shepherd exits after SIGTERM");
    assert_eq!(run.status, Some(143), "stderr: {}", run.stderr);
    let gone = poll_until(Duration::from_secs(5), || !process_running(&server_marker));
    assert!(gone, "the MCP server outlived shepherd");
    assert_eq!(
        fake.requests().len(),
        1,
        "a cancelled turn does not go back to the model"
    );
}

#[test]
fn cliserver_status_shows_each_server() {
    let Some(python) = python() else { return };
    let sandbox = Sandbox::new("mcp-status");
    let config = sandbox.work().join("mcp.json");
    let servers = json!({"mcp_servers": {
        "fx": stdio_server(&python, &marker("status"), json!({})),
        "off": {"command": "true", "enabled": false},
    }});
    std::fs::write(&config, servers.to_string()).unwrap();
    let fake = FakeOpenAi::start(Vec::new());
    let config = config.to_string_lossy().into_owned();
    let mut child = sandbox.spawn(&args(
        &fake,
        &[
            "--cliserver",
            "--port",
            "0",
            "-c",
            &config,
            "--auth-token",
            crate::harness::TOKEN,
        ],
    ));
    let (address, _log) = crate::harness::wait_listening(&mut child);
    let addr = address.trim_start_matches("http://").to_string();
    let status = || -> Value {
        let url = format!("http://{addr}/status");
        let body = crate::harness::http_agent(Duration::from_secs(30))
            .get(&url)
            .call()
            .unwrap()
            .into_body()
            .read_to_string()
            .unwrap();
        serde_json::from_str(&body).unwrap()
    };
    // The server answers at once, while the MCP server may still be starting.
    let first = status();
    let state = first["mcp_servers"][0]["state"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(state == "starting" || state == "ready", "{first}");
    let ready = poll_until(Duration::from_secs(30), || {
        status()["mcp_servers"][0]["state"] == "ready"
    });
    assert!(ready, "fx never became ready");
    let servers = status()["mcp_servers"].clone();
    assert_eq!(servers[0]["name"], "fx");
    assert_eq!(servers[0]["transport"], "stdio");
    assert_eq!(servers[0]["tools"], 8);
    assert_eq!(servers[1]["name"], "off");
    assert_eq!(servers[1]["state"], "disabled");
    // A tool /status lists is one /v1/tools/call runs.
    let called = crate::harness::http_agent(Duration::from_secs(30))
        .post(&format!("http://{addr}/v1/tools/call"))
        .send(json!({"name": "fx__echo", "arguments": {"text": "direct"}}).to_string())
        .expect("the MCP tool is found")
        .into_body()
        .read_to_string()
        .expect("a body");
    assert!(called.contains("direct"), "{called}");
    let _ = child.kill();
    let _ = child.wait();
}

#[test]
fn a_missing_command_is_named_and_the_other_servers_still_work() {
    let Some(python) = python() else { return };
    let sandbox = Sandbox::new("mcp-missing");
    write_config(
        &sandbox,
        json!({
            "gone": {"command": "/nonexistent/mcp-server-binary"},
            "fx": stdio_server(&python, &marker("missing"), json!({})),
        }),
    );
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_e",
            "fx__echo",
            json!({"text": "ok"}),
        )),
        Canned::sse(&text_stream(&["Fine."])),
    ]);
    let run = sandbox.run(&args(&fake, &["-e", "go"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert!(
        run.stderr.contains("MCP server gone (stdio)")
            && run
                .stderr
                .contains("/nonexistent/mcp-server-binary: No such file"),
        "{}",
        run.stderr
    );
    let requests = fake.requests();
    assert!(offered_tools(&requests[0].body).contains(&"fx__echo".to_string()));
    assert_eq!(tool_results(&requests[1].body)[0].1, "echo: ok");
}

/// The npm reference server's executable, or `None` (with the reason printed).
fn everything() -> Option<String> {
    match std::env::var("SHEPHERD_TEST_MCP_EVERYTHING") {
        Ok(path) if std::path::Path::new(&path).exists() => Some(path),
        _ => {
            eprintln!("skipped: SHEPHERD_TEST_MCP_EVERYTHING is not set (run `make test`)");
            None
        }
    }
}

#[test]
fn the_npm_reference_server_works_over_stdio_and_http() {
    let Some(everything) = everything() else {
        return;
    };
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let mut http = Command::new(&everything)
        .arg("streamableHttp")
        .env("PORT", port.to_string())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the everything server");
    let up = poll_until(Duration::from_secs(30), || {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
    });
    assert!(up, "the everything server did not start");
    let sandbox = Sandbox::new("mcp-everything");
    write_config(
        &sandbox,
        json!({
            "ev": {"command": everything, "args": ["stdio"]},
            "evh": {"url": format!("http://127.0.0.1:{port}/mcp")},
        }),
    );
    let listed = sandbox.run(&["mcp", "ev", "test"], "");
    assert_eq!(listed.status, Some(0), "stderr: {}", listed.stderr);
    assert!(
        listed.stdout.contains("  ev:get-sum [read-only]"),
        "{}",
        listed.stdout
    );
    let fake = FakeOpenAi::start(vec![
        two_calls(
            ("call_1", "ev__echo", json!({"message": "hello"})),
            ("call_2", "evh__get-sum", json!({"a": 2, "b": 3})),
        ),
        Canned::sse(&text_stream(&["Done."])),
    ]);
    let run = sandbox.run(&args(&fake, &["--json", "-e", "use them"]), "");
    let _ = http.kill();
    let _ = http.wait();
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let requests = fake.requests();
    let offered = offered_tools(&requests[0].body);
    assert!(offered.contains(&"evh__get-sum".to_string()), "{offered:?}");
    assert_eq!(
        tool_results(&requests[1].body),
        [
            ("call_1".to_string(), "Echo: hello".to_string()),
            ("call_2".to_string(), "The sum of 2 and 3 is 5.".to_string())
        ]
    );
}

/// Every server mode goes through the one signal watcher and the one cleanup:
/// after SIGTERM no MCP server is left and the published token file is gone.
#[test]
fn every_server_mode_leaves_no_mcp_server_and_no_token_file_after_sigterm() {
    let Some(python) = python() else { return };
    let modes: [&[&str]; 3] = [
        &["--cliserver", "--port", "0"],
        &["--toolserver", "--port", "0"],
        &["--server", "--use-tools", "--port", "0"],
    ];
    for mode in modes {
        let server_marker = marker(&format!("signal{}", mode[0].trim_start_matches('-')));
        let sandbox = Sandbox::new("mcp-signal");
        write_config(
            &sandbox,
            json!({"fx": stdio_server(&python, &server_marker, json!({}))}),
        );
        let fake = FakeOpenAi::start(Vec::new());
        let mut child = sandbox.spawn(&args(&fake, mode));
        let pid = child.id();
        let (address, log) = crate::harness::wait_listening(&mut child);
        let port = address.rsplit(':').next().unwrap().to_string();
        let token_file = crate::harness::runtime_dir()
            .join("shepherd")
            .join(format!("server-{port}.json"));
        assert!(token_file.exists(), "{mode:?}: a token was published");
        let started = poll_until(Duration::from_secs(30), || process_running(&server_marker));
        assert!(started, "{mode:?}: the MCP server never started");
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill -TERM");
        let collected = crate::harness::collect(child);
        let run = crate::harness::finish(collected, Duration::from_secs(20))
            .unwrap_or_else(|| panic!("{mode:?}: shepherd did not exit after SIGTERM"));
        assert_eq!(run.status, Some(143), "{mode:?}: {}", log.lock().unwrap());
        let gone = poll_until(Duration::from_secs(5), || !process_running(&server_marker));
        assert!(gone, "{mode:?}: the MCP server outlived shepherd");
        assert!(
            !token_file.exists(),
            "{mode:?}: the token file was left behind"
        );
    }
}

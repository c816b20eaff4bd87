//! End-to-end tests of conversations on disk and profiles: the CLI server's
//! session across restarts (and `--fresh`, and unreadable files), seed 002's
//! endpoints mounted on the CLI server, and `shepherd profile` with
//! `--profile`, all with the real binary against the fake OpenAI upstream.

use std::path::PathBuf;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{text_stream, Canned, FakeOpenAi};
use crate::harness::{Sandbox, TOKEN};

/// A `--cliserver` run inside a sandbox the test keeps, so it can be restarted.
struct Server {
    child: Child,
    base: String,
    log: Arc<Mutex<String>>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn server_args<'a>(fake: &'a FakeOpenAi, extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--cliserver",
        "--port",
        "0",
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
    ];
    if !extra
        .iter()
        .any(|a| a.starts_with("--auth-token") || *a == "--no-auth")
    {
        args.extend_from_slice(&["--auth-token", TOKEN]);
    }
    args.extend_from_slice(extra);
    args
}

fn start(sandbox: &Sandbox, fake: &FakeOpenAi, extra: &[&str]) -> Server {
    let mut child = sandbox.spawn(&server_args(fake, extra));
    let (base, log) = crate::harness::wait_listening(&mut child);
    Server { child, base, log }
}

fn agent() -> ureq::Agent {
    crate::harness::http_agent(Duration::from_secs(60))
}

fn send(server: &Server, method: &str, path: &str, body: &str) -> (u16, Value) {
    let url = format!("{}{path}", server.base);
    let response = match method {
        "GET" => agent().get(&url).call(),
        "DELETE" => agent().delete(&url).call(),
        "PUT" => agent().put(&url).send(body),
        _ => agent()
            .post(&url)
            .header("Content-Type", "application/json")
            .send(body),
    }
    .expect("request");
    let status = response.status().as_u16();
    let text = response.into_body().read_to_string().expect("body");
    (status, serde_json::from_str(&text).unwrap_or(Value::Null))
}

/// The file the CLI server on port 0 keeps its session in.
fn session_file(sandbox: &Sandbox) -> PathBuf {
    sandbox
        .root
        .path()
        .join("home/.local/share/shepherd/sessions/cliserver-0.json")
}

fn contents(session: &Value) -> Vec<String> {
    session["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn cliserver_session_survives_a_kill_and_fresh_starts_empty() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["Noted: 42."])),
        Canned::sse(&text_stream(&["It was 42."])),
    ]);
    let sandbox = Sandbox::new("persist-restart");
    let server = start(&sandbox, &fake, &[]);
    let (status, body) = send(&server, "POST", "/request", r#"{"prompt": "remember 42"}"#);
    assert_eq!(status, 200, "{body}");
    // Saved before the answer went out; SIGKILL then loses nothing.
    drop(server);
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(session_file(&sandbox)).unwrap()).unwrap();
    assert_eq!(
        (&saved["format"], &saved["version"]),
        (&json!("shepherd-session"), &json!(1))
    );

    let server = start(&sandbox, &fake, &[]);
    assert!(server
        .log
        .lock()
        .unwrap()
        .contains("restored session cliserver-0 (2 messages)"));
    let (_, session) = send(&server, "GET", "/session", "");
    assert_eq!(contents(&session), ["remember 42", "Noted: 42."]);
    let (status, _) = send(&server, "POST", "/request", r#"{"prompt": "what was it?"}"#);
    assert_eq!(status, 200);
    // The model saw the history from before the restart.
    let sent = &fake.requests()[1].body["messages"];
    let sent: Vec<&str> = sent
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        sent.ends_with(&["remember 42", "Noted: 42.", "what was it?"]),
        "{sent:?}"
    );
    drop(server);

    let server = start(&sandbox, &fake, &["--fresh"]);
    let (_, session) = send(&server, "GET", "/session", "");
    assert!(contents(&session).is_empty(), "{session}");
    let (status, _) = send(&server, "POST", "/clear", "");
    assert_eq!(status, 200);
    drop(server);
    let server = start(&sandbox, &fake, &[]);
    let (_, session) = send(&server, "GET", "/session", "");
    assert!(
        contents(&session).is_empty(),
        "a cleared session stays cleared"
    );
}

#[test]
fn unreadable_saved_session_stops_the_start_and_is_never_overwritten() {
    let fake = FakeOpenAi::start(Vec::new());
    let sandbox = Sandbox::new("persist-corrupt");
    let file = session_file(&sandbox);
    std::fs::create_dir_all(file.parent().unwrap()).unwrap();
    let cases = [
        (
            r#"{"format":"shepherd-session","version":1,"id":"cliser"#,
            "not a readable session file",
        ),
        (
            r#"{"format":"shepherd-session","version":7,"id":"cliserver-0"}"#,
            "version 7",
        ),
    ];
    for (text, expected) in cases {
        std::fs::write(&file, text).unwrap();
        let run = sandbox.run(&server_args(&fake, &[]), "");
        assert_eq!(run.status, Some(2), "{}", run.stderr);
        assert!(run.stderr.contains(expected), "{}", run.stderr);
        assert!(run.stderr.contains("--fresh"), "{}", run.stderr);
        assert!(!run.stderr.contains("listening"), "{}", run.stderr);
        assert_eq!(std::fs::read_to_string(&file).unwrap(), text);
    }
    let server = start(&sandbox, &fake, &["--fresh"]);
    assert!(
        server.log.lock().unwrap().contains("kept as"),
        "{}",
        server.log.lock().unwrap()
    );
    let dir = file.parent().unwrap();
    let kept: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("cliserver-0.json.unreadable-"))
        .collect();
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(
        std::fs::read_to_string(dir.join(&kept[0])).unwrap(),
        cases[1].0
    );
}

/// The tool names and system prompt of a recorded chat request.
fn tools_and_system(body: &Value) -> (Vec<String>, String) {
    let tools = body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default();
    let system = body["messages"][0]["content"]
        .as_str()
        .unwrap_or("")
        .to_string();
    (tools, system)
}

#[test]
fn agent_endpoints_on_the_cliserver_switch_profiles_and_call_tools() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["Bonjour"]))]);
    let sandbox = Sandbox::new("persist-api");
    let server = start(&sandbox, &fake, &["--fresh"]);
    let (status, body) = send(&server, "GET", "/v1/profiles", "");
    assert_eq!(
        (status, &body["current"]),
        (200, &json!("default")),
        "{body}"
    );
    let (status, body) = send(&server, "GET", "/v1/mcp/servers", "");
    assert_eq!((status, &body["servers"]), (200, &json!([])), "{body}");
    let profile = r#"{"name":"fr","tools":["get_time"],"guidelines":"Answer in French."}"#;
    let (status, body) = send(&server, "POST", "/v1/profiles", profile);
    assert_eq!(status, 201, "{body}");
    let (status, _) = send(&server, "POST", "/v1/profiles/fr/activate", "");
    assert_eq!(status, 200);
    let (status, _) = send(&server, "POST", "/request", r#"{"prompt": "hi"}"#);
    assert_eq!(status, 200);
    let (tools, system) = tools_and_system(&fake.requests()[0].body);
    assert_eq!(tools, ["get_time"]);
    assert!(system.ends_with("Answer in French."), "{system}");

    let call = r#"{"name":"get_time","arguments":{"format":"%Y"}}"#;
    let (status, body) = send(&server, "POST", "/v1/tools/call", call);
    assert_eq!((status, &body["isError"]), (200, &json!(false)), "{body}");
    assert!(body["content"][0]["text"]
        .as_str()
        .unwrap()
        .starts_with("20"));
    let (status, _) = send(
        &server,
        "POST",
        "/v1/tools/call",
        r#"{"name":"bash","arguments":{"command":"true"}}"#,
    );
    assert_eq!(status, 404, "bash is not in the active profile");
    let (status, body) = send(&server, "POST", "/v1/emergency-stop", "");
    assert_eq!((status, &body["success"]), (200, &json!(true)), "{body}");
    assert!(
        body["stopped"].as_u64().unwrap() >= 1,
        "the cliserver is registered"
    );
    let (status, _) = send(&server, "DELETE", "/v1/profiles/default", "");
    assert_eq!(status, 409);
}

#[test]
fn profile_command_and_flag_shape_what_the_model_is_offered() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["ok"])),
        Canned::sse(&text_stream(&["ok"])),
    ]);
    let sandbox = Sandbox::new("persist-profile");
    let add = sandbox.run(
        &[
            "profile",
            "add",
            "ro",
            "--tools",
            "read,grep",
            "--guidelines",
            "Never change files.",
        ],
        "",
    );
    assert_eq!(add.status, Some(0), "{}", add.stderr);
    let list = sandbox.run(&["profile", "list"], "");
    assert_eq!(list.stdout, "* default (all tools)\n  ro (read,grep)\n");
    let removed = sandbox.run(&["profile", "remove", "default"], "");
    assert_eq!(removed.status, Some(2));
    assert!(
        removed.stderr.contains("cannot be deleted"),
        "{}",
        removed.stderr
    );

    let one_shot = |extra: &[&str]| {
        let mut args = vec![
            "--backend",
            "openai",
            "--api-base",
            &fake.base_url,
            "-m",
            "test",
            "-e",
            "hi",
        ];
        args.extend_from_slice(extra);
        sandbox.run(&args, "")
    };
    let run = one_shot(&["--profile", "ro"]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let (tools, system) = tools_and_system(&fake.requests()[0].body);
    assert_eq!(tools, ["read", "grep"]);
    assert!(system.ends_with("Never change files."), "{system}");

    let used = sandbox.run(&["profile", "use", "ro"], "");
    assert_eq!(used.status, Some(0), "{}", used.stderr);
    let run = one_shot(&[]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let (tools, _) = tools_and_system(&fake.requests()[1].body);
    assert_eq!(
        tools,
        ["read", "grep"],
        "the active profile applies without --profile"
    );

    let run = one_shot(&["--profile", "nope"]);
    assert_eq!(run.status, Some(2));
    assert!(
        run.stderr.contains("no profile named 'nope'"),
        "{}",
        run.stderr
    );
}

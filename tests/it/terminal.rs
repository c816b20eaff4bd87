//! End-to-end tests of the interactive REPL and TUI: the real binary runs in a
//! tmux pane (its own tmux server per test) against fake upstreams, and the
//! tests type keys and poll `capture-pane` against a deadline.
//!
//! Cancelling and typing ahead need a stream that is still running, which the
//! canned fake cannot give; [`PacedFake`] is a real HTTP server on
//! 127.0.0.1:0 that can hold a stream open until the test releases it, or
//! drip it a chunk at a time, and records the requests it gets.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender};
use serde_json::{json, Value};

use crate::fake_openai::{chunk, text_stream, tool_call_stream, usage_chunk, Canned, FakeOpenAi};
use crate::harness::{poll_until, Sandbox};

/// How long a test waits for something to appear on screen.
pub(crate) const SCREEN_DEADLINE: Duration = Duration::from_secs(20);

/// One reply of the paced fake.
pub(crate) enum Paced {
    /// A whole SSE body at once.
    Whole(Vec<u8>),
    /// `first`, then nothing until the gate opens (or closes), then `rest`.
    Gated {
        first: Vec<u8>,
        gate: Receiver<()>,
        rest: Vec<u8>,
    },
    /// The same SSE event every few milliseconds until the client hangs up.
    Drip(Vec<u8>),
}

/// A fake OpenAI server that can hold a stream open (also the chat page's
/// upstream, `ui.rs`).
pub(crate) struct PacedFake {
    pub(crate) base_url: String,
    requests: Arc<Mutex<Vec<Value>>>,
    stop: Arc<AtomicBool>,
    port: u16,
    thread: Option<JoinHandle<()>>,
}

impl PacedFake {
    pub(crate) fn start(script: Vec<Paced>) -> PacedFake {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind paced fake");
        let port = listener.local_addr().expect("local addr").port();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let script = Arc::new(Mutex::new(VecDeque::from(script)));
        let thread = {
            let (requests, stop) = (requests.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let (requests, script) = (requests.clone(), script.clone());
                    std::thread::spawn(move || serve_one(stream, &requests, &script));
                }
            })
        };
        PacedFake {
            base_url: format!("http://127.0.0.1:{port}/v1"),
            requests,
            stop,
            port,
            thread: Some(thread),
        }
    }

    fn requests(&self) -> Vec<Value> {
        self.requests.lock().expect("requests lock").clone()
    }
}

impl Drop for PacedFake {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve_one(stream: TcpStream, requests: &Mutex<Vec<Value>>, script: &Mutex<VecDeque<Paced>>) {
    let mut reader = BufReader::new(stream.try_clone().expect("clone stream"));
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let lower = line.to_ascii_lowercase();
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
        if line == "\r\n" {
            break;
        }
    }
    let mut body = vec![0u8; length];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    requests
        .lock()
        .expect("requests lock")
        .push(serde_json::from_slice(&body).unwrap_or(Value::Null));
    let reply = script.lock().expect("script lock").pop_front();
    let _ = respond(stream, reply);
}

fn respond(mut stream: TcpStream, reply: Option<Paced>) -> std::io::Result<()> {
    stream.write_all(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
          Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
    )?;
    let mut send = |bytes: &[u8]| -> std::io::Result<()> {
        write!(stream, "{:x}\r\n", bytes.len())?;
        stream.write_all(bytes)?;
        stream.write_all(b"\r\n")?;
        stream.flush()
    };
    match reply {
        Some(Paced::Whole(body)) => send(&body)?,
        Some(Paced::Gated { first, gate, rest }) => {
            send(&first)?;
            let _ = gate.recv();
            send(&rest)?;
        }
        Some(Paced::Drip(event)) => {
            // The fake's own pacing, like a slow model: it stops when shepherd hangs up.
            for _ in 0..2000 {
                send(&event)?;
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        None => send(b"data: [DONE]\n\n")?,
    }
    stream.write_all(b"0\r\n\r\n")
}

fn sse(chunks: &[Value]) -> Vec<u8> {
    Canned::sse(chunks).body
}

/// SSE events without the final `[DONE]`, for the first part of a gated stream.
fn sse_events(chunks: &[Value]) -> Vec<u8> {
    chunks
        .iter()
        .flat_map(|c| format!("data: {c}\n\n").into_bytes())
        .collect()
}

/// shepherd running in a pane of its own tmux server.
pub(crate) struct Tmux {
    socket: String,
}

impl Tmux {
    pub(crate) fn start(sandbox: &Sandbox, args: &[&str]) -> Tmux {
        Tmux::launch(sandbox, &[], args)
    }

    /// Like [`Tmux::start`], but shepherd starts only at [`Tmux::release`], and
    /// the pane stays on screen after it exits: time to attach
    /// [`Tmux::pipe_output_to`] before a one-shot run writes anything.
    pub(crate) fn start_held(sandbox: &Sandbox, args: &[&str]) -> Tmux {
        let held = ["sh", "-c", "read _ && exec \"$@\"", "sh"];
        let tmux = Tmux::launch(sandbox, &held, args);
        tmux.run(&["set-option", "-w", "-t", "t", "remain-on-exit", "on"]);
        tmux
    }

    /// Starts a shepherd held by [`Tmux::start_held`].
    pub(crate) fn release(&self) {
        self.key("Enter");
    }

    /// Appends every byte the pane's program writes from now on to `path`,
    /// before the terminal interprets it.
    pub(crate) fn pipe_output_to(&self, path: &std::path::Path) {
        let command = format!("cat >> '{}'", path.display());
        self.run(&["pipe-pane", "-O", "-t", "t", &command]);
    }

    /// The screen with wrapped lines joined, so a long line can be matched whole.
    pub(crate) fn joined_screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-J", "-t", "t"])
    }

    /// Runs `prefix... env -i ENV... shepherd args...` in a new pane.
    fn launch(sandbox: &Sandbox, prefix: &[&str], args: &[&str]) -> Tmux {
        static COUNTER: AtomicU32 = AtomicU32::new(0);
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let tmux = Tmux {
            socket: format!("shepherd-it-{}-{n}", std::process::id()),
        };
        let root = sandbox.root.path();
        let env = [
            format!("HOME={}", root.join("home").display()),
            format!("XDG_CONFIG_HOME={}", sandbox.config_dir().display()),
            format!("XDG_STATE_HOME={}", root.join("home/state").display()),
            format!("PATH={}", std::env::var("PATH").unwrap_or_default()),
            "TERM=xterm-256color".to_string(),
            "NO_COLOR=1".to_string(),
        ];
        let work = sandbox.work();
        let mut command = vec!["-f", "/dev/null", "new-session", "-d", "-s", "t"];
        command.extend([
            "-x",
            "100",
            "-y",
            "30",
            "-c",
            work.to_str().expect("utf-8 path"),
        ]);
        command.extend_from_slice(prefix);
        command.extend(["env", "-i"]);
        command.extend(env.iter().map(String::as_str));
        command.push(env!("CARGO_BIN_EXE_shepherd"));
        command.extend_from_slice(args);
        tmux.run(&command);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let output = Command::new("tmux")
            .arg("-L")
            .arg(&self.socket)
            .args(args)
            .output()
            .expect("run tmux (is it installed? `make test` installs it)");
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    pub(crate) fn screen(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "t"])
    }

    pub(crate) fn type_text(&self, text: &str) {
        self.run(&["send-keys", "-t", "t", "-l", text]);
    }

    pub(crate) fn key(&self, name: &str) {
        self.run(&["send-keys", "-t", "t", name]);
    }

    fn paste(&self, text: &str) {
        self.run(&["set-buffer", "-b", "p", text]);
        self.run(&["paste-buffer", "-p", "-b", "p", "-t", "t"]);
    }

    /// Waits until the screen satisfies `condition`; panics with the screen if it never does.
    pub(crate) fn wait_for(&self, what: &str, condition: impl Fn(&str) -> bool) {
        let held = poll_until(SCREEN_DEADLINE, || condition(&self.screen()));
        assert!(
            held,
            "timed out waiting for {what}; screen:\n{}",
            self.screen()
        );
    }

    pub(crate) fn wait_text(&self, text: &str) {
        self.wait_for(text, |screen| screen.contains(text));
    }

    /// The last non-blank line of the screen.
    fn last_line(&self) -> String {
        let screen = self.screen();
        screen
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .trim_end()
            .to_string()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.run(&["kill-server"]);
    }
}

pub(crate) fn fake_args<'a>(base_url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec!["--backend", "openai", "--api-base", base_url, "-m", "test"];
    all.extend_from_slice(extra);
    all
}

fn last_user_content(body: &Value) -> String {
    let messages = body["messages"].as_array().expect("messages");
    let user = messages.iter().rev().find(|m| m["role"] == "user");
    user.and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn repl_streams_answers_shows_tool_lines_and_recalls_history() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_ls",
            "list_directory",
            json!({"path": "."}),
        )),
        Canned::sse(&text_stream(&["There are ", "two files ✓"])),
        Canned::sse(&text_stream(&["Asked again."])),
    ]);
    let sandbox = Sandbox::new("repl");
    std::fs::write(sandbox.work().join("a.txt"), "a").unwrap();
    let tmux = Tmux::start(
        &sandbox,
        &fake_args(&fake.base_url, &["--context-size", "4096"]),
    );
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    // The REPL says what it talks to before the first question.
    let opening = tmux.screen();
    assert!(
        opening.contains("test (openai, context 4096 tokens); /help lists the commands"),
        "{opening}"
    );
    tmux.type_text("what files?");
    tmux.key("Enter");
    tmux.wait_text("There are two files ✓");
    let screen = tmux.screen();
    assert!(screen.contains("* list_directory(path=.)"), "{screen}");
    assert!(screen.contains("  ✓ "), "{screen}");
    tmux.wait_for("a fresh prompt", |s| s.trim_end().ends_with('>'));
    tmux.key("Up");
    tmux.wait_for("the recalled prompt", |_| {
        tmux.last_line() == "> what files?"
    });
    tmux.key("Enter");
    tmux.wait_text("Asked again.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    assert_eq!(last_user_content(&requests[2].body), "what files?");
    tmux.type_text("/quit");
    tmux.key("Enter");
    let history = sandbox.root.path().join("home/state/shepherd/history");
    assert!(poll_until(SCREEN_DEADLINE, || std::fs::read_to_string(
        &history
    )
    .is_ok_and(|h| h == "what files?\n/quit\n")));
}

#[test]
fn escape_mid_stream_cancels_and_the_next_prompt_works() {
    let fake = PacedFake::start(vec![
        Paced::Drip(sse_events(&[chunk(json!({"content": "tok "}), None)])),
        Paced::Whole(sse(&text_stream(&["Fine again."]))),
    ]);
    let sandbox = Sandbox::new("cancel");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &[]));
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.type_text("talk forever");
    tmux.key("Enter");
    tmux.wait_text("tok tok");
    tmux.key("Escape");
    tmux.wait_text("[Cancelled]");
    tmux.wait_for("a fresh prompt", |_| tmux.last_line() == ">");
    tmux.type_text("and now?");
    tmux.key("Enter");
    tmux.wait_text("Fine again.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(last_user_content(&requests[1]), "and now?");
}

#[test]
fn pasted_three_line_block_is_one_prompt() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["Got three lines."]))]);
    let sandbox = Sandbox::new("paste");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &[]));
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.paste("first line\nsecond ✓\nthird line");
    tmux.wait_text("first line⏎second ✓⏎third line");
    tmux.key("Enter");
    tmux.wait_text("Got three lines.");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        last_user_content(&requests[0].body),
        "first line\nsecond ✓\nthird line"
    );
}

#[test]
fn provider_next_switches_backend_and_keeps_the_conversation() {
    let first = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["From A."]))]);
    let second = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["From B."]))]);
    let sandbox = Sandbox::new("provider");
    let config = json!({"providers": [
        {"name": "alpha", "type": "openai", "model": "model-a", "base_url": first.base_url, "priority": 1},
        {"name": "beta", "type": "openai", "model": "model-b", "base_url": second.base_url, "priority": 2},
    ]});
    let dir = sandbox.config_dir().join("shepherd");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let tmux = Tmux::start(&sandbox, &[]);
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.type_text("hello");
    tmux.key("Enter");
    tmux.wait_text("From A.");
    tmux.type_text("/provider next");
    tmux.key("Enter");
    tmux.wait_text("[Switched to beta | model-b]");
    tmux.type_text("again");
    tmux.key("Enter");
    tmux.wait_text("From B.");
    let requests = second.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].body["model"], "model-b");
    let contents: Vec<&str> = requests[0].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.contains(&"hello") && contents.contains(&"From A."),
        "{contents:?}"
    );
}

#[test]
fn tui_shows_status_bar_and_answers_queued_input_next() {
    let (release, gate): (Sender<()>, Receiver<()>) = crossbeam_channel::bounded(1);
    let mut rest = text_stream(&[" done."]);
    rest.remove(0);
    let mut second = text_stream(&["Second answer."]);
    second.push(usage_chunk(50, 3));
    let fake = PacedFake::start(vec![
        Paced::Gated {
            first: sse_events(&text_stream(&["Working"])[..2]),
            gate,
            rest: sse(&rest),
        },
        Paced::Whole(sse(&second)),
    ]);
    let sandbox = Sandbox::new("tui");
    let tmux = Tmux::start(
        &sandbox,
        &fake_args(&fake.base_url, &["--tui", "--context-size", "4096"]),
    );
    tmux.wait_text("cmdline | test");
    // The context's size shows before the first reply.
    tmux.wait_for("the context size", |s| s.contains("0/4096 tokens"));
    tmux.type_text("first question");
    tmux.key("Enter");
    tmux.wait_text("Working");
    tmux.type_text("typed ahead");
    tmux.key("Enter");
    tmux.wait_text("queued: typed ahead");
    assert_eq!(fake.requests().len(), 1);
    release.send(()).unwrap();
    tmux.wait_text("Second answer.");
    tmux.wait_for("the token count", |s| s.contains("53/4096 tokens"));
    let screen = tmux.screen();
    assert!(screen.contains("Working done."), "{screen}");
    assert!(!screen.contains("queued:"), "{screen}");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(last_user_content(&requests[1]), "typed ahead");
    // Leaving restores the normal screen.
    tmux.key("C-d");
    tmux.wait_for("the TUI to leave", |s| !s.contains("cmdline | test"));
}

#[test]
fn continue_restores_the_last_session_in_this_directory() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["Noted."])),
        Canned::sse(&text_stream(&["You said remember me."])),
    ]);
    let sandbox = Sandbox::new("continue");
    let args = fake_args(&fake.base_url, &["--continue"]);
    {
        let tmux = Tmux::start(&sandbox, &args);
        tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
        tmux.type_text("remember me");
        tmux.key("Enter");
        tmux.wait_text("Noted.");
        tmux.key("C-d");
        tmux.wait_for("shepherd to exit", |s| s.is_empty());
    }
    // The session lives in the store under the XDG data directory.
    let sessions = sandbox
        .root
        .path()
        .join("home/.local/share/shepherd/sessions");
    let saved: Vec<_> = std::fs::read_dir(&sessions)
        .expect("the sessions directory")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        saved.len() == 1 && saved[0].starts_with("last-") && saved[0].ends_with(".json"),
        "{saved:?}"
    );
    let tmux = Tmux::start(&sandbox, &args);
    tmux.wait_text("[Continuing: 2 messages restored]");
    tmux.type_text("what did I say?");
    tmux.key("Enter");
    tmux.wait_text("You said remember me.");
    let requests = fake.requests();
    let contents: Vec<&str> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.contains(&"remember me") && contents.contains(&"Noted."),
        "{contents:?}"
    );
}

#[test]
fn repl_asks_before_a_write_and_a_denial_reaches_the_model() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_no",
            "write",
            json!({"file_path": "denied.txt", "content": "x"}),
        )),
        Canned::sse(&text_stream(&["Understood, nothing written."])),
        Canned::sse(&tool_call_stream(
            "call_yes",
            "write",
            json!({"file_path": "allowed.txt", "content": "fine"}),
        )),
        Canned::sse(&text_stream(&["Written."])),
    ]);
    let sandbox = Sandbox::new("approve");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &[]));
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.type_text("write a file");
    tmux.key("Enter");
    tmux.wait_text("? allow write? [y]es / [n]o / [a]lways");
    assert_eq!(fake.requests().len(), 1, "the model waits for the answer");
    tmux.type_text("n");
    tmux.wait_text("Understood, nothing written.");
    assert!(tmux.screen().contains("→ denied"), "{}", tmux.screen());
    assert!(!sandbox.work().join("denied.txt").exists());
    let requests = fake.requests();
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tool = messages.last().unwrap();
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_call_id"], "call_no");
    assert!(
        tool["content"]
            .as_str()
            .unwrap()
            .contains("The user denied this call to 'write'"),
        "{tool}"
    );

    tmux.wait_for("a fresh prompt", |_| tmux.last_line() == ">");
    tmux.type_text("now write it");
    tmux.key("Enter");
    tmux.wait_for("the second question", |s| {
        s.matches("? allow write?").count() == 2
    });
    tmux.type_text("y");
    tmux.wait_text("Written.");
    let written = std::fs::read_to_string(sandbox.work().join("allowed.txt"));
    assert_eq!(written.ok().as_deref(), Some("fine"));
}

#[test]
fn tui_always_allows_a_tool_for_the_rest_of_the_session() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_1",
            "write",
            json!({"file_path": "one.txt", "content": "1"}),
        )),
        Canned::sse(&text_stream(&["First written."])),
        Canned::sse(&tool_call_stream(
            "call_2",
            "write",
            json!({"file_path": "two.txt", "content": "2"}),
        )),
        Canned::sse(&text_stream(&["Second written."])),
    ]);
    let sandbox = Sandbox::new("tui-approve");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &["--tui"]));
    tmux.wait_text("cmdline | test");
    tmux.type_text("write one");
    tmux.key("Enter");
    tmux.wait_text("? allow write?");
    tmux.type_text("a");
    tmux.wait_text("First written.");
    assert!(sandbox.work().join("one.txt").exists());
    tmux.type_text("write two");
    tmux.key("Enter");
    tmux.wait_text("Second written.");
    assert!(sandbox.work().join("two.txt").exists());
    let screen = tmux.screen();
    assert_eq!(screen.matches("? allow write?").count(), 1, "{screen}");
    let audit =
        std::fs::read_to_string(sandbox.root.path().join("home/state/shepherd/audit.jsonl"))
            .expect("audit log");
    let by: Vec<String> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["decided_by"].to_string())
        .collect();
    assert_eq!(by, ["\"user\"", "\"session\""]);
}

#[test]
fn save_sessions_and_load_round_trip_in_the_repl() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["Hi there."])),
        Canned::sse(&text_stream(&["Back again."])),
    ]);
    let sandbox = Sandbox::new("save-load");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &[]));
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.type_text("hello");
    tmux.key("Enter");
    tmux.wait_text("Hi there.");
    for (line, expected) in [
        ("/save ../escape", "session id '../escape' contains '..'"),
        ("/save mychat", "[Saved as mychat"),
        ("/clear", "[Conversation cleared]"),
        ("/sessions", "2 msgs  hello"),
        ("/load mychat", "[Loaded mychat: 2 messages]"),
        ("/load nothing", "no saved session 'nothing'"),
        ("/profile", "* default (all tools)"),
    ] {
        tmux.type_text(line);
        tmux.key("Enter");
        tmux.wait_text(expected);
    }
    tmux.type_text("again");
    tmux.key("Enter");
    tmux.wait_text("Back again.");
    let requests = fake.requests();
    let contents: Vec<&str> = requests[1].body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.ends_with(&["hello", "Hi there.", "again"]),
        "the loaded conversation reached the model: {contents:?}"
    );
    let file = sandbox
        .root
        .path()
        .join("home/.local/share/shepherd/sessions/mychat.json");
    let saved: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    assert_eq!(saved["version"], 1);
    assert_eq!(saved["provider"], "cmdline");
    assert!(!sandbox
        .root
        .path()
        .join("home/.local/share/shepherd/escape.json")
        .exists());
}

#[test]
fn tools_command_shows_each_mcp_server() {
    let Some(python) = crate::mcp::python() else {
        return;
    };
    let sandbox = Sandbox::new("tmux-mcp");
    let server = crate::mcp::stdio_server(&python, &crate::mcp::marker("tmux"), json!({}));
    crate::mcp::write_config(&sandbox, json!({"fx": server}));
    let fake = FakeOpenAi::start(Vec::new());
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &[]));
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    // The server starts in the background: ask until /tools reports it ready.
    let ready = (0..10).any(|_| {
        tmux.type_text("/tools");
        tmux.key("Enter");
        poll_until(Duration::from_secs(3), || {
            tmux.screen().contains("fx (stdio): ready, 8 tools")
        })
    });
    let screen = tmux.screen();
    assert!(ready, "{screen}");
    assert!(screen.contains("MCP servers:"), "{screen}");
    assert!(screen.contains("fx:echo"), "{screen}");
}

//! The chat page (`GET /`): served public with strict headers by both
//! servers, and driven in a real browser (headless Chromium through Selenium,
//! `tests/ui/chat_page.py`) against `shepherd --cliserver` and a fake
//! upstream: a prompt streams an answer and a tool call that needs approval,
//! a second tab follows `/updates`, a long answer is cancelled.
//!
//! `make test` installs `chromium`, `chromium-driver` and `selenium` and sets
//! `SHEPHERD_TEST_PYTHON`; with it set, a missing browser fails the test.
//! Without it (a bare `cargo test`), the browser test is skipped when
//! `python3` cannot drive Chromium. Screenshots land in `target/ui-test/`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::fake_openai::{chunk, text_stream, tool_call_stream, usage_chunk, Canned, FakeOpenAi};
use crate::harness::{Sandbox, TOKEN};
use crate::terminal::{Paced, PacedFake};

const SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/ui/chat_page.py");

/// A running server, killed on drop.
struct Server {
    child: Child,
    addr: String,
    log: Arc<Mutex<String>>,
    sandbox: Sandbox,
}

impl Server {
    fn start(tag: &str, args: &[&str]) -> Server {
        let sandbox = Sandbox::new(tag);
        let mut child = sandbox.spawn(args);
        let (address, log) = crate::harness::wait_listening(&mut child);
        Server {
            child,
            addr: address.trim_start_matches("http://").to_string(),
            log,
            sandbox,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The whole answer to a raw request.
fn raw(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = Vec::new();
    let _ = stream.read_to_end(&mut out);
    String::from_utf8_lossy(&out).into_owned()
}

fn get(addr: &str, path: &str, extra: &str) -> String {
    raw(
        addr,
        &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{extra}\r\n"),
    )
}

/// Checks the page and its files on one server: public, strict headers,
/// GET only, while the API routes still need the token.
fn check_page_served(server: &Server, api_path: &str) {
    let addr = &server.addr;
    let page = get(addr, "/", "");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    for header in [
        "Content-Type: text/html; charset=utf-8",
        "Content-Security-Policy: default-src 'self'; connect-src 'self'; script-src 'self'; \
         style-src 'self';",
        "frame-ancestors 'none'",
        "X-Frame-Options: DENY",
        "X-Content-Type-Options: nosniff",
        "Referrer-Policy: no-referrer",
    ] {
        assert!(page.contains(header), "{header} missing: {page}");
    }
    assert!(page.contains("<script src=\"/ui/app.js\""), "{page}");
    let script = get(addr, "/ui/app.js", "");
    assert!(script.starts_with("HTTP/1.1 200"), "{script}");
    assert!(script.contains("Content-Type: text/javascript"), "{script}");
    let style = get(addr, "/ui/app.css", "");
    assert!(style.contains("Content-Type: text/css"), "{style}");
    let foreign = get(addr, "/", "Origin: http://evil.example\r\n");
    assert!(foreign.starts_with("HTTP/1.1 403"), "{foreign}");
    let post = raw(
        addr,
        &format!("POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\n\r\n"),
    );
    assert!(post.starts_with("HTTP/1.1 405"), "{post}");
    let api = get(addr, api_path, "");
    assert!(api.starts_with("HTTP/1.1 401"), "{api_path}: {api}");
    // The page's own calls: same origin, with the token.
    let own = get(
        addr,
        api_path,
        &format!("Origin: http://{addr}\r\nAuthorization: Bearer {TOKEN}\r\n"),
    );
    assert!(own.starts_with("HTTP/1.1 200"), "{api_path}: {own}");
}

#[test]
fn both_servers_serve_the_page_public_with_strict_headers() {
    let fake = FakeOpenAi::start(Vec::new());
    let common = [
        "--port",
        "0",
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
        "--auth-token",
        TOKEN,
    ];
    let cli = Server::start("ui-cli", &[&["--cliserver"], &common[..]].concat());
    check_page_served(&cli, "/session");
    let api = Server::start("ui-api", &[&["--server"], &common[..]].concat());
    check_page_served(&api, "/v1/models");
}

/// The upstream of the browser test: a `write` call (asks for approval), an
/// answer with thinking, markup and usage, text that never ends, then the
/// answer to a message with an attached image.
fn browser_script() -> Vec<Paced> {
    let call = tool_call_stream(
        "call_ui",
        "write",
        json!({"file_path": "from-the-page.txt", "content": "written after Allow"}),
    );
    let answer = vec![
        chunk(json!({"role": "assistant", "content": ""}), None),
        chunk(json!({"reasoning_content": "the user wants a file"}), None),
        chunk(json!({"content": "Done: "}), None),
        chunk(
            json!({"content": "<img src=x onerror=\"document.title='pwned'\">"}),
            None,
        ),
        chunk(json!({}), Some("stop")),
        timed(usage_chunk(21, 7)),
    ];
    let story = format!("data: {}\n\n", chunk(json!({"content": "story "}), None));
    let picture = text_stream(&["I see a small ", "picture."]);
    vec![
        Paced::Whole(Canned::sse(&call).body),
        Paced::Whole(Canned::sse(&answer).body),
        Paced::Drip(story.into_bytes()),
        Paced::Whole(Canned::sse(&picture).body),
    ]
}

/// `chunk` with llama-server's `timings`, so the page has a speed to show.
fn timed(mut chunk: serde_json::Value) -> serde_json::Value {
    chunk["timings"] = json!({
        "prompt_n": 21, "prompt_ms": 50.0, "prompt_per_second": 420.0,
        "predicted_n": 7, "predicted_ms": 50.0, "predicted_per_second": 140.0,
    });
    chunk
}

/// The Python that drives Chromium: `SHEPHERD_TEST_PYTHON` (then it must
/// work), else `python3` when it can.
fn browser_python() -> Option<String> {
    let required = std::env::var("SHEPHERD_TEST_PYTHON").ok();
    let python = required.clone().unwrap_or_else(|| "python3".into());
    let has_selenium = Command::new(&python)
        .args(["-c", "import selenium"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let has_browser = std::path::Path::new("/usr/bin/chromedriver").exists()
        || std::env::var_os("SHEPHERD_CHROMEDRIVER").is_some();
    match (has_selenium && has_browser, required) {
        (true, _) => Some(python),
        (false, Some(_)) => panic!(
            "{python} cannot drive Chromium (selenium: {has_selenium}, chromedriver: \
             {has_browser}); `make test` installs both"
        ),
        (false, None) => {
            eprintln!("skipped: no selenium or chromedriver (run `make test`)");
            None
        }
    }
}

/// `shepherd SERVER_FLAG` against the paced fake `upstream`, with the tests' token.
fn start_with(tag: &str, server_flag: &str, upstream: &PacedFake) -> Server {
    Server::start(
        tag,
        &[
            server_flag,
            "--port",
            "0",
            "--backend",
            "openai",
            "--api-base",
            &upstream.base_url,
            "-m",
            "test",
            "--auth-token",
            TOKEN,
        ],
    )
}

/// Runs `chat_page.py MODE` against `server`; panics with its output (and
/// the server's log) when it fails. Returns the screenshot folder.
fn run_browser(python: &str, mode: &str, server: &Server) -> PathBuf {
    let out_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/ui-test");
    let output = Command::new(python)
        .arg(SCRIPT)
        .arg(mode)
        .arg(format!("http://{}", server.addr))
        .arg(TOKEN)
        .arg(&out_dir)
        .output()
        .expect("run the browser test");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "browser test ({mode}) failed (screenshots in {}):\n{stdout}\n{stderr}\nserver log:\n{}",
        out_dir.display(),
        server.log.lock().unwrap()
    );
    out_dir
}

#[test]
fn chat_page_in_chromium_streams_approves_follows_and_cancels() {
    let Some(python) = browser_python() else {
        return;
    };
    let fake = PacedFake::start(browser_script());
    let server = start_with("ui-browser", "--cliserver", &fake);
    let out_dir = run_browser(&python, "cli", &server);
    let written = server.sandbox.work().join("from-the-page.txt");
    assert_eq!(
        std::fs::read_to_string(&written).ok().as_deref(),
        Some("written after Allow"),
        "Allow in the page ran the tool"
    );
    assert!(out_dir.join("chat.png").exists());
}

#[test]
fn chat_page_in_chromium_on_the_api_server_streams_and_cancels() {
    let Some(python) = browser_python() else {
        return;
    };
    let script = browser_script().into_iter().skip(1).collect();
    let fake = PacedFake::start(script);
    let server = start_with("ui-browser-api", "--server", &fake);
    let out_dir = run_browser(&python, "api", &server);
    assert!(out_dir.join("api.png").exists());
}

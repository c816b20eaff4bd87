//! Ollama's API on `shepherd --server` with SmolLM2: the official `ollama`
//! Python package (chat and generate, whole and streamed, tools, `format`, the
//! model routes, embeddings, a wrong model; pull from a local file server,
//! copy and delete in the models directory), and from Rust the NDJSON framing
//! of a stream read off a plain socket, Ollama's error shape and the token.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::Command;
use std::time::Duration;

use serde_json::{json, Value};

use crate::api_server::ApiServer;

const TOKEN: &str = "t0ken";

/// The Python with the `ollama` package: `SHEPHERD_TEST_PYTHON` (then a missing
/// package fails the test), else `python3` when it has the package; `None`: skip.
fn python_with_ollama() -> Option<String> {
    if let Ok(python) = std::env::var("SHEPHERD_TEST_PYTHON") {
        return Some(python);
    }
    let found = Command::new("python3")
        .args(["-c", "import ollama"])
        .output()
        .is_ok_and(|o| o.status.success());
    found.then(|| "python3".to_string())
}

#[test]
fn the_official_ollama_client_works_against_smollm2() {
    let Some(python) = python_with_ollama() else {
        eprintln!("skipped: python3 lacks the ollama package and SHEPHERD_TEST_PYTHON is not set (make openai-py installs it)");
        return;
    };
    let server = ApiServer::with_model(&["--context-size", "2048", "--auth-token", TOKEN]);
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/ollama_client.py");
    let output = Command::new(python)
        .arg(script)
        .env("OLLAMA_HOST", server.url(""))
        .env("OLLAMA_API_KEY", TOKEN)
        .env("SHEPHERD_MODELS_DIR", server.models_dir())
        .env("SHEPHERD_SERVED_MODEL", crate::api_server::test_model())
        .output()
        .expect("run python");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("all checks passed"),
        "client failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        server.log()
    );
}

/// One request on a plain socket, the whole answer read: status line and
/// headers (lower case), and the body with its chunked framing removed.
fn raw_request(
    server: &ApiServer,
    method: &str,
    path: &str,
    body: &str,
    token: Option<&str>,
) -> (String, String) {
    let addr = server.url("").trim_start_matches("http://").to_string();
    let mut stream = TcpStream::connect(&addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    let auth = token.map_or(String::new(), |t| format!("Authorization: Bearer {t}\r\n"));
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8(answer).expect("UTF-8 answer");
    let (head, body) = text.split_once("\r\n\r\n").expect("a head");
    let head = head.to_ascii_lowercase();
    let body = if head.contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    (head, body)
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n").expect("a chunk size");
        let size = usize::from_str_radix(size.trim(), 16).expect("hex size");
        if size == 0 {
            return out;
        }
        out.push_str(&rest[..size]);
        body = rest[size..]
            .strip_prefix("\r\n")
            .expect("CRLF after a chunk");
    }
}

#[test]
fn a_chat_stream_is_one_json_object_a_line_ending_with_done() {
    let server = ApiServer::with_model(&["--context-size", "2048", "--auth-token", TOKEN]);
    let body = json!({
        "model": "",
        "messages": [{"role": "user", "content": "Count from 1 to 5."}],
        "options": {"temperature": 0, "num_predict": 12}
    });
    let (head, ndjson) = raw_request(&server, "POST", "/api/chat", &body.to_string(), Some(TOKEN));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        head.contains("content-type: application/x-ndjson"),
        "{head}"
    );
    assert!(ndjson.ends_with('\n'), "{ndjson:?}");
    let lines: Vec<Value> = ndjson
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}")))
        .collect();
    let (last, parts) = lines.split_last().expect("lines");
    assert!(!parts.is_empty(), "{ndjson}");
    for part in parts {
        assert_eq!(part["done"], json!(false), "{part}");
        assert_eq!(part["message"]["role"], json!("assistant"), "{part}");
        assert!(
            part["created_at"]
                .as_str()
                .is_some_and(|t| t.ends_with('Z')),
            "{part}"
        );
    }
    assert_eq!(last["done"], json!(true), "{last}");
    assert_eq!(
        last["model"],
        json!("SmolLM2-135M-Instruct.Q4_1.gguf"),
        "{last}"
    );
    assert!(
        ["stop", "length"].contains(&last["done_reason"].as_str().unwrap_or("")),
        "{last}"
    );
    for figure in [
        "total_duration",
        "prompt_eval_count",
        "eval_count",
        "eval_duration",
    ] {
        assert!(
            last[figure].as_u64().is_some_and(|n| n > 0),
            "{figure}: {last}"
        );
    }
    for figure in ["load_duration", "prompt_eval_duration"] {
        assert!(last[figure].as_u64().is_some(), "{figure}: {last}");
    }

    // Ollama's error shape: a wrong model, a refused field, a route not served.
    let wrong = json!({"model": "llama3:8b", "messages": [{"role": "user", "content": "hi"}]});
    let (head, answer) = raw_request(
        &server,
        "POST",
        "/api/chat",
        &wrong.to_string(),
        Some(TOKEN),
    );
    assert!(head.starts_with("http/1.1 404"), "{head}");
    assert_eq!(
        serde_json::from_str::<Value>(&answer).unwrap(),
        json!({"error": "model \"llama3:8b\" not found, try pulling it first"})
    );
    let images = json!({"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]});
    let (head, answer) = raw_request(
        &server,
        "POST",
        "/api/chat",
        &images.to_string(),
        Some(TOKEN),
    );
    assert!(head.starts_with("http/1.1 400"), "{head}");
    assert!(
        answer.contains("'messages[0].images[0]': unsupported image type"),
        "{answer}"
    );
    // A pull names a URL: a bare name is a 400 that says so, in Ollama's shape.
    let bare = json!({"model": "llama3.2"}).to_string();
    let (head, answer) = raw_request(&server, "POST", "/api/pull", &bare, Some(TOKEN));
    assert!(head.starts_with("http/1.1 400"), "{head}");
    let error = serde_json::from_str::<Value>(&answer).unwrap()["error"].clone();
    assert!(
        error.as_str().is_some_and(|e| e.contains("from URLs")),
        "{answer}"
    );
    let (head, answer) = raw_request(&server, "POST", "/api/push", "{}", Some(TOKEN));
    assert!(head.starts_with("http/1.1 501"), "{head}");
    assert!(
        serde_json::from_str::<Value>(&answer).unwrap()["error"].is_string(),
        "{answer}"
    );

    // The server's token holds for the Ollama routes, /api/version included.
    let (head, _) = raw_request(&server, "GET", "/api/version", "", None);
    assert!(head.starts_with("http/1.1 401"), "{head}");
    let (head, version) = raw_request(&server, "GET", "/api/version", "", Some(TOKEN));
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(version.contains("\"version\""), "{version}");
}

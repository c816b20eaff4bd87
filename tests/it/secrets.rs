//! Secrets never reach disk or logs: a `--cliserver` run with a configured
//! provider key, a server token, `-d` on every category and the audit log on
//! runs a model-requested `http_request` (an `Authorization` header, an
//! `X-Api-Key` header and `?api_key=`) and a `bash` call whose command line
//! holds tokens. Afterwards no file under its HOME and XDG directories, and
//! not its stderr, holds any planted secret, while the audit log, the saved
//! session and stderr all exist and show `[REDACTED]`.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{text_stream, tool_call_stream, Canned, FakeOpenAi};
use crate::harness::TempDir;

/// In config.json, which lives outside the walked directories.
const PROVIDER_KEY: &str = "sk-planted-provider-key-0123456789";
const SERVER_TOKEN: &str = "planted-server-token-0123456789";
const HEADER_BEARER: &str = "planted-header-bearer-5150";
const HEADER_API_KEY: &str = "planted-x-api-key-5150";
const QUERY_KEY: &str = "planted-query-key-5150";
const BASH_BEARER: &str = "planted-bash-bearer-5150";
const BASH_ENV_TOKEN: &str = "planted-bash-env-token-5150";

const SECRETS: [&str; 7] = [
    PROVIDER_KEY,
    SERVER_TOKEN,
    HEADER_BEARER,
    HEADER_API_KEY,
    QUERY_KEY,
    BASH_BEARER,
    BASH_ENV_TOKEN,
];

/// The directories shepherd may write to; everything under them is checked.
const WALKED: [&str; 5] = ["home", "config", "state", "data", "work"];

/// The model asks for the two tool calls, then answers.
fn script() -> Vec<Canned> {
    let http = json!({
        "url": format!("http://127.0.0.1:9/v1/items?api_key={QUERY_KEY}&page=2"),
        "method": "GET",
        "headers": {"Authorization": format!("Bearer {HEADER_BEARER}"), "X-Api-Key": HEADER_API_KEY},
    });
    // The provider key appears bare: only the registry of configured secrets can catch it.
    let command = format!(
        "GITHUB_TOKEN={BASH_ENV_TOKEN} true -H 'Authorization: Bearer {BASH_BEARER}' \
         {PROVIDER_KEY} && echo ran"
    );
    vec![
        Canned::sse(&tool_call_stream("c1", "http_request", http)),
        Canned::sse(&tool_call_stream("c2", "bash", json!({"command": command}))),
        Canned::sse(&text_stream(&["done"])),
    ]
}

/// A `--cliserver` in `root`, with its stderr lines sent to a channel.
struct Server {
    child: Child,
    address: String,
    stderr: crossbeam_channel::Receiver<String>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(root: &Path, fake: &FakeOpenAi) -> Server {
    let config = root.join("input/config.json");
    std::fs::create_dir_all(config.parent().unwrap()).unwrap();
    let providers = json!({"providers": [{
        "name": "fake", "type": "openai", "base_url": fake.base_url, "model": "test", "api_key": PROVIDER_KEY,
    }]});
    std::fs::write(&config, providers.to_string()).unwrap();
    for dir in WALKED {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_shepherd"))
        .args(["--cliserver", "--port", "0", "-d", "--approve", "all"])
        .args(["--auth-token", SERVER_TOKEN, "-c"])
        .arg(&config)
        .current_dir(root.join("work"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", root.join("home"))
        .env("XDG_CONFIG_HOME", root.join("config"))
        .env("XDG_STATE_HOME", root.join("state"))
        .env("XDG_DATA_HOME", root.join("data"))
        .env("NO_COLOR", "1")
        .envs(std::env::var_os("NO_REDACT").map(|v| ("NO_REDACT", v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn shepherd");
    let stderr = lines_of(child.stderr.take().expect("piped stderr"));
    let address = wait_address(&stderr);
    Server {
        child,
        address,
        stderr,
    }
}

/// Sends each line of `pipe` to the returned channel, which disconnects at EOF.
fn lines_of(pipe: impl std::io::Read + Send + 'static) -> crossbeam_channel::Receiver<String> {
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    rx
}

fn wait_address(stderr: &crossbeam_channel::Receiver<String>) -> String {
    let mut seen = String::new();
    while let Ok(line) = stderr.recv_timeout(Duration::from_secs(30)) {
        seen.push_str(&line);
        seen.push('\n');
        if let Some((_, rest)) = line.split_once("listening on ") {
            return rest
                .split_whitespace()
                .next()
                .unwrap_or_default()
                .to_string();
        }
    }
    panic!("no listening line; stderr: {seen}");
}

/// Stops the server and returns all it wrote on stderr.
fn stop(mut server: Server) -> String {
    let _ = server.child.kill();
    let _ = server.child.wait();
    let mut text = String::new();
    loop {
        match server.stderr.recv_timeout(Duration::from_secs(30)) {
            Ok(line) => text.push_str(&(line + "\n")),
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => return text,
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => panic!("stderr never closed"),
        }
    }
}

fn request(server: &Server, prompt: &str) -> Value {
    let config = ureq::Agent::config_builder()
        .proxy(None)
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build();
    let response = ureq::Agent::new_with_config(config)
        .post(format!("{}/request", server.address))
        .header("Authorization", format!("Bearer {SERVER_TOKEN}"))
        .header("Content-Type", "application/json")
        .send(json!({"prompt": prompt}).to_string())
        .expect("request");
    assert_eq!(response.status().as_u16(), 200);
    serde_json::from_str(&response.into_body().read_to_string().unwrap()).unwrap()
}

/// `…/shepherd/run/server-PORT.json`.
fn is_token_file(path: &Path) -> bool {
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    name.starts_with("server-")
        && name.ends_with(".json")
        && path.parent().is_some_and(|p| p.ends_with("shepherd/run"))
}

/// Every file under `dir`, recursively (the server's token file excepted).
fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(files_under(&path));
        } else if is_token_file(&path) {
            // The server's own credential store (0600, this user's; see src/auth.rs):
            // the one file whose job is to hold the server token for its clients.
        } else {
            files.push(path);
        }
    }
    files
}

/// Fails naming the file and the secret if any planted secret is in `text`.
fn assert_clean(what: &str, text: &str) {
    for secret in SECRETS {
        assert!(!text.contains(secret), "{what} holds {secret}:\n{text}");
    }
}

fn read(path: &Path) -> String {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    String::from_utf8_lossy(&bytes).into_owned()
}

#[test]
fn planted_secrets_reach_no_file_and_no_debug_line() {
    let fake = FakeOpenAi::start(script());
    let root = TempDir::new("secrets");
    let server = start(root.path(), &fake);
    let answer = request(&server, "check the service");
    assert_eq!(answer["response"], "done", "{answer}");
    let stderr = stop(server);

    // The run really used the key and ran both calls.
    let requests = fake.requests();
    assert_eq!(requests.len(), 3);
    let bearer = format!("Bearer {PROVIDER_KEY}");
    assert_eq!(requests[0].header("Authorization"), Some(bearer.as_str()));

    let audit = root.path().join("state/shepherd/audit.jsonl");
    let session = root.path().join("data/shepherd/sessions/cliserver-0.json");
    let mut files = Vec::new();
    for dir in WALKED {
        files.extend(files_under(&root.path().join(dir)));
    }
    for file in [&audit, &session] {
        assert!(files.contains(file), "{} was not written", file.display());
        assert!(read(file).contains("[REDACTED]"), "{}", read(file));
    }
    for file in &files {
        assert_clean(&file.display().to_string(), &read(file));
    }
    let audited: Vec<Value> = read(&audit)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    let tools: Vec<&str> = audited.iter().filter_map(|r| r["tool"].as_str()).collect();
    assert_eq!(tools, ["http_request", "bash"]);
    assert_eq!(
        audited[0]["arguments"]["headers"]["Authorization"],
        "Bearer [REDACTED]"
    );

    assert!(stderr.contains("[debug tools] run bash"), "{stderr}");
    assert!(stderr.contains("[REDACTED]"), "{stderr}");
    assert_clean("stderr", &stderr);
}

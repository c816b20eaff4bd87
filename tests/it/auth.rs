//! Who may use shepherd's servers: every route of the cliserver and of
//! `--server --use-tools` (the agent-server routes included) and every
//! tool-server method, against every kind of credential, `Origin` and `Host`,
//! with the servers as a user starts them (no token configured: one is
//! generated). Also: shepherd's own clients find the token without flags,
//! and another Unix user cannot read it.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::fake_openai::{text_stream, Canned, FakeOpenAi};
use crate::harness::{poll_until, runtime_dir, wait_listening, Sandbox};

/// A server started as a user would, killed on drop.
struct Server {
    child: Child,
    /// `127.0.0.1:PORT`.
    addr: String,
    port: u16,
    log: Arc<Mutex<String>>,
    sandbox: Sandbox,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(tag: &str, args: &[&str]) -> Server {
        let sandbox = Sandbox::new(tag);
        let mut child = sandbox.spawn(args);
        let (address, log) = wait_listening(&mut child);
        let addr = address.trim_start_matches("http://").to_string();
        let port = addr.rsplit(':').next().unwrap().parse().unwrap();
        Server {
            child,
            addr,
            port,
            log,
            sandbox,
        }
    }

    /// The token file this server published for its user.
    fn token_file(&self) -> std::path::PathBuf {
        runtime_dir()
            .join("shepherd")
            .join(format!("server-{}.json", self.port))
    }

    /// The generated token, from the published file; checked against the one
    /// printed on stderr.
    fn token(&self) -> String {
        let text = std::fs::read_to_string(self.token_file()).expect("token file");
        let record: Value = serde_json::from_str(&text).expect("token file is JSON");
        assert_eq!(record["port"], self.port, "{record}");
        let token = record["token"].as_str().expect("token").to_string();
        assert_eq!(token.len(), 64, "32 random bytes, hex");
        assert!(
            poll_until(Duration::from_secs(10), || self
                .log
                .lock()
                .unwrap()
                .contains(&token)),
            "the generated token is printed at start"
        );
        token
    }
}

/// The status of a raw request (0 when the connection closed without one).
fn status_of(addr: &str, request: &[u8]) -> u16 {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut head = [0u8; 12];
    match stream.read_exact(&mut head) {
        Ok(()) => String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0),
        Err(_) => 0,
    }
}

/// Every way a request can try to prove who it is.
fn credentials(token: &str) -> Vec<(&'static str, Vec<u8>, bool)> {
    use base64_like::encode;
    vec![
        ("none", Vec::new(), false),
        (
            "wrong token",
            b"Authorization: Bearer 0123456789abcdef\r\n".to_vec(),
            false,
        ),
        (
            "upper-case token",
            format!("Authorization: Bearer {}\r\n", token.to_uppercase()).into_bytes(),
            false,
        ),
        (
            // U+00A0: not HTTP whitespace, so not trimmed away as a plain space is.
            "token with a trailing space",
            format!("Authorization: Bearer {token}\u{a0}\r\n").into_bytes(),
            false,
        ),
        (
            "basic auth",
            format!(
                "Authorization: Basic {}\r\n",
                encode(format!("user:{token}").as_bytes())
            )
            .into_bytes(),
            false,
        ),
        (
            "right token",
            format!("Authorization: Bearer {token}\r\n").into_bytes(),
            true,
        ),
    ]
}

/// The only routes answered without a token: the health check and the chat
/// page with its files (which hold no secret; the page's calls send the token).
const PUBLIC: [&str; 4] = ["/health", "/", "/ui/app.js", "/ui/app.css"];

/// Runs the route × credential × Origin × Host table against one server.
/// Returns how many requests were checked.
fn check_table(server: &Server, token: &str, routes: &[(&str, &str, &str)]) -> usize {
    let loopback_host = server.addr.clone();
    let origins = [
        ("no Origin", String::new(), true),
        (
            "loopback Origin",
            format!("Origin: http://{}\r\n", server.addr),
            true,
        ),
        (
            "foreign Origin",
            "Origin: http://evil.example\r\n".to_string(),
            false,
        ),
    ];
    let hosts = [
        ("loopback Host", loopback_host.as_str(), true),
        ("foreign Host", "evil.example:80", false),
    ];
    let mut checked = 0;
    for (method, path, body) in routes {
        for (cred_name, cred, cred_ok) in credentials(token) {
            for (origin_name, origin, origin_ok) in &origins {
                for (host_name, host, host_ok) in &hosts {
                    let mut request = format!(
                        "{method} {path} HTTP/1.1\r\nHost: {host}\r\n{origin}Content-Type: \
                         application/json\r\nContent-Length: {}\r\n",
                        body.len()
                    )
                    .into_bytes();
                    request.extend_from_slice(&cred);
                    request.extend_from_slice(b"\r\n");
                    request.extend_from_slice(body.as_bytes());
                    let status = status_of(&server.addr, &request);
                    let case =
                        format!("{method} {path} with {cred_name}, {origin_name}, {host_name}");
                    if !host_ok || !origin_ok {
                        assert_eq!(status, 403, "{case}");
                    } else if PUBLIC.contains(path) || cred_ok {
                        assert!(
                            status != 0 && status != 401 && status != 403,
                            "{case}: {status}"
                        );
                    } else {
                        assert_eq!(status, 401, "{case}");
                    }
                    checked += 1;
                }
            }
        }
    }
    checked
}

/// The agent-server routes both the cliserver and `--server --use-tools` mount.
const AGENT_ROUTES: [(&str, &str, &str); 13] = [
    ("GET", "/v1/mcp/servers", ""),
    ("GET", "/v1/profiles", ""),
    ("POST", "/v1/profiles", "{}"),
    ("GET", "/v1/profiles/current", ""),
    ("GET", "/v1/profiles/nope", ""),
    ("PUT", "/v1/profiles/nope", "{}"),
    ("PATCH", "/v1/profiles/nope", "{}"),
    ("DELETE", "/v1/profiles/nope", ""),
    ("POST", "/v1/profiles/nope/activate", ""),
    ("POST", "/v1/tools/call", "{}"),
    ("POST", "/mcp/tools/call", "{}"),
    ("POST", "/v1/emergency-stop", ""),
    ("GET", "/v1/unknown", ""),
];

fn cliserver_args(fake: &FakeOpenAi) -> Vec<&str> {
    vec![
        "--cliserver",
        "--port",
        "0",
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "-m",
        "test",
    ]
}

#[test]
fn every_cliserver_route_needs_the_generated_token() {
    let fake = FakeOpenAi::start(Vec::new());
    let server = Server::start("auth-cli", &cliserver_args(&fake));
    let token = server.token();
    let mut routes = vec![
        ("GET", "/health", ""),
        ("GET", "/", ""),
        ("GET", "/ui/app.js", ""),
        ("GET", "/ui/app.css", ""),
        ("GET", "/status", ""),
        ("GET", "/session", ""),
        ("POST", "/clear", ""),
        ("POST", "/cancel", ""),
        ("POST", "/request", "{}"),
        ("GET", "/updates", ""),
        ("POST", "/approve/1", "{\"decision\":\"allow\"}"),
    ];
    routes.extend(AGENT_ROUTES);
    let checked = check_table(&server, &token, &routes);
    assert_eq!(checked, routes.len() * 6 * 3 * 2);
    // A refusal says how to get in; the token itself is never logged per request.
    let answer = raw_answer(
        &server.addr,
        &format!("GET /status HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr),
    );
    assert!(answer.contains("Authorization: Bearer TOKEN"), "{answer}");
    assert!(
        answer.contains(&format!("server-{}.json", server.port)),
        "{answer}"
    );
    let log = server.log.lock().unwrap().clone();
    assert_eq!(log.matches(&token).count(), 1, "printed once: {log}");
}

#[test]
fn every_api_server_route_needs_the_token_with_use_tools() {
    let fake = FakeOpenAi::start(Vec::new());
    let server = Server::start(
        "auth-api",
        &[
            "--server",
            "--port",
            "0",
            "--use-tools",
            "--backend",
            "openai",
            "--api-base",
            &fake.base_url,
            "-m",
            "test",
        ],
    );
    let token = server.token();
    let mut routes = vec![
        ("GET", "/health", ""),
        ("GET", "/", ""),
        ("GET", "/ui/app.js", ""),
        ("GET", "/ui/app.css", ""),
        ("GET", "/v1/health", ""),
        ("GET", "/metrics", ""),
        ("GET", "/v1/models", ""),
        ("GET", "/v1/models/test", ""),
        ("POST", "/v1/chat/completions", "{}"),
        ("POST", "/v1/messages", "{}"),
        ("POST", "/v1/completions", "{}"),
        ("POST", "/v1/embeddings", "{}"),
        ("POST", "/tokenize", "{}"),
        ("POST", "/detokenize", "{}"),
        ("GET", "/props", ""),
    ];
    routes.extend(AGENT_ROUTES);
    let checked = check_table(&server, &token, &routes);
    assert_eq!(checked, routes.len() * 6 * 3 * 2);
}

#[test]
fn a_plain_api_server_without_tools_stays_open_on_loopback() {
    let fake = FakeOpenAi::start(Vec::new());
    let server = Server::start(
        "auth-plain",
        &[
            "--server",
            "--port",
            "0",
            "--backend",
            "openai",
            "--api-base",
            &fake.base_url,
            "-m",
            "test",
        ],
    );
    assert!(!server.token_file().exists());
    let health = format!("GET /health HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    assert!(
        poll_until(Duration::from_secs(30), || status_of(
            &server.addr,
            health.as_bytes()
        ) == 200),
        "never healthy"
    );
    let request = format!("GET /v1/models HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    assert_eq!(status_of(&server.addr, request.as_bytes()), 200);
    assert!(server.log.lock().unwrap().contains("no token required"));
}

/// One JSON-RPC exchange on a fresh connection: the answers to `lines`, in
/// order, until the server closes.
fn rpc_session(addr: &str, lines: &[Value]) -> Vec<Value> {
    let stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    let mut answers = Vec::new();
    for line in lines {
        if writer.write_all(format!("{line}\n").as_bytes()).is_err() {
            break;
        }
        let mut answer = String::new();
        match reader.read_line(&mut answer) {
            Ok(n) if n > 0 => answers.push(serde_json::from_str(&answer).expect("JSON answer")),
            _ => break,
        }
    }
    answers
}

#[test]
fn every_tool_server_method_needs_the_generated_token() {
    let server = Server::start("auth-tools", &["--toolserver", "--port", "0"]);
    let token = server.token();
    let methods = [
        ("listTools", json!(null)),
        ("executeTool", json!({"name": "get_time", "arguments": {}})),
        ("sideEffecting", json!({"name": "write", "arguments": {}})),
        ("frobnicate", json!(null)),
    ];
    let credentials = [
        ("no auth call", None, false),
        ("wrong token", Some(json!("0123456789abcdef")), false),
        ("upper-case token", Some(json!(token.to_uppercase())), false),
        (
            "token with a trailing space",
            Some(json!(format!("{token} "))),
            false,
        ),
        ("a token that is not a string", Some(json!(12345)), false),
        (
            "basic-style credential",
            Some(json!(format!("Basic user:{token}"))),
            false,
        ),
        ("right token", Some(json!(token)), true),
    ];
    let marker = server.sandbox.work().join("written.txt");
    for (method, params) in &methods {
        for (name, credential, ok) in &credentials {
            let mut lines = Vec::new();
            if let Some(credential) = credential {
                lines.push(json!({"jsonrpc": "2.0", "method": "auth", "params": {"token": credential}, "id": 1}));
            }
            lines.push(json!({"jsonrpc": "2.0", "method": method, "params": params, "id": 2}));
            lines.push(json!({"jsonrpc": "2.0", "method": "executeTool", "params": {"name": "write", "arguments": {"file_path": "written.txt", "content": "x"}}, "id": 3}));
            let answers = rpc_session(&server.addr, &lines);
            let case = format!("{method} with {name}");
            let answered = answers.iter().find(|a| a["id"] == 2);
            if *ok {
                let answer = answered.unwrap_or_else(|| panic!("{case}: {answers:?}"));
                assert_ne!(answer["error"]["code"], -32001, "{case}: {answer}");
            } else {
                assert!(
                    answered.is_none_or(|a| a["error"]["code"] == -32001),
                    "{case}: {answers:?}"
                );
                assert!(
                    answers
                        .iter()
                        .all(|a| a.get("result").is_none() || a["id"] == 1 && a["result"] == false),
                    "{case}: nothing but refusals: {answers:?}"
                );
            }
            // No approver on the tool server: the write is refused even when
            // authenticated, and never runs without authentication.
            assert!(!marker.exists(), "{case}");
        }
    }
}

#[test]
fn shepherds_own_clients_find_the_token_and_other_users_cannot() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["Hello from afar."]))]);
    let server = Server::start("auth-own", &cliserver_args(&fake));
    let token_file = server.token_file();
    let meta = std::fs::metadata(&token_file).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.mode() & 0o777, 0o600, "token file mode");
    let dir_mode = std::fs::metadata(token_file.parent().unwrap())
        .unwrap()
        .mode();
    assert_eq!(dir_mode & 0o777, 0o700, "token directory mode");

    // Without the token, refused; shepherd's own client, with no flags, gets in.
    let request = format!("GET /status HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    assert_eq!(status_of(&server.addr, request.as_bytes()), 401);
    let client = Sandbox::new("auth-own-client");
    let base = format!("http://{}", server.addr);
    let run = client.run(&["--backend", "cli", "--api-base", &base, "-e", "hi"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stdout.contains("Hello from afar."), "{}", run.stdout);

    // Another Unix user cannot read it.
    if !is_root() {
        eprintln!("skipped: another user's view needs root to switch users");
        return;
    }
    let other = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(&token_file)
        .output()
        .expect("setpriv (util-linux)");
    assert!(!other.status.success(), "another user read the token file");
    assert!(
        !String::from_utf8_lossy(&other.stdout).contains(&server.token()),
        "another user read the token"
    );
    // Even with the directories above it open, the file itself is 0600.
    let copy_dir = std::env::temp_dir().join(format!("shepherd-it-tokcopy-{}", std::process::id()));
    std::fs::create_dir_all(&copy_dir).unwrap();
    std::fs::set_permissions(
        &copy_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let copy = copy_dir.join("server.json");
    let _ = std::fs::remove_file(&copy);
    std::process::Command::new("cp")
        .arg("-p")
        .arg(&token_file)
        .arg(&copy)
        .status()
        .unwrap();
    let other = std::process::Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "cat"])
        .arg(&copy)
        .output()
        .unwrap();
    assert!(!other.status.success(), "0600 keeps another user out");
    let _ = std::fs::remove_dir_all(&copy_dir);
}

#[test]
fn no_auth_is_loopback_only_and_warns() {
    let fake = FakeOpenAi::start(Vec::new());
    let mut args = cliserver_args(&fake);
    args.push("--no-auth");
    let server = Server::start("auth-none", &args);
    let request = format!("GET /status HTTP/1.1\r\nHost: {}\r\n\r\n", server.addr);
    assert_eq!(status_of(&server.addr, request.as_bytes()), 200);
    assert!(server.log.lock().unwrap().contains("warning: --no-auth"));
    assert!(!server.token_file().exists());

    let sandbox = Sandbox::new("auth-none-remote");
    for mode in ["--cliserver", "--toolserver"] {
        let run = sandbox.run(
            &[
                mode,
                "--no-auth",
                "--host",
                "0.0.0.0",
                "--port",
                "0",
                "--backend",
                "openai",
                "--api-base",
                &fake.base_url,
                "-m",
                "t",
            ],
            "",
        );
        assert_eq!(run.status, Some(2), "{mode}: {}", run.stderr);
        assert!(run.stderr.contains("loopback only"), "{}", run.stderr);
        assert!(!run.stderr.contains("listening"), "{}", run.stderr);
    }
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

fn raw_answer(addr: &str, request: &str) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    String::from_utf8_lossy(&answer).into_owned()
}

/// Standard base64 for the Basic-auth row (the tests have no base64 crate).
mod base64_like {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

    pub fn encode(bytes: &[u8]) -> String {
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
            for i in 0..4 {
                if i <= chunk.len() {
                    out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
                } else {
                    out.push('=');
                }
            }
        }
        out
    }
}

/// A child process that is not a shepherd server, killed on drop.
struct Bystander(Child);

impl Drop for Bystander {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Which process `pid` is, as a token file records it: the start time (field
/// 22 of /proc/PID/stat, counted after the command name's last ')') and the
/// executable's device and inode.
fn process_of(pid: u32) -> Value {
    use std::os::unix::fs::MetadataExt;
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("/proc/PID/stat");
    let rest = &stat[stat.rfind(')').expect("comm") + 1..];
    let start: u64 = rest.split_whitespace().nth(19).unwrap().parse().unwrap();
    let exe = std::fs::metadata(format!("/proc/{pid}/exe")).expect("/proc/PID/exe");
    json!({"start_time": start, "exe_dev": exe.dev(), "exe_ino": exe.ino()})
}

/// Writes a token file into the shared runtime directory, as a server would.
fn write_token_file(port: u16, address: &str, pid: u32, token: &str, process: Option<Value>) {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let dir = runtime_dir().join("shepherd");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .unwrap();
    let mut record = json!({
        "kind": "server", "address": address, "port": port, "pid": pid, "token": token,
    });
    if let Some(process) = process {
        record["process"] = process;
    }
    let path = dir.join(format!("server-{port}.json"));
    let temp = dir.join(format!(".server-{port}.json.it"));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .unwrap();
    file.write_all(record.to_string().as_bytes()).unwrap();
    drop(file);
    std::fs::rename(&temp, &path).unwrap();
}

/// The regression: a killed server's token file was trusted while any
/// process had its pid, so the token went to whatever listened on the port
/// and `shepherd ps` listed the stranger.
#[test]
fn a_token_file_naming_another_live_process_is_neither_used_nor_listed() {
    let sleeper = Bystander(
        std::process::Command::new("sleep")
            .arg("300")
            .spawn()
            .expect("sleep"),
    );
    let pid = sleeper.0.id();
    let real = process_of(pid);
    let mut later = real.clone();
    later["start_time"] = json!(real["start_time"].as_u64().unwrap() + 1);
    let mut other_program = real.clone();
    other_program["exe_ino"] = json!(real["exe_ino"].as_u64().unwrap() ^ 1);
    let client = Sandbox::new("auth-stale-client");

    // An unrelated server now listens on the port the file names.
    for (case, process) in [
        ("another start time", Some(later.clone())),
        ("another program", Some(other_program.clone())),
        ("an old file that says nothing", None),
    ] {
        let fake = FakeOpenAi::start(Vec::new());
        let port: u16 = fake
            .base_url
            .trim_end_matches("/v1")
            .rsplit(':')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        let secret = format!("persistent-token-{port}");
        write_token_file(
            port,
            &format!("http://127.0.0.1:{port}"),
            pid,
            &secret,
            process,
        );
        let base = format!("http://127.0.0.1:{port}");
        let run = client.run(&["--backend", "cli", "--api-base", &base, "-e", "hi"], "");
        let requests = fake.requests();
        assert!(
            !requests.is_empty(),
            "{case}: the client called: {}",
            run.stderr
        );
        for request in &requests {
            assert!(
                !request.headers.iter().any(|(_, v)| v.contains(&secret)),
                "{case}: the token went to a stranger: {:?}",
                request.headers
            );
        }
    }

    // `shepherd ps` lists only the process that wrote its file, and shows
    // what the file says without obeying it.
    let ports: Vec<std::net::TcpListener> = (0..3)
        .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
        .collect();
    let port = |i: usize| ports[i].local_addr().unwrap().port();
    write_token_file(port(0), "stale-by-start-time", pid, "t0", Some(later));
    write_token_file(port(1), "stale-by-program", pid, "t1", Some(other_program));
    let hostile = format!(
        "127.0.0.1:{}\x1b]52;c;aGk=\x07\x1b[2J\u{202e}\u{9b}31m",
        port(2)
    );
    write_token_file(port(2), &hostile, pid, "t2", Some(real));
    let run = client.run(&["ps"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(!run.stdout.contains("stale-by"), "{}", run.stdout);
    assert!(
        !run.stdout.contains(['\x1b', '\x07', '\u{202e}', '\u{9b}']),
        "{:?}",
        run.stdout
    );
    let shown = format!(
        "127.0.0.1:{}\\x1b]52;c;aGk=\\x07\\x1b[2J<U+202E><U+009B>31m  {pid}",
        port(2)
    );
    assert!(
        run.stdout.lines().any(|line| line.ends_with(&shown)),
        "{:?}",
        run.stdout
    );
    let _ = std::fs::remove_file(
        runtime_dir()
            .join("shepherd")
            .join(format!("server-{}.json", port(2))),
    );
}

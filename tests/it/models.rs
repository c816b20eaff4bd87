//! `shepherd models`, `-m NAME` by name or prefix, `--list-models`, and
//! `shepherd sessions`: the real binary over the real test models, a fake
//! OpenAI upstream and session files written as the store writes them.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::json;

use crate::fake_openai::{Canned, FakeOpenAi};
use crate::harness::{Run, Sandbox};

/// A test model: `var` (set by `make test`), else the `make` cache.
fn cached_model(var: &str, file: &str) -> PathBuf {
    let path = std::env::var_os(var).map_or_else(
        || {
            let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("."), PathBuf::from);
            home.join(".cache/shepherd/models").join(file)
        },
        PathBuf::from,
    );
    assert!(
        path.is_file(),
        "test model {} is missing: run `make model swa-model`",
        path.display()
    );
    path
}

pub(crate) fn smollm2() -> PathBuf {
    cached_model("SHEPHERD_TEST_MODEL", "SmolLM2-135M-Instruct.Q4_1.gguf")
}

pub(crate) fn gemma3() -> PathBuf {
    cached_model("SHEPHERD_SWA_MODEL", "gemma-3-270m-q4_k_m.gguf")
}

/// The sandbox's default models directory (`$XDG_DATA_HOME/shepherd/models` under its HOME).
fn models_dir(sandbox: &Sandbox) -> PathBuf {
    sandbox
        .root
        .path()
        .join("home/.local/share/shepherd/models")
}

/// Links `models` into the sandbox's models directory under their own file names.
fn with_models(tag: &str, models: &[PathBuf]) -> Sandbox {
    let sandbox = Sandbox::new(tag);
    let dir = models_dir(&sandbox);
    std::fs::create_dir_all(&dir).expect("models dir");
    for model in models {
        let name = model.file_name().expect("file name");
        std::os::unix::fs::symlink(model, dir.join(name)).expect("link model");
    }
    sandbox
}

fn assert_ok(run: &Run, what: &str) {
    assert_eq!(
        run.status,
        Some(0),
        "{what}\nstdout: {}\nstderr: {}",
        run.stdout,
        run.stderr
    );
}

#[test]
fn models_lists_both_test_models_with_their_header_fields() {
    let sandbox = with_models("models-list", &[smollm2(), gemma3()]);
    let run = sandbox.run(&["models"], "");
    assert_ok(&run, "shepherd models");
    let rows: Vec<Vec<&str>> = run
        .stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["NAME", "SIZE", "ARCH", "PARAMS", "QUANT", "CONTEXT", "TEMPLATE", "VISION"]
    );
    // Sizes, architectures, parameter counts, file types, context lengths and
    // templates as an independent GGUF reader finds them in these files; no
    // projector lies beside either.
    assert_eq!(
        rows[1],
        [
            "gemma-3-270m-q4_k_m",
            "241",
            "MiB",
            "gemma3",
            "268M",
            "Q4_K_M",
            "32768",
            "no",
            "no"
        ]
    );
    assert_eq!(
        rows[2],
        [
            "SmolLM2-135M-Instruct.Q4_1",
            "93.8",
            "MiB",
            "llama",
            "135M",
            "Q4_1",
            "8192",
            "yes",
            "no"
        ]
    );
    assert_eq!(rows.len(), 3, "{}", run.stdout);
}

#[test]
fn models_dir_from_the_config_file_is_listed_first() {
    let sandbox = Sandbox::new("models-config");
    let elsewhere = sandbox.root.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).expect("dir");
    std::os::unix::fs::symlink(smollm2(), elsewhere.join("tiny.gguf")).expect("link");
    let dir = elsewhere.to_str().expect("utf-8 path");
    assert_ok(
        &sandbox.run(&["config", "models_dir", dir], ""),
        "config models_dir",
    );
    let run = sandbox.run(&["models"], "");
    assert_ok(&run, "shepherd models");
    assert!(
        run.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("tiny ")),
        "{}",
        run.stdout
    );
    let help = sandbox.run(&["models", "--help"], "");
    assert_ok(&help, "models --help");
    assert!(
        help.stdout.starts_with("Usage: shepherd models"),
        "{}",
        help.stdout
    );
}

#[test]
fn a_name_prefix_runs_the_local_model() {
    let sandbox = with_models("models-prefix", &[smollm2(), gemma3()]);
    let args = [
        "-m",
        "smollm2",
        "--notools",
        "--threads",
        crate::harness::MODEL_THREADS,
        "--max-tokens",
        "16",
        "--debug=llm",
    ];
    let run = sandbox.run(
        &[&args[..], &["-e", "What is the capital of France?"]].concat(),
        "",
    );
    assert_ok(&run, "-m smollm2");
    assert!(
        !run.stdout.trim().is_empty(),
        "an answer; stderr: {}",
        run.stderr
    );
    assert!(
        run.stderr.contains("(llamacpp)"),
        "the in-process model: {}",
        run.stderr
    );
}

#[test]
fn a_model_that_is_not_there_names_the_directories_and_the_command() {
    let sandbox = with_models("models-missing", &[smollm2()]);
    let run = sandbox.run(&["--backend", "llamacpp", "-m", "qwen3", "-e", "hi"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("model 'qwen3' not found"),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr
            .contains(&models_dir(&sandbox).display().to_string()),
        "{}",
        run.stderr
    );
    assert!(
        run.stderr.contains(".cache/shepherd/models"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("`shepherd models`"), "{}", run.stderr);
}

#[test]
fn an_ambiguous_prefix_lists_the_candidates() {
    let sandbox = Sandbox::new("models-ambiguous");
    let dir = models_dir(&sandbox);
    std::fs::create_dir_all(&dir).expect("models dir");
    for name in ["tiny-a.gguf", "tiny-b.gguf"] {
        std::os::unix::fs::symlink(smollm2(), dir.join(name)).expect("link");
    }
    let run = sandbox.run(&["-m", "TINY", "-e", "hi"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("model 'TINY' is ambiguous; it could be tiny-a, tiny-b"),
        "{}",
        run.stderr
    );
}

#[test]
fn list_models_lists_what_the_openai_upstream_offers() {
    let body = json!({"object": "list", "data": [{"id": "model-a", "object": "model"}, {"id": "model-b", "object": "model"}]});
    let fake = FakeOpenAi::start(vec![Canned::json(200, body)]);
    let sandbox = Sandbox::new("list-models");
    let args = [
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "--api-key",
        "sk-list",
        "--list-models",
    ];
    let run = sandbox.run(&args, "");
    assert_ok(&run, "--list-models");
    assert_eq!(run.stdout, "model-a\nmodel-b\n");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/v1/models")
    );
}

/// A provider's error body reaches the terminal only through `sanitize::visible`:
/// an escape sequence in it is shown, not obeyed.
#[test]
fn list_models_error_body_with_an_escape_sequence_is_printed_visibly() {
    let body = json!({"error": {"message": "denied \u{1b}]0;owned\u{7}\u{1b}[31mred", "type": "permission_error"}});
    let fake = FakeOpenAi::start(vec![Canned::json(403, body)]);
    let sandbox = Sandbox::new("list-models-escape");
    let args = [
        "--backend",
        "openai",
        "--api-base",
        &fake.base_url,
        "--list-models",
    ];
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(!run.stderr.contains('\u{1b}'), "{:?}", run.stderr);
    assert!(!run.stderr.contains('\u{7}'), "{:?}", run.stderr);
    assert!(
        run.stderr.contains("denied \\x1b]0;owned"),
        "{:?}",
        run.stderr
    );
}

#[test]
fn list_models_for_the_in_process_model_lists_the_models_directory() {
    let sandbox = with_models("list-models-local", &[gemma3()]);
    let run = sandbox.run(
        &["--backend", "llamacpp", "-m", "gemma", "--list-models"],
        "",
    );
    assert_ok(&run, "--list-models");
    assert!(
        run.stdout
            .lines()
            .nth(1)
            .is_some_and(|l| l.starts_with("gemma-3-270m-q4_k_m ")),
        "{}",
        run.stdout
    );
}

/// Writes a session file as the store writes it.
fn save_session(sandbox: &Sandbox, id: &str, first: &str) -> PathBuf {
    let dir = sandbox
        .root
        .path()
        .join("home/.local/share/shepherd/sessions");
    std::fs::create_dir_all(&dir).expect("sessions dir");
    let saved = json!({
        "format": "shepherd-session", "version": 1, "id": id, "saved_at": 1_767_225_600,
        "model": "m",
        "session": {
            "system_prompt": "Be brief.", "system_tokens": 3,
            "messages": [
                {"role": "user", "content": first, "tokens": 5},
                {"role": "assistant", "content": "Paris.", "tokens": 2}
            ],
            "total_tokens": 10, "last_prompt_tokens": 8, "last_assistant_message_tokens": 2
        }
    });
    let path = dir.join(format!("{id}.json"));
    std::fs::write(&path, saved.to_string()).expect("write session");
    path
}

#[test]
fn sessions_list_show_export_and_delete() {
    let sandbox = Sandbox::new("sessions");
    let empty = sandbox.run(&["sessions"], "");
    assert_ok(&empty, "sessions on an empty store");
    assert!(
        empty.stdout.starts_with("no saved sessions"),
        "{}",
        empty.stdout
    );
    let path = save_session(&sandbox, "trip", "Capital of\nFrance? \x1b]52;c;eA==\x07");
    let list = sandbox.run(&["sessions", "list"], "");
    assert_ok(&list, "sessions list");
    let row = list.stdout.lines().nth(1).expect("a row");
    assert_eq!(
        row,
        "trip  2026-01-01 00:00     2  Capital of France? \\x1b]52;c;eA==\\x07"
    );
    let show = sandbox.run(&["sessions", "show", "trip"], "");
    assert_ok(&show, "sessions show");
    assert!(
        show.stdout.contains("[assistant]\nParis."),
        "{}",
        show.stdout
    );
    let md = sandbox.run(&["sessions", "export", "trip"], "");
    assert_ok(&md, "export md");
    assert!(md.stdout.starts_with("# Session trip\n"), "{}", md.stdout);
    assert!(
        md.stdout.contains("## Assistant\n\nParis.\n"),
        "{}",
        md.stdout
    );
    let exported = sandbox.run(&["sessions", "export", "trip", "--format", "json"], "");
    assert_ok(&exported, "export json");
    let value: serde_json::Value = serde_json::from_str(&exported.stdout).expect("JSON");
    assert_eq!(value["session"]["messages"][1]["content"], "Paris.");
    let deleted = sandbox.run(&["sessions", "delete", "trip"], "");
    assert_ok(&deleted, "delete");
    assert!(!path.exists());
    let again = sandbox.run(&["sessions", "delete", "trip"], "");
    assert_eq!(again.status, Some(1), "{}", again.stderr);
    assert_eq!(again.stderr, "shepherd: no saved session 'trip'\n");
    let bad = sandbox.run(&["sessions", "show", "../config"], "");
    assert_eq!(bad.status, Some(2), "{}", bad.stderr);
    let help = sandbox.run(&["sessions", "-h"], "");
    assert_ok(&help, "sessions -h");
    assert!(
        help.stdout.starts_with("Usage: shepherd sessions"),
        "{}",
        help.stdout
    );
}

#[test]
fn model_list_in_the_repl_lists_the_providers_models_and_marks_the_current_one() {
    use crate::terminal::{fake_args, Tmux};
    let body = json!({"data": [{"id": "model-a"}, {"id": "test"}, {"id": "model-c"}]});
    let fake = FakeOpenAi::start(vec![Canned::json(200, body)]);
    let sandbox = Sandbox::new("model-list-repl");
    let tmux = Tmux::start(&sandbox, &fake_args(&fake.base_url, &[]));
    tmux.wait_for("the prompt", |s| s.trim_end().ends_with('>'));
    tmux.type_text("/model list");
    tmux.key("Enter");
    tmux.wait_text("  model-c");
    let screen = tmux.screen();
    assert!(screen.contains("  model-a\n* test\n  model-c"), "{screen}");
    let requests = fake.requests();
    assert_eq!(
        (requests[0].method.as_str(), requests[0].path.as_str()),
        ("GET", "/v1/models")
    );
}

/// One request the model server saw (each header's value, empty when absent).
#[derive(Clone, Debug, Default)]
struct Seen {
    range: String,
    if_range: String,
    accept_encoding: String,
}

/// How the model server answers.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The file, honouring `Range` (and `If-Range` against its ETag).
    Plain,
    /// The file gzipped, with `Content-Encoding: gzip`, whatever was asked.
    Gzip,
    /// A body with no length that never ends (until the client hangs up).
    Endless,
}

/// What the model server serves now; a test may swap the file between pulls.
struct Served {
    file: Vec<u8>,
    etag: String,
    mode: Mode,
    /// Drop the connection halfway through the first full download (its length promised whole).
    cut_first: bool,
}

/// A model server for `shepherd pull` on a plain socket: serves a file at
/// `/m/model.gguf` with a strong ETag, answers `Range: bytes=N-` with `206`
/// unless an `If-Range` names another ETag (then `200` and the whole file), and
/// records each request's headers.
struct ModelServer {
    url: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    served: Arc<Mutex<Served>>,
}

impl ModelServer {
    fn start(file: Vec<u8>, mode: Mode, cut_first: bool) -> ModelServer {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let served = Arc::new(Mutex::new(Served {
            file,
            etag: "\"v1\"".to_string(),
            mode,
            cut_first,
        }));
        let (log, now) = (seen.clone(), served.clone());
        // Serves until the test process ends; each connection is one request.
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let request = read_head(&stream);
                log.lock().unwrap().push(request.clone());
                let mut served = now.lock().unwrap();
                let cut = std::mem::take(&mut served.cut_first);
                let (file, etag, mode) = (served.file.clone(), served.etag.clone(), served.mode);
                drop(served);
                answer(stream, &request, &file, &etag, mode, cut);
                // Dropping the stream closes the connection, cut or not.
            }
        });
        ModelServer {
            url: format!("http://127.0.0.1:{port}/m/model.gguf"),
            seen,
            served,
        }
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn read_head(stream: &std::net::TcpStream) -> Seen {
    use std::io::BufRead;
    let mut reader = std::io::BufReader::new(stream.try_clone().unwrap());
    let mut seen = Seen::default();
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|read| read > 2) {
        if let Some((name, value)) = line.split_once(':') {
            let value = value.trim().to_string();
            match name.trim().to_ascii_lowercase().as_str() {
                "range" => seen.range = value,
                "if-range" => seen.if_range = value,
                "accept-encoding" => seen.accept_encoding = value,
                _ => {}
            }
        }
        line.clear();
    }
    seen
}

fn answer(
    mut stream: std::net::TcpStream,
    request: &Seen,
    file: &[u8],
    etag: &str,
    mode: Mode,
    cut: bool,
) {
    use std::io::Write;
    let (head, body) = match mode {
        Mode::Endless => {
            let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n");
            let chunk = vec![7u8; 1 << 16];
            // Until the client hangs up (bounded, should it never).
            for _ in 0..(1 << 14) {
                if stream.write_all(&chunk).is_err() {
                    break;
                }
            }
            return;
        }
        Mode::Gzip => {
            let gz = gzip(file);
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nETag: {etag}\r\nContent-Length: {}\r\n",
                gz.len()
            );
            (head, gz)
        }
        Mode::Plain => {
            let start: usize = request
                .range
                .strip_prefix("bytes=")
                .and_then(|r| r.trim_end_matches('-').parse().ok())
                .filter(|_| request.if_range.is_empty() || request.if_range == etag)
                .unwrap_or(0);
            let rest = file[start.min(file.len())..].to_vec();
            let head = match start {
                0 => format!(
                    "HTTP/1.1 200 OK\r\nETag: {etag}\r\nContent-Length: {}\r\n",
                    rest.len()
                ),
                _ => format!(
                    "HTTP/1.1 206 Partial Content\r\nETag: {etag}\r\nContent-Length: {}\r\nContent-Range: bytes {start}-{}/{}\r\n",
                    rest.len(),
                    file.len() - 1,
                    file.len()
                ),
            };
            let body = match (cut, start) {
                (true, 0) => rest[..rest.len() / 2].to_vec(),
                _ => rest,
            };
            (head, body)
        }
    };
    let _ = stream.write_all(format!("{head}Connection: close\r\n\r\n").as_bytes());
    let _ = stream.write_all(&body);
}

/// `bytes` gzipped by `gzip`.
fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut child = std::process::Command::new("gzip")
        .args(["-c", "-n"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("gzip");
    let mut input = child.stdin.take().unwrap();
    let bytes = bytes.to_vec();
    let writer = std::thread::spawn(move || input.write_all(&bytes));
    let out = child.wait_with_output().expect("gzip");
    writer.join().unwrap().unwrap();
    out.stdout
}

/// A whole GGUF file: one I8 tensor of `data` bytes (a multiple of 32, so no
/// padding after it) filled from `seed`, and its sha256 from `sha256sum`.
fn fake_gguf(dir: &std::path::Path, data: usize, seed: usize) -> (Vec<u8>, String) {
    let mut bytes = b"GGUF".to_vec();
    bytes.extend(3u32.to_le_bytes());
    bytes.extend(1u64.to_le_bytes()); // tensors
    bytes.extend(0u64.to_le_bytes()); // key-value pairs
    bytes.extend(1u64.to_le_bytes());
    bytes.extend(b"w");
    bytes.extend(1u32.to_le_bytes()); // dimensions
    bytes.extend((data as u64).to_le_bytes());
    bytes.extend(24u32.to_le_bytes()); // GGML_TYPE_I8
    bytes.extend(0u64.to_le_bytes()); // offset
    bytes.resize(bytes.len().next_multiple_of(32), 0);
    bytes.extend((0..data).map(|i| ((i * 131 + seed) % 251) as u8));
    let path = dir.join(format!("fake{seed}.gguf"));
    std::fs::write(&path, &bytes).unwrap();
    let out = std::process::Command::new("sha256sum")
        .arg(&path)
        .output()
        .expect("sha256sum");
    let digest = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    (bytes, digest)
}

/// Asserts a pull failed with `expect` in its message and left neither the
/// model nor a part behind.
fn assert_refused(run: &Run, dir: &std::path::Path, expect: &str) {
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains(expect), "{}", run.stderr);
    for name in ["model.gguf", "model.gguf.part", "model.gguf.part.meta"] {
        assert!(!dir.join(name).exists(), "{name} was kept");
    }
}

#[test]
fn pull_resumes_a_cut_download_checks_its_sha256_and_names_it_only_when_whole() {
    let sandbox = Sandbox::new("pull");
    let (bytes, digest) = fake_gguf(&sandbox.work(), 3 << 20, 1);
    let server = ModelServer::start(bytes.clone(), Mode::Plain, true);
    let dir = models_dir(&sandbox);
    let target = dir.join("model.gguf");
    // Cut off halfway: an error, the part kept, the name not taken.
    let run = sandbox.run(&["pull", &server.url, "--sha256", &digest], "");
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("pull again to resume"),
        "{}",
        run.stderr
    );
    let part = std::fs::metadata(dir.join("model.gguf.part"))
        .expect("the part is kept")
        .len();
    assert!(
        part > 0 && part < bytes.len() as u64,
        "part of {part} bytes"
    );
    assert!(!target.exists());
    // Again: the rest from where the part ends, if the file is still the one
    // the part began, checked whole.
    let run = sandbox.run(&["pull", &server.url, "--sha256", &digest], "");
    assert_ok(&run, "resumed pull");
    assert!(run.stdout.contains(&digest), "{}", run.stdout);
    let seen = server.seen();
    let ranges: Vec<_> = seen.iter().map(|s| s.range.clone()).collect();
    assert_eq!(ranges, ["".to_string(), format!("bytes={part}-")]);
    assert_eq!(seen[1].if_range, "\"v1\"", "the first answer's ETag");
    assert!(
        seen.iter().all(|s| s.accept_encoding == "identity"),
        "{seen:?}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), bytes);
    assert!(!dir.join("model.gguf.part").exists());
    assert!(!dir.join("model.gguf.part.meta").exists());
    // A wrong digest keeps nothing.
    let wrong = "0".repeat(64);
    let run = sandbox.run(
        &[
            "pull",
            &server.url,
            "--sha256",
            &wrong,
            "--name",
            "other.gguf",
        ],
        "",
    );
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains(&digest) && run.stderr.contains(&wrong),
        "{}",
        run.stderr
    );
    assert!(!dir.join("other.gguf").exists() && !dir.join("other.gguf.part").exists());
    // A local file is copied the same way; a file that is not GGUF is refused.
    let local = sandbox.work().join("fake1.gguf");
    let run = sandbox.run(
        &["pull", local.to_str().unwrap(), "--name", "copy.gguf"],
        "",
    );
    assert_ok(&run, "local pull");
    assert_eq!(std::fs::read(dir.join("copy.gguf")).unwrap(), bytes);
    let text = sandbox.work().join("notes.gguf");
    std::fs::write(&text, "not a model").unwrap();
    let run = sandbox.run(&["pull", text.to_str().unwrap()], "");
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(run.stderr.contains("not a GGUF file"), "{}", run.stderr);
    assert!(!dir.join("notes.gguf").exists());
}

#[test]
fn pull_starts_over_when_the_file_changed_between_attempts() {
    let sandbox = Sandbox::new("pull-changed");
    let (old, _) = fake_gguf(&sandbox.work(), 3 << 20, 1);
    let (new, digest) = fake_gguf(&sandbox.work(), (2 << 20) + 4096, 2);
    let server = ModelServer::start(old, Mode::Plain, true);
    let dir = models_dir(&sandbox);
    let run = sandbox.run(&["pull", &server.url], "");
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    let part = std::fs::metadata(dir.join("model.gguf.part"))
        .unwrap()
        .len();
    {
        let mut served = server.served.lock().unwrap();
        served.file = new.clone();
        served.etag = "\"v2\"".to_string();
    }
    // Without --sha256: a spliced file must not take the name either.
    let run = sandbox.run(&["pull", &server.url], "");
    assert_ok(&run, "pull after the change");
    assert!(run.stdout.contains(&digest), "{}", run.stdout);
    let seen = server.seen();
    assert_eq!(seen.len(), 2, "{seen:?}");
    assert_eq!(
        (seen[1].range.as_str(), seen[1].if_range.as_str()),
        (format!("bytes={part}-").as_str(), "\"v1\"")
    );
    assert_eq!(
        std::fs::read(dir.join("model.gguf")).unwrap(),
        new,
        "the new file whole, from zero"
    );
    assert!(!dir.join("model.gguf.part").exists());
}

#[test]
fn pull_stops_a_body_without_a_length_at_max_size() {
    let sandbox = Sandbox::new("pull-endless");
    let server = ModelServer::start(Vec::new(), Mode::Endless, false);
    let dir = models_dir(&sandbox);
    let run = sandbox.run(&["pull", &server.url, "--max-size", "1M"], "");
    assert_refused(&run, &dir, "more than --max-size 1048576 bytes");
}

#[test]
fn pull_refuses_a_compressed_body_and_keeps_nothing() {
    let sandbox = Sandbox::new("pull-gzip");
    let (bytes, _) = fake_gguf(&sandbox.work(), 1 << 20, 1);
    let server = ModelServer::start(bytes, Mode::Gzip, false);
    let dir = models_dir(&sandbox);
    let run = sandbox.run(&["pull", &server.url], "");
    assert_refused(&run, &dir, "Content-Encoding 'gzip'");
    assert_eq!(server.seen()[0].accept_encoding, "identity");
}

#[test]
fn pull_never_writes_through_a_planted_part_link() {
    let sandbox = Sandbox::new("pull-link");
    let (bytes, _) = fake_gguf(&sandbox.work(), 1 << 20, 1);
    let server = ModelServer::start(bytes, Mode::Plain, false);
    let dir = models_dir(&sandbox);
    std::fs::create_dir_all(&dir).unwrap();
    let outside = sandbox.work().join("outside.txt");
    std::fs::write(&outside, "precious").unwrap();
    let part = dir.join("model.gguf.part");
    std::os::unix::fs::symlink(&outside, &part).unwrap();
    let run = sandbox.run(&["pull", &server.url], "");
    assert_eq!(run.status, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains("symbolic link") && run.stderr.contains(part.to_str().unwrap()),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "precious");
    assert!(!dir.join("model.gguf").exists());
    assert!(server.seen().is_empty(), "refused before any request");
}

#[test]
fn pull_refuses_a_truncated_gguf_without_a_digest() {
    let sandbox = Sandbox::new("pull-short");
    let (bytes, _) = fake_gguf(&sandbox.work(), 1 << 20, 1);
    let short = bytes[..bytes.len() - 1000].to_vec();
    let server = ModelServer::start(short, Mode::Plain, false);
    let dir = models_dir(&sandbox);
    let run = sandbox.run(&["pull", &server.url], "");
    assert_refused(&run, &dir, "cut short");
}

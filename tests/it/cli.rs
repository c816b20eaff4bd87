//! End-to-end tests of the binary's plain and `--json` front-ends against the fake upstream.

use serde_json::{json, Value};

use crate::fake_openai::{
    assert_tool_results_answer_calls, chunk, text_stream, tool_call_stream, tool_delta,
    usage_chunk, Canned, FakeOpenAi,
};
use crate::harness::Sandbox;

fn args<'a>(fake: &'a FakeOpenAi, extra: &[&'a str]) -> Vec<&'a str> {
    let mut all = vec![
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

fn of_type<'a>(lines: &'a [Value], kind: &str) -> Vec<&'a Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

fn joined_text(lines: &[Value]) -> String {
    of_type(lines, "text")
        .iter()
        .map(|l| l["content"].as_str().unwrap_or_default())
        .collect()
}

#[test]
fn plain_text_streams_to_stdout() {
    let fake = FakeOpenAi::start(vec![Canned::sse(&text_stream(&["Hello", ", wor", "ld ✓"]))]);
    let sandbox = Sandbox::new("plain");
    let run = sandbox.run(
        &args(&fake, &["--api-key", "sk-secret-1", "-e", "hi there"]),
        "",
    );
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "Hello, world ✓\n");
    let requests = fake.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(
        requests[0].header("authorization"),
        Some("Bearer sk-secret-1")
    );
    let body = &requests[0].body;
    assert_eq!(requests[0].method, "POST");
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(body["model"], "test");
    assert_eq!(body["stream"], true);
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages[0]["role"], "system");
    assert_eq!(messages.last().unwrap()["content"], "hi there");
    let tools: Vec<&str> = body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    for expected in [
        "read",
        "write",
        "edit",
        "list_directory",
        "glob",
        "grep",
        "bash",
    ] {
        assert!(
            tools.contains(&expected),
            "{expected} missing from {tools:?}"
        );
    }
}

#[test]
fn reasoning_deltas_become_thinking_events() {
    let chunks = vec![
        chunk(
            json!({"role": "assistant", "reasoning_content": "Let me "}),
            None,
        ),
        chunk(json!({"reasoning_content": "think."}), None),
        chunk(json!({"content": "42"}), None),
        chunk(json!({}), Some("stop")),
    ];
    let fake = FakeOpenAi::start(vec![Canned::sse(&chunks)]);
    let sandbox = Sandbox::new("reasoning");
    let run = sandbox.run(&args(&fake, &["--json", "-e", "answer?"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let lines = run.json_lines();
    let thinking: String = of_type(&lines, "thinking")
        .iter()
        .map(|l| l["content"].as_str().unwrap())
        .collect();
    assert_eq!(thinking, "Let me think.");
    assert_eq!(joined_text(&lines), "42");
    // Plain mode hides thinking unless asked.
    let fake = FakeOpenAi::start(vec![Canned::sse(&chunks)]);
    let run = sandbox.run(&args(&fake, &["-e", "answer?"]), "");
    assert_eq!(run.stdout, "42\n");
}

#[test]
fn parallel_tool_calls_split_across_chunks_are_run_and_answered() {
    let first = vec![
        chunk(json!({"role": "assistant", "content": null}), None),
        tool_delta(0, Some("call_a"), Some("list_directory"), ""),
        tool_delta(1, Some("call_b"), Some("get_time"), "{\"for"),
        tool_delta(0, None, None, "{\"pa"),
        tool_delta(1, None, None, "mat\": \"iso\"}"),
        tool_delta(0, None, None, "th\": \".\"}"),
        chunk(json!({}), Some("tool_calls")),
    ];
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&first),
        Canned::sse(&text_stream(&["Both done."])),
    ]);
    let sandbox = Sandbox::new("parallel");
    std::fs::write(sandbox.work().join("notes.txt"), "hello").unwrap();
    let run = sandbox.run(&args(&fake, &["--json", "-e", "go"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let lines = run.json_lines();
    let uses = of_type(&lines, "tool_use");
    assert_eq!(uses.len(), 2);
    assert_eq!(uses[0]["id"], "call_a");
    assert_eq!(uses[0]["params"], json!({"path": "."}));
    assert_eq!(uses[1]["id"], "call_b");
    assert_eq!(uses[1]["params"], json!({"format": "iso"}));
    let results = of_type(&lines, "tool_result");
    assert_eq!(results.len(), 2);
    assert!(results.iter().all(|r| r["success"] == true), "{results:?}");
    assert_eq!(joined_text(&lines), "Both done.");

    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    let second = &requests[1].body;
    assert_tool_results_answer_calls(second);
    let messages = second["messages"].as_array().unwrap();
    let assistant = &messages[messages.len() - 3];
    assert_eq!(assistant["tool_calls"][0]["id"], "call_a");
    assert_eq!(assistant["tool_calls"][1]["id"], "call_b");
    let listing = messages[messages.len() - 2]["content"].as_str().unwrap();
    assert!(listing.contains("notes.txt"), "{listing}");
}

#[test]
fn usage_chunk_sets_token_totals() {
    let mut chunks = text_stream(&["ok"]);
    chunks.push(usage_chunk(120, 3));
    let fake = FakeOpenAi::start(vec![Canned::sse(&chunks)]);
    let sandbox = Sandbox::new("usage");
    let run = sandbox.run(&args(&fake, &["--json", "-e", "count"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let lines = run.json_lines();
    let end = of_type(&lines, "end_turn");
    assert_eq!(end.len(), 1);
    assert_eq!(end[0]["total_tokens"], 123);
    assert_eq!(end[0]["prompt_tokens"], 120);
    assert_eq!(end[0]["completion_tokens"], 3);
    assert_eq!(
        fake.requests()[0].body["stream_options"]["include_usage"],
        true
    );
}

#[test]
fn mid_stream_error_is_reported_and_exit_code_is_one() {
    let body = format!(
        "data: {}\n\ndata: {}\n\n",
        chunk(json!({"content": "partial "}), None),
        json!({"error": {"message": "upstream exploded", "type": "server_error"}})
    );
    let fake = FakeOpenAi::start(vec![Canned::sse_raw(&body)]);
    let sandbox = Sandbox::new("midstream");
    let run = sandbox.run(&args(&fake, &["--json", "-e", "x"]), "");
    assert_eq!(run.status, Some(1));
    let lines = run.json_lines();
    let errors = of_type(&lines, "error");
    assert_eq!(errors.len(), 1);
    assert!(errors[0]["message"]
        .as_str()
        .unwrap()
        .contains("upstream exploded"));
    assert_eq!(of_type(&lines, "end_turn")[0]["finish_reason"], "error");
    // Output was already shown, so the request must not have been retried.
    assert_eq!(fake.requests().len(), 1);
}

#[test]
fn rate_limit_with_retry_after_is_retried_before_output() {
    let fake = FakeOpenAi::start(vec![
        Canned::json(
            429,
            json!({"error": {"message": "slow down", "type": "rate_limit_error"}}),
        )
        .with_header("Retry-After", "1"),
        Canned::sse(&text_stream(&["after retry"])),
    ]);
    let sandbox = Sandbox::new("retry");
    let started = std::time::Instant::now();
    let run = sandbox.run(&args(&fake, &["-e", "x"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "after retry\n");
    assert!(started.elapsed() >= std::time::Duration::from_millis(900));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_eq!(requests[0].body, requests[1].body);
}

#[test]
fn context_overflow_evicts_old_turns_and_retries_once() {
    let overflow = Canned::json(
        400,
        json!({"error": {
            "message": "This model's maximum context length is 200 tokens. However, your messages resulted in 260 tokens. Please reduce the length of the messages.",
            "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}}),
    );
    let with_usage = |text: &str, prompt: u64| {
        let mut chunks = text_stream(&[text]);
        chunks.push(usage_chunk(prompt, 40));
        Canned::sse(&chunks)
    };
    let fake = FakeOpenAi::start(vec![
        with_usage("first answer", 80),
        with_usage("second answer", 160),
        overflow,
        with_usage("third answer", 150),
    ]);
    let sandbox = Sandbox::new("overflow");
    let input = "first question\nsecond question\nthird question\n";
    let run = sandbox.run(
        &args(&fake, &["--json"]),
        &input
            .lines()
            .map(|l| json!({"type": "user", "content": l}).to_string() + "\n")
            .collect::<String>(),
    );
    assert_eq!(
        run.status,
        Some(0),
        "stdout: {}\nstderr: {}",
        run.stdout,
        run.stderr
    );
    let lines = run.json_lines();
    assert!(joined_text(&lines).ends_with("third answer"));
    let notices = of_type(&lines, "system");
    assert!(
        notices
            .iter()
            .any(|n| n["content"].as_str().unwrap().contains("evicted")),
        "{notices:?}"
    );
    let requests = fake.requests();
    assert_eq!(requests.len(), 4);
    let (failed, retried) = (&requests[2], &requests[3]);
    assert!(retried.body_len < failed.body_len);
    let retried_messages = retried.body["messages"].as_array().unwrap();
    assert!(retried_messages.len() < failed.body["messages"].as_array().unwrap().len());
    assert_eq!(retried_messages[0]["role"], "system");
    assert_eq!(
        retried_messages.last().unwrap()["content"],
        "third question"
    );
    assert!(!retried.body.to_string().contains("first question"));
}

#[test]
fn end_to_end_tool_use_shows_call_and_answer() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_ls",
            "list_directory",
            json!({"path": "."}),
        )),
        Canned::sse(&text_stream(&["There are two files: a.txt and b.txt."])),
    ]);
    let sandbox = Sandbox::new("e2e");
    std::fs::write(sandbox.work().join("a.txt"), "a").unwrap();
    std::fs::write(sandbox.work().join("b.txt"), "b").unwrap();
    let run = sandbox.run(&args(&fake, &["-e", "what files are here?"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let mut lines = run.stdout.lines();
    assert_eq!(lines.next(), Some("* list_directory(path=.)"));
    assert!(lines.next().unwrap().starts_with("  ✓ "));
    assert_eq!(lines.next(), Some("There are two files: a.txt and b.txt."));
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    assert_tool_results_answer_calls(&requests[1].body);
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tool = messages.last().unwrap();
    assert_eq!(tool["role"], "tool");
    assert_eq!(tool["tool_call_id"], "call_ls");
    let listing = tool["content"].as_str().unwrap();
    assert!(
        listing.contains("a.txt") && listing.contains("b.txt"),
        "{listing}"
    );

    // The same conversation in --json mode: one valid JSON object per line.
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_ls",
            "list_directory",
            json!({"path": "."}),
        )),
        Canned::sse(&text_stream(&["Two files."])),
    ]);
    let run = sandbox.run(&args(&fake, &["--json", "-e", "what files are here?"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    let lines = run.json_lines();
    let kinds: Vec<&str> = lines
        .iter()
        .map(|l| l["type"].as_str().unwrap())
        .filter(|k| *k != "stats")
        .collect();
    assert_eq!(kinds.first(), Some(&"tool_use"));
    assert_eq!(kinds.last(), Some(&"end_turn"));
    assert!(kinds.contains(&"tool_result") && kinds.contains(&"text"));
}

#[test]
fn piped_stdin_runs_one_prompt_per_line() {
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&text_stream(&["one"])),
        Canned::sse(&text_stream(&["two"])),
    ]);
    let sandbox = Sandbox::new("piped");
    let run = sandbox.run(&args(&fake, &[]), "first\n\nsecond\n");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "one\ntwo\n");
    let requests = fake.requests();
    assert_eq!(requests.len(), 2);
    // The second prompt continues the same conversation.
    let messages = requests[1].body["messages"].as_array().unwrap();
    let contents: Vec<&str> = messages
        .iter()
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert!(
        contents.ends_with(&["first", "one", "second"]),
        "{contents:?}"
    );
}

#[test]
fn malformed_config_names_file_and_line_and_exits_two() {
    let sandbox = Sandbox::new("badconfig");
    let path = sandbox.work().join("bad.json");
    std::fs::write(
        &path,
        "{\n  \"providers\": [\n    {\"name\": \"x\",,}\n  ]\n}\n",
    )
    .unwrap();
    let run = sandbox.run(&["-c", path.to_str().unwrap(), "-e", "hi"], "");
    assert_eq!(run.status, Some(2));
    assert!(run.stderr.contains("bad.json"), "{}", run.stderr);
    assert!(run.stderr.contains("line 3"), "{}", run.stderr);
}

#[test]
fn a_config_file_that_does_not_exist_is_refused_with_llama_server_s_meaning() {
    let sandbox = Sandbox::new("dash-c");
    let run = sandbox.run(&["-c", "4096", "-e", "hi"], "");
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(
        run.stderr.contains("'4096' does not exist") && run.stderr.contains("--context-size 4096"),
        "{}",
        run.stderr
    );
}

#[test]
fn unknown_flag_exits_two_with_usage() {
    let sandbox = Sandbox::new("badflag");
    let run = sandbox.run(&["--bogus-flag"], "");
    assert_eq!(run.status, Some(2));
    assert!(run.stderr.contains("--bogus-flag"), "{}", run.stderr);
    assert!(
        run.stderr.to_lowercase().contains("usage"),
        "{}",
        run.stderr
    );
}

#[test]
fn unreachable_api_base_is_a_clear_error_and_exit_one() {
    // Bind and drop a listener to get a port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}/v1");
    let sandbox = Sandbox::new("unreachable");
    let run = sandbox.run(
        &[
            "--backend",
            "openai",
            "--api-base",
            &base,
            "-m",
            "t",
            "-e",
            "hi",
        ],
        "",
    );
    assert_eq!(run.status, Some(1));
    assert!(run.stderr.contains("cannot connect"), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("127.0.0.1:{port}")),
        "{}",
        run.stderr
    );
    assert!(!run.stderr.contains("panicked"));
}

#[test]
fn hostile_input_never_panics() {
    let fake = FakeOpenAi::start(vec![Canned::sse_raw("data: {not json\n\ndata: [DONE]\n\n")]);
    let sandbox = Sandbox::new("hostile");
    let cases: Vec<Vec<&str>> = vec![
        vec!["--temperature", "NaN", "-e", "x"],
        vec!["--max-tokens", "-5", "-e", "x"],
        vec!["--top-p", "7", "-e", "x"],
        vec!["-e"],
        vec!["--context-size", "99999999999999999999"],
        vec!["provider", "add"],
        vec!["provider", "nosuch", "show"],
        vec!["config", "nosuchkey", "1"],
        vec!["-p", "nosuch", "-e", "x"],
    ];
    for case in cases {
        let run = sandbox.run(&case, "");
        assert!(
            matches!(run.status, Some(1 | 2)),
            "{case:?} -> {:?} {}",
            run.status,
            run.stderr
        );
        assert!(!run.stderr.contains("panicked"), "{case:?}: {}", run.stderr);
    }
    let run = sandbox.run(
        &args(&fake, &["--json"]),
        "garbage\n{\"type\":\"user\"}\n\u{0}\u{7f}\n{\"type\":\"user\",\"content\":\"x\"}\n",
    );
    assert!(!run.stderr.contains("panicked"), "{}", run.stderr);
    for line in run.json_lines() {
        assert!(line["type"].is_string());
    }
}

#[test]
fn nostream_sends_a_plain_request_and_prints_the_answer() {
    let fake = FakeOpenAi::start(vec![Canned::json(
        200,
        json!({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "test",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole answer"},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11},
        }),
    )]);
    let sandbox = Sandbox::new("nostream");
    let run = sandbox.run(&args(&fake, &["--nostream", "-e", "x"]), "");
    assert_eq!(run.status, Some(0), "stderr: {}", run.stderr);
    assert_eq!(run.stdout, "whole answer\n");
    let body = &fake.requests()[0].body;
    assert!(body.get("stream").is_none_or(|s| s == false), "{body}");
    assert!(body.get("stream_options").is_none(), "{body}");
}

#[test]
fn interrupt_during_a_tool_cancels_and_kills_its_process_group() {
    // A sleep duration unique to this run identifies the tool's process in /proc.
    let marker = format!("100.{}7", std::process::id());
    let command = format!("sleep {marker}; echo never");
    let fake = FakeOpenAi::start(vec![
        Canned::sse(&tool_call_stream(
            "call_sleep",
            "bash",
            json!({"command": command}),
        )),
        Canned::sse(&text_stream(&["should not be asked for"])),
    ]);
    let sandbox = Sandbox::new("interrupt");
    let child = sandbox.spawn(&args(&fake, &["--approve", "all", "-e", "sleep please"]));
    let pid = child.id();
    let collected = crate::harness::collect(child);
    let needle = format!("sleep {marker}");
    assert!(
        crate::harness::poll_until(std::time::Duration::from_secs(20), || {
            crate::harness::process_running(&needle)
        }),
        "the tool never started"
    );
    let started = std::time::Instant::now();
    std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("kill -INT");
    let run = crate::harness::finish(collected, std::time::Duration::from_secs(10))
        .expect("shepherd exits after an interrupt");
    assert!(started.elapsed() < std::time::Duration::from_secs(2));
    assert_eq!(run.status, Some(130), "stderr: {}", run.stderr);
    assert!(run.stderr.contains("[Cancelled]"), "{}", run.stderr);
    assert!(
        crate::harness::poll_until(std::time::Duration::from_secs(2), || {
            !crate::harness::process_running(&needle)
        }),
        "the tool's process outlived shepherd"
    );
    // Cancelled turns do not go back to the model.
    assert_eq!(fake.requests().len(), 1);
}

/// The version in Cargo.lock of `name` (the build script reads the same file).
fn locked_version(name: &str) -> String {
    let lock = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.lock"))
        .expect("Cargo.lock");
    let wanted = format!("name = \"{name}\"");
    let mut lines = lock.lines().skip_while(|l| l.trim() != wanted).skip(1);
    let line = lines.next().expect("version line");
    line.trim()
        .trim_start_matches("version = \"")
        .trim_end_matches('"')
        .to_string()
}

#[test]
fn help_and_version_to_a_closed_pipe_exit_cleanly() {
    // `shepherd --version | head -1`: the reader is gone before shepherd writes.
    for flag in ["--version", "--help"] {
        let (reader, writer) = std::io::pipe().expect("a pipe");
        drop(reader);
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_shepherd"))
            .arg(flag)
            .stdin(std::process::Stdio::null())
            .stdout(writer)
            .output()
            .expect("shepherd runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{flag}: {stderr}");
        assert!(!stderr.contains("panicked"), "{flag}: {stderr}");
    }
}

#[test]
fn version_names_revision_features_and_llama_build() {
    let run = Sandbox::new("version").run(&["--version"], "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let head = format!("shepherd {} (git ", env!("CARGO_PKG_VERSION"));
    assert!(run.stdout.starts_with(&head), "{}", run.stdout);
    let git = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match git {
        Ok(out) if out.status.success() => {
            let rev = String::from_utf8_lossy(&out.stdout).trim().to_string();
            assert!(
                run.stdout.contains(&format!("(git {rev}, ")),
                "{}",
                run.stdout
            );
        }
        _ => eprintln!("skipping the revision check: git is not available here"),
    }
    let cuda = if cfg!(feature = "cuda") { "yes" } else { "no" };
    assert!(
        run.stdout
            .contains(&format!("features: cuda {cuda}, tensorrt no, rpc yes\n")),
        "{}",
        run.stdout
    );
    let crate_version = format!("llama-cpp-sys-2 {})", locked_version("llama-cpp-sys-2"));
    assert!(run.stdout.contains("llama.cpp: ggml "), "{}", run.stdout);
    assert!(run.stdout.contains(&crate_version), "{}", run.stdout);
    assert!(run.stdout.contains("CPU : "), "{}", run.stdout);
    // ggml's AMX kernels, built by GCC, die of SIGILL at the first prompt on a Xeon
    // that has AMX: the Makefile builds llama.cpp without them (NO_AMX).
    assert!(!run.stdout.contains("AMX_INT8 = 1"), "{}", run.stdout);
}

/// `--image` is read before anything starts: a missing file, a file that is
/// not an image, and `--image` without `-e` are usage errors (exit 2) that
/// name the problem, and no request is made.
#[test]
fn bad_image_flags_are_usage_errors() {
    let fake = FakeOpenAi::start(Vec::new());
    let sandbox = Sandbox::new("image-flags");
    std::fs::write(sandbox.work().join("notes.txt"), "not an image\n").unwrap();
    for (flags, expect) in [
        (
            vec!["--image", "missing.png", "-e", "hi"],
            "--image: cannot read the image missing.png",
        ),
        (
            vec!["--image", "notes.txt", "-e", "hi"],
            "--image: notes.txt: unsupported image type",
        ),
        (
            vec!["--image", "notes.txt"],
            "--image attaches to the -e prompt",
        ),
    ] {
        let run = sandbox.run(&args(&fake, &flags), "");
        assert_eq!(run.status, Some(2), "{flags:?}: {}", run.stderr);
        assert!(run.stderr.contains(expect), "{flags:?}: {}", run.stderr);
    }
    assert!(fake.requests().is_empty());
}

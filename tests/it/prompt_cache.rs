//! The prompt cache on disk through the real binary: a cold one-shot with the
//! default tools restores the opening the previous run decoded, and answers
//! the same; `--no-prompt-cache` neither reads nor writes it.

use serde_json::Value;

use crate::api_server::test_model;
use crate::harness::Sandbox;

fn text(run: &crate::harness::Run) -> String {
    run.stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v["type"] == "text")
        .filter_map(|v| v["content"].as_str().map(str::to_string))
        .collect()
}

fn kv_files(sandbox: &Sandbox) -> usize {
    let dir = sandbox.root.path().join("home/.cache/shepherd/kv");
    std::fs::read_dir(dir).map_or(0, |d| d.filter_map(Result::ok).count())
}

#[test]
fn a_cold_one_shot_restores_the_opening_and_answers_the_same() {
    let sandbox = Sandbox::new("kv-oneshot");
    let model = test_model().to_str().expect("UTF-8").to_string();
    let run = |question: &str, extra: &[&str]| {
        // One thread (`MODEL_THREADS`; here two runs at once took 44 s at two
        // threads each, 16 s at one).
        let mut args = vec![
            "-m",
            &model,
            "--threads",
            crate::harness::MODEL_THREADS,
            "--temperature",
            "0",
        ];
        args.extend_from_slice(&["--max-tokens", "12", "--json", "-e", question]);
        args.extend_from_slice(extra);
        let run = sandbox.run(&args, "");
        assert_eq!(run.status, Some(0), "{}", run.stderr);
        run
    };
    let first = run("What is the capital of France?", &[]);
    assert_eq!(first.json_stats()["cached_tokens"], 0);
    assert_eq!(kv_files(&sandbox), 1, "the first run saved its prompt");
    let second = run("What is the capital of France?", &[]);
    let prompt = second.json_stats()["prompt_tokens"].as_u64().unwrap();
    let cached = second.json_stats()["cached_tokens"].as_u64().unwrap();
    assert!(prompt > 1000 && cached == prompt - 1, "{prompt} {cached}");
    assert_eq!(text(&second), text(&first));
    // Another question: the system prompt and tools come from the cache.
    let other = run("Name a large animal.", &[]);
    let cached = other.json_stats()["cached_tokens"].as_u64().unwrap();
    assert!(cached > 1000, "{cached}");
    let uncached = run("Name a large animal.", &["--no-prompt-cache"]);
    assert_eq!(uncached.json_stats()["cached_tokens"], 0);
    assert_eq!(text(&other), text(&uncached));
}

#[test]
fn no_prompt_cache_writes_nothing() {
    let sandbox = Sandbox::new("kv-off");
    let model = test_model().to_str().expect("UTF-8").to_string();
    let args = [
        "-m",
        &model,
        "--threads",
        crate::harness::MODEL_THREADS,
        "--max-tokens",
        "4",
        "--no-prompt-cache",
        "-e",
        "hi",
    ];
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert_eq!(kv_files(&sandbox), 0);
}

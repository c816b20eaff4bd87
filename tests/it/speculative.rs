//! Speculative decoding through the real binary: the flags, their errors, and the
//! drafted and accepted tokens in `--json` stats.

use crate::api_server::test_model;
use crate::harness::Sandbox;

/// An edit that SmolLM2 answers with a copy of the file: greedy text depends on the
/// CPU's kernels, and a two-function file it only half copied on an AMD EPYC (24
/// tokens, its one draft rejected); this one it copies on every CPU tried.
const FILE: &str = "def compute_total(items):\n    total = 0\n    for item in items:\n        \
                    total += item.price * item.quantity\n    return total\n\n\
                    def apply_discount(total, rate):\n    if rate < 0 or rate > 1:\n        \
                    raise ValueError(\"rate must be between 0 and 1\")\n    \
                    return total * (1 - rate)\n";

fn ask(sandbox: &Sandbox, extra: &[&str]) -> crate::harness::Run {
    let model = test_model().to_str().expect("UTF-8").to_string();
    let question = format!(
        "Here is a Python file:\n\n{FILE}\nRewrite the whole file with the function \
         compute_total renamed to sum_items. Output only the code."
    );
    let mut args = vec![
        "-m",
        model.as_str(),
        "--threads",
        crate::harness::MODEL_THREADS,
        "--temperature",
        "0",
    ];
    args.extend_from_slice(&["--notools", "--no-prompt-cache", "--max-tokens", "64"]);
    args.extend_from_slice(extra);
    args.extend_from_slice(&["-e", question.as_str()]);
    sandbox.run(&args, "")
}

#[test]
fn drafted_and_accepted_tokens_are_in_the_stats() {
    let sandbox = Sandbox::new("spec-stats");
    let run = ask(&sandbox, &["--json"]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let stats = run.json_stats();
    let drafted = stats["draft_tokens"].as_u64().expect("draft_tokens");
    let accepted = stats["draft_accepted"].as_u64().expect("draft_accepted");
    assert!(accepted > 0 && accepted <= drafted, "{stats}");
    // Without speculation the stats say nothing of drafts.
    let run = ask(&sandbox, &["--json", "--spec", "off"]);
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    assert!(
        run.stdout.contains("\"completion_tokens\""),
        "{}",
        run.stdout
    );
    assert!(!run.stdout.contains("draft_"), "{}", run.stdout);
}

#[test]
fn speculation_flags_are_checked_before_anything_loads() {
    let sandbox = Sandbox::new("spec-flags");
    let run = ask(&sandbox, &["--spec", "draft"]);
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("--model-draft FILE"), "{}", run.stderr);
    let run = ask(&sandbox, &["--spec", "lookahead"]);
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("off, ngram, draft"), "{}", run.stderr);
    let run = ask(&sandbox, &["--draft-max", "0"]);
    assert_eq!(run.status, Some(2), "{}", run.stderr);
    assert!(run.stderr.contains("1 to 64"), "{}", run.stderr);
    // A draft model of another vocabulary is refused by name.
    let gemma = crate::models::gemma3();
    let run = ask(&sandbox, &["--model-draft", gemma.to_str().unwrap()]);
    assert_ne!(run.status, Some(0), "{}", run.stderr);
    assert!(run.stderr.contains("tokenizer"), "{}", run.stderr);
}

//! `scripts/synthetic_gguf.py`: a random-weight GGUF with SmolLM2's shape and its
//! real tokenizer (what the GPU check writes on a box with no model hub) loads in
//! shepherd, generates exactly what it is asked for, and `shepherd bench` measures it.

use std::path::PathBuf;
use std::process::Command;

use crate::harness::{Sandbox, TempDir};
use crate::models::smollm2;

/// Runs the writer (standard library only: any python3) with `args`.
fn writer(args: &[&std::ffi::OsStr]) {
    let python = std::env::var("SHEPHERD_TEST_PYTHON").unwrap_or_else(|_| "python3".into());
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/synthetic_gguf.py");
    let status = Command::new(python)
        .arg(script)
        .args(args)
        .status()
        .expect("run synthetic_gguf.py");
    assert!(status.success(), "synthetic_gguf.py {args:?} failed");
}

/// A model of `shape` with the tokenizer of `tokenizer`, written into `dir`.
fn write_model(dir: &TempDir, shape: &str, tokenizer: &std::path::Path) -> PathBuf {
    let out = dir.path().join(format!("{shape}.gguf"));
    writer(&[
        "--like".as_ref(),
        shape.as_ref(),
        "--tokenizer-from".as_ref(),
        tokenizer.as_ref(),
        out.as_ref(),
    ]);
    out
}

#[test]
fn a_synthetic_smollm2_shape_loads_and_generates_what_is_asked() {
    let dir = TempDir::new("synthetic-gguf");
    let model = write_model(&dir, "smollm2-135m", &smollm2());
    let sandbox = Sandbox::new("synthetic-run");
    let model = model.to_str().expect("UTF-8");
    let mut args = vec!["-m", model];
    args.extend(
        "--json --notools --no-prompt-cache --threads 1 --temperature 0 --max-tokens 12 -e"
            .split(' '),
    );
    args.push("Say something.");
    let run = sandbox.run(&args, "");
    assert_eq!(run.status, Some(0), "{}", run.stderr);
    let stats = run.json_stats();
    // The writer silences the end-of-turn rows, so the reply runs to the cap.
    assert_eq!(stats["completion_tokens"], 12, "{stats}");
    assert!(stats["prompt_tokens"].as_u64().unwrap() > 5, "{stats}");

    // The same file through `shepherd bench`: one line per test, llama-bench's fields.
    let bench = sandbox.run(
        &[
            "-m",
            model,
            "--threads",
            "1",
            "bench",
            "-p",
            "32",
            "-n",
            "4",
            "-r",
            "1",
            "-o",
            "jsonl",
        ],
        "",
    );
    assert_eq!(bench.status, Some(0), "{}", bench.stderr);
    let lines = bench.json_lines();
    let tests: Vec<&str> = lines.iter().map(|l| l["test"].as_str().unwrap()).collect();
    assert_eq!(tests, ["pp32", "tg4"], "{}", bench.stdout);
    for line in &lines {
        assert!(line["avg_ts"].as_f64().unwrap() > 0.0, "{line}");
        assert_eq!(line["samples_ts"].as_array().unwrap().len(), 1, "{line}");
    }
}

#[test]
fn the_writer_is_deterministic_and_the_tokenizer_alone_travels() {
    let dir = TempDir::new("synthetic-tokenizer");
    let tokenizer = dir.path().join("tokenizer.gguf");
    writer(&[
        "--extract-tokenizer".as_ref(),
        smollm2().as_ref(),
        tokenizer.as_ref(),
    ]);
    let size = std::fs::metadata(&tokenizer).unwrap().len();
    assert!(size < 4_000_000, "the tokenizer alone is {size} bytes");
    // A model from the small file is the model from the whole one, byte for byte.
    let from_model = write_model(&dir, "smollm2-135m", &smollm2());
    let copy = dir.path().join("copy.gguf");
    std::fs::rename(&from_model, &copy).unwrap();
    let from_tokenizer = write_model(&dir, "smollm2-135m", &tokenizer);
    assert!(std::fs::read(&copy).unwrap() == std::fs::read(&from_tokenizer).unwrap());
}

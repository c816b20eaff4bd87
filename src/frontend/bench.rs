//! `shepherd bench`: llama-bench's pp and tg tests on the in-process model.
//!
//! The model, its placement and flash attention come from the ordinary flags
//! (`-m`, `--gpu-layers`, `--flash-attn`, `--threads`, ...), so what is measured is
//! what a chat or a server with the same flags runs. As llama-bench does, each test
//! gets a context just large enough for it, one untimed warm-up run, then `-r`
//! timed runs; `-d N` fills the cache with N tokens first (not timed). The output is
//! llama-bench's: a Markdown table, or with `-o jsonl` one JSON object a test with
//! its field names (`n_prompt`, `n_gen`, `n_depth`, `avg_ts`, `stddev_ts`, ...), so
//! scripts that read llama-bench's lines read these too.

use std::io::{self, Write};

use serde_json::json;

use super::connect::{self, OpenError};
use super::exit::{EXIT_FAILURE, EXIT_OK, EXIT_USAGE};
use crate::backend::llamacpp::{BenchReport, BenchTest, LlamaBackend, LlamaConfig};
use crate::config::resolve::Settings;

/// What `bench` was asked for: llama-bench's `-p`, `-n`, `-d`, `-r` and `-o`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Plan {
    n_prompt: usize,
    n_gen: usize,
    depth: usize,
    repetitions: usize,
    jsonl: bool,
}

impl Default for Plan {
    fn default() -> Self {
        Plan {
            n_prompt: 512,
            n_gen: 128,
            depth: 0,
            repetitions: 5,
            jsonl: false,
        }
    }
}

const USAGE: &str = "usage: shepherd [-m FILE] [--gpu-layers N] [--flash-attn on|off] bench [run] [-p N] [-n N] [-d N] [-r N] [-o md|jsonl]";

/// Runs `shepherd bench WORDS`; returns the exit code.
pub fn run(settings: &Settings, words: &[String]) -> i32 {
    let plan = match parse(words) {
        Ok(plan) => plan,
        Err(message) => {
            eprintln!("shepherd bench: {message}\n{USAGE}");
            return EXIT_USAGE;
        }
    };
    let config = match connect::local_config(settings) {
        Ok(config) => config,
        Err(OpenError::Usage(message)) => {
            eprintln!("shepherd bench: {message}");
            return EXIT_USAGE;
        }
    };
    match measure_all(&config, plan, &mut io::stdout()) {
        Ok(()) => EXIT_OK,
        Err(message) => {
            eprintln!("shepherd bench: {message}");
            EXIT_FAILURE
        }
    }
}

fn parse(words: &[String]) -> Result<Plan, String> {
    let mut plan = Plan::default();
    let mut words = words.iter().map(String::as_str).peekable();
    if words.peek() == Some(&"run") {
        words.next();
    }
    while let Some(word) = words.next() {
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(value)),
            _ => (word, None),
        };
        let mut value = || {
            inline
                .or_else(|| words.next())
                .ok_or_else(|| format!("{name} needs a value"))
        };
        match name {
            "-p" | "--n-prompt" => plan.n_prompt = number(name, value()?)?,
            "-n" | "--n-gen" => plan.n_gen = number(name, value()?)?,
            "-d" | "--n-depth" => plan.depth = number(name, value()?)?,
            "-r" | "--repetitions" => plan.repetitions = number(name, value()?)?.max(1),
            "-o" | "--output" => {
                plan.jsonl = match value()? {
                    "md" => false,
                    "jsonl" => true,
                    other => return Err(format!("{name} {other}: expected md or jsonl")),
                }
            }
            other => return Err(format!("unexpected argument '{other}'")),
        }
    }
    if plan.n_prompt == 0 && plan.n_gen == 0 {
        return Err("nothing to measure: -p and -n are both 0".into());
    }
    Ok(plan)
}

fn number(name: &str, text: &str) -> Result<usize, String> {
    text.parse()
        .map_err(|_| format!("{name} {text}: expected a whole number"))
}

/// The tests of `plan` (pp, then tg), each printed as soon as it is measured.
fn measure_all(config: &LlamaConfig, plan: Plan, out: &mut dyn Write) -> Result<(), String> {
    let tests = [
        (plan.n_prompt > 0).then_some(BenchTest {
            n_prompt: plan.n_prompt,
            n_gen: 0,
            depth: plan.depth,
        }),
        (plan.n_gen > 0).then_some(BenchTest {
            n_prompt: 0,
            n_gen: plan.n_gen,
            depth: plan.depth,
        }),
    ];
    if !plan.jsonl {
        writeln!(
            out,
            "| model | ngl | fa | test | t/s |\n| --- | ---: | ---: | ---: | ---: |"
        )
        .map_err(write_error)?;
    }
    for test in tests.into_iter().flatten() {
        let reports = measure(config, test, plan.repetitions)?;
        let line = if plan.jsonl {
            jsonl_line(config, test, &reports)
        } else {
            table_row(config, test, &reports)
        };
        writeln!(out, "{line}").map_err(write_error)?;
        out.flush().map_err(write_error)?;
    }
    Ok(())
}

fn write_error(error: io::Error) -> String {
    format!("writing the results: {error}")
}

/// One test in a fresh context of its own size: a warm-up, then `runs` timed runs.
fn measure(config: &LlamaConfig, test: BenchTest, runs: usize) -> Result<Vec<BenchReport>, String> {
    let mut config = config.clone();
    // Just big enough, as llama-bench sizes it, but never under llama.cpp's padding
    // of a context (256): a `-n 4` test alone would be refused.
    let n_ctx = (test.depth + test.n_prompt + test.n_gen).max(256);
    config.context_size = Some(u32::try_from(n_ctx).unwrap_or(u32::MAX));
    config.parallel = 1;
    config.prompt_cache = None;
    let mut llm = LlamaBackend::new(config).map_err(|e| e.to_string())?;
    let warm_up = BenchTest {
        n_gen: test.n_gen.min(1),
        ..test
    };
    llm.bench(warm_up).map_err(|e| e.to_string())?;
    (0..runs)
        .map(|_| llm.bench(test).map_err(|e| e.to_string()))
        .collect()
}

/// Tokens per second of each run: the prompt's rate for a pp test, else generation's.
fn rates(test: BenchTest, reports: &[BenchReport]) -> Vec<f64> {
    reports
        .iter()
        .map(|r| {
            if test.n_prompt > 0 {
                r.pp_tps
            } else {
                r.tg_tps
            }
        })
        .collect()
}

/// Mean and sample standard deviation, as llama-bench reports them.
fn mean_stddev(samples: &[f64]) -> (f64, f64) {
    let n = samples.len() as f64;
    let mean = samples.iter().sum::<f64>() / n.max(1.0);
    if samples.len() < 2 {
        return (mean, 0.0);
    }
    let var = samples.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0);
    (mean, var.sqrt())
}

/// llama-bench's test name: `pp512`, `tg128`, with ` @ d4096` for a depth.
fn test_name(test: BenchTest) -> String {
    let base = if test.n_prompt > 0 {
        format!("pp{}", test.n_prompt)
    } else {
        format!("tg{}", test.n_gen)
    };
    if test.depth > 0 {
        format!("{base} @ d{}", test.depth)
    } else {
        base
    }
}

fn model_name(config: &LlamaConfig) -> String {
    config.model_path.file_name().map_or_else(
        || config.model_path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

/// Flash attention as run: `1`, `0`, or `auto` where llama.cpp decided.
fn fa_text(flash_attn: Option<bool>) -> &'static str {
    match flash_attn {
        Some(true) => "1",
        Some(false) => "0",
        None => "auto",
    }
}

fn table_row(config: &LlamaConfig, test: BenchTest, reports: &[BenchReport]) -> String {
    let (mean, stddev) = mean_stddev(&rates(test, reports));
    let fa = reports.first().and_then(|r| r.flash_attn);
    format!(
        "| {} | {} | {} | {} | {mean:.2} ± {stddev:.2} |",
        model_name(config),
        config.gpu_layers,
        fa_text(fa),
        test_name(test)
    )
}

fn jsonl_line(config: &LlamaConfig, test: BenchTest, reports: &[BenchReport]) -> String {
    let samples = rates(test, reports);
    let (mean, stddev) = mean_stddev(&samples);
    let first = reports.first().copied().unwrap_or_default();
    json!({
        "build": format!("shepherd {}", env!("CARGO_PKG_VERSION")),
        "model_filename": config.model_path.display().to_string(),
        "n_gpu_layers": config.gpu_layers,
        "n_threads": config.threads,
        "flash_attn": first.flash_attn,
        "n_ubatch": first.n_ubatch,
        "n_prompt": test.n_prompt,
        "n_gen": test.n_gen,
        "n_depth": test.depth,
        "test": test_name(test),
        "avg_ts": mean,
        "stddev_ts": stddev,
        "samples_ts": samples,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(line: &str) -> Vec<String> {
        line.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn reads_llama_bench_spellings() {
        assert_eq!(parse(&[]).unwrap(), Plan::default());
        let plan = parse(&words("run -p 64 --n-gen=16 -d 4096 -r 2 -o jsonl")).unwrap();
        assert_eq!(
            plan,
            Plan {
                n_prompt: 64,
                n_gen: 16,
                depth: 4096,
                repetitions: 2,
                jsonl: true
            }
        );
        for bad in ["-p", "-p x", "-o csv", "--nope", "-p 0 -n 0"] {
            assert!(parse(&words(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_tests_and_spreads_as_llama_bench_does() {
        let pp = BenchTest {
            n_prompt: 512,
            n_gen: 0,
            depth: 0,
        };
        let tg = BenchTest {
            n_prompt: 0,
            n_gen: 128,
            depth: 4096,
        };
        assert_eq!(test_name(pp), "pp512");
        assert_eq!(test_name(tg), "tg128 @ d4096");
        let (mean, stddev) = mean_stddev(&[2.0, 4.0, 6.0]);
        assert_eq!((mean, stddev), (4.0, 2.0));
        assert_eq!(mean_stddev(&[3.0]), (3.0, 0.0));
    }
}

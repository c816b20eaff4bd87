//! A mutation fuzzer for everything that parses what a peer sends: the HTTP
//! request head, the four providers' replies (streamed and whole), the output
//! filter and its tool-call markup, tool-server lines, strict JSON, GGUF
//! headers and slot (prompt cache) files.
//!
//! Each target is fed random bytes and mutations of its seeds (the recorded
//! fixtures and hand-picked inputs): bit flips, inserted, deleted and repeated
//! runs, splices of two seeds, and tokens its grammar cares about. A panic is
//! caught, counted and its input written to `target/fuzz-crashes/`, so it can
//! be replayed. `fuzz_targets_survive_a_short_run` runs a few hundred inputs per
//! target in every `make test`; `make fuzz` runs each for `FUZZ_SECS` seconds
//! (default 30) in a release build and prints executions and crashes per target.
//! Not coverage-guided (that needs a nightly toolchain and libFuzzer); seeded,
//! so every run can be replayed with `FUZZ_SEED`.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::util::rng::Rng;

struct Target {
    name: &'static str,
    seeds: Vec<Vec<u8>>,
    /// Tokens worth inserting: what the grammar under test reacts to.
    tokens: &'static [&'static str],
    run: fn(&[u8]),
}

fn fixtures(dir: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(dir);
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.sort();
    files.iter().filter_map(|f| std::fs::read(f).ok()).collect()
}

const JSON_TOKENS: &[&str] = &[
    "{", "}", "[", "]", "\"", "\\", "\\u", "\\ud800", ":", ",", "null", "1e999", "-0", "\n",
];
const SSE_TOKENS: &[&str] = &[
    "data: ",
    "event: ",
    "\n\n",
    "\r\n",
    "\r",
    ": keep-alive\n",
    "[DONE]",
    "{",
    "}",
    "\"",
    "\\",
    "\"content\":",
    "\"tool_calls\":",
    "\"index\":",
    "\"arguments\":",
    "\"finish_reason\":",
    "\"type\":",
    "\"delta\":",
    "\"partial_json\":",
    "\"functionCall\":",
    "\"done\":true",
];
const MARKUP_TOKENS: &[&str] = &[
    "<think>",
    "</think>",
    "<tool_call>",
    "</tool_call>",
    "```",
    "```json\n",
    "{\"name\":",
    "\"arguments\":",
    "<|channel|>",
    "<|message|>",
    "<|call|>",
    "[TOOL_CALLS]",
    "<function=",
    "</function>",
    "<parameter=",
    "\u{ff5c}",
    "\u{2581}",
    "<|python_tag|>",
    "\n",
];
const HTTP_TOKENS: &[&str] = &[
    "\r\n",
    "\n",
    "GET ",
    "POST ",
    " HTTP/1.1",
    " HTTP/1.0",
    "Host: ",
    "Content-Length: ",
    "Transfer-Encoding: chunked",
    "Expect: 100-continue",
    ":",
    " ",
    "\t",
    "\0",
    "http://a:1/",
    "99999999999999999999",
];

/// Every target with its seeds: long because it is a table, one entry per parser.
fn targets() -> Vec<Target> {
    let text = |s: &str| s.as_bytes().to_vec();
    vec![
        Target {
            name: "http-head",
            seeds: vec![
                text("POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"),
                text("GET http://127.0.0.1:8000/health HTTP/1.1\r\nHost: x\r\n\r\n"),
                text("\r\nGET / HTTP/1.0\r\nA: b\r\n c\r\n\r\n"),
            ],
            tokens: HTTP_TOKENS,
            run: crate::frontend::serve::http::fuzz_head,
        },
        Target {
            name: "openai-reply",
            seeds: fixtures("openai"),
            tokens: SSE_TOKENS,
            run: crate::backend::openai::fuzz_reply,
        },
        Target {
            name: "anthropic-reply",
            seeds: fixtures("anthropic"),
            tokens: SSE_TOKENS,
            run: crate::backend::anthropic::fuzz_reply,
        },
        Target {
            name: "gemini-reply",
            seeds: fixtures("gemini"),
            tokens: SSE_TOKENS,
            run: crate::backend::gemini::fuzz_reply,
        },
        Target {
            name: "ollama-reply",
            seeds: fixtures("ollama"),
            tokens: SSE_TOKENS,
            run: crate::backend::ollama::fuzz_reply,
        },
        Target {
            name: "output-filter",
            seeds: vec![
                text("<think>hm</think>Sure.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a\"}}\n</tool_call>"),
                text("```python\nprint(1)\n```\n[TOOL_CALLS]read{\"path\": \"x\"}"),
                text("<|channel|>analysis<|message|>x<|end|><|start|>assistant<|channel|>commentary to=functions.read <|constrain|>json<|message|>{\"path\":\"a\"}<|call|>"),
                text("<function=read>\n<parameter=path>\na\n</parameter>\n</function>"),
            ],
            tokens: MARKUP_TOKENS,
            run: fuzz_filter,
        },
        Target {
            name: "tool-server-line",
            seeds: vec![
                text("{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"executeTool\",\"params\":{\"name\":\"read\",\"arguments\":{}}}\n"),
                text("[{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"auth\",\"params\":{\"token\":\"t\"}}]\n"),
            ],
            tokens: JSON_TOKENS,
            run: fuzz_rpc_line,
        },
        Target {
            name: "strict-json",
            seeds: vec![text("{\"a\": [1, 2.5, \"\\u00e9\", null, {\"b\": true}]}")],
            tokens: JSON_TOKENS,
            run: |bytes| {
                let _ = crate::util::json::parse_strict(bytes);
            },
        },
        Target {
            name: "gguf-header",
            seeds: vec![gguf_seed()],
            tokens: &["GGUF", "\u{3}\0\0\0", "\u{ff}\u{ff}\u{ff}\u{ff}", "\0\0\0\0\0\0\0\0"],
            run: |bytes| {
                let len = bytes.len() as u64;
                let _ = crate::llama::gguf::read(std::io::Cursor::new(bytes), len);
                let _ = crate::llama::gguf::check_whole(std::io::Cursor::new(bytes), len);
            },
        },
        Target {
            name: "slot-file",
            seeds: vec![crate::backend::llamacpp::prompt_cache::fuzz_seed()],
            tokens: &["SHPKV\0\0\u{1}", "\u{ff}\u{ff}\u{ff}\u{ff}", "\0\0\0\0\0\0\0\0", "fuzz model"],
            run: crate::backend::llamacpp::prompt_cache::fuzz_file,
        },
    ]
}

fn fuzz_filter(bytes: &[u8]) {
    let text = String::from_utf8_lossy(bytes);
    let mut filter = crate::stream::filter::OutputFilter::new(vec!["read".into(), "bash".into()]);
    let mut sink = Vec::new();
    // Split where the bytes say, so chunk boundaries vary with the input too.
    let cut = text
        .char_indices()
        .map(|(i, _)| i)
        .nth(bytes.first().map_or(0, |b| usize::from(*b) % 7))
        .unwrap_or(0);
    filter.push(&text[..cut], &mut sink);
    filter.push(&text[cut..], &mut sink);
    filter.finish(&mut sink);
    let _ = filter.take_tool_calls();
}

fn fuzz_rpc_line(bytes: &[u8]) {
    let mut reader = bytes;
    use crate::stream::CappedLine;
    while let Ok(line) = crate::stream::read_capped_line(&mut reader, 1 << 16) {
        match line {
            CappedLine::Eof => break,
            CappedLine::TooLong { .. } => continue,
            CappedLine::Text(line) => {
                if let crate::tools::rpc::Frame::Json(value) = crate::tools::rpc::frame(&line) {
                    let _ = crate::tools::rpc::is_request_shaped(&value);
                }
            }
        }
    }
}

/// A small valid GGUF header: version 3, no tensors, two metadata keys.
fn gguf_seed() -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend(2u64.to_le_bytes());
    let key = |out: &mut Vec<u8>, name: &str| {
        out.extend((name.len() as u64).to_le_bytes());
        out.extend(name.as_bytes());
    };
    key(&mut out, "general.architecture");
    out.extend(8u32.to_le_bytes());
    out.extend(5u64.to_le_bytes());
    out.extend(b"llama");
    key(&mut out, "llama.context_length");
    out.extend(4u32.to_le_bytes());
    out.extend(2048u32.to_le_bytes());
    out
}

/// One input: random bytes, or a seed mutated a few times.
fn input(rng: &mut Rng, target: &Target) -> Vec<u8> {
    let pick = |rng: &mut Rng, n: usize| (rng.next() % n.max(1) as u64) as usize;
    if target.seeds.is_empty() || rng.next() % 8 == 0 {
        let len = pick(rng, 512);
        return (0..len).map(|_| rng.next() as u8).collect();
    }
    let mut data = target.seeds[pick(rng, target.seeds.len())].clone();
    for _ in 0..1 + pick(rng, 6) {
        let at = pick(rng, data.len() + 1);
        match rng.next() % 7 {
            0 if !data.is_empty() => {
                let i = pick(rng, data.len());
                data[i] ^= 1 << (rng.next() % 8);
            }
            1 => data.insert(at, rng.next() as u8),
            2 if at < data.len() => {
                let end = (at + 1 + pick(rng, 32)).min(data.len());
                data.drain(at..end);
            }
            3 if at < data.len() => {
                let end = (at + 1 + pick(rng, 64)).min(data.len());
                let run = data[at..end].to_vec();
                for _ in 0..1 + pick(rng, 8) {
                    data.splice(at..at, run.iter().copied());
                }
            }
            4 => {
                let other = &target.seeds[pick(rng, target.seeds.len())];
                let from = pick(rng, other.len());
                data.truncate(at);
                data.extend_from_slice(&other[from..]);
            }
            _ => {
                let token = target.tokens[pick(rng, target.tokens.len())];
                data.splice(at..at, token.bytes());
            }
        }
    }
    data
}

/// Runs `target` for `budget` (or `max_execs` inputs); (executions, crashes).
fn fuzz(target: &Target, seed: u64, budget: Duration, max_execs: u64) -> (u64, u64) {
    let mut rng = Rng(seed ^ target.name.len() as u64);
    let started = Instant::now();
    let (mut execs, mut crashes) = (0, 0);
    while execs < max_execs && started.elapsed() < budget {
        let data = input(&mut rng, target);
        execs += 1;
        if catch_unwind(AssertUnwindSafe(|| (target.run)(&data))).is_err() {
            crashes += 1;
            let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-crashes");
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::write(dir.join(format!("{}-{execs}", target.name)), &data);
        }
    }
    (execs, crashes)
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn fuzz_targets_survive_a_short_run() {
    for target in targets() {
        let (execs, crashes) = fuzz(&target, 1, Duration::from_secs(20), 300);
        assert_eq!(
            crashes, 0,
            "{}: {crashes} crashes in {execs} inputs",
            target.name
        );
    }
}

/// `make fuzz`: every target for `FUZZ_SECS`, a report line each.
#[test]
#[ignore = "long: run by `make fuzz`"]
fn fuzz_every_target() {
    let secs = env_u64("FUZZ_SECS", 30);
    let seed = env_u64("FUZZ_SEED", 0x5eed);
    let mut failed = Vec::new();
    for target in targets() {
        let (execs, crashes) = fuzz(&target, seed, Duration::from_secs(secs), u64::MAX);
        eprintln!(
            "fuzz {:<18} {execs:>10} executions  {crashes} crashes",
            target.name
        );
        if crashes > 0 {
            failed.push(target.name);
        }
    }
    assert!(
        failed.is_empty(),
        "crashes in {failed:?}: inputs in target/fuzz-crashes/"
    );
}

//! Reading and checking flag values: numbers in their ranges, words from
//! their lists (shared with the completion scripts), host and port shapes,
//! tool globs, and the value lists a flag's completion offers.

use super::*;

/// `--cache-type` (and llama-server's `--cache-type-k`/`-v`, which name one
/// type here: both given must agree), as typed: stage two reads the word.
pub(super) fn cache_type(low: &mut LowArgs, flag: &Flag, raw: &str) -> Result<(), UsageError> {
    if low.cache_type.as_ref().is_some_and(|before| before != raw) {
        return Err(UsageError(format!(
            "--{}: shepherd keeps K and V in one cache type; give one --cache-type",
            flag.long
        )));
    }
    low.cache_type = Some(raw.to_string());
    Ok(())
}

/// `--flash-attn=on|off|auto` (alone: on).
pub(super) fn flash_attn(low: &mut LowArgs, flag: &Flag, raw: &str) -> Result<(), UsageError> {
    low.flash_attn = match choice(flag, raw, &FLASH_ATTN_MODES)?.as_str() {
        "on" => Some(true),
        "off" => Some(false),
        _ => None,
    };
    Ok(())
}

pub(super) fn bad(flag: &Flag, raw: &str, expected: &str) -> UsageError {
    UsageError(format!(
        "invalid value '{raw}' for --{}: expected {expected}",
        flag.long
    ))
}

/// An unsigned integer in `min..=max`.
pub(super) fn ranged(flag: &Flag, raw: &str, min: u64, max: u64) -> Result<u64, UsageError> {
    match raw.trim().parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(bad(
            flag,
            raw,
            &format!("a whole number from {min} to {max}"),
        )),
    }
}

/// A finite float in `0..=max`.
pub(super) fn ranged_f32(flag: &Flag, raw: &str, max: f32) -> Result<f32, UsageError> {
    parse_unit_float(raw, max).map_err(|e| bad(flag, raw, &e))
}

/// `--tensor-split 3,1`: each GPU's share, numbers of 0 or more, not all 0.
pub(super) fn tensor_split(flag: &Flag, raw: &str) -> Result<Vec<f32>, UsageError> {
    let shares: Option<Vec<f32>> = raw
        .split(',')
        .map(|part| part.trim().parse::<f32>().ok())
        .map(|share| share.filter(|s| s.is_finite() && *s >= 0.0))
        .collect();
    match shares {
        Some(shares) if shares.iter().any(|s| *s > 0.0) => Ok(shares),
        _ => Err(bad(
            flag,
            raw,
            "shares of 0 or more, comma-separated, not all 0 (e.g. 3,1)",
        )),
    }
}

pub(super) fn gpu_layers(flag: &Flag, raw: &str) -> Result<i32, UsageError> {
    match raw.trim().parse::<i32>() {
        Ok(n) if n >= -1 => Ok(n),
        _ => Err(bad(flag, raw, "-1 (all) or a whole number of layers")),
    }
}

/// `--sleep-idle-seconds`: seconds from 1 (as llama-server's int takes them),
/// or -1 for never, its default (`None`).
pub(super) fn sleep_idle(flag: &Flag, raw: &str) -> Result<Option<u32>, UsageError> {
    match raw.trim().parse::<i64>() {
        Ok(-1) => Ok(None),
        Ok(n) if (1..=i64::from(i32::MAX)).contains(&n) => Ok(u32::try_from(n).ok()),
        _ => Err(bad(
            flag,
            raw,
            "a whole number of seconds from 1, or -1 (never)",
        )),
    }
}

/// `--host`: one address, or several comma-separated, none empty.
pub(super) fn hosts(flag: &Flag, raw: &str) -> Result<String, UsageError> {
    match raw.split(',').all(|h| !h.trim().is_empty()) {
        true => Ok(raw.to_string()),
        false => Err(bad(flag, raw, "an address, or several separated by commas")),
    }
}

/// `--alias` and `--tags`: names separated by commas, as llama-server takes
/// them (each trimmed, empty ones skipped); each a model id clients can send
/// back (no control characters), at most 256 bytes; at least one.
pub(super) fn names(flag: &Flag, raw: &str) -> Result<Vec<String>, UsageError> {
    let names: Vec<String> = (raw.split(',').map(str::trim))
        .filter(|n| !n.is_empty())
        .map(String::from)
        .collect();
    let fine = |n: &String| n.len() <= 256 && !n.chars().any(char::is_control);
    match !names.is_empty() && names.iter().all(fine) {
        true => Ok(names),
        false => Err(bad(
            flag,
            raw,
            "names of 1 to 256 characters separated by commas, no control characters",
        )),
    }
}

/// `--chat-template`: Jinja source (it has `{{` or `{%`), or the name of one of
/// llama.cpp's built-in templates (`chatml`, `llama3`, `mistral-v7`, …), as
/// llama-server takes it.
pub(super) fn chat_template(flag: &Flag, raw: &str) -> Result<String, UsageError> {
    if raw.contains("{{") || raw.contains("{%") || crate::template::is_builtin(raw) {
        return Ok(raw.to_string());
    }
    let names = crate::template::builtin_names().join(", ");
    Err(bad(
        flag,
        raw,
        &format!("Jinja source or a built-in template name ({names}); give a file as --chat-template-file FILE"),
    ))
}

/// A JSON object (`--chat-template-kwargs`).
pub(super) fn json_object(
    flag: &Flag,
    raw: &str,
) -> Result<serde_json::Map<String, serde_json::Value>, UsageError> {
    match serde_json::from_str(raw) {
        Ok(serde_json::Value::Object(map)) => Ok(map),
        _ => Err(bad(
            flag,
            raw,
            "a JSON object, e.g. '{\"enable_thinking\": false}'",
        )),
    }
}

pub(super) fn choice(flag: &Flag, raw: &str, allowed: &[&str]) -> Result<String, UsageError> {
    if allowed.contains(&raw) {
        Ok(raw.to_string())
    } else {
        Err(bad(flag, raw, &format!("one of {}", allowed.join(", "))))
    }
}

pub const REASONING_LEVELS: [&str; 6] = ["off", "on", "auto", "low", "medium", "high"];
/// `--split-mode`: how offloaded layers go over several GPUs.
pub const SPLIT_MODES: [&str; 3] = crate::llama::SplitMode::NAMES;
/// `--spec`: speculative decoding's drafter.
pub const SPEC_MODES: [&str; 3] = crate::core::SpecMode::NAMES;
/// How `/v1/embeddings` pools a sequence (`--pooling`); `rank` scores pairs for `/rerank`.
pub const POOLING_MODES: [&str; 4] = crate::llama::Pooling::NAMES;
/// `--cache-type`: the KV cache's element type.
pub const CACHE_TYPES: [&str; 4] = crate::llama::CacheType::NAMES;
pub const FLASH_ATTN_MODES: [&str; 3] = ["on", "off", "auto"];
/// What `--approve` accepts besides tool-name globs.
pub const APPROVE_WORDS: [&str; 1] = ["all"];

/// The backend types a provider can have; `config` owns the enum, this only checks the word.
pub const BACKEND_NAMES: [&str; 7] = [
    "openai",
    "anthropic",
    "gemini",
    "ollama",
    "llamacpp",
    "tensorrt",
    "cli",
];

pub(super) fn backend_name(raw: &str) -> Result<String, UsageError> {
    if BACKEND_NAMES.contains(&raw) {
        Ok(raw.to_string())
    } else {
        Err(UsageError(format!(
            "invalid value '{raw}' for --backend: expected one of {}",
            BACKEND_NAMES.join(", ")
        )))
    }
}

/// Parses a float in `0..=max`, rejecting NaN and infinities. Shared with the
/// environment and config checks so all three layers accept the same values.
pub fn parse_unit_float(raw: &str, max: f32) -> Result<f32, String> {
    match raw.trim().parse::<f32>() {
        Ok(x) if x.is_finite() && (0.0..=max).contains(&x) => Ok(x),
        _ => Err(format!("a number from 0 to {max}")),
    }
}

/// Parses a `--max-tokens` value: -1 (maximum), 0 (automatic) or a positive count.
pub fn max_tokens(raw: &str) -> Result<i64, String> {
    match raw.trim().parse::<i64>() {
        Ok(n) if n >= -1 && n <= MAX_TOKEN_COUNT as i64 => Ok(n),
        _ => Err(format!("-1, 0 or a token count up to {MAX_TOKEN_COUNT}")),
    }
}

/// Parses a `--max-rounds` value in `1..=1000`.
pub fn max_rounds(raw: &str) -> Result<u32, String> {
    match raw.trim().parse::<u32>() {
        Ok(n) if (1..=MAX_ROUNDS_LIMIT).contains(&n) => Ok(n),
        _ => Err(format!("a whole number from 1 to {MAX_ROUNDS_LIMIT}")),
    }
}

/// Parses `llm,tools,http`; `all` or an empty list means every category.
pub fn debug_categories(raw: &str) -> Result<Vec<Category>, String> {
    let expected = || "a comma-separated list of llm, tools, http (or all)".to_string();
    let mut out = Vec::new();
    for word in raw.split(',').map(str::trim).filter(|w| !w.is_empty()) {
        if word == "all" {
            return Ok(Category::ALL.to_vec());
        }
        let category = Category::parse(word).ok_or_else(expected)?;
        if !out.contains(&category) {
            out.push(category);
        }
    }
    if out.is_empty() {
        return Ok(Category::ALL.to_vec());
    }
    Ok(out)
}

/// Checks a `HOST:PORT` value (the port part at least); shared with the environment layer.
pub fn parse_host_port(raw: &str) -> Result<String, String> {
    let raw = raw.trim();
    match raw.rsplit_once(':') {
        Some((host, port)) if !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0) => {
            Ok(raw.to_string())
        }
        _ => Err("HOST:PORT with a port from 1 to 65535".into()),
    }
}

pub(super) fn host_port(flag: &Flag, raw: &str) -> Result<String, UsageError> {
    parse_host_port(raw).map_err(|e| bad(flag, raw, &e))
}

/// `--rpc 10.0.0.2:50052,box3:50052`: `HOST:PORT`s, checked for their shape (the
/// names are resolved when the model loads).
pub(super) fn rpc_workers(flag: &Flag, raw: &str) -> Result<Vec<String>, UsageError> {
    let workers: Vec<String> = split_globs(raw).collect();
    if workers.is_empty() {
        return Err(bad(flag, raw, "HOST:PORT,... (at least one worker)"));
    }
    for worker in &workers {
        let (host, _) = worker.rsplit_once(':').unwrap_or_default();
        if host.contains([':', '[', ']']) {
            return Err(bad(
                flag,
                raw,
                "HOST:PORT,... with IPv4 addresses or host names (ggml's RPC has no IPv6)",
            ));
        }
        parse_host_port(worker).map_err(|e| bad(flag, worker, &e))?;
    }
    Ok(workers)
}

/// Splits `a*,b` into globs, dropping empty pieces.
pub fn split_globs(raw: &str) -> impl Iterator<Item = String> + '_ {
    raw.split(',')
        .map(str::trim)
        .filter(|g| !g.is_empty())
        .map(str::to_string)
}

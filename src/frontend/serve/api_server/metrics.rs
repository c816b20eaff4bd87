//! `GET /metrics`: counters in Prometheus' text format, shepherd's own
//! (`shepherd_*`) and, beside them, llama-server's (`llamacpp:*`, with its
//! names, types and meanings) for the dashboards and exporters written for it.
//!
//! Counters are plain atomics updated once per request; the two speeds are
//! gauges holding the last request's figures (f64 bits in an `AtomicU64`).
//! The times llama-server adds up ([`Timing`]) come from the same speeds; its
//! decode counts from the in-process model's generation thread
//! ([`DecodeFigures`]).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::pool::Pool;
use super::Usage;
use crate::backend::llamacpp::DecodeFigures;

#[derive(Default)]
pub struct Metrics {
    pub chat_requests: AtomicU64,
    pub messages_requests: AtomicU64,
    pub completions_requests: AtomicU64,
    pub embeddings_requests: AtomicU64,
    /// `/tokenize` and `/detokenize`.
    pub tokenize_requests: AtomicU64,
    pub rejected_busy: AtomicU64,
    pub rejected_invalid: AtomicU64,
    pub failed: AtomicU64,
    pub cancelled: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub prompt_tokens_cached: AtomicU64,
    pub completion_tokens: AtomicU64,
    /// Speculative decoding's drafted and accepted tokens.
    pub draft_tokens: AtomicU64,
    pub draft_accepted: AtomicU64,
    prefill_tps: AtomicU64,
    decode_tps: AtomicU64,
    /// The longest sequence a request made (prompt and answer).
    tokens_max: AtomicU64,
    timing: Mutex<Timing>,
}

/// Time spent on prompts and on answers: in all, and since the last scrape
/// (llama-server's throughput gauges average over that window).
#[derive(Default)]
struct Timing {
    prompt_secs: f64,
    predicted_secs: f64,
    window: Window,
}

#[derive(Default, Clone, Copy)]
struct Window {
    prompt_tokens: u64,
    prompt_secs: f64,
    /// Decode steps: an answer's tokens but its first, which the prompt's
    /// logits give (llama-server's rate counts the same).
    predicted_steps: u64,
    predicted_secs: f64,
}

/// Writes one metric: its help, its type and its samples (`labels`, value).
fn write_metric(out: &mut String, name: &str, kind: &str, help: &str, lines: &[(&str, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in lines {
        let _ = writeln!(out, "{name}{labels} {value}");
    }
}

/// Tokens a second over `secs`, 0 without time.
fn rate(tokens: u64, secs: f64) -> f64 {
    if secs > 0.0 {
        tokens as f64 / secs
    } else {
        0.0
    }
}

impl Metrics {
    /// Adds a finished generation's figures.
    pub fn record(&self, usage: &Usage) {
        self.prompt_tokens
            .fetch_add(usage.prompt, Ordering::Relaxed);
        self.completion_tokens
            .fetch_add(usage.completion, Ordering::Relaxed);
        self.prompt_tokens_cached
            .fetch_add(usage.cached.unwrap_or(0), Ordering::Relaxed);
        if let Some(stats) = &usage.stats {
            self.draft_tokens
                .fetch_add(stats.draft_tokens, Ordering::Relaxed);
            self.draft_accepted
                .fetch_add(stats.draft_accepted, Ordering::Relaxed);
            if let Some(tps) = stats.prefill_tps {
                self.prefill_tps.store(tps.to_bits(), Ordering::Relaxed);
            }
            if let Some(tps) = stats.decode_tps {
                self.decode_tps.store(tps.to_bits(), Ordering::Relaxed);
            }
        }
        self.tokens_max
            .fetch_max(usage.prompt + usage.completion, Ordering::Relaxed);
        let mut timing = crate::util::sync::lock(&self.timing);
        if let Some(secs) = usage.prompt_secs() {
            timing.prompt_secs += secs;
            timing.window.prompt_tokens += usage.decoded();
            timing.window.prompt_secs += secs;
        }
        if let Some(secs) = usage.generation_secs() {
            timing.predicted_secs += secs;
            timing.window.predicted_steps += usage.completion.saturating_sub(1);
            timing.window.predicted_secs += secs;
        }
    }

    /// The whole exposition: shepherd's metrics, then llama-server's.
    pub fn render(&self, pool: Option<&Pool>, decode: DecodeFigures) -> String {
        let mut out = self.render_shepherd(pool);
        self.render_llamacpp(&mut out, pool, decode);
        out
    }

    /// The exposition text. Long on purpose: one `metric(...)` call per
    /// exported metric, in the order Prometheus shows them; splitting the list
    /// would only scatter it.
    fn render_shepherd(&self, pool: Option<&Pool>) -> String {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: &[(&str, f64)]| {
            write_metric(&mut out, &format!("shepherd_{name}"), kind, help, lines);
        };
        metric(
            "requests_total",
            "counter",
            "Requests received, by endpoint.",
            &[
                (
                    "{endpoint=\"chat_completions\"}",
                    get(&self.chat_requests) as f64,
                ),
                (
                    "{endpoint=\"messages\"}",
                    get(&self.messages_requests) as f64,
                ),
                (
                    "{endpoint=\"completions\"}",
                    get(&self.completions_requests) as f64,
                ),
                (
                    "{endpoint=\"embeddings\"}",
                    get(&self.embeddings_requests) as f64,
                ),
                (
                    "{endpoint=\"tokenize\"}",
                    get(&self.tokenize_requests) as f64,
                ),
            ],
        );
        metric(
            "requests_rejected_total",
            "counter",
            "Requests refused before generation, by reason.",
            &[
                ("{reason=\"busy\"}", get(&self.rejected_busy) as f64),
                ("{reason=\"invalid\"}", get(&self.rejected_invalid) as f64),
            ],
        );
        metric(
            "requests_failed_total",
            "counter",
            "Requests that failed in the backend.",
            &[("", get(&self.failed) as f64)],
        );
        metric(
            "requests_cancelled_total",
            "counter",
            "Requests whose client went away.",
            &[("", get(&self.cancelled) as f64)],
        );
        let prompt = get(&self.prompt_tokens);
        let cached = get(&self.prompt_tokens_cached).min(prompt);
        metric(
            "prompt_tokens_total",
            "counter",
            "Prompt tokens of finished requests.",
            &[("", prompt as f64)],
        );
        metric(
            "prompt_tokens_reused_total",
            "counter",
            "Prompt tokens reused from the KV cache (not decoded again).",
            &[("", cached as f64)],
        );
        metric(
            "prompt_tokens_decoded_total",
            "counter",
            "Prompt tokens decoded.",
            &[("", (prompt - cached) as f64)],
        );
        metric(
            "completion_tokens_total",
            "counter",
            "Generated tokens.",
            &[("", get(&self.completion_tokens) as f64)],
        );
        metric(
            "draft_tokens_total",
            "counter",
            "Tokens drafted by speculative decoding.",
            &[("", get(&self.draft_tokens) as f64)],
        );
        metric(
            "draft_tokens_accepted_total",
            "counter",
            "Drafted tokens the model accepted.",
            &[("", get(&self.draft_accepted) as f64)],
        );
        metric(
            "prompt_tokens_per_second",
            "gauge",
            "Prompt processing speed of the last request.",
            &[("", f64::from_bits(get(&self.prefill_tps)))],
        );
        metric(
            "generation_tokens_per_second",
            "gauge",
            "Generation speed of the last request.",
            &[("", f64::from_bits(get(&self.decode_tps)))],
        );
        if let Some(pool) = pool {
            metric(
                "slots",
                "gauge",
                "Requests that can run at once.",
                &[("", pool.workers() as f64)],
            );
            metric(
                "requests_running",
                "gauge",
                "Requests generating now.",
                &[("", pool.running() as f64)],
            );
            metric(
                "queue_depth",
                "gauge",
                "Requests waiting for a slot.",
                &[("", pool.queue_depth() as f64)],
            );
            metric(
                "queue_capacity",
                "gauge",
                "Most requests that may wait.",
                &[("", pool.capacity() as f64)],
            );
        }
        out
    }

    /// llama-server's `llamacpp:*` metrics, its names, types and meanings: the
    /// prompt's counts are of tokens decoded (cached ones apart), embeddings'
    /// included; the two throughputs average over the time since the last
    /// scrape, which starts a new window, as llama-server's do. Long on
    /// purpose: one entry per metric, in llama-server's order.
    fn render_llamacpp(&self, out: &mut String, pool: Option<&Pool>, decode: DecodeFigures) {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed) as f64;
        let (timing, window) = {
            let mut timing = crate::util::sync::lock(&self.timing);
            let window = std::mem::take(&mut timing.window);
            ((timing.prompt_secs, timing.predicted_secs), window)
        };
        let prompt = self.prompt_tokens.load(Ordering::Relaxed);
        let cached = self
            .prompt_tokens_cached
            .load(Ordering::Relaxed)
            .min(prompt);
        let counters: [(&str, &str, f64); 10] = [
            (
                "prompt_tokens_total",
                "Number of prompt tokens processed, excluding cached tokens",
                (prompt - cached + decode.embed_tokens) as f64,
            ),
            (
                "prompt_tokens_cached_total",
                "Number of prompt tokens reused from the cache",
                cached as f64,
            ),
            (
                "prompt_seconds_total",
                "Total time spent processing prompts",
                timing.0 + decode.embed_secs,
            ),
            (
                "tokens_predicted_total",
                "Number of generation tokens processed",
                get(&self.completion_tokens),
            ),
            (
                "tokens_predicted_seconds_total",
                "Total time spent generating tokens",
                timing.1,
            ),
            (
                "n_decode_total",
                "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding",
                decode.n_decode as f64,
            ),
            (
                "n_tokens_max",
                "Largest observed sequence length (prompt + generation)",
                get(&self.tokens_max),
            ),
            (
                "spec_decode_num_draft_tokens_total",
                "Speculative: Total draft tokens generated",
                get(&self.draft_tokens),
            ),
            (
                "spec_decode_num_accepted_tokens_total",
                "Speculative: Total draft tokens accepted by the target model",
                get(&self.draft_accepted),
            ),
            (
                "spec_decode_num_drafts_total",
                "Speculative: Total speculative decoding verification steps",
                decode.n_drafts as f64,
            ),
        ];
        let gauges: [(&str, &str, f64); 5] = [
            (
                "prompt_tokens_seconds",
                "Average prompt throughput in tokens/s",
                rate(window.prompt_tokens, window.prompt_secs),
            ),
            (
                "predicted_tokens_seconds",
                "Average generation throughput in tokens/s",
                rate(window.predicted_steps, window.predicted_secs),
            ),
            (
                "requests_processing",
                "Number of requests processing",
                pool.map_or(0, Pool::running) as f64,
            ),
            (
                "requests_deferred",
                "Number of requests deferred",
                pool.map_or(0, Pool::queue_depth) as f64,
            ),
            (
                "n_busy_slots_per_decode",
                "Average number of busy slots per llama_decode() call",
                decode.n_busy_slots as f64 / decode.n_decode.max(1) as f64,
            ),
        ];
        for (kind, list) in [("counter", &counters[..]), ("gauge", &gauges[..])] {
            for (name, help, value) in list {
                write_metric(
                    out,
                    &format!("llamacpp:{name}"),
                    kind,
                    help,
                    &[("", *value)],
                );
            }
        }
    }
}

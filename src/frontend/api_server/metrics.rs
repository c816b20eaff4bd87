//! `GET /metrics`: counters in Prometheus' text format.
//!
//! Counters are plain atomics updated once per request; the two speeds are
//! gauges holding the last request's figures (f64 bits in an `AtomicU64`).

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};

use super::pool::Pool;
use super::Usage;

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
    }

    /// The exposition text. Long on purpose: one `metric(...)` call per
    /// exported metric, in the order Prometheus shows them; splitting the list
    /// would only scatter it.
    pub fn render(&self, pool: Option<&Pool>) -> String {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        let mut out = String::new();
        let mut metric = |name: &str, kind: &str, help: &str, lines: &[(&str, f64)]| {
            let _ = writeln!(out, "# HELP shepherd_{name} {help}");
            let _ = writeln!(out, "# TYPE shepherd_{name} {kind}");
            for (labels, value) in lines {
                let _ = writeln!(out, "shepherd_{name}{labels} {value}");
            }
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
}

//! [`Usage`]: a finished (or running) generation's token figures, as every
//! protocol reports them, and the seconds they took.

use crate::backend::Reply;
use crate::core::Stats;

/// A finished generation's token figures.
#[derive(Debug, Clone, Default)]
pub struct Usage {
    pub prompt: u64,
    pub completion: u64,
    /// Prompt tokens reused from the KV cache, when the backend knows.
    pub cached: Option<u64>,
    pub stats: Option<Stats>,
}

/// Seconds `n` tokens took at `rate` tokens a second (none without a rate).
pub(super) fn secs_at(n: u64, rate: Option<f64>) -> Option<f64> {
    rate.filter(|r| *r > 0.0).map(|r| n as f64 / r)
}

impl Usage {
    /// Prompt tokens decoded, not reused from the cache.
    pub(super) fn decoded(&self) -> u64 {
        self.prompt.saturating_sub(self.cached.unwrap_or(0))
    }

    /// Seconds the prompt's decode took, from the speed the backend measured.
    pub(super) fn prompt_secs(&self) -> Option<f64> {
        secs_at(self.decoded(), self.stats.as_ref()?.prefill_tps)
    }

    /// Seconds the answer's generation took, from the speed the backend measured
    /// over its decode steps: one fewer than its tokens ([`Stats::decode_tps`]).
    pub(super) fn generation_secs(&self) -> Option<f64> {
        let steps = self.completion.saturating_sub(1);
        secs_at(steps, self.stats.as_ref()?.decode_tps)
    }

    /// The figures of a generation still running ([`crate::core::Progress`]).
    pub(super) fn so_far(stats: &Stats) -> Usage {
        Usage {
            prompt: stats.prompt_tokens,
            completion: stats.completion_tokens,
            cached: Some(stats.cached_tokens),
            stats: Some(stats.clone()),
        }
    }

    pub(super) fn of(reply: &Reply, stats: Option<&Stats>) -> Usage {
        let (prompt, completion) = match (reply.usage, stats) {
            (Some(usage), _) => (usage.prompt_tokens, usage.completion_tokens),
            (None, Some(stats)) => (stats.prompt_tokens, stats.completion_tokens),
            (None, None) => (0, 0),
        };
        Usage {
            prompt,
            completion,
            cached: stats.map(|s| s.cached_tokens),
            stats: stats.cloned(),
        }
    }
}

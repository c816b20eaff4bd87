//! The figures of one generation as shepherd's own public formats write them:
//! the cliserver's `stats` SSE event and the `--json` `stats` line. A wire shape
//! of its own, so that renaming a field of [`core::Stats`](crate::core::Stats)
//! cannot silently change either format.

use serde::Serialize;

use crate::core::Stats;

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One generation's figures, field for field as both formats document them.
#[derive(Debug, Serialize)]
pub struct StatsLine<'a> {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefill_tps: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decode_tps: Option<f64>,
    pub context_used: u64,
    pub context_size: u64,
    pub cached_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_tokens: u64,
    #[serde(skip_serializing_if = "is_zero")]
    pub draft_accepted: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provider: Option<&'a str>,
}

impl<'a> From<&'a Stats> for StatsLine<'a> {
    fn from(s: &'a Stats) -> Self {
        StatsLine {
            prompt_tokens: s.prompt_tokens,
            completion_tokens: s.completion_tokens,
            prefill_tps: s.prefill_tps,
            decode_tps: s.decode_tps,
            context_used: s.context_used,
            context_size: s.context_size,
            cached_tokens: s.cached_tokens,
            draft_tokens: s.draft_tokens,
            draft_accepted: s.draft_accepted,
            provider: s.provider.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_keeps_its_field_names_and_leaves_out_what_is_unknown() {
        let stats = Stats {
            prompt_tokens: 3,
            completion_tokens: 2,
            decode_tps: Some(10.0),
            context_used: 5,
            context_size: 100,
            cached_tokens: 1,
            ..Stats::default()
        };
        let line = serde_json::to_value(StatsLine::from(&stats)).unwrap();
        assert_eq!(
            line,
            serde_json::json!({"prompt_tokens": 3, "completion_tokens": 2, "decode_tps": 10.0,
                "context_used": 5, "context_size": 100, "cached_tokens": 1})
        );
    }
}

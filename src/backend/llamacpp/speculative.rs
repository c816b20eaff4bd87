//! Speculative decoding: a slot's next tokens are guessed cheaply (drafted) and
//! checked in the same batch as its real next token, so one decode can give
//! several tokens.
//!
//! **Verification.** The slot's pending token and its draft `d1..dk` go into the
//! batch at consecutive positions, each with logits. The slot's own sampler chain
//! then samples at the pending token's logits; while the token sampled equals the
//! next draft token, it samples again at that draft token's logits. Every token
//! emitted is thus one the sampler drew from the target model's own distribution
//! given exactly the tokens before it, as without speculation: at temperature 0 each
//! token is the model's own first choice, and with sampling the text keeps the
//! model's distribution (the chain draws once per emitted token). The rejected
//! draft tokens leave the cache again (`llama_memory_seq_rm`), which is why only
//! models that can rewind a sequence ([`Model::can_rewind`]) speculate.
//!
//! **Bit for bit.** llama.cpp's CPU kernels pick their path by the number of tokens
//! in a batch: matrix products take llamafile's sgemm from two columns on and a
//! lone token's dot products below, and the two round differently. On SmolLM2-135M
//! Q4_1 that is not in the last bits: the gap between the two best logits moves by
//! 0.13 (median) between a verification batch and a lone token, and greedy answers
//! with speculation parted from those without it after a few hundred characters
//! (three of five test prompts). So every batch that holds no prompt, where one slot
//! generates or a draft is verified, is decoded with kernels that compute each
//! column as a lone token's is (`Context::decode_batch_invariant`): for SmolLM2's
//! types the fast ones, a lone token's products computed as sgemm computes a
//! column (`llama::lone`, AVX2 and AVX-512 builds); for others ggml's reference
//! kernels. A greedy answer is then the same token for token with and without
//! speculation (all five, up to 400 tokens). Prompts still prefill with the fast
//! kernels, in both cases alike. This holds on the CPU backend; a GPU's kernels are
//! their own. Weights ggml repacks (Q4_0, Q4_K and friends) disagree between gemv
//! and gemm in either kernel mode, so those models verify with the fast kernels and
//! a greedy answer may part from the unspeculated one where two logits nearly tie,
//! as with llama-server's drafting (docs/LLAMA.md). Without speculation
//! (`--spec off`, or a recurrent model, which cannot rewind) every step takes the
//! fast kernels.
//! **Drafters.** [`ngram_copy`] (`--spec ngram`, the default) needs no model: it
//! proposes what followed the latest earlier occurrence of the slot's last few
//! tokens in its own context, which pays where an answer repeats what the context
//! holds (a file a tool returned, code written two turns ago). [`DraftModel`]
//! (`--spec draft`, `--model-draft FILE`) runs a small model with the same
//! vocabulary, greedily, in a context of its own on the generation thread.
//!
//! **Adaptive.** [`SlotSpec`] grows a slot's draft length while drafts are accepted
//! whole and cuts it to what was accepted otherwise, and weighs the tokens its
//! speculative steps gave against what they cost in plain decoding steps (a lone
//! token is 1, each drafted token adds [`DRAFT_TOKEN_COST`]): where speculation
//! loses, it stops for a while (longer each time), so it is never much slower than
//! decoding without it. The rule counts tokens, not seconds, so the same request
//! drafts the same way on every run: its output does not depend on the load. An
//! n-gram draft that continues a long repetition may be longer than the learnt
//! length: half the repetition's run so far ([`copy_len`]), so a copy under way
//! drafts 32 tokens at once instead of growing from 2.

use std::path::{Path, PathBuf};

use super::request::common_prefix;
use crate::llama::{Batch, Context, ContextParams, Model, Sampler, SamplerParams, Token};

pub use crate::core::SpecMode;

/// Speculative decoding's settings (`--spec`, `--draft-max`, `--model-draft`).
#[derive(Debug, Clone, PartialEq)]
pub struct SpecConfig {
    pub mode: SpecMode,
    /// Most tokens drafted at once.
    pub draft_max: usize,
    /// The draft model, for [`SpecMode::Draft`].
    pub draft_model: Option<PathBuf>,
}

/// Most tokens drafted at once unless `--draft-max` says otherwise: llama-server's
/// for its n-gram drafter (`--spec-ngram-mod-n-max`). The adaptive length only
/// reaches it while drafts are accepted whole.
pub const DEFAULT_DRAFT_MAX: usize = 64;

impl Default for SpecConfig {
    fn default() -> Self {
        SpecConfig {
            mode: SpecMode::Ngram,
            draft_max: DEFAULT_DRAFT_MAX,
            draft_model: None,
        }
    }
}

/// The longest and shortest run of last tokens [`ngram_copy`] looks up. Two tokens
/// match too often in prose ("of the") to predict what follows: on eight story
/// prompts of 128 tokens, drafts from 2-grams up were accepted 122 of 341 times,
/// from 3-grams up 129 of 234, while an agent's edit drafted as much either way.
const NGRAM_MAX: usize = 4;
const NGRAM_MIN: usize = 3;

/// The tokens that followed the latest earlier occurrence of `history`'s last `n`
/// tokens, `max` of them, for the longest `n` from [`NGRAM_MAX`] down to `shortest`
/// (at least [`NGRAM_MIN`]) that occurs; empty when none does. A copy that reaches
/// the end of the history goes on into its own draft, as an LZ77 copy overlaps
/// itself: in a loop of 18 tokens the draft runs as far as asked, not 17 tokens.
///
/// With the draft, how long the repetition it copies has run: the tokens before
/// the history's end that equal those before the match (at least the n-gram, at
/// most [`RUN_CAP`]). A copy under way (a file written back, a loop) has run for
/// many tokens; a phrase that happens to recur, for a few ([`copy_len`]).
pub fn ngram_copy(history: &[Token], max: usize, shortest: usize) -> (Vec<Token>, usize) {
    if max == 0 {
        return (Vec::new(), 0);
    }
    let end = history.len();
    for n in (shortest.clamp(NGRAM_MIN, NGRAM_MAX)..=NGRAM_MAX).rev() {
        let Some(start) = end.checked_sub(n) else {
            continue;
        };
        let tail = &history[start..];
        // Latest first: the nearest repetition is the likeliest to go on.
        let Some(i) = (0..start).rev().find(|&i| history[i..i + n] == *tail) else {
            continue;
        };
        let mut tokens = Vec::with_capacity(max);
        for k in i + n..i + n + max {
            // `k - end` < `tokens.len()`, since `i + n` < `end`.
            tokens.push(if k < end { history[k] } else { tokens[k - end] });
        }
        let run = (0..RUN_CAP.min(i + n))
            .take_while(|&back| history[i + n - 1 - back] == history[end - 1 - back])
            .count();
        return (tokens, run);
    }
    (Vec::new(), 0)
}

/// The longest repetition [`ngram_copy`] measures.
const RUN_CAP: usize = 256;

/// The draft length a copy that has run `run` tokens earns: half its run (a copy
/// 64 tokens along drafts 32 at once from its first step, where the length
/// learnt from acceptance would start at 2 and double), never more than `max`.
/// A short recurring phrase earns nothing beyond the learnt length.
pub fn copy_len(run: usize, learnt: usize, max: usize) -> usize {
    learnt.max(run / 2).min(max)
}

/// Draft length a request starts with, and the shortest one it goes down to.
const START_LEN: usize = 2;
const MIN_LEN: usize = 2;
/// What one drafted token adds to a decode step, relative to decoding a lone token,
/// on the CPU: a batch of 1 + k tokens was measured to cost about a third of a lone
/// step per added token with logits for the last token only, and a verified draft has
/// logits at every token (the output layer is about a fifth of SmolLM2's weights), so
/// a little more (docs/LLAMA.md, "Why the defaults"). On a GPU a token costs less, and
/// the rule is only cautious there.
pub const DRAFT_TOKEN_COST: f64 = 0.45;

/// [`DRAFT_TOKEN_COST`] in units of one slot's share of a plain step, when `slots`
/// slots generate in the batch: their plain step already costs `1 + c (slots - 1)`
/// lone steps, a share of `(1 + c (slots - 1)) / slots` each, while each drafted
/// token still adds `c`. So drafting must be surer to pay the more slots run (with 4,
/// a drafted token costs 0.77 of a share).
pub fn draft_token_cost(slots: usize) -> f64 {
    let n = slots.max(1) as f64;
    DRAFT_TOKEN_COST * n / (1.0 + DRAFT_TOKEN_COST * (n - 1.0))
}

/// How much less each older speculative step counts when they are judged together.
const DECAY: f64 = 0.7;
/// Generated tokens without drafting after speculation lost; doubled each time it
/// loses again, up to [`MAX_BACKOFF`].
const BACKOFF: usize = 32;
const MAX_BACKOFF: usize = 1024;

/// One request's speculation: its draft length, what its speculative steps saved,
/// and the counts reported in its stats.
#[derive(Debug, Clone)]
pub struct SlotSpec {
    next_len: usize,
    /// Decayed sums over speculative steps: the tokens they gave, and their cost
    /// in lone-token steps.
    saved: f64,
    spent: f64,
    /// No drafting until the request has generated this many tokens.
    off_until: usize,
    backoff: usize,
    /// Draft tokens proposed and accepted.
    pub drafted: u64,
    pub accepted: u64,
}

impl Default for SlotSpec {
    fn default() -> Self {
        SlotSpec {
            next_len: START_LEN,
            saved: 0.0,
            spent: 0.0,
            off_until: 0,
            backoff: BACKOFF,
            drafted: 0,
            accepted: 0,
        }
    }
}

impl SlotSpec {
    /// How many tokens to draft now, at most `max`; 0 while speculation rests.
    pub fn draft_len(&self, generated: usize, max: usize) -> usize {
        if generated < self.off_until {
            return 0;
        }
        self.next_len.min(max)
    }

    /// The shortest match [`ngram_copy`] may draft from: once drafting has lost
    /// and rested, only the longest, so that text where it does not pay (prose)
    /// tries it seldom, while a copy (whose matches are long) goes on.
    pub fn shortest_match(&self) -> usize {
        if self.backoff > BACKOFF {
            NGRAM_MAX
        } else {
            NGRAM_MIN
        }
    }

    /// A draft of `drafted` tokens was checked and its first `accepted` kept.
    pub fn verified(&mut self, drafted: usize, accepted: usize, draft_max: usize) {
        self.drafted += drafted as u64;
        self.accepted += accepted as u64;
        self.next_len = if accepted == drafted {
            (drafted * 2).clamp(MIN_LEN, draft_max.max(MIN_LEN))
        } else {
            (accepted + 1).clamp(MIN_LEN, draft_max.max(MIN_LEN))
        };
    }

    /// A speculative step with `drafted` draft tokens gave `emitted` tokens, in a
    /// batch where `slots` slots generated: rests when the speculative steps so far
    /// (the latest counting most) cost more than they gave (see [`draft_token_cost`]).
    pub fn judge(&mut self, emitted: usize, drafted: usize, generated: usize, slots: usize) {
        self.saved = self.saved * DECAY + emitted as f64;
        self.spent = self.spent * DECAY + 1.0 + draft_token_cost(slots) * drafted as f64;
        if self.saved < self.spent {
            // The sums stay: after the rest one step that loses again is enough to
            // rest again, while one that pays well (a copy resumed) goes on.
            self.off_until = generated + self.backoff;
            self.backoff = (self.backoff * 2).min(MAX_BACKOFF);
            self.next_len = START_LEN;
        } else {
            self.backoff = BACKOFF;
        }
    }
}

/// Why a draft model cannot serve.
fn incompatible(path: &Path, why: String) -> String {
    format!(
        "--model-draft {}: {why}; a draft model must share the model's tokenizer (a smaller model of the same family)",
        path.display()
    )
}

/// Whether `draft` tokenizes exactly as `target` does: the same vocabulary, the
/// same text for every token, the same start and end tokens.
pub fn check_vocab(target: &Model, draft: &Model, path: &Path) -> Result<(), String> {
    let (n, m) = (target.n_vocab(), draft.n_vocab());
    if n != m {
        return Err(incompatible(
            path,
            format!("its vocabulary has {m} tokens, the model's {n}"),
        ));
    }
    if target.bos_text() != draft.bos_text() || target.eos_text() != draft.eos_text() {
        return Err(incompatible(
            path,
            "its start or end token differs".to_string(),
        ));
    }
    for token in 0..n {
        let (a, b) = (
            target.piece_bytes(token, true),
            draft.piece_bytes(token, true),
        );
        if a.ok() != b.ok() {
            return Err(incompatible(path, format!("token {token} differs")));
        }
    }
    Ok(())
}

/// A small model drafting for the big one: its own context with one sequence per
/// slot, each holding what the slot's sequence holds (plus the last draft).
pub struct DraftModel<'d> {
    ctx: Context<'d>,
    batch: Batch,
    sampler: Sampler,
    /// The tokens each sequence holds in the draft's cache.
    mirrors: Vec<Vec<Token>>,
}

impl<'d> DraftModel<'d> {
    /// The draft model's context, computing on `main`'s thread pool.
    pub fn new(
        model: &'d Model,
        params: &ContextParams,
        main: &Context<'_>,
    ) -> Result<DraftModel<'d>, String> {
        let ctx = Context::sharing_threads(model, params, main)
            .map_err(|e| format!("draft model: {e}"))?;
        let batch = Batch::new(ctx.n_batch() as usize).map_err(|e| format!("draft model: {e}"))?;
        let greedy = SamplerParams {
            temperature: 0.0,
            ..SamplerParams::default()
        };
        let sampler = Sampler::new(model, &greedy).map_err(|e| format!("draft model: {e}"))?;
        let mirrors = vec![Vec::new(); ctx.n_seq_max() as usize];
        Ok(DraftModel {
            ctx,
            batch,
            sampler,
            mirrors,
        })
    }

    /// Up to `max` tokens the draft model expects after `history` in sequence `seq`,
    /// greedily; empty if its context cannot take them.
    pub fn draft(&mut self, seq: i32, history: &[Token], max: usize) -> Vec<Token> {
        let Some(mirror) = usize::try_from(seq)
            .ok()
            .and_then(|s| self.mirrors.get_mut(s))
        else {
            return Vec::new();
        };
        if max == 0 || history.is_empty() || history.len() + max > self.ctx.n_ctx_seq() as usize {
            return Vec::new();
        }
        // Keep what the draft's cache shares with the history (at least one token is
        // decoded again, for its logits).
        let mut keep = common_prefix(mirror, history).min(history.len() - 1);
        if keep < mirror.len() && !self.ctx.truncate_seq(seq, keep) {
            keep = 0;
        }
        mirror.truncate(keep);
        let mut at = 0;
        for chunk in history[keep..].chunks(self.batch.capacity().max(1)) {
            self.batch.clear();
            let from = mirror.len();
            for (j, &token) in chunk.iter().enumerate() {
                let last = from + j + 1 == history.len();
                if self.batch.push_seq(token, from + j, seq, last).is_err() {
                    return self.lost(seq);
                }
            }
            if self.ctx.decode(&self.batch).is_err() {
                return self.lost(seq);
            }
            mirror.extend_from_slice(chunk);
            at = chunk.len() - 1;
        }
        let mut drafts = Vec::with_capacity(max);
        while let Ok(token) = self.sampler.sample_at(&mut self.ctx, at) {
            drafts.push(token);
            if drafts.len() == max || self.ctx.model().is_eog(token) {
                break;
            }
            self.batch.clear();
            if self.batch.push_seq(token, mirror.len(), seq, true).is_err()
                || self.ctx.decode(&self.batch).is_err()
            {
                // What is in the mirror is still what the cache holds.
                break;
            }
            mirror.push(token);
            at = 0;
        }
        drafts
    }

    /// After a failed decode the sequence's cache is unknown: it starts over.
    fn lost(&mut self, seq: i32) -> Vec<Token> {
        self.ctx.truncate_seq(seq, 0);
        if let Some(mirror) = usize::try_from(seq)
            .ok()
            .and_then(|s| self.mirrors.get_mut(s))
        {
            mirror.clear();
        }
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ngram_draft(history: &[Token], max: usize, shortest: usize) -> Vec<Token> {
        ngram_copy(history, max, shortest).0
    }

    #[test]
    fn the_ngram_drafter_proposes_what_followed_the_latest_longest_match() {
        // "1 2 3 4 5 ... 1 2 3" → "4 5" (the 3-gram "1 2 3" occurred before).
        let history = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3];
        assert_eq!(ngram_draft(&history, 2, NGRAM_MIN), vec![4, 5]);
        // The latest of two occurrences.
        let history = [7, 8, 9, 1, 7, 8, 9, 2, 7, 8, 9];
        assert_eq!(ngram_draft(&history, 1, NGRAM_MIN), vec![2]);
        // A longer match wins over a later shorter one.
        let history = [4, 5, 6, 7, 1, 0, 5, 6, 7, 2, 4, 5, 6, 7];
        assert_eq!(ngram_draft(&history, 1, NGRAM_MIN), vec![1]);
        // Once drafting lost, only the longest match counts.
        assert_eq!(ngram_draft(&history, 1, NGRAM_MAX), vec![1]);
        assert!(ngram_draft(&[7, 8, 9, 1, 7, 8, 9], 4, NGRAM_MAX).is_empty());
        // Two tokens repeating are too weak a match (common in prose): no draft.
        assert!(ngram_draft(&[7, 8, 1, 7, 8], 4, NGRAM_MIN).is_empty());
        // Nothing repeats, too short, nothing wanted.
        assert!(ngram_draft(&[1, 2, 3, 4], 4, NGRAM_MIN).is_empty());
        assert!(ngram_draft(&[1], 4, NGRAM_MIN).is_empty());
        assert!(ngram_draft(&[1, 2, 3, 1, 2, 3], 0, NGRAM_MIN).is_empty());
    }

    #[test]
    fn a_copy_under_way_drafts_more_than_a_recurring_phrase() {
        // A loop of 5 tokens, 40 long: the copy has run 35 tokens.
        let looped: Vec<Token> = (0..40).map(|i| i % 5).collect();
        let (draft, run) = ngram_copy(&looped, 64, NGRAM_MIN);
        assert_eq!(run, 35);
        assert_eq!(draft[..5], [0, 1, 2, 3, 4]);
        assert_eq!(copy_len(run, START_LEN, 64), 17);
        // A phrase that recurs once: its run is the n-gram, the learnt length stays.
        let history = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3];
        assert_eq!(ngram_copy(&history, 4, NGRAM_MIN).1, 3);
        assert_eq!(copy_len(3, START_LEN, 64), START_LEN);
        // Never past the room there is.
        assert_eq!(copy_len(200, 2, 10), 10);
        assert_eq!(ngram_copy(&[1, 2, 3], 4, NGRAM_MIN), (Vec::new(), 0));
    }

    #[test]
    fn a_copy_that_reaches_the_end_goes_on_into_its_own_draft() {
        // What followed "1 2 3" runs out after 7 tokens; the copy then repeats
        // itself (period 7), as the text has so far.
        let history = [1, 2, 3, 4, 5, 9, 9, 1, 2, 3];
        assert_eq!(
            ngram_draft(&history, 10, NGRAM_MIN),
            vec![4, 5, 9, 9, 1, 2, 3, 4, 5, 9]
        );
        assert_eq!(ngram_draft(&[3, 3, 3, 3], 5, NGRAM_MIN), vec![3; 5]);
    }

    #[test]
    fn draft_length_grows_with_whole_acceptance_and_shrinks_to_what_was_accepted() {
        let mut spec = SlotSpec::default();
        assert_eq!(spec.draft_len(0, 16), START_LEN);
        spec.verified(4, 4, 16);
        assert_eq!(spec.draft_len(0, 16), 8);
        spec.verified(8, 8, 16);
        spec.verified(16, 16, 16);
        assert_eq!(spec.draft_len(0, 16), 16);
        assert_eq!(spec.draft_len(0, 3), 3, "capped by the room left");
        spec.verified(16, 5, 16);
        assert_eq!(spec.draft_len(0, 16), 6);
        spec.verified(6, 0, 16);
        assert_eq!(spec.draft_len(0, 16), MIN_LEN);
        assert_eq!((spec.drafted, spec.accepted), (50, 33));
    }

    #[test]
    fn speculation_that_loses_rests_longer_each_time_and_one_that_pays_goes_on() {
        let mut spec = SlotSpec::default();
        assert_eq!(spec.shortest_match(), NGRAM_MIN);
        // A step of 1 token for a draft of 8 (cost 4.6): it rests, and drafts from
        // the longest matches only from then on.
        spec.judge(1, 8, 3, 1);
        assert_eq!(spec.draft_len(3 + BACKOFF - 1, 16), 0);
        assert!(spec.draft_len(3 + BACKOFF, 16) > 0);
        assert_eq!(spec.shortest_match(), NGRAM_MAX);
        // One more losing step after the rest: it rests again, twice as long.
        let at = 3 + BACKOFF;
        spec.judge(1, 8, at, 1);
        assert_eq!(spec.draft_len(at + 2 * BACKOFF - 1, 16), 0);
        assert!(spec.draft_len(at + 2 * BACKOFF, 16) > 0);
        // A step that pays well after a rest (a copy resumed) goes on drafting.
        let at = at + 2 * BACKOFF;
        spec.judge(17, 16, at, 1);
        assert!(spec.draft_len(at + 1, 16) > 0);
        assert_eq!(spec.shortest_match(), NGRAM_MIN);
        // Paying steps (5 tokens for a draft of 4, cost 2.8) never rest, nor do
        // rejected drafts among accepted ones.
        let mut spec = SlotSpec::default();
        for generated in 0..100 {
            let emitted = if generated % 3 == 2 { 1 } else { 5 };
            spec.judge(emitted, 4, generated, 1);
            assert!(spec.draft_len(generated + 1, 16) > 0);
        }
    }

    #[test]
    fn drafting_must_be_surer_to_pay_when_several_slots_share_the_batch() {
        assert!((draft_token_cost(1) - DRAFT_TOKEN_COST).abs() < 1e-9);
        assert!(draft_token_cost(4) > draft_token_cost(2));
        assert!(draft_token_cost(64) < 1.0, "never more than a whole share");
        // 3 tokens for a draft of 4: pays alone (cost 2.8), loses among 4 (cost 4.06).
        let mut alone = SlotSpec::default();
        let mut shared = SlotSpec::default();
        alone.judge(3, 4, 0, 1);
        shared.judge(3, 4, 0, 4);
        assert!(alone.draft_len(1, 16) > 0);
        assert_eq!(shared.draft_len(1, 16), 0);
    }

    #[test]
    fn spec_modes_parse_by_name() {
        for name in SpecMode::NAMES {
            assert!(SpecMode::parse(name).is_some(), "{name}");
        }
        assert_eq!(SpecMode::parse("lookup"), None);
    }
}

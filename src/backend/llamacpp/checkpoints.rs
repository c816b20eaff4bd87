//! Checkpoints of the sliding-window layers' cache, so that a prompt that shares an
//! opening with an earlier one reuses it on a model with such layers.
//!
//! A model with sliding-window layers (Gemma 2 and 3, gpt-oss, ...) keeps only their
//! window in those layers' cache (`swa_full` off, as llama-server runs them): once a
//! conversation has gone a window past its system prompt, the cache can no longer be
//! cut back to the end of that prompt, and the next request with the same system
//! prompt (another conversation, or this one with another last message) would decode
//! all of it again. llama-server keeps "context checkpoints" for this; so do we.
//! While a slot decodes a prompt, it stops the batch at the start of the prompt's
//! newest message and saves the sliding-window layers' part of its sequence
//! ([`Context::window_state`](crate::llama::Context::window_state), a few MB: a window
//! of cells, not the whole context). A later prompt that starts with the same tokens
//! puts that part back and cuts the other layers, which hold every position, to the
//! same length ([`Context::restore_window`](crate::llama::Context::restore_window)):
//! only the new message is decoded.
//!
//! A checkpoint belongs to no slot: its key is the tokens it covers, so it serves any
//! slot whose cache holds those tokens in its full-attention layers. The pool keeps
//! the most recently used ones within a count and a byte budget.

use crate::llama::Token;

/// The fewest tokens a checkpoint covers: fewer decode about as fast as a
/// checkpoint is put back.
pub(super) const CHECKPOINT_MIN: usize = 64;

/// The sliding-window layers' state when a sequence held exactly `tokens`.
pub(super) struct Checkpoint {
    pub(super) tokens: Vec<Token>,
    pub(super) state: Vec<u8>,
    used: u64,
}

/// The most recently used checkpoints, within `max_entries` and `max_bytes`.
pub(super) struct Checkpoints {
    entries: Vec<Checkpoint>,
    max_entries: usize,
    max_bytes: usize,
    clock: u64,
}

impl Checkpoints {
    pub(super) fn new(max_entries: usize, max_bytes: usize) -> Self {
        Checkpoints {
            entries: Vec::new(),
            max_entries,
            max_bytes,
            clock: 0,
        }
    }

    /// The checkpoint covering the longest prefix of `prompt` that is at most
    /// `most` tokens long (what the slot's other layers share with the prompt).
    pub(super) fn best(&mut self, prompt: &[Token], most: usize) -> Option<&Checkpoint> {
        self.clock += 1;
        let clock = self.clock;
        let best = (self.entries.iter_mut())
            .filter(|c| c.tokens.len() <= most.min(prompt.len()))
            .filter(|c| prompt.starts_with(&c.tokens))
            .max_by_key(|c| c.tokens.len())?;
        best.used = clock;
        Some(best)
    }

    /// Whether a checkpoint covers exactly `tokens`.
    pub(super) fn covers(&self, tokens: &[Token]) -> bool {
        self.entries.iter().any(|c| c.tokens == tokens)
    }

    /// Keeps `state` for `tokens`, in place of one for the same tokens, and lets the
    /// least recently used ones go beyond the limits (a state over the byte budget by
    /// itself is not kept).
    pub(super) fn insert(&mut self, tokens: Vec<Token>, state: Vec<u8>) {
        if state.len() > self.max_bytes || self.max_entries == 0 {
            return;
        }
        self.entries.retain(|c| c.tokens != tokens);
        self.clock += 1;
        self.entries.push(Checkpoint {
            tokens,
            state,
            used: self.clock,
        });
        while self.entries.len() > self.max_entries || self.bytes() > self.max_bytes {
            let Some(oldest) = (0..self.entries.len()).min_by_key(|&i| self.entries[i].used) else {
                return;
            };
            self.entries.swap_remove(oldest);
        }
    }

    /// The bytes the kept states take.
    pub(super) fn bytes(&self) -> usize {
        self.entries.iter().map(|c| c.state.len()).sum()
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_longest_covered_prefix_within_what_the_slot_shares_is_chosen() {
        let mut pool = Checkpoints::new(8, 1 << 20);
        pool.insert(vec![1, 2], vec![0; 4]);
        pool.insert(vec![1, 2, 3, 4], vec![0; 4]);
        pool.insert(vec![9, 9, 9], vec![0; 4]);
        let prompt = [1, 2, 3, 4, 5];
        assert_eq!(pool.best(&prompt, 5).unwrap().tokens, [1, 2, 3, 4]);
        // The slot's other layers share only three tokens: the shorter one.
        assert_eq!(pool.best(&prompt, 3).unwrap().tokens, [1, 2]);
        assert!(pool.best(&prompt, 1).is_none());
        assert!(pool.best(&[7, 7, 7, 7], 4).is_none());
        // One that covers the whole prompt leaves nothing to decode: it is longer
        // than the prompt allows.
        assert!(pool.best(&[1, 2], 1).is_none());
        assert!(pool.covers(&[9, 9, 9]));
        assert!(!pool.covers(&[9, 9]));
    }

    #[test]
    fn the_least_recently_used_go_beyond_the_count_and_the_bytes() {
        let mut pool = Checkpoints::new(2, 100);
        pool.insert(vec![1], vec![0; 10]);
        pool.insert(vec![2], vec![0; 10]);
        // Using [1] makes [2] the oldest.
        assert!(pool.best(&[1, 5], 1).is_some());
        pool.insert(vec![3], vec![0; 10]);
        assert!(pool.covers(&[1]) && pool.covers(&[3]) && !pool.covers(&[2]));
        // The same tokens again replace their checkpoint.
        pool.insert(vec![3], vec![0; 20]);
        assert_eq!((pool.len(), pool.bytes()), (2, 30));
        // Over the byte budget: the oldest go until it fits.
        pool.insert(vec![4], vec![0; 90]);
        assert_eq!((pool.len(), pool.bytes()), (1, 90));
        // A state larger than the whole budget is not kept.
        pool.insert(vec![5], vec![0; 101]);
        assert!(pool.covers(&[4]) && !pool.covers(&[5]));
    }
}

//! The slot cache: which slot a request takes (the longest shared prefix, else
//! the least recently used), what of its cached tokens it keeps, a prefix copied
//! from another slot, prompts restored from and saved to the prompt cache on
//! disk, the sliding-window checkpoints, and the warm-up that decodes the
//! opening of an answered conversation's next turn while the slot is idle.

use super::*;

impl Worker<'_> {
    /// Cuts slot `index`'s cache to what it shares with `prompt` (all but the last
    /// token at most: something must decode to give logits) and returns its length.
    /// Where the sliding-window layers no longer hold what that cut needs, a
    /// checkpoint puts them back at a shorter shared prefix; without one the slot
    /// starts over.
    pub(super) fn keep_prefix(&mut self, index: usize, prompt: &[Token]) -> usize {
        let Worker {
            ctx,
            slots,
            checkpoints,
            ..
        } = self;
        let slot = &mut slots[index];
        let mut keep = common_prefix(&slot.mirror, prompt).min(prompt.len() - 1);
        if keep < slot.mirror.len() && !ctx.holds_window(slot.seq, keep) {
            let shared = keep;
            keep = match checkpoints.best(prompt, shared) {
                Some(c) if ctx.restore_window(slot.seq, &c.state, c.tokens.len()) => c.tokens.len(),
                _ => {
                    ctx.truncate_seq(slot.seq, 0);
                    0
                }
            };
            crate::util::log::debug(crate::util::log::Category::Llm, || {
                format!(
                    "slot {}: {shared} tokens shared, past the sliding window: {keep} kept",
                    slot.seq
                )
            });
        } else if keep < slot.mirror.len() && !ctx.truncate_seq(slot.seq, keep) {
            keep = 0;
        }
        slot.mirror.truncate(keep);
        keep
    }
    /// Where `prompt`'s newest message starts, when a checkpoint is to be made there
    /// ([`super::super::checkpoints`]): a model with sliding-window layers, a chat prompt,
    /// at least [`CHECKPOINT_MIN`] tokens before it, past what the slot keeps, and
    /// no checkpoint for those tokens yet. The start is where the prompt parts from
    /// the same conversation rendered with another newest message.
    pub(super) fn checkpoint_at(
        &mut self,
        job: &RequestJob,
        prompt: &[Token],
        keep: usize,
    ) -> Option<usize> {
        let Prompt::Chat(conversation) = &job.prompt else {
            return None;
        };
        if self.model().n_swa() == 0 || conversation.is_empty() || !job.images.is_empty() {
            return None;
        }
        let tools: &[ToolSpec] = if job.tool_choice == ToolChoice::None {
            &[]
        } else {
            &job.tools
        };
        let mut other = conversation.clone();
        let last = other.last_mut()?;
        last.content = if last.content == "A" { "B" } else { "A" }.to_string();
        let kwargs = &job.sampling.chat_template_kwargs;
        let text = render(&self.template, &other, tools, kwargs).ok()?;
        let tokens = tokenize_prompt(self.model(), &mut self.prompt_tokens, &text).ok()?;
        let at = common_prefix(&tokens, prompt);
        (at >= CHECKPOINT_MIN && at > keep && at < prompt.len())
            .then_some(at)
            .filter(|&at| !self.checkpoints.covers(&prompt[..at]))
    }
    pub(super) fn choose_slot(&self, prompt: &[Token]) -> usize {
        let free = self
            .slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.task.is_none());
        pick_slot(
            free.map(|(i, s)| (i, s.mirror.as_slice(), s.last_used)),
            prompt,
        )
    }
    /// Gives slot `index` the longest prefix of `tokens` that another slot holds,
    /// copied within llama.cpp's cache (see the module docs), when that is at least
    /// [`copy_min`] tokens more than the slot shares with `tokens` itself.
    pub(super) fn adopt_prefix(&mut self, index: usize, tokens: &[Token]) {
        let own = common_prefix(&self.slots[index].mirror, tokens);
        let donor = (self.slots.iter().enumerate())
            .filter(|&(i, _)| i != index)
            .map(|(i, slot)| (common_prefix(&slot.mirror, tokens), i))
            .max_by_key(|&(shared, i)| (shared, std::cmp::Reverse(i)));
        let Some((shared, donor)) = donor else {
            return;
        };
        let (src, dst) = (self.slots[donor].seq, self.slots[index].seq);
        // Where the donor's sliding-window layers no longer hold what the cut needs,
        // the copy could not be cut to the prefix.
        let keep = shared.min(tokens.len().saturating_sub(1));
        if shared < own + copy_min(self.n_ctx_slot) || !self.ctx.holds_window(src, keep) {
            return;
        }
        let copied = self.ctx.copy_seq(src, dst);
        let mirror = if copied {
            self.slots[donor].mirror.clone()
        } else {
            Vec::new()
        };
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            format!("slot {dst}: {shared} prompt tokens from slot {src}'s cache: copied {copied}")
        });
        self.slots[index].mirror = mirror;
    }
    /// Decodes the opening of each answered conversation's next turn, then that of
    /// the session the caller said is waiting (see the module docs); stops at the
    /// first decode a request interrupted.
    pub(super) fn warm_up(&mut self) {
        for index in 0..self.slots.len() {
            let Some(next) = self.slots[index].next_turn.take() else {
                continue;
            };
            let Some(tokens) = self.next_turn_opening(&next) else {
                continue;
            };
            // A few tokens right after the slot's cache: the answer's own tokens may
            // differ from its rendering by a few, no more.
            let most = WARM_MAX.min(self.batch.capacity());
            if !self.warm_slot(index, &tokens, most, WARM_REWIND) {
                return;
            }
        }
        let Some(waiting) = self.waiting.take() else {
            return;
        };
        let Some(tokens) = self.next_turn_opening(&waiting) else {
            return;
        };
        // Its opening can be a whole system prompt, in the slot a request with this
        // prompt would take, in place of what that slot held.
        let index = self.choose_slot(&tokens);
        self.adopt_prefix(index, &tokens);
        self.restore(index, &tokens);
        let before = common_prefix(&self.slots[index].mirror, &tokens);
        let most = self.n_ctx_slot / 2;
        if self.warm_slot(index, &tokens, most, usize::MAX) {
            let decoded = common_prefix(&self.slots[index].mirror, &tokens) - before;
            self.save(index, decoded);
        }
    }
    /// Restores into slot `index` the cached prompt on disk that shares the longest
    /// prefix with `tokens`, when that is [`RESTORE_MIN`] tokens more than the slot
    /// holds already (the caller then cuts it to the shared prefix).
    pub(super) fn restore(&mut self, index: usize, tokens: &[Token]) {
        let Some(cache) = &mut self.prompt_cache else {
            return;
        };
        let seq = self.slots[index].seq;
        let held = common_prefix(&self.slots[index].mirror, tokens);
        let Some(entry) = cache.best(tokens, held + RESTORE_MIN) else {
            return;
        };
        // Checked as a slot file is: a state that disagrees with its tokens is not kept.
        let restored = self.load_state(seq, &entry);
        crate::util::log::debug(crate::util::log::Category::Llm, || {
            let n = entry.tokens.len();
            format!("slot {seq}: restored {n} cached tokens from disk: {restored:?}")
        });
        self.slots[index].mirror = if restored.is_ok() {
            entry.tokens
        } else {
            Vec::new()
        };
    }
    /// Saves slot `index`'s cache to disk when it decoded at least [`SAVE_MIN`]
    /// prompt tokens that were not cached (what a later cold start would redo).
    pub(super) fn save(&mut self, index: usize, decoded: usize) {
        let Some(cache) = &mut self.prompt_cache else {
            return;
        };
        let slot = &self.slots[index];
        if decoded < SAVE_MIN || slot.mirror.is_empty() {
            return;
        }
        if let Some(state) = self.ctx.seq_state(slot.seq) {
            cache.save(slot.mirror.clone(), state);
        }
    }
    /// Decodes `tokens` into slot `index` beyond what its cache shares with them,
    /// when that is at most `most` tokens and gives back at most `rewind` cached
    /// ones; false when a request interrupted it.
    pub(super) fn warm_slot(
        &mut self,
        index: usize,
        tokens: &[Token],
        most: usize,
        rewind: usize,
    ) -> bool {
        let Worker {
            ctx,
            batch,
            slots,
            preempt,
            ..
        } = self;
        let slot = &mut slots[index];
        let keep = common_prefix(&slot.mirror, tokens);
        let new = tokens.len().saturating_sub(keep);
        if new == 0 || new > most || slot.mirror.len() - keep > rewind {
            return true;
        }
        if keep < slot.mirror.len() && !ctx.truncate_seq(slot.seq, keep) {
            slot.mirror.clear();
            return true;
        }
        slot.mirror.truncate(keep);
        // Chunk by chunk: what a request interrupts, it finds decoded up to there.
        for chunk in tokens[keep..].chunks(batch.capacity().max(1)) {
            let at = slot.mirror.len();
            batch.clear();
            for (j, &token) in chunk.iter().enumerate() {
                if batch.push_seq(token, at + j, slot.seq, false).is_err() {
                    return false;
                }
            }
            let decoded = preempt.run(|| ctx.decode(batch));
            crate::util::log::debug(crate::util::log::Category::Llm, || {
                let n = chunk.len();
                format!(
                    "slot {}: warm-up of {n} tokens at {at}: {decoded:?}",
                    slot.seq
                )
            });
            if decoded.is_err() {
                // Interrupted (or failed): whatever it left in the cache goes.
                if !ctx.truncate_seq(slot.seq, at) {
                    slot.mirror.clear();
                }
                return false;
            }
            slot.mirror.extend_from_slice(chunk);
        }
        true
    }
    /// The tokens every next prompt of `next` starts with, whatever the user says:
    /// the common prefix of two renderings with different user messages.
    pub(super) fn next_turn_opening(&mut self, next: &NextTurn) -> Option<Vec<Token>> {
        let mut tokens_with = |message: &str| {
            let mut conversation = next.conversation.clone();
            conversation.push(TemplateMessage::new("user", message));
            // The agent's turns (the only ones warmed) give the template no variables.
            let none = serde_json::Map::new();
            let prompt = render(&self.template, &conversation, &next.tools, &none).ok()?;
            tokenize_prompt(self.model(), &mut self.prompt_tokens, &prompt).ok()
        };
        let mut a = tokens_with("A")?;
        let b = tokens_with("B")?;
        a.truncate(common_prefix(&a, &b));
        Some(a)
    }
    /// Slot `index` holds the opening of its prompt up to the newest message: keeps
    /// the sliding-window layers' state there ([`super::super::checkpoints`]), and the whole
    /// state in the prompt cache on disk when `decoded` of those tokens were not
    /// cached, so that a cold start with the same opening finds it (the state saved
    /// at the request's end cannot be cut back to it on such a model).
    pub(super) fn checkpoint(&mut self, index: usize, decoded: usize) {
        let slot = &self.slots[index];
        if let Some(state) = self.ctx.window_state(slot.seq) {
            crate::util::log::debug(crate::util::log::Category::Llm, || {
                let (n, kb) = (slot.mirror.len(), state.len() >> 10);
                format!(
                    "slot {}: checkpoint of the sliding window at {n} ({kb} KiB)",
                    slot.seq
                )
            });
            self.checkpoints.insert(slot.mirror.clone(), state);
            self.save(index, decoded);
        }
    }
}

/// The fewest more prompt tokens another slot's cache must hold for a slot to copy
/// it ([`Worker::adopt_prefix`]) rather than decode them: a copy moves a whole share
/// of the cache (`n_ctx_slot` cells) where decoding computes only the tokens it needs,
/// and per cell the copy is hundreds of times cheaper.
pub(super) fn copy_min(n_ctx_slot: usize) -> usize {
    COPY_MIN_TOKENS.max(n_ctx_slot / COPY_CELLS_PER_TOKEN)
}

/// Of the free slots `(index, mirror, last_used)`, the one whose cache shares the
/// longest prefix with `prompt`, when that keeps at least half of what it holds (a
/// conversation coming back) or holds the whole prompt (the same request again: a
/// regenerated answer, a retry); otherwise the least recently used, so a new
/// conversation that shares only a system prompt does not evict another
/// conversation's cache while an older or empty slot is free.
pub(super) fn pick_slot<'a>(
    free: impl Iterator<Item = (usize, &'a [Token], u64)>,
    prompt: &[Token],
) -> usize {
    let free: Vec<_> = free.collect();
    let longest = free
        .iter()
        .max_by_key(|(_, mirror, used)| (common_prefix(mirror, prompt), std::cmp::Reverse(*used)));
    if let Some(&(index, mirror, _)) = longest {
        let common = common_prefix(mirror, prompt);
        if common > 0 && (common * 2 >= mirror.len() || common == prompt.len()) {
            return index;
        }
    }
    let oldest = free.iter().min_by_key(|(index, _, used)| (*used, *index));
    oldest.map_or(0, |(index, _, _)| *index)
}

//! Embeddings on the generation thread, each input in an idle slot's sequence
//! (cleared before and after), and llama-bench's pp/tg tests on slot 0.

use super::*;

impl Worker<'_> {
    /// Answers the waiting embedding requests, each in an idle slot's sequence
    /// (the one caching least), between two generation steps; that slot's cache
    /// is cleared (see `model.rs`). They wait while every slot generates.
    pub(super) fn embed_waiting(&mut self) {
        if !self.embeds.is_empty() {
            self.fit_threads();
        }
        while !self.embeds.is_empty() {
            let idle = self
                .slots
                .iter()
                .enumerate()
                .filter(|(_, s)| s.task.is_none());
            let Some(index) = idle.min_by_key(|(_, s)| s.mirror.len()).map(|(i, _)| i) else {
                return;
            };
            let Some((inputs, reply)) = self.embeds.pop_front() else {
                return;
            };
            let _ = reply.send(self.embed(index, &inputs));
        }
    }
    pub(super) fn embed(
        &mut self,
        index: usize,
        inputs: &[EmbedInput],
    ) -> Result<Vec<Embedding>, ModelError> {
        let max_tokens = (self.ctx.n_ubatch() as usize).min(self.n_ctx_slot);
        let inputs = model::input_tokens(self.model(), self.ctx.pooling(), inputs, max_tokens)?;
        let slot = &mut self.slots[index];
        slot.mirror.clear();
        slot.next_turn = None;
        let seq = slot.seq;
        // The embedding's slot is busy too, as llama-server counts it.
        let busy = 1 + self.slots.iter().filter(|s| s.task.is_some()).count();
        let counters = &self.counters;
        inputs
            .iter()
            .map(|tokens| {
                let started = Instant::now();
                let vector = model::embed(&mut self.ctx, &mut self.batch, seq, tokens)?;
                counters.decoded(busy);
                let micros = started.elapsed().as_micros() as u64;
                counters.embed_micros.fetch_add(micros, Ordering::Relaxed);
                let n_tokens = tokens.len();
                (counters.embed_tokens).fetch_add(n_tokens as u64, Ordering::Relaxed);
                Ok(Embedding { vector, n_tokens })
            })
            .collect()
    }
}

impl Worker<'_> {
    /// Like llama-bench's pp and tg tests, on slot 0 from an empty cache (then `depth`
    /// untimed tokens); only while no request is running. Leaves every slot empty.
    pub(super) fn bench(
        &mut self,
        test: super::super::BenchTest,
    ) -> Result<super::super::BenchReport, BackendError> {
        self.fit_threads();
        if !self.idle() {
            return Err(BackendError::Config("bench needs an idle backend".into()));
        }
        let super::super::BenchTest {
            n_prompt,
            n_gen,
            depth,
        } = test;
        let n_vocab = self.model().n_vocab().max(1) as usize;
        // Arbitrary but valid tokens, as llama-bench uses.
        let arbitrary = |n: usize, step: usize| -> Vec<Token> {
            (0..n).map(|i| ((i * step) % n_vocab) as Token).collect()
        };
        let (filler, tokens) = (arbitrary(depth, 6151), arbitrary(n_prompt, 7919));
        self.clear_all();
        self.bench_decode(&filler, 0)?;
        let started = Instant::now();
        self.bench_decode(&tokens, depth)?;
        let pp_secs = started.elapsed().as_secs_f64();
        self.clear_all();
        self.bench_decode(&filler, 0)?;
        let started = Instant::now();
        for i in 0..n_gen {
            self.bench_decode(&[((i * 104_729) % n_vocab) as Token], depth + i)?;
        }
        let tg_secs = started.elapsed().as_secs_f64();
        self.clear_all();
        let rate = |n: usize, secs: f64| if secs > 0.0 { n as f64 / secs } else { 0.0 };
        Ok(super::super::BenchReport {
            pp_tps: rate(n_prompt, pp_secs),
            tg_tps: rate(n_gen, tg_secs),
            flash_attn: self.settings.0,
            n_ubatch: self.settings.1,
        })
    }

    fn clear_all(&mut self) {
        for slot in &mut self.slots {
            self.ctx.truncate_seq(slot.seq, 0);
            slot.mirror.clear();
            slot.next_turn = None;
        }
        self.waiting = None;
    }

    fn bench_decode(&mut self, tokens: &[Token], start: usize) -> Result<(), BackendError> {
        let chunk = self.batch.capacity();
        for (i, piece) in tokens.chunks(chunk).enumerate() {
            self.batch.clear();
            for (j, &token) in piece.iter().enumerate() {
                let last = i * chunk + j + 1 == tokens.len();
                let pushed = self.batch.push_seq(token, start + i * chunk + j, 0, last);
                pushed.map_err(|e| BackendError::Config(e.to_string()))?;
            }
            self.ctx
                .decode(&self.batch)
                .map_err(|e| BackendError::Protocol(e.to_string()))?;
            // As llama-bench does after every decode, and as reading the logits does in
            // a real turn: the time is the device's, not only the launch's.
            self.ctx.synchronize();
        }
        Ok(())
    }
}

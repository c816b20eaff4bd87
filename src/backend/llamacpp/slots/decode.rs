//! The decode step: waiting for the sinks' answers, one batch with every
//! generating slot's pending token (and its draft) and the prompts' next chunks,
//! then sampling and speculative verification. What the sampled tokens become (the
//! text passed on, a request's end) is `emit`'s.

use super::emit::{logprobs_of, token_logprobs};
use super::*;

impl Worker<'_> {
    /// Collects the sinks' answers. With something to decode it waits at most
    /// [`FLOW_GRACE`] for the rest; with nothing, until an answer or a job arrives.
    pub(super) fn await_flows(&mut self, jobs: &Receiver<Job>) {
        self.poll_flows();
        let deadline = Instant::now() + FLOW_GRACE;
        while self.awaiting() {
            if self.runnable() {
                let now = Instant::now();
                if now >= deadline || !self.wait_any(None, deadline - now) {
                    return;
                }
                self.poll_flows();
                continue;
            }
            if self.wait_any(Some(jobs), IDLE_POLL) {
                while let Ok(job) = jobs.try_recv() {
                    self.accept(job);
                }
                self.assign();
            }
            self.poll_flows();
            if jobs.is_empty() && self.idle() {
                return;
            }
        }
    }
    pub(super) fn awaiting(&self) -> bool {
        self.tasks().any(Task::blocked)
    }
    pub(super) fn runnable(&self) -> bool {
        self.tasks().any(|t| !t.blocked())
    }
    pub(super) fn tasks(&self) -> impl Iterator<Item = &Task> {
        self.slots.iter().filter_map(|s| s.task.as_ref())
    }
    /// Blocks until a waiting slot's answer (or a job, when `jobs` is given) is ready.
    pub(super) fn wait_any(&self, jobs: Option<&Receiver<Job>>, timeout: Duration) -> bool {
        let mut select = Select::new();
        for task in self.tasks() {
            if task.blocked() {
                select.recv(&task.job.flow);
            }
        }
        if self.tasks().any(|t| t.phase == Phase::Sampling) {
            select.recv(&self.helper.done);
        }
        if let Some(jobs) = jobs {
            select.recv(jobs);
        }
        select.ready_timeout(timeout).is_ok()
    }
    /// Applies every answer that has arrived; a cancel flag counts as one.
    pub(super) fn poll_flows(&mut self) {
        while let Ok(sampled) = self.helper.done.try_recv() {
            self.sampled(sampled);
        }
        for index in 0..self.slots.len() {
            let Some(task) = self.slots[index].task.as_mut() else {
                continue;
            };
            if task.phase == Phase::Sampling && task.job.cancel.load(Ordering::Relaxed) {
                // The helper's answer for it will be dropped.
                self.finish(index, FinishReason::Cancelled);
                continue;
            }
            while let Some(&shown) = task.unanswered.front() {
                match task.job.flow.try_recv() {
                    Ok(Flow::Continue) => {
                        task.unanswered.pop_front();
                    }
                    Ok(Flow::Cancel) | Err(TryRecvError::Disconnected) => {
                        // The reply is what the sink saw, not the token decoded since.
                        task.text.truncate(shown);
                        self.finish(index, FinishReason::Cancelled);
                        break;
                    }
                    Err(TryRecvError::Empty) if task.job.cancel.load(Ordering::Relaxed) => {
                        self.finish(index, FinishReason::Cancelled);
                        break;
                    }
                    Err(TryRecvError::Empty) => break,
                }
            }
        }
    }
    /// Puts each generating slot's pending token, and its draft after it, into the
    /// batch (cancelled requests end here; a slow sink's slot sits this step out).
    pub(super) fn push_generating(&mut self) {
        for index in 0..self.slots.len() {
            if self.cancelled(index) {
                continue;
            }
            let Some(task) = self.slots[index].task.as_mut() else {
                continue;
            };
            task.in_batch = 0;
            task.logits_at = None;
            task.drafts.clear();
        }
        self.generating = 0;
        let decoding: Vec<usize> = (0..self.slots.len())
            .filter(|&i| {
                self.slots[i]
                    .task
                    .as_ref()
                    .is_some_and(|t| !t.blocked() && matches!(t.phase, Phase::Decode(_)))
            })
            .collect();
        for (k, &index) in decoding.iter().enumerate() {
            // Room for a draft: what the batch holds less a token for this slot and
            // each decoding slot after it.
            let room =
                (self.batch.capacity() - self.batch.len()).saturating_sub(decoding.len() - k);
            let drafts = self.propose(index, room);
            let slot = &mut self.slots[index];
            let Some(task) = slot.task.as_mut() else {
                continue;
            };
            let Phase::Decode(token) = task.phase else {
                continue;
            };
            let at = slot.mirror.len();
            if self.batch.push_seq(token, at, slot.seq, true).is_err() {
                continue;
            }
            task.in_batch = 1;
            task.logits_at = Some(self.batch.len() - 1);
            self.generating += 1;
            for (j, &draft) in drafts.iter().enumerate() {
                if self
                    .batch
                    .push_seq(draft, at + 1 + j, slot.seq, true)
                    .is_err()
                {
                    break;
                }
                task.drafts.push(draft);
                task.in_batch += 1;
            }
        }
    }
    /// One batch: a token per generating slot (with its draft), then prompt chunks;
    /// one decode; samples.
    pub(super) fn step(&mut self) {
        self.eval_images();
        self.batch.clear();
        self.push_generating();
        let generated = self.batch.len();
        for slot in &mut self.slots {
            let Some(task) = slot.task.as_mut() else {
                continue;
            };
            if task.phase != Phase::Prefill {
                continue;
            }
            let from = slot.mirror.len();
            let room = self.batch.capacity() - self.batch.len();
            let mut n = room.min(task.prompt.len() - from);
            // The batch stops where an image starts ([`Self::eval_images`] decodes it).
            if let Some(image) = task.images.get(task.next_image) {
                n = n.min(image.start.saturating_sub(from));
            }
            // The batch stops where a checkpoint is to be made.
            if let Some(at) = task.checkpoint_at.filter(|&at| from < at && at < from + n) {
                n = at - from;
            }
            for (j, &token) in task.prompt[from..from + n].iter().enumerate() {
                let last = from + j + 1 == task.prompt.len();
                if self
                    .batch
                    .push_seq(token, from + j, slot.seq, last)
                    .is_err()
                {
                    break;
                }
                task.in_batch += 1;
                if last {
                    task.logits_at = Some(self.batch.len() - 1);
                }
            }
        }
        if self.batch.is_empty() {
            return;
        }
        self.fit_threads();
        // A lone generating slot, or one verifying a draft, with no prompt in the
        // batch, where drafts may be verified: batch-invariant kernels, so that a
        // verified token gets the logits it would get decoded alone (see
        // `speculative`). Without speculation nothing is verified.
        let drafting = generated > self.generating;
        let prompt = self.batch.len() > generated;
        let speculating = self.spec != SpecMode::Off;
        let decoded = if speculating && !prompt && (self.generating == 1 || drafting) {
            self.ctx.decode_batch_invariant(&self.batch)
        } else {
            self.ctx.decode(&self.batch)
        };
        if let Err(err) = decoded {
            self.decode_failed(err);
            return;
        }
        let busy = self.slots.iter().filter(|s| s.task.is_some()).count();
        self.counters.decoded(busy);
        for index in 0..self.slots.len() {
            self.after_decode(index);
        }
    }
    /// Decodes the images that come next in prefilling slots' prompts, each on
    /// its own (embeddings are not tokens: they cannot share the step's batch).
    fn eval_images(&mut self) {
        for index in 0..self.slots.len() {
            loop {
                let Worker {
                    ctx, slots, vision, ..
                } = &mut *self;
                let slot = &mut slots[index];
                let Some(task) = slot.task.as_mut() else {
                    break;
                };
                let from = slot.mirror.len();
                let next = task.images.get(task.next_image);
                let Some(image) = next.filter(|i| i.start == from && task.phase == Phase::Prefill)
                else {
                    break;
                };
                let Some(vision) = vision.as_mut() else {
                    break;
                };
                let n = image.chunk.n_tokens();
                match vision.eval(ctx, &image.chunk, from, slot.seq) {
                    Ok(_) => {
                        slot.mirror.extend_from_slice(&task.prompt[from..from + n]);
                        task.next_image += 1;
                        self.report_progress(index);
                    }
                    Err(err) => {
                        ctx.truncate_seq(slot.seq, from);
                        self.fail(index, BackendError::Config(err.to_string()));
                        break;
                    }
                }
            }
        }
    }
    /// The decode's threads: one fewer while the sampling helper works.
    pub(super) fn fit_threads(&mut self) {
        let (configured, now) = self.threads;
        let sampling = self.tasks().any(|t| t.phase == Phase::Sampling);
        let threads = if sampling {
            (configured - 1).max(1)
        } else {
            configured
        };
        if threads != now {
            self.ctx.set_threads(threads);
            self.threads.1 = threads;
        }
    }
    /// The draft for slot `index`'s next tokens after its pending one, at most
    /// `room` long (and within its context and `max_tokens`).
    pub(super) fn propose(&mut self, index: usize, room: usize) -> Vec<Token> {
        if self.spec == SpecMode::Off {
            return Vec::new();
        }
        let n_ctx = self.n_ctx_slot;
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return Vec::new();
        };
        let Phase::Decode(token) = task.phase else {
            return Vec::new();
        };
        // An image's span holds no vocabulary ids: nothing to draft from or with.
        if !task.images.is_empty() {
            return Vec::new();
        }

        // The pending token goes at `mirror.len()`; the draft after it, and the
        // request needs no more than the tokens it may still generate.
        let most = room
            .min(n_ctx.saturating_sub(slot.mirror.len() + 1))
            .min(task.max_tokens.saturating_sub(task.n_tokens + 1));
        let len = task.spec.draft_len(task.n_tokens, most.min(self.draft_max));
        if len == 0 {
            return Vec::new();
        }
        slot.mirror.push(token);
        let drafts = match (&mut self.drafter, self.spec) {
            (Some(drafter), SpecMode::Draft) => drafter.draft(slot.seq, &slot.mirror, len),
            _ => {
                let cap = most.min(self.draft_max);
                let shortest = task.spec.shortest_match();
                let (mut tokens, run) = ngram_copy(&slot.mirror, cap, shortest);
                tokens.truncate(copy_len(run, len, cap));
                tokens
            }
        };
        slot.mirror.pop();
        drafts
    }
    /// Whether slot `index`'s request was cancelled (and is now finished).
    pub(super) fn cancelled(&mut self, index: usize) -> bool {
        let Some(task) = &self.slots[index].task else {
            return false;
        };
        if !task.job.cancel.load(Ordering::Relaxed) {
            return false;
        }
        if task.generating_since.is_none() {
            self.fail(index, BackendError::Cancelled);
        } else {
            self.finish(index, FinishReason::Cancelled);
        }
        true
    }
    /// Records what slot `index` decoded; samples when its logits are ready.
    pub(super) fn after_decode(&mut self, index: usize) {
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let from = slot.mirror.len();
        match task.phase {
            Phase::Prefill => slot
                .mirror
                .extend_from_slice(&task.prompt[from..from + task.in_batch]),
            Phase::Decode(token) if task.in_batch > 0 => slot.mirror.push(token),
            _ => {}
        }
        let prompt_batch = task.phase == Phase::Prefill && task.in_batch > 0;
        if task.phase == Phase::Prefill && task.checkpoint_at == Some(slot.mirror.len()) {
            task.checkpoint_at = None;
            let decoded = slot.mirror.len() - task.report.reused_tokens;
            self.checkpoint(index, decoded);
        }
        if prompt_batch {
            self.report_progress(index);
        }
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let Some(at) = task.logits_at.take() else {
            return;
        };
        if task.phase == Phase::Prefill {
            task.prefill_secs = task.started.elapsed().as_secs_f64();
            task.generating_since = Some(Instant::now());
            // The prefill phase's answer comes before any output; a caller that is
            // gone no longer wants the rest. The rendered prompt goes with it, once.
            let rendered = task.report.rendered.take();
            let report = PrefillReport {
                rendered,
                ..task.report.clone()
            };
            if task.job.prefilled.send(Ok(report)).is_err() {
                self.release(index);
                return;
            }
        }
        self.sample(index, at);
    }
    /// Samples slot `index`'s next token at batch entry `at`, and after it each
    /// draft token the sampler agrees with (see [`super::super::speculative`]); keeps the
    /// agreed draft in the cache, drops the rest, and passes the tokens on.
    pub(super) fn sample(&mut self, index: usize, at: usize) {
        if self.offload(index, at) {
            return;
        }
        let Worker {
            ctx,
            slots,
            draft_max,
            generating,
            counters,
            ..
        } = self;
        let slot = &mut slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let Some(sampler) = task.sampler.as_mut() else {
            let err = "sample: the sampler is away".into();
            return self.fail(index, BackendError::Protocol(err));
        };
        let drafts = std::mem::take(&mut task.drafts);
        let mut tokens = Vec::with_capacity(drafts.len() + 1);
        let mut probs = Vec::new();
        loop {
            let entry = at + tokens.len();
            let constraining = sampler.constraining();
            let started = Instant::now();
            let token = match sampler.sample_at(ctx, entry) {
                Ok(token) => token,
                Err(err) => return self.fail(index, BackendError::Protocol(err.to_string())),
            };
            if constraining {
                task.sample_cost = Some(started.elapsed());
            }
            if let Some(top) = task.job.sampling.logprobs {
                probs.push(token_logprobs(ctx, entry, token, top as usize));
            }
            let agreed = drafts.get(tokens.len()) == Some(&token);
            tokens.push(token);
            if !agreed || ctx.model().is_eog(token) {
                break;
            }
        }
        if !drafts.is_empty() {
            // Every token sampled but the last agreed with the draft.
            let accepted = tokens.len() - 1;
            slot.mirror.extend_from_slice(&drafts[..accepted]);
            task.spec.verified(drafts.len(), accepted, *draft_max);
            counters.n_drafts.fetch_add(1, Ordering::Relaxed);
            if accepted < drafts.len() && !ctx.truncate_seq(slot.seq, slot.mirror.len()) {
                slot.mirror.clear();
                let err = "the cache could not drop a rejected draft (run with --spec off)";
                return self.fail(index, BackendError::Protocol(err.into()));
            }
            task.spec
                .judge(tokens.len(), drafts.len(), task.n_tokens, *generating);
        }
        self.emit(index, &tokens, probs);
    }
    /// Hands slot `index`'s sample at batch entry `at` to the sampling helper when its
    /// grammar constrains it and may cost others their turn: another request is
    /// there (or queued), or its last constrained sample was costly or is unknown.
    /// A slot verifying a draft samples here (its draft's logits are in the context).
    fn offload(&mut self, index: usize, at: usize) -> bool {
        let others = !self.queue.is_empty()
            || self
                .slots
                .iter()
                .enumerate()
                .any(|(i, s)| i != index && s.task.is_some());
        let Some(task) = self.slots[index].task.as_mut() else {
            return false;
        };
        let costly = task
            .sample_cost
            .is_none_or(|cost| cost >= sampling::COSTLY_SAMPLE);
        let constraining = task.sampler.as_ref().is_some_and(Sampler::constraining);
        if !constraining || !task.drafts.is_empty() || !(others || costly) {
            return false;
        }
        let (Some(logits), Some(sampler)) = (self.ctx.logits_at(at), task.sampler.take()) else {
            return false;
        };
        let job = sampling::SampleJob {
            slot: index,
            serial: task.serial,
            sampler,
            logits: logits.to_vec(),
            top: task.job.sampling.logprobs.map(|top| top as usize),
        };
        match self.helper.send(job) {
            Ok(()) => {
                task.phase = Phase::Sampling;
                true
            }
            Err(sampler) => {
                task.sampler = Some(*sampler);
                false
            }
        }
    }
    /// Takes the helper's answer back to its slot, and passes the token on; an
    /// answer for a request that has ended is dropped with its sampler.
    fn sampled(&mut self, sampled: sampling::Sampled) {
        let model = self.ctx.model();
        let index = sampled.slot;
        let Some(task) = self.slots.get_mut(index).and_then(|s| s.task.as_mut()) else {
            return;
        };
        if task.serial != sampled.serial || task.phase != Phase::Sampling {
            return;
        }
        task.sampler = Some(sampled.sampler);
        task.sample_cost = Some(sampled.cost);
        let token = match sampled.token {
            Ok(token) => token,
            Err(err) => return self.fail(index, BackendError::Protocol(err.to_string())),
        };
        let probs = sampled
            .probs
            .map(|found| vec![logprobs_of(model, token, found)])
            .unwrap_or_default();
        self.emit(index, &[token], probs);
    }
}

//! The tokens a slot sends back: each step's text (with token probabilities when
//! asked for) through the output filter and the stop strings, and a request's end
//! (finish, failure, release), with its stats and the answer's message.

use super::*;

impl Worker<'_> {
    /// Passes the sampled `tokens` on as one text, in order, up to the first that
    /// ends the request (an end token, a stop string, the length); the last left is
    /// decoded next step. Their `probs`, when the request asked for them, go first.
    pub(super) fn emit(&mut self, index: usize, tokens: &[Token], mut probs: Vec<TokenLogprobs>) {
        let n_ctx = self.n_ctx_slot;
        let model = self.ctx.model();
        let slot = &mut self.slots[index];
        let Some(task) = slot.task.as_mut() else {
            return;
        };
        let now = Instant::now();
        task.sampled = Some((task.sampled.map_or(now, |(first, _)| first), now));
        let mut shown = String::new();
        let mut end = None;
        let n_before = task.n_tokens;
        for (i, &token) in tokens.iter().enumerate() {
            if model.is_eog(token) {
                end = Some(FinishReason::Stop);
                break;
            }
            task.n_tokens += 1;
            let marker = task.markers && self.markers.binary_search(&token).is_ok();
            let bytes = match model.piece_bytes(token, marker) {
                Ok(bytes) => bytes,
                Err(err) => return self.fail(index, BackendError::Protocol(err.to_string())),
            };
            let (visible, stopped) = task.stops.push(&task.utf8.push(&bytes));
            task.text.push_str(&visible);
            shown.push_str(&visible);
            if stopped {
                end = Some(FinishReason::Stop);
                break;
            }
            // Tokens before the last are in the cache already; the last goes next.
            let full = i + 1 == tokens.len() && slot.mirror.len() >= n_ctx;
            if task.n_tokens >= task.max_tokens || full {
                end = Some(FinishReason::Length);
                break;
            }
            task.phase = Phase::Decode(token);
        }
        // The tokens passed on: all up to the one that ended the request, that
        // one included unless it is an end token.
        probs.truncate(task.n_tokens - n_before);
        if task.job.sampling.telemetry.timings && !task.forced_tools && !shown.is_empty() {
            let stats = task.stats(slot.mirror.len(), n_ctx);
            let progress = Progress {
                prompt: None,
                stats,
            };
            let _ = task.job.events.send(WorkerMsg::Progress(progress));
        }
        if !task.forced_tools && !probs.is_empty() {
            let _ = task.job.events.send(WorkerMsg::Logprobs(probs));
        }
        // A forced tool call is JSON for the agent, never text for the user.
        if !task.forced_tools && !shown.is_empty() {
            if task.job.events.send(WorkerMsg::Text(shown)).is_err() {
                return self.finish(index, FinishReason::Cancelled);
            }
            task.unanswered.push_back(task.text.len());
        }
        if let Some(reason) = end {
            self.finish(index, reason);
        }
    }
    /// Ends slot `index`'s request: the held-back text, the stats, the reply.
    pub(super) fn finish(&mut self, index: usize, reason: FinishReason) {
        let n_ctx = self.n_ctx_slot;
        let slot = &mut self.slots[index];
        let Some(mut task) = slot.task.take() else {
            return;
        };
        if reason != FinishReason::Cancelled {
            let rest = task.stops.finish(&task.utf8.finish());
            task.text.push_str(&rest);
            if !task.forced_tools && !rest.is_empty() {
                let _ = task.job.events.send(WorkerMsg::Text(rest));
            }
        }
        slot.served = Some(super::super::model::jobs::SlotTask::idle(
            &task,
            slot.mirror.len(),
        ));
        // A whole answer (or one cut at its length): the user's turn comes next.
        let answered = matches!(reason, FinishReason::Stop | FinishReason::Length);
        // The model ended its text itself (its end of turn, or the template's own
        // stop text), or the text was cut (the length, a stop string of the request).
        let user_stop = |s: &&str| task.job.sampling.stop.iter().any(|u| u == s);
        let stop_sequence = task.stops.matched().filter(user_stop).map(String::from);
        let end = match reason {
            FinishReason::Stop if stop_sequence.is_none() => TextEnd::Model,
            _ => TextEnd::Cut,
        };
        let stats = task.stats(slot.mirror.len(), n_ctx);
        let chat = match &mut task.job.prompt {
            Prompt::Chat(conversation) => Some(std::mem::take(conversation)),
            Prompt::Raw(_) => None,
        };
        slot.next_turn = chat
            .filter(|_| answered && !task.forced_tools && task.images.is_empty())
            .map(|mut conversation| {
                let answer = answer_message(&task.text, &task.job.tools, &task.report, end);
                conversation.extend(template::conversation("", &[answer]));
                let tools = match task.job.tool_choice {
                    ToolChoice::None => Vec::new(),
                    _ => std::mem::take(&mut task.job.tools),
                };
                NextTurn {
                    conversation,
                    tools,
                }
            });
        let reply = finish_reply(task.forced_tools, std::mem::take(&mut task.text), reason);
        let reply = reply.map(|mut reply| {
            reply.stop_sequence = stop_sequence;
            let _ = task.job.events.send(WorkerMsg::Stats(stats.clone(), end));
            reply.usage = Some(Usage {
                prompt_tokens: stats.prompt_tokens,
                completion_tokens: stats.completion_tokens,
            });
            reply
        });
        let _ = task.job.events.send(WorkerMsg::Done(reply));
        self.save(index, task.report.decoded_tokens);
        self.release(index);
    }
    /// Sends slot `index`'s prompt progress, when its request asked for it: how
    /// much of the prompt is in the cache, with the figures so far.
    pub(super) fn report_progress(&self, index: usize) {
        let slot = &self.slots[index];
        let Some(task) = slot
            .task
            .as_ref()
            .filter(|t| t.job.sampling.telemetry.progress)
        else {
            return;
        };
        let prompt = PromptProgress {
            total: task.prompt.len() as u64,
            cached: task.report.reused_tokens as u64,
            processed: slot.mirror.len().min(task.prompt.len()) as u64,
            elapsed: task.started.elapsed(),
        };
        let progress = Progress {
            prompt: Some(prompt),
            stats: task.stats(slot.mirror.len(), self.n_ctx_slot),
        };
        let _ = task.job.events.send(WorkerMsg::Progress(progress));
    }
    /// Ends slot `index`'s request with an error, in whichever phase it is.
    pub(super) fn fail(&mut self, index: usize, err: BackendError) {
        let Some(task) = self.slots[index].task.as_ref() else {
            return;
        };
        // Until the prefill's answer went out, the caller waits for that answer; after
        // it, for events (the first sample may still fail).
        if task.generating_since.is_none() {
            let _ = task.job.prefilled.send(Err(err));
        } else {
            let _ = task.job.events.send(WorkerMsg::Done(Err(err)));
        }
        self.release(index);
    }
    /// Frees slot `index`; its cache stays for the next request that shares it.
    pub(super) fn release(&mut self, index: usize) {
        self.clock += 1;
        self.finished_at = Instant::now();
        let slot = &mut self.slots[index];
        if let Some(task) = slot.task.take() {
            slot.served = Some(super::super::model::jobs::SlotTask::idle(
                &task,
                slot.mirror.len(),
            ));
        }
        slot.last_used = self.clock;
    }
    /// After a failed decode the cache content of every slot in the batch is unknown:
    /// those slots start over, and their requests get the error.
    pub(super) fn decode_failed(&mut self, err: llama::DecodeError) {
        let n_ctx = self.n_ctx_slot;
        for index in 0..self.slots.len() {
            let slot = &mut self.slots[index];
            if slot.task.as_ref().is_none_or(|t| t.in_batch == 0) {
                continue;
            }
            self.ctx.truncate_seq(slot.seq, 0);
            slot.mirror.clear();
            let err = match &err {
                llama::DecodeError::Aborted => BackendError::Cancelled,
                llama::DecodeError::ContextFull { needed, n_ctx } => overflow(*needed, 0, *n_ctx),
                llama::DecodeError::NoKvSlot => overflow(n_ctx, 1, n_ctx),
                other => BackendError::Protocol(other.to_string()),
            };
            self.fail(index, err);
        }
    }
}

impl Task {
    /// The request's figures so far, with `in_cache` of the slot's tokens in the
    /// cache (the prompt's first): the one place they are computed, for the
    /// prompt's progress, each text's figures and the end's [`Stats`]. The
    /// generation rate is over the decode steps after the first token, which
    /// comes from the prompt's logits (llama-server's `n_gen_steps`).
    pub(super) fn stats(&self, in_cache: usize, n_ctx: usize) -> Stats {
        let prompt = in_cache.min(self.prompt.len());
        let decoded = prompt.saturating_sub(self.report.reused_tokens);
        let prefill_secs = match self.generating_since {
            Some(_) => self.prefill_secs,
            None => self.started.elapsed().as_secs_f64(),
        };
        let steps = self.n_tokens.saturating_sub(1);
        let decode_secs = self
            .sampled
            .map_or(0.0, |(first, last)| (last - first).as_secs_f64());
        let rate = |n: usize, secs: f64| (secs > 0.0 && n > 0).then(|| n as f64 / secs);
        Stats {
            prompt_tokens: prompt as u64,
            completion_tokens: self.n_tokens as u64,
            prefill_tps: rate(decoded, prefill_secs),
            decode_tps: rate(steps, decode_secs),
            context_used: in_cache as u64,
            context_size: n_ctx as u64,
            cached_tokens: self.report.reused_tokens as u64,
            draft_tokens: self.spec.drafted,
            draft_accepted: self.spec.accepted,
            provider: None,
        }
    }
}

/// Token `token`'s log-probability at batch entry `entry` of the last decode, and
/// the `top` likeliest tokens there ([`llama::log_probs`]).
pub(super) fn token_logprobs(
    ctx: &Context<'_>,
    entry: usize,
    token: Token,
    top: usize,
) -> TokenLogprobs {
    let found = ctx.logits_at(entry).map_or((0.0, Vec::new()), |logits| {
        llama::log_probs(logits, token, top)
    });
    logprobs_of(ctx.model(), token, found)
}

/// Token `token`'s log-probability and the likeliest tokens' ([`llama::log_probs`]),
/// with their bytes.
pub(super) fn logprobs_of(
    model: &Model,
    token: Token,
    found: (f32, Vec<(Token, f32)>),
) -> TokenLogprobs {
    let (logprob, best) = found;
    let prob = |id: Token, logprob: f32| TokenProb {
        id,
        bytes: model.piece_bytes(id, true).unwrap_or_default(),
        logprob,
    };
    TokenLogprobs {
        chosen: prob(token, logprob),
        top: best.into_iter().map(|(id, lp)| prob(id, lp)).collect(),
    }
}

/// The assistant message the agent will store for `text`, which ended as `end`:
/// what the output filter makes of it (content, reasoning, calls with ids; none
/// when the text ended inside a call, which the agent then does not run), so the
/// next turn's prompt is rendered as it will be asked for.
pub(super) fn answer_message(
    text: &str,
    tools: &[ToolSpec],
    report: &PrefillReport,
    end: TextEnd,
) -> Message {
    let mut filter = OutputFilter::for_tools(tools);
    if let Some(end) = report.prompt_end {
        filter.after_prompt(end);
    }
    if let Some(learnt) = report.learnt_call {
        filter.learn(learnt);
    }
    let mut ignore = |_: Event| Flow::Continue;
    filter.push(text, &mut ignore);
    filter.finish_as(end, &mut ignore);
    let mut message = Message::assistant(filter.content());
    if !filter.thinking().is_empty() {
        message.thinking = Some(filter.thinking().to_string());
    }
    if !filter.cut_call() {
        message.tool_calls = filter.take_tool_calls();
    }
    message
}

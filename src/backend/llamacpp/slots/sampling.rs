//! The sampling helper: a thread (`llama-sample`) that samples a slot's next
//! token while a grammar constrains it, so that a costly grammar holds back only
//! its own request.
//!
//! A grammar's sample checks the picked token against every stack the grammar
//! holds, and where it refuses the pick, masks the whole vocabulary: with
//! thousands of live alternatives that is seconds per token (llama.cpp's
//! `llama_grammar_reject_candidates`), and in llama-server every other slot
//! waits for it. Here the generation thread hands such a slot's sampler and a
//! copy of its logits to the helper and goes on decoding the other slots; the
//! slot sits out the batches until its token comes back ([`super::Phase::Sampling`]),
//! and the step waits for it no longer than [`super::FLOW_GRACE`], as for a slow
//! sink. A sampler whose grammar is cheap stays on the generation thread unless
//! another request is there to be held back.

use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Sender};

use crate::llama::{self, Sampler, SamplerError, Token};

/// A constrained sample that took this long (on either thread) goes to the
/// helper next time, even with no other request there: one might come.
pub(super) const COSTLY_SAMPLE: Duration = Duration::from_millis(1);

/// A slot's sample for the helper.
pub(super) struct SampleJob {
    pub slot: usize,
    /// The request's serial: an answer for a request that has ended is dropped.
    pub serial: u64,
    pub sampler: Sampler,
    pub logits: Vec<f32>,
    /// The likeliest tokens to report with it (`logprobs`).
    pub top: Option<usize>,
}

/// The helper's answer: the sampler back, and what it sampled.
pub(super) struct Sampled {
    pub slot: usize,
    pub serial: u64,
    pub sampler: Sampler,
    pub token: Result<Token, SamplerError>,
    /// The token's log-probability and the likeliest tokens', when asked for.
    pub probs: Option<(f32, Vec<(Token, f32)>)>,
    pub cost: Duration,
}

/// The helper thread and its two channels.
pub(super) struct Helper {
    jobs: Option<mpsc::Sender<SampleJob>>,
    pub(super) done: Receiver<Sampled>,
    thread: Option<JoinHandle<()>>,
}

impl Helper {
    pub(super) fn spawn() -> std::io::Result<Helper> {
        let (jobs, inbox) = mpsc::channel::<SampleJob>();
        let (out, done): (Sender<Sampled>, _) = crossbeam_channel::unbounded();
        let thread = std::thread::Builder::new()
            .name("llama-sample".into())
            .spawn(move || {
                for mut job in inbox {
                    let started = Instant::now();
                    let token = job.sampler.sample_constrained(&job.logits);
                    let probs = match (&token, job.top) {
                        (Ok(token), Some(top)) => Some(llama::log_probs(&job.logits, *token, top)),
                        _ => None,
                    };
                    let sampled = Sampled {
                        slot: job.slot,
                        serial: job.serial,
                        sampler: job.sampler,
                        token,
                        probs,
                        cost: started.elapsed(),
                    };
                    if out.send(sampled).is_err() {
                        return;
                    }
                }
            })?;
        Ok(Helper {
            jobs: Some(jobs),
            done,
            thread: Some(thread),
        })
    }

    /// Hands `job` to the helper; its sampler back when the helper is gone.
    pub(super) fn send(&self, job: SampleJob) -> Result<(), Box<Sampler>> {
        match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|e| Box::new(e.0.sampler)),
            None => Err(Box::new(job.sampler)),
        }
    }
}

impl Drop for Helper {
    /// Waits for the helper: a sampler it holds reads the model's vocabulary, so it
    /// must be done before the generation thread frees the model.
    fn drop(&mut self) {
        self.jobs = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

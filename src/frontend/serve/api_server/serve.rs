//! Serving a generation request once it is checked: its work queued as one job
//! per choice (`n`, on chat and text completions; one per prompt on
//! llama-server's `/completion`; one elsewhere), the response
//! head written when every job has its first output (so an error before any
//! output is a proper status), then the answer whole or streamed in the
//! protocol it was asked in, through that protocol's [`ReplyWriter`].
//!
//! Several choices run side by side on the pool's workers (each its own slot,
//! choice `i` seeded `seed + i` so a seeded request stays reproducible yet its
//! choices differ); their chunks interleave as they come, each naming its
//! choice's `index`, and the usage counts the prompt once and every answer.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Instant;

use crossbeam_channel::{RecvTimeoutError, Select};

use super::error::{from_backend, ApiError};
use super::pool::{Out, Pool, Ticket, Work};
use super::text::Assembler;
use super::wire::openai::{wire_timings, Timings};
use super::writer::ReplyWriter;
use super::{ApiServer, Loaded, Usage, KEEPALIVE, TICK};
use crate::backend::Reply;
use crate::core::{Event, Stats};
use crate::frontend::serve::http::{Responder, SseStream};

/// Cancels its ticket when the connection is done with it, however it ends
/// (a no-op for a finished job).
struct Held<'a> {
    pool: &'a Pool,
    ticket: Ticket,
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.pool.cancel(&self.ticket);
    }
}

/// The usage of several choices of one prompt: the prompt once (as the first
/// choice read it), every choice's answer; the speed figures of one choice
/// alone say nothing of the whole, so there are none.
fn total(usages: &[Usage]) -> Usage {
    match usages {
        [one] => one.clone(),
        _ => Usage {
            prompt: usages.first().map_or(0, |u| u.prompt),
            completion: usages.iter().map(|u| u.completion).sum(),
            cached: usages.first().and_then(|u| u.cached),
            stats: None,
        },
    }
}

/// The figures a chunk carries: the latest, with `timings_per_token`.
fn chunk_timings(per_token: bool, stats: Option<&Stats>) -> Option<Timings> {
    let stats = stats.filter(|_| per_token)?;
    wire_timings(&Usage::so_far(stats))
}

/// A streamed choice's state.
struct Choice {
    text: Assembler,
    /// Its first output, taken before the stream opened.
    first: Option<Out>,
    usage: Option<Usage>,
}

impl ApiServer {
    /// Queues `n` choices of the work and answers from their output (see the
    /// module docs).
    pub(super) fn serve(
        &self,
        loaded: &Loaded,
        answer: impl ReplyWriter,
        work: Work,
        n: u32,
        stream: bool,
        responder: Responder,
    ) {
        let works = (0..n)
            .map(|i| {
                let mut choice = work.clone();
                choice.sampling.seed = choice.sampling.seed.map(|s| s.wrapping_add(u64::from(i)));
                choice
            })
            .collect();
        self.serve_each(loaded, answer, works, "n", stream, responder);
    }

    /// Queues each of `works` as a choice of its own (index in order) and
    /// answers from their output; more than the pool can hold at once is a 400
    /// naming `param`.
    pub(super) fn serve_each(
        &self,
        loaded: &Loaded,
        answer: impl ReplyWriter,
        works: Vec<Work>,
        param: &str,
        stream: bool,
        responder: Responder,
    ) {
        let pool = &*loaded.pool;
        let per_token = works.first().is_some_and(|w| w.sampling.telemetry.timings);
        let room = pool.capacity() + pool.workers();
        if works.len() > room {
            let mut error = ApiError::invalid(
                param,
                format!(
                    "this server runs at most {room} choices at once (--parallel and its queue)"
                ),
            );
            error.status = 400;
            return answer.error(responder, &error);
        }
        let mut held = Vec::with_capacity(works.len());
        for choice in works {
            let Some(ticket) = pool.submit(choice) else {
                self.metrics.rejected_busy.fetch_add(1, Ordering::Relaxed);
                let error = ApiError::busy("every slot and the queue are full; retry later", 1);
                return answer.error(responder, &error);
            };
            held.push(Held { pool, ticket });
        }
        // The emergency stop (`POST /v1/emergency-stop`) reaches these jobs too.
        let _stops: Vec<_> = held
            .iter()
            .filter_map(|h| {
                (self.agent_api.as_ref())
                    .map(|api| api.stops().register_flag(h.ticket.cancel_flag()))
            })
            .collect();
        let mut firsts = Vec::with_capacity(held.len());
        for h in &held {
            let Some(first) = self.first_output(&h.ticket, &responder) else {
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                return;
            };
            if let Out::Done(Err(error)) = &first {
                self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                return answer.error(responder, &from_backend(error));
            }
            firsts.push(first);
        }
        if stream {
            self.stream(answer, firsts, &held, responder, per_token);
        } else {
            self.whole(answer, firsts, &held, responder);
        }
    }

    /// Waits for the job's first output; `None` when the client left first.
    fn first_output(&self, ticket: &Ticket, responder: &Responder) -> Option<Out> {
        loop {
            match ticket.events.recv_timeout(TICK) {
                Ok(out) => return Some(out),
                Err(RecvTimeoutError::Timeout) if responder.client_gone() => return None,
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    return Some(Out::Done(Err(crate::core::BackendError::Config(
                        "the worker stopped".into(),
                    ))))
                }
            }
        }
    }

    fn stream(
        &self,
        mut answer: impl ReplyWriter,
        firsts: Vec<Out>,
        held: &[Held],
        responder: Responder,
        per_token: bool,
    ) {
        let opened = if answer.ndjson() {
            responder.ndjson()
        } else {
            responder.sse()
        };
        let Ok(mut sse) = opened else {
            self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            return;
        };
        let mut choices: Vec<Choice> = firsts
            .into_iter()
            .map(|first| Choice {
                text: Assembler::new(),
                first: Some(first),
                usage: None,
            })
            .collect();
        let result = self.stream_choices(&mut answer, &mut sse, &mut choices, held, per_token);
        match result {
            Ok(()) => sse.finish(),
            Err(_) => {
                self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Opens every choice, then passes each output on as it comes until every
    /// choice finished (or one failed, which ends the stream); `per_token`: every
    /// chunk carries the figures so far.
    fn stream_choices(
        &self,
        answer: &mut impl ReplyWriter,
        sse: &mut SseStream,
        choices: &mut [Choice],
        held: &[Held],
        per_token: bool,
    ) -> io::Result<()> {
        for (index, choice) in choices.iter_mut().enumerate() {
            // The prompt's figures, when they came first, belong in the opening.
            if matches!(choice.first, Some(Out::Event(Event::Prefilled { .. }))) {
                if let Some(Out::Event(event)) = choice.first.take() {
                    choice.text.push(event);
                }
            }
            answer.start(sse, index as u32, choice.text.prefilled)?;
        }
        loop {
            let open: Vec<usize> = (0..choices.len())
                .filter(|&i| choices[i].usage.is_none())
                .collect();
            if open.is_empty() {
                let usages: Vec<Usage> = choices.iter().filter_map(|c| c.usage.clone()).collect();
                return answer.end(sse, &total(&usages));
            }
            let Some((i, out)) = self.next_output(sse, choices, &open, held)? else {
                continue;
            };
            let choice = &mut choices[i];
            let index = i as u32;
            match out {
                Out::Event(Event::Progress(progress)) => {
                    if let Some(prompt) = &progress.prompt {
                        let timings = chunk_timings(per_token, Some(&progress.stats));
                        answer.progress(sse, index, prompt, timings)?;
                    }
                    choice.text.push(Event::Progress(progress));
                }
                Out::Event(event) => {
                    if let Some(piece) = choice.text.push(event) {
                        let (logprobs, figures) = choice.text.unsent();
                        let timings = chunk_timings(per_token, figures);
                        answer.piece(sse, index, piece, logprobs, timings)?;
                    }
                }
                Out::Done(Ok(reply)) => {
                    if let Some(piece) = choice.text.finish() {
                        let (logprobs, figures) = choice.text.unsent();
                        let timings = chunk_timings(per_token, figures);
                        answer.piece(sse, index, piece, logprobs, timings)?;
                    }
                    let usage = Usage::of(&reply, choice.text.stats.as_ref());
                    self.metrics.record(&usage);
                    answer.finish(sse, index, &reply, &usage)?;
                    choice.usage = Some(usage);
                }
                Out::Done(Err(error)) => {
                    self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                    return answer.fail(sse, &from_backend(&error));
                }
            }
        }
    }

    /// The next output of one of the `open` choices: a first output kept from
    /// before the stream opened, else whichever job speaks first; `None` after a
    /// quiet tick (a keep-alive comment sent when due). An error when the client
    /// left or a worker vanished.
    fn next_output(
        &self,
        sse: &mut SseStream,
        choices: &mut [Choice],
        open: &[usize],
        held: &[Held],
    ) -> io::Result<Option<(usize, Out)>> {
        if let Some(&i) = open.iter().find(|&&i| choices[i].first.is_some()) {
            return Ok(choices[i].first.take().map(|out| (i, out)));
        }
        let mut select = Select::new();
        for &i in open {
            select.recv(&held[i].ticket.events);
        }
        match select.select_timeout(TICK) {
            Ok(operation) => {
                let i = open[operation.index()];
                match operation.recv(&held[i].ticket.events) {
                    Ok(out) => Ok(Some((i, out))),
                    Err(_) => Err(io::ErrorKind::BrokenPipe.into()),
                }
            }
            Err(_) if sse.client_gone() => Err(io::ErrorKind::BrokenPipe.into()),
            Err(_) => {
                if sse.idle() >= KEEPALIVE {
                    sse.comment("keepalive")?;
                }
                Ok(None)
            }
        }
    }

    fn whole(
        &self,
        answer: impl ReplyWriter,
        firsts: Vec<Out>,
        held: &[Held],
        responder: Responder,
    ) {
        let mut choices = Vec::with_capacity(held.len());
        for (first, h) in firsts.into_iter().zip(held) {
            match self.collect(first, &h.ticket, &responder) {
                None => return,
                Some(Err(error)) => return answer.error(responder, &error),
                Some(Ok(choice)) => choices.push(choice),
            }
        }
        let usages: Vec<Usage> = choices
            .iter()
            .map(|(text, reply)| Usage::of(reply, text.stats.as_ref()))
            .collect();
        let Some((text, reply)) = choices.first() else {
            let error = ApiError::new(500, "server_error", "no choice was generated");
            return answer.error(responder, &error);
        };
        answer.respond(responder, (text, reply), &choices, &total(&usages));
    }

    /// A job's whole output from its `first` on, counted in the metrics; `None`
    /// when the client left first.
    fn collect(
        &self,
        first: Out,
        ticket: &Ticket,
        responder: &Responder,
    ) -> Option<Result<(Assembler, Reply), ApiError>> {
        let mut text = Assembler::new();
        let mut next = Some(first);
        // Tokens may come faster than TICK for as long as the answer runs: the
        // client is looked at every TICK all the same, so one that left frees its
        // slot at once rather than when the answer ends.
        let mut looked = Instant::now();
        loop {
            if looked.elapsed() >= TICK {
                looked = Instant::now();
                if responder.client_gone() {
                    self.metrics.cancelled.fetch_add(1, Ordering::Relaxed);
                    return None;
                }
            }
            let out = match next.take() {
                Some(out) => out,
                None => match ticket.events.recv_timeout(TICK) {
                    Ok(out) => out,
                    Err(RecvTimeoutError::Timeout) => continue,
                    Err(RecvTimeoutError::Disconnected) => {
                        let error = ApiError::new(500, "server_error", "the worker stopped");
                        return Some(Err(error));
                    }
                },
            };
            match out {
                Out::Event(event) => {
                    text.push(event);
                }
                Out::Done(Ok(reply)) => {
                    text.finish();
                    self.metrics.record(&Usage::of(&reply, text.stats.as_ref()));
                    return Some(Ok((text, reply)));
                }
                Out::Done(Err(error)) => {
                    self.metrics.failed.fetch_add(1, Ordering::Relaxed);
                    return Some(Err(from_backend(&error)));
                }
            }
        }
    }
}

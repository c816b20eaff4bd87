//! The provider chain as one [`Backend`], so the agent never knows there is more than one.
//!
//! **Tiers.** Providers are grouped by priority (lower first; the order
//! `connect` builds them in). Providers of the same priority are a fleet that
//! shares the load: each request goes to the one with the fewest requests in
//! flight, ties taken in turn (round robin), counted across every chain built
//! from the same [`Board`] (the API server builds one chain per worker). A
//! provider that failed is passed over for [`COOL_DOWN`] while another of its
//! tier is up.
//!
//! **Failover.** When the chosen provider fails with a transient error
//! (connect, timeout, 408/409/429/5xx, after its own retries in
//! [`super::http::with_retries`]) *before anything was shown*, a `System`
//! event names the switch and the request goes to another provider of the
//! same tier not yet tried, else to the next tier, which then stays active
//! for later turns. Other errors do not fail over: authentication and bad
//! requests would fail the same way elsewhere or mean the user must act, so
//! the notice says why; a context overflow goes back to the agent, which
//! evicts and retries.
//!
//! Every `Stats` event is tagged with the provider that answered; `info()` and
//! `count_tokens()` follow the provider chosen last.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::{Backend, BackendInfo, GenerateRequest, Reply};
use crate::core::{Answer, BackendError, Event, EventSink, Flow, Message, Session, ToolCall};

/// How long a provider that failed is passed over while another of its tier is up.
pub const COOL_DOWN: Duration = Duration::from_secs(30);

/// One configured provider, built.
pub struct Provider {
    pub name: String,
    /// Lower is tried first; equal priorities share the load.
    pub priority: u32,
    pub backend: Box<dyn Backend>,
}

/// What every chain built from one configuration shares: each provider's
/// requests in flight and when it last failed, and each tier's turn.
#[derive(Default)]
pub struct Board {
    state: Mutex<BoardState>,
}

#[derive(Default)]
struct BoardState {
    in_flight: HashMap<String, usize>,
    failed_at: HashMap<String, Instant>,
    turn: HashMap<u32, usize>,
}

impl Board {
    fn state(&self) -> MutexGuard<'_, BoardState> {
        // The counters stay consistent even if a holder panicked.
        crate::util::sync::lock(&self.state)
    }

    /// Chooses among `candidates` (indices into `chain`, one tier) and counts
    /// the request as in flight: the fewest in flight among those not cooling
    /// down (all of them when every one is), ties in turn.
    fn take(self: &Arc<Self>, chain: &[Provider], candidates: &[usize]) -> Option<InFlight> {
        let mut state = self.state();
        let now = Instant::now();
        let up: Vec<usize> = candidates
            .iter()
            .copied()
            .filter(|&i| {
                state
                    .failed_at
                    .get(&chain[i].name)
                    .is_none_or(|at| now.duration_since(*at) >= COOL_DOWN)
            })
            .collect();
        let pool = if up.is_empty() { candidates } else { &up };
        let load = |i: &usize| state.in_flight.get(&chain[*i].name).copied().unwrap_or(0);
        let least = pool.iter().map(load).min()?;
        let tied: Vec<usize> = pool.iter().copied().filter(|i| load(i) == least).collect();
        let turn = state.turn.entry(chain[tied[0]].priority).or_insert(0);
        let chosen = tied[*turn % tied.len()];
        *turn = turn.wrapping_add(1);
        let name = chain[chosen].name.clone();
        *state.in_flight.entry(name.clone()).or_insert(0) += 1;
        Some(InFlight {
            board: Arc::clone(self),
            index: chosen,
            name,
        })
    }

    fn failed(&self, name: &str) {
        self.state()
            .failed_at
            .insert(name.to_string(), Instant::now());
    }

    fn answered(&self, name: &str) {
        self.state().failed_at.remove(name);
    }
}

/// A request counted as in flight on one provider until dropped.
struct InFlight {
    board: Arc<Board>,
    index: usize,
    name: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut state = self.board.state();
        if let Some(n) = state.in_flight.get_mut(&self.name) {
            *n = n.saturating_sub(1);
        }
    }
}

/// A chain of providers; never empty.
pub struct FailoverBackend {
    /// Sorted by priority (stable, so equal priorities keep their order).
    chain: Vec<Provider>,
    /// The priority of the tier requests go to.
    tier: u32,
    /// The provider chosen last, for `info` and `count_tokens`.
    last: usize,
    board: Arc<Board>,
}

impl FailoverBackend {
    /// `None` when `chain` is empty. `board` is shared with the other chains
    /// built from the same providers.
    pub fn new(mut chain: Vec<Provider>, board: Arc<Board>) -> Option<Self> {
        chain.sort_by_key(|p| p.priority);
        let tier = chain.first()?.priority;
        Some(FailoverBackend {
            chain,
            tier,
            last: 0,
            board,
        })
    }

    /// The providers of `tier` not yet tried for this request.
    fn untried(&self, tier: u32, tried: &[bool]) -> Vec<usize> {
        (0..self.chain.len())
            .filter(|&i| self.chain[i].priority == tier && !tried[i])
            .collect()
    }

    /// Where a request goes next: another provider of the active tier, else
    /// the next tier (which becomes the active one once used).
    fn next(&self, tried: &[bool]) -> Option<InFlight> {
        let same = self.untried(self.tier, tried);
        if !same.is_empty() {
            return self.board.take(&self.chain, &same);
        }
        let lower = self
            .chain
            .iter()
            .map(|p| p.priority)
            .find(|&p| p > self.tier)?;
        self.board.take(&self.chain, &self.untried(lower, tried))
    }
}

/// Remembers whether the user saw model output (notices and stats do not
/// count) and tags the stats with the provider that answered.
struct ShownSink<'a> {
    inner: &'a mut dyn EventSink,
    provider: &'a str,
    shown: bool,
}

impl EventSink for ShownSink<'_> {
    fn emit(&mut self, event: Event) -> Flow {
        match event {
            Event::Stats(mut stats) => {
                stats.provider = Some(self.provider.to_string());
                self.inner.emit(Event::Stats(stats))
            }
            Event::System(_) | Event::Prefilled { .. } | Event::Progress(_) => {
                self.inner.emit(event)
            }
            event => {
                self.shown = true;
                self.inner.emit(event)
            }
        }
    }

    fn cancelled(&self) -> bool {
        self.inner.cancelled()
    }

    fn approve(&mut self, call: &ToolCall) -> Answer {
        self.inner.approve(call)
    }
}

/// Why an error does not move to the next provider, for the notice; `None`
/// when it needs no notice (the agent handles it, or the user asked).
fn why_not_failover(error: &BackendError) -> Option<&'static str> {
    match error {
        BackendError::ContextOverflow { .. } | BackendError::Cancelled => None,
        BackendError::Http {
            status: 401 | 403, ..
        } => Some("authentication errors are not transient; check the API key"),
        BackendError::Config(_) => Some("the provider is misconfigured"),
        _ => Some("the error is not transient"),
    }
}

impl Backend for FailoverBackend {
    fn info(&self) -> BackendInfo {
        self.chain[self.last].backend.info()
    }

    fn generate(
        &mut self,
        session: &Session,
        request: &GenerateRequest<'_>,
        sink: &mut dyn EventSink,
    ) -> Result<Reply, BackendError> {
        let mut tried = vec![false; self.chain.len()];
        let Some(mut current) = self.next(&tried) else {
            return Err(BackendError::Config(
                "no provider to send the request to".into(),
            ));
        };
        loop {
            tried[current.index] = true;
            self.last = current.index;
            let provider = &mut self.chain[current.index];
            let mut watched = ShownSink {
                inner: &mut *sink,
                provider: &provider.name,
                shown: false,
            };
            let error = match provider.backend.generate(session, request, &mut watched) {
                Ok(reply) => {
                    self.board.answered(&current.name);
                    return Ok(reply);
                }
                Err(error) => error,
            };
            let shown = watched.shown;
            let name = provider.name.clone();
            if error.is_retryable() {
                self.board.failed(&name);
            }
            // Released before choosing the next, so this one counts as idle again.
            drop(current);
            if shown {
                return Err(error);
            }
            let Some(next) = self.next(&tried) else {
                return Err(error);
            };
            let next_name = self.chain[next.index].name.clone();
            if !error.is_retryable() {
                if let Some(why) = why_not_failover(&error) {
                    let notice = format!(
                        "provider {name} failed ({error}); not switching to {next_name}: {why}"
                    );
                    sink.emit(Event::System(notice));
                }
                return Err(error);
            }
            let notice = format!("provider {name} failed ({error}); switching to {next_name}");
            if sink.emit(Event::System(notice)) == Flow::Cancel {
                return Err(BackendError::Cancelled);
            }
            self.tier = self.chain[next.index].priority;
            current = next;
        }
    }

    /// Only when every provider of the active tier reads images: the next
    /// request may go to any of them (load sharing), and one that reads none
    /// would refuse it. A later tier taken over on failure refuses images it
    /// cannot read with its own `Invalid` error.
    fn takes_images(&self) -> bool {
        self.chain
            .iter()
            .filter(|p| p.priority == self.tier)
            .all(|p| p.backend.takes_images())
    }

    fn count_tokens(&self, message: &Message) -> u32 {
        self.chain[self.last].backend.count_tokens(message)
    }
}

#[cfg(test)]
mod tests;

//! `shepherd --cliserver`: one shared, persistent session served over HTTP;
//! prompts come from anywhere, the tools run here, and every observer sees the
//! same typed events live.
//!
//! Threads: the HTTP layer ([`super::http`]) runs one thread per connection;
//! one worker thread (`shepherd-cliserver`) drains a bounded queue of jobs and
//! runs them one at a time through the one [`AgentHandle`], so synchronous,
//! streamed and queued prompts keep their order. Each event of a job is
//! converted to its wire shape once ([`wire_event`](wire::wire_event), the one
//! place that knows the typed SSE shape), numbered, and handed to the job's own
//! client (for a streamed request) and to every `/updates` observer.
//!
//! Policies:
//! - A slow observer never stalls the agent: each has a bounded buffer, and an
//!   observer that falls that far behind is dropped. It receives an `error`
//!   event saying so and the stream ends; sequence numbers let it see what it
//!   missed, and it can resync with `/session`.
//! - A client that disconnects from a streaming `/request` cancels that
//!   request: the generation stops and tool process groups are killed. A
//!   non-streaming request runs to the end even if its client left.
//! - `POST /cancel` is the emergency stop: it cancels the running request and
//!   empties the queue (queued requests are answered as cancelled).
//! - The shared session survives restarts: it is saved to the session store
//!   (id `cliserver-<port>`) after every completed request and every
//!   `/clear`, and loaded at start unless `--fresh` is given. A saved file
//!   that cannot be read stops the start instead of being overwritten.
//! - The agent management endpoints ([`super::agent_api`]: MCP servers, profiles,
//!   direct tool calls, emergency stop) are mounted too;
//!   their emergency stop also empties the queue.
//!
//! This file holds the settings and the saved session; the rest is split by
//! concern: [`wire`] (the typed SSE shapes), [`hub`] (numbering and fanning
//! out events), [`jobs`] (the queue, the worker and the shared state),
//! [`routes`] (the handlers, beside the serde twin structs they fill) and
//! [`start`] (binding and serving).

mod hub;
mod jobs;
mod routes;
mod start;
mod wire;

#[cfg(test)]
mod tests;

use std::time::Duration;

use crate::agent::{AgentHandle, Op};
use crate::core::Session;
use crate::store::{Store, StoreError};

pub use start::run;

/// The CLI server's own settings.
#[derive(Debug, Clone)]
pub struct CliServerConfig {
    pub model: String,
    /// The backend's context window in tokens ([`crate::backend::BackendInfo`]),
    /// reported by `/status` and `/session`; 0 when unknown.
    pub context_size: u64,
    /// Jobs waiting behind the running one; more get `503`.
    pub queue_limit: usize,
    /// Events an observer may fall behind before it is dropped.
    pub observer_buffer: usize,
    /// Longest silence on an SSE stream before a keep-alive comment.
    pub keepalive: Duration,
    /// Where the shared session is saved after each request; `None` keeps it in memory.
    pub persist: Option<Persist>,
}

/// The session file of a CLI server.
#[derive(Debug, Clone)]
pub struct Persist {
    pub store: Store,
    pub id: String,
}

impl Persist {
    /// The default place: the user's store, one session per port.
    pub fn for_port(port: u16) -> Persist {
        Persist {
            store: Store::user(),
            id: format!("cliserver-{port}"),
        }
    }

    fn save(&self, session: &Session) {
        if let Err(error) = self.store.save_session(&self.id, session) {
            eprintln!("shepherd: cannot save the session: {error}");
        }
    }

    /// Loads the saved session into `agent`, unless `fresh`. With `fresh`, a
    /// file that cannot be read is moved aside (kept, never overwritten).
    /// Returns a line for the log, or why the server must not start.
    pub fn restore(
        &self,
        agent: &AgentHandle,
        system_prompt: &str,
        fresh: bool,
    ) -> Result<String, String> {
        let loaded = self.store.load(&self.id);
        match (loaded, fresh) {
            (Ok(saved), false) => {
                let count = saved.session.messages.len();
                agent.send(Op::Restore(saved.into_session(system_prompt)));
                Ok(format!("restored session {} ({count} messages)", self.id))
            }
            (Err(StoreError::NotFound(_)), _) => Ok(format!("new session {}", self.id)),
            (Ok(_), true) => Ok(format!(
                "fresh session {} (replacing the saved one)",
                self.id
            )),
            (Err(error), true) => {
                let path = self.store.path(&self.id).map_err(|e| e.to_string())?;
                let aside =
                    path.with_extension(format!("json.unreadable-{}", crate::store::now_unix()));
                std::fs::rename(&path, &aside)
                    .map_err(|e| format!("{error}; moving it aside failed: {e}"))?;
                Ok(format!(
                    "fresh session {}; the unreadable file is kept as {}",
                    self.id,
                    aside.display()
                ))
            }
            (Err(error), false) => Err(format!(
                "{error}\nstart with --fresh to begin a new session (the file is then kept aside)"
            )),
        }
    }
}

impl CliServerConfig {
    pub fn new(model: String, context_size: u64) -> Self {
        CliServerConfig {
            model,
            context_size,
            queue_limit: 64,
            observer_buffer: 4096,
            keepalive: Duration::from_secs(10),
            persist: None,
        }
    }
}

/// How often a waiting stream checks whether its client is still there.
const TICK: Duration = Duration::from_millis(100);
/// How long `/session` waits for the agent before answering from the cache.
const SNAPSHOT_WAIT: Duration = Duration::from_millis(200);

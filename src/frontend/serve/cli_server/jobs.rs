//! Jobs: the bounded queue, the one worker thread that runs them through the
//! agent, and `CliServer`, the state every route shares.

use std::io;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crossbeam_channel::{Receiver, Sender};

use crate::agent::{AgentHandle, Op};
use crate::core::{Event, FinishReason, Message, Role, Session};
use crate::frontend::serve::agent_api::AgentApi;
use crate::util::stop::StopGuard;
use crate::util::sync::lock;

use super::hub::Hub;
use super::{CliServerConfig, SNAPSHOT_WAIT};

/// How a job's result goes back to its client.
pub(super) enum JobReply {
    /// A non-streaming request waits for the outcome.
    Whole(Sender<Outcome>),
    /// A streaming request gets every event line.
    Stream(Sender<Arc<str>>),
    /// An `async` request gets nothing; observers see its events.
    Queued,
}

pub(super) struct Job {
    id: u64,
    /// The user message: the prompt and the images sent with it.
    message: Message,
    cancelled: Arc<AtomicBool>,
    reply: JobReply,
}

/// The end of a non-streaming request.
pub(super) struct Outcome {
    pub(super) finish: FinishReason,
    pub(super) response: String,
    pub(super) error: Option<String>,
}

/// The running job, for cancelling it.
struct Running {
    id: u64,
    cancelled: Arc<AtomicBool>,
}

/// The server's shared state.
pub struct CliServer {
    pub(super) agent: AgentHandle,
    jobs: Sender<Job>,
    /// The other end of `jobs`, for `/cancel` to empty the queue.
    pub(super) pending: Receiver<Job>,
    pub(super) hub: Hub,
    running: Mutex<Option<Running>>,
    next_id: AtomicU64,
    pub(super) served: AtomicU64,
    /// The provider that answered last, when the chain names it (`/status`).
    pub(super) last_provider: Mutex<Option<String>>,
    pub(super) started: Instant,
    /// The session as of the last finished job, for `/session` during a job.
    pub(super) session: Mutex<Session>,
    pub(super) config: CliServerConfig,
    /// The agent management endpoints, when mounted.
    pub(super) api: Option<AgentApi>,
    /// Keeps this server registered with the API's emergency stop.
    stop_guards: Mutex<Vec<StopGuard>>,
}

impl CliServer {
    /// Wraps `agent` and starts the worker thread.
    pub fn start(
        agent: AgentHandle,
        config: CliServerConfig,
        api: Option<AgentApi>,
    ) -> io::Result<Arc<CliServer>> {
        let (jobs, pending) = crossbeam_channel::bounded(config.queue_limit);
        let server = Arc::new(CliServer {
            agent,
            jobs,
            pending: pending.clone(),
            hub: Hub::new(config.observer_buffer),
            running: Mutex::new(None),
            next_id: AtomicU64::new(1),
            served: AtomicU64::new(0),
            last_provider: Mutex::new(None),
            started: Instant::now(),
            session: Mutex::new(Session::default()),
            config,
            api,
            stop_guards: Mutex::new(Vec::new()),
        });
        server.connect_api();
        let worker = server.clone();
        std::thread::Builder::new()
            .name("shepherd-cliserver".into())
            .spawn(move || {
                worker.refresh_session();
                for job in pending.iter() {
                    worker.run_job(job);
                }
            })?;
        Ok(server)
    }

    /// Registers with the API's emergency stop and points profile changes at the agent.
    fn connect_api(self: &Arc<Self>) {
        let Some(api) = &self.api else { return };
        let weak = Arc::downgrade(self);
        let guard = api.stops().register(move || {
            if let Some(server) = weak.upgrade() {
                server.stop_everything();
            }
        });
        lock(&self.stop_guards).push(guard);
        let weak = Arc::downgrade(self);
        api.set_profile_hook(Box::new(move |profile, prompt| {
            if let Some(server) = weak.upgrade() {
                server.agent.send(Op::ApplyProfile {
                    system_prompt: prompt.to_string(),
                    tools: profile.tools.clone(),
                });
            }
        }));
    }

    /// Asks the running job to stop (the agent kills tool process groups).
    pub fn cancel_running(&self) -> bool {
        let running = lock(&self.running);
        if let Some(job) = running.as_ref() {
            job.cancelled.store(true, Ordering::SeqCst);
        }
        self.agent.cancel();
        running.is_some()
    }

    /// Whether a job is running.
    pub fn busy(&self) -> bool {
        lock(&self.running).is_some()
    }

    fn run_job(&self, job: Job) {
        if job.cancelled.load(Ordering::SeqCst) {
            return self.answer_cancelled(job);
        }
        *lock(&self.running) = Some(Running {
            id: job.id,
            cancelled: job.cancelled.clone(),
        });
        let mut error = None;
        let finish = self.agent.run_message(job.message.clone(), |event| {
            // A cancel that raced with the start of the turn is applied here.
            if job.cancelled.load(Ordering::SeqCst) {
                self.agent.cancel();
            }
            match event {
                Event::Error { message, .. } => error = Some(message.clone()),
                Event::Stats(stats) if stats.provider.is_some() => {
                    lock(&self.last_provider).clone_from(&stats.provider);
                }
                _ => {}
            }
            let Some(line) = self.hub.publish(job.id, event) else {
                return Ok(());
            };
            match &job.reply {
                // The streaming client is gone: `run_message` cancels the turn.
                JobReply::Stream(tx) => tx.send(line).map_err(|_| io::ErrorKind::BrokenPipe)?,
                JobReply::Whole(_) | JobReply::Queued => {}
            }
            Ok(())
        });
        *lock(&self.running) = None;
        self.served.fetch_add(1, Ordering::SeqCst);
        let session = self.refresh_session();
        if let Some(persist) = &self.config.persist {
            persist.save(&session);
        }
        if let JobReply::Whole(tx) = job.reply {
            let _ = tx.send(Outcome {
                finish,
                response: last_answer(&session),
                error,
            });
        }
    }

    /// Answers a job that was cancelled before it ran.
    pub(super) fn answer_cancelled(&self, job: Job) {
        let line = self
            .hub
            .publish(job.id, &Event::Stop(FinishReason::Cancelled));
        match job.reply {
            JobReply::Whole(tx) => {
                let _ = tx.send(Outcome {
                    finish: FinishReason::Cancelled,
                    response: String::new(),
                    error: Some("cancelled before it ran".into()),
                });
            }
            JobReply::Stream(tx) => {
                if let Some(line) = line {
                    let _ = tx.send(line);
                }
            }
            JobReply::Queued => {}
        }
    }

    /// Takes a fresh snapshot when the agent answers quickly; the cache otherwise.
    pub(super) fn refresh_session(&self) -> Session {
        let (tx, rx) = crossbeam_channel::bounded(1);
        if self.agent.send(Op::Snapshot(tx)) {
            if let Ok(session) = rx.recv_timeout(SNAPSHOT_WAIT) {
                *lock(&self.session) = session.clone();
                return session;
            }
        }
        lock(&self.session).clone()
    }

    /// Queues a job; `None` when the queue is full.
    pub(super) fn enqueue(
        &self,
        message: Message,
        reply: JobReply,
    ) -> Option<(u64, Arc<AtomicBool>)> {
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let cancelled = Arc::new(AtomicBool::new(false));
        let job = Job {
            id,
            message,
            cancelled: cancelled.clone(),
            reply,
        };
        self.jobs.try_send(job).ok()?;
        Some((id, cancelled))
    }

    /// Cancels one job, queued or running.
    pub(super) fn cancel_job(&self, id: u64, cancelled: &AtomicBool) {
        cancelled.store(true, Ordering::SeqCst);
        if lock(&self.running).as_ref().is_some_and(|r| r.id == id) {
            self.agent.cancel();
        }
    }
}

/// The last assistant text of the last turn.
pub(super) fn last_answer(session: &Session) -> String {
    let turn_start = session
        .messages
        .iter()
        .rposition(|m| m.role == Role::User)
        .unwrap_or(0);
    session.messages[turn_start..]
        .iter()
        .rev()
        .find(|m| m.role == Role::Assistant && !m.content.is_empty())
        .map(|m| m.content.clone())
        .unwrap_or_default()
}

//! The worker pool: N worker threads, each owning a [`Backend`], behind one
//! bounded FIFO queue.
//!
//! A request is admitted when a worker is idle or the queue has room;
//! otherwise [`Pool::submit`] refuses it at once (the caller answers 503 with
//! `Retry-After`), so at most `workers + capacity` requests are ever held.
//! Workers take jobs strictly in arrival order. A client that goes away
//! [`Pool::cancel`]s its ticket: a queued job leaves the queue at once, a
//! running one sees its cancel flag at the next token (through the sink's
//! [`Flow`]) and between tools, so its worker is free within one token.
//! Nothing here is shared between jobs except the queue, so one client's
//! cancel never touches another's job.
//!
//! With `--use-tools` a job runs through the agent's own loop
//! ([`crate::agent::turn`]) over a copy of the client's conversation: the
//! server's registry (calls to the client's tools go back to the client), a
//! gate with the configured rules and no one to ask, and the job's sink.
//! Eviction on context overflow, thinking and reasoning artefacts kept
//! between rounds, the round cap and cancellation come from that loop.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender};

use crate::agent::turn::{Outcome, Toolbox, Turn, TurnConfig};
use crate::backend::{Backend, GenerateRequest, PromptPart, Reply, Sampling, ToolChoice};
use crate::core::ToolSpec;
use crate::core::{BackendError, ChannelSink, Event, FinishReason, Session, ToolCall};
use crate::tools::approval::{Gate, Headless, Policy};
use crate::tools::audit::AuditLog;
use crate::tools::{ToolContext, ToolRegistry};

/// One generation request, stateless: the conversation comes with it.
#[derive(Debug, Clone)]
pub struct Work {
    pub session: Session,
    /// The client's tools: returned to it as calls, never run here.
    pub tools: Vec<ToolSpec>,
    pub tool_choice: ToolChoice,
    pub sampling: Sampling,
    /// Run the server's own tools (`--use-tools`) through the tool loop.
    pub use_tools: bool,
    /// `/v1/completions` and `/completion`: text or token ids the model
    /// continues as they are, with no chat template ([`Backend::complete`]);
    /// `session` and the tools are unused.
    pub raw_prompt: Option<Vec<PromptPart>>,
}

/// What a job sends back: its events, then exactly one `Done`.
#[derive(Debug)]
pub enum Out {
    Event(Event),
    Done(Result<Reply, BackendError>),
}

/// The server's own tools for `--use-tools`.
pub struct ServerTools {
    pub registry: ToolRegistry,
    pub root: PathBuf,
    /// Most generations per request (`--max-rounds`, `max_rounds` in config.json).
    pub max_rounds: u32,
    /// The configured approval rules: a server has no one to ask, so a call
    /// the rules do not allow is refused (and the model told so).
    pub policy: Policy,
}

impl ServerTools {
    /// One request's checkpoint: the rules, nobody to ask, the audit log.
    fn gate(&self) -> Gate {
        Gate::new(self.policy.clone(), Box::new(Headless), "server")
            .with_audit(AuditLog::open_default())
    }
}

struct Job {
    id: u64,
    work: Work,
    out: Sender<Out>,
    cancel: Arc<AtomicBool>,
}

/// A submitted job, held by the connection that waits for it.
pub struct Ticket {
    id: u64,
    pub events: Receiver<Out>,
    cancel: Arc<AtomicBool>,
}

impl Ticket {
    /// The flag that stops this job (for the emergency stop).
    pub fn cancel_flag(&self) -> Arc<AtomicBool> {
        self.cancel.clone()
    }
}

#[derive(Default)]
struct State {
    queue: VecDeque<Job>,
    /// Workers waiting for a job.
    idle: usize,
}

/// The queue and the workers' shared counters.
pub struct Pool {
    state: Mutex<State>,
    ready: Condvar,
    capacity: usize,
    workers: AtomicUsize,
    running: AtomicUsize,
    next_id: AtomicU64,
}

impl Pool {
    /// A pool whose queue holds at most `capacity` waiting jobs.
    pub fn new(capacity: usize) -> Arc<Pool> {
        Arc::new(Pool {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            capacity,
            workers: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            next_id: AtomicU64::new(1),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        crate::util::sync::lock(&self.state)
    }

    /// Starts one worker thread owning `backend`.
    pub fn start_worker(
        self: &Arc<Self>,
        backend: Box<dyn Backend>,
        tools: Option<Arc<ServerTools>>,
    ) -> std::io::Result<()> {
        let pool = self.clone();
        let n = self.workers.fetch_add(1, Ordering::SeqCst);
        let spawned = std::thread::Builder::new()
            .name(format!("shepherd-api-{n}"))
            .spawn(move || {
                let mut worker = Worker { backend, tools };
                while let Some(job) = pool.next_job() {
                    pool.running.fetch_add(1, Ordering::SeqCst);
                    worker.run(job);
                    pool.running.fetch_sub(1, Ordering::SeqCst);
                }
            });
        if spawned.is_err() {
            self.workers.fetch_sub(1, Ordering::SeqCst);
        }
        spawned.map(|_| ())
    }

    /// Queues `work`; `None` when every worker is busy and the queue is full.
    pub fn submit(&self, work: Work) -> Option<Ticket> {
        let (out, events) = crossbeam_channel::unbounded();
        let cancel = Arc::new(AtomicBool::new(false));
        let id = self.next_id.fetch_add(1, Ordering::SeqCst);
        let mut state = self.lock();
        if state.queue.len() >= self.capacity + state.idle {
            return None;
        }
        state.queue.push_back(Job {
            id,
            work,
            out,
            cancel: cancel.clone(),
        });
        drop(state);
        self.ready.notify_one();
        Some(Ticket { id, events, cancel })
    }

    /// Cancels a ticket: out of the queue if it still waits, stopped if it runs.
    pub fn cancel(&self, ticket: &Ticket) {
        ticket.cancel.store(true, Ordering::SeqCst);
        let mut state = self.lock();
        state.queue.retain(|job| job.id != ticket.id);
    }

    /// Blocks until a job is there (FIFO).
    fn next_job(&self) -> Option<Job> {
        let mut state = self.lock();
        state.idle += 1;
        loop {
            if let Some(job) = state.queue.pop_front() {
                state.idle -= 1;
                return Some(job);
            }
            state = crate::util::sync::wait(&self.ready, state);
        }
    }

    pub fn queue_depth(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn running(&self) -> usize {
        self.running.load(Ordering::SeqCst)
    }

    pub fn workers(&self) -> usize {
        self.workers.load(Ordering::SeqCst)
    }
}

/// What of a job's events its connection gets: all but the notices for a
/// person at a terminal (an eviction, the round cap, a failover), which have no
/// place in an API answer; passing one on would also write the response head
/// before any output, so a later error could no longer be a proper status.
fn api_event(event: Event) -> Option<Out> {
    (!matches!(event, Event::System(_))).then_some(Out::Event(event))
}

struct Worker {
    backend: Box<dyn Backend>,
    tools: Option<Arc<ServerTools>>,
}

impl Worker {
    fn run(&mut self, job: Job) {
        if job.cancel.load(Ordering::SeqCst) {
            return;
        }
        let mut sink = ChannelSink {
            out: &job.out,
            cancel: &job.cancel,
            wrap: api_event,
        };
        let result = match (&self.tools, job.work.use_tools, &job.work.raw_prompt) {
            (_, _, Some(prompt)) => {
                let request = GenerateRequest {
                    tools: &[],
                    tool_choice: &ToolChoice::None,
                    sampling: &job.work.sampling,
                    stream: true,
                };
                self.backend.complete(prompt, &request, &mut sink)
            }
            (Some(tools), true, None) => {
                let tools = tools.clone();
                self.run_with_tools(&tools, &job.work, &job.cancel, &mut sink)
            }
            _ => {
                let request = GenerateRequest {
                    tools: &job.work.tools,
                    tool_choice: &job.work.tool_choice,
                    sampling: &job.work.sampling,
                    stream: true,
                };
                self.backend
                    .generate(&job.work.session, &request, &mut sink)
            }
        };
        let _ = job.out.send(Out::Done(result));
    }

    /// `--use-tools`: the agent's loop ([`Turn`]) over a copy of the client's
    /// conversation, with the server's tools and gate. Calls to the client's
    /// own tools end it and go back to the client; the answer's usage is the
    /// sum over every generation.
    fn run_with_tools(
        &mut self,
        tools: &ServerTools,
        work: &Work,
        cancel: &Arc<AtomicBool>,
        sink: &mut ChannelSink<'_, Out>,
    ) -> Result<Reply, BackendError> {
        let mut session = work.session.clone();
        let mut toolbox = ServerToolbox {
            tools,
            client: &work.tools,
        };
        let mut gate = tools.gate();
        let mut ctx = ToolContext::new(tools.root.clone());
        ctx.cancel = cancel.clone();
        let outcome = Turn {
            backend: &mut *self.backend,
            session: &mut session,
            toolbox: &mut toolbox,
            gate: &mut gate,
            tool_ctx: &ctx,
            sink,
            config: TurnConfig {
                sampling: &work.sampling,
                stream: true,
                max_rounds: tools.max_rounds,
                first_tool_choice: &work.tool_choice,
            },
        }
        .run();
        match outcome {
            Outcome::Answered(reply) => Ok(reply),
            Outcome::RoundCap(usage) => Ok(Reply {
                content: String::new(),
                thinking: String::new(),
                tool_calls: Vec::new(),
                finish: FinishReason::Length,
                usage: Some(usage),
                artefacts: Vec::new(),
                stop_sequence: None,
            }),
            Outcome::Failed(error) => Err(error),
        }
    }
}

/// The server's tools for one request: its registry, offered with the
/// client's tools (a client tool named like a server tool is the server's).
/// Only calls to the server's tools run here.
struct ServerToolbox<'a> {
    tools: &'a ServerTools,
    client: &'a [ToolSpec],
}

impl Toolbox for ServerToolbox<'_> {
    fn offer(&mut self) -> Vec<ToolSpec> {
        let registry = &self.tools.registry;
        let mut specs = registry.specs();
        specs.extend(
            self.client
                .iter()
                .filter(|t| registry.get(&t.name).is_none())
                .cloned(),
        );
        specs
    }

    fn registry(&self) -> &ToolRegistry {
        &self.tools.registry
    }

    fn runs(&self, call: &ToolCall) -> bool {
        self.tools.registry.get(&call.name).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::BackendInfo;
    use crate::core::EventSink;
    use crate::core::Message;
    use std::time::Duration;

    /// Emits one event, then waits until released (or cancelled).
    struct HeldBackend {
        release: Receiver<()>,
    }

    impl Backend for HeldBackend {
        fn info(&self) -> BackendInfo {
            BackendInfo {
                kind: "gate",
                model: "m".into(),
                context_size: 100,
                local: false,
            }
        }

        fn generate(
            &mut self,
            _session: &Session,
            _request: &GenerateRequest<'_>,
            sink: &mut dyn EventSink,
        ) -> Result<Reply, BackendError> {
            sink.emit(Event::Content("x".into()));
            loop {
                if sink.cancelled() {
                    return Err(BackendError::Cancelled);
                }
                if self.release.recv_timeout(Duration::from_millis(5)).is_ok() {
                    break;
                }
            }
            Ok(Reply {
                content: "x".into(),
                thinking: String::new(),
                tool_calls: Vec::new(),
                finish: FinishReason::Stop,
                usage: None,
                artefacts: Vec::new(),
                stop_sequence: None,
            })
        }

        fn count_tokens(&self, _message: &Message) -> u32 {
            1
        }
    }

    fn work() -> Work {
        Work {
            session: Session::new("s"),
            tools: Vec::new(),
            tool_choice: ToolChoice::Auto,
            sampling: Sampling::default(),
            use_tools: false,
            raw_prompt: None,
        }
    }

    fn first_event(ticket: &Ticket) -> Out {
        ticket
            .events
            .recv_timeout(Duration::from_secs(10))
            .expect("an event")
    }

    #[test]
    fn admits_workers_plus_queue_then_refuses_and_cancel_frees_an_entry() {
        let pool = Pool::new(1);
        let (release, gate) = crossbeam_channel::unbounded();
        pool.start_worker(Box::new(HeldBackend { release: gate }), None)
            .unwrap();
        let running = pool.submit(work()).expect("a worker is idle");
        assert!(matches!(first_event(&running), Out::Event(_)));
        let queued = pool.submit(work()).expect("the queue has room");
        assert_eq!(pool.queue_depth(), 1);
        assert!(pool.submit(work()).is_none(), "worker and queue are full");
        pool.cancel(&queued);
        assert_eq!(pool.queue_depth(), 0);
        let next = pool.submit(work()).expect("the cancelled entry was freed");
        release.send(()).unwrap();
        assert!(matches!(first_event(&running), Out::Done(Ok(_))));
        // The running job is undisturbed; the next one runs after it.
        assert!(matches!(first_event(&next), Out::Event(_)));
        pool.cancel(&next);
        assert!(matches!(
            first_event(&next),
            Out::Done(Err(BackendError::Cancelled))
        ));
        assert!(
            queued.events.try_recv().is_err(),
            "a cancelled entry never runs"
        );
    }
}

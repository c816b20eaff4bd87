//! Tool approvals: which calls may run, and asking the user about the rest.
//!
//! Every tool call passes a [`Gate`] before it runs, whoever asks for it: the
//! agent's for the model's calls, the API server's for `--use-tools`, the tool
//! server's for `executeTool`, and one per `POST /v1/tools/call`; each writes
//! the call's audit line.
//! The gate asks the [`Policy`] first (rules from config.json and `--approve` /
//! `--deny`, then the default: read-only calls run, side-effecting calls ask).
//! A call that needs asking goes to the [`Approver`] the front-end gave the
//! agent: [`ChannelApprover`] sends an [`Event::ApprovalRequired`] and blocks
//! the agent thread until the front-end answers through its [`Approvals`]
//! handle, the wait times out, or the turn is cancelled; [`Headless`] has no
//! one to ask and refuses. A refused call is not run; the model gets a tool
//! result that says why.
//!
//! **Architecture Invariant:** approvals come only from the user's side. The
//! only way to answer a request is [`Approvals::answer`], which front-ends call
//! for a key press, an HTTP `POST /approve/{id}` or a `--json` input line. Model
//! text, tool arguments and tool output never reach it.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError, Sender};

pub use crate::core::Answer;
use crate::core::{ApprovalRequest, Event, ToolCall};
use crate::tools::audit::{AuditLog, AuditRecord, DecidedBy, Verdict};
use crate::tools::{pattern, ToolOutput};
use crate::util::sync::lock;

/// What the policy says about one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Allow,
    Ask,
    Deny,
}

/// Tool-name globs (fnmatch, case-insensitive; `all` means `*`) for each decision.
/// Deny beats ask, ask beats allow; a call no rule names asks when it is
/// side-effecting and runs otherwise.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    pub allow: Vec<String>,
    pub ask: Vec<String>,
    pub deny: Vec<String>,
}

impl Policy {
    pub fn decide(&self, tool: &str, side_effecting: bool) -> Decision {
        let name = tool.to_ascii_lowercase();
        let matches = |globs: &[String]| globs.iter().any(|g| glob_matches(g, &name));
        if matches(&self.deny) {
            Decision::Deny
        } else if matches(&self.ask) {
            Decision::Ask
        } else if matches(&self.allow) || !side_effecting {
            Decision::Allow
        } else {
            Decision::Ask
        }
    }
}

fn glob_matches(glob: &str, name: &str) -> bool {
    let glob = glob.trim().to_ascii_lowercase();
    glob == "all" || pattern::fnmatch(&glob, name)
}

// `Verdict` and `DecidedBy` are defined in `audit`, which records them; the
// gate is what produces them, so their constructors live here.
impl Verdict {
    fn allow(by: DecidedBy) -> Verdict {
        Verdict { allowed: true, by }
    }

    fn deny(by: DecidedBy) -> Verdict {
        Verdict { allowed: false, by }
    }

    /// The tool result the model gets instead of running a refused call.
    pub fn refusal(self, tool: &str) -> ToolOutput {
        let text = match self.by {
            DecidedBy::User => format!(
                "The user denied this call to '{tool}', so it was not run. Do not retry it \
                 unless the user asks for it."
            ),
            DecidedBy::Timeout => {
                format!("No approval for this call to '{tool}' arrived in time, so it was not run.")
            }
            DecidedBy::Cancelled => {
                format!("The user cancelled while this call to '{tool}' waited for approval.")
            }
            DecidedBy::NoApprover => format!(
                "This call to '{tool}' was not run: it needs approval and shepherd is running \
                 without anyone to ask (allow it with --approve {tool})."
            ),
            DecidedBy::Policy | DecidedBy::Session => {
                format!("The approval policy denies '{tool}', so this call was not run.")
            }
        };
        ToolOutput {
            summary: format!("denied ({})", self.by.as_str()),
            content: text,
            error: true,
            images: Vec::new(),
        }
    }
}

/// How asking ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked {
    Answered(Answer),
    TimedOut,
    Cancelled,
    NoOne,
}

/// Asks the user about a call on behalf of the agent thread.
pub trait Approver: Send {
    /// Blocks until the user answers, the wait times out, or `cancel` is set.
    /// `notify` sends events to the front-end.
    fn ask(
        &mut self,
        request: &ApprovalRequest,
        notify: &mut dyn FnMut(Event),
        cancel: &AtomicBool,
    ) -> Asked;

    /// The front-end's handle for answering, when this approver has one.
    fn approvals(&self) -> Option<Approvals> {
        None
    }
}

/// For modes with no one to ask (`-e`, piped input, the tool server): every
/// call that needs approval is refused.
pub struct Headless;

impl Approver for Headless {
    fn ask(&mut self, _: &ApprovalRequest, _: &mut dyn FnMut(Event), _: &AtomicBool) -> Asked {
        Asked::NoOne
    }
}

/// For a request that is itself the user's approval (`POST /v1/tools/call`, an
/// authenticated client naming the tool and its arguments): whatever asks is allowed;
/// only the policy's deny rules refuse.
pub struct DirectRequest;

impl Approver for DirectRequest {
    fn ask(&mut self, _: &ApprovalRequest, _: &mut dyn FnMut(Event), _: &AtomicBool) -> Asked {
        Asked::Answered(Answer::Allow)
    }
}

/// One answer sent by a front-end.
#[derive(Debug)]
struct Reply {
    id: String,
    answer: Answer,
}

/// The front-end's side of a [`ChannelApprover`]: answers requests by id.
#[derive(Clone)]
pub struct Approvals {
    replies: Sender<Reply>,
    pending: Arc<Mutex<HashSet<String>>>,
    /// Set when the front-end can no longer answer (its input ended).
    closed: Arc<AtomicBool>,
}

/// `Approvals::answer` for an id nobody is waiting on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownApproval;

impl Approvals {
    /// Answers the pending request `id`. Fails when no request with that id is
    /// waiting (never asked, already answered, or timed out).
    pub fn answer(&self, id: &str, answer: Answer) -> Result<(), UnknownApproval> {
        if !lock(&self.pending).remove(id) {
            return Err(UnknownApproval);
        }
        self.replies
            .send(Reply {
                id: id.to_string(),
                answer,
            })
            .map_err(|_| UnknownApproval)
    }

    /// Says that no more answers will come (e.g. `--json` input ended): the
    /// waiting request and every later one are refused at once instead of
    /// waiting for the timeout.
    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Whether a request with this id is waiting.
    #[cfg(test)]
    pub fn is_pending(&self, id: &str) -> bool {
        lock(&self.pending).contains(id)
    }
}

/// Asks through the event stream and waits for the front-end's answer.
pub struct ChannelApprover {
    replies: Receiver<Reply>,
    handle: Approvals,
    timeout: Duration,
}

/// How often a waiting approver looks at the cancel flag.
const CANCEL_POLL: Duration = Duration::from_millis(50);

impl ChannelApprover {
    pub fn new(timeout: Duration) -> ChannelApprover {
        let (tx, rx) = crossbeam_channel::unbounded();
        ChannelApprover {
            replies: rx,
            handle: Approvals {
                replies: tx,
                pending: Arc::default(),
                closed: Arc::default(),
            },
            timeout,
        }
    }

    fn wait(&self, id: &str, cancel: &AtomicBool) -> Asked {
        let end = Instant::now() + self.timeout;
        loop {
            if cancel.load(Ordering::SeqCst) {
                return Asked::Cancelled;
            }
            if self.handle.closed.load(Ordering::SeqCst) {
                return Asked::NoOne;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Asked::TimedOut;
            }
            match self.replies.recv_timeout(left.min(CANCEL_POLL)) {
                Ok(reply) if reply.id == id => return Asked::Answered(reply.answer),
                // A stale answer to an earlier request: ignore it.
                Ok(_) | Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return Asked::NoOne,
            }
        }
    }
}

impl Approver for ChannelApprover {
    fn ask(
        &mut self,
        request: &ApprovalRequest,
        notify: &mut dyn FnMut(Event),
        cancel: &AtomicBool,
    ) -> Asked {
        if self.handle.closed.load(Ordering::SeqCst) {
            return Asked::NoOne;
        }
        lock(&self.handle.pending).insert(request.id.clone());
        notify(Event::ApprovalRequired(request.clone()));
        let asked = self.wait(&request.id, cancel);
        lock(&self.handle.pending).remove(&request.id);
        asked
    }

    fn approvals(&self) -> Option<Approvals> {
        Some(self.handle.clone())
    }
}

/// The agent's checkpoint: policy, approver, "always" answers and the audit log.
pub struct Gate {
    policy: Policy,
    approver: Box<dyn Approver>,
    /// Tools the user allowed for the rest of the session (lower-case names).
    always: HashSet<String>,
    audit: Option<AuditLog>,
    /// Who runs the agent, for the audit log (`repl`, `cliserver`, …).
    mode: &'static str,
}

static NEXT_APPROVAL: AtomicU64 = AtomicU64::new(1);

impl Gate {
    pub fn new(policy: Policy, approver: Box<dyn Approver>, mode: &'static str) -> Gate {
        Gate {
            policy,
            approver,
            always: HashSet::new(),
            audit: None,
            mode,
        }
    }

    /// No one to ask, the default policy, no audit log: for tests.
    #[cfg(test)]
    pub fn headless() -> Gate {
        Gate::new(Policy::default(), Box::new(Headless), "headless")
    }

    pub fn with_audit(mut self, audit: Option<AuditLog>) -> Gate {
        self.audit = audit;
        self
    }

    pub fn approvals(&self) -> Option<Approvals> {
        self.approver.approvals()
    }

    /// Decides whether `call` may run, asking the user when the policy says so.
    pub fn check(
        &mut self,
        call: &ToolCall,
        side_effecting: bool,
        notify: &mut dyn FnMut(Event),
        cancel: &AtomicBool,
    ) -> Verdict {
        let name = call.name.to_ascii_lowercase();
        match self.policy.decide(&name, side_effecting) {
            Decision::Allow => return Verdict::allow(DecidedBy::Policy),
            Decision::Deny => return Verdict::deny(DecidedBy::Policy),
            Decision::Ask if self.always.contains(&name) => {
                return Verdict::allow(DecidedBy::Session)
            }
            Decision::Ask => {}
        }
        let request = ApprovalRequest {
            id: NEXT_APPROVAL.fetch_add(1, Ordering::SeqCst).to_string(),
            call: call.clone(),
        };
        match self.approver.ask(&request, notify, cancel) {
            Asked::Answered(Answer::Allow) => Verdict::allow(DecidedBy::User),
            Asked::Answered(Answer::Always) => {
                self.always.insert(name);
                Verdict::allow(DecidedBy::User)
            }
            Asked::Answered(Answer::Deny) => Verdict::deny(DecidedBy::User),
            Asked::TimedOut => Verdict::deny(DecidedBy::Timeout),
            Asked::Cancelled => Verdict::deny(DecidedBy::Cancelled),
            Asked::NoOne => Verdict::deny(DecidedBy::NoApprover),
        }
    }

    /// Answers for a call another shepherd asks about (the cliserver behind
    /// `--backend cli`): this gate's policy, "always" answers and user decide
    /// as for a local call that has side effects, and the answer says whether
    /// the user chose "always", so the server remembers it too.
    pub fn answer_remote(
        &mut self,
        call: &ToolCall,
        notify: &mut dyn FnMut(Event),
        cancel: &AtomicBool,
    ) -> Answer {
        let name = call.name.to_ascii_lowercase();
        let always_before = self.always.contains(&name);
        if !self.check(call, true, notify, cancel).allowed {
            Answer::Deny
        } else if !always_before && self.always.contains(&name) {
            Answer::Always
        } else {
            Answer::Allow
        }
    }

    /// Runs `call` through `run` if the gate lets it, and records it in the audit log.
    /// `side_effecting` is `None` for a tool that does not exist (or is disabled):
    /// it needs no approval, since the registry answers it with an error and runs nothing.
    pub fn run(
        &mut self,
        call: &ToolCall,
        side_effecting: Option<bool>,
        notify: &mut dyn FnMut(Event),
        cancel: &AtomicBool,
        run: impl FnOnce() -> ToolOutput,
    ) -> ToolOutput {
        self.run_judged(call, side_effecting, notify, cancel, run).1
    }

    /// [`Gate::run`], also saying how the call was judged, for front-ends that answer
    /// a refusal differently from a tool's own failure (a 403, a JSON-RPC error).
    pub fn run_judged(
        &mut self,
        call: &ToolCall,
        side_effecting: Option<bool>,
        notify: &mut dyn FnMut(Event),
        cancel: &AtomicBool,
        run: impl FnOnce() -> ToolOutput,
    ) -> (Verdict, ToolOutput) {
        let verdict = match side_effecting {
            Some(side_effecting) => self.check(call, side_effecting, notify, cancel),
            None => Verdict::allow(DecidedBy::Policy),
        };
        let started = Instant::now();
        let output = if verdict.allowed {
            run()
        } else {
            verdict.refusal(&call.name)
        };
        self.record(call, verdict, started.elapsed(), &output);
        (verdict, output)
    }

    /// Appends the call, its verdict and its outcome to the audit log.
    pub fn record(&self, call: &ToolCall, verdict: Verdict, took: Duration, output: &ToolOutput) {
        if let Some(audit) = &self.audit {
            audit.append(&AuditRecord::new(self.mode, call, verdict, took, output));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(allow: &[&str], ask: &[&str], deny: &[&str]) -> Policy {
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect();
        Policy {
            allow: own(allow),
            ask: own(ask),
            deny: own(deny),
        }
    }

    #[test]
    fn policy_defaults_and_precedence() {
        use Decision::*;
        let cases = [
            (policy(&[], &[], &[]), "write", true, Ask),
            (policy(&[], &[], &[]), "read", false, Allow),
            (policy(&["all"], &[], &[]), "bash", true, Allow),
            (policy(&["all"], &[], &["bash"]), "bash", true, Deny),
            (policy(&["all"], &[], &["bash"]), "write", true, Allow),
            (policy(&["*"], &["web*"], &[]), "webfetch", false, Ask),
            (policy(&["read", "grep"], &[], &[]), "Write", true, Ask),
            (policy(&["[rw]*"], &[], &[]), "WRITE", true, Allow),
            (policy(&[], &[], &["*"]), "read", false, Deny),
        ];
        for (p, tool, side, expected) in cases {
            assert_eq!(p.decide(tool, side), expected, "{p:?} {tool} {side}");
        }
    }

    #[test]
    fn answers_parse() {
        assert_eq!(Answer::parse("allow"), Some(Answer::Allow));
        assert_eq!(Answer::parse(" Y "), Some(Answer::Allow));
        assert_eq!(Answer::parse("always"), Some(Answer::Always));
        assert_eq!(Answer::parse("deny"), Some(Answer::Deny));
        assert_eq!(Answer::parse("approved"), None);
    }

    fn call(name: &str) -> ToolCall {
        ToolCall {
            id: "c".into(),
            name: name.into(),
            arguments: json!({"approved": true}),
        }
    }

    /// Runs `check` on a thread; the front-end side answers with `answer` (or not at all).
    fn gate_with(answer: Option<Answer>, timeout: Duration) -> (Gate, Vec<Verdict>) {
        let mut gate = Gate::new(
            Policy::default(),
            Box::new(ChannelApprover::new(timeout)),
            "test",
        );
        let approvals = gate.approvals().expect("a channel approver answers");
        let cancel = AtomicBool::new(false);
        let mut verdicts = Vec::new();
        for _ in 0..2 {
            let approvals = approvals.clone();
            let mut notify = move |event: Event| {
                if let (Event::ApprovalRequired(request), Some(answer)) = (event, answer) {
                    assert!(approvals.is_pending(&request.id));
                    assert_eq!(approvals.answer(&request.id, answer), Ok(()));
                    assert_eq!(approvals.answer(&request.id, answer), Err(UnknownApproval));
                }
            };
            verdicts.push(gate.check(&call("write"), true, &mut notify, &cancel));
        }
        (gate, verdicts)
    }

    #[test]
    fn channel_answers_become_verdicts() {
        let long = Duration::from_secs(30);
        let (_, v) = gate_with(Some(Answer::Allow), long);
        assert_eq!(v, [Verdict::allow(DecidedBy::User); 2]);
        let (_, v) = gate_with(Some(Answer::Deny), long);
        assert_eq!(v, [Verdict::deny(DecidedBy::User); 2]);
        let (_, v) = gate_with(Some(Answer::Always), long);
        assert_eq!(
            v,
            [
                Verdict::allow(DecidedBy::User),
                Verdict::allow(DecidedBy::Session)
            ]
        );
        let (_, v) = gate_with(None, Duration::from_millis(1));
        assert_eq!(v, [Verdict::deny(DecidedBy::Timeout); 2]);
    }

    #[test]
    fn headless_refuses_what_needs_asking_and_allows_reads() {
        let mut gate = Gate::headless();
        let cancel = AtomicBool::new(false);
        let mut notify = |_: Event| panic!("headless never asks");
        let verdict = gate.check(&call("write"), true, &mut notify, &cancel);
        assert_eq!(verdict, Verdict::deny(DecidedBy::NoApprover));
        assert!(verdict.refusal("write").content.contains("--approve write"));
        let verdict = gate.check(&call("read"), false, &mut notify, &cancel);
        assert_eq!(verdict, Verdict::allow(DecidedBy::Policy));
    }

    #[test]
    fn cancel_ends_the_wait() {
        let mut gate = Gate::new(
            Policy::default(),
            Box::new(ChannelApprover::new(Duration::from_secs(60))),
            "test",
        );
        let cancel = AtomicBool::new(true);
        let verdict = gate.check(&call("bash"), true, &mut |_| {}, &cancel);
        assert_eq!(verdict, Verdict::deny(DecidedBy::Cancelled));
    }
}

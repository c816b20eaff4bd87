//! When the model leaves memory: `--sleep-idle-seconds N`, llama-server's sleep on
//! idle, and Ollama's `keep_alive`.
//!
//! The generation thread keeps an [`IdleTimer`]. Whenever it has nothing to do it
//! waits on the job channel until the timer's deadline (`recv_deadline`, no
//! polling); a deadline that passes with no job and no busy slot ends the
//! worker's `serve`, and `run_worker` drops the worker (context, draft context,
//! sampling helper), the draft model and the model, marks [`Residency`] asleep
//! and blocks on the channel. The next job that needs the model loads all of it
//! again with the same settings, then runs; one that cannot load it is answered
//! with the error and the thread sleeps on. Warm-up hints and keep-alives are
//! dropped while asleep: neither needs the model.
//!
//! The limit is the server's own (`--sleep-idle-seconds`, else none) after every
//! job, as Ollama applies its default to a request without `keep_alive`; a
//! keep-alive job (Ollama's `keep_alive`, sent when its request is done) sets it
//! for the idle time that follows, `Some(0)` sleeping at once. Each load starts a
//! new timer: the job that wakes the model sets the limit anew anyway.
//!
//! [`Residency`] is what other threads read without a job: whether the model is
//! asleep (`/props`' `is_sleeping`) and when it leaves memory (`/api/ps`'
//! `expires_at`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// `limit_ms` when the model stays.
const NEVER: u64 = u64::MAX;
/// `idle_since_ms` while the worker works.
const BUSY: u64 = 0;

/// How the generation thread's serving of one load of the model ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Served {
    /// Every handle is gone (or the first load failed): the thread ends.
    Closed,
    /// The idle limit passed: the model is to leave memory.
    Idle,
    /// The model could not be loaded again for the job that woke it; it sleeps on.
    Refused,
}

/// The model's state as other threads see it, written by the generation thread.
#[derive(Debug)]
pub struct Residency {
    asleep: AtomicBool,
    /// The idle limit in force, in milliseconds ([`NEVER`]: none).
    limit_ms: AtomicU64,
    /// Since when the worker has had nothing to do, in Unix milliseconds
    /// ([`BUSY`]: it is working).
    idle_since_ms: AtomicU64,
}

impl Default for Residency {
    fn default() -> Self {
        Residency {
            asleep: AtomicBool::new(false),
            limit_ms: AtomicU64::new(NEVER),
            idle_since_ms: AtomicU64::new(BUSY),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(NEVER - 1)
}

fn unix_ms(at: SystemTime) -> u64 {
    // 0 is BUSY: a clock before 1970 still reads as idle.
    millis(at.duration_since(UNIX_EPOCH).unwrap_or_default()).max(1)
}

impl Residency {
    /// Whether the model is out of memory, waiting for a job to load it again.
    pub fn is_asleep(&self) -> bool {
        self.asleep.load(Ordering::Acquire)
    }

    /// When the model leaves memory if no job comes, as of `now`: `None` when it
    /// stays (no limit); while a job runs, `now` plus the limit, the earliest it
    /// could.
    pub fn expires_at(&self, now: SystemTime) -> Option<SystemTime> {
        let limit = match self.limit_ms.load(Ordering::Acquire) {
            NEVER => return None,
            ms => Duration::from_millis(ms),
        };
        let since = match self.idle_since_ms.load(Ordering::Acquire) {
            BUSY => now,
            ms => UNIX_EPOCH + Duration::from_millis(ms),
        };
        since.checked_add(limit)
    }

    pub(super) fn set_asleep(&self, asleep: bool) {
        self.asleep.store(asleep, Ordering::Release);
    }
}

/// The generation thread's idle clock (see the module docs).
#[derive(Debug)]
pub(super) struct IdleTimer {
    /// `--sleep-idle-seconds`; `None`: the model stays.
    default: Option<Duration>,
    /// The limit for the idle time now counting.
    limit: Option<Duration>,
    /// When the worker last worked or took a job.
    since: Instant,
    residency: Arc<Residency>,
}

impl IdleTimer {
    pub(super) fn new(default: Option<Duration>, residency: Arc<Residency>) -> IdleTimer {
        let timer = IdleTimer {
            default,
            limit: default,
            since: Instant::now(),
            residency,
        };
        timer.publish_limit();
        timer
    }

    /// When the model is to leave memory, if nothing comes before.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.since.checked_add(self.limit?)
    }

    /// Whether the deadline has passed at `now`.
    pub(super) fn due(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|deadline| now >= deadline)
    }

    /// A job that needs the model: the server's own limit again (a request
    /// without Ollama's `keep_alive`), counted once it is done.
    pub(super) fn job(&mut self) {
        self.limit = self.default;
        self.publish_limit();
    }

    /// Ollama's `keep_alive` of a request just done: `None` keeps the model
    /// until another limit is set; idleness counts from now.
    pub(super) fn keep(&mut self, limit: Option<Duration>) {
        self.limit = limit;
        self.publish_limit();
        self.idle();
    }

    /// The worker has nothing to do from now on.
    pub(super) fn idle(&mut self) {
        self.since = Instant::now();
        let ms = unix_ms(SystemTime::now());
        self.residency.idle_since_ms.store(ms, Ordering::Release);
    }

    /// The worker works (a request, an embedding, a slot action).
    pub(super) fn busy(&self) {
        self.residency.idle_since_ms.store(BUSY, Ordering::Release);
    }

    fn publish_limit(&self) {
        let ms = self.limit.map_or(NEVER, millis);
        self.residency.limit_ms.store(ms, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timer(default: Option<Duration>) -> (IdleTimer, Arc<Residency>) {
        let residency = Arc::new(Residency::default());
        (IdleTimer::new(default, Arc::clone(&residency)), residency)
    }

    #[test]
    fn without_a_limit_the_model_never_leaves() {
        let (mut timer, residency) = timer(None);
        timer.idle();
        assert_eq!(timer.deadline(), None);
        assert!(!timer.due(Instant::now() + Duration::from_secs(86_400)));
        assert_eq!(residency.expires_at(SystemTime::now()), None);
    }

    #[test]
    fn idleness_counts_from_the_last_work_under_the_limit() {
        let limit = Duration::from_secs(5);
        let (mut timer, residency) = timer(Some(limit));
        timer.idle();
        let since = timer.since;
        assert_eq!(timer.deadline(), Some(since + limit));
        assert!(!timer.due(since + limit - Duration::from_millis(1)));
        assert!(timer.due(since + limit));
        // Published for /api/ps: idle since about now, plus the limit.
        let now = SystemTime::now();
        let expires = residency.expires_at(now).unwrap();
        let ahead = expires.duration_since(now).unwrap_or_default();
        assert!(
            ahead <= limit && ahead > limit - Duration::from_secs(1),
            "{ahead:?}"
        );
        // While busy, the earliest is the limit from now, whatever the clock says.
        timer.busy();
        let later = now + Duration::from_secs(60);
        assert_eq!(residency.expires_at(later), Some(later + limit));
    }

    #[test]
    fn a_keep_alive_holds_for_the_idle_time_after_it_and_a_job_restores_the_default() {
        let default = Duration::from_secs(300);
        let (mut timer, residency) = timer(Some(default));
        // keep_alive 0: due at once.
        timer.keep(Some(Duration::ZERO));
        assert!(timer.due(Instant::now()));
        // keep_alive -1: never, whatever the server's default.
        timer.keep(None);
        assert_eq!(timer.deadline(), None);
        assert_eq!(residency.expires_at(SystemTime::now()), None);
        // The next request without keep_alive brings the server's limit back.
        timer.job();
        timer.idle();
        assert_eq!(timer.deadline(), Some(timer.since + default));
        assert!(residency.expires_at(SystemTime::now()).is_some());
    }

    #[test]
    fn asleep_is_published() {
        let residency = Residency::default();
        assert!(!residency.is_asleep());
        residency.set_asleep(true);
        assert!(residency.is_asleep());
    }
}

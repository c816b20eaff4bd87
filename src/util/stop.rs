//! The emergency stop: one shared registry of everything that can be told to stop.
//!
//! Agents register their cancel flag (the agent checks it at every token and
//! between tools, and `bash` kills its process group when it is set); direct
//! tool calls register their own flag for the duration of the call; a server
//! may register a closure (the CLI server empties its queue). [`StopRegistry::stop_all`]
//! runs every live entry. Entries are held weakly, so whatever drops its
//! [`StopGuard`] (or its flag) leaves the registry without unregistering by hand.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

type Stopper = dyn Fn() + Send + Sync;

/// Shared by every server thread; cloning shares the same registry.
#[derive(Clone, Default)]
pub struct StopRegistry {
    entries: Arc<Mutex<Vec<Weak<Stopper>>>>,
}

/// Keeps an entry registered; dropping it removes the entry.
#[must_use = "the entry is removed when the guard is dropped"]
pub struct StopGuard {
    _stopper: Arc<Stopper>,
}

impl StopRegistry {
    pub fn new() -> StopRegistry {
        StopRegistry::default()
    }

    /// Registers a cancel flag: stopping sets it.
    pub fn register_flag(&self, flag: Arc<AtomicBool>) -> StopGuard {
        self.register(move || flag.store(true, Ordering::SeqCst))
    }

    /// Registers an action run on every stop.
    pub fn register(&self, stop: impl Fn() + Send + Sync + 'static) -> StopGuard {
        let stopper: Arc<Stopper> = Arc::new(stop);
        let mut entries = crate::util::sync::lock(&self.entries);
        entries.retain(|w| w.strong_count() > 0);
        entries.push(Arc::downgrade(&stopper));
        StopGuard { _stopper: stopper }
    }

    /// Stops everything registered; returns how many entries were told to stop.
    pub fn stop_all(&self) -> usize {
        // Collect first so a stopper may itself use the registry.
        let live: Vec<Arc<Stopper>> = {
            let mut entries = crate::util::sync::lock(&self.entries);
            entries.retain(|w| w.strong_count() > 0);
            entries.iter().filter_map(Weak::upgrade).collect()
        };
        for stop in &live {
            stop();
        }
        live.len()
    }

    /// Entries currently registered (tests watch a call register itself).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        let entries = crate::util::sync::lock(&self.entries);
        entries.iter().filter(|w| w.strong_count() > 0).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    #[test]
    fn stop_all_reaches_live_entries_only() {
        let registry = StopRegistry::new();
        let a = Arc::new(AtomicBool::new(false));
        let b = Arc::new(AtomicBool::new(false));
        let calls = Arc::new(AtomicUsize::new(0));
        let guard_a = registry.register_flag(a.clone());
        let guard_b = registry.register_flag(b.clone());
        let counter = calls.clone();
        let guard_c = registry.register(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        });
        drop(guard_b);
        assert_eq!(registry.len(), 2);
        assert_eq!(registry.clone().stop_all(), 2);
        assert!(a.load(Ordering::SeqCst));
        assert!(
            !b.load(Ordering::SeqCst),
            "an unregistered flag is left alone"
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        drop((guard_a, guard_c));
        assert_eq!(registry.stop_all(), 0);
    }
}

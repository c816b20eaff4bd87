//! Broadcasting to observers: the `Hub` numbers every event and fans it out
//! to the `/updates` observers, dropping one that falls too far behind.

use std::sync::{Arc, Mutex, MutexGuard};

use crossbeam_channel::{Receiver, Sender, TrySendError};

use crate::core::Event;

use super::wire::{wire_event, WireLine};

struct Observer {
    tx: Sender<Arc<str>>,
}

#[derive(Default)]
struct HubState {
    seq: u64,
    next_client: u64,
    observers: Vec<Observer>,
}

/// Numbers every event and fans it out to the observers.
pub(super) struct Hub {
    state: Mutex<HubState>,
    buffer: usize,
}

impl Hub {
    pub(super) fn new(buffer: usize) -> Hub {
        Hub {
            state: Mutex::new(HubState::default()),
            buffer,
        }
    }

    fn lock(&self) -> MutexGuard<'_, HubState> {
        crate::util::sync::lock(&self.state)
    }

    /// A new observer: its id, the last sequence number so far, and its feed.
    pub(super) fn subscribe(&self) -> (u64, u64, Receiver<Arc<str>>) {
        let (tx, rx) = crossbeam_channel::bounded(self.buffer);
        let mut state = self.lock();
        state.next_client += 1;
        state.observers.push(Observer { tx });
        (state.next_client, state.seq, rx)
    }

    /// Numbers and serialises `event` once and sends it to every observer;
    /// returns the line for the request's own client (`None` for an event the
    /// stream does not carry). Numbering and sending happen under one lock so
    /// every observer sees the same order.
    pub(super) fn publish(&self, request_id: u64, event: &Event) -> Option<Arc<str>> {
        let event = wire_event(event)?;
        let mut state = self.lock();
        state.seq += 1;
        let line = WireLine {
            seq: state.seq,
            request_id,
            event,
        };
        let line: Arc<str> = serde_json::to_string(&line).unwrap_or_default().into();
        state
            .observers
            .retain(|observer| match observer.tx.try_send(line.clone()) {
                Ok(()) => true,
                // Too slow (see the module docs) or gone: drop it.
                Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => false,
            });
        Some(line)
    }

    pub(super) fn observers(&self) -> usize {
        self.lock().observers.len()
    }
}

//! The accept loop every TCP server of shepherd's shares (the HTTP servers and
//! the tool server): it survives every `accept()` error, backing off on resource
//! exhaustion (EMFILE) instead of spinning or dying, and holds the connection cap.
//!
//! At the cap the oldest connection that has not yet shown it is a real client
//! (still reading its HTTP request; not yet authenticated on the tool server)
//! is shut down to make room, so connections that trickle bytes (slow-loris)
//! cannot lock out a client that speaks at once, and a connection past that
//! point never gives way. Only when none is left to evict does a newcomer get
//! the server's "busy" answer. [`DeadlineReader`] puts an absolute deadline on
//! such a connection's reads, however slowly its bytes arrive.
//!
//! Every accepted socket gets `TCP_NODELAY`: an answer is written whole, so
//! Nagle's algorithm only ever holds back its last segment until the client's
//! delayed ACK (40 ms on Linux), on every request of a kept-alive connection.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Accepts connections on `listener` forever: each one within the cap of `max`
/// goes to `admitted` with its place (held until the [`Place`] is dropped) and the
/// cap it may register with ([`ConnectionCap::reading`]); one over it to `busy`.
pub(in crate::frontend) fn run(
    listener: &TcpListener,
    max: usize,
    admitted: impl FnMut(TcpStream, SocketAddr, Place, &Arc<ConnectionCap>),
    busy: impl FnMut(TcpStream),
) {
    run_capped(
        listener,
        &Arc::new(ConnectionCap::default()),
        max,
        admitted,
        busy,
    );
}

/// [`run`] under a `cap` shared with other listeners of the same server, so
/// that the cap holds for them together.
pub(in crate::frontend) fn run_capped(
    listener: &TcpListener,
    cap: &Arc<ConnectionCap>,
    max: usize,
    mut admitted: impl FnMut(TcpStream, SocketAddr, Place, &Arc<ConnectionCap>),
    mut busy: impl FnMut(TcpStream),
) {
    let mut backoff = AcceptBackoff::default();
    loop {
        match listener.accept() {
            Ok((stream, peer)) => {
                backoff.reset();
                // Best effort: a socket that refuses it still works, only slower.
                let _ = stream.set_nodelay(true);
                match cap.admit(max) {
                    Some(place) => admitted(stream, peer, place, cap),
                    None => busy(stream),
                }
            }
            Err(error) => backoff.wait(&error),
        }
    }
}

/// A `Read` over a socket that gives up at an absolute deadline, however slowly
/// the bytes trickle in; without a deadline, the socket's own read timeout holds.
pub(in crate::frontend) struct DeadlineReader<'a> {
    pub(in crate::frontend) stream: &'a TcpStream,
    pub(in crate::frontend) deadline: Option<Instant>,
}

impl Read for DeadlineReader<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if let Some(deadline) = self.deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.stream.set_read_timeout(Some(left))?;
        }
        (&*self.stream).read(buf)
    }
}

/// The connection cap, and the connections still reading their request,
/// oldest first. At the cap the oldest of those is shut down to make room:
/// idle half-sent requests (slow-loris) cannot lock out a client that sends
/// its request at once, and a connection past its head never gives way.
#[derive(Default)]
pub(in crate::frontend) struct ConnectionCap {
    active: AtomicUsize,
    readers: Mutex<Readers>,
}

#[derive(Default)]
struct Readers {
    next_id: u64,
    queue: VecDeque<(u64, Arc<TcpStream>)>,
}

impl ConnectionCap {
    /// A place for a new connection: a free one, or one an evicted reader is
    /// giving back. At most `max / 8 + 1` evicted threads may still be
    /// winding down; past that (or with no reader to evict) the answer is no.
    pub(in crate::frontend) fn admit(self: &Arc<Self>, max: usize) -> Option<Place> {
        let count = self.active.fetch_add(1, Ordering::SeqCst);
        let place = Place(self.clone());
        let admitted = count < max || (count < max + max / 8 + 1 && self.evict_oldest());
        admitted.then_some(place)
    }

    fn evict_oldest(&self) -> bool {
        let victim = self.lock_readers().queue.pop_front();
        victim.is_some_and(|(_, stream)| {
            let _ = stream.shutdown(Shutdown::Both);
            true
        })
    }

    /// Registers a connection that starts reading its request.
    pub(in crate::frontend) fn reading(self: &Arc<Self>, stream: Arc<TcpStream>) -> Reading {
        let mut readers = self.lock_readers();
        let id = readers.next_id;
        readers.next_id += 1;
        readers.queue.push_back((id, stream));
        Reading {
            cap: self.clone(),
            id,
        }
    }

    fn lock_readers(&self) -> std::sync::MutexGuard<'_, Readers> {
        crate::util::sync::lock(&self.readers)
    }
}

/// One place of the connection cap, given back when dropped.
pub(in crate::frontend) struct Place(Arc<ConnectionCap>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A connection still reading its request (evictable); dropped once the
/// request is read.
pub(in crate::frontend) struct Reading {
    cap: Arc<ConnectionCap>,
    id: u64,
}

impl Drop for Reading {
    fn drop(&mut self) {
        let id = self.id;
        self.cap
            .lock_readers()
            .queue
            .retain(|(other, _)| *other != id);
    }
}

/// Waits after a failed `accept()`: out of descriptors or memory, retrying at
/// once would spin, and giving up would take the server down for good.
#[derive(Default)]
struct AcceptBackoff {
    delay_ms: u64,
}

impl AcceptBackoff {
    fn reset(&mut self) {
        self.delay_ms = 0;
    }

    fn wait(&mut self, error: &io::Error) {
        if matches!(
            error.kind(),
            io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted
        ) {
            return;
        }
        self.delay_ms = (self.delay_ms * 2).clamp(10, 1000);
        eprintln!(
            "shepherd: accept failed ({error}); retrying in {} ms",
            self.delay_ms
        );
        std::thread::sleep(Duration::from_millis(self.delay_ms));
    }
}

//! The cap on open connections, shared by every port of the process (they share its
//! file descriptors), and the counters that say what happened to connections.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

/// Open connections and their cap, plus counters for `/metrics`.
#[derive(Debug)]
pub struct Connections {
    /// Most connections open at once; one more is closed as soon as it is accepted.
    max: usize,
    /// Connections open now (holding a [`Permit`]).
    open: AtomicUsize,
    /// Connections closed at once because `max` were open.
    refused: AtomicU64,
    /// Connections closed because nothing happened on them for the idle timeout.
    idle_closed: AtomicU64,
    /// Connections closed because they reached the maximum age.
    aged_out: AtomicU64,
    /// Accepts that failed because the process or system ran out of file descriptors.
    descriptor_shortages: AtomicU64,
    /// TLS handshakes that failed (no or a refused client certificate, junk, timeouts).
    tls_failures: AtomicU64,
}

impl Connections {
    /// A cap of `max` open connections (at least 1).
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Self {
            max: max.max(1),
            open: AtomicUsize::new(0),
            refused: AtomicU64::new(0),
            idle_closed: AtomicU64::new(0),
            aged_out: AtomicU64::new(0),
            descriptor_shortages: AtomicU64::new(0),
            tls_failures: AtomicU64::new(0),
        })
    }

    /// A permit for one more connection, or `None` (counted as refused) at the cap.
    pub(crate) fn admit(self: &Arc<Self>) -> Option<Permit> {
        let admitted = self
            .open
            .fetch_update(Relaxed, Relaxed, |open| {
                (open < self.max).then_some(open + 1)
            })
            .is_ok();
        if admitted {
            Some(Permit(self.clone()))
        } else {
            self.refused.fetch_add(1, Relaxed);
            None
        }
    }

    /// The cap.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.open.load(Relaxed)
    }

    /// Connections refused at the cap so far.
    pub fn refused(&self) -> u64 {
        self.refused.load(Relaxed)
    }

    /// Connections closed as idle so far.
    pub fn idle_closed(&self) -> u64 {
        self.idle_closed.load(Relaxed)
    }

    /// Connections closed at their maximum age so far.
    pub fn aged_out(&self) -> u64 {
        self.aged_out.load(Relaxed)
    }

    /// Accepts that failed for want of file descriptors so far.
    pub fn descriptor_shortages(&self) -> u64 {
        self.descriptor_shortages.load(Relaxed)
    }

    /// Failed TLS handshakes so far.
    pub fn tls_failures(&self) -> u64 {
        self.tls_failures.load(Relaxed)
    }

    pub(crate) fn count_idle_close(&self) {
        self.idle_closed.fetch_add(1, Relaxed);
    }

    pub(crate) fn count_aged_out(&self) {
        self.aged_out.fetch_add(1, Relaxed);
    }

    pub(crate) fn count_descriptor_shortage(&self) {
        self.descriptor_shortages.fetch_add(1, Relaxed);
    }

    pub(crate) fn count_tls_failure(&self) {
        self.tls_failures.fetch_add(1, Relaxed);
    }
}

/// One open connection's place under the cap; given back when dropped.
#[derive(Debug)]
pub(crate) struct Permit(
    /// The counters whose `open` count includes this connection.
    Arc<Connections>,
);

impl Permit {
    /// The counters this permit belongs to.
    pub(crate) fn connections(&self) -> &Connections {
        &self.0
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_refuses_and_counts_then_frees_on_drop() {
        let connections = Connections::new(2);
        let a = connections.admit().expect("first");
        let _b = connections.admit().expect("second");
        assert!(connections.admit().is_none());
        assert_eq!((connections.open(), connections.refused()), (2, 1));
        drop(a);
        assert!(connections.admit().is_some());
    }
}

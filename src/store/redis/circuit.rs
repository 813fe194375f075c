//! Whether requests may ask one Redis node, and the reason when they may not.
//!
//! A circuit opens on any failure of the node (a connection that cannot be made or
//! breaks, a timeout, any error reply but `NOSCRIPT`); requests for that node's slots then
//! go straight to the failure policy, and one probe at a time writes a short-lived key
//! until the node takes writes again, which closes it. Opening and closing are logged, at
//! most once per [`LOG_EVERY`] each, so that a flapping node cannot flood the log.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{info, warn};

use super::FailurePolicy;

/// Least time between two log lines of the same kind for one node.
pub(crate) const LOG_EVERY: Duration = Duration::from_secs(10);

/// One node's circuit; see the module docs.
#[derive(Debug)]
pub(crate) struct Circuit {
    /// Closed: requests ask the node.
    up: AtomicBool,
    /// A probe (while open) or a background check (while closed) is running.
    probing: AtomicBool,
    /// Why the node last failed, for answers, health and logs.
    reason: Mutex<String>,
    opened_log: LogLimit,
    closed_log: LogLimit,
}

/// A rate limit on one kind of log line.
#[derive(Debug, Default)]
struct LogLimit {
    /// When the last line was written (`None`: never).
    last: Mutex<Option<tokio::time::Instant>>,
    /// Lines held back since then.
    suppressed: AtomicU64,
}

impl LogLimit {
    /// Whether to write a line now; if so, how many were held back before it.
    fn admit(&self) -> Option<u64> {
        let now = tokio::time::Instant::now();
        let mut last = self.last.lock();
        match *last {
            Some(at) if now.duration_since(at) < LOG_EVERY => {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                None
            }
            _ => {
                *last = Some(now);
                Some(self.suppressed.swap(0, Ordering::Relaxed))
            }
        }
    }
}

impl Circuit {
    /// A closed circuit: a node is assumed to decide until it fails.
    pub(crate) fn new() -> Self {
        Self {
            up: AtomicBool::new(true),
            probing: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
            opened_log: LogLimit::default(),
            closed_log: LogLimit::default(),
        }
    }

    /// Whether requests may ask the node.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// Why the node last failed.
    pub(crate) fn reason(&self) -> String {
        self.reason.lock().clone()
    }

    /// Records a failure while the circuit stays as it is (a probe failing again).
    pub(crate) fn set_reason(&self, reason: &str) {
        *self.reason.lock() = reason.to_string();
    }

    /// Opens the circuit of `node` because of `reason`; logs (rate-limited) when it was
    /// closed.
    pub(crate) fn open(&self, node: &str, reason: &str, policy: FailurePolicy) {
        self.set_reason(reason);
        if self.up.swap(false, Ordering::AcqRel)
            && let Some(suppressed) = self.opened_log.admit()
        {
            warn!(
                node,
                error = reason,
                ?policy,
                suppressed,
                "Redis cannot decide; its requests follow the failure policy until a probe write succeeds"
            );
        }
    }

    /// Closes the circuit of `node` (a probe write succeeded); logs (rate-limited) when it
    /// was open.
    pub(crate) fn close(&self, node: &str) {
        if !self.up.swap(true, Ordering::AcqRel)
            && let Some(suppressed) = self.closed_log.admit()
        {
            info!(node, suppressed, "Redis decides again");
        }
    }

    /// Claims the right to run the one probe or check of this node.
    pub(crate) fn start_probe(&self) -> bool {
        !self.probing.swap(true, Ordering::AcqRel)
    }

    /// Gives the right back.
    pub(crate) fn end_probe(&self) {
        self.probing.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn log_lines_are_rate_limited_and_count_what_they_held_back() {
        let limit = LogLimit::default();
        assert_eq!(limit.admit(), Some(0));
        for _ in 0..5 {
            assert_eq!(limit.admit(), None);
        }
        tokio::time::advance(LOG_EVERY).await;
        assert_eq!(limit.admit(), Some(5));
        assert_eq!(limit.admit(), None);
    }

    #[test]
    fn a_circuit_opens_with_its_reason_and_closes() {
        let circuit = Circuit::new();
        assert!(circuit.is_up());
        circuit.open("n", "OOM command not allowed", FailurePolicy::Error);
        assert!(!circuit.is_up());
        assert_eq!(circuit.reason(), "OOM command not allowed");
        assert!(circuit.start_probe());
        assert!(!circuit.start_probe(), "one probe at a time");
        circuit.end_probe();
        circuit.close("n");
        assert!(circuit.is_up());
    }
}

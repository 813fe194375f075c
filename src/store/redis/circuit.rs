//! Whether requests may ask one Redis node, and the reason when they may not.
//!
//! A circuit opens on any failure of the node (a connection that cannot be made or
//! breaks, a timeout, any error reply but `NOSCRIPT`); requests for that node's slots then
//! go straight to the failure policy, and one probe at a time writes a short-lived key
//! until the node takes writes again, which closes it. Opening and closing are logged, at
//! most once per [`LOG_EVERY`] each, so that a flapping node cannot flood the log.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{info, warn};

use super::FailurePolicy;
use crate::throttle::Throttle;

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
    /// Throttles the "cannot decide" lines.
    opened_log: Throttle,
    /// Throttles the "decides again" lines.
    closed_log: Throttle,
}

impl Circuit {
    /// A closed circuit: a node is assumed to decide until it fails.
    pub(crate) fn new() -> Self {
        Self {
            up: AtomicBool::new(true),
            probing: AtomicBool::new(false),
            reason: Mutex::new(String::new()),
            opened_log: Throttle::new(LOG_EVERY),
            closed_log: Throttle::new(LOG_EVERY),
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
            && let Some(suppressed) = self.opened_log.allow()
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
            && let Some(suppressed) = self.closed_log.allow()
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

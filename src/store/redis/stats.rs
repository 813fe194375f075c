//! Where the store's decisions were made, and the script calls that made Redis' ones,
//! counted for metrics.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Counts of where decisions were made; for metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RedisStats {
    /// Requests answered from the over-limit cache.
    pub over_limit_hits: u64,
    /// Requests answered from leased tokens.
    pub lease_hits: u64,
    /// Requests sent to Redis (cache misses).
    pub misses: u64,
    /// Requests Redis failed to decide.
    pub errors: u64,
    /// Requests answered by the failure policy.
    pub fallbacks: u64,
    /// Script calls that decided requests (each one batch: [`super::call_queue`]), failed ones
    /// included.
    pub calls: u64,
    /// Requests those calls carried: divided by `calls`, how much batching there is.
    pub call_requests: u64,
    /// Time those calls took, each from its start to its answer or failure, summed in
    /// nanoseconds: divided by `calls`, the mean call, of which the network's round trip
    /// and Redis' time are parts.
    pub call_nanos: u64,
}

impl RedisStats {
    /// [`RedisStats::call_nanos`] in seconds, as metrics and the operator page show it.
    pub fn call_seconds(&self) -> f64 {
        self.call_nanos as f64 / 1e9
    }
}

/// The live counters behind [`RedisStats`], one per field, each counted where its event
/// happens. Relaxed: they are read only for metrics, never to decide.
#[derive(Debug, Default)]
pub(super) struct Counters {
    /// See [`RedisStats::over_limit_hits`].
    pub(super) over_limit_hits: AtomicU64,
    /// See [`RedisStats::lease_hits`].
    pub(super) lease_hits: AtomicU64,
    /// See [`RedisStats::misses`].
    pub(super) misses: AtomicU64,
    /// See [`RedisStats::errors`].
    pub(super) errors: AtomicU64,
    /// See [`RedisStats::fallbacks`].
    pub(super) fallbacks: AtomicU64,
    /// See [`RedisStats::calls`].
    calls: AtomicU64,
    /// See [`RedisStats::call_requests`].
    call_requests: AtomicU64,
    /// See [`RedisStats::call_nanos`].
    call_nanos: AtomicU64,
}

/// Adds one to `counter`.
pub(super) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// A script call carrying `requests` ended (answered or failed) after `took`.
    pub(super) fn call_ended(&self, requests: usize, took: Duration) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.call_requests
            .fetch_add(requests as u64, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.call_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counts now.
    pub(super) fn snapshot(&self) -> RedisStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RedisStats {
            over_limit_hits: read(&self.over_limit_hits),
            lease_hits: read(&self.lease_hits),
            misses: read(&self.misses),
            errors: read(&self.errors),
            fallbacks: read(&self.fallbacks),
            calls: read(&self.calls),
            call_requests: read(&self.call_requests),
            call_nanos: read(&self.call_nanos),
        }
    }
}

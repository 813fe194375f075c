//! Where the store's decisions were made, counted for metrics.

use std::sync::atomic::{AtomicU64, Ordering};

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
}

/// Adds one to `counter`.
pub(super) fn count(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

impl Counters {
    /// The counts now.
    pub(super) fn snapshot(&self) -> RedisStats {
        let read = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RedisStats {
            over_limit_hits: read(&self.over_limit_hits),
            lease_hits: read(&self.lease_hits),
            misses: read(&self.misses),
            errors: read(&self.errors),
            fallbacks: read(&self.fallbacks),
        }
    }
}

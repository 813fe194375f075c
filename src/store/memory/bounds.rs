//! The embedded store's size: its bounds, what it holds, and what it evicted.
//!
//! Counts are atomics shared by all shards, changed when a bucket is created or removed
//! (never on a hit) and read by the metrics at scrape time, so the store depends on no
//! metrics code.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use tracing::warn;

use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::defaults;

/// Highest bucket bound: a shard's slots are numbered in 32 bits, and the store never
/// holds more buckets than its bound (but for those being created at the same moment).
pub(super) const MAX_BUCKETS_LIMIT: u64 = 1 << 31;

/// Shortest time between two warnings about weakened limits.
const WARN_EVERY: Nanos = 10 * NANOS_PER_SEC;

/// How much the embedded store may hold; the least recently used buckets are evicted
/// beyond either bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Most buckets held (taken as at least 1 and at most 2^31).
    pub buckets: u64,
    /// Most bytes held: a fixed size per bucket, plus the limits of a `rate_limits` list.
    pub bytes: u64,
}

impl Default for Bounds {
    fn default() -> Self {
        Self {
            buckets: defaults::MAX_BUCKETS,
            bytes: defaults::MAX_STORE_BYTES,
        }
    }
}

/// The embedded store's counters, as [`super::MemoryStore::stats`] reads them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Buckets held.
    pub buckets: u64,
    /// Bytes they count for.
    pub bytes: u64,
    /// Buckets evicted to respect a bound (`meshlimit_store_evictions_total`).
    pub evictions: u64,
    /// Of those, buckets that were not full again: each restarted a caller's limit from
    /// full (`meshlimit_store_evictions_weakened_total`).
    pub evictions_weakened: u64,
    /// Holds and concurrency slots in force (`meshlimit_store_holds`).
    pub holds: u64,
    /// Holds released unsettled after their TTL (`meshlimit_store_holds_expired_total`).
    pub holds_expired: u64,
}

/// What the store holds and has evicted. On cache lines of its own: its counters change
/// with every creation, and must not evict the store's read-only fields from other cores.
#[derive(Debug)]
#[repr(align(128))]
pub(super) struct Usage {
    /// The bounds to keep.
    pub(super) bounds: Bounds,
    /// Buckets ever created: the recency stamp of a bucket is this count when it was
    /// last used. Changes only on creation, so a hit reads it from a shared cache line.
    creations: AtomicU64,
    /// Buckets held.
    buckets: AtomicU64,
    /// Bytes held.
    bytes: AtomicU64,
    /// See [`MemoryStats::evictions`].
    evictions: AtomicU64,
    /// See [`MemoryStats::evictions_weakened`].
    weakened: AtomicU64,
    /// Weakening evictions not yet reported in a warning.
    unreported: AtomicU64,
    /// When the last warning was logged (store clock), 0 for never.
    warned_at: AtomicU64,
    /// See [`MemoryStats::holds`].
    holds: AtomicU64,
    /// See [`MemoryStats::holds_expired`].
    holds_expired: AtomicU64,
}

impl Usage {
    /// Nothing held yet, within `bounds` (see [`Bounds::buckets`] for its range).
    pub(super) fn new(bounds: Bounds) -> Self {
        Self {
            bounds: Bounds {
                buckets: bounds.buckets.clamp(1, MAX_BUCKETS_LIMIT),
                bytes: bounds.bytes,
            },
            creations: AtomicU64::new(0),
            buckets: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
            weakened: AtomicU64::new(0),
            unreported: AtomicU64::new(0),
            warned_at: AtomicU64::new(0),
            holds: AtomicU64::new(0),
            holds_expired: AtomicU64::new(0),
        }
    }

    /// The creation count now: the stamp of a bucket being used.
    pub(super) fn current(&self) -> u64 {
        self.creations.load(Relaxed)
    }

    /// Counts a bucket created with `bytes`; returns its stamp.
    pub(super) fn created(&self, bytes: u64) -> u64 {
        self.buckets.fetch_add(1, Relaxed);
        self.bytes.fetch_add(bytes, Relaxed);
        self.creations.fetch_add(1, Relaxed) + 1
    }

    /// Counts `bytes` added to a bucket held (a limit of a list seen for the first time).
    pub(super) fn grew(&self, bytes: u64) {
        self.bytes.fetch_add(bytes, Relaxed);
    }

    /// Counts the ledger's holds now (`count`), and `expired` more released unsettled.
    pub(super) fn holds_now(&self, count: u64, expired: u64) {
        self.holds.store(count, Relaxed);
        if expired > 0 {
            self.holds_expired.fetch_add(expired, Relaxed);
        }
    }

    /// Counts `bytes` of holds taken (positive) or given up (negative): they count
    /// towards the byte bound, not as buckets.
    pub(super) fn holds_changed(&self, bytes: i64) {
        if bytes >= 0 {
            self.bytes.fetch_add(bytes.unsigned_abs(), Relaxed);
        } else {
            self.bytes.fetch_sub(bytes.unsigned_abs(), Relaxed);
        }
    }

    /// Counts a bucket of `bytes` gone.
    pub(super) fn removed(&self, bytes: u64) {
        self.buckets.fetch_sub(1, Relaxed);
        self.bytes.fetch_sub(bytes, Relaxed);
    }

    /// Whether a bound is exceeded.
    pub(super) fn over(&self) -> bool {
        self.buckets.load(Relaxed) > self.bounds.buckets
            || self.bytes.load(Relaxed) > self.bounds.bytes
    }

    /// Counts an eviction at `now`; one that `weakened` a limit is also logged, at most one
    /// line every ten seconds with the count since the last line.
    pub(super) fn evicted(&self, weakened: bool, now: Nanos) {
        self.evictions.fetch_add(1, Relaxed);
        if weakened {
            self.weakened.fetch_add(1, Relaxed);
            self.unreported.fetch_add(1, Relaxed);
            self.report(now);
        }
    }

    /// Logs weakening evictions not reported yet, unless a line was logged in the last ten
    /// seconds. Called on each weakening eviction and by maintenance, so that the last
    /// ones of a burst are reported too.
    pub(super) fn report(&self, now: Nanos) {
        let last = self.warned_at.load(Relaxed);
        // `abs_diff`: a wall clock stepped back must not silence the warning.
        if self.unreported.load(Relaxed) == 0
            || (last != 0 && now.abs_diff(last) < WARN_EVERY)
            || self
                .warned_at
                .compare_exchange(last, now.max(1), Relaxed, Relaxed)
                .is_err()
        {
            return;
        }
        let evicted = self.unreported.swap(0, Relaxed);
        warn!(
            evicted,
            max_buckets = self.bounds.buckets,
            max_store_bytes = self.bounds.bytes,
            "store full: evicted buckets still in use, so their callers' limits restarted from full; raise --max-buckets or --max-store-bytes"
        );
    }

    /// The counters now.
    pub(super) fn stats(&self) -> MemoryStats {
        MemoryStats {
            buckets: self.buckets.load(Relaxed),
            bytes: self.bytes.load(Relaxed),
            evictions: self.evictions.load(Relaxed),
            evictions_weakened: self.weakened.load(Relaxed),
            holds: self.holds.load(Relaxed),
            holds_expired: self.holds_expired.load(Relaxed),
        }
    }
}

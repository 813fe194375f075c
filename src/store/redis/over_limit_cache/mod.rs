//! The over-limit cache: when Redis says a bucket cannot pass, its state is kept as a
//! snapshot taken at the moment the request was *sent*, and later requests run
//! [`limiter::step`] on it. Redis' state can only have less refill than the snapshot assumes
//! and more consumption (other replicas), so a request the snapshot refuses Redis would
//! refuse too; one it would admit goes to Redis.
//!
//! A sliding window is kept only while it refuses even one hit, and only until one hit
//! could pass: until then no replica can add to its counts, so the snapshot is exactly what
//! Redis holds. Every limit of a descriptor has a bucket key of its own, so each snapshot
//! lasts as long as its own limit refuses (a daily cap's snapshot ends when the day rolls,
//! whatever a per-second limit of the same descriptor says), and a request is refused here
//! only when every one of its checks is.
//!
//! Charges and refunds ([`Check::lands`]) are never answered here: they must reach Redis
//! and land there. Their reply replaces this replica's snapshot of the bucket (over: the
//! new state, with the exact time until one hit passes) or removes it (not over), so a
//! refund that lets the bucket pass is seen here at once, and a charge that puts it in
//! debt is refused here from then on. Only refunds break the argument above (they give
//! back what Redis holds), and only another replica's: a snapshot this replica keeps may
//! outlive a refund made through another replica until it expires, which is at most the
//! time until one hit could pass as of the snapshot, and never more than `--redis-cache-ttl-ms`
//! (`RedisOptions::cache_ttl`). Another replica's charges only add to what Redis holds, so
//! the snapshot then refuses less than Redis would, never more (a window's snapshot may
//! then report a count, and a wait, below Redis').
//!
//! Times are taken as the script reads the caller's clock ([`TimeSource::Caller`]), in
//! whole microseconds (whole quanta for token buckets): a snapshot never lasts past the
//! instant Redis would admit, not even by a fraction of a microsecond.
//!
//! [`TimeSource::Caller`]: super::TimeSource::Caller

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use foldhash::fast::RandomState;
use moka::ops::compute::Op;

use super::reply::{After, Outcome};
use crate::clock::Nanos;
use crate::limiter;
use crate::rules::Limit;
use crate::store::{Check, Reports};

mod snapshot;
#[cfg(test)]
mod tests;

use snapshot::{Snapshot, after_us, bucket_state};

/// Over-limit snapshots by bucket key (the bucket's text, as the embedded store keys it).
pub(super) struct OverLimitCache {
    /// The snapshots, each expiring when its bucket may pass again (or at `max_ttl`).
    entries: moka::sync::Cache<Arc<str>, Snapshot, RandomState>,
    /// Snapshots inserted and not yet removed (the cache's listener counts removals): 0
    /// when nothing is over, as under a load that never reaches its limits, which then
    /// skips the cache's lookups (two or three a request, a fifth of what the Redis
    /// store's own code costs a request there). Above the truth while an expired snapshot
    /// waits for upkeep, never below it.
    held: Arc<AtomicU64>,
    /// Longest a snapshot answers for its bucket (`RedisOptions::cache_ttl`): a bound on
    /// how long a replica trusts a state other replicas may have changed.
    max_ttl: Duration,
}

impl OverLimitCache {
    /// An empty cache of at most `capacity` snapshots, each kept at most `max_ttl`.
    pub(super) fn new(capacity: u64, max_ttl: Duration) -> Self {
        let held = Arc::new(AtomicU64::new(0));
        let removed = held.clone();
        Self {
            entries: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .expire_after(SnapshotExpiry)
                // Every removal: expired, evicted, replaced or invalidated.
                .eviction_listener(move |_, _, _| {
                    removed.fetch_sub(1, Ordering::Release);
                })
                .build_with_hasher(RandomState::default()),
            held,
            max_ttl,
        }
    }

    /// Whether no snapshot is kept, so no lookup can find one.
    fn holds_none(&self) -> bool {
        self.held.load(Ordering::Acquire) == 0
    }

    /// The reports for `checks` at `now` when a snapshot is sure that every one of them
    /// is over its limit; `None` as soon as one may pass, or lands (a charge or a refund
    /// must reach Redis).
    pub(super) fn refuse(&self, checks: &[Check<'_>], now: Nanos) -> Option<Reports> {
        if self.holds_none() {
            return None;
        }
        checks
            .iter()
            .map(|check| {
                if lands(check) {
                    return None;
                }
                self.entries
                    .get(check.key.as_str())
                    .and_then(|b| b.refuses(check, now))
            })
            .collect()
    }

    /// Keeps what Redis' `outcome` for `check` (sent at `now`) says of the future: an
    /// over-limit bucket stays over until it refills, a full fixed window until it ends, a
    /// sliding window refusing one hit until one could pass. A bucket Redis did not refuse
    /// is forgotten; a charge or refund's reply replaces what was kept, whatever it was.
    pub(super) fn learn(&self, check: &Check<'_>, outcome: &Outcome, now: Nanos) {
        if !outcome.over && !lands(check) {
            self.forget_if_passed_since(check, outcome, now);
            return;
        }
        match self.snapshot(check.limit, outcome, now) {
            Some(snapshot) => {
                // Counted before it is there: the count may be above the truth, never below.
                self.held.fetch_add(1, Ordering::Release);
                self.entries.insert(check.key.as_str().into(), snapshot);
            }
            // A charge or refund that leaves nothing to keep: what was kept no longer
            // stands (a refund gave back what it held).
            None if lands(check) && !self.holds_none() => {
                self.entries.invalidate(check.key.as_str());
            }
            None => {}
        }
    }

    /// What to keep of Redis' `outcome` under `limit` (sent at `now`): `None` when it is
    /// not sure to refuse anything.
    fn snapshot(&self, limit: Limit, outcome: &Outcome, now: Nanos) -> Option<Snapshot> {
        if !outcome.over {
            return None;
        }
        match outcome.after {
            After::TokenBucket { debt, .. } => {
                let state = bucket_state(&limit, debt, now);
                // A check of nothing needs one token, as one hit, and is never a charge.
                let one = limiter::step(Some(&state), &limit, 0, now);
                let ttl = if limit.requests_per_unit == 0 {
                    self.max_ttl
                } else {
                    Duration::from_nanos(one.unconsumed().1.reset).min(self.max_ttl)
                };
                (one.over() && !ttl.is_zero()).then_some(Snapshot::Bucket { limit, state, ttl })
            }
            // Only once over: from then on every hit, and every check, is over until the
            // window ends (at the limit exactly, a check still passes).
            After::FixedWindow { count, ends_in_us } if ends_in_us > 0 => Some(Snapshot::Window {
                limit,
                count,
                until: after_us(now, ends_in_us),
                ttl: Duration::from_micros(ends_in_us).min(self.max_ttl),
            }),
            After::FixedWindow { .. } => None,
            After::SlidingWindow {
                count,
                one_passes_in_us,
            } => self.sliding(limit, count, one_passes_in_us, now),
        }
    }

    /// Forgets the snapshot of `check`'s bucket when Redis' admission `passed` (sent at
    /// `now`) may have come after it: the snapshot missed the hits it took, so its reports
    /// would show room and waits the bucket no longer has (a check of more hits refused,
    /// then one that passed). A snapshot Redis decided *after* the admission is kept:
    /// concurrent requests' replies are read in any order, and dropping it would send
    /// every request for a bucket known to be over back to Redis.
    fn forget_if_passed_since(&self, check: &Check<'_>, passed: &Outcome, now: Nanos) {
        let key = check.key.as_str();
        // The common case, nothing kept, costs one lookup and no lock, or none at all.
        if self.holds_none() || !self.entries.contains_key(key) {
            return;
        }
        self.entries
            .entry(Arc::from(key))
            .and_compute_with(|kept| match kept {
                Some(kept) if !kept.value().decided_after(check, passed, now) => Op::Remove,
                _ => Op::Nop,
            });
    }

    /// The snapshot of a sliding window that Redis says refuses one hit for
    /// `one_passes_in_us` (0: one hit could pass, nothing to keep).
    fn sliding(
        &self,
        limit: Limit,
        count: u64,
        one_passes_in_us: u64,
        now: Nanos,
    ) -> Option<Snapshot> {
        if one_passes_in_us == 0 {
            return None;
        }
        let ttl = if limit.requests_per_unit == 0 {
            self.max_ttl // never passes
        } else {
            Duration::from_micros(one_passes_in_us).min(self.max_ttl)
        };
        Some(Snapshot::Sliding {
            limit,
            count,
            until: after_us(now, one_passes_in_us),
            ttl,
        })
    }

    /// Expiry and eviction upkeep; see [`super::RedisStore::maintain`].
    pub(super) fn run_pending_tasks(&self) {
        self.entries.run_pending_tasks();
    }
}

/// Whether `check` must reach Redis and its reply replace what is kept: a charge or a
/// refund ([`Check::lands`]), or a hold's (a reservation's hits, or a settle's, land as
/// charges do; a slot is never learnt, see `RedisStore::settle`).
fn lands(check: &Check<'_>) -> bool {
    check.lands() || check.hold.is_some()
}

impl OverLimitCache {
    /// Drops this replica's snapshot of bucket `key` (a reset).
    pub(super) fn forget(&self, key: &str) {
        self.entries.invalidate(key);
    }
}

/// Expires each snapshot after its own [`Snapshot::ttl`].
struct SnapshotExpiry;

impl moka::Expiry<Arc<str>, Snapshot> for SnapshotExpiry {
    fn expire_after_create(
        &self,
        _: &Arc<str>,
        value: &Snapshot,
        _: std::time::Instant,
    ) -> Option<Duration> {
        Some(value.ttl())
    }

    fn expire_after_update(
        &self,
        _: &Arc<str>,
        value: &Snapshot,
        _: std::time::Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.ttl())
    }
}

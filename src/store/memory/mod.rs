//! The embedded store: buckets in process memory, exact under concurrency, bounded in
//! buckets and bytes, least recently used evicted first.
//!
//! Buckets live in [`SHARDS`] shards, each a `parking_lot` mutex around a table of buckets
//! kept in recency order (see [`shard`]). A one-descriptor decision takes one lock, the
//! shard of its key; a request with several descriptors takes the locks of all its shards
//! (see [`many`]; a few descriptors on as many one-limit buckets, the commonest such
//! requests, skip its bookkeeping, see [`few`]). N concurrent requests against a limit L
//! let exactly L through, and a denied request takes no token from any bucket. The limits of a `rate_limits` list are
//! kept together in one bucket, under the descriptor's key (see [`cell`]): they are looked
//! up, aged and evicted together, and count as one bucket.
//!
//! # Bounds and eviction
//! The store holds at most [`Bounds::buckets`] buckets and [`Bounds::bytes`] bytes (a
//! fixed size per bucket: it keeps a 128-bit id, not its key, see [`bucket_id`]; plus the
//! limits of a list). A decision that creates a bucket beyond a bound then
//! evicts the least recently used bucket of the whole store, after releasing its own lock:
//! each shard publishes the stamp of its oldest bucket in an atomic, the evicting thread
//! picks the shard with the smallest and takes that bucket (see [`bounds`] for the stamps).
//! So a bucket is evicted only once `buckets` other buckets have been created or used since
//! its last use (buckets used between the same two creations count as equally recent):
//! one used at least once while fewer than `buckets` keys are created stays, whatever the
//! flood of one-off keys around it. Evicting a bucket that is
//! not full again forgets tokens its caller already took: the limit restarts from full for
//! that caller. Such evictions are counted apart and logged, at most one line every ten
//! seconds. Counts may pass a bound by the buckets being created at the same moment on
//! other threads, until their own evictions run.
//!
//! # Expiry
//! [`MemoryStore::maintain`] (about once a second) drops every bucket that is idle by the
//! store's clock: full again, or its window over (every limit of it, for a list). Such a bucket is indistinguishable from
//! no bucket at all, so dropping it loses nothing, and it is not counted as an eviction.
//! Slots freed by evictions and expiry are reused; the shards' tables do not shrink.

mod bounds;
mod bucket_id;
mod cell;
mod few;
mod holds;
mod listed;
mod many;
mod shard;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use parking_lot::Mutex;

use bounds::Usage;
pub use bounds::{Bounds, MemoryStats};
use bucket_id::{BucketId, IdHasher};
use shard::{Buckets, EMPTY};

use super::{Check, Reports};
use crate::bucket_key::BucketKey;
use crate::clock::{Clock, Nanos};
use crate::limiter::{self, Report};

/// Shards of the bucket table; a power of two, comfortably more than cores.
const SHARDS: usize = 256;

/// The embedded store. Cheap to clone; clones share the buckets.
#[derive(Clone)]
pub struct MemoryStore {
    /// What every clone shares.
    inner: Arc<Inner>,
}

/// The state behind a [`MemoryStore`].
struct Inner {
    /// The buckets, [`SHARDS`] locks' worth, a bucket's shard chosen by its id.
    shards: Box<[Shard]>,
    /// Each shard's oldest stamp ([`EMPTY`] when it holds nothing), written under the
    /// shard's lock when it changes. Packed in one array, apart from the shards, so that
    /// finding the oldest bucket of the store reads 32 cache lines and takes no lock.
    oldest: Box<[AtomicU64]>,
    /// Makes buckets' ids from their keys, once per decision, for both the shard and the
    /// lookup inside it. Randomly keyed, so that callers cannot choose keys that collide.
    ids: IdHasher,
    /// Bounds, counts and the creation counter.
    usage: Usage,
    /// The store's clock, for maintenance's "is it idle now" question.
    clock: Arc<dyn Clock>,
    /// Holds and concurrency slots, taken only by requests that have one (see [`holds`]).
    ledger: Mutex<holds::Ledger>,
}

/// One shard, alone on its cache lines so that cores working on different shards do not
/// slow each other down. A `parking_lot` mutex, not a read-write lock: every decision
/// writes, and the critical section is a lookup and a few arithmetic operations.
#[repr(align(128))]
struct Shard(
    /// The shard's buckets, in recency order.
    Mutex<Buckets>,
);

impl MemoryStore {
    /// A store holding at most `max_buckets` buckets and [`crate::defaults::MAX_STORE_BYTES`],
    /// reading idle-ness from `clock`.
    pub fn new(max_buckets: u64, clock: Arc<dyn Clock>) -> Self {
        let bounds = Bounds {
            buckets: max_buckets,
            ..Bounds::default()
        };
        Self::bounded(bounds, clock)
    }

    /// A store within `bounds`, reading idle-ness from `clock`.
    pub fn bounded(bounds: Bounds, clock: Arc<dyn Clock>) -> Self {
        let inner = Inner {
            shards: (0..SHARDS)
                .map(|_| Shard(Mutex::new(Buckets::new())))
                .collect(),
            oldest: (0..SHARDS).map(|_| AtomicU64::new(EMPTY)).collect(),
            ids: IdHasher::random(),
            usage: Usage::new(bounds),
            clock,
            ledger: Mutex::default(),
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// Number of buckets held.
    pub fn len(&self) -> usize {
        self.stats().buckets as usize
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bounds this store keeps.
    pub fn bounds(&self) -> Bounds {
        self.inner.usage.bounds
    }

    /// What the store holds and has evicted so far.
    pub fn stats(&self) -> MemoryStats {
        self.inner.usage.stats()
    }

    /// Drops idle buckets (see the module docs) and reports weakening evictions not logged
    /// yet. Locks one shard at a time.
    pub fn maintain(&self) {
        let inner = &*self.inner;
        let now = inner.clock.now();
        inner.expire_holds(now);
        for (index, shard) in inner.shards.iter().enumerate() {
            let mut buckets = shard.0.lock();
            if buckets.len() == 0 {
                continue;
            }
            let gone = buckets.remove_idle(|slot| slot.idle(now));
            inner.publish(index, &buckets);
            drop(buckets);
            for bucket in &gone {
                inner.usage.removed(bucket.bytes());
            }
        }
        inner.enforce_bounds(now);
        inner.usage.report(now);
    }

    /// Decides `checks` at `now`, all or nothing (see [`super::Store::check`]).
    pub fn check(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        if checks.iter().any(|c| c.hold.is_some()) {
            return self.inner.check_holding(checks, now);
        }
        match checks {
            [check] => smallvec::smallvec![self.inner.check_one(check, now)],
            _ if Inner::one_listed_descriptor(checks) => self.inner.check_listed(checks, now),
            _ => self
                .inner
                .check_few(checks, now)
                .unwrap_or_else(|| self.inner.check_many(checks, now)),
        }
    }

    /// See [`super::Store::held`].
    pub fn held(&self, key: &BucketKey<'_>, now: Nanos) -> super::Held {
        self.inner.held(key, now)
    }

    /// See [`super::Store::reset`]: the key's holds dropped, then its bucket's limit
    /// (every limit, for a list's) forgotten, so that it is full again.
    pub fn reset(&self, key: &BucketKey<'_>) -> bool {
        let inner = &*self.inner;
        let held = inner.drop_holds(key);
        let id = inner.id(key);
        let index = shard_index(id);
        let mut buckets = inner.shards[index].0.lock();
        let gone = buckets.forget(key, id);
        inner.publish(index, &buckets);
        drop(buckets);
        if let Some(bytes) = gone {
            inner.usage.removed(bytes);
        }
        held || gone.is_some()
    }

    /// What `check` would report at `now` for one more hit, changing nothing (a bucket
    /// that does not exist is full and stays absent; recency is not refreshed).
    pub fn peek(&self, check: &Check<'_>, now: Nanos) -> Report {
        if let Some(max) = check.hold.and_then(|h| h.slots) {
            return self.inner.peek_slots(&check.key, max, now);
        }
        if check.hold.is_some() {
            // What a reservation's bucket has, its expired holds given back first.
            self.inner.expire_holds(now);
        }
        let id = self.inner.id(&check.key);
        let buckets = self.inner.shards[shard_index(id)].0.lock();
        let state = buckets.lookup(&check.key, id);
        drop(buckets);
        limiter::step(state.as_ref(), &check.limit, 0, now)
            .unconsumed()
            .1
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("bounds", &self.bounds())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

impl Inner {
    /// One descriptor: one lock, held for the lookup and the arithmetic.
    fn check_one(&self, check: &Check<'_>, now: Nanos) -> Report {
        let id = self.id(&check.key);
        let index = shard_index(id);
        let mut buckets = self.shards[index].0.lock();
        let touched = buckets.touch(&check.key, id, self.usage.current(), |bytes| {
            self.usage.created(bytes)
        });
        let kept = buckets.kept_mut(touched.place);
        let step = check.step(kept.state.as_ref(), now);
        let denied = limiter::request_denied([(0, check.mode, step.over())]);
        let (state, report) = step.settle(denied);
        kept.keep(Some(state), &check.limit);
        if touched.reordered {
            self.publish(index, &buckets);
        }
        drop(buckets);
        self.grown(touched.created, touched.grown, now);
        report
    }

    /// The id of `key`'s bucket: of its descriptor's key, which a list's limits share (see
    /// [`cell`]). It places the bucket in a shard and in the shard's table.
    fn id(&self, key: &BucketKey<'_>) -> BucketId {
        self.ids.id(key.descriptor_part())
    }

    /// After a decision that `created` a bucket or added `grown` bytes of listed limits to
    /// one: the bounds, kept.
    fn grown(&self, created: bool, grown: u64, now: Nanos) {
        if grown > 0 {
            self.usage.grew(grown);
        }
        if created || grown > 0 {
            self.enforce_bounds(now);
        }
    }

    /// Makes shard `index`'s oldest stamp visible to evicting threads; called with its
    /// lock held after every change of its recency order. Writes only a changed stamp, so
    /// the array stays in every core's cache.
    fn publish(&self, index: usize, buckets: &Buckets) {
        let stamp = buckets.oldest_stamp();
        let published = &self.oldest[index];
        if published.load(Relaxed) != stamp {
            published.store(stamp, Relaxed);
        }
    }

    /// Evicts least recently used buckets while a bound is exceeded. Called with no shard
    /// lock held: it takes the lock of whichever shard holds the oldest bucket.
    fn enforce_bounds(&self, now: Nanos) {
        while self.usage.over() {
            if !self.evict_oldest(now) {
                break;
            }
        }
    }

    /// Evicts the store's least recently used bucket; false if none was found.
    fn evict_oldest(&self, now: Nanos) -> bool {
        for attempt in 0..4 {
            let Some((index, seen)) = self.oldest_shard() else {
                return false;
            };
            let mut buckets = self.shards[index].0.lock();
            // Used since the scan: another shard may hold the oldest bucket now. After a
            // few tries under heavy churn, a bucket nearly as old will do.
            if buckets.oldest_stamp() > seen && attempt < 3 {
                continue;
            }
            let Some(gone) = buckets.pop_oldest() else {
                continue;
            };
            self.publish(index, &buckets);
            drop(buckets);
            self.usage.removed(gone.bytes());
            self.usage.evicted(gone.weakens(now), now);
            return true;
        }
        false
    }

    /// The shard whose oldest bucket is the store's oldest, and that bucket's stamp.
    fn oldest_shard(&self) -> Option<(usize, u64)> {
        let (stamp, index) = self
            .oldest
            .iter()
            .enumerate()
            .map(|(index, stamp)| (stamp.load(Relaxed), index))
            .min()?;
        (stamp != EMPTY).then_some((index, stamp))
    }
}

/// The shard of a bucket: bits 48 to 55 of its id's `low` half. The table inside a shard
/// finds buckets by that half's low bits and filters candidates by its top seven, so
/// neither may be constant in a shard.
fn shard_index(id: BucketId) -> usize {
    (id.low >> 48) as usize % SHARDS
}

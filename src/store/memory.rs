//! The embedded store: buckets in process memory, exact under concurrency, bounded in size.
//!
//! Buckets live in a table split into [`SHARDS`] shards, each a `parking_lot` mutex around a
//! hash table whose entries *are* the bucket states. A decision takes one lock: the shard
//! of its key (two atomic operations in all, the least a shared exact decision can cost).
//! A request with several descriptors locks the shards of all its keys in shard order, so
//! two requests can never deadlock, evaluates every descriptor, decides, and writes back:
//! N concurrent requests against a limit L let exactly L through, and a denied request
//! takes no token from any bucket.
//!
//! Lifetime is moka's job: every bucket is registered in a `moka` cache with a per-entry
//! expiry and a maximum entry count, and moka's eviction listener removes it from the table.
//! moka's own bookkeeping costs a few hundred nanoseconds per access, several times the
//! decision itself, so a bucket refreshes its registration at most once per [`REFRESH`] of
//! its own clock instead of on every hit. A registration lives for the time an emptied
//! bucket needs to refill plus two refresh periods, so when it expires the bucket is full
//! again and dropping it loses nothing. The listener checks that under the shard lock (the
//! clock may be a test's manual one) and keeps a bucket that is not idle yet, marking it for
//! re-registration on its next use. Only eviction for size, when more than the maximum
//! number of buckets are in use, forgets state that still mattered: the price of the bound.
//!
//! moka may run the listener on any thread that calls it, and the listener takes a shard
//! lock; so moka is only ever called with no shard lock held.

use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use foldhash::fast::RandomState;
use hashbrown::HashTable;
use moka::notification::RemovalCause;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use super::{Check, Reports};
use crate::clock::{Clock, Nanos};
use crate::limiter::{self, Report, State, Step};
use crate::rules::{Algorithm, Limit};

/// How often, at most, a bucket in use refreshes its moka registration.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// Shards of the bucket table; a power of two, comfortably more than cores.
const SHARDS: usize = 256;

/// The embedded store. Cheap to clone; clones share the buckets.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    shards: Box<[Shard]>,
    hasher: RandomState,
    /// Key → registration, for expiry and the size bound only.
    lifetimes: moka::sync::Cache<Arc<str>, Registration, RandomState>,
    /// The store's clock, for the listener's "is it idle now" question.
    clock: Arc<dyn Clock>,
}

/// One shard, alone on its cache lines so that cores working on different shards do not
/// slow each other down. A `parking_lot` mutex, not a read-write lock: every decision
/// writes, and the critical section is a lookup and a few arithmetic operations.
#[repr(align(128))]
struct Shard(Mutex<HashTable<Entry>>);

struct Entry {
    key: Arc<str>,
    hash: u64,
    state: Option<State>,
    /// `requests_per_unit` of the last limit applied, to know when the bucket is idle.
    requests_per_unit: u32,
    /// When this bucket last refreshed its registration (store clock).
    touched: Nanos,
    /// Currently registered in moka: false for a new bucket, or after its registration
    /// expired while it was still busy.
    registered: bool,
    /// Bumped on every registration, so that the listener ignores stale ones.
    generation: u64,
}

#[derive(Clone)]
struct Registration {
    generation: u64,
    ttl: Duration,
}

/// What a decision leaves to do once its locks are released.
enum FollowUp {
    Register(Arc<str>, Registration),
    Refresh(Arc<str>, Duration),
}

struct Lifetime;

impl moka::Expiry<Arc<str>, Registration> for Lifetime {
    fn expire_after_create(
        &self,
        _: &Arc<str>,
        reg: &Registration,
        _: std::time::Instant,
    ) -> Option<Duration> {
        Some(reg.ttl)
    }

    fn expire_after_read(
        &self,
        _: &Arc<str>,
        reg: &Registration,
        _: std::time::Instant,
        _: Option<Duration>,
        _: std::time::Instant,
    ) -> Option<Duration> {
        Some(reg.ttl)
    }

    fn expire_after_update(
        &self,
        _: &Arc<str>,
        reg: &Registration,
        _: std::time::Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(reg.ttl)
    }
}

impl MemoryStore {
    /// A store holding at most `max_buckets` buckets, reading idle-ness from `clock`.
    pub fn new(max_buckets: u64, clock: Arc<dyn Clock>) -> Self {
        let inner = Arc::new_cyclic(|weak: &std::sync::Weak<Inner>| {
            let weak = weak.clone();
            let lifetimes = moka::sync::Cache::builder()
                .max_capacity(max_buckets)
                .expire_after(Lifetime)
                .eviction_listener(move |key: Arc<Arc<str>>, reg: Registration, cause| {
                    if let Some(inner) = weak.upgrade() {
                        inner.on_removed(&key, &reg, cause);
                    }
                })
                .build_with_hasher(RandomState::default());
            Inner {
                shards: (0..SHARDS)
                    .map(|_| Shard(Mutex::new(HashTable::new())))
                    .collect(),
                hasher: RandomState::default(),
                lifetimes,
                clock,
            }
        });
        Self { inner }
    }

    /// Number of buckets held.
    pub fn len(&self) -> usize {
        self.inner.shards.iter().map(|s| s.0.lock().len()).sum()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Lets moka expire and evict now rather than on its next write.
    pub fn maintain(&self) {
        self.inner.lifetimes.run_pending_tasks();
    }

    /// Decides `checks` at `now`, all or nothing (see [`super::Store::check`]).
    pub fn check(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        let inner = &*self.inner;
        let [check] = checks else {
            return inner.check_many(checks, now);
        };
        let hash = inner.hasher.hash_one(check.key);
        let mut table = inner.shard(hash).lock();
        let entry = entry(&mut table, check.key, hash, now);
        let step = limiter::step(entry.state.as_ref(), &check.limit, check.hits, now);
        let denied = limiter::request_denied([(check.mode, step.over())]);
        let (report, follow_up) = entry.keep(step.settle(denied), check, now);
        drop(table);
        if let Some(follow_up) = follow_up {
            inner.follow_up(follow_up);
        }
        smallvec::smallvec![report]
    }

    /// What `check` would report at `now` for one more hit, changing nothing (a bucket
    /// that does not exist is full and stays absent).
    pub fn peek(&self, check: &Check<'_>, now: Nanos) -> Report {
        let hash = self.inner.hasher.hash_one(check.key);
        let table = self.inner.shard(hash).lock();
        let state = table
            .find(hash, |e| e.hash == hash && *e.key == *check.key)
            .and_then(|e| e.state);
        drop(table);
        limiter::step(state.as_ref(), &check.limit, 0, now)
            .unconsumed()
            .1
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("buckets", &self.len())
            .finish_non_exhaustive()
    }
}

/// The entry for `key` in a locked shard, created empty (a full bucket) if missing.
fn entry<'t>(table: &'t mut HashTable<Entry>, key: &str, hash: u64, now: Nanos) -> &'t mut Entry {
    // `find_entry` rather than `entry`: a hit, the common case, then prepares no vacant slot.
    match table.find_entry(hash, |e| e.hash == hash && *e.key == *key) {
        Ok(found) => found.into_mut(),
        Err(absent) => absent
            .into_table()
            .insert_unique(
                hash,
                Entry {
                    key: Arc::from(key),
                    hash,
                    state: None,
                    requests_per_unit: 0,
                    touched: now,
                    registered: false,
                    generation: 0,
                },
                |e| e.hash,
            )
            .into_mut(),
    }
}

impl Entry {
    /// Stores the outcome of a decision; returns its report and any moka work now due
    /// for this bucket.
    fn keep(
        &mut self,
        (state, report): (State, Report),
        check: &Check<'_>,
        now: Nanos,
    ) -> (Report, Option<FollowUp>) {
        self.state = Some(state);
        self.requests_per_unit = check.limit.requests_per_unit;
        if !self.registered {
            let ttl = registration_ttl(&check.limit);
            self.registered = true;
            self.generation += 1;
            self.touched = now;
            let registration = Registration {
                generation: self.generation,
                ttl,
            };
            return (
                report,
                Some(FollowUp::Register(self.key.clone(), registration)),
            );
        } else if now.saturating_sub(self.touched) > REFRESH.as_nanos() as u64 {
            self.touched = now;
            let ttl = registration_ttl(&check.limit);
            return (report, Some(FollowUp::Refresh(self.key.clone(), ttl)));
        }
        (report, None)
    }
}

impl Inner {
    fn shard(&self, hash: u64) -> &Mutex<HashTable<Entry>> {
        &self.shards[shard_index(hash)].0
    }

    /// Several descriptors: all their shards locked in shard order, then two passes.
    fn check_many(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        let mut follow_ups: SmallVec<[FollowUp; 4]> = SmallVec::new();
        let hashes: SmallVec<[u64; 4]> =
            checks.iter().map(|c| self.hasher.hash_one(c.key)).collect();
        let mut order: SmallVec<[usize; 4]> = hashes.iter().map(|&h| shard_index(h)).collect();
        order.sort_unstable();
        order.dedup();
        let mut guards: SmallVec<[MutexGuard<'_, HashTable<Entry>>; 4]> =
            order.iter().map(|&s| self.shards[s].0.lock()).collect();
        let guard_of = |hash: u64| {
            order
                .iter()
                .position(|&s| s == shard_index(hash))
                .unwrap_or(0)
        };
        // The same key twice in one request is one bucket: `first[i]` is the first check
        // with check i's key, and holds the bucket's evolving state.
        let first: SmallVec<[usize; 4]> = (0..checks.len())
            .map(|i| {
                (0..=i)
                    .find(|&j| checks[j].key == checks[i].key)
                    .unwrap_or(i)
            })
            .collect();
        let mut states: SmallVec<[Option<State>; 4]> = SmallVec::new();
        for (check, &hash) in checks.iter().zip(&hashes) {
            let table = &mut guards[guard_of(hash)];
            states.push(entry(table, check.key, hash, now).state);
        }
        let stored = states.clone();

        // Pass 1: as if the request passes, each check seeing the hits of earlier checks on
        // the same bucket.
        let mut steps: SmallVec<[Step; 4]> = SmallVec::with_capacity(checks.len());
        for (i, check) in checks.iter().enumerate() {
            let step = limiter::step(states[first[i]].as_ref(), &check.limit, check.hits, now);
            states[first[i]] = Some(step.consumed().0);
            steps.push(step);
        }
        let denied =
            limiter::request_denied(checks.iter().zip(&steps).map(|(c, s)| (c.mode, s.over())));

        // Pass 2: settle. A denied request replays without consumption (needed only when
        // a bucket repeats); each check keeps its pass-1 verdict, which decided the request.
        let mut reports = Reports::with_capacity(checks.len());
        if denied {
            states = stored;
            for (i, check) in checks.iter().enumerate() {
                let step = limiter::step(states[first[i]].as_ref(), &check.limit, check.hits, now);
                let (state, report) = step.unconsumed();
                states[first[i]] = Some(state);
                reports.push(Report {
                    over: steps[i].over(),
                    ..report
                });
            }
        } else {
            reports.extend(steps.iter().map(|s| s.consumed().1));
        }
        for (i, (check, &hash)) in checks.iter().zip(&hashes).enumerate() {
            if let (true, Some(state)) = (first[i] == i, states[i]) {
                let table = &mut guards[guard_of(hash)];
                let kept = entry(table, check.key, hash, now).keep((state, reports[i]), check, now);
                follow_ups.extend(kept.1);
            }
        }
        drop(guards);
        for follow_up in follow_ups {
            self.follow_up(follow_up);
        }
        reports
    }

    /// moka work after the locks are released.
    fn follow_up(&self, follow_up: FollowUp) {
        match follow_up {
            FollowUp::Register(key, registration) => self.lifetimes.insert(key, registration),
            FollowUp::Refresh(key, ttl) => {
                if self.lifetimes.get(&key).is_none() {
                    // The registration expired, and the listener kept the busy bucket (or
                    // has yet to run): register it again.
                    let hash = self.hasher.hash_one(&*key);
                    let registration = {
                        let mut table = self.shard(hash).lock();
                        let Some(entry) = table.find_mut(hash, |e| e.key == key) else {
                            return;
                        };
                        entry.generation += 1;
                        entry.registered = true;
                        Registration {
                            generation: entry.generation,
                            ttl,
                        }
                    };
                    self.lifetimes.insert(key, registration);
                }
            }
        }
    }

    fn on_removed(&self, key: &Arc<str>, reg: &Registration, cause: RemovalCause) {
        let hash = self.hasher.hash_one(&**key);
        let mut table = self.shard(hash).lock();
        let Ok(found) = table.find_entry(hash, |e| e.key == *key) else {
            return;
        };
        let entry = found.get();
        if entry.generation != reg.generation {
            return; // registered again since
        }
        let forget = match cause {
            RemovalCause::Size => true,
            RemovalCause::Expired => entry
                .state
                .is_none_or(|s| s.idle_in(self.clock.now(), entry.requests_per_unit) == 0),
            RemovalCause::Explicit | RemovalCause::Replaced => false,
        };
        if forget {
            found.remove();
        } else {
            found.into_mut().registered = false;
        }
    }
}

/// The shard of a key's hash. The table inside a shard uses the hash's low bits; the shard
/// is picked by the high ones.
fn shard_index(hash: u64) -> usize {
    (hash >> 56) as usize % SHARDS
}

/// How long a registration lives: the time an emptied bucket needs to be full again (or a
/// window to pass), plus two refresh periods.
fn registration_ttl(limit: &Limit) -> Duration {
    let unit = Duration::from_nanos(limit.unit.nanos());
    let refill = match limit.algorithm {
        Algorithm::FixedWindow => unit,
        Algorithm::TokenBucket if limit.requests_per_unit == 0 => unit,
        Algorithm::TokenBucket => {
            unit.mul_f64(f64::from(limit.burst) / f64::from(limit.requests_per_unit))
                + Duration::from_millis(1)
        }
    };
    refill + 2 * REFRESH
}

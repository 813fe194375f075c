//! The embedded store: buckets in process memory, exact under concurrency, bounded in size.
//!
//! Buckets live in a sharded map (`DashMap`) of `Arc<Bucket>`, each bucket behind its own
//! mutex. A request locks the buckets of all its descriptors in address order (so two
//! requests can never deadlock), steps them, decides, and writes back: N concurrent
//! requests against a limit L let exactly L through.
//!
//! Lifetime is moka's job: every bucket is registered in a `moka` cache with a per-entry
//! expiry and a maximum entry count, and moka's eviction listener removes it from the map.
//! moka's own bookkeeping costs a few hundred nanoseconds per access, several times the
//! decision itself, so a bucket refreshes its registration at most once per
//! [`REFRESH`] of its own clock instead of on every hit. The registration's time to live is
//! the time an emptied bucket needs to refill plus two refresh periods, so when it expires
//! the bucket is full again: dropping it loses nothing. The listener checks that under the
//! bucket's lock (the clock may be a test's manual one) and keeps any bucket that is not
//! idle yet, marking it for re-registration. A removed bucket is marked retired under its
//! lock, so a request that still holds it looks it up again instead of deciding on a
//! bucket no one else can see. Only eviction for size, when more than the maximum number
//! of buckets are active, forgets state that still mattered; that is the price of the bound.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;
use foldhash::fast::RandomState;
use moka::notification::RemovalCause;
use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use super::{Check, Reports};
use crate::clock::{Clock, Nanos};
use crate::limiter::{self, State, Step};
use crate::rules::{Algorithm, Limit};

/// How often, at most, a bucket in use refreshes its moka registration.
pub(crate) const REFRESH: Duration = Duration::from_secs(1);

/// How many times a request retries after finding a bucket retired under it.
const RETRIES: usize = 3;

/// The embedded store. Cheap to clone; clones share the buckets.
#[derive(Clone)]
pub struct MemoryStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// Key → bucket. The decision path only reads it (one shard read lock, no moka).
    buckets: DashMap<Arc<str>, Arc<Bucket>, RandomState>,
    /// Key → registration, for expiry and the size bound only.
    lifetimes: moka::sync::Cache<Arc<str>, Registration, RandomState>,
    /// The store's clock, for the listener's "is it idle now" question.
    clock: Arc<dyn Clock>,
}

struct Bucket {
    /// A `parking_lot` mutex, not an atomic: a request must hold several buckets at once
    /// to take from all or none, and the critical section is a few arithmetic operations.
    slot: Mutex<Slot>,
    /// When this bucket last refreshed its registration (store clock); read lock-free.
    touched: AtomicU64,
}

#[derive(Default)]
struct Slot {
    state: Option<State>,
    /// `requests_per_unit` of the last limit applied, to know when the bucket is idle.
    requests_per_unit: u32,
    /// Removed from the map: whoever holds it must look the key up again.
    retired: bool,
    /// Currently registered in moka (false for a new bucket, or after its registration
    /// expired while it was still busy).
    registered: bool,
    /// Bumped on every registration, so that the listener ignores stale ones.
    generation: u64,
}

#[derive(Clone)]
struct Registration {
    bucket: Arc<Bucket>,
    generation: u64,
    ttl: Duration,
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
                buckets: DashMap::with_hasher(RandomState::default()),
                lifetimes,
                clock,
            }
        });
        Self { inner }
    }

    /// Number of buckets held.
    pub fn len(&self) -> usize {
        self.inner.buckets.len()
    }

    /// Whether no bucket is held.
    pub fn is_empty(&self) -> bool {
        self.inner.buckets.is_empty()
    }

    /// Lets moka expire and evict now rather than on its next write.
    pub fn maintain(&self) {
        self.inner.lifetimes.run_pending_tasks();
    }

    /// Decides `checks` at `now`, all or nothing (see [`super::Store::check`]).
    pub fn check(&self, checks: &[Check<'_>], now: Nanos) -> Reports {
        if let [check] = checks {
            return smallvec::smallvec![self.check_one(check, now)];
        }
        let inner = &*self.inner;
        let mut attempt = 0;
        loop {
            let buckets: SmallVec<[Arc<Bucket>; 4]> =
                checks.iter().map(|c| inner.bucket(c.key, now)).collect();
            let mut locked = Locked::new(&buckets);
            attempt += 1;
            if locked.any_retired() && attempt <= RETRIES {
                continue;
            }
            let reports = locked.decide(checks, now);
            let unregistered = locked.unregistered();
            drop(locked);
            for i in unregistered {
                inner.register(checks[i].key, &buckets[i], &checks[i].limit, now);
            }
            return reports;
        }
    }
}

impl MemoryStore {
    /// The common single-descriptor request: one bucket, one lock, no bookkeeping vectors.
    fn check_one(&self, check: &Check<'_>, now: Nanos) -> limiter::Report {
        let inner = &*self.inner;
        // Fastest path: a known, registered bucket that needs no moka refresh is decided
        // under the map's read guard. Safe from deadlock because nothing takes a shard lock
        // while holding a bucket's lock (the listener lets go of the bucket first).
        if let Some(entry) = inner.buckets.get(check.key) {
            if !entry.needs_refresh(now) {
                let mut slot = entry.slot.lock();
                if slot.registered && !slot.retired {
                    return slot.decide_alone(check, now);
                }
            }
        }
        let mut attempt = 0;
        loop {
            let bucket = inner.bucket(check.key, now);
            let mut slot = bucket.slot.lock();
            attempt += 1;
            if slot.retired && attempt <= RETRIES {
                continue;
            }
            let report = slot.decide_alone(check, now);
            let register = !slot.registered && !slot.retired;
            drop(slot);
            if register {
                inner.register(check.key, &bucket, &check.limit, now);
            }
            return report;
        }
    }
}

impl Bucket {
    fn needs_refresh(&self, now: Nanos) -> bool {
        now.saturating_sub(self.touched.load(Ordering::Relaxed)) > REFRESH.as_nanos() as u64
    }
}

impl Slot {
    /// Steps a request that has this one bucket only and keeps the outcome.
    fn decide_alone(&mut self, check: &Check<'_>, now: Nanos) -> limiter::Report {
        let step = limiter::step(self.state.as_ref(), &check.limit, check.hits, now);
        let denied = limiter::request_denied([(check.mode, step.over())]);
        let (state, report) = step.settle(denied);
        self.state = Some(state);
        self.requests_per_unit = check.limit.requests_per_unit;
        report
    }
}

impl std::fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryStore")
            .field("buckets", &self.len())
            .finish_non_exhaustive()
    }
}

impl Inner {
    fn bucket(&self, key: &str, now: Nanos) -> Arc<Bucket> {
        let bucket = match self.buckets.get(key) {
            Some(found) => Arc::clone(&found),
            None => Arc::clone(&self.buckets.entry(Arc::from(key)).or_insert_with(|| {
                Arc::new(Bucket {
                    slot: Mutex::new(Slot::default()),
                    touched: AtomicU64::new(now),
                })
            })),
        };
        // Refresh moka's view of a busy bucket now and then; never with a lock held, as
        // moka may run its listener on this thread.
        if bucket.needs_refresh(now) {
            bucket.touched.store(now, Ordering::Relaxed);
            if self.lifetimes.get(key).is_none() {
                bucket.slot.lock().registered = false;
            }
        }
        bucket
    }

    fn register(&self, key: &str, bucket: &Arc<Bucket>, limit: &Limit, now: Nanos) {
        let generation = {
            let mut slot = bucket.slot.lock();
            if slot.registered || slot.retired {
                return;
            }
            slot.registered = true;
            slot.generation += 1;
            slot.generation
        };
        bucket.touched.store(now, Ordering::Relaxed);
        let registration = Registration {
            bucket: Arc::clone(bucket),
            generation,
            ttl: refill_time(limit) + 2 * REFRESH,
        };
        self.lifetimes.insert(Arc::from(key), registration);
    }

    fn on_removed(&self, key: &str, reg: &Registration, cause: RemovalCause) {
        let mut slot = reg.bucket.slot.lock();
        if slot.generation != reg.generation || slot.retired {
            return; // re-registered since, or already gone
        }
        let forget = match cause {
            RemovalCause::Size => true,
            RemovalCause::Expired => slot
                .state
                .is_none_or(|s| s.idle_in(self.clock.now(), slot.requests_per_unit) == 0),
            RemovalCause::Explicit | RemovalCause::Replaced => false,
        };
        if !forget {
            slot.registered = false;
            return;
        }
        slot.retired = true;
        drop(slot);
        self.buckets
            .remove_if(key, |_, held| Arc::ptr_eq(held, &reg.bucket));
    }
}

/// Time for an emptied bucket to be full again (or a window to pass).
fn refill_time(limit: &Limit) -> Duration {
    let unit = Duration::from_nanos(limit.unit.nanos());
    match limit.algorithm {
        Algorithm::FixedWindow => unit,
        Algorithm::TokenBucket if limit.requests_per_unit == 0 => unit,
        Algorithm::TokenBucket => {
            unit.mul_f64(f64::from(limit.burst) / f64::from(limit.requests_per_unit))
                + Duration::from_millis(1)
        }
    }
}

/// The buckets of one request, each distinct one locked once, in address order.
struct Locked<'a> {
    guards: SmallVec<[MutexGuard<'a, Slot>; 4]>,
    /// For each check, the index of its bucket's guard.
    slot_of: SmallVec<[usize; 4]>,
    /// Whether two checks share a bucket (the same descriptor twice in one request).
    shared: bool,
}

impl<'a> Locked<'a> {
    fn new(buckets: &'a [Arc<Bucket>]) -> Self {
        let mut order: SmallVec<[usize; 4]> = (0..buckets.len()).collect();
        order.sort_unstable_by_key(|&i| Arc::as_ptr(&buckets[i]) as usize);
        let mut guards = SmallVec::new();
        let mut slot_of: SmallVec<[usize; 4]> = SmallVec::from_elem(0, buckets.len());
        let mut shared = false;
        let mut previous: Option<*const Bucket> = None;
        for i in order {
            let ptr = Arc::as_ptr(&buckets[i]);
            if previous == Some(ptr) {
                shared = true;
            } else {
                guards.push(buckets[i].slot.lock());
                previous = Some(ptr);
            }
            slot_of[i] = guards.len() - 1;
        }
        Self {
            guards,
            slot_of,
            shared,
        }
    }

    fn any_retired(&self) -> bool {
        self.guards.iter().any(|g| g.retired)
    }

    fn unregistered(&self) -> SmallVec<[usize; 4]> {
        let mut seen: SmallVec<[usize; 4]> = SmallVec::new();
        let mut out = SmallVec::new();
        for (i, &g) in self.slot_of.iter().enumerate() {
            if !self.guards[g].registered && !self.guards[g].retired && !seen.contains(&g) {
                seen.push(g);
                out.push(i);
            }
        }
        out
    }

    fn decide(&mut self, checks: &[Check<'_>], now: Nanos) -> Reports {
        // Pass 1: every check in request order, each seeing the hits of earlier checks on
        // the same bucket, as if the request passes.
        let mut tentative: SmallVec<[Option<State>; 4]> =
            self.guards.iter().map(|g| g.state).collect();
        let mut steps: SmallVec<[Step; 4]> = SmallVec::with_capacity(checks.len());
        for (check, &g) in checks.iter().zip(&self.slot_of) {
            let step = limiter::step(tentative[g].as_ref(), &check.limit, check.hits, now);
            tentative[g] = Some(step.consumed().0);
            steps.push(step);
        }
        let denied =
            limiter::request_denied(checks.iter().zip(&steps).map(|(c, s)| (c.mode, s.over())));
        let mut reports = Reports::with_capacity(checks.len());
        if !denied {
            reports.extend(steps.iter().map(|s| s.consumed().1));
        } else if !self.shared {
            for (step, &g) in steps.iter().zip(&self.slot_of) {
                tentative[g] = Some(step.unconsumed().0);
                reports.push(step.unconsumed().1);
            }
        } else {
            // Replay without consumption; keep each check's verdict from pass 1, which is
            // what decided the request.
            for (g, guard) in self.guards.iter().enumerate() {
                tentative[g] = guard.state;
            }
            for ((check, &g), first) in checks.iter().zip(&self.slot_of).zip(&steps) {
                let step = limiter::step(tentative[g].as_ref(), &check.limit, check.hits, now);
                tentative[g] = Some(step.unconsumed().0);
                reports.push(limiter::Report {
                    over: first.over(),
                    ..step.unconsumed().1
                });
            }
        }
        for (check, &g) in checks.iter().zip(&self.slot_of) {
            self.guards[g].requests_per_unit = check.limit.requests_per_unit;
        }
        for (guard, state) in self.guards.iter_mut().zip(tentative) {
            guard.state = state;
        }
        reports
    }
}

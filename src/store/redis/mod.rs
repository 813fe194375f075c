//! The Redis store: one limit shared by every replica.
//!
//! Every request that needs Redis is one `EVALSHA` of [`decide.lua`](./decide.lua), which
//! decides all its limited descriptors atomically with the same two-pass rule as the
//! embedded store, on Redis' own clock (`TIME`), so replicas' clocks never matter.
//! Concurrent requests share one multiplexed connection per node and are pipelined on it.
//!
//! Each node (the one server, or each Cluster master) has a circuit ([`circuit`]): any
//! failure (unreachable, a timeout, any error reply but `NOSCRIPT`) opens it, its requests
//! then follow the failure policy at once, and a probe write closes it again ([`health`]).
//! A Cluster is routed here, by slot, so that a dead master fails only its own slots
//! ([`cluster`]).
//!
//! Keys are `ml1:{<domain>}<bucket>`: a versioned prefix, then the domain as the Cluster
//! hash tag, so every key of one request (they share the domain) lives in one slot while
//! different domains spread over the nodes. Every key carries a TTL: the time until its
//! bucket would be full again, or its window's end.
//!
//! Two caches in front answer what they safely can without Redis:
//! - over-limit (always on): when Redis says a bucket cannot pass, its state is kept as a
//!   snapshot taken at the moment the request was *sent*, and later requests run
//!   [`limiter::step`] on it. Redis' state can only have less refill than the snapshot
//!   assumes and more consumption (other replicas), so a request the snapshot refuses
//!   Redis would refuse too; one it would admit goes to Redis.
//! - leases (opt-in, [`RedisOptions::lease`]): a replica takes up to N whole tokens of a
//!   token bucket beyond a request's own, when the bucket holds them, and spends them
//!   locally until they run out or their TTL ends (unused ones then expire). One top-up
//!   per bucket at a time, started in the background once half the lease is spent;
//!   requests finding it empty meanwhile wait for it rather than race it to Redis.
//!
//! Token-bucket arithmetic in Lua runs on doubles, exact below 2^53: [`Scale`] expresses
//! a limit in integers (microsecond quanta, a token reduced by the gcd of unit and rate)
//! that stay below that for any practical limit.

mod circuit;
mod cluster;
mod conn;
mod health;
mod node;
pub mod reply;
mod script;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use foldhash::fast::RandomState;

pub use conn::UrlError;
use conn::{Backend, Target};
use reply::{CheckReply, Reply};
use script::Failure;

use super::{Bounds, Check, MemoryStore, Reports};
use crate::bucket_key::BucketKey;
use crate::clock::{Clock, Nanos};
use crate::error::{StoreError, StoreErrorKind};
use crate::limiter::{self, Report, State};
use crate::rules::{Algorithm, Limit, Mode};

const SCRIPT: &str = include_str!("decide.lua");

/// What to answer when Redis cannot decide (down, or slower than the timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// gRPC `UNAVAILABLE`, so that Envoy's `failure_mode_deny` decides.
    Error,
    /// OK for every descriptor.
    Allow,
    /// Each replica decides alone with an embedded store until Redis is back.
    Local,
}

/// Where the scripts read the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// Redis' own clock (`TIME` in the script): the only choice for a real deployment.
    Redis,
    /// The `now` the caller passes: for tests that drive a manual clock against a real
    /// Redis.
    Caller,
}

/// How to reach Redis and how to use it. `Debug` shows the URL without its password.
#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://`, `rediss://`, `unix://`, `redis+cluster://` or `redis+sentinel://` URL.
    pub url: String,
    /// Longest any request waits on Redis, connecting included.
    pub timeout: Duration,
    /// What to answer when Redis cannot decide.
    pub failure: FailurePolicy,
    /// Tokens a replica leases beyond a request's own (0: every decision in Redis).
    pub lease: u32,
    /// How long unused leased tokens stay usable.
    pub lease_ttl: Duration,
    /// Entries in each local cache (over-limit snapshots, leases).
    pub cache_size: u64,
    /// Longest an over-limit snapshot answers for its bucket.
    pub cache_ttl: Duration,
    /// Where the time comes from.
    pub time: TimeSource,
    /// Buckets the embedded fallback store holds ([`FailurePolicy::Local`]).
    pub fallback_buckets: u64,
    /// Bytes the embedded fallback store holds ([`FailurePolicy::Local`]).
    pub fallback_bytes: u64,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("url", &conn::redact(&self.url))
            .field("timeout", &self.timeout)
            .field("failure", &self.failure)
            .field("lease", &self.lease)
            .field("lease_ttl", &self.lease_ttl)
            .field("cache_size", &self.cache_size)
            .field("cache_ttl", &self.cache_ttl)
            .field("time", &self.time)
            .field("fallback_buckets", &self.fallback_buckets)
            .field("fallback_bytes", &self.fallback_bytes)
            .finish()
    }
}

impl RedisOptions {
    /// Defaults for `url`: 100 ms timeout, `error` policy, no leases, 100k cached entries.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            timeout: Duration::from_millis(100),
            failure: FailurePolicy::Error,
            lease: 0,
            lease_ttl: Duration::from_secs(1),
            cache_size: 100_000,
            cache_ttl: Duration::from_secs(60),
            time: TimeSource::Redis,
            fallback_buckets: super::DEFAULT_MAX_BUCKETS,
            fallback_bytes: super::DEFAULT_MAX_STORE_BYTES,
        }
    }
}

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

/// The Redis store. Cheap to clone; clones share connection and caches.
#[derive(Clone, Debug)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    backend: Backend,
    /// SHA1 of [`SCRIPT`], for `EVALSHA`.
    sha: String,
    options: RedisOptions,
    blocked: moka::sync::Cache<Arc<str>, Blocked, RandomState>,
    leases: moka::sync::Cache<String, Arc<Lease>, RandomState>,
    fallback: Option<MemoryStore>,
    counts: [AtomicU64; 5],
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("backend", &self.backend)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

const OVER_LIMIT_HITS: usize = 0;
const LEASE_HITS: usize = 1;
const MISSES: usize = 2;
const ERRORS: usize = 3;
const FALLBACKS: usize = 4;

/// An over-limit answer kept locally.
#[derive(Debug, Clone)]
enum Blocked {
    /// A token bucket's state as of the moment the deciding request was sent.
    Bucket {
        limit: Limit,
        state: State,
        ttl: Duration,
    },
    /// A full fixed window: `count` hits until `until` (local clock).
    Window {
        limit: Limit,
        count: u64,
        until: Nanos,
        ttl: Duration,
    },
}

impl Blocked {
    /// The over-limit report for `check` at `now`, if this snapshot is sure of it.
    fn refuses(&self, check: &Check<'_>, now: Nanos) -> Option<Report> {
        match self {
            Blocked::Bucket { limit, state, .. } if *limit == check.limit => {
                let step = limiter::step(Some(state), limit, check.hits, now);
                step.over().then(|| Report {
                    cached: true,
                    ..step.unconsumed().1
                })
            }
            Blocked::Window {
                limit,
                count,
                until,
                ..
            } if *limit == check.limit
                && now < *until
                && count.saturating_add(check.hits) > u64::from(limit.requests_per_unit) =>
            {
                Some(Report {
                    over: true,
                    remaining: 0,
                    reset: (until - now).div_ceil(crate::clock::NANOS_PER_SEC)
                        * crate::clock::NANOS_PER_SEC,
                    count: *count,
                    cached: true,
                })
            }
            _ => None,
        }
    }

    fn ttl(&self) -> Duration {
        match self {
            Blocked::Bucket { ttl, .. } | Blocked::Window { ttl, .. } => *ttl,
        }
    }
}

struct BlockedExpiry;

impl moka::Expiry<Arc<str>, Blocked> for BlockedExpiry {
    fn expire_after_create(
        &self,
        _: &Arc<str>,
        value: &Blocked,
        _: std::time::Instant,
    ) -> Option<Duration> {
        Some(value.ttl())
    }

    fn expire_after_update(
        &self,
        _: &Arc<str>,
        value: &Blocked,
        _: std::time::Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.ttl())
    }
}

/// Tokens this replica took from a bucket ahead of use.
#[derive(Debug)]
struct Lease {
    limit: Limit,
    tokens: AtomicU64,
    /// The bucket's remaining tokens when the lease was last topped up, for reports.
    remaining: std::sync::atomic::AtomicU32,
    /// A request is topping this lease up in Redis: one at a time, so that a replica never
    /// holds more than the lease size, and others wait for it rather than race it.
    refilling: AtomicBool,
    refilled: tokio::sync::Notify,
}

/// The right to top a lease up; ends (waking the waiters) when dropped, whatever happens
/// to the request.
struct Refill(Arc<Lease>);

impl Drop for Refill {
    fn drop(&mut self) {
        self.0.refilling.store(false, Ordering::Release);
        self.0.refilled.notify_waiters();
    }
}

impl Lease {
    fn new(limit: Limit) -> Self {
        Self {
            limit,
            tokens: AtomicU64::new(0),
            remaining: Default::default(),
            refilling: AtomicBool::new(false),
            refilled: tokio::sync::Notify::new(),
        }
    }

    /// Takes `hits` tokens if held; a check (0 hits) passes when one more hit would.
    fn take(&self, hits: u64) -> bool {
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t >= hits.max(1)).then(|| t - hits)
            })
            .is_ok()
    }
}

/// A token-bucket limit as the script's exact integers: time in quanta of `q`
/// microseconds, one token worth `token`, refill `rate` per quantum, capacity `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Scale {
    q: u64,
    token: u64,
    rate: u64,
    cap: u64,
    /// Nanoseconds per scaled unit of debt, to turn the script's debt into
    /// [`limiter::State`]'s (a token worth the unit in nanoseconds).
    debt_nanos: u128,
}

/// Below this, Lua's doubles hold integers exactly.
const EXACT: u64 = 1 << 53;

impl Scale {
    fn of(limit: &Limit) -> Scale {
        let unit_us = limit.unit.nanos() / 1000;
        let rpu = u64::from(limit.requests_per_unit);
        let mut q = 1;
        loop {
            let unit_q = unit_us / q;
            let g = gcd(unit_q, rpu);
            let token = unit_q / g;
            let cap = u64::from(limit.burst).saturating_mul(token);
            // Coarser quanta only while they divide the unit and the capacity is inexact.
            if cap < EXACT || unit_us % (q * 10) != 0 {
                return Scale {
                    q,
                    token,
                    rate: rpu / g,
                    cap,
                    debt_nanos: u128::from(g) * u128::from(q) * 1000,
                };
            }
            q *= 10;
        }
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

impl RedisStore {
    /// A store for `options`; connects on first use, so it starts while Redis is down.
    ///
    /// # Errors
    /// The URL is invalid.
    pub fn new(options: RedisOptions, clock: Arc<dyn Clock>) -> Result<Self, UrlError> {
        let target = Target::parse(&options.url)?;
        let cache = |ttl: Option<Duration>| {
            let builder = moka::sync::Cache::builder().max_capacity(options.cache_size);
            match ttl {
                Some(ttl) => builder
                    .time_to_live(ttl)
                    .build_with_hasher(RandomState::default()),
                None => builder.build_with_hasher(RandomState::default()),
            }
        };
        let blocked = moka::sync::Cache::builder()
            .max_capacity(options.cache_size)
            .expire_after(BlockedExpiry)
            .build_with_hasher(RandomState::default());
        let fallback = (options.failure == FailurePolicy::Local).then(|| {
            let bounds = Bounds {
                buckets: options.fallback_buckets,
                bytes: options.fallback_bytes,
            };
            MemoryStore::bounded(bounds, clock)
        });
        Ok(Self {
            inner: Arc::new(Inner {
                backend: Backend::new(target, &options.url, options.timeout)?,
                sha: redis::Script::new(SCRIPT).get_hash().to_string(),
                blocked,
                leases: cache(Some(options.lease_ttl)),
                fallback,
                counts: Default::default(),
                options,
            }),
        })
    }

    /// Decides `checks` atomically; see the module docs.
    ///
    /// # Errors
    /// Redis could not decide and the failure policy is [`FailurePolicy::Error`].
    pub async fn check(&self, checks: &[Check<'_>], now: Nanos) -> Result<Reports, StoreError> {
        let inner = &*self.inner;
        let mut prefetch = None;
        if let Some(reports) = inner.answer_locally(checks, now, &mut prefetch) {
            if let (Some(refill), [check]) = (prefetch, checks) {
                let store = self.clone();
                let (key, limit) = (check.key.as_str().to_owned(), check.limit);
                tokio::spawn(async move { store.top_up(&key, limit, refill, now).await });
            }
            return Ok(reports);
        }
        // Boxed: the way to Redis is a large future, and the local answers above (most of
        // them) should not carry it, nor have it copied, in every request's future.
        Box::pin(self.ask_redis(checks, now)).await
    }

    /// [`RedisStore::check`] when the caches cannot answer.
    async fn ask_redis(&self, checks: &[Check<'_>], now: Nanos) -> Result<Reports, StoreError> {
        let inner = &*self.inner;
        // One budget for the whole request, waiting for a lease included (a deadline for
        // the runtime's timers, not a time any decision depends on).
        let deadline = tokio::time::Instant::now() + inner.options.timeout;
        let keys: smallvec::SmallVec<[String; 4]> =
            checks.iter().map(|c| c.key.redis_key()).collect();
        // Every key of a request shares its domain, so its hash tag and its slot.
        let routed = tokio::time::timeout_at(
            deadline,
            inner
                .backend
                .node_for(keys.first().map_or("", String::as_str)),
        )
        .await
        .unwrap_or_else(|_| Err("Redis timed out reading the Cluster's slot map".into()));
        let node = match routed {
            Ok(node) => node,
            Err(why) => {
                return inner.fail(
                    checks,
                    now,
                    StoreError::new(StoreErrorKind::Unreachable, why),
                );
            }
        };
        if !node.circuit.is_up() {
            self.spawn_probe(node.clone());
            return inner.fail(
                checks,
                now,
                StoreError::new(StoreErrorKind::Unreachable, node.circuit.reason()),
            );
        }
        if let [check] = checks
            && let Some(lease) = inner.leases.get(check.key.as_str())
            && lease.limit == check.limit
        {
            // Its lease is being topped up: wait for that instead of racing it to Redis.
            let refilled = lease.refilled.notified();
            if lease.refilling.load(Ordering::Acquire) {
                let _ = tokio::time::timeout_at(deadline, refilled).await;
                if let Some(reports) = inner.answer_locally(checks, now, &mut None) {
                    return Ok(reports);
                }
            }
        }
        inner.counts[MISSES].fetch_add(1, Ordering::Relaxed);
        let refills: smallvec::SmallVec<[(u64, Option<Refill>); 4]> =
            checks.iter().map(|c| inner.lease_want(c)).collect();
        let decided = inner.decide(node.clone(), &keys, checks, &refills, now);
        let reply = tokio::time::timeout_at(deadline, decided)
            .await
            .unwrap_or_else(|_| {
                node.reset();
                Err(Failure {
                    kind: StoreErrorKind::TimedOut,
                    reason: script::describe(&node, &node::timed_out("deciding")),
                    node,
                    opens: true,
                })
            });
        match reply {
            Ok(reply) => match inner.settle(checks, &refills, now, &reply) {
                Some(reports) => Ok(reports),
                None => inner.fail(
                    checks,
                    now,
                    StoreError::new(
                        StoreErrorKind::MalformedReply,
                        "Redis sent a malformed reply: one per check expected",
                    ),
                ),
            },
            Err(failure) => {
                inner.counts[ERRORS].fetch_add(1, Ordering::Relaxed);
                if failure.opens {
                    self.trip(&failure.node, &failure.reason);
                }
                inner.fail(checks, now, failure.into_error())
            }
        }
    }

    /// Each check's state in Redis at `now` as a check of 0 hits sees it, bypassing the
    /// local caches: a hit of 0 consumes nothing and leases nothing.
    ///
    /// # Errors
    /// Redis did not answer in time, or answered nonsense.
    pub async fn peek(&self, checks: &[Check<'_>], now: Nanos) -> Result<Reports, StoreError> {
        let inner = &*self.inner;
        let checks: smallvec::SmallVec<[Check<'_>; 4]> = checks
            .iter()
            .map(|c| Check {
                hits: 0,
                mode: Mode::Enforce,
                ..*c
            })
            .collect();
        let refills: smallvec::SmallVec<[(u64, Option<Refill>); 4]> =
            checks.iter().map(|_| (0, None)).collect();
        let keys: smallvec::SmallVec<[String; 4]> =
            checks.iter().map(|c| c.key.redis_key()).collect();
        let asked = async {
            let node = inner
                .backend
                .node_for(keys.first().map_or("", String::as_str))
                .await
                .map_err(|why| StoreError::new(StoreErrorKind::Unreachable, why))?;
            // Boxed: keeps the explain endpoint's future small.
            Box::pin(inner.decide(node, &keys, &checks, &refills, now))
                .await
                .map_err(script::Failure::into_error)
        };
        let reply = tokio::time::timeout(inner.options.timeout, asked)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::new(
                    StoreErrorKind::TimedOut,
                    "Redis timed out reading",
                ))
            })?;
        inner.settle(&checks, &refills, now, &reply).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::MalformedReply,
                "Redis sent a malformed reply",
            )
        })
    }

    /// Tops a lease up ahead of need: a check of 0 hits that leases what is missing.
    async fn top_up(&self, key: &str, limit: Limit, refill: Refill, now: Nanos) {
        let inner = &*self.inner;
        let want =
            u64::from(inner.options.lease).saturating_sub(refill.0.tokens.load(Ordering::Acquire));
        let checks = [Check {
            key: BucketKey::from(key),
            limit,
            hits: 0,
            mode: Mode::Enforce,
        }];
        let refills = [(want, Some(refill))];
        let keys = [BucketKey::from(key).redis_key()];
        // A failure here costs nothing: the next request without tokens asks Redis itself.
        let asked = async {
            let node = inner.backend.node_for(&keys[0]).await.ok()?;
            if !node.circuit.is_up() {
                return None;
            }
            inner.decide(node, &keys, &checks, &refills, now).await.ok()
        };
        if let Ok(Some(reply)) = tokio::time::timeout(inner.options.timeout, asked).await {
            inner.settle(&checks, &refills, now, &reply);
        }
    }

    /// What the store does when Redis cannot decide.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.options.failure
    }

    /// Where decisions were made so far.
    pub fn stats(&self) -> RedisStats {
        let c = |i: usize| self.inner.counts[i].load(Ordering::Relaxed);
        RedisStats {
            over_limit_hits: c(OVER_LIMIT_HITS),
            lease_hits: c(LEASE_HITS),
            misses: c(MISSES),
            errors: c(ERRORS),
            fallbacks: c(FALLBACKS),
        }
    }
}

impl Inner {
    /// Answers from the caches when they are sure: every check covered by leased tokens
    /// (ours to spend, whatever Redis says of the bucket now), or every check refused by an
    /// over-limit snapshot.
    ///
    /// A one-descriptor request that leaves its lease half spent also gets the right to top
    /// it up in the background (`prefetch`), so that hot keys do not wait for Redis.
    fn answer_locally(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        prefetch: &mut Option<Refill>,
    ) -> Option<Reports> {
        self.spend_leases(checks, prefetch)
            .or_else(|| self.refuse_blocked(checks, now))
    }

    fn refuse_blocked(&self, checks: &[Check<'_>], now: Nanos) -> Option<Reports> {
        let reports = checks
            .iter()
            .map(|check| {
                self.blocked
                    .get(check.key.as_str())
                    .and_then(|b| b.refuses(check, now))
            })
            .collect::<Option<Reports>>()?;
        self.counts[OVER_LIMIT_HITS].fetch_add(1, Ordering::Relaxed);
        Some(reports)
    }

    fn spend_leases(&self, checks: &[Check<'_>], prefetch: &mut Option<Refill>) -> Option<Reports> {
        if self.options.lease == 0
            || checks
                .iter()
                .any(|c| c.limit.algorithm != Algorithm::TokenBucket)
        {
            return None;
        }
        let mut reports = Reports::new();
        let mut taken: smallvec::SmallVec<[Arc<Lease>; 4]> = smallvec::SmallVec::new();
        for check in checks {
            match self.leases.get(check.key.as_str()) {
                Some(lease) if lease.limit == check.limit && lease.take(check.hits) => {
                    reports.push(Report {
                        over: false,
                        remaining: lease.remaining.load(Ordering::Relaxed).saturating_add(
                            u32::try_from(lease.tokens.load(Ordering::Relaxed)).unwrap_or(u32::MAX),
                        ),
                        reset: 0,
                        ..Report::default()
                    });
                    taken.push(lease);
                }
                _ => {
                    for (lease, check) in taken.iter().zip(checks) {
                        lease.tokens.fetch_add(check.hits, Ordering::AcqRel);
                    }
                    return None;
                }
            }
        }
        if let [lease] = &taken[..]
            && lease.tokens.load(Ordering::Acquire) <= u64::from(self.options.lease / 2)
            && !lease.refilling.swap(true, Ordering::AcqRel)
        {
            *prefetch = Some(Refill(lease.clone()));
        }
        self.counts[LEASE_HITS].fetch_add(1, Ordering::Relaxed);
        Some(reports)
    }

    /// Extra tokens to ask for with `check` (enough to hold the lease size again) and the
    /// right to add them, unless leasing is off or another request is topping it up.
    fn lease_want(&self, check: &Check<'_>) -> (u64, Option<Refill>) {
        if self.options.lease == 0
            || check.limit.algorithm != Algorithm::TokenBucket
            || check.hits == 0
        {
            return (0, None);
        }
        // Created atomically: two first requests must not each top up a lease of their own.
        let mut lease = self
            .leases
            .entry_by_ref(check.key.as_str())
            .or_insert_with(|| Arc::new(Lease::new(check.limit)))
            .into_value();
        if lease.limit != check.limit {
            // The limit changed (a reload or an override): start over.
            lease = Arc::new(Lease::new(check.limit));
            self.leases.insert(check.key.as_str().into(), lease.clone());
        }
        if lease.refilling.swap(true, Ordering::AcqRel) {
            return (0, None);
        }
        let held = lease.tokens.load(Ordering::Acquire);
        (
            u64::from(self.options.lease).saturating_sub(held),
            Some(Refill(lease)),
        )
    }

    /// Reports from the script's reply; caches what it says about the future.
    fn settle(
        &self,
        checks: &[Check<'_>],
        refills: &[(u64, Option<Refill>)],
        now: Nanos,
        reply: &Reply,
    ) -> Option<Reports> {
        if reply.checks.len() != checks.len() {
            return None;
        }
        let mut reports = Reports::with_capacity(checks.len());
        for ((check, v), (_, refill)) in checks.iter().zip(&reply.checks).zip(refills) {
            let CheckReply {
                over,
                remaining,
                reset_us,
                a,
                b,
            } = *v;
            let (a, b) = (a.max(0) as u64, b.max(0) as u64);
            let mut report = Report {
                over,
                remaining: u32::try_from(remaining.max(0)).unwrap_or(u32::MAX),
                reset: (reset_us.max(0) as u64).saturating_mul(1000),
                // A window's count after the decision (the script's `a`); see the script.
                count: if check.limit.algorithm == Algorithm::FixedWindow {
                    a
                } else {
                    0
                },
                cached: false,
            };
            let limit = check.limit;
            match limit.algorithm {
                Algorithm::TokenBucket => {
                    if limit.requests_per_unit == 0 {
                        report.reset = limit.unit.nanos();
                    }
                    if over {
                        let scale = Scale::of(&limit);
                        let state = State::TokenBucket {
                            debt: u128::from(a) * scale.debt_nanos,
                            at: now,
                            unit: limit.unit,
                        };
                        let one = limiter::step(Some(&state), &limit, 1, now);
                        let ttl = if limit.requests_per_unit == 0 {
                            self.options.cache_ttl
                        } else {
                            Duration::from_nanos(one.unconsumed().1.reset)
                                .min(self.options.cache_ttl)
                        };
                        if one.over() && !ttl.is_zero() {
                            self.blocked.insert(
                                check.key.as_str().into(),
                                Blocked::Bucket { limit, state, ttl },
                            );
                        }
                    } else if let Some(Refill(lease)) = refill {
                        lease.remaining.store(report.remaining, Ordering::Relaxed);
                        lease.tokens.fetch_add(b, Ordering::AcqRel);
                    }
                }
                Algorithm::FixedWindow => {
                    // Only once over: from then on every hit, and every check, is over
                    // until the window ends (at the limit exactly, a check still passes).
                    if over && b > 0 {
                        let until = now.saturating_add(b.saturating_mul(1000));
                        let ttl = Duration::from_micros(b).min(self.options.cache_ttl);
                        self.blocked.insert(
                            check.key.as_str().into(),
                            Blocked::Window {
                                limit,
                                count: a,
                                until,
                                ttl,
                            },
                        );
                    }
                }
            }
            reports.push(report);
        }
        Some(reports)
    }

    /// The failure policy's answer.
    fn fail(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        why: StoreError,
    ) -> Result<Reports, StoreError> {
        match self.options.failure {
            FailurePolicy::Error => Err(why),
            FailurePolicy::Allow => {
                self.counts[FALLBACKS].fetch_add(1, Ordering::Relaxed);
                Ok(checks
                    .iter()
                    .map(|c| Report {
                        over: false,
                        remaining: c.limit.burst,
                        ..Report::default()
                    })
                    .collect())
            }
            FailurePolicy::Local => {
                self.counts[FALLBACKS].fetch_add(1, Ordering::Relaxed);
                match &self.fallback {
                    Some(store) => Ok(store.check(checks, now)),
                    None => Err(why),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Unit;

    fn limit(rpu: u32, unit: Unit, burst: u32) -> Limit {
        Limit {
            requests_per_unit: rpu,
            unit,
            burst,
            algorithm: Algorithm::TokenBucket,
        }
    }

    #[test]
    fn scales_are_exact_integers_below_two_to_the_53() {
        let s = Scale::of(&limit(100, Unit::Second, 10));
        assert_eq!((s.q, s.token, s.rate, s.cap), (1, 10_000, 1, 100_000));
        let s = Scale::of(&limit(5, Unit::Minute, 1));
        assert_eq!(
            (s.q, s.token, s.rate, s.cap),
            (1, 12_000_000, 1, 12_000_000)
        );
        // A token is worth the unit in nanoseconds in the embedded store's debt.
        assert_eq!(
            u128::from(s.token) * s.debt_nanos,
            u128::from(Unit::Minute.nanos())
        );
        // Large bursts on long units take coarser quanta instead of losing exactness.
        for l in [
            limit(u32::MAX, Unit::Year, u32::MAX),
            limit(999_999, Unit::Year, 999_999),
            limit(7, Unit::Day, u32::MAX),
            limit(0, Unit::Week, 3),
        ] {
            let s = Scale::of(&l);
            assert!(s.cap < EXACT, "{l:?} → {s:?}");
            assert_eq!(
                u128::from(s.token) * s.debt_nanos,
                u128::from(l.unit.nanos()),
                "{l:?}"
            );
        }
    }

    #[test]
    fn options_never_show_the_password() {
        let shown = format!("{:?}", RedisOptions::new("redis://u:secret@h:1"));
        assert!(
            !shown.contains("secret") && shown.contains("u:***@h:1"),
            "{shown}"
        );
    }
}

//! Leases (opt-in, [`super::RedisOptions::lease`]): a replica takes up to N whole tokens
//! of a token bucket beyond a request's own, when the bucket holds them, and spends them
//! locally until they run out or their TTL ends (unused ones then expire). One top-up per
//! bucket at a time, started in the background once half the lease is spent; requests
//! finding it empty meanwhile wait for it rather than race it to Redis.
//!
//! A limit that charges ([`Limit::charge`]) never leases, and its checks, and refunds,
//! are never answered from leased tokens: every hit on it is a charge that must land in
//! Redis, and a check of nothing must see a debt, which a lease would hide (its tokens are
//! this replica's to spend whatever Redis says of the bucket now). A charge or refund
//! also drops this replica's lease for its key, if an earlier limit of the key left one
//! (a reload or an override that turned charging on), so that nothing more is spent from
//! it; its unspent tokens are not given back, as with any lease of an older limit: the
//! bucket refills them. Bound for other replicas: they hold no lease of a limit that
//! charges, so they spend no leased token once it does; only a replica still deciding
//! under the older, non-charging limit (its reload not yet done) may spend what it leased
//! under that limit, at most `--redis-lease` tokens per key, until it reloads or the
//! lease's TTL (`--redis-lease-ttl-ms`) ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

use foldhash::fast::RandomState;

use super::RedisStore;
use crate::bucket_key::BucketKey;
use crate::clock::Nanos;
use crate::limiter::Report;
use crate::rules::{Algorithm, Limit, Mode};
use crate::store::{Check, Reports};

/// This replica's leases, by bucket key (the bucket's text, as the embedded store keys it).
pub(super) struct Leases {
    /// The leases; an unused one expires with its tokens after the lease TTL.
    entries: moka::sync::Cache<String, Arc<Lease>, RandomState>,
    /// Tokens a lease holds when full (`RedisOptions::lease`); 0 turns leasing off.
    size: u32,
}

/// Tokens this replica took from a bucket ahead of use.
#[derive(Debug)]
pub(super) struct Lease {
    /// The limit the tokens were taken under: another limit (a reload) starts a new lease.
    limit: Limit,
    /// Tokens left to spend.
    tokens: AtomicU64,
    /// The bucket's remaining tokens when the lease was last topped up, for reports.
    remaining: AtomicU32,
    /// A request is topping this lease up in Redis: one at a time, so that a replica never
    /// holds more than the lease size, and others wait for it rather than race it.
    refilling: AtomicBool,
    /// Wakes the requests waiting for a top-up when it ends.
    refilled: tokio::sync::Notify,
}

/// The right to top a lease up; ends (waking the waiters) when dropped, whatever happens
/// to the request.
pub(super) struct Refill(
    /// The lease being topped up.
    Arc<Lease>,
);

/// What one check asks Redis for beyond its own hits.
pub(super) struct Want {
    /// Extra tokens to lease (0: none).
    pub(super) extra: u64,
    /// The right to add them to the lease; `None` when there is nothing to add them to.
    pub(super) refill: Option<Refill>,
}

impl Want {
    /// Nothing beyond the check's own hits.
    pub(super) fn nothing() -> Self {
        Want {
            extra: 0,
            refill: None,
        }
    }
}

impl Drop for Refill {
    fn drop(&mut self) {
        self.0.refilling.store(false, Ordering::Release);
        self.0.refilled.notify_waiters();
    }
}

impl Refill {
    /// Adds the `leased` tokens Redis granted; `remaining` is what the bucket still holds.
    pub(super) fn credit(&self, remaining: u32, leased: u64) {
        self.0.remaining.store(remaining, Ordering::Relaxed);
        self.0.tokens.fetch_add(leased, Ordering::AcqRel);
    }
}

impl Lease {
    fn new(limit: Limit) -> Self {
        Self {
            limit,
            tokens: AtomicU64::new(0),
            remaining: AtomicU32::new(0),
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

impl Leases {
    /// No lease yet; leases of `size` tokens (0: none), at most `capacity` of them, each
    /// kept `ttl` after its last top-up.
    pub(super) fn new(size: u32, capacity: u64, ttl: Duration) -> Self {
        Self {
            entries: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .time_to_live(ttl)
                .build_with_hasher(RandomState::default()),
            size,
        }
    }

    /// Reports for `checks` when leased tokens cover every one of them (ours to spend,
    /// whatever Redis says of the bucket now); takes nothing otherwise.
    ///
    /// A one-descriptor request that leaves its lease half spent also gets the right to
    /// top it up in the background (`prefetch`), so that hot keys do not wait for Redis.
    pub(super) fn spend(
        &self,
        checks: &[Check<'_>],
        prefetch: &mut Option<Refill>,
    ) -> Option<Reports> {
        if self.size == 0 || checks.iter().any(|c| !leasable(c)) {
            return None;
        }
        let mut reports = Reports::new();
        let mut taken: smallvec::SmallVec<[Arc<Lease>; 4]> = smallvec::SmallVec::new();
        for check in checks {
            match self.entries.get(check.key.as_str()) {
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
            && lease.tokens.load(Ordering::Acquire) <= u64::from(self.size / 2)
            && !lease.refilling.swap(true, Ordering::AcqRel)
        {
            *prefetch = Some(Refill(lease.clone()));
        }
        Some(reports)
    }

    /// What each of `checks` asks Redis for beyond its own hits ([`Leases::want`]), in
    /// order. A descriptor with a limit that is not a token bucket leases nothing for any
    /// of its limits: its token buckets' keys only ever come with that limit, which no
    /// lease covers, so no request could spend the tokens ([`Leases::spend`]); they would
    /// sit unused, lost to every replica, until the lease expires, and then be leased anew.
    pub(super) fn wants(&self, checks: &[Check<'_>]) -> smallvec::SmallVec<[Want; 4]> {
        if self.size == 0 {
            // Leasing off, the default: no grouping by descriptor to do.
            return checks.iter().map(|_| Want::nothing()).collect();
        }
        checks
            .chunk_by(|a, b| a.descriptor == b.descriptor)
            .flat_map(|descriptor| {
                let leasable = descriptor.iter().all(leasable);
                descriptor.iter().map(move |c| {
                    if leasable {
                        self.want(c)
                    } else {
                        if c.lands() || c.hold.is_some() {
                            // No more spending from a lease this check's debt would hide.
                            self.entries.invalidate(c.key.as_str());
                        }
                        Want::nothing()
                    }
                })
            })
            .collect()
    }

    /// Extra tokens to ask for with `check`, a token bucket's with leasing on (see
    /// [`Leases::wants`]): enough to hold the lease size again, and the right to add them,
    /// unless another request is topping it up.
    fn want(&self, check: &Check<'_>) -> Want {
        if check.hits == 0 {
            return Want::nothing();
        }
        // Created atomically: two first requests must not each top up a lease of their own.
        let mut lease = self
            .entries
            .entry_by_ref(check.key.as_str())
            .or_insert_with(|| Arc::new(Lease::new(check.limit)))
            .into_value();
        if lease.limit != check.limit {
            // The limit changed (a reload or an override): start over.
            lease = Arc::new(Lease::new(check.limit));
            self.entries
                .insert(check.key.as_str().into(), lease.clone());
        }
        if lease.refilling.swap(true, Ordering::AcqRel) {
            return Want::nothing();
        }
        let held = lease.tokens.load(Ordering::Acquire);
        Want {
            extra: u64::from(self.size).saturating_sub(held),
            refill: Some(Refill(lease)),
        }
    }

    /// What a background top-up holding `refill` asks for: enough to hold the lease size
    /// again.
    pub(super) fn want_for_top_up(&self, refill: Refill) -> Want {
        Want {
            extra: u64::from(self.size).saturating_sub(refill.0.tokens.load(Ordering::Acquire)),
            refill: Some(refill),
        }
    }

    /// Waits, until `deadline` at most, for the top-up of `check`'s lease, if one is
    /// running; whether it waited (the lease may cover the check now).
    pub(super) async fn wait_for_top_up(
        &self,
        check: &Check<'_>,
        deadline: tokio::time::Instant,
    ) -> bool {
        let Some(lease) = self.entries.get(check.key.as_str()) else {
            return false;
        };
        if lease.limit != check.limit {
            return false;
        }
        // Registered before reading the flag, so that a top-up ending in between wakes it.
        let refilled = lease.refilled.notified();
        if !lease.refilling.load(Ordering::Acquire) {
            return false;
        }
        let _ = tokio::time::timeout_at(deadline, refilled).await;
        true
    }

    /// Expiry and eviction upkeep; see [`super::RedisStore::maintain`].
    pub(super) fn run_pending_tasks(&self) {
        self.entries.run_pending_tasks();
    }

    /// Drops this replica's lease of bucket `key` (a reset): its tokens are not spent.
    pub(super) fn forget(&self, key: &str) {
        self.entries.invalidate(key);
    }
}

/// Whether `check` may be answered from, or add to, a lease: a token bucket's, neither of a
/// limit that charges nor a refund (see the module docs). A descriptor with a limit that is
/// not leasable leases nothing for any of its limits ([`Leases::wants`]). A hold's check
/// never leases: its hits are held or settled in Redis alone.
fn leasable(check: &Check<'_>) -> bool {
    check.limit.algorithm == Algorithm::TokenBucket
        && !check.limit.charge
        && !check.refund
        && check.hold.is_none()
}

impl RedisStore {
    /// Tops a lease up ahead of need: a check of 0 hits that leases what is missing.
    pub(super) async fn top_up(&self, key: &str, limit: Limit, refill: Refill, now: Nanos) {
        let inner = &*self.inner;
        let key = BucketKey::from(key);
        let checks = [Check {
            refund: false,
            key,
            limit,
            hits: 0,
            mode: Mode::Enforce,
            descriptor: 0,
            hold: None,
        }];
        let wants = [inner.leases.want_for_top_up(refill)];
        let redis_key = key.redis_key(&inner.options.key_prefix);
        // A failure here costs nothing: the next request without tokens asks Redis itself.
        let asked = async {
            let node = inner.backend.node_for(&redis_key).await.ok()?;
            if !node.circuit.is_up() {
                return None;
            }
            let keys = smallvec::smallvec![redis_key.clone()];
            self.inner
                .decide(node, keys, &checks, &wants, now)
                .await
                .ok()
        };
        if let Ok(Some(reply)) = tokio::time::timeout(inner.options.timeout, asked).await {
            inner.settle(&checks, &wants, now, &reply);
        }
    }
}

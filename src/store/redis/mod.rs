//! The Redis store: one limit shared by every replica.
//!
//! A request that needs Redis is decided by one script ([`script`], its arguments in
//! [`script_args`], its reply in [`reply`]): [`decide_buckets.lua`](./decide_buckets.lua)
//! when all its checks are token buckets, else [`decide.lua`](./decide.lua). Either decides
//! all its limited descriptors atomically with the same two-pass rule as the embedded
//! store, on Redis' own clock (`TIME`), so replicas' clocks never matter. Requests that
//! wait for the same node meanwhile go together in one call that decides them in order,
//! each all-or-nothing on its own ([`batch`]); calls share one multiplexed connection per
//! node and are pipelined on it ([`node`]).
//!
//! Each node (the one server, or each Cluster master) has a circuit ([`circuit`]): any
//! failure (unreachable, a timeout, any error reply but `NOSCRIPT`) opens it, its requests
//! then follow the failure policy at once ([`fallback`]), and a probe write closes it again
//! ([`health`]). A Cluster is routed here, by slot, so that a dead master fails only its own
//! slots ([`cluster`], [`slots`]). The URL ([`conn`]) names the nodes ([`backend`]).
//!
//! Keys are [`crate::bucket_key::BucketKey::redis_key`]s: a versioned prefix, then the
//! domain as the Cluster hash tag, so every key of one request (they share the domain)
//! lives in one slot while different domains spread over the nodes. Every key carries a
//! TTL: the time until its bucket would be full again, or its window's end.
//!
//! Two caches in front answer what they safely can without Redis: over-limit snapshots
//! (always on, [`over_limit_cache`]) and leased tokens (opt-in, [`leases`]). Neither ever
//! answers a charge or a refund ([`Check::lands`]): those reach Redis, whichever script
//! decides them, and land there, in the same one call as the rest of their request.
//!
//! Holds ([`crate::store::hold`]) are decided in the same one call, by decide.lua's hold
//! section: a request with any goes to the general script, and neither cache answers it
//! (a reservation's reply replaces the key's snapshot as a charge's does; a slot's is
//! never kept). [`holds`] has the operator's view of them and resets.

mod backend;
mod call_queue;
mod calls_allowed;
mod circuit;
mod cluster;
mod conn;
mod fallback;
mod health;
mod holds;
mod leases;
mod node;
mod options;
mod over_limit_cache;
mod part;
mod quota_demands;
mod quota_nudges;
pub mod reply;
mod restarts;
mod script;
mod script_args;
mod slots;
mod stats;

use std::sync::Arc;

use backend::Backend;
pub use conn::SetupError;
use conn::Target;
use fallback::Fallback;
pub use health::NodeStatus;
pub use holds::RESETS;
use leases::{Leases, Refill, Want};
pub use options::{FailurePolicy, RedisOptions, RedisTlsFiles, TimeSource};
use over_limit_cache::OverLimitCache;
pub use quota_demands::Demand;
pub use quota_nudges::{Nudge, Nudges, QUOTA_NUDGES};
use reply::{After, Reply};
pub use restarts::NodeRestarts;
use restarts::Restarts;
pub use stats::RedisStats;
use stats::{Counters, count};

use super::{Check, Reports};
use crate::clock::{Clock, Nanos};
use crate::error::{StoreError, StoreErrorKind};
use crate::rules::Mode;

/// The Redis store. Cheap to clone; clones share connection and caches.
#[derive(Clone, Debug)]
pub struct RedisStore {
    /// What every clone shares.
    inner: Arc<Inner>,
}

/// The state behind a [`RedisStore`].
struct Inner {
    /// The node (or a Cluster's masters) requests go to, with their connections and
    /// circuits.
    backend: Backend,
    /// The decision scripts and their SHA1s, for `EVALSHA`.
    scripts: script::Scripts,
    /// What the store was built with.
    options: RedisOptions,
    /// Buckets Redis said are over their limit: refusals answered without asking again.
    over_limit_cache: OverLimitCache,
    /// Tokens taken ahead of use: passes answered without asking (empty unless leasing
    /// is on).
    leases: Leases,
    /// What answers when Redis cannot decide, and its embedded store under `local`.
    fallback: Fallback,
    /// Where decisions were made, for [`RedisStore::stats`].
    counts: Counters,
    /// Each node's server as last read, and its restarts, for [`RedisStore::restarts`].
    restarts: Restarts,
    /// Whether a task follows the resets of other replicas ([`RedisStore::follow_resets`]).
    following_resets: std::sync::atomic::AtomicBool,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("backend", &self.backend)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store for `options`; connects on first use, so it starts while Redis is down.
    ///
    /// # Errors
    /// The URL is invalid.
    pub fn new(options: RedisOptions, clock: Arc<dyn Clock>) -> Result<Self, SetupError> {
        let certs = conn::certificates(
            options.tls.ca.as_deref(),
            options
                .tls
                .client
                .as_ref()
                .map(|(c, k)| (c.as_path(), k.as_path())),
        )?;
        let target = Target::parse(&options.url, certs.as_ref())?;
        Ok(Self {
            inner: Arc::new(Inner {
                backend: Backend::new(target, &options.url, options.timeout)?,
                scripts: script::Scripts::new(options.expiry_jitter),
                over_limit_cache: OverLimitCache::new(options.cache_size, options.cache_ttl),
                leases: Leases::new(options.lease, options.cache_size, options.lease_ttl),
                fallback: Fallback::new(&options, clock),
                counts: Counters::default(),
                restarts: Restarts::default(),
                following_resets: std::sync::atomic::AtomicBool::new(false),
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
        // Holds are decided in Redis alone, like charges: the caches never answer them.
        let holds = checks.iter().any(|c| c.hold.is_some());
        if !holds && let Some(reports) = inner.answer_locally(checks, now, &mut prefetch) {
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
        let keys: smallvec::SmallVec<[String; 4]> = checks
            .iter()
            .map(|c| c.key.redis_key(&inner.options.key_prefix))
            .collect();
        // Every key of a request shares its domain, so its hash tag and its slot.
        let routed = tokio::time::timeout_at(
            deadline,
            inner
                .backend
                .node_for(keys.first().map_or("", String::as_str)),
        )
        .await
        .unwrap_or_else(|_| {
            Err(StoreError::new(
                StoreErrorKind::TimedOut,
                "Redis timed out reading the Cluster's slot map",
            ))
        });
        let node = match routed {
            Ok(node) => node,
            Err(why) => return inner.fail(checks, now, why),
        };
        if !node.circuit.is_up() {
            self.spawn_probe(node.clone());
            let why = StoreError::new(StoreErrorKind::Unreachable, node.circuit.reason());
            return inner.fail(checks, now, why);
        }
        // Its lease is being topped up: wait for that instead of racing it to Redis.
        if let [check] = checks
            && check.hold.is_none()
            && inner.leases.wait_for_top_up(check, deadline).await
            && let Some(reports) = inner.answer_locally(checks, now, &mut None)
        {
            return Ok(reports);
        }
        count(&inner.counts.misses);
        let wants = inner.leases.wants(checks);
        let decided = self.inner.decide(node.clone(), keys, checks, &wants, now);
        let reply = tokio::time::timeout_at(deadline, decided)
            .await
            .unwrap_or_else(|_| {
                node.reset();
                Err(node::Failure {
                    error: node.error(&node::timed_out("deciding")),
                    node,
                    opens: true,
                })
            });
        match reply {
            Ok(reply) => match inner.settle(checks, &wants, now, &reply) {
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
                count(&inner.counts.errors);
                if failure.opens {
                    self.trip(&failure.node, &failure.error);
                }
                inner.fail(checks, now, failure.error)
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
                refund: false,
                mode: Mode::Enforce,
                // A slot's state is its slots; a reservation's, its bucket, its expired
                // holds released first.
                hold: c.hold.map(|h| crate::store::HoldOp {
                    phase: crate::store::Phase::Peek,
                    ..h
                }),
                ..*c
            })
            .collect();
        let wants: smallvec::SmallVec<[Want; 4]> = checks.iter().map(|_| Want::nothing()).collect();
        let keys: smallvec::SmallVec<[String; 4]> = checks
            .iter()
            .map(|c| c.key.redis_key(&inner.options.key_prefix))
            .collect();
        let asked = async {
            let node = inner
                .backend
                .node_for(keys.first().map_or("", String::as_str))
                .await?;
            // Boxed: keeps the explain endpoint's future small.
            Box::pin(self.inner.decide(node, keys, &checks, &wants, now))
                .await
                .map_err(|failure| failure.error)
        };
        let reply = tokio::time::timeout(inner.options.timeout, asked)
            .await
            .unwrap_or_else(|_| {
                Err(StoreError::new(
                    StoreErrorKind::TimedOut,
                    "Redis timed out reading",
                ))
            })?;
        inner.settle(&checks, &wants, now, &reply).ok_or_else(|| {
            StoreError::new(
                StoreErrorKind::MalformedReply,
                "Redis sent a malformed reply",
            )
        })
    }

    /// What every key of this store starts with (`--redis-key-prefix`), before meshlimit's
    /// own `ml1:`.
    pub fn key_prefix(&self) -> &str {
        &self.inner.options.key_prefix
    }

    /// What the store does when Redis cannot decide.
    pub fn failure_policy(&self) -> FailurePolicy {
        self.inner.options.failure
    }

    /// Where decisions were made so far.
    pub fn stats(&self) -> RedisStats {
        self.inner.counts.snapshot()
    }
}

impl Inner {
    /// Answers from the caches when they are sure: every check covered by leased tokens,
    /// or every check refused by an over-limit snapshot (see [`Leases::spend`] for
    /// `prefetch`).
    fn answer_locally(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        prefetch: &mut Option<Refill>,
    ) -> Option<Reports> {
        if let Some(reports) = self.leases.spend(checks, prefetch) {
            count(&self.counts.lease_hits);
            return Some(reports);
        }
        let reports = self.over_limit_cache.refuse(checks, now)?;
        count(&self.counts.over_limit_hits);
        Some(reports)
    }

    /// Reports from the script's reply to `checks` (sent at `now` with `wants`); caches
    /// what it says about the future. `None`: not one answer per check.
    fn settle(
        &self,
        checks: &[Check<'_>],
        wants: &[Want],
        now: Nanos,
        reply: &Reply,
    ) -> Option<Reports> {
        if reply.checks.len() != checks.len() {
            return None;
        }
        let mut reports = Reports::with_capacity(checks.len());
        for ((check, answer), want) in checks.iter().zip(&reply.checks).zip(wants) {
            if let Some(expiries) = check.hold.and_then(|h| h.expiries) {
                expiries.add(answer.expired);
            }
            if check.hold.is_some_and(|h| h.slots.is_some()) {
                // A slot's numbers are not its bucket's, which it never touches: nothing
                // to cache.
                reports.push(answer.slot_report());
                continue;
            }
            let outcome = answer.outcome(check.limit.algorithm);
            let report = outcome.report(&check.limit);
            if let (After::TokenBucket { leased, .. }, false, Some(refill)) =
                (outcome.after, outcome.over, &want.refill)
            {
                refill.credit(report.remaining, leased);
            }
            self.over_limit_cache.learn(check, &outcome, now);
            reports.push(report);
        }
        Some(reports)
    }

    /// The failure policy's answer to `checks` at `now`, Redis having failed with `why`.
    fn fail(
        &self,
        checks: &[Check<'_>],
        now: Nanos,
        why: StoreError,
    ) -> Result<Reports, StoreError> {
        if self.fallback.answers() {
            count(&self.counts.fallbacks);
        }
        self.fallback.answer(checks, now, why)
    }
}

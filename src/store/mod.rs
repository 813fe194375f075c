//! Where bucket state lives. A store owns atomicity: all descriptors of one request are
//! decided together (see [`crate::limiter`] for the two-phase step it runs).

pub mod hold;
mod memory;
pub mod redis;

pub use hold::{Expiries, Held, HoldOp, Phase};
pub use memory::{Bounds, MemoryStats, MemoryStore};
pub use redis::RedisStore;
use smallvec::SmallVec;

use crate::bucket_key::BucketKey;
use crate::clock::Nanos;
use crate::error::StoreError;
use crate::limiter::{self, Report, State, Step};
use crate::rules::{Limit, Mode};

/// One limited descriptor of a request, as a store sees it.
#[derive(Debug, Clone, Copy)]
pub struct Check<'a> {
    /// The bucket.
    pub key: BucketKey<'a>,
    /// The limit to enforce.
    pub limit: Limit,
    /// Hits to take; 0 checks without consuming.
    pub hits: u64,
    /// `is_negative_hits`: `hits` are given back (only on a limit that charges).
    pub refund: bool,
    /// How an over-limit verdict counts towards the request's fate.
    pub mode: Mode,
    /// The index of the request descriptor the check belongs to: a descriptor with several
    /// limits has one check per limit, and is over when any of them is. The checks of one
    /// descriptor's limits share its key ([`BucketKey::descriptor_part`]).
    ///
    /// [`BucketKey::descriptor_part`]: crate::bucket_key::BucketKey::descriptor_part
    pub descriptor: usize,
    /// The check's part in a hold: a reservation's hold or settle, or a concurrency slot
    /// (see [`hold`]); `None` for nearly every check.
    pub hold: Option<HoldOp<'a>>,
}

impl Check<'_> {
    /// This check evaluated on its bucket's `state` at `now` (see [`limiter::step`] and
    /// [`limiter::refund`]).
    #[inline]
    pub fn step(&self, state: Option<&State>, now: Nanos) -> Step {
        if self.refund {
            limiter::refund(state, &self.limit, self.hits, now)
        } else {
            limiter::step(state, &self.limit, self.hits, now)
        }
    }

    /// Whether the check is recorded whatever the request's fate: a charge or a refund.
    pub fn lands(&self) -> bool {
        self.refund || (self.limit.charge && self.hits > 0)
    }
}

/// Reports in request order; most requests have few descriptors, kept off the heap.
pub type Reports = SmallVec<[Report; 4]>;

/// The store a server runs on. An enum, not a trait object: the embedded store's decision
/// costs tens of nanoseconds and must not pay for boxing a future.
#[derive(Debug, Clone)]
pub enum Store {
    /// The embedded in-process store.
    Memory(MemoryStore),
    /// Redis, shared by every replica, with local caches in front.
    Redis(RedisStore),
}

impl Store {
    /// Decides `checks` atomically at `now`: either every token bucket takes its hits or,
    /// when the request is denied, none does.
    ///
    /// # Errors
    /// The store could not decide (never for the embedded store).
    pub async fn check(&self, checks: &[Check<'_>], now: Nanos) -> Result<Reports, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.check(checks, now)),
            Store::Redis(store) => store.check(checks, now).await,
        }
    }

    /// What each check would report at `now`, consuming nothing: the state of its bucket
    /// as a check of 0 hits sees it. Redis is asked directly, not the local caches.
    ///
    /// # Errors
    /// The store could not answer.
    pub async fn peek(&self, checks: &[Check<'_>], now: Nanos) -> Result<Reports, StoreError> {
        // A peek takes no hold: a slot's is asked whether one is free, a reservation's is
        // a check of its bucket, its expired holds released first.
        let peeks: SmallVec<[Check<'_>; 4]>;
        let checks = if checks.iter().any(|c| c.hold.is_some()) {
            peeks = checks
                .iter()
                .map(|c| Check {
                    hold: c.hold.map(|h| HoldOp {
                        phase: Phase::Peek,
                        ..h
                    }),
                    ..*c
                })
                .collect();
            &peeks[..]
        } else {
            checks
        };
        match self {
            Store::Memory(store) => Ok(checks.iter().map(|c| store.peek(c, now)).collect()),
            Store::Redis(store) => store.peek(checks, now).await,
        }
    }

    /// What `key` holds at `now`: its holds or concurrency slots in force (see [`hold`]).
    /// Redis is asked directly.
    ///
    /// # Errors
    /// The store could not answer.
    pub async fn held(&self, key: &BucketKey<'_>, now: Nanos) -> Result<Held, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.held(key, now)),
            Store::Redis(store) => store.held(key, now).await,
        }
    }

    /// Resets `key`: its bucket as if never used (full), its holds and slots dropped
    /// without settling; on Redis, every replica's local knowledge of it (over-limit
    /// snapshots, leases) dropped too. Whether there was anything to reset.
    ///
    /// # Errors
    /// The store could not reset it.
    pub async fn reset(&self, key: &BucketKey<'_>) -> Result<bool, StoreError> {
        match self {
            Store::Memory(store) => Ok(store.reset(key)),
            Store::Redis(store) => store.reset(key).await,
        }
    }

    /// The store's name, for metrics and explanations.
    pub fn kind(&self) -> &'static str {
        match self {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
        }
    }

    /// Background upkeep (expiring idle buckets); call about once a second.
    pub fn maintain(&self) {
        match self {
            Store::Memory(store) => store.maintain(),
            Store::Redis(store) => store.maintain(),
        }
    }

    /// Whether requests get answers: the store decides, or a failure policy other than
    /// `error` answers for the part that does not, or only part of it does not decide.
    pub fn serving(&self) -> bool {
        !matches!(self.health(), StoreHealth::Down(_))
    }

    /// Whether the store decides, and why not where it does not.
    pub fn health(&self) -> StoreHealth {
        match self {
            Store::Memory(_) => StoreHealth::Healthy,
            Store::Redis(store) => store.health(),
        }
    }
}

/// A store's health, as `/healthcheck` and gRPC health show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    /// Every request is decided: `/healthcheck` 200 `OK`.
    Healthy,
    /// Requests are answered, but some not by the store: a Redis Cluster master that
    /// cannot decide (its slots follow the failure policy), or Redis down under the
    /// `allow` or `local` policy. `/healthcheck` 200 `OK (degraded: <reason>)`, gRPC
    /// `SERVING`.
    Degraded(String),
    /// Nothing decides and the policy is `error`: `/healthcheck` 500 with the reason,
    /// gRPC `NOT_SERVING`.
    Down(String),
}

impl StoreHealth {
    /// Whether every request is decided.
    pub fn is_healthy(&self) -> bool {
        *self == StoreHealth::Healthy
    }
}

//! The quota service across replicas, on the Redis store: every bucket's reporters, their
//! demands and assignments, in a hash that all replicas write and read
//! (`store/redis/quota_demands.rs`); a replica's new assignments granted there within
//! what the others hold.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;

use futures_util::future::join_all;
use tracing::warn;

use super::super::share::{Share, totals};
use super::state::field_of;
use super::{Assignment, Assignments, QuotaKey, Registry, StreamId};
use crate::bucket_key::{KeyWriter, REDIS_PREFIX};
use crate::store::redis::{Demand, FailurePolicy, Nudge, RedisStore};

/// Where the reporters of every replica meet: the Redis store, this replica's name in it,
/// and the failure policy for when it cannot answer.
pub(super) struct Shared {
    pub(super) store: RedisStore,
    /// This replica's prefix of the fields it writes, its own (start time and process id).
    pub(super) replica: String,
    /// Entries not written for this long are dropped: their replica is gone.
    pub(super) stale_ms: u64,
    pub(super) policy: FailurePolicy,
}

/// Script calls on the shared buckets sent at once by one look at Redis.
const IN_FLIGHT: usize = 64;

impl Shared {
    /// The field of `stream` in a bucket's hash.
    pub(super) fn field(&self, stream: StreamId) -> String {
        field_of(&self.replica, stream)
    }

    fn is_mine(&self, field: &str) -> bool {
        field
            .strip_prefix(&self.replica)
            .is_some_and(|rest| rest.starts_with('/'))
    }

    /// The Redis key of a bucket's hash: the domain in the hash tag (one slot per domain,
    /// as the rate-limit buckets), then the id's entries, length-prefixed.
    pub(super) fn key(&self, key: &QuotaKey) -> String {
        // `q:` keeps quota buckets apart from the rate-limit buckets of the same text.
        let namespace = self.store.key_prefix();
        let mut out = format!("{namespace}{REDIS_PREFIX}{{q:{}}}", key.domain);
        for (k, v) in &key.id {
            KeyWriter::part(&mut out, k);
            KeyWriter::part(&mut out, v);
        }
        out
    }
}

impl Registry {
    /// On Redis: connects and loads the quota scripts ahead of the first report, whose
    /// answer Envoy waits for while it lets every request of the new bucket through.
    pub async fn warm_up(&self) {
        if let Some(shared) = &self.shared {
            let namespace = shared.store.key_prefix();
            let key = format!("{namespace}{REDIS_PREFIX}{{q:}}warm-up");
            let now_ms = self.clock.now() / 1_000_000;
            let _ = shared
                .store
                .quota_demands(&key, &[], &[], now_ms, shared.stale_ms)
                .await;
            let _ = shared
                .store
                .quota_grant(&key, &[], (0, 0), now_ms, shared.stale_ms, &shared.replica)
                .await;
        }
    }

    /// On Redis, until the task is aborted: follows the other replicas' nudges (see
    /// `store/redis/quota_nudges.rs`), looking at a bucket again as soon as one is
    /// published; subscribes again a second after the subscription fails or ends.
    pub async fn follow_nudges(&self) {
        let Some(shared) = &self.shared else {
            return;
        };
        loop {
            match shared.store.quota_nudges().await {
                Ok(mut nudges) => {
                    while let Some(nudge) = nudges.next().await {
                        self.nudged(shared, &nudge).await;
                    }
                }
                Err(e) => {
                    if let Some(suppressed) = self.nudge_log.allow() {
                        warn!(
                            error = %e,
                            suppressed,
                            "cannot subscribe to the quota nudges; other replicas' changes are seen at the once-a-second look at Redis"
                        );
                    }
                }
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    }

    /// Another replica published the bucket `nudge` names: if this replica has
    /// reporters of it, their shares are computed again from what Redis holds now.
    pub(super) async fn nudged(&self, shared: &Shared, nudge: &Nudge) {
        if nudge.from == shared.replica {
            return;
        }
        let _round = self.rounds.lock().await;
        let keys: Vec<QuotaKey> = {
            let state = self.state.lock();
            state
                .buckets
                .keys()
                .filter(|key| shared.key(key) == nudge.key)
                .cloned()
                .collect()
        };
        if keys.is_empty() {
            return;
        }
        self.stats.nudges.fetch_add(1, Relaxed);
        self.exchange(shared, &keys).await;
        self.decide(None, &keys).await;
    }

    /// Writes this replica's reporters of `keys` to Redis and reads every replica's: one
    /// script call per bucket, [`IN_FLIGHT`] at a time (they share the node's connection,
    /// so a look at a thousand buckets costs a few round trips, not a thousand).
    pub(super) async fn exchange(&self, shared: &Shared, keys: &[QuotaKey]) {
        let mine = self.local_demands(shared, keys);
        let now_ms = self.clock.now() / 1_000_000;
        let mut read = Vec::with_capacity(keys.len());
        for (keys, mine) in keys.chunks(IN_FLIGHT).zip(mine.chunks(IN_FLIGHT)) {
            let calls = keys.iter().zip(mine).map(|(key, mine)| async move {
                let redis_key = shared.key(key);
                shared
                    .store
                    .quota_demands(&redis_key, mine, &[], now_ms, shared.stale_ms)
                    .await
            });
            read.extend(join_all(calls).await);
        }
        self.absorb(shared, keys, read);
    }

    /// This replica's reporters of each of `keys`, as the shared hash names them.
    fn local_demands(&self, shared: &Shared, keys: &[QuotaKey]) -> Vec<Vec<Demand>> {
        let state = self.state.lock();
        keys.iter()
            .map(|key| {
                state.buckets.get(key).map_or_else(Vec::new, |bucket| {
                    bucket
                        .reporters
                        .iter()
                        .map(|(&stream, r)| demand_of(shared, stream, r.demand, r.assigned))
                        .collect()
                })
            })
            .collect()
    }

    /// What Redis said of each of `keys`: the other replicas' reporters, or an outage that
    /// the failure policy answers.
    fn absorb(
        &self,
        shared: &Shared,
        keys: &[QuotaKey],
        read: Vec<Result<Vec<Demand>, crate::error::StoreError>>,
    ) {
        let mut state = self.state.lock();
        for (key, read) in keys.iter().zip(read) {
            let Some(bucket) = state.buckets.get_mut(key) else {
                continue;
            };
            match read {
                Ok(all) => {
                    bucket.outage = None;
                    bucket.others = all
                        .into_iter()
                        .filter(|d| !shared.is_mine(&d.field))
                        .collect();
                }
                Err(e) => {
                    if bucket.outage.is_none()
                        && let Some(suppressed) = self.outage_log.allow()
                    {
                        warn!(
                            error = %e,
                            policy = ?shared.policy,
                            suppressed,
                            "Redis cannot share quota; the failure policy answers"
                        );
                    }
                    bucket.outage = Some(shared.policy);
                }
            }
        }
    }

    /// Grants this replica's new token-bucket assignments of `keys` in Redis (see
    /// `quota_grant.lua`) and cuts down, in `outgoing` and in the registry, those the
    /// other replicas leave less room for. A grant that fails leaves the assignment as
    /// computed: the next exchange with Redis answers by the failure policy.
    pub(super) async fn grant(
        &self,
        shared: &Shared,
        keys: &[QuotaKey],
        outgoing: &mut HashMap<StreamId, Assignments>,
    ) {
        let now_ms = self.clock.now() / 1_000_000;
        for key in keys {
            let wanted = {
                let state = self.state.lock();
                let Some(bucket) = state.buckets.get(key) else {
                    continue;
                };
                let Some(total) = bucket.quota.and_then(totals) else {
                    continue;
                };
                let reporters: Vec<(StreamId, Demand)> = bucket
                    .reporters
                    .iter()
                    .map(|(&stream, r)| (stream, demand_of(shared, stream, r.demand, r.assigned)))
                    .collect();
                (total, reporters)
            };
            let (total, reporters) = wanted;
            let demands: Vec<Demand> = reporters.iter().map(|(_, d)| d.clone()).collect();
            let Ok(granted) = shared
                .store
                .quota_grant(
                    &shared.key(key),
                    &demands,
                    total,
                    now_ms,
                    shared.stale_ms,
                    &shared.replica,
                )
                .await
            else {
                continue;
            };
            let mut state = self.state.lock();
            let Some(bucket) = state.buckets.get_mut(key) else {
                continue;
            };
            for ((stream, wanted), (rate, burst)) in reporters.iter().zip(granted) {
                if rate >= wanted.tokens_per_fill && burst >= wanted.max_tokens {
                    continue;
                }
                let Some(reporter) = bucket.reporters.get_mut(stream) else {
                    continue;
                };
                let Some(Assignment::TokenBucket(share)) = reporter.assigned else {
                    continue;
                };
                let cut = if rate == 0 || burst == 0 {
                    Assignment::Blanket(false)
                } else {
                    Assignment::TokenBucket(Share {
                        tokens_per_fill: rate.min(share.tokens_per_fill),
                        max_tokens: burst.min(share.max_tokens),
                        ..share
                    })
                };
                reporter.assigned = Some(cut);
                let queued = outgoing.entry(*stream).or_default();
                match queued.iter_mut().find(|(k, _)| k == key) {
                    Some(entry) => entry.1 = cut,
                    None => queued.push((key.clone(), cut)),
                }
            }
        }
    }
}

/// A reporter of this replica as the shared hash holds it: its demand and what it is
/// assigned (0, 0 when not a token bucket).
fn demand_of(
    shared: &Shared,
    stream: StreamId,
    demand: Option<f64>,
    assigned: Option<Assignment>,
) -> Demand {
    let (tokens_per_fill, max_tokens) = match assigned {
        Some(Assignment::TokenBucket(s)) => (s.tokens_per_fill, s.max_tokens),
        _ => (0, 0),
    };
    Demand {
        field: shared.field(stream),
        demand,
        tokens_per_fill,
        max_tokens,
    }
}

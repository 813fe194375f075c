//! The quota service's state on one replica: the open streams, the buckets they report,
//! each reporter's demand and what it was assigned.
//!
//! Every change goes through one lock, held for bookkeeping only (no await): a report,
//! a stream's end, a config reload. Each computes the bucket's shares again
//! ([`super::share`]) and queues the assignments that changed on the streams concerned;
//! the reporting stream always gets its buckets' assignments again, which renews their
//! time to live (an identical strategy only extends it in Envoy). Queues are bounded: a
//! stream that does not read loses answers, never the server's memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::warn;

use super::quota::{Quota, quota_of};
use super::share::{Share, totals};
use crate::bucket_key::REDIS_PREFIX;
use crate::clock::Clock;
use crate::config::{Config, SharedConfig};
use crate::rules::Algorithm;
use crate::store::Store;
use crate::store::redis::{Demand, FailurePolicy, RedisStore};
use crate::throttle::Throttle;
use std::fmt::Write as _;

mod state;

use state::{Bucket, State, Stream};

/// One stream's identity.
pub type StreamId = u64;

/// Most buckets one stream may report; reports of more are refused (logged).
pub const MAX_BUCKETS_PER_STREAM: usize = 4096;

/// A bucket: its domain and its id's entries, sorted by key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    /// The stream's domain.
    pub domain: String,
    /// The id's entries, sorted.
    pub id: Vec<(String, String)>,
}

/// One bucket's usage in a report.
#[derive(Debug, Clone, PartialEq)]
pub struct Usage {
    /// Which bucket.
    pub id: Vec<(String, String)>,
    /// Seconds the counts cover (0 for a bucket's first report).
    pub seconds: u64,
    /// Requests Envoy let through.
    pub allowed: u64,
    /// Requests Envoy refused.
    pub denied: u64,
}

/// What a bucket is assigned for one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignment {
    /// `blanket_rule`: `ALLOW_ALL` (true) or `DENY_ALL`.
    Blanket(bool),
    /// A token bucket.
    TokenBucket(Share),
}

/// How buckets that match no rule are answered (`--rlqs-unmatched`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unmatched {
    /// `ALLOW_ALL`.
    Allow,
    /// `DENY_ALL`.
    Deny,
}

/// Assignments for one stream, by bucket.
pub type Assignments = Vec<(BucketKey, Assignment)>;

/// Where a stream's assignments go.
pub type Outbox = mpsc::Sender<Assignments>;

/// Where the reporters of every replica meet: the Redis store, this replica's name in it,
/// and the failure policy for when it cannot answer.
struct Shared {
    store: RedisStore,
    /// This replica's prefix of the fields it writes, its own (start time and process id).
    replica: String,
    /// Entries not written for this long are dropped: their replica is gone.
    stale_ms: u64,
    policy: FailurePolicy,
}

impl Shared {
    /// The field of `stream` in a bucket's hash.
    fn field(&self, stream: StreamId) -> String {
        format!("{}/{stream}", self.replica)
    }

    fn is_mine(&self, field: &str) -> bool {
        field
            .strip_prefix(&self.replica)
            .is_some_and(|rest| rest.starts_with('/'))
    }

    /// The Redis key of a bucket's hash: the domain in the hash tag (one slot per domain,
    /// as the rate-limit buckets), then the id's entries, length-prefixed.
    fn key(&self, key: &BucketKey) -> String {
        let mut out = format!("{REDIS_PREFIX}{{q:{}}}", key.domain);
        for (k, v) in &key.id {
            let _ = write!(out, "{}:{k}{}:{v}", k.len(), v.len());
        }
        out
    }
}

/// The service's state; see the module docs.
pub struct Registry {
    state: Mutex<State>,
    config: SharedConfig,
    default_algorithm: Algorithm,
    unmatched: Unmatched,
    /// Logs refused buckets at most once a minute.
    refused: Throttle,
    /// Counters for the metrics.
    stats: Stats,
    /// The Redis store the shares are kept in, if any.
    shared: Option<Shared>,
    /// Wall-clock time, for the shared entries' ages.
    clock: Arc<dyn Clock>,
    /// Logs Redis outages at most once a minute.
    outage_log: Throttle,
}

/// What the quota service counted since it started (`meshlimit_rlqs_*`).
#[derive(Debug, Default)]
pub struct Stats {
    /// Usage reports received (messages).
    pub reports: AtomicU64,
    /// Assignments queued on streams (one per bucket and stream).
    pub assignments: AtomicU64,
    /// Requests Envoys reported they let through.
    pub allowed: AtomicU64,
    /// Requests Envoys reported they refused.
    pub denied: AtomicU64,
    /// Buckets refused because their stream had [`MAX_BUCKETS_PER_STREAM`].
    pub refused_buckets: AtomicU64,
    /// Assignment messages dropped because a stream did not read its earlier ones.
    pub dropped: AtomicU64,
}

/// One bucket as the operator page shows it.
#[derive(Debug, Clone)]
pub struct BucketView {
    /// Which bucket.
    pub key: BucketKey,
    /// The matching rule's whole quota, `None` when unmatched.
    pub quota: Option<Quota>,
    /// Each reporting stream: its demand (requests per second) and assignment.
    pub reporters: Vec<(StreamId, Option<f64>, Option<Assignment>)>,
}

/// The registry as the operator page shows it: every stream (id, domain, buckets) and
/// the first buckets in key order.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// Open streams: id, domain (empty before its first report), buckets reported.
    pub streams: Vec<(StreamId, String, usize)>,
    /// The first buckets, sorted.
    pub buckets: Vec<BucketView>,
    /// Buckets in all.
    pub total_buckets: usize,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (streams, buckets) = self.counts();
        f.debug_struct("Registry")
            .field("streams", &streams)
            .field("buckets", &buckets)
            .field("unmatched", &self.unmatched)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// An empty registry reading rules from `config`.
    ///
    /// On the Redis store the reporters of every replica are counted in Redis (entries
    /// older than `ttl`, at least 5 s, are taken for gone), so that the shares of all
    /// replicas together stay within each rule; on the embedded store, this replica's
    /// reporters share each rule alone.
    pub fn new(
        config: SharedConfig,
        default_algorithm: Algorithm,
        unmatched: Unmatched,
        store: &Store,
        clock: Arc<dyn Clock>,
        ttl: Duration,
    ) -> Self {
        let shared = match store {
            Store::Redis(redis) => Some(Shared {
                store: redis.clone(),
                // Unique on a host by the process id, across hosts by the start time.
                replica: format!("{:x}.{}", clock.now(), std::process::id()),
                stale_ms: ttl.max(Duration::from_secs(5)).as_millis() as u64,
                policy: redis.failure_policy(),
            }),
            Store::Memory(_) => None,
        };
        Self {
            state: Mutex::new(State::default()),
            config,
            default_algorithm,
            unmatched,
            refused: Throttle::new(Duration::from_secs(60)),
            stats: Stats::default(),
            shared,
            clock,
            outage_log: Throttle::new(Duration::from_secs(60)),
        }
    }

    /// On Redis: connects and loads the quota scripts ahead of the first report, whose
    /// answer Envoy waits for while it lets every request of the new bucket through.
    pub async fn warm_up(&self) {
        if let Some(shared) = &self.shared {
            let key = format!("{REDIS_PREFIX}{{q:}}warm-up");
            let now_ms = self.clock.now() / 1_000_000;
            let _ = shared
                .store
                .quota_demands(&key, &[], &[], now_ms, shared.stale_ms)
                .await;
            let _ = shared
                .store
                .quota_grant(&key, &[], (0, 0), now_ms, shared.stale_ms)
                .await;
        }
    }

    /// Registers a stream whose assignments go to `outbox`.
    pub fn open(&self, outbox: Outbox) -> StreamId {
        let mut state = self.state.lock();
        state.next += 1;
        let id = state.next;
        state.streams.insert(
            id,
            Stream {
                outbox,
                domain: None,
                buckets: HashSet::new(),
            },
        );
        id
    }

    /// A report of `usages` in `domain` from `stream`: demands updated (in Redis too, where
    /// the shares are shared), shares computed again, assignments queued.
    pub async fn report(&self, stream: StreamId, domain: &str, usages: Vec<Usage>) {
        let changed = self.record(stream, domain, usages);
        if let Some(shared) = &self.shared {
            self.exchange(shared, &changed).await;
        }
        self.decide(Some(stream), &changed).await;
    }

    /// Writes this replica's reporters of `keys` to Redis and reads every replica's: one
    /// script call per bucket.
    async fn exchange(&self, shared: &Shared, keys: &[BucketKey]) {
        let mine = self.local_demands(shared, keys);
        let now_ms = self.clock.now() / 1_000_000;
        let mut read = Vec::with_capacity(keys.len());
        for (key, mine) in keys.iter().zip(&mine) {
            read.push(
                shared
                    .store
                    .quota_demands(&shared.key(key), mine, &[], now_ms, shared.stale_ms)
                    .await,
            );
        }
        self.absorb(shared, keys, read);
    }

    /// Bookkeeping of a report under the lock: the buckets it names (within the stream's
    /// cap), their reporters' demands. Returns the buckets reported.
    fn record(&self, stream: StreamId, domain: &str, usages: Vec<Usage>) -> Vec<BucketKey> {
        self.stats.reports.fetch_add(1, Relaxed);
        let config = self.config.load_full();
        let mut state = self.state.lock();
        if let Some(reloaded) = state.follow(&config, self) {
            state.send(reloaded, &self.stats);
        }
        if let Some(entry) = state.streams.get_mut(&stream) {
            entry.domain.get_or_insert_with(|| domain.to_string());
        }
        let mut changed: Vec<BucketKey> = Vec::new();
        for usage in usages {
            let mut id = usage.id;
            id.sort_unstable();
            let key = BucketKey {
                domain: domain.to_string(),
                id,
            };
            let Some(entry) = state.streams.get_mut(&stream) else {
                break;
            };
            if !entry.buckets.contains(&key) {
                if entry.buckets.len() >= MAX_BUCKETS_PER_STREAM {
                    self.stats.refused_buckets.fetch_add(1, Relaxed);
                    if let Some(suppressed) = self.refused.allow() {
                        warn!(
                            domain,
                            limit = MAX_BUCKETS_PER_STREAM,
                            suppressed,
                            "a quota stream reports more buckets than it may; the others get no assignment"
                        );
                    }
                    continue;
                }
                entry.buckets.insert(key.clone());
            }
            let quota = self.quota(&config, &key);
            let bucket = state.buckets.entry(key.clone()).or_insert_with(|| Bucket {
                quota,
                reporters: BTreeMap::new(),
                others: Vec::new(),
                outage: None,
            });
            self.stats.allowed.fetch_add(usage.allowed, Relaxed);
            self.stats.denied.fetch_add(usage.denied, Relaxed);
            let reporter = bucket.reporters.entry(stream).or_default();
            if usage.seconds > 0 {
                let rps =
                    (usage.allowed.saturating_add(usage.denied)) as f64 / usage.seconds as f64;
                reporter.demand = Some(match reporter.demand {
                    Some(before) => (before + rps) / 2.0,
                    None => rps,
                });
            }
            if !changed.contains(&key) {
                changed.push(key);
            }
        }
        changed
    }

    /// This replica's reporters of each of `keys`, as the shared hash names them.
    fn local_demands(&self, shared: &Shared, keys: &[BucketKey]) -> Vec<Vec<Demand>> {
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
        keys: &[BucketKey],
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
                    if bucket.outage.is_none() {
                        if let Some(suppressed) = self.outage_log.allow() {
                            warn!(
                                error = %e,
                                policy = ?shared.policy,
                                suppressed,
                                "Redis cannot share quota; the failure policy answers"
                            );
                        }
                    }
                    bucket.outage = Some(shared.policy);
                }
            }
        }
    }

    /// Assignments of `keys` computed again and queued; on Redis, first granted within
    /// what the other replicas hold. `stream` (the reporting one) gets every bucket of
    /// `keys` again, changed or not: that renews their time to live.
    async fn decide(&self, stream: Option<StreamId>, keys: &[BucketKey]) {
        let mut outgoing = self.state.lock().rebalance(keys.iter(), self.unmatched);
        if let Some(shared) = &self.shared {
            let reassigned = changed_buckets(&outgoing);
            self.grant(shared, &reassigned, &mut outgoing).await;
        }
        let state = self.state.lock();
        if let Some(stream) = stream {
            let mine = outgoing.entry(stream).or_default();
            for key in keys {
                let Some(bucket) = state.buckets.get(key) else {
                    continue;
                };
                // Redis down under `error`: no assignment, not even a renewal, so that
                // Envoy's time to live and expiry behaviour take over.
                if bucket.outage == Some(FailurePolicy::Error) {
                    continue;
                }
                if let Some(assigned) = bucket.reporters.get(&stream).and_then(|r| r.assigned) {
                    if !mine.iter().any(|(k, _)| k == key) {
                        mine.push((key.clone(), assigned));
                    }
                }
            }
        }
        state.send(outgoing, &self.stats);
    }

    /// Grants this replica's new token-bucket assignments of `keys` in Redis (see
    /// `quota_grant.lua`) and cuts down, in `outgoing` and in the registry, those the
    /// other replicas leave less room for. A grant that fails leaves the assignment as
    /// computed: the next exchange with Redis answers by the failure policy.
    async fn grant(
        &self,
        shared: &Shared,
        keys: &[BucketKey],
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
                .quota_grant(&shared.key(key), &demands, total, now_ms, shared.stale_ms)
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

    /// A stream ended: its shares go back to the other reporters of its buckets (on other
    /// replicas, once they read Redis again).
    pub async fn close(&self, stream: StreamId) {
        let gone = {
            let mut state = self.state.lock();
            let Some(gone) = state.streams.remove(&stream) else {
                return;
            };
            for key in &gone.buckets {
                if let Some(bucket) = state.buckets.get_mut(key) {
                    bucket.reporters.remove(&stream);
                    if bucket.reporters.is_empty() {
                        state.buckets.remove(key);
                    }
                }
            }
            let outgoing = state.rebalance(gone.buckets.iter(), self.unmatched);
            state.send(outgoing, &self.stats);
            gone.buckets
        };
        if let Some(shared) = &self.shared {
            let now_ms = self.clock.now() / 1_000_000;
            let field = [shared.field(stream)];
            for key in &gone {
                // Best effort: an entry left behind goes stale on its own.
                let _ = shared
                    .store
                    .quota_demands(&shared.key(key), &[], &field, now_ms, shared.stale_ms)
                    .await;
            }
        }
    }

    /// Called about once a second: follows a config reload (buckets whose rule changed
    /// are assigned again) and, on Redis, the reporters of the other replicas (a stream
    /// that joined or left there changes the shares here within a second, whatever the
    /// Envoys' reporting interval), keeping this replica's entries fresh meanwhile.
    pub async fn refresh(&self) {
        let config = self.config.load_full();
        {
            let mut state = self.state.lock();
            if let Some(outgoing) = state.follow(&config, self) {
                state.send(outgoing, &self.stats);
            }
        }
        let Some(shared) = &self.shared else {
            return;
        };
        let keys: Vec<BucketKey> = self.state.lock().buckets.keys().cloned().collect();
        if keys.is_empty() {
            return;
        }
        self.exchange(shared, &keys).await;
        self.decide(None, &keys).await;
    }

    /// What the service counted.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The streams and the first `most` buckets, for the operator page.
    pub fn snapshot(&self, most: usize) -> Snapshot {
        let state = self.state.lock();
        let mut streams: Vec<(StreamId, String, usize)> = state
            .streams
            .iter()
            .map(|(&id, s)| (id, s.domain.clone().unwrap_or_default(), s.buckets.len()))
            .collect();
        streams.sort_unstable();
        let mut keys: Vec<&BucketKey> = state.buckets.keys().collect();
        let total_buckets = keys.len();
        if most < keys.len() {
            keys.select_nth_unstable(most);
            keys.truncate(most);
        }
        keys.sort_unstable();
        let buckets = keys
            .into_iter()
            .map(|key| {
                let bucket = &state.buckets[key];
                BucketView {
                    key: key.clone(),
                    quota: bucket.quota,
                    reporters: bucket
                        .reporters
                        .iter()
                        .map(|(&id, r)| (id, r.demand, r.assigned))
                        .collect(),
                }
            })
            .collect();
        Snapshot {
            streams,
            buckets,
            total_buckets,
        }
    }

    /// Open streams and buckets, for the operator page and metrics.
    pub fn counts(&self) -> (usize, usize) {
        let state = self.state.lock();
        (state.streams.len(), state.buckets.len())
    }

    /// The whole quota of the rule `key` matches, if any.
    fn quota(&self, config: &Config, key: &BucketKey) -> Option<Quota> {
        let tree = config.domain(&key.domain)?;
        let id: Vec<(&str, &str)> = key
            .id
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let rule = tree.walk_bucket(&id, 0).rule?;
        Some(quota_of(rule, self.default_algorithm))
    }
}

/// The buckets that `outgoing` assigns anew, each once.
fn changed_buckets(outgoing: &HashMap<StreamId, Assignments>) -> Vec<BucketKey> {
    let mut keys: Vec<BucketKey> = outgoing
        .values()
        .flatten()
        .map(|(key, _)| key.clone())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
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

//! The quota service's state on one replica: the open streams, the buckets they report,
//! each reporter's demand and what it was assigned.
//!
//! Every change goes through one lock, held for bookkeeping only (no await): a report,
//! a stream's end, a config reload. Each computes the bucket's shares again
//! ([`super::share`]) and queues the assignments that changed on the streams concerned;
//! the reporting stream always gets its buckets' assignments again, which renews their
//! time to live (an identical strategy only extends it in Envoy), as does every stream
//! every third of the time to live. Queues are bounded: a stream that does not read loses
//! answers, never the server's memory.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::warn;

use super::quota::{Quota, quota_of};
use crate::clock::Clock;
use crate::config::{Config, SharedConfig};
use crate::rules::Algorithm;
use crate::store::Store;
use crate::store::redis::FailurePolicy;
use crate::throttle::Throttle;

mod shared;
mod state;
mod types;

use shared::Shared;
use state::{Bucket, State, Stream, Turn};
pub use types::{Assignment, BucketView, QuotaKey, Snapshot, Stats, Unmatched, Usage};

/// One stream's identity.
pub type StreamId = u64;

/// Most buckets one stream may report; reports of more are refused (logged).
pub const MAX_BUCKETS_PER_STREAM: usize = 4096;

/// Assignments for one stream, by bucket.
pub type Assignments = Vec<(QuotaKey, Assignment)>;

/// Where a stream's assignments go.
pub type Outbox = mpsc::Sender<Assignments>;

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
    /// Logs a lost subscription to the nudges at most once a minute (apart from
    /// `outage_log`, so that neither hides the other).
    nudge_log: Throttle,
    /// The time to live of assignments (`--rlqs-assignment-ttl-ms`).
    ttl: Duration,
    /// When every assignment was last sent again.
    renewed: Mutex<tokio::time::Instant>,
    /// Held by each exchange with Redis and the decision after it (a report's, a nudge's,
    /// the once-a-second look's), so that they run one at a time. Otherwise a nudge
    /// handled while a report's grant is in flight decides on the demands of before the
    /// grant, and the grant's reply then applies a cut that the nudge had found no longer
    /// needed: the cut stays, and nothing nudges again.
    rounds: tokio::sync::Mutex<()>,
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
            nudge_log: Throttle::new(Duration::from_secs(60)),
            ttl,
            renewed: Mutex::new(tokio::time::Instant::now()),
            rounds: tokio::sync::Mutex::new(()),
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
        let _round = self.rounds.lock().await;
        if let Some(shared) = &self.shared {
            self.exchange(shared, &changed).await;
        }
        self.decide(Some(stream), &changed).await;
    }

    /// Bookkeeping of a report under the lock: the buckets it names (within the stream's
    /// cap), their reporters' demands. Returns the buckets reported.
    fn record(&self, stream: StreamId, domain: &str, usages: Vec<Usage>) -> Vec<QuotaKey> {
        self.stats.reports.fetch_add(1, Relaxed);
        let config = self.config.load_full();
        let mut state = self.state.lock();
        if let Some(reloaded) = state.follow(&config, self) {
            state.send(reloaded, &self.stats);
        }
        if let Some(entry) = state.streams.get_mut(&stream) {
            entry.domain.get_or_insert_with(|| domain.to_string());
        }
        let mut changed: Vec<QuotaKey> = Vec::new();
        for usage in usages {
            let mut id = usage.id;
            id.sort_unstable();
            let key = QuotaKey {
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

    /// Assignments of `keys` computed again and queued; on Redis, first granted within
    /// what the other replicas hold. `stream` (the reporting one) gets every bucket of
    /// `keys` again, changed or not: that renews their time to live.
    async fn decide(&self, stream: Option<StreamId>, keys: &[QuotaKey]) {
        let turn = self.turn();
        let mut outgoing = self
            .state
            .lock()
            .rebalance(keys.iter(), self.unmatched, &turn);
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
                if let Some(assigned) = bucket.reporters.get(&stream).and_then(|r| r.assigned)
                    && !mine.iter().any(|(k, _)| k == key)
                {
                    mine.push((key.clone(), assigned));
                }
            }
        }
        state.send(outgoing, &self.stats);
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
            let outgoing = state.rebalance(gone.buckets.iter(), self.unmatched, &self.turn());
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
            // Every third of the time to live, every assignment again: Envoy may report less often
            // than the time to live (every 5 s in the tests, whatever its interval says),
            // and an assignment must outlive a live meshlimit's silences.
            let now = tokio::time::Instant::now();
            let mut renewed = self.renewed.lock();
            // A third, not a half: the ticks that call this slip under load.
            if now.duration_since(*renewed) >= self.ttl / 3 {
                *renewed = now;
                let renewals = state.everything();
                state.send(renewals, &self.stats);
            }
        }
        let Some(shared) = &self.shared else {
            // The embedded store: crowded buckets change hands when their turn ends (on
            // Redis, every bucket is decided again below).
            let crowded: Vec<QuotaKey> = {
                let state = self.state.lock();
                state
                    .buckets
                    .iter()
                    .filter(|(_, b)| b.quota.is_some_and(|q| q.is_crowded(b.reporters.len())))
                    .map(|(key, _)| key.clone())
                    .collect()
            };
            if !crowded.is_empty() {
                let _round = self.rounds.lock().await;
                self.decide(None, &crowded).await;
            }
            return;
        };
        let _round = self.rounds.lock().await;
        let keys: Vec<QuotaKey> = self.state.lock().buckets.keys().cloned().collect();
        if keys.is_empty() {
            return;
        }
        self.exchange(shared, &keys).await;
        self.decide(None, &keys).await;
    }

    /// The turn of crowded buckets now, with this replica's name for the ranking.
    fn turn(&self) -> Turn<'_> {
        let replica = self.shared.as_ref().map_or("", |s| s.replica.as_str());
        Turn::at(self.clock.now(), replica)
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
        let mut keys: Vec<&QuotaKey> = state.buckets.keys().collect();
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
    fn quota(&self, config: &Config, key: &QuotaKey) -> Option<Quota> {
        let tree = config.domain(&key.domain)?;
        let id: Vec<(&str, &str)> = key
            .id
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let rule = tree.walk_quota_bucket(&id, 0).rule?;
        Some(quota_of(rule, self.default_algorithm))
    }
}

/// The buckets that `outgoing` assigns anew, each once.
fn changed_buckets(outgoing: &HashMap<StreamId, Assignments>) -> Vec<QuotaKey> {
    let mut keys: Vec<QuotaKey> = outgoing
        .values()
        .flatten()
        .map(|(key, _)| key.clone())
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

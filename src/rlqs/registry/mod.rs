//! The quota service's state on one replica: the open streams, the buckets they report,
//! each reporter's demand and what it was assigned.
//!
//! Every change goes through one lock, held for bookkeeping only (no await): a report,
//! a stream's end, a config reload. Each computes the bucket's shares again
//! ([`super::share`]) and queues the assignments that changed on the streams concerned;
//! the reporting stream always gets its buckets' assignments again, which renews their
//! time to live (an identical strategy only extends it in Envoy). Queues are bounded: a
//! stream that does not read loses answers, never the server's memory.

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::warn;

use super::quota::{Quota, quota_of};
use super::share::Share;
use crate::config::{Config, SharedConfig};
use crate::rules::Algorithm;
use crate::throttle::Throttle;

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
    pub fn new(config: SharedConfig, default_algorithm: Algorithm, unmatched: Unmatched) -> Self {
        Self {
            state: Mutex::new(State::default()),
            config,
            default_algorithm,
            unmatched,
            refused: Throttle::new(Duration::from_secs(60)),
            stats: Stats::default(),
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

    /// A report of `usages` in `domain` from `stream`: demands updated, shares computed
    /// again, assignments queued.
    pub fn report(&self, stream: StreamId, domain: &str, usages: Vec<Usage>) {
        self.stats.reports.fetch_add(1, Relaxed);
        let config = self.config.load_full();
        let mut state = self.state.lock();
        if let Some(reloaded) = state.follow(&config, self) {
            state.send(reloaded, &self.stats);
        }
        if let Some(entry) = state.streams.get_mut(&stream) {
            entry.domain.get_or_insert_with(|| domain.to_string());
        }
        let mut changed: HashSet<BucketKey> = HashSet::new();
        for usage in usages {
            let mut id = usage.id;
            id.sort_unstable();
            let key = BucketKey {
                domain: domain.to_string(),
                id,
            };
            let Some(entry) = state.streams.get_mut(&stream) else {
                return;
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
            changed.insert(key);
        }
        let mut outgoing = state.rebalance(changed.iter(), self.unmatched);
        // The reporting stream gets every bucket it reported, changed or not: that renews
        // the assignments' time to live.
        let mine = outgoing.entry(stream).or_default();
        for key in &changed {
            if let Some(assigned) = state
                .buckets
                .get(key)
                .and_then(|b| b.reporters.get(&stream))
                .and_then(|r| r.assigned)
            {
                if !mine.iter().any(|(k, _)| k == key) {
                    mine.push((key.clone(), assigned));
                }
            }
        }
        state.send(outgoing, &self.stats);
    }

    /// A stream ended: its shares go back to the other reporters of its buckets.
    pub fn close(&self, stream: StreamId) {
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
    }

    /// Follows a config reload: buckets whose rule changed are assigned again. Called
    /// about once a second.
    pub fn refresh(&self) {
        let config = self.config.load_full();
        let mut state = self.state.lock();
        if let Some(outgoing) = state.follow(&config, self) {
            state.send(outgoing, &self.stats);
        }
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

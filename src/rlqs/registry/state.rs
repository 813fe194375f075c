//! The registry's bookkeeping under its lock: streams, buckets, reporters, and computing a
//! bucket's assignments again.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::super::quota::Quota;
use super::super::share::{TURN_SECONDS, rank, settle, split};
use super::{Assignment, Assignments, Outbox, QuotaKey, Registry, Stats, StreamId, Unmatched};
use crate::config::Config;
use crate::store::redis::{Demand, FailurePolicy};

/// Which turn a crowded bucket's burst is in (see [`crate::rlqs::share`]), and how this
/// replica's streams are named for the ranking: as their fields in Redis, so that every
/// replica ranks them alike.
pub(super) struct Turn<'r> {
    /// Whole [`TURN_SECONDS`] since the epoch.
    pub(super) number: u64,
    /// This replica's prefix of its streams' names ("" on the embedded store).
    pub(super) replica: &'r str,
}

impl<'r> Turn<'r> {
    /// The turn at `now` (nanoseconds since the epoch) for `replica`.
    pub(super) fn at(now: u64, replica: &'r str) -> Self {
        Self {
            number: now / (TURN_SECONDS * 1_000_000_000),
            replica,
        }
    }

    /// The name `stream` ranks by: its field in a bucket's Redis hash.
    fn name(&self, stream: StreamId) -> String {
        field_of(self.replica, stream)
    }
}

/// The name of `stream` of `replica`: its field in a bucket's Redis hash.
pub(super) fn field_of(replica: &str, stream: StreamId) -> String {
    format!("{replica}/{stream}")
}

/// Everything the registry's lock guards.
#[derive(Default)]
pub(super) struct State {
    /// The last stream id handed out.
    pub(super) next: StreamId,
    pub(super) streams: HashMap<StreamId, Stream>,
    pub(super) buckets: HashMap<QuotaKey, Bucket>,
    /// The config the buckets' quotas were read from.
    pub(super) seen: Option<Arc<Config>>,
}

/// An open stream.
pub(super) struct Stream {
    /// Where its assignments are queued.
    pub(super) outbox: Outbox,
    /// The stream's domain, from its first report.
    pub(super) domain: Option<String>,
    /// The buckets it reported.
    pub(super) buckets: HashSet<QuotaKey>,
}

/// A bucket some stream reports.
pub(super) struct Bucket {
    /// The matching rule's whole quota; `None`: no rule matches.
    pub(super) quota: Option<Quota>,
    /// The streams reporting it, in a stable order.
    pub(super) reporters: BTreeMap<StreamId, Reporter>,
    /// The demands of its reporters on other replicas, as Redis last said (empty on the
    /// embedded store).
    pub(super) others: Vec<Demand>,
    /// Redis could not be read for it: the failure policy answers.
    pub(super) outage: Option<FailurePolicy>,
}

/// One stream's view of a bucket.
#[derive(Default)]
pub(super) struct Reporter {
    /// Requests per second, smoothed; `None` until a report covers some time.
    pub(super) demand: Option<f64>,
    pub(super) assigned: Option<Assignment>,
}

impl State {
    /// After a reload (`config` not the one seen): every bucket's quota read again, and the
    /// assignments that changed; `None` when the config is the one seen.
    pub(super) fn follow(
        &mut self,
        config: &Arc<Config>,
        registry: &Registry,
    ) -> Option<HashMap<StreamId, Assignments>> {
        if self
            .seen
            .as_ref()
            .is_some_and(|seen| Arc::ptr_eq(seen, config))
        {
            return None;
        }
        self.seen = Some(config.clone());
        let mut changed = Vec::new();
        for (key, bucket) in &mut self.buckets {
            let quota = registry.quota(config, key);
            if quota != bucket.quota {
                bucket.quota = quota;
                changed.push(key.clone());
            }
        }
        let turn = registry.turn();
        Some(self.rebalance(changed.iter(), registry.unmatched, &turn))
    }

    /// The assignments of `keys`' buckets computed again, in `turn` (see [`Turn`]); those
    /// that changed, by stream.
    pub(super) fn rebalance<'k>(
        &mut self,
        keys: impl Iterator<Item = &'k QuotaKey>,
        unmatched: Unmatched,
        turn: &Turn<'_>,
    ) -> HashMap<StreamId, Assignments> {
        let mut outgoing: HashMap<StreamId, Assignments> = HashMap::new();
        for key in keys {
            let Some(bucket) = self.buckets.get_mut(key) else {
                continue;
            };
            let n = bucket.reporters.len();
            let fresh: Vec<Assignment> = match (bucket.outage, bucket.quota) {
                // No new assignment: Envoy's time to live and expiry behaviour take over.
                (Some(FailurePolicy::Error), _) => continue,
                (Some(FailurePolicy::Allow), _) => vec![Assignment::Blanket(true); n],
                (_, None) => vec![Assignment::Blanket(unmatched == Unmatched::Allow); n],
                (_, Some(Quota::AllowAll)) => vec![Assignment::Blanket(true); n],
                (_, Some(Quota::DenyAll)) => vec![Assignment::Blanket(false); n],
                (outage, Some(quota)) => {
                    // This replica's reporters first, then the others' (none under `local`
                    // while Redis is down: this replica's own shares).
                    let others: &[Demand] = if outage == Some(FailurePolicy::Local) {
                        &[]
                    } else {
                        &bucket.others
                    };
                    let demands: Vec<Option<f64>> = bucket
                        .reporters
                        .values()
                        .map(|r| r.demand)
                        .chain(others.iter().map(|d| d.demand))
                        .collect();
                    let ranks: Vec<u64> = if quota.is_crowded(demands.len()) {
                        bucket
                            .reporters
                            .keys()
                            .map(|&stream| rank(&turn.name(stream), turn.number))
                            .chain(others.iter().map(|d| rank(&d.field, turn.number)))
                            .collect()
                    } else {
                        Vec::new()
                    };
                    // What the other replicas hold is left to the grant in Redis
                    // (`Registry::grant`), which cuts these down atomically.
                    split(quota, &demands, &ranks)
                        .into_iter()
                        .zip(bucket.reporters.values())
                        .map(|(share, reporter)| {
                            let current = match reporter.assigned {
                                Some(Assignment::TokenBucket(s)) => Some(s),
                                _ => None,
                            };
                            let share = settle(current, share);
                            if share.max_tokens == 0 {
                                Assignment::Blanket(false)
                            } else {
                                Assignment::TokenBucket(share)
                            }
                        })
                        .collect()
                }
            };
            for ((&stream, reporter), assignment) in bucket.reporters.iter_mut().zip(fresh) {
                if reporter.assigned != Some(assignment) {
                    reporter.assigned = Some(assignment);
                    outgoing
                        .entry(stream)
                        .or_default()
                        .push((key.clone(), assignment));
                }
            }
        }
        outgoing
    }

    /// Every current assignment, by stream, but for buckets Redis cannot answer for under
    /// `--redis-failure error` (those are left to run out their time to live).
    pub(super) fn everything(&self) -> HashMap<StreamId, Assignments> {
        let mut all: HashMap<StreamId, Assignments> = HashMap::new();
        for (key, bucket) in &self.buckets {
            if bucket.outage == Some(FailurePolicy::Error) {
                continue;
            }
            for (&stream, reporter) in &bucket.reporters {
                if let Some(assigned) = reporter.assigned {
                    all.entry(stream).or_default().push((key.clone(), assigned));
                }
            }
        }
        all
    }

    /// Queues `outgoing` on the streams' outboxes, without waiting: a full outbox (a
    /// stream that does not read) drops the message; the next report renews it.
    pub(super) fn send(&self, outgoing: HashMap<StreamId, Assignments>, stats: &Stats) {
        for (stream, assignments) in outgoing {
            if assignments.is_empty() {
                continue;
            }
            if let Some(entry) = self.streams.get(&stream) {
                let count = assignments.len() as u64;
                match entry.outbox.try_send(assignments) {
                    Ok(()) => stats.assignments.fetch_add(count, Relaxed),
                    Err(_) => stats.dropped.fetch_add(1, Relaxed),
                };
            }
        }
    }
}

//! The registry without gRPC: shares across streams, a stream's end, reloads, bounds.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tokio::sync::mpsc;

use super::registry::{
    Assignment, Assignments, MAX_BUCKETS_PER_STREAM, QuotaKey, Registry, Unmatched, Usage,
};
use super::share::TURN_SECONDS;
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::config::{Config, SharedConfig};
use crate::rules::Algorithm;
use crate::store::{MemoryStore, Store};
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

const EDGE: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 20}
";

fn config(yaml: &str) -> Config {
    Config::from_sources(&[("edge.yaml".into(), yaml.to_string())]).expect("a valid config")
}

fn registry(yaml: &str) -> (Registry, SharedConfig) {
    registry_on(yaml, Arc::new(SystemClock))
}

fn registry_on(yaml: &str, clock: Arc<dyn Clock>) -> (Registry, SharedConfig) {
    let shared: SharedConfig = Arc::new(ArcSwap::from_pointee(config(yaml)));
    let store = Store::Memory(MemoryStore::new(1000, clock.clone()));
    let registry = Registry::new(
        shared.clone(),
        Algorithm::TokenBucket,
        Unmatched::Deny,
        &store,
        clock,
        Duration::from_secs(10),
    );
    (registry, shared)
}

fn usage(user: &str, seconds: u64, requests: u64) -> Usage {
    Usage {
        id: vec![("user".into(), user.into())],
        seconds,
        allowed: requests,
        denied: 0,
    }
}

/// Everything queued on `rx` so far, the latest assignment per bucket.
fn latest(rx: &mut mpsc::Receiver<Assignments>) -> Vec<(QuotaKey, Assignment)> {
    let mut out: Vec<(QuotaKey, Assignment)> = Vec::new();
    while let Ok(batch) = rx.try_recv() {
        for (key, assignment) in batch {
            out.retain(|(k, _)| *k != key);
            out.push((key, assignment));
        }
    }
    out
}

fn rate(assignment: Assignment) -> f64 {
    match assignment {
        Assignment::TokenBucket(share) => share.per_second(),
        Assignment::Blanket(_) => panic!("a token bucket, not {assignment:?}"),
    }
}

#[tokio::test]
async fn two_streams_share_a_bucket_and_one_leaving_gives_its_share_back() {
    let (registry, _) = registry(EDGE);
    let (tx_a, mut rx_a) = mpsc::channel(16);
    let (tx_b, mut rx_b) = mpsc::channel(16);
    let (a, b) = (registry.open(tx_a), registry.open(tx_b));
    registry.report(a, "edge", vec![usage("u", 0, 1)]).await;
    assert_eq!(rate(latest(&mut rx_a)[0].1), 20.0, "alone, the whole rate");
    registry.report(b, "edge", vec![usage("u", 0, 1)]).await;
    let (share_a, share_b) = (rate(latest(&mut rx_a)[0].1), rate(latest(&mut rx_b)[0].1));
    assert_eq!((share_a, share_b), (10.0, 10.0));
    registry.close(b).await;
    assert_eq!(rate(latest(&mut rx_a)[0].1), 20.0, "b's share came back");
    assert_eq!(registry.counts(), (1, 1));
    registry.close(a).await;
    assert_eq!(registry.counts(), (0, 0));
}

#[tokio::test]
async fn a_reload_reassigns_and_an_unmatched_bucket_follows_the_policy() {
    let (registry, shared) = registry(EDGE);
    let (tx, mut rx) = mpsc::channel(16);
    let stream = registry.open(tx);
    registry
        .report(stream, "edge", vec![usage("u", 0, 1), usage("v", 0, 1)])
        .await;
    assert_eq!(latest(&mut rx).len(), 2);
    // Unchanged config: nothing to send.
    registry.refresh().await;
    assert!(latest(&mut rx).is_empty());
    shared.store(Arc::new(config(&EDGE.replace("20}", "0}"))));
    registry.refresh().await;
    let sent = latest(&mut rx);
    assert_eq!(sent.len(), 2);
    assert!(
        sent.iter().all(|(_, a)| *a == Assignment::Blanket(false)),
        "{sent:?}"
    );
    // The domain gone: unmatched, answered as --rlqs-unmatched says (deny here).
    shared.store(Arc::new(config("domain: other\ndescriptors: []\n")));
    registry.refresh().await;
    assert!(latest(&mut rx).is_empty(), "DENY_ALL already");
    shared.store(Arc::new(config(EDGE)));
    registry.refresh().await;
    assert!(latest(&mut rx).iter().all(|(_, a)| rate(*a) == 20.0));
}

/// One token a minute between two Envoys that both want it: each turn one holds it and the
/// other is refused, never both, and both get turns.
#[tokio::test]
async fn a_burst_too_small_to_split_changes_hands_by_turns() {
    const ONE_TOKEN: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1}
";
    let clock = ManualClock::new(1_000_000_000_000);
    let (registry, _) = registry_on(ONE_TOKEN, Arc::new(clock.clone()));
    let (tx_a, mut rx_a) = mpsc::channel(64);
    let (tx_b, mut rx_b) = mpsc::channel(64);
    let (a, b) = (registry.open(tx_a), registry.open(tx_b));
    registry.report(a, "edge", vec![usage("u", 1, 5)]).await;
    registry.report(b, "edge", vec![usage("u", 1, 5)]).await;
    let holds = |assignment: Option<Assignment>| matches!(assignment, Some(Assignment::TokenBucket(share)) if share.max_tokens == 1);
    let (mut now_a, mut now_b) = (None, None);
    let mut turns = [0; 2];
    for _ in 0..20 {
        clock.advance(Duration::from_secs(TURN_SECONDS));
        registry.refresh().await;
        now_a = latest(&mut rx_a).pop().map(|(_, a)| a).or(now_a);
        now_b = latest(&mut rx_b).pop().map(|(_, a)| a).or(now_b);
        assert!(
            holds(now_a) != holds(now_b),
            "one of the two holds the token: {now_a:?} {now_b:?}"
        );
        turns[usize::from(holds(now_b))] += 1;
    }
    assert!(turns[0] >= 3 && turns[1] >= 3, "both take turns: {turns:?}");
}

#[tokio::test]
async fn a_stream_reporting_too_many_buckets_is_refused_the_rest() {
    let (registry, _) = registry(EDGE);
    let (tx, _rx) = mpsc::channel(1);
    let stream = registry.open(tx);
    let many: Vec<Usage> = (0..=MAX_BUCKETS_PER_STREAM)
        .map(|i| usage(&i.to_string(), 0, 1))
        .collect();
    registry.report(stream, "edge", many).await;
    assert_eq!(registry.counts(), (1, MAX_BUCKETS_PER_STREAM));
    assert_eq!(registry.stats().refused_buckets.load(Relaxed), 1);
}

#[tokio::test]
async fn a_stream_that_does_not_read_loses_messages_not_memory() {
    let (registry, _) = registry(EDGE);
    let (tx, _rx) = mpsc::channel(1);
    let stream = registry.open(tx);
    for _ in 0..5 {
        registry
            .report(stream, "edge", vec![usage("u", 1, 3)])
            .await;
    }
    assert_eq!(registry.stats().dropped.load(Relaxed), 4);
    assert_eq!(registry.stats().reports.load(Relaxed), 5);
    assert_eq!(registry.stats().allowed.load(Relaxed), 15);
}

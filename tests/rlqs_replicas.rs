//! The quota service's replicas meeting in one real Redis, without Envoy or gRPC: what one
//! replica's grant changes reaches the others through the nudges
//! (`store/redis/quota_nudges.rs`), not only at their once-a-second look at Redis.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use arc_swap::ArcSwap;
use meshlimit::clock::{Clock, SystemClock};
use meshlimit::config::Config;
use meshlimit::rlqs::registry::{Assignment, Assignments, Usage};
use meshlimit::rlqs::{Registry, Unmatched};
use meshlimit::rules::Algorithm;
use meshlimit::store::redis::{QUOTA_NUDGES, RedisOptions};
use meshlimit::store::{RedisStore, Store};
use support::redis::{RedisCluster, RedisServer};
use tokio::sync::mpsc;

const EDGE: &str = "
domain: edge
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 20}
";

/// The longest any step below may take; the nudges take milliseconds.
const PATIENCE: Duration = Duration::from_secs(15);

/// A replica's quota service on the Redis at `url`.
fn replica(url: &str) -> Arc<Registry> {
    let config = Config::from_sources(&[(PathBuf::from("edge.yaml"), EDGE.to_string())])
        .expect("a valid config");
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let options = RedisOptions {
        timeout: Duration::from_secs(10),
        ..RedisOptions::new(url)
    };
    let store = RedisStore::new(options, clock.clone()).expect("a valid URL");
    Arc::new(Registry::new(
        Arc::new(ArcSwap::from_pointee(config)),
        Algorithm::TokenBucket,
        Unmatched::Deny,
        &Store::Redis(store),
        clock,
        Duration::from_secs(10),
    ))
}

/// A report of `requests` on user `u`'s bucket over the last second.
fn usage(requests: u64) -> Vec<Usage> {
    vec![Usage {
        id: vec![("user".into(), "u".into())],
        seconds: 1,
        allowed: requests,
        denied: 0,
    }]
}

/// Requests a second of a token-bucket assignment; 0 for `DENY_ALL`.
fn rate(assignment: Assignment) -> f64 {
    match assignment {
        Assignment::TokenBucket(share) => share.per_second(),
        Assignment::Blanket(false) => 0.0,
        Assignment::Blanket(true) => panic!("ALLOW_ALL for a bucket with a limit"),
    }
}

/// The next assignment on `rx` whose rate `wanted` accepts, within [`PATIENCE`]; the
/// assignments before it are passed over.
async fn until(
    rx: &mut mpsc::Receiver<Assignments>,
    what: &str,
    wanted: impl Fn(f64) -> bool,
) -> f64 {
    let found = tokio::time::timeout(PATIENCE, async {
        loop {
            let batch = rx.recv().await.expect("the registry keeps the stream");
            for (_, assignment) in batch {
                let rate = rate(assignment);
                if wanted(rate) {
                    return rate;
                }
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("no assignment {what} within {PATIENCE:?}"))
}

/// Waits until `n` connections follow the nudges' channel, on `nodes` together (plain
/// `redis://` URLs: a Cluster's subscribers each sit on one node).
async fn subscribed(nodes: &[String], n: i64) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let mut count = 0;
        for node in nodes {
            let client = redis::Client::open(node.as_str()).expect("a valid URL");
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .expect("Redis answers");
            let (_, here): (String, i64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(QUOTA_NUDGES)
                .query_async(&mut conn)
                .await
                .expect("PUBSUB NUMSUB");
            count += here;
        }
        if count >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{count} of {n} replicas subscribed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One replica's Envoy holds the whole rule when a quiet one reports on another replica:
/// the newcomer's grant is cut, which makes the first replica shrink at once, which lets
/// the newcomer be granted its share; when the newcomer's stream ends, its share goes back
/// at once. Nothing else runs (no once-a-second look at Redis), so without the nudges
/// the newcomer would wait for ever, and so would the busy Envoy for its share.
async fn a_newcomer_is_granted_its_share_at_once(url: &str, nodes: &[String]) {
    let (one, two) = (replica(url), replica(url));
    let followers: Vec<_> = [&one, &two]
        .into_iter()
        .map(|registry| {
            let registry = registry.clone();
            tokio::spawn(async move { registry.follow_nudges().await })
        })
        .collect();
    subscribed(nodes, 2).await;

    let (busy_tx, mut busy) = mpsc::channel(64);
    let busy_stream = one.open(busy_tx);
    one.report(busy_stream, "edge", usage(100)).await;
    let alone = until(&mut busy, "for the busy Envoy", |_| true).await;
    assert_eq!(alone, 20.0, "alone, the busy Envoy gets the whole rule");

    let (quiet_tx, mut quiet) = mpsc::channel(64);
    let quiet_stream = two.open(quiet_tx);
    two.report(quiet_stream, "edge", usage(2)).await;
    // Its demand and half of it again as headroom, once the busy replica has shrunk.
    let granted = until(&mut quiet, "of 3/s for the quiet Envoy", |r| r >= 3.0).await;
    let shrunk = until(&mut busy, "below 20/s for the busy Envoy", |r| r < 20.0).await;
    assert!(
        granted + shrunk <= 20.0,
        "the shares stay within the rule: {granted} + {shrunk}"
    );
    assert!(
        one.stats().nudges.load(Relaxed) >= 1,
        "the busy replica was nudged"
    );
    assert!(
        two.stats().nudges.load(Relaxed) >= 1,
        "the quiet replica was nudged back"
    );

    // The quiet Envoy's stream ends: its share returns to the busy one at once too.
    let before = one.stats().nudges.load(Relaxed);
    two.close(quiet_stream).await;
    let back = until(&mut busy, "of the whole rule for the busy Envoy", |r| {
        r == 20.0
    })
    .await;
    assert_eq!(back, 20.0);
    assert!(
        one.stats().nudges.load(Relaxed) > before,
        "nudged by the stream's end"
    );
    for follower in followers {
        follower.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_newcomer_cut_by_another_replica_is_granted_its_share_at_once() {
    let redis = RedisServer::start();
    a_newcomer_is_granted_its_share_at_once(&redis.url(), &[redis.url()]).await;
}

/// The same on a three-master Cluster: the grant publishes on the bucket's node, and the
/// Cluster carries it to subscribers on any node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_too() {
    let cluster = RedisCluster::start(3);
    let nodes: Vec<String> = cluster
        .nodes
        .iter()
        .map(|node| format!("redis://{}", node.addr()))
        .collect();
    a_newcomer_is_granted_its_share_at_once(&cluster.url(), &nodes).await;
}

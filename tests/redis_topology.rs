//! The Redis store in process against the other Redis topologies: a 3-master Redis Cluster
//! (exact limits across replicas, all-or-nothing multi-descriptor requests, keys of one
//! domain on one node while domains spread over the nodes, scripts flushed on every node)
//! and a Sentinel setup failing over while traffic runs.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::SystemClock;
use meshlimit::config::Config;
use meshlimit::error::RequestError;
use meshlimit::request::{Descriptor, Request};
use meshlimit::service::{Answer, Service};
use meshlimit::store::redis::RedisOptions;
use support::redis::{RedisCluster, RedisSentinel};

/// Limits of the domain `shared`; each of [`DOMAINS`] has `k` (1000/day) and `two` (2/day).
/// Day limits: no token refills within a test.
const SHARED: &str = "
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 50}
  - key: tight
    rate_limit: {unit: day, requests_per_unit: 30}
  - key: twenty
    rate_limit: {unit: day, requests_per_unit: 20}
  - key: big
    rate_limit: {unit: day, requests_per_unit: 1000000}
";

/// Domains besides `shared`, to spread keys over the cluster's nodes.
const DOMAINS: [&str; 9] = [
    "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
];

fn config() -> Config {
    let mut sources = vec![(PathBuf::from("shared.yaml"), SHARED.to_string())];
    for domain in DOMAINS {
        let text = format!(
            "domain: {domain}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: day, requests_per_unit: 1000}}\n  - key: two\n    rate_limit: {{unit: day, requests_per_unit: 2}}\n"
        );
        sources.push((PathBuf::from(format!("{domain}.yaml")), text));
    }
    Config::from_sources(&sources).expect("valid config")
}

/// One replica: a service with its own Redis store (connection and caches) on `url`.
fn replica(url: &str, timeout: Duration) -> Arc<Service> {
    let options = RedisOptions {
        timeout,
        ..RedisOptions::new(url)
    };
    Arc::new(support::redis_replica(
        config(),
        Arc::new(SystemClock),
        options,
    ))
}

fn replicas(url: &str, n: usize, timeout: Duration) -> Vec<Arc<Service>> {
    (0..n).map(|_| replica(url, timeout)).collect()
}

async fn ask(
    service: &Service,
    domain: &str,
    entries: &[(&str, &str)],
) -> Result<Answer, RequestError> {
    service
        .should_rate_limit(Request::new(domain, &[Descriptor::new(entries)], 0))
        .await
}

async fn passes(service: &Service, domain: &str, entries: &[(&str, &str)]) -> bool {
    !ask(service, domain, entries)
        .await
        .expect("decided")
        .over_limit
}

/// The bucket key of a one-entry descriptor (see `meshlimit::bucket_key`).
fn bucket_key(domain: &str, key: &str, value: &str) -> String {
    let part = |s: &str| format!("{}:{s}", s.len());
    format!("{}{}{}", part(domain), part(key), part(value))
}

/// Every key each node holds (`redis-cli --scan`), by node index.
fn keys_by_node(cluster: &RedisCluster) -> Vec<BTreeSet<String>> {
    cluster
        .nodes
        .iter()
        .map(|node| {
            node.cli(&["--scan"])
                .lines()
                // Not the store's probe and marker keys (`ml1:probe{N}`, `ml1:alive{N}`), only buckets.
                .filter(|key| key.starts_with("ml1:{"))
                .map(str::to_string)
                .collect()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_replicas_admit_exactly_the_limit_all_or_nothing() {
    let cluster = RedisCluster::start(3);
    let replicas = replicas(&cluster.url(), 3, Duration::from_secs(10));

    // Three replicas, each with its own cluster connection.
    support::assert_one_limit_across(&replicas).await;

    // The request's two keys share one slot (the domain is the hash tag).
    let user = BucketKey::from(bucket_key("shared", "user", "b").as_str()).redis_key("");
    let tight = BucketKey::from(bucket_key("shared", "tight", "b").as_str()).redis_key("");
    let node = cluster.node_for_key(&user);
    assert_eq!(cluster.node_for_key(&tight), node);
    let held = keys_by_node(&cluster);
    assert!(
        held[node].contains(&user),
        "{user} not on node {node}: {held:?}"
    );
    assert!(
        held[node].contains(&tight),
        "{tight} not on node {node}: {held:?}"
    );
    for r in &replicas {
        assert_eq!(
            support::redis_stats(r).errors,
            0,
            "{:?}",
            support::redis_stats(r)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_spreads_domains_keeps_each_on_one_node_and_survives_script_flush() {
    let cluster = RedisCluster::start(3);
    let replicas = replicas(&cluster.url(), 2, Duration::from_secs(10));

    // Five buckets in each of nine domains, through both replicas.
    let values = ["v0", "v1", "v2", "v3", "v4"];
    for (i, domain) in DOMAINS.iter().enumerate() {
        for value in values {
            let service = &replicas[i % 2];
            assert!(
                passes(service, domain, &[("k", value)]).await,
                "{domain}/{value}"
            );
        }
    }

    let held = keys_by_node(&cluster);
    let mut nodes_of_domain: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    let mut total = 0;
    for (node, keys) in held.iter().enumerate() {
        for key in keys {
            total += 1;
            let domain = DOMAINS
                .iter()
                .find(|d| key.starts_with(&format!("ml1:{{{}:{d}}}", d.len())))
                .unwrap_or_else(|| panic!("unexpected key {key:?} on node {node}"));
            nodes_of_domain.entry(domain).or_default().insert(node);
            assert_eq!(cluster.node_for_key(key), node, "{key}");
        }
    }
    assert_eq!(total, DOMAINS.len() * values.len(), "{held:?}");
    for (domain, nodes) in &nodes_of_domain {
        assert_eq!(nodes.len(), 1, "{domain} is spread over nodes {nodes:?}");
    }
    let used: BTreeSet<usize> = nodes_of_domain.values().flatten().copied().collect();
    assert!(
        used.len() > 1,
        "every domain on one node: {nodes_of_domain:?}"
    );
    // The keys are where the store's public key format says.
    for domain in DOMAINS {
        let key = BucketKey::from(bucket_key(domain, "k", "v0").as_str()).redis_key("");
        assert!(held[cluster.node_for_key(&key)].contains(&key), "{key}");
    }

    // One of two in each domain's `two` bucket, then the scripts go from every node: the
    // next requests reload them (NOSCRIPT) and still see the buckets' state.
    for domain in DOMAINS {
        assert!(
            passes(&replicas[0], domain, &[("two", "x")]).await,
            "{domain}"
        );
    }
    for node in &cluster.nodes {
        assert_eq!(node.cli(&["SCRIPT", "FLUSH"]), "OK");
    }
    for domain in DOMAINS {
        assert!(
            passes(&replicas[1], domain, &[("two", "x")]).await,
            "{domain}"
        );
        assert!(
            !passes(&replicas[0], domain, &[("two", "x")]).await,
            "{domain}"
        );
    }
    for r in &replicas {
        assert_eq!(
            support::redis_stats(r).errors,
            0,
            "NOSCRIPT counted as an error: {:?}",
            support::redis_stats(r)
        );
        assert!(r.store().health().is_healthy());
    }
}

/// Phases of the failover test, as the traffic tasks see them.
const BEFORE: usize = 0;
const FIRST_FAILOVER: usize = 1;
const AFTER_FIRST: usize = 2;
const SECOND_FAILOVER: usize = 3;
const AFTER_SECOND: usize = 4;
const PHASES: usize = 5;

/// What one traffic task got, by phase.
#[derive(Default)]
struct Tally {
    decided: [AtomicUsize; PHASES],
    store_errors: [AtomicUsize; PHASES],
    /// Store errors after this task's first decision in a phase where Redis is stable.
    relapses: AtomicUsize,
    /// The distinct store error messages, port numbers blanked.
    messages: std::sync::Mutex<BTreeSet<String>>,
}

impl Tally {
    fn decided(&self, phase: usize) -> usize {
        self.decided[phase].load(Ordering::Acquire)
    }
}

/// Background traffic on `service` until `stop` (at most 4000 requests): every answer
/// must be a decision or a store error, and none may take long (the store's timeout is
/// 1 s; 5 s means it hung).
fn traffic(
    t: usize,
    service: Arc<Service>,
    phase: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    tallies: Arc<Vec<Tally>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let value = format!("bg{t}");
        let tally = &tallies[t];
        for _ in 0..4000 {
            if stop.load(Ordering::Acquire) {
                break;
            }
            let p = phase.load(Ordering::Acquire);
            let answer = tokio::time::timeout(
                Duration::from_secs(5),
                ask(&service, "shared", &[("big", &value)]),
            )
            .await
            .unwrap_or_else(|_| panic!("task {t}: a request hung for 5 s"));
            match answer {
                Ok(r) => {
                    assert!(!r.over_limit, "task {t}: 1M a day is never over");
                    tally.decided[p].fetch_add(1, Ordering::AcqRel);
                }
                Err(RequestError::Store(e)) => {
                    assert!(e.to_string().contains("Redis"), "task {t}: {e}");
                    tally.store_errors[p].fetch_add(1, Ordering::AcqRel);
                    let message: String = e
                        .to_string()
                        .chars()
                        .map(|c| if c.is_ascii_digit() { '#' } else { c })
                        .collect();
                    tally.messages.lock().unwrap().insert(message);
                    let stable = p == AFTER_FIRST || p == AFTER_SECOND;
                    // Only if the phase is still the same: the next failover may have begun.
                    if stable && tally.decided(p) > 0 && phase.load(Ordering::Acquire) == p {
                        eprintln!("task {t}: store error after recovery in phase {p}: {e}");
                        tally.relapses.fetch_add(1, Ordering::AcqRel);
                    }
                }
                Err(other) => panic!("task {t}: {other:?}"),
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// Runs `f` on `setup` on a blocking thread (the harness waits with `thread::sleep`).
async fn blocking(
    setup: RedisSentinel,
    f: impl FnOnce(&mut RedisSentinel) + Send + 'static,
) -> RedisSentinel {
    tokio::task::spawn_blocking(move || {
        let mut setup = setup;
        f(&mut setup);
        setup
    })
    .await
    .expect("harness thread")
}

/// Waits until every replica decides a fresh key again and every traffic task had 20
/// decisions in `phase`; returns how long the replicas took after the failover.
async fn recovered(
    replicas: &[Arc<Service>],
    tallies: &[Tally],
    phase: usize,
    tag: &str,
) -> Duration {
    let started = tokio::time::Instant::now();
    for (i, r) in replicas.iter().enumerate() {
        support::eventually_async(30, "decisions again after the failover", || async {
            ask(r, "shared", &[("big", &format!("{tag}{i}"))])
                .await
                .is_ok()
        })
        .await;
    }
    let took = started.elapsed();
    support::eventually(30, "every traffic task deciding after the failover", || {
        tallies.iter().all(|t| t.decided(phase) >= 20)
    })
    .await;
    took
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sentinel_failovers_under_traffic_recover_and_still_limit_exactly() {
    let setup = RedisSentinel::start();
    let first_master = setup.current_master().addr();
    let replicas = replicas(&setup.url(), 2, Duration::from_millis(1000));
    assert!(passes(&replicas[0], "shared", &[("big", "warm")]).await);
    assert!(passes(&replicas[1], "shared", &[("big", "warm")]).await);

    let stop = Arc::new(AtomicBool::new(false));
    let phase = Arc::new(AtomicUsize::new(BEFORE));
    let tallies: Arc<Vec<Tally>> = Arc::new((0..4).map(|_| Tally::default()).collect());
    let tasks: Vec<_> = (0..4)
        .map(|t| {
            let service = replicas[t % 2].clone();
            traffic(t, service, phase.clone(), stop.clone(), tallies.clone())
        })
        .collect();
    support::eventually(10, "traffic before the failover", || {
        tallies.iter().all(|t| t.decided(BEFORE) >= 20)
    })
    .await;

    // The master dies; the sentinels promote the replica.
    phase.store(FIRST_FAILOVER, Ordering::Release);
    let setup = blocking(setup, RedisSentinel::fail_over).await;
    phase.store(AFTER_FIRST, Ordering::Release);
    let second_master = setup.current_master().addr();
    assert_ne!(second_master, first_master);
    let first = recovered(&replicas, &tallies, AFTER_FIRST, "one").await;

    // A fresh bucket on the new master: exactly 20 of 60 across both replicas.
    assert_eq!(
        support::concurrent(&replicas, "shared", 60, &[&[("twenty", "one")]]).await,
        20
    );
    let key = BucketKey::from(bucket_key("shared", "twenty", "one").as_str()).redis_key("");
    assert_eq!(setup.current_master().cli(&["EXISTS", &key]), "1", "{key}");

    // And back: the old master returns as a replica, then the new master dies.
    phase.store(SECOND_FAILOVER, Ordering::Release);
    let setup = blocking(setup, |s| {
        s.restart_old_master();
        s.fail_over();
    })
    .await;
    phase.store(AFTER_SECOND, Ordering::Release);
    assert_eq!(setup.current_master().addr(), first_master);
    let second = recovered(&replicas, &tallies, AFTER_SECOND, "two").await;
    // Replicated before the failover (the old master was synced), and still counted.
    assert_eq!(
        support::concurrent(&replicas, "shared", 10, &[&[("twenty", "one")]]).await,
        0
    );
    assert_eq!(
        support::concurrent(&replicas, "shared", 60, &[&[("twenty", "two")]]).await,
        20
    );
    let key = BucketKey::from(bucket_key("shared", "twenty", "two").as_str()).redis_key("");
    assert_eq!(setup.current_master().cli(&["EXISTS", &key]), "1", "{key}");

    stop.store(true, Ordering::Release);
    for task in tasks {
        task.await.expect("no traffic task panicked");
    }
    eprintln!("sentinel: replicas decided again {first:?} and {second:?} after the failovers");
    for (i, t) in tallies.iter().enumerate() {
        let count = |a: &[AtomicUsize; PHASES]| {
            a.iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect::<Vec<_>>()
        };
        eprintln!(
            "sentinel traffic task {i}: decided by phase {:?}, store errors by phase {:?}",
            count(&t.decided),
            count(&t.store_errors)
        );
    }
    let messages: BTreeSet<String> = tallies
        .iter()
        .flat_map(|t| t.messages.lock().unwrap().clone())
        .collect();
    eprintln!("sentinel: store errors seen: {messages:#?}");
    for (i, t) in tallies.iter().enumerate() {
        assert_eq!(
            t.relapses.load(Ordering::Relaxed),
            0,
            "task {i} failed again after recovering"
        );
    }
    for r in &replicas {
        assert!(r.store().health().is_healthy(), "{:?}", r.store().health());
    }
}

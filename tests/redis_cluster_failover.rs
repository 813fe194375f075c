//! Issue 9, defect 9: one dead Redis Cluster master must fail only its own domains.
//!
//! A real cluster of 3 masters with a replica each; twelve domains, four on each master
//! (picked by their keys' slots); `--redis-failure error`. One master is killed, then
//! calls alternate between the dead master's domains and the live masters' domains while
//! the cluster fails over: every live-domain call is decided, the dead domains fail by the
//! policy until a replica is promoted, then decide again without a restart, and health
//! says degraded (still serving) meanwhile. Before the fix one replica-wide circuit,
//! tripped by the dead node's timeouts, failed most live-domain calls too (262 of 290).

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::SystemClock;
use meshlimit::config::Config;
use meshlimit::error::RequestError;
use meshlimit::request::{Descriptor, Request};
use meshlimit::service::Service;
use meshlimit::store::StoreHealth;
use meshlimit::store::redis::{FailurePolicy, RedisOptions};
use support::redis::RedisCluster;

const DOMAINS_PER_MASTER: usize = 4;

/// Bound on the alternating calls (pairs), and on their duration.
const MAX_PAIRS: usize = 4000;
const MAX_TIME: Duration = Duration::from_secs(60);

/// The bucket key of a one-entry descriptor (see `meshlimit::bucket_key`).
fn bucket_key(domain: &str, key: &str, value: &str) -> String {
    let part = |s: &str| format!("{}:{s}", s.len());
    format!("{}{}{}", part(domain), part(key), part(value))
}

/// The Redis key every call of `domain` uses (its slot is the domain's).
fn redis_key(domain: &str) -> String {
    BucketKey::from(bucket_key(domain, "k", "v").as_str()).redis_key("")
}

/// Four domain names for each master (by node index), from the cluster's own slot map.
fn domains_by_master(cluster: &mut RedisCluster) -> Vec<(usize, Vec<String>)> {
    let mut groups: Vec<(usize, Vec<String>)> = cluster
        .masters()
        .into_iter()
        .map(|m| (m, Vec::new()))
        .collect();
    for n in 0..10_000 {
        if groups.iter().all(|(_, d)| d.len() == DOMAINS_PER_MASTER) {
            return groups;
        }
        let domain = format!("d{n}");
        let owner = cluster.node_for_key(&redis_key(&domain));
        let group = groups
            .iter_mut()
            .find(|(m, _)| *m == owner)
            .unwrap_or_else(|| panic!("slot of {domain} served by node {owner}, not a master"));
        if group.1.len() < DOMAINS_PER_MASTER {
            group.1.push(domain);
        }
    }
    panic!("could not spread twelve domains over the masters: {groups:?}");
}

fn config(domains: &[&str]) -> Config {
    let sources: Vec<(PathBuf, String)> = domains
        .iter()
        .map(|d| {
            (
                PathBuf::from(format!("{d}.yaml")),
                format!(
                    "domain: {d}\ndescriptors:\n  - key: k\n    rate_limit: {{unit: day, requests_per_unit: 1000000}}\n"
                ),
            )
        })
        .collect();
    Config::from_sources(&sources).expect("valid config")
}

/// One call for `domain`: decided (never over: a million a day), or the store's error.
async fn call(service: &Service, domain: &str) -> Result<(), String> {
    let answer = tokio::time::timeout(
        Duration::from_secs(10),
        service.should_rate_limit(Request::new(domain, &[Descriptor::new(&[("k", "v")])], 0)),
    )
    .await
    .unwrap_or_else(|_| panic!("a call for {domain} hung for 10 s"));
    match answer {
        Ok(r) => {
            assert!(!r.over_limit, "{domain}: a million a day is never over");
            Ok(())
        }
        Err(RequestError::Store(e)) => Err(e.to_string()),
        Err(other) => panic!("{domain}: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_master_fails_only_its_own_domains_until_a_replica_takes_over() {
    failover_under_traffic(Death::Killed).await;
}

/// The same with a master that hangs instead (SIGSTOP): calls to it time out rather than
/// being refused. Before the fix its domains did not decide again after the promotion
/// without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_hung_master_times_out_only_its_own_domains_until_a_replica_takes_over() {
    failover_under_traffic(Death::Hung).await;
}

/// How the master dies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Death {
    /// SIGKILL: its port is closed, connections are refused.
    Killed,
    /// SIGSTOP: its port stays open, nothing answers.
    Hung,
}

async fn failover_under_traffic(death: Death) {
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let groups = domains_by_master(&mut cluster);
    let all: Vec<&str> = groups
        .iter()
        .flat_map(|(_, d)| d.iter().map(String::as_str))
        .collect();
    let options = RedisOptions {
        timeout: Duration::from_millis(500),
        failure: FailurePolicy::Error,
        ..RedisOptions::new(cluster.url())
    };
    let service = Arc::new(support::redis_replica(
        config(&all),
        Arc::new(SystemClock),
        options,
    ));
    for domain in &all {
        call(&service, domain)
            .await
            .unwrap_or_else(|e| panic!("{domain} before the kill: {e}"));
    }
    assert!(service.store().health().is_healthy());

    // The first group's master dies; the others live.
    let (dead, dead_domains) = groups[0].clone();
    let live_domains: Vec<String> = groups[1..]
        .iter()
        .flat_map(|(_, d)| d.iter().cloned())
        .collect();
    match death {
        Death::Killed => cluster.nodes[dead].kill(),
        Death::Hung => cluster.nodes[dead].freeze(),
    }
    #[allow(clippy::disallowed_methods)] // measuring for the report, not for any decision
    let killed = std::time::Instant::now();
    let probe_key = redis_key(&dead_domains[0]);
    let failover = tokio::task::spawn_blocking(move || {
        let promoted = cluster.wait_for_promotion(&probe_key, dead);
        (cluster, promoted, killed.elapsed())
    });

    let mut live_failures: Vec<String> = Vec::new();
    let (mut live_calls, mut dead_failures, mut dead_after) = (0, 0, 0);
    let mut first_decided: Option<Duration> = None;
    let mut relapses: Vec<String> = Vec::new();
    let mut degraded_seen = None;
    let mut slowest_live = Duration::ZERO;
    for pair in 0..MAX_PAIRS {
        let dead_domain = &dead_domains[pair % dead_domains.len()];
        match call(&service, dead_domain).await {
            Ok(()) => {
                first_decided.get_or_insert_with(|| killed.elapsed());
                dead_after += 1;
            }
            Err(e) if first_decided.is_some() => relapses.push(e),
            Err(e) => {
                assert!(e.contains("Redis"), "{e}");
                dead_failures += 1;
            }
        }
        let live_domain = &live_domains[pair % live_domains.len()];
        #[allow(clippy::disallowed_methods)] // measuring for the report
        let asked = std::time::Instant::now();
        if let Err(e) = call(&service, live_domain).await {
            live_failures.push(format!("{:?} {live_domain}: {e}", killed.elapsed()));
        }
        slowest_live = slowest_live.max(asked.elapsed());
        live_calls += 1;
        if first_decided.is_none() && degraded_seen.is_none() && dead_failures > 0 {
            let health = service.store().health();
            if let StoreHealth::Degraded(why) = &health {
                assert!(service.store().serving(), "{why}");
                degraded_seen = Some(why.clone());
            }
        }
        if failover.is_finished() && dead_after >= 20 {
            break;
        }
        assert!(
            killed.elapsed() < MAX_TIME,
            "the dead master's domains did not decide again within {MAX_TIME:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let (_cluster, promoted, failover_took) = failover.await.expect("harness thread");
    let decided_after = first_decided.expect("the dead master's domains decided again");
    eprintln!(
        "cluster failover ({death:?}): {live_calls} live-domain calls, {} failed (slowest {slowest_live:?}); \
         dead-domain calls: {dead_failures} failed by the policy, then decided again {:?} after \
         the kill (the cluster promoted node {promoted} after {failover_took:?})",
        live_failures.len(),
        decided_after,
    );
    assert!(
        live_failures.is_empty(),
        "{} of {live_calls} live-domain calls failed: {:?}",
        live_failures.len(),
        &live_failures[..live_failures.len().min(5)]
    );
    assert!(dead_failures > 0, "the dead domains never failed");
    assert!(
        relapses.is_empty(),
        "dead domains failed again after deciding: {relapses:?}"
    );
    let why = degraded_seen.expect("health said degraded while the master was dead");
    assert!(why.contains("1 of 3"), "{why}");

    // The dead master is no longer one: healthy again, every domain decides.
    support::eventually_async(20, "health once the replica took over", || async {
        service.store().maintain();
        tokio::time::sleep(Duration::from_millis(100)).await;
        service.store().health().is_healthy()
    })
    .await;
    for domain in &all {
        call(&service, domain)
            .await
            .unwrap_or_else(|e| panic!("{domain} after the failover: {e}"));
    }
}

//! The Redis store in process, against real `redis-server` processes of its own: several
//! replicas (services with their own store and caches) sharing one Redis, Redis' clock,
//! keys and TTLs, scripts surviving flushes and restarts, the over-limit cache, leases,
//! and each failure policy while Redis is killed and restarted.

mod support;

use std::sync::Arc;
use std::time::Duration;

use meshlimit::clock::{Clock, ManualClock, SystemClock};
use meshlimit::error::{RequestError, StoreErrorKind};
use meshlimit::request::{Descriptor, Request};
use meshlimit::service::{Answer, Service};
use meshlimit::store::StoreHealth;
use meshlimit::store::redis::{FailurePolicy, RedisOptions, RedisTlsFiles, TimeSource};
use support::START;
use support::redis::RedisServer;

const LIMITS: &str = "
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 50}
  - key: tight
    rate_limit: {unit: day, requests_per_unit: 30}
  - key: pair
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: hourly
    rate_limit: {unit: hour, requests_per_unit: 40, algorithm: fixed_window}
  - key: hot
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: hundred
    rate_limit: {unit: day, requests_per_unit: 100}
";

/// One replica: a service with its own Redis store (and caches) on `url`.
fn replica(url: &str, clock: Arc<dyn Clock>, tweak: impl FnOnce(&mut RedisOptions)) -> Service {
    support::redis_replica_of(url, LIMITS, clock, tweak)
}

fn system() -> Arc<dyn Clock> {
    Arc::new(SystemClock)
}

async fn ask(service: &Service, entries: &[(&str, &str)]) -> Result<Answer, RequestError> {
    service
        .should_rate_limit(Request::new("shared", &[Descriptor::new(entries)], 0))
        .await
}

async fn passes(service: &Service, entries: &[(&str, &str)]) -> bool {
    !ask(service, entries).await.expect("decided").over_limit
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_sharing_one_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let replicas: Vec<Arc<Service>> = (0..3)
        .map(|_| Arc::new(replica(&redis.url(), system(), |_| {})))
        .collect();
    support::assert_one_limit_across(&replicas).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fixed_windows_are_exact_across_replicas() {
    let redis = RedisServer::start();
    let replicas: Vec<Arc<Service>> = (0..2)
        .map(|_| Arc::new(replica(&redis.url(), system(), |_| {})))
        .collect();
    // An hourly window; should the hour turn during the burst, the count restarts, so
    // try again in the new hour (it cannot turn twice).
    for attempt in 0..2 {
        let hour = |r: &RedisServer| redis_time(r) / 3600;
        let before = hour(&redis);
        let key = format!("k{attempt}");
        let allowed = support::concurrent(&replicas, "shared", 120, &[&[("hourly", &key)]]).await;
        if hour(&redis) == before {
            assert_eq!(allowed, 40);
            return;
        }
    }
    panic!("the hour turned twice");
}

/// Redis' clock in seconds.
fn redis_time(redis: &RedisServer) -> u64 {
    let time = redis.cli(&["TIME"]);
    time.split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .expect("TIME")
}

#[tokio::test]
async fn replica_clocks_do_not_matter() {
    let redis = RedisServer::start();
    // Two replicas whose clocks disagree by a day: Redis' clock decides.
    let early = replica(&redis.url(), Arc::new(ManualClock::new(START)), |_| {});
    let late = replica(
        &redis.url(),
        Arc::new(ManualClock::new(START + 86_400 * 1_000_000_000)),
        |_| {},
    );
    assert!(passes(&early, &[("pair", "x")]).await);
    assert!(passes(&late, &[("pair", "x")]).await);
    assert!(!passes(&early, &[("pair", "x")]).await);
    assert!(!passes(&late, &[("pair", "x")]).await);
}

#[tokio::test]
async fn keys_are_prefixed_and_all_expire() {
    let redis = RedisServer::start();
    let service = replica(&redis.url(), system(), |_| {});
    assert!(passes(&service, &[("pair", "ttl")]).await);
    assert!(passes(&service, &[("hourly", "ttl")]).await);
    assert!(passes(&service, &[("user", "ttl")]).await);
    let keys = redis.cli(&["--scan"]);
    let keys: Vec<&str> = keys.lines().collect();
    assert_eq!(keys.len(), 3, "{keys:?}");
    for key in keys {
        assert!(key.starts_with("ml1:{6:shared}"), "{key}");
        let ttl: i64 = redis.cli(&["PTTL", key]).parse().expect("PTTL");
        let bound = if key.contains("pair") {
            30_000 // one token of 2/min
        } else if key.contains("hourly") {
            3_600_000 // the window's end
        } else {
            1_728_000 // one token of 50/day
        };
        assert!(ttl > 0 && ttl <= bound, "{key}: PTTL {ttl} (bound {bound})");
    }
}

#[tokio::test]
async fn scripts_survive_script_flush_and_restarts() {
    let mut redis = RedisServer::start();
    let service = replica(&redis.url(), system(), |o| {
        o.timeout = Duration::from_secs(2);
    });
    assert!(passes(&service, &[("user", "s")]).await);
    redis.cli(&["SCRIPT", "FLUSH"]);
    assert!(
        passes(&service, &[("user", "s")]).await,
        "after SCRIPT FLUSH"
    );

    redis.restart();
    // The first request after the restart may find the old connection broken; the store
    // reconnects on its own, without a restart of meshlimit.
    support::eventually_async(20, "decisions after a Redis restart", || async {
        ask(&service, &[("user", "s")]).await.is_ok()
    })
    .await;
    assert!(passes(&service, &[("user", "s")]).await);
}

#[tokio::test]
async fn over_limit_answers_come_from_the_cache_until_the_bucket_could_pass() {
    let mut redis = RedisServer::start();
    let clock = ManualClock::new(START);
    let service = replica(&redis.url(), Arc::new(clock.clone()), |o| {
        o.time = TimeSource::Caller;
    });
    assert!(passes(&service, &[("pair", "c")]).await);
    assert!(passes(&service, &[("pair", "c")]).await);
    assert!(!passes(&service, &[("pair", "c")]).await, "Redis says over");
    let before = support::redis_stats(&service);
    assert_eq!(before.over_limit_hits, 0);

    // Redis is gone, and the cache still answers, without asking it.
    redis.kill();
    for _ in 0..5 {
        let r = ask(&service, &[("pair", "c")])
            .await
            .expect("from the cache");
        assert!(r.over_limit);
        assert_eq!(r.statuses[0].remaining, 0);
    }
    let after = support::redis_stats(&service);
    assert_eq!(after.over_limit_hits, 5);
    assert_eq!(after.misses, before.misses);

    // Once a token could have refilled (30 s for 2/min), the cache steps aside: Redis is
    // asked again (and, being down, the error policy answers).
    clock.advance(Duration::from_secs(30));
    assert!(ask(&service, &[("pair", "c")]).await.is_err());
}

#[tokio::test]
async fn leased_tokens_cost_one_redis_call_per_lease_and_never_overdraw() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(START);
    let lease = |o: &mut RedisOptions| {
        o.time = TimeSource::Caller;
        o.lease = 5;
        o.lease_ttl = Duration::from_secs(600);
    };
    let a = replica(&redis.url(), Arc::new(clock.clone()), lease);
    let b = replica(&redis.url(), Arc::new(clock.clone()), lease);
    let strict = replica(&redis.url(), Arc::new(clock.clone()), |o| {
        o.time = TimeSource::Caller;
    });

    // 10/s, burst 10. a takes 1 and leases 5; b takes 1 and leases only the 3 left.
    assert!(passes(&a, &[("hot", "k")]).await);
    assert!(passes(&b, &[("hot", "k")]).await);
    assert!(
        !passes(&strict, &[("hot", "k")]).await,
        "the leases emptied the bucket"
    );
    let mut allowed = 0;
    for _ in 0..10 {
        allowed += usize::from(passes(&a, &[("hot", "k")]).await);
        allowed += usize::from(passes(&b, &[("hot", "k")]).await);
    }
    assert_eq!(allowed, 5 + 3, "each replica spends exactly its lease");
    assert_eq!(support::redis_stats(&a).lease_hits, 5);
    assert_eq!(support::redis_stats(&b).lease_hits, 3);

    // The accuracy bound: a full bucket again, and leases taken earlier still held, admit
    // at most burst + replicas × lease within one refill period.
    clock.advance(Duration::from_secs(1));
    assert!(passes(&a, &[("hot", "k")]).await); // a: 1 + lease 5 of the refilled 10
    assert!(passes(&b, &[("hot", "k")]).await); // b: 1 + lease 3 (all that is left)
    clock.advance(Duration::from_secs(1)); // full again; a holds 5, b holds 3
    let mut burst = 0;
    for _ in 0..20 {
        burst += usize::from(passes(&a, &[("hot", "k")]).await);
        burst += usize::from(passes(&b, &[("hot", "k")]).await);
    }
    assert!(burst <= 10 + 2 * 5, "{burst} admitted");
    assert!(burst >= 10, "{burst} admitted");
}

#[tokio::test]
async fn the_error_policy_answers_unavailable_then_recovers() {
    let mut redis = RedisServer::start();
    let service = replica(&redis.url(), system(), |o| {
        o.timeout = Duration::from_millis(500);
    });
    assert!(passes(&service, &[("user", "e")]).await);
    redis.kill();
    match ask(&service, &[("user", "e")]).await {
        Err(RequestError::Store(e)) => assert!(e.to_string().contains("Redis"), "{e}"),
        other => panic!("expected a store error, got {other:?}"),
    }
    assert!(!service.store().health().is_healthy());
    assert!(!service.store().serving());
    redis.restart();
    support::eventually_async(20, "Redis reachable again", || async {
        ask(&service, &[("user", "e")]).await.is_ok()
    })
    .await;
    assert!(service.store().health().is_healthy());
}

#[tokio::test]
async fn the_allow_policy_answers_ok_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let service = replica(&redis.url(), system(), |o| {
        o.timeout = Duration::from_millis(500);
        o.failure = FailurePolicy::Allow;
    });
    redis.kill();
    for _ in 0..5 {
        assert!(passes(&service, &[("pair", "a")]).await);
    }
    assert!(service.store().serving());
    assert!(support::redis_stats(&service).fallbacks >= 5);
    redis.restart();
    support::eventually_async(20, "Redis reachable again", || async {
        service.store().health().is_healthy()
    })
    .await;
    assert!(passes(&service, &[("pair", "a")]).await);
    assert!(passes(&service, &[("pair", "a")]).await);
    assert!(
        !passes(&service, &[("pair", "a")]).await,
        "Redis decides again"
    );
}

#[tokio::test]
async fn the_local_policy_limits_alone_then_returns_to_redis() {
    let mut redis = RedisServer::start();
    let service = replica(&redis.url(), system(), |o| {
        o.timeout = Duration::from_millis(500);
        o.failure = FailurePolicy::Local;
    });
    redis.kill();
    assert!(passes(&service, &[("pair", "l")]).await);
    assert!(passes(&service, &[("pair", "l")]).await);
    assert!(!passes(&service, &[("pair", "l")]).await, "limited locally");
    redis.restart();
    support::eventually_async(20, "Redis reachable again", || async {
        service.store().health().is_healthy()
    })
    .await;
    // Redis (restarted empty) decides again: a fresh bucket there.
    let misses = support::redis_stats(&service).misses;
    assert!(passes(&service, &[("pair", "l")]).await);
    assert_eq!(support::redis_stats(&service).misses, misses + 1);
    assert_eq!(bucket_keys(&redis), 1);
}

/// A request gives up on a Redis that holds it at the store's timeout, with a timeout
/// error, instead of waiting for Redis. The runtime's clock is paused once the store is
/// warm: the runtime then jumps to its next timer whenever it only waits for Redis, so no
/// real time passes and the machine's speed cannot matter; without the timeout the
/// request would wait out the whole pause, or succeed after it.
#[tokio::test]
async fn a_stalled_redis_never_holds_a_request_past_the_timeout() {
    let redis = RedisServer::start();
    let timeout = Duration::from_millis(200);
    let service = replica(&redis.url(), system(), |o| o.timeout = timeout);
    assert!(passes(&service, &[("user", "t")]).await);
    // Redis holds every client for 60 s: the request must give up long before.
    redis.cli(&["CLIENT", "PAUSE", "60000", "ALL"]);
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    match ask(&service, &[("user", "t")]).await {
        Err(RequestError::Store(e)) => assert_eq!(e.kind, StoreErrorKind::TimedOut, "{e}"),
        other => panic!("a stalled Redis answered: {other:?}"),
    }
    let waited = started.elapsed();
    assert!(
        waited >= timeout && waited < Duration::from_secs(60),
        "gave up after {waited:?} on the runtime's clock"
    );
    assert_eq!(support::redis_stats(&service).errors, 1);
}

#[tokio::test]
async fn a_redis_that_refuses_the_connection_counts_as_unreachable() {
    let redis = RedisServer::start();
    // Database 99 does not exist: every connection attempt is refused.
    let service = replica(&format!("{}/99", redis.url()), system(), |o| {
        o.timeout = Duration::from_secs(2);
    });
    match ask(&service, &[("user", "db")]).await {
        Err(RequestError::Store(e)) => assert!(e.to_string().contains("DB index"), "{e}"),
        other => panic!("expected a store error, got {other:?}"),
    }
    match service.store().health() {
        StoreHealth::Down(why) => assert!(why.contains("DB index"), "{why}"),
        other => panic!("expected Down, got {other:?}"),
    }
}

/// Issue 9, defect 3: a Redis that answers but refuses writes (out of memory under
/// `noeviction`) cannot decide. Its error replies follow the failure policy like an
/// unreachable Redis, open the circuit (Redis is asked once, not per request), and show in
/// health, which stays down while the probe's writes are refused (no flapping); decisions
/// return by themselves once Redis takes writes again. Before the fix every request went
/// to Redis, failed with `OOM`, and health said OK.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_refusing_writes_cannot_decide_until_it_takes_writes_again() {
    let redis = RedisServer::start_with_little_memory();
    let strict = replica(&redis.url(), system(), |o| {
        o.timeout = Duration::from_millis(500);
    });
    let allowing = replica(&redis.url(), system(), |o| {
        o.timeout = Duration::from_millis(500);
        o.failure = FailurePolicy::Allow;
    });
    assert!(passes(&strict, &[("user", "before")]).await);
    assert!(strict.store().health().is_healthy());
    let _full = redis.fill_memory();

    for i in 0..20 {
        match ask(&strict, &[("user", &format!("oom{i}"))]).await {
            Err(RequestError::Store(e)) => assert!(e.to_string().contains("OOM"), "{e}"),
            other => panic!("call {i} with Redis out of memory: {other:?}"),
        }
        // Under `allow`, the policy answers OK.
        assert!(passes(&allowing, &[("user", &format!("oom{i}"))]).await);
    }
    let stats = support::redis_stats(&strict);
    assert_eq!(
        stats.errors, 1,
        "the circuit opened at the first error: {stats:?}"
    );
    assert!(support::redis_stats(&allowing).fallbacks >= 20);

    // Health says why, and keeps saying it while probes write (and fail) in the
    // background, as the server's maintenance tick runs them.
    for _ in 0..10 {
        strict.store().maintain();
        allowing.store().maintain();
        match strict.store().health() {
            StoreHealth::Down(why) => assert!(why.contains("OOM"), "{why}"),
            other => panic!("error policy, Redis out of memory: {other:?}"),
        }
        assert!(!strict.store().serving());
        match allowing.store().health() {
            StoreHealth::Degraded(why) => assert!(why.contains("OOM"), "{why}"),
            other => panic!("allow policy, Redis out of memory: {other:?}"),
        }
        assert!(allowing.store().serving());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Room again (the clients alone may hold most of 1 MB): Redis decides again, without
    // a restart.
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    support::eventually_async(20, "decisions once Redis takes writes", || async {
        ask(&strict, &[("user", "after")]).await.is_ok()
    })
    .await;
    support::eventually_async(20, "health once Redis takes writes", || async {
        strict.store().health().is_healthy() && allowing.store().health().is_healthy()
    })
    .await;
    let misses = support::redis_stats(&allowing).misses;
    assert!(passes(&allowing, &[("user", "after")]).await);
    assert_eq!(
        support::redis_stats(&allowing).misses,
        misses + 1,
        "decided by Redis"
    );
}

#[tokio::test]
async fn health_notices_an_unreachable_redis_without_traffic() {
    let mut redis = RedisServer::start();
    let service = replica(&redis.url(), system(), |o| {
        o.timeout = Duration::from_millis(500);
    });
    redis.kill();
    assert!(service.store().health().is_healthy(), "nothing asked yet");
    // What the server's maintenance tick does, once a second.
    support::eventually_async(20, "health to say Redis is unreachable", || async {
        service.store().maintain();
        tokio::time::sleep(Duration::from_millis(50)).await;
        !service.store().health().is_healthy()
    })
    .await;
    redis.restart();
    support::eventually_async(20, "health to recover", || async {
        service.store().maintain();
        tokio::time::sleep(Duration::from_millis(50)).await;
        service.store().health().is_healthy()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_never_holds_more_than_one_lease() {
    let redis = RedisServer::start();
    let leasing = Arc::new(replica(&redis.url(), system(), |o| {
        o.lease = 5;
        o.lease_ttl = Duration::from_secs(600);
    }));
    // 40 concurrent requests on a fresh bucket: one top-up at a time, the others wait for
    // it, so Redis gave out at most the admitted tokens plus one lease.
    assert_eq!(
        support::concurrent(
            std::slice::from_ref(&leasing),
            "shared",
            40,
            &[&[("hundred", "h")]]
        )
        .await,
        40
    );
    let strict = replica(&redis.url(), system(), |_| {});
    let r = ask(&strict, &[("hundred", "h")]).await.expect("decided");
    let taken = 100 - r.statuses[0].remaining - 1;
    assert!(
        (40..=40 + 5).contains(&taken),
        "Redis gave out {taken} tokens"
    );
    assert!(support::redis_stats(&leasing).lease_hits > 0);
}

#[tokio::test]
async fn tls_urls_work() {
    // A self-signed certificate: rediss:// with #insecure skips its verification.
    let certs = tempfile::tempdir().expect("tempdir");
    let (cert, key) = (certs.path().join("cert.pem"), certs.path().join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
        ])
        .args(["-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl is needed: apt-get install -y openssl");
    assert!(made.status.success(), "{made:?}");
    let tls_port = support::free_port().to_string();
    let redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        cert.to_str().expect("UTF-8 path"),
        "--tls-key-file",
        key.to_str().expect("UTF-8 path"),
        "--tls-auth-clients",
        "no",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}/#insecure");
    let service = replica(&url, system(), |_| {});
    for _ in 0..2 {
        assert!(passes(&service, &[("pair", "tls")]).await);
    }
    assert!(!passes(&service, &[("pair", "tls")]).await);
    assert_eq!(bucket_keys(&redis), 1);
}

/// `--redis-tls-ca` and `--redis-tls-cert`/`--redis-tls-key`: a Redis whose certificate a
/// private CA signed, and which asks every client for a certificate of that CA (the Go
/// server's REDIS_TLS_CACERT, REDIS_TLS_CLIENT_CERT, REDIS_TLS_CLIENT_KEY). Verified, not
/// `#insecure`: without the CA the server is not trusted, without the client certificate
/// the server refuses meshlimit.
#[tokio::test]
async fn mutual_tls_with_a_private_ca() {
    let pki = support::pki::Pki::new();
    pki.issue("redis", "IP:127.0.0.1", 1);
    pki.issue("meshlimit", "DNS:meshlimit", 2);
    let tls_port = support::free_port().to_string();
    let _redis = RedisServer::start_with(&[
        "--tls-port",
        &tls_port,
        "--tls-cert-file",
        &pki.arg("redis.pem"),
        "--tls-key-file",
        &pki.arg("redis.key"),
        "--tls-ca-cert-file",
        &pki.arg("ca.pem"),
        "--tls-auth-clients",
        "yes",
    ]);
    let url = format!("rediss://127.0.0.1:{tls_port}");
    let with = |tls: RedisTlsFiles| {
        replica(&url, system(), move |o| {
            o.tls = tls;
            o.timeout = Duration::from_secs(2);
        })
    };
    let client = Some((pki.path("meshlimit.pem"), pki.path("meshlimit.key")));
    let both = with(RedisTlsFiles {
        ca: Some(pki.path("ca.pem")),
        client: client.clone(),
    });
    for _ in 0..2 {
        assert!(passes(&both, &[("pair", "mtls")]).await);
    }
    assert!(!passes(&both, &[("pair", "mtls")]).await);

    let no_client = with(RedisTlsFiles {
        ca: Some(pki.path("ca.pem")),
        client: None,
    });
    assert!(ask(&no_client, &[("pair", "c")]).await.is_err());
    let system_roots = with(RedisTlsFiles { ca: None, client });
    assert!(ask(&system_roots, &[("pair", "r")]).await.is_err());
}

/// `--redis-key-prefix`: two deployments on one Redis, each with its own prefix, keep
/// their buckets apart; every key, probes included, starts with its deployment's prefix.
#[tokio::test]
async fn key_prefixes_keep_deployments_on_one_redis_apart() {
    let redis = RedisServer::start();
    let deployment = |prefix: &'static str| {
        replica(&redis.url(), system(), move |o| {
            o.key_prefix = prefix.to_string();
        })
    };
    let (staging, production) = (deployment("staging:"), deployment("prod:"));
    for _ in 0..2 {
        assert!(passes(&staging, &[("pair", "same")]).await);
    }
    assert!(!passes(&staging, &[("pair", "same")]).await);
    assert!(
        passes(&production, &[("pair", "same")]).await,
        "its own bucket"
    );
    let keys = redis.cli(&["--scan"]);
    let mut keys: Vec<&str> = keys.lines().collect();
    keys.sort_unstable();
    assert!(!keys.is_empty());
    for key in &keys {
        assert!(
            key.starts_with("staging:ml1:") || key.starts_with("prod:ml1:"),
            "{keys:?}"
        );
    }
    assert!(
        keys.contains(&"staging:ml1:{6:shared}4:pair4:same"),
        "{keys:?}"
    );
    assert!(
        keys.contains(&"prod:ml1:{6:shared}4:pair4:same"),
        "{keys:?}"
    );
}

/// The bucket keys Redis holds (not the store's short-lived probe keys).
fn bucket_keys(redis: &RedisServer) -> usize {
    redis
        .cli(&["--scan", "--pattern", "ml1:{*"])
        .lines()
        .count()
}

/// The key of `key=value` in the `shared` domain.
fn redis_key(key: &str, value: &str) -> String {
    format!("ml1:{{6:shared}}{}:{key}{}:{value}", key.len(), value.len())
}

/// `--redis-expiry-jitter-ms`: every key written lives up to the jitter longer, each by its
/// own random amount; the decisions do not change, and a fixed window still restarts at
/// its end though its key outlives it.
#[tokio::test]
async fn expiry_jitter_spreads_key_lifetimes_and_changes_no_decision() {
    let redis = RedisServer::start();
    // An hour's start plus 59 minutes: the hourly window ends in 60 s.
    let clock = ManualClock::new(START + 59 * 60 * 1_000_000_000);
    let jitter_ms = 300_000;
    let service = replica(&redis.url(), Arc::new(clock.clone()), |o| {
        o.time = TimeSource::Caller;
        o.expiry_jitter = Duration::from_millis(jitter_ms);
    });
    let pttl = |key: &str| -> u64 {
        let ttl = redis.cli(&["PTTL", key]);
        ttl.trim()
            .parse()
            .unwrap_or_else(|_| panic!("PTTL {key}: {ttl}"))
    };
    // Token buckets of 10/s: full again 100 ms after one hit, without jitter.
    let mut lifetimes = Vec::new();
    for i in 0..20 {
        let value = format!("k{i}");
        assert!(passes(&service, &[("hot", &value)]).await);
        let ttl = pttl(&redis_key("hot", &value));
        assert!((1..=100 + jitter_ms).contains(&ttl), "{ttl}");
        lifetimes.push(ttl);
    }
    lifetimes.sort_unstable();
    lifetimes.dedup();
    // Twenty draws from 0..=300,000 ms: the chance of fewer than 10 distinct ones is nil.
    assert!(lifetimes.len() >= 10, "{lifetimes:?}");
    assert!(lifetimes.iter().any(|&t| t > 1_000), "{lifetimes:?}");

    // A fixed window: counted as ever, its key living past the window's end.
    for _ in 0..40 {
        assert!(passes(&service, &[("hourly", "w")]).await);
    }
    assert!(!passes(&service, &[("hourly", "w")]).await);
    let ttl = pttl(&redis_key("hourly", "w"));
    assert!((60_000..=60_000 + jitter_ms).contains(&ttl), "{ttl}");
    clock.advance(Duration::from_secs(61));
    let next = ask(&service, &[("hourly", "w")]).await.expect("decided");
    assert!(!next.over_limit);
    assert_eq!(
        next.statuses[0].remaining, 39,
        "a new window, whatever the key"
    );
}

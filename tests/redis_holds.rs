//! Holds on the Redis store across replicas (services with their own store and caches
//! sharing one `redis-server`): reservations and concurrency slots exact under concurrent
//! requests from every replica, and a reset that every replica hears. The cases of one
//! replica run on every store in tests/conformance/holds.rs.

mod support;

use std::sync::Arc;
use std::time::Duration;

use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::{Clock, ManualClock, SystemClock};
use meshlimit::request::{Descriptor, Request};
use meshlimit::service::Service;
use meshlimit::store::Store;
use meshlimit::store::redis::{RedisOptions, TimeSource};
use support::START;
use support::redis::RedisServer;

const LIMITS: &str = "
domain: shared
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 100}
    reserve: {ttl: 5m}
  - key: conc
    concurrency: {max_in_flight: 5, ttl: 10m}
  - key: pair
    rate_limit: {unit: minute, requests_per_unit: 2}
";

/// One replica: a service with its own Redis store (and caches) on `url`.
fn replica(url: &str, clock: Arc<dyn Clock>, tweak: impl FnOnce(&mut RedisOptions)) -> Service {
    support::redis_replica_of(url, LIMITS, clock, tweak)
}

/// Whether one request of `entries` with `hits` passes.
async fn passes(service: &Service, entries: &[(&str, &str)], hits: u64) -> bool {
    let descriptor = Descriptor {
        hits_addend: Some(hits),
        ..Descriptor::new(entries)
    };
    !service
        .should_rate_limit(Request::new("shared", &[descriptor], 0))
        .await
        .expect("decided")
        .over_limit
}

/// How many of `n` concurrent requests (request `i` of `entries(i)` with `hits`, spread
/// over `replicas`) pass.
async fn admitted(
    replicas: &[Arc<Service>],
    n: usize,
    hits: u64,
    entries: fn(usize) -> Vec<(String, String)>,
) -> usize {
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let service = replicas[i % replicas.len()].clone();
            tokio::spawn(async move {
                let entries = entries(i);
                let entries: Vec<(&str, &str)> = entries
                    .iter()
                    .map(|(k, v)| (k.as_str(), v.as_str()))
                    .collect();
                passes(&service, &entries, hits).await
            })
        })
        .collect();
    let mut passed = 0;
    for task in tasks {
        passed += usize::from(task.await.expect("joined"));
    }
    passed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reservations_and_slots_are_exact_across_replicas() {
    let redis = RedisServer::start();
    let replicas: Vec<Arc<Service>> = (0..3)
        .map(|_| Arc::new(replica(&redis.url(), Arc::new(SystemClock), |_| {})))
        .collect();
    // 100 a day, 30 held each: three holds, whichever replicas ask.
    let reserve = |i: usize| {
        vec![
            ("user".to_string(), "alice".to_string()),
            ("hold".to_string(), format!("r{i}")),
        ]
    };
    assert_eq!(admitted(&replicas, 30, 30, reserve).await, 3);
    // Five slots, forty takers.
    let take = |i: usize| {
        vec![
            ("conc".to_string(), "api".to_string()),
            ("hold".to_string(), format!("s{i}")),
        ]
    };
    assert_eq!(admitted(&replicas, 40, 1, take).await, 5);
}

#[tokio::test]
async fn a_reset_drops_every_replicas_over_limit_snapshot() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(START);
    let caller = |o: &mut RedisOptions| o.time = TimeSource::Caller;
    let (a, b) = (
        replica(&redis.url(), Arc::new(clock.clone()), caller),
        replica(&redis.url(), Arc::new(clock.clone()), caller),
    );
    // b follows the resets from its first upkeep on.
    b.store().maintain();
    let pair = [("pair", "c")];
    assert!(passes(&b, &pair, 1).await && passes(&b, &pair, 1).await);
    assert!(!passes(&b, &pair, 1).await, "Redis says over; b keeps it");
    let Store::Redis(store) = a.store() else {
        panic!("a Redis store");
    };
    let key = BucketKey::from("6:shared4:pair1:c");
    assert!(
        store.reset(&key).await.expect("reset"),
        "the bucket existed"
    );
    // b hears it (once subscribed: the reset is repeated until then) and asks Redis again,
    // where the bucket is full, well before its snapshot would have expired (30 s).
    let heard = async {
        while !passes(&b, &pair, 0).await {
            tokio::time::sleep(Duration::from_millis(50)).await;
            store.reset(&key).await.expect("reset");
        }
    };
    tokio::time::timeout(Duration::from_secs(10), heard)
        .await
        .expect("b heard the reset");
    assert!(passes(&b, &pair, 1).await && passes(&b, &pair, 1).await);
    assert!(!passes(&a, &pair, 1).await);
}

#[tokio::test]
async fn hold_keys_share_their_buckets_slot_expire_and_go_when_settled() {
    let redis = RedisServer::start();
    let service = replica(&redis.url(), Arc::new(SystemClock), |_| {});
    assert!(passes(&service, &[("user", "alice"), ("hold", "r1")], 30).await);
    assert!(passes(&service, &[("conc", "api"), ("hold", "s1")], 1).await);
    let scanned = redis.cli(&["--scan"]);
    let mut keys: Vec<&str> = scanned.lines().collect();
    keys.sort_unstable();
    let user = "ml1:{6:shared}4:user5:alice";
    let conc = "ml1:{6:shared}4:conc3:api";
    let expected = [
        format!("{conc}:e"),
        user.to_string(),
        format!("{user}:e"),
        format!("{user}:h"),
    ];
    assert_eq!(keys, expected, "a slot never writes its bucket");
    const MINUTE_MS: i64 = 60_000;
    for (key, at_least, at_most) in [
        // Its hold's 5 minutes, and the day its release could still matter.
        (
            format!("{user}:h"),
            5 * MINUTE_MS,
            5 * MINUTE_MS + 1_440 * MINUTE_MS + 2,
        ),
        (
            format!("{user}:e"),
            5 * MINUTE_MS,
            5 * MINUTE_MS + 1_440 * MINUTE_MS + 2,
        ),
        // A slot's 10 minutes: nothing to release.
        (format!("{conc}:e"), 9 * MINUTE_MS, 10 * MINUTE_MS + 2),
    ] {
        let ttl: i64 = redis.cli(&["PTTL", &key]).parse().expect("PTTL");
        assert!(
            ttl > at_least && ttl <= at_most,
            "{key}: PTTL {ttl}, not in {at_least}..={at_most}"
        );
    }
    assert!(passes(&service, &[("user", "alice"), ("settle", "r1")], 30).await);
    assert!(passes(&service, &[("conc", "api"), ("settle", "s1")], 1).await);
    let scanned = redis.cli(&["--scan"]);
    let keys: Vec<&str> = scanned.lines().collect();
    assert_eq!(keys, [user], "settled: the hold keys are gone");
}

/// `service`'s `ratelimit_service_rate_limit_expired` of the rule `key`.
fn expired(service: &Service, key: &str) -> Option<String> {
    let text = service.metrics().expect("counting").render();
    let name = format!("ratelimit_service_rate_limit_expired{{domain=\"shared\",key1=\"{key}\"}}");
    support::sample(&text, &name).map(str::to_string)
}

/// Redis releases a key's expired holds in the script call of the next request on the
/// key, whichever replica sends it, or the next read of it (`/explain`, `/bucket`):
/// counted on that replica's rule, once across replicas.
#[tokio::test]
async fn expired_holds_are_counted_once_by_the_replica_that_releases_them() {
    let redis = RedisServer::start();
    let clock = ManualClock::new(START);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let caller = |o: &mut RedisOptions| o.time = TimeSource::Caller;
    let (a, b) = (
        replica(&redis.url(), shared.clone(), caller),
        replica(&redis.url(), shared, caller),
    );
    for id in ["r1", "r2"] {
        assert!(passes(&a, &[("user", "alice"), ("hold", id)], 30).await);
    }
    assert!(passes(&a, &[("conc", "api"), ("hold", "s1")], 1).await);
    clock.advance(Duration::from_secs(11 * 60));
    let descriptors = [Descriptor::new(&[("user", "alice")])];
    let text = meshlimit::explain::explain(&b, Request::new("shared", &descriptors, 0))
        .await
        .expect("an explanation");
    assert!(
        text.contains("OK: 100 remaining") && text.contains("holds: 0 holds in force"),
        "both holds released by the read: {text}"
    );
    assert!(passes(&b, &[("conc", "api")], 1).await);
    assert_eq!(expired(&b, "user").as_deref(), Some("2"));
    assert_eq!(expired(&b, "conc").as_deref(), Some("1"));
    for key in ["user", "conc"] {
        assert_eq!(
            expired(&a, key),
            None,
            "{key}: released by the other replica"
        );
    }
    // Released once: later requests of either replica find nothing more to count.
    assert!(passes(&a, &[("user", "alice"), ("hold", "r3")], 10).await);
    assert!(passes(&a, &[("conc", "api"), ("hold", "s2")], 1).await);
    assert_eq!(expired(&a, "user"), None);
    assert_eq!(expired(&b, "user").as_deref(), Some("2"));
}

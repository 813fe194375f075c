//! The Redis store's script calls (issue 14): the specialised script for token buckets
//! against the general one on the same random sequences (the same answers, the same stored
//! bytes, and replicas running either on one Redis agree), and requests that wait for a
//! node coalesced into one call that decides them in order, each all-or-nothing on its
//! own, through `NOSCRIPT`, failures, requests that give up, and a Cluster's slots. Each
//! test starts its own `redis-server`s.

mod support;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::{Clock, ManualClock, NANOS_PER_SEC, Nanos, SystemClock};
use meshlimit::config::Config;
use meshlimit::limiter::Report;
use meshlimit::request::{Descriptor, Request};
use meshlimit::rules::{Algorithm, Limit, Mode, Unit};
use meshlimit::store::redis::{FailurePolicy, RedisOptions, TimeSource};
use meshlimit::store::{Check, RedisStore};
use support::START;
use support::checks::check;
use support::delay_proxy::DelayProxy;
use support::redis::{RedisCluster, RedisServer};
use support::rng::Rng;

const S: Nanos = NANOS_PER_SEC;
const US: Nanos = 1_000;

/// The domain part of every key here (one Cluster slot, were it one).
const DOMAIN: &str = "7:batches";

/// The key of bucket `name`.
fn key(name: &str) -> String {
    format!("{DOMAIN}{}:{name}", name.len())
}

fn bucket(rpu: u32, unit: Unit, burst: u32, multiplier: u32) -> Limit {
    Limit {
        charge: false,
        requests_per_unit: rpu,
        unit,
        multiplier,
        burst,
        algorithm: Algorithm::TokenBucket,
    }
}

/// A store on `server` reading the caller's time, with no over-limit cache for token
/// buckets (every request reaches Redis, so every answer is a script's) and a generous
/// timeout (a loaded machine must not turn a slow answer into a failure).
fn store(server: &RedisServer, tweak: impl FnOnce(&mut RedisOptions)) -> RedisStore {
    store_at(server.url(), tweak)
}

/// As [`store`], on the Redis at `url`.
fn store_at(url: String, tweak: impl FnOnce(&mut RedisOptions)) -> RedisStore {
    let mut options = RedisOptions {
        time: TimeSource::Caller,
        timeout: Duration::from_secs(10),
        cache_ttl: Duration::ZERO,
        ..RedisOptions::new(url)
    };
    tweak(&mut options);
    RedisStore::new(options, Arc::new(ManualClock::new(START))).expect("valid URL")
}

/// Below this many milliseconds left, a TTL may run out between a script's write and the
/// test's read: a step takes a few milliseconds of real time (a loaded machine may pause
/// the test far longer, but rarely a quarter of a second).
const SHORT_TTL_MS: i64 = 250;

/// The raw state of every bucket of `names` on each of `servers`, one list per server, each
/// left without a TTL. Redis counts TTLs in real time, which the manual clock does not
/// follow, so a state written with a short TTL (a bucket nearly full) may expire on one
/// server and not on another before the test reads it, or before the next step: such a
/// bucket, the same wherever it is left, is deleted on every server (full, wherever it
/// expired or not), so the servers go on from the same states. Any other difference is
/// returned as it is, for the caller to find.
fn settled_states(servers: &[RedisServer], names: &[String]) -> Vec<Vec<Option<Vec<u8>>>> {
    let mut conns: Vec<redis::Connection> = servers
        .iter()
        .map(|server| {
            redis::Client::open(server.url())
                .expect("valid URL")
                .get_connection()
                .expect("connected")
        })
        .collect();
    let read = redis::Script::new(
        "return { redis.call('GET', KEYS[1]) or '', redis.call('PTTL', KEYS[1]) }",
    );
    let mut states = vec![Vec::new(); servers.len()];
    for name in names {
        let redis_key = BucketKey::from(name.as_str()).redis_key("");
        let seen: Vec<(Option<Vec<u8>>, i64)> = conns
            .iter_mut()
            .map(|conn| {
                let (raw, ttl): (Vec<u8>, i64) =
                    read.key(&redis_key).invoke(conn).expect("GET and PTTL");
                ((!raw.is_empty()).then_some(raw), ttl)
            })
            .collect();
        let present: Vec<&(Option<Vec<u8>>, i64)> = seen.iter().filter(|s| s.0.is_some()).collect();
        let same = present.windows(2).all(|w| w[0].0 == w[1].0);
        let short = present.iter().all(|s| (0..SHORT_TTL_MS).contains(&s.1));
        let racy = !present.is_empty() && same && short;
        for (i, conn) in conns.iter_mut().enumerate() {
            let command = if racy { "DEL" } else { "PERSIST" };
            redis::cmd(command)
                .arg(&redis_key)
                .query::<()>(conn)
                .expect(command);
            states[i].push(if racy { None } else { seen[i].0.clone() });
        }
    }
    states
}

/// Limits a bucket may be checked under: bursts, multipliers, a bucket that never
/// refills, and the scales of minutes, days and years. A bucket checked under another
/// limit than last time is a reload that changed it (both scripts rescale its state).
fn limits() -> [Limit; 7] {
    [
        bucket(5, Unit::Second, 5, 1),
        bucket(100, Unit::Minute, 10, 1),
        bucket(1, Unit::Hour, 1, 1),
        bucket(0, Unit::Second, 1, 1),
        bucket(3, Unit::Second, 4, 2),
        bucket(7, Unit::Day, 7, 1),
        bucket(999_999, Unit::Year, 999_999, 1),
    ]
}

/// The exactness rule for the specialised script: on the same random sequences of
/// token-bucket requests (one to four distinct buckets, enforce or shadow, 0, 1, 2 or more
/// hits than the burst, limits changing as on a reload, the clock going back now and then),
/// a store on the specialised script, one on the general script, and two replicas on one
/// Redis (one on each script, taking turns) answer the same and leave the same bytes in
/// Redis, step after step.
#[tokio::test]
async fn the_specialised_script_answers_and_stores_exactly_what_the_general_one_does() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let specialised = store(&servers[0], |_| {});
    let general = store(&servers[1], |o| o.specialised = false);
    let mixed = [
        store(&servers[2], |_| {}),
        store(&servers[2], |o| o.specialised = false),
    ];
    let names: Vec<String> = (0..6).map(|i| key(&format!("b{i}"))).collect();
    let limits = limits();
    let modes = [Mode::Enforce, Mode::Enforce, Mode::Shadow];
    let mut rng = Rng(14);
    let mut now = START;
    for step in 0..600 {
        now = match rng.below(10) {
            0 => now,
            1 => now.saturating_sub(rng.below(3 * S / US) * US).max(START),
            2 => now + rng.below(3_600) * S,
            _ => now + rng.below(2 * S / US) * US,
        };
        // Distinct buckets (the specialised script's shape), in a random order.
        let picked = rng.distinct(4, names.len());
        let checks: Vec<Check<'_>> = picked
            .iter()
            .enumerate()
            .map(|(descriptor, &i)| {
                // Each bucket keeps one limit most of the time, as between reloads.
                let limit = if rng.below(8) == 0 {
                    rng.pick(&limits)
                } else {
                    limits[i % limits.len()]
                };
                let hits = match rng.below(8) {
                    0 => 0,
                    1 => 2,
                    2 => u64::from(limit.burst) + 1,
                    _ => 1,
                };
                let mode = rng.pick(&modes);
                check(&names[i], limit, hits, mode, descriptor)
            })
            .collect();
        let answers: [Vec<Report>; 3] = [
            specialised
                .check(&checks, now)
                .await
                .expect("decided")
                .to_vec(),
            general.check(&checks, now).await.expect("decided").to_vec(),
            mixed[step % 2]
                .check(&checks, now)
                .await
                .expect("decided")
                .to_vec(),
        ];
        assert_eq!(answers[0], answers[1], "step {step}: {checks:?} at {now}");
        assert_eq!(answers[0], answers[2], "step {step}: {checks:?} at {now}");
        let stored = settled_states(&servers, &names);
        assert_eq!(stored[0], stored[1], "step {step}: states");
        assert_eq!(stored[0], stored[2], "step {step}: states");
    }
    // The specialised store did use its script, and the general one never did. The script
    // Redis runs is the line setting the expiry jitter (none here), the shared arithmetic,
    // then the specialised script (script.rs).
    let buckets_sha = redis::Script::new(concat!(
        "local EXPIRY_JITTER_MS = 0\n",
        include_str!("../src/store/redis/exact.lua"),
        include_str!("../src/store/redis/decide_buckets.lua")
    ))
    .get_hash()
    .to_string();
    let loaded = |server: &RedisServer| server.cli(&["SCRIPT", "EXISTS", &buckets_sha]);
    assert_eq!(loaded(&servers[0]).trim(), "1");
    assert_eq!(loaded(&servers[1]).trim(), "0");
}

/// Script calls a server has run (`EVALSHA` and `EVAL`) since its statistics were reset.
fn script_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    ["cmdstat_evalsha:", "cmdstat_eval:"]
        .iter()
        .filter_map(|prefix| {
            let line = stats.lines().find(|l| l.starts_with(prefix))?;
            let calls = line.split("calls=").nth(1)?.split(',').next()?;
            Some(calls.parse::<u64>().expect("a count"))
        })
        .sum()
}

/// `EVAL` calls a server has run since its statistics were reset.
fn eval_calls(server: &RedisServer) -> u64 {
    let stats = server.cli(&["INFO", "commandstats"]);
    stats
        .lines()
        .find(|l| l.starts_with("cmdstat_eval:"))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// One request of `buckets` (each its own descriptor) on `store` at START, in a task:
/// whether it was allowed, or the error.
fn spawn_request(
    store: &RedisStore,
    buckets: &[(&str, Limit)],
) -> tokio::task::JoinHandle<Result<bool, String>> {
    let store = store.clone();
    let buckets: Vec<(String, Limit)> = buckets.iter().map(|(n, l)| (key(n), *l)).collect();
    tokio::spawn(async move {
        let checks: Vec<Check<'_>> = buckets
            .iter()
            .enumerate()
            .map(|(i, (name, limit))| check(name, *limit, 1, Mode::Enforce, i))
            .collect();
        match store.check(&checks, START).await {
            Ok(reports) => Ok(!reports.iter().any(|r| r.over)),
            Err(e) => Err(e.to_string()),
        }
    })
}

/// The plug P, then A, B, C and D, spawned in that order on the test's one thread: P is
/// sent alone (one call in flight), and A to D queue behind it, in order, for the next
/// call. Each bucket holds one token an hour.
fn plug_then_four(store: &RedisStore) -> Vec<tokio::task::JoinHandle<Result<bool, String>>> {
    let one = bucket(1, Unit::Hour, 1, 1);
    vec![
        spawn_request(store, &[("p", one)]),
        // A takes k's token.
        spawn_request(store, &[("k", one)]),
        // B is denied (k is empty now), so it takes nothing from k2...
        spawn_request(store, &[("k2", one), ("k", one)]),
        // ...which C then finds full,
        spawn_request(store, &[("k2", one)]),
        // and D finds k empty: A's consumption stands whatever B's fate.
        spawn_request(store, &[("k", one)]),
    ]
}

async fn answers(
    tasks: Vec<tokio::task::JoinHandle<Result<bool, String>>>,
) -> Vec<Result<bool, String>> {
    let mut out = Vec::new();
    for task in tasks {
        out.push(task.await.expect("the request's task"));
    }
    out
}

/// Issue 14: requests that wait while a call is in flight go to Redis in one call, which
/// decides them in arrival order, each all-or-nothing on its own: of two requests for a
/// bucket of one token in one call exactly the first passes, a denied request takes
/// nothing (another request of the call finds its bucket full), and a later request sees
/// what an earlier one took. For both scripts.
#[tokio::test]
async fn waiting_requests_go_in_one_call_decided_in_order_each_all_or_nothing() {
    for (specialised, calls_in_flight) in [(true, 1), (false, 1)] {
        let server = RedisServer::start();
        let store = store(&server, |o| {
            o.calls_in_flight = calls_in_flight;
            o.specialised = specialised;
        });
        // Connected, and the script loaded (the first call, alone, is an EVALSHA answered
        // NOSCRIPT, then an EVAL).
        let one = bucket(1, Unit::Hour, 1, 1);
        let warm = answers(vec![spawn_request(&store, &[("warm", one)])]).await;
        assert_eq!(warm, [Ok(true)]);
        server.cli(&["CONFIG", "RESETSTAT"]);
        let before = store.stats();
        let got = answers(plug_then_four(&store)).await;
        let expected: Vec<Result<bool, String>> =
            vec![Ok(true), Ok(true), Ok(false), Ok(true), Ok(false)];
        assert_eq!(got, expected, "specialised: {specialised}");
        assert_eq!(
            script_calls(&server),
            2,
            "specialised: {specialised}: the plug alone, then the four waiting requests together"
        );
        // meshlimit counts the same calls, and the requests they carried.
        let after = store.stats();
        assert_eq!(
            (
                after.calls - before.calls,
                after.call_requests - before.call_requests
            ),
            (2, 5)
        );
        assert!(after.call_nanos > before.call_nanos);
        // What the call left in Redis: k and k2 empty, for an hour.
        let later = store
            .check(
                &[
                    check(&key("k"), one, 1, Mode::Enforce, 0),
                    check(&key("k2"), one, 1, Mode::Enforce, 1),
                ],
                START + S,
            )
            .await
            .expect("decided");
        assert!(later.iter().all(|r| r.over), "{later:?}");
    }
}

/// Issue 47: behind a round trip (a proxy holding every byte 2 ms each way), a node
/// learns it from its first call and sends the requests that follow in calls of their own
/// beside the one in flight, as far as `--redis-calls-in-flight` allows; bounded to one,
/// they wait and go together in the next call.
#[tokio::test]
async fn behind_a_round_trip_calls_start_beside_the_one_in_flight_up_to_the_bound() {
    for (calls_in_flight, expected_calls) in [(16, 5), (3, 4), (1, 2)] {
        let server = RedisServer::start();
        let target = server.addr().parse().expect("an address");
        let proxy = DelayProxy::start(target, Duration::from_millis(2));
        let far = format!("redis://127.0.0.1:{}", proxy.port());
        let store = store_at(far, |o| o.calls_in_flight = calls_in_flight);
        let one = bucket(1, Unit::Hour, 1, 1);
        let warm = answers(vec![spawn_request(&store, &[("warm", one)])]).await;
        assert_eq!(warm, [Ok(true)]);
        server.cli(&["CONFIG", "RESETSTAT"]);
        let names = ["p", "a", "b", "c", "d"];
        let tasks = names.iter().map(|n| spawn_request(&store, &[(n, one)]));
        let got = answers(tasks.collect()).await;
        assert!(got.iter().all(|a| a == &Ok(true)), "{got:?}");
        assert_eq!(got.len(), 5, "{calls_in_flight} calls in flight");
        assert_eq!(
            script_calls(&server),
            expected_calls,
            "{calls_in_flight} calls in flight at most: P, then each request while calls \
             are free, then the rest together"
        );
    }
}

/// A coalesced call that finds its script flushed (a restart, a failover, `SCRIPT FLUSH`)
/// runs again from the script's text, for every request of the call.
#[tokio::test]
async fn a_coalesced_call_reloads_a_flushed_script_for_all_its_requests() {
    for specialised in [true, false] {
        let server = RedisServer::start();
        let store = store(&server, |o| {
            o.calls_in_flight = 1;
            o.specialised = specialised;
        });
        server.cli(&["SCRIPT", "FLUSH"]);
        server.cli(&["CONFIG", "RESETSTAT"]);
        let got = answers(plug_then_four(&store)).await;
        let expected: Vec<Result<bool, String>> =
            vec![Ok(true), Ok(true), Ok(false), Ok(true), Ok(false)];
        assert_eq!(got, expected, "specialised: {specialised}");
        // The plug's call reloaded the script; the batch's EVALSHA found it.
        assert_eq!(eval_calls(&server), 1, "specialised: {specialised}");
        assert_eq!(store.stats().errors, 0);
    }
}

/// A request that gives up while it waits for a call (its client went away) is never sent:
/// it takes nothing from Redis.
#[tokio::test]
async fn a_request_that_gives_up_while_waiting_is_never_sent() {
    let mut server = RedisServer::start();
    let store = store(&server, |o| {
        o.calls_in_flight = 1;
        o.timeout = Duration::from_millis(300);
    });
    let one = bucket(1, Unit::Hour, 1, 1);
    assert_eq!(
        answers(vec![spawn_request(&store, &[("warm", one)])]).await,
        [Ok(true)]
    );
    // The plug hangs on a frozen Redis; the others wait behind it.
    server.freeze();
    let plug = spawn_request(&store, &[("p", one)]);
    let gives_up = spawn_request(&store, &[("k", one)]);
    let waiting = spawn_request(&store, &[("w", one)]);
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    gives_up.abort();
    assert!(gives_up.await.is_err_and(|e| e.is_cancelled()));
    // The plug's call times out; so does the request still waiting (by its own deadline).
    for task in [plug, waiting] {
        let answer = task.await.expect("task");
        assert!(answer.is_err(), "{answer:?}");
    }
    server.thaw();
    support::eventually_async(20, "Redis decides again", || async {
        store.maintain();
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.health().is_healthy()
    })
    .await;
    let k = store
        .check(&[check(&key("k"), one, 1, Mode::Enforce, 0)], START)
        .await
        .expect("decided");
    assert!(!k[0].over, "k's token was taken by a request that gave up");
}

/// A call that fails fails every request it carries, each answered by the failure policy,
/// and the node's circuit opens; all decide again once Redis takes writes.
#[tokio::test]
async fn a_failed_call_fails_every_request_it_carries() {
    let server = RedisServer::start();
    let store = store(&server, |o| {
        o.calls_in_flight = 1;
        o.failure = FailurePolicy::Error;
    });
    let one = bucket(1, Unit::Hour, 1, 1);
    assert_eq!(
        answers(vec![spawn_request(&store, &[("warm", one)])]).await,
        [Ok(true)]
    );
    // Out of memory under noeviction: every script call is refused.
    server.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    server.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let before = store.stats();
    let got = answers(plug_then_four(&store)).await;
    for answer in &got {
        assert!(answer.as_ref().is_err_and(|e| e.contains("OOM")), "{got:?}");
    }
    let after = store.stats();
    assert_eq!(after.errors, 5, "{after:?}");
    // The two calls that failed (the plug's, then the four's) count as calls.
    assert_eq!(
        (
            after.calls - before.calls,
            after.call_requests - before.call_requests
        ),
        (2, 5)
    );
    assert!(!store.health().is_healthy());
    server.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    support::eventually_async(20, "Redis decides again", || async {
        store.maintain();
        tokio::time::sleep(Duration::from_millis(50)).await;
        store.health().is_healthy()
    })
    .await;
    let expected: Vec<Result<bool, String>> =
        vec![Ok(true), Ok(true), Ok(false), Ok(true), Ok(false)];
    assert_eq!(answers(plug_then_four(&store)).await, expected);
}

/// In a Cluster, a call's keys must share one slot (the domain, the hash tag): requests of
/// many domains waiting for the same master go in calls of one domain each, and every
/// domain is still limited exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn coalesced_calls_in_a_cluster_keep_to_one_slot_each() {
    let cluster = RedisCluster::start(3);
    let domains: Vec<String> = (0..12).map(|i| format!("d{i}")).collect();
    let files: Vec<(PathBuf, String)> = domains
        .iter()
        .map(|d| {
            let yaml = format!(
                "domain: {d}\ndescriptors:\n  - key: user\n    rate_limit: {{unit: day, requests_per_unit: 5}}\n"
            );
            (PathBuf::from(format!("{d}.yaml")), yaml)
        })
        .collect();
    let config = Config::from_sources(&files).expect("valid config");
    let options = RedisOptions {
        timeout: Duration::from_secs(10),
        calls_in_flight: 1,
        ..RedisOptions::new(cluster.url())
    };
    let clock: Arc<dyn Clock> = Arc::new(SystemClock);
    let service = Arc::new(support::redis_replica(config, clock, options));
    let tasks: Vec<_> = (0..240)
        .map(|i| {
            let service = service.clone();
            let domain = domains[i % domains.len()].clone();
            tokio::spawn(async move {
                let response = service
                    .should_rate_limit(Request::new(
                        &domain,
                        &[Descriptor::new(&[("user", "u")])],
                        0,
                    ))
                    .await
                    .expect("decided");
                (domain, !response.over_limit)
            })
        })
        .collect();
    let mut passed = std::collections::BTreeMap::<String, usize>::new();
    for task in tasks {
        let (domain, ok) = task.await.expect("task");
        *passed.entry(domain).or_default() += usize::from(ok);
    }
    for domain in &domains {
        assert_eq!(passed.get(domain), Some(&5), "{domain}: {passed:?}");
    }
    assert_eq!(support::redis_stats(&service).errors, 0);
}

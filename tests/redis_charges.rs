//! The Redis store's charges and refunds (issue 39) where the conformance table cannot
//! reach: random walks of charges, refunds and checks against the embedded store on both
//! decision scripts and on two replicas sharing one Redis, the over-limit cache replaced
//! by a charge or refund's reply, and leases that never hide a debt. Each test starts its
//! own `redis-server`s; the script reads the manual clock ([`TimeSource::Caller`]).

mod support;

use std::sync::Arc;
use std::time::Duration;

use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::{ManualClock, NANOS_PER_SEC, Nanos};
use meshlimit::limiter::Report;
use meshlimit::rules::{Algorithm, Limit, Mode, Unit};
use meshlimit::store::redis::{RedisOptions, TimeSource};
use meshlimit::store::{Check, MemoryStore, RedisStore};
use support::START;
use support::redis::RedisServer;
use support::rng::Rng;

const S: Nanos = NANOS_PER_SEC;
const MS: Nanos = 1_000_000;
const US: Nanos = 1_000;

/// The key of bucket `name` (one Cluster slot, were it one).
fn key(name: &str) -> String {
    format!("7:charges{}:{name}", name.len())
}

fn limit(algorithm: Algorithm, rpu: u32, unit: Unit, burst: u32, charge: bool) -> Limit {
    Limit {
        charge,
        requests_per_unit: rpu,
        unit,
        multiplier: 1,
        burst,
        algorithm,
    }
}

/// A token bucket of `rpu` a `unit`, burst `rpu`, that charges.
fn charging(rpu: u32, unit: Unit) -> Limit {
    limit(Algorithm::TokenBucket, rpu, unit, rpu, true)
}

/// A check of `hits` on bucket `key`, given back when `refund`.
fn check(key: &str, limit: Limit, hits: u64, refund: bool, mode: Mode, at: usize) -> Check<'_> {
    Check {
        refund,
        key: key.into(),
        limit,
        hits,
        mode,
        descriptor: at,
        hold: None,
    }
}

/// A store on `server` reading the caller's time, with a generous timeout (a loaded
/// machine must not turn a slow answer into a failure).
fn store(server: &RedisServer, tweak: impl FnOnce(&mut RedisOptions)) -> RedisStore {
    let mut options = RedisOptions {
        time: TimeSource::Caller,
        timeout: Duration::from_secs(10),
        ..RedisOptions::new(server.url())
    };
    tweak(&mut options);
    RedisStore::new(options, Arc::new(ManualClock::new(START))).expect("valid URL")
}

/// A report as both stores must give it: not whether it came from the over-limit cache,
/// and a token bucket's wait in whole microseconds, rounded up, as the script counts it.
fn comparable(report: &Report, check: &Check<'_>) -> Report {
    let mut report = Report {
        cached: false,
        ..*report
    };
    if check.limit.algorithm == Algorithm::TokenBucket {
        report.reset = report.reset.div_ceil(US) * US;
    }
    report
}

/// Takes the TTL off every key of `names` on `server`: Redis counts TTLs in real time,
/// which the manual clock does not follow, so a bucket nearly full could expire during
/// the test's milliseconds while the manual clock says it still owes a little.
fn persist(server: &RedisServer, names: &[String]) {
    let mut conn = redis::Client::open(server.url())
        .expect("valid URL")
        .get_connection()
        .expect("connected");
    let mut pipe = redis::pipe();
    for name in names {
        pipe.cmd("PERSIST")
            .arg(BucketKey::from(name.as_str()).redis_key(""))
            .ignore();
    }
    pipe.query::<()>(&mut conn).expect("PERSIST");
}

/// Limits of the walk: charging token buckets (a refill rate of one scaled unit per
/// quantum, and one of three), one that never refills, windows that charge, and a token
/// bucket that does not charge (a request mixing both goes the careful way).
fn limits() -> [Limit; 6] {
    [
        charging(5, Unit::Second),
        limit(Algorithm::TokenBucket, 3, Unit::Second, 4, true),
        limit(Algorithm::TokenBucket, 0, Unit::Second, 2, true),
        limit(Algorithm::FixedWindow, 5, Unit::Second, 5, true),
        limit(Algorithm::SlidingWindow, 10, Unit::Second, 10, true),
        limit(Algorithm::TokenBucket, 10, Unit::Second, 10, false),
    ]
}

/// Issue 39's exactness on Redis: random requests of charges (of 1, a few, past the
/// burst, far past the debt ceiling), refunds (of nothing, a few, more than owed) and
/// checks of nothing, one to three buckets each, enforce or shadow, decided by the
/// specialised script, by the general one, and by two replicas on one Redis taking turns
/// (one on each script), all answer as the embedded store, owed hits included, step after
/// step. The replicas keep no over-limit snapshot: another replica's refund may outlive
/// one (see over_limit_cache), which the walk would see.
#[tokio::test]
async fn charges_and_refunds_answer_as_on_the_embedded_store_on_either_script_and_replica() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let clock = Arc::new(ManualClock::new(START));
    let memory = MemoryStore::new(10_000, clock);
    let no_cache = |o: &mut RedisOptions| o.cache_ttl = Duration::ZERO;
    let specialised = store(&servers[0], |_| {});
    let general = store(&servers[1], |o| o.specialised = false);
    let replicas = [
        store(&servers[2], no_cache),
        store(&servers[2], |o| {
            no_cache(o);
            o.specialised = false;
        }),
    ];
    let names: Vec<String> = (0..6).map(|i| key(&format!("b{i}"))).collect();
    let limits = limits();
    let modes = [Mode::Enforce, Mode::Enforce, Mode::Shadow];
    let mut rng = Rng(39);
    let mut now = START;
    for step in 0..500 {
        now += match rng.below(6) {
            0 => 0,
            1 => rng.below(3) * S,
            _ => rng.below(400 * MS / US) * US,
        };
        let picked = rng.distinct(3, names.len());
        let checks: Vec<Check<'_>> = picked
            .iter()
            .enumerate()
            .map(|(descriptor, &i)| {
                let limit = limits[i % limits.len()];
                let hits = match rng.below(7) {
                    0 => 0,
                    1 => 3,
                    2 => u64::from(limit.burst) + 2,
                    3 => 1_000_000,
                    _ => 1,
                };
                let refund = limit.charge && rng.below(4) == 0;
                check(&names[i], limit, hits, refund, rng.pick(&modes), descriptor)
            })
            .collect();
        let expected: Vec<Report> = memory.check(&checks, now).to_vec();
        let answers = [
            specialised.check(&checks, now).await.expect("decided"),
            general.check(&checks, now).await.expect("decided"),
            replicas[step % 2]
                .check(&checks, now)
                .await
                .expect("decided"),
        ];
        for (store, answer) in answers.iter().enumerate() {
            for (i, check) in checks.iter().enumerate() {
                assert_eq!(
                    comparable(&answer[i], check),
                    comparable(&expected[i], check),
                    "step {step}, store {store}, check {i} of {checks:?} at START + {} µs \
                     (Redis left, embedded right)",
                    (now - START) / US,
                );
            }
        }
        for server in &servers {
            persist(server, &names);
        }
    }
}

/// A charge's reply puts this replica's over-limit snapshot in place (a check of nothing
/// then refused here, with the exact wait and what is owed), and a refund's reply that lets
/// the bucket pass removes it at once: the next check passes on this replica. Another
/// replica's snapshot outlives that refund until it expires (the documented bound): it
/// still refuses, from its cache.
#[tokio::test]
async fn a_charge_or_refund_replaces_this_replicas_over_limit_snapshot() {
    let server = RedisServer::start();
    let here = store(&server, |_| {});
    let there = store(&server, |_| {});
    let name = key("user");
    // 10,000 a minute: a token every 6 ms.
    let user = charging(10_000, Unit::Minute);
    let at = |hits, refund| [check(&name, user, hits, refund, Mode::Enforce, 0)];
    let now = START;
    let charged = here.check(&at(12_000, false), now).await.expect("decided");
    assert_eq!((charged[0].over, charged[0].owed(&user)), (true, 2_000));
    assert_eq!(charged[0].reset, 2_001 * 6 * MS);
    // Both replicas learn the debt: the other by asking Redis once.
    let seen_there = there.check(&at(0, false), now).await.expect("decided");
    assert!(seen_there[0].over && !seen_there[0].cached);
    let refused = here.check(&at(0, false), now).await.expect("decided");
    assert!(
        refused[0].cached,
        "refused from the snapshot the charge left"
    );
    assert_eq!((refused[0].over, refused[0].owed(&user)), (true, 2_000));
    assert_eq!(refused[0].reset, 2_001 * 6 * MS);
    // A charge is never answered from the snapshot: it reaches Redis and lands.
    let misses = here.stats().misses;
    let more = here.check(&at(1_000, false), now).await.expect("decided");
    assert!(!more[0].cached && more[0].over);
    assert_eq!(
        (more[0].owed(&user), here.stats().misses),
        (3_000, misses + 1)
    );
    // A refund out of debt: not over, and the snapshot is gone here at once.
    let back = here.check(&at(5_000, true), now).await.expect("decided");
    assert!(!back[0].over && !back[0].cached);
    assert_eq!((back[0].remaining, back[0].owed(&user)), (2_000, 0));
    let passes = here.check(&at(0, false), now).await.expect("decided");
    assert!(!passes[0].over && !passes[0].cached, "{passes:?}");
    assert_eq!(passes[0].remaining, 2_000);
    // The other replica's snapshot still refuses, until one hit could pass as of it.
    let stale = there.check(&at(0, false), now).await.expect("decided");
    assert!(stale[0].over && stale[0].cached, "{stale:?}");
    let later = now + 2_001 * 6 * MS;
    let fresh = there.check(&at(0, false), later).await.expect("decided");
    assert!(!fresh[0].over && !fresh[0].cached, "{fresh:?}");
}

/// A limit that charges never leases, and a charge drops this replica's lease of its key
/// (left by an earlier, non-charging limit of the key, as before a reload): nothing more is
/// spent from it, and a check of nothing on the bucket in debt is refused by Redis, not
/// passed from leased tokens.
#[tokio::test]
async fn a_charge_drops_the_lease_of_its_key_and_a_debt_is_never_hidden_by_one() {
    let server = RedisServer::start();
    let leasing = store(&server, |o| {
        o.lease = 4;
        o.lease_ttl = Duration::from_secs(3600);
    });
    let name = key("user");
    let before = limit(Algorithm::TokenBucket, 10, Unit::Second, 10, false);
    let after = Limit {
        charge: true,
        ..before
    };
    let one = |limit, hits, refund| [check(&name, limit, hits, refund, Mode::Enforce, 0)];
    let now = START;
    // The first request leases 4 tokens; the next ones spend them here.
    leasing
        .check(&one(before, 1, false), now)
        .await
        .expect("decided");
    leasing
        .check(&one(before, 1, false), now)
        .await
        .expect("decided");
    assert_eq!(leasing.stats().lease_hits, 1);
    // The limit charges now: a charge past what is left goes to Redis and lands.
    let charged = leasing
        .check(&one(after, 10, false), now)
        .await
        .expect("decided");
    assert!(charged[0].over && !charged[0].cached);
    // 10 - 1 - 4 leased, then 10 charged: 5 owed (the lease's 3 unspent stay taken).
    assert_eq!(charged[0].owed(&after), 5);
    // The old limit's lease is gone: nothing spent from it.
    let old = leasing
        .check(&one(before, 1, false), now)
        .await
        .expect("decided");
    assert_eq!(leasing.stats().lease_hits, 1, "{old:?}");
    // Checks of nothing, and charges, under the charging limit never pass from a lease.
    for hits in [0, 0, 1] {
        let refused = leasing
            .check(&one(after, hits, false), now)
            .await
            .expect("decided");
        assert!(refused[0].over, "{hits} hits: {refused:?}");
    }
    assert_eq!(leasing.stats().lease_hits, 1);
    // And a refund reaches Redis too.
    let misses = leasing.stats().misses;
    leasing
        .check(&one(after, 2, true), now)
        .await
        .expect("decided");
    assert_eq!(leasing.stats().misses, misses + 1);
}

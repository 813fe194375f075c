//! The Redis store against the embedded store, step by step on one manual clock (the
//! script reading the caller's time): sliding windows under random arrivals, unit
//! multipliers, several limits of one descriptor (quota mode counting a descriptor over
//! when any of its limits is), the over-limit cache with several limits, and leases
//! with windows. Each test starts a `redis-server` of its own.

mod support;

use std::time::Duration;

use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::{ManualClock, NANOS_PER_SEC, Nanos, Stopwatch};
use meshlimit::limiter::Report;
use meshlimit::rules::{Algorithm, Limit, Mode, SLIDING_SUBWINDOWS, Unit};
use meshlimit::store::redis::{RedisOptions, RedisStats, TimeSource};
use meshlimit::store::{Check, MemoryStore, RedisStore, Store};
use redis::aio::MultiplexedConnection;
use support::START;
use support::checks::check;
use support::redis::RedisServer;
use support::rng::Rng;

const S: Nanos = NANOS_PER_SEC;
const US: Nanos = 1_000;

/// The domain part every key of these tests starts with (one Cluster slot, were it one).
const DOMAIN: &str = "6:limits";

/// A Redis store and an embedded store asked the same things at the same times.
struct Pair {
    redis: RedisStore,
    memory: Store,
    /// The Redis the store decides on, killed when the test ends.
    server: RedisServer,
}

impl Pair {
    fn new(tweak: impl FnOnce(&mut RedisOptions)) -> Pair {
        let server = RedisServer::start();
        let clock = std::sync::Arc::new(ManualClock::new(START));
        let mut options = RedisOptions {
            time: TimeSource::Caller,
            // Generous: a loaded machine must not turn a slow answer into a failure.
            timeout: Duration::from_secs(10),
            ..RedisOptions::new(server.url())
        };
        tweak(&mut options);
        Pair {
            redis: RedisStore::new(options, clock.clone()).expect("valid URL"),
            memory: Store::Memory(MemoryStore::new(100_000, clock)),
            server,
        }
    }

    /// Both stores decide `checks` at `now`; their reports must agree (see
    /// [`comparable`]). Redis' reports.
    async fn check(&self, checks: &[Check<'_>], now: Nanos) -> Vec<Report> {
        let redis = self.redis.check(checks, now).await.expect("Redis decides");
        let memory = self.memory.check(checks, now).await.expect("embedded");
        assert_agree(checks, &redis, &memory, now, "check");
        redis.to_vec()
    }

    /// Both stores' state of `checks` at `now`, consuming nothing; must agree.
    async fn peek(&self, checks: &[Check<'_>], now: Nanos) {
        let redis = self.redis.peek(checks, now).await.expect("Redis answers");
        let memory = self.memory.peek(checks, now).await.expect("embedded");
        assert_agree(checks, &redis, &memory, now, "peek");
    }

    fn stats(&self) -> RedisStats {
        self.redis.stats()
    }

    /// Takes the TTL off every bucket of `keys` in Redis. Redis counts a TTL in real time,
    /// which the manual clock does not follow: a state that matters for a few more
    /// microseconds of the manual clock could expire during milliseconds of the test's
    /// real time. The embedded store keeps its states as long as its upkeep does not run,
    /// which it does not here.
    async fn persist(&self, conn: &mut MultiplexedConnection, keys: &[(String, Limit)]) {
        let mut pipe = redis::pipe();
        for (key, _) in keys {
            pipe.cmd("PERSIST")
                .arg(BucketKey::from(key.as_str()).redis_key(""))
                .ignore();
        }
        pipe.query_async::<()>(conn).await.expect("PERSIST");
    }

    /// A connection of the test's own to the Redis the store decides on.
    async fn connection(&self) -> MultiplexedConnection {
        redis::Client::open(self.server.url())
            .expect("valid URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connected")
    }
}

fn assert_agree(checks: &[Check<'_>], redis: &[Report], memory: &[Report], now: Nanos, what: &str) {
    assert_eq!(redis.len(), checks.len());
    for (i, check) in checks.iter().enumerate() {
        assert_eq!(
            comparable(&redis[i], check),
            comparable(&memory[i], check),
            "{what} {i} of {checks:?} at START + {} µs (Redis left, embedded right; \
             Redis cached: {})",
            (now - START) / US,
            redis[i].cached,
        );
    }
}

/// A report as both stores must give it. Where they may differ by design:
/// - whether it came from the over-limit cache;
/// - a token bucket's wait, which the script counts in whole microseconds, rounded up;
/// - a fixed window's count past its limit: a refusal from the over-limit cache does not
///   count the refused hits, as the embedded store (and Redis, asked) does.
fn comparable(report: &Report, check: &Check<'_>) -> Report {
    let limit = &check.limit;
    let mut report = Report {
        cached: false,
        ..*report
    };
    match limit.algorithm {
        Algorithm::TokenBucket => report.reset = report.reset.div_ceil(US) * US,
        Algorithm::FixedWindow => {
            report.count = report.count.min(u64::from(limit.requests_per_unit) + 1);
        }
        Algorithm::SlidingWindow => {}
    }
    report
}

fn limit(algorithm: Algorithm, rpu: u32, unit: Unit, multiplier: u32) -> Limit {
    Limit {
        charge: false,
        requests_per_unit: rpu,
        unit,
        multiplier,
        burst: rpu,
        algorithm,
    }
}

fn sliding(rpu: u32, unit: Unit, multiplier: u32) -> Limit {
    limit(Algorithm::SlidingWindow, rpu, unit, multiplier)
}

/// The key of bucket `name`.
fn key(name: &str) -> String {
    format!("{DOMAIN}{}:{name}", name.len())
}

/// The width of a sliding window's sub-window.
fn width(limit: &Limit) -> Nanos {
    limit.period_nanos() / SLIDING_SUBWINDOWS as u64
}

/// The next time, in whole microseconds (the script's resolution): most often onto,
/// just before or just after a sub-window edge of `limit`, sometimes anywhere within a
/// period or beyond, sometimes back a little when `back` (a wall clock stepping back),
/// never before `floor`.
fn next_time(rng: &mut Rng, now: Nanos, limit: &Limit, back: Option<Nanos>) -> Nanos {
    let w = width(limit);
    let edge = (now / w + 1) * w;
    let next = match rng.below(10) {
        0 => now,
        1 | 2 => edge,
        3 => edge - US,
        4 => edge + US,
        5 => now + rng.below(w / US) * US,
        6 => now + rng.below(limit.period_nanos() / US + limit.period_nanos() / (5 * US)) * US,
        7 => edge + (1 + rng.below(SLIDING_SUBWINDOWS as u64 + 1)) * w,
        8 => match back {
            Some(floor) => now.saturating_sub(rng.below(w / US) * US).max(floor),
            None => now,
        },
        _ => now + rng.below(10) * US,
    };
    next.max(START)
}

/// How far back the clock may step at `now` without the stores' answers depending on
/// upkeep: not past the latest sub-window edge of any of `keys`' limits. Across one, a
/// window emptied in between would count its next hit in the later sub-window on one
/// store (the empty state still held) and in the earlier on the other (the state
/// dropped as idle: by the script when it wrote it empty, by the embedded store's upkeep
/// whenever that runs). Neither store keeps an empty window on purpose.
fn back_floor(keys: &[(String, Limit)], now: Nanos) -> Nanos {
    keys.iter()
        .map(|(_, limit)| now - now % width(limit))
        .max()
        .unwrap_or(now)
}

/// One random request on `keys` (each with its limit): one to four checks, keys possibly
/// repeated, grouped into descriptors of one mode each, hits mostly one, sometimes 0 or
/// more than the limit.
fn random_request<'k>(rng: &mut Rng, keys: &'k [(String, Limit)]) -> Vec<Check<'k>> {
    let modes = [
        Mode::Enforce,
        Mode::Enforce,
        Mode::Shadow,
        Mode::Quota,
        Mode::Quota,
        Mode::ShadowQuota,
    ];
    let mut checks = Vec::new();
    let mut descriptor = 0;
    let mut mode = rng.pick(&modes);
    for i in 0..=rng.below(4) {
        if i > 0 && rng.below(2) == 0 {
            descriptor += 1;
            mode = rng.pick(&modes);
        }
        let (key, limit) = &keys[rng.below(keys.len() as u64) as usize];
        let hits = match rng.below(8) {
            0 => 0,
            1 => 2,
            2 => u64::from(limit.requests_per_unit) + 1,
            _ => 1,
        };
        checks.push(check(key, *limit, hits, mode, descriptor));
    }
    checks
}

/// Runs `steps` random requests on `keys` from `seed` on both stores, peeking at every
/// key now and then; the clock moves back sometimes when `back`.
async fn random_walk(pair: &Pair, keys: &[(String, Limit)], seed: u64, steps: usize, back: bool) {
    let mut rng = Rng(seed);
    let mut now = START;
    let mut conn = pair.connection().await;
    for step in 0..steps {
        let (_, paced_by) = &keys[rng.below(keys.len() as u64) as usize];
        let floor = back.then(|| back_floor(keys, now));
        now = next_time(&mut rng, now, paced_by, floor);
        let checks = random_request(&mut rng, keys);
        pair.check(&checks, now).await;
        pair.persist(&mut conn, keys).await;
        if step % 8 == 0 {
            let all: Vec<Check<'_>> = keys
                .iter()
                .enumerate()
                .map(|(i, (key, limit))| check(key, *limit, 0, Mode::Enforce, i))
                .collect();
            pair.peek(&all, now).await;
        }
    }
}

#[tokio::test]
async fn sliding_windows_on_redis_match_the_embedded_store_on_random_arrivals() {
    let pair = Pair::new(|_| {});
    let limits = [
        sliding(3, Unit::Second, 1),
        sliding(10, Unit::Minute, 5),
        sliding(1, Unit::Second, 2),
        sliding(0, Unit::Second, 1),
        sliding(7, Unit::Hour, 1),
    ];
    for seed in 0..4u64 {
        let keys: Vec<(String, Limit)> = limits
            .iter()
            .enumerate()
            .map(|(i, l)| (key(&format!("s{seed}.{i}")), *l))
            .collect();
        random_walk(&pair, &keys, seed, 300, true).await;
    }
    // The over-limit cache answered some of those, and its answers agreed too.
    let stats = pair.stats();
    assert!(stats.over_limit_hits > 0, "{stats:?}");
    assert_eq!(stats.errors, 0, "{stats:?}");
}

#[tokio::test]
async fn every_algorithm_with_a_multiplier_matches_the_embedded_store() {
    let pair = Pair::new(|_| {});
    let limits = [
        limit(Algorithm::TokenBucket, 2, Unit::Second, 3),
        limit(Algorithm::FixedWindow, 4, Unit::Second, 7),
        sliding(5, Unit::Second, 7),
        Limit {
            burst: 9,
            ..limit(Algorithm::TokenBucket, 3, Unit::Minute, 2)
        },
        limit(Algorithm::FixedWindow, 2, Unit::Minute, 5),
        // Never refills: both report one period, four seconds, as the wait.
        limit(Algorithm::TokenBucket, 0, Unit::Second, 4),
    ];
    for seed in 10..13u64 {
        let keys: Vec<(String, Limit)> = limits
            .iter()
            .enumerate()
            .map(|(i, l)| (key(&format!("m{seed}.{i}")), *l))
            .collect();
        // Forward only: a token bucket's state after the clock steps back is kept
        // differently by the two stores (Redis keeps the later instant).
        random_walk(&pair, &keys, seed, 300, false).await;
    }
}

/// A fixed window of N units starts at a multiple of N units since the epoch, on both
/// stores; Redis keeps each key exactly as long as its state matters.
#[tokio::test]
async fn multiplier_windows_align_to_the_epoch_and_keys_expire_with_their_state() {
    let pair = Pair::new(|_| {});
    // 2026-01-01T00:00Z is 3600 s into a five-hour block of the epoch (1767225600 mod
    // 18000): the window ends four hours later, not five.
    let five_hours = limit(Algorithm::FixedWindow, 2, Unit::Hour, 5);
    let week = limit(Algorithm::FixedWindow, 2, Unit::Day, 7);
    let window = limit(Algorithm::SlidingWindow, 3, Unit::Minute, 5);
    let bucket = Limit {
        burst: 1,
        ..limit(Algorithm::TokenBucket, 2, Unit::Second, 3)
    };
    let at = START + 100 * S;
    let cases = [
        (five_hours, "fixed5h", 4 * 3600 * S - 100 * S),
        // The epoch was a Thursday; 2026-01-01 is one too: a week's window starts now.
        (week, "fixed7d", 7 * 86_400 * S - 100 * S),
        // 30 s sub-windows; 100 s is in the one starting at 90 s, whose hit leaves the
        // window when the 11th after it starts: 90 + 330 = 420 s.
        (window, "sliding5m", 320 * S),
        // One token of 2 per 3 s refills in 1.5 s.
        (bucket, "bucket3s", 1_500 * 1_000_000),
    ];
    for (limit, name, state_lasts) in cases {
        let key = key(name);
        let sent = Stopwatch::start();
        let report = pair
            .check(&[check(&key, limit, 1, Mode::Enforce, 0)], at)
            .await;
        let ttl = u64::try_from(pttl(&pair.server, &key)).expect("a key with a TTL");
        let elapsed = u64::try_from(sent.until(Stopwatch::start()).as_millis()).expect("ms");
        let expected = state_lasts / 1_000_000;
        // Set to `expected` at some moment since `sent`; counting down since.
        assert!(
            ttl <= expected && ttl + elapsed + 1 >= expected,
            "{name}: PTTL {ttl} ms, expected {expected} ms less at most {elapsed} ms"
        );
        if limit.algorithm != Algorithm::TokenBucket {
            assert_eq!(report[0].reset, state_lasts, "{name}");
        }
    }
    // A check of 0 hits on a fresh sliding window writes nothing: nothing to keep.
    let fresh = key("fresh");
    pair.check(&[check(&fresh, window, 0, Mode::Enforce, 0)], at)
        .await;
    assert_eq!(pttl(&pair.server, &fresh), -2, "no key");
}

/// Redis' PTTL of bucket `key` in milliseconds (-2: no such key).
fn pttl(server: &RedisServer, key: &str) -> i64 {
    let redis_key = BucketKey::from(key).redis_key("");
    server
        .cli(&["PTTL", &redis_key])
        .trim()
        .parse()
        .expect("PTTL")
}

/// A quota-mode descriptor with two limits is over when either is: with another quota
/// descriptor over, the request is denied and takes nothing from the limit with room.
#[tokio::test]
async fn a_quota_descriptor_is_over_when_any_of_its_limits_is() {
    let pair = Pair::new(|_| {});
    let (a_minute, a_hour) = (key("qa.minute"), key("qa.hour"));
    let (b_minute, c_minute) = (key("qb.minute"), key("qc.minute"));
    let per_minute = sliding(1, Unit::Minute, 1);
    let per_hour = sliding(5, Unit::Hour, 1);
    // Descriptor `a` with both limits, then a one-limit quota descriptor keyed `other`.
    let request = |other, hits| {
        [
            check(&a_minute, per_minute, hits, Mode::Quota, 0),
            check(&a_hour, per_hour, hits, Mode::Quota, 0),
            check(other, per_minute, hits, Mode::Quota, 1),
        ]
    };
    let verdicts = |reports: &[Report]| {
        reports
            .iter()
            .map(|r| (r.over, r.remaining))
            .collect::<Vec<_>>()
    };
    let first = pair.check(&request(&b_minute, 1), START).await;
    assert_eq!(verdicts(&first), [(false, 0), (false, 4), (false, 0)]);
    // Both descriptors over, `a` by its minute limit only: denied, so its hourly limit
    // keeps its 4 (counting checks instead of descriptors, not every quota check would
    // be over, and the hourly limit would take one).
    let denied = pair.check(&request(&b_minute, 1), START + S).await;
    assert_eq!(verdicts(&denied), [(true, 0), (false, 4), (true, 0)]);
    pair.peek(&request(&b_minute, 0), START + S).await;
    // `a` over (its minute), `c` not: quota mode admits, and the limits with room take
    // their hits.
    let admitted = pair.check(&request(&c_minute, 1), START + 2 * S).await;
    assert_eq!(verdicts(&admitted), [(true, 0), (false, 3), (false, 0)]);
    pair.peek(&request(&c_minute, 0), START + 2 * S).await;
}

/// Each limit of a descriptor is its own key in the over-limit cache: a snapshot of a
/// daily cap answers only until the cap would admit again (the day rolls, the window
/// slides, the bucket refills), even while another limit of the descriptor still
/// refuses; and until then the cached refusal is what Redis would say.
#[tokio::test]
async fn a_cached_refusal_of_one_limit_ends_when_that_limit_would_admit() {
    let pair = Pair::new(|o| {
        // Snapshots outlive the test's real time: only the manual clock ends them.
        o.cache_ttl = Duration::from_secs(3600);
    });
    let caps = [
        limit(Algorithm::FixedWindow, 1, Unit::Day, 1),
        sliding(1, Unit::Day, 1),
        limit(Algorithm::TokenBucket, 1, Unit::Day, 1),
    ];
    // A week-long limit of the same descriptor, refusing long after the cap.
    let weekly = sliding(1, Unit::Week, 1);
    for (i, cap) in caps.into_iter().enumerate() {
        let (cap_key, week_key) = (key(&format!("cap{i}")), key(&format!("week{i}")));
        let request = [
            check(&cap_key, cap, 1, Mode::Enforce, 0),
            check(&week_key, weekly, 1, Mode::Enforce, 0),
        ];
        // An hour before midnight, then refused by both.
        let t0 = START + 23 * 3600 * S;
        pair.check(&request, t0).await;
        let refused = pair.check(&request, t0 + S).await;
        assert!(refused.iter().all(|r| r.over && !r.cached), "{cap:?}");
        let cap_admits = t0 + S + refused[0].reset;
        assert!(cap_admits - t0 <= 86_400 * S + 3 * 8640 * S, "{cap:?}");

        let before = pair.stats();
        let cached = pair.check(&request, cap_admits - US).await;
        assert!(cached.iter().all(|r| r.over && r.cached), "{cap:?}");
        assert_eq!(pair.stats().misses, before.misses, "{cap:?}");

        // The cap admits: Redis is asked, and only the weekly limit refuses.
        let asked = pair.check(&request, cap_admits).await;
        assert_eq!(pair.stats().misses, before.misses + 1, "{cap:?}");
        assert_eq!(
            asked.iter().map(|r| (r.over, r.cached)).collect::<Vec<_>>(),
            [(false, false), (true, false)],
            "{cap:?}"
        );
    }
}

/// Leases are taken from token buckets only, and not for a descriptor that also has a
/// window limit: no request of it could spend them. Redis then holds every token, as the
/// embedded store does.
#[tokio::test]
async fn a_descriptor_with_a_window_limit_leases_nothing() {
    let pair = Pair::new(|o| {
        o.lease = 4;
        o.lease_ttl = Duration::from_secs(3600);
    });
    let (bucket_key, window_key) = (key("lb"), key("lw"));
    // Slow enough that no key expires in the test's real time (a token per 6 s).
    let bucket = limit(Algorithm::TokenBucket, 10, Unit::Minute, 1);
    let window = sliding(100, Unit::Hour, 1);
    let request = [
        check(&bucket_key, bucket, 1, Mode::Enforce, 0),
        check(&window_key, window, 1, Mode::Enforce, 0),
    ];
    for i in 0..6 {
        let reports = pair.check(&request, START + i * 10 * 1_000_000).await;
        assert!(reports.iter().all(|r| !r.over));
    }
    pair.peek(&request, START + S).await;
    assert_eq!(pair.stats().lease_hits, 0);
}

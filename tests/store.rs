//! The embedded store under concurrency and memory bounds.

mod support;

use std::sync::Arc;
use std::time::Duration;

use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::{Clock, ManualClock};
use meshlimit::rules::{Algorithm, Limit, Mode, Unit};
use meshlimit::store::{Bounds, Check, MemoryStore};

fn limit(rpu: u32, algorithm: Algorithm) -> Limit {
    Limit {
        charge: false,
        requests_per_unit: rpu,
        unit: Unit::Hour,
        multiplier: 1,
        burst: rpu,
        algorithm,
    }
}

/// N concurrent single-descriptor requests against a limit L on a multi-threaded runtime:
/// exactly L pass, for both algorithms.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn exactly_the_limit_passes_under_concurrency() {
    for algorithm in [Algorithm::TokenBucket, Algorithm::FixedWindow] {
        let clock = ManualClock::new(support::START);
        let store = MemoryStore::new(10_000, Arc::new(clock.clone()));
        let (limit_n, tasks, per_task) = (137u32, 16, 50);
        let handles: Vec<_> = (0..tasks)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move {
                    let mut passed = 0u32;
                    for _ in 0..per_task {
                        let check = Check {
                            refund: false,
                            key: "hot".into(),
                            limit: limit(limit_n, algorithm),
                            hits: 1,
                            mode: Mode::Enforce,
                            descriptor: 0,
                            hold: None,
                        };
                        passed += u32::from(!store.check(&[check], support::START)[0].over);
                        tokio::task::yield_now().await;
                    }
                    passed
                })
            })
            .collect();
        let mut passed = 0;
        for h in handles {
            passed += h.await.unwrap();
        }
        assert_eq!(passed, limit_n, "{algorithm:?}");
    }
}

/// Two descriptors per request, one scarce and one plentiful, from many threads: the
/// plentiful bucket is charged exactly once per request that passed, never for a denied one.
#[test]
fn all_or_nothing_under_concurrency() {
    let clock = ManualClock::new(support::START);
    let store = MemoryStore::new(10_000, Arc::new(clock.clone()));
    let scarce = limit(40, Algorithm::TokenBucket);
    let plenty = limit(1_000_000, Algorithm::TokenBucket);
    let passed: u32 = std::thread::scope(|s| {
        let workers: Vec<_> = (0..8)
            .map(|i| {
                let store = store.clone();
                s.spawn(move || {
                    let mut passed = 0;
                    for _ in 0..100 {
                        // Alternate the order, so locks are taken in both request orders.
                        let a = Check {
                            refund: false,
                            key: "scarce".into(),
                            limit: scarce,
                            hits: 1,
                            mode: Mode::Enforce,
                            descriptor: 0,
                            hold: None,
                        };
                        let b = Check {
                            refund: false,
                            key: "plenty".into(),
                            limit: plenty,
                            hits: 1,
                            mode: Mode::Enforce,
                            descriptor: 0,
                            hold: None,
                        };
                        let checks = if i % 2 == 0 { [a, b] } else { [b, a] };
                        let reports = store.check(&checks, support::START);
                        passed += u32::from(!reports[0].over && !reports[1].over);
                    }
                    passed
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).sum()
    });
    assert_eq!(passed, 40);
    let probe = Check {
        refund: false,
        key: "plenty".into(),
        limit: plenty,
        hits: 0,
        mode: Mode::Enforce,
        descriptor: 0,
        hold: None,
    };
    let left = store.check(&[probe], support::START)[0].remaining;
    assert_eq!(left, 1_000_000 - 40);
}

/// The same descriptor twice in one request counts twice and does not deadlock.
#[test]
fn a_repeated_descriptor_counts_twice() {
    let clock = ManualClock::new(support::START);
    let store = MemoryStore::new(100, Arc::new(clock.clone()));
    let c = Check {
        refund: false,
        key: "k".into(),
        limit: limit(3, Algorithm::TokenBucket),
        hits: 1,
        mode: Mode::Enforce,
        descriptor: 0,
        hold: None,
    };
    let r = store.check(&[c, c], support::START);
    assert_eq!(
        (r[0].over, r[0].remaining, r[1].over, r[1].remaining),
        (false, 2, false, 1)
    );
    // 1 left, two asked: the second is over, so the request is denied and takes nothing.
    let r = store.check(&[c, c], support::START);
    assert!(!r[0].over && r[1].over);
    assert_eq!(
        store.check(&[c], support::START)[0].remaining,
        0,
        "the last token was still there"
    );
}

/// A limit whose bucket holds one token and refills in 1 ms: idle almost at once.
const FAST: Limit = Limit {
    charge: false,
    requests_per_unit: 1000,
    unit: Unit::Second,
    multiplier: 1,
    burst: 1,
    algorithm: Algorithm::TokenBucket,
};

fn one(key: &str, limit: Limit) -> Check<'_> {
    Check {
        refund: false,
        key: key.into(),
        limit,
        hits: 1,
        mode: Mode::Enforce,
        descriptor: 0,
        hold: None,
    }
}

/// The bucket bound holds at once, and idle (full again) buckets are dropped by upkeep.
#[test]
fn memory_is_bounded() {
    let clock = ManualClock::new(support::START);
    let store = MemoryStore::new(500, Arc::new(clock.clone()));
    for i in 0..5_000 {
        store.check(&[one(&format!("user-{i}"), FAST)], support::START);
        assert!(store.len() <= 500);
    }
    assert_eq!(store.len(), 500);
    // Every bucket refills in 1 ms of store time; once that has passed, they are idle.
    clock.advance(Duration::from_millis(5));
    store.maintain();
    assert!(store.is_empty());
    assert_eq!(store.stats().bytes, 0);
}

/// Upkeep drops the buckets that are idle by the store's clock (full again: dropping them
/// loses nothing) and never one that is not, however long since its last use.
#[test]
fn a_busy_bucket_survives_upkeep() {
    let clock = ManualClock::new(support::START);
    let store = MemoryStore::new(500, Arc::new(clock.clone()));
    // Busy: 100 an hour, 99 of them taken; a token comes back every 36 s.
    let busy = one("busy", PER_USER);
    let idle = one("idle", FAST);
    for _ in 0..99 {
        assert!(!store.check(&[busy], support::START)[0].over);
    }
    assert!(!store.check(&[idle], support::START)[0].over);
    store.maintain();
    assert_eq!(store.len(), 2, "neither is full again yet");

    // 5 ms later the fast bucket is full again, the busy one 5 ms of a token further.
    clock.advance(Duration::from_millis(5));
    store.maintain();
    assert_eq!(store.len(), 1, "the idle bucket expired");
    assert_eq!(store.stats().evictions, 0, "expiry is not eviction");
    assert_eq!(
        store.peek(&busy, clock.now()).remaining,
        1,
        "the busy bucket kept its state"
    );

    // Full again an hour later: then it goes too.
    clock.advance(Duration::from_secs(3600));
    store.maintain();
    assert!(store.is_empty(), "once idle, it goes");
    assert_eq!(store.stats().bytes, 0);
}

/// Issue 9, defect 4, and issue 14: a bucket counts the same bytes whatever its key's
/// length (the store keeps a 128-bit id of the key, not its text), and the byte bound
/// holds: the least recently used buckets go, not a caller that keeps using its own.
#[test]
fn a_bucket_counts_the_same_bytes_whatever_its_key_and_the_byte_bound_holds() {
    let probe = MemoryStore::new(10, Arc::new(ManualClock::new(support::START)));
    probe.check(&[one("a", PER_USER)], support::START);
    let per_bucket = probe.stats().bytes;
    probe.check(&[one(&"k".repeat(10_000), PER_USER)], support::START);
    assert_eq!(probe.stats().bytes, 2 * per_bucket);

    let bound = 100 * per_bucket;
    let store = MemoryStore::bounded(
        Bounds {
            buckets: 1_000_000,
            bytes: bound,
        },
        Arc::new(ManualClock::new(support::START)),
    );
    let large = "k".repeat(10_000);
    let caller = format!("caller-{large}");
    let mut passed = 0;
    for i in 0..1_000 {
        passed += usize::from(!store.check(&[one(&caller, PER_USER)], support::START)[0].over);
        store.check(&[one(&format!("{i}-{large}"), PER_USER)], support::START);
        let stats = store.stats();
        assert!(stats.bytes <= bound, "{stats:?}");
    }
    assert_eq!(passed, 100, "the caller kept its limit");
    let stats = store.stats();
    assert_eq!((stats.buckets, stats.bytes), (100, bound), "{stats:?}");
    assert!(stats.evictions > 800, "{stats:?}");
}

/// Issue 9, defect 1: evictions are counted, and those of buckets not yet full (a caller's
/// limit restarted) apart.
#[test]
fn evictions_that_weaken_a_limit_are_counted() {
    let clock = ManualClock::new(support::START);
    let store = MemoryStore::new(10, Arc::new(clock.clone()));
    let now = || clock.now();
    for i in 0..10 {
        store.check(&[one(&format!("fast-{i}"), FAST)], now());
    }
    clock.advance(Duration::from_millis(5));
    // The fast buckets are full again (idle, not yet dropped): evicting them loses nothing.
    for i in 0..10 {
        store.check(&[one(&format!("busy-{i}"), PER_USER)], now());
    }
    let stats = store.stats();
    assert_eq!((stats.evictions, stats.evictions_weakened), (10, 0));
    // Now each eviction takes a bucket missing a token.
    for i in 10..15 {
        store.check(&[one(&format!("busy-{i}"), PER_USER)], now());
    }
    let stats = store.stats();
    assert_eq!((stats.evictions, stats.evictions_weakened), (15, 5));
    assert_eq!((stats.buckets, store.len()), (10, 10));
}

/// A request with many descriptors (past the few that are compared pairwise for repeated
/// keys) is still all or nothing, and counts a repeated key once per descriptor.
#[test]
fn a_large_request_is_all_or_nothing() {
    let store = MemoryStore::new(100_000, Arc::new(ManualClock::new(support::START)));
    let keys: Vec<String> = (0..1_000).map(|i| format!("key-{i}")).collect();
    let scarce = one("scarce", limit(3, Algorithm::TokenBucket));
    let request: Vec<Check<'_>> = keys
        .iter()
        .map(|k| one(k, limit(5, Algorithm::TokenBucket)))
        .chain([scarce; 3])
        .collect();
    let reports = store.check(&request, support::START);
    assert!(reports.iter().all(|r| !r.over));
    assert_eq!(
        reports[1_002].remaining, 0,
        "the third `scarce` took the last token"
    );
    let reports = store.check(&request, support::START);
    assert!(reports[1_000].over, "no token left");
    assert!(reports[..1_000].iter().all(|r| !r.over && r.remaining == 4));
    for key in &keys {
        let left = store.peek(&one(key, limit(5, Algorithm::TokenBucket)), support::START);
        assert_eq!(
            left.remaining, 4,
            "the denied request took nothing from {key}"
        );
    }
}

/// Issue 9, defect 1: 100 per hour per user in a store of 1,000 buckets.
const PER_USER: Limit = Limit {
    charge: false,
    requests_per_unit: 100,
    unit: Unit::Hour,
    multiplier: 1,
    burst: 100,
    algorithm: Algorithm::TokenBucket,
};

/// Requests at the store's start, one key each, with the store's upkeep run every 64th
/// request, as the server runs it about once a second.
struct Traffic {
    store: MemoryStore,
    requests: u64,
    one_off: u64,
}

impl Traffic {
    fn new(store: MemoryStore) -> Self {
        Self {
            store,
            requests: 0,
            one_off: 0,
        }
    }

    /// One request of `user` under [`PER_USER`]; whether it passed.
    fn ask(&mut self, user: &str) -> bool {
        if self.requests.is_multiple_of(64) {
            self.store.maintain();
        }
        self.requests += 1;
        let check = Check {
            refund: false,
            key: user.into(),
            limit: PER_USER,
            hits: 1,
            mode: Mode::Enforce,
            descriptor: 0,
            hold: None,
        };
        !self.store.check(&[check], support::START)[0].over
    }

    /// Of `n` requests of `user`, how many passed.
    fn passed(&mut self, user: &str, n: usize) -> usize {
        (0..n).filter(|_| self.ask(user)).count()
    }

    /// `n` requests of keys never seen before.
    fn flood(&mut self, n: u64) {
        for _ in 0..n {
            self.ask(&format!("one-off-{}", self.one_off));
            self.one_off += 1;
        }
    }
}

/// Issue 9, defect 1: after a flood of one-off keys, a new caller alone was not limited:
/// moka's TinyLFU admission refused its bucket's registration (no more frequent than the
/// one-off keys), so the bucket was dropped and started full on every request.
#[test]
fn a_new_caller_is_limited_after_a_flood_of_one_off_keys() {
    let mut traffic = Traffic::new(MemoryStore::new(
        1000,
        Arc::new(ManualClock::new(support::START)),
    ));
    let before = traffic.passed("caller-before", 150);
    assert_eq!(before, 100, "a caller alone, before the flood");
    traffic.flood(20_000);
    let after = traffic.passed("caller-after", 150);
    assert_eq!(after, 100, "a new caller alone, after 20,000 one-off keys");
    assert!(traffic.store.len() <= 1000);
}

/// Issue 9, defect 1: a caller that arrives while one-off keys flood a full store keeps its
/// limit, as long as fewer than `max_buckets` keys are created between two of its requests
/// (290 here, against 1,000).
#[test]
fn a_caller_interleaved_with_a_flood_keeps_its_limit() {
    let mut traffic = Traffic::new(MemoryStore::new(
        1000,
        Arc::new(ManualClock::new(support::START)),
    ));
    traffic.flood(2_000);
    let mut passed = 0;
    for _ in 0..300 {
        passed += usize::from(traffic.ask("caller"));
        traffic.flood(290);
    }
    assert_eq!(passed, 100, "of 300 requests during a flood of 87,000 keys");
}

/// A limit of a `rate_limits` list: `key` is the descriptor's key (its first
/// `descriptor_len` bytes) then the limit's part.
fn listed(key: &str, descriptor_len: usize, limit: Limit) -> Check<'_> {
    Check {
        key: BucketKey::listed(key, descriptor_len),
        ..one(key, limit)
    }
}

/// A list's limits are one bucket: counted once, kept across a reload that adds a limit,
/// apart from a one-limit bucket of the same descriptor, and evicted and expired together.
#[test]
fn a_lists_limits_are_one_bucket() {
    let clock = ManualClock::new(support::START);
    let store = MemoryStore::new(2, Arc::new(clock.clone()));
    let now = support::START;
    let per_hour = limit(1, Algorithm::TokenBucket);
    let per_day = Limit {
        unit: Unit::Day,
        ..limit(10, Algorithm::FixedWindow)
    };
    let both = [
        listed("1:d7:n=hourly", 3, per_hour),
        listed("1:d6:n=daily", 3, per_day),
    ];
    assert!(store.check(&both, now).iter().all(|r| !r.over));
    assert_eq!(store.len(), 1);
    let bytes = store.stats().bytes;

    // A reload adds a third limit: still one bucket, a little bigger, and the hourly limit
    // still spent.
    let mut three = both.to_vec();
    three.push(listed("1:d5:p=1m", 3, limit(5, Algorithm::SlidingWindow)));
    let reports = store.check(&three, now);
    assert_eq!(
        reports.iter().map(|r| r.over).collect::<Vec<_>>(),
        [true, false, false]
    );
    assert_eq!(store.len(), 1);
    assert!(store.stats().bytes > bytes);
    // Denied: the daily window counted the hit (Go-exact), the sliding window did not.
    assert_eq!(store.peek(&three[1], now).count, 2);
    assert_eq!(store.peek(&three[2], now).remaining, 5);

    // The same descriptor with one limit (another reload) is a bucket of its own.
    store.check(&[one("1:d", per_hour)], now);
    assert_eq!(store.len(), 2);
    assert!(
        store.peek(&three[0], now).over,
        "the list's state is untouched"
    );

    // A third bucket evicts the least recently used: the whole list at once, its limits
    // restarting from full (a weakening eviction: the hourly bucket was not full again).
    store.check(&[one("1:e", per_hour)], now);
    assert_eq!(store.len(), 2);
    assert_eq!(store.stats().evictions_weakened, 1);
    assert!(!store.peek(&three[0], now).over);
    assert_eq!(store.peek(&three[1], now).count, 0, "none counted");

    // Kept again (evicting "1:d"), then idle only once every limit is: the hour refills
    // before the day ends (START is midnight).
    assert!(store.check(&both, now).iter().all(|r| !r.over));
    clock.advance(Duration::from_secs(3600));
    store.maintain();
    assert!(!store.peek(&both[1], clock.now()).over);
    assert_eq!(
        store.peek(&both[1], clock.now()).count,
        1,
        "kept for the day"
    );
    clock.advance(Duration::from_secs(86_400));
    store.maintain();
    assert!(store.is_empty());
    assert_eq!(store.stats().bytes, 0);
}

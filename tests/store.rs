//! The embedded store under concurrency and memory bounds.

mod support;

use std::sync::Arc;
use std::time::Duration;

use meshlimit::clock::{Clock, ManualClock};
use meshlimit::rules::{Algorithm, Limit, Mode, Unit};
use meshlimit::store::{Check, MemoryStore};

fn limit(rpu: u32, algorithm: Algorithm) -> Limit {
    Limit {
        requests_per_unit: rpu,
        unit: Unit::Hour,
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
                            key: "hot",
                            limit: limit(limit_n, algorithm),
                            hits: 1,
                            mode: Mode::Enforce,
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
                            key: "scarce",
                            limit: scarce,
                            hits: 1,
                            mode: Mode::Enforce,
                        };
                        let b = Check {
                            key: "plenty",
                            limit: plenty,
                            hits: 1,
                            mode: Mode::Enforce,
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
        key: "plenty",
        limit: plenty,
        hits: 0,
        mode: Mode::Enforce,
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
        key: "k",
        limit: limit(3, Algorithm::TokenBucket),
        hits: 1,
        mode: Mode::Enforce,
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

/// The entry bound holds, and idle (full again) buckets are dropped.
#[tokio::test]
async fn memory_is_bounded() {
    let clock = ManualClock::new(support::START);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let store = MemoryStore::new(500, shared);
    let fast = Limit {
        requests_per_unit: 1000,
        unit: Unit::Second,
        burst: 1,
        algorithm: Algorithm::TokenBucket,
    };
    for i in 0..5_000 {
        let key = format!("user-{i}");
        store.check(
            &[Check {
                key: &key,
                limit: fast,
                hits: 1,
                mode: Mode::Enforce,
            }],
            support::START,
        );
    }
    support::eventually(30, "size bound enforced", || {
        store.maintain();
        store.len() <= 500
    })
    .await;
    assert!(!store.is_empty());

    // Every bucket refills in 1 ms of store time; once that has passed they are idle and
    // expire when their registration does (a couple of real seconds).
    clock.advance(Duration::from_millis(5));
    support::eventually(30, "idle buckets expire", || {
        store.maintain();
        store.is_empty()
    })
    .await;
}

/// A bucket that is not idle by the store's clock is kept when its moka registration
/// expires in real time: expiry never loses state that still matters.
#[tokio::test]
async fn a_busy_bucket_survives_expiry() {
    let clock = ManualClock::new(support::START);
    let store = MemoryStore::new(500, Arc::new(clock.clone()));
    // Refills in 1 ms of store time, so its registration lives ~2 s of real time.
    let fast = Limit {
        requests_per_unit: 1000,
        unit: Unit::Second,
        burst: 1,
        algorithm: Algorithm::TokenBucket,
    };
    let c = Check {
        key: "busy",
        limit: fast,
        hits: 1,
        mode: Mode::Enforce,
    };
    assert!(!store.check(&[c], support::START)[0].over);
    // The store clock stands still: the bucket stays empty while real time passes the
    // registration's expiry.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    store.maintain();
    assert!(store.check(&[c], support::START)[0].over, "state was kept");
    assert_eq!(store.len(), 1);
    // Once idle by the store clock, it goes.
    clock.advance(Duration::from_millis(5));
    support::eventually(30, "idle bucket expires", || {
        store.maintain();
        store.is_empty()
    })
    .await;
}

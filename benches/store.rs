use std::collections::HashMap;
use std::hint::black_box;
use std::sync::{Arc, Mutex};

use criterion::{BenchmarkId, Criterion, Throughput};
use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::ManualClock;
use meshlimit::limiter::{self, State};
use meshlimit::rules::{Algorithm, Limit, Mode, Unit};
use meshlimit::store::{Check, HoldOp, MemoryStore, Phase};

use crate::fixture::run_threads;

const NOW: u64 = 1_767_225_600_000_000_000;
const KEYS: usize = 1024;

fn limit() -> Limit {
    // Large enough that every decision in a run passes: the common case.
    Limit {
        charge: false,
        requests_per_unit: u32::MAX,
        unit: Unit::Second,
        multiplier: 1,
        burst: u32::MAX,
        algorithm: Algorithm::TokenBucket,
    }
}

fn keys(prefix: &str) -> Vec<String> {
    // Shaped like real bucket keys: domain, user, method.
    (0..KEYS)
        .map(|i| {
            format!(
                "7:trading7:user_id4:{prefix}{i:04}6:method36:/trading.TradingService/SubmitOrder"
            )
        })
        .collect()
}

fn store_with(keys: &[String]) -> MemoryStore {
    let store = MemoryStore::new(1_000_000, Arc::new(ManualClock::new(NOW)));
    for key in keys {
        store.check(
            &[Check {
                refund: false,
                key: key.as_str().into(),
                limit: limit(),
                hits: 1,
                mode: Mode::Enforce,
                descriptor: 0,
                hold: None,
            }],
            NOW,
        );
    }
    store
}

pub fn decide_one(c: &mut Criterion) {
    let keys = keys("u");
    let store = store_with(&keys);
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(1));
    // The arithmetic alone, for reference: what the store adds is lookup and locking.
    let state = limiter::step(None, &limit(), 1, NOW).consumed().0;
    group.bench_function("step_only", |b| {
        b.iter(|| {
            black_box(limiter::step(
                black_box(Some(&state)),
                &limit(),
                1,
                black_box(NOW),
            ))
        })
    });
    // 1024 buckets visited in turn: every decision finds its bucket in the store, but not
    // necessarily in the CPU's caches; and 16 hot buckets, which stay cached.
    for (name, working_set) in [("decide_one", KEYS), ("decide_one_hot", 16)] {
        let mut i = 0;
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % working_set;
                let check = Check {
                    refund: false,
                    key: keys[i].as_str().into(),
                    limit: limit(),
                    hits: 1,
                    mode: Mode::Enforce,
                    descriptor: 0,
                    hold: None,
                };
                black_box(store.check(black_box(&[check]), NOW));
            })
        });
    }
    group.finish();
}

/// A descriptor with one limit against the same with two (two buckets decided together, as
/// a `rate_limits` list is), and one sliding-window decision, over 1024 callers.
pub fn limits(c: &mut Criterion) {
    let keys = keys("l");
    // A list's keys, as a plan writes them: the descriptor's key, then the limit's part.
    let listed =
        |part: &str| -> Vec<String> { keys.iter().map(|k| format!("{k}{part}")).collect() };
    let (per_second, daily) = (listed("5:p=1s"), listed("5:p=1d"));
    let store = store_with(&keys);
    let per_day = Limit {
        unit: Unit::Day,
        ..limit()
    };
    let sliding = Limit {
        algorithm: Algorithm::SlidingWindow,
        ..limit()
    };
    let mut group = c.benchmark_group("store/limits");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("one", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(store.check(black_box(&[check(&keys[i], limit())]), NOW));
        })
    });
    // A store of its own: a descriptor is listed or not, never both (the same text in one
    // store would be two buckets, found by one probe).
    let listed_store = store_with(&[]);
    group.bench_function("two", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let both = [
                listed_check(&per_second[i], keys[i].len(), limit()),
                listed_check(&daily[i], keys[i].len(), per_day),
            ];
            black_box(listed_store.check(black_box(&both), NOW));
        })
    });
    let windows: Vec<String> = keys.iter().map(|k| format!("{k}1:s")).collect();
    let window_store = MemoryStore::new(1_000_000, Arc::new(ManualClock::new(NOW)));
    group.bench_function("sliding", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            black_box(window_store.check(black_box(&[check(&windows[i], sliding)]), NOW));
        })
    });
    // The arithmetic alone, for reference.
    let state = limiter::step(None, &sliding, 1, NOW).consumed().0;
    group.bench_function("sliding_step_only", |b| {
        b.iter(|| {
            black_box(limiter::step(
                black_box(Some(&state)),
                &sliding,
                1,
                black_box(NOW),
            ))
        })
    });
    group.finish();
}

/// A charge (`charge: always`) against a normal decision of the same shape: one
/// descriptor, one token bucket, 1024 callers, 100 hits each; and a charge that leaves
/// its bucket in debt, which the first one never does.
pub fn charges(c: &mut Criterion) {
    let keys = keys("c");
    let store = store_with(&keys);
    let charging = Limit {
        charge: true,
        ..limit()
    };
    let mut group = c.benchmark_group("store/charges");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    for (name, limit) in [("take", limit()), ("charge", charging)] {
        group.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % KEYS;
                let mut check = check(&keys[i], limit);
                check.hits = 100;
                black_box(store.check(black_box(&[check]), NOW));
            })
        });
    }
    let small = Limit {
        requests_per_unit: 10,
        burst: 10,
        ..charging
    };
    group.bench_function("charge_into_debt", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let mut check = check(&keys[i], small);
            check.hits = 100;
            black_box(store.check(black_box(&[check]), NOW));
        })
    });
    group.finish();
}

/// A reservation's two calls, a hold of 100 hits then its settle of 100, against a
/// decision of 100 hits then a charge of 100 (today's check-then-charge, the same
/// shape): per pair, 1024 callers, each request its own hold id.
pub fn holds(c: &mut Criterion) {
    let keys = keys("h");
    let ids: Vec<String> = (0..KEYS).map(|i| format!("req-{i:08}")).collect();
    let store = store_with(&keys);
    let charging = Limit {
        charge: true,
        ..limit()
    };
    let mut group = c.benchmark_group("store/holds");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("take_then_charge", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let mut take = check(&keys[i], limit());
            take.hits = 100;
            black_box(store.check(black_box(&[take]), NOW));
            let mut charge = check(&keys[i], charging);
            charge.hits = 100;
            black_box(store.check(black_box(&[charge]), NOW));
        })
    });
    let hold = |id, phase| HoldOp {
        id,
        phase,
        ttl: 300 * 1_000_000_000,
        slots: None,
        expiries: None,
    };
    group.bench_function("hold_then_settle", |b| {
        b.iter(|| {
            i = (i + 1) % KEYS;
            let mut reserve = check(&keys[i], limit());
            reserve.hits = 100;
            reserve.hold = Some(hold(&ids[i], Phase::Hold));
            black_box(store.check(black_box(&[reserve]), NOW));
            let mut settle = check(&keys[i], charging);
            settle.hits = 100;
            settle.hold = Some(hold(&ids[i], Phase::Settle));
            black_box(store.check(black_box(&[settle]), NOW));
        })
    });
    group.finish();
}

/// An enforced check of one hit on `key`.
fn check(key: &str, limit: Limit) -> Check<'_> {
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

/// An enforced check of one hit on `key`, a limit of a list whose descriptor's key is
/// its first `descriptor_len` bytes.
fn listed_check(key: &str, descriptor_len: usize, limit: Limit) -> Check<'_> {
    Check {
        key: BucketKey::listed(key, descriptor_len),
        ..check(key, limit)
    }
}

/// Buckets in the store of the flood bench: full, so that every new key evicts one.
const FLOOD_STORE: u64 = 10_000;

/// One-off keys cycled by the flood bench; far more than the store holds, so a key is
/// evicted long before it comes round again.
const FLOOD_KEYS: usize = 200_000;

/// A flood of one-off keys into a full store: each decision creates a bucket and evicts
/// the least recently used one (creation and eviction cost, per key).
pub fn flood(c: &mut Criterion) {
    let keys: Vec<String> = (0..FLOOD_KEYS)
        .map(|i| format!("7:trading7:user_id9:f{i:08}"))
        .collect();
    let store = MemoryStore::new(FLOOD_STORE, Arc::new(ManualClock::new(NOW)));
    let mut i = 0;
    let mut next = move || {
        i = (i + 1) % FLOOD_KEYS;
        i
    };
    for _ in 0..FLOOD_STORE {
        let check = Check {
            refund: false,
            key: keys[next()].as_str().into(),
            limit: limit(),
            hits: 1,
            mode: Mode::Enforce,
            descriptor: 0,
            hold: None,
        };
        store.check(&[check], NOW);
    }
    let mut group = c.benchmark_group("store");
    group.throughput(Throughput::Elements(1));
    group.bench_function("flood", |b| {
        b.iter(|| {
            let check = Check {
                refund: false,
                key: keys[next()].as_str().into(),
                limit: limit(),
                hits: 1,
                mode: Mode::Enforce,
                descriptor: 0,
                hold: None,
            };
            black_box(store.check(black_box(&[check]), NOW));
        })
    });
    group.finish();
}

/// One request of N distinct descriptors whose buckets exist, as time per descriptor: it
/// should stay flat as N grows (linear cost per request).
pub fn check_many(c: &mut Criterion) {
    let mut group = c.benchmark_group("store/check_many");
    group.sample_size(10);
    for n in [4, 64, 1024, 4096] {
        let keys: Vec<String> = (0..n)
            .map(|i| format!("7:trading7:user_id9:m{i:08}"))
            .collect();
        let store = store_with(&keys);
        let checks: Vec<Check<'_>> = keys
            .iter()
            .map(|key| Check {
                refund: false,
                key: key.as_str().into(),
                limit: limit(),
                hits: 1,
                mode: Mode::Enforce,
                descriptor: 0,
                hold: None,
            })
            .collect();
        group.throughput(Throughput::Elements(n as u64));
        group.bench_with_input(BenchmarkId::from_parameter(n), &checks, |b, checks| {
            b.iter(|| black_box(store.check(black_box(checks), NOW)))
        });
    }
    group.finish();
}

/// The naive design the store is measured against: one lock around one map.
struct NaiveStore(Mutex<HashMap<String, State>>);

impl NaiveStore {
    fn check(&self, key: &str, limit: &Limit, now: u64) -> bool {
        let mut map = self.0.lock().unwrap();
        let state = map.get(key).copied();
        let step = limiter::step(state.as_ref(), limit, 1, now);
        map.insert(key.to_string(), step.consumed().0);
        step.over()
    }
}

/// Which of `threads`' per-thread keys thread `t` decides at its `i`-th iteration: (owner,
/// index).
type KeyChoice = fn(usize, usize) -> (usize, usize);

pub fn threads(c: &mut Criterion) {
    let mut group = c.benchmark_group("store/threads");
    group.throughput(Throughput::Elements(1));
    let max = std::thread::available_parallelism()
        .map_or(2, |n| n.get())
        .max(2);
    for threads in [1, 2, max]
        .into_iter()
        .collect::<std::collections::BTreeSet<_>>()
    {
        let per_thread: Vec<Vec<String>> = (0..threads).map(|t| keys(&format!("t{t}-"))).collect();
        let all: Vec<String> = per_thread.iter().flatten().cloned().collect();
        let store = store_with(&all);
        // `sharded`: each thread on keys of its own; `one_key`: every thread on one key,
        // whose shard lock and bucket then move between the cores on nearly every
        // decision, as a hot user's do on every worker.
        let cases: [(&str, KeyChoice); 2] = [
            ("sharded", |t, i| (t, i % KEYS)),
            ("one_key", |_, _| (0, 0)),
        ];
        for (name, key) in cases {
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |t, i| {
                        let check = Check {
                            refund: false,
                            key: {
                                let (owner, index) = key(t, i);
                                per_thread[owner][index].as_str().into()
                            },
                            limit: limit(),
                            hits: 1,
                            mode: Mode::Enforce,
                            descriptor: 0,
                            hold: None,
                        };
                        black_box(store.check(&[check], NOW));
                    })
                })
            });
        }
        let naive = NaiveStore(Mutex::new(HashMap::new()));
        group.bench_with_input(
            BenchmarkId::new("naive_mutex_map", threads),
            &threads,
            |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |t, i| {
                        black_box(naive.check(&per_thread[t][i % KEYS], &limit(), NOW));
                    })
                })
            },
        );
    }
    group.finish();
}

//! The over-limit cache against what Redis would say.

use std::time::Duration;

use super::super::reply::{After, Outcome};
use super::super::script_args::Scale;
use super::OverLimitCache;
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::limiter::Report;
use crate::rules::Limit;
use crate::rules::{Algorithm, Mode, Unit};
use crate::store::Check;

const T0: Nanos = 1_767_225_600 * NANOS_PER_SEC;
const MS: Nanos = 1_000_000;

fn window(rpu: u32) -> Limit {
    Limit {
        charge: false,
        requests_per_unit: rpu,
        unit: Unit::Second,
        multiplier: 1,
        burst: rpu,
        algorithm: Algorithm::SlidingWindow,
    }
}

fn check(limit: Limit, hits: u64) -> Check<'static> {
    Check {
        refund: false,
        key: "4:test1:k".into(),
        limit,
        hits,
        mode: Mode::Enforce,
        descriptor: 0,
        hold: None,
    }
}

/// What Redis says of a sliding window with `count` hits, over, one hit passing in
/// `one_ms`.
fn over(count: u64, one_ms: u64) -> Outcome {
    Outcome {
        over: true,
        remaining: 0,
        reset: one_ms * MS,
        after: After::SlidingWindow {
            count,
            one_passes_in_us: one_ms * 1000,
        },
    }
}

fn cache() -> OverLimitCache {
    OverLimitCache::new(100, Duration::from_secs(60))
}

#[test]
fn a_window_refusing_one_hit_is_refused_here_until_one_could_pass() {
    let (cache, limit) = (cache(), window(3));
    // Sent at T0 + 0.5 µs: the script read T0, so one hit passes at T0 + 300 ms.
    cache.learn(&check(limit, 1), &over(3, 300), T0 + 500);
    let refused = cache
        .refuse(&[check(limit, 1)], T0 + 100 * MS)
        .expect("cached");
    assert_eq!(
        refused[0],
        Report {
            over: true,
            remaining: 0,
            reset: 200 * MS,
            count: 3,
            cached: true
        }
    );
    assert!(
        cache
            .refuse(&[check(limit, 0)], T0 + 300 * MS - 1)
            .is_some()
    );
    assert!(cache.refuse(&[check(limit, 1)], T0 + 300 * MS).is_none());
    // More hits wait for counts the snapshot does not keep: Redis answers those.
    assert!(cache.refuse(&[check(limit, 2)], T0 + 100 * MS).is_none());
    // Another limit on the same key (a reload) is not this snapshot's.
    assert!(
        cache
            .refuse(&[check(window(4), 1)], T0 + 100 * MS)
            .is_none()
    );
}

#[test]
fn a_window_with_room_for_one_hit_is_not_kept() {
    let cache = cache();
    let limit = window(3);
    // Over for 3 hits with 2 counted: one hit could pass now.
    cache.learn(&check(limit, 3), &over(2, 0), T0);
    assert!(cache.refuse(&[check(limit, 1)], T0).is_none());
}

#[test]
fn a_window_of_zero_refuses_for_a_period_each_time() {
    let cache = cache();
    let limit = window(0);
    cache.learn(&check(limit, 1), &over(0, 1000), T0);
    let refused = cache
        .refuse(&[check(limit, 1)], T0 + 5_000 * MS)
        .expect("cached");
    assert_eq!((refused[0].over, refused[0].reset), (true, NANOS_PER_SEC));
}

fn bucket(rpu: u32, burst: u32) -> Limit {
    Limit {
        burst,
        algorithm: Algorithm::TokenBucket,
        ..window(rpu)
    }
}

/// What Redis says of a token bucket of `limit` left with `debt` in whole tokens.
fn tokens_owed(limit: &Limit, over: bool, tokens: u64) -> Outcome {
    let scale = Scale::of(limit);
    Outcome {
        over,
        remaining: 0,
        reset: 0,
        after: After::TokenBucket {
            debt: tokens * scale.token,
            leased: 0,
        },
    }
}

/// A bucket of 10/s, burst 10, emptied at T0: its snapshot refuses one hit until
/// T0 + 100 ms.
fn emptied() -> (OverLimitCache, Limit) {
    let (cache, limit) = (cache(), bucket(10, 10));
    cache.learn(&check(limit, 1), &tokens_owed(&limit, true, 10), T0);
    assert!(cache.refuse(&[check(limit, 1)], T0 + 99 * MS).is_some());
    (cache, limit)
}

#[test]
fn a_bucket_that_passed_hits_since_its_snapshot_is_forgotten() {
    let (cache, limit) = emptied();
    // At T0 + 100 ms the snapshot has one token and refuses 3 hits, rightly.
    let later = T0 + 100 * MS;
    assert!(cache.refuse(&[check(limit, 3)], later).is_some());
    // Then one hit passes, 10 owed again: the snapshot would report a token left.
    cache.learn(&check(limit, 1), &tokens_owed(&limit, false, 10), later);
    assert!(cache.refuse(&[check(limit, 3)], later).is_none());
}

/// The replies of concurrent requests are read in any order: an admission Redis
/// decided before the refusal, read after it, leaves the refusal cached.
#[test]
fn an_admission_decided_before_the_snapshot_keeps_it() {
    let (cache, limit) = emptied();
    // The tenth token's admission, sent with the refused request.
    cache.learn(&check(limit, 1), &tokens_owed(&limit, false, 10), T0);
    assert!(cache.refuse(&[check(limit, 1)], T0).is_some());
    // One sent 50 ms earlier, when 9 were owed (8.5 as of the refusal's instant).
    cache.learn(
        &check(limit, 1),
        &tokens_owed(&limit, false, 9),
        T0 - 50 * MS,
    );
    assert!(cache.refuse(&[check(limit, 1)], T0).is_some());
    // One at T0 + 200 ms, 9 owed (10 − 2 refilled + 1), came after it.
    let later = T0 + 200 * MS;
    assert!(cache.refuse(&[check(limit, 3)], later).is_some());
    cache.learn(&check(limit, 1), &tokens_owed(&limit, false, 9), later);
    assert!(cache.refuse(&[check(limit, 3)], later).is_none());
}

/// What Redis says of a sliding window that admitted a hit, `count` counted.
fn window_passed(count: u64) -> Outcome {
    Outcome {
        over: false,
        remaining: 0,
        reset: 0,
        after: After::SlidingWindow {
            count,
            one_passes_in_us: 0,
        },
    }
}

#[test]
fn a_window_is_forgotten_only_by_an_admission_counting_more() {
    let (cache, limit) = (cache(), window(3));
    cache.learn(&check(limit, 1), &over(3, 300), T0);
    // The third hit's admission, read after the refusal it preceded.
    cache.learn(&check(limit, 1), &window_passed(3), T0);
    assert!(cache.refuse(&[check(limit, 1)], T0 + 20 * MS).is_some());
    // Counting more than the snapshot, it came after (the limit reloaded and back).
    cache.learn(&check(limit, 1), &window_passed(4), T0 + 10 * MS);
    assert!(cache.refuse(&[check(limit, 1)], T0 + 20 * MS).is_none());
}

#[test]
fn an_admission_under_another_limit_forgets_the_snapshot() {
    let (cache, limit) = (cache(), window(3));
    cache.learn(&check(limit, 1), &over(3, 300), T0);
    cache.learn(&check(window(5), 1), &window_passed(1), T0 + 10 * MS);
    assert!(cache.refuse(&[check(limit, 1)], T0 + 20 * MS).is_none());
}

/// The count of snapshots that lets a cache holding none skip its lookups: up with each
/// snapshot kept, down with each one replaced, forgotten or expired, and a snapshot
/// learned after it fell to 0 refuses again.
#[test]
fn the_count_of_snapshots_follows_every_insertion_and_removal() {
    let kept = cache();
    let held = |c: &OverLimitCache| {
        c.run_pending_tasks();
        c.held.load(std::sync::atomic::Ordering::Acquire)
    };
    assert!(kept.holds_none());
    let limit = bucket(10, 10);
    let other = Check {
        key: "4:test1:o".into(),
        ..check(limit, 1)
    };
    kept.learn(&check(limit, 1), &tokens_owed(&limit, true, 10), T0);
    kept.learn(&other, &tokens_owed(&limit, true, 10), T0);
    assert_eq!(held(&kept), 2);
    // Learned again: one snapshot replaces the other.
    kept.learn(&other, &tokens_owed(&limit, true, 10), T0 + MS);
    assert_eq!(held(&kept), 2);
    // An admission after the snapshot forgets it.
    kept.learn(&other, &tokens_owed(&limit, false, 10), T0 + 100 * MS);
    assert_eq!(held(&kept), 1);
    assert!(kept.refuse(&[check(limit, 1)], T0 + 99 * MS).is_some());
    // A window whose snapshot lasts 20 ms of the cache's own (real) clock expires.
    let (windowed, short) = (cache(), window(3));
    windowed.learn(&check(short, 1), &over(3, 20), T0);
    assert_eq!(held(&windowed), 1);
    // Bounded: at most 10 s of 5 ms waits (moka expires on a timer wheel of about 1 s).
    let waits = (0..2_000)
        .take_while(|_| {
            let waiting = held(&windowed) > 0;
            if waiting {
                std::thread::sleep(Duration::from_millis(5));
            }
            waiting
        })
        .count();
    assert!(waits < 2_000, "the snapshot never expired");
    assert!(windowed.refuse(&[check(short, 1)], T0).is_none());
    windowed.learn(&check(short, 1), &over(3, 300), T0);
    assert!(windowed.refuse(&[check(short, 1)], T0).is_some());
}

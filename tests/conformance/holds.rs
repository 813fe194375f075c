//! The conformance table's cases for holds (`src/store/hold.rs`): reservations (`reserve`)
//! held on the request path and settled after the stream, released when left unsettled
//! past their TTL; concurrency slots (`concurrency`), taken, given back, peeked at, and
//! expiring. Run on every store configuration like cases.rs; time moves only by the manual
//! clock, which starts at 2026-01-01T00:00:00Z.
//!
//! Requests go through the real service: a descriptor ending in `hold=<id>` holds (or
//! takes a slot), one ending in `settle=<id>` settles (or gives the slot back), and the
//! rule's own descriptor alone checks (with 0 hits: the level, consuming nothing) or peeks
//! at the slots.

use std::time::Duration;

use crate::setup::Holds;
use meshlimit::bucket_key::BucketKey;
use meshlimit::clock::{ManualClock, NANOS_PER_SEC};
use meshlimit::request::{Descriptor, Request};
use meshlimit::rules::Algorithm;
use meshlimit::service::{Answer, Service};
use meshlimit::store::Held;

const S: u64 = NANOS_PER_SEC;

/// A reservation on 100 a minute (a token every 600 ms: the clock never moves in the
/// cases that read levels), one on 100 a day (a token every 864 s: five minutes refill
/// less than one), three slots, a limit of one a minute to deny requests with,
/// reservations on windows, and one on two limits a day.
const HOLDS: &str = "
domain: holds
descriptors:
  - key: user_id
    rate_limit: {unit: minute, requests_per_unit: 100}
    reserve: {ttl: 5m}
  - key: daily
    rate_limit: {unit: day, requests_per_unit: 100}
    reserve: {ttl: 5m}
  - key: conc
    concurrency: {max_in_flight: 3, ttl: 10m}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: fixed
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window}
    reserve: {ttl: 5m}
  - key: sliding
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window}
    reserve: {ttl: 5m}
  - key: listed
    rate_limits:
      - {unit: day, requests_per_unit: 100, name: daily}
      - {unit: day, requests_per_unit: 1000, name: more}
    reserve: {ttl: 5m}
";

fn service() -> (Service, ManualClock, Holds) {
    crate::setup::service(
        crate::setup_of(module_path!()),
        &[("holds.yaml", HOLDS)],
        Algorithm::TokenBucket,
    )
}

/// `entries` with `hits`.
fn hits(entries: &[(&str, &str)], hits: u64) -> Descriptor {
    Descriptor {
        hits_addend: Some(hits),
        ..Descriptor::new(entries)
    }
}

/// `(key, value)` holding `hits` as hold `id`.
fn hold(key: &str, value: &str, id: &str, n: u64) -> Descriptor {
    hits(&[(key, value), ("hold", id)], n)
}

/// `(key, value)` settling hold `id`, `used` having been used.
fn settle(key: &str, value: &str, id: &str, used: u64) -> Descriptor {
    hits(&[(key, value), ("settle", id)], used)
}

async fn call(service: &Service, descriptors: &[Descriptor]) -> Answer {
    service
        .should_rate_limit(Request::new("holds", descriptors, 0))
        .await
        .expect("a valid request")
}

/// `(over, remaining)` of a one-descriptor request.
async fn one(service: &Service, descriptor: Descriptor) -> (bool, u32) {
    let answer = call(service, &[descriptor]).await;
    (answer.statuses[0].over_limit, answer.statuses[0].remaining)
}

/// What is left of `(key, value)`'s limit: a check of 0 hits, which takes nothing.
async fn level(service: &Service, key: &str, value: &str) -> u32 {
    let (over, remaining) = one(service, hits(&[(key, value)], 0)).await;
    assert!(!over || remaining == 0);
    remaining
}

/// The bucket key of `(key, value)` in the domain.
fn bucket(key: &str, value: &str) -> String {
    format!("5:holds{}:{key}{}:{value}", key.len(), value.len())
}

#[tokio::test]
async fn reserves_admit_what_the_burst_holds_and_the_rest_take_nothing() {
    let (service, _clock, _holds) = service();
    // 100 with 30 each: three fit, the fourth and fifth are refused.
    for (id, left) in [("r1", 70), ("r2", 40), ("r3", 10)] {
        assert_eq!(one(&service, hold("user_id", "alice", id, 30)).await, (false, left));
    }
    for id in ["r4", "r5"] {
        assert_eq!(one(&service, hold("user_id", "alice", id, 30)).await, (true, 10));
    }
    assert_eq!(level(&service, "user_id", "alice").await, 10);
    // What is left still fits a smaller estimate.
    assert_eq!(one(&service, hold("user_id", "alice", "r6", 10)).await, (false, 0));
}

#[tokio::test]
async fn a_settle_charges_exactly_what_was_used() {
    let (service, _clock, _holds) = service();
    // Below the hold (20 given back), above it (20 more), equal (nothing moves).
    for (user, used, left) in [("alice", 10, 90), ("bob", 50, 50), ("carol", 30, 70)] {
        assert_eq!(one(&service, hold("user_id", user, "r1", 30)).await, (false, 70));
        one(&service, settle("user_id", user, "r1", used)).await;
        assert_eq!(level(&service, "user_id", user).await, left, "{user}");
    }
}

#[tokio::test]
async fn a_settle_without_a_hold_charges_in_full() {
    let (service, _clock, _holds) = service();
    one(&service, settle("user_id", "alice", "never", 25)).await;
    assert_eq!(level(&service, "user_id", "alice").await, 75);
    // Settled once: the second settle of the same hold finds none.
    assert_eq!(one(&service, hold("user_id", "bob", "r1", 30)).await, (false, 70));
    one(&service, settle("user_id", "bob", "r1", 10)).await;
    assert_eq!(level(&service, "user_id", "bob").await, 90);
    one(&service, settle("user_id", "bob", "r1", 10)).await;
    assert_eq!(level(&service, "user_id", "bob").await, 80);
}

#[tokio::test]
async fn an_unsettled_hold_is_released_after_its_ttl() {
    let (service, clock, _holds) = service();
    assert_eq!(one(&service, hold("daily", "alice", "r1", 30)).await, (false, 70));
    clock.advance(Duration::from_secs(4 * 60));
    assert_eq!(
        one(&service, hold("daily", "alice", "r2", 0)).await,
        (false, 70),
        "held until its TTL"
    );
    clock.advance(Duration::from_secs(61));
    // Released: a check of the rule without a hold sees the 30 back at once.
    assert_eq!(level(&service, "daily", "alice").await, 100);
    // Released: the 30 are back (less than a token refilled meanwhile, and never past the
    // burst), before the next hold is decided.
    assert_eq!(one(&service, hold("daily", "alice", "r3", 10)).await, (false, 90));
    // Settling it now charges in full: it is gone.
    one(&service, settle("daily", "alice", "r1", 5)).await;
    assert_eq!(level(&service, "daily", "alice").await, 85);
}

#[tokio::test]
async fn a_duplicate_hold_id_keeps_one_hold() {
    let (service, _clock, _holds) = service();
    assert_eq!(one(&service, hold("user_id", "alice", "r1", 30)).await, (false, 70));
    // Taken again, but held once.
    assert_eq!(one(&service, hold("user_id", "alice", "r1", 30)).await, (false, 40));
    one(&service, settle("user_id", "alice", "r1", 30)).await;
    assert_eq!(level(&service, "user_id", "alice").await, 40);
}

#[tokio::test]
async fn concurrency_slots_are_taken_given_back_peeked_at_and_expire() {
    let (service, clock, _holds) = service();
    let peek = || hits(&[("conc", "api")], 1);
    assert_eq!(one(&service, peek()).await, (false, 3));
    for (id, left) in [("s1", 2), ("s2", 1), ("s3", 0)] {
        assert_eq!(one(&service, hold("conc", "api", id, 1)).await, (false, left));
    }
    assert_eq!(one(&service, hold("conc", "api", "s4", 1)).await, (true, 0));
    assert_eq!(one(&service, peek()).await, (true, 0));
    // One given back: a slot is free, once.
    assert_eq!(one(&service, settle("conc", "api", "s2", 1)).await, (false, 1));
    assert_eq!(one(&service, peek()).await, (false, 1));
    assert_eq!(one(&service, hold("conc", "api", "s4", 1)).await, (false, 0));
    assert_eq!(one(&service, hold("conc", "api", "s5", 1)).await, (true, 0));
    // An id in flight already takes no second slot, even with one free.
    one(&service, settle("conc", "api", "s4", 1)).await;
    assert_eq!(one(&service, hold("conc", "api", "s1", 1)).await, (true, 1));
    // Another key's slots are its own.
    assert_eq!(one(&service, hold("conc", "web", "s1", 1)).await, (false, 2));
    // Unsettled, they expire after their TTL.
    clock.advance(Duration::from_secs(10 * 60 + 1));
    assert_eq!(one(&service, peek()).await, (false, 3));
    assert_eq!(one(&service, hold("conc", "api", "s1", 1)).await, (false, 2));
}

/// Envoy settles every stream, a refused one too: the settle of a refused second hold of
/// a slot's name must not free the slot of the request still in flight.
#[tokio::test]
async fn a_slot_held_twice_waits_for_both_settles() {
    let (service, _clock, _holds) = service();
    for id in ["s1", "s2", "s3"] {
        one(&service, hold("conc", "api", id, 1)).await;
    }
    // s1 again: refused (twice, so three settles in all now).
    assert_eq!(one(&service, hold("conc", "api", "s1", 1)).await, (true, 0));
    assert_eq!(one(&service, hold("conc", "api", "s1", 1)).await, (true, 0));
    for _ in 0..2 {
        one(&service, settle("conc", "api", "s1", 1)).await;
        assert_eq!(one(&service, hold("conc", "api", "s9", 1)).await, (true, 0), "s1 runs");
    }
    // The last settle frees it.
    assert_eq!(one(&service, settle("conc", "api", "s1", 1)).await, (false, 1));
    assert_eq!(one(&service, hold("conc", "api", "s9", 1)).await, (false, 0));
}

#[tokio::test]
async fn a_slot_reports_when_the_soonest_expires() {
    let (service, clock, _holds) = service();
    call(&service, &[hold("conc", "api", "s1", 1)]).await;
    clock.advance(Duration::from_secs(60));
    let answer = call(&service, &[hold("conc", "api", "s2", 1)]).await;
    assert_eq!(answer.statuses[0].reset, Some(9 * 60 * S));
}

#[tokio::test]
async fn a_denied_request_takes_no_hold_and_no_slot() {
    let (service, _clock, _holds) = service();
    assert!(!one(&service, hits(&[("plain", "x")], 1)).await.0);
    let denied = call(
        &service,
        &[
            hold("user_id", "dave", "d1", 30),
            hold("conc", "api", "s1", 1),
            hits(&[("plain", "x")], 1),
        ],
    )
    .await;
    assert!(denied.over_limit);
    assert!(!denied.statuses[0].over_limit && !denied.statuses[1].over_limit);
    assert_eq!(level(&service, "user_id", "dave").await, 100);
    assert_eq!(one(&service, hits(&[("conc", "api")], 1)).await, (false, 3));
    let now = service.clock().now();
    let store = service.store();
    for (key, value) in [("user_id", "dave"), ("conc", "api")] {
        let key = bucket(key, value);
        let held = store.held(&BucketKey::from(key.as_str()), now).await;
        assert_eq!(held.expect("answered"), Held::default(), "{key}");
    }
}

#[tokio::test]
async fn held_counts_live_holds_and_reset_drops_them_with_the_bucket() {
    let (service, clock, _holds) = service();
    let start = service.clock().now();
    call(&service, &[hold("user_id", "alice", "r1", 30)]).await;
    clock.advance(Duration::from_secs(1));
    call(&service, &[hold("user_id", "alice", "r2", 20)]).await;
    for id in ["s1", "s2"] {
        call(&service, &[hold("conc", "api", id, 1)]).await;
    }
    let store = service.store();
    let (alice, api) = (bucket("user_id", "alice"), bucket("conc", "api"));
    let (alice, api) = (BucketKey::from(alice.as_str()), BucketKey::from(api.as_str()));
    let now = service.clock().now();
    let held = |holds, hits, soonest_expiry| Held {
        holds,
        hits,
        soonest_expiry,
    };
    assert_eq!(
        store.held(&alice, now).await.expect("answered"),
        held(2, 50, start + 300 * S)
    );
    assert_eq!(
        store.held(&api, now).await.expect("answered"),
        held(2, 2, start + 601 * S)
    );
    assert!(store.reset(&alice).await.expect("reset"));
    assert_eq!(store.held(&alice, now).await.expect("answered"), Held::default());
    assert_eq!(level(&service, "user_id", "alice").await, 100);
    // Reset without settling: a settle now finds no hold and charges in full.
    one(&service, settle("user_id", "alice", "r1", 10)).await;
    assert_eq!(level(&service, "user_id", "alice").await, 90);
    assert!(store.reset(&api).await.expect("reset"));
    assert!(!store.reset(&api).await.expect("reset"), "nothing left");
    assert_eq!(one(&service, hits(&[("conc", "api")], 1)).await, (false, 3));
}

#[tokio::test]
async fn a_settle_lands_even_when_another_descriptor_denies_the_request() {
    let (service, _clock, _holds) = service();
    assert_eq!(one(&service, hold("user_id", "alice", "r1", 30)).await, (false, 70));
    assert!(!one(&service, hits(&[("plain", "x")], 1)).await.0);
    let denied = call(
        &service,
        &[settle("user_id", "alice", "r1", 10), hits(&[("plain", "x")], 1)],
    )
    .await;
    assert!(denied.over_limit);
    assert_eq!(level(&service, "user_id", "alice").await, 90);
    // The hold is gone: settled again, the hits are charged in full.
    one(&service, settle("user_id", "alice", "r1", 10)).await;
    assert_eq!(level(&service, "user_id", "alice").await, 80);
}

#[tokio::test]
async fn windows_hold_and_settle_as_buckets_do() {
    let (service, _clock, _holds) = service();
    // A fixed window counts every hit, the refused hold's 30 too (as the Go server does):
    // 120, then 20 given back and 10 charged.
    for (key, left) in [("fixed", 0), ("sliding", 20)] {
        assert_eq!(one(&service, hold(key, "alice", "r1", 30)).await, (false, 70), "{key}");
        assert_eq!(one(&service, hold(key, "alice", "r2", 60)).await, (false, 10), "{key}");
        assert!(one(&service, hold(key, "alice", "r3", 30)).await.0, "{key}");
        one(&service, settle(key, "alice", "r1", 10)).await;
        one(&service, settle(key, "alice", "r2", 70)).await;
        assert_eq!(level(&service, key, "alice").await, left, "{key}");
    }
}

/// The rule's `ratelimit_service_rate_limit_expired` in `service`'s metrics.
fn expired(service: &Service, key: &str) -> Option<String> {
    let text = service.metrics().expect("counting").render();
    let name = format!("ratelimit_service_rate_limit_expired{{domain=\"holds\",key1=\"{key}\"}}");
    crate::support::sample(&text, &name).map(str::to_string)
}

/// Redis releases a key's expired holds (and counts them) with the next request on the
/// key; the embedded store with the next request on any key, or in its upkeep: after a
/// request on each key, both have counted every one, once per request id.
#[tokio::test]
async fn holds_released_unsettled_are_counted_on_their_rules() {
    let (service, clock, _holds) = service();
    assert_eq!(one(&service, hold("daily", "alice", "r1", 30)).await, (false, 70));
    assert_eq!(one(&service, hold("daily", "alice", "r2", 20)).await, (false, 50));
    one(&service, settle("daily", "alice", "r2", 20)).await;
    assert_eq!(one(&service, hold("listed", "alice", "r1", 30)).await, (false, 70));
    for id in ["s1", "s2"] {
        one(&service, hold("conc", "api", id, 1)).await;
    }
    one(&service, settle("conc", "api", "s2", 1)).await;
    assert_eq!(one(&service, hold("user_id", "bob", "r1", 10)).await, (false, 90));
    one(&service, settle("user_id", "bob", "r1", 10)).await;
    for key in ["daily", "listed", "conc", "user_id"] {
        assert_eq!(expired(&service, key), None, "{key}: nothing expired yet");
    }
    clock.advance(Duration::from_secs(11 * 60));
    assert_eq!(level(&service, "daily", "alice").await, 80, "r1's 30 back");
    assert_eq!(level(&service, "listed", "alice").await, 100);
    assert_eq!(one(&service, hits(&[("conc", "api")], 1)).await, (false, 3));
    for (key, count) in [("daily", "1"), ("listed", "1"), ("conc", "1")] {
        assert_eq!(expired(&service, key).as_deref(), Some(count), "{key}");
    }
    assert_eq!(expired(&service, "user_id"), None, "settled: none expired");
    // Released once: later requests on the keys count nothing more.
    level(&service, "daily", "alice").await;
    assert_eq!(one(&service, hold("conc", "api", "s3", 1)).await, (false, 2));
    assert_eq!(expired(&service, "daily").as_deref(), Some("1"));
    assert_eq!(expired(&service, "conc").as_deref(), Some("1"));
}

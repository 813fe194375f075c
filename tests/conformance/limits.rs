//! The conformance table's cases for what the Go server does not have: several limits on
//! one descriptor (`rate_limits`), `unit_multiplier`, and sliding windows. Run on every
//! store configuration like cases.rs. Time moves only by the manual clock, which starts at
//! 2026-01-01T00:00:00Z (aligned to every period used here).
//!
//! Nearly every case uses windows, which no configuration leases; the token-bucket case
//! says where leases change an answer (L1 of cases.rs).

use std::time::Duration;

use crate::setup::{Holds, Setup};
use crate::support::ask;
use meshlimit::clock::{ManualClock, NANOS_PER_SEC};
use meshlimit::request::{Descriptor, Override, Request};
use meshlimit::rules::{Algorithm, Unit};
use meshlimit::service::{Answer, Service, DescriptorStatus};

const S: u64 = NANOS_PER_SEC;
const MS: u64 = 1_000_000;

fn service(files: &[(&str, &str)]) -> (Service, ManualClock, Holds) {
    crate::setup::service(setup(), files, Algorithm::TokenBucket)
}

fn setup() -> Setup {
    crate::setup_of(module_path!())
}

async fn request(service: &Service, domain: &str, descriptors: &[&[(&str, &str)]]) -> Answer {
    ask(service, domain, descriptors).await
}

async fn one(service: &Service, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
    let response = ask(service, domain, &[entries]).await;
    assert_eq!(response.over_limit, response.statuses[0].over_limit);
    response.statuses[0].clone()
}

/// `(name, over, remaining, reset)` of each limit of a status.
fn limits(status: &DescriptorStatus) -> Vec<(String, bool, u32, u64)> {
    status
        .each_limit()
        .iter()
        .map(|l| (l.limit.name.clone(), l.over, l.remaining, l.reset))
        .collect()
}

/// `(over, binding limit's name, remaining, reset)` of a status.
fn headline(status: &DescriptorStatus) -> (bool, String, u32, u64) {
    let name = status
        .current_limit
        .as_ref()
        .map(|l| l.name.clone())
        .unwrap_or_default();
    (
        status.over_limit,
        name,
        status.remaining,
        status.reset.unwrap_or(0),
    )
}

fn advance(clock: &ManualClock, by: u64) {
    clock.advance(Duration::from_nanos(by));
}

/// The binding limit: the fewest remaining when every limit has room, the refusing limit
/// with the longest wait when one refuses.
#[tokio::test]
async fn the_status_reports_the_binding_limit() {
    let config = "
domain: multi
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 2, algorithm: fixed_window, name: per_second}
      - {unit: minute, requests_per_unit: 3, algorithm: fixed_window, name: per_minute}
";
    let (service, clock, _store) = service(&[("multi.yaml", config)]);
    let user = [("user", "alice")];
    let first = one(&service, "multi", &user).await;
    assert_eq!(headline(&first), (false, "per_second".into(), 1, S));
    assert_eq!(
        limits(&first),
        [
            ("per_second".into(), false, 1, S),
            ("per_minute".into(), false, 2, 60 * S)
        ]
    );
    one(&service, "multi", &user).await;
    // Fixed windows count every hit: the third fills the minute and is over the second.
    let third = one(&service, "multi", &user).await;
    assert_eq!(headline(&third), (true, "per_second".into(), 0, S));
    advance(&clock, S);
    // A new second has room; the minute does not: it binds, with its own wait.
    let fourth = one(&service, "multi", &user).await;
    assert_eq!(headline(&fourth), (true, "per_minute".into(), 0, 59 * S));
    assert_eq!(
        limits(&fourth),
        [
            ("per_second".into(), false, 1, S),
            ("per_minute".into(), true, 0, 59 * S)
        ]
    );
}

/// Of two refusing limits, the one with the longer wait binds.
#[tokio::test]
async fn of_two_refusing_limits_the_longer_wait_binds() {
    let config = "
domain: multi
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 1, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 1, algorithm: sliding_window, name: hourly}
";
    let (service, _clock, _store) = service(&[("multi.yaml", config)]);
    one(&service, "multi", &[("user", "a")]).await;
    let refused = one(&service, "multi", &[("user", "a")]).await;
    assert_eq!(headline(&refused), (true, "hourly".into(), 0, 3_960 * S));
    // The unnamed limit is told apart by its period where a name is shown.
    let each = refused.each_limit();
    assert_eq!(each[0].limit.name, "");
    assert_eq!((each[0].over, each[0].reset), (true, 1_100 * MS));
}

/// All or nothing: a request refused by one limit (or another descriptor) takes nothing
/// from any limit.
#[tokio::test]
async fn a_refused_request_takes_nothing_from_any_limit() {
    let config = "
domain: multi
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 5, algorithm: sliding_window, name: burst}
      - {unit: hour, requests_per_unit: 3, algorithm: sliding_window, name: hourly}
  - key: other
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_window}
";
    let (service, _clock, _store) = service(&[("multi.yaml", config)]);
    let user = [("user", "a")];
    for _ in 0..3 {
        assert!(!one(&service, "multi", &user).await.over_limit);
    }
    let refused = one(&service, "multi", &user).await;
    assert_eq!(
        limits(&refused),
        [
            ("burst".into(), false, 2, 1_100 * MS),
            ("hourly".into(), true, 0, 3_960 * S)
        ]
    );
    // Still 2 in the burst limit: the refusal took nothing from it.
    let again = one(&service, "multi", &user).await;
    assert_eq!(limits(&again)[0].2, 2);

    // Across descriptors: `other` refuses, `user=b` keeps both its limits whole.
    let other = [("other", "x")];
    assert!(!one(&service, "multi", &other).await.over_limit);
    let both = request(&service, "multi", &[&[("user", "b")], &other]).await;
    assert!(both.over_limit);
    assert!(!both.statuses[0].over_limit && both.statuses[1].over_limit);
    let alone = one(&service, "multi", &[("user", "b")]).await;
    assert_eq!(
        limits(&alone),
        [
            ("burst".into(), false, 4, 1_100 * MS),
            ("hourly".into(), false, 2, 3_960 * S)
        ]
    );
}

/// A rolling window admits at most its limit in any interval of one period: no second
/// burst right after a window edge, as fixed windows allow.
#[tokio::test]
async fn a_sliding_window_has_no_double_burst_at_an_edge() {
    let config = "
domain: roll
descriptors:
  - key: fixed
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window}
  - key: sliding
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_window}
";
    let (service, clock, _store) = service(&[("roll.yaml", config)]);
    advance(&clock, 950 * MS);
    for key in ["fixed", "sliding"] {
        for _ in 0..10 {
            assert!(!one(&service, "roll", &[(key, "k")]).await.over_limit);
        }
    }
    advance(&clock, 100 * MS); // 1.05 s: a new fixed window
    assert!(!one(&service, "roll", &[("fixed", "k")]).await.over_limit);
    let refused = one(&service, "roll", &[("sliding", "k")]).await;
    // The ten count until their sub-window (0.9–1.0 s) leaves the window, at 2.0 s.
    assert_eq!(headline(&refused), (true, String::new(), 0, 950 * MS));
    advance(&clock, 950 * MS - 1);
    assert!(one(&service, "roll", &[("sliding", "k")]).await.over_limit);
    advance(&clock, 1);
    let passed = one(&service, "roll", &[("sliding", "k")]).await;
    assert_eq!(headline(&passed), (false, String::new(), 9, 1_100 * MS));
}

/// An adversarial pattern on the manual clock: one request every 30 ms for 4 seconds.
/// No interval of one second ever holds more than the limit.
#[tokio::test]
async fn a_sliding_window_bounds_every_interval_of_one_period() {
    let config = "
domain: roll
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 7, algorithm: sliding_window}
";
    let (service, clock, _store) = service(&[("roll.yaml", config)]);
    let mut admitted = Vec::new();
    for i in 0..134u64 {
        if !one(&service, "roll", &[("k", "v")]).await.over_limit {
            admitted.push(i * 30 * MS);
        }
        advance(&clock, 30 * MS);
    }
    for &t in &admitted {
        let within = admitted.iter().filter(|&&u| u <= t && u + S > t).count();
        assert!(within <= 7, "{within} admitted in the second ending at {t}");
    }
    // It still admits: at least 7 per 1.1 s over the 4 seconds.
    assert!(admitted.len() >= 3 * 7, "{} admitted", admitted.len());
}

/// `unit_multiplier` with each algorithm: the period is N units; fixed windows align to
/// multiples of it since the epoch.
#[tokio::test]
async fn a_multiplier_makes_the_period_n_units_for_every_algorithm() {
    let config = "
domain: mult
descriptors:
  - key: fixed
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 2, algorithm: fixed_window}
  - key: sliding
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 3, algorithm: sliding_window}
  - key: bucket
    rate_limit: {unit: second, unit_multiplier: 3, requests_per_unit: 2, burst: 1}
";
    let (service, clock, _store) = service(&[("mult.yaml", config)]);
    advance(&clock, 100 * S);
    let fixed = [("fixed", "k")];
    one(&service, "mult", &fixed).await;
    one(&service, "mult", &fixed).await;
    // The window is [0 s, 300 s) of the epoch's five-minute blocks.
    assert_eq!(
        headline(&one(&service, "mult", &fixed).await),
        (true, String::new(), 0, 200 * S)
    );
    let sliding = [("sliding", "k")];
    for _ in 0..3 {
        assert!(!one(&service, "mult", &sliding).await.over_limit);
    }
    // Sub-windows of 30 s: the hits of [90 s, 120 s) leave at 420 s.
    assert_eq!(
        headline(&one(&service, "mult", &sliding).await),
        (true, String::new(), 0, 320 * S)
    );
    // Two tokens per 3 s: one every 1.5 s, a bucket of one.
    let bucket = [("bucket", "k")];
    let first = one(&service, "mult", &bucket).await;
    assert_eq!(headline(&first), (false, String::new(), 0, 1_500 * MS));
    let second = one(&service, "mult", &bucket).await;
    // L1: a leased replica has no token left to lease from a bucket of one.
    assert_eq!(headline(&second), (true, String::new(), 0, 1_500 * MS));
    advance(&clock, 1_500 * MS);
    assert!(!one(&service, "mult", &bucket).await.over_limit);
}

/// Shadow and quota modes with lists: a descriptor is over when any of its limits is.
#[tokio::test]
async fn modes_count_a_descriptor_over_when_any_limit_is() {
    let config = "
domain: modes
descriptors:
  - key: shadowed
    shadow_mode: true
    rate_limits:
      - {unit: minute, requests_per_unit: 1, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 5, algorithm: sliding_window}
  - key: quota_a
    quota_mode: true
    rate_limits:
      - {unit: minute, requests_per_unit: 1, algorithm: sliding_window}
      - {unit: hour, requests_per_unit: 5, algorithm: sliding_window}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1, algorithm: sliding_window}
";
    let (service, _clock, _store) = service(&[("modes.yaml", config)]);
    one(&service, "modes", &[("shadowed", "x")]).await;
    let shadowed = one(&service, "modes", &[("shadowed", "x")]).await;
    assert!(!shadowed.over_limit, "shadow mode reports OK");
    assert!(limits(&shadowed)[0].1, "its per-minute limit refused");

    let a = [("quota_a", "x")];
    let b = [("quota_b", "x")];
    assert!(!request(&service, "modes", &[&a, &b]).await.over_limit);
    // Both quota descriptors over, `quota_a` by its first limit only: denied.
    let both = request(&service, "modes", &[&a, &b]).await;
    assert!(both.over_limit);
    assert_eq!(
        limits(&both.statuses[0])
            .iter()
            .map(|l| l.1)
            .collect::<Vec<_>>(),
        [true, false]
    );
}

/// hits_addend takes hits from every limit; a limit sent in the request replaces the
/// whole list with one limit.
#[tokio::test]
async fn hits_and_overrides_apply_to_lists() {
    let config = "
domain: hits
descriptors:
  - key: user
    rate_limits:
      - {unit: minute, requests_per_unit: 10, algorithm: sliding_window, name: minute}
      - {unit: hour, requests_per_unit: 20, algorithm: sliding_window, name: hour}
";
    let (service, _clock, _store) = service(&[("hits.yaml", config)]);
    let three = Descriptor {
        hits_addend: Some(3),
        ..Descriptor::new(&[("user", "a")])
    };
    let r = service
        .should_rate_limit(Request::new("hits", &[three], 0))
        .await
        .expect("valid");
    assert_eq!(
        limits(&r.statuses[0])
            .iter()
            .map(|l| l.2)
            .collect::<Vec<_>>(),
        [7, 17]
    );
    let overridden = Descriptor {
        limit: Some(Override {
            requests_per_unit: 1,
            unit: Some(Unit::Hour),
        }),
        ..Descriptor::new(&[("user", "a")])
    };
    let r = service
        .should_rate_limit(Request::new("hits", &[overridden], 0))
        .await
        .expect("valid");
    let status = &r.statuses[0];
    assert!(status.all_limits.is_empty(), "one limit: the override");
    let limit = status.current_limit.as_ref().expect("limited");
    assert_eq!((limit.requests_per_unit, limit.unit), (1, Unit::Hour));
}

/// `replaces` names a limit of a list to replace the descriptor; a list's `replaces`
/// acts for its descriptor.
#[tokio::test]
async fn replaces_works_with_lists() {
    let config = "
domain: rep
descriptors:
  - key: a
    rate_limits:
      - {unit: minute, requests_per_unit: 1, algorithm: sliding_window, name: a_minute}
      - {unit: hour, requests_per_unit: 9, algorithm: sliding_window}
  - key: b
    rate_limits:
      - {unit: minute, requests_per_unit: 5, algorithm: sliding_window, replaces: [{name: a_minute}]}
";
    let (service, _clock, _store) = service(&[("rep.yaml", config)]);
    for _ in 0..3 {
        let r = request(&service, "rep", &[&[("a", "x")], &[("b", "x")]]).await;
        assert!(!r.over_limit);
        assert!(r.statuses[0].current_limit.is_none(), "a is replaced by b");
    }
}

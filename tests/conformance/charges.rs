//! The conformance table's cases for charges and refunds: limits with `charge: always`,
//! whose hits are recorded whatever the answer (a token bucket goes into debt, a window
//! counts them), and `is_negative_hits`, which gives hits back. Run on every store
//! configuration like cases.rs; time moves only by the manual clock, which starts at
//! 2026-01-01T00:00:00Z (aligned to every period used here).
//!
//! A charge or a refund never spends or takes leased tokens: it goes to the store and
//! lands there, so leases change no answer of this table.

use std::time::Duration;

use crate::setup::Holds;
use meshlimit::clock::{ManualClock, NANOS_PER_SEC};
use meshlimit::error::RequestError;
use meshlimit::request::{Descriptor, Override, Request};
use meshlimit::rules::{Algorithm, DEBT_PERIODS, Unit};
use meshlimit::service::{Answer, Service, DescriptorStatus};

const S: u64 = NANOS_PER_SEC;
const MS: u64 = 1_000_000;

/// A token budget per user (10,000 a minute: one token every 6 ms), the same on windows,
/// a list charged through its descriptor, and a rule that does not charge.
const LLM: &str = "
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10000, charge: always}
  - key: fixed_user
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: fixed_window, charge: always}
  - key: sliding_user
    rate_limit: {unit: minute, requests_per_unit: 100, algorithm: sliding_window, charge: always}
  - key: team
    charge: always
    rate_limits:
      - {unit: minute, requests_per_unit: 1000, name: per_minute}
      - {unit: hour, requests_per_unit: 20000, name: per_hour}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
";

fn service() -> (Service, ManualClock, Holds) {
    crate::setup::service(
        crate::setup_of(module_path!()),
        &[("llm.yaml", LLM)],
        Algorithm::TokenBucket,
    )
}

fn hits(entries: &[(&str, &str)], hits: u64) -> Descriptor {
    Descriptor {
        hits_addend: Some(hits),
        ..Descriptor::new(entries)
    }
}

fn refund(entries: &[(&str, &str)], hits: u64) -> Descriptor {
    Descriptor {
        refund: true,
        ..self::hits(entries, hits)
    }
}

async fn call(service: &Service, descriptors: &[Descriptor]) -> Answer {
    service
        .should_rate_limit(Request::new("llm", descriptors, 0))
        .await
        .expect("a valid request")
}

/// `(over, remaining, reset)` of a one-descriptor request's status.
async fn one(service: &Service, descriptor: Descriptor) -> (bool, u32, u64) {
    let response = call(service, &[descriptor]).await;
    assert_eq!(response.over_limit, response.statuses[0].over_limit);
    brief(&response.statuses[0])
}

fn brief(status: &DescriptorStatus) -> (bool, u32, u64) {
    (status.over_limit, status.remaining, status.reset.unwrap_or(0))
}

/// The time `tokens` take to refill at 10,000 a minute: 6 ms each.
fn refill(tokens: u64) -> u64 {
    tokens * 6 * MS
}

const USER: &[(&str, &str)] = &[("user", "alice")];

/// The defect this table was written for: on a token bucket a denied request consumes
/// nothing, so a charge larger than what is left used to be refused and recorded as
/// nothing, and the limit never bound. A charge lands in full; the bucket owes what it
/// did not have, and every request (a check of 0 hits included) is refused until that is
/// repaid at the refill rate, with the exact time until it could pass.
#[tokio::test]
async fn a_charge_past_what_is_left_puts_the_bucket_in_debt_until_repaid() {
    let (service, clock, _holds) = service();
    assert_eq!(
        one(&service, hits(USER, 9_900)).await,
        (false, 100, refill(9_900))
    );
    // 100 left, 5,000 used: 4,900 owed. One hit passes once 4,901 have refilled.
    assert_eq!(
        one(&service, hits(USER, 5_000)).await,
        (true, 0, refill(4_901))
    );
    assert_eq!(
        one(&service, hits(USER, 0)).await,
        (true, 0, refill(4_901)),
        "a check while in debt"
    );
    assert_eq!(
        one(&service, hits(USER, 1)).await,
        (true, 0, refill(4_902)),
        "a hit is a charge too: refused, and recorded"
    );
    // That hit was recorded: one more token to repay.
    clock.advance(Duration::from_nanos(refill(4_901)));
    assert_eq!(
        one(&service, hits(USER, 0)).await,
        (true, 0, refill(1)),
        "repaid, but the bucket is empty"
    );
    clock.advance(Duration::from_nanos(refill(1)));
    assert_eq!(
        one(&service, hits(USER, 0)).await,
        (false, 1, refill(9_999))
    );
    // Another user is untouched.
    assert_eq!(
        one(&service, hits(&[("user", "bob")], 0)).await,
        (false, 10_000, 0)
    );
}

#[tokio::test]
async fn a_runaway_charge_owes_at_most_ten_periods() {
    let (service, clock, _holds) = service();
    let cap = u64::from(DEBT_PERIODS) * 10_000;
    assert_eq!(
        one(&service, hits(USER, 1_000_000_000_000)).await,
        (true, 0, refill(cap + 1))
    );
    assert_eq!(DEBT_PERIODS, 10, "the docs say ten periods");
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        one(&service, hits(USER, 0)).await,
        (true, 0, refill(cap - 10_000 + 1))
    );
}

#[tokio::test]
async fn a_refund_gives_tokens_back_but_never_past_the_burst() {
    let (service, _clock, _holds) = service();
    assert_eq!(
        one(&service, hits(USER, 12_000)).await,
        (true, 0, refill(2_001))
    );
    // Out of debt: 1,000 of the 10,000 back.
    assert_eq!(
        one(&service, refund(USER, 3_000)).await,
        (false, 1_000, refill(9_000))
    );
    assert_eq!(
        one(&service, refund(USER, 1_000_000)).await,
        (false, 10_000, 0)
    );
    assert_eq!(
        one(&service, hits(USER, 10_000)).await,
        (false, 0, refill(10_000)),
        "full after the refund: a whole burst fits"
    );
}

#[tokio::test]
async fn a_refund_still_in_debt_reports_when_a_hit_passes() {
    let (service, _clock, _holds) = service();
    one(&service, hits(USER, 15_000)).await;
    assert_eq!(
        one(&service, refund(USER, 2_000)).await,
        (true, 0, refill(3_001))
    );
}

#[tokio::test]
async fn refunds_are_refused_where_the_rule_does_not_charge() {
    let (service, _clock, _holds) = service();
    for (i, descriptors) in [
        vec![refund(&[("plain", "x")], 1)],
        vec![hits(USER, 1), refund(&[("plain", "x")], 1)],
        vec![Descriptor {
            limit: Some(Override {
                requests_per_unit: 5,
                unit: Some(Unit::Second),
            }),
            ..refund(USER, 1)
        }],
    ]
    .into_iter()
    .enumerate()
    {
        let bad = descriptors.len() - 1;
        match service.should_rate_limit(Request::new("llm", &descriptors, 0)).await {
            Err(RequestError::RefundNotAllowed(at)) => assert_eq!(at, bad, "case {i}"),
            other => panic!("case {i}: {other:?}"),
        }
    }
    // Nothing of those requests was recorded.
    assert_eq!(one(&service, hits(USER, 0)).await, (false, 10_000, 0));
    // Where no limit applies there is nothing to give back, and nothing to refuse.
    for entries in [&[("free", "x")][..], &[("unknown", "x")]] {
        assert!(!call(&service, &[refund(entries, 5)]).await.over_limit);
    }
}

#[tokio::test]
async fn a_charge_lands_even_when_another_descriptor_denies_the_request() {
    let (service, _clock, _holds) = service();
    let plain = &[("plain", "x")][..];
    one(&service, hits(plain, 100)).await;
    let response = call(&service, &[hits(plain, 1), hits(USER, 300)]).await;
    assert!(response.over_limit);
    assert!(response.statuses[0].over_limit);
    assert_eq!(
        brief(&response.statuses[1]),
        (false, 9_700, refill(300))
    );
    assert_eq!(
        one(&service, hits(USER, 0)).await,
        (false, 9_700, refill(300)),
        "the charge stayed"
    );
}

#[tokio::test]
async fn a_check_of_nothing_on_a_charging_rule_consumes_nothing() {
    let (service, _clock, _holds) = service();
    for _ in 0..3 {
        assert_eq!(one(&service, hits(USER, 0)).await, (false, 10_000, 0));
    }
}

#[tokio::test]
async fn a_fixed_window_counts_charges_and_refunds_never_below_zero() {
    let (service, _clock, _holds) = service();
    let user = &[("fixed_user", "alice")][..];
    assert_eq!(one(&service, hits(user, 150)).await, (true, 0, 60 * S));
    assert_eq!(one(&service, hits(user, 0)).await, (true, 0, 60 * S));
    assert_eq!(one(&service, refund(user, 60)).await, (false, 10, 60 * S));
    assert_eq!(one(&service, refund(user, 1_000)).await, (false, 100, 60 * S));
    assert_eq!(one(&service, hits(user, 100)).await, (false, 0, 60 * S));
}

#[tokio::test]
async fn a_sliding_window_counts_charges_past_its_limit() {
    let (service, clock, _holds) = service();
    let user = &[("sliding_user", "alice")][..];
    // Counted in the first sub-window (6 s wide): it counts until 11 have started.
    assert_eq!(one(&service, hits(user, 150)).await, (true, 0, 66 * S));
    assert_eq!(one(&service, hits(user, 0)).await, (true, 0, 66 * S));
    clock.advance(Duration::from_secs(1));
    assert_eq!(one(&service, hits(user, 1)).await, (true, 0, 65 * S));
    // 151 counted; 60 back leaves 91.
    assert_eq!(
        one(&service, refund(user, 60)).await,
        (false, 9, 65 * S)
    );
    assert_eq!(
        one(&service, refund(user, 1_000)).await,
        (false, 100, 0)
    );
}

#[tokio::test]
async fn a_descriptor_charge_applies_to_each_of_its_limits() {
    let (service, _clock, _holds) = service();
    let team = &[("team", "t")][..];
    let response = call(&service, &[hits(team, 1_500)]).await;
    assert!(response.over_limit);
    let limits: Vec<(String, bool, u32)> = response.statuses[0]
        .each_limit()
        .iter()
        .map(|l| (l.limit.name.clone(), l.over, l.remaining))
        .collect();
    assert_eq!(
        limits,
        [
            ("per_minute".to_string(), true, 0),
            ("per_hour".to_string(), false, 18_500)
        ]
    );
    // 500 owed at 1,000 a minute: one hit passes after 501 × 60 ms.
    assert_eq!(
        one(&service, hits(team, 0)).await,
        (true, 0, 501 * 60 * MS)
    );
    let (over, _, _) = one(&service, refund(team, 600)).await;
    assert!(!over, "a refund goes to every limit of the list");
    let response = call(&service, &[hits(team, 0)]).await;
    let remaining: Vec<u32> = response.statuses[0]
        .each_limit()
        .iter()
        .map(|l| l.remaining)
        .collect();
    assert_eq!(remaining, [100, 19_100]);
}

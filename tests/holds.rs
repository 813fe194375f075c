//! Holds on the embedded store beyond the conformance table: the ledger's bounds, its
//! upkeep, the operator's reset, and the plan's reading of `hold` and `settle` entries.

mod support;

use meshlimit::request::{Descriptor, Request};
use meshlimit::rules::Algorithm;
use meshlimit::service::{Answer, Service};

const LLM: &str = "
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
    reserve: {ttl: 10s}
  - key: in_flight
    concurrency: {max_in_flight: 2, ttl: 5s}
";

fn hits(entries: &[(&str, &str)], hits: u64) -> Descriptor {
    Descriptor {
        hits_addend: Some(hits),
        ..Descriptor::new(entries)
    }
}

async fn call(service: &Service, descriptors: &[Descriptor]) -> Answer {
    service
        .should_rate_limit(Request::new("llm", descriptors, 0))
        .await
        .expect("a valid request")
}

/// Whether a one-descriptor request passes, and its remaining.
async fn one(service: &Service, d: Descriptor) -> (bool, u32) {
    let answer = call(service, &[d]).await;
    (!answer.over_limit, answer.statuses[0].remaining)
}

#[tokio::test]
async fn reservations_admit_what_fits_beside_the_holds_and_settle_to_what_was_used() {
    let (service, _clock) = support::service(&[("llm.yaml", LLM)], Algorithm::TokenBucket);
    let mut admitted = 0;
    for i in 0..10 {
        let id = format!("r{i}");
        if one(&service, hits(&[("user", "a"), ("hold", &id)], 300))
            .await
            .0
        {
            admitted += 1;
        }
    }
    assert_eq!(admitted, 3, "1000 tokens hold three estimates of 300");
    // Settle the three: 100, 300 and 500 used.
    for (i, used) in [(0, 100), (1, 300), (2, 500)] {
        let id = format!("r{i}");
        let (ok, _) = one(&service, hits(&[("user", "a"), ("settle", &id)], used)).await;
        assert!(ok);
    }
    let (ok, remaining) = one(&service, hits(&[("user", "a")], 0)).await;
    assert!(ok);
    assert_eq!(remaining, 100, "charged exactly 900");
}

#[tokio::test]
async fn an_unsettled_hold_is_released_after_its_ttl_by_the_upkeep() {
    let (service, clock) = support::service(&[("llm.yaml", LLM)], Algorithm::TokenBucket);
    assert!(
        one(&service, hits(&[("user", "a"), ("hold", "r1")], 1000))
            .await
            .0
    );
    assert!(
        !one(&service, hits(&[("user", "a"), ("hold", "r2")], 1))
            .await
            .0
    );
    clock.advance(std::time::Duration::from_secs(11));
    service.store().maintain();
    let meshlimit::store::Store::Memory(store) = service.store() else {
        unreachable!("the embedded store")
    };
    assert_eq!((store.stats().holds, store.stats().holds_expired), (0, 1));
    // 11 s of refill at 1000/h is 3 tokens; the hold's 1000 came back, capped at the burst.
    let (ok, remaining) = one(&service, hits(&[("user", "a")], 0)).await;
    assert!(ok);
    assert_eq!(remaining, 1000);
    // A late settle charges in full what was used.
    assert!(
        one(&service, hits(&[("user", "a"), ("settle", "r1")], 400))
            .await
            .0
    );
    assert_eq!(one(&service, hits(&[("user", "a")], 0)).await.1, 600);
}

#[tokio::test]
async fn concurrency_slots_are_taken_given_back_and_expire() {
    let (service, clock) = support::service(&[("llm.yaml", LLM)], Algorithm::TokenBucket);
    let slot = |phase: &'static str, id: &'static str| hits(&[("in_flight", "u"), (phase, id)], 1);
    assert!(one(&service, slot("hold", "a")).await.0);
    assert!(
        !one(&service, slot("hold", "a")).await.0,
        "one slot per request id"
    );
    assert!(one(&service, slot("hold", "b")).await.0);
    assert!(
        !one(&service, slot("hold", "c")).await.0,
        "two in flight at most"
    );
    assert!(
        !one(&service, Descriptor::new(&[("in_flight", "u")]))
            .await
            .0,
        "peek: full"
    );
    // The refused second hold of "a" is settled too (Envoy settles every stream): the
    // slot waits for both settles.
    assert!(one(&service, slot("settle", "a")).await.0);
    assert!(!one(&service, slot("hold", "c")).await.0, "a still runs");
    assert!(one(&service, slot("settle", "a")).await.0);
    assert!(one(&service, slot("hold", "c")).await.0);
    clock.advance(std::time::Duration::from_secs(6));
    assert!(one(&service, slot("hold", "d")).await.0, "b and c expired");
    assert!(one(&service, slot("hold", "e")).await.0);
}

#[tokio::test]
async fn a_settle_from_a_caller_not_allowed_to_give_back_is_refused_and_changes_nothing() {
    let (service, _clock) = support::service(&[("llm.yaml", LLM)], Algorithm::TokenBucket);
    assert!(
        one(&service, hits(&[("user", "a"), ("hold", "r1")], 600))
            .await
            .0
    );
    let settle = [hits(&[("user", "a"), ("settle", "r1")], 100)];
    let refused = service
        .should_rate_limit(Request::new("llm", &settle, 0).giving_back(false))
        .await;
    assert!(
        matches!(
            refused,
            Err(meshlimit::error::RequestError::GiveBackNotAllowed)
        ),
        "{refused:?}"
    );
    // The hold still stands: 400 left beside it.
    assert_eq!(one(&service, hits(&[("user", "a")], 0)).await.1, 400);
    assert!(
        !one(&service, hits(&[("user", "a"), ("hold", "r2")], 401))
            .await
            .0
    );
    // A charge takes, and needs no permission.
    let charge = [hits(&[("user", "a")], 100)];
    let charged = service
        .should_rate_limit(Request::new("llm", &charge, 0).giving_back(false))
        .await
        .expect("a request that gives nothing back");
    assert!(!charged.over_limit);
}

#[tokio::test]
async fn holds_settles_and_released_slots_are_counted_per_rule_without_request_ids() {
    let (service, _clock) = support::service(&[("llm.yaml", LLM)], Algorithm::TokenBucket);
    let service = support::counting(service);
    assert!(
        one(&service, hits(&[("user", "a"), ("hold", "r1")], 300))
            .await
            .0
    );
    assert!(
        one(&service, hits(&[("user", "a"), ("settle", "r1")], 200))
            .await
            .0
    );
    assert!(
        one(&service, hits(&[("in_flight", "u"), ("hold", "s1")], 1))
            .await
            .0
    );
    assert!(
        one(&service, hits(&[("in_flight", "u"), ("settle", "s1")], 1))
            .await
            .0
    );
    let text = service.metrics().expect("counting").render();
    for (family, value) in [
        (
            "ratelimit_service_rate_limit_held{domain=\"llm\",key1=\"user\"}",
            "300",
        ),
        (
            "ratelimit_service_rate_limit_settled{domain=\"llm\",key1=\"user\"}",
            "1",
        ),
        (
            "ratelimit_service_rate_limit_held{domain=\"llm\",key1=\"in_flight\"}",
            "1",
        ),
        (
            "ratelimit_service_rate_limit_released{domain=\"llm\",key1=\"in_flight\"}",
            "1",
        ),
    ] {
        assert_eq!(
            support::sample(&text, family),
            Some(value),
            "{family} in\n{text}"
        );
    }
    assert!(!text.contains("r1") && !text.contains("s1"), "{text}");
}

#[tokio::test]
async fn explain_shows_the_hold_entry_the_holds_in_force_and_the_slots_in_use() {
    let (service, _clock) = support::service(&[("llm.yaml", LLM)], Algorithm::TokenBucket);
    assert!(
        one(&service, hits(&[("user", "a"), ("hold", "r1")], 300))
            .await
            .0
    );
    assert!(
        one(&service, hits(&[("in_flight", "u"), ("hold", "s1")], 1))
            .await
            .0
    );
    let descriptors = [
        hits(&[("user", "a"), ("settle", "r2")], 10),
        Descriptor::new(&[("in_flight", "u")]),
    ];
    let text = meshlimit::explain::explain(&service, Request::new("llm", &descriptors, 0))
        .await
        .expect("an explanation");
    for line in [
        "2. settle=r2: names a request, not a level: settles the hold of that name",
        "request-path hits held until settled, or released after 10.000s",
        "holds: 1 holds in force, 300 hits held; the soonest expires in 10.000s",
        "at most 2 requests in flight (concurrency), a slot released after 5.000s",
        "holds: 1 of 2 slots in use; the soonest expires in 5.000s",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    // Explaining took nothing: the slot and the hold are as they were.
    assert!(
        one(&service, hits(&[("in_flight", "u"), ("hold", "s2")], 1))
            .await
            .0
    );
    assert!(
        !one(&service, hits(&[("in_flight", "u"), ("hold", "s3")], 1))
            .await
            .0
    );
}

#[tokio::test]
async fn two_slots_taken_by_one_request_count_against_the_limit_together() {
    let (service, _clock) = support::service(&[("llm.yaml", LLM)], Algorithm::TokenBucket);
    assert!(
        one(&service, hits(&[("in_flight", "u"), ("hold", "a")], 1))
            .await
            .0
    );
    let both = [
        hits(&[("in_flight", "u"), ("hold", "b")], 1),
        hits(&[("in_flight", "u"), ("hold", "c")], 1),
    ];
    let answer = call(&service, &both).await;
    assert!(answer.over_limit, "three slots of two");
    // Refused whole: neither was taken.
    assert!(
        one(&service, hits(&[("in_flight", "u"), ("hold", "d")], 1))
            .await
            .0
    );
}

#[tokio::test]
async fn a_refund_on_a_reserve_rule_that_charges_is_taken_but_not_with_a_hold_entry() {
    const CHARGING: &str = "
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000, charge: always}
    reserve: {ttl: 10s}
";
    let (service, _clock) = support::service(&[("llm.yaml", CHARGING)], Algorithm::TokenBucket);
    assert_eq!(one(&service, hits(&[("user", "a")], 300)).await.1, 700);
    let refund = Descriptor {
        refund: true,
        ..hits(&[("user", "a")], 100)
    };
    assert_eq!(one(&service, refund).await.1, 800);
    let on_a_hold = [Descriptor {
        refund: true,
        ..hits(&[("user", "a"), ("settle", "r1")], 100)
    }];
    let refused = service
        .should_rate_limit(Request::new("llm", &on_a_hold, 0))
        .await;
    assert!(
        matches!(
            refused,
            Err(meshlimit::error::RequestError::RefundNotAllowed(0))
        ),
        "{refused:?}"
    );
}

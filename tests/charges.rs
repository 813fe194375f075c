//! Charges and refunds through the real binary's contracts: gRPC `ShouldRateLimit` with
//! `hits_addend` and `is_negative_hits`, `/json`, `/explain` (a bucket in debt shows as
//! such), `/rlconfig`, `/metrics` and statsd. The store's arithmetic is the conformance
//! table's (tests/conformance/charges.rs); this is what an operator and Envoy see of it.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::process::Meshlimit;
use support::statsd::StatsdServer;
use support::{descriptor, eventually, http_get, http_post};

const LLM: &str = "
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10000, charge: always}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 100}
";

/// A request of one `user` descriptor: `hits` (`None`: the request's default), given
/// back when `refund`.
fn user(name: &str, hits: Option<u64>, refund: bool) -> RateLimitRequest {
    let mut d = descriptor(&[("user", name)]);
    d.hits_addend = hits.map(|value| envoy_types::pb::google::protobuf::UInt64Value { value });
    d.is_negative_hits = refund;
    RateLimitRequest {
        domain: "llm".into(),
        descriptors: vec![d],
        hits_addend: 0,
    }
}

async fn start(args: &[&str]) -> (Meshlimit, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("llm.yaml"), LLM).unwrap();
    (Meshlimit::start(dir.path(), args).await, dir)
}

/// Envoy's two calls for one LLM request: the check on the request path (0 hits), then
/// the charge of the tokens it used once the response ended, whose answer reports the
/// bucket's real state.
#[tokio::test]
async fn a_charge_past_the_budget_refuses_the_next_check_and_shows_as_debt() {
    let (ml, _dir) = start(&[]).await;
    let check = ml.ask(user("alice", Some(0), false)).await;
    assert_eq!(check.overall_code, Code::Ok as i32);
    let charge = ml.ask(user("alice", Some(12_000), false)).await;
    assert_eq!(charge.overall_code, Code::OverLimit as i32);
    let status = &charge.statuses[0];
    assert_eq!(status.limit_remaining, 0);
    // 2,000 owed at 10,000 a minute: one token passes after 2,001 × 6 ms.
    let reset = status.duration_until_reset.expect("a reset");
    assert_eq!((reset.seconds, reset.nanos), (12, 6_000_000));
    let check = ml.ask(user("alice", Some(0), false)).await;
    assert_eq!(check.overall_code, Code::OverLimit as i32);
    assert_eq!(
        ml.ask(user("bob", Some(0), false)).await.overall_code,
        Code::Ok as i32
    );

    let (code, text) = http_get(ml.http, "/explain?domain=llm&descriptor=user%3Dalice").await;
    assert_eq!(code, 200);
    assert!(text.contains("charges always"), "{text}");
    // 2,000 owed at the charge, less what refilled since (a token every 6 ms).
    let owed: u64 = text
        .split("IN DEBT: ")
        .nth(1)
        .and_then(|rest| rest.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("a bucket in debt: {text}"));
    assert!((1_000..=2_000).contains(&owed), "{text}");
    let (_, text) = http_get(ml.http, "/rlconfig").await;
    assert!(text.contains("charge: always"), "{text}");

    // A refund through /json takes the bucket out of debt.
    let (code, body) = http_post(
        ml.http,
        "/json",
        r#"{"domain":"llm","descriptors":[{"entries":[{"key":"user","value":"alice"}],"hitsAddend":"2500","isNegativeHits":true}]}"#,
    )
    .await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(r#""overallCode":"OK""#), "{body}");
    assert_eq!(
        ml.ask(user("alice", Some(0), false)).await.overall_code,
        Code::Ok as i32
    );

    let (_, metrics) = http_get(ml.http, "/metrics").await;
    for line in [
        r#"ratelimit_service_rate_limit_charged{domain="llm",key1="user"} 12000"#,
        r#"ratelimit_service_rate_limit_debt{domain="llm",key1="user"} 2000"#,
        r#"ratelimit_service_rate_limit_refunded{domain="llm",key1="user"} 2500"#,
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in\n{metrics}");
    }
}

/// Refunds hand budget back: only callers `--give-back-from` allows may. Loopback callers
/// may by default; with `none`, nobody: PERMISSION_DENIED over gRPC, 403 over `/json`,
/// and nothing changes.
#[tokio::test]
async fn a_refund_from_a_caller_not_allowed_is_permission_denied_and_changes_nothing() {
    let (ml, _dir) = start(&["--give-back-from", "none"]).await;
    let charge = ml.ask(user("alice", Some(9_000), false)).await;
    assert!(charge.statuses[0].limit_remaining <= 1_000);
    let mut client = ml.client().await;
    let error = client
        .should_rate_limit(user("alice", Some(9_000), true))
        .await
        .unwrap_err();
    assert_eq!(error.code(), tonic::Code::PermissionDenied, "{error:?}");
    assert!(
        error.message().contains("--give-back-from"),
        "{}",
        error.message()
    );
    let (code, body) = http_post(
        ml.http,
        "/json",
        r#"{"domain":"llm","descriptors":[{"entries":[{"key":"user","value":"alice"}],"hits_addend":9000,"is_negative_hits":true}]}"#,
    )
    .await;
    assert_eq!(code, 403, "{body}");
    let check = ml.ask(user("alice", Some(0), false)).await;
    // Refill alone takes 54 s from 1,000 to 10,000; the refund would have filled it.
    let remaining = check.statuses[0].limit_remaining;
    assert!(
        remaining < 5_000,
        "nothing given back: {remaining} remaining"
    );

    let (ml, _dir) = start(&[]).await;
    ml.ask(user("alice", Some(600), false)).await;
    let refund = ml.ask(user("alice", Some(600), true)).await;
    assert_eq!(
        refund.statuses[0].limit_remaining, 10_000,
        "loopback may by default"
    );
}

#[tokio::test]
async fn a_refund_where_the_rule_does_not_charge_is_invalid_argument() {
    let (ml, _dir) = start(&[]).await;
    let mut plain = descriptor(&[("plain", "x")]);
    plain.is_negative_hits = true;
    let request = RateLimitRequest {
        domain: "llm".into(),
        descriptors: vec![descriptor(&[("user", "alice")]), plain],
        hits_addend: 3,
    };
    let mut client = ml.client().await;
    let error = client.should_rate_limit(request).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::InvalidArgument);
    assert!(
        error.message().contains("descriptor 1") && error.message().contains("charge: always"),
        "{}",
        error.message()
    );
    // Nothing of the refused request was recorded.
    let check = ml.ask(user("alice", Some(0), false)).await;
    assert_eq!(check.statuses[0].limit_remaining, 10_000);
    let (code, body) = http_post(
        ml.http,
        "/json",
        r#"{"domain":"llm","descriptors":[{"entries":[{"key":"plain","value":"x"}],"is_negative_hits":true}]}"#,
    )
    .await;
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("is_negative_hits"), "{body}");
}

#[tokio::test]
async fn charges_refunds_and_debt_reach_statsd_under_go_style_names() {
    let server = StatsdServer::start(false).await;
    let addr = server.addr.to_string();
    let (ml, _dir) = start(&["--statsd-addr", &addr, "--statsd-flush-ms", "50"]).await;
    ml.ask(user("alice", Some(10_500), false)).await;
    ml.ask(user("alice", Some(100), true)).await;
    let rule = "ratelimit.service.rate_limit.llm.user";
    eventually(20, "the charge counters in statsd", || {
        let counters = server.counters();
        let of = |stat: &str| counters.get(&format!("{rule}.{stat}")).copied();
        of("charged") == Some(10_500.0)
            && of("debt") == Some(500.0)
            && of("refunded") == Some(100.0)
    })
    .await;
}

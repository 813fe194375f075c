//! The AI-gateway recipe, `examples/envoy-tokens/`, with a real Envoy 1.40 (issue 39):
//! before each request Envoy checks the user's token budget with 0 hits, and once the
//! response is done it charges the tokens the backend reports (`x-tokens-used`). The
//! example's own `envoy.yaml` and `config/tokens.yaml` are run, only their ports changed.
//!
//! - A user is admitted while under budget; one large answer drives the budget into debt;
//!   the next requests get 429 until the refill repays it; another user is unaffected.
//! - A debt is repaid at the refill rate: the 429s' `x-ratelimit-reset` tells when.
//! - Two meshlimit replicas on one Redis, each behind its own Envoy, share one budget
//!   exactly.
//!
//! A charge travels after its response (Envoy sends it when the stream is destroyed), so
//! the tests wait for it to land by asking meshlimit with 0 hits, which spends nothing.
//! Every wait is bounded in count and time; bounds on the budget's state allow for the
//! refill over the time the test measured, never for a guess at the machine's speed.

mod support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::google::protobuf::UInt64Value;
use support::envoy::{Envoy, Reply, TOKENS_EXAMPLE};
use support::process::Meshlimit;
use support::redis::RedisServer;
use tempfile::TempDir;
use tokio::time::Instant;

/// The recipe's directory.
const EXAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy-tokens");

/// The budget of `config/tokens.yaml`: a bucket of 10,000 tokens refilled at 10,000 a
/// minute.
const BUDGET: f64 = 10_000.0;
const REFILL_PER_SECOND: f64 = 10_000.0 / 60.0;

/// Bound on waiting for a charge to land (it is sent right after its response).
const LANDING: Duration = Duration::from_secs(10);

/// The example's meshlimit config directory.
fn example_config() -> PathBuf {
    Path::new(EXAMPLE).join("config")
}

/// An Envoy running the example in front of `server`.
async fn envoy_for(server: &Meshlimit) -> Envoy {
    let grpc = server.grpc;
    Envoy::start(2, move |ports| {
        support::envoy::example_on(TOKENS_EXAMPLE, ports, grpc, None, &[])
    })
    .await
}

/// One request of `user` through the gateway, whose answer reports `tokens` used (`None`:
/// the backend reports nothing, so nothing is charged).
async fn through(envoy: &Envoy, user: &str, tokens: Option<u64>) -> Reply {
    let tokens = tokens.map(|t| t.to_string());
    let mut headers = vec![("x-user-id", user)];
    if let Some(tokens) = &tokens {
        headers.push(("x-llm-tokens", tokens.as_str()));
    }
    support::envoy::request(envoy.listener(0), "/", &headers)
        .await
        .unwrap_or_else(|e| panic!("a request of {user} through Envoy: {e}"))
}

/// `reply`'s header `name` as a number.
fn number(reply: &Reply, name: &str) -> u64 {
    reply
        .header(name)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no number in {name}: {reply:?}"))
}

/// meshlimit's view of `user`'s budget: a check of 0 hits over gRPC, which spends nothing.
async fn budget(server: &Meshlimit, user: &str) -> DescriptorStatus {
    let mut descriptor = support::descriptor(&[("user_id", user)]);
    descriptor.hits_addend = Some(UInt64Value { value: 0 });
    let request = RateLimitRequest {
        domain: "llm".to_string(),
        descriptors: vec![descriptor],
        hits_addend: 0,
    };
    let mut response = server.ask(request).await;
    assert_eq!(response.statuses.len(), 1, "{response:?}");
    response.statuses.remove(0)
}

/// Seconds until the budget's reset, as meshlimit reports it.
fn reset_seconds(status: &DescriptorStatus) -> f64 {
    let reset = status.duration_until_reset.unwrap_or_default();
    reset.seconds as f64 + f64::from(reset.nanos) / 1e9
}

/// Asks meshlimit about `user`'s budget until `landed` holds of the answer (at most
/// [`LANDING`]); that answer.
async fn wait_for(
    server: &Meshlimit,
    user: &str,
    what: &str,
    landed: impl Fn(&DescriptorStatus) -> bool,
) -> DescriptorStatus {
    let deadline = Instant::now() + LANDING;
    loop {
        let status = budget(server, user).await;
        if landed(&status) {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "{user}: {what} not seen within {LANDING:?}; last answer {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until meshlimit shows `spent` tokens of `user`'s budget gone, charged since
/// `since`: at most what is left after them plus the refill since then.
async fn wait_for_spent(server: &Meshlimit, user: &str, spent: u64, since: Instant) {
    let what = format!("{spent} tokens spent");
    wait_for(server, user, &what, |status| {
        let refilled = since.elapsed().as_secs_f64() * REFILL_PER_SECOND;
        status.code == Code::Ok as i32
            && f64::from(status.limit_remaining) <= BUDGET - spent as f64 + refilled + 1.0
    })
    .await;
}

/// Waits until meshlimit refuses `user` (the budget is in debt); the refusal.
async fn wait_for_debt(server: &Meshlimit, user: &str) -> DescriptorStatus {
    wait_for(server, user, "a debt", |s| s.code == Code::OverLimit as i32).await
}

/// The reset of a budget that is `owed` tokens below empty after charges made since
/// `since`, in seconds: the time until the refill has repaid them and one more token is
/// there, less the refill since then (at least `low`, at most `high`).
fn reset_bounds(owed: f64, since: Instant) -> (f64, f64) {
    let high = (owed + 1.0) / REFILL_PER_SECOND;
    (high - since.elapsed().as_secs_f64(), high)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_answer_puts_the_budget_in_debt_and_the_next_requests_are_refused() {
    let server = Meshlimit::start(&example_config(), &[]).await;
    let envoy = envoy_for(&server).await;
    let start = Instant::now();

    // Under budget, alice is admitted; each answer's tokens are charged once it is done.
    for _ in 0..3 {
        let reply = through(&envoy, "alice", Some(2_000)).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.header("x-tokens-used"), Some("2000"), "{reply:?}");
        assert!(reply.header("x-ratelimit-remaining").is_some(), "{reply:?}");
    }
    wait_for_spent(&server, "alice", 6_000, start).await;

    // 4,000 left: a large answer starts (the check sees no debt) and costs 50,000.
    let large = through(&envoy, "alice", Some(50_000)).await;
    assert_eq!(large.status, 200, "{large:?}");
    let debt = wait_for_debt(&server, "alice").await;
    // 56,000 charged against 10,000: 46,000 below empty, less the refill since `start`.
    let (low, high) = reset_bounds(46_000.0, start);
    let reset = reset_seconds(&debt);
    assert!(
        (low..=high + 1.0).contains(&reset),
        "reset {reset} s, expected {low}..{high}: {debt:?}"
    );
    assert_eq!(debt.limit_remaining, 0, "{debt:?}");

    // The next requests are refused, whatever they would cost; the refusals, Envoy's own
    // replies without x-tokens-used, are not charged: the reset does not grow.
    let mut last = reset;
    for _ in 0..3 {
        let refused = through(&envoy, "alice", Some(20_000)).await;
        assert_eq!(refused.status, 429, "{refused:?}");
        assert_eq!(refused.header("x-envoy-ratelimited"), Some("true"));
        assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
        assert_eq!(
            refused.header("x-tokens-used"),
            None,
            "the backend answered"
        );
        let header = number(&refused, "x-ratelimit-reset") as f64;
        let (low, high) = reset_bounds(46_000.0, start);
        assert!(
            (low - 1.0..=high + 1.0).contains(&header),
            "x-ratelimit-reset {header}, expected {low}..{high}"
        );
    }
    // Give a charge of 20,000 (120 s) the time to land, were one sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = reset_seconds(&budget(&server, "alice").await);
    assert!(
        after <= last,
        "the refusals were charged: reset {last} s, then {after} s"
    );
    last = after;

    // Another user has a budget of their own, full.
    let bob = through(&envoy, "bob", Some(100)).await;
    assert_eq!(bob.status, 200, "{bob:?}");
    assert_eq!(
        bob.header("x-ratelimit-remaining"),
        Some("10000"),
        "{bob:?}"
    );
    assert!(reset_seconds(&budget(&server, "alice").await) <= last);

    // The filter's counters (under the route's cluster and the filter's stat_prefix)
    // count the checks only: Envoy ignores the answers to its charges.
    assert_eq!(
        envoy
            .counter("cluster.llm_backend.ratelimit.llm.error")
            .await,
        0
    );
    assert!(
        envoy
            .counter("cluster.llm_backend.ratelimit.llm.over_limit")
            .await
            >= 3
    );
}

/// A budget of 100 tokens a second (test-local), charged always.
const PER_SECOND: &str = "
domain: llm
descriptors:
  - key: user_id
    rate_limit: {unit: second, requests_per_unit: 100, charge: always}
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_debt_is_repaid_at_the_refill_rate() {
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("tokens.yaml"), PER_SECOND).expect("writing the config");
    let server = Meshlimit::start(dir.path(), &[]).await;
    let envoy = envoy_for(&server).await;

    // 300 tokens of a bucket of 100: 200 below empty, repaid at 100 a second, so a
    // request passes again 2.01 s after the charge landed (after `start`).
    let start = Instant::now();
    let answer = through(&envoy, "alice", Some(300)).await;
    assert_eq!(answer.status, 200, "{answer:?}");

    // Requests that cost nothing (no x-llm-tokens) until one passes after some refusals:
    // the charge lands, then the debt is repaid.
    let deadline = start + Duration::from_secs(10);
    let mut refusals: Vec<(Instant, u64)> = Vec::new();
    let passed = loop {
        let sent = Instant::now();
        let reply = through(&envoy, "alice", None).await;
        match reply.status {
            429 => refusals.push((sent, number(&reply, "x-ratelimit-reset"))),
            200 if !refusals.is_empty() => break Instant::now(),
            // The charge has not landed yet.
            200 => {}
            other => panic!("status {other}: {reply:?}"),
        }
        assert!(
            Instant::now() < deadline,
            "alice: no refusal then admission within 10 s; refusals {refusals:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };

    assert!(
        passed - start >= Duration::from_millis(2_010),
        "admitted {:?} after the charge was sent, before the debt was repaid",
        passed - start
    );
    for (i, &(sent, reset)) in refusals.iter().enumerate() {
        // Whole seconds of at most 2.01 s, falling as the debt is repaid.
        assert!(reset <= 3, "x-ratelimit-reset {reset}: {refusals:?}");
        if let Some(&(_, next)) = refusals.get(i + 1) {
            assert!(next <= reset, "the reset grew: {refusals:?}");
        }
        // A reset is never early: the request that passed came at least that long after
        // a refusal that reported it.
        assert!(
            passed - sent >= Duration::from_secs(reset),
            "admitted {:?} after a refusal that said {reset} s",
            passed - sent
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_one_redis_share_a_budget_exactly() {
    let redis = RedisServer::start();
    let config = example_config();
    let one = Meshlimit::start_on_redis(&config, &redis.url(), "error", 1000, &[]).await;
    let two = Meshlimit::start_on_redis(&config, &redis.url(), "error", 1000, &[]).await;
    let (envoy_one, envoy_two) = (envoy_for(&one).await, envoy_for(&two).await);
    let start = Instant::now();

    // 6,000 through the first Envoy: the second replica sees them.
    let reply = through(&envoy_one, "alice", Some(6_000)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    wait_for_spent(&two, "alice", 6_000, start).await;

    // 4,000 left: an answer of 16,000 through the second Envoy starts, and is charged.
    let reply = through(&envoy_two, "alice", Some(16_000)).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let debt = wait_for_debt(&one, "alice").await;
    // 22,000 charged against 10,000: exactly 12,000 below empty, less the refill since
    // `start`, as both replicas report.
    let (low, high) = reset_bounds(12_000.0, start);
    for (name, status) in [("one", debt), ("two", budget(&two, "alice").await)] {
        let reset = reset_seconds(&status);
        assert_eq!(status.code, Code::OverLimit as i32, "{name}: {status:?}");
        assert!(
            (low..=high + 1.0).contains(&reset),
            "{name}: reset {reset} s, expected {low}..{high}"
        );
    }

    // Refused through either Envoy; another user is admitted through both.
    for envoy in [&envoy_one, &envoy_two] {
        let refused = through(envoy, "alice", Some(10)).await;
        assert_eq!(refused.status, 429, "{refused:?}");
        assert_eq!(refused.header("x-envoy-ratelimited"), Some("true"));
        let bob = through(envoy, "bob", None).await;
        assert_eq!(bob.status, 200, "{bob:?}");
    }
}

/// The recipe as is: Envoy accepts its config, meshlimit its descriptor file.
#[tokio::test]
async fn the_tokens_example_validates() {
    support::envoy::assert_example_validates(TOKENS_EXAMPLE.example).await;
}

//! `--ratelimit-headers draft` through the real binary over gRPC: the IETF draft's
//! `RateLimit-Policy` and `RateLimit` fields in `response_headers_to_add`, one policy per
//! limit of every limited descriptor, on allowed and refused answers, alone or after the
//! Go server's `RateLimit-Limit/-Remaining/-Reset`.
//!
//! Values are exact where they cannot depend on how long the test runs: every allowed
//! answer is the first request on its buckets, whose waits are the token bucket's refill
//! times. A refused answer comes a moment after the request that emptied the bucket, so
//! its waits are bounded instead.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::process::Meshlimit;
use tempfile::TempDir;

/// Token buckets: `user` has two limits, `report` one with a multiplier and no name,
/// `tight` a daily cap of one beside an hourly limit.
const LIMITS: &str = "\
domain: hdr
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 10, burst: 20, name: per_second}
      - {unit: day, requests_per_unit: 1000, name: daily_cap}
  - key: report
    rate_limit: {unit: minute, unit_multiplier: 5, requests_per_unit: 3}
  - key: tight
    rate_limits:
      - {unit: hour, requests_per_unit: 100, name: hourly}
      - {unit: day, requests_per_unit: 1, name: daily}
  - key: free
    rate_limit: {unlimited: true}
";

fn config() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hdr.yaml"), LIMITS).expect("writing the config");
    dir
}

async fn call(ml: &Meshlimit, descriptors: &[&[(&str, &str)]]) -> RateLimitResponse {
    ml.ask(support::rls_request("hdr", descriptors)).await
}

/// The headers an answer asks Envoy to add, as `(name, value)`, in order.
fn headers(answer: &RateLimitResponse) -> Vec<(String, String)> {
    answer
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect()
}

fn pair(name: &str, value: &str) -> (String, String) {
    (name.to_string(), value.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_of_every_limited_descriptor_is_described() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--ratelimit-headers", "draft"]).await;

    // Two limits of `user`, the unnamed one of `report` (descriptor 2, 5 minutes); the
    // unknown and the unlimited descriptors add nothing.
    let answer = call(
        &ml,
        &[
            &[("user", "alice")],
            &[("unknown", "x")],
            &[("report", "r1")],
            &[("free", "f")],
        ],
    )
    .await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_eq!(
        headers(&answer),
        [
            pair(
                "RateLimit-Policy",
                r#""per_second";q=10;w=1, "daily_cap";q=1000;w=86400, "d2-300s";q=3;w=300"#
            ),
            // Refill times: 1/10 s, 86.4 s and 100 s, rounded up.
            pair(
                "RateLimit",
                r#""per_second";r=19;t=1, "daily_cap";r=999;t=87, "d2-300s";r=2;t=100"#
            ),
        ]
    );

    // Nothing limited: no fields (the draft's lists are never empty).
    let answer = call(&ml, &[&[("free", "f")], &[("unknown", "y")]]).await;
    assert!(answer.response_headers_to_add.is_empty(), "{answer:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_answers_describe_every_limit_too() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--ratelimit-headers", "draft"]).await;
    let policy = pair(
        "RateLimit-Policy",
        r#""hourly";q=100;w=3600, "daily";q=1;w=86400"#,
    );

    let answer = call(&ml, &[&[("tight", "t")]]).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_eq!(
        headers(&answer),
        [
            policy.clone(),
            pair("RateLimit", r#""hourly";r=99;t=36, "daily";r=0;t=86400"#),
        ]
    );

    // The daily cap refuses; the hourly limit keeps its token (nothing is consumed).
    let answer = call(&ml, &[&[("tight", "t")]]).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    let got = headers(&answer);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0], policy);
    assert_eq!(got[1].0, "RateLimit");
    let (hourly_t, daily_t) = waits(&got[1].1);
    // Each wait is what it was a moment ago, less the time between the two calls.
    assert!((1..=36).contains(&hourly_t), "{got:?}");
    assert!((86_000..=86_400).contains(&daily_t), "{got:?}");
}

/// The `t` of `"hourly";r=99;t=<a>, "daily";r=0;t=<b>`, checking the rest exactly.
fn waits(field: &str) -> (u64, u64) {
    let (hourly, daily) = field.split_once(", ").expect("two items");
    let wait = |item: &str, prefix: &str| -> u64 {
        item.strip_prefix(prefix)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{item:?} is not {prefix}<seconds>"))
    };
    (
        wait(hourly, r#""hourly";r=99;t="#),
        wait(daily, r#""daily";r=0;t="#),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn both_header_modes_together_or_neither() {
    let dir = config();
    let plain = Meshlimit::start(dir.path(), &[]).await;
    let answer = call(&plain, &[&[("user", "u")]]).await;
    assert!(answer.response_headers_to_add.is_empty(), "{answer:?}");

    // The environment variable, and the Go server's headers first: they describe the
    // binding limit of the headline status (per_second: 19 left, fewer than daily_cap).
    let config = dir.path().display().to_string();
    let mut argv = support::process::serve_on_loopback(&config, &["--log", "info"]);
    argv.push("--response-headers");
    let ml = Meshlimit::start_with(&argv, &[("MESHLIMIT_RATELIMIT_HEADERS", "draft")]).await;
    let answer = call(&ml, &[&[("user", "bob")]]).await;
    assert_eq!(
        headers(&answer),
        [
            pair("RateLimit-Limit", "10"),
            pair("RateLimit-Remaining", "19"),
            pair("RateLimit-Reset", "1"),
            pair(
                "RateLimit-Policy",
                r#""per_second";q=10;w=1, "daily_cap";q=1000;w=86400"#
            ),
            pair(
                "RateLimit",
                r#""per_second";r=19;t=1, "daily_cap";r=999;t=87"#
            ),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_style_header_named_like_a_draft_field_stops_the_server() {
    let dir = config();
    let config = dir.path().display().to_string();
    let out = support::process::run_serve(
        &config,
        &[
            "--ratelimit-headers",
            "draft",
            "--response-headers",
            "--remaining-header",
            "RateLimit",
        ],
    )
    .await;
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--ratelimit-headers"), "{stderr}");
}

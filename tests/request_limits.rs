//! The caps on one request (`--max-descriptors`, `--max-entries`, `--max-value-bytes`)
//! through the real binary: refused with INVALID_ARGUMENT (gRPC) or 400 (`/json`,
//! `/explain`) naming the cap, and worst-case requests under the caps do not hold up
//! unrelated calls.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::process::{Meshlimit, serve_on_loopback};
use support::{descriptor, http_get, http_post, rls_request};
use tempfile::TempDir;
use tonic::Code as GrpcCode;

const CONFIG: &str = "\
domain: caps
descriptors:
  - key: one
    rate_limit: {unit: day, requests_per_unit: 1000000}
";

/// Bound on any one call of these tests: a stalled server fails them instead of hanging.
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

async fn start(args: &[&str]) -> (Meshlimit, TempDir) {
    let dir = TempDir::new().unwrap();
    let file = dir.path().join("caps.yaml");
    std::fs::write(&file, CONFIG).unwrap();
    (Meshlimit::start(&file, args).await, dir)
}

/// The gRPC status of `request`, which must be refused.
async fn refusal(server: &Meshlimit, request: RateLimitRequest) -> tonic::Status {
    let mut client = server.client().await;
    tokio::time::timeout(CALL_TIMEOUT, client.should_rate_limit(request))
        .await
        .expect("the server answers within the call timeout")
        .expect_err("the request is refused")
}

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "caps".into(),
        descriptors,
        hits_addend: 0,
    }
}

/// A `/json` body for `descriptors`, each a list of (key, value).
fn json_body(descriptors: &[Vec<(String, String)>]) -> String {
    let descriptors: Vec<serde_json::Value> = descriptors
        .iter()
        .map(|entries| {
            let entries: Vec<serde_json::Value> = entries
                .iter()
                .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
                .collect();
            serde_json::json!({ "entries": entries })
        })
        .collect();
    serde_json::json!({"domain": "caps", "descriptors": descriptors}).to_string()
}

fn entries(n: usize, value_len: usize, tag: usize) -> Vec<(String, String)> {
    (0..n)
        .map(|i| (format!("k{i}"), format!("{tag:0>value_len$}")))
        .collect()
}

#[tokio::test]
async fn descriptors_and_entries_over_the_caps_are_refused_naming_the_cap() {
    let (server, _dir) = start(&[]).await;

    // At the caps: answered.
    let at_caps: Vec<RateLimitDescriptor> = (0..64)
        .map(|i| {
            let entries = entries(32, 8, i);
            let pairs: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            descriptor(&pairs)
        })
        .collect();
    let answer = server.ask(request(at_caps.clone())).await;
    assert_eq!(answer.statuses.len(), 64);

    let mut too_many = at_caps.clone();
    too_many.push(descriptor(&[("one", "x")]));
    let status = refusal(&server, request(too_many)).await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "request has 65 descriptors; --max-descriptors is 64"
    );

    let mut long = at_caps[..3].to_vec();
    let extra = long[2].entries[0].clone();
    long[2].entries.push(extra);
    let status = refusal(&server, request(long)).await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "descriptor 2 has 33 entries; --max-entries is 32"
    );

    // As many descriptors as fit in gRPC's 4 MB message limit: refused at once, and the
    // server still answers (before the caps, such a request kept it busy for minutes).
    let flood: Vec<RateLimitDescriptor> = (0..170_000)
        .map(|i| descriptor(&[("one", &i.to_string())]))
        .collect();
    let status = refusal(&server, request(flood)).await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "request has 170000 descriptors; --max-descriptors is 64"
    );
    let answer = server.ask(rls_request("caps", &[&[("one", "x")]])).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);

    // The same caps, and the same reasons, for /json and /explain.
    let mut bodies: Vec<Vec<(String, String)>> = (0..65).map(|i| entries(1, 4, i)).collect();
    let (code, body) = http_post(server.http, "/json", &json_body(&bodies)).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("request has 65 descriptors; --max-descriptors is 64"),
        "{body}"
    );
    let (code, body) = http_post(server.http, "/explain", &json_body(&bodies)).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("request has 65 descriptors; --max-descriptors is 64"),
        "{body}"
    );
    bodies.truncate(1);
    bodies[0] = entries(33, 4, 0);
    let (code, body) = http_post(server.http, "/json", &json_body(&bodies)).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("descriptor 0 has 33 entries; --max-entries is 32"),
        "{body}"
    );
}

#[tokio::test]
async fn the_caps_follow_their_flags_and_environment() {
    let (server, _dir) = start(&["--max-descriptors", "2", "--max-entries", "1"]).await;
    let status = refusal(
        &server,
        rls_request("caps", &[&[("one", "a")], &[("one", "b")], &[("one", "c")]]),
    )
    .await;
    assert_eq!(
        status.message(),
        "request has 3 descriptors; --max-descriptors is 2"
    );
    let status = refusal(
        &server,
        rls_request("caps", &[&[("one", "a"), ("two", "b")]]),
    )
    .await;
    assert_eq!(
        status.message(),
        "descriptor 0 has 2 entries; --max-entries is 1"
    );

    let dir = TempDir::new().unwrap();
    let file = dir.path().join("caps.yaml");
    std::fs::write(&file, CONFIG).unwrap();
    let file = file.display().to_string();
    let server = Meshlimit::start_with(
        &serve_on_loopback(&file, &["--log", "info"]),
        &[
            ("MESHLIMIT_MAX_DESCRIPTORS", "1"),
            ("MESHLIMIT_MAX_VALUE_BYTES", "3"),
        ],
    )
    .await;
    let status = refusal(
        &server,
        rls_request("caps", &[&[("one", "a")], &[("one", "b")]]),
    )
    .await;
    assert_eq!(
        status.message(),
        "request has 2 descriptors; --max-descriptors is 1"
    );
    let status = refusal(&server, rls_request("caps", &[&[("one", "four")]])).await;
    assert_eq!(
        status.message(),
        "descriptor 0, entry 0: the value has 4 bytes; --max-value-bytes is 3"
    );
}

#[tokio::test]
async fn keys_and_values_over_max_value_bytes_are_refused() {
    let (server, _dir) = start(&[]).await;
    let fits = "v".repeat(4096);
    let long = "v".repeat(4097);

    let answer = server
        .ask(rls_request("caps", &[&[("one", &fits)], &[(&fits, "x")]]))
        .await;
    assert_eq!(answer.statuses.len(), 2);

    let status = refusal(
        &server,
        rls_request("caps", &[&[("one", "x")], &[("one", &long)]]),
    )
    .await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "descriptor 1, entry 0: the value has 4097 bytes; --max-value-bytes is 4096"
    );
    let status = refusal(
        &server,
        rls_request("caps", &[&[("one", "x"), (&long, "x")]]),
    )
    .await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");
    assert_eq!(
        status.message(),
        "descriptor 0, entry 1: the key has 4097 bytes; --max-value-bytes is 4096"
    );

    // A limit sent in the request makes a bucket of any key: the cap holds there too.
    let mut overridden = descriptor(&[("anything", &long)]);
    overridden.limit = Some(RateLimitOverride {
        requests_per_unit: 10,
        unit: 1,
    });
    let status = refusal(&server, request(vec![overridden])).await;
    assert_eq!(status.code(), GrpcCode::InvalidArgument, "{status:?}");

    let body = json_body(&[vec![("one".into(), long.clone())]]);
    let (code, body) = http_post(server.http, "/json", &body).await;
    assert_eq!(code, 400, "{body}");
    assert!(
        body.contains("the value has 4097 bytes; --max-value-bytes is 4096"),
        "{body}"
    );
}

/// A worst case under the default caps: 64 descriptors of 32 entries, values long enough
/// to fill most of gRPC's 4 MB message limit, each with a limit of its own so that every
/// descriptor makes a bucket of a 61 kB key. Slow for real reasons: 4 MB to decode, and
/// 64 long keys to build, hash and compare. Values differ per descriptor, not per
/// request, so that the store holds 64 such buckets, not more.
fn worst_case() -> RateLimitRequest {
    let descriptors = (0..64)
        .map(|d| {
            let entries = entries(32, 1900, d);
            let pairs: Vec<(&str, &str)> = entries
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let mut descriptor = descriptor(&pairs);
            descriptor.limit = Some(RateLimitOverride {
                requests_per_unit: 1_000_000,
                unit: 4, // DAY
            });
            descriptor
        })
        .collect();
    request(descriptors)
}

/// A capped worst case decodes and decides in milliseconds, too fast for "started during
/// one request" to be observable without a race. So the worst case is many of them in
/// flight at once, from several connections; a health check and a one-descriptor call,
/// started once the first worst-case answer proves the flood is being served, must finish
/// while worst-case requests are still outstanding. Nothing is timed: only the order of
/// completions is asserted, and the flood outlasts a small call by dozens of requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_calls_finish_while_worst_case_requests_are_in_flight() {
    const CLIENTS: usize = 3;
    const PER_CLIENT: usize = 8;
    let (server, _dir) = start(&[]).await;
    let server = Arc::new(server);
    let request = Arc::new(worst_case());
    let answered = Arc::new(AtomicUsize::new(0));
    let first = Arc::new(tokio::sync::Notify::new());
    let mut flood = Vec::new();
    for _ in 0..CLIENTS {
        let (server, request, answered, first) = (
            server.clone(),
            request.clone(),
            answered.clone(),
            first.clone(),
        );
        flood.push(tokio::spawn(async move {
            let mut client = server.client().await;
            for _ in 0..PER_CLIENT {
                let call = client.should_rate_limit((*request).clone());
                let answer = tokio::time::timeout(CALL_TIMEOUT, call)
                    .await
                    .expect("a worst-case request is answered within the call timeout")
                    .expect("a worst-case request under the caps is answered");
                assert_eq!(answer.into_inner().statuses.len(), 64);
                answered.fetch_add(1, Ordering::SeqCst);
                first.notify_one();
            }
        }));
    }
    first.notified().await;

    let (code, body) = tokio::time::timeout(CALL_TIMEOUT, http_get(server.http, "/healthcheck"))
        .await
        .expect("/healthcheck answers");
    assert_eq!(code, 200, "{body}");
    let after_health = answered.load(Ordering::SeqCst);
    let mut client = server.client().await;
    let small = client.should_rate_limit(rls_request("caps", &[&[("one", "small")]]));
    let answer = tokio::time::timeout(CALL_TIMEOUT, small)
        .await
        .expect("the one-descriptor call answers")
        .expect("the one-descriptor call is decided")
        .into_inner();
    assert_eq!(answer.statuses.len(), 1);
    let after_small = answered.load(Ordering::SeqCst);
    for task in flood {
        task.await.expect("flood client");
    }
    let total = CLIENTS * PER_CLIENT;
    assert!(
        after_health < total && after_small < total,
        "the small calls finished only after the worst-case requests ({after_health} and \
         {after_small} of {total} answered before them)"
    );
}

//! Issue 9, defect 1, against the `meshlimit` binary over gRPC: a flood of one-off keys
//! into a small embedded store does not switch limits off, and the buckets it forces out
//! while still in use are counted and logged.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use support::process::Meshlimit;
use tonic::transport::Channel;

/// 100 per hour per user: a new bucket holds 100 tokens and earns one back every 36 s.
const CONFIG: &str = "domain: flood
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
";

/// One-off keys per flood request (under the 64-descriptor cap).
const PER_REQUEST: usize = 58;

/// One gRPC client and a supply of keys never used before.
struct Traffic {
    client: RateLimitServiceClient<Channel>,
    one_off: usize,
}

impl Traffic {
    /// One request with a descriptor per user; whether it was allowed.
    async fn ask(&mut self, users: &[String]) -> bool {
        let entries: Vec<[(&str, &str); 1]> = users.iter().map(|u| [("user", &**u)]).collect();
        let descriptors: Vec<&[(&str, &str)]> = entries.iter().map(|e| &e[..]).collect();
        let request = support::rls_request("flood", &descriptors);
        let answer = tokio::time::timeout(
            Duration::from_secs(10),
            self.client.should_rate_limit(request),
        )
        .await
        .expect("ShouldRateLimit hung")
        .expect("ShouldRateLimit")
        .into_inner();
        answer.overall_code == Code::Ok as i32
    }

    /// Of `n` requests of `user`, how many were allowed.
    async fn allowed(&mut self, user: &str, n: usize) -> usize {
        let mut allowed = 0;
        for _ in 0..n {
            allowed += usize::from(self.ask(&[user.to_string()]).await);
        }
        allowed
    }

    /// About `keys` one-off keys, in requests of [`PER_REQUEST`].
    async fn flood(&mut self, keys: usize) {
        for _ in 0..keys.div_ceil(PER_REQUEST) {
            let users: Vec<String> = (self.one_off..self.one_off + PER_REQUEST)
                .map(|i| format!("one-off-{i}"))
                .collect();
            self.one_off += PER_REQUEST;
            self.ask(&users).await;
        }
    }
}

/// A counter's value in the Prometheus text.
fn counter(metrics: &str, name: &str) -> u64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no {name} in:\n{metrics}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_flood_does_not_switch_limits_off() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("flood.yaml"), CONFIG).unwrap();
    let meshlimit = Meshlimit::start(dir.path(), &["--max-buckets", "1000"]).await;
    let mut traffic = Traffic {
        client: meshlimit.client().await,
        one_off: 0,
    };
    // Tokens earned back while the test runs (one per 36 s) are allowed for.
    let started = tokio::time::Instant::now();
    let refilled = || (started.elapsed().as_secs() / 36) as usize;

    assert_eq!(traffic.allowed("alone", 150).await, 100, "a caller alone");
    traffic.flood(20_000).await;
    let after = traffic.allowed("after-flood", 300).await;
    assert!(
        (100..=100 + refilled()).contains(&after),
        "a new caller after 20,000 one-off keys: {after} of 300 allowed\n{}",
        meshlimit.log()
    );

    // A new caller during a flood: 290 new keys between two of its requests, fewer than
    // the 1,000 buckets the store holds, so its bucket stays.
    let mut during = 0;
    for _ in 0..300 {
        during += usize::from(traffic.ask(&["during-flood".to_string()]).await);
        traffic.flood(290).await;
    }
    assert!(
        during <= 100 + refilled(),
        "a new caller during a flood of {} one-off keys: {during} of 300 allowed\n{}",
        traffic.one_off,
        meshlimit.log()
    );

    let (status, metrics) = support::http_get(meshlimit.http, "/metrics").await;
    assert_eq!(status, 200);
    let evictions = counter(&metrics, "meshlimit_store_evictions_total");
    let weakened = counter(&metrics, "meshlimit_store_evictions_weakened_total");
    // Each one-off bucket lost a token, so evicting it weakened a limit (unless it was
    // full again by then: a slow run passes 36 s).
    assert!(evictions >= 10_000, "{evictions} evictions");
    assert!((1..=evictions).contains(&weakened), "{weakened} weakened");
    // Full: the bound's buckets, each counting the same bytes whatever its key.
    let buckets = counter(&metrics, "meshlimit_store_buckets");
    assert_eq!(buckets, 1000, "{metrics}");
    let bytes = counter(&metrics, "meshlimit_store_bytes");
    assert!(
        bytes > 0 && bytes.is_multiple_of(buckets),
        "{bytes} bytes\n{metrics}"
    );
    assert!(
        meshlimit.log().contains("store full"),
        "no warning about weakened limits:\n{}",
        meshlimit.log()
    );
}

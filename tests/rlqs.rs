//! The rate limit quota service against a real Envoy (`envoy.filters.http.rate_limit_quota`):
//! a bucket is assigned after its first report and Envoy enforces the assignment; an
//! unmatched bucket follows `--rlqs-unmatched`; a reload changes what Envoy enforces; a
//! stream that breaks the protocol gets a gRPC error. Every loop is bounded in count and
//! time.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_client::RateLimitQuotaServiceClient;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_usage_reports::BucketQuotaUsage;
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{BucketId, RateLimitQuotaUsageReports};
use support::envoy::{Envoy, EnvoyPorts};
use support::process::Meshlimit;
use support::redis::RedisServer;
use tempfile::TempDir;

/// Domain `edge`: a user's bucket `{name: per_user, user_id}` has 3 an hour, so nothing
/// refills within a test.
const EDGE: &str = "
domain: edge
descriptors:
  - key: name
    value: per_user
    descriptors:
      - key: user_id
        rate_limit: {unit: hour, requests_per_unit: 3}
";

/// `examples/envoy-rlqs/envoy.yaml` (a listener answering 200, the quota filter in domain
/// `edge` with a bucket per `x-user-id`, reporting every second, allowing all until
/// assigned and once an assignment has expired) on the given ports, so that the example
/// is what these tests run. For the test client, which reads until the connection closes,
/// Envoy closes at once after an answer instead of waiting a second for the client.
fn envoy_config(ports: &EnvoyPorts, rlqs: SocketAddr) -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/envoy-rlqs/envoy.yaml"
    );
    let mut config = std::fs::read_to_string(path).expect("reading the example");
    for (from, to) in [
        (
            "port_value: 10010}}",
            format!(
                "port_value: {}}}}}\n    enable_reuse_port: false",
                ports.listeners[0]
            ),
        ),
        (
            "port_value: 9911}}",
            format!("port_value: {}}}}}", ports.admin),
        ),
        (
            "port_value: 8081}}",
            format!("port_value: {}}}}}", rlqs.port()),
        ),
        (
            "stat_prefix: ingress\n",
            "stat_prefix: ingress\n          delayed_close_timeout: 0s\n".to_string(),
        ),
    ] {
        assert_eq!(config.matches(from).count(), 1, "{from:?} once in {path}");
        config = config.replace(from, &to);
    }
    config
}

fn config_dir(yaml: &str) -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("edge.yaml"), yaml).expect("writing the config");
    dir
}

async fn start(config: &Path, args: &[&str]) -> (Meshlimit, Envoy) {
    let server = Meshlimit::start(config, args).await;
    let envoy = envoy_for(&server).await;
    (server, envoy)
}

/// An Envoy (one worker) whose quota filter asks `server`.
async fn envoy_for(server: &Meshlimit) -> Envoy {
    let grpc = server.grpc;
    Envoy::start(1, move |ports| envoy_config(ports, grpc)).await
}

/// The status of one request of `user` through Envoy.
async fn status(envoy: &Envoy, user: &str) -> u16 {
    support::envoy::request(envoy.listener(0), "/", &[("x-user-id", user)])
        .await
        .expect("a request through Envoy")
        .status
}

/// Requests of `user` until Envoy refuses one (429), at most `most` of them within 20 s:
/// how many passed before.
async fn passed_until_refused(envoy: &Envoy, user: &str, most: usize) -> usize {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for passed in 0..most {
        match status(envoy, user).await {
            200 => {}
            429 => return passed,
            other => panic!("status {other} for {user}; Envoy's log:\n{}", envoy.log()),
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{user}: still passing after 20 s ({passed} passed); Envoy's log:\n{}",
            envoy.log()
        );
        // Spaced so that the assignment, sent at the first report, can arrive.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!(
        "{user}: {most} requests passed, none refused; Envoy's log:\n{}",
        envoy.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_assignment_follows_the_first_report_and_envoy_enforces_it() {
    let config = config_dir(EDGE);
    let (mut server, envoy) = start(config.path(), &[]).await;
    // Before the assignment Envoy allows all (its fallback); once assigned, 3 an hour.
    let passed = passed_until_refused(&envoy, "alice", 200).await;
    assert!((3..200).contains(&passed), "{passed} passed");
    for _ in 0..5 {
        assert_eq!(status(&envoy, "alice").await, 429, "spent for the hour");
    }
    // Another user is another bucket, with its own 3.
    let passed = passed_until_refused(&envoy, "bob", 200).await;
    assert!(passed >= 3, "{passed} passed");
    assert!(server.is_running());

    // The operator page and the metrics show the stream, its buckets and assignments.
    let (status, page) = support::http_get(server.http, "/rlqs").await;
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("1 open streams, 2 buckets"), "{page}");
    assert!(page.contains("domain \"edge\", 2 buckets"), "{page}");
    assert!(
        page.contains("bucket edge {name=per_user, user_id=alice}: rule quota token_bucket max_tokens 3, 1 per 1200s"),
        "{page}"
    );
    assert!(
        page.contains("assigned token_bucket max_tokens 3, 1000 per 1200000s"),
        "{page}"
    );
    let (_, metrics) = support::http_get(server.http, "/metrics").await;
    for line in ["meshlimit_rlqs_streams 1", "meshlimit_rlqs_buckets 2"] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    let counter = |metrics: &str, name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} in:\n{metrics}"))
    };
    assert!(counter(&metrics, "meshlimit_rlqs_reports_total") >= 2);
    assert!(counter(&metrics, "meshlimit_rlqs_assignments_total") >= 2);
    // Envoy reports its refusals with its next report, within a second.
    support::eventually_async(10, "Envoy's refusals in the metrics", || async {
        let (_, metrics) = support::http_get(server.http, "/metrics").await;
        counter(&metrics, "meshlimit_rlqs_denied_total") >= 5
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_buckets_follow_the_flag() {
    // No rule for domain edge at all: every bucket is unmatched.
    let config = config_dir(
        "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
    );
    let (_server, envoy) = start(config.path(), &["--rlqs-unmatched", "deny"]).await;
    let passed = passed_until_refused(&envoy, "carol", 200).await;
    assert!(passed < 200);
    for _ in 0..3 {
        assert_eq!(status(&envoy, "carol").await, 429);
    }

    let (_server, envoy) = start(config.path(), &[]).await;
    for _ in 0..20 {
        assert_eq!(status(&envoy, "dave").await, 200, "allow is the default");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_changes_what_envoy_enforces() {
    let config = config_dir(EDGE);
    let (_server, envoy) = start(config.path(), &[]).await;
    passed_until_refused(&envoy, "erin", 200).await;
    // The rule becomes unlimited: within a few seconds the bucket is ALLOW_ALL.
    std::fs::write(
        config.path().join("edge.yaml"),
        EDGE.replace(
            "rate_limit: {unit: hour, requests_per_unit: 3}",
            "rate_limit: {unlimited: true}",
        ),
    )
    .unwrap();
    support::eventually_async(10, "erin allowed again after the reload", || async {
        status(&envoy, "erin").await == 200
    })
    .await;
}

#[tokio::test]
async fn a_stream_without_a_domain_or_with_an_empty_bucket_is_refused() {
    let config = config_dir(EDGE);
    let server = Meshlimit::start(config.path(), &[]).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .expect("connecting");
    let usage = |id: &[(&str, &str)]| BucketQuotaUsage {
        bucket_id: Some(BucketId {
            bucket: id
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        }),
        time_elapsed: None,
        num_requests_allowed: 1,
        num_requests_denied: 0,
    };
    for (domain, id, says) in [
        ("", vec![("name", "per_user")], "must name a domain"),
        ("edge", vec![], "bucket id is empty"),
    ] {
        let mut client = RateLimitQuotaServiceClient::new(channel.clone());
        let reports = RateLimitQuotaUsageReports {
            domain: domain.to_string(),
            bucket_quota_usages: vec![usage(&id)],
        };
        let mut answers = client
            .stream_rate_limit_quotas(tonic::codegen::tokio_stream::iter(vec![reports]))
            .await
            .expect("the stream opens")
            .into_inner();
        let status = tokio::time::timeout(Duration::from_secs(10), answers.message())
            .await
            .expect("an answer within 10 s")
            .expect_err("a gRPC error");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(says), "{}", status.message());
    }
    // A well-formed stream gets its assignment: a token bucket of 3 an hour.
    let mut client = RateLimitQuotaServiceClient::new(channel);
    let reports = RateLimitQuotaUsageReports {
        domain: "edge".into(),
        bucket_quota_usages: vec![usage(&[("name", "per_user"), ("user_id", "frank")])],
    };
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tx.send(reports).await.unwrap();
    let mut answers = client
        .stream_rate_limit_quotas(tonic::codegen::tokio_stream::wrappers::ReceiverStream::new(
            rx,
        ))
        .await
        .expect("the stream opens")
        .into_inner();
    let answer = tokio::time::timeout(Duration::from_secs(10), answers.message())
        .await
        .expect("an answer within 10 s")
        .expect("no error")
        .expect("an assignment");
    let text = format!("{answer:?}");
    assert!(text.contains("max_tokens: 3"), "{text}");
    assert!(text.contains("frank"), "{text}");
    drop(tx);
}

/// Domain `edge` with one bucket per user at 20 a second, burst 20.
const TWENTY: &str = "
domain: edge
descriptors:
  - key: name
    value: per_user
    descriptors:
      - key: user_id
        rate_limit: {unit: second, requests_per_unit: 20}
";

/// Held by the tests that load Envoys as hard as they can, one at a time: two of them at
/// once on a small machine would measure each other.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Requests of `user` through `envoy` from `clients` loops at once until `deadline`, each
/// loop waiting `pause` between requests: (passed, refused).
async fn drive(
    envoy: SocketAddr,
    user: &'static str,
    clients: usize,
    pause: Duration,
    deadline: tokio::time::Instant,
) -> (u64, u64) {
    let loops: Vec<_> = (0..clients)
        .map(|_| {
            tokio::spawn(async move {
                let (mut passed, mut refused) = (0u64, 0u64);
                while tokio::time::Instant::now() < deadline {
                    let reply = support::envoy::request(envoy, "/", &[("x-user-id", user)])
                        .await
                        .expect("a request through Envoy");
                    match reply.status {
                        200 => passed += 1,
                        429 => refused += 1,
                        other => panic!("status {other}"),
                    }
                    tokio::time::sleep(pause).await;
                }
                (passed, refused)
            })
        })
        .collect();
    let mut total = (0, 0);
    for l in loops {
        let (p, r) = l.await.expect("a load loop");
        total = (total.0 + p, total.1 + r);
    }
    total
}

/// Both Envoys driven as hard as the test client can for 20 s for one user's bucket of 20
/// a second, burst 20: together they admit within ±10% of rate × duration + burst.
async fn within_the_rule_under_full_load(first: &Envoy, second: &Envoy, user: &'static str) {
    let seconds = 20;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(seconds);
    let (a, b) = tokio::join!(
        drive(first.listener(0), user, 4, Duration::ZERO, deadline),
        drive(second.listener(0), user, 4, Duration::ZERO, deadline),
    );
    let admitted = a.0 + b.0;
    let expected = 20 * seconds + 20;
    println!("admitted {admitted} (first {a:?}, second {b:?}), expected {expected}");
    assert!(
        a.1 > 0 && b.1 > 0,
        "both Envoys were saturated: {a:?} {b:?}"
    );
    assert!(
        admitted * 10 >= expected * 9 && admitted * 10 <= expected * 11,
        "admitted {admitted}, expected {expected} ± 10% (first {a:?}, second {b:?})"
    );
}

/// `busy` driven as hard as the test client can and `quiet` at 2 requests a second for
/// 10 s, one user's bucket of 20 a second: the quiet one's requests all pass, from the
/// first.
async fn quiet_beside_busy(busy: &Envoy, quiet: &Envoy, user: &'static str) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let pause = Duration::from_millis(500);
    let (busy, quiet) = tokio::join!(
        drive(busy.listener(0), user, 4, Duration::ZERO, deadline),
        drive(quiet.listener(0), user, 1, pause, deadline),
    );
    println!("busy {busy:?}, quiet {quiet:?}");
    assert!(busy.1 > 0, "the busy Envoy was saturated: {busy:?}");
    assert!(quiet.0 >= 15, "{quiet:?}");
    assert_eq!(
        quiet.1, 0,
        "the quiet Envoy's requests all passed: {quiet:?}"
    );
}

/// meshlimit on `config` with two Envoys (one worker each) asking it.
async fn one_server_two_envoys(config: &Path) -> (Meshlimit, Envoy, Envoy) {
    let server = Meshlimit::start(config, &[]).await;
    let (first, second) = (envoy_for(&server).await, envoy_for(&server).await);
    (server, first, second)
}

/// Two meshlimit replicas on `config` sharing `redis` (`--redis-failure error`), each with
/// an Envoy (one worker) of its own: the first Envoy asks the first replica.
async fn two_replicas_two_envoys(
    config: &Path,
    redis: &RedisServer,
) -> (Meshlimit, Meshlimit, Envoy, Envoy) {
    let url = redis.url();
    let one = Meshlimit::start_on_redis(config, &url, "error", 1000, &[]).await;
    let two = Meshlimit::start_on_redis(config, &url, "error", 1000, &[]).await;
    let (first, second) = (envoy_for(&one).await, envoy_for(&two).await);
    (one, two, first, second)
}

/// Issue 12's accuracy figure: two Envoys (one worker each) sharing one rule of 20/s,
/// both driven as hard as the test client can for 20 s; together they admit within ±10%
/// of rate × duration + burst, what Envoy lets through before its first assignment
/// included.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_envoys_together_stay_within_the_rule() {
    let _heavy = HEAVY.lock().await;
    let config = config_dir(TWENTY);
    let (_server, first, second) = one_server_two_envoys(config.path()).await;
    within_the_rule_under_full_load(&first, &second, "gina").await;
}

/// One Envoy saturated, the other sending 2 requests a second: the quiet one's requests
/// all pass (it is given its demand and headroom, the busy one the rest).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_envoy_beside_a_saturated_one_is_not_refused() {
    let _heavy = HEAVY.lock().await;
    let config = config_dir(TWENTY);
    let (_server, busy, quiet) = one_server_two_envoys(config.path()).await;
    quiet_beside_busy(&busy, &quiet, "hana").await;
}

/// meshlimit killed: its assignments run out their time to live and Envoy falls back to
/// the bucket's `expired_assignment_behavior` (here ALLOW_ALL): a spent user passes again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_meshlimit_hands_control_to_envoys_expiry_behaviour() {
    let config = config_dir(EDGE);
    let (server, envoy) = start(config.path(), &["--rlqs-assignment-ttl-ms", "1000"]).await;
    passed_until_refused(&envoy, "ivan", 200).await;
    assert_eq!(status(&envoy, "ivan").await, 429);
    drop(server); // SIGKILL
    support::eventually_async(15, "ivan allowed once the assignment expired", || async {
        status(&envoy, "ivan").await == 200
    })
    .await;
}

/// SIGTERM with an Envoy connected: while the drain's delay runs, a new quota stream is
/// refused UNAVAILABLE and the open one goes on (Envoy still enforces its assignment);
/// at the delay's end the open stream ends, so that the drain does not wait for its whole
/// timeout (60 s here; the harness allows 20).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drain_refuses_new_quota_streams_then_ends_open_ones() {
    let config = config_dir(EDGE);
    let (server, envoy) = start(
        config.path(),
        &["--drain-delay-ms", "5000", "--drain-timeout-ms", "60000"],
    )
    .await;
    passed_until_refused(&envoy, "judy", 200).await;
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .expect("connecting");
    server.sigterm();
    support::eventually_async(4, "draining", || async {
        support::http_get(server.http, "/healthcheck").await.0 == 500
    })
    .await;
    let reports = RateLimitQuotaUsageReports {
        domain: "edge".into(),
        bucket_quota_usages: Vec::new(),
    };
    let refused = RateLimitQuotaServiceClient::new(channel)
        .stream_rate_limit_quotas(tonic::codegen::tokio_stream::iter(vec![reports]))
        .await
        .expect_err("a new stream is refused while draining");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(
        status(&envoy, "judy").await,
        429,
        "the open stream's assignment holds"
    );
    assert!(server.terminate().await.success());
}

/// The accuracy figure on Redis: two meshlimit replicas sharing one Redis, each with its own
/// Envoy; the reporters of both replicas meet in Redis, so that together they stay within
/// the rule.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_replicas_on_redis_together_stay_within_the_rule() {
    let _heavy = HEAVY.lock().await;
    let redis = RedisServer::start();
    let config = config_dir(TWENTY);
    let (one, two, first, second) = two_replicas_two_envoys(config.path(), &redis).await;
    within_the_rule_under_full_load(&first, &second, "kim").await;
    // Each replica assigns its own Envoy half the rule, knowing the other from Redis.
    for replica in [&one, &two] {
        let (_, page) = support::http_get(replica.http, "/rlqs").await;
        assert!(page.contains("user_id=kim"), "{page}");
        assert!(page.contains("(10.00/s)"), "{page}");
        // Nudges follow changes of share, which settle: no storm between the replicas
        // (the bound is far above what a settled pair sends).
        let (_, metrics) = support::http_get(replica.http, "/metrics").await;
        let nudges: u64 = metrics
            .lines()
            .find_map(|line| line.strip_prefix("meshlimit_rlqs_nudges_total "))
            .and_then(|n| n.trim().parse().ok())
            .expect("the nudges counter");
        println!("nudges {nudges}");
        assert!(nudges < 100, "{nudges} nudges in 20 s");
    }
}

/// Redis killed under `allow`: the buckets become ALLOW_ALL; under `error`, no assignment
/// is renewed, so the one Envoy holds runs out its (here one minute) time to live.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_follows_the_failure_policy() {
    let mut redis = RedisServer::start();
    let config = config_dir(EDGE);
    let allow = Meshlimit::start_on_redis(config.path(), &redis.url(), "allow", 200, &[]).await;
    let error = Meshlimit::start_on_redis(
        config.path(),
        &redis.url(),
        "error",
        200,
        &["--rlqs-assignment-ttl-ms", "60000"],
    )
    .await;
    let allowing = envoy_for(&allow).await;
    let erring = envoy_for(&error).await;
    passed_until_refused(&allowing, "lena", 200).await;
    passed_until_refused(&erring, "mona", 200).await;
    redis.kill();
    support::eventually_async(
        15,
        "lena allowed once Redis is down under allow",
        || async { status(&allowing, "lena").await == 200 },
    )
    .await;
    // Several reports later, mona's assignment still holds: nothing replaced it.
    for _ in 0..5 {
        assert_eq!(status(&erring, "mona").await, 429);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// A quota stream is a call in flight: an idle timeout far shorter than Envoy's reporting
/// interval does not close it (the stream and its buckets stay, no connection is closed
/// as idle); gRPC health answers for the quota service by name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeouts_leave_quota_streams_open_and_health_names_the_service() {
    let config = config_dir(EDGE);
    let (server, envoy) = start(config.path(), &["--idle-timeout-ms", "300"]).await;
    passed_until_refused(&envoy, "nora", 200).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let (_, page) = support::http_get(server.http, "/rlqs").await;
    assert!(
        page.contains("1 open streams") && page.contains("stream #1:"),
        "{page}"
    );
    let (_, metrics) = support::http_get(server.http, "/metrics").await;
    assert!(
        metrics
            .lines()
            .any(|l| l == "meshlimit_connections_idle_closed_total 0"),
        "{metrics}"
    );
    assert_eq!(status(&envoy, "nora").await, 429, "still limited");

    let mut health = server.health().await;
    let answer = health
        .check(tonic_health::pb::HealthCheckRequest {
            service: "envoy.service.rate_limit_quota.v3.RateLimitQuotaService".into(),
        })
        .await
        .expect("a health answer")
        .into_inner();
    assert_eq!(
        answer.status,
        tonic_health::pb::health_check_response::ServingStatus::Serving as i32
    );
}

/// Redis killed under `local`: this replica goes on assigning its own shares, renewed
/// while the time to live (3 s here) passes several times; under `error` nothing is
/// renewed, so the assignment expires and Envoy's expiry behaviour (ALLOW_ALL) answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_under_local_keeps_assigning_and_under_error_lets_assignments_expire() {
    let mut redis = RedisServer::start();
    let config = config_dir(EDGE);
    let ttl = ["--rlqs-assignment-ttl-ms", "3000"];
    let local = Meshlimit::start_on_redis(config.path(), &redis.url(), "local", 200, &ttl).await;
    let error = Meshlimit::start_on_redis(config.path(), &redis.url(), "error", 200, &ttl).await;
    let on_local = envoy_for(&local).await;
    let on_error = envoy_for(&error).await;
    passed_until_refused(&on_local, "olga", 200).await;
    passed_until_refused(&on_error, "pia", 200).await;
    redis.kill();
    support::eventually_async(15, "pia allowed once her assignment expired", || async {
        status(&on_error, "pia").await == 200
    })
    .await;
    // By then olga's assignment has outlived several times to live: renewed locally.
    for _ in 0..3 {
        assert_eq!(status(&on_local, "olga").await, 429);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The quiet Envoy on Redis: two replicas, one Envoy saturated on one, the other sending 2
/// requests a second on the other; the quiet one's requests all pass, from the first (the
/// newcomer's grant is cut by what the busy replica holds, and the nudge that follows
/// makes that replica shrink at once instead of at its next look at Redis).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_quiet_envoy_on_another_replica_is_not_refused() {
    let _heavy = HEAVY.lock().await;
    let redis = RedisServer::start();
    let config = config_dir(TWENTY);
    let (_one, _two, busy, quiet) = two_replicas_two_envoys(config.path(), &redis).await;
    quiet_beside_busy(&busy, &quiet, "rita").await;
}

//! The `meshlimit` binary on the Redis store, end to end over gRPC and HTTP: two processes
//! sharing one Redis, each failure policy while Redis is killed and restarted under
//! traffic (answers, /healthcheck, grpc.health.v1), password and unix-socket URLs, and
//! startup refusals.

mod support;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use meshlimit::bucket_key::BucketKey;
use support::process::Meshlimit;
use support::redis::{RedisCluster, RedisServer};
use tempfile::TempDir;
use tonic::transport::Channel;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::{HealthCheckRequest, HealthCheckResponse};

/// Day limits: no token refills within a test.
const LIMITS: &str = "
domain: bin
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 50}
  - key: three
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: big
    rate_limit: {unit: day, requests_per_unit: 1000000}
";

/// The names gRPC health checks ask for.
const HEALTH_NAMES: [&str; 3] = [
    "",
    "ratelimit",
    "envoy.service.ratelimit.v3.RateLimitService",
];

/// Bound on any one call: far above every timeout meshlimit is given here, so exceeding it
/// means a hang.
const CALL_BOUND: Duration = Duration::from_secs(10);

fn config() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bin.yaml"), LIMITS).expect("writing the config");
    dir
}

/// `serve` on the Redis store at `url` with the failure `policy` and `timeout_ms`.
async fn serve(config: &Path, url: &str, policy: &str, timeout_ms: u64) -> Meshlimit {
    Meshlimit::start_on_redis(config, url, policy, timeout_ms, &[]).await
}

fn request(key: &str, value: &str) -> RateLimitRequest {
    support::rls_request("bin", &[&[(key, value)]])
}

/// What a ShouldRateLimit call got.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Ok,
    OverLimit,
    /// gRPC UNAVAILABLE, with its message.
    Unavailable(String),
}

/// One call, bounded by [`CALL_BOUND`]; any status but UNAVAILABLE fails the test.
async fn call(client: &mut RateLimitServiceClient<Channel>, key: &str, value: &str) -> Answer {
    let reply = tokio::time::timeout(CALL_BOUND, client.should_rate_limit(request(key, value)))
        .await
        .unwrap_or_else(|_| panic!("ShouldRateLimit {key}={value} hung for {CALL_BOUND:?}"));
    match reply {
        Ok(r) => match Code::try_from(r.into_inner().overall_code) {
            Ok(Code::Ok) => Answer::Ok,
            Ok(Code::OverLimit) => Answer::OverLimit,
            other => panic!("{key}={value}: overall code {other:?}"),
        },
        Err(status) if status.code() == tonic::Code::Unavailable => {
            Answer::Unavailable(status.message().to_string())
        }
        Err(status) => panic!("{key}={value}: {status:?}"),
    }
}

/// `n` concurrent calls for `key=value`, round-robin over `clients`, released together;
/// how many passed. Every call must be decided (OK or OVER_LIMIT).
async fn concurrent(
    clients: &[RateLimitServiceClient<Channel>],
    n: usize,
    key: &str,
    value: &str,
) -> usize {
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let mut client = clients[i % clients.len()].clone();
            let (key, value, barrier) = (key.to_string(), value.to_string(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                call(&mut client, &key, &value).await
            })
        })
        .collect();
    let mut passed = 0;
    for task in tasks {
        match task.await.expect("call task") {
            Answer::Ok => passed += 1,
            Answer::OverLimit => {}
            Answer::Unavailable(why) => panic!("{key}={value} not decided: {why}"),
        }
    }
    passed
}

async fn health_status(process: &Meshlimit, service: &str) -> i32 {
    let mut health = process.health().await;
    let check = health.check(HealthCheckRequest {
        service: service.to_string(),
    });
    tokio::time::timeout(CALL_BOUND, check)
        .await
        .unwrap_or_else(|_| panic!("health check {service:?} hung"))
        .unwrap_or_else(|e| panic!("health check {service:?}: {e}"))
        .into_inner()
        .status
}

/// Waits (bounded) until grpc.health.v1 answers `status` for every name.
async fn health_becomes(process: &Meshlimit, status: ServingStatus) {
    for name in HEALTH_NAMES {
        support::eventually_async(10, &format!("gRPC health {name:?}: {status:?}"), || async {
            health_status(process, name).await == status as i32
        })
        .await;
    }
}

async fn healthcheck(process: &Meshlimit) -> (u16, String) {
    tokio::time::timeout(CALL_BOUND, support::http_get(process.http, "/healthcheck"))
        .await
        .expect("/healthcheck hung")
}

/// While Redis is down under `allow` or `local`: /healthcheck 200 saying degraded.
async fn degraded(process: &Meshlimit) {
    let (status, body) = healthcheck(process).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("degraded"), "{body}");
}

/// grpc.health.v1 Watch streams, one per name, each past its first answer (SERVING): what
/// they yield next is a change of the gRPC health.
struct HealthWatch(Vec<(&'static str, tonic::Streaming<HealthCheckResponse>)>);

impl HealthWatch {
    async fn start(process: &Meshlimit) -> HealthWatch {
        let mut streams = Vec::new();
        for name in HEALTH_NAMES {
            let request = HealthCheckRequest {
                service: name.to_string(),
            };
            let mut stream =
                tokio::time::timeout(CALL_BOUND, process.health().await.watch(request))
                    .await
                    .unwrap_or_else(|_| panic!("health watch {name:?} hung"))
                    .unwrap_or_else(|e| panic!("health watch {name:?}: {e}"))
                    .into_inner();
            assert_eq!(
                Self::next(name, &mut stream).await,
                Some(ServingStatus::Serving as i32),
                "{name:?}"
            );
            streams.push((name, stream));
        }
        HealthWatch(streams)
    }

    /// The next status `stream` reports (bounded); `None` when it ended.
    async fn next(name: &str, stream: &mut tonic::Streaming<HealthCheckResponse>) -> Option<i32> {
        tokio::time::timeout(CALL_BOUND, stream.message())
            .await
            .unwrap_or_else(|_| panic!("health watch {name:?}: no change within {CALL_BOUND:?}"))
            .unwrap_or_else(|e| panic!("health watch {name:?}: {e}"))
            .map(|r| r.status)
    }

    /// Checks that no stream reported a change so far (gRPC health stayed SERVING, through
    /// an outage, say), then sends SIGTERM and waits (bounded) for every stream to report
    /// the drain's NOT_SERVING: the streams were live and would have shown a change.
    async fn drain_is_the_first_change(mut self, process: &Meshlimit) {
        for (name, stream) in &mut self.0 {
            // Only what has arrived already: a change would have come long before.
            if let Ok(change) = tokio::time::timeout(Duration::ZERO, stream.message()).await {
                panic!("{name:?}: gRPC health changed before the drain: {change:?}");
            }
        }
        process.sigterm();
        for (name, stream) in &mut self.0 {
            assert_eq!(
                Self::next(name, stream).await,
                Some(ServingStatus::NotServing as i32),
                "{name:?}: the first change of gRPC health is not the drain's"
            );
        }
    }
}

/// After Redis is back: /healthcheck plainly OK again (bounded wait).
async fn healthy_again(process: &Meshlimit) {
    support::eventually_async(20, "/healthcheck OK after the restart", || async {
        healthcheck(process).await == (200, "OK".to_string())
    })
    .await;
}

/// The Redis key of `bin`'s bucket `key=value` (the store's public key format).
fn redis_key(key: &str, value: &str) -> String {
    let part = |s: &str| format!("{}:{s}", s.len());
    BucketKey::from(format!("{}{}{}", part("bin"), part(key), part(value)).as_str()).redis_key("")
}

/// Phases of an outage, as the traffic sees them.
const UP: usize = 0;
const DOWN: usize = 1;
const BACK: usize = 2;

/// Background calls for `big=<value>` (never over its limit) until stopped, at most 5000,
/// each bounded; what each got, with the phase it started in.
struct Traffic {
    phase: Arc<AtomicUsize>,
    /// Calls answered, by the phase they started in.
    answered: Arc<[AtomicUsize; 3]>,
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<(usize, Answer)>>,
}

impl Traffic {
    fn start(client: RateLimitServiceClient<Channel>, value: &str) -> Traffic {
        let phase = Arc::new(AtomicUsize::new(UP));
        let answered: Arc<[AtomicUsize; 3]> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (p, a, s, value) = (
            phase.clone(),
            answered.clone(),
            stop.clone(),
            value.to_string(),
        );
        let task = tokio::spawn(async move {
            let mut client = client;
            let mut seen = Vec::new();
            for _ in 0..5000 {
                if s.load(Ordering::Acquire) {
                    break;
                }
                let phase = p.load(Ordering::Acquire);
                seen.push((phase, call(&mut client, "big", &value).await));
                a[phase].fetch_add(1, Ordering::AcqRel);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            seen
        });
        Traffic {
            phase,
            answered,
            stop,
            task,
        }
    }

    /// Moves the traffic to `phase`, then waits (bounded) until `n` calls started in it
    /// were answered.
    async fn enter(&self, phase: usize, n: usize) {
        self.phase.store(phase, Ordering::Release);
        self.wait(phase, n).await;
    }

    /// Waits (bounded) until `n` calls started in `phase` were answered.
    async fn wait(&self, phase: usize, n: usize) {
        support::eventually(20, &format!("{n} calls in phase {phase}"), || {
            self.answered[phase].load(Ordering::Acquire) >= n
        })
        .await;
    }

    /// Waits (bounded) until `n` more calls started in `phase` were answered.
    async fn more(&self, phase: usize, n: usize) {
        let now = self.answered[phase].load(Ordering::Acquire);
        self.wait(phase, now + n).await;
    }

    async fn stop(self) -> Vec<(usize, Answer)> {
        self.stop.store(true, Ordering::Release);
        tokio::time::timeout(Duration::from_secs(30), self.task)
            .await
            .expect("traffic stops")
            .expect("traffic task")
    }
}

/// The answers to calls started in `phase`, in order.
fn in_phase(seen: &[(usize, Answer)], phase: usize) -> Vec<&Answer> {
    seen.iter()
        .filter(|(p, _)| *p == phase)
        .map(|(_, a)| a)
        .collect()
}

fn summary(seen: &[(usize, Answer)]) -> String {
    let mut counts = [[0usize; 3]; 3];
    for (phase, answer) in seen {
        let kind = match answer {
            Answer::Ok => 0,
            Answer::OverLimit => 1,
            Answer::Unavailable(_) => 2,
        };
        counts[*phase][kind] += 1;
    }
    format!("[ok, over, unavailable] by phase up/down/back: {counts:?}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_processes_sharing_one_redis_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let config = config();
    let a = serve(config.path(), &redis.url(), "error", 5000).await;
    let b = serve(config.path(), &redis.url(), "error", 5000).await;
    // Two connections to each process.
    let clients = vec![
        a.client().await,
        b.client().await,
        a.client().await,
        b.client().await,
    ];
    assert_eq!(concurrent(&clients, 200, "user", "shared").await, 50);
    assert_eq!(concurrent(&clients, 20, "user", "shared").await, 0);
    assert_eq!(
        redis.cli(&["EXISTS", &redis_key("user", "shared")]),
        "1",
        "the bucket lives in Redis"
    );
    assert!(a.terminate().await.success());
    assert!(b.terminate().await.success());
}

/// What the background traffic got through an outage: never OVER_LIMIT; before the kill
/// OK (the call in flight at the kill aside); the first 10 calls while Redis was down all
/// `down` (OK under allow/local, UNAVAILABLE under error); once answered again after the
/// restart, only OK.
fn check_traffic(policy: &str, seen: &[(usize, Answer)]) {
    eprintln!("{policy} policy traffic: {}", summary(seen));
    assert!(
        seen.iter().all(|(_, a)| *a != Answer::OverLimit),
        "{}",
        summary(seen)
    );
    let up = in_phase(seen, UP);
    let in_flight_at_kill = up.len().saturating_sub(1);
    assert!(
        up[..in_flight_at_kill].iter().all(|a| **a == Answer::Ok),
        "{up:?}"
    );
    let down = in_phase(seen, DOWN);
    for answer in &down[..10] {
        match (policy, answer) {
            ("error", Answer::Unavailable(why)) => assert!(why.contains("Redis"), "{why}"),
            ("allow" | "local", Answer::Ok) => {}
            _ => panic!("{policy} policy, Redis down: {answer:?} in {down:?}"),
        }
    }
    let back = in_phase(seen, BACK);
    let first_ok = back
        .iter()
        .position(|a| **a == Answer::Ok)
        .expect("answers after the restart");
    assert!(
        back[first_ok..].iter().all(|a| **a == Answer::Ok),
        "an error after recovering: {back:?}"
    );
    if policy != "error" {
        assert!(
            seen.iter().all(|(_, a)| *a == Answer::Ok),
            "{policy} policy: {}",
            summary(seen)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn error_policy_answers_unavailable_while_redis_is_down_then_recovers() {
    let mut redis = RedisServer::start();
    let config = config();
    let mut process = serve(config.path(), &redis.url(), "error", 1000).await;
    let mut rls = process.client().await;
    assert_eq!(call(&mut rls, "big", "warm").await, Answer::Ok);
    assert_eq!(healthcheck(&process).await, (200, "OK".to_string()));
    health_becomes(&process, ServingStatus::Serving).await;
    let traffic = Traffic::start(process.client().await, "bg");
    traffic.wait(UP, 10).await;

    redis.kill();
    traffic.enter(DOWN, 10).await;
    for i in 0..5 {
        match call(&mut rls, "big", &format!("down{i}")).await {
            Answer::Unavailable(why) => assert!(why.contains("Redis"), "{why}"),
            other => panic!("call {i} while Redis is down: {other:?}"),
        }
    }
    let (status, body) = healthcheck(&process).await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("Redis unreachable"), "{body}");
    assert!(
        process.log().contains("cannot decide"),
        "the outage is logged:\n{}",
        process.log()
    );
    health_becomes(&process, ServingStatus::NotServing).await;

    // Back on the same port, empty; meshlimit reconnects by itself.
    redis.restart();
    traffic.enter(BACK, 0).await;
    support::eventually_async(20, "decisions after the restart", || async {
        call(&mut rls.clone(), "big", "back").await == Answer::Ok
    })
    .await;
    assert_eq!(healthcheck(&process).await, (200, "OK".to_string()));
    health_becomes(&process, ServingStatus::Serving).await;
    assert_eq!(
        concurrent(std::slice::from_ref(&rls), 10, "three", "back").await,
        3
    );
    assert_eq!(redis.cli(&["EXISTS", &redis_key("three", "back")]), "1");
    traffic.more(BACK, 10).await;

    check_traffic("error", &traffic.stop().await);
    assert!(process.is_running());
    assert!(process.terminate().await.success());
}

/// A failure policy that answers while Redis is down.
#[derive(Debug, Clone, Copy)]
enum Answering {
    /// `allow`: OK for everything.
    Allow,
    /// `local`: each replica limits alone.
    Local,
}

impl Answering {
    /// The `--redis-failure` value.
    fn flag(self) -> &'static str {
        match self {
            Answering::Allow => "allow",
            Answering::Local => "local",
        }
    }

    /// How many of 10 calls for a fresh bucket of `three` (3 a day) pass while Redis is
    /// down: all under `allow`; under `local` the replica's own bucket limits them.
    fn passing_while_down(self) -> usize {
        match self {
            Answering::Allow => 10,
            Answering::Local => 3,
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn allow_policy_answers_ok_while_redis_is_down_then_limits_again() {
    answers_while_redis_is_down_then_returns_to_redis(Answering::Allow).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn local_policy_limits_alone_while_redis_is_down_then_returns_to_redis() {
    answers_while_redis_is_down_then_returns_to_redis(Answering::Local).await;
}

/// Redis killed and restarted under traffic, with a policy that answers meanwhile: the
/// policy's answers while it is down, /healthcheck degraded but gRPC health SERVING
/// throughout, and Redis deciding again once back.
async fn answers_while_redis_is_down_then_returns_to_redis(policy: Answering) {
    let mut redis = RedisServer::start();
    let config = config();
    // The drain delay explicitly: the drain's NOT_SERVING reaches the health watchers
    // while the server still serves.
    let mut process = Meshlimit::start_on_redis(
        config.path(),
        &redis.url(),
        policy.flag(),
        1000,
        &["--drain-delay-ms", "1000"],
    )
    .await;
    let mut rls = process.client().await;
    assert_eq!(
        concurrent(std::slice::from_ref(&rls), 5, "three", "before").await,
        3
    );
    let health = HealthWatch::start(&process).await;
    let traffic = Traffic::start(process.client().await, "bg");
    traffic.wait(UP, 10).await;

    redis.kill();
    traffic.enter(DOWN, 10).await;
    assert_eq!(
        concurrent(std::slice::from_ref(&rls), 10, "three", "down").await,
        policy.passing_while_down(),
        "{policy:?}"
    );
    // A bucket Redis said was over stays over: the over-limit cache answers, not the policy.
    assert_eq!(call(&mut rls, "three", "before").await, Answer::OverLimit);
    degraded(&process).await;

    redis.restart();
    traffic.enter(BACK, 0).await;
    healthy_again(&process).await;
    // What was spent while Redis was down (nothing under allow, the replica's own bucket
    // under local) is not in the restarted Redis, which decides again.
    assert_eq!(
        concurrent(std::slice::from_ref(&rls), 10, "three", "down").await,
        3
    );
    assert_eq!(redis.cli(&["EXISTS", &redis_key("three", "down")]), "1");
    traffic.more(BACK, 10).await;

    check_traffic(policy.flag(), &traffic.stop().await);
    assert!(process.is_running());
    health.drain_is_the_first_change(&process).await;
    assert!(process.wait().await.success());
}

/// Issue 9, defect 3, end to end: with Redis out of memory (`noeviction`), every call is
/// UNAVAILABLE saying why, the log says it once (rate-limited, not per call),
/// `/healthcheck` answers 500 with the reason and gRPC health NOT_SERVING, steadily; once
/// Redis takes writes again, all is well without a restart. Before the fix: nothing
/// logged, `/healthcheck` OK, gRPC health SERVING.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_out_of_memory_is_logged_and_shown_in_health() {
    let redis = RedisServer::start_with_little_memory();
    let config = config();
    let process = serve(config.path(), &redis.url(), "error", 1000).await;
    let mut rls = process.client().await;
    let _full = redis.fill_memory();
    for i in 0..200 {
        match call(&mut rls, "big", &format!("oom{i}")).await {
            Answer::Unavailable(why) => assert!(why.contains("OOM"), "{why}"),
            other => panic!("call {i} with Redis out of memory: {other:?}"),
        }
    }
    health_becomes(&process, ServingStatus::NotServing).await;
    // Steady while the background checks write and fail (one a second).
    for _ in 0..3 {
        let (status, body) = healthcheck(&process).await;
        assert_eq!(status, 500, "{body}");
        assert!(body.contains("OOM"), "{body}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    for name in HEALTH_NAMES {
        assert_eq!(
            health_status(&process, name).await,
            ServingStatus::NotServing as i32,
            "{name:?}"
        );
    }
    let log = process.log();
    let logged: Vec<&str> = log.lines().filter(|l| l.contains("OOM")).collect();
    assert_eq!(
        logged.len(),
        1,
        "one rate-limited line, not one per call:\n{log}"
    );
    assert!(logged[0].contains("cannot decide"), "{log}");

    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    support::eventually_async(20, "decisions once Redis takes writes", || async {
        call(&mut rls.clone(), "big", "after").await == Answer::Ok
    })
    .await;
    healthy_again(&process).await;
    health_becomes(&process, ServingStatus::Serving).await;
    assert!(process.log().contains("Redis decides again"));
    assert!(process.terminate().await.success());
}

/// Issue 9, defect 9, end to end: while one Cluster shard (its master and its replica)
/// is dead, `/healthcheck` answers 200 `OK (degraded: 1 of 3 …)` and gRPC health stays
/// SERVING, steadily: the other masters' domains are decided. Once the master is back,
/// plain OK, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dead_cluster_shard_degrades_health_but_keeps_serving() {
    let mut cluster = RedisCluster::start_with_replicas(3, 1);
    let config = config();
    let process = serve(config.path(), &cluster.url(), "error", 500).await;
    let mut rls = process.client().await;
    assert_eq!(call(&mut rls, "big", "warm").await, Answer::Ok);
    healthy_again(&process).await;

    let master = cluster.masters()[0];
    let port = cluster.nodes[master].port().to_string();
    let replica = (0..cluster.nodes.len())
        .find(|&i| {
            let info = cluster.nodes[i].cli(&["INFO", "replication"]);
            info.lines()
                .any(|l| l.trim() == format!("master_port:{port}"))
        })
        .expect("the master's replica");
    cluster.nodes[replica].kill();
    cluster.nodes[master].kill();
    support::eventually_async(20, "/healthcheck degraded", || async {
        healthcheck(&process).await.1.starts_with("OK (degraded:")
    })
    .await;
    for _ in 0..3 {
        let (status, body) = healthcheck(&process).await;
        assert_eq!(status, 200, "{body}");
        assert!(
            body.starts_with("OK (degraded: 1 of 3 Redis Cluster masters cannot decide"),
            "{body}"
        );
        assert!(body.contains(&port), "{body}");
        for name in HEALTH_NAMES {
            assert_eq!(
                health_status(&process, name).await,
                ServingStatus::Serving as i32,
                "{name:?}"
            );
        }
        tokio::time::sleep(Duration::from_millis(400)).await;
    }

    cluster.nodes[master].restart();
    healthy_again(&process).await;
    assert!(
        process.log().contains("Redis decides again"),
        "{}",
        process.log()
    );
    assert!(process.terminate().await.success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_urls_authenticate_and_a_wrong_password_is_unavailable() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let config = config();
    let url = format!("redis://:s3cret@{}", redis.addr());
    let good = serve(config.path(), &url, "error", 5000).await;
    assert_eq!(
        concurrent(&[good.client().await], 5, "three", "pw").await,
        3
    );
    assert_eq!(redis.cli(&["EXISTS", &redis_key("three", "pw")]), "1");

    let url = format!("redis://:wrong-pw@{}", redis.addr());
    let mut bad = serve(config.path(), &url, "error", 1000).await;
    let mut rls = bad.client().await;
    for i in 0..3 {
        match call(&mut rls, "three", &format!("bad{i}")).await {
            Answer::Unavailable(why) => {
                assert!(why.contains("Redis"), "{why}");
                assert!(!why.contains("wrong-pw"), "the password leaked: {why}");
            }
            other => panic!("with a wrong password: {other:?}"),
        }
    }
    let (status, body) = healthcheck(&bad).await;
    assert_eq!(status, 500, "{body}");
    assert!(!body.contains("wrong-pw"), "the password leaked: {body}");
    health_becomes(&bad, ServingStatus::NotServing).await;
    assert!(bad.is_running());
    assert!(
        !bad.log().contains("wrong-pw"),
        "the password leaked:\n{}",
        bad.log()
    );
    assert!(
        !good.log().contains("s3cret"),
        "the password leaked:\n{}",
        good.log()
    );
    assert!(bad.terminate().await.success());
    assert!(good.terminate().await.success());
}

/// Health tells the truth from the start: an unreachable Redis shows before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_reports_an_unreachable_redis_before_any_request() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    redis.kill();
    let config = config();
    let process = serve(config.path(), &url, "error", 500).await;
    support::eventually_async(10, "/healthcheck 500 with no traffic", || async {
        healthcheck(&process).await.0 == 500
    })
    .await;
    health_becomes(&process, ServingStatus::NotServing).await;
    redis.restart();
    support::eventually_async(10, "/healthcheck 200 once Redis is up", || async {
        healthcheck(&process).await == (200, "OK".to_string())
    })
    .await;
    health_becomes(&process, ServingStatus::Serving).await;
    assert!(process.terminate().await.success());
}

#[tokio::test]
async fn unix_socket_urls_work() {
    let redis = RedisServer::start_unix();
    let socket = redis.unix_socket().expect("a unix socket");
    let config = config();
    let url = format!("unix://{}", socket.display());
    let process = serve(config.path(), &url, "error", 5000).await;
    assert_eq!(
        concurrent(&[process.client().await], 5, "three", "unix").await,
        3
    );
    assert_eq!(redis.cli(&["EXISTS", &redis_key("three", "unix")]), "1");
    assert!(process.terminate().await.success());
}

#[tokio::test]
async fn bad_redis_settings_stop_serve_at_startup() {
    let config = config();
    let config = config.path().display().to_string();
    let serve = |url: &'static str| {
        let config = config.clone();
        async move {
            support::process::run_serve(&config, &["--store", "redis", "--redis-url", url]).await
        }
    };
    for (url, why) in [
        ("nope://x", "unknown scheme"),
        ("127.0.0.1:6379", "no scheme"),
        ("redis+cluster://", "no cluster nodes"),
        ("redis+sentinel://127.0.0.1:26379", "master"),
        ("nope://user:hunter2@x", "unknown scheme"),
    ] {
        let out = serve(url).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{url}: {:?}", out.status);
        assert!(stderr.contains("invalid Redis URL"), "{url}: {stderr}");
        assert!(stderr.contains(why), "{url}: {stderr}");
        assert!(
            !stderr.contains("hunter2"),
            "{url}: the password leaked: {stderr}"
        );
    }

    let out = support::process::run_serve(&config, &["--store", "redis"]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a usage error: {stderr}");
    assert!(stderr.contains("--redis-url"), "{stderr}");
}

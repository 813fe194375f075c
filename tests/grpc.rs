//! End to end over gRPC on loopback: a real tonic client against `app::serve`, and the
//! `meshlimit` binary itself.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use meshlimit::rules::Algorithm;
use support::{TestServer, descriptor};
use tonic::transport::Channel;

const TRADING: &str = include_str!("../config/trading.yaml");

fn request(domain: &str, descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors,
        hits_addend: 0,
    }
}

async fn client(server: &TestServer) -> RateLimitServiceClient<Channel> {
    RateLimitServiceClient::connect(format!("http://{}", server.grpc))
        .await
        .expect("connect to meshlimit")
}

async fn call(
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> RateLimitResponse {
    client
        .should_rate_limit(req)
        .await
        .expect("ShouldRateLimit")
        .into_inner()
}

fn user_method(user: &str, method: &str) -> RateLimitDescriptor {
    descriptor(&[("user_id", user), ("method", method)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trading_limits_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trading.yaml"), TRADING).unwrap();
    let server = TestServer::start(dir.path(), Algorithm::TokenBucket).await;
    let mut rls = client(&server).await;

    // backtesting.run: 5/min, burst 1 — one passes, the next is told to come back in 12 s.
    let run = || {
        request(
            "trading",
            vec![user_method("alice", "/backtesting.BacktestingService/Run")],
        )
    };
    let first = call(&mut rls, run()).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let status = &first.statuses[0];
    let limit = status.current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit, limit.name.as_str()),
        (5, Unit::Minute as i32, "backtesting_run")
    );
    assert_eq!(status.limit_remaining, 0);
    let second = call(&mut rls, run()).await;
    assert_eq!(second.overall_code, Code::OverLimit as i32);
    assert_eq!(second.statuses[0].code, Code::OverLimit as i32);
    let retry = second.statuses[0].duration_until_reset.unwrap();
    assert!(
        retry.seconds <= 12 && (retry.seconds > 0 || retry.nanos > 0),
        "{retry:?}"
    );

    // Another user, and another method of the same user, have their own buckets.
    let bob = call(
        &mut rls,
        request(
            "trading",
            vec![user_method("bob", "/backtesting.BacktestingService/Run")],
        ),
    )
    .await;
    assert_eq!(bob.overall_code, Code::Ok as i32);
    let other = call(
        &mut rls,
        request("trading", vec![user_method("alice", "/market.Data/Quotes")]),
    )
    .await;
    assert_eq!(other.overall_code, Code::Ok as i32);
    let limit = other.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.name.as_str()),
        (50, "default_method")
    );
    assert_eq!(other.statuses[0].limit_remaining, 4, "burst 5, one taken");

    // submit_order: burst 10, refilled at 100/s. Ten calls at once all pass; the eleventh
    // is over unless a token came back meanwhile, and then it says when the next one will.
    let order = || {
        request(
            "trading",
            vec![user_method("carol", "/trading.TradingService/SubmitOrder")],
        )
    };
    let burst = futures_join_all((0..10).map(|_| {
        let mut rls = rls.clone();
        let req = order();
        async move { call(&mut rls, req).await }
    }))
    .await;
    assert!(burst.iter().all(|r| r.overall_code == Code::Ok as i32));
    let limit = burst[0].statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.name.as_str()),
        (100, "submit_order")
    );
    let next = call(&mut rls, order()).await;
    if next.overall_code == Code::OverLimit as i32 {
        let wait = next.statuses[0].duration_until_reset.unwrap();
        assert!(
            wait.seconds == 0 && wait.nanos > 0 && wait.nanos <= 10_000_000,
            "{wait:?}"
        );
    } else {
        // A slow machine let a token refill (one per 10 ms): then none is left over.
        assert!(next.statuses[0].limit_remaining < 10);
    }

    // Unknown domain: OK, no limit.
    let unknown = call(&mut rls, request("nope", vec![user_method("alice", "x")])).await;
    assert_eq!(unknown.overall_code, Code::Ok as i32);
    assert!(unknown.statuses[0].current_limit.is_none());
    server.stop().await;
}

#[tokio::test]
async fn malformed_requests_get_invalid_argument() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trading.yaml"), TRADING).unwrap();
    let server = TestServer::start(dir.path(), Algorithm::TokenBucket).await;
    let mut rls = client(&server).await;

    let empty_domain = rls
        .should_rate_limit(request("", vec![user_method("a", "b")]))
        .await
        .unwrap_err();
    assert_eq!(empty_domain.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        empty_domain.message(),
        "rate limit domain must not be empty"
    );

    let none = rls
        .should_rate_limit(request("trading", vec![]))
        .await
        .unwrap_err();
    assert_eq!(none.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        none.message(),
        "rate limit descriptor list must not be empty"
    );

    for unit in [0, 42, -1] {
        let mut d = user_method("a", "b");
        d.limit = Some(RateLimitOverride {
            requests_per_unit: 5,
            unit,
        });
        let bad = rls
            .should_rate_limit(request("trading", vec![d]))
            .await
            .unwrap_err();
        assert_eq!(bad.code(), tonic::Code::InvalidArgument, "unit {unit}");
    }

    // The server is still answering after all that.
    let ok = call(&mut rls, request("trading", vec![user_method("a", "b")])).await;
    assert_eq!(ok.overall_code, Code::Ok as i32);
    server.stop().await;
}

#[tokio::test]
async fn overrides_and_hits_addend_over_grpc() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("trading.yaml"), TRADING).unwrap();
    let server = TestServer::start(dir.path(), Algorithm::TokenBucket).await;
    let mut rls = client(&server).await;

    let mut d = user_method("dave", "/x");
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 3,
        unit: Unit::Hour as i32,
    });
    let mut req = request("trading", vec![d]);
    req.hits_addend = 2;
    let r = call(&mut rls, req.clone()).await;
    let limit = r.statuses[0].current_limit.as_ref().unwrap();
    assert_eq!(
        (limit.requests_per_unit, limit.unit),
        (3, Unit::Hour as i32)
    );
    assert_eq!(r.statuses[0].limit_remaining, 1);
    let r = call(&mut rls, req).await;
    assert_eq!(r.overall_code, Code::OverLimit as i32);
    assert_eq!(
        r.statuses[0].limit_remaining, 1,
        "a denied request takes nothing"
    );

    // Descriptor-level hits_addend 0 checks without consuming.
    let mut check = user_method("erin", "/backtesting.BacktestingService/Run");
    check.hits_addend = Some(envoy_types::pb::google::protobuf::UInt64Value { value: 0 });
    for _ in 0..3 {
        let r = call(&mut rls, request("trading", vec![check.clone()])).await;
        assert_eq!(r.overall_code, Code::Ok as i32);
    }
    server.stop().await;
}

#[tokio::test]
async fn health_endpoints_and_a_live_edit() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("trading.yaml");
    std::fs::write(&file, TRADING).unwrap();
    let server = TestServer::start(dir.path(), Algorithm::TokenBucket).await;

    assert_eq!(
        support::http_get(server.http, "/healthcheck").await,
        (200, "OK".to_string())
    );
    let channel = Channel::from_shared(format!("http://{}", server.grpc))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel);
    for service in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        let answer = health
            .check(tonic_health::pb::HealthCheckRequest {
                service: service.to_string(),
            })
            .await
            .unwrap()
            .into_inner();
        assert_eq!(
            answer.status,
            tonic_health::pb::health_check_response::ServingStatus::Serving as i32,
            "{service:?}"
        );
    }

    // Raise the backtesting limit in the file: visible through gRPC without a restart.
    let mut rls = client(&server).await;
    let run = || {
        request(
            "trading",
            vec![user_method("zed", "/backtesting.BacktestingService/Run")],
        )
    };
    call(&mut rls, run()).await;
    assert_eq!(
        call(&mut rls, run()).await.overall_code,
        Code::OverLimit as i32
    );
    std::fs::write(
        &file,
        TRADING.replace(
            "requests_per_unit: 5\n          burst: 1",
            "requests_per_unit: 5\n          burst: 3",
        ),
    )
    .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        if call(&mut rls, run()).await.overall_code == Code::Ok as i32 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "edit never became visible"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    server.stop().await;
}

/// The binary: flags, environment variables, health, SIGTERM.
#[tokio::test]
async fn the_binary_serves_from_flags_and_environment() {
    let exe = env!("CARGO_BIN_EXE_meshlimit");
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/config");

    let grpc = support::free_port();
    let http = support::free_port();
    let mut child = tokio::process::Command::new(exe)
        .arg("serve")
        .env("MESHLIMIT_CONFIG", config)
        .env("MESHLIMIT_GRPC_ADDR", format!("127.0.0.1:{grpc}"))
        .args(["--http-addr", &format!("127.0.0.1:{http}")])
        .args(["--algorithm", "fixed-window"])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let addr = format!("http://127.0.0.1:{grpc}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let mut rls = loop {
        if let Ok(c) = RateLimitServiceClient::connect(addr.clone()).await {
            break c;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "binary did not start"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // dashboard auth: 10/min in a fixed window (--algorithm fixed-window): 10 pass.
    let auth = || {
        request(
            "dashboard",
            vec![descriptor(&[("user_id", "u"), ("tier", "auth")])],
        )
    };
    let mut codes = Vec::new();
    for _ in 0..11 {
        codes.push(call(&mut rls, auth()).await.overall_code);
    }
    // A minute boundary could fall inside the loop; then the count restarts.
    let over = codes
        .iter()
        .filter(|&&c| c == Code::OverLimit as i32)
        .count();
    assert!(over <= 1, "{codes:?}");
    let http_addr: std::net::SocketAddr = format!("127.0.0.1:{http}").parse().unwrap();
    assert_eq!(support::http_get(http_addr, "/healthcheck").await.0, 200);

    let pid = child.id().unwrap().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .unwrap()
        .unwrap();
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
}

/// Runs futures concurrently and collects their outputs in order.
async fn futures_join_all<F>(futures: impl IntoIterator<Item = F>) -> Vec<F::Output>
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    let handles: Vec<_> = futures.into_iter().map(tokio::spawn).collect();
    let mut out = Vec::with_capacity(handles.len());
    for h in handles {
        out.push(h.await.expect("task"));
    }
    out
}

/// Many concurrent calls over several connections against one limit: exactly the limit
/// passes (a fixed window of 25/hour and a token bucket of burst 25; no refill can happen
/// within the test's bounds for either).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_pass_exactly_the_limit() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("c.yaml"),
        "domain: c\ndescriptors:\n  - key: tb\n    rate_limit: {unit: hour, requests_per_unit: 25}\n  - key: fw\n    rate_limit: {unit: hour, requests_per_unit: 25, algorithm: fixed_window}\n",
    )
    .unwrap();
    let server = TestServer::start(dir.path(), Algorithm::TokenBucket).await;
    for key in ["tb", "fw"] {
        let mut tasks = Vec::new();
        for _connection in 0..4 {
            let rls = client(&server).await;
            for _ in 0..50 {
                let mut rls = rls.clone();
                // The same value everywhere: a value-less rule has one bucket per value.
                let req = request("c", vec![descriptor(&[(key, "same")])]);
                tasks.push(tokio::spawn(async move {
                    call(&mut rls, req).await.overall_code
                }));
            }
        }
        let mut passed = 0;
        for t in tasks {
            passed += usize::from(t.await.unwrap() == Code::Ok as i32);
        }
        assert_eq!(passed, 25, "{key}");
    }
    server.stop().await;
}

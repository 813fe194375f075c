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
use support::process::Meshlimit;
use support::{TestServer, descriptor, http_get};
use tonic::transport::Channel;

const TRADING: &str = include_str!("../config/trading.yaml");

/// The repository's trading.yaml with every unit a day: the same limits and bursts, but
/// no token can come back while a test runs, so tokens are counted exactly.
fn trading_per_day() -> String {
    let per_day = TRADING
        .replace("unit: second", "unit: day")
        .replace("unit: minute", "unit: day");
    assert!(!per_day.contains("unit: second") && !per_day.contains("unit: minute"));
    assert_ne!(
        per_day, TRADING,
        "trading.yaml has no second or minute limits any more"
    );
    per_day
}

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
    std::fs::write(dir.path().join("trading.yaml"), trading_per_day()).unwrap();
    let server = TestServer::start(dir.path(), Algorithm::TokenBucket).await;
    let mut rls = client(&server).await;

    // backtesting.run: 5/day, burst 1 — one passes, the next is told to come back when
    // the next token does, a fifth of a day after the first call.
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
        (5, Unit::Day as i32, "backtesting_run")
    );
    assert_eq!(status.limit_remaining, 0);
    let second = call(&mut rls, run()).await;
    assert_eq!(second.overall_code, Code::OverLimit as i32);
    assert_eq!(second.statuses[0].code, Code::OverLimit as i32);
    let retry = second.statuses[0].duration_until_reset.unwrap();
    // 17,280 s less the time since the first call (bounded by an hour, not measured).
    assert!(
        (17_280 - 3_600..=17_280).contains(&retry.seconds),
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

    // submit_order: burst 10, refilled at 100/day. Ten calls at once all pass; the
    // eleventh is over, and says the next token comes within 864 s.
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
    assert_eq!(next.overall_code, Code::OverLimit as i32);
    assert_eq!(next.statuses[0].limit_remaining, 0);
    let wait = next.statuses[0].duration_until_reset.unwrap();
    assert!(
        wait.seconds <= 864 && (wait.seconds > 0 || wait.nanos > 0),
        "{wait:?}"
    );

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
    std::fs::write(&file, trading_per_day()).unwrap();
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
    let mut health = tonic_health::pb::health_client::HealthClient::new(channel.clone());
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

    // A service the port does not serve, and a method RateLimitService does not have, are
    // UNIMPLEMENTED; the health service's own methods answer on the same port (above).
    let mut raw = tonic::client::Grpc::new(channel.clone());
    for path in [
        "/no.such.Service/Call",
        "/envoy.service.ratelimit.v3.RateLimitService/NoSuchMethod",
        "/grpc.health.v1.Health/NoSuchMethod",
    ] {
        raw.ready().await.unwrap();
        let codec = tonic_prost::ProstCodec::<RateLimitRequest, RateLimitResponse>::default();
        let refused = raw
            .unary(
                tonic::Request::new(request("trading", vec![])),
                http::uri::PathAndQuery::from_static(path),
                codec,
            )
            .await
            .expect_err(path);
        assert_eq!(refused.code(), tonic::Code::Unimplemented, "{path}");
    }

    // Raise the backtesting burst in the file: visible through gRPC without a restart (and
    // only through the edit: at 5 a day, no token comes back meanwhile).
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
    let edited = trading_per_day().replace(
        "requests_per_unit: 5\n          burst: 1",
        "requests_per_unit: 5\n          burst: 3",
    );
    assert_ne!(edited, trading_per_day(), "the backtesting rule moved");
    std::fs::write(&file, edited).unwrap();
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

/// Limits for the binary: a year each, so nothing refills and no window ends while a test
/// runs, and no rule names its algorithm, so the default is in force.
const BINARY_LIMITS: &str = "\
domain: bin
descriptors:
  - key: scarce
    rate_limit: {unit: year, requests_per_unit: 1}
  - key: counted
    rate_limit: {unit: year, requests_per_unit: 5}
";

/// The binary: configured by flags, then by environment variables, it enforces the
/// config's limits with `--algorithm fixed-window` (`MESHLIMIT_ALGORITHM`) in force,
/// answers health checks and stops cleanly on SIGTERM.
#[tokio::test]
async fn the_binary_serves_from_flags_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("bin.yaml"), BINARY_LIMITS).unwrap();
    let config = dir.path().display().to_string();

    let from_flags = Meshlimit::start_with(
        &[
            "serve",
            "--config",
            &config,
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--algorithm",
            "fixed-window",
        ],
        &[],
    )
    .await;
    fixed_window_limits_are_enforced(&from_flags).await;
    let status = from_flags.terminate().await;
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");

    let from_env = Meshlimit::start_with(
        &["serve"],
        &[
            ("MESHLIMIT_CONFIG", &config),
            ("MESHLIMIT_GRPC_ADDR", "127.0.0.1:0"),
            ("MESHLIMIT_HTTP_ADDR", "127.0.0.1:0"),
            ("MESHLIMIT_ALGORITHM", "fixed-window"),
        ],
    )
    .await;
    fixed_window_limits_are_enforced(&from_env).await;
    let status = from_env.terminate().await;
    assert!(status.success(), "SIGTERM is a clean stop: {status:?}");
}

/// `ml` serves [`BINARY_LIMITS`] (fresh buckets) with fixed windows as the default.
async fn fixed_window_limits_are_enforced(ml: &Meshlimit) {
    assert_eq!(http_get(ml.http, "/healthcheck").await, (200, "OK".into()));
    let rlconfig = http_get(ml.http, "/rlconfig").await.1;
    for rule in ["bin.scarce: unit=YEAR", "bin.counted: unit=YEAR"] {
        let line = rlconfig
            .lines()
            .find(|l| l.starts_with(rule))
            .unwrap_or_else(|| panic!("no {rule} in:\n{rlconfig}"));
        assert!(line.contains("algorithm: fixed_window"), "{line}");
    }

    let ask = |descriptors: &[&[(&str, &str)]]| ml.ask(support::rls_request("bin", descriptors));
    let first = ask(&[&[("scarce", "a")]]).await;
    assert_eq!(first.overall_code, Code::Ok as i32);
    let second = ask(&[&[("scarce", "a")]]).await;
    assert_eq!(
        second.overall_code,
        Code::OverLimit as i32,
        "the limit of 1"
    );

    // Denied by `scarce`, the request still counts against `counted`: a fixed window
    // counts every hit, where a token bucket would take nothing from a denied request
    // (and then leave 4 below, not 3).
    let denied = ask(&[&[("counted", "a")], &[("scarce", "a")]]).await;
    assert_eq!(denied.overall_code, Code::OverLimit as i32);
    let after = ask(&[&[("counted", "a")]]).await;
    assert_eq!(after.overall_code, Code::Ok as i32);
    assert_eq!(after.statuses[0].limit_remaining, 3, "{after:?}");
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

/// The parts of a `FileDescriptorProto` the reflection test reads.
#[derive(Clone, PartialEq, prost::Message)]
struct FileNames {
    #[prost(string, optional, tag = "1")]
    name: Option<String>,
    #[prost(string, optional, tag = "2")]
    package: Option<String>,
}

/// gRPC reflection, in both versions clients speak: the port's services listed, and the
/// file defining a service or a message found by its name (what `grpcurl list` and
/// `grpcurl describe` ask), with no proto file on the client's side.
#[tokio::test]
async fn reflection_lists_and_describes_the_services() {
    use tonic_reflection::pb::v1::ServerReflectionRequest;
    use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
    use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
    use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
    use tonic_reflection::pb::v1alpha::ServerReflectionRequest as AlphaReflectionRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_client::ServerReflectionClient as AlphaClient;
    use tonic_reflection::pb::v1alpha::server_reflection_request::MessageRequest as AlphaRequest;
    use tonic_reflection::pb::v1alpha::server_reflection_response::MessageResponse as AlphaResponse;

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("trading.yaml");
    std::fs::write(&config, TRADING).unwrap();
    let server = TestServer::start(&config, Algorithm::TokenBucket).await;
    let url = format!("http://{}", server.grpc);
    let ours = [
        "envoy.service.rate_limit_quota.v3.RateLimitQuotaService",
        "envoy.service.ratelimit.v3.RateLimitService",
        "grpc.health.v1.Health",
    ];

    // v1: one stream, the questions asked in turn.
    let channel = Channel::from_shared(url).unwrap().connect().await.unwrap();
    let mut v1 = ServerReflectionClient::new(channel.clone());
    let ask = |request: MessageRequest| ServerReflectionRequest {
        host: String::new(),
        message_request: Some(request),
    };
    let questions = vec![
        ask(MessageRequest::ListServices(String::new())),
        ask(MessageRequest::FileContainingSymbol(
            "envoy.service.ratelimit.v3.RateLimitService".into(),
        )),
        ask(MessageRequest::FileContainingSymbol(
            "envoy.service.ratelimit.v3.RateLimitRequest".into(),
        )),
        ask(MessageRequest::FileContainingSymbol(
            "grpc.health.v1.Health".into(),
        )),
    ];
    let mut answers = v1
        .server_reflection_info(tokio_stream_iter(questions))
        .await
        .unwrap()
        .into_inner();
    let mut replies = Vec::new();
    while let Some(reply) = answers.message().await.unwrap() {
        replies.push(reply.message_response.expect("an answer"));
    }
    let Some(MessageResponse::ListServicesResponse(list)) = replies.first() else {
        panic!("{replies:?}");
    };
    let mut names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    let mut expected = ours.to_vec();
    expected.push("grpc.reflection.v1.ServerReflection");
    expected.sort_unstable();
    assert_eq!(names, expected);
    let files = |reply: &MessageResponse| match reply {
        MessageResponse::FileDescriptorResponse(files) => files
            .file_descriptor_proto
            .iter()
            .map(|bytes| {
                let file = <FileNames as prost::Message>::decode(bytes.as_slice()).unwrap();
                (
                    file.name.unwrap_or_default(),
                    file.package.unwrap_or_default(),
                )
            })
            .collect::<Vec<_>>(),
        other => panic!("not a file: {other:?}"),
    };
    for reply in &replies[1..3] {
        let found = files(reply);
        assert!(
            found.contains(&(
                "envoy/service/ratelimit/v3/rls.proto".into(),
                "envoy.service.ratelimit.v3".into()
            )),
            "{found:?}"
        );
    }
    assert!(
        files(&replies[3])
            .iter()
            .any(|(_, p)| p == "grpc.health.v1")
    );

    // v1alpha, which grpcurl before 1.9 speaks.
    let mut alpha = AlphaClient::new(channel);
    let question = AlphaReflectionRequest {
        host: String::new(),
        message_request: Some(AlphaRequest::ListServices(String::new())),
    };
    let mut answers = alpha
        .server_reflection_info(tokio_stream_iter(vec![question]))
        .await
        .unwrap()
        .into_inner();
    let Some(AlphaResponse::ListServicesResponse(list)) = answers
        .message()
        .await
        .unwrap()
        .and_then(|r| r.message_response)
    else {
        panic!("no list");
    };
    let names: Vec<&str> = list.service.iter().map(|s| s.name.as_str()).collect();
    for name in ours {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
}

/// `items` as a request stream.
fn tokio_stream_iter<T: Send + 'static>(
    items: Vec<T>,
) -> impl tonic::codegen::tokio_stream::Stream<Item = T> {
    tonic::codegen::tokio_stream::iter(items)
}

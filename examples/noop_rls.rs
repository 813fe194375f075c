//! Baseline for the gRPC loopback benchmark (`benches/grpc_h2load.sh`): an
//! `envoy.service.ratelimit.v3.RateLimitService` that does no work.
//!
//! Every `ShouldRateLimit` is answered `overall_code: OK` with one `OK` status per
//! request descriptor: no config, no matching, no buckets, no clock. The transport is
//! meshlimit's own, set up as `src/app/serve.rs` sets up its gRPC port: [`meshlimit::net::serve`]
//! (TCP_NODELAY, HTTP/2 only, the default idle timeout and connection cap) on the default
//! multi-threaded tokio runtime, with meshlimit's allocator, and the same three services
//! behind the same routes ([`GrpcRoutes`]; health and quota are there to be routed past,
//! the quota stream answers `UNIMPLEMENTED`). By default `ShouldRateLimit` is a standard
//! tonic unary service (prost, `Grpc::unary`), which meshlimit's own gRPC edge undercuts.
//!
//! With `direct` after the address, `ShouldRateLimit` is answered as meshlimit answers
//! its common shape ([`meshlimit::grpc::unary`]): the message read from the call's one DATA
//! frame and decoded by prost, the answer encoded by prost into one DATA frame, no
//! `Grpc::unary`. That baseline has meshlimit's own gRPC edge, so the difference to it is
//! the service layer's cost alone. It takes only that shape (anything else is answered
//! `INTERNAL`), which is all the bench sends.
//!
//! ```text
//! cargo run --release --example noop_rls -- 127.0.0.1:18081 [direct]
//! ```

use std::convert::Infallible;
use std::net::SocketAddr;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::body::Incoming;
use prost::Message;
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;

use envoy_types::pb::envoy::service::rate_limit_quota::v3::rate_limit_quota_service_server::{
    RateLimitQuotaService, RateLimitQuotaServiceServer,
};
use envoy_types::pb::envoy::service::rate_limit_quota::v3::{
    RateLimitQuotaResponse, RateLimitQuotaUsageReports,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use meshlimit::defaults;
use meshlimit::grpc::{GrpcRoutes, reflection_servers, unary};
use meshlimit::net::{self, ConnectionOptions, Connections, HttpService};
use tonic::{Request, Response, Status, Streaming};

/// meshlimit's allocator (see src/main.rs), so that the two servers differ only in work.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Answers OK to everything.
#[derive(Debug, Default)]
struct Noop;

#[tonic::async_trait]
impl RateLimitService for Noop {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        Ok(Response::new(all_ok(request.get_ref())))
    }
}

/// The no-op answer to `request`: OK, with one OK status per descriptor.
fn all_ok(request: &RateLimitRequest) -> RateLimitResponse {
    let ok = DescriptorStatus {
        code: Code::Ok as i32,
        ..DescriptorStatus::default()
    };
    RateLimitResponse {
        overall_code: Code::Ok as i32,
        statuses: vec![ok; request.descriptors.len()],
        ..RateLimitResponse::default()
    }
}

/// The same answers, on meshlimit's gRPC edge (`direct`).
#[derive(Debug, Clone, Copy)]
struct DirectNoop;

impl NamedService for DirectNoop {
    const NAME: &'static str = "envoy.service.ratelimit.v3.RateLimitService";
}

impl tower_service::Service<http::Request<Incoming>> for DirectNoop {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<http::Response<Body>, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<Incoming>) -> Self::Future {
        if request.uri().path() != "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit" {
            return Box::pin(async { Ok(Status::unimplemented("").into_http()) });
        }
        Box::pin(async move {
            let mut body = request.into_body();
            let Some(message) = unary::first_frame(&mut body).await.1 else {
                let status =
                    Status::internal("the direct no-op server takes one message in one frame");
                return Ok(status.into_http());
            };
            let answer = match RateLimitRequest::decode(message) {
                Ok(request) => all_ok(&request),
                Err(e) => return Ok(Status::invalid_argument(e.to_string()).into_http()),
            };
            Ok(unary::one_message_response(|bytes| {
                answer.encode(bytes).expect("a BytesMut grows");
            }))
        })
    }
}

/// Has no quota service: there so that requests are routed past a third service, as in
/// meshlimit.
#[derive(Debug, Default)]
struct NoQuota;

#[tonic::async_trait]
impl RateLimitQuotaService for NoQuota {
    type StreamRateLimitQuotasStream =
        futures_util::stream::Empty<Result<RateLimitQuotaResponse, Status>>;

    async fn stream_rate_limit_quotas(
        &self,
        _request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Self::StreamRateLimitQuotasStream>, Status> {
        Err(Status::unimplemented(
            "the no-op server has no quota service",
        ))
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:18081")
        .parse()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("noop_rls listening on {}", listener.local_addr()?);
    let direct = std::env::args().nth(2).as_deref() == Some("direct");
    let (_reporter, health) = tonic_health::server::health_reporter();
    let quota = RateLimitQuotaServiceServer::new(NoQuota);
    if direct {
        let routes = GrpcRoutes::new(DirectNoop, health, quota, reflection_servers());
        serve(listener, routes).await;
    } else {
        let routes = GrpcRoutes::new(
            RateLimitServiceServer::new(Noop),
            health,
            quota,
            reflection_servers(),
        );
        serve(listener, routes).await;
    }
    Ok(())
}

/// Serves `routes` on `listener` as meshlimit serves its gRPC port, until killed (the bench
/// script stops it).
async fn serve(listener: tokio::net::TcpListener, routes: impl HttpService<Body>) {
    let options = ConnectionOptions {
        http2_only: true,
        ..ConnectionOptions::new(defaults::IDLE_TIMEOUT)
    };
    let connections = Connections::new(net::descriptors::default_max_connections());
    net::serve(
        listener,
        routes,
        options,
        connections,
        std::future::pending(),
        Duration::from_secs(1),
    )
    .await;
}

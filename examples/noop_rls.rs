//! Baseline for the gRPC loopback benchmark (`benches/grpc_h2load.sh`): an
//! `envoy.service.ratelimit.v3.RateLimitService` that does no work.
//!
//! Every `ShouldRateLimit` is answered `overall_code: OK` with one `OK` status per
//! request descriptor: no config, no matching, no buckets, no clock. The transport is
//! meshlimit's own, set up as `src/app/serve.rs` sets up its gRPC port: [`meshlimit::net::serve`]
//! (TCP_NODELAY, HTTP/2 only, the default idle timeout and connection cap) on the default
//! multi-threaded tokio runtime, with meshlimit's allocator, and the same three services
//! behind the same routes ([`GrpcRoutes`]; health and quota are there to be routed past,
//! the quota stream answers `UNIMPLEMENTED`), so the difference between the two servers
//! under the same load is the cost of meshlimit's own work.
//!
//! ```text
//! cargo run --release --example noop_rls -- 127.0.0.1:18081
//! ```

use std::net::SocketAddr;
use std::time::Duration;

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
use meshlimit::grpc::GrpcRoutes;
use meshlimit::net::{self, ConnectionOptions, Connections};
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
        let ok = DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![ok; request.get_ref().descriptors.len()],
            ..RateLimitResponse::default()
        }))
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
    let (_reporter, health) = tonic_health::server::health_reporter();
    let routes = GrpcRoutes::new(
        RateLimitServiceServer::new(Noop),
        health,
        RateLimitQuotaServiceServer::new(NoQuota),
    );
    let options = ConnectionOptions {
        http2_only: true,
        ..ConnectionOptions::new(defaults::IDLE_TIMEOUT)
    };
    let connections = Connections::new(net::descriptors::default_max_connections());
    // Serves until the process is killed: the bench script stops it.
    net::serve(
        listener,
        routes,
        options,
        connections,
        std::future::pending(),
        Duration::from_secs(1),
    )
    .await;
    Ok(())
}

//! Baseline for the gRPC loopback benchmark (`benches/grpc_h2load.sh`): an
//! `envoy.service.ratelimit.v3.RateLimitService` that does no work.
//!
//! Every `ShouldRateLimit` is answered `overall_code: OK` with one `OK` status per
//! request descriptor: no config, no matching, no buckets, no clock. The transport is
//! meshlimit's own (`src/app.rs`): a plain `tonic::transport::Server::builder()` on the
//! default multi-threaded tokio runtime, fed by [`meshlimit::grpc::incoming`] (TCP_NODELAY
//! on), so the difference between the two servers under the same load is the cost of
//! meshlimit's own work.
//!
//! ```text
//! cargo run --release --example noop_rls -- 127.0.0.1:18081
//! ```

use std::net::SocketAddr;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{Code, DescriptorStatus};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tonic::{Request, Response, Status};

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

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::args()
        .nth(1)
        .as_deref()
        .unwrap_or("127.0.0.1:18081")
        .parse()?;
    let listener = tokio::net::TcpListener::bind(addr).await?;
    eprintln!("noop_rls listening on {}", listener.local_addr()?);
    tonic::transport::Server::builder()
        .add_service(RateLimitServiceServer::new(Noop))
        .serve_with_incoming(meshlimit::grpc::incoming(listener))
        .await?;
    Ok(())
}

//! The `RateLimitService` route as tonic serves it, handing each request's bytes to
//! [`Rls::should_rate_limit_traced`] and writing its [`WireResponse`](super::WireResponse) itself
//! ([`ShouldRateLimitCodec`]). The generated server hard-wires tonic's prost codec, which
//! decodes into owned strings, answers malformed protobuf `INTERNAL` where meshlimit
//! answers `INVALID_ARGUMENT`, and encodes only prost's types.

use std::convert::Infallible;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use crossbeam_utils::CachePadded;
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;

use super::{Rls, unary};

/// The full gRPC name of the service.
pub(super) const SERVICE: &str = "envoy.service.ratelimit.v3.RateLimitService";
/// The one method's path.
const SHOULD_RATE_LIMIT: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// `envoy.service.ratelimit.v3.RateLimitService` as a tonic server, for [`super::GrpcRoutes`].
#[derive(Debug, Clone)]
pub struct RateLimitServer {
    /// Shared with each call's `ShouldRateLimit`: a call clones a pointer, not the `Rls`.
    /// Padded so that the reference count, which every worker changes on every request,
    /// sits on cache lines apart from the handles every request reads.
    rls: Arc<CachePadded<Rls>>,
}

impl RateLimitServer {
    /// Serves `rls`.
    pub fn new(rls: Rls) -> Self {
        Self {
            rls: Arc::new(CachePadded::new(rls)),
        }
    }
}

impl NamedService for RateLimitServer {
    const NAME: &'static str = SERVICE;
}

impl<B> tower_service::Service<http::Request<B>> for RateLimitServer
where
    B: http_body::Body<Data = Bytes> + Unpin + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>> + Send + Unpin + 'static,
{
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Infallible>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if request.uri().path() != SHOULD_RATE_LIMIT {
            let missing = Status::unimplemented(format!("no method {}", request.uri().path()));
            return Box::pin(async move { Ok(missing.into_http()) });
        }
        let rls = self.rls.clone();
        Box::pin(async move { Ok(unary::answer(rls, request).await) })
    }
}

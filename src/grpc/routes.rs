//! The gRPC port's routes: each request goes to the service its path names
//! (`/<package>.<Service>/<Method>`), compared by name.
//!
//! Not tonic's `Routes`, which is an axum router: per request it matched the path in a
//! route tree, stored the wildcard's value in a new map of URL parameters and boxed the
//! request body twice, about 2,000 instructions of a `ShouldRateLimit` that costs about
//! 57,000 in all (`benches/grpc_callgrind.sh`). Five services need at most five
//! comparisons of their names, and `ShouldRateLimit`'s is the first.
//! Unknown services get what tonic's router answered: `UNIMPLEMENTED`, no message.

use std::convert::Infallible;
use std::task::{Context, Poll};

use http::{Request, Response};
use tonic::Status;
use tonic::body::Body;
use tonic::codegen::BoxFuture;
use tonic::server::NamedService;

/// The gRPC port's services, each a tonic server. Cheap to clone: each server is.
#[derive(Debug, Clone)]
pub struct GrpcRoutes<Rls, Health, Quota, Reflection, ReflectionAlpha> {
    /// `envoy.service.ratelimit.v3.RateLimitService`.
    rls: Rls,
    /// `grpc.health.v1.Health`.
    health: Health,
    /// `envoy.service.rate_limit_quota.v3.RateLimitQuotaService`.
    quota: Quota,
    /// `grpc.reflection.v1.ServerReflection`.
    reflection: Reflection,
    /// `grpc.reflection.v1alpha.ServerReflection`, which older clients (grpcurl before
    /// 1.9) speak.
    reflection_alpha: ReflectionAlpha,
}

impl<Rls, Health, Quota, Reflection, ReflectionAlpha>
    GrpcRoutes<Rls, Health, Quota, Reflection, ReflectionAlpha>
{
    /// Routes to the servers, by the names they give; reflection's two versions are the
    /// last pair.
    pub fn new(
        rls: Rls,
        health: Health,
        quota: Quota,
        (reflection, reflection_alpha): (Reflection, ReflectionAlpha),
    ) -> Self {
        Self {
            rls,
            health,
            quota,
            reflection,
            reflection_alpha,
        }
    }
}

/// The service a gRPC request's `path` names: what lies between its first two slashes.
fn service_name(path: &str) -> Option<&str> {
    path.strip_prefix('/')?
        .split_once('/')
        .map(|(name, _)| name)
}

/// What a request to no service of the port gets: `UNIMPLEMENTED`, as tonic's router says it.
fn unimplemented() -> Response<Body> {
    let (parts, ()) = Status::unimplemented("").into_http::<()>().into_parts();
    Response::from_parts(parts, Body::empty())
}

impl<Rls, Health, Quota, Reflection, ReflectionAlpha, RequestBody>
    tower_service::Service<Request<RequestBody>>
    for GrpcRoutes<Rls, Health, Quota, Reflection, ReflectionAlpha>
where
    Rls: Route<RequestBody>,
    Health: Route<RequestBody>,
    Quota: Route<RequestBody>,
    Reflection: Route<RequestBody>,
    ReflectionAlpha: Route<RequestBody>,
{
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Response<Body>, Infallible>;

    /// Always ready: tonic's generated servers, which are the routes, always are.
    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<RequestBody>) -> Self::Future {
        match service_name(request.uri().path()) {
            Some(name) if name == Rls::NAME => self.rls.call(request),
            Some(name) if name == Health::NAME => self.health.call(request),
            Some(name) if name == Quota::NAME => self.quota.call(request),
            Some(name) if name == Reflection::NAME => self.reflection.call(request),
            Some(name) if name == ReflectionAlpha::NAME => self.reflection_alpha.call(request),
            _ => Box::pin(std::future::ready(Ok(unimplemented()))),
        }
    }
}

/// A service the routes can hand a request to: a tonic server, always ready, whose future
/// is already boxed (so the routes box nothing more).
pub trait Route<RequestBody>:
    tower_service::Service<
        Request<RequestBody>,
        Response = Response<Body>,
        Error = Infallible,
        Future = BoxFuture<Response<Body>, Infallible>,
    > + NamedService
{
}

impl<S, RequestBody> Route<RequestBody> for S where
    S: tower_service::Service<
            Request<RequestBody>,
            Response = Response<Body>,
            Error = Infallible,
            Future = BoxFuture<Response<Body>, Infallible>,
        > + NamedService
{
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_is_named_between_the_first_two_slashes() {
        let path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
        assert_eq!(
            service_name(path),
            Some("envoy.service.ratelimit.v3.RateLimitService")
        );
        assert_eq!(
            service_name("/grpc.health.v1.Health/"),
            Some("grpc.health.v1.Health")
        );
        assert_eq!(service_name("/grpc.health.v1.Health"), None);
        assert_eq!(service_name("grpc.health.v1.Health/Check"), None);
        assert_eq!(service_name("/"), None);
    }

    #[test]
    fn a_request_for_no_service_is_unimplemented_without_a_message() {
        let response = unimplemented();
        assert_eq!(response.status(), http::StatusCode::OK);
        let headers = response.headers();
        assert_eq!(headers["grpc-status"], "12");
        assert_eq!(headers["content-type"], "application/grpc");
        assert!(headers.get("grpc-message").is_none());
    }
}

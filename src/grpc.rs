//! `envoy.service.ratelimit.v3.RateLimitService` over tonic: protobuf in, protobuf out.
//! The service behind it never sees protobuf: requests reach it as a [`Request`] and
//! leave it as its answer, which this module writes back. Envoy's types are seen here,
//! by the quota service's stream (`rlqs/service.rs`) and by the xDS client
//! (`source/xds/`), each its own protocol's edge. The port also serves gRPC health,
//! the quota service and reflection (`grpc/routes.rs`).

use bytes::Bytes;
use envoy_types::pb::envoy::config::core::v3::HeaderValue;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use opentelemetry::KeyValue;
use prost::Message;
use tonic::Status;

use crate::clock::NANOS_PER_SEC;
use crate::defaults;
use crate::net::{Caller, GiveBack};
use crate::request::{Override, Request, RequestDescriptor};
use crate::rules::Unit;
use crate::service::{self, Service};
use crate::traces::{RequestSpan, Traces};
use status::{malformed, to_status};

mod codec;
mod metadata;
mod rate_limit_server;
mod ratelimit_headers;
mod reflection;
mod response;
mod routes;
mod sf;
mod status;
pub mod unary;
mod wire;

pub use rate_limit_server::RateLimitServer;
pub use ratelimit_headers::{LIMIT_FIELD, POLICY_FIELD};
pub use reflection::reflection_servers;
pub use response::WireResponse;
pub use routes::{GrpcRoutes, Route};

/// The gRPC face of a [`Service`].
#[derive(Debug, Clone)]
pub struct Rls {
    /// What decides; `Rls` only converts between protobuf and its types.
    service: Service,
    /// Names of the `RateLimit-*` headers to ask Envoy to add (`None`: no headers).
    headers: Option<HeaderNames>,
    /// Also ask for the IETF draft's `RateLimit-Policy` and `RateLimit` fields.
    draft_fields: bool,
    /// Traces sampled calls (`--tracing`); `None`: tracing off, no call looks further.
    traces: Option<Traces>,
    /// Who may give budget back (`--give-back-from`).
    give_back: GiveBack,
}

/// Names of the response headers meshlimit asks Envoy to add (the Go server's
/// `LIMIT_RESPONSE_HEADERS_ENABLED` and `LIMIT_*_HEADER` settings).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderNames {
    /// The limit: requests per unit.
    pub limit: String,
    /// Requests remaining.
    pub remaining: String,
    /// Whole seconds until the reset (rounded up).
    pub reset: String,
}

impl Default for HeaderNames {
    fn default() -> Self {
        Self {
            limit: defaults::LIMIT_HEADER.into(),
            remaining: defaults::REMAINING_HEADER.into(),
            reset: defaults::RESET_HEADER.into(),
        }
    }
}

impl Rls {
    /// Wraps `service` for tonic.
    pub fn new(service: Service) -> Self {
        Self {
            service,
            headers: None,
            draft_fields: false,
            traces: None,
            give_back: GiveBack::default(),
        }
    }

    /// Lets the callers `policy` allows give budget back (refunds, settles of holds);
    /// anyone else's such request is answered `PERMISSION_DENIED` and changes nothing.
    #[must_use]
    pub fn with_give_back(mut self, policy: GiveBack) -> Self {
        self.give_back = policy;
        self
    }

    /// Traces sampled calls with `traces` (`None`: no tracing, the default).
    #[must_use]
    pub fn with_traces(mut self, traces: Option<Traces>) -> Self {
        self.traces = traces;
        self
    }

    /// Adds `RateLimit-*` style headers, named by `names`, to every answer with a limit
    /// (`None`: no headers, the default).
    #[must_use]
    pub fn with_response_headers(mut self, names: Option<HeaderNames>) -> Self {
        self.headers = names;
        self
    }

    /// Adds the IETF draft's `RateLimit-Policy` and `RateLimit` fields, which describe
    /// every limit of every limited descriptor, to every answer with a limit (see
    /// [`ratelimit_headers`]); independent of [`Rls::with_response_headers`].
    #[must_use]
    pub fn with_draft_fields(mut self, on: bool) -> Self {
        self.draft_fields = on;
        self
    }

    /// The tonic service to mount; it answers malformed protobuf `INVALID_ARGUMENT`.
    pub fn into_server(self) -> RateLimitServer {
        RateLimitServer::new(self)
    }
}

/// Service name registered with `grpc.health.v1.Health`, besides the overall "" and the
/// full service name; the Go server answers health checks for `ratelimit`.
pub const HEALTH_SERVICE_NAME: &str = "ratelimit";

impl Rls {
    /// Answers one `ShouldRateLimit` from its message's bytes (a `RateLimitRequest`), as the
    /// gRPC route does, recorded in `span` when the call is sampled: its domain,
    /// descriptors and overall code, or why it failed. Nearly every request is read in
    /// place, its strings borrowed from `message`; any other is decoded by prost, which
    /// also words the refusal of a malformed one (`INVALID_ARGUMENT`). The answer is the
    /// same either way.
    pub async fn should_rate_limit_traced(
        &self,
        message: Bytes,
        span: Option<&RequestSpan>,
        caller: Option<&Caller>,
    ) -> Result<WireResponse, Status> {
        let may_give_back = self.give_back.allows(caller);
        let Some(span) = span else {
            return self.read_and_answer(message, None, may_give_back).await;
        };
        let answer = self
            .read_and_answer(message, Some(span), may_give_back)
            .await;
        record(span, &answer);
        answer
    }

    /// [`Rls::should_rate_limit_traced`] before the outcome is recorded.
    async fn read_and_answer(
        &self,
        message: Bytes,
        span: Option<&RequestSpan>,
        may_give_back: bool,
    ) -> Result<WireResponse, Status> {
        let mut request = wire::WireRequest::default();
        if wire::read(&message, &mut request).is_some() {
            let request = request.as_request().giving_back(may_give_back);
            return self.answer(request, span).await;
        }
        let request = RateLimitRequest::decode(message.as_ref()).map_err(malformed)?;
        let request = Request::new(&request.domain, &request.descriptors, request.hits_addend)
            .giving_back(may_give_back);
        self.answer(request, span).await
    }

    /// The answer to `request`.
    async fn answer<D: RequestDescriptor + Sync>(
        &self,
        request: Request<'_, D>,
        span: Option<&RequestSpan>,
    ) -> Result<WireResponse, Status> {
        if let Some(span) = span {
            span.request(request.domain, request.descriptors.len());
        }
        let answer = match self.service.decide_at_once(request) {
            Some(answer) => answer,
            // Awaited here, not boxed in a `Decision`: the call's future, which holds this
            // one, is a box already (`grpc/rate_limit_server.rs`).
            None => self.service.decide_waiting(request, span).await,
        }
        .map_err(to_status)?;
        let mut headers = match (&self.headers, answer.headline) {
            (Some(names), Some(i)) => response_headers(names, &answer.statuses[i]),
            _ => Vec::new(),
        };
        if self.draft_fields
            && let Some((policy, limit)) = ratelimit_headers::values(&answer.statuses)
        {
            headers.push(header(POLICY_FIELD, policy));
            headers.push(header(LIMIT_FIELD, limit));
        }
        Ok(WireResponse { answer, headers })
    }
}

/// Records a call's outcome in its span: the RPC's names and status code, the overall
/// code of an answer, or why there is none.
fn record(span: &RequestSpan, answer: &Result<WireResponse, Status>) {
    let code = match answer {
        Ok(_) => tonic::Code::Ok,
        Err(status) => status.code(),
    };
    span.set([
        KeyValue::new("rpc.system", "grpc"),
        KeyValue::new("rpc.service", rate_limit_server::SERVICE),
        KeyValue::new("rpc.method", "ShouldRateLimit"),
        KeyValue::new("rpc.grpc.status_code", code as i64),
    ]);
    match answer {
        Ok(answer) => span.answered(answer.answer.over_limit),
        Err(status) => span.failed(status.message().to_string()),
    }
}

/// The three headers for the status a response's headline names.
fn response_headers(names: &HeaderNames, status: &service::DescriptorStatus) -> Vec<HeaderValue> {
    let Some(limit) = &status.current_limit else {
        return Vec::new();
    };
    let reset = status.reset.unwrap_or(0).div_ceil(NANOS_PER_SEC);
    [
        (&names.limit, limit.requests_per_unit.to_string()),
        (&names.remaining, status.remaining.to_string()),
        (&names.reset, reset.to_string()),
    ]
    .into_iter()
    .map(|(key, value)| header(key, value))
    .collect()
}

/// One header for Envoy to add to the downstream response.
fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_string(),
        value,
        ..HeaderValue::default()
    }
}

/// An override's unit is an `envoy.type.v3.RateLimitUnit`, read by number as the Go server
/// does (7 is WEEK in the response enum).
fn unit_from_proto(unit: i32) -> Option<Unit> {
    Some(match PbUnit::try_from(unit).ok()? {
        PbUnit::Unknown => return None,
        PbUnit::Second => Unit::Second,
        PbUnit::Minute => Unit::Minute,
        PbUnit::Hour => Unit::Hour,
        PbUnit::Day => Unit::Day,
        PbUnit::Week => Unit::Week,
        PbUnit::Month => Unit::Month,
        PbUnit::Year => Unit::Year,
    })
}

impl RequestDescriptor for RateLimitDescriptor {
    fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries
            .iter()
            .map(|e| (e.key.as_str(), e.value.as_str()))
    }

    fn limit_override(&self) -> Option<Override> {
        self.limit.as_ref().map(|l| Override {
            requests_per_unit: l.requests_per_unit,
            unit: unit_from_proto(l.unit),
        })
    }

    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend.as_ref().map(|h| h.value)
    }

    fn is_negative_hits(&self) -> bool {
        self.is_negative_hits
    }
}

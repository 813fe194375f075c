//! OpenTelemetry tracing (`--tracing`, the Go server's `TRACING_ENABLED`): a span for each
//! sampled `ShouldRateLimit` call, a child of the caller's span when Envoy sends one
//! (`traceparent`, `b3` or `x-b3-*`), with a child span for the Redis call.
//!
//! - `parent`: the caller's span context, read from the request's headers.
//! - `export`: the tracer provider: sampler, resource, OTLP exporter over HTTP or gRPC,
//!   exports off the request path.
//!
//! The request path uses the OpenTelemetry API directly rather than `tracing` spans
//! bridged by `tracing-opentelemetry`: a request that is not sampled must cost next to
//! nothing, and the bridge builds a `tracing` span (the subscriber's registry, a slab
//! entry, the layer's bookkeeping) before the sampler has a say. Here a call whose parent
//! is not sampled stops after reading its headers, and the server span is built only
//! when the sampler keeps it.

mod export;
mod parent;

use std::borrow::Cow;
use std::future::Future;

use http::HeaderMap;
use opentelemetry::trace::{Span as _, SpanBuilder, SpanKind, Status, TraceContextExt};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::trace::SdkTracer;

pub use export::{ExportProtocol, Tracing, TracingError, TracingOptions, start};

/// The name of the span of a gRPC `ShouldRateLimit` call: the method's full name, as
/// OpenTelemetry names RPC server spans (and as the Go server's gRPC interceptor does).
pub const SHOULD_RATE_LIMIT_SPAN: &str =
    "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The name of the span of a `POST /json` request.
pub const JSON_SPAN: &str = "POST /json";

/// The name of a Redis call's span, as the Go server names it.
pub const REDIS_SPAN: &str = "Redis Pipeline Execution";

/// The tracer requests are traced with. Cheap to clone (a handle).
#[derive(Debug, Clone)]
pub struct Traces {
    /// Builds the spans; its provider samples, batches and exports them.
    tracer: SdkTracer,
}

impl Traces {
    /// Traces with `tracer` (see [`start`] for the one a server uses).
    pub fn new(tracer: SdkTracer) -> Self {
        Self { tracer }
    }

    /// The span of a server call whose request carries `headers`, named `name`, when the
    /// call is sampled: a child of the caller's span if the headers name one (then
    /// sampled as the caller's is), a root sampled at the sampling rate otherwise. `None`
    /// when not sampled: the call is not traced.
    pub fn server_span(&self, headers: &HeaderMap, name: &'static str) -> Option<RequestSpan> {
        let parent = match parent::span_context(headers) {
            // The parent-based sampler drops every child of an unsampled remote parent:
            // decided here, before a context or a span is built for nothing.
            Some(parent) if !parent.is_sampled() => return None,
            Some(parent) => Context::new().with_remote_span_context(parent),
            None => Context::new(),
        };
        let span = SpanBuilder::from_name(name)
            .with_kind(SpanKind::Server)
            .start_with_context(&self.tracer, &parent);
        if !span.is_recording() {
            return None;
        }
        Some(RequestSpan {
            cx: parent.with_span(span),
            tracer: self.tracer.clone(),
        })
    }
}

/// The span of one sampled call, ended when dropped.
#[derive(Debug)]
pub struct RequestSpan {
    /// Holds the span, and is the parent of its children.
    cx: Context,
    /// Builds the children.
    tracer: SdkTracer,
}

impl RequestSpan {
    /// Adds `attributes` to the span.
    pub fn set(&self, attributes: impl IntoIterator<Item = KeyValue>) {
        self.cx.span().set_attributes(attributes);
    }

    /// Records what the call was for: its domain and how many descriptors it has.
    pub fn request(&self, domain: &str, descriptors: usize) {
        self.set([
            KeyValue::new("domain", domain.to_string()),
            KeyValue::new(
                "descriptors",
                i64::try_from(descriptors).unwrap_or(i64::MAX),
            ),
        ]);
    }

    /// Records the call's answer: its overall code, `OVER_LIMIT` or `OK`, as protobuf
    /// names them.
    pub fn answered(&self, over_limit: bool) {
        let code = if over_limit { "OVER_LIMIT" } else { "OK" };
        self.set([KeyValue::new("overall_code", code)]);
    }

    /// Marks the call failed, with why.
    pub fn failed(&self, why: impl Into<Cow<'static, str>>) {
        self.cx.span().set_status(Status::error(why));
    }

    /// Runs `call`, a store's answer to a request, in a child span named `name`, which
    /// is marked failed when the call fails.
    pub async fn child<T, E: std::fmt::Display>(
        &self,
        name: &'static str,
        attributes: Vec<KeyValue>,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let mut span = SpanBuilder::from_name(name)
            .with_kind(SpanKind::Client)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &self.cx);
        let result = call.await;
        if let Err(error) = &result {
            span.set_status(Status::error(error.to_string()));
        }
        span.end();
        result
    }
}

/// Traces whose spans are kept in memory as they end, for tests.
#[cfg(test)]
pub(crate) mod recording {
    use std::sync::{Arc, Mutex};

    use opentelemetry::trace::TracerProvider as _;
    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider, SpanData, SpanExporter};

    use super::Traces;

    /// The spans ended so far.
    pub(crate) type Ended = Arc<Mutex<Vec<SpanData>>>;

    /// Keeps every span it is given.
    #[derive(Debug)]
    struct Keep(Ended);

    impl SpanExporter for Keep {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            self.0.lock().unwrap().extend(batch);
            Ok(())
        }
    }

    /// Traces sampled as `--tracing` samples them (roots at `rate`), each span kept when it
    /// ends; the provider must live as long as the traces are used.
    pub(crate) fn traces(rate: f64) -> (Traces, Ended, SdkTracerProvider) {
        let ended = Ended::default();
        let provider = SdkTracerProvider::builder()
            .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                rate,
            ))))
            .with_simple_exporter(Keep(ended.clone()))
            .build();
        (Traces::new(provider.tracer("test")), ended, provider)
    }
}

#[cfg(test)]
mod tests {
    use http::HeaderValue;
    use opentelemetry::trace::{SpanId, TraceId};

    use super::*;

    const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

    fn with_traceparent(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("traceparent", HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn a_call_is_sampled_as_its_parent_and_roots_at_the_rate() {
        let (every, _, _every) = recording::traces(1.0);
        let (none, _, _none) = recording::traces(0.0);
        let sampled = with_traceparent(SAMPLED);
        let unsampled = with_traceparent(UNSAMPLED);
        assert!(every.server_span(&sampled, "t").is_some());
        assert!(
            none.server_span(&sampled, "t").is_some(),
            "the parent decides"
        );
        assert!(
            every.server_span(&unsampled, "t").is_none(),
            "the parent decides"
        );
        assert!(every.server_span(&HeaderMap::new(), "t").is_some());
        assert!(none.server_span(&HeaderMap::new(), "t").is_none());
    }

    #[tokio::test]
    async fn the_span_records_the_call_and_its_store_child() {
        let (traces, ended, _provider) = recording::traces(1.0);
        let span = traces
            .server_span(&with_traceparent(SAMPLED), "call")
            .expect("sampled");
        span.request("d", 3);
        let failed: Result<(), &str> = span.child("store", Vec::new(), async { Err("down") }).await;
        assert!(failed.is_err());
        span.answered(true);
        drop(span);
        let ended = ended.lock().unwrap();
        let [store, call] = &ended[..] else {
            panic!("two spans: {ended:?}")
        };
        assert_eq!(call.name, "call");
        assert_eq!(
            call.span_context.trace_id(),
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap()
        );
        assert_eq!(
            call.parent_span_id,
            SpanId::from_hex("00f067aa0ba902b7").unwrap()
        );
        let attribute = |key: &str| {
            call.attributes
                .iter()
                .find(|kv| kv.key.as_str() == key)
                .map(|kv| kv.value.to_string())
        };
        assert_eq!(attribute("domain").as_deref(), Some("d"));
        assert_eq!(attribute("descriptors").as_deref(), Some("3"));
        assert_eq!(attribute("overall_code").as_deref(), Some("OVER_LIMIT"));
        assert_eq!(store.parent_span_id, call.span_context.span_id());
        assert_eq!(store.status, Status::error("down"));
    }
}

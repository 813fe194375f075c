//! The tracer provider of a server with `--tracing`: the Go server's sampler and resource,
//! spans batched and sent over OTLP (HTTP or gRPC) off the request path.
//!
//! A request only hands its ended span to the SDK's batch processor: a bounded queue
//! (`OTEL_BSP_MAX_QUEUE_SIZE`, 2048 by default) emptied by a thread of its own, which
//! drops spans when the queue is full (logged once, and counted at shutdown). An export
//! runs on the server's runtime (the gRPC and HTTP clients need one), bounded by the
//! exporter's timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`, 10 s by default); an unreachable
//! collector costs the spans of that batch, one log line a minute says how many.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{ExporterBuildError, Protocol, WithExportConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, IdGenerator, RandomIdGenerator, Sampler, SdkTracerProvider, SpanData,
    SpanExporter,
};
use tokio::runtime::Handle;
use tracing::{info, warn};

use super::Traces;
use crate::throttle::Throttle;

/// How spans travel to the collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExportProtocol {
    /// OTLP over HTTP, protobuf bodies (`http/protobuf`; the collector's port 4318).
    Http,
    /// OTLP over gRPC (the collector's port 4317).
    Grpc,
}

/// What `--tracing` was given.
#[derive(Debug, Clone, PartialEq)]
pub struct TracingOptions {
    /// `None`: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL`, else `OTEL_EXPORTER_OTLP_PROTOCOL`,
    /// else HTTP (the Go server's default).
    pub protocol: Option<ExportProtocol>,
    /// Where spans go, as is (over HTTP a full URL, `…/v1/traces`). `None`:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces`
    /// appended over HTTP), else the collector on localhost.
    pub endpoint: Option<String>,
    /// The resource's `service.name`.
    pub service_name: String,
    /// The resource's `service.namespace`; `None`: not set.
    pub service_namespace: Option<String>,
    /// The resource's `service.instance.id`; `None`: a random UUID, new each start.
    pub service_instance_id: Option<String>,
    /// The share of traces this server starts (requests without a sampled or unsampled
    /// parent) that are sampled, 0 to 1; a request with a parent follows its decision.
    pub sampling_rate: f64,
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TracingError {
    /// An `OTEL_EXPORTER_OTLP_*PROTOCOL` meshlimit does not speak.
    #[error("{0}={1}: meshlimit exports traces over grpc or http/protobuf")]
    Protocol(&'static str, String),
    /// The exporter refused its settings (a malformed endpoint, headers or timeout).
    #[error("tracing exporter: {0}")]
    Exporter(#[from] ExporterBuildError),
}

/// A running tracer provider and the tracer requests use.
#[derive(Debug)]
pub struct Tracing {
    /// What requests are traced with.
    pub traces: Traces,
    /// Shut down at the end, so that the last spans are sent.
    provider: SdkTracerProvider,
}

impl Tracing {
    /// Sends the spans still queued (waiting at most a few seconds), then stops.
    pub async fn shutdown(self) {
        // Blocking: the batch thread is joined, and its last export runs on this runtime.
        let provider = self.provider;
        let stopped = tokio::task::spawn_blocking(move || {
            provider.shutdown_with_timeout(Duration::from_secs(5))
        })
        .await;
        if let Ok(Err(error)) = stopped {
            warn!(%error, "tracing did not shut down cleanly");
        }
    }
}

/// Starts tracing as `options` say, exports on the current runtime; `var` reads the
/// environment (the OTLP exporter also reads its own `OTEL_EXPORTER_OTLP_*` variables).
///
/// # Errors
/// An unknown protocol variable, or settings the exporter refuses.
///
/// # Panics
/// Outside a tokio runtime.
pub fn start(
    options: &TracingOptions,
    var: impl Fn(&str) -> Option<String>,
) -> Result<Tracing, TracingError> {
    let protocol = match options.protocol {
        Some(protocol) => protocol,
        None => protocol_from_env(&var)?,
    };
    let runtime = Handle::current();
    let processor = match protocol {
        ExportProtocol::Grpc => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder().with_tonic();
            if let Some(endpoint) = &options.endpoint {
                builder = builder.with_endpoint(endpoint);
            }
            batch(OnRuntime::new(builder.build()?, runtime))
        }
        ExportProtocol::Http => {
            let mut builder = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary);
            if let Some(endpoint) = &options.endpoint {
                builder = builder.with_endpoint(endpoint);
            }
            batch(OnRuntime::new(builder.build()?, runtime))
        }
    };
    let instance = options
        .service_instance_id
        .clone()
        .unwrap_or_else(random_uuid);
    let mut resource = vec![
        KeyValue::new("service.name", options.service_name.clone()),
        KeyValue::new("service.instance.id", instance.clone()),
    ];
    if let Some(namespace) = &options.service_namespace {
        resource.push(KeyValue::new("service.namespace", namespace.clone()));
    }
    let provider = SdkTracerProvider::builder()
        // As the Go server samples: a child as its parent is, a root at the rate (1 and
        // above: every one; 0 and below: none).
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            options.sampling_rate,
        ))))
        .with_resource(Resource::builder_empty().with_attributes(resource).build())
        .with_span_processor(processor)
        .build();
    let scope = InstrumentationScope::builder("meshlimit")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build();
    let traces = Traces::new(provider.tracer_with_scope(scope));
    info!(
        protocol = ?protocol,
        service_name = %options.service_name,
        service_instance_id = %instance,
        sampling_rate = options.sampling_rate,
        "tracing on"
    );
    Ok(Tracing { traces, provider })
}

/// The SDK's batch processor, with its defaults and `OTEL_BSP_*` variables.
fn batch(exporter: impl SpanExporter + 'static) -> BatchSpanProcessor {
    BatchSpanProcessor::builder(exporter).build()
}

/// The protocol the standard variables ask for; HTTP when they are not set.
fn protocol_from_env(
    var: &impl Fn(&str) -> Option<String>,
) -> Result<ExportProtocol, TracingError> {
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        match var(name).as_deref() {
            None | Some("") => {}
            Some("grpc") => return Ok(ExportProtocol::Grpc),
            Some("http/protobuf") => return Ok(ExportProtocol::Http),
            Some(other) => return Err(TracingError::Protocol(name, other.to_string())),
        }
    }
    Ok(ExportProtocol::Http)
}

/// A random version 4 UUID, as the Go server names an instance that has no id.
fn random_uuid() -> String {
    let bits = u128::from_be_bytes(RandomIdGenerator::default().new_trace_id().to_bytes());
    // Version 4 (bits 76..80) and the RFC 4122 variant (bits 62..64).
    let bits = (bits & !(0xF << 76) & !(0x3 << 62)) | (0x4 << 76) | (0x2 << 62);
    let hex = format!("{bits:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// An exporter whose exports run on a tokio runtime: the batch processor calls it from a
/// thread of its own, and the gRPC and HTTP clients need a runtime. A failed export is
/// counted and logged at most once a minute, not returned, so that the processor does not
/// log each failure again.
#[derive(Debug)]
struct OnRuntime<E> {
    /// The OTLP exporter, shared with the export running on the runtime.
    inner: Arc<E>,
    /// Where exports run.
    runtime: Handle,
    /// Spans lost to failed exports, since the start.
    lost: AtomicU64,
    /// At most one line a minute about them.
    throttle: Throttle,
}

impl<E> OnRuntime<E> {
    fn new(inner: E, runtime: Handle) -> Self {
        Self {
            inner: Arc::new(inner),
            runtime,
            lost: AtomicU64::new(0),
            throttle: Throttle::new(Duration::from_secs(60)),
        }
    }

    /// Counts `spans` lost because of `error`, and says so if the throttle lets it.
    fn lost(&self, spans: usize, error: &dyn std::fmt::Display) {
        let total = self.lost.fetch_add(spans as u64, Ordering::Relaxed) + spans as u64;
        if self.throttle.allow().is_some() {
            warn!(%error, spans_lost = total, "cannot export spans to the collector; they are dropped");
        }
    }
}

impl<E: SpanExporter + 'static> SpanExporter for OnRuntime<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let inner = self.inner.clone();
        match self
            .runtime
            .spawn(async move { inner.export(batch).await })
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(error)) => self.lost(spans, &error),
            Err(join) => self.lost(spans, &join),
        }
        Ok(())
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        // Called once, when the provider is built, before any export shares the exporter.
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.set_resource(resource);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_variables_choose_the_transport() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == name)
                    .map(|(_, v)| v.to_string())
            }
        };
        assert_eq!(protocol_from_env(&env(&[])).unwrap(), ExportProtocol::Http);
        let grpc = env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]);
        assert_eq!(protocol_from_env(&grpc).unwrap(), ExportProtocol::Grpc);
        let traces_first = env(&[
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
        ]);
        assert_eq!(
            protocol_from_env(&traces_first).unwrap(),
            ExportProtocol::Http
        );
        let json = env(&[("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")]);
        assert!(protocol_from_env(&json).is_err());
    }

    #[test]
    fn an_instance_id_is_a_version_4_uuid() {
        let id = random_uuid();
        let parts: Vec<&str> = id.split('-').collect();
        let lengths: Vec<usize> = parts.iter().map(|p| p.len()).collect();
        assert_eq!(lengths, [8, 4, 4, 4, 12], "{id}");
        assert!(parts[2].starts_with('4'), "{id}");
        assert!(matches!(&parts[3][..1], "8" | "9" | "a" | "b"), "{id}");
        assert_ne!(random_uuid(), id);
    }
}

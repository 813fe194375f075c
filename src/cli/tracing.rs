//! The `--tracing*` flags of `serve`, as [`TracingOptions`].

use clap::ValueEnum;

use crate::defaults;
use crate::traces::{ExportProtocol, TracingOptions};

/// `--tracing-protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum ProtocolArg {
    Http,
    Grpc,
}

/// The tracing flags; each field's comment is its `--help` text.
#[derive(Debug, clap::Args)]
pub(crate) struct TracingArgs {
    /// Trace sampled ShouldRateLimit calls (and /json requests) with OpenTelemetry, each span
    /// a child of the caller's (traceparent or B3 headers), exported over OTLP.
    #[arg(long, env = "MESHLIMIT_TRACING")]
    pub(crate) tracing: bool,
    /// OTLP transport. Default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
    /// OTEL_EXPORTER_OTLP_PROTOCOL (grpc, http/protobuf), else http.
    #[arg(long, env = "MESHLIMIT_TRACING_PROTOCOL", value_enum)]
    pub(crate) tracing_protocol: Option<ProtocolArg>,
    /// Where spans are sent, as is (over http the full URL, ending /v1/traces). Default:
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else OTEL_EXPORTER_OTLP_ENDPOINT, else a
    /// collector on localhost (4318 over http, 4317 over grpc).
    #[arg(long, env = "MESHLIMIT_TRACING_ENDPOINT")]
    pub(crate) tracing_endpoint: Option<String>,
    /// The resource's service.name.
    #[arg(long, env = "MESHLIMIT_TRACING_SERVICE_NAME", default_value = defaults::TRACING_SERVICE_NAME)]
    pub(crate) tracing_service_name: String,
    /// The resource's service.namespace (default: none).
    #[arg(long, env = "MESHLIMIT_TRACING_SERVICE_NAMESPACE")]
    pub(crate) tracing_service_namespace: Option<String>,
    /// The resource's service.instance.id (default: a random UUID at each start).
    #[arg(long, env = "MESHLIMIT_TRACING_SERVICE_INSTANCE_ID")]
    pub(crate) tracing_service_instance_id: Option<String>,
    /// Share of the traces meshlimit starts (calls without a parent span) that are
    /// sampled: 1 and above every one, 0 and below none. A call with a parent is sampled
    /// as its parent is.
    #[arg(long, env = "MESHLIMIT_TRACING_SAMPLING_RATE", default_value_t = defaults::TRACING_SAMPLING_RATE, value_parser = finite)]
    pub(crate) tracing_sampling_rate: f64,
}

impl TracingArgs {
    /// The options `--tracing` asks for; `None` without it.
    pub(super) fn options(&self) -> Option<TracingOptions> {
        self.tracing.then(|| TracingOptions {
            protocol: self.tracing_protocol.map(|p| match p {
                ProtocolArg::Http => ExportProtocol::Http,
                ProtocolArg::Grpc => ExportProtocol::Grpc,
            }),
            endpoint: self.tracing_endpoint.clone(),
            service_name: self.tracing_service_name.clone(),
            service_namespace: self.tracing_service_namespace.clone(),
            service_instance_id: self.tracing_service_instance_id.clone(),
            sampling_rate: self.tracing_sampling_rate,
        })
    }
}

/// A number, not NaN or infinite (the sampler compares it with 0 and 1).
fn finite(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate.is_finite() => Ok(rate),
        _ => Err(format!("{text:?} is not a number")),
    }
}

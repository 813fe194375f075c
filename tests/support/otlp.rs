//! An OpenTelemetry collector for tests: receives OTLP traces over gRPC
//! (`TraceService/Export`) and over HTTP (`POST /v1/traces`, protobuf), and keeps every span
//! with its resource and the request's headers.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use tokio::task::JoinHandle;

/// One span as the collector received it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The span.
    pub span: Span,
    /// Its resource's attributes.
    pub resource: Vec<KeyValue>,
    /// The export request's headers (metadata over gRPC), lower-case names.
    pub headers: Vec<(String, String)>,
}

impl Received {
    /// The span's attribute `key`, as text (numbers written out).
    pub fn attribute(&self, key: &str) -> Option<String> {
        value_of(&self.span.attributes, key)
    }

    /// The resource's attribute `key`, as text.
    pub fn resource(&self, key: &str) -> Option<String> {
        value_of(&self.resource, key)
    }

    /// The export request's header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// `key`'s value among `attributes`, as text.
fn value_of(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match value.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::IntValue(i) => i.to_string(),
        Value::BoolValue(b) => b.to_string(),
        Value::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

/// The spans received so far, shared by both transports.
type Spans = Arc<Mutex<Vec<Received>>>;

/// A running collector, stopped when dropped.
pub struct Collector {
    /// Where OTLP/gRPC is served.
    pub grpc: SocketAddr,
    /// Where OTLP/HTTP is served (`/v1/traces`).
    pub http: SocketAddr,
    spans: Spans,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Collector {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Keeps what `request` holds.
fn keep(spans: &Spans, request: ExportTraceServiceRequest, headers: Vec<(String, String)>) {
    let mut spans = spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let resource = resource_spans
            .resource
            .map(|r| r.attributes)
            .unwrap_or_default();
        for scope in resource_spans.scope_spans {
            for span in scope.spans {
                spans.push(Received {
                    span,
                    resource: resource.clone(),
                    headers: headers.clone(),
                });
            }
        }
    }
}

/// The gRPC face.
struct Grpc(Spans);

#[tonic::async_trait]
impl TraceService for Grpc {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
            .collect();
        keep(&self.0, request.into_inner(), headers);
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

impl Collector {
    /// A collector on two loopback ports of the system's choosing.
    pub async fn start() -> Collector {
        let spans: Spans = Arc::default();
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
        let router = tonic::transport::Server::builder()
            .add_service(TraceServiceServer::new(Grpc(spans.clone())));
        let grpc_task = tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(grpc);
            let _ = router.serve_with_incoming(incoming).await;
        });
        let app = axum::Router::new()
            .route("/v1/traces", axum::routing::post(http_export))
            .with_state(spans.clone());
        let http_task = tokio::spawn(async move {
            let _ = axum::serve(http, app).await;
        });
        Collector {
            grpc: grpc_addr,
            http: http_addr,
            spans,
            tasks: vec![grpc_task, http_task],
        }
    }

    /// `http://<grpc address>`, for an OTLP/gRPC exporter.
    pub fn grpc_endpoint(&self) -> String {
        format!("http://{}", self.grpc)
    }

    /// `http://<http address>/v1/traces`, for an OTLP/HTTP exporter.
    pub fn http_endpoint(&self) -> String {
        format!("http://{}/v1/traces", self.http)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<Received> {
        self.spans.lock().unwrap().clone()
    }

    /// Waits (at most 30 s, polling) until the spans received include one for which
    /// `found` holds, and returns all spans then.
    pub async fn wait_for(&self, what: &str, found: impl Fn(&Received) -> bool) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let spans = self.spans();
            if spans.iter().any(&found) {
                return spans;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the collector did not receive {what}; it has {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// `POST /v1/traces`: a protobuf `ExportTraceServiceRequest`.
async fn http_export(
    axum::extract::State(spans): axum::extract::State<Spans>,
    headers: axum::http::HeaderMap,
    body: axum::body::Bytes,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
        return axum::http::StatusCode::BAD_REQUEST.into_response();
    };
    let headers = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    keep(&spans, request, headers);
    let body = ExportTraceServiceResponse::default().encode_to_vec();
    (
        [(axum::http::header::CONTENT_TYPE, "application/x-protobuf")],
        body,
    )
        .into_response()
}

/// A span id or trace id as lowercase hex.
pub fn hex(id: &[u8]) -> String {
    id.iter().map(|b| format!("{b:02x}")).collect()
}

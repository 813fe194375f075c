//! OpenTelemetry tracing, end to end: meshlimit (the binary) sends its spans to a collector
//! this test runs (tests/support/otlp.rs), over gRPC or HTTP; its spans are children of
//! the caller's (W3C `traceparent`, B3), sampled as the caller's are; the Redis call is a
//! child span; a collector that is down costs no request; and behind a real Envoy that
//! traces to the same collector, Envoy's span and meshlimit's are one trace.

mod support;

use std::net::SocketAddr;
use std::path::Path;

use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitResponse;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::envoy::{Envoy, EnvoyPorts, h2_cluster, loopback};
use support::otlp::{Collector, Received, hex};
use support::process::{Meshlimit, serve_on_loopback};
use support::redis::RedisServer;
use support::{free_port, rls_request};

/// One a day on `k`: the first request is OK, the next over the limit.
const LIMITS: &str =
    "domain: traced\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n";

/// The gRPC span's name.
const GRPC_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Spans are exported every 100 ms rather than every 5 s: the tests wait less.
const QUICK_BATCHES: (&str, &str) = ("OTEL_BSP_SCHEDULE_DELAY", "100");

fn limits() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("limits.yaml"), LIMITS).expect("writing the limits");
    dir
}

/// `meshlimit serve` on `config` with `--tracing` and `args`, and `env`.
async fn traced(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Meshlimit {
    let config = config.display().to_string();
    let mut argv = serve_on_loopback(&config, &["--log", "info", "--tracing"]);
    argv.extend_from_slice(args);
    let mut env = env.to_vec();
    env.push(QUICK_BATCHES);
    Meshlimit::start_with(&argv, &env).await
}

/// [`traced`] on [`LIMITS`], sending to `collector` over `protocol` (`grpc`, `http`), with
/// `extra` flags; the config's directory lives as long as the server must.
async fn traced_to(
    collector: &Collector,
    protocol: &str,
    extra: &[&str],
) -> (Meshlimit, tempfile::TempDir) {
    let endpoint = match protocol {
        "grpc" => collector.grpc_endpoint(),
        _ => collector.http_endpoint(),
    };
    let dir = limits();
    let mut flags = vec![
        "--tracing-protocol",
        protocol,
        "--tracing-endpoint",
        &endpoint,
    ];
    flags.extend_from_slice(extra);
    let ml = traced(dir.path(), &flags, &[]).await;
    (ml, dir)
}

/// One ShouldRateLimit of `k=<value>` with `headers` as gRPC metadata.
async fn ask(ml: &Meshlimit, value: &str, headers: &[(&'static str, &str)]) -> RateLimitResponse {
    let mut request = tonic::Request::new(rls_request("traced", &[&[("k", value)]]));
    for (name, text) in headers {
        request
            .metadata_mut()
            .insert(*name, text.parse().expect("a header value"));
    }
    let mut client = ml.client().await;
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.should_rate_limit(request),
    )
    .await
    .expect("answered within 10 s")
    .expect("a gRPC answer")
    .into_inner()
}

/// A `traceparent` for trace `trace` and parent span `span`, sampled or not.
fn traceparent(trace: &str, span: &str, sampled: bool) -> String {
    format!("00-{trace}-{span}-{}", if sampled { "01" } else { "00" })
}

/// The spans of trace `trace` (hex).
fn of_trace<'a>(spans: &'a [Received], trace: &str) -> Vec<&'a Received> {
    spans
        .iter()
        .filter(|r| hex(&r.span.trace_id) == trace)
        .collect()
}

/// Waits for meshlimit's span in trace `trace` and returns it, checking it is the only one.
async fn span_of(collector: &Collector, trace: &str, name: &str) -> Received {
    let spans = collector
        .wait_for(&format!("a span of trace {trace}"), |r| {
            hex(&r.span.trace_id) == trace && r.span.name == name
        })
        .await;
    let found: Vec<_> = of_trace(&spans, trace)
        .into_iter()
        .filter(|r| r.span.name == name)
        .collect();
    assert_eq!(found.len(), 1, "{found:#?}");
    found[0].clone()
}

const TRACE_A: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const TRACE_B: &str = "0af7651916cd43dd8448eb211c80319c";
const TRACE_C: &str = "11111111111111112222222222222222";
const PARENT: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_sampled_traceparent_makes_meshlimits_span_its_child_over_grpc() {
    let collector = Collector::start().await;
    let (ml, _dir) = traced_to(&collector, "grpc", &[]).await;

    let first = traceparent(TRACE_A, PARENT, true);
    let answer = ask(&ml, "v", &[("traceparent", &first)]).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let second = traceparent(TRACE_B, PARENT, true);
    let answer = ask(&ml, "v", &[("traceparent", &second)]).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32);

    for (trace, code) in [(TRACE_A, "OK"), (TRACE_B, "OVER_LIMIT")] {
        let span = span_of(&collector, trace, GRPC_SPAN).await;
        assert_eq!(hex(&span.span.parent_span_id), PARENT);
        assert_eq!(span.span.kind, 2, "a server span");
        assert_eq!(span.attribute("domain").as_deref(), Some("traced"));
        assert_eq!(span.attribute("descriptors").as_deref(), Some("1"));
        assert_eq!(span.attribute("overall_code").as_deref(), Some(code));
        assert_eq!(span.attribute("rpc.system").as_deref(), Some("grpc"));
        assert_eq!(span.attribute("rpc.grpc.status_code").as_deref(), Some("0"));
        assert_eq!(span.resource("service.name").as_deref(), Some("RateLimit"));
        let instance = span
            .resource("service.instance.id")
            .expect("an instance id");
        assert_eq!(instance.len(), 36, "a UUID: {instance}");
    }
}

#[tokio::test]
async fn unsampled_parents_and_unsampled_roots_are_not_traced() {
    let collector = Collector::start().await;
    let (ml, _dir) = traced_to(&collector, "grpc", &["--tracing-sampling-rate", "0"]).await;

    let unsampled = traceparent(TRACE_A, PARENT, false);
    ask(&ml, "a", &[("traceparent", &unsampled)]).await;
    let b3_unsampled = format!("{TRACE_B}-{PARENT}-0");
    ask(&ml, "b", &[("b3", &b3_unsampled)]).await;
    // A root, at a sampling rate of 0.
    ask(&ml, "c", &[]).await;
    // A sampled parent is followed whatever the rate: this span marks the end. Spans are
    // exported in the order they end, so the ones above would have come before it.
    let sampled = traceparent(TRACE_C, PARENT, true);
    ask(&ml, "d", &[("traceparent", &sampled)]).await;
    span_of(&collector, TRACE_C, GRPC_SPAN).await;
    let spans = collector.spans();
    assert_eq!(spans.len(), 1, "only the sampled call: {spans:#?}");
}

#[tokio::test]
async fn b3_headers_make_meshlimits_span_their_child() {
    let collector = Collector::start().await;
    let (ml, _dir) = traced_to(&collector, "grpc", &[]).await;

    let single = format!("{TRACE_A}-{PARENT}-1");
    ask(&ml, "a", &[("b3", &single)]).await;
    let multi = [
        ("x-b3-traceid", TRACE_B),
        ("x-b3-spanid", PARENT),
        ("x-b3-sampled", "1"),
    ];
    ask(&ml, "b", &multi).await;
    for trace in [TRACE_A, TRACE_B] {
        let span = span_of(&collector, trace, GRPC_SPAN).await;
        assert_eq!(hex(&span.span.parent_span_id), PARENT);
    }
}

#[tokio::test]
async fn the_go_variables_and_otel_variables_send_spans_over_http() {
    let collector = Collector::start().await;
    let root = tempfile::tempdir().expect("tempdir");
    let config = root.path().join("ratelimit/config");
    std::fs::create_dir_all(&config).expect("the config directory");
    std::fs::write(config.join("limits.yaml"), LIMITS).expect("writing the limits");
    let (grpc, http) = (free_port().to_string(), free_port().to_string());
    let endpoint = collector.http_endpoint();
    let env = [
        ("RUNTIME_ROOT", root.path().to_str().unwrap()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", &grpc),
        ("HOST", "127.0.0.1"),
        ("PORT", &http),
        ("LOG_LEVEL", "info"),
        ("TRACING_ENABLED", "true"),
        ("TRACING_SERVICE_NAME", "edge-limits"),
        ("TRACING_SERVICE_NAMESPACE", "edge"),
        ("TRACING_SERVICE_INSTANCE_ID", "pod-7"),
        ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &endpoint),
        ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=blue"),
        QUICK_BATCHES,
    ];
    let ml = Meshlimit::start_with(&[], &env).await;

    let parent = traceparent(TRACE_A, PARENT, true);
    ask(&ml, "v", &[("traceparent", &parent)]).await;
    let span = span_of(&collector, TRACE_A, GRPC_SPAN).await;
    assert_eq!(hex(&span.span.parent_span_id), PARENT);
    assert_eq!(span.header("x-tenant"), Some("blue"));
    assert_eq!(span.header("content-type"), Some("application/x-protobuf"));
    assert_eq!(
        span.resource("service.name").as_deref(),
        Some("edge-limits")
    );
    assert_eq!(span.resource("service.namespace").as_deref(), Some("edge"));
    assert_eq!(
        span.resource("service.instance.id").as_deref(),
        Some("pod-7")
    );
}

#[tokio::test]
async fn a_json_request_is_traced_too() {
    let collector = Collector::start().await;
    let (ml, _dir) = traced_to(&collector, "http", &[]).await;

    let parent = traceparent(TRACE_A, PARENT, true);
    let body = r#"{"domain":"traced","descriptors":[{"entries":[{"key":"k","value":"j"}]}]}"#;
    let headers = [("traceparent", parent.as_str())];
    let (status, _, _) = support::http_send(ml.http, "POST", "/json", &headers, body)
        .await
        .expect("a /json answer");
    assert_eq!(status, 200);
    let span = span_of(&collector, TRACE_A, "POST /json").await;
    assert_eq!(hex(&span.span.parent_span_id), PARENT);
    assert_eq!(span.attribute("domain").as_deref(), Some("traced"));
    assert_eq!(span.attribute("overall_code").as_deref(), Some("OK"));
}

#[tokio::test]
async fn the_redis_call_is_a_child_of_meshlimits_span() {
    let collector = Collector::start().await;
    let redis = RedisServer::start();
    let url = redis.url();
    let store = [
        "--store",
        "redis",
        "--redis-url",
        &url,
        "--redis-timeout-ms",
        "5000",
    ];
    let (ml, _dir) = traced_to(&collector, "grpc", &store).await;

    let parent = traceparent(TRACE_A, PARENT, true);
    let answer = ask(&ml, "v", &[("traceparent", &parent)]).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let server = span_of(&collector, TRACE_A, GRPC_SPAN).await;
    let store = span_of(&collector, TRACE_A, "Redis Pipeline Execution").await;
    assert_eq!(store.span.parent_span_id, server.span.span_id);
    assert_eq!(store.span.kind, 3, "a client span");
    assert_eq!(store.attribute("db.system.name").as_deref(), Some("redis"));
    assert_eq!(store.attribute("checks").as_deref(), Some("1"));
}

/// 50 sampled calls to `ml`, each answered OK; then a warning containing `warning`, then
/// another call answered.
async fn answers_and_warns(ml: &Meshlimit, warning: &str) {
    for i in 0..50 {
        let parent = traceparent(TRACE_A, PARENT, true);
        let answer = ask(ml, &format!("v{i}"), &[("traceparent", &parent)]).await;
        assert_eq!(answer.overall_code, Code::Ok as i32);
    }
    support::eventually(30, &format!("a warning {warning:?}"), || {
        ml.log().contains(warning)
    })
    .await;
    let answer = ask(ml, "after", &[]).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
}

#[tokio::test]
async fn a_collector_that_is_down_costs_no_request() {
    let dir = limits();
    let nobody = format!("http://127.0.0.1:{}", free_port());
    let grpc = ["--tracing-protocol", "grpc", "--tracing-endpoint", &nobody];
    let over_http = format!("{nobody}/v1/traces");
    let http = [
        "--tracing-protocol",
        "http",
        "--tracing-endpoint",
        &over_http,
    ];
    for flags in [&grpc[..], &http[..]] {
        let ml = traced(dir.path(), flags, &[]).await;
        answers_and_warns(&ml, "cannot export spans").await;
    }
}

#[tokio::test]
async fn a_collector_that_never_answers_costs_no_request_and_a_full_queue_drops_spans() {
    let dir = limits();
    // Accepts connections and never answers on them.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let endpoint = format!("http://{}", silent.local_addr().unwrap());
    let holder = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = silent.accept().await {
            held.push(socket);
        }
    });
    let over_http = format!("{endpoint}/v1/traces");
    let grpc = [
        "--tracing-protocol",
        "grpc",
        "--tracing-endpoint",
        &endpoint,
    ];
    let http = [
        "--tracing-protocol",
        "http",
        "--tracing-endpoint",
        &over_http,
    ];
    // A queue of 8 spans, exports bounded by half a second.
    let env = [
        ("OTEL_BSP_MAX_QUEUE_SIZE", "8"),
        ("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "8"),
        ("OTEL_EXPORTER_OTLP_TIMEOUT", "500"),
    ];
    for flags in [&grpc[..], &http[..]] {
        let ml = traced(dir.path(), flags, &env).await;
        answers_and_warns(&ml, "SpanDroppingStarted").await;
        support::eventually(30, "a warning about the lost spans", || {
            ml.log().contains("cannot export spans")
        })
        .await;
    }
    holder.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoys_span_and_meshlimits_are_one_trace() {
    let collector = Collector::start().await;
    let (ml, _dir) = traced_to(&collector, "grpc", &[]).await;
    let (grpc, otlp) = (ml.grpc, collector.grpc);
    let envoy = Envoy::start(2, |ports| envoy_yaml(ports, grpc, otlp)).await;

    let reply = support::envoy::request(envoy.listener(0), "/", &[("x-key", "e")])
        .await
        .expect("an answer through Envoy");
    assert_eq!(reply.status, 200, "{}", reply.body);
    let spans = collector
        .wait_for("meshlimit's span", |r| r.span.name == GRPC_SPAN)
        .await;
    let ours = spans
        .iter()
        .find(|r| r.span.name == GRPC_SPAN)
        .expect("waited for");
    let trace = hex(&ours.span.trace_id);
    // Envoy's spans arrive on its own schedule; wait for the one meshlimit's is a child of.
    let spans = collector
        .wait_for("Envoy's span that is meshlimit's parent", |r| {
            r.span.span_id == ours.span.parent_span_id
        })
        .await;
    let parent = spans
        .iter()
        .find(|r| r.span.span_id == ours.span.parent_span_id)
        .expect("waited for");
    assert_eq!(hex(&parent.span.trace_id), trace, "one trace");
    assert_eq!(parent.resource("service.name").as_deref(), Some("envoy"));
    // Envoy's span of its rate-limit call, a child of its span of the request.
    assert!(
        parent.span.name.contains("ShouldRateLimit"),
        "{:?}",
        parent.span.name
    );
    collector
        .wait_for("Envoy's span of the request", |r| {
            r.span.span_id == parent.span.parent_span_id && hex(&r.span.trace_id) == trace
        })
        .await;
    assert_eq!(ours.resource("service.name").as_deref(), Some("RateLimit"));
    assert_eq!(ours.attribute("domain").as_deref(), Some("traced"));
}

/// A front listener (port 0) that rate-limits every request on `x-key` through meshlimit
/// and traces every request to the collector, and the backend (port 1).
fn envoy_yaml(ports: &EnvoyPorts, grpc: SocketAddr, otlp: SocketAddr) -> String {
    support::envoy::with_front(&support::envoy::with_backend(ENVOY))
        .replace("@ADMIN@", &ports.admin.to_string())
        .replace("@FRONT@", &ports.listeners[0].to_string())
        .replace("@BACKEND@", &ports.listeners[1].to_string())
        .replace(
            "@MESHLIMIT_CLUSTER@\n",
            &h2_cluster("meshlimit", &loopback(grpc)),
        )
        .replace("@OTLP_CLUSTER@\n", &h2_cluster("otlp", &loopback(otlp)))
}

const ENVOY: &str = r#"
@FRONT_HEAD@
          stat_prefix: front
          tracing:
            random_sampling: { value: 100 }
            provider:
              name: envoy.tracers.opentelemetry
              typed_config:
                "@type": type.googleapis.com/envoy.config.trace.v3.OpenTelemetryConfig
                grpc_service:
                  envoy_grpc: { cluster_name: otlp }
                  timeout: 5s
                service_name: envoy
          route_config:
            virtual_hosts:
            - name: front
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - request_headers: { header_name: x-key, descriptor_key: k }
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: traced
              failure_mode_deny: true
              timeout: 10s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: { cluster_name: meshlimit }
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
@BACKEND_LISTENER@
  clusters:
@BACKEND_CLUSTER@
@MESHLIMIT_CLUSTER@
@OTLP_CLUSTER@
"#;

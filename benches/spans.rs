//! What tracing costs a `ShouldRateLimit` call, through the gRPC route as a connection
//! hands it a request (headers as Envoy sends them, one DATA frame), on the embedded store;
//! the requests are built outside the timed loop:
//!
//! - `tracing/off`: no `--tracing`; the request carries an unsampled `traceparent`.
//! - `tracing/on_unsampled_parent`: `--tracing`, the same request: the parent is not
//!   sampled, so neither is the call.
//! - `tracing/off_no_headers`, `tracing/on_unsampled_root`: no trace headers, without
//!   `--tracing` and with `--tracing-sampling-rate 0`.
//! - `tracing/on_sampled`: a sampled `traceparent`: the span is built, recorded and handed
//!   to the batch processor (its exporter discards the batches).
//! - `tracing/decision/{unsampled_parent,unsampled_root,sampled}`: the sampling decision
//!   alone (`Traces::server_span` on the request's headers), which is all an unsampled
//!   call adds.
//!
//! Target: `on_unsampled_parent` at most 100 ns above `off`, `on_unsampled_root` above
//! `off_no_headers`.

use std::hint::black_box;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use criterion::{BatchSize, BenchmarkGroup, Criterion, Throughput, measurement::WallTime};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use http::{HeaderValue, Request};
use http_body::Frame;
use meshlimit::grpc::{RateLimitServer, Rls};
use meshlimit::traces::Traces;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, Sampler, SdkTracerProvider, SpanData, SpanExporter,
};
use prost::Message;
use tower_service::Service as _;

use crate::fixture::{ready, service};

const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const UNSAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";
const SAMPLED: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

pub fn tracing(c: &mut Criterion) {
    let mut group = c.benchmark_group("tracing");
    group.throughput(Throughput::Elements(1));
    let frames = messages();
    // Kept alive for the whole group: its batch thread takes the sampled spans.
    let every = provider(1.0);
    let none = provider(0.0);
    let traced = |provider: &SdkTracerProvider| Some(Traces::new(provider.tracer("bench")));
    let cases = [
        ("off", None, Some(UNSAMPLED)),
        ("on_unsampled_parent", traced(&every), Some(UNSAMPLED)),
        ("off_no_headers", None, None),
        ("on_unsampled_root", traced(&none), None),
        ("on_sampled", traced(&every), Some(SAMPLED)),
    ];
    for (name, traces, parent) in cases {
        let server = Rls::new(service(true)).with_traces(traces).into_server();
        calls(&mut group, name, server, &frames, parent);
    }
    let decisions = [
        ("decision/unsampled_parent", &every, Some(UNSAMPLED)),
        ("decision/unsampled_root", &none, None),
        ("decision/sampled", &every, Some(SAMPLED)),
    ];
    for (name, provider, parent) in decisions {
        let traces = Traces::new(provider.tracer("bench"));
        let headers = request(Bytes::new(), parent).into_parts().0.headers;
        group.bench_function(name, |b| {
            b.iter(|| black_box(traces.server_span(black_box(&headers), "bench")))
        });
    }
    group.finish();
    let _ = every.shutdown();
    let _ = none.shutdown();
}

/// Bench `name`: a call of each of `frames` in turn, with `traceparent` if given; each
/// request is built before its call is timed.
fn calls(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    mut server: RateLimitServer,
    frames: &[Bytes],
    traceparent: Option<&'static str>,
) {
    let mut i = 0;
    group.bench_function(name, |b| {
        b.iter_batched(
            || {
                i = (i + 1) % frames.len();
                request(frames[i].clone(), traceparent)
            },
            |request| black_box(ready(server.call(request)).unwrap()),
            BatchSize::SmallInput,
        )
    });
}

/// A call of `frame` with Envoy's headers, and `traceparent` if given.
fn request(frame: Bytes, traceparent: Option<&'static str>) -> Request<OneFrame> {
    let mut request = Request::post(PATH)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("x-envoy-internal", "true")
        .body(OneFrame(Some(frame)))
        .unwrap();
    if let Some(parent) = traceparent {
        let value = HeaderValue::from_static(parent);
        request.headers_mut().insert("traceparent", value);
    }
    request
}

/// Tracing as `--tracing` builds it, parent-based with roots sampled at `rate`, its spans
/// batched to an exporter that discards them.
fn provider(rate: f64) -> SdkTracerProvider {
    SdkTracerProvider::builder()
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            rate,
        ))))
        .with_span_processor(BatchSpanProcessor::builder(Discard).build())
        .build()
}

/// Three-descriptor requests of 1024 users, each one gRPC message.
fn messages() -> Vec<Bytes> {
    let entry = |key: &str, value: &str| Entry {
        key: key.into(),
        value: value.into(),
    };
    (0..1024)
        .map(|i| {
            let descriptors = vec![
                vec![
                    entry("user_id", &format!("user-{i}")),
                    entry("method", "/trading.TradingService/SubmitOrder"),
                ],
                vec![entry(
                    "remote_address",
                    &format!("10.0.{}.{}", i / 256, i % 256),
                )],
                vec![entry("tier", "trading")],
            ];
            let request = RateLimitRequest {
                domain: "bench".into(),
                descriptors: descriptors
                    .into_iter()
                    .map(|entries| RateLimitDescriptor {
                        entries,
                        ..Default::default()
                    })
                    .collect(),
                hits_addend: 1,
            };
            let message = request.encode_to_vec();
            let mut frame = BytesMut::new();
            frame.put_u8(0);
            frame.put_u32(message.len() as u32);
            frame.put_slice(&message);
            frame.freeze()
        })
        .collect()
}

/// A request body of one DATA frame, then its end.
struct OneFrame(Option<Bytes>);

impl http_body::Body for OneFrame {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.take().map(|data| Ok(Frame::data(data))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }
}

/// An exporter that drops every batch.
#[derive(Debug)]
struct Discard;

impl SpanExporter for Discard {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        Ok(())
    }
}

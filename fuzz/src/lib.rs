//! What the fuzz targets run, kept here so that each target is one line and a new one is
//! one file plus one `[[bin]]` entry in Cargo.toml.
//!
//! Every function must return normally for any input: a panic is a bug in meshlimit (or
//! in this harness). Decisions are made on a manual clock, so a crash input replays the
//! same way.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arbitrary::Arbitrary;
use arc_swap::ArcSwap;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::{
    Entry, RateLimitOverride,
};
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::google::protobuf::UInt64Value;
use meshlimit::clock::{Clock, ManualClock};
use meshlimit::config::{Config, render_errors};
use meshlimit::grpc::{HeaderNames, Rls};
use meshlimit::metrics::Metrics;
use meshlimit::rules::Algorithm;
use meshlimit::service::Service;
use meshlimit::store::{MemoryStore, Store};

/// The fixed config of the request and `/json` targets: every kind of rule in a few lines.
pub const CONFIG: &str = "\
domain: fuzz
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: window
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: fixed_window}
  - key: tier
    value: gold*
    rate_limit: {unit: hour, requests_per_unit: 5, burst: 2}
  - key: client
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 4}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: zero
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: tokens
    rate_limit: {unit: minute, requests_per_unit: 100, burst: 20, charge: always}
  - key: spend
    charge: always
    rate_limits:
      - {unit: second, requests_per_unit: 5, algorithm: sliding_window, name: spend_second}
      - {unit: hour, requests_per_unit: 50, algorithm: fixed_window, name: spend_hour}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 10, name: tenant_day}
    descriptors:
      - key: path
        value: /orders
        rate_limit:
          unit: second
          requests_per_unit: 1
          replaces: [{name: tenant_day}]
      - key: path
        detailed_metric: true
        rate_limit: {unit: week, requests_per_unit: 7}
";

/// Words the structured inputs pick from, so that requests match the config's rules
/// often; anything else can still come as [`Text::Raw`].
const WORDS: [&str; 18] = [
    "fuzz", "user", "window", "tier", "gold1", "client", "shadow", "quota", "free", "zero",
    "tenant", "path", "/orders", "a", "", "10.0.0.1", "tokens", "spend",
];

/// 2026-01-01T00:00:00Z in nanoseconds: where the manual clock starts.
const START: u64 = 1_767_225_600_000_000_000;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fn fixed_config() -> Arc<Config> {
    static CONFIG_LOADED: OnceLock<Arc<Config>> = OnceLock::new();
    CONFIG_LOADED
        .get_or_init(|| {
            let sources = [(PathBuf::from("fuzz.yaml"), CONFIG.to_string())];
            Arc::new(Config::from_sources(&sources).expect("the fuzz config is valid"))
        })
        .clone()
}

/// A fresh service on [`CONFIG`] and the embedded store, with its manual clock.
pub fn service() -> (Service, ManualClock) {
    let clock = ManualClock::new(START);
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let store = Store::Memory(MemoryStore::new(1_000, shared.clone()));
    let config = Arc::new(ArcSwap::new(fixed_config()));
    let service = Service::new(config, store, shared, Algorithm::TokenBucket);
    let metrics = Metrics::new(service.config().clone(), service.store().clone());
    metrics.set_max_metric_values(4);
    (service.with_metrics(Arc::new(metrics)), clock)
}

/// Config loader target: `data` as the one domain file of a config.
pub fn config_loader(data: &[u8]) {
    // `meshlimit validate` reads files with `read_to_string`: non-UTF-8 stops there.
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match Config::from_sources(&[(PathBuf::from("fuzz.yaml"), text.to_string())]) {
        Ok(config) => {
            // What the server does next with a loaded config: list its rules and build
            // the metrics table over them.
            let rules = config.rules().len();
            let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(START));
            let store = Store::Memory(MemoryStore::new(16, clock));
            let config = Arc::new(ArcSwap::from_pointee(config));
            let text = Metrics::new(config, store).render();
            assert!(rules == 0 || !text.is_empty());
        }
        Err(errors) => {
            assert!(!errors.is_empty());
            let _ = render_errors(&errors);
        }
    }
}

/// A string: one of [`WORDS`] or anything.
#[derive(Arbitrary, Debug)]
pub enum Text {
    /// `WORDS[n % WORDS.len()]`.
    Word(u8),
    /// Any string.
    Raw(String),
}

impl Text {
    fn string(&self) -> String {
        match self {
            Text::Word(n) => WORDS[usize::from(*n) % WORDS.len()].to_string(),
            Text::Raw(text) => text.clone(),
        }
    }
}

/// One descriptor of a structured request.
#[derive(Arbitrary, Debug)]
pub struct Descriptor {
    /// (key, value) entries.
    pub entries: Vec<(Text, Text)>,
    /// A limit override: requests per unit and the unit's number (any `i32`).
    pub limit: Option<(u32, i32)>,
    /// Descriptor-level hits.
    pub hits_addend: Option<u64>,
    /// A refund: given back on a rule whose limits all charge, refused elsewhere.
    pub is_negative_hits: bool,
}

/// One request, after `advance_ms` of time.
#[derive(Arbitrary, Debug)]
pub struct Step {
    /// Milliseconds the clock moves before the request.
    pub advance_ms: u32,
    /// The request's domain.
    pub domain: Text,
    /// Its descriptors.
    pub descriptors: Vec<Descriptor>,
    /// Request-level hits.
    pub hits_addend: u32,
}

impl Step {
    /// The protobuf request this step stands for.
    pub fn request(&self) -> RateLimitRequest {
        RateLimitRequest {
            domain: self.domain.string(),
            descriptors: self
                .descriptors
                .iter()
                .map(|d| RateLimitDescriptor {
                    entries: d
                        .entries
                        .iter()
                        .map(|(k, v)| Entry {
                            key: k.string(),
                            value: v.string(),
                        })
                        .collect(),
                    limit: d.limit.map(|(requests_per_unit, unit)| RateLimitOverride {
                        requests_per_unit,
                        unit,
                    }),
                    hits_addend: d.hits_addend.map(|value| UInt64Value { value }),
                    is_negative_hits: d.is_negative_hits,
                })
                .collect(),
            hits_addend: self.hits_addend,
        }
    }
}

/// Request target: the steps in order through the gRPC handler, then a scrape.
pub fn requests(steps: Vec<Step>) {
    let (service, clock) = service();
    let rls = Rls::new(service.clone()).with_response_headers(Some(HeaderNames::default()));
    runtime().block_on(async {
        for step in steps.iter().take(32) {
            clock.advance(Duration::from_millis(u64::from(step.advance_ms)));
            let request = step.request();
            let asked = request.descriptors.len();
            let message = prost::Message::encode_to_vec(&request).into();
            if let Ok(answer) = rls.should_rate_limit_traced(message, None).await {
                // What the route sends is what prost would have encoded.
                let mut written = Vec::new();
                answer.encode(&mut written);
                let response = answer.into_proto();
                assert_eq!(written, prost::Message::encode_to_vec(&response));
                assert_eq!(response.statuses.len(), asked);
            }
        }
    });
    if let Some(metrics) = service.metrics() {
        let _ = metrics.render();
    }
}

/// Request-bytes target: `data` as a `ShouldRateLimit` message, answered by one service,
/// and the same request as prost encodes it (when prost decodes `data`) by a twin service.
/// Messages the gRPC handler reads in place and messages it leaves to prost must be
/// answered alike; a message prost refuses must be refused `INVALID_ARGUMENT`.
pub fn request_bytes(data: &[u8]) {
    let twin = || Rls::new(service().0).with_response_headers(Some(HeaderNames::default()));
    let (as_sent, as_encoded) = (twin(), twin());
    runtime().block_on(async {
        let answer = as_sent.should_rate_limit_traced(data.to_vec().into(), None).await;
        match <RateLimitRequest as prost::Message>::decode(data) {
            Ok(request) => {
                let canonical = prost::Message::encode_to_vec(&request).into();
                let expected = as_encoded.should_rate_limit_traced(canonical, None).await;
                match (answer, expected) {
                    (Ok(answer), Ok(expected)) => assert_eq!(answer, expected),
                    (Err(answer), Err(expected)) => {
                        assert_eq!(answer.code(), expected.code());
                        assert_eq!(answer.message(), expected.message());
                    }
                    (answer, expected) => panic!("{answer:?} where prost gives {expected:?}"),
                }
            }
            Err(_) => {
                let refusal = answer.expect_err("a message prost refuses was answered");
                assert_eq!(refusal.code(), tonic::Code::InvalidArgument);
            }
        }
    });
}

/// `/json` target: `data` as the body of a `POST /json`.
pub fn json_body(data: &[u8]) {
    let (service, _clock) = service();
    let response = runtime().block_on(meshlimit::http::json_answer(&service, data));
    let code = response.status().as_u16();
    assert!(matches!(code, 200 | 429 | 400), "status {code}");
}

/// Arbitrary bytes as the decision script's reply, the way Redis sends it (RESP), through
/// the parser the Redis store uses. Any input gives a reply or an error; a reply that
/// parses has the script's shape: one flag, then five numbers per check.
pub fn redis_reply(data: &[u8]) {
    use meshlimit::store::redis::reply;
    if let Ok(parsed) = reply::parse_resp(data) {
        let Ok(redis::Value::Array(items)) = redis::parse_redis_value(data) else {
            panic!("a reply parsed from bytes that are not a RESP array");
        };
        assert_eq!(items.len(), 1 + 5 * parsed.checks.len());
    }
}

//! What `meshlimit serve` needs, whatever it was parsed from, with the command line's
//! defaults.

use crate::rlqs::Unmatched;
use std::path::PathBuf;
use std::time::Duration;

use crate::config::SharedDomains;
use crate::defaults;
use crate::grpc::HeaderNames;
use crate::net::{GiveBack, TlsFiles};
use crate::request_caps::RequestCaps;
use crate::rules::Algorithm;
use crate::source::ConfigSource;
use crate::statsd::StatsdSettings;
use crate::store::redis::RedisOptions;
use crate::traces::TracingOptions;

/// What `meshlimit serve` needs, whatever it was parsed from.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Where the config comes from; followed, and swapped when a valid change lands.
    pub config: ConfigSource,
    /// Serve an empty config (every request OK) until the source's first snapshot loads,
    /// instead of waiting for it or refusing to start (the Go server's
    /// `FORCE_START_WITHOUT_INITIAL_CONFIG`).
    pub start_without_config: bool,
    /// Health checks fail until a config from the source is in force (the Go server's
    /// `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`); matters with `start_without_config`.
    pub unhealthy_without_config: bool,
    /// Algorithm for rules that do not name one.
    pub algorithm: Algorithm,
    /// Upper bound on buckets held by the embedded store, so that a flood of distinct
    /// keys evicts old buckets instead of exhausting memory.
    pub max_buckets: u64,
    /// Quiet time after the last file event before a reload, so that the several writes
    /// of one edit (or of a Kubernetes ConfigMap swap) make one reload.
    pub reload_debounce: Duration,
    /// The Redis store, or `None` for the embedded one.
    pub redis: Option<RedisOptions>,
    /// Global shadow mode: every request is answered OK overall; statuses still tell.
    pub global_shadow: bool,
    /// Global quota mode: every descriptor counts as a quota-mode one.
    pub global_quota: bool,
    /// Answers carry dynamic metadata (the Go server's `RESPONSE_DYNAMIC_METADATA`).
    pub dynamic_metadata: bool,
    /// `RateLimit-*` response headers for Envoy to add, or `None` (the default).
    pub response_headers: Option<HeaderNames>,
    /// Also the IETF draft's `RateLimit-Policy` and `RateLimit` fields, one policy per
    /// limit of every limited descriptor (`--ratelimit-headers draft`); off by default.
    pub draft_headers: bool,
    /// After the shutdown signal: how long health checks fail while everything still
    /// serves, so that load balancers stop sending before connections close.
    pub drain_delay: Duration,
    /// Longest wait for in-flight gRPC calls once the server stops accepting, so that a
    /// stuck call cannot hold the shutdown forever.
    pub drain_timeout: Duration,
    /// Share of a limit from which hits count as `near_limit` (the Go server's
    /// `NEAR_LIMIT_RATIO`).
    pub near_limit_ratio: f32,
    /// Where the operator endpoints also serve the Prometheus text, besides `/metrics`
    /// (the Go server's `PROMETHEUS_PATH`).
    pub metrics_path: String,
    /// A statsd_exporter mapping file (the Go server's `PROMETHEUS_MAPPER_YAML`) the Go
    /// server's families go through, followed for changes; `None`: the Go server's
    /// built-in mapping (see [`crate::metrics::Mapping`]).
    pub metrics_mapping: Option<PathBuf>,
    /// Upper bound on the bytes held by the embedded store (a fixed size per bucket, plus
    /// the limits of `rate_limits` lists), beside the bucket count.
    pub max_store_bytes: u64,
    /// A connection (HTTP or gRPC) with nothing from the peer and no request in flight
    /// for this long is closed, so that abandoned connections give their places back.
    pub idle_timeout: Duration,
    /// Most connections open at once over all ports (`None`: what the file-descriptor
    /// limit allows, see [`crate::net::descriptors::default_max_connections`]).
    pub max_connections: Option<usize>,
    /// gRPC connections older than this (±10%) are asked to close (`None`: never; the Go
    /// server's `GRPC_MAX_CONNECTION_AGE`), so that clients rebalance over replicas.
    pub grpc_max_connection_age: Option<Duration>,
    /// After that GOAWAY, how long calls in flight may still run (the Go server's
    /// `GRPC_MAX_CONNECTION_AGE_GRACE`).
    pub grpc_max_connection_age_grace: Duration,
    /// TLS (and mTLS) on the gRPC address; `None`: plain.
    pub grpc_tls: Option<TlsFiles>,
    /// TLS on the main HTTP address (never client certificates); `None`: plain.
    pub http_tls: Option<TlsFiles>,
    /// Caps on descriptors, entries and bytes per request (`--max-descriptors`,
    /// `--max-entries`, `--max-value-bytes`), so that one request's cost stays bounded.
    pub request_caps: RequestCaps,
    /// The file holding the token that guards the operator endpoints (see
    /// [`crate::admin_token`]); `None`: no guard.
    pub admin_token_file: Option<PathBuf>,
    /// Who may give budget back: refunds and settles of holds (`--give-back-from`).
    pub give_back: GiveBack,
    /// Most series each `detailed_metric` or `value_to_metric` rule creates for request
    /// values, and most unknown domains with a series of their own, so that callers
    /// cannot grow the metrics without bound.
    pub max_metric_values: usize,
    /// What the quota service assigns a bucket that matches no rule (`--rlqs-unmatched`).
    pub rlqs_unmatched: Unmatched,
    /// The time to live of every quota assignment (`--rlqs-assignment-ttl-ms`).
    pub rlqs_assignment_ttl: Duration,
    /// Where the Go server's stats also go, by statsd (`--statsd-addr`); `None`: only
    /// `/metrics`.
    pub statsd: Option<StatsdSettings>,
    /// OpenTelemetry tracing (`--tracing`); `None`: off, the default.
    pub tracing: Option<TracingOptions>,
}

impl Settings {
    /// The command line's defaults ([`crate::defaults`]) for everything but the config
    /// path (a file or directory): the embedded store, no TLS, no admin token, the command line's drain delay
    /// (tests that stop servers often set [`Settings::drain_delay`] to zero).
    pub fn new(config: impl Into<PathBuf>) -> Self {
        Self::from_source(ConfigSource::File {
            path: config.into(),
            domains: SharedDomains::Refused,
        })
    }

    /// [`Settings::new`] for any config source.
    pub fn from_source(config: ConfigSource) -> Self {
        Self {
            config,
            start_without_config: false,
            unhealthy_without_config: false,
            algorithm: defaults::ALGORITHM,
            max_buckets: defaults::MAX_BUCKETS,
            reload_debounce: defaults::RELOAD_DEBOUNCE,
            redis: None,
            global_shadow: false,
            global_quota: false,
            dynamic_metadata: false,
            response_headers: None,
            draft_headers: false,
            drain_delay: defaults::DRAIN_DELAY,
            drain_timeout: defaults::DRAIN_TIMEOUT,
            metrics_path: defaults::METRICS_PATH.into(),
            metrics_mapping: None,
            near_limit_ratio: defaults::NEAR_LIMIT_RATIO,
            max_store_bytes: defaults::MAX_STORE_BYTES,
            idle_timeout: defaults::IDLE_TIMEOUT,
            max_connections: None,
            grpc_max_connection_age: defaults::GRPC_MAX_CONNECTION_AGE,
            grpc_max_connection_age_grace: defaults::GRPC_MAX_CONNECTION_AGE_GRACE,
            grpc_tls: None,
            http_tls: None,
            request_caps: RequestCaps::default(),
            admin_token_file: None,
            give_back: GiveBack::default(),
            max_metric_values: defaults::MAX_METRIC_VALUES,
            rlqs_unmatched: Unmatched::Allow,
            rlqs_assignment_ttl: defaults::RLQS_ASSIGNMENT_TTL,
            statsd: None,
            tracing: None,
        }
    }
}

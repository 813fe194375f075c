//! Every default of `meshlimit serve` and `meshlimit explain`, of `app::Settings` and of the
//! stores, written once.
//!
//! The command line's attributes, `Settings::new`, the stores' constructors, the request
//! caps, the metrics and the translation of the Go server's variables all read them here,
//! so that the binary and the library cannot start from different values. Durations are
//! [`Duration`]s; the command line shows them in milliseconds.
//!
//! A leaf: nothing here depends on the rest of the crate but the [`Algorithm`] type.
//! Settings that are off unless given (Redis, TLS, the admin token, more addresses) have no
//! entry; the connection cap's default is computed from the descriptor limit at startup
//! (`net::descriptors::default_max_connections`).

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::Duration;

use crate::rules::Algorithm;

/// `--grpc-addr`: every interface, on the Go server's gRPC port (a drop-in listens where
/// Envoy already points).
pub const GRPC_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8081));

/// `--http-addr`: every interface, on the Go server's HTTP port.
pub const HTTP_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 8080));

/// `--metrics-path`: where the Prometheus text is served besides `/metrics` (the same path,
/// so by default nothing is added).
pub const METRICS_PATH: &str = "/metrics";

/// The root of `--config` when it is not given: the Go server's `RUNTIME_ROOT`.
pub const RUNTIME_ROOT: &str = "/srv/runtime_data/current";

/// The last part of `--config` when it is not given: the Go server's `RUNTIME_APPDIRECTORY`.
pub const RUNTIME_APP_DIRECTORY: &str = "config";

/// `--algorithm`: for rules that do not set `rate_limit.algorithm`.
pub const ALGORITHM: Algorithm = Algorithm::TokenBucket;

/// `--reload-debounce-ms`: quiet time after a config file event before reloading, so that
/// an editor's or Kubernetes' several writes make one reload.
pub const RELOAD_DEBOUNCE: Duration = Duration::from_millis(200);

/// `--max-buckets`: most buckets the embedded store (and the Redis store's local fallback)
/// holds.
pub const MAX_BUCKETS: u64 = 1_000_000;

/// `--max-store-bytes`: most bytes (keys and per-bucket overhead) the embedded store (and
/// the Redis store's local fallback) holds, 1 GiB.
pub const MAX_STORE_BYTES: u64 = 1 << 30;

/// `--redis-timeout-ms`: longest a request waits on Redis, connecting included.
pub const REDIS_TIMEOUT: Duration = Duration::from_millis(100);

/// `--redis-lease`: tokens leased beyond a request's own; 0, every decision in Redis,
/// because leases cost accuracy.
pub const REDIS_LEASE: u32 = 0;

/// `--redis-lease-ttl-ms`: how long unused leased tokens stay usable.
pub const REDIS_LEASE_TTL: Duration = Duration::from_secs(1);

/// `--redis-cache-size`: entries in each local cache in front of Redis.
pub const REDIS_CACHE_SIZE: u64 = 100_000;

/// `--redis-cache-ttl-ms`: longest a cached over-limit answer is trusted.
pub const REDIS_CACHE_TTL: Duration = Duration::from_secs(60);

/// `--redis-calls-in-flight`: script calls each Redis node has in flight at most. A node
/// learns how many pay (one where Redis is near, one more for every 75 µs of round trip
/// past 0.5 ms, fewer when Redis queues them); 16 is what a 1.6 ms round trip takes.
/// See docs/performance.md, "Redis across a network".
pub const REDIS_CALLS_IN_FLIGHT: usize = 16;

/// `--limit-header`: the IETF draft's name, as the Go server's `LIMIT_LIMIT_HEADER`.
pub const LIMIT_HEADER: &str = "RateLimit-Limit";

/// `--remaining-header`, as the Go server's `LIMIT_REMAINING_HEADER`.
pub const REMAINING_HEADER: &str = "RateLimit-Remaining";

/// `--reset-header`, as the Go server's `LIMIT_RESET_HEADER`.
pub const RESET_HEADER: &str = "RateLimit-Reset";

/// `--near-limit-ratio`: the Go server's `NEAR_LIMIT_RATIO`.
pub const NEAR_LIMIT_RATIO: f32 = 0.8;

/// `--max-metric-values`: distinct request values each `detailed_metric` (or
/// `value_to_metric`) rule, and distinct unknown domains, put in
/// metric labels before the rest share one overflow series.
pub const MAX_METRIC_VALUES: usize = 1000;

/// `--statsd-flush-ms`: the Go server's `STATS_FLUSH_INTERVAL`.
pub const STATSD_FLUSH: Duration = Duration::from_secs(10);

/// `--rlqs-assignment-ttl-ms`: how long a quota assignment holds in Envoy without being
/// renewed; past it, Envoy applies the bucket's `expired_assignment_behavior`.
pub const RLQS_ASSIGNMENT_TTL: Duration = Duration::from_secs(10);

/// `--tracing-service-name`: the Go server's `TRACING_SERVICE_NAME` default.
pub const TRACING_SERVICE_NAME: &str = "RateLimit";

/// `--tracing-sampling-rate`: every trace meshlimit starts is sampled, as the Go server's
/// `TRACING_SAMPLING_RATE` default.
pub const TRACING_SAMPLING_RATE: f64 = 1.0;

/// `--drain-delay-ms`: after the shutdown signal, how long health checks fail while
/// everything still serves, so that load balancers stop sending before connections close.
pub const DRAIN_DELAY: Duration = Duration::from_secs(1);

/// `--drain-timeout-ms`: longest wait for in-flight calls when stopping.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// `--idle-timeout-ms`: a connection with nothing from the peer and no request in flight
/// for this long is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(300);

/// `--grpc-max-connection-age-ms`: `None`, connections are kept until they are idle (the
/// flag says 0).
pub const GRPC_MAX_CONNECTION_AGE: Option<Duration> = None;

/// `--grpc-max-connection-age-grace-ms`: how long calls in flight may still run after an
/// age's GOAWAY.
pub const GRPC_MAX_CONNECTION_AGE_GRACE: Duration = Duration::from_secs(10);

/// `--max-descriptors`: most descriptors in one request.
pub const MAX_DESCRIPTORS: usize = 64;

/// `--max-entries`: most entries in one descriptor.
pub const MAX_ENTRIES: usize = 32;

/// `--max-value-bytes`: most bytes in a descriptor entry's key, and in its value.
pub const MAX_VALUE_BYTES: usize = 4096;

/// `--log`: the log filter.
pub const LOG_FILTER: &str = "info";

/// `--pg-table`: the table of a PostgreSQL config source, one row per domain.
pub const PG_TABLE: &str = "meshlimit_config";

/// `--pg-channel`: the NOTIFY channel announcing changes to that table.
pub const PG_CHANNEL: &str = "meshlimit_config";

/// `--xds-node-id`: the node id meshlimit gives the control plane (the Go server's
/// `CONFIG_GRPC_XDS_NODE_ID` default).
pub const XDS_NODE_ID: &str = "default";

/// `--xds-backoff-initial-ms`: the first wait before reconnecting to the control plane
/// (the Go server's `XDS_CLIENT_BACKOFF_INITIAL_INTERVAL`).
pub const XDS_BACKOFF_INITIAL: Duration = Duration::from_secs(10);

/// `--xds-backoff-max-ms`: the longest wait between reconnections (the Go server's
/// `XDS_CLIENT_BACKOFF_MAX_INTERVAL`).
pub const XDS_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// `--xds-backoff-random-factor`: each wait is spread by ± this share of itself (the Go
/// server's `XDS_CLIENT_BACKOFF_RANDOM_FACTOR`).
pub const XDS_BACKOFF_RANDOM_FACTOR: f64 = 0.5;

/// `--xds-max-msg-bytes`: the largest control-plane response accepted (gRPC's usual 4 MiB;
/// the Go server's `XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES`).
pub const XDS_MAX_MESSAGE_BYTES: usize = 4 << 20;

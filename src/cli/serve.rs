//! `meshlimit serve`: its flags, and serving until SIGTERM or Ctrl-C.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;

use super::source::SourceArgs;
use super::tracing::TracingArgs;
use super::values::{
    AlgorithmArg, FailureArg, LogFormat, RateLimitHeadersArg, StatsdProtocol, StatsdTags,
    StoreKind, UnmatchedArg, at_least_one, host_port, metrics_path, millis, ratio, statsd_tags,
};
use crate::app::{self, Listeners};
use crate::net::Listener;
use crate::source::ConfigSource;
use crate::{defaults, gocompat};

/// The flags of `meshlimit serve`; each field's comment is its `--help` text.
#[derive(Debug, clap::Args)]
pub struct Serve {
    /// Where the config comes from. Without --config or --xds-server: the Go server's
    /// RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
    /// /srv/runtime_data/current/config.
    #[command(flatten)]
    pub(crate) source: SourceArgs,
    /// OpenTelemetry tracing: off unless --tracing.
    #[command(flatten)]
    pub(crate) tracing: TracingArgs,
    /// Serve an empty config (every request allowed) until the source's first config
    /// loads, instead of waiting for it (xDS) or refusing to start (a file or PostgreSQL
    /// that cannot be read or is invalid).
    #[arg(long, env = "MESHLIMIT_START_WITHOUT_CONFIG")]
    pub(crate) start_without_config: bool,
    /// Health checks fail until a config from the source is in force (with
    /// --start-without-config).
    #[arg(long, env = "MESHLIMIT_UNHEALTHY_WITHOUT_CONFIG")]
    pub(crate) unhealthy_without_config: bool,
    /// gRPC listen address (RateLimitService and grpc.health.v1.Health).
    #[arg(long, env = "MESHLIMIT_GRPC_ADDR", default_value_t = defaults::GRPC_ADDR)]
    pub(crate) grpc_addr: SocketAddr,
    /// Serve gRPC on this Unix socket instead of --grpc-addr (for a sidecar on the same
    /// host). A socket file left by a stopped process is replaced.
    #[arg(long, env = "MESHLIMIT_GRPC_UDS")]
    pub(crate) grpc_uds: Option<PathBuf>,
    /// HTTP listen address (/healthcheck, /json, /rlconfig, /explain, /metrics).
    #[arg(long, env = "MESHLIMIT_HTTP_ADDR", default_value_t = defaults::HTTP_ADDR)]
    pub(crate) http_addr: SocketAddr,
    /// Another address serving the same HTTP endpoints (the Go server's debug port).
    #[arg(long, env = "MESHLIMIT_DEBUG_ADDR")]
    pub(crate) debug_addr: Option<SocketAddr>,
    /// An address serving /metrics (and the metrics path) and /healthcheck only, without
    /// the admin token, for a Prometheus scraper (the Go server's PROMETHEUS_ADDR).
    #[arg(long, env = "MESHLIMIT_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<SocketAddr>,
    /// Path of the metrics text besides /metrics (the Go server's PROMETHEUS_PATH).
    #[arg(long, env = "MESHLIMIT_METRICS_PATH", default_value = defaults::METRICS_PATH, value_parser = metrics_path)]
    pub(crate) metrics_path: String,
    /// A statsd_exporter mapping file (the Go server's PROMETHEUS_MAPPER_YAML): the Go
    /// server's stats are named and labelled by it in the metrics text instead of by its
    /// built-in mapping. One that cannot be used stops the start; it is reloaded when it
    /// changes.
    #[arg(long, env = "MESHLIMIT_METRICS_MAPPING")]
    pub(crate) metrics_mapping: Option<PathBuf>,
    /// Where bucket state lives.
    #[arg(long, env = "MESHLIMIT_STORE", value_enum, default_value_t = StoreKind::Memory)]
    pub(crate) store: StoreKind,
    /// Redis URL, for --store redis: redis://, rediss://, unix://,
    /// redis+cluster://host:port,host:port, redis+sentinel://host:port,host:port/master.
    #[arg(long, env = "MESHLIMIT_REDIS_URL", required_if_eq("store", "redis"))]
    pub(crate) redis_url: Option<String>,
    /// Longest a request waits on Redis, connecting included (milliseconds).
    #[arg(long, env = "MESHLIMIT_REDIS_TIMEOUT_MS", default_value_t = millis(defaults::REDIS_TIMEOUT))]
    pub(crate) redis_timeout_ms: u64,
    /// What to answer when Redis is down or slower than the timeout: `error` (gRPC
    /// UNAVAILABLE, so Envoy's failure_mode_deny decides), `allow` (OK), or `local` (each
    /// replica decides alone with the embedded store until Redis is back).
    #[arg(long, env = "MESHLIMIT_REDIS_FAILURE", value_enum, default_value_t = FailureArg::Error)]
    pub(crate) redis_failure: FailureArg,
    /// Tokens a replica leases from a hot token bucket beyond a request's own, spent
    /// locally (0: every decision in Redis). Costs accuracy: up to replicas × N extra
    /// admissions per refill period.
    #[arg(long, env = "MESHLIMIT_REDIS_LEASE", default_value_t = defaults::REDIS_LEASE)]
    pub(crate) redis_lease: u32,
    /// How long unused leased tokens stay usable (milliseconds).
    #[arg(long, env = "MESHLIMIT_REDIS_LEASE_TTL_MS", default_value_t = millis(defaults::REDIS_LEASE_TTL))]
    pub(crate) redis_lease_ttl_ms: u64,
    /// Entries in each local cache in front of Redis (over-limit answers, leases).
    #[arg(long, env = "MESHLIMIT_REDIS_CACHE_SIZE", default_value_t = defaults::REDIS_CACHE_SIZE)]
    pub(crate) redis_cache_size: u64,
    /// Longest a cached over-limit answer is trusted (milliseconds).
    #[arg(long, env = "MESHLIMIT_REDIS_CACHE_TTL_MS", default_value_t = millis(defaults::REDIS_CACHE_TTL))]
    pub(crate) redis_cache_ttl_ms: u64,
    /// Script calls each Redis node has in flight at most (1 to 64). Within it, a node
    /// keeps as many as its measured round trip pays: one where Redis is near, more
    /// behind a network, fewer when Redis itself is slow. Requests that arrive while
    /// the calls run wait and go together in the next one (see docs/performance.md,
    /// "Redis across a network").
    #[arg(
        long,
        env = "MESHLIMIT_REDIS_CALLS_IN_FLIGHT",
        default_value_t = defaults::REDIS_CALLS_IN_FLIGHT as u64,
        value_parser = clap::value_parser!(u64).range(1..=64)
    )]
    pub(crate) redis_calls_in_flight: u64,
    /// Each Redis key written lives up to this much longer, at random, so that the keys
    /// of one fixed window do not all expire at its end (milliseconds; 0: none). The Go
    /// server's EXPIRATION_JITTER_MAX_SECONDS.
    #[arg(long, env = "MESHLIMIT_REDIS_EXPIRY_JITTER_MS", default_value_t = 0)]
    pub(crate) redis_expiry_jitter_ms: u64,
    /// What every Redis key starts with, before meshlimit's own `ml1:` (the Go server's
    /// CACHE_KEY_PREFIX): deployments sharing one Redis keep apart, and a Redis ACL can
    /// grant exactly these keys.
    #[arg(long, env = "MESHLIMIT_REDIS_KEY_PREFIX", default_value = "")]
    pub(crate) redis_key_prefix: String,
    /// CA certificates (PEM) a rediss:// server's certificate must chain to, instead of
    /// the system's roots.
    #[arg(long, env = "MESHLIMIT_REDIS_TLS_CA")]
    pub(crate) redis_tls_ca: Option<PathBuf>,
    /// Client certificate (PEM) for a rediss:// server that asks for one, with
    /// --redis-tls-key.
    #[arg(long, env = "MESHLIMIT_REDIS_TLS_CERT", requires = "redis_tls_key")]
    pub(crate) redis_tls_cert: Option<PathBuf>,
    /// Client key (PEM), with --redis-tls-cert.
    #[arg(long, env = "MESHLIMIT_REDIS_TLS_KEY", requires = "redis_tls_cert")]
    pub(crate) redis_tls_key: Option<PathBuf>,
    /// Algorithm for rules that do not set rate_limit.algorithm.
    #[arg(long, env = "MESHLIMIT_ALGORITHM", value_enum, default_value_t = AlgorithmArg::from(defaults::ALGORITHM))]
    pub(crate) algorithm: AlgorithmArg,
    /// Most buckets the embedded store holds; beyond it, the least recently used are
    /// evicted (idle ones expire long before).
    #[arg(long, env = "MESHLIMIT_MAX_BUCKETS", default_value_t = defaults::MAX_BUCKETS)]
    pub(crate) max_buckets: u64,
    /// Milliseconds of quiet after a config file event before reloading.
    #[arg(long, env = "MESHLIMIT_RELOAD_DEBOUNCE_MS", default_value_t = millis(defaults::RELOAD_DEBOUNCE))]
    pub(crate) reload_debounce_ms: u64,
    /// Global shadow mode: requests over their limits are answered OK overall, while each
    /// descriptor's status still says OVER_LIMIT.
    #[arg(long, env = "MESHLIMIT_SHADOW_MODE")]
    pub(crate) shadow_mode: bool,
    /// Global quota mode: every descriptor counts as a quota-mode one, so a request is
    /// refused only when all its descriptors but unlimited ones are over; each status still
    /// says OVER_LIMIT where it is.
    #[arg(long, env = "MESHLIMIT_QUOTA_MODE")]
    pub(crate) quota_mode: bool,
    /// Send dynamic metadata with each answer, as the Go server's
    /// RESPONSE_DYNAMIC_METADATA: the domain, the descriptors, and the `metadata` of the
    /// rules that passed (Envoy keeps it under the rate-limit filter's name).
    #[arg(long, env = "MESHLIMIT_RESPONSE_DYNAMIC_METADATA")]
    pub(crate) response_dynamic_metadata: bool,
    /// Ask Envoy to add RateLimit-Limit/-Remaining/-Reset headers to responses.
    #[arg(long, env = "MESHLIMIT_RESPONSE_HEADERS")]
    pub(crate) response_headers: bool,
    /// Name of the limit header, with --response-headers.
    #[arg(
        long,
        env = "MESHLIMIT_LIMIT_HEADER",
        default_value = defaults::LIMIT_HEADER
    )]
    pub(crate) limit_header: String,
    /// Name of the remaining header, with --response-headers.
    #[arg(
        long,
        env = "MESHLIMIT_REMAINING_HEADER",
        default_value = defaults::REMAINING_HEADER
    )]
    pub(crate) remaining_header: String,
    /// Name of the reset header (whole seconds), with --response-headers.
    #[arg(
        long,
        env = "MESHLIMIT_RESET_HEADER",
        default_value = defaults::RESET_HEADER
    )]
    pub(crate) reset_header: String,
    /// `draft`: also ask Envoy to add the IETF draft's RateLimit-Policy and RateLimit
    /// fields (draft-ietf-httpapi-ratelimit-headers-11), one policy per limit of every
    /// limited descriptor. Independent of --response-headers.
    #[arg(long, env = "MESHLIMIT_RATELIMIT_HEADERS", value_enum, default_value_t = RateLimitHeadersArg::Off)]
    pub(crate) ratelimit_headers: RateLimitHeadersArg,
    /// Share of a limit from which hits count as near_limit in the metrics.
    #[arg(long, env = "MESHLIMIT_NEAR_LIMIT_RATIO", default_value_t = defaults::NEAR_LIMIT_RATIO, value_parser = ratio)]
    pub(crate) near_limit_ratio: f32,
    /// After SIGTERM: milliseconds during which health checks fail while everything
    /// still serves, before the server stops accepting and drains in-flight calls.
    #[arg(long, env = "MESHLIMIT_DRAIN_DELAY_MS", default_value_t = millis(defaults::DRAIN_DELAY))]
    pub(crate) drain_delay_ms: u64,
    /// Longest wait for in-flight calls when stopping (milliseconds).
    #[arg(long, env = "MESHLIMIT_DRAIN_TIMEOUT_MS", default_value_t = millis(defaults::DRAIN_TIMEOUT))]
    pub(crate) drain_timeout_ms: u64,
    /// Log filter (tracing's EnvFilter syntax: `info`, `meshlimit=debug`, ...).
    #[arg(long, env = "MESHLIMIT_LOG", default_value = defaults::LOG_FILTER)]
    pub(crate) log: String,
    /// Log line format.
    #[arg(long, env = "MESHLIMIT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub(crate) log_format: LogFormat,
    /// Threads that serve requests (the runtime's workers). Default: one per CPU the
    /// process may use. Where its cores are shared with other busy processes (a load
    /// generator, a Redis on the same host), fewer can serve more: fewer wake-ups move
    /// work between threads (see docs/performance.md, "Redis across a network").
    #[arg(long, env = "MESHLIMIT_WORKER_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub(crate) worker_threads: Option<u16>,
    /// Most bytes the embedded store holds (a fixed size per bucket, whatever its key's
    /// length, plus the limits of `rate_limits` lists); beyond it, the least recently used
    /// buckets are evicted.
    #[arg(long, env = "MESHLIMIT_MAX_STORE_BYTES", default_value_t = defaults::MAX_STORE_BYTES)]
    pub(crate) max_store_bytes: u64,
    /// Close an HTTP or gRPC connection after this many milliseconds with nothing from the
    /// peer and no request in flight (a client's HTTP/2 keepalive pings count).
    #[arg(long, env = "MESHLIMIT_IDLE_TIMEOUT_MS", default_value_t = millis(defaults::IDLE_TIMEOUT), value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) idle_timeout_ms: u64,
    /// Most connections open at once over all ports; more are closed as soon as they are
    /// accepted. Default: the file-descriptor limit minus 64 for the server's own files.
    #[arg(long, env = "MESHLIMIT_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) max_connections: Option<u64>,
    /// Ask gRPC connections to close (GOAWAY) after this many milliseconds, ±10% (0:
    /// never; the Go server's GRPC_MAX_CONNECTION_AGE).
    #[arg(
        long,
        env = "MESHLIMIT_GRPC_MAX_CONNECTION_AGE_MS",
        default_value_t = defaults::GRPC_MAX_CONNECTION_AGE.map_or(0, millis)
    )]
    pub(crate) grpc_max_connection_age_ms: u64,
    /// After that GOAWAY, milliseconds for calls in flight before the connection is
    /// closed (the Go server's GRPC_MAX_CONNECTION_AGE_GRACE).
    #[arg(long, env = "MESHLIMIT_GRPC_MAX_CONNECTION_AGE_GRACE_MS", default_value_t = millis(defaults::GRPC_MAX_CONNECTION_AGE_GRACE))]
    pub(crate) grpc_max_connection_age_grace_ms: u64,
    /// PEM certificate chain for TLS on the gRPC address (reloaded when it changes).
    #[arg(long, env = "MESHLIMIT_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    pub(crate) grpc_tls_cert: Option<PathBuf>,
    /// PEM private key of --grpc-tls-cert (reloaded when it changes).
    #[arg(long, env = "MESHLIMIT_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    pub(crate) grpc_tls_key: Option<PathBuf>,
    /// PEM CA certificates: gRPC clients must present a certificate that chains to one.
    #[arg(long, env = "MESHLIMIT_GRPC_CLIENT_CA", requires = "grpc_tls_cert")]
    pub(crate) grpc_client_ca: Option<PathBuf>,
    /// With --grpc-client-ca: a client certificate must be valid for one of these DNS
    /// names or IP addresses (repeat the flag, or separate with commas).
    #[arg(
        long,
        env = "MESHLIMIT_GRPC_CLIENT_SAN",
        requires = "grpc_client_ca",
        value_delimiter = ','
    )]
    pub(crate) grpc_client_san: Vec<String>,
    /// Who may give budget back, by refunds (is_negative_hits) and settles of holds:
    /// loopback (callers on this host: the default), anyone, none, or san:NAME (an mTLS
    /// client certificate valid for NAME). Repeat the flag, or separate with commas;
    /// anyone else gets PERMISSION_DENIED and nothing changes.
    #[arg(
        long,
        env = "MESHLIMIT_GIVE_BACK_FROM",
        value_delimiter = ',',
        value_parser = super::values::give_back_source
    )]
    pub(crate) give_back_from: Vec<String>,
    /// PEM certificate chain for TLS on --http-addr (not --debug-addr, --metrics-addr).
    #[arg(long, env = "MESHLIMIT_HTTP_TLS_CERT", requires = "http_tls_key")]
    pub(crate) http_tls_cert: Option<PathBuf>,
    /// PEM private key of --http-tls-cert.
    #[arg(long, env = "MESHLIMIT_HTTP_TLS_KEY", requires = "http_tls_cert")]
    pub(crate) http_tls_key: Option<PathBuf>,
    /// Most descriptors in one request; more is refused with INVALID_ARGUMENT (/json: 400).
    #[arg(long, env = "MESHLIMIT_MAX_DESCRIPTORS", default_value_t = defaults::MAX_DESCRIPTORS, value_parser = at_least_one)]
    pub(crate) max_descriptors: usize,
    /// Most entries in one descriptor; more is refused with INVALID_ARGUMENT (/json: 400).
    #[arg(long, env = "MESHLIMIT_MAX_ENTRIES", default_value_t = defaults::MAX_ENTRIES, value_parser = at_least_one)]
    pub(crate) max_entries: usize,
    /// Most bytes in a descriptor entry's key, and in its value; more is refused with
    /// INVALID_ARGUMENT (/json: 400).
    #[arg(long, env = "MESHLIMIT_MAX_VALUE_BYTES", default_value_t = defaults::MAX_VALUE_BYTES, value_parser = at_least_one)]
    pub(crate) max_value_bytes: usize,
    /// File holding the token that every HTTP endpoint but /healthcheck, the metrics
    /// paths and / then requires (Authorization: Bearer <token>, or Basic with the token as
    /// password); read again when it changes.
    #[arg(long, env = "MESHLIMIT_ADMIN_TOKEN_FILE")]
    pub(crate) admin_token_file: Option<PathBuf>,
    /// Most distinct request values each detailed_metric or value_to_metric rule puts in
    /// metric labels, the rest sharing one overflow series per rule; and most unknown
    /// domains counted under their own name.
    #[arg(long, env = "MESHLIMIT_MAX_METRIC_VALUES", default_value_t = defaults::MAX_METRIC_VALUES)]
    pub(crate) max_metric_values: usize,
    /// Rate limit quota service (StreamRateLimitQuotas): what a bucket matching no rule is
    /// assigned, ALLOW_ALL or DENY_ALL.
    #[arg(long, env = "MESHLIMIT_RLQS_UNMATCHED", value_enum, default_value_t = UnmatchedArg::Allow)]
    pub(crate) rlqs_unmatched: UnmatchedArg,
    /// Rate limit quota service: the time to live of every assignment (milliseconds);
    /// renewed on each report, so that a dead meshlimit hands control to the Envoy
    /// bucket's expired_assignment_behavior.
    #[arg(long, env = "MESHLIMIT_RLQS_ASSIGNMENT_TTL_MS", default_value_t = millis(defaults::RLQS_ASSIGNMENT_TTL))]
    pub(crate) rlqs_assignment_ttl_ms: u64,
    /// Send the Go server's stats to this statsd server (host:port), besides /metrics.
    /// Default: no statsd.
    #[arg(long, env = "MESHLIMIT_STATSD_ADDR", value_parser = host_port)]
    pub(crate) statsd_addr: Option<String>,
    /// Transport to the statsd server (the Go server's statsd sink speaks TCP).
    #[arg(long, env = "MESHLIMIT_STATSD_PROTOCOL", value_enum, default_value_t = StatsdProtocol::Tcp)]
    pub(crate) statsd_protocol: StatsdProtocol,
    /// Milliseconds between two statsd flushes (the Go server's STATS_FLUSH_INTERVAL).
    #[arg(long, env = "MESHLIMIT_STATSD_FLUSH_MS", default_value_t = millis(defaults::STATSD_FLUSH), value_parser = clap::value_parser!(u64).range(1..))]
    pub(crate) statsd_flush_ms: u64,
    /// Tags on every statsd stat, as k:v,k2:v2 (the Go server's EXTRA_TAGS): in the name
    /// as gostats writes them (.__k=v), or as DogStatsD tags with --dogstatsd.
    #[arg(long, env = "MESHLIMIT_STATSD_TAGS", value_parser = statsd_tags)]
    pub(crate) statsd_tags: Option<StatsdTags>,
    /// Speak DogStatsD to the statsd server: tags as |#k:v (the Go server's USE_DOG_STATSD).
    #[arg(long, env = "MESHLIMIT_DOGSTATSD")]
    pub(crate) dogstatsd: bool,
}

impl Serve {
    /// `--log`: the log filter, in tracing's `EnvFilter` syntax.
    pub fn log_filter(&self) -> &str {
        &self.log
    }

    /// Whether `--log-format json` asks for JSON log lines rather than text.
    pub fn json_logs(&self) -> bool {
        matches!(self.log_format, LogFormat::Json)
    }

    /// `--worker-threads`: the runtime's worker threads, `None` for one per CPU.
    pub fn worker_threads(&self) -> Option<usize> {
        self.worker_threads.map(usize::from)
    }

    /// Serves with these flags until `shutdown` completes, then drains (see
    /// [`app::serve`]).
    ///
    /// # Errors
    /// A Go-style header named like one of the draft's fields, no config where the Go
    /// server's variables point, an address that cannot be bound, or what [`app::serve`]
    /// fails with.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Box<dyn std::error::Error>> {
        self.check_header_names()?;
        let config = match self.source.source() {
            Some(source) => source,
            None => ConfigSource::File {
                path: runtime_config()?,
                domains: self.source.domains(),
            },
        };
        let (grpc_addr, http_addr) = (self.grpc_addr, self.http_addr);
        let grpc_uds = self.grpc_uds.clone();
        let (debug_addr, metrics_addr) = (self.debug_addr, self.metrics_addr);
        let settings = self.into_settings(config);
        let mut extra_http = Vec::new();
        if let Some(addr) = debug_addr {
            extra_http.push(tokio::net::TcpListener::bind(addr).await?);
        }
        let metrics = match metrics_addr {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await?),
            None => None,
        };
        let listeners = Listeners {
            grpc: match grpc_uds {
                Some(path) => Listener::bind_unix(&path)?,
                None => tokio::net::TcpListener::bind(grpc_addr).await?.into(),
            },
            http: tokio::net::TcpListener::bind(http_addr).await?,
            extra_http,
            metrics,
        };
        app::serve(settings, listeners, shutdown).await?;
        Ok(())
    }
}

/// The Go server's config location (`RUNTIME_*` variables, or its defaults), which must
/// exist: `serve` without `--config` has nothing else to serve.
fn runtime_config() -> Result<PathBuf, String> {
    let path: PathBuf =
        gocompat::runtime_config_path(&|name| std::env::var(name).ok().filter(|v| !v.is_empty()))
            .into();
    if !path.exists() {
        return Err(format!(
            "no config: {} does not exist; pass --config PATH (or set RUNTIME_ROOT, \
             RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY as for envoyproxy/ratelimit)",
            path.display()
        ));
    }
    Ok(path)
}

//! The `meshlimit` command line: `serve`, `validate` and `explain`. Without a command it
//! serves, configured by envoyproxy/ratelimit's environment variables if those are set
//! (see [`meshlimit::gocompat`]), so that it can replace that server as it is deployed.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use meshlimit::app::{self, Listeners, Settings};
use meshlimit::config;
use meshlimit::gocompat;
use meshlimit::grpc::HeaderNames;
use meshlimit::net::TlsFiles;
use meshlimit::request_limits::{self, RequestLimits};
use meshlimit::rules::Algorithm;
use meshlimit::store::redis::{FailurePolicy, RedisOptions};
use meshlimit::store::{DEFAULT_MAX_BUCKETS, DEFAULT_MAX_STORE_BYTES};
use tracing::warn;

#[derive(Parser)]
#[command(
    version,
    about = "Global rate-limit service for Envoy and Istio",
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve envoy.service.ratelimit.v3.RateLimitService.
    Serve(Box<Serve>),
    /// Check descriptor files offline; exits non-zero on any problem.
    Validate {
        /// Descriptor file, or directory of *.yaml / *.yml files.
        #[arg(long, env = "MESHLIMIT_CONFIG")]
        config: PathBuf,
    },
    /// Show how a request would be decided: which rule each descriptor matches and why
    /// (or where the walk stops), its bucket and, with --redis-url, the bucket's state in
    /// Redis. Consumes nothing.
    Explain(ExplainArgs),
}

#[derive(clap::Args)]
struct ExplainArgs {
    /// Descriptor file, or directory of *.yaml / *.yml files.
    #[arg(long, env = "MESHLIMIT_CONFIG")]
    config: PathBuf,
    /// The request's domain.
    #[arg(long)]
    domain: String,
    /// One descriptor as `key=value,key2=value2`; repeat for several.
    #[arg(long, required = true)]
    descriptor: Vec<String>,
    /// Algorithm for rules that do not set one (as `serve --algorithm`).
    #[arg(long, env = "MESHLIMIT_ALGORITHM", value_enum, default_value_t = AlgorithmArg::TokenBucket)]
    algorithm: AlgorithmArg,
    /// Read the buckets' state from this Redis (as `serve --redis-url`).
    #[arg(long)]
    redis_url: Option<String>,
}

#[derive(clap::Args)]
struct Serve {
    /// Descriptor file, or directory of *.yaml / *.yml files (watched for edits).
    /// Default: the Go server's RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY,
    /// /srv/runtime_data/current/config.
    #[arg(long, env = "MESHLIMIT_CONFIG")]
    config: Option<PathBuf>,
    /// gRPC listen address (RateLimitService and grpc.health.v1.Health).
    #[arg(long, env = "MESHLIMIT_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    grpc_addr: SocketAddr,
    /// HTTP listen address (/healthcheck, /json, /rlconfig, /explain, /metrics).
    #[arg(long, env = "MESHLIMIT_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Another address serving the same HTTP endpoints (the Go server's debug port).
    #[arg(long, env = "MESHLIMIT_DEBUG_ADDR")]
    debug_addr: Option<SocketAddr>,
    /// An address serving /metrics (and the metrics path) and /healthcheck only, without
    /// the admin token, for a Prometheus scraper (the Go server's PROMETHEUS_ADDR).
    #[arg(long, env = "MESHLIMIT_METRICS_ADDR")]
    metrics_addr: Option<SocketAddr>,
    /// Path of the metrics text besides /metrics (the Go server's PROMETHEUS_PATH).
    #[arg(long, env = "MESHLIMIT_METRICS_PATH", default_value = "/metrics", value_parser = metrics_path)]
    metrics_path: String,
    /// Where bucket state lives.
    #[arg(long, env = "MESHLIMIT_STORE", value_enum, default_value_t = StoreKind::Memory)]
    store: StoreKind,
    /// Redis URL, for --store redis: redis://, rediss://, unix://,
    /// redis+cluster://host:port,host:port, redis+sentinel://host:port,host:port/master.
    #[arg(long, env = "MESHLIMIT_REDIS_URL", required_if_eq("store", "redis"))]
    redis_url: Option<String>,
    /// Longest a request waits on Redis, connecting included (milliseconds).
    #[arg(long, env = "MESHLIMIT_REDIS_TIMEOUT_MS", default_value_t = 100)]
    redis_timeout_ms: u64,
    /// What to answer when Redis is down or slower than the timeout: `error` (gRPC
    /// UNAVAILABLE, so Envoy's failure_mode_deny decides), `allow` (OK), or `local` (each
    /// replica decides alone with the embedded store until Redis is back).
    #[arg(long, env = "MESHLIMIT_REDIS_FAILURE", value_enum, default_value_t = FailureArg::Error)]
    redis_failure: FailureArg,
    /// Tokens a replica leases from a hot token bucket beyond a request's own, spent
    /// locally (0: every decision in Redis). Costs accuracy: up to replicas × N extra
    /// admissions per refill period.
    #[arg(long, env = "MESHLIMIT_REDIS_LEASE", default_value_t = 0)]
    redis_lease: u32,
    /// How long unused leased tokens stay usable (milliseconds).
    #[arg(long, env = "MESHLIMIT_REDIS_LEASE_TTL_MS", default_value_t = 1000)]
    redis_lease_ttl_ms: u64,
    /// Entries in each local cache in front of Redis (over-limit answers, leases).
    #[arg(long, env = "MESHLIMIT_REDIS_CACHE_SIZE", default_value_t = 100_000)]
    redis_cache_size: u64,
    /// Longest a cached over-limit answer is trusted (milliseconds).
    #[arg(long, env = "MESHLIMIT_REDIS_CACHE_TTL_MS", default_value_t = 60_000)]
    redis_cache_ttl_ms: u64,
    /// Algorithm for rules that do not set rate_limit.algorithm.
    #[arg(long, env = "MESHLIMIT_ALGORITHM", value_enum, default_value_t = AlgorithmArg::TokenBucket)]
    algorithm: AlgorithmArg,
    /// Most buckets the embedded store holds; beyond it, the least recently used are
    /// evicted (idle ones expire long before).
    #[arg(long, env = "MESHLIMIT_MAX_BUCKETS", default_value_t = DEFAULT_MAX_BUCKETS)]
    max_buckets: u64,
    /// Milliseconds of quiet after a config file event before reloading.
    #[arg(long, env = "MESHLIMIT_RELOAD_DEBOUNCE_MS", default_value_t = 200)]
    reload_debounce_ms: u64,
    /// Global shadow mode: requests over their limits are answered OK overall, while each
    /// descriptor's status still says OVER_LIMIT.
    #[arg(long, env = "MESHLIMIT_SHADOW_MODE")]
    shadow_mode: bool,
    /// Ask Envoy to add RateLimit-Limit/-Remaining/-Reset headers to responses.
    #[arg(long, env = "MESHLIMIT_RESPONSE_HEADERS")]
    response_headers: bool,
    /// Name of the limit header, with --response-headers.
    #[arg(
        long,
        env = "MESHLIMIT_LIMIT_HEADER",
        default_value = "RateLimit-Limit"
    )]
    limit_header: String,
    /// Name of the remaining header, with --response-headers.
    #[arg(
        long,
        env = "MESHLIMIT_REMAINING_HEADER",
        default_value = "RateLimit-Remaining"
    )]
    remaining_header: String,
    /// Name of the reset header (whole seconds), with --response-headers.
    #[arg(
        long,
        env = "MESHLIMIT_RESET_HEADER",
        default_value = "RateLimit-Reset"
    )]
    reset_header: String,
    /// Share of a limit from which hits count as near_limit in the metrics.
    #[arg(long, env = "MESHLIMIT_NEAR_LIMIT_RATIO", default_value_t = 0.8, value_parser = ratio)]
    near_limit_ratio: f32,
    /// After SIGTERM: milliseconds during which health checks fail while everything
    /// still serves, before the server stops accepting and drains in-flight calls.
    #[arg(long, env = "MESHLIMIT_DRAIN_DELAY_MS", default_value_t = 1000)]
    drain_delay_ms: u64,
    /// Longest wait for in-flight calls when stopping (milliseconds).
    #[arg(long, env = "MESHLIMIT_DRAIN_TIMEOUT_MS", default_value_t = 10_000)]
    drain_timeout_ms: u64,
    /// Log filter (tracing's EnvFilter syntax: `info`, `meshlimit=debug`, ...).
    #[arg(long, env = "MESHLIMIT_LOG", default_value = "info")]
    log: String,
    /// Log line format.
    #[arg(long, env = "MESHLIMIT_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Most bytes the embedded store holds (keys plus a fixed per-bucket overhead); beyond
    /// it, the least recently used buckets are evicted.
    #[arg(long, env = "MESHLIMIT_MAX_STORE_BYTES", default_value_t = DEFAULT_MAX_STORE_BYTES)]
    max_store_bytes: u64,
    /// Close an HTTP or gRPC connection after this many milliseconds with nothing from the
    /// peer and no request in flight (a client's HTTP/2 keepalive pings count).
    #[arg(long, env = "MESHLIMIT_IDLE_TIMEOUT_MS", default_value_t = app::DEFAULT_IDLE_TIMEOUT_MS, value_parser = clap::value_parser!(u64).range(1..))]
    idle_timeout_ms: u64,
    /// Most connections open at once over all ports; more are closed as soon as they are
    /// accepted. Default: the file-descriptor limit minus 64 for the server's own files.
    #[arg(long, env = "MESHLIMIT_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
    /// Ask gRPC connections to close (GOAWAY) after this many milliseconds, ±10% (0:
    /// never; the Go server's GRPC_MAX_CONNECTION_AGE).
    #[arg(
        long,
        env = "MESHLIMIT_GRPC_MAX_CONNECTION_AGE_MS",
        default_value_t = 0
    )]
    grpc_max_connection_age_ms: u64,
    /// After that GOAWAY, milliseconds for calls in flight before the connection is
    /// closed (the Go server's GRPC_MAX_CONNECTION_AGE_GRACE).
    #[arg(long, env = "MESHLIMIT_GRPC_MAX_CONNECTION_AGE_GRACE_MS", default_value_t = app::DEFAULT_GRPC_MAX_CONNECTION_AGE_GRACE_MS)]
    grpc_max_connection_age_grace_ms: u64,
    /// PEM certificate chain for TLS on the gRPC address (reloaded when it changes).
    #[arg(long, env = "MESHLIMIT_GRPC_TLS_CERT", requires = "grpc_tls_key")]
    grpc_tls_cert: Option<PathBuf>,
    /// PEM private key of --grpc-tls-cert (reloaded when it changes).
    #[arg(long, env = "MESHLIMIT_GRPC_TLS_KEY", requires = "grpc_tls_cert")]
    grpc_tls_key: Option<PathBuf>,
    /// PEM CA certificates: gRPC clients must present a certificate that chains to one.
    #[arg(long, env = "MESHLIMIT_GRPC_CLIENT_CA", requires = "grpc_tls_cert")]
    grpc_client_ca: Option<PathBuf>,
    /// With --grpc-client-ca: a client certificate must be valid for one of these DNS
    /// names or IP addresses (repeat the flag, or separate with commas).
    #[arg(
        long,
        env = "MESHLIMIT_GRPC_CLIENT_SAN",
        requires = "grpc_client_ca",
        value_delimiter = ','
    )]
    grpc_client_san: Vec<String>,
    /// PEM certificate chain for TLS on --http-addr (not --debug-addr, --metrics-addr).
    #[arg(long, env = "MESHLIMIT_HTTP_TLS_CERT", requires = "http_tls_key")]
    http_tls_cert: Option<PathBuf>,
    /// PEM private key of --http-tls-cert.
    #[arg(long, env = "MESHLIMIT_HTTP_TLS_KEY", requires = "http_tls_cert")]
    http_tls_key: Option<PathBuf>,
    /// Most descriptors in one request; more is refused with INVALID_ARGUMENT (/json: 400).
    #[arg(long, env = "MESHLIMIT_MAX_DESCRIPTORS", default_value_t = request_limits::DEFAULT_MAX_DESCRIPTORS, value_parser = at_least_one)]
    max_descriptors: usize,
    /// Most entries in one descriptor; more is refused with INVALID_ARGUMENT (/json: 400).
    #[arg(long, env = "MESHLIMIT_MAX_ENTRIES", default_value_t = request_limits::DEFAULT_MAX_ENTRIES, value_parser = at_least_one)]
    max_entries: usize,
    /// Most bytes in a descriptor entry's key, and in its value; more is refused with
    /// INVALID_ARGUMENT (/json: 400).
    #[arg(long, env = "MESHLIMIT_MAX_VALUE_BYTES", default_value_t = request_limits::DEFAULT_MAX_VALUE_BYTES, value_parser = at_least_one)]
    max_value_bytes: usize,
    /// File holding the token that every HTTP endpoint but /healthcheck, the metrics
    /// paths and / then requires (Authorization: Bearer <token>, or Basic with the token as
    /// password); read again when it changes.
    #[arg(long, env = "MESHLIMIT_ADMIN_TOKEN_FILE")]
    admin_token_file: Option<PathBuf>,
    /// Most distinct request values each detailed_metric rule puts in metric labels; the
    /// rest share one overflow series per rule.
    #[arg(long, env = "MESHLIMIT_MAX_METRIC_VALUES", default_value_t = meshlimit::metrics::DEFAULT_MAX_METRIC_VALUES)]
    max_metric_values: usize,
}

#[derive(Clone, Copy, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Clone, Copy, ValueEnum)]
enum StoreKind {
    Memory,
    Redis,
}

#[derive(Clone, Copy, ValueEnum)]
enum FailureArg {
    Error,
    Allow,
    Local,
}

#[derive(Clone, Copy, ValueEnum)]
enum AlgorithmArg {
    TokenBucket,
    FixedWindow,
}

impl From<AlgorithmArg> for Algorithm {
    fn from(arg: AlgorithmArg) -> Self {
        match arg {
            AlgorithmArg::TokenBucket => Algorithm::TokenBucket,
            AlgorithmArg::FixedWindow => Algorithm::FixedWindow,
        }
    }
}

fn main() -> ExitCode {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect();
    let go = match gocompat::translate(|name| std::env::var(name).ok(), &names) {
        Ok(go) => go,
        Err(e) => return fail(e),
    };
    let matches = Cli::command().get_matches_from(arguments(std::env::args_os(), &go.args));
    let cli = match Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Validate { config } => validate(&config),
        Command::Explain(args) => match runtime() {
            Ok(rt) => rt.block_on(explain(args)),
            Err(e) => fail(e),
        },
        Command::Serve(serve) => {
            init_logging(&serve);
            // Connections are capped below the descriptor limit; let that be the hard one.
            meshlimit::net::descriptors::raise_soft_limit();
            if !go.unsupported.is_empty() {
                warn!(
                    "ignoring envoyproxy/ratelimit settings that meshlimit does not support: {}",
                    go.unsupported.join("; ")
                );
            }
            match runtime() {
                Ok(rt) => match rt.block_on(serve_until_signal(*serve)) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(e),
                },
                Err(e) => fail(e),
            }
        }
    }
}

/// The command line with `serve` made explicit when no command is named, and the Go
/// server's settings placed right after `serve`, so that the command line's own flags
/// override them.
fn arguments(
    args: impl IntoIterator<Item = std::ffi::OsString>,
    go: &[String],
) -> Vec<std::ffi::OsString> {
    let mut args: Vec<std::ffi::OsString> = args.into_iter().collect();
    let named = args.get(1).and_then(|a| a.to_str()).is_some_and(|a| {
        Cli::command()
            .get_subcommands()
            .any(|c| c.get_name() == a || a == "help")
            || matches!(a, "-h" | "--help" | "-V" | "--version")
    });
    if !named {
        args.insert(1.min(args.len()), "serve".into());
    }
    if args.get(1).and_then(|a| a.to_str()) == Some("serve") {
        let rest = args.split_off(2);
        args.extend(go.iter().map(Into::into));
        args.extend(rest);
    }
    args
}

/// A plain URL path: `/` and then letters, digits, `/`, `-`, `_`, `.`.
fn metrics_path(text: &str) -> Result<String, String> {
    let plain = text.starts_with('/')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
    if plain {
        Ok(text.to_string())
    } else {
        Err(format!("{text:?} is not a plain path such as /metrics"))
    }
}

/// A whole number of at least 1.
fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// A share between 0 and 1.
fn ratio(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{text:?} is not a number from 0 to 1")),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Runtime::new().map_err(|e| format!("cannot start the runtime: {e}"))
}

fn init_logging(serve: &Serve) {
    let filter = tracing_subscriber::EnvFilter::new(&serve.log);
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match serve.log_format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init(),
    }
}

async fn serve_until_signal(serve: Serve) -> Result<(), Box<dyn std::error::Error>> {
    let config = match serve.config {
        Some(path) => path,
        None => {
            let path: PathBuf = gocompat::runtime_config_path(&|name| {
                std::env::var(name).ok().filter(|v| !v.is_empty())
            })
            .into();
            if !path.exists() {
                return Err(format!(
                    "no config: {} does not exist; pass --config PATH (or set RUNTIME_ROOT, \
                     RUNTIME_SUBDIRECTORY, RUNTIME_APPDIRECTORY as for envoyproxy/ratelimit)",
                    path.display()
                )
                .into());
            }
            path
        }
    };
    let settings = Settings {
        algorithm: serve.algorithm.into(),
        max_buckets: serve.max_buckets,
        reload_debounce: Duration::from_millis(serve.reload_debounce_ms),
        redis: match serve.store {
            StoreKind::Memory => None,
            StoreKind::Redis => Some(RedisOptions {
                timeout: Duration::from_millis(serve.redis_timeout_ms.max(1)),
                failure: match serve.redis_failure {
                    FailureArg::Error => FailurePolicy::Error,
                    FailureArg::Allow => FailurePolicy::Allow,
                    FailureArg::Local => FailurePolicy::Local,
                },
                lease: serve.redis_lease,
                lease_ttl: Duration::from_millis(serve.redis_lease_ttl_ms.max(1)),
                cache_size: serve.redis_cache_size,
                cache_ttl: Duration::from_millis(serve.redis_cache_ttl_ms),
                fallback_buckets: serve.max_buckets,
                fallback_bytes: serve.max_store_bytes,
                ..RedisOptions::new(serve.redis_url.unwrap_or_default())
            }),
        },
        global_shadow: serve.shadow_mode,
        response_headers: serve.response_headers.then_some(HeaderNames {
            limit: serve.limit_header,
            remaining: serve.remaining_header,
            reset: serve.reset_header,
        }),
        drain_delay: Duration::from_millis(serve.drain_delay_ms),
        drain_timeout: Duration::from_millis(serve.drain_timeout_ms),
        metrics_path: serve.metrics_path,
        near_limit_ratio: serve.near_limit_ratio,
        max_store_bytes: serve.max_store_bytes,
        idle_timeout: Duration::from_millis(serve.idle_timeout_ms),
        max_connections: serve
            .max_connections
            .map(|n| usize::try_from(n).unwrap_or(usize::MAX)),
        grpc_max_connection_age: (serve.grpc_max_connection_age_ms > 0)
            .then(|| Duration::from_millis(serve.grpc_max_connection_age_ms)),
        grpc_max_connection_age_grace: Duration::from_millis(
            serve.grpc_max_connection_age_grace_ms,
        ),
        grpc_tls: serve
            .grpc_tls_cert
            .zip(serve.grpc_tls_key)
            .map(|(cert, key)| TlsFiles {
                client_ca: serve.grpc_client_ca,
                client_sans: serve.grpc_client_san,
                ..TlsFiles::server(cert, key)
            }),
        http_tls: serve
            .http_tls_cert
            .zip(serve.http_tls_key)
            .map(|(cert, key)| TlsFiles::server(cert, key)),
        request_limits: RequestLimits {
            max_descriptors: serve.max_descriptors,
            max_entries: serve.max_entries,
            max_value_bytes: serve.max_value_bytes,
        },
        admin_token_file: serve.admin_token_file,
        max_metric_values: serve.max_metric_values,
        ..Settings::new(config)
    };
    let mut extra_http = Vec::new();
    if let Some(addr) = serve.debug_addr {
        extra_http.push(tokio::net::TcpListener::bind(addr).await?);
    }
    let metrics = match serve.metrics_addr {
        Some(addr) => Some(tokio::net::TcpListener::bind(addr).await?),
        None => None,
    };
    let listeners = Listeners {
        grpc: tokio::net::TcpListener::bind(serve.grpc_addr).await?,
        http: tokio::net::TcpListener::bind(serve.http_addr).await?,
        extra_http,
        metrics,
    };
    app::serve(settings, listeners, shutdown_signal()).await?;
    Ok(())
}

async fn explain(args: ExplainArgs) -> ExitCode {
    let mut settings = Settings::new(args.config);
    settings.algorithm = args.algorithm.into();
    settings.redis = args.redis_url.map(RedisOptions::new);
    let service = match app::build_service(&settings) {
        Ok(service) => service,
        Err(e) => return fail(e),
    };
    let descriptors: Vec<_> = args
        .descriptor
        .iter()
        .map(|d| meshlimit::http::parse_descriptor(d))
        .collect();
    match meshlimit::explain::explain(&service, &args.domain, &descriptors).await {
        Ok(text) => {
            print!("{text}");
            if settings.redis.is_none() {
                println!(
                    "
(state: read offline, so every bucket is full; GET /explain on a running \
                     server, or pass --redis-url, shows the real state)"
                );
            }
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => return std::future::pending().await,
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn validate(path: &std::path::Path) -> ExitCode {
    match config::load(path) {
        Ok(config) => {
            let rules = config.rules().len();
            println!(
                "{}: OK ({} domains, {rules} rules)",
                path.display(),
                config.domains().len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            for e in &errors {
                eprintln!("{e}");
            }
            eprintln!("{}: {} problem(s)", path.display(), errors.len());
            ExitCode::FAILURE
        }
    }
}

fn fail(e: impl std::fmt::Display) -> ExitCode {
    eprintln!("meshlimit: {e}");
    ExitCode::FAILURE
}

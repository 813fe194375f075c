//! The `meshlimit` command line: `serve` and `validate`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use meshlimit::app::{self, Settings};
use meshlimit::config;
use meshlimit::rules::Algorithm;
use meshlimit::store::redis::{FailurePolicy, RedisOptions};

#[derive(Parser)]
#[command(version, about = "Global rate-limit service for Envoy and Istio")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve envoy.service.ratelimit.v3.RateLimitService.
    Serve(Serve),
    /// Check descriptor files offline; exits non-zero on any problem.
    Validate {
        /// Descriptor file, or directory of *.yaml / *.yml files.
        #[arg(long, env = "MESHLIMIT_CONFIG")]
        config: PathBuf,
    },
}

#[derive(clap::Args)]
struct Serve {
    /// Descriptor file, or directory of *.yaml / *.yml files (watched for edits).
    #[arg(long, env = "MESHLIMIT_CONFIG")]
    config: PathBuf,
    /// gRPC listen address (RateLimitService and grpc.health.v1.Health).
    #[arg(long, env = "MESHLIMIT_GRPC_ADDR", default_value = "0.0.0.0:8081")]
    grpc_addr: SocketAddr,
    /// HTTP listen address (/healthcheck).
    #[arg(long, env = "MESHLIMIT_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
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
    /// Most buckets the embedded store holds; idle ones expire long before.
    #[arg(long, env = "MESHLIMIT_MAX_BUCKETS", default_value_t = 1_000_000)]
    max_buckets: u64,
    /// Milliseconds of quiet after a config file event before reloading.
    #[arg(long, env = "MESHLIMIT_RELOAD_DEBOUNCE_MS", default_value_t = 200)]
    reload_debounce_ms: u64,
    /// Log filter (tracing's EnvFilter syntax: `info`, `meshlimit=debug`, ...).
    #[arg(long, env = "MESHLIMIT_LOG", default_value = "info")]
    log: String,
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

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Validate { config } => validate(&config),
        Command::Serve(serve) => {
            tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::new(&serve.log))
                .init();
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(rt) => rt,
                Err(e) => return fail(format_args!("cannot start the runtime: {e}")),
            };
            match runtime.block_on(serve_until_signal(serve)) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => fail(e),
            }
        }
    }
}

async fn serve_until_signal(serve: Serve) -> Result<(), Box<dyn std::error::Error>> {
    let settings = Settings {
        config: serve.config,
        algorithm: match serve.algorithm {
            AlgorithmArg::TokenBucket => Algorithm::TokenBucket,
            AlgorithmArg::FixedWindow => Algorithm::FixedWindow,
        },
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
                ..RedisOptions::new(serve.redis_url.unwrap_or_default())
            }),
        },
    };
    let grpc = tokio::net::TcpListener::bind(serve.grpc_addr).await?;
    let http = tokio::net::TcpListener::bind(serve.http_addr).await?;
    app::run(settings, grpc, http, shutdown_signal()).await?;
    Ok(())
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

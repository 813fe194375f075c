//! The `meshlimit` command line: `serve` and `validate`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use meshlimit::app::{self, Settings};
use meshlimit::config;
use meshlimit::rules::Algorithm;

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
    /// Redis URL, for --store redis.
    #[arg(long, env = "MESHLIMIT_REDIS_URL")]
    redis_url: Option<String>,
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
            if let StoreKind::Redis = serve.store {
                eprintln!(
                    "meshlimit: --store redis is not available in this version; use --store memory (the default)"
                );
                return ExitCode::from(2);
            }
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

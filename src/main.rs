//! The `meshlimit` binary: parses the command line (with envoyproxy/ratelimit's
//! environment variables, see [`meshlimit::gocompat`]), starts logging and runs the
//! command ([`meshlimit::cli`]).

use std::process::ExitCode;

use meshlimit::cli::{self, Cli, Command, DbCommand, Serve, fail};
use meshlimit::gocompat;
use tracing::warn;

/// mimalloc instead of glibc's malloc: about a tenth fewer instructions per gRPC request
/// (see docs/performance.md); the library leaves the choice to its binaries.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    let names: Vec<String> = std::env::vars_os()
        .filter_map(|(name, _)| name.into_string().ok())
        .collect();
    // Started as the Go image starts the Go server: with no arguments, or under its name.
    let drop_in = std::env::args_os().len() <= 1
        || cli::started_as_go_binary(std::env::args_os().next().as_deref());
    let go = match gocompat::translate(|name| std::env::var(name).ok(), &names, drop_in) {
        Ok(go) => go,
        Err(e) => return fail(e),
    };
    let (cli, left_out) = Cli::parse_with(std::env::args_os(), &go.args);
    match cli.command {
        Command::Validate(args) => match runtime(None) {
            Ok(rt) => rt.block_on(cli::validate(&args)),
            Err(e) => fail(e),
        },
        Command::Explain(args) => match runtime(None) {
            Ok(rt) => rt.block_on((*args).run()),
            Err(e) => fail(e),
        },
        Command::Bucket(command) => match runtime(None) {
            Ok(rt) => rt.block_on(command.run()),
            Err(e) => fail(e),
        },
        Command::Db(DbCommand::Init(args)) => match runtime(None) {
            Ok(rt) => rt.block_on(cli::db_init(&args)),
            Err(e) => fail(e),
        },
        Command::Serve(serve) => {
            init_logging(&serve);
            // Connections are capped below the descriptor limit; let that be the hard one.
            meshlimit::net::descriptors::raise_soft_limit();
            if !left_out.is_empty() {
                warn!(
                    "ignoring arguments meshlimit does not know, as the Go binary it runs as ignores every argument: {}",
                    left_out.join(" ")
                );
            }
            if !go.unsupported.is_empty() {
                warn!(
                    "ignoring envoyproxy/ratelimit settings that meshlimit does not support: {}",
                    go.unsupported.join("; ")
                );
            }
            match runtime(serve.worker_threads()) {
                Ok(rt) => match rt.block_on(serve.run(shutdown_signal())) {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => fail(e),
                },
                Err(e) => fail(e),
            }
        }
    }
}

/// A multi-threaded runtime with `workers` worker threads, or one per CPU.
fn runtime(workers: Option<usize>) -> Result<tokio::runtime::Runtime, String> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = workers {
        builder.worker_threads(workers);
    }
    builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))
}

/// Logs to stdout as `--log` and `--log-format` say. Text is coloured only on a terminal
/// (and without `NO_COLOR`): a file or pipe, what a container runtime collects, gets
/// plain lines.
fn init_logging(serve: &Serve) {
    use std::io::IsTerminal;
    let colour = std::io::stdout().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let filter = tracing_subscriber::EnvFilter::new(serve.log_filter());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour);
    if serve.json_logs() {
        builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .init();
    } else {
        builder.init();
    }
}

/// Completes on SIGTERM or Ctrl-C (never, if SIGTERM cannot be watched).
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

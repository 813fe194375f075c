//! The `meshlimit` binary as a child process of a test: `serve` on loopback port 0 (the
//! addresses are read from its log, so no port can be taken between a probe and its
//! bind), its output kept in a log file that is printed when the test fails, stopped with
//! SIGTERM.

use std::fs::File;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Output, Stdio};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use tempfile::TempDir;
use tonic::transport::Channel;
use tonic_health::pb::health_client::HealthClient;

/// Bound on the process starting to serve, and on it stopping after SIGTERM.
const PROCESS_TIMEOUT: Duration = Duration::from_secs(20);

/// The binary under test.
pub fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_meshlimit")
}

/// `meshlimit args...` with none of the caller's `MESHLIMIT_*` settings and no colours.
pub fn command(args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(exe());
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("MESHLIMIT_") {
            command.env_remove(name);
        }
    }
    command
        .env("NO_COLOR", "1")
        .args(args)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    command
}

/// Runs `meshlimit args...` to its end (bounded: a process still running after 20 s fails
/// the test) and returns its status and output.
pub async fn run(args: &[&str]) -> Output {
    let child = command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running meshlimit");
    tokio::time::timeout(PROCESS_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("meshlimit {args:?} still runs after {PROCESS_TIMEOUT:?}"))
        .expect("waiting for meshlimit")
}

/// `serve --config <config>` with gRPC and HTTP on loopback port 0, then `args`.
pub fn serve_on_loopback<'a>(config: &'a str, args: &[&'a str]) -> Vec<&'a str> {
    let mut argv = vec![
        "serve",
        "--config",
        config,
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ];
    argv.extend_from_slice(args);
    argv
}

/// Runs [`serve_on_loopback`]`(config, args)` to its end: for settings that stop the
/// server at startup.
pub async fn run_serve(config: &str, args: &[&str]) -> Output {
    run(&serve_on_loopback(config, args)).await
}

/// A running `meshlimit serve`; killed when dropped (its log printed if the test failed).
pub struct Meshlimit {
    pub grpc: SocketAddr,
    pub http: SocketAddr,
    child: tokio::process::Child,
    dir: TempDir,
}

impl Meshlimit {
    /// Starts `meshlimit serve --config <config> --grpc-addr 127.0.0.1:0 --http-addr
    /// 127.0.0.1:0 --log info <args>` and waits until it serves.
    pub async fn start(config: &Path, args: &[&str]) -> Meshlimit {
        let config = config.display().to_string();
        let mut argv = serve_on_loopback(&config, &["--log", "info"]);
        argv.extend_from_slice(args);
        Self::start_with(&argv, &[]).await
    }

    /// [`Meshlimit::start`] serving gRPC on the Unix socket `socket` (`--grpc-uds`).
    pub async fn start_on_socket(config: &Path, socket: &Path, args: &[&str]) -> Meshlimit {
        let socket = socket.display().to_string();
        let mut argv = vec!["--grpc-uds", socket.as_str()];
        argv.extend_from_slice(args);
        Self::start(config, &argv).await
    }

    /// Starts `meshlimit argv...` with `env` added to its environment and waits until it
    /// serves (it must log at info level, in either format).
    pub async fn start_with(argv: &[&str], env: &[(&str, &str)]) -> Meshlimit {
        let dir = tempfile::Builder::new()
            .prefix("meshlimit-bin-")
            .tempdir()
            .expect("creating a temporary directory");
        let mut command = command(argv);
        command.envs(env.iter().copied());
        Self::spawn(command, argv, dir).await
    }

    /// Starts `program` (the binary under test, or a link to it under another name) with
    /// `argv` and `env` as a container runtime starts it: `NO_COLOR` unset, output to a
    /// file; waits until it serves.
    pub async fn start_as(program: &Path, argv: &[&str], env: &[(&str, &str)]) -> Meshlimit {
        let dir = tempfile::Builder::new()
            .prefix("meshlimit-bin-")
            .tempdir()
            .expect("creating a temporary directory");
        let mut command = tokio::process::Command::new(program);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("MESHLIMIT_") {
                command.env_remove(name);
            }
        }
        command
            .env_remove("NO_COLOR")
            .envs(env.iter().copied())
            .args(argv)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        Self::spawn(command, argv, dir).await
    }

    /// Starts `meshlimit serve --config <config>` on loopback port 0 with `args`, as
    /// [`Meshlimit::start`], under a file-descriptor limit of `nofile` (soft and hard,
    /// set by util-linux's `prlimit`).
    pub async fn start_with_nofile(config: &Path, nofile: u64, args: &[&str]) -> Meshlimit {
        let config = config.display().to_string();
        let limit = format!("--nofile={nofile}:{nofile}");
        let mut argv = vec![limit.as_str(), "--", exe()];
        argv.extend(serve_on_loopback(&config, &["--log", "info"]));
        argv.extend_from_slice(args);
        let found = std::process::Command::new("prlimit")
            .arg("--version")
            .output();
        assert!(
            found.is_ok_and(|o| o.status.success()),
            "prlimit is needed to run meshlimit under a descriptor limit: apt-get install util-linux"
        );
        let mut command = tokio::process::Command::new("prlimit");
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("MESHLIMIT_") {
                command.env_remove(name);
            }
        }
        command
            .env("NO_COLOR", "1")
            .args(&argv)
            .stdin(Stdio::null())
            .kill_on_drop(true);
        let dir = tempfile::Builder::new()
            .prefix("meshlimit-bin-")
            .tempdir()
            .expect("creating a temporary directory");
        Self::spawn(command, &argv, dir).await
    }

    /// Runs `command` with its output in `dir`'s log and waits until it serves.
    async fn spawn(mut command: tokio::process::Command, argv: &[&str], dir: TempDir) -> Meshlimit {
        let log = File::create(dir.path().join("meshlimit.log")).expect("creating the log");
        let child = command
            .stdout(log.try_clone().expect("duplicating the log handle"))
            .stderr(log)
            .spawn()
            .expect("starting meshlimit");
        let mut process = Meshlimit {
            grpc: SocketAddr::from(([127, 0, 0, 1], 0)),
            http: SocketAddr::from(([127, 0, 0, 1], 0)),
            child,
            dir,
        };
        let deadline = tokio::time::Instant::now() + PROCESS_TIMEOUT;
        loop {
            if let Some((grpc, http)) = serving_addresses(&process.log()) {
                (process.grpc, process.http) = (grpc, http);
                return process;
            }
            if let Some(status) = process.child.try_wait().expect("polling meshlimit") {
                panic!(
                    "meshlimit {argv:?} exited with {status} before serving:\n{}",
                    process.log()
                );
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "meshlimit {argv:?} did not serve within {PROCESS_TIMEOUT:?}:\n{}",
                process.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Everything the process wrote so far (stdout and stderr), without colour codes.
    pub fn log(&self) -> String {
        strip_ansi(&self.raw_log())
    }

    /// Everything the process wrote so far, as written.
    pub fn raw_log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("meshlimit.log")
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// A RateLimitService client on a fresh connection.
    pub async fn client(&self) -> RateLimitServiceClient<Channel> {
        RateLimitServiceClient::new(self.channel().await)
    }

    /// One ShouldRateLimit call on a fresh connection, bounded by 10 s; any gRPC error
    /// fails the test.
    pub async fn ask(&self, request: RateLimitRequest) -> RateLimitResponse {
        let mut client = self.client().await;
        tokio::time::timeout(Duration::from_secs(10), client.should_rate_limit(request))
            .await
            .expect("ShouldRateLimit hung")
            .expect("ShouldRateLimit")
            .into_inner()
    }

    /// A grpc.health.v1 client on a fresh connection.
    pub async fn health(&self) -> HealthClient<Channel> {
        HealthClient::new(self.channel().await)
    }

    async fn channel(&self) -> Channel {
        Channel::from_shared(format!("http://{}", self.grpc))
            .expect("gRPC URI")
            .connect_timeout(Duration::from_secs(5))
            .connect()
            .await
            .unwrap_or_else(|e| panic!("connecting to meshlimit at {}: {e}", self.grpc))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("meshlimit still running")
    }

    /// Waits (bounded) for the process to end by itself; its exit status.
    pub async fn wait(&mut self) -> ExitStatus {
        tokio::time::timeout(PROCESS_TIMEOUT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("meshlimit still runs after {PROCESS_TIMEOUT:?}"))
            .expect("waiting for meshlimit")
    }

    /// Sends SIGTERM, without waiting.
    pub fn sigterm(&self) {
        let pid = self.pid().to_string();
        let sent = std::process::Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("running kill");
        assert!(sent.success(), "kill -TERM {pid}: {sent}");
    }

    /// Sends SIGTERM and waits (bounded) for the process to end; its exit status.
    pub async fn terminate(mut self) -> ExitStatus {
        self.sigterm();
        tokio::time::timeout(PROCESS_TIMEOUT, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("meshlimit ignored SIGTERM for {PROCESS_TIMEOUT:?}"))
            .expect("waiting for meshlimit")
    }
}

impl Drop for Meshlimit {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- log of meshlimit (gRPC {}, HTTP {}) ---\n{}",
                self.grpc,
                self.http,
                self.log()
            );
        }
        // kill_on_drop ends a process still running.
    }
}

/// The addresses in the `meshlimit serving grpc=… http=…` line, once logged (as text,
/// or as JSON: `"grpc":"…"`).
fn serving_addresses(log: &str) -> Option<(SocketAddr, SocketAddr)> {
    let line = log.lines().find(|l| l.contains("meshlimit serving"))?;
    let field = |name: &str| {
        let text = line
            .split_once(&format!(" {name}="))
            .or_else(|| line.split_once(&format!("\"{name}\":\"")))?
            .1;
        let end = text.find([' ', '"']).unwrap_or(text.len());
        text[..end].parse().ok()
    };
    // A Unix socket (--grpc-uds) has no address: the tests that use one connect to it.
    let grpc = field("grpc").unwrap_or(SocketAddr::from(([127, 0, 0, 1], 0)));
    Some((grpc, field("http")?))
}

/// `text` without ANSI escape sequences (`ESC [ … letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// `--store redis --redis-url <url> --redis-timeout-ms <timeout_ms> --redis-failure
/// <failure>`: the Redis store's `serve` flags.
pub fn redis_flags(url: &str, failure: &str, timeout_ms: u64) -> Vec<String> {
    [
        "--store",
        "redis",
        "--redis-url",
        url,
        "--redis-timeout-ms",
        &timeout_ms.to_string(),
        "--redis-failure",
        failure,
    ]
    .map(str::to_string)
    .to_vec()
}

impl Meshlimit {
    /// [`Meshlimit::start`] on the Redis store ([`redis_flags`]), then `args`.
    pub async fn start_on_redis(
        config: &Path,
        url: &str,
        failure: &str,
        timeout_ms: u64,
        args: &[&str],
    ) -> Meshlimit {
        let flags = redis_flags(url, failure, timeout_ms);
        let mut all: Vec<&str> = flags.iter().map(String::as_str).collect();
        all.extend_from_slice(args);
        Self::start(config, &all).await
    }
}

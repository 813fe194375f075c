//! Issue 9, defect 7: idle connections were never closed, and a descriptor shortage
//! stopped everything. Before the fix, 2,000 idle connections to each port were all
//! held for 45 s+, and under `ulimit -n 256` every call failed while they were held.
//!
//! Against the `meshlimit` binary: idle connections on both ports are closed after
//! `--idle-timeout-ms` while a connection with an open stream or the client's keepalive
//! pings is kept; beyond `--max-connections` connections are closed at once; and under a
//! low descriptor limit a flood neither stops the server for good nor floods its log.
//! Floods are bounded in count; every wait is bounded in time.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::process::Meshlimit;
use support::{eventually_async, http_get, rls_request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::Channel;

const LIMITS: &str =
    "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 1000}\n";

fn config() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("d.yaml"), LIMITS).unwrap();
    dir
}

/// The value of the unlabelled metric `name` in `/metrics`.
async fn metric(ml: &Meshlimit, name: &str) -> u64 {
    metrics(ml, &[name]).await[0]
}

/// The values of the unlabelled metrics `names`, read from one scrape (one connection).
async fn metrics(ml: &Meshlimit, names: &[&str]) -> Vec<u64> {
    let (status, text) = http_get(ml.http, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    names
        .iter()
        .map(|name| {
            text.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
                .unwrap_or_else(|| panic!("no {name} in /metrics"))
                .trim()
                .parse()
                .unwrap()
        })
        .collect()
}

/// Whether the server has closed `stream` (EOF or reset), waiting at most `wait`.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> bool {
    let mut byte = [0u8; 512];
    loop {
        match tokio::time::timeout(wait, stream.read(&mut byte)).await {
            Err(_) => return false,
            Ok(Ok(0) | Err(_)) => return true,
            Ok(Ok(_)) => continue, // a response being read
        }
    }
}

async fn channel(addr: SocketAddr, keepalive: bool) -> Channel {
    let mut endpoint = Channel::from_shared(format!("http://{addr}")).unwrap();
    if keepalive {
        endpoint = endpoint
            .http2_keep_alive_interval(Duration::from_millis(100))
            .keep_alive_timeout(Duration::from_secs(10))
            .keep_alive_while_idle(true);
    }
    endpoint.connect().await.expect("connect")
}

async fn call(channel: &Channel) -> bool {
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
    let mut client = RateLimitServiceClient::new(channel.clone());
    let request = rls_request("d", &[&[("k", "v")]]);
    matches!(
        tokio::time::timeout(Duration::from_secs(10), client.should_rate_limit(request)).await,
        Ok(Ok(r)) if r.get_ref().overall_code == Code::Ok as i32
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_connections_are_closed_on_both_ports() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--idle-timeout-ms", "300"]).await;

    // Connections that never send a byte, to both ports.
    let mut silent = Vec::new();
    for addr in [ml.grpc, ml.http] {
        for _ in 0..10 {
            silent.push(TcpStream::connect(addr).await.unwrap());
        }
    }
    // An HTTP/1.1 keep-alive connection after one request.
    let mut kept_alive = TcpStream::connect(ml.http).await.unwrap();
    kept_alive
        .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: t\r\n\r\n")
        .await
        .unwrap();
    // A gRPC connection after one call.
    let used = channel(ml.grpc, false).await;
    assert!(call(&used).await);

    for stream in silent.iter_mut().chain([&mut kept_alive]) {
        assert!(
            closed_within(stream, Duration::from_secs(30)).await,
            "an idle connection was kept open"
        );
    }
    // The gRPC connection is gone too: only the scrape's own connection is open.
    eventually_async(30, "only the scrape's connection open", || async {
        metric(&ml, "meshlimit_connections_open").await == 1
    })
    .await;
    assert!(metric(&ml, "meshlimit_connections_idle_closed_total").await >= 22);
    // The channel reconnects for the next call.
    assert!(call(&used).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_streams_and_keepalive_pings_keep_connections() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--idle-timeout-ms", "1000"]).await;

    // The client pings every 100 ms; no calls after the first.
    let pinging = channel(ml.grpc, true).await;
    assert!(call(&pinging).await);
    // A server stream (health Watch) stays open without any traffic.
    let mut health =
        tonic_health::pb::health_client::HealthClient::new(channel(ml.grpc, false).await);
    let mut watch = health
        .watch(tonic_health::pb::HealthCheckRequest::default())
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.expect("first status");
    assert!(first.is_some());
    // A control: one call, then silence, on a connection opened after the two above. Its
    // closing as idle is the signal that an idle timeout has passed for them too.
    let silent = channel(ml.grpc, false).await;
    assert!(call(&silent).await);
    // Then the pinging channel, the health stream's and the scrape's own are the ones open:
    // were either of the first two closed as idle, three would never be reached again
    // (nothing here reconnects them).
    eventually_async(
        20,
        "the silent connection closed, the other two open",
        || async {
            let values = metrics(
                &ml,
                &[
                    "meshlimit_connections_idle_closed_total",
                    "meshlimit_connections_open",
                ],
            )
            .await;
            values[0] >= 1 && values[1] == 3
        },
    )
    .await;
    assert!(call(&pinging).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_the_cap_are_refused_at_once() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--max-connections", "8"]).await;

    let mut flood = Vec::new();
    for _ in 0..50 {
        flood.push(TcpStream::connect(ml.grpc).await.unwrap());
    }
    // 42 are closed at once (well before the 10 s a silent connection may stay); all are
    // watched together.
    let mut watching = tokio::task::JoinSet::new();
    for mut stream in flood {
        watching.spawn(async move {
            let closed = closed_within(&mut stream, Duration::from_secs(3)).await;
            (closed, stream)
        });
    }
    let mut refused = 0;
    let mut held = Vec::new();
    while let Some(watched) = watching.join_next().await {
        match watched.unwrap() {
            (true, _) => refused += 1,
            (false, stream) => held.push(stream),
        }
    }
    assert_eq!((refused, held.len()), (42, 8));
    // While the cap is full, a new connection is refused too.
    let mut extra = TcpStream::connect(ml.http).await.unwrap();
    assert!(closed_within(&mut extra, Duration::from_secs(5)).await);

    // The flood ends: fresh calls succeed, and the refusals were counted.
    drop(held);
    eventually_async(20, "a call after the flood", || async {
        call(&channel(ml.grpc, false).await).await
    })
    .await;
    assert!(metric(&ml, "meshlimit_connections_refused_total").await >= 43);
    let warnings = ml.log().matches("--max-connections reached").count();
    assert!(
        (1..=2).contains(&warnings),
        "{warnings} refusal lines logged"
    );
}

/// Opens up to `n` connections to `addr` (each bounded by 2 s) and keeps them.
async fn flood(addr: SocketAddr, n: usize) -> Vec<TcpStream> {
    let mut streams = Vec::new();
    for _ in 0..n {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_secs(2), TcpStream::connect(addr)).await
        {
            streams.push(s);
        }
    }
    streams
}

async fn serves(ml: &Meshlimit) -> bool {
    let healthy = support::http_request(ml.http, "/healthcheck", &[])
        .await
        .is_ok_and(|(status, _, _)| status == 200);
    healthy
        && match tokio::time::timeout(Duration::from_secs(5), channel(ml.grpc, false)).await {
            Ok(channel) => call(&channel).await,
            Err(_) => false,
        }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_descriptors_backs_off_logs_little_and_recovers() {
    let dir = config();
    // A cap far above the descriptor limit, so that accept itself runs out.
    let ml = Meshlimit::start_with_nofile(dir.path(), 64, &["--max-connections", "100000"]).await;
    let held = flood(ml.grpc, 200).await;
    // Give the accept loop time to meet EMFILE again and again.
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(held);
    eventually_async(30, "health and a call after the flood", || serves(&ml)).await;
    // Reloads read files again too.
    std::fs::write(dir.path().join("d.yaml"), LIMITS.replace("1000", "7")).unwrap();
    let fresh = std::sync::atomic::AtomicUsize::new(0);
    eventually_async(30, "the edited limit is live", || async {
        let key = format!(
            "fresh{}",
            fresh.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        );
        let answer = ml.ask(rls_request("d", &[&[("k", &key)]])).await;
        answer.statuses[0].limit_remaining == 6
    })
    .await;
    let log = ml.log();
    let lines = log.matches("out of file descriptors").count();
    assert!(
        (1..=4).contains(&lines),
        "{lines} lines about running out of descriptors:\n{log}"
    );
    assert!(metric(&ml, "meshlimit_connections_accept_descriptor_errors_total").await >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_cap_keeps_descriptors_for_the_server() {
    let dir = config();
    let ml = Meshlimit::start_with_nofile(dir.path(), 256, &[]).await;
    let held = flood(ml.grpc, 300).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    drop(held);
    eventually_async(30, "health and a call after the flood", || serves(&ml)).await;
    assert!(
        !ml.log().contains("out of file descriptors"),
        "{}",
        ml.log()
    );
    assert!(metric(&ml, "meshlimit_connections_refused_total").await >= 100);
    assert_eq!(metric(&ml, "meshlimit_connections_max").await, 192);
}

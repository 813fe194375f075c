//! A real Envoy in front of meshlimit, with the repository's example config and limits.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use meshlimit::rules::Algorithm;
use support::TestServer;

/// Envoy with examples/envoy/envoy.yaml, its ports moved to free ones; killed on drop.
struct Envoy {
    child: std::process::Child,
    _dir: tempfile::TempDir,
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limits_through_meshlimit() {
    let repo = env!("CARGO_MANIFEST_DIR");
    let server = TestServer::start(
        &std::path::Path::new(repo).join("config"),
        Algorithm::TokenBucket,
    )
    .await;
    let ports: Vec<(u16, u16)> = [9901, 10000, 10001, 10002]
        .into_iter()
        .map(|p| (p, support::free_port()))
        .chain([(8081, server.grpc.port())])
        .collect();
    let mut yaml = std::fs::read_to_string(format!("{repo}/examples/envoy/envoy.yaml")).unwrap();
    for (from, to) in &ports {
        yaml = yaml.replace(
            &format!("port_value: {from} "),
            &format!("port_value: {to} "),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("envoy.yaml");
    std::fs::write(&config, yaml).unwrap();
    let child = std::process::Command::new(support::envoy_binary())
        .args([
            "-c",
            config.to_str().unwrap(),
            "--disable-hot-restart",
            "--log-level",
            "warn",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("start envoy");
    let _envoy = Envoy { child, _dir: dir };
    let port = |p: u16| -> SocketAddr {
        format!(
            "127.0.0.1:{}",
            ports.iter().find(|(f, _)| *f == p).unwrap().1
        )
        .parse()
        .unwrap()
    };

    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok((200, _, body)) = support::http_request(port(9901), "/ready", &[]).await {
            if body.contains("LIVE") {
                break;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "Envoy did not become ready"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // backtesting.run: 5/min, burst 1 per user: 200, then 429 with Envoy's headers.
    let path = "/backtesting.BacktestingService/Run";
    let user = [("x-user-id", "alice")];
    let (status, headers, _) = support::http_request(port(10000), path, &user)
        .await
        .unwrap();
    assert_eq!(status, 200, "{headers:?}");
    assert!(
        headers
            .iter()
            .any(|h| h.starts_with("x-ratelimit-limit: 5")),
        "{headers:?}"
    );
    assert!(
        headers.iter().any(|h| h == "x-ratelimit-remaining: 0"),
        "{headers:?}"
    );
    let (status, headers, _) = support::http_request(port(10000), path, &user)
        .await
        .unwrap();
    assert_eq!(status, 429, "{headers:?}");
    assert!(
        headers.iter().any(|h| h == "x-envoy-ratelimited: true"),
        "{headers:?}"
    );
    // Another user is not limited by alice's bucket.
    let (status, _, _) = support::http_request(port(10000), path, &[("x-user-id", "bob")])
        .await
        .unwrap();
    assert_eq!(status, 200);

    // The dashboard listener: auth tier, 10/min per user.
    let mut codes = Vec::new();
    for _ in 0..11 {
        let (status, _, _) = support::http_request(port(10002), "/auth/login", &user)
            .await
            .unwrap();
        codes.push(status);
    }
    assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 10, "{codes:?}");
    assert_eq!(codes[10], 429, "{codes:?}");
    server.stop().await;
}

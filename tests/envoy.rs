//! A real Envoy in front of meshlimit, with the repository's example config
//! (examples/envoy/envoy.yaml) and limits (config/).
//!
//! The limits are the repository's with every unit a day: the same counts and bursts, but
//! no token comes back while the test runs (a minute's would on a slow enough machine), so
//! every count here is exact.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;

use meshlimit::rules::Algorithm;
use support::TestServer;
use support::envoy::{Envoy, EnvoyPorts, Reply};

/// examples/envoy/envoy.yaml on the given ports, with meshlimit at `grpc`.
fn example_config(ports: &EnvoyPorts, grpc: SocketAddr) -> String {
    let repo = env!("CARGO_MANIFEST_DIR");
    let mut yaml = std::fs::read_to_string(format!("{repo}/examples/envoy/envoy.yaml"))
        .expect("reading examples/envoy/envoy.yaml");
    let moves = [
        (9901, ports.admin),
        (10000, ports.listeners[0]),
        (10001, ports.listeners[1]),
        (10002, ports.listeners[2]),
        (10003, ports.listeners[3]),
        (8081, grpc.port()),
    ];
    for (from, to) in moves {
        let from = format!("port_value: {from} ");
        assert!(yaml.contains(&from), "the example no longer has `{from}`");
        yaml = yaml.replace(&from, &format!("port_value: {to} "));
    }
    // Test-only changes. Without reuse_port a port taken by another process makes
    // Envoy fail (and the harness retry) instead of sharing it. A generous filter timeout:
    // a slow machine must not turn decisions into fail-closed 500s.
    let listeners = "\n    filter_chains:";
    assert_eq!(yaml.matches(listeners).count(), 4, "four listeners");
    yaml = yaml.replace(
        listeners,
        "\n    enable_reuse_port: false\n    filter_chains:",
    );
    let timeout = "\n              timeout: 0.25s\n";
    assert_eq!(yaml.matches(timeout).count(), 3, "three rate-limit filters");
    yaml.replace(timeout, "\n              timeout: 10s\n")
}

/// The repository's config/ in `dir`, every `unit: second` or `unit: minute` made a day.
fn limits_per_day(dir: &Path) {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("config");
    let files = std::fs::read_dir(&repo).expect("reading config/");
    for file in files {
        let path = file.expect("config/ entry").path();
        let text = std::fs::read_to_string(&path).expect("reading a config file");
        let per_day = text
            .replace("unit: second", "unit: day")
            .replace("unit: minute", "unit: day");
        std::fs::write(dir.join(path.file_name().expect("a file name")), per_day)
            .expect("writing a config file");
    }
}

async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    support::envoy::request(addr, path, headers)
        .await
        .unwrap_or_else(|e| panic!("GET {path} on {addr}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_limits_through_meshlimit() {
    let limits = tempfile::tempdir().expect("tempdir");
    limits_per_day(limits.path());
    let server = TestServer::start(limits.path(), Algorithm::TokenBucket).await;
    let grpc = server.grpc;
    let envoy = Envoy::start(4, |ports| example_config(ports, grpc)).await;
    let (trading, dashboard) = (envoy.listener(0), envoy.listener(2));
    let capped = envoy.listener(3);

    // backtesting.run: 5/day, burst 1 per user: 200, then 429 with Envoy's headers.
    let path = "/backtesting.BacktestingService/Run";
    let alice = [("x-user-id", "alice")];
    let reply = get(trading, path, &alice).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let limit = "5, 5;w=86400;name=\"backtesting_run\"";
    assert_eq!(reply.header("x-ratelimit-limit"), Some(limit), "{reply:?}");
    assert_eq!(
        reply.header("x-ratelimit-remaining"),
        Some("0"),
        "{reply:?}"
    );
    let reply = get(trading, path, &alice).await;
    assert_eq!(reply.status, 429, "{reply:?}");
    assert_eq!(
        reply.header("x-envoy-ratelimited"),
        Some("true"),
        "{reply:?}"
    );
    // Another user is not limited by alice's bucket.
    let reply = get(trading, path, &[("x-user-id", "bob")]).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    // The dashboard listener: auth tier, 10/day per user.
    let mut codes = Vec::new();
    for _ in 0..11 {
        codes.push(get(dashboard, "/auth/login", &alice).await.status);
    }
    assert_eq!(codes.iter().filter(|&&c| c == 200).count(), 10, "{codes:?}");
    assert_eq!(codes[10], 429, "{codes:?}");

    anonymous_auth_is_limited_per_client_ip(dashboard).await;
    two_limits_on_one_rule(capped).await;
    server.stop().await;
}

/// config/trading_caps.yaml: submit_order has two limits (here 100/day burst 10, and the
/// daily cap 20000/day). Ten pass and the eleventh is refused by the burst; the headers
/// describe the binding limit, the one with the fewest left.
async fn two_limits_on_one_rule(capped: SocketAddr) {
    let path = "/trading.TradingService/SubmitOrder";
    let carol = [("x-user-id", "carol")];
    for remaining in (0..10).rev() {
        let reply = get(capped, path, &carol).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        let limit = "100, 100;w=86400;name=\"submit_order\"";
        assert_eq!(reply.header("x-ratelimit-limit"), Some(limit), "{reply:?}");
        let remaining = remaining.to_string();
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            Some(remaining.as_str()),
            "{reply:?}"
        );
    }
    let reply = get(capped, path, &carol).await;
    assert_eq!(reply.status, 429, "{reply:?}");
}

/// Without x-user-id, /auth is limited per client IP (header_value_match with
/// `expect_match: false`, then remote_address): 5/day from 127.0.0.1, a forged
/// x-forwarded-for does not escape it (the listener uses the TCP peer), another loopback
/// address (127.0.0.2) has its own budget, and other tiers stay unlimited for anonymous
/// callers.
async fn anonymous_auth_is_limited_per_client_ip(dashboard: SocketAddr) {
    let limit = "5, 5;w=86400;name=\"anonymous_auth_per_ip\"";
    for remaining in ["4", "3", "2", "1", "0"] {
        let reply = get(dashboard, "/auth/login", &[]).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.header("x-ratelimit-limit"), Some(limit), "{reply:?}");
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            Some(remaining),
            "{reply:?}"
        );
    }
    let reply = get(dashboard, "/auth/login", &[]).await;
    assert_eq!(reply.status, 429, "{reply:?}");
    assert_eq!(reply.header("x-ratelimit-limit"), Some(limit), "{reply:?}");
    let forged = [("x-forwarded-for", "203.0.113.7")];
    let reply = get(dashboard, "/auth/login", &forged).await;
    assert_eq!(
        reply.status, 429,
        "x-forwarded-for must be ignored: {reply:?}"
    );

    let other_ip = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    let reply = support::envoy::request_from(Some(other_ip), dashboard, "/auth/login", &[])
        .await
        .unwrap_or_else(|e| panic!("GET /auth/login from {other_ip}: {e}"));
    assert_eq!(reply.status, 200, "from {other_ip}: {reply:?}");
    assert_eq!(
        reply.header("x-ratelimit-remaining"),
        Some("4"),
        "{reply:?}"
    );

    let reply = get(dashboard, "/compute/report", &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("x-ratelimit-limit"), None, "{reply:?}");
}

/// Envoy reaching meshlimit over a Unix socket (`--grpc-uds`, a `pipe` address) and
/// reading the dynamic metadata of its answers (`--response-dynamic-metadata`): the route
/// copies `metadata.pool` into a response header, and the merged domain's rule `tier`
/// comes from a second file (`--merge-domain-config`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_reads_dynamic_metadata_over_a_unix_socket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("config");
    std::fs::create_dir(&config).unwrap();
    std::fs::write(
        config.join("a.yaml"),
        "domain: models\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 100}\n",
    )
    .unwrap();
    std::fs::write(
        config.join("b.yaml"),
        "domain: models\ndescriptors:\n  - key: tier\n    value: gold\n    metadata: {pool: fast}\n    rate_limit: {unit: day, requests_per_unit: 2}\n",
    )
    .unwrap();
    let socket = dir.path().join("meshlimit.sock");
    let flags = ["--merge-domain-config", "--response-dynamic-metadata"];
    let meshlimit = support::process::Meshlimit::start_on_socket(&config, &socket, &flags).await;
    let envoy = Envoy::start(2, |ports| {
        support::envoy::with_front(&support::envoy::with_backend(METADATA_ENVOY))
            .replace("@ADMIN@", &ports.admin.to_string())
            .replace("@FRONT@", &ports.listeners[0].to_string())
            .replace("@BACKEND@", &ports.listeners[1].to_string())
            .replace(
                "@MESHLIMIT_CLUSTER@\n",
                &support::envoy::h2_cluster(
                    "meshlimit",
                    &format!("pipe: {{ path: \"{}\" }}", socket.display()),
                ),
            )
    })
    .await;
    let front = envoy.listener(0);
    let gold = [("x-user", "alice"), ("x-tier", "gold")];
    for _ in 0..2 {
        let reply = get(front, "/", &gold).await;
        assert_eq!(reply.status, 200, "{reply:?}");
        assert_eq!(reply.header("x-pool"), Some("fast"), "{reply:?}");
    }
    // Over the tier's limit: refused, and no rule that passed has metadata.
    let reply = get(front, "/", &gold).await;
    assert_eq!(reply.status, 429, "{reply:?}\n{}", meshlimit.log());
    let reply = get(front, "/", &[("x-user", "bob")]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    // No passing rule with metadata: Envoy finds no `pool` and adds no header.
    assert_eq!(reply.header("x-pool"), None, "{reply:?}");
}

/// One front listener whose route asks meshlimit (over a pipe) about `user` and `tier`
/// and copies `metadata.pool` of the answer's dynamic metadata into `x-pool`.
const METADATA_ENVOY: &str = r#"
@FRONT_HEAD@
          stat_prefix: front_http
          route_config:
            virtual_hosts:
            - name: models
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - request_headers: { header_name: x-user, descriptor_key: user }
                  - actions:
                    - request_headers: { header_name: x-tier, descriptor_key: tier }
                response_headers_to_add:
                - header:
                    key: x-pool
                    value: "%DYNAMIC_METADATA(envoy.filters.http.ratelimit:metadata:pool)%"
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: models
              failure_mode_deny: true
              timeout: 10s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: { envoy_grpc: { cluster_name: meshlimit } }
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
@BACKEND_LISTENER@
  clusters:
@BACKEND_CLUSTER@
@MESHLIMIT_CLUSTER@
"#;

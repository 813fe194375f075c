//! Config from an xDS control plane (issue 13), against the `meshlimit` binary and a real
//! ADS server ([`support::ads`]): the first snapshot enforced and ACKed with the node's
//! id and metadata; an update; an invalid update NACKed while the last good limits stay;
//! the control plane going away and coming back; the Go server's variables; startup
//! waiting for the first snapshot, or serving without one; `validate` and `explain`;
//! TLS to the control plane.

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use support::ads::{AdsServer, TYPE_URL};
use support::pki::Pki;
use support::process::{self, Meshlimit};
use support::{eventually_async, http_get, rls_request};

/// Resource `limits`, domain `shop`: `user` limited to `requests` a minute (`unit`
/// UNKNOWN leaves the unit unset: invalid).
fn limits(requests: u32, unit: RateLimitUnit) -> RateLimitConfig {
    RateLimitConfig {
        name: "limits".into(),
        domain: "shop".into(),
        descriptors: vec![RateLimitDescriptor {
            key: "user".into(),
            rate_limit: Some(RateLimitPolicy {
                unit: unit as i32,
                requests_per_unit: requests,
                ..RateLimitPolicy::default()
            }),
            ..RateLimitDescriptor::default()
        }],
    }
}

/// `limits(requests, MINUTE)`.
fn per_minute(requests: u32) -> RateLimitConfig {
    limits(requests, RateLimitUnit::Minute)
}

/// `serve` on loopback port 0 following `ads`, node `ml-test` with metadata
/// `zone=a,team=rl`, quick reconnections, then `more`.
fn serve_args(ads: &AdsServer, more: &[&str]) -> Vec<String> {
    let mut argv: Vec<String> = [
        "serve",
        "--xds-server",
        &ads.address(),
        "--xds-node-id",
        "ml-test",
        "--xds-node-metadata",
        "zone=a,team=rl",
        "--xds-backoff-initial-ms",
        "50",
        "--xds-backoff-max-ms",
        "200",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--log",
        "info",
    ]
    .map(str::to_string)
    .to_vec();
    argv.extend(more.iter().map(|s| s.to_string()));
    argv
}

async fn serve(ads: &AdsServer, more: &[&str], env: &[(&str, &str)]) -> Meshlimit {
    let argv = serve_args(ads, more);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    Meshlimit::start_with(&argv, env).await
}

/// Whether each of `n` hits on `user=<user>` in domain `shop` was allowed.
async fn hits(ml: &Meshlimit, user: &str, n: usize) -> Vec<bool> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let answer = ml.ask(rls_request("shop", &[&[("user", user)]])).await;
        out.push(answer.overall_code == Code::Ok as i32);
    }
    out
}

/// `limit` hits on a fresh user pass and the next is refused.
async fn assert_limit(ml: &Meshlimit, user: &str, limit: usize) {
    let mut expected = vec![true; limit];
    expected.push(false);
    assert_eq!(
        hits(ml, user, limit + 1).await,
        expected,
        "limit {limit} for {user}"
    );
}

/// `/rlconfig` names the xDS source at `version` and holds `line`.
async fn assert_rlconfig(ml: &Meshlimit, version: &str, line: &str) {
    let rlconfig = http_get(ml.http, "/rlconfig").await.1;
    let source = format!("# source xds version {version},");
    assert!(rlconfig.contains(&source), "{rlconfig}");
    assert!(rlconfig.contains(line), "{rlconfig}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_snapshot_is_enforced_and_acked_with_the_node() {
    let ads = AdsServer::start().await;
    ads.push("v1", &[per_minute(3)]);
    let ml = serve(&ads, &[], &[]).await;
    assert_limit(&ml, "alice", 3).await;

    let subscription = ads
        .wait_for("subscription", |s| s.response_nonce.is_empty())
        .await;
    assert_eq!(subscription.type_url, TYPE_URL);
    assert_eq!(subscription.version_info, "", "nothing held yet");
    let node = subscription.node.expect("the node is sent");
    assert_eq!(node.id, "ml-test");
    let metadata = node.metadata.expect("node metadata");
    let text = |k: &str| format!("{:?}", metadata.fields.get(k).and_then(|v| v.kind.clone()));
    assert_eq!(text("zone"), "Some(StringValue(\"a\"))");
    assert_eq!(text("team"), "Some(StringValue(\"rl\"))");
    let ack = ads.wait_for("ACK of v1", |s| s.is_ack_of("v1")).await;
    assert_eq!(
        ads.nonces_of("v1"),
        std::slice::from_ref(&ack.response_nonce)
    );
    assert_eq!(ack.node.map(|n| n.id).as_deref(), Some("ml-test"));

    assert_rlconfig(&ml, "v1", "shop.user: unit=MINUTE requests_per_unit=3,").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_is_enforced_and_acked() {
    let ads = AdsServer::start().await;
    ads.push("v1", &[per_minute(3)]);
    let ml = serve(&ads, &[], &[]).await;
    assert_limit(&ml, "bob", 3).await;
    ads.wait_for("ACK of v1", |s| s.is_ack_of("v1")).await;

    ads.push("v2", &[limits(5, RateLimitUnit::Hour)]);
    let ack = ads.wait_for("ACK of v2", |s| s.is_ack_of("v2")).await;
    assert_eq!(ads.nonces_of("v2"), [ack.response_nonce]);
    // The swap comes before the ACK: the new limit is in force.
    assert_limit(&ml, "carol", 5).await;
    assert_rlconfig(&ml, "v2", "shop.user: unit=HOUR requests_per_unit=5,").await;
}

/// A snapshot that adds a domain leaves the rules it does not change alone, counters
/// included: a user out of tokens stays out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_keeps_the_counters_of_unchanged_rules() {
    let ads = AdsServer::start().await;
    ads.push("v1", &[per_minute(3)]);
    let ml = serve(&ads, &[], &[]).await;
    assert_limit(&ml, "dave", 3).await;

    let other = RateLimitConfig {
        name: "other".into(),
        domain: "other".into(),
        ..per_minute(1)
    };
    ads.push("v2", &[per_minute(3), other]);
    ads.wait_for("ACK of v2", |s| s.is_ack_of("v2")).await;
    assert_eq!(hits(&ml, "dave", 1).await, [false], "the counter was kept");
    assert_limit(&ml, "erin", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_update_is_nacked_and_the_last_good_limits_stay() {
    let ads = AdsServer::start().await;
    ads.push("v1", &[per_minute(3)]);
    let ml = serve(&ads, &[], &[]).await;
    ads.wait_for("ACK of v1", |s| s.is_ack_of("v1")).await;

    ads.push("v2", &[limits(5, RateLimitUnit::Unknown)]);
    let nack = ads.wait_for("NACK", |s| s.error_detail.is_some()).await;
    assert_eq!(
        nack.version_info, "v1",
        "a NACK names the version still held"
    );
    assert_eq!(
        ads.nonces_of("v2"),
        std::slice::from_ref(&nack.response_nonce)
    );
    let detail = nack.error_detail.unwrap();
    assert_eq!(detail.code, 3, "INVALID_ARGUMENT");
    assert_eq!(
        detail.message,
        "xds:limits: descriptor 'shop.user': invalid rate limit unit ''"
    );

    assert_limit(&ml, "dave", 3).await;
    assert_rlconfig(
        &ml,
        "v1",
        "#   xds:limits: descriptor 'shop.user': invalid rate limit unit ''",
    )
    .await;
    let metrics = http_get(ml.http, "/metrics").await.1;
    assert!(
        metrics
            .lines()
            .any(|l| l == "meshlimit_config_last_load_failed 1"),
        "{metrics}"
    );

    // Fixed: ACKed, the error cleared.
    ads.push("v3", &[per_minute(4)]);
    ads.wait_for("ACK of v3", |s| s.is_ack_of("v3")).await;
    assert_limit(&ml, "erin", 4).await;
    let metrics = http_get(ml.http, "/metrics").await.1;
    assert!(
        metrics
            .lines()
            .any(|l| l == "meshlimit_config_last_load_failed 0"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serving_goes_on_while_the_control_plane_is_away() {
    let mut ads = AdsServer::start().await;
    ads.push("v1", &[per_minute(3)]);
    let ml = serve(&ads, &[], &[]).await;
    ads.wait_for("ACK of v1", |s| s.is_ack_of("v1")).await;

    ads.stop().await;
    eventually_async(20, "the outage logged", || async {
        ml.log().contains("xDS control plane unreachable")
    })
    .await;
    assert_limit(&ml, "frank", 3).await;
    let outage_lines = ml.log().matches("xDS control plane unreachable").count();

    ads.push("v2", &[per_minute(6)]);
    let streams_before = ads.seen().iter().map(|s| s.stream).max().unwrap();
    ads.restart().await;
    let again = ads
        .wait_for("a new subscription", |s| s.stream > streams_before)
        .await;
    assert_eq!(
        again.version_info, "v1",
        "resubscribing names the version held"
    );
    assert!(again.response_nonce.is_empty());
    ads.wait_for("ACK of v2", |s| s.is_ack_of("v2")).await;
    assert_limit(&ml, "grace", 6).await;
    let log = ml.log();
    assert_eq!(
        outage_lines,
        log.matches("xDS control plane unreachable").count(),
        "an outage is logged once:\n{log}"
    );
    assert!(
        log.contains("receiving config from the xDS control plane"),
        "{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_go_variables_configure_the_xds_source() {
    let ads = AdsServer::start().await;
    ads.push("go-1", &[per_minute(2)]);
    let url = ads.address();
    let env = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_URL", url.as_str()),
        ("CONFIG_GRPC_XDS_NODE_ID", "go-node"),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "cluster=edge"),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "x-team:ratelimit",
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "50ms"),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "200ms"),
        ("LOG_LEVEL", "info"),
    ];
    let argv = [
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ];
    let ml = Meshlimit::start_with(&argv, &env).await;
    assert_limit(&ml, "heidi", 2).await;
    let ack = ads.wait_for("ACK of go-1", |s| s.is_ack_of("go-1")).await;
    assert_eq!(ack.header("x-team"), Some("ratelimit"));
    let node = ack.node.unwrap();
    assert_eq!(node.id, "go-node");
    assert!(node.metadata.unwrap().fields.contains_key("cluster"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_waits_for_the_first_snapshot() {
    let ads = AdsServer::start().await;
    let argv = serve_args(&ads, &[]);
    let starting = tokio::spawn(async move {
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
        Meshlimit::start_with(&argv, &[]).await
    });
    ads.wait_for("subscription", |s| s.response_nonce.is_empty())
        .await;
    // Subscribed but given nothing: it must not serve. A short grace lets a server that
    // wrongly serves at once say so before the snapshot comes.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(!starting.is_finished(), "served before the first snapshot");
    ads.push("v1", &[per_minute(3)]);
    let ml = starting.await.unwrap();
    let log = ml.log();
    let swapped = log.find("config reloaded").expect("the snapshot applied");
    let serving = log.find("meshlimit serving").unwrap();
    assert!(
        swapped < serving,
        "served before the first snapshot:\n{log}"
    );
    assert_limit(&ml, "ivan", 3).await;
}

/// A server still waiting for its first snapshot stops at once when asked, and cleanly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_waiting_for_its_first_snapshot_stops_on_sigterm() {
    let ads = AdsServer::start().await;
    let argv = serve_args(&ads, &[]);
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    let mut child = process::command(&argv)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("starting meshlimit");
    ads.wait_for("subscription", |s| s.response_nonce.is_empty())
        .await;
    let pid = child.id().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(sent.success());
    let status = tokio::time::timeout(std::time::Duration::from_secs(20), child.wait())
        .await
        .expect("meshlimit ignored SIGTERM while waiting for its first config")
        .expect("waiting for meshlimit");
    assert!(status.success(), "{status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_first_snapshot_every_request_is_allowed() {
    let ads = AdsServer::start().await;
    // The Go variables: health fails until a config loads.
    let strict = serve(
        &ads,
        &[],
        &[
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ],
    )
    .await;
    // The flag alone: healthy at once.
    let lenient = serve(&ads, &["--start-without-config"], &[]).await;
    assert_eq!(hits(&strict, "judy", 5).await, [true; 5]);
    assert_eq!(hits(&lenient, "judy", 5).await, [true; 5]);
    assert_eq!(http_get(strict.http, "/healthcheck").await.0, 500);
    assert_eq!(
        http_get(lenient.http, "/healthcheck").await,
        (200, "OK".into())
    );
    let rlconfig = http_get(strict.http, "/rlconfig").await.1;
    assert!(rlconfig.contains("no config loaded yet"), "{rlconfig}");

    ads.push("v1", &[per_minute(3)]);
    eventually_async(20, "healthy once the snapshot loads", || async {
        http_get(strict.http, "/healthcheck").await == (200, "OK".into())
    })
    .await;
    ads.wait_for("two ACKs of v1", |_| {
        ads.seen().iter().filter(|s| s.is_ack_of("v1")).count() == 2
    })
    .await;
    assert_limit(&strict, "ken", 3).await;
    assert_limit(&lenient, "ken", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validate_and_explain_read_the_control_plane() {
    let ads = AdsServer::start().await;
    let address = ads.address();
    ads.push("v1", &[per_minute(3)]);
    let out = process::run(&["validate", "--xds-server", &address]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("OK (1 domains, 1 rules)"), "{stdout}");
    ads.wait_for("ACK of v1", |s| s.is_ack_of("v1")).await;

    let out = process::run(&[
        "explain",
        "--xds-server",
        &address,
        "--domain",
        "shop",
        "--descriptor",
        "user=x",
    ])
    .await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{out:?}");
    assert!(stdout.contains("shop.user"), "{stdout}");
    assert!(stdout.contains("3"), "{stdout}");

    ads.push("v2", &[limits(3, RateLimitUnit::Unknown)]);
    let out = process::run(&["validate", "--xds-server", &address]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains("xds:limits: descriptor 'shop.user': invalid rate limit unit ''"),
        "{stderr}"
    );
    let nack = ads.wait_for("NACK", |s| s.error_detail.is_some()).await;
    assert_eq!(nack.version_info, "");

    // No control plane: a clear error, not a hang.
    let mut gone = ads;
    gone.stop().await;
    let out = process::run(&["validate", "--xds-server", &address]).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{out:?}");
    assert!(
        stderr.contains(&format!("xds:{address}: cannot connect")),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_the_control_plane() {
    // A CA, and the control plane's certificate it signs.
    let pki = Pki::new();
    pki.issue("cp", "DNS:cp.test,IP:127.0.0.1", 2);
    let read = |name: &str| std::fs::read(pki.path(name)).unwrap();
    let ads = AdsServer::start_tls(read("cp.pem"), read("cp.key")).await;
    ads.push("tls-1", &[per_minute(2)]);
    let ca = pki.arg("ca.pem");
    let server = format!("https://{}", ads.address());
    let ml = Meshlimit::start_with(
        &[
            "serve",
            "--xds-server",
            &server,
            "--xds-tls-ca",
            &ca,
            "--xds-tls-san",
            "cp.test",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--log",
            "info",
        ],
        &[],
    )
    .await;
    assert_limit(&ml, "leo", 2).await;
    ads.wait_for("ACK of tls-1", |s| s.is_ack_of("tls-1")).await;

    // Without the CA, the system's roots do not trust the certificate: validate fails.
    let out = process::run(&["validate", "--xds-server", &server]).await;
    assert!(!out.status.success(), "{out:?}");
}

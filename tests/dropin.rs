//! meshlimit as a drop-in for envoyproxy/ratelimit: started with no arguments and only
//! the Go server's environment variables, on its `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config`
//! tree, in both of its watch modes (the root link swapped; files edited in place); and the
//! Go variables that change how it serves (a Unix socket, merged domains, dynamic
//! metadata), each also as a flag.

mod support;

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::google::protobuf as prost_types_struct;
use hyper_util::rt::TokioIo;
use support::process::Meshlimit;
use support::redis::RedisServer;
use support::statsd::StatsdServer;
use support::{eventually, eventually_async, free_port, http_get};
use tonic::transport::{Channel, Endpoint};

fn limits(requests_per_unit: u32) -> String {
    format!(
        "domain: legacy\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: day\n      requests_per_unit: {requests_per_unit}\n"
    )
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// Points `link` at `target` atomically, as deploy tooling swaps RUNTIME_ROOT.
fn swap_link(link: &Path, target: &Path) {
    let tmp = link.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

/// The remaining count of `user=<user>` after one hit, or None when over the limit.
async fn hit(ml: &Meshlimit, user: &str) -> Option<u32> {
    let answer = ml
        .ask(support::rls_request("legacy", &[&[("user", user)]]))
        .await;
    (answer.overall_code == Code::Ok as i32).then(|| answer.statuses[0].limit_remaining)
}

/// Waits (bounded) until a fresh user's first hit leaves `limit - 1`: the reload is live.
/// Each probe is a new user, so probing consumes nothing that is checked later.
async fn limit_becomes(ml: &Meshlimit, limit: u32) {
    let probes = AtomicUsize::new(0);
    eventually_async(20, &format!("a limit of {limit}"), || async {
        let user = format!("probe{}", probes.fetch_add(1, Ordering::Relaxed));
        hit(ml, &user).await == Some(limit - 1)
    })
    .await;
}

/// The Go server's variables for a server on fresh loopback ports.
fn go_env(root: &Path, watch_root: bool) -> Vec<(String, String)> {
    [
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("RUNTIME_WATCH_ROOT", watch_root.to_string()),
        ("RUNTIME_IGNOREDOTFILES", "true".into()),
        ("GRPC_HOST", "127.0.0.1".into()),
        ("GRPC_PORT", free_port().to_string()),
        ("HOST", "127.0.0.1".into()),
        ("PORT", free_port().to_string()),
        ("DEBUG_HOST", "127.0.0.1".into()),
        ("DEBUG_PORT", free_port().to_string()),
        ("USE_PROMETHEUS", "true".into()),
        ("PROMETHEUS_ADDR", format!("127.0.0.1:{}", free_port())),
        ("LOG_LEVEL", "info".into()),
        ("LOG_FORMAT", "text".into()),
        // Mapped to --quota-mode; one descriptor a request, so nothing else changes.
        ("QUOTA_MODE", "true".into()),
        // Not supported: must be named in a warning, not break the start.
        ("REDIS_PERSECOND", "true".into()),
        ("REDIS_POOL_SIZE", "20".into()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

async fn start(env: &[(String, String)]) -> Meshlimit {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Meshlimit::start_with(&[], &env).await
}

fn var<'a>(env: &'a [(String, String)], name: &str) -> &'a str {
    &env.iter().find(|(k, _)| k == name).unwrap().1
}

/// The ports the variables named are the ones served on.
async fn check_ports(ml: &Meshlimit, env: &[(String, String)]) {
    assert_eq!(ml.grpc.port().to_string(), var(env, "GRPC_PORT"));
    assert_eq!(ml.http.port().to_string(), var(env, "PORT"));
    assert_eq!(http_get(ml.http, "/healthcheck").await, (200, "OK".into()));
    let debug: SocketAddr = format!("127.0.0.1:{}", var(env, "DEBUG_PORT"))
        .parse()
        .unwrap();
    let (status, text) = http_get(debug, "/rlconfig").await;
    assert_eq!(status, 200);
    assert!(text.contains("legacy.user: unit=DAY"), "{text}");
    assert!(text.contains("# global quota mode"), "{text}");
    let prometheus: SocketAddr = var(env, "PROMETHEUS_ADDR").parse().unwrap();
    let (status, text) = http_get(prometheus, "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        text.contains("ratelimit_service_rate_limit_total_hits{domain=\"legacy\",key1=\"user\"}"),
        "{text}"
    );
    let log = ml.log();
    let warning = log
        .lines()
        .find(|l| l.contains("does not support"))
        .unwrap_or_else(|| panic!("no warning about unsupported settings in:\n{log}"));
    assert!(warning.contains("REDIS_PERSECOND"), "{warning}");
    assert!(warning.contains("REDIS_POOL_SIZE"), "{warning}");
    assert!(!warning.contains("QUOTA_MODE"), "{warning}");
}

/// RUNTIME_WATCH_ROOT=true: RUNTIME_ROOT is a link to a versioned directory; a deploy
/// swaps the link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_env_with_a_swapped_runtime_root() {
    let base = tempfile::tempdir().unwrap();
    let (v1, v2) = (base.path().join("v1"), base.path().join("v2"));
    write(&v1.join("ratelimit/config/legacy.yaml"), &limits(3));
    write(&v2.join("ratelimit/config/legacy.yaml"), &limits(10));
    let root = base.path().join("current");
    std::os::unix::fs::symlink(&v1, &root).unwrap();

    let env = go_env(&root, true);
    let ml = start(&env).await;
    check_ports(&ml, &env).await;
    assert_eq!(hit(&ml, "a").await, Some(2));

    swap_link(&root, &v2);
    limit_becomes(&ml, 10).await;
    // Same bucket, new limit: a's hit so far counts against 10.
    assert_eq!(hit(&ml, "a").await, Some(8));
}

/// RUNTIME_WATCH_ROOT=false: the config directory itself is watched; files are edited in
/// place (the Kubernetes ConfigMap mode).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_env_with_files_edited_in_place() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("ratelimit/config/legacy.yaml");
    write(&file, &limits(2));
    let env = go_env(root.path(), false);
    let ml = start(&env).await;
    check_ports(&ml, &env).await;
    assert_eq!(hit(&ml, "b").await, Some(1));
    assert_eq!(hit(&ml, "b").await, Some(0));
    assert_eq!(hit(&ml, "b").await, None);

    write(&file, &limits(5));
    limit_becomes(&ml, 5).await;
    // b's two hits count against the new limit; its denied one took nothing.
    assert_eq!(hit(&ml, "b").await, Some(2));
    // A broken edit keeps the running limits: once /rlconfig reports the rejected reload,
    // the rules it lists and the answers are still those of the limit of 5.
    write(&file, "domain: legacy\ndescriptors: [");
    let rejected = format!(
        "# last reload error (the config above stays in force):\n#   {}:",
        file.display()
    );
    eventually_async(20, "the broken edit rejected in /rlconfig", || async {
        http_get(ml.http, "/rlconfig").await.1.contains(&rejected)
    })
    .await;
    let rlconfig = http_get(ml.http, "/rlconfig").await.1;
    assert!(
        rlconfig.contains("legacy.user: unit=DAY requests_per_unit=5,"),
        "{rlconfig}"
    );
    assert_eq!(hit(&ml, "b").await, Some(1));
}

/// REDIS_SOCKET_TYPE/REDIS_URL/REDIS_AUTH select the Redis store, as in the Go server,
/// and CACHE_KEY_PREFIX comes before every key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_redis_variables_select_the_redis_store() {
    let redis = RedisServer::start_with(&["--requirepass", "s3cret"]);
    let root = tempfile::tempdir().unwrap();
    write(
        &root.path().join("ratelimit/config/legacy.yaml"),
        &limits(3),
    );
    let mut env = go_env(root.path(), false);
    env.extend(
        [
            ("REDIS_SOCKET_TYPE", "tcp".to_string()),
            ("REDIS_TYPE", "single".into()),
            ("REDIS_URL", redis.addr()),
            ("REDIS_AUTH", "s3cret".into()),
            ("CACHE_KEY_PREFIX", "legacy:".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let ml = start(&env).await;
    assert_eq!(hit(&ml, "r").await, Some(2));
    let keys = redis.cli_as(Some("s3cret"), &["KEYS", "*ml1:{*"]);
    assert_eq!(keys.trim(), "legacy:ml1:{6:legacy}4:user1:r", "{keys}");
}

/// A RateLimitService client over the Unix socket at `path`.
async fn unix_client(path: &Path) -> RateLimitServiceClient<Channel> {
    let connector = UnixConnector(path.to_path_buf());
    let channel = Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(5))
        .connect_with_connector(connector)
        .await
        .unwrap_or_else(|e| panic!("connecting to {}: {e}", path.display()));
    RateLimitServiceClient::new(channel)
}

/// Connects tonic to a Unix socket, whatever the URI.
#[derive(Clone)]
struct UnixConnector(PathBuf);

impl tower_service::Service<http::Uri> for UnixConnector {
    type Response = TokioIo<tokio::net::UnixStream>;
    type Error = std::io::Error;
    type Future = Pin<Box<dyn Future<Output = std::io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        let path = self.0.clone();
        Box::pin(async move { Ok(TokioIo::new(tokio::net::UnixStream::connect(path).await?)) })
    }
}

/// Two files of one domain, one rule with `metadata` in each, and a third rule of the
/// first file's, over-limit at once.
fn write_split_domain(dir: &Path) {
    write(
        &dir.join("a.yaml"),
        "domain: legacy\ndescriptors:\n  - key: user\n    metadata: {pool: blue, weights: {a: 1}}\n    rate_limit: {unit: day, requests_per_unit: 5}\n  - key: ban\n    metadata: {pool: never}\n    rate_limit: {unit: day, requests_per_unit: 0}\n",
    );
    write(
        &dir.join("b.yaml"),
        "domain: legacy\ndescriptors:\n  - key: tier\n    metadata: {pool: green, weights: {a: 9, b: 2}, zone: eu}\n    rate_limit: {unit: day, requests_per_unit: 5}\n",
    );
}

/// GRPC_UDS, MERGE_DOMAIN_CONFIG and RESPONSE_DYNAMIC_METADATA through the socket: the
/// merged domain answers for both files' rules, and the dynamic metadata is the Go
/// server's: the request, and the merge of the passing rules' metadata (first wins).
async fn check_socket_merge_and_metadata(socket: &Path) {
    let mut client = unix_client(socket).await;
    let mut request = support::rls_request(
        "legacy",
        &[&[("user", "u")], &[("tier", "t")], &[("ban", "b")]],
    );
    request.hits_addend = 1;
    request.descriptors[1].hits_addend = Some(prost_types_struct::UInt64Value { value: 2 });
    let answer = client
        .should_rate_limit(request)
        .await
        .expect("answer")
        .into_inner();
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    let remaining: Vec<u32> = answer.statuses.iter().map(|s| s.limit_remaining).collect();
    // Both files' rules apply; a refused request takes nothing from a token bucket.
    assert_eq!(remaining, [5, 5, 0]);
    let metadata = answer.dynamic_metadata.expect("dynamic metadata");
    let json = struct_to_json(&metadata);
    assert_eq!(
        json,
        serde_json::json!({
            "domain": "legacy",
            "descriptors": [
                {"entries": ["user=u"]},
                {"entries": ["tier=t"], "hitsAddend": 2.0},
                {"entries": ["ban=b"]},
            ],
            "hitsAddend": 1.0,
            // `ban` is over: its metadata stays out.
            "metadata": {"pool": "blue", "weights": {"a": 1.0, "b": 2.0}, "zone": "eu"},
        })
    );
}

/// The Struct as JSON, numbers as f64.
fn struct_to_json(s: &prost_types_struct::Struct) -> serde_json::Value {
    use prost_types_struct::value::Kind;
    fn value(v: &prost_types_struct::Value) -> serde_json::Value {
        match &v.kind {
            Some(Kind::NumberValue(n)) => serde_json::json!(n),
            Some(Kind::StringValue(s)) => serde_json::json!(s),
            Some(Kind::BoolValue(b)) => serde_json::json!(b),
            Some(Kind::StructValue(s)) => struct_to_json(s),
            Some(Kind::ListValue(l)) => l.values.iter().map(value).collect(),
            Some(Kind::NullValue(_)) | None => serde_json::Value::Null,
        }
    }
    s.fields
        .iter()
        .map(|(k, v)| (k.clone(), value(v)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_env_with_a_unix_socket_merged_domains_and_dynamic_metadata() {
    let root = tempfile::tempdir().unwrap();
    write_split_domain(&root.path().join("ratelimit/config"));
    let socket = root.path().join("ratelimit.sock");
    let mut env = go_env(root.path(), false);
    // Quota mode would answer OK overall; this test checks a refusal's metadata.
    env.retain(|(name, _)| name != "QUOTA_MODE");
    env.extend(
        [
            ("GRPC_UDS", socket.display().to_string()),
            ("MERGE_DOMAIN_CONFIG", "true".into()),
            ("RESPONSE_DYNAMIC_METADATA", "true".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    let ml = start(&env).await;
    assert!(
        ml.log()
            .contains(&format!("grpc=unix:{}", socket.display())),
        "{}",
        ml.log()
    );
    check_socket_merge_and_metadata(&socket).await;
    let warning = ml.log();
    for name in [
        "GRPC_UDS",
        "MERGE_DOMAIN_CONFIG",
        "RESPONSE_DYNAMIC_METADATA",
    ] {
        assert!(
            !warning.contains(name),
            "{name} named as unsupported:\n{warning}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_with_flags() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    write_split_domain(&config);
    let socket = dir.path().join("meshlimit.sock");
    let flags = ["--merge-domain-config", "--response-dynamic-metadata"];
    let ml = Meshlimit::start_on_socket(&config, &socket, &flags).await;
    check_socket_merge_and_metadata(&socket).await;
    // /json answers with the same metadata, as protojson writes it.
    let (status, body) = support::http_post(
        ml.http,
        "/json",
        r#"{"domain":"legacy","descriptors":[{"entries":[{"key":"tier","value":"x"}]}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(r#""dynamicMetadata":{"descriptors":[{"entries":["tier=x"]}],"domain":"legacy","metadata":{"pool":"green","#), "{body}");
}

/// USE_STATSD with STATSD_HOST/STATSD_PORT, STATS_FLUSH_INTERVAL and EXTRA_TAGS: the Go
/// server's stats reach its statsd server, over TCP, tags in the names as gostats writes
/// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_statsd_variables_send_stats() {
    statsd_in_drop_in(Some("true")).await;
}

/// Without USE_STATSD, started without arguments: on, as the Go server's default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_statsd_is_on_by_default_in_drop_in_mode() {
    statsd_in_drop_in(None).await;
}

async fn statsd_in_drop_in(use_statsd: Option<&str>) {
    let statsd = StatsdServer::start(false).await;
    let root = tempfile::tempdir().unwrap();
    write(
        &root.path().join("ratelimit/config/legacy.yaml"),
        &limits(3),
    );
    let mut env = go_env(root.path(), false);
    // The Go server refuses Prometheus beside statsd.
    env.retain(|(k, _)| !k.starts_with("PROMETHEUS") && k != "USE_PROMETHEUS");
    env.extend(
        [
            ("STATSD_HOST", "127.0.0.1".to_string()),
            ("STATSD_PORT", statsd.addr.port().to_string()),
            ("STATS_FLUSH_INTERVAL", "50ms".into()),
            ("EXTRA_TAGS", "deploy:blue".into()),
        ]
        .map(|(k, v)| (k.to_string(), v)),
    );
    if let Some(value) = use_statsd {
        env.push(("USE_STATSD".into(), value.into()));
    }
    let ml = start(&env).await;
    assert_eq!(hit(&ml, "s").await, Some(2));
    assert_eq!(hit(&ml, "s").await, Some(1));
    let hits = "ratelimit.service.rate_limit.legacy.user.total_hits.__deploy=blue";
    eventually(20, "the hits at the statsd server", || {
        statsd.counters().get(hits) == Some(&2.0)
    })
    .await;
    let requests = "ratelimit_server.ShouldRateLimit.total_requests.__deploy=blue";
    eventually(20, "the requests at the statsd server", || {
        statsd.counters().get(requests) == Some(&2.0)
    })
    .await;
}

//! `examples/istio/` stays deployable, checked without Kubernetes: the manifests parse and
//! agree with each other; the ConfigMap is `config/trading.yaml` and
//! `config/trading_caps.yaml` and passes `meshlimit
//! validate`; the Deployment's command line serves it, answers the probe and limits the
//! descriptors the EnvoyFilter makes Envoy send; and the fragments the EnvoyFilter injects
//! form a config a real Envoy accepts.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use serde_json::{Value, json};
use support::process::{self, Meshlimit};
use tempfile::TempDir;
use tonic::transport::Channel;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()))
}

/// Every document of every `*.yaml` / `*.yml` file in `examples/istio/`, with its file name.
fn manifests() -> Vec<(String, Value)> {
    let dir = repo().join("examples/istio");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("listing {}: {e}", dir.display()))
        .map(|entry| entry.expect("directory entry").path())
        .filter(|p| matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no manifests in {}", dir.display());
    let mut docs = Vec::new();
    for path in files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&read(&path))
            .unwrap_or_else(|e| panic!("examples/istio/{name} is not valid YAML: {e}"));
        assert!(
            !parsed.is_empty(),
            "examples/istio/{name} holds no document"
        );
        docs.extend(parsed.into_iter().map(|doc| (name.clone(), doc)));
    }
    docs
}

/// The one manifest of `kind`.
fn the(kind: &str) -> Value {
    let mut found: Vec<Value> = manifests()
        .into_iter()
        .filter(|(_, doc)| doc["kind"] == kind)
        .map(|(_, doc)| doc)
        .collect();
    assert_eq!(found.len(), 1, "want exactly one {kind} in examples/istio");
    found.pop().unwrap()
}

/// The EnvoyFilter of the trading host (40-envoyfilter.yaml) and of the capped one
/// (50-envoyfilter-caps.yaml), by name.
const TRADING: &str = "meshlimit-trading";
const CAPS: &str = "meshlimit-trading-caps";

/// The EnvoyFilter named `name`.
fn envoy_filter(name: &str) -> Value {
    let mut found: Vec<Value> = manifests()
        .into_iter()
        .map(|(_, doc)| doc)
        .filter(|doc| doc["kind"] == "EnvoyFilter" && doc["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "want exactly one EnvoyFilter {name}");
    found.pop().unwrap()
}

/// The value at JSON `pointer` in `v`; fails the test, naming it, when there is none.
fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer)
        .unwrap_or_else(|| panic!("nothing at {pointer} in {v:#}"))
}

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    at(v, pointer)
        .as_str()
        .unwrap_or_else(|| panic!("{pointer} is not a string in {v:#}"))
}

fn list<'a>(v: &'a Value, pointer: &str) -> &'a Vec<Value> {
    at(v, pointer)
        .as_array()
        .unwrap_or_else(|| panic!("{pointer} is not a list in {v:#}"))
}

/// The Deployment's only container.
fn container(deployment: &Value) -> &Value {
    let containers = list(deployment, "/spec/template/spec/containers");
    assert_eq!(containers.len(), 1, "one container: meshlimit");
    &containers[0]
}

/// The container's command line: `command` then `args`.
fn argv(container: &Value) -> Vec<String> {
    ["command", "args"]
        .iter()
        .filter_map(|field| container.get(*field))
        .flat_map(|v| v.as_array().expect("command/args is a list"))
        .map(|a| a.as_str().expect("command/args are strings").to_string())
        .collect()
}

/// The value of `--flag value` or `--flag=value` in `argv`.
fn flag<'a>(argv: &'a [String], name: &str) -> Option<&'a str> {
    argv.iter().enumerate().find_map(|(i, arg)| {
        if arg == name {
            Some(argv.get(i + 1).expect("flag without a value").as_str())
        } else {
            arg.strip_prefix(name)?.strip_prefix('=')
        }
    })
}

/// The port meshlimit listens on: from `--<name>-addr`, else the binary's default.
fn listen_port(argv: &[String], name: &str, default: u16) -> u64 {
    flag(argv, &format!("--{name}-addr")).map_or(u64::from(default), |addr| {
        let addr: SocketAddr = addr.parse().expect("--*-addr is an address");
        u64::from(addr.port())
    })
}

/// The EnvoyFilter's patch applied to `apply_to`.
fn patch(filter: &Value, apply_to: &str) -> Value {
    let mut found: Vec<&Value> = list(filter, "/spec/configPatches")
        .iter()
        .filter(|p| p["applyTo"] == apply_to)
        .collect();
    assert_eq!(
        found.len(),
        1,
        "want one {apply_to} patch in the EnvoyFilter"
    );
    found.pop().unwrap().clone()
}

/// The ConfigMap's descriptor files written into a fresh directory, as Kubernetes mounts them.
fn configmap_dir() -> TempDir {
    let dir = tempfile::Builder::new()
        .prefix("meshlimit-istio-")
        .tempdir()
        .expect("temporary directory");
    let configmap = the("ConfigMap");
    let data = at(&configmap, "/data")
        .as_object()
        .expect("ConfigMap data is a map");
    for (key, value) in data {
        let content = value.as_str().expect("ConfigMap data values are strings");
        std::fs::write(dir.path().join(key), content).expect("writing a ConfigMap key");
    }
    dir
}

#[test]
fn every_manifest_parses_and_says_what_it_is() {
    let docs = manifests();
    for (file, doc) in &docs {
        for field in ["/apiVersion", "/kind", "/metadata/name"] {
            let present = doc
                .pointer(field)
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            assert!(present, "examples/istio/{file}: a document without {field}");
        }
    }
    let kinds: BTreeSet<&str> = docs.iter().map(|(_, d)| text(d, "/kind")).collect();
    for kind in [
        "Namespace",
        "ConfigMap",
        "Deployment",
        "Service",
        "EnvoyFilter",
    ] {
        assert!(kinds.contains(kind), "no {kind} in examples/istio");
    }
    for name in [TRADING, CAPS] {
        assert_eq!(
            text(&envoy_filter(name), "/apiVersion"),
            "networking.istio.io/v1alpha3"
        );
    }
    // Everything of meshlimit's own lives in the example's namespace.
    let namespace = the("Namespace");
    for kind in ["ConfigMap", "Deployment", "Service"] {
        assert_eq!(
            text(&the(kind), "/metadata/namespace"),
            text(&namespace, "/metadata/name"),
            "{kind} namespace"
        );
    }
}

#[test]
fn deployment_service_and_probes_agree() {
    let deployment = the("Deployment");
    let pod = at(&deployment, "/spec/template");
    let container = container(&deployment);
    let argv = argv(container);
    assert!(
        argv.first().is_some_and(|c| c.ends_with("meshlimit"))
            && argv.get(1).is_some_and(|s| s == "serve"),
        "the container runs `meshlimit serve`: {argv:?}"
    );
    let grpc = listen_port(&argv, "grpc", 8081);
    let http = listen_port(&argv, "http", 8080);

    // Container ports by name, named so Istio knows the protocol.
    let ports: BTreeMap<&str, u64> = list(container, "/ports")
        .iter()
        .map(|p| (text(p, "/name"), at(p, "/containerPort").as_u64().unwrap()))
        .collect();
    assert_eq!(ports.get("grpc"), Some(&grpc), "container port `grpc`");
    assert!(
        ports
            .iter()
            .any(|(name, &port)| name.starts_with("http-") && port == http),
        "a container port `http-...` = {http}: {ports:?}"
    );
    let resolve = |reference: &Value| -> u64 {
        match reference {
            Value::String(name) => *ports
                .get(name.as_str())
                .unwrap_or_else(|| panic!("no container port named {name}")),
            other => {
                let port = other.as_u64().expect("a port is a name or a number");
                assert!(
                    ports.values().any(|&p| p == port),
                    "no container port {port}"
                );
                port
            }
        }
    };

    for probe in ["readinessProbe", "livenessProbe"] {
        let get = at(container, &format!("/{probe}/httpGet"));
        assert_eq!(text(get, "/path"), "/healthcheck", "{probe} path");
        assert_eq!(resolve(at(get, "/port")), http, "{probe} port");
    }

    let service = the("Service");
    let mut exposed = BTreeSet::new();
    for port in list(&service, "/spec/ports") {
        let target = resolve(port.get("targetPort").unwrap_or(at(port, "/port")));
        let name = text(port, "/name");
        let protocol = if target == grpc { "grpc" } else { "http" };
        assert!(
            name == protocol || name.starts_with(&format!("{protocol}-")),
            "Service port {name} (to {target}) is not named {protocol} or {protocol}-..."
        );
        exposed.insert(target);
    }
    assert_eq!(exposed, BTreeSet::from([grpc, http]), "Service ports");

    let labels = at(pod, "/metadata/labels").as_object().unwrap();
    for selector in [
        at(&service, "/spec/selector"),
        at(&deployment, "/spec/selector/matchLabels"),
    ] {
        for (key, value) in selector.as_object().unwrap() {
            assert_eq!(labels.get(key), Some(value), "pod label {key}");
        }
    }

    // --config is the mounted ConfigMap, whole: a subPath mount never sees an edit.
    let config_dir = flag(&argv, "--config").expect("--config");
    let mount = list(container, "/volumeMounts")
        .iter()
        .find(|m| m["mountPath"] == config_dir)
        .unwrap_or_else(|| panic!("nothing mounted at --config {config_dir}"));
    assert!(
        mount.get("subPath").is_none(),
        "a subPath mount does not reload"
    );
    let volume = list(pod, "/spec/volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mount's volume");
    assert_eq!(
        text(volume, "/configMap/name"),
        text(&the("ConfigMap"), "/metadata/name")
    );

    assert_eq!(at(pod, "/spec/securityContext/runAsNonRoot"), &json!(true));
    assert_eq!(
        at(container, "/securityContext/readOnlyRootFilesystem"),
        &json!(true)
    );
    assert_eq!(
        at(container, "/securityContext/allowPrivilegeEscalation"),
        &json!(false)
    );
    if flag(&argv, "--store") != Some("redis") {
        assert_eq!(
            at(&deployment, "/spec/replicas"),
            &json!(1),
            "the embedded store limits each replica on its own: one replica, or --store redis"
        );
    }
}

#[tokio::test]
async fn the_configmap_is_config_trading_files_and_validates() {
    let configmap = the("ConfigMap");
    let data = at(&configmap, "/data").as_object().unwrap();
    assert_eq!(
        data.keys().collect::<Vec<_>>(),
        ["trading.yaml", "trading_caps.yaml"],
        "ConfigMap keys"
    );
    for file in ["trading.yaml", "trading_caps.yaml"] {
        let expected = read(&repo().join("config").join(file));
        assert!(
            data[file] == expected.as_str(),
            "examples/istio/10-configmap.yaml's {file} is not config/{file}: \
             copy the file in again (indented by 4 spaces)"
        );
    }

    let dir = configmap_dir();
    let config = dir.path().display().to_string();
    let out = process::run(&["validate", "--config", &config]).await;
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(
        out.status.success(),
        "meshlimit validate failed:\n{stdout}{stderr}"
    );
    assert!(stdout.contains(": OK ("), "validate says OK: {stdout:?}");
}

/// The Deployment's command line on the ConfigMap's files answers the probe, and limits
/// the descriptor the EnvoyFilter's route actions build (domain from its filter).
#[tokio::test]
async fn the_deployment_serves_the_envoyfilters_descriptors() {
    let deployment = the("Deployment");
    let container = container(&deployment);
    let argv = argv(container);
    // The harness picks the config path, the addresses (loopback port 0) and the log level.
    let mut rest = Vec::new();
    let mut args = argv.iter().skip(2);
    while let Some(arg) = args.next() {
        let name = arg.split('=').next().unwrap();
        if ["--config", "--grpc-addr", "--http-addr", "--log"].contains(&name) {
            if !arg.contains('=') {
                args.next();
            }
        } else {
            rest.push(arg.as_str());
        }
    }
    let dir = configmap_dir();
    let server = Meshlimit::start(dir.path(), &rest).await;

    let probe = text(container, "/readinessProbe/httpGet/path");
    assert_eq!(
        support::http_get(server.http, probe).await,
        (200, "OK".to_string())
    );

    // A gRPC call of a user to backtesting (5/min, burst 1), through the EnvoyFilter.
    let request = envoy_filter_request(
        &envoy_filter(TRADING),
        "/backtesting.BacktestingService/Run",
    );
    let mut client = server.client().await;
    let mut answers = Vec::new();
    for _ in 0..2 {
        let (code, limit) = limit_of(&mut client, &request).await;
        assert_eq!(limit, "backtesting_run");
        answers.push(code);
    }
    assert_eq!(answers, [Code::Ok as i32, Code::OverLimit as i32]);

    // An order through the capped host: its rule has two limits; the binding one, with
    // the fewest requests left, is the per-second bucket.
    let request = envoy_filter_request(&envoy_filter(CAPS), "/trading.TradingService/SubmitOrder");
    assert_eq!(request.domain, "trading_caps");
    let (code, limit) = limit_of(&mut client, &request).await;
    assert_eq!((code, limit.as_str()), (Code::Ok as i32, "submit_order"));
    assert!(server.terminate().await.success(), "clean exit on SIGTERM");
}

/// The request the EnvoyFilter's filter and route actions make Envoy send for user alice
/// calling `path`.
fn envoy_filter_request(filter: &Value, path: &str) -> RateLimitRequest {
    let headers = BTreeMap::from([("x-user-id", "alice"), (":path", path)]);
    let domain = text(
        &patch(filter, "HTTP_FILTER"),
        "/patch/value/typed_config/domain",
    )
    .to_string();
    let route = patch(filter, "HTTP_ROUTE");
    let limits = list(&route, "/patch/value/route/rate_limits");
    assert_eq!(limits.len(), 1, "one descriptor per request");
    let entries = list(&limits[0], "/actions")
        .iter()
        .map(|action| Entry {
            key: text(action, "/request_headers/descriptor_key").to_string(),
            value: headers[text(action, "/request_headers/header_name")].to_string(),
        })
        .collect();
    RateLimitRequest {
        domain,
        descriptors: vec![RateLimitDescriptor {
            entries,
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// The overall code of one ShouldRateLimit call, and the name of its descriptor's limit.
async fn limit_of(
    client: &mut RateLimitServiceClient<Channel>,
    request: &RateLimitRequest,
) -> (i32, String) {
    let answer = client
        .should_rate_limit(request.clone())
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    let limit = answer.statuses[0]
        .current_limit
        .as_ref()
        .unwrap_or_else(|| {
            panic!(
                "no limit for {request:?}: the EnvoyFilter's domain or descriptor keys \
                 miss the ConfigMap's rules"
            )
        });
    (answer.overall_code, limit.name.clone())
}

/// `base` with `patch` merged in the way Istio's MERGE does (proto merge): maps merge
/// field by field, lists are appended to, anything else is replaced.
fn proto_merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(base), Value::Object(patch)) => {
            for (key, value) in patch {
                proto_merge(base.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
        (Value::Array(base), Value::Array(patch)) => base.extend(patch.iter().cloned()),
        (base, patch) => *base = patch.clone(),
    }
}

/// A complete Envoy config around EnvoyFilter patch values: a listener whose HTTP
/// connection manager has [`filters`…, router], a route to a stand-in upstream with
/// `route_patches` merged in, and the clusters [`cluster`, upstream].
fn envoy_config(filters: &[&Value], route_patches: &[&Value], cluster: &Value) -> Value {
    let mut route = json!({
        "name": "default",
        "match": { "prefix": "/" },
        "route": { "cluster": "backend" }
    });
    for patch in route_patches {
        proto_merge(&mut route, patch);
    }
    let router = json!({
        "name": "envoy.filters.http.router",
        "typed_config": {
            "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
        }
    });
    let http_filters: Vec<&Value> = filters.iter().copied().chain([&router]).collect();
    json!({
        "static_resources": {
            "listeners": [{
                "name": "gateway",
                "address": { "socket_address": { "address": "127.0.0.1", "port_value": 10000 } },
                "filter_chains": [{
                    "filters": [{
                        "name": "envoy.filters.network.http_connection_manager",
                        "typed_config": {
                            "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                            "stat_prefix": "gateway",
                            "route_config": {
                                "name": "http.8080",
                                "virtual_hosts": [{
                                    "name": "trading.example.com:80",
                                    "domains": ["trading.example.com"],
                                    "routes": [route]
                                }]
                            },
                            "http_filters": http_filters
                        }
                    }]
                }]
            }],
            "clusters": [cluster, {
                "name": "backend",
                "type": "STATIC",
                "connect_timeout": "0.25s",
                "load_assignment": {
                    "cluster_name": "backend",
                    "endpoints": [{ "lb_endpoints": [{ "endpoint": { "address": {
                        "socket_address": { "address": "127.0.0.1", "port_value": 10001 }
                    } } }] }]
                }
            }]
        }
    })
}

/// `envoy --mode validate` on `config`.
fn envoy_validate(config: &Value) -> Output {
    let dir = tempfile::Builder::new()
        .prefix("meshlimit-istio-envoy-")
        .tempdir()
        .expect("temporary directory");
    let path = dir.path().join("envoy.json");
    std::fs::write(&path, serde_json::to_vec_pretty(config).unwrap()).expect("writing");
    Command::new(support::envoy_binary())
        .args(["--mode", "validate", "-c"])
        .arg(&path)
        .output()
        .expect("running envoy")
}

/// `v` with the object key `from` renamed to `to` wherever it occurs.
fn misspell(v: &Value, from: &str, to: &str) -> Value {
    match v {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let k = if k == from { to.to_string() } else { k.clone() };
                    (k, misspell(v, from, to))
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| misspell(v, from, to)).collect()),
        other => other.clone(),
    }
}

/// The value of `filter`'s patch applied to `apply_to`.
fn patch_value(filter: &Value, apply_to: &str) -> Value {
    at(&patch(filter, apply_to), "/patch/value").clone()
}

/// The trading EnvoyFilter's three patch values: (HTTP filter, cluster, route).
fn patch_values() -> (Value, Value, Value) {
    let filter = envoy_filter(TRADING);
    let value = |apply_to: &str| patch_value(&filter, apply_to);
    (value("HTTP_FILTER"), value("CLUSTER"), value("HTTP_ROUTE"))
}

/// The rate-limit filter's `typed_config` and the route's `rate_limits` of
/// `examples/envoy/envoy.yaml`'s listener `name`.
fn example_listener(name: &str) -> (Value, Value) {
    let example: Value =
        serde_saphyr::from_str(&read(&repo().join("examples/envoy/envoy.yaml"))).unwrap();
    let listener = list(&example, "/static_resources/listeners")
        .iter()
        .find(|l| l["name"] == name)
        .unwrap_or_else(|| panic!("examples/envoy has a {name} listener"));
    let hcm = at(listener, "/filter_chains/0/filters/0/typed_config");
    let filter = list(hcm, "/http_filters")
        .iter()
        .find(|f| f["name"] == "envoy.filters.http.ratelimit")
        .expect("a rate-limit filter in examples/envoy");
    (
        at(filter, "/typed_config").clone(),
        at(
            hcm,
            "/route_config/virtual_hosts/0/routes/0/route/rate_limits",
        )
        .clone(),
    )
}

#[test]
fn the_envoyfilter_patches_fit_together() {
    let filter = envoy_filter(TRADING);
    let labels = at(&filter, "/spec/workloadSelector/labels")
        .as_object()
        .unwrap();
    assert!(!labels.is_empty(), "a workloadSelector picks the gateway");

    let http_filter = patch(&filter, "HTTP_FILTER");
    let cluster = patch(&filter, "CLUSTER");
    let route = patch(&filter, "HTTP_ROUTE");
    for p in [&http_filter, &cluster, &route] {
        assert_eq!(text(p, "/match/context"), "GATEWAY");
    }
    assert_eq!(text(&http_filter, "/patch/operation"), "INSERT_BEFORE");
    assert_eq!(
        text(&http_filter, "/match/listener/filterChain/filter/name"),
        "envoy.filters.network.http_connection_manager"
    );
    assert_eq!(
        text(
            &http_filter,
            "/match/listener/filterChain/filter/subFilter/name"
        ),
        "envoy.filters.http.router"
    );
    assert_eq!(text(&cluster, "/patch/operation"), "ADD");
    assert_eq!(text(&route, "/patch/operation"), "MERGE");
    assert_eq!(
        text(&route, "/match/routeConfiguration/vhost/route/action"),
        "ROUTE",
        "only forwarding routes call the rate-limit service"
    );

    let (filter_value, cluster_value, _) = patch_values();
    assert_eq!(text(&filter_value, "/name"), "envoy.filters.http.ratelimit");
    assert_eq!(
        text(
            &filter_value,
            "/typed_config/rate_limit_service/grpc_service/envoy_grpc/cluster_name"
        ),
        text(&cluster_value, "/name"),
        "the filter calls the added cluster"
    );
    // The cluster reaches the Service's grpc port by its cluster DNS name.
    let service = the("Service");
    let grpc_port = list(&service, "/spec/ports")
        .iter()
        .find(|p| p["name"] == "grpc")
        .expect("Service port grpc");
    let socket = at(
        &cluster_value,
        "/load_assignment/endpoints/0/lb_endpoints/0/endpoint/address/socket_address",
    );
    assert_eq!(
        text(socket, "/address"),
        format!(
            "{}.{}.svc.cluster.local",
            text(&service, "/metadata/name"),
            text(&service, "/metadata/namespace")
        )
    );
    assert_eq!(at(socket, "/port_value"), at(grpc_port, "/port"));
    assert_eq!(text(&cluster_value, "/type"), "STRICT_DNS");
}

/// One story: the Istio example configures the filter and the route actions exactly as
/// `examples/envoy/envoy.yaml`'s trading listener does.
#[test]
fn the_envoyfilter_repeats_examples_envoy() {
    let (filter_value, _, route_value) = patch_values();
    let (example_filter, example_limits) = example_listener("trading");
    assert_eq!(
        at(&filter_value, "/typed_config"),
        &example_filter,
        "the rate-limit filter differs from examples/envoy/envoy.yaml's trading listener"
    );
    assert_eq!(
        at(&route_value, "/route/rate_limits"),
        &example_limits,
        "the route actions differ from examples/envoy/envoy.yaml's trading route"
    );
}

/// The capped host's EnvoyFilter: on the same gateway, a second rate-limit filter at stage
/// 1 with its own host's routes at stage 1 (so each request is asked about once), calling
/// the trading EnvoyFilter's cluster; otherwise `examples/envoy/envoy.yaml`'s
/// trading_caps listener.
#[test]
fn the_caps_envoyfilter_is_a_second_stage_on_the_same_gateway() {
    let (trading, caps) = (envoy_filter(TRADING), envoy_filter(CAPS));
    assert_eq!(
        at(&caps, "/spec/workloadSelector"),
        at(&trading, "/spec/workloadSelector")
    );
    assert_eq!(
        list(&caps, "/spec/configPatches").len(),
        2,
        "no cluster of its own"
    );
    let (http_filter, route) = (patch(&caps, "HTTP_FILTER"), patch(&caps, "HTTP_ROUTE"));
    for (p, operation) in [(&http_filter, "INSERT_BEFORE"), (&route, "MERGE")] {
        assert_eq!(text(p, "/match/context"), "GATEWAY");
        assert_eq!(text(p, "/patch/operation"), operation);
        let same = patch(&trading, text(p, "/applyTo"));
        let vhost = "/match/routeConfiguration/vhost/name";
        if p.pointer(vhost).is_some() {
            assert_ne!(text(p, vhost), text(&same, vhost), "a host of its own");
            assert_eq!(
                at(p, "/match/routeConfiguration/vhost/route"),
                at(&same, "/match/routeConfiguration/vhost/route")
            );
        } else {
            assert_eq!(at(p, "/match"), at(&same, "/match"));
        }
    }

    let (filter_value, route_value) = (
        patch_value(&caps, "HTTP_FILTER"),
        patch_value(&caps, "HTTP_ROUTE"),
    );
    assert_eq!(
        text(
            &filter_value,
            "/typed_config/rate_limit_service/grpc_service/envoy_grpc/cluster_name"
        ),
        text(&patch_value(&trading, "CLUSTER"), "/name"),
        "the filter calls the trading EnvoyFilter's cluster"
    );
    // Stage 1 on both sides; the trading filter and routes stay at stage 0.
    let stage = |v: &Value, pointer: &str| v.pointer(pointer).and_then(Value::as_u64).unwrap_or(0);
    assert_eq!(stage(&filter_value, "/typed_config/stage"), 1);
    let limits = list(&route_value, "/route/rate_limits");
    assert!(limits.iter().all(|l| stage(l, "/stage") == 1));
    let (trading_filter, _, trading_route) = patch_values();
    assert_eq!(stage(&trading_filter, "/typed_config/stage"), 0);
    assert!(
        list(&trading_route, "/route/rate_limits")
            .iter()
            .all(|l| stage(l, "/stage") == 0)
    );

    // Without the stage, examples/envoy's trading_caps listener.
    let (example_filter, example_limits) = example_listener("trading_caps");
    let unstaged = |v: &Value| {
        let mut v = v.clone();
        v.as_object_mut().expect("an object").remove("stage");
        v
    };
    assert_eq!(
        unstaged(at(&filter_value, "/typed_config")),
        example_filter,
        "the rate-limit filter differs from examples/envoy/envoy.yaml's trading_caps listener"
    );
    assert_eq!(
        Value::Array(limits.iter().map(unstaged).collect()),
        example_limits,
        "the route actions differ from examples/envoy/envoy.yaml's trading_caps route"
    );
}

#[test]
fn envoy_accepts_the_envoyfilter_patches() {
    let (filter, cluster, route) = patch_values();
    let caps = envoy_filter(CAPS);
    let (caps_filter, caps_route) = (
        patch_value(&caps, "HTTP_FILTER"),
        patch_value(&caps, "HTTP_ROUTE"),
    );
    // Each EnvoyFilter on its own, and both on one gateway (their routes merged into one,
    // as a gateway serving both hosts on one route would).
    for config in [
        envoy_config(&[&filter], &[&route], &cluster),
        envoy_config(&[&caps_filter], &[&caps_route], &cluster),
        envoy_config(&[&filter, &caps_filter], &[&route, &caps_route], &cluster),
    ] {
        let out = envoy_validate(&config);
        assert!(
            out.status.success(),
            "envoy --mode validate rejected the EnvoyFilters' fragments:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(String::from_utf8_lossy(&out.stdout).contains("' OK"));
    }

    // Each fragment is really checked: one misspelt field in any of them is refused.
    let broken = [
        (
            "failure_mode_denyy",
            envoy_config(
                &[&misspell(
                    &filter,
                    "failure_mode_deny",
                    "failure_mode_denyy",
                )],
                &[&route],
                &cluster,
            ),
        ),
        (
            "descriptor_kee",
            envoy_config(
                &[&filter],
                &[&misspell(&route, "descriptor_key", "descriptor_kee")],
                &cluster,
            ),
        ),
        (
            "http2_protocol_optionz",
            envoy_config(
                &[&filter],
                &[&route],
                &misspell(&cluster, "http2_protocol_options", "http2_protocol_optionz"),
            ),
        ),
    ];
    for (field, config) in broken {
        let out = envoy_validate(&config);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success(),
            "envoy accepted a config with {field}"
        );
        assert!(
            stderr.contains(field),
            "envoy's complaint names {field}:\n{stderr}"
        );
    }
}

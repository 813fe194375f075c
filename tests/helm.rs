//! The Helm chart at `deploy/helm/meshlimit`, checked without a cluster:
//! - `helm lint` (and `--strict`) over the default values and every values set;
//! - `helm template` over every values set (`ci/*.yaml`, the presets), every object valid
//!   against the Kubernetes 1.30 schemas and those of 1.37, the newest the validator
//!   knows (`kubernetes-validate --strict`); the ServiceMonitor, a CRD the validator has
//!   no schema for, is checked here instead;
//! - the embedded store refuses several replicas (or an HPA) unless told to accept
//!   per-replica limits;
//! - the rendered Deployment: Envoy Gateway's securityContext, the probes, the config
//!   ConfigMap mounted whole where `MESHLIMIT_CONFIG` points, secrets only through
//!   `valueFrom`, and every `MESHLIMIT_*` variable one that `meshlimit serve` reads;
//! - the presets (Istio's descriptors and EnvoyFilter, AI Gateway's names);
//! - every value of `values.yaml` has a row in the chart's README;
//! - every metric the Grafana dashboard's queries name exists on a live `/metrics`.
//!
//! helm and kubernetes-validate are found as `support::helm` says. The chart's pod itself
//! runs in `tests/chart_pod.rs`.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::{Value, json};
use support::helm::{chart, helm, kubernetes_validate};
use support::pod::{objects, only};
use support::process::Meshlimit;
use support::redis::RedisServer;
use tempfile::TempDir;

/// The oldest Kubernetes version the chart supports (`kubeVersion` in Chart.yaml), whose
/// schemas the objects must satisfy.
const KUBERNETES: &str = "1.30.0";

/// The newest version kubernetes-validate 1.37.0 has schemas for (it has 1.25 to 1.37):
/// the objects must satisfy it too.
const KUBERNETES_NEWEST: &str = "1.37.0";

/// Release name and namespace of every render.
const RELEASE: &str = "meshlimit";
const NAMESPACE: &str = "meshlimit";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(program: &Path, args: &[&str]) -> Output {
    Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", program.display()))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// One way of installing the chart: values files (relative to the chart) and `--set`s.
struct ValuesSet {
    name: String,
    files: Vec<String>,
    sets: Vec<String>,
    /// `--set-file` arguments.
    set_files: Vec<String>,
}

impl ValuesSet {
    fn new(name: &str, files: &[&str], sets: &[&str]) -> ValuesSet {
        ValuesSet {
            name: name.to_string(),
            files: files.iter().map(|f| f.to_string()).collect(),
            sets: sets.iter().map(|s| s.to_string()).collect(),
            set_files: Vec::new(),
        }
    }

    /// `-f chart/file ... --set s ...`
    fn args(&self) -> Vec<String> {
        let mut args = Vec::new();
        for file in &self.files {
            args.push("-f".to_string());
            args.push(chart().join(file).display().to_string());
        }
        for set in &self.sets {
            args.push("--set".to_string());
            args.push(set.clone());
        }
        for set in &self.set_files {
            args.push("--set-file".to_string());
            args.push(set.clone());
        }
        args
    }
}

/// The defaults, the test image, every `ci/*.yaml` and the presets that are this
/// chart's values.
fn values_sets() -> Vec<ValuesSet> {
    let mut sets = vec![
        ValuesSet::new("defaults", &[], &[]),
        ValuesSet::new(
            "test image",
            &[],
            &[
                "image.repository=localhost/meshlimit",
                "image.tag=latest",
                "image.pullPolicy=Never",
            ],
        ),
    ];
    let mut ci: Vec<String> = std::fs::read_dir(chart().join("ci"))
        .expect("deploy/helm/meshlimit/ci exists")
        .map(|entry| entry.expect("a ci/ entry").file_name())
        .map(|name| name.to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".yaml"))
        .collect();
    ci.sort();
    assert!(ci.len() >= 5, "only {ci:?} in ci/");
    for name in ci {
        let file = format!("ci/{name}");
        sets.push(ValuesSet::new(&file, &[&file], &[]));
    }
    for preset in ["presets/ai-gateway.yaml", "presets/istio.yaml"] {
        sets.push(ValuesSet::new(preset, &[preset], &[]));
    }
    sets
}

/// `helm template` of the chart with `args`, as (success, stdout, stderr).
fn template(args: &[String]) -> (bool, String, String) {
    let chart = chart().display().to_string();
    let mut all = vec![
        "template".to_string(),
        RELEASE.to_string(),
        chart,
        "--namespace".to_string(),
        NAMESPACE.to_string(),
    ];
    all.extend_from_slice(args);
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let out = run(&helm(), &refs);
    (out.status.success(), text(&out.stdout), text(&out.stderr))
}

/// The objects `helm template` renders for `set`; fails the test if it cannot.
fn render(set: &ValuesSet) -> Vec<Value> {
    let (ok, stdout, stderr) = template(&set.args());
    assert!(ok, "helm template ({}) failed:\n{stderr}", set.name);
    objects(&stdout)
}

fn render_with(sets: &[&str]) -> Vec<Value> {
    render(&ValuesSet::new("--set", &[], sets))
}

fn kinds(objects: &[Value]) -> BTreeSet<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or("?").to_string())
        .collect()
}

/// The container of the rendered Deployment.
fn container(objects: &[Value]) -> Value {
    let containers = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
        .as_array()
        .expect("containers")
        .clone();
    assert_eq!(containers.len(), 1, "one container");
    containers[0].clone()
}

/// The container's environment: name -> its entry.
fn env(objects: &[Value]) -> BTreeMap<String, Value> {
    container(objects)["env"]
        .as_array()
        .expect("env")
        .iter()
        .map(|e| (e["name"].as_str().expect("env name").to_string(), e.clone()))
        .collect()
}

fn env_value(objects: &[Value], name: &str) -> String {
    env(objects)
        .get(name)
        .unwrap_or_else(|| panic!("no {name} in the env"))["value"]
        .as_str()
        .unwrap_or_else(|| panic!("{name} has no plain value"))
        .to_string()
}

/// Each `(name, value)` is a plain variable of the container's environment.
fn assert_env(objects: &[Value], expected: &[(&str, &str)]) {
    for (name, value) in expected {
        assert_eq!(env_value(objects, name), *value, "{name}");
    }
}

#[test]
fn helm_lint_passes_for_every_values_set() {
    let chart = chart().display().to_string();
    for set in values_sets() {
        for strict in [false, true] {
            let mut args = vec!["lint".to_string(), chart.clone()];
            if strict {
                args.push("--strict".to_string());
            }
            args.extend(set.args());
            let refs: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run(&helm(), &refs);
            assert!(
                out.status.success(),
                "helm {} ({}) failed:\n{}{}",
                args.join(" "),
                set.name,
                text(&out.stdout),
                text(&out.stderr)
            );
        }
    }
}

/// A ServiceMonitor, checked by hand: kubernetes-validate has no schema for this CRD.
fn check_service_monitor(monitor: &Value, objects: &[Value]) {
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    let service = only(objects, "Service");
    assert_eq!(
        monitor["spec"]["selector"]["matchLabels"], service["spec"]["selector"],
        "the ServiceMonitor selects the Service by its labels"
    );
    for (key, value) in service["spec"]["selector"].as_object().expect("selector") {
        assert_eq!(&service["metadata"]["labels"][key], value);
    }
    let ports: BTreeSet<&str> = service["spec"]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .filter_map(|p| p["name"].as_str())
        .collect();
    let endpoints = monitor["spec"]["endpoints"].as_array().expect("endpoints");
    assert!(!endpoints.is_empty());
    for endpoint in endpoints {
        let port = endpoint["port"].as_str().expect("a port name");
        assert!(
            ports.contains(port),
            "endpoint port {port} not in {ports:?}"
        );
        assert_eq!(endpoint["path"], "/metrics");
    }
    let known: BTreeSet<&str> = ["apiVersion", "kind", "metadata", "spec"].into();
    for key in monitor.as_object().expect("an object").keys() {
        assert!(known.contains(key.as_str()), "unexpected field {key}");
    }
}

#[test]
fn every_rendered_object_is_valid_for_kubernetes_1_30_and_1_37() {
    let dir = TempDir::new().expect("a temporary directory");
    let mut seen = BTreeSet::new();
    let mut files = Vec::new();
    let mut names = BTreeMap::new();
    for (i, set) in values_sets().iter().enumerate() {
        let objects = render(set);
        seen.extend(kinds(&objects));
        let (monitors, others): (Vec<&Value>, Vec<&Value>) =
            objects.iter().partition(|o| o["kind"] == "ServiceMonitor");
        for monitor in monitors {
            println!(
                "{}: ServiceMonitor (monitoring.coreos.com/v1) is a CRD kind kubernetes-validate has no schema for: checked by check_service_monitor instead",
                set.name
            );
            check_service_monitor(monitor, &objects);
        }
        // JSON documents are YAML documents: one file per values set.
        let stream: Vec<String> = others.iter().map(|o| o.to_string()).collect();
        let path = dir.path().join(format!("set-{i}.yaml"));
        std::fs::write(&path, stream.join("\n---\n")).expect("writing the objects");
        names.insert(path.display().to_string(), set.name.clone());
        files.push(path.display().to_string());
    }
    for version in [KUBERNETES, KUBERNETES_NEWEST] {
        let mut args = vec!["-k", version, "--strict", "--quiet"];
        args.extend(files.iter().map(String::as_str));
        let out = run(&kubernetes_validate(), &args);
        let mut said = format!("{}{}", text(&out.stdout), text(&out.stderr));
        for (path, name) in &names {
            said = said.replace(path.as_str(), &format!("[{name}]"));
        }
        assert!(
            out.status.success() && said.trim().is_empty(),
            "not valid for Kubernetes {version}:\n{said}"
        );
    }
    let expected = [
        "ConfigMap",
        "Deployment",
        "HorizontalPodAutoscaler",
        "NetworkPolicy",
        "PodDisruptionBudget",
        "Service",
        "ServiceAccount",
        "ServiceMonitor",
    ];
    for kind in expected {
        assert!(seen.contains(kind), "no values set renders a {kind}");
    }
}

#[test]
fn the_validator_refuses_an_invalid_object() {
    let dir = TempDir::new().expect("a temporary directory");
    let path = dir.path().join("bad.json");
    let mut deployment = only(&render_with(&[]), "Deployment").clone();
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolcy"] = json!("Never");
    std::fs::write(&path, deployment.to_string()).expect("writing");
    let path = path.display().to_string();
    let out = run(
        &kubernetes_validate(),
        &["-k", KUBERNETES, "--strict", "--quiet", &path],
    );
    assert!(
        !out.status.success(),
        "a misspelt field passed: {}",
        text(&out.stdout)
    );
}

#[test]
fn several_replicas_on_the_embedded_store_are_refused_unless_accepted() {
    for sets in [
        &["replicaCount=3"][..],
        &["autoscaling.enabled=true"],
        &["replicaCount=2", "store.type=memory"],
    ] {
        let args: Vec<String> = sets
            .iter()
            .flat_map(|s| ["--set".into(), s.to_string()])
            .collect();
        let (ok, _, stderr) = template(&args);
        assert!(!ok, "{sets:?} rendered");
        assert!(
            stderr.contains(
                "on the embedded store (store.type memory): each replica would keep its own buckets"
            ) && stderr.contains("store.allowPerReplicaLimits: true"),
            "{sets:?}: {stderr}"
        );
    }
    let objects = render_with(&["replicaCount=3", "store.allowPerReplicaLimits=true"]);
    assert_eq!(only(&objects, "Deployment")["spec"]["replicas"], 3);
    let objects = render_with(&[
        "autoscaling.enabled=true",
        "store.allowPerReplicaLimits=true",
    ]);
    only(&objects, "HorizontalPodAutoscaler");
}

#[test]
fn values_that_cannot_work_are_refused_with_the_reason() {
    let cases: [(&[&str], &str); 8] = [
        (
            &["store.type=redis"],
            "needs store.redis.url or store.redis.urlSecret.name",
        ),
        (
            &[
                "store.type=redis",
                "store.redis.url=redis://:hunter2@redis:6379",
            ],
            "store.redis.url holds a password",
        ),
        (&["config.source=xds"], "needs config.xds.server"),
        (
            &["config.source=postgres"],
            "needs config.postgres.urlSecret.name",
        ),
        (
            &[
                "store.type=redis",
                "store.redis.url=redis+sentinel://s:26379/m?sentinel_password=x",
            ],
            "store.redis.url holds a password",
        ),
        // values.schema.json: unknown values and values out of their set.
        (
            &["store.type=disk"],
            "store.type must be one of the following",
        ),
        (
            &["store.tyep=redis"],
            "Additional property tyep is not allowed",
        ),
        (
            &["probes.liveness.mode=exec"],
            "probes.liveness.mode must be one of the following",
        ),
    ];
    for (sets, message) in cases {
        let args: Vec<String> = sets
            .iter()
            .flat_map(|s| ["--set".into(), s.to_string()])
            .collect();
        let (ok, _, stderr) = template(&args);
        assert!(!ok && stderr.contains(message), "{sets:?}: {stderr}");
    }
}

/// Envoy Gateway's container securityContext for its rate-limit Deployment
/// (envoyproxy/gateway, internal/infrastructure/kubernetes/ratelimit/testdata/deployments/default.yaml).
fn envoy_gateway_security_context() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "privileged": false,
        "readOnlyRootFilesystem": true,
        "runAsGroup": 65534,
        "runAsNonRoot": true,
        "runAsUser": 65534,
        "seccompProfile": {"type": "RuntimeDefault"}
    })
}

#[test]
fn the_default_deployment_runs_one_locked_down_pod_on_the_configmap() {
    let objects = render_with(&[]);
    assert_eq!(
        kinds(&objects),
        ["ConfigMap", "Deployment", "Service", "ServiceAccount"]
            .map(String::from)
            .into()
    );
    let deployment = only(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(
        deployment["spec"]["selector"]["matchLabels"],
        deployment["spec"]["template"]["metadata"]["labels"]
    );
    let c = container(&objects);
    assert_eq!(c["securityContext"], envoy_gateway_security_context());
    assert_eq!(c["command"], json!(["/usr/local/bin/meshlimit", "serve"]));
    assert!(c.get("args").is_none(), "no args by default: {c:#}");

    let ports: BTreeMap<&str, i64> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap(),
                p["containerPort"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(ports, [("grpc", 8081), ("http", 8080)].into());
    assert_env(
        &objects,
        &[
            ("MESHLIMIT_GRPC_ADDR", "0.0.0.0:8081"),
            ("MESHLIMIT_HTTP_ADDR", "0.0.0.0:8080"),
            ("MESHLIMIT_STORE", "memory"),
        ],
    );
    for probe in ["startupProbe", "readinessProbe", "livenessProbe"] {
        assert_eq!(
            c[probe]["httpGet"],
            json!({"path": "/healthcheck", "port": "http"}),
            "{probe}"
        );
    }

    // The config: the whole ConfigMap (no subPath, which never sees updates) where
    // MESHLIMIT_CONFIG points.
    let mounts = c["volumeMounts"].as_array().expect("volumeMounts");
    assert_eq!(mounts.len(), 1, "{mounts:#?}");
    assert_eq!(
        mounts[0]["mountPath"],
        env_value(&objects, "MESHLIMIT_CONFIG")
    );
    assert_eq!(mounts[0]["readOnly"], true);
    assert!(mounts[0].get("subPath").is_none());
    let volume = &pod["volumes"][0];
    assert_eq!(volume["name"], mounts[0]["name"]);
    assert_eq!(
        volume["configMap"]["name"],
        only(&objects, "ConfigMap")["metadata"]["name"]
    );

    let service = only(&objects, "Service");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], "8080");
    assert_eq!(annotations["prometheus.io/path"], "/metrics");
    assert!(
        annotations.get("checksum/config").is_none(),
        "live reload: no restart on a ConfigMap change by default"
    );
}

/// No plain `value` of the environment holds a credential: URLs with a password come
/// from Secrets (`valueFrom`), or hold a `$(VAR)` reference to one.
fn assert_no_secret_in_plain_env(objects: &[Value], name: &str) {
    for (var, entry) in env(objects) {
        if let Some(value) = entry["value"].as_str()
            && let Some((_, rest)) = value.split_once("://")
            && let Some((credentials, _)) = rest.split_once('@')
        {
            let password = credentials.split_once(':').map_or("", |(_, p)| p);
            assert!(
                password.starts_with("$(") && password.ends_with(')'),
                "{name}: {var} holds a password in plain text: {value}"
            );
        }
    }
}

#[test]
fn redis_mode_takes_url_password_and_tls_from_secrets() {
    let set = ValuesSet::new("redis-ha", &["ci/redis-ha-values.yaml"], &[]);
    let objects = render(&set);
    let vars = env(&objects);
    assert_eq!(
        vars["MESHLIMIT_CHART_REDIS_PASSWORD"]["valueFrom"]["secretKeyRef"],
        json!({"name": "meshlimit-redis", "key": "password"})
    );
    assert_eq!(
        env_value(&objects, "MESHLIMIT_REDIS_URL"),
        "rediss://:$(MESHLIMIT_CHART_REDIS_PASSWORD)@redis.redis.svc.cluster.local:6380"
    );
    let c = container(&objects);
    let order: Vec<&str> = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    let position = |name: &str| order.iter().position(|n| *n == name).unwrap();
    assert!(
        position("MESHLIMIT_CHART_REDIS_PASSWORD") < position("MESHLIMIT_REDIS_URL"),
        "$(VAR) only expands variables defined before it"
    );
    assert_env(
        &objects,
        &[
            ("MESHLIMIT_REDIS_TLS_CA", "/etc/meshlimit/redis-tls/ca.crt"),
            (
                "MESHLIMIT_REDIS_TLS_CERT",
                "/etc/meshlimit/redis-tls/tls.crt",
            ),
            (
                "MESHLIMIT_REDIS_TLS_KEY",
                "/etc/meshlimit/redis-tls/tls.key",
            ),
        ],
    );
    let mounts: BTreeMap<&str, &str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["name"].as_str().unwrap(),
                m["mountPath"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(mounts["redis-tls"], "/etc/meshlimit/redis-tls");
    assert_no_secret_in_plain_env(&objects, &set.name);

    // The HPA owns the replicas; the PDB and the spread select the pods.
    let deployment = only(&objects, "Deployment");
    assert!(deployment["spec"].get("replicas").is_none());
    let hpa = only(&objects, "HorizontalPodAutoscaler");
    assert_eq!(
        hpa["spec"]["scaleTargetRef"]["name"],
        deployment["metadata"]["name"]
    );
    assert_eq!(hpa["spec"]["minReplicas"], 3);
    let pods = &deployment["spec"]["selector"]["matchLabels"];
    assert_eq!(
        only(&objects, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"],
        *pods
    );
    let spread = &deployment["spec"]["template"]["spec"]["topologySpreadConstraints"][0];
    assert_eq!(spread["labelSelector"]["matchLabels"], *pods);
    // /healthcheck fails while Redis is down under --redis-failure error: liveness must
    // not restart every pod then.
    assert_eq!(c["livenessProbe"]["tcpSocket"]["port"], "grpc");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/healthcheck");

    let objects = render(&ValuesSet::new(
        "url",
        &["ci/redis-url-secret-values.yaml"],
        &[],
    ));
    assert_eq!(
        env(&objects)["MESHLIMIT_REDIS_URL"]["valueFrom"]["secretKeyRef"],
        json!({"name": "meshlimit-redis", "key": "url"})
    );
    assert_eq!(only(&objects, "Deployment")["spec"]["replicas"], 3);
}

#[test]
fn xds_mode_takes_its_client_certificate_from_a_secret_and_gates_health_on_a_config() {
    let objects = render(&ValuesSet::new("xds", &["ci/xds-mtls-values.yaml"], &[]));
    assert_env(
        &objects,
        &[
            (
                "MESHLIMIT_XDS_SERVER",
                "control-plane.xds.svc.cluster.local:18000",
            ),
            ("MESHLIMIT_XDS_TLS", "true"),
            ("MESHLIMIT_XDS_TLS_CA", "/etc/meshlimit/xds-tls/ca.crt"),
            ("MESHLIMIT_XDS_TLS_CERT", "/etc/meshlimit/xds-tls/tls.crt"),
            ("MESHLIMIT_XDS_TLS_KEY", "/etc/meshlimit/xds-tls/tls.key"),
            (
                "MESHLIMIT_XDS_TLS_SAN",
                "control-plane.xds.svc.cluster.local",
            ),
            ("MESHLIMIT_UNHEALTHY_WITHOUT_CONFIG", "true"),
            ("MESHLIMIT_START_WITHOUT_CONFIG", "true"),
        ],
    );
    assert!(!env(&objects).contains_key("MESHLIMIT_CONFIG"));
    assert!(!kinds(&objects).contains("ConfigMap"));
    let deployment = only(&objects, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["spec"]["volumes"],
        json!([{"name": "xds-tls", "secret": {"secretName": "meshlimit-xds-client"}}])
    );
}

#[test]
fn postgres_mode_takes_its_url_from_a_secret() {
    let set = ValuesSet::new("postgres", &["ci/postgres-values.yaml"], &[]);
    let objects = render(&set);
    assert_eq!(
        env(&objects)["MESHLIMIT_CONFIG"]["valueFrom"]["secretKeyRef"],
        json!({"name": "meshlimit-postgres", "key": "url"})
    );
    assert_eq!(env_value(&objects, "MESHLIMIT_PG_TABLE"), "limits");
    assert!(container(&objects).get("volumeMounts").is_none());
    assert_no_secret_in_plain_env(&objects, &set.name);
    let policy = only(&objects, "NetworkPolicy");
    let egress_ports: BTreeSet<i64> = policy["spec"]["egress"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|rule| rule["ports"].as_array().unwrap().clone())
        .filter_map(|port| port["port"].as_i64())
        .collect();
    assert_eq!(egress_ports, [53, 5432].into());
}

#[test]
fn observability_renders_metrics_port_monitor_dashboard_and_policy() {
    let objects = render(&ValuesSet::new(
        "obs",
        &["ci/observability-values.yaml"],
        &[],
    ));
    assert_eq!(
        env_value(&objects, "MESHLIMIT_METRICS_ADDR"),
        "0.0.0.0:9090"
    );
    let deployment = only(&objects, "Deployment");
    let annotations = &deployment["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["prometheus.io/port"], "9090");
    assert!(annotations["checksum/config"].is_string());
    assert_eq!(
        only(&objects, "ServiceMonitor")["spec"]["endpoints"][0]["port"],
        "http-metrics"
    );
    let dashboard = objects
        .iter()
        .find(|o| o["kind"] == "ConfigMap" && o["metadata"]["labels"]["grafana_dashboard"] == "1")
        .expect("the dashboard's ConfigMap");
    let shipped: Value =
        serde_json::from_str(dashboard["data"]["meshlimit.json"].as_str().unwrap()).unwrap();
    assert_eq!(shipped, dashboard_json());
    let policy = only(&objects, "NetworkPolicy");
    assert_eq!(
        policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"],
        "envoy-gateway-system"
    );
    assert_eq!(
        env_value(&objects, "MESHLIMIT_GRPC_CLIENT_CA"),
        "/etc/meshlimit/grpc-tls/ca.crt"
    );
}

/// The `[env: NAME=…]` variables `meshlimit serve --help` lists.
fn serve_variables() -> BTreeSet<String> {
    let out = Command::new(support::process::exe())
        .args(["serve", "--help"])
        .output()
        .expect("meshlimit runs");
    text(&out.stdout)
        .split("[env: ")
        .skip(1)
        .filter_map(|rest| rest.split(['=', ']']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn every_variable_the_chart_sets_is_one_meshlimit_reads() {
    let known = serve_variables();
    assert!(known.len() > 60, "serve --help listed {known:?}");
    for set in values_sets() {
        for var in env(&render(&set)).keys() {
            if var == "MESHLIMIT_CHART_REDIS_PASSWORD" {
                continue; // the chart's own, expanded into MESHLIMIT_REDIS_URL
            }
            assert!(
                known.contains(var),
                "{}: {var} is not a variable of meshlimit serve",
                set.name
            );
        }
    }
}

fn configmap_files(objects: &[Value]) -> BTreeMap<String, String> {
    only(objects, "ConfigMap")["data"]
        .as_object()
        .expect("data")
        .iter()
        .map(|(k, v)| (k.clone(), v.as_str().expect("text").to_string()))
        .collect()
}

#[test]
fn the_istio_preset_serves_the_examples_descriptors_at_its_envoyfilters_address() {
    let objects = render(&ValuesSet::new("istio", &["presets/istio.yaml"], &[]));
    let files = configmap_files(&objects);
    assert_eq!(files.len(), 2, "{:?}", files.keys());
    for name in ["trading.yaml", "trading_caps.yaml"] {
        let original = std::fs::read_to_string(repo().join("config").join(name)).unwrap();
        assert_eq!(
            files.get(name),
            Some(&original),
            "{name} differs from config/{name}"
        );
    }
    let deployment = only(&objects, "Deployment");
    assert_eq!(
        deployment["spec"]["template"]["metadata"]["annotations"]["sidecar.istio.io/inject"],
        "false"
    );

    let read = |path: PathBuf| -> Value {
        serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    };
    let preset = read(chart().join("presets/istio-envoyfilter.yaml"));
    let example = read(repo().join("examples/istio/40-envoyfilter.yaml"));
    assert_eq!(
        preset, example,
        "presets/istio-envoyfilter.yaml is the example's copy"
    );
    let cluster = preset["spec"]["configPatches"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["applyTo"] == "CLUSTER")
        .expect("the CLUSTER patch");
    let address = &cluster["patch"]["value"]["load_assignment"]["endpoints"][0]["lb_endpoints"][0]
        ["endpoint"]["address"]["socket_address"];
    let service = only(&objects, "Service");
    assert_eq!(
        address["address"],
        format!(
            "{}.{}.svc.cluster.local",
            service["metadata"]["name"].as_str().unwrap(),
            NAMESPACE
        )
    );
    let grpc = service["spec"]["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "grpc")
        .unwrap();
    assert_eq!(address["port_value"], grpc["port"]);
}

#[test]
fn the_ai_gateway_preset_is_where_ai_gateway_looks_for_it() {
    let objects = render(&ValuesSet::new("ai", &["presets/ai-gateway.yaml"], &[]));
    let service = only(&objects, "Service");
    // AI Gateway's default --quotaRateLimitServiceAddr: envoy-ai-gateway-ratelimit.envoy-gateway-system, port 8081.
    assert_eq!(service["metadata"]["name"], "envoy-ai-gateway-ratelimit");
    assert!(
        service["spec"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["port"] == 8081)
    );
    assert_env(
        &objects,
        &[
            ("MESHLIMIT_XDS_NODE_ID", "envoy-ai-gateway-ratelimit"),
            (
                "MESHLIMIT_XDS_SERVER",
                "ai-gateway-controller.envoy-ai-gateway-system.svc.cluster.local:18002",
            ),
            ("MESHLIMIT_UNHEALTHY_WITHOUT_CONFIG", "true"),
        ],
    );
}

#[test]
fn the_envoy_gateway_preset_swaps_the_rate_limit_image() {
    let path = chart().join("presets/envoy-gateway.yaml");
    let values: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let field = &values["config"]["envoyGateway"]["provider"]["kubernetes"]["rateLimitDeployment"]
        ["container"]["image"];
    assert!(
        field.as_str().is_some_and(|i| i.contains("meshlimit")),
        "{values:#}"
    );
    assert_eq!(values["global"]["images"]["ratelimit"]["image"], *field);
    let chart_yaml: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart().join("Chart.yaml")).unwrap())
            .unwrap();
    let tag = field.as_str().unwrap().rsplit(':').next().unwrap();
    assert_eq!(
        chart_yaml["appVersion"], tag,
        "the preset names this chart's version"
    );
}

/// Values the README documents as a whole, not field by field.
const WHOLE_VALUES: &[&str] = &[
    "config.files.descriptors",
    "securityContext",
    "resources",
    "dashboard.labels",
];

/// Every leaf of `value` as a dotted path; empty maps, lists and [`WHOLE_VALUES`] are
/// leaves.
fn leaves(value: &Value, prefix: &str, out: &mut Vec<String>) {
    match value.as_object() {
        Some(map) if !map.is_empty() && !WHOLE_VALUES.contains(&prefix) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaves(child, &path, out);
            }
        }
        _ => out.push(prefix.to_string()),
    }
}

#[test]
fn every_value_is_documented_in_the_charts_readme() {
    let values: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(chart().join("values.yaml")).unwrap())
            .unwrap();
    let readme = std::fs::read_to_string(chart().join("README.md")).unwrap();
    let mut paths = Vec::new();
    leaves(&values, "", &mut paths);
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !readme.contains(&format!("| `{p}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "values without a README row: {missing:?}"
    );
}

fn dashboard_json() -> Value {
    let path = chart().join("dashboards/meshlimit.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).expect("the dashboard is JSON")
}

/// Every PromQL expression of the dashboard: panel targets (rows' panels too) and the
/// template variables' queries.
fn expressions(dashboard: &Value) -> Vec<String> {
    fn walk(panels: &Value, out: &mut Vec<String>) {
        for panel in panels.as_array().into_iter().flatten() {
            for target in panel["targets"].as_array().into_iter().flatten() {
                out.push(
                    target["expr"]
                        .as_str()
                        .expect("a target's expr")
                        .to_string(),
                );
            }
            walk(&panel["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    for variable in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if variable["type"] == "query" {
            out.push(
                variable["definition"]
                    .as_str()
                    .expect("a definition")
                    .to_string(),
            );
        }
    }
    out
}

/// PromQL's functions, aggregations and keywords that can precede `(`, and Grafana's
/// `label_values`.
const PROMQL_WORDS: &[&str] = &[
    "abs",
    "absent",
    "absent_over_time",
    "avg",
    "avg_over_time",
    "bottomk",
    "by",
    "ceil",
    "changes",
    "clamp",
    "clamp_max",
    "clamp_min",
    "count",
    "count_over_time",
    "count_values",
    "delta",
    "deriv",
    "exp",
    "floor",
    "group",
    "group_left",
    "group_right",
    "histogram_quantile",
    "idelta",
    "ignoring",
    "increase",
    "irate",
    "label_join",
    "label_replace",
    "label_values",
    "last_over_time",
    "ln",
    "log2",
    "log10",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "on",
    "predict_linear",
    "quantile",
    "quantile_over_time",
    "rate",
    "resets",
    "round",
    "scalar",
    "sort",
    "sort_desc",
    "sqrt",
    "stddev",
    "stdvar",
    "sum",
    "sum_over_time",
    "time",
    "timestamp",
    "topk",
    "vector",
    "without",
];

/// The metric names `expr` reads: identifiers followed by `{`, `[` or `(` that are not
/// PromQL words, label matchers and strings skipped; and `label_values(metric, label)`'s
/// metric.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let mut after_label_values = false;
    while i < chars.len() {
        let c = chars[i];
        if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' {
            while i < chars.len() && chars[i] != '}' {
                if chars[i] == '"' {
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        i += if chars[i] == '\\' { 2 } else { 1 };
                    }
                }
                i += 1;
            }
            i += 1;
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len()
                && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':')
            {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let preceded_by_dollar = start > 0 && chars[start - 1] == '$';
            let mut j = i;
            while j < chars.len() && chars[j].is_whitespace() {
                j += 1;
            }
            let next = chars.get(j).copied();
            if after_label_values {
                names.insert(word.clone());
                after_label_values = false;
            } else if word == "label_values" {
                after_label_values = true;
            } else if !preceded_by_dollar
                && matches!(next, Some('{' | '[' | '('))
                && !PROMQL_WORDS.contains(&word.as_str())
            {
                names.insert(word);
            }
        } else if c.is_ascii_digit() {
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
        } else {
            i += 1;
        }
    }
    names
}

#[test]
fn the_metric_reader_finds_metrics_and_nothing_else() {
    let found = metric_names(
        r#"histogram_quantile(0.99, sum by (le, store) (rate(a_seconds_bucket{instance=~"$instance", x="b{c}"}[$__rate_interval]))) / clamp_min(sum(rate(b_total{}[5m])), 1e-9) + on (x) c()"#,
    );
    assert_eq!(
        found,
        ["a_seconds_bucket", "b_total", "c"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        metric_names("label_values(meshlimit_config_loaded, instance)"),
        ["meshlimit_config_loaded".to_string()].into()
    );
}

/// `# TYPE name kind` lines of a scrape: name -> kind.
fn families(scrape: &str) -> BTreeMap<String, String> {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| {
            let mut parts = rest.split_whitespace();
            Some((parts.next()?.to_string(), parts.next()?.to_string()))
        })
        .collect()
}

/// Requests within and over the limit, to an unknown domain, and an invalid one.
async fn traffic(server: &Meshlimit) {
    let within = support::rls_request("dash", &[&[("user", "alice")]]);
    assert_eq!(server.ask(within.clone()).await.overall_code, 1, "OK");
    let mut over = false;
    for _ in 0..5 {
        over |= server.ask(within.clone()).await.overall_code == 2;
    }
    assert!(over, "the limit of 2 was never reached");
    server
        .ask(support::rls_request("nowhere", &[&[("user", "bob")]]))
        .await;
    let mut client = server.client().await;
    let invalid = support::rls_request("", &[]);
    let answer = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        client.should_rate_limit(invalid),
    )
    .await
    .expect("ShouldRateLimit hung");
    assert!(answer.is_err(), "an empty request is refused");
}

#[tokio::test]
async fn every_metric_the_dashboard_names_is_on_a_live_metrics_page() {
    let dashboard = dashboard_json();
    let exprs = expressions(&dashboard);
    assert!(exprs.len() > 20, "only {} expressions", exprs.len());
    let named: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(named.len() > 20, "only {named:?}");
    let uids: BTreeSet<String> = dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|panel| panel["type"] != "row")
        .flat_map(|panel| {
            let mut uids = vec![panel["datasource"]["uid"].to_string()];
            for target in panel["targets"].as_array().into_iter().flatten() {
                uids.push(target["datasource"]["uid"].to_string());
            }
            uids
        })
        .collect();
    assert_eq!(
        uids,
        ["\"${datasource}\"".to_string()].into(),
        "every query on the variable"
    );
    let datasource = &dashboard["templating"]["list"][0];
    assert_eq!(
        (&datasource["name"], &datasource["type"]),
        (&json!("datasource"), &json!("datasource"))
    );

    let dir = TempDir::new().expect("a temporary directory");
    std::fs::write(
        dir.path().join("dash.yaml"),
        "domain: dash\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: 2\n",
    )
    .expect("writing the config");
    let redis = RedisServer::start();
    let mut found = BTreeMap::new();
    let on_redis = Meshlimit::start_on_redis(dir.path(), &redis.url(), "error", 1000, &[]).await;
    traffic(&on_redis).await;
    let (status, scrape) = support::http_get(on_redis.http, "/metrics").await;
    assert_eq!(status, 200);
    found.extend(families(&scrape));
    on_redis.terminate().await;
    // The embedded store's own families (buckets, evictions) exist on the embedded store.
    let embedded = Meshlimit::start(dir.path(), &[]).await;
    traffic(&embedded).await;
    let (status, scrape) = support::http_get(embedded.http, "/metrics").await;
    assert_eq!(status, 200);
    for (name, kind) in families(&scrape) {
        found.entry(name).or_insert(kind);
    }
    embedded.terminate().await;

    let mut missing = Vec::new();
    for name in &named {
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|suffix| {
                let base = name.strip_suffix(suffix)?;
                (found.get(base).map(String::as_str) == Some("histogram")).then(|| base.to_string())
            })
            .unwrap_or_else(|| name.clone());
        if !found.contains_key(&family) {
            missing.push(family);
        }
    }
    assert!(
        missing.is_empty(),
        "the dashboard names metrics /metrics does not have: {missing:?}\n(families found: {:?})",
        found.keys().collect::<Vec<_>>()
    );
}

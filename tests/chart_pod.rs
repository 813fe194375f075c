//! The Helm chart's pod, run as the kubelet runs it: `helm template` of
//! `deploy/helm/meshlimit` with a descriptor file in its ConfigMap, the rendered
//! Deployment's container started under podman from meshlimit's image (`support::pod`),
//! probed as the kubelet probes it, driven by a real Envoy, its ConfigMap swapped as the
//! kubelet swaps it (one rename of `..data`) until the new limit answers, then stopped:
//! readiness fails at once while requests still pass, and it ends by itself within the
//! grace period.

mod support;

use std::process::Command;

use support::envoy::{Envoy, Reply};
use support::eventually_async;
use support::helm::{chart, helm};
use support::netns::Netns;
use support::pod::{Kubelet, Pod, Probe, objects, only};

/// `user` limited to `per_minute` requests a minute, in domain `chart`.
fn limits(per_minute: u32) -> String {
    format!(
        "domain: chart\ndescriptors:\n  - key: user\n    rate_limit: {{unit: minute, requests_per_unit: {per_minute}}}\n"
    )
}

/// The chart rendered for the test's image, with `limits(3)` as its one domain file.
fn rendered() -> String {
    let dir = tempfile::tempdir().unwrap();
    let values = dir.path().join("values.yaml");
    let files = serde_json::json!({ "limits.yaml": limits(3) });
    std::fs::write(
        &values,
        format!(
            "image: {{repository: localhost/meshlimit, tag: latest, pullPolicy: Never}}\nconfig:\n  files:\n    descriptors: {files}\n"
        ),
    )
    .unwrap();
    let out = Command::new(helm())
        .args(["template", "ml"])
        .arg(chart())
        .arg("--values")
        .arg(&values)
        .output()
        .expect("running helm");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// An Envoy asking the pod (plain HTTP/2 on 8081) about `user` from `x-user`, with the
/// draft-03 `x-ratelimit-*` headers on its answers.
async fn envoy() -> Envoy {
    Envoy::start(2, |ports| {
        support::envoy::with_front(&support::envoy::with_backend(ENVOY))
            .replace("@ADMIN@", &ports.admin.to_string())
            .replace("@FRONT@", &ports.listeners[0].to_string())
            .replace("@BACKEND@", &ports.listeners[1].to_string())
            .replace(
                "@MESHLIMIT_CLUSTER@\n",
                &support::envoy::h2_cluster(
                    "meshlimit",
                    "socket_address: { address: 127.0.0.1, port_value: 8081 }",
                ),
            )
    })
    .await
}

async fn get(envoy: &Envoy, user: &str) -> Reply {
    support::envoy::request(envoy.listener(0), "/", &[("x-user", user)])
        .await
        .expect("GET / through Envoy")
}

/// `user`'s requests pass `limit` times, then are refused.
async fn limited_to(envoy: &Envoy, pod: &Pod, user: &str, limit: u32) {
    for i in 0..limit {
        let reply = get(envoy, user).await;
        assert_eq!(reply.status, 200, "{user} #{i}: {reply:?}\n{}", pod.logs());
    }
    let reply = get(envoy, user).await;
    assert_eq!(
        reply.status,
        429,
        "{user} over {limit}: {reply:?}\n{}",
        pod.logs()
    );
}

#[test]
fn the_charts_pod_serves_reloads_its_configmap_and_drains() {
    let netns = Netns::new();
    netns.run(|| async {
        let objects = objects(&rendered());
        let deployment = only(&objects, "Deployment");
        let config_map = only(&objects, "ConfigMap")["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_string();
        let mut kubelet = Kubelet::new(netns.path());
        kubelet.objects(&objects);
        let pod = kubelet.run(deployment);
        pod.started().await;
        let envoy = envoy().await;
        limited_to(&envoy, &pod, "alice", 3).await;

        // Kubernetes swaps the mounted ConfigMap: a fresh user sees the new limit.
        pod.update(&config_map, &[("limits.yaml", limits(5).as_bytes())]);
        let mut probes = 0;
        eventually_async(60, "the ConfigMap's new limit answers", || {
            probes += 1;
            let probe = format!("probe-{probes}");
            let envoy = &envoy;
            async move { get(envoy, &probe).await.header("x-ratelimit-limit") == Some("5, 5;w=60") }
        })
        .await;
        limited_to(&envoy, &pod, "bob", 5).await;
        pod.probe_once(Probe::Liveness)
            .await
            .expect("live after the reload");

        // SIGTERM: out of the endpoints at once, still answering while it drains, then
        // gone by itself within the grace period.
        let since = pod.sigterm();
        eventually_async(10, "readiness fails while draining", || async {
            pod.probe_once(Probe::Readiness).await.is_err()
        })
        .await;
        let reply = get(&envoy, "carol").await;
        assert_eq!(reply.status, 200, "answers while draining: {reply:?}");
        let (took, code) = pod.stopped(since);
        assert_eq!(code, 0, "exit code after SIGTERM; log:\n{}", pod.logs());
        assert!(took < pod.grace(), "stopping took {took:?}");
    });
}

/// One front listener whose route asks meshlimit about `user` (from `x-user`).
const ENVOY: &str = r#"
@FRONT_HEAD@
          stat_prefix: front_http
          route_config:
            virtual_hosts:
            - name: chart
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - request_headers: { header_name: x-user, descriptor_key: user }
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: chart
              failure_mode_deny: true
              enable_x_ratelimit_headers: DRAFT_VERSION_03
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

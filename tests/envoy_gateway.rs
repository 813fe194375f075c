//! meshlimit's image in the pod Envoy Gateway renders for its rate-limit server
//! (`tests/fixtures/envoy-gateway/default.yaml`, unchanged but for the image), run as
//! the kubelet runs it (see `support::pod`), beside what Envoy Gateway puts around it:
//! its control plane serving `RateLimitConfig` resources over mutual TLS on
//! `envoy-gateway:18001`, a Redis at `redis.redis.svc:6379`, an Envoy calling the pod's
//! gRPC port over TLS, and a Prometheus scrape of `:19001` read through Envoy Gateway's
//! statsd mapping. Then Envoy AI Gateway's quota Deployment: the same pod with its node
//! id, its extra argument and its `ai-gateway-quota` domain, every bucket in quota mode.
//!
//! Each test runs in a network namespace of its own, so that the pod, Redis, the control
//! plane and Envoy listen on the ports Envoy Gateway's objects name; the names resolve
//! to its loopback, as the cluster's DNS would resolve them to Services.

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::ratelimit::config::ratelimit::v3::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use serde_json::Value;
use support::ads::AdsServer;
use support::envoy::{Envoy, Reply};
use support::netns::Netns;
use support::pki::Pki;
use support::pod::{IMAGE, Kubelet, Pod, objects, only};
use support::redis::RedisServer;
use support::{eventually_async, http_get, rls_request, sample};
use tonic::transport::{Certificate, Channel, ClientTlsConfig};

const DEPLOYMENT: &str = include_str!("fixtures/envoy-gateway/default.yaml");
const STATSD_CONF: &str = include_str!("fixtures/envoy-gateway/statsd_conf.yaml");
const MONTH_YEAR_RULE: &str = include_str!("fixtures/envoy-gateway/month-year-rule.yaml");

/// The name Envoy reaches the rate-limit Service by, in the pod's certificate.
const RATELIMIT_DNS: &str = "envoy-ratelimit.envoy-gateway-system.svc.cluster.local";

/// What Envoy Gateway runs around its rate-limit pod, in the test's namespace.
struct Neighbours {
    pki: Pki,
    ads: AdsServer,
    redis: RedisServer,
}

impl Neighbours {
    /// The certificates (the Secret `envoy-rate-limit` serves the pod's gRPC server and
    /// is its client certificate to the control plane, as Envoy Gateway issues it), the
    /// control plane on 18001 requiring client certificates, Redis on 6379.
    async fn start() -> Neighbours {
        let pki = Pki::new();
        pki.issue(
            "ratelimit",
            &format!("DNS:{RATELIMIT_DNS},DNS:envoy-ratelimit"),
            2,
        );
        pki.issue("envoy-gateway", "DNS:envoy-gateway", 3);
        pki.issue("envoy", "DNS:envoy", 4);
        let read = |name: &str| std::fs::read(pki.path(name)).unwrap();
        let ads = AdsServer::start_mtls(
            18001,
            read("envoy-gateway.pem"),
            read("envoy-gateway.key"),
            read("ca.pem"),
        )
        .await;
        let redis = RedisServer::start_on(6379);
        Neighbours { pki, ads, redis }
    }

    /// A kubelet with the objects Envoy Gateway's Deployment names, running meshlimit's
    /// image in place of the Go server's.
    fn kubelet(&self, netns: &Netns) -> Kubelet {
        let read = |name: &str| std::fs::read(self.pki.path(name)).unwrap();
        let mut kubelet = Kubelet::new(netns.path());
        kubelet
            .image(IMAGE)
            .secret(
                "envoy-rate-limit",
                &[
                    ("tls.crt", &read("ratelimit.pem")),
                    ("tls.key", &read("ratelimit.key")),
                    ("ca.crt", &read("ca.pem")),
                ],
            )
            .config_map(
                "statsd-exporter-config",
                &[("conf.yaml", STATSD_CONF.as_bytes())],
            )
            .host("envoy-gateway", "127.0.0.1")
            .host("redis.redis.svc", "127.0.0.1");
        kubelet
    }

    /// Serves `config` as version `version` and waits (bounded) until the node `node`
    /// has ACKed it.
    async fn serve_config(&self, version: &str, config: RateLimitConfig, node: &str) {
        self.ads.push(version, &[config]);
        eventually_async(30, &format!("{node} ACKs version {version}"), || async {
            self.ads.seen().iter().any(|seen| {
                seen.is_ack_of(version) && seen.node.as_ref().is_some_and(|n| n.id == node)
            })
        })
        .await;
    }
}

/// A `RateLimitConfig` as Envoy Gateway's translator writes it in YAML (the Go server's
/// protobuf field names), as its control plane serves it.
fn rate_limit_config(yaml: &str) -> RateLimitConfig {
    let value: Value = serde_saphyr::from_str(yaml).expect("a RateLimitConfig in YAML");
    RateLimitConfig {
        name: value["name"].as_str().unwrap_or_default().into(),
        domain: value["domain"].as_str().unwrap_or_default().into(),
        descriptors: descriptors(&value["descriptors"]),
    }
}

fn descriptors(list: &Value) -> Vec<RateLimitDescriptor> {
    let flag = |d: &Value, name: &str| d[name].as_bool().unwrap_or(false);
    list.as_array()
        .into_iter()
        .flatten()
        .map(|d| RateLimitDescriptor {
            key: d["key"].as_str().unwrap_or_default().into(),
            value: d["value"].as_str().unwrap_or_default().into(),
            rate_limit: d["rate_limit"].as_object().map(|limit| RateLimitPolicy {
                unit: RateLimitUnit::from_str_name(limit["unit"].as_str().unwrap_or_default())
                    .expect("a unit") as i32,
                requests_per_unit: limit["requests_per_unit"].as_u64().unwrap_or(0) as u32,
                unlimited: limit["unlimited"].as_bool().unwrap_or(false),
                name: limit["name"].as_str().unwrap_or_default().into(),
                ..RateLimitPolicy::default()
            }),
            descriptors: descriptors(&d["descriptors"]),
            shadow_mode: flag(d, "shadow_mode"),
            detailed_metric: flag(d, "detailed_metric"),
            quota_mode: flag(d, "quota_mode"),
            ..RateLimitDescriptor::default()
        })
        .collect()
}

/// An Envoy whose front listener asks the pod (over TLS, as Envoy Gateway's Envoys do)
/// about `first-route` / `rule-0-match-0` in domain `first-listener`, as Envoy
/// Gateway's translator renders the route of `month-year-rule.yaml`.
async fn envoy(pki: &Pki) -> Envoy {
    Envoy::start(2, |ports| {
        support::envoy::with_front(&support::envoy::with_backend(ENVOY))
            .replace("@ADMIN@", &ports.admin.to_string())
            .replace("@FRONT@", &ports.listeners[0].to_string())
            .replace("@BACKEND@", &ports.listeners[1].to_string())
            .replace("@CA@", &pki.arg("ca.pem"))
            .replace("@CERT@", &pki.arg("envoy.pem"))
            .replace("@KEY@", &pki.arg("envoy.key"))
            .replace("@SNI@", RATELIMIT_DNS)
    })
    .await
}

async fn get(envoy: &Envoy) -> Reply {
    support::envoy::request(envoy.listener(0), "/", &[])
        .await
        .expect("GET / through Envoy")
}

/// Stops the pod as the kubelet does and checks it ended by itself, cleanly, well
/// within the Deployment's grace period.
fn drains(pod: &Pod) {
    let (took, code) = pod.terminate();
    assert_eq!(code, 0, "exit code after SIGTERM; log:\n{}", pod.logs());
    assert!(
        took < pod.grace(),
        "stopping took {took:?}, the grace period is {:?}",
        pod.grace()
    );
}

#[test]
fn envoy_gateway_runs_meshlimit_in_place_of_the_go_server() {
    let netns = Netns::new();
    netns.run(|| async {
        let neighbours = Neighbours::start().await;
        let objects = objects(DEPLOYMENT);
        let deployment = only(&objects, "Deployment");
        let pod = neighbours.kubelet(&netns).run(deployment);
        // FORCE_START_WITHOUT_INITIAL_CONFIG: healthy before the control plane has a
        // config for it.
        pod.started().await;

        let config = rate_limit_config(MONTH_YEAR_RULE);
        neighbours.serve_config("1", config, "envoy-ratelimit").await;
        let envoy = envoy(&neighbours.pki).await;
        // 5 a month: the sixth request is refused.
        for i in 0..5 {
            let reply = get(&envoy).await;
            assert_eq!(reply.status, 200, "request {i}: {reply:?}\n{}", pod.logs());
        }
        let reply = get(&envoy).await;
        assert_eq!(reply.status, 429, "{reply:?}\n{}", pod.logs());
        // REDIS_URL is where the buckets are.
        let keys: u64 = neighbours.redis.cli(&["dbsize"]).trim().parse().expect("DBSIZE");
        assert!(keys > 0, "no key in Redis");

        // A domain the config does not have: its stat is one Envoy Gateway's file maps
        // to nothing, so it keeps its escaped Go name (statsd_exporter's way).
        let mut client = tls_client(&neighbours.pki).await;
        let answer = client
            .should_rate_limit(rls_request("nowhere-else", &[&[("k", "v")]]))
            .await
            .expect("ShouldRateLimit")
            .into_inner();
        assert_eq!(answer.overall_code, Code::Ok as i32, "{answer:?}");

        // The Prometheus series Envoy Gateway's mapping makes of the Go stat names.
        let (status, text) = http_get("127.0.0.1:19001".parse().unwrap(), "/metrics").await;
        assert_eq!(status, 200, "{text}");
        let labels = r#"{domain="first-listener",key1="first-route_first-route",key2="rule-0-match-0_rule-0-match-0"}"#;
        for (family, value) in [("total_hits", "6"), ("within_limit", "5"), ("over_limit", "1")] {
            let series = format!("ratelimit_service_rate_limit_{family}{labels}");
            assert_eq!(sample(&text, &series), Some(value), "{series} in:\n{text}");
        }
        let requests = r#"ratelimit_service_total_requests{grpc_method="ShouldRateLimit"}"#;
        assert_eq!(sample(&text, requests), Some("7"), "{text}");
        let unmapped = "ratelimit_service_rate_limit_nowhere_else_domain_not_found";
        assert_eq!(sample(&text, unmapped), Some("1"), "{text}");
        assert!(
            !text.contains("ratelimit_service_rate_limit_domain_not_found{"),
            "the native family beside the mapped one:\n{text}"
        );
        assert!(
            text.contains("ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\","),
            "{text}"
        );
        assert_eq!(
            sample(&text, "ratelimit_service_config_load_success"),
            Some("1"),
            "{text}"
        );

        // Envoy Gateway raises the limit: the new snapshot is in force at once, the month's
        // six hits kept in Redis.
        let mut raised = rate_limit_config(MONTH_YEAR_RULE);
        raised.descriptors[0].descriptors[0]
            .rate_limit
            .as_mut()
            .expect("the first route's limit")
            .requests_per_unit = 10;
        neighbours.serve_config("2", raised, "envoy-ratelimit").await;
        let reply = get(&envoy).await;
        assert_eq!(reply.status, 200, "under the raised limit: {reply:?}");

        // The mapping's ConfigMap changes: the kubelet swaps it, the next scrapes use it.
        let renamed = STATSD_CONF.replace(
            "name: \"ratelimit_service_rate_limit_total_hits\"",
            "name: \"eg_rule_hits\"",
        );
        assert_ne!(renamed, STATSD_CONF);
        pod.update("statsd-exporter-config", &[("conf.yaml", renamed.as_bytes())]);
        let series = format!("eg_rule_hits{labels}");
        eventually_async(30, "the swapped mapping names the series", || async {
            let (_, text) = http_get("127.0.0.1:19001".parse().unwrap(), "/metrics").await;
            sample(&text, &series) == Some("7")
        })
        .await;
        drains(&pod);
    });
}

/// Envoy AI Gateway's quota Deployment: Envoy Gateway's pod with its own xDS node id
/// and the extra argument AI Gateway gives the Go binary, which ignores it.
fn ai_gateway_deployment() -> Value {
    let mut deployment = only(&objects(DEPLOYMENT), "Deployment").clone();
    let container = &mut deployment["spec"]["template"]["spec"]["containers"][0];
    for var in container["env"].as_array_mut().unwrap() {
        if var["name"] == "CONFIG_GRPC_XDS_NODE_ID" {
            var["value"] = "envoy-ai-gateway-ratelimit".into();
        }
    }
    container["args"] = serde_json::json!([
        "--quotaRateLimitServiceAddr=envoy-ai-gateway-ratelimit.envoy-ai-gateway-system.svc.cluster.local:8081"
    ]);
    deployment
}

/// Domain `ai-gateway-quota`: per `model`, each bucket in quota mode.
fn quota_config() -> RateLimitConfig {
    let bucket = |model: &str, requests: u32| RateLimitDescriptor {
        key: "model".into(),
        value: model.into(),
        rate_limit: Some(RateLimitPolicy {
            unit: RateLimitUnit::Hour as i32,
            requests_per_unit: requests,
            ..RateLimitPolicy::default()
        }),
        quota_mode: true,
        ..RateLimitDescriptor::default()
    };
    RateLimitConfig {
        name: "ai-gateway-quota".into(),
        domain: "ai-gateway-quota".into(),
        descriptors: vec![bucket("small", 2), bucket("large", 100)],
    }
}

/// A RateLimitService client reaching the pod over TLS, by the Service's name.
async fn tls_client(pki: &Pki) -> RateLimitServiceClient<Channel> {
    let ca = std::fs::read(pki.path("ca.pem")).unwrap();
    let tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(ca))
        .domain_name(RATELIMIT_DNS);
    let channel = Channel::from_static("https://127.0.0.1:8081")
        .tls_config(tls)
        .expect("TLS settings")
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await
        .expect("connecting to the pod over TLS");
    RateLimitServiceClient::new(channel)
}

#[test]
fn ai_gateway_quota_deployment_runs_meshlimit() {
    let netns = Netns::new();
    netns.run(|| async {
        let neighbours = Neighbours::start().await;
        let pod = neighbours.kubelet(&netns).run(&ai_gateway_deployment());
        pod.started().await;
        neighbours
            .serve_config("1", quota_config(), "envoy-ai-gateway-ratelimit")
            .await;
        let mut client = tls_client(&neighbours.pki).await;
        let mut ask = async |descriptors: &[&[(&str, &str)]]| {
            client
                .should_rate_limit(rls_request("ai-gateway-quota", descriptors))
                .await
                .expect("ShouldRateLimit")
                .into_inner()
        };
        let small: &[(&str, &str)] = &[("model", "small")];
        let large: &[(&str, &str)] = &[("model", "large")];
        for _ in 0..2 {
            assert_eq!(ask(&[small]).await.overall_code, Code::Ok as i32);
        }
        // Over its quota with another quota left: the request passes, its own status says
        // over; with none left, it is refused.
        let both = ask(&[small, large]).await;
        assert_eq!(both.overall_code, Code::Ok as i32, "{both:?}");
        assert_eq!(both.statuses[0].code, Code::OverLimit as i32, "{both:?}");
        assert_eq!(both.statuses[1].code, Code::Ok as i32, "{both:?}");
        let alone = ask(&[small]).await;
        assert_eq!(alone.overall_code, Code::OverLimit as i32, "{alone:?}");

        let logs = pod.logs();
        let warning = logs
            .lines()
            .find(|l| l.contains("does not know"))
            .unwrap_or_else(|| panic!("no warning naming the ignored argument:\n{logs}"));
        assert!(warning.contains("--quotaRateLimitServiceAddr"), "{warning}");
        assert!(
            !logs.contains('\u{1b}'),
            "colour codes in the pod's log:\n{logs:?}"
        );
        drains(&pod);
    });
}

/// Front listener: every request asks the pod about the route's two generic keys.
const ENVOY: &str = r#"
@FRONT_HEAD@
          stat_prefix: front_http
          route_config:
            virtual_hosts:
            - name: first-listener
              domains: ["*"]
              routes:
              - match: { prefix: "/" }
                route:
                  cluster: backend
                  rate_limits:
                  - actions:
                    - generic_key: { descriptor_key: first-route, descriptor_value: first-route }
                    - generic_key: { descriptor_key: rule-0-match-0, descriptor_value: rule-0-match-0 }
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: first-listener
              failure_mode_deny: true
              timeout: 10s
              rate_limit_service:
                transport_api_version: V3
                grpc_service: { envoy_grpc: { cluster_name: ratelimit } }
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
@BACKEND_LISTENER@
  clusters:
@BACKEND_CLUSTER@
  - name: ratelimit
    type: STATIC
    connect_timeout: 5s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {}
    transport_socket:
      name: envoy.transport_sockets.tls
      typed_config:
        "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
        sni: "@SNI@"
        common_tls_context:
          alpn_protocols: [h2]
          validation_context:
            trusted_ca: { filename: "@CA@" }
          tls_certificates:
          - certificate_chain: { filename: "@CERT@" }
            private_key: { filename: "@KEY@" }
    load_assignment:
      cluster_name: ratelimit
      endpoints:
      - lb_endpoints:
        - endpoint:
            address:
              socket_address: { address: 127.0.0.1, port_value: 8081 }
"#;

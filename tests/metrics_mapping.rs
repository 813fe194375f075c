//! `--metrics-mapping` (the Go server's `PROMETHEUS_MAPPER_YAML`): the Go server's stats
//! named by a statsd_exporter mapping file. Envoy Gateway's file gives the series the
//! native families have (but where statsd_exporter itself differs); the binary, started
//! with the Go variables, follows the file through a ConfigMap's `..data` swap, keeps the
//! mapping in force when a new version is bad, and refuses to start on a bad file.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use meshlimit::metrics::{Mapping, Metrics};
use meshlimit::request::{Descriptor, Request};
use meshlimit::rules::Algorithm;
use support::pod::atomic_write;
use support::process::{Meshlimit, run_serve, serve_on_loopback};

/// Envoy Gateway's mapping (tests/fixtures/envoy-gateway/README.md says where from).
fn envoy_gateway_file() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/envoy-gateway/statsd_conf.yaml")
}

/// One sample line as written: the name, the labels' text between braces, the value.
type Line = (String, String, f64);

/// The samples of a scrape, comments left out.
fn samples(text: &str) -> Vec<Line> {
    text.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').expect("a sample line");
            let (name, labels) = match series.split_once('{') {
                Some((name, labels)) => (name, labels.trim_end_matches('}')),
                None => (series, ""),
            };
            let value = value.parse().expect("a sample value");
            (name.to_string(), labels.to_string(), value)
        })
        .collect()
}

/// The samples of family `name` (a histogram's `_bucket`, `_sum` and `_count` too), in
/// order.
fn of_family(samples: &[Line], name: &str) -> Vec<Line> {
    let parts = ["", "_bucket", "_sum", "_count"].map(|suffix| format!("{name}{suffix}"));
    samples
        .iter()
        .filter(|(n, ..)| parts.contains(n))
        .cloned()
        .collect()
}

/// [`of_family`]'s samples as lines, as a set.
fn family(samples: &[Line], name: &str) -> BTreeSet<String> {
    of_family(samples, name)
        .into_iter()
        .map(|(n, l, v)| format!("{n}{{{l}}} {v}"))
        .collect()
}

const CONFIG: &str = "
domain: eg
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: fixed_window}
  - key: tenant
    value: gold
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
  - key: a
    descriptors:
      - key: b
        descriptors:
          - key: c
            rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
          - key: d
            shadow_mode: true
            rate_limit: {unit: minute, requests_per_unit: 1, algorithm: fixed_window}
";

/// Traffic on rules of one, two and three levels (within, near and over their limits, a
/// shadow rule), an unknown domain and an invalid request.
async fn traffic(service: &meshlimit::service::Service) {
    let requests: [(&[(&str, &str)], u32); 6] = [
        (&[("api", "x")], 7),
        (&[("tenant", "gold"), ("user", "u1")], 3),
        (&[("tenant", "gold"), ("user", "u2")], 1),
        (&[("a", "1"), ("b", "2"), ("c", "3")], 2),
        (&[("a", "1"), ("b", "2"), ("d", "4")], 3),
        (&[("tenant", "silver"), ("user", "u1")], 1),
    ];
    for (entries, times) in requests {
        for _ in 0..times {
            support::ask(service, "eg", &[entries]).await;
        }
    }
    support::ask(service, "nowhere", &[&[("k", "v")], &[("k", "w")]]).await;
    let invalid = service
        .should_rate_limit(Request::new("", &[Descriptor::new(&[("k", "v")])], 0))
        .await;
    assert!(invalid.is_err(), "an empty domain is refused");
}

/// Envoy Gateway's file names the Go stats as the native families do, family by family:
/// the globs give one-level rules `{domain, key1}`, the regexes deeper ones
/// `{domain, key1, key2}` (what statsd_exporter makes of them), and the response time,
/// without `scale`, is in seconds. Where statsd_exporter differs (stats the file does
/// not map keep their escaped names, without labels), the mapped text differs too.
#[tokio::test]
async fn envoy_gateways_file_gives_the_native_series_of_every_family_it_maps() {
    let (service, _clock) = support::service(&[("eg.yaml", CONFIG)], Algorithm::TokenBucket);
    traffic(&service).await;
    let metrics: &Metrics = service.metrics().expect("support services count");
    let native = samples(&metrics.render());
    metrics.set_mapping(Some(Arc::new(
        Mapping::load(&envoy_gateway_file()).unwrap(),
    )));
    let mapped = samples(&metrics.render());

    let families = [
        "ratelimit_service_rate_limit_total_hits",
        "ratelimit_service_rate_limit_within_limit",
        "ratelimit_service_rate_limit_near_limit",
        "ratelimit_service_rate_limit_over_limit",
        "ratelimit_service_rate_limit_shadow_mode",
        "ratelimit_service_should_rate_limit_error",
        "ratelimit_service_total_requests",
        "ratelimit_service_response_time_seconds",
        "ratelimit_service_config_load_success",
        "ratelimit_service_config_load_error",
        // Not in the file: its escaped stat name is the native family's.
        "ratelimit_service_global_shadow_mode",
    ];
    for name in families {
        let expected = family(&native, name);
        assert!(!expected.is_empty(), "{name}: no native samples");
        assert_eq!(family(&mapped, name), expected, "{name}");
    }
    // The traffic reached every level and outcome, so the comparison compared something.
    let hits = family(&mapped, "ratelimit_service_rate_limit_total_hits");
    for series in [
        r#"ratelimit_service_rate_limit_total_hits{domain="eg",key1="api"} 7"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="eg",key1="tenant_gold",key2="user"} 4"#,
        r#"ratelimit_service_rate_limit_total_hits{domain="eg",key1="a",key2="b"} 5"#,
    ] {
        assert!(hits.contains(series), "{series} not in {hits:#?}");
    }
    let over = family(&mapped, "ratelimit_service_rate_limit_over_limit");
    assert!(
        over.contains(r#"ratelimit_service_rate_limit_over_limit{domain="eg",key1="api"} 2"#),
        "{over:#?}"
    );
    let shadow = family(&mapped, "ratelimit_service_rate_limit_shadow_mode");
    assert!(
        shadow.contains(
            r#"ratelimit_service_rate_limit_shadow_mode{domain="eg",key1="a",key2="b"} 2"#
        ),
        "{shadow:#?}"
    );

    // Where statsd_exporter differs from the native families: no mapping for these.
    let unknown = "ratelimit_service_rate_limit_domain_not_found";
    assert!(family(&native, unknown).contains(&format!(r#"{unknown}{{domain="nowhere"}} 2"#)));
    assert!(family(&mapped, unknown).is_empty());
    let escaped = family(
        &mapped,
        "ratelimit_service_rate_limit_nowhere_domain_not_found",
    );
    assert_eq!(
        escaped.into_iter().collect::<Vec<_>>(),
        ["ratelimit_service_rate_limit_nowhere_domain_not_found{} 2"]
    );
    let local_cache = "ratelimit_service_rate_limit_eg_api_over_limit_with_local_cache";
    assert_eq!(family(&mapped, local_cache).len(), 1, "{mapped:#?}");
    assert!(
        family(
            &mapped,
            "ratelimit_service_rate_limit_over_limit_with_local_cache"
        )
        .is_empty()
    );

    // meshlimit's own families are the same either way.
    let own = |samples: &[Line]| -> Vec<Line> {
        samples
            .iter()
            .filter(|(n, ..)| n.starts_with("meshlimit_"))
            .cloned()
            .collect()
    };
    assert_eq!(own(&mapped), own(&native));

    // Back to the built-in mapping: the native text again.
    metrics.set_mapping(None);
    assert_eq!(samples(&metrics.render()), native);
}

/// The Go server's built-in mapping is Envoy Gateway's with `scale: 0.001` on the response
/// time, whose milliseconds it turns into seconds: the same histogram.
#[tokio::test]
async fn a_scale_multiplies_the_go_servers_milliseconds() {
    let (service, _clock) = support::service(&[("eg.yaml", CONFIG)], Algorithm::TokenBucket);
    traffic(&service).await;
    let metrics = service.metrics().expect("support services count");
    let name = "ratelimit_service_response_time_seconds";
    let native = samples(&metrics.render());
    let eg = std::fs::read_to_string(envoy_gateway_file()).unwrap();
    let timer = "    timer_type: histogram\n    labels:\n      grpc_method: \"$1\"\n";
    assert!(eg.contains(timer));
    let dir = tempfile::tempdir().unwrap();
    let go_default = dir.path().join("default_mapper.yaml");
    std::fs::write(
        &go_default,
        eg.replace(timer, &format!("    scale: 0.001\n{timer}")),
    )
    .unwrap();
    metrics.set_mapping(Some(Arc::new(Mapping::load(&go_default).unwrap())));
    let mapped = samples(&metrics.render());
    let (native, mapped) = (of_family(&native, name), of_family(&mapped, name));
    assert_eq!(native.len(), 19, "{native:#?}");
    assert_eq!(mapped.len(), native.len(), "{mapped:#?}");
    for ((n1, l1, v1), (n2, l2, v2)) in native.iter().zip(&mapped) {
        assert_eq!(n1, n2);
        assert!(
            (v1 - v2).abs() <= 1e-12 * v1.abs().max(1.0),
            "{n1}{{{l1}}} {v1} vs {v2}"
        );
        let le = |l: &str| {
            l.split("le=\"")
                .nth(1)
                .map(|v| v.trim_end_matches('"').to_string())
        };
        match (le(l1), le(l2)) {
            (Some(a), Some(b)) if a != "+Inf" => {
                let (a, b): (f64, f64) = (a.parse().unwrap(), b.parse().unwrap());
                assert!((a - b).abs() <= 1e-15, "{l1} vs {l2}");
            }
            (a, b) => assert_eq!(a, b),
        }
    }
}

fn mapping_v(version: &str) -> String {
    format!(
        "mappings:\n\
         - match: ratelimit.service.rate_limit.*.*.total_hits\n  name: {version}_hits\n  labels:\n    domain: $1\n    rule: $2\n\
         - match: ratelimit.service.rate_limit.*.*.*\n  name: dropped\n  action: drop\n"
    )
}

/// A Kubernetes ConfigMap volume holding `conf.yaml`, laid out and swapped as the
/// kubelet does (`support::pod::atomic_write`).
struct ConfigMap(PathBuf);

impl ConfigMap {
    fn new(dir: &Path, text: &str) -> ConfigMap {
        let map = ConfigMap(dir.to_path_buf());
        map.publish(text);
        map
    }

    fn file(&self) -> PathBuf {
        self.0.join("conf.yaml")
    }

    /// Writes a new version and swaps `..data` to it, as the kubelet does.
    fn publish(&self, text: &str) {
        let files = BTreeMap::from([("conf.yaml".to_string(), text.as_bytes().to_vec())]);
        atomic_write(&self.0, &files, 0o644);
    }
}

/// The port of `--metrics-addr`, from the serving line of the log.
fn metrics_addr(ml: &Meshlimit) -> std::net::SocketAddr {
    let log = ml.log();
    let at = log
        .find("metrics=")
        .unwrap_or_else(|| panic!("no metrics address in:\n{log}"));
    let addr = log[at + "metrics=".len()..]
        .split_whitespace()
        .next()
        .unwrap();
    addr.parse()
        .unwrap_or_else(|_| panic!("{addr:?} in:\n{log}"))
}

async fn scrape(addr: std::net::SocketAddr) -> String {
    let (status, text) = support::http_get(addr, "/metrics").await;
    assert_eq!(status, 200, "{text}");
    text
}

/// Started as the Go server is by Envoy Gateway (`USE_PROMETHEUS`, `PROMETHEUS_ADDR`,
/// `PROMETHEUS_MAPPER_YAML` on a ConfigMap volume): the metrics port serves the mapped
/// names, a new version swapped in is followed, a bad one is logged with its line and the
/// one in force stays.
#[tokio::test]
async fn the_go_variables_name_a_followed_mapping_file() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let volume = dir.path().join("statsd-exporter");
    std::fs::create_dir(&volume).unwrap();
    let map = ConfigMap::new(&volume, &mapping_v("v1"));
    let config = config.display().to_string();
    let file = map.file().display().to_string();
    let argv = serve_on_loopback(&config, &["--log", "info", "--reload-debounce-ms", "50"]);
    let env = [
        ("USE_PROMETHEUS", "true"),
        ("PROMETHEUS_ADDR", "127.0.0.1:0"),
        ("PROMETHEUS_MAPPER_YAML", file.as_str()),
    ];
    let ml = Meshlimit::start_with(&argv, &env).await;
    let addr = metrics_addr(&ml);
    for _ in 0..3 {
        ml.ask(support::rls_request("eg", &[&[("api", "x")]])).await;
    }
    ml.ask(support::rls_request(
        "eg",
        &[&[("tenant", "gold"), ("user", "u")]],
    ))
    .await;

    let text = scrape(addr).await;
    assert!(
        text.contains("v1_hits{domain=\"eg\",rule=\"api\"} 3\n"),
        "{text}"
    );
    let named = |text: &str, name: &str| text.lines().any(|l| l.starts_with(name));
    assert!(!named(&text, "dropped"), "{text}");
    // The two-level rule's stats match no glob: their escaped names, without labels.
    let unmatched = "ratelimit_service_rate_limit_eg_tenant_gold_user_total_hits 1\n";
    assert!(text.contains(unmatched), "{text}");
    assert!(
        !text.contains("ratelimit_service_rate_limit_total_hits"),
        "{text}"
    );
    // The same text on the HTTP address.
    let (_, http_text) = support::http_get(ml.http, "/metrics").await;
    assert!(
        http_text.contains("v1_hits{domain=\"eg\",rule=\"api\"} 3\n"),
        "{http_text}"
    );

    map.publish(&mapping_v("v2"));
    support::eventually_async(30, "the new mapping in force", || async {
        scrape(addr)
            .await
            .contains("v2_hits{domain=\"eg\",rule=\"api\"} 3\n")
    })
    .await;
    assert!(!scrape(addr).await.contains("v1_hits"));

    map.publish("mappings:\n- match: 'a('\n  match_type: regex\n  name: broken\n");
    support::eventually(30, "the bad version logged", || {
        ml.log().contains("metrics mapping in force stays")
    })
    .await;
    let log = ml.log();
    assert!(log.contains(&format!("{file}:2: invalid regex")), "{log}");
    let text = scrape(addr).await;
    assert!(
        text.contains("v2_hits{domain=\"eg\",rule=\"api\"} 3\n"),
        "{text}"
    );
    assert!(!named(&text, "broken"), "{text}");
}

/// A mapping file that cannot be used stops the start, naming the file and the line.
#[tokio::test]
async fn a_bad_mapping_file_stops_the_start_naming_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let mapping = dir.path().join("mapping.yaml");
    std::fs::write(
        &mapping,
        "mappings:\n- match: a.b\n  name: ok\n- match: 'a.*'\n  name: a.b\n",
    )
    .unwrap();
    let (config, mapping) = (config.display().to_string(), mapping.display().to_string());
    let output = run_serve(&config, &["--metrics-mapping", &mapping]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{mapping}:4: invalid metric name")),
        "{stderr}"
    );

    let missing = format!("{mapping}.missing");
    let output = run_serve(&config, &["--metrics-mapping", &missing]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("{missing}: cannot read it")),
        "{stderr}"
    );
}

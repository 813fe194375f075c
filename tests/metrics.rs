//! `/metrics`: the exposition parsed back into samples, after known sequences of requests.
//! Fixed-window rules and a manual clock make every number exact.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use meshlimit::clock::Clock;
use meshlimit::config::Config;
use meshlimit::request::{Descriptor, Override, Request};
use meshlimit::rules::{Algorithm, Unit};
use meshlimit::service::{Answer, Service};
use meshlimit::store::redis::{RedisOptions, TimeSource};
use support::redis::RedisServer;

/// One sample: metric name, labels, value.
type Sample = (String, BTreeMap<String, String>, f64);

/// The samples of a text-format exposition; comments skipped.
fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .map(|line| parse_line(line).unwrap_or_else(|| panic!("bad sample line {line:?}")))
        .collect()
}

/// `name{key="value",...} value`, label values with `\\`, `\"` and `\n` escapes.
fn parse_line(line: &str) -> Option<Sample> {
    let name_end = line.find(['{', ' '])?;
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if let Some(mut inner) = rest.strip_prefix('{') {
        loop {
            if let Some(after) = inner.strip_prefix('}') {
                rest = after;
                break;
            }
            let (key, after) = inner.split_once("=\"")?;
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next()? {
                    (_, '\\') => match chars.next()?.1 {
                        'n' => value.push('\n'),
                        c => value.push(c),
                    },
                    (i, '"') => break i,
                    (_, c) => value.push(c),
                }
            };
            labels.insert(key.to_string(), value);
            inner = &after[end + 1..];
            inner = inner.strip_prefix(',').unwrap_or(inner);
        }
    }
    let value = rest.strip_prefix(' ')?.parse().ok()?;
    Some((name, labels, value))
}

/// The value of the sample `name` with exactly `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let wanted: BTreeMap<String, String> = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    samples
        .iter()
        .find(|(n, l, _)| n == name && *l == wanted)
        .map(|s| s.2)
}

/// The label sets of every sample named `name`.
fn series(samples: &[Sample], name: &str) -> Vec<BTreeMap<String, String>> {
    samples
        .iter()
        .filter(|(n, ..)| n == name)
        .map(|(_, l, _)| l.clone())
        .collect()
}

const RULE: &str = "ratelimit_service_rate_limit_";

/// The six per-rule counters of one series: total, within, near, over, shadow, cached.
fn rule_counts(samples: &[Sample], labels: &[(&str, &str)]) -> [f64; 6] {
    [
        "total_hits",
        "within_limit",
        "near_limit",
        "over_limit",
        "shadow_mode",
        "over_limit_with_local_cache",
    ]
    .map(|stat| {
        value(samples, &format!("{RULE}{stat}"), labels)
            .unwrap_or_else(|| panic!("no {stat} series for {labels:?}"))
    })
}

fn scrape(service: &Service) -> Vec<Sample> {
    parse(&service.metrics().expect("support services count").render())
}

async fn hit(service: &Service, domain: &str, entries: &[(&str, &str)], hits: u32) -> Answer {
    service
        .should_rate_limit(Request::new(domain, &[Descriptor::new(entries)], hits))
        .await
        .expect("a valid request")
}

const SHOP: &str = "
domain: shop
descriptors:
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 20, algorithm: fixed_window}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
";

#[tokio::test]
async fn fixed_window_hits_split_as_the_go_server_splits_them() {
    let (service, clock) = support::service(&[("shop.yaml", SHOP)], Algorithm::TokenBucket);
    // Limit 20, near from 16. (hits, denied): 0→10, 10→18 (2 near), 18→19 (1 near),
    // 19→23 crosses the limit (1 near, 3 over), 23→25 (2 over).
    for (hits, denied) in [(10, false), (8, false), (1, false), (4, true), (2, true)] {
        let answer = hit(&service, "shop", &[("api", "x")], hits).await;
        assert_eq!(answer.over_limit, denied, "{hits} hits");
    }
    let samples = scrape(&service);
    let api = [("domain", "shop"), ("key1", "api")];
    assert_eq!(
        rule_counts(&samples, &api),
        [25.0, 19.0, 4.0, 5.0, 0.0, 0.0]
    );

    // A smaller ratio moves the threshold to 10: the next window's 12 hits, 2 near.
    service
        .metrics()
        .expect("support services count")
        .set_near_limit_ratio(0.5);
    clock.advance(Duration::from_secs(60));
    hit(&service, "shop", &[("api", "x")], 12).await;
    let samples = scrape(&service);
    assert_eq!(
        rule_counts(&samples, &api),
        [37.0, 31.0, 6.0, 5.0, 0.0, 0.0]
    );
}

#[tokio::test]
async fn shadow_rules_count_over_limit_hits_while_answering_ok() {
    let (service, _clock) = support::service(&[("shop.yaml", SHOP)], Algorithm::TokenBucket);
    for _ in 0..3 {
        let answer = hit(&service, "shop", &[("trial", "t")], 1).await;
        assert!(!answer.over_limit);
        assert!(!answer.statuses[0].over_limit);
    }
    let samples = scrape(&service);
    // Limit 2, near from 1: the second hit is near, the third over, in shadow.
    let trial = [("domain", "shop"), ("key1", "trial")];
    assert_eq!(
        rule_counts(&samples, &trial),
        [3.0, 2.0, 1.0, 1.0, 1.0, 0.0]
    );
    // The other rule's series exists from the start, at 0.
    let api = [("domain", "shop"), ("key1", "api")];
    assert_eq!(rule_counts(&samples, &api), [0.0; 6]);
}

const DEEP: &str = "
domain: deep
descriptors:
  - key: one
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: two
    value: x
    descriptors:
      - key: sub
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: a
    descriptors:
      - key: b
        value: y
        descriptors:
          - key: c
            rate_limit: {unit: minute, requests_per_unit: 100}
  - key: svc
    descriptors:
      - key: method
        value: /shop.Cart/Add
        rate_limit: {unit: minute, requests_per_unit: 100}
";

#[tokio::test]
async fn labels_follow_the_go_mapping_at_every_depth() {
    let (service, _clock) = support::service(&[("deep.yaml", DEEP)], Algorithm::TokenBucket);
    hit(&service, "deep", &[("one", "1")], 1).await;
    hit(&service, "deep", &[("two", "x"), ("sub", "s")], 2).await;
    hit(&service, "deep", &[("a", "q"), ("b", "y"), ("c", "z")], 3).await;
    hit(
        &service,
        "deep",
        &[("svc", "s"), ("method", "/shop.Cart/Add")],
        4,
    )
    .await;
    let samples = scrape(&service);
    let total = format!("{RULE}total_hits");
    let expected = [
        (vec![("domain", "deep"), ("key1", "one")], 1.0),
        (
            vec![("domain", "deep"), ("key1", "two_x"), ("key2", "sub")],
            2.0,
        ),
        (
            vec![("domain", "deep"), ("key1", "a"), ("key2", "b_y")],
            3.0,
        ),
        // A value with dots stays whole.
        (
            vec![
                ("domain", "deep"),
                ("key1", "svc"),
                ("key2", "method_/shop.Cart/Add"),
            ],
            4.0,
        ),
    ];
    for (labels, hits) in &expected {
        assert_eq!(value(&samples, &total, labels), Some(*hits), "{labels:?}");
    }
    assert_eq!(series(&samples, &total).len(), expected.len());
}

const USERS: &str = "
domain: users
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: client
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tier
    value: gold*
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: free
    rate_limit: {unlimited: true}
";

#[tokio::test]
async fn only_detailed_rules_put_request_values_in_labels() {
    let (service, _clock) = support::service(&[("users.yaml", USERS)], Algorithm::TokenBucket);
    for user in ["alice", "bob", "alice"] {
        hit(&service, "users", &[("user", user)], 1).await;
    }
    hit(&service, "users", &[("client", "10.1.2.3:8080")], 1).await;
    for tier in ["gold1", "gold2"] {
        hit(&service, "users", &[("tier", tier)], 1).await;
    }
    for ip in ["10.0.0.1", "10.0.0.2", "10.0.0.3"] {
        hit(&service, "users", &[("remote_address", ip)], 1).await;
    }
    let samples = scrape(&service);
    let total = format!("{RULE}total_hits");
    let mut key1s: Vec<String> = series(&samples, &total)
        .into_iter()
        .map(|l| l["key1"].clone())
        .collect();
    key1s.sort();
    // Detailed: the request's values, sanitised as the Go server does. Not detailed: the
    // config's path, the wildcard's pattern, whatever values the requests carried.
    assert_eq!(
        key1s,
        [
            "client_10_1_2_3_8080",
            "free",
            "remote_address",
            "tier_gold*",
            "user_alice",
            "user_bob"
        ]
    );
    let count = |key1: &str| value(&samples, &total, &[("domain", "users"), ("key1", key1)]);
    assert_eq!(count("user_alice"), Some(2.0));
    assert_eq!(count("user_bob"), Some(1.0));
    assert_eq!(count("tier_gold*"), Some(2.0));
    assert_eq!(count("remote_address"), Some(3.0));
}

#[tokio::test]
async fn unlimited_rules_count_hits_within_their_limit() {
    let (service, _clock) = support::service(&[("users.yaml", USERS)], Algorithm::TokenBucket);
    hit(&service, "users", &[("free", "a")], 2).await;
    hit(&service, "users", &[("free", "b")], 1).await;
    let samples = scrape(&service);
    let free = [("domain", "users"), ("key1", "free")];
    assert_eq!(rule_counts(&samples, &free), [3.0, 3.0, 0.0, 0.0, 0.0, 0.0]);
}

#[tokio::test]
async fn limits_sent_in_requests_count_under_one_series_per_domain() {
    let (service, _clock) = support::service(&[("users.yaml", USERS)], Algorithm::TokenBucket);
    for value in ["v1", "v2", "v3", "v1", "v1"] {
        let descriptor = Descriptor {
            limit: Some(Override {
                requests_per_unit: 2,
                unit: Some(Unit::Minute),
            }),
            ..Descriptor::new(&[("anything", value)])
        };
        service
            .should_rate_limit(Request::new("users", &[descriptor], 1))
            .await
            .expect("valid");
    }
    let samples = scrape(&service);
    // Token buckets of 2, near once one token is left: v1's second request takes the
    // last token (near), its third is over.
    let domain = [("domain", "users")];
    assert_eq!(
        rule_counts(&samples, &domain),
        [5.0, 4.0, 1.0, 1.0, 0.0, 0.0]
    );
    let total = format!("{RULE}total_hits");
    assert!(
        series(&samples, &total)
            .iter()
            .all(|l| !l.values().any(|v| v.contains("anything"))),
        "request values leaked into labels"
    );
}

#[tokio::test]
async fn every_request_is_counted_and_timed() {
    let (service, _clock) = support::service(&[("shop.yaml", SHOP)], Algorithm::TokenBucket);
    for _ in 0..4 {
        hit(&service, "shop", &[("api", "x")], 1).await;
    }
    // No rule, unknown domain: answered without the store.
    hit(&service, "shop", &[("nothing", "x")], 1).await;
    hit(&service, "elsewhere", &[("api", "x")], 1).await;
    // Invalid: no domain, no descriptors.
    assert!(
        service
            .should_rate_limit(Request::new("", &[Descriptor::new(&[("api", "x")])], 1))
            .await
            .is_err()
    );
    let none: [Descriptor; 0] = [];
    assert!(
        service
            .should_rate_limit(Request::new("shop", &none, 1))
            .await
            .is_err()
    );

    let samples = scrape(&service);
    let method = [("grpc_method", "ShouldRateLimit")];
    assert_eq!(
        value(&samples, "ratelimit_service_total_requests", &method),
        Some(8.0)
    );
    let time = "ratelimit_service_response_time_seconds";
    assert_eq!(
        value(&samples, &format!("{time}_count"), &method),
        Some(8.0)
    );
    let inf = [("grpc_method", "ShouldRateLimit"), ("le", "+Inf")];
    assert_eq!(value(&samples, &format!("{time}_bucket"), &inf), Some(8.0));
    let errors = "ratelimit_service_should_rate_limit_error";
    assert_eq!(
        value(&samples, errors, &[("err_type", "service_error")]),
        Some(2.0)
    );
    assert_eq!(
        value(&samples, errors, &[("err_type", "redis_error")]),
        Some(0.0)
    );
    let store = [("store", "memory")];
    let latency = "meshlimit_store_latency_seconds_count";
    assert_eq!(value(&samples, latency, &store), Some(4.0));
    assert_eq!(
        value(&samples, "meshlimit_store_errors_total", &store),
        Some(0.0)
    );
    assert_eq!(value(&samples, "meshlimit_config_rules", &[]), Some(2.0));
    assert!(
        !samples
            .iter()
            .any(|(n, ..)| n.starts_with("meshlimit_redis")),
        "no Redis metrics for the embedded store"
    );
}

/// Replaces `path` whole (write aside, rename), so that the watcher never reads half a file.
fn replace(path: &std::path::Path, text: &str) {
    let aside = path.with_extension("tmp");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

#[tokio::test]
async fn the_server_serves_metrics_and_counts_config_loads() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("shop.yaml");
    std::fs::write(&file, SHOP).unwrap();
    let server = support::TestServer::start(dir.path(), Algorithm::TokenBucket).await;
    let scrape_http = || async {
        let (status, headers, body) = support::http_request(server.http, "/metrics", &[])
            .await
            .expect("GET /metrics");
        assert_eq!(status, 200);
        assert!(
            headers
                .iter()
                .any(|h| h == "content-type: text/plain; version=0.0.4; charset=utf-8"),
            "{headers:?}"
        );
        parse(&body)
    };
    let loads = |samples: &[Sample]| {
        (
            value(samples, "ratelimit_service_config_load_success", &[]),
            value(samples, "ratelimit_service_config_load_error", &[]),
        )
    };
    assert_eq!(loads(&scrape_http().await), (Some(1.0), Some(0.0)));

    replace(
        &file,
        &SHOP.replace("requests_per_unit: 20", "requests_per_unit: 30"),
    );
    support::eventually_async(10, "the good edit counted", || async {
        loads(&scrape_http().await) == (Some(2.0), Some(0.0))
    })
    .await;
    replace(
        &file,
        "domain: shop\ndescriptors: [{key: api, rate_limit: {unit: fortnight}}]\n",
    );
    // Any later file event in the watched directories rejects the bad file again.
    support::eventually_async(10, "the bad edit counted", || async {
        loads(&scrape_http().await).1 >= Some(1.0)
    })
    .await;
    let samples = scrape_http().await;
    assert_eq!(loads(&samples).0, Some(2.0));
    // The rules of the running (good) config are listed.
    let api = [("domain", "shop"), ("key1", "api")];
    assert_eq!(rule_counts(&samples, &api), [0.0; 6]);
    server.stop().await;
}

const SHARED: &str = "
domain: shared
descriptors:
  - key: pair
    rate_limit: {unit: minute, requests_per_unit: 2, algorithm: fixed_window}
";

#[tokio::test]
async fn redis_cache_answers_and_store_errors_are_counted() {
    let mut redis = RedisServer::start();
    let clock = meshlimit::clock::ManualClock::new(support::START);
    let config = Config::from_sources(&[("shared.yaml".into(), SHARED.to_string())]).unwrap();
    let clock_dyn: Arc<dyn Clock> = Arc::new(clock.clone());
    let service = support::redis_replica(
        config,
        clock_dyn,
        RedisOptions {
            timeout: Duration::from_secs(5),
            time: TimeSource::Caller,
            ..RedisOptions::new(redis.url())
        },
    );
    // Limit 2: Redis decides three, the third over; the cache refuses the next two.
    let denied: Vec<bool> = {
        let mut denied = Vec::new();
        for _ in 0..5 {
            denied.push(
                hit(&service, "shared", &[("pair", "p")], 1)
                    .await
                    .over_limit,
            );
        }
        denied
    };
    assert_eq!(denied, [false, false, true, true, true]);
    let samples = scrape(&service);
    let pair = [("domain", "shared"), ("key1", "pair")];
    assert_eq!(rule_counts(&samples, &pair), [5.0, 2.0, 1.0, 3.0, 0.0, 2.0]);
    let cache = "meshlimit_redis_cache_hits_total";
    assert_eq!(
        value(&samples, cache, &[("cache", "over_limit")]),
        Some(2.0)
    );
    assert_eq!(value(&samples, cache, &[("cache", "lease")]), Some(0.0));
    assert_eq!(
        value(&samples, "meshlimit_redis_cache_misses_total", &[]),
        Some(3.0)
    );
    let store = [("store", "redis")];
    assert_eq!(
        value(&samples, "meshlimit_store_latency_seconds_count", &store),
        Some(5.0)
    );
    // One request at a time: a script call each, and the time they took.
    assert_eq!(
        value(&samples, "meshlimit_redis_calls_total", &[]),
        Some(3.0)
    );
    assert_eq!(
        value(&samples, "meshlimit_redis_call_requests_total", &[]),
        Some(3.0)
    );
    let call_seconds = value(&samples, "meshlimit_redis_call_seconds_total", &[]);
    assert!(
        call_seconds.is_some_and(|s| s > 0.0 && s < 15.0),
        "{call_seconds:?}"
    );

    // Redis gone: a key the cache knows nothing of fails, twice.
    redis.kill();
    for _ in 0..2 {
        let answer = service
            .should_rate_limit(Request::new(
                "shared",
                &[Descriptor::new(&[("pair", "q")])],
                1,
            ))
            .await;
        assert!(answer.is_err());
    }
    let samples = scrape(&service);
    assert_eq!(
        value(&samples, "meshlimit_store_errors_total", &store),
        Some(2.0)
    );
    let errors = "ratelimit_service_should_rate_limit_error";
    assert_eq!(
        value(&samples, errors, &[("err_type", "redis_error")]),
        Some(2.0)
    );
    let redis_errors = value(&samples, "meshlimit_redis_errors_total", &[]);
    assert!(redis_errors.unwrap_or(0.0) >= 1.0, "{redis_errors:?}");
    // Failed requests count no hits.
    assert_eq!(rule_counts(&samples, &pair)[0], 5.0);
}

const TENANTS: &str = "
domain: saas
descriptors:
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 100}
";

/// Issue 9: before, every distinct value of a detailed_metric rule added six series for
/// good (50,000 tenants: 300,000 series, a 24.9 MB scrape). Now at most
/// `--max-metric-values` per rule, the rest on one overflow series, counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_values_in_labels_are_capped_per_rule() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("saas.yaml"), TENANTS).unwrap();
    let ml = support::process::Meshlimit::start(dir.path(), &["--max-metric-values", "100"]).await;
    let mut client = ml.client().await;
    for i in 0..5_000 {
        let tenant = format!("t{i}");
        let request = support::rls_request("saas", &[&[("tenant", &tenant)], &[("plan", "a")]]);
        let call = client.should_rate_limit(request);
        tokio::time::timeout(Duration::from_secs(10), call)
            .await
            .expect("ShouldRateLimit hung")
            .expect("ShouldRateLimit");
    }
    let (status, text) = support::http_get(ml.http, "/metrics").await;
    assert_eq!(status, 200);
    let samples = parse(&text);
    let total = format!("{RULE}total_hits");
    let tenants: Vec<String> = series(&samples, &total)
        .into_iter()
        .filter(|l| l["domain"] == "saas" && l["key1"].starts_with("tenant_"))
        .map(|l| l["key1"].clone())
        .collect();
    assert_eq!(
        tenants.len(),
        101,
        "100 values and the overflow: {tenants:?}"
    );
    let overflow = [("domain", "saas"), ("key1", "tenant__other_")];
    assert_eq!(value(&samples, &total, &overflow), Some(4_900.0));
    assert_eq!(
        value(
            &samples,
            &total,
            &[("domain", "saas"), ("key1", "tenant_t0")]
        ),
        Some(1.0)
    );
    let counted = value(
        &samples,
        "meshlimit_metric_values_overflow_total",
        &[("domain", "saas"), ("key1", "tenant")],
    );
    assert_eq!(counted, Some(4_900.0));
    // The plain rule kept its one series.
    let plan = [("domain", "saas"), ("key1", "plan")];
    assert_eq!(value(&samples, &total, &plan), Some(5_000.0));
    // A value that has its series keeps counting on it.
    let request = support::rls_request("saas", &[&[("tenant", "t1")]]);
    ml.ask(request).await;
    let samples = parse(&support::http_get(ml.http, "/metrics").await.1);
    let t1 = [("domain", "saas"), ("key1", "tenant_t1")];
    assert_eq!(value(&samples, &total, &t1), Some(2.0));
}

/// The cap counts per rule across reloads, as the series stay: a reload does not give a
/// rule a fresh allowance.
#[tokio::test]
async fn the_value_cap_survives_reloads() {
    let (service, _clock) = support::service(&[("saas.yaml", TENANTS)], Algorithm::TokenBucket);
    service
        .metrics()
        .expect("support services count")
        .set_max_metric_values(2);
    for tenant in ["a", "b", "c"] {
        hit(&service, "saas", &[("tenant", tenant)], 1).await;
    }
    let edited = TENANTS.replace("requests_per_unit: 100}", "requests_per_unit: 200}");
    let config = Config::from_sources(&[("saas.yaml".into(), edited)]).unwrap();
    service.config().store(Arc::new(config));
    for tenant in ["d", "a"] {
        hit(&service, "saas", &[("tenant", tenant)], 1).await;
    }
    let samples = scrape(&service);
    let total = format!("{RULE}total_hits");
    let count = |key1: &str| value(&samples, &total, &[("domain", "saas"), ("key1", key1)]);
    assert_eq!(count("tenant_a"), Some(2.0));
    assert_eq!(count("tenant_b"), Some(1.0));
    assert_eq!(count("tenant_c"), None);
    assert_eq!(count("tenant_d"), None);
    assert_eq!(count("tenant__other_"), Some(2.0));
    let overflow = [("domain", "saas"), ("key1", "tenant")];
    let counted = value(
        &samples,
        "meshlimit_metric_values_overflow_total",
        &overflow,
    );
    assert_eq!(counted, Some(2.0));
    // The plain rule's overflow counter does not exist: only detailed rules have one.
    let plan = [("domain", "saas"), ("key1", "plan")];
    assert_eq!(
        value(&samples, "meshlimit_metric_values_overflow_total", &plan),
        None
    );
}

const ROUTES: &str = "
domain: routes
descriptors:
  - key: route
    value_to_metric: true
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: tier
    value: gold*
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: plan
    value: pro*
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: pool
    value: p*
    share_threshold: true
    value_to_metric: true
    rate_limit: {unit: minute, requests_per_unit: 100}
  - key: region
    value_to_metric: true
    descriptors:
      - key: client
        detailed_metric: true
        rate_limit: {unit: minute, requests_per_unit: 100}
  - key: app
    descriptors:
      - key: build
        descriptors:
          - key: session
            value_to_metric: true
            rate_limit: {unit: minute, requests_per_unit: 100}
";

/// The `(key1, key2)` labels of every `total_hits` series of `domain`, sorted.
fn levels_of(samples: &[Sample], domain: &str) -> Vec<(String, Option<String>)> {
    let mut levels: Vec<(String, Option<String>)> = series(samples, &format!("{RULE}total_hits"))
        .into_iter()
        .filter(|l| l["domain"] == domain)
        .map(|l| (l["key1"].clone(), l.get("key2").cloned()))
        .collect();
    levels.sort();
    levels
}

fn owned(levels: &[(&str, Option<&str>)]) -> Vec<(String, Option<String>)> {
    levels
        .iter()
        .map(|&(k1, k2)| (k1.to_string(), k2.map(str::to_string)))
        .collect()
}

/// §1.8: the levels flagged `value_to_metric` name the series by the request's value
/// (a value-less entry's, a wildcard's match); the rest keep the config's path; a
/// share_threshold wildcard keeps its pattern; detailed_metric wins; levels below the
/// second are not labels.
#[tokio::test]
async fn value_to_metric_puts_the_flagged_levels_values_in_labels() {
    let (service, _clock) = support::service(&[("routes.yaml", ROUTES)], Algorithm::TokenBucket);
    let requests: [&[(&str, &str)]; 9] = [
        &[("route", "cart"), ("user", "u1")],
        &[("route", "cart"), ("user", "u2")],
        &[("route", "pay:v2"), ("user", "u1")],
        &[("tier", "gold7")],
        &[("plan", "pro9")],
        &[("pool", "p1")],
        &[("pool", "p2")],
        &[("region", "eu"), ("client", "c1")],
        &[("app", "a"), ("build", "b"), ("session", "s1")],
    ];
    for entries in requests {
        hit(&service, "routes", entries, 1).await;
    }
    let samples = scrape(&service);
    let expected = [
        ("app", Some("build")),
        ("plan_pro*", None),
        ("pool_p*", None),
        ("region_eu", Some("client_c1")),
        ("route_cart", Some("user")),
        ("route_pay_v2", Some("user")),
        ("tier_gold7", None),
    ];
    assert_eq!(levels_of(&samples, "routes"), owned(&expected));
    let total = format!("{RULE}total_hits");
    let cart = [
        ("domain", "routes"),
        ("key1", "route_cart"),
        ("key2", "user"),
    ];
    assert_eq!(value(&samples, &total, &cart), Some(2.0));
    let pool = [("domain", "routes"), ("key1", "pool_p*")];
    assert_eq!(value(&samples, &total, &pool), Some(2.0));
}

/// Request values are the caller's: a value_to_metric rule creates at most
/// `--max-metric-values` series, the rest on its overflow series, counted.
#[tokio::test]
async fn value_to_metric_series_are_capped_per_rule() {
    let (service, _clock) = support::service(&[("routes.yaml", ROUTES)], Algorithm::TokenBucket);
    service
        .metrics()
        .expect("support services count")
        .set_max_metric_values(2);
    for route in ["a", "b", "c", "d", "a"] {
        hit(&service, "routes", &[("route", route), ("user", "u")], 1).await;
    }
    let samples = scrape(&service);
    let total = format!("{RULE}total_hits");
    let count = |key1: &str| {
        let labels = [("domain", "routes"), ("key1", key1), ("key2", "user")];
        value(&samples, &total, &labels)
    };
    assert_eq!(count("route_a"), Some(2.0));
    assert_eq!(count("route_b"), Some(1.0));
    assert_eq!(count("route_c"), None);
    assert_eq!(count("route__other_"), Some(2.0));
    let rule = [("domain", "routes"), ("key1", "route"), ("key2", "user")];
    let overflowed = "meshlimit_metric_values_overflow_total";
    assert_eq!(value(&samples, overflowed, &rule), Some(2.0));
}

const NOT_FOUND: &str = "ratelimit_service_rate_limit_domain_not_found";

/// §1.4: every descriptor of a request to an unknown domain counts once under that
/// domain, overrides included; a known domain without a matching rule counts nothing.
#[tokio::test]
async fn unknown_domains_count_each_descriptor() {
    let (service, _clock) = support::service(&[("shop.yaml", SHOP)], Algorithm::TokenBucket);
    let three = [
        Descriptor::new(&[("api", "x")]),
        Descriptor::new(&[("a", "1"), ("b", "2")]),
        Descriptor {
            limit: Some(Override {
                requests_per_unit: 1,
                unit: Some(Unit::Second),
            }),
            ..Descriptor::new(&[("c", "3")])
        },
    ];
    let answer = service
        .should_rate_limit(Request::new("nowhere", &three, 1))
        .await
        .expect("valid");
    assert!(!answer.over_limit);
    hit(&service, "nowhere", &[("api", "x")], 5).await;
    hit(&service, "else:where", &[("api", "x")], 1).await;
    hit(&service, "shop", &[("nothing", "x")], 1).await;
    let samples = scrape(&service);
    let mut found: Vec<(String, f64)> = samples
        .iter()
        .filter(|(n, ..)| n == NOT_FOUND)
        .map(|(_, l, v)| (l["domain"].clone(), *v))
        .collect();
    found.sort_by(|a, b| a.0.cmp(&b.0));
    // Hits do not matter, descriptors do; labels are sanitised as stat names are.
    assert_eq!(
        found,
        [
            ("else_where".to_string(), 1.0),
            ("nowhere".to_string(), 4.0)
        ]
    );
}

/// Through the binary: value_to_metric labels and their cap, and unknown domains
/// folded into `_other_` past the same cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_names_value_to_metric_series_and_counts_unknown_domains() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("routes.yaml"), ROUTES).unwrap();
    let ml = support::process::Meshlimit::start(dir.path(), &["--max-metric-values", "3"]).await;
    for i in 0..10 {
        let route = format!("r{i}");
        let request = support::rls_request("routes", &[&[("route", &route), ("user", "u")]]);
        ml.ask(request).await;
    }
    for i in 0..6 {
        let domain = format!("ghost{i}");
        ml.ask(support::rls_request(
            &domain,
            &[&[("k", "v")], &[("k", "w")]],
        ))
        .await;
    }
    let (status, text) = support::http_get(ml.http, "/metrics").await;
    assert_eq!(status, 200);
    let samples = parse(&text);
    let expected = [
        ("route__other_", Some("user")),
        ("route_r0", Some("user")),
        ("route_r1", Some("user")),
        ("route_r2", Some("user")),
    ];
    let mut routes = levels_of(&samples, "routes");
    routes.retain(|(key1, _)| key1.starts_with("route"));
    assert_eq!(routes, owned(&expected));
    let total = format!("{RULE}total_hits");
    let overflow = [
        ("domain", "routes"),
        ("key1", "route__other_"),
        ("key2", "user"),
    ];
    assert_eq!(value(&samples, &total, &overflow), Some(7.0));
    let not_found = |domain: &str| value(&samples, NOT_FOUND, &[("domain", domain)]);
    assert_eq!(not_found("ghost0"), Some(2.0));
    assert_eq!(not_found("ghost2"), Some(2.0));
    assert_eq!(not_found("ghost3"), None);
    assert_eq!(not_found("_other_"), Some(6.0));
    assert_eq!(series(&samples, NOT_FOUND).len(), 4);
}

/// A rule with several limits counts once on its rule series (by the binding limit), and
/// on each limit: hits within or over it, and how often it bound.
#[tokio::test]
async fn each_limit_of_a_list_is_counted() {
    let config = "
domain: multi
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 10, algorithm: sliding_window, name: per_second}
      - {unit: hour, requests_per_unit: 2, algorithm: sliding_window, name: hourly}
";
    let (service, _clock) = support::service(&[("multi.yaml", config)], Algorithm::TokenBucket);
    for _ in 0..3 {
        hit(&service, "multi", &[("user", "u")], 1).await;
    }
    let samples = scrape(&service);
    let each = |limit: &str, result: &str| {
        value(
            &samples,
            "meshlimit_rule_limit_hits_total",
            &[
                ("domain", "multi"),
                ("rule", "multi.user"),
                ("limit", limit),
                ("result", result),
            ],
        )
    };
    assert_eq!(each("per_second", "within"), Some(3.0));
    assert_eq!(each("per_second", "over"), Some(0.0));
    assert_eq!(each("hourly", "within"), Some(2.0));
    assert_eq!(each("hourly", "over"), Some(1.0));
    let binding = |limit: &str| {
        value(
            &samples,
            "meshlimit_rule_limit_binding_total",
            &[
                ("domain", "multi"),
                ("rule", "multi.user"),
                ("limit", limit),
            ],
        )
    };
    // Fewest left: the hourly limit each time (1, then 0, then refusing).
    assert_eq!(
        (binding("per_second"), binding("hourly")),
        (Some(0.0), Some(3.0))
    );
    let user = [("domain", "multi"), ("key1", "user")];
    assert_eq!(rule_counts(&samples, &user), [3.0, 2.0, 1.0, 1.0, 0.0, 0.0]);
}

const PAGE: &str = "
domain: page
descriptors:
  - key: svc
    descriptors:
      - key: method
        value: a
        descriptors:
          - key: user
            rate_limit: {unit: day, requests_per_unit: 1}
      - key: method
        value: b
        descriptors:
          - key: user
            rate_limit: {unit: day, requests_per_unit: 1}
  - key: free
    rate_limit: {unlimited: true}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
";

/// (allowed, over) of each rule with any, by path, as the operator page reads them.
fn page_counts(service: &Service) -> BTreeMap<String, (u64, u64)> {
    let mut counts = BTreeMap::new();
    let metrics = service.metrics().expect("support services count");
    metrics.visit_rules(|view| {
        let read = view.counts.read();
        if read != (0, 0) {
            counts.insert(view.rule.full_key.clone(), read);
        }
    });
    counts
}

#[tokio::test]
async fn the_page_counts_each_rule_apart_and_lists_whom_it_refused() {
    let (service, _clock) = support::service(&[("page.yaml", PAGE)], Algorithm::TokenBucket);
    let a = [("svc", ""), ("method", "a"), ("user", "u1")];
    let b = [("svc", ""), ("method", "b"), ("user", "u<script>")];
    for _ in 0..3 {
        hit(&service, "page", &a, 1).await;
    }
    hit(&service, "page", &b, 1).await;
    hit(&service, "page", &b, 1).await;
    hit(&service, "page", &[("free", "x")], 1).await;
    hit(&service, "page", &[("trial", "t")], 1).await;
    hit(&service, "page", &[("trial", "t")], 1).await;

    // The two method rules share their Prometheus series (same first two levels); the
    // page counts them apart. Unlimited: allowed; shadow: over, though answered OK.
    let expected: BTreeMap<String, (u64, u64)> = [
        ("page.svc.method_a.user", (1, 2)),
        ("page.svc.method_b.user", (1, 1)),
        ("page.free", (1, 0)),
        ("page.trial", (1, 1)),
    ]
    .into_iter()
    .map(|(path, counts)| (path.to_string(), counts))
    .collect();
    assert_eq!(page_counts(&service), expected);

    let metrics = service.metrics().expect("support services count");
    let top: Vec<(String, String, u64)> = metrics
        .refusals()
        .top()
        .into_iter()
        .map(|t| (t.rule.path.to_string(), t.text, t.count))
        .collect();
    assert_eq!(
        top,
        [
            (
                "page.svc.method_a.user".into(),
                "svc=, method=a, user=u1".into(),
                2
            ),
            (
                "page.svc.method_b.user".into(),
                "svc=, method=b, user=u<script>".into(),
                1
            ),
            ("page.trial".into(), "trial=t".into(), 1),
        ]
    );

    // A reload that keeps a rule keeps its counts; a removed rule's are gone.
    let kept = PAGE.replace("  - key: free\n    rate_limit: {unlimited: true}\n", "");
    let config = Config::from_sources(&[("page.yaml".into(), kept)]).expect("valid");
    service.config().store(Arc::new(config));
    let after = page_counts(&service);
    assert_eq!(after.get("page.svc.method_a.user"), Some(&(1, 2)));
    assert_eq!(after.get("page.free"), None);
}

/// `--worker-threads` (or `MESHLIMIT_WORKER_THREADS`) sizes the runtime, whose own count of
/// workers `/metrics` reports; without it, one per CPU; 0 is refused, naming the flag.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn worker_threads_come_from_the_flag_or_environment_and_are_reported() {
    use support::process::{Meshlimit, run_serve, serve_on_loopback};
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("saas.yaml"), TENANTS).unwrap();
    async fn workers(ml: &Meshlimit) -> Option<f64> {
        let (status, text) = support::http_get(ml.http, "/metrics").await;
        assert_eq!(status, 200);
        value(&parse(&text), "meshlimit_worker_threads", &[])
    }

    let ml = Meshlimit::start(dir.path(), &["--worker-threads", "3"]).await;
    assert_eq!(workers(&ml).await, Some(3.0));
    drop(ml);

    let config = dir.path().display().to_string();
    let argv = serve_on_loopback(&config, &["--log", "info"]);
    let ml = Meshlimit::start_with(&argv, &[("MESHLIMIT_WORKER_THREADS", "1")]).await;
    assert_eq!(workers(&ml).await, Some(1.0));
    // The answers still come, from the one worker.
    let request = support::rls_request("saas", &[&[("plan", "a")]]);
    ml.ask(request).await;
    drop(ml);

    let ml = Meshlimit::start(dir.path(), &[]).await;
    let cpus = std::thread::available_parallelism().unwrap().get();
    assert_eq!(workers(&ml).await, Some(cpus as f64));
    drop(ml);

    let out = run_serve(&config, &["--worker-threads", "0"]).await;
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--worker-threads"), "{stderr}");
}

const TOKENS: &str = "
domain: llm
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 1000, charge: always}
  - key: api
    rate_limit: {unit: minute, requests_per_unit: 20}
";

/// Charges count their hits as charged, the part past what the bucket had left as debt,
/// and refunds apart; a rule that does not charge writes none of those series.
#[tokio::test]
async fn charges_refunds_and_debt_are_counted_per_rule() {
    let (service, _clock) = support::service(&[("llm.yaml", TOKENS)], Algorithm::TokenBucket);
    let user = |hits: u64, refund: bool| Descriptor {
        hits_addend: Some(hits),
        refund,
        ..Descriptor::new(&[("user", "alice")])
    };
    // 900 of 1,000, then 300 (200 past what was left), then 50 more (all owed), then
    // 120 back, and a check of nothing.
    for (hits, refund) in [
        (900, false),
        (300, false),
        (50, false),
        (120, true),
        (0, false),
    ] {
        service
            .should_rate_limit(Request::new("llm", &[user(hits, refund)], 0))
            .await
            .expect("a valid request");
    }
    hit(&service, "llm", &[("api", "x")], 1).await;
    let samples = scrape(&service);
    let rule = [("domain", "llm"), ("key1", "user")];
    let count = |stat: &str| value(&samples, &format!("{RULE}{stat}"), &rule);
    assert_eq!(count("charged"), Some(1_250.0));
    assert_eq!(count("debt"), Some(250.0));
    assert_eq!(count("refunded"), Some(120.0));
    assert_eq!(count("total_hits"), Some(1_250.0), "refunds are not hits");
    let api = [("domain", "llm"), ("key1", "api")];
    for stat in ["charged", "debt", "refunded"] {
        assert_eq!(
            value(&samples, &format!("{RULE}{stat}"), &api),
            None,
            "{stat}"
        );
    }
    assert_eq!(
        value(&samples, &format!("{RULE}total_hits"), &api),
        Some(1.0)
    );
}

const HELD: &str = "
domain: llm
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 1000}
    reserve: {ttl: 10s}
  - key: in_flight
    concurrency: {max_in_flight: 2, ttl: 5s}
";

/// Holds released unsettled after their TTL count on their rule's series, the request
/// values' for a detailed rule (within its cap), even when the embedded store's upkeep
/// releases them with no request at hand; a hold's request counts on the overflow once.
#[tokio::test]
async fn holds_released_unsettled_are_counted_per_rule_and_value() {
    let (service, clock) = support::service(&[("llm.yaml", HELD)], Algorithm::TokenBucket);
    let metrics = service.metrics().expect("support services count").clone();
    metrics.set_max_metric_values(2);
    let ask = |entries: &[(&str, &str)], hits: u64| {
        let descriptors = [Descriptor {
            hits_addend: Some(hits),
            ..Descriptor::new(entries)
        }];
        let service = &service;
        async move {
            let request = Request::new("llm", &descriptors, 0);
            service
                .should_rate_limit(request)
                .await
                .expect("a valid request")
        }
    };
    for (user, id) in [
        ("alice", "r1"),
        ("alice", "r2"),
        ("bob", "r1"),
        ("carol", "r1"),
    ] {
        assert!(!ask(&[("user", user), ("hold", id)], 100).await.over_limit);
    }
    ask(&[("user", "alice"), ("settle", "r2")], 100).await;
    assert!(
        !ask(&[("in_flight", "u"), ("hold", "s1")], 1)
            .await
            .over_limit
    );
    let expired = format!("{RULE}expired");
    assert!(series(&scrape(&service), &expired).is_empty());
    clock.advance(Duration::from_secs(11));
    service.store().maintain();
    let samples = scrape(&service);
    let count = |key1: &str| value(&samples, &expired, &[("domain", "llm"), ("key1", key1)]);
    assert_eq!(count("user_alice"), Some(1.0), "r2 was settled");
    assert_eq!(count("user_bob"), Some(1.0));
    assert_eq!(count("user__other_"), Some(1.0), "carol's, past the cap");
    assert_eq!(count("in_flight"), Some(1.0));
    assert_eq!(series(&samples, &expired).len(), 4);
    let overflowed = [("domain", "llm"), ("key1", "user")];
    assert_eq!(
        value(
            &samples,
            "meshlimit_metric_values_overflow_total",
            &overflowed
        ),
        Some(1.0),
        "carol's one request, counted once"
    );
    let text = metrics.render();
    assert!(
        text.contains(
            "# HELP ratelimit_service_rate_limit_expired Holds released unsettled after their TTL on each rule with reserve or concurrency."
        ),
        "{text}"
    );
    let mut stats = BTreeMap::new();
    metrics.go_counters(&mut |name, value| {
        stats.insert(name.to_string(), value);
    });
    assert_eq!(
        stats.get("ratelimit.service.rate_limit.llm.in_flight.expired"),
        Some(&1)
    );
}

/// Callers choose their hits: counters wrap at 2^64 as Go's uint64 counters do, and a
/// scrape sums the parts of a family (within, over, neither) wrapping alike, never
/// overflowing.
#[tokio::test]
async fn hits_near_2_to_the_64_wrap_the_counters_and_a_scrape_still_renders() {
    let (service, _clock) = support::service(&[("shop.yaml", SHOP)], Algorithm::TokenBucket);
    for hits in [u64::MAX, 3] {
        let api = Descriptor {
            hits_addend: Some(hits),
            ..Descriptor::new(&[("api", "x")])
        };
        service
            .should_rate_limit(Request::new("shop", &[api], 0))
            .await
            .expect("a valid request");
    }
    let samples = scrape(&service);
    let api = [("domain", "shop"), ("key1", "api")];
    assert_eq!(
        value(&samples, &format!("{RULE}total_hits"), &api),
        Some(2.0),
        "2^64 + 2 hits, modulo 2^64"
    );
}

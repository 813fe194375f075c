//! Issue 38 §1: the Go server's stats sent to statsd and DogStatsD, through the binary and
//! its gRPC server, to a statsd server the test starts (TCP and UDP) that parses every line.

mod support;

use std::collections::BTreeMap;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::process::Meshlimit;
use support::statsd::StatsdServer;
use support::{eventually, eventually_async, http_get, rls_request};

const SHOP: &str = "
domain: shop
descriptors:
  - key: route
    value: cart
    descriptors:
      - key: user
        rate_limit: {unit: minute, requests_per_unit: 3}
  - key: tier
    value: gold*
    rate_limit: {unit: minute, requests_per_unit: 100}
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

const RULE: &str = "ratelimit.service.rate_limit.";
const REQUESTS: &str = "ratelimit_server.ShouldRateLimit.total_requests";
const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";

/// meshlimit on `SHOP` (fixed windows, as the Go server counts) sending statsd to
/// `server` every 50 ms, with `args`.
async fn start(server: &StatsdServer, args: &[&str]) -> (Meshlimit, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("shop.yaml"), SHOP).unwrap();
    let addr = server.addr.to_string();
    let mut argv = vec![
        "--algorithm",
        "fixed-window",
        "--statsd-addr",
        &addr,
        "--statsd-flush-ms",
        "50",
    ];
    argv.extend_from_slice(args);
    (Meshlimit::start(dir.path(), &argv).await, dir)
}

/// Waits (bounded) until the counter `name` received adds up to at least `at_least`.
async fn counter_reaches(server: &StatsdServer, name: &str, at_least: f64) {
    eventually(20, &format!("{name} reaching {at_least}"), || {
        server.counters().get(name).copied().unwrap_or(0.0) >= at_least
    })
    .await;
}

/// Waits (bounded) until the counters received are `expected`, no more and no fewer:
/// a flush can read a rule's counters before a request's last ones, and the next flush
/// carries them.
async fn counters_become(server: &StatsdServer, expected: &BTreeMap<String, f64>) {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    while server.counters() != *expected && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(
        server.counters(),
        *expected,
        "every counter, and nothing else"
    );
}

/// `meshlimit_statsd_flushes_missed_total` on `/metrics`.
async fn missed(ml: &Meshlimit) -> u64 {
    let (status, text) = http_get(ml.http, "/metrics").await;
    assert_eq!(status, 200);
    text.lines()
        .find_map(|l| l.strip_prefix("meshlimit_statsd_flushes_missed_total "))
        .map_or(0, |v| v.parse().unwrap())
}

/// Per-rule counters under the Go server's names and sanitising, counting hits exactly
/// as `/metrics` does; the service stats; one timer sample per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scripted_sequence_arrives_with_exact_counts_over_tcp() {
    let server = StatsdServer::start(false).await;
    let (ml, _dir) = start(&server, &[]).await;
    let mut answers = Vec::new();
    for _ in 0..5 {
        let request = rls_request("shop", &[&[("route", "cart"), ("user", "u1")]]);
        answers.push(ml.ask(request).await.overall_code);
    }
    let ok = Code::Ok as i32;
    let over = Code::OverLimit as i32;
    assert_eq!(answers, [ok, ok, ok, over, over]);
    for request in [
        rls_request("shop", &[&[("tier", "gold7")]]),
        rls_request("shop", &[&[("tier", "gold:8")]]),
        rls_request("shop", &[&[("client", "10.1.2.3")]]),
        rls_request("shop", &[&[("client", "c2")]]),
        rls_request(
            "shop",
            &[&[("app", "a"), ("build", "b"), ("session", "s1")]],
        ),
        rls_request("ghost", &[&[("k", "v")], &[("k", "w")]]),
    ] {
        ml.ask(request).await;
    }
    // An invalid request (no domain): a service error.
    let mut client = ml.client().await;
    assert!(
        client
            .should_rate_limit(rls_request("", &[]))
            .await
            .is_err()
    );

    counter_reaches(&server, REQUESTS, 12.0).await;
    let route = format!("{RULE}shop.route_cart.user.");
    let mut expected: BTreeMap<String, f64> = [
        // Limit 3, near from 2: hits 1-3 within (the third near), 4-5 over.
        (format!("{route}total_hits"), 5.0),
        (format!("{route}within_limit"), 3.0),
        (format!("{route}near_limit"), 1.0),
        (format!("{route}over_limit"), 2.0),
        // A wildcard counts under its pattern.
        (format!("{RULE}shop.tier_gold*.total_hits"), 2.0),
        (format!("{RULE}shop.tier_gold*.within_limit"), 2.0),
        // Detailed: the request's values, sanitised (IPv4 dots).
        (format!("{RULE}shop.client_10_1_2_3.total_hits"), 1.0),
        (format!("{RULE}shop.client_10_1_2_3.within_limit"), 1.0),
        (format!("{RULE}shop.client_c2.total_hits"), 1.0),
        (format!("{RULE}shop.client_c2.within_limit"), 1.0),
        // value_to_metric on the third level: its value.
        (format!("{RULE}shop.app.build.session_s1.total_hits"), 1.0),
        (format!("{RULE}shop.app.build.session_s1.within_limit"), 1.0),
        (format!("{RULE}ghost.domain_not_found"), 2.0),
        ("ratelimit.service.config_load_success".into(), 1.0),
        (
            "ratelimit.service.call.should_rate_limit.service_error".into(),
            1.0,
        ),
        (REQUESTS.into(), 12.0),
    ]
    .into_iter()
    .collect();
    // Counters that never moved are not sent, as gostats does not.
    counters_become(&server, &expected).await;
    let samples: f64 = server
        .lines()
        .iter()
        .filter(|l| l.name == RESPONSE_TIME)
        .inspect(|l| assert_eq!(l.kind, "ms"))
        .map(|l| l.count())
        .sum();
    assert_eq!(samples.round(), 12.0, "one timer sample per request");

    // Only changes: a request later adds 1 to what was received, not the totals again.
    ml.ask(rls_request("shop", &[&[("tier", "gold7")]])).await;
    counter_reaches(&server, REQUESTS, 13.0).await;
    *expected.get_mut(REQUESTS).unwrap() = 13.0;
    *expected
        .get_mut(&format!("{RULE}shop.tier_gold*.total_hits"))
        .unwrap() = 3.0;
    *expected
        .get_mut(&format!("{RULE}shop.tier_gold*.within_limit"))
        .unwrap() = 3.0;
    counters_become(&server, &expected).await;
    assert_eq!(missed(&ml).await, 0);
}

/// `--statsd-tags` in the names as gostats writes them (sorted, `.` `:` `|` in values
/// made `_`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tags_go_into_the_names_as_gostats_writes_them() {
    let server = StatsdServer::start(false).await;
    let (ml, _dir) = start(&server, &["--statsd-tags", "zone:eu.1,env:prod"]).await;
    ml.ask(rls_request("shop", &[&[("tier", "gold7")]])).await;
    let tags = ".__env=prod.__zone=eu_1";
    counter_reaches(&server, &format!("{REQUESTS}{tags}"), 1.0).await;
    let counters = server.counters();
    let hits = format!("{RULE}shop.tier_gold*.total_hits{tags}");
    assert_eq!(counters.get(&hits), Some(&1.0), "{counters:?}");
    assert!(
        counters.keys().all(|name| name.ends_with(tags)),
        "{counters:?}"
    );
    let timer = server.lines();
    let timer = timer.iter().find(|l| l.kind == "ms").expect("a timer line");
    assert_eq!(timer.name, format!("{RESPONSE_TIME}{tags}"));
}

/// `--dogstatsd` over UDP: the same names, the tags as DogStatsD tags on every line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dogstatsd_over_udp_sends_tags_as_tags() {
    let server = StatsdServer::start(true).await;
    let args = [
        "--statsd-protocol",
        "udp",
        "--dogstatsd",
        "--statsd-tags",
        "env:prod,team:a|b",
    ];
    let (ml, _dir) = start(&server, &args).await;
    ml.ask(rls_request("shop", &[&[("tier", "gold7")]])).await;
    ml.ask(rls_request("shop", &[&[("tier", "gold7")]])).await;
    counter_reaches(&server, REQUESTS, 2.0).await;
    let lines = server.lines();
    assert!(
        lines
            .iter()
            .all(|l| l.tags == ["env:prod", "team:a_b"] && !l.name.contains(".__")),
        "{lines:?}"
    );
    let counters = server.counters();
    assert_eq!(counters[&format!("{RULE}shop.tier_gold*.total_hits")], 2.0);
    let timer: f64 = lines
        .iter()
        .filter(|l| l.name == RESPONSE_TIME)
        .map(|l| l.count())
        .sum();
    assert_eq!(timer.round(), 2.0);
}

/// A statsd server that goes away costs no request anything: its flushes are missed,
/// counted and logged; once it is back the stats resume on a new connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statsd_server_that_goes_away_and_comes_back_over_tcp() {
    goes_away_and_comes_back(false).await;
}

/// The same over UDP: Linux reports the port unreachable on the next datagram, so the
/// flush is counted missed there too, and a new socket sends once the server is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statsd_server_that_goes_away_and_comes_back_over_udp() {
    goes_away_and_comes_back(true).await;
}

async fn goes_away_and_comes_back(udp: bool) {
    let mut server = StatsdServer::start(udp).await;
    let protocol = if udp { "udp" } else { "tcp" };
    let (ml, _dir) = start(&server, &["--statsd-protocol", protocol]).await;
    let hit = || async {
        let answer = ml.ask(rls_request("shop", &[&[("tier", "gold7")]])).await;
        assert_eq!(answer.overall_code, Code::Ok as i32);
    };
    for _ in 0..2 {
        hit().await;
    }
    counter_reaches(&server, REQUESTS, 2.0).await;
    assert_eq!(server.counters()[REQUESTS], 2.0);

    server.stop().await;
    // Requests go on, answered as ever, until a flush is missed: a UDP sender hears of
    // the closed port only on the datagram after the one refused.
    let while_down = std::sync::atomic::AtomicU32::new(0);
    eventually_async(20, "a missed flush", || async {
        hit().await;
        while_down.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        missed(&ml).await >= 1
    })
    .await;
    let while_down = f64::from(while_down.into_inner());
    assert!(
        ml.log().contains("statsd flush missed"),
        "logged:\n{}",
        ml.log()
    );

    server.clear();
    server.restart().await;
    for _ in 0..4 {
        hit().await;
    }
    counter_reaches(&server, REQUESTS, 4.0).await;
    // The 4 sent after the restart, and those made while it was down that were not in
    // a missed flush (made after the last one, they go with the next).
    let resumed = server.counters()[REQUESTS];
    assert!((4.0..=4.0 + while_down).contains(&resumed), "{resumed}");
    let expected: BTreeMap<String, f64> = [
        (REQUESTS.to_string(), resumed),
        (format!("{RULE}shop.tier_gold*.total_hits"), resumed),
        (format!("{RULE}shop.tier_gold*.within_limit"), resumed),
    ]
    .into_iter()
    .collect();
    counters_become(&server, &expected).await;
}

/// A counter that wraps at 2^64 (callers choose their hits) sends its exact change: the
/// hits since the last flush, not nothing.
#[tokio::test]
async fn a_counter_that_wraps_sends_its_exact_change() {
    let server = StatsdServer::start(false).await;
    let (ml, _dir) = start(&server, &[]).await;
    let total = format!("{RULE}shop.tier_gold*.total_hits");
    let tier = |hits: u64| {
        let mut request = rls_request("shop", &[&[("tier", "gold1")]]);
        request.descriptors[0].hits_addend =
            Some(envoy_types::pb::google::protobuf::UInt64Value { value: hits });
        request
    };
    ml.ask(tier(u64::MAX)).await;
    counter_reaches(&server, &total, u64::MAX as f64).await;
    ml.ask(tier(3)).await;
    eventually(20, "the 3 hits past 2^64 in statsd", || {
        let lines = server.lines();
        let sent: Vec<f64> = lines
            .iter()
            .filter(|l| l.name == total)
            .map(|l| l.value)
            .collect();
        sent == [u64::MAX as f64, 3.0]
    })
    .await;
}

//! tests: the mapping format as statsd_exporter v0.26.1 reads and applies it.

use super::parse::parse;
use super::{Mapping, Series, StatKind, parse_for_tests as mapping};

/// Where `stat` goes as a counter: its name and labels, or `None` when dropped.
fn counter(m: &Mapping, stat: &str) -> Option<(String, Vec<(String, String)>)> {
    m.apply(stat, StatKind::Counter)
        .map(|Series { name, labels, .. }| (name, labels))
}

fn named(name: &str, labels: &[(&str, &str)]) -> Option<(String, Vec<(String, String)>)> {
    let labels = labels
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some((name.to_string(), labels))
}

/// The Go server's built-in mapping (envoyproxy/ratelimit's default_mapper.yaml), the same
/// as Envoy Gateway's but for the response time's `scale`.
const EG: &str = include_str!("../../../tests/fixtures/envoy-gateway/statsd_conf.yaml");

#[test]
fn envoy_gateways_file_names_every_go_stat_as_statsd_exporter_does() {
    let m = mapping(EG);
    let hits = "ratelimit_service_rate_limit_total_hits";
    // One level: the globs, `{domain, key1}`.
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.shop.api.total_hits"),
        named(hits, &[("domain", "shop"), ("key1", "api")])
    );
    // Two levels and more: the regexes, `{domain, key1, key2}`, deeper levels folded.
    assert_eq!(
        counter(
            &m,
            "ratelimit.service.rate_limit.shop.api.user_x.total_hits"
        ),
        named(
            hits,
            &[("domain", "shop"), ("key1", "api"), ("key2", "user_x")]
        )
    );
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.shop.a.b.c.d.over_limit"),
        named(
            "ratelimit_service_rate_limit_over_limit",
            &[("domain", "shop"), ("key1", "a"), ("key2", "b")]
        )
    );
    // A value with a dot is cut apart (`path_/a.b` is two components).
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.shop.path_/a.b.total_hits"),
        named(
            hits,
            &[("domain", "shop"), ("key1", "path_/a"), ("key2", "b")]
        )
    );
    // Stats it has no mapping for keep their escaped names.
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.nowhere.domain_not_found"),
        named("ratelimit_service_rate_limit_nowhere_domain_not_found", &[])
    );
    assert_eq!(
        counter(
            &m,
            "ratelimit.service.rate_limit.shop.api.over_limit_with_local_cache"
        ),
        named(
            "ratelimit_service_rate_limit_shop_api_over_limit_with_local_cache",
            &[]
        )
    );
    assert_eq!(
        counter(&m, "ratelimit.service.global_shadow_mode"),
        named("ratelimit_service_global_shadow_mode", &[])
    );
    assert_eq!(
        counter(&m, "ratelimit.service.call.should_rate_limit.redis_error"),
        named(
            "ratelimit_service_should_rate_limit_error",
            &[("err_type", "redis_error")]
        )
    );
    assert_eq!(
        counter(&m, "ratelimit_server.ShouldRateLimit.total_requests"),
        named(
            "ratelimit_service_total_requests",
            &[("grpc_method", "ShouldRateLimit")]
        )
    );
    assert_eq!(
        counter(&m, "ratelimit.service.config_load_success"),
        named("ratelimit_service_config_load_success", &[])
    );
    let timer = m
        .apply(
            "ratelimit_server.ShouldRateLimit.response_time",
            StatKind::Observer,
        )
        .unwrap();
    assert_eq!(timer.name, "ratelimit_service_response_time_seconds");
    assert_eq!(timer.scale, None);
    // `match_metric_type: counter`: the timer of that name is not a counter's.
    assert_eq!(
        m.apply(
            "ratelimit_server.ShouldRateLimit.total_requests",
            StatKind::Observer
        )
        .map(|s| s.name),
        Some("ratelimit_server_ShouldRateLimit_total_requests".into())
    );
    assert!(m.ignored().is_empty(), "{:?}", m.ignored());
}

#[test]
fn every_glob_comes_before_any_regex_whatever_the_file_order() {
    let m = mapping(
        "mappings:\n\
         - match: 'a\\.(.*)'\n  match_type: regex\n  name: by_regex\n  labels: {x1: '$1'}\n\
         - match: a.*\n  name: by_glob\n  labels: {x1: '$1'}\n",
    );
    assert_eq!(counter(&m, "a.b"), named("by_glob", &[("x1", "b")]));
    assert_eq!(counter(&m, "a.b.c"), named("by_regex", &[("x1", "b.c")]));
}

#[test]
fn regexes_are_found_anywhere_in_the_name_and_expand_as_go_does() {
    let m = mapping(
        "mappings:\n\
         - match: 'rate_(\\w+)\\.(?P<stat>[a-z]+)$'\n  match_type: regex\n  name: 'x_${1}'\n  labels: {whole: '$0', bad: '$1x', kept: '$$1', none: '$9', stat: '$stat'}\n",
    );
    let labels = [
        ("bad", ""),
        ("kept", "$1"),
        ("none", ""),
        ("stat", "hits"),
        ("whole", "rate_limit.hits"),
    ];
    assert_eq!(
        counter(&m, "ratelimit.service.rate_limit.hits"),
        named("x_limit", &labels)
    );
    assert_eq!(counter(&m, "no.match.here"), named("no_match_here", &[]));
}

#[test]
fn glob_templates_take_the_nth_star_and_nothing_for_other_references() {
    let m = mapping(
        "mappings:\n- match: 'a.*.b.*'\n  name: 'm_$2'\n  labels: {first: '${1}x', zero: '$0', far: '$3'}\n",
    );
    assert_eq!(
        counter(&m, "a.one.b.two"),
        named("m_two", &[("far", ""), ("first", "onex"), ("zero", "")])
    );
}

#[test]
fn drop_and_metric_types_and_empty_names() {
    let m = mapping(
        "mappings:\n\
         - match: a.*\n  name: dropped\n  action: drop\n\
         - match: t.*\n  name: timers\n  match_metric_type: timer\n\
         - match: c.*\n  name: '$2'\n\
         - match: 'r\\.(.*)'\n  match_type: regex\n  name: regexed\n  match_metric_type: observer\n",
    );
    assert_eq!(counter(&m, "a.x"), None);
    assert_eq!(counter(&m, "t.x"), named("t_x", &[]));
    let timer = m.apply("t.x", StatKind::Observer).map(|s| s.name);
    assert_eq!(timer.as_deref(), Some("timers"));
    // A name that expands to nothing drops the stat.
    assert_eq!(counter(&m, "c.x"), None);
    // A regex of another kind is passed over.
    assert_eq!(counter(&m, "r.x"), named("r_x", &[]));
    let observed = m.apply("r.x", StatKind::Observer).map(|s| s.name);
    assert_eq!(observed.as_deref(), Some("regexed"));
}

#[test]
fn defaults_set_the_match_type_and_the_glob_ordering() {
    let m = mapping(
        "defaults:\n  match_type: regex\n  timer_type: histogram\nmappings:\n- match: 'x(.)'\n  name: 'got_$1'\n",
    );
    assert_eq!(counter(&m, "a.xyz"), named("got_y", &[]));
    let ordered = "mappings:\n- match: a.*.c\n  name: star\n- match: a.b.c\n  name: literal\n";
    assert_eq!(counter(&mapping(ordered), "a.b.c"), named("star", &[]));
    let unordered = format!("defaults:\n  glob_disable_ordering: true\n{ordered}");
    assert_eq!(
        counter(&mapping(&unordered), "a.b.c"),
        named("literal", &[])
    );
}

#[test]
fn help_and_scale_come_with_the_series() {
    let m = mapping("mappings:\n- match: a.*\n  name: n\n  help: Some help.\n  scale: 0.001\n");
    let series = m.apply("a.b", StatKind::Observer).unwrap();
    assert_eq!(
        (series.help, series.scale),
        (Some("Some help."), Some(0.001))
    );
}

#[test]
fn unmatched_names_are_escaped() {
    let m = mapping("");
    assert_eq!(counter(&m, "9lives.a-b:c"), named("_9lives_a_b_c", &[]));
    assert_eq!(
        counter(&mapping("mappings: []\n"), "x.y"),
        named("x_y", &[])
    );
}

#[test]
fn unknown_keys_are_ignored_and_named_with_their_line() {
    let m = mapping(
        "mappings:\n- match: a.b\n  name: n\n  colour: blue\n  ttl: 1m\nextra: 1\ndefaults:\n  quantiles: []\n  speed: 3\n",
    );
    assert_eq!(
        m.ignored(),
        ["line 4: colour", "line 6: extra", "line 9: defaults.speed"]
    );
    assert_eq!(counter(&m, "a.b"), named("n", &[]));
}

#[test]
fn files_that_statsd_exporter_refuses_are_refused_with_their_line() {
    let cases = [
        ("mappings:\n- match: a.b\n  name: [\n", 3, ""),
        ("mappings:\n- match: a.b\n", 2, "no name"),
        (
            "mappings:\n- match: a.b\n  name: 1x\n",
            2,
            "invalid metric name",
        ),
        (
            "mappings:\n- match: a.b\n  name: a.b\n",
            2,
            "invalid metric name",
        ),
        (
            "mappings:\n- match: a.b\n  name: n\n  labels: {x: y}\n",
            2,
            "invalid label name",
        ),
        ("mappings:\n- match: a.b*\n  name: n\n", 2, "invalid glob"),
        ("mappings:\n- match: 1a.b\n  name: n\n", 2, "invalid glob"),
        ("mappings:\n- match: ''\n  name: n\n", 2, "invalid glob"),
        (
            "mappings:\n- match: '('\n  match_type: regex\n  name: n\n",
            2,
            "invalid regex",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  action: keep\n",
            4,
            "invalid action",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  match_type: exact\n",
            4,
            "invalid match type",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  match_metric_type: set\n",
            4,
            "invalid metric type",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  observer_type: h\n",
            4,
            "invalid observer type",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  scale: big\n",
            4,
            "expected a number",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  name: m\n",
            4,
            "duplicate",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  labels: [x]\n",
            4,
            "expected a mapping",
        ),
        (
            "mappings:\n- match: a\n  name: n\n  timer_type: histogram\n  summary_options: {}\n",
            2,
            "summary_options",
        ),
        ("mappings: 3\n", 1, "expected a list"),
        ("- a\n", 1, "expected a mapping"),
    ];
    for (text, line, message) in cases {
        match parse(text) {
            Ok(_) => panic!("accepted:\n{text}"),
            Err((at, why)) => {
                assert_eq!(at, Some(line), "{text}\n{why}");
                assert!(why.contains(message), "{text}\n{why}");
            }
        }
    }
}

/// Cases of statsd_exporter's own mapper tests (v0.26.1), restated: what its mapper
/// gives, this one must.
#[test]
fn statsd_exporters_own_cases() {
    let several = mapping(
        r#"
mappings:
- match: test.dispatcher.*.*.*
  name: "dispatch_events"
  labels: {processor: "$1", action: "$2", result: "$3", job: "test_dispatcher"}
- match: test.my-dispatch-host01.name.dispatcher.*.*.*
  name: "host_dispatch_events"
  labels: {processor: "$1"}
- match: "*.*"
  name: "catchall"
  labels: {first: "$1", second: "$2", third: "$3", job: "$1-$2-$3"}
- match: (.*)\.(.*)-(.*)\.(.*)
  match_type: regex
  name: "proxy_requests_total"
  labels: {job: "$1", protocol: "$2", endpoint: "$3", result: "$4"}
"#,
    );
    assert_eq!(
        counter(&several, "test.dispatcher.FooProcessor.send.succeeded"),
        named(
            "dispatch_events",
            &[
                ("action", "send"),
                ("job", "test_dispatcher"),
                ("processor", "FooProcessor"),
                ("result", "succeeded")
            ]
        )
    );
    assert_eq!(
        counter(
            &several,
            "test.my-dispatch-host01.name.dispatcher.P.send.ok"
        ),
        named("host_dispatch_events", &[("processor", "P")])
    );
    assert_eq!(
        counter(&several, "foo.bar"),
        named(
            "catchall",
            &[
                ("first", "foo"),
                ("job", "foo-bar-"),
                ("second", "bar"),
                ("third", "")
            ]
        )
    );
    assert_eq!(counter(&several, "foo.bar.baz"), named("foo_bar_baz", &[]));
    assert_eq!(
        counter(&several, "proxy-1.http-goober.success"),
        named(
            "proxy_requests_total",
            &[
                ("endpoint", "goober"),
                ("job", "proxy-1"),
                ("protocol", "http"),
                ("result", "success")
            ]
        )
    );

    let unordered_backtracking = mapping(
        "defaults:\n  glob_disable_ordering: true\nmappings:\n\
         - match: backtrack.*.bbb\n  name: testb\n  labels: {label: '${1}_foo'}\n\
         - match: backtrack.justatest.aaa\n  name: testa\n  labels: {label: '${1}_foo'}\n",
    );
    let b = &unordered_backtracking;
    assert_eq!(
        counter(b, "backtrack.good.bbb"),
        named("testb", &[("label", "good_foo")])
    );
    assert_eq!(
        counter(b, "backtrack.justatest.bbb"),
        named("testb", &[("label", "justatest_foo")])
    );
    assert_eq!(
        counter(b, "backtrack.justatest.aaa"),
        named("testa", &[("label", "_foo")])
    );

    let stars = mapping(
        "mappings:\n- match: '*.dummy.*'\n  name: metric_one\n  labels: {system: $1, attribute: $2}\n\
         - match: 'full.name.*'\n  name: metric_two\n  labels: {system: static, attribute: $1}\n",
    );
    assert_eq!(
        counter(&stars, "full.name.anothertest"),
        named(
            "metric_two",
            &[("attribute", "anothertest"), ("system", "static")]
        )
    );

    let supersets = "mappings:\n- match: o.*.*\n  name: testa\n- match: o.*.bbb\n  name: testb\n- match: o.ccc.bbb\n  name: testc\n";
    assert_eq!(
        counter(&mapping(supersets), "o.good.bbb"),
        named("testa", &[])
    );
    let unordered = mapping(&format!(
        "defaults:\n  glob_disable_ordering: true\n{supersets}"
    ));
    assert_eq!(counter(&unordered, "o.good.bbb"), named("testb", &[]));
    assert_eq!(counter(&unordered, "o.ccc.bbb"), named("testc", &[]));

    let dynamic = mapping(
        "mappings:\n- match: test1.*.*\n  name: $1\n- match: test2.*.*\n  name: '${1}_$2'\n\
         - match: 'test3\\.(\\w+)\\.(\\w+)'\n  match_type: regex\n  name: '${2}_$1'\n\
         - match: 'foo--bar.*'\n  name: 'foo_bar_${1}'\n- match: test.99test.myapp.*\n  name: n99\n",
    );
    assert_eq!(
        counter(&dynamic, "test1.total_requests.count"),
        named("total_requests", &[])
    );
    assert_eq!(
        counter(&dynamic, "test2.total_requests.count"),
        named("total_requests_count", &[])
    );
    assert_eq!(
        counter(&dynamic, "test3.total_requests.count"),
        named("count_total_requests", &[])
    );
    assert_eq!(
        counter(&dynamic, "foo--bar.count"),
        named("foo_bar_count", &[])
    );
    assert_eq!(
        counter(&dynamic, "test.99test.myapp.create"),
        named("n99", &[])
    );

    // A YAML alias where a glob was meant, and a glob with other characters: refused.
    assert!(parse("mappings:\n- match: *.test.*\n  name: n\n").is_err());
    assert!(parse("mappings:\n- match: bad!!metric-line.*.*\n  name: foo\n").is_err());
}

//! The translation of the Go server's variables, end to end through [`super::translate`].

use std::collections::HashMap;

use super::*;

fn run(vars: &[(&str, &str)]) -> Result<Translated, String> {
    run_with(vars, false)
}

/// `vars` as meshlimit started with arguments (`false`) or without (`true`).
fn run_with(vars: &[(&str, &str)], without_arguments: bool) -> Result<Translated, String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let names: Vec<String> = map.keys().cloned().collect();
    translate(|name| map.get(name).cloned(), &names, without_arguments)
}

fn args(vars: &[(&str, &str)]) -> String {
    run(vars).unwrap().args.join(" ")
}

#[test]
fn nothing_set_means_nothing_added() {
    assert_eq!(run(&[]).unwrap(), Translated::default());
}

#[test]
fn runtime_directories_and_ports() {
    assert_eq!(
        args(&[
            ("RUNTIME_ROOT", "/data/current"),
            ("RUNTIME_SUBDIRECTORY", "ratelimit"),
            ("GRPC_PORT", "9000"),
            ("PORT", "9001"),
            ("DEBUG_PORT", "9002"),
            ("GRPC_UDS", "/run/ratelimit.sock"),
        ]),
        "--config /data/current/ratelimit/config --grpc-addr 0.0.0.0:9000 \
         --http-addr 0.0.0.0:9001 --debug-addr 0.0.0.0:9002 --grpc-uds /run/ratelimit.sock"
    );
    assert_eq!(
        args(&[
            ("RUNTIME_APPDIRECTORY", "limits"),
            ("HOST", "::1"),
            ("LOG_LEVEL", "Debug")
        ]),
        "--config /srv/runtime_data/current/limits --http-addr [::1]:8080 \
         --log meshlimit=debug,warn"
    );
}

#[test]
fn our_own_variables_win() {
    assert_eq!(
        args(&[
            ("RUNTIME_ROOT", "/a"),
            ("MESHLIMIT_CONFIG", "/b"),
            ("PORT", "1"),
            ("MESHLIMIT_HTTP_ADDR", "127.0.0.1:2"),
            ("GRPC_UDS", "/a.sock"),
            ("MESHLIMIT_GRPC_UDS", "/b.sock"),
        ]),
        ""
    );
}

#[test]
fn redis_urls_for_each_type() {
    let url = |vars: &[(&str, &str)]| {
        let a = args(vars);
        a.strip_prefix("--store redis --redis-url ")
            .unwrap_or(&a)
            .to_string()
    };
    assert_eq!(
        url(&[("REDIS_URL", "/run/redis.sock")]),
        "unix:///run/redis.sock"
    );
    assert_eq!(
        url(&[("REDIS_URL", "/run/redis.sock"), ("REDIS_AUTH", "u:p w")]),
        "unix:///run/redis.sock?user=u&pass=p%20w"
    );
    assert_eq!(
        url(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("REDIS_AUTH", "user:p@ss")
        ]),
        "redis://user:p%40ss@redis:6379"
    );
    assert_eq!(
        url(&[
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", "redis:6379"),
            ("REDIS_AUTH", "secret"),
            ("REDIS_TLS", "true"),
            ("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION", "true"),
        ]),
        "rediss://:secret@redis:6379#insecure"
    );
    assert_eq!(
        url(&[("REDIS_TYPE", "CLUSTER"), ("REDIS_URL", "a:1,b:2")]),
        "redis+cluster://a:1,b:2"
    );
    assert_eq!(
        url(&[
            ("REDIS_TYPE", "sentinel"),
            ("REDIS_URL", "mymaster,s1:26379,s2:26379"),
            ("REDIS_SENTINEL_AUTH", "sp"),
        ]),
        "redis+sentinel://s1:26379,s2:26379/mymaster?sentinel_password=sp"
    );
    assert!(run(&[("REDIS_TYPE", "ring"), ("REDIS_URL", "a:1")]).is_err());
    assert!(run(&[("REDIS_TYPE", "sentinel"), ("REDIS_URL", "a:1")]).is_err());
}

#[test]
fn redis_tls_files_need_redis_tls_and_come_in_pairs() {
    let url = [
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", "r:6380"),
        ("REDIS_TLS", "true"),
    ];
    let files = [
        ("REDIS_TLS_CACERT", "/tls/ca.pem"),
        ("REDIS_TLS_CLIENT_CERT", "/tls/c.pem"),
        ("REDIS_TLS_CLIENT_KEY", "/tls/c.key"),
    ];
    assert_eq!(
        args(&[&url[..], &files[..]].concat()),
        "--store redis --redis-url rediss://r:6380 --redis-tls-ca /tls/ca.pem \
         --redis-tls-cert /tls/c.pem --redis-tls-key /tls/c.key"
    );
    // Without REDIS_TLS, the files are named as ignored, as the Go server ignores them.
    let plain = run(&[&url[..2], &files[..]].concat()).unwrap();
    assert_eq!(
        plain.args.join(" "),
        "--store redis --redis-url redis://r:6380"
    );
    assert_eq!(plain.unsupported.len(), 3, "{:?}", plain.unsupported);
    // A certificate without its key is not used.
    let half = run(&[&url[..], &files[1..2]].concat()).unwrap();
    assert_eq!(
        half.args.join(" "),
        "--store redis --redis-url rediss://r:6380"
    );
    assert!(half.unsupported[0].starts_with("REDIS_TLS_CLIENT_CERT (ignored"));
}

#[test]
fn key_prefix_and_expiration_jitter_in_milliseconds() {
    assert_eq!(
        args(&[("CACHE_KEY_PREFIX", "staging:")]),
        "--redis-key-prefix staging:"
    );
    assert_eq!(
        args(&[("EXPIRATION_JITTER_MAX_SECONDS", "300")]),
        "--redis-expiry-jitter-ms 300000"
    );
    assert_eq!(
        args(&[("EXPIRATION_JITTER_MAX_SECONDS", "-5")]),
        "--redis-expiry-jitter-ms 0"
    );
    assert!(run(&[("EXPIRATION_JITTER_MAX_SECONDS", "5m")]).is_err());
    assert_eq!(
        args(&[
            ("EXPIRATION_JITTER_MAX_SECONDS", "300"),
            ("MESHLIMIT_REDIS_EXPIRY_JITTER_MS", "1")
        ]),
        ""
    );
}

#[test]
fn behaviour_switches() {
    assert_eq!(
        args(&[
            ("LOG_LEVEL", "WARNING"),
            ("LOG_FORMAT", "JSON"),
            ("SHADOW_MODE", "true"),
            ("QUOTA_MODE", "true"),
            ("LIMIT_RESPONSE_HEADERS_ENABLED", "1"),
            ("MERGE_DOMAIN_CONFIG", "true"),
            ("RESPONSE_DYNAMIC_METADATA", "True"),
            ("LIMIT_RESET_HEADER", "X-Reset"),
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":9191"),
        ]),
        "--metrics-addr 0.0.0.0:9191 --log warn --log-format json --shadow-mode \
         --quota-mode --response-headers --merge-domain-config --response-dynamic-metadata \
         --reset-header X-Reset"
    );
    assert_eq!(
        args(&[
            ("SHADOW_MODE", "false"),
            ("QUOTA_MODE", "false"),
            ("MERGE_DOMAIN_CONFIG", "false"),
            ("USE_PROMETHEUS", "no")
        ]),
        ""
    );
}

#[test]
fn the_mapper_file_is_the_metrics_mapping_with_prometheus_only() {
    let file = ("PROMETHEUS_MAPPER_YAML", "/etc/statsd-exporter/conf.yaml");
    assert_eq!(
        args(&[
            ("USE_PROMETHEUS", "true"),
            ("PROMETHEUS_ADDR", ":19001"),
            file
        ]),
        "--metrics-addr 0.0.0.0:19001 --metrics-mapping /etc/statsd-exporter/conf.yaml"
    );
    // The Go server reads it only for its Prometheus sink.
    assert_eq!(args(&[file]), "");
    assert_eq!(args(&[("USE_PROMETHEUS", "false"), file]), "");
    // Ours wins.
    assert_eq!(
        args(&[
            ("USE_PROMETHEUS", "true"),
            ("MESHLIMIT_METRICS_ADDR", "127.0.0.1:1"),
            ("MESHLIMIT_METRICS_MAPPING", "/mine.yaml"),
            file,
        ]),
        ""
    );
}

#[test]
fn unsupported_variables_are_named() {
    let t = run(&[
        ("REDIS_PERSECOND", "true"),
        ("DOG_STATSD_MOGRIFIER_HITS_PATTERN", "x"),
        ("USE_DOG_STATSD", "false"),
        ("REDIS_POOL_SIZE", "20"),
        ("CONFIG_GRPC_XDS_SERVER_URL", "x:1"),
        ("BACKEND_TYPE", "redis"),
    ])
    .unwrap();
    let names: Vec<&str> = t
        .unsupported
        .iter()
        .map(|u| u.split(' ').next().unwrap())
        .collect();
    assert_eq!(names.len(), 4, "{:?}", t.unsupported);
    for name in [
        "REDIS_PERSECOND",
        "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
        "REDIS_POOL_SIZE",
        "CONFIG_GRPC_XDS_SERVER_URL",
    ] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }
    assert!(run(&[("CONFIG_TYPE", "GRPC_XDS_DELTA")]).is_err());
    assert!(run(&[("BACKEND_TYPE", "memcache")]).is_err());
}

#[test]
fn grpc_tls_and_connection_ages() {
    assert_eq!(
        args(&[
            ("GRPC_SERVER_USE_TLS", "true"),
            ("GRPC_SERVER_TLS_CERT", "/tls/cert.pem"),
            ("GRPC_SERVER_TLS_KEY", "/tls/key.pem"),
            ("GRPC_CLIENT_TLS_CACERT", "/tls/ca.pem"),
            ("GRPC_CLIENT_TLS_SAN", "envoy.mesh"),
            ("GRPC_MAX_CONNECTION_AGE", "1h"),
            ("GRPC_MAX_CONNECTION_AGE_GRACE", "30s"),
        ]),
        "--grpc-max-connection-age-ms 3600000 --grpc-max-connection-age-grace-ms 30000 \
         --grpc-tls-cert /tls/cert.pem --grpc-tls-key /tls/key.pem \
         --grpc-client-ca /tls/ca.pem --grpc-client-san envoy.mesh"
    );
    // An age alone gets the Go server's default grace (1 h).
    assert_eq!(
        args(&[("GRPC_MAX_CONNECTION_AGE", "10m")]),
        "--grpc-max-connection-age-ms 600000 --grpc-max-connection-age-grace-ms 3600000"
    );
    // Without GRPC_SERVER_USE_TLS the files are ignored, as by the Go server.
    let ignored = run(&[("GRPC_SERVER_TLS_CERT", "/tls/cert.pem")]).unwrap();
    assert!(ignored.args.is_empty());
    assert_eq!(ignored.unsupported.len(), 1);
    assert!(run(&[("GRPC_SERVER_USE_TLS", "true")]).is_err());
    assert!(run(&[("GRPC_MAX_CONNECTION_AGE", "1 day")]).is_err());
}

#[test]
fn xds_source_and_its_settings() {
    assert_eq!(
        args(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]),
        "--xds-server localhost:18000"
    );
    assert_eq!(
        args(&[
            ("CONFIG_TYPE", "grpc_xds_sotw"),
            ("RUNTIME_ROOT", "/ignored"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "cp:18001"),
            ("CONFIG_GRPC_XDS_NODE_ID", "rl-1"),
            ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=a,bare,team=x=y"),
            (
                "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
                "x-token:abc, x-b:c:d"
            ),
            ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "250ms"),
            ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "2s"),
            ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "0.25"),
            ("XDS_CLIENT_BACKOFF_JITTER", "false"),
            ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "1048576"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED", "true"),
        ]),
        "--start-without-config --unhealthy-without-config --xds-server cp:18001 \
         --xds-node-id rl-1 --xds-node-metadata zone=a,team=x=y \
         --xds-headers x-token=abc,x-b=c:d --xds-backoff-initial-ms 250 \
         --xds-backoff-max-ms 2000 --xds-backoff-random-factor 0.25 \
         --xds-backoff-jitter false --xds-max-msg-bytes 1048576"
    );
    // The connect retry interval is the first wait when the backoff's is not set.
    assert_eq!(
        args(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL", "3s"),
        ]),
        "--xds-server localhost:18000 --xds-backoff-initial-ms 3000"
    );
    for bad in [
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "10"),
        ("XDS_CLIENT_BACKOFF_RANDOM_FACTOR", "2"),
        ("XDS_CLIENT_BACKOFF_JITTER", "maybe"),
        ("XDS_CLIENT_MAX_MSG_SIZE_IN_BYTES", "4MB"),
        ("CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS", "novalue"),
    ] {
        assert!(
            run(&[("CONFIG_TYPE", "GRPC_XDS_SOTW"), bad]).is_err(),
            "{bad:?}"
        );
    }
}

#[test]
fn xds_tls_only_with_use_tls() {
    assert_eq!(
        args(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "cp:443"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/tls/ca.pem"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/tls/c.pem"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_KEY", "/tls/c.key"),
            ("CONFIG_GRPC_XDS_SERVER_TLS_SAN", "cp.mesh"),
        ]),
        "--xds-server cp:443 --xds-tls --xds-tls-ca /tls/ca.pem --xds-tls-cert /tls/c.pem \
         --xds-tls-key /tls/c.key --xds-tls-san cp.mesh"
    );
    let without = run(&[
        ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
        ("CONFIG_GRPC_XDS_SERVER_TLS_CACERT", "/tls/ca.pem"),
    ])
    .unwrap();
    assert_eq!(without.args.join(" "), "--xds-server localhost:18000");
    assert_eq!(without.unsupported.len(), 1, "{:?}", without.unsupported);
    assert!(
        run(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_USE_TLS", "true"),
            ("CONFIG_GRPC_XDS_CLIENT_TLS_CERT", "/tls/c.pem"),
        ])
        .is_err()
    );
}

#[test]
fn xds_variables_yield_to_ours_and_to_files() {
    assert_eq!(
        args(&[
            ("CONFIG_TYPE", "GRPC_XDS_SOTW"),
            ("CONFIG_GRPC_XDS_SERVER_URL", "cp:1"),
            ("MESHLIMIT_XDS_SERVER", "cp:2"),
            ("CONFIG_GRPC_XDS_NODE_ID", "go"),
            ("MESHLIMIT_XDS_NODE_ID", "ours"),
            ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
            ("MESHLIMIT_START_WITHOUT_CONFIG", "false"),
        ]),
        ""
    );
    // meshlimit's own --config wins over the whole xDS source.
    assert_eq!(
        args(&[("CONFIG_TYPE", "GRPC_XDS_SOTW"), ("MESHLIMIT_CONFIG", "/c")]),
        ""
    );
    // Without CONFIG_TYPE=GRPC_XDS_SOTW the xDS variables are ignored, and said to be.
    let files = run(&[
        ("CONFIG_GRPC_XDS_NODE_ID", "x"),
        ("XDS_CLIENT_BACKOFF_JITTER", "false"),
        ("FORCE_START_WITHOUT_INITIAL_CONFIG", "true"),
    ])
    .unwrap();
    assert_eq!(files.args.join(" "), "--start-without-config");
    assert_eq!(files.unsupported.len(), 2, "{:?}", files.unsupported);
    assert!(
        files
            .unsupported
            .iter()
            .all(|u| u.contains("CONFIG_TYPE=GRPC_XDS_SOTW"))
    );
}

#[test]
fn statsd_is_on_by_default_only_in_drop_in_mode() {
    let go_env = [("REDIS_URL", "redis:6379")];
    let statsd = "--statsd-addr localhost:8125";
    // Started without arguments in a Go environment: the Go server's default.
    let bare = run_with(&go_env, true).unwrap().args.join(" ");
    assert!(bare.ends_with(statsd), "{bare}");
    // With arguments, or without any Go variable: off unless asked for.
    assert!(
        !run_with(&go_env, false)
            .unwrap()
            .args
            .join(" ")
            .contains("statsd")
    );
    assert_eq!(run_with(&[], true).unwrap(), Translated::default());
    // Asked for with arguments too.
    assert_eq!(args(&[("USE_STATSD", "true")]), statsd);
    // Off when said so, when stats are disabled, and with Prometheus (the Go server
    // refuses both sinks at once).
    for off in [
        [("USE_STATSD", "false"), ("REDIS_URL", "redis:6379")],
        [("DISABLE_STATS", "true"), ("USE_STATSD", "true")],
        [("USE_PROMETHEUS", "true"), ("REDIS_URL", "redis:6379")],
    ] {
        let args = run_with(&off, true).unwrap().args.join(" ");
        assert!(!args.contains("statsd"), "{off:?}: {args}");
    }
}

#[test]
fn statsd_host_port_interval_and_tags() {
    assert_eq!(
        args(&[
            ("USE_STATSD", "true"),
            ("STATSD_HOST", "stats.local"),
            ("STATSD_PORT", "9125"),
            ("STATS_FLUSH_INTERVAL", "1m30s"),
            ("EXTRA_TAGS", "env:prod,team:edge"),
        ]),
        "--statsd-addr stats.local:9125 --statsd-flush-ms 90000 \
         --statsd-tags env:prod,team:edge"
    );
    assert_eq!(
        args(&[("USE_STATSD", "1"), ("STATSD_HOST", "::1")]),
        "--statsd-addr [::1]:8125"
    );
    assert!(run(&[("USE_STATSD", "true"), ("STATS_FLUSH_INTERVAL", "10")]).is_err());
    assert!(run(&[("USE_STATSD", "true"), ("STATS_FLUSH_INTERVAL", "0s")]).is_err());
}

#[test]
fn dog_statsd_speaks_udp_and_our_variables_win() {
    assert_eq!(
        args(&[("USE_DOG_STATSD", "true"), ("USE_STATSD", "false")]),
        "--statsd-addr localhost:8125 --dogstatsd --statsd-protocol udp"
    );
    assert_eq!(
        args(&[
            ("USE_DOG_STATSD", "true"),
            ("MESHLIMIT_STATSD_ADDR", "127.0.0.1:1"),
            ("MESHLIMIT_DOGSTATSD", "false"),
            ("MESHLIMIT_STATSD_PROTOCOL", "tcp"),
            ("STATS_FLUSH_INTERVAL", "5s"),
            ("MESHLIMIT_STATSD_FLUSH_MS", "100"),
            ("EXTRA_TAGS", "a:b"),
            ("MESHLIMIT_STATSD_TAGS", "c:d"),
        ]),
        ""
    );
}

#[test]
fn tracing_variables_become_the_tracing_flags() {
    assert_eq!(
        args(&[
            ("TRACING_ENABLED", "true"),
            ("TRACING_EXPORTER_PROTOCOL", "grpc"),
            ("TRACING_SERVICE_NAME", "rl"),
            ("TRACING_SERVICE_NAMESPACE", "edge"),
            ("TRACING_SERVICE_INSTANCE_ID", "pod-1"),
            ("TRACING_SAMPLING_RATE", "0.1"),
        ]),
        "--tracing --tracing-protocol grpc --tracing-service-name rl \
         --tracing-service-namespace edge --tracing-service-instance-id pod-1 \
         --tracing-sampling-rate 0.1"
    );
    // The Go server exports over HTTP unless told grpc, whatever OTEL_* says.
    assert_eq!(
        args(&[
            ("TRACING_ENABLED", "true"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        ]),
        "--tracing --tracing-protocol http"
    );
    assert_eq!(args(&[("TRACING_ENABLED", "false")]), "");
    let translated = run(&[("TRACING_ENABLED", "true")]).unwrap();
    assert!(translated.unsupported.is_empty(), "{translated:?}");
    // meshlimit's own variables win over the Go ones.
    assert_eq!(
        args(&[
            ("TRACING_ENABLED", "true"),
            ("MESHLIMIT_TRACING", "false"),
            ("TRACING_SERVICE_NAME", "rl"),
            ("MESHLIMIT_TRACING_SERVICE_NAME", "ours"),
            ("MESHLIMIT_TRACING_PROTOCOL", "grpc"),
        ]),
        ""
    );
}

//! Drop-in for envoyproxy/ratelimit: its environment variables (§1.10, §3, §4 of the
//! behaviour reference) as `meshlimit serve` flags.
//!
//! [`translate`] turns what it finds into arguments placed before the command line's
//! own, so flags given on the command line win, then `MESHLIMIT_*` variables (a Go
//! variable is not used when its `MESHLIMIT_*` twin is set), then the Go variables, then
//! meshlimit's defaults. Variables meshlimit does not support are returned by name with
//! the reason, for one startup warning.

mod go_duration;
mod grpc_server;

/// The Go server's config location when no variable says otherwise:
/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`.
pub const DEFAULT_RUNTIME_ROOT: &str = "/srv/runtime_data/current";
/// See [`DEFAULT_RUNTIME_ROOT`].
pub const DEFAULT_APP_DIRECTORY: &str = "config";

/// What the environment says, as flags and warnings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Translated {
    /// Flags for `meshlimit serve`, to go before the command line's own.
    pub args: Vec<String>,
    /// Set variables meshlimit ignores, each with why.
    pub unsupported: Vec<String>,
}

/// Go variables meshlimit does not act on, with why. Booleans are named with the value
/// that matters: `USE_STATSD=true` warns, `USE_STATSD=false` does not.
const UNSUPPORTED: &[(&str, Option<bool>, &str)] = &[
    (
        "USE_STATSD",
        Some(true),
        "statsd is not supported; scrape /metrics",
    ),
    (
        "USE_DOG_STATSD",
        Some(true),
        "statsd is not supported; scrape /metrics",
    ),
    (
        "STATSD_HOST",
        None,
        "statsd is not supported; scrape /metrics",
    ),
    (
        "STATSD_PORT",
        None,
        "statsd is not supported; scrape /metrics",
    ),
    (
        "DISABLE_STATS",
        Some(true),
        "metrics are always on at /metrics",
    ),
    (
        "STATS_FLUSH_INTERVAL",
        None,
        "Prometheus metrics are read when scraped",
    ),
    (
        "EXTRA_TAGS",
        None,
        "add labels in the Prometheus scrape config",
    ),
    ("GRPC_UDS", None, "gRPC listens on TCP only"),
    (
        "MERGE_DOMAIN_CONFIG",
        Some(true),
        "a domain in two files is an error",
    ),
    (
        "FORCE_START_WITHOUT_INITIAL_CONFIG",
        Some(true),
        "meshlimit starts only with a valid config",
    ),
    ("QUOTA_MODE", Some(true), "set quota_mode per descriptor"),
    (
        "RESPONSE_DYNAMIC_METADATA",
        Some(true),
        "no dynamic metadata is returned",
    ),
    (
        "EXPIRATION_JITTER_MAX_SECONDS",
        None,
        "Redis keys expire exactly when their bucket is full again",
    ),
    (
        "CACHE_KEY_PREFIX",
        None,
        "meshlimit's Redis keys are `ml1:{<domain>}<bucket>`",
    ),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        Some(true),
        "token buckets never consume on a denied request; fixed windows count every hit",
    ),
    ("REDIS_PERSECOND", Some(true), "one Redis holds every unit"),
    (
        "REDIS_POOL_SIZE",
        None,
        "one multiplexed connection per Redis node",
    ),
    (
        "REDIS_POOL_ON_EMPTY_BEHAVIOR",
        None,
        "one multiplexed connection per Redis node",
    ),
    (
        "REDIS_PIPELINE_WINDOW",
        None,
        "requests are pipelined on the connection as they come",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        None,
        "requests are pipelined on the connection as they come",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        None,
        "one script call per request",
    ),
    (
        "REDIS_TIMEOUT",
        None,
        "use MESHLIMIT_REDIS_TIMEOUT_MS, a per-request bound",
    ),
    (
        "REDIS_TLS_CLIENT_CERT",
        None,
        "client certificates are not supported",
    ),
    (
        "REDIS_TLS_CLIENT_KEY",
        None,
        "client certificates are not supported",
    ),
    (
        "REDIS_TLS_CACERT",
        None,
        "the system's root certificates are used",
    ),
    (
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION",
        Some(true),
        "health follows Redis answering",
    ),
    (
        "REDIS_STARTUP_INITIAL_INTERVAL",
        None,
        "meshlimit starts at once and reconnects in the background",
    ),
    (
        "REDIS_STARTUP_MAX_INTERVAL",
        None,
        "meshlimit starts at once and reconnects in the background",
    ),
    (
        "REDIS_STARTUP_MAX_ELAPSED_TIME",
        None,
        "meshlimit starts at once and reconnects in the background",
    ),
    (
        "TRACING_ENABLED",
        Some(true),
        "OpenTelemetry tracing is not supported",
    ),
];

/// Prefixes of whole families of unsupported variables.
const UNSUPPORTED_PREFIXES: &[(&str, &str)] = &[
    ("CONFIG_GRPC_XDS_", "config comes from files only"),
    ("XDS_CLIENT_", "config comes from files only"),
    ("MEMCACHE_", "memcache is not supported"),
    ("REDIS_PERSECOND_", "one Redis holds every unit"),
];

/// Go's `strconv.ParseBool`.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Reads the Go server's variables through `var` (the process environment in `main`,
/// a map in tests) and `names` (every variable name set, for the prefix families).
///
/// # Errors
/// A variable the Go server would also refuse: `CONFIG_TYPE` other than `FILE`, a
/// `BACKEND_TYPE` of memcache, an unknown `REDIS_TYPE` or `REDIS_SOCKET_TYPE`, a
/// duration that is not one, `GRPC_SERVER_USE_TLS=true` without a certificate and key.
pub fn translate(
    var: impl Fn(&str) -> Option<String>,
    names: &[String],
) -> Result<Translated, String> {
    let set = |name: &str| var(name).filter(|v| !v.is_empty());
    let ours = |name: &str| var(name).is_some();
    let flag = |name: &str| set(name).and_then(|v| parse_bool(&v)).unwrap_or(false);
    let mut out = Translated::default();
    let mut push = |args: &[&str]| out.args.extend(args.iter().map(|s| s.to_string()));

    if let Some(kind) = set("CONFIG_TYPE")
        && !kind.eq_ignore_ascii_case("FILE")
    {
        return Err(format!("CONFIG_TYPE={kind}: only FILE is supported"));
    }
    if let Some(backend) = set("BACKEND_TYPE")
        && !backend.eq_ignore_ascii_case("redis")
    {
        return Err(format!("BACKEND_TYPE={backend}: only redis is supported"));
    }

    let runtime = [
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
    ];
    if !ours("MESHLIMIT_CONFIG") && runtime.iter().any(|n| set(n).is_some()) {
        push(&["--config", &runtime_config_path(&set)]);
    }
    if !ours("MESHLIMIT_GRPC_ADDR") && (set("GRPC_HOST").is_some() || set("GRPC_PORT").is_some()) {
        push(&[
            "--grpc-addr",
            &address(set("GRPC_HOST"), set("GRPC_PORT"), "8081"),
        ]);
    }
    if !ours("MESHLIMIT_HTTP_ADDR") && (set("HOST").is_some() || set("PORT").is_some()) {
        push(&["--http-addr", &address(set("HOST"), set("PORT"), "8080")]);
    }
    if !ours("MESHLIMIT_DEBUG_ADDR") && (set("DEBUG_HOST").is_some() || set("DEBUG_PORT").is_some())
    {
        push(&[
            "--debug-addr",
            &address(set("DEBUG_HOST"), set("DEBUG_PORT"), "6070"),
        ]);
    }
    if flag("USE_PROMETHEUS") {
        if !ours("MESHLIMIT_METRICS_ADDR") {
            let addr = set("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
            let addr = match addr.strip_prefix(':') {
                Some(port) => format!("0.0.0.0:{port}"),
                None => addr,
            };
            push(&["--metrics-addr", &addr]);
        }
        if let Some(path) = set("PROMETHEUS_PATH")
            && !ours("MESHLIMIT_METRICS_PATH")
        {
            push(&["--metrics-path", &path]);
        }
    }
    if let Some(url) = set("REDIS_URL")
        && !ours("MESHLIMIT_STORE")
        && !ours("MESHLIMIT_REDIS_URL")
    {
        push(&[
            "--store",
            "redis",
            "--redis-url",
            &redis_url(&url, &set, &flag)?,
        ]);
    }
    if let Some(level) = set("LOG_LEVEL")
        && !ours("MESHLIMIT_LOG")
    {
        // logrus levels; fatal and panic have no tracing twin. The level is the server's
        // own: the libraries under it (hyper, h2, tonic) stay at warn, as Go's do.
        let level = match level.to_ascii_lowercase().as_str() {
            "warning" | "warn" => "warn".to_string(),
            "fatal" | "panic" | "error" => "error".to_string(),
            other => format!("meshlimit={other},warn"),
        };
        push(&["--log", &level]);
    }
    if let Some(format) = set("LOG_FORMAT")
        && !ours("MESHLIMIT_LOG_FORMAT")
    {
        push(&["--log-format", &format.to_ascii_lowercase()]);
    }
    if flag("SHADOW_MODE") && !ours("MESHLIMIT_SHADOW_MODE") {
        push(&["--shadow-mode"]);
    }
    if flag("LIMIT_RESPONSE_HEADERS_ENABLED") && !ours("MESHLIMIT_RESPONSE_HEADERS") {
        push(&["--response-headers"]);
    }
    for (go, ours_name, flag_name) in [
        (
            "LIMIT_LIMIT_HEADER",
            "MESHLIMIT_LIMIT_HEADER",
            "--limit-header",
        ),
        (
            "LIMIT_REMAINING_HEADER",
            "MESHLIMIT_REMAINING_HEADER",
            "--remaining-header",
        ),
        (
            "LIMIT_RESET_HEADER",
            "MESHLIMIT_RESET_HEADER",
            "--reset-header",
        ),
        (
            "NEAR_LIMIT_RATIO",
            "MESHLIMIT_NEAR_LIMIT_RATIO",
            "--near-limit-ratio",
        ),
    ] {
        if let Some(value) = set(go)
            && !ours(ours_name)
        {
            push(&[flag_name, &value]);
        }
    }

    let grpc = grpc_server::translate(&set, &ours, flag("GRPC_SERVER_USE_TLS"))?;
    out.args.extend(grpc.args);
    out.unsupported.extend(grpc.ignored);

    for &(name, when, why) in UNSUPPORTED {
        let Some(value) = set(name) else { continue };
        if when.is_none_or(|w| parse_bool(&value) == Some(w)) {
            out.unsupported.push(format!("{name} ({why})"));
        }
    }
    for name in names {
        if UNSUPPORTED.iter().any(|(n, ..)| n == name) || set(name).is_none() {
            continue;
        }
        if let Some((_, why)) = UNSUPPORTED_PREFIXES
            .iter()
            .find(|(p, _)| name.starts_with(p))
        {
            out.unsupported.push(format!("{name} ({why})"));
        }
    }
    Ok(out)
}

/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, with the Go defaults.
pub fn runtime_config_path(set: &impl Fn(&str) -> Option<String>) -> String {
    let root = set("RUNTIME_ROOT").unwrap_or_else(|| DEFAULT_RUNTIME_ROOT.into());
    let mut path = std::path::PathBuf::from(root);
    if let Some(sub) = set("RUNTIME_SUBDIRECTORY") {
        path.push(sub);
    }
    path.push(set("RUNTIME_APPDIRECTORY").unwrap_or_else(|| DEFAULT_APP_DIRECTORY.into()));
    path.display().to_string()
}

fn address(host: Option<String>, port: Option<String>, default_port: &str) -> String {
    let host = host.unwrap_or_else(|| "0.0.0.0".into());
    let port = port.unwrap_or_else(|| default_port.into());
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}") // an IPv6 literal
    } else {
        format!("{host}:{port}")
    }
}

/// The Go server's `REDIS_*` settings as one meshlimit Redis URL.
fn redis_url(
    url: &str,
    set: &impl Fn(&str) -> Option<String>,
    flag: &impl Fn(&str) -> bool,
) -> Result<String, String> {
    // Already a URL: take it as it is.
    if url.contains("://") {
        return Ok(url.to_string());
    }
    let master_auth = credentials(set("REDIS_AUTH"));
    let auth = master_auth
        .as_ref()
        .map_or(String::new(), |(user, password)| {
            format!("{user}:{password}@")
        });
    let tls = flag("REDIS_TLS");
    let insecure = if tls && flag("REDIS_TLS_SKIP_HOSTNAME_VERIFICATION") {
        "#insecure"
    } else {
        ""
    };
    let s = if tls { "s" } else { "" };
    let kind = set("REDIS_TYPE").unwrap_or_else(|| "single".into());
    match kind.to_ascii_lowercase().as_str() {
        "single" => {
            let socket = set("REDIS_SOCKET_TYPE").unwrap_or_else(|| "unix".into());
            match socket.to_ascii_lowercase().as_str() {
                "tcp" => Ok(format!("redis{s}://{auth}{url}{insecure}")),
                "unix" => {
                    let query = auth_query(master_auth.as_ref(), "user", "pass");
                    Ok(format!("unix://{url}{query}"))
                }
                other => Err(format!("REDIS_SOCKET_TYPE={other}: expected tcp or unix")),
            }
        }
        "cluster" => Ok(format!("redis{s}+cluster://{auth}{url}{insecure}")),
        "sentinel" => {
            // `master,host:port,host:port`.
            let (master, hosts) = url.split_once(',').ok_or(
                "REDIS_TYPE=sentinel: REDIS_URL must be master-name,host:port[,host:port...]",
            )?;
            let query = auth_query(
                credentials(set("REDIS_SENTINEL_AUTH")).as_ref(),
                "sentinel_username",
                "sentinel_password",
            );
            Ok(format!(
                "redis{s}+sentinel://{auth}{hosts}/{master}{query}{insecure}"
            ))
        }
        other => Err(format!(
            "REDIS_TYPE={other}: expected single, sentinel or cluster"
        )),
    }
}

/// A Go `*_AUTH` value, `password` or `user:password`, as (user, password), each
/// percent-encoded; the user may be empty.
fn credentials(value: Option<String>) -> Option<(String, String)> {
    let value = value?;
    let (user, password) = value.split_once(':').unwrap_or(("", &value));
    Some((escape(user), escape(password)))
}

/// `?<user_key>=U&<pass_key>=P` (the user left out when empty), or nothing.
fn auth_query(credentials: Option<&(String, String)>, user_key: &str, pass_key: &str) -> String {
    match credentials {
        None => String::new(),
        Some((user, password)) if user.is_empty() => format!("?{pass_key}={password}"),
        Some((user, password)) => format!("?{user_key}={user}&{pass_key}={password}"),
    }
}

/// Percent-encodes what cannot stand in a URL's user info or query.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn run(vars: &[(&str, &str)]) -> Result<Translated, String> {
        let map: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let names: Vec<String> = map.keys().cloned().collect();
        translate(|name| map.get(name).cloned(), &names)
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
            ]),
            "--config /data/current/ratelimit/config --grpc-addr 0.0.0.0:9000 \
             --http-addr 0.0.0.0:9001 --debug-addr 0.0.0.0:9002"
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
    fn behaviour_switches() {
        assert_eq!(
            args(&[
                ("LOG_LEVEL", "WARNING"),
                ("LOG_FORMAT", "JSON"),
                ("SHADOW_MODE", "true"),
                ("LIMIT_RESPONSE_HEADERS_ENABLED", "1"),
                ("LIMIT_RESET_HEADER", "X-Reset"),
                ("USE_PROMETHEUS", "true"),
                ("PROMETHEUS_ADDR", ":9191"),
            ]),
            "--metrics-addr 0.0.0.0:9191 --log warn --log-format json --shadow-mode \
             --response-headers --reset-header X-Reset"
        );
        assert_eq!(
            args(&[("SHADOW_MODE", "false"), ("USE_PROMETHEUS", "no")]),
            ""
        );
    }

    #[test]
    fn unsupported_variables_are_named() {
        let t = run(&[
            ("USE_STATSD", "true"),
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
        assert_eq!(names.len(), 3, "{:?}", t.unsupported);
        for name in [
            "USE_STATSD",
            "REDIS_POOL_SIZE",
            "CONFIG_GRPC_XDS_SERVER_URL",
        ] {
            assert!(names.contains(&name), "{name} in {names:?}");
        }
        assert!(run(&[("CONFIG_TYPE", "GRPC_XDS_SOTW")]).is_err());
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
}

//! Drop-in for envoyproxy/ratelimit: its environment variables (§1.10, §3, §4 of the
//! behaviour reference) as `meshlimit serve` flags.
//!
//! [`translate`] turns what it finds into arguments placed before the command line's
//! own, so flags given on the command line win, then `MESHLIMIT_*` variables (a Go
//! variable is not used when its `MESHLIMIT_*` twin is set), then the Go variables, then
//! meshlimit's defaults. Variables meshlimit does not support are returned by name with
//! the reason, for one startup warning.

pub(crate) mod go_duration;
mod grpc_server;
mod redis_tls;
mod redis_url;
mod statsd;
#[cfg(test)]
mod tests;
mod tracing;
mod unsupported;
mod xds;

use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};

use crate::defaults;
use redis_url::redis_url;

/// The Go server's `DEBUG_HOST` and `DEBUG_PORT` defaults, for when only one is set
/// (meshlimit has no debug address unless one is given).
const GO_DEBUG_ADDR: SocketAddr = SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 6070));

/// What the environment says, as flags and warnings.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Translated {
    /// Flags for `meshlimit serve`, to go before the command line's own.
    pub args: Vec<String>,
    /// Set variables meshlimit ignores, each with why.
    pub unsupported: Vec<String>,
}

/// Go's `strconv.ParseBool`.
fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

/// Reads the Go server's variables through `var` (the process environment in `main`,
/// a map in tests) and `names` (every variable name set, for the prefix families);
/// `started_as_go`: meshlimit was started as the Go image's `ENTRYPOINT` starts the Go
/// server, with no arguments or as `ratelimit` (with any Go variable set, that is
/// drop-in mode, where `USE_STATSD` defaults to true as in the Go server).
///
/// # Errors
/// A variable the Go server would also refuse: `CONFIG_TYPE` other than `FILE` or
/// `GRPC_XDS_SOTW`, an xDS variable that is not what it should be (a duration, a
/// boolean, a number, headers as `k:v`, a client certificate without its key), a
/// `BACKEND_TYPE` of memcache, an unknown `REDIS_TYPE` or `REDIS_SOCKET_TYPE`, a
/// duration that is not one, `GRPC_SERVER_USE_TLS=true` without a certificate and key.
pub fn translate(
    var: impl Fn(&str) -> Option<String>,
    names: &[String],
    started_as_go: bool,
) -> Result<Translated, String> {
    let mut env = Env {
        var,
        args: Vec::new(),
    };
    refuse_other_sources(&env)?;
    addresses(&mut env);
    prometheus(&mut env);
    store(&mut env)?;
    logging(&mut env);
    behaviour(&mut env);

    let set = |name: &str| env.set(name);
    let ours = |name: &str| env.ours(name);
    let grpc = grpc_server::translate(&set, &ours, env.flag("GRPC_SERVER_USE_TLS"))?;
    let xds = xds::translate(&set, &ours, names)?;
    let redis_tls = redis_tls::translate(&set, &ours, env.flag("REDIS_TLS"));
    let tracing = tracing::translate(&set, &ours, env.flag("TRACING_ENABLED"));
    let mut unsupported = grpc.ignored;
    unsupported.extend(xds.ignored);
    unsupported.extend(redis_tls.ignored);
    unsupported.extend(unsupported::named(&set, names));
    let go_set = !env.args.is_empty()
        || !grpc.args.is_empty()
        || !xds.args.is_empty()
        || !unsupported.is_empty()
        || statsd_vars_set(&set);
    let stats = statsd::translate(&set, &ours, started_as_go && go_set)?;
    let mut args = env.args;
    args.extend(grpc.args);
    args.extend(xds.args);
    args.extend(redis_tls.args);
    args.extend(stats);
    args.extend(tracing);
    Ok(Translated { args, unsupported })
}

/// The variables, as the translation reads them, and the flags it has made so far.
struct Env<V> {
    /// Reads one variable (`None`: not set).
    var: V,
    /// Flags for `serve`, in the order they are made.
    args: Vec<String>,
}

impl<V: Fn(&str) -> Option<String>> Env<V> {
    /// The variable's value, if set and not empty (the Go server ignores empty values).
    fn set(&self, name: &str) -> Option<String> {
        (self.var)(name).filter(|v| !v.is_empty())
    }

    /// Whether a `MESHLIMIT_*` variable is set at all: then it wins over its Go twin.
    fn ours(&self, name: &str) -> bool {
        (self.var)(name).is_some()
    }

    /// A Go boolean variable; unset or not a boolean is false.
    fn flag(&self, name: &str) -> bool {
        self.set(name).and_then(|v| parse_bool(&v)).unwrap_or(false)
    }

    /// Appends `args` to the flags made so far.
    fn push(&mut self, args: &[&str]) {
        self.args.extend(args.iter().map(|s| s.to_string()));
    }
}

/// Whether a Go stats variable is set: with the others, what tells a Go environment
/// (those that map to nothing, such as `USE_STATSD=false`, count too).
fn statsd_vars_set(set: &impl Fn(&str) -> Option<String>) -> bool {
    [
        "USE_STATSD",
        "USE_DOG_STATSD",
        "USE_PROMETHEUS",
        "STATSD_HOST",
        "STATSD_PORT",
        "DISABLE_STATS",
        "STATS_FLUSH_INTERVAL",
        "EXTRA_TAGS",
    ]
    .iter()
    .any(|name| set(name).is_some())
}

/// Config and rate-limit backends meshlimit does not have: files or xDS, and Redis only.
fn refuse_other_sources(env: &Env<impl Fn(&str) -> Option<String>>) -> Result<(), String> {
    if let Some(kind) = env.set("CONFIG_TYPE")
        && !kind.eq_ignore_ascii_case("FILE")
        && !xds::is_xds(&|name| env.set(name))
    {
        return Err(format!(
            "CONFIG_TYPE={kind}: only FILE and GRPC_XDS_SOTW are supported"
        ));
    }
    if let Some(backend) = env.set("BACKEND_TYPE")
        && !backend.eq_ignore_ascii_case("redis")
    {
        return Err(format!("BACKEND_TYPE={backend}: only redis is supported"));
    }
    Ok(())
}

/// `--config` from `RUNTIME_*` (unless the config comes from xDS); the gRPC, HTTP and
/// debug addresses from `*HOST`, `*PORT`.
fn addresses(env: &mut Env<impl Fn(&str) -> Option<String>>) {
    let runtime = [
        "RUNTIME_ROOT",
        "RUNTIME_SUBDIRECTORY",
        "RUNTIME_APPDIRECTORY",
    ];
    let files = !xds::is_xds(&|name| env.set(name));
    if files && !env.ours("MESHLIMIT_CONFIG") && runtime.iter().any(|n| env.set(n).is_some()) {
        let path = runtime_config_path(&|name| env.set(name));
        env.push(&["--config", &path]);
    }
    for (host, port, ours, flag, default) in [
        (
            "GRPC_HOST",
            "GRPC_PORT",
            "MESHLIMIT_GRPC_ADDR",
            "--grpc-addr",
            defaults::GRPC_ADDR,
        ),
        (
            "HOST",
            "PORT",
            "MESHLIMIT_HTTP_ADDR",
            "--http-addr",
            defaults::HTTP_ADDR,
        ),
        (
            "DEBUG_HOST",
            "DEBUG_PORT",
            "MESHLIMIT_DEBUG_ADDR",
            "--debug-addr",
            GO_DEBUG_ADDR,
        ),
    ] {
        let (host, port) = (env.set(host), env.set(port));
        if !env.ours(ours) && (host.is_some() || port.is_some()) {
            env.push(&[flag, &address(host, port, default)]);
        }
    }
    // The Go server listens there instead of GRPC_HOST:GRPC_PORT, as --grpc-uds does.
    if let Some(path) = env.set("GRPC_UDS")
        && !env.ours("MESHLIMIT_GRPC_UDS")
    {
        env.push(&["--grpc-uds", &path]);
    }
}

/// `--metrics-addr`, `--metrics-path` and `--metrics-mapping`, with `USE_PROMETHEUS=true`
/// only (the Go server reads its `PROMETHEUS_*` variables only then).
fn prometheus(env: &mut Env<impl Fn(&str) -> Option<String>>) {
    if !env.flag("USE_PROMETHEUS") {
        return;
    }
    if !env.ours("MESHLIMIT_METRICS_ADDR") {
        let addr = env.set("PROMETHEUS_ADDR").unwrap_or_else(|| ":9090".into());
        let addr = match addr.strip_prefix(':') {
            Some(port) => format!("0.0.0.0:{port}"),
            None => addr,
        };
        env.push(&["--metrics-addr", &addr]);
    }
    if let Some(path) = env.set("PROMETHEUS_PATH")
        && !env.ours("MESHLIMIT_METRICS_PATH")
    {
        env.push(&["--metrics-path", &path]);
    }
    if let Some(path) = env.set("PROMETHEUS_MAPPER_YAML")
        && !env.ours("MESHLIMIT_METRICS_MAPPING")
    {
        env.push(&["--metrics-mapping", &path]);
    }
}

/// `--store redis` and its URL from `REDIS_URL` and the `REDIS_*` variables around it.
fn store(env: &mut Env<impl Fn(&str) -> Option<String>>) -> Result<(), String> {
    if let Some(url) = env.set("REDIS_URL")
        && !env.ours("MESHLIMIT_STORE")
        && !env.ours("MESHLIMIT_REDIS_URL")
    {
        let url = redis_url(&url, &|name| env.set(name), &|name| env.flag(name))?;
        env.push(&["--store", "redis", "--redis-url", &url]);
    }
    if let Some(prefix) = env.set("CACHE_KEY_PREFIX")
        && !env.ours("MESHLIMIT_REDIS_KEY_PREFIX")
    {
        env.push(&["--redis-key-prefix", &prefix]);
    }
    // Whole seconds in the Go server; 0 or less adds none there either. Not its default
    // of 300 s when unset: meshlimit deletes a full token bucket instead of leaving it to
    // expire, and keys whose TTL is a tenth of a second would live minutes for nothing.
    if let Some(seconds) = env.set("EXPIRATION_JITTER_MAX_SECONDS")
        && !env.ours("MESHLIMIT_REDIS_EXPIRY_JITTER_MS")
    {
        let seconds: i64 = seconds.trim().parse().map_err(|_| {
            format!("EXPIRATION_JITTER_MAX_SECONDS={seconds:?} is not a whole number of seconds")
        })?;
        let ms = u64::try_from(seconds).unwrap_or(0).saturating_mul(1000);
        env.push(&["--redis-expiry-jitter-ms", &ms.to_string()]);
    }
    Ok(())
}

/// `--log` from `LOG_LEVEL`, `--log-format` from `LOG_FORMAT`.
fn logging(env: &mut Env<impl Fn(&str) -> Option<String>>) {
    if let Some(level) = env.set("LOG_LEVEL")
        && !env.ours("MESHLIMIT_LOG")
    {
        // logrus levels; fatal and panic have no tracing twin. The level is the server's
        // own: the libraries under it (hyper, h2, tonic) stay at warn, as Go's do.
        let level = match level.to_ascii_lowercase().as_str() {
            "warning" | "warn" => "warn".to_string(),
            "fatal" | "panic" | "error" => "error".to_string(),
            other => format!("meshlimit={other},warn"),
        };
        env.push(&["--log", &level]);
    }
    if let Some(format) = env.set("LOG_FORMAT")
        && !env.ours("MESHLIMIT_LOG_FORMAT")
    {
        env.push(&["--log-format", &format.to_ascii_lowercase()]);
    }
}

/// Shadow and quota modes, the response headers and their names, the near-limit ratio.
fn behaviour(env: &mut Env<impl Fn(&str) -> Option<String>>) {
    for (go, ours, flag) in [
        ("SHADOW_MODE", "MESHLIMIT_SHADOW_MODE", "--shadow-mode"),
        ("QUOTA_MODE", "MESHLIMIT_QUOTA_MODE", "--quota-mode"),
        (
            "LIMIT_RESPONSE_HEADERS_ENABLED",
            "MESHLIMIT_RESPONSE_HEADERS",
            "--response-headers",
        ),
        (
            "MERGE_DOMAIN_CONFIG",
            "MESHLIMIT_MERGE_DOMAIN_CONFIG",
            "--merge-domain-config",
        ),
        (
            "RESPONSE_DYNAMIC_METADATA",
            "MESHLIMIT_RESPONSE_DYNAMIC_METADATA",
            "--response-dynamic-metadata",
        ),
    ] {
        if env.flag(go) && !env.ours(ours) {
            env.push(&[flag]);
        }
    }
    for (go, ours, flag) in [
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
        if let Some(value) = env.set(go)
            && !env.ours(ours)
        {
            env.push(&[flag, &value]);
        }
    }
}

/// `RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/RUNTIME_APPDIRECTORY`, with the Go defaults.
pub fn runtime_config_path(set: &impl Fn(&str) -> Option<String>) -> String {
    let root = set("RUNTIME_ROOT").unwrap_or_else(|| defaults::RUNTIME_ROOT.into());
    let mut path = std::path::PathBuf::from(root);
    if let Some(sub) = set("RUNTIME_SUBDIRECTORY") {
        path.push(sub);
    }
    path.push(
        set("RUNTIME_APPDIRECTORY").unwrap_or_else(|| defaults::RUNTIME_APP_DIRECTORY.into()),
    );
    path.display().to_string()
}

/// `host:port`, either part defaulting to `default`'s. meshlimit's default addresses are
/// the Go server's, so that a `GRPC_HOST` without `GRPC_PORT` gets the Go server's port.
fn address(host: Option<String>, port: Option<String>, default: SocketAddr) -> String {
    let host = host.unwrap_or_else(|| default.ip().to_string());
    let port = port.unwrap_or_else(|| default.port().to_string());
    join_host_port(&host, &port)
}

/// `host:port`, an IPv6 literal in brackets.
fn join_host_port(host: &str, port: &str) -> String {
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}") // an IPv6 literal
    } else {
        format!("{host}:{port}")
    }
}

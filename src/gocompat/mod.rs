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
mod redis_url;
#[cfg(test)]
mod tests;
mod unsupported;

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
            &address(set("GRPC_HOST"), set("GRPC_PORT"), defaults::GRPC_ADDR),
        ]);
    }
    if !ours("MESHLIMIT_HTTP_ADDR") && (set("HOST").is_some() || set("PORT").is_some()) {
        push(&[
            "--http-addr",
            &address(set("HOST"), set("PORT"), defaults::HTTP_ADDR),
        ]);
    }
    if !ours("MESHLIMIT_DEBUG_ADDR") && (set("DEBUG_HOST").is_some() || set("DEBUG_PORT").is_some())
    {
        push(&[
            "--debug-addr",
            &address(set("DEBUG_HOST"), set("DEBUG_PORT"), GO_DEBUG_ADDR),
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

    out.unsupported.extend(unsupported::named(&set, names));
    Ok(out)
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
    if host.contains(':') && !host.starts_with('[') {
        format!("[{host}]:{port}") // an IPv6 literal
    } else {
        format!("{host}:{port}")
    }
}

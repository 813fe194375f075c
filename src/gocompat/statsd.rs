//! The Go server's stats sink variables: `USE_STATSD`, `USE_DOG_STATSD`, `STATSD_HOST`,
//! `STATSD_PORT`, `DISABLE_STATS`, `STATS_FLUSH_INTERVAL`, `EXTRA_TAGS`, as the
//! `--statsd-*` flags.
//!
//! The Go server's `USE_STATSD` defaults to true: a Go deployment that sets nothing sends
//! statsd to `localhost:8125`. That default holds here only in drop-in mode, meshlimit
//! started without arguments (as the Go image's `ENTRYPOINT` is) in an environment that
//! sets any of the Go server's variables; elsewhere statsd is off unless asked for. It also
//! yields to `USE_PROMETHEUS=true`, with which the Go server refuses to start unless
//! `USE_STATSD=false`. `USE_DOG_STATSD=true` speaks DogStatsD over UDP, as the Go
//! server's datadog-go client does; `DISABLE_STATS=true` wins over both.

use super::grpc_server::millis;
use super::parse_bool;

/// The Go server's `STATSD_HOST` and `STATSD_PORT` defaults.
const GO_HOST: &str = "localhost";
const GO_PORT: &str = "8125";

/// The flags the variables ask for, read through `set` (non-empty values) and `ours`
/// (whether a `MESHLIMIT_*` variable is set, which then wins); `drop_in`: whether
/// `USE_STATSD` defaults to true.
///
/// # Errors
/// `STATS_FLUSH_INTERVAL` is not a Go duration, or is zero.
pub(super) fn translate(
    set: &impl Fn(&str) -> Option<String>,
    ours: &impl Fn(&str) -> bool,
    drop_in: bool,
) -> Result<Vec<String>, String> {
    let flag = |name: &str| set(name).and_then(|v| parse_bool(&v));
    let mut args: Vec<String> = Vec::new();
    let mut push = |flag: &str, value: Option<String>| {
        args.push(flag.to_string());
        args.extend(value);
    };
    if flag("DISABLE_STATS") == Some(true) {
        return Ok(args);
    }
    let dog = flag("USE_DOG_STATSD") == Some(true);
    let default = drop_in && flag("USE_PROMETHEUS") != Some(true);
    if !dog && !flag("USE_STATSD").unwrap_or(default) {
        return Ok(args);
    }
    if !ours("MESHLIMIT_STATSD_ADDR") {
        let host = set("STATSD_HOST").unwrap_or_else(|| GO_HOST.into());
        let port = set("STATSD_PORT").unwrap_or_else(|| GO_PORT.into());
        push("--statsd-addr", Some(super::join_host_port(&host, &port)));
    }
    if dog && !ours("MESHLIMIT_DOGSTATSD") {
        push("--dogstatsd", None);
    }
    if dog && !ours("MESHLIMIT_STATSD_PROTOCOL") {
        push("--statsd-protocol", Some("udp".into()));
    }
    if let Some(interval) = set("STATS_FLUSH_INTERVAL")
        && !ours("MESHLIMIT_STATSD_FLUSH_MS")
    {
        let ms = millis("STATS_FLUSH_INTERVAL", &interval)?;
        if ms == 0 {
            return Err("STATS_FLUSH_INTERVAL: must be at least 1ms".into());
        }
        push("--statsd-flush-ms", Some(ms.to_string()));
    }
    if let Some(tags) = set("EXTRA_TAGS")
        && !ours("MESHLIMIT_STATSD_TAGS")
    {
        push("--statsd-tags", Some(tags));
    }
    Ok(args)
}

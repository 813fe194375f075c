//! The value types of the command line's flags, and the parsers of its checked values.
//!
//! The enums are `pub(crate)` with undocumented variants on purpose: clap would show a
//! variant's doc comment in `--help`, which lists only the names.

use std::time::Duration;

use clap::ValueEnum;

use crate::rules::Algorithm;
use crate::store::redis::FailurePolicy;

/// `--log-format`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum LogFormat {
    Text,
    Json,
}

/// `--store`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum StoreKind {
    Memory,
    Redis,
}

/// `--statsd-protocol`.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum StatsdProtocol {
    Tcp,
    Udp,
}

impl From<StatsdProtocol> for crate::statsd::Protocol {
    fn from(protocol: StatsdProtocol) -> Self {
        match protocol {
            StatsdProtocol::Tcp => Self::Tcp,
            StatsdProtocol::Udp => Self::Udp,
        }
    }
}

/// `--statsd-addr`: `host:port`, the host a name or an address (IPv6 in brackets),
/// resolved at each connection.
pub(super) fn host_port(text: &str) -> Result<String, String> {
    let bad = || format!("{text:?} is not host:port");
    let (host, port) = text.rsplit_once(':').ok_or_else(bad)?;
    let bracketed = host.starts_with('[') && host.ends_with(']');
    if host.is_empty() || (host.contains(':') && !bracketed) || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(text.to_string())
}

/// `--statsd-tags`: `key:value` pairs, parsed as the flag is read.
#[derive(Debug, Clone)]
pub(crate) struct StatsdTags(pub(crate) Vec<(String, String)>);

/// Parses `--statsd-tags` (see [`crate::statsd::parse_tags`]).
pub(super) fn statsd_tags(text: &str) -> Result<StatsdTags, String> {
    crate::statsd::parse_tags(text).map(StatsdTags)
}

/// `--redis-failure`, the flag's spelling of [`FailurePolicy`].
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum FailureArg {
    Error,
    Allow,
    Local,
}

impl From<FailureArg> for FailurePolicy {
    fn from(arg: FailureArg) -> Self {
        match arg {
            FailureArg::Error => FailurePolicy::Error,
            FailureArg::Allow => FailurePolicy::Allow,
            FailureArg::Local => FailurePolicy::Local,
        }
    }
}

/// `--ratelimit-headers`: `draft` adds the IETF draft's `RateLimit-Policy` and
/// `RateLimit` fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum RateLimitHeadersArg {
    Off,
    Draft,
}

/// `--rlqs-unmatched`: how quota buckets matching no rule are answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub(crate) enum UnmatchedArg {
    Allow,
    Deny,
}

impl From<UnmatchedArg> for crate::rlqs::Unmatched {
    fn from(arg: UnmatchedArg) -> Self {
        match arg {
            UnmatchedArg::Allow => Self::Allow,
            UnmatchedArg::Deny => Self::Deny,
        }
    }
}

/// `--algorithm`, the flag's spelling of [`Algorithm`].
#[derive(Debug, Clone, Copy, ValueEnum)]
pub(crate) enum AlgorithmArg {
    TokenBucket,
    FixedWindow,
    SlidingWindow,
}

impl From<AlgorithmArg> for Algorithm {
    fn from(arg: AlgorithmArg) -> Self {
        match arg {
            AlgorithmArg::TokenBucket => Algorithm::TokenBucket,
            AlgorithmArg::FixedWindow => Algorithm::FixedWindow,
            AlgorithmArg::SlidingWindow => Algorithm::SlidingWindow,
        }
    }
}

impl From<Algorithm> for AlgorithmArg {
    fn from(algorithm: Algorithm) -> Self {
        match algorithm {
            Algorithm::TokenBucket => AlgorithmArg::TokenBucket,
            Algorithm::FixedWindow => AlgorithmArg::FixedWindow,
            Algorithm::SlidingWindow => AlgorithmArg::SlidingWindow,
        }
    }
}

/// A default duration as the flags write it, in whole milliseconds.
pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Operator paths the token guards: a metrics path, which is served without the token,
/// must not take one of them (or the operator page's files and data, under `/page/`).
const GUARDED_PATHS: [&str; 4] = ["/json", "/rlconfig", "/explain", "/rlqs"];

/// A plain URL path: `/` and then letters, digits, `/`, `-`, `_`, `.`; not one of the
/// token-guarded operator paths.
pub(super) fn metrics_path(text: &str) -> Result<String, String> {
    let plain = text.starts_with('/')
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/-_.".contains(&b));
    if !plain {
        return Err(format!("{text:?} is not a plain path such as /metrics"));
    }
    if GUARDED_PATHS.contains(&text) || text.starts_with("/page/") {
        return Err(format!(
            "{text:?} is an operator endpoint's path; the metrics need one of their own"
        ));
    }
    Ok(text.to_string())
}

/// A whole number of at least 1.
pub(super) fn at_least_one(text: &str) -> Result<usize, String> {
    match text.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(n),
        _ => Err(format!("{text:?} is not a whole number of at least 1")),
    }
}

/// A share between 0 and 1.
pub(super) fn ratio(text: &str) -> Result<f32, String> {
    match text.parse::<f32>() {
        Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
        _ => Err(format!("{text:?} is not a number from 0 to 1")),
    }
}

/// One `--give-back-from` value, checked: `anyone`, `loopback`, `none` or `san:<name>`.
pub(crate) fn give_back_source(value: &str) -> Result<String, String> {
    crate::net::GiveBack::parse(&[value.to_string()])
        .map(|_| value.to_string())
        .map_err(|e| e.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statsd_addresses_are_host_and_port() {
        for ok in [
            "localhost:8125",
            "10.0.0.1:1",
            "[::1]:8125",
            "stats.svc.local:9125",
        ] {
            assert_eq!(host_port(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "localhost",
            ":8125",
            "::1:8125",
            "host:port",
            "host:70000",
            "",
        ] {
            assert!(host_port(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_metrics_path_is_plain_and_not_a_guarded_endpoints() {
        for ok in ["/metrics", "/stats/prometheus", "/", "/healthcheck"] {
            assert_eq!(metrics_path(ok).as_deref(), Ok(ok));
        }
        for bad in [
            "metrics",
            "/a b",
            "/json",
            "/explain",
            "/page/state.json",
            "/page/app.js",
        ] {
            assert!(metrics_path(bad).is_err(), "{bad}");
        }
    }
}

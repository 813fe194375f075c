//! The Go server's variables that meshlimit does not act on, each with why, for the one
//! warning `serve` logs at startup.

use super::parse_bool;

/// Go variables meshlimit does not act on, with why. Booleans are named with the value
/// that matters: `REDIS_PERSECOND=true` warns, `REDIS_PERSECOND=false` does not.
const UNSUPPORTED: &[(&str, Option<bool>, &str)] = &[
    (
        "USE_DOG_STATSD_MOGRIFIERS",
        None,
        "DogStatsD stats keep the Go server's names, with the --statsd-tags as tags",
    ),
    (
        "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
        Some(true),
        "token buckets never consume on a denied request; fixed windows count every hit",
    ),
    ("REDIS_PERSECOND", Some(true), "one Redis holds every unit"),
    (
        "GRPC_SERVER_TLS_CA_CERT",
        None,
        "the Go server does not read it either (Envoy Gateway sets it): client certificates are asked for with GRPC_CLIENT_TLS_CACERT",
    ),
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
        "requests waiting for a Redis node go together in its next script call; see MESHLIMIT_REDIS_CALLS_IN_FLIGHT",
    ),
    (
        "REDIS_PIPELINE_LIMIT",
        None,
        "requests waiting for a Redis node go together in its next script call; see MESHLIMIT_REDIS_CALLS_IN_FLIGHT",
    ),
    (
        "REDIS_CLUSTER_PIPELINE_PARALLELISM",
        None,
        "a script call decides a batch of one slot's requests; see MESHLIMIT_REDIS_CALLS_IN_FLIGHT",
    ),
    (
        "REDIS_TIMEOUT",
        None,
        "use MESHLIMIT_REDIS_TIMEOUT_MS, a per-request bound",
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
];

/// Prefixes of whole families of unsupported variables.
const UNSUPPORTED_PREFIXES: &[(&str, &str)] = &[
    ("MEMCACHE_", "memcache is not supported"),
    ("REDIS_PERSECOND_", "one Redis holds every unit"),
    (
        "DOG_STATSD_MOGRIFIER_",
        "DogStatsD stats keep the Go server's names, with the --statsd-tags as tags",
    ),
];

/// Every set variable of `names` (or of the table) that meshlimit ignores, as
/// `NAME (why)`; `set` reads a variable's non-empty value.
pub(super) fn named(set: &impl Fn(&str) -> Option<String>, names: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    for &(name, when, why) in UNSUPPORTED {
        let Some(value) = set(name) else { continue };
        if when.is_none_or(|w| parse_bool(&value) == Some(w)) {
            out.push(format!("{name} ({why})"));
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
            out.push(format!("{name} ({why})"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{UNSUPPORTED, UNSUPPORTED_PREFIXES};

    /// docs/migrating.md lists every variable the startup warning can name, so that a user
    /// reading it sees each one's status before switching.
    #[test]
    fn every_ignored_variable_is_in_the_migration_guide() {
        let guide = include_str!("../../docs/migrating.md");
        let missing: Vec<&str> = UNSUPPORTED
            .iter()
            .map(|&(name, ..)| name)
            .chain(UNSUPPORTED_PREFIXES.iter().map(|&(prefix, _)| prefix))
            .filter(|name| !guide.contains(&format!("`{name}")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/migrating.md does not name {missing:?}"
        );
    }
}

//! How to reach Redis and how to use it: [`RedisOptions`], with what to answer when Redis
//! cannot decide ([`FailurePolicy`]) and where the scripts read the time ([`TimeSource`]).

use std::path::PathBuf;
use std::time::Duration;

use super::conn;
use crate::defaults;

/// What to answer when Redis cannot decide (down, or slower than the timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// gRPC `UNAVAILABLE`, so that Envoy's `failure_mode_deny` decides.
    Error,
    /// OK for every descriptor.
    Allow,
    /// Each replica decides alone with an embedded store until Redis is back.
    Local,
}

impl FailurePolicy {
    /// The policy as `--redis-failure` names it.
    pub fn name(self) -> &'static str {
        match self {
            FailurePolicy::Error => "error",
            FailurePolicy::Allow => "allow",
            FailurePolicy::Local => "local",
        }
    }
}

/// Where the scripts read the time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeSource {
    /// Redis' own clock (`TIME` in the script): the only choice for a real deployment.
    Redis,
    /// The `now` the caller passes: for tests that drive a manual clock against a real
    /// Redis.
    Caller,
}

/// How to reach Redis and how to use it. `Debug` shows the URL without its password.
#[derive(Clone)]
pub struct RedisOptions {
    /// `redis://`, `rediss://`, `unix://`, `redis+cluster://` or `redis+sentinel://` URL.
    pub url: String,
    /// Longest any request waits on Redis, connecting included.
    pub timeout: Duration,
    /// What to answer when Redis cannot decide.
    pub failure: FailurePolicy,
    /// Tokens a replica leases beyond a request's own (0: every decision in Redis).
    pub lease: u32,
    /// How long unused leased tokens stay usable.
    pub lease_ttl: Duration,
    /// Entries in each local cache (over-limit snapshots, leases).
    pub cache_size: u64,
    /// Longest an over-limit snapshot answers for its bucket.
    pub cache_ttl: Duration,
    /// Where the time comes from.
    pub time: TimeSource,
    /// Buckets the embedded fallback store holds ([`FailurePolicy::Local`]).
    pub fallback_buckets: u64,
    /// Bytes the embedded fallback store holds ([`FailurePolicy::Local`]).
    pub fallback_bytes: u64,
    /// Script calls each node has in flight at most, of those its measured round trip
    /// pays (see the `calls_allowed` module); requests arriving meanwhile wait and go
    /// together in the next call. At least 1.
    pub calls_in_flight: usize,
    /// Requests of token buckets only go to the specialised script (`decide_buckets.lua`);
    /// `false` sends every request to the general one, for tests that compare the two.
    pub specialised: bool,
    /// Each key written lives up to this much longer, at random (the Go server's
    /// `EXPIRATION_JITTER_MAX_SECONDS`), so that keys of one fixed window do not all
    /// expire at its end. Whole milliseconds; zero: none.
    pub expiry_jitter: Duration,
    /// PEM files for TLS connections (a `rediss` URL) beyond the system's roots.
    pub tls: RedisTlsFiles,
    /// What every key starts with, before meshlimit's own `ml1:` (the Go server's
    /// `CACHE_KEY_PREFIX`): deployments sharing one Redis keep apart, and Redis ACLs can
    /// grant exactly these keys. Empty by default.
    pub key_prefix: String,
}

/// PEM files for TLS to Redis (`--redis-tls-ca`, `--redis-tls-cert`, `--redis-tls-key`):
/// read once, when the store is made.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTlsFiles {
    /// CA certificates the servers' certificates must chain to, instead of the system's
    /// roots.
    pub ca: Option<PathBuf>,
    /// A client certificate and its key, for servers that ask for one (mutual TLS).
    pub client: Option<(PathBuf, PathBuf)>,
}

impl std::fmt::Debug for RedisOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisOptions")
            .field("url", &conn::redact(&self.url))
            .field("timeout", &self.timeout)
            .field("failure", &self.failure)
            .field("lease", &self.lease)
            .field("lease_ttl", &self.lease_ttl)
            .field("cache_size", &self.cache_size)
            .field("cache_ttl", &self.cache_ttl)
            .field("time", &self.time)
            .field("fallback_buckets", &self.fallback_buckets)
            .field("fallback_bytes", &self.fallback_bytes)
            .field("calls_in_flight", &self.calls_in_flight)
            .field("specialised", &self.specialised)
            .field("expiry_jitter", &self.expiry_jitter)
            .field("tls", &self.tls)
            .field("key_prefix", &self.key_prefix)
            .finish()
    }
}

impl RedisOptions {
    /// Defaults for `url`: 100 ms timeout, `error` policy, no leases, 100k cached entries,
    /// [`defaults::REDIS_CALLS_IN_FLIGHT`] script calls in flight per node, the specialised
    /// script on.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            timeout: defaults::REDIS_TIMEOUT,
            failure: FailurePolicy::Error,
            lease: defaults::REDIS_LEASE,
            lease_ttl: defaults::REDIS_LEASE_TTL,
            cache_size: defaults::REDIS_CACHE_SIZE,
            cache_ttl: defaults::REDIS_CACHE_TTL,
            time: TimeSource::Redis,
            fallback_buckets: defaults::MAX_BUCKETS,
            fallback_bytes: defaults::MAX_STORE_BYTES,
            calls_in_flight: defaults::REDIS_CALLS_IN_FLIGHT,
            specialised: true,
            expiry_jitter: Duration::ZERO,
            tls: RedisTlsFiles::default(),
            key_prefix: String::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_never_show_the_password() {
        let shown = format!("{:?}", RedisOptions::new("redis://u:secret@h:1"));
        assert!(
            !shown.contains("secret") && shown.contains("u:***@h:1"),
            "{shown}"
        );
    }
}

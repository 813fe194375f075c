//! Connections to Redis: one multiplexed connection (or a cluster connection) shared by
//! every request, made lazily, replaced when it breaks, and never waited on longer than
//! the per-operation timeout.
//!
//! URLs:
//! - `redis://[[user]:password@]host[:port][/db]`, `rediss://…` (TLS),
//!   `unix:///path/redis.sock[?db=N&user=U&pass=P]` or `redis+unix:///…`: one server.
//! - `redis+cluster://[[user]:password@]host:port[,host:port…]` (`rediss+cluster://` for
//!   TLS): a Redis Cluster, from one or more seed nodes.
//! - `redis+sentinel://[[user]:password@]host:port[,host:port…]/master-name[/db]`
//!   (`rediss+sentinel://` for TLS to the master): the master Sentinel names. The
//!   credentials are the master's; sentinels that need their own take
//!   `?sentinel_username=U&sentinel_password=P`.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::MultiplexedConnection;
use redis::cluster_async::ClusterConnection;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{AsyncConnectionConfig, Client, ConnectionAddr, RedisError, TlsMode};

/// A Redis deployment, parsed from a URL.
pub(crate) enum Target {
    Single(Client),
    Cluster(redis::cluster::ClusterClient),
    Sentinel(tokio::sync::Mutex<SentinelClient>),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Single(_) => "Single",
            Target::Cluster(_) => "Cluster",
            Target::Sentinel(_) => "Sentinel",
        })
    }
}

/// A URL that does not name a Redis deployment meshlimit can use.
#[derive(Debug, thiserror::Error)]
#[error("invalid Redis URL: {0}")]
pub struct UrlError(String);

impl Target {
    /// Parses `url` (see the module docs); connects to nothing yet.
    pub(crate) fn parse(url: &str, timeout: Duration) -> Result<Target, UrlError> {
        let bad = |e: &dyn std::fmt::Display| UrlError(format!("{}: {e}", redact(url)));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| UrlError(format!("{}: no scheme", redact(url))))?;
        match scheme {
            "redis" | "rediss" | "unix" | "redis+unix" => {
                Client::open(url).map(Target::Single).map_err(|e| bad(&e))
            }
            "redis+cluster" | "rediss+cluster" => {
                let tls = scheme.starts_with("rediss");
                let (auth, hosts) = split_auth(rest);
                let hosts = hosts.trim_end_matches('/');
                let nodes: Vec<String> = hosts
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(|h| format!("{}://{auth}{h}", if tls { "rediss" } else { "redis" }))
                    .collect();
                if nodes.is_empty() {
                    return Err(UrlError(format!("{}: no cluster nodes", redact(url))));
                }
                redis::cluster::ClusterClientBuilder::new(nodes)
                    .connection_timeout(timeout)
                    .response_timeout(timeout)
                    .build()
                    .map(Target::Cluster)
                    .map_err(|e| bad(&e))
            }
            "redis+sentinel" | "rediss+sentinel" => {
                let tls = scheme.starts_with("rediss");
                sentinel(rest, tls)
                    .map(|c| Target::Sentinel(tokio::sync::Mutex::new(c)))
                    .map_err(|e| bad(&e))
            }
            other => Err(UrlError(format!(
                "{}: unknown scheme {other:?} (redis, rediss, unix, redis+unix, \
                 redis+cluster, rediss+cluster, redis+sentinel, rediss+sentinel)",
                redact(url)
            ))),
        }
    }
}

/// `user:password@` (kept with its `@`) and the rest.
fn split_auth(rest: &str) -> (&str, &str) {
    match rest.rfind('@') {
        Some(at) => (&rest[..=at], &rest[at + 1..]),
        None => ("", rest),
    }
}

/// The URL with any password replaced, for messages.
pub(crate) fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, hosts) = split_auth(rest);
    match auth.trim_end_matches('@').split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{hosts}"),
        None => url.to_string(),
    }
}

fn sentinel(rest: &str, tls: bool) -> Result<SentinelClient, String> {
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (auth, rest) = split_auth(rest);
    let (hosts, path) = rest
        .split_once('/')
        .ok_or("missing /master-name after the sentinel addresses")?;
    let mut path = path.split('/').filter(|p| !p.is_empty());
    let master = path.next().ok_or("missing the master name")?;
    let db: Option<i64> = match path.next() {
        Some(db) => Some(db.parse().map_err(|_| format!("bad db {db:?}"))?),
        None => None,
    };
    let mut addrs = Vec::new();
    for host in hosts.split(',').filter(|h| !h.is_empty()) {
        let (h, p) = host
            .rsplit_once(':')
            .ok_or_else(|| format!("sentinel {host:?} has no port"))?;
        let port = p
            .parse()
            .map_err(|_| format!("sentinel {host:?}: bad port"))?;
        addrs.push(ConnectionAddr::Tcp(
            h.trim_matches(|c| c == '[' || c == ']').to_string(),
            port,
        ));
    }
    if addrs.is_empty() {
        return Err("no sentinel addresses".into());
    }
    let mut builder = SentinelClientBuilder::new(addrs, master, SentinelServerType::Master)
        .map_err(|e| e.to_string())?;
    let auth = auth.trim_end_matches('@');
    if !auth.is_empty() {
        let (user, password) = auth.split_once(':').unwrap_or(("", auth));
        if !user.is_empty() {
            builder = builder.set_client_to_redis_username(percent_decode(user));
        }
        if !password.is_empty() {
            builder = builder.set_client_to_redis_password(percent_decode(password));
        }
    }
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("sentinel_username", v)) => {
                builder = builder.set_client_to_sentinel_username(percent_decode(v));
            }
            Some(("sentinel_password", v)) => {
                builder = builder.set_client_to_sentinel_password(percent_decode(v));
            }
            _ => return Err(format!("unknown query parameter {pair:?}")),
        }
    }
    if let Some(db) = db {
        builder = builder.set_client_to_redis_db(db);
    }
    if tls {
        builder = builder.set_client_to_redis_tls_mode(TlsMode::Secure);
    }
    builder.build().map_err(|e| e.to_string())
}

/// `%XX` escapes in URL credentials.
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(b) = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
        {
            out.push(b);
            i += 3;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A live connection of either kind; clones share it.
#[derive(Clone)]
pub(crate) enum Conn {
    Multiplexed(MultiplexedConnection),
    Cluster(ClusterConnection),
}

impl redis::aio::ConnectionLike for Conn {
    fn req_packed_command<'a>(
        &'a mut self,
        cmd: &'a redis::Cmd,
    ) -> redis::RedisFuture<'a, redis::Value> {
        match self {
            Conn::Multiplexed(c) => c.req_packed_command(cmd),
            Conn::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<redis::Value>> {
        match self {
            Conn::Multiplexed(c) => c.req_packed_commands(cmd, offset, count),
            Conn::Cluster(c) => c.req_packed_commands(cmd, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Conn::Multiplexed(c) => c.get_db(),
            Conn::Cluster(c) => c.get_db(),
        }
    }
}

/// The shared connection to a [`Target`], replaced when it breaks.
pub(crate) struct Backend {
    target: Target,
    current: ArcSwapOption<Conn>,
    /// One connection attempt at a time.
    connecting: tokio::sync::Mutex<()>,
    timeout: Duration,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend")
            .field("target", &self.target)
            .field("connected", &self.current.load().is_some())
            .finish()
    }
}

impl Backend {
    pub(crate) fn new(target: Target, timeout: Duration) -> Self {
        Self {
            target,
            current: ArcSwapOption::empty(),
            connecting: tokio::sync::Mutex::new(()),
            timeout,
        }
    }

    /// The shared connection, connecting first if there is none. Bounded by the timeout.
    pub(crate) async fn conn(&self) -> Result<Conn, RedisError> {
        if let Some(c) = self.current.load_full() {
            return Ok((*c).clone());
        }
        let _one = self.connecting.lock().await;
        if let Some(c) = self.current.load_full() {
            return Ok((*c).clone());
        }
        let conn = tokio::time::timeout(self.timeout, self.connect())
            .await
            .map_err(|_| timed_out("connecting"))??;
        self.current.store(Some(Arc::new(conn.clone())));
        Ok(conn)
    }

    /// Whether this is a Redis Cluster.
    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.target, Target::Cluster(_))
    }

    /// Drops the shared connection (it failed); the next call connects anew. Sentinel
    /// targets ask the sentinels for the master again then.
    pub(crate) fn reset(&self) {
        self.current.store(None);
    }

    async fn connect(&self) -> Result<Conn, RedisError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(Some(self.timeout));
        match &self.target {
            Target::Single(client) => client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map(Conn::Multiplexed),
            Target::Cluster(client) => client.get_async_connection().await.map(Conn::Cluster),
            Target::Sentinel(sentinel) => {
                let client = sentinel.lock().await.async_get_client().await?;
                client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await
                    .map(Conn::Multiplexed)
            }
        }
    }
}

pub(crate) fn timed_out(what: &str) -> RedisError {
    RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("Redis timed out {what}"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why() {
        let t = Duration::from_millis(100);
        assert!(matches!(
            Target::parse("redis://127.0.0.1:6379/2", t),
            Ok(Target::Single(_))
        ));
        assert!(matches!(
            Target::parse("redis+unix:///tmp/redis.sock", t),
            Ok(Target::Single(_))
        ));
        assert!(matches!(
            Target::parse("rediss://u:p@127.0.0.1:6380", t),
            Ok(Target::Single(_))
        ));
        assert!(matches!(
            Target::parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", t),
            Ok(Target::Cluster(_))
        ));
        assert!(matches!(
            Target::parse(
                "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster/1",
                t
            ),
            Ok(Target::Sentinel(_))
        ));
        for (url, why) in [
            ("127.0.0.1:6379", "no scheme"),
            ("http://x", "unknown scheme"),
            ("redis+sentinel://127.0.0.1:26379", "master"),
            ("redis+sentinel://127.0.0.1/m", "no port"),
            ("redis+cluster://", "no cluster nodes"),
        ] {
            let err = Target::parse(url, t).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("redis://user:secret@host:1/0"),
            "redis://user:***@host:1/0"
        );
        let err = Target::parse("nope://u:secret@h", Duration::from_secs(1))
            .unwrap_err()
            .to_string();
        assert!(!err.contains("secret"), "{err}");
        assert_eq!(percent_decode("p%40ss"), "p@ss");
    }
}

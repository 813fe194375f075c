//! Redis URLs, parsed into the deployment they name ([`Target`]).
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

use redis::io::tcp::TcpSettings;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use std::path::Path;

use redis::{
    Client, ClientTlsConfig, ConnectionAddr, IntoConnectionInfo, RedisResult, TlsCertificates,
    TlsMode,
};

/// A Redis deployment, parsed from a URL.
pub(crate) enum Target {
    /// One server.
    Single(Client),
    /// Seed nodes (`host:port`) and how to make each node's URL around its address.
    Cluster {
        /// The seed nodes' `host:port`.
        seeds: Vec<String>,
        /// Scheme and credentials, before a node's `host:port`.
        url_prefix: String,
        /// What follows a node's `host:port` (`/#insecure` for unchecked TLS).
        url_suffix: String,
        /// The CA and client certificate of TLS connections to the nodes, if given.
        certs: Option<TlsCertificates>,
    },
    /// The master the sentinels name.
    Sentinel(SentinelClient),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Single(_) => "Single",
            Target::Cluster { .. } => "Cluster",
            Target::Sentinel(_) => "Sentinel",
        })
    }
}

/// Why the Redis store cannot be set up: a URL that does not name a Redis deployment
/// meshlimit can use, or TLS files that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// The URL (its password hidden) and what is wrong with it.
    #[error("invalid Redis URL: {0}")]
    Url(String),
    /// A `--redis-tls-*` file and why it cannot be used.
    #[error("Redis TLS: {0}")]
    Tls(String),
}

impl Target {
    /// Parses `url` (see the module docs), its TLS connections made with `certs` (a CA,
    /// a client certificate) when given; connects to nothing yet.
    pub(crate) fn parse(url: &str, certs: Option<&TlsCertificates>) -> Result<Target, SetupError> {
        let bad = |e: &dyn std::fmt::Display| SetupError::Url(format!("{}: {e}", redact(url)));
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| SetupError::Url(format!("{}: no scheme", redact(url))))?;
        match scheme {
            "redis" | "rediss" | "unix" | "redis+unix" => {
                client(url, certs).map(Target::Single).map_err(|e| bad(&e))
            }
            "redis+cluster" | "rediss+cluster" => {
                let tls = scheme.starts_with("rediss");
                let (auth, hosts) = split_auth(rest);
                let (hosts, url_suffix) = match hosts.strip_suffix("#insecure") {
                    Some(hosts) => (hosts, "/#insecure"),
                    None => (hosts, ""),
                };
                let hosts = hosts.trim_end_matches('/');
                let seeds: Vec<String> = hosts
                    .split(',')
                    .filter(|h| !h.is_empty())
                    .map(str::to_string)
                    .collect();
                if seeds.is_empty() {
                    return Err(SetupError::Url(format!(
                        "{}: no cluster nodes",
                        redact(url)
                    )));
                }
                let url_prefix = format!("{}://{auth}", if tls { "rediss" } else { "redis" });
                for seed in &seeds {
                    client(&format!("{url_prefix}{seed}{url_suffix}"), certs)
                        .map_err(|e| bad(&e))?;
                }
                Ok(Target::Cluster {
                    seeds,
                    url_prefix,
                    url_suffix: url_suffix.to_string(),
                    certs: certs.cloned(),
                })
            }
            "redis+sentinel" | "rediss+sentinel" => {
                let tls = scheme.starts_with("rediss");
                sentinel(rest, tls, certs)
                    .map(Target::Sentinel)
                    .map_err(|e| bad(&e))
            }
            other => Err(SetupError::Url(format!(
                "{}: unknown scheme {other:?} (redis, rediss, unix, redis+unix, \
                 redis+cluster, rediss+cluster, redis+sentinel, rediss+sentinel)",
                redact(url)
            ))),
        }
    }
}

/// The TCP settings of every connection to a Redis server: `TCP_NODELAY`, which redis-rs
/// leaves off. Without it, Nagle's algorithm holds a script call written while an earlier
/// one on the same connection is unacknowledged until that acknowledgement comes, which a
/// server's delayed ACK can hold back for tens of milliseconds.
fn tcp_settings() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

/// A client of the server at `url` (one server, or a Cluster node), whose connections use
/// [`tcp_settings`] and, over TLS, `certs` when given (a `redis://` URL with `certs` is
/// refused: the files would go unused).
pub(crate) fn client(url: &str, certs: Option<&TlsCertificates>) -> RedisResult<Client> {
    let info = url.into_connection_info()?.set_tcp_settings(tcp_settings());
    match certs {
        Some(certs) => Client::build_with_tls(info, certs.clone()),
        None => Client::open(info),
    }
}

/// The PEM files of `--redis-tls-ca` and `--redis-tls-cert`/`--redis-tls-key`, read;
/// `None` when neither is given.
///
/// # Errors
/// A file that cannot be read, naming it.
pub(crate) fn certificates(
    ca: Option<&Path>,
    client: Option<(&Path, &Path)>,
) -> Result<Option<TlsCertificates>, SetupError> {
    let read = |path: &Path| {
        std::fs::read(path).map_err(|e| SetupError::Tls(format!("{}: {e}", path.display())))
    };
    if ca.is_none() && client.is_none() {
        return Ok(None);
    }
    let client_tls = match client {
        Some((cert, key)) => Some(ClientTlsConfig {
            client_cert: read(cert)?,
            client_key: read(key)?,
        }),
        None => None,
    };
    let root_cert = ca.map(read).transpose()?;
    Ok(Some(TlsCertificates {
        client_tls,
        root_cert,
    }))
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

fn sentinel(
    rest: &str,
    tls: bool,
    certs: Option<&TlsCertificates>,
) -> Result<SentinelClient, String> {
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
        .map_err(|e| e.to_string())?
        .set_client_to_redis_tcp_settings(tcp_settings());
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
        if let Some(certs) = certs {
            builder = builder.set_client_to_redis_certificates(certs.clone());
        }
    } else if certs.is_some() {
        return Err(
            "TLS files given for a redis+sentinel:// URL (rediss+sentinel:// is TLS)".into(),
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_or_say_why() {
        assert!(matches!(
            Target::parse("redis://127.0.0.1:6379/2", None),
            Ok(Target::Single(_))
        ));
        assert!(matches!(
            Target::parse("redis+unix:///tmp/redis.sock", None),
            Ok(Target::Single(_))
        ));
        assert!(matches!(
            Target::parse("rediss://u:p@127.0.0.1:6380", None),
            Ok(Target::Single(_))
        ));
        assert!(matches!(
            Target::parse("redis+cluster://127.0.0.1:7000,127.0.0.1:7001", None),
            Ok(Target::Cluster { .. })
        ));
        assert!(matches!(
            Target::parse(
                "redis+sentinel://:pw@127.0.0.1:26379,127.0.0.1:26380/mymaster/1",
                None
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
            let err = Target::parse(url, None).unwrap_err().to_string();
            assert!(err.contains(why), "{url}: {err}");
        }
    }

    #[test]
    fn connections_to_redis_send_without_delay() {
        for url in ["redis://127.0.0.1:6379", "redis+cluster://127.0.0.1:7000"] {
            let client = match Target::parse(url, None) {
                Ok(Target::Single(client)) => client,
                Ok(Target::Cluster {
                    seeds,
                    url_prefix,
                    url_suffix,
                    ..
                }) => {
                    client(&format!("{url_prefix}{}{url_suffix}", seeds[0]), None).expect("valid")
                }
                other => panic!("{url}: {other:?}"),
            };
            assert!(
                client.get_connection_info().tcp_settings().nodelay(),
                "{url}"
            );
        }
    }

    #[test]
    fn passwords_never_reach_messages() {
        assert_eq!(
            redact("redis://user:secret@host:1/0"),
            "redis://user:***@host:1/0"
        );
        let err = Target::parse("nope://u:secret@h", None)
            .unwrap_err()
            .to_string();
        assert!(!err.contains("secret"), "{err}");
        assert_eq!(percent_decode("p%40ss"), "p@ss");
    }

    #[test]
    fn tls_files_are_read_or_named() {
        assert!(certificates(None, None).unwrap().is_none());
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, "PEM").unwrap();
        let certs = certificates(Some(&ca), None).unwrap().unwrap();
        assert_eq!(certs.root_cert.as_deref(), Some(&b"PEM"[..]));
        assert!(certs.client_tls.is_none());
        let missing = dir.path().join("client.pem");
        let err = certificates(Some(&ca), Some((&missing, &ca))).unwrap_err();
        assert!(err.to_string().starts_with("Redis TLS: "), "{err}");
        assert!(err.to_string().contains("client.pem"), "{err}");
        // TLS files for a plain connection would go unused: refused.
        let plain = Target::parse("redis://127.0.0.1:6379", Some(&certs)).unwrap_err();
        assert!(plain.to_string().contains("rediss://"), "{plain}");
    }
}

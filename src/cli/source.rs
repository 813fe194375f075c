//! The flags naming the config source, shared by `serve`, `validate`, `explain` and
//! `db init`: `--config` (a path or a PostgreSQL URL) or `--xds-server`, and what each
//! source needs besides.

use std::path::PathBuf;
use std::time::Duration;

use super::values::millis;
use crate::config::SharedDomains;
use crate::defaults;
use crate::source::ConfigSource;
use crate::source::postgres::{self, PgOptions};
use crate::source::xds::{Backoff, XdsOptions, XdsTls};

/// Where the config comes from; each field's comment is its `--help` text.
#[derive(Debug, Clone, clap::Args)]
pub struct SourceArgs {
    /// Descriptor file, or directory of *.yaml / *.yml files (watched for edits); or a
    /// PostgreSQL URL (postgres://user:password@host:port/db?sslmode=require, or
    /// postgresql:///db?host=/run/postgresql for a unix socket) whose table holds one
    /// domain file per row, reloaded on NOTIFY.
    #[arg(long, env = "MESHLIMIT_CONFIG", conflicts_with = "xds_server")]
    pub(crate) config: Option<String>,
    /// The table and channel of a PostgreSQL --config.
    #[command(flatten)]
    pub(crate) pg: PgArgs,
    /// Take the config from this xDS control plane (host:port, http://host:port or
    /// https://host:port): RateLimitConfig resources over ADS, as envoyproxy/ratelimit's
    /// CONFIG_TYPE=GRPC_XDS_SOTW.
    #[arg(long, env = "MESHLIMIT_XDS_SERVER")]
    pub(crate) xds_server: Option<String>,
    /// The node id given to the control plane.
    #[arg(long, env = "MESHLIMIT_XDS_NODE_ID", default_value = defaults::XDS_NODE_ID)]
    pub(crate) xds_node_id: String,
    /// The node's metadata, as key=value,key2=value2.
    #[arg(long, env = "MESHLIMIT_XDS_NODE_METADATA", value_parser = pairs, default_value = "")]
    pub(crate) xds_node_metadata: Pairs,
    /// gRPC metadata sent to the control plane, as key=value,key2=value2.
    #[arg(long, env = "MESHLIMIT_XDS_HEADERS", value_parser = pairs, default_value = "")]
    pub(crate) xds_headers: Pairs,
    /// TLS to the control plane (implied by an https:// --xds-server or any TLS file).
    #[arg(long, env = "MESHLIMIT_XDS_TLS")]
    pub(crate) xds_tls: bool,
    /// CA bundle for the control plane's certificate (default: the system's roots).
    #[arg(long, env = "MESHLIMIT_XDS_TLS_CA")]
    pub(crate) xds_tls_ca: Option<PathBuf>,
    /// Client certificate for mTLS to the control plane (PEM), with --xds-tls-key.
    #[arg(long, env = "MESHLIMIT_XDS_TLS_CERT", requires = "xds_tls_key")]
    pub(crate) xds_tls_cert: Option<PathBuf>,
    /// Client key for mTLS to the control plane (PEM), with --xds-tls-cert.
    #[arg(long, env = "MESHLIMIT_XDS_TLS_KEY", requires = "xds_tls_cert")]
    pub(crate) xds_tls_key: Option<PathBuf>,
    /// The name the control plane's certificate must hold, when not its host.
    #[arg(long, env = "MESHLIMIT_XDS_TLS_SAN")]
    pub(crate) xds_tls_san: Option<String>,
    /// First wait before reconnecting to the control plane (milliseconds); doubles up to
    /// --xds-backoff-max-ms.
    #[arg(long, env = "MESHLIMIT_XDS_BACKOFF_INITIAL_MS", default_value_t = millis(defaults::XDS_BACKOFF_INITIAL))]
    pub(crate) xds_backoff_initial_ms: u64,
    /// Longest wait between reconnections (milliseconds).
    #[arg(long, env = "MESHLIMIT_XDS_BACKOFF_MAX_MS", default_value_t = millis(defaults::XDS_BACKOFF_MAX))]
    pub(crate) xds_backoff_max_ms: u64,
    /// Each wait is spread at random by ± this share of itself.
    #[arg(long, env = "MESHLIMIT_XDS_BACKOFF_RANDOM_FACTOR", default_value_t = defaults::XDS_BACKOFF_RANDOM_FACTOR)]
    pub(crate) xds_backoff_random_factor: f64,
    /// Spread the waits at random (true or false).
    #[arg(long, env = "MESHLIMIT_XDS_BACKOFF_JITTER", default_value_t = true, action = clap::ArgAction::Set)]
    pub(crate) xds_backoff_jitter: bool,
    /// Merge the descriptors of files (or xDS resources) that name the same domain
    /// instead of refusing the config; a top-level descriptor defined twice is still an
    /// error, naming both places.
    #[arg(long, env = "MESHLIMIT_MERGE_DOMAIN_CONFIG")]
    pub(crate) merge_domain_config: bool,
    /// Largest control-plane response accepted (bytes).
    #[arg(long, env = "MESHLIMIT_XDS_MAX_MSG_BYTES", default_value_t = defaults::XDS_MAX_MESSAGE_BYTES)]
    pub(crate) xds_max_msg_bytes: usize,
}

/// The table and channel of a PostgreSQL source; each field's comment is its `--help` text.
#[derive(Debug, Clone, clap::Args)]
pub struct PgArgs {
    /// With a PostgreSQL --config: the table, columns `domain text primary key` and
    /// `config text not null`.
    #[arg(long, env = "MESHLIMIT_PG_TABLE", default_value = defaults::PG_TABLE, value_parser = sql_name)]
    pub(crate) pg_table: String,
    /// With a PostgreSQL --config: the NOTIFY channel announcing changes.
    #[arg(long, env = "MESHLIMIT_PG_CHANNEL", default_value = defaults::PG_CHANNEL, value_parser = sql_name)]
    pub(crate) pg_channel: String,
}

impl PgArgs {
    /// The PostgreSQL options for `url`.
    pub(crate) fn options(&self, url: &str) -> PgOptions {
        PgOptions {
            table: self.pg_table.clone(),
            channel: self.pg_channel.clone(),
            ..PgOptions::new(url)
        }
    }
}

/// `meshlimit db init`'s flags: a PostgreSQL source only.
#[derive(Debug, Clone, clap::Args)]
pub struct DbArgs {
    /// The PostgreSQL URL (postgres://user:password@host:port/db, postgresql://...).
    #[arg(long, env = "MESHLIMIT_CONFIG", value_parser = postgres_url)]
    pub(crate) config: String,
    /// The table and channel.
    #[command(flatten)]
    pub(crate) pg: PgArgs,
}

/// A `postgres://` or `postgresql://` URL.
fn postgres_url(text: &str) -> Result<String, String> {
    if postgres::is_url(text) {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{text:?} is not a postgres:// or postgresql:// URL"
        ))
    }
}

/// `key=value` pairs, in order.
pub(crate) type Pairs = Vec<(String, String)>;

impl SourceArgs {
    /// The source these flags name; `None` when neither --config nor --xds-server is given.
    pub(crate) fn source(&self) -> Option<ConfigSource> {
        if let Some(server) = &self.xds_server {
            return Some(ConfigSource::Xds(self.xds(server)));
        }
        let config = self.config.as_deref()?;
        Some(match ConfigSource::parse(config) {
            ConfigSource::Postgres(_) => ConfigSource::Postgres(self.pg.options(config)),
            other => other.with_domains(self.domains()),
        })
    }

    /// What `--merge-domain-config` asks of a domain in several files.
    pub(crate) fn domains(&self) -> SharedDomains {
        if self.merge_domain_config {
            SharedDomains::Merged
        } else {
            SharedDomains::Refused
        }
    }

    fn xds(&self, server: &str) -> XdsOptions {
        let client_cert = self.xds_tls_cert.clone().zip(self.xds_tls_key.clone());
        let wants_tls = self.xds_tls
            || server.starts_with("https://")
            || self.xds_tls_ca.is_some()
            || client_cert.is_some()
            || self.xds_tls_san.is_some();
        XdsOptions {
            node_id: self.xds_node_id.clone(),
            node_metadata: self.xds_node_metadata.clone(),
            headers: self.xds_headers.clone(),
            tls: wants_tls.then(|| XdsTls {
                ca: self.xds_tls_ca.clone(),
                client_cert,
                server_name: self.xds_tls_san.clone(),
            }),
            backoff: Backoff {
                initial: Duration::from_millis(self.xds_backoff_initial_ms.max(1)),
                max: Duration::from_millis(self.xds_backoff_max_ms.max(1)),
                random_factor: self.xds_backoff_random_factor.clamp(0.0, 1.0),
                jitter: self.xds_backoff_jitter,
            },
            max_message_bytes: self.xds_max_msg_bytes,
            domains: self.domains(),
            ..XdsOptions::new(server)
        }
    }
}

/// `key=value,key2=value2` (empty: none); a pair without `=` is refused.
fn pairs(text: &str) -> Result<Pairs, String> {
    text.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|pair| match pair.split_once('=') {
            Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().into(), v.trim().into())),
            _ => Err(format!("{pair:?} is not key=value")),
        })
        .collect()
}

/// A plain SQL name (letters, digits, `_`, not starting with a digit, at most 63 bytes),
/// so that it can be written into statements without quoting rules.
fn sql_name(text: &str) -> Result<String, String> {
    let plain = !text.is_empty()
        && text.len() <= 63
        && !text.starts_with(|c: char| c.is_ascii_digit())
        && text.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if plain {
        Ok(text.to_string())
    } else {
        Err(format!(
            "{text:?} is not a plain SQL name (letters, digits and _, at most 63)"
        ))
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cli::{Cli, Command};

    fn source(args: &[&str]) -> Option<ConfigSource> {
        let argv = ["meshlimit", "validate"].iter().chain(args);
        match Cli::try_parse_from(argv).expect("valid flags").command {
            Command::Validate(args) => args.source(),
            _ => unreachable!("parsed validate"),
        }
    }

    #[test]
    fn the_flags_defaults_are_the_sources_defaults() {
        let Some(ConfigSource::Xds(xds)) = source(&["--xds-server", "cp:18000"]) else {
            panic!("--xds-server names an xDS source");
        };
        assert_eq!(xds, XdsOptions::new("cp:18000"));
        let url = "postgres://u:p@db/limits";
        let Some(ConfigSource::Postgres(pg)) = source(&["--config", url]) else {
            panic!("a postgres URL names PostgreSQL");
        };
        assert_eq!(pg, PgOptions::new(url));
        assert!(matches!(
            source(&["--config", "config/"]),
            Some(ConfigSource::File { .. })
        ));
        assert!(source(&[]).is_none());
        let both = [
            "meshlimit",
            "validate",
            "--config",
            "c",
            "--xds-server",
            "x",
        ];
        assert!(Cli::try_parse_from(both).is_err());
    }

    #[test]
    fn any_tls_setting_asks_for_tls() {
        let tls = |args: &[&str]| match source(args) {
            Some(ConfigSource::Xds(xds)) => xds.tls,
            _ => panic!("an xDS source"),
        };
        assert_eq!(tls(&["--xds-server", "cp:1"]), None);
        assert!(tls(&["--xds-server", "https://cp:1"]).is_some());
        let with_ca = tls(&["--xds-server", "cp:1", "--xds-tls-ca", "ca.pem"]).unwrap();
        assert_eq!(with_ca.ca, Some("ca.pem".into()));
        assert!(tls(&["--xds-server", "cp:1", "--xds-tls"]).is_some());
    }

    #[test]
    fn pairs_and_names_are_checked() {
        assert_eq!(
            pairs("a=1, b = x=y ,").unwrap(),
            [("a".into(), "1".into()), ("b".into(), "x=y".into())]
        );
        assert!(pairs("").unwrap().is_empty());
        assert!(pairs("a").is_err());
        assert!(sql_name("meshlimit_config").is_ok());
        for bad in ["", "1x", "a-b", "a;drop", &"x".repeat(64)] {
            assert!(sql_name(bad).is_err(), "{bad}");
        }
    }
}

//! Where the rows are: the connection URL, the table and the NOTIFY channel.

use crate::defaults;

/// A PostgreSQL config source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgOptions {
    /// The connection URL as given (`postgres://` or `postgresql://`).
    pub url: String,
    /// The table holding one row per domain (`--pg-table`).
    pub table: String,
    /// The channel changes are announced on (`--pg-channel`).
    pub channel: String,
}

impl PgOptions {
    /// `url` with the default table and channel.
    pub fn new(url: impl Into<String>) -> PgOptions {
        PgOptions {
            url: url.into(),
            table: defaults::PG_TABLE.into(),
            channel: defaults::PG_CHANNEL.into(),
        }
    }

    /// The URL without its password, and the table.
    pub fn describe(&self) -> String {
        let url = match (self.url.find("://"), self.url.rfind('@')) {
            (Some(scheme), Some(at)) if at > scheme => {
                let credentials = &self.url[scheme + 3..at];
                match credentials.split_once(':') {
                    Some((user, _)) => {
                        format!("{}{user}:***{}", &self.url[..scheme + 3], &self.url[at..])
                    }
                    None => self.url.clone(),
                }
            }
            _ => self.url.clone(),
        };
        format!("{url} table {}", self.table)
    }
}

/// Whether `--config`'s value names PostgreSQL rather than a path.
pub fn is_url(config: &str) -> bool {
    config.starts_with("postgres://") || config.starts_with("postgresql://")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_password_is_never_shown() {
        let options = PgOptions::new("postgres://app:s3cret@db:5432/limits?sslmode=require");
        assert_eq!(
            options.describe(),
            "postgres://app:***@db:5432/limits?sslmode=require table meshlimit_config"
        );
        assert_eq!(
            PgOptions::new("postgresql:///limits?host=/run/postgresql").describe(),
            "postgresql:///limits?host=/run/postgresql table meshlimit_config"
        );
        assert!(is_url("postgresql://x") && is_url("postgres://x") && !is_url("config/"));
    }
}

//! Where the config comes from: descriptor files, PostgreSQL rows (LISTEN/NOTIFY) or an
//! xDS control plane (state of the world over ADS). One source at a time.
//!
//! Every source feeds one pipeline: a full snapshot of the config → the validation of
//! [`crate::config`] → [`apply`], which swaps it in atomically or keeps the last good
//! config and records why. Bucket identity does not depend on the config, so unchanged
//! rules keep their counters whatever the source.
//!
//! - `apply`: [`apply`], one snapshot into the running config and the [`History`].
//! - `backoff`: the waits between reconnections to PostgreSQL or the control plane.
//! - `files`: descriptor files, watched for edits (symlink swaps included).
//! - `history`: [`History`], what the source has done (each [`Outcome`], counted), for
//!   `/rlconfig` and the metrics.
//! - `postgres`: rows of a table, reloaded on NOTIFY; `meshlimit db init`.
//! - `xds`: the ADS client.

mod apply;
pub mod backoff;
mod files;
mod history;
pub mod postgres;
pub mod xds;

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

pub use apply::{Loaded, apply};
pub use history::{History, Outcome};

use crate::config::{self, SharedConfig, SharedDomains};
use crate::error::ConfigError;
use xds::XdsOptions;

/// What follows a source while the server runs: swaps each later snapshot into the
/// running config and records it in the source's [`History`]. Runs for ever; dropping it
/// stops following.
pub type Follower = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One config source, as `--config` (and the xDS flags) name it.
#[derive(Debug, Clone)]
pub enum ConfigSource {
    /// A descriptor file or a directory of them, watched for edits.
    File {
        /// The file or directory.
        path: PathBuf,
        /// Whether files of one domain are merged.
        domains: SharedDomains,
    },
    /// Rows of a PostgreSQL table, one domain file each, reloaded on NOTIFY.
    Postgres(postgres::PgOptions),
    /// `RateLimitConfig` resources from an xDS control plane.
    Xds(xds::XdsOptions),
}

impl ConfigSource {
    /// `--config`'s value: a `postgres://` or `postgresql://` URL (with the table and
    /// channel of [`postgres::PgOptions::new`]), else a path.
    pub fn parse(config: &str) -> ConfigSource {
        if postgres::is_url(config) {
            ConfigSource::Postgres(postgres::PgOptions::new(config))
        } else {
            ConfigSource::File {
                path: PathBuf::from(config),
                domains: SharedDomains::Refused,
            }
        }
    }

    /// The same source with a domain of several files taken as `domains` says (files and
    /// xDS; a PostgreSQL table holds one row per domain).
    #[must_use]
    pub fn with_domains(self, domains: SharedDomains) -> ConfigSource {
        match self {
            ConfigSource::File { path, .. } => ConfigSource::File { path, domains },
            ConfigSource::Xds(options) => ConfigSource::Xds(XdsOptions { domains, ..options }),
            postgres => postgres,
        }
    }

    /// The source's kind as the metrics and `/rlconfig` name it: `file`, `postgres`, `xds`.
    pub fn kind(&self) -> &'static str {
        match self {
            ConfigSource::File { .. } => "file",
            ConfigSource::Postgres(_) => "postgres",
            ConfigSource::Xds(_) => "xds",
        }
    }

    /// Where the config comes from, in words safe to log (no password).
    pub fn describe(&self) -> String {
        match self {
            ConfigSource::File { path, .. } => path.display().to_string(),
            ConfigSource::Postgres(options) => options.describe(),
            ConfigSource::Xds(options) => options.describe(),
        }
    }

    /// The config as the source holds it now, validated, for `validate`, `explain` and
    /// the first load of `serve`; an xDS source waits for the control plane's first
    /// snapshot (its later snapshots are [`xds::follow`]'s).
    ///
    /// # Errors
    /// Every problem of the config, or why the source could not be read.
    pub async fn load(&self) -> Result<Loaded, Vec<ConfigError>> {
        match self {
            &ConfigSource::File { ref path, domains } => {
                let path = path.clone();
                let loaded =
                    tokio::task::spawn_blocking(move || config::load_with(&path, domains)).await;
                match loaded {
                    Ok(result) => result.map(Loaded::unversioned),
                    Err(join) => std::panic::resume_unwind(join.into_panic()),
                }
            }
            ConfigSource::Postgres(options) => postgres::load(options).await,
            ConfigSource::Xds(options) => xds::first(options).await,
        }
    }

    /// The source's follower (see [`Follower`]), applying into `shared` and recording in
    /// `history` every snapshot after the first: a file event `debounce` after the last
    /// one, a notification, a control-plane response. A file watch is set up here; the
    /// others connect once polled.
    ///
    /// # Errors
    /// The config path cannot be watched.
    pub fn follow(
        &self,
        shared: SharedConfig,
        history: Arc<History>,
        debounce: Duration,
    ) -> notify::Result<Follower> {
        Ok(match self {
            ConfigSource::File { path, domains } => Box::pin(files::follow(
                path.clone(),
                *domains,
                shared,
                history,
                debounce,
            )?),
            ConfigSource::Postgres(options) => {
                Box::pin(postgres::follow(options.clone(), shared, history))
            }
            ConfigSource::Xds(options) => Box::pin(xds::follow(options.clone(), shared, history)),
        })
    }
}

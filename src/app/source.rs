//! The config source at startup: the first config, then the task that follows the source.

use std::sync::Arc;

use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::{info, warn};

use super::{Error, Settings};
use crate::config::SharedConfig;
use crate::error::ConfigErrorKind;
use crate::reload::{self, Reloader};
use crate::source::{ConfigSource, History, postgres, xds};

/// What follows the config source while the server runs; dropping it stops following.
#[derive(Debug)]
pub(super) enum Follower {
    /// The file watcher, held for its drop.
    File(#[expect(dead_code, reason = "held: dropping it stops the watcher")] Reloader),
    /// The PostgreSQL or xDS client.
    Task(JoinHandle<()>),
}

impl Drop for Follower {
    fn drop(&mut self) {
        if let Follower::Task(task) = self {
            task.abort();
        }
    }
}

/// Loads the first config into `shared` and starts following the source. Files and
/// PostgreSQL are read here, once; an xDS source's first snapshot comes from its follower.
/// Without [`Settings::start_without_config`], returns only once a config is in force, or
/// `None` if `stopped` turns true first (the server is asked to stop meanwhile).
///
/// # Errors
/// The first config is invalid, or the source cannot be read (unless starting without a
/// config), or the config path cannot be watched.
pub(super) async fn start_source(
    settings: &Settings,
    shared: &SharedConfig,
    history: &Arc<History>,
    stopped: &mut watch::Receiver<bool>,
) -> Result<Option<Follower>, Error> {
    if !matches!(settings.config, ConfigSource::Xds(_)) {
        match settings.config.load().await {
            Ok(loaded) => {
                history.record_first(loaded.version_or_fingerprint());
                shared.store(Arc::new(loaded.config));
            }
            Err(errors) if settings.start_without_config => {
                // Recorded (and logged) as a rejected load, so that /rlconfig shows why.
                crate::source::apply(Err(errors), shared, history);
                warn!("starting without a config: every request is allowed until one loads");
            }
            Err(errors)
                if errors
                    .iter()
                    .all(|e| e.kind == ConfigErrorKind::SourceUnreachable) =>
            {
                return Err(Error::Unreachable(errors));
            }
            Err(errors) => return Err(Error::Config(errors)),
        }
    }
    let (shared, followed) = (shared.clone(), history.clone());
    let follower = match &settings.config {
        ConfigSource::File { path, domains } => Follower::File(reload::spawn(
            path.clone(),
            *domains,
            shared,
            followed,
            settings.reload_debounce,
        )?),
        ConfigSource::Postgres(options) => Follower::Task(tokio::spawn(postgres::follow(
            options.clone(),
            shared,
            followed,
        ))),
        ConfigSource::Xds(options) => {
            Follower::Task(tokio::spawn(xds::follow(options.clone(), shared, followed)))
        }
    };
    if !settings.start_without_config && !history.loaded() {
        info!(source = %history.described(), "waiting for the first config");
        tokio::select! {
            () = history.wait_loaded() => {}
            _ = stopped.wait_for(|&stop| stop) => return Ok(None),
        }
    }
    Ok(Some(follower))
}

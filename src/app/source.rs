//! The config source at startup: the first config, then the task that follows the source.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};

use super::tasks::Tasks;
use super::{Error, Settings};
use crate::config::SharedConfig;
use crate::error::ConfigErrorKind;
use crate::source::{self, ConfigSource, History};

/// Loads the first config into `shared` and starts following the source, its follower
/// kept in `tasks`. Files and PostgreSQL are read here, once; an xDS source's first
/// snapshot comes from its follower. Without [`Settings::start_without_config`], returns
/// only once a config is in force, or `false` if `stopped` turns true first (the server
/// is asked to stop meanwhile).
///
/// # Errors
/// The first config is invalid, or the source cannot be read (unless starting without a
/// config), or the config path cannot be watched.
pub(super) async fn start_source(
    settings: &Settings,
    shared: &SharedConfig,
    history: &Arc<History>,
    tasks: &mut Tasks,
    stopped: &mut watch::Receiver<bool>,
) -> Result<bool, Error> {
    if !matches!(settings.config, ConfigSource::Xds(_)) {
        match settings.config.load().await {
            Ok(loaded) => {
                history.record_first(loaded.version_or_fingerprint());
                shared.store(Arc::new(loaded.config));
            }
            Err(errors) if settings.start_without_config => {
                // Recorded (and logged) as a rejected load, so that /rlconfig shows why.
                source::apply(Err(errors), shared, history);
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
    tasks.spawn(settings.config.follow(
        shared.clone(),
        history.clone(),
        settings.reload_debounce,
    )?);
    if !settings.start_without_config && !history.loaded() {
        info!(source = %history.described(), "waiting for the first config");
        tokio::select! {
            () = history.wait_loaded() => {}
            _ = stopped.wait_for(|&stop| stop) => return Ok(false),
        }
    }
    Ok(true)
}

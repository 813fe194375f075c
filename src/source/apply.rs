//! One snapshot of a source into the running config: swapped in whole when valid and
//! different, the last good config kept otherwise.

use std::sync::Arc;

use tracing::{error, info};

use super::history::{History, Outcome};
use crate::config::{Config, SharedConfig, render_errors};
use crate::error::ConfigError;

/// A valid config from a source, with the source's own version of it.
#[derive(Debug)]
pub struct Loaded {
    /// The validated config.
    pub config: Config,
    /// The source's name for this snapshot (xDS `version_info`); `None`: the config's
    /// fingerprint stands for it.
    pub version: Option<String>,
}

impl Loaded {
    /// A config whose version is its fingerprint.
    pub fn unversioned(config: Config) -> Loaded {
        Loaded {
            config,
            version: None,
        }
    }

    /// The source's version, or the fingerprint where the source has none.
    pub fn version_or_fingerprint(&self) -> String {
        self.version
            .clone()
            .unwrap_or_else(|| format!("{:016x}", self.config.fingerprint()))
    }
}

/// Swaps `loaded` into `shared` if it is valid and differs from the running config.
fn swap(loaded: Result<Loaded, Vec<ConfigError>>, shared: &SharedConfig) -> Outcome {
    match loaded {
        Ok(new) if new.config.fingerprint() == shared.load().fingerprint() => Outcome::Unchanged,
        Ok(new) => {
            info!(domains = ?new.config.domains(), "config reloaded");
            shared.store(Arc::new(new.config));
            Outcome::Applied
        }
        Err(errors) => Outcome::Rejected(render_errors(&errors)),
    }
}

/// [`swap`], recorded in `history` (with the snapshot's version when it loads); a
/// rejection is logged once while its problems stay the same.
pub fn apply(
    loaded: Result<Loaded, Vec<ConfigError>>,
    shared: &SharedConfig,
    history: &History,
) -> Outcome {
    let version = loaded.as_ref().ok().map(Loaded::version_or_fingerprint);
    let outcome = swap(loaded, shared);
    let new_problem = history.record(&outcome, version);
    if let (Outcome::Rejected(text), true) = (&outcome, new_problem) {
        error!(
            source = history.kind(),
            "config reload rejected, the running config stays in force:\n{text}"
        );
    }
    outcome
}

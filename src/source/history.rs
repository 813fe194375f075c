//! What a config source has done, for `/rlconfig`, the metrics and health: the
//! [`Outcome`] of each load attempt, counted.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tokio::sync::watch;
use tracing::info;

use crate::clock::{Clock, Nanos, SystemClock};
use crate::error::ConfigError;

/// What one load attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new config is in force.
    Applied,
    /// The snapshot is byte-for-byte what is running.
    Unchanged,
    /// The snapshot has problems, each on a line; the running config stays.
    Rejected(String),
}

/// What the source has done so far, shared by its follower, the HTTP endpoints and the
/// metrics.
#[derive(Debug)]
pub struct History {
    /// `file`, `postgres` or `xds`.
    kind: &'static str,
    /// Where the config comes from, in words safe to show (no password).
    described: String,
    /// Load attempts after the first (file events after debouncing, notifications,
    /// control-plane responses).
    pub attempts: AtomicU64,
    /// Configs swapped in, the first included.
    pub applied: AtomicU64,
    /// Attempts rejected for problems in the snapshot or an unreadable source.
    pub rejected: AtomicU64,
    /// The problems of the last rejected attempt; cleared by the next attempt that loads.
    pub last_error: Mutex<Option<String>>,
    /// The version of the config in force (xDS `version_info`, else the fingerprint);
    /// empty before the first load.
    version: Mutex<String>,
    /// When the config in force was swapped in (0: nothing loaded yet).
    changed_at: AtomicU64,
    /// Whether a config from the source is in force: false only for a server started
    /// without one, until the first snapshot loads.
    loaded: watch::Sender<bool>,
}

impl History {
    /// The history of a source of `kind` (see [`super::ConfigSource::kind`]) described
    /// by `described`, before anything loaded.
    pub fn new(kind: &'static str, described: String) -> History {
        History {
            kind,
            described,
            attempts: AtomicU64::new(0),
            applied: AtomicU64::new(0),
            rejected: AtomicU64::new(0),
            last_error: Mutex::new(None),
            version: Mutex::new(String::new()),
            changed_at: AtomicU64::new(0),
            loaded: watch::Sender::new(false),
        }
    }

    /// `file`, `postgres` or `xds`.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// Where the config comes from.
    pub fn described(&self) -> &str {
        &self.described
    }

    /// The version of the config in force; empty before the first load.
    pub fn version(&self) -> String {
        self.version.lock().clone()
    }

    /// When the config in force was swapped in, or `None` before the first load.
    pub fn changed_at(&self) -> Option<Nanos> {
        Some(self.changed_at.load(Ordering::SeqCst)).filter(|&at| at > 0)
    }

    /// Whether a config from the source is in force.
    pub fn loaded(&self) -> bool {
        *self.loaded.borrow()
    }

    /// Completes once a config from the source is in force.
    pub async fn wait_loaded(&self) {
        let mut loaded = self.loaded.subscribe();
        let _ = loaded.wait_for(|&l| l).await;
    }

    /// Records the first config, loaded before serving: version `version`, counted as
    /// applied but not as an attempt.
    pub fn record_first(&self, version: String) {
        self.applied.fetch_add(1, Ordering::SeqCst);
        *self.version.lock() = version;
        self.changed_at.store(SystemClock.now(), Ordering::SeqCst);
        self.loaded.send_replace(true);
    }

    /// Records that the source could not be read (`error`, of kind
    /// [`crate::error::ConfigErrorKind::SourceUnreachable`]) as a rejected load: the running
    /// config stays, and `/rlconfig` and the metrics show the outage until a snapshot loads.
    pub(super) fn record_outage(&self, error: &ConfigError) {
        self.record(&Outcome::Rejected(error.to_string()), None);
    }

    /// Counts `outcome` of a snapshot whose version is `version` (`None` when rejected).
    /// A config that loads clears the last error: the problem it described is gone.
    /// Returns whether a rejection differs from the previous one, so that an unchanged
    /// problem is logged once.
    pub(super) fn record(&self, outcome: &Outcome, version: Option<String>) -> bool {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Outcome::Applied | Outcome::Unchanged => {
                if let Some(version) = version {
                    *self.version.lock() = version;
                }
                if outcome == &Outcome::Applied || !self.loaded() {
                    self.applied.fetch_add(1, Ordering::SeqCst);
                    self.changed_at.store(SystemClock.now(), Ordering::SeqCst);
                }
                self.loaded.send_replace(true);
                if self.last_error.lock().take().is_some() && outcome == &Outcome::Unchanged {
                    info!("config problems fixed; the source matches the running config");
                }
                false
            }
            Outcome::Rejected(text) => {
                self.rejected.fetch_add(1, Ordering::SeqCst);
                let previous = self.last_error.lock().replace(text.clone());
                previous.as_ref() != Some(text)
            }
        }
    }
}

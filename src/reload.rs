//! Live reload: watch the config path, re-validate everything, swap atomically.
//!
//! Contract:
//! - Keep last good: a reload that finds any problem logs every problem and leaves the
//!   running config in force. Files whose bytes did not change are not swapped at all.
//! - Symlinks: the watch covers the config path (a directory, non-recursively) and the
//!   directories holding it and every link on the way to it, so both an edited file and a
//!   replaced link show up: a Kubernetes ConfigMap mount swaps its `..data` link inside the
//!   directory, and an envoyproxy/ratelimit style runtime root swaps the directory link
//!   itself. Only events on the config path, those links, what they resolve to and a config
//!   directory's entries cause a reload: other files in those directories (a log file) do
//!   not. After each reload the path is resolved again, and the watch moves to the new
//!   target when a link now points elsewhere.
//! - Errors: a rejected reload is logged once while its problems stay the same, and shown
//!   by `/rlconfig` until a reload loads (even when what loads is the running config).
//! - Counters survive: bucket identity does not depend on the config (only on domain,
//!   keys and values), so unchanged rules keep their state and changed ones carry it over.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use notify::RecursiveMode;
use notify_debouncer_mini::{DebounceEventResult, Debouncer, new_debouncer};
use tokio::sync::mpsc;
use tracing::{error, info, warn};

use crate::config::SharedConfig;
use crate::config::{self, render_errors};

mod paths;
use paths::Interest;

/// What one reload attempt did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A new config is in force.
    Applied,
    /// The files are byte-for-byte what is running.
    Unchanged,
    /// The files have problems; the running config stays.
    Rejected(String),
}

/// What the reloader has done so far, for operators and tests.
#[derive(Debug, Default)]
pub struct ReloadHistory {
    /// Reload attempts (file events after debouncing).
    pub attempts: AtomicU64,
    /// Configs swapped in.
    pub applied: AtomicU64,
    /// Attempts rejected for problems in the files.
    pub rejected: AtomicU64,
    /// The problems of the last rejected attempt; cleared by the next attempt that loads.
    pub last_error: Mutex<Option<String>>,
}

impl ReloadHistory {
    /// Counts `outcome`. A config that loads (applied, or the same as the running one)
    /// clears the last error: the problem it described is gone. Returns whether a
    /// rejection differs from the previous one, so that an unchanged problem is logged once.
    fn record(&self, outcome: &Outcome) -> bool {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Outcome::Applied | Outcome::Unchanged => {
                if outcome == &Outcome::Applied {
                    self.applied.fetch_add(1, Ordering::SeqCst);
                }
                if self.last_error.lock().take().is_some() && outcome == &Outcome::Unchanged {
                    info!("config problems fixed; the files match the running config");
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

/// Loads `path` and swaps it into `config` if it is valid and different. A rejection is
/// left to the caller to report.
pub fn reload_once(path: &Path, config: &SharedConfig) -> Outcome {
    match config::load(path) {
        Ok(new) if new.fingerprint() == config.load().fingerprint() => Outcome::Unchanged,
        Ok(new) => {
            info!(domains = ?new.domains(), "config reloaded");
            config.store(Arc::new(new));
            Outcome::Applied
        }
        Err(errors) => Outcome::Rejected(render_errors(&errors)),
    }
}

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct Reloader {
    /// The task that applies reloads and owns the file watcher; aborted on drop, which
    /// stops both.
    task: tokio::task::JoinHandle<()>,
    /// What the reloads did, recorded by the task; read by the HTTP endpoints and the
    /// metrics.
    status: Arc<ReloadHistory>,
}

impl Reloader {
    /// What the reloader has done so far.
    pub fn status(&self) -> &Arc<ReloadHistory> {
        &self.status
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `path`; edits are applied `debounce` after the last event that
/// concerns the config (see [`paths`]).
///
/// # Errors
/// The watcher could not be set up.
pub fn spawn(path: PathBuf, config: SharedConfig, debounce: Duration) -> notify::Result<Reloader> {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let interest = Arc::new(Mutex::new(Interest::default()));
    let events_interest = interest.clone();
    let mut debouncer = new_debouncer(debounce, move |events: DebounceEventResult| {
        let concerned = match events {
            Ok(events) => {
                let interest = events_interest.lock();
                events.iter().any(|e| interest.concerns(&e.path))
            }
            Err(e) => {
                warn!("config watch error: {e}");
                true
            }
        };
        if concerned {
            // A full channel already holds a pending reload, which will see this change too.
            let _ = tx.try_send(());
        }
    })?;
    watch(&mut debouncer, &path, &interest)?;
    let status = Arc::new(ReloadHistory::default());
    let task_status = status.clone();
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            let (p, c) = (path.clone(), config.clone());
            if let Ok(outcome) = tokio::task::spawn_blocking(move || reload_once(&p, &c)).await {
                let new_problem = task_status.record(&outcome);
                if let (Outcome::Rejected(text), true) = (&outcome, new_problem) {
                    error!("config reload rejected, the running config stays in force:\n{text}");
                }
            }
            if let Err(e) = watch(&mut debouncer, &path, &interest) {
                warn!("cannot watch {}: {e}", path.display());
            }
        }
    });
    Ok(Reloader { task, status })
}

/// Watches what `path` stands for now, dropping the watches no longer wanted, and makes
/// `interest` the current one.
fn watch(
    debouncer: &mut Debouncer<notify::RecommendedWatcher>,
    path: &Path,
    interest: &Mutex<Interest>,
) -> notify::Result<()> {
    let wanted = Interest::of(path);
    let before = std::mem::replace(&mut *interest.lock(), wanted.clone());
    let watcher = debouncer.watcher();
    for old in before.dirs.iter().filter(|p| !wanted.dirs.contains(p)) {
        let _ = watcher.unwatch(old);
    }
    let mut failed = Vec::new();
    let mut first_error = None;
    for new in wanted.dirs.iter().filter(|p| !before.dirs.contains(p)) {
        if let Err(e) = watcher.watch(new, RecursiveMode::NonRecursive) {
            failed.push(new.clone());
            first_error.get_or_insert(e);
        }
    }
    // Not watched after all: counted as new again, and tried again, after the next reload.
    interest.lock().dirs.retain(|d| !failed.contains(d));
    first_error.map_or(Ok(()), Err)
}

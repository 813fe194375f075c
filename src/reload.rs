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
use std::time::Duration;

use parking_lot::Mutex;

use tokio::sync::mpsc;
use tracing::warn;

use crate::config::{self, SharedConfig, SharedDomains};
use crate::file_watch::Changes;
pub use crate::source::Outcome;
use crate::source::{self, History, Loaded};

mod paths;
use paths::Interest;

/// Loads `path` and swaps it into `config` if it is valid and different. A rejection is
/// left to the caller to report.
pub fn reload_once(path: &Path, config: &SharedConfig) -> Outcome {
    source::swap(config::load(path).map(Loaded::unversioned), config)
}

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct Reloader {
    /// The task that applies reloads and owns the file watcher; aborted on drop, which
    /// stops both.
    task: tokio::task::JoinHandle<()>,
    /// What the reloads did, recorded by the task; read by the HTTP endpoints and the
    /// metrics.
    status: Arc<History>,
}

impl Reloader {
    /// What the reloader has done so far.
    pub fn status(&self) -> &Arc<History> {
        &self.status
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `path`; edits are applied `debounce` after the last event that
/// concerns the config (see [`paths`]) and recorded in `status`.
///
/// # Errors
/// The watcher could not be set up.
pub fn spawn(
    path: PathBuf,
    domains: SharedDomains,
    config: SharedConfig,
    status: Arc<History>,
    debounce: Duration,
) -> notify::Result<Reloader> {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let interest = Arc::new(Mutex::new(Interest::default()));
    let events_interest = interest.clone();
    let mut changes = Changes::start(
        debounce,
        move |path| events_interest.lock().concerns(path),
        // A full channel already holds a pending reload, which will see this change too.
        move |_| {
            let _ = tx.try_send(());
        },
    )?;
    watch(&mut changes, &path, &interest)?;
    let task_status = status.clone();
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            let (p, c) = (path.clone(), config.clone());
            let history = task_status.clone();
            let load = move || {
                source::apply(
                    config::load_with(&p, domains).map(Loaded::unversioned),
                    &c,
                    &history,
                )
            };
            // A panic in the parser is the parser's bug; the next event tries again.
            let _ = tokio::task::spawn_blocking(load).await;
            if let Err(e) = watch(&mut changes, &path, &interest) {
                warn!("cannot watch {}: {e}", path.display());
            }
        }
    });
    Ok(Reloader { task, status })
}

/// Watches what `path` stands for now, dropping the watches no longer wanted, and makes
/// `interest` the current one.
fn watch(changes: &mut Changes, path: &Path, interest: &Mutex<Interest>) -> notify::Result<()> {
    let wanted = Interest::of(path);
    let before = std::mem::replace(&mut *interest.lock(), wanted.clone());
    for old in before.dirs.iter().filter(|p| !wanted.dirs.contains(p)) {
        changes.unwatch(old);
    }
    let mut failed = Vec::new();
    let mut first_error = None;
    for new in wanted.dirs.iter().filter(|p| !before.dirs.contains(p)) {
        if let Err(e) = changes.watch(new) {
            failed.push(new.clone());
            first_error.get_or_insert(e);
        }
    }
    // Not watched after all: counted as new again, and tried again, after the next reload.
    interest.lock().dirs.retain(|d| !failed.contains(d));
    first_error.map_or(Ok(()), Err)
}

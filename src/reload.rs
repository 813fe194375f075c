//! Live reload: watch the config path, re-validate everything, swap atomically.
//!
//! Contract:
//! - Keep last good: a reload that finds any problem logs every problem and leaves the
//!   running config in force. Files whose bytes did not change are not swapped at all.
//! - Symlinks: the watch covers the config path (a directory, non-recursively) and its
//!   parent, so both an edited file and a replaced link show up: a Kubernetes ConfigMap
//!   mount swaps its `..data` link inside the directory, and an envoyproxy/ratelimit style
//!   runtime root swaps the directory link itself (a link above the config directory is
//!   covered by watching the directory that holds it). After each event the path is resolved
//!   again, and the watch moves to the new target when the link now points elsewhere.
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

use crate::config::{self, render_errors};
use crate::service::SharedConfig;

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
pub struct Status {
    /// Reload attempts (file events after debouncing).
    pub attempts: AtomicU64,
    /// Configs swapped in.
    pub applied: AtomicU64,
    /// Attempts rejected for problems in the files.
    pub rejected: AtomicU64,
    /// The problems of the last rejected attempt; cleared by the next applied one.
    pub last_error: Mutex<Option<String>>,
}

impl Status {
    fn record(&self, outcome: &Outcome) {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        match outcome {
            Outcome::Applied => {
                *self.last_error.lock() = None;
                self.applied.fetch_add(1, Ordering::SeqCst);
            }
            Outcome::Unchanged => {}
            Outcome::Rejected(text) => {
                *self.last_error.lock() = Some(text.clone());
                self.rejected.fetch_add(1, Ordering::SeqCst);
            }
        }
    }
}

/// Loads `path` and swaps it into `config` if it is valid and different.
pub fn reload_once(path: &Path, config: &SharedConfig) -> Outcome {
    match config::load(path) {
        Ok(new) if new.fingerprint() == config.load().fingerprint() => Outcome::Unchanged,
        Ok(new) => {
            info!(domains = ?new.domains(), "config reloaded");
            config.store(Arc::new(new));
            Outcome::Applied
        }
        Err(errors) => {
            let text = render_errors(&errors);
            error!("config reload rejected, the running config stays in force:\n{text}");
            Outcome::Rejected(text)
        }
    }
}

/// A running watcher; dropping it stops watching.
#[derive(Debug)]
pub struct Reloader {
    task: tokio::task::JoinHandle<()>,
    status: Arc<Status>,
}

impl Reloader {
    /// What the reloader has done so far.
    pub fn status(&self) -> &Arc<Status> {
        &self.status
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching `path`; edits are applied `debounce` after the last event.
///
/// # Errors
/// The watcher could not be set up.
pub fn spawn(path: PathBuf, config: SharedConfig, debounce: Duration) -> notify::Result<Reloader> {
    let (tx, mut rx) = mpsc::channel::<()>(1);
    let mut debouncer = new_debouncer(debounce, move |events: DebounceEventResult| {
        if let Err(e) = events {
            warn!("config watch error: {e}");
        }
        // A full channel already holds a pending reload, which will see this change too.
        let _ = tx.try_send(());
    })?;
    let mut watched = watch(&mut debouncer, &path, &[])?;
    let status = Arc::new(Status::default());
    let task_status = status.clone();
    let task = tokio::spawn(async move {
        while rx.recv().await.is_some() {
            let (p, c) = (path.clone(), config.clone());
            if let Ok(outcome) = tokio::task::spawn_blocking(move || reload_once(&p, &c)).await {
                task_status.record(&outcome);
            }
            match watch(&mut debouncer, &path, &watched) {
                Ok(now) => watched = now,
                Err(e) => warn!("cannot watch {}: {e}", path.display()),
            }
        }
    });
    Ok(Reloader { task, status })
}

/// Watches what `path` stands for now (the resolved directory and the parent of `path`),
/// dropping watches in `before` that are no longer wanted. Returns what is watched.
fn watch(
    debouncer: &mut Debouncer<notify::RecommendedWatcher>,
    path: &Path,
    before: &[PathBuf],
) -> notify::Result<Vec<PathBuf>> {
    // Directories are watched by their resolved names: a watch on a name that passes
    // through a link follows the directory it pointed to when the watch was set, so a
    // swapped link must show up as a different name to be watched anew.
    let real = |dir: &Path| std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let mut wanted = Vec::new();
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => wanted.push(real(parent)),
        None => wanted.push(real(Path::new("."))),
    }
    // A link anywhere above the path (the Go server's RUNTIME_ROOT, swapped to deploy a
    // new config) changes only the directory holding the link: watch that one too.
    for ancestor in path.ancestors().skip(1) {
        let is_link = std::fs::symlink_metadata(ancestor).is_ok_and(|m| m.file_type().is_symlink());
        if let Some(holder) = ancestor.parent().filter(|_| is_link) {
            let holder = if holder.as_os_str().is_empty() {
                Path::new(".")
            } else {
                holder
            };
            wanted.push(real(holder));
        }
    }
    if let Ok(resolved) = std::fs::canonicalize(path) {
        if resolved.is_dir() {
            wanted.push(resolved);
        } else if let Some(dir) = resolved.parent() {
            // A file reached through links (ConfigMap): watch where its bytes live too.
            wanted.push(dir.to_path_buf());
        }
    }
    wanted.sort();
    wanted.dedup();
    let watcher = debouncer.watcher();
    for old in before.iter().filter(|p| !wanted.contains(p)) {
        let _ = watcher.unwatch(old);
    }
    for new in wanted.iter().filter(|p| !before.contains(p)) {
        watcher.watch(new, RecursiveMode::NonRecursive)?;
    }
    Ok(wanted)
}

//! Following descriptor files: watch the config path, re-validate everything, swap
//! atomically.
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
//!
//! - `paths`: which directories are watched and which of their events concern the config.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use tokio::sync::mpsc;
use tracing::warn;

use super::{History, Loaded, apply};
use crate::config::{self, SharedConfig, SharedDomains};
use crate::file_watch::Changes;

mod paths;
use paths::Interest;

/// Starts watching `path` and returns the follower: edits are applied `debounce` after
/// the last event that concerns the config (see [`paths`]) and recorded in `history`.
/// The future owns the watch and runs for ever; dropping it stops watching.
///
/// # Errors
/// The watcher could not be set up.
pub(super) fn follow(
    path: PathBuf,
    domains: SharedDomains,
    shared: SharedConfig,
    history: Arc<History>,
    debounce: Duration,
) -> notify::Result<impl Future<Output = ()> + Send + 'static> {
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
    Ok(async move {
        while rx.recv().await.is_some() {
            let (p, c, h) = (path.clone(), shared.clone(), history.clone());
            let load = move || {
                apply(
                    config::load_with(&p, domains).map(Loaded::unversioned),
                    &c,
                    &h,
                )
            };
            // A panic in the parser is the parser's bug; the next event tries again.
            let _ = tokio::task::spawn_blocking(load).await;
            if let Err(e) = watch(&mut changes, &path, &interest) {
                warn!("cannot watch {}: {e}", path.display());
            }
        }
    })
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

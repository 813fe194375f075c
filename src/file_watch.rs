//! Watching directories for changes to files, debounced over all of them.
//!
//! Three things notify's watcher does not do for us (nor did notify-debouncer-mini, which
//! this replaces):
//! - **Reads are not changes.** inotify reports every open and close, and a reload reads
//!   the very files it watches: counted as changes, each reload would schedule the next one,
//!   forever (the config and the TLS files were read again every debounce period after their
//!   first edit, and a bad config counted a failed reload each time).
//! - **One quiet period for the whole set.** An edit that writes a file beside the target and
//!   renames it over it touches two paths; debouncing each path on its own can split them
//!   into two reloads. Here the callback runs once no relevant event has come for `quiet`.
//! - **Lost events are a change.** When inotify's queue overflows, notify says that events
//!   were lost (a rescan); any file may have changed, so that counts as a change.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode};
use notify::{Event, EventKind, RecommendedWatcher, RecursiveMode, Watcher};

use crate::clock::Stopwatch;

/// How many quiet periods a change waits at most while changes keep coming.
pub const LONGEST_WAIT: u32 = 10;

/// A running watch. Dropping it stops the watcher and, with it, the debouncing thread.
#[derive(Debug)]
pub struct Changes {
    /// The notify watcher; its event callback owns the only sender to the debouncing thread.
    watcher: RecommendedWatcher,
}

impl Changes {
    /// Starts an empty watch (add directories with [`Changes::watch`]). `concerns` picks the
    /// paths whose changes matter; `on_change` then runs on a thread of the watch's own, once
    /// `quiet` has passed without a further change (or [`LONGEST_WAIT`] quiet periods after
    /// the first, for a file that never stops changing), with the paths changed since its
    /// last call, sorted, each once. A watcher error, or lost events, may have hidden a
    /// change: they count as a change of no path.
    ///
    /// # Errors
    /// The platform's watcher could not be created, or the thread not started.
    pub fn start(
        quiet: Duration,
        concerns: impl Fn(&Path) -> bool + Send + 'static,
        on_change: impl FnMut(Vec<PathBuf>) + Send + 'static,
    ) -> notify::Result<Self> {
        let (tx, rx) = mpsc::channel::<Vec<PathBuf>>();
        std::thread::Builder::new()
            .name("file-watch".into())
            .spawn(move || debounce(&rx, quiet, on_change))
            .map_err(notify::Error::io)?;
        let watcher = notify::recommended_watcher(move |event: notify::Result<Event>| {
            if let Some(paths) = report(event, &concerns) {
                let _ = tx.send(paths);
            }
        })?;
        Ok(Self { watcher })
    }

    /// Adds `dir` to the watch, non-recursively.
    ///
    /// # Errors
    /// The directory cannot be watched (it does not exist, or the watch limit is reached).
    pub fn watch(&mut self, dir: &Path) -> notify::Result<()> {
        self.watcher.watch(dir, RecursiveMode::NonRecursive)
    }

    /// Removes `dir` from the watch; a directory not watched is not an error.
    pub fn unwatch(&mut self, dir: &Path) {
        let _ = self.watcher.unwatch(dir);
    }
}

/// The directories to watch for changes to `files`: each file's parent, and the parent
/// of what it links to. The first sees an editor's rename and a Kubernetes volume's
/// `..data` link swap (the file's link is then unchanged, the link it goes through not),
/// the second a file edited in place through its link.
pub fn directories<'p>(files: impl IntoIterator<Item = &'p Path>) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = Vec::new();
    for path in files {
        let resolved = std::fs::canonicalize(path).ok();
        for file in std::iter::once(path).chain(resolved.as_deref()) {
            let dir = match file.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
                _ => Path::new(".").to_path_buf(),
            };
            if !dirs.contains(&dir) {
                dirs.push(dir);
            }
        }
    }
    dirs
}

/// What a watcher's `event` tells the debouncing thread: the concerned paths it may have
/// changed, none for an error or lost events (something may have changed), or nothing.
fn report(event: notify::Result<Event>, concerns: &impl Fn(&Path) -> bool) -> Option<Vec<PathBuf>> {
    match event {
        // Events were lost (inotify's queue overflowed): any file may have changed.
        Ok(event) if event.need_rescan() => Some(Vec::new()),
        Ok(event) if !is_change(event.kind) => None,
        Ok(event) => {
            let paths: Vec<PathBuf> = event.paths.into_iter().filter(|p| concerns(p)).collect();
            (!paths.is_empty()).then_some(paths)
        }
        Err(e) => {
            tracing::warn!("file watch error: {e}");
            Some(Vec::new())
        }
    }
}

/// Whether an event of `kind` may have changed what a file holds: everything but opens,
/// reads and closes after reading.
fn is_change(kind: EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

/// The debouncing thread: gathers what `changes` sends until `quiet` passes without more
/// (or the longest wait is over), hands it to `on_change`, and starts again; it ends when
/// the watcher, and so the sender, is gone.
fn debounce(
    changes: &mpsc::Receiver<Vec<PathBuf>>,
    quiet: Duration,
    mut on_change: impl FnMut(Vec<PathBuf>),
) {
    while let Ok(first) = changes.recv() {
        // A set: a file written again and again adds nothing, so memory stays bounded by the
        // files in the watched directories however many events come.
        let mut changed: BTreeSet<PathBuf> = first.into_iter().collect();
        let started = Stopwatch::start();
        loop {
            let left = (quiet * LONGEST_WAIT).saturating_sub(started.until(Stopwatch::start()));
            if left.is_zero() {
                break;
            }
            match changes.recv_timeout(quiet.min(left)) {
                Ok(more) => changed.extend(more),
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
        on_change(changed.into_iter().collect());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use notify::event::{CreateKind, ModifyKind, RemoveKind, RenameMode};

    #[test]
    fn opening_reading_and_closing_a_file_are_not_changes() {
        let read = [
            EventKind::Access(AccessKind::Open(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Any),
        ];
        assert!(read.into_iter().all(|kind| !is_change(kind)));
        let changed = [
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Any),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Any,
            EventKind::Other,
        ];
        assert!(changed.into_iter().all(is_change));
    }

    #[test]
    fn an_event_reports_its_concerned_changed_paths_and_lost_events_report_a_change() {
        let concerns = |p: &Path| p != Path::new("/c/x");
        let event = |kind, paths: &[&str]| {
            Ok(paths
                .iter()
                .fold(Event::new(kind), |e, p| e.add_path(PathBuf::from(p))))
        };
        let modify = EventKind::Modify(ModifyKind::Any);
        assert_eq!(
            report(event(modify, &["/c/a", "/c/x", "/c/b"]), &concerns),
            Some(vec![PathBuf::from("/c/a"), PathBuf::from("/c/b")])
        );
        assert_eq!(report(event(modify, &["/c/x"]), &concerns), None);
        let open = EventKind::Access(AccessKind::Open(AccessMode::Any));
        assert_eq!(report(event(open, &["/c/a"]), &concerns), None);
        let overflow = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        assert_eq!(report(Ok(overflow), &concerns), Some(Vec::new()));
        let error = notify::Error::generic("the watch broke");
        assert_eq!(report(Err(error), &concerns), Some(Vec::new()));
    }

    #[test]
    fn changes_already_waiting_are_reported_together_once() {
        let (tx, rx) = mpsc::channel();
        tx.send(vec![PathBuf::from("b")]).unwrap();
        tx.send(vec![PathBuf::from("a"), PathBuf::from("b")])
            .unwrap();
        tx.send(Vec::new()).unwrap();
        let (calls_tx, calls) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            debounce(&rx, Duration::from_millis(20), |paths| {
                calls_tx.send(paths).unwrap();
            });
        });
        let first = calls.recv_timeout(Duration::from_secs(30)).expect("a call");
        assert_eq!(first, [PathBuf::from("a"), PathBuf::from("b")]);
        drop(tx);
        thread.join().unwrap();
        assert_eq!(calls.try_iter().count(), 0, "one call for the three");
    }

    /// A file that never stops changing is reported anyway, after at most
    /// [`LONGEST_WAIT`] quiet periods: here while the changes are still coming, which only
    /// end after 500 quiet periods.
    #[test]
    fn changes_that_never_stop_are_reported_after_the_longest_wait() {
        use std::sync::Arc;
        use std::sync::atomic::{AtomicBool, Ordering};
        let quiet = Duration::from_millis(10);
        let (tx, rx) = mpsc::channel();
        let (calls_tx, calls) = mpsc::channel();
        let over = Arc::new(AtomicBool::new(false));
        let stop = Arc::new(AtomicBool::new(false));
        let seen_over = over.clone();
        std::thread::spawn(move || {
            debounce(&rx, quiet, |_| {
                let _ = calls_tx.send(seen_over.load(Ordering::SeqCst));
            });
        });
        let told_to_stop = stop.clone();
        let sender = std::thread::spawn(move || {
            for _ in 0..2_500 {
                if told_to_stop.load(Ordering::SeqCst) {
                    return;
                }
                tx.send(vec![PathBuf::from("busy.log")]).unwrap();
                std::thread::sleep(quiet / 5);
            }
            over.store(true, Ordering::SeqCst);
        });
        let changes_were_over = calls.recv_timeout(Duration::from_secs(60)).expect("a call");
        stop.store(true, Ordering::SeqCst);
        sender.join().unwrap();
        assert!(!changes_were_over, "reported only once the changes stopped");
    }

    /// Through the platform's watcher: inotify reports a directory's events in order, so
    /// once the write of `b` is reported, the reads of `a` and the write of the unconcerned
    /// `x` before it have been seen, and must not have been reported.
    #[test]
    fn a_real_watch_reports_writes_to_concerned_files_only() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, x) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("x"),
        );
        std::fs::write(&a, "a").unwrap();
        std::fs::write(&b, "b").unwrap();
        let (tx, rx) = mpsc::channel();
        let quiet = Duration::from_millis(50);
        let unconcerned = x.clone();
        let mut changes = Changes::start(
            quiet,
            move |p| p != unconcerned,
            move |paths| {
                let _ = tx.send(paths);
            },
        )
        .unwrap();
        changes.watch(dir.path()).unwrap();

        for _ in 0..3 {
            assert_eq!(std::fs::read(&a).unwrap(), b"a");
        }
        std::fs::write(&x, "x").unwrap();
        std::fs::write(&b, "b2").unwrap();
        let first = rx.recv_timeout(Duration::from_secs(30)).expect("a change");
        assert_eq!(first, [b]);

        std::fs::write(&a, "a2").unwrap();
        let second = rx.recv_timeout(Duration::from_secs(30)).expect("a change");
        assert_eq!(second, [a]);
    }
}

//! The mapping file followed: loaded at start (a file that cannot be used stops the
//! server, naming its line), then read again whenever its directory changes, as config
//! and TLS files are. The directories watched are the file's and its link target's, so a
//! Kubernetes ConfigMap's `..data` link swap is seen; a new version that cannot be used is
//! logged once, with its line, and the mapping in force stays.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tracing::{info, warn};

use super::Mapping;
use super::parse::{MappingError, from_bytes, read};
use crate::file_watch::{Changes, directories};

/// A followed mapping file. Dropping it stops following.
#[derive(Debug)]
pub struct MappingWatch {
    /// Keeps the watch, and with it the reloads, alive.
    _changes: Changes,
}

/// What a reload needs.
struct Reloader<F> {
    /// The mapping file.
    path: PathBuf,
    /// Where each new mapping goes.
    apply: F,
    /// The bytes last read, and the problem they had, if any (logged once).
    seen: Mutex<(Vec<u8>, Option<MappingError>)>,
}

impl MappingWatch {
    /// Loads the mapping file at `path`, hands it to `apply`, and follows the file: each
    /// change that makes a valid mapping is handed to `apply`, `debounce` after the last
    /// event.
    ///
    /// # Errors
    /// The file cannot be read, is not a valid mapping (the error names its line), or its
    /// directory cannot be watched.
    pub fn start(
        path: &Path,
        debounce: Duration,
        apply: impl Fn(Arc<Mapping>) + Send + Sync + 'static,
    ) -> Result<MappingWatch, MappingError> {
        let bytes = read(path)?;
        let mapping = from_bytes(path, &bytes)?;
        warn_ignored(path, &mapping);
        apply(Arc::new(mapping));
        let reloader = Reloader {
            path: path.to_path_buf(),
            apply,
            seen: Mutex::new((bytes, None)),
        };
        let unwatchable = |e: notify::Error| MappingError {
            path: path.to_path_buf(),
            line: None,
            message: format!("cannot watch it: {e}"),
        };
        let mut changes =
            Changes::start(debounce, |_| true, move |_| reloader.reload()).map_err(unwatchable)?;
        for dir in directories([path]) {
            changes.watch(&dir).map_err(unwatchable)?;
        }
        Ok(MappingWatch { _changes: changes })
    }
}

impl<F: Fn(Arc<Mapping>)> Reloader<F> {
    /// Reads the file again: a change that makes a valid mapping is applied, one that does
    /// not is logged (once) and leaves the mapping in force.
    fn reload(&self) {
        let mut seen = self.seen.lock();
        let loaded = match read(&self.path) {
            Ok(bytes) if bytes == seen.0 => return,
            Ok(bytes) => {
                let mapping = from_bytes(&self.path, &bytes);
                seen.0 = bytes;
                mapping
            }
            Err(error) => Err(error),
        };
        match loaded {
            Ok(mapping) => {
                warn_ignored(&self.path, &mapping);
                (self.apply)(Arc::new(mapping));
                seen.1 = None;
                info!(path = %self.path.display(), "metrics mapping reloaded");
            }
            Err(error) => {
                if seen.1.as_ref() != Some(&error) {
                    warn!("{error}; the metrics mapping in force stays");
                }
                seen.1 = Some(error);
            }
        }
    }
}

/// Warns of the keys of the file at `path` that the format does not have.
fn warn_ignored(path: &Path, mapping: &Mapping) {
    if !mapping.ignored().is_empty() {
        warn!(
            "--metrics-mapping {}: ignoring keys the format does not have: {}",
            path.display(),
            mapping.ignored().join(", ")
        );
    }
}

//! A port's TLS config, rebuilt when its files change on disk, without a restart.
//!
//! The directories holding the files are watched (non-recursively: a Kubernetes secret
//! swaps its `..data` link there, editors rename files there), the parent of each file's
//! link target too. After an event (debounced), the files are read again; when their
//! bytes changed and make a valid config, it replaces the current one: handshakes from
//! then on present the new certificate, connections already open keep theirs. Files
//! that do not make a valid config (a certificate written before its key, say) are
//! logged once per distinct error and the previous config stays in force.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::ServerConfig;
use tokio_rustls::TlsAcceptor;
use tracing::{info, warn};

use super::tls::{Protocols, TlsFiles, build};
use super::tls_error::TlsError;
use crate::file_watch::{Changes, directories};

/// Quiet time after a file event before the files are read again.
const DEBOUNCE: Duration = Duration::from_millis(200);

/// The current TLS config of a port, kept up to date with its files.
pub struct TlsSource {
    /// The config in force, shared with the watcher's `Reloader`, which swaps in each valid
    /// new one.
    current: Arc<ArcSwap<ServerConfig>>,
    /// Keeps the watch alive.
    _watcher: Changes,
}

impl std::fmt::Debug for TlsSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsSource").finish_non_exhaustive()
    }
}

impl TlsSource {
    /// Loads `files` and watches them.
    ///
    /// # Errors
    /// The files do not make a valid config, or cannot be watched.
    pub fn load(files: TlsFiles, protocols: Protocols) -> Result<Arc<Self>, TlsError> {
        let config = build(&files, protocols)?;
        let current = Arc::new(ArcSwap::from_pointee(config));
        let reloader = Reloader {
            seen: Mutex::new((contents(&files), None)),
            files: files.clone(),
            protocols,
            current: current.clone(),
        };
        let dirs = directories(files.paths());
        // Every entry of these directories concerns the files: a secret's `..data` link
        // swap and an editor's rename both show up as other names than the files'.
        let mut watcher = Changes::start(DEBOUNCE, |_| true, move |_| reloader.reload())
            .map_err(|e| TlsError(format!("cannot watch the TLS files: {e}")))?;
        for dir in dirs {
            watcher
                .watch(&dir)
                .map_err(|e| TlsError(format!("cannot watch {}: {e}", dir.display())))?;
        }
        Ok(Arc::new(Self {
            current,
            _watcher: watcher,
        }))
    }

    /// An acceptor with the config in force now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.current.load_full())
    }
}

/// What the watcher's callback needs.
struct Reloader {
    /// The files to read again after each event.
    files: TlsFiles,
    /// What the port speaks, so that a rebuilt config offers the same ALPN protocols.
    protocols: Protocols,
    /// Where a valid new config goes; the `TlsSource` hands it to new handshakes.
    current: Arc<ArcSwap<ServerConfig>>,
    /// The files' bytes last read, and the error they gave (so an unchanged error is
    /// logged once).
    seen: Mutex<(Vec<u8>, Option<TlsError>)>,
}

impl Reloader {
    fn reload(&self) {
        let bytes = contents(&self.files);
        let mut seen = self.seen.lock();
        if bytes == seen.0 {
            return;
        }
        seen.0 = bytes;
        match build(&self.files, self.protocols) {
            Ok(config) => {
                self.current.store(Arc::new(config));
                seen.1 = None;
                info!(cert = %self.files.cert.display(), "TLS files reloaded; new handshakes use them");
            }
            Err(error) => {
                if seen.1.as_ref() != Some(&error) {
                    warn!(%error, "TLS files rejected; the previous certificate stays in use");
                }
                seen.1 = Some(error);
            }
        }
    }
}

/// The bytes of every file, each followed by a separator (unreadable files count as empty).
fn contents(files: &TlsFiles) -> Vec<u8> {
    let mut bytes = Vec::new();
    for path in files.paths() {
        bytes.extend(std::fs::read(path).unwrap_or_default());
        bytes.push(0);
    }
    bytes
}

//! The operator endpoints' shared secret (`--admin-token-file`).
//!
//! The token is the file's content with surrounding whitespace trimmed. A request proves it
//! knows the token with `Authorization: Bearer <token>`, or with Basic credentials whose
//! password is the token (any user name), so that a browser can prompt for it.
//!
//! # The file over time
//! - At start the file must be readable and hold a token: otherwise the server refuses to
//!   start ([`AdminToken::load`]), rather than serve its endpoints unguarded or locked.
//! - It is read again every [`RECHECK`] ([`AdminToken::watch`]), so that a rotated token
//!   (a rewritten file, or a Kubernetes Secret whose symlinks were swapped) applies without
//!   a restart. The old token is refused from then on.
//! - If the file later cannot be read, is empty or too long, the last token stays in force
//!   and the problem is logged once, until the file is good again; an empty file caught
//!   halfway through a rewrite then neither opens the endpoints nor locks operators out.
//!
//! # Comparison
//! Both sides are hashed (SHA-256) and the digests compared in constant time, so that
//! neither the time to refuse a guess nor its length tells how much of it was right.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use base64::Engine as _;
use parking_lot::Mutex;
use subtle::ConstantTimeEq;
use tracing::{info, warn};

/// How often the token file is read again.
pub const RECHECK: Duration = Duration::from_secs(1);

/// The longest token file read; anything longer is refused as not a token.
const MAX_FILE_BYTES: u64 = 4096;

/// The token in force, as a digest, and where it comes from.
#[derive(Debug)]
pub struct AdminToken {
    /// The token file.
    path: PathBuf,
    /// SHA-256 of the token in force; swapped whole when the file changes.
    digest: ArcSwap<[u8; 32]>,
    /// The last problem logged while re-reading the file, so that it is logged once; a
    /// `parking_lot` mutex, taken only by the re-reading task.
    failing: Mutex<Option<String>>,
}

/// Why the token file gives no token.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// The file cannot be read.
    #[error("--admin-token-file {path}: cannot read it: {error}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// The file holds only whitespace.
    #[error("--admin-token-file {path}: the file is empty (it must hold the token)")]
    Empty {
        /// The file.
        path: PathBuf,
    },
    /// The file is longer than a token can be.
    #[error("--admin-token-file {path}: longer than {MAX_FILE_BYTES} bytes, not a token")]
    TooLong {
        /// The file.
        path: PathBuf,
    },
}

impl AdminToken {
    /// Reads the token from `path`.
    ///
    /// # Errors
    /// The file cannot be read, holds only whitespace, or is longer than 4096 bytes.
    pub fn load(path: &Path) -> Result<Arc<AdminToken>, TokenError> {
        let digest = read_digest(path)?;
        Ok(Arc::new(AdminToken {
            path: path.to_path_buf(),
            digest: ArcSwap::from_pointee(digest),
            failing: Mutex::new(None),
        }))
    }

    /// Whether an `Authorization` header value carries the token.
    pub fn accepts(&self, authorization: Option<&[u8]>) -> bool {
        match authorization.and_then(presented) {
            Some(secret) => bool::from(digest(&secret).ct_eq(&**self.digest.load())),
            None => false,
        }
    }

    /// Reads the file again: a new token replaces the one in force; a problem keeps the
    /// one in force and is logged once.
    pub fn reread(&self) {
        let mut failing = self.failing.lock();
        match read_digest(&self.path) {
            Ok(digest) => {
                if *self.digest.load_full() != digest {
                    self.digest.store(Arc::new(digest));
                    info!(path = %self.path.display(), "admin token file changed: new token in force");
                } else if failing.is_some() {
                    info!(path = %self.path.display(), "admin token file readable again");
                }
                *failing = None;
            }
            Err(e) => {
                let why = e.to_string();
                if failing.as_deref() != Some(&why) {
                    warn!("{why}; the last token read stays in force");
                    *failing = Some(why);
                }
            }
        }
    }

    /// Re-reads the file every [`RECHECK`] until the task is aborted.
    pub fn watch(self: Arc<Self>) -> tokio::task::JoinHandle<()> {
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(RECHECK);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await; // the first tick is immediate; the file was just read
            loop {
                tick.tick().await;
                let token = self.clone();
                // File I/O blocks; a slow file system must not hold up a runtime worker.
                let _ = tokio::task::spawn_blocking(move || token.reread()).await;
            }
        })
    }
}

/// The secret an `Authorization` value presents: a Bearer token, or a Basic password.
fn presented(value: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(value).ok()?.trim();
    let (scheme, rest) = text.split_once(' ')?;
    let rest = rest.trim_start();
    if scheme.eq_ignore_ascii_case("bearer") {
        Some(rest.as_bytes().to_vec())
    } else if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let colon = decoded.iter().position(|&b| b == b':')?;
        Some(decoded[colon + 1..].to_vec())
    } else {
        None
    }
}

fn digest(bytes: &[u8]) -> [u8; 32] {
    let hash = ring::digest::digest(&ring::digest::SHA256, bytes);
    let mut out = [0; 32];
    out.copy_from_slice(hash.as_ref());
    out
}

fn read_digest(path: &Path) -> Result<[u8; 32], TokenError> {
    use std::io::Read as _;
    let unreadable = |error| TokenError::Unreadable {
        path: path.to_path_buf(),
        error,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE_BYTES + 1).read_to_end(&mut bytes))
        .map_err(unreadable)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(TokenError::TooLong {
            path: path.to_path_buf(),
        });
    }
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(TokenError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok(digest(token))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn token_file(text: &str) -> tempfile::NamedTempFile {
        let mut file = tempfile::NamedTempFile::new().unwrap();
        file.write_all(text.as_bytes()).unwrap();
        file
    }

    fn basic(user_password: &str) -> Vec<u8> {
        let encoded = base64::engine::general_purpose::STANDARD.encode(user_password);
        format!("Basic {encoded}").into_bytes()
    }

    #[test]
    fn bearer_and_basic_with_any_user_carry_the_trimmed_token() {
        let file = token_file("\n  s3cret:x \n");
        let token = AdminToken::load(file.path()).unwrap();
        assert!(token.accepts(Some(b"Bearer s3cret:x")));
        assert!(token.accepts(Some(b"bearer  s3cret:x")));
        assert!(token.accepts(Some(&basic("admin:s3cret:x"))));
        assert!(token.accepts(Some(&basic(":s3cret:x"))));
        for refused in [
            &b"Bearer s3cret"[..],
            b"Bearer s3cret:xx",
            b"Bearer ",
            b"s3cret:x",
            b"Token s3cret:x",
            &basic("s3cret:x"), // the token as the user name, not the password
            b"Basic !!!",
        ] {
            assert!(
                !token.accepts(Some(refused)),
                "{}",
                String::from_utf8_lossy(refused)
            );
        }
        assert!(!token.accepts(None));
    }

    #[test]
    fn a_missing_or_empty_file_is_refused_at_start() {
        let file = token_file(" \n\t");
        assert!(matches!(
            AdminToken::load(file.path()),
            Err(TokenError::Empty { .. })
        ));
        assert!(matches!(
            AdminToken::load(Path::new("/nonexistent/token")),
            Err(TokenError::Unreadable { .. })
        ));
        let file = token_file(&"x".repeat(4097));
        assert!(matches!(
            AdminToken::load(file.path()),
            Err(TokenError::TooLong { .. })
        ));
    }

    #[test]
    fn rereading_swaps_a_new_token_and_keeps_the_last_through_problems() {
        let file = token_file("one");
        let token = AdminToken::load(file.path()).unwrap();
        std::fs::write(file.path(), "two\n").unwrap();
        token.reread();
        assert!(token.accepts(Some(b"Bearer two")));
        assert!(!token.accepts(Some(b"Bearer one")));
        std::fs::write(file.path(), "").unwrap();
        token.reread();
        assert!(token.accepts(Some(b"Bearer two")), "empty: last token kept");
        std::fs::remove_file(file.path()).unwrap();
        token.reread();
        assert!(token.accepts(Some(b"Bearer two")), "gone: last token kept");
    }
}

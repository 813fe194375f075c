//! Wiring: settings → config, store, service → gRPC and HTTP servers, the config source
//! followed, shutdown.
//!
//! [`serve`] takes bound listeners and a shutdown future, so tests run the real server on
//! port 0 and signal handling stays in `main`.
//!
//! - `settings`: [`Settings`], what a server needs, with the command line's defaults.
//! - `build`: [`build_service`], config and store → the service (also `meshlimit explain`).
//! - `serve`: [`serve`], its steps and the drain, in order.
//! - `parts`: what a server is made of before its first config (service, metrics, quotas).
//! - `operator`: the operator endpoints' state and one server per operator port.
//! - `health`: gRPC health following the store, the config and the drain.
//! - `source`: the first config and the task following its source.
//! - `reporter`: what the metrics read about the source, the connections and the quotas.
//! - `tasks`: [`serve`]'s tasks, owned by one guard.

mod build;
mod health;
mod operator;
mod parts;
mod reporter;
mod serve;
mod settings;
mod source;
mod tasks;

pub use build::build_service;
pub use serve::{Listeners, serve};
pub use settings::Settings;

use crate::config::render_errors;
use crate::error::ConfigError;
use crate::net::TlsError;
use crate::store::redis::SetupError;

/// Why the server could not start or stopped abnormally.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The initial config is invalid: every problem found in it.
    #[error("invalid config:\n{}", render_errors(.0))]
    Config(Vec<ConfigError>),
    /// The config source cannot be read at startup (PostgreSQL or the control plane
    /// unreachable): why.
    #[error("cannot read the config:\n{}", render_errors(.0))]
    Unreachable(Vec<ConfigError>),
    /// The config path cannot be watched.
    #[error("cannot watch the config: {0}")]
    Watch(#[from] notify::Error),
    /// The HTTP server failed.
    #[error("HTTP server: {0}")]
    Http(#[from] std::io::Error),
    /// A server's task panicked or was cancelled.
    #[error("a server task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
    /// The Redis URL is invalid.
    #[error("{0}")]
    Redis(#[from] SetupError),
    /// A TLS certificate, key or CA file is missing or invalid.
    #[error("TLS: {0}")]
    Tls(#[from] TlsError),
    /// `--admin-token-file` gives no token.
    #[error("{0}")]
    AdminToken(#[from] crate::admin_token::TokenError),
    /// Tracing cannot start with its settings.
    #[error("{0}")]
    Tracing(#[from] crate::traces::TracingError),
    /// `--metrics-mapping` cannot be read, is not a valid mapping, or cannot be watched.
    #[error("{0}")]
    Mapping(#[from] crate::metrics::MappingError),
}

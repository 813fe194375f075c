//! Config from an xDS control plane: an ADS stream (state of the world) subscribed to
//! `ratelimit.config.ratelimit.v3.RateLimitConfig`, as envoyproxy/ratelimit's
//! `CONFIG_TYPE=GRPC_XDS_SOTW` (Envoy Gateway's way).

mod options;

pub use options::{Backoff, XdsOptions, XdsTls};

use super::{History, Loaded};
use crate::config::SharedConfig;
use crate::error::ConfigError;

/// The type URL meshlimit subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Connects, waits for the control plane's first snapshot and validates it (for
/// `validate`, `explain`).
///
/// # Errors
/// Every problem of the snapshot, or why the control plane could not be reached.
pub async fn first(options: &XdsOptions) -> Result<Loaded, Vec<ConfigError>> {
    let _ = options;
    unimplemented!("xds::first")
}

/// Follows the control plane for ever: ACKs each valid snapshot after swapping it in,
/// NACKs an invalid one (keeping the last good config), reconnects with jittered backoff.
pub async fn follow(options: XdsOptions, config: SharedConfig, history: std::sync::Arc<History>) {
    let _ = (options, config, history);
    unimplemented!("xds::follow")
}

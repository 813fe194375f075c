//! Config from an xDS control plane: an ADS stream (state of the world) subscribed to
//! `ratelimit.config.ratelimit.v3.RateLimitConfig`, as envoyproxy/ratelimit's
//! `CONFIG_TYPE=GRPC_XDS_SOTW` (Envoy Gateway's way).
//!
//! Each response is the whole config: its resources are validated as descriptor files
//! (`resources`), then swapped in by [`crate::source::apply`] and ACKed, or NACKed with
//! the errors while the last good config stays (`stream`). When the stream ends, the
//! follower reconnects after a jittered exponential wait ([`crate::source::backoff`])
//! over a plain or TLS connection (`channel`); serving goes on meanwhile.
//!
//! - `options`: [`XdsOptions`], [`XdsTls`].
//! - `resources`: a snapshot's `RateLimitConfig`s → a validated config.
//! - `stream`: one ADS stream: subscribe, ACK, NACK.
//! - `channel`: the endpoint and its TLS.

mod channel;
mod options;
mod resources;
mod stream;

pub use crate::source::backoff::Backoff;
pub use options::{XdsOptions, XdsTls};

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use envoy_types::pb::envoy::service::discovery::v3::DiscoveryResponse;
use tracing::{debug, info, warn};

use super::{History, Loaded, apply};
use crate::config::{Config, SharedConfig, SharedDomains, render_errors};
use crate::error::{ConfigError, ConfigErrorKind};
use crate::source::backoff::Waits;
use stream::Ads;

/// The type URL meshlimit subscribes to.
pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Bound on [`first`]: connecting, subscribing and the first response.
const FIRST_RESPONSE_TIMEOUT: Duration = Duration::from_secs(15);

/// Bound on [`first`] waiting for the control plane to close the stream after the reply,
/// so that the ACK or NACK is delivered before the connection goes.
const CLOSE_TIMEOUT: Duration = Duration::from_secs(2);

/// Connects, waits for the control plane's first snapshot and validates it (for
/// `validate`, `explain`); the snapshot is ACKed or NACKed, then the stream closed.
///
/// # Errors
/// Every problem of the snapshot, or why the control plane could not be reached (kind
/// [`ConfigErrorKind::SourceUnreachable`]; no response within 15 s counts as that).
pub async fn first(options: &XdsOptions) -> Result<Loaded, Vec<ConfigError>> {
    let unreachable = |why: String| vec![unreachable(options, why)];
    let opened = async {
        let mut ads = Ads::open(options, "").await?;
        let response = ads.next().await?;
        Ok::<_, String>((ads, response))
    };
    let (ads, mut response) = match tokio::time::timeout(FIRST_RESPONSE_TIMEOUT, opened).await {
        Ok(Ok(opened)) => opened,
        Ok(Err(why)) => return Err(unreachable(why)),
        Err(_) => {
            return Err(unreachable(format!(
                "no response from the control plane within {FIRST_RESPONSE_TIMEOUT:?}"
            )));
        }
    };
    let checked = validate(&mut response, options.domains).await;
    let replied = match &checked {
        Ok(_) => ads.ack(&response).await,
        Err(errors) => ads.nack("", &response, render_errors(errors)).await,
    };
    if let Err(why) = replied {
        debug!("the reply to the control plane was not sent: {why}");
    }
    let _ = tokio::time::timeout(CLOSE_TIMEOUT, ads.close()).await;
    checked.map(|config| Loaded {
        config,
        version: Some(response.version_info),
    })
}

/// The control plane could not be reached, or gave no response: why, named by its
/// address.
fn unreachable(options: &XdsOptions, why: String) -> ConfigError {
    ConfigError::new(
        ConfigErrorKind::SourceUnreachable,
        Path::new(&format!("xds:{}", options.server)),
        None,
        None,
        why,
    )
}

/// Follows the control plane for ever: ACKs each valid snapshot after swapping it in,
/// NACKs an invalid one (keeping the last good config), reconnects with jittered backoff.
pub async fn follow(options: XdsOptions, config: SharedConfig, history: Arc<History>) {
    let mut follower = Follower {
        shared: config,
        history,
        acked: String::new(),
        reachable: None,
    };
    let mut waits = Waits::new(options.backoff);
    loop {
        let mut delivered = false;
        let why = match Ads::open(&options, &follower.acked).await {
            Ok(mut ads) => follower.stream(&mut ads, &options, &mut delivered).await,
            Err(why) => why,
        };
        if delivered {
            waits.reset();
        }
        let wait = waits.next_wait();
        if follower.reachable != Some(false) {
            warn!(
                server = %options.server,
                "xDS control plane unreachable ({why}); the running config stays in force; \
                 reconnecting with backoff"
            );
            follower.reachable = Some(false);
            follower.history.record_outage(&unreachable(&options, why));
        } else {
            debug!(server = %options.server, ?wait, "xDS control plane still unreachable: {why}");
        }
        tokio::time::sleep(wait).await;
    }
}

/// What [`follow`] keeps across streams.
struct Follower {
    /// The running config.
    shared: SharedConfig,
    /// The source's history.
    history: Arc<History>,
    /// The last version ACKed (empty: none), sent when resubscribing and in NACKs.
    acked: String,
    /// Whether the last stream delivered responses (`None`: nothing tried yet), so that
    /// an outage and the recovery are each logged once.
    reachable: Option<bool>,
}

impl Follower {
    /// Takes responses from `ads` until it ends; why it ended. `delivered` says whether
    /// any response came.
    async fn stream(
        &mut self,
        ads: &mut Ads,
        options: &XdsOptions,
        delivered: &mut bool,
    ) -> String {
        loop {
            let mut response = match ads.next().await {
                Ok(response) => response,
                Err(why) => return why,
            };
            *delivered = true;
            if self.reachable != Some(true) {
                info!(server = %options.server, node = %options.node_id, "receiving config from the xDS control plane");
                self.reachable = Some(true);
            }
            let replied = match validate(&mut response, options.domains).await {
                Ok(config) => {
                    let version = response.version_info.clone();
                    let loaded = Loaded {
                        config,
                        version: Some(version.clone()),
                    };
                    apply(Ok(loaded), &self.shared, &self.history);
                    let replied = ads.ack(&response).await;
                    self.acked = version;
                    replied
                }
                Err(errors) => {
                    let text = render_errors(&errors);
                    apply(Err(errors), &self.shared, &self.history);
                    ads.nack(&self.acked, &response, text).await
                }
            };
            if let Err(why) = replied {
                return why;
            }
        }
    }
}

/// The config of `response`'s resources (taken out of it), a domain of several resources
/// taken as `domains` says, validated off the runtime's threads: validation parses each
/// resource on a thread of its own.
async fn validate(
    response: &mut DiscoveryResponse,
    domains: SharedDomains,
) -> Result<Config, Vec<ConfigError>> {
    let resources = std::mem::take(&mut response.resources);
    let checked = tokio::task::spawn_blocking(move || resources::config(&resources, domains)).await;
    checked.unwrap_or_else(|join| std::panic::resume_unwind(join.into_panic()))
}

//! The operator page: `GET /` from a browser. One page answers an incident's questions —
//! is the limiter refusing traffic, by which rule, whom, did the config edit load, is the
//! store healthy, why was this request refused — from the server alone: the HTML, script
//! and style are in the binary ([`assets`]), and the page polls two JSON documents
//! ([`config_doc`], [`state`]). Rates and their last [`timeline::WINDOW`] seconds are sampled by the server
//! once a second ([`Page::spawn_sampler`]), so the page shows the recent past as soon as it
//! opens.
//!
//! Everything it holds is bounded whatever callers send: the timeline has at most
//! [`timeline::MAX_CHARTED`] rules, the refused descriptors a fixed number of entries each
//! cut to a fixed length (see [`crate::metrics::refusals`]). The decision path pays one
//! relaxed atomic addition per descriptor, and a short lock per refused one, never waited
//! for.

pub mod assets;
pub mod config_doc;
pub mod routes;
pub mod state;
pub mod store_doc;
pub mod timeline;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::task::JoinHandle;

use crate::metrics::Metrics;
use crate::metrics::refusals::WINDOW_SECONDS;
use crate::rlqs::Registry;
use crate::service::Service;
use crate::source::History;
use timeline::Timeline;

/// What the page reads, and its timeline.
#[derive(Debug)]
pub struct Page {
    /// The service: its config, store and defaults.
    pub service: Service,
    /// The service's statistics: per-rule counts and refused descriptors.
    pub metrics: Arc<Metrics>,
    /// What the config source has done: version, last change, last error.
    pub history: Arc<History>,
    /// The quota service's streams and buckets.
    pub quotas: Arc<Registry>,
    /// The sampled rates.
    timeline: Mutex<Timeline>,
}

impl Page {
    /// A page over these parts, with an empty timeline.
    pub fn new(
        service: Service,
        metrics: Arc<Metrics>,
        history: Arc<History>,
        quotas: Arc<Registry>,
    ) -> Self {
        Self {
            service,
            metrics,
            history,
            quotas,
            timeline: Mutex::new(Timeline::default()),
        }
    }

    /// Samples every rule's counts once a second, and starts a new window of refused
    /// descriptors every [`WINDOW_SECONDS`]; runs until aborted.
    pub fn spawn_sampler(self: &Arc<Self>) -> JoinHandle<()> {
        let page = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                page.sample();
            }
        })
    }

    /// One tick of the sampler.
    pub fn sample(&self) {
        let mut rules = Vec::new();
        self.metrics
            .visit_rules(|view| rules.push(view.counts.clone()));
        let mut timeline = self.timeline.lock();
        timeline.tick(rules.iter());
        if timeline.seq.is_multiple_of(WINDOW_SECONDS) {
            self.metrics.refusals().rotate();
        }
    }
}

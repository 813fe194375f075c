//! What a server is made of before it waits for its first config: the service and its
//! metrics, the connections' and the quota service's state, the admin token, tracing.
//! Built first, so that a bad Redis URL, token file, metrics mapping or tracing setting is
//! refused at once.

use std::sync::Arc;

use super::build::{count, uncounted};
use super::reporter::ServerReporter;
use super::{Error, Settings};
use crate::admin_token::AdminToken;
use crate::config::Config;
use crate::metrics::{MappingWatch, Metrics};
use crate::net::{self, Connections};
use crate::rlqs::Registry;
use crate::service::Service;
use crate::source::History;
use crate::traces::{self, Tracing};

/// What a server is made of before it waits for its first config.
pub(super) struct Parts {
    /// What the config source has done.
    pub(super) history: Arc<History>,
    /// The service answering requests, counted by metrics that report on the rest.
    pub(super) service: Service,
    /// The service's metrics.
    pub(super) metrics: Arc<Metrics>,
    /// The connection counters of every port.
    pub(super) connections: Arc<Connections>,
    /// The rate limit quota service's state.
    pub(super) quotas: Arc<Registry>,
    /// `--admin-token-file`'s token, if any.
    pub(super) admin_token: Option<Arc<AdminToken>>,
    /// OpenTelemetry tracing (`--tracing`), if on.
    pub(super) tracing: Option<Tracing>,
    /// `--metrics-mapping`, followed while the parts live.
    pub(super) _mapping: Option<MappingWatch>,
}

impl Parts {
    /// Builds the parts for `settings`, refusing at once a bad Redis URL, token file or
    /// tracing setting (before waiting on the source).
    ///
    /// # Errors
    /// The first of those problems.
    pub(super) fn build(settings: &Settings) -> Result<Parts, Error> {
        let history = Arc::new(History::new(
            settings.config.kind(),
            settings.config.describe(),
        ));
        let service = uncounted(settings, Config::default())?;
        let connections = Connections::new(
            settings
                .max_connections
                .unwrap_or_else(net::descriptors::default_max_connections),
        );
        let quotas = Arc::new(Registry::new(
            service.config().clone(),
            settings.algorithm,
            settings.rlqs_unmatched,
            service.store(),
            service.clock().clone(),
            settings.rlqs_assignment_ttl,
        ));
        let reporter = ServerReporter {
            history: history.clone(),
            connections: connections.clone(),
            quotas: quotas.clone(),
        };
        let (service, metrics) = count(settings, service, Some(reporter));
        let admin_token = match &settings.admin_token_file {
            Some(path) => Some(AdminToken::load(path)?),
            None => None,
        };
        let mapping = match &settings.metrics_mapping {
            Some(path) => {
                let metrics = metrics.clone();
                let apply = move |mapping| metrics.set_mapping(Some(mapping));
                Some(MappingWatch::start(path, settings.reload_debounce, apply)?)
            }
            None => None,
        };
        let tracing = match &settings.tracing {
            Some(options) => Some(traces::start(options, |name| std::env::var(name).ok())?),
            None => None,
        };
        Ok(Parts {
            history,
            service,
            metrics,
            connections,
            quotas,
            admin_token,
            tracing,
            _mapping: mapping,
        })
    }

    /// What sampled requests are traced with, if tracing is on.
    pub(super) fn traces(&self) -> Option<traces::Traces> {
        self.tracing.as_ref().map(|t| t.traces.clone())
    }
}

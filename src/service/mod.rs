//! The rate-limit service, free of protobuf: a request's [`Plan`], one atomic store call
//! for all its limited descriptors, the per-rule statistics, and the [`Response`].

mod answer;

use std::sync::Arc;

pub use answer::{CurrentLimit, LimitStatus, Response, Status, binding};

use crate::clock::{Clock, Stopwatch};
use crate::config::SharedConfig;
use crate::error::RequestError;
use crate::metrics::Metrics;
use crate::plan::{Checks, Plan, PlanDefaults};
use crate::request::RequestDescriptor;
use crate::request_limits::RequestLimits;
use crate::rules::Algorithm;
use crate::store::{Reports, Store};

/// The rate-limit service: config, store and clock. Cheap to clone (handles only), so
/// that the gRPC and HTTP servers each hold one.
#[derive(Debug, Clone)]
pub struct Service {
    /// The running config, swapped whole by reloads; each request decides on one snapshot.
    config: SharedConfig,
    /// Where bucket state lives.
    store: Store,
    /// The time decisions are made at: the system clock, or a manual one in tests.
    clock: Arc<dyn Clock>,
    /// The default algorithm and the request caps, which plans take from the service.
    defaults: PlanDefaults,
    /// Global shadow mode: over-limit requests are answered OK overall.
    global_shadow: bool,
    /// The statistics requests are counted in; `None` counts nothing. Not process-global:
    /// several services in one process (tests) keep separate sets.
    metrics: Option<Arc<Metrics>>,
}

impl Service {
    /// A service answering from `config` with `store`, counting nothing; rules without an
    /// `algorithm` use `default_algorithm`.
    pub fn new(
        config: SharedConfig,
        store: Store,
        clock: Arc<dyn Clock>,
        default_algorithm: Algorithm,
    ) -> Self {
        Self {
            config,
            store,
            clock,
            defaults: PlanDefaults {
                algorithm: default_algorithm,
                limits: RequestLimits::default(),
            },
            global_shadow: false,
            metrics: None,
        }
    }

    /// The same service counting its requests in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same service refusing requests over `limits` (the defaults otherwise).
    #[must_use]
    pub fn with_request_limits(mut self, limits: RequestLimits) -> Self {
        self.defaults.limits = limits;
        self
    }

    /// The same service in global shadow mode (the Go server's `SHADOW_MODE`): a request
    /// over its limits is still answered OK overall, while each descriptor's status keeps
    /// telling the truth.
    #[must_use]
    pub fn with_global_shadow(mut self, on: bool) -> Self {
        self.global_shadow = on;
        self
    }

    /// Whether global shadow mode is on.
    pub fn global_shadow(&self) -> bool {
        self.global_shadow
    }

    /// The clock decisions are made with.
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The algorithm of rules that do not name one.
    pub fn default_algorithm(&self) -> Algorithm {
        self.defaults.algorithm
    }

    /// What plans take from the service.
    pub fn plan_defaults(&self) -> &PlanDefaults {
        &self.defaults
    }

    /// The statistics requests are counted in, if any.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// The running config.
    pub fn config(&self) -> &SharedConfig {
        &self.config
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Answers one `ShouldRateLimit` request.
    ///
    /// # Errors
    /// Empty domain, no descriptors, a request over the caps, an override without a valid
    /// unit, or a store failure.
    pub async fn should_rate_limit<D: RequestDescriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
    ) -> Result<Response, RequestError> {
        let mut decided_at = None;
        let Some(metrics) = &self.metrics else {
            return self
                .decide(domain, descriptors, hits_addend, &mut decided_at)
                .await;
        };
        let started = Stopwatch::start();
        let answer = self
            .decide(domain, descriptors, hits_addend, &mut decided_at)
            .await;
        let decided_at = decided_at.unwrap_or_else(Stopwatch::start);
        metrics.answered(started.until(decided_at), answer.as_ref().err());
        answer
    }

    /// Decides a request; with statistics on, `decided_at` gets the clock reading that
    /// ended the store call, so that the response time needs no reading of its own.
    async fn decide<D: RequestDescriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
        decided_at: &mut Option<Stopwatch>,
    ) -> Result<Response, RequestError> {
        let config = self.config.load();
        // Built in place: see `Plan::empty`.
        let mut plan = Plan::empty(&config, domain);
        plan.fill(domain, descriptors, hits_addend, &self.defaults)?;
        if !plan.knows_domain() {
            if let Some(metrics) = &self.metrics {
                metrics.domain_not_found(domain, descriptors.len());
            }
            return Ok(Response::no_limits(descriptors.len()));
        }
        let mut checks = Checks::new();
        plan.push_checks(&mut checks);
        let reports = if checks.is_empty() {
            Reports::new()
        } else {
            let decided = self.store.check(&checks, self.clock.now());
            match &self.metrics {
                Some(metrics) => {
                    let (reports, ended) = metrics.time_store(decided).await;
                    *decided_at = Some(ended);
                    reports?
                }
                None => decided.await?,
            }
        };
        let (response, over_before_shadow) = Response::new(&plan, &reports, self.global_shadow);
        if let Some(metrics) = &self.metrics {
            metrics.count_hits(&config, domain, descriptors, &plan, &reports);
            if over_before_shadow && self.global_shadow {
                metrics.global_shadow();
            }
        }
        Ok(response)
    }
}

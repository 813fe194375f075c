//! The rate-limit service, free of protobuf: a request's [`Plan`], one atomic store call
//! for all its limited descriptors, the per-rule statistics, and the [`Answer`].

mod answer;
mod decision;
mod metadata;

use std::sync::Arc;

pub use answer::{Answer, CurrentLimit, DescriptorStatus, LimitStatus};
pub use decision::Decision;
use opentelemetry::KeyValue;

use crate::clock::{Clock, Stopwatch};
use crate::config::{Config, SharedConfig};
use crate::error::{RequestError, StoreError};
use crate::metrics::{DescriptorExpiries, Metrics};
use crate::plan::{Checks, Plan, PlanDefaults};
use crate::request::{Request, RequestDescriptor};
use crate::request_caps::RequestCaps;
use crate::rules::Algorithm;
use crate::store::{Check, Expiries, MemoryStore, Reports, Store};
use crate::traces::{REDIS_SPAN, RequestSpan};

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
    /// Answers carry dynamic metadata (see [`Answer::dynamic_metadata`]).
    dynamic_metadata: bool,
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
                caps: RequestCaps::default(),
                global_quota: false,
            },
            global_shadow: false,
            dynamic_metadata: false,
            metrics: None,
        }
    }

    /// The same service counting its requests in `metrics`.
    #[must_use]
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The same service refusing requests over `caps` (the defaults otherwise).
    #[must_use]
    pub fn with_request_caps(mut self, caps: RequestCaps) -> Self {
        self.defaults.caps = caps;
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

    /// The same service in global quota mode (the Go server's `QUOTA_MODE`): every
    /// descriptor counts as a quota-mode one, so a request is refused only when all of its
    /// descriptors but the unlimited ones are over (see [`crate::plan::Plan::mode_of`]).
    #[must_use]
    pub fn with_global_quota(mut self, on: bool) -> Self {
        self.defaults.global_quota = on;
        self
    }

    /// Whether global quota mode is on.
    pub fn global_quota(&self) -> bool {
        self.defaults.global_quota
    }

    /// The same service answering with dynamic metadata (the Go server's
    /// `RESPONSE_DYNAMIC_METADATA`): what was asked and the `metadata` of the rules that
    /// passed.
    #[must_use]
    pub fn with_dynamic_metadata(mut self, on: bool) -> Self {
        self.dynamic_metadata = on;
        self
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

    /// Answers one `ShouldRateLimit` request. On the embedded store the request is
    /// decided before this returns (see [`Decision`]).
    ///
    /// # Errors
    /// Empty domain, no descriptors, a request over the caps, an override without a valid
    /// unit, or a store failure.
    pub fn should_rate_limit<'a, D: RequestDescriptor + Sync>(
        &'a self,
        request: Request<'a, D>,
    ) -> Decision<'a> {
        self.should_rate_limit_traced(request, None)
    }

    /// [`Service::should_rate_limit`], the store call a child of `span` (a sampled
    /// request's) when one is waited for.
    ///
    /// # Errors
    /// As [`Service::should_rate_limit`].
    pub fn should_rate_limit_traced<'a, D: RequestDescriptor + Sync>(
        &'a self,
        request: Request<'a, D>,
        span: Option<&'a RequestSpan>,
    ) -> Decision<'a> {
        match self.decide_at_once(request) {
            Some(answer) => Decision::Ready(Some(answer)),
            None => Decision::Waiting(Box::pin(self.decide_waiting(request, span))),
        }
    }

    /// [`Service::should_rate_limit`]'s answer when the store gives it without waiting
    /// (the embedded store); `None` when it has to be waited for (Redis), with
    /// [`Service::decide_waiting`]. For a caller whose own future can hold the wait, so
    /// that [`Decision`] need not box it.
    ///
    /// # Errors
    /// As [`Service::should_rate_limit`].
    pub fn decide_at_once<D: RequestDescriptor>(
        &self,
        request: Request<'_, D>,
    ) -> Option<Result<Answer, RequestError>> {
        let Store::Memory(memory) = &self.store else {
            return None;
        };
        let mut timing = Timing::start(self.metrics.as_deref());
        let answer = self.decide_in_memory(memory, &request, &mut timing);
        timing.stop(&answer);
        Some(answer)
    }

    /// [`Service::should_rate_limit`]'s answer waited for (Redis; any store). With `span`
    /// (a sampled request), the store call is a child span of it.
    ///
    /// # Errors
    /// As [`Service::should_rate_limit`].
    pub async fn decide_waiting<D: RequestDescriptor + Sync>(
        &self,
        request: Request<'_, D>,
        span: Option<&RequestSpan>,
    ) -> Result<Answer, RequestError> {
        let mut timing = Timing::start(self.metrics.as_deref());
        let answer = self
            .decide_awaiting_store(&request, span, &mut timing)
            .await;
        timing.stop(&answer);
        answer
    }

    // The decision is written as two bodies, the same steps around one store call:
    // [`Service::prepare`], the call, [`Service::finish`]. The embedded store's call
    // returns its reports, Redis' a future. One `async` body for both would keep the
    // request's plan (about a kilobyte: descriptors, keys, checks) in a future that the
    // embedded store's requests, decided at once today, would build and poll too.

    /// Decides `request` on the embedded store.
    fn decide_in_memory<D: RequestDescriptor>(
        &self,
        memory: &MemoryStore,
        request: &Request<'_, D>,
        timing: &mut Timing<'_>,
    ) -> Result<Answer, RequestError> {
        let config = self.config.load();
        // Built in place: see `Plan::empty`.
        let mut plan = Plan::empty(&config, request.domain);
        if let Some(answer) = self.prepare(request, &mut plan)? {
            return Ok(answer);
        }
        let expiries = self.hold_expiries(&config, request, &plan, true);
        let mut checks = Checks::new();
        plan.push_checks(&mut checks);
        count_expiries(&mut checks, &expiries);
        let reports = if checks.is_empty() {
            Reports::new()
        } else {
            let call = timing.store_call();
            let reports = memory.check(&checks, self.clock.now());
            timing.store_answered(call, false);
            reports
        };
        Ok(self.finish(&config, request, &plan, &reports))
    }

    /// Decides `request` on any store, awaiting its call (see [`Service::decide_in_memory`]).
    async fn decide_awaiting_store<D: RequestDescriptor + Sync>(
        &self,
        request: &Request<'_, D>,
        span: Option<&RequestSpan>,
        timing: &mut Timing<'_>,
    ) -> Result<Answer, RequestError> {
        let config = self.config.load();
        let mut plan = Plan::empty(&config, request.domain);
        if let Some(answer) = self.prepare(request, &mut plan)? {
            return Ok(answer);
        }
        let expiries = self.hold_expiries(&config, request, &plan, true);
        let mut checks = Checks::new();
        plan.push_checks(&mut checks);
        count_expiries(&mut checks, &expiries);
        let reports = if checks.is_empty() {
            Reports::new()
        } else {
            let call = timing.store_call();
            let reports = self.store_call(&checks, span).await;
            timing.store_answered(call, reports.is_err());
            reports?
        };
        Ok(self.finish(&config, request, &plan, &reports))
    }

    /// The store's reports on `checks`, a child span of `span` when there is one.
    async fn store_call(
        &self,
        checks: &Checks<'_>,
        span: Option<&RequestSpan>,
    ) -> Result<Reports, StoreError> {
        let call = self.store.check(checks, self.clock.now());
        match span {
            None => call.await,
            Some(span) => {
                let attributes = vec![
                    KeyValue::new("db.system.name", "redis"),
                    KeyValue::new("checks", checks.len() as i64),
                ];
                span.child(REDIS_SPAN, attributes, call).await
            }
        }
    }

    /// Where the stores count the holds of `request`'s descriptors (planned as `plan` on
    /// `config`) that they release unsettled after their TTL: each one's rule's series
    /// (see [`HoldOp::expiries`](crate::store::HoldOp::expiries)). Empty without metrics
    /// or holds. Handed to the plan's checks with [`count_expiries`]. `counted`: the
    /// request's hits are counted afterwards (a decision); otherwise (a read that takes
    /// nothing, which may still release expired holds) no series is created for it.
    pub fn hold_expiries<D: RequestDescriptor>(
        &self,
        config: &Arc<Config>,
        request: &Request<'_, D>,
        plan: &Plan<'_>,
        counted: bool,
    ) -> DescriptorExpiries {
        match &self.metrics {
            Some(metrics) => metrics.expiries(config, request, plan, counted),
            None => DescriptorExpiries::new(),
        }
    }

    /// Fills `plan` with `request`; returns the answer when the request needs no store
    /// call because its domain is unknown.
    fn prepare<D: RequestDescriptor>(
        &self,
        request: &Request<'_, D>,
        plan: &mut Plan<'_>,
    ) -> Result<Option<Answer>, RequestError> {
        plan.fill(request, &self.defaults)?;
        if !request.may_give_back && plan.gives_back() {
            return Err(RequestError::GiveBackNotAllowed);
        }
        if plan.knows_domain() {
            return Ok(None);
        }
        if let Some(metrics) = &self.metrics {
            metrics.domain_not_found(request.domain, request.descriptors.len());
        }
        let mut answer = Answer::no_limits(request.descriptors.len());
        self.add_metadata(&mut answer, request, None);
        Ok(Some(answer))
    }

    /// The answer to `request`, planned as `plan` on `config`, whose store reported
    /// `reports`, with its hits counted (and its dynamic metadata, if answers carry it).
    fn finish<D: RequestDescriptor>(
        &self,
        config: &Arc<Config>,
        request: &Request<'_, D>,
        plan: &Plan<'_>,
        reports: &Reports,
    ) -> Answer {
        let (mut answer, over_before_shadow) = Answer::new(plan, reports, self.global_shadow);
        self.add_metadata(&mut answer, request, Some(plan));
        if let Some(metrics) = &self.metrics {
            metrics.count_hits(config, request, plan, reports);
            if over_before_shadow && self.global_shadow {
                metrics.global_shadow();
            }
        }
        answer
    }

    /// Gives `answer` its dynamic metadata, when answers carry it.
    fn add_metadata<D: RequestDescriptor>(
        &self,
        answer: &mut Answer,
        request: &Request<'_, D>,
        plan: Option<&Plan<'_>>,
    ) {
        if self.dynamic_metadata {
            let metadata = metadata::dynamic_metadata(request, plan, &answer.statuses);
            answer.dynamic_metadata = Some(Box::new(metadata));
        }
    }
}

/// Tells each check with a hold where its key's expired holds are counted: the first
/// check of each descriptor, from `expiries` (per descriptor, see
/// [`Service::hold_expiries`]). A descriptor's other checks are its other limits, which
/// keep a hold of the same request each: counted once, on the first.
pub fn count_expiries<'a>(checks: &mut [Check<'a>], expiries: &'a [Option<Expiries>]) {
    if expiries.is_empty() {
        return;
    }
    let mut last = None;
    for check in checks {
        let first = last != Some(check.descriptor);
        last = Some(check.descriptor);
        if let (Some(op), true) = (&mut check.hold, first) {
            op.expiries = expiries.get(check.descriptor).and_then(Option::as_ref);
        }
    }
}

/// The times of one request, when statistics are on: its response time, from its start
/// to the end of its store call (or to its end, without one), and its store call's.
struct Timing<'m> {
    /// Where the times are counted; `None`: nothing is timed.
    metrics: Option<&'m Metrics>,
    /// When the request began.
    started: Option<Stopwatch>,
    /// When its store call ended, which ends the response time without a reading of its
    /// own.
    decided_at: Option<Stopwatch>,
}

impl<'m> Timing<'m> {
    fn start(metrics: Option<&'m Metrics>) -> Self {
        Self {
            metrics,
            started: metrics.map(|_| Stopwatch::start()),
            decided_at: None,
        }
    }

    /// The start of a store call.
    fn store_call(&self) -> Option<Stopwatch> {
        self.metrics.map(|_| Stopwatch::start())
    }

    /// The store call begun at `call` has ended, `failed` or not.
    fn store_answered(&mut self, call: Option<Stopwatch>, failed: bool) {
        if let (Some(metrics), Some(call)) = (self.metrics, call) {
            self.decided_at = Some(metrics.store_answered(call, failed));
        }
    }

    /// Counts the request's `answer`.
    fn stop(self, answer: &Result<Answer, RequestError>) {
        if let (Some(metrics), Some(started)) = (self.metrics, self.started) {
            let decided_at = self.decided_at.unwrap_or_else(Stopwatch::start);
            metrics.answered(started.until(decided_at), answer.as_ref().err());
        }
    }
}

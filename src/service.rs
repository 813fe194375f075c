//! Request semantics, free of protobuf: §1.3–1.8 of the behaviour reference.
//!
//! For each descriptor, in request order: the per-request limit override or the config
//! walk; then `replaces` across the request; `unlimited`; hits (descriptor-level
//! `hits_addend` wins, 0 there checks without consuming; request-level 0 counts as 1);
//! one atomic store call for every limited descriptor; shadow turns OVER_LIMIT into OK;
//! the overall code follows the quota rule.

use std::collections::HashSet;
use std::sync::Arc;

use arc_swap::ArcSwap;
use foldhash::fast::RandomState;

use crate::bucket_key::{KeyWriter, key_at};
use crate::clock::{Clock, Nanos};
use crate::config::Config;
use crate::error::RequestError;
use crate::limiter;
use crate::metrics::Metrics;
use crate::request_limits::RequestLimits;
use crate::rules::{Algorithm, Limit, Mode, Rule, Unit};
use crate::store::{Check, Store};

/// The running config, swapped whole by reloads.
pub type SharedConfig = Arc<ArcSwap<Config>>;

/// A descriptor as the service reads it; implemented for the protobuf type in
/// [`crate::grpc`] and by [`Descriptor`] for tests and tools.
pub trait RequestDescriptor {
    /// The entries, in order, as (key, value).
    fn entries(&self) -> impl Iterator<Item = (&str, &str)>;
    /// The per-request limit override, if any.
    fn limit_override(&self) -> Option<Override>;
    /// Descriptor-level `hits_addend`, if set (0 is meaningful).
    fn hits_addend(&self) -> Option<u64>;
}

/// A per-request limit (`RateLimitDescriptor.limit`), unit not yet validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Override {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// The unit as sent: `None` for UNKNOWN or an out-of-range number.
    pub unit: Option<Unit>,
}

/// An owned descriptor, for callers that do not hold protobuf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Descriptor {
    /// (key, value) entries.
    pub entries: Vec<(String, String)>,
    /// Per-request limit override.
    pub limit: Option<Override>,
    /// Descriptor-level hits.
    pub hits_addend: Option<u64>,
}

impl Descriptor {
    /// A descriptor of `entries` with no override and default hits.
    pub fn new(entries: &[(&str, &str)]) -> Self {
        Self {
            entries: entries
                .iter()
                .map(|&(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Self::default()
        }
    }
}

impl RequestDescriptor for Descriptor {
    fn entries(&self) -> impl Iterator<Item = (&str, &str)> {
        self.entries.iter().map(|(k, v)| (k.as_str(), v.as_str()))
    }
    fn limit_override(&self) -> Option<Override> {
        self.limit
    }
    fn hits_addend(&self) -> Option<u64> {
        self.hits_addend
    }
}

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The request must be refused.
    pub over_limit: bool,
    /// One status per descriptor, in request order.
    pub statuses: Vec<Status>,
    /// The status that `RateLimit-*` response headers describe (§2.2 of the behaviour
    /// reference): the last non-quota OVER_LIMIT one, else the limited one with the
    /// fewest requests remaining; `None` when no descriptor had a limit.
    pub headline: Option<usize>,
}

/// One descriptor's status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// OVER_LIMIT (after shadow mode turned it to OK where configured).
    pub over_limit: bool,
    /// The limit that applied, if any.
    pub current_limit: Option<CurrentLimit>,
    /// Requests left; `u32::MAX` for unlimited rules.
    pub remaining: u32,
    /// See [`crate::limiter::Report::reset`]; `None` when no limit applied.
    pub reset: Option<Nanos>,
}

/// The limit echoed in a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// Unit.
    pub unit: Unit,
    /// The rule's `name`, empty when unnamed or for overrides.
    pub name: String,
}

/// The rate-limit service: config, store and clock.
#[derive(Debug, Clone)]
pub struct Service {
    config: SharedConfig,
    store: Store,
    clock: Arc<dyn Clock>,
    default_algorithm: Algorithm,
    /// Global shadow mode: over-limit requests are answered OK overall.
    global_shadow: bool,
    /// This service's own statistics (not process-global: several services, several sets).
    metrics: Arc<Metrics>,
    /// Caps on what one request may ask for.
    limits: RequestLimits,
}

/// What one descriptor resolved to before the store is asked.
pub(crate) enum Resolved<'c> {
    NoLimit,
    Unlimited(&'c Rule),
    Limited {
        limit: Limit,
        rule: Option<&'c Rule>,
        key: std::ops::Range<usize>,
    },
}

impl<'c> Resolved<'c> {
    /// The config rule that matched, if any (overrides have none).
    pub(crate) fn rule(&self) -> Option<&'c Rule> {
        match *self {
            Resolved::Limited { rule, .. } => rule,
            Resolved::Unlimited(rule) => Some(rule),
            Resolved::NoLimit => None,
        }
    }
}

impl Service {
    /// A service answering from `config` with `store`; rules without an `algorithm` use
    /// `default_algorithm`.
    pub fn new(
        config: SharedConfig,
        store: Store,
        clock: Arc<dyn Clock>,
        default_algorithm: Algorithm,
    ) -> Self {
        let metrics = Arc::new(Metrics::new(config.clone(), store.clone()));
        Self {
            config,
            store,
            clock,
            default_algorithm,
            global_shadow: false,
            metrics,
            limits: RequestLimits::default(),
        }
    }

    /// The same service refusing requests over `limits` (the defaults otherwise).
    #[must_use]
    pub fn with_request_limits(mut self, limits: RequestLimits) -> Self {
        self.limits = limits;
        self
    }

    /// The caps on what one request may ask for.
    pub fn request_limits(&self) -> RequestLimits {
        self.limits
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
        self.default_algorithm
    }

    /// The service's statistics, for `GET /metrics`.
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
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
    /// Empty domain, no descriptors, an override without a valid unit, or a store failure.
    pub async fn should_rate_limit<D: RequestDescriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
    ) -> Result<Response, RequestError> {
        // A duration, not a decision's time: the runtime's monotonic clock.
        let started = tokio::time::Instant::now();
        let answer = self.decide(domain, descriptors, hits_addend).await;
        self.metrics
            .answered(started.elapsed(), answer.as_ref().err());
        answer
    }

    async fn decide<D: RequestDescriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
        hits_addend: u32,
    ) -> Result<Response, RequestError> {
        self.check_request(domain, descriptors)?;
        let config = self.config.load();
        let Some(tree) = config.domain(domain) else {
            return Ok(Response {
                over_limit: false,
                statuses: vec![Status::default(); descriptors.len()],
                headline: None,
            });
        };
        let mut keys = String::with_capacity(64 * descriptors.len());
        let mut scratch = String::with_capacity(64);
        let mut resolved: Vec<Resolved<'_>> = descriptors
            .iter()
            .map(|d| self.resolve(tree, domain, d, &mut keys, &mut scratch))
            .collect();
        apply_replaces(&mut resolved);

        let default_hits = u64::from(hits_addend.max(1));
        let mut checks = Vec::with_capacity(descriptors.len());
        for (d, r) in descriptors.iter().zip(&resolved) {
            if let Resolved::Limited { limit, rule, key } = r {
                checks.push(Check {
                    key: key_at(&keys, key.clone()),
                    limit: *limit,
                    hits: d.hits_addend().unwrap_or(default_hits),
                    mode: rule.map_or(Mode::Enforce, |r| r.mode),
                });
            }
        }
        let now = self.clock.now();
        let reports = if checks.is_empty() {
            Default::default()
        } else {
            self.metrics
                .time_store(self.store.check(&checks, now))
                .await?
        };
        self.count_hits(
            &config,
            domain,
            descriptors,
            &resolved,
            &reports,
            default_hits,
        );

        let mut reports = reports.into_iter();
        let mut verdicts = Vec::with_capacity(checks.len());
        let statuses = resolved
            .iter()
            .map(|r| match r {
                Resolved::NoLimit => Status::default(),
                Resolved::Unlimited(_) => Status {
                    remaining: u32::MAX,
                    ..Status::default()
                },
                Resolved::Limited { limit, rule, .. } => {
                    let report = reports.next().unwrap_or_default();
                    let mode = rule.map_or(Mode::Enforce, |r| r.mode);
                    verdicts.push((mode, report.over));
                    Status {
                        over_limit: report.over && !mode.is_shadow(),
                        current_limit: Some(CurrentLimit {
                            requests_per_unit: limit.requests_per_unit,
                            unit: limit.unit,
                            name: rule.map(|r| r.name.clone()).unwrap_or_default(),
                        }),
                        remaining: report.remaining,
                        reset: Some(report.reset),
                    }
                }
            })
            .collect::<Vec<Status>>();
        let headline = headline(&statuses, &resolved);
        let mut over_limit = limiter::request_denied(verdicts);
        if over_limit && self.global_shadow {
            over_limit = false;
            self.metrics.global_shadow();
        }
        Ok(Response {
            over_limit,
            statuses,
            headline,
        })
    }

    /// Per-rule statistics of one answered request (see [`crate::metrics`]).
    fn count_hits<D: RequestDescriptor>(
        &self,
        config: &Arc<Config>,
        domain: &str,
        descriptors: &[D],
        resolved: &[Resolved<'_>],
        reports: &[limiter::Report],
        default_hits: u64,
    ) {
        let rules = self.metrics.rules(config);
        let mut reports = reports.iter();
        for (d, r) in descriptors.iter().zip(resolved) {
            let hits = d.hits_addend().unwrap_or(default_hits);
            match r {
                Resolved::NoLimit => {}
                Resolved::Unlimited(rule) => rules.unlimited(domain, rule, || d.entries(), hits),
                Resolved::Limited { limit, rule, .. } => {
                    if let Some(report) = reports.next() {
                        rules.limited(domain, *rule, || d.entries(), limit, hits, report);
                    }
                }
            }
        }
    }

    /// Resolves one descriptor: the override or the config walk, its bucket key appended
    /// to `keys`.
    pub(crate) fn resolve<'c, D: RequestDescriptor>(
        &self,
        tree: &'c crate::matcher::DomainTree,
        domain: &str,
        descriptor: &D,
        keys: &mut String,
        scratch: &mut String,
    ) -> Resolved<'c> {
        let mut key = KeyWriter::new(keys, domain);
        if let Some(o) = descriptor.limit_override() {
            for (k, v) in descriptor.entries() {
                key.push(k);
                key.push(v);
            }
            // Validated by the caller; an override replaces the config walk entirely.
            let unit = o.unit.unwrap_or(Unit::Second);
            return Resolved::Limited {
                limit: Limit {
                    requests_per_unit: o.requests_per_unit,
                    unit,
                    burst: o.requests_per_unit,
                    algorithm: self.default_algorithm,
                },
                rule: None,
                key: key.finish(),
            };
        }
        let Some(rule) = tree.find(descriptor.entries(), &mut key, scratch) else {
            key.discard();
            return Resolved::NoLimit;
        };
        match &rule.limit {
            None => {
                key.discard();
                Resolved::Unlimited(rule)
            }
            Some(limit) => Resolved::Limited {
                limit: limit.resolve(self.default_algorithm),
                rule: Some(rule),
                key: key.finish(),
            },
        }
    }
}

impl Service {
    /// What no config could answer: an empty domain, no descriptors, a request over the
    /// caps, or an override without a valid unit. The caps come first, so that a request
    /// over them costs no more than reading its size.
    pub(crate) fn check_request<D: RequestDescriptor>(
        &self,
        domain: &str,
        descriptors: &[D],
    ) -> Result<(), RequestError> {
        if domain.is_empty() {
            return Err(RequestError::EmptyDomain);
        }
        if descriptors.is_empty() {
            return Err(RequestError::NoDescriptors);
        }
        self.limits.check_count(descriptors.len())?;
        for (i, d) in descriptors.iter().enumerate() {
            self.limits.check_descriptor(i, d.entries())?;
        }
        match descriptors
            .iter()
            .position(|d| d.limit_override().is_some_and(|o| o.unit.is_none()))
        {
            Some(i) => Err(RequestError::BadOverrideUnit(i)),
            None => Ok(()),
        }
    }
}

/// See [`Response::headline`].
fn headline(statuses: &[Status], resolved: &[Resolved<'_>]) -> Option<usize> {
    let quota = |i: usize| resolved[i].rule().is_some_and(|r| r.mode.is_quota());
    let over = (0..statuses.len())
        .rev()
        .find(|&i| statuses[i].over_limit && !quota(i));
    over.or_else(|| {
        (0..statuses.len())
            .filter(|&i| statuses[i].current_limit.is_some())
            .min_by_key(|&i| statuses[i].remaining)
    })
}

/// Drops every matched rule whose name another matched rule (unlimited ones included)
/// replaces. Only within this request. A set of the replaced names, so that the cost stays
/// linear in descriptors and `replaces` entries.
pub(crate) fn apply_replaces<'c>(resolved: &mut [Resolved<'c>]) {
    let replaced: HashSet<&'c str, RandomState> = resolved
        .iter()
        .filter_map(Resolved::rule)
        .flat_map(|rule| rule.replaces.iter().map(String::as_str))
        .collect();
    if replaced.is_empty() {
        return;
    }
    for r in resolved.iter_mut() {
        let Some(rule) = r.rule() else { continue };
        if !rule.name.is_empty() && replaced.contains(rule.name.as_str()) {
            *r = Resolved::NoLimit;
        }
    }
}

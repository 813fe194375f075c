//! Prometheus statistics of one service, served by `GET /metrics`.
//!
//! # Names: the Go server's, as its Prometheus mapping gives them
//! The Go server counts in statsd names (`ratelimit.service.rate_limit.<domain>.<path>.<stat>`
//! and a few others) and exposes them to Prometheus through statsd_exporter's mapper and its
//! default mapping. The series here carry the mapped names and labels, so that dashboards and
//! alerts built for it keep working:
//! - per rule, counting hits (`hits_addend`), not requests:
//!   `ratelimit_service_rate_limit_{total_hits,within_limit,near_limit,over_limit,shadow_mode,over_limit_with_local_cache}`
//!   with labels `domain`, `key1`, `key2` (see below). Go's mapping has no entry for
//!   `over_limit_with_local_cache` (its series get names of their own there); here it is a
//!   family like the others. How hits split into within, near and over: see `rule_stats::split`;
//! - `ratelimit_service_total_requests{grpc_method}` and the histogram
//!   `ratelimit_service_response_time_seconds{grpc_method}`: every `ShouldRateLimit` call;
//! - `ratelimit_service_should_rate_limit_error{err_type}`: `service_error` for a request no
//!   config can answer, `redis_error` when the store could not decide (Go's two names);
//! - `ratelimit_service_global_shadow_mode`: requests over their limits that global shadow
//!   mode (`--shadow-mode`) answered OK;
//! - `ratelimit_service_config_load_success` (the initial load and every reload that swapped
//!   in a new config) and `ratelimit_service_config_load_error` (rejected reloads), with
//!   meshlimit's `meshlimit_config_*` about the source (see [`source`]);
//! - `ratelimit_service_rate_limit_domain_not_found{domain}`: descriptors of requests to a
//!   domain the config does not have (Go's `ratelimit.service.rate_limit.<domain>.domain_not_found`,
//!   which its mapping leaves unmapped; see [`domains`]).
//!
//! meshlimit's own: `meshlimit_config_rules`, `meshlimit_worker_threads`,
//! `meshlimit_store_latency_seconds{store}`,
//! `meshlimit_store_errors_total{store}`, with the embedded store
//! `meshlimit_store_evictions_total` and `meshlimit_store_evictions_weakened_total` and, with Redis, `meshlimit_redis_cache_hits_total{cache}`
//! (`over_limit`, `lease`), `meshlimit_redis_cache_misses_total`, `meshlimit_redis_errors_total`,
//! `meshlimit_redis_fallbacks_total`, and the script calls' `meshlimit_redis_calls_total`,
//! `meshlimit_redis_call_requests_total` and `meshlimit_redis_call_seconds_total`, read from
//! the store's own counters at scrape time;
//! the connection metrics of [`connections`] (`meshlimit_connections_*`).
//!
//! # Why the text format is written here
//! The Go server serves the text format 0.0.4 (client_golang's default handler), where a
//! counter's samples carry its name as is: `ratelimit_service_rate_limit_total_hits`.
//! `prometheus-client` writes OpenMetrics only, where every counter sample must end in
//! `_total`: the same counters would arrive as `..._total_hits_total` and those dashboards
//! would show nothing. `metrics-exporter-prometheus` writes 0.0.4, but keeps every histogram
//! sample until the next scrape and comes with the `metrics` facade and its global recorder.
//! What is needed is a few atomics per series and a line format, so both are here, with no
//! process-global state: each service has its own [`Metrics`]. Prometheus asks for OpenMetrics
//! first but accepts 0.0.4, which it parses by the `Content-Type` ([`CONTENT_TYPE`]).
//!
//! # Labels of a rule
//! The Go server names a rule by its path: its levels joined by `.`, each `key`, or
//! `key_value` where the config entry has a value (a wildcard's pattern, as in `tier_gold*`),
//! sanitised (`:` and `|` become `_`, and so do the dots of IPv4 addresses). Here `domain` is
//! the domain, `key1` the first level and `key2` the second (absent for a one-level rule),
//! each sanitised the same way; deeper levels are not labels, so the series of rules that
//! differ only below their second level are summed under the same labels (each keeps its
//! own series, for its statsd name: see [`gostats`]). That is what the Go mapping makes of
//! rules whose keys and values hold no dots (its globs give a one-level rule `domain` and
//! `key1`, its regular expressions a deeper one `key2` too, the levels below folded). It
//! splits on every dot, though, and cuts values such as `/pkg.Service/Method` apart. Levels
//! give every rule labels, and values whole. A mapping file (`--metrics-mapping`) names
//! the Go stats instead, as statsd_exporter would: see [`mapping`] and [`mapped`].
//!
//! Cardinality stays bounded by the config: only `detailed_metric: true` rules (every
//! level) and rules below `value_to_metric: true` descriptors (the flagged levels, see
//! [`value_to_metric`]) put request values into labels (the request's `key_value`s), at
//! most `--max-metric-values` distinct ones per rule, the rest on one overflow series per
//! rule (see [`detailed`]); unknown domains likewise, at most that many. Limits sent in
//! the request (`RateLimitDescriptor.limit`), which the Go server counts under one series per
//! request value (an unbounded leak), are counted per domain, on the series labelled with
//! `domain` alone. Unlimited rules count `total_hits` and `within_limit` (the Go server counts
//! nothing for them); replaced rules and descriptors without a rule count nothing. Every
//! configured rule whose labels hold no request value has its series, at 0, from the
//! moment its config is loaded; series of rules a reload removed stay.
//!
//! # What the metrics report on without owning it
//! The config source, the connections and the quota service are read at scrape time
//! through the [`Reporter`] the server gives when it builds the metrics, as plain numbers
//! ([`SourceReport`], [`ConnectionReport`], [`QuotaReport`]): this module knows none of
//! them. Metrics built without one (a service built by hand, `meshlimit explain`) show
//! one config load and no error, and no connection or quota families.
//!
//! # Cost on the request path
//! A request reads the table of the running config's rules (one `ArcSwap` load), finds each
//! rule's series by the rule's address, and adds to a few atomics: no lock, no allocation, no
//! formatting (see [`calls`] and [`table`]). The same lookup finds the rule's counts for the operator page ([`live`]); a
//! refused descriptor also tries the short lock of [`refusals`], never waiting for it. The
//! table is rebuilt by the first request (or scrape) after a reload.
//! Detailed and `value_to_metric` rules look their series up by labels under a lock
//! instead, unknown domains their counter under another, and a request decided
//! on a config that a reload has just replaced builds a table of its own.

mod calls;
mod connections;
mod detailed;
mod domains;
mod gostats;
mod hits;
mod labels;
mod limits;
pub mod live;
mod mapped;
mod mapping;
pub mod refusals;
mod render;
mod rlqs;
mod rule_stats;
mod rules;
mod source;
mod stripes;
mod table;
mod text;
mod value_to_metric;
mod views;

use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering::Relaxed};

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;

use crate::clock::Stopwatch;
use crate::config::SharedConfig;
use crate::defaults;
use crate::store::Store;
use calls::Calls;
pub use connections::ConnectionReport;
pub use detailed::OVERFLOW_VALUE;
use detailed::Series;
use domains::UnknownDomains;
pub use hits::DescriptorExpiries;
pub use mapping::{Mapping, MappingError, MappingWatch};
pub use rlqs::QuotaReport;
use rules::{RuleTable, build_table};
pub use source::SourceReport;
pub use views::{LimitCounts, RuleView};

/// The `Content-Type` of [`Metrics::render`]'s text: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The `grpc_method` label of request metrics (the Go server's value).
const METHOD: &str = "ShouldRateLimit";

/// Reads, at each scrape (and statsd flush), what the metrics show about the things they
/// report on without owning them. Given once, when the metrics are built
/// ([`Metrics::with_reporter`]).
pub trait Reporter: Send + Sync {
    /// What the config source has done.
    fn source(&self) -> SourceReport;
    /// The servers' connection counters.
    fn connections(&self) -> ConnectionReport;
    /// The quota service's counts.
    fn quotas(&self) -> QuotaReport;
}

/// The statistics of one service. Built by whoever builds the service and shared (`Arc`)
/// by it and the HTTP endpoint.
pub struct Metrics {
    /// The running config: its rules are listed at scrape time.
    config: SharedConfig,
    /// The store: its kind labels the store metrics, and Redis' own counters are read from it.
    store: Store,
    /// The near-limit ratio, as `f32` bits (the Go server computes in `float32`).
    near_limit_ratio: AtomicU32,
    /// Every call's counters: latency, errors, global shadow mode, store latency.
    calls: Calls,
    /// Every per-rule series. A `parking_lot` mutex: taken to build a rule table, for
    /// detailed-metric hits and by scrapes, never by the other hits.
    series: Mutex<Series>,
    /// The running config's rules and their series; replaced when the config changes.
    table: ArcSwap<RuleTable>,
    /// Held while `table` is rebuilt, so that the requests following a reload build it once.
    rebuilding: Mutex<()>,
    /// Reads the config source, the connections and the quota service at scrape time;
    /// `None`: metrics of a service alone (see the module's comment).
    reporter: Option<Box<dyn Reporter>>,
    /// Most series a detailed-metric rule creates for request values (see [`detailed`]),
    /// and most unknown domains with a series of their own (see [`domains`]).
    max_metric_values: AtomicUsize,
    /// Descriptors of requests to domains the config does not have.
    unknown_domains: Mutex<UnknownDomains>,
    /// The descriptors each rule refused most often lately, for the operator page.
    refusals: refusals::Refusals,
    /// What the statsd sink did, if one runs.
    statsd: gostats::SinkCounts,
    /// The mapping file (`--metrics-mapping`) the Go server's families go through;
    /// `None`: they are rendered as the Go server's built-in mapping names them.
    mapping: ArcSwapOption<Mapping>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("requests", &self.calls.response_time.count())
            .field("series", &self.series.lock().len())
            .finish_non_exhaustive()
    }
}

impl Metrics {
    /// Statistics for a service answering from `config` with `store`, counting the config
    /// it starts with as one successful load.
    pub fn new(config: SharedConfig, store: Store) -> Self {
        Stopwatch::calibrate();
        let series = Mutex::new(Series::default());
        let table = build_table(&series, config.load_full());
        Self {
            config,
            store,
            near_limit_ratio: AtomicU32::new(defaults::NEAR_LIMIT_RATIO.to_bits()),
            calls: Calls::default(),
            series,
            table: ArcSwap::from_pointee(table),
            rebuilding: Mutex::new(()),
            reporter: None,
            max_metric_values: AtomicUsize::new(defaults::MAX_METRIC_VALUES),
            unknown_domains: Mutex::new(UnknownDomains::default()),
            refusals: refusals::Refusals::default(),
            statsd: gostats::SinkCounts::default(),
            mapping: ArcSwapOption::empty(),
        }
    }

    /// The same statistics, also showing what `reporter` reads at each scrape: loads as
    /// `config_load_success`, rejected ones as `config_load_error`, and the source, its
    /// version, last change and whether the last attempt failed (see [`source`]); the
    /// connection counters (see [`connections`]); the quota service's counts
    /// (`meshlimit_rlqs_*`).
    #[must_use]
    pub fn with_reporter(self, reporter: impl Reporter + 'static) -> Self {
        Self {
            reporter: Some(Box::new(reporter)),
            ..self
        }
    }

    /// The fraction of a limit beyond which allowed hits count as near the limit (the Go
    /// server's `NEAR_LIMIT_RATIO`, default [`defaults::NEAR_LIMIT_RATIO`]).
    pub fn near_limit_ratio(&self) -> f32 {
        f32::from_bits(self.near_limit_ratio.load(Relaxed))
    }

    /// Sets the near-limit ratio, normally between 0 and 1; applies from the next request.
    pub fn set_near_limit_ratio(&self, ratio: f32) {
        self.near_limit_ratio.store(ratio.to_bits(), Relaxed);
    }

    /// Renders the Go server's families through `mapping` from the next scrape on
    /// (`None`: as its built-in mapping names them); see [`mapping`].
    pub fn set_mapping(&self, mapping: Option<std::sync::Arc<Mapping>>) {
        self.mapping.store(mapping);
    }

    /// The descriptors each rule refused most often lately (see [`refusals`]).
    pub fn refusals(&self) -> &refusals::Refusals {
        &self.refusals
    }
}

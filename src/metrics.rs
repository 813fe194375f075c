//! Prometheus statistics of one [`crate::service::Service`], served by `GET /metrics`.
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
//!   family like the others. How hits split into within, near and over: see `split` below;
//! - `ratelimit_service_total_requests{grpc_method}` and the histogram
//!   `ratelimit_service_response_time_seconds{grpc_method}`: every `ShouldRateLimit` call;
//! - `ratelimit_service_should_rate_limit_error{err_type}`: `service_error` for a request no
//!   config can answer, `redis_error` when the store could not decide (Go's two names);
//! - `ratelimit_service_config_load_success` (the initial load and every reload that swapped
//!   in a new config) and `ratelimit_service_config_load_error` (rejected reloads).
//!
//! meshlimit's own: `meshlimit_config_rules`, `meshlimit_store_latency_seconds{store}`,
//! `meshlimit_store_errors_total{store}` and, with Redis, `meshlimit_redis_cache_hits_total{cache}`
//! (`over_limit`, `lease`), `meshlimit_redis_cache_misses_total`, `meshlimit_redis_errors_total`
//! and `meshlimit_redis_fallbacks_total`, read from the store's own counters at scrape time.
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
//! each sanitised the same way; deeper levels are left out, so rules that differ only below
//! their second level share series. That is what the Go mapping makes of one- and
//! three-level paths whose keys and values hold no dots. It splits on every dot, though:
//! it leaves two-part paths unmapped (each gets a metric name of its own, without labels),
//! puts the leading parts of longer ones into `domain`, and cuts values such as
//! `/pkg.Service/Method` apart. Levels give every rule labels, and values whole.
//!
//! Cardinality stays bounded by the config: only `detailed_metric: true` rules put request
//! values into labels (their levels are the request's `key_value`s). Limits sent in
//! the request (`RateLimitDescriptor.limit`), which the Go server counts under one series per
//! request value (an unbounded leak), are counted per domain, on the series labelled with
//! `domain` alone. Unlimited rules count `total_hits` and `within_limit` (the Go server counts
//! nothing for them); replaced rules and descriptors without a rule count nothing. Every
//! configured rule has its series, at 0, from the moment its config is loaded; series of
//! rules a reload removed stay.
//!
//! # Cost on the request path
//! A request reads the table of the running config's rules (one `ArcSwap` load), finds each
//! rule's series by the rule's address, and adds to a few atomics: no lock, no allocation, no
//! formatting. The table is rebuilt by the first request (or scrape) after a reload.
//! Detailed rules look their series up by labels under a lock instead, and a request decided
//! on a config that a reload has just replaced builds a table of its own.

use std::collections::HashMap;
use std::fmt::{self, Display, Write as _};
use std::future::Future;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use arc_swap::{ArcSwap, Guard};
use foldhash::fast::RandomState;
use parking_lot::Mutex;

use crate::config::Config;
use crate::limiter::Report;
use crate::reload;
use crate::rules::{Algorithm, Limit, Rule};
use crate::service::{RequestError, SharedConfig};
use crate::store::Store;

/// The `Content-Type` of [`Metrics::render`]'s text: the Prometheus text format 0.0.4.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// The Go server's default `NEAR_LIMIT_RATIO`.
pub const DEFAULT_NEAR_LIMIT_RATIO: f32 = 0.8;

/// Upper bounds of the latency buckets, in nanoseconds: 10 µs to 1 s.
const BUCKETS: [u64; 16] = [
    10_000,
    25_000,
    50_000,
    100_000,
    250_000,
    500_000,
    1_000_000,
    2_500_000,
    5_000_000,
    10_000_000,
    25_000_000,
    50_000_000,
    100_000_000,
    250_000_000,
    500_000_000,
    1_000_000_000,
];

/// The `grpc_method` label of request metrics (the Go server's value).
const METHOD: &str = "ShouldRateLimit";

/// Every per-rule series, by labels.
type Series = HashMap<Labels, Arc<RuleStats>, RandomState>;

/// The statistics of one service. Shared (`Arc`) by the service and the HTTP endpoint.
pub struct Metrics {
    /// The running config: its rules are listed at scrape time.
    config: SharedConfig,
    /// The store: its kind labels the store metrics, and Redis' own counters are read from it.
    store: Store,
    /// The near-limit ratio, as `f32` bits (the Go server computes in `float32`).
    near_limit_ratio: AtomicU32,
    /// Latency of `ShouldRateLimit` calls; its count is the number of calls.
    response_time: Histogram,
    /// Calls refused as invalid (`service_error`).
    invalid_requests: AtomicU64,
    /// Store calls that could not decide (`redis_error`).
    store_errors: AtomicU64,
    /// Latency of store calls.
    store_latency: Histogram,
    /// The reloader's counts, once [`Metrics::follow_reloads`] was called.
    reloads: Mutex<Option<Arc<reload::Status>>>,
    /// Every per-rule series. A `parking_lot` mutex: taken to build a rule table, for
    /// detailed-metric hits and by scrapes, never by the other hits.
    series: Mutex<Series>,
    /// The running config's rules and their series; replaced when the config changes.
    table: ArcSwap<RuleTable>,
    /// Held while `table` is rebuilt, so that the requests following a reload build it once.
    rebuilding: Mutex<()>,
}

impl fmt::Debug for Metrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Metrics")
            .field("requests", &self.response_time.count())
            .field("series", &self.series.lock().len())
            .finish_non_exhaustive()
    }
}

/// Counters of one series of per-rule statistics, on a cache line of their own so that
/// cores counting different rules do not slow each other down.
#[derive(Debug, Default)]
#[repr(align(64))]
struct RuleStats {
    total_hits: AtomicU64,
    within_limit: AtomicU64,
    near_limit: AtomicU64,
    over_limit: AtomicU64,
    shadow_mode: AtomicU64,
    over_limit_with_local_cache: AtomicU64,
}

/// The labels of a per-rule series; `key1` is `None` only for limits sent in requests.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Labels {
    domain: String,
    key1: Option<String>,
    key2: Option<String>,
}

/// The table a request's rules are counted with: the running config's, or one built for
/// the config a request was decided on when a reload has replaced it since.
enum TableRef {
    Running(Guard<Arc<RuleTable>>),
    Replaced(RuleTable),
}

impl std::ops::Deref for TableRef {
    type Target = RuleTable;

    fn deref(&self) -> &RuleTable {
        match self {
            TableRef::Running(table) => table,
            TableRef::Replaced(table) => table,
        }
    }
}

/// A config's rules, each with its series, found by the rule's address.
struct RuleTable {
    /// The config of these rules, held so that no other rule can take one of their
    /// addresses while the table exists.
    config: Arc<Config>,
    /// Rule address → its series; `None` for detailed-metric rules (looked up per request).
    rules: HashMap<usize, Option<Arc<RuleStats>>, RandomState>,
    /// Domain → the series of limits sent in requests, created on first use.
    overrides: HashMap<Box<str>, OnceLock<Arc<RuleStats>>, RandomState>,
}

/// A latency histogram with fixed [`BUCKETS`]: one bucket and the sum move per observation.
#[derive(Debug, Default)]
struct Histogram {
    /// Observations per bucket (not cumulative); the last is above every bound.
    counts: [AtomicU64; BUCKETS.len() + 1],
    /// Sum of observations, in nanoseconds.
    sum: AtomicU64,
}

impl Histogram {
    fn observe(&self, elapsed: Duration) {
        let nanos = u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX);
        let bucket = BUCKETS.partition_point(|&bound| bound < nanos);
        self.counts[bucket].fetch_add(1, Relaxed);
        self.sum.fetch_add(nanos, Relaxed);
    }

    fn count(&self) -> u64 {
        self.counts.iter().map(|c| c.load(Relaxed)).sum()
    }

    fn render(&self, out: &mut String, name: &str, label: (&str, &str)) {
        let bucket = format!("{name}_bucket");
        let mut seen = 0;
        for (count, bound) in self.counts.iter().zip(BUCKETS) {
            seen += count.load(Relaxed);
            let le = seconds(bound).to_string();
            sample(out, &bucket, [label, ("le", le.as_str())], seen);
        }
        seen += self.counts[BUCKETS.len()].load(Relaxed);
        sample(out, &bucket, [label, ("le", "+Inf")], seen);
        let sum = seconds(self.sum.load(Relaxed));
        sample(out, &format!("{name}_sum"), [label], sum);
        sample(out, &format!("{name}_count"), [label], seen);
    }
}

fn seconds(nanos: u64) -> f64 {
    nanos as f64 / 1e9
}

/// How one descriptor's hits count towards `within_limit`, `near_limit` and `over_limit`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Split {
    within: u64,
    near: u64,
    over: u64,
}

/// Splits `hits` the way the Go server does (§2.3 of the behaviour reference).
///
/// Fixed windows, exactly as Go: with `near = floor(limit × ratio)` and the window's count
/// before and after the request, an allowed request's hits are all within the limit, and
/// near it as far as they go past `near` (all of them when the count was already there); a
/// denied request's hits are over the limit as far as they go past the limit, and those
/// between `max(near, before)` and the limit count as near the limit.
///
/// Token buckets: the same rule applied to the bucket's fill level, the tokens in use
/// (`burst − remaining`) standing for the window's count and `burst` for the limit. So an
/// allowed request counts as near the limit by the tokens it took below
/// `(1 − ratio) × burst` left in the bucket. A denied request takes no token: all its hits
/// are over the limit. A descriptor that allowed its hits in a request another descriptor
/// denied counts them as within the limit (its own verdict), its bucket as it was.
fn split(limit: &Limit, hits: u64, report: &Report, ratio: f32) -> Split {
    match limit.algorithm {
        Algorithm::FixedWindow => {
            let after = report.count;
            let cap = u64::from(limit.requests_per_unit);
            go_split(
                cap,
                after.saturating_sub(hits),
                after,
                hits,
                report.over,
                ratio,
            )
        }
        Algorithm::TokenBucket if report.over => Split {
            over: hits,
            ..Split::default()
        },
        Algorithm::TokenBucket => {
            let cap = u64::from(limit.burst);
            let after = cap.saturating_sub(u64::from(report.remaining));
            go_split(cap, after.saturating_sub(hits), after, hits, false, ratio)
        }
    }
}

/// Go's arithmetic over a count that went from `before` to `after` against `cap`.
fn go_split(cap: u64, before: u64, after: u64, hits: u64, over: bool, ratio: f32) -> Split {
    let near_at = near_threshold(cap, ratio);
    if !over {
        let near = if after <= near_at {
            0
        } else if before >= near_at {
            hits
        } else {
            after - near_at
        };
        Split {
            within: hits,
            near,
            over: 0,
        }
    } else if before >= cap {
        Split {
            over: hits,
            ..Split::default()
        }
    } else {
        Split {
            within: 0,
            near: cap.saturating_sub(near_at.max(before)),
            over: after - cap,
        }
    }
}

/// `floor(cap × ratio)`, multiplied in `f32` as the Go server does.
fn near_threshold(cap: u64, ratio: f32) -> u64 {
    (cap as f32 * ratio).floor() as u64
}

impl RuleStats {
    fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Relaxed);
        }
    }

    fn count(&self, limit: &Limit, hits: u64, report: &Report, shadow: bool, ratio: f32) {
        Self::add(&self.total_hits, hits);
        let split = if report.cached {
            Self::add(&self.over_limit_with_local_cache, hits);
            Split {
                over: hits,
                ..Split::default()
            }
        } else {
            split(limit, hits, report, ratio)
        };
        Self::add(&self.within_limit, split.within);
        Self::add(&self.near_limit, split.near);
        Self::add(&self.over_limit, split.over);
        if shadow {
            Self::add(&self.shadow_mode, split.over);
        }
    }
}

impl Labels {
    /// The labels of a rule in `domain` whose levels (composite keys) are `levels`.
    fn of_levels(domain: &str, levels: &[&str]) -> Labels {
        Labels {
            domain: sanitize(domain),
            key1: levels.first().map(|l| sanitize(l)),
            key2: levels.get(1).map(|l| sanitize(l)),
        }
    }

    /// A detailed-metric rule's labels: the request's `key_value` at each level (`key`
    /// where the value is empty).
    fn of_request<'e>(
        domain: &str,
        mut entries: impl Iterator<Item = (&'e str, &'e str)>,
    ) -> Labels {
        let mut level = || {
            entries.next().map(|(key, value)| {
                if value.is_empty() {
                    sanitize(key)
                } else {
                    sanitize(&format!("{key}_{value}"))
                }
            })
        };
        Labels {
            domain: sanitize(domain),
            key1: level(),
            key2: level(),
        }
    }

    /// The series of limits sent in requests to `domain`.
    fn of_domain(domain: &str) -> Labels {
        Labels {
            domain: sanitize(domain),
            key1: None,
            key2: None,
        }
    }

    fn pairs(&self) -> impl Iterator<Item = (&str, &str)> {
        [
            Some(("domain", self.domain.as_str())),
            self.key1.as_deref().map(|k| ("key1", k)),
            self.key2.as_deref().map(|k| ("key2", k)),
        ]
        .into_iter()
        .flatten()
    }
}

/// The Go server's stat-name sanitising: `:` and `|` become `_`, and so do the dots of
/// anything shaped like an IPv4 address (`\d{1,3}(\.\d{1,3}){3}`, leftmost first).
fn sanitize(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut ip_dots = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        match ipv4_end(bytes, at) {
            Some(end) => {
                ip_dots.extend((at..end).filter(|&i| bytes[i] == b'.'));
                at = end;
            }
            None => at += 1,
        }
    }
    text.char_indices()
        .map(|(i, c)| match c {
            ':' | '|' => '_',
            '.' if ip_dots.contains(&i) => '_',
            c => c,
        })
        .collect()
}

/// The end of an IPv4-shaped run starting at `start`: four groups of one to three ASCII
/// digits joined by dots (the last group as long as it goes, up to three).
fn ipv4_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start;
    for group in 0..4 {
        let digits = bytes[at..]
            .iter()
            .take(3)
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits == 0 {
            return None;
        }
        at += digits;
        if group < 3 {
            if bytes.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    Some(at)
}

fn rule_id(rule: &Rule) -> usize {
    std::ptr::from_ref(rule) as usize
}

fn series_of(series: &mut Series, labels: Labels) -> Arc<RuleStats> {
    series.entry(labels).or_default().clone()
}

/// The table of `config`'s rules, creating their series.
fn build_table(series: &Mutex<Series>, config: Arc<Config>) -> RuleTable {
    let mut rules = HashMap::default();
    let mut overrides = HashMap::default();
    {
        let mut series = series.lock();
        for domain in config.domains() {
            let Some(tree) = config.domain(domain) else {
                continue;
            };
            tree.root.visit(&mut Vec::new(), &mut |levels, node| {
                if let Some(rule) = &node.rule {
                    let stats = (!rule.detailed_metric)
                        .then(|| series_of(&mut series, Labels::of_levels(domain, levels)));
                    rules.insert(rule_id(rule), stats);
                }
            });
            overrides.insert(domain.into(), OnceLock::new());
        }
    }
    RuleTable {
        config,
        rules,
        overrides,
    }
}

impl Metrics {
    /// Statistics for a service answering from `config` with `store`, counting the config
    /// it starts with as one successful load.
    pub fn new(config: SharedConfig, store: Store) -> Self {
        let series = Mutex::new(Series::default());
        let table = build_table(&series, config.load_full());
        Self {
            config,
            store,
            near_limit_ratio: AtomicU32::new(DEFAULT_NEAR_LIMIT_RATIO.to_bits()),
            response_time: Histogram::default(),
            invalid_requests: AtomicU64::new(0),
            store_errors: AtomicU64::new(0),
            store_latency: Histogram::default(),
            reloads: Mutex::new(None),
            series,
            table: ArcSwap::from_pointee(table),
            rebuilding: Mutex::new(()),
        }
    }

    /// The fraction of a limit beyond which allowed hits count as near the limit (the Go
    /// server's `NEAR_LIMIT_RATIO`, default [`DEFAULT_NEAR_LIMIT_RATIO`]).
    pub fn near_limit_ratio(&self) -> f32 {
        f32::from_bits(self.near_limit_ratio.load(Relaxed))
    }

    /// Sets the near-limit ratio, normally between 0 and 1; applies from the next request.
    pub fn set_near_limit_ratio(&self, ratio: f32) {
        self.near_limit_ratio.store(ratio.to_bits(), Relaxed);
    }

    /// Counts reloads from the reloader's `status` from now on: applied ones as
    /// `config_load_success`, rejected ones as `config_load_error`.
    pub fn follow_reloads(&self, status: Arc<reload::Status>) {
        *self.reloads.lock() = Some(status);
    }

    /// One `ShouldRateLimit` call answered after `elapsed`, with `error` if it failed.
    pub(crate) fn answered(&self, elapsed: Duration, error: Option<&RequestError>) {
        self.response_time.observe(elapsed);
        // Store failures are counted by `time_store`, where they happen.
        if error.is_some_and(|e| !matches!(e, RequestError::Store(_))) {
            self.invalid_requests.fetch_add(1, Relaxed);
        }
    }

    /// Runs a store call, timing it and counting its failure.
    pub(crate) async fn time_store<T, E>(
        &self,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        // A duration, not a decision's time: the runtime's monotonic clock.
        let started = tokio::time::Instant::now();
        let result = call.await;
        self.store_latency.observe(started.elapsed());
        if result.is_err() {
            self.store_errors.fetch_add(1, Relaxed);
        }
        result
    }

    /// The rules' series for a request decided on `config`.
    pub(crate) fn rules(&self, config: &Arc<Config>) -> Rules<'_> {
        let mut table = self.table.load();
        if !Arc::ptr_eq(&table.config, config) {
            drop(table);
            table = self.refresh();
        }
        let table = if Arc::ptr_eq(&table.config, config) {
            TableRef::Running(table)
        } else {
            // Decided just before a reload swapped the config: rare, and built once.
            TableRef::Replaced(build_table(&self.series, config.clone()))
        };
        Rules {
            metrics: self,
            table,
        }
    }

    /// The table of the running config, rebuilt if the config changed since it was built.
    fn refresh(&self) -> Guard<Arc<RuleTable>> {
        let running = self.config.load_full();
        let table = self.table.load();
        if Arc::ptr_eq(&table.config, &running) {
            return table;
        }
        drop(table);
        let _one = self.rebuilding.lock();
        let table = self.table.load();
        if Arc::ptr_eq(&table.config, &running) {
            return table;
        }
        drop(table);
        self.table
            .store(Arc::new(build_table(&self.series, running)));
        self.table.load()
    }

    fn series(&self, labels: Labels) -> Arc<RuleStats> {
        series_of(&mut self.series.lock(), labels)
    }

    /// Everything, in the Prometheus text format 0.0.4 ([`CONTENT_TYPE`]).
    pub fn render(&self) -> String {
        drop(self.refresh()); // every configured rule has its series
        let mut series: Vec<(Labels, Arc<RuleStats>)> = self
            .series
            .lock()
            .iter()
            .map(|(labels, stats)| (labels.clone(), stats.clone()))
            .collect();
        series.sort_unstable_by(|a, b| a.0.cmp(&b.0));

        let mut out = String::with_capacity(2048 + 6 * 96 * series.len());
        for (name, help, counter) in RULE_FAMILIES {
            family(&mut out, name, "counter", help);
            for (labels, stats) in &series {
                sample(&mut out, name, labels.pairs(), counter(stats).load(Relaxed));
            }
        }
        self.render_service(&mut out);
        self.render_store(&mut out);
        out
    }

    fn render_service(&self, out: &mut String) {
        let name = "ratelimit_service_total_requests";
        family(out, name, "counter", "ShouldRateLimit calls.");
        let requests = self.response_time.count();
        sample(out, name, [("grpc_method", METHOD)], requests);
        let name = "ratelimit_service_response_time_seconds";
        family(out, name, "histogram", "ShouldRateLimit latency.");
        self.response_time
            .render(out, name, ("grpc_method", METHOD));

        let name = "ratelimit_service_should_rate_limit_error";
        family(
            out,
            name,
            "counter",
            "ShouldRateLimit calls answered with an error: an invalid request (service_error) or a store that could not decide (redis_error).",
        );
        let invalid = self.invalid_requests.load(Relaxed);
        sample(out, name, [("err_type", "service_error")], invalid);
        let store = self.store_errors.load(Relaxed);
        sample(out, name, [("err_type", "redis_error")], store);

        let (applied, rejected) = self.reloads.lock().as_ref().map_or((0, 0), |s| {
            (s.applied.load(Relaxed), s.rejected.load(Relaxed))
        });
        let name = "ratelimit_service_config_load_success";
        family(
            out,
            name,
            "counter",
            "Configs loaded: the initial one and every reload swapped in.",
        );
        sample(out, name, [], 1 + applied);
        let name = "ratelimit_service_config_load_error";
        family(
            out,
            name,
            "counter",
            "Reloads rejected for problems in the config files.",
        );
        sample(out, name, [], rejected);
        let name = "meshlimit_config_rules";
        family(
            out,
            name,
            "gauge",
            "Rules (limited or unlimited) in the running config.",
        );
        sample(out, name, [], self.config.load().rules().len());
    }

    fn render_store(&self, out: &mut String) {
        let kind = match self.store {
            Store::Memory(_) => "memory",
            Store::Redis(_) => "redis",
        };
        let name = "meshlimit_store_latency_seconds";
        family(
            out,
            name,
            "histogram",
            "Latency of store decisions (one per request with a limit).",
        );
        self.store_latency.render(out, name, ("store", kind));
        let name = "meshlimit_store_errors_total";
        family(
            out,
            name,
            "counter",
            "Store decisions that failed (the request got an error).",
        );
        sample(
            out,
            name,
            [("store", kind)],
            self.store_errors.load(Relaxed),
        );
        let Store::Redis(redis) = &self.store else {
            return;
        };
        let stats = redis.stats();
        let name = "meshlimit_redis_cache_hits_total";
        family(
            out,
            name,
            "counter",
            "Requests answered by a local cache without Redis: over_limit snapshots, lease (leased tokens).",
        );
        sample(out, name, [("cache", "over_limit")], stats.over_limit_hits);
        sample(out, name, [("cache", "lease")], stats.lease_hits);
        let counters = [
            (
                "meshlimit_redis_cache_misses_total",
                "Requests sent to Redis.",
                stats.misses,
            ),
            (
                "meshlimit_redis_errors_total",
                "Requests Redis failed to decide (whatever the failure policy then answered).",
                stats.errors,
            ),
            (
                "meshlimit_redis_fallbacks_total",
                "Requests answered by the failure policy (allow or local) instead of Redis.",
                stats.fallbacks,
            ),
        ];
        for (name, help, value) in counters {
            family(out, name, "counter", help);
            sample(out, name, [], value);
        }
    }
}

/// The per-rule families: name, help, and the counter each reads.
type RuleFamily = (&'static str, &'static str, fn(&RuleStats) -> &AtomicU64);

const RULE_FAMILIES: [RuleFamily; 6] = [
    (
        "ratelimit_service_rate_limit_total_hits",
        "Hits (hits_addend) on each rule.",
        |s| &s.total_hits,
    ),
    (
        "ratelimit_service_rate_limit_within_limit",
        "Hits on each rule that were within its limit.",
        |s| &s.within_limit,
    ),
    (
        "ratelimit_service_rate_limit_near_limit",
        "Hits on each rule beyond the near-limit ratio of its limit.",
        |s| &s.near_limit,
    ),
    (
        "ratelimit_service_rate_limit_over_limit",
        "Hits on each rule that were over its limit (shadow rules included).",
        |s| &s.over_limit,
    ),
    (
        "ratelimit_service_rate_limit_shadow_mode",
        "Over-limit hits on each shadow-mode rule, answered OK.",
        |s| &s.shadow_mode,
    ),
    (
        "ratelimit_service_rate_limit_over_limit_with_local_cache",
        "Over-limit hits on each rule answered from the local over-limit cache, without Redis.",
        |s| &s.over_limit_with_local_cache,
    ),
];

/// The per-rule series of one request, resolved on the table of its config.
pub(crate) struct Rules<'m> {
    metrics: &'m Metrics,
    table: TableRef,
}

impl Rules<'_> {
    /// Hits on a limited descriptor: `rule` from the config, or `None` for a limit sent in
    /// the request; `entries` are the request's, needed only by detailed-metric rules.
    pub(crate) fn limited<'e, I>(
        &self,
        domain: &str,
        rule: Option<&Rule>,
        entries: impl FnOnce() -> I,
        limit: &Limit,
        hits: u64,
        report: &Report,
    ) where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let shadow = rule.is_some_and(|r| r.mode.is_shadow());
        let ratio = self.metrics.near_limit_ratio();
        self.with_stats(domain, rule, entries, |stats| {
            stats.count(limit, hits, report, shadow, ratio);
        });
    }

    /// Hits on an unlimited rule: all within its (absent) limit.
    pub(crate) fn unlimited<'e, I>(
        &self,
        domain: &str,
        rule: &Rule,
        entries: impl FnOnce() -> I,
        hits: u64,
    ) where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        self.with_stats(domain, Some(rule), entries, |stats| {
            RuleStats::add(&stats.total_hits, hits);
            RuleStats::add(&stats.within_limit, hits);
        });
    }

    fn with_stats<'e, I>(
        &self,
        domain: &str,
        rule: Option<&Rule>,
        entries: impl FnOnce() -> I,
        count: impl FnOnce(&RuleStats),
    ) where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let metrics = self.metrics;
        match rule {
            None => match self.table.overrides.get(domain) {
                Some(slot) => count(slot.get_or_init(|| metrics.series(Labels::of_domain(domain)))),
                None => count(&metrics.series(Labels::of_domain(domain))),
            },
            Some(rule) => match self.table.rules.get(&rule_id(rule)) {
                Some(Some(stats)) => count(stats),
                Some(None) => count(&metrics.series(Labels::of_request(domain, entries()))),
                // Not a rule of this config: the service passes its config's rules only.
                None => {}
            },
        }
    }
}

/// `# HELP` and `# TYPE` of a family.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// One sample line: `name{label="value",...} value`.
fn sample<'a>(
    out: &mut String,
    name: &str,
    labels: impl IntoIterator<Item = (&'a str, &'a str)>,
    value: impl Display,
) {
    out.push_str(name);
    let mut first = true;
    for (key, text) in labels {
        out.push(if first { '{' } else { ',' });
        first = false;
        out.push_str(key);
        out.push_str("=\"");
        for c in text.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '"' => out.push_str("\\\""),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push('"');
    }
    if !first {
        out.push('}');
    }
    let _ = writeln!(out, " {value}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Unit;

    fn fw(requests_per_unit: u32) -> Limit {
        Limit {
            requests_per_unit,
            unit: Unit::Minute,
            burst: requests_per_unit,
            algorithm: Algorithm::FixedWindow,
        }
    }

    fn tb(burst: u32) -> Limit {
        Limit {
            requests_per_unit: burst,
            unit: Unit::Minute,
            burst,
            algorithm: Algorithm::TokenBucket,
        }
    }

    fn window(count: u64, over: bool) -> Report {
        Report {
            over,
            count,
            ..Report::default()
        }
    }

    fn bucket(remaining: u32, over: bool) -> Report {
        Report {
            over,
            remaining,
            ..Report::default()
        }
    }

    fn s(within: u64, near: u64, over: u64) -> Split {
        Split { within, near, over }
    }

    #[test]
    fn fixed_windows_split_like_the_go_server() {
        // Limit 20, near from 16: (count before, hits) → (within, near, over).
        let cases = [
            ((0, 10), s(10, 0, 0)),
            ((10, 6), s(6, 0, 0)),  // up to the threshold: not beyond it
            ((10, 8), s(8, 2, 0)),  // crosses the threshold
            ((16, 0), s(0, 0, 0)),  // a check
            ((17, 1), s(1, 1, 0)),  // already beyond it: every hit
            ((16, 4), s(4, 4, 0)),  // to the limit exactly: still allowed
            ((19, 4), s(0, 1, 3)),  // crosses the limit from beyond the threshold
            ((10, 15), s(0, 4, 5)), // crosses both
            ((20, 2), s(0, 0, 2)),  // already at the limit
            ((23, 1), s(0, 0, 1)),
        ];
        for ((before, hits), expected) in cases {
            let after = before + hits;
            let report = window(after, after > 20);
            assert_eq!(
                split(&fw(20), hits, &report, 0.8),
                expected,
                "before {before} hits {hits}"
            );
        }
        // A zero limit: every hit over.
        assert_eq!(split(&fw(0), 3, &window(3, true), 0.8), s(0, 0, 3));
    }

    #[test]
    fn token_buckets_split_on_their_fill_level() {
        // Burst 10, near once fewer than 2 tokens are left.
        let cases = [
            ((5, 1), s(1, 0, 0)),
            ((2, 1), s(1, 0, 0)),  // 8 in use: at the threshold, not beyond
            ((1, 1), s(1, 1, 0)),  // 9 in use, 8 before: beyond it
            ((0, 3), s(3, 2, 0)),  // 7 → 10 in use
            ((10, 0), s(0, 0, 0)), // a check on a full bucket
        ];
        for ((remaining, hits), expected) in cases {
            assert_eq!(
                split(&tb(10), hits, &bucket(remaining, false), 0.8),
                expected,
                "remaining {remaining} hits {hits}"
            );
        }
        // Denied: nothing taken, every hit over.
        assert_eq!(split(&tb(10), 4, &bucket(3, true), 0.8), s(0, 0, 4));
    }

    #[test]
    fn the_threshold_is_computed_in_f32_as_in_go() {
        assert_eq!(near_threshold(10, 0.8), 8);
        assert_eq!(near_threshold(3, 0.8), 2);
        assert_eq!(near_threshold(0, 0.8), 0);
        assert_eq!(near_threshold(20, 0.5), 10);
        assert_eq!(near_threshold(u64::from(u32::MAX), 1.0), 4_294_967_296);
    }

    #[test]
    fn stat_names_are_sanitised_like_the_go_server() {
        let cases = [
            ("remote_address_10.0.0.1", "remote_address_10_0_0_1"),
            ("a:b|c", "a_b_c"),
            ("1234.5.6.7", "1234_5_6_7"),
            ("1.2.3.4567", "1_2_3_4567"),
            ("1.2.3", "1.2.3"),
            ("v1.2.3.x", "v1.2.3.x"),
            ("ip_1.2.3.4.5.6.7.8", "ip_1_2_3_4.5_6_7_8"),
            ("ünï.1.2.3.4", "ünï.1_2_3_4"),
            ("path_/a.b", "path_/a.b"),
        ];
        for (raw, clean) in cases {
            assert_eq!(sanitize(raw), clean, "{raw}");
        }
    }

    fn triple(l: &Labels) -> (&str, Option<&str>, Option<&str>) {
        (l.domain.as_str(), l.key1.as_deref(), l.key2.as_deref())
    }

    #[test]
    fn labels_are_the_first_two_levels() {
        let l = Labels::of_levels("d", &["k1_v"]);
        assert_eq!(triple(&l), ("d", Some("k1_v"), None));
        let l = Labels::of_levels("d", &["a", "b_x"]);
        assert_eq!(triple(&l), ("d", Some("a"), Some("b_x")));
        let l = Labels::of_levels("d.e", &["a", "m_/p.S/M", "c", "e"]);
        assert_eq!(triple(&l), ("d.e", Some("a"), Some("m_/p.S/M")));
        let entries = [("ip", "10.1.2.3"), ("path", ""), ("x", "y")];
        let l = Labels::of_request("d:x", entries.into_iter());
        assert_eq!(triple(&l), ("d_x", Some("ip_10_1_2_3"), Some("path")));
    }

    #[test]
    fn samples_escape_label_values() {
        let mut out = String::new();
        sample(&mut out, "m", [("a", "x\"y\\z\nw")], 3);
        sample(&mut out, "n", [], 1.5);
        assert_eq!(out, "m{a=\"x\\\"y\\\\z\\nw\"} 3\nn 1.5\n");
    }

    #[test]
    fn histograms_are_cumulative_and_count_every_observation() {
        let h = Histogram::default();
        for micros in [5, 10, 11, 2_000_000] {
            h.observe(Duration::from_micros(micros));
        }
        let mut out = String::new();
        h.render(&mut out, "t", ("x", "y"));
        assert!(
            out.contains("t_bucket{x=\"y\",le=\"0.00001\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("t_bucket{x=\"y\",le=\"0.000025\"} 3\n"),
            "{out}"
        );
        assert!(out.contains("t_bucket{x=\"y\",le=\"1\"} 3\n"), "{out}");
        assert!(out.contains("t_bucket{x=\"y\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("t_sum{x=\"y\"} 2.000026\n"), "{out}");
        assert!(out.contains("t_count{x=\"y\"} 4\n"), "{out}");
    }
}

//! The text a scrape gets: every family, in the Prometheus text format 0.0.4.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;

use super::connections;
use super::labels::Labels;
use super::rule_stats::{FIRST_CHARGE_FAMILY, RULE_FAMILIES, RuleStats};
use super::stripes::wrapping_sum;
use super::text::{family, sample};
use super::{METHOD, Metrics};
use crate::store::Store;
use crate::store::redis::RedisStore;

impl Metrics {
    /// Everything, in the Prometheus text format 0.0.4 ([`CONTENT_TYPE`]).
    ///
    /// The Go server's families come from [`Metrics::render_go`], or through the mapping
    /// file when one is set ([`Metrics::set_mapping`]); meshlimit's own follow, alike.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        match self.mapping.load_full() {
            Some(mapping) => self.render_mapped(&mapping, &mut out),
            None => self.render_go(&mut out),
        }
        self.series.lock().limits.render(&mut out);
        self.render_overflow(&mut out);
        self.render_meshlimit_service(&mut out);
        self.render_store(&mut out);
        self.render_statsd(&mut out);
        if let Some(reporter) = &self.reporter {
            connections::render(&mut out, &reporter.connections());
            super::rlqs::render(&mut out, &reporter.quotas());
        }
        out
    }

    /// Every per-rule series with its name, once every configured rule has its series.
    pub(super) fn rule_series(&self) -> Vec<(Labels, Arc<RuleStats>)> {
        drop(self.refresh());
        self.series
            .lock()
            .by_labels
            .iter()
            .map(|(labels, stats)| (labels.clone(), stats.clone()))
            .collect()
    }

    /// The Go server's families as its built-in mapping names them: per rule, unknown
    /// domains, requests, errors, global shadow mode, config loads.
    fn render_go(&self, out: &mut String) {
        // Series that differ only below their second level share their labels: summed.
        let mut series: BTreeMap<Labels, Vec<Arc<RuleStats>>> = BTreeMap::new();
        for (labels, stats) in self.rule_series() {
            series.entry(labels.labelled()).or_default().push(stats);
        }
        out.reserve(6 * 96 * series.len());
        for (i, (name, help, counter)) in RULE_FAMILIES.into_iter().enumerate() {
            family(out, name, "counter", help);
            for (labels, stats) in &series {
                let sum = wrapping_sum(stats.iter().map(|s| counter(s)));
                if sum > 0 || i < FIRST_CHARGE_FAMILY {
                    sample(out, name, labels.pairs(), sum);
                }
            }
        }
        self.render_domains_not_found(out);
        self.render_service(out);
        let source = self.reporter.as_ref().map(|r| r.source());
        super::source::render_loads(out, source.as_ref());
    }

    fn render_service(&self, out: &mut String) {
        let name = "ratelimit_service_total_requests";
        family(out, name, "counter", "ShouldRateLimit calls.");
        let requests = self.calls.response_time.count();
        sample(out, name, [("grpc_method", METHOD)], requests);
        let name = "ratelimit_service_response_time_seconds";
        family(out, name, "histogram", "ShouldRateLimit latency.");
        self.calls
            .response_time
            .render(out, name, ("grpc_method", METHOD));

        let name = "ratelimit_service_should_rate_limit_error";
        family(
            out,
            name,
            "counter",
            "ShouldRateLimit calls answered with an error: an invalid request (service_error) or a store that could not decide (redis_error).",
        );
        let invalid = self.calls.invalid_requests.load(Relaxed);
        sample(out, name, [("err_type", "service_error")], invalid);
        let store = self.calls.store_errors.load(Relaxed);
        sample(out, name, [("err_type", "redis_error")], store);

        let name = "ratelimit_service_global_shadow_mode";
        family(
            out,
            name,
            "counter",
            "Requests over their limits answered OK because of global shadow mode.",
        );
        sample(out, name, [], self.calls.global_shadow.load(Relaxed));
    }

    /// meshlimit's own families about the service: the config source, the rules, the
    /// worker threads.
    fn render_meshlimit_service(&self, out: &mut String) {
        let source = self.reporter.as_ref().map(|r| r.source());
        super::source::render(out, source.as_ref());
        let name = "meshlimit_config_rules";
        family(
            out,
            name,
            "gauge",
            "Rules (limited or unlimited) in the running config.",
        );
        sample(out, name, [], self.config.load().rules().len());
        // Only inside a runtime: a scrape always is, a test's render may not be.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let name = "meshlimit_worker_threads";
            family(
                out,
                name,
                "gauge",
                "Threads serving requests (--worker-threads, or one per CPU).",
            );
            sample(out, name, [], runtime.metrics().num_workers());
        }
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
        self.calls.store_latency.render(out, name, ("store", kind));
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
            self.calls.store_errors.load(Relaxed),
        );
        if let Store::Memory(memory) = &self.store {
            let stats = memory.stats();
            let counters = [
                (
                    "meshlimit_store_evictions_total",
                    "Buckets the embedded store evicted to respect --max-buckets or --max-store-bytes (least recently used first).",
                    stats.evictions,
                ),
                (
                    "meshlimit_store_evictions_weakened_total",
                    "Of those, buckets not yet full again: each restarted a caller's limit from full.",
                    stats.evictions_weakened,
                ),
                (
                    "meshlimit_store_holds_expired_total",
                    "Holds and concurrency slots released unsettled after their TTL.",
                    stats.holds_expired,
                ),
            ];
            unlabelled_counters(out, &counters);
            let gauges = [
                (
                    "meshlimit_store_buckets",
                    "Buckets the embedded store holds (at most --max-buckets).",
                    stats.buckets,
                ),
                (
                    "meshlimit_store_holds",
                    "Holds and concurrency slots the embedded store keeps (at most --max-buckets).",
                    stats.holds,
                ),
                (
                    "meshlimit_store_bytes",
                    "Bytes those buckets count for against --max-store-bytes.",
                    stats.bytes,
                ),
            ];
            for (name, help, value) in gauges {
                family(out, name, "gauge", help);
                sample(out, name, [], value);
            }
        }
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
            (
                "meshlimit_redis_calls_total",
                "Script calls that decided requests, failed ones included (requests that wait while a node's calls are in flight share the next one).",
                stats.calls,
            ),
            (
                "meshlimit_redis_call_requests_total",
                "Requests those calls carried (divided by the calls: requests a call).",
                stats.call_requests,
            ),
        ];
        unlabelled_counters(out, &counters);
        let name = "meshlimit_redis_call_seconds_total";
        family(
            out,
            name,
            "counter",
            "Time those calls took, each from its start to its answer or failure (divided by the calls: the mean call, round trip included).",
        );
        sample(out, name, [], stats.call_seconds());
        redis_restarts(out, redis);
    }
}

/// `meshlimit_redis_restarts_total`: each node's server changes, by whether its keys
/// survived.
fn redis_restarts(out: &mut String, redis: &RedisStore) {
    let name = "meshlimit_redis_restarts_total";
    family(
        out,
        name,
        "counter",
        "Times a Redis node's server changed (a new run_id: a restart, or a failover), by whether its keys survived: buckets=\"lost\", every limit on the node restarted from full; buckets=\"kept\".",
    );
    for node in redis.restarts() {
        for (buckets, count) in [("lost", node.lost), ("kept", node.kept)] {
            sample(
                out,
                name,
                [("node", node.node.as_str()), ("buckets", buckets)],
                count,
            );
        }
    }
}

/// Counters without labels, each as (name, help, value).
fn unlabelled_counters(out: &mut String, counters: &[(&str, &str, u64)]) {
    for &(name, help, value) in counters {
        family(out, name, "counter", help);
        sample(out, name, [], value);
    }
}

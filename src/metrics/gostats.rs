//! The statistics under the Go server's statsd names (lyft/gostats'), for the statsd sink
//! ([`crate::statsd`]), read from the counters `/metrics` reads: nothing is counted twice.
//!
//! - per rule: `ratelimit.service.rate_limit.<domain>.<path>.<stat>`, the path every level
//!   of the rule (see `Labels::stat_path`), `<stat>` one of `total_hits`, `within_limit`,
//!   `near_limit`, `over_limit`, `shadow_mode`, `over_limit_with_local_cache`; limits sent
//!   in requests count under `ratelimit.service.rate_limit.<domain>.<stat>`;
//! - `ratelimit.service.rate_limit.<domain>.domain_not_found`, within the same cap;
//! - `ratelimit.service.config_load_success`, `ratelimit.service.config_load_error`,
//!   `ratelimit.service.global_shadow_mode`,
//!   `ratelimit.service.call.should_rate_limit.redis_error` and `.service_error`;
//! - `ratelimit_server.ShouldRateLimit.total_requests`, and the buckets of the response
//!   time histogram for the `ratelimit_server.ShouldRateLimit.response_time` timer.
//!
//! The sink's own counts are Prometheus families: `meshlimit_statsd_flushes_total` and
//! `meshlimit_statsd_flushes_missed_total`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};

use super::rule_stats::{FIRST_CHARGE_FAMILY, RULE_FAMILIES};
use super::text::{family, sample};
use super::{METHOD, Metrics};

/// The scope of the per-rule and domain stats (the Go server's `rlStatsScope`).
const RULE_SCOPE: &str = "ratelimit.service.rate_limit.";

/// The prefix of the per-rule Prometheus families; what follows it is the stat's name.
const RULE_FAMILY_PREFIX: &str = "ratelimit_service_rate_limit_";

/// The Go name of the response time timer.
pub(super) fn response_time_stat() -> String {
    format!("ratelimit_server.{METHOD}.response_time")
}

/// What the statsd sink did, for `/metrics`.
#[derive(Debug, Default)]
pub(super) struct SinkCounts {
    /// Whether a sink runs: its families are rendered only then.
    on: AtomicBool,
    /// Flushes written to the statsd server.
    flushed: AtomicU64,
    /// Flushes that could not be written (no connection, or it failed): their stats are lost.
    missed: AtomicU64,
}

impl Metrics {
    /// Calls `each` with every counter's Go stat name and its value since the start,
    /// leaving out the counters still at zero (most rules of a large config, whose names
    /// are then never written). A name can come more than once (series that sanitise
    /// alike): the receiver adds up.
    pub fn go_counters(&self, each: &mut dyn FnMut(&str, u64)) {
        self.go_stats(false, each);
    }

    /// [`Metrics::go_counters`], with `zeros`: also the counters still at zero that
    /// `/metrics` shows at zero (each rule's but its charge counters, every service
    /// counter), so that a mapping gives the series the native families have.
    pub(super) fn go_stats(&self, zeros: bool, each: &mut dyn FnMut(&str, u64)) {
        let mut name = String::with_capacity(128);
        for (labels, stats) in self.rule_series() {
            name.clear();
            name.push_str(RULE_SCOPE);
            labels.stat_path(&mut name);
            name.push('.');
            let path = name.len();
            for (i, (family, _, counter)) in RULE_FAMILIES.into_iter().enumerate() {
                let value = counter(&stats);
                if value == 0 && !(zeros && i < FIRST_CHARGE_FAMILY) {
                    continue;
                }
                name.truncate(path);
                name.push_str(family.strip_prefix(RULE_FAMILY_PREFIX).unwrap_or(family));
                each(&name, value);
            }
        }
        let mut each = |name: &str, value: u64| {
            if value != 0 || zeros {
                each(name, value);
            }
        };
        for (domain, count) in self.unknown_domains.lock().by_label() {
            each(&format!("{RULE_SCOPE}{domain}.domain_not_found"), count);
        }
        let source = self.reporter.as_ref().map(|r| r.source());
        let (applied, rejected) = super::source::loads(source.as_ref());
        let service = [
            ("config_load_success", applied),
            ("config_load_error", rejected),
            ("global_shadow_mode", self.calls.global_shadow.load(Relaxed)),
            (
                "call.should_rate_limit.redis_error",
                self.calls.store_errors.load(Relaxed),
            ),
            (
                "call.should_rate_limit.service_error",
                self.calls.invalid_requests.load(Relaxed),
            ),
        ];
        for (stat, value) in service {
            each(&format!("ratelimit.service.{stat}"), value);
        }
        let requests = self.calls.response_time.count();
        each(
            &format!("ratelimit_server.{METHOD}.total_requests"),
            requests,
        );
    }

    /// The Go name of the response time timer, and the requests in each bucket of its
    /// histogram since the start, each with the bucket's upper bound in milliseconds (the
    /// last bucket, above every bound, with the highest bound).
    pub fn go_response_time(&self) -> (String, Vec<(f64, u64)>) {
        (response_time_stat(), self.calls.response_time.buckets_ms())
    }

    /// A statsd flush was written (`true`) or missed.
    pub fn statsd_flushed(&self, written: bool) {
        self.statsd.on.store(true, Relaxed);
        let counter = if written {
            &self.statsd.flushed
        } else {
            &self.statsd.missed
        };
        counter.fetch_add(1, Relaxed);
    }

    /// Flushes missed so far.
    pub fn statsd_missed(&self) -> u64 {
        self.statsd.missed.load(Relaxed)
    }

    /// `meshlimit_statsd_*`, once a sink has flushed or missed.
    pub(super) fn render_statsd(&self, out: &mut String) {
        if !self.statsd.on.load(Relaxed) {
            return;
        }
        let families = [
            (
                "meshlimit_statsd_flushes_total",
                "Statsd flushes written to the statsd server.",
                &self.statsd.flushed,
            ),
            (
                "meshlimit_statsd_flushes_missed_total",
                "Statsd flushes that could not be written (server down, refusing or failing): their stats were lost.",
                &self.statsd.missed,
            ),
        ];
        for (name, help, counter) in families {
            family(out, name, "counter", help);
            sample(out, name, [], counter.load(Relaxed));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::SystemClock;
    use crate::config::Config;
    use crate::store::{MemoryStore, Store};
    use arc_swap::ArcSwap;
    use std::collections::BTreeMap;
    use std::sync::Arc;

    #[test]
    fn every_rule_and_service_stat_that_moved_has_its_go_name() {
        let text = "domain: d\ndescriptors:\n  - key: a\n    value: 10.0.0.1\n    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n            rate_limit: {unlimited: true}\n  - key: e\n    rate_limit: {unlimited: true}\n  - key: idle\n    rate_limit: {unlimited: true}\n";
        let config = Arc::new(Config::from_sources(&[("d.yaml".into(), text.into())]).unwrap());
        let store = Store::Memory(MemoryStore::new(1000, Arc::new(SystemClock)));
        let metrics = Metrics::new(Arc::new(ArcSwap::new(config.clone())), store);
        let rules = metrics.rules(&config);
        for rule in config
            .rules()
            .iter()
            .filter(|r| !r.full_key.contains("idle"))
        {
            rules.unlimited("d", rule, std::iter::empty, 2);
        }
        metrics.domain_not_found("x:y", 2);
        let mut names = BTreeMap::new();
        metrics.go_counters(&mut |name, value| {
            names.insert(name.to_string(), value);
        });
        let expected = [
            (
                "ratelimit.service.rate_limit.d.a_10_0_0_1.b.c.total_hits",
                2,
            ),
            (
                "ratelimit.service.rate_limit.d.a_10_0_0_1.b.c.within_limit",
                2,
            ),
            ("ratelimit.service.rate_limit.d.e.total_hits", 2),
            ("ratelimit.service.rate_limit.d.e.within_limit", 2),
            ("ratelimit.service.rate_limit.x_y.domain_not_found", 2),
            ("ratelimit.service.config_load_success", 1),
        ];
        let expected: BTreeMap<String, u64> =
            expected.iter().map(|&(n, v)| (n.to_string(), v)).collect();
        // Counters at zero (the idle rule's, the errors, the requests) are left out.
        assert_eq!(names, expected);
    }
}

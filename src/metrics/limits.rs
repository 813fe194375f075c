//! Per-limit statistics of rules with several limits (`rate_limits`): for each limit, the
//! hits it had room for, the hits it refused, and how often it was the limit a status
//! reported (it *bound*). Labels come from the config only (domain, rule path, limit
//! label), so their number is bounded by the config's size, whatever requests send.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::stripes::Counters;
use super::text::{family, sample};
use crate::limiter::Report;
use crate::rules::Rule;

/// One limit's counters (per thread once busy, see `super::stripes`): hits this limit had
/// room for, whatever the request's fate, at [`WITHIN`]; hits it refused at [`OVER`];
/// descriptors whose status reported it (it bound them) at [`BOUND`].
#[derive(Debug, Default)]
pub(super) struct LimitStats(Counters<3>);

const WITHIN: usize = 0;
const OVER: usize = 1;
const BOUND: usize = 2;

/// `(domain, rule path, limit label)`.
type LimitLabels = (String, String, String);

/// Every limit's counters, by labels; kept across reloads, so that a limit that stays
/// keeps counting on the same series.
#[derive(Debug, Default)]
pub(super) struct LimitSeries(BTreeMap<LimitLabels, Arc<LimitStats>>);

impl LimitSeries {
    /// The counters of each limit of `rule` (in `domain`), created where new; `None` for a
    /// rule with one limit or none, whose rule series says everything.
    pub(super) fn of_rule(&mut self, domain: &str, rule: &Rule) -> Option<Box<[Arc<LimitStats>]>> {
        (rule.limits.len() > 1).then(|| {
            rule.limits
                .iter()
                .map(|limit| {
                    let labels = (domain.to_string(), rule.full_key.clone(), limit.label());
                    self.0.entry(labels).or_default().clone()
                })
                .collect()
        })
    }

    /// The families, in the Prometheus text format.
    pub(super) fn render(&self, out: &mut String) {
        const HITS: &str = "meshlimit_rule_limit_hits_total";
        const BINDING: &str = "meshlimit_rule_limit_binding_total";
        family(
            out,
            HITS,
            "counter",
            "Hits on each limit of a rule with several (rate_limits): within it, or over it.",
        );
        for ((domain, rule, limit), stats) in &self.0 {
            for (result, counter) in [("within", WITHIN), ("over", OVER)] {
                let labels = [
                    ("domain", domain.as_str()),
                    ("rule", rule.as_str()),
                    ("limit", limit.as_str()),
                    ("result", result),
                ];
                sample(out, HITS, labels, stats.0.get(counter));
            }
        }
        family(
            out,
            BINDING,
            "counter",
            "Descriptors whose status reported this limit of a rule with several (the binding one).",
        );
        for ((domain, rule, limit), stats) in &self.0 {
            let labels = [
                ("domain", domain.as_str()),
                ("rule", rule.as_str()),
                ("limit", limit.as_str()),
            ];
            sample(out, BINDING, labels, stats.0.get(BOUND));
        }
    }
}

impl LimitStats {
    /// (within, over, binding) so far.
    pub(super) fn read(&self) -> (u64, u64, u64) {
        (self.0.get(WITHIN), self.0.get(OVER), self.0.get(BOUND))
    }
}

/// Counts one descriptor's `hits` on each of its limits, given their `reports` (config
/// order) and the `bound` one.
pub(super) fn count(stats: &[Arc<LimitStats>], reports: &[Report], bound: usize, hits: u64) {
    for (i, (stats, report)) in stats.iter().zip(reports).enumerate() {
        let mine = stats.0.mine();
        mine.add(if report.over { OVER } else { WITHIN }, hits);
        if i == bound {
            mine.add(BOUND, 1);
        }
    }
}

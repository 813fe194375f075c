//! The cap on request values in labels (`--max-metric-values`).
//!
//! A `detailed_metric` rule labels its series with the request's values (and so does a rule
//! below `value_to_metric` descriptors, at their levels), so without a cap
//! every distinct value sent (a tenant, a client address) would add series for good: 50,000
//! tenants made 300,000 series and a 24.9 MB scrape. Each such rule may create at most
//! [`Metrics::max_metric_values`] series of its own; a request whose values would create
//! one more is counted on the rule's overflow series instead (its values replaced by
//! [`OVERFLOW_VALUE`]), and in `meshlimit_metric_values_overflow_total`. Series already
//! created keep counting. The count is per rule, named by the labels its config path
//! gives it, and survives reloads, as the series do.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};

use foldhash::fast::RandomState;

use super::Metrics;
use super::labels::Labels;
use super::rule_stats::RuleStats;
use super::text::{family, sample};

/// The value that stands for every request value past the cap, in each level's label
/// (`key__other_`, as if the request had sent `_other_`).
pub const OVERFLOW_VALUE: &str = "_other_";

/// Every per-rule series, and the cap's state of each detailed rule.
#[derive(Debug, Default)]
pub(super) struct Series {
    /// Series by labels: configured rules, request values of detailed rules, overflows.
    pub(super) by_labels: HashMap<Labels, Arc<RuleStats>, RandomState>,
    /// Detailed rules by the labels of their config path.
    detailed: HashMap<Labels, Arc<Detailed>, RandomState>,
    /// The limits of rules with several.
    pub(super) limits: super::limits::LimitSeries,
    /// Every configured rule's counts for the operator page.
    pub(super) live: super::live::LiveRules,
}

/// How a request's series of a detailed rule is found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Find {
    /// To count the request on: created if new, the request counted as overflowing when
    /// it lands on the overflow series.
    Count,
    /// Created if new, nothing counted: what the request will be counted on later.
    Create,
    /// Only a series that exists already (for a request that is never counted).
    Existing,
}

/// One detailed rule's share of the series.
#[derive(Debug)]
pub(super) struct Detailed {
    /// The labels of the rule's config path: those of its overflow counter.
    labels: Labels,
    /// Series this rule created for request values; changed only under the series lock,
    /// an atomic because the rule tables share it.
    created: AtomicUsize,
    /// Descriptors counted on the overflow series.
    overflowed: AtomicU64,
}

impl Series {
    /// The series labelled `labels`, created if new.
    pub(super) fn get_or_create(&mut self, labels: Labels) -> Arc<RuleStats> {
        self.by_labels.entry(labels).or_default().clone()
    }

    /// The cap's state of the detailed rule whose config path gives `labels`.
    pub(super) fn detailed_rule(&mut self, labels: Labels) -> Arc<Detailed> {
        self.detailed
            .entry(labels.clone())
            .or_insert_with(|| {
                Arc::new(Detailed {
                    labels,
                    created: AtomicUsize::new(0),
                    overflowed: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// How many series there are.
    pub(super) fn len(&self) -> usize {
        self.by_labels.len()
    }
}

impl Metrics {
    /// Most series one `detailed_metric` rule creates for request values (default
    /// [`crate::defaults::MAX_METRIC_VALUES`]).
    pub fn max_metric_values(&self) -> usize {
        self.max_metric_values.load(Relaxed)
    }

    /// Sets the cap of [`Metrics::max_metric_values`]; applies to series not created yet.
    pub fn set_max_metric_values(&self, cap: usize) {
        self.max_metric_values.store(cap, Relaxed);
    }

    /// The series of a request to `rule` whose own series are `labels`, or the rule's
    /// overflow series (`overflow`) once it has created as many as the cap allows; found
    /// as `find` says (always, for [`Find::Count`] and [`Find::Create`]).
    pub(super) fn detailed_series(
        &self,
        rule: &Detailed,
        labels: Labels,
        overflow: impl FnOnce() -> Labels,
        find: Find,
    ) -> Option<Arc<RuleStats>> {
        let mut series = self.series.lock();
        if let Some(stats) = series.by_labels.get(&labels) {
            return Some(stats.clone());
        }
        if find == Find::Existing {
            return series.by_labels.get(&overflow()).cloned();
        }
        if rule.created.load(Relaxed) < self.max_metric_values() {
            rule.created.fetch_add(1, Relaxed);
            return Some(series.get_or_create(labels));
        }
        if find == Find::Count {
            rule.overflowed.fetch_add(1, Relaxed);
        }
        Some(series.get_or_create(overflow()))
    }

    /// `meshlimit_metric_values_overflow_total`, one sample per detailed rule.
    pub(super) fn render_overflow(&self, out: &mut String) {
        // Rules that differ only below their second level share their labels: summed.
        let mut rules: BTreeMap<Labels, u64> = BTreeMap::new();
        for rule in self.series.lock().detailed.values() {
            *rules.entry(rule.labels.labelled()).or_default() += rule.overflowed.load(Relaxed);
        }
        let name = "meshlimit_metric_values_overflow_total";
        family(
            out,
            name,
            "counter",
            "Descriptors of each detailed_metric or value_to_metric rule counted on its overflow series (values `_other_`) because the rule had reached --max-metric-values series.",
        );
        for (labels, overflowed) in &rules {
            sample(out, name, labels.pairs(), *overflowed);
        }
    }
}

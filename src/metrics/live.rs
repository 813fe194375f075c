//! Per-rule request counts for the operator page: how many descriptors each configured
//! rule allowed and refused, kept per rule (the Prometheus series are per first two
//! levels, which several rules may share). Cumulative; the page's history takes
//! differences once a second (see [`crate::page`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use super::stripes::Counters;

/// Where [`RuleCounts`] counts allowed descriptors.
const ALLOWED: usize = 0;
/// Where [`RuleCounts`] counts descriptors over the limit.
const OVER: usize = 1;

/// One rule's counts.
#[derive(Debug)]
pub struct RuleCounts {
    /// The rule's domain.
    pub domain: Arc<str>,
    /// The rule's path, as `/rlconfig` names it.
    pub path: Arc<str>,
    /// Descriptors the rule allowed (unlimited rules' included) at [`ALLOWED`], and over
    /// its limit (shadow-mode rules' included, answered OK) at [`OVER`]; per thread once
    /// busy, as every worker counts the busiest rules (see `super::stripes`).
    counts: Counters<2>,
    /// The counts when [`RuleCounts::since_last`] last read them: kept with the rule
    /// rather than in a map of every rule beside it.
    sampled: [AtomicU64; 2],
}

impl RuleCounts {
    fn new(domain: &str, path: &str) -> Self {
        Self {
            domain: domain.into(),
            path: path.into(),
            counts: Counters::default(),
            sampled: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Counts for tests elsewhere, in domain `d`.
    #[cfg(test)]
    pub(crate) fn for_test(path: &str) -> Self {
        Self::new("d", path)
    }

    /// One descriptor decided on this rule.
    pub(crate) fn count(&self, over: bool) {
        self.counts.mine().add(if over { OVER } else { ALLOWED }, 1);
    }

    /// (allowed, over) so far.
    pub fn read(&self) -> (u64, u64) {
        (self.counts.get(ALLOWED), self.counts.get(OVER))
    }

    /// (allowed, over) since the previous call; meant for one reader (the page's
    /// once-a-second sampler).
    pub fn since_last(&self) -> (u64, u64) {
        let (allowed, over) = self.read();
        let since = |now: u64, sampled: &AtomicU64| now.saturating_sub(sampled.swap(now, Relaxed));
        (
            since(allowed, &self.sampled[0]),
            since(over, &self.sampled[1]),
        )
    }
}

/// Every configured rule's counts by (domain, path), kept across reloads so that a rule
/// that stays keeps counting where it was; rules a reload removed are dropped by
/// [`LiveRules::keep_only`].
#[derive(Debug, Default)]
pub(super) struct LiveRules(BTreeMap<(Arc<str>, Arc<str>), Arc<RuleCounts>>);

impl LiveRules {
    /// The counts of `path` in `domain`, created if new.
    pub(super) fn of_rule(&mut self, domain: &str, path: &str) -> Arc<RuleCounts> {
        if let Some(counts) = self.0.get(&(domain.into(), path.into())) {
            return counts.clone();
        }
        let counts = Arc::new(RuleCounts::new(domain, path));
        let key = (counts.domain.clone(), counts.path.clone());
        self.0.insert(key, counts.clone());
        counts
    }

    /// Drops the counts no rule in `kept` uses any more.
    pub(super) fn keep_only<'a>(&mut self, kept: impl Iterator<Item = &'a Arc<RuleCounts>>) {
        let kept: std::collections::HashSet<*const RuleCounts> = kept.map(Arc::as_ptr).collect();
        self.0
            .retain(|_, counts| kept.contains(&Arc::as_ptr(counts)));
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rule_keeps_its_counts_until_no_config_has_it() {
        let mut live = LiveRules::default();
        let a = live.of_rule("d", "d.a");
        a.count(false);
        a.count(true);
        a.count(false);
        assert_eq!(a.read(), (2, 1));
        assert_eq!(a.since_last(), (2, 1));
        a.count(true);
        assert_eq!(a.since_last(), (0, 1));
        assert_eq!(a.since_last(), (0, 0));
        assert!(Arc::ptr_eq(&a, &live.of_rule("d", "d.a")));
        let b = live.of_rule("d", "d.b");
        live.keep_only([&b].into_iter());
        assert_eq!(live.len(), 1);
        assert!(!Arc::ptr_eq(&a, &live.of_rule("d", "d.a")));
    }
}

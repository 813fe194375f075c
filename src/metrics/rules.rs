//! Per-rule statistics: the series of each rule of a config, found by the rule's ordinal,
//! and one request's hits counted on them (a series' counters, and how hits split into
//! within, near and over the limit: [`super::rule_stats`]).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use arc_swap::Guard;
use foldhash::fast::RandomState;
use parking_lot::Mutex;

use super::Metrics;
use super::detailed::{Detailed, Find, OVERFLOW_VALUE, Series};
use super::labels::Labels;
use super::limits::{self, LimitStats};
use super::live::RuleCounts;
use super::rule_stats::RuleStats;
use super::value_to_metric::{Valued, names_values};
use crate::config::Config;
use crate::limiter::Report;
use crate::rules::{Limit, Rule};

/// The table a request's rules are counted with: the running config's, or one built for
/// the config a request was decided on when a reload has replaced it since.
pub(super) enum TableRef {
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

/// A config's rules, each with its series, found by the rule's ordinal.
pub(super) struct RuleTable {
    /// The config of these rules, held so that no other rule can take one of their
    /// addresses while the table exists.
    pub(super) config: Arc<Config>,
    /// Each rule's entry at its [`Rule::ordinal`]: an index, not a hash lookup, as every
    /// limited descriptor of every request finds its rule here.
    rules: Vec<Option<RuleEntry>>,
    /// Domain → the series of limits sent in requests, created on first use.
    overrides: HashMap<Box<str>, OnceLock<Arc<RuleStats>>, RandomState>,
}

/// One rule's place in a [`RuleTable`].
struct RuleEntry {
    /// The rule's address: a rule of another config (or none) may carry the same ordinal,
    /// and must not be counted as this one.
    rule: usize,
    /// How its hits are counted.
    counted: Counted,
    /// Its counts for the operator page.
    live: Arc<RuleCounts>,
    /// The counters of each of its limits, for a rule with several.
    limits: Option<Box<[Arc<LimitStats>]>>,
}

impl RuleTable {
    /// The entry of `rule`, if it is one of this table's.
    fn entry(&self, rule: &Rule) -> Option<&RuleEntry> {
        let entry = self.rules.get(rule.ordinal as usize)?.as_ref()?;
        (entry.rule == rule_id(rule)).then_some(entry)
    }

    /// The page's counts of `rule`, if it is one of this table's.
    pub(super) fn live_of(&self, rule: &Rule) -> Option<&Arc<RuleCounts>> {
        self.entry(rule).map(|entry| &entry.live)
    }

    /// The counters of each limit of `rule`, for a rule with several.
    pub(super) fn limits_of(&self, rule: &Rule) -> Option<&[Arc<LimitStats>]> {
        self.entry(rule)?.limits.as_deref()
    }

    /// Every rule's page counts.
    pub(super) fn live(&self) -> impl Iterator<Item = &Arc<RuleCounts>> {
        self.rules.iter().flatten().map(|entry| &entry.live)
    }
}

/// Where a configured rule's hits are counted.
enum Counted {
    /// On the rule's one series.
    Rule(Arc<RuleStats>),
    /// On a series per request value, looked up per request, within the rule's cap.
    Detailed(Arc<Detailed>),
    /// On a series per request value at its `value_to_metric` levels, looked up per
    /// request, within the rule's cap.
    Valued(Valued),
}

fn rule_id(rule: &Rule) -> usize {
    std::ptr::from_ref(rule) as usize
}

/// The table of `config`'s rules, creating their series.
pub(super) fn build_table(series: &Mutex<Series>, config: Arc<Config>) -> RuleTable {
    let mut rules: Vec<Option<RuleEntry>> = Vec::new();
    let mut overrides = HashMap::default();
    {
        let mut series = series.lock();
        for domain in config.domains() {
            let Some(tree) = config.domain(domain) else {
                continue;
            };
            tree.root.visit(&mut Vec::new(), &mut |levels, node| {
                if let Some(rule) = &node.rule {
                    let labels = Labels::of_levels(domain, levels);
                    let counted = if rule.detailed_metric {
                        Counted::Detailed(series.detailed_rule(labels))
                    } else if names_values(rule.value_to_metric) {
                        let cap = series.detailed_rule(labels);
                        Counted::Valued(Valued::new(cap, levels, rule.value_to_metric))
                    } else {
                        Counted::Rule(series.get_or_create(labels))
                    };
                    let at = rule.ordinal as usize;
                    if rules.len() <= at {
                        rules.resize_with(at + 1, || None);
                    }
                    rules[at] = Some(RuleEntry {
                        rule: rule_id(rule),
                        counted,
                        live: series.live.of_rule(domain, &rule.full_key),
                        limits: series.limits.of_rule(domain, rule),
                    });
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
/// The per-rule series of one request, resolved on the table of its config.
pub(crate) struct Rules<'m> {
    /// The service's metrics: the near-limit ratio, and the series created on first use.
    pub(super) metrics: &'m Metrics,
    /// The rule table of the config the request was decided on.
    pub(super) table: TableRef,
}

impl Rules<'_> {
    /// Hits on a limited descriptor: `rule` from the config, or `None` for a limit sent in
    /// the request; `entries` are the request's, needed only by detailed-metric rules.
    pub(crate) fn limited<'e, I>(
        &self,
        domain: &str,
        rule: Option<&Rule>,
        entries: impl Fn() -> I,
        limit: &Limit,
        hits: u64,
        report: &Report,
    ) where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let shadow = rule.is_some_and(|r| r.mode.is_shadow());
        let ratio = self.metrics.near_limit_ratio();
        let live = self.with_stats(domain, rule, &entries, |stats| {
            stats.count(limit, hits, report, shadow, ratio);
        });
        if let Some(live) = live {
            live.count(report.over);
            if report.over {
                self.metrics.refusals.record(live, entries);
            }
        }
    }

    /// Hits on each limit of a rule with several, given their `reports` and the `bound`
    /// one; nothing for other rules.
    pub(crate) fn each_limit(&self, rule: &Rule, reports: &[Report], bound: usize, hits: u64) {
        if let Some(stats) = self.table.limits_of(rule) {
            limits::count(stats, reports, bound, hits);
        }
    }

    /// Hits given back to `rule` (`is_negative_hits`): counted apart from its hits.
    pub(crate) fn refunded<'e, I>(
        &self,
        domain: &str,
        rule: &Rule,
        entries: impl Fn() -> I,
        hits: u64,
    ) where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        self.with_stats(domain, Some(rule), &entries, |stats| stats.refunded(hits));
    }

    /// A hold of `rule`'s: `held` hits taken (1 for a slot), a settle, a slot given back.
    pub(crate) fn hold<'e, I>(
        &self,
        domain: &str,
        rule: &Rule,
        entries: impl Fn() -> I,
        (held, settled, released): (u64, bool, bool),
    ) where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        // The descriptor's hits are counted next, and it on a detailed rule's overflow
        // there, once: but for a slot given back, which has no hits.
        let find = if released { Find::Count } else { Find::Create };
        self.find_stats(domain, Some(rule), &entries, find, |stats| {
            stats.hold(held, settled, released);
        });
    }

    /// Where the stores count `rule`'s holds released unsettled after their TTL: the
    /// series the request's `entries` count on, created if new when `create` (the request
    /// is counted afterwards), or only an existing one (a request that is never counted:
    /// an explanation's).
    pub(crate) fn expiries<'e, I>(
        &self,
        domain: &str,
        rule: &Rule,
        entries: impl Fn() -> I,
        create: bool,
    ) -> Option<crate::store::Expiries>
    where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let find = if create { Find::Create } else { Find::Existing };
        let mut expiries = None;
        self.find_stats(domain, Some(rule), &entries, find, |stats| {
            expiries = Some(stats.expiries().clone());
        });
        expiries
    }

    /// Hits on an unlimited rule: all within its (absent) limit.
    pub(crate) fn unlimited<'e, I>(
        &self,
        domain: &str,
        rule: &Rule,
        entries: impl Fn() -> I,
        hits: u64,
    ) where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let live = self.with_stats(domain, Some(rule), &entries, |stats| {
            stats.within(hits);
        });
        if let Some(live) = live {
            live.count(false);
        }
    }

    /// Counts on the series of `rule` (or the domain's, for a limit sent in the request);
    /// returns the rule's counts for the operator page, to be counted by the caller.
    fn with_stats<'e, I>(
        &self,
        domain: &str,
        rule: Option<&Rule>,
        entries: impl Fn() -> I,
        count: impl FnOnce(&RuleStats),
    ) -> Option<&Arc<RuleCounts>>
    where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        self.find_stats(domain, rule, entries, Find::Count, count)
    }

    /// [`Rules::with_stats`], a detailed rule's series found as `find` says (`count` not
    /// called when there is none).
    fn find_stats<'e, I>(
        &self,
        domain: &str,
        rule: Option<&Rule>,
        entries: impl Fn() -> I,
        find: Find,
        count: impl FnOnce(&RuleStats),
    ) -> Option<&Arc<RuleCounts>>
    where
        I: Iterator<Item = (&'e str, &'e str)>,
    {
        let metrics = self.metrics;
        let Some(rule) = rule else {
            match self.table.overrides.get(domain) {
                Some(slot) => count(slot.get_or_init(|| metrics.series(Labels::of_domain(domain)))),
                None => count(&metrics.series(Labels::of_domain(domain))),
            }
            return None;
        };
        // Not a rule of this config when absent: the service passes its config's rules only.
        let RuleEntry { counted, live, .. } = self.table.entry(rule)?;
        match counted {
            Counted::Rule(stats) => count(stats),
            Counted::Detailed(detailed) => {
                let entries: smallvec::SmallVec<[(&str, &str); 2]> = entries().collect();
                let labels = Labels::of_request(domain, entries.iter().copied());
                let overflow = || {
                    let keys = entries.iter().map(|&(key, _)| (key, OVERFLOW_VALUE));
                    Labels::of_request(domain, keys)
                };
                if let Some(stats) = metrics.detailed_series(detailed, labels, overflow, find) {
                    count(&stats);
                }
            }
            Counted::Valued(valued) => {
                let entries: smallvec::SmallVec<[(&str, &str); 2]> = entries().collect();
                if let Some(stats) = metrics.valued_series(domain, valued, &entries, find) {
                    count(&stats);
                }
            }
        }
        Some(live)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Arc<Config> {
        let domain = |name: &str| {
            let text = format!(
                "domain: {name}\ndescriptors:\n  - key: a\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n    descriptors:\n      - key: b\n        rate_limit: {{unit: minute, requests_per_unit: 2}}\n  - key: c\n    rate_limit: {{unlimited: true}}\n"
            );
            (std::path::PathBuf::from(format!("{name}.yaml")), text)
        };
        Arc::new(Config::from_sources(&[domain("one"), domain("two")]).unwrap())
    }

    #[test]
    fn a_table_finds_its_config_rules_by_ordinal_and_not_those_of_another_config() {
        let (ours, theirs) = (config(), config());
        let table = build_table(&Mutex::default(), ours.clone());
        let mut ordinals: Vec<u32> = ours.rules().iter().map(|r| r.ordinal).collect();
        ordinals.sort_unstable();
        assert_eq!(ordinals, [0, 1, 2, 3, 4, 5], "unique across the domains");
        for rule in ours.rules() {
            let live = table.live_of(rule).expect("a rule of the table's config");
            assert_eq!(&*live.path, rule.full_key);
        }
        // The same ordinals, other rules: not this table's, so not counted on it.
        for rule in theirs.rules() {
            assert!(table.live_of(rule).is_none(), "{}", rule.full_key);
        }
        assert_eq!(table.live().count(), 6);
    }
}

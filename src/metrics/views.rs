//! What the operator page reads of the statistics: every rule of the running config with
//! its counts, and, for rules with several limits, each limit's.

use std::sync::Arc;

use super::Metrics;
use super::live::RuleCounts;
use crate::config::Config;
use crate::rules::Rule;

/// One limit of a rule with several: hits it had room for and refused, and descriptors
/// whose status it was (it bound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitCounts {
    /// Hits this limit had room for.
    pub within: u64,
    /// Hits it refused.
    pub over: u64,
    /// Descriptors it was the binding limit of.
    pub binding: u64,
}

/// A configured rule as the page shows it.
#[derive(Debug)]
pub struct RuleView<'a> {
    /// Its domain.
    pub domain: &'a str,
    /// The rule.
    pub rule: &'a Rule,
    /// Its allowed and over-limit counts.
    pub counts: &'a Arc<RuleCounts>,
    /// Each limit's counts, for a rule with several; empty otherwise.
    pub limits: Vec<LimitCounts>,
}

impl Metrics {
    /// Calls `visit` with every rule of the running config, each domain's tree depth
    /// first in file order, domains sorted; returns that config.
    pub fn visit_rules(&self, mut visit: impl FnMut(RuleView<'_>)) -> Arc<Config> {
        let table = self.refresh();
        let config = table.config.clone();
        for domain in config.domains() {
            let Some(tree) = config.domain(domain) else {
                continue;
            };
            tree.root.visit(&mut Vec::new(), &mut |_, node| {
                let Some(rule) = &node.rule else {
                    return;
                };
                let Some(counts) = table.live_of(rule) else {
                    return;
                };
                let limits = table
                    .limits_of(rule)
                    .map(|each| {
                        each.iter()
                            .map(|stats| {
                                let (within, over, binding) = stats.read();
                                LimitCounts {
                                    within,
                                    over,
                                    binding,
                                }
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                visit(RuleView {
                    domain,
                    rule,
                    counts,
                    limits,
                });
            });
        }
        config
    }
}

//! One answered request's per-rule statistics (see the module docs for what counts).

use std::sync::Arc;

use super::Metrics;
use crate::config::Config;
use crate::limiter::{Report, binding};
use crate::plan::{Plan, Resolved};
use crate::request::{Request, RequestDescriptor};

impl Metrics {
    /// Counts the hits of `request`, decided on `config` by `plan`, with the store's
    /// `reports` (one per limit of each limited descriptor, in request order).
    pub(crate) fn count_hits<D: RequestDescriptor>(
        &self,
        config: &Arc<Config>,
        request: &Request<'_, D>,
        plan: &Plan<'_>,
        reports: &[Report],
    ) {
        let rules = self.rules(config);
        let domain = request.domain;
        let mut rest = reports;
        for (d, resolved) in request.descriptors.iter().zip(plan.resolved()) {
            match resolved {
                Resolved::NoRule | Resolved::Replaced { .. } => {}
                Resolved::Unlimited { rule, hits } => {
                    rules.unlimited(domain, rule, || d.entries(), *hits);
                }
                Resolved::Limited {
                    limits,
                    rule,
                    hits,
                    refund,
                    ..
                } => {
                    let (mine, others) = rest.split_at(limits.len().min(rest.len()));
                    rest = others;
                    if let (Some(rule), true) = (rule, *refund) {
                        rules.refunded(domain, rule, || d.entries(), *hits);
                        continue;
                    }
                    // The rule's series counts the descriptor once, as its status says:
                    // by the binding limit.
                    let bound = binding(mine);
                    let limit = (bound < limits.len()).then(|| limits.get(bound).0);
                    if let (Some(limit), Some(report)) = (limit, mine.get(bound)) {
                        rules.limited(domain, *rule, || d.entries(), &limit, *hits, report);
                    }
                    if let (Some(rule), true) = (rule, mine.len() > 1) {
                        rules.each_limit(rule, mine, bound, *hits);
                    }
                }
            }
        }
    }
}

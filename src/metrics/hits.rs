//! One answered request's per-rule statistics (see the module docs for what counts).

use std::sync::Arc;

use super::Metrics;
use crate::config::Config;
use crate::limiter::{Report, binding};
use crate::plan::{Plan, Resolved};
use crate::request::{Request, RequestDescriptor};
use crate::store::Phase;

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
                    hold,
                    ..
                } => {
                    let (mine, others) = rest.split_at(limits.len().min(rest.len()));
                    rest = others;
                    // A hold's last entry names a request: never a label. Counted only
                    // then: nearly every descriptor keeps all its entries.
                    let named = match hold {
                        Some(h) if h.phase != Phase::Peek => d.entries().count() - 1,
                        _ => usize::MAX,
                    };
                    let entries = || d.entries().take(named);
                    if let (Some(rule), Some(hold)) = (rule, hold) {
                        let slots = hold.rule.slots.is_some();
                        let taken = hold.phase == Phase::Hold && mine.iter().all(|r| !r.over);
                        let held = match (taken, slots) {
                            (false, _) => 0,
                            (true, true) => 1,
                            (true, false) => *hits,
                        };
                        let settled = hold.phase == Phase::Settle;
                        rules.hold(domain, rule, entries, (held, settled, settled && slots));
                        // Giving a slot back is no hit on the limit.
                        if slots && settled {
                            continue;
                        }
                    }
                    if let (Some(rule), true) = (rule, *refund) {
                        rules.refunded(domain, rule, entries, *hits);
                        continue;
                    }
                    // The rule's series counts the descriptor once, as its status says:
                    // by the binding limit.
                    let bound = binding(mine);
                    let limit = (bound < limits.len()).then(|| limits.get(bound).0);
                    if let (Some(limit), Some(report)) = (limit, mine.get(bound)) {
                        rules.limited(domain, *rule, entries, &limit, *hits, report);
                    }
                    if let (Some(rule), true) = (rule, mine.len() > 1) {
                        rules.each_limit(rule, mine, bound, *hits);
                    }
                }
            }
        }
    }
}

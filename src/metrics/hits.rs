//! One answered request's per-rule statistics (see the module docs for what counts).

use std::sync::Arc;

use super::Metrics;
use crate::config::Config;
use crate::limiter::{Report, binding};
use crate::plan::{Plan, PlannedHold, Resolved};
use crate::request::{Request, RequestDescriptor};
use crate::store::{Expiries, Phase};

/// Where the stores count each descriptor's holds released unsettled after their TTL (see
/// [`Metrics::expiries`]); request order, most requests have few descriptors.
pub type DescriptorExpiries = smallvec::SmallVec<[Option<Expiries>; 4]>;

/// How many of a descriptor's entries label its rule's series: all but a hold's last,
/// which names a request (never a label). Counted only then: nearly every descriptor
/// keeps all its entries.
fn labelled<D: RequestDescriptor>(d: &D, hold: Option<&PlannedHold>) -> usize {
    match hold {
        Some(h) if h.phase != Phase::Peek => d.entries().count() - 1,
        _ => usize::MAX,
    }
}

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
                    let named = labelled(d, hold.as_ref());
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

    /// Where the stores count the holds released unsettled after their TTL of each
    /// descriptor of `request`, decided on `config` by `plan`: its rule's series for a
    /// descriptor with a hold, `None` for the others (see
    /// [`HoldOp::expiries`](crate::store::HoldOp::expiries)). Empty when no descriptor
    /// has a hold. `counted`: the request is counted afterwards, so its series may be
    /// created now; otherwise (an explanation) only existing series are given.
    pub(crate) fn expiries<D: RequestDescriptor>(
        &self,
        config: &Arc<Config>,
        request: &Request<'_, D>,
        plan: &Plan<'_>,
        counted: bool,
    ) -> DescriptorExpiries {
        let holding = |r: &Resolved<'_>| {
            matches!(
                r,
                Resolved::Limited {
                    rule: Some(_),
                    hold: Some(_),
                    ..
                }
            )
        };
        if !plan.resolved().iter().any(holding) {
            return DescriptorExpiries::new();
        }
        let rules = self.rules(config);
        let domain = request.domain;
        let each = request.descriptors.iter().zip(plan.resolved());
        each.map(|(d, resolved)| match resolved {
            Resolved::Limited {
                rule: Some(rule),
                hold: Some(hold),
                ..
            } => {
                let named = labelled(d, Some(hold));
                rules.expiries(domain, rule, || d.entries().take(named), counted)
            }
            _ => None,
        })
        .collect()
    }
}

//! One answered request's per-rule statistics (see the module docs for what counts).

use std::sync::Arc;

use super::Metrics;
use crate::config::Config;
use crate::limiter::Report;
use crate::plan::{Plan, Resolved};
use crate::request::RequestDescriptor;

impl Metrics {
    /// Counts the hits of a request decided on `config` by `plan`, with the store's
    /// `reports` (one per limited descriptor, in request order).
    pub(crate) fn count_hits<D: RequestDescriptor>(
        &self,
        config: &Arc<Config>,
        domain: &str,
        descriptors: &[D],
        plan: &Plan<'_>,
        reports: &[Report],
    ) {
        let rules = self.rules(config);
        let mut reports = reports.iter();
        for (d, resolved) in descriptors.iter().zip(plan.resolved()) {
            match resolved {
                Resolved::NoRule | Resolved::Replaced { .. } => {}
                Resolved::Unlimited { rule, hits } => {
                    rules.unlimited(domain, rule, || d.entries(), *hits);
                }
                Resolved::Limited {
                    limit, rule, hits, ..
                } => {
                    if let Some(report) = reports.next() {
                        rules.limited(domain, *rule, || d.entries(), limit, *hits, report);
                    }
                }
            }
        }
    }
}

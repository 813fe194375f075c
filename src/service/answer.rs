//! The answer to a request, built from its plan and the store's reports: per-descriptor
//! statuses (shadow mode turns OVER_LIMIT into OK), the overall code by the quota rule,
//! and the status that `RateLimit-*` headers describe.

use crate::clock::Nanos;
use crate::limiter::{self, Report};
use crate::plan::{Plan, Resolved};
use crate::rules::Unit;

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The request must be refused.
    pub over_limit: bool,
    /// One status per descriptor, in request order.
    pub statuses: Vec<Status>,
    /// The status that `RateLimit-*` response headers describe (§2.2 of the behaviour
    /// reference): the last non-quota OVER_LIMIT one, else the limited one with the
    /// fewest requests remaining; `None` when no descriptor had a limit.
    pub headline: Option<usize>,
}

/// One descriptor's status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Status {
    /// OVER_LIMIT (after shadow mode turned it to OK where configured).
    pub over_limit: bool,
    /// The limit that applied, if any.
    pub current_limit: Option<CurrentLimit>,
    /// Requests left; `u32::MAX` for unlimited rules.
    pub remaining: u32,
    /// See [`crate::limiter::Report::reset`]; `None` when no limit applied.
    pub reset: Option<Nanos>,
}

/// The limit echoed in a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// Unit.
    pub unit: Unit,
    /// The rule's `name`, empty when unnamed or for overrides.
    pub name: String,
}

impl Response {
    /// The answer from `plan` and the store's `reports` (one per limited descriptor, in
    /// request order), and whether the request was over its limits before global shadow
    /// mode (`global_shadow`) turned it OK.
    pub(crate) fn new(plan: &Plan<'_>, reports: &[Report], global_shadow: bool) -> (Self, bool) {
        let mut next_report = reports.iter();
        let statuses: Vec<Status> = plan
            .resolved()
            .iter()
            .map(|resolved| match resolved {
                Resolved::NoRule | Resolved::Replaced { .. } => Status::default(),
                Resolved::Unlimited { .. } => Status {
                    remaining: u32::MAX,
                    ..Status::default()
                },
                Resolved::Limited { limit, rule, .. } => {
                    let report = next_report.next().copied().unwrap_or_default();
                    Status {
                        over_limit: report.over && !resolved.mode().is_shadow(),
                        current_limit: Some(CurrentLimit {
                            requests_per_unit: limit.requests_per_unit,
                            unit: limit.unit,
                            name: rule.map(|r| r.name.clone()).unwrap_or_default(),
                        }),
                        remaining: report.remaining,
                        reset: Some(report.reset),
                    }
                }
            })
            .collect();
        // Each limited descriptor's verdict as the store gave it: shadow mode changes its
        // status, not its vote (quota_mode counts a shadowed rule as over).
        let verdicts = plan
            .resolved()
            .iter()
            .filter(|r| matches!(r, Resolved::Limited { .. }))
            .zip(reports)
            .map(|(resolved, report)| (resolved.mode(), report.over));
        let denied = limiter::request_denied(verdicts);
        let headline = headline(plan, &statuses);
        let response = Response {
            over_limit: denied && !global_shadow,
            statuses,
            headline,
        };
        (response, denied)
    }

    /// Every descriptor OK with no limit: the answer for a domain the config does not have.
    pub(crate) fn no_limits(descriptors: usize) -> Self {
        Response {
            over_limit: false,
            statuses: vec![Status::default(); descriptors],
            headline: None,
        }
    }
}

/// See [`Response::headline`].
fn headline(plan: &Plan<'_>, statuses: &[Status]) -> Option<usize> {
    let quota = |i: usize| plan.resolved()[i].mode().is_quota();
    let over = (0..statuses.len())
        .rev()
        .find(|&i| statuses[i].over_limit && !quota(i));
    over.or_else(|| {
        (0..statuses.len())
            .filter(|&i| statuses[i].current_limit.is_some())
            .min_by_key(|&i| statuses[i].remaining)
    })
}

//! The answer to a request, built from its plan and the store's reports: per-descriptor
//! statuses (shadow mode turns OVER_LIMIT into OK), the overall code by the quota rule,
//! and the status that `RateLimit-*` headers describe.
//!
//! A descriptor with several limits has one status (the protocol has one), OVER_LIMIT
//! when any limit refuses, its numbers from the binding limit ([`crate::limiter::binding`]).

use std::borrow::Cow;

use crate::clock::Nanos;
use crate::limiter::{self, Report, binding};
use crate::plan::{Limits, Plan, Resolved};
use crate::rules::{ConfigLimit, Limit, Unit};

/// The answer to one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The request must be refused.
    pub over_limit: bool,
    /// One status per descriptor, in request order.
    pub statuses: Vec<DescriptorStatus>,
    /// The status that `RateLimit-*` response headers describe (§2.2 of the behaviour
    /// reference): the last non-quota OVER_LIMIT one, else the limited one with the
    /// fewest requests remaining; `None` when no descriptor had a limit.
    pub headline: Option<usize>,
    /// The dynamic metadata to send (a JSON object, sent as a protobuf `Struct`), with
    /// `--response-dynamic-metadata`; see `service::metadata`.
    pub dynamic_metadata: Option<Box<serde_json::Map<String, serde_json::Value>>>,
}

/// One descriptor's status.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescriptorStatus {
    /// OVER_LIMIT (after shadow mode turned it to OK where configured).
    pub over_limit: bool,
    /// The limit that applied, if any.
    pub current_limit: Option<CurrentLimit>,
    /// Requests left; `u32::MAX` for unlimited rules.
    pub remaining: u32,
    /// See [`crate::limiter::Report::reset`]; `None` when no limit applied.
    pub reset: Option<Nanos>,
    /// Every limit of a descriptor with several (a `rate_limits` list), in config order,
    /// the binding one included; empty with one limit, which the fields above describe.
    pub all_limits: Vec<LimitStatus>,
}

/// The limit echoed in a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    /// Requests per unit.
    pub requests_per_unit: u32,
    /// Unit.
    pub unit: Unit,
    /// The period is this many units (not in the protocol's `RateLimit`, which has no
    /// multiplier: shown in headers and explanations).
    pub multiplier: u32,
    /// The limit's `name`, empty when unnamed or for overrides.
    pub name: String,
}

impl CurrentLimit {
    fn of(limit: &Limit, config: Option<&ConfigLimit>) -> Self {
        CurrentLimit {
            requests_per_unit: limit.requests_per_unit,
            unit: limit.unit,
            multiplier: limit.multiplier,
            name: Limits::name(config).to_string(),
        }
    }

    /// The period in seconds.
    pub fn period_seconds(&self) -> u64 {
        self.unit.seconds() * u64::from(self.multiplier)
    }
}

/// One limit of a descriptor with several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitStatus {
    /// The limit.
    pub limit: CurrentLimit,
    /// This limit refuses the descriptor (before shadow mode).
    pub over: bool,
    /// Requests left in it.
    pub remaining: u32,
    /// See [`crate::limiter::Report::reset`].
    pub reset: Nanos,
    /// It is the one the status's own fields describe.
    pub binding: bool,
}

impl DescriptorStatus {
    /// Every limit that applied, in config order: [`DescriptorStatus::all_limits`], or the status's
    /// own limit when it had one (whose `over` is then the status's, after shadow mode).
    /// Borrowed when the status lists them, so that headers built per request copy no
    /// names.
    pub fn each_limit(&self) -> Cow<'_, [LimitStatus]> {
        if !self.all_limits.is_empty() {
            return Cow::Borrowed(&self.all_limits);
        }
        let own = self.current_limit.iter().map(|limit| LimitStatus {
            limit: limit.clone(),
            over: self.over_limit,
            remaining: self.remaining,
            reset: self.reset.unwrap_or(0),
            binding: true,
        });
        Cow::Owned(own.collect())
    }
}

impl Answer {
    /// The answer from `plan` and the store's `reports` (one per limit of each limited
    /// descriptor, in request order), and whether the request was over its limits before
    /// global shadow mode (`global_shadow`) turned it OK.
    pub(crate) fn new(plan: &Plan<'_>, reports: &[Report], global_shadow: bool) -> (Self, bool) {
        let mut rest = reports;
        let passing_quota = plan.has_passing_quota();
        // Each limited descriptor's verdict as the store gave it, with the mode the store
        // decided it with: shadow mode changes its status, not its vote (quota_mode counts
        // a shadowed rule as over).
        let mut verdicts: smallvec::SmallVec<[(usize, crate::rules::Mode, bool); 8]> =
            smallvec::SmallVec::new();
        let statuses: Vec<DescriptorStatus> = plan
            .resolved()
            .iter()
            .enumerate()
            .map(|(descriptor, resolved)| match resolved {
                Resolved::NoRule | Resolved::Replaced { .. } => DescriptorStatus::default(),
                Resolved::Unlimited { .. } => DescriptorStatus {
                    remaining: u32::MAX,
                    ..DescriptorStatus::default()
                },
                Resolved::Limited { limits, .. } => {
                    let (mine, others) = rest.split_at(limits.len().min(rest.len()));
                    rest = others;
                    let over = mine.iter().any(|r| r.over);
                    verdicts.push((descriptor, plan.verdict_mode(resolved, passing_quota), over));
                    status(resolved, limits, mine)
                }
            })
            .collect();
        // Nothing over (nearly every request) is never denied, whatever the modes.
        let denied = verdicts.iter().any(|&(_, _, over)| over)
            && limiter::request_denied(verdicts.iter().copied());
        let headline = headline(plan, &statuses);
        let answer = Answer {
            over_limit: denied && !global_shadow,
            statuses,
            headline,
            dynamic_metadata: None,
        };
        (answer, denied)
    }

    /// Every descriptor OK with no limit: the answer for a domain the config does not have.
    pub(crate) fn no_limits(descriptors: usize) -> Self {
        Answer {
            over_limit: false,
            statuses: vec![DescriptorStatus::default(); descriptors],
            headline: None,
            dynamic_metadata: None,
        }
    }
}

/// A limited descriptor's status from its limits' `reports`.
fn status(resolved: &Resolved<'_>, limits: &Limits<'_>, reports: &[Report]) -> DescriptorStatus {
    let over = reports.iter().any(|r| r.over);
    let over_limit = over && !resolved.mode().is_shadow();
    if let [report] = reports {
        // One limit, nearly every descriptor: its own numbers.
        let (limit, config) = limits.get(0);
        return DescriptorStatus {
            over_limit,
            current_limit: Some(CurrentLimit::of(&limit, config)),
            remaining: report.remaining,
            reset: Some(report.reset),
            all_limits: Vec::new(),
        };
    }
    let bound = binding(reports);
    let all_limits: Vec<LimitStatus> = limits
        .iter()
        .zip(reports)
        .enumerate()
        .map(|(i, ((limit, config), report))| LimitStatus {
            limit: CurrentLimit::of(&limit, config),
            over: report.over,
            remaining: report.remaining,
            reset: report.reset,
            binding: i == bound,
        })
        .collect();
    let report = reports.get(bound).copied().unwrap_or_default();
    DescriptorStatus {
        over_limit,
        current_limit: all_limits.get(bound).map(|l| l.limit.clone()),
        remaining: report.remaining,
        reset: Some(report.reset),
        all_limits,
    }
}

/// See [`Answer::headline`].
fn headline(plan: &Plan<'_>, statuses: &[DescriptorStatus]) -> Option<usize> {
    let quota = |i: usize| plan.mode_of(&plan.resolved()[i]).is_quota();
    let over = (0..statuses.len())
        .rev()
        .find(|&i| statuses[i].over_limit && !quota(i));
    over.or_else(|| {
        (0..statuses.len())
            .filter(|&i| statuses[i].current_limit.is_some())
            .min_by_key(|&i| statuses[i].remaining)
    })
}

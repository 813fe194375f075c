//! One over-limit snapshot ([`Snapshot`]): what it refuses, whether an admission came
//! after it, how long it is kept.

use std::time::Duration;

use super::super::reply::{After, Outcome};
use super::super::script_args::Scale;
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::limiter::{self, Report, State};
use crate::rules::Limit;
use crate::store::Check;

/// An over-limit answer kept locally.
#[derive(Debug, Clone)]
pub(super) enum Snapshot {
    /// A token bucket's state as of the moment the deciding request was sent.
    Bucket {
        /// The limit the state was decided under: another limit (a reload) ignores it.
        limit: Limit,
        /// The bucket's debt at the moment the request was sent.
        state: State,
        /// How long the snapshot is kept: until one hit may pass, at most `max_ttl`.
        ttl: Duration,
    },
    /// A full fixed window: `count` hits until `until` (local clock).
    Window {
        /// The limit the window was counted under: another limit (a reload) ignores it.
        limit: Limit,
        /// Hits counted in the window when Redis answered.
        count: u64,
        /// When the window ends, on the local clock.
        until: Nanos,
        /// How long the snapshot is kept: until the window ends, at most `max_ttl`.
        ttl: Duration,
    },
    /// A sliding window refusing even one hit: frozen (nothing admitted, so nothing
    /// counted) until `until` (local clock), when one hit could pass.
    Sliding {
        /// The limit the window was counted under: another limit (a reload) ignores it.
        limit: Limit,
        /// Hits counted in the window when Redis answered.
        count: u64,
        /// When one hit could pass, on the local clock.
        until: Nanos,
        /// How long the snapshot is kept: until `until`, at most `max_ttl`.
        ttl: Duration,
    },
}

impl Snapshot {
    /// The over-limit report for `check` at `now`, if this snapshot is sure of it.
    pub(super) fn refuses(&self, check: &Check<'_>, now: Nanos) -> Option<Report> {
        match self {
            Snapshot::Bucket { limit, state, .. } if *limit == check.limit => {
                let step = limiter::step(Some(state), limit, check.hits, now);
                step.over().then(|| Report {
                    cached: true,
                    ..step.unconsumed().1
                })
            }
            Snapshot::Window {
                limit,
                count,
                until,
                ..
            } if *limit == check.limit
                && now < *until
                && count.saturating_add(check.hits) > u64::from(limit.requests_per_unit) =>
            {
                Some(Report {
                    over: true,
                    remaining: 0,
                    reset: (until - now).div_ceil(NANOS_PER_SEC) * NANOS_PER_SEC,
                    count: *count,
                    cached: true,
                })
            }
            Snapshot::Sliding {
                limit,
                count,
                until,
                ..
            } if *limit == check.limit => sliding_refusal(limit, *count, *until, check, now),
            _ => None,
        }
    }

    /// Whether Redis surely decided this snapshot after admitting `passed` (sent at
    /// `now`) for `check`. Each algorithm keeps a measure that no later decision lowers
    /// while the snapshot answers: a token bucket's time until full, counted from a fixed
    /// origin (`at × rate + debt`: refill moves `at` forward as much as it lowers the debt,
    /// each admission adds to it), and a window's count. An admission decided later shows
    /// a larger measure; one decided earlier, at most the snapshot's. Only one check can
    /// be misread as earlier: one sent before a later request had reached Redis (the
    /// script then keeps that request's instant, later than `now`); its snapshot is
    /// missing hits, so it refuses less than Redis would, never more.
    pub(super) fn decided_after(&self, check: &Check<'_>, passed: &Outcome, now: Nanos) -> bool {
        match (self, passed.after) {
            (Snapshot::Bucket { limit, state, .. }, After::TokenBucket { debt, .. })
                if *limit == check.limit =>
            {
                let rate = u128::from(limit.requests_per_unit);
                let full_at = |state: &State| match *state {
                    State::TokenBucket { debt, at, .. } => u128::from(at) * rate + debt,
                    _ => u128::MAX,
                };
                full_at(&bucket_state(limit, debt, now)) <= full_at(state)
            }
            (Snapshot::Window { limit, count, .. }, After::FixedWindow { count: passed, .. })
            | (
                Snapshot::Sliding { limit, count, .. },
                After::SlidingWindow { count: passed, .. },
            ) if *limit == check.limit => passed <= *count,
            _ => false,
        }
    }

    /// How long the snapshot is kept.
    pub(super) fn ttl(&self) -> Duration {
        match self {
            Snapshot::Bucket { ttl, .. }
            | Snapshot::Window { ttl, .. }
            | Snapshot::Sliding { ttl, .. } => *ttl,
        }
    }
}

/// The report of a sliding window frozen with `count` hits until `until` for `check` at
/// `now`: what Redis would say, if it is sure. Only for checks of at most one hit: the
/// wait of more depends on how the hits spread over the sub-windows, which the snapshot
/// does not keep, so those go to Redis.
fn sliding_refusal(
    limit: &Limit,
    count: u64,
    until: Nanos,
    check: &Check<'_>,
    now: Nanos,
) -> Option<Report> {
    let never = limit.requests_per_unit == 0;
    if check.hits > 1 || !(never || now < until) {
        return None;
    }
    Some(Report {
        over: true,
        remaining: u32::try_from(u64::from(limit.requests_per_unit).saturating_sub(count))
            .unwrap_or(u32::MAX),
        reset: if never {
            limit.period_nanos()
        } else {
            until - truncated(now, 1)
        },
        count,
        cached: true,
    })
}

/// The token bucket Redis left with `debt` (in its scaled units) for a request sent at
/// `now`, as the embedded store would hold it.
pub(super) fn bucket_state(limit: &Limit, debt: u64, now: Nanos) -> State {
    let scale = Scale::of(limit);
    State::TokenBucket {
        debt: u128::from(debt) * scale.debt_nanos,
        // The script computed the debt as of the quantum it read.
        at: truncated(now, scale.q),
        period: limiter::period_seconds(limit.period_nanos()),
    }
}

/// `now` as the script reads the caller's clock in quanta of `q` microseconds: rounded
/// down to a whole quantum.
fn truncated(now: Nanos, q: u64) -> Nanos {
    let quantum = q.saturating_mul(1000).max(1);
    now - now % quantum
}

/// The instant `us` microseconds after the script's reading of `now` (in whole
/// microseconds), on the local clock.
pub(super) fn after_us(now: Nanos, us: u64) -> Nanos {
    truncated(now, 1).saturating_add(us.saturating_mul(1000))
}

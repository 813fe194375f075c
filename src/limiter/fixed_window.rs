//! The fixed window: every hit counts, denied ones included (as the Go server), in windows
//! aligned to multiples of the period since the epoch. A window's two fates are the same.

use super::{Fates, Report, State, Step, period_seconds};
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::rules::Limit;

/// A fixed window's step: settled already, as both fates count the hits.
pub(super) fn fixed_window(state: Option<&State>, limit: &Limit, hits: u64, now: Nanos) -> Step {
    let (state, report) = fixed_window_at(state, limit, hits, 0, now);
    Step(Fates::Settled(state, report))
}

/// A fixed window's count at `now` with `hits` added and `back` (a refund's) taken out,
/// never below zero.
pub(super) fn fixed_window_at(
    state: Option<&State>,
    limit: &Limit,
    hits: u64,
    back: u64,
    now: Nanos,
) -> (State, Report) {
    // Aligned to multiples of the period since the epoch, as the Go server's windows.
    let window = limit.period_seconds();
    let now_s = now / NANOS_PER_SEC;
    let start = now_s - now_s % window;
    let before = match state {
        Some(&State::FixedWindow {
            start: s,
            count,
            period,
        }) if s == start && u64::from(period) == window => count,
        _ => 0,
    };
    let after = before.saturating_add(hits).saturating_sub(back);
    let limit_n = u64::from(limit.requests_per_unit);
    let over = after > limit_n;
    let report = Report {
        over,
        remaining: if over { 0 } else { (limit_n - after) as u32 },
        reset: (start + window - now_s) * NANOS_PER_SEC,
        count: after,
        cached: false,
    };
    let state = State::FixedWindow {
        start,
        count: after,
        period: period_seconds(limit.period_nanos()),
    };
    (state, report)
}

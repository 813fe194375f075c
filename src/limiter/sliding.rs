//! Sliding windows: at most `requests_per_unit` hits admitted in any interval of one
//! period, whatever the arrival pattern.
//!
//! The period is cut into [`SLIDING_SUBWINDOWS`] sub-windows (S), and a window keeps the
//! admitted hits of the current sub-window and of the S before it: S + 1 counters, so its
//! memory does not depend on the limit. A request passes when those S + 1 counts plus its
//! hits stay within the limit. That bound is exact from above: any interval of one period
//! lies within S + 1 consecutive sub-windows (they start at `ceil(i × period / S)`), and
//! when the last hit admitted in it was decided, every earlier hit of those sub-windows was
//! already counted. The price is that hits up to one sub-window older than a period still
//! count: against an exact log of every request, a request may be refused up to a tenth of
//! a period early, never admitted early.

use super::{Report, State};
use crate::clock::Nanos;
use crate::rules::{Limit, SLIDING_SUBWINDOWS};

/// Counters per window: the current sub-window and the S before it.
const SLOTS: usize = SLIDING_SUBWINDOWS + 1;

/// When sub-window `index` of a window of `period` nanoseconds starts (the Unix epoch is
/// the start of sub-window 0).
pub fn subwindow_start(index: u64, period: Nanos) -> Nanos {
    let scaled = u128::from(index) * u128::from(period);
    u64::try_from(scaled.div_ceil(SLIDING_SUBWINDOWS as u128)).unwrap_or(u64::MAX)
}

/// The sub-window `now` falls in.
fn subwindow_of(now: Nanos, period: Nanos) -> u64 {
    let scaled = u128::from(now) * SLIDING_SUBWINDOWS as u128;
    u64::try_from(scaled / u128::from(period.max(1))).unwrap_or(u64::MAX)
}

/// When a window whose newest sub-window is `newest` holds no admitted hit any more: the
/// start of the sub-window after which its newest counted hit no longer counts (the older
/// ones left before it). 0 when it is already empty.
pub(super) fn empty_at(newest: u64, counts: &[u32; SLOTS], period: Nanos) -> Nanos {
    match counts.iter().position(|&c| c > 0) {
        Some(latest) => {
            subwindow_start(newest.saturating_sub(latest as u64) + SLOTS as u64, period)
        }
        None => 0,
    }
}

/// A window evaluated at `now` for one request (see [`super::Step`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Window {
    /// The current sub-window.
    newest: u64,
    /// Admitted hits per sub-window, `counts[i]` for sub-window `newest - i`.
    counts: [u32; SLOTS],
    /// The period in nanoseconds.
    period: Nanos,
    /// `requests_per_unit`.
    limit: u64,
    /// Hits the request takes if it passes.
    hits: u64,
    /// Hits that must fit for it to pass: a check of 0 hits passes when one more would.
    need: u64,
    /// The sum of `counts`: hits counted against this request.
    counted: u64,
    /// The time of the evaluation.
    now: Nanos,
}

impl Window {
    /// `state` (or a fresh window) seen at `now` by a request of `hits`.
    pub(super) fn at(state: Option<&State>, limit: &Limit, hits: u64, now: Nanos) -> Window {
        let period = limit.period_nanos();
        let current = subwindow_of(now, period);
        let (newest, counts) = match state {
            Some(&State::SlidingWindow {
                newest,
                counts,
                period: p,
            }) if p == period => {
                // A clock that went back keeps counting in the newest sub-window seen.
                let newest_now = current.max(newest);
                (newest_now, shifted(&counts, newest_now - newest))
            }
            // Fresh, another algorithm or another period before a reload: empty.
            _ => (current, [0; SLOTS]),
        };
        Window {
            newest,
            counts,
            period,
            limit: u64::from(limit.requests_per_unit),
            hits,
            need: hits.max(1),
            counted: counts.iter().map(|&c| u64::from(c)).sum(),
            now,
        }
    }

    /// Whether the request's hits fit.
    pub(super) fn passes(&self) -> bool {
        self.limit > 0 && self.counted + self.need <= self.limit
    }

    /// The state to keep: with the hits counted when `consume`.
    pub(super) fn state(&self, consume: bool) -> State {
        let mut counts = self.counts;
        if consume {
            // Passing means counted + hits ≤ limit, a u32.
            counts[0] = counts[0].saturating_add(u32::try_from(self.hits).unwrap_or(u32::MAX));
        }
        State::SlidingWindow {
            newest: self.newest,
            counts,
            period: self.period,
        }
    }

    /// State and report, the hits taken when `consume` (the request passed).
    pub(super) fn outcome(&self, consume: bool) -> (State, Report) {
        let state = self.state(consume);
        let State::SlidingWindow { counts, .. } = state else {
            unreachable!("a window's state is a window")
        };
        let counted = self.counted + if consume { self.hits } else { 0 };
        let over = !self.passes();
        let reset = if over {
            self.retry()
        } else {
            empty_at(self.newest, &counts, self.period).saturating_sub(self.now)
        };
        let report = Report {
            over,
            remaining: u32::try_from(self.limit.saturating_sub(counted)).unwrap_or(u32::MAX),
            reset,
            count: counted,
            cached: false,
        };
        (state, report)
    }

    /// For a request that does not pass: the time until it would.
    fn retry(&self) -> Nanos {
        if self.limit == 0 {
            // Never passes: report one period, as the other algorithms do.
            return self.period;
        }
        if self.need > self.limit {
            // More than the window can ever admit: the best moment is when it is empty.
            return empty_at(self.newest, &self.counts, self.period).saturating_sub(self.now);
        }
        // The first later sub-window where enough of the oldest counts have dropped out.
        let mut still_counted = self.counted;
        for dropped in 1..=SLOTS {
            still_counted -= u64::from(self.counts[SLOTS - dropped]);
            if still_counted + self.need <= self.limit {
                let at = subwindow_start(self.newest + dropped as u64, self.period);
                return at.saturating_sub(self.now);
            }
        }
        unreachable!("an empty window admits what the limit allows")
    }
}

/// `counts` moved on by `by` sub-windows: the oldest drop out, new ones are empty.
fn shifted(counts: &[u32; SLOTS], by: u64) -> [u32; SLOTS] {
    let mut out = [0; SLOTS];
    if let Ok(by) = usize::try_from(by) {
        if by < SLOTS {
            out[by..].copy_from_slice(&counts[..SLOTS - by]);
        }
    }
    out
}

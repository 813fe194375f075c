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

use super::{Report, State, period_seconds};
use crate::clock::{NANOS_PER_SEC, Nanos};
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
            }) if u64::from(p) * NANOS_PER_SEC == period => {
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

    /// This window's state holding `counts`.
    fn state_with(&self, counts: [u32; SLOTS]) -> State {
        State::SlidingWindow {
            newest: self.newest,
            counts,
            period: period_seconds(self.period),
        }
    }

    /// The counters to keep: with the hits counted when `consume`.
    fn counts_after(&self, consume: bool) -> [u32; SLOTS] {
        let mut counts = self.counts;
        if consume {
            // Passing means counted + hits ≤ limit, a u32.
            counts[0] = counts[0].saturating_add(u32::try_from(self.hits).unwrap_or(u32::MAX));
        }
        counts
    }

    /// State and report, the hits taken when `consume` (the request passed).
    pub(super) fn outcome(&self, consume: bool) -> (State, Report) {
        let counts = self.counts_after(consume);
        let counted = self.counted + if consume { self.hits } else { 0 };
        self.settled(counts, counted, !self.passes())
    }

    /// State and report of this window left holding `counts` (`counted` hits in all): when
    /// `over`, reset is the time until its request could pass, else until it is empty.
    fn settled(&self, counts: [u32; SLOTS], counted: u64, over: bool) -> (State, Report) {
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
        (self.state_with(counts), report)
    }

    /// A charge of `hits` on this window (evaluated for no hits): counted whatever the
    /// answer, over when it takes the window past its limit.
    pub(super) fn charged(&self, hits: u64) -> (State, Report) {
        let mut counts = self.counts;
        counts[0] = counts[0].saturating_add(u32::try_from(hits).unwrap_or(u32::MAX));
        self.landed(counts)
    }

    /// A refund of `hits` on this window (evaluated for no hits): taken from the newest
    /// sub-windows first, where the hits it gives back were most likely counted, and
    /// never below zero.
    pub(super) fn refunded(&self, hits: u64) -> (State, Report) {
        let mut counts = self.counts;
        let mut back = hits;
        for count in &mut counts {
            let taken = u32::try_from(back.min(u64::from(*count))).unwrap_or(u32::MAX);
            *count -= taken;
            back -= u64::from(taken);
        }
        self.landed(counts)
    }

    /// State and report of a window whose charge or refund left it holding `counts`.
    fn landed(&self, counts: [u32; SLOTS]) -> (State, Report) {
        let after = Window {
            counts,
            counted: counts.iter().map(|&c| u64::from(c)).sum(),
            ..*self
        };
        let over = after.limit == 0 || after.counted > after.limit;
        after.settled(counts, after.counted, over)
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
    if let Ok(by) = usize::try_from(by)
        && by < SLOTS
    {
        out[by..].copy_from_slice(&counts[..SLOTS - by]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::NANOS_PER_SEC as S;
    use crate::limiter::step;
    use crate::limiter::tests::hit;
    use crate::rules::{Algorithm, Unit};

    /// 2026-01-01T00:00:00Z: aligned to every sub-window of the periods used here.
    const T0: Nanos = 1_767_225_600 * S;
    const MS: Nanos = 1_000_000;

    fn sliding(requests_per_unit: u32, unit: Unit, multiplier: u32) -> Limit {
        Limit {
            charge: false,
            requests_per_unit,
            unit,
            multiplier,
            burst: requests_per_unit,
            algorithm: Algorithm::SlidingWindow,
        }
    }

    #[test]
    fn no_double_burst_across_a_window_edge() {
        // 10 per second: 10 at the end of one second, none at the start of the next.
        let l = sliding(10, Unit::Second, 1);
        let mut state = None;
        for _ in 0..10 {
            assert!(!hit(&mut state, &l, 1, T0 + 950 * MS).over);
        }
        let refused = hit(&mut state, &l, 1, T0 + 1_050 * MS);
        assert!(refused.over);
        // Those 10 count until their sub-window (900–1000 ms) leaves the window at 2.0 s.
        assert_eq!(refused.reset, 950 * MS);
        assert!(hit(&mut state, &l, 1, T0 + 2_000 * MS - 1).over);
        assert!(!hit(&mut state, &l, 1, T0 + 2_000 * MS).over);
    }

    #[test]
    fn a_denied_request_consumes_nothing_and_its_retry_is_exact() {
        let l = sliding(3, Unit::Minute, 5); // 3 per 5 minutes: sub-windows of 30 s
        let mut state = None;
        assert!(!hit(&mut state, &l, 2, T0).over);
        assert!(!hit(&mut state, &l, 1, T0 + 40 * S).over);
        let before = state;
        let refused = hit(&mut state, &l, 1, T0 + 60 * S);
        assert!(refused.over);
        let untouched = step(before.as_ref(), &l, 0, T0 + 60 * S).unconsumed().0;
        assert_eq!(state, Some(untouched), "a refusal changes nothing");
        // The 2 hits of sub-window 0 leave when sub-window 11 starts (5.5 minutes).
        assert_eq!(refused.reset, 330 * S - 60 * S);
        assert!(hit(&mut state, &l, 1, T0 + 330 * S - 1).over);
        assert!(!hit(&mut state, &l, 1, T0 + 330 * S).over);
    }

    #[test]
    fn a_request_larger_than_the_limit_waits_for_an_empty_window() {
        let l = sliding(3, Unit::Second, 1);
        let mut state = None;
        assert!(!hit(&mut state, &l, 1, T0).over);
        let refused = hit(&mut state, &l, 4, T0 + 10 * MS);
        assert!(refused.over);
        assert_eq!(refused.reset, 1_100 * MS - 10 * MS);
        let never = sliding(0, Unit::Hour, 1);
        assert_eq!(hit(&mut None, &never, 1, T0).reset, Unit::Hour.nanos());
    }

    #[test]
    fn ok_reports_remaining_and_the_time_until_empty() {
        let l = sliding(5, Unit::Second, 1);
        let mut state = None;
        let first = hit(&mut state, &l, 2, T0 + 120 * MS);
        assert_eq!((first.remaining, first.reset), (3, 1_200 * MS - 120 * MS));
        let peek = step(state.as_ref(), &l, 0, T0 + 500 * MS).consumed().1;
        assert_eq!((peek.over, peek.remaining), (false, 3));
        // A check of 0 hits passes while one more hit would.
        assert!(!hit(&mut state, &l, 3, T0 + 500 * MS).over);
        assert!(step(state.as_ref(), &l, 0, T0 + 500 * MS).over());
    }

    #[test]
    fn memory_does_not_grow_with_the_limit_and_old_counts_drop_out() {
        let l = sliding(u32::MAX, Unit::Day, 1);
        let mut state = None;
        for i in 0..30 {
            hit(&mut state, &l, 1_000_000, T0 + i * 3_600 * S);
        }
        let Some(State::SlidingWindow { counts, .. }) = state else {
            panic!("a window")
        };
        // Sub-windows of 2.4 hours: at 29 h the 11 counted ones start at 4.8 h, so they
        // hold the hits of hours 5 to 29.
        assert_eq!(
            counts.iter().map(|&c| u64::from(c)).sum::<u64>(),
            25_000_000
        );
        // Eleven 4-byte counters, the newest sub-window and the period, whatever the
        // limit.
        assert_eq!(std::mem::size_of::<State>(), 64);
    }

    #[test]
    fn a_reload_changing_the_period_starts_afresh() {
        let mut state = None;
        hit(&mut state, &sliding(1, Unit::Second, 1), 1, T0);
        assert!(!hit(&mut state, &sliding(1, Unit::Second, 2), 1, T0).over);
    }

    #[test]
    fn sub_windows_start_at_tenths_of_the_period() {
        assert_eq!(subwindow_start(10, Unit::Second.nanos()), S);
        assert_eq!(subwindow_start(3, 60 * S), 18 * S);
        assert_eq!(subwindow_of(T0 + 99 * MS, S), T0 / S * 10);
        assert_eq!(subwindow_of(T0 + 100 * MS, S), T0 / S * 10 + 1);
    }
}

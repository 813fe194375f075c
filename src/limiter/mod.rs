//! The three algorithms as pure functions of (stored state, limit, hits, now).
//!
//! Stores own atomicity and persistence; this module owns the arithmetic. A decision is a
//! two-phase [`Step`]: the store evaluates every descriptor of a request, decides with
//! [`request_denied`] whether the request passes, then keeps either the `consumed` or the
//! `unconsumed` state of each descriptor. That is how a denied request consumes no token in
//! any bucket, while fixed windows keep the Go server's count-every-hit behaviour (both of
//! their states are the same).
//!
//! Each algorithm has a file of its own: the token bucket in [`bucket`] (its state a
//! *debt*, in exact integers), the fixed window in [`fixed_window`], the sliding window in
//! [`sliding`]. This file is the two-phase step that dispatches to them.
//!
//! A limit that charges ([`Limit::charge`]) records every hit of a request, whatever the
//! request's fate: a charge, and a refund ([`refund`]), *land*, so both of their fates are
//! the same. A token bucket's debt may then pass its capacity (the bucket is *in debt*,
//! its level below zero), up to [`DEBT_PERIODS`](crate::rules::DEBT_PERIODS) periods of
//! refill beyond it.

mod binding;
mod bucket;
mod fixed_window;
mod sliding;

use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::rules::{Algorithm, Limit, Mode, SLIDING_SUBWINDOWS};
pub use binding::binding;
use bucket::{Bucket, bucket_charge, bucket_refund, token_bucket};
use fixed_window::{fixed_window, fixed_window_at};
pub use sliding::subwindow_start;

/// What a store keeps per bucket between requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Token bucket: `debt` (scaled, see [`bucket`]) as of time `at`, for a bucket of
    /// this `period` (a reload that changes the period rescales the debt).
    TokenBucket {
        /// Tokens missing × period in nanoseconds.
        debt: u128,
        /// When `debt` was computed.
        at: Nanos,
        /// The period the debt is scaled by, in seconds (whole seconds always: a unit
        /// times a multiplier; 32 bits keep this state, the most common, in 32 bytes).
        period: u32,
    },
    /// Fixed window: `count` hits in the window starting at `start` (Unix seconds).
    FixedWindow {
        /// Window start, Unix seconds, aligned to the period.
        start: u64,
        /// Hits counted in that window, denied ones included.
        count: u64,
        /// The window's length in seconds.
        period: u32,
    },
    /// Sliding window: admitted hits per sub-window, newest first.
    SlidingWindow {
        /// The index of the newest sub-window (see [`subwindow_start`]).
        newest: u64,
        /// `counts[i]`: hits admitted in sub-window `newest - i`.
        counts: [u32; SLIDING_SUBWINDOWS + 1],
        /// The window's period in seconds (a reload that changes it starts afresh).
        period: u32,
    },
}

/// What a descriptor's status says, after the request's fate is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Report {
    /// The descriptor is over its limit.
    pub over: bool,
    /// Whole tokens (or window requests) left.
    pub remaining: u32,
    /// Token bucket and sliding window: time until full (empty) when OK, time until this
    /// request could pass when over. Fixed window: time until the window ends, in whole
    /// seconds.
    pub reset: Nanos,
    /// Fixed window: hits counted in the window with this request's, denied ones included
    /// (what the near-limit statistics split on); sliding window: hits counted against the
    /// request, its own included when taken; token bucket: whole tokens it owes below
    /// empty, 0 unless charges put it in debt (see [`Report::owed`]).
    pub count: u64,
    /// Answered from this replica's over-limit cache, without asking the shared store.
    pub cached: bool,
}

impl Report {
    /// Whole hits the bucket of `limit` (the limit it was decided under) owes after the
    /// decision: below empty for a token bucket, past the limit for a window of a limit
    /// that charges. Only charges take a bucket there. Kept in `count`, which a token
    /// bucket has no other use for, so that a report stays three words (24 bytes).
    pub fn owed(&self, limit: &Limit) -> u64 {
        match limit.algorithm {
            Algorithm::TokenBucket => self.count,
            _ if limit.charge => self
                .count
                .saturating_sub(u64::from(limit.requests_per_unit)),
            _ => 0,
        }
    }
}

/// One descriptor evaluated, both fates of its request still open. Reports are computed
/// only for the fate that is asked for: the divisions they need are most of the cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step(
    /// The algorithm's numbers, from which either fate's state and report are computed.
    Fates,
);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fates {
    TokenBucket(Bucket),
    /// Decided whatever the request's fate: a fixed window (every hit counts), a charge
    /// or a refund (they land).
    Settled(State, Report),
    SlidingWindow(sliding::Window),
}

impl Step {
    /// Whether this descriptor alone refuses the request.
    pub fn over(&self) -> bool {
        match &self.0 {
            Fates::TokenBucket(b) => b.over(),
            Fates::Settled(_, report) => report.over,
            Fates::SlidingWindow(w) => !w.passes(),
        }
    }

    /// State and report if the request is allowed and its hits are taken.
    pub fn consumed(&self) -> (State, Report) {
        match &self.0 {
            Fates::TokenBucket(b) => b.consumed(),
            Fates::Settled(state, report) => (*state, *report),
            Fates::SlidingWindow(w) => w.outcome(w.passes()),
        }
    }

    /// State and report if the request is denied (by this or another descriptor).
    pub fn unconsumed(&self) -> (State, Report) {
        match &self.0 {
            Fates::TokenBucket(b) => b.unconsumed(),
            Fates::Settled(state, report) => (*state, *report),
            Fates::SlidingWindow(w) => w.outcome(false),
        }
    }

    /// The outcome to keep, given the request's fate.
    pub fn settle(&self, request_denied: bool) -> (State, Report) {
        if request_denied {
            self.unconsumed()
        } else {
            self.consumed()
        }
    }
}

/// Evaluates `hits` against `limit` given the stored `state` (or none) at `now`.
///
/// `hits == 0` is a check that consumes nothing: it passes when one more hit would
/// (token bucket) or when the count is not already over (fixed window, as the Go server).
///
/// On a limit that charges, `hits > 0` is a charge: recorded in full whatever the answer
/// (see the module docs), over when it leaves the bucket in debt.
pub fn step(state: Option<&State>, limit: &Limit, hits: u64, now: Nanos) -> Step {
    match limit.algorithm {
        Algorithm::TokenBucket if limit.charge && hits > 0 => {
            bucket_charge(state, limit, hits, now)
        }
        Algorithm::TokenBucket => token_bucket(state, limit, hits, now),
        // Every hit counts in a fixed window: a charge's as any other.
        Algorithm::FixedWindow => fixed_window(state, limit, hits, now),
        Algorithm::SlidingWindow if limit.charge && hits > 0 => {
            let (state, report) = sliding::Window::at(state, limit, 0, now).charged(hits);
            Step(Fates::Settled(state, report))
        }
        Algorithm::SlidingWindow => Step(Fates::SlidingWindow(sliding::Window::at(
            state, limit, hits, now,
        ))),
    }
}

/// Gives `hits` back to the bucket of `limit` (`is_negative_hits`, on a limit that
/// charges): a token bucket never fills past its burst, a window's count never goes below
/// zero. It lands whatever the request's fate, and is over while the bucket is still in
/// debt.
pub fn refund(state: Option<&State>, limit: &Limit, hits: u64, now: Nanos) -> Step {
    let (state, report) = match limit.algorithm {
        Algorithm::TokenBucket => bucket_refund(state, limit, hits, now),
        Algorithm::FixedWindow => fixed_window_at(state, limit, 0, hits, now),
        Algorithm::SlidingWindow => sliding::Window::at(state, limit, 0, now).refunded(hits),
    };
    Step(Fates::Settled(state, report))
}

/// What [`Step::unconsumed`] gives, worked out from the state [`Step::consumed`] kept for a
/// limit that passed (its report not over), at the same `now`, `limit` and `hits`: the
/// hits are taken out again and the limit evaluated afresh. A store that keeps each
/// consumed state at once, since nearly every request passes, can so put a denied request
/// back without a copy of every state it found. (A limit that was over took nothing: its
/// consumed outcome is already the unconsumed one.)
pub fn unconsumed_from(consumed: &State, limit: &Limit, hits: u64, now: Nanos) -> (State, Report) {
    let (before, hits_again) = match *consumed {
        State::TokenBucket { debt, at, period } => {
            // It passed: `consumed` added exactly `hits` tokens to the debt it found.
            let taken = u128::from(hits) * u128::from(limit.period_nanos());
            let debt = debt.saturating_sub(taken);
            (State::TokenBucket { debt, at, period }, hits)
        }
        // Counted denied or not: evaluated again with no hits, it reports the same.
        State::FixedWindow { .. } => (*consumed, 0),
        State::SlidingWindow {
            newest,
            mut counts,
            period,
        } => {
            // It passed: `consumed` added `hits` (a u32, as they fit the limit) to the
            // newest sub-window, which is `now`'s.
            counts[0] = counts[0].saturating_sub(u32::try_from(hits).unwrap_or(u32::MAX));
            let state = State::SlidingWindow {
                newest,
                counts,
                period,
            };
            (state, hits)
        }
    };
    step(Some(&before), limit, hits_again, now).unconsumed()
}

impl State {
    /// How long from `now` until this state is indistinguishable from no state at all
    /// (bucket full again, window over). Stores use it to expire idle entries.
    pub fn idle_in(&self, now: Nanos, requests_per_unit: u32) -> Nanos {
        match *self {
            State::TokenBucket { debt, at, .. } => {
                let rpu = u128::from(requests_per_unit.max(1));
                let full_at = u128::from(at) + ceil_div(debt, rpu) as u128;
                full_at
                    .saturating_sub(u128::from(now))
                    .min(u128::from(u64::MAX)) as u64
            }
            State::FixedWindow { start, period, .. } => {
                ((start + u64::from(period)) * NANOS_PER_SEC).saturating_sub(now)
            }
            State::SlidingWindow {
                newest,
                counts,
                period,
            } => sliding::empty_at(newest, &counts, u64::from(period) * NANOS_PER_SEC)
                .saturating_sub(now),
        }
    }
}

/// A period of `nanos` (whole seconds, at most [`crate::rules::MAX_PERIOD_SECONDS`]) in
/// seconds, as states keep it.
pub(crate) fn period_seconds(nanos: Nanos) -> u32 {
    u32::try_from(nanos / NANOS_PER_SEC).unwrap_or(u32::MAX)
}

pub(crate) fn ceil_div(a: u128, b: u128) -> Nanos {
    if b == 0 {
        return 0;
    }
    let q = div(a, b);
    let q = if q * b < a { q + 1 } else { q };
    u64::try_from(q).unwrap_or(u64::MAX)
}

/// `a / b`, in one machine division when both fit in 64 bits (nearly always: a debt of a
/// full one-second bucket of 4 billion is 4e18), instead of a 128-bit division routine.
#[inline]
fn div(a: u128, b: u128) -> u128 {
    match (u64::try_from(a), u64::try_from(b)) {
        (Ok(a), Ok(b)) => u128::from(a / b),
        _ => a / b,
    }
}

/// §1.5 of the reference: the request is denied when an enforced descriptor is over, or
/// when it has quota-mode descriptors and all of them are over. Shadow never denies.
///
/// `verdicts` are one per store check, `(descriptor index, mode, over)` in request order:
/// a descriptor with several limits has several checks, and is over when any of them is.
pub fn request_denied(verdicts: impl IntoIterator<Item = (usize, Mode, bool)>) -> bool {
    let mut quota_seen = false;
    let mut quota_all_over = true;
    // The quota descriptor being read, and whether any of its limits is over so far: only
    // quota mode needs a descriptor's verdict whole (an enforced limit over denies alone).
    let mut open: Option<(usize, bool)> = None;
    for (descriptor, mode, over) in verdicts {
        match mode {
            Mode::Enforce if over => return true,
            Mode::Enforce | Mode::Shadow => {}
            Mode::Quota => {
                quota_seen = true;
                match &mut open {
                    Some((same, any_over)) if *same == descriptor => *any_over |= over,
                    _ => {
                        if let Some((_, any_over)) = open.replace((descriptor, over)) {
                            quota_all_over &= any_over;
                        }
                    }
                }
            }
            Mode::ShadowQuota => {
                quota_seen = true;
                quota_all_over = false;
            }
        }
    }
    if let Some((_, any_over)) = open {
        quota_all_over &= any_over;
    }
    quota_seen && quota_all_over
}

#[cfg(test)]
mod tests;

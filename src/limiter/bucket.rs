//! The token bucket: a limit's `burst` tokens, refilled at `requests_per_unit` per period.
//!
//! Token-bucket state is the bucket's *debt*: the tokens missing from a full bucket, scaled
//! so that all arithmetic is exact integers. One token is worth the period (`unit` ×
//! `unit_multiplier`) in nanoseconds and the bucket refills `requests_per_unit` scaled
//! units per nanosecond, so `debt / rpu` is the time in nanoseconds until the bucket is
//! full again. No rounding ever drifts.
//!
//! A charge ([`bucket_charge`]) and a refund ([`bucket_refund`]) land whatever the
//! request's fate; a charge may put the bucket in debt, its level below zero, up to
//! [`DEBT_PERIODS`] periods of refill past empty.

use super::{Fates, Report, State, Step, ceil_div, div, period_seconds};
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::rules::{DEBT_PERIODS, Limit};

/// A token bucket's numbers at `now` (see the module docs for the scaling).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bucket {
    /// The rule's period in nanoseconds, recorded in the new state so that a reload
    /// changing it can rescale the debt.
    period: Nanos,
    /// The time of this evaluation: the new state's `at`.
    now: Nanos,
    /// One token, scaled: the period in nanoseconds.
    token: u128,
    /// Refill per nanosecond, scaled: `requests_per_unit`.
    rpu: u128,
    /// Capacity, scaled.
    cap: u128,
    /// The limit charges: the bucket may owe [`DEBT_PERIODS`] periods of refill past
    /// empty (see [`Bucket::ceiling`]).
    charges: bool,
    /// Debt before this request.
    debt: u128,
    /// Scaled tokens this request takes if it passes (a charge's: what it adds to the
    /// debt, whatever the fate); `None` when it cannot pass.
    take: Option<u128>,
    /// `take` is a charge: it lands in either fate, up to the ceiling.
    is_charge: bool,
    /// When over: the time until this request could pass.
    retry: Nanos,
}

impl Bucket {
    /// Whether this bucket alone refuses the request (see [`Step::over`]).
    #[inline]
    pub(super) fn over(&self) -> bool {
        if self.is_charge {
            // A charge in debt after it has the time until one hit passes; otherwise 0.
            self.retry > 0
        } else {
            self.take.is_none()
        }
    }

    /// State and report if the request is allowed and its hits are taken (see
    /// [`Step::consumed`]).
    #[inline]
    pub(super) fn consumed(&self) -> (State, Report) {
        if self.is_charge {
            return self.charged();
        }
        match self.take {
            Some(take) => self.outcome(self.debt + take, false),
            None => self.outcome(self.debt, true),
        }
    }

    /// State and report if the request is denied, by this or another descriptor (see
    /// [`Step::unconsumed`]).
    #[inline]
    pub(super) fn unconsumed(&self) -> (State, Report) {
        if self.is_charge {
            self.charged()
        } else {
            self.outcome(self.debt, self.take.is_none())
        }
    }

    fn outcome(&self, debt: u128, over: bool) -> (State, Report) {
        self.report(debt, over, self.retry)
    }

    /// The most debt the bucket may hold: its capacity, and [`DEBT_PERIODS`] periods of
    /// refill when the limit charges. Computed only for a bucket past empty, as most never
    /// are.
    fn ceiling(&self) -> u128 {
        if self.charges {
            self.cap + u128::from(DEBT_PERIODS) * self.rpu * self.token
        } else {
            self.cap
        }
    }

    /// `debt` past the capacity held to the ceiling.
    #[inline]
    fn held(&self, debt: u128) -> u128 {
        if debt > self.cap {
            debt.min(self.ceiling())
        } else {
            debt
        }
    }

    /// A charge's outcome, the same in either fate (see [`bucket_charge`]).
    #[inline]
    fn charged(&self) -> (State, Report) {
        let debt = self.debt + self.take.unwrap_or(0);
        self.report(debt, self.retry > 0, self.retry)
    }

    /// The time until one hit could pass a bucket (that refills) left with `debt` by a
    /// charge or a refund: 0 unless it is in debt.
    #[inline]
    fn debt_retry(&self, debt: u128) -> Nanos {
        if debt > self.cap {
            ceil_div(debt - self.cap + self.token, self.rpu)
        } else {
            0
        }
    }

    /// State and report with `debt` after the decision; `retry` when `over`.
    fn report(&self, debt: u128, over: bool, retry: Nanos) -> (State, Report) {
        let remaining = if self.rpu == 0 {
            0 // never refills: nothing to offer, whatever the burst says
        } else {
            u32::try_from(div(self.cap.saturating_sub(debt), self.token)).unwrap_or(u32::MAX)
        };
        let owed = debt.saturating_sub(self.cap);
        let reset = if over {
            retry
        } else {
            ceil_div(debt, self.rpu)
        };
        let report = Report {
            over,
            remaining,
            reset,
            count: if owed == 0 {
                0
            } else {
                ceil_div(owed, self.token)
            },
            ..Report::default()
        };
        let state = State::TokenBucket {
            debt,
            at: self.now,
            period: period_seconds(self.period),
        };
        (state, report)
    }
}

impl Bucket {
    /// The bucket of `limit` in `state` (or a fresh one) refilled to `now`, before any
    /// request: nothing taken, no retry.
    #[inline]
    fn at(state: Option<&State>, limit: &Limit, now: Nanos) -> Bucket {
        let period = limit.period_nanos();
        let token = u128::from(period);
        let rpu = u128::from(limit.requests_per_unit);
        let cap = u128::from(limit.burst) * token;
        let debt = match state {
            Some(&State::TokenBucket {
                debt,
                at,
                period: old,
            }) => {
                let debt = if u64::from(old) * NANOS_PER_SEC == period {
                    debt
                } else {
                    // Same tokens missing, in the new period's scale. Whole tokens and the
                    // remainder separately: `debt * token` alone can pass u128::MAX.
                    let old = u128::from(old.max(1)) * u128::from(NANOS_PER_SEC);
                    debt / old * token + debt % old * token / old
                };
                let refilled = u128::from(now.saturating_sub(at)) * rpu;
                debt.saturating_sub(refilled)
            }
            // A fresh bucket, or one that was a fixed window before a reload: full.
            _ => 0,
        };
        let mut bucket = Bucket {
            period,
            now,
            token,
            rpu,
            cap,
            charges: limit.charge,
            debt,
            take: None,
            is_charge: false,
            retry: 0,
        };
        // Within the limit's ceiling even when a reload lowered it: without charges, the
        // capacity (an empty bucket, as a denial leaves it).
        bucket.debt = bucket.held(debt);
        bucket
    }
}

/// A charge on a token bucket, as a take's step with the debt it leaves (see
/// [`Bucket::charged`]), so that it costs what a take does.
#[inline]
pub(super) fn bucket_charge(state: Option<&State>, limit: &Limit, hits: u64, now: Nanos) -> Step {
    let mut b = Bucket::at(state, limit, now);
    if b.rpu == 0 {
        // Never refills: nothing to record into, nothing passes for a period.
        b.retry = b.period;
    } else {
        // What the charge leaves, worked out once: both fates keep it.
        // No overflow: a debt within the ceiling plus 2^64 tokens of 100 years are below
        // 2^128.
        let debt = b.held(b.debt + u128::from(hits) * b.token);
        b.take = Some(debt - b.debt);
        b.is_charge = true;
        b.retry = b.debt_retry(debt);
    }
    Step(Fates::TokenBucket(b))
}

pub(super) fn token_bucket(state: Option<&State>, limit: &Limit, hits: u64, now: Nanos) -> Step {
    let mut b = Bucket::at(state, limit, now);
    let take = u128::from(hits) * b.token;
    let need = take.max(b.token);
    // In debt, a bucket's level is below zero: `cap - debt` would be negative.
    let passes = b.rpu > 0 && b.debt <= b.cap && need <= b.cap - b.debt;
    b.retry = if passes {
        0
    } else if b.rpu == 0 {
        // Never refills: report one period, as a fixed window of 0 would.
        b.period
    } else if need <= b.cap {
        ceil_div(need + b.debt - b.cap, b.rpu)
    } else {
        // More than the burst can ever hold: the best moment is when it is full.
        ceil_div(b.debt, b.rpu)
    };
    b.take = passes.then_some(take);
    Step(Fates::TokenBucket(b))
}

/// A token bucket's refund (see [`super::refund`]).
pub(super) fn bucket_refund(
    state: Option<&State>,
    limit: &Limit,
    hits: u64,
    now: Nanos,
) -> (State, Report) {
    let mut b = Bucket::at(state, limit, now);
    if b.rpu == 0 {
        // Never refills: nothing to record into, nothing ever passes for a period.
        b.retry = b.period;
        return b.outcome(b.debt, true);
    }
    let debt = b.debt.saturating_sub(u128::from(hits) * b.token);
    let retry = b.debt_retry(debt);
    b.report(debt, retry > 0, retry)
}

//! Property tests of the token-bucket (and fixed-window) arithmetic through the public API.
//!
//! Every step takes an explicit `now`: nothing sleeps and nothing reads the real clock.
//! Failures are saved next to this file, in `proptest_bucket.proptest-regressions`
//! (committed: its seeds run first, every time).

use meshlimit::limiter::{Report, State, step, unconsumed_from};
use meshlimit::rules::{Algorithm, Limit, Unit};
use proptest::prelude::*;

#[path = "common/proptest_config.rs"]
mod proptest_config;
use proptest_config::config;

const S: u64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600 * S;

fn unit() -> impl Strategy<Value = Unit> {
    prop::sample::select(&Unit::ALL[..])
}

/// Mostly small numbers (interesting rounding), sometimes large ones, sometimes the extreme.
fn count(max_large: u32) -> impl Strategy<Value = u32> {
    prop_oneof![
        6 => 1..=20u32,
        3 => 1..=max_large,
        1 => Just(max_large),
    ]
}

fn bucket_limit(
    rpu: impl Strategy<Value = u32>,
    burst: impl Strategy<Value = u32>,
) -> impl Strategy<Value = Limit> {
    (rpu, unit(), burst).prop_map(|(requests_per_unit, unit, burst)| Limit {
        charge: false,
        requests_per_unit,
        unit,
        multiplier: 1,
        burst,
        algorithm: Algorithm::TokenBucket,
    })
}

/// A token-bucket limit with a positive rate.
fn limit() -> impl Strategy<Value = Limit> {
    bucket_limit(count(u32::MAX), count(u32::MAX))
}

/// One request: time elapsed since the previous one, hits, and whether another descriptor
/// of the request denies it anyway.
#[derive(Debug, Clone, Copy)]
struct Op {
    dt: u64,
    hits: u64,
    other_denies: bool,
}

/// Requests scaled to the limit: gaps around one token's refill time, hits around the burst.
fn ops(l: Limit, max: usize) -> impl Strategy<Value = Vec<Op>> {
    let period = (l.unit.nanos() / u64::from(l.requests_per_unit.max(1))).max(1);
    let dt = prop_oneof![
        2 => Just(0u64),
        4 => 0..=period.saturating_mul(2),
        2 => 0..=1_000u64,
        1 => 0..=l.unit.nanos().saturating_mul(2),
    ];
    let burst = u64::from(l.burst);
    let hits = prop_oneof![
        3 => Just(1u64),
        1 => Just(0u64),
        3 => 0..=burst + 1,
        1 => Just(burst),
    ];
    let op = (dt, hits, prop::bool::weighted(0.1)).prop_map(|(dt, hits, other_denies)| Op {
        dt,
        hits,
        other_denies,
    });
    prop::collection::vec(op, 0..=max)
}

fn limit_and_ops(max: usize) -> impl Strategy<Value = (Limit, Vec<Op>)> {
    limit().prop_flat_map(move |l| (Just(l), ops(l, max)))
}

/// Runs `ops` from a fresh bucket at T0, settling each step as a request whose only other
/// voter is `other_denies`. Returns the state and the time of the last request.
fn run(l: &Limit, ops: &[Op]) -> (Option<State>, u64) {
    let mut state = None;
    let mut now = T0;
    for op in ops {
        now += op.dt;
        let s = step(state.as_ref(), l, op.hits, now);
        state = Some(s.settle(s.over() || op.other_denies).0);
    }
    (state, now)
}

fn token(l: &Limit) -> u128 {
    u128::from(l.unit.nanos())
}

fn debt(state: &State) -> u128 {
    match *state {
        State::TokenBucket { debt, .. } => debt,
        _ => panic!("a token bucket stepped into another algorithm's state"),
    }
}

proptest! {
    #![proptest_config(config())]

    /// Tokens never exceed the burst, an allowed step takes exactly its hits, and a
    /// denied step is the unconsumed one.
    #[test]
    fn tokens_never_exceed_burst((l, ops) in limit_and_ops(64)) {
        let cap = u128::from(l.burst) * token(&l);
        let mut state = None;
        let mut now = T0;
        for op in &ops {
            now += op.dt;
            let s = step(state.as_ref(), &l, op.hits, now);
            for (st, report) in [s.consumed(), s.unconsumed()] {
                prop_assert!(report.remaining <= l.burst);
                prop_assert!(debt(&st) <= cap);
            }
            if s.over() {
                prop_assert_eq!(s.consumed(), s.unconsumed());
            } else {
                prop_assert!(!s.unconsumed().1.over);
                prop_assert!(op.hits <= u64::from(l.burst));
                prop_assert_eq!(
                    u64::from(s.consumed().1.remaining) + op.hits,
                    u64::from(s.unconsumed().1.remaining)
                );
                prop_assert_eq!(debt(&s.consumed().0), debt(&s.unconsumed().0) + u128::from(op.hits) * token(&l));
            }
            let denied = s.over() || op.other_denies;
            let kept = s.settle(denied);
            prop_assert_eq!(kept, if denied { s.unconsumed() } else { s.consumed() });
            state = Some(kept.0);
        }
    }

    /// Over a span T starting full, allowed hits <= burst + floor(T * rpu / unit).
    #[test]
    fn allowed_hits_are_bounded_by_burst_plus_refill((l, ops) in limit_and_ops(128)) {
        let mut state = None;
        let mut now = T0;
        let mut allowed: u128 = 0;
        for op in &ops {
            now += op.dt;
            let s = step(state.as_ref(), &l, op.hits, now);
            let denied = s.over() || op.other_denies;
            if !denied {
                allowed += u128::from(op.hits);
            }
            state = Some(s.settle(denied).0);
            let bound = u128::from(l.burst)
                + u128::from(now - T0) * u128::from(l.requests_per_unit) / token(&l);
            prop_assert!(allowed <= bound, "allowed {} > bound {} at +{}", allowed, bound, now - T0);
        }
    }

    /// Keeping the unconsumed state is the same as never having asked: every later step
    /// from it equals the step from the state before.
    #[test]
    fn unconsumed_state_is_equivalent_to_the_previous_state(
        (l, ops) in limit_and_ops(32),
        hits in 0..=64u64,
        later in prop_oneof![Just(0u64), 0..=10 * S, 0..=1_000u64],
        hits2 in 0..=64u64,
    ) {
        let (prev, now) = run(&l, &ops);
        let s = step(prev.as_ref(), &l, hits, now);
        let from_unconsumed = step(Some(&s.unconsumed().0), &l, hits2, now + later);
        let from_prev = step(prev.as_ref(), &l, hits2, now + later);
        prop_assert_eq!(from_unconsumed, from_prev);
        if s.over() {
            prop_assert_eq!(s.settle(false), s.unconsumed());
        }
    }

    /// A store that kept the consumed outcome of a limit that passed finds the unconsumed
    /// one again from it (`unconsumed_from`), whatever state the step found: after a
    /// reload to another unit (a rescaled debt) or to a fixed window too.
    #[test]
    fn the_unconsumed_outcome_is_found_again_from_the_consumed_state(
        (l, ops) in limit_and_ops(32),
        hits in prop_oneof![0..=64u64, Just(u64::from(u32::MAX))],
        reload in prop_oneof![Just(None), unit().prop_map(Some)],
        fixed in prop::bool::weighted(0.3),
    ) {
        let (prev, now) = run(&l, &ops);
        let algorithm = if fixed { Algorithm::FixedWindow } else { Algorithm::TokenBucket };
        let l2 = Limit { unit: reload.unwrap_or(l.unit), algorithm, ..l };
        let s = step(prev.as_ref(), &l2, hits, now);
        if !s.over() {
            prop_assert_eq!(unconsumed_from(&s.consumed().0, &l2, hits, now), s.unconsumed());
        }
    }

    /// An over report's reset is exact: denied 1 ns before it, allowed at it. An OK report's
    /// reset is exactly when the bucket is full again.
    #[test]
    fn retry_after_is_exact((l, ops) in limit_and_ops(32), hits in 0..=40u64) {
        let (prev, now) = run(&l, &ops);
        let hits = hits.min(u64::from(l.burst));
        let s = step(prev.as_ref(), &l, hits, now);
        let Report { over, reset, .. } = s.consumed().1;
        if over {
            prop_assert!(reset >= 1);
            if let Some(at) = now.checked_add(reset) {
                let before = step(prev.as_ref(), &l, hits, at - 1);
                prop_assert!(before.over(), "allowed at reset - 1 ({})", reset);
                prop_assert_eq!(before.consumed().1.reset, 1);
                prop_assert!(!step(prev.as_ref(), &l, hits, at).over(), "denied at reset ({})", reset);
                // The same from the state the denial left.
                let left = s.settle(true).0;
                prop_assert!(step(Some(&left), &l, hits, at - 1).over());
                prop_assert!(!step(Some(&left), &l, hits, at).over());
            }
        } else {
            let taken = s.consumed().0;
            if let Some(at) = now.checked_add(reset) {
                let full = step(Some(&taken), &l, 0, at).unconsumed().1;
                prop_assert_eq!(full, Report { over: false, remaining: l.burst, reset: 0, ..Report::default() });
                prop_assert_eq!(taken.idle_in(now, l.requests_per_unit), reset);
                prop_assert_eq!(taken.idle_in(at, l.requests_per_unit), 0);
                if reset > 0 {
                    let almost = step(Some(&taken), &l, 0, at - 1).unconsumed().1;
                    prop_assert_eq!(almost.reset, 1);
                    prop_assert!(almost.remaining < l.burst);
                    prop_assert_eq!(taken.idle_in(at - 1, l.requests_per_unit), 1);
                }
            }
        }
    }

    /// More hits than the burst never pass, and the reset is the time until full.
    #[test]
    fn more_than_burst_never_passes((l, ops) in limit_and_ops(32), extra in 1..=1_000u64) {
        let (prev, now) = run(&l, &ops);
        let s = step(prev.as_ref(), &l, u64::from(l.burst) + extra, now);
        prop_assert!(s.over());
        let until_full = s.consumed().0.idle_in(now, l.requests_per_unit);
        prop_assert_eq!(s.consumed().1.reset, until_full);
        if let Some(at) = now.checked_add(until_full) {
            let later = step(Some(&s.consumed().0), &l, u64::from(l.burst) + extra, at);
            prop_assert!(later.over());
            prop_assert_eq!(later.consumed().1, Report { over: true, remaining: l.burst, reset: 0, ..Report::default() });
        }
    }

    /// A check-only request passes iff one whole token is there, and takes nothing.
    #[test]
    fn check_only_takes_nothing((l, ops) in limit_and_ops(32)) {
        let (prev, now) = run(&l, &ops);
        let s = step(prev.as_ref(), &l, 0, now);
        prop_assert_eq!(s.consumed(), s.unconsumed());
        prop_assert_eq!(s.over(), s.unconsumed().1.remaining == 0);
    }

    /// A clock that steps back neither panics nor refills.
    #[test]
    fn clock_stepping_back_does_not_refill((l, ops) in limit_and_ops(32), back in 0..=T0, hits in 0..=8u64) {
        let (prev, now) = run(&l, &ops);
        let Some(prev) = prev else { return Ok(()) };
        let State::TokenBucket { at, debt: d, .. } = prev else { unreachable!() };
        prop_assert_eq!(at, now);
        let s = step(Some(&prev), &l, hits, now - back);
        prop_assert_eq!(debt(&s.unconsumed().0), d);
        prop_assert!(debt(&s.consumed().0) >= d);
    }

    /// requests_per_unit 0 denies every request, with a reset of one unit.
    #[test]
    fn zero_rate_denies_everything(
        l in bucket_limit(Just(0u32), 0..=100u32),
        dts in prop::collection::vec(0..=1_000 * S, 1..=16),
        hits in 0..=100u64,
    ) {
        let mut state = None;
        let mut now = T0;
        for dt in dts {
            now += dt;
            let s = step(state.as_ref(), &l, hits, now);
            prop_assert!(s.over());
            prop_assert_eq!(s.consumed().1.reset, l.unit.nanos());
            state = Some(s.settle(true).0);
        }
    }

    /// A reload to another unit keeps the whole tokens missing (capped at the new burst).
    /// Rescaling to a longer unit is exact; to a shorter one it may round a sub-nanosecond
    /// fraction of a token in the client's favour.
    ///
    /// Bursts and rates reach u32::MAX: large debts are where the rescaling once overflowed
    /// (the `tb_reload_rescaling_a_large_debt_does_not_overflow` unit test; a seed of that
    /// failure is in the regressions file, run first).
    #[test]
    fn reload_to_another_unit_keeps_missing_tokens(
        (l, ops) in bucket_limit(count(u32::MAX), count(u32::MAX))
            .prop_flat_map(|l| (Just(l), ops(l, 32))),
        to in unit(),
        rpu2 in count(u32::MAX),
        burst2 in count(u32::MAX),
    ) {
        let (prev, now) = run(&l, &ops);
        let old_remaining = step(prev.as_ref(), &l, 0, now).unconsumed().1.remaining;
        let missing = l.burst - old_remaining;
        let l2 = Limit { requests_per_unit: rpu2, unit: to, burst: burst2, ..l };
        let new_remaining = step(prev.as_ref(), &l2, 0, now).unconsumed().1.remaining;
        let expected = burst2.saturating_sub(missing);
        if to.nanos() >= l.unit.nanos() {
            prop_assert_eq!(new_remaining, expected);
        } else {
            prop_assert!(new_remaining == expected || new_remaining == (expected + 1).min(burst2),
                "{} not {} (+1)", new_remaining, expected);
        }
    }

    /// Fixed windows against a direct model of the Go server.
    #[test]
    fn fixed_window_matches_the_model(
        rpu in prop_oneof![0..=20u32, Just(u32::MAX)],
        unit in unit(),
        steps in prop::collection::vec((0..=3 * S, 0..=5u64), 1..=64),
    ) {
        let l = Limit { charge: false, requests_per_unit: rpu, unit, multiplier: 1, burst: rpu, algorithm: Algorithm::FixedWindow };
        let w = unit.seconds();
        let mut state = None;
        let mut now = T0 + 12_345 * S + 678;
        let mut model: Option<(u64, u64)> = None;
        for (dt, hits) in steps {
            now += dt;
            let now_s = now / S;
            let start = now_s / w * w;
            let before = match model { Some((s, c)) if s == start => c, _ => 0 };
            let after = before + hits;
            model = Some((start, after));
            let s = step(state.as_ref(), &l, hits, now);
            prop_assert_eq!(s.consumed(), s.unconsumed());
            let over = after > u64::from(rpu);
            prop_assert_eq!(s.consumed().1, Report {
                over,
                remaining: if over { 0 } else { (u64::from(rpu) - after) as u32 },
                reset: (start + w - now_s) * S,
                count: after,
                cached: false,
            });
            prop_assert!(s.consumed().1.reset >= S && s.consumed().1.reset <= unit.nanos());
            prop_assert_eq!(s.consumed().0, State::FixedWindow { start, count: after, period: unit.seconds() as u32 });
            state = Some(s.settle(s.over()).0);
        }
    }
}

//! Unit tests of the limiter arithmetic. Every test passes `now` explicitly: nothing sleeps
//! and nothing reads the real clock.

use super::*;
use crate::clock::NANOS_PER_SEC as S;
use crate::rules::Unit;

/// 2026-01-01T00:00:00Z, a Thursday: aligned to every unit up to a week.
const T0: Nanos = 1_767_225_600 * S;
/// One millisecond.
const MS: Nanos = 1_000_000;

fn tb(requests_per_unit: u32, unit: Unit, burst: u32) -> Limit {
    Limit {
        charge: false,
        requests_per_unit,
        unit,
        multiplier: 1,
        burst,
        algorithm: Algorithm::TokenBucket,
    }
}

fn fw(requests_per_unit: u32, unit: Unit) -> Limit {
    Limit {
        charge: false,
        requests_per_unit,
        unit,
        multiplier: 1,
        burst: requests_per_unit,
        algorithm: Algorithm::FixedWindow,
    }
}

/// A request with this one descriptor in enforce mode: its own verdict decides, and the
/// settled state is stored back.
pub(super) fn hit(state: &mut Option<State>, limit: &Limit, hits: u64, now: Nanos) -> Report {
    let s = step(state.as_ref(), limit, hits, now);
    let (next, report) = s.settle(s.over());
    *state = Some(next);
    report
}

/// What a check-only (hits 0) request would see, without storing anything.
fn peek(state: &Option<State>, limit: &Limit, now: Nanos) -> Report {
    step(state.as_ref(), limit, 0, now).consumed().1
}

fn ok(remaining: u32, reset: Nanos) -> Report {
    Report {
        over: false,
        remaining,
        reset,
        ..Report::default()
    }
}

fn over(remaining: u32, reset: Nanos) -> Report {
    Report {
        over: true,
        remaining,
        reset,
        ..Report::default()
    }
}

/// `report` of a fixed window holding `count` hits.
fn counted(count: u64, report: Report) -> Report {
    Report { count, ..report }
}

fn bucket(debt: u128, at: Nanos, unit: Unit) -> State {
    State::TokenBucket {
        debt,
        at,
        period: unit.seconds() as u32,
    }
}

fn window(start_s: u64, count: u64, unit: Unit) -> State {
    State::FixedWindow {
        start: start_s,
        count,
        period: unit.seconds() as u32,
    }
}

/// [`super::request_denied`] with one check per descriptor.
fn request_denied(verdicts: impl IntoIterator<Item = (Mode, bool)>) -> bool {
    super::request_denied(
        verdicts
            .into_iter()
            .enumerate()
            .map(|(descriptor, (mode, over))| (descriptor, mode, over)),
    )
}

#[test]
fn a_descriptor_with_several_limits_is_over_when_any_of_them_is() {
    // Two quota descriptors; the first has two limits, one of them over.
    let verdicts = |first: [bool; 2], second: bool| {
        super::request_denied([
            (0, Mode::Quota, first[0]),
            (0, Mode::Quota, first[1]),
            (1, Mode::Quota, second),
        ])
    };
    assert!(verdicts([false, true], true));
    assert!(verdicts([true, false], true));
    assert!(!verdicts([false, false], true));
    assert!(!verdicts([true, true], false));
    // Enforced: any limit over denies.
    assert!(super::request_denied([
        (0, Mode::Enforce, false),
        (0, Mode::Enforce, true)
    ]));
    assert!(!super::request_denied([
        (0, Mode::Shadow, true),
        (0, Mode::Shadow, true)
    ]));
}

// ---------------------------------------------------------------------------------------
// Token bucket: basics
// ---------------------------------------------------------------------------------------

#[test]
fn tb_fresh_bucket_is_full() {
    let l = tb(10, Unit::Second, 10);
    let s = step(None, &l, 1, T0);
    assert_eq!(
        s.consumed(),
        (bucket(S as u128, T0, Unit::Second), ok(9, 100 * MS))
    );
    assert_eq!(s.unconsumed(), (bucket(0, T0, Unit::Second), ok(10, 0)));
    assert!(!s.over());
    assert_eq!(peek(&None, &l, T0), ok(10, 0));
}

#[test]
fn tb_fresh_bucket_full_for_every_unit() {
    for unit in Unit::ALL {
        let l = tb(7, unit, 5);
        let s = step(None, &l, 5, T0);
        assert_eq!(
            s.consumed().1,
            ok(0, (5 * unit.nanos()).div_ceil(7)),
            "{unit}"
        );
        assert_eq!(s.unconsumed().1, ok(5, 0), "{unit}");
        let s = step(None, &l, 6, T0);
        assert!(s.over(), "{unit}");
    }
}

#[test]
fn tb_take_whole_burst_at_once() {
    let l = tb(100, Unit::Second, 10);
    let mut st = None;
    assert_eq!(hit(&mut st, &l, 10, T0), ok(0, 100 * MS));
    assert_eq!(hit(&mut st, &l, 1, T0), over(0, 10 * MS));
}

#[test]
fn tb_three_per_second_exact_thirds() {
    let l = tb(3, Unit::Second, 3);
    let mut st = None;
    assert_eq!(hit(&mut st, &l, 1, T0), ok(2, 333_333_334));
    assert_eq!(hit(&mut st, &l, 1, T0), ok(1, 666_666_667));
    assert_eq!(hit(&mut st, &l, 1, T0), ok(0, S));
    // Empty: the next token is 1/3 s away, rounded up to whole nanoseconds.
    assert_eq!(hit(&mut st, &l, 1, T0), over(0, 333_333_334));
    // 333_333_333 ns refills 999_999_999 of the 1_000_000_000 a token needs.
    assert_eq!(hit(&mut st, &l, 1, T0 + 333_333_333), over(0, 1));
    let mut probe = st;
    assert_eq!(hit(&mut probe, &l, 1, T0 + 333_333_333), over(0, 1));
    // Exactly at the rounded-up third: one token.
    assert!(!hit(&mut st, &l, 1, T0 + 333_333_334).over);
    assert!(hit(&mut st, &l, 1, T0 + 333_333_334).over);
    // The bucket refills on the exact schedule: 2 whole tokens again at exactly T0 + 1 s
    // (the third it was emptied at T0 and took one token at 1/3 s), not a nanosecond before.
    assert_eq!(peek(&st, &l, T0 + S).remaining, 2);
    assert_eq!(peek(&st, &l, T0 + S - 1).remaining, 1);
}

#[test]
fn tb_three_per_second_the_denial_does_not_delay_the_token() {
    // Denied requests cost nothing: a client hammering the empty bucket still gets its
    // token at exactly 1/3 s.
    let l = tb(3, Unit::Second, 3);
    let mut st = None;
    assert!(!hit(&mut st, &l, 3, T0).over);
    for t in (0..333_333_334).step_by(11_111_111) {
        assert!(hit(&mut st, &l, 1, T0 + t).over, "at +{t}");
    }
    assert!(!hit(&mut st, &l, 1, T0 + 333_333_334).over);
}

#[test]
fn tb_five_per_minute_burst_one_is_one_token_per_twelve_seconds() {
    let l = tb(5, Unit::Minute, 1);
    let mut st = None;
    assert_eq!(hit(&mut st, &l, 1, T0), ok(0, 12 * S));
    assert_eq!(hit(&mut st, &l, 1, T0), over(0, 12 * S));
    assert_eq!(hit(&mut st, &l, 1, T0 + 6 * S), over(0, 6 * S));
    assert_eq!(hit(&mut st, &l, 1, T0 + 12 * S - 1), over(0, 1));
    assert_eq!(hit(&mut st, &l, 1, T0 + 12 * S), ok(0, 12 * S));
    // Waiting long does not build up more than the burst.
    assert_eq!(peek(&st, &l, T0 + 3600 * S), ok(1, 0));
    assert_eq!(hit(&mut st, &l, 1, T0 + 3600 * S), ok(0, 12 * S));
    assert_eq!(hit(&mut st, &l, 1, T0 + 3600 * S), over(0, 12 * S));
    // Five per minute over a long run: 60 allowed in 12 minutes (+1 at the very end).
    let mut st = None;
    let allowed = (0..=720 * 4)
        .filter(|i| !hit(&mut st, &l, 1, T0 + i * S / 4).over)
        .count();
    assert_eq!(allowed, 61);
}

#[test]
fn tb_hundred_per_second_burst_ten() {
    let l = tb(100, Unit::Second, 10);
    let mut st = None;
    for i in 0..10 {
        let r = hit(&mut st, &l, 1, T0);
        assert_eq!(r, ok(9 - i, 10 * MS * u64::from(i + 1)));
    }
    assert_eq!(hit(&mut st, &l, 1, T0), over(0, 10 * MS));
    assert_eq!(peek(&st, &l, T0 + 50 * MS), ok(5, 50 * MS));
    assert_eq!(peek(&st, &l, T0 + 55 * MS), ok(5, 45 * MS));
    assert_eq!(peek(&st, &l, T0 + 100 * MS), ok(10, 0));
    assert_eq!(peek(&st, &l, T0 + 3600 * S), ok(10, 0));
    // A steady 100/s is sustained forever on an empty bucket.
    for i in 1..=1000 {
        assert!(!hit(&mut st, &l, 1, T0 + i * 10 * MS).over, "tick {i}");
        assert!(hit(&mut st, &l, 1, T0 + i * 10 * MS).over, "tick {i}");
    }
}

#[test]
fn tb_remaining_counts_whole_tokens_only() {
    let l = tb(3, Unit::Second, 3);
    let mut st = None;
    hit(&mut st, &l, 3, T0);
    // Half a token: still 0 remaining; a check-only request is over until a whole token.
    let half = S / 6;
    assert_eq!(peek(&st, &l, T0 + half), over(0, 333_333_334 - half));
    assert_eq!(peek(&st, &l, T0 + 666_666_667), ok(2, 333_333_333));
}

#[test]
fn tb_multi_hit_requests() {
    let l = tb(10, Unit::Second, 10);
    let mut st = None;
    assert_eq!(hit(&mut st, &l, 4, T0), ok(6, 400 * MS));
    // 7 > 6: over, nothing taken, ready when one more token has come.
    assert_eq!(hit(&mut st, &l, 7, T0), over(6, 100 * MS));
    assert_eq!(hit(&mut st, &l, 7, T0 + 100 * MS - 1), over(6, 1));
    assert_eq!(hit(&mut st, &l, 7, T0 + 100 * MS), ok(0, S));
}

#[test]
fn tb_over_step_consumes_nothing_and_both_fates_are_equal() {
    let l = tb(10, Unit::Second, 10);
    let prev = bucket(8 * S as u128, T0, Unit::Second);
    let s = step(Some(&prev), &l, 3, T0 + 50 * MS);
    assert!(s.over());
    assert_eq!(s.consumed(), s.unconsumed());
    // The state is the same debt brought forward to now: 0.5 token refilled, none taken.
    assert_eq!(
        s.consumed().0,
        bucket(7_500_000_000, T0 + 50 * MS, Unit::Second)
    );
    assert_eq!(s.consumed().1, over(2, 50 * MS));
    assert_eq!(s.settle(true), s.settle(false));
}

#[test]
fn tb_allowed_step_offers_both_fates() {
    let l = tb(10, Unit::Second, 10);
    let prev = bucket(8 * S as u128, T0, Unit::Second);
    let s = step(Some(&prev), &l, 2, T0 + 100 * MS);
    assert!(!s.over());
    assert_eq!(
        s.consumed(),
        (
            bucket(9 * S as u128, T0 + 100 * MS, Unit::Second),
            ok(1, 900 * MS)
        )
    );
    assert_eq!(
        s.unconsumed(),
        (
            bucket(7 * S as u128, T0 + 100 * MS, Unit::Second),
            ok(3, 700 * MS)
        )
    );
    assert_eq!(s.settle(false), s.consumed());
    assert_eq!(s.settle(true), s.unconsumed());
}

#[test]
fn tb_denied_by_another_descriptor_takes_nothing() {
    // Two buckets in one request; the second is over, so the first keeps its tokens.
    let a = tb(10, Unit::Second, 10);
    let b = tb(1, Unit::Second, 1);
    let mut sa = None;
    let mut sb = None;
    hit(&mut sb, &b, 1, T0);
    for _ in 0..5 {
        let step_a = step(sa.as_ref(), &a, 1, T0);
        let step_b = step(sb.as_ref(), &b, 1, T0);
        let denied = request_denied([
            (Mode::Enforce, step_a.over()),
            (Mode::Enforce, step_b.over()),
        ]);
        assert!(denied);
        sa = Some(step_a.settle(denied).0);
        sb = Some(step_b.settle(denied).0);
    }
    assert_eq!(peek(&sa, &a, T0).remaining, 10);
}

#[test]
fn tb_more_hits_than_the_burst_can_never_pass() {
    let l = tb(10, Unit::Second, 10);
    // Fresh (full) bucket: over, and the best moment is now (full).
    assert_eq!(step(None, &l, 11, T0).consumed().1, over(10, 0));
    let mut st = None;
    hit(&mut st, &l, 4, T0);
    assert_eq!(hit(&mut st, &l, 11, T0), over(6, 400 * MS));
    assert_eq!(hit(&mut st, &l, 11, T0 + 400 * MS), over(10, 0));
    assert_eq!(hit(&mut st, &l, u64::MAX, T0 + 400 * MS), over(10, 0));
    assert_eq!(peek(&st, &l, T0 + 400 * MS), ok(10, 0));
}

#[test]
fn tb_hits_equal_to_burst_waits_for_a_full_bucket() {
    let l = tb(10, Unit::Second, 10);
    let mut st = None;
    hit(&mut st, &l, 3, T0);
    assert_eq!(hit(&mut st, &l, 10, T0), over(7, 300 * MS));
    assert_eq!(hit(&mut st, &l, 10, T0 + 300 * MS), ok(0, S));
}

// ---------------------------------------------------------------------------------------
// Token bucket: check-only (hits 0)
// ---------------------------------------------------------------------------------------

#[test]
fn tb_check_only_on_a_full_bucket_passes_and_consumes_nothing() {
    let l = tb(10, Unit::Second, 10);
    let s = step(None, &l, 0, T0);
    assert!(!s.over());
    assert_eq!(s.consumed(), s.unconsumed());
    assert_eq!(s.consumed(), (bucket(0, T0, Unit::Second), ok(10, 0)));
}

#[test]
fn tb_check_only_needs_one_whole_token() {
    let l = tb(10, Unit::Second, 10);
    let mut st = None;
    hit(&mut st, &l, 10, T0);
    // Empty: over until one token is back.
    assert_eq!(hit(&mut st, &l, 0, T0), over(0, 100 * MS));
    assert_eq!(hit(&mut st, &l, 0, T0 + 99 * MS), over(0, MS));
    assert_eq!(hit(&mut st, &l, 0, T0 + 100 * MS - 1), over(0, 1));
    // Exactly one token: OK, and it is still there afterwards.
    let s = step(st.as_ref(), &l, 0, T0 + 100 * MS);
    assert_eq!(s.consumed(), s.unconsumed());
    assert_eq!(s.consumed().1, ok(1, 900 * MS));
    st = Some(s.settle(false).0);
    assert_eq!(hit(&mut st, &l, 0, T0 + 100 * MS), ok(1, 900 * MS));
    assert_eq!(hit(&mut st, &l, 1, T0 + 100 * MS), ok(0, S));
}

#[test]
fn tb_check_only_repeated_never_drains() {
    let l = tb(1, Unit::Minute, 1);
    let mut st = None;
    for i in 0..100 {
        assert_eq!(hit(&mut st, &l, 0, T0 + i), ok(1, 0));
    }
    assert_eq!(hit(&mut st, &l, 1, T0 + 100), ok(0, 60 * S));
}

// ---------------------------------------------------------------------------------------
// Token bucket: requests_per_unit 0
// ---------------------------------------------------------------------------------------

#[test]
fn tb_zero_rate_denies_everything_with_one_unit_reset() {
    for unit in Unit::ALL {
        for burst in [0, 1, 5] {
            let l = tb(0, unit, burst);
            for hits in [0, 1, 2, 100] {
                let s = step(None, &l, hits, T0);
                assert!(s.over(), "{unit} burst {burst} hits {hits}");
                assert_eq!(s.consumed(), s.unconsumed());
                assert_eq!(
                    s.consumed().1.reset,
                    unit.nanos(),
                    "{unit} burst {burst} hits {hits}"
                );
            }
            // With a stored state too, and after a long time (it never refills).
            let st = Some(bucket(
                u128::from(burst) * u128::from(unit.nanos()),
                T0,
                unit,
            ));
            let s = step(st.as_ref(), &l, 1, T0 + 10 * unit.nanos());
            assert!(s.over());
            assert_eq!(s.consumed().1, over(0, unit.nanos()));
        }
    }
}

#[test]
fn tb_zero_burst_denies_everything() {
    let l = tb(10, Unit::Second, 0);
    for hits in [0, 1, 5] {
        let s = step(None, &l, hits, T0);
        assert!(s.over(), "hits {hits}");
        assert_eq!(s.consumed().1.remaining, 0);
    }
}

// ---------------------------------------------------------------------------------------
// Token bucket: accurate retry-after (governor's accurate_not_until)
// ---------------------------------------------------------------------------------------

/// Exhausts the bucket at `t`, then checks that a request of `hits` is denied at
/// `t + reset - 1` and allowed at exactly `t + reset`.
fn assert_retry_after_is_exact(l: &Limit, hits: u64, t: Nanos) {
    let mut st = None;
    hit(&mut st, l, u64::from(l.burst), t);
    let denied = hit(&mut st, l, hits, t);
    assert!(denied.over, "{l:?}");
    let reset = denied.reset;
    assert!(reset > 0, "{l:?}");
    let before = step(st.as_ref(), l, hits, t + reset - 1);
    assert!(
        before.over(),
        "{l:?} hits {hits}: allowed 1 ns before reset {reset}"
    );
    assert_eq!(before.consumed().1.reset, 1, "{l:?} hits {hits}");
    let at = step(st.as_ref(), l, hits, t + reset);
    assert!(
        !at.over(),
        "{l:?} hits {hits}: still denied at reset {reset}"
    );
    // The same from the state left by the 1-ns-early denial.
    let st2 = Some(before.settle(true).0);
    assert!(!step(st2.as_ref(), l, hits, t + reset).over());
}

#[test]
fn tb_retry_after_is_exact() {
    let cases = [
        (tb(3, Unit::Second, 3), 1),
        (tb(3, Unit::Second, 3), 2),
        (tb(3, Unit::Second, 3), 3),
        (tb(3, Unit::Second, 3), 0),
        (tb(5, Unit::Minute, 1), 1),
        (tb(100, Unit::Second, 10), 1),
        (tb(100, Unit::Second, 10), 7),
        (tb(7, Unit::Hour, 3), 2),
        (tb(1, Unit::Day, 1), 1),
        (tb(13, Unit::Week, 4), 3),
        (tb(999_999_937, Unit::Second, 1000), 1),
        (tb(u32::MAX, Unit::Second, u32::MAX), 1),
        (tb(1, Unit::Year, u32::MAX), 1),
        (tb(17, Unit::Month, 17), 17),
    ];
    for (l, hits) in cases {
        assert_retry_after_is_exact(&l, hits, T0 + 123_456_789);
    }
}

#[test]
fn tb_reset_when_ok_is_time_until_full() {
    let l = tb(3, Unit::Second, 5);
    let mut st = None;
    let r = hit(&mut st, &l, 2, T0);
    assert_eq!(r, ok(3, 666_666_667));
    assert_eq!(peek(&st, &l, T0 + r.reset), ok(5, 0));
    let almost = peek(&st, &l, T0 + r.reset - 1);
    assert_eq!(almost, ok(4, 1));
    assert_eq!(st.unwrap().idle_in(T0, 3), r.reset);
}

// ---------------------------------------------------------------------------------------
// Token bucket: reloads (unit, burst and rate changes)
// ---------------------------------------------------------------------------------------

#[test]
fn tb_reload_second_to_minute_keeps_missing_tokens() {
    let old = tb(10, Unit::Second, 10);
    let mut st = None;
    hit(&mut st, &old, 4, T0);
    let new = tb(10, Unit::Minute, 10);
    let s = step(st.as_ref(), &new, 0, T0);
    // Still 4 tokens missing, now refilled at one per 6 s.
    assert_eq!(s.consumed().1, ok(6, 24 * S));
    assert_eq!(s.consumed().0, bucket(4 * 60 * S as u128, T0, Unit::Minute));
    // Time since the old state refills at the new rate.
    assert_eq!(peek(&st, &new, T0 + 6 * S), ok(7, 18 * S));
}

#[test]
fn tb_reload_minute_to_second_keeps_missing_tokens() {
    let old = tb(60, Unit::Minute, 60);
    let mut st = None;
    hit(&mut st, &old, 30, T0);
    let new = tb(60, Unit::Second, 60);
    let s = step(st.as_ref(), &new, 0, T0);
    assert_eq!(s.consumed().1, ok(30, 500 * MS));
    assert_eq!(s.consumed().0, bucket(30 * S as u128, T0, Unit::Second));
}

#[test]
fn tb_reload_caps_missing_tokens_at_the_new_burst() {
    let old = tb(10, Unit::Second, 10);
    let mut st = None;
    hit(&mut st, &old, 8, T0);
    // New burst 5 per minute: 8 missing becomes 5 missing (empty), full in 60 s.
    let new = tb(5, Unit::Minute, 5);
    assert_eq!(peek(&st, &new, T0), over(0, 12 * S));
    let mut st2 = st;
    assert_eq!(hit(&mut st2, &new, 1, T0), over(0, 12 * S));
    assert_eq!(st2.unwrap().idle_in(T0, 5), 60 * S);
    // Same unit, smaller burst: 2 missing of a burst of 4.
    let mut st = None;
    hit(&mut st, &old, 2, T0);
    assert_eq!(peek(&st, &tb(10, Unit::Second, 4), T0), ok(2, 200 * MS));
    // Same unit, larger burst: the missing count is kept, so the new room is there at once.
    assert_eq!(peek(&st, &tb(10, Unit::Second, 20), T0), ok(18, 200 * MS));
}

#[test]
fn tb_reload_raised_rate_applies_at_once() {
    let old = tb(1, Unit::Second, 10);
    let mut st = None;
    hit(&mut st, &old, 10, T0);
    assert_eq!(peek(&st, &old, T0 + 100 * MS).remaining, 0);
    let new = tb(10, Unit::Second, 10);
    // The 100 ms since the old state refill at the new rate: one token.
    assert_eq!(peek(&st, &new, T0 + 100 * MS), ok(1, 900 * MS));
    // And an over report already uses the new rate.
    assert_eq!(
        step(st.as_ref(), &new, 1, T0).consumed().1,
        over(0, 100 * MS)
    );
    // A lowered rate applies at once as well.
    let slow = tb(1, Unit::Minute, 10);
    assert_eq!(
        step(st.as_ref(), &slow, 1, T0).consumed().1,
        over(0, 60 * S)
    );
}

#[test]
fn tb_reload_from_and_to_fixed_window() {
    // A fixed-window state under a token-bucket limit: a full bucket.
    let l = tb(10, Unit::Second, 10);
    let fwst = window(T0 / S, 1_000, Unit::Second);
    let s = step(Some(&fwst), &l, 1, T0);
    assert_eq!(
        s.consumed(),
        (bucket(S as u128, T0, Unit::Second), ok(9, 100 * MS))
    );
    // A token-bucket state under a fixed-window limit: a fresh window.
    let tbst = bucket(10 * S as u128, T0, Unit::Second);
    let s = step(Some(&tbst), &fw(10, Unit::Second), 1, T0);
    assert_eq!(
        s.consumed(),
        (window(T0 / S, 1, Unit::Second), counted(1, ok(9, S)))
    );
}

#[test]
fn tb_reload_between_every_pair_of_units_keeps_missing_tokens() {
    for from in Unit::ALL {
        for to in Unit::ALL {
            let old = tb(7, from, 9);
            let mut st = None;
            hit(&mut st, &old, 5, T0);
            let new = tb(7, to, 9);
            let r = peek(&st, &new, T0);
            assert_eq!(r.remaining, 4, "{from} -> {to}");
            assert_eq!(r.reset, (5 * to.nanos()).div_ceil(7), "{from} -> {to}");
        }
    }
}

/// Regression: a bucket of ten million a year, drained, then reloaded as ten million a
/// month. Rescaling as `debt * token / old` overflowed u128 (3.15e23 × 2.59e15 > 3.4e38):
/// debug builds panicked on the request path, release builds handed out ~8.3 million tokens.
#[test]
fn tb_reload_rescaling_a_large_debt_does_not_overflow() {
    let old = tb(10_000_000, Unit::Year, 10_000_000);
    let mut st = None;
    assert!(!hit(&mut st, &old, 10_000_000, T0).over);
    let new = tb(10_000_000, Unit::Month, 10_000_000);
    let s = step(st.as_ref(), &new, 1, T0);
    // Still empty: 10M tokens missing; one token per month / 10M = 259.2 ms.
    assert_eq!(s.consumed().1, over(0, 259_200_000));
}

// ---------------------------------------------------------------------------------------
// Token bucket: clocks and extremes
// ---------------------------------------------------------------------------------------

#[test]
fn tb_clock_stepping_back_neither_panics_nor_refills() {
    let l = tb(10, Unit::Second, 10);
    let mut st = None;
    hit(&mut st, &l, 10, T0);
    for back in [1, MS, S, 3600 * S, T0] {
        let s = step(st.as_ref(), &l, 1, T0 - back);
        assert!(s.over(), "back {back}");
        assert_eq!(s.consumed().1, over(0, 100 * MS), "back {back}");
        assert_eq!(
            s.consumed().0,
            bucket(10 * S as u128, T0 - back, Unit::Second)
        );
        assert_eq!(peek(&st, &l, T0 - back), over(0, 100 * MS));
    }
    // Partially drained, allowed while the clock is behind: the debt grows, it never
    // shrinks because of the step back.
    let mut st = None;
    hit(&mut st, &l, 5, T0);
    assert_eq!(hit(&mut st, &l, 1, T0 - S), ok(4, 600 * MS));
    assert_eq!(hit(&mut st, &l, 1, 0), ok(3, 700 * MS));
}

#[test]
fn tb_extreme_values_do_not_panic() {
    let units = Unit::ALL;
    for unit in units {
        for (rpu, burst) in [
            (u32::MAX, u32::MAX),
            (1, u32::MAX),
            (u32::MAX, 1),
            (0, u32::MAX),
        ] {
            let l = tb(rpu, unit, burst);
            for now in [0, 1, T0, u64::MAX] {
                for hits in [0, 1, u64::from(u32::MAX), u64::MAX] {
                    let s = step(None, &l, hits, now);
                    let _ = step(Some(&s.consumed().0), &l, hits, u64::MAX);
                    let _ = step(Some(&s.consumed().0), &l, hits, 0);
                    let _ = s.consumed().0.idle_in(now, rpu);
                    let _ = s.consumed().0.idle_in(0, rpu);
                }
            }
        }
    }
    // A full bucket of u32::MAX tokens reports them all.
    assert_eq!(
        peek(&None, &tb(1, Unit::Year, u32::MAX), T0),
        ok(u32::MAX, 0)
    );
    let mut st = None;
    let l = tb(1, Unit::Year, u32::MAX);
    // Full again only after u32::MAX years: more than u64 nanoseconds, so it saturates.
    assert_eq!(hit(&mut st, &l, u64::from(u32::MAX), T0), ok(0, u64::MAX));
    // One token is a year away.
    assert_eq!(peek(&st, &l, T0), over(0, Unit::Year.nanos()));
}

// ---------------------------------------------------------------------------------------
// Fixed window
// ---------------------------------------------------------------------------------------

#[test]
fn fw_counts_up_to_the_limit_then_over() {
    let l = fw(3, Unit::Second);
    let mut st = None;
    assert_eq!(hit(&mut st, &l, 1, T0), counted(1, ok(2, S)));
    assert_eq!(hit(&mut st, &l, 1, T0 + 100 * MS), counted(2, ok(1, S)));
    assert_eq!(hit(&mut st, &l, 1, T0 + 999 * MS), counted(3, ok(0, S)));
    assert_eq!(hit(&mut st, &l, 1, T0 + 999 * MS), counted(4, over(0, S)));
    assert_eq!(st, Some(window(T0 / S, 4, Unit::Second)));
    // Denied hits are still counted.
    assert_eq!(hit(&mut st, &l, 1, T0 + 999 * MS), counted(5, over(0, S)));
    assert_eq!(st, Some(window(T0 / S, 5, Unit::Second)));
}

#[test]
fn fw_consumed_and_unconsumed_are_the_same() {
    let l = fw(3, Unit::Minute);
    for (before, hits) in [(0, 1), (2, 1), (3, 1), (10, 5), (0, 0), (3, 0), (4, 0)] {
        let st = window(T0 / S, before, Unit::Minute);
        let s = step(Some(&st), &l, hits, T0);
        assert_eq!(s.consumed(), s.unconsumed(), "before {before} hits {hits}");
        assert_eq!(s.settle(true), s.settle(false));
        assert_eq!(s.consumed().0, window(T0 / S, before + hits, Unit::Minute));
    }
}

#[test]
fn fw_new_window_starts_from_zero() {
    let l = fw(2, Unit::Second);
    let mut st = None;
    hit(&mut st, &l, 5, T0);
    assert_eq!(hit(&mut st, &l, 1, T0 + S - 1), counted(6, over(0, S)));
    assert_eq!(hit(&mut st, &l, 1, T0 + S), counted(1, ok(1, S)));
    assert_eq!(st, Some(window(T0 / S + 1, 1, Unit::Second)));
    // A state from long ago (or from the future) is another window: count from 0.
    let old = Some(window(T0 / S - 3600, 100, Unit::Second));
    assert_eq!(
        step(old.as_ref(), &l, 1, T0).consumed().1,
        counted(1, ok(1, S))
    );
    let future = Some(window(T0 / S + 5, 100, Unit::Second));
    assert_eq!(
        step(future.as_ref(), &l, 1, T0).consumed().1,
        counted(1, ok(1, S))
    );
}

#[test]
fn fw_state_of_another_unit_starts_from_zero() {
    // Same start (T0 is aligned to both), different unit: a reload changed the unit.
    let st = window(T0 / S, 100, Unit::Minute);
    let s = step(Some(&st), &fw(10, Unit::Hour), 1, T0);
    assert_eq!(
        s.consumed(),
        (window(T0 / S, 1, Unit::Hour), counted(1, ok(9, 3600 * S)))
    );
    // Same unit, changed limit: the count is kept.
    let st = window(T0 / S, 5, Unit::Hour);
    assert_eq!(
        step(Some(&st), &fw(6, Unit::Hour), 1, T0).consumed().1,
        counted(6, ok(0, 3600 * S))
    );
    assert_eq!(
        step(Some(&st), &fw(5, Unit::Hour), 1, T0).consumed().1,
        counted(6, over(0, 3600 * S))
    );
}

#[test]
fn fw_reset_is_whole_seconds_until_the_window_ends() {
    let l = fw(10, Unit::Minute);
    let cases = [
        (T0, 60 * S),
        (T0 + 1, 60 * S),
        (T0 + S - 1, 60 * S),
        (T0 + S, 59 * S),
        (T0 + 1_500 * MS, 59 * S),
        (T0 + 59 * S, S),
        (T0 + 60 * S - 1, S),
        (T0 + 60 * S, 60 * S),
    ];
    for (now, reset) in cases {
        assert_eq!(
            step(None, &l, 1, now).consumed().1.reset,
            reset,
            "now {now}"
        );
    }
}

#[test]
fn fw_reset_is_between_one_second_and_one_unit() {
    for unit in Unit::ALL {
        let w = unit.seconds();
        let l = fw(10, unit);
        let mut now = 1_700_000_000 * S + 987_654_321;
        for i in 0..500u64 {
            let r = step(None, &l, 1, now).consumed().1;
            assert!(
                r.reset >= S && r.reset <= unit.nanos(),
                "{unit} now {now}: {}",
                r.reset
            );
            assert_eq!(r.reset % S, 0);
            let now_s = now / S;
            assert_eq!(r.reset / S, w - now_s % w, "{unit} now {now}");
            now += (w * S / 37) + i * 7_777_777;
        }
    }
}

#[test]
fn fw_windows_are_aligned_to_the_epoch() {
    for unit in Unit::ALL {
        let w = unit.seconds();
        for now in [0, 1, S, T0, T0 + 12_345 * S + 678, 4_000_000_000 * S + 1] {
            let State::FixedWindow { start, .. } = step(None, &fw(1, unit), 1, now).consumed().0
            else {
                panic!("not a window");
            };
            assert_eq!(start % w, 0, "{unit} {now}");
            assert!(start <= now / S && now / S < start + w, "{unit} {now}");
        }
    }
}

#[test]
fn fw_week_windows_start_on_thursday() {
    let l = fw(10, Unit::Week);
    let start_of = |now: Nanos| match step(None, &l, 1, now).consumed().0 {
        State::FixedWindow { start, .. } => start,
        _ => unreachable!(),
    };
    // 2026-01-01 is a Thursday: its own window start.
    assert_eq!(start_of(T0), T0 / S);
    // Monday 2026-01-05 12:00 belongs to the week started Thursday 2026-01-01.
    let monday = T0 + (4 * 86_400 + 12 * 3600) * S;
    assert_eq!(start_of(monday), T0 / S);
    assert_eq!(
        step(None, &l, 1, monday).consumed().1.reset,
        (2 * 86_400 + 12 * 3600) * S
    );
    // Wednesday 23:59:59 is the last second; Thursday 2026-01-08 starts the next week.
    assert_eq!(start_of(T0 + 7 * 86_400 * S - 1), T0 / S);
    assert_eq!(start_of(T0 + 7 * 86_400 * S), T0 / S + 7 * 86_400);
    // Every week start is a Thursday: 1970-01-01 (day 0) was one.
    for k in 0..60 {
        let start = start_of(T0 + k * 86_400 * S + 3 * 3600 * S);
        assert_eq!((start / 86_400) % 7, 0);
    }
}

#[test]
fn fw_day_windows_reset_at_midnight_utc() {
    let l = fw(10, Unit::Day);
    let r = step(None, &l, 1, T0 + 23 * 3600 * S + 30 * 60 * S)
        .consumed()
        .1;
    assert_eq!(r.reset, 30 * 60 * S);
}

#[test]
fn fw_month_is_thirty_days_and_year_is_365() {
    // 2026-01-01 lies in the 30-day block started 2025-12-08 (1_765_152_000).
    let s = step(None, &fw(10, Unit::Month), 1, T0);
    assert_eq!(s.consumed().0, window(1_765_152_000, 1, Unit::Month));
    assert_eq!(s.consumed().1.reset, 518_400 * S);
    // ...and in the 365-day block started 2025-12-18 (1_766_016_000).
    let s = step(None, &fw(10, Unit::Year), 1, T0);
    assert_eq!(s.consumed().0, window(1_766_016_000, 1, Unit::Year));
    assert_eq!(s.consumed().1.reset, 30_326_400 * S);
    // The next month block starts 30 days after the last.
    let s = step(
        None,
        &fw(10, Unit::Month),
        1,
        (1_765_152_000 + 2_592_000) * S,
    );
    assert_eq!(
        s.consumed().0,
        window(1_765_152_000 + 2_592_000, 1, Unit::Month)
    );
    assert_eq!(s.consumed().1.reset, 2_592_000 * S);
}

#[test]
fn fw_check_only_hits() {
    let l = fw(5, Unit::Second);
    let at = |count| Some(window(T0 / S, count, Unit::Second));
    // Below the limit: OK, nothing counted.
    let s = step(at(3).as_ref(), &l, 0, T0);
    assert_eq!(
        s.consumed(),
        (window(T0 / S, 3, Unit::Second), counted(3, ok(2, S)))
    );
    // At the limit: still OK, 0 remaining.
    assert_eq!(
        step(at(5).as_ref(), &l, 0, T0).consumed().1,
        counted(5, ok(0, S))
    );
    // Over the limit: over.
    assert_eq!(
        step(at(6).as_ref(), &l, 0, T0).consumed().1,
        counted(6, over(0, S))
    );
    // Fresh: OK with the whole limit left.
    assert_eq!(
        step(None, &l, 0, T0).consumed(),
        (window(T0 / S, 0, Unit::Second), ok(5, S))
    );
}

/// The Go server's hits_addend arithmetic (its fixed-window cache tests).
#[test]
fn fw_go_reference_hits_addend_table() {
    // (limit per second, count before, hits, over, remaining)
    let table: [(u32, u64, u64, bool, u32); 8] = [
        (20, 2, 3, false, 15),
        (8, 5, 2, false, 1),
        (20, 16, 3, false, 1),
        (20, 19, 3, true, 0),
        (20, 15, 7, true, 0),
        (10, 27, 3, true, 0),
        (20, 17, 3, false, 0),
        (20, 18, 3, true, 0),
    ];
    for (limit, before, hits, is_over, remaining) in table {
        let st = window(T0 / S, before, Unit::Second);
        let s = step(Some(&st), &fw(limit, Unit::Second), hits, T0);
        assert_eq!(
            s.consumed().1,
            Report {
                over: is_over,
                remaining,
                reset: S,
                count: before + hits,
                cached: false,
            },
            "limit {limit} before {before} hits {hits}"
        );
        assert_eq!(s.consumed().0, window(T0 / S, before + hits, Unit::Second));
    }
}

#[test]
fn fw_zero_limit_denies_every_hit() {
    let l = fw(0, Unit::Minute);
    assert_eq!(
        step(None, &l, 1, T0).consumed().1,
        counted(1, over(0, 60 * S))
    );
    // A check-only request against a zero limit is not over (count 0 is not > 0), as in Go.
    assert_eq!(step(None, &l, 0, T0).consumed().1, ok(0, 60 * S));
}

#[test]
fn fw_ignores_burst() {
    let mut l = fw(2, Unit::Second);
    l.burst = 100;
    let mut st = None;
    hit(&mut st, &l, 2, T0);
    assert!(hit(&mut st, &l, 1, T0).over);
}

#[test]
fn fw_huge_counts_saturate() {
    let l = fw(u32::MAX, Unit::Second);
    let st = window(T0 / S, u64::MAX - 1, Unit::Second);
    let s = step(Some(&st), &l, 5, T0);
    assert_eq!(
        s.consumed(),
        (
            window(T0 / S, u64::MAX, Unit::Second),
            counted(u64::MAX, over(0, S))
        )
    );
    assert_eq!(
        step(None, &l, u64::MAX, T0).consumed().1,
        counted(u64::MAX, over(0, S))
    );
    assert_eq!(
        step(None, &l, u64::from(u32::MAX), T0).consumed().1,
        counted(u64::from(u32::MAX), ok(0, S))
    );
    assert_eq!(
        step(None, &l, 1, T0).consumed().1,
        counted(1, ok(u32::MAX - 1, S))
    );
}

#[test]
fn fw_clock_stepping_back_is_another_window() {
    let l = fw(2, Unit::Second);
    let mut st = None;
    hit(&mut st, &l, 5, T0 + 10 * S);
    assert_eq!(hit(&mut st, &l, 1, T0), counted(1, ok(1, S)));
    assert_eq!(hit(&mut st, &l, 1, 0), counted(1, ok(1, S)));
}

// ---------------------------------------------------------------------------------------
// request_denied
// ---------------------------------------------------------------------------------------

#[test]
fn denied_with_no_descriptors_is_false() {
    assert!(!request_denied([]));
}

#[test]
fn denied_enforce() {
    assert!(request_denied([(Mode::Enforce, true)]));
    assert!(!request_denied([(Mode::Enforce, false)]));
    assert!(!request_denied([
        (Mode::Enforce, false),
        (Mode::Enforce, false)
    ]));
    assert!(request_denied([
        (Mode::Enforce, false),
        (Mode::Enforce, true)
    ]));
    assert!(request_denied([
        (Mode::Enforce, true),
        (Mode::Enforce, false)
    ]));
}

#[test]
fn denied_shadow_never_denies() {
    assert!(!request_denied([(Mode::Shadow, true)]));
    assert!(!request_denied([
        (Mode::Shadow, true),
        (Mode::Shadow, true)
    ]));
    assert!(!request_denied([(Mode::Shadow, false)]));
    assert!(!request_denied([
        (Mode::Shadow, true),
        (Mode::Enforce, false)
    ]));
}

#[test]
fn denied_quota_only_when_all_quota_descriptors_are_over() {
    assert!(request_denied([(Mode::Quota, true)]));
    assert!(!request_denied([(Mode::Quota, false)]));
    assert!(request_denied([(Mode::Quota, true), (Mode::Quota, true)]));
    assert!(!request_denied([(Mode::Quota, true), (Mode::Quota, false)]));
    assert!(!request_denied([(Mode::Quota, false), (Mode::Quota, true)]));
}

#[test]
fn denied_mixed_modes() {
    use Mode::{Enforce, Quota, Shadow};
    let cases: [(&[(Mode, bool)], bool); 12] = [
        // An enforced descriptor over denies whatever quota says.
        (&[(Enforce, true), (Quota, false)], true),
        (&[(Quota, false), (Enforce, true)], true),
        // Quota all over denies even with enforced descriptors under their limit.
        (&[(Enforce, false), (Quota, true)], true),
        (&[(Quota, true), (Enforce, false), (Quota, true)], true),
        // One quota descriptor under its limit saves the request.
        (&[(Enforce, false), (Quota, true), (Quota, false)], false),
        // Shadow over counts for nothing, on either side.
        (&[(Shadow, true), (Quota, false)], false),
        (&[(Shadow, true), (Quota, true)], true),
        (&[(Shadow, true), (Enforce, false)], false),
        (&[(Shadow, false), (Enforce, true)], true),
        // Shadow is not a quota descriptor: it does not make "all quota over" false...
        (&[(Quota, true), (Shadow, false)], true),
        // ...nor true when there is no quota descriptor.
        (&[(Shadow, true), (Shadow, true), (Enforce, false)], false),
        (
            &[
                (Enforce, true),
                (Shadow, false),
                (Quota, false),
                (Quota, true),
            ],
            true,
        ),
    ];
    for (verdicts, denied) in cases {
        assert_eq!(
            request_denied(verdicts.iter().copied()),
            denied,
            "{verdicts:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// Step helpers and State::idle_in
// ---------------------------------------------------------------------------------------

#[test]
fn step_over_is_the_consumed_verdict() {
    let l = tb(1, Unit::Second, 1);
    assert!(!step(None, &l, 1, T0).over());
    assert!(step(None, &l, 2, T0).over());
}

#[test]
fn idle_in_token_bucket() {
    let l = tb(10, Unit::Second, 10);
    let mut st = None;
    let r = hit(&mut st, &l, 3, T0);
    let st = st.unwrap();
    assert_eq!(st.idle_in(T0, 10), 300 * MS);
    assert_eq!(st.idle_in(T0, 10), r.reset);
    assert_eq!(st.idle_in(T0 + 100 * MS, 10), 200 * MS);
    assert_eq!(st.idle_in(T0 + 300 * MS - 1, 10), 1);
    assert_eq!(st.idle_in(T0 + 300 * MS, 10), 0);
    assert_eq!(st.idle_in(T0 + 3600 * S, 10), 0);
    // A clock behind the state: still positive, and longer.
    assert_eq!(st.idle_in(T0 - S, 10), S + 300 * MS);
    // A full bucket is idle at once.
    assert_eq!(bucket(0, T0, Unit::Second).idle_in(T0, 10), 0);
    assert_eq!(bucket(0, T0, Unit::Second).idle_in(T0 + 1, 10), 0);
    // Zero rate: no panic, and a finite answer.
    assert!(st.idle_in(T0, 0) > 0);
    // Idle means indistinguishable from no state.
    let at = T0 + st.idle_in(T0, 10);
    assert_eq!(
        step(Some(&st), &l, 1, at).consumed().1,
        step(None, &l, 1, at).consumed().1
    );
}

#[test]
fn idle_in_token_bucket_uses_the_given_rate() {
    let st = bucket(6 * S as u128, T0, Unit::Second);
    assert_eq!(st.idle_in(T0, 3), 2 * S);
    assert_eq!(st.idle_in(T0, 6), S);
    assert_eq!(st.idle_in(T0, 7), 857_142_858);
}

#[test]
fn idle_in_fixed_window() {
    let l = fw(10, Unit::Minute);
    let now = T0 + 15 * S + 250 * MS;
    let s = step(None, &l, 1, now);
    let st = s.consumed().0;
    assert_eq!(st.idle_in(now, 10), 44 * S + 750 * MS);
    // The report rounds the same end to whole seconds from the second the request is in.
    assert_eq!(s.consumed().1.reset, 45 * S);
    assert_eq!(st.idle_in(T0 + 60 * S - 1, 10), 1);
    assert_eq!(st.idle_in(T0 + 60 * S, 10), 0);
    assert_eq!(st.idle_in(T0 + 3600 * S, 10), 0);
    assert_eq!(st.idle_in(T0, 10), 60 * S);
    // Once idle, a step sees a fresh window.
    assert_eq!(
        step(Some(&st), &l, 1, T0 + 60 * S).consumed().1,
        counted(1, ok(9, 60 * S))
    );
}

/// A window is empty, and its state idle, only once its newest hit leaves, not its
/// oldest: hits of two sub-windows.
#[test]
fn a_sliding_window_is_empty_when_its_newest_hit_leaves() {
    let l = Limit {
        charge: false,
        requests_per_unit: 10,
        unit: Unit::Minute,
        multiplier: 5,
        burst: 10,
        algorithm: Algorithm::SlidingWindow,
    };
    // Sub-windows of 30 s: hits at 10 s (sub-window 0) and 70 s (sub-window 2).
    let mut state = None;
    hit(&mut state, &l, 2, T0 + 10 * S);
    let second = hit(&mut state, &l, 1, T0 + 70 * S);
    // The hit of sub-window 2 leaves when sub-window 13 starts: 390 s.
    assert_eq!((second.remaining, second.reset), (7, 320 * S));
    let st = state.expect("a window");
    assert_eq!(st.idle_in(T0 + 330 * S, 10), 60 * S);
    assert_eq!(st.idle_in(T0 + 390 * S, 10), 0);
    // Past the first hits' leaving, the second's still counts.
    let peek = step(Some(&st), &l, 0, T0 + 330 * S).consumed().1;
    assert_eq!((peek.remaining, peek.reset), (9, 60 * S));
}

/// `remaining` is the whole tokens of `cap − debt` for every unit (a long period's cap
/// passes 64 bits), burst and debt, fractions of a token and the full and empty ends
/// included.
#[test]
fn tb_remaining_is_the_whole_tokens_left_for_every_period_and_debt() {
    for unit in Unit::ALL {
        for burst in [1, 2, 7, 1000, u32::MAX] {
            let limit = tb(burst, unit, burst);
            let token = u128::from(limit.period_nanos());
            let cap = u128::from(burst) * token;
            let debts = [0, 1, token - 1, token, token + 1, cap / 2, cap - 1, cap];
            for debt in debts.into_iter().filter(|&debt| debt <= cap) {
                let state = State::TokenBucket {
                    debt,
                    at: T0,
                    period: period_seconds(limit.period_nanos()),
                };
                let report = step(Some(&state), &limit, 0, T0).unconsumed().1;
                let expected = u32::try_from((cap - debt) / token).unwrap();
                assert_eq!(
                    report.remaining, expected,
                    "{unit:?} burst {burst} debt {debt}"
                );
            }
        }
    }
}

/// `tb` with `charge: always`.
fn charging(requests_per_unit: u32, unit: Unit, burst: u32) -> Limit {
    Limit {
        charge: true,
        ..tb(requests_per_unit, unit, burst)
    }
}

#[test]
fn a_charge_lands_in_either_fate_and_a_take_does_not() {
    let limit = charging(10, Unit::Second, 10);
    let charge = step(None, &limit, 15, T0);
    assert!(charge.over(), "15 of 10: in debt");
    assert_eq!(charge.consumed(), charge.unconsumed());
    assert_eq!(charge.consumed().1.owed(&limit), 5);
    let refund = refund(Some(&charge.consumed().0), &limit, 3, T0);
    assert_eq!(refund.consumed(), refund.unconsumed());
    assert_eq!(refund.consumed().1.owed(&limit), 2);
    // A check of nothing is a check, charge or not.
    let check = step(None, &limit, 0, T0);
    assert_eq!(check.consumed(), check.unconsumed());
    assert_eq!(check.consumed().1, ok(10, 0));
}

#[test]
fn a_reload_that_stops_charging_forgives_the_debt_past_empty() {
    let mut state = None;
    hit(&mut state, &charging(10, Unit::Second, 10), 25, T0);
    let charges = charging(10, Unit::Second, 10);
    assert_eq!(peek(&state, &charges, T0).owed(&charges), 15);
    // The same limit without charge: the bucket is empty, as a denial would leave it.
    let plain = tb(10, Unit::Second, 10);
    assert_eq!(peek(&state, &plain, T0), over(0, 100 * MS));
    assert_eq!(peek(&state, &plain, T0).owed(&plain), 0);
}

#[test]
fn a_limit_of_zero_records_no_charge() {
    let limit = charging(0, Unit::Second, 0);
    let mut state = None;
    let report = hit(&mut state, &limit, 5, T0);
    assert!(report.over);
    assert_eq!(
        report.reset, S,
        "one period, as for any request on a zero limit"
    );
    assert_eq!(
        state,
        Some(State::TokenBucket {
            debt: 0,
            at: T0,
            period: 1
        })
    );
}

#[test]
fn the_debt_of_the_largest_charge_stays_exact() {
    // A year's period and the largest limit: the ceiling still fits, and the time until
    // a hit passes is the ten periods plus one token. (Ten periods of the longest, 100
    // years, pass what 64 bits of nanoseconds hold: such a reset reads as u64::MAX.)
    let limit = charging(u32::MAX, Unit::Year, u32::MAX);
    let report = step(None, &limit, u64::MAX, T0).consumed().1;
    assert!(report.over);
    assert_eq!(report.owed(&limit), 10 * u64::from(u32::MAX));
    let period = limit.period_nanos();
    let expected =
        (u128::from(period) * (10 * u128::from(u32::MAX) + 1)).div_ceil(u128::from(u32::MAX));
    assert_eq!(u128::from(report.reset), expected);
}

//! Property tests of the sliding window through the public API: for random arrival
//! patterns it never admits more than the limit in any interval of one period, it admits
//! whatever docs/configuration.md promises (a request passes when the hits admitted in the last
//! period and a tenth, plus its own, fit), a refusal's wait is exact, and a window is
//! never idle (droppable by a store's upkeep) while an admitted hit counts.
//!
//! Every step takes an explicit `now`. Failures are saved next to this file, in
//! `proptest_sliding.proptest-regressions` (committed: its seeds run first, every time).

use meshlimit::limiter::{step, unconsumed_from};
use meshlimit::rules::{Algorithm, Limit, SLIDING_SUBWINDOWS, Unit};
use proptest::prelude::*;

#[path = "common/proptest_config.rs"]
mod proptest_config;
use proptest_config::config;

const S: u64 = 1_000_000_000;
/// 2026-01-01T00:00:00Z.
const T0: u64 = 1_767_225_600 * S;

fn limit() -> impl Strategy<Value = Limit> {
    (
        1..=40u32,
        prop_oneof![Just(Unit::Second), Just(Unit::Minute), Just(Unit::Hour)],
        1..=5u32,
    )
        .prop_map(|(requests_per_unit, unit, multiplier)| Limit {
            charge: false,
            requests_per_unit,
            unit,
            multiplier,
            burst: requests_per_unit,
            algorithm: Algorithm::SlidingWindow,
        })
}

/// Gaps as fractions of a period (in 1/1000ths), often tiny (bursts), sometimes just past
/// a sub-window edge, sometimes long; hits mostly 1.
fn arrivals() -> impl Strategy<Value = Vec<(u64, u64)>> {
    let gap = prop_oneof![
        4 => 0..5u64,
        3 => 0..150u64,
        2 => (0..12u64).prop_map(|i| i * 100),
        1 => 0..2_500u64,
    ];
    let hits = prop_oneof![6 => Just(1u64), 2 => 0..4u64, 1 => 5..60u64];
    prop::collection::vec((gap, hits), 1..300)
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn never_more_than_the_limit_in_any_period_and_never_refuses_early(
        limit in limit(),
        arrivals in arrivals(),
        offset in 0..1_000u64,
    ) {
        let period = limit.period_nanos();
        let tenth = period / SLIDING_SUBWINDOWS as u64;
        let cap = u64::from(limit.requests_per_unit);
        let mut now = T0 + offset * period / 1_000;
        let mut state = None;
        let mut admitted: Vec<(u64, u64)> = Vec::new();
        for (gap, hits) in arrivals {
            now += gap * period / 1_000;
            let decided = step(state.as_ref(), &limit, hits, now);
            let over = decided.over();
            if !over {
                // A store that kept the consumed outcome finds the unconsumed one from it.
                let again = unconsumed_from(&decided.consumed().0, &limit, hits, now);
                prop_assert_eq!(again, decided.unconsumed());
            }
            let (next, report) = decided.settle(over);
            // What an exact log counts in the last period and a tenth, plus this request:
            // within the limit means the window must admit it.
            let recent = counted_since(&admitted, now.saturating_sub(period + tenth));
            if recent + hits.max(1) <= cap {
                prop_assert!(!over, "refused with {recent} admitted in the last 1.1 periods");
            }
            if over && hits <= cap {
                // The wait is exact: not a nanosecond earlier, and then it passes.
                let at = now + report.reset;
                prop_assert!(!step(Some(&next), &limit, hits, at).over());
                if report.reset > 0 {
                    prop_assert!(step(Some(&next), &limit, hits, at - 1).over());
                }
            }
            if !over && hits > 0 {
                admitted.push((now, hits));
                // Any interval of one period holding the most admissions ends at one.
                let in_period = counted_since(&admitted, now - period);
                prop_assert!(in_period <= cap, "{in_period} admitted within one period");
            }
            // Stores drop a bucket once it is idle: never while an admitted hit counts.
            if let Some(&(last, _)) = admitted.last() {
                let idle_at = now + next.idle_in(now, limit.requests_per_unit);
                prop_assert!(idle_at >= last + period, "idle while a hit of {last} counts");
            }
            state = Some(next);
        }
    }
}

/// Hits admitted after `since`.
fn counted_since(admitted: &[(u64, u64)], since: u64) -> u64 {
    admitted
        .iter()
        .filter(|&&(t, _)| t > since)
        .map(|&(_, hits)| hits)
        .sum()
}

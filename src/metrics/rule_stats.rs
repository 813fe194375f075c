//! One series of per-rule statistics: its counters, how a descriptor's hits split into
//! within, near and over the limit (as the Go server splits them), and the families a
//! scrape reads off the counters.

use super::stripes::{Counters, wrapping_sum};
use crate::limiter::Report;
use crate::rules::{Algorithm, Limit};
use crate::store::Expiries;

/// Counters of one series of per-rule statistics, indexed by [`Hits`]; per thread once busy
/// (see `super::stripes`), so that the cores counting a busy rule do not take its cache
/// lines from each other.
#[derive(Debug, Default)]
pub(super) struct RuleStats {
    /// The counters of [`Hits`].
    counters: Counters<12>,
    /// `ratelimit_service_rate_limit_expired`: holds (and slots) released unsettled after
    /// their TTL, counted by the stores, which the service hands it with each check of a
    /// hold (rare: one shared counter, not one per thread).
    expired: Expiries,
}

/// What each counter of a [`RuleStats`] counts.
#[derive(Debug, Clone, Copy)]
enum Hits {
    /// Hits counted neither within nor over the limit (Go's split leaves out an over-limit
    /// request's hits below the limit). `ratelimit_service_rate_limit_total_hits` is read as
    /// this plus `Within` and `Over`, so that a hit costs one atomic addition, not two.
    Neither,
    /// `ratelimit_service_rate_limit_within_limit`: hits allowed.
    Within,
    /// `ratelimit_service_rate_limit_near_limit`: hits past the near-limit share of the
    /// limit (see `split`).
    Near,
    /// `ratelimit_service_rate_limit_over_limit`: hits past the limit, shadow rules'
    /// included.
    Over,
    /// `ratelimit_service_rate_limit_shadow_mode`: over-limit hits of shadow-mode rules,
    /// answered OK.
    Shadow,
    /// `ratelimit_service_rate_limit_over_limit_with_local_cache`: over-limit hits answered
    /// from the local cache without Redis (also in `Over`).
    Cached,
    /// `ratelimit_service_rate_limit_charged`: hits of charges (`charge: always`),
    /// recorded whatever the answer.
    Charged,
    /// `ratelimit_service_rate_limit_refunded`: hits given back (`is_negative_hits`).
    Refunded,
    /// `ratelimit_service_rate_limit_debt`: hits of charges past what the limit had left,
    /// which the bucket owes.
    Debt,
    /// `ratelimit_service_rate_limit_held`: hits held by admitted holds (a slot counts 1).
    Held,
    /// `ratelimit_service_rate_limit_settled`: settles of holds received.
    Settled,
    /// `ratelimit_service_rate_limit_released`: concurrency slots given back.
    Released,
}

/// How one descriptor's hits count towards `within_limit`, `near_limit` and `over_limit`.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Split {
    /// Hits counted in `within_limit`.
    within: u64,
    /// Hits counted in `near_limit`.
    near: u64,
    /// Hits counted in `over_limit`.
    over: u64,
}

/// Splits `hits` the way the Go server does (§2.3 of the behaviour reference).
///
/// Fixed windows, exactly as Go: with `near = floor(limit × ratio)` and the window's count
/// before and after the request, an allowed request's hits are all within the limit, and
/// near it as far as they go past `near` (all of them when the count was already there); a
/// denied request's hits are over the limit as far as they go past the limit, and those
/// between `max(near, before)` and the limit count as near the limit.
///
/// Token buckets and sliding windows: the same rule applied to the bucket's fill level, the tokens in use
/// (`burst − remaining`) standing for the window's count and `burst` for the limit. So an
/// allowed request counts as near the limit by the tokens it took below
/// `(1 − ratio) × burst` left in the bucket. A denied request takes no token: all its hits
/// are over the limit. A descriptor that allowed its hits in a request another descriptor
/// denied counts them as within the limit (its own verdict), its bucket as it was.
fn split(limit: &Limit, hits: u64, report: &Report, ratio: f32) -> Split {
    match limit.algorithm {
        Algorithm::FixedWindow => {
            let after = report.count;
            let cap = u64::from(limit.requests_per_unit);
            go_split(
                cap,
                after.saturating_sub(hits),
                after,
                hits,
                report.over,
                ratio,
            )
        }
        Algorithm::TokenBucket | Algorithm::SlidingWindow if report.over => Split {
            over: hits,
            ..Split::default()
        },
        Algorithm::TokenBucket | Algorithm::SlidingWindow => {
            // A sliding window's capacity is its limit.
            let cap = u64::from(match limit.algorithm {
                Algorithm::SlidingWindow => limit.requests_per_unit,
                _ => limit.burst,
            });
            let after = cap.saturating_sub(u64::from(report.remaining));
            go_split(cap, after.saturating_sub(hits), after, hits, false, ratio)
        }
    }
}

/// Go's arithmetic over a count that went from `before` to `after` against `cap`.
fn go_split(cap: u64, before: u64, after: u64, hits: u64, over: bool, ratio: f32) -> Split {
    let near_at = near_threshold(cap, ratio);
    if !over {
        let near = if after <= near_at {
            0
        } else if before >= near_at {
            hits
        } else {
            after - near_at
        };
        Split {
            within: hits,
            near,
            over: 0,
        }
    } else if before >= cap {
        Split {
            over: hits,
            ..Split::default()
        }
    } else {
        Split {
            within: 0,
            near: cap.saturating_sub(near_at.max(before)),
            over: after - cap,
        }
    }
}

/// `floor(cap × ratio)`, multiplied in `f32` as the Go server does.
fn near_threshold(cap: u64, ratio: f32) -> u64 {
    // The cast truncates toward zero and saturates below 0, which for this product is the
    // floor; `f32::floor` is a call into libm on the baseline x86-64 target, once per
    // counted descriptor.
    (cap as f32 * ratio) as u64
}

impl RuleStats {
    pub(super) fn count(
        &self,
        limit: &Limit,
        hits: u64,
        report: &Report,
        shadow: bool,
        ratio: f32,
    ) {
        let mine = self.counters.mine();
        let split = if report.cached {
            mine.add(Hits::Cached as usize, hits);
            Split {
                over: hits,
                ..Split::default()
            }
        } else {
            split(limit, hits, report, ratio)
        };
        mine.add(Hits::Within as usize, split.within);
        mine.add(Hits::Near as usize, split.near);
        mine.add(Hits::Over as usize, split.over);
        mine.add(
            Hits::Neither as usize,
            hits.saturating_sub(split.within + split.over),
        );
        if shadow {
            mine.add(Hits::Shadow as usize, split.over);
        }
        if limit.charge && hits > 0 {
            mine.add(Hits::Charged as usize, hits);
            mine.add(Hits::Debt as usize, hits.min(report.owed(limit)));
        }
    }

    /// Hits given back by a refund.
    pub(super) fn refunded(&self, hits: u64) {
        self.counters.mine().add(Hits::Refunded as usize, hits);
    }

    /// A hold taken of `hits` (1 for a slot), a settle, or a slot given back.
    pub(super) fn hold(&self, held: u64, settled: bool, released: bool) {
        let mine = self.counters.mine();
        if held > 0 {
            mine.add(Hits::Held as usize, held);
        }
        if settled {
            mine.add(Hits::Settled as usize, 1);
        }
        if released {
            mine.add(Hits::Released as usize, 1);
        }
    }

    /// Hits allowed on an unlimited rule.
    pub(super) fn within(&self, hits: u64) {
        self.counters.mine().add(Hits::Within as usize, hits);
    }

    /// Where the stores count this series' holds released unsettled after their TTL.
    pub(super) fn expiries(&self) -> &Expiries {
        &self.expired
    }

    fn read(&self, counter: Hits) -> u64 {
        self.counters.get(counter as usize)
    }
}

/// The per-rule families: name, help, and the counter each reads.
pub(super) type RuleFamily = (&'static str, &'static str, fn(&RuleStats) -> u64);

/// The first of [`RULE_FAMILIES`] that only rules with `charge: always` or holds count:
/// their series are written only once not zero, so that a config without charges or
/// holds scrapes as it did.
pub(super) const FIRST_CHARGE_FAMILY: usize = 6;

pub(super) const RULE_FAMILIES: [RuleFamily; 13] = [
    (
        "ratelimit_service_rate_limit_total_hits",
        "Hits (hits_addend) on each rule.",
        |s| wrapping_sum([Hits::Within, Hits::Over, Hits::Neither].map(|h| s.read(h))),
    ),
    (
        "ratelimit_service_rate_limit_within_limit",
        "Hits on each rule that were within its limit.",
        |s| s.read(Hits::Within),
    ),
    (
        "ratelimit_service_rate_limit_near_limit",
        "Hits on each rule beyond the near-limit ratio of its limit.",
        |s| s.read(Hits::Near),
    ),
    (
        "ratelimit_service_rate_limit_over_limit",
        "Hits on each rule that were over its limit (shadow rules included).",
        |s| s.read(Hits::Over),
    ),
    (
        "ratelimit_service_rate_limit_shadow_mode",
        "Over-limit hits on each shadow-mode rule, answered OK.",
        |s| s.read(Hits::Shadow),
    ),
    (
        "ratelimit_service_rate_limit_over_limit_with_local_cache",
        "Over-limit hits on each rule answered from the local over-limit cache, without Redis.",
        |s| s.read(Hits::Cached),
    ),
    (
        "ratelimit_service_rate_limit_charged",
        "Hits charged on each rule with charge: always, recorded whatever the answer.",
        |s| s.read(Hits::Charged),
    ),
    (
        "ratelimit_service_rate_limit_refunded",
        "Hits given back (is_negative_hits) on each rule with charge: always.",
        |s| s.read(Hits::Refunded),
    ),
    (
        "ratelimit_service_rate_limit_debt",
        "Hits charged on each rule past what its limit had left: the debt they ran up.",
        |s| s.read(Hits::Debt),
    ),
    (
        "ratelimit_service_rate_limit_held",
        "Hits held on each rule with reserve (slots on each concurrency rule) by admitted holds.",
        |s| s.read(Hits::Held),
    ),
    (
        "ratelimit_service_rate_limit_settled",
        "Settles of holds received on each rule with reserve or concurrency.",
        |s| s.read(Hits::Settled),
    ),
    (
        "ratelimit_service_rate_limit_released",
        "Concurrency slots given back on each concurrency rule by a settle.",
        |s| s.read(Hits::Released),
    ),
    (
        "ratelimit_service_rate_limit_expired",
        "Holds released unsettled after their TTL on each rule with reserve or concurrency.",
        |s| s.expired.get(),
    ),
];

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::Unit;

    fn fw(requests_per_unit: u32) -> Limit {
        Limit {
            charge: false,
            requests_per_unit,
            unit: Unit::Minute,
            multiplier: 1,
            burst: requests_per_unit,
            algorithm: Algorithm::FixedWindow,
        }
    }

    fn tb(burst: u32) -> Limit {
        Limit {
            charge: false,
            requests_per_unit: burst,
            unit: Unit::Minute,
            multiplier: 1,
            burst,
            algorithm: Algorithm::TokenBucket,
        }
    }

    fn window(count: u64, over: bool) -> Report {
        Report {
            over,
            count,
            ..Report::default()
        }
    }

    fn bucket(remaining: u32, over: bool) -> Report {
        Report {
            over,
            remaining,
            ..Report::default()
        }
    }

    fn s(within: u64, near: u64, over: u64) -> Split {
        Split { within, near, over }
    }

    #[test]
    fn fixed_windows_split_like_the_go_server() {
        // Limit 20, near from 16: (count before, hits) → (within, near, over).
        let cases = [
            ((0, 10), s(10, 0, 0)),
            ((10, 6), s(6, 0, 0)),  // up to the threshold: not beyond it
            ((10, 8), s(8, 2, 0)),  // crosses the threshold
            ((16, 0), s(0, 0, 0)),  // a check
            ((17, 1), s(1, 1, 0)),  // already beyond it: every hit
            ((16, 4), s(4, 4, 0)),  // to the limit exactly: still allowed
            ((19, 4), s(0, 1, 3)),  // crosses the limit from beyond the threshold
            ((10, 15), s(0, 4, 5)), // crosses both
            ((20, 2), s(0, 0, 2)),  // already at the limit
            ((23, 1), s(0, 0, 1)),
        ];
        for ((before, hits), expected) in cases {
            let after = before + hits;
            let report = window(after, after > 20);
            assert_eq!(
                split(&fw(20), hits, &report, 0.8),
                expected,
                "before {before} hits {hits}"
            );
        }
        // A zero limit: every hit over.
        assert_eq!(split(&fw(0), 3, &window(3, true), 0.8), s(0, 0, 3));
    }

    #[test]
    fn total_hits_counts_every_hit_whatever_the_split() {
        // (count before, hits, cached): the second leaves 4 hits neither within nor over.
        for (before, hits, cached) in [
            (0, 10, false),
            (10, 15, false),
            (19, 4, false),
            (25, 3, true),
        ] {
            let stats = RuleStats::default();
            let after = before + hits;
            let report = Report {
                cached,
                ..window(after, after > 20)
            };
            stats.count(&fw(20), hits, &report, false, 0.8);
            assert_eq!(
                RULE_FAMILIES[0].2(&stats),
                hits,
                "before {before} hits {hits}"
            );
        }
    }

    #[test]
    fn a_busy_series_counted_from_several_threads_loses_no_hit() {
        // Enough to pass the point where the counters take their stripes.
        let stats = RuleStats::default();
        let (threads, each) = (4, 20_000);
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(|| {
                    for i in 0..each {
                        let over = i % 4 == 0;
                        stats.count(&tb(10), 1, &bucket(5, over), i % 8 == 0, 0.8);
                    }
                });
            }
        });
        let read = |family: usize| RULE_FAMILIES[family].2(&stats);
        let total = threads * each;
        // total_hits, within_limit, near_limit, over_limit, shadow_mode, local cache.
        let families: Vec<u64> = (0..6).map(read).collect();
        assert_eq!(
            families,
            [total, total * 3 / 4, 0, total / 4, total / 8, 0],
            "{families:?}"
        );
    }

    #[test]
    fn token_buckets_split_on_their_fill_level() {
        // Burst 10, near once fewer than 2 tokens are left.
        let cases = [
            ((5, 1), s(1, 0, 0)),
            ((2, 1), s(1, 0, 0)),  // 8 in use: at the threshold, not beyond
            ((1, 1), s(1, 1, 0)),  // 9 in use, 8 before: beyond it
            ((0, 3), s(3, 2, 0)),  // 7 → 10 in use
            ((10, 0), s(0, 0, 0)), // a check on a full bucket
        ];
        for ((remaining, hits), expected) in cases {
            assert_eq!(
                split(&tb(10), hits, &bucket(remaining, false), 0.8),
                expected,
                "remaining {remaining} hits {hits}"
            );
        }
        // Denied: nothing taken, every hit over.
        assert_eq!(split(&tb(10), 4, &bucket(3, true), 0.8), s(0, 0, 4));
    }

    /// A config of two domains with three rules each, rules at several levels.
    #[test]
    fn the_threshold_is_computed_in_f32_as_in_go() {
        assert_eq!(near_threshold(10, 0.8), 8);
        assert_eq!(near_threshold(3, 0.8), 2);
        assert_eq!(near_threshold(0, 0.8), 0);
        assert_eq!(near_threshold(20, 0.5), 10);
        assert_eq!(near_threshold(u64::from(u32::MAX), 1.0), 4_294_967_296);
        // The cast alone floors whatever the ratio: the same as `floor` before it.
        for ratio in [
            0.0,
            0.3,
            0.8,
            0.99,
            1.0,
            1.5,
            -0.5,
            -3.0,
            f32::NAN,
            f32::INFINITY,
        ] {
            for cap in [0, 1, 3, 10, 20, 1_000_003, u64::from(u32::MAX)] {
                let floored = (cap as f32 * ratio).floor() as u64;
                assert_eq!(near_threshold(cap, ratio), floored, "{cap} × {ratio}");
            }
        }
    }
}

//! The decision scripts' arguments: [`decide.lua`](./decide.lua)'s nine fields per check
//! ([`general_args`]) and [`decide_buckets.lua`](./decide_buckets.lua)'s six numbers
//! ([`BucketCheck`]), token-bucket limits as exact integers ([`Scale`]).
//!
//! Token-bucket arithmetic in Lua runs on doubles, exact below 2^53: [`Scale`] expresses a
//! limit in integers (microsecond quanta, a token reduced by the gcd of unit and rate) that
//! stay below that for any practical limit; for a limit that charges, its debt ceiling
//! too ([`Scale::ceiling`]).
//!
//! A charge limit's check and a refund are told apart cheaply, so that normal checks pay
//! nothing for them: decide.lua's kind is upper-case (`T`, `W`, `S`) when the limit
//! charges, and a refund's hits are negative (`-0` for a refund of nothing, which lands
//! nothing but is decided as a refund); decide_buckets.lua takes a request with either
//! as a number of checks below zero (see [`BucketCheck`]).

use redis::Cmd;

use super::leases::Want;
use super::options::TimeSource;
use crate::clock::Nanos;
use crate::rules::{Algorithm, DEBT_PERIODS, Limit, Mode};
use crate::store::{Check, Phase};

/// A token-bucket limit as the script's exact integers: time in quanta of `q`
/// microseconds, one token worth `token`, refill `rate` per quantum, capacity `cap`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Scale {
    /// Microseconds per quantum of time: the script reads the clock in whole quanta.
    pub(super) q: u64,
    /// Scaled units one token is worth.
    pub(super) token: u64,
    /// Scaled units refilled per quantum.
    pub(super) rate: u64,
    /// The bucket's capacity (its burst) in scaled units.
    pub(super) cap: u64,
    /// The most debt the bucket may hold, scaled: `cap`, plus [`DEBT_PERIODS`] periods of
    /// refill for a limit that charges (`rate` × the period in quanta = rpu × `token`).
    pub(super) ceiling: u64,
    /// Nanoseconds per scaled unit of debt, to turn the script's debt into
    /// [`crate::limiter::State`]'s (a token worth the unit in nanoseconds).
    pub(super) debt_nanos: u128,
}

/// Below this, Lua's doubles hold integers exactly.
const EXACT: u64 = 1 << 53;

impl Scale {
    /// The exact integers of `limit`. The largest number the scripts hold is the debt
    /// ceiling (the capacity, for a limit that does not charge): quanta grow coarser until
    /// it is exact.
    pub(super) fn of(limit: &Limit) -> Scale {
        let unit_us = limit.period_nanos() / 1000;
        let rpu = u64::from(limit.requests_per_unit);
        let mut q = 1;
        loop {
            let unit_q = unit_us / q;
            let g = gcd(unit_q, rpu);
            let token = unit_q / g;
            let cap = u64::from(limit.burst).saturating_mul(token);
            let ceiling = if limit.charge {
                let periods = u64::from(DEBT_PERIODS).saturating_mul(rpu);
                cap.saturating_add(periods.saturating_mul(token))
            } else {
                cap
            };
            // Coarser quanta only while they divide the unit and the ceiling is inexact.
            if ceiling < EXACT || !unit_us.is_multiple_of(q * 10) {
                return Scale {
                    q,
                    token,
                    rate: rpu / g,
                    cap,
                    ceiling,
                    debt_nanos: u128::from(g) * u128::from(q) * 1000,
                };
            }
            q *= 10;
        }
    }

    /// Whole tokens a bucket holding `debt` (scaled) owes below empty: `Report::owed`.
    pub(super) fn owed(&self, debt: u64) -> u64 {
        debt.saturating_sub(self.cap).div_ceil(self.token.max(1))
    }
}

/// A sliding window's period in microseconds: a multiple of the sub-window count, since
/// periods are whole seconds, so the script's sub-windows start on whole microseconds.
fn sliding_period_us(limit: &Limit) -> u64 {
    limit.period_seconds() * 1_000_000
}

/// The greatest common divisor of `a` and `b`, at least 1.
fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a.max(1)
}

/// One token-bucket check as [`decide_buckets.lua`](./decide_buckets.lua) takes it: hits,
/// the [`Scale`], whether its being over denies the request, and whether it is a refund
/// (a charge is a check of hits on a limit whose [`Scale::ceiling`] passes its capacity).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BucketCheck {
    /// Hits to take (0 checks without consuming), or to give back ([`BucketCheck::refund`]).
    pub(super) hits: u64,
    /// The limit's exact integers.
    pub(super) scale: Scale,
    /// Enforce mode: over denies the request (shadow: it does not).
    pub(super) enforce: bool,
    /// `is_negative_hits`: the hits are given back, whatever the request's fate.
    pub(super) refund: bool,
}

impl BucketCheck {
    /// `check`'s numbers; `None` for a check the specialised script does not take (not a
    /// token bucket, or a quota mode).
    pub(super) fn of(check: &Check<'_>) -> Option<BucketCheck> {
        let enforce = match check.mode {
            Mode::Enforce => true,
            Mode::Shadow => false,
            Mode::Quota | Mode::ShadowQuota => return None,
        };
        (check.limit.algorithm == Algorithm::TokenBucket).then(|| BucketCheck {
            hits: check.hits,
            scale: Scale::of(&check.limit),
            enforce,
            refund: check.refund,
        })
    }

    /// Whether the script decides it with the care of a charge limit: its limit charges
    /// (its debt may pass the capacity) or it is a refund.
    pub(super) fn careful(&self) -> bool {
        self.refund || self.scale.ceiling > self.scale.cap
    }

    /// Whether it lands whatever the request's fate: a refund, or a charge (hits on a
    /// limit that charges); never on a bucket that does not refill, which records nothing.
    pub(super) fn lands(&self) -> bool {
        self.scale.rate > 0
            && (self.refund || (self.hits > 0 && self.scale.ceiling > self.scale.cap))
    }
}

/// Appends the general script's arguments for a request to `args`: now ('' for Redis'
/// clock), the number of checks, then nine fields per check. Returns about the bytes added.
pub(super) fn general_args(
    args: &mut Cmd,
    time: TimeSource,
    checks: &[Check<'_>],
    wants: &[Want],
    now: Nanos,
) -> usize {
    match time {
        TimeSource::Redis => args.arg(""),
        TimeSource::Caller => args.arg(now / 1000),
    };
    let holds = hold_ops(checks).count();
    if holds > 0 {
        // Negative: hold ops follow the checks (see decide.lua's header).
        args.arg(format!("-{}", checks.len()));
    } else {
        args.arg(checks.len());
    }
    for (check, want) in checks.iter().zip(wants) {
        let mode = match check.mode {
            Mode::Enforce => "e",
            Mode::Shadow => "s",
            Mode::Quota => "q",
            Mode::ShadowQuota => "x",
        };
        // Upper case: the limit charges (or the check is a refund), see decide.lua.
        let careful = check.limit.charge || check.refund;
        let (kind, numbers, lease) = match check.limit.algorithm {
            Algorithm::TokenBucket => {
                let s = Scale::of(&check.limit);
                let numbers = [s.token, s.rate, s.cap, s.q];
                // A limit that charges never leases: its last field is its ceiling.
                if careful {
                    ("T", numbers, s.ceiling)
                } else {
                    ("t", numbers, want.extra)
                }
            }
            Algorithm::FixedWindow => {
                let limit = u64::from(check.limit.requests_per_unit);
                let kind = if careful { "W" } else { "w" };
                (kind, [limit, check.limit.period_seconds(), 0, 0], 0)
            }
            Algorithm::SlidingWindow => {
                let limit = u64::from(check.limit.requests_per_unit);
                let kind = if careful { "S" } else { "s" };
                (kind, [limit, sliding_period_us(&check.limit), 0, 0], 0)
            }
        };
        args.arg(kind);
        if check.refund {
            // Negative: given back; "-0" for a refund of nothing.
            args.arg(format!("-{}", check.hits));
        } else {
            args.arg(check.hits);
        }
        args.arg(mode)
            .arg(check.descriptor)
            .arg(&numbers)
            .arg(lease);
    }
    if holds > 0 {
        args.arg(holds);
        for (i, check, op) in hold_ops(checks) {
            let hold = check.hold.as_ref().map_or("", |h| h.id);
            let (ttl, max) = check
                .hold
                .map_or((0, 0), |h| ((h.ttl / 1000).max(1), h.slots.unwrap_or(0)));
            args.arg(i + 1).arg(op).arg(hold).arg(ttl).arg(max);
        }
    }
    // About 8 bytes a field: a bound for a call's size, not an exact count.
    8 * (2 + 9 * checks.len() + 6 * holds)
}

/// The checks of `checks` with a hold op for decide.lua, in order: each one's index, the
/// check, and the op's letter ('r' reserve, 's' settle, 'c' take a slot, 'x' give it
/// back, 'p' peek at the slots). A reservation's peek asks nothing of its holds: none.
pub(super) fn hold_ops<'c, 'k>(
    checks: &'c [Check<'k>],
) -> impl Iterator<Item = (usize, &'c Check<'k>, &'static str)> {
    checks.iter().enumerate().filter_map(|(i, check)| {
        let hold = check.hold?;
        let op = match (hold.slots, hold.phase) {
            (None, Phase::Hold) => "r",
            (None, Phase::Settle) => "s",
            (None, Phase::Peek) => "v",
            (Some(_), Phase::Hold) => "c",
            (Some(_), Phase::Settle) => "x",
            (Some(_), Phase::Peek) => "p",
        };
        Some((i, check, op))
    })
}

/// The Redis keys of a bucket's holds, from its key: a hash of the hits each hold keeps,
/// and a sorted set of their expiries. The same hash tag, so the same Cluster slot as the
/// bucket. A suffix no bucket key can end with: bucket keys are length-prefixed parts
/// (`<length>:<part>`, see crate::bucket_key), and `:h` is not one.
pub(super) fn hold_keys(bucket: &str) -> [String; 2] {
    [format!("{bucket}:h"), format!("{bucket}:e")]
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::rules::Unit;

    /// A token bucket of `rpu` per `unit`, burst `burst`; also for [`super::super::part`]'s
    /// tests.
    pub(in crate::store::redis) fn limit(rpu: u32, unit: Unit, burst: u32) -> Limit {
        Limit {
            charge: false,
            requests_per_unit: rpu,
            unit,
            multiplier: 1,
            burst,
            algorithm: Algorithm::TokenBucket,
        }
    }

    /// The arguments as text.
    fn args(cmd: &Cmd) -> Vec<String> {
        cmd.args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn each_check_sends_nine_fields_in_the_general_scripts_order() {
        let window = |algorithm| Limit {
            charge: false,
            requests_per_unit: 3,
            unit: Unit::Minute,
            multiplier: 5,
            burst: 3,
            algorithm,
        };
        let check = |limit, descriptor, mode| Check {
            refund: false,
            key: "4:test1:k".into(),
            limit,
            hits: 2,
            mode,
            descriptor,
            hold: None,
        };
        let checks = [
            check(window(Algorithm::SlidingWindow), 0, Mode::Quota),
            check(window(Algorithm::FixedWindow), 0, Mode::Quota),
            check(limit(100, Unit::Second, 10), 1, Mode::Shadow),
        ];
        let wants = [Want::nothing(), Want::nothing(), Want::nothing()];
        let mut cmd = Cmd::new();
        general_args(&mut cmd, TimeSource::Caller, &checks, &wants, 7_000_999);
        // The time in whole microseconds, the number of checks, then each check: kind,
        // hits, mode, descriptor, four numbers (a window's period in µs or s), the lease.
        let head = ["7000", "3"];
        let sliding = ["s", "2", "q", "0", "3", "300000000", "0", "0", "0"];
        let fixed = ["w", "2", "q", "0", "3", "300", "0", "0", "0"];
        let bucket = ["t", "2", "s", "1", "10000", "1", "100000", "1", "0"];
        let expected = [&head[..], &sliding, &fixed, &bucket].concat();
        assert_eq!(args(&cmd), expected);
    }

    #[test]
    fn holds_follow_the_checks_their_count_negative_and_a_requests_without_them_cost_nothing() {
        use crate::store::HoldOp;
        let check = |hold| Check {
            refund: false,
            key: "4:test1:k".into(),
            limit: limit(100, Unit::Second, 10),
            hits: 2,
            mode: Mode::Enforce,
            descriptor: 0,
            hold,
        };
        let op = |phase, slots| {
            Some(HoldOp {
                id: "r1",
                phase,
                ttl: 300_000_000_000,
                slots,
                expiries: None,
            })
        };
        let checks = [
            check(None),
            check(op(Phase::Hold, None)),
            check(op(Phase::Settle, Some(5))),
            // A reservation's other checks release its expired holds first.
            check(op(Phase::Peek, None)),
        ];
        let wants = [(); 4].map(|_| Want::nothing());
        let mut cmd = Cmd::new();
        general_args(&mut cmd, TimeSource::Caller, &checks, &wants, 7_000_999);
        let sent = args(&cmd);
        assert_eq!(sent[..2], ["7000", "-4"]);
        // After the four checks' nine fields: three ops, each check index (1 on), op, id,
        // ttl in µs, slots.
        let ops = [
            "3",
            "2",
            "r",
            "r1",
            "300000000",
            "0",
            "3",
            "x",
            "r1",
            "300000000",
            "5",
            "4",
            "v",
            "r1",
            "300000000",
            "0",
        ];
        assert_eq!(sent[2 + 4 * 9..], ops);
        let ops: Vec<_> = hold_ops(&checks).map(|(i, _, op)| (i, op)).collect();
        assert_eq!(ops, [(1, "r"), (2, "x"), (3, "v")]);
        assert_eq!(
            hold_keys("ml1:{4:test}1:k"),
            ["ml1:{4:test}1:k:h", "ml1:{4:test}1:k:e"]
        );
        // Without holds: the count as before, nothing after the checks.
        let mut plain = Cmd::new();
        general_args(
            &mut plain,
            TimeSource::Caller,
            &checks[..1],
            &wants[..1],
            7_000_999,
        );
        let sent = args(&plain);
        assert_eq!((sent[1].as_str(), sent.len()), ("1", 2 + 9));
    }

    #[test]
    fn only_token_buckets_in_enforce_or_shadow_are_bucket_checks() {
        let check = |mode| Check {
            refund: false,
            key: "4:test1:a".into(),
            limit: limit(100, Unit::Second, 10),
            hits: 2,
            mode,
            descriptor: 0,
            hold: None,
        };
        let bucket = BucketCheck::of(&check(Mode::Shadow)).expect("a bucket");
        assert_eq!((bucket.hits, bucket.enforce), (2, false));
        assert_eq!(bucket.scale, Scale::of(&limit(100, Unit::Second, 10)));
        assert!(BucketCheck::of(&check(Mode::Enforce)).is_some_and(|b| b.enforce));
        assert_eq!(BucketCheck::of(&check(Mode::Quota)), None);
        assert_eq!(BucketCheck::of(&check(Mode::ShadowQuota)), None);
        let window = Check {
            limit: Limit {
                algorithm: Algorithm::FixedWindow,
                ..limit(100, Unit::Second, 10)
            },
            ..check(Mode::Enforce)
        };
        assert_eq!(BucketCheck::of(&window), None);
    }

    #[test]
    fn scales_are_exact_integers_below_two_to_the_53() {
        let s = Scale::of(&limit(100, Unit::Second, 10));
        assert_eq!((s.q, s.token, s.rate, s.cap), (1, 10_000, 1, 100_000));
        let s = Scale::of(&limit(5, Unit::Minute, 1));
        assert_eq!(
            (s.q, s.token, s.rate, s.cap),
            (1, 12_000_000, 1, 12_000_000)
        );
        // A token is worth the unit in nanoseconds in the embedded store's debt.
        assert_eq!(
            u128::from(s.token) * s.debt_nanos,
            u128::from(Unit::Minute.nanos())
        );
        // Large bursts on long units take coarser quanta instead of losing exactness.
        for l in [
            limit(u32::MAX, Unit::Year, u32::MAX),
            limit(999_999, Unit::Year, 999_999),
            limit(7, Unit::Day, u32::MAX),
            limit(0, Unit::Week, 3),
        ] {
            let s = Scale::of(&l);
            assert!(s.cap < EXACT, "{l:?} → {s:?}");
            assert_eq!(
                u128::from(s.token) * s.debt_nanos,
                u128::from(l.unit.nanos()),
                "{l:?}"
            );
        }
        // A multiplier makes the token worth the whole period: 2 per 3 s is one per 1.5 s.
        let three_seconds = Limit {
            multiplier: 3,
            ..limit(2, Unit::Second, 1)
        };
        let s = Scale::of(&three_seconds);
        assert_eq!((s.q, s.token, s.rate, s.cap), (1, 1_500_000, 1, 1_500_000));
        assert_eq!(
            u128::from(s.token) * s.debt_nanos,
            u128::from(three_seconds.period_nanos())
        );
    }

    #[test]
    fn a_limit_that_charges_sends_upper_case_kinds_and_its_ceiling_and_a_refund_negative_hits() {
        let charging = |algorithm| Limit {
            charge: true,
            algorithm,
            ..limit(100, Unit::Second, 10)
        };
        let check = |limit, hits, refund| Check {
            refund,
            key: "4:test1:k".into(),
            limit,
            hits,
            mode: Mode::Enforce,
            descriptor: 0,
            hold: None,
        };
        let checks = [
            check(charging(Algorithm::TokenBucket), 3, false),
            check(charging(Algorithm::TokenBucket), 0, true),
            check(charging(Algorithm::FixedWindow), 2, true),
            check(charging(Algorithm::SlidingWindow), 0, false),
        ];
        let wants = [
            Want::nothing(),
            Want::nothing(),
            Want::nothing(),
            Want::nothing(),
        ];
        let mut cmd = Cmd::new();
        general_args(&mut cmd, TimeSource::Caller, &checks, &wants, 7_000_999);
        // 100/s, burst 10: a token is 10,000, the capacity 100,000, and the ceiling ten
        // seconds' refill (1,000 tokens) more: 10,100,000, in the lease's field.
        let charge = ["T", "3", "e", "0", "10000", "1", "100000", "1", "10100000"];
        let refund_of_nothing = ["T", "-0", "e", "0", "10000", "1", "100000", "1", "10100000"];
        let window_refund = ["W", "-2", "e", "0", "100", "1", "0", "0", "0"];
        let sliding_check = ["S", "0", "e", "0", "100", "1000000", "0", "0", "0"];
        let expected = [
            &["7000", "4"][..],
            &charge,
            &refund_of_nothing,
            &window_refund,
            &sliding_check,
        ]
        .concat();
        assert_eq!(args(&cmd), expected);
        let bucket = BucketCheck::of(&checks[1]).expect("a bucket");
        assert!(bucket.refund && bucket.careful() && bucket.lands());
        let plain = BucketCheck::of(&check(limit(100, Unit::Second, 10), 3, false));
        assert!(plain.is_some_and(|b| !b.careful() && !b.lands()));
        // A check of nothing on a limit that charges is decided with care, but lands nothing.
        let nothing = BucketCheck::of(&check(charging(Algorithm::TokenBucket), 0, false));
        assert!(nothing.is_some_and(|b| b.careful() && !b.lands()));
        // A bucket that never refills records nothing, charge or refund.
        let never = Limit {
            requests_per_unit: 0,
            ..charging(Algorithm::TokenBucket)
        };
        assert!(BucketCheck::of(&check(never, 5, true)).is_some_and(|b| !b.lands()));
    }

    #[test]
    fn a_charge_ceiling_stays_below_two_to_the_53_and_owes_whole_tokens() {
        let charging = |rpu, unit, burst| Limit {
            charge: true,
            ..limit(rpu, unit, burst)
        };
        for l in [
            charging(u32::MAX, Unit::Year, u32::MAX),
            charging(999_999, Unit::Year, 999_999),
            charging(7, Unit::Day, u32::MAX),
            charging(u32::MAX, Unit::Week, 1),
            charging(10_000, Unit::Minute, 10_000),
        ] {
            let s = Scale::of(&l);
            assert!(s.ceiling < EXACT, "{l:?} → {s:?}");
            // The ceiling is the capacity plus ten periods' refill, exactly.
            let periods = u128::from(DEBT_PERIODS) * u128::from(l.requests_per_unit);
            assert_eq!(
                u128::from(s.ceiling),
                u128::from(s.cap) + periods * u128::from(s.token),
                "{l:?}"
            );
            assert_eq!(
                u128::from(s.token) * s.debt_nanos,
                u128::from(l.unit.nanos()),
                "{l:?}"
            );
        }
        // Without the ceiling, a year's burst of u32::MAX would fit at a finer quantum
        // than the ceiling does.
        let big = charging(u32::MAX, Unit::Year, u32::MAX);
        assert!(Scale::of(&big).q > Scale::of(&limit(u32::MAX, Unit::Year, u32::MAX)).q);
        let s = Scale::of(&charging(10_000, Unit::Minute, 10_000));
        assert_eq!(
            (s.token, s.cap, s.ceiling),
            (6_000, 60_000_000, 660_000_000)
        );
        assert_eq!(s.owed(s.cap), 0);
        assert_eq!(s.owed(s.cap + 1), 1);
        assert_eq!(s.owed(s.cap + 6_000 * 7), 7);
        // A limit that does not charge: the ceiling is the capacity.
        let s = Scale::of(&limit(10_000, Unit::Minute, 10_000));
        assert_eq!(s.ceiling, s.cap);
    }
}

//! The quota a rule hands out to the Envoys that report a bucket matching it, as a whole
//! (before it is split among them): Envoy's `RateLimitStrategy`.
//!
//! - unlimited, `shadow_mode` and `quota_mode` rules: `ALLOW_ALL` (shadow traffic is still
//!   counted from the reports);
//! - a limit of `requests_per_unit: 0`: `DENY_ALL`;
//! - otherwise a token bucket at the rate of the rule's tightest limit (the lowest rate, for
//!   a `rate_limits` list; a fixed or sliding window's rate too), holding its burst (a
//!   window's whole limit, which it can admit at once).
//!
//! Envoy 1.40 reads a token bucket as a rate, `tokens_per_fill` over `fill_interval` taken
//! in whole seconds (its `AtomicTokenBucketImpl` refills continuously, capped at
//! `max_tokens`); an interval under a second divides by zero and the bucket is not
//! enforced. So the rate is written as whole tokens per whole seconds, in lowest terms:
//! 100 per second is 100 tokens every second, 5 per minute 1 every 12 seconds, 7 per
//! minute 7 every minute; `max_tokens` is the burst, whatever the fill.

use crate::rules::{Algorithm, Limit, Mode, Rule};

/// What Envoy is told to enforce for a bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    /// `blanket_rule: ALLOW_ALL`.
    AllowAll,
    /// `blanket_rule: DENY_ALL`.
    DenyAll,
    /// `token_bucket`.
    TokenBucket {
        /// `max_tokens`: what the bucket holds when full.
        max_tokens: u32,
        /// `tokens_per_fill`.
        tokens_per_fill: u32,
        /// `fill_interval`, in whole seconds.
        fill_interval_seconds: u64,
    },
}

impl Quota {
    /// `(max_tokens, tokens_per_fill, fill_interval_seconds)` of a token bucket; `None` for
    /// a blanket rule.
    pub fn token_bucket(self) -> Option<(u32, u32, u64)> {
        match self {
            Quota::TokenBucket {
                max_tokens,
                tokens_per_fill,
                fill_interval_seconds,
            } => Some((max_tokens, tokens_per_fill, fill_interval_seconds)),
            Quota::AllowAll | Quota::DenyAll => None,
        }
    }

    /// A token bucket whose burst is too small to give each of `envoys` one token: its
    /// tokens are handed out in turns (see [`crate::rlqs::share`]).
    pub fn is_crowded(self, envoys: usize) -> bool {
        self.token_bucket()
            .is_some_and(|(max_tokens, _, _)| (max_tokens as usize) < envoys)
    }
}

/// The quota of `rule` as a whole, its limits' unset algorithms being `default`.
pub fn quota_of(rule: &Rule, default: Algorithm) -> Quota {
    if rule.is_unlimited() || rule.mode != Mode::Enforce {
        return Quota::AllowAll;
    }
    let limits = rule.limits.iter().map(|l| l.resolve(default));
    // The lowest rate: a / p < b / q compared as a × q < b × p (both below 2^64).
    let Some(tightest) = limits.min_by(|a, b| {
        (u64::from(a.requests_per_unit) * b.period_seconds())
            .cmp(&(u64::from(b.requests_per_unit) * a.period_seconds()))
    }) else {
        return Quota::AllowAll;
    };
    token_bucket(&tightest)
}

/// The token bucket of `limit` (see the module docs); `DENY_ALL` for a limit of 0.
fn token_bucket(limit: &Limit) -> Quota {
    let rate = limit.requests_per_unit;
    if rate == 0 {
        return Quota::DenyAll;
    }
    let period = limit.period_seconds().max(1);
    let common = gcd(u64::from(rate), period);
    // `rate / common` divides `rate`, a u32.
    let tokens_per_fill = (u64::from(rate) / common) as u32;
    let burst = match limit.algorithm {
        Algorithm::TokenBucket => limit.burst,
        Algorithm::FixedWindow | Algorithm::SlidingWindow => rate,
    };
    Quota::TokenBucket {
        max_tokens: burst.max(1),
        tokens_per_fill,
        fill_interval_seconds: period / common,
    }
}

fn gcd(mut a: u64, mut b: u64) -> u64 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{ConfigLimit, Unit};

    fn limit(
        rate: u32,
        unit: Unit,
        multiplier: u32,
        burst: u32,
        algorithm: Algorithm,
    ) -> ConfigLimit {
        ConfigLimit {
            charge: false,
            requests_per_unit: rate,
            unit,
            multiplier,
            burst,
            algorithm: Some(algorithm),
            name: String::new(),
            key_part: String::new(),
        }
    }

    fn rule(limits: Vec<ConfigLimit>, mode: Mode) -> Rule {
        Rule {
            full_key: "edge.k".into(),
            name: String::new(),
            limits,
            replaces: Vec::new(),
            mode,
            detailed_metric: false,
            value_to_metric: 0,
            ordinal: 0,
            metadata: None,
            holds: None,
        }
    }

    fn bucket(max_tokens: u32, tokens_per_fill: u32, fill_interval_seconds: u64) -> Quota {
        Quota::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
        }
    }

    fn of(limits: Vec<ConfigLimit>) -> Quota {
        quota_of(&rule(limits, Mode::Enforce), Algorithm::TokenBucket)
    }

    #[test]
    fn the_trading_limits_as_whole_second_fills() {
        use Algorithm::TokenBucket as Tb;
        // submit_order 100/s burst 10.
        assert_eq!(
            of(vec![limit(100, Unit::Second, 1, 10, Tb)]),
            bucket(10, 100, 1)
        );
        // backtesting.run 5/min burst 1: one every 12 s.
        assert_eq!(of(vec![limit(5, Unit::Minute, 1, 1, Tb)]), bucket(1, 1, 12));
        // dashboard trading 200/min (a fixed window): 10 every 3 s, the window's 200 at once.
        assert_eq!(
            of(vec![limit(
                200,
                Unit::Minute,
                1,
                200,
                Algorithm::FixedWindow
            )]),
            bucket(200, 10, 3)
        );
        // 7 per 2 hours: no common divisor, one fill per period.
        assert_eq!(of(vec![limit(7, Unit::Hour, 2, 7, Tb)]), bucket(7, 7, 7200));
    }

    #[test]
    fn a_list_hands_out_its_tightest_limit() {
        use Algorithm::TokenBucket as Tb;
        let list = vec![
            limit(100, Unit::Second, 1, 10, Tb),
            limit(20_000, Unit::Day, 1, 20_000, Algorithm::SlidingWindow),
        ];
        // 20,000 a day is 25 every 108 s.
        assert_eq!(of(list), bucket(20_000, 25, 108));
    }

    #[test]
    fn blanket_rules() {
        use Algorithm::TokenBucket as Tb;
        assert_eq!(of(vec![limit(0, Unit::Second, 1, 0, Tb)]), Quota::DenyAll);
        assert_eq!(
            of(vec![
                limit(5, Unit::Second, 1, 5, Tb),
                limit(0, Unit::Day, 1, 0, Tb)
            ]),
            Quota::DenyAll
        );
        assert_eq!(of(Vec::new()), Quota::AllowAll);
        for mode in [Mode::Shadow, Mode::Quota, Mode::ShadowQuota] {
            let shadowed = rule(vec![limit(1, Unit::Second, 1, 1, Tb)], mode);
            assert_eq!(quota_of(&shadowed, Algorithm::TokenBucket), Quota::AllowAll);
        }
    }
}

//! A rule's quota split among the Envoys that report one bucket, so that together they stay
//! within the rule's rate and burst.
//!
//! - **Rate**: max-min fair on demand. Every Envoy first gets a floor (a tenth of an equal
//!   share, at least one token per interval), so a quiet one is never starved; the rest is
//!   water-filled: an Envoy asking for less than an equal share of what is left gets what it
//!   asks plus [`HEADROOM`], the others share the remainder equally. An Envoy whose demand
//!   is not known yet (its first report) asks for everything.
//! - **Burst**: in proportion to the rate shares, each Envoy holding at least one token. A
//!   burst smaller than the number of Envoys is handed out in turns of [`TURN_SECONDS`]:
//!   each turn its tokens go to the Envoys that rank first for it ([`rank`], a hash of the
//!   Envoy's name and the turn's number, the same on every replica), those with demand
//!   before idle ones; the others are refused (`DENY_ALL`) until their turn, so the bound
//!   holds and no Envoy is shut out for longer than a few turns.
//! - **Whole seconds**: Envoy reads `fill_interval` in whole seconds and refills
//!   continuously at `tokens_per_fill` over it. Every share of a bucket uses the same
//!   interval, a multiple of the rule's chosen so that the interval holds at least
//!   [`GRAIN`] tokens: a share is a whole number of them, and any change of rate changes
//!   `tokens_per_fill` (Envoy 1.40 compares only an interval's nanoseconds when it decides
//!   whether an assignment is new, so a change of seconds alone would be ignored).
//! - **Hysteresis** ([`settle`]): a share that would grow by less than [`GROWTH`] keeps its
//!   current size, and one that must shrink shrinks at once; so re-assignments, each of
//!   which gives the Envoy a full bucket, stay rare, and the sum never passes the bound.

use super::quota::Quota;

/// Tokens an interval holds at least: the resolution of a share.
pub const GRAIN: u32 = 1000;

/// What an Envoy asking for less than an equal share gets beyond its demand: a half more.
pub const HEADROOM: f64 = 0.5;

/// How long the tokens of a burst too small to split stay with the same Envoys.
pub const TURN_SECONDS: u64 = 5;

/// Where the Envoy named `name` ranks in turn number `turn` (lower goes first): FNV-1a over
/// both, so that every replica ranks the Envoys of a bucket alike, whatever the order in
/// which it knows them.
pub fn rank(name: &str, turn: u64) -> u64 {
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in turn.to_le_bytes().iter().chain(name.as_bytes()) {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(PRIME);
    }
    hash
}

/// A share grows only by more than this fraction of itself.
pub const GROWTH: f64 = 0.1;

/// One Envoy's share of a bucket's token bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Share {
    /// `max_tokens`.
    pub max_tokens: u32,
    /// `tokens_per_fill`.
    pub tokens_per_fill: u32,
    /// `fill_interval` in whole seconds, the same for every share of a bucket.
    pub fill_interval_seconds: u64,
}

impl Share {
    /// Requests per second the share allows.
    pub fn per_second(&self) -> f64 {
        f64::from(self.tokens_per_fill) / self.fill_interval_seconds.max(1) as f64
    }
}

/// The shares of `quota` (a token bucket) for Envoys whose demands, in requests per second,
/// are `demands` (`None`: not known yet), in the same order; `ranks` (see [`rank`]) say
/// which Envoys hold a burst too small to give each one token, in this turn.
pub fn split(quota: Quota, demands: &[Option<f64>], ranks: &[u64]) -> Vec<Share> {
    let Some((max_tokens, tokens_per_fill, fill_interval_seconds)) = quota.token_bucket() else {
        return Vec::new();
    };
    let n = demands.len();
    if n == 0 {
        return Vec::new();
    }
    let (total, interval) = scaled(tokens_per_fill, fill_interval_seconds);
    // Demand in tokens per interval, with headroom.
    let wants: Vec<f64> = demands
        .iter()
        .map(|d| match d {
            Some(rps) => rps * (1.0 + HEADROOM) * interval as f64,
            None => f64::INFINITY,
        })
        .collect();
    let rates = fair(total, &wants);
    let bursts = bursts(max_tokens, &rates, &wants, ranks);
    rates
        .into_iter()
        .zip(bursts)
        .map(|(rate, burst)| Share {
            max_tokens: burst,
            tokens_per_fill: if burst == 0 { 0 } else { rate },
            fill_interval_seconds: interval,
        })
        .collect()
}

/// A rate of `tokens_per_fill` per `fill_interval_seconds` as the shares write it: tokens
/// per an interval long enough to hold at least [`GRAIN`] of them.
fn scaled(tokens_per_fill: u32, fill_interval_seconds: u64) -> (u32, u64) {
    let scale = GRAIN.div_ceil(tokens_per_fill.max(1));
    (
        tokens_per_fill.saturating_mul(scale),
        fill_interval_seconds.saturating_mul(u64::from(scale)),
    )
}

/// The rule's whole rate as the shares write it (`tokens_per_fill` over their common
/// interval) and its `max_tokens`; `None` for a blanket quota.
pub fn totals(quota: Quota) -> Option<(u32, u32)> {
    let (max_tokens, tokens_per_fill, fill_interval_seconds) = quota.token_bucket()?;
    Some((scaled(tokens_per_fill, fill_interval_seconds).0, max_tokens))
}

/// `total` tokens split max-min fairly over `wants`, each at least a floor; the sum is at
/// most `total`.
fn fair(total: u32, wants: &[f64]) -> Vec<u32> {
    let n = wants.len() as u32;
    let floor = (total / n / 10).max(1).min(total / n);
    let mut given: Vec<u32> = vec![floor; wants.len()];
    let mut left = total - floor * n;
    // Water-filling over the demands beyond the floor, smallest first.
    let mut order: Vec<usize> = (0..wants.len()).collect();
    order.sort_by(|&a, &b| wants[a].total_cmp(&wants[b]));
    for (done, &i) in order.iter().enumerate() {
        let rest = (wants.len() - done) as u32;
        let equal = left / rest;
        let beyond = (wants[i] - f64::from(floor)).max(0.0);
        let take = if beyond < f64::from(equal) {
            beyond.ceil() as u32
        } else {
            equal
        };
        given[i] += take;
        left -= take;
    }
    given
}

/// `max_tokens` split in proportion to `rates`: each at least one token when there are
/// enough, else one token each for those that want some and rank first (`ranks`, missing
/// ones rank last); the sum is at most `max_tokens`.
fn bursts(max_tokens: u32, rates: &[u32], wants: &[f64], ranks: &[u64]) -> Vec<u32> {
    let n = rates.len() as u32;
    if max_tokens < n {
        let idle = |i: usize| wants[i] <= 0.0;
        let rank = |i: usize| ranks.get(i).copied().unwrap_or(u64::MAX);
        let mut order: Vec<usize> = (0..rates.len()).collect();
        order.sort_by_key(|&i| (idle(i), rank(i), i));
        let mut out = vec![0; rates.len()];
        for &i in order.iter().take(max_tokens as usize) {
            out[i] = 1;
        }
        return out;
    }
    let spare = u64::from(max_tokens - n);
    let sum: u64 = rates.iter().map(|&r| u64::from(r)).sum::<u64>().max(1);
    rates
        .iter()
        .map(|&r| 1 + (spare * u64::from(r) / sum) as u32)
        .collect()
}

/// The share to assign, given the one assigned now (`current`) and the newly computed one
/// (`fresh`): a shrink at once, a growth only beyond [`GROWTH`].
pub fn settle(current: Option<Share>, fresh: Share) -> Share {
    let Some(current) = current else {
        return fresh;
    };
    if current.fill_interval_seconds != fresh.fill_interval_seconds {
        return fresh;
    }
    let small_growth = |now: u32, new: u32| {
        new >= now && f64::from(new) <= f64::from(now) * (1.0 + GROWTH) && now > 0
    };
    if small_growth(current.tokens_per_fill, fresh.tokens_per_fill)
        && small_growth(current.max_tokens, fresh.max_tokens)
    {
        current
    } else {
        fresh
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quota(max_tokens: u32, tokens_per_fill: u32, fill_interval_seconds: u64) -> Quota {
        Quota::TokenBucket {
            max_tokens,
            tokens_per_fill,
            fill_interval_seconds,
        }
    }

    fn within_bound(q: Quota, shares: &[Share]) {
        let (max_tokens, tokens_per_fill, fill_interval_seconds) =
            q.token_bucket().expect("a token bucket");
        let rate: f64 = shares.iter().map(Share::per_second).sum();
        assert!(
            rate <= f64::from(tokens_per_fill) / fill_interval_seconds as f64 + 1e-9,
            "{shares:?}"
        );
        let burst: u32 = shares.iter().map(|s| s.max_tokens).sum();
        assert!(burst <= max_tokens, "{shares:?}");
    }

    #[test]
    fn one_envoy_gets_the_whole_quota() {
        let q = quota(10, 100, 1);
        let shares = split(q, &[None], &[]);
        assert_eq!(
            shares,
            [Share {
                max_tokens: 10,
                tokens_per_fill: 1000,
                fill_interval_seconds: 10
            }]
        );
        assert!((shares[0].per_second() - 100.0).abs() < 1e-9);
    }

    #[test]
    fn a_quiet_envoy_gets_its_demand_and_headroom_the_busy_one_the_rest() {
        // 20/s burst 20: one Envoy saturated (asks 200/s), one sending 2/s.
        let q = quota(20, 20, 1);
        let shares = split(q, &[Some(200.0), Some(2.0)], &[]);
        within_bound(q, &shares);
        assert!((shares[1].per_second() - 3.0).abs() < 0.05, "{shares:?}");
        assert!(shares[0].per_second() > 16.9, "{shares:?}");
        assert!(shares.iter().all(|s| s.max_tokens >= 1));
    }

    #[test]
    fn unknown_and_equal_demands_share_equally_and_idle_ones_keep_a_floor() {
        let q = quota(20, 20, 1);
        let shares = split(q, &[None, None], &[]);
        within_bound(q, &shares);
        assert_eq!(shares[0], shares[1]);
        assert!((shares[0].per_second() - 10.0).abs() < 1e-9);
        let shares = split(q, &[Some(0.0), Some(500.0), Some(500.0)], &[]);
        within_bound(q, &shares);
        assert!(
            shares[0].per_second() > 0.0 && shares[0].max_tokens >= 1,
            "{shares:?}"
        );
    }

    #[test]
    fn a_burst_smaller_than_the_envoys_is_handed_out_in_turns() {
        // 5 per minute, burst 1, two Envoys asking and an idle one: one token between them.
        let q = quota(1, 1, 12);
        let demands = [Some(0.1), Some(3.0), Some(0.0)];
        let mut held = [0; 3];
        for turn in 0..40 {
            let ranks: Vec<u64> = ["a/1", "a/2", "b/1"]
                .iter()
                .map(|n| rank(n, turn))
                .collect();
            let shares = split(q, &demands, &ranks);
            within_bound(q, &shares);
            for (i, share) in shares.iter().enumerate() {
                assert_eq!(
                    share.tokens_per_fill == 0,
                    share.max_tokens == 0,
                    "{shares:?}"
                );
                held[i] += share.max_tokens;
            }
        }
        assert_eq!(held[2], 0, "the idle Envoy takes no turn");
        assert!(held[0] >= 10 && held[1] >= 10, "both take turns: {held:?}");
    }

    #[test]
    fn ranks_are_the_same_whoever_computes_them_and_change_with_the_turn() {
        assert_eq!(rank("3f.12/7", 9), rank("3f.12/7", 9));
        assert_ne!(rank("3f.12/7", 9), rank("3f.12/7", 10));
        assert_ne!(rank("3f.12/7", 9), rank("3f.12/8", 9));
    }

    #[test]
    fn many_envoys_never_pass_the_bound() {
        for n in [1usize, 2, 3, 7, 50, 1000] {
            for q in [
                quota(20, 20, 1),
                quota(1, 1, 12),
                quota(10, 100, 1),
                quota(20_000, 25, 108),
            ] {
                let demands: Vec<Option<f64>> = (0..n)
                    .map(|i| match i % 3 {
                        0 => None,
                        1 => Some(i as f64),
                        _ => Some(0.0),
                    })
                    .collect();
                within_bound(q, &split(q, &demands, &[]));
            }
        }
    }

    #[test]
    fn small_growth_keeps_the_share_any_shrink_applies() {
        let now = Share {
            max_tokens: 10,
            tokens_per_fill: 1000,
            fill_interval_seconds: 10,
        };
        let grown = |tokens_per_fill, max_tokens| Share {
            tokens_per_fill,
            max_tokens,
            ..now
        };
        assert_eq!(settle(Some(now), grown(1050, 10)), now);
        assert_eq!(settle(Some(now), grown(1200, 10)), grown(1200, 10));
        assert_eq!(settle(Some(now), grown(990, 10)), grown(990, 10));
        assert_eq!(settle(Some(now), grown(1000, 9)), grown(1000, 9));
        assert_eq!(settle(None, now), now);
    }
}

//! The over-limit cache: when Redis says a bucket cannot pass, its state is kept as a
//! snapshot taken at the moment the request was *sent*, and later requests run
//! [`limiter::step`] on it. Redis' state can only have less refill than the snapshot assumes
//! and more consumption (other replicas), so a request the snapshot refuses Redis would
//! refuse too; one it would admit goes to Redis.
//!
//! A sliding window is kept only while it refuses even one hit, and only until one hit
//! could pass: until then no replica can add to its counts, so the snapshot is exactly what
//! Redis holds. Every limit of a descriptor has a bucket key of its own, so each snapshot
//! lasts as long as its own limit refuses (a daily cap's snapshot ends when the day rolls,
//! whatever a per-second limit of the same descriptor says), and a request is refused here
//! only when every one of its checks is.
//!
//! Times are taken as the script reads the caller's clock ([`TimeSource::Caller`]), in
//! whole microseconds (whole quanta for token buckets): a snapshot never lasts past the
//! instant Redis would admit, not even by a fraction of a microsecond.
//!
//! [`TimeSource::Caller`]: super::TimeSource::Caller

use std::sync::Arc;
use std::time::Duration;

use foldhash::fast::RandomState;

use super::reply::{After, Outcome};
use super::script_args::Scale;
use crate::clock::{NANOS_PER_SEC, Nanos};
use crate::limiter::{self, Report, State};
use crate::rules::Limit;
use crate::store::{Check, Reports};

/// Over-limit snapshots by bucket key (the bucket's text, as the embedded store keys it).
pub(super) struct OverLimitCache {
    /// The snapshots, each expiring when its bucket may pass again (or at `max_ttl`).
    entries: moka::sync::Cache<Arc<str>, Blocked, RandomState>,
    /// Longest a snapshot answers for its bucket (`RedisOptions::cache_ttl`): a bound on
    /// how long a replica trusts a state other replicas may have changed.
    max_ttl: Duration,
}

/// An over-limit answer kept locally.
#[derive(Debug, Clone)]
enum Blocked {
    /// A token bucket's state as of the moment the deciding request was sent.
    Bucket {
        /// The limit the state was decided under: another limit (a reload) ignores it.
        limit: Limit,
        /// The bucket's debt at the moment the request was sent.
        state: State,
        /// How long the snapshot is kept: until one hit may pass, at most `max_ttl`.
        ttl: Duration,
    },
    /// A full fixed window: `count` hits until `until` (local clock).
    Window {
        /// The limit the window was counted under: another limit (a reload) ignores it.
        limit: Limit,
        /// Hits counted in the window when Redis answered.
        count: u64,
        /// When the window ends, on the local clock.
        until: Nanos,
        /// How long the snapshot is kept: until the window ends, at most `max_ttl`.
        ttl: Duration,
    },
    /// A sliding window refusing even one hit: frozen (nothing admitted, so nothing
    /// counted) until `until` (local clock), when one hit could pass.
    Sliding {
        /// The limit the window was counted under: another limit (a reload) ignores it.
        limit: Limit,
        /// Hits counted in the window when Redis answered.
        count: u64,
        /// When one hit could pass, on the local clock.
        until: Nanos,
        /// How long the snapshot is kept: until `until`, at most `max_ttl`.
        ttl: Duration,
    },
}

impl OverLimitCache {
    /// An empty cache of at most `capacity` snapshots, each kept at most `max_ttl`.
    pub(super) fn new(capacity: u64, max_ttl: Duration) -> Self {
        Self {
            entries: moka::sync::Cache::builder()
                .max_capacity(capacity)
                .expire_after(BlockedExpiry)
                .build_with_hasher(RandomState::default()),
            max_ttl,
        }
    }

    /// The reports for `checks` at `now` when a snapshot is sure that every one of them
    /// is over its limit; `None` as soon as one may pass.
    pub(super) fn refuse(&self, checks: &[Check<'_>], now: Nanos) -> Option<Reports> {
        checks
            .iter()
            .map(|check| {
                self.entries
                    .get(check.key.as_str())
                    .and_then(|b| b.refuses(check, now))
            })
            .collect()
    }

    /// Keeps what Redis' `outcome` for `check` (sent at `now`) says of the future: an
    /// over-limit bucket stays over until it refills, a full fixed window until it ends, a
    /// sliding window refusing one hit until one could pass. A bucket Redis did not refuse
    /// is forgotten.
    pub(super) fn learn(&self, check: &Check<'_>, outcome: &Outcome, now: Nanos) {
        if !outcome.over {
            // Redis did not refuse: a snapshot kept from before may have missed hits taken
            // since (a check of more hits refused, then one that passed), so its reports
            // would show room and waits the bucket no longer has.
            self.entries.invalidate(check.key.as_str());
            return;
        }
        let limit = check.limit;
        let blocked = match outcome.after {
            After::TokenBucket { debt, .. } => {
                let scale = Scale::of(&limit);
                let state = State::TokenBucket {
                    debt: u128::from(debt) * scale.debt_nanos,
                    // The script computed the debt as of the quantum it read.
                    at: truncated(now, scale.q),
                    period: limiter::period_seconds(limit.period_nanos()),
                };
                let one = limiter::step(Some(&state), &limit, 1, now);
                let ttl = if limit.requests_per_unit == 0 {
                    self.max_ttl
                } else {
                    Duration::from_nanos(one.unconsumed().1.reset).min(self.max_ttl)
                };
                if !one.over() || ttl.is_zero() {
                    return;
                }
                Blocked::Bucket { limit, state, ttl }
            }
            // Only once over: from then on every hit, and every check, is over until the
            // window ends (at the limit exactly, a check still passes).
            After::FixedWindow { count, ends_in_us } if ends_in_us > 0 => Blocked::Window {
                limit,
                count,
                until: after_us(now, ends_in_us),
                ttl: Duration::from_micros(ends_in_us).min(self.max_ttl),
            },
            After::FixedWindow { .. } => return,
            After::SlidingWindow {
                count,
                one_passes_in_us,
            } => match self.sliding(limit, count, one_passes_in_us, now) {
                Some(blocked) => blocked,
                None => return,
            },
        };
        self.entries.insert(check.key.as_str().into(), blocked);
    }

    /// The snapshot of a sliding window that Redis says refuses one hit for
    /// `one_passes_in_us` (0: one hit could pass, nothing to keep).
    fn sliding(
        &self,
        limit: Limit,
        count: u64,
        one_passes_in_us: u64,
        now: Nanos,
    ) -> Option<Blocked> {
        if one_passes_in_us == 0 {
            return None;
        }
        let ttl = if limit.requests_per_unit == 0 {
            self.max_ttl // never passes
        } else {
            Duration::from_micros(one_passes_in_us).min(self.max_ttl)
        };
        Some(Blocked::Sliding {
            limit,
            count,
            until: after_us(now, one_passes_in_us),
            ttl,
        })
    }

    /// Expiry and eviction upkeep; see [`super::RedisStore::maintain`].
    pub(super) fn run_pending_tasks(&self) {
        self.entries.run_pending_tasks();
    }
}

impl Blocked {
    /// The over-limit report for `check` at `now`, if this snapshot is sure of it.
    fn refuses(&self, check: &Check<'_>, now: Nanos) -> Option<Report> {
        match self {
            Blocked::Bucket { limit, state, .. } if *limit == check.limit => {
                let step = limiter::step(Some(state), limit, check.hits, now);
                step.over().then(|| Report {
                    cached: true,
                    ..step.unconsumed().1
                })
            }
            Blocked::Window {
                limit,
                count,
                until,
                ..
            } if *limit == check.limit
                && now < *until
                && count.saturating_add(check.hits) > u64::from(limit.requests_per_unit) =>
            {
                Some(Report {
                    over: true,
                    remaining: 0,
                    reset: (until - now).div_ceil(NANOS_PER_SEC) * NANOS_PER_SEC,
                    count: *count,
                    cached: true,
                })
            }
            Blocked::Sliding {
                limit,
                count,
                until,
                ..
            } if *limit == check.limit => sliding_refusal(limit, *count, *until, check, now),
            _ => None,
        }
    }

    /// How long the snapshot is kept.
    fn ttl(&self) -> Duration {
        match self {
            Blocked::Bucket { ttl, .. }
            | Blocked::Window { ttl, .. }
            | Blocked::Sliding { ttl, .. } => *ttl,
        }
    }
}

/// The report of a sliding window frozen with `count` hits until `until` for `check` at
/// `now`: what Redis would say, if it is sure. Only for checks of at most one hit: the
/// wait of more depends on how the hits spread over the sub-windows, which the snapshot
/// does not keep, so those go to Redis.
fn sliding_refusal(
    limit: &Limit,
    count: u64,
    until: Nanos,
    check: &Check<'_>,
    now: Nanos,
) -> Option<Report> {
    let never = limit.requests_per_unit == 0;
    if check.hits > 1 || !(never || now < until) {
        return None;
    }
    Some(Report {
        over: true,
        remaining: u32::try_from(u64::from(limit.requests_per_unit).saturating_sub(count))
            .unwrap_or(u32::MAX),
        reset: if never {
            limit.period_nanos()
        } else {
            until - truncated(now, 1)
        },
        count,
        cached: true,
    })
}

/// `now` as the script reads the caller's clock in quanta of `q` microseconds: rounded
/// down to a whole quantum.
fn truncated(now: Nanos, q: u64) -> Nanos {
    let quantum = q.saturating_mul(1000).max(1);
    now - now % quantum
}

/// The instant `us` microseconds after the script's reading of `now` (in whole
/// microseconds), on the local clock.
fn after_us(now: Nanos, us: u64) -> Nanos {
    truncated(now, 1).saturating_add(us.saturating_mul(1000))
}

/// Expires each snapshot after its own [`Blocked::ttl`].
struct BlockedExpiry;

impl moka::Expiry<Arc<str>, Blocked> for BlockedExpiry {
    fn expire_after_create(
        &self,
        _: &Arc<str>,
        value: &Blocked,
        _: std::time::Instant,
    ) -> Option<Duration> {
        Some(value.ttl())
    }

    fn expire_after_update(
        &self,
        _: &Arc<str>,
        value: &Blocked,
        _: std::time::Instant,
        _: Option<Duration>,
    ) -> Option<Duration> {
        Some(value.ttl())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rules::{Algorithm, Mode, Unit};

    const T0: Nanos = 1_767_225_600 * NANOS_PER_SEC;
    const MS: Nanos = 1_000_000;

    fn window(rpu: u32) -> Limit {
        Limit {
            requests_per_unit: rpu,
            unit: Unit::Second,
            multiplier: 1,
            burst: rpu,
            algorithm: Algorithm::SlidingWindow,
        }
    }

    fn check(limit: Limit, hits: u64) -> Check<'static> {
        Check {
            key: "4:test1:k".into(),
            limit,
            hits,
            mode: Mode::Enforce,
            descriptor: 0,
        }
    }

    /// What Redis says of a sliding window with `count` hits, over, one hit passing in
    /// `one_ms`.
    fn over(count: u64, one_ms: u64) -> Outcome {
        Outcome {
            over: true,
            remaining: 0,
            reset: one_ms * MS,
            after: After::SlidingWindow {
                count,
                one_passes_in_us: one_ms * 1000,
            },
        }
    }

    fn cache() -> OverLimitCache {
        OverLimitCache::new(100, Duration::from_secs(60))
    }

    #[test]
    fn a_window_refusing_one_hit_is_refused_here_until_one_could_pass() {
        let (cache, limit) = (cache(), window(3));
        // Sent at T0 + 0.5 µs: the script read T0, so one hit passes at T0 + 300 ms.
        cache.learn(&check(limit, 1), &over(3, 300), T0 + 500);
        let refused = cache
            .refuse(&[check(limit, 1)], T0 + 100 * MS)
            .expect("cached");
        assert_eq!(
            refused[0],
            Report {
                over: true,
                remaining: 0,
                reset: 200 * MS,
                count: 3,
                cached: true
            }
        );
        assert!(
            cache
                .refuse(&[check(limit, 0)], T0 + 300 * MS - 1)
                .is_some()
        );
        assert!(cache.refuse(&[check(limit, 1)], T0 + 300 * MS).is_none());
        // More hits wait for counts the snapshot does not keep: Redis answers those.
        assert!(cache.refuse(&[check(limit, 2)], T0 + 100 * MS).is_none());
        // Another limit on the same key (a reload) is not this snapshot's.
        assert!(
            cache
                .refuse(&[check(window(4), 1)], T0 + 100 * MS)
                .is_none()
        );
    }

    #[test]
    fn a_window_with_room_for_one_hit_is_not_kept() {
        let cache = cache();
        let limit = window(3);
        // Over for 3 hits with 2 counted: one hit could pass now.
        cache.learn(&check(limit, 3), &over(2, 0), T0);
        assert!(cache.refuse(&[check(limit, 1)], T0).is_none());
    }

    #[test]
    fn a_window_of_zero_refuses_for_a_period_each_time() {
        let cache = cache();
        let limit = window(0);
        cache.learn(&check(limit, 1), &over(0, 1000), T0);
        let refused = cache
            .refuse(&[check(limit, 1)], T0 + 5_000 * MS)
            .expect("cached");
        assert_eq!((refused[0].over, refused[0].reset), (true, NANOS_PER_SEC));
    }

    #[test]
    fn a_bucket_redis_did_not_refuse_is_forgotten() {
        let (cache, limit) = (cache(), window(3));
        cache.learn(&check(limit, 1), &over(3, 300), T0);
        let passed = Outcome {
            over: false,
            remaining: 2,
            reset: 0,
            after: After::SlidingWindow {
                count: 1,
                one_passes_in_us: 0,
            },
        };
        cache.learn(&check(limit, 1), &passed, T0 + 10 * MS);
        assert!(cache.refuse(&[check(limit, 1)], T0 + 20 * MS).is_none());
    }
}

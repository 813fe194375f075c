//! The waits between reconnections to a config source (PostgreSQL, the xDS control
//! plane): exponential (the first [`Backoff::initial`], doubling up to [`Backoff::max`]),
//! each spread at random by ± [`Backoff::random_factor`] of itself when
//! [`Backoff::jitter`] is on, so that replicas restarted together do not knock in step
//! (as the Go server's cenkalti/backoff does, so a spread wait may pass `max` by that
//! share).

use std::hash::BuildHasher;
use std::time::Duration;

/// Exponential backoff between reconnections, each wait spread at random.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Backoff {
    /// The first wait.
    pub initial: Duration,
    /// The longest wait.
    pub max: Duration,
    /// Each wait is spread by ± this share of itself, with `jitter`.
    pub random_factor: f64,
    /// Whether waits are spread at all.
    pub jitter: bool,
}

/// The waits of one outage; [`Waits::reset`] after a stream that delivered a response.
#[derive(Debug)]
pub(crate) struct Waits {
    /// The settings.
    backoff: Backoff,
    /// The wait before spreading, for the next reconnection.
    next: Duration,
    /// Randomness for the spread: a hasher with random keys, fed the count of waits.
    random: std::hash::RandomState,
    /// Waits handed out so far, hashed for the spread.
    count: u64,
}

impl Waits {
    /// The waits of `backoff`, starting at its initial one.
    pub(crate) fn new(backoff: Backoff) -> Waits {
        Waits {
            backoff,
            next: backoff.initial,
            random: std::hash::RandomState::new(),
            count: 0,
        }
    }

    /// Back to the initial wait.
    pub(crate) fn reset(&mut self) {
        self.next = self.backoff.initial;
    }

    /// The next wait: the current one spread at random; the one after it is doubled,
    /// up to the maximum.
    pub(crate) fn next_wait(&mut self) -> Duration {
        let base = self.next.min(self.backoff.max);
        self.next = base.saturating_mul(2).min(self.backoff.max);
        self.count += 1;
        if !self.backoff.jitter || self.backoff.random_factor <= 0.0 {
            return base;
        }
        // A uniform share in [0, 1) from the hash's top 53 bits.
        let share = (self.random.hash_one(self.count) >> 11) as f64 / (1u64 << 53) as f64;
        let factor = 1.0 + self.backoff.random_factor * (2.0 * share - 1.0);
        base.mul_f64(factor.max(0.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backoff(jitter: bool) -> Backoff {
        Backoff {
            initial: Duration::from_millis(100),
            max: Duration::from_millis(1000),
            random_factor: 0.5,
            jitter,
        }
    }

    #[test]
    fn doubles_up_to_the_max_and_resets() {
        let mut waits = Waits::new(backoff(false));
        let got: Vec<u64> = (0..6)
            .map(|_| waits.next_wait().as_millis() as u64)
            .collect();
        assert_eq!(got, [100, 200, 400, 800, 1000, 1000]);
        waits.reset();
        assert_eq!(waits.next_wait(), Duration::from_millis(100));
    }

    #[test]
    fn jitter_spreads_within_the_factor() {
        let mut waits = Waits::new(backoff(true));
        let mut seen = std::collections::HashSet::new();
        for _ in 0..50 {
            waits.reset();
            let wait = waits.next_wait();
            assert!(
                (Duration::from_millis(50)..=Duration::from_millis(150)).contains(&wait),
                "{wait:?}"
            );
            seen.insert(wait);
        }
        assert!(seen.len() > 10, "waits are not spread: {seen:?}");
    }
}

//! The waits between reconnections: 100 ms doubling to 5 s, each spread by ±25% so that
//! replicas restarted together do not knock on PostgreSQL's door in step.

use std::hash::BuildHasher;
use std::time::Duration;

/// The first wait.
pub(super) const FIRST: Duration = Duration::from_millis(100);

/// The longest wait.
pub(super) const LONGEST: Duration = Duration::from_secs(5);

/// Exponential backoff with jitter; [`Backoff::reset`] after a connection that worked.
#[derive(Debug)]
pub(super) struct Backoff {
    /// Failed attempts in a row.
    failures: u32,
    /// The jitter's randomness: std's per-process random hash keys.
    random: std::collections::hash_map::RandomState,
}

impl Backoff {
    /// No failure yet.
    pub(super) fn new() -> Backoff {
        Backoff {
            failures: 0,
            random: std::collections::hash_map::RandomState::new(),
        }
    }

    /// Back to the first wait.
    pub(super) fn reset(&mut self) {
        self.failures = 0;
    }

    /// The wait after one more failure.
    pub(super) fn next(&mut self) -> Duration {
        let base = base(self.failures);
        self.failures = self.failures.saturating_add(1);
        // A share from 0.75 to 1.25, from a hash of the attempt under random keys.
        let unit = (self.random.hash_one(self.failures) >> 11) as f64 / (1u64 << 53) as f64;
        base.mul_f64(0.75 + unit / 2.0).min(LONGEST)
    }
}

/// The wait before jitter after `failures` earlier failures in a row.
fn base(failures: u32) -> Duration {
    FIRST.saturating_mul(1 << failures.min(16)).min(LONGEST)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest_and_spread() {
        assert_eq!(base(0), FIRST);
        assert_eq!(base(1), FIRST * 2);
        assert_eq!(base(5), Duration::from_millis(3200));
        assert_eq!(base(6), LONGEST);
        assert_eq!(base(u32::MAX), LONGEST);
        let mut backoff = Backoff::new();
        let waits: Vec<Duration> = (0..40).map(|_| backoff.next()).collect();
        for (i, wait) in waits.iter().enumerate() {
            let base = base(i as u32);
            assert!(
                *wait >= base.mul_f64(0.75) && *wait <= LONGEST,
                "{i}: {wait:?}"
            );
            assert!(*wait <= base.mul_f64(1.25), "{i}: {wait:?}");
        }
        let distinct: std::collections::HashSet<_> = waits[10..].iter().collect();
        assert!(distinct.len() > 1, "no jitter: {waits:?}");
        backoff.reset();
        assert!(backoff.next() <= FIRST.mul_f64(1.25));
    }
}

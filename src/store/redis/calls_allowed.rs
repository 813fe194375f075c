//! How many script calls a node keeps in flight, learnt from the calls themselves: one
//! where Redis is near, as many as hide the round trip where it is far, and fewer again
//! when Redis itself is what makes calls slow.
//!
//! A call has a price of its own in meshlimit and in Redis, which the requests it carries
//! share; so where Redis is near, one call at a time, carrying every request that waited
//! for it, decides the most. Behind a round trip, a request that arrives while the call is
//! away waits for it to come back, then for a call of its own: a further call beside it
//! hides that wait. The node's round trip is read off its fastest call of the last second
//! or two, less its checks' share of Redis' time ([`CHECK_COST`]); past [`NEAR`], one
//! further call is allowed for every [`SPACING`] of it, up to `--redis-calls-in-flight`.
//!
//! Calls that take longer than three times that round trip, on average, queued in Redis:
//! it was busy (with this node's other calls, other clients, or a long script), and more
//! calls would only queue longer. The time past three round trips then stands for
//! [`SPACING`], so a slow or overloaded Redis gets fewer, larger calls, down to one. (Up
//! to three: a large batch's own time, and meshlimit's when its cores are busy, make calls
//! take twice their round trip without any queue in Redis.)
//!
//! Only how many calls start changes: every call is still one atomic script, deciding its
//! requests in order (see [`super::call_queue`]).

use std::time::Duration;

/// A round trip up to this is near: one call at a time. Within it, more calls cost more
/// than they hide: on loopback and behind a zero-delay link 4 or 16 calls in flight cost a
/// fifth of the rate one gives (issue 47's measurements), and with 64 requests in flight
/// behind 0.5 ms, 3.5 calls on average decided 11% less than one, the machine's cores, not
/// the round trip, bounding the rate (benches/redis_latency.sh).
const NEAR: Duration = Duration::from_micros(500);

/// Round trip past [`NEAR`] that each further call in flight takes to pay for itself:
/// behind 1 ms, 7 calls; behind 1.6 ms, 16. Each call costs CPU (meshlimit's, Redis', the
/// network's): with 64 requests in flight behind 1 ms, 8 calls in flight (5 requests a
/// call) decided 7% more than 14 (3 a call), and 5 as much as 8
/// (benches/redis_latency.sh).
const SPACING: Duration = Duration::from_micros(75);

/// Redis' time for one check, about (the decision scripts take a microsecond or less): a
/// call's round trip is its time less this for each check it carried, so that a large
/// batch is not taken for a long round trip.
const CHECK_COST: Duration = Duration::from_micros(1);

/// How long a window of calls lasts; the round trip is the fastest of this window's calls
/// and the last one's, so a slower network shows within two windows, a faster one at once.
const WINDOW: Duration = Duration::from_secs(1);

/// The weight of a call in the running mean of how long calls take past the round trip:
/// 1/16, so that a few slow calls do not change it, and a slow Redis does within tens.
const MEAN_WEIGHT_SHIFT: u32 = 4;

/// What a node has learnt of its calls, and the calls in flight it allows from it.
#[derive(Debug, Clone)]
pub(super) struct CallsAllowed {
    /// The fastest round trip of the last window's calls (`None`: none ended in it).
    last_window: Option<Duration>,
    /// The fastest round trip of this window's calls so far.
    this_window: Option<Duration>,
    /// When this window started, as given to [`CallsAllowed::call_ended`].
    window_start: Duration,
    /// Mean time of a call past the round trip, in nanoseconds, weighted to recent calls.
    mean_past_round_trip: u64,
    /// Calls in flight allowed now, before the node's bound.
    allowed: usize,
}

impl Default for CallsAllowed {
    /// Nothing learnt yet: one call in flight, which the first calls measure.
    fn default() -> Self {
        Self {
            last_window: None,
            this_window: None,
            window_start: Duration::ZERO,
            mean_past_round_trip: 0,
            allowed: 1,
        }
    }
}

impl CallsAllowed {
    /// Calls in flight allowed now, at most `bound` (`--redis-calls-in-flight`).
    pub(super) fn now(&self, bound: usize) -> usize {
        self.allowed.clamp(1, bound.max(1))
    }

    /// The node's round trip as learnt, if any call ended yet.
    pub(super) fn round_trip(&self) -> Option<Duration> {
        match (self.last_window, self.this_window) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// A call carrying `checks` took `took` (to its answer or failure), ending at `at` (any
    /// monotonic time, e.g. since the node was made).
    pub(super) fn call_ended(&mut self, checks: usize, took: Duration, at: Duration) {
        if at.saturating_sub(self.window_start) >= WINDOW {
            // A window without calls keeps the one before: the round trip is still the
            // best known, not unknown.
            if self.this_window.is_some() {
                self.last_window = self.this_window.take();
            }
            self.window_start = at;
        }
        let per_check = CHECK_COST.saturating_mul(u32::try_from(checks).unwrap_or(u32::MAX));
        let round_trip = took.saturating_sub(per_check);
        self.this_window = Some(self.this_window.map_or(round_trip, |f| f.min(round_trip)));
        let fastest = self.round_trip().unwrap_or(round_trip);
        let past = nanos(took.saturating_sub(fastest));
        // A running mean in integers: m += (x - m) / 16.
        let mean = self.mean_past_round_trip;
        self.mean_past_round_trip = if past >= mean {
            mean + ((past - mean) >> MEAN_WEIGHT_SHIFT)
        } else {
            mean - ((mean - past) >> MEAN_WEIGHT_SHIFT)
        };
        self.allowed = allowed(fastest, Duration::from_nanos(self.mean_past_round_trip));
    }
}

/// Calls in flight for a node whose round trip is `round_trip` and whose calls take
/// `past_round_trip` longer on average (see the module docs).
fn allowed(round_trip: Duration, past_round_trip: Duration) -> usize {
    let queued = past_round_trip.saturating_sub(round_trip.saturating_mul(2));
    let spacing = SPACING.max(queued);
    let far = round_trip.saturating_sub(NEAR);
    let further = far.as_nanos() / spacing.as_nanos();
    1 + usize::try_from(further).unwrap_or(usize::MAX - 1)
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: Duration = Duration::from_micros(1);
    const MS: Duration = Duration::from_millis(1);

    /// `calls` calls of `checks` checks, each taking `took`, one every 100 µs from `from`;
    /// the time after the last.
    fn feed(
        allowed: &mut CallsAllowed,
        calls: u32,
        checks: usize,
        took: Duration,
        from: Duration,
    ) -> Duration {
        let mut at = from;
        for _ in 0..calls {
            at += 100 * US;
            allowed.call_ended(checks, took, at);
        }
        at
    }

    /// Calls allowed for a round trip of `round_trip` µs with no queue in Redis.
    fn far(round_trip: u64) -> usize {
        let further = (round_trip - NEAR.as_micros() as u64) / SPACING.as_micros() as u64;
        1 + further as usize
    }

    #[test]
    fn one_call_until_a_call_was_measured_and_where_redis_is_near() {
        let mut calls = CallsAllowed::default();
        assert_eq!((calls.now(16), calls.round_trip()), (1, None));
        // Loopback under load: large batches of quick calls.
        feed(&mut calls, 1000, 200, 300 * US, Duration::ZERO);
        assert_eq!(calls.round_trip(), Some(100 * US));
        assert_eq!(calls.now(16), 1);
        // Up to NEAR, still one.
        feed(&mut calls, 1000, 4, NEAR + 4 * US, Duration::ZERO);
        assert_eq!(calls.now(16), 1);
    }

    #[test]
    fn a_far_redis_gets_a_call_for_every_spacing_of_its_round_trip_up_to_the_bound() {
        let mut calls = CallsAllowed::default();
        feed(&mut calls, 100, 4, 800 * US + 4 * US, Duration::ZERO);
        assert_eq!(calls.now(16), far(800));
        assert_eq!(far(800), 5);
        let mut calls = CallsAllowed::default();
        feed(&mut calls, 100, 4, 2 * MS, Duration::ZERO);
        assert_eq!(calls.now(64), far(1996));
        assert_eq!(calls.now(16), 16, "bounded by --redis-calls-in-flight");
        assert_eq!(calls.now(1), 1);
    }

    #[test]
    fn a_busy_redis_gets_fewer_calls_and_gets_them_back_when_it_recovers() {
        let mut calls = CallsAllowed::default();
        let mut at = feed(&mut calls, 100, 2, MS, Duration::ZERO);
        assert_eq!(calls.now(16), far(998));
        // Calls take two and a half round trips (a large batch, busy cores): no queue.
        at = feed(&mut calls, 200, 2, 2500 * US, at);
        assert_eq!(calls.now(16), far(998));
        // Redis slows down: calls take 6 ms, five of them queued in Redis.
        at = feed(&mut calls, 200, 2, 6 * MS, at);
        assert_eq!(
            calls.round_trip(),
            Some(MS - 2 * US),
            "the fastest call still counts"
        );
        assert_eq!(calls.now(16), 1);
        // Quick again.
        feed(&mut calls, 200, 2, MS, at);
        assert_eq!(calls.now(16), far(998));
    }

    #[test]
    fn the_round_trip_follows_the_network_within_two_windows() {
        let mut calls = CallsAllowed::default();
        let at = feed(&mut calls, 100, 2, MS, Duration::ZERO);
        assert_eq!(calls.now(64), far(998));
        // The network gets faster: seen at once.
        let at = feed(&mut calls, 10, 2, 100 * US, at);
        assert_eq!(calls.now(64), 1);
        // Slower: seen once the faster calls' windows have passed.
        let mut calls = CallsAllowed::default();
        let at = feed(&mut calls, 10, 2, 100 * US, at);
        let at = feed(&mut calls, 10, 2, MS, at + WINDOW);
        assert_eq!(
            calls.now(64),
            1,
            "the last window's fastest call still counts"
        );
        feed(&mut calls, 10, 2, MS, at + WINDOW);
        assert_eq!(calls.now(64), far(998));
    }
}

//! The one source of time.
//!
//! Every decision takes `now` as an argument; only [`SystemClock`] reads the operating
//! system's clock. Tests and benches drive [`ManualClock`] instead of sleeping.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Nanoseconds since the Unix epoch (UTC). Fixed windows are aligned to the epoch, as in
/// the Go server, so the clock must be wall-clock time, not a monotonic instant.
pub type Nanos = u64;

/// Nanoseconds in one second.
pub const NANOS_PER_SEC: u64 = 1_000_000_000;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    /// The current time.
    fn now(&self) -> Nanos;
}

/// The operating system's real-time clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    #[allow(clippy::disallowed_methods)] // the one place that reads the OS clock
    fn now(&self) -> Nanos {
        // A clock before 1970 is a broken machine; answering with the epoch keeps
        // every computation defined instead of panicking on a request path.
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as Nanos)
    }
}

/// The time-stamp counter's scale, measured once against the OS clock (quanta does that in
/// `Clock::new`, which takes milliseconds); where the counter is not invariant, the OS
/// clock itself.
static COUNTER: LazyLock<quanta::Clock> = LazyLock::new(quanta::Clock::new);

/// How long something took, for statistics: a monotonic duration, never a decision's time
/// (decisions take `now` from a [`Clock`]). A raw reading of the CPU's time-stamp counter
/// where it is invariant, otherwise of the OS clock, which costs about 2.5 times as much: a
/// request takes three readings. Scaled to nanoseconds only when a duration is taken, two
/// a request: `quanta::Instant::now`, which scales every reading and looks for a thread's
/// mock clock first, took about 125 instructions a reading, and the statistics of a
/// three-descriptor request cost 100–185 instructions more with it (callgrind). Not
/// tokio's clock either, which costs more than a reading with its test hooks.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(u64);

impl Stopwatch {
    /// Starts timing now.
    #[inline]
    pub fn start() -> Self {
        Stopwatch(COUNTER.raw())
    }

    /// Calibrates the counter now, so that the first request does not.
    pub fn calibrate() {
        LazyLock::force(&COUNTER);
    }

    /// The time from this start to `later`'s (zero if `later` is not later): one clock
    /// reading can end one measurement and be the end of another.
    pub fn until(&self, later: Stopwatch) -> Duration {
        COUNTER.delta(self.0, later.0)
    }
}

/// A clock that moves only when told to. Cheap to clone; clones share one time.
#[derive(Debug, Clone, Default)]
pub struct ManualClock(
    /// The time it stands at (`Nanos`), shared by all clones.
    Arc<AtomicU64>,
);

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Nanos) -> Self {
        Self(Arc::new(AtomicU64::new(start)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_nanos() as u64, Ordering::SeqCst);
    }

    /// Puts the clock at `at` (which may be earlier: a wall clock can step back).
    pub fn set(&self, at: Nanos) {
        self.0.store(at, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Nanos {
        self.0.load(Ordering::SeqCst)
    }
}

/// `at` as RFC 3339 UTC, to the second.
pub fn rfc3339(at: Nanos) -> String {
    let time = UNIX_EPOCH + Duration::from_nanos(at);
    humantime::format_rfc3339_seconds(time).to_string()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Stopwatch;

    #[test]
    fn a_stopwatch_measures_at_least_what_passed_and_never_a_negative_time() {
        let started = Stopwatch::start();
        // A sleep lasts at least this long; the counter's scale is off by far less than half.
        std::thread::sleep(Duration::from_millis(20));
        let ended = Stopwatch::start();
        assert!(started.until(ended) >= Duration::from_millis(10));
        assert_eq!(ended.until(started), Duration::ZERO);
        assert_eq!(started.until(started), Duration::ZERO);
    }
}

//! The one source of time.
//!
//! Every decision takes `now` as an argument; only [`SystemClock`] reads the operating
//! system's clock. Tests and benches drive [`ManualClock`] instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
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

/// How long something took, for statistics: a monotonic duration, never a decision's time
/// (decisions take `now` from a [`Clock`]). Read from the CPU's time-stamp counter where it
/// is invariant (quanta calibrates it against the OS clock once, and otherwise reads the
/// OS clock): a request takes three readings, and the OS clock costs about 2.5 times as
/// much. Not tokio's clock either, which costs more than a reading with its test hooks.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(quanta::Instant);

impl Stopwatch {
    /// Starts timing now.
    pub fn start() -> Self {
        Stopwatch(quanta::Instant::now())
    }

    /// Calibrates the counter now, so that the first request does not (quanta does it on
    /// first use, which takes milliseconds).
    pub fn calibrate() {
        Stopwatch::start();
    }

    /// The time from this start to `later`'s: one clock reading can end one measurement
    /// and be the end of another.
    pub fn until(&self, later: Stopwatch) -> Duration {
        later.0.saturating_duration_since(self.0)
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

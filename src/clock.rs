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
/// (decisions take `now` from a [`Clock`]). The operating system's monotonic clock read
/// directly: on the request path a runtime's clock (tokio's, with its test hooks) costs
/// more than the reading itself.
#[derive(Debug, Clone, Copy)]
pub struct Stopwatch(std::time::Instant);

impl Stopwatch {
    /// Starts timing now.
    #[allow(clippy::disallowed_methods)] // durations only, see the type's docs
    pub fn start() -> Self {
        Stopwatch(std::time::Instant::now())
    }

    /// The time since [`Stopwatch::start`].
    pub fn elapsed(&self) -> Duration {
        self.0.elapsed()
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

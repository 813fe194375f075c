//! At most one log line per interval for events that can repeat thousands of times a
//! second (refused connections, accept failures, a flapping Redis node): the log must not
//! become the next resource a flood exhausts.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Whether an event may be logged now, and how many were left out since the last line.
/// Shared by reference: callers on any thread ask the same throttle.
#[derive(Debug)]
pub(crate) struct Throttle {
    /// Shortest time between two allowed lines.
    every: Duration,
    /// When the last line was allowed (`None`: never), and the events left out since.
    state: Mutex<(Option<Instant>, u64)>,
}

impl Throttle {
    /// At most one line per `every`.
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            every,
            state: Mutex::new((None, 0)),
        }
    }

    /// `Some(events left out since the last line)` when this event may be logged.
    pub(crate) fn allow(&self) -> Option<u64> {
        let now = Instant::now();
        let mut state = self.state.lock();
        let (last, suppressed) = &mut *state;
        if last.is_some_and(|last| now < last + self.every) {
            *suppressed += 1;
            return None;
        }
        *last = Some(now);
        Some(std::mem::take(suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_interval_with_the_count_left_out() {
        let throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.allow(), Some(0));
        assert_eq!(throttle.allow(), None);
        assert_eq!(throttle.allow(), None);
        tokio::time::advance(Duration::from_secs(9)).await;
        assert_eq!(throttle.allow(), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(throttle.allow(), Some(3));
        assert_eq!(throttle.allow(), None);
    }
}

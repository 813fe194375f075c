//! At most one log line per interval for events that can repeat thousands of times a
//! second (refused connections, accept failures): the log must not become the next
//! resource a flood exhausts.

use std::time::Duration;

use tokio::time::Instant;

/// Whether an event may be logged now, and how many were left out since the last line.
#[derive(Debug)]
pub(crate) struct Throttle {
    every: Duration,
    last: Option<Instant>,
    suppressed: u64,
}

impl Throttle {
    /// At most one line per `every`.
    pub(crate) fn new(every: Duration) -> Self {
        Self {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(events left out since the last line)` when this event may be logged.
    pub(crate) fn allow(&mut self) -> Option<u64> {
        let now = Instant::now();
        if self.last.is_some_and(|last| now < last + self.every) {
            self.suppressed += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.suppressed))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_per_interval_with_the_count_left_out() {
        let mut throttle = Throttle::new(Duration::from_secs(10));
        assert_eq!(throttle.allow(), Some(0));
        assert_eq!(throttle.allow(), None);
        assert_eq!(throttle.allow(), None);
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(throttle.allow(), Some(2));
    }
}

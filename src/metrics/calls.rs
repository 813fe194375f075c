//! The counters every `ShouldRateLimit` call adds to, whatever its rules: its latency,
//! its error, global shadow mode and the store call's latency. Atomics only: no lock, no
//! allocation on the request path.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::Metrics;
use super::text::Histogram;
use crate::clock::Stopwatch;
use crate::error::RequestError;

/// The per-call counters of one service.
#[derive(Debug, Default)]
pub(super) struct Calls {
    /// Latency of `ShouldRateLimit` calls; its count is the number of calls.
    pub(super) response_time: Histogram,
    /// Calls refused as invalid (`service_error`).
    pub(super) invalid_requests: AtomicU64,
    /// Store calls that could not decide (`redis_error`).
    pub(super) store_errors: AtomicU64,
    /// Requests over their limits answered OK by global shadow mode.
    pub(super) global_shadow: AtomicU64,
    /// Latency of store calls.
    pub(super) store_latency: Histogram,
}

impl Metrics {
    /// One `ShouldRateLimit` call answered, with `error` if it failed. `elapsed` runs from
    /// the service receiving the request to its decision (the store's answer, or the plan
    /// when no store call was needed): building the response and counting it, a fraction
    /// of a microsecond against the histogram's first bound of 10 µs, are left out so
    /// that the reading ending the store call serves both histograms.
    pub(crate) fn answered(&self, elapsed: Duration, error: Option<&RequestError>) {
        self.calls.response_time.observe(elapsed);
        // Store failures are counted by `store_answered`, where they happen.
        if error.is_some_and(RequestError::is_invalid_request) {
            self.calls.invalid_requests.fetch_add(1, Relaxed);
        }
    }

    /// A request over its limits answered OK by global shadow mode.
    pub(crate) fn global_shadow(&self) {
        self.calls.global_shadow.fetch_add(1, Relaxed);
    }

    /// A store call that began at `started` has ended, failed or not: its latency is
    /// observed and a failure counted. Returns the clock reading that ended it (the
    /// request's decision time, see [`Metrics::answered`]).
    pub(crate) fn store_answered(&self, started: Stopwatch, failed: bool) -> Stopwatch {
        let ended = Stopwatch::start();
        self.calls.store_latency.observe(started.until(ended));
        if failed {
            self.calls.store_errors.fetch_add(1, Relaxed);
        }
        ended
    }
}

//! The service the benches drive: the trading example's shape of rules on the embedded
//! store, with a clock standing still, and the requests they send.

use std::future::Future;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use meshlimit::clock::{Clock, ManualClock};
use meshlimit::config::Config;
use meshlimit::metrics::Metrics;
use meshlimit::request::Descriptor;
use meshlimit::rules::Algorithm;
use meshlimit::service::Service;
use meshlimit::store::{MemoryStore, Store};

const NOW: u64 = 1_767_225_600_000_000_000;

/// Limits no bench reaches: every request passes and every bucket keeps being used.
const CONFIG: &str = r#"
domain: bench
descriptors:
  - key: user_id
    descriptors:
      - key: method
        value: /trading.TradingService/SubmitOrder
        rate_limit: {unit: second, requests_per_unit: 4000000000}
      - key: method
        rate_limit: {unit: second, requests_per_unit: 4000000000}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 4000000000}
  - key: tier
    value: "trad*"
    rate_limit: {unit: minute, requests_per_unit: 4000000000}
  - key: one_limit
    rate_limit: {unit: second, requests_per_unit: 4000000000}
  - key: two_limits
    rate_limits:
      - {unit: second, requests_per_unit: 4000000000}
      - {unit: day, requests_per_unit: 4000000000}
  - key: sliding
    rate_limit: {unit: second, requests_per_unit: 4000000000, algorithm: sliding_window}
"#;

/// The embedded store never suspends, so the future completes on its first poll.
pub fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the embedded store does not suspend"),
    }
}

/// A service on [`CONFIG`] and the embedded store, counting in metrics of its own when
/// `with_metrics`.
pub fn service(with_metrics: bool) -> Service {
    let config =
        Config::from_sources(&[(PathBuf::from("bench.yaml"), CONFIG.to_string())]).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(NOW));
    let store = Store::Memory(MemoryStore::new(1_000_000, clock.clone()));
    let service = Service::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store,
        clock,
        Algorithm::TokenBucket,
    );
    if !with_metrics {
        return service;
    }
    let metrics = Metrics::new(service.config().clone(), service.store().clone());
    service.with_metrics(Arc::new(metrics))
}

/// 1024 requests of three descriptors each (a user and method, a client address, a
/// wildcard tier), as a gateway would send them.
pub fn three_descriptor_requests() -> Vec<Vec<Descriptor>> {
    (0..1024)
        .map(|i| {
            let user = format!("user-{i}");
            vec![
                Descriptor::new(&[
                    ("user_id", &user),
                    ("method", "/trading.TradingService/SubmitOrder"),
                ]),
                Descriptor::new(&[("remote_address", &format!("10.0.{}.{}", i / 256, i % 256))]),
                Descriptor::new(&[("tier", "trading")]),
            ]
        })
        .collect()
}

/// Runs `iters` calls of `work(thread, i)` split over `threads` threads; returns the wall
/// time, so that criterion reports time per call across all threads.
#[allow(clippy::disallowed_methods)] // a bench measures real time
pub fn run_threads(threads: usize, iters: u64, work: impl Fn(usize, usize) + Sync) -> Duration {
    let per = (iters as usize).div_ceil(threads);
    let barrier = std::sync::Barrier::new(threads + 1);
    std::thread::scope(|s| {
        for t in 0..threads {
            let (work, barrier) = (&work, &barrier);
            s.spawn(move || {
                barrier.wait();
                for i in 0..per {
                    work(t, i);
                }
            });
        }
        barrier.wait();
        let start = Instant::now();
        // Scope end joins the workers.
        start
    })
    .elapsed()
}

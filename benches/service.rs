use std::future::Future;
use std::hint::black_box;
use std::path::PathBuf;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use arc_swap::ArcSwap;
use criterion::{Criterion, Throughput};
use meshlimit::clock::{Clock, ManualClock};
use meshlimit::config::Config;
use meshlimit::request::Descriptor;
use meshlimit::rules::Algorithm;
use meshlimit::service::Service;
use meshlimit::store::{MemoryStore, Store};

const NOW: u64 = 1_767_225_600_000_000_000;

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
"#;

/// The embedded store never suspends, so the future completes on its first poll.
fn ready<F: Future>(future: F) -> F::Output {
    match pin!(future).poll(&mut Context::from_waker(Waker::noop())) {
        Poll::Ready(output) => output,
        Poll::Pending => unreachable!("the embedded store does not suspend"),
    }
}

/// A service on [`CONFIG`] and the embedded store, with a clock standing still at `NOW`.
fn service() -> Service {
    let config =
        Config::from_sources(&[(PathBuf::from("bench.yaml"), CONFIG.to_string())]).unwrap();
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::new(NOW));
    let store = Store::Memory(MemoryStore::new(1_000_000, clock.clone()));
    Service::new(
        Arc::new(ArcSwap::from_pointee(config)),
        store,
        clock,
        Algorithm::TokenBucket,
    )
}

pub fn three_descriptors(c: &mut Criterion) {
    let service = service();
    let requests: Vec<Vec<Descriptor>> = (0..1024)
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
        .collect();
    let mut group = c.benchmark_group("service");
    group.throughput(Throughput::Elements(1));
    let mut i = 0;
    group.bench_function("three_descriptors", |b| {
        b.iter(|| {
            i = (i + 1) % requests.len();
            black_box(ready(service.should_rate_limit("bench", &requests[i], 1)).unwrap());
        })
    });
    group.finish();
}

/// A request of `n` distinct descriptors, each of two entries matching the nested rule of
/// [`CONFIG`], as time per descriptor: it should stay flat from 1 to 64 descriptors (the
/// default `--max-descriptors`), showing that a request's cost grows linearly.
pub fn per_descriptor(c: &mut Criterion) {
    let service = service();
    let mut group = c.benchmark_group("service/per_descriptor");
    for n in [1usize, 8, 64] {
        // Several requests, so that buckets are not all in one cache line's worth of memory.
        let requests: Vec<Vec<Descriptor>> = (0..64)
            .map(|r| {
                (0..n)
                    .map(|d| {
                        let user = format!("user-{r}-{d}");
                        Descriptor::new(&[("user_id", &user), ("method", "/svc/Method")])
                    })
                    .collect()
            })
            .collect();
        group.throughput(Throughput::Elements(n as u64));
        let mut i = 0;
        group.bench_function(n.to_string(), |b| {
            b.iter(|| {
                i = (i + 1) % requests.len();
                black_box(ready(service.should_rate_limit("bench", &requests[i], 1)).unwrap());
            })
        });
    }
    group.finish();
}

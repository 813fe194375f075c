use std::hint::black_box;

use criterion::measurement::WallTime;
use criterion::{BenchmarkGroup, BenchmarkId, Criterion, Throughput};
use meshlimit::request::{Descriptor, Request};
use meshlimit::service::Service;

use crate::fixture::{ready, run_threads, service, three_descriptor_requests};

/// One three-descriptor request through the plan, the store and the answer, with the
/// statistics counted (as the server runs) and without.
pub fn three_descriptors(c: &mut Criterion) {
    let requests = three_descriptor_requests();
    let mut group = c.benchmark_group("service");
    group.throughput(Throughput::Elements(1));
    for (name, with_metrics) in [
        ("three_descriptors", true),
        ("three_descriptors_no_metrics", false),
    ] {
        round_robin(&mut group, name, &service(with_metrics), &requests);
    }
    group.finish();
}

/// A request of `n` distinct descriptors, each of two entries matching the nested rule of
/// [`CONFIG`], as time per descriptor: it should stay flat from 1 to 64 descriptors (the
/// default `--max-descriptors`), showing that a request's cost grows linearly.
pub fn per_descriptor(c: &mut Criterion) {
    let service = service(true);
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
        round_robin(&mut group, &n.to_string(), &service, &requests);
    }
    group.finish();
}

/// One descriptor with one limit, the same with two (`rate_limits`), and with a sliding
/// window, through the whole service with statistics: what a second limit costs.
pub fn limits(c: &mut Criterion) {
    let service = service(true);
    let mut group = c.benchmark_group("service/limits");
    group.throughput(Throughput::Elements(1));
    for (name, key) in [
        ("one", "one_limit"),
        ("two", "two_limits"),
        ("sliding", "sliding"),
    ] {
        let requests: Vec<Vec<Descriptor>> = (0..1024)
            .map(|i| vec![Descriptor::new(&[(key, &format!("caller-{i}"))])])
            .collect();
        round_robin(&mut group, name, &service, &requests);
    }
    group.finish();
}

/// Two-descriptor requests (a user and method, a client address: the gRPC benchmark's
/// `two.grpc`) from 1 and 2 threads at once, as time per request across all threads: on
/// every thread's own user (`own_keys`), and all on one user (`one_key`, as `h2load`
/// repeating one request makes every worker of the server do). Time per request should
/// halve from 1 to 2 threads on 2 free cores; what keeps it from halving is memory both
/// threads write: one user's buckets, which the store must share, and counters, which it
/// need not.
pub fn threads(c: &mut Criterion) {
    let service = service(true);
    let mut group = c.benchmark_group("service/threads");
    group.throughput(Throughput::Elements(1));
    let request = |user: &str| {
        vec![
            Descriptor::new(&[
                ("user_id", user),
                ("method", "/trading.TradingService/SubmitOrder"),
            ]),
            Descriptor::new(&[("remote_address", "10.0.0.1")]),
        ]
    };
    for threads in [1, 2] {
        for (name, users) in [
            ("one_key", vec!["alice"; threads]),
            (
                "own_keys",
                (0..threads).map(|t| ["alice", "bob"][t]).collect(),
            ),
        ] {
            let requests: Vec<_> = users.iter().map(|user| request(user)).collect();
            group.bench_with_input(BenchmarkId::new(name, threads), &threads, |b, &threads| {
                b.iter_custom(|iters| {
                    run_threads(threads, iters, |t, _| {
                        black_box(
                            ready(service.should_rate_limit(Request::new(
                                "bench",
                                &requests[t],
                                1,
                            )))
                            .unwrap(),
                        );
                    })
                })
            });
        }
    }
    group.finish();
}

/// Bench `name`: `requests` in turn through `service`, one per iteration.
fn round_robin(
    group: &mut BenchmarkGroup<'_, WallTime>,
    name: &str,
    service: &Service,
    requests: &[Vec<Descriptor>],
) {
    let mut i = 0;
    group.bench_function(name, |b| {
        b.iter(|| {
            i = (i + 1) % requests.len();
            black_box(
                ready(service.should_rate_limit(Request::new("bench", &requests[i], 1))).unwrap(),
            );
        })
    });
}

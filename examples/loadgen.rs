//! gRPC load client for `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`
//! that checks every answer (used by `benches/redis_load.sh`).
//!
//! Closed loop (the default): K tasks (`--concurrency`) each loop: send one request, await
//! the answer, check it, send the next, so K requests are in flight in total. The rate is
//! then whatever the server answers, and a slow answer delays the requests behind it
//! without showing in their latency (coordinated omission).
//!
//! Open loop (`--rate N`): requests are due on a fixed schedule, the i-th at start + i/N s,
//! whatever the answers. A pacing thread hands each due request's scheduled time to the
//! same K tasks, which now cap the requests in flight; latency is measured from the
//! scheduled time, so time spent waiting for a free task (the server falling behind) counts.
//! Requests due while K were already in flight are counted (`late=`). The pacing thread
//! sleeps with the OS timer (about 50 µs of slack), so a request may go out that much
//! after its time; that too counts as latency, the same for any server.
//!
//! Each task's n-th request goes out on
//! HTTP/2 connection (task + n) mod C (`--connections`), so requests are spread
//! round-robin. Every request has one descriptor, `user_id=u<i>` and `method=<--method>`,
//! in `--domain`; `i` walks `0..--keys` round-robin (one shared counter) or is drawn by a
//! per-task xorshift generator (`--pick random`).
//!
//! Every answer is checked, warm-up included: the gRPC status must be OK, there must be
//! exactly one status, and `overall_code` and the status's code must be what `--expect`
//! says (`ok`, `over`, or `any`: OK or OVER_LIMIT, overall OVER_LIMIT exactly when the
//! status is). Failed calls count as errors, wrong answers as mismatches; the first few of
//! each are printed, and the exit code is 1 if there is any (or nothing was measured).
//!
//! The run is bounded in time (`--warmup` + `--duration`, then at most 10 s for the calls
//! still in flight) and optionally in count (`--requests`, measured requests). Latency,
//! requests/s and the OK / OVER_LIMIT counts cover the measured part only, and only calls
//! that got an answer (`requests=`); errors and mismatches count the whole run. The end is
//! one human line and one line for scripts:
//!
//! ```text
//! RESULT rps=41234 p50_us=1480.0 p99_us=2890.0 p999_us=4100.0 max_us=9000.0 requests=412340 ok=412340 over=0 errors=0 mismatches=0
//! ```
//!
//! With `--rate`, two fields follow: `offered_rps=N late=N` (the measured requests that
//! were due while `--concurrency` were in flight).
//!
//! ```text
//! cargo run --release --example loadgen -- --addr http://127.0.0.1:8081 --keys 1000 --expect ok
//! cargo run --release --example loadgen -- --addr http://127.0.0.1:8081 --rate 20000 --concurrency 256
//! ```
//!
//! The load generator shares the machine with the server, so it is lean: one runtime
//! worker thread by default (`--threads`), counters per task, latency histograms in a few
//! shards (an uncontended lock with one thread) merged at the end, atomic counters only
//! for `--pick rr` and `--requests`, user ids formatted once. Each request is a clone of
//! one template with the user id appended (a few small allocations: the generated client
//! takes the message by value, and tonic allocates more per call than that).

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use hdrhistogram::Histogram;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tonic::transport::{Channel, Endpoint};

/// How long calls still in flight at the end may take before the run is failed.
const GRACE: Duration = Duration::from_secs(10);
/// How many errors and mismatches are printed in full.
const SHOW: usize = 5;
/// Highest latency the histograms hold (larger values are recorded as this), in ns.
const MAX_LATENCY_NS: u64 = 60_000_000_000;

#[derive(Parser, Debug)]
#[command(
    about = "gRPC load client for envoy.service.ratelimit.v3 RateLimitService, checking every answer"
)]
struct Args {
    /// Server address (h2c).
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    addr: String,
    /// HTTP/2 connections (separate channels); requests are spread over them round-robin.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    connections: u32,
    /// Requests in flight in total (one task each); with `--rate`, at most this many.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    concurrency: u32,
    /// Open loop: this many requests a second, each due at its time whatever the answers.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    rate: Option<u64>,
    /// Measured seconds (after the warm-up).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=60))]
    duration: u64,
    /// Stop after this many measured requests (if the duration has not ended first).
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    requests: Option<u64>,
    /// Seconds of load before measuring (answers are still checked).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(0..=30))]
    warmup: u64,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    threads: u32,
    /// Rate-limit domain.
    #[arg(long, default_value = "trading")]
    domain: String,
    /// Distinct users: user_id values u0 .. u<N-1>.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    keys: u64,
    /// How each request's user is chosen.
    #[arg(long, value_enum, default_value_t = Pick::Rr)]
    pick: Pick,
    /// Value of the descriptor's `method` entry.
    #[arg(long, default_value = "/trading.TradingService/SubmitOrder")]
    method: String,
    /// Answer every request must get.
    #[arg(long, value_enum, default_value_t = Expect::Any)]
    expect: Expect,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Pick {
    /// Round-robin over all users (one shared counter).
    Rr,
    /// A per-task xorshift generator.
    Random,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Expect {
    /// overall_code and the status OK.
    Ok,
    /// overall_code and the status OVER_LIMIT.
    Over,
    /// OK or OVER_LIMIT, overall OVER_LIMIT exactly when the status is.
    Any,
}

/// Read-only state of the run, shared by every task.
struct Shared {
    users: Vec<String>,
    template: RateLimitRequest,
    pick: Pick,
    expect: Expect,
    measure_start: Instant,
    end: Instant,
    cap: Option<u64>,
    /// Measured requests started (for `--requests` in the closed loop).
    started: AtomicU64,
    /// Open loop: requests handed out by the pacing thread and not yet answered.
    in_flight: AtomicU64,
    /// Round-robin position (for `--pick rr`).
    next_user: AtomicU64,
    /// Latencies of measured answers, in ns; task t records into shard t mod len.
    latency_ns: Vec<Mutex<Histogram<u64>>>,
    /// The first few errors and mismatches, for the report.
    failures: Mutex<Failures>,
}

/// The first [`SHOW`] errors and the first [`SHOW`] mismatches, described.
#[derive(Default)]
struct Failures {
    errors: Vec<String>,
    mismatches: Vec<String>,
}

/// What one task saw (latencies go to the shared histograms).
#[derive(Default)]
struct Tally {
    ok: u64,
    over: u64,
    errors: u64,
    mismatches: u64,
    warmup: u64,
    /// When the task's last measured answer arrived.
    last: Option<Instant>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.threads as usize)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let code = runtime.block_on(run(args));
    // Calls abandoned after the grace period must not hold up the exit.
    runtime.shutdown_background();
    code
}

async fn run(args: Args) -> ExitCode {
    let endpoint = match Endpoint::from_shared(args.addr.clone()) {
        Ok(e) => e.tcp_nodelay(true).connect_timeout(Duration::from_secs(5)),
        Err(e) => {
            eprintln!("loadgen: bad --addr {}: {e}", args.addr);
            return ExitCode::from(2);
        }
    };
    let mut channels = Vec::with_capacity(args.connections as usize);
    for _ in 0..args.connections {
        match endpoint.connect().await {
            Ok(ch) => channels.push(ch),
            Err(e) => {
                eprintln!("loadgen: cannot connect to {}: {e:?}", args.addr);
                return ExitCode::FAILURE;
            }
        }
    }

    eprintln!(
        "loadgen: {} | {} connection(s), {} in flight{}, {} thread(s) | {} s warm-up + {} s{} | \
         domain {}, user_id u0..u{} ({}), method {} | expect {:?}",
        args.addr,
        args.connections,
        args.concurrency,
        args.rate
            .map(|n| format!(" at most, open loop at {n} req/s"))
            .unwrap_or_default(),
        args.threads,
        args.warmup,
        args.duration,
        args.requests
            .map(|n| format!(" or {n} requests"))
            .unwrap_or_default(),
        args.domain,
        args.keys - 1,
        match args.pick {
            Pick::Rr => "round-robin",
            Pick::Random => "random",
        },
        args.method,
        args.expect,
    );

    let start = clock();
    let measure_start = start + Duration::from_secs(args.warmup);
    let shared = Arc::new(Shared {
        users: (0..args.keys).map(|i| format!("u{i}")).collect(),
        template: RateLimitRequest {
            domain: args.domain.clone(),
            descriptors: vec![RateLimitDescriptor {
                entries: vec![
                    Entry {
                        key: "user_id".into(),
                        value: String::new(),
                    },
                    Entry {
                        key: "method".into(),
                        value: args.method.clone(),
                    },
                ],
                ..RateLimitDescriptor::default()
            }],
            hits_addend: 0,
        },
        pick: args.pick,
        expect: args.expect,
        measure_start,
        end: measure_start + Duration::from_secs(args.duration),
        cap: args.requests,
        started: AtomicU64::new(0),
        in_flight: AtomicU64::new(0),
        next_user: AtomicU64::new(0),
        // Sharded so that tasks on different threads rarely share a lock, and few enough
        // that the histograms (about 220 KB each) do not grow with --concurrency.
        latency_ns: (0..(4 * args.threads).min(args.concurrency))
            .map(|_| Mutex::new(histogram()))
            .collect(),
        failures: Mutex::new(Failures::default()),
    });

    let (source, pacing) = match args.rate {
        None => (Source::Closed, None),
        Some(rate) => {
            let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
            let pacer = Pacer {
                schedule: Schedule { start, rate },
                next: 0,
                end: shared.end,
                measure_start,
                left: args.requests,
                cap: u64::from(args.concurrency),
                late: 0,
            };
            let shared = Arc::clone(&shared);
            let pacing = std::thread::spawn(move || pace(pacer, &tx, &shared));
            let tickets = Arc::new(tokio::sync::Mutex::new(rx));
            (Source::Open(tickets), Some(pacing))
        }
    };
    let tasks: Vec<_> = (0..args.concurrency)
        .map(|t| {
            let clients: Vec<_> = channels
                .iter()
                .map(|ch| RateLimitServiceClient::new(ch.clone()))
                .collect();
            tokio::spawn(worker(t, clients, source.clone(), Arc::clone(&shared)))
        })
        .collect();
    drop(channels);
    drop(source);

    // The calls themselves give up at end + GRACE; this is a safety net.
    let deadline = tokio::time::Instant::from_std(shared.end + GRACE + Duration::from_secs(5));
    let mut total = Tally::default();
    let mut unfinished = 0;
    for task in tasks {
        match tokio::time::timeout_at(deadline, task).await {
            Ok(Ok(tally)) => total.merge(&tally),
            Ok(Err(e)) => {
                eprintln!("loadgen: a task failed: {e}");
                total.errors += 1;
            }
            Err(_) => unfinished += 1,
        }
    }
    if unfinished > 0 {
        eprintln!(
            "loadgen: {unfinished} task(s) still running {} s after the end; counted as errors",
            GRACE.as_secs() + 5
        );
        total.errors += unfinished;
    }
    // The pacing thread has ended: its schedule ends with the run, and it stops at once
    // when no task is left to take its requests.
    let late = pacing.map(|p| p.join().unwrap_or(0));

    let failures = std::mem::take(&mut *lock(&shared.failures));
    for line in failures.errors.iter().chain(&failures.mismatches) {
        eprintln!("loadgen: {line}");
    }
    let mut latency_ns = histogram();
    for shard in &shared.latency_ns {
        latency_ns
            .add(&*lock(shard))
            .expect("histograms of equal bounds");
    }
    report(&args, &total, &latency_ns, shared.measure_start, late)
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_max(MAX_LATENCY_NS, 3).expect("valid histogram bounds")
}

/// Locks `m`, poisoned or not (a panicking task has nothing half-written worth refusing).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Tally {
    fn merge(&mut self, other: &Tally) {
        self.ok += other.ok;
        self.over += other.over;
        self.errors += other.errors;
        self.mismatches += other.mismatches;
        self.warmup += other.warmup;
        self.last = self.last.max(other.last);
    }
}

/// The OS clock: a load generator measures real time.
#[allow(clippy::disallowed_methods)] // the one place here that reads the OS clock
fn clock() -> Instant {
    Instant::now()
}

/// When the open loop's requests are due: request i at `start + i/rate`, computed from i
/// rather than by adding up a period, so that rounding never accumulates.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    start: Instant,
    /// Requests per second.
    rate: u64,
}

impl Schedule {
    fn at(&self, i: u64) -> Instant {
        let ns = u128::from(i) * 1_000_000_000 / u128::from(self.rate);
        self.start + Duration::from_nanos(u64::try_from(ns).unwrap_or(u64::MAX))
    }
}

/// The pacing thread's state: which request is due next, and how many measured ones may
/// still go out.
#[derive(Debug)]
struct Pacer {
    schedule: Schedule,
    /// Index of the next request.
    next: u64,
    /// No request is due at or after this (the end of the run).
    end: Instant,
    /// Requests due from here on are measured.
    measure_start: Instant,
    /// Measured requests still allowed (`--requests`), `None` for no limit.
    left: Option<u64>,
    /// `--concurrency`: a request due while this many are in flight cannot start on time.
    cap: u64,
    /// Measured requests that were due while `cap` were in flight.
    late: u64,
}

/// What the pacing thread does next.
#[derive(Debug, PartialEq, Eq)]
enum Pace {
    /// Hand out the request due at this time (now or already past).
    Issue(Instant),
    /// Nothing is due for this long.
    Wait(Duration),
    /// The schedule has ended.
    Done,
}

impl Pacer {
    /// The next step at `now`, with `in_flight` requests handed out and not yet answered.
    /// A request whose time has passed (the thread overslept) is issued at once, with its
    /// own due time, so that latency is still measured from the schedule.
    fn poll(&mut self, now: Instant, in_flight: u64) -> Pace {
        let due = self.schedule.at(self.next);
        if due >= self.end || self.left == Some(0) {
            return Pace::Done;
        }
        if due > now {
            return Pace::Wait(due - now);
        }
        self.next += 1;
        if due >= self.measure_start {
            if let Some(left) = &mut self.left {
                *left -= 1;
            }
            if in_flight >= self.cap {
                self.late += 1;
            }
        }
        Pace::Issue(due)
    }
}

/// The pacing thread: hands each request's due time to the tasks; returns the late count.
/// A thread of its own, not a tokio timer: tokio's timers tick in milliseconds.
fn pace(mut pacer: Pacer, tickets: &UnboundedSender<Instant>, shared: &Shared) -> u64 {
    loop {
        match pacer.poll(clock(), shared.in_flight.load(Ordering::Relaxed)) {
            Pace::Issue(due) => {
                shared.in_flight.fetch_add(1, Ordering::Relaxed);
                if tickets.send(due).is_err() {
                    break; // every task has ended
                }
            }
            Pace::Wait(d) => std::thread::sleep(d),
            Pace::Done => break,
        }
    }
    pacer.late
}

/// Where a task's next request's start time comes from.
#[derive(Clone)]
enum Source {
    /// Closed loop: when the previous answer arrived, until the end of the run.
    Closed,
    /// Open loop: the due times the pacing thread hands out, until it stops.
    Open(Arc<tokio::sync::Mutex<UnboundedReceiver<Instant>>>),
}

/// One of the K request loops.
async fn worker(
    task: u32,
    mut clients: Vec<RateLimitServiceClient<Channel>>,
    source: Source,
    shared: Arc<Shared>,
) -> Tally {
    let mut tally = Tally::default();
    let latency_ns = &shared.latency_ns[task as usize % shared.latency_ns.len()];
    let keys = shared.users.len() as u64;
    let mut conn = task as usize % clients.len();
    // xorshift64*: any non-zero seed; distinct per task.
    let mut rng =
        0x9E37_79B9_7F4A_7C15u64 ^ (u64::from(task) + 1).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    let hard_end = tokio::time::Instant::from_std(shared.end + GRACE);
    let mut now = clock();
    loop {
        // Latency is measured from `start`: the previous answer, or the schedule.
        let start = match &source {
            Source::Closed if now >= shared.end => break,
            Source::Closed => now,
            Source::Open(tickets) => match tickets.lock().await.recv().await {
                Some(due) => due,
                None => break,
            },
        };
        let measured = start >= shared.measure_start;
        if let (Source::Closed, true, Some(cap)) = (&source, measured, shared.cap)
            && shared.started.fetch_add(1, Ordering::Relaxed) >= cap
        {
            break;
        }
        let user = match shared.pick {
            Pick::Rr => shared.next_user.fetch_add(1, Ordering::Relaxed) % keys,
            Pick::Random => {
                rng ^= rng >> 12;
                rng ^= rng << 25;
                rng ^= rng >> 27;
                rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % keys
            }
        } as usize;
        let mut request = shared.template.clone();
        request.descriptors[0].entries[0]
            .value
            .push_str(&shared.users[user]);

        let call = clients[conn].should_rate_limit(request);
        let result = match tokio::time::timeout_at(hard_end, call).await {
            Ok(result) => result,
            Err(_) => {
                // The server has not answered GRACE after the end: give up on it.
                tally.errors += 1;
                let grace = GRACE.as_secs();
                record_failure(&shared, false, || {
                    format!("error: no answer {grace} s after the end of the run")
                });
                break;
            }
        };
        conn = (conn + 1) % clients.len();
        now = clock();
        if let Source::Open(_) = source {
            shared.in_flight.fetch_sub(1, Ordering::Relaxed);
        }

        let answered = result.is_ok();
        match result {
            Ok(response) => {
                let response = response.into_inner();
                match check(shared.expect, &response) {
                    Ok(over) => {
                        if measured {
                            if over {
                                tally.over += 1;
                            } else {
                                tally.ok += 1;
                            }
                        }
                    }
                    Err(why) => {
                        tally.mismatches += 1;
                        record_failure(&shared, true, || {
                            format!(
                                "mismatch: user_id={} method={}: {why} (expected {:?}): {}",
                                shared.users[user],
                                shared.template.descriptors[0].entries[1].value,
                                shared.expect,
                                describe(&response)
                            )
                        });
                    }
                }
            }
            Err(status) => {
                tally.errors += 1;
                record_failure(&shared, false, || {
                    format!(
                        "error: user_id={}: gRPC {:?}: {}",
                        shared.users[user],
                        status.code(),
                        status.message()
                    )
                });
            }
        }
        if !measured {
            tally.warmup += 1;
        } else if answered {
            let ns = u64::try_from((now - start).as_nanos()).unwrap_or(u64::MAX);
            lock(latency_ns).saturating_record(ns.max(1));
            tally.last = Some(now);
        }
    }
    tally
}

/// Whether `response` is what `expect` asks for; `Ok(true)` when it is OVER_LIMIT.
fn check(expect: Expect, response: &RateLimitResponse) -> Result<bool, &'static str> {
    if response.statuses.len() != 1 {
        return Err("not exactly one status for the one descriptor");
    }
    let overall = response.overall_code;
    let status = response.statuses[0].code;
    let (ok, over) = (Code::Ok as i32, Code::OverLimit as i32);
    match expect {
        Expect::Ok if overall == ok && status == ok => Ok(false),
        Expect::Over if overall == over && status == over => Ok(true),
        Expect::Any if (overall == ok || overall == over) && status == overall => {
            Ok(overall == over)
        }
        Expect::Ok | Expect::Over => Err("wrong code"),
        Expect::Any => Err("codes not OK/OVER_LIMIT or overall_code disagrees with the status"),
    }
}

fn code_name(code: i32) -> String {
    Code::try_from(code).map_or_else(|_| code.to_string(), |c| c.as_str_name().to_string())
}

fn describe(response: &RateLimitResponse) -> String {
    let statuses: Vec<String> = response
        .statuses
        .iter()
        .map(|s| {
            let limit = s
                .current_limit
                .as_ref()
                .map(|l| {
                    let unit = Unit::try_from(l.unit).map_or("?", |u| u.as_str_name());
                    format!(", limit {}/{unit}", l.requests_per_unit)
                })
                .unwrap_or_default();
            format!(
                "{} (remaining {}{limit})",
                code_name(s.code),
                s.limit_remaining
            )
        })
        .collect();
    format!(
        "overall_code {}, statuses [{}]",
        code_name(response.overall_code),
        statuses.join(", ")
    )
}

/// Keeps the description of one of the first few errors (or mismatches); `describe` is
/// called only for those.
fn record_failure(shared: &Shared, mismatch: bool, describe: impl FnOnce() -> String) {
    let mut failures = lock(&shared.failures);
    let list = if mismatch {
        &mut failures.mismatches
    } else {
        &mut failures.errors
    };
    if list.len() < SHOW {
        list.push(describe());
    }
}

/// Prints the human line and the RESULT line; `late` is the open loop's late count.
fn report(
    args: &Args,
    t: &Tally,
    latency_ns: &Histogram<u64>,
    measure_start: Instant,
    late: Option<u64>,
) -> ExitCode {
    let requests = latency_ns.len();
    // The measured span ends with the last measured answer (the last calls may finish a
    // little after the deadline, or long before it when --requests ends the run).
    let span = t
        .last
        .map_or(0.0, |last| (last - measure_start).as_secs_f64());
    let rps = if span > 0.0 {
        requests as f64 / span
    } else {
        0.0
    };
    let us = |q: f64| latency_ns.value_at_quantile(q) as f64 / 1000.0;
    let max_us = latency_ns.max() as f64 / 1000.0;
    let open = match (args.rate, late) {
        (Some(rate), Some(late)) => (
            format!(
                "; open loop at {rate} req/s, {late} due with {} in flight",
                args.concurrency
            ),
            format!(" offered_rps={rate} late={late}"),
        ),
        _ => Default::default(),
    };
    println!(
        "loadgen: {requests} answers in {span:.2} s = {rps:.0} req/s ({} connection(s), {} in flight); \
         latency p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {max_us:.1} µs; \
         OK {}, OVER_LIMIT {}, errors {}, mismatches {} (expect {:?}); {} warm-up requests{}",
        args.connections,
        args.concurrency,
        us(0.5),
        us(0.99),
        us(0.999),
        t.ok,
        t.over,
        t.errors,
        t.mismatches,
        args.expect,
        t.warmup,
        open.0,
    );
    println!(
        "RESULT rps={rps:.0} p50_us={:.1} p99_us={:.1} p999_us={:.1} max_us={max_us:.1} requests={requests} \
         ok={} over={} errors={} mismatches={}{}",
        us(0.5),
        us(0.99),
        us(0.999),
        t.ok,
        t.over,
        t.errors,
        t.mismatches,
        open.1,
    );
    if t.errors > 0 || t.mismatches > 0 {
        eprintln!(
            "loadgen: FAILED: {} error(s), {} mismatch(es)",
            t.errors, t.mismatches
        );
        ExitCode::FAILURE
    } else if requests == 0 {
        eprintln!("loadgen: FAILED: no measured requests");
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pacer(rate: u64, seconds: u64, left: Option<u64>, cap: u64) -> (Pacer, Instant) {
        let start = clock();
        let pacer = Pacer {
            schedule: Schedule { start, rate },
            next: 0,
            end: start + Duration::from_secs(seconds),
            measure_start: start + Duration::from_secs(1),
            left,
            cap,
            late: 0,
        };
        (pacer, start)
    }

    #[test]
    fn the_schedule_does_not_drift() {
        let start = clock();
        let s = Schedule { start, rate: 3 };
        assert_eq!(s.at(0), start);
        assert_eq!(s.at(1) - start, Duration::from_nanos(333_333_333));
        assert_eq!(s.at(2) - start, Duration::from_nanos(666_666_666));
        // Whole seconds land exactly, however far in: i/rate is computed, not summed.
        assert_eq!(s.at(3 * 3600) - start, Duration::from_secs(3600));
        let s = Schedule {
            start,
            rate: 40_000,
        };
        assert_eq!(
            s.at(40_000 * 60 + 1) - start,
            Duration::from_nanos(60_000_025_000)
        );
    }

    #[test]
    fn requests_wait_for_their_time_and_an_oversleep_catches_up_with_their_own_times() {
        let (mut p, start) = pacer(1000, 10, None, 64);
        let ms = Duration::from_millis;
        assert_eq!(p.poll(start, 0), Pace::Issue(start));
        assert_eq!(p.poll(start, 1), Pace::Wait(ms(1)));
        assert_eq!(
            p.poll(start + Duration::from_micros(400), 1),
            Pace::Wait(Duration::from_micros(600))
        );
        // Woken 2.5 ms late: the three due since go out at once, each with its due time.
        let late = start + Duration::from_micros(3500);
        assert_eq!(p.poll(late, 1), Pace::Issue(start + ms(1)));
        assert_eq!(p.poll(late, 2), Pace::Issue(start + ms(2)));
        assert_eq!(p.poll(late, 3), Pace::Issue(start + ms(3)));
        assert_eq!(p.poll(late, 4), Pace::Wait(Duration::from_micros(500)));
        assert_eq!(p.late, 0);
    }

    #[test]
    fn the_schedule_ends_with_the_run_or_the_measured_count() {
        let (mut p, start) = pacer(2, 3, None, 64);
        let after = start + Duration::from_secs(5);
        let mut issued = 0;
        while let Pace::Issue(_) = p.poll(after, 0) {
            issued += 1;
        }
        assert_eq!(issued, 6, "2 a second for 3 s");
        assert_eq!(p.poll(after, 0), Pace::Done);

        // --requests counts measured requests only: the 2 of the warm-up second go out too.
        let (mut p, start) = pacer(2, 3, Some(3), 64);
        let mut due = Vec::new();
        while let Pace::Issue(at) = p.poll(after, 0) {
            due.push(at - start);
        }
        let ms = Duration::from_millis;
        assert_eq!(due, [ms(0), ms(500), ms(1000), ms(1500), ms(2000)]);
    }

    #[test]
    fn requests_due_while_the_cap_is_in_flight_are_late_when_measured() {
        let (mut p, start) = pacer(10, 3, None, 2);
        let later = start + Duration::from_secs(2);
        // Warm-up (the first second): not counted.
        for _ in 0..10 {
            assert!(matches!(p.poll(later, 5), Pace::Issue(_)));
        }
        assert_eq!(p.late, 0);
        assert!(matches!(p.poll(later, 1), Pace::Issue(_)));
        assert!(matches!(p.poll(later, 2), Pace::Issue(_)));
        assert!(matches!(p.poll(later, 3), Pace::Issue(_)));
        assert_eq!(p.late, 2);
    }
}

//! Key-flood figures for the embedded store (issue 9, defect 1): how many requests of a
//! caller a limit lets through when one-off keys fill the store.
//!
//! Every request has one descriptor, `user=<value>`, in `--domain`; the server should have
//! a per-user rule there (the figures use 100 per hour and `--max-buckets 1000`). Two
//! phases, each printed as one line:
//! 1. `alone`: a caller sends `--alone` requests; then `--flood` one-off keys, one request
//!    each; then the same caller and a new one send `--after` requests each.
//! 2. `during`: `--during-flood` one-off keys sent as fast as `--concurrency` requests in
//!    flight allow, while a new caller sends `--during` requests spread over
//!    `--during-secs` seconds.
//!
//! ```text
//! cargo run --release --example keyflood -- --addr http://127.0.0.1:8081
//! ```

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use clap::Parser;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

#[derive(Parser, Debug)]
#[command(about = "Key-flood figures for meshlimit's embedded store")]
struct Args {
    /// Server address (h2c).
    #[arg(long, default_value = "http://127.0.0.1:8081")]
    addr: String,
    /// Rate-limit domain with a per-user rule.
    #[arg(long, default_value = "flood")]
    domain: String,
    /// Requests of the caller alone, before the flood.
    #[arg(long, default_value_t = 150)]
    alone: u64,
    /// One-off keys between the two rounds of the `alone` phase.
    #[arg(long, default_value_t = 20_000)]
    flood: u64,
    /// Requests of each caller after the flood.
    #[arg(long, default_value_t = 300)]
    after: u64,
    /// One-off keys of the `during` phase.
    #[arg(long, default_value_t = 88_000)]
    during_flood: u64,
    /// Requests of the new caller during that flood.
    #[arg(long, default_value_t = 300)]
    during: u64,
    /// Seconds over which the new caller's requests are spread.
    #[arg(long, default_value_t = 6)]
    during_secs: u64,
    /// Flood requests in flight.
    #[arg(long, default_value_t = 16)]
    concurrency: u64,
}

/// One request for `user`; whether it was allowed. Errors end the run.
async fn allowed(client: &mut RateLimitServiceClient<Channel>, domain: &str, user: &str) -> bool {
    let request = RateLimitRequest {
        domain: domain.to_string(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: user.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    };
    let answer = tokio::time::timeout(Duration::from_secs(10), client.should_rate_limit(request))
        .await
        .expect("ShouldRateLimit timed out")
        .expect("ShouldRateLimit failed")
        .into_inner();
    answer.overall_code == Code::Ok as i32
}

/// Of `n` requests for `user`, how many were allowed.
async fn count(
    client: &mut RateLimitServiceClient<Channel>,
    domain: &str,
    user: &str,
    n: u64,
) -> u64 {
    let mut passed = 0;
    for _ in 0..n {
        passed += u64::from(allowed(client, domain, user).await);
    }
    passed
}

/// Sends one-off keys `prefix<i>` for `i` in `0..n` with `concurrency` in flight; stops
/// early when `stop` is set. Returns how many were sent.
async fn flood(
    channel: Channel,
    domain: &str,
    prefix: &str,
    n: u64,
    concurrency: u64,
    stop: Arc<AtomicBool>,
) -> u64 {
    let next = Arc::new(AtomicU64::new(0));
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let (next, stop) = (next.clone(), stop.clone());
            let mut client = RateLimitServiceClient::new(channel.clone());
            let (domain, prefix) = (domain.to_string(), prefix.to_string());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= n || stop.load(Ordering::Relaxed) {
                        break;
                    }
                    allowed(&mut client, &domain, &format!("{prefix}{i}")).await;
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("flood task");
    }
    next.load(Ordering::Relaxed).min(n)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = Args::parse();
    let channel = Endpoint::from_shared(args.addr.clone())
        .expect("--addr")
        .tcp_nodelay(true)
        .connect()
        .await
        .expect("connecting");
    let mut client = RateLimitServiceClient::new(channel.clone());
    let domain = &args.domain;

    let alone = count(&mut client, domain, "caller", args.alone).await;
    let never = Arc::new(AtomicBool::new(false));
    let sent = flood(
        channel.clone(),
        domain,
        "one-off-a-",
        args.flood,
        args.concurrency,
        never,
    )
    .await;
    let same = count(&mut client, domain, "caller", args.after).await;
    let new = count(&mut client, domain, "new-caller", args.after).await;
    println!(
        "alone: caller {alone} of {}; after {sent} one-off keys: same caller {same} of {n}, new caller {new} of {n}",
        args.alone,
        n = args.after
    );

    let stop = Arc::new(AtomicBool::new(false));
    let flooding = tokio::spawn({
        let (channel, domain, stop) = (channel.clone(), domain.clone(), stop.clone());
        async move {
            flood(
                channel,
                &domain,
                "one-off-b-",
                args.during_flood,
                args.concurrency,
                stop,
            )
            .await
        }
    });
    // Let the flood fill the store before the caller arrives.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let pause = Duration::from_secs(args.during_secs) / args.during.max(1) as u32;
    let mut during = 0;
    for _ in 0..args.during {
        during += u64::from(allowed(&mut client, domain, "during-caller").await);
        tokio::time::sleep(pause).await;
    }
    let still_flooding = !flooding.is_finished();
    stop.store(true, Ordering::Relaxed);
    let sent = flooding.await.expect("flood");
    println!(
        "during: new caller {during} of {} over {} s, while {sent} one-off keys were sent (flood still running at the end: {still_flooding})",
        args.during, args.during_secs
    );
}

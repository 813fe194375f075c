//! The holds recipe, `examples/envoy-holds/`, with a real Envoy 1.40: its `envoy.yaml` and
//! `config/holds.yaml` run as shipped (only their ports changed), in front of a backend of
//! the test's own (`support::backend`) that holds every response and counts the requests
//! in flight.
//!
//! - A reservation budget: many requests at once of one user, each holding its estimate
//!   (`x-max-tokens`), admit no more than the budget holds estimates; once settled the
//!   budget has been charged exactly what the admitted requests used. Today's
//!   check-then-charge recipe (`examples/envoy-tokens`) admits them all.
//! - A concurrency limit: the backend never sees more than `max_in_flight` of one user's
//!   requests, and the slots come back after each stream.
//! - An Envoy killed mid-request: its holds and slots come back after their TTL.
//! - Two meshlimit replicas on one Redis behind two Envoys: one budget, one limit.
//! - Settles from an Envoy whose client certificate `--give-back-from` does not name are
//!   refused: its holds stay until their TTL.
//!
//! Every request of a wave is decided while the backend holds all admitted responses (its
//! gate closed), so the counts do not depend on the machine's speed; every wait is
//! bounded in count and time.

mod support;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::backend::Backend;
use support::envoy::{Envoy, HOLDS_EXAMPLE, Reply, Shipped, TOKENS_EXAMPLE};
use support::pki::Pki;
use support::process::Meshlimit;
use support::redis::RedisServer;
use tempfile::TempDir;
use tokio::time::Instant;

/// The budget of `config/holds.yaml`: 10,000 tokens an hour per user.
const BUDGET: u64 = 10_000;
const REFILL_PER_SECOND: f64 = 10_000.0 / 3_600.0;
/// Its concurrency limit: 5 streams in flight per user.
const MAX_IN_FLIGHT: usize = 5;
/// The estimate every request of the budget's waves sends (`x-max-tokens`).
const ESTIMATE: u64 = 1_500;
/// Bound on a wave being decided, and on what a settle changes being seen.
const BOUND: Duration = Duration::from_secs(30);

/// `examples/<example>/config`, meshlimit's config of that example.
fn example_config(example: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(example)
        .join("config")
}

/// `config/holds.yaml` with every hold's ttl `ttl` (a Go duration), in a directory of its
/// own.
fn holds_config_with_ttl(ttl: &str) -> TempDir {
    let mut text = std::fs::read_to_string(example_config("envoy-holds").join("holds.yaml"))
        .expect("reading the example's config");
    for from in ["ttl: 5m", "ttl: 10m"] {
        assert_eq!(text.matches(from).count(), 1, "{from} in holds.yaml");
        text = text.replace(from, &format!("ttl: {ttl}"));
    }
    let dir = TempDir::new().expect("tempdir");
    std::fs::write(dir.path().join("holds.yaml"), text).expect("writing the config");
    dir
}

/// An example's Envoy in front of `server` (at `grpc`), its backend cluster sent to
/// `backend`; `edits` as [`support::envoy::example_on`] takes them.
async fn envoy_on(
    shipped: Shipped,
    grpc: SocketAddr,
    backend: &Backend,
    edits: Vec<(&'static str, Vec<String>)>,
) -> Envoy {
    let upstream = backend.addr;
    Envoy::start(2, move |ports| {
        support::envoy::example_on(shipped, ports, grpc, Some(upstream), &edits)
    })
    .await
}

/// What one request of a wave sends.
#[derive(Debug, Clone)]
struct Ask {
    path: &'static str,
    user: &'static str,
    /// `x-max-tokens`, the estimate held.
    estimate: Option<u64>,
    /// `x-llm-tokens`: what the backend says the answer used.
    used: Option<u64>,
    /// An `x-request-id` of the client's own.
    id: Option<&'static str>,
}

impl Ask {
    /// A request of the budget's route: estimate [`ESTIMATE`], `used` tokens used.
    fn tokens(user: &'static str, used: u64) -> Ask {
        Ask {
            path: "/v1/chat",
            user,
            estimate: Some(ESTIMATE),
            used: Some(used),
            id: None,
        }
    }

    /// A request of the concurrency limit's route.
    fn stream(user: &'static str) -> Ask {
        Ask {
            path: "/streams/chat",
            user,
            estimate: None,
            used: None,
            id: None,
        }
    }

    async fn send(&self, envoy: SocketAddr) -> std::io::Result<Reply> {
        let (estimate, used) = (
            self.estimate.map(|e| e.to_string()),
            self.used.map(|u| u.to_string()),
        );
        let mut headers = vec![("x-user-id", self.user)];
        if let Some(estimate) = &estimate {
            headers.push(("x-max-tokens", estimate));
        }
        if let Some(used) = &used {
            headers.push(("x-llm-tokens", used));
        }
        if let Some(id) = self.id {
            headers.push(("x-request-id", id));
        }
        support::envoy::request(envoy, self.path, &headers).await
    }
}

/// Requests sent all at once while the backend holds every response: each decided
/// (refused at once, or held by the backend) before any admitted one ends.
struct Wave {
    tasks: Vec<tokio::task::JoinHandle<std::io::Result<Reply>>>,
    answered: Arc<AtomicUsize>,
    /// The backend's requests in flight once every request was decided.
    admitted: usize,
}

impl Wave {
    /// Sends `asks[i]` through `envoys[i % envoys.len()]` at once, the backend's gate
    /// closed, and waits (at most [`BOUND`]) until every request was answered or is held
    /// by the backend.
    async fn send(backend: &Backend, envoys: &[SocketAddr], asks: Vec<Ask>) -> Wave {
        backend.close();
        let before = backend.in_flight();
        let answered = Arc::new(AtomicUsize::new(0));
        let n = asks.len();
        let tasks = asks
            .into_iter()
            .enumerate()
            .map(|(i, ask)| {
                let (envoy, answered) = (envoys[i % envoys.len()], answered.clone());
                tokio::spawn(async move {
                    let reply = ask.send(envoy).await;
                    answered.fetch_add(1, Ordering::SeqCst);
                    reply
                })
            })
            .collect();
        let deadline = Instant::now() + BOUND;
        let admitted = loop {
            let held = backend.in_flight() - before;
            if answered.load(Ordering::SeqCst) + held == n {
                break held;
            }
            assert!(
                Instant::now() < deadline,
                "{n} requests not decided within {BOUND:?}: {} answered, {held} held",
                answered.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        Wave {
            tasks,
            answered,
            admitted,
        }
    }

    /// The answers so far, all refusals: every request not admitted got 429.
    fn refused(&self) -> usize {
        self.answered.load(Ordering::SeqCst)
    }

    /// Opens the backend's gate and collects every reply, in the order sent.
    async fn finish(self, backend: &Backend) -> Vec<Reply> {
        backend.open();
        let mut replies = Vec::new();
        for task in self.tasks {
            let reply = task.await.expect("a request task").expect("a reply");
            replies.push(reply);
        }
        replies
    }
}

/// How many of `replies` have status `status`.
fn count(replies: &[Reply], status: u16) -> usize {
    replies.iter().filter(|r| r.status == status).count()
}

/// The tokens the admitted requests' answers reported used.
fn used(replies: &[Reply]) -> u64 {
    replies
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| {
            r.header("x-tokens-used")
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or_else(|| panic!("no x-tokens-used: {r:?}"))
        })
        .sum()
}

/// meshlimit's answer (over `POST /json`, at `http`) to a check of 0 hits of `entries`
/// in domain `llm`, which spends nothing: (code, remaining).
async fn peek(http: SocketAddr, entries: &[(&str, &str)]) -> (String, u64) {
    let entries: Vec<_> = entries
        .iter()
        .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
        .collect();
    let body = serde_json::json!({
        "domain": "llm",
        "descriptors": [{"entries": entries, "hits_addend": 0}],
    });
    let (status, text) = support::http_post(http, "/json", &body.to_string()).await;
    // 429 when the answer is OVER_LIMIT.
    assert!(matches!(status, 200 | 429), "POST /json: {status} {text}");
    let answer: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    let status = &answer["statuses"][0];
    let remaining = status["limitRemaining"].as_u64().unwrap_or(0);
    (status["code"].as_str().unwrap_or("").to_string(), remaining)
}

/// `user`'s tokens left.
async fn budget(http: SocketAddr, user: &str) -> u64 {
    peek(http, &[("user_id", user)]).await.1
}

/// `user`'s free stream slots.
async fn free_slots(http: SocketAddr, user: &str) -> u64 {
    peek(http, &[("generic_key", "streams"), ("user_id", user)])
        .await
        .1
}

/// The first bucket of the rule `descriptor` (`k=v,k2=v2` in domain `llm`) matches, as
/// `GET /bucket` shows it: its level, holds and slots.
async fn bucket(http: SocketAddr, descriptor: &str) -> serde_json::Value {
    let path = format!("/bucket?domain=llm&descriptor={descriptor}");
    let (status, text) = support::http_get(http, &path).await;
    assert_eq!(status, 200, "GET {path}: {text}");
    let mut answer: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    answer["limits"][0].take()
}

/// `user`'s budget's holds in force and their hits together.
async fn holds(http: SocketAddr, user: &str) -> (u64, u64) {
    let bucket = bucket(http, &format!("user_id={user}")).await;
    let held = &bucket["held"];
    (
        held["holds"].as_u64().expect("holds"),
        held["hits"].as_u64().expect("hits"),
    )
}

/// `user`'s stream slots in use.
async fn slots_in_use(http: SocketAddr, user: &str) -> u64 {
    let bucket = bucket(http, &format!("generic_key=streams,user_id={user}")).await;
    bucket["slots"]["in_use"].as_u64().expect("slots in use")
}

/// Asks `what` of meshlimit at `http` until `done` holds of it (at most [`BOUND`]); the
/// last value.
async fn wait_until<F, Fut>(what: &str, mut ask: F, done: impl Fn(u64) -> bool) -> u64
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = u64>,
{
    let deadline = Instant::now() + BOUND;
    loop {
        let value = ask().await;
        if done(value) {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not seen within {BOUND:?}: last {value}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The budget's waves: 64 requests of `user`, estimate [`ESTIMATE`], each using a
/// different number of tokens below it.
fn budget_wave(user: &'static str) -> Vec<Ask> {
    (0..64).map(|i| Ask::tokens(user, 100 + 11 * i)).collect()
}

/// Checks a budget wave of 64 requests: exactly as many admitted as estimates fit in
/// [`BUDGET`], all the others refused; once settled, the budget (as `http` reports it)
/// has been charged exactly what the admitted used, give or take the refill since
/// `start`. The admitted count and tokens charged.
async fn assert_budget_held(
    backend: &Backend,
    envoys: &[SocketAddr],
    http: SocketAddr,
    user: &'static str,
) -> (usize, u64) {
    let start = Instant::now();
    let wave = Wave::send(backend, envoys, budget_wave(user)).await;
    let fits = (BUDGET / ESTIMATE) as usize;
    assert_eq!(
        (wave.admitted, wave.refused()),
        (fits, 64 - fits),
        "(admitted, refused) while none had finished"
    );
    // Held: the estimates are taken, the refill aside.
    assert_eq!(
        holds(http, user).await,
        (fits as u64, fits as u64 * ESTIMATE)
    );
    let held = budget(http, user).await;
    assert!(
        held < BUDGET - fits as u64 * ESTIMATE + refill(start) + 1,
        "{held} left while {fits} estimates of {ESTIMATE} are held"
    );
    let replies = wave.finish(backend).await;
    assert_eq!(count(&replies, 200), fits, "{replies:?}");
    assert_eq!(count(&replies, 429), 64 - fits, "{replies:?}");
    let charged = used(&replies);
    // The settles land after their responses: wait for what was not used to come back.
    let left = wait_until(
        "the settles",
        || budget(http, user),
        |left| left >= BUDGET - charged,
    )
    .await;
    assert!(
        left <= BUDGET - charged + refill(start) + 1,
        "{left} left after {charged} used of {BUDGET}"
    );
    assert_eq!(holds(http, user).await, (0, 0));
    (fits, charged)
}

/// Tokens refilled since `start`, rounded up.
fn refill(start: Instant) -> u64 {
    (start.elapsed().as_secs_f64() * REFILL_PER_SECOND).ceil() as u64
}

/// Checks a concurrency wave of `n` requests of `user`: exactly [`MAX_IN_FLIGHT`]
/// admitted, the backend never seeing more at once, the others refused; then the slots
/// come back.
async fn assert_streams_capped(
    backend: &Backend,
    envoys: &[SocketAddr],
    http: SocketAddr,
    user: &'static str,
    n: usize,
) {
    backend.reset_max();
    let wave = Wave::send(backend, envoys, vec![Ask::stream(user); n]).await;
    assert_eq!(
        (wave.admitted, wave.refused()),
        (MAX_IN_FLIGHT, n - MAX_IN_FLIGHT),
        "(admitted, refused)"
    );
    assert_eq!(free_slots(http, user).await, 0);
    assert_eq!(slots_in_use(http, user).await, MAX_IN_FLIGHT as u64);
    let replies = wave.finish(backend).await;
    assert_eq!(count(&replies, 200), MAX_IN_FLIGHT, "{replies:?}");
    assert_eq!(count(&replies, 429), n - MAX_IN_FLIGHT, "{replies:?}");
    assert!(
        backend.max_in_flight() <= MAX_IN_FLIGHT,
        "the backend saw more"
    );
    // Every slot is given back once its stream is done.
    wait_until(
        "the slots back",
        || free_slots(http, user),
        |free| free == MAX_IN_FLIGHT as u64,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_budget_admits_only_the_estimates_it_holds_and_is_charged_what_was_used() {
    let server = Meshlimit::start(&example_config("envoy-holds"), &[]).await;
    let backend = Backend::start().await;
    let envoy = envoy_on(HOLDS_EXAMPLE, server.grpc, &backend, vec![]).await;

    let (admitted, charged) =
        assert_budget_held(&backend, &[envoy.listener(0)], server.http, "alice").await;
    eprintln!("budget: {admitted} of 64 admitted, {charged} tokens charged");
    // Another user's budget is whole.
    assert!(budget(server.http, "bob").await >= BUDGET);
    // A request that says no estimate is not let through unaccounted.
    let reply = support::envoy::request(envoy.listener(0), "/v1/chat", &[("x-user-id", "bob")])
        .await
        .expect("a reply");
    assert_eq!(reply.status, 400, "{reply:?}");
    assert_eq!(backend.received(), admitted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn check_then_charge_admits_the_whole_wave() {
    // Today's recipe: a check of 0 hits before the request, the charge after it. The
    // checks see the budget whole until the first charge lands, so all 64 are admitted.
    let server = Meshlimit::start(&example_config("envoy-tokens"), &[]).await;
    let backend = Backend::start().await;
    let envoy = envoy_on(TOKENS_EXAMPLE, server.grpc, &backend, vec![]).await;

    let wave = Wave::send(&backend, &[envoy.listener(0)], budget_wave("alice")).await;
    assert_eq!((wave.admitted, wave.refused()), (64, 0));
    let replies = wave.finish(&backend).await;
    assert_eq!(count(&replies, 200), 64);
    assert_eq!(backend.max_in_flight(), 64);
    // What they used, 28,576 tokens of 10,000, is charged after the fact: the budget is
    // in debt.
    let charged = used(&replies);
    assert!(charged > BUDGET);
    let deadline = Instant::now() + BOUND;
    while peek(server.http, &[("user_id", "alice")]).await.0 != "OVER_LIMIT" {
        assert!(Instant::now() < deadline, "no debt within {BOUND:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    eprintln!("check then charge: 64 of 64 admitted, {charged} tokens charged");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_concurrency_limit_caps_the_streams_in_flight_and_slots_come_back() {
    let server = Meshlimit::start(&example_config("envoy-holds"), &[]).await;
    let backend = Backend::start().await;
    let envoy = envoy_on(HOLDS_EXAMPLE, server.grpc, &backend, vec![]).await;
    let envoys = [envoy.listener(0)];

    assert_streams_capped(&backend, &envoys, server.http, "alice", 32).await;
    // A second wave: the slots came back.
    assert_streams_capped(&backend, &envoys, server.http, "alice", 32).await;
    // Another user has slots of their own.
    assert_eq!(free_slots(server.http, "bob").await, MAX_IN_FLIGHT as u64);

    // A client's own x-request-id is replaced by one of Envoy's: three requests at once
    // with one id take three slots (with the client's id, two would be refused).
    let same = Ask {
        id: Some("chosen-by-the-client"),
        ..Ask::stream("carol")
    };
    let wave = Wave::send(&backend, &envoys, vec![same; 3]).await;
    assert_eq!((wave.admitted, wave.refused()), (3, 0));
    assert_eq!(count(&wave.finish(&backend).await, 200), 3);
}

/// An Envoy that keeps a client's own `x-request-id` (as Envoy 1.40 does for loopback and
/// private peers when `internal_address_config` lists no ranges) lets the client name its
/// slot. A request reusing the name of one in flight is refused, and its settle, which
/// Envoy sends after every stream, must not free the slot of the one still running.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_refused_request_reusing_a_slots_name_does_not_free_it() {
    let server = Meshlimit::start(&example_config("envoy-holds"), &[]).await;
    let backend = Backend::start().await;
    let internal = "          internal_address_config: { cidr_ranges: [{ address_prefix: 192.0.2.1, prefix_len: 32 }] }\n";
    // An empty list: Envoy's default ranges, loopback and private addresses, are internal.
    let keep = "          internal_address_config: { cidr_ranges: [] }\n";
    let envoy = envoy_on(
        HOLDS_EXAMPLE,
        server.grpc,
        &backend,
        vec![(internal, vec![keep.to_string()])],
    )
    .await;
    let envoys = [envoy.listener(0)];
    let same = Ask {
        id: Some("chosen-by-the-client"),
        ..Ask::stream("mallory")
    };

    let first = Wave::send(&backend, &envoys, vec![same.clone()]).await;
    assert_eq!(first.admitted, 1);
    // One by one, each refused, its settle sent once its 429 is: were it to free the
    // slot, the next would be admitted.
    let mut refused = Vec::new();
    for i in 0..8 {
        let before = calls(server.http).await;
        let wave = Wave::send(&backend, &envoys, vec![same.clone()]).await;
        assert_eq!((wave.admitted, wave.refused()), (0, 1), "request {i}");
        wait_until(
            "its hold and settle",
            || calls(server.http),
            |n| n == before + 2,
        )
        .await;
        refused.push(wave);
    }
    assert_eq!(slots_in_use(server.http, "mallory").await, 1);
    assert_eq!(backend.max_in_flight(), 1);
    for wave in refused {
        assert_eq!(count(&wave.finish(&backend).await, 429), 1);
    }
    assert_eq!(count(&first.finish(&backend).await, 200), 1);
    // The last settle, the running request's, frees the slot.
    wait_until(
        "the slot back",
        || slots_in_use(server.http, "mallory"),
        |n| n == 0,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn holds_and_slots_of_a_killed_envoy_come_back_after_their_ttl() {
    let config = holds_config_with_ttl("2s");
    let server = Meshlimit::start(config.path(), &[]).await;
    after_a_killed_envoy(&server).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_redis_holds_and_slots_of_a_killed_envoy_come_back_after_their_ttl() {
    let redis = RedisServer::start();
    let config = holds_config_with_ttl("2s");
    let server = Meshlimit::start_on_redis(config.path(), &redis.url(), "error", 1000, &[]).await;
    after_a_killed_envoy(&server).await;
}

/// Kills an Envoy in front of `server` (its holds' ttl 2 s) while it has requests in
/// flight; checks that their holds and slots come back after the ttl, and that a new
/// Envoy is admitted as before.
async fn after_a_killed_envoy(server: &Meshlimit) {
    const TTL: Duration = Duration::from_secs(2);
    let backend = Backend::start().await;
    let envoy = envoy_on(HOLDS_EXAMPLE, server.grpc, &backend, vec![]).await;
    let start = Instant::now();

    let streams = Wave::send(
        &backend,
        &[envoy.listener(0)],
        vec![Ask::stream("alice"); 8],
    )
    .await;
    let tokens = Wave::send(&backend, &[envoy.listener(0)], budget_wave("alice")).await;
    let fits = (BUDGET / ESTIMATE) as usize;
    assert_eq!((streams.admitted, tokens.admitted), (MAX_IN_FLIGHT, fits));
    // Envoy dies with every admitted request in flight: no settle is ever sent.
    drop(envoy);
    let (left, free) = (
        budget(server.http, "alice").await,
        free_slots(server.http, "alice").await,
    );
    let (held, in_use) = (
        holds(server.http, "alice").await,
        slots_in_use(server.http, "alice").await,
    );
    if start.elapsed() < TTL {
        assert_eq!(held, (fits as u64, fits as u64 * ESTIMATE));
        assert_eq!(in_use, MAX_IN_FLIGHT as u64);
        assert!(
            left < BUDGET - fits as u64 * ESTIMATE + refill(start) + 1,
            "{left}"
        );
        assert_eq!(free, 0);
    }
    for wave in [streams, tokens] {
        backend.open();
        for task in wave.tasks {
            let _ = task.await.expect("a request task");
        }
    }
    // After the ttl, both come back whole.
    wait_until(
        "the slots back",
        || free_slots(server.http, "alice"),
        |free| free == MAX_IN_FLIGHT as u64,
    )
    .await;
    wait_until(
        "the estimates back",
        || budget(server.http, "alice"),
        |left| left >= BUDGET,
    )
    .await;
    assert!(start.elapsed() >= TTL);
    assert_eq!(holds(server.http, "alice").await, (0, 0));
    assert_eq!(slots_in_use(server.http, "alice").await, 0);

    // A new Envoy is admitted as before.
    let envoy = envoy_on(HOLDS_EXAMPLE, server.grpc, &backend, vec![]).await;
    let envoys = [envoy.listener(0)];
    assert_streams_capped(&backend, &envoys, server.http, "alice", 8).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_on_one_redis_hold_one_budget_and_one_limit() {
    let redis = RedisServer::start();
    let config = example_config("envoy-holds");
    let one = Meshlimit::start_on_redis(&config, &redis.url(), "error", 1000, &[]).await;
    let two = Meshlimit::start_on_redis(&config, &redis.url(), "error", 1000, &[]).await;
    let backend = Backend::start().await;
    let envoy_one = envoy_on(HOLDS_EXAMPLE, one.grpc, &backend, vec![]).await;
    let envoy_two = envoy_on(HOLDS_EXAMPLE, two.grpc, &backend, vec![]).await;
    let envoys = [envoy_one.listener(0), envoy_two.listener(0)];

    let (admitted, charged) = assert_budget_held(&backend, &envoys, one.http, "alice").await;
    eprintln!("redis budget: {admitted} of 64 admitted over two Envoys, {charged} charged");
    let (left_one, left_two) = (
        budget(one.http, "alice").await,
        budget(two.http, "alice").await,
    );
    assert!(
        left_one.abs_diff(left_two) <= 1,
        "{left_one} and {left_two}"
    );

    assert_streams_capped(&backend, &envoys, two.http, "alice", 32).await;
    assert_streams_capped(&backend, &envoys, one.http, "alice", 32).await;
}

/// The first sample of meshlimit's (at `http`) metrics whose line starts with `prefix`.
async fn metric(http: SocketAddr, prefix: &str) -> u64 {
    let (status, metrics) = support::http_get(http, "/metrics").await;
    assert_eq!(status, 200, "GET /metrics: {metrics}");
    metrics
        .lines()
        .find(|line| line.starts_with(prefix))
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no {prefix} in {metrics}"))
}

/// Calls meshlimit (at `http`) answered with an error for their request, such as a
/// give-back it refused.
async fn refused_calls(http: SocketAddr) -> u64 {
    metric(
        http,
        r#"ratelimit_service_should_rate_limit_error{err_type="service_error"}"#,
    )
    .await
}

/// `ShouldRateLimit` calls meshlimit (at `http`) answered.
async fn calls(http: SocketAddr) -> u64 {
    metric(http, "ratelimit_service_total_requests{").await
}

/// The SAN `--give-back-from` allows.
const TRUSTED: &str = "gateway.mesh.test";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn only_a_caller_allowed_to_give_back_settles_its_holds() {
    let pki = Pki::new();
    pki.issue("server", "DNS:localhost,IP:127.0.0.1", 1);
    pki.issue("trusted", &format!("DNS:{TRUSTED}"), 2);
    pki.issue("other", "DNS:other.mesh.test", 3);
    let config = holds_config_with_ttl("3s");
    let mut args = pki.grpc_mtls("server");
    args.extend(["--give-back-from".to_string(), format!("san:{TRUSTED}")]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let server = Meshlimit::start(config.path(), &args).await;
    let backend = Backend::start().await;
    let over_tls = |client: &str| {
        vec![(
            "    load_assignment:\n      cluster_name: meshlimit\n",
            vec![format!(
                "{}    load_assignment:\n      cluster_name: meshlimit\n",
                support::envoy::upstream_tls(&pki, "localhost", Some(client))
            )],
        )]
    };
    let trusted = envoy_on(HOLDS_EXAMPLE, server.grpc, &backend, over_tls("trusted")).await;
    let other = envoy_on(HOLDS_EXAMPLE, server.grpc, &backend, over_tls("other")).await;
    let http = server.http;

    // Through the trusted Envoy: the hold is settled at once, 1,500 held and 100 used.
    let reply = Ask::tokens("alice", 100)
        .send(trusted.listener(0))
        .await
        .expect("a reply");
    assert_eq!(reply.status, 200, "{reply:?}");
    let start = Instant::now();
    let left = wait_until(
        "alice's settle",
        || budget(http, "alice"),
        |left| left >= BUDGET - 100,
    )
    .await;
    assert!(left <= BUDGET - 100 + refill(start) + 1, "{left}");
    assert_eq!(holds(http, "alice").await, (0, 0));

    // Through the other: admitted (holding is not giving back), but its settle is
    // refused whole, the part that would charge what the request used beyond its
    // estimate (4,000 of 1,500) included: the estimate stays held until the ttl, then
    // comes back whole, and what the request used is never charged.
    let start = Instant::now();
    let reply = Ask::tokens("bob", 4_000)
        .send(other.listener(0))
        .await
        .expect("a reply");
    assert_eq!(reply.status, 200, "{reply:?}");
    // The refused settle is counted as a call answered with an error.
    wait_until("a refused settle", || refused_calls(http), |n| n == 1).await;
    let (held, hold) = (budget(http, "bob").await, holds(http, "bob").await);
    if start.elapsed() < Duration::from_secs(3) {
        assert_eq!(hold, (1, ESTIMATE));
        assert!(held < BUDGET - ESTIMATE + refill(start) + 1, "{held}");
    }
    wait_until(
        "bob's hold released",
        || budget(http, "bob"),
        |left| left >= BUDGET,
    )
    .await;
    eprintln!(
        "settle refused: bob held {} until the ttl, then had {BUDGET}",
        BUDGET - held
    );

    // Its streams' slots likewise stay taken until the ttl.
    let reply = Ask::stream("carol")
        .send(other.listener(0))
        .await
        .expect("a reply");
    assert_eq!(reply.status, 200, "{reply:?}");
    let start = Instant::now();
    wait_until(
        "a second refused settle",
        || refused_calls(http),
        |n| n == 2,
    )
    .await;
    let (free, in_use) = (
        free_slots(http, "carol").await,
        slots_in_use(http, "carol").await,
    );
    if start.elapsed() < Duration::from_secs(3) {
        assert_eq!((free, in_use), (MAX_IN_FLIGHT as u64 - 1, 1));
    }
    wait_until(
        "carol's slot released",
        || free_slots(http, "carol"),
        |free| free == MAX_IN_FLIGHT as u64,
    )
    .await;
    assert_eq!(refused_calls(http).await, 2);
}

//! The operator's side of the real binary: `/json`, `/rlconfig`, `/explain` and
//! `meshlimit explain`, RateLimit-* response headers, global shadow mode, JSON logs, and
//! the drain after SIGTERM (health fails first, in-flight calls finish).

mod support;

use std::time::Duration;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use serde_json::Value;
use support::process::{self, Meshlimit};
use support::redis::RedisServer;
use support::{eventually_async, http_get, http_post};
use tempfile::TempDir;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_check_response::ServingStatus;

/// Day limits: nothing refills within a test.
const LIMITS: &str = "\
domain: ops
descriptors:
  - key: three
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: named
    rate_limit: {unit: day, requests_per_unit: 5, name: five_a_day, burst: 2}
  - key: shadowed
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: tenant
    rate_limit: {unit: day, requests_per_unit: 100}
    descriptors:
      - key: path
        value: /orders
        rate_limit: {unit: second, requests_per_unit: 10, algorithm: fixed_window}
      - key: path
        value: /free
        rate_limit: {unlimited: true}
";

fn config() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ops.yaml"), LIMITS).expect("writing the config");
    dir
}

fn body(entries: &[(&str, &str)]) -> String {
    let entries: Vec<Value> = entries
        .iter()
        .map(|(k, v)| serde_json::json!({"key": k, "value": v}))
        .collect();
    serde_json::json!({"domain": "ops", "descriptors": [{"entries": entries}]}).to_string()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

fn request(descriptors: &[&[(&str, &str)]]) -> RateLimitRequest {
    support::rls_request("ops", descriptors)
}

async fn call(process: &Meshlimit, descriptors: &[&[(&str, &str)]]) -> RateLimitResponse {
    process.ask(request(descriptors)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_endpoint_answers_like_the_go_server() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &[]).await;

    let (status, text) = http_post(ml.http, "/json", &body(&[("three", "a")])).await;
    assert_eq!(status, 200, "{text}");
    let answer = json(&text);
    assert_eq!(answer["overallCode"], "OK", "{text}");
    let first = &answer["statuses"][0];
    assert_eq!(first["code"], "OK");
    assert_eq!(first["currentLimit"]["requestsPerUnit"], 3);
    assert_eq!(first["currentLimit"]["unit"], "DAY");
    assert_eq!(first["limitRemaining"], 2);
    let reset = first["durationUntilReset"].as_str().expect("a duration");
    assert!(reset.ends_with('s'), "{reset}");

    http_post(ml.http, "/json", &body(&[("three", "a")])).await;
    let (status, text) = http_post(ml.http, "/json", &body(&[("three", "a")])).await;
    assert_eq!(status, 200, "{text}");
    assert!(
        json(&text)["statuses"][0].get("limitRemaining").is_none(),
        "0 is left out, as protojson does: {text}"
    );
    let (status, text) = http_post(ml.http, "/json", &body(&[("three", "a")])).await;
    assert_eq!(status, 429, "{text}");
    assert_eq!(json(&text)["overallCode"], "OVER_LIMIT");
    assert_eq!(json(&text)["statuses"][0]["code"], "OVER_LIMIT");

    // Names are echoed; an unknown domain is OK without limits.
    let (_, text) = http_post(ml.http, "/json", &body(&[("named", "x")])).await;
    assert_eq!(
        json(&text)["statuses"][0]["currentLimit"]["name"],
        "five_a_day"
    );
    let (status, text) = http_post(
        ml.http,
        "/json",
        r#"{"domain":"elsewhere","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
    )
    .await;
    assert_eq!(
        (status, json(&text)["overallCode"].clone()),
        (200, "OK".into())
    );

    // What is not a request, or what the service refuses: 400.
    for bad in [
        "not json",
        r#"{"domain":"","descriptors":[{"entries":[{"key":"k","value":"v"}]}]}"#,
        r#"{"domain":"ops","descriptors":[]}"#,
        r#"{"domain":"ops","descriptors":[{"entries":[],"limit":{"requests_per_unit":1}}]}"#,
    ] {
        let (status, text) = http_post(ml.http, "/json", bad).await;
        assert_eq!(status, 400, "{bad}: {text}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlconfig_lists_rules_version_and_the_last_reload_error() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--reload-debounce-ms", "50"]).await;
    let (status, text) = http_get(ml.http, "/rlconfig").await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("version 1 "), "{text}");
    assert!(text.contains("# last reload error: none"), "{text}");
    for line in [
        "ops.three: unit=DAY requests_per_unit=3, shadow_mode: false, quota_mode: false, burst: 3, algorithm: token_bucket",
        "ops.named: unit=DAY requests_per_unit=5, shadow_mode: false, quota_mode: false, burst: 2, algorithm: token_bucket, name: five_a_day",
        "ops.shadowed: unit=DAY requests_per_unit=1, shadow_mode: true, quota_mode: false",
        "ops.tenant.path_/orders: unit=SECOND requests_per_unit=10, shadow_mode: false, quota_mode: false, burst: 10, algorithm: fixed_window",
        "ops.tenant.path_/free: unlimited, shadow_mode: false, quota_mode: false",
    ] {
        assert!(
            text.lines().any(|l| l.starts_with(line)),
            "no line {line:?} in:\n{text}"
        );
    }

    // A broken edit: reported with file and line, the running rules stay.
    let file = dir.path().join("ops.yaml");
    std::fs::write(&file, "domain: ops\ndescriptors:\n  - key: three\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n").unwrap();
    eventually_async(20, "/rlconfig shows the reload error", || async {
        http_get(ml.http, "/rlconfig")
            .await
            .1
            .contains("last reload error (")
    })
    .await;
    let text = http_get(ml.http, "/rlconfig").await.1;
    assert!(text.contains("ops.yaml:4"), "{text}");
    assert!(text.contains("version 1 "), "{text}");
    assert!(text.contains("ops.three: unit=DAY"), "{text}");

    // A good edit: a new version, no error.
    std::fs::write(
        &file,
        LIMITS.replace("requests_per_unit: 3}", "requests_per_unit: 4}"),
    )
    .unwrap();
    eventually_async(20, "/rlconfig shows version 2", || async {
        http_get(ml.http, "/rlconfig")
            .await
            .1
            .contains("version 2 ")
    })
    .await;
    let text = http_get(ml.http, "/rlconfig").await.1;
    assert!(text.contains("# last reload error: none"), "{text}");
    assert!(
        text.contains("ops.three: unit=DAY requests_per_unit=4,"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_shows_walk_bucket_and_state_without_consuming() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &[]).await;
    http_post(ml.http, "/json", &body(&[("three", "a")])).await;

    for _ in 0..5 {
        let (status, text) = http_get(ml.http, "/explain?domain=ops&descriptor=three%3Da").await;
        assert_eq!(status, 200, "{text}");
        assert!(
            text.contains("matched exact entry") || text.contains("value-less entry \"three\""),
            "{text}"
        );
        assert!(
            text.contains("rule: ops.three: 3 per DAY, burst 3, token_bucket"),
            "{text}"
        );
        assert!(text.contains("bucket: 3:ops5:three1:a"), "{text}");
        assert!(text.contains("state now: OK: 2 remaining"), "{text}");
    }
    // Explaining consumed nothing: the next real hit still finds 2.
    let (_, text) = http_post(ml.http, "/json", &body(&[("three", "a")])).await;
    assert_eq!(json(&text)["statuses"][0]["limitRemaining"], 1, "{text}");

    // The nested-config surprises, spelled out.
    let (_, text) = http_get(
        ml.http,
        "/explain?domain=ops&descriptor=tenant%3Dt1%2Cpath%3D%2Fnope",
    )
    .await;
    assert!(text.contains("2. path=/nope: no match"), "{text}");
    assert!(text.contains("\"path_/free\", \"path_/orders\""), "{text}");
    assert!(text.contains("not a fallback"), "{text}");
    let (_, text) = http_get(ml.http, "/explain?domain=ops&descriptor=nothing%3Dhere").await;
    assert!(text.contains("1. nothing=here: no match"), "{text}");
    assert!(text.contains("result: OK, no limit"), "{text}");
    let (_, text) = http_get(
        ml.http,
        "/explain?domain=ops&descriptor=tenant%3Dt1%2Cpath%3D%2Ffree",
    )
    .await;
    assert!(text.contains("unlimited"), "{text}");
    let (_, text) = http_get(ml.http, "/explain?domain=nowhere&descriptor=a%3Db").await;
    assert!(text.contains("no such domain"), "{text}");

    // POST takes the /json body, several descriptors at once.
    let (status, text) = http_post(
        ml.http,
        "/explain",
        r#"{"domain":"ops","descriptors":[{"entries":[{"key":"shadowed","value":"s"}]},
            {"entries":[{"key":"tenant","value":"t2"},{"key":"path","value":"/orders"}]}]}"#,
    )
    .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains("descriptor 1: shadowed=s"), "{text}");
    assert!(text.contains("shadow_mode"), "{text}");
    assert!(
        text.contains("descriptor 2: tenant=t2, path=/orders"),
        "{text}"
    );
    assert!(text.contains("fixed_window"), "{text}");

    for bad in [
        "/explain?domain=ops",
        "/explain?descriptor=a%3Db",
        "/explain?domain=ops&bogus=1",
    ] {
        assert_eq!(http_get(ml.http, bad).await.0, 400, "{bad}");
    }
}

/// `meshlimit explain … | head -1`: the reader goes away before the text is written, and
/// the command still ends well, without a panic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_into_a_closed_pipe_ends_quietly() {
    let dir = config();
    let config = dir.path().display().to_string();
    let argv = [
        "explain",
        "--config",
        &config,
        "--domain",
        "ops",
        "--descriptor",
        "three=a",
    ];
    let mut child = process::command(&argv)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("running meshlimit explain");
    drop(child.stdout.take());
    let out = tokio::time::timeout(Duration::from_secs(20), child.wait_with_output())
        .await
        .expect("explain hung")
        .expect("waiting for explain");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_command_reads_the_state_from_redis() {
    let redis = RedisServer::start();
    let dir = config();
    let ml = Meshlimit::start(
        dir.path(),
        &["--store", "redis", "--redis-url", &redis.url()],
    )
    .await;
    for _ in 0..2 {
        call(&ml, &[&[("three", "r")]]).await;
    }
    let config = dir.path().display().to_string();
    let out = process::run(&[
        "explain",
        "--config",
        &config,
        "--domain",
        "ops",
        "--descriptor",
        "three=r",
        "--redis-url",
        &redis.url(),
    ])
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("state now: OK: 1 remaining"), "{text}");
    assert!(text.contains("redis key: ml1:{3:ops}5:three1:r"), "{text}");
    // Still one left: explaining took nothing.
    let answer = call(&ml, &[&[("three", "r")]]).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);

    // Offline, the state is not known and the output says so.
    let out = process::run(&[
        "explain",
        "--config",
        &config,
        "--domain",
        "ops",
        "--descriptor",
        "three=r",
    ])
    .await;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("read offline"), "{text}");

    // A config that does not load: an error with the file, non-zero exit.
    std::fs::write(dir.path().join("bad.yaml"), "domain: [").unwrap();
    let out = process::run(&[
        "explain",
        "--config",
        &config,
        "--domain",
        "ops",
        "--descriptor",
        "three=r",
    ])
    .await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.yaml"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_headers_only_when_asked_for() {
    let dir = config();
    let plain = Meshlimit::start(dir.path(), &[]).await;
    assert!(
        call(&plain, &[&[("three", "h")]])
            .await
            .response_headers_to_add
            .is_empty()
    );

    let ml = Meshlimit::start(
        dir.path(),
        &["--response-headers", "--reset-header", "X-Reset"],
    )
    .await;
    let headers = |r: &RateLimitResponse| -> Vec<(String, String)> {
        r.response_headers_to_add
            .iter()
            .map(|h| (h.key.clone(), h.value.clone()))
            .collect()
    };
    let answer = call(&ml, &[&[("three", "h")], &[("named", "h")]]).await;
    let got = headers(&answer);
    // The descriptor with the fewest remaining: named (burst 2, 1 left).
    assert_eq!(got[0], ("RateLimit-Limit".into(), "5".into()), "{got:?}");
    assert_eq!(
        got[1],
        ("RateLimit-Remaining".into(), "1".into()),
        "{got:?}"
    );
    assert_eq!(got[2].0, "X-Reset", "{got:?}");
    let reset: u64 = got[2].1.parse().expect("whole seconds");
    assert!((1..=86_400).contains(&reset), "{got:?}");

    // Over the limit: the over-limit descriptor is the one described.
    call(&ml, &[&[("three", "h")]]).await;
    call(&ml, &[&[("three", "h")]]).await;
    let answer = call(&ml, &[&[("named", "h2")], &[("three", "h")]]).await;
    assert_eq!(answer.overall_code, Code::OverLimit as i32);
    let got = headers(&answer);
    assert_eq!(got[0].1, "3", "{got:?}");
    assert_eq!(got[1].1, "0", "{got:?}");

    // No limit applied: no headers.
    assert!(
        call(&ml, &[&[("unknown", "x")]])
            .await
            .response_headers_to_add
            .is_empty()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_shadow_mode_answers_ok_but_statuses_tell() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--shadow-mode"]).await;
    for _ in 0..3 {
        call(&ml, &[&[("three", "s")]]).await;
    }
    let answer = call(&ml, &[&[("three", "s")]]).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    assert_eq!(answer.statuses[0].code, Code::OverLimit as i32);
    assert!(
        http_get(ml.http, "/rlconfig")
            .await
            .1
            .contains("global shadow mode")
    );
    let metrics = http_get(ml.http, "/metrics").await.1;
    assert!(
        metrics
            .lines()
            .any(|l| l == "ratelimit_service_global_shadow_mode 1"),
        "{metrics}"
    );
}

/// `--quota-mode` (the Go server's `QUOTA_MODE=true`): a request is refused only when
/// every descriptor is over; each status still tells.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_quota_mode_refuses_only_when_every_descriptor_is_over() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--quota-mode"]).await;
    for _ in 0..3 {
        call(&ml, &[&[("three", "q")]]).await;
    }
    let answer = call(&ml, &[&[("three", "q")], &[("three", "fresh")]]).await;
    assert_eq!(answer.overall_code, Code::Ok as i32);
    let codes: Vec<i32> = answer.statuses.iter().map(|s| s.code).collect();
    assert_eq!(codes, [Code::OverLimit as i32, Code::Ok as i32]);
    let alone = call(&ml, &[&[("three", "q")]]).await;
    assert_eq!(alone.overall_code, Code::OverLimit as i32);
    assert!(
        http_get(ml.http, "/rlconfig")
            .await
            .1
            .contains("# global quota mode")
    );
    // /explain says so of a rule that is not in quota mode itself.
    let (status, text) = http_get(ml.http, "/explain?domain=ops&descriptor=three=q").await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("; quota mode (--quota-mode): denies only when"),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &["--log-format", "json"]).await;
    call(&ml, &[&[("three", "j")]]).await;
    let log = ml.log();
    let serving = log
        .lines()
        .find(|l| l.contains("meshlimit serving"))
        .expect("a serving line");
    let line = json(serving);
    assert_eq!(line["level"], "INFO", "{serving}");
    assert_eq!(line["grpc"], ml.grpc.to_string(), "{serving}");
    for line in log.lines().filter(|l| !l.trim().is_empty()) {
        json(line);
    }
}

async fn grpc_health(ml: &Meshlimit, name: &str) -> i32 {
    let mut health = ml.health().await;
    tokio::time::timeout(
        Duration::from_secs(10),
        health.check(HealthCheckRequest {
            service: name.to_string(),
        }),
    )
    .await
    .expect("health check hung")
    .expect("health check")
    .into_inner()
    .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_fails_health_first_and_keeps_answering_while_draining() {
    let dir = config();
    let mut ml = Meshlimit::start(dir.path(), &["--drain-delay-ms", "4000"]).await;
    let mut client = ml.client().await;
    assert_eq!(http_get(ml.http, "/healthcheck").await, (200, "OK".into()));
    ml.sigterm();
    eventually_async(3, "/healthcheck 500 while draining", || async {
        http_get(ml.http, "/healthcheck").await == (500, "draining".into())
    })
    .await;
    for name in [
        "",
        "ratelimit",
        "envoy.service.ratelimit.v3.RateLimitService",
    ] {
        assert_eq!(
            grpc_health(&ml, name).await,
            ServingStatus::NotServing as i32,
            "{name:?}"
        );
    }
    // Still deciding, on an existing connection and on a new one.
    let answer = client
        .should_rate_limit(request(&[&[("three", "d")]]))
        .await
        .expect("answered");
    assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
    assert_eq!(
        call(&ml, &[&[("three", "d")]]).await.overall_code,
        Code::Ok as i32
    );
    let status = ml.wait().await;
    assert!(status.success(), "{status}");
}

/// A call waiting on Redis when SIGTERM arrives gets its answer before the process ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_calls_finish_before_the_process_ends() {
    let redis = RedisServer::start();
    let dir = config();
    let mut ml = Meshlimit::start(
        dir.path(),
        &[
            "--store",
            "redis",
            "--redis-url",
            &redis.url(),
            "--redis-timeout-ms",
            "30000",
            "--drain-delay-ms",
            "0",
        ],
    )
    .await;
    call(&ml, &[&[("three", "warm")]]).await;
    let mut client = ml.client().await;
    // Redis holds the next call until it is unpaused: the call waits inside meshlimit.
    // WRITE mode holds every script call (EVALSHA too), yet lets `CLIENT UNPAUSE` through.
    redis.cli(&["CLIENT", "PAUSE", "30000", "WRITE"]);
    let in_flight = tokio::spawn(async move {
        client
            .should_rate_limit(request(&[&[("three", "f")]]))
            .await
    });
    // Sent to Redis: the warm-up call was the first store call, this one the second.
    eventually_async(20, "the call waiting on the paused Redis", || async {
        let (_, text) = http_get(ml.http, "/metrics").await;
        text.lines()
            .any(|l| l == "meshlimit_redis_cache_misses_total 2")
    })
    .await;
    ml.sigterm();
    // Draining (the operator endpoints stop last), with the call still waiting.
    eventually_async(20, "/healthcheck answers draining", || async {
        http_get(ml.http, "/healthcheck").await == (500, "draining".to_string())
    })
    .await;
    assert!(
        !in_flight.is_finished(),
        "the call should still be waiting on the paused Redis"
    );
    redis.cli(&["CLIENT", "UNPAUSE"]);
    let answer = tokio::time::timeout(Duration::from_secs(15), in_flight)
        .await
        .expect("the in-flight call hung")
        .expect("call task")
        .expect("the in-flight call was answered, not cut off");
    assert_eq!(answer.into_inner().overall_code, Code::Ok as i32);
    let status = ml.wait().await;
    assert!(status.success(), "{status}");
}

/// A config file left empty while a log file next to the config directory is written
/// every 100 ms: one rejection, logged once, shown by `/rlconfig` until the file is put
/// back as it was, which clears it although nothing is swapped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_config_is_logged_once_and_its_error_clears_when_fixed() {
    let root = tempfile::tempdir().expect("tempdir");
    let config_dir = root.path().join("config");
    std::fs::create_dir(&config_dir).unwrap();
    let file = config_dir.join("ops.yaml");
    std::fs::write(&file, LIMITS).unwrap();
    let ml = Meshlimit::start(&config_dir, &["--reload-debounce-ms", "50"]).await;

    std::fs::write(&file, "").unwrap();
    let log = root.path().join("meshlimit.log");
    for i in 0..15 {
        std::fs::write(&log, format!("line {i}\n")).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually_async(20, "/rlconfig shows the reload error", || async {
        http_get(ml.http, "/rlconfig")
            .await
            .1
            .contains("last reload error (")
    })
    .await;
    std::fs::write(&file, LIMITS).unwrap();
    eventually_async(20, "/rlconfig clears the error", || async {
        http_get(ml.http, "/rlconfig")
            .await
            .1
            .contains("# last reload error: none")
    })
    .await;
    let text = http_get(ml.http, "/rlconfig").await.1;
    assert!(text.contains("version 1 "), "nothing was swapped: {text}");
    let rejections = ml.log().matches("config reload rejected").count();
    assert_eq!(rejections, 1, "{}", ml.log());
}

/// A rule with several limits: /rlconfig lists each, /explain shows each with its bucket
/// and which binds, and /json answers with the binding limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_limits_are_listed_explained_and_answered() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = "\
domain: ops
descriptors:
  - key: listed
    rate_limits:
      - {unit: day, requests_per_unit: 2, name: two_a_day}
      - {unit: minute, unit_multiplier: 5, requests_per_unit: 10, algorithm: sliding_window}
";
    std::fs::write(dir.path().join("ops.yaml"), limits).expect("writing the config");
    let ml = Meshlimit::start(dir.path(), &[]).await;

    let text = http_get(ml.http, "/rlconfig").await.1;
    assert!(
        text.contains(
            "ops.listed: unit=DAY requests_per_unit=2, shadow_mode: false, quota_mode: false, \
             burst: 2, algorithm: token_bucket, name: two_a_day; unit=MINUTE requests_per_unit=10, \
             shadow_mode: false, quota_mode: false, burst: 10, algorithm: sliding_window, \
             unit_multiplier: 5"
        ),
        "{text}"
    );

    let (_, text) = http_post(ml.http, "/json", &body(&[("listed", "a")])).await;
    let answer = json(&text);
    assert_eq!(answer["statuses"][0]["limitRemaining"], 1, "{text}");
    assert_eq!(
        answer["statuses"][0]["currentLimit"]["name"], "two_a_day",
        "{text}"
    );

    let (status, text) = http_get(ml.http, "/explain?domain=ops&descriptor=listed%3Da").await;
    assert_eq!(status, 200, "{text}");
    assert!(
        text.contains("rule: ops.listed: 2 limits, all must have room"),
        "{text}"
    );
    assert!(
        text.contains("limit two_a_day: 2 per DAY, burst 2, token_bucket\n    bucket: 3:ops6:listed1:a11:n=two_a_day\n    state now: OK: 1 remaining"),
        "{text}"
    );
    assert!(
        text.contains("limit 5m: 10 per 5 MINUTE, sliding_window\n    bucket: 3:ops6:listed1:a4:p=5m\n    state now: OK: 9 remaining"),
        "{text}"
    );
    assert!(
        text.contains("binds: the status reports this limit (the fewest requests left)"),
        "{text}"
    );
}

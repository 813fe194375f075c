//! What every config source shares, seen through a file source and the real binary: the
//! source, version and last change in `/rlconfig` and the metrics, and starting without a
//! config (`--start-without-config`, `--unhealthy-without-config`). The PostgreSQL and
//! xDS sources have their own suites (tests/postgres.rs, tests/xds.rs).

mod support;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::process::{self, Meshlimit};
use support::{eventually_async, http_get, sample};

const THREE_A_DAY: &str = "\
domain: ops
descriptors:
  - key: three
    rate_limit: {unit: day, requests_per_unit: 3}
";

/// Replaces `file` with `text` in one step: written in a directory of its own on the same
/// file system, which nothing watches, then renamed over it. The watch sees one event, so
/// one edit is one load attempt, which the counts below rely on, however long the test is
/// paused between the write and the rename.
fn replace(file: &std::path::Path, text: &str) {
    let staging = tempfile::tempdir_in(file.parent().unwrap().parent().unwrap()).unwrap();
    let tmp = staging.path().join("next.yaml");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, file).unwrap();
}

/// Answers to `count` requests for `three=<value>`, in order.
async fn codes(ml: &Meshlimit, value: &str, count: usize) -> Vec<i32> {
    let mut out = Vec::new();
    for _ in 0..count {
        let request = support::rls_request("ops", &[&[("three", value)]]);
        out.push(ml.ask(request).await.overall_code);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_its_version_and_last_change_are_shown() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ops.yaml");
    std::fs::write(&file, THREE_A_DAY).unwrap();
    let ml = Meshlimit::start(dir.path(), &["--reload-debounce-ms", "50"]).await;

    let (_, text) = http_get(ml.http, "/rlconfig").await;
    let fingerprint = text
        .split("(fingerprint ")
        .nth(1)
        .and_then(|rest| rest.get(..16))
        .unwrap_or_else(|| panic!("no fingerprint: {text}"))
        .to_string();
    let source_line = format!("# source file version {fingerprint}, last changed 20");
    assert!(text.contains(&source_line), "{text}");
    let (_, metrics) = http_get(ml.http, "/metrics").await;
    let info =
        format!("meshlimit_config_source_info{{source=\"file\",version=\"{fingerprint}\"}} 1");
    assert!(metrics.contains(&info), "{metrics}");
    assert_eq!(sample(&metrics, "meshlimit_config_loaded"), Some("1"));
    assert_eq!(
        sample(&metrics, "meshlimit_config_last_load_failed"),
        Some("0")
    );
    assert_eq!(
        sample(&metrics, "ratelimit_service_config_load_success"),
        Some("1")
    );
    let changed: u64 = sample(&metrics, "meshlimit_config_last_change_timestamp_seconds")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no last change: {metrics}"));
    assert!(changed > 1_700_000_000, "{changed}");

    replace(
        &file,
        "domain: ops\ndescriptors:\n  - key: three\n    oops: 1\n",
    );
    eventually_async(20, "the failed load is in the metrics", || async {
        let (_, metrics) = http_get(ml.http, "/metrics").await;
        sample(&metrics, "meshlimit_config_last_load_failed") == Some("1")
    })
    .await;
    let (_, metrics) = http_get(ml.http, "/metrics").await;
    assert!(
        metrics.contains(&info),
        "the version in force stays: {metrics}"
    );
    assert_eq!(
        sample(&metrics, "ratelimit_service_config_load_error"),
        Some("1")
    );

    replace(&file, &THREE_A_DAY.replace("3}", "4}"));
    eventually_async(20, "the new version is in force", || async {
        let (_, text) = http_get(ml.http, "/rlconfig").await;
        text.contains("# last reload error: none") && !text.contains(&fingerprint)
    })
    .await;
    let (_, metrics) = http_get(ml.http, "/metrics").await;
    assert_eq!(
        sample(&metrics, "meshlimit_config_last_load_failed"),
        Some("0")
    );
    assert_eq!(
        sample(&metrics, "ratelimit_service_config_load_success"),
        Some("2")
    );
}

/// An invalid file at startup is refused, unless told to start without a config: then
/// every request is allowed until a valid file lands, and with `--unhealthy-without-config`
/// health fails until then.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_without_a_config_allows_everything_until_one_loads() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ops.yaml");
    std::fs::write(&file, "domain: ops\ndescriptors: 7\n").unwrap();
    let config = dir.path().display().to_string();

    let refused = process::run_serve(&config, &[]).await;
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("invalid config"), "{stderr}");

    let ml = Meshlimit::start(
        dir.path(),
        &[
            "--start-without-config",
            "--unhealthy-without-config",
            "--reload-debounce-ms",
            "50",
        ],
    )
    .await;
    assert_eq!(codes(&ml, "a", 5).await, [Code::Ok as i32; 5]);
    let (status, body) = http_get(ml.http, "/healthcheck").await;
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("no config loaded yet"), "{body}");
    let (_, text) = http_get(ml.http, "/rlconfig").await;
    assert!(
        text.contains("# source file: no config loaded yet, every request is allowed"),
        "{text}"
    );
    assert!(text.contains("descriptors"), "the problem is shown: {text}");
    let (_, metrics) = http_get(ml.http, "/metrics").await;
    assert_eq!(sample(&metrics, "meshlimit_config_loaded"), Some("0"));

    replace(&file, THREE_A_DAY);
    eventually_async(20, "health turns good once a config loads", || async {
        http_get(ml.http, "/healthcheck").await.0 == 200
    })
    .await;
    let over = Code::OverLimit as i32;
    let ok = Code::Ok as i32;
    assert_eq!(codes(&ml, "b", 4).await, [ok, ok, ok, over]);
    let (_, metrics) = http_get(ml.http, "/metrics").await;
    assert_eq!(sample(&metrics, "meshlimit_config_loaded"), Some("1"));
}

/// Without `--unhealthy-without-config`, a server started without a config is healthy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn starting_without_a_config_is_healthy_by_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ops.yaml"), "domain: ''\n").unwrap();
    let ml = Meshlimit::start(dir.path(), &["--start-without-config"]).await;
    assert_eq!(http_get(ml.http, "/healthcheck").await.0, 200);
    assert_eq!(codes(&ml, "a", 4).await, [Code::Ok as i32; 4]);
}

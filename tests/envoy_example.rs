//! The runnable Envoy examples stay valid for a real Envoy, and their meshlimit configs
//! for meshlimit. (`examples/envoy-tokens` is checked by `tests/envoy_tokens.rs`.)

mod support;

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
    support::envoy::assert_example_validates("envoy-rlqs").await;
}

/// `examples/envoy-holds`, which `tests/envoy_holds.rs` runs on other ports.
#[tokio::test]
async fn the_holds_example_validates() {
    support::envoy::assert_example_validates("envoy-holds").await;
}

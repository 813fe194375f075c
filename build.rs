//! Compiles the descriptors of the gRPC services meshlimit serves (Envoy's rate-limit and
//! quota services, with everything they import) for gRPC server reflection, so that
//! `grpcurl list` and `describe` work without proto files.
//!
//! The `.proto` files are Envoy's, as envoy-types ships them in its crate (`proto/`); its
//! place is asked of `cargo metadata`, which knows it however the crate was fetched
//! (registry, vendored, git). protox compiles them in Rust: no `protoc` to install.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The services' files, under envoy-types' `proto/data-plane-api`.
const SERVICES: &[&str] = &[
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
];

/// Where the files they import sit, under envoy-types' `proto/`.
const INCLUDES: &[&str] = &[
    "data-plane-api",
    "xds",
    "protoc-gen-validate",
    "googleapis",
    "cel-spec/proto",
    "opentelemetry-proto",
    "client_model",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let proto = envoy_types_dir().join("proto");
    let includes: Vec<PathBuf> = INCLUDES
        .iter()
        .map(|dir| proto.join(dir))
        .filter(|dir| dir.is_dir())
        .collect();
    let mut compiler = protox::Compiler::new(&includes)
        .unwrap_or_else(|e| panic!("protox over {}: {e}", proto.display()));
    compiler.include_imports(true).include_source_info(false);
    compiler
        .open_files(SERVICES)
        .unwrap_or_else(|e| panic!("compiling Envoy's service protos: {e:?}"));
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(
        out.join("services.bin"),
        compiler.encode_file_descriptor_set(),
    )
    .expect("writing the descriptor set");
}

/// The directory of the envoy-types package this build uses.
fn envoy_types_dir() -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let manifest = std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    // Offline and for the target alone: a build fetches only the packages of the platforms
    // it builds for, and cargo metadata over every platform would want the others too
    // (Windows-only crates, on a fresh machine).
    let target = std::env::var("TARGET").expect("cargo sets TARGET");
    let output = Command::new(cargo)
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &target])
        .current_dir(&manifest)
        .output()
        .expect("running cargo metadata");
    assert!(
        output.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata's JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let manifest_path = packages
        .iter()
        .find(|p| p["name"] == "envoy-types")
        .and_then(|p| p["manifest_path"].as_str())
        .expect("envoy-types among the packages");
    Path::new(manifest_path)
        .parent()
        .expect("a manifest's directory")
        .to_path_buf()
}

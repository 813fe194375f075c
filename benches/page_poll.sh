#!/usr/bin/env bash
# Does an open operator page slow the decision path? meshlimit under h2load's two.grpc
# (two descriptors, limits never reached; see grpc_h2load.sh), alternately with no page
# open and with POLLERS pages open, each polling /page/state.json every second as the
# page's script does (plus /page/config.json once), in the same run.
#
#   benches/page_poll.sh                          # from the repository root
#   DURATION=5 ROUNDS=5 POLLERS=4 benches/page_poll.sh
#
# Also reports what the page costs to serve: the bytes and time of one state.json.
# Needs: cargo, curl, python3, h2load (nghttp2-client).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-5}
ROUNDS=${ROUNDS:-5}
POLLERS=${POLLERS:-1}
WARMUP=1
H2LOAD=${H2LOAD:-/usr/bin/h2load}
# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh
in_range DURATION 1 10 seconds
in_range ROUNDS 1 9
in_range POLLERS 1 16
need_tools "$H2LOAD" curl python3 cargo

with_work_dir page_poll

cargo build --release --bin meshlimit
MESHLIMIT=${MESHLIMIT:-${CARGO_TARGET_DIR:-target}/release/meshlimit}
write_bodies "$WORK"
write_config "$WORK"
GRPC=$(free_port)
HTTP=$(free_port)
"$MESHLIMIT" serve --config "$WORK/config" --grpc-addr "127.0.0.1:$GRPC" \
    --http-addr "127.0.0.1:$HTTP" --log warn 2>"$WORK/meshlimit.log" &
PID=$!
PIDS+=("$PID")
wait_listening "$GRPC" "$PID"

# One page: config.json once, then state.json?after=<last seq> every second, each answer
# checked to be the page's JSON; runs until killed (at most 20 minutes).
cat >"$WORK/poller.py" <<'PY'
import json, sys, time, urllib.request
base = sys.argv[1]
json.load(urllib.request.urlopen(base + "/page/config.json"))
seq = None
deadline = time.monotonic() + 1200
while time.monotonic() < deadline:
    url = base + "/page/state.json" + ("" if seq is None else f"?after={seq}")
    seq = json.load(urllib.request.urlopen(url))["seq"]
    time.sleep(1)
PY

RESULTS="$WORK/results"
: >"$RESULTS"
run() { # label
    h2load_checked "$PID" "$WORK/h2load.$1.log" -c 4 -m 16 -t 1 -D "$DURATION" \
        --warm-up-time="$WARMUP" -d "$WORK/two.grpc" -H 'content-type: application/grpc' \
        -H 'te: trailers' "http://127.0.0.1:$GRPC$PATH_RLS"
    printf '  %-10s %10.0f req/s   request min/max/mean/sd: %s\n' "$1" "$RPS" "$LATENCY"
    echo "$1 $RPS" >>"$RESULTS"
}

echo
machine_line
# Some history for the page to send: rates of every rule the bench domain has.
h2load_checked "$PID" "$WORK/h2load.warm.log" -n 20000 -c 4 -m 16 -t 1 -d "$WORK/two.grpc" \
    -H 'content-type: application/grpc' -H 'te: trailers' "http://127.0.0.1:$GRPC$PATH_RLS"
sleep 2
size=$(curl -s -o /dev/null -w '%{size_download} bytes in %{time_total} s' "http://127.0.0.1:$HTTP/page/state.json")
echo "one state.json with the whole window: $size"
for round in $(seq "$ROUNDS"); do
    echo "round $round"
    run closed
    POLL_PIDS=()
    for _ in $(seq "$POLLERS"); do
        python3 "$WORK/poller.py" "http://127.0.0.1:$HTTP" &
        POLL_PIDS+=($!)
        PIDS+=($!)
    done
    sleep 1
    run open
    for pid in "${POLL_PIDS[@]}"; do
        kill -0 "$pid" 2>/dev/null || { echo "a poller failed" >&2; exit 1; }
        kill "$pid"
        wait "$pid" 2>/dev/null || true
    done
done
awk -v pollers="$POLLERS" "$AWK_MEDIAN"'
    $1 == "closed" { last = $2; closed += $2; n++ }
    $1 == "open" { r[++rounds] = $2 / last; open += $2 }
    END {
        printf "page open (%d poller(s)) / closed: mean %.1f%%, median of %d rounds %.1f%%\n",
            pollers, 100 * open / closed, rounds, 100 * median(r, rounds)
    }' "$RESULTS"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# gRPC cost per request in instructions: meshlimit against the no-op server
# (examples/noop_rls.rs) twice, as a standard tonic service (`noop`) and on meshlimit's own
# gRPC edge (`direct`: the difference to it is the service layer alone), each run under
# `valgrind --tool=callgrind` while h2load sends it a fixed number of two.grpc requests
# (see benches/grpc_h2load.sh for the body and config).
# Instruction counts do not move with the machine's load the way requests/s do, so this
# shows what the two servers' code costs even on a noisy shared VM; it leaves out the
# kernel (the same sockets and syscalls for both) and waiting.
#
#   benches/grpc_callgrind.sh                  # from the repository root
#   FEW=2000 MANY=12000 benches/grpc_callgrind.sh
#
# Each server runs twice, for FEW and for MANY requests (h2load -c 4 -m 16 -t 1); the
# difference divided by MANY - FEW is the cost of one request with start-up and shutdown
# taken out. Every request must succeed (h2load counts HTTP 200 only; the grpc-status of
# these answers is checked by grpc_h2load.sh).
#
# Needs: cargo, python3, h2load (nghttp2-client), valgrind.
set -euo pipefail

cd "$(dirname "$0")/.."
FEW=${FEW:-2000}
MANY=${MANY:-12000}
if ((FEW < 100 || MANY < FEW + 1000 || MANY > 100000)); then
    echo "need 100 <= FEW, FEW + 1000 <= MANY <= 100000" >&2
    exit 2
fi
# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh
need_tools h2load valgrind python3 cargo

WORK=$(mktemp -d "${TMPDIR:-/tmp}/grpc_callgrind.XXXXXX")
SERVER=
cleanup() {
    if [[ -n $SERVER ]]; then
        kill "$SERVER" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cargo build --release --bin meshlimit --example noop_rls
BIN=${CARGO_TARGET_DIR:-target}/release
write_bodies "$WORK"
write_config "$WORK"

# instructions NAME N: the server's total instructions for start-up, N requests and exit.
instructions() {
    local name=$1 n=$2 port out="$WORK/callgrind.$1.$2" log="$WORK/h2load.$1.$2"
    port=$(free_port)
    local server=("$BIN/examples/noop_rls" "127.0.0.1:$port")
    if [[ $name == direct ]]; then
        server+=(direct)
    elif [[ $name == meshlimit ]]; then
        server=("$BIN/meshlimit" serve --config "$WORK/config" --log warn
            --grpc-addr "127.0.0.1:$port" --http-addr "127.0.0.1:$(free_port)" --drain-delay-ms 0)
    fi
    valgrind --tool=callgrind --callgrind-out-file="$out" "${server[@]}" 2>"$WORK/valgrind.$name.log" &
    SERVER=$!
    wait_listening "$port" "$SERVER" 60
    timeout 600 h2load -n "$n" -c 4 -m 16 -t 1 -d "$WORK/two.grpc" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$port$PATH_RLS" >"$log" 2>&1
    if ! grep -q "^requests: $n total, $n started, $n done, $n succeeded" "$log" ||
        ! grep -q "^status codes: $n 2xx" "$log"; then
        echo "h2load against $name had failures:" >&2
        cat "$log" >&2
        exit 1
    fi
    # SIGTERM: meshlimit drains and exits; the no-op server dies, and callgrind writes its
    # counts either way.
    kill -TERM "$SERVER"
    wait "$SERVER" || true
    SERVER=
    sed -n 's/^summary: \([0-9]*\).*/\1/p' "$out"
}

echo "valgrind: $(valgrind --version); $FEW and $MANY two.grpc requests per server"
declare -A PER
for name in noop direct meshlimit; do
    few=$(instructions "$name" "$FEW")
    many=$(instructions "$name" "$MANY")
    PER[$name]=$(((many - few) / (MANY - FEW)))
    printf '  %-9s %12d instructions for %d requests, %12d for %d: %d per request\n' \
        "$name" "$few" "$FEW" "$many" "$MANY" "${PER[$name]}"
done
awk -v n="${PER[noop]}" -v d="${PER[direct]}" -v m="${PER[meshlimit]}" 'BEGIN {
    printf "meshlimit: %d instructions per request more than the no-op server; no-op / meshlimit %.1f%%\n", m - n, 100 * n / m
    printf "meshlimit: %d instructions per request more than the direct no-op server; direct / meshlimit %.1f%%\n", m - d, 100 * d / m
}'

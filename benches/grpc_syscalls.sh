#!/usr/bin/env bash
# What each gRPC server spends a request on besides instructions: system calls by kind,
# context switches and CPU time, counted by the kernel (perf's software tracepoints, which
# this VM has where it has no hardware counters). Counts barely move with the machine's
# load, unlike requests/s.
#
#   benches/grpc_syscalls.sh                     # from the repository root, at full load
#   RPS=5000 benches/grpc_syscalls.sh            # each of h2load's 4 clients at 5000 req/s
#   REQUESTS=200000 benches/grpc_syscalls.sh     # requests counted per server (default 100000)
#
# Servers, one after the other, each alone on loopback (as in benches/grpc_h2load.sh):
#   noop       examples/noop_rls: the same transport, no work
#   memory     meshlimit serve on the embedded store
#   redis      meshlimit serve --store redis on a redis-server this script starts (strict:
#              every request a script call, coalesced); its redis-server's CPU is printed too
# Each gets two.grpc (two descriptors under limits never reached) from h2load -c 4 -m 16:
# REQUESTS/5 requests to warm up, then REQUESTS counted while `perf stat -p` watches it.
#
# Why: on 2 cores the Redis run has a third busy process (redis-server) beside h2load and the
# server, so its CPU a request at full load says more about sharing the cores than about
# the store; the same counts at a rate the cores keep up with (RPS) tell the two apart.
#
# Needs: cargo, h2load (nghttp2-client), perf (linux-perf), redis-server, python3.
set -euo pipefail

cd "$(dirname "$0")/.."
REQUESTS=${REQUESTS:-100000}
H2LOAD=${H2LOAD:-/usr/bin/h2load}
# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh
in_range REQUESTS 1000 2000000
if [[ -n ${RPS:-} ]]; then
    in_range RPS 100 100000
fi
need_tools "$H2LOAD" perf redis-server python3 cargo

with_work_dir grpc_syscalls

cargo build --release --bin meshlimit --example noop_rls
BIN=${CARGO_TARGET_DIR:-target}/release
write_bodies "$WORK"
write_config "$WORK"

EVENTS=(syscalls:sys_enter_writev syscalls:sys_enter_write syscalls:sys_enter_recvfrom
    syscalls:sys_enter_read syscalls:sys_enter_epoll_wait syscalls:sys_enter_futex
    context-switches task-clock)
if ! perf stat -e "$(
    IFS=,
    echo "${EVENTS[*]}"
)" true >/dev/null 2>&1; then
    echo "perf cannot count ${EVENTS[*]} here (as root, with tracefs mounted?)" >&2
    exit 1
fi

load() { # port count: two.grpc, h2load -c 4 -m 16, at RPS per client if set
    local rate=()
    [[ -n ${RPS:-} ]] && rate=(--rps="$RPS")
    "$H2LOAD" -n "$2" -c 4 -m 16 -t 1 "${rate[@]}" -d "$WORK/two.grpc" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:$1$PATH_RLS" >"$WORK/h2load.log" 2>&1
    if ! grep -q "^requests: $2 total, $2 started, $2 done, $2 succeeded" "$WORK/h2load.log"; then
        echo "h2load did not complete every request:" >&2
        cat "$WORK/h2load.log" >&2
        exit 1
    fi
}

measure() { # name port pid [redis-server pid]
    local name=$1 port=$2 pid=$3 redis_pid=${4:-} before
    wait_listening "$port" "$pid" 30
    load "$port" $((REQUESTS / 5))
    [[ -n $redis_pid ]] && before=$(cpu_ticks "$redis_pid")
    perf stat -x, -e "$(
        IFS=,
        echo "${EVENTS[*]}"
    )" -p "$pid" -o "$WORK/$name.perf" &
    local perf_pid=$!
    sleep 0.3 # perf attaches
    load "$port" "$REQUESTS"
    kill -INT "$perf_pid"
    wait "$perf_pid" || true
    printf '%-8s %s\n' "$name" "$(grep -o 'finished in .*req/s' "$WORK/h2load.log")"
    awk -F, -v n="$REQUESTS" '
        $3 ~ /sys_enter_/ { sub(/.*sys_enter_/, "", $3); printf "  %-22s %7.3f a request\n", $3, $1 / n }
        $3 == "context-switches" { printf "  %-22s %7.3f a request\n", $3, $1 / n }
        $3 == "task-clock" { printf "  %-22s %7.2f µs a request\n", "CPU (task-clock)", $1 * 1000 / n }
    ' "$WORK/$name.perf"
    if [[ -n $redis_pid ]]; then
        local ticks=$(($(cpu_ticks "$redis_pid") - before)) hz
        hz=$(getconf CLK_TCK)
        python3 -c "print('  %-22s %7.2f µs a request (from /proc, warm-up excluded)' % ('redis-server CPU', $ticks / $hz * 1e6 / $REQUESTS))"
    fi
    kill "$pid"
    wait "$pid" 2>/dev/null || true
}

echo "two.grpc, h2load -c 4 -m 16, ${RPS:+$RPS req/s per client, }$REQUESTS requests counted; load average $(cut -d' ' -f1-3 /proc/loadavg)"
port=$(free_port)
"$BIN/examples/noop_rls" "127.0.0.1:$port" >"$WORK/noop.log" 2>&1 &
PIDS+=($!)
measure noop "$port" $!

serve() { # extra arguments: meshlimit on the bench config, on a free port; sets port, pid
    port=$(free_port)
    "$BIN/meshlimit" serve --config "$WORK/config" --grpc-addr "127.0.0.1:$port" \
        --http-addr "127.0.0.1:$(free_port)" --log warn "$@" >>"$WORK/meshlimit.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
}
serve
measure memory "$port" "$pid"

redis_port=$(free_port)
redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
    >"$WORK/redis.log" 2>&1 &
redis_pid=$!
PIDS+=("$redis_pid")
wait_listening "$redis_port" "$redis_pid"
serve --store redis --redis-url "redis://127.0.0.1:$redis_port"
measure redis "$port" "$pid" "$redis_pid"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

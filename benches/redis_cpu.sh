#!/usr/bin/env bash
# Redis' CPU time per decision of meshlimit's Redis store (issue 14, part 3: at most 4 µs of
# Redis CPU per single-descriptor token-bucket decision once calls are batched).
#
#   benches/redis_cpu.sh                                   # from the repository root
#   ROUNDS=5 SECONDS_PER_RUN=5 benches/redis_cpu.sh        # rounds (1..9), seconds a run (1..60)
#   CONCURRENCIES='1 64' benches/redis_cpu.sh              # requests in flight, one run each a round
#   COMPARE=/path/to/other/meshlimit benches/redis_cpu.sh  # that build too, alternating (label `other`)
#
# Other settings (environment): WARMUP (loadgen warm-up seconds, default 1), CONNECTIONS (4),
# THREADS (loadgen runtime threads, 1), STRICT_KEYS (100000), REDIS_TIMEOUT_MS (meshlimit's
# --redis-timeout-ms, 1000: a stall of this shared machine must not fail a run measuring
# CPU), MESHLIMIT (server binary, default release/meshlimit under CARGO_TARGET_DIR or
# target), REDIS_SERVER / REDIS_CLI.
#
# Redis is driven by meshlimit's store alone: examples/loadgen.rs sends the `strict`
# scenario of benches/redis_load.sh (one descriptor, a token bucket never reached, STRICT_KEYS
# users round-robin, so every request is a Redis decision: no over-limit cache hit, no
# lease) to meshlimit serving with --store redis on a redis-server this script starts. Per
# run, on a fresh meshlimit and a flushed Redis:
#   usec       Redis' time in the decision scripts (INFO commandstats: EVALSHA and EVAL,
#              reset just before the load): Redis runs a script on its one main thread,
#              start to end, but this is wall time, so it also counts the time the thread
#              was preempted, which a loaded machine inflates
#   cpu        the CPU time of Redis' main thread meanwhile (INFO cpu): the scripts plus
#              reading and writing the connection; not inflated by preemption
#   decisions  the requests meshlimit sent to Redis meanwhile (its /metrics,
#              meshlimit_redis_cache_misses_total, read before and after the load)
#   calls      script calls: fewer than decisions when meshlimit put waiting requests in
#              one call (src/store/redis/call_queue.rs)
# and prints µs per call, µs per decision, decisions per call and the main thread's CPU µs
# per decision; then the median of each concurrency's rounds. At 1 request in flight every call carries one decision (the cost of
# a call); with more in flight, calls carry several.
#
# Machine note: loadgen, meshlimit and redis-server share the cores; the figure is Redis'
# own time, which the others' load moves less than throughput, but a preempted script is
# counted with its wait (the load average is printed at the start and at the end).
#
# Needs: cargo, curl, python3 (free ports), timeout, redis-server, redis-cli.
set -euo pipefail

cd "$(dirname "$0")/.."
SCRIPT=redis_cpu
# shellcheck source=benches/loadgen_common.sh
source benches/loadgen_common.sh
setting ROUNDS 3 1 9
setting SECONDS_PER_RUN 5 1 60
setting WARMUP 1 0 30
setting CONNECTIONS 4 1 256
setting THREADS 1 1 64
setting STRICT_KEYS 100000 1 1000000
setting REDIS_TIMEOUT_MS 1000 1 60000
export MESHLIMIT_REDIS_TIMEOUT_MS=$REDIS_TIMEOUT_MS
# measure's names for these.
DURATION=$SECONDS_PER_RUN
OVER_KEYS=1
LEASED_KEYS=1
CONCURRENCIES=${CONCURRENCIES:-1 64}
read -r -a CONCURRENCY_LIST <<<"$CONCURRENCIES"
for CONCURRENCY in "${CONCURRENCY_LIST[@]}"; do
    in_range CONCURRENCY 1 10000
done
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
need_tools cargo curl python3 timeout "$REDIS_SERVER" "$REDIS_CLI"

start_work
build_binaries loadgen
write_bench_config
declare -A BUILD=([this]=$MESHLIMIT)
BUILDS=(this)
if [[ -n ${COMPARE:-} ]]; then
    [[ -x $COMPARE ]] || { echo "COMPARE: $COMPARE is not an executable" >&2; exit 2; }
    BUILD[other]=$COMPARE
    BUILDS=(other this)
fi

REDIS_HOST=127.0.0.1
REDIS_PORT=$(free_port)
start redis "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
REDIS_PID=$STARTED
redis_wait redis

# Around each timed load (measure's hooks): Redis' script statistics reset, and the store's
# decisions counted, so both cover the same load, warm-up included.
timed_load_starts() {
    [[ $(redis_cli config resetstat) == OK ]] || fail_with_log "CONFIG RESETSTAT failed" redis
    DECISIONS_BEFORE=$(redis_decisions) || fail_with_log "no Redis counters on /metrics" meshlimit
    CPU_BEFORE=$(redis_cpu_us) || fail_with_log "no main-thread CPU in INFO cpu" redis
}
timed_load_ended() {
    local after
    after=$(redis_decisions) || fail_with_log "no Redis counters on /metrics" meshlimit
    DECISIONS=$((after - DECISIONS_BEFORE))
    read -r CALLS USEC <<<"$(redis_script_time)"
    CPU=$(($(redis_cpu_us) - CPU_BEFORE))
}

# Result lines: build concurrency round decisions calls usec cpu
RESULTS="$WORK/results"
: >"$RESULTS"
ROW='%-6s %9s %5s %8s %10s %8s %10s %8s %11s %8s %10s\n'

echo
echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$("$REDIS_SERVER" --version | cut -d' ' -f1-3) on 127.0.0.1:$REDIS_PORT; Redis timeout $REDIS_TIMEOUT_MS ms"
for build in "${BUILDS[@]}"; do
    echo "build $build: ${BUILD[$build]}"
done
echo "each run: ${WARMUP}s warm-up + ${SECONDS_PER_RUN}s measured, strict scenario (one token" \
    "bucket per request, $STRICT_KEYS keys); loadgen --connections $CONNECTIONS --threads $THREADS;" \
    "$ROUNDS round(s)"
echo
# one_run BUILD ROUND: one measured run of MESHLIMIT at CONCURRENCY, its line printed and
# kept.
one_run() {
    measure strict redis "strict.$1.c$CONCURRENCY.$2" --concurrency "$CONCURRENCY"
    if ((DECISIONS <= 0 || CALLS <= 0)); then
        echo "no decisions measured (decisions $DECISIONS, script calls $CALLS)" >&2
        exit 1
    fi
    echo "$1 $CONCURRENCY $2 $DECISIONS $CALLS $USEC $CPU" >>"$RESULTS"
    # shellcheck disable=SC2059 # ROW is the format
    printf "$ROW" "$1" "$CONCURRENCY" "$2" "$(field rps "$RESULT")" "$DECISIONS" "$CALLS" "$USEC" \
        "$(awk -v u="$USEC" -v c="$CALLS" 'BEGIN { printf "%.2f", u / c }')" \
        "$(awk -v u="$USEC" -v d="$DECISIONS" 'BEGIN { printf "%.2f", u / d }')" \
        "$(awk -v d="$DECISIONS" -v c="$CALLS" 'BEGIN { printf "%.2f", d / c }')" \
        "$(awk -v u="$CPU" -v d="$DECISIONS" 'BEGIN { printf "%.2f", u / d }')"
}

# shellcheck disable=SC2059 # ROW is the format
printf "$ROW" build 'in flight' round 'req/s' decisions calls 'script µs' 'µs/call' 'µs/decision' 'dec/call' 'cpu µs/dec'
for ((round = 1; round <= ROUNDS; round++)); do
    for CONCURRENCY in "${CONCURRENCY_LIST[@]}"; do
        for build in "${BUILDS[@]}"; do
            MESHLIMIT=${BUILD[$build]}
            one_run "$build" "$round"
        done
    done
done

echo
echo "medians over the rounds (target: at most 4 µs of Redis CPU per decision, batched)"
for build in "${BUILDS[@]}"; do
    for CONCURRENCY in "${CONCURRENCY_LIST[@]}"; do
        awk -v b="$build" -v c="$CONCURRENCY" "$AWK_MEDIAN"'
            $1 == b && $2 == c {
                n++; per_call[n] = $6 / $5; per_decision[n] = $6 / $4; batch[n] = $4 / $5; cpu[n] = $7 / $4
            }
            END {
                printf "  %-6s %5s in flight: %7.2f µs/call  %6.2f µs/decision  %5.2f decisions/call  " \
                    "main thread %6.2f CPU µs/decision  (%d rounds)\n",
                    b, c, median(per_call, n), median(per_decision, n), median(batch, n), median(cpu, n), n
            }' "$RESULTS"
    done
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

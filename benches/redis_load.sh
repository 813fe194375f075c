#!/usr/bin/env bash
# gRPC load on meshlimit with the embedded store and with the Redis store, in the same run,
# alternately, driven by examples/loadgen.rs (which checks every answer).
#
#   benches/redis_load.sh                                  # from the repository root
#   STORES=memory DURATION=3 benches/redis_load.sh         # embedded store only, 3 s runs
#   DURATION=10 ROUNDS=3 benches/redis_load.sh             # seconds per run (1..60), alternations (1..5)
#
# Other settings (environment): WARMUP (loadgen warm-up seconds, default 1), CONNECTIONS (4),
# CONCURRENCY (64 requests in flight), THREADS (loadgen runtime threads, 1), STRICT_KEYS
# (100000), OVER_KEYS (10000), LEASED_KEYS (8), LEASE (1000), SCENARIOS ("strict over
# leased"), MESHLIMIT (server binary, default release/meshlimit under CARGO_TARGET_DIR or
# target), REDIS_SERVER / REDIS_CLI (redis-server, redis-cli).
#
# Stores, each run on a fresh server (loopback, free ports, config domain `bench` below):
#   memory  target/release/meshlimit serve --config DIR --grpc-addr .. --http-addr ..
#   redis   the same plus --store redis --redis-url redis://127.0.0.1:R, against a
#           redis-server this script starts (--save '' --appendonly no); FLUSHALL before
#           every Redis run, so each starts from empty buckets as the embedded one does.
#
# Scenarios (domain bench, one descriptor user_id=u<i>, method=<scenario>):
#   strict  STRICT_KEYS users round-robin, 1M/s burst 1M each: every answer OK (expect ok);
#           almost every request is a key Redis has not seen for a while, so in strict
#           mode each one is a Redis round trip.
#   over    OVER_KEYS users, 1/hour burst 1: a priming pass takes each user's one token
#           (every answer must be OK, not timed), then the timed run must get OVER_LIMIT
#           only (expect over): answered by the Redis store's over-limit cache.
#   leased  LEASED_KEYS hot users, 1M/s burst 1M (expect ok); the Redis server gets
#           --redis-lease LEASE, so most requests are answered from leased tokens. 1000
#           tokens is a millisecond of this limit's refill, the accuracy cost per replica;
#           each top-up is a Redis round trip, which at LEASE=64 (a top-up every ~32
#           requests per key) costs about 10% of the throughput on 2 shared cores.
#
# For every Redis run, Redis' time in the decision scripts (INFO commandstats, reset before the
# timed load) and the requests meshlimit sent to Redis meanwhile (its /metrics) give Redis'
# µs per script call and per decision, and decisions per call; their means per scenario
# follow the table (benches/redis_cpu.sh measures the strict case alone, at set loads).
#
# loadgen exits non-zero on any gRPC error or unexpected answer (warm-up included), which
# stops the script; each run is then bounded by loadgen's own clock plus `timeout`.
# Machine note: loadgen, meshlimit and redis-server share the cores; run on a quiet
# machine (the load average is printed at the start and at the end).
#
# Needs: cargo, curl, python3 (free ports), timeout; for STORES with redis: redis-server,
# redis-cli.
set -euo pipefail

cd "$(dirname "$0")/.."
SCRIPT=redis_load
# shellcheck source=benches/loadgen_common.sh
source benches/loadgen_common.sh
setting DURATION 10 1 60 # measured seconds per run
setting ROUNDS 1 1 5
setting WARMUP 1 0 30
setting CONNECTIONS 4 1 256
setting CONCURRENCY 64 1 10000
setting THREADS 1 1 64
setting STRICT_KEYS 100000 1 1000000
setting OVER_KEYS 10000 1 1000000
setting LEASED_KEYS 8 1 1000000
setting LEASE 1000 1 1000000
STORES=${STORES:-memory redis}
read -r -a STORE_LIST <<<"$STORES"
USE_REDIS=0
for store in "${STORE_LIST[@]}"; do
    case $store in
    memory) ;;
    redis) USE_REDIS=1 ;;
    *)
        echo "STORES: unknown store '$store' (memory, redis)" >&2
        exit 2
        ;;
    esac
done
if ((${#STORE_LIST[@]} == 0)); then
    echo "STORES is empty" >&2
    exit 2
fi
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
TOOLS=(cargo curl python3 timeout)
if ((USE_REDIS)); then
    TOOLS+=("$REDIS_SERVER" "$REDIS_CLI")
fi
need_tools "${TOOLS[@]}"

start_work
build_binaries loadgen
write_bench_config

REDIS_HOST=127.0.0.1
REDIS_PORT=
REDIS_PID=
if ((USE_REDIS)); then
    REDIS_PORT=$(free_port)
    start redis "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
    REDIS_PID=$STARTED
    redis_wait redis
fi

# Around each timed load of the Redis store (measure's hooks): Redis' script statistics
# reset and the store's decisions counted, so both cover that load, warm-up included.
timed_load_starts() {
    [[ $1 == redis ]] || return 0
    [[ $(redis_cli config resetstat) == OK ]] || fail_with_log "CONFIG RESETSTAT failed" redis
    DECISIONS_BEFORE=$(redis_decisions) || fail_with_log "no Redis counters on /metrics" meshlimit
}
timed_load_ended() {
    [[ $1 == redis ]] || return 0
    local after calls usec
    after=$(redis_decisions) || fail_with_log "no Redis counters on /metrics" meshlimit
    read -r calls usec <<<"$(redis_script_time)"
    SCRIPT_LINE="$((after - DECISIONS_BEFORE)) $calls $usec"
}

# --- runs -------------------------------------------------------------------------------
# Result lines: scenario store round rps p50 p99 p999 requests ok over
RESULTS="$WORK/results"
: >"$RESULTS"
# Redis runs' script lines: scenario round decisions calls usec
SCRIPTS="$WORK/scripts"
: >"$SCRIPTS"
ROW='%-8s %-7s %5s %10s %10s %10s %10s %9s %9s %9s\n'

run() { # scenario store round
    local scenario=$1 store=$2 round=$3
    measure "$scenario" "$store" "$scenario.$store.$round" --concurrency "$CONCURRENCY"

    local rps p50 p99 p999 n ok over
    rps=$(field rps "$RESULT")
    p50=$(field p50_us "$RESULT")
    p99=$(field p99_us "$RESULT")
    p999=$(field p999_us "$RESULT")
    n=$(field requests "$RESULT")
    ok=$(field ok "$RESULT")
    over=$(field over "$RESULT")
    echo "$scenario $store $round $rps $p50 $p99 $p999 $n $ok $over" >>"$RESULTS"
    if [[ $store == redis ]]; then
        echo "$scenario $round $SCRIPT_LINE" >>"$SCRIPTS"
    fi
    # shellcheck disable=SC2059 # ROW is the format
    printf "$ROW" "$scenario" "$store" "$round" "$rps" "$p50" "$p99" "$p999" "$n" "$ok" "$over"
}

echo
echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
if ((USE_REDIS)); then
    echo "stores: ${STORE_LIST[*]}; $("$REDIS_SERVER" --version | cut -d' ' -f1-3) on 127.0.0.1:$REDIS_PORT"
else
    echo "stores: ${STORE_LIST[*]}"
fi
echo "each run: ${WARMUP}s warm-up + ${DURATION}s measured; loadgen --connections $CONNECTIONS" \
    "--concurrency $CONCURRENCY --threads $THREADS; $ROUNDS round(s); a fresh server per run"
echo
# shellcheck disable=SC2059 # ROW is the format
printf "$ROW" scenario store round 'req/s' 'p50 µs' 'p99 µs' 'p99.9 µs' requests OK OVER
for scenario in ${SCENARIOS:-strict over leased}; do
    for ((round = 1; round <= ROUNDS; round++)); do
        for store in "${STORE_LIST[@]}"; do
            run "$scenario" "$store" "$round"
        done
    done
done

echo
echo "means over the rounds; redis/memory: requests/s ratio (and latency ratios)"
awk '
    { key = $1 " " $2; n[key]++; rps[key] += $4; p50[key] += $5; p99[key] += $6; p999[key] += $7 }
    END {
        printf "%-8s %-7s %10s %10s %10s %10s\n", "scenario", "store", "req/s", "p50 µs", "p99 µs", "p99.9 µs"
        split("strict over leased", scenarios, " ")
        split("memory redis", stores, " ")
        for (i = 1; i <= 3; i++) {
            s = scenarios[i]
            for (j = 1; j <= 2; j++) {
                k = s " " stores[j]
                if (n[k])
                    printf "%-8s %-7s %10.0f %10.1f %10.1f %10.1f\n", s, stores[j],
                        rps[k] / n[k], p50[k] / n[k], p99[k] / n[k], p999[k] / n[k]
            }
            m = s " memory"; r = s " redis"
            if (n[m] && n[r] && rps[m] > 0 && p50[m] > 0 && p99[m] > 0 && p999[m] > 0)
                printf "%-8s %-7s %9.1f%% %9.2fx %9.2fx %9.2fx\n", s, "r/m",
                    100 * (rps[r] / n[r]) / (rps[m] / n[m]), (p50[r] / n[r]) / (p50[m] / n[m]),
                    (p99[r] / n[r]) / (p99[m] / n[m]), (p999[r] / n[r]) / (p999[m] / n[m])
            else
                printf "%-8s %-7s %10s\n", s, "r/m", "-"
        }
    }' "$RESULTS"
if ((USE_REDIS)); then
    echo
    echo "Redis' script time (INFO commandstats), means over the rounds; decisions: requests"
    echo "meshlimit sent to Redis (cache misses), calls: EVALSHA/EVAL"
    awk '
        { n[$1]++; d[$1] += $3; c[$1] += $4; u[$1] += $5 }
        END {
            printf "%-8s %10s %10s %10s %12s %10s\n", "scenario", "decisions", "calls", "µs/call", "µs/decision", "dec/call"
            split("strict over leased", scenarios, " ")
            for (i = 1; i <= 3; i++) {
                s = scenarios[i]
                if (!n[s]) continue
                if (c[s] > 0 && d[s] > 0)
                    printf "%-8s %10.0f %10.0f %10.2f %12.2f %10.2f\n", s, d[s] / n[s], c[s] / n[s],
                        u[s] / c[s], u[s] / d[s], d[s] / c[s]
                else
                    printf "%-8s %10.0f %10.0f %10s %12s %10s\n", s, d[s] / n[s], c[s] / n[s], "-", "-", "-"
            }
        }' "$SCRIPTS"
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

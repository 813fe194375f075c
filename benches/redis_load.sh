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
# leased"), MESHLIMIT (server binary,
# default target/release/meshlimit), REDIS_SERVER / REDIS_CLI (redis-server, redis-cli).
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
# Redis' own cost: for each Redis run, the script calls' time in Redis (INFO commandstats,
# EVALSHA and EVAL, reset before the timed load) per call and per decision (requests
# meshlimit sent to Redis in that time: meshlimit_redis_cache_misses_total), and the
# decisions per call (how many waiting requests each call coalesced).
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
setting() { # name default min max: the environment's value, checked, into the variable
    local value=${!1:-$2}
    if [[ ! $value =~ ^[0-9]+$ ]] || ((value < $3 || value > $4)); then
        echo "$1 must be an integer in $3..$4 (got '$value')" >&2
        exit 2
    fi
    printf -v "$1" '%s' "$value"
}
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
for tool in "${TOOLS[@]}"; do
    command -v "$tool" >/dev/null || {
        echo "$tool not found" >&2
        exit 2
    }
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/redis_load.XXXXXX")
declare -A LIVE # pid -> name, of every process started and not yet reaped
stop() { # pid...: SIGTERM, up to 10 s to exit, then SIGKILL; reaps them
    local pid i alive
    for pid in "$@"; do
        kill "$pid" 2>/dev/null || true
    done
    for ((i = 0; i < 100; i++)); do
        alive=0
        for pid in "$@"; do
            if kill -0 "$pid" 2>/dev/null; then
                alive=1
            fi
        done
        ((alive)) || break
        sleep 0.1
    done
    for pid in "$@"; do
        kill -9 "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
        unset "LIVE[$pid]"
    done
}
cleanup() {
    if ((${#LIVE[@]})); then
        stop "${!LIVE[@]}"
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cargo build --release --bin meshlimit --example loadgen
MESHLIMIT=${MESHLIMIT:-target/release/meshlimit} # override to compare another build
LOADGEN=target/release/examples/loadgen

# --- config -----------------------------------------------------------------------------
CONF="$WORK/config"
mkdir "$CONF"
cat >"$CONF/bench.yaml" <<'EOF'
# benches/redis_load.sh: one rule per scenario, each user its own bucket.
domain: bench
descriptors:
  - key: user_id
    descriptors:
      # strict: never over; every request a decision on a (mostly cold) key.
      - key: method
        value: strict
        rate_limit: { unit: second, requests_per_unit: 1000000, burst: 1000000 }
      # over: one token per user per hour; once it is taken, every answer is OVER_LIMIT.
      - key: method
        value: over
        rate_limit: { unit: hour, requests_per_unit: 1, burst: 1 }
      # leased: a few hot users, never over.
      - key: method
        value: leased
        rate_limit: { unit: second, requests_per_unit: 1000000, burst: 1000000 }
EOF
"$MESHLIMIT" validate --config "$CONF"

# --- processes --------------------------------------------------------------------------
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
start() { # name command... ; sets STARTED to the pid
    local name=$1
    shift
    "$@" >"$WORK/$name.log" 2>&1 &
    STARTED=$!
    LIVE[$STARTED]=$name
}
fail_with_log() { # message name
    echo "$1" >&2
    echo "--- $WORK/$2.log:" >&2
    tail -n 40 "$WORK/$2.log" >&2 || true
    exit 1
}

REDIS_PORT=
REDIS_PID=
if ((USE_REDIS)); then
    REDIS_PORT=$(free_port)
    start redis "$REDIS_SERVER" --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no
    REDIS_PID=$STARTED
    for ((i = 0; ; i++)); do
        kill -0 "$REDIS_PID" 2>/dev/null || fail_with_log "redis-server exited" redis
        if [[ $(timeout 2 "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null) == PONG ]]; then
            break
        fi
        ((i < 100)) || fail_with_log "redis-server on port $REDIS_PORT: no PONG after 10 s" redis
        sleep 0.1
    done
fi
redis_flush() {
    kill -0 "$REDIS_PID" 2>/dev/null || fail_with_log "redis-server is not running" redis
    local reply
    reply=$(timeout 10 "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" flushall)
    if [[ $reply != OK ]]; then
        echo "redis FLUSHALL answered '$reply'" >&2
        exit 1
    fi
}

# The script calls Redis ran since the last CONFIG RESETSTAT: "calls usec".
redis_script_stats() {
    timeout 10 "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" info commandstats |
        awk -F '[:=,]' '/^cmdstat_evalsha?:/ { calls += $3; usec += $5 } END { print calls + 0, usec + 0 }'
}
# Requests the running meshlimit sent to Redis so far.
redis_misses() {
    curl -s --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
        awk '$1 == "meshlimit_redis_cache_misses_total" { print $2; found = 1 } END { if (!found) print 0 }'
}

# Starts meshlimit for one run and waits for GET /healthcheck to answer 200; sets
# SERVER_PID, GRPC_PORT and HTTP_PORT.
start_server() { # store scenario
    local http_port extra=()
    GRPC_PORT=$(free_port)
    http_port=$(free_port)
    HTTP_PORT=$http_port
    if [[ $1 == redis ]]; then
        extra=(--store redis --redis-url "redis://127.0.0.1:$REDIS_PORT")
        if [[ $2 == leased ]]; then
            extra+=(--redis-lease "$LEASE")
        fi
    fi
    start meshlimit "$MESHLIMIT" serve --config "$CONF" --grpc-addr "127.0.0.1:$GRPC_PORT" \
        --http-addr "127.0.0.1:$http_port" --log warn "${extra[@]}"
    SERVER_PID=$STARTED
    local i code
    for ((i = 0; ; i++)); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            wait "$SERVER_PID" && code=0 || code=$?
            unset "LIVE[$SERVER_PID]"
            fail_with_log "meshlimit ($1 store, $2) exited with status $code before it was ready" meshlimit
        fi
        code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
            "http://127.0.0.1:$http_port/healthcheck" || true)
        if [[ $code == 200 ]]; then
            return 0
        fi
        ((i < 100)) || fail_with_log "meshlimit ($1 store): /healthcheck not 200 after 10 s" meshlimit
        sleep 0.1
    done
}

# Runs loadgen; the log keeps its output, RESULT holds its machine-readable line.
load() { # log-name loadgen-args...
    local name=$1 limit
    shift
    limit=$((WARMUP + DURATION + 30))
    if ! timeout "$limit" "$LOADGEN" --addr "http://127.0.0.1:$GRPC_PORT" --domain bench \
        --connections "$CONNECTIONS" --concurrency "$CONCURRENCY" --threads "$THREADS" \
        "$@" >"$WORK/$name.log" 2>&1; then
        kill -0 "$SERVER_PID" 2>/dev/null || echo "meshlimit is no longer running" >&2
        fail_with_log "loadgen $name failed ($*)" "$name"
    fi
    RESULT=$(sed -n 's/^RESULT //p' "$WORK/$name.log")
    [[ -n $RESULT ]] || fail_with_log "loadgen $name printed no RESULT line" "$name"
}

field() { # key result-line
    local kv
    for kv in $2; do
        if [[ ${kv%%=*} == "$1" ]]; then
            echo "${kv#*=}"
            return 0
        fi
    done
    echo "RESULT has no $1: $2" >&2
    exit 1
}

# --- runs -------------------------------------------------------------------------------
# Result lines: scenario store round rps p50 p99 p999 requests ok over, then Redis µs per
# call, per decision and decisions per call ("- - -" for the embedded store)
RESULTS="$WORK/results"
: >"$RESULTS"
ROW='%-8s %-7s %5s %10s %10s %10s %10s %9s %9s %9s %9s %9s %9s\n'

run() { # scenario store round
    local scenario=$1 store=$2 round=$3 args=()
    if [[ $store == redis ]]; then
        redis_flush
    fi
    start_server "$store" "$scenario"
    case $scenario in
    strict) args=(--method strict --keys "$STRICT_KEYS" --expect ok) ;;
    over)
        # Not part of the table: each user's single token, taken once (round-robin,
        # exactly OVER_KEYS requests), all of which must pass within DURATION.
        load "prime.$store.$round" --method over --keys "$OVER_KEYS" --warmup 0 \
            --duration "$DURATION" --requests "$OVER_KEYS" --expect ok
        if [[ $(field ok "$RESULT") != "$OVER_KEYS" ]]; then
            echo "priming answered $(field ok "$RESULT") OK of $OVER_KEYS" >&2
            exit 1
        fi
        args=(--method over --keys "$OVER_KEYS" --expect over)
        ;;
    leased) args=(--method leased --keys "$LEASED_KEYS" --expect ok) ;;
    esac
    local misses=0
    if [[ $store == redis ]]; then
        timeout 10 "$REDIS_CLI" -h 127.0.0.1 -p "$REDIS_PORT" config resetstat >/dev/null
        misses=$(redis_misses)
    fi
    load "$scenario.$store.$round" "${args[@]}" --warmup "$WARMUP" --duration "$DURATION"
    local script="- - -"
    if [[ $store == redis ]]; then
        local calls usec decided
        read -r calls usec < <(redis_script_stats)
        decided=$(($(redis_misses) - misses))
        script=$(awk -v c="$calls" -v u="$usec" -v d="$decided" 'BEGIN {
            if (c > 0 && d > 0) printf "%.2f %.2f %.1f", u / c, u / d, d / c; else print "- - -" }')
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || fail_with_log "meshlimit ($store) died during the run" meshlimit
    stop "$SERVER_PID"

    local rps p50 p99 p999 n ok over
    rps=$(field rps "$RESULT")
    p50=$(field p50_us "$RESULT")
    p99=$(field p99_us "$RESULT")
    p999=$(field p999_us "$RESULT")
    n=$(field requests "$RESULT")
    ok=$(field ok "$RESULT")
    over=$(field over "$RESULT")
    echo "$scenario $store $round $rps $p50 $p99 $p999 $n $ok $over $script" >>"$RESULTS"
    # shellcheck disable=SC2059,SC2086 # ROW is the format; script is three fields
    printf "$ROW" "$scenario" "$store" "$round" "$rps" "$p50" "$p99" "$p999" "$n" "$ok" "$over" $script
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
printf "$ROW" scenario store round 'req/s' 'p50 µs' 'p99 µs' 'p99.9 µs' requests OK OVER \
    'Redis µs/call' 'µs/decision' 'per call'
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
    $11 != "-" { rn[$1]++; upc[$1] += $11; upd[$1] += $12; dpc[$1] += $13 }
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
            if (rn[s])
                printf "%-8s %-7s Redis %.2f µs a call, %.2f µs a decision, %.1f decisions a call\n", s, "script",
                    upc[s] / rn[s], upd[s] / rn[s], dpc[s] / rn[s]
        }
    }' "$RESULTS"
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

# shellcheck shell=bash
# Sourced by benches/redis_load.sh and benches/redis_latency.sh (from the repository root):
# meshlimit under examples/loadgen.rs on the three scenarios (see redis_load.sh's header),
# each run on a fresh server, every process started here stopped on exit.
#
# Before sourcing, a script sets SCRIPT (its name, for the work directory); it may set NS
# (a command prefix such as `ip netns exec NAME`, under which meshlimit, loadgen, curl and
# redis-cli run) and SERVER_FLAGS (an array of extra flags for every meshlimit serve it
# starts, e.g. to compare settings), and define cleanup_more (called on exit after the processes are stopped,
# with the script's exit status).
# It then calls the `setting`s, `start_work`, `build_binaries`, `write_bench_config`, and
# per run `measure`. It may define timed_load_starts and timed_load_ended (each called with
# the store, around the timed load of every `measure`, the server still running), e.g. to
# read Redis' script time for exactly that load.

# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh

if ! declare -p NS >/dev/null 2>&1; then
    NS=()
fi
if ! declare -p SERVER_FLAGS >/dev/null 2>&1; then
    SERVER_FLAGS=()
fi

setting() { # name default min max: the environment's value (or the default), checked
    printf -v "$1" '%s' "${!1:-$2}"
    in_range "$1" "$3" "$4"
}

# --- processes --------------------------------------------------------------------------
declare -A LIVE=() # pid -> name, of every process started and not yet reaped
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
cleanup() { # on exit: the processes, cleanup_more, then WORK unless the script failed
    local status=$?
    if ((${#LIVE[@]})); then
        stop "${!LIVE[@]}"
    fi
    if declare -F cleanup_more >/dev/null; then
        cleanup_more "$status"
    fi
    if ((status == 0)); then
        rm -rf "$WORK"
    else
        echo "logs kept in $WORK" >&2
    fi
}
# start_work: WORK, a fresh directory removed on exit (kept if the script failed), with the
# exit traps.
start_work() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$SCRIPT.XXXXXX")
    trap cleanup EXIT
    trap 'exit 130' INT TERM
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

# build_binaries EXAMPLE...: the release meshlimit and the examples (loadgen among them);
# sets BIN (their directory, under CARGO_TARGET_DIR if set), MESHLIMIT (unless set:
# another build to compare) and LOADGEN.
build_binaries() {
    local args=() example
    for example in "$@"; do
        args+=(--example "$example")
    done
    cargo build --release --bin meshlimit "${args[@]}"
    BIN=${CARGO_TARGET_DIR:-target}/release
    MESHLIMIT=${MESHLIMIT:-$BIN/meshlimit}
    LOADGEN=$BIN/examples/loadgen
}

# write_bench_config: $WORK/config, the domain `bench` with one rule per scenario.
write_bench_config() {
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
}

# --- Redis ------------------------------------------------------------------------------
# The Redis server the redis store uses: REDIS_HOST, REDIS_PORT, REDIS_PID (set by the
# script); it is reached from NS.
redis_cli() { # args...
    timeout 10 "${NS[@]}" "$REDIS_CLI" -h "$REDIS_HOST" -p "$REDIS_PORT" "$@"
}
# redis_wait NAME: until the Redis server REDIS_PID (log NAME) answers PING, 10 s at most.
redis_wait() {
    local i
    for ((i = 0; ; i++)); do
        kill -0 "$REDIS_PID" 2>/dev/null || fail_with_log "redis-server exited" "$1"
        if [[ $(redis_cli ping 2>/dev/null) == PONG ]]; then
            return 0
        fi
        ((i < 100)) || fail_with_log "redis-server on $REDIS_HOST:$REDIS_PORT: no PONG after 10 s" "$1"
        sleep 0.1
    done
}
redis_flush() {
    kill -0 "$REDIS_PID" 2>/dev/null || fail_with_log "redis-server is not running" redis
    local reply
    reply=$(redis_cli flushall)
    if [[ $reply != OK ]]; then
        echo "redis FLUSHALL answered '$reply'" >&2
        exit 1
    fi
}

# redis_script_time: "calls usec" of the decision scripts since the last CONFIG RESETSTAT,
# EVALSHA and EVAL together (EVAL: a script Redis had forgotten), from INFO commandstats.
redis_script_time() {
    redis_cli info commandstats | tr -d '\r' | awk -F'[:,=]' '
        $1 == "cmdstat_evalsha" || $1 == "cmdstat_eval" { calls += $3; usec += $5 }
        END { printf "%d %d\n", calls, usec }'
}

# redis_cpu_us: the CPU time Redis' main thread has used, in microseconds (INFO cpu, user
# and system): the scripts, and reading and writing its connections. Unlike commandstats'
# usec, which is wall time, it does not count time the thread was preempted.
redis_cpu_us() {
    redis_cli info cpu | tr -d '\r' | awk -F: '
        $1 == "used_cpu_sys_main_thread" || $1 == "used_cpu_user_main_thread" { s += $2; n++ }
        END { if (n != 2) exit 1; printf "%.0f\n", s * 1000000 }'
}

# redis_decisions: the requests meshlimit (on HTTP_PORT) has sent to Redis since it
# started (meshlimit_redis_cache_misses_total): one decision each, whatever the batching.
redis_decisions() { metrics_sum '^meshlimit_redis_cache_misses_total$'; }

# metrics_sum REGEX [SCALE]: the sum of the samples of meshlimit (on HTTP_PORT) whose
# name and labels match REGEX, times SCALE (1), as a whole number; fails when none does.
metrics_sum() {
    "${NS[@]}" curl -sS --max-time 5 "http://127.0.0.1:$HTTP_PORT/metrics" |
        awk -v re="$1" -v scale="${2:-1}" '$1 ~ re { n += $2; found = 1 }
             END { if (!found) exit 1; printf "%.0f\n", n * scale }'
}

# --- meshlimit and loadgen --------------------------------------------------------------
# Starts meshlimit for one run and waits for GET /healthcheck to answer 200; sets
# SERVER_PID, GRPC_PORT and HTTP_PORT. The redis store uses REDIS_HOST:REDIS_PORT;
# SERVER_FLAGS come last.
start_server() { # store scenario
    local http_port extra=()
    GRPC_PORT=$(free_port)
    http_port=$(free_port)
    HTTP_PORT=$http_port
    if [[ $1 == redis ]]; then
        extra=(--store redis --redis-url "redis://$REDIS_HOST:$REDIS_PORT")
        if [[ $2 == leased ]]; then
            extra+=(--redis-lease "$LEASE")
        fi
    fi
    start meshlimit "${NS[@]}" "$MESHLIMIT" serve --config "$CONF" --grpc-addr "127.0.0.1:$GRPC_PORT" \
        --http-addr "127.0.0.1:$http_port" --log warn "${extra[@]}" "${SERVER_FLAGS[@]}"
    SERVER_PID=$STARTED
    local i code
    for ((i = 0; ; i++)); do
        if ! kill -0 "$SERVER_PID" 2>/dev/null; then
            wait "$SERVER_PID" && code=0 || code=$?
            unset "LIVE[$SERVER_PID]"
            fail_with_log "meshlimit ($1 store, $2) exited with status $code before it was ready" meshlimit
        fi
        code=$("${NS[@]}" curl -s -o /dev/null -w '%{http_code}' --max-time 1 \
            "http://127.0.0.1:$http_port/healthcheck" || true)
        if [[ $code == 200 ]]; then
            return 0
        fi
        ((i < 100)) || fail_with_log "meshlimit ($1 store): /healthcheck not 200 after 10 s" meshlimit
        sleep 0.1
    done
}

# Runs loadgen against 127.0.0.1:GRPC_PORT (SERVER_PID); the log keeps its output, RESULT
# holds its machine-readable line.
load() { # log-name loadgen-args...
    local name=$1 limit
    shift
    limit=$((WARMUP + DURATION + 50)) # the priming of `over` runs up to 20 s, then 10 s of grace
    if ! timeout "$limit" "${NS[@]}" "$LOADGEN" --addr "http://127.0.0.1:$GRPC_PORT" --domain bench \
        --connections "$CONNECTIONS" --threads "$THREADS" "$@" >"$WORK/$name.log" 2>&1; then
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

# measure SCENARIO STORE LABEL [loadgen-args...]: one timed run of SCENARIO on a fresh
# meshlimit with STORE (memory, redis, or noop: examples/noop_rls in NS), Redis flushed
# first; the extra arguments (e.g. --concurrency, --rate) go to the timed run. Sets
# RESULT; the logs are named after LABEL.
measure() {
    local scenario=$1 store=$2 label=$3 args=()
    shift 3
    if [[ $store == redis ]]; then
        redis_flush
    fi
    if [[ $store == noop ]]; then
        GRPC_PORT=$(free_port)
        start noop "${NS[@]}" "$BIN/examples/noop_rls" "127.0.0.1:$GRPC_PORT"
        SERVER_PID=$STARTED
        "${NS[@]}" bash -c "$(declare -f wait_listening); wait_listening $GRPC_PORT $SERVER_PID" ||
            fail_with_log "noop_rls did not start" noop
    else
        start_server "$store" "$scenario"
    fi
    case $scenario in
    strict) args=(--method strict --keys "$STRICT_KEYS" --expect ok) ;;
    over)
        # Not timed: each user's single token, taken once (round-robin, exactly
        # OVER_KEYS requests), all of which must pass within 20 s (whatever DURATION: a
        # short run behind a long round trip on a busy machine needs more than 1 s).
        load "prime.$label" --method over --keys "$OVER_KEYS" --warmup 0 --concurrency "$CONCURRENCY" \
            --duration 20 --requests "$OVER_KEYS" --expect ok
        if [[ $(field ok "$RESULT") != "$OVER_KEYS" ]]; then
            echo "priming answered $(field ok "$RESULT") OK of $OVER_KEYS" >&2
            exit 1
        fi
        args=(--method over --keys "$OVER_KEYS" --expect over)
        ;;
    leased) args=(--method leased --keys "$LEASED_KEYS" --expect ok) ;;
    esac
    if declare -F timed_load_starts >/dev/null; then
        timed_load_starts "$store"
    fi
    load "$label" "${args[@]}" --warmup "$WARMUP" --duration "$DURATION" "$@"
    if declare -F timed_load_ended >/dev/null; then
        timed_load_ended "$store"
    fi
    kill -0 "$SERVER_PID" 2>/dev/null || fail_with_log "$store server died during the run" meshlimit
    stop "$SERVER_PID"
}

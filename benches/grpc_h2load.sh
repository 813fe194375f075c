#!/usr/bin/env bash
# gRPC loopback benchmark: meshlimit against a server that answers OK without any work
# (examples/noop_rls.rs), all driven by h2load in the same run, alternately.
#
#   benches/grpc_h2load.sh                       # from the repository root
#   DURATION=5 ROUNDS=3 benches/grpc_h2load.sh   # seconds per run (1..10), alternations
#   ROUNDS=5 SETTINGS='two 4 16' benches/grpc_h2load.sh   # one setting only
#   REDIS=1 DURATION=5 ROUNDS=5 SETTINGS='two 4 16' benches/grpc_h2load.sh   # and on Redis
#   NOOP_EDGE=direct ROUNDS=5 SETTINGS='two 4 16' benches/grpc_h2load.sh      # see noop below
#
# Servers (loopback, free ports):
#   noop       examples/noop_rls, accepting exactly as meshlimit does
#              (meshlimit::net::serve as for its gRPC port): the same transport, no work;
#              a standard tonic service, or with NOOP_EDGE=direct on meshlimit's own gRPC
#              edge (src/grpc/unary.rs), so that the ratio is the service layer's alone.
#   meshlimit  release/meshlimit (under CARGO_TARGET_DIR, or target) serve --config (config/
#              plus the bench domain below): the embedded store
#   redis      with REDIS=1: the same meshlimit with --store redis on a redis-server this
#              script starts (loopback, --save '' --appendonly no): strict mode, every
#              decision an exact script call (two.grpc's limits are never reached, so the
#              over-limit cache never answers); issue 14's target is >= 0.6 of the no-op
#              server. Its Redis' script time per call and per decision (INFO commandstats,
#              the store's /metrics) over the whole run is printed at the end.
#
# Requests (hand-encoded RateLimitRequest, 5-byte gRPC frame header, in $WORK):
#   limited.grpc  domain trading, one descriptor (user_id=alice, method=/market.Data/Quotes):
#                 matches default_method (50/s, burst 5) in config/trading.yaml, so nearly
#                 every answer is OVER_LIMIT: a full match + bucket decision each time.
#   unknown.grpc  domain trading, one descriptor (user_id=alice): no limit at that depth,
#                 so every answer is OK after matching only.
#   two.grpc      domain bench (written next to a copy of config/ for this run), two
#                 descriptors (user_id=alice + method=/trading.TradingService/SubmitOrder;
#                 remote_address=10.0.0.1), each under a limit no run reaches: every answer
#                 is OK after two matches and a two-bucket decision, as a gateway's
#                 requests mostly are.
#
# h2load repeats one body on one key and counts HTTP 200 as success without reading
# grpc-status, so answers are checked outside the timed runs: before the load, one request
# per server and body with curl (HTTP 200, grpc-status 0 trailer, decoded
# RateLimitResponse) and a 20-request burst on meshlimit's limited key with nghttp (must
# turn OVER_LIMIT); after the load, a 20-request nghttp burst per server and body (every
# stream must end with grpc-status 0; answers decoded). Each timed run must have 0 failed,
# 0 errored and only 2xx responses.
#
# Needs: cargo, python3 (standard library only), curl, h2load and nghttp (nghttp2-client);
# with REDIS=1, redis-server and redis-cli.
#
# Each run also prints the CPU its server used a request (user + system, /proc/PID/stat,
# warm-up included at the measured rate), and for the redis server its redis-server's
# too; the summary gives each server's mean. On 2 shared cores a server's CPU a request
# is what bounds its requests/s, so this says where a gap comes from.
#
# Target (issue): meshlimit >= 95% of the no-op server's requests/s; for two.grpc, the
# median of the per-round ratios over ROUNDS=5.
# Machine note: load generator and servers share the cores; run on a quiet machine
# (the load average is printed at the start and at the end).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-2}
# Which "body clients streams" settings to run, separated by ';' (default: all four).
SETTINGS=${SETTINGS:-limited 4 16;unknown 4 16;limited 8 32;two 4 16}
WARMUP=1 # seconds of h2load warm-up per run, not counted
H2LOAD=${H2LOAD:-/usr/bin/h2load}
# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh
in_range DURATION 1 10 seconds
in_range ROUNDS 1 5
REDIS=${REDIS:-0}
in_range REDIS 0 1
NOOP_ARGS=()
case ${NOOP_EDGE:-tonic} in
tonic) ;;
direct) NOOP_ARGS=(direct) ;;
*)
    echo "NOOP_EDGE must be tonic or direct" >&2
    exit 2
    ;;
esac
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
need_tools "$H2LOAD" nghttp curl python3 cargo
if ((REDIS)); then
    need_tools "$REDIS_SERVER" "$REDIS_CLI" timeout
fi

with_work_dir grpc_h2load

cargo build --release --bin meshlimit --example noop_rls
BIN=${CARGO_TARGET_DIR:-target}/release
MESHLIMIT=${MESHLIMIT:-$BIN/meshlimit} # override to compare another build
NOOP=$BIN/examples/noop_rls

# --- request bodies and config ---------------------------------------------------
write_bodies "$WORK"
write_config "$WORK"

# --- servers --------------------------------------------------------------------------
declare -A PORT PID HTTP
start() { # name command...
    local name=$1
    shift
    "$@" >"$WORK/$name.log" 2>&1 &
    PIDS+=($!)
    PID[$name]=$!
}
PORT[noop]=$(free_port)
start noop "$NOOP" "127.0.0.1:${PORT[noop]}" "${NOOP_ARGS[@]}"
serve() { # name extra-arguments...: meshlimit on the bench config
    local name=$1
    shift
    PORT[$name]=$(free_port)
    HTTP[$name]=$(free_port)
    start "$name" "$MESHLIMIT" serve --config "$WORK/config" --grpc-addr "127.0.0.1:${PORT[$name]}" \
        --http-addr "127.0.0.1:${HTTP[$name]}" --log warn "$@"
}
serve meshlimit
SERVERS=(noop meshlimit)
if ((REDIS)); then
    PORT[redis_server]=$(free_port)
    start redis_server "$REDIS_SERVER" --port "${PORT[redis_server]}" --bind 127.0.0.1 --save '' \
        --appendonly no
    wait_listening "${PORT[redis_server]}" "${PID[redis_server]}"
    serve redis --store redis --redis-url "redis://127.0.0.1:${PORT[redis_server]}"
    SERVERS+=(redis)
fi
for server in "${SERVERS[@]}"; do
    wait_listening "${PORT[$server]}" "${PID[$server]}"
done

# --- answer check ---------------------------------------------------------------------
# Decoder for replies: a stream of gRPC frames (flag 0, big-endian length, message), each a
# RateLimitResponse; prints the answers run-length encoded, fails on anything malformed.
cat >"$WORK/decode.py" <<'EOF'
import sys
from grpc_proto import fields, frames

data, want = open(sys.argv[1], "rb").read(), int(sys.argv[2])
CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}

def decode(msg):  # RateLimitResponse{overall_code=1, statuses=2: DescriptorStatus{code=1}}
    overall, statuses = 0, []
    for number, value in fields(msg):
        if number == 1:
            overall = value
        elif number == 2:
            code = dict(fields(value)).get(1, 0)
            statuses.append(CODES.get(code, code))
    return f"overall_code {CODES.get(overall, overall)}, statuses {statuses}"

answers = [decode(message) for message in frames(data)]
assert len(answers) == want, f"{len(answers)} answers, {want} expected"
runs = []
for a in answers:
    if runs and runs[-1][0] == a:
        runs[-1][1] += 1
    else:
        runs.append([a, 1])
print("; ".join(f"{a} (x{n})" if n > 1 else a for a, n in runs))
EOF

# One request with curl: HTTP 200, grpc-status 0 in the trailers, decoded answer.
check() { # server body
    local out="$WORK/reply" hdr="$WORK/headers" answer
    if ! grpc_call "${PORT[$1]}" "$WORK/$2.grpc" "$out" "$hdr"; then
        echo "BAD ANSWER from $1 for $2:" >&2
        cat "$hdr" "$WORK/$1.log" >&2
        exit 1
    fi
    answer=$(python3 "$WORK/decode.py" "$out" 1)
    printf '  %-9s %-13s x1   HTTP 200, grpc-status 0: %s\n' "$1" "$2.grpc" "$answer"
}

# `count` requests multiplexed on one connection with nghttp (curl 7.88 cannot reuse a
# prior-knowledge h2 connection for uploads): every stream must end with grpc-status 0,
# and the decoded answers are printed. On the limited key (burst 5) most are OVER_LIMIT.
check_burst() { # server body count
    local out="$WORK/burst" trailers answer
    # -v output is not binary-safe next to the data, so headers and data take two passes.
    trailers=$(nghttp -v -n -m "$3" -d "$WORK/$2.grpc" -H 'content-type: application/grpc' \
        -H 'te: trailers' "http://127.0.0.1:${PORT[$1]}$PATH_RLS" | grep -ac 'grpc-status: 0$' || true)
    nghttp -m "$3" -d "$WORK/$2.grpc" -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:${PORT[$1]}$PATH_RLS" >"$out"
    if [[ $trailers != "$3" ]]; then
        echo "BAD ANSWERS from $1 for $2: $trailers of $3 streams ended with grpc-status 0" >&2
        exit 1
    fi
    answer=$(python3 "$WORK/decode.py" "$out" "$3")
    printf '  %-9s %-13s x%-3s HTTP 200, grpc-status 0: %s\n' "$1" "$2.grpc" "$3" "$answer"
}

# --- load -----------------------------------------------------------------------------
# Result lines: label server body c m req/s cpu-µs/request
RESULTS="$WORK/results"
: >"$RESULTS"
# per_request TICKS: TICKS of CPU per request of the last run, in µs. The ticks span the
# warm-up as well, which h2load does not count: its requests are taken at the measured rate.
per_request() {
    awk -v t="$1" -v hz="$(getconf CLK_TCK)" -v rps="$RPS" -v s=$((WARMUP + DURATION)) \
        'BEGIN { printf "%.1f", t / hz * 1e6 / (rps * s) }'
}
run() { # label server body clients streams
    local before redis_before cpu redis_cpu=""
    before=$(cpu_ticks "${PID[$2]}")
    if [[ $2 == redis ]]; then
        redis_before=$(cpu_ticks "${PID[redis_server]}")
    fi
    h2load_checked "${PID[$2]}" "$WORK/h2load.$1.$2.log" -c "$4" -m "$5" -t 1 -D "$DURATION" \
        --warm-up-time="$WARMUP" -d "$WORK/$3.grpc" -H 'content-type: application/grpc' \
        -H 'te: trailers' "http://127.0.0.1:${PORT[$2]}$PATH_RLS"
    cpu=$(per_request $(($(cpu_ticks "${PID[$2]}") - before)))
    if [[ $2 == redis ]]; then
        redis_cpu=" + redis-server $(per_request $(($(cpu_ticks "${PID[redis_server]}") - redis_before)))"
    fi
    printf '%-4s %-9s %-13s -c %-2s -m %-2s %10.0f req/s   CPU µs/request %s%s   request min/max/mean/sd: %s\n' \
        "$1" "$2" "$3.grpc" "$4" "$5" "$RPS" "$cpu" "$redis_cpu" "$LATENCY"
    echo "$1 $2 $3 $4 $5 $RPS $cpu" >>"$RESULTS"
}

ratio() { # body clients streams: each server / the no-op server, best of and mean of the
    # runs, and the median of each round's ratio (a round: one run of each server in turn,
    # the no-op server first, each compared with that round's no-op run)
    awk -v b="$1" -v c="$2" -v m="$3" -v servers="${SERVERS[*]}" "$AWK_MEDIAN"'
        $3 == b && $4 == c && $5 == m {
            n[$2]++; sum[$2] += $6; cpu[$2] += $7; if ($6 > best[$2]) best[$2] = $6
            if ($2 == "noop") { last = $6; rounds++ } else r[$2, rounds] = $6 / last
        }
        END {
            printf "  %s -c %s -m %s\n", b ".grpc", c, m
            count = split(servers, names, " ")
            for (i = 1; i <= count; i++) {
                s = names[i]
                printf "    %-9s best %7.0f  mean %7.0f req/s  (%d runs), its own CPU %.1f µs a request\n",
                    s, best[s], sum[s] / n[s], n[s], cpu[s] / n[s]
            }
            for (i = 2; i <= count; i++) {
                s = names[i]
                for (k = 1; k <= rounds; k++) one[k] = r[s, k]
                printf "    %-9s / noop  best %5.1f%%  mean %5.1f%%  median of %d rounds %5.1f%%\n", s,
                    100 * best[s] / best["noop"], 100 * (sum[s] / n[s]) / (sum["noop"] / n["noop"]),
                    rounds, 100 * median(one, rounds)
            }
        }' "$RESULTS"
}

# redis_scripts: what the Redis store's server cost its Redis over the whole run (checks
# included): script calls and their time (INFO commandstats: EVALSHA and EVAL), and the
# requests it sent to Redis (meshlimit_redis_cache_misses_total on its /metrics).
redis_scripts() {
    local decisions
    decisions=$(curl -sS --max-time 5 "http://127.0.0.1:${HTTP[redis]}/metrics" |
        awk '$1 == "meshlimit_redis_cache_misses_total" { print $2 }')
    timeout 10 "$REDIS_CLI" -p "${PORT[redis_server]}" info commandstats | tr -d '\r' |
        awk -F'[:,=]' -v d="${decisions:-0}" '
            $1 == "cmdstat_evalsha" || $1 == "cmdstat_eval" { calls += $3; usec += $5 }
            END {
                if (calls == 0 || d == 0) { print "  no script calls or no decisions counted"; exit }
                printf "  %d requests decided in %d script calls (%.2f a call): %.2f µs of Redis a call, %.2f a request\n",
                    d, calls, d / calls, usec / calls, usec / d
            }'
}

echo
machine_line
for server in "${SERVERS[@]}"; do
    echo "$server on 127.0.0.1:${PORT[$server]} (pid ${PID[$server]})"
done
echo "each run: ${WARMUP}s warm-up + ${DURATION}s measured, h2load -t 1; $ROUNDS round(s) per setting"
echo
echo "answers before load:"
for server in "${SERVERS[@]}"; do
    for body in limited unknown two; do
        check "$server" "$body"
    done
done
for server in "${SERVERS[@]:1}"; do
    check_burst "$server" limited 20
done
echo
echo "runs (alternating ${SERVERS[*]}):"
i=0
IFS=';' read -ra SETTINGS_LIST <<<"$SETTINGS"
for setting in "${SETTINGS_LIST[@]}"; do
    for ((round = 0; round < ROUNDS; round++)); do
        for server in "${SERVERS[@]}"; do
            i=$((i + 1))
            # shellcheck disable=SC2086 # setting is "body clients streams"
            run "$i" "$server" $setting
        done
    done
done
echo
echo "answers after load:"
for server in "${SERVERS[@]}"; do
    for body in limited unknown two; do
        check_burst "$server" "$body" 20
    done
done
echo
echo "each server / no-op, requests/s (targets: meshlimit >= 95%, redis >= 60%):"
for setting in "${SETTINGS_LIST[@]}"; do
    # shellcheck disable=SC2086 # setting is "body clients streams"
    ratio $setting
done
if ((REDIS)); then
    echo
    echo "the redis server's Redis, the whole run:"
    redis_scripts
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# gRPC loopback benchmark: meshlimit against a server that answers OK without any work
# (examples/noop_rls.rs), all driven by h2load in the same run, alternately.
#
#   benches/grpc_h2load.sh                       # from the repository root
#   DURATION=5 ROUNDS=3 benches/grpc_h2load.sh   # seconds per run (1..10), alternations
#   ROUNDS=5 SETTINGS='two 4 16' benches/grpc_h2load.sh   # one setting only
#   REDIS=1 SETTINGS='two 4 16' benches/grpc_h2load.sh    # and meshlimit on Redis (below)
#
# Servers (loopback, free ports):
#   noop       examples/noop_rls, accepting exactly as meshlimit does
#              (meshlimit::net::serve as for its gRPC port): the same transport, no work.
#   meshlimit  target/release/meshlimit serve --config (config/ plus the bench domain below)
#   redis      with REDIS=1: the same with --store redis (strict: every decision a script
#              call, no lease) against a redis-server this script starts (--save ''
#              --appendonly no); after each of its runs, Redis' script time (INFO
#              commandstats, EVALSHA and EVAL, reset before the run) per call and per
#              request sent to Redis (meshlimit_redis_cache_misses_total), and the
#              requests each call decided.
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
# Target (issue): meshlimit >= 95% of the no-op server's requests/s; for two.grpc, the
# median of the per-round ratios over ROUNDS=5. Issue 14: the Redis store (strict) >= 60%
# of the no-op server on two.grpc.
# Machine note: load generator and servers share the cores; run on a quiet machine
# (the load average is printed at the start and at the end).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
if ((DURATION < 1 || DURATION > 10)); then
    echo "DURATION must be 1..10 seconds" >&2
    exit 2
fi
ROUNDS=${ROUNDS:-2}
if ((ROUNDS < 1 || ROUNDS > 5)); then
    echo "ROUNDS must be 1..5" >&2
    exit 2
fi
# Which "body clients streams" settings to run, separated by ';' (default: all four).
SETTINGS=${SETTINGS:-limited 4 16;unknown 4 16;limited 8 32;two 4 16}
WARMUP=1 # seconds of h2load warm-up per run, not counted
H2LOAD=${H2LOAD:-/usr/bin/h2load}
# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh
need_tools "$H2LOAD" nghttp curl python3 cargo
REDIS=${REDIS:-0}
if ((REDIS)); then
    need_tools redis-server redis-cli
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/grpc_h2load.XXXXXX")
PIDS=()
cleanup() {
    local pid i
    # Last started first: a meshlimit stops before the redis-server it uses.
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null || true
    done
    for pid in "${PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cargo build --release --bin meshlimit --example noop_rls
MESHLIMIT=${MESHLIMIT:-target/release/meshlimit} # override to compare another build
NOOP=target/release/examples/noop_rls

# --- request bodies and config ---------------------------------------------------
write_bodies "$WORK"
write_config "$WORK"

# --- servers --------------------------------------------------------------------------
declare -A PORT PID
start() { # name command...
    local name=$1
    shift
    "$@" 2>"$WORK/$name.log" &
    PIDS+=($!)
    PID[$name]=$!
}
PORT[noop]=$(free_port)
start noop "$NOOP" "127.0.0.1:${PORT[noop]}"
PORT[meshlimit]=$(free_port)
start meshlimit "$MESHLIMIT" serve --config "$WORK/config" --grpc-addr "127.0.0.1:${PORT[meshlimit]}" \
    --http-addr "127.0.0.1:$(free_port)" --log warn
SERVERS=(noop meshlimit)
if ((REDIS)); then
    REDIS_PORT=$(free_port)
    start redis-server redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
        --logfile "$WORK/redis-server.out"
    wait_listening "$REDIS_PORT" "${PID[redis-server]}"
    PORT[redis]=$(free_port)
    REDIS_HTTP=$(free_port)
    start redis "$MESHLIMIT" serve --config "$WORK/config" --grpc-addr "127.0.0.1:${PORT[redis]}" \
        --http-addr "127.0.0.1:$REDIS_HTTP" --log warn --store redis --redis-url "redis://127.0.0.1:$REDIS_PORT"
    SERVERS+=(redis)
fi
for server in "${SERVERS[@]}"; do
    wait_listening "${PORT[$server]}" "${PID[$server]}"
done

# --- answer check ---------------------------------------------------------------------
# Decoder for replies: a stream of gRPC frames (flag 0, big-endian length, message), each a
# RateLimitResponse; prints the answers run-length encoded, fails on anything malformed.
cat >"$WORK/decode.py" <<'EOF'
import struct, sys

data, want = open(sys.argv[1], "rb").read(), int(sys.argv[2])
CODES = {0: "UNKNOWN", 1: "OK", 2: "OVER_LIMIT"}

def varint(buf, i):
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i

def decode(msg):  # RateLimitResponse{overall_code=1, statuses=2: DescriptorStatus{code=1}}
    i, overall, statuses = 0, 0, []
    while i < len(msg):
        key, i = varint(msg, i)
        if key & 7 == 0:
            value, i = varint(msg, i)
            if key >> 3 == 1:
                overall = value
        elif key & 7 == 2:
            n, i = varint(msg, i)
            body, i = msg[i:i + n], i + n
            assert i <= len(msg), "truncated field"
            if key >> 3 == 2:
                code = varint(body, 1)[0] if body[:1] == b"\x08" else 0
                statuses.append(CODES.get(code, code))
        else:
            sys.exit(f"unexpected wire type in key {key}")
    return f"overall_code {CODES.get(overall, overall)}, statuses {statuses}"

answers, pos = [], 0
while pos < len(data):
    assert data[pos] == 0 and pos + 5 <= len(data), "bad gRPC frame"
    n = struct.unpack(">I", data[pos + 1:pos + 5])[0]
    answers.append(decode(data[pos + 5:pos + 5 + n]))
    pos += 5 + n
assert pos == len(data), "trailing bytes"
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
    curl -sS --http2-prior-knowledge --max-time 5 -D "$hdr" -o "$out" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        --data-binary "@$WORK/$2.grpc" "http://127.0.0.1:${PORT[$1]}$PATH_RLS"
    if ! grep -q '^HTTP/2 200' "$hdr" || ! grep -qi '^grpc-status: 0' "$hdr"; then
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
# Result lines: label server body c m req/s
RESULTS="$WORK/results"
: >"$RESULTS"
# Requests the Redis-backed meshlimit sent to Redis so far.
redis_misses() {
    curl -s --max-time 5 "http://127.0.0.1:$REDIS_HTTP/metrics" |
        awk '$1 == "meshlimit_redis_cache_misses_total" { print $2; found = 1 } END { if (!found) print 0 }'
}
run() { # label server body clients streams
    local log="$WORK/h2load.$1.$2.log" rps misses=0 script=""
    if ! kill -0 "${PID[$2]}" 2>/dev/null; then
        echo "$2 is not running" >&2
        exit 1
    fi
    if [[ $2 == redis ]]; then
        redis-cli -p "$REDIS_PORT" config resetstat >/dev/null
        misses=$(redis_misses)
    fi
    "$H2LOAD" -c "$4" -m "$5" -t 1 -D "$DURATION" --warm-up-time="$WARMUP" \
        -d "$WORK/$3.grpc" -H 'content-type: application/grpc' -H 'te: trailers' \
        "http://127.0.0.1:${PORT[$2]}$PATH_RLS" >"$log" 2>&1
    # h2load counts HTTP 200 only: demand that every finished request succeeded and no
    # response was anything but 2xx (the 2xx count also includes warm-up stragglers).
    local ndone nok
    ndone=$(sed -n 's/^requests: .* \([0-9][0-9]*\) done.*/\1/p' "$log")
    nok=$(sed -n 's/^requests: .* \([0-9][0-9]*\) succeeded.*/\1/p' "$log")
    if [[ -z $ndone || $ndone == 0 || $ndone != "$nok" ]] ||
        ! grep -q ' 0 failed, 0 errored' "$log" ||
        ! grep -q '^status codes: [0-9]* 2xx, 0 3xx, 0 4xx, 0 5xx' "$log"; then
        echo "h2load run $1 against $2 had failures:" >&2
        cat "$log" >&2
        exit 1
    fi
    rps=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$log")
    if [[ $2 == redis ]]; then
        script=$(redis-cli -p "$REDIS_PORT" info commandstats | awk -F '[:=,]' -v d="$(($(redis_misses) - misses))" '
            /^cmdstat_evalsha?:/ { calls += $3; usec += $5 }
            END { if (calls && d) printf "   Redis %.1f µs a call, %.2f µs a request, %.1f requests a call", usec / calls, usec / d, d / calls }')
    fi
    printf '%-4s %-9s %-13s -c %-2s -m %-2s %10.0f req/s   request min/max/mean/sd: %s%s\n' \
        "$1" "$2" "$3.grpc" "$4" "$5" "$rps" \
        "$(awk '/^time for request:/ {print $4 " / " $5 " / " $6 " / " $7}' "$log")" "$script"
    echo "$1 $2 $3 $4 $5 $rps" >>"$RESULTS"
}

ratio() { # body clients streams: each server / the no-op server, best of and mean of the
    # runs, and the median of each round's ratio (a round: one run of each server in turn)
    awk -v b="$1" -v c="$2" -v m="$3" -v servers="${SERVERS[*]}" '
        $3 == b && $4 == c && $5 == m {
            n[$2]++; sum[$2] += $6; if ($6 > best[$2]) best[$2] = $6
            if ($2 == "noop") last = $6; else r[$2, ++rounds[$2]] = $6 / last
        }
        END {
            printf "  %s -c %s -m %s\n", b ".grpc", c, m
            k = split(servers, names, " ")
            for (i = 1; i <= k; i++) {
                s = names[i]
                printf "    %-9s best %7.0f  mean %7.0f req/s  (%d runs)\n", s, best[s], sum[s] / n[s], n[s]
            }
            for (i = 2; i <= k; i++) {
                s = names[i]
                printf "    %-9s / noop     best %5.1f%%  mean %5.1f%%", s,
                    100 * best[s] / best["noop"], 100 * (sum[s] / n[s]) / (sum["noop"] / n["noop"])
                q = rounds[s]
                for (x = 1; x <= q; x++)
                    for (y = x + 1; y <= q; y++)
                        if (r[s, y] < r[s, x]) { t = r[s, x]; r[s, x] = r[s, y]; r[s, y] = t }
                median = q % 2 ? r[s, (q + 1) / 2] : (r[s, q / 2] + r[s, q / 2 + 1]) / 2
                printf "  median of %d rounds %5.1f%%\n", q, 100 * median
            }
        }' "$RESULTS"
}

echo
echo "h2load: $("$H2LOAD" --version | head -1); cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
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
check_burst meshlimit limited 20
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
echo "each server / the no-op server, requests/s (targets: meshlimit >= 95%, redis >= 60% on two.grpc):"
for setting in "${SETTINGS_LIST[@]}"; do
    # shellcheck disable=SC2086 # setting is "body clients streams"
    ratio $setting
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

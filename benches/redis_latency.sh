#!/usr/bin/env bash
# Redis at a range of network round trips, closed and open loop, for several meshlimit
# settings taking turns (issue 47; issue 14, part 4, before it), and the embedded store's
# open-loop latency against a no-op server. Needs root (network namespaces; veth and netem,
# or TUN devices and chrt).
#
#   benches/redis_latency.sh                                  # from the repository root
#   PARTS=redis benches/redis_latency.sh                      # issue 47's grid alone
#   PARTS=redis RTTS_US="0 1000" LOADS=64 SCENARIOS=strict ROUNDS=1 DURATION=1 \
#       benches/redis_latency.sh                              # a few cells
#   PARTS=redis CONFIGS="default;--redis-calls-in-flight 1;--redis-calls-in-flight 16" \
#       benches/redis_latency.sh                              # three settings compared
#   NETWORK=netem benches/redis_latency.sh                    # the kernel's netem, or fail
#
# The network. Two network namespaces made here (removed on exit): mlat-c-PID, where
# meshlimit, loadgen, h2load, the no-op server and a loopback Redis run, and mlat-s-PID,
# where a second Redis listens on one address per round trip of RTTS_US (in µs, default
# "0 250 500 1000 2000", each even), the i-th (from 0) reached from mlat-c over a
# point-to-point link of its own, 169.254.(200+i).1 -> .2 (link-local, inside the two
# namespaces only), that holds every packet half that round trip each way. Rows name these
# paths `loopback` and `rttN` (N µs round trip). NETWORK says how a link delays:
#   netem   a veth pair; unless the round trip is 0, `tc qdisc ... netem delay` of half of
#           it on both ends (each delays what it sends). The delay costs a kernel timer,
#           not CPU of its own, so `rtt0` is the kernel's link alone.
#   line    a pair of TUN devices joined by examples/delay_line.rs (under chrt -f), which
#           holds every packet as netem would, so TCP sees the round trip (ACKs, Nagle's
#           algorithm), for kernels without netem (CONFIG_NET_SCH_NETEM unset, as on the
#           machine docs/performance.md's figures come from). It costs CPU on the cores
#           everything else shares; `rtt0` carries the same traffic through the same code,
#           so that cost shows on its own, and each line prints how long it held packets.
#   auto    (default) netem if the kernel takes a netem qdisc (tried on a veth pair in the
#           client namespace first), else line; the run says which.
# VETH0=1 adds a veth pair with no delay (`veth0`, 169.254.199.x): the kernel's own link,
# which is what `rtt0` would be with netem, so with NETWORK=line the line's own cost shows.
#
# Settings compared. CONFIGS lists meshlimit serve flag sets, separated by `;` (words split
# at spaces; `default` for none), default "default;--redis-calls-in-flight 1". Every cell
# of the Redis grid is run once per set, one set after the other, in every round, so that
# the sets meet the machine in the same state; rows name a set by its number. REF_CONFIG
# (default "--redis-calls-in-flight 1", one of CONFIGS) is the reference set.
#
# Parts (PARTS, default "redis memory h2load"; `redis` is `closed open`):
#   closed  meshlimit --store redis, closed loop: for every scenario of redis_load.sh
#           (SCENARIOS, default "strict over leased"; same keys, rules and expected
#           answers), every load of LOADS (requests in flight, each with `/C` for C HTTP/2
#           connections, default "64/4 512/16", as h2load -c4 -m16 and -c16 -m32; a load
#           without `/C` gets CONNECTIONS), every path and every set: req/s and
#           p50/p99/p99.9. CLIENT says what sends the load: `h2load` (default; what issue
#           47 measured with: -c C -m IN_FLIGHT/C -t 1, one request again and again, two
#           descriptors of the scenario's rule, so two keys, which is as hot as Redis
#           gets) or `loadgen` (the scenario's keys in turn, every answer checked; its own
#           CPU caps the rate at 512 in flight on two cores).
#   open    the same paths and sets in open loop (loadgen --rate OPEN_RATE, default 5000
#           req/s, at most OPEN_CAP in flight over CONNECTIONS connections, latency from
#           each request's due time) for OPEN_SCENARIOS (default "strict over leased"):
#           p50/p99/p99.9, and `late`, the requests that could not start on time.
#   memory  the embedded store, strict: closed-loop req/s (CONCURRENCY in flight), then open
#           loop at half of it, alternately against examples/noop_rls (answers OK, no
#           work) at the same rate. Target: p99 <= 1.1x the no-op server's.
#   h2load  the same comparison measured with h2load (-c 4 -m 16) on grpc_fixture.sh's
#           two.grpc: closed-loop req/s of meshlimit, then `h2load --rps` at half of it
#           against both servers; p50/p99/p99.9 from h2load's --log-file (h2load times
#           requests from when it sends them).
# Under each Redis row: the share of requests sent to Redis, decisions a script call
# carried, how long a call took on average from its start to its answer, how many calls
# were in flight on average (the calls' summed time over the run's; all from meshlimit's
# meshlimit_redis_call_* counters, warm-up included), and the CPU a request took in
# meshlimit, Redis' main thread, the delay lines and the whole machine.
#
# The summary gives, per cell, medians over the rounds: req/s, latency, the call figures,
# and two ratios, each the median of one ratio per round: `×rtt0`, the cell's req/s over
# the zero-delay link's at the same load and set, and `×ref`, over REF_CONFIG's at the same
# path and load (in open loop: p99 minus the zero-delay link's p99, and p99 over
# REF_CONFIG's). Then issue 47's targets for strict with the `default` set, each PASS or
# FAIL (or not judged when the grid lacks its cells): behind a 1 ms round trip >= 0.9x the
# zero-delay rate at 512 in flight and >= 0.5x at 64; on loopback and on the zero-delay
# link >= 0.9x REF_CONFIG's rate at both loads; open loop behind 1 ms, p99 <= the
# zero-delay link's p99 + 1 ms + 0.5 ms.
#
# Every run is bounded by its duration plus `timeout`; loadgen checks every answer (h2load
# cannot: one curl request per server checks grpc-status 0 first). The run prints how many
# runs it will make, and about how long they take, before the first. Machine note: all of
# it shares the cores; the 1-minute load average is recorded at the start of every run.
#
# Other settings (environment): DURATION (3 measured seconds a run), ROUNDS (3), WARMUP
# (1), REDIS_TIMEOUT_MS (meshlimit's --redis-timeout-ms, 1000 here against its default
# 100: loadgen counts an UNAVAILABLE answer as an error, which ends the whole grid, and on
# a busy machine a call can stall for 100 ms; the longer timeout lets a stall show as
# latency instead; set 100 to judge meshlimit's own default), CONNECTIONS (4),
# CONCURRENCY (64, the memory part's and the `over` priming's), THREADS (1),
# OPEN_CAP (256), STRICT_KEYS, OVER_KEYS, LEASED_KEYS, LEASE (as redis_load.sh), MESHLIMIT
# (server binary), NETWORK (auto), DELAY_LINE (the delay line's binary, to compare two),
# REDIS_SERVER / REDIS_CLI, H2LOAD.
# meshlimit's own MESHLIMIT_* settings (e.g. MESHLIMIT_WORKER_THREADS=1) reach every
# meshlimit the script starts, and no other server.
#
# Needs: root, cargo, curl, python3, timeout, ip and tc (iproute2), redis-server, redis-cli
# (redis-tools), h2load (nghttp2-client); with NETWORK=netem a kernel with veth and netem,
# with NETWORK=line chrt (util-linux) and /dev/net/tun.
set -euo pipefail

cd "$(dirname "$0")/.."
SCRIPT=redis_latency
NS=(ip netns exec "mlat-c-$$")
CLIENT_NS=mlat-c-$$
SERVER_NS=mlat-s-$$
# shellcheck source=benches/loadgen_common.sh
source benches/loadgen_common.sh
if [[ -n ${DELAY_US:-} ]]; then
    echo "DELAY_US (each way) is now RTTS_US, a list of round trips: RTTS_US=$((DELAY_US * 2))" >&2
    exit 2
fi
setting DURATION 3 1 60
setting ROUNDS 3 1 9
setting WARMUP 1 0 30
setting CONNECTIONS 4 1 256
setting CONCURRENCY 64 1 10000
setting OPEN_RATE 5000 1 1000000
setting OPEN_CAP 256 1 10000
setting THREADS 1 1 64
setting STRICT_KEYS 100000 1 1000000
setting OVER_KEYS 10000 1 1000000
setting LEASED_KEYS 8 1 1000000
setting LEASE 1000 1 1000000
setting REDIS_TIMEOUT_MS 1000 1 60000
setting VETH0 0 0 1
export MESHLIMIT_REDIS_TIMEOUT_MS=$REDIS_TIMEOUT_MS
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}
H2LOAD=${H2LOAD:-h2load}
CLIENT=${CLIENT:-h2load}
case $CLIENT in
h2load | loadgen) ;;
*)
    echo "CLIENT is h2load or loadgen, not '$CLIENT'" >&2
    exit 2
    ;;
esac
NETWORK=${NETWORK:-auto}
case $NETWORK in
auto | netem | line) ;;
*)
    echo "NETWORK is auto, netem or line, not '$NETWORK'" >&2
    exit 2
    ;;
esac

# usage_error MESSAGE: exits 2 with it.
usage_error() {
    echo "$1" >&2
    exit 2
}
# has WORD LIST: whether the space-separated LIST holds WORD.
has() { [[ " $2 " == *" $1 "* ]]; }

PARTS=${PARTS:-redis memory h2load}
PARTS=" ${PARTS//redis/closed open} "
for part in $PARTS; do
    case $part in
    closed | open | memory | h2load) ;;
    *) usage_error "PARTS: unknown part '$part' (redis, closed, open, memory, h2load)" ;;
    esac
done
SCENARIOS=${SCENARIOS:-strict over leased}
OPEN_SCENARIOS=${OPEN_SCENARIOS:-strict over leased}
for scenario in $SCENARIOS $OPEN_SCENARIOS; do
    case $scenario in
    strict | over | leased) ;;
    *) usage_error "SCENARIOS, OPEN_SCENARIOS: unknown scenario '$scenario' (strict, over, leased)" ;;
    esac
done

# The grid: WHERES (loopback, rttN..., veth0), LOAD_LIST and LOAD_CONNS (in flight ->
# connections), CONFIG_FLAGS and CONFIG_LABEL (1-based), REF and DEFAULT (set numbers, 0
# when absent).
RTTS_US=${RTTS_US:-0 250 500 1000 2000}
read -r -a RTTS <<<"$RTTS_US"
((${#RTTS[@]} >= 1 && ${#RTTS[@]} <= 12)) || usage_error "RTTS_US: 1 to 12 round trips"
WHERES=loopback
MAX_RTT=0
for rtt in "${RTTS[@]}"; do
    if ! [[ $rtt =~ ^(0|[1-9][0-9]*)$ ]] || ((rtt > 200000 || rtt % 2)); then
        usage_error "RTTS_US: '$rtt' is not an even number of µs up to 200000 (half of it each way)"
    fi
    ! has "rtt$rtt" "$WHERES" || usage_error "RTTS_US: $rtt twice"
    WHERES+=" rtt$rtt"
    if ((rtt > MAX_RTT)); then
        MAX_RTT=$rtt
    fi
done
if ((VETH0)); then
    WHERES+=" veth0"
fi
LOADS=${LOADS:-64/4 512/16}
LOAD_LIST=()
declare -A LOAD_CONNS=()
for load in $LOADS; do
    [[ $load =~ ^([0-9]+)(/([0-9]+))?$ ]] || usage_error "LOADS: '$load' is not IN_FLIGHT or IN_FLIGHT/CONNECTIONS"
    in_flight=$((10#${BASH_REMATCH[1]}))
    conns=$((10#${BASH_REMATCH[3]:-$CONNECTIONS}))
    ((in_flight >= 1 && in_flight <= 10000)) || usage_error "LOADS: $in_flight in flight (1..10000)"
    ((conns >= 1 && conns <= 256)) || usage_error "LOADS: $conns connections (1..256)"
    [[ -z ${LOAD_CONNS[$in_flight]:-} ]] || usage_error "LOADS: $in_flight in flight twice"
    LOAD_LIST+=("$in_flight")
    LOAD_CONNS[$in_flight]=$conns
done
((${#LOAD_LIST[@]})) || usage_error "LOADS is empty"
CONFIGS=${CONFIGS:-default;--redis-calls-in-flight 1}
REF_CONFIG=${REF_CONFIG:---redis-calls-in-flight 1}
IFS=';' read -r -a config_list <<<"$CONFIGS"
CONFIG_FLAGS=("")
CONFIG_LABEL=("")
REF=0
DEFAULT=0
for config in "${config_list[@]}"; do
    read -r -a words <<<"$config"
    label=${words[*]:-}
    [[ -n $label ]] || usage_error "CONFIGS: an empty set (write 'default' for no flags)"
    for ((i = 1; i < ${#CONFIG_LABEL[@]}; i++)); do
        [[ ${CONFIG_LABEL[i]} != "$label" ]] || usage_error "CONFIGS: '$label' twice"
    done
    CONFIG_LABEL+=("$label")
    if [[ $label == default ]]; then
        CONFIG_FLAGS+=("")
        DEFAULT=$((${#CONFIG_LABEL[@]} - 1))
    else
        CONFIG_FLAGS+=("$label")
    fi
    read -r -a words <<<"$REF_CONFIG"
    if [[ $label == "${words[*]:-}" ]]; then
        REF=$((${#CONFIG_LABEL[@]} - 1))
    fi
done
CONFIG_COUNT=$((${#CONFIG_LABEL[@]} - 1))
((CONFIG_COUNT)) || usage_error "CONFIGS is empty"

need_tools cargo curl python3 timeout ip tc "$REDIS_SERVER" "$REDIS_CLI" "$H2LOAD"
if ((EUID != 0)); then
    echo "needs root: network namespaces and network devices" >&2
    exit 2
fi
REDIS_PARTS=0
if has closed "$PARTS" || has open "$PARTS"; then
    REDIS_PARTS=1
fi

# network_report: TCP retransmissions and timeouts in both namespaces (a packet lost on a
# link stalls its connection for a retransmission timeout, 200 ms at least), and the links'
# devices' drops while they exist.
network_report() {
    local ns
    for ns in "$CLIENT_NS" "$SERVER_NS"; do
        echo "  $ns: $(ip netns exec "$ns" nstat -asz TcpRetransSegs TcpExtTCPTimeouts 2>/dev/null |
            awk '/^Tcp/ { printf "%s %s  ", $1, $2 }')"
        ip -s -n "$ns" link show 2>/dev/null | awk '
            /^[0-9]+: mlat/ { dev = $2 }
            dev && /RX:|TX:/ { dir = $1; getline; printf "    %s %s packets %s dropped %s\n", dev, dir, $2, $4 }'
    done
}
cleanup_more() {
    if (($1 != 0)) && ip netns list | grep -q "^$CLIENT_NS"; then
        echo "network when it failed:" >&2
        network_report >&2
    fi
    ip netns del "$CLIENT_NS" 2>/dev/null || true
    ip netns del "$SERVER_NS" 2>/dev/null || true
}
start_work
build_binaries loadgen delay_line noop_rls
DELAY_LINE=${DELAY_LINE:-$BIN/examples/delay_line}
write_bench_config

# --- the network ------------------------------------------------------------------------
ip netns add "$CLIENT_NS"
ip netns add "$SERVER_NS"
ip -n "$CLIENT_NS" link set lo up
ip -n "$SERVER_NS" link set lo up
# Ports. Every server listens in the client namespace, so a port is picked there: above the
# namespace's range for the local ports of its connections (set to 10000-32767 here), and
# checked free. (grpc_fixture.sh's free_port asks the host's namespace, which cannot see
# this one's connections: a server once failed to start on a port that a connection of an
# earlier run held.)
ip netns exec "$CLIENT_NS" sysctl -q -w net.ipv4.ip_local_port_range="10000 32767"
free_port() {
    "${NS[@]}" python3 -c '
import random, socket
for _ in range(1000):
    port = random.randint(33000, 60999)
    try:
        socket.socket().bind(("127.0.0.1", port))
    except OSError:
        continue
    print(port)
    break
else:
    raise SystemExit("no free port in 33000-60999")'
}

# netem_works: whether the kernel takes a netem qdisc, tried on a veth pair made in the
# client namespace and removed again.
netem_works() {
    local a=mlatpc$$ b=mlatps$$ works=0
    ip -n "$CLIENT_NS" link add "$a" type veth peer name "$b" 2>/dev/null || return 1
    if ip netns exec "$CLIENT_NS" tc qdisc add dev "$a" root netem delay 1us 2>/dev/null; then
        works=1
    fi
    ip -n "$CLIENT_NS" link del "$a"
    ((works))
}
if ((REDIS_PARTS)); then
    # Round trips of 0 alone need no qdisc: veth pairs alone.
    if [[ $NETWORK != line ]] && { ((MAX_RTT == 0)) || netem_works; }; then
        NETWORK=netem
    elif [[ $NETWORK == netem ]]; then
        echo "NETWORK=netem: this kernel takes no netem qdisc on a veth pair" \
            "(CONFIG_VETH and CONFIG_NET_SCH_NETEM); NETWORK=line uses the delay line instead" >&2
        exit 2
    else
        NETWORK=line
        need_tools chrt
        [[ -c /dev/net/tun ]] || {
            echo "NETWORK=line: /dev/net/tun missing (a kernel with CONFIG_TUN)" >&2
            exit 2
        }
    fi
fi

# link ID NET DELAY [veth]: 169.254.NET.1 (client, device mlatIDcPID) joined to .2
# (server, mlatIDsPID), every packet held DELAY µs each way: a veth pair (with netem on
# both ends unless DELAY is 0), or, with NETWORK=line and no fourth argument, a delay line
# (pid LINE_PID[ID]) joining two TUN devices.
declare -A LINE_PID=()
link() {
    local a=mlat${1}c$$ b=mlat${1}s$$ i
    if [[ $NETWORK == netem || ${4:-} == veth ]]; then
        ip -n "$CLIENT_NS" link add "$a" type veth peer name "$b" netns "$SERVER_NS"
        if (($3 > 0)); then
            # netem's default queue of 1,000 packets could drop under load; a drop stalls
            # a connection for a retransmission timeout.
            ip netns exec "$CLIENT_NS" tc qdisc add dev "$a" root netem delay "${3}us" limit 100000
            ip netns exec "$SERVER_NS" tc qdisc add dev "$b" root netem delay "${3}us" limit 100000
        fi
    else
        start "line$1" chrt -f 10 "$DELAY_LINE" --a "$a" --b "$b" --delay-us "$3" --seconds 3600
        LINE_PID[$1]=$STARTED
        for ((i = 0; ; i++)); do
            grep -q '^ready$' "$WORK/line$1.log" && break
            kill -0 "$STARTED" 2>/dev/null || fail_with_log "delay_line exited" "line$1"
            ((i < 100)) || fail_with_log "delay_line not ready after 10 s" "line$1"
            sleep 0.1
        done
        ip link set "$a" netns "$CLIENT_NS"
        ip link set "$b" netns "$SERVER_NS"
    fi
    ip -n "$CLIENT_NS" addr add "169.254.$2.1" peer "169.254.$2.2" dev "$a"
    ip -n "$SERVER_NS" addr add "169.254.$2.2" peer "169.254.$2.1" dev "$b"
    ip -n "$CLIENT_NS" link set "$a" up
    ip -n "$SERVER_NS" link set "$b" up
}

# use_redis WHERE: the Redis the redis store uses (loopback, rttN or veth0).
declare -A REDIS_ADDR=()
use_redis() {
    if [[ $1 == loopback ]]; then
        REDIS_HOST=127.0.0.1 REDIS_PORT=$LOOP_PORT REDIS_PID=$LOOP_PID
    else
        REDIS_HOST=${REDIS_ADDR[$1]} REDIS_PORT=6379 REDIS_PID=$NET_PID
    fi
}

if ((REDIS_PARTS)); then
    for i in "${!RTTS[@]}"; do
        link "$i" $((200 + i)) $((RTTS[i] / 2))
        REDIS_ADDR[rtt${RTTS[i]}]=169.254.$((200 + i)).2
    done
    if ((VETH0)); then
        link v 199 0 veth
        REDIS_ADDR[veth0]=169.254.199.2
    fi
    LOOP_PORT=$(free_port)
    start redis-loop "${NS[@]}" "$REDIS_SERVER" --port "$LOOP_PORT" --bind 127.0.0.1 --save '' --appendonly no
    LOOP_PID=$STARTED
    start redis-net ip netns exec "$SERVER_NS" "$REDIS_SERVER" --port 6379 \
        --bind "${REDIS_ADDR[@]}" --protected-mode no --save '' --appendonly no
    NET_PID=$STARTED
    for where in $WHERES; do
        use_redis "$where"
        redis_wait "redis-$([[ $where == loopback ]] && echo loop || echo net)"
    done
fi

# --- runs -------------------------------------------------------------------------------
# Around each timed load of the redis store: how many decisions one script call carried
# (the batching the latency buys), how long a call took and how many were in flight, and
# the CPU a request took (warm-up included) in meshlimit, Redis' main thread, the delay
# lines and the whole machine (/proc/stat: loadgen and the kernel are the rest). Requests
# are those the store answered: sent to Redis, or from a local cache (`over` and `leased`
# send few). cpu_ticks is grpc_fixture.sh's.
machine_ticks() { awk '$1 == "cpu" { print $2 + $3 + $4 + $7 + $8 }' /proc/stat; }
# store_requests: the requests the redis store has answered since meshlimit started.
store_requests() { metrics_sum '^meshlimit_redis_cache_(hits|misses)_total'; }
# script_calls: meshlimit's decision calls to Redis so far, and their time summed in µs.
script_calls() {
    local calls micros
    calls=$(metrics_sum '^meshlimit_redis_calls_total$') || return 1
    micros=$(metrics_sum '^meshlimit_redis_call_seconds_total$' 1e6) || return 1
    echo "$calls $micros"
}
# line_ticks: the delay lines' CPU ticks (0 with netem, whose delay is the kernel's).
line_ticks() {
    local pid sum=0
    for pid in "${LINE_PID[@]}"; do
        sum=$((sum + $(cpu_ticks "$pid")))
    done
    echo "$sum"
}
cpu_now() {
    echo "$(cpu_ticks "$SERVER_PID") $(redis_cpu_us) $(line_ticks) $(machine_ticks)"
}
timed_load_starts() {
    [[ $1 == redis ]] || return 0
    [[ $(redis_cli config resetstat) == OK ]] || fail_with_log "CONFIG RESETSTAT failed" redis
    DECISIONS_BEFORE=$(redis_decisions) || fail_with_log "no Redis counters on /metrics" meshlimit
    REQUESTS_BEFORE=$(store_requests) || fail_with_log "no Redis counters on /metrics" meshlimit
    CALLS_BEFORE=$(script_calls) || fail_with_log "no Redis call counters on /metrics" meshlimit
    CPU_BEFORE=$(cpu_now)
    WALL_BEFORE=$EPOCHREALTIME
}
# timed_load_ended: CPU_SHARES, "decisions/call share-sent meshlimit-µs redis-µs lines-µs
# machine-µs call-µs calls-in-flight" (CPU a request), or - when the store answered none.
timed_load_ended() {
    CPU_SHARES=-
    [[ $1 == redis ]] || return 0
    local decisions requests calls call_times wall_after=$EPOCHREALTIME
    decisions=$(redis_decisions) || fail_with_log "no Redis counters on /metrics" meshlimit
    call_times=$(script_calls) || fail_with_log "no Redis call counters on /metrics" meshlimit
    requests=$(store_requests) || fail_with_log "no Redis counters on /metrics" meshlimit
    decisions=$((decisions - DECISIONS_BEFORE)) requests=$((requests - REQUESTS_BEFORE))
    read -r calls _ <<<"$(redis_script_time)"
    ((requests > 0)) || return 0
    # Calls in flight on average: the calls' summed time over the time it was summed in.
    CPU_SHARES=$(awk -v d="$decisions" -v r="$requests" -v c="$calls" -v hz="$(getconf CLK_TCK)" \
        -v before="$CPU_BEFORE" -v after="$(cpu_now)" -v wall="$WALL_BEFORE $wall_after" \
        -v calls_before="$CALLS_BEFORE" -v calls_after="$call_times" '
        BEGIN {
            split(before, b, " "); split(after, a, " "); split(wall, w, " ")
            split(calls_before, cb, " "); split(calls_after, ca, " ")
            tick = 1e6 / hz / r
            n = ca[1] - cb[1]
            printf "%.1f %.0f%% %.1f %.1f %.1f %.1f %.0f %.2f", c ? d / c : 0, 100 * d / r,
                (a[1] - b[1]) * tick, (a[2] - b[2]) / r, (a[3] - b[3]) * tick, (a[4] - b[4]) * tick,
                n ? (ca[2] - cb[2]) / n : 0, (ca[2] - cb[2]) / ((w[2] - w[1]) * 1e6)
        }')
}

load1() { cut -d' ' -f1 /proc/loadavg; }
# network_kind: what carries the Redis links, for the header.
network_kind() {
    case $NETWORK in
    line) echo "TUN devices and the delay line" ;;
    netem) echo "veth pairs, netem where the round trip is not 0" ;;
    *) echo "no Redis links: PARTS has no Redis part" ;;
    esac
}

# result_figures: "req/s p50 p99 p99.9 late" of loadgen's RESULT (late "-" in closed loop).
result_figures() {
    local rps p50 p99 p999 late=-
    rps=$(field rps "$RESULT")
    p50=$(field p50_us "$RESULT")
    p99=$(field p99_us "$RESULT")
    p999=$(field p999_us "$RESULT")
    if [[ $RESULT == *" late="* ]]; then
        late=$(field late "$RESULT")
    fi
    echo "$rps $p50 $p99 $p999 $late"
}

# The Redis grid's rows, in GRID: kind scenario where load set round rps p50 p99 p999 late
# load1 decisions/call calls-in-flight call-µs share-sent ("-" for what was not measured).
GRID="$WORK/grid"
: >"$GRID"
GRID_ROW='%-6s %-8s %-9s %7s %3s %5s %9s %9s %9s %9s %6s %5s\n'
# grid_run KIND SCENARIO WHERE LOAD SET ROUND: one run of the grid (closed loop at LOAD in
# flight, or open loop at OPEN_RATE, LOAD then being OPEN_RATE/s), recorded and printed.
grid_run() {
    local kind=$1 scenario=$2 where=$3 load=$4 config=$5 round=$6 l args=()
    use_redis "$where"
    # A link that went away (once seen: "Network is unreachable" half-way through a grid)
    # is named here, with the namespace's devices, rather than as loadgen's errors.
    if ! "${NS[@]}" ip route get "$REDIS_HOST" >/dev/null 2>&1; then
        echo "no route to $where's Redis ($REDIS_HOST) in $CLIENT_NS; its devices:" >&2
        ip -br -n "$CLIENT_NS" addr show >&2 || true
        exit 1
    fi
    read -r -a SERVER_FLAGS <<<"${CONFIG_FLAGS[config]}"
    if [[ $kind == closed ]]; then
        CONNECTIONS=${LOAD_CONNS[$load]}
        args=(--concurrency "$load")
    else
        args=(--concurrency "$OPEN_CAP" --rate "$OPEN_RATE")
    fi
    l=$(load1)
    if [[ $kind == closed && $CLIENT == h2load ]]; then
        measure_h2load "$scenario" "$kind.$scenario.$where.$load.$config.$round" "$load" "$CONNECTIONS"
    else
        measure "$scenario" redis "$kind.$scenario.$where.${load%/s}.$config.$round" "${args[@]}"
    fi
    CONNECTIONS=$BASE_CONNECTIONS
    SERVER_FLAGS=()

    local figures rps p50 p99 p999 late per_call=- sent=- mesh redis lines machine call_us=- in_flight=-
    figures=$(result_figures)
    read -r rps p50 p99 p999 late <<<"$figures"
    if [[ $CPU_SHARES != - ]]; then
        read -r per_call sent mesh redis lines machine call_us in_flight <<<"$CPU_SHARES"
    fi
    echo "$kind $scenario $where $load $config $round $rps $p50 $p99 $p999 $late $l" \
        "$per_call $in_flight $call_us $sent" >>"$GRID"
    # shellcheck disable=SC2059 # GRID_ROW is the format
    printf "$GRID_ROW" "$kind" "$scenario" "$where" "$load" "$config" "$round" "$rps" "$p50" "$p99" \
        "$p999" "$late" "$l"
    if [[ $CPU_SHARES != - ]]; then
        printf '        %s of the requests to Redis, %s decisions a call, a call %s µs, %s calls in flight;' \
            "$sent" "$per_call" "$call_us" "$in_flight"
        printf ' CPU a request: meshlimit %s µs, Redis %s, delay lines %s, machine %s\n' \
            "$mesh" "$redis" "$lines" "$machine"
    fi
}
BASE_CONNECTIONS=$CONNECTIONS

# h2load_result TIMES: RESULT as loadgen's from h2load's per-request log TIMES and RPS (the
# log's third column: µs from sending a request to the end of its response).
h2load_result() {
    RESULT="rps=$RPS $(cut -f3 "$1" | sort -n | awk '
        { t[NR] = $1 }
        END {
            if (!NR) exit 1
            printf "p50_us=%s p99_us=%s p999_us=%s", t[int(NR * 0.5) + 1], t[int(NR * 0.99) + 1], t[int(NR * 0.999) + 1]
        }')"
}

# measure_h2load SCENARIO LABEL IN_FLIGHT CONNECTIONS: as loadgen_common.sh's measure for
# the Redis store, the load being h2load (CLIENT=h2load): SCENARIO's request (H2GRID/
# SCENARIO.grpc) from CONNECTIONS clients, IN_FLIGHT / CONNECTIONS streams each; RESULT as
# loadgen's, latency from h2load's per-request log (from sending to the response's end).
measure_h2load() {
    local scenario=$1 label=$2 times="$H2GRID/$2.times"
    redis_flush
    start_server redis "$scenario"
    timed_load_starts redis
    H2LOAD=$H2GRID/h2load h2load_checked "$SERVER_PID" "$H2GRID/$label.log" -c "$4" -m $(($3 / $4)) \
        -t 1 -D "$DURATION" --warm-up-time="$WARMUP" --log-file="$times" -d "$H2GRID/$scenario.grpc" \
        -H 'content-type: application/grpc' -H 'te: trailers' "http://127.0.0.1:$GRPC_PORT$PATH_RLS"
    h2load_result "$times"
    rm -f "$times"
    timed_load_ended redis
    kill -0 "$SERVER_PID" 2>/dev/null || fail_with_log "redis server died during the run" meshlimit
    stop "$SERVER_PID"
}
if ((REDIS_PARTS)) && [[ $CLIENT == h2load ]] && has closed "$PARTS"; then
    H2GRID=$WORK/h2grid
    mkdir "$H2GRID"
    write_proto "$H2GRID"
    # Two users of each scenario's rule: two descriptors, two keys.
    (cd "$H2GRID" && python3 - <<'EOF'
from grpc_proto import descriptor, request, write

for method in ("strict", "over", "leased"):
    write(method + ".grpc", request("bench",
                                    descriptor(("user_id", "h2a"), ("method", method)),
                                    descriptor(("user_id", "h2b"), ("method", method))))
EOF
    )
    # h2load_checked runs $H2LOAD: this one, in the namespace, bounded in time as well.
    printf '#!/bin/sh\nexec timeout %s %s "%s" "$@"\n' $((WARMUP + DURATION + 30)) "${NS[*]}" \
        "$(command -v "$H2LOAD")" >"$H2GRID/h2load"
    chmod +x "$H2GRID/h2load"
fi

echo
echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg); $("$REDIS_SERVER" --version | cut -d' ' -f1-3)"
echo "each run: ${WARMUP}s warm-up + ${DURATION}s measured, a fresh meshlimit; closed loop by $CLIENT, open loop by loadgen --threads $THREADS;" \
    "$ROUNDS round(s); Redis timeout $REDIS_TIMEOUT_MS ms"
if ((REDIS_PARTS)); then
    closed_runs=0 open_runs=0
    if has closed "$PARTS"; then
        closed_runs=$((ROUNDS * $(wc -w <<<"$SCENARIOS") * ${#LOAD_LIST[@]} * $(wc -w <<<"$WHERES") * CONFIG_COUNT))
    fi
    if has open "$PARTS"; then
        open_runs=$((ROUNDS * $(wc -w <<<"$OPEN_SCENARIOS") * $(wc -w <<<"$WHERES") * CONFIG_COUNT))
    fi
    echo "Redis: $WHERES ($(network_kind); rttN: N µs round trip, N/2 each way)"
    echo "  closed loop in flight/connections: $(for load in "${LOAD_LIST[@]}"; do
        printf '%s/%s ' "$load" "${LOAD_CONNS[$load]}"
    done)scenarios: $SCENARIOS"
    echo "  open loop: $OPEN_RATE req/s, at most $OPEN_CAP in flight over $CONNECTIONS connections;" \
        "scenarios: $OPEN_SCENARIOS"
    echo "  meshlimit serve flag sets, in turn in every round:"
    for ((i = 1; i <= CONFIG_COUNT; i++)); do
        echo "    $i: ${CONFIG_LABEL[i]}$( ((i == REF)) && echo "  (the reference, REF_CONFIG)")"
    done
    ((REF)) || echo "    (REF_CONFIG '$REF_CONFIG' is none of them: no ×ref column)"
    # About 2 s a run beyond warm-up and duration on a busy 2-core machine: a fresh
    # meshlimit, Redis flushed, the counters read; `over` primes its keys first.
    echo "  $closed_runs closed-loop and $open_runs open-loop runs, about" \
        "$(((closed_runs + open_runs) * (WARMUP + DURATION + 2) / 60 + 1)) min"
fi
echo

if ((REDIS_PARTS)); then
    # shellcheck disable=SC2059 # GRID_ROW is the format
    printf "$GRID_ROW" kind scenario Redis load set round 'req/s' 'p50 µs' 'p99 µs' 'p99.9 µs' late load1
fi
for ((round = 1; round <= ROUNDS; round++)); do
    if has closed "$PARTS"; then
        for scenario in $SCENARIOS; do
            for load in "${LOAD_LIST[@]}"; do
                for where in $WHERES; do
                    for ((config = 1; config <= CONFIG_COUNT; config++)); do
                        grid_run closed "$scenario" "$where" "$load" "$config" "$round"
                    done
                done
            done
        done
    fi
    if has open "$PARTS"; then
        for scenario in $OPEN_SCENARIOS; do
            for where in $WHERES; do
                for ((config = 1; config <= CONFIG_COUNT; config++)); do
                    grid_run open "$scenario" "$where" "$OPEN_RATE/s" "$config" "$round"
                done
            done
        done
    fi
done

# The memory and h2load parts' rows, in RESULTS: kind scenario server round rps p50 p99
# p999 late load1.
RESULTS="$WORK/results"
: >"$RESULTS"
ROW='%-7s %-8s %-9s %5s %9s %9s %9s %9s %7s %6s\n'
# record KIND SCENARIO SERVER ROUND LOAD1: RESULT into RESULTS, and printed
record() {
    local figures rps p50 p99 p999 late
    figures=$(result_figures)
    read -r rps p50 p99 p999 late <<<"$figures"
    echo "$1 $2 $3 $4 $rps $p50 $p99 $p999 $late $5" >>"$RESULTS"
    # shellcheck disable=SC2059 # ROW is the format
    printf "$ROW" "$1" "$2" "$3" "$4" "$rps" "$p50" "$p99" "$p999" "$late" "$5"
}
# mean KIND SCENARIO SERVER COLUMN: the mean of COLUMN (5 = req/s) over the rounds
mean() {
    awk -v k="$1" -v s="$2" -v w="$3" -v c="$4" \
        '$1 == k && $2 == s && $3 == w { n++; sum += $c } END { if (n) printf "%.0f", sum / n; else print 0 }' "$RESULTS"
}
if has memory "$PARTS" || has h2load "$PARTS"; then
    if ((REDIS_PARTS)); then
        echo
    fi
    # shellcheck disable=SC2059 # ROW is the format
    printf "$ROW" kind scenario server round 'req/s' 'p50 µs' 'p99 µs' 'p99.9 µs' late load1
fi

# closed_then_open RUNNER PREFIX SCENARIO SERVER: ROUNDS closed-loop runs of SERVER (rows
# PREFIXclosed), then ROUNDS alternations of the no-op server and SERVER in open loop at
# RATE, half their mean req/s (rows PREFIXopen). RUNNER SERVER LABEL [RATE] runs one.
closed_then_open() {
    local runner=$1 prefix=$2 scenario=$3 server=$4 round name l
    for ((round = 1; round <= ROUNDS; round++)); do
        l=$(load1)
        "$runner" "$server" "${prefix}closed.$server.$round"
        record "${prefix}closed" "$scenario" "$server" "$round" "$l"
    done
    RATE=$(($(mean "${prefix}closed" "$scenario" "$server" 5) / 2))
    for ((round = 1; round <= ROUNDS; round++)); do
        for name in noop "$server"; do
            l=$(load1)
            "$runner" "$name" "${prefix}open.$name.$round" "$RATE"
            record "${prefix}open" "$scenario" "$name" "$round" "$l"
        done
    done
}

# run_loadgen SERVER LABEL [RATE]: strict, closed loop or open at RATE.
run_loadgen() {
    if [[ -n ${3:-} ]]; then
        measure strict "$1" "$2" --concurrency "$OPEN_CAP" --rate "$3"
    else
        measure strict "$1" "$2" --concurrency "$CONCURRENCY"
    fi
}
if [[ " $PARTS " == *" memory "* ]]; then
    closed_then_open run_loadgen "" strict memory
    MEMORY_RATE=$RATE
fi

# run_h2load SERVER LABEL [RATE]: one checked h2load run of two.grpc on SERVER (-c 4 -m 16,
# RATE split over the 4 clients) into $WORK/h2/LABEL.log, per-request times into
# LABEL.times; RESULT as loadgen's.
run_h2load() {
    local times="$WORK/h2/$2.times" rate=()
    if [[ -n ${3:-} ]]; then
        rate=(--rps $(($3 / 4)))
    fi
    H2LOAD=$WORK/h2/h2load h2load_checked "${H2_PID[$1]}" "$WORK/h2/$2.log" -c 4 -m 16 "${rate[@]}" -t 1 \
        -D "$DURATION" --warm-up-time="$WARMUP" --log-file="$times" -d "$WORK/h2/two.grpc" \
        -H 'content-type: application/grpc' -H 'te: trailers' "http://127.0.0.1:${H2_PORT[$1]}$PATH_RLS"
    h2load_result "$times"
}
if [[ " $PARTS " == *" h2load "* ]]; then
    mkdir "$WORK/h2"
    write_bodies "$WORK/h2"
    write_config "$WORK/h2"
    # h2load_checked runs $H2LOAD: this one, in the namespace, bounded in time as well.
    printf '#!/bin/sh\nexec timeout %s %s "%s" "$@"\n' $((WARMUP + DURATION + 30)) "${NS[*]}" \
        "$(command -v "$H2LOAD")" >"$WORK/h2/h2load"
    chmod +x "$WORK/h2/h2load"
    declare -A H2_PORT H2_PID
    H2_PORT[noop]=$(free_port)
    start noop "${NS[@]}" "$BIN/examples/noop_rls" "127.0.0.1:${H2_PORT[noop]}"
    H2_PID[noop]=$STARTED
    H2_PORT[meshlimit]=$(free_port)
    start meshlimit "${NS[@]}" "$MESHLIMIT" serve --config "$WORK/h2/config" \
        --grpc-addr "127.0.0.1:${H2_PORT[meshlimit]}" --http-addr "127.0.0.1:$(free_port)" --log warn
    H2_PID[meshlimit]=$STARTED
    for server in noop meshlimit; do
        "${NS[@]}" bash -c "$(declare -f wait_listening); wait_listening ${H2_PORT[$server]} ${H2_PID[$server]}" ||
            fail_with_log "$server did not start" "$server"
        # h2load counts HTTP 200 only: one request first, which must end with grpc-status 0.
        "${NS[@]}" bash -c "PATH_RLS=$PATH_RLS; $(declare -f grpc_call)
            grpc_call ${H2_PORT[$server]} $WORK/h2/two.grpc /dev/null $WORK/h2/headers" || {
            cat "$WORK/h2/headers" >&2
            fail_with_log "$server: two.grpc not answered with HTTP 200 and grpc-status 0" "$server"
        }
    done
    closed_then_open run_h2load h2 two meshlimit
    H2_RATE=$RATE
fi


# --- summary ----------------------------------------------------------------------------
if ((REDIS_PARTS)) && [[ -s $GRID ]]; then
    echo
    echo "Redis: medians over the rounds. ×rtt0: req/s over rtt0's at the same load and set;" \
        "×ref: over set $REF's at the same path and load (each the median of one ratio a round);" \
        "open loop: p99 minus rtt0's, and p99 over set $REF's. dec/call, in flight, call µs:" \
        "the script calls (meshlimit_redis_call_*)."
    awk -v ref="$REF" -v def="$DEFAULT" -v open_rate="$OPEN_RATE" '
        # median of the numbers in the space-separated list, or "" for none
        function median(list, v, n, i, j, t) {
            n = split(list, v, " ")
            if (!n) return ""
            for (i = 2; i <= n; i++)
                for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
            return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
        }
        # cell name with WHERE or SET replaced
        function at_where(c, w, f) { split(c, f, SUBSEP); return f[1] SUBSEP f[2] SUBSEP w SUBSEP f[4] SUBSEP f[5] }
        function at_set(c, s, f) { split(c, f, SUBSEP); return f[1] SUBSEP f[2] SUBSEP f[3] SUBSEP f[4] SUBSEP s }
        # median over the rounds both ran of a / b (column 7, req/s; 9, p99) or, with diff, of a - b
        function per_round(a, b, col, diff, r, list) {
            if (!(a in rounds) || !(b in rounds) || a == b) return ""
            for (r = 1; r <= max_round; r++)
                if ((a, r) in value && (b, r) in value) {
                    if (diff) list = list " " (value[a, r, col] - value[b, r, col])
                    else if (value[b, r, col] > 0) list = list " " value[a, r, col] / value[b, r, col]
                }
            return median(list)
        }
        function fmt(x, f) { return x == "" ? "-" : sprintf(f, x) }
        {
            cell = $1 SUBSEP $2 SUBSEP $3 SUBSEP $4 SUBSEP $5
            if (!(cell in rounds)) order[++cells] = cell
            rounds[cell]++
            value[cell, $6]
            for (c = 7; c <= 16; c++) {
                value[cell, $6, c] = $c
                if ($c != "-") column[cell, c] = column[cell, c] " " ($c + 0)
            }
            if ($11 != "-") late[cell] += $11
            if ($6 > max_round) max_round = $6
        }
        END {
            for (i = 1; i <= cells; i++) {
                c = order[i]; split(c, f, SUBSEP)
                if (f[1] != kind) {
                    kind = f[1]
                    print ""
                    if (kind == "closed")
                        printf "%-8s %5s %-9s %3s %9s %8s %8s %7s %7s %8s %9s %8s\n", "closed", "load", "Redis",
                            "set", "req/s", "p50 µs", "p99 µs", "×rtt0", "×ref", "dec/call", "in flight", "call µs"
                    else
                        printf "%-8s %7s %-9s %3s %8s %8s %8s %10s %7s %6s %8s %9s %8s\n", "open", "rate", "Redis",
                            "set", "p50 µs", "p99 µs", "p99.9 µs", "p99-rtt0", "p99/ref", "late", "dec/call",
                            "in flight", "call µs"
                }
                zero = at_where(c, "rtt0"); against = at_set(c, ref)
                calls = fmt(median(column[c, 13]), "%8.1f") " " fmt(median(column[c, 14]), "%9.2f") " " \
                    fmt(median(column[c, 15]), "%8.0f")
                if (kind == "closed")
                    printf "%-8s %5s %-9s %3s %9.0f %8.0f %8.0f %7s %7s %s\n", f[2], f[4], f[3], f[5],
                        median(column[c, 7]), median(column[c, 8]), median(column[c, 9]),
                        fmt(per_round(c, zero, 7, 0), "%7.2f"), fmt(per_round(c, against, 7, 0), "%7.2f"), calls
                else
                    printf "%-8s %7s %-9s %3s %8.0f %8.0f %8.0f %10s %7s %6d %s\n", f[2], f[4], f[3], f[5],
                        median(column[c, 8]), median(column[c, 9]), median(column[c, 10]),
                        fmt(per_round(c, zero, 9, 1), "%+10.0f"), fmt(per_round(c, against, 9, 0), "%7.2f"),
                        late[c], calls
            }

            # Issue 47: strict, the default set.
            print ""
            print "issue 47 targets (strict, " (def ? "set " def ", default flags" : "no default set in CONFIGS") "):"
            rate_target("closed", "rtt1000", 512, "rtt0", def, 0.9, "512 in flight, req/s behind a 1 ms round trip / zero-delay link")
            rate_target("closed", "rtt1000", 64, "rtt0", def, 0.5, "64 in flight, req/s behind a 1 ms round trip / zero-delay link")
            against = ref ? "set " ref : "REF_CONFIG (none in CONFIGS)"
            for (l = 1; l <= 2; l++) {
                load = l == 1 ? 64 : 512
                rate_target("closed", "loopback", load, "loopback", ref, 0.9, load " in flight, loopback, req/s / " against)
                rate_target("closed", "rtt0", load, "rtt0", ref, 0.9, load " in flight, zero-delay link, req/s / " against)
            }
            a = "open" SUBSEP "strict" SUBSEP "rtt1000" SUBSEP open_rate "/s" SUBSEP def
            b = at_where(a, "rtt0")
            what = "open loop at " open_rate " req/s, p99 behind a 1 ms round trip - zero-delay link p99"
            if (!def || !(a in rounds) || !(b in rounds))
                printf "  %s: not judged (the grid has no such cells)\n", what
            else if (late[a] + late[b])
                printf "  %s: NOT MEASURED (%d requests could not start on time)\n", what, late[a] + late[b]
            else {
                d = per_round(a, b, 9, 1)
                printf "  %s: %.0f µs (%.0f against %.0f; target <= 1500): %s\n", what, d,
                    median(column[a, 9]), median(column[b, 9]), (d <= 1500 ? "PASS" : "FAIL")
            }
        }
        # rate_target KIND WHERE LOAD OTHER_WHERE OTHER_SET MIN TEXT: strict req/s of the
        # default set at WHERE over that of OTHER_SET at OTHER_WHERE, at LOAD, against MIN.
        function rate_target(k, w, load, ow, os, min, text, a, b, r) {
            a = k SUBSEP "strict" SUBSEP w SUBSEP load SUBSEP def
            b = k SUBSEP "strict" SUBSEP ow SUBSEP load SUBSEP os
            r = (def && os) ? per_round(a, b, 7, 0) : ""
            if (r == "")
                printf "  %s: not judged (the grid has no such cells)\n", text
            else
                printf "  %s: %.2f (target >= %.1f): %s\n", text, r, min, (r >= min ? "PASS" : "FAIL")
        }' "$GRID"
fi
if [[ -s $RESULTS ]]; then
    echo
    echo "embedded store against the no-op server: means over the rounds (load1: the 1-minute load" \
        "average at the start of each run)"
    awk -v memory_rate="${MEMORY_RATE:-0}" -v h2_rate="$((${H2_RATE:-0} / 4 * 4))" '
        {
            key = $1 " " $2 " " $3
            if (!(key in n)) order[++keys] = key
            n[key]++; rps[key] += $5; p50[key] += $6; p99[key] += $7; p999[key] += $8
            if ($9 != "-") late[key] += $9
            load[key] = load[key] (load[key] == "" ? "" : ",") $10
        }
        function m(a, k) { return a[k] / n[k] }
        function verdict(ok) { return ok ? "MET" : "MISSED" }
        # An open-loop figure holds only if every request started on time.
        function open_verdict(ok, late_count) {
            return late_count ? "NOT MEASURED (" late_count " requests could not start on time)" : verdict(ok)
        }
        END {
            printf "%-8s %-8s %-9s %9s %9s %9s %9s %7s  %s\n", "kind", "scenario", "server", "req/s",
                "p50 µs", "p99 µs", "p99.9 µs", "late", "load1"
            for (i = 1; i <= keys; i++) {
                k = order[i]; split(k, f, " ")
                printf "%-8s %-8s %-9s %9.0f %9.1f %9.1f %9.1f %7s  %s\n", f[1], f[2], f[3], m(rps, k),
                    m(p50, k), m(p99, k), m(p999, k), (k in late) ? late[k] : "-", load[k]
            }
            print ""
            a = "open strict memory"; b = "open strict noop"
            if (n[a] && n[b])
                printf "loadgen open loop at %d req/s: embedded p99 / no-op p99 %.3f; target <= 1.1: %s\n",
                    memory_rate, m(p99, a) / m(p99, b), open_verdict(m(p99, a) <= 1.1 * m(p99, b), late[a] + late[b])
            a = "h2open two meshlimit"; b = "h2open two noop"
            if (n[a] && n[b])
                printf "h2load --rps, %d req/s offered: embedded p99 / no-op p99 %.3f; target <= 1.1: %s\n",
                    h2_rate, m(p99, a) / m(p99, b), verdict(m(p99, a) <= 1.1 * m(p99, b))
        }' "$RESULTS"
fi
if ((REDIS_PARTS)); then
    echo
    if [[ $NETWORK == netem ]]; then
        echo "the delayed links' qdiscs over the whole run (netem; none at 0 µs):"
        for i in "${!RTTS[@]}"; do
            ((RTTS[i] > 0)) || continue
            ip netns exec "$CLIENT_NS" tc -s qdisc show dev "mlat${i}c$$" | sed "s/^/  rtt${RTTS[i]} client: /"
            ip netns exec "$SERVER_NS" tc -s qdisc show dev "mlat${i}s$$" | sed "s/^/  rtt${RTTS[i]} server: /"
        done
    else
        echo "delay lines over the whole run (held: from reading a packet to having written it):"
        for i in "${!RTTS[@]}"; do
            grep '^STATS' "$WORK/line$i.log" | tail -n 2 | sed "s/^STATS/  rtt${RTTS[i]}/"
            echo "  rtt${RTTS[i]} CPU time: $(ps -o times= -p "${LINE_PID[$i]}") s"
        done
    fi
    echo "network:"
    network_report
fi
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

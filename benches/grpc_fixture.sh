# shellcheck shell=bash
# Sourced by benches/grpc_h2load.sh, benches/grpc_callgrind.sh and (through
# loadgen_common.sh) the loadgen scripts: what h2load sends, the config meshlimit answers it
# with (see grpc_h2load.sh's header for what each body asks), and how the scripts check
# their tools and wait for a server.

# shellcheck disable=SC2034 # used by the scripts that source this
PATH_RLS=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

# need_tools TOOL...: exits 2 naming the first one missing and how to install it.
need_tools() {
    local tool package
    for tool in "$@"; do
        command -v "$tool" >/dev/null && continue
        case ${tool##*/} in
        h2load | nghttp) package=nghttp2-client ;;
        redis-cli) package=redis-tools ;;
        ip | tc) package=iproute2 ;;
        chrt) package=util-linux ;;
        timeout) package=coreutils ;;
        cargo) package="(none: install Rust with rustup)" ;;
        *) package=${tool##*/} ;;
        esac
        echo "$tool not found (Debian: apt-get install $package)" >&2
        exit 2
    done
}

# write_proto DIR: DIR/grpc_proto.py, the protobuf and gRPC framing the scripts' Python
# needs (standard library only), for scripts written into DIR to import.
write_proto() {
    cat >"$1/grpc_proto.py" <<'EOF'
import struct, sys

def varint(n):
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | 0x80 if n else b)
        if not n:
            return bytes(out)

def field(number, payload):  # length-delimited (wire type 2)
    return varint(number << 3 | 2) + varint(len(payload)) + payload

def descriptor(*entries):  # RateLimitDescriptor{entries: [Entry{key=1, value=2}]}
    return b"".join(field(1, field(1, k.encode()) + field(2, v.encode())) for k, v in entries)

def request(domain, *descriptors):  # RateLimitRequest{domain=1, descriptors=2}
    return field(1, domain.encode()) + b"".join(field(2, d) for d in descriptors)

def write(path, message):  # gRPC frame: uncompressed flag, big-endian length, message
    with open(path, "wb") as f:
        f.write(b"\x00" + struct.pack(">I", len(message)) + message)

def read_varint(buf, i):  # (value, index after it)
    n = shift = 0
    while True:
        b = buf[i]
        i += 1
        n |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return n, i

def fields(msg):  # (number, value) pairs: ints for varints, bytes for length-delimited
    i = 0
    while i < len(msg):
        key, i = read_varint(msg, i)
        if key & 7 == 0:
            value, i = read_varint(msg, i)
        elif key & 7 == 2:
            n, i = read_varint(msg, i)
            value, i = msg[i:i + n], i + n
            assert i <= len(msg), "truncated field"
        else:
            sys.exit(f"unexpected wire type in key {key}")
        yield key >> 3, value

def frames(data):  # the messages of a stream of uncompressed gRPC frames
    pos = 0
    while pos < len(data):
        assert data[pos] == 0 and pos + 5 <= len(data), "bad gRPC frame"
        n = struct.unpack(">I", data[pos + 1:pos + 5])[0]
        assert pos + 5 + n <= len(data), "truncated frame"
        yield data[pos + 5:pos + 5 + n]
        pos += 5 + n
EOF
}

# write_bodies DIR: DIR/{limited,unknown,two}.grpc, hand-encoded RateLimitRequests each in
# one gRPC frame (uncompressed flag, big-endian length, message); DIR/grpc_proto.py.
write_bodies() {
    write_proto "$1"
    (cd "$1" && python3 - <<'EOF'
from grpc_proto import descriptor, request, write

write("limited.grpc", request("trading", descriptor(("user_id", "alice"), ("method", "/market.Data/Quotes"))))
write("unknown.grpc", request("trading", descriptor(("user_id", "alice"))))
write("two.grpc", request("bench",
                          descriptor(("user_id", "alice"), ("method", "/trading.TradingService/SubmitOrder")),
                          descriptor(("remote_address", "10.0.0.1"))))
EOF
    )
}

# write_config DIR: DIR/config, a copy of config/ plus the domain `bench`, whose limits no
# run reaches.
write_config() {
    mkdir "$1/config"
    cp config/*.yaml "$1/config/"
    cat >"$1/config/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user_id
    descriptors:
      - key: method
        rate_limit: {unit: second, requests_per_unit: 1000000000}
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000000}
EOF
}

# cpu_ticks PID: the clock ticks (user + system) the process has used so far.
cpu_ticks() {
    awk '{ print $14 + $15 }' "/proc/$1/stat"
}

# free_port: a loopback TCP port nothing listens on (yet).
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# wait_listening PORT PID [SECONDS]: until PORT accepts (default 10 s), failing if PID exits.
wait_listening() {
    local i
    for ((i = 0; i < ${3:-10} * 10; i++)); do
        if ! kill -0 "$2" 2>/dev/null; then
            echo "server on port $1 exited" >&2
            return 1
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then
            return 0
        fi
        sleep 0.1
    done
    echo "nothing listening on port $1 after ${3:-10} s" >&2
    return 1
}

# in_range NAME MIN MAX [UNIT]: exits 2 unless the variable NAME holds a number MIN..MAX.
in_range() {
    local value=${!1}
    if ! [[ $value =~ ^[0-9]+$ ]] || ((value < $2 || value > $3)); then
        echo "$1 must be $2..$3${4:+ $4}" >&2
        exit 2
    fi
}

# grpc_call PORT BODY OUT HEADERS: one request with curl (HTTP/2 without TLS), the answer
# to OUT and the headers and trailers to HEADERS; fails unless HTTP 200 with grpc-status 0.
grpc_call() {
    curl -sS --http2-prior-knowledge --max-time 5 -D "$4" -o "$3" \
        -H 'content-type: application/grpc' -H 'te: trailers' \
        --data-binary "@$2" "http://127.0.0.1:$1$PATH_RLS" &&
        grep -q '^HTTP/2 200' "$4" && grep -qi '^grpc-status: 0' "$4"
}

# h2load_checked PID LOG H2LOAD-ARGS...: runs $H2LOAD into LOG against the server PID;
# exits 1 if that server is not running, or (LOG shown) unless every finished request
# succeeded with 0 failed, 0 errored and only 2xx responses, since h2load counts HTTP 200
# as success without reading grpc-status (the 2xx count also includes warm-up
# stragglers). Sets RPS (requests/s) and LATENCY (h2load's request min / max / mean / sd).
h2load_checked() {
    local log=$2 ndone nok
    if ! kill -0 "$1" 2>/dev/null; then
        echo "the server (pid $1) is not running" >&2
        exit 1
    fi
    shift 2
    "$H2LOAD" "$@" >"$log" 2>&1
    ndone=$(sed -n 's/^requests: .* \([0-9][0-9]*\) done.*/\1/p' "$log")
    nok=$(sed -n 's/^requests: .* \([0-9][0-9]*\) succeeded.*/\1/p' "$log")
    if [[ -z $ndone || $ndone == 0 || $ndone != "$nok" ]] ||
        ! grep -q ' 0 failed, 0 errored' "$log" ||
        ! grep -q '^status codes: [0-9]* 2xx, 0 3xx, 0 4xx, 0 5xx' "$log"; then
        echo "h2load had failures ($*):" >&2
        cat "$log" >&2
        exit 1
    fi
    RPS=$(sed -n 's/^finished in [^,]*, \([0-9.]*\) req\/s.*/\1/p' "$log")
    LATENCY=$(awk '/^time for request:/ {print $4 " / " $5 " / " $6 " / " $7}' "$log")
}

# AWK_MEDIAN: an awk function for awk programs to start with: median(r, n) of r[1..n],
# which it sorts.
AWK_MEDIAN='function median(r, n,    i, j, t) {
    for (i = 1; i <= n; i++)
        for (j = i + 1; j <= n; j++)
            if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
    return n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
}'

# machine_line: h2load's version, the cores and the load average, for a run's header.
machine_line() {
    echo "h2load: $("$H2LOAD" --version | head -1); cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# with_work_dir NAME: WORK, a fresh temporary directory, and PIDS, background processes
# to add to; on exit each is killed and waited for, the last started first (a meshlimit
# before the Redis it uses, which it would otherwise log as unreachable), and WORK removed.
with_work_dir() {
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
    PIDS=()
    trap cleanup_work_dir EXIT
    trap 'exit 130' INT TERM
}

cleanup_work_dir() {
    local i
    for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
        kill "${PIDS[i]}" 2>/dev/null || true
        wait "${PIDS[i]}" 2>/dev/null || true
    done
    rm -rf "$WORK"
}

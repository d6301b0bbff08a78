#!/usr/bin/env bash
# The bridge beside supergateway (run by hand, not in CI): the same stdio server
# (server-everything) behind `rpctap serve` and behind `supergateway --stateful
# --outputTransport streamableHttp`, each with its defaults and tuned (no log):
#
#   - per-call latency added: CALLS sequential `tools/call echo` in one session over one
#     keep-alive connection, p50/p99, minus the same calls made to the server over stdio directly;
#     rounds alternating, medians;
#   - memory per open session: OPEN sessions opened (each with its GET stream, as SDK clients
#     do), the gateway's own RSS and the RSS of the gateway with its children, per session;
#   - children left after SESSIONS abandoned sessions (the client killed without a DELETE):
#     with a GET stream each, at the defaults, counted 5 s after; and POST-only, the idle timeout
#     set to IDLE seconds on both, counted IDLE + 5 s after. Zombies counted apart.
#
#   bash benches/bridge.sh
#   ROUNDS=5 CALLS=5000 OPEN=20 SESSIONS=100 IDLE=40 bash benches/bridge.sh
#   BIN=/path/to/rpctap bash benches/bridge.sh    # that build, not a fresh release build
#
# IDLE must outlast opening SESSIONS sessions (each starts a Node process, ~0.2 s here).
#
# supergateway is installed under target/bench/node (npm, pinned): a rival measured here, not a
# test peer. server-everything is the test peer from scripts/peers.sh. Loopback only.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
CALLS=${CALLS:-2000}
OPEN=${OPEN:-50}
SESSIONS=${SESSIONS:-100}
IDLE=${IDLE:-60}
SGW_VERSION=4.0.0
WORK=$(mktemp -d /tmp/rpctap-bridge.XXXXXX)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
source benches/common.sh
bash scripts/peers.sh >/dev/null
if [ -z "${BIN:-}" ]; then
  cargo build --release -q --bin rpctap
  BIN=$PWD/target/release/rpctap
fi
NODE_DIR=$PWD/target/bench/node
if [ "$(cat "$NODE_DIR/rpctap-installed" 2>/dev/null)" != "supergateway@$SGW_VERSION" ]; then
  mkdir -p "$NODE_DIR"
  npm install --silent --no-audit --no-fund --prefix "$NODE_DIR" "supergateway@$SGW_VERSION"
  echo "supergateway@$SGW_VERSION" > "$NODE_DIR/rpctap-installed"
fi
SGW=$NODE_DIR/node_modules/.bin/supergateway
EVERYTHING=$PWD/target/interop/node/node_modules/@modelcontextprotocol/server-everything/dist/index.js
SERVER="node $EVERYTHING stdio"
CLIENT=(python3 benches/bridge_client.py)

# start NAME PORT [FLAGS…]: a gateway on PORT in front of the server; sets GW_PID.
start() {
  local name=$1 port=$2; shift 2
  case $name in
    rpctap*) $BIN serve --no-tui --listen 127.0.0.1:$port "$@" -- $SERVER > "$WORK/$name.out" 2>&1 & ;;
    own-http) PORT=$port node "$EVERYTHING" streamableHttp > "$WORK/$name.out" 2>&1 & ;;
    sgw*) $SGW --stdio "$SERVER" --outputTransport streamableHttp --stateful --port "$port" "$@" \
            > "$WORK/$name.out" 2>&1 & ;;
  esac
  GW_PID=$!
  PIDS+=("$GW_PID")
  wait_port "$port"
}
stop() { kill "$GW_PID" 2>/dev/null || true; wait "$GW_PID" 2>/dev/null || true; }

flags() { # the tuned flags of a row
  case $1 in
    rpctap-log-off) echo "--log off" ;;
    sgw-log-none) echo "--logLevel none" ;;
    *) echo "" ;;
  esac
}

# own-http: server-everything's own Streamable HTTP mode, no gateway: what HTTP itself costs
# this client and this server.
ROWS=(own-http rpctap rpctap-log-off sgw sgw-log-none)
declare -A P50 P99
for r in $(seq 1 "$ROUNDS"); do
  read -r p50 p99 < <("${CLIENT[@]}" direct "$CALLS" $SERVER)
  P50[direct]+="$p50 "; P99[direct]+="$p99 "
  echo "  round $r direct: p50 $p50 µs, p99 $p99 µs" >&2
  for n in "${ROWS[@]}"; do
    port=$(free_port)
    # shellcheck disable=SC2046
    start "$n" "$port" $(flags "$n")
    read -r p50 p99 < <("${CLIENT[@]}" latency "$CALLS" "http://127.0.0.1:$port/mcp")
    stop
    P50[$n]+="$p50 "; P99[$n]+="$p99 "
    echo "  round $r $n: p50 $p50 µs, p99 $p99 µs" >&2
  done
done

echo
echo "| $CALLS sequential calls, one session, $ROUNDS rounds | round trip p50 µs | p99 µs | added p50 µs | added p99 µs |"
echo "|---|---|---|---|---|"
d50=$(median ${P50[direct]}); d99=$(median ${P99[direct]})
echo "| server-everything over stdio, direct | $d50 | $d99 | – | – |"
for n in "${ROWS[@]}"; do
  m50=$(median ${P50[$n]}); m99=$(median ${P99[$n]})
  echo "| $n $(flags "$n") | $m50 | $m99 | $(python3 -c "print(round($m50 - $d50))") | $(python3 -c "print(round($m99 - $d99))") |"
done

# children PID: "servers zombies": the server processes (server-everything's node; a gateway
# may start each through a shell) among PID's descendants, and its descendants left as zombies.
children() {
  python3 - "$1" <<'PY'
import os, sys
root = int(sys.argv[1]); parent = {}; state = {}; cmd = {}
for e in os.listdir("/proc"):
    if not e.isdigit(): continue
    try:
        rest = open("/proc/%s/stat" % e).read().rsplit(")", 1)[1].split()
        cmd[int(e)] = open("/proc/%s/cmdline" % e, "rb").read()
    except OSError: continue
    parent[int(e)] = int(rest[1]); state[int(e)] = rest[0]
tree, todo = [], [root]
while todo:
    p = todo.pop(); kids = [c for c, pp in parent.items() if pp == p]; tree += kids; todo += kids
print(sum(state[p] != "Z" and cmd[p].startswith(b"node\0") for p in tree), sum(state[p] == "Z" for p in tree))
PY
}

echo
echo "| $OPEN open sessions, each with its GET stream | gateway RSS per session KiB | gateway + children per session KiB | gateway RSS at 0 sessions KiB |"
echo "|---|---|---|---|"
for n in rpctap sgw; do
  port=$(free_port)
  start "$n" "$port"
  coproc SESS { GET=1 "${CLIENT[@]}" sessions "$OPEN" "http://127.0.0.1:$port/mcp" "$GW_PID"; }
  read -r b_own b_tree a_own a_tree _ <&"${SESS[0]}"
  read -r alive _ < <(children "$GW_PID")
  echo >&"${SESS[1]}"; wait "$SESS_PID" 2>/dev/null || true
  stop
  echo "| $n | $(( (a_own - b_own) / OPEN )) | $(( (a_tree - b_tree) / OPEN )) | $b_own |"
  echo "  $n: $alive server processes with $OPEN sessions open" >&2
done

echo
echo "| $SESSIONS sessions abandoned (client killed, no DELETE) | server processes left | zombies |"
echo "|---|---|---|"
abandon() { # abandon NAME GET WAIT FLAGS…: open, abandon, wait, count
  local n=$1 get=$2 after=$3; shift 3
  local port; port=$(free_port)
  start "$n" "$port" "$@"
  coproc SESS { GET=$get "${CLIENT[@]}" sessions "$SESSIONS" "http://127.0.0.1:$port/mcp" "$GW_PID"; }
  read -r _ _ _ _ _ <&"${SESS[0]}"
  read -r alive _ < <(children "$GW_PID")
  kill -9 "$SESS_PID" 2>/dev/null || true; wait "$SESS_PID" 2>/dev/null || true
  sleep "$after"
  read -r left zombies < <(children "$GW_PID")
  stop
  local kind="POST only"; [ "$get" = 1 ] && kind="with a GET stream"
  echo "| $n $*: $kind, counted ${after} s after ($alive servers before) | $left | $zombies |"
}
abandon rpctap 1 5 --max-sessions 1000
abandon sgw 1 5
abandon rpctap 0 $((IDLE + 5)) --max-sessions 1000 --session-idle "${IDLE}s"
abandon sgw 0 $((IDLE + 5)) --sessionTimeout $((IDLE * 1000))

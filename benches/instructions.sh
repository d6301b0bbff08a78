#!/usr/bin/env bash
# Instructions per proxied call, run by hand (not in CI): the figure that does not drift on a
# noisy machine, for judging a change to rpctap's own code (benches/RESULTS.md).
#
#   bash benches/instructions.sh          # nginx, the hyper floor, rpctap, its defaults, --record
#   SECS=20 bash benches/instructions.sh
#   BIN=target/thin/release/rpctap bash benches/instructions.sh   # another build of rpctap
#   PROFILE=dist bash benches/instructions.sh   # another cargo profile (rpctap and the floor)
#   ONLY="rpctap rpctap-defaults" bash benches/instructions.sh   # some rows only
#   BUDGET_ABOVE_FLOOR=18500 BUDGET_RECORD=14500 BUDGET_ADMIN=2100 bash benches/instructions.sh   # fail if over
#
# Each proxy runs under `valgrind --tool=callgrind` (one worker thread) in front of rpctap's demo
# server; `wrk -t1 -c50` warms it up for 2 s, the counters are zeroed, then SECS seconds of load
# are measured and dumped: user-space instructions executed (all threads) ÷ requests served. The
# kernel's part is not counted (strace shows the same two recvfrom + two writev per request for
# all of them). Installs what it needs (apt: nginx wrk valgrind). Loopback only; bounded by SECS.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS=${SECS:-10}
WORK=$(mktemp -d /tmp/rpctap-instr.XXXXXX)
chmod 755 "$WORK"
export RPCTAP_THREADS=1
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1; }
if ! need nginx || ! need wrk || ! need valgrind; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk valgrind >/dev/null
fi
# PROFILE=dist (or profiling, …) measures that cargo profile's builds of rpctap and the floor;
# BIN=/path/to/rpctap measures that build of rpctap beside the profile's floor.
PROFILE=${PROFILE:-release}
cargo build --profile "$PROFILE" -q --bin rpctap --example hyper_floor
BIN=${BIN:-target/$PROFILE/rpctap}
FLOOR=target/$PROFILE/examples/hyper_floor
# ONLY="rpctap rpctap-defaults" measures those rows alone (the summary needs them all).
ONLY=${ONLY:-}
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

source benches/common.sh

UP=$(free_port); $BIN demo-server --listen 127.0.0.1:$UP 2>/dev/null & PIDS+=($!)
wait_port $UP
write_call_lua $WORK/call.lua

# measure NAME PORT -- COMMAND...: runs COMMAND under callgrind listening on PORT.
measure() {
  local name=$1 port=$2; shift 3
  if [ -n "$ONLY" ] && [[ " $ONLY " != *" $name "* ]]; then IR[$name]=0; return; fi
  # What it prints on stdout (the text log) goes to a file, as a log collector would read it.
  valgrind -q --tool=callgrind --callgrind-out-file=$WORK/$name.%p "$@" > $WORK/$name.out & local vp=$!
  wait_port $port
  wrk -t1 -c50 -d2s -s $WORK/call.lua http://127.0.0.1:$port/ >/dev/null
  callgrind_control -z $vp >/dev/null 2>&1
  local out n ir
  out=$(wrk -t1 -c50 -d${SECS}s -s $WORK/call.lua http://127.0.0.1:$port/)
  callgrind_control -d $vp >/dev/null 2>&1
  sleep 1
  kill $vp 2>/dev/null || true; wait $vp 2>/dev/null || true
  n=$(echo "$out" | awk '/requests in/{print $1}')
  ir=$(awk '/^totals:/{print $2}' $(ls -t $WORK/$name.*.1 | head -1))
  IR[$name]=$((ir / n))
  echo "| $name | $n | ${IR[$name]} |"
}
declare -A IR

cat > $WORK/nginx.conf <<NGX
master_process off;
daemon off;
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$UP; keepalive 256; }
  server {
    listen 127.0.0.1:PORT;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
NGX

echo "| proxy | requests measured | instructions / call |"
echo "|---|---|---|"
P=$(free_port); sed -i "s/PORT/$P/" $WORK/nginx.conf
measure nginx $P -- $NGINX -c $WORK/nginx.conf
P=$(free_port); measure hyper-floor $P -- $FLOOR 127.0.0.1:$P 127.0.0.1:$UP
P=$(free_port); measure rpctap $P -- $BIN proxy --no-tui --log off --listen 127.0.0.1:$P --upstream http://127.0.0.1:$UP
# The defaults a user runs: the text log, one line per call on stdout (here into a file).
P=$(free_port); measure rpctap-defaults $P -- $BIN proxy --no-tui --listen 127.0.0.1:$P --upstream http://127.0.0.1:$UP
P=$(free_port); measure rpctap+record $P -- $BIN proxy --no-tui --log off --listen 127.0.0.1:$P --upstream http://127.0.0.1:$UP --record $WORK/rec.jsonl
# The admin listener on (metrics counted per call; the feed gated shut, nobody attached).
P=$(free_port); A=$(free_port); measure rpctap+admin $P -- $BIN proxy --no-tui --log off --listen 127.0.0.1:$P --upstream http://127.0.0.1:$UP --admin 127.0.0.1:$A

# Without the loopback listener's Host check (`--preserve-host` leaves it to the upstream).
P=$(free_port); measure rpctap+preserve-host $P -- $BIN proxy --no-tui --log off --listen 127.0.0.1:$P --upstream http://127.0.0.1:$UP --preserve-host

# A fault rule that matches no call (issue 37): its glob match per call.
P=$(free_port); measure rpctap+fault-miss $P -- $BIN proxy --no-tui --log off --listen 127.0.0.1:$P --upstream http://127.0.0.1:$UP --fault tool=never-called,drop

# rpctap's own work: what it executes above the floor (the same stack forwarding blindly), and
# what recording adds. With BUDGET_ABOVE_FLOOR / BUDGET_RECORD set (instructions per call), the
# script fails when a budget is exceeded — targets a noisy machine can check.
above=$((IR[rpctap] - IR[hyper-floor])); record=$((IR[rpctap+record] - IR[rpctap]))
echo
admin=$((IR[rpctap+admin] - IR[rpctap]))
fault=$((IR[rpctap+fault-miss] - IR[rpctap]))
text=$((IR[rpctap-defaults] - IR[rpctap]))
echo "rpctap above the hyper floor: $above instructions/call; the text log (the defaults) adds $text; --record adds $record; --admin adds $admin; a fault rule matching nothing adds $fault"
echo "ratios to nginx: floor $(awk "BEGIN{printf \"%.2f\", ${IR[hyper-floor]}/${IR[nginx]}}"), rpctap $(awk "BEGIN{printf \"%.2f\", ${IR[rpctap]}/${IR[nginx]}}"), --record $(awk "BEGIN{printf \"%.2f\", ${IR[rpctap+record]}/${IR[nginx]}}")"
fail=0
if [ -n "${BUDGET_ADMIN:-}" ] && [ "$admin" -gt "$BUDGET_ADMIN" ]; then
  echo "over budget: $admin > BUDGET_ADMIN=$BUDGET_ADMIN"; fail=1
fi
if [ -n "${BUDGET_ABOVE_FLOOR:-}" ] && [ "$above" -gt "$BUDGET_ABOVE_FLOOR" ]; then
  echo "over budget: $above > BUDGET_ABOVE_FLOOR=$BUDGET_ABOVE_FLOOR"; fail=1
fi
if [ -n "${BUDGET_RECORD:-}" ] && [ "$record" -gt "$BUDGET_RECORD" ]; then
  echo "over budget: $record > BUDGET_RECORD=$BUDGET_RECORD"; fail=1
fi
exit $fail

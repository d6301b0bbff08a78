#!/usr/bin/env bash
# Load benchmark, run by hand (not in CI): rpctap side by side with nginx and mitmproxy.
#
#   bash benches/load.sh            # 3 alternating rounds of 5 s each
#   ROUNDS=5 SECS=10 bash benches/load.sh
#   MULTI=8 WRK_THREADS=4 bash benches/load.sh   # the multi-core rows at 8 threads (a bigger machine)
#
# Rows at one runtime thread (nginx has one worker) are the tuned setup; the multi-core rows put
# the hyper floor and rpctap `--log off` at MULTI threads (default 2) beside them, and
# `rpctap-defaults` is what a user runs: no flags but the addresses — a text log line per call
# (here into a file, as a log collector would read it) and one runtime thread per core
# (`rpctap-defaults-1t`: the same at one thread).
#
# Installs what it needs (apt: nginx wrk; pip: mitmproxy into target/bench-venv), builds rpctap
# in release mode, and prints a Markdown table. Everything runs on loopback; every loop is
# bounded by ROUNDS × SECS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
CONNS=${CONNS:-50}
WORK=$(mktemp -d /tmp/rpctap-bench.XXXXXX)
chmod 755 "$WORK" # nginx's workers read the big-body file from here
# nginx runs one worker; rpctap gets one worker thread too, for a like-for-like comparison.
export RPCTAP_THREADS=${RPCTAP_THREADS:-1}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1; }
if ! need nginx || ! need wrk; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk >/dev/null
fi
VENV=target/bench-venv
if [ ! -x "$VENV/bin/mitmdump" ]; then
  python3 -m venv "$VENV" && "$VENV/bin/pip" install -q mitmproxy >/dev/null
fi
cargo build --release -q --bin rpctap --example hyper_floor --example ws_bench
BIN=target/release/rpctap
NGINX=$(command -v nginx || echo /usr/sbin/nginx)

source benches/common.sh

# The upstream: rpctap's demo server (answers every call with its own id, so nothing is flagged).
UP=$(free_port); $BIN demo-server --listen 127.0.0.1:$UP 2>/dev/null & PIDS+=($!); UP_PID=$!
wait_port $UP

# nginx as a reverse proxy: proxy_pass with an upstream keep-alive pool, one worker, no
# buffering. Usage: nginx_proxy NAME LISTEN_PORT UPSTREAM_PORT (config and pid under $WORK/NAME.*).
nginx_proxy() {
  cat > $WORK/$1.conf <<NGX
worker_processes 1;
pid $WORK/$1.pid;
error_log $WORK/$1.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  upstream up { server 127.0.0.1:$3; keepalive 256; }
  server {
    listen 127.0.0.1:$2;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; }
  }
}
NGX
  $NGINX -c $WORK/$1.conf -g 'daemon off;' & PIDS+=($!); NGINX_MASTER=$!
}
NG=$(free_port)
nginx_proxy nginx $NG $UP
wait_port $NG
# The worker of this nginx (not of any other nginx on the machine) is what serves and is measured.
sleep 0.3; NG_PID=$(pgrep -P $NGINX_MASTER | head -1)

RT=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$RT --upstream http://127.0.0.1:$UP & PIDS+=($!); RT_PID=$!
RR=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$RR --upstream http://127.0.0.1:$UP --record $WORK/rec.jsonl & PIDS+=($!); RR_PID=$!
RL=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$RL --upstream http://127.0.0.1:$UP --limit 'tools/call=1000000/s' & PIDS+=($!); RL_PID=$!
# The admin listener on (metrics counted from the bus; the feed kept, nobody attached), and the
# same with one /events client reading the feed (what `rpctap attach` costs the proxy).
RA=$(free_port); RAA=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$RA --upstream http://127.0.0.1:$UP --admin 127.0.0.1:$RAA & PIDS+=($!); RA_PID=$!
RF=$(free_port); RFA=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$RF --upstream http://127.0.0.1:$UP --admin 127.0.0.1:$RFA & PIDS+=($!); RF_PID=$!
# The floor: the same hyper stack forwarding without inspecting (examples/hyper_floor.rs).
HF=$(free_port); target/release/examples/hyper_floor 127.0.0.1:$HF 127.0.0.1:$UP & PIDS+=($!); HF_PID=$!
# The multi-core rows: the floor and rpctap at MULTI threads, and rpctap's defaults.
MULTI=${MULTI:-2}
HF2=$(free_port); RPCTAP_THREADS=$MULTI target/release/examples/hyper_floor 127.0.0.1:$HF2 127.0.0.1:$UP & PIDS+=($!); HF2_PID=$!
RT2=$(free_port); RPCTAP_THREADS=$MULTI $BIN proxy --no-tui --log off --listen 127.0.0.1:$RT2 --upstream http://127.0.0.1:$UP & PIDS+=($!); RT2_PID=$!
RD=$(free_port); env -u RPCTAP_THREADS $BIN proxy --no-tui --listen 127.0.0.1:$RD --upstream http://127.0.0.1:$UP > $WORK/defaults.log & PIDS+=($!); RD_PID=$!
RD1=$(free_port); $BIN proxy --no-tui --listen 127.0.0.1:$RD1 --upstream http://127.0.0.1:$UP > $WORK/defaults-1t.log & PIDS+=($!); RD1_PID=$!
MP=$(free_port); $VENV/bin/mitmdump -q --mode reverse:http://127.0.0.1:$UP -p $MP --listen-host 127.0.0.1 & PIDS+=($!); MP_PID=$!
for p in $RT $RR $RL $HF $HF2 $RT2 $RD $RD1 $MP $RA $RAA $RF $RFA; do wait_port $p; done
curl -sN http://127.0.0.1:$RFA/events > /dev/null & PIDS+=($!)
# A scrape per second, as an eager Prometheus would (the usual interval is 15 s).
( while sleep 1; do curl -s http://127.0.0.1:$RAA/metrics > /dev/null; curl -s http://127.0.0.1:$RFA/metrics > /dev/null; done ) & PIDS+=($!)

write_call_lua $WORK/call.lua

cpu_ticks() { awk '{print $14+$15}' /proc/$1/stat; }
hwm_kib() { awk '/VmHWM/{print $2}' /proc/$1/status; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))

declare -A RPS P50 P99 CPU
run_one() { # name port pid
  local name=$1 port=$2 pid=$3 c0 c1 out rps reqs
  c0=$(cpu_ticks $pid)
  out=$(wrk -t${WRK_THREADS:-1} -c$CONNS -d${SECS}s --latency -s $WORK/call.lua http://127.0.0.1:$port 2>&1)
  c1=$(cpu_ticks $pid)
  rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  reqs=$(echo "$out" | awk '/requests in/{print $1}')
  local p50 p99
  p50=$(echo "$out" | awk '$1=="50%"{print $2}')
  p99=$(echo "$out" | awk '$1=="99%"{print $2}')
  local cpu_us
  cpu_us=$(python3 -c "print(round(($c1-$c0)*$TICK_US/max($reqs,1),1))")
  RPS[$name]+="$rps "; P50[$name]+="$p50 "; P99[$name]+="$p99 "; CPU[$name]+="$cpu_us "
  echo "  $name: $rps req/s, p50 $p50, p99 $p99, $cpu_us µs CPU/request" >&2
}

NAMES=(direct nginx hyper-floor rpctap hyper-floor-${MULTI}t rpctap-${MULTI}t rpctap-defaults rpctap-defaults-1t rpctap+admin rpctap+admin+feed rpctap+record rpctap+limit mitmproxy)
# NAMES_ONLY="rpctap rpctap+admin" runs just those (e.g. to measure one feature side by side).
if [ -n "${NAMES_ONLY:-}" ]; then read -r -a NAMES <<< "$NAMES_ONLY"; fi
declare -A PORT=([direct]=$UP [nginx]=$NG [hyper-floor]=$HF [rpctap]=$RT [hyper-floor-${MULTI}t]=$HF2 [rpctap-${MULTI}t]=$RT2 [rpctap-defaults]=$RD [rpctap-defaults-1t]=$RD1 [rpctap+admin]=$RA [rpctap+admin+feed]=$RF [rpctap+record]=$RR [rpctap+limit]=$RL [mitmproxy]=$MP)
declare -A PID=([direct]=$UP_PID [nginx]=$NG_PID [hyper-floor]=$HF_PID [rpctap]=$RT_PID [hyper-floor-${MULTI}t]=$HF2_PID [rpctap-${MULTI}t]=$RT2_PID [rpctap-defaults]=$RD_PID [rpctap-defaults-1t]=$RD1_PID [rpctap+admin]=$RA_PID [rpctap+admin+feed]=$RF_PID [rpctap+record]=$RR_PID [rpctap+limit]=$RL_PID [mitmproxy]=$MP_PID)
# BASE_BIN=path: another build of rpctap as the row `rpctap-base`, to compare two builds side by
# side (e.g. BASE_BIN=… NAMES_ONLY="nginx rpctap rpctap-base").
if [ -n "${BASE_BIN:-}" ]; then
  RB=$(free_port); $BASE_BIN proxy --no-tui --log off --listen 127.0.0.1:$RB --upstream http://127.0.0.1:$UP & PIDS+=($!); RB_PID=$!
  wait_port $RB
  PORT[rpctap-base]=$RB; PID[rpctap-base]=$RB_PID
fi
for r in $(seq 1 $ROUNDS); do
  echo "round $r" >&2
  for n in "${NAMES[@]}"; do run_one "$n" "${PORT[$n]}" "${PID[$n]}"; done
done


echo
echo "| setup | req/s | p50 µs | p99 µs | CPU µs/req | peak RSS MiB |"
echo "|---|---|---|---|---|---|"
declare -A MRPS MP50 MCPU
for n in "${NAMES[@]}"; do
  MRPS[$n]=$(median ${RPS[$n]}); MP50[$n]=$(median ${P50[$n]}); MCPU[$n]=$(median ${CPU[$n]})
  rss=$(python3 -c "print(round($(hwm_kib ${PID[$n]})/1024,1))")
  echo "| $n | ${MRPS[$n]} | ${MP50[$n]} | $(median ${P99[$n]}) | ${MCPU[$n]} | $rss |"
done
r() { python3 -c "print(round($1/$2,2))"; }
if [ -n "${NAMES_ONLY:-}" ]; then
  for n in "${NAMES[@]}"; do echo "$n / ${NAMES[0]} req/s: $(r ${MRPS[$n]} ${MRPS[${NAMES[0]}]}); CPU per request: $(r ${MCPU[$n]} ${MCPU[${NAMES[0]}]})"; done
  exit 0
fi
echo
echo "rpctap --admin / rpctap req/s: $(r ${MRPS[rpctap+admin]} ${MRPS[rpctap]}) (CPU per request $(r ${MCPU[rpctap+admin]} ${MCPU[rpctap]})); with a feed client: $(r ${MRPS[rpctap+admin+feed]} ${MRPS[rpctap]}) (CPU $(r ${MCPU[rpctap+admin+feed]} ${MCPU[rpctap]}))"
echo
echo "rpctap/nginx req/s: $(r ${MRPS[rpctap]} ${MRPS[nginx]}); with --record: $(r ${MRPS[rpctap+record]} ${MRPS[nginx]}); with a limit rule: $(r ${MRPS[rpctap+limit]} ${MRPS[nginx]})"
echo "rpctap/nginx CPU per request: $(r ${MCPU[rpctap]} ${MCPU[nginx]}); p50 rpctap/nginx: $(r ${MP50[rpctap]} ${MP50[nginx]})"
echo "rpctap/mitmproxy req/s: $(r ${MRPS[rpctap]} ${MRPS[mitmproxy]})"
echo "the hyper floor (same stack, no inspection)/nginx: req/s $(r ${MRPS[hyper-floor]} ${MRPS[nginx]}), CPU per request $(r ${MCPU[hyper-floor]} ${MCPU[nginx]}); rpctap's own work: $(python3 -c "print(round(${MCPU[rpctap]} - ${MCPU[hyper-floor]}, 1))") µs CPU/request"
M=${MULTI}t
echo "multi-core: the floor's CPU per request at $M ÷ 1 thread $(r ${MCPU[hyper-floor-$M]} ${MCPU[hyper-floor]}), rpctap's (--log off) $(r ${MCPU[rpctap-$M]} ${MCPU[rpctap]})"
echo "the defaults (text log, a thread per core) ÷ the floor at $M: req/s $(r ${MRPS[rpctap-defaults]} ${MRPS[hyper-floor-$M]}), CPU per request $(r ${MCPU[rpctap-defaults]} ${MCPU[hyper-floor-$M]}); at one thread: req/s $(r ${MRPS[rpctap-defaults-1t]} ${MRPS[hyper-floor]}), CPU $(r ${MCPU[rpctap-defaults-1t]} ${MCPU[hyper-floor]}); the text log's CPU per request (defaults-1t − rpctap): $(python3 -c "print(round(${MCPU[rpctap-defaults-1t]} - ${MCPU[rpctap]}, 2))") µs"
echo "recording: $(wc -l < $WORK/rec.jsonl) lines, $(grep -c '"event":"gap"' $WORK/rec.jsonl || true) gap records"

# WebSocket: JSON-RPC calls over one WebSocket per connection (one call at a time on each), a
# tokio-tungstenite server and client (examples/ws_bench.rs): direct, through nginx (which
# proxies an upgraded connection blind), through rpctap (every message inspected and
# correlated) and rpctap with a limit rule (the client's messages held until whole).
WS_CONNS=${WS_CONNS:-50}
WU=$(free_port); target/release/examples/ws_bench server 127.0.0.1:$WU & PIDS+=($!); WU_PID=$!
wait_port $WU
WN=$(free_port)
cat > $WORK/nginx-ws.conf <<NGX
worker_processes 1;
pid $WORK/nginx-ws.pid;
error_log $WORK/nginx-ws.err warn;
events { worker_connections 4096; }
http {
  access_log off;
  server {
    listen 127.0.0.1:$WN;
    location / { proxy_pass http://127.0.0.1:$WU; proxy_http_version 1.1; proxy_set_header Upgrade \$http_upgrade; proxy_set_header Connection "upgrade"; proxy_read_timeout 1h; }
  }
}
NGX
$NGINX -c $WORK/nginx-ws.conf -g 'daemon off;' & PIDS+=($!); WN_MASTER=$!
WR=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$WR --upstream http://127.0.0.1:$WU & PIDS+=($!); WR_PID=$!
WL=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$WL --upstream http://127.0.0.1:$WU --limit 'tools/call=1000000/s' & PIDS+=($!); WL_PID=$!
for p in $WN $WR $WL; do wait_port $p; done
sleep 0.3; WN_PID=$(pgrep -P $WN_MASTER | head -1)
declare -A WRPS WP50 WP99 WCPU
for r in $(seq 1 $ROUNDS); do
  for n in direct nginx rpctap rpctap+limit; do
    case $n in direct) port=$WU pid=$WU_PID ;; nginx) port=$WN pid=$WN_PID ;; rpctap) port=$WR pid=$WR_PID ;; *) port=$WL pid=$WL_PID ;; esac
    c0=$(cpu_ticks $pid)
    read -r rps p50 p99 errs < <(target/release/examples/ws_bench load ws://127.0.0.1:$port/ $WS_CONNS $SECS)
    c1=$(cpu_ticks $pid)
    cpu=$(python3 -c "print(round(($c1-$c0)*$TICK_US/max($rps*$SECS,1),1))")
    echo "  ws $n: $rps calls/s, p50 $p50 µs, p99 $p99 µs, $cpu µs CPU/call, $errs errors" >&2
    WRPS[$n]+="$rps "; WP50[$n]+="$p50 "; WP99[$n]+="$p99 "; WCPU[$n]+="$cpu "
  done
done
echo
echo "| WebSocket ($WS_CONNS connections, one call at a time each) | calls/s | p50 µs | p99 µs | CPU µs/call (of the proxy; direct: the server) |"
echo "|---|---|---|---|---|"
for n in direct nginx rpctap rpctap+limit; do
  echo "| $n | $(median ${WRPS[$n]}) | $(median ${WP50[$n]}) | $(median ${WP99[$n]}) | $(median ${WCPU[$n]}) |"
done
echo
echo "WebSocket rpctap/nginx calls/s: $(r $(median ${WRPS[rpctap]}) $(median ${WRPS[nginx]})); with a limit rule: $(r $(median ${WRPS[rpctap+limit]}) $(median ${WRPS[nginx]})); rpctap/direct: $(r $(median ${WRPS[rpctap]}) $(median ${WRPS[direct]}))"

# SSE, per-event latency: a Python upstream writes 20 events 5 ms apart, each stamped with its
# monotonic write time; the client reads them directly, through nginx (proxy_buffering off) and
# through rpctap, alternating, and reports read time - write time.
SU=$(free_port); python3 benches/sse_latency.py serve $SU 20 0.005 & PIDS+=($!)
SN=$(free_port)
nginx_proxy nginx-sse $SN $SU
SR=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$SR --upstream http://127.0.0.1:$SU & PIDS+=($!)
for p in $SU $SN $SR; do wait_port $p; done
declare -A SSE=()
for r in $(seq 1 $((ROUNDS * 2))); do
  for n in direct nginx rpctap; do
    port=$([ $n = direct ] && echo $SU || ([ $n = nginx ] && echo $SN || echo $SR))
    SSE[$n]+="$(python3 benches/sse_latency.py measure $port 10) "
  done
done
echo
echo "| SSE event latency (20 events × 10 calls × $((ROUNDS * 2)) rounds) | median µs, upstream write → client read |"
echo "|---|---|"
for n in direct nginx rpctap; do echo "| $n | $(median ${SSE[$n]}) |"; done
echo
echo "added per event: rpctap $(python3 -c "print(round($(median ${SSE[rpctap]}) - $(median ${SSE[direct]})))") µs, nginx $(python3 -c "print(round($(median ${SSE[nginx]}) - $(median ${SSE[direct]})))") µs"

# SSE throughput: one 20,000-event reply from the demo's slow tool, direct vs through rpctap.
python3 - "$UP" "$RT" <<'PY'
import http.client, json, sys, time
up, rt = int(sys.argv[1]), int(sys.argv[2])
def session(port):
    c = http.client.HTTPConnection("127.0.0.1", port)
    c.request("POST", "/mcp", json.dumps({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}),
              {"content-type":"application/json","accept":"application/json, text/event-stream"})
    r = c.getresponse(); sid = r.getheader("mcp-session-id"); r.read(); return c, sid
def stream(c, sid, steps):
    body = json.dumps({"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{"steps":steps,"delay_ms":0},"_meta":{"progressToken":1}}})
    t0 = time.perf_counter()
    c.request("POST", "/mcp", body, {"content-type":"application/json","accept":"application/json, text/event-stream","mcp-session-id":sid})
    r = c.getresponse(); n = 0; buf = b""
    while True:
        chunk = r.read1(65536)
        if not chunk: break
        buf += chunk
        n += buf.count(b"\n\n"); buf = buf[buf.rfind(b"\n\n") + 2:] if b"\n\n" in buf else buf
    return n / (time.perf_counter() - t0)
print()
print("| SSE throughput | events/s (one 20,000-event reply) |")
print("|---|---|")
for name, port in (("direct", up), ("rpctap", rt)):
    c, sid = session(port)
    print(f"| {name} | {stream(c, sid, 20000):.0f} |")
PY

# Big body: a 100 MiB JSON-RPC reply, throughput and RSS growth of the proxy.
python3 -c "
import sys
with open('$WORK/big.json','w') as f:
    f.write('{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"'); f.write('x'*(100*1024*1024)); f.write('\"}')"
chmod 644 $WORK/big.json
BG=$(free_port)
cat > $WORK/nginx-big.conf <<NGX
worker_processes 1;
pid $WORK/nginx-big.pid;
error_log $WORK/nginx-big.err warn;
events { worker_connections 64; }
http { access_log off; server { listen 127.0.0.1:$BG; root $WORK; location / { default_type application/json; error_page 405 =200 \$uri; } } }
NGX
$NGINX -c $WORK/nginx-big.conf -g 'daemon off;' & PIDS+=($!)
RB=$(free_port); $BIN proxy --no-tui --log off --listen 127.0.0.1:$RB --upstream http://127.0.0.1:$BG & PIDS+=($!); RB_PID=$!
wait_port $BG; wait_port $RB
before=$(hwm_kib $RB_PID)
direct=$(curl -s -o /dev/null -w '%{speed_download}' -X POST -H 'content-type: application/json' -d '{"jsonrpc":"2.0","method":"big","id":1}' http://127.0.0.1:$BG/big.json)
via=$(curl -s -o /dev/null -w '%{speed_download}' -X POST -H 'content-type: application/json' -d '{"jsonrpc":"2.0","method":"big","id":1}' http://127.0.0.1:$RB/big.json)
after=$(hwm_kib $RB_PID)
echo
echo "| 100 MiB reply | MB/s |"
echo "|---|---|"
echo "| direct | $(python3 -c "print(round($direct/1e6))") |"
echo "| rpctap | $(python3 -c "print(round($via/1e6))") |"
echo
echo "rpctap peak RSS growth during the 100 MiB reply: $(python3 -c "print(round(($after-$before)/1024,1))") MiB"

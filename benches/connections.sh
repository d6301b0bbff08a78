#!/usr/bin/env bash
# Idle connections, run by hand (not in CI): RSS per idle keep-alive client connection and per
# idle MCP GET stream (1 s and HOLD s after they are all open: rpctap parks an idle HTTP/1
# connection after a second, and the freed memory goes back to the system some seconds later),
# the upstream connections each proxy holds for them, and RSS some seconds after the burst
# closed — rpctap, the hyper floor and nginx side by side (issue 19's table); then a normal
# client's latency with and without 1,000 slowloris connections (rpctap and nginx).
#
#   bash benches/connections.sh                 # 4,000 idle connections, 2,000 streams
#   N=1000 STREAMS=500 SETTLE=30 HOLD=20 bash benches/connections.sh
#   ONLY_SLOW=1 SLOW=1000 bash benches/connections.sh   # just the slowloris table
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-4000}
STREAMS=${STREAMS:-2000}
SETTLE=${SETTLE:-20}
HOLD=${HOLD:-15}
SLOW=${SLOW:-1000}
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
echo "fd limit: $(ulimit -n)" >&2
WORK=$(mktemp -d /tmp/rpctap-conns.XXXXXX)
chmod 755 "$WORK"
export RPCTAP_THREADS=${RPCTAP_THREADS:-1}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
command -v nginx >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; }
cargo build --release -q --bin rpctap --example hyper_floor
BIN=target/release/rpctap
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
source benches/common.sh

UP=$(free_port); $BIN demo-server --listen 127.0.0.1:$UP 2>/dev/null & PIDS+=($!)
wait_port $UP
# start NAME: starts a fresh proxy (a clean baseline for each measurement); sets PORT and PID.
start() {
  PORT=$(free_port)
  case $1 in
    nginx)
      cat > $WORK/nginx.conf <<NGX
worker_processes 1;
pid $WORK/nginx.pid;
error_log $WORK/nginx.err warn;
worker_rlimit_nofile 65536;
events { worker_connections 20000; }
http {
  access_log off;
  keepalive_timeout 300s;
  upstream up { server 127.0.0.1:$UP; keepalive 64; }
  server {
    listen 127.0.0.1:$PORT;
    location / { proxy_pass http://up; proxy_http_version 1.1; proxy_set_header Connection ""; proxy_buffering off; proxy_read_timeout 1h; }
  }
}
NGX
      $NGINX -c $WORK/nginx.conf -g 'daemon off;' & MASTER=$!
      wait_port $PORT; sleep 0.3; PID=$(pgrep -P $MASTER | head -1) ;;
    hyper-floor) target/release/examples/hyper_floor 127.0.0.1:$PORT 127.0.0.1:$UP & MASTER=$!; PID=$MASTER; wait_port $PORT ;;
    rpctap) $BIN proxy --no-tui --log off --listen 127.0.0.1:$PORT --upstream http://127.0.0.1:$UP 2>/dev/null & MASTER=$!; PID=$MASTER; wait_port $PORT ;;
  esac
}
stop() { kill $MASTER 2>/dev/null || true; wait $MASTER 2>/dev/null || true; }

rss_kib() { awk '/VmRSS/{print $2}' /proc/$1/status; }
# The connections to the upstream that this proxy (its pid) holds.
upstream_conns() { ss -Htnp state established "( dport = :$UP )" | grep -c "pid=$1," || true; }

# run NAME PORT PID MODE COUNT: prints "rss_before rss_held rss_held_later upstream_held rss_after".
run() {
  local name=$1 port=$2 pid=$3 mode=$4 count=$5 before held later up after
  before=$(rss_kib $pid)
  coproc CL { python3 benches/idle_clients.py $port $count $mode; }
  read -r line <&"${CL[0]}"
  sleep 1
  held=$(rss_kib $pid); up=$(upstream_conns $pid)
  sleep $((HOLD - 1))
  later=$(rss_kib $pid)
  echo >&"${CL[1]}"
  read -r line <&"${CL[0]}" || true
  wait $CL_PID 2>/dev/null || true
  sleep $SETTLE
  after=$(rss_kib $pid)
  echo "$before $held $later $up $after"
}

if [ -z "${ONLY_SLOW:-}" ]; then  # ONLY_SLOW=1: just the slowloris table
echo
echo "| proxy | mode | connections | RSS before MiB | RSS held MiB (1 s / ${HOLD} s) | KiB per connection (1 s / ${HOLD} s) | upstream conns held | RSS ${SETTLE} s after MiB |"
echo "|---|---|---|---|---|---|---|---|"
for mode in idle sse; do
  count=$([ $mode = idle ] && echo $N || echo $STREAMS)
  for name in nginx hyper-floor rpctap; do
    start $name
    # Warm: one call first, so "before" includes what any first request allocates.
    curl -s -o /dev/null http://127.0.0.1:$PORT/jsonrpc -H 'content-type: application/json' -d '{"jsonrpc":"2.0","method":"add","params":[1],"id":0}'
    read -r b h l u a < <(run $name $PORT $PID $mode $count)
    stop
    python3 -c "print(f'| $name | $mode | $count | {$b/1024:.1f} | {$h/1024:.1f} / {$l/1024:.1f} | {($h-$b)/$count:.1f} / {($l-$b)/$count:.1f} | $u | {$a/1024:.1f} |')"
  done
done
fi

echo
echo "| proxy | normal client p50 / p99 µs alone | with $SLOW slowloris connections | p50 ratio | slowloris closed by the proxy within the run |"
echo "|---|---|---|---|---|"
for name in nginx rpctap; do
  start $name
  read -r bp50 bp99 lp50 lp99 closed < <(python3 benches/slowloris.py $PORT $SLOW 1000)
  stop
  python3 -c "print(f'| $name | $bp50 / $bp99 | $lp50 / $lp99 | {$lp50/$bp50:.2f} | $closed |')"
done

#!/usr/bin/env bash
# The cost of the fleet features, run by hand (not in CI), side by side in one run:
#   - `--otlp` with the sampler at 100 % (every call a span, exported over OTLP/HTTP to a sink
#     that accepts and discards: nginx answering 200), against the same rpctap without it;
#   - a Redis-backed limit rule against a local one: throughput, and one call at a time for
#     the latency a limited call adds, next to a loopback Redis round trip (redis-benchmark).
#
#   bash benches/fleet.sh            # 3 alternating rounds of 5 s each
#   ROUNDS=5 SECS=10 bash benches/fleet.sh
#
# Needs nginx, wrk and redis-server (apt; installed if missing). Loopback only; every loop is
# bounded by ROUNDS × SECS.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-3}
SECS=${SECS:-5}
CONNS=${CONNS:-50}
WORK=$(mktemp -d /tmp/rpctap-fleet.XXXXXX)
export RPCTAP_THREADS=${RPCTAP_THREADS:-1}
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

need() { command -v "$1" >/dev/null 2>&1; }
if ! need nginx || ! need wrk || ! need redis-server; then
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx wrk redis-server >/dev/null
fi
cargo build --release -q --bin rpctap
BIN=target/release/rpctap
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
source benches/common.sh

UP=$(free_port); $BIN demo-server --listen 127.0.0.1:$UP 2>/dev/null & PIDS+=($!)
# The OTLP sink: accepts every export, discards it.
SINK=$(free_port)
cat > $WORK/sink.conf <<NGX
worker_processes 1;
pid $WORK/sink.pid;
error_log $WORK/sink.err warn;
events { worker_connections 1024; }
http { access_log off; server { listen 127.0.0.1:$SINK; location / { client_max_body_size 64m; return 200; } } }
NGX
$NGINX -c $WORK/sink.conf -g 'daemon off;' & PIDS+=($!)
RP=$(free_port); redis-server --port $RP --bind 127.0.0.1 --save "" --appendonly no >/dev/null & PIDS+=($!)
for p in $UP $SINK $RP; do wait_port $p; done

cat > $WORK/redis.toml <<TOML
[[limit]]
name = "shared"
method = "tools/call"
rate = "1000000/s"
store = "redis://127.0.0.1:$RP"
TOML
start() { # name flags… → sets PORT_name and PID_name
  local name=$1; shift
  local port; port=$(free_port)
  $BIN proxy --no-tui --log off --listen 127.0.0.1:$port --upstream http://127.0.0.1:$UP "$@" & PIDS+=($!)
  eval "PORT_${name}=$port; PID_${name}=$!"
  wait_port $port
}
# Both with the admin listener (the otlp row's counters are read from it): the rows differ by
# --otlp alone.
start plain --admin 127.0.0.1:$(free_port)
OA=$(free_port)
start otlp --otlp http://127.0.0.1:$SINK --admin 127.0.0.1:$OA
start local --limit 'tools/call=1000000/s'
start redis --config $WORK/redis.toml

write_call_lua $WORK/call.lua
cpu_ticks() { awk '{print $14+$15}' /proc/$1/stat; }
TICK_US=$((1000000 / $(getconf CLK_TCK)))
declare -A RPS CPU P50 P99 L50 L99
run() { # name conns → req/s, p50, p99, CPU µs/request
  local name=$1 conns=$2 port pid c0 c1 out
  port=$(eval echo \$PORT_$name); pid=$(eval echo \$PID_$name)
  c0=$(cpu_ticks $pid)
  out=$(wrk -t1 -c$conns -d${SECS}s --latency -s $WORK/call.lua http://127.0.0.1:$port 2>&1)
  c1=$(cpu_ticks $pid)
  local rps reqs p50 p99
  rps=$(echo "$out" | awk '/Requests\/sec/{print $2}')
  reqs=$(echo "$out" | awk '/requests in/{print $1}')
  p50=$(echo "$out" | awk '$1=="50%"{print $2}'); p99=$(echo "$out" | awk '$1=="99%"{print $2}')
  echo "$rps $p50 $p99 $(python3 -c "print(round(($c1-$c0)*$TICK_US/max($reqs,1),1))")"
}
for r in $(seq 1 $ROUNDS); do
  echo "round $r" >&2
  for n in plain otlp local redis; do
    read -r rps p50 p99 cpu < <(run $n $CONNS)
    echo "  $n: $rps req/s, p50 $p50, p99 $p99, $cpu µs CPU/request" >&2
    RPS[$n]+="$rps "; P50[$n]+="$p50 "; P99[$n]+="$p99 "; CPU[$n]+="$cpu "
  done
  for n in local redis; do
    read -r rps p50 p99 cpu < <(run $n 1)
    echo "  $n, one call at a time: p50 $p50, p99 $p99" >&2
    L50[$n]+="$p50 "; L99[$n]+="$p99 "
  done
done
r() { python3 -c "print(round($1/$2,3))"; }

echo
echo "| setup ($CONNS connections) | req/s | p50 µs | p99 µs | CPU µs/req |"
echo "|---|---|---|---|---|"
for n in plain otlp local redis; do
  echo "| $n | $(median ${RPS[$n]}) | $(median ${P50[$n]}) | $(median ${P99[$n]}) | $(median ${CPU[$n]}) |"
done
echo
echo "--otlp (100 % sampled) / without: req/s $(r $(median ${RPS[otlp]}) $(median ${RPS[plain]})), CPU per request $(r $(median ${CPU[otlp]}) $(median ${CPU[plain]}))"
echo "Redis-backed rule / local rule: req/s $(r $(median ${RPS[redis]}) $(median ${RPS[local]}))"
echo
PING=$(redis-benchmark -p $RP -c 1 -n 20000 -t ping_mbulk -q --csv 2>/dev/null | tail -1)
echo "| one call at a time | p50 µs | p99 µs |"
echo "|---|---|---|"
for n in local redis; do echo "| rpctap, $n rule | $(median ${L50[$n]}) | $(median ${L99[$n]}) |"; done
echo
echo "added by the Redis-backed rule: p50 $(python3 -c "print(round($(median ${L50[redis]}) - $(median ${L50[local]}),1))") µs, p99 $(python3 -c "print(round($(median ${L99[redis]}) - $(median ${L99[local]}),1))") µs"
echo "a loopback Redis round trip (redis-benchmark PING, 1 client; CSV: name, rps, avg, min, p50, p95, p99, max ms): $PING"
# One round trip of the limiter's own script (loaded in Redis by the run above), for the same
# client: what "one round trip" costs with the script's work in it.
SHA=$(python3 -c "
import hashlib,re
src=open('src/limit/store.rs').read()
print(hashlib.sha1(re.search(r'const SCRIPT: &str = r#\"(.*?)\"#;', src, re.S).group(1).encode()).hexdigest())")
EVAL=$(redis-benchmark -p $RP -c 1 -n 20000 -q --csv EVALSHA $SHA 2 bench:rate bench:leases 1 1000000 0 x 1000 2>/dev/null | tail -1)
echo "the limiter's script, one round trip (redis-benchmark EVALSHA, 1 client; same CSV): $EVAL"
echo "the --otlp instance's counters: $(curl -s http://127.0.0.1:$OA/metrics | grep -E '^rpctap_otel_(exported|dropped)_total' | tr '\n' ' ')"

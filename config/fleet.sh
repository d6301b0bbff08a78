#!/usr/bin/env bash
# A fleet on one machine, without docker-compose: one Redis, one OTLP collector and two rpctap
# sidecars in front of one server (rpctap's demo server). The sidecars share one rate limit
# through Redis (10 `add` per minute per API key, whichever sidecar a call goes through) and
# send one span per call to the collector.
#
#   bash config/fleet.sh            # start everything; Ctrl-C stops it all
#   bash config/fleet.sh --check    # start, send 20 calls alternating between the sidecars,
#                                   # print what happened, stop
#
# The collector: the OpenTelemetry Collector if `otelcol` or `otelcol-contrib` is on PATH
# (its debug exporter prints the spans), else the test suite's OTLP receiver
# (tests/interop/otlp_receiver.py in the venv `bash scripts/peers.sh` makes), which writes each
# span as a JSON line to $WORK/spans.jsonl. Needs redis-server (Debian: redis-server).
# Ports: BASE_PORT (default 18000) and the next few; override it if they are taken.
set -euo pipefail
cd "$(dirname "$0")/.."
BASE=${BASE_PORT:-18000}
SERVER=$BASE SIDE_A=$((BASE + 1)) SIDE_B=$((BASE + 2)) REDIS=$((BASE + 3)) OTLP=$((BASE + 4))
WORK=$(mktemp -d /tmp/rpctap-fleet.XXXXXX)
BIN=${RPCTAP:-target/release/rpctap}
[ -x "$BIN" ] || cargo build --release -q --bin rpctap
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT
wait_port() { for _ in $(seq 1 200); do (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.05; done; echo "port $1 never opened" >&2; return 1; }

# 1. Redis, the shared counters.
redis-server --port $REDIS --bind 127.0.0.1 --save "" --appendonly no >$WORK/redis.log & PIDS+=($!)
# 2. The collector, OTLP/HTTP on $OTLP.
if command -v otelcol-contrib >/dev/null || command -v otelcol >/dev/null; then
  cat >$WORK/otelcol.yaml <<YAML
receivers: { otlp: { protocols: { http: { endpoint: "127.0.0.1:$OTLP" } } } }
exporters: { debug: { verbosity: detailed } }
service: { pipelines: { traces: { receivers: [otlp], exporters: [debug] } } }
YAML
  "$(command -v otelcol-contrib || command -v otelcol)" --config $WORK/otelcol.yaml >$WORK/collector.log 2>&1 & PIDS+=($!)
  SPANS="$WORK/collector.log (the collector's debug exporter)"
else
  PY=target/interop/otel/bin/python
  [ -x $PY ] || { echo "no collector: install otelcol, or run bash scripts/peers.sh for the test receiver" >&2; exit 1; }
  $PY tests/interop/otlp_receiver.py $OTLP $WORK/spans.jsonl & PIDS+=($!)
  SPANS=$WORK/spans.jsonl
fi
# 3. The server.
$BIN demo-server --listen 127.0.0.1:$SERVER 2>/dev/null & PIDS+=($!)
# 4. The sidecars: the same config, one Redis, one collector.
cat >$WORK/fleet.toml <<TOML
upstream = "http://127.0.0.1:$SERVER"
log = "off"

[otel]
endpoint = "http://127.0.0.1:$OTLP"
service_name = "rpctap-sidecar"

[[limit]]
name = "add per key"
method = "add"
key = "header:x-api-key"
rate = "10/min"
store = "redis://127.0.0.1:$REDIS"
on_store_error = "local"   # Redis away: each sidecar allows 10 / replicas
replicas = 2
TOML
for p in $SIDE_A $SIDE_B; do
  $BIN proxy --no-tui --config $WORK/fleet.toml --listen 127.0.0.1:$p 2>>$WORK/sidecars.log & PIDS+=($!)
done
for p in $REDIS $OTLP $SERVER $SIDE_A $SIDE_B; do wait_port $p; done
echo "fleet: server :$SERVER, sidecars :$SIDE_A :$SIDE_B, redis :$REDIS, collector :$OTLP (config $WORK/fleet.toml)"

if [ "${1:-}" != "--check" ]; then
  echo "try: curl -s -H 'x-api-key: k' -H 'content-type: application/json' -d '{\"jsonrpc\":\"2.0\",\"method\":\"add\",\"params\":[1,2],\"id\":1}' http://127.0.0.1:$SIDE_A/jsonrpc"
  echo "spans: $SPANS; Ctrl-C stops the fleet"
  wait
  exit 0
fi
allowed=0
for i in $(seq 1 20); do
  port=$([ $((i % 2)) = 0 ] && echo $SIDE_A || echo $SIDE_B)
  out=$(curl -s -H 'x-api-key: k' -H 'content-type: application/json' \
    -d "{\"jsonrpc\":\"2.0\",\"method\":\"add\",\"params\":[1,$i],\"id\":$i}" http://127.0.0.1:$port/jsonrpc)
  case $out in *'"result"'*) allowed=$((allowed + 1)) ;; esac
done
echo "allowed $allowed of 20 calls through two sidecars sharing 10/min"
sleep 1 # the sidecars export every 200 ms
if [ -f "$WORK/spans.jsonl" ]; then
  echo "spans received: $(grep -c '"kind": 2' $WORK/spans.jsonl) (one per call, refused ones included)"
fi

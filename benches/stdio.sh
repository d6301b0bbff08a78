#!/usr/bin/env bash
# stdio overhead, run by hand (not in CI): 10,000 small sequential calls to a minimal stdio
# server, direct and through `rpctap stdio` (defaults: no log, no recording), and through
# `rpctap stdio --record`, alternating rounds; the median round trip of each and the added
# latency per call.
#
#   bash benches/stdio.sh            # 5 rounds of 10,000 calls
#   ROUNDS=3 CALLS=5000 bash benches/stdio.sh
#
# A relay floor is measured beside it: socat (a C byte pump, one thread polling both pipes, no
# inspection) between the same client and server — what any process in the middle costs here.
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${ROUNDS:-5}
CALLS=${CALLS:-10000}
WORK=$(mktemp -d /tmp/rpctap-stdio.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
cargo build --release -q --bin rpctap
command -v socat >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq socat >/dev/null; }
BIN=target/release/rpctap
SERVER=(python3 benches/stdio_latency.py serve)
declare -A P50 P99
for r in $(seq 1 "$ROUNDS"); do
  for n in direct socat rpctap rpctap+record; do
    case $n in
      direct) cmd=("${SERVER[@]}") ;;
      socat) cmd=(socat -b65536 - "EXEC:${SERVER[*]}") ;;
      rpctap) cmd=("$BIN" stdio -- "${SERVER[@]}") ;;
      rpctap+record) rm -f "$WORK/r.jsonl"; cmd=("$BIN" stdio --record "$WORK/r.jsonl" -- "${SERVER[@]}") ;;
    esac
    read -r p50 p99 < <(python3 benches/stdio_latency.py measure "$CALLS" "${cmd[@]}")
    P50[$n]+="$p50 "; P99[$n]+="$p99 "
    echo "  round $r $n: p50 $p50 µs, p99 $p99 µs" >&2
  done
done
median() { python3 -c "import sys; v=sorted(map(float,sys.argv[1:])); print(v[len(v)//2])" "$@"; }
echo
echo "| $CALLS sequential calls, $ROUNDS rounds | round trip p50 µs | p99 µs | added p50 µs |"
echo "|---|---|---|---|"
d=$(median ${P50[direct]})
for n in direct socat rpctap rpctap+record; do
  m=$(median ${P50[$n]})
  echo "| $n | $m | $(median ${P99[$n]}) | $(python3 -c "print(round($m - $d, 1))") |"
done

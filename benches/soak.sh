#!/usr/bin/env bash
# The soak (by hand, not in CI): `bash benches/soak.sh MINUTES`.
#
# rpctap (release build, headless, with its admin listener, recording with rotation and a rate
# limit) in front of the embedded demo server, driven by benches/soak_client.py: plain calls,
# batches, rate-limited calls (most refused), MCP sessions opened and deleted, tools/call with SSE
# progress replies. First 20 s all-out to measure the capacity this driver reaches, then the soak
# at half of it. Every 10 s it samples rpctap's RSS, open descriptors, pending calls and MCP
# sessions (target/soak/samples.csv); rotated recording parts beyond the newest two are deleted,
# as a retention policy would. It fails if RSS or descriptors grow by more than 5 % from the
# 5-minute mark (for runs under 10 minutes: the halfway mark) to the end, and draws the samples
# (target/soak/soak.png, matplotlib in target/bench-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
source benches/common.sh
MINUTES=${1:-30}
WORKERS=${WORKERS:-16}
OUT=target/soak
rm -rf "$OUT" && mkdir -p "$OUT"
VENV=target/bench-venv
[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -c 'import matplotlib' 2>/dev/null || "$VENV/bin/pip" install -q matplotlib >/dev/null
cargo build --release -q
BIN=target/release/rpctap
UP=$(free_port); PX=$(free_port); AD=$(free_port)
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true' EXIT
$BIN demo-server --listen 127.0.0.1:$UP >/dev/null 2>&1 & PIDS+=($!)
wait_port $UP
$BIN proxy --listen 127.0.0.1:$PX --upstream http://127.0.0.1:$UP --admin 127.0.0.1:$AD \
  --no-tui --log off --record "$OUT/soak.jsonl" --record-max-bytes $((64 << 20)) \
  --limit 'echo=50/s' 2>"$OUT/rpctap.stderr" & PX_PID=$!; PIDS+=($PX_PID)
wait_port $PX; wait_port $AD

cap=$(python3 benches/soak_client.py $PX 20 0 $WORKERS)
full=$(python3 -c "import json,sys; print(json.loads(sys.argv[1])['ops_per_s'])" "$cap")
rate=$(python3 -c "print(round($full / 2))")
echo "capacity with this driver: $full ops/s all-out ($cap); soak at $rate ops/s for $MINUTES min"

secs=$((MINUTES * 60))
python3 benches/soak_client.py $PX $secs $rate $WORKERS > "$OUT/client.json" & CL=$!; PIDS+=($CL)
echo "t_s,rss_kib,fds,pending,sessions" > "$OUT/samples.csv"
t0=$(date +%s)
while kill -0 $CL 2>/dev/null; do
  now=$(( $(date +%s) - t0 ))
  rss=$(awk '/^VmRSS/ {print $2}' /proc/$PX_PID/status)
  fds=$(ls /proc/$PX_PID/fd | wc -l)
  m=$(curl -s http://127.0.0.1:$AD/metrics)
  pending=$(awk '/^rpctap_pending_calls / {print $2}' <<<"$m")
  sessions=$(awk '/^rpctap_sessions / {print $2}' <<<"$m")
  echo "$now,$rss,$fds,${pending:-0},${sessions:-0}" >> "$OUT/samples.csv"
  # Retention: keep the live part and the newest two rotated ones.
  ls "$OUT"/soak.jsonl.* 2>/dev/null | sort -t. -k3 -n | head -n -2 | xargs -r rm -f
  sleep 10
done
echo "client: $(cat "$OUT/client.json")"
"$VENV/bin/python" - "$OUT" "$MINUTES" <<'PY'
import csv, json, sys
out, minutes = sys.argv[1], float(sys.argv[2])
rows = [dict((k, float(v)) for k, v in r.items()) for r in csv.DictReader(open(f"{out}/samples.csv"))]
mark = 300 if minutes >= 10 else minutes * 30
base = min(rows, key=lambda r: abs(r["t_s"] - mark))
end = rows[-1]
growth = {k: (end[k] - base[k]) / base[k] * 100 for k in ("rss_kib", "fds")}
client = json.load(open(f"{out}/client.json"))
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
fig, ax = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
t = [r["t_s"] / 60 for r in rows]
ax[0].plot(t, [r["rss_kib"] / 1024 for r in rows], label="RSS (MiB)")
ax[0].plot(t, [r["fds"] for r in rows], label="open descriptors")
ax[0].axvline(mark / 60, color="grey", ls=":", label="growth measured from here")
ax[0].legend(); ax[0].set_ylim(bottom=0)
ax[1].plot(t, [r["pending"] for r in rows], label="pending calls")
ax[1].plot(t, [r["sessions"] for r in rows], label="MCP sessions tracked")
ax[1].legend(); ax[1].set_xlabel("minutes"); ax[1].set_ylim(bottom=0)
fig.suptitle(f"rpctap soak: {minutes:g} min at {client['ops_per_s']} ops/s (half the driver's all-out rate)")
fig.savefig(f"{out}/soak.png", dpi=80)
print(f"| minute | RSS MiB | fds | pending | sessions |")
print(f"|---|---|---|---|---|")
for r in rows:
    if int(r["t_s"]) % 300 < 10 or r is rows[-1]:
        print(f"| {r['t_s']/60:.1f} | {r['rss_kib']/1024:.1f} | {r['fds']:.0f} | {r['pending']:.0f} | {r['sessions']:.0f} |")
print(f"growth from minute {mark/60:g} to the end: RSS {growth['rss_kib']:+.1f} %, fds {growth['fds']:+.1f} %; "
      f"client errors {client['errors']} of {client['ops']} operations")
ok = growth["rss_kib"] <= 5 and growth["fds"] <= 5 and client["errors"] == 0
print("PASS" if ok else "FAIL")
sys.exit(0 if ok else 1)
PY

#!/usr/bin/env bash
# Runs every fuzz target for SECS seconds each (default 10) with cargo-fuzz (libFuzzer, on the
# nightly toolchain), seeded from fuzz/seeds/TARGET (checked in) and prints one line per target:
# executions, coverage (libFuzzer's `cov`), corpus size, and whether it found anything. Fails if
# any target crashed, timed out or ran out of memory; the reproducer is under fuzz/artifacts/.
#
#   bash fuzz/run.sh 8                  # the CI smoke: 8 targets × 8 s
#   bash fuzz/run.sh 1800 envelope      # one target, 30 minutes
#   RUNS=10000000 bash fuzz/run.sh 1800 # each target until 10 million executions or 30 minutes
#
# Installs cargo-fuzz (crates.io) when missing; needs `rustup run nightly`.
set -euo pipefail
cd "$(dirname "$0")"
SECS=${1:-10}
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then
  TARGETS=(envelope sse stdio_lines recording check_document config ws_frames chunked http1_diff)
fi
rustup run nightly rustc --version >/dev/null 2>&1 || { echo "fuzz: no nightly toolchain (rustup run nightly)" >&2; exit 1; }
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install --locked -q cargo-fuzz
fi
cargo +nightly fuzz build -O >/dev/null
fail=0
echo "| target | seconds | executions | exec/s | coverage | corpus | result |"
echo "|---|---|---|---|---|---|---|"
for t in "${TARGETS[@]}"; do
  mkdir -p corpus/$t seeds/$t
  log=$(mktemp)
  set +e
  cargo +nightly fuzz run -O $t corpus/$t seeds/$t -- -max_total_time=$SECS ${RUNS:+-runs=$RUNS} -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 >"$log" 2>&1
  status=$?
  set -e
  execs=$(awk '/stat::number_of_executed_units/{print $2}' "$log")
  rate=$(awk '/stat::average_exec_per_sec/{print $2}' "$log")
  cov=$( (grep -o 'cov: [0-9]*' "$log" || true) | tail -1 | awk '{print $2}')
  corpus=$(ls corpus/$t | wc -l)
  result=ok
  if [ $status -ne 0 ]; then
    result="FAILED (exit $status): $( (grep -m1 -E 'panicked|ERROR|deadly signal|timeout|out-of-memory|error' "$log" || true) | cut -c1-160)"
    fail=1
    tail -40 "$log" >&2
  fi
  echo "| $t | $SECS | ${execs:-?} | ${rate:-?} | ${cov:-?} | $corpus | $result |"
  rm -f "$log"
done
exit $fail

#!/usr/bin/env bash
# The whole test suite: installs the real peers the tests talk to (scripts/peers.sh), then runs
# every test, and closes with one line counting them: `N passed, N failed`.
#
# With cargo-nextest (on this project's machines) the tests of all binaries run side by side, four
# at a time: most of the suite waits on real peers (Python and Node processes), so two cores
# stay busy. Without it, `cargo test`. Extra arguments go to the runner.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/peers.sh
# Sessions the tests' stdio shims record by default go here, not into the user's state directory
# (the hub's own tests set a home of their own).
export RPCTAP_HOME="$PWD/target/test-home"
rm -rf "$RPCTAP_HOME"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast --test-threads 4 "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  # "Summary [ 35.0s] 132 tests run: 130 passed, 2 failed, 0 skipped"
  awk '/Summary \[/ && /tests run:/ {
         p = 0; f = 0
         for (i = 1; i <= NF; i++) {
           if ($(i+1) ~ /^passed,?$/) p = $i
           if ($(i+1) ~ /^failed,?$/) f = $i
         }
       }
       END { printf "%d passed, %d failed\n", p, f }' "$log"
else
  cargo test "$@" 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
       END { printf "%d passed, %d failed\n", p, f }' "$log"
fi
exit "$status"

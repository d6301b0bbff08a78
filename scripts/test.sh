#!/usr/bin/env bash
# The whole test suite: installs the real peers the tests talk to (scripts/peers.sh), then runs
# `cargo test`, and closes with one line counting every test binary's results.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/peers.sh
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed;?$/) p += $i; if ($(i+1) ~ /^failed;?$/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
exit "$status"

#!/usr/bin/env bash
# Installs every real peer the test suite talks to, once, under target/interop/ (and tmux from
# Debian). `.ci/run` and `scripts/test.sh` (the README's test command) call it before the
# tests; the tests themselves install nothing and say clearly what is missing.
#
# Idempotent: each peer has a stamp file naming what was installed; a matching stamp skips it.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD/target/interop
mkdir -p "$ROOT"

venv() { # venv NAME PACKAGES...
  local name=$1; shift
  local dir=$ROOT/$name want="$*"
  if [ "$(cat "$dir/rpctap-installed" 2>/dev/null)" = "$want" ]; then return; fi
  echo "peers: python venv $name ($want)"
  rm -rf "$dir"
  python3 -m venv "$dir"
  "$dir/bin/pip" install -q --disable-pip-version-check "$@"
  printf '%s' "$want" >"$dir/rpctap-installed"
}

node_peers() { # node_peers PACKAGES...
  local dir=$ROOT/node want="$*"
  if [ "$(cat "$dir/rpctap-installed" 2>/dev/null)" = "$want" ]; then return; fi
  echo "peers: npm ($want)"
  mkdir -p "$dir"
  npm install --silent --no-audit --no-fund --prefix "$dir" "$@"
  printf '%s' "$want" >"$dir/rpctap-installed"
}

# Keep these lists in step with tests/common/peers.rs (the tests compare the stamps).
venv mcp1 'mcp<2' json-rpc werkzeug
venv mcp2 'mcp>=2,<3'
venv mitmproxy mitmproxy
node_peers @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/sdk@1.32.2 \
  @modelcontextprotocol/conformance@0.1.16 node@22

missing=()
for tool in tmux curl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  echo "peers: apt ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
echo "peers: ready"

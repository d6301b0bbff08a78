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

# Keep these lists in step with tests/it/common.rs (the tests compare the stamps).
venv mcp1 'mcp<2' json-rpc werkzeug
venv mcp2 'mcp>=2,<3'
venv mitmproxy mitmproxy
# JSON-RPC over WebSocket (tests/it/websocket.rs): the `websockets` library, deflate on by default.
venv ws websockets==17.4
# An OTLP/HTTP receiver built on the official protobuf definitions (tests/it/otel.rs).
venv otel opentelemetry-proto==1.45.2
# The Kubernetes API schemas, to validate config/kubernetes/ (tests/it/deploy.rs).
venv k8s kubernetes-validate==1.37.0
# A JSON Schema validator, for the SARIF 2.1.0 schema below (tests/it/contracts.rs).
venv sarif jsonschema==4.26.0
# A2A (tests/it/a2a.rs): the official Python SDK as agent and client, on Starlette + uvicorn.
venv a2a 'a2a-sdk[http-server]==1.3.0' uvicorn==0.55.0
# ganache: a real Ethereum JSON-RPC node (tests/it/websocket.rs: eth_subscribe over WebSocket).
# The MCP Inspector's CLI (tests/it/agent.rs: `rpctap mcp` as the Inspector sees it). The
# conformance suite twice: 0.1.16 (2025-era scenarios) and, as `conformance2`, 0.2.0-alpha.12
# (the 2026-07-28 requirements and the tasks scenarios). js-tiktoken: the reference token
# counts (tests/it/cost.rs). The A2A JavaScript SDK on Express as agent and client
# (tests/it/a2a.rs).
node_peers @modelcontextprotocol/server-everything@2026.8.31 @modelcontextprotocol/sdk@1.32.2 \
  @modelcontextprotocol/conformance@0.1.16 node@22 ganache@7.9.2 @modelcontextprotocol/inspector@2.12.0 \
  conformance2@npm:@modelcontextprotocol/conformance@0.2.0-alpha.12 js-tiktoken@1.0.21 \
  @a2a-js/sdk@1.3.0 express@5.3.0

# The official Rust MCP SDK (rmcp) as a tasks server and client (tests/interop/rmcp_tasks, built
# here: cargo rebuilds it only when its source changed).
echo "peers: rmcp-tasks (rmcp 3.11.0)"
cargo build -q --locked --manifest-path tests/interop/rmcp_tasks/Cargo.toml --target-dir "$ROOT/rmcp-build"
mkdir -p "$ROOT/rmcp-tasks"
cp "$ROOT/rmcp-build/debug/rmcp-tasks" "$ROOT/rmcp-tasks/rmcp-tasks"
printf '%s' 'rmcp-tasks rmcp=3.11.0' >"$ROOT/rmcp-tasks/rpctap-installed"

# Debian packages, by the command each provides: tmux (the dashboard's end-to-end tests), curl,
# prometheus + promtool (tests/it/admin.rs scrapes /metrics with a real Prometheus), systemd's
# systemd-analyze (tests/it/deploy.rs verifies config/systemd/), redis-server (tests/it/fleet.rs: limits
# shared through Redis), man (tests/it/cli_edges.rs renders `rpctap man` with `man -l`), chromium
# (tests/it/contracts.rs opens the HTML report headless).
missing=()
for pair in tmux:tmux curl:curl prometheus:prometheus promtool:prometheus systemd-analyze:systemd redis-server:redis-server man:man-db chromium:chromium; do
  tool=${pair%%:*} pkg=${pair#*:}
  command -v "$tool" >/dev/null || [[ " ${missing[*]} " == *" $pkg "* ]] || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "peers: apt ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The SARIF 2.1.0 JSON schema (OASIS), as the serde-sarif crate ships it on crates.io (checked
# against the registry's checksum): `check --format sarif` is validated against it
# (tests/it/contracts.rs) by the `sarif` venv's jsonschema (the Rust crate rejects one of the
# schema's own patterns, which ECMA-262 and Python read). After apt: it needs curl.
sarif_schema() {
  local dir=$ROOT/sarif-schema want="serde-sarif 0.8.0"
  if [ "$(cat "$dir/rpctap-installed" 2>/dev/null)" = "$want" ]; then return; fi
  echo "peers: SARIF 2.1.0 schema ($want)"
  rm -rf "$dir"
  mkdir -p "$dir"
  curl -sSfL https://static.crates.io/crates/serde-sarif/serde-sarif-0.8.0.crate -o "$dir/crate.tgz"
  echo "a053c46f18a8043570d4e32fefc4c6377f82bf29ec310a33e93f273048e3b0be  $dir/crate.tgz" | sha256sum -c --quiet
  tar xzf "$dir/crate.tgz" -C "$dir" serde-sarif-0.8.0/src/schema.json
  mv "$dir/serde-sarif-0.8.0/src/schema.json" "$dir/sarif-schema-2.1.0.json"
  rm -rf "$dir/crate.tgz" "$dir/serde-sarif-0.8.0"
  printf '%s' "$want" >"$dir/rpctap-installed"
}
sarif_schema
echo "peers: ready"

# cargo-fuzz, for the fuzz smoke `.ci/run` runs (fuzz/run.sh) — only where a nightly toolchain is.
if rustup run nightly rustc --version >/dev/null 2>&1 && ! cargo fuzz --version >/dev/null 2>&1; then
  echo "peers: cargo-fuzz"
  cargo install --locked -q cargo-fuzz
fi

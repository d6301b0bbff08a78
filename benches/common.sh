# Helpers shared by the benchmark scripts (sourced by load.sh and instructions.sh).

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Waits up to 30 s (a proxy under valgrind starts slowly).
wait_port() {
  for _ in $(seq 1 600); do
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "port $1 never opened" >&2
  return 1
}

# write_call_lua FILE: the wrk script — a POST of a ~150 B JSON-RPC tools/call, a unique id per
# request.
write_call_lua() {
  cat > "$1" <<'LUA'
local n = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
request = function()
  n = n + 1
  local body = '{"jsonrpc":"2.0","id":' .. n .. ',"method":"tools/call","params":{"name":"search","arguments":{"query":"rust reverse proxy","limit":10}}}'
  return wrk.format(nil, "/jsonrpc", nil, body)
end
LUA
}

# median VALUE…: the median of wrk-style durations (123us, 1.2ms, 2s) or plain numbers, in µs.
median() { python3 -c "
import sys,re
def us(v):
    m=re.match(r'([0-9.]+)(us|ms|s)?$',v)
    x=float(m.group(1)); u=m.group(2) or ''
    return x*{'us':1,'ms':1000,'s':1e6,'':1}[u]
vals=sorted(us(v) for v in sys.argv[1:])
print(vals[len(vals)//2])" "$@"; }

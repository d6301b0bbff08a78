"""stdio round trips, for benches/stdio.sh.

  stdio_latency.py serve              a minimal JSON-RPC stdio server: one reply line per line
  stdio_latency.py measure N CMD…     spawns CMD, makes N sequential calls, prints the median and
                                      p99 round trip in µs (write of the call → read of the reply)
"""
import json
import os
import subprocess
import sys
import time


def serve():
    inp, out = sys.stdin.buffer, sys.stdout.buffer
    for line in inp:
        if not line.strip():
            continue
        msg = json.loads(line)
        if "id" in msg and "method" in msg:
            out.write(b'{"jsonrpc":"2.0","id":%s,"result":{"ok":true}}\n' % json.dumps(msg["id"]).encode())
            out.flush()


def measure(n, cmd):
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    w, r = p.stdin, p.stdout
    times = []
    buf = b""
    for i in range(n + 200):
        call = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}\n' % i
        t0 = time.perf_counter_ns()
        w.write(call)
        while b"\n" not in buf:
            chunk = os.read(r.fileno(), 65536)
            if not chunk:
                raise SystemExit("the server closed its stdout")
            buf += chunk
        t1 = time.perf_counter_ns()
        _, buf = buf.split(b"\n", 1)
        if i >= 200:  # warm-up excluded
            times.append((t1 - t0) / 1000)
    w.close()
    p.wait()
    times.sort()
    print(f"{times[len(times) // 2]:.1f} {times[int(len(times) * 0.99)]:.1f}")


if sys.argv[1] == "serve":
    serve()
else:
    measure(int(sys.argv[2]), sys.argv[3:])

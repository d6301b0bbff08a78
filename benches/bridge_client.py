"""Streamable HTTP and stdio MCP clients for benches/bridge.sh (standard library only).

  bridge_client.py direct N CMD…        N sequential `tools/call echo` to CMD over stdio;
                                        prints the median and p99 round trip in µs
  bridge_client.py latency N URL        the same N calls to a Streamable HTTP endpoint, one
                                        session on one keep-alive connection
  bridge_client.py sessions N URL PID   opens N sessions (initialize, initialized, a GET stream
                                        held open with GET=1), prints PID's own RSS and the RSS
                                        of PID with every descendant, in KiB, before and after;
                                        then waits for a line on stdin and exits without a
                                        DELETE — the sessions abandoned as a killed client
                                        leaves them
"""
import http.client
import json
import os
import subprocess
import sys
import time
import urllib.parse

INIT = {
    "jsonrpc": "2.0",
    "id": 0,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "rpctap-bench", "version": "1"},
    },
}
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def call(i):
    return {
        "jsonrpc": "2.0",
        "id": i,
        "method": "tools/call",
        "params": {"name": "echo", "arguments": {"message": "hello"}},
    }


def pctl(times):
    times.sort()
    return times[len(times) // 2] / 1000, times[int(len(times) * 0.99)] / 1000


def direct(n, cmd):
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=0)
    buf = b""

    def rpc(msg, want_reply=True):
        nonlocal buf
        p.stdin.write(json.dumps(msg).encode() + b"\n")
        while want_reply:
            while b"\n" not in buf:
                chunk = os.read(p.stdout.fileno(), 65536)
                if not chunk:
                    raise SystemExit("the server closed its stdout")
                buf += chunk
            line, buf = buf.split(b"\n", 1)
            reply = json.loads(line)
            if reply.get("id") == msg.get("id") and "method" not in reply:
                return reply

    rpc(INIT)
    rpc(INITIALIZED, want_reply=False)
    times = []
    for i in range(1, n + 201):
        t0 = time.perf_counter_ns()
        reply = rpc(call(i))
        t1 = time.perf_counter_ns()
        assert "result" in reply, reply
        if i > 200:
            times.append(t1 - t0)
    p.stdin.close()
    p.wait()
    print("%.1f %.1f" % pctl(times))


class Session:
    """One MCP session over one keep-alive connection."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = u.hostname, u.port, u.path
        self.conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        self.sid = None
        self.drain = None
        reply = self.post(INIT)
        assert "result" in reply, reply
        self.post(INITIALIZED)

    def headers(self):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.sid:
            h["Mcp-Session-Id"] = self.sid
            h["MCP-Protocol-Version"] = "2025-06-18"
        return h

    def settle(self):
        """Reads the rest of the last SSE reply (not part of a call's round trip)."""
        if self.drain is not None:
            self.drain.read()
            self.drain = None

    def post(self, msg):
        self.settle()
        self.conn.request("POST", self.path, json.dumps(msg), self.headers())
        r = self.conn.getresponse()
        self.sid = self.sid or r.getheader("mcp-session-id")
        if r.status != 200:
            body = r.read()
            if r.status == 202:
                return None
            raise SystemExit("HTTP %d: %r" % (r.status, body[:200]))
        if r.getheader("content-type", "").startswith("text/event-stream"):
            # The reply counts when its event arrives, as an SDK client sees it; the rest of the
            # stream is drained before the next request on this connection.
            while True:
                line = r.readline()
                if not line:
                    raise SystemExit("no reply in the SSE stream")
                if line.startswith(b"data:"):
                    m = json.loads(line[5:])
                    if m.get("id") == msg.get("id") and "method" not in m:
                        self.drain = r
                        return m
        return json.loads(r.read())

    def open_get(self):
        """A second connection holding the session's GET stream open (as SDK clients do)."""
        c = http.client.HTTPConnection(self.host, self.port, timeout=60)
        c.request("GET", self.path, headers={"Accept": "text/event-stream", "Mcp-Session-Id": self.sid,
                                             "MCP-Protocol-Version": "2025-06-18"})
        r = c.getresponse()
        self.get = (c, r)  # kept referenced: the stream stays open until exit
        return r.status


def latency(n, url):
    s = Session(url)
    times = []
    for i in range(1, n + 201):
        s.settle()
        t0 = time.perf_counter_ns()
        reply = s.post(call(i))
        t1 = time.perf_counter_ns()
        assert "result" in reply, reply
        if i > 200:
            times.append(t1 - t0)
    print("%.1f %.1f" % pctl(times))


def tree_rss(pid):
    """(RSS of pid, RSS of pid and all its descendants, descendants alive) in KiB."""
    parent, rss = {}, {}
    for e in os.listdir("/proc"):
        if not e.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % e) as f:
                rest = f.read().rsplit(")", 1)[1].split()
            with open("/proc/%s/status" % e) as f:
                kb = next((int(l.split()[1]) for l in f if l.startswith("VmRSS:")), 0)
        except (OSError, IndexError):
            continue
        parent[int(e)] = int(rest[1])
        rss[int(e)] = kb
    tree, todo = [], [pid]
    while todo:
        p = todo.pop()
        tree.append(p)
        todo += [c for c, pp in parent.items() if pp == p]
    return rss.get(pid, 0), sum(rss.get(p, 0) for p in tree), len(tree) - 1


def sessions(n, url, pid):
    before = tree_rss(pid)
    held = []
    for _ in range(n):
        s = Session(url)
        if os.environ.get("GET") == "1":
            status = s.open_get()
            assert status == 200, status
        held.append(s)
    time.sleep(2)
    after = tree_rss(pid)
    print("%d %d %d %d %d" % (before[0], before[1], after[0], after[1], after[2]), flush=True)
    sys.stdin.readline()
    os._exit(0)


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "direct":
        direct(int(sys.argv[2]), sys.argv[3:])
    elif mode == "latency":
        latency(int(sys.argv[2]), sys.argv[3])
    elif mode == "sessions":
        sessions(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    else:
        raise SystemExit(__doc__)

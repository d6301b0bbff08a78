"""The soak's traffic: mixed JSON-RPC and MCP calls through rpctap, at a target rate.

usage: soak_client.py PROXY_PORT SECONDS RATE WORKERS   (RATE 0: as fast as it goes)

Each worker keeps one HTTP/1.1 connection and loops over a mix: a plain call (`subtract`), a
batch of three, a rate-limited `echo` (the soak's rule refuses most of them), and in its MCP
session `tools/call add`, `tools/call slow` with a progress token (an SSE reply with progress
notifications), `ping`; every 40 operations it deletes its session and opens a new one.
Prints one JSON line at the end: operations done, per kind, errors, and the rate reached.
No third-party modules: asyncio streams and a minimal HTTP/1.1 client.
"""

import asyncio
import json
import sys
import time


class Conn:
    def __init__(self, port):
        self.port = port
        self.r = self.w = None

    async def request(self, method, path, body=b"", headers=()):
        for attempt in range(2):
            try:
                if self.w is None:
                    self.r, self.w = await asyncio.open_connection("127.0.0.1", self.port)
                head = [f"{method} {path} HTTP/1.1", "Host: soak", f"Content-Length: {len(body)}"]
                head += [f"{k}: {v}" for k, v in headers]
                self.w.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
                await self.w.drain()
                return await self.response()
            except (ConnectionError, asyncio.IncompleteReadError):
                self.w = None
                if attempt:
                    raise

    async def response(self):
        status_line = await self.r.readline()
        status = int(status_line.split()[1])
        hdrs = {}
        while True:
            line = await self.r.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode().partition(":")
            hdrs[k.strip().lower()] = v.strip()
        if "content-length" in hdrs:
            body = await self.r.readexactly(int(hdrs["content-length"]))
        elif hdrs.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int((await self.r.readline()).strip().split(b";")[0], 16)
                if size == 0:
                    await self.r.readline()
                    break
                body += await self.r.readexactly(size)
                await self.r.readline()
        else:
            body = b""
        if hdrs.get("connection", "").lower() == "close":
            self.w.close()
            self.w = None
        return status, hdrs, body


def sse_messages(body):
    return [json.loads(l[5:]) for l in body.decode().splitlines() if l.startswith("data:") and l[5:].strip()]


JSON = ("Content-Type", "application/json")
ACCEPT = ("Accept", "application/json, text/event-stream")
VERSION = ("MCP-Protocol-Version", "2025-06-18")


async def worker(n, port, deadline, pace, counts):
    c = Conn(port)
    sid = None
    op = 0
    next_id = 0

    async def mcp(body):
        h = [JSON, ACCEPT, VERSION, ("Mcp-Session-Id", sid)]
        return await c.request("POST", "/mcp", json.dumps(body).encode(), h)

    while time.monotonic() < deadline:
        await pace()
        op += 1
        next_id += 1
        try:
            if sid is None or op % 40 == 0:
                if sid is not None:
                    await c.request("DELETE", "/mcp", b"", [VERSION, ("Mcp-Session-Id", sid)])
                    counts["delete"] += 1
                init = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
                    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "soak", "version": "1"}}}
                s, h, _ = await c.request("POST", "/mcp", json.dumps(init).encode(), [JSON, ACCEPT])
                sid = h.get("mcp-session-id")
                await mcp({"jsonrpc": "2.0", "method": "notifications/initialized"})
                counts["session"] += 1
                continue
            kind = op % 6
            if kind == 0:
                body = {"jsonrpc": "2.0", "id": next_id, "method": "subtract", "params": [op, 1]}
                s, _, b = await c.request("POST", "/jsonrpc", json.dumps(body).encode(), [JSON])
                ok = json.loads(b).get("result") == op - 1
                counts["json"] += 1
            elif kind == 1:
                body = [{"jsonrpc": "2.0", "id": f"b{next_id}-{i}", "method": "add", "params": [i, op]} for i in range(3)]
                s, _, b = await c.request("POST", "/jsonrpc", json.dumps(body).encode(), [JSON])
                ok = len(json.loads(b)) == 3
                counts["batch"] += 1
            elif kind == 2:
                body = {"jsonrpc": "2.0", "id": next_id, "method": "echo", "params": [op]}
                s, _, b = await c.request("POST", "/jsonrpc", json.dumps(body).encode(), [JSON])
                v = json.loads(b)
                ok = "result" in v or v.get("error", {}).get("code") == -32001
                counts["refused" if "error" in v else "limited_ok"] += 1
            elif kind == 3:
                s, _, b = await mcp({"jsonrpc": "2.0", "id": next_id, "method": "tools/call",
                                     "params": {"name": "add", "arguments": {"a": op, "b": 1}}})
                ok = s == 200
                counts["mcp_call"] += 1
            elif kind == 4:
                s, _, b = await mcp({"jsonrpc": "2.0", "id": next_id, "method": "tools/call",
                                     "params": {"name": "slow", "arguments": {"steps": 3, "delay_ms": 1},
                                                "_meta": {"progressToken": f"p{n}-{next_id}"}}})
                msgs = sse_messages(b)
                ok = s == 200 and any("result" in m for m in msgs)
                counts["sse_progress"] += 1
            else:
                s, _, b = await mcp({"jsonrpc": "2.0", "id": next_id, "method": "ping"})
                ok = s == 200
                counts["ping"] += 1
            if not ok:
                counts["errors"] += 1
        except Exception as e:  # a failed operation is counted, the soak goes on
            counts["errors"] += 1
            counts["last_error"] = repr(e)[:200]
            c.w = None
            sid = None


async def main():
    port, secs, rate, workers = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    deadline = time.monotonic() + secs
    counts = {k: 0 for k in ["json", "batch", "refused", "limited_ok", "mcp_call", "sse_progress",
                             "ping", "session", "delete", "errors"]}
    start = time.monotonic()
    sent = [0]

    async def pace():
        sent[0] += 1
        if rate > 0:
            due = start + sent[0] / rate
            delay = due - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

    await asyncio.gather(*(worker(i, port, deadline, pace, counts) for i in range(workers)))
    elapsed = time.monotonic() - start
    counts["ops"] = sent[0]
    counts["ops_per_s"] = round(sent[0] / elapsed, 1)
    print(json.dumps(counts))


asyncio.run(main())

"""Idle connections, for benches/connections.sh.

  idle_clients.py PORT N idle   N keep-alive connections, each sends one JSON-RPC call, reads the
                                reply, then stays open and silent
  idle_clients.py PORT N sse    N MCP sessions (initialize over POST), each then holds a GET /mcp
                                server stream open

Prints "ready" when all are established, holds them until stdin closes (or a line arrives), then
closes them all and prints "closed".
"""
import asyncio
import json
import sys

port, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
CALL = b'{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}'
INIT = json.dumps({
    "jsonrpc": "2.0", "id": 0, "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "bench", "version": "1"}},
}).encode()


async def read_response(r):
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    session = None
    for line in head.split(b"\r\n"):
        k, _, v = line.partition(b":")
        if k.lower() == b"content-length":
            length = int(v)
        if k.lower() == b"mcp-session-id":
            session = v.strip().decode()
    if length:
        await r.readexactly(length)
    return session


async def post(r, w, path, body, extra=b""):
    w.write(b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Accept: application/json\r\n" + extra + b"Content-Length: %d\r\n\r\n" % len(body) + body)
    await w.drain()
    return await read_response(r)


async def one(i, conns):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    if mode == "idle":
        await post(r, w, b"/jsonrpc", CALL)
    else:
        sid = await post(r, w, b"/mcp", INIT)
        await post(r, w, b"/mcp", b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
                   b"Mcp-Session-Id: " + sid.encode() + b"\r\n")
        w.write(b"GET /mcp HTTP/1.1\r\nHost: x\r\nAccept: text/event-stream\r\nMcp-Session-Id: "
                + sid.encode() + b"\r\n\r\n")
        await w.drain()
        await r.readuntil(b"\r\n\r\n")  # the stream's head; its events never come
    conns.append(w)


async def main():
    conns = []
    sem = asyncio.Semaphore(200)

    async def guarded(i):
        async with sem:
            await one(i, conns)

    await asyncio.gather(*(guarded(i) for i in range(n)))
    print("ready", len(conns), flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for w in conns:
        w.close()
    print("closed", flush=True)


asyncio.run(main())

"""A normal client's latency with and without slowloris connections, for benches/connections.sh.

  slowloris.py PORT N CALLS

Makes CALLS sequential JSON-RPC calls, 10 ms apart, on one kept-alive connection and times each;
then opens N connections that send half a request head and trickle one more header byte each
every 0.5 s, and times CALLS calls again while they trickle (CALLS=1000: over 10 s, past a
10 s header timeout). Prints one line:
"base_p50_us base_p99_us loaded_p50_us loaded_p99_us slow_closed_by_server".
"""
import asyncio
import sys
import time

port, n, calls = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
BODY = b'{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}'
REQ = (b"POST /jsonrpc HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)


async def read_response(r):
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        k, _, v = line.partition(b":")
        if k.lower() == b"content-length":
            length = int(v)
    await r.readexactly(length)


class Client:
    """One kept-alive connection, opened again when the server closes it (nginx closes a
    connection after 1,000 requests by default)."""

    def __init__(self):
        self.r = self.w = None

    async def call(self):
        for _ in range(2):
            if self.w is None:
                self.r, self.w = await asyncio.open_connection("127.0.0.1", port)
            try:
                self.w.write(REQ)
                await self.w.drain()
                await read_response(self.r)
                return
            except (asyncio.IncompleteReadError, ConnectionError):
                self.w = None
        raise RuntimeError("no answer")


async def timed(c, count=None):
    out = []
    for _ in range(count or calls):
        t = time.perf_counter()
        await c.call()
        out.append((time.perf_counter() - t) * 1e6)
        await asyncio.sleep(0.01)
    out.sort()
    return out[len(out) // 2], out[int(len(out) * 0.99)]


async def slow(stop, closed):
    try:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"POST /jsonrpc HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        await w.drain()
        while not stop.is_set():
            await asyncio.sleep(0.5)
            w.write(b"a")
            await w.drain()
            if r.at_eof():
                break
    except (ConnectionError, OSError):
        closed.append(1)
        return
    if r.at_eof():
        closed.append(1)


async def main():
    c = Client()
    await timed(c, 100)  # warm-up
    base = await timed(c)
    stop, closed = asyncio.Event(), []
    tasks = [asyncio.create_task(slow(stop, closed)) for _ in range(n)]
    await asyncio.sleep(1)
    loaded = await timed(c)
    stop.set()
    await asyncio.gather(*tasks, return_exceptions=True)
    print(f"{base[0]:.0f} {base[1]:.0f} {loaded[0]:.0f} {loaded[1]:.0f} {len(closed)}")


asyncio.run(main())

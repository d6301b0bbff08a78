"""JSON-RPC 2.0 over WebSocket with the `websockets` library (permessage-deflate on by default).

usage: ws_peer.py server PORT [plain]      a JSON-RPC server
       ws_peer.py client URL [plain]       a client; prints what it got as one JSON object
       ws_peer.py limited URL [plain]      a client for a proxy refusing `add` after 3 calls
       ws_peer.py faulted URL [plain]      a client for a proxy injecting faults: an error on
                                           the first `add`, a held `echo`, a closed connection
                                           on `stats`
       ws_peer.py intercepted URL [plain]  a client for a dashboard holding its messages: an
                                           echo (edited there), an echo (dropped: a 4 s
                                           timeout), an add (forwarded), an add (answered there),
                                           stats
       ws_peer.py replies URL [plain]      a client for a proxy faulting the server's replies:
                                           add dropped (2 s timeout), doubled, held 1 s,
                                           throttled; echo with a wrong id, cut JSON;
                                           subscribe with the stream cut after its result
       ws_peer.py asked URL [plain]        a client answering the server's `sampling/createMessage`
                                           requests, for a proxy faulting them (s2c): ten `ask`s,
                                           then stats
       ws_peer.py eth URL                  an Ethereum client (for ganache): block number, a
                                           batch, newHeads over three mined blocks, unsubscribe
`plain` turns compression off.

Server methods: add (sum of params), echo (the params), subscribe (result "sub-1", then three
`subscription` notifications carrying it), unsubscribe (true, and the notifications stop), stats (how many `add` calls and notifications
reached the server, and of the client's answers to its requests how many were for no request of
its (`stray`) or not JSON (`bad`)), ask ([QUESTION]: the server asks the client
`sampling/createMessage` and answers with what came back in 2 s — the answer's result, its
error, or "timeout").
Batches are answered as arrays; notifications get nothing.
"""

import asyncio
import json
import sys
import time

from websockets.asyncio.client import connect
from websockets.asyncio.server import serve
from websockets.exceptions import ConnectionClosed


SEEN = {"add": 0, "stray": 0, "bad": 0, "tools/call": 0}


def answer(req):
    method, params, rid = req.get("method"), req.get("params"), req.get("id")
    if method == "add":
        SEEN["add"] += 1
    if method == "tools/call":
        SEEN["tools/call"] += 1
    if method == "stats":
        out = {"result": dict(SEEN)}
    elif method == "tools/list":
        out = {"result": {"tools": [{"name": "add"}, {"name": "echo"}]}}
    elif method == "tools/call":
        out = {"result": {"content": [{"type": "text", "text": params["name"]}]}}
    elif method == "ask":
        return None
    elif method == "add":
        out = {"result": sum(params)}
    elif method == "echo":
        out = {"result": params}
    elif method == "subscribe":
        out = {"result": "sub-1"}
    elif method == "unsubscribe":
        out = {"result": True}
    else:
        out = {"error": {"code": -32601, "message": "Method not found"}}
    return None if rid is None else {"jsonrpc": "2.0", "id": rid, **out}


async def ask(ws, pending, rid, question):
    """Asks the client (a server→client request) and answers the client's `ask` call with what
    came back."""
    SEEN["asked"] = SEEN.get("asked", 0) + 1
    sid = f"srv-{SEEN['asked']}"
    fut = asyncio.get_running_loop().create_future()
    pending[sid] = fut
    await ws.send(json.dumps({"jsonrpc": "2.0", "id": sid, "method": "sampling/createMessage",
                              "params": {"messages": [{"role": "user", "content": {"type": "text", "text": question}}],
                                         "maxTokens": 5}}))
    try:
        got = await asyncio.wait_for(fut, 2)
        out = got.get("result", {"error": got.get("error")})
    except TimeoutError:
        out = "timeout"
    finally:
        pending.pop(sid, None)
    try:
        await ws.send(json.dumps({"jsonrpc": "2.0", "id": rid, "result": out}))
    except ConnectionClosed:
        pass


async def handler(ws):
    pending = {}
    tasks = set()
    async for text in ws:
        try:
            msg = json.loads(text)
        except json.JSONDecodeError:
            SEEN["bad"] += 1
            continue
        if isinstance(msg, dict) and "method" not in msg and "id" in msg:
            # The client's answer to a request of ours.
            fut = pending.get(msg["id"])
            if fut is None or fut.done():
                SEEN["stray"] += 1
            else:
                fut.set_result(msg)
            continue
        if isinstance(msg, dict) and msg.get("method") == "ask":
            t = asyncio.create_task(ask(ws, pending, msg.get("id"), msg["params"][0]))
            tasks.add(t)
            t.add_done_callback(tasks.discard)
            continue
        if isinstance(msg, list):
            replies = [r for r in (answer(m) for m in msg) if r]
            if replies:
                await ws.send(json.dumps(replies))
            continue
        reply = answer(msg)
        if reply:
            await ws.send(json.dumps(reply))
        if msg.get("method") == "subscribe":
            for i in range(3):
                await ws.send(json.dumps({"jsonrpc": "2.0", "method": "subscription",
                                          "params": {"subscription": "sub-1", "result": {"n": i}}}))


async def server(port, compression):
    async with serve(handler, "127.0.0.1", port, compression=compression, max_size=None):
        await asyncio.Future()


async def client(url, compression):
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        out["extensions"] = [type(e).__name__ for e in ws.protocol.extensions]

        async def call(body):
            await ws.send(json.dumps(body))
            return json.loads(await ws.recv())

        out["add"] = await call({"jsonrpc": "2.0", "method": "add", "params": [2, 3], "id": 1})
        out["batch"] = await call([
            {"jsonrpc": "2.0", "method": "add", "params": [1, 1], "id": 2},
            {"jsonrpc": "2.0", "method": "notify", "params": [0]},
            {"jsonrpc": "2.0", "method": "add", "params": [2, 2], "id": 3},
        ])
        out["subscribe"] = await call({"jsonrpc": "2.0", "method": "subscribe", "params": ["heads"], "id": 4})
        out["notifications"] = [json.loads(await ws.recv()) for _ in range(3)]
        big = "x" * 200_000
        try:
            echoed = await call({"jsonrpc": "2.0", "method": "echo", "params": [big], "id": 5})
        except ConnectionClosed as e:
            # A proxy that refuses what it cannot inspect closes with 1009 (message too big).
            out["big"] = f"closed {e.rcvd.code if e.rcvd else None}"
            print(json.dumps(out))
            return
        out["big"] = echoed["result"][0] == big
        out["unsubscribe"] = await call({"jsonrpc": "2.0", "method": "unsubscribe", "params": ["sub-1"], "id": 6})
    print(json.dumps(out))


async def limited(url, compression):
    """Calls through a proxy whose rule lets 3 `add` through: the refused ones get rpctap's
    error, everything else (compressed or not, after a refusal too) is answered by the server."""
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        async def recv_ids(n):
            got = {}
            while len(got) < n:
                msg = json.loads(await ws.recv())
                for m in msg if isinstance(msg, list) else [msg]:
                    got[str(m["id"])] = m
            return got

        text = "the same words again and again, " * 40
        for i in range(1, 6):
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": "add", "params": [i, 1], "id": i}))
            out.update(await recv_ids(1))
        # A batch: one refused member, one answered; two replies (rpctap's and the server's).
        await ws.send(json.dumps([
            {"jsonrpc": "2.0", "method": "add", "params": [1, 1], "id": 6},
            {"jsonrpc": "2.0", "method": "echo", "params": [text], "id": 7},
        ]))
        out.update(await recv_ids(2))
        # A refused notification is dropped; the calls after it (which the client compresses
        # against what it sent before) reach the server intact.
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "add", "params": [0, 0]}))
        for i in (8, 9):
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": "echo", "params": [text, i], "id": i}))
            out.update(await recv_ids(1))
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "stats", "id": 10}))
        out.update(await recv_ids(1))
        out["text"] = text
    print(json.dumps(out))


async def faulted(url, compression):
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        async def call(body):
            await ws.send(json.dumps(body))
            return json.loads(await ws.recv())

        out["add"] = await call({"jsonrpc": "2.0", "method": "add", "params": [1, 1], "id": 1})
        out["add2"] = await call({"jsonrpc": "2.0", "method": "add", "params": [2, 3], "id": 2})
        t0 = time.monotonic()
        out["echo"] = await call({"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": 3})
        out["echo_secs"] = time.monotonic() - t0
        try:
            out["stats"] = await asyncio.wait_for(
                call({"jsonrpc": "2.0", "method": "stats", "id": 4}), 10)
        except ConnectionClosed:
            out["stats"] = "connection closed"
    print(json.dumps(out))


async def denied(url, compression):
    """`tools/list` twice (a changed reply, then the next under context takeover), a denied
    tool's call, an allowed call, and what the server saw."""
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        async def call(body):
            await ws.send(json.dumps(body))
            return json.loads(await ws.recv())

        out["list"] = await call({"jsonrpc": "2.0", "method": "tools/list", "id": 1})
        out["denied"] = await call({"jsonrpc": "2.0", "method": "tools/call",
                                    "params": {"name": "echo", "arguments": {}}, "id": 2})
        out["add"] = await call({"jsonrpc": "2.0", "method": "add", "params": [2, 3], "id": 3})
        out["list2"] = await call({"jsonrpc": "2.0", "method": "tools/list", "id": 4})
        out["stats"] = await call({"jsonrpc": "2.0", "method": "stats", "id": 5})
    print(json.dumps(out))


async def overtaken(url, compression):
    """Two pairs sent at once, `add` then `echo`: the order and time (s) the replies came in."""
    out = {"order": []}
    async with connect(url, compression=compression, max_size=None) as ws:
        for a, e in [(1, 2), (3, 4)]:
            t0 = time.monotonic()
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": "add", "params": [1, 2], "id": a}))
            await ws.send(json.dumps({"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": e}))
            got = []
            for _ in range(2):
                m = json.loads(await asyncio.wait_for(ws.recv(), 10))
                got.append([m["id"], round(time.monotonic() - t0, 2), m.get("result")])
            out["order"].append(got)
    print(json.dumps(out))


async def held_passed(url, compression):
    """`echo` (held by the dashboard) then `add` at once: each reply printed as it comes."""
    async with connect(url, compression=compression, max_size=None) as ws:
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": 1}))
        await ws.send(json.dumps({"jsonrpc": "2.0", "method": "add", "params": [1, 2], "id": 2}))
        for _ in range(2):
            m = json.loads(await asyncio.wait_for(ws.recv(), 30))
            print(json.dumps(m), flush=True)


async def intercepted(url, compression):
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        async def call(body, timeout=60):
            await ws.send(json.dumps(body))
            try:
                return json.loads(await asyncio.wait_for(ws.recv(), timeout))
            except TimeoutError:
                return "timeout"

        out["echo"] = await call({"jsonrpc": "2.0", "method": "echo", "params": {"a": 2, "b": 3}, "id": 1})
        out["echo2"] = await call({"jsonrpc": "2.0", "method": "echo", "params": {"a": 7}, "id": 2}, 4)
        out["add"] = await call({"jsonrpc": "2.0", "method": "add", "params": [1, 1], "id": 3})
        out["add2"] = await call({"jsonrpc": "2.0", "method": "add", "params": [2, 2], "id": 4})
        out["stats"] = await call({"jsonrpc": "2.0", "method": "stats", "id": 5})
        out["echo3"] = await call({"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": 6})
    print(json.dumps(out))


async def replies(url, compression):
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        async def recv(timeout):
            try:
                text = await asyncio.wait_for(ws.recv(), timeout)
            except TimeoutError:
                return "timeout"
            except ConnectionClosed:
                return "connection closed"
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return {"not_json": text}

        async def call(body, timeout=5):
            await ws.send(json.dumps(body))
            return await recv(timeout)

        out["dropped"] = await call({"jsonrpc": "2.0", "method": "add", "params": [1, 1], "id": 1}, 2)
        out["doubled"] = await call({"jsonrpc": "2.0", "method": "add", "params": [2, 2], "id": 2})
        out["doubled_again"] = await recv(2)
        t0 = time.monotonic()
        out["late"] = await call({"jsonrpc": "2.0", "method": "add", "params": [3, 3], "id": 3})
        out["late_secs"] = time.monotonic() - t0
        t0 = time.monotonic()
        out["slow"] = await call({"jsonrpc": "2.0", "method": "add", "params": [4, 4], "id": 4})
        out["slow_secs"] = time.monotonic() - t0
        out["renamed"] = await call({"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": 5})
        out["cut_json"] = await call({"jsonrpc": "2.0", "method": "echo", "params": ["y"], "id": 6})
        out["sub"] = await call({"jsonrpc": "2.0", "method": "subscribe", "id": 7})
        out["after_cut"] = await recv(5)
    print(json.dumps(out))


async def asked(url, compression):
    """Ten `ask`s (each answered by the server after it asked us), then stats; each with what it
    got, how long it took, and how many of the server's requests we answered meanwhile."""
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        async def call(body, timeout=6):
            t0 = time.monotonic()
            await ws.send(json.dumps(body))
            sampled = 0
            while True:
                try:
                    msg = json.loads(await asyncio.wait_for(ws.recv(), timeout))
                except TimeoutError:
                    return {"got": "timeout", "sampled": sampled}
                except ConnectionClosed:
                    return {"got": "connection closed", "sampled": sampled}
                if msg.get("method") == "sampling/createMessage":
                    sampled += 1
                    q = msg["params"]["messages"][0]["content"]["text"]
                    await ws.send(json.dumps({"jsonrpc": "2.0", "id": msg["id"],
                                              "result": {"role": "assistant", "model": "ws-model",
                                                         "content": {"type": "text", "text": f"42 ({q})"}}}))
                    continue
                return {"got": msg.get("result", msg.get("error")), "sampled": sampled,
                        "secs": round(time.monotonic() - t0, 2)}

        names = ["refused", "held", "lost", "twice", "renamed", "cut", "late", "slow"]
        for i, q in enumerate(names):
            out[q] = await call({"jsonrpc": "2.0", "method": "ask", "params": [q], "id": i + 1})
        out["stats"] = await call({"jsonrpc": "2.0", "method": "stats", "id": 20})
        out["closed"] = await call({"jsonrpc": "2.0", "method": "ask", "params": ["closed"], "id": 21})
    print(json.dumps(out))


async def eth(url, compression):
    out = {}
    async with connect(url, compression=compression, max_size=None) as ws:
        out["extensions"] = [type(e).__name__ for e in ws.protocol.extensions]
        pending = []  # notifications that came while waiting for a reply

        async def call(body):
            await ws.send(json.dumps(body))
            while True:
                msg = json.loads(await ws.recv())
                if isinstance(msg, dict) and msg.get("method") == "eth_subscription":
                    pending.append(msg)
                    continue
                return msg

        out["blockNumber"] = await call({"jsonrpc": "2.0", "method": "eth_blockNumber", "params": [], "id": 1})
        out["batch"] = await call([
            {"jsonrpc": "2.0", "method": "eth_chainId", "params": [], "id": 2},
            {"jsonrpc": "2.0", "method": "net_version", "params": [], "id": 3},
        ])
        sub = await call({"jsonrpc": "2.0", "method": "eth_subscribe", "params": ["newHeads"], "id": 4})
        out["subscription"] = sub["result"]
        for i in range(3):
            out[f"mine{i}"] = await call({"jsonrpc": "2.0", "method": "evm_mine", "params": [], "id": 5 + i})
        while len(pending) < 3:
            msg = json.loads(await ws.recv())
            if msg.get("method") == "eth_subscription":
                pending.append(msg)
        out["heads"] = [int(n["params"]["result"]["number"], 16) for n in pending]
        out["heads_subscription"] = sorted({n["params"]["subscription"] for n in pending})
        out["unsubscribe"] = await call({"jsonrpc": "2.0", "method": "eth_unsubscribe", "params": [sub["result"]], "id": 8})
        out["after"] = await call({"jsonrpc": "2.0", "method": "eth_blockNumber", "params": [], "id": 9})
    print(json.dumps(out))


if __name__ == "__main__":
    role, where = sys.argv[1], sys.argv[2]
    compression = None if "plain" in sys.argv[3:] else "deflate"
    if role == "server":
        asyncio.run(server(int(where), compression))
    elif role == "eth":
        asyncio.run(eth(where, compression))
    elif role == "limited":
        asyncio.run(limited(where, compression))
    elif role == "replies":
        asyncio.run(replies(where, compression))
    elif role == "asked":
        asyncio.run(asked(where, compression))
    elif role == "intercepted":
        asyncio.run(intercepted(where, compression))
    elif role == "faulted":
        asyncio.run(faulted(where, compression))
    elif role == "overtaken":
        asyncio.run(overtaken(where, compression))
    elif role == "held_passed":
        asyncio.run(held_passed(where, compression))
    elif role == "denied":
        asyncio.run(denied(where, compression))
    else:
        asyncio.run(client(where, compression))

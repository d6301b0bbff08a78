"""The official Python SDK 2.x client doing a whole session; prints what it saw as JSON.

usage: mcp2_client.py URL MODE [URL MODE …]   (MODE: auto — discover, the 2026-07-28 protocol —
       or legacy)
       mcp2_client.py --stdio MODE COMMAND [ARGS…]   (the server spawned over stdio)

One session per pair, in order, in this one process (the SDK is imported once); with one pair it
prints that session's JSON, with more a JSON list of them.
"""
import asyncio
import json
import sys

import os

from mcp import Client, StdioServerParameters


def dump(x):
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(url, mode):
    out = {}
    progress = []
    logs = []

    async def on_log(params):
        logs.append(dump(params))

    async def on_progress(p, total, message):
        progress.append([p, total])

    async with Client(url, mode=mode, logging_callback=on_log) as c:
        out["tools"] = sorted(t.name for t in (await c.list_tools()).tools)
        out["add"] = dump(await c.call_tool("add", {"a": 2, "b": 3}))
        out["slow"] = dump(await c.call_tool("slow", {"steps": 3}, progress_callback=on_progress))
        out["fail"] = dump(await c.call_tool("fail", {}))
        out["resources"] = [str(r.uri) for r in (await c.list_resources()).resources]
        out["readme"] = dump(await c.read_resource("demo://readme"))
        out["prompts"] = [p.name for p in (await c.list_prompts()).prompts]
        out["greet"] = dump(await c.get_prompt("greet", {"name": "rpctap"}))
        if mode == "legacy":
            await c.send_ping()  # ping is gone from the 2026-07-28 protocol
    out["progress"] = progress
    out["logs"] = logs
    return out


async def all_sessions(args):
    outs = []
    for url, mode in zip(args[0::2], args[1::2]):
        outs.append(await main(url, mode))
    print(json.dumps(outs[0] if len(outs) == 1 else outs, sort_keys=True))


if sys.argv[1] == "--stdio":
    cmd = sys.argv[3:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    print(json.dumps(asyncio.run(main(params, sys.argv[2])), sort_keys=True))
else:
    asyncio.run(all_sessions(sys.argv[1:]))

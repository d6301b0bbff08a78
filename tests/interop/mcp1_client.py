"""The official Python SDK client (mcp < 2) doing a whole session; prints what it saw as JSON.

usage: mcp1_client.py URL [legacy] [URL [legacy] …]

With `legacy`, URL is the HTTP+SSE stream (`…/sse`) and the client is `sse_client`. One session per
URL, in order, in this one process (the SDK is imported once); with one URL it prints that
session's JSON, with more a JSON list of them.
"""
import asyncio
import json
import sys

from mcp import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamablehttp_client


def dump(x):
    return x.model_dump(mode="json", exclude_none=True)


async def main(url, legacy):
    out = {}
    progress = []
    logs = []

    async def on_log(params):
        logs.append(dump(params))

    transport = sse_client(url) if legacy else streamablehttp_client(url)
    async with transport as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, logging_callback=on_log) as s:
            init = await s.initialize()
            out["server"] = init.serverInfo.name
            out["protocol"] = init.protocolVersion
            out["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
            out["add"] = dump(await s.call_tool("add", {"a": 2, "b": 3}))

            async def on_progress(p, total, message):
                progress.append([p, total])

            out["slow"] = dump(await s.call_tool("slow", {"steps": 3}, progress_callback=on_progress))
            out["fail"] = dump(await s.call_tool("fail", {}))
            out["resources"] = [str(r.uri) for r in (await s.list_resources()).resources]
            out["readme"] = dump(await s.read_resource("demo://readme"))
            out["prompts"] = [p.name for p in (await s.list_prompts()).prompts]
            out["greet"] = dump(await s.get_prompt("greet", {"name": "rpctap"}))
            await s.send_ping()
    out["progress"] = progress
    out["logs"] = logs
    return out


async def all_sessions(args):
    sessions = []
    for a in args:
        if a == "legacy":
            sessions[-1] = (sessions[-1][0], True)
        else:
            sessions.append((a, False))
    outs = [await main(url, legacy) for url, legacy in sessions]
    print(json.dumps(outs[0] if len(outs) == 1 else outs, sort_keys=True))


asyncio.run(all_sessions(sys.argv[1:]))

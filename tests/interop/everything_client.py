"""The official Python SDK 2.x client doing a session with server-everything; prints what it saw
as JSON (tools, an echo, a sum, a long operation's progress, resources, prompts).

usage: everything_client.py URL MODE   (MODE: auto — discover, falling back to initialize — or
       legacy)
"""
import asyncio
import json
import sys

from mcp import Client


def dump(x):
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(url, mode):
    out = {}
    progress = []

    async def on_progress(p, total, message):
        progress.append([p, total])

    async with Client(url, mode=mode) as c:
        out["tools"] = sorted(t.name for t in (await c.list_tools()).tools)
        out["echo"] = dump(await c.call_tool("echo", {"message": "through the bridge"}))
        out["sum"] = dump(await c.call_tool("get-sum", {"a": 2, "b": 3}))
        out["long"] = dump(
            await c.call_tool(
                "trigger-long-running-operation",
                {"duration": 0.3, "steps": 3},
                progress_callback=on_progress,
            )
        )
        out["resources"] = sorted(str(r.uri) for r in (await c.list_resources()).resources)
        out["prompts"] = sorted(p.name for p in (await c.list_prompts()).prompts)
        out["simple"] = dump(await c.get_prompt("simple-prompt", {}))
        await c.send_ping()
    out["progress"] = progress
    print(json.dumps(out, sort_keys=True))


asyncio.run(main(sys.argv[1], sys.argv[2]))

"""The official Python SDK's stdio client driving several servers at once, as a desktop client
does with the servers of its config; prints, per server, what it saw as JSON.

usage: mcp_multi_client.py CONFIG.json [HOLD_FILE]

CONFIG.json is an MCP client config (`mcpServers` or VS Code's `servers`): each entry's `command`
and `args` are spawned exactly as written — wrapped by `rpctap config wrap` or not. With
HOLD_FILE, every session stays open after its calls until that file exists (so that a test can
look at them while they are live).
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def session(name, entry, hold):
    out = {"name": name}
    params = StdioServerParameters(command=entry["command"], args=entry.get("args", []))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            init = await s.initialize()
            info = getattr(init, "serverInfo", None) or getattr(init, "server_info")
            out["server"] = info.name
            tools = sorted(t.name for t in (await s.list_tools()).tools)
            out["tools"] = len(tools)
            if "add" in tools:
                r = await s.call_tool("add", {"a": 2, "b": 3})
                out["call"] = [c.text for c in r.content if c.type == "text"]
            elif "echo" in tools:
                r = await s.call_tool("echo", {"message": "hi"})
                out["call"] = [c.text for c in r.content if c.type == "text"]
            await s.send_ping()
            while hold and not os.path.exists(hold):
                await asyncio.sleep(0.05)
    return out


async def main(path, hold):
    with open(path) as f:
        cfg = json.load(f)
    servers = cfg.get("mcpServers") or cfg.get("servers")
    # URL entries are remote servers: not this client's to spawn.
    stdio = {n: e for n, e in servers.items() if "command" in e}
    results = await asyncio.gather(*(session(n, e, hold) for n, e in stdio.items()))
    print(json.dumps(sorted(results, key=lambda r: r["name"]), sort_keys=True))


asyncio.run(main(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None))

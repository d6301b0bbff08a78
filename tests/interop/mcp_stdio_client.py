"""The official Python SDK's stdio client doing a whole session against a stdio server; prints what
it saw as JSON.

usage: mcp_stdio_client.py COMMAND [ARGS…]

The server is spawned by the SDK (`stdio_client(StdioServerParameters(…))`) exactly as an MCP host
spawns one: run it once with the server's command line and once with `rpctap stdio … -- ` in
front, and compare.
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.types import CreateMessageResult, TextContent


def dump(x):
    return x.model_dump(mode="json", exclude_none=True)


async def main(command, args):
    out = {}
    progress = []
    logs = []

    async def on_log(params):
        logs.append(dump(params))

    async def on_sampling(context, params):
        q = params.messages[0].content.text
        return CreateMessageResult(
            role="assistant",
            content=TextContent(type="text", text=f"42 ({q})"),
            model="interop-model",
        )

    # The environment passes whole (a host passes its config's `env`): the test's RPCTAP_HOME
    # keeps the shims' sessions out of the real home.
    params = StdioServerParameters(command=command, args=args, env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, logging_callback=on_log, sampling_callback=on_sampling
        ) as s:
            init = await s.initialize()
            out["server"] = init.serverInfo.name
            out["protocol"] = init.protocolVersion
            out["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
            out["add"] = dump(await s.call_tool("add", {"a": 2, "b": 3}))

            async def on_progress(p, total, message):
                progress.append([p, total])

            out["slow"] = dump(await s.call_tool("slow", {"steps": 3}, progress_callback=on_progress))
            out["fail"] = dump(await s.call_tool("fail", {}))
            out["ask"] = dump(await s.call_tool("ask", {"question": "why?"}))
            out["readme"] = dump(await s.read_resource("demo://readme"))
            out["greet"] = dump(await s.get_prompt("greet", {"name": "rpctap"}))
            await s.send_ping()
    out["progress"] = progress
    out["logs"] = logs
    print(json.dumps(out, sort_keys=True))


asyncio.run(main(sys.argv[1], sys.argv[2:]))

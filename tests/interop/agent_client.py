"""The Python SDK 2.x client as an agent using `rpctap mcp` over stdio; prints what it saw as JSON.

usage: agent_client.py SESSION_DIR UNKNOWN_TOOL_SESSION BIG_SESSION TARGET -- COMMAND [ARGS…]

COMMAND is the server (`rpctap mcp --dir SESSION_DIR`, possibly wrapped in `rpctap stdio`).
"""
import asyncio
import json
import os
import sys

from mcp import Client, StdioServerParameters


def dump(x):
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(unknown, big, target, command):
    out = {}
    params = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    async with Client(params, mode="auto") as c:
        tools = (await c.list_tools()).tools
        out["tools"] = {t.name: {"input": t.input_schema, "output": t.output_schema,
                                 "read_only": (t.annotations.read_only_hint if t.annotations else None)}
                        for t in tools}

        async def call(name, args):
            r = await c.call_tool(name, args)
            return {"error": r.is_error, "data": r.structured_content,
                    "text": r.content[0].text if r.content else None}

        out["sessions"] = await call("list_sessions", {})
        out["unknown"] = await call("list_calls", {"session": unknown, "filter": "code:MCP_UNKNOWN_TOOL"})
        if out["unknown"]["data"] and out["unknown"]["data"]["calls"]:
            i = out["unknown"]["data"]["calls"][0]["index"]
            out["get_call"] = await call("get_call", {"session": unknown, "index": i})
        out["anomalies"] = await call("find_anomalies", {"session": unknown})
        # Every call of the big session, page by page.
        seen, cursor, pages = [], None, 0
        while True:
            args = {"session": big, "limit": 100}
            if cursor:
                args["cursor"] = cursor
            page = (await call("list_calls", args))["data"]
            seen.extend(x["index"] for x in page["calls"])
            pages += 1
            cursor = page.get("nextCursor")
            if not cursor or pages > 50:
                break
        out["pages"] = pages
        out["seen"] = seen
        out["stats"] = await call("stats", {"session": big})
        out["cost"] = await call("cost", {"session": unknown, "tokenizer": "cl100k"})
        out["check"] = await call("check", {"session": unknown})
        out["replay"] = await call("replay_call", {"session": big, "index": 0, "target": target})
        out["resources"] = [str(r.uri) for r in (await c.list_resources()).resources]
    return out


args = sys.argv[1:]
sep = args.index("--")
_, unknown, big, target = args[:sep]
print(json.dumps(asyncio.run(main(unknown, big, target, args[sep + 1:])), sort_keys=True))

"""The Python SDK 2.x client calling tools that need its input (`mcp2_mrtr_server.py`): it
confirms through its `elicitation_callback` and answers sampling through its `sampling_callback`;
prints what it saw as JSON.

usage: mcp2_mrtr_client.py URL MODE TOOLS [URL MODE TOOLS …]
       (MODE: auto | legacy; TOOLS: the tools to call, comma-separated, of delete, summarize and
       chatty — with chatty the client asks for logs at level info)
"""
import asyncio
import json
import sys

from mcp import Client
from mcp_types import CreateMessageResult, ElicitResult, TextContent


def dump(x):
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(url, mode, tools):
    asked = []

    async def on_elicit(context, params):
        asked.append(params.message)
        return ElicitResult(action="accept", content={"confirm": True})

    async def on_sample(context, params):
        asked.append("sample")
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text="short"), model="test-model"
        )

    logs = []

    async def on_log(params):
        logs.append(params.data)

    out = {}
    args = {"delete": {"path": "/tmp/x"}, "summarize": {"text": "a long text"}, "chatty": {}}
    async with Client(
        url,
        mode=mode,
        elicitation_callback=on_elicit,
        sampling_callback=on_sample,
        logging_callback=on_log,
        log_level="info" if "chatty" in tools else None,
    ) as c:
        for t in tools:
            out[t] = dump(await c.call_tool(t, args[t]))
    out["asked"] = asked
    out["logs"] = logs
    return out


async def all_sessions(args):
    outs = [
        await main(url, mode, tools.split(","))
        for url, mode, tools in zip(args[0::3], args[1::3], args[2::3])
    ]
    print(json.dumps(outs[0] if len(outs) == 1 else outs, sort_keys=True))


asyncio.run(all_sessions(sys.argv[1:]))

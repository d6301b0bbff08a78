"""The Python SDK 2.x client calling tools that need its input (`mcp2_mrtr_server.py`): it
confirms through its `elicitation_callback` and answers sampling through its `sampling_callback`;
prints what it saw as JSON.

usage: mcp2_mrtr_client.py URL MODE [URL MODE …]   (MODE: auto | legacy)
"""
import asyncio
import json
import sys

from mcp import Client
from mcp_types import CreateMessageResult, ElicitResult, TextContent


def dump(x):
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


async def main(url, mode):
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
    async with Client(
        url, mode=mode, elicitation_callback=on_elicit, sampling_callback=on_sample, logging_callback=on_log
    ) as c:
        out["delete"] = dump(await c.call_tool("delete", {"path": "/tmp/x"}))
        out["summarize"] = dump(await c.call_tool("summarize", {"text": "a long text"}))
        out["chatty"] = dump(await c.call_tool("chatty", {}))
    out["asked"] = asked
    return out


async def all_sessions(args):
    outs = [await main(url, mode) for url, mode in zip(args[0::2], args[1::2])]
    print(json.dumps(outs[0] if len(outs) == 1 else outs, sort_keys=True))


asyncio.run(all_sessions(sys.argv[1:]))

"""The official Python SDK 2.x client making calls through a fault-injecting rpctap; prints, per
call, what the client observed (its result, or the exception it raised), as JSON.

usage: fault_client.py URL MODE TIMEOUT CALL [CALL …]
       fault_client.py --stdio MODE TIMEOUT CALLS_JSON COMMAND [ARGS…]
  MODE: auto or legacy; TIMEOUT: each call's read timeout in seconds;
  CALL: TOOL:JSON_ARGS, e.g. 'add:{"a":2,"b":3}' (CALLS_JSON: a JSON list of such strings);
  `@tools` lists the tools instead (the entry's `tools`: their names).

Each call is timed; a call that raises is reported with the exception's type and message, and
the session goes on when it can (a broken session stops the list: later calls say so).

With FAULT_CLIENT_SAMPLING=1 the client declares sampling and answers the server's
`sampling/createMessage` requests with "42 (PROMPT)"; each call's entry says how many it
answered (`sampled`).
"""
import asyncio
import json
import os
import sys
import time

from mcp import Client, StdioServerParameters
from mcp.types import CreateMessageResult, TextContent


def dump(x):
    return x.model_dump(mode="json", by_alias=True, exclude_none=True)


async def run(server, mode, timeout, calls):
    out = []
    sampled = []

    async def on_sampling(context, params):
        sampled.append(1)
        q = params.messages[0].content.text
        return CreateMessageResult(
            role="assistant", content=TextContent(type="text", text=f"42 ({q})"), model="fault-model"
        )

    extra = {}
    if os.environ.get("FAULT_CLIENT_SAMPLING") == "1":
        extra["sampling_callback"] = on_sampling
    try:
        async with Client(server, mode=mode, **extra) as c:
            for call in calls:
                sampled.clear()
                if call == "@tools":
                    listed = await c.list_tools()
                    out.append({"tools": [t.name for t in listed.tools]})
                    continue
                tool, args = call.split(":", 1)
                progress = []

                async def on_progress(p, total, message):
                    progress.append(p)

                t0 = time.monotonic()
                try:
                    r = await asyncio.wait_for(
                        c.call_tool(tool, json.loads(args), read_timeout_seconds=timeout,
                                    progress_callback=on_progress),
                        timeout + 5,
                    )
                    res = {"result": dump(r)}
                except BaseException as e:  # noqa: BLE001 — the client's behaviour is the result
                    if isinstance(e, (KeyboardInterrupt, SystemExit)):
                        raise
                    res = {"exception": type(e).__name__, "message": str(e)[:300]}
                res["tool"] = tool
                res["elapsed"] = round(time.monotonic() - t0, 2)
                res["progress"] = progress
                res["sampled"] = len(sampled)
                out.append(res)
    except BaseException as e:  # noqa: BLE001
        if isinstance(e, (KeyboardInterrupt, SystemExit)):
            raise
        out.append({"session_exception": type(e).__name__, "message": str(e)[:300]})
    return out


if sys.argv[1] == "--stdio":
    mode, timeout, calls = sys.argv[2], float(sys.argv[3]), json.loads(sys.argv[4])
    cmd = sys.argv[5:]
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=dict(os.environ))
    print(json.dumps(asyncio.run(run(params, mode, timeout, calls)), sort_keys=True))
else:
    url, mode, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
    print(json.dumps(asyncio.run(run(url, mode, timeout, sys.argv[4:])), sort_keys=True))

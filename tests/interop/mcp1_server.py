"""An MCP server built with the official Python SDK (mcp < 2, FastMCP), for rpctap's interop tests.

usage: mcp1_server.py MODE PORT   (MODE: sse | json | stateless | stateless-json | legacy | stdio)

`legacy` is the 2024-11-05 HTTP+SSE transport (`GET /sse`, messages POSTed to the announced
`/messages/?session_id=…`).
"""
import sys

from mcp.server.fastmcp import Context, FastMCP

mode = sys.argv[1]
port = int(sys.argv[2]) if len(sys.argv) > 2 and sys.argv[2].isdigit() else 0
server = FastMCP(
    "interop-py",
    host="127.0.0.1",
    port=port,
    json_response=mode in ("json", "stateless-json"),
    stateless_http=mode.startswith("stateless"),
    log_level="WARNING",
)


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two numbers."""
    return str(a + b)


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Reports progress and logs before answering."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps)
        await ctx.info(f"step {i + 1}")
    return f"done after {steps} steps"


@server.tool()
def fail() -> str:
    """Always raises: the SDK answers with isError: true."""
    raise ValueError("this tool always fails")


@server.tool()
async def ask(question: str, ctx: Context, timeout: float = 0) -> str:
    """Asks the client's model (a sampling round trip, server to client); with `timeout`, says
    so when no answer came in that many seconds, or what the SDK raised."""
    import asyncio

    from mcp.types import SamplingMessage, TextContent

    asked = ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=10,
    )
    if not timeout:
        r = await asked
        return f"the model said: {r.content.text}"
    try:
        r = await asyncio.wait_for(asked, timeout)
    except asyncio.TimeoutError:
        return f"no answer from the model in {timeout}s"
    except Exception as e:  # noqa: BLE001 — what the server saw is the result
        return f"the model failed: {type(e).__name__}: {e}"
    return f"the model said: {r.content.text}"


@server.resource("demo://readme")
def readme() -> str:
    return "interop readme"


@server.prompt()
def greet(name: str) -> str:
    return f"Say hello to {name}."


if mode == "stdio":
    if "banner" in sys.argv[2:]:
        # The stdio transport's most common bug: a stray print to stdout.
        print("interop server starting (a banner on stdout)", flush=True)
    server.run(transport="stdio")
else:
    server.run(transport="sse" if mode == "legacy" else "streamable-http")

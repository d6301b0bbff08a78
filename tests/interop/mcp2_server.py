"""An MCP server built with the official Python SDK 2.x (MCPServer), for rpctap's interop tests.

usage: mcp2_server.py MODE PORT   (MODE: sse | json | stateless | stateless-json | stdio)
"""
import sys

from mcp.server.mcpserver import Context, MCPServer

mode = sys.argv[1]
port = int(sys.argv[2]) if len(sys.argv) > 2 else 0
server = MCPServer("interop-py2")


@server.tool()
def add(a: int, b: int) -> str:
    """Adds two numbers."""
    return str(a + b)


@server.tool()
def echo(text: str, times: int = 1) -> str:
    """Answers the text, `times` times over (a large argument, a large result)."""
    return text * times


@server.tool()
async def wait(seconds: float) -> str:
    """Sleeps, then answers (a call for a client to cancel)."""
    import anyio

    await anyio.sleep(seconds)
    return f"waited {seconds} s"


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
async def ask(question: str, ctx: Context, timeout: float = 2) -> str:
    """Asks the client's model (`sampling/createMessage`, server to client); says so when no
    answer came in `timeout` seconds, or what the SDK raised."""
    import asyncio

    from mcp.types import SamplingMessage, TextContent

    try:
        r = await asyncio.wait_for(
            ctx.session.create_message(
                messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))],
                max_tokens=10,
            ),
            timeout,
        )
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
    server.run(transport="stdio")
    sys.exit(0)

server.run(
    transport="streamable-http",
    host="127.0.0.1",
    port=port,
    json_response=mode in ("json", "stateless-json"),
    stateless_http=mode.startswith("stateless"),
)

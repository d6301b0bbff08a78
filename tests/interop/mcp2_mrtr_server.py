"""An MCP server (Python SDK 2.x) whose tools need the client's input, for rpctap's multi
round-trip tests: `delete` asks for a confirmation through a resolver (`Resolve(...)` returning
`Elicit(...)`), `summarize` samples the client's LLM (`Sample`), `chatty` logs.

On 2026-07-28 the SDK answers such a call `input_required` and the client retries it with its
answers; on earlier versions it sends `elicitation/create` / `sampling/createMessage` mid-call.

usage: mcp2_mrtr_server.py MODE PORT   (MODE: sse | json | stateless | stateless-json)
"""
import sys
from typing import Annotated

from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve, Sample
from mcp_types import CreateMessageResult, SamplingMessage, TextContent
from pydantic import BaseModel

mode = sys.argv[1]
port = int(sys.argv[2])
server = MCPServer("interop-mrtr")


class Confirm(BaseModel):
    confirm: bool


def ask_confirm(path: str):
    return Elicit(f"Delete {path}?", Confirm)


@server.tool()
def delete(path: str, ok: Annotated[Confirm, Resolve(ask_confirm)]) -> str:
    """Deletes a file after the user confirms."""
    return f"deleted {path}" if ok.confirm else f"kept {path}"


def ask_model(text: str):
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=f"Summarize: {text}"))],
        max_tokens=50,
    )


@server.tool()
def summarize(text: str, summary: Annotated[CreateMessageResult, Resolve(ask_model)]) -> str:
    """Summarizes a text with the client's model."""
    return f"summary: {summary.content.text}"


@server.tool()
async def chatty(ctx: Context) -> str:
    """Logs a line before answering."""
    await ctx.info("chatty was called")
    return "ok"


server.run(
    transport="streamable-http",
    host="127.0.0.1",
    port=port,
    json_response=mode in ("json", "stateless-json"),
    stateless_http=mode.startswith("stateless"),
)

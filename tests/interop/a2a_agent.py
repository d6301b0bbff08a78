"""An A2A agent built with the official Python SDK (a2a-sdk 1.x), for rpctap's A2A tests.

usage: a2a_agent.py [--no-streaming] [--v0.3]

--v0.3: the agent speaks A2A 0.3 too (the SDK's `enable_v0_3_compat`) and its card offers only a
0.3 interface, so that the SDK's client speaks 0.3 to it (`message/send`, `kind`-tagged results,
no `A2A-Version`).

Listens on a free loopback port and says `a2a agent on http://127.0.0.1:PORT` on stderr. The JSON-RPC
endpoint is `/a2a`, the agent card `/.well-known/agent-card.json`. What the agent does is picked
by the first word of the message's text:
  echo WORDS   a Message back (no task)
  stream       a task: working, two artifact chunks, completed
  slow         a task that completes after half a second (for a client that polls)
  wait         a task that works until it is cancelled
  ask          a task that asks for input; the next message on it completes it
  fail         a task that fails
  add A B      a Message with A + B, asked of the MCP server at $MCP_URL (its `add` tool, over
               Streamable HTTP): the agent calls a tool over MCP inside its A2A call, passing on
               the `traceparent` it was called with, as an instrumented agent does
"""
import asyncio
import os
import socket
import sys

import httpx

import uvicorn
from starlette.applications import Starlette

from a2a.helpers.proto_helpers import new_task_from_user_message, new_text_message, new_text_part
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.events import EventQueue
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.server.routes import create_agent_card_routes, create_jsonrpc_routes
from a2a.server.tasks import InMemoryTaskStore, TaskUpdater
from a2a.types import AgentCapabilities, AgentCard, AgentInterface, AgentSkill, TaskState

streaming = "--no-streaming" not in sys.argv
v03 = "--v0.3" in sys.argv


class Executor(AgentExecutor):
    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        text = context.get_user_input().strip()
        word = text.split(" ", 1)[0]
        if word == "echo":
            await event_queue.enqueue_event(
                new_text_message(text[5:], context_id=context.context_id)
            )
            return
        if word == "add":
            a, b = (int(x) for x in text.split()[1:3])
            headers = {
                "content-type": "application/json",
                "accept": "application/json, text/event-stream",
                "mcp-protocol-version": "2025-06-18",
            }
            parent = context.call_context.state.get("headers", {}).get("traceparent")
            if parent:
                headers["traceparent"] = parent
            call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                    "params": {"name": "add", "arguments": {"a": a, "b": b}}}
            async with httpx.AsyncClient() as http:
                r = await http.post(os.environ["MCP_URL"], json=call, headers=headers)
            total = r.json()["result"]["content"][0]["text"]
            await event_queue.enqueue_event(
                new_text_message(total, context_id=context.context_id)
            )
            return
        task = context.current_task
        if task is None:
            task = new_task_from_user_message(context.message)
            await event_queue.enqueue_event(task)
        up = TaskUpdater(event_queue, task.id, task.context_id)
        if task.status.state == TaskState.TASK_STATE_INPUT_REQUIRED:
            await up.complete(up.new_agent_message([new_text_part(f"thanks for: {text}")]))
            return
        await up.start_work()
        if word == "stream":
            for i, chunk in enumerate(["first half, ", "second half"]):
                await asyncio.sleep(0.05)
                await up.add_artifact(
                    [new_text_part(chunk)],
                    artifact_id="story",
                    name="story",
                    append=i > 0,
                    last_chunk=i == 1,
                )
            await up.complete()
        elif word == "slow":
            await asyncio.sleep(0.5)
            await up.add_artifact([new_text_part("slow result")], name="result")
            await up.complete()
        elif word == "wait":
            await asyncio.sleep(30)
            await up.complete()
        elif word == "ask":
            await up.requires_input(up.new_agent_message([new_text_part("which colour?")]))
        elif word == "fail":
            await up.failed(up.new_agent_message([new_text_part("this task always fails")]))
        else:
            await up.reject(up.new_agent_message([new_text_part(f"unknown: {word}")]))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task = context.current_task
        if task is not None:
            await TaskUpdater(event_queue, task.id, task.context_id).cancel()


def main() -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    # Listening before the banner says so: a client may connect the moment it reads it.
    sock.listen(128)
    port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/a2a"
    skill = AgentSkill(
        id="stories",
        name="Stories",
        description="Echoes, streams, waits and asks, for rpctap's tests",
        tags=["test"],
        examples=["echo hi", "stream"],
    )
    card = AgentCard(
        name="rpctap test agent",
        description="An A2A agent on the official Python SDK",
        supported_interfaces=[
            AgentInterface(
                url=url, protocol_binding="JSONRPC", protocol_version="0.3" if v03 else "1.0"
            )
        ],
        version="1.0.0",
        capabilities=AgentCapabilities(streaming=streaming),
        default_input_modes=["text/plain"],
        default_output_modes=["text/plain"],
        skills=[skill],
    )
    handler = DefaultRequestHandler(
        agent_executor=Executor(), task_store=InMemoryTaskStore(), agent_card=card
    )
    routes = create_agent_card_routes(card) + create_jsonrpc_routes(
        handler, "/a2a", enable_v0_3_compat=v03
    )
    app = Starlette(routes=routes)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    print(f"a2a agent on http://127.0.0.1:{port}", file=sys.stderr, flush=True)
    asyncio.run(server.serve(sockets=[sock]))


if __name__ == "__main__":
    main()

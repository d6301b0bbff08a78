"""An A2A client built with the official Python SDK (a2a-sdk 1.x), for rpctap's A2A tests.

usage: a2a_client.py BASE_URL [refused]

Fetches the agent card from BASE_URL (so a proxy in between sees it), talks JSON-RPC to
BASE_URL/a2a (the card names the agent's own address: a client pointed at a proxy keeps to the
proxy), and runs each scenario of tests/interop/a2a_agent.py. Prints one JSON object: what each
scenario saw, with the ids the agent made up left out, so a direct run and a proxied one compare
equal. With `refused`: sends two messages and says what the SDK raised for each (a proxy in
between refuses the second).
"""
import asyncio
import json
import sys

import httpx

from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.helpers.proto_helpers import new_text_message
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Role,
    SendMessageConfiguration,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)

TERMINAL = {
    TaskState.TASK_STATE_COMPLETED,
    TaskState.TASK_STATE_FAILED,
    TaskState.TASK_STATE_CANCELED,
    TaskState.TASK_STATE_REJECTED,
}


def state(s) -> str:
    return TaskState.Name(s).removeprefix("TASK_STATE_").lower()


def texts(parts) -> str:
    return "".join(p.text for p in parts)


async def main(base: str) -> None:
    async with httpx.AsyncClient(timeout=20) as http:
        card = await A2ACardResolver(http, base).get_agent_card()
        out = {"card": {"name": card.name, "streaming": card.capabilities.streaming}}
        card.supported_interfaces[0].url = base + "/a2a"
        streamed = ClientFactory(ClientConfig(httpx_client=http, streaming=True)).create(card)
        plain = ClientFactory(ClientConfig(httpx_client=http, streaming=False)).create(card)

        def request(text, task=None, now=False):
            m = new_text_message(text, role=Role.ROLE_USER)
            if task is not None:
                m.task_id, m.context_id = task.id, task.context_id
            conf = SendMessageConfiguration(return_immediately=now)
            return SendMessageRequest(message=m, configuration=conf)

        async def last(client, req):
            seen = []
            final = None
            async for r in client.send_message(req):
                kind = r.WhichOneof("payload")
                seen.append(kind)
                if kind == "message":
                    final = ("message", texts(r.message.parts))
                elif kind == "task":
                    final = ("task", r.task)
                elif kind == "status_update":
                    seen[-1] = f"status:{state(r.status_update.status.state)}"
                elif kind == "artifact_update":
                    seen[-1] = f"artifact:{texts(r.artifact_update.artifact.parts)}"
            return seen, final

        if len(sys.argv) > 2 and sys.argv[2] == "refused":
            for n in ["first", "second"]:
                try:
                    _, (kind, _) = await last(plain, request(f"echo {n}"))
                    out[n] = kind
                except Exception as e:  # what the SDK makes of the error is the point
                    out[n] = f"{type(e).__name__}: {e}"
            print(json.dumps(out, sort_keys=True))
            return

        # A blocking message answered with a message.
        _, (kind, text) = await last(plain, request("echo hello agent"))
        out["echo"] = {"kind": kind, "text": text}

        # A streamed message: status and artifact events, then completed.
        if card.capabilities.streaming:
            seen, _ = await last(streamed, request("stream"))
            out["stream"] = seen

        # A task sent without waiting, polled to completion.
        _, (_, task) = await last(plain, request("slow", now=True))
        polls = 0
        while task.status.state not in TERMINAL and polls < 100:
            await asyncio.sleep(0.1)
            task = await plain.get_task(GetTaskRequest(id=task.id))
            polls += 1
        out["polled"] = {
            "state": state(task.status.state),
            "artifacts": [texts(a.parts) for a in task.artifacts],
            "polled": polls > 0,
        }

        # A task sent without waiting, then subscribed to until it ends (it works half a second).
        if card.capabilities.streaming:
            _, (_, task) = await last(plain, request("slow", now=True))
            seen = []
            async for r in streamed.subscribe(SubscribeToTaskRequest(id=task.id)):
                kind = r.WhichOneof("payload")
                if kind == "status_update":
                    kind = f"status:{state(r.status_update.status.state)}"
                elif kind == "artifact_update":
                    kind = f"artifact:{texts(r.artifact_update.artifact.parts)}"
                seen.append(kind)
            out["subscribed"] = seen

        # A task cancelled while it works.
        _, (_, task) = await last(plain, request("wait", now=True))
        task = await plain.cancel_task(CancelTaskRequest(id=task.id))
        out["cancelled"] = state(task.status.state)

        # A task that asks for input, resumed on the same task.
        _, (_, task) = await last(plain, request("ask"))
        asked = state(task.status.state)
        _, (_, task) = await last(plain, request("blue", task=task))
        out["resumed"] = {
            "asked": asked,
            "state": state(task.status.state),
            "said": texts(task.status.message.parts),
        }

        # A task that fails.
        _, (_, task) = await last(plain, request("fail"))
        out["failed"] = state(task.status.state)
        print(json.dumps(out, sort_keys=True))


asyncio.run(main(sys.argv[1]))

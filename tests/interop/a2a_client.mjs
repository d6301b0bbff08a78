// An A2A client built with the official JavaScript SDK (@a2a-js/sdk 1.x), for rpctap's A2A
// tests: the scenarios of tests/interop/a2a_client.py, printed in the same JSON shape, so one
// agent answers both SDKs' clients alike.
//
// usage: node a2a_client.mjs BASE_URL
//
// Fetches the agent card from BASE_URL (through a proxy in between) and talks JSON-RPC to
// BASE_URL/a2a (the card names the agent's own address: a client pointed at a proxy keeps to it).
import { randomUUID } from "node:crypto";
import { Role, TaskState } from "@a2a-js/sdk";
import { ClientFactory, ClientFactoryOptions, JsonRpcTransportFactory } from "@a2a-js/sdk/client";

const base = process.argv[2];
const TERMINAL = new Set([
  TaskState.TASK_STATE_COMPLETED,
  TaskState.TASK_STATE_FAILED,
  TaskState.TASK_STATE_CANCELED,
  TaskState.TASK_STATE_REJECTED,
]);
const stateName = (s) => TaskState[s].replace(/^TASK_STATE_/, "").toLowerCase();
const texts = (parts) => parts.map((p) => (p.content?.$case === "text" ? p.content.value : "")).join("");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const card = await (await fetch(`${base}/.well-known/agent-card.json`)).json();
const out = { card: { name: card.name, streaming: card.capabilities.streaming } };
card.supportedInterfaces[0].url = `${base}/a2a`;
// A card that offers only A2A 0.3 is spoken to in 0.3 (the SDK's `legacyCompat`).
const transports = [new JsonRpcTransportFactory({ legacyCompat: { enabled: true } })];
const client = await new ClientFactory(
  ClientFactoryOptions.createFrom(ClientFactoryOptions.default, { transports }),
).createFromAgentCard(card);

function request(words, task, now = false) {
  const message = {
    messageId: randomUUID(),
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: words }, metadata: undefined, filename: "", mediaType: "" }],
    contextId: task?.contextId ?? "",
    taskId: task?.id ?? "",
    extensions: [],
    metadata: undefined,
    referenceTaskIds: [],
  };
  return {
    tenant: "",
    message,
    configuration: { acceptedOutputModes: [], taskPushNotificationConfig: undefined, historyLength: undefined, returnImmediately: now },
    metadata: undefined,
  };
}

// A sent message's result: [kind, the message's text or the task].
async function send(words, task, now) {
  const r = await client.sendMessage(request(words, task, now));
  if (r.payload?.$case === "message") return ["message", texts(r.payload.value.parts)];
  if (r.payload?.$case === "task") return ["task", r.payload.value];
  if ("messageId" in r) return ["message", texts(r.parts)];
  return ["task", r];
}

const [kind, text] = await send("echo hello agent");
out.echo = { kind, text };

if (card.capabilities.streaming) {
  const seen = [];
  for await (const ev of client.sendMessageStream(request("stream"))) {
    const p = ev.payload;
    if (p.$case === "task") seen.push("task");
    else if (p.$case === "message") seen.push("message");
    else if (p.$case === "statusUpdate") seen.push(`status:${stateName(p.value.status.state)}`);
    else if (p.$case === "artifactUpdate") seen.push(`artifact:${texts(p.value.artifact.parts)}`);
  }
  out.stream = seen;
}

let [, task] = await send("slow", undefined, true);
let polls = 0;
while (!TERMINAL.has(task.status.state) && polls < 100) {
  await sleep(100);
  task = await client.getTask({ tenant: "", id: task.id, historyLength: undefined });
  polls++;
}
out.polled = { state: stateName(task.status.state), artifacts: task.artifacts.map((a) => texts(a.parts)), polled: polls > 0 };

// A task sent without waiting, then subscribed to until it ends (it works half a second).
if (card.capabilities.streaming) {
  [, task] = await send("slow", undefined, true);
  const seen = [];
  for await (const ev of client.resubscribeTask({ tenant: "", id: task.id })) {
    const p = ev.payload;
    if (p.$case === "task") seen.push("task");
    else if (p.$case === "message") seen.push("message");
    else if (p.$case === "statusUpdate") seen.push(`status:${stateName(p.value.status.state)}`);
    else if (p.$case === "artifactUpdate") seen.push(`artifact:${texts(p.value.artifact.parts)}`);
  }
  out.subscribed = seen;
}

[, task] = await send("wait", undefined, true);
task = await client.cancelTask({ tenant: "", id: task.id, metadata: undefined });
out.cancelled = stateName(task.status.state);

[, task] = await send("ask");
const asked = stateName(task.status.state);
[, task] = await send("blue", task);
out.resumed = { asked, state: stateName(task.status.state), said: texts(task.status.message.parts) };

[, task] = await send("fail");
out.failed = stateName(task.status.state);

const sorted = (v) =>
  Array.isArray(v) ? v.map(sorted) : v && typeof v === "object" ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, sorted(v[k])])) : v;
console.log(JSON.stringify(sorted(out)));

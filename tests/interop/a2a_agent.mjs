// An A2A agent built with the official JavaScript SDK (@a2a-js/sdk 1.x) on Express, for
// rpctap's A2A tests: the same skills as tests/interop/a2a_agent.py, so the same client
// scenarios run against either.
//
// usage: node a2a_agent.mjs [--v0.3]
//
// --v0.3: the agent speaks A2A 0.3 too (the SDK's `legacyCompat`) and its card offers only a 0.3
// interface, so that the SDK's clients speak 0.3 to it.
//
// Listens on a free loopback port and says `a2a agent on http://127.0.0.1:PORT` on stderr. The
// JSON-RPC endpoint is `/a2a`, the agent card `/.well-known/agent-card.json`. The first word of
// the message picks what the agent does: echo WORDS, stream, slow, wait, ask, fail.
import express from "express";
import { randomUUID } from "node:crypto";
import { TaskState, Role } from "@a2a-js/sdk";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, UserBuilder } from "@a2a-js/sdk/server/express";

const text = (value) => ({ content: { $case: "text", value }, metadata: undefined, filename: "", mediaType: "text/plain" });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function agentMessage(words, taskId, contextId) {
  return {
    role: Role.ROLE_AGENT,
    messageId: randomUUID(),
    parts: [text(words)],
    taskId,
    contextId,
    extensions: [],
    metadata: {},
    referenceTaskIds: [],
  };
}

class Executor {
  cancelled = new Set();

  cancelTask = async (taskId, bus) => {
    this.cancelled.add(taskId);
  };

  async execute(ctx, bus) {
    const said = ctx.userMessage.parts
      .map((p) => (p.content?.$case === "text" ? p.content.value : ""))
      .join("")
      .trim();
    const word = said.split(" ")[0];
    const { taskId, contextId } = ctx;
    const status = (state, message) =>
      bus.publish(
        AgentEvent.statusUpdate({
          taskId,
          contextId,
          status: { state, timestamp: new Date().toISOString(), message },
          metadata: undefined,
        }),
      );
    if (word === "echo" && !ctx.task) {
      bus.publish(AgentEvent.message(agentMessage(said.slice(5), undefined, contextId)));
      return;
    }
    if (ctx.task) {
      // A task waiting for input, resumed: done.
      bus.publish(AgentEvent.task(ctx.task));
      status(TaskState.TASK_STATE_COMPLETED, agentMessage(`thanks for: ${said}`, taskId, contextId));
      return;
    }
    bus.publish(
      AgentEvent.task({
        id: taskId,
        contextId,
        status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: new Date().toISOString(), message: undefined },
        artifacts: [],
        history: [ctx.userMessage],
        metadata: undefined,
      }),
    );
    status(TaskState.TASK_STATE_WORKING, undefined);
    const artifact = (artifactId, name, value, append, lastChunk) =>
      bus.publish(
        AgentEvent.artifactUpdate({
          taskId,
          contextId,
          artifact: { artifactId, name, description: "", parts: [text(value)], metadata: undefined, extensions: [] },
          append,
          lastChunk,
          metadata: undefined,
        }),
      );
    if (word === "stream") {
      await sleep(50);
      artifact("story", "story", "first half, ", false, false);
      await sleep(50);
      artifact("story", "story", "second half", true, true);
      status(TaskState.TASK_STATE_COMPLETED, undefined);
    } else if (word === "slow") {
      await sleep(500);
      artifact(randomUUID(), "result", "slow result", false, true);
      status(TaskState.TASK_STATE_COMPLETED, undefined);
    } else if (word === "wait") {
      for (let i = 0; i < 300 && !this.cancelled.has(taskId); i++) await sleep(100);
      status(this.cancelled.has(taskId) ? TaskState.TASK_STATE_CANCELED : TaskState.TASK_STATE_COMPLETED, undefined);
    } else if (word === "ask") {
      status(TaskState.TASK_STATE_INPUT_REQUIRED, agentMessage("which colour?", taskId, contextId));
    } else if (word === "fail") {
      status(TaskState.TASK_STATE_FAILED, agentMessage("this task always fails", taskId, contextId));
    } else {
      status(TaskState.TASK_STATE_REJECTED, agentMessage(`unknown: ${word}`, taskId, contextId));
    }
  }
}

const v03 = process.argv.includes("--v0.3");
const app = express();
const server = app.listen(0, "127.0.0.1", () => {
  const { port } = server.address();
  const card = {
    name: "rpctap test agent",
    description: "An A2A agent on the official JavaScript SDK",
    supportedInterfaces: [
      { url: `http://127.0.0.1:${port}/a2a`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: v03 ? "0.3" : "1.0" },
    ],
    provider: undefined,
    version: "1.0.0",
    documentationUrl: undefined,
    capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
    securitySchemes: {},
    securityRequirements: [],
    defaultInputModes: ["text/plain"],
    defaultOutputModes: ["text/plain"],
    skills: [
      {
        id: "stories",
        name: "Stories",
        description: "Echoes, streams, waits and asks, for rpctap's tests",
        tags: ["test"],
        examples: ["echo hi", "stream"],
        inputModes: [],
        outputModes: [],
        securityRequirements: [],
      },
    ],
    signatures: [],
    iconUrl: undefined,
  };
  const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new Executor());
  const legacyCompat = { enabled: v03 };
  app.use("/.well-known/agent-card.json", agentCardHandler({ agentCardProvider: async () => card, legacyCompat }));
  app.use("/a2a", jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat }));
  process.stderr.write(`a2a agent on http://127.0.0.1:${port}\n`);
});

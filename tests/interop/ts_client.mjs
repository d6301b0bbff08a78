// The official TypeScript SDK client against server-everything; prints what it saw as JSON.
// usage: node ts_client.mjs URL streamable|sse [nosampling]
//        node ts_client.mjs '["COMMAND","ARG",…]' stdio   (the SDK spawns the server)
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { CreateMessageRequestSchema } from "@modelcontextprotocol/sdk/types.js";

const [url, kind, flag] = process.argv.slice(2);
const client = new Client({ name: "rpctap-interop", version: "1.0.0" }, { capabilities: { sampling: {} } });
client.setRequestHandler(CreateMessageRequestSchema, async () => ({
  role: "assistant",
  content: { type: "text", text: "sampled by the test client" },
  model: "test-model",
  stopReason: "endTurn",
}));
function transportFor() {
  if (kind === "stdio") {
    const [command, ...args] = JSON.parse(url);
    return new StdioClientTransport({ command, args, stderr: "inherit" });
  }
  return kind === "sse" ? new SSEClientTransport(new URL(url)) : new StreamableHTTPClientTransport(new URL(url));
}
const transport = transportFor();
await client.connect(transport);
const out = {};
const progress = [];
out.tools = (await client.listTools()).tools.map((t) => t.name).sort();
out.echo = await client.callTool({ name: "echo", arguments: { message: "hi" } });
out.sum = await client.callTool({ name: "get-sum", arguments: { a: 2, b: 3 } });
if (out.tools.includes("get-structured-content")) {
  // A tool with an outputSchema: the SDK validates structuredContent, and so does rpctap.
  out.structured = await client.callTool({ name: "get-structured-content", arguments: { location: "Chicago" } });
}
out.long = await client.callTool(
  { name: "trigger-long-running-operation", arguments: { duration: 0.3, steps: 3 } },
  undefined,
  { onprogress: (p) => progress.push([p.progress, p.total]) },
);
if (flag !== "nosampling" && out.tools.includes("trigger-sampling-request")) {
  out.sampling = await client.callTool({ name: "trigger-sampling-request", arguments: { prompt: "hello", maxTokens: 5 } });
}
out.prompts = (await client.listPrompts()).prompts.map((p) => p.name).sort();
out.resourceCount = (await client.listResources()).resources.length;
await client.ping();
out.progress = progress;
if (kind === "streamable") await transport.terminateSession();
await client.close();
console.log(JSON.stringify(out));

// The official TypeScript SDK client spawning a stdio server (in the terminal's session, as the
// SDK does: no new session) and calling tools one after another; prints, per call, its result
// or the error it raised, and how long it took, as JSON.
// usage: node ts_stdio_calls.mjs TIMEOUT_MS CALLS_JSON COMMAND [ARGS…]
//   CALLS_JSON: a JSON list of "TOOL:JSON_ARGS" strings.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const [timeout, calls, command, ...args] = process.argv.slice(2);
const client = new Client({ name: "rpctap-intercept", version: "1.0.0" });
await client.connect(new StdioClientTransport({ command, args, env: process.env, stderr: "inherit" }));
const out = [];
for (const call of JSON.parse(calls)) {
  const i = call.indexOf(":");
  const [name, a] = [call.slice(0, i), JSON.parse(call.slice(i + 1))];
  const t0 = Date.now();
  try {
    const r = await client.callTool({ name, arguments: a }, undefined, { timeout: Number(timeout) });
    out.push({ tool: name, text: r.content?.[0]?.text ?? "", elapsed: (Date.now() - t0) / 1000 });
  } catch (e) {
    out.push({ tool: name, error: String(e.message ?? e), elapsed: (Date.now() - t0) / 1000 });
  }
}
console.log(JSON.stringify(out));
await client.close();

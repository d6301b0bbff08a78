// The reference token counts: js-tiktoken (a port of OpenAI's tiktoken with its own copy of the
// encodings' ranks) counts each text of a JSON array read from stdin, read as plain text (a
// special token's spelling is text), under o200k_base and cl100k_base.
// usage: node count_tokens.mjs < texts.json  →  {"o200k_base": [n…], "cl100k_base": [n…]}
import { getEncoding } from "js-tiktoken";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const texts = JSON.parse(input);
const out = {};
for (const name of ["o200k_base", "cl100k_base"]) {
  const enc = getEncoding(name);
  out[name] = texts.map((t) => enc.encode(t, [], []).length);
}
process.stdout.write(JSON.stringify(out) + "\n");

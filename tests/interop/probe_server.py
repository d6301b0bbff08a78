"""A small MCP server written out by hand (the standard library only), for `rpctap probe` and
`rpctap test`: every answer is under the test's control, so a case can be broken on purpose.

usage: probe_server.py http PORT [--break WHAT] | probe_server.py stdio [--break WHAT]

WHAT (the server "changed" to break one case each):
  crash   the tool `add` fails (a tool error) whatever its input
  code    an argument of the wrong type is refused with -32603 instead of -32602
  ignore  `add` takes a missing argument as 0 instead of refusing it
  schema  `lookup`'s structuredContent breaks its declared output schema

Planted for `--fuzz`: `lookup` with a negative `count` kills the process (a real crash), and
answers the name "null" with `"jsonrpc": "1.0"` (a protocol violation rpctap flags).
"""
import json
import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

args = sys.argv[1:]
mode = args[0]
broken = args[args.index("--break") + 1] if "--break" in args else ""
VERSIONS = ["2025-03-26", "2025-06-18", "2025-11-25"]

TOOLS = [
    {
        "name": "add",
        "description": "Adds two integers.",
        "annotations": {"readOnlyHint": True},
        "inputSchema": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"sum": {"type": "integer"}},
            "required": ["sum"],
        },
    },
    {
        "name": "lookup",
        "description": "Looks a name up, count times.",
        "annotations": {"readOnlyHint": True},
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": {"type": "string", "minLength": 1},
                "count": {"type": "integer"},
            },
            "required": ["name", "count"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"found": {"type": "boolean"}, "name": {"type": "string"}},
            "required": ["found", "name"],
        },
    },
    {
        "name": "forget",
        "description": "Forgets a name (changes data: no readOnlyHint).",
        "inputSchema": {"type": "object", "properties": {"name": {"type": "string"}}},
    },
]
TYPES = {"integer": int, "string": str}


def error(id_, code, message):
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def result(id_, value):
    return {"jsonrpc": "2.0", "id": id_, "result": value}


def text(t, structured=None, is_error=False):
    r = {"content": [{"type": "text", "text": t}]}
    if structured is not None:
        r["structuredContent"] = structured
    if is_error:
        r["isError"] = True
    return r


def call_tool(id_, params):
    name = params.get("name")
    args = params.get("arguments") or {}
    tool = next((t for t in TOOLS if t["name"] == name), None)
    if tool is None:
        return error(id_, -32602, f"Unknown tool: {name}")
    schema = tool["inputSchema"]
    for prop, s in schema.get("properties", {}).items():
        if prop in args and not (
            isinstance(args[prop], TYPES[s["type"]]) and not isinstance(args[prop], bool)
        ):
            return error(id_, -32603 if broken == "code" else -32602, f"{prop} must be {s['type']}")
        if prop in args and len(str(args[prop])) < s.get("minLength", 0):
            return error(id_, -32602, f"{prop} is too short")
    for prop in schema.get("required", []):
        if prop not in args and not (broken == "ignore" and name == "add"):
            return error(id_, -32602, f"missing argument {prop}")
    if name == "add":
        if broken == "crash":
            return result(id_, text("add crashed: division by zero", is_error=True))
        s = args.get("a", 0) + args.get("b", 0)
        return result(id_, text(str(s), {"sum": s}))
    if name == "lookup":
        if args["count"] < 0:
            os._exit(3)  # the planted crash
        found = "yes" if broken == "schema" else True
        r = result(id_, text(f"{args['name']} x{args['count']}", {"found": found, "name": args["name"]}))
        if args["name"] == "null":
            r["jsonrpc"] = "1.0"  # the planted protocol violation
        return r
    return result(id_, text("forgotten"))


def handle(msg):
    """The reply to one message, or None."""
    if not isinstance(msg, dict):
        return error(None, -32600, "Invalid Request")
    id_ = msg.get("id")
    method = msg.get("method")
    if not isinstance(method, str):
        return error(id_, -32600, "Invalid Request: method must be a string")
    if "id" not in msg:
        return None
    params = msg.get("params") or {}
    if method == "initialize":
        asked = params.get("protocolVersion")
        return result(
            id_,
            {
                "protocolVersion": asked if asked in VERSIONS else VERSIONS[-1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "probe-server", "version": "1.0"},
            },
        )
    if method == "ping":
        return result(id_, {})
    if method == "tools/list":
        return result(id_, {"tools": TOOLS})
    if method == "tools/call":
        return call_tool(id_, params)
    return error(id_, -32601, f"Method not found: {method}")


def answer(body):
    """The reply body to a POST body (None: no reply)."""
    try:
        msg = json.loads(body)
    except ValueError:
        return error(None, -32700, "Parse error")
    if isinstance(msg, list):
        replies = [r for r in (handle(m) for m in msg) if r is not None]
        return replies or None
    return handle(msg)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        reply = answer(body)
        if reply is None:
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = json.dumps(reply).encode()
        self.send_response(400 if isinstance(reply, dict) and reply.get("id", 0) is None and reply.get("error", {}).get("code") == -32700 else 200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "probe-session")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_DELETE(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()


if mode == "stdio":
    for line in sys.stdin:
        if not line.strip():
            continue
        reply = answer(line)
        if reply is not None:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
else:
    ThreadingHTTPServer(("127.0.0.1", int(args[1])), Handler).serve_forever()

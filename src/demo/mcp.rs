//! `/mcp`: a small MCP server over Streamable HTTP (revision 2025-06-18; 2025-03-26 batches and
//! 2024-11-05 clients accepted).
//!
//! `initialize` opens a session (`Mcp-Session-Id`); `ping`, `tools/list`, `tools/call` (tools
//! `echo`, `add`, `slow` — progress notifications before its result — and `fail` — a result with
//! `isError: true`), `resources/list`, `resources/read`, `prompts/list`, `prompts/get`. Replies
//! are `text/event-stream` when the client accepts it, else `application/json`. `GET` opens the
//! session's server stream, `DELETE` ends the session.

use super::{json_response, plain, ChannelBody, DemoBody};
use bytes::Bytes;
use dashmap::DashMap;
use http::{header, HeaderMap, Method, Response, StatusCode};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

pub const PROTOCOL_VERSIONS: [&str; 4] = ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"];
pub const DEFAULT_VERSION: &str = "2025-06-18";

struct Session {
    /// Flipped to true when the session ends, closing its GET stream.
    closed: watch::Sender<bool>,
}

/// The MCP demo's state: its sessions.
#[derive(Default)]
pub struct McpState {
    /// The `add` tool answers one more than the sum (the demo's "changed server").
    pub alter_add: bool,
    sessions: DashMap<String, Session>,
    next_event: AtomicU64,
}

fn new_session_id() -> String {
    use std::hash::{BuildHasher, Hasher};
    // RandomState is seeded randomly per process and per instance: enough for a demo's ids.
    let mut out = String::new();
    for _ in 0..2 {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or(0),
        );
        out.push_str(&format!("{:016x}", h.finish()));
    }
    out
}

fn rpc_error(id: Value, code: i64, message: &str) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "error": { "code": code, "message": message } })
}

fn error_response(status: StatusCode, code: i64, message: &str) -> Response<DemoBody> {
    let mut r = json_response(&rpc_error(Value::Null, code, message));
    *r.status_mut() = status;
    r
}

impl McpState {
    pub fn new(alter_add: bool) -> Self {
        McpState {
            alter_add,
            ..Default::default()
        }
    }

    fn sse_event(&self, msg: &Value) -> Bytes {
        let n = self.next_event.fetch_add(1, Ordering::Relaxed);
        Bytes::from(format!("event: message\nid: {n}\ndata: {msg}\n\n"))
    }

    pub async fn handle(
        self: &Arc<Self>,
        method: &Method,
        headers: &HeaderMap,
        body: Bytes,
    ) -> Response<DemoBody> {
        let session = headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        match *method {
            Method::POST => self.post(headers, session, body).await,
            Method::GET => self.get(headers, session),
            Method::DELETE => match session {
                Some(s) => match self.sessions.remove(&s) {
                    Some((_, sess)) => {
                        let _ = sess.closed.send(true);
                        plain(StatusCode::OK, "")
                    }
                    None => error_response(StatusCode::NOT_FOUND, -32001, "Session not found"),
                },
                None => error_response(
                    StatusCode::BAD_REQUEST,
                    -32000,
                    "Bad Request: Mcp-Session-Id header is required",
                ),
            },
            _ => {
                let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "method not allowed\n");
                r.headers_mut().insert(
                    header::ALLOW,
                    http::HeaderValue::from_static("GET, POST, DELETE"),
                );
                r
            }
        }
    }

    fn get(self: &Arc<Self>, headers: &HeaderMap, session: Option<String>) -> Response<DemoBody> {
        if !crate::media::accepts_event_stream(headers) {
            return plain(
                StatusCode::NOT_ACCEPTABLE,
                "GET /mcp needs Accept: text/event-stream\n",
            );
        }
        let Some(sid) = session else {
            return error_response(
                StatusCode::BAD_REQUEST,
                -32000,
                "Bad Request: Mcp-Session-Id header is required",
            );
        };
        let Some(mut closed) = self.sessions.get(&sid).map(|s| s.closed.subscribe()) else {
            return error_response(StatusCode::NOT_FOUND, -32001, "Session not found");
        };
        let (tx, rx) = mpsc::channel::<Bytes>(16);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(15));
            tick.tick().await;
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        if tx.send(Bytes::from_static(b": keep-alive\n\n")).await.is_err() { break; }
                    }
                    r = closed.changed() => { if r.is_err() || *closed.borrow() { break; } }
                    () = tx.closed() => break,
                }
            }
        });
        sse_response(rx, None)
    }

    async fn post(
        self: &Arc<Self>,
        headers: &HeaderMap,
        session: Option<String>,
        body: Bytes,
    ) -> Response<DemoBody> {
        let parsed: Value = match serde_json::from_slice(&body) {
            Ok(v) => v,
            Err(_) => {
                let mut r = json_response(&rpc_error(Value::Null, -32700, "Parse error"));
                *r.status_mut() = StatusCode::BAD_REQUEST;
                return r;
            }
        };
        let (messages, batch) = match parsed {
            Value::Array(a) if !a.is_empty() => (a, true),
            Value::Array(_) => {
                let mut r = json_response(&rpc_error(
                    Value::Null,
                    -32600,
                    "Invalid Request: empty batch",
                ));
                *r.status_mut() = StatusCode::BAD_REQUEST;
                return r;
            }
            v => (vec![v], false),
        };
        let is_init = messages
            .iter()
            .any(|m| m.get("method") == Some(&json!("initialize")));
        let mut new_session = None;
        match (&session, is_init) {
            (_, true) => {
                let sid = new_session_id();
                let (closed, _) = watch::channel(false);
                self.sessions.insert(sid.clone(), Session { closed });
                new_session = Some(sid);
            }
            (Some(s), false) => {
                if !self.sessions.contains_key(s) {
                    return error_response(StatusCode::NOT_FOUND, -32001, "Session not found");
                }
            }
            // 2026-07-28 discovery needs no session: it says which versions this server speaks
            // (a client in `auto` mode then falls back to `initialize`).
            (None, false)
                if messages
                    .iter()
                    .all(|m| m.get("method") == Some(&json!("server/discover"))) => {}
            (None, false) => {
                return error_response(
                    StatusCode::BAD_REQUEST,
                    -32000,
                    "Bad Request: Mcp-Session-Id header is required",
                );
            }
        }
        let has_requests = messages
            .iter()
            .any(|m| m.get("method").is_some() && m.get("id").is_some());
        if !has_requests {
            // Notifications and responses only.
            return plain(StatusCode::ACCEPTED, "");
        }
        let sse = crate::media::accepts_event_stream(headers);
        let mut resp = if sse {
            let (tx, rx) = mpsc::channel::<Bytes>(16);
            let me = self.clone();
            tokio::spawn(async move {
                let mut replies = Vec::new();
                for m in messages {
                    if let Some(r) = me.process(m, Some(&tx)).await {
                        if batch {
                            replies.push(r);
                        } else if tx.send(me.sse_event(&r)).await.is_err() {
                            return;
                        }
                    }
                }
                if batch && !replies.is_empty() {
                    let _ = tx.send(me.sse_event(&Value::Array(replies))).await;
                }
            });
            sse_response(rx, None)
        } else {
            let mut replies = Vec::new();
            for m in messages {
                if let Some(r) = self.process(m, None).await {
                    replies.push(r);
                }
            }
            let v = if batch {
                Value::Array(replies)
            } else {
                replies.pop().unwrap_or(Value::Null)
            };
            json_response(&v)
        };
        if let Some(sid) = new_session {
            if let Ok(v) = http::HeaderValue::from_str(&sid) {
                resp.headers_mut().insert("mcp-session-id", v);
            }
        }
        resp
    }

    /// Answers one message; notifications go to `sink` (SSE mode) before the reply.
    async fn process(&self, m: Value, sink: Option<&mpsc::Sender<Bytes>>) -> Option<Value> {
        let id = m.get("id").cloned()?;
        let method = match m.get("method") {
            Some(Value::String(method)) => method.as_str(),
            // A method that is no string: an invalid request, answered by its id.
            Some(_) => {
                return Some(rpc_error(
                    id,
                    -32600,
                    "Invalid Request: `method` must be a string",
                ))
            }
            None => return None, // a client's reply to a server request
        };
        let params = m.get("params").cloned().unwrap_or(json!({}));
        let out: Result<Value, (i64, String)> = match method {
            "initialize" => {
                let asked = params
                    .get("protocolVersion")
                    .and_then(Value::as_str)
                    .unwrap_or(DEFAULT_VERSION);
                let version = if PROTOCOL_VERSIONS.contains(&asked) {
                    asked
                } else {
                    DEFAULT_VERSION
                };
                Ok(json!({
                    "protocolVersion": version,
                    "capabilities": { "tools": { "listChanged": false }, "resources": {}, "prompts": {}, "logging": {} },
                    "serverInfo": { "name": "rpctap-demo", "version": env!("CARGO_PKG_VERSION") },
                    "instructions": "rpctap's embedded demo server"
                }))
            }
            "server/discover" => Ok(json!({
                "resultType": "complete",
                // Caching hints, as 2026-07-28 asks of a discovery result: not to be reused.
                "ttlMs": 0,
                "cacheScope": "public",
                "supportedVersions": PROTOCOL_VERSIONS,
                "capabilities": { "tools": { "listChanged": false }, "resources": {}, "prompts": {}, "logging": {} },
                "_meta": { "io.modelcontextprotocol/serverInfo": { "name": "rpctap-demo", "version": env!("CARGO_PKG_VERSION") } },
                "instructions": "rpctap's embedded demo server"
            })),
            "ping" | "logging/setLevel" => Ok(json!({})),
            "tools/list" => Ok(json!({ "tools": [
                { "name": "echo", "description": "Echoes its text", "inputSchema": { "type": "object", "properties": { "text": { "type": "string" } }, "required": ["text"] } },
                { "name": "add", "description": "Adds two numbers", "inputSchema": { "type": "object", "properties": { "a": { "type": "number" }, "b": { "type": "number" } }, "required": ["a", "b"] } },
                { "name": "slow", "description": "Sends progress notifications, then answers", "inputSchema": { "type": "object", "properties": { "steps": { "type": "integer" }, "delay_ms": { "type": "integer" } } } },
                { "name": "fail", "description": "Always fails (isError: true)", "inputSchema": { "type": "object", "properties": {} } }
            ]})),
            "tools/call" => self.call_tool(&params, sink).await,
            "resources/list" => Ok(json!({ "resources": [
                { "uri": "demo://readme", "name": "readme", "mimeType": "text/plain", "description": "About this demo" }
            ]})),
            "resources/read" => match params.get("uri").and_then(Value::as_str) {
                Some("demo://readme") => Ok(json!({ "contents": [
                    { "uri": "demo://readme", "mimeType": "text/plain", "text": "rpctap demo server: try tools/call with echo, add, slow or fail." }
                ]})),
                _ => Err((-32002, "Resource not found".into())),
            },
            "prompts/list" => Ok(json!({ "prompts": [
                { "name": "greet", "description": "Greets someone", "arguments": [ { "name": "name", "required": true } ] }
            ]})),
            "prompts/get" => match params.get("name").and_then(Value::as_str) {
                Some("greet") => {
                    let Some(who) = params.pointer("/arguments/name").and_then(Value::as_str)
                    else {
                        return Some(rpc_error(id, -32602, "greet needs its `name` argument"));
                    };
                    Ok(json!({ "description": "A greeting", "messages": [
                        { "role": "user", "content": { "type": "text", "text": format!("Say hello to {who}.") } }
                    ]}))
                }
                _ => Err((-32602, "Unknown prompt".into())),
            },
            other => Err((-32601, format!("Method not found: {other}"))),
        };
        Some(match out {
            Ok(result) => json!({ "jsonrpc": "2.0", "id": id, "result": result }),
            Err((code, message)) => rpc_error(id, code, &message),
        })
    }

    async fn call_tool(
        &self,
        params: &Value,
        sink: Option<&mpsc::Sender<Bytes>>,
    ) -> Result<Value, (i64, String)> {
        let args = params.get("arguments").cloned().unwrap_or(json!({}));
        let text =
            |t: String| json!({ "content": [ { "type": "text", "text": t } ], "isError": false });
        match params.get("name").and_then(Value::as_str) {
            Some("echo") => {
                let t = args
                    .get("text")
                    .and_then(Value::as_str)
                    .ok_or((-32602, "echo needs a string `text`".to_string()))?;
                Ok(text(t.to_string()))
            }
            Some("add") => {
                let (Some(a), Some(b)) = (
                    args.get("a").and_then(Value::as_f64),
                    args.get("b").and_then(Value::as_f64),
                ) else {
                    return Err((-32602, "add needs numbers `a` and `b`".into()));
                };
                let sum = a + b + if self.alter_add { 1.0 } else { 0.0 };
                let s = if sum.fract() == 0.0 && sum.abs() < 9.0e15 {
                    format!("{}", sum as i64)
                } else {
                    sum.to_string()
                };
                Ok(text(s))
            }
            Some("slow") => {
                // Given, each must be a whole number; left out, its default.
                if ["steps", "delay_ms"]
                    .iter()
                    .any(|k| args.get(*k).is_some_and(|v| v.as_u64().is_none()))
                {
                    return Err((
                        -32602,
                        "slow takes whole numbers `steps` and `delay_ms`".into(),
                    ));
                }
                let steps = args
                    .get("steps")
                    .and_then(Value::as_u64)
                    .unwrap_or(3)
                    .min(100);
                let delay = Duration::from_millis(
                    args.get("delay_ms")
                        .and_then(Value::as_u64)
                        .unwrap_or(100)
                        .min(5_000),
                );
                let token = params.pointer("/_meta/progressToken").cloned();
                for i in 1..=steps {
                    if !delay.is_zero() {
                        tokio::time::sleep(delay).await;
                    }
                    if let (Some(tx), Some(tok)) = (sink, token.as_ref()) {
                        let note = json!({ "jsonrpc": "2.0", "method": "notifications/progress",
                            "params": { "progressToken": tok, "progress": i, "total": steps, "message": format!("step {i} of {steps}") } });
                        let _ = tx.send(self.sse_event(&note)).await;
                    }
                }
                Ok(text(format!("done after {steps} steps")))
            }
            Some("fail") => Ok(
                json!({ "content": [ { "type": "text", "text": "this tool always fails" } ], "isError": true }),
            ),
            Some(other) => Err((-32602, format!("Unknown tool: {other}"))),
            None => Err((-32602, "tools/call needs `name`".into())),
        }
    }
}

fn sse_response(rx: mpsc::Receiver<Bytes>, _last_event: Option<u64>) -> Response<DemoBody> {
    let mut r = Response::new(DemoBody::new(ChannelBody { rx }));
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        http::HeaderValue::from_static("no-cache"),
    );
    r
}

//! The client a probe and a test run speak through: JSON-RPC over HTTP to one URL (rpctap's own
//! proxy in front of the target, so everything sent is inspected and recorded), with the MCP
//! session kept — `initialize` and its `Mcp-Session-Id`, `MCP-Protocol-Version` on every later
//! request, `DELETE` at the end — and replies read whether they come as JSON or as an event
//! stream. A request the server makes on a reply's stream (a `ping`, a `roots/list`) is answered
//! while the stream is read (a server waiting for its answer would otherwise hold the reply
//! back): `ping` with `{}`, anything else with `-32601`, since the client declares no
//! capabilities.
//!
//! A `ws://` URL is spoken to over one WebSocket (JSON-RPC messages as text frames): a request's
//! replies are read by id; a message that names no id (a notification, bytes that are not a
//! call) is given [`QUIET`] for an answer, since a WebSocket has no status to say "none".

use super::ProbeError;
use crate::inspect::sse::SseDecoder;
use crate::proxy::body::ForwardBody;
use bytes::Bytes;
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::BodyExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// What came back for one request.
#[derive(Debug, Clone, Default)]
pub struct Answer {
    /// The HTTP status (`None`: no answer — the connection failed or `--timeout` passed).
    pub status: Option<u16>,
    /// Why there was no answer, or what went wrong reading it.
    pub failure: Option<String>,
    /// The JSON-RPC replies (results and errors), in the order they came.
    pub replies: Vec<Value>,
    /// Whether the reply came as an event stream.
    pub stream: bool,
    pub latency_ms: f64,
}

impl Answer {
    /// The reply with this id text (`1`, `"a"`), else a reply with id `null`.
    pub fn reply_to(&self, id: &Value) -> Option<&Value> {
        self.replies
            .iter()
            .find(|r| r.get("id") == Some(id))
            .or_else(|| {
                self.replies
                    .iter()
                    .find(|r| r.get("id") == Some(&Value::Null))
            })
    }
}

/// The largest JSON reply body read (an event stream's events are capped alike, by the SSE
/// decoder).
const MAX_REPLY: usize = 64 << 20;

/// How long a WebSocket message that names no id waits for an answer (one is not expected,
/// but a server may send an error with id `null`).
pub const QUIET: Duration = Duration::from_millis(300);

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One client session.
pub struct Session {
    /// The WebSocket, once opened (a `ws://` URL).
    ws: Option<Ws>,
    /// Each id sent (its JSON text) and the case it was sent under: over a WebSocket the
    /// findings name a case by the call's id (the whole connection is one exchange).
    pub sent: Vec<(String, usize)>,
    client: crate::proxy::upstream::UpstreamClient,
    url: Uri,
    extra: Vec<(HeaderName, HeaderValue)>,
    session_id: Option<String>,
    /// The negotiated MCP version, sent as `MCP-Protocol-Version`.
    pub protocol_version: Option<String>,
    /// MCP 2026-07-28 without a session: every request carries the version, the client and its
    /// capabilities in `params._meta` (SEP-2575).
    pub stateless: bool,
    timeout: Duration,
    next_id: i64,
    /// The case the next requests belong to (sent as `X-Rpctap-Case`, so the findings about
    /// them name it).
    pub case: Option<usize>,
}

impl Session {
    /// A session to `url`, with a bearer token (already resolved from its `env:NAME`).
    pub fn new(url: Uri, bearer: Option<&str>, timeout: Duration) -> Result<Self, ProbeError> {
        let mut extra = Vec::new();
        if let Some(t) = bearer {
            let v = HeaderValue::from_str(&format!("Bearer {t}"))
                .map_err(|_| ProbeError::Usage("the bearer token is not a header value".into()))?;
            extra.push((http::header::AUTHORIZATION, v));
        }
        Ok(Session {
            ws: None,
            sent: Vec::new(),
            client: crate::proxy::upstream::build_client(
                timeout.min(Duration::from_secs(10)),
                false,
            ),
            url,
            extra,
            session_id: None,
            protocol_version: None,
            stateless: false,
            timeout,
            next_id: 0,
            case: None,
        })
    }

    /// The next request id (1, 2, …: a run's ids are the same every time).
    pub fn next_id(&mut self) -> i64 {
        self.next_id += 1;
        self.next_id
    }

    fn request(&self, method: http::Method, body: Bytes) -> Result<Request<ForwardBody>, String> {
        let mut b = Request::builder().method(method).uri(self.url.clone());
        // 2026-07-28 routes by headers (SEP-2243): a lone message's method, and the tool, prompt
        // or resource it names.
        if self.stateless {
            if let Ok(m @ Value::Object(_)) = serde_json::from_slice::<Value>(&body) {
                if let Some(method) = m.get("method").and_then(Value::as_str) {
                    b = b.header("mcp-method", method);
                    let name = match method {
                        "tools/call" | "prompts/get" => m.pointer("/params/name"),
                        "resources/read" => m.pointer("/params/uri"),
                        _ => None,
                    };
                    if let Some(n) = name.and_then(Value::as_str) {
                        if let Ok(v) = http::HeaderValue::from_str(n) {
                            b = b.header("mcp-name", v);
                        }
                    }
                }
            }
        }
        b = b
            .header(http::header::CONTENT_TYPE, "application/json")
            .header(http::header::ACCEPT, "application/json, text/event-stream");
        if let Some(s) = &self.session_id {
            b = b.header("mcp-session-id", s.as_str());
        }
        if let Some(v) = &self.protocol_version {
            b = b.header("mcp-protocol-version", v.as_str());
        }
        for (k, v) in &self.extra {
            b = b.header(k, v);
        }
        if let Some(n) = self.case {
            b = b.header(super::findings::CASE_HEADER, n);
        }
        b.body(ForwardBody::full(body)).map_err(|e| e.to_string())
    }

    /// Whether the session speaks over a WebSocket.
    pub fn is_ws(&self) -> bool {
        matches!(self.url.scheme_str(), Some("ws" | "wss"))
    }

    /// Sends `body` and reads what comes back: over HTTP a POST and its answer (the server's
    /// own requests on the way answered), over a WebSocket a message and its replies by id.
    pub async fn post(&mut self, body: Bytes) -> Answer {
        let body = match (&self.protocol_version, self.stateless) {
            (Some(v), true) => with_meta(body, v),
            _ => body,
        };
        if let Some(case) = self.case {
            for id in ids_in(&body) {
                self.sent.push((id, case));
            }
        }
        if self.is_ws() {
            return self.ws_send(body).await;
        }
        self.http_post(body).await
    }

    async fn ws_open(&mut self) -> Result<(), String> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        if self.ws.is_some() {
            return Ok(());
        }
        let mut req = self
            .url
            .to_string()
            .into_client_request()
            .map_err(|e| e.to_string())?;
        for (k, v) in &self.extra {
            req.headers_mut().insert(k.clone(), v.clone());
        }
        match tokio::time::timeout(self.timeout, tokio_tungstenite::connect_async(req)).await {
            Ok(Ok((ws, _))) => {
                self.ws = Some(ws);
                Ok(())
            }
            Ok(Err(e)) => Err(format!("cannot open the WebSocket: {e}")),
            Err(_) => Err(format!("no WebSocket handshake within {:?}", self.timeout)),
        }
    }

    async fn ws_send(&mut self, body: Bytes) -> Answer {
        use futures_util::{SinkExt, StreamExt};
        use tokio_tungstenite::tungstenite::Message;
        let started = Instant::now();
        let mut answer = Answer::default();
        if let Err(e) = self.ws_open().await {
            answer.failure = Some(e);
            return answer;
        }
        let mut waiting: Vec<Value> = messages(&body)
            .iter()
            .filter(|m| m.get("method").is_some())
            .filter_map(|m| m.get("id").filter(|i| !i.is_null()).cloned())
            .collect();
        let text = String::from_utf8_lossy(&body).into_owned();
        let Some(ws) = self.ws.as_mut() else {
            return answer;
        };
        if let Err(e) = ws.send(Message::text(text)).await {
            self.ws = None;
            answer.failure = Some(format!("the WebSocket closed: {e}"));
            return answer;
        }
        answer.status = Some(200);
        let quiet = waiting.is_empty();
        let until = started + if quiet { QUIET } else { self.timeout };
        loop {
            if !quiet && waiting.is_empty() {
                break;
            }
            let left = until.saturating_duration_since(Instant::now());
            let Some(ws) = self.ws.as_mut() else { break };
            let next = match tokio::time::timeout(left, ws.next()).await {
                Err(_) if quiet => break,
                Err(_) => {
                    answer.failure = Some(format!("no answer within {:?}", self.timeout));
                    break;
                }
                Ok(None) | Ok(Some(Err(_))) | Ok(Some(Ok(Message::Close(_)))) => {
                    self.ws = None;
                    answer.failure = Some("the WebSocket closed".into());
                    break;
                }
                Ok(Some(Ok(m))) => m,
            };
            let data = match next {
                Message::Text(t) => Bytes::copy_from_slice(t.as_bytes()),
                Message::Binary(b) => b,
                _ => continue,
            };
            for m in messages(&data) {
                if m.get("method").is_some() {
                    if m.get("id").is_some() {
                        self.ws_answer(&m).await;
                    }
                    continue;
                }
                if let Some(id) = m.get("id") {
                    waiting.retain(|w| w != id);
                }
                answer.replies.push(m);
                if quiet {
                    break;
                }
            }
            if quiet && !answer.replies.is_empty() {
                break;
            }
        }
        answer.latency_ms = started.elapsed().as_secs_f64() * 1e3;
        answer
    }

    async fn ws_answer(&mut self, q: &Value) {
        use futures_util::SinkExt;
        let reply = server_request_answer(q);
        if let Some(ws) = self.ws.as_mut() {
            let _ = ws
                .send(tokio_tungstenite::tungstenite::Message::text(
                    reply.to_string(),
                ))
                .await;
        }
    }

    async fn http_post(&mut self, body: Bytes) -> Answer {
        let started = Instant::now();
        let mut answer = Answer::default();
        let req = match self.request(http::Method::POST, body) {
            Ok(r) => r,
            Err(e) => {
                answer.failure = Some(e);
                return answer;
            }
        };
        let mut asked: Vec<Value> = Vec::new();
        let read = tokio::time::timeout(self.timeout, async {
            let resp = self.client.request(req).await.map_err(|e| e.to_string())?;
            let (parts, mut body) = resp.into_parts();
            answer.status = Some(parts.status.as_u16());
            if let Some(s) = parts
                .headers
                .get("mcp-session-id")
                .and_then(|v| v.to_str().ok())
            {
                self.session_id = Some(s.to_string());
            }
            let ct = parts
                .headers
                .get(http::header::CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .unwrap_or("");
            answer.stream = crate::media::is_event_stream(ct);
            let mut whole = Vec::new();
            let mut sse = SseDecoder::new(MAX_REPLY);
            while let Some(frame) = body.frame().await {
                let frame = frame.map_err(|e| e.to_string())?;
                let Ok(data) = frame.into_data() else {
                    continue;
                };
                if answer.stream {
                    let mut events = Vec::new();
                    sse.feed(&data, |e| {
                        if e.kind() == "message" && !e.data.is_empty() {
                            events.push(e.data);
                        }
                    });
                    for e in events {
                        for m in messages(&e) {
                            if m.get("method").is_some() && m.get("id").is_some() {
                                asked.push(m);
                            } else if m.get("method").is_none() {
                                answer.replies.push(m);
                            }
                        }
                    }
                    for q in asked.drain(..) {
                        self.answer_server(&q).await;
                    }
                } else {
                    if whole.len() + data.len() > MAX_REPLY {
                        return Err(format!("a reply larger than {} MiB", MAX_REPLY >> 20));
                    }
                    whole.extend_from_slice(&data);
                }
            }
            if !answer.stream && !whole.is_empty() {
                answer.replies.extend(
                    messages(&whole)
                        .into_iter()
                        .filter(|m| m.get("method").is_none()),
                );
            }
            Ok::<(), String>(())
        })
        .await;
        match read {
            Ok(Ok(())) => {}
            Ok(Err(e)) => answer.failure = Some(e),
            Err(_) => {
                answer.failure = Some(format!("no answer within {:?}", self.timeout));
            }
        }
        answer.latency_ms = started.elapsed().as_secs_f64() * 1e3;
        answer
    }

    /// Answers a request the server made on a reply's stream.
    async fn answer_server(&mut self, q: &Value) {
        let reply = server_request_answer(q);
        if let Ok(req) = self.request(http::Method::POST, Bytes::from(reply.to_string())) {
            let sent = tokio::time::timeout(self.timeout, async {
                let resp = self.client.request(req).await.ok()?;
                resp.into_body().collect().await.ok()
            });
            let _ = sent.await;
        }
    }

    /// Sends a call and gives back its result, or says what came instead.
    pub async fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id();
        let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let a = self.post(Bytes::from(msg.to_string())).await;
        if let Some(f) = a.failure {
            return Err(f);
        }
        match a.reply_to(&json!(id)) {
            Some(r) => match (r.get("result"), r.get("error")) {
                (Some(res), None) => Ok(res.clone()),
                (_, Some(e)) => Err(format!(
                    "error {}: {}",
                    e.get("code").unwrap_or(&Value::Null),
                    e.get("message").and_then(Value::as_str).unwrap_or("")
                )),
                _ => Err("a reply with neither result nor error".into()),
            },
            None => Err(match a.status {
                Some(s) if !(200..300).contains(&s) => format!("HTTP {s} without a reply"),
                _ => "no reply".into(),
            }),
        }
    }

    /// Sends a notification (no reply is read beyond the status).
    pub async fn notify(&mut self, method: &str) -> Answer {
        let msg = json!({"jsonrpc": "2.0", "method": method});
        self.post(Bytes::from(msg.to_string())).await
    }

    /// Opens the conversation with an MCP server as `version` says: from 2026-07-28 on,
    /// `server/discover` and every request stateless (`initialize` if the server does not know
    /// it); before, `initialize` (`server/discover` if the server knows no `initialize`). Gives
    /// back what the server said of itself (its `capabilities`, `serverInfo`).
    pub async fn open(&mut self, version: &str) -> Result<Value, String> {
        if version >= "2026-07-28" {
            match self.discover(version).await {
                Ok(r) => Ok(r),
                Err(e) if e.contains("-32601") => self.initialize(version).await,
                Err(e) => Err(format!("server/discover: {e}")),
            }
        } else {
            match self.initialize(version).await {
                Ok(r) => Ok(r),
                Err(e) if e.contains("-32601") => self
                    .discover("2026-07-28")
                    .await
                    .map_err(|d| format!("initialize: {e}; server/discover: {d}")),
                Err(e) => Err(format!("initialize: {e}")),
            }
        }
    }

    /// `server/discover` (MCP 2026-07-28): the versions the server speaks; the session goes on
    /// stateless in `version` when it is among them, else in the newest it lists.
    async fn discover(&mut self, version: &str) -> Result<Value, String> {
        self.protocol_version = Some(version.to_string());
        self.stateless = true;
        let r = self.call("server/discover", json!({})).await;
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                self.protocol_version = None;
                self.stateless = false;
                return Err(e);
            }
        };
        let supported: Vec<&str> = r
            .get("supportedVersions")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if !supported.contains(&version) {
            match supported.iter().max() {
                Some(v) => self.protocol_version = Some(v.to_string()),
                None => return Err("its result lists no supportedVersions".into()),
            }
        }
        Ok(r)
    }

    /// Opens the MCP session: `initialize` asking for `version`, then `notifications/
    /// initialized`. Gives back the server's `initialize` result.
    pub async fn initialize(&mut self, version: &str) -> Result<Value, String> {
        self.stateless = false;
        self.protocol_version = None;
        let r = self
            .call(
                "initialize",
                json!({
                    "protocolVersion": version,
                    "capabilities": {},
                    "clientInfo": {"name": "rpctap-test", "version": env!("CARGO_PKG_VERSION")},
                }),
            )
            .await?;
        let v = r
            .get("protocolVersion")
            .and_then(Value::as_str)
            .ok_or("the initialize result names no protocolVersion")?;
        self.protocol_version = Some(v.to_string());
        self.notify("notifications/initialized").await;
        Ok(r)
    }

    /// Ends the session: over a WebSocket a close frame; over HTTP a `DELETE` with the MCP
    /// session's id (a server that keeps none is not asked).
    pub async fn close(&mut self) {
        if let Some(mut ws) = self.ws.take() {
            let _ = tokio::time::timeout(self.timeout, ws.close(None)).await;
            return;
        }
        if self.session_id.is_none() {
            return;
        }
        if let Ok(req) = self.request(http::Method::DELETE, Bytes::new()) {
            let _ = tokio::time::timeout(self.timeout, async {
                let resp = self.client.request(req).await.ok()?;
                resp.into_body().collect().await.ok()
            })
            .await;
        }
        self.session_id = None;
    }
}

/// The answer to a request the server makes of the client: `ping` is answered, anything else
/// is a method the client does not offer (it declares no capabilities).
fn server_request_answer(q: &Value) -> Value {
    let id = q.get("id").cloned().unwrap_or(Value::Null);
    if q.get("method").and_then(Value::as_str) == Some("ping") {
        json!({"jsonrpc": "2.0", "id": id, "result": {}})
    } else {
        json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601,
            "message": "rpctap test declares no client capabilities"}})
    }
}

/// A body with `_meta`'s reserved keys in each request's and notification's params (MCP
/// 2026-07-28's per-request version, client and capabilities), the keys a message already has
/// kept. Bytes that are not JSON, and params that are an array, go as they are.
fn with_meta(body: Bytes, version: &str) -> Bytes {
    let add = |m: &mut Value| {
        if !m.get("method").is_some_and(Value::is_string) {
            return;
        }
        let Some(o) = m.as_object_mut() else { return };
        let params = o.entry("params").or_insert_with(|| json!({}));
        let Some(p) = params.as_object_mut() else {
            return;
        };
        let meta = p.entry("_meta").or_insert_with(|| json!({}));
        if let Some(meta) = meta.as_object_mut() {
            for (k, v) in [
                ("io.modelcontextprotocol/protocolVersion", json!(version)),
                (
                    "io.modelcontextprotocol/clientInfo",
                    json!({"name": "rpctap-test", "version": env!("CARGO_PKG_VERSION")}),
                ),
                ("io.modelcontextprotocol/clientCapabilities", json!({})),
            ] {
                meta.entry(k).or_insert(v);
            }
        }
    };
    match serde_json::from_slice::<Value>(&body) {
        Ok(Value::Array(mut a)) => {
            a.iter_mut().for_each(add);
            Bytes::from(Value::Array(a).to_string())
        }
        Ok(mut v @ Value::Object(_)) => {
            add(&mut v);
            Bytes::from(v.to_string())
        }
        _ => body,
    }
}

/// The ids (JSON text) of the calls in a body, read leniently (an invalid envelope's too).
fn ids_in(body: &[u8]) -> Vec<String> {
    messages(body)
        .iter()
        .filter_map(|m| m.get("id").filter(|i| !i.is_null()).map(Value::to_string))
        .collect()
}

/// The JSON-RPC messages of one body or event: one, or a batch's members.
fn messages(b: &[u8]) -> Vec<Value> {
    match serde_json::from_slice::<Value>(b) {
        Ok(Value::Array(a)) => a.into_iter().filter(Value::is_object).collect(),
        Ok(v @ Value::Object(_)) => vec![v],
        _ => vec![],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_is_found_by_its_id_or_as_a_null_id_error() {
        let a = Answer {
            replies: vec![
                json!({"jsonrpc": "2.0", "id": 2, "result": 1}),
                json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "x"}}),
            ],
            ..Default::default()
        };
        assert_eq!(a.reply_to(&json!(2)).unwrap()["result"], 1);
        assert_eq!(a.reply_to(&json!(3)).unwrap()["error"]["code"], -32700);
        assert_eq!(messages(b"[1, {\"a\": 1}]"), vec![json!({"a": 1})]);
        assert!(messages(b"{bad").is_empty());
    }

    #[test]
    fn a_stateless_request_carries_its_version_client_and_capabilities() {
        let b = with_meta(
            Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"x":1}}}"#,
            ),
            "2026-07-28",
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        let m = &v["params"]["_meta"];
        assert_eq!(m["x"], 1);
        assert_eq!(m["io.modelcontextprotocol/protocolVersion"], "2026-07-28");
        assert_eq!(m["io.modelcontextprotocol/clientCapabilities"], json!({}));
        // Not JSON, positional params: as they are.
        assert_eq!(&with_meta(Bytes::from_static(b"{bad"), "v")[..], b"{bad");
        let b = with_meta(
            Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"m","params":[1]}"#),
            "v",
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["params"], json!([1]));
    }
}

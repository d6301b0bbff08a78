//! Serving a recording as the server (`rpctap mock`): each request gets the recorded reply of
//! the matching recorded request (same method and params, `_meta` ignored; on a tie, recording
//! order), with the live request's id; protocol plumbing (`initialize`, `ping`, the lists' first
//! pages… [`PLUMBING`]) is answered from the recorded server whatever the client's params, so
//! any client can talk to the mock, not only the recorded one. JSON or SSE as the client accepts; notifications get
//! 202/204; an unmatched request gets a JSON-RPC error naming the closest recorded method, and a
//! warning line on stderr. The server notifications recorded inside a call's reply (an SSE
//! reply's progress and log events, a stdio server's lines before its answer) come before the
//! reply again, a progress notification carrying the live request's `progressToken`.
//!
//! A WebSocket upgrade is accepted (`tokio-tungstenite` over hyper's upgraded connection; no
//! extension is offered): each text message is answered as a stdio line is, and the server
//! notifications recorded between the call and the client's next message (a subscription's,
//! such as `eth_subscription`) follow its reply.

use crate::demo::DemoBody;
use crate::events::MessageEvent;
use crate::locks::Locked as _;
use crate::record::reader::Capture;
use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::value::RawValue;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// A recorded reply: its `result` or `error` member as raw JSON, and how it was carried.
#[derive(Debug, Clone)]
struct Reply {
    member: &'static str,
    value: String,
    sse: bool,
    /// The server's notifications recorded inside the call's reply: after the request, before
    /// the reply, in the same stream (an SSE reply's, a stdio session's).
    before: Arc<[String]>,
    /// The server's notifications recorded after the reply, before the client's next message.
    then: Arc<[String]>,
    /// The further responses of an A2A stream (`SendStreamingMessage`: one per task event, all
    /// with the call's id), in order, as recorded.
    more: Arc<[String]>,
}

/// What the mock answers to one message.
struct Answer {
    /// An A2A stream's further responses, carrying the live id.
    more: Vec<String>,
    reply: String,
    sse: bool,
    /// Notifications to send before the reply (progress tokens already the live ones).
    before: Vec<String>,
    then: Arc<[String]>,
}

/// The mock's index of the recording.
#[derive(Debug, Default)]
pub struct Mock {
    matching: crate::cli::MockMatch,
    replies: HashMap<(String, String), Vec<Reply>>,
    /// Which recorded reply comes next, per key (the last one repeats).
    cursors: Mutex<HashMap<(String, String), usize>>,
    methods: Vec<String>,
    /// The first recorded reply of each protocol-plumbing method ([`PLUMBING`]), whatever its
    /// params: what a client other than the recorded one gets.
    plumbing: HashMap<String, Reply>,
    sessions: AtomicU64,
    /// A2A agent cards the recording holds, by path: served to a `GET` of that path.
    cards: HashMap<String, String>,
}

/// Protocol plumbing: answered from the recording's server side whatever the params (another
/// client's `initialize` names another client, asks for its own version and capabilities; a
/// list's first page has no cursor), while the server's own operations — tool calls, reads,
/// prompts — are matched as `--match` says. `ping` and `logging/setLevel` get an empty result
/// even when the recorded client never sent them.
const PLUMBING: [&str; 8] = [
    "initialize",
    "ping",
    "logging/setLevel",
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
];

/// Plumbing a server answers with an empty result whatever it recorded.
const EMPTY_OK: [&str; 2] = ["ping", "logging/setLevel"];

/// Params in a canonical form: keys sorted, `_meta` removed.
fn canonical(params: Option<&Value>) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut keys: Vec<&String> = m.keys().filter(|k| k.as_str() != "_meta").collect();
                keys.sort();
                Value::Object(keys.into_iter().map(|k| (k.clone(), sort(&m[k]))).collect())
            }
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            other => other.clone(),
        }
    }
    match params {
        None => String::new(),
        Some(Value::Object(m)) => {
            // `_meta` is dropped at the top of params only (progress tokens and the like).
            let mut m = m.clone();
            m.remove("_meta");
            sort(&Value::Object(m)).to_string()
        }
        Some(v) => sort(v).to_string(),
    }
}

#[derive(serde::Deserialize)]
struct Parts<'a> {
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
    #[serde(borrow, default)]
    error: Option<&'a RawValue>,
}

fn key_of(m: &Value, how: crate::cli::MockMatch) -> Option<(String, String)> {
    use crate::cli::MockMatch;
    let method = m.get("method")?.as_str()?.to_string();
    let params = match how {
        // An A2A message's `messageId` is new each time a client sends it: not what it asks.
        MockMatch::MethodParams if crate::inspect::a2a::is_message_method(&method) => {
            let mut p = m.get("params").cloned();
            if let Some(msg) = p
                .as_mut()
                .and_then(|p| p.get_mut("message"))
                .and_then(Value::as_object_mut)
            {
                msg.remove("messageId");
            }
            canonical(p.as_ref())
        }
        MockMatch::MethodParams => canonical(m.get("params")),
        MockMatch::Sequential => String::new(),
        MockMatch::Strict => m
            .get("params")
            .map(crate::rpc::canonical)
            .unwrap_or_default(),
    };
    Some((method, params))
}

impl Mock {
    pub fn from_recording(rec: &Capture) -> Self {
        Self::matching(rec, crate::cli::MockMatch::default())
    }

    /// The index of a recording, requests matched as `how` says.
    pub fn matching(rec: &Capture, how: crate::cli::MockMatch) -> Self {
        let mut mock = Mock {
            matching: how,
            ..Mock::default()
        };
        for h in rec.http() {
            if let crate::events::HttpEvent::AgentCard { path, card, .. } = h {
                mock.cards.insert(path.clone(), card.clone());
            }
        }
        let msgs: Vec<&MessageEvent> = rec.messages().collect();
        for (i, m) in msgs.iter().enumerate() {
            if !(m.is_c2s() && m.kind == crate::rpc::Kind::Request) {
                continue;
            }
            let Ok(v) = serde_json::from_str::<Value>(&m.json_text()) else {
                continue;
            };
            let Some(key) = key_of(&v, how) else { continue };
            if !mock.methods.contains(&key.0) {
                mock.methods.push(key.0.clone());
            }
            let Some(j) = msgs[i + 1..]
                .iter()
                .position(|r| {
                    !r.is_c2s()
                        && r.is_response()
                        && r.scope == m.scope
                        && r.id_text() == m.id_text()
                })
                .map(|p| i + 1 + p)
            else {
                continue;
            };
            let reply = msgs[j];
            let notification = |r: &&&MessageEvent| {
                !r.is_c2s() && r.scope == m.scope && r.kind == crate::rpc::Kind::Notification
            };
            let before: Vec<String> = msgs[i + 1..j]
                .iter()
                .filter(notification)
                .filter(|r| r.exchange == reply.exchange)
                .map(|r| r.wire_text().into_owned())
                .collect();
            let then: Vec<String> = msgs[j + 1..]
                .iter()
                .take_while(|r| !(r.is_c2s() && r.scope == m.scope))
                .filter(notification)
                .map(|r| r.wire_text().into_owned())
                .collect();
            let more: Vec<String> = msgs[j + 1..]
                .iter()
                .take_while(|r| !(r.is_c2s() && r.scope == m.scope))
                .filter(|r| {
                    r.is_response() && r.exchange == reply.exchange && r.id_text() == m.id_text()
                })
                .map(|r| r.json_text().into_owned())
                .collect();
            let text = reply.json_text();
            let Ok(parts) = serde_json::from_str::<Parts>(&text) else {
                continue;
            };
            let (member, value) = match (parts.result, parts.error) {
                (Some(r), None) => ("result", r.get().to_string()),
                (None, Some(e)) => ("error", e.get().to_string()),
                _ => continue,
            };
            let r = Reply {
                member,
                value,
                sse: reply.transport == crate::events::Transport::Sse,
                before: before.into(),
                then: then.into(),
                more: more.into(),
            };
            if PLUMBING.contains(&key.0.as_str()) {
                mock.plumbing
                    .entry(key.0.clone())
                    .or_insert_with(|| r.clone());
            }
            mock.replies.entry(key).or_default().push(r);
        }
        mock
    }

    pub fn calls_known(&self) -> usize {
        self.replies.values().map(Vec::len).sum()
    }

    fn lookup(&self, key: &(String, String)) -> Option<Reply> {
        let list = self.replies.get(key)?;
        let mut cur = self.cursors.locked();
        let i = cur.entry(key.clone()).or_insert(0);
        let r = list.get((*i).min(list.len() - 1)).cloned();
        *i += 1;
        r
    }

    fn closest(&self, method: &str) -> Option<&str> {
        self.methods
            .iter()
            .min_by_key(|m| strsim::levenshtein(m, method))
            .map(String::as_str)
    }

    /// A plumbing request no recorded one matched: the recorded reply of its method (a list
    /// only for its first page: a cursor the recording never gave out is an error), or an empty
    /// result for `ping` and `logging/setLevel`.
    fn plumbing_reply(&self, method: &str, v: &Value) -> Option<Reply> {
        if !PLUMBING.contains(&method) || v.pointer("/params/cursor").is_some() {
            return None;
        }
        if let Some(r) = self.plumbing.get(method) {
            return Some(r.clone());
        }
        EMPTY_OK.contains(&method).then(|| Reply {
            member: "result",
            value: "{}".into(),
            sse: false,
            before: Arc::from(Vec::new()),
            then: Arc::from(Vec::new()),
            more: Arc::from(Vec::new()),
        })
    }

    /// The answer to one message, or `None` for notifications and responses.
    fn answer(&self, raw: &RawValue) -> Option<Answer> {
        let v: Value = serde_json::from_str(raw.get()).ok()?;
        let id = serde_json::from_str::<IdOnly>(raw.get())
            .ok()?
            .id?
            .get()
            .to_string();
        let method = v.get("method")?.as_str()?.to_string();
        let key = key_of(&v, self.matching)?;
        if let Some(r) = self.lookup(&key) {
            let token = v.pointer("/params/_meta/progressToken");
            return Some(Answer {
                reply: format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"{}":{}}}"#,
                    r.member, r.value
                ),
                sse: r.sse,
                before: r.before.iter().map(|n| with_token(n, token)).collect(),
                then: r.then,
                more: r.more.iter().map(|m| with_id(m, &id)).collect(),
            });
        }
        if let Some(r) = self.plumbing_reply(&method, &v) {
            return Some(Answer {
                reply: format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"{}":{}}}"#,
                    r.member, r.value
                ),
                sse: r.sse,
                before: Vec::new(),
                then: Arc::from(Vec::new()),
                more: Vec::new(),
            });
        }
        let (code, message) = if self.methods.contains(&method) {
            (
                -32602,
                format!("rpctap mock: no recorded `{method}` call with these params"),
            )
        } else {
            match self.closest(&method) {
                Some(c) => (-32601, format!("rpctap mock: no recorded call of `{method}`; the closest recorded method is `{c}`")),
                None => (-32601, format!("rpctap mock: no recorded call of `{method}`; the recording has no calls")),
            }
        };
        tracing::warn!(%method, code, "{message}");
        let e = serde_json::json!({ "code": code, "message": message, "data": { "recorded_methods": self.methods } });
        Some(Answer {
            reply: format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{e}}}"#),
            sse: false,
            before: Vec::new(),
            then: Arc::from(Vec::new()),
            more: Vec::new(),
        })
    }

    /// Serves the stdio transport: a line in (a message or a batch), its reply line out (none
    /// for notifications and responses), until stdin ends.
    pub fn serve_stdio(
        &self,
        input: impl std::io::BufRead,
        mut output: impl std::io::Write,
    ) -> std::io::Result<()> {
        for line in input.split(b'\n') {
            let line = line?;
            let text = String::from_utf8_lossy(&line);
            let text = text.trim();
            if text.is_empty() {
                continue;
            }
            let (before, reply, then) = self.answer_message(text);
            for out in before.iter().chain(&reply).chain(&then) {
                output.write_all(out.as_bytes())?;
                output.write_all(b"\n")?;
            }
            output.flush()?;
        }
        Ok(())
    }

    /// The reply line to one line of the stdio transport.
    pub fn answer_line(&self, text: &str) -> Option<String> {
        self.answer_message(text).1
    }

    /// The answer to one message of a stream (a stdio line, a WebSocket message): the
    /// notifications recorded inside its calls' replies, the reply, and the notifications
    /// recorded after them.
    pub fn answer_message(&self, text: &str) -> (Vec<String>, Option<String>, Vec<String>) {
        let Ok(top) = serde_json::from_str::<&RawValue>(text) else {
            let e =
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
            return (vec![], Some(e.into()), vec![]);
        };
        let (members, batch) = if top.get().starts_with('[') {
            let m = serde_json::from_str::<Vec<&RawValue>>(top.get()).unwrap_or_default();
            (m, true)
        } else {
            (vec![top], false)
        };
        let (mut before, mut texts, mut then) = (Vec::new(), Vec::new(), Vec::new());
        for m in &members {
            if let Some(a) = self.answer(m) {
                before.extend(a.before);
                texts.push(a.reply);
                then.extend(a.then.iter().cloned());
            }
        }
        let reply = match (batch, texts.is_empty()) {
            (_, true) => None,
            (true, false) => Some(format!("[{}]", texts.join(","))),
            (false, false) => texts.pop(),
        };
        (before, reply, then)
    }

    /// Answers a WebSocket upgrade (`101`) and serves the connection: each text message gets
    /// its reply and then the notifications recorded after it.
    fn websocket(
        self: &Arc<Self>,
        mut req: Request<crate::server::RequestBody>,
    ) -> Response<DemoBody> {
        use tokio_tungstenite::tungstenite::{
            handshake::derive_accept_key, protocol::Role, Message,
        };
        let Some(key) = req.headers().get("sec-websocket-key") else {
            return respond(StatusCode::BAD_REQUEST, None, Bytes::new());
        };
        let accept = derive_accept_key(key.as_bytes());
        let on = hyper::upgrade::on(&mut req);
        let me = self.clone();
        tokio::spawn(async move {
            use futures_util::{SinkExt, StreamExt};
            let Ok(up) = on.await else { return };
            let io = hyper_util::rt::TokioIo::new(up);
            let ws =
                tokio_tungstenite::WebSocketStream::from_raw_socket(io, Role::Server, None).await;
            let (mut sink, mut stream) = ws.split();
            while let Some(Ok(m)) = stream.next().await {
                let text = match m {
                    Message::Text(t) => t,
                    Message::Close(_) => break,
                    // Pings are answered by tungstenite; binary messages carry no JSON-RPC.
                    _ => continue,
                };
                let (before, reply, then) = me.answer_message(text.as_str());
                for out in before.into_iter().chain(reply).chain(then) {
                    if sink.send(Message::text(out)).await.is_err() {
                        return;
                    }
                }
            }
            let _ = sink.close().await;
        });
        let mut r = respond(StatusCode::SWITCHING_PROTOCOLS, None, Bytes::new());
        let h = r.headers_mut();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        if let Ok(v) = HeaderValue::from_str(&accept) {
            h.insert("sec-websocket-accept", v);
        }
        r
    }

    pub async fn handle(
        self: &Arc<Self>,
        req: Request<crate::server::RequestBody>,
    ) -> Response<DemoBody> {
        let accepts_sse = crate::media::accepts_event_stream(req.headers());
        if req.method() == Method::GET && crate::ws::is_websocket(req.headers()) {
            return self.websocket(req);
        }
        if req.method() == Method::GET {
            if let Some(card) = self.cards.get(req.uri().path()) {
                return respond(
                    StatusCode::OK,
                    Some("application/json"),
                    Bytes::from(card.clone()),
                );
            }
        }
        match *req.method() {
            Method::POST => {}
            Method::DELETE => return respond(StatusCode::OK, None, Bytes::new()),
            _ => {
                let mut r = respond(StatusCode::METHOD_NOT_ALLOWED, None, Bytes::new());
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
                return r;
            }
        }
        let body = match req.into_body().collect().await {
            Ok(b) => b.to_bytes(),
            Err(_) => return respond(StatusCode::BAD_REQUEST, None, Bytes::new()),
        };
        let Ok(top) = serde_json::from_slice::<&RawValue>(&body) else {
            let e =
                r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}"#;
            return respond(
                StatusCode::OK,
                Some("application/json"),
                Bytes::from_static(e.as_bytes()),
            );
        };
        let (members, batch) = if top.get().starts_with('[') {
            (
                serde_json::from_str::<Vec<&RawValue>>(top.get()).unwrap_or_default(),
                true,
            )
        } else {
            (vec![top], false)
        };
        let mut is_init = false;
        let mut replies = Vec::new();
        for m in &members {
            is_init |= m.get().contains("\"initialize\"");
            if let Some(r) = self.answer(m) {
                replies.push(r);
            }
        }
        if replies.is_empty() {
            let status = if accepts_sse {
                StatusCode::ACCEPTED
            } else {
                StatusCode::NO_CONTENT
            };
            return respond(status, None, Bytes::new());
        }
        let sse = accepts_sse && replies.iter().all(|r| r.sse);
        let mut events = String::new();
        let mut texts = Vec::new();
        // An A2A stream's further events follow its first response (a batch has none).
        let mut after = String::new();
        for r in replies {
            for n in &r.before {
                events.push_str(&format!("event: message\ndata: {n}\n\n"));
            }
            for m in &r.more {
                after.push_str(&format!("event: message\ndata: {m}\n\n"));
            }
            texts.push(r.reply);
        }
        let payload = if batch {
            format!("[{}]", texts.join(","))
        } else {
            texts.join("")
        };
        let mut resp = if sse {
            // The progress and log events recorded inside the reply stream, then the reply.
            respond(
                StatusCode::OK,
                Some("text/event-stream"),
                Bytes::from(format!(
                    "{events}event: message\ndata: {payload}\n\n{after}"
                )),
            )
        } else {
            respond(
                StatusCode::OK,
                Some("application/json"),
                Bytes::from(payload),
            )
        };
        if is_init {
            let n = self.sessions.fetch_add(1, Ordering::Relaxed);
            if let Ok(v) = HeaderValue::from_str(&format!("rpctap-mock-{n}")) {
                resp.headers_mut().insert("mcp-session-id", v);
            }
        }
        resp
    }
}

/// A recorded response with the live request's id.
fn with_id(recorded: &str, id: &str) -> String {
    match (
        serde_json::from_str::<Value>(recorded),
        serde_json::from_str::<Value>(id),
    ) {
        (Ok(mut v), Ok(id)) => {
            v["id"] = id;
            v.to_string()
        }
        _ => recorded.to_string(),
    }
}

/// A recorded notification, a progress one carrying the live request's `progressToken` (the
/// client knows its own token, not the recorded one).
fn with_token(n: &str, token: Option<&Value>) -> String {
    let Some(token) = token else {
        return n.to_string();
    };
    match serde_json::from_str::<Value>(n) {
        Ok(mut v)
            if v.get("method").and_then(Value::as_str) == Some("notifications/progress")
                && v.pointer("/params/progressToken").is_some() =>
        {
            v["params"]["progressToken"] = token.clone();
            v.to_string()
        }
        _ => n.to_string(),
    }
}

#[derive(serde::Deserialize)]
struct IdOnly<'a> {
    #[serde(borrow, default, deserialize_with = "present")]
    id: Option<&'a RawValue>,
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue as serde::Deserialize>::deserialize(d).map(Some)
}

fn respond(status: StatusCode, ct: Option<&'static str>, body: Bytes) -> Response<DemoBody> {
    let mut r = Response::new(http_body_util::combinators::UnsyncBoxBody::new(
        Full::new(body).map_err(|e| match e {}),
    ));
    *r.status_mut() = status;
    if let Some(ct) = ct {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    r
}

/// Serves `mock` on `listener` until `shutdown`.
pub async fn run(
    listener: tokio::net::TcpListener,
    mock: Arc<Mock>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    crate::server::serve(
        listener,
        move |_peer| {
            let m = mock.clone();
            move |req| {
                let m = m.clone();
                async move { m.handle(req).await }
            }
        },
        shutdown,
        std::time::Duration::from_secs(1),
    )
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stdio session's progress and log lines before a reply come back before the mock's
    /// reply, the progress with the live request's token.
    #[test]
    fn notifications_inside_a_stdio_reply_come_before_it_with_the_live_token() {
        let lines = [
            r#"{"rpctap_recording":1,"part":0,"transport":"stdio"}"#,
            r#"{"event":"message","ts":1,"exchange":1,"scope":"session:stdio-1","direction":"c2s","transport":"stdio","kind":"request","id":1,"method":"tools/call","message":{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","_meta":{"progressToken":1}}}}"#,
            r#"{"event":"message","ts":2,"exchange":1,"scope":"session:stdio-1","direction":"s2c","transport":"stdio","kind":"notification","method":"notifications/progress","message":{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":1,"progress":1}}}"#,
            r#"{"event":"message","ts":3,"exchange":1,"scope":"session:stdio-1","direction":"s2c","transport":"stdio","kind":"notification","method":"notifications/message","message":{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}}"#,
            r#"{"event":"message","ts":4,"exchange":1,"scope":"session:stdio-1","direction":"s2c","transport":"stdio","kind":"result","id":1,"message":{"jsonrpc":"2.0","id":1,"result":{"ok":true}}}"#,
        ];
        let mut rec = Capture::default();
        crate::record::reader::parse_part(&lines.join("\n"), "t", &mut rec, true).unwrap();
        let mock = Mock::from_recording(&rec);
        let (before, reply, then) = mock.answer_message(
            r#"{"jsonrpc":"2.0","id":"live","method":"tools/call","params":{"name":"slow","_meta":{"progressToken":"live-tok"}}}"#,
        );
        assert_eq!(before.len(), 2, "{before:?}");
        let p: Value = serde_json::from_str(&before[0]).unwrap();
        assert_eq!(p["params"]["progressToken"], "live-tok");
        let l: Value = serde_json::from_str(&before[1]).unwrap();
        assert_eq!(l["method"], "notifications/message");
        let r: Value = serde_json::from_str(&reply.unwrap()).unwrap();
        assert_eq!(
            (r["id"].clone(), r["result"]["ok"].clone()),
            ("live".into(), true.into())
        );
        assert!(then.is_empty());
    }

    /// Plumbing: `ping` and `logging/setLevel` answered though never recorded, a list's first
    /// page whatever its params, a cursor the recording never gave out refused; an operation
    /// with other params still refused.
    #[test]
    fn plumbing_is_answered_whatever_the_params_and_operations_are_matched() {
        let lines = [
            r#"{"rpctap_recording":1,"part":0,"transport":"stdio"}"#,
            r#"{"event":"message","ts":1,"exchange":1,"scope":"session:s","direction":"c2s","transport":"stdio","kind":"request","id":1,"method":"tools/list","message":{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"x":1}}}}"#,
            r#"{"event":"message","ts":2,"exchange":1,"scope":"session:s","direction":"s2c","transport":"stdio","kind":"result","id":1,"message":{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}}"#,
            r#"{"event":"message","ts":3,"exchange":1,"scope":"session:s","direction":"c2s","transport":"stdio","kind":"request","id":2,"method":"tools/call","message":{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a"}}}"#,
            r#"{"event":"message","ts":4,"exchange":1,"scope":"session:s","direction":"s2c","transport":"stdio","kind":"result","id":2,"message":{"jsonrpc":"2.0","id":2,"result":{"content":[]}}}"#,
        ];
        let mut rec = Capture::default();
        crate::record::reader::parse_part(&lines.join("\n"), "t", &mut rec, true).unwrap();
        let mock = Mock::from_recording(&rec);
        let reply = |req: &str| -> Value {
            serde_json::from_str(&mock.answer_message(req).1.unwrap()).unwrap()
        };
        for m in ["ping", "logging/setLevel"] {
            let r = reply(&format!(
                r#"{{"jsonrpc":"2.0","id":7,"method":"{m}","params":{{"level":"debug"}}}}"#
            ));
            assert_eq!(r["result"], serde_json::json!({}), "{m}: {r}");
        }
        let r = reply(r#"{"jsonrpc":"2.0","id":8,"method":"tools/list","params":{"other":true}}"#);
        assert_eq!(r["result"]["tools"], serde_json::json!([]), "{r}");
        let r = reply(r#"{"jsonrpc":"2.0","id":9,"method":"tools/list","params":{"cursor":"c2"}}"#);
        assert_eq!(r["error"]["code"], -32602, "{r}");
        let r = reply(r#"{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"b"}}"#);
        assert_eq!(r["error"]["code"], -32602, "{r}");
    }
}

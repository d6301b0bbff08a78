//! Exports of a recording: exchange documents (seed 004's input format, chunked to its limits)
//! and HAR 1.2 for browsers' developer tools and mitmproxy.

use super::reader::Capture;
use crate::events::Transport;
use crate::events::{Event, HttpEvent, MessageEvent};
use crate::rpc::Kind;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::time::{Duration, UNIX_EPOCH};

/// A call and its replies (or a lone notification, or a lone reply): never split.
#[derive(Debug, Default, Clone)]
struct Unit<'a> {
    requests: Vec<&'a MessageEvent>,
    responses: Vec<&'a MessageEvent>,
}

impl Unit<'_> {
    fn bytes(&self) -> usize {
        self.requests
            .iter()
            .chain(&self.responses)
            .map(|m| m.message.len() + 1)
            .sum()
    }
}

/// The client→server requests and notifications of one scope, with the server's replies to
/// them, grouped in units. Server→client requests and the client's replies are left out: an
/// exchange document has one direction of calls.
fn units<'a>(messages: &[&'a MessageEvent]) -> Vec<Unit<'a>> {
    let mut units: Vec<Unit<'a>> = Vec::new();
    // id text → unit indices of calls still waiting, oldest first
    let mut open: HashMap<String, std::collections::VecDeque<usize>> = HashMap::new();
    for &m in messages.iter().filter(|m| !m.is_empty_batch()) {
        match (m.is_c2s(), m.kind) {
            (true, Kind::Request | Kind::Notification | Kind::Invalid) => {
                units.push(Unit {
                    requests: vec![m],
                    responses: vec![],
                });
                if let (Some(id), Kind::Request | Kind::Invalid) = (m.id_text(), m.kind) {
                    open.entry(id).or_default().push_back(units.len() - 1);
                }
            }
            (false, Kind::Result | Kind::Error | Kind::Invalid) => {
                let slot = m
                    .id_text()
                    .and_then(|id| open.get_mut(&id))
                    .and_then(|v| v.pop_front());
                match slot {
                    Some(i) => units[i].responses.push(m),
                    None => units.push(Unit {
                        requests: vec![],
                        responses: vec![m],
                    }),
                }
            }
            _ => {}
        }
    }
    units
}

fn doc(units: &[Unit<'_>]) -> String {
    let req: Vec<std::borrow::Cow<'_, str>> = units
        .iter()
        .flat_map(|u| u.requests.iter().map(|m| m.json_text()))
        .collect();
    let resp: Vec<std::borrow::Cow<'_, str>> = units
        .iter()
        .flat_map(|u| u.responses.iter().map(|m| m.json_text()))
        .collect();
    format!(
        "{{\"request\":[{}],\"response\":[{}]}}",
        req.join(","),
        resp.join(",")
    )
}

/// Every scope's messages, scopes in order of first appearance (one pass over the recording).
fn by_scope(rec: &Capture) -> Vec<(String, Vec<&MessageEvent>)> {
    let mut index: HashMap<&crate::events::Scope, usize> = HashMap::new();
    let mut out: Vec<(String, Vec<&MessageEvent>)> = Vec::new();
    for m in rec.messages() {
        let i = *index.entry(&m.scope).or_insert_with(|| {
            out.push((m.scope.to_string(), Vec::new()));
            out.len() - 1
        });
        out[i].1.push(m);
    }
    out
}

/// Exchange documents for every scope, each within `max_envelopes` per side and `max_bytes`.
/// Returns the documents and warnings (a single call larger than the limits goes alone).
pub fn exchange_documents(
    rec: &Capture,
    max_envelopes: usize,
    max_bytes: usize,
) -> (Vec<String>, Vec<String>) {
    const WRAPPER: usize = r#"{"request":[],"response":[]}"#.len();
    let mut out = Vec::new();
    let mut warnings = Vec::new();
    for (scope, msgs) in by_scope(rec) {
        let mut chunk: Vec<Unit<'_>> = Vec::new();
        let (mut nreq, mut nresp, mut bytes) = (0, 0, WRAPPER);
        for u in units(&msgs) {
            let fits = nreq + u.requests.len() <= max_envelopes
                && nresp + u.responses.len() <= max_envelopes
                && bytes + u.bytes() <= max_bytes;
            if !fits && !chunk.is_empty() {
                out.push(doc(&chunk));
                chunk.clear();
                (nreq, nresp, bytes) = (0, 0, WRAPPER);
            }
            if u.requests.len() > max_envelopes
                || u.responses.len() > max_envelopes
                || WRAPPER + u.bytes() > max_bytes
            {
                warnings.push(format!(
                    "{scope}: a call of {} bytes does not fit the limits; exported alone",
                    u.bytes()
                ));
            }
            nreq += u.requests.len();
            nresp += u.responses.len();
            bytes += u.bytes();
            chunk.push(u);
        }
        if !chunk.is_empty() {
            out.push(doc(&chunk));
        }
    }
    (out, warnings)
}

/// A recorded response head: status, content type, headers, time.
type Head = (u16, Option<String>, Vec<(String, String)>, u64);

fn rfc3339(ns: u64) -> String {
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_nanos(ns)).to_string()
}

fn header_list(h: &[(String, String)]) -> Vec<Value> {
    h.iter()
        .map(|(k, v)| json!({ "name": k, "value": v }))
        .collect()
}

fn body_text(msgs: &[&MessageEvent], sse: bool) -> String {
    if sse {
        msgs.iter()
            .map(|m| {
                let id = m
                    .sse_id
                    .as_ref()
                    .map(|i| format!("id: {i}\n"))
                    .unwrap_or_default();
                format!("event: message\n{id}data: {}\n\n", m.json_text())
            })
            .collect()
    } else if msgs.len() == 1 && msgs[0].batch_index.is_none() {
        msgs[0].json_text().to_string()
    } else if msgs.is_empty() {
        String::new()
    } else {
        format!(
            "[{}]",
            msgs.iter()
                .map(|m| m.json_text())
                .collect::<Vec<_>>()
                .join(",")
        )
    }
}

/// HAR 1.2: one entry per HTTP exchange, annotated with `_rpctap` (methods, ids, anomalies).
pub fn har(rec: &Capture) -> Value {
    let listen = rec
        .header
        .get("listen")
        .and_then(Value::as_str)
        .unwrap_or("localhost");
    let mut entries = Vec::new();
    let mut anomalies: HashMap<u64, Vec<String>> = HashMap::new();
    for e in &rec.events {
        if let Event::Anomaly(a) = e {
            anomalies
                .entry(a.exchange)
                .or_default()
                .push(a.code.to_string());
        }
    }
    let mut by_exchange: HashMap<u64, Vec<&MessageEvent>> = HashMap::new();
    for m in rec.messages() {
        by_exchange.entry(m.exchange).or_default().push(m);
    }
    let mut responses: HashMap<u64, Head> = HashMap::new();
    let mut ends: HashMap<u64, u64> = HashMap::new();
    for h in rec.http() {
        match h {
            HttpEvent::Response {
                ts,
                exchange,
                status,
                content_type,
                headers,
                ..
            } => {
                responses.insert(
                    *exchange,
                    (
                        *status,
                        content_type.as_ref().map(|c| c.to_string()),
                        headers.pairs(),
                        *ts,
                    ),
                );
            }
            HttpEvent::End { ts, exchange, .. } => {
                ends.insert(*exchange, *ts);
            }
            HttpEvent::Request { .. }
            | HttpEvent::Endpoint { .. }
            | HttpEvent::Auth { .. }
            | HttpEvent::AgentCard { .. }
            | HttpEvent::Binary { .. } => {}
        }
    }
    for h in rec.http() {
        let HttpEvent::Request {
            ts,
            exchange,
            method,
            path,
            headers,
            ..
        } = h
        else {
            continue;
        };
        let msgs = by_exchange.get(exchange).cloned().unwrap_or_default();
        let (req_msgs, resp_msgs): (Vec<&MessageEvent>, Vec<&MessageEvent>) =
            msgs.iter().partition(|m| m.is_c2s());
        let (status, ct, rheaders, rts) =
            responses
                .get(exchange)
                .cloned()
                .unwrap_or((0, None, vec![], *ts));
        let sse = ct.as_deref().is_some_and(crate::media::is_event_stream);
        let req_ct = headers.get("content-type");
        let req_text = body_text(&req_msgs, false);
        let resp_text = body_text(&resp_msgs, sse);
        let end = ends.get(exchange).copied().unwrap_or(rts);
        let mut methods: Vec<String> = msgs
            .iter()
            .filter_map(|m| m.method.as_deref().map(str::to_string))
            .collect();
        methods.dedup();
        let ids: Vec<Value> = req_msgs
            .iter()
            .filter_map(|m| m.id.as_ref().and_then(|i| serde_json::to_value(i).ok()))
            .collect();
        let mut request = json!({
            "method": method,
            "url": format!("http://{listen}{path}"),
            "httpVersion": "HTTP/1.1",
            "cookies": [],
            "headers": header_list(&headers.pairs()),
            "queryString": [],
            "headersSize": -1,
            "bodySize": req_text.len(),
        });
        // A WebSocket: its messages as Chrome's HAR writes them (`_webSocketMessages`), not as
        // bodies.
        let ws = status == 101 && msgs.iter().any(|m| m.transport == Transport::Ws);
        if !req_text.is_empty() && !ws {
            request["postData"] = json!({ "mimeType": req_ct.unwrap_or_else(|| "application/json".into()), "text": req_text });
        }
        let resp_text = if ws { String::new() } else { resp_text };
        let mut entry = json!({
            "startedDateTime": rfc3339(*ts),
            "time": (end.saturating_sub(*ts)) as f64 / 1e6,
            "request": request,
            "response": {
                "status": status,
                "statusText": http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or(""),
                "httpVersion": "HTTP/1.1",
                "cookies": [],
                "headers": header_list(&rheaders),
                "content": { "size": resp_text.len(), "mimeType": ct.unwrap_or_default(), "text": resp_text },
                "redirectURL": "",
                "headersSize": -1,
                "bodySize": resp_text.len(),
            },
            "cache": {},
            "timings": { "send": 0, "wait": (rts.saturating_sub(*ts)) as f64 / 1e6, "receive": (end.saturating_sub(rts)) as f64 / 1e6 },
            "_rpctap": { "exchange": exchange, "methods": methods, "ids": ids, "anomalies": anomalies.get(exchange).cloned().unwrap_or_default() },
        });
        if ws {
            entry["_resourceType"] = json!("websocket");
            let frames: Vec<Value> = super::reader::whole_messages(msgs.iter().copied())
                .iter()
                .map(|members| {
                    let m = members[0];
                    json!({
                        "type": if m.is_c2s() { "send" } else { "receive" },
                        "time": m.ts as f64 / 1e9,
                        "opcode": 1,
                        "data": super::reader::whole_text(members),
                    })
                })
                .collect();
            entry["_webSocketMessages"] = Value::Array(frames);
        }
        entries.push(entry);
    }
    entries.extend(stdio_entries(rec));
    json!({
        "log": {
            "version": "1.2",
            "creator": { "name": "rpctap", "version": env!("CARGO_PKG_VERSION") },
            "entries": entries,
        }
    })
}

/// A stdio session's traffic as HAR entries: HAR knows only HTTP, so each call is one entry —
/// a `POST stdio://PROGRAM/METHOD` whose body is the request line and whose response (status
/// 200, or 0 when the call ended without a reply) is the reply line — and each notification an
/// entry with no response; `_rpctap` says `transport: stdio`, the direction, id, outcome and
/// anomalies.
fn stdio_entries(rec: &Capture) -> Vec<Value> {
    use std::collections::VecDeque;
    type Key = (String, bool, String);
    let program = rec
        .header
        .get("command")
        .and_then(|c| c.get(0))
        .and_then(Value::as_str)
        .map(|p| p.rsplit('/').next().unwrap_or(p).to_string())
        .unwrap_or_else(|| "server".into());
    let mut requests: HashMap<Key, VecDeque<&MessageEvent>> = HashMap::new();
    let mut replies: HashMap<Key, VecDeque<&MessageEvent>> = HashMap::new();
    let mut out = Vec::new();
    let entry = |req: &MessageEvent,
                 reply: Option<&MessageEvent>,
                 call: Option<&crate::events::CallEvent>| {
        let method = req.method.as_deref().unwrap_or("");
        let text = req.wire_text().into_owned();
        let reply_text = reply
            .map(|r| r.wire_text().into_owned())
            .unwrap_or_default();
        let status = if reply.is_some() { 200 } else { 0 };
        let time = call.and_then(|c| c.latency_us).unwrap_or(0) as f64 / 1e3;
        json!({
            "startedDateTime": rfc3339(req.ts),
            "time": time,
            "request": {
                "method": "POST",
                "url": format!("stdio://{program}/{method}"),
                "httpVersion": "stdio",
                "cookies": [],
                "headers": [],
                "queryString": [],
                "postData": { "mimeType": "application/json", "text": text },
                "headersSize": -1,
                "bodySize": text.len(),
            },
            "response": {
                "status": status,
                "statusText": "",
                "httpVersion": "stdio",
                "cookies": [],
                "headers": [],
                "content": { "size": reply_text.len(), "mimeType": "application/json", "text": reply_text },
                "redirectURL": "",
                "headersSize": -1,
                "bodySize": reply_text.len(),
            },
            "cache": {},
            "timings": { "send": 0, "wait": time, "receive": 0 },
            "_rpctap": {
                "transport": "stdio",
                "direction": if req.is_c2s() { "c2s" } else { "s2c" },
                "scope": req.scope.to_string(),
                "methods": [method],
                "ids": req.id.as_ref().and_then(|i| serde_json::to_value(i).ok()).into_iter().collect::<Vec<_>>(),
                "outcome": call.map(|c| c.outcome.label()),
                "anomalies": call.map(|c| c.anomalies.clone()).unwrap_or_default(),
            },
        })
    };
    for e in &rec.events {
        match e {
            Event::Message(m) if m.transport == Transport::Stdio => {
                let id = m.id_text().unwrap_or_default();
                match m.kind {
                    Kind::Notification => out.push(entry(m, None, None)),
                    Kind::Result | Kind::Error => replies
                        .entry((m.scope.to_string(), !m.is_c2s(), id))
                        .or_default()
                        .push_back(m),
                    Kind::Request | Kind::Invalid => requests
                        .entry((m.scope.to_string(), m.is_c2s(), id))
                        .or_default()
                        .push_back(m),
                }
            }
            Event::Call(c) => {
                let key = (
                    c.scope.to_string(),
                    c.direction == crate::events::Direction::ClientToServer,
                    c.id.to_json_text(),
                );
                let Some(req) = requests.get_mut(&key).and_then(VecDeque::pop_front) else {
                    continue;
                };
                let reply = replies.get_mut(&key).and_then(VecDeque::pop_front);
                out.push(entry(req, reply, Some(c)));
            }
            _ => {}
        }
    }
    out
}

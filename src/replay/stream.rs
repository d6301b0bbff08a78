//! Replaying a message stream — a stdio session ([`super::stdio`]) or a WebSocket connection —
//! whatever carries it: the client's recorded messages are sent in order; after one with calls,
//! their replies are awaited (by id) and judged as on HTTP. The client's recorded answers to
//! server requests (sampling, elicitation, roots) are not sent in that order but when the
//! server makes the request again — typically while one of the client's calls waits for it.
//!
//! A recorded WebSocket (an exchange answered `101`) is replayed by opening a WebSocket to the
//! target again (`ws://` or `wss://` for the target's `http://` or `https://`, the recorded
//! path), with `tokio-tungstenite`.

use super::diff::Pattern;
use super::{judge, Expected, Report};
use crate::events::MessageEvent;
use crate::record::reader::{whole_messages, whole_text};
use crate::rpc::{self, Body, Kind};
use futures_util::{SinkExt, StreamExt};
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

/// What the server said, as a transport's reader hands it over.
pub(super) enum FromServer {
    /// A reply to one of the client's calls, by id text.
    Reply(String, rpc::Envelope),
    /// A request of the server's, by id text.
    Request(String),
}

/// The replies and requests in one message of the server's (a line, a WebSocket message).
pub(super) fn from_server(msg: &[u8]) -> Vec<FromServer> {
    let envs = match rpc::parse_body(&bytes::Bytes::copy_from_slice(msg)) {
        Body::Single(e) => vec![e],
        Body::Batch(v) => v,
        Body::ParseError(_) => return vec![],
    };
    envs.into_iter()
        .filter_map(|e| {
            let id = e.id.as_ref().map(|i| i.to_json_text());
            match (e.kind, id) {
                (Kind::Result | Kind::Error, Some(id)) => Some(FromServer::Reply(id, e)),
                (Kind::Request, Some(id)) => Some(FromServer::Request(id)),
                _ => None,
            }
        })
        .collect()
}

/// A transport, as the driver sees it: messages out (without framing), what came back in.
pub(super) struct Peer {
    pub out: mpsc::UnboundedSender<String>,
    pub rx: mpsc::UnboundedReceiver<FromServer>,
}

/// Sends the client's messages of `msgs` through `peer` and judges the replies into `report`.
pub(super) async fn drive(
    recorded: &Expected<'_>,
    msgs: &[&MessageEvent],
    ignore: &[String],
    timeout: Duration,
    mut peer: Peer,
    report: &mut Report,
) {
    let patterns: Vec<Pattern> = ignore.iter().map(|p| Pattern::parse(p)).collect();
    let mut replies: HashMap<String, rpc::Envelope> = HashMap::new();
    let lines = whole_messages(msgs.iter().copied().filter(|m| m.is_c2s()));
    // The client's answers to server requests, by the request's id.
    let mut answers: HashMap<String, String> = HashMap::new();
    for members in &lines {
        if members.iter().all(|m| m.is_response()) {
            for m in members.iter() {
                if let Some(id) = m.id_text() {
                    answers.insert(id.to_string(), m.wire_text().into_owned());
                }
            }
        }
    }
    // Takes what the server said; answers a request of its at once when the recording has the
    // answer.
    let mut take = |msg: FromServer, replies: &mut HashMap<String, rpc::Envelope>| match msg {
        FromServer::Reply(id, e) => {
            replies.insert(id, e);
        }
        FromServer::Request(id) => {
            if let Some(a) = answers.remove(&id) {
                let _ = peer.out.send(a);
            }
        }
    };
    let mut gone = false;
    for members in lines.iter().filter(|l| !l.iter().all(|m| m.is_response())) {
        let t0 = Instant::now();
        // The connection gone, the calls are still judged: each gets no reply.
        if peer.out.send(whole_text(members)).is_err() && !gone {
            gone = true;
            report
                .warnings
                .push("the connection to the server closed".into());
        }
        let calls: Vec<&MessageEvent> = members
            .iter()
            .copied()
            .filter(|m| {
                m.kind == Kind::Request
                    || (m.kind == Kind::Invalid && m.id.is_some() && m.method.is_some())
            })
            .collect();
        if calls.is_empty() {
            continue;
        }
        report.exchanges += 1;
        let deadline = t0 + timeout;
        while calls
            .iter()
            .any(|c| c.id_text().is_some_and(|id| !replies.contains_key(&id)))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, peer.rx.recv()).await {
                Ok(Some(msg)) => take(msg, &mut replies),
                _ => break,
            }
        }
        let latency_ms = t0.elapsed().as_secs_f64() * 1e3;
        for call in calls {
            let c = judge(
                recorded,
                &patterns,
                call.exchange,
                call,
                Some(200),
                &replies,
                latency_ms,
            );
            if let Some(id) = call.id_text() {
                replies.remove(&id);
            }
            if c.pass {
                report.passed += 1;
            } else {
                report.failed += 1;
            }
            report.calls.push(c);
        }
    }
    if !answers.is_empty() {
        let mut ids: Vec<&String> = answers.keys().collect();
        ids.sort();
        report.warnings.push(format!(
            "the server did not make the requests the client answered in the recording (ids {})",
            ids.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// The WebSocket URL of an `http(s)://` target and a path.
pub(super) fn ws_url(origin: &str, path: &str) -> String {
    let rest = origin
        .strip_prefix("https://")
        .map(|r| format!("wss://{r}"))
        .or_else(|| origin.strip_prefix("http://").map(|r| format!("ws://{r}")))
        .unwrap_or_else(|| origin.to_string());
    format!("{rest}{path}")
}

/// Replays one recorded WebSocket connection (its messages `msgs`) on a new WebSocket to
/// `url`, with the extra headers. A connection that cannot be opened is a warning, and its
/// calls get no reply.
pub(super) async fn ws(
    recorded: &Expected<'_>,
    url: &str,
    headers: &[(http::HeaderName, http::HeaderValue)],
    msgs: &[&MessageEvent],
    ignore: &[String],
    timeout: Duration,
    report: &mut Report,
) {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = match url.into_client_request() {
        Ok(r) => r,
        Err(e) => {
            report
                .warnings
                .push(format!("WebSocket {url}: not a WebSocket URL: {e}"));
            return;
        }
    };
    for (k, v) in headers {
        req.headers_mut().insert(k.clone(), v.clone());
    }
    let conn = tokio::time::timeout(timeout, tokio_tungstenite::connect_async(req)).await;
    let ws = match conn {
        Ok(Ok((ws, _))) => ws,
        Ok(Err(e)) => {
            report
                .warnings
                .push(format!("WebSocket {url}: cannot connect: {e}"));
            return drive(recorded, msgs, ignore, Duration::ZERO, closed(), report).await;
        }
        Err(_) => {
            report
                .warnings
                .push(format!("WebSocket {url}: no handshake within {timeout:?}"));
            return drive(recorded, msgs, ignore, Duration::ZERO, closed(), report).await;
        }
    };
    let (mut sink, mut stream) = ws.split();
    let (tx, rx) = mpsc::unbounded_channel::<FromServer>();
    let reader = tokio::spawn(async move {
        while let Some(Ok(m)) = stream.next().await {
            let text = match m {
                Message::Text(t) => t,
                Message::Close(_) => break,
                _ => continue,
            };
            for msg in from_server(text.as_bytes()) {
                if tx.send(msg).is_err() {
                    return;
                }
            }
        }
    });
    let (out, mut to_server) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(text) = to_server.recv().await {
            if sink.send(Message::text(text)).await.is_err() {
                return;
            }
        }
        // The client's end: a close frame, as the recorded client's.
        let _ = sink.close().await;
    });
    drive(recorded, msgs, ignore, timeout, Peer { out, rx }, report).await;
    let _ = tokio::time::timeout(Duration::from_secs(2), writer).await;
    reader.abort();
}

/// A peer that takes nothing and answers nothing (a connection that could not be opened).
fn closed() -> Peer {
    let (out, _) = mpsc::unbounded_channel();
    let (_, rx) = mpsc::unbounded_channel();
    Peer { out, rx }
}

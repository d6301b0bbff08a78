//! Replaying a recording against a server (`rpctap replay`), as regression tests.
//!
//! The recorded client→server exchanges are re-sent in order, with the same shapes (single,
//! batch, notification) and ids; MCP sessions are re-established (the new `Mcp-Session-Id` of
//! each recorded `initialize` is substituted for the old one). Each call gets a verdict in the
//! vocabulary testers know: Succeeded, Error reported, Rejected (HTTP N), No reply, or Mismatch
//! with a path-by-path diff.
//!
//! A recorded WebSocket is opened again on the target and its client messages sent in order
//! ([`stream`]). The legacy HTTP+SSE transport (MCP 2024-11-05) is replayed too: a recorded `GET` stream is
//! opened again on the target, its `endpoint` event gives the new session's POST URL, each
//! recorded `POST …?sessionId=old` goes to that URL instead, and its replies are awaited on the
//! stream.
//!
//! Its rooms: this file holds the options, the reports' types and the driver; `legacy` the
//! legacy HTTP+SSE client, `judge` a call's verdict, `report` the JUnit and text reports,
//! `stream` the driver for message streams (stdio, WebSocket), `diff` the structural diff.

pub mod diff;
mod judge;
mod learn;
mod legacy;
pub mod mock;
mod report;
pub mod stdio;
pub mod stream;

use judge::judge;
use legacy::{legacy_session, LegacyStream};
pub use report::{junit, text};

use crate::events::{Direction, Outcome};
use crate::events::{HttpEvent, MessageEvent};
use crate::inspect::sse::SseDecoder;
use crate::proxy::body::ForwardBody;
use crate::record::reader::Capture;
use crate::rpc::{self, Body, Kind};
use bytes::Bytes;
use diff::{Diff, Pattern};
use http::{HeaderName, HeaderValue, Request, Uri};
use http_body_util::BodyExt;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub target: Uri,
    /// Paths not compared (`result.serverInfo.version`, `result.content[*].text`).
    pub ignore: Vec<String>,
    pub timeout: Duration,
    /// Extra headers (e.g. an `Authorization` the recording redacted).
    pub headers: Vec<(String, String)>,
    pub insecure: bool,
    /// How long a target still starting is waited for.
    pub wait: Duration,
    /// Requests keep the recorded gaps between them (`--pace`).
    pub pace: bool,
}

impl Report {
    /// Fails every call slower than `max` (`--max-duration`), saying so in its diffs.
    pub fn limit_duration(&mut self, max: Duration) {
        let limit = max.as_secs_f64() * 1e3;
        for c in &mut self.calls {
            if c.latency_ms > limit {
                if c.pass {
                    c.pass = false;
                    self.passed = self.passed.saturating_sub(1);
                    self.failed += 1;
                }
                c.diffs.push(Diff {
                    path: "$latency".into(),
                    expected: format!("at most {}", crate::units::show_secs(max)),
                    actual: format!("{:.1} ms", c.latency_ms),
                });
            }
        }
    }
}

/// A call's verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "verdict")]
pub enum Verdict {
    /// A result, equal to the recorded one.
    Succeeded,
    /// A JSON-RPC error (equal to the recorded one when `pass`).
    #[serde(rename = "Error reported")]
    ErrorReported,
    /// Refused at the HTTP layer without a JSON-RPC reply.
    #[serde(rename = "Rejected")]
    Rejected { status: u16 },
    /// Nothing usable came back.
    #[serde(rename = "No reply")]
    NoReply,
    /// A reply that differs from the recorded one.
    Mismatch,
}

impl std::fmt::Display for Verdict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Verdict::Succeeded => f.write_str("Succeeded"),
            Verdict::ErrorReported => f.write_str("Error reported"),
            Verdict::Rejected { status } => write!(f, "Rejected (HTTP {status})"),
            Verdict::NoReply => f.write_str("No reply"),
            Verdict::Mismatch => f.write_str("Mismatch"),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CallReport {
    pub exchange: u64,
    pub scope: String,
    pub method: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    pub id: String,
    #[serde(flatten)]
    pub verdict: Verdict,
    /// What was recorded, in the same words.
    pub recorded: String,
    pub pass: bool,
    pub diffs: Vec<Diff>,
    pub latency_ms: f64,
}

impl CallReport {
    pub fn name(&self) -> String {
        match &self.target {
            Some(t) => format!("{}:{} id={}", self.method, t, self.id),
            None => format!("{} id={}", self.method, self.id),
        }
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    pub target: String,
    pub exchanges: usize,
    pub calls: Vec<CallReport>,
    pub passed: usize,
    pub failed: usize,
    pub warnings: Vec<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("bad --header {0:?}: {1}")]
    Header(String, String),
    #[error("cannot build a request to {0}: {1}")]
    Request(String, String),
    /// The target cannot be reached at all: the server is down, not changed (exit 2).
    #[error("cannot reach the target {0}: {1}")]
    Unreachable(String, String),
    #[error("bad --ignore {0:?}: {1}")]
    Ignore(String, String),
}

/// Whether the target accepts a TCP connection (so "server down" is told apart from "server
/// changed" before any call is replayed).
async fn reachable(target: &Uri, timeout: Duration) -> Result<(), ReplayError> {
    crate::proxy::upstream::reachable(target, timeout)
        .await
        .map_err(|e| ReplayError::Unreachable(target.to_string(), e))
}

/// The request target on the server: the target's base path + the recorded path, unless the
/// recorded path already starts with that base (a user who typed `--target http://host/mcp`
/// for a recording of `/mcp` means the same server, not `/mcp/mcp`).
fn target_path(base: &str, recorded: &str) -> String {
    let already = recorded
        .strip_prefix(base)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with(['/', '?']));
    if base.is_empty() || already {
        recorded.to_string()
    } else {
        format!("{base}{recorded}")
    }
}

/// One recorded HTTP exchange, with what it carried.
struct Exchange<'a> {
    id: u64,
    method: String,
    path: String,
    session: Option<String>,
    headers: Vec<(String, String)>,
    status: Option<u16>,
    resp_session: Option<String>,
    c2s: Vec<&'a MessageEvent>,
}

fn exchanges(rec: &Capture) -> Vec<Exchange<'_>> {
    let mut list: Vec<Exchange<'_>> = Vec::new();
    let mut index: HashMap<u64, usize> = HashMap::new();
    for h in rec.http() {
        match h {
            HttpEvent::Request {
                exchange,
                method,
                path,
                session,
                headers,
                ..
            } => {
                index.insert(*exchange, list.len());
                list.push(Exchange {
                    id: *exchange,
                    method: method.to_string(),
                    path: path.clone(),
                    session: session.clone(),
                    headers: headers.pairs(),
                    status: None,
                    resp_session: None,
                    c2s: vec![],
                });
            }
            HttpEvent::Response {
                exchange,
                status,
                headers,
                ..
            } => {
                if let Some(&i) = index.get(exchange) {
                    list[i].status = Some(*status);
                    list[i].resp_session = headers.get("mcp-session-id");
                }
            }
            HttpEvent::End { .. }
            | HttpEvent::Endpoint { .. }
            | HttpEvent::Auth { .. }
            | HttpEvent::AgentCard { .. }
            | HttpEvent::Binary { .. } => {}
        }
    }
    for m in rec.messages().filter(|m| m.is_c2s()) {
        if let Some(&i) = index.get(&m.exchange) {
            list[i].c2s.push(m);
        }
    }
    list
}

/// The request body as the client sent it (batch members joined in order).
fn body_of(ex: &Exchange<'_>) -> String {
    if ex.c2s.len() == 1 && ex.c2s[0].batch_index.is_none() {
        return ex.c2s[0].json_text().to_string();
    }
    format!(
        "[{}]",
        ex.c2s
            .iter()
            .map(|m| m.json_text())
            .collect::<Vec<_>>()
            .join(",")
    )
}

const SKIP_HEADERS: [&str; 10] = [
    "host",
    "content-length",
    "connection",
    "transfer-encoding",
    "keep-alive",
    "te",
    "upgrade",
    "mcp-session-id",
    "x-forwarded-for",
    "x-forwarded-proto",
];

/// The recorded reply (s2c response) to a c2s call, found in its scope after it.
/// What the recording says about its calls, indexed once (a lookup per call, not a scan of the
/// recording: replay stays linear in its size).
struct Expected<'a> {
    /// (exchange, id) → the call's recorded outcome.
    outcomes: HashMap<(u64, &'a crate::rpc::Id), &'a Outcome>,
    /// (scope, id) → the server's replies with that id, in order.
    replies: HashMap<(&'a crate::events::Scope, &'a crate::rpc::Id), Vec<&'a MessageEvent>>,
    /// exchange → its first error reply with id null (it answered the whole request).
    null_errors: HashMap<u64, &'a MessageEvent>,
    /// Exchanges answered with an event stream.
    streams: std::collections::HashSet<u64>,
}

impl<'a> Expected<'a> {
    fn new(rec: &'a Capture) -> Self {
        let mut r = Expected {
            outcomes: HashMap::new(),
            replies: HashMap::new(),
            null_errors: HashMap::new(),
            streams: Default::default(),
        };
        for c in rec
            .calls()
            .filter(|c| c.direction == Direction::ClientToServer)
        {
            r.outcomes.entry((c.exchange, &c.id)).or_insert(&c.outcome);
        }
        for m in rec.messages().filter(|m| !m.is_c2s()) {
            match &m.id {
                Some(id) if m.is_response() && *id != crate::rpc::Id::Null => {
                    r.replies.entry((&m.scope, id)).or_default().push(m)
                }
                None | Some(crate::rpc::Id::Null) if m.kind == Kind::Error => {
                    r.null_errors.entry(m.exchange).or_insert(m);
                }
                _ => {}
            }
        }
        for h in rec.http() {
            if let HttpEvent::Response {
                exchange,
                content_type: Some(ct),
                ..
            } = h
            {
                if crate::media::is_event_stream(ct) {
                    r.streams.insert(*exchange);
                }
            }
        }
        r
    }

    /// The recorded reply to `call`: in its own exchange if there is one, else the first later
    /// reply with its id in its scope, else a null-id error that answered its whole request.
    fn reply(&self, call: &MessageEvent) -> Option<&'a MessageEvent> {
        let id = call.id.as_ref()?;
        let later = self
            .replies
            .get(&(&call.scope, id))
            .into_iter()
            .flatten()
            .filter(|m| m.ts >= call.ts);
        later
            .clone()
            .find(|m| m.exchange == call.exchange)
            .or_else(|| later.clone().next())
            .copied()
            .or_else(|| self.null_errors.get(&call.exchange).copied())
    }

    fn outcome(&self, call: &MessageEvent) -> Outcome {
        call.id
            .as_ref()
            .and_then(|id| self.outcomes.get(&(call.exchange, id)))
            .map(|o| (*o).clone())
            .unwrap_or(Outcome::Missing {
                reason: "not in the recording".into(),
            })
    }
}

fn member(raw: &str, key: &str) -> Option<Value> {
    rpc::member(raw.as_bytes(), key)
}

/// The replies found in a replayed body, keyed by exact id text.
fn replies_in(ct: &str, body: &Bytes) -> HashMap<String, rpc::Envelope> {
    let mut bodies = Vec::new();
    if crate::media::is_event_stream(ct) {
        let mut d = SseDecoder::new(64 << 20);
        d.feed(body, |e| {
            if e.kind() == "message" && !e.data.is_empty() {
                bodies.push(e.data);
            }
        });
    } else if !body.is_empty() {
        bodies.push(body.clone());
    }
    let mut out = HashMap::new();
    for b in bodies {
        let envs = match rpc::parse_body(&b) {
            Body::Single(e) => vec![e],
            Body::Batch(v) => v,
            Body::ParseError(_) => vec![],
        };
        for e in envs.into_iter().filter(|e| e.kind.is_response()) {
            if let Some(id) = &e.id {
                out.entry(id.to_json_text()).or_insert(e);
            }
        }
    }
    out
}

/// Replays `rec` against `opts.target`: the recorded exchanges in order, each sent
/// (`Replayer::send`) and its calls judged against the recording (`Replayer::judge`).
pub async fn replay(rec: &Capture, opts: &ReplayOptions) -> Result<Report, ReplayError> {
    let mut r = Replayer::new(rec, opts).await?;
    // `--pace`: each request is sent no sooner than the recording sent it, counted both from the
    // first request and from the end of the exchange before it (the client's recorded pause
    // after that answer): an answer slower than recorded pushes what follows back instead of
    // squeezing it (a poll sent sooner after a task's creation than recorded finds it unfinished).
    let mut start: Option<(u64, Instant)> = None;
    let mut ended: HashMap<u64, u64> = HashMap::new();
    if opts.pace {
        for m in rec.messages() {
            let e = ended.entry(m.exchange).or_default();
            *e = (*e).max(m.ts);
        }
    }
    let mut before: Option<(u64, Instant)> = None;
    for ex in exchanges(rec) {
        if let (true, Some(first)) = (opts.pace, ex.c2s.first()) {
            let (t0, sent) = *start.get_or_insert((first.ts, Instant::now()));
            let mut due = sent + Duration::from_nanos(first.ts.saturating_sub(t0));
            if let Some((end, done)) = before {
                due = due.max(done + Duration::from_nanos(first.ts.saturating_sub(end)));
            }
            tokio::time::sleep_until(tokio::time::Instant::from_std(due)).await;
        }
        r.exchange(&ex).await?;
        if let Some(end) = ended.get(&ex.id) {
            before = Some((*end, Instant::now()));
        }
    }
    Ok(r.report)
}

/// A replay in progress.
struct Replayer<'a> {
    opts: &'a ReplayOptions,
    recorded: Expected<'a>,
    client: crate::proxy::upstream::UpstreamClient,
    ignore: Vec<Pattern>,
    /// `--header`s.
    extra: Vec<(HeaderName, HeaderValue)>,
    /// The target's scheme and authority, and its base path.
    origin: String,
    base: String,
    /// Recorded MCP session id → the new one.
    sessions: HashMap<String, String>,
    /// Legacy HTTP+SSE: streams opened again and not yet claimed by a POST, and the recorded
    /// session id → its stream.
    unclaimed: Vec<LegacyStream>,
    legacy: HashMap<String, LegacyStream>,
    /// What the target made up differently from the recorded server (task ids…): sent in its
    /// place, not counted as a difference (`learn`).
    learned: learn::Learned,
    report: Report,
}

impl<'a> Replayer<'a> {
    /// Checks the options and that the target answers at all.
    async fn new(rec: &'a Capture, opts: &'a ReplayOptions) -> Result<Self, ReplayError> {
        let mut extra = Vec::new();
        for (k, v) in &opts.headers {
            let name = HeaderName::from_bytes(k.as_bytes())
                .map_err(|e| ReplayError::Header(k.clone(), e.to_string()))?;
            let value = HeaderValue::from_str(v)
                .map_err(|e| ReplayError::Header(k.clone(), e.to_string()))?;
            extra.push((name, value));
        }
        let ignore = opts
            .ignore
            .iter()
            .map(|p| Pattern::parse_checked(p).map_err(|e| ReplayError::Ignore(p.clone(), e)))
            .collect::<Result<Vec<_>, _>>()?;
        let until = Instant::now() + opts.wait;
        loop {
            match reachable(&opts.target, opts.timeout.min(Duration::from_secs(5))).await {
                Ok(()) => break,
                Err(_) if Instant::now() < until => {
                    tokio::time::sleep(Duration::from_millis(100)).await
                }
                Err(e) => return Err(e),
            }
        }
        Ok(Replayer {
            opts,
            recorded: Expected::new(rec),
            client: crate::proxy::upstream::build_client(Duration::from_secs(5), opts.insecure),
            ignore,
            extra,
            origin: format!(
                "{}://{}",
                opts.target.scheme_str().unwrap_or("http"),
                opts.target.authority().map(|a| a.as_str()).unwrap_or("")
            ),
            base: opts.target.path().trim_end_matches('/').to_string(),
            sessions: HashMap::new(),
            unclaimed: Vec::new(),
            legacy: HashMap::new(),
            learned: Default::default(),
            report: Report {
                target: opts.target.to_string(),
                ..Default::default()
            },
        })
    }

    /// One recorded exchange: a legacy stream is opened again; a POST (or a session's DELETE)
    /// is sent and its calls judged; anything else is not replayed.
    async fn exchange(&mut self, ex: &Exchange<'_>) -> Result<(), ReplayError> {
        // A GET stream without an MCP session: the legacy transport's stream.
        let legacy_stream_open = ex.method == "GET"
            && ex.session.is_none()
            && ex.status == Some(200)
            && legacy_session(&ex.path).is_none()
            && self.recorded.streams.contains(&ex.id);
        if legacy_stream_open {
            let uri = format!("{}{}", self.origin, target_path(&self.base, &ex.path));
            match LegacyStream::open(&self.client, &uri, &self.extra, self.opts.timeout).await {
                Ok(s) => self.unclaimed.push(s),
                Err(e) => self
                    .report
                    .warnings
                    .push(format!("exchange {}: legacy HTTP+SSE stream: {e}", ex.id)),
            }
            return Ok(());
        }
        if ex.method == "GET" && ex.status == Some(101) {
            // A WebSocket: opened again, its client messages sent in order.
            let url = stream::ws_url(&self.origin, &target_path(&self.base, &ex.path));
            let (extra, ignore, timeout) = (&self.extra, &self.opts.ignore, self.opts.timeout);
            stream::ws(
                &self.recorded,
                &url,
                extra,
                &ex.c2s,
                ignore,
                timeout,
                &mut self.report,
            )
            .await;
            return Ok(());
        }
        let replayable = (ex.method == "POST" && !ex.c2s.is_empty())
            || (ex.method == "DELETE" && ex.session.is_some());
        if !replayable {
            return Ok(());
        }
        // A legacy POST goes to its session's new endpoint; its replies come on the stream.
        // A legacy endpoint is the server's own path (the base is already in it).
        let mut on_stream = None;
        let uri = match legacy_session(&ex.path) {
            Some(old) => {
                if !self.legacy.contains_key(old) && !self.unclaimed.is_empty() {
                    self.legacy
                        .insert(old.to_string(), self.unclaimed.remove(0));
                }
                match self.legacy.get(old) {
                    Some(s) => {
                        on_stream = Some(old.to_string());
                        format!("{}{}", self.origin, s.endpoint)
                    }
                    None => {
                        self.report.warnings.push(format!(
                            "exchange {}: legacy HTTP+SSE POST without a stream to answer on",
                            ex.id
                        ));
                        return Ok(());
                    }
                }
            }
            None => format!("{}{}", self.origin, target_path(&self.base, &ex.path)),
        };
        self.report.exchanges += 1;
        let t0 = Instant::now();
        let (status, mut replies) = self.send(ex, &uri).await?;
        if let Some(stream) = on_stream.as_ref().and_then(|k| self.legacy.get_mut(k)) {
            if status.is_some_and(|s| (200..300).contains(&s)) {
                let ids: Vec<String> = ex
                    .c2s
                    .iter()
                    .filter(|m| m.kind == Kind::Request)
                    .filter_map(|m| m.id_text())
                    .collect();
                let deadline = tokio::time::Instant::from_std(t0 + self.opts.timeout);
                replies.extend(stream.wait_for(&ids, deadline).await);
            }
        }
        let latency_ms = t0.elapsed().as_secs_f64() * 1e3;
        let replies = self.settle(ex, replies);
        for call in ex.c2s.iter().filter(|m| {
            m.kind == Kind::Request
                || (m.kind == Kind::Invalid && m.id.is_some() && m.method.is_some())
        }) {
            let c = self.judge(ex.id, call, status, &replies, latency_ms);
            if c.pass {
                self.report.passed += 1;
            } else {
                self.report.failed += 1;
            }
            self.report.calls.push(c);
        }
        Ok(())
    }

    /// Sends one recorded exchange (its headers less the hop-by-hop and redacted ones, the new
    /// session id, the `--header`s) and reads the replies it got, by id.
    async fn send(
        &mut self,
        ex: &Exchange<'_>,
        uri: &str,
    ) -> Result<(Option<u16>, HashMap<String, rpc::Envelope>), ReplayError> {
        let body = if ex.method == "POST" {
            self.learned.request(body_of(ex))
        } else {
            String::new()
        };
        let mut b = Request::builder().method(ex.method.as_str()).uri(uri);
        for (k, v) in &ex.headers {
            let lk = k.to_ascii_lowercase();
            if SKIP_HEADERS.contains(&lk.as_str()) || v == crate::redact::REDACTED {
                continue;
            }
            b = b.header(k.as_str(), v.as_str());
        }
        if let Some(old) = &ex.session {
            b = b.header(
                "mcp-session-id",
                self.sessions.get(old).unwrap_or(old).as_str(),
            );
        }
        for (k, v) in &self.extra {
            b = b.header(k, v);
        }
        let req = b
            .body(ForwardBody::full(Bytes::from(body)))
            .map_err(|e| ReplayError::Request(uri.to_string(), e.to_string()))?;
        let client = &self.client;
        let sent = tokio::time::timeout(self.opts.timeout, async {
            let resp = client.request(req).await.map_err(|e| e.to_string())?;
            let (parts, body) = resp.into_parts();
            let bytes = body.collect().await.map_err(|e| e.to_string())?.to_bytes();
            Ok::<_, String>((parts, bytes))
        })
        .await;
        Ok(match sent {
            Ok(Ok((parts, bytes))) => {
                let ct = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("")
                    .to_ascii_lowercase();
                if let (Some(old), Some(new)) = (
                    &ex.resp_session,
                    parts
                        .headers
                        .get("mcp-session-id")
                        .and_then(|v| v.to_str().ok()),
                ) {
                    self.sessions.insert(old.clone(), new.to_string());
                }
                (Some(parts.status.as_u16()), replies_in(&ct, &bytes))
            }
            Ok(Err(e)) => {
                self.report
                    .warnings
                    .push(format!("exchange {}: {e}", ex.id));
                (None, HashMap::new())
            }
            Err(_) => {
                self.report.warnings.push(format!(
                    "exchange {}: no answer within {:?}",
                    ex.id, self.opts.timeout
                ));
                (None, HashMap::new())
            }
        })
    }

    /// Learns what the target made up in each reply to this exchange's calls (against the
    /// recorded reply), and gives back the replies with it put back as recorded (`learn`).
    fn settle(
        &mut self,
        ex: &Exchange<'_>,
        mut replies: HashMap<String, rpc::Envelope>,
    ) -> HashMap<String, rpc::Envelope> {
        for call in ex.c2s.iter().filter(|m| m.kind == Kind::Request) {
            let (Some(id), Some(rec)) = (call.id_text(), self.recorded.reply(call)) else {
                continue;
            };
            let Some(env) = replies.get(&id) else {
                continue;
            };
            let (Ok(recorded), Ok(mut live)) = (
                serde_json::from_str::<Value>(&rec.json_text()),
                serde_json::from_slice::<Value>(&env.raw),
            ) else {
                continue;
            };
            for key in ["result", "error"] {
                if let (Some(r), Some(l)) = (recorded.get(key), live.get(key)) {
                    self.learned.learn(r, l);
                }
                if let (Some(r), Some(l)) = (recorded.get(key), live.get_mut(key)) {
                    self.learned.as_recorded(r, l);
                }
            }
            if let Body::Single(e) = rpc::parse_body(&Bytes::from(live.to_string())) {
                replies.insert(id, e);
            }
        }
        replies
    }

    fn judge(
        &self,
        exchange: u64,
        call: &MessageEvent,
        status: Option<u16>,
        replies: &HashMap<String, rpc::Envelope>,
        latency_ms: f64,
    ) -> CallReport {
        judge(
            &self.recorded,
            &self.ignore,
            exchange,
            call,
            status,
            replies,
            latency_ms,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_target_path_the_recording_already_has_is_not_doubled() {
        assert_eq!(target_path("", "/mcp"), "/mcp");
        assert_eq!(target_path("/mcp", "/mcp"), "/mcp");
        assert_eq!(target_path("/mcp", "/mcp?x=1"), "/mcp?x=1");
        assert_eq!(target_path("/api", "/mcp"), "/api/mcp");
        assert_eq!(target_path("/mc", "/mcp"), "/mc/mcp");
    }

    #[test]
    fn replies_are_read_from_sse_bodies_typed_in_any_letter_case() {
        let sse = Bytes::from_static(
            b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":7,\"result\":1}\n\n",
        );
        for ct in ["text/event-stream", "Text/Event-Stream; charset=utf-8"] {
            let got = replies_in(ct, &sse);
            assert_eq!(got.keys().collect::<Vec<_>>(), vec!["7"], "{ct}");
        }
        let json = Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":\"a\",\"result\":1}");
        assert_eq!(
            replies_in("application/json", &json)
                .keys()
                .collect::<Vec<_>>(),
            vec!["\"a\""]
        );
    }
}

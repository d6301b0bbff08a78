//! `rpctap check RECORDING`: a recording is fed back through the same [`Inspector`] the proxy
//! runs, exchange by exchange and in the recorded order — request heads and bodies, response
//! heads, reply bodies re-framed as they were (a batch's members as one array, SSE events as a
//! stream with their ids, frames that were not JSON as their text), legacy endpoint
//! announcements, rate-limit refusals, rpctap's own answers, frames too large to inspect — with
//! the inspector's clock set to each line's recorded time, so calls time out where they did.
//! Whatever the live inspector decided, this decides again: every code, `HTTP_STATUS` included.
//! The findings are then grouped by scope into seed 004's result shape.

use super::offline::{CheckResult, Finding, Match};
use super::{EndReason, InspectConfig, Inspector, RequestMeta, ResponseMeta};
use crate::events::{BusBuilder, Direction, Event, Interest, Outcome, Severity, Sink};
use crate::events::{HttpEvent, MessageEvent};
use crate::locks::Locked as _;
use crate::record::reader::Capture;
use crate::rpc::{Id, Kind};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Collects the inspector's events in order (offline there is no observer to fall behind).
#[derive(Debug, Default)]
struct Collect(Mutex<Vec<Event>>);

impl Sink for Collect {
    fn accept(&self, ev: &Event) {
        self.0.locked().push(ev.clone());
    }
}

impl Collect {
    fn take(&self) -> Vec<Event> {
        std::mem::take(&mut *self.0.locked())
    }
}

/// The inspection settings a recording was made with (its header's `inspect` object), so that
/// caps and timeouts decide as they did live; defaults where the header does not say.
pub fn recorded_config(header: &serde_json::Value) -> InspectConfig {
    let mut cfg = InspectConfig::default();
    let i = &header["inspect"];
    if let Some(n) = i["max_frame_bytes"].as_u64() {
        cfg.max_frame_bytes = n as usize;
    }
    if let Some(n) = i["call_timeout_ms"].as_u64() {
        cfg.call_timeout = Duration::from_millis(n);
    }
    if let Some(n) = i["max_pending"].as_u64() {
        cfg.limits.max_pending = n as usize;
    }
    if let Some(n) = i["max_sessions"].as_u64() {
        cfg.limits.max_sessions = n as usize;
    }
    if let Some(n) = i["large_result"].as_u64() {
        cfg.large_result = n as usize;
    }
    if let Some(n) = i["max_schemas"].as_u64() {
        cfg.max_schemas = n as usize;
    }
    cfg
}

/// A frame being put back together from its messages.
#[derive(Default)]
struct Frame {
    parts: Vec<String>,
    batch: bool,
    sse_id: Option<String>,
}

impl Frame {
    fn text(&mut self) -> String {
        let parts = std::mem::take(&mut self.parts);
        if self.batch {
            format!("[{}]", parts.join(","))
        } else {
            parts.into_iter().next().unwrap_or_default()
        }
    }
}

struct Open {
    ctx: Box<super::ExchangeCtx>,
    /// The request body's frame, until it is whole.
    request: Option<Frame>,
    request_fed: bool,
    /// A reply frame (JSON body or SSE event) being gathered.
    reply: Option<(Frame, bool)>,
}

impl Open {
    fn feed_request(&mut self) {
        if let Some(mut f) = self.request.take() {
            let text = f.text();
            self.ctx.request_body(&Bytes::from(text), true);
            self.request_fed = true;
        }
    }
    fn feed_reply(&mut self) {
        if let Some((mut f, sse)) = self.reply.take() {
            let text = f.text();
            if sse {
                let mut ev = String::with_capacity(text.len() + 32);
                if let Some(id) = &f.sse_id {
                    ev.push_str("id: ");
                    ev.push_str(id);
                    ev.push('\n');
                }
                for line in text.split('\n') {
                    ev.push_str("data: ");
                    ev.push_str(line);
                    ev.push('\n');
                }
                ev.push('\n');
                self.ctx.response_data(ev.as_bytes());
            } else {
                self.ctx.response_data(text.as_bytes());
            }
        }
    }
    /// Whatever was being gathered is whole now (a later line of the exchange arrived).
    fn flush(&mut self) {
        self.feed_request();
        self.feed_reply();
    }
}

/// Adds a message to a frame; returns whether the frame is now whole.
fn add(frame: &mut Frame, m: &MessageEvent) -> bool {
    frame.parts.push(m.wire_text().into_owned());
    frame.sse_id = m.sse_id.clone();
    match (m.batch_index, m.batch_len) {
        (Some(i), Some(n)) => {
            frame.batch = true;
            i + 1 >= n
        }
        // A recording without batch sizes: the frame ends at the exchange's next other line.
        (Some(_), None) => {
            frame.batch = true;
            false
        }
        (None, _) => true,
    }
}

/// A stream's session id as its scope names it (`session:ID`).
fn session_id(scope: &crate::events::Scope) -> String {
    match scope {
        crate::events::Scope::Session(s) => s.to_string(),
        other => other.to_string(),
    }
}

fn end_reason(reason: &str) -> EndReason {
    match reason {
        "complete" => EndReason::Complete,
        "client disconnected" => EndReason::ClientGone,
        r => EndReason::UpstreamError(r.strip_prefix("upstream error: ").unwrap_or(r).to_string()),
    }
}

/// Feeds one run of a recording through a fresh inspector; returns the events it published.
pub fn reinspect(header: &serde_json::Value, events: &[Event]) -> Vec<Event> {
    reinspect_with(header, events, None, Interest::ALL)
}

/// What `check` reads of a re-inspection: the messages, the calls and the findings (no HTTP
/// heads, which would be built and kept for nothing).
const CHECKED: Interest = Interest::MESSAGE.and(Interest::CALL).and(Interest::ANOMALY);

fn reinspect_with(
    header: &serde_json::Value,
    events: &[Event],
    baseline: Option<Arc<crate::baseline::Live>>,
    interest: Interest,
) -> Vec<Event> {
    let mut bus = BusBuilder::default();
    // About as many events come out as went in: room for them at once (growing by doubling
    // copies hundreds of megabytes on a large recording).
    let out = Arc::new(Collect(Mutex::new(Vec::with_capacity(events.len()))));
    bus.sink(interest, out.clone());
    let mut cfg = recorded_config(header);
    cfg.baseline = baseline;
    let sweep_every = (cfg.call_timeout / 4)
        .clamp(Duration::from_millis(10), Duration::from_secs(1))
        .as_nanos() as u64;
    let insp = Inspector::offline(cfg, bus.build());
    let t0 = events.first().map_or(0, Event::ts);
    insp.set_watch_start(t0);
    let mut last_sweep = 0u64;
    let mut open: HashMap<u64, Open> = HashMap::new();
    // stdio sessions: their lines, each fed whole (a batch's members gathered first).
    let mut streams: HashMap<u64, Stream> = HashMap::new();
    let stdio = header.get("transport").and_then(|t| t.as_str()) == Some("stdio");
    // Exchanges answered 101: a WebSocket's messages follow on their number.
    let mut upgraded: std::collections::HashSet<u64> = Default::default();
    for ev in events {
        let t = ev.ts().saturating_sub(t0);
        insp.set_time(t);
        if t >= last_sweep + sweep_every {
            insp.sweep();
            last_sweep = t;
        }
        match ev {
            Event::Message(m)
                if matches!(
                    m.transport,
                    crate::events::Transport::Stdio | crate::events::Transport::Ws
                ) =>
            {
                let (ctx, pending) = streams.entry(m.exchange).or_insert_with(|| {
                    if m.transport == crate::events::Transport::Ws {
                        return (insp.begin_ws(m.exchange), None);
                    }
                    (
                        insp.begin_stream_numbered(m.exchange, &session_id(&m.scope)),
                        None,
                    )
                });
                let dir = m.direction;
                if pending.as_ref().is_some_and(|(_, d)| *d != dir) {
                    if let Some((mut f, d)) = pending.take() {
                        ctx.line(d, Bytes::from(f.text()));
                    }
                }
                let (f, _) = pending.get_or_insert_with(|| (Frame::default(), dir));
                if add(f, m) {
                    if let Some((mut f, d)) = pending.take() {
                        ctx.line(d, Bytes::from(f.text()));
                    }
                }
            }
            Event::Anomaly(a)
                if (a.code == "NOT_INSPECTED"
                    || (a.code == "PARSE_ERROR" && a.message.starts_with("WebSocket framing")))
                    && (stdio
                        || streams.contains_key(&a.exchange)
                        || (upgraded.contains(&a.exchange) && !open.contains_key(&a.exchange))) =>
            {
                let (ctx, pending) = streams.entry(a.exchange).or_insert_with(|| {
                    if upgraded.contains(&a.exchange) {
                        return (insp.begin_ws(a.exchange), None);
                    }
                    (
                        insp.begin_stream_numbered(a.exchange, &session_id(&a.scope)),
                        None,
                    )
                });
                if let Some((mut f, d)) = pending.take() {
                    ctx.line(d, Bytes::from(f.text()));
                }
                let dir = a.direction.unwrap_or(Direction::ServerToClient);
                let len = a
                    .message
                    .strip_prefix("a line of ")
                    .or_else(|| a.message.strip_prefix("a message of "))
                    .and_then(|r| r.split(' ').next())
                    .and_then(|n| n.parse().ok());
                match len {
                    _ if a.code == "PARSE_ERROR" => ctx.framing_error_said(dir, a.message.clone()),
                    Some(len) => ctx.line_not_inspected_head(
                        dir,
                        len,
                        super::exchange::envelope_from_note(&a.message),
                        a.message.contains(super::exchange::REFUSED_TOO_LARGE),
                    ),
                    None => ctx.not_inspected(dir, a.message.clone()),
                }
            }
            Event::Http(HttpEvent::End {
                exchange, reason, ..
            }) if streams.contains_key(exchange) && !open.contains_key(exchange) => {
                if let Some((mut ctx, pending)) = streams.remove(exchange) {
                    if let Some((mut f, d)) = pending {
                        ctx.line(d, Bytes::from(f.text()));
                    }
                    ctx.end(EndReason::Closed(reason.to_string()));
                }
            }
            Event::Http(HttpEvent::Request {
                exchange,
                method,
                path,
                session,
                protocol_version,
                headers,
                peer,
                ..
            }) => {
                let (p, q) = match path.split_once('?') {
                    Some((p, q)) => (p, Some(q)),
                    None => (path.as_str(), None),
                };
                let map = headers.to_map();
                let get = |n: &str| map.get(n).and_then(|v| v.to_str().ok());
                let ctx = insp.begin_numbered(
                    *exchange,
                    &RequestMeta {
                        method,
                        path: p,
                        query: q,
                        content_type: get("content-type"),
                        session: session.as_deref(),
                        protocol_version: protocol_version.as_deref(),
                        mcp_method: get("mcp-method"),
                        mcp_name: get("mcp-name"),
                        a2a_version: get("a2a-version"),
                        peer: None,
                        peer_ip: peer.parse::<std::net::SocketAddr>().ok().map(|a| a.ip()),
                        // As recorded (the `Mcp-Param-*` rules read them).
                        headers: Some(&map),
                    },
                );
                open.insert(
                    *exchange,
                    Open {
                        ctx,
                        request: None,
                        request_fed: false,
                        reply: None,
                    },
                );
            }
            Event::Message(m) => {
                let Some(o) = open.get_mut(&m.exchange) else {
                    continue;
                };
                if m.is_c2s() && !o.request_fed {
                    let f = o.request.get_or_insert_with(Frame::default);
                    if add(f, m) {
                        o.feed_request();
                    }
                } else if !m.is_c2s() {
                    o.feed_request();
                    let sse = m.transport != crate::events::Transport::Json;
                    if o.reply
                        .as_ref()
                        .is_some_and(|(f, s)| *s != sse || !f.batch || m.batch_index == Some(0))
                    {
                        o.feed_reply();
                    }
                    let (f, _) = o.reply.get_or_insert_with(|| (Frame::default(), sse));
                    if add(f, m) && sse {
                        o.feed_reply();
                    }
                }
            }
            Event::Refusal(r) => {
                let id = r.id.clone();
                let refusal = crate::limit::Refusal {
                    rule: r.rule.clone(),
                    retry_after: Duration::from_millis(r.retry_after_ms),
                    status: None,
                    code: 0,
                    limit: 0,
                    fault: None,
                };
                // A stream's (stdio, WebSocket) refusal follows the message it refused.
                let Some(ctx) = flushed(&mut open, &mut streams, r.exchange) else {
                    continue;
                };
                ctx.refuse(id.as_ref(), &r.method, &refusal, r.shadow);
            }
            Event::Fault(f) => {
                // What a fault did is republished as it was; a call it answered ends so.
                let Some(ctx) = flushed(&mut open, &mut streams, f.exchange) else {
                    continue;
                };
                ctx.replay_fault(f);
                if let (Some(id), "error" | "status") = (&f.id, f.action) {
                    let dir = f.direction.unwrap_or(Direction::ClientToServer);
                    ctx.end_refused_in(id, &f.injected, dir);
                }
            }
            Event::Anomaly(a) if a.code == "NOT_INSPECTED" => {
                // The only trace of a frame too large to inspect: tell the inspector so.
                let Some(o) = open.get_mut(&a.exchange) else {
                    continue;
                };
                if a.direction == Some(Direction::ClientToServer) {
                    o.request = None;
                    o.request_fed = true;
                    o.ctx.request_body(&Bytes::new(), false);
                } else {
                    o.flush();
                    o.ctx.reply_not_inspected();
                }
            }
            Event::Http(HttpEvent::Response {
                exchange,
                status,
                content_type,
                headers,
                local,
                ..
            }) => {
                if *status == 101 {
                    upgraded.insert(*exchange);
                }
                let Some(o) = open.get_mut(exchange) else {
                    continue;
                };
                o.flush();
                let session = headers.get("mcp-session-id");
                // As the live proxy read them (`media::better_challenge`).
                let mut challenge: Option<String> = None;
                for (k, v) in headers.pairs() {
                    if k.eq_ignore_ascii_case("www-authenticate")
                        && crate::media::better_challenge(challenge.as_deref(), &v)
                    {
                        challenge = Some(v);
                    }
                }
                match local {
                    Some(why) => o.ctx.answer_locally(*status, why),
                    None => o.ctx.response_head(&ResponseMeta {
                        status: *status,
                        content_type: content_type.as_deref(),
                        session: session.as_deref(),
                        content_length: None,
                        www_authenticate: challenge.as_deref(),
                        headers: None,
                    }),
                }
            }
            Event::Http(HttpEvent::AgentCard {
                exchange,
                path,
                card,
                ..
            }) => {
                if let Some(o) = open.get_mut(exchange) {
                    o.flush();
                    o.ctx.agent_card(path, card);
                }
            }
            Event::Http(HttpEvent::Endpoint { exchange, url, .. }) => {
                let Some(o) = open.get_mut(exchange) else {
                    continue;
                };
                o.flush();
                let data: String = url.split('\n').map(|l| format!("data: {l}\n")).collect();
                o.ctx
                    .response_data(format!("event: endpoint\n{data}\n").as_bytes());
            }
            Event::Http(HttpEvent::End {
                exchange, reason, ..
            }) => {
                if let Some(mut o) = open.remove(exchange) {
                    o.flush();
                    o.ctx.end(end_reason(reason));
                }
            }
            _ => {}
        }
    }
    // Exchanges the recording never saw end (the proxy was killed) are left as they were.
    for (_, o) in open {
        o.ctx.abandon();
    }
    for (_, (ctx, _)) in streams {
        ctx.abandon();
    }
    out.take()
}

/// Where a finding points in its scope's exchange document.
#[derive(Default)]
struct ScopeDoc {
    result: Option<CheckResult>,
    /// c2s / s2c message ordinals by (exchange, id text, batch index).
    c2s: HashMap<(u64, Option<String>, Option<u32>), u32>,
    s2c: HashMap<(u64, Option<String>, Option<u32>), u32>,
    /// (exchange, direction) → first ordinal, for findings without an id.
    first: HashMap<(u64, bool), u32>,
    n_c2s: u32,
    n_s2c: u32,
    /// The ordinal of the last reply seen with each id.
    last_reply: HashMap<String, u32>,
}

fn id_text(id: &Option<Id>) -> Option<String> {
    id.as_ref().map(Id::to_json_text)
}

/// Checks a whole recording: each scope's result, scopes in order of first appearance (scopes
/// of a later appended run are named as they were, after the earlier run's).
pub fn check_recording(rec: &Capture) -> Vec<(String, CheckResult)> {
    check_recording_with(rec, None)
}

/// A stream's (stdio, WebSocket) inspector, and the message it holds until whole.
type Stream = (super::ExchangeCtx, Option<(Frame, Direction)>);

/// The inspector of `exchange` with what it was given so far fed to it: an HTTP exchange's
/// frames, a stream's held message — what a refusal or a fault read back follows.
fn flushed<'a>(
    open: &'a mut HashMap<u64, Open>,
    streams: &'a mut HashMap<u64, Stream>,
    exchange: u64,
) -> Option<&'a mut super::ExchangeCtx> {
    if let Some(o) = open.get_mut(&exchange) {
        o.flush();
        return Some(&mut o.ctx);
    }
    let (ctx, pending) = streams.get_mut(&exchange)?;
    if let Some((mut f, d)) = pending.take() {
        ctx.line(d, Bytes::from(f.text()));
    }
    Some(ctx)
}

/// Like `check_recording`, comparing complete tool lists with a baseline (`MCP_TOOL_DRIFT`).
pub fn check_recording_with(
    rec: &Capture,
    baseline: Option<Arc<crate::baseline::Live>>,
) -> Vec<(String, CheckResult)> {
    let mut out = Vec::new();
    for (header, events) in rec.run_slices() {
        out.extend(results(reinspect_with(
            header,
            events,
            baseline.clone(),
            CHECKED,
        )));
    }
    out
}

/// The anomaly codes each scope got (for comparing a live run with a check of its recording).
pub fn codes_by_scope(events: &[Event]) -> Vec<(String, &'static str)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Anomaly(a) => Some((a.scope.report_key(), a.code)),
            _ => None,
        })
        .collect()
}

fn results(events: Vec<Event>) -> Vec<(String, CheckResult)> {
    let mut order: Vec<String> = Vec::new();
    let mut docs: HashMap<String, ScopeDoc> = HashMap::new();
    let mut anomalies = Vec::new();
    for ev in &events {
        match ev {
            // A scope's document holds the client's requests and notifications and the
            // server's replies (as `rpctap export --format exchange` writes it).
            Event::Message(m)
                if m.batch_len != Some(0)
                    && (m.direction == Direction::ClientToServer) != m.kind.is_response() =>
            {
                let scope = m.scope.report_key();
                let d = docs.entry(scope.clone()).or_insert_with(|| {
                    order.push(scope);
                    ScopeDoc {
                        result: Some(CheckResult::empty()),
                        ..Default::default()
                    }
                });
                let r = d.result.get_or_insert_with(CheckResult::empty);
                let key = (m.exchange, id_text(&m.id), m.batch_index);
                if m.direction == Direction::ClientToServer {
                    r.request_count += 1;
                    match m.kind {
                        Kind::Request => r.call_count += 1,
                        Kind::Notification => r.notification_count += 1,
                        _ => {}
                    }
                    d.c2s.entry(key).or_insert(d.n_c2s);
                    d.first.entry((m.exchange, true)).or_insert(d.n_c2s);
                    d.n_c2s += 1;
                } else {
                    d.s2c.entry(key).or_insert(d.n_s2c);
                    d.first.entry((m.exchange, false)).or_insert(d.n_s2c);
                    if let Some(id) = id_text(&m.id) {
                        d.last_reply.insert(id, d.n_s2c);
                    }
                    d.n_s2c += 1;
                }
            }
            Event::Call(c) if c.direction == Direction::ClientToServer => {
                let outcome = match c.outcome {
                    Outcome::Result => "result",
                    Outcome::Error { .. } => "error",
                    _ => continue,
                };
                let Some(d) = docs.get_mut(&c.scope.report_key()) else {
                    continue;
                };
                let id = c.id.to_json_text();
                let req = d
                    .c2s
                    .get(&(c.exchange, Some(id.clone()), c.request_index))
                    .copied()
                    .unwrap_or(0);
                let resp = d.last_reply.get(&id).copied().unwrap_or(0);
                if let Some(r) = d.result.as_mut() {
                    r.matches.push(Match {
                        request_index: req,
                        response_index: resp,
                        id: c.id.clone(),
                        outcome,
                    });
                }
            }
            Event::Anomaly(a) => anomalies.push(a),
            _ => {}
        }
    }
    for a in anomalies {
        let scope = a.scope.report_key();
        let d = docs.entry(scope.clone()).or_insert_with(|| {
            order.push(scope);
            ScopeDoc {
                result: Some(CheckResult::empty()),
                ..Default::default()
            }
        });
        let path = match a.direction {
            Some(dir) => {
                let c2s = dir == Direction::ClientToServer;
                let map = if c2s { &d.c2s } else { &d.s2c };
                let at = map
                    .get(&(a.exchange, id_text(&a.id), a.batch_index))
                    .or_else(|| d.first.get(&(a.exchange, c2s)))
                    .copied();
                let side = if c2s { "request" } else { "response" };
                match at {
                    Some(i) => format!("$.{side}[{i}]"),
                    None => format!("$.{side}"),
                }
            }
            None => "$".to_string(),
        };
        if let Some(r) = d.result.as_mut() {
            r.finding_count += 1;
            if a.severity == Severity::Error {
                r.error_count += 1;
            }
            if a.severity.fails_by_default() {
                r.failing += 1;
            }
            r.findings.push(Finding {
                code: a.code.to_string(),
                severity: a.severity,
                path,
                message: a.message.clone(),
                allowed: false,
                method: a.method.as_deref().map(str::to_string),
                id: a.id.as_ref().map(|i| i.to_string()),
            });
        }
    }
    order
        .into_iter()
        .filter_map(|s| {
            let mut r = docs.remove(&s)?.result?;
            r.matches
                .sort_by_key(|m| (m.request_index, m.response_index));
            r.matched_count = r.matches.len() as u64;
            // The default gate: errors and warnings fail, info does not.
            r.passes_checks = r.failing == 0;
            Some((s, r))
        })
        .collect()
}

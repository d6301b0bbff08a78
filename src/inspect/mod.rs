//! Inspection: turns copies of the traffic into JSON-RPC frames, correlates calls with replies
//! and flags anomalies, publishing everything as [`Event`]s on the bus.
//!
//! One implementation serves the live proxy and the offline checker: both drive an
//! [`ExchangeCtx`] with a request body, a response head, response chunks and an end. The
//! inspector never touches the bytes that are forwarded; it only reads copies, synchronously,
//! and never awaits.

pub mod anomaly;
pub mod correlator;
pub mod offline;
pub mod recorded;
pub mod sse;

use crate::events::{
    now_ns, AnomalyEvent, Bus, CallEvent, Direction, Event, HttpEvent, Interest, MessageEvent,
    NoticeEvent, Outcome, Scope, Transport,
};
use crate::redact::Redactor;
use crate::rpc::{self, Body, Envelope, Id, Kind};
use anomaly::Code;
use bytes::{Bytes, BytesMut};
use correlator::{Correlator, Inserted, Limits, Pending, PendingKey};
use sse::SseDecoder;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Inspection settings (validated by `config`).
#[derive(Clone, Debug)]
pub struct InspectConfig {
    /// The largest body or SSE event that is inspected; larger ones are forwarded uninspected.
    pub max_frame_bytes: usize,
    /// A call with no reply after this long ends as missing.
    pub call_timeout: Duration,
    pub limits: Limits,
    /// Secrets to redact from every event.
    pub redact: Arc<Redactor>,
}

impl Default for InspectConfig {
    fn default() -> Self {
        InspectConfig {
            max_frame_bytes: 16 << 20,
            call_timeout: Duration::from_secs(300),
            limits: Limits::default(),
            redact: Arc::new(Redactor::default()),
        }
    }
}

/// Counters any test or metrics endpoint can read.
#[derive(Debug, Default)]
pub struct Stats {
    pub exchanges: AtomicU64,
    pub messages: AtomicU64,
    pub calls: AtomicU64,
    pub calls_ended: AtomicU64,
    pub refusals: AtomicU64,
    anomalies: [AtomicU64; Code::ALL.len()],
}

impl Stats {
    pub fn anomaly_count(&self, code: Code) -> u64 {
        self.anomalies[code as usize].load(Ordering::Relaxed)
    }
    pub fn anomalies_total(&self) -> u64 {
        self.anomalies
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
    /// Non-zero anomaly counts by code.
    pub fn anomaly_summary(&self) -> Vec<(&'static str, u64)> {
        Code::ALL
            .iter()
            .map(|c| (c.as_str(), self.anomaly_count(*c)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

struct Inner {
    cfg: InspectConfig,
    correlator: Correlator,
    bus: Bus,
    stats: Stats,
    /// Exchange numbers: the bus's counter, so a sampling subscriber's stride changes from the
    /// next exchange on.
    next_exchange: Arc<AtomicU64>,
    clock: Clock,
    /// The legacy HTTP+SSE transport's announced message URLs (path and query) → their session.
    /// A std mutex: taken only by synchronous code, never across an `.await`, and only when a
    /// legacy stream has announced an endpoint (`endpoints_len` says so without the lock).
    endpoints: std::sync::Mutex<Endpoints>,
    endpoints_len: std::sync::atomic::AtomicUsize,
}

/// Where the inspector's time comes from: the real clock live, the recorded times offline (so a
/// recording checked later times its calls out exactly where the live run did).
struct Clock {
    manual: Option<(Instant, AtomicU64)>,
}

impl Clock {
    fn now(&self) -> Instant {
        match &self.manual {
            None => Instant::now(),
            Some((base, offset)) => *base + Duration::from_nanos(offset.load(Ordering::Relaxed)),
        }
    }
}

/// The announced endpoints, oldest first out when the session cap is reached.
#[derive(Default)]
struct Endpoints {
    by_url: std::collections::HashMap<Box<str>, Arc<str>>,
    order: std::collections::VecDeque<Box<str>>,
}

/// The path and query a client will request for an announced endpoint `url` (absolute, or
/// relative to the stream's `base` path), as the proxy sees requests.
pub fn endpoint_target(url: &str, base: &str) -> String {
    let url = url.trim();
    let rest = match url.find("://") {
        Some(i)
            if url[..i]
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'-' || b == b'.') =>
        {
            let after = &url[i + 3..];
            match after.find(['/', '?']) {
                Some(j) => &after[j..],
                None => "/",
            }
        }
        _ => url,
    };
    let rest = match rest.strip_prefix("//") {
        // scheme-relative: `//host/path`
        Some(r) => r.find(['/', '?']).map_or("/", |j| &r[j..]),
        None => rest,
    };
    let target = if rest.starts_with('/') {
        rest.to_string()
    } else if let Some(q) = rest.strip_prefix('?') {
        format!("{}?{q}", base)
    } else {
        let dir = base.rfind('/').map_or("/", |i| &base[..=i]);
        format!("{dir}{rest}")
    };
    // A fragment never reaches the server.
    match target.find('#') {
        Some(i) => target[..i].to_string(),
        None => target,
    }
}

/// The session name shown for a legacy endpoint: the value of its first query parameter whose
/// name mentions a session (`sessionId`, `session_id`, …), else the whole path and query.
fn endpoint_session(target: &str) -> &str {
    target
        .split_once('?')
        .and_then(|(_, q)| {
            q.split('&').find_map(|kv| {
                let (k, v) = kv.split_once('=')?;
                (contains_ignore_case(k, "session") && !v.is_empty()).then_some(v)
            })
        })
        .unwrap_or(target)
}

/// The shared inspector: cheap to clone.
#[derive(Clone)]
pub struct Inspector {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Inspector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inspector").finish_non_exhaustive()
    }
}

/// Whether `hay` contains `needle` (ASCII, lower-case) in any letter case — a media type check
/// without lower-casing a copy.
pub fn contains_ignore_case(hay: &str, needle: &str) -> bool {
    needle.is_empty()
        || hay
            .as_bytes()
            .windows(needle.len())
            .any(|w| w.eq_ignore_ascii_case(needle.as_bytes()))
}

/// Whether a `Content-Type` is `text/event-stream` (parameters allowed), in any letter case.
pub fn is_event_stream(content_type: &str) -> bool {
    content_type
        .get(..17)
        .is_some_and(|p| p.eq_ignore_ascii_case("text/event-stream"))
}

/// Whether a request's `Accept` headers take `text/event-stream`, in any letter case.
pub fn accepts_event_stream(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| contains_ignore_case(v, "text/event-stream"))
}

/// The HTTP request line and the headers the inspector needs.
#[derive(Debug, Default, Clone)]
pub struct RequestMeta<'a> {
    pub method: &'a str,
    pub path: &'a str,
    pub query: Option<&'a str>,
    pub content_type: Option<&'a str>,
    /// `Mcp-Session-Id`.
    pub session: Option<&'a str>,
    /// `MCP-Protocol-Version`.
    pub protocol_version: Option<&'a str>,
    /// The client's address as text (made once per connection).
    pub peer: Option<&'a str>,
    pub headers: Option<&'a http::HeaderMap>,
}

/// The response's status line and the headers the inspector needs.
#[derive(Debug, Default, Clone, Copy)]
pub struct ResponseMeta<'a> {
    pub status: u16,
    pub content_type: Option<&'a str>,
    /// `Mcp-Session-Id`.
    pub session: Option<&'a str>,
    pub content_length: Option<u64>,
    pub headers: Option<&'a http::HeaderMap>,
}

/// Why a reply ended.
#[derive(Debug, Clone)]
pub enum EndReason {
    /// The body ended normally.
    Complete,
    /// The client went away before the end.
    ClientGone,
    /// The upstream failed mid-reply.
    UpstreamError(String),
}

impl EndReason {
    fn describe(&self) -> String {
        match self {
            EndReason::Complete => "complete".into(),
            EndReason::ClientGone => "client disconnected".into(),
            EndReason::UpstreamError(e) => format!("upstream error: {e}"),
        }
    }
}

enum ReplyMode {
    /// Not inspected (not JSON-RPC, or no body expected).
    Ignore,
    Json {
        buf: BytesMut,
        overflow: bool,
    },
    Sse {
        dec: Box<SseDecoder>,
    },
}

/// What the request of an exchange held.
#[derive(Debug, Default)]
struct RequestSummary {
    is_rpc: bool,
    batch: bool,
    parse_error: bool,
    calls: Vec<PendingKey>,
    notifications: u32,
    /// Replies (to server→client requests) the client posted.
    responses: u32,
    call_ids: Vec<Id>,
    delete_session: bool,
}

/// One HTTP exchange being inspected. Dropping it before `end` ends it as `ClientGone`.
pub struct ExchangeCtx {
    insp: Arc<Inner>,
    pub id: u64,
    /// A GET's path: a legacy stream's relative endpoint is resolved against it.
    get_path: Option<Box<str>>,
    /// The size of the batch being processed, for its members' message events.
    batch_len: Option<u32>,
    scope: Scope,
    transport: Transport,
    session_header: Option<Arc<str>>,
    req: RequestSummary,
    status: u16,
    mode: ReplyMode,
    reply_frames: u32,
    ended: bool,
    bytes: u64,
    is_get_stream: bool,
    /// The frame being processed (direction, batch index), for anomaly sites and call indices.
    cur: Option<(Direction, Option<u32>)>,
    /// Call events waiting for the message event that caused them.
    deferred: Vec<Event>,
}

impl Inspector {
    pub fn new(cfg: InspectConfig, bus: Bus) -> Self {
        Self::with_clock(cfg, bus, Clock { manual: None })
    }

    /// An inspector whose time is set by [`Inspector::set_time`] (offline: a recording's times).
    pub fn offline(cfg: InspectConfig, bus: Bus) -> Self {
        Self::with_clock(
            cfg,
            bus,
            Clock {
                manual: Some((Instant::now(), AtomicU64::new(0))),
            },
        )
    }

    fn with_clock(cfg: InspectConfig, bus: Bus, clock: Clock) -> Self {
        let next_exchange = bus.exchange_counter();
        Inspector {
            inner: Arc::new(Inner {
                correlator: Correlator::new(cfg.limits),
                cfg,
                bus,
                stats: Stats::default(),
                next_exchange,
                clock,
                endpoints: Default::default(),
                endpoints_len: Default::default(),
            }),
        }
    }

    /// Offline only: the time is now `ns` after the inspector's start (it never goes back).
    pub fn set_time(&self, ns: u64) {
        if let Some((_, offset)) = &self.inner.clock.manual {
            offset.fetch_max(ns, Ordering::Relaxed);
        }
    }

    pub fn stats(&self) -> &Stats {
        &self.inner.stats
    }

    pub fn pending_calls(&self) -> usize {
        self.inner.correlator.pending_len()
    }

    pub fn config(&self) -> &InspectConfig {
        &self.inner.cfg
    }

    /// Starts an exchange.
    pub fn begin(&self, meta: &RequestMeta<'_>) -> ExchangeCtx {
        let id = self.inner.next_exchange.fetch_add(1, Ordering::Relaxed);
        self.begin_numbered(id, meta)
    }

    /// Starts an exchange with a given number (offline: the number the recording gave it).
    pub fn begin_numbered(&self, id: u64, meta: &RequestMeta<'_>) -> ExchangeCtx {
        let inner = &self.inner;
        inner.next_exchange.fetch_max(id + 1, Ordering::Relaxed);
        inner.stats.exchanges.fetch_add(1, Ordering::Relaxed);
        let (scope, transport, session_header) = match meta.session {
            Some(s) => {
                let s: Arc<str> = s.into();
                (Scope::Session(s.clone()), Transport::Json, Some(s))
            }
            None => match inner.legacy_session(meta) {
                Some(s) => (Scope::Session(s), Transport::LegacySse, None),
                None => (Scope::Exchange(id), Transport::Json, None),
            },
        };
        if inner.bus.wants_in(Interest::HTTP, id) {
            inner.bus.publish(Event::Http(HttpEvent::Request {
                headers: meta
                    .headers
                    .filter(|_| inner.bus.wants(Interest::HTTP_HEADERS))
                    .map(|h| inner.cfg.redact.headers(h))
                    .unwrap_or_default(),
                ts: now_ns(),
                exchange: id,
                method: meta.method.to_string(),
                path: match meta.query {
                    Some(q) => format!("{}?{}", meta.path, q),
                    None => meta.path.to_string(),
                },
                peer: meta.peer.unwrap_or_default().to_string(),
                session: meta.session.map(str::to_string),
                protocol_version: meta.protocol_version.map(str::to_string),
            }));
        }
        ExchangeCtx {
            insp: inner.clone(),
            id,
            get_path: (meta.method == "GET").then(|| meta.path.into()),
            batch_len: None,
            scope,
            transport,
            session_header,
            req: RequestSummary {
                delete_session: meta.method == "DELETE",
                ..Default::default()
            },
            status: 0,
            mode: ReplyMode::Ignore,
            reply_frames: 0,
            ended: false,
            bytes: 0,
            is_get_stream: meta.method == "GET",
            cur: None,
            deferred: Vec::new(),
        }
    }

    /// Ends the calls that waited longer than the call timeout; returns how many.
    pub fn sweep(&self) -> usize {
        let inner = &self.inner;
        let Some(deadline) = inner.clock.now().checked_sub(inner.cfg.call_timeout) else {
            return 0;
        };
        let expired = inner.correlator.expired(deadline);
        let n = expired.len();
        let secs = inner.cfg.call_timeout.as_secs_f64();
        for (key, p) in expired {
            let reason = format!("no reply within {secs} s");
            end_missing(inner, &key, p, &reason, true);
        }
        n
    }

    /// Runs `sweep` every second (at most) until the returned task is aborted.
    pub fn spawn_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        let every = (self.inner.cfg.call_timeout / 4)
            .clamp(Duration::from_millis(10), Duration::from_secs(1));
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                me.sweep();
            }
        })
    }
}

impl Inner {
    /// The legacy session a request without `Mcp-Session-Id` belongs to: the one whose stream
    /// announced this path and query as its endpoint, or — for a stream rpctap did not see
    /// start — the `sessionId` / `session_id` query parameter the SDKs use.
    fn legacy_session(&self, meta: &RequestMeta<'_>) -> Option<Arc<str>> {
        let query = meta.query?;
        let inner = self;
        if inner.endpoints_len.load(Ordering::Relaxed) > 0 {
            let url = format!("{}?{}", meta.path, query);
            let eps = inner.endpoints.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(s) = eps.by_url.get(url.as_str()) {
                return Some(s.clone());
            }
        }
        query
            .split('&')
            .find_map(|kv| {
                kv.strip_prefix("sessionId=")
                    .or_else(|| kv.strip_prefix("session_id="))
            })
            .filter(|s| !s.is_empty())
            .map(Arc::from)
    }

    /// Remembers a legacy stream's announced endpoint; returns its session.
    fn announce_endpoint(&self, target: String) -> Arc<str> {
        let inner = self;
        let sid: Arc<str> = endpoint_session(&target).into();
        let mut eps = inner.endpoints.lock().unwrap_or_else(|p| p.into_inner());
        let key: Box<str> = target.into();
        if eps.by_url.insert(key.clone(), sid.clone()).is_none() {
            eps.order.push_back(key);
            while eps.order.len() > inner.cfg.limits.max_sessions.max(1) {
                if let Some(old) = eps.order.pop_front() {
                    eps.by_url.remove(&old);
                }
            }
        }
        inner
            .endpoints_len
            .store(eps.by_url.len(), Ordering::Relaxed);
        sid
    }
}

/// Where an anomaly was seen: the exchange, the scope, and the frame (direction and batch index).
#[derive(Clone, Copy)]
struct Site<'a> {
    exchange: u64,
    scope: &'a Scope,
    at: Option<(Direction, Option<u32>)>,
}

fn flag(
    inner: &Inner,
    site: Site<'_>,
    code: Code,
    id: Option<&Id>,
    method: Option<&Arc<str>>,
    message: String,
) {
    inner.stats.anomalies[code as usize].fetch_add(1, Ordering::Relaxed);
    tracing::debug!(code = code.as_str(), exchange = site.exchange, scope = %site.scope, %message, "anomaly");
    if inner.bus.wants_in(Interest::ANOMALY, site.exchange) {
        inner.bus.publish(Event::Anomaly(AnomalyEvent {
            ts: now_ns(),
            exchange: site.exchange,
            scope: site.scope.clone(),
            code: code.as_str(),
            severity: code.severity(),
            id: id.cloned(),
            method: method.cloned(),
            direction: site.at.map(|a| a.0),
            batch_index: site.at.and_then(|a| a.1),
            message,
        }));
    }
}

/// Ends a call. With `defer`, the event waits there (so a reply's message event is published
/// before the outcome it causes).
fn end_call(
    inner: &Inner,
    key: &PendingKey,
    p: Pending,
    outcome: Outcome,
    extra: &[&'static str],
    response_index: Option<u32>,
    defer: Option<&mut Vec<Event>>,
) {
    inner.stats.calls_ended.fetch_add(1, Ordering::Relaxed);
    if inner.bus.wants_in(Interest::CALL, p.exchange) {
        let mut anomalies = p.anomalies;
        anomalies.extend_from_slice(extra);
        let ev = Event::Call(CallEvent {
            ts: now_ns(),
            exchange: p.exchange,
            scope: key.scope.clone(),
            direction: key.direction,
            method: p.method,
            target: p.target,
            id: key.id.clone(),
            outcome,
            latency_us: Some(
                inner
                    .clock
                    .now()
                    .saturating_duration_since(p.started)
                    .as_micros() as u64,
            ),
            anomalies,
            request_index: p.index,
            response_index,
        });
        match defer {
            Some(d) => d.push(ev),
            None => inner.bus.publish(ev),
        }
    }
}

/// Ends a call and each of its duplicates (same id, still pending) with the same outcome.
fn end_with_copies(
    inner: &Inner,
    key: &PendingKey,
    p: Pending,
    outcome: &Outcome,
    response_index: Option<u32>,
    mut defer: Option<&mut Vec<Event>>,
) {
    for _ in 0..=p.extra {
        let mut one = p.clone();
        one.extra = 0;
        end_call(
            inner,
            key,
            one,
            outcome.clone(),
            &[],
            response_index,
            defer.as_deref_mut(),
        );
    }
}

/// Ends a call (and each of its duplicates) as missing.
fn end_missing(inner: &Inner, key: &PendingKey, p: Pending, reason: &str, anomaly: bool) {
    let copies = 1 + p.extra;
    for _ in 0..copies {
        let mut p = p.clone();
        p.extra = 0;
        let extra: &[&'static str] = if anomaly {
            flag(
                inner,
                Site {
                    exchange: p.exchange,
                    scope: &key.scope,
                    at: Some((key.direction, p.index)),
                },
                Code::MissingResponse,
                Some(&key.id),
                Some(&p.method),
                format!("call {} `{}` got no reply: {reason}", key.id, p.method),
            );
            &[Code::MissingResponse.as_str()]
        } else {
            &[]
        };
        end_call(
            inner,
            key,
            p,
            Outcome::Missing {
                reason: reason.to_string(),
            },
            extra,
            None,
            None,
        );
    }
}

impl ExchangeCtx {
    fn site(&self) -> Site<'_> {
        Site {
            exchange: self.id,
            scope: &self.scope,
            at: self.cur,
        }
    }

    pub fn scope(&self) -> &Scope {
        &self.scope
    }

    /// The ids of the calls in the request, in order (for error replies the proxy makes).
    pub fn call_ids(&self) -> &[Id] {
        &self.req.call_ids
    }

    /// Whether the request was a batch.
    pub fn was_batch(&self) -> bool {
        self.req.batch
    }

    /// Whether the request body was JSON-RPC (or meant to be: JSON on a POST).
    pub fn is_rpc(&self) -> bool {
        self.req.is_rpc
    }

    /// Feeds the whole request body. `complete` is false when the body was larger than the
    /// inspection cap (then only a warning is recorded).
    pub fn request_body(&mut self, body: &Bytes, complete: bool) {
        self.req.is_rpc = true;
        if !complete {
            flag(&self.insp, self.site(),
                Code::NotInspected,
                None,
                None,
                format!(
                    "request body larger than the inspection cap ({} bytes): forwarded, not inspected",
                    self.insp.cfg.max_frame_bytes
                ),
            );
            return;
        }
        self.request_parsed(body, rpc::parse_body(body));
    }

    /// Like `request_body`, for a body the caller already parsed.
    pub fn request_parsed(&mut self, body: &Bytes, parsed: Body) {
        self.req.is_rpc = true;
        match parsed {
            Body::ParseError(why) => {
                self.req.parse_error = true;
                self.publish_unparsed(Direction::ClientToServer, body.clone(), None);
                flag(
                    &self.insp,
                    self.site(),
                    Code::ParseError,
                    None,
                    None,
                    format!("request body is not valid JSON: {why}"),
                );
            }
            Body::Single(env) => self.on_envelope(Direction::ClientToServer, env, None, None),
            Body::Batch(members) if members.is_empty() => {
                self.req.batch = true;
                self.publish_empty_batch(Direction::ClientToServer, body.clone(), None);
            }
            Body::Batch(members) => {
                self.req.batch = true;
                self.batch_len = Some(members.len() as u32);
                for (i, env) in members.into_iter().enumerate() {
                    self.on_envelope(Direction::ClientToServer, env, Some(i as u32), None);
                }
                self.batch_len = None;
            }
        }
    }

    /// A rate-limit rule refused a message of the request (or, `shadow`, would have): a call
    /// ends as refused, a notification is recorded as dropped.
    pub fn refuse(
        &mut self,
        id: Option<&Id>,
        method: &str,
        refusal: &crate::limit::Refusal,
        shadow: bool,
    ) {
        let inner = self.insp.clone();
        if !shadow {
            inner.stats.refusals.fetch_add(1, Ordering::Relaxed);
        }
        if inner.bus.wants_in(Interest::REFUSAL, self.id) {
            inner
                .bus
                .publish(Event::Refusal(crate::events::RefusalEvent {
                    ts: now_ns(),
                    exchange: self.id,
                    scope: self.scope.clone(),
                    method: method.into(),
                    id: id.cloned(),
                    rule: refusal.rule.clone(),
                    shadow,
                    retry_after_ms: refusal.retry_after.as_millis() as u64,
                }));
        }
        let (Some(id), false) = (id, shadow) else {
            return;
        };
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: Direction::ClientToServer,
            id: id.clone(),
        };
        if let Some(p) = inner.correlator.take(&key) {
            end_call(
                &inner,
                &key,
                p,
                Outcome::Refused {
                    rule: refusal.rule.to_string(),
                },
                &[],
                None,
                None,
            );
        }
        if let Some(pos) = self.req.calls.iter().position(|k| k == &key) {
            self.req.calls.remove(pos);
        }
        if let Some(pos) = self.req.call_ids.iter().position(|i| i == id) {
            self.req.call_ids.remove(pos);
        }
    }

    /// The response's status line and headers arrived.
    pub fn response_head(&mut self, meta: &ResponseMeta<'_>) {
        let ResponseMeta {
            status,
            content_type,
            session,
            content_length,
            headers,
        } = *meta;
        self.status = status;
        let inner = self.insp.clone();
        if inner.bus.wants_in(Interest::HTTP, self.id) {
            inner.bus.publish(Event::Http(HttpEvent::Response {
                headers: headers
                    .filter(|_| inner.bus.wants(Interest::HTTP_HEADERS))
                    .map(|h| inner.cfg.redact.headers(h))
                    .unwrap_or_default(),
                ts: now_ns(),
                exchange: self.id,
                status,
                content_type: content_type.map(str::to_string),
                local: None,
            }));
        }
        if let Some(new_sid) = session {
            let new_sid: Arc<str> = new_sid.into();
            match &self.session_header {
                Some(old) if **old != *new_sid => flag(
                    &inner,
                    self.site(),
                    Code::McpSessionChanged,
                    None,
                    None,
                    format!("the server answered session {old} with Mcp-Session-Id {new_sid}"),
                ),
                Some(_) => {}
                None => {
                    // A session starts here (the reply to `initialize`).
                    let initialize = self.req.call_ids.len() == 1;
                    let ((), evicted) = inner.correlator.with_session(&new_sid, |s| {
                        s.seen_start = true;
                    });
                    self.notice_evicted(evicted);
                    if initialize {
                        let id = self.req.call_ids[0].clone();
                        let _ = inner.correlator.use_session_id(
                            &new_sid,
                            Direction::ClientToServer,
                            &id,
                        );
                    }
                }
            }
        }
        let ct = content_type.unwrap_or("");
        let is_sse = is_event_stream(ct);
        self.mode = if is_sse && (self.req.is_rpc || self.is_get_stream) {
            if self.is_get_stream
                && self.transport == Transport::Json
                && self.session_header.is_none()
            {
                // A GET stream without an MCP session: the legacy transport until proven otherwise.
                self.transport = Transport::LegacySse;
            }
            ReplyMode::Sse {
                dec: Box::new(SseDecoder::new(inner.cfg.max_frame_bytes)),
            }
        } else if self.req.is_rpc
            && status != 202
            && (contains_ignore_case(ct, "json") || (ct.is_empty() && (200..300).contains(&status)))
        {
            // 202 Accepted carries no reply (whatever text it has); a non-2xx body without a
            // content type is an HTTP error page, not JSON-RPC.
            // A body declared larger than the cap is never buffered at all.
            let overflow = content_length.is_some_and(|n| n > inner.cfg.max_frame_bytes as u64);
            let buf = match content_length {
                Some(n) if !overflow => BytesMut::with_capacity(n as usize),
                _ => BytesMut::new(),
            };
            ReplyMode::Json { buf, overflow }
        } else {
            ReplyMode::Ignore
        };
        if self.is_get_stream || !self.req.is_rpc {
            return;
        }
        let notification_only = self.req.calls.is_empty()
            && !self.req.parse_error
            && (self.req.notifications > 0 || self.req.responses > 0);
        if notification_only && !matches!(status, 202 | 204) && !(200..300).contains(&status) {
            // a non-2xx answer to notifications is reported below with the body, or here
        }
        if notification_only && !matches!(status, 202 | 204) {
            flag(&inner, self.site(),
                Code::HttpStatus,
                None,
                None,
                format!("a POST of only notifications/responses was answered HTTP {status}, not 202/204"),
            );
        }
    }

    /// A chunk of the response body (a copy of what is forwarded).
    pub fn response_data(&mut self, chunk: &[u8]) {
        self.bytes += chunk.len() as u64;
        let max = self.insp.cfg.max_frame_bytes;
        match &mut self.mode {
            ReplyMode::Ignore => {}
            ReplyMode::Json { buf, overflow } => {
                if *overflow {
                    return;
                }
                if buf.len() + chunk.len() > max || buf.capacity() > 2 * max {
                    *overflow = true;
                    buf.clear();
                    *buf = BytesMut::new();
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
            ReplyMode::Sse { dec } => {
                let mut events = Vec::new();
                dec.feed(chunk, |e| events.push(e));
                for ev in events {
                    self.on_sse_event(ev);
                }
            }
        }
    }

    /// A reply frame was forwarded without being inspected (larger than the cap). Offline, a
    /// recording's `NOT_INSPECTED` line for the reply says this happened.
    pub fn reply_not_inspected(&mut self) {
        match &mut self.mode {
            ReplyMode::Json { buf, overflow } => {
                *overflow = true;
                *buf = BytesMut::new();
            }
            ReplyMode::Sse { .. } => {
                flag(&self.insp, self.site(),
                    Code::NotInspected,
                    None,
                    None,
                    format!(
                        "an SSE event larger than the inspection cap ({} bytes): forwarded, not inspected",
                        self.insp.cfg.max_frame_bytes
                    ),
                );
                self.reply_frames += 1;
            }
            ReplyMode::Ignore => {}
        }
    }

    /// rpctap answered the request itself (`status`, because of `reason`): the upstream never
    /// answered, so the calls end as missing with that reason — not as the server's errors, and
    /// without a finding against the server.
    pub fn answer_locally(&mut self, status: u16, reason: &str) {
        self.status = status;
        let inner = self.insp.clone();
        if inner.bus.wants_in(Interest::HTTP, self.id) {
            inner.bus.publish(Event::Http(HttpEvent::Response {
                headers: Default::default(),
                ts: now_ns(),
                exchange: self.id,
                status,
                content_type: None,
                local: Some(reason.to_string()),
            }));
        }
        self.mode = ReplyMode::Ignore;
        for k in std::mem::take(&mut self.req.calls) {
            if let Some(p) = inner.correlator.remove_all(&k) {
                end_missing(&inner, &k, p, reason, false);
            }
        }
    }

    fn on_sse_event(&mut self, ev: sse::SseEvent) {
        if ev.oversized {
            self.reply_not_inspected();
            return;
        }
        match ev.kind() {
            "message" => {}
            "endpoint" if self.is_get_stream => {
                // Legacy HTTP+SSE: the data is the URL the client will POST its messages to;
                // the messages posted there belong to this stream's session.
                let data = String::from_utf8_lossy(&ev.data).into_owned();
                let inner = self.insp.clone();
                if inner.bus.wants_in(Interest::HTTP, self.id) {
                    inner.bus.publish(Event::Http(HttpEvent::Endpoint {
                        ts: now_ns(),
                        exchange: self.id,
                        url: data.clone(),
                    }));
                }
                let target = endpoint_target(&data, self.get_path.as_deref().unwrap_or("/"));
                let sid = inner.announce_endpoint(target);
                self.scope = Scope::Session(sid);
                self.transport = Transport::LegacySse;
                return;
            }
            _ => return,
        }
        if ev.data.is_empty() {
            return; // priming event (id/retry only) or an empty keep-alive
        }
        let transport = if self.transport == Transport::LegacySse {
            Transport::LegacySse
        } else {
            Transport::Sse
        };
        self.reply_body(ev.data, transport, ev.id);
    }

    /// One complete reply body (a JSON body, or one SSE event's data).
    fn reply_body(&mut self, body: Bytes, transport: Transport, sse_id: Option<String>) {
        self.reply_frames += 1;
        let inner = self.insp.clone();
        match rpc::parse_body(&body) {
            Body::ParseError(why) => {
                self.publish_unparsed_with(Direction::ServerToClient, body, sse_id, transport);
                flag(
                    &inner,
                    self.site(),
                    Code::ParseError,
                    None,
                    None,
                    format!("reply is not valid JSON: {why}"),
                );
            }
            Body::Single(env) => {
                // Over SSE a batch's replies may come one per event (MCP 2025-03-26: "these
                // responses MAY be batched"); only a JSON body must be an array.
                if self.req.batch
                    && !self.is_get_stream
                    && transport == Transport::Json
                    && env.kind.is_response()
                {
                    // The spec allows a single reply only when the batch itself could not be
                    // read: not JSON (then it was no batch here) or an empty array.
                    let empty_batch = self.req.calls.is_empty()
                        && self.req.notifications == 0
                        && self.req.responses == 0;
                    let whole_request_error = env.kind == Kind::Error
                        && env.id == Some(Id::Null)
                        && matches!(env.error_code, Some(-32700 | -32600))
                        && empty_batch;
                    if !whole_request_error {
                        self.cur = Some((Direction::ServerToClient, None));
                        flag(
                            &inner,
                            self.site(),
                            Code::InvalidBatchReply,
                            env.id.as_ref(),
                            None,
                            "a batch request was answered by a single object, not an array".into(),
                        );
                        self.cur = None;
                    }
                }
                self.on_envelope_t(Direction::ServerToClient, env, None, sse_id, transport);
            }
            Body::Batch(members) if members.is_empty() => {
                flag(
                    &inner,
                    self.site(),
                    Code::InvalidEnvelope,
                    None,
                    None,
                    "an empty array is not a valid reply".into(),
                );
                self.publish_empty_batch(Direction::ServerToClient, body, sse_id);
            }
            Body::Batch(members) => {
                self.batch_len = Some(members.len() as u32);
                for (i, env) in members.into_iter().enumerate() {
                    self.on_envelope_t(
                        Direction::ServerToClient,
                        env,
                        Some(i as u32),
                        sse_id.clone(),
                        transport,
                    );
                }
                self.batch_len = None;
            }
        }
    }

    /// An empty batch (`[]`): no message, but a frame — published as an invalid message with
    /// `batch_len` 0 so the recording keeps it.
    fn publish_empty_batch(&self, dir: Direction, raw: Bytes, sse_id: Option<String>) {
        if self.insp.bus.wants_in(Interest::MESSAGE, self.id) {
            self.insp.bus.publish(Event::Message(MessageEvent {
                ts: now_ns(),
                exchange: self.id,
                scope: self.scope.clone(),
                direction: dir,
                transport: self.transport,
                kind: Kind::Invalid,
                id: None,
                method: None,
                target: None,
                batch_index: None,
                batch_len: Some(0),
                sse_id,
                message: raw,
                unparsed: false,
            }));
        }
    }

    fn publish_unparsed(&self, dir: Direction, raw: Bytes, sse_id: Option<String>) {
        self.publish_unparsed_with(dir, raw, sse_id, self.transport);
    }

    fn publish_unparsed_with(
        &self,
        dir: Direction,
        raw: Bytes,
        sse_id: Option<String>,
        transport: Transport,
    ) {
        self.insp.stats.messages.fetch_add(1, Ordering::Relaxed);
        if self.insp.bus.wants_in(Interest::MESSAGE, self.id) {
            self.insp.bus.publish(Event::Message(MessageEvent {
                ts: now_ns(),
                exchange: self.id,
                scope: self.scope.clone(),
                direction: dir,
                transport,
                kind: Kind::Invalid,
                id: None,
                method: None,
                target: None,
                batch_index: None,
                batch_len: None,
                sse_id,
                unparsed: serde_json::from_slice::<serde::de::IgnoredAny>(&raw).is_err()
                    || self.insp.cfg.redact.has_paths(),
                // Not JSON: redaction by path cannot apply, so with paths set it is withheld.
                message: if self.insp.cfg.redact.has_paths() {
                    Bytes::from_static(b"[REDACTED: unparsable message]")
                } else {
                    raw
                },
            }));
        }
    }

    fn on_envelope(
        &mut self,
        dir: Direction,
        env: Envelope,
        batch_index: Option<u32>,
        sse_id: Option<String>,
    ) {
        let t = self.transport;
        self.on_envelope_t(dir, env, batch_index, sse_id, t)
    }

    fn on_envelope_t(
        &mut self,
        dir: Direction,
        env: Envelope,
        batch_index: Option<u32>,
        sse_id: Option<String>,
        transport: Transport,
    ) {
        self.cur = Some((dir, batch_index));
        self.on_envelope_inner(dir, env, batch_index, sse_id, transport);
        self.cur = None;
        for ev in self.deferred.drain(..) {
            self.insp.bus.publish(ev);
        }
    }

    fn on_envelope_inner(
        &mut self,
        dir: Direction,
        env: Envelope,
        batch_index: Option<u32>,
        sse_id: Option<String>,
        transport: Transport,
    ) {
        let inner = self.insp.clone();
        inner.stats.messages.fetch_add(1, Ordering::Relaxed);
        let method: Option<Arc<str>> = env.method.clone();
        let target: Option<Arc<str>> = env.target.clone();
        // For a response, the method of the call it answers (filled in below).
        let mut reply_method: Option<Arc<str>> = None;
        let mut reply_target: Option<Arc<str>> = None;
        let mut anomalies: Vec<&'static str> = Vec::new();

        // Flagged on the request that chose the id, not again on the reply that echoes it.
        let is_request = matches!(env.kind, Kind::Request | Kind::Invalid) && env.method.is_some();
        if let Some(id) = env
            .id
            .as_ref()
            .filter(|id| is_request && id.is_unsafe_number())
        {
            flag(&inner, self.site(),
                Code::UnsafeId,
                Some(id),
                method.as_ref(),
                format!("id {id} is not a safe integer (fraction, exponent, or beyond ±(2^53−1)); many clients cannot keep it exactly"),
            );
            anomalies.push(Code::UnsafeId.as_str());
        }

        match env.kind {
            Kind::Request => {
                let id = env.id.clone().unwrap_or(Id::Null);
                self.register_call(
                    dir,
                    id,
                    method.clone().unwrap_or_else(|| "".into()),
                    target.clone(),
                    anomalies,
                );
            }
            Kind::Notification => {
                if dir == Direction::ClientToServer {
                    self.req.notifications += 1;
                    if env.method.as_deref() == Some("notifications/initialized") {
                        if let Scope::Session(sid) = &self.scope {
                            let (_, ev) =
                                inner.correlator.with_session(sid, |s| s.initialized = true);
                            self.notice_evicted(ev);
                        }
                    }
                }
            }
            Kind::Result | Kind::Error => {
                if dir == Direction::ClientToServer {
                    self.req.responses += 1;
                }
                let (m, t) = self.on_response(dir, &env);
                reply_method = m;
                reply_target = t;
            }
            Kind::Invalid => {
                // An invalid request that carries an id still expects a (-32600) reply.
                if dir == Direction::ClientToServer {
                    if let (Some(id), Some(m)) = (env.id.clone(), method.clone()) {
                        self.register_call(
                            dir,
                            id,
                            m,
                            target.clone(),
                            vec![Code::InvalidEnvelope.as_str()],
                        );
                    }
                }
                flag(
                    &inner,
                    self.site(),
                    Code::InvalidEnvelope,
                    env.id.as_ref(),
                    method.as_ref(),
                    format!(
                        "invalid JSON-RPC message{}: {}",
                        batch_index
                            .map(|i| format!(" (batch member {i})"))
                            .unwrap_or_default(),
                        env.problem
                            .as_deref()
                            .unwrap_or("not a request or response")
                    ),
                );
            }
        }

        if inner.bus.wants_in(Interest::MESSAGE, self.id) {
            inner.bus.publish(Event::Message(MessageEvent {
                ts: now_ns(),
                exchange: self.id,
                scope: self.scope.clone(),
                direction: dir,
                transport,
                kind: env.kind,
                id: env.id,
                method: method.or(reply_method),
                target: target.or(reply_target),
                batch_index,
                batch_len: batch_index.and(self.batch_len),
                sse_id,
                message: match inner.cfg.redact.message(&env.raw) {
                    Some(red) => Bytes::from(red),
                    None => env.raw,
                },
                unparsed: false,
            }));
        }
    }

    fn register_call(
        &mut self,
        dir: Direction,
        id: Id,
        method: Arc<str>,
        target: Option<Arc<str>>,
        mut anomalies: Vec<&'static str>,
    ) {
        let inner = self.insp.clone();
        inner.stats.calls.fetch_add(1, Ordering::Relaxed);
        if let Scope::Session(sid) = &self.scope {
            let (used, ev) = inner.correlator.use_session_id(sid, dir, &id);
            self.notice_evicted(ev);
            let key = PendingKey {
                scope: self.scope.clone(),
                direction: dir,
                id: id.clone(),
            };
            if used && !inner.correlator.contains(&key) {
                flag(&inner, self.site(),
                    Code::DuplicateId,
                    Some(&id),
                    Some(&method),
                    format!("request id {id} (`{method}`) was already used in MCP session {sid}; ids must not be reused within a session"),
                );
                anomalies.push(Code::DuplicateId.as_str());
            }
            if dir == Direction::ClientToServer && !matches!(&*method, "initialize" | "ping") {
                let (early, ev) = inner
                    .correlator
                    .with_session(sid, |s| s.seen_start && !s.initialized);
                self.notice_evicted(ev);
                if early {
                    flag(
                        &inner,
                        self.site(),
                        Code::McpEarlyRequest,
                        Some(&id),
                        Some(&method),
                        format!(
                            "`{method}` was sent before the client sent notifications/initialized"
                        ),
                    );
                    anomalies.push(Code::McpEarlyRequest.as_str());
                }
            }
        }
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: dir,
            id: id.clone(),
        };
        let p = Pending {
            exchange: self.id,
            method: method.clone(),
            target,
            started: inner.clock.now(),
            anomalies,
            extra: 0,
            index: self.cur.and_then(|c| c.1),
        };
        let mut evicted = Vec::new();
        let res = inner.correlator.insert(key.clone(), p, &mut evicted);
        if res == Inserted::Duplicate {
            flag(&inner, self.site(),
                Code::DuplicateId,
                Some(&id),
                Some(&method),
                format!("request id {id} (`{method}`) reuses the id of a call still waiting for its reply"),
            );
        }
        if !evicted.is_empty() {
            let n = evicted.len();
            for (k, p) in evicted {
                end_missing(&inner, &k, p, "evicted: too many pending calls", false);
            }
            inner.bus.publish(Event::Notice(NoticeEvent {
                ts: now_ns(),
                what: "pending_evicted",
                message: format!(
                    "{n} oldest pending calls were ended as missing: the pending-call cap ({}) was reached",
                    inner.cfg.limits.max_pending
                ),
            }));
        }
        if dir == Direction::ClientToServer {
            self.req.calls.push(key);
            self.req.call_ids.push(id);
        }
    }

    /// Matches a response; returns the method and target of the call it answered.
    fn on_response(
        &mut self,
        dir: Direction,
        env: &Envelope,
    ) -> (Option<Arc<str>>, Option<Arc<str>>) {
        let inner = self.insp.clone();
        let id = env.id.clone().unwrap_or(Id::Null);
        let outcome = match env.kind {
            Kind::Error => Outcome::Error {
                code: env.error_code.unwrap_or(0),
                message: env.error_message.as_deref().unwrap_or("").to_string(),
            },
            _ => Outcome::Result,
        };
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: dir.reverse(),
            id: id.clone(),
        };
        let mut extra: Vec<&'static str> = Vec::new();
        let whole_request_error = id == Id::Null
            && env.kind == Kind::Error
            && matches!(env.error_code, Some(-32700 | -32600));
        if id == Id::Null && !whole_request_error {
            flag(&inner, self.site(),
                Code::NullIdResponse,
                None,
                None,
                format!(
                    "a response with id null ({}); null is only for -32700/-32600 errors when the request id could not be read",
                    outcome.label()
                ),
            );
            extra.push(Code::NullIdResponse.as_str());
        }
        if let Some(p) = inner.correlator.take(&key) {
            self.finish_reply(&key, p, outcome, env, extra);
            return (None, None);
        }
        if whole_request_error {
            // The server rejected the whole request: every call of it ends with this error.
            if dir == Direction::ServerToClient && !self.is_get_stream {
                for k in self.req.calls.clone() {
                    if let Some(p) = inner.correlator.remove_all(&k) {
                        let at = self.cur.and_then(|c| c.1);
                        end_with_copies(&inner, &k, p, &outcome, at, Some(&mut self.deferred));
                    }
                }
            }
            return (None, None);
        }
        if let Some(twin) = id.type_twin() {
            let twin_key = PendingKey {
                id: twin.clone(),
                ..key.clone()
            };
            if let Some(p) = inner.correlator.take(&twin_key) {
                flag(
                    &inner,
                    self.site(),
                    Code::IdTypeMismatch,
                    Some(&id),
                    Some(&p.method),
                    format!(
                        "reply id {id} matches call {twin} (`{}`) only if the JSON type is ignored",
                        p.method
                    ),
                );
                extra.push(Code::IdTypeMismatch.as_str());
                let m = (Some(p.method.clone()), p.target.clone());
                self.finish_reply(&twin_key, p, outcome, env, extra);
                return m;
            }
        }
        if id == Id::Null {
            return (None, None); // already flagged as NULL_ID_RESPONSE
        }
        if dir == Direction::ServerToClient
            && !self.is_get_stream
            && self.req.notifications > 0
            && self.req.calls.iter().all(|k| k.id != id)
        {
            flag(&inner, self.site(),
                Code::NotificationReply,
                Some(&id),
                None,
                format!("a response (id {id}) to a request that held only notifications; notifications get no reply"),
            );
            return (None, None);
        }
        flag(
            &inner,
            self.site(),
            Code::UnmatchedResponse,
            Some(&id),
            None,
            format!("response id {id} matches no pending call"),
        );
        (None, None)
    }

    fn finish_reply(
        &mut self,
        key: &PendingKey,
        p: Pending,
        outcome: Outcome,
        env: &Envelope,
        mut extra: Vec<&'static str>,
    ) {
        let inner = self.insp.clone();
        if env.tool_error && &*p.method == "tools/call" {
            flag(
                &inner,
                self.site(),
                Code::ToolError,
                Some(&key.id),
                Some(&p.method),
                format!(
                    "tool `{}` reported a failure (isError: true) inside a successful reply",
                    p.target.as_deref().unwrap_or("?")
                ),
            );
            extra.push(Code::ToolError.as_str());
        }
        if self.status != 200
            && self.status != 0
            && !self.is_get_stream
            && key.direction == Direction::ClientToServer
        {
            flag(
                &inner,
                self.site(),
                Code::HttpStatus,
                Some(&key.id),
                Some(&p.method),
                format!("a JSON-RPC reply carried by HTTP {}, not 200", self.status),
            );
            extra.push(Code::HttpStatus.as_str());
        }
        end_call(
            &inner,
            key,
            p,
            outcome,
            &extra,
            self.cur.and_then(|c| c.1),
            Some(&mut self.deferred),
        );
    }

    fn notice_evicted(&self, evicted: Option<Arc<str>>) {
        if let Some(sid) = evicted {
            self.insp.bus.publish(Event::Notice(NoticeEvent {
                ts: now_ns(),
                what: "session_evicted",
                message: format!(
                    "session {sid} was forgotten: the session cap ({}) was reached",
                    self.insp.cfg.limits.max_sessions
                ),
            }));
        }
    }

    /// Offline: the recording stops before this exchange ended (the proxy was killed); leave
    /// its calls as the live run left them.
    pub fn abandon(mut self) {
        self.ended = true;
    }

    /// The reply ended (normally or not). Calls of this exchange still waiting end as missing.
    pub fn end(&mut self, reason: EndReason) {
        if self.ended {
            return;
        }
        self.ended = true;
        let inner = self.insp.clone();
        let mode = std::mem::replace(&mut self.mode, ReplyMode::Ignore);
        match mode {
            ReplyMode::Json { buf, overflow } => {
                if overflow {
                    self.reply_frames += 1;
                    flag(&inner, self.site(),
                        Code::NotInspected,
                        None,
                        None,
                        format!(
                            "reply body larger than the inspection cap ({} bytes): forwarded, not inspected",
                            inner.cfg.max_frame_bytes
                        ),
                    );
                } else if !buf.is_empty() && matches!(reason, EndReason::Complete) {
                    if self.req.calls.is_empty()
                        && !self.req.parse_error
                        && self.req.notifications > 0
                    {
                        flag(&inner, self.site(),
                            Code::NotificationReply,
                            None,
                            None,
                            "a POST of only notifications was answered with a body; notifications get no reply".into(),
                        );
                        self.reply_frames += 1;
                        self.publish_unparsed(Direction::ServerToClient, buf.freeze(), None);
                    } else {
                        self.reply_body(buf.freeze(), Transport::Json, None);
                    }
                } else if !buf.is_empty() {
                    self.reply_frames += 1; // torn; not parsed
                }
            }
            ReplyMode::Sse { mut dec } => {
                if dec.finish() {
                    tracing::debug!(exchange = self.id, "SSE stream ended inside an event");
                }
            }
            ReplyMode::Ignore => {}
        }
        // A DELETE that succeeded ends its session.
        if self.req.delete_session && (200..300).contains(&self.status) {
            if let Scope::Session(sid) = &self.scope {
                for (k, p) in inner.correlator.drain_scope(&self.scope) {
                    end_missing(&inner, &k, p, "session ended (DELETE)", true);
                }
                inner.correlator.end_session(sid);
            }
        }
        let parked =
            self.status == 202 && matches!(self.scope, Scope::Session(_)) && self.reply_frames == 0;
        if !parked {
            let why = match (&reason, self.status) {
                (EndReason::Complete, s) if self.reply_frames == 0 => {
                    format!("HTTP {s} with no JSON-RPC reply")
                }
                (EndReason::Complete, _) => "the reply ended without it".to_string(),
                (r, _) => r.describe(),
            };
            for k in std::mem::take(&mut self.req.calls) {
                if let Some(p) = inner.correlator.remove_all(&k) {
                    if self.reply_frames == 0
                        && !(200..300).contains(&self.status)
                        && self.status != 0
                    {
                        let rejected = Outcome::Rejected {
                            status: self.status,
                        };
                        end_with_copies(&inner, &k, p, &rejected, None, None);
                    } else {
                        end_missing(&inner, &k, p, &why, true);
                    }
                }
            }
        }
        if inner.bus.wants_in(Interest::HTTP_END, self.id) {
            inner.bus.publish(Event::Http(HttpEvent::End {
                ts: now_ns(),
                exchange: self.id,
                reason: reason.describe(),
                bytes: self.bytes,
            }));
        }
    }
}

impl Drop for ExchangeCtx {
    fn drop(&mut self) {
        if !self.ended {
            self.end(EndReason::ClientGone);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{BusBuilder, Outcome};

    #[test]
    fn media_types_match_in_any_letter_case() {
        assert!(contains_ignore_case(
            "Application/JSON; charset=UTF-8",
            "json"
        ));
        assert!(contains_ignore_case("application/vnd.api+Json", "json"));
        assert!(!contains_ignore_case("text/plain", "json"));
        assert!(!contains_ignore_case("", "json"));
        assert!(contains_ignore_case("", ""));
        assert!(is_event_stream("Text/Event-Stream; charset=utf-8"));
        assert!(is_event_stream("text/event-stream"));
        assert!(!is_event_stream("text/event"));
        assert!(!is_event_stream("application/json"));
        let mut h = http::HeaderMap::new();
        assert!(!accepts_event_stream(&h));
        h.append(http::header::ACCEPT, "application/json".parse().unwrap());
        assert!(!accepts_event_stream(&h));
        h.append(http::header::ACCEPT, "Text/Event-Stream".parse().unwrap());
        assert!(accepts_event_stream(&h));
        // A JSON reply and an SSE reply whose types are not lower case are inspected.
        for (ct, body) in [
            (
                "Application/JSON",
                r#"{"jsonrpc":"2.0","id":1,"result":1}"#.to_string(),
            ),
            (
                "Text/Event-Stream; charset=utf-8",
                "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\n\n".to_string(),
            ),
        ] {
            let mut bus = BusBuilder::default();
            let mut sub = bus.subscribe("t", 1 << 10);
            let insp = Inspector::new(InspectConfig::default(), bus.build());
            let mut ex = insp.begin(&RequestMeta {
                method: "POST",
                path: "/",
                content_type: Some("APPLICATION/JSON"),
                ..Default::default()
            });
            ex.request_body(
                &Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"m"}"#),
                true,
            );
            ex.response_head(&ResponseMeta {
                status: 200,
                content_type: Some(ct),
                ..Default::default()
            });
            ex.response_data(body.as_bytes());
            ex.end(EndReason::Complete);
            let mut outcomes = Vec::new();
            while let Ok(ev) = sub.rx.try_recv() {
                if let Event::Call(c) = &*ev {
                    outcomes.push(c.outcome.clone());
                }
            }
            assert_eq!(outcomes, vec![Outcome::Result], "{ct}");
        }
    }
}

//! Inspection: turns copies of the traffic into JSON-RPC frames, correlates calls with replies
//! and flags anomalies, publishing everything as [`Event`]s on the bus.
//!
//! One implementation serves the live proxy and the offline checker: both drive an
//! [`ExchangeCtx`] with a request body, a response head, response chunks and an end. The
//! inspector never touches the bytes that are forwarded; it only reads copies, synchronously,
//! and never awaits.

pub mod a2a;
pub mod anomaly;
mod calls;
pub mod capability;
pub mod correlator;
mod exchange;
mod mcp;
mod mcp_checks;
mod modern;
pub mod offline;
pub mod recorded;
pub mod schemas;
pub mod sse;
mod subscriptions;
mod tasks;

use crate::media::{contains_ignore_case, is_event_stream};
use calls::*;
use mcp::Endpoints;
pub use mcp::{endpoint_target, session_param};

use crate::events::{
    now_ns, text_of, AnomalyEvent, Bus, CallEvent, Direction, Event, HttpEvent, Interest,
    MessageEvent, NoticeEvent, Outcome, Scope, Text, Transport,
};

/// The request methods an event names without a copy.
const METHODS: &[&str] = &["POST", "GET", "DELETE", "PUT", "PATCH", "HEAD", "OPTIONS"];

/// The response content types an event names without a copy.
const CONTENT_TYPES: &[&str] = &[
    "application/json",
    "text/event-stream",
    "application/json; charset=utf-8",
    "text/event-stream; charset=utf-8",
];
use crate::redact::Redactor;
use crate::rpc::{self, Body, Envelope, Id, Kind};
use anomaly::Code;
use bytes::Bytes;
use correlator::{Correlator, Inserted, Limits, Pending, PendingKey};
use sse::SseDecoder;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A fixed byte string searched for in messages, its searcher built once: `memmem::find` builds
/// one per call, which costs more than the search itself on a message of a few hundred bytes
/// (measured in benches/RESULTS.md). `needle!(NAME, "text")` declares one; `NAME.find(bytes)`.
macro_rules! needle {
    ($name:ident, $text:expr) => {
        static $name: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
            std::sync::LazyLock::new(|| memchr::memmem::Finder::new($text));
    };
}
pub(crate) use needle;

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
    /// An MCP result larger than this is flagged `MCP_LARGE_RESULT`.
    pub large_result: usize,
    /// The most compiled tool schemas kept (shared by every session); the oldest go first.
    pub max_schemas: usize,
    /// Keep each call's trace context for its span (`--otlp`): the sampling share, and whether
    /// rpctap propagates its own span upstream.
    pub trace: Option<crate::trace::TraceSettings>,
    /// The server's tool baseline, when complete `tools/list`s are compared with one.
    pub baseline: Option<Arc<crate::baseline::Live>>,
}

impl Default for InspectConfig {
    fn default() -> Self {
        InspectConfig {
            max_frame_bytes: 16 << 20,
            call_timeout: Duration::from_secs(300),
            limits: Limits::default(),
            redact: Arc::new(Redactor::default()),
            large_result: 1 << 20,
            max_schemas: 1000,
            trace: None,
            baseline: None,
        }
    }
}

impl InspectConfig {
    /// The settings `check` needs to decide as the live inspector did, for a recording's
    /// header (read back by [`recorded::recorded_config`]).
    pub fn recorded_json(&self) -> serde_json::Value {
        serde_json::json!({
            "max_frame_bytes": self.max_frame_bytes,
            "call_timeout_ms": self.call_timeout.as_millis() as u64,
            "max_pending": self.limits.max_pending,
            "max_sessions": self.limits.max_sessions,
            "large_result": self.large_result,
            "max_schemas": self.max_schemas,
        })
    }
}

struct Inner {
    cfg: InspectConfig,
    correlator: Correlator,
    bus: Bus,
    /// Exchange numbers: the bus's counter, so a sampling subscriber's stride changes from the
    /// next exchange on.
    next_exchange: Arc<AtomicU64>,
    clock: Clock,
    /// The legacy HTTP+SSE transport's announced message URLs (path and query) → their session.
    /// A std mutex: taken only by synchronous code, never across an `.await`, and only when a
    /// legacy stream has announced an endpoint (`endpoints_len` says so without the lock).
    endpoints: std::sync::Mutex<Endpoints>,
    endpoints_len: std::sync::atomic::AtomicUsize,
    /// Compiled MCP tool schemas, shared by the sessions that list them.
    schemas: schemas::SchemaCache,
    /// Progress tokens of pending calls, by scope and token text (an entry lives as long as
    /// its call, so the map is bounded by the pending-call cap).
    progress: dashmap::DashMap<(Scope, Box<str>), mcp_checks::ProgressEntry, correlator::Hasher>,
    /// MCP tasks, by `taskId` (a std mutex: synchronous code only, and only for tasks traffic).
    tasks: std::sync::Mutex<tasks::Table>,
    /// When rpctap began to see traffic (wall clock, ns; 0 until the first exchange): a task
    /// created after it went through rpctap, or rpctap would know it.
    watch_start: AtomicU64,
    /// The A2A agent card the upstream served last (a std mutex: taken by synchronous code
    /// only, and only for A2A traffic).
    a2a_card: std::sync::Mutex<Option<Arc<a2a::CardFacts>>>,
}

impl Inner {
    /// A session ended (its stream, a DELETE, the server lost it): its tasks that never ended
    /// end now, then rpctap forgets the session.
    fn end_session(&self, sid: &Arc<str>, why: &str) {
        tasks::end_session_tasks(self, sid, why);
        self.correlator.end_session(sid);
    }
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

/// What [`Inspector::stats`] reports.
#[derive(Clone, Copy, Debug, Default)]
pub struct InspectorStats {
    pub pending: usize,
    pub pending_c2s: usize,
    pub sessions: usize,
    pub evicted_calls: u64,
    pub evicted_sessions: u64,
    /// Compiled tool schemas kept, compiled in all, and dropped at the cap.
    pub schemas_kept: usize,
    pub schemas_compiled: u64,
    pub schemas_evicted: u64,
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
    /// `Mcp-Method` and `Mcp-Name` (SEP-2243).
    pub mcp_method: Option<&'a str>,
    pub mcp_name: Option<&'a str>,
    /// `A2A-Version` (A2A 1.0; absent means 0.3).
    pub a2a_version: Option<&'a str>,
    /// The client's address as text (made once per connection; an event shares it).
    pub peer: Option<&'a Arc<str>>,
    /// Its IP (a stateless client's group names it).
    pub peer_ip: Option<std::net::IpAddr>,
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
    /// `WWW-Authenticate`.
    pub www_authenticate: Option<&'a str>,
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
    /// A stream ended (`rpctap stdio`: the child exited), and how.
    Closed(String),
}

impl EndReason {
    fn describe(&self) -> Text {
        match self {
            EndReason::Complete => Text::Borrowed("complete"),
            EndReason::ClientGone => Text::Borrowed("client disconnected"),
            EndReason::UpstreamError(e) => format!("upstream error: {e}").into(),
            EndReason::Closed(how) => how.clone().into(),
        }
    }
}

enum ReplyMode {
    /// Not inspected (not JSON-RPC, or no body expected).
    Ignore,
    Json {
        buf: crate::rpc::Gathered,
        overflow: bool,
    },
    Sse {
        dec: Box<SseDecoder>,
    },
    /// An A2A agent card (`a2a::is_card_path`), read whole up to the inspection cap.
    Card {
        buf: crate::rpc::Gathered,
        overflow: bool,
    },
}

/// Call events a reply ended, waiting for its message event (one, nearly always: inline).
pub(super) type Deferred = smallvec::SmallVec<[Event; 1]>;

/// What the request of an exchange held.
#[derive(Debug, Default)]
struct RequestSummary {
    is_rpc: bool,
    batch: bool,
    parse_error: bool,
    /// The request's calls (one, nearly always: inline, no allocation a call).
    calls: smallvec::SmallVec<[PendingKey; 1]>,
    /// How many of `calls` a reply in this exchange took off the correlator: when it is all of
    /// them, the end has nothing left to look up.
    answered: usize,
    notifications: u32,
    /// Replies (to server→client requests) the client posted.
    responses: u32,
    delete_session: bool,
    /// A fault changed the client's answer before it went up (`malformed`, `wrong_id` on a
    /// server's request): the server's status answers rpctap's bytes, not the client's.
    rewritten: bool,
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
    /// A GET with `Last-Event-ID`: the server may replay here what it sent on a stream that
    /// broke, which rpctap may have seen already (see `calls::redelivered`).
    resumed: bool,
    /// A bidirectional stream of lines (`rpctap stdio`): calls are not tied to a request of
    /// the exchange; those pending at its end are the session's.
    stream: bool,
    /// The frame being processed (direction, batch index), for anomaly sites and call indices.
    cur: Option<(Direction, Option<u32>)>,
    /// Call events waiting for the message event that caused them.
    deferred: Deferred,
    /// Anomaly events flagged on the message being processed, published right after it.
    held: std::cell::RefCell<Vec<Event>>,
    /// A message is being processed (`on_envelope_t`): findings wait in `held`.
    holding: bool,
    /// The frame being read came in a WebSocket binary message.
    binary_frame: bool,
    /// An SSE event of the reply carried an id (judged at the end: stream resumability is gone
    /// from 2026-07-28, for a server that speaks it).
    sse_id_seen: bool,
    /// The request's MCP headers, when it had any.
    mcp_hdr: Option<Box<mcp_checks::McpHeaders>>,
    /// The capabilities of this exchange's `initialize` request, until its reply names the
    /// session.
    init_caps: Option<capability::Caps>,
    /// The session this exchange's reply started (`Mcp-Session-Id` on an `initialize` reply).
    new_session: Option<Arc<str>>,
    /// The request carried an MCP method (with its MCP headers, which `mcp_response_head` reads
    /// itself, a 401 to it is judged by `MCP_AUTH`).
    mcp_request: bool,
    /// The request's method and path, kept only while someone reads authorization exchanges
    /// (to name one if this turns out to be one). Inline when short, as nearly every method and
    /// endpoint path is: kept for every exchange, used by few.
    req_line: Option<(compact_str::CompactString, compact_str::CompactString)>,
    /// A stream's live subscriptions (`eth_subscribe`…).
    subs: Option<Box<subscriptions::Subscriptions>>,
    /// The request's trace context, for its calls' spans (only with `--otlp`).
    pub trace: Option<Arc<crate::trace::CallTrace>>,
    /// A call has taken the propagated span id.
    trace_taken: bool,
    /// The client's IP, for a stateless client's group.
    peer_ip: Option<std::net::IpAddr>,
    /// What the request being read names of its sender in its `_meta` (MCP 2026-07-28).
    sender: Option<Box<modern::Sender>>,
    /// An HTTP exchange's request was searched for `_meta` keys already (`sender` has them).
    sender_read: bool,
    /// A WebSocket connection became an MCP session (its first request was MCP's).
    ws_decided: bool,
    /// The events of an `initialize` sent outside any session, until the reply's head says
    /// which session it started (`Mcp-Session-Id`): then they are published in that session, as
    /// its first call, instead of in a scope of their own (`mcp::await_session`).
    awaiting: Option<Vec<Event>>,
    /// A line too large to inspect, being read for its envelope as it passes (client's,
    /// server's): its id and method count its call or end it (`line_not_inspected`).
    long: [Option<Box<crate::rpc::head::HeadScan>>; 2],
    /// A2A streaming calls of this exchange that have had events, and whether their last one
    /// (`a2a::closes_stream`) came: those still open end as answered at the stream's end.
    a2a_streams: Vec<A2aStream>,
    /// The request's `A2A-Version`, when it had one.
    a2a_version: Option<Box<str>>,
    /// The request held an A2A streaming call: only then are its replies looked at as stream
    /// events (a lookup of their call each, which no other reply pays).
    a2a_streaming: bool,
    /// The request is A2A's (`a2a_request`): only then are its replies judged as A2A's.
    a2a_seen: bool,
    /// The `contextId` of the A2A message being registered (`a2a_request` reads it, the call's
    /// `Pending` takes it).
    a2a_context: Option<Arc<str>>,
}

/// An A2A streaming call of an exchange that has had events.
struct A2aStream {
    key: PendingKey,
    /// Its last event came.
    closed: bool,
    /// What its events were flagged with, for the call's end.
    found: Vec<&'static str>,
    /// The conversation its events named (`contextId`), for a call whose stream ends cut.
    context: Option<Arc<str>>,
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
                bus,
                next_exchange,
                clock,
                endpoints: Default::default(),
                endpoints_len: Default::default(),
                schemas: schemas::SchemaCache::new(cfg.max_schemas),
                progress: Default::default(),
                tasks: Default::default(),
                a2a_card: Default::default(),
                watch_start: AtomicU64::new(0),
                cfg,
            }),
        }
    }

    /// Offline only: the time is now `ns` after the inspector's start (it never goes back).
    pub fn set_time(&self, ns: u64) {
        if let Some((_, offset)) = &self.inner.clock.manual {
            offset.fetch_max(ns, Ordering::Relaxed);
        }
    }

    pub fn pending_calls(&self) -> usize {
        self.inner.correlator.pending_len()
    }

    /// The inspector's figures for the metrics (read at scrape time; the count of client calls
    /// walks the pending map, which the hot path never does).
    pub fn stats(&self) -> InspectorStats {
        let c = &self.inner.correlator;
        InspectorStats {
            pending: c.pending_len(),
            pending_c2s: c.pending_in(Direction::ClientToServer),
            sessions: c.sessions_len(),
            evicted_calls: c.evicted_calls.load(Ordering::Relaxed),
            evicted_sessions: c.evicted_sessions.load(Ordering::Relaxed),
            schemas_kept: self.inner.schemas.len(),
            schemas_compiled: self.inner.schemas.compiled.load(Ordering::Relaxed),
            schemas_evicted: self.inner.schemas.evicted.load(Ordering::Relaxed),
        }
    }

    /// Publishes an event that belongs to no exchange (a stdio server's stderr line).
    pub fn publish(&self, ev: Event) {
        self.inner.bus.publish(ev);
    }

    pub fn config(&self) -> &InspectConfig {
        &self.inner.cfg
    }

    /// Starts an exchange. Boxed: an exchange's state is large and lives as long as its reply
    /// streams, so the proxy keeps it on the heap; made in its box, it is not copied there.
    pub fn begin(&self, meta: &RequestMeta<'_>) -> Box<ExchangeCtx> {
        let id = self.inner.next_exchange.fetch_add(1, Ordering::Relaxed);
        self.start(id, meta)
    }

    /// Starts an exchange with a given number (offline: the number the recording gave it).
    pub fn begin_numbered(&self, id: u64, meta: &RequestMeta<'_>) -> Box<ExchangeCtx> {
        self.inner
            .next_exchange
            .fetch_max(id + 1, Ordering::Relaxed);
        self.start(id, meta)
    }

    /// Offline: when the recording began (its first event's time).
    pub fn set_watch_start(&self, ns: u64) {
        self.inner.watch_start.store(ns, Ordering::Relaxed);
    }

    fn watching(&self) {
        let w = &self.inner.watch_start;
        if w.load(Ordering::Relaxed) == 0 {
            let _ = w.compare_exchange(0, now_ns(), Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn start(&self, id: u64, meta: &RequestMeta<'_>) -> Box<ExchangeCtx> {
        self.watching();
        let inner = &self.inner;
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
        if inner.bus.wants_in(Interest::HTTP_REQUEST, id) {
            inner.bus.publish(Event::Http(HttpEvent::Request {
                headers: meta
                    .headers
                    .filter(|_| inner.bus.wants_in(Interest::HTTP_HEADERS, id))
                    .map(|h| inner.cfg.redact.headers(h))
                    .unwrap_or_default(),
                ts: now_ns(),
                exchange: id,
                method: text_of(meta.method, METHODS),
                path: match meta.query {
                    Some(q) => format!("{}?{}", meta.path, q),
                    None => meta.path.to_string(),
                },
                peer: meta.peer.cloned().unwrap_or_default(),
                session: meta.session.map(str::to_string),
                protocol_version: meta.protocol_version.map(str::to_string),
            }));
        }
        let mut ctx = Box::new(ExchangeCtx {
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
            resumed: meta.method == "GET"
                && meta
                    .headers
                    .is_some_and(|h| h.contains_key("last-event-id")),
            stream: false,
            cur: None,
            deferred: Default::default(),
            held: Default::default(),
            holding: false,
            binary_frame: false,
            sse_id_seen: false,
            mcp_request: false,
            mcp_hdr: mcp_checks::McpHeaders::from_meta(meta),
            init_caps: None,
            new_session: None,
            req_line: inner
                .bus
                .wants_in(Interest::HTTP_AUTH, id)
                .then(|| (meta.method.into(), meta.path.into())),
            subs: None,
            trace: inner.cfg.trace.map(|t| {
                let h = |n: &str| {
                    meta.headers
                        .and_then(|h| h.get(n))
                        .and_then(|v| v.to_str().ok())
                };
                let parent = h("traceparent")
                    .and_then(|tp| crate::trace::parse_traceparent(tp, h("tracestate")));
                Arc::new(crate::trace::CallTrace::new(
                    parent,
                    meta.peer.cloned(),
                    meta.protocol_version.or(meta.a2a_version).map(Into::into),
                    "http",
                    t,
                ))
            }),
            trace_taken: false,
            peer_ip: meta.peer_ip,
            sender: None,
            sender_read: false,
            a2a_streams: Vec::new(),
            a2a_version: meta.a2a_version.map(Into::into),
            a2a_streaming: false,
            a2a_seen: false,
            a2a_context: None,
            ws_decided: false,
            awaiting: None,
            long: [None, None],
        });
        ctx.mcp_request_head(meta);
        ctx
    }

    /// Starts a bidirectional stream of newline-delimited JSON-RPC (the MCP stdio transport):
    /// one session named `session`, whose lines both ways are fed by [`ExchangeCtx::line`] and
    /// whose pending calls end when it [`end`](ExchangeCtx::end)s.
    pub fn begin_stream(&self, session: &str) -> ExchangeCtx {
        self.watching();
        let id = self.inner.next_exchange.fetch_add(1, Ordering::Relaxed);
        self.start_stream(id, session)
    }

    /// Like `begin_stream`, with a given number (offline: the number the recording gave it).
    pub fn begin_stream_numbered(&self, id: u64, session: &str) -> ExchangeCtx {
        self.inner
            .next_exchange
            .fetch_max(id + 1, Ordering::Relaxed);
        self.start_stream(id, session)
    }

    /// Starts the inspection of WebSocket connection `exchange` (the number of its upgrade
    /// request): one scope per connection, its text messages both ways fed by
    /// [`ExchangeCtx::line`]; its pending calls end when it [`end`](ExchangeCtx::end)s.
    pub fn begin_ws(&self, exchange: u64) -> ExchangeCtx {
        self.inner
            .next_exchange
            .fetch_max(exchange + 1, Ordering::Relaxed);
        let mut ctx = self.start_stream(exchange, "");
        ctx.scope = Scope::Exchange(exchange);
        ctx.transport = Transport::Ws;
        if let Some(t) = &mut ctx.trace {
            Arc::make_mut(t).transport = "websocket";
        }
        ctx
    }

    fn start_stream(&self, id: u64, session: &str) -> ExchangeCtx {
        ExchangeCtx {
            insp: self.inner.clone(),
            id,
            get_path: None,
            batch_len: None,
            scope: Scope::Session(session.into()),
            transport: Transport::Stdio,
            session_header: None,
            req: RequestSummary {
                is_rpc: true,
                ..Default::default()
            },
            status: 0,
            mode: ReplyMode::Ignore,
            reply_frames: 0,
            ended: false,
            bytes: 0,
            is_get_stream: true,
            resumed: false,
            stream: true,
            cur: None,
            deferred: Default::default(),
            held: Default::default(),
            holding: false,
            binary_frame: false,
            sse_id_seen: false,
            mcp_hdr: None,
            init_caps: None,
            new_session: None,
            mcp_request: false,
            req_line: None,
            subs: None,
            trace: self.inner.cfg.trace.map(|_| {
                Arc::new(crate::trace::CallTrace {
                    transport: "stdio",
                    ..Default::default()
                })
            }),
            trace_taken: false,
            peer_ip: None,
            sender: None,
            sender_read: false,
            a2a_streams: Vec::new(),
            a2a_version: None,
            a2a_streaming: false,
            a2a_seen: false,
            a2a_context: None,
            ws_decided: false,
            awaiting: None,
            long: [None, None],
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
        n + tasks::sweep(inner)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{BusBuilder, Outcome};

    #[test]
    fn replies_typed_in_any_letter_case_are_inspected() {
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

    /// The server's request (id 4) on a tool call's event stream, that stream broken, the
    /// client's GET (with or without `Last-Event-ID`) given the same event again, the client's
    /// answer, the session's DELETE: the anomaly codes (with their ids) and the server's calls'
    /// outcomes.
    fn replayed(resume: bool) -> (Vec<(&'static str, String)>, Vec<Outcome>) {
        let mut bus = BusBuilder::default();
        let mut sub = bus.subscribe("t", 1 << 10);
        let insp = Inspector::new(InspectConfig::default(), bus.build());
        let ask = "id: e2\ndata: {\"jsonrpc\":\"2.0\",\"id\":4,\"method\":\"sampling/createMessage\",\"params\":{\"messages\":[],\"maxTokens\":5}}\n\n";
        let post = |body: &'static str, status: u16, reply: &str| {
            let mut ex = insp.begin(&RequestMeta {
                method: "POST",
                path: "/mcp",
                content_type: Some("application/json"),
                session: Some("s1"),
                ..Default::default()
            });
            ex.request_body(&Bytes::from_static(body.as_bytes()), true);
            ex.response_head(&ResponseMeta {
                status,
                content_type: (!reply.is_empty()).then_some("text/event-stream"),
                session: Some("s1"),
                ..Default::default()
            });
            ex.response_data(reply.as_bytes());
            ex.end(EndReason::ClientGone);
        };
        post(
            r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"ask","arguments":{}}}"#,
            200,
            &format!("id: e1\ndata: \n\n{ask}"),
        );
        let mut headers = http::HeaderMap::new();
        if resume {
            headers.insert("last-event-id", http::HeaderValue::from_static("e1"));
        }
        let mut get = insp.begin(&RequestMeta {
            method: "GET",
            path: "/mcp",
            session: Some("s1"),
            headers: Some(&headers),
            ..Default::default()
        });
        get.response_head(&ResponseMeta {
            status: 200,
            content_type: Some("text/event-stream"),
            session: Some("s1"),
            ..Default::default()
        });
        get.response_data(ask.as_bytes());
        post(
            r#"{"jsonrpc":"2.0","id":4,"result":{"role":"assistant","content":{"type":"text","text":"42"},"model":"m"}}"#,
            202,
            "",
        );
        let mut delete = insp.begin(&RequestMeta {
            method: "DELETE",
            path: "/mcp",
            session: Some("s1"),
            ..Default::default()
        });
        delete.response_head(&ResponseMeta {
            status: 200,
            ..Default::default()
        });
        delete.end(EndReason::Complete);
        get.end(EndReason::Complete);
        let (mut codes, mut outcomes) = (Vec::new(), Vec::new());
        while let Ok(ev) = sub.rx.try_recv() {
            match &*ev {
                Event::Anomaly(a) => codes.push((
                    a.code,
                    a.id.as_ref().map(|i| i.to_string()).unwrap_or_default(),
                )),
                Event::Call(c) if c.direction == Direction::ServerToClient => {
                    outcomes.push(c.outcome.clone())
                }
                _ => {}
            }
        }
        codes.sort();
        (codes, outcomes)
    }

    #[test]
    fn a_resumed_stream_replaying_a_waiting_request_is_no_new_call() {
        let (codes, outcomes) = replayed(true);
        // The tool call's own stream broke before its reply: the client left, so that call is
        // `abandoned` — its doing, no finding against the server.
        assert_eq!(codes, vec![]);
        assert_eq!(outcomes, vec![Outcome::Result]);
        // Without `Last-Event-ID` the same request again is a second call under a waiting id.
        let (codes, outcomes) = replayed(false);
        assert!(
            codes.contains(&("DUPLICATE_ID", "4".to_string())),
            "{codes:?}"
        );
        assert_eq!(outcomes.len(), 2, "{outcomes:?}");
    }
}

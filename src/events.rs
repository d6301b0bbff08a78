//! Events and the in-process event bus.
//!
//! The inspector turns traffic into [`Event`]s; observers (recorder, dashboard, log printer,
//! metrics) subscribe before the proxy starts. Publishing never blocks and never awaits: each
//! subscriber has its own bounded queue, and an event that does not fit is counted as dropped
//! for that subscriber (a lossless subscriber such as the recorder turns the count into an
//! explicit gap record). The subscriber list is fixed once the bus is built, so publishing takes
//! no lock at all.

use crate::rpc::{Id, Kind};
use bytes::Bytes;
use serde::{Deserialize, Serialize, Serializer};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Which way a message travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Direction {
    #[serde(rename = "c2s")]
    ClientToServer,
    #[serde(rename = "s2c")]
    ServerToClient,
}

impl Direction {
    pub fn reverse(self) -> Direction {
        match self {
            Direction::ClientToServer => Direction::ServerToClient,
            Direction::ServerToClient => Direction::ClientToServer,
        }
    }
    pub fn arrow(self) -> &'static str {
        match self {
            Direction::ClientToServer => "c→s",
            Direction::ServerToClient => "s→c",
        }
    }
}

/// How a message was carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// A plain `application/json` body.
    Json,
    /// An event of a `text/event-stream` body (MCP Streamable HTTP).
    Sse,
    /// The 2024-11-05 HTTP+SSE transport (`GET /sse`, `POST /messages?sessionId=…`).
    LegacySse,
    /// A line of the stdio transport (`rpctap stdio`): newline-delimited JSON-RPC on a child
    /// process's stdin and stdout.
    Stdio,
    /// A text message of a WebSocket connection.
    Ws,
}

/// Where ids are unique: an MCP session, or one HTTP exchange.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Session(Arc<str>),
    Exchange(u64),
}

impl Scope {
    pub fn short(&self) -> String {
        match self {
            Scope::Session(s) => s.chars().take(8).collect(),
            Scope::Exchange(n) => format!("#{n}"),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Session(s) => write!(f, "session:{s}"),
            Scope::Exchange(n) => write!(f, "exchange:{n}"),
        }
    }
}

impl Serialize for Scope {
    /// As its `Display` text, made without the formatting machinery (the JSON log writes every
    /// scope this way; the recorder writes its own in place and comes here only to escape).
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Scope::Exchange(n) => {
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(*n);
                let mut buf = [0u8; 29]; // "exchange:" + at most 20 digits
                buf[..9].copy_from_slice(b"exchange:");
                buf[9..9 + digits.len()].copy_from_slice(digits.as_bytes());
                match std::str::from_utf8(&buf[..9 + digits.len()]) {
                    Ok(t) => s.serialize_str(t),
                    Err(_) => s.collect_str(self), // unreachable: ASCII digits
                }
            }
            Scope::Session(id) => {
                let mut t = String::with_capacity(8 + id.len());
                t.push_str("session:");
                t.push_str(id);
                s.serialize_str(&t)
            }
        }
    }
}

/// Severity of an anomaly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
}

/// How a call ended. Every call ends in exactly one of these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Outcome {
    /// A `result` arrived.
    Result,
    /// An `error` arrived.
    Error { code: i64, message: String },
    /// rpctap refused it (rate limit).
    Refused { rule: String },
    /// The HTTP layer refused it: a non-2xx status without a JSON-RPC reply.
    Rejected { status: u16 },
    /// No reply, and why.
    Missing { reason: String },
}

impl Outcome {
    pub fn label(&self) -> String {
        match self {
            Outcome::Result => "result".into(),
            Outcome::Error { code, .. } => format!("error {code}"),
            Outcome::Refused { rule } => format!("refused ({rule})"),
            Outcome::Rejected { status } => format!("rejected (HTTP {status})"),
            Outcome::Missing { reason } => format!("missing ({reason})"),
        }
    }
}

/// One JSON-RPC message seen on the wire.
#[derive(Clone, Debug, Serialize)]
pub struct MessageEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    pub direction: Direction,
    pub transport: Transport,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Id>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<Arc<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Arc<str>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_index: Option<u32>,
    /// The number of members of the batch this message is part of (with `batch_index`), so a
    /// reader can tell where one frame ends.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_len: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sse_id: Option<String>,
    #[serde(serialize_with = "ser_raw")]
    pub message: Bytes,
    /// The frame was not valid JSON: `message` is its text (as a JSON string).
    #[serde(skip_serializing_if = "is_false")]
    pub unparsed: bool,
    /// It came in a WebSocket binary message (UTF-8 JSON all the same, so read as JSON-RPC).
    #[serde(skip_serializing_if = "is_false")]
    pub binary: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// The message verbatim: as JSON when it is JSON, else as a string (lossy UTF-8).
fn ser_raw<S: Serializer>(b: &Bytes, s: S) -> Result<S::Ok, S::Error> {
    RawMessage(b).serialize(s)
}

/// A message's bytes, serialized verbatim when they are JSON, else as a string (lossy UTF-8).
pub struct RawMessage<'a>(pub &'a [u8]);

impl Serialize for RawMessage<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match serde_json::from_slice::<&serde_json::value::RawValue>(self.0) {
            Ok(raw) => raw.serialize(s),
            Err(_) => s.serialize_str(&String::from_utf8_lossy(self.0)),
        }
    }
}

/// A call (a request with an id) that ended.
#[derive(Clone, Debug, Serialize)]
pub struct CallEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    /// The direction of the request.
    pub direction: Direction,
    pub method: Arc<str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<Arc<str>>,
    pub id: Id,
    #[serde(flatten)]
    pub outcome: Outcome,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    pub anomalies: Vec<&'static str>,
    /// The request's index in its batch, and the reply's in its batch (when batched).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response_index: Option<u32>,
    /// Where the call came from, for its trace span (only with `--otlp`).
    #[serde(skip)]
    pub trace: Option<Arc<crate::trace::CallTrace>>,
}

/// Something wrong, flagged the moment it was visible.
#[derive(Clone, Debug, Serialize)]
pub struct AnomalyEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    pub code: &'static str,
    pub severity: Severity,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Id>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<Arc<str>>,
    /// The frame it concerns: its direction and batch index.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch_index: Option<u32>,
    pub message: String,
}

/// The HTTP side of an exchange.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum HttpEvent {
    Request {
        ts: u64,
        exchange: u64,
        method: String,
        path: String,
        peer: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        /// The request's `MCP-Protocol-Version`.
        #[serde(skip_serializing_if = "Option::is_none")]
        protocol_version: Option<String>,
        /// Headers, secrets redacted; written as (name, value) pairs.
        headers: Headers,
    },
    Response {
        ts: u64,
        exchange: u64,
        status: u16,
        #[serde(skip_serializing_if = "Option::is_none")]
        content_type: Option<String>,
        headers: Headers,
        /// Set when rpctap answered itself (the upstream was unreachable or too slow, or the
        /// request could not be read): why. The upstream never saw or never answered the calls.
        #[serde(skip_serializing_if = "Option::is_none")]
        local: Option<String>,
    },
    /// A legacy HTTP+SSE stream announced the URL its client must POST messages to.
    Endpoint { ts: u64, exchange: u64, url: String },
    /// An exchange around an MCP endpoint that carries no JSON-RPC but matters to its users:
    /// an authorization challenge (`401`/`403` to an MCP request) or an OAuth / OpenID
    /// discovery document (`/.well-known/oauth-protected-resource…`,
    /// `/.well-known/oauth-authorization-server…`, `/.well-known/openid-configuration…`).
    Auth {
        ts: u64,
        exchange: u64,
        method: String,
        /// The path, without the query.
        path: String,
        status: u16,
        /// The challenge (redacted if configured secret).
        #[serde(skip_serializing_if = "Option::is_none")]
        www_authenticate: Option<String>,
    },
    /// A WebSocket's binary message: shown, not parsed (its length, on the wire or inflated).
    Binary {
        ts: u64,
        exchange: u64,
        direction: Direction,
        len: u64,
    },
    End {
        ts: u64,
        exchange: u64,
        reason: String,
        bytes: u64,
    },
}

/// An HTTP message's headers with secrets already redacted (made by
/// [`crate::redact::Redactor::headers`]). A `HeaderMap` clone shares the values' bytes, so an
/// event costs no string copies; it is written as `[[name, value], …]` (values as lossy UTF-8).
#[derive(Clone, Debug, Default)]
pub struct Headers(pub http::HeaderMap);

impl Serialize for Headers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(
            self.0
                .iter()
                .map(|(k, v)| (k.as_str(), String::from_utf8_lossy(v.as_bytes()))),
        )
    }
}

/// A bounded structure that had to let something go.
#[derive(Clone, Debug, Serialize)]
pub struct NoticeEvent {
    pub ts: u64,
    pub what: &'static str,
    pub message: String,
}

/// A call or notification refused by a rate-limit rule (or, `shadow`, one a shadow rule would
/// have refused).
#[derive(Clone, Debug, Serialize)]
pub struct RefusalEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    pub method: Arc<str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub id: Option<Id>,
    pub rule: Arc<str>,
    pub shadow: bool,
    pub retry_after_ms: u64,
}

/// Everything an observer can see.
#[derive(Clone, Debug, Serialize)]
#[serde(tag = "event", rename_all = "lowercase")]
pub enum Event {
    Http(HttpEvent),
    Message(MessageEvent),
    Call(CallEvent),
    Anomaly(AnomalyEvent),
    Refusal(RefusalEvent),
    Notice(NoticeEvent),
}

/// Which events a subscriber reads. The bus sends a subscriber only those, and the inspector
/// does not build an event (or copy an HTTP message's headers) that no subscriber reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Interest(u16);

impl Interest {
    /// HTTP request heads (method, path) and legacy stream endpoints.
    pub const HTTP_REQUEST: Interest = Interest(1);
    /// HTTP response heads (status, content type), rpctap's own answers included.
    pub const HTTP_STATUS: Interest = Interest(1 << 8);
    /// Both heads of every exchange.
    pub const HTTP: Interest = Interest(1 | 1 << 8);
    /// The headers of those heads (otherwise they come empty).
    pub const HTTP_HEADERS: Interest = Interest(1 << 1);
    /// The end of each exchange.
    pub const HTTP_END: Interest = Interest(1 << 2);
    pub const MESSAGE: Interest = Interest(1 << 3);
    pub const CALL: Interest = Interest(1 << 4);
    pub const ANOMALY: Interest = Interest(1 << 5);
    pub const REFUSAL: Interest = Interest(1 << 6);
    pub const NOTICE: Interest = Interest(1 << 7);
    /// Authorization exchanges around MCP endpoints ([`HttpEvent::Auth`]).
    pub const HTTP_AUTH: Interest = Interest(1 << 9);
    pub const NONE: Interest = Interest(0);
    pub const ALL: Interest = Interest(u16::MAX);

    pub const fn and(self, other: Interest) -> Interest {
        Interest(self.0 | other.0)
    }
    pub const fn contains(self, other: Interest) -> bool {
        self.0 & other.0 == other.0
    }
}

impl Event {
    /// The interest an event answers to.
    pub fn interest(&self) -> Interest {
        match self {
            Event::Http(HttpEvent::End { .. }) => Interest::HTTP_END,
            Event::Http(HttpEvent::Response { .. }) => Interest::HTTP_STATUS,
            Event::Http(HttpEvent::Auth { .. }) => Interest::HTTP_AUTH,
            Event::Http(HttpEvent::Binary { .. }) => Interest::MESSAGE,
            Event::Http(_) => Interest::HTTP_REQUEST,
            Event::Message(_) => Interest::MESSAGE,
            Event::Call(_) => Interest::CALL,
            Event::Anomaly(_) => Interest::ANOMALY,
            Event::Refusal(_) => Interest::REFUSAL,
            Event::Notice(_) => Interest::NOTICE,
        }
    }

    /// The HTTP exchange an event belongs to (a notice belongs to none).
    pub fn exchange(&self) -> Option<u64> {
        match self {
            Event::Http(
                HttpEvent::Request { exchange, .. }
                | HttpEvent::Response { exchange, .. }
                | HttpEvent::Endpoint { exchange, .. }
                | HttpEvent::Auth { exchange, .. }
                | HttpEvent::Binary { exchange, .. }
                | HttpEvent::End { exchange, .. },
            ) => Some(*exchange),
            Event::Message(m) => Some(m.exchange),
            Event::Call(c) => Some(c.exchange),
            Event::Anomaly(a) => Some(a.exchange),
            Event::Refusal(r) => Some(r.exchange),
            Event::Notice(_) => None,
        }
    }
}

/// The events per second a display (the dashboard, a feed client) takes in before it samples: about 2,000 calls/s of
/// plain JSON-RPC (five events per call) — more rows than anyone reads. Past that it shows one
/// exchange in k, k chosen every half second from the traffic, so that its cost to the proxy
/// stays flat however high the load; the header says so.
pub const EVENT_BUDGET: f64 = 10_000.0;

/// The stride that keeps `seen_per_sec` events per second — taken in at stride `current` —
/// within [`EVENT_BUDGET`]. It rises at once, and falls only when the traffic would fit in half
/// the stride (no flapping at the edge).
pub fn next_stride(current: u64, seen_per_sec: f64) -> u64 {
    let current = current.max(1);
    let offered = seen_per_sec * current as f64;
    let want = (offered / EVENT_BUDGET).ceil().clamp(1.0, 1024.0) as u64;
    if want > current || want * 2 <= current {
        want
    } else {
        current
    }
}

/// A subscriber's share of the exchanges: it reads the events of exchange `n` when
/// `n % stride == 0` (and every event that belongs to no exchange). A stride of 1 — the default,
/// and all a lossless subscriber ever has — is every exchange. A subscriber that may sample
/// (the dashboard) raises it under load, so that a whole exchange is shown or not, and the
/// events it does not show are never built.
///
/// A change applies to the exchanges that begin after it: an exchange keeps the decision made
/// when it began (so a call shown is never left without its outcome). The last `STRIDES`
/// changes are kept, each with the first exchange number it applies to, packed in one atomic
/// (`first << 16 | stride`); an exchange older than all of them is admitted.
#[derive(Clone, Debug)]
pub struct Stride(Arc<StrideInner>);

const STRIDES: usize = 8;

#[derive(Debug)]
struct StrideInner {
    /// The inspector's next exchange number (shared through the bus).
    next_exchange: Arc<AtomicU64>,
    ring: [AtomicU64; STRIDES],
    head: std::sync::atomic::AtomicUsize,
}

impl Stride {
    fn new(next_exchange: Arc<AtomicU64>) -> Self {
        let ring: [AtomicU64; STRIDES] = Default::default();
        ring[0].store(1, Ordering::Relaxed); // from exchange 0, stride 1
        Stride(Arc::new(StrideInner {
            next_exchange,
            ring,
            head: Default::default(),
        }))
    }
    pub fn get(&self) -> u64 {
        let h = self.0.head.load(Ordering::Acquire);
        (self.0.ring[h].load(Ordering::Relaxed) & 0xffff).max(1)
    }
    /// From the next exchange on, one in `n` (at most 65,535).
    pub fn set(&self, n: u64) {
        let n = n.clamp(1, 0xffff);
        if n == self.get() {
            return;
        }
        let first = self.0.next_exchange.load(Ordering::Relaxed);
        let h = (self.0.head.load(Ordering::Relaxed) + 1) % STRIDES;
        self.0.ring[h].store(first << 16 | n, Ordering::Relaxed);
        self.0.head.store(h, Ordering::Release);
    }
    fn admits(&self, exchange: Option<u64>) -> bool {
        let Some(x) = exchange else { return true };
        let h = self.0.head.load(Ordering::Acquire);
        for i in 0..STRIDES {
            let e = self.0.ring[(h + STRIDES - i) % STRIDES].load(Ordering::Relaxed);
            if e == 0 {
                break;
            }
            if x >= e >> 16 {
                return x % (e & 0xffff).max(1) == 0;
            }
        }
        true
    }
}

/// One subscriber's queue.
#[derive(Debug)]
struct Subscriber {
    name: &'static str,
    interest: Interest,
    /// A gated subscriber reads nothing while its gate is closed (the live feed with no client
    /// attached): nothing is built for it then.
    gate: Option<Arc<std::sync::atomic::AtomicBool>>,
    stride: Stride,
    tx: mpsc::Sender<Arc<Event>>,
    /// Events that did not fit in the queue; read by the subscriber to report the loss.
    dropped: Arc<AtomicU64>,
}

/// The receiving end of a subscription.
#[derive(Debug)]
pub struct Subscription {
    pub rx: mpsc::Receiver<Arc<Event>>,
    /// How many events this subscriber lost because its queue was full.
    pub dropped: Arc<AtomicU64>,
    /// Its share of the exchanges (1: all); only a sampling subscriber changes it.
    pub stride: Stride,
}

impl Subscriber {
    fn reads(&self, interest: Interest, exchange: Option<u64>) -> bool {
        self.interest.contains(interest)
            && self.gate.as_ref().is_none_or(|g| g.load(Ordering::Relaxed))
            && self.stride.admits(exchange)
    }
}

/// An observer that takes each event as it is published, on the publishing thread, without a
/// queue: for work cheaper than handing the event to another thread (the recorder serializes a
/// line into a bounded buffer). It must not block and must bound what it keeps.
pub trait Sink: Send + Sync + std::fmt::Debug {
    fn accept(&self, ev: &Event);
    /// Its name in a log line.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }
}

/// A sink on the bus, and whether it panicked (then it is dropped: mitmproxy's `safecall` —
/// one failing observer is logged, the exchange and the other observers go on).
#[derive(Debug)]
struct SinkEntry {
    interest: Interest,
    sink: Arc<dyn Sink>,
    dead: std::sync::atomic::AtomicBool,
}

/// Builds a [`Bus`]: subscribe everything first, then `build`.
#[derive(Debug)]
pub struct BusBuilder {
    subs: Vec<Subscriber>,
    sinks: Vec<SinkEntry>,
    /// The exchange numbers the inspector hands out (strides change from the next one on).
    next_exchange: Arc<AtomicU64>,
}

impl Default for BusBuilder {
    fn default() -> Self {
        BusBuilder {
            subs: Vec::new(),
            sinks: Vec::new(),
            next_exchange: Arc::new(AtomicU64::new(1)),
        }
    }
}

impl BusBuilder {
    /// Subscribes to every event.
    pub fn subscribe(&mut self, name: &'static str, capacity: usize) -> Subscription {
        self.subscribe_to(name, capacity, Interest::ALL)
    }
    /// Subscribes to the events `interest` names.
    pub fn subscribe_to(
        &mut self,
        name: &'static str,
        capacity: usize,
        interest: Interest,
    ) -> Subscription {
        self.subscribe_gated(name, capacity, interest, None)
    }
    /// Subscribes to the events `interest` names while `gate` is open.
    pub fn subscribe_gated(
        &mut self,
        name: &'static str,
        capacity: usize,
        interest: Interest,
        gate: Option<Arc<std::sync::atomic::AtomicBool>>,
    ) -> Subscription {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        let dropped = Arc::new(AtomicU64::new(0));
        let stride = Stride::new(self.next_exchange.clone());
        self.subs.push(Subscriber {
            name,
            interest,
            gate,
            stride: stride.clone(),
            tx,
            dropped: dropped.clone(),
        });
        Subscription {
            rx,
            dropped,
            stride,
        }
    }
    /// Adds a sink for the events `interest` names. A sink reads every exchange.
    pub fn sink(&mut self, interest: Interest, sink: Arc<dyn Sink>) {
        self.sinks.push(SinkEntry {
            interest,
            sink,
            dead: Default::default(),
        });
    }

    pub fn build(self) -> Bus {
        let wants = self
            .subs
            .iter()
            .map(|s| s.interest)
            .chain(self.sinks.iter().map(|s| s.interest))
            .fold(Interest::NONE, |w, i| w.and(i));
        Bus {
            subs: Arc::from(self.subs),
            sinks: Arc::from(self.sinks),
            wants,
            next_exchange: self.next_exchange,
        }
    }
}

/// The event bus: cheap to clone, never blocks.
#[derive(Clone, Debug)]
pub struct Bus {
    subs: Arc<[Subscriber]>,
    sinks: Arc<[SinkEntry]>,
    /// What any subscriber or sink reads.
    wants: Interest,
    /// The next exchange number (the inspector takes its numbers from here).
    next_exchange: Arc<AtomicU64>,
}

impl Default for Bus {
    fn default() -> Self {
        BusBuilder::default().build()
    }
}

impl Bus {
    /// The counter exchange numbers come from.
    pub fn exchange_counter(&self) -> Arc<AtomicU64> {
        self.next_exchange.clone()
    }

    /// Whether any subscriber reads events of `interest` (lets the inspector skip building
    /// what nobody reads).
    pub fn wants(&self, interest: Interest) -> bool {
        self.wants.contains(interest)
    }

    /// Whether any subscriber reads events of `interest` from `exchange` (its interest, and its
    /// share of the exchanges).
    pub fn wants_in(&self, interest: Interest, exchange: u64) -> bool {
        self.wants.contains(interest)
            && (self.sinks.iter().any(|s| s.interest.contains(interest))
                || self.subs.iter().any(|s| s.reads(interest, Some(exchange))))
    }

    pub fn publish(&self, ev: Event) {
        let kind = ev.interest();
        if !self.wants.contains(kind) {
            return;
        }
        for s in self.sinks.iter() {
            if s.interest.contains(kind) && !s.dead.load(Ordering::Relaxed) {
                let ok =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| s.sink.accept(&ev)));
                if ok.is_err() && !s.dead.swap(true, Ordering::Relaxed) {
                    tracing::error!(
                        observer = s.sink.name(),
                        "an observer panicked: dropped, the others go on"
                    );
                }
            }
        }
        let exchange = ev.exchange();
        let mut readers = self.subs.iter().filter(|s| s.reads(kind, exchange));
        let mut next = readers.next();
        if next.is_none() {
            return;
        }
        let mut ev = Some(Arc::new(ev));
        while let Some(s) = next {
            next = readers.next();
            // The last reader takes the event itself; the others a reference each.
            let e = match (next.is_some(), &ev) {
                (true, Some(e)) => e.clone(),
                _ => match ev.take() {
                    Some(e) => e,
                    None => return,
                },
            };
            if let Err(e) = s.tx.try_send(e) {
                if matches!(e, mpsc::error::TrySendError::Full(_)) {
                    let n = s.dropped.fetch_add(1, Ordering::Relaxed);
                    if n == 0 {
                        tracing::warn!(subscriber = s.name, "event queue full; dropping events");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_serialize_as_their_display_text() {
        for scope in [
            Scope::Exchange(0),
            Scope::Exchange(u64::MAX),
            Scope::Session("9fc07019fc90d586".into()),
            Scope::Session("a\"b\\c\u{1}".into()),
        ] {
            let json = serde_json::to_string(&scope).unwrap();
            assert_eq!(json, serde_json::to_string(&scope.to_string()).unwrap());
        }
    }

    fn notice(i: u64) -> Event {
        Event::Notice(NoticeEvent {
            ts: i,
            what: "test",
            message: String::new(),
        })
    }
    fn end(i: u64) -> Event {
        Event::Http(HttpEvent::End {
            ts: i,
            exchange: i,
            reason: "complete".into(),
            bytes: 0,
        })
    }

    #[test]
    fn subscribers_get_only_what_they_read() {
        let mut b = BusBuilder::default();
        let mut all = b.subscribe("all", 16);
        let mut notices = b.subscribe_to("notices", 16, Interest::NOTICE);
        let bus = b.build();
        assert!(bus.wants(Interest::HTTP_END) && bus.wants(Interest::NOTICE));
        bus.publish(notice(1));
        bus.publish(end(2));
        bus.publish(notice(3));
        let ts = |s: &mut Subscription| {
            let mut v = Vec::new();
            while let Ok(e) = s.rx.try_recv() {
                v.push(match &*e {
                    Event::Notice(n) => n.ts,
                    Event::Http(HttpEvent::End { ts, .. }) => *ts,
                    _ => 0,
                });
            }
            v
        };
        assert_eq!(ts(&mut all), vec![1, 2, 3]);
        assert_eq!(ts(&mut notices), vec![1, 3]);

        // Nobody reads HTTP heads or their headers: the inspector is told not to build them.
        let mut b = BusBuilder::default();
        let _d = b.subscribe_to("d", 4, Interest::HTTP.and(Interest::CALL));
        let bus = b.build();
        assert!(bus.wants(Interest::HTTP) && bus.wants(Interest::CALL));
        assert!(!bus.wants(Interest::HTTP_HEADERS) && !bus.wants(Interest::HTTP_END));
        assert!(!BusBuilder::default().build().wants(Interest::CALL));
    }

    #[test]
    fn an_exchange_keeps_the_sampling_decision_made_when_it_began() {
        let mut b = BusBuilder::default();
        let mut d = b.subscribe_to("dashboard", 64, Interest::HTTP_END);
        let bus = b.build();
        let counter = bus.exchange_counter();
        // Exchanges 1..=5 begin at stride 1; then the stride becomes 2; then 6..=9 begin.
        counter.store(6, Ordering::Relaxed);
        d.stride.set(2);
        assert_eq!(d.stride.get(), 2);
        for x in 1..10 {
            bus.publish(end(x)); // each exchange's last event, after the change
        }
        let mut got = Vec::new();
        while let Ok(e) = d.rx.try_recv() {
            got.push(e.exchange().unwrap());
        }
        // 1..=5 were shown from their start: their ends arrive too; of 6..=9, one in two.
        assert_eq!(got, vec![1, 2, 3, 4, 5, 6, 8]);
        // Older than every remembered change: admitted (never a call left without its end).
        for n in 3..20 {
            counter.store(100 * n, Ordering::Relaxed);
            d.stride.set(n);
        }
        assert!(bus.wants_in(Interest::HTTP_END, 7));
    }

    #[test]
    fn a_sampling_subscriber_reads_whole_exchanges_one_in_k() {
        let mut b = BusBuilder::default();
        let mut all = b.subscribe("recorder", 64);
        let mut some = b.subscribe_to("dashboard", 64, Interest::HTTP_END.and(Interest::NOTICE));
        some.stride.set(3);
        let bus = b.build();
        for x in 0..9 {
            bus.publish(end(x));
        }
        bus.publish(notice(100));
        let count = |s: &mut Subscription| {
            let mut v = Vec::new();
            while let Ok(e) = s.rx.try_recv() {
                v.push(e.exchange());
            }
            v
        };
        assert_eq!(
            count(&mut all).len(),
            10,
            "the lossless subscriber reads everything"
        );
        assert_eq!(
            count(&mut some),
            vec![Some(0), Some(3), Some(6), None],
            "one exchange in three, and what belongs to no exchange"
        );
        // The inspector builds an exchange's events only for someone who reads them.
        assert!(
            bus.wants_in(Interest::HTTP_END, 4),
            "the recorder reads exchange 4"
        );
        let mut b = BusBuilder::default();
        let d = b.subscribe_to("dashboard", 4, Interest::HTTP_END);
        d.stride.set(2);
        let bus = b.build();
        assert!(bus.wants_in(Interest::HTTP_END, 4));
        assert!(!bus.wants_in(Interest::HTTP_END, 5));
        assert!(!bus.wants_in(Interest::CALL, 4));
    }
}

//! The one event model (what the inspector publishes, the recorder writes and every observer
//! reads) and the in-process event bus.
//!
//! Its rooms: this file holds the model; `bus` the bus, its subscriptions and sinks, and the
//! interests that let the inspector skip building what nobody reads; `sample` the strides a
//! display samples whole exchanges with under load; `lines` the per-thread line buffers of the
//! sinks that write a line per event (the text log, the recorder).
//!
//! The inspector turns traffic into [`Event`]s; observers (recorder, dashboard, log printer,
//! metrics) subscribe before the proxy starts. Publishing never blocks and never awaits: each
//! subscriber has its own bounded queue, and an event that does not fit is counted as dropped
//! for that subscriber (a lossless subscriber such as the recorder turns the count into an
//! explicit gap record). The subscriber list is fixed once the bus is built, so publishing takes
//! no lock at all.

use crate::locks::Locked as _;
use crate::rpc::{Id, Kind};
use bytes::Bytes;
use serde::{Deserialize, Serialize, Serializer};
use std::sync::Arc;

/// Nanoseconds since the Unix epoch.
pub fn now_ns() -> u64 {
    // std's clock, not rustix's: rustix finds the vDSO through the ELF auxiliary vector, and
    // that crashes under valgrind (which `benches/instructions.sh` runs rpctap in).
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
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

/// Where ids are unique: an MCP session, or one HTTP exchange. An `initialize` sent outside any
/// session (Streamable HTTP) is in the session its reply's `Mcp-Session-Id` starts: its events
/// are published once that head came, already in the session.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    Session(Arc<str>),
    Exchange(u64),
    /// One stateless MCP (2026-07-28) exchange: its ids are the exchange's own, and `group`
    /// (`stateless:NAME/VERSION@IP`, from the request's `_meta` clientInfo and the client's
    /// address) names the client whose work it is part of — what the sessions view, `session:`
    /// filters and `check` group by. Shown as `GROUP#N`.
    Stateless {
        group: Arc<str>,
        exchange: u64,
    },
}

/// The prefix of a stateless client's group name.
pub const STATELESS_PREFIX: &str = "stateless:";

/// The first `n` characters of `s`.
fn first_chars(s: &str, n: usize) -> &str {
    match s.char_indices().nth(n) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

impl Scope {
    pub fn short(&self) -> String {
        let mut v = Vec::with_capacity(16);
        let _ = self.write_short(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }

    /// [`Scope::short`] written into `out` (the log's lines build no string for it).
    pub fn write_short(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        match self {
            Scope::Session(s) => out.write_all(first_chars(s, 8).as_bytes()),
            Scope::Exchange(n) => {
                out.write_all(b"#")?;
                out.write_all(itoa::Buffer::new().format(*n).as_bytes())
            }
            Scope::Stateless { group, .. } => {
                let g = group.strip_prefix(STATELESS_PREFIX).unwrap_or(group);
                out.write_all(first_chars(g, 8).as_bytes())
            }
        }
    }

    /// The MCP session or stateless client this scope belongs to: where the rules keep what
    /// they learnt (a handshake, a discovery, the rounds of multi round-trip calls).
    pub fn group(&self) -> Option<&Arc<str>> {
        match self {
            Scope::Session(s) => Some(s),
            Scope::Stateless { group, .. } => Some(group),
            Scope::Exchange(_) => None,
        }
    }

    /// The text a report groups this scope under: a session's or a stateless client's own
    /// (`session:ID`, `stateless:NAME/VERSION@IP`), an exchange's (`exchange:N`).
    pub fn report_key(&self) -> String {
        match self {
            Scope::Stateless { group, .. } => group.to_string(),
            s => s.to_string(),
        }
    }
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::Session(s) => write!(f, "session:{s}"),
            Scope::Exchange(n) => write!(f, "exchange:{n}"),
            Scope::Stateless { group, exchange } => write!(f, "{group}#{exchange}"),
        }
    }
}

impl<'de> Deserialize<'de> for Scope {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let t = std::borrow::Cow::<'de, str>::deserialize(d)?;
        Scope::parse(&t).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "{t:?} is not a scope (session:ID, exchange:N or stateless:CLIENT#N)"
            ))
        })
    }
}

impl Scope {
    /// The scope its `Display` text names (`session:ID`, `exchange:N`, `stateless:CLIENT#N`).
    pub fn parse(t: &str) -> Option<Scope> {
        if let Some(s) = t.strip_prefix("session:") {
            return Some(Scope::Session(s.into()));
        }
        if t.starts_with(STATELESS_PREFIX) {
            let (group, n) = t.rsplit_once('#')?;
            return Some(Scope::Stateless {
                group: group.into(),
                exchange: n.parse().ok()?,
            });
        }
        t.strip_prefix("exchange:")?
            .parse()
            .ok()
            .map(Scope::Exchange)
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
            Scope::Stateless { .. } => s.collect_str(self),
        }
    }
}

/// Severity of an anomaly.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Error,
    Warning,
    /// Shown and counted, never failing `check` by default (a deprecated feature in use).
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }

    /// `check`'s default gate: errors and warnings fail, info does not.
    pub fn fails_by_default(self) -> bool {
        !matches!(self, Severity::Info)
    }
}

/// How a call ended. Every call ends in exactly one of these.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "lowercase")]
pub enum Outcome {
    /// A `result` arrived.
    Result,
    /// MCP 2026-07-28: the server answered `resultType: "input_required"` — this round ended,
    /// and the client retries with its answers (the retry's call `continues` this one).
    #[serde(rename = "input_required")]
    InputRequired,
    /// An `error` arrived.
    Error {
        code: i64,
        message: compact_str::CompactString,
    },
    /// rpctap refused it (rate limit).
    Refused { rule: String },
    /// The HTTP layer refused it: a non-2xx status without a JSON-RPC reply.
    Rejected { status: u16 },
    /// No reply, and why.
    Missing { reason: String },
    /// The client cancelled it (`notifications/cancelled`) and no reply came — as MCP's
    /// cancellation says (a receiver should not answer a cancelled request): no failure of the
    /// server's.
    Cancelled { reason: String },
    /// The client went away before the reply: its doing, not the server's.
    Abandoned { reason: String },
}

/// An error reply that is the protocol working as meant, not a failure: a pre-2026-07-28
/// server's `-32601` to `server/discover` (a 2026 client's `auto` mode then falls back to
/// `initialize`). The error counts (dashboard, agent API, `sessions`) leave it out.
pub fn expected_error(method: &str, code: i64) -> bool {
    method == "server/discover" && code == -32601
}

/// The name a call is counted under in per-method statistics (the dashboard's methods view,
/// `stats`, the report's percentiles, the gate's `--max-duration`): its method, and its target
/// when that names a kind of operation — `tools/call search` apart from `tools/call fetch` —,
/// not when it names one instance: a task (MCP's `tasks/*`, A2A's task and message methods) or
/// a subscription, which would make one row per task.
pub fn stat_key<'a>(method: &'a str, target: Option<&str>) -> std::borrow::Cow<'a, str> {
    match target {
        Some(t) if stat_keeps_target(method) => format!("{method} {t}").into(),
        _ => method.into(),
    }
}

/// Whether `method`'s target is part of its [`stat_key`] (it names a kind of operation, not
/// one task or subscription).
pub fn stat_keeps_target(method: &str) -> bool {
    !(method.starts_with("tasks/")
        || method == "subscriptions/listen"
        || crate::rpc::a2a::is_method(method))
}

/// Whether a call failed, as the error counts mean it: an error reply (but the expected ones,
/// [`expected_error`]), a refusal, a rejection, no reply — or a result whose tool says it failed
/// (`isError: true`, flagged `TOOL_ERROR`).
pub fn call_failed<'a>(
    method: &str,
    outcome: &Outcome,
    mut anomalies: impl Iterator<Item = &'a str>,
) -> bool {
    match outcome {
        Outcome::Error { code, .. } => !expected_error(method, *code),
        Outcome::Refused { .. } | Outcome::Rejected { .. } | Outcome::Missing { .. } => true,
        Outcome::Cancelled { .. } | Outcome::Abandoned { .. } => false,
        Outcome::Result | Outcome::InputRequired => anomalies.any(|a| a == "TOOL_ERROR"),
    }
}

impl Outcome {
    pub fn label(&self) -> String {
        let mut v = Vec::with_capacity(24);
        let _ = self.write_label(&mut v);
        String::from_utf8(v).unwrap_or_default()
    }

    /// [`Outcome::label`] written into `out` (the log's lines build no string for it).
    pub fn write_label(&self, out: &mut impl std::io::Write) -> std::io::Result<()> {
        match self {
            Outcome::Result => out.write_all(b"result"),
            Outcome::InputRequired => out.write_all(b"input required"),
            Outcome::Error { code, .. } => {
                out.write_all(b"error ")?;
                out.write_all(itoa::Buffer::new().format(*code).as_bytes())
            }
            Outcome::Refused { rule } => write!(out, "refused ({rule})"),
            Outcome::Rejected { status } => write!(out, "rejected (HTTP {status})"),
            Outcome::Missing { reason } => write!(out, "missing ({reason})"),
            Outcome::Cancelled { reason } => write!(out, "cancelled ({reason})"),
            Outcome::Abandoned { reason } => write!(out, "abandoned ({reason})"),
        }
    }
}

/// One JSON-RPC message seen on the wire.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct MessageEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    pub direction: Direction,
    pub transport: Transport,
    pub kind: Kind,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<Id>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_index: Option<u32>,
    /// The number of members of the batch this message is part of (with `batch_index`), so a
    /// reader can tell where one frame ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_len: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sse_id: Option<String>,
    /// The message's bytes as they were on the wire. Written as JSON when they are JSON, else
    /// as a string (with `unparsed`); read back into the same bytes (`record::reader`).
    #[serde(serialize_with = "ser_raw", deserialize_with = "de_raw")]
    pub message: Bytes,
    /// The frame was not valid JSON: `message` is its text (as a JSON string).
    #[serde(default, skip_serializing_if = "is_false")]
    pub unparsed: bool,
    /// It came in a WebSocket binary message (UTF-8 JSON all the same, so read as JSON-RPC).
    #[serde(default, skip_serializing_if = "is_false")]
    pub binary: bool,
}

impl MessageEvent {
    pub fn is_c2s(&self) -> bool {
        self.direction == Direction::ClientToServer
    }
    pub fn is_response(&self) -> bool {
        self.kind.is_response()
    }
    /// The id as exact JSON text.
    pub fn id_text(&self) -> Option<String> {
        self.id.as_ref().map(Id::to_json_text)
    }
    /// The frame's text as it was on the wire.
    pub fn wire_text(&self) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(&self.message)
    }
    /// The message as JSON text: itself when it was JSON, else its text as a JSON string (as
    /// the recording writes it).
    pub fn json_text(&self) -> std::borrow::Cow<'_, str> {
        if self.unparsed {
            serde_json::to_string(&RawMessage(&self.message))
                .unwrap_or_default()
                .into()
        } else {
            String::from_utf8_lossy(&self.message)
        }
    }
    /// An empty batch (`[]`): a frame with no message in it.
    pub fn is_empty_batch(&self) -> bool {
        self.batch_len == Some(0)
    }
}

/// An id that is there, `null` included (`Some(Id::Null)`, not `None`: a reply with id null
/// is not a notification).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Id>, D::Error> {
    Id::deserialize(d).map(Some)
}

/// A message's JSON text, read back as the bytes it stands for (an `unparsed` message's string
/// is decoded by the reader, which sees the flag).
fn de_raw<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
    let raw = Box::<serde_json::value::RawValue>::deserialize(d)?;
    Ok(Bytes::from(raw.get().to_owned()))
}

/// The codes of a call read back: the model keeps names (codes, a notice's kind) `&'static`, so
/// a read name is interned once — at most [`INTERNED`] distinct ones (a recording of the known
/// vocabulary needs a few dozen); past that, `"(other)"`.
fn de_static_vec<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<&'static str>, D::Error> {
    let v = Vec::<std::borrow::Cow<'de, str>>::deserialize(d)?;
    Ok(v.iter().map(|t| intern(t)).collect())
}

/// How many distinct names `intern` keeps.
pub const INTERNED: usize = 1024;

/// The `&'static` copy of a name (see `de_static_vec`).
pub fn intern(t: &str) -> &'static str {
    static NAMES: std::sync::Mutex<Vec<&'static str>> = std::sync::Mutex::new(Vec::new());
    let mut names = NAMES.locked();
    if let Some(n) = names.iter().find(|n| **n == t) {
        return n;
    }
    if names.len() >= INTERNED {
        return "(other)";
    }
    let n: &'static str = Box::leak(t.to_owned().into_boxed_str());
    names.push(n);
    n
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
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CallEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    /// The direction of the request.
    pub direction: Direction,
    pub method: Arc<str>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<Arc<str>>,
    pub id: Id,
    #[serde(flatten)]
    pub outcome: Outcome,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_us: Option<u64>,
    #[serde(default, deserialize_with = "de_static_vec")]
    pub anomalies: Vec<&'static str>,
    /// The request's index in its batch, and the reply's in its batch (when batched).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_index: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_index: Option<u32>,
    /// MCP 2026-07-28: the id of the `input_required` round this call retries (same scope
    /// group: the session, or the stateless client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues: Option<Id>,
    /// MCP tasks: the task this call created (its event comes when the task ends: its outcome
    /// is the task's, its latency the task's whole life) or polled, updated or cancelled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<Box<TaskRef>>,
    /// An A2A call's conversation: the `contextId` its request or its reply names (the
    /// sessions view groups A2A calls by it, as `a2a:CONTEXT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<Arc<str>>,
    /// Where the call came from, for its trace span (only with `--otlp`).
    #[serde(skip)]
    pub trace: Option<Arc<crate::trace::CallTrace>>,
}

/// The MCP task a call belongs to.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct TaskRef {
    /// The server's `taskId`.
    pub id: Arc<str>,
    /// The status its reply reported (on the call that created the task: its last one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<Arc<str>>,
    /// On a poll, update or cancel: the exchange and id of the call that created the task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_exchange: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_id: Option<Id>,
    /// On the call that created the task: how many `tasks/get` polls it took.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub polls: u32,
}

#[cfg(test)]
impl CallEvent {
    /// A call for the tests: a client's, in exchange 1's scope, answered in `latency_us`;
    /// the rest set by the test.
    pub fn for_test(method: &str, id: Id, outcome: Outcome, latency_us: u64) -> CallEvent {
        CallEvent {
            ts: 1,
            exchange: 1,
            scope: Scope::Exchange(1),
            direction: Direction::ClientToServer,
            method: method.into(),
            target: None,
            id,
            outcome,
            latency_us: Some(latency_us),
            anomalies: Vec::new(),
            request_index: None,
            response_index: None,
            continues: None,
            task: None,
            context: None,
            trace: None,
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Something wrong, flagged the moment it was visible.
#[derive(Clone, Debug, Serialize)]
pub struct AnomalyEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    pub code: &'static str,
    pub severity: Severity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Id>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Arc<str>>,
    /// The frame it concerns: its direction and batch index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch_index: Option<u32>,
    pub message: String,
}

impl<'de> Deserialize<'de> for AnomalyEvent {
    /// As written; the code is interned (see `intern`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Read {
            ts: u64,
            exchange: u64,
            scope: Scope,
            code: String,
            severity: Severity,
            #[serde(default, deserialize_with = "present")]
            id: Option<Id>,
            #[serde(default)]
            method: Option<Arc<str>>,
            #[serde(default)]
            direction: Option<Direction>,
            #[serde(default)]
            batch_index: Option<u32>,
            message: String,
        }
        let r = Read::deserialize(d)?;
        Ok(AnomalyEvent {
            ts: r.ts,
            exchange: r.exchange,
            scope: r.scope,
            code: intern(&r.code),
            severity: r.severity,
            id: r.id,
            method: r.method,
            direction: r.direction,
            batch_index: r.batch_index,
            message: r.message,
        })
    }
}

/// An event's text that is nearly always one of a few fixed ones (a method, a content type, an
/// end's reason): those are borrowed, not allocated per event.
pub type Text = std::borrow::Cow<'static, str>;

/// `t` as [`Text`]: borrowed when it is one of `known`, else a copy.
pub fn text_of(t: &str, known: &[&'static str]) -> Text {
    match known.iter().find(|k| **k == t) {
        Some(k) => Text::Borrowed(k),
        None => Text::Owned(t.to_string()),
    }
}

/// The HTTP side of an exchange.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "phase", rename_all = "lowercase")]
pub enum HttpEvent {
    Request {
        ts: u64,
        exchange: u64,
        method: Text,
        path: String,
        #[serde(default)]
        peer: Arc<str>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        session: Option<String>,
        /// The request's `MCP-Protocol-Version`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        protocol_version: Option<String>,
        /// Headers, secrets redacted; written as (name, value) pairs.
        #[serde(default)]
        headers: Headers,
    },
    Response {
        ts: u64,
        exchange: u64,
        status: u16,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content_type: Option<Text>,
        #[serde(default)]
        headers: Headers,
        /// Set when rpctap answered itself (the upstream was unreachable or too slow, or the
        /// request could not be read): why. The upstream never saw or never answered the calls.
        #[serde(default, skip_serializing_if = "Option::is_none")]
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
        #[serde(default, skip_serializing_if = "Option::is_none")]
        www_authenticate: Option<String>,
    },
    /// An A2A agent card the upstream served (`GET /.well-known/agent-card.json`, 0.2's
    /// `agent.json`): what the agent says it is and can do, as the JSON text it sent (cut at the
    /// inspection cap).
    #[serde(rename = "agent_card")]
    AgentCard {
        ts: u64,
        exchange: u64,
        path: String,
        card: String,
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
        reason: Text,
        #[serde(default)]
        bytes: u64,
    },
}

impl HttpEvent {
    pub fn ts(&self) -> u64 {
        match self {
            HttpEvent::Request { ts, .. }
            | HttpEvent::Response { ts, .. }
            | HttpEvent::Endpoint { ts, .. }
            | HttpEvent::Auth { ts, .. }
            | HttpEvent::AgentCard { ts, .. }
            | HttpEvent::Binary { ts, .. }
            | HttpEvent::End { ts, .. } => *ts,
        }
    }
    pub fn exchange(&self) -> u64 {
        match self {
            HttpEvent::Request { exchange, .. }
            | HttpEvent::Response { exchange, .. }
            | HttpEvent::Endpoint { exchange, .. }
            | HttpEvent::Auth { exchange, .. }
            | HttpEvent::AgentCard { exchange, .. }
            | HttpEvent::Binary { exchange, .. }
            | HttpEvent::End { exchange, .. } => *exchange,
        }
    }
}

/// An HTTP message's headers with secrets already redacted (made by
/// [`crate::redact::Redactor::headers`]), kept as the JSON text a recording holds,
/// `[["name","value"],…]` in their order (values as lossy UTF-8, escaped as serde_json escapes
/// them): made once, in one allocation, and written by the recorder as it is — where a list of
/// shared names and values cost a clone and a drop of each, and their encoding again per line.
/// Read back by parsing (the dashboard, exports, the offline inspector: a few per exchange).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<u8>);

impl std::fmt::Debug for Headers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&String::from_utf8_lossy(self.json()))
    }
}

impl Headers {
    /// From (name, value) pairs, names as they are (a header name needs no escaping).
    pub fn encode<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a [u8])>) -> Headers {
        let mut out = Vec::with_capacity(128);
        let mut open: &[u8] = b"[[\"";
        for (name, v) in pairs {
            out.extend_from_slice(open);
            open = b",[\"";
            out.extend_from_slice(name.as_bytes());
            // ASCII with no control character, quote or backslash (nearly every value): as it
            // is; else what serde_json writes for its text (lossy UTF-8).
            if crate::rpc::plain_text(v, true) {
                out.extend_from_slice(b"\",\"");
                out.extend_from_slice(v);
                out.extend_from_slice(b"\"]");
            } else {
                out.extend_from_slice(b"\",");
                // Writing a string into a Vec cannot fail.
                let _ = serde_json::to_writer(&mut out, &String::from_utf8_lossy(v));
                out.push(b']');
            }
        }
        if out.is_empty() {
            return Headers::default();
        }
        out.push(b']');
        Headers(out)
    }
    /// The JSON text (UTF-8: names are ASCII, and values went in as ASCII or as serde_json's
    /// text of their lossy UTF-8; kept as bytes so that nothing checks it again).
    pub fn json(&self) -> &[u8] {
        if self.0.is_empty() {
            b"[]"
        } else {
            &self.0
        }
    }
    /// (name, value) pairs.
    pub fn pairs(&self) -> Vec<(String, String)> {
        serde_json::from_slice(self.json()).unwrap_or_default()
    }
    /// The first value of a header (any letter case).
    pub fn get(&self, name: &str) -> Option<String> {
        self.pairs()
            .into_iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    }
    /// As a map (pairs that are not valid headers left out).
    pub fn to_map(&self) -> http::HeaderMap {
        let pairs = self.pairs();
        let mut map = http::HeaderMap::with_capacity(pairs.len());
        for (k, v) in pairs {
            if let (Ok(k), Ok(v)) = (
                http::HeaderName::from_bytes(k.as_bytes()),
                http::HeaderValue::from_str(&v),
            ) {
                map.append(k, v);
            }
        }
        map
    }
}

impl From<&http::HeaderMap> for Headers {
    /// All of them, nothing redacted (tests, and what is already redacted).
    fn from(h: &http::HeaderMap) -> Headers {
        Headers::encode(h.iter().map(|(k, v)| (k.as_str(), v.as_bytes())))
    }
}

impl<'de> Deserialize<'de> for Headers {
    /// From `[[name, value], …]`; a pair that is not a valid header is left out.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let pairs: Vec<(http::HeaderName, String)> = Vec::<(String, String)>::deserialize(d)?
            .into_iter()
            .filter_map(|(k, v)| {
                let name = http::HeaderName::from_bytes(k.as_bytes()).ok()?;
                http::HeaderValue::from_str(&v).ok()?;
                Some((name, v))
            })
            .collect();
        Ok(Headers::encode(
            pairs.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
        ))
    }
}

impl Serialize for Headers {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.pairs())
    }
}

/// A bounded structure that had to let something go.
#[derive(Clone, Debug, Serialize)]
pub struct NoticeEvent {
    pub ts: u64,
    pub what: &'static str,
    pub message: String,
}

impl<'de> Deserialize<'de> for NoticeEvent {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Read {
            ts: u64,
            what: String,
            message: String,
        }
        let r = Read::deserialize(d)?;
        Ok(NoticeEvent {
            ts: r.ts,
            what: intern(&r.what),
            message: r.message,
        })
    }
}

/// Lines the recording lost (the recorder fell behind, or its writes failed): written by the
/// recorder's writer, never published.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct GapEvent {
    pub ts: u64,
    pub lost: u64,
    pub message: String,
}

/// A call or notification refused by a rate-limit rule (or, `shadow`, one a shadow rule would
/// have refused).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RefusalEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    pub method: Arc<str>,
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub id: Option<Id>,
    pub rule: Arc<str>,
    #[serde(default)]
    pub shadow: bool,
    #[serde(default)]
    pub retry_after_ms: u64,
}

/// A line the wrapped stdio server wrote on its stderr (passed to rpctap's stderr unchanged;
/// this copy is bounded: a longer line is cut at [`STDERR_LINE_MAX`] bytes and marked `cut`).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StderrEvent {
    pub ts: u64,
    pub scope: Scope,
    pub line: String,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cut: bool,
}

/// A fault a `[[fault]]` rule injected (`crate::flow::fault`): what it did to which call, and the
/// bytes it sent in the server's place when it made a frame (an error reply, a duplicate, a
/// reply with a wrong id, a cut reply). The server's own messages are recorded as they came;
/// this says what the client got instead, so that nothing it made is blamed on the server.
#[derive(Clone, Debug, Serialize)]
pub struct FaultEvent {
    pub ts: u64,
    pub exchange: u64,
    pub scope: Scope,
    /// The rule's name.
    pub injected: Arc<str>,
    /// `delay`, `error`, `status`, `drop`, `duplicate`, `wrong_id`, `malformed`,
    /// `cut_stream_after`, `close`, `throttle`.
    pub action: &'static str,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub method: Option<Arc<str>>,
    /// The call's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<Id>,
    /// The frame the fault sent to the client, when it made one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        serialize_with = "ser_raw_opt"
    )]
    pub message: Option<Bytes>,
    pub detail: String,
    /// `s2c` when the call was a server's request (a `direction = "s2c"` rule): its id is in
    /// the server's id space. Absent for the client's calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub direction: Option<Direction>,
}

fn ser_raw_opt<S: Serializer>(b: &Option<Bytes>, s: S) -> Result<S::Ok, S::Error> {
    match b {
        Some(b) => RawMessage(b).serialize(s),
        None => s.serialize_none(),
    }
}

impl<'de> Deserialize<'de> for FaultEvent {
    /// As written; the action is interned (see `intern`).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Read {
            ts: u64,
            exchange: u64,
            scope: Scope,
            injected: Arc<str>,
            action: String,
            #[serde(default)]
            method: Option<Arc<str>>,
            #[serde(default, deserialize_with = "present")]
            id: Option<Id>,
            #[serde(default)]
            message: Option<Box<serde_json::value::RawValue>>,
            detail: String,
            #[serde(default)]
            direction: Option<Direction>,
        }
        let r = Read::deserialize(d)?;
        Ok(FaultEvent {
            ts: r.ts,
            exchange: r.exchange,
            scope: r.scope,
            injected: r.injected,
            action: intern(&r.action),
            method: r.method,
            id: r.id,
            // A frame that is not JSON (a cut reply) is written as a string of its text; the
            // frames a fault sends are never JSON strings themselves.
            message: r
                .message
                .map(|m| match serde_json::from_str::<String>(m.get()) {
                    Ok(text) => Bytes::from(text),
                    Err(_) => Bytes::from(m.get().to_owned()),
                }),
            detail: r.detail,
            direction: r.direction,
        })
    }
}

/// The longest stderr line kept whole in an event.
pub const STDERR_LINE_MAX: usize = 4096;

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
    Stderr(StderrEvent),
    Fault(FaultEvent),
    /// Only in recordings (see [`GapEvent`]).
    Gap(GapEvent),
}

mod bus;
pub mod lines;
mod sample;

pub use bus::{Bus, BusBuilder, Interest, Sink, Subscription};
pub use sample::{next_stride, Stride, EVENT_BUDGET};

impl Event {
    /// The interest an event answers to.
    pub fn interest(&self) -> Interest {
        match self {
            Event::Http(HttpEvent::End { .. }) => Interest::HTTP_END,
            Event::Http(HttpEvent::Response { .. }) => Interest::HTTP_STATUS,
            Event::Http(HttpEvent::Auth { .. } | HttpEvent::AgentCard { .. }) => {
                Interest::HTTP_AUTH
            }
            Event::Http(HttpEvent::Binary { .. }) => Interest::NOTIFICATIONS,
            Event::Http(_) => Interest::HTTP_REQUEST,
            Event::Message(m) if m.kind == Kind::Notification => Interest::NOTIFICATIONS,
            Event::Message(_) => Interest::MESSAGE_REST,
            Event::Call(_) => Interest::CALL,
            Event::Anomaly(_) => Interest::ANOMALY,
            Event::Refusal(_) => Interest::REFUSAL,
            Event::Notice(_) | Event::Gap(_) => Interest::NOTICE,
            Event::Stderr(_) => Interest::STDERR,
            Event::Fault(_) => Interest::FAULT,
        }
    }

    /// The HTTP exchange an event belongs to (a notice belongs to none).
    pub fn exchange(&self) -> Option<u64> {
        match self {
            Event::Http(h) => Some(h.exchange()),
            Event::Message(m) => Some(m.exchange),
            Event::Call(c) => Some(c.exchange),
            Event::Anomaly(a) => Some(a.exchange),
            Event::Refusal(r) => Some(r.exchange),
            Event::Fault(f) => Some(f.exchange),
            Event::Notice(_) | Event::Gap(_) | Event::Stderr(_) => None,
        }
    }

    /// The event's time (ns since the epoch).
    pub fn ts(&self) -> u64 {
        match self {
            Event::Http(h) => h.ts(),
            Event::Message(m) => m.ts,
            Event::Call(c) => c.ts,
            Event::Anomaly(a) => a.ts,
            Event::Refusal(r) => r.ts,
            Event::Notice(n) => n.ts,
            Event::Gap(g) => g.ts,
            Event::Stderr(s) => s.ts,
            Event::Fault(f) => f.ts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn now_is_the_system_clock_in_nanoseconds() {
        let std_now = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        };
        let (before, ours, after) = (std_now(), now_ns(), std_now());
        assert!(before <= ours && ours <= after, "{before} {ours} {after}");
    }

    /// A head's headers as text are what serde_json writes for their (name, lossy value)
    /// pairs, in order; they read back, and a recording's invalid pair is left out.
    #[test]
    fn headers_are_serdes_text_of_their_pairs() {
        let values: [&[u8]; 7] = [
            b"application/json",
            b"a \"quoted\" \\ value",
            b"tab\there",
            b"caf\xc3\xa9",
            b"bad \xff\xfe",
            b"",
            b"exactly8",
        ];
        let mut h = http::HeaderMap::new();
        for (i, v) in values.iter().enumerate() {
            h.append(
                http::HeaderName::from_bytes(format!("x-h{}", i % 3).as_bytes()).unwrap(),
                http::HeaderValue::from_bytes(v).unwrap(),
            );
        }
        let ours = Headers::from(&h);
        let pairs: Vec<(String, String)> = h
            .iter()
            .map(|(k, v)| {
                (
                    k.to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        assert_eq!(
            ours.json(),
            serde_json::to_string(&pairs).unwrap().as_bytes()
        );
        assert_eq!(ours.pairs(), pairs);
        assert_eq!(ours.get("X-H1").as_deref(), Some("a \"quoted\" \\ value"));
        assert_eq!(Headers::default().json(), b"[]");
        assert_eq!(Headers::from(&http::HeaderMap::new()), Headers::default());
        let back: Headers =
            serde_json::from_str(r#"[["Content-Type","text/plain"],["bad name","x"],["x-a","1"]]"#)
                .unwrap();
        assert_eq!(
            back.json(),
            br#"[["content-type","text/plain"],["x-a","1"]]"#
        );
        assert_eq!(serde_json::to_vec(&back).unwrap(), back.json());
    }

    #[test]
    fn a_known_text_is_borrowed_another_copied() {
        assert!(matches!(
            text_of("POST", &["GET", "POST"]),
            Text::Borrowed("POST")
        ));
        assert!(matches!(text_of("BREW", &["GET", "POST"]), Text::Owned(t) if t == "BREW"));
    }
    use std::sync::atomic::Ordering;

    #[test]
    fn scopes_serialize_as_their_display_text() {
        for scope in [
            Scope::Exchange(0),
            Scope::Exchange(u64::MAX),
            Scope::Session("9fc07019fc90d586".into()),
            Scope::Session("a\"b\\c\u{1}".into()),
            Scope::Stateless {
                group: "stateless:mcp/0.1.0@127.0.0.1".into(),
                exchange: 7,
            },
        ] {
            let json = serde_json::to_string(&scope).unwrap();
            assert_eq!(json, serde_json::to_string(&scope.to_string()).unwrap());
            // And back: every scope reads as the scope it was.
            assert_eq!(Scope::parse(&scope.to_string()), Some(scope.clone()));
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

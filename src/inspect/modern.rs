//! MCP 2026-07-28: requests that carry who sent them in their own `_meta` (protocol version,
//! client info, client capabilities) instead of an `initialize` handshake; stateless calls,
//! grouped by client; `server/discover`; multi round-trip requests (SEP-2322: a result of
//! `resultType: "input_required"` ends a round, and the client's retry — with `inputResponses`
//! and the echoed `requestState` — continues it); `subscriptions/listen` streams; and the features
//! this revision deprecates (roots, sampling, logging: SEP-2577). Decides `MCP_REQUEST_STATE`,
//! `MCP_INPUT_RESPONSE`, `MCP_META`, `MCP_VERSION`, `MCP_DEPRECATED`, `MCP_RESULT_SHAPE` (a
//! result's `resultType`, a cacheable result's `ttlMs` and `cacheScope`), `MCP_UNASKED_LOG`
//! (a log message for a request that did not ask for one) `MCP_REMOVED` (a method the
//! revision removed, used in it) and `MCP_ERROR_CODE` (a renumbered error code).
//!
//! Only messages that name this revision's reserved keys are parsed again (a byte search for
//! `io.modelcontextprotocol/`, `requestState`, `inputResponses` or `input_required` first), so
//! traffic of earlier revisions and plain JSON-RPC pay a few byte searches and nothing else.
//!
//! A `requestState` may hold a sealed principal: it is compared as opaque bytes and never
//! written into a finding (findings say its length).

use super::capability::{self, Caps, Side};
use super::*;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;
use std::borrow::Cow;
use std::collections::VecDeque;

pub use super::capability::MODERN;
// Every reserved `_meta` key starts so.
needle!(RESERVED, "io.modelcontextprotocol/");
needle!(INPUT_REQUIRED, "input_required");

/// The most open rounds one session or stateless client keeps; the oldest go first.
pub const MAX_ROUNDS: usize = 256;

/// What a 2026-07-28 request's `_meta` says of its sender.
#[derive(Clone, Debug, Default)]
pub(super) struct Sender {
    pub version: Option<Arc<str>>,
    /// `clientInfo` name and version.
    pub client: Option<(String, String)>,
    pub caps: Option<Caps>,
    pub has_caps: bool,
    /// It set `io.modelcontextprotocol/logLevel` (2026-07-28: asks for log messages).
    pub log_level: bool,
}

#[derive(Deserialize)]
struct WithParams<'a> {
    #[serde(borrow, default)]
    params: Option<ParamsMeta<'a>>,
}

#[derive(Deserialize)]
struct ParamsMeta<'a> {
    #[serde(rename = "_meta", borrow, default)]
    meta: Option<ReservedMeta<'a>>,
}

#[derive(Deserialize)]
struct ReservedMeta<'a> {
    #[serde(rename = "io.modelcontextprotocol/protocolVersion", borrow, default)]
    version: Option<Cow<'a, str>>,
    #[serde(rename = "io.modelcontextprotocol/clientInfo", default)]
    client: Option<ClientInfo>,
    #[serde(rename = "io.modelcontextprotocol/clientCapabilities", default)]
    caps: Option<Value>,
    #[serde(rename = "io.modelcontextprotocol/logLevel", borrow, default)]
    log_level: Option<&'a RawValue>,
    #[serde(rename = "io.modelcontextprotocol/subscriptionId", borrow, default)]
    subscription: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ClientInfo {
    #[serde(default)]
    name: String,
    #[serde(default)]
    version: String,
}

/// A request's reserved `_meta` keys, when it has any.
pub(super) fn sender(raw: &[u8]) -> Option<Sender> {
    RESERVED.find(raw)?;
    let meta = serde_json::from_slice::<WithParams<'_>>(raw)
        .ok()?
        .params?
        .meta?;
    Some(Sender {
        version: meta.version.map(|v| Arc::from(&*v)),
        client: meta.client.map(|c| (c.name, c.version)),
        has_caps: meta.caps.is_some(),
        caps: meta.caps.as_ref().map(Caps::from_json),
        log_level: meta.log_level.is_some(),
    })
}

/// The subscription a server notification rides (`_meta["io.modelcontextprotocol/
/// subscriptionId"]`, SEP-2575), as shown.
pub(super) fn subscription_id(raw: &[u8]) -> Option<Arc<str>> {
    needle!(SUBSCRIPTION, "io.modelcontextprotocol/subscriptionId");
    SUBSCRIPTION.find(raw)?;
    let meta = serde_json::from_slice::<WithParams<'_>>(raw)
        .ok()?
        .params?
        .meta?;
    id_label(meta.subscription?.get())
}

fn id_label(raw: &str) -> Option<Arc<str>> {
    Id::from_json_text(raw).map(|id| Arc::from(id.to_string()))
}

/// Keeps a name fit for a scope's text: letters, digits and `.-_+` (others become `_`), at most
/// 64 characters.
fn fit(s: &str) -> String {
    s.chars()
        .take(64)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '+') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The group of a stateless client: `stateless:NAME/VERSION@IP` (its self-reported
/// `clientInfo` and the address it connects from; `client` when it names none).
pub(super) fn stateless_group(s: &Sender, ip: Option<std::net::IpAddr>) -> Arc<str> {
    let who = match &s.client {
        Some((n, v)) if !n.is_empty() => format!("{}/{}", fit(n), fit(v)),
        _ => "client".to_string(),
    };
    let mut g = format!("{}{who}", crate::events::STATELESS_PREFIX);
    if let Some(ip) = ip {
        g.push('@');
        g.push_str(&ip.to_string());
    }
    g.into()
}

/// One `input_required` round the server answered and the client has not retried yet.
#[derive(Debug)]
pub struct Round {
    id: Id,
    method: Arc<str>,
    target: Option<Arc<str>>,
    args: u64,
    /// The `inputRequests` keys it issued.
    keys: Vec<Box<str>>,
    /// The `requestState` it issued, as opaque bytes.
    state: Option<Box<[u8]>>,
}

/// What the modern rules keep per session or stateless client (inside its `McpState`).
#[derive(Debug, Default)]
pub struct ModernState {
    pub rounds: VecDeque<Round>,
    /// `server/discover`'s `supportedVersions`, `ttlMs` and `cacheScope`.
    pub supported: Option<Vec<Box<str>>>,
    pub ttl_ms: Option<u64>,
    pub cache_scope: Option<Box<str>>,
    /// The last version a request's `_meta` named.
    pub version: Option<Arc<str>>,
    /// The deprecated features already flagged (each once).
    deprecated: u8,
}

/// What a modern call keeps while it waits for its reply.
#[derive(Clone, Debug, Default)]
pub struct CallMeta {
    /// Its arguments' hash (for matching a retry to its round).
    pub args: u64,
    /// The capabilities its `_meta` declared.
    pub caps: Option<Caps>,
    /// The round it continues.
    pub continues: Option<Id>,
}

/// The methods whose result may be `input_required`.
pub(super) fn may_need_input(method: &str) -> bool {
    matches!(method, "tools/call" | "prompts/get" | "resources/read")
}

/// A JSON value's hash with objects' keys in sorted order (two retries that order their
/// arguments differently are the same call).
fn canonical_hash(v: &Value) -> u64 {
    use std::hash::{Hash, Hasher};
    fn walk(v: &Value, h: &mut std::collections::hash_map::DefaultHasher) {
        match v {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => (2u8, n.to_string()).hash(h),
            Value::String(s) => (3u8, s).hash(h),
            Value::Array(a) => {
                (4u8, a.len()).hash(h);
                for x in a {
                    walk(x, h);
                }
            }
            Value::Object(o) => {
                (5u8, o.len()).hash(h);
                let mut keys: Vec<&String> = o.keys().collect();
                keys.sort();
                for k in keys {
                    k.hash(h);
                    walk(&o[k], h);
                }
            }
        }
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    walk(v, &mut h);
    h.finish()
}

#[derive(Deserialize)]
struct RoundParams<'a> {
    #[serde(borrow, default)]
    params: Option<RoundInner<'a>>,
}

#[derive(Deserialize)]
struct RoundInner<'a> {
    #[serde(default)]
    arguments: Option<Value>,
    #[serde(rename = "inputResponses", borrow, default)]
    input_responses: Option<std::collections::BTreeMap<Cow<'a, str>, &'a RawValue>>,
    #[serde(rename = "requestState", default)]
    request_state: Option<String>,
}

#[derive(Deserialize)]
struct InputRequired<'a> {
    #[serde(borrow)]
    result: InputRequiredResult<'a>,
}

#[derive(Deserialize)]
struct InputRequiredResult<'a> {
    #[serde(rename = "resultType", borrow, default)]
    result_type: Option<Cow<'a, str>>,
    #[serde(rename = "inputRequests", borrow, default)]
    input_requests: Option<std::collections::BTreeMap<Cow<'a, str>, InputRequest<'a>>>,
    #[serde(rename = "requestState", default)]
    request_state: Option<String>,
}

#[derive(Deserialize)]
struct InputRequest<'a> {
    #[serde(borrow, default)]
    method: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct Discover<'a> {
    #[serde(borrow)]
    result: DiscoverResult<'a>,
}

#[derive(Deserialize)]
struct DiscoverResult<'a> {
    #[serde(rename = "supportedVersions", default)]
    supported: Option<Vec<String>>,
    #[serde(rename = "ttlMs", default)]
    ttl_ms: Option<u64>,
    #[serde(rename = "cacheScope", borrow, default)]
    cache_scope: Option<Cow<'a, str>>,
    #[serde(default)]
    capabilities: Option<Value>,
}

/// The methods whose complete results carry caching hints at 2026-07-28
/// (server/utilities/caching, "Cacheable Results").
const CACHEABLE: [&str; 6] = [
    "server/discover",
    "tools/list",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "resources/read",
];

#[derive(Deserialize)]
struct Shaped<'a> {
    #[serde(borrow)]
    result: ShapedResult<'a>,
}

/// The members a 2026-07-28 result's shape is judged by, as written.
#[derive(Deserialize)]
struct ShapedResult<'a> {
    #[serde(rename = "resultType", borrow, default)]
    result_type: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "ttlMs", borrow, default)]
    ttl_ms: Option<&'a serde_json::value::RawValue>,
    #[serde(rename = "cacheScope", borrow, default)]
    cache_scope: Option<&'a serde_json::value::RawValue>,
}

/// What a 2026-07-28 result of `method` lacks or gets wrong of its shape, each with the spec
/// section that asks for it (empty: nothing).
fn shape_problems(method: &str, raw: &[u8]) -> Vec<String> {
    let Ok(Shaped { result: r }) = serde_json::from_slice::<Shaped<'_>>(raw) else {
        // Not an object result (the envelope's own rules judge what is not JSON-RPC).
        return Vec::new();
    };
    let mut out = Vec::new();
    let kind = match r
        .result_type
        .map(|v| serde_json::from_str::<String>(v.get()))
    {
        None => {
            out.push(
                "no `resultType` (2026-07-28, basic/index \"Result types\": a server MUST include it on every result)"
                    .to_string(),
            );
            // What a client reads it as.
            Some("complete".to_string())
        }
        Some(Ok(t)) => Some(t),
        Some(Err(_)) => {
            out.push("`resultType` is not a string (basic/index \"Result types\")".to_string());
            None
        }
    };
    if kind.as_deref() == Some("complete") && CACHEABLE.contains(&method) {
        let cache = "server/utilities/caching: a complete result of this method MUST carry its caching hints";
        match r.ttl_ms.map(|v| serde_json::from_str::<u64>(v.get())) {
            None => out.push(format!("no `ttlMs` ({cache})")),
            Some(Err(_)) => out.push(format!(
                "`ttlMs` {} is not a whole number of milliseconds ≥ 0 ({cache})",
                fit(r.ttl_ms.map(|v| v.get()).unwrap_or(""))
            )),
            Some(Ok(_)) => {}
        }
        match r
            .cache_scope
            .map(|v| serde_json::from_str::<String>(v.get()))
        {
            None => out.push(format!("no `cacheScope` ({cache})")),
            Some(Ok(s)) if s == "public" || s == "private" => {}
            _ => out.push(format!(
                "`cacheScope` {} is neither \"public\" nor \"private\" ({cache})",
                fit(r.cache_scope.map(|v| v.get()).unwrap_or(""))
            )),
        }
    }
    out
}

/// A deprecated feature (SEP-2577) and what replaces it.
#[derive(Clone, Copy)]
enum Deprecated {
    Roots = 1,
    Sampling = 2,
    Logging = 4,
}

impl Deprecated {
    fn of(method: &str) -> Option<Deprecated> {
        match method {
            "roots/list" => Some(Deprecated::Roots),
            "sampling/createMessage" => Some(Deprecated::Sampling),
            "notifications/message" => Some(Deprecated::Logging),
            _ => None,
        }
    }
    fn text(self) -> (&'static str, &'static str) {
        match self {
            Deprecated::Roots => (
                "roots",
                "pass directories or files as tool parameters, resource URIs or server configuration",
            ),
            Deprecated::Sampling => ("sampling", "call the LLM provider's API from the server"),
            Deprecated::Logging => (
                "logging",
                "log to stderr (stdio) and use OpenTelemetry for observability",
            ),
        }
    }
}

/// A method 2026-07-28 removed (its changelog), and what a client or server does instead.
fn removed(method: &str) -> Option<&'static str> {
    Some(match method {
        "initialize" | "notifications/initialized" => {
            "every request carries its version and capabilities in `_meta`; `server/discover` says what the server speaks (SEP-2575)"
        }
        "ping" => "nothing replaces it (SEP-2575)",
        "logging/setLevel" => {
            "a request asks for log messages with `io.modelcontextprotocol/logLevel` in its own `_meta` (SEP-2575)"
        }
        "notifications/roots/list_changed" => "roots are deprecated; nothing signals their change (SEP-2575)",
        "resources/subscribe" | "resources/unsubscribe" => {
            "`subscriptions/listen` with `resourceSubscriptions` (SEP-2575)"
        }
        "tasks/result" | "tasks/list" => {
            "tasks are the `io.modelcontextprotocol/tasks` extension: `tasks/get` polls a task (SEP-2663)"
        }
        "notifications/elicitation/complete" => {
            "the client learns the outcome by retrying the original request (multi round-trip requests)"
        }
        _ => return None,
    })
}

/// What a retry says about the round it continues.
struct Retry {
    keys: Vec<Box<str>>,
    state: Option<Vec<u8>>,
    args: u64,
}

impl ExchangeCtx {
    /// The version a message of this exchange is in: its request's `_meta` (or, on a stream,
    /// the last one a request named), else what its session negotiated.
    pub(super) fn modern_version(&self) -> Option<Arc<str>> {
        if let Some(v) = self.sender.as_ref().and_then(|s| s.version.clone()) {
            return Some(v);
        }
        let g = self.scope.group()?;
        // A version `initialize` negotiated wins: a 2.x client's `server/discover` probe at
        // 2026-07-28 may end in the older handshake.
        self.insp
            .correlator
            .peek_session(g, |s| {
                s.mcp.version.clone().or(s.mcp.modern.version.clone())
            })
            .flatten()
    }

    /// The exchange's request named 2026-07-28 (or later) in its own `_meta`.
    pub(super) fn sender_is_modern(&self) -> bool {
        self.sender
            .as_ref()
            .and_then(|s| s.version.as_deref())
            .is_some_and(|v| v >= MODERN)
    }

    fn is_modern(&self) -> bool {
        self.modern_version().is_some_and(|v| &*v >= MODERN)
    }

    /// A stateless 2026-07-28 request (a POST without a session whose message names its own
    /// protocol version): the exchange's scope becomes its client's group.
    pub(super) fn stateless_scope(&mut self, env: &Envelope) {
        if !matches!(self.scope, Scope::Exchange(_))
            || self.transport != Transport::Json
            || env.kind != Kind::Request
        {
            return;
        }
        self.sender_read = true;
        let Some(s) = sender(&env.raw) else { return };
        if s.version.is_none() {
            self.sender = Some(Box::new(s));
            return;
        }
        self.scope = Scope::Stateless {
            group: stateless_group(&s, self.peer_ip),
            exchange: self.id,
        };
        self.sender = Some(Box::new(s));
        self.sender_read = true;
    }

    /// A client request's 2026-07-28 rules, before it is registered: its `_meta` (required keys,
    /// the version against the header and the server's `supportedVersions`), and — for a retry —
    /// the round it continues. Returns what the call keeps.
    pub(super) fn modern_request(
        &mut self,
        env: &Envelope,
        method: &Arc<str>,
        anomalies: &mut Vec<&'static str>,
    ) -> Option<Box<CallMeta>> {
        if self.stream || !self.sender_read {
            // A stream's requests each name their own (an exchange's was read once).
            self.sender = sender(&env.raw).map(Box::new);
            self.sender_read = !self.stream;
        }
        if &**method == "initialize" {
            // The older handshake: it names its version in its own params (and is no method
            // of 2026-07-28, should its `_meta` name that version).
            self.removed_use(Direction::ClientToServer, method, env.id.as_ref());
            return None;
        }
        let header = self.mcp_hdr.as_ref().and_then(|h| h.version.as_deref());
        let meta_version = self.sender.as_ref().and_then(|s| s.version.clone());
        // Plain JSON-RPC (no `_meta` version, no MCP header, no session): nothing to judge.
        if meta_version.is_none() && header.is_none() && self.scope.group().is_none() {
            return None;
        }
        let header: Option<Box<str>> = header.map(Into::into);
        let group = self.scope.group().cloned();
        // A discovery probe commits to nothing; the requests after it say which version is used.
        let probe = &**method == "server/discover";
        if let (Some(g), Some(v), false) = (&group, &meta_version, probe) {
            let (_, ev) = self
                .insp
                .correlator
                .with_session(g, |s| s.mcp.modern.version = Some(v.clone()));
            self.notice_evicted(ev);
        }
        let version = meta_version
            .clone()
            .or_else(|| header.as_deref().map(Arc::from))
            .or_else(|| self.modern_version());
        let modern = version.as_deref().is_some_and(|v| v >= MODERN);
        if !modern {
            return None;
        }
        let id = env.id.as_ref();
        // The required `_meta` keys.
        let (has_version, has_caps) = self
            .sender
            .as_ref()
            .map_or((false, false), |s| (s.version.is_some(), s.has_caps));
        if !(has_version && has_caps) && &**method != "initialize" {
            let missing: Vec<&str> = [
                (!has_version).then_some("io.modelcontextprotocol/protocolVersion"),
                (!has_caps).then_some("io.modelcontextprotocol/clientCapabilities"),
            ]
            .into_iter()
            .flatten()
            .collect();
            self.flag_here(
                Direction::ClientToServer,
                Code::McpMeta,
                id,
                Some(method),
                format!(
                    "a {} request (`{method}`) without the required _meta key{} {}",
                    version.as_deref().unwrap_or(MODERN),
                    if missing.len() > 1 { "s" } else { "" },
                    missing.join(" and ")
                ),
            );
            anomalies.push(Code::McpMeta.as_str());
        }
        // The header against the body (HTTP only).
        if self.transport != Transport::Stdio && self.transport != Transport::Ws {
            if let Some(mv) = &meta_version {
                let problem = match header.as_deref() {
                    Some(h) if h != &**mv => Some(format!(
                        "MCP-Protocol-Version: {h} but the request's _meta names {mv}"
                    )),
                    None => Some(format!(
                        "a {mv} request carries no MCP-Protocol-Version header (the _meta names {mv}; the header is required)"
                    )),
                    _ => None,
                };
                if let Some(why) = problem {
                    self.flag_here(
                        Direction::ClientToServer,
                        Code::McpHeaderMismatch,
                        id,
                        Some(method),
                        why,
                    );
                    anomalies.push(Code::McpHeaderMismatch.as_str());
                }
            }
        }
        // The version against what `server/discover` listed.
        if &**method != "server/discover" {
            if let (Some(g), Some(v)) = (&group, &version) {
                let listed = self
                    .insp
                    .correlator
                    .peek_session(g, |s| {
                        s.mcp
                            .modern
                            .supported
                            .as_ref()
                            .map(|l| (l.iter().any(|x| **x == **v), l.join(", ")))
                    })
                    .flatten();
                if let Some((false, list)) = listed {
                    self.flag_here(
                        Direction::ClientToServer,
                        Code::McpVersion,
                        id,
                        Some(method),
                        format!("`{method}` in protocol {v}, which the server's server/discover did not list (it supports {list})"),
                    );
                    anomalies.push(Code::McpVersion.as_str());
                }
            }
        }
        self.deprecated_use(Direction::ClientToServer, method, id);
        let caps = self.sender.as_ref().and_then(|s| s.caps);
        if !may_need_input(method) {
            return Some(Box::new(CallMeta {
                caps,
                ..Default::default()
            }));
        }
        let retry = self.retry_of(env);
        let args = retry.as_ref().map_or(0, |r| r.args);
        let continues = match (&group, retry) {
            (Some(g), Some(r)) => self.continue_round(g, env, method, r, anomalies),
            _ => None,
        };
        Some(Box::new(CallMeta {
            args,
            caps,
            continues,
        }))
    }

    /// The parts of a call a round is matched by (its arguments' hash), and what a retry
    /// answers (`inputResponses` keys, `requestState`).
    fn retry_of(&self, env: &Envelope) -> Option<Retry> {
        let p = serde_json::from_slice::<RoundParams<'_>>(&env.raw)
            .ok()?
            .params?;
        let args = p.arguments.as_ref().map_or(0, canonical_hash);
        Some(Retry {
            keys: p
                .input_responses
                .map(|m| m.into_keys().map(|k| Box::from(&*k)).collect())
                .unwrap_or_default(),
            state: p.request_state.map(String::into_bytes),
            args,
        })
    }

    /// A retry: the round it continues (by method, name and arguments, else by its state), its
    /// `requestState` and `inputResponses` against that round's.
    fn continue_round(
        &self,
        group: &Arc<str>,
        env: &Envelope,
        method: &Arc<str>,
        r: Retry,
        anomalies: &mut Vec<&'static str>,
    ) -> Option<Id> {
        let is_retry = r.state.is_some() || !r.keys.is_empty();
        let target = env.target.clone();
        let (round, ev) = self.insp.correlator.with_session(group, |s| {
            let rounds = &mut s.mcp.modern.rounds;
            let by_call = rounds
                .iter()
                .rposition(|x| x.method == *method && x.target == target && x.args == r.args);
            let by_state = || {
                r.state
                    .as_deref()
                    .and_then(|st| rounds.iter().rposition(|x| x.state.as_deref() == Some(st)))
            };
            // A call that answers nothing is a new call unless its round is open.
            let at = if is_retry {
                by_call.or_else(by_state)
            } else {
                by_call
            };
            at.and_then(|i| rounds.remove(i))
        });
        self.notice_evicted(ev);
        let id = env.id.as_ref();
        let Some(round) = round else {
            if let Some(st) = &r.state {
                self.flag_here(
                    Direction::ClientToServer,
                    Code::McpRequestState,
                    id,
                    Some(method),
                    format!(
                        "`{method}` carries a requestState ({} bytes) that no input_required round of this client issued",
                        st.len()
                    ),
                );
                anomalies.push(Code::McpRequestState.as_str());
            } else if !r.keys.is_empty() {
                self.flag_here(
                    Direction::ClientToServer,
                    Code::McpInputResponse,
                    id,
                    Some(method),
                    format!(
                        "`{method}` answers input requests ({}) that no input_required round of this client issued",
                        r.keys.join(", ")
                    ),
                );
                anomalies.push(Code::McpInputResponse.as_str());
            }
            return None;
        };
        let state_problem = match (&round.state, &r.state) {
            (Some(issued), Some(got)) if **issued != **got => Some(format!(
                "the retry's requestState ({} bytes) differs from the one round {} issued ({} bytes)",
                got.len(),
                round.id,
                issued.len()
            )),
            (Some(issued), None) => Some(format!(
                "the retry leaves out the requestState ({} bytes) round {} issued",
                issued.len(),
                round.id
            )),
            (None, Some(got)) => Some(format!(
                "the retry carries a requestState ({} bytes), but round {} issued none",
                got.len(),
                round.id
            )),
            _ => None,
        };
        if let Some(why) = state_problem {
            self.flag_here(
                Direction::ClientToServer,
                Code::McpRequestState,
                id,
                Some(method),
                why,
            );
            anomalies.push(Code::McpRequestState.as_str());
        }
        let missing: Vec<&str> = round
            .keys
            .iter()
            .filter(|k| !r.keys.contains(k))
            .map(|k| &**k)
            .collect();
        let extra: Vec<&str> = r
            .keys
            .iter()
            .filter(|k| !round.keys.contains(k))
            .map(|k| &**k)
            .collect();
        if !missing.is_empty() || !extra.is_empty() {
            let mut parts = Vec::new();
            if !missing.is_empty() {
                parts.push(format!("lacks {}", missing.join(", ")));
            }
            if !extra.is_empty() {
                parts.push(format!(
                    "answers {}, which it did not ask",
                    extra.join(", ")
                ));
            }
            self.flag_here(
                Direction::ClientToServer,
                Code::McpInputResponse,
                id,
                Some(method),
                format!(
                    "the retry's inputResponses {} (round {} asked {})",
                    parts.join(" and "),
                    round.id,
                    if round.keys.is_empty() {
                        "nothing".to_string()
                    } else {
                        round.keys.join(", ")
                    }
                ),
            );
            anomalies.push(Code::McpInputResponse.as_str());
        }
        Some(round.id)
    }

    /// A reply to a call that may need input: `input_required` ends this round (its outcome),
    /// and the round is kept for the retry. Its input requests need the client's capabilities
    /// (as the call's `_meta` declared them) and may use deprecated features.
    pub(super) fn input_required(
        &self,
        key: &PendingKey,
        p: &Pending,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) -> bool {
        if env.kind != Kind::Result
            || !may_need_input(&p.method)
            || INPUT_REQUIRED.find(&env.raw).is_none()
        {
            return false;
        }
        let Some(r) = serde_json::from_slice::<InputRequired<'_>>(&env.raw)
            .ok()
            .map(|r| r.result)
        else {
            return false;
        };
        if r.result_type.as_deref() != Some("input_required") {
            return false;
        }
        let requests = r.input_requests.unwrap_or_default();
        let caps = p.modern.as_ref().and_then(|m| m.caps);
        let server = key.direction.reverse();
        for (k, req) in &requests {
            let Some(m) = req.method.as_deref() else {
                continue;
            };
            if let Some(need) = capability::needed(m, server, MODERN) {
                if let (Side::Client, Some(c)) = (need.side, caps) {
                    if !c.has(need.caps) {
                        self.flag_reply(
                            key,
                            &p.method,
                            Code::McpCapability,
                            format!(
                                "input request {k} (`{m}`) needs the client capability `{}`, which the request's _meta did not declare",
                                need.name
                            ),
                            extra,
                        );
                    }
                }
            }
            self.deprecated_use(server, &Arc::from(m), Some(&key.id));
        }
        if let Some(g) = key.scope.group() {
            let round = Round {
                id: key.id.clone(),
                method: p.method.clone(),
                target: p.target.clone(),
                args: p.modern.as_ref().map_or(0, |m| m.args),
                keys: requests.keys().map(|k| Box::from(&**k)).collect(),
                state: r.request_state.map(|s| s.into_bytes().into_boxed_slice()),
            };
            let (_, ev) = self.insp.correlator.with_session(g, |s| {
                let rounds = &mut s.mcp.modern.rounds;
                if rounds.len() >= MAX_ROUNDS {
                    rounds.pop_front();
                }
                rounds.push_back(round);
            });
            self.notice_evicted(ev);
        }
        true
    }

    /// `server/discover`'s result: the versions the server speaks (later requests are judged
    /// against them), how long and how widely it may be cached, its capabilities.
    pub(super) fn discover_result(&self, group: &Arc<str>, env: &Envelope) {
        let Some(d) = serde_json::from_slice::<Discover<'_>>(&env.raw)
            .ok()
            .map(|d| d.result)
        else {
            return;
        };
        let caps = d.capabilities.as_ref().map(Caps::from_json);
        let (_, ev) = self.insp.correlator.with_session(group, |s| {
            let m = &mut s.mcp.modern;
            m.supported = d.supported.map(|v| v.into_iter().map(Into::into).collect());
            m.ttl_ms = d.ttl_ms;
            m.cache_scope = d.cache_scope.map(|c| c.into());
            if caps.is_some() && s.mcp.version.is_none() {
                // No handshake: what discovery declared is the server's side.
                s.mcp.server_caps = caps;
            }
        });
        self.notice_evicted(ev);
    }

    /// A server's result to a call in 2026-07-28: flagged when it lacks what the version
    /// requires of its shape (`resultType`; a cacheable method's caching hints).
    pub(super) fn result_shape(
        &self,
        key: &PendingKey,
        method: &Arc<str>,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) {
        // Every 2026-07-28 request names its version in its own `_meta` (`MCP_META` otherwise),
        // so earlier versions' results pay one comparison here and no session lookup.
        if key.direction != Direction::ClientToServer || !self.sender_is_modern() {
            return;
        }
        let problems = shape_problems(method, &env.raw);
        if problems.is_empty() {
            return;
        }
        let msg = format!("the result of {method}: {}", problems.join("; "));
        self.flag_reply(key, method, Code::McpResultShape, msg, extra);
    }

    /// A server's error to a 2026-07-28 request with a code that revision renumbered: a
    /// resource not found is `-32602` (Invalid Params), no longer `-32002` (changelog, minor
    /// change 6). Other `-32000`…`-32019` codes stay the implementation's own (grandfathered).
    pub(super) fn error_code_rule(
        &self,
        key: &PendingKey,
        p: &Pending,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) {
        if env.kind != Kind::Error
            || key.direction != Direction::ClientToServer
            || !matches!(env.error_code, Some(-32004..=-32001))
            || !self.sender_is_modern()
        {
            return;
        }
        let method = &p.method;
        let said = |words: &[&str]| {
            let m = env.error_message.as_deref().unwrap_or_default();
            words.iter().any(|w| contains_ignore_case(m, w))
        };
        let flagged = |code: Code| p.anomalies.contains(&code.as_str());
        // The draft's numbers for the errors 2026-07-28 defines, known by what the error says
        // or by what rpctap found wrong with the request (-32000…-32019 stay the
        // implementations' own: another meaning there is no finding).
        let (now, name) = match env.error_code {
            Some(-32002) if &**method == "resources/read" => (-32602, "a resource not found"),
            Some(-32001) if flagged(Code::McpHeaderMismatch) || said(&["header"]) => {
                (-32020, "HeaderMismatch")
            }
            Some(-32003) if said(&["capabilit"]) => (-32021, "MissingRequiredClientCapability"),
            Some(-32004) if flagged(Code::McpVersion) || said(&["version"]) => {
                (-32022, "UnsupportedProtocolVersion")
            }
            _ => return,
        };
        let was = env.error_code.unwrap_or_default();
        let msg = format!("{method} answered {was}: {name} is {now} from {MODERN} (changelog: error codes renumbered into -32020…-32099, the range the specification reserves)");
        self.flag_reply(key, method, Code::McpErrorCode, msg, extra);
    }

    /// A server's `notifications/message` on the stream of a 2026-07-28 request that did not
    /// ask for log messages (`_meta` `io.modelcontextprotocol/logLevel`): the server MUST NOT
    /// send it (server/utilities/logging, "Per-request log level").
    pub(super) fn unasked_log(&self, dir: Direction, method: &Arc<str>) {
        // Only a POST's own response stream is that request's alone (on a WebSocket or stdio,
        // messages of several requests interleave).
        if dir != Direction::ServerToClient
            || &**method != "notifications/message"
            || matches!(self.transport, Transport::Ws | Transport::Stdio)
        {
            return;
        }
        let Some(s) = self.sender.as_ref() else {
            return;
        };
        if s.log_level || s.version.as_deref().is_none_or(|v| v < MODERN) {
            return;
        }
        self.flag_here(
            dir,
            Code::McpUnaskedLog,
            None,
            Some(method),
            format!("a log message on the stream of a {MODERN} request whose `_meta` has no `io.modelcontextprotocol/logLevel`: a server MUST NOT send `notifications/message` for such a request (server/utilities/logging, per-request log level)"),
        );
    }

    /// A method 2026-07-28 removed, sent in that version: a request that names it in its own
    /// `_meta`, or a notification in such an exchange (or session).
    fn removed_use(&self, dir: Direction, method: &Arc<str>, id: Option<&Id>) {
        let Some(instead) = removed(method) else {
            return;
        };
        let modern = match id {
            Some(_) if dir == Direction::ClientToServer => self.sender_is_modern(),
            _ => self.is_modern(),
        };
        if !modern {
            return;
        }
        self.flag_here(
            dir,
            Code::McpRemoved,
            id,
            Some(method),
            format!("`{method}` is not part of {MODERN} (changelog: removed): {instead}"),
        );
    }

    /// SSE event ids on the reply to a 2026-07-28 request (judged when the exchange ends):
    /// stream resumability (the event ids and `Last-Event-ID`) is gone from that revision — for
    /// a server that speaks it: one whose `server/discover` listed no such version (an older
    /// server answering the probe in its own style) is not judged by it.
    pub(super) fn removed_sse_id(&self) {
        if !self.sender_is_modern() {
            return;
        }
        let older = self.scope.group().is_some_and(|g| {
            self.insp
                .correlator
                .peek_session(g, |s| {
                    s.mcp
                        .modern
                        .supported
                        .as_ref()
                        .is_some_and(|v| !v.iter().any(|x| &**x >= MODERN))
                })
                .unwrap_or(false)
        });
        if older {
            return;
        }
        self.flag_here(
            Direction::ServerToClient,
            Code::McpRemoved,
            None,
            None,
            format!("SSE event ids on the reply to a {MODERN} request: stream resumability (event ids, `Last-Event-ID`) is not part of {MODERN} (changelog: removed); a broken stream's request is re-issued as a new request (SEP-2575); flagged once per exchange"),
        );
    }

    /// A GET that resumes a stream (`Last-Event-ID`) under a 2026-07-28 version header: stream
    /// resumption is gone from that revision (a broken stream's request is re-issued).
    pub(super) fn removed_resumption(&self, version: Option<&str>) {
        if !self.resumed || version.is_none_or(|v| v < MODERN) {
            return;
        }
        self.flag_here(
            Direction::ClientToServer,
            Code::McpRemoved,
            None,
            None,
            format!("a GET with `Last-Event-ID` under MCP-Protocol-Version {}: stream resumption is not part of {MODERN} (changelog: removed); a broken stream's request is re-issued as a new request (SEP-2575)", version.unwrap_or_default()),
        );
    }

    /// A deprecated feature used in a 2026-07-28 session (once per session or client), or a
    /// removed one (each time).
    pub(super) fn deprecated_use(&self, dir: Direction, method: &Arc<str>, id: Option<&Id>) {
        self.removed_use(dir, method, id);
        let Some(feature) = Deprecated::of(method) else {
            return;
        };
        if !self.is_modern() {
            return;
        }
        if let Some(g) = self.scope.group() {
            let (again, ev) = self.insp.correlator.with_session(g, |s| {
                let bit = feature as u8;
                let again = s.mcp.modern.deprecated & bit != 0;
                s.mcp.modern.deprecated |= bit;
                again
            });
            self.notice_evicted(ev);
            if again {
                return;
            }
        }
        let (name, instead) = feature.text();
        self.flag_here(
            dir,
            Code::McpDeprecated,
            id,
            Some(method),
            format!("`{method}` uses {name}, deprecated since {MODERN} (SEP-2577): {instead}; flagged once per session"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_hash_alike_in_any_key_order() {
        let a: Value = serde_json::from_str(r#"{"a":1,"b":{"c":[1,"x"],"d":null}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"b":{"d":null,"c":[1,"x"]},"a":1}"#).unwrap();
        let c: Value = serde_json::from_str(r#"{"b":{"d":null,"c":["x",1]},"a":1}"#).unwrap();
        assert_eq!(canonical_hash(&a), canonical_hash(&b));
        assert_ne!(canonical_hash(&a), canonical_hash(&c));
    }

    #[test]
    fn a_stateless_client_is_named_by_its_info_and_address() {
        let s = sender(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"my client","version":"1.2"},"io.modelcontextprotocol/clientCapabilities":{"elicitation":{}}}}}"#).unwrap();
        assert_eq!(s.version.as_deref(), Some("2026-07-28"));
        assert!(s.has_caps && s.caps.unwrap().has(Caps::ELICITATION));
        let ip = "10.0.0.7".parse().ok();
        assert_eq!(
            &*stateless_group(&s, ip),
            "stateless:my_client/1.2@10.0.0.7"
        );
        assert!(sender(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#).is_none());
    }
}

/// One argument a tool mirrors into a header: its path in the arguments, the header's token
/// (`Mcp-Param-{token}`), and its declared JSON type.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamHeader {
    path: Box<[Box<str>]>,
    token: Box<str>,
    ty: Option<Box<str>>,
}

/// The `x-mcp-header` annotations of an `inputSchema` (reached through `properties` from its
/// root, as the SDKs read them), when it has any.
pub(super) fn param_headers(schema: &str) -> Option<Arc<[ParamHeader]>> {
    memchr::memmem::find(schema.as_bytes(), b"x-mcp-header")?;
    let v: Value = serde_json::from_str(schema).ok()?;
    let mut out = Vec::new();
    let mut stack: Vec<(Vec<Box<str>>, &Value)> = vec![(Vec::new(), &v)];
    while let Some((path, node)) = stack.pop() {
        if out.len() >= 64 {
            break;
        }
        let Some(obj) = node.as_object() else {
            continue;
        };
        if let (false, Some(token)) = (
            path.is_empty(),
            obj.get("x-mcp-header").and_then(Value::as_str),
        ) {
            out.push(ParamHeader {
                path: path.clone().into(),
                token: token.into(),
                ty: obj.get("type").and_then(Value::as_str).map(Into::into),
            });
        }
        if let Some(props) = obj.get("properties").and_then(Value::as_object) {
            for (k, sub) in props {
                if path.len() < 16 {
                    let mut p = path.clone();
                    p.push(k.as_str().into());
                    stack.push((p, sub));
                }
            }
        }
    }
    (!out.is_empty()).then(|| out.into())
}

/// Whether a header's text says the argument's value: strings as they are (after the
/// `=?base64?…?=` form is decoded), booleans as `true`/`false`, numbers by value (`42` is `42.0`).
fn header_says(decoded: &str, v: &Value) -> bool {
    match v {
        Value::String(s) => decoded == s,
        Value::Bool(b) => decoded.eq_ignore_ascii_case(if *b { "true" } else { "false" }),
        Value::Number(n) => match (decoded.parse::<f64>(), n.as_f64()) {
            (Ok(h), Some(a)) => {
                h == a
                    && decoded
                        .bytes()
                        .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b))
            }
            _ => false,
        },
        _ => true, // no header form: nothing to compare
    }
}

/// The first disagreement between a `tools/call`'s `Mcp-Param-*` headers and the arguments
/// its tool maps them to: a header without its argument, an argument without its header, a
/// value that differs, a header sent twice.
pub(super) fn param_mismatch(
    declared: &[ParamHeader],
    args: Option<&Value>,
    sent: &[(Box<str>, Box<str>)],
) -> Option<String> {
    for d in declared {
        let token = d.token.to_ascii_lowercase();
        let mut copies = sent.iter().filter(|(n, _)| **n == *token);
        let header = copies.next();
        if copies.next().is_some() {
            return Some(format!("Mcp-Param-{} is sent twice", d.token));
        }
        let mut value = args;
        for k in d.path.iter() {
            value = value.and_then(|v| v.get(&**k));
        }
        let value = value.filter(|v| !v.is_null());
        let arg = d.path.join(".");
        match (header, value) {
            (None, None) => {}
            (None, Some(v)) if v.is_object() || v.is_array() => {}
            (None, Some(_)) => {
                return Some(format!(
                    "no Mcp-Param-{} header, although the tool maps argument `{arg}` to it and the call sets it",
                    d.token
                ))
            }
            (Some((_, h)), None) => {
                return Some(format!(
                    "Mcp-Param-{}: {h} but the call has no argument `{arg}`",
                    d.token
                ))
            }
            (Some((_, h)), Some(v)) => {
                let decoded = decode_header(h);
                if !decoded.as_deref().is_some_and(|t| header_says(t, v)) {
                    return Some(format!(
                        "Mcp-Param-{}: {h} but the argument `{arg}` is {v}",
                        d.token
                    ));
                }
            }
        }
    }
    // A parameter header the tool does not declare.
    for (n, v) in sent {
        if !declared.iter().any(|d| d.token.eq_ignore_ascii_case(n)) {
            return Some(format!(
                "Mcp-Param-{n}: {v}, but the tool's inputSchema maps no argument to it"
            ));
        }
    }
    None
}

fn decode_header(v: &str) -> Option<String> {
    decode_name(v.trim())
}

/// A header value as `Mcp-Name` and `Mcp-Param-*` carry it: plain, or `=?base64?…?=` for a value
/// that is not plain ASCII.
pub(super) fn decode_name(v: &str) -> Option<String> {
    use base64::Engine as _;
    match v
        .strip_prefix("=?base64?")
        .and_then(|r| r.strip_suffix("?="))
    {
        Some(b) => base64::engine::general_purpose::STANDARD
            .decode(b)
            .ok()
            .and_then(|d| String::from_utf8(d).ok()),
        None => Some(v.to_string()),
    }
}

#[cfg(test)]
mod param_tests {
    use super::*;

    fn decl() -> Arc<[ParamHeader]> {
        param_headers(r#"{"type":"object","properties":{
            "region":{"type":"string","x-mcp-header":"Region"},
            "n":{"type":"integer","x-mcp-header":"Count"},
            "dry":{"type":"boolean","x-mcp-header":"Dry"},
            "opts":{"type":"object","properties":{"tenant":{"type":"string","x-mcp-header":"Tenant"}}}}}"#)
        .unwrap()
    }

    fn sent(h: &[(&str, &str)]) -> Vec<(Box<str>, Box<str>)> {
        h.iter()
            .map(|(n, v)| (n.to_ascii_lowercase().into(), (*v).into()))
            .collect()
    }

    #[test]
    fn param_headers_agree_or_are_flagged() {
        let d = decl();
        assert_eq!(d.len(), 4);
        let args: Value = serde_json::from_str(
            r#"{"region":"eu-west","n":42,"dry":true,"opts":{"tenant":"Zürich"}}"#,
        )
        .unwrap();
        // Zürich is not ASCII: sent in the base64 form.
        let ok = sent(&[
            ("region", "eu-west"),
            ("count", "42.0"),
            ("dry", "true"),
            ("tenant", "=?base64?WsO8cmljaA==?="),
        ]);
        assert_eq!(param_mismatch(&d, Some(&args), &ok), None);
        let wrong = sent(&[
            ("region", "us-east"),
            ("count", "42"),
            ("dry", "true"),
            ("tenant", "=?base64?WsO8cmljaA==?="),
        ]);
        assert!(param_mismatch(&d, Some(&args), &wrong)
            .unwrap()
            .contains("Mcp-Param-Region"));
        let number = sent(&[
            ("region", "eu-west"),
            ("count", "43"),
            ("dry", "true"),
            ("tenant", "=?base64?WsO8cmljaA==?="),
        ]);
        assert!(param_mismatch(&d, Some(&args), &number)
            .unwrap()
            .contains("Count"));
        let missing = sent(&[("region", "eu-west"), ("count", "42"), ("dry", "true")]);
        assert!(param_mismatch(&d, Some(&args), &missing)
            .unwrap()
            .contains("no Mcp-Param-Tenant"));
        let few: Value = serde_json::from_str(r#"{"region":"eu-west"}"#).unwrap();
        let extra = sent(&[("region", "eu-west"), ("dry", "false")]);
        assert!(param_mismatch(&d, Some(&few), &extra)
            .unwrap()
            .contains("no argument `dry`"));
        let unknown = sent(&[("region", "eu-west"), ("other", "1")]);
        assert!(param_mismatch(&d, Some(&few), &unknown)
            .unwrap()
            .contains("maps no argument"));
        assert_eq!(
            param_mismatch(&d, Some(&few), &sent(&[("region", "eu-west")])),
            None
        );
    }
}

#[cfg(test)]
pub(super) mod rule_tests {
    use super::*;
    use crate::events::{BusBuilder, Subscription};

    const META: &str = r#""_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{"name":"t","version":"1"},"io.modelcontextprotocol/clientCapabilities":{}}"#;

    pub(in crate::inspect) fn setup() -> (Inspector, Subscription) {
        let mut bus = BusBuilder::default();
        let sub = bus.subscribe("t", 1 << 12);
        (Inspector::new(InspectConfig::default(), bus.build()), sub)
    }

    /// One stateless POST: its body, the reply (JSON, or SSE events when several).
    pub(in crate::inspect) fn post(
        insp: &Inspector,
        version: Option<&str>,
        body: &str,
        replies: &[&str],
    ) {
        let v: Value = serde_json::from_str(body).unwrap();
        let method = v["method"].as_str().map(str::to_string);
        let name = v["params"]["name"]
            .as_str()
            .or(v["params"]["taskId"].as_str())
            .map(str::to_string);
        let mut ex = insp.begin(&RequestMeta {
            method: "POST",
            path: "/mcp",
            content_type: Some("application/json"),
            protocol_version: version,
            mcp_method: method.as_deref(),
            mcp_name: name.as_deref(),
            peer_ip: Some([127, 0, 0, 1].into()),
            ..Default::default()
        });
        ex.request_body(&Bytes::from(body.to_string()), true);
        let sse = replies.len() > 1;
        ex.response_head(&ResponseMeta {
            status: 200,
            content_type: Some(if sse {
                "text/event-stream"
            } else {
                "application/json"
            }),
            ..Default::default()
        });
        for r in replies {
            if sse {
                ex.response_data(format!("data: {r}\n\n").as_bytes());
            } else {
                ex.response_data(r.as_bytes());
            }
        }
        ex.end(EndReason::Complete);
    }

    pub(in crate::inspect) fn events(sub: &mut Subscription) -> Vec<Event> {
        let mut out = Vec::new();
        while let Ok(e) = sub.rx.try_recv() {
            out.push((*e).clone());
        }
        out
    }

    pub(in crate::inspect) fn codes(ev: &[Event]) -> Vec<&'static str> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Anomaly(a) => Some(a.code),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn discovery_lists_the_versions_later_requests_must_use() {
        let (insp, mut sub) = setup();
        let discover =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"server/discover","params":{{{META}}}}}"#);
        post(
            &insp,
            Some("2026-07-28"),
            &discover,
            &[
                r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","supportedVersions":["2026-07-28"],"ttlMs":0,"cacheScope":"private","capabilities":{"tools":{}}}}"#,
            ],
        );
        let list =
            format!(r#"{{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{{{META}}}}}"#);
        let ok = r#"{"jsonrpc":"2.0","id":2,"result":{"resultType":"complete","tools":[],"ttlMs":0,"cacheScope":"public"}}"#;
        post(&insp, Some("2026-07-28"), &list, &[ok]);
        assert_eq!(codes(&events(&mut sub)), Vec::<&str>::new());
        // A version the server did not list; a header that disagrees with the body; a request
        // without the keys every request must carry.
        let other = list.replace(
            r#"protocolVersion":"2026-07-28""#,
            r#"protocolVersion":"2027-01-01""#,
        );
        post(&insp, Some("2027-01-01"), &other, &[ok]);
        post(&insp, Some("2025-11-25"), &list, &[ok]);
        let bare = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}}"#;
        post(&insp, Some("2026-07-28"), bare, &[ok]);
        let ev = events(&mut sub);
        assert_eq!(
            codes(&ev),
            vec!["MCP_VERSION", "MCP_HEADER_MISMATCH", "MCP_META"],
            "{ev:?}"
        );
        // One group per client (the one that names no clientInfo is `client`), an exchange
        // scope each.
        let groups: std::collections::BTreeSet<String> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Call(c) => Some(c.scope.report_key()),
                _ => None,
            })
            .collect();
        assert_eq!(
            groups.into_iter().collect::<Vec<_>>(),
            vec!["stateless:client@127.0.0.1", "stateless:t/1@127.0.0.1"]
        );
    }

    #[test]
    fn an_input_request_needs_the_capability_the_call_declared() {
        let (insp, mut sub) = setup();
        let asks = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"input_required","inputRequests":{"k":{"method":"elicitation/create","params":{"message":"ok?"}}},"requestState":"s"}}"#;
        // Declared elicitation: clean; declared nothing: MCP_CAPABILITY.
        let with = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"x","arguments":{{}},{}}}}}"#,
            META.replace(
                "clientCapabilities\":{}",
                "clientCapabilities\":{\"elicitation\":{}}"
            )
        );
        post(&insp, Some("2026-07-28"), &with, &[asks]);
        assert_eq!(codes(&events(&mut sub)), Vec::<&str>::new());
        let without = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"y","arguments":{{}},{META}}}}}"#
        );
        post(&insp, Some("2026-07-28"), &without, &[asks]);
        let ev = events(&mut sub);
        assert_eq!(codes(&ev), vec!["MCP_CAPABILITY"], "{ev:?}");
    }

    #[test]
    fn a_listen_stream_carries_its_notifications_and_ends_with_them() {
        let (insp, mut sub) = setup();
        let listen = format!(
            r#"{{"jsonrpc":"2.0","id":"L1","method":"subscriptions/listen","params":{{"notifications":{{"toolsListChanged":true}},{META}}}}}"#
        );
        let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"}}}"#;
        let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":"L1"}}}"#;
        post(&insp, Some("2026-07-28"), &listen, &[ack, changed]);
        let ev = events(&mut sub);
        assert_eq!(codes(&ev), Vec::<&str>::new(), "{ev:?}");
        let notes: Vec<Option<&str>> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Message(m) if m.kind == Kind::Notification => Some(m.target.as_deref()),
                _ => None,
            })
            .collect();
        assert_eq!(notes, vec![Some("\"L1\""), Some("\"L1\"")]);
        let call = ev.iter().find_map(|e| match e {
            Event::Call(c) => Some(c.clone()),
            _ => None,
        });
        let call = call.unwrap();
        assert_eq!(call.target.as_deref(), Some("\"L1\""));
        assert!(
            matches!(call.outcome, Outcome::Missing { ref reason } if reason.contains("subscription stream ended"))
        );
    }

    #[test]
    fn mcp_over_websocket_is_a_session_and_other_json_rpc_is_not() {
        let (insp, mut sub) = setup();
        // MCP: an id reused within the session is flagged, as on stdio.
        let mut ws = insp.begin_ws(40);
        let line = |ws: &mut ExchangeCtx, d, s: &str| ws.line(d, Bytes::from(s.to_string()));
        line(
            &mut ws,
            Direction::ClientToServer,
            r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{}}}"#,
        );
        line(
            &mut ws,
            Direction::ServerToClient,
            r#"{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":"2025-11-25","capabilities":{"tools":{}}}}"#,
        );
        line(
            &mut ws,
            Direction::ClientToServer,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        line(
            &mut ws,
            Direction::ClientToServer,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        );
        line(
            &mut ws,
            Direction::ServerToClient,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#,
        );
        ws.end(EndReason::Closed("closed".into()));
        let ev = events(&mut sub);
        assert_eq!(codes(&ev), vec!["DUPLICATE_ID"], "{ev:?}");
        assert!(ev
            .iter()
            .all(|e| !matches!(e, Event::Call(c) if c.scope != Scope::Session("ws-40".into()))));
        // Plain JSON-RPC over WebSocket: an answered id may come again.
        let mut ws = insp.begin_ws(41);
        for _ in 0..2 {
            line(
                &mut ws,
                Direction::ClientToServer,
                r#"{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber"}"#,
            );
            line(
                &mut ws,
                Direction::ServerToClient,
                r#"{"jsonrpc":"2.0","id":1,"result":"0x1"}"#,
            );
        }
        ws.end(EndReason::Closed("closed".into()));
        assert_eq!(codes(&events(&mut sub)), Vec::<&str>::new());
    }

    /// 2026-07-28 asks every result for its `resultType`, and a complete result of a cacheable
    /// method for its caching hints; a result of an earlier version is judged by its own.
    #[test]
    fn a_2026_result_names_its_type_and_a_cacheable_one_its_hints() {
        // (method, result, problems)
        let table: [(&str, &str, usize); 9] = [
            (
                "tools/list",
                r#"{"resultType":"complete","tools":[],"ttlMs":0,"cacheScope":"private"}"#,
                0,
            ),
            ("tools/call", r#"{"resultType":"complete","content":[]}"#, 0),
            (
                "resources/read",
                r#"{"resultType":"input_required","inputRequests":{},"requestState":"s"}"#,
                0,
            ),
            ("tools/call", r#"{"content":[]}"#, 1),
            ("tools/list", r#"{"tools":[]}"#, 3),
            (
                "prompts/list",
                r#"{"resultType":"complete","prompts":[],"ttlMs":-1,"cacheScope":"private"}"#,
                1,
            ),
            (
                "resources/list",
                r#"{"resultType":"complete","resources":[],"ttlMs":5,"cacheScope":"shared"}"#,
                1,
            ),
            (
                "server/discover",
                r#"{"resultType":7,"supportedVersions":[]}"#,
                1,
            ),
            ("tools/call", r#"19"#, 0),
        ];
        for (method, result, n) in table {
            let raw = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{result}}}"#);
            let p = shape_problems(method, raw.as_bytes());
            assert_eq!(p.len(), n, "{method} {result}: {p:?}");
        }
        assert!(shape_problems(
            "tools/list",
            br#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#
        )[0]
        .contains("basic/index"));

        // Through the inspector: flagged at 2026-07-28 only.
        let (insp, mut sub) = setup();
        let list =
            format!(r#"{{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{{{META}}}}}"#);
        post(
            &insp,
            Some("2026-07-28"),
            &list,
            &[r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","tools":[]}}"#],
        );
        let ev = events(&mut sub);
        assert_eq!(codes(&ev), ["MCP_RESULT_SHAPE"]);
        let call = ev.iter().find_map(|e| match e {
            Event::Call(c) => Some(c.anomalies.clone()),
            _ => None,
        });
        assert_eq!(
            call,
            Some(vec!["MCP_RESULT_SHAPE"]),
            "the call carries the code"
        );
        let old = r#"{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}"#;
        post(
            &insp,
            Some("2025-11-25"),
            old,
            &[r#"{"jsonrpc":"2.0","id":2,"result":{"tools":[]}}"#],
        );
        assert_eq!(codes(&events(&mut sub)), Vec::<&str>::new());
    }

    /// At 2026-07-28 a server sends log messages only for a request that asked for them.
    #[test]
    fn a_log_message_for_a_request_that_did_not_ask_is_flagged() {
        let (insp, mut sub) = setup();
        let call = |meta: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{}},{meta}}}}}"#
            )
        };
        let log = r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#;
        let done = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}"#;
        let asked = META.replace(
            r#""io.modelcontextprotocol/clientCapabilities":{}"#,
            r#""io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"debug""#,
        );
        post(&insp, Some("2026-07-28"), &call(&asked), &[log, done]);
        let first: Vec<_> = codes(&events(&mut sub))
            .into_iter()
            .filter(|c| *c != "MCP_DEPRECATED" && *c != "MCP_CAPABILITY")
            .collect();
        assert_eq!(first, Vec::<&str>::new(), "asked for");
        post(&insp, Some("2026-07-28"), &call(META), &[log, done]);
        let second: Vec<_> = codes(&events(&mut sub))
            .into_iter()
            .filter(|c| *c != "MCP_DEPRECATED" && *c != "MCP_CAPABILITY")
            .collect();
        assert_eq!(second, ["MCP_UNASKED_LOG"]);
    }

    /// The same tools listed in another order: info at 2026-07-28 (deterministic order is a
    /// SHOULD); the same order, or another set of tools, is nothing.
    #[test]
    fn a_tool_list_in_another_order_is_noted() {
        let (insp, mut sub) = setup();
        let list = |id: u32, names: &[&str]| {
            let tools: Vec<String> = names
                .iter()
                .map(|n| format!(r#"{{"name":"{n}","inputSchema":{{"type":"object"}}}}"#))
                .collect();
            (
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/list","params":{{{META}}}}}"#
                ),
                format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","tools":[{}],"ttlMs":0,"cacheScope":"public"}}}}"#,
                    tools.join(",")
                ),
            )
        };
        for (id, names, want) in [
            (1, &["a", "b", "c"][..], vec![]),
            (2, &["a", "b", "c"][..], vec![]),
            (3, &["b", "a", "c"][..], vec!["MCP_TOOL_ORDER"]),
            (4, &["b", "a", "d"][..], vec![]),
        ] {
            let (q, r) = list(id, names);
            post(&insp, Some("2026-07-28"), &q, &[&r]);
            assert_eq!(codes(&events(&mut sub)), want, "list {id}");
        }
    }

    /// A GET that resumes its stream with `Last-Event-ID`: removed at 2026-07-28 only.
    #[test]
    fn stream_resumption_is_flagged_at_2026_only() {
        for (version, want) in [("2026-07-28", vec!["MCP_REMOVED"]), ("2025-11-25", vec![])] {
            let (insp, mut sub) = setup();
            let mut h = http::HeaderMap::new();
            h.insert("last-event-id", "e7".parse().unwrap());
            let mut ex = insp.begin(&RequestMeta {
                method: "GET",
                path: "/mcp",
                session: Some("s1"),
                protocol_version: Some(version),
                headers: Some(&h),
                ..Default::default()
            });
            ex.end(EndReason::Complete);
            assert_eq!(codes(&events(&mut sub)), want, "{version}");
        }
    }

    /// What 2026-07-28 removed is flagged when sent in it, each time; the same at 2025-11-25
    /// is that version's own business.
    #[test]
    fn a_method_2026_removed_is_flagged_in_2026_only() {
        let (insp, mut sub) = setup();
        let req = |id: u32, method: &str, meta: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{{{meta}}}}}"#)
        };
        let nf = r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32601,"message":"Method not found"}}"#;
        for (i, m) in [
            "ping",
            "logging/setLevel",
            "resources/subscribe",
            "tasks/list",
            "initialize",
        ]
        .iter()
        .enumerate()
        {
            let id = i as u32 + 1;
            post(
                &insp,
                Some("2026-07-28"),
                &req(id, m, META),
                &[&nf.replace(r#""id":1"#, &format!(r#""id":{id}"#))],
            );
        }
        let ev = events(&mut sub);
        let removed: Vec<_> = ev
            .iter()
            .filter_map(|e| match e {
                Event::Anomaly(a) if a.code == "MCP_REMOVED" => {
                    a.method.as_deref().map(str::to_string)
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            removed,
            [
                "ping",
                "logging/setLevel",
                "resources/subscribe",
                "tasks/list",
                "initialize"
            ],
            "{ev:?}"
        );
        // A server's completion signal on a 2026 call's stream.
        let call = req(
            9,
            "tools/call",
            &format!(r#""name":"t","arguments":{{}},{META}"#),
        );
        post(
            &insp,
            Some("2026-07-28"),
            &call,
            &[
                r#"{"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{"elicitationId":"e"}}"#,
                r#"{"jsonrpc":"2.0","id":9,"result":{"resultType":"complete","content":[]}}"#,
            ],
        );
        let codes9: Vec<_> = codes(&events(&mut sub))
            .into_iter()
            .filter(|c| *c == "MCP_REMOVED")
            .collect();
        assert_eq!(codes9, ["MCP_REMOVED"]);
        // SSE event ids on a 2026 reply: flagged once for the exchange.
        let mut ex = insp.begin(&RequestMeta {
            method: "POST",
            path: "/mcp",
            content_type: Some("application/json"),
            protocol_version: Some("2026-07-28"),
            mcp_method: Some("tools/call"),
            mcp_name: Some("t"),
            peer_ip: Some([127, 0, 0, 1].into()),
            ..Default::default()
        });
        let call = req(
            10,
            "tools/call",
            &format!(r#""name":"t","arguments":{{}},{META}"#),
        );
        ex.request_body(&Bytes::from(call), true);
        ex.response_head(&ResponseMeta {
            status: 200,
            content_type: Some("text/event-stream"),
            ..Default::default()
        });
        ex.response_data(b"id: 1\ndata: \n\n");
        ex.response_data(b"id: 2\ndata: {\"jsonrpc\":\"2.0\",\"id\":10,\"result\":{\"resultType\":\"complete\",\"content\":[]}}\n\n");
        ex.end(EndReason::Complete);
        let ids: Vec<_> = codes(&events(&mut sub))
            .into_iter()
            .filter(|c| *c == "MCP_REMOVED")
            .collect();
        assert_eq!(
            ids,
            ["MCP_REMOVED"],
            "one finding for the exchange's event ids"
        );
        // A server whose discovery lists only older versions answers the probe in its own
        // style: its event ids are not judged by 2026-07-28.
        let (insp, mut sub) = setup();
        let discover = req(1, "server/discover", META);
        let mut ex = insp.begin(&RequestMeta {
            method: "POST",
            path: "/mcp",
            content_type: Some("application/json"),
            protocol_version: Some("2026-07-28"),
            mcp_method: Some("server/discover"),
            peer_ip: Some([127, 0, 0, 1].into()),
            ..Default::default()
        });
        ex.request_body(&Bytes::from(discover), true);
        ex.response_head(&ResponseMeta {
            status: 200,
            content_type: Some("text/event-stream"),
            ..Default::default()
        });
        ex.response_data(b"id: 1\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"resultType\":\"complete\",\"supportedVersions\":[\"2025-11-25\"],\"ttlMs\":0,\"cacheScope\":\"public\",\"capabilities\":{}}}\n\n");
        ex.end(EndReason::Complete);
        assert_eq!(codes(&events(&mut sub)), Vec::<&str>::new());
        // 2025-11-25: ping and subscribe are that version's own methods.
        let (insp, mut sub) = setup();
        post(
            &insp,
            Some("2025-11-25"),
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            &[r#"{"jsonrpc":"2.0","id":1,"result":{}}"#],
        );
        assert!(!codes(&events(&mut sub)).contains(&"MCP_REMOVED"));
    }

    /// A resource not found is -32602 from 2026-07-28; -32002 there is the old numbering, and
    /// at 2025-11-25 it is that version's own.
    #[test]
    fn a_2026_resource_not_found_is_minus_32602() {
        let (insp, mut sub) = setup();
        // (`post` sends no `Mcp-Name` for a read: that finding is not this test's.)
        let err_codes = |ev: &[Event]| -> Vec<&'static str> {
            codes(ev)
                .into_iter()
                .filter(|c| *c != "MCP_HEADER_MISMATCH")
                .collect()
        };
        let read = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{{"uri":"x://y",{META}}}}}"#
        );
        let old_code =
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32002,"message":"Resource not found"}}"#;
        let new_code =
            r#"{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"Resource not found"}}"#;
        post(&insp, Some("2026-07-28"), &read, &[new_code]);
        assert_eq!(err_codes(&events(&mut sub)), Vec::<&str>::new());
        post(&insp, Some("2026-07-28"), &read, &[old_code]);
        assert_eq!(err_codes(&events(&mut sub)), ["MCP_ERROR_CODE"]);
        let older =
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/read","params":{"uri":"x://y"}}"#;
        post(&insp, Some("2025-11-25"), older, &[old_code]);
        assert_eq!(err_codes(&events(&mut sub)), Vec::<&str>::new());
    }

    /// The draft's numbers for the errors 2026-07-28 defines (`-32001` HeaderMismatch, `-32003`
    /// MissingRequiredClientCapability, `-32004` UnsupportedProtocolVersion), known by what the
    /// error says; the same numbers meaning something else are the implementation's own.
    #[test]
    fn the_drafts_error_numbers_are_flagged_by_their_meaning() {
        let (insp, mut sub) = setup();
        let call = format!(
            r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"t","arguments":{{}},{META}}}}}"#
        );
        let err = |code: i32, msg: &str| {
            format!(r#"{{"jsonrpc":"2.0","id":1,"error":{{"code":{code},"message":"{msg}"}}}}"#)
        };
        for (code, msg, want) in [
            (-32001, "Header mismatch: Mcp-Name", vec!["MCP_ERROR_CODE"]),
            (
                -32003,
                "Missing required client capability",
                vec!["MCP_ERROR_CODE"],
            ),
            (
                -32004,
                "Unsupported protocol version",
                vec!["MCP_ERROR_CODE"],
            ),
            (-32022, "Unsupported protocol version", vec![]),
            (-32001, "rate limited by upstream", vec![]),
        ] {
            post(&insp, Some("2026-07-28"), &call, &[&err(code, msg)]);
            assert_eq!(codes(&events(&mut sub)), want, "{code} {msg}");
        }
        let older = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t"}}"#;
        post(
            &insp,
            Some("2025-11-25"),
            older,
            &[&err(-32004, "Unsupported protocol version")],
        );
        assert_eq!(codes(&events(&mut sub)), Vec::<&str>::new());
    }
}

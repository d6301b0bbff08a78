//! MCP rules that read what the messages say, one level above JSON-RPC: each session's
//! `initialize` exchange (capabilities, negotiated version) and `tools/list` (tool names and
//! schemas) are kept in its [`McpState`], and later traffic is judged against them. Decides
//! `MCP_CAPABILITY`, `MCP_OUTPUT_SCHEMA`, `MCP_INPUT_SCHEMA`, `MCP_UNKNOWN_TOOL`,
//! `MCP_HEADER_MISMATCH`, `MCP_SESSION_LOST`, `MCP_PROGRESS`, `MCP_CANCEL_UNKNOWN`,
//! `MCP_LARGE_RESULT` and `MCP_AUTH`.
//!
//! Only the few methods these rules concern are parsed again (as serde_json values, from the
//! copy the inspector already holds): `initialize`, `tools/list`, `tools/call` of a tool with a
//! schema, progress and cancel notifications, and results over the large-result size. Every
//! other message costs a method comparison and, in a session, one map lookup.

use super::capability::{self, Caps, Side};
use super::schemas::{self, Catalogue, ToolSchemas};
use super::*;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::Value;

/// What the rules know of one MCP session.
#[derive(Debug, Default)]
pub struct McpState {
    /// The client's capabilities, from its `initialize` request.
    pub client_caps: Option<Caps>,
    /// The server's capabilities, from its `initialize` result.
    pub server_caps: Option<Caps>,
    /// The protocol version the `initialize` result settled on.
    pub version: Option<Arc<str>>,
    pub tools: Catalogue,
    /// The capabilities a notification was already flagged for (each once per session: a
    /// server that logs without `logging` says so on every line).
    notified: Caps,
    /// What the 2026-07-28 rules keep: discovery, open rounds, deprecations flagged.
    pub modern: super::modern::ModernState,
    /// The tool definitions of the list being gathered, whole (only with a baseline).
    pub listed: Option<std::collections::BTreeMap<String, Value>>,
}

/// What the capability rule needs of a session, copied out of its state: the client's and the
/// server's capabilities and the negotiated version.
type Handshake = (Option<Caps>, Option<Caps>, Option<Arc<str>>);

impl McpState {
    fn handshake(&self) -> Handshake {
        (self.client_caps, self.server_caps, self.version.clone())
    }
}

/// The MCP headers of a request: `Mcp-Method`, `Mcp-Name` (SEP-2243, 2026-07-28) and
/// `MCP-Protocol-Version`. Kept (boxed) only when one is present.
#[derive(Debug, Default)]
pub(super) struct McpHeaders {
    method: Option<Box<str>>,
    name: Option<Box<str>>,
    pub(super) version: Option<Box<str>>,
    /// `Mcp-Param-*` headers (2026-07-28): the name's rest in lower case, and the value.
    pub(super) params: Vec<(Box<str>, Box<str>)>,
}

/// A progress token in use: the call that carries it and the last progress reported.
#[derive(Debug)]
pub(super) struct ProgressEntry {
    call: PendingKey,
    last: Option<f64>,
}

/// The protocol version from which `MCP-Protocol-Version` is required on every request after
/// `initialize`.
const VERSION_HEADER_SINCE: &str = "2025-06-18";
/// The protocol version from which `Mcp-Method` (and `Mcp-Name`, where the request names
/// something) are required on requests.
const ROUTING_HEADERS_SINCE: &str = "2026-07-28";

/// `params` or `result` of one message, borrowed from its text.
#[derive(Deserialize)]
struct Parts<'a> {
    #[serde(borrow, default)]
    params: Option<&'a RawValue>,
    #[serde(borrow, default)]
    result: Option<&'a RawValue>,
}

fn params<'a, T: Deserialize<'a>>(raw: &'a [u8]) -> Option<T> {
    let p: Parts<'a> = serde_json::from_slice(raw).ok()?;
    serde_json::from_str(p.params?.get()).ok()
}

fn result<'a, T: Deserialize<'a>>(raw: &'a [u8]) -> Option<T> {
    let p: Parts<'a> = serde_json::from_slice(raw).ok()?;
    serde_json::from_str(p.result?.get()).ok()
}

#[derive(Deserialize)]
struct Initialize {
    #[serde(rename = "protocolVersion", default)]
    protocol_version: Option<String>,
    #[serde(default)]
    capabilities: Value,
}

#[derive(Deserialize)]
struct ToolsPage<'a> {
    #[serde(borrow, default)]
    tools: Vec<ToolDecl<'a>>,
    #[serde(rename = "nextCursor", default)]
    next_cursor: Option<Value>,
}

#[derive(Deserialize)]
struct ToolDecl<'a> {
    name: String,
    #[serde(rename = "inputSchema", borrow, default)]
    input_schema: Option<&'a RawValue>,
    #[serde(rename = "outputSchema", borrow, default)]
    output_schema: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct ListParams {
    #[serde(default)]
    cursor: Option<Value>,
}

#[derive(Deserialize)]
struct CallParams {
    #[serde(default)]
    arguments: Option<Value>,
}

#[derive(Deserialize)]
struct CallResult<'a> {
    #[serde(rename = "structuredContent", borrow, default)]
    structured: Option<&'a RawValue>,
    #[serde(rename = "isError", default)]
    is_error: Option<bool>,
}

#[derive(Deserialize)]
struct Meta {
    #[serde(rename = "_meta", default)]
    meta: Option<MetaToken>,
}

#[derive(Deserialize)]
struct MetaToken {
    #[serde(rename = "progressToken", default)]
    progress_token: Option<Value>,
}

#[derive(Deserialize)]
struct Progress {
    #[serde(rename = "progressToken")]
    token: Value,
    progress: f64,
}

#[derive(Deserialize)]
struct Cancelled {
    #[serde(rename = "requestId")]
    request_id: Value,
}

#[derive(Deserialize)]
struct ContentParts<'a> {
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
    #[serde(rename = "structuredContent", borrow, default)]
    structured: Option<&'a RawValue>,
    #[serde(borrow, default)]
    contents: Option<&'a RawValue>,
}

fn size_text(n: usize) -> String {
    if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / (1u64 << 20) as f64)
    } else if n >= 1 << 10 {
        format!("{:.1} KiB", n as f64 / 1024.0)
    } else {
        format!("{n} B")
    }
}

/// The total length of the `text` members of a `content` array.
fn text_len(content: &RawValue) -> usize {
    #[derive(Deserialize)]
    struct Block<'a> {
        #[serde(borrow, default)]
        text: Option<std::borrow::Cow<'a, str>>,
        #[serde(borrow, default)]
        blob: Option<&'a str>,
    }
    serde_json::from_str::<Vec<Block<'_>>>(content.get())
        .map(|v| {
            v.iter()
                .map(|b| b.text.as_ref().map_or(0, |t| t.len()) + b.blob.map_or(0, str::len))
                .sum()
        })
        .unwrap_or(0)
}

impl McpHeaders {
    pub(super) fn from_meta(meta: &RequestMeta<'_>) -> Option<Box<McpHeaders>> {
        if meta.mcp_method.is_none() && meta.mcp_name.is_none() && meta.protocol_version.is_none() {
            return None;
        }
        // `Mcp-Param-*` exist from 2026-07-28 on: only then are the headers walked.
        let params = match (meta.protocol_version, meta.headers) {
            (Some(v), Some(h)) if v >= super::modern::MODERN => h
                .iter()
                .filter_map(|(n, v)| {
                    let rest = n.as_str().strip_prefix("mcp-param-")?;
                    Some((rest.into(), v.to_str().ok()?.into()))
                })
                .collect(),
            _ => Vec::new(),
        };
        Some(Box::new(McpHeaders {
            method: meta.mcp_method.map(Into::into),
            name: meta.mcp_name.map(Into::into),
            version: meta.protocol_version.map(Into::into),
            params,
        }))
    }
}

impl ExchangeCtx {
    /// Flags a finding on the reply to the call `key` (of `method`), and marks the call with it
    /// (its `call` event's codes).
    pub(super) fn flag_reply(
        &self,
        key: &PendingKey,
        method: &Arc<str>,
        code: Code,
        msg: String,
        extra: &mut Vec<&'static str>,
    ) {
        self.flag_here(
            key.direction.reverse(),
            code,
            Some(&key.id),
            Some(method),
            msg,
        );
        extra.push(code.as_str());
    }

    /// Flags a finding on the message being processed, in direction `dir`.
    pub(super) fn flag_here(
        &self,
        dir: Direction,
        code: Code,
        id: Option<&Id>,
        method: Option<&Arc<str>>,
        msg: String,
    ) {
        let mut site = self.site();
        site.at = site.at.or(Some((dir, None)));
        flag(&self.insp, site, code, id, method, msg);
    }

    /// The request's head: `MCP-Protocol-Version` against the version its session negotiated.
    pub(super) fn mcp_request_head(&mut self, meta: &RequestMeta<'_>) {
        self.removed_resumption(meta.protocol_version);
        let Some(sid) = meta.session else { return };
        let inner = self.insp.clone();
        let Some(Some(v)) = inner
            .correlator
            .peek_session(sid, |s| s.mcp.version.clone())
        else {
            return;
        };
        let msg = match meta.protocol_version {
            Some(h) if h != &*v => format!(
                "MCP-Protocol-Version: {h} on a request of session {sid}, which negotiated {v}"
            ),
            None if &*v >= VERSION_HEADER_SINCE => format!(
                "a {} request of session {sid} (protocol {v}) carries no MCP-Protocol-Version header; it is required since {VERSION_HEADER_SINCE}",
                meta.method
            ),
            _ => return,
        };
        self.flag_here(
            Direction::ClientToServer,
            Code::McpHeaderMismatch,
            None,
            None,
            msg,
        );
    }

    /// `Mcp-Method` / `Mcp-Name` against the one message the POST carries (a batch cannot match
    /// one header, and the transport that has these headers has no batches).
    fn routing_headers(
        &self,
        env: &Envelope,
        method: &Arc<str>,
        is_request: bool,
        anomalies: &mut Vec<&'static str>,
    ) {
        if self.batch_len.is_some() || self.transport == Transport::Stdio {
            return;
        }
        let hdr = self.mcp_hdr.as_deref();
        let version = hdr.and_then(|h| h.version.as_deref());
        let required = is_request && version.is_some_and(|v| v >= ROUTING_HEADERS_SINCE);
        let mut problems = Vec::new();
        match hdr.and_then(|h| h.method.as_deref()) {
            Some(m) if m != &**method => problems.push(format!(
                "Mcp-Method: {m} but the body's method is `{method}`"
            )),
            None if required => problems.push(format!(
                "no Mcp-Method header (required on requests since {ROUTING_HEADERS_SINCE})"
            )),
            _ => {}
        }
        // The tasks extension asks `Mcp-Name` of its methods too: the `taskId`.
        let named = matches!(
            &**method,
            "tools/call"
                | "prompts/get"
                | "resources/read"
                | "resources/subscribe"
                | "resources/unsubscribe"
                | "tasks/get"
                | "tasks/update"
                | "tasks/cancel"
        );
        match (hdr.and_then(|h| h.name.as_deref()), env.target.as_deref()) {
            (Some(n), Some(t)) if super::modern::decode_name(n).as_deref() != Some(t) => {
                problems.push(format!("Mcp-Name: {n} but the body names `{t}`"))
            }
            (Some(n), None) if named => {
                problems.push(format!("Mcp-Name: {n} but the body names nothing"))
            }
            (None, Some(_)) if required && named => problems.push(format!(
                "no Mcp-Name header for `{method}` (required since {ROUTING_HEADERS_SINCE})"
            )),
            _ => {}
        }
        if !problems.is_empty() {
            self.flag_here(
                Direction::ClientToServer,
                Code::McpHeaderMismatch,
                env.id.as_ref(),
                Some(method),
                problems.join("; "),
            );
            anomalies.push(Code::McpHeaderMismatch.as_str());
        }
    }

    /// A message from the client: an MCP method marks the request as MCP (for `MCP_AUTH`; `ping`
    /// is everybody's method, alone it does not), and its routing headers are checked.
    fn client_message(
        &mut self,
        env: &Envelope,
        method: &Arc<str>,
        is_request: bool,
        anomalies: &mut Vec<&'static str>,
    ) {
        if crate::rpc::is_mcp_method(method) && &**method != "ping" {
            self.mcp_request = true;
        }
        self.routing_headers(env, method, is_request, anomalies);
    }

    /// A message only the other side may send (a server that sends `initialize` to its
    /// client, say: a wrapped command that echoes its input).
    fn direction_rule(
        &self,
        dir: Direction,
        env: &Envelope,
        method: &Arc<str>,
        anomalies: &mut Vec<&'static str>,
    ) {
        let Some(only) = capability::only_direction(method) else {
            return;
        };
        if only == dir {
            return;
        }
        let (sender, other) = match dir {
            Direction::ClientToServer => ("client", "server"),
            Direction::ServerToClient => ("server", "client"),
        };
        self.flag_here(
            dir,
            Code::McpDirection,
            env.id.as_ref(),
            Some(method),
            format!("`{method}` is the {other}'s to send, and the {sender} sent it"),
        );
        anomalies.push(Code::McpDirection.as_str());
    }

    /// The capability a message needs, against what the other side declared.
    fn capability_rule(
        &self,
        st: &Handshake,
        dir: Direction,
        env: &Envelope,
        method: &Arc<str>,
        anomalies: &mut Vec<&'static str>,
    ) {
        let (Some(cc), Some(sc)) = (st.0, st.1) else {
            return;
        };
        let version = st.2.as_deref().unwrap_or("");
        let Some(need) = capability::needed(method, dir, version) else {
            return;
        };
        let (declared, who) = match need.side {
            Side::Client => (cc, "client"),
            Side::Server => (sc, "server"),
        };
        if declared.has(need.caps) {
            return;
        }
        let notification = env.kind == Kind::Notification;
        if notification {
            if let Some(sid) = self.scope.group() {
                let (again, ev) = self.insp.correlator.with_session(sid, |s| {
                    let again = s.mcp.notified.has(need.caps);
                    s.mcp.notified = Caps(s.mcp.notified.0 | need.caps.0);
                    again
                });
                self.notice_evicted(ev);
                if again {
                    return;
                }
            }
        }
        let what = if notification {
            "notification; flagged once per session"
        } else {
            "request"
        };
        self.flag_here(
            dir,
            Code::McpCapability,
            env.id.as_ref(),
            Some(method),
            format!(
                "`{method}` ({what}) needs the {who} capability `{}`, which the {who} did not declare {}: {}",
                need.name,
                match (need.side, self.sender.is_some()) {
                    (Side::Client, true) => "in the request's _meta",
                    (Side::Server, true) => "in server/discover",
                    _ => "in initialize",
                },
                // Whose fault it is: the sender's, for using what the other side never
                // offered, or for not declaring what it does itself.
                match (dir, need.side) {
                    (Direction::ClientToServer, Side::Server) => {
                        "the client used a capability the server did not offer"
                    }
                    (Direction::ServerToClient, Side::Client) => {
                        "the server used a capability the client did not offer"
                    }
                    (Direction::ClientToServer, Side::Client) => {
                        "the client sent it without declaring the capability itself"
                    }
                    (Direction::ServerToClient, Side::Server) => {
                        "the server sent it without declaring the capability itself"
                    }
                }
            ),
        );
        anomalies.push(Code::McpCapability.as_str());
    }

    /// The MCP rules of a request (before it is registered); returns its progress token.
    pub(super) fn mcp_request_checks(
        &mut self,
        dir: Direction,
        env: &Envelope,
        anomalies: &mut Vec<&'static str>,
    ) -> (Option<Box<str>>, Option<Box<super::modern::CallMeta>>) {
        let Some(method) = env.method.clone() else {
            return (None, None);
        };
        self.direction_rule(dir, env, &method, anomalies);
        let inner = self.insp.clone();
        let modern = if dir == Direction::ClientToServer {
            self.client_message(env, &method, true, anomalies);
            self.modern_request(env, &method, anomalies)
        } else {
            self.deprecated_use(dir, &method, env.id.as_ref());
            None
        };
        if &*method == "initialize" && dir == Direction::ClientToServer {
            if let Some(p) = params::<Initialize>(&env.raw) {
                let caps = Caps::from_json(&p.capabilities);
                self.init_caps = Some(caps);
                if let Some(sid) = self.scope.group() {
                    let (_, ev) = inner
                        .correlator
                        .with_session(sid, |s| s.mcp.client_caps = Some(caps));
                    self.notice_evicted(ev);
                }
            }
        }
        if let Some(sid) = self.scope.group() {
            let sid = sid.clone();
            // One look at the session: the capability rule, and what a tools/call needs.
            let tool = (&*method == "tools/call" && dir == Direction::ClientToServer)
                .then_some(env.target.as_deref())
                .flatten();
            let seen = inner.correlator.peek_session(&sid, |s| {
                let tool = tool.map(|t| {
                    let decl = s.mcp.tools.get(t);
                    (
                        s.mcp.tools.unknown(t),
                        decl.and_then(|x| x.input.clone()),
                        // Known to the catalogue: its header mapping (none is a mapping too).
                        decl.map(|x| x.params.clone()),
                    )
                });
                (s.mcp.handshake(), tool)
            });
            let (mut handshake, tool_seen) = seen.unwrap_or_default();
            self.modern_handshake(&mut handshake);
            self.capability_rule(&handshake, dir, env, &method, anomalies);
            if let Some((_, _, Some(mapped))) = &tool_seen {
                let sent = self.mcp_hdr.as_ref().map_or(&[][..], |h| &h.params[..]);
                if mapped.is_some() || !sent.is_empty() {
                    let declared = mapped.as_deref().unwrap_or(&[]);
                    let args = params::<CallParams>(&env.raw).and_then(|p| p.arguments);
                    if let Some(why) = super::modern::param_mismatch(declared, args.as_ref(), sent)
                    {
                        self.flag_here(
                            dir,
                            Code::McpHeaderMismatch,
                            env.id.as_ref(),
                            Some(&method),
                            why,
                        );
                        anomalies.push(Code::McpHeaderMismatch.as_str());
                    }
                }
            }
            if let Some((unknown, input, _)) = tool_seen {
                let name = tool.unwrap_or_default();
                if unknown {
                    self.flag_here(
                        dir,
                        Code::McpUnknownTool,
                        env.id.as_ref(),
                        Some(&method),
                        format!("tools/call of `{name}`, which is not in the session's tools/list"),
                    );
                    anomalies.push(Code::McpUnknownTool.as_str());
                } else if let Some(schema) = input {
                    let v = inner.schemas.get(&schema);
                    if let Ok(v) = v.as_ref() {
                        let args = params::<CallParams>(&env.raw)
                            .and_then(|p| p.arguments)
                            .unwrap_or_else(|| Value::Object(Default::default()));
                        if let Some(why) = schemas::first_failure(v, &args) {
                            self.flag_here(
                                dir,
                                Code::McpInputSchema,
                                env.id.as_ref(),
                                Some(&method),
                                format!("arguments of tool `{name}` fail its inputSchema {why}"),
                            );
                            anomalies.push(Code::McpInputSchema.as_str());
                        }
                    }
                }
            }
            if &*method == "tools/list" && dir == Direction::ClientToServer {
                needle!(CURSOR, "cursor");
                let cursor = CURSOR.find(&env.raw).is_some()
                    && params::<ListParams>(&env.raw)
                        .is_some_and(|p| p.cursor.is_some_and(|c| !c.is_null()));
                if !cursor {
                    let keep = inner.cfg.baseline.is_some();
                    let (_, ev) = inner.correlator.with_session(&sid, |s| {
                        s.mcp.tools.start_list();
                        if keep {
                            s.mcp.listed = Some(Default::default());
                        }
                    });
                    self.notice_evicted(ev);
                }
            }
        }
        (self.progress_token(dir, env), modern)
    }

    /// A 2026-07-28 message is judged by what its request's `_meta` declared (capabilities are
    /// per request: servers must not infer them from earlier ones) and in its version.
    fn modern_handshake(&self, h: &mut Handshake) {
        let Some(s) = &self.sender else { return };
        if s.caps.is_some() {
            h.0 = s.caps;
        }
        if let Some(v) = &s.version {
            h.2 = Some(v.clone());
        }
    }

    /// A request's `_meta.progressToken`, registered for the call's life.
    fn progress_token(&self, dir: Direction, env: &Envelope) -> Option<Box<str>> {
        let inner = &self.insp;
        needle!(PROGRESS_TOKEN, "progressToken");
        PROGRESS_TOKEN.find(&env.raw)?;
        let token = params::<Meta>(&env.raw)?.meta?.progress_token?;
        let token: Box<str> = token.to_string().into();
        if inner.progress.len() < inner.cfg.limits.max_pending {
            inner.progress.insert(
                (self.scope.clone(), token.clone()),
                ProgressEntry {
                    call: PendingKey {
                        scope: self.scope.clone(),
                        direction: dir,
                        id: env.id.clone().unwrap_or(Id::Null),
                    },
                    last: None,
                },
            );
        }
        Some(token)
    }

    /// The MCP rules of a notification.
    pub(super) fn mcp_notification_checks(&mut self, dir: Direction, env: &Envelope) {
        let Some(method) = env.method.clone() else {
            return;
        };
        let inner = self.insp.clone();
        let mut sink = Vec::new();
        self.direction_rule(dir, env, &method, &mut sink);
        if dir == Direction::ClientToServer {
            self.client_message(env, &method, false, &mut sink);
        }
        if let Some(sid) = self.scope.group() {
            let sid = sid.clone();
            if let Some(mut h) = inner.correlator.peek_session(&sid, |s| s.mcp.handshake()) {
                self.modern_handshake(&mut h);
                self.capability_rule(&h, dir, env, &method, &mut sink);
            }
            if &*method == "notifications/tools/list_changed" && dir == Direction::ServerToClient {
                let (_, ev) = inner
                    .correlator
                    .with_session(&sid, |s| s.mcp.tools.changed());
                self.notice_evicted(ev);
            }
        }
        self.deprecated_use(dir, &method, None);
        self.unasked_log(dir, &method);
        match &*method {
            "notifications/progress" => self.progress_rule(dir, env, &method),
            "notifications/cancelled" => self.cancel_rule(dir, env, &method),
            _ => {}
        }
    }

    fn progress_rule(&self, dir: Direction, env: &Envelope, method: &Arc<str>) {
        let Some(p) = params::<Progress>(&env.raw) else {
            return;
        };
        let token: Box<str> = p.token.to_string().into();
        let inner = &self.insp;
        let key = (self.scope.clone(), token);
        let msg = match inner.progress.get_mut(&key) {
            Some(mut e) if inner.correlator.contains(&e.call) => match e.last {
                Some(last) if p.progress <= last => Some(format!(
                    "progress for token {} went from {last} to {}; it must increase with each notification",
                    key.1, p.progress
                )),
                _ => {
                    e.last = Some(p.progress);
                    None
                }
            },
            _ => Some(format!(
                "progress for token {}, which no pending call carries (the call ended, or never asked for progress)",
                key.1
            )),
        };
        if let Some(msg) = msg {
            self.flag_here(dir, Code::McpProgress, None, Some(method), msg);
        }
    }

    /// A cancel of a request never sent in the session (a cancel that crosses its reply is a
    /// race the specification allows, not flagged).
    /// A cancel of a call still waiting marks it: without a reply it ends `cancelled`, no
    /// failure (on every transport).
    fn cancel_rule(&self, dir: Direction, env: &Envelope, method: &Arc<str>) {
        let Some(c) = params::<Cancelled>(&env.raw) else {
            return;
        };
        let Some(id) = Id::from_json_text(&c.request_id.to_string()) else {
            return;
        };
        let inner = &self.insp;
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: dir,
            id: id.clone(),
        };
        if inner.correlator.cancel(&key) {
            return;
        }
        let Scope::Session(sid) = &self.scope else {
            return;
        };
        if inner.correlator.session_used(sid, dir, &id) {
            return;
        }
        self.flag_here(
            dir,
            Code::McpCancelUnknown,
            Some(&id),
            Some(method),
            format!(
                "notifications/cancelled for request {id}, which was never sent in session {sid}"
            ),
        );
    }

    /// A call's reply: what `initialize` and `tools/list` teach, and the rules on results.
    pub(super) fn mcp_reply_rules(
        &mut self,
        key: &PendingKey,
        p: &Pending,
        env: &Envelope,
        input_required: bool,
        extra: &mut Vec<&'static str>,
    ) {
        if env.kind != Kind::Result {
            return;
        }
        self.result_shape(key, &p.method, env, extra);
        let inner = self.insp.clone();
        let sid = match &key.scope {
            Scope::Exchange(_) => self.new_session.clone(),
            s => s.group().cloned(),
        };
        match (&*p.method, &sid) {
            ("server/discover", Some(sid)) => self.discover_result(sid, env),
            ("initialize", Some(sid)) => {
                if let Some(r) = result::<Initialize>(&env.raw) {
                    let caps = Caps::from_json(&r.capabilities);
                    let version: Option<Arc<str>> = r.protocol_version.map(Into::into);
                    let client = self.init_caps;
                    let (_, ev) = inner.correlator.with_session(sid, |s| {
                        s.mcp.server_caps = Some(caps);
                        s.mcp.version = version;
                        if client.is_some() {
                            s.mcp.client_caps = client;
                        }
                    });
                    self.notice_evicted(ev);
                }
            }
            ("tools/list", Some(sid)) => {
                if let Some(page) = result::<ToolsPage<'_>>(&env.raw) {
                    let last = page.next_cursor.as_ref().is_none_or(Value::is_null);
                    let tools: Vec<(Arc<str>, ToolSchemas)> = page
                        .tools
                        .iter()
                        .take(schemas::MAX_TOOLS)
                        .map(|t| {
                            let s = ToolSchemas {
                                input: t.input_schema.map(|r| inner.schemas.intern(r.get())),
                                output: t.output_schema.map(|r| inner.schemas.intern(r.get())),
                                params: t
                                    .input_schema
                                    .and_then(|r| super::modern::param_headers(r.get())),
                            };
                            (Arc::from(t.name.as_str()), s)
                        })
                        .collect();
                    let (moved, ev) = inner
                        .correlator
                        .with_session(sid, |s| s.mcp.tools.add_page(tools, last));
                    self.notice_evicted(ev);
                    let modern = self
                        .modern_version()
                        .is_some_and(|v| &*v >= super::modern::MODERN);
                    if let (Some((i, now, was)), true) = (moved, modern) {
                        let msg = format!("tools/list gave the same tools as the previous list in another order (position {i}: `{now}`, before `{was}`): servers SHOULD list tools in a deterministic order, for clients' and prompt caches (server/tools, 2026-07-28)");
                        self.flag_reply(key, &p.method, Code::McpToolOrder, msg, extra);
                    }
                }
            }
            ("tools/call", Some(sid))
                if key.direction == Direction::ClientToServer && !input_required =>
            {
                let name = p.target.as_deref().unwrap_or("");
                let output = inner
                    .correlator
                    .peek_session(sid, |s| {
                        s.mcp.tools.get(name).and_then(|t| t.output.clone())
                    })
                    .flatten();
                if let Some(schema) = output {
                    self.output_rule(key, p, env, name, &schema, extra);
                }
            }
            _ => {}
        }
        if &*p.method == "tools/list" {
            if let Some(b) = inner.cfg.baseline.clone() {
                self.baseline_rule(key, p, sid.as_ref(), env, &b, extra);
            }
        }
        if env.raw.len() > inner.cfg.large_result && crate::rpc::is_mcp_method(&p.method) {
            let parts = result::<ContentParts<'_>>(&env.raw);
            let mut where_ = Vec::new();
            if let Some(c) = &parts {
                if let Some(content) = c.content {
                    where_.push(format!("content text {}", size_text(text_len(content))));
                }
                if let Some(s) = c.structured {
                    where_.push(format!("structuredContent {}", size_text(s.get().len())));
                }
                if let Some(s) = c.contents {
                    where_.push(format!("contents {}", size_text(s.get().len())));
                }
            }
            let what = match p.target.as_deref() {
                Some(t) => format!("`{}` ({t})", p.method),
                None => format!("`{}`", p.method),
            };
            self.flag_reply(
                key,
                &p.method,
                Code::McpLargeResult,
                format!(
                    "the result of {what} is {} (over the large-result size, {}; desktop clients reject tool results this large){}",
                    size_text(env.raw.len()),
                    size_text(inner.cfg.large_result),
                    if where_.is_empty() { String::new() } else { format!(": {}", where_.join(", ")) }
                ),
                extra,
            );
        }
    }

    /// A page of `tools/list` with a baseline: gathered whole, and the complete list compared
    /// with the server's trusted tools (`MCP_TOOL_DRIFT`).
    #[allow(clippy::too_many_arguments)]
    fn baseline_rule(
        &self,
        key: &PendingKey,
        p: &Pending,
        sid: Option<&Arc<str>>,
        env: &Envelope,
        b: &crate::baseline::Live,
        extra: &mut Vec<&'static str>,
    ) {
        #[derive(Deserialize)]
        struct Page {
            #[serde(default)]
            tools: Vec<Value>,
            #[serde(rename = "nextCursor", default)]
            next_cursor: Option<Value>,
        }
        let Some(page) = result::<Page>(&env.raw) else {
            return;
        };
        let last = page.next_cursor.as_ref().is_none_or(Value::is_null);
        let named = |tools: Vec<Value>, into: &mut std::collections::BTreeMap<String, Value>| {
            for t in tools {
                if let Some(n) = t.get("name").and_then(Value::as_str) {
                    if into.len() < schemas::MAX_TOOLS {
                        into.insert(n.to_string(), t);
                    }
                }
            }
        };
        let whole = match sid {
            // A session's (or client's) pages are gathered until the last.
            Some(sid) => {
                let (whole, ev) = self.insp.correlator.with_session(sid, |s| {
                    named(
                        page.tools,
                        s.mcp.listed.get_or_insert_with(Default::default),
                    );
                    if last {
                        s.mcp.listed.take()
                    } else {
                        None
                    }
                });
                self.notice_evicted(ev);
                whole
            }
            // Without one, a page that is the whole list by itself.
            None if last && !self.req.calls.is_empty() => {
                let mut all = Default::default();
                named(page.tools, &mut all);
                Some(all)
            }
            None => None,
        };
        let Some(whole) = whole else { return };
        for d in b.seen(&whole) {
            let mut site = self.site();
            site.at = site.at.or(Some((key.direction.reverse(), None)));
            let severity = if d.error {
                crate::events::Severity::Error
            } else {
                crate::events::Severity::Warning
            };
            flag_as(
                &self.insp,
                site,
                Code::McpToolDrift,
                severity,
                Some(&key.id),
                Some(&p.method),
                format!(
                    "tool `{}` drifted from the baseline of {}: {}",
                    d.tool, b.label, d.what
                ),
            );
            if !extra.contains(&Code::McpToolDrift.as_str()) {
                extra.push(Code::McpToolDrift.as_str());
            }
        }
    }

    fn output_rule(
        &self,
        key: &PendingKey,
        p: &Pending,
        env: &Envelope,
        name: &str,
        schema: &Arc<str>,
        extra: &mut Vec<&'static str>,
    ) {
        let inner = &self.insp;
        let Some(r) = result::<CallResult<'_>>(&env.raw) else {
            return;
        };
        if r.is_error == Some(true) {
            return; // a tool error's result is not the tool's output
        }
        let v = inner.schemas.get(schema);
        let Ok(v) = v.as_ref() else { return };
        let why = match r.structured {
            None => Some(format!(
                "tool `{name}` declares an outputSchema but its result has no structuredContent"
            )),
            Some(s) => match serde_json::from_str::<Value>(s.get()) {
                Ok(s) => schemas::first_failure(v, &s).map(|w| {
                    format!("structuredContent of tool `{name}` fails its outputSchema {w}")
                }),
                Err(_) => None,
            },
        };
        if let Some(why) = why {
            self.flag_reply(key, &p.method, Code::McpOutputSchema, why, extra);
        }
    }

    /// The response head's MCP rules: a session rpctap saw created answered 404
    /// (`MCP_SESSION_LOST`), a 401 without the protected-resource metadata (`MCP_AUTH`).
    pub(super) fn mcp_response_head(&mut self, status: u16, www_authenticate: Option<&str>) {
        let inner = self.insp.clone();
        if status == 404 {
            if let Some(sid) = self.session_header.clone() {
                if inner.correlator.peek_session(&sid, |s| s.seen_start) == Some(true) {
                    self.flag_here(
                        Direction::ServerToClient,
                        Code::McpSessionLost,
                        None,
                        None,
                        format!("HTTP 404 for session {sid}, which the server created and nobody deleted: the server restarted, or another replica answered"),
                    );
                    // Flagged once: the server does not know it any more (nor its tasks).
                    inner.end_session(&sid, "the server lost the session");
                }
            }
        }
        let mcp = self.mcp_request || self.mcp_hdr.is_some() || self.session_header.is_some();
        // The challenge as events may show it (redacted when configured secret).
        let shown = www_authenticate.map(|w| {
            if inner.cfg.redact.is_secret_header("www-authenticate") {
                crate::redact::REDACTED.to_string()
            } else {
                w.to_string()
            }
        });
        self.publish_auth(status, shown.clone(), mcp);
        if status == 401 && mcp {
            let named =
                www_authenticate.is_some_and(|w| contains_ignore_case(w, "resource_metadata"));
            if !named {
                let why = match shown {
                    None => "no WWW-Authenticate header".to_string(),
                    Some(w) => format!("WWW-Authenticate: {w}"),
                };
                self.flag_here(
                    Direction::ServerToClient,
                    Code::McpAuth,
                    None,
                    None,
                    format!("HTTP 401 on an MCP endpoint with {why}; since 2025-06-18 it must name resource_metadata (the protected-resource metadata URL) so clients can find the authorization server"),
                );
            }
        }
    }
}

/// The discovery documents of MCP authorization (RFC 9728, RFC 8414, OpenID Connect).
const DISCOVERY: [&str; 3] = [
    "/.well-known/oauth-protected-resource",
    "/.well-known/oauth-authorization-server",
    "/.well-known/openid-configuration",
];

impl ExchangeCtx {
    /// An authorization exchange around an MCP endpoint — a `401`/`403` to an MCP request, or
    /// a discovery document — is published as its own event, so the dashboard, the log and the
    /// recording show it although it carries no JSON-RPC.
    fn publish_auth(&mut self, status: u16, www_authenticate: Option<String>, mcp: bool) {
        let Some(line) = self.req_line.take() else {
            return;
        };
        let (method, path) = line;
        let discovery = DISCOVERY.iter().any(|d| path.starts_with(d));
        if !(discovery || (mcp && matches!(status, 401 | 403))) {
            return;
        }
        self.insp.bus.publish(Event::Http(HttpEvent::Auth {
            ts: now_ns(),
            exchange: self.id,
            method: method.into(),
            path: path.into(),
            status,
            www_authenticate,
        }));
    }
}

/// A call ended: its progress token is free again.
pub(super) fn release_progress(inner: &Inner, key: &PendingKey, p: &Pending) {
    if let Some(t) = &p.progress {
        inner.progress.remove(&(key.scope.clone(), t.clone()));
    }
}

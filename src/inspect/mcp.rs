//! MCP above JSON-RPC: sessions (`Mcp-Session-Id`, their start and the `initialize` handshake),
//! the legacy HTTP+SSE transport's announced endpoints, and tool results. Decides
//! `MCP_EARLY_REQUEST`, `MCP_SESSION_CHANGED` and `TOOL_ERROR`.

use super::*;
use crate::locks::Locked as _;

/// The announced endpoints, oldest first out when the session cap is reached.
#[derive(Default)]
pub(super) struct Endpoints {
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

/// The session parameter of a legacy message URL's query, as the SDKs name it: `sessionId`
/// (TypeScript) or `session_id` (Python); not empty.
pub fn session_param(query: &str) -> Option<&str> {
    query
        .split('&')
        .find_map(|kv| {
            kv.strip_prefix("sessionId=")
                .or_else(|| kv.strip_prefix("session_id="))
        })
        .filter(|s| !s.is_empty())
}

/// The session name shown for a legacy endpoint: the value of its first query parameter whose
/// name mentions a session (`sessionId`, `session_id`, …), else the whole path and query.
pub(super) fn endpoint_session(target: &str) -> &str {
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

impl Inner {
    /// The legacy session a request without `Mcp-Session-Id` belongs to: the one whose stream
    /// announced this path and query as its endpoint, or — for a stream rpctap did not see
    /// start — the `sessionId` / `session_id` query parameter the SDKs use.
    pub(super) fn legacy_session(&self, meta: &RequestMeta<'_>) -> Option<Arc<str>> {
        let query = meta.query?;
        let inner = self;
        if inner.endpoints_len.load(Ordering::Relaxed) > 0 {
            let url = format!("{}?{}", meta.path, query);
            let eps = inner.endpoints.locked();
            if let Some(s) = eps.by_url.get(url.as_str()) {
                return Some(s.clone());
            }
        }
        session_param(query).map(Arc::from)
    }

    /// Remembers a legacy stream's announced endpoint; returns its session.
    pub(super) fn announce_endpoint(&self, target: String) -> Arc<str> {
        let inner = self;
        let sid: Arc<str> = endpoint_session(&target).into();
        let mut eps = inner.endpoints.locked();
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

impl ExchangeCtx {
    /// An `initialize` outside any session (Streamable HTTP): its session is named by the
    /// reply's head, so its events wait for it (`settle_session`).
    pub(super) fn await_session(&mut self) {
        if matches!(self.scope, Scope::Exchange(_))
            && self.session_header.is_none()
            && !self.stream
            && self.transport == Transport::Json
        {
            self.awaiting.get_or_insert_with(Vec::new);
        }
    }

    /// Publishes an event of the message being processed, or keeps it while the exchange waits
    /// for its session.
    pub(super) fn emit(&mut self, ev: Event) {
        match &mut self.awaiting {
            Some(w) => w.push(ev),
            None => self.insp.bus.publish(ev),
        }
    }

    /// The reply's head came (or none will): an exchange that waited for its session moves
    /// into the one the reply's `Mcp-Session-Id` names — its calls still pending, its scope,
    /// the events it kept — and those events are published.
    pub(super) fn settle_session(&mut self, session: Option<&str>) {
        let Some(mut kept) = self.awaiting.take() else {
            return;
        };
        if let (Some(sid), Scope::Exchange(_)) = (session, &self.scope) {
            let inner = self.insp.clone();
            let scope = Scope::Session(sid.into());
            let mut evicted = Vec::new();
            for k in &mut self.req.calls {
                let moved = PendingKey {
                    scope: scope.clone(),
                    ..k.clone()
                };
                if let Some(p) = inner.correlator.remove_all(k) {
                    inner.correlator.insert(moved.clone(), p, &mut evicted);
                }
                *k = moved;
            }
            for (k, p) in evicted {
                end_missing(&inner, &k, p, "evicted: too many pending calls", false);
            }
            for ev in &mut kept {
                match ev {
                    Event::Message(m) => m.scope = scope.clone(),
                    Event::Anomaly(a) => a.scope = scope.clone(),
                    Event::Call(c) => c.scope = scope.clone(),
                    _ => {}
                }
            }
            self.scope = scope;
        }
        for ev in kept {
            self.insp.bus.publish(ev);
        }
    }

    /// The reply's `Mcp-Session-Id`: a session starts here (the reply to `initialize`), or the
    /// server answered a session with another id (`MCP_SESSION_CHANGED`).
    pub(super) fn mcp_session_header(&mut self, session: Option<&str>) {
        let Some(new_sid) = session else { return };
        let inner = self.insp.clone();
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
                self.new_session = Some(new_sid.clone());
                let initialize = self.req.calls.len() == 1;
                let ((), evicted) = inner.correlator.with_session(&new_sid, |s| {
                    s.seen_start = true;
                });
                self.notice_evicted(evicted);
                if initialize {
                    let id = self.req.calls[0].id.clone();
                    let _ =
                        inner
                            .correlator
                            .use_session_id(&new_sid, Direction::ClientToServer, &id);
                }
            }
        }
    }

    /// A legacy HTTP+SSE stream's `endpoint` event: the URL the client will POST its messages to;
    /// the messages posted there belong to this stream's session.
    pub(super) fn legacy_endpoint(&mut self, data: &[u8]) {
        let data = String::from_utf8_lossy(data).into_owned();
        let inner = self.insp.clone();
        if inner.bus.wants_in(Interest::HTTP_REQUEST, self.id) {
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
    }

    /// A client notification: `notifications/initialized` completes the session's handshake.
    pub(super) fn mcp_client_notification(&self, method: Option<&str>) {
        if method != Some("notifications/initialized") {
            return;
        }
        if let Scope::Session(sid) = &self.scope {
            let (_, ev) = self
                .insp
                .correlator
                .with_session(sid, |s| s.initialized = true);
            self.notice_evicted(ev);
        }
    }

    /// A request in an MCP session: its id must be new in the session (`DUPLICATE_ID`), and
    /// only `initialize` and `ping` may come before `notifications/initialized`
    /// (`MCP_EARLY_REQUEST`).
    pub(super) fn mcp_request_rules(
        &mut self,
        dir: Direction,
        id: &Id,
        method: &Arc<str>,
        anomalies: &mut Vec<&'static str>,
    ) {
        let Scope::Session(sid) = &self.scope else {
            return;
        };
        let inner = self.insp.clone();
        let (used, ev) = inner.correlator.use_session_id(sid, dir, id);
        self.notice_evicted(ev);
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: dir,
            id: id.clone(),
        };
        if used && !inner.correlator.contains(&key) {
            flag(&inner, self.site(),
                Code::DuplicateId,
                Some(id),
                Some(method),
                format!("request id {id} (`{method}`) was already used in MCP session {sid}; ids must not be reused within a session"),
            );
            anomalies.push(Code::DuplicateId.as_str());
        }
        if dir == Direction::ClientToServer && !matches!(&**method, "initialize" | "ping") {
            let (early, ev) = inner
                .correlator
                .with_session(sid, |s| s.seen_start && !s.initialized);
            self.notice_evicted(ev);
            if early {
                flag(
                    &inner,
                    self.site(),
                    Code::McpEarlyRequest,
                    Some(id),
                    Some(method),
                    format!("`{method}` was sent before the client sent notifications/initialized"),
                );
                anomalies.push(Code::McpEarlyRequest.as_str());
            }
        }
    }

    /// A `tools/call` result with `isError: true` (`TOOL_ERROR`, a warning).
    pub(super) fn tool_result_rules(
        &self,
        key: &PendingKey,
        p: &Pending,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) {
        if env.tool_error && &*p.method == "tools/call" {
            flag(
                &self.insp,
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
    }
}

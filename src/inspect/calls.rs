//! Calls: each JSON-RPC message of a frame is classified, requests are registered in the
//! correlator, replies are matched to them, and every call gets its one outcome. Decides
//! `DUPLICATE_ID`, `UNMATCHED_RESPONSE`, `ID_TYPE_MISMATCH`, `MISSING_RESPONSE`,
//! `NOTIFICATION_REPLY`, `INVALID_ENVELOPE`, `NULL_ID_RESPONSE` and `UNSAFE_ID`.

use super::modern;
use super::*;

/// Where an anomaly was seen: the exchange, the scope, and the frame (direction and batch index).
#[derive(Clone, Copy)]
pub(super) struct Site<'a> {
    pub(super) exchange: u64,
    pub(super) scope: &'a Scope,
    pub(super) at: Option<(Direction, Option<u32>)>,
    /// While a message is processed: where its findings wait, so that they are published after
    /// the message itself (an observer can then pin each on the message it concerns).
    pub(super) hold: Option<&'a std::cell::RefCell<Vec<Event>>>,
}

pub(super) fn flag(
    inner: &Inner,
    site: Site<'_>,
    code: Code,
    id: Option<&Id>,
    method: Option<&Arc<str>>,
    message: String,
) {
    flag_as(inner, site, code, code.severity(), id, method, message)
}

/// Like `flag`, for the one code whose severity depends on what it found (`MCP_TOOL_DRIFT`).
pub(super) fn flag_as(
    inner: &Inner,
    site: Site<'_>,
    code: Code,
    severity: crate::events::Severity,
    id: Option<&Id>,
    method: Option<&Arc<str>>,
    message: String,
) {
    tracing::debug!(code = code.as_str(), exchange = site.exchange, scope = %site.scope, %message, "anomaly");
    if inner.bus.wants_in(Interest::ANOMALY, site.exchange) {
        let ev = Event::Anomaly(AnomalyEvent {
            ts: now_ns(),
            exchange: site.exchange,
            scope: site.scope.clone(),
            code: code.as_str(),
            severity,
            id: id.cloned(),
            method: method.cloned(),
            direction: site.at.map(|a| a.0),
            batch_index: site.at.and_then(|a| a.1),
            message,
        });
        match site.hold {
            Some(h) => h.borrow_mut().push(ev),
            None => inner.bus.publish(ev),
        }
    }
}

/// A finding on a call rpctap ends outside any message (timed out, its session gone): on the
/// frame of its request.
pub(super) fn flag_call(inner: &Inner, key: &PendingKey, p: &Pending, code: Code, msg: String) {
    let site = Site {
        exchange: p.exchange,
        scope: &key.scope,
        at: Some((key.direction, p.index)),
        hold: None,
    };
    flag(inner, site, code, Some(&key.id), Some(&p.method), msg);
}

/// Ends a call. With `defer`, the event waits there (so a reply's message event is published
/// before the outcome it causes).
/// A call's trace context with the session's negotiated version when no header named one
/// (stdio; a client that sends none): read at the call's end, so `initialize` itself has the
/// version it negotiated.
fn with_session_version(
    inner: &Inner,
    scope: &Scope,
    mut t: Arc<crate::trace::CallTrace>,
) -> Arc<crate::trace::CallTrace> {
    if t.protocol_version.is_some() {
        return t;
    }
    if let Scope::Session(sid) = scope {
        if let Some(Some(v)) = inner
            .correlator
            .peek_session(sid, |s| s.mcp.version.clone())
        {
            Arc::make_mut(&mut t).protocol_version = Some(v.to_string().into());
        }
    }
    t
}

pub(super) fn end_call(
    inner: &Inner,
    key: &PendingKey,
    p: Pending,
    outcome: Outcome,
    extra: &[&'static str],
    response_index: Option<u32>,
    defer: Option<&mut Deferred>,
) {
    super::mcp_checks::release_progress(inner, key, &p);
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
            continues: p.modern.and_then(|m| m.continues),
            task: p.task,
            context: p.context,
            trace: p.trace.map(|t| with_session_version(inner, &key.scope, t)),
        });
        match defer {
            Some(d) => d.push(ev),
            None => inner.bus.publish(ev),
        }
    }
}

/// Ends a call and each of its duplicates (same id, still pending) with the same outcome.
pub(super) fn end_with_copies(
    inner: &Inner,
    key: &PendingKey,
    p: Pending,
    outcome: &Outcome,
    response_index: Option<u32>,
    mut defer: Option<&mut Deferred>,
) {
    for one in p.each_copy() {
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
pub(super) fn end_missing(
    inner: &Inner,
    key: &PendingKey,
    p: Pending,
    reason: &str,
    anomaly: bool,
) {
    for p in p.each_copy() {
        // A `subscriptions/listen` call lives as long as its stream: the stream's end ends it,
        // which is no missing reply (an abrupt close carries none, by the specification).
        let listen = &*p.method == "subscriptions/listen";
        let reason = &*if listen {
            format!("its subscription stream ended ({reason})")
        } else {
            reason.to_string()
        };
        if p.cancelled {
            // MCP cancellation: a receiver should not answer a cancelled request, so no reply
            // is the protocol working — not the server's failure.
            let reason = format!("cancelled by its sender; no reply ({reason})");
            end_call(
                inner,
                key,
                p,
                Outcome::Cancelled { reason },
                &[],
                None,
                None,
            );
            continue;
        }
        let extra: &[&'static str] = if anomaly && !listen {
            let msg = format!("call {} `{}` got no reply: {reason}", key.id, p.method);
            flag_call(inner, key, &p, Code::MissingResponse, msg);
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

/// Ends a waiting call (and its duplicates) whose client went away before the reply: the
/// client's doing, not the server's — `abandoned`, no finding.
pub(super) fn end_abandoned(inner: &Inner, key: &PendingKey, p: Pending, reason: &str) {
    for p in p.each_copy() {
        let outcome = Outcome::Abandoned {
            reason: reason.to_string(),
        };
        end_call(inner, key, p, outcome, &[], None, None);
    }
}

impl ExchangeCtx {
    /// An empty batch (`[]`): no message, but a frame — published as an invalid message with
    /// `batch_len` 0 so the recording keeps it.
    pub(super) fn publish_empty_batch(&self, dir: Direction, raw: Bytes, sse_id: Option<String>) {
        self.publish_frame(dir, raw, sse_id, self.transport, Some(0), false);
    }

    pub(super) fn publish_unparsed(&self, dir: Direction, raw: Bytes, sse_id: Option<String>) {
        self.publish_unparsed_with(dir, raw, sse_id, self.transport);
    }

    /// A frame that was not read as messages (not JSON, or a body notifications got): published
    /// whole as an invalid message.
    pub(super) fn publish_unparsed_with(
        &self,
        dir: Direction,
        raw: Bytes,
        sse_id: Option<String>,
        transport: Transport,
    ) {
        let unparsed = serde_json::from_slice::<serde::de::IgnoredAny>(&raw).is_err();
        let raw = if !self.insp.cfg.redact.has_paths() {
            raw
        } else if unparsed {
            // Not JSON: redaction by path cannot apply, so the secrets are found in the text
            // (the line itself stays, so the finding shows what came).
            Bytes::from(self.insp.cfg.redact.text(&raw))
        } else {
            // JSON that is no message (a body notifications got): redacted as a message.
            match self.insp.cfg.redact.message(&raw) {
                Some(r) => Bytes::from(r),
                None => raw,
            }
        };
        self.publish_frame(dir, raw, sse_id, transport, None, unparsed);
    }

    /// A frame as one `invalid` message event (for whoever reads messages).
    fn publish_frame(
        &self,
        dir: Direction,
        message: Bytes,
        sse_id: Option<String>,
        transport: Transport,
        batch_len: Option<u32>,
        unparsed: bool,
    ) {
        if self.insp.bus.wants_in(Interest::MESSAGE_REST, self.id) {
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
                batch_len,
                sse_id,
                message,
                unparsed,
                binary: self.binary_frame,
            }));
        }
    }

    pub(super) fn on_envelope(
        &mut self,
        dir: Direction,
        env: Envelope,
        batch_index: Option<u32>,
        sse_id: Option<String>,
    ) {
        let t = self.transport;
        self.on_envelope_t(dir, env, batch_index, sse_id, t)
    }

    pub(super) fn on_envelope_t(
        &mut self,
        dir: Direction,
        env: Envelope,
        batch_index: Option<u32>,
        sse_id: Option<String>,
        transport: Transport,
    ) {
        self.cur = Some((dir, batch_index));
        self.holding = true;
        if dir == Direction::ClientToServer && env.method.as_deref() == Some("initialize") {
            self.await_session();
        }
        self.on_envelope_inner(dir, env, batch_index, sse_id, transport);
        self.holding = false;
        self.cur = None;
        // The message first, then its findings, then the calls it ended.
        let out = match &mut self.awaiting {
            Some(wait) => wait,
            None => {
                for ev in self.held.get_mut().drain(..) {
                    self.insp.bus.publish(ev);
                }
                for ev in self.deferred.drain(..) {
                    self.insp.bus.publish(ev);
                }
                return;
            }
        };
        out.append(self.held.get_mut());
        out.extend(self.deferred.drain(..));
    }

    pub(super) fn on_envelope_inner(
        &mut self,
        dir: Direction,
        env: Envelope,
        batch_index: Option<u32>,
        sse_id: Option<String>,
        transport: Transport,
    ) {
        let inner = self.insp.clone();
        let method: Option<Arc<str>> = env.method.clone();
        let mut target: Option<Arc<str>> = env.target.clone();
        if self.stream && target.is_none() {
            // A stream's subscriptions: an unsubscribe names its subscription, a notification
            // that carries one is attributed to it.
            target = match (&method, env.kind) {
                (Some(m), Kind::Request) => Self::unsubscribe_target(m, &env),
                (Some(_), Kind::Notification) if dir == Direction::ServerToClient => {
                    self.subscription_of(&env)
                }
                _ => None,
            };
        }
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
        if let Some(member) = env.duplicate {
            flag(&inner, self.site(),
                Code::DuplicateMember,
                env.id.as_ref(),
                method.as_ref(),
                format!(
                    "`{member}` is given more than once{}: read as the last one, as the parsers servers run on read it (others keep the first or refuse)",
                    batch_index.map(|i| format!(" (batch member {i})")).unwrap_or_default()
                ),
            );
            anomalies.push(Code::DuplicateMember.as_str());
        }

        match env.kind {
            Kind::Request if self.redelivered(dir, env.id.as_ref(), method.as_ref()) => {
                tracing::debug!(exchange = self.id, id = ?env.id, "a resumed stream replayed a request still waiting");
            }
            Kind::Request => {
                let id = env.id.clone().unwrap_or(Id::Null);
                if let Some(m) = method
                    .as_ref()
                    .filter(|m| super::a2a::is_a2a_only(m) || super::a2a::is_task_method(m))
                {
                    self.a2a_request(dir, m, &env.raw, &id, &mut target, &mut anomalies);
                }
                let (progress, mut modern) = self.mcp_request_checks(dir, &env, &mut anomalies);
                if let Some(m) = method.as_deref() {
                    self.task_request(dir, m, target.as_ref(), &id, &mut anomalies);
                    // A 2025-11-25 request asks for a task in its params: the capability the
                    // extension declares per request from 2026-07-28 on.
                    // (`task_hint`: the envelope's pass saw `params.task` as an object.)
                    if m == "tools/call" && modern.is_none() && env.task_hint {
                        modern = Some(Box::new(modern::CallMeta {
                            caps: Some(super::capability::Caps::TASKS_EXT),
                            ..Default::default()
                        }));
                    }
                }
                if target.is_none() && method.as_deref() == Some("subscriptions/listen") {
                    // A listen stream is named by its request's id, as its notifications are.
                    target = Some(Arc::from(id.to_string()));
                }
                let trace = self.call_trace(&env);
                self.register_call(
                    dir,
                    id,
                    method.clone().unwrap_or_else(|| "".into()),
                    target.clone(),
                    anomalies,
                    (progress, modern),
                    trace,
                );
            }
            Kind::Notification => {
                if target.is_none() && dir == Direction::ServerToClient {
                    // One that rides a `subscriptions/listen` stream is attributed to it.
                    target = modern::subscription_id(&env.raw);
                }
                if dir == Direction::ClientToServer {
                    self.req.notifications = self.req.notifications.saturating_add(1);
                    self.mcp_client_notification(env.method.as_deref());
                }
                self.mcp_notification_checks(dir, &env);
                self.task_notified(dir, &env);
            }
            Kind::Result | Kind::Error => {
                if dir == Direction::ClientToServer {
                    self.req.responses = self.req.responses.saturating_add(1);
                }
                let (m, t) = self.on_response(dir, &env);
                reply_method = m;
                reply_target = t;
            }
            Kind::Invalid => {
                // An invalid request that carries an id still expects a (-32600) reply, whether
                // or not its method could be read (the reply names the id, not the method).
                if dir == Direction::ClientToServer {
                    let m = method.clone().unwrap_or_else(|| Arc::from("(invalid)"));
                    let named = method.is_some();
                    if let Some(id) = env.id.clone().filter(|i| named || *i != Id::Null) {
                        self.register_call(
                            dir,
                            id,
                            m,
                            target.clone(),
                            vec![Code::InvalidEnvelope.as_str()],
                            (None, None),
                            self.trace.clone(),
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

        let wanted = if env.kind == Kind::Notification {
            Interest::NOTIFICATIONS
        } else {
            Interest::MESSAGE_REST
        };
        if inner.bus.wants_in(wanted, self.id) {
            self.emit(Event::Message(MessageEvent {
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
                binary: self.binary_frame,
            }));
        }
    }

    /// A call's trace context: its own `params._meta.traceparent` when it has one, else the
    /// exchange's (only with `--otlp`).
    fn call_trace(&mut self, env: &Envelope) -> Option<Arc<crate::trace::CallTrace>> {
        let base = self.trace.as_ref()?;
        // The span id sent upstream (`--otlp-propagate`) is the first call's: a batch's other
        // calls get spans of their own in the same trace.
        let base = match base.propagated {
            Some((t, _, sampled)) if self.trace_taken => Arc::new(crate::trace::CallTrace {
                propagated: Some((t, crate::trace::new_span_id(), sampled)),
                ..(**base).clone()
            }),
            _ => base.clone(),
        };
        self.trace_taken = true;
        Some(self.meta_trace(&base, env))
    }

    /// The exchange's trace context, or the call's own `params._meta` one (linked to the
    /// exchange's).
    fn meta_trace(
        &self,
        base: &Arc<crate::trace::CallTrace>,
        env: &Envelope,
    ) -> Arc<crate::trace::CallTrace> {
        needle!(TRACEPARENT, "traceparent");
        if TRACEPARENT.find(&env.raw).is_none() {
            return base.clone();
        }
        #[derive(serde::Deserialize)]
        struct P<'a> {
            #[serde(borrow, default)]
            params: Option<Q<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct Q<'a> {
            #[serde(borrow, rename = "_meta", default)]
            meta: Option<M<'a>>,
        }
        #[derive(serde::Deserialize)]
        struct M<'a> {
            #[serde(borrow, default)]
            traceparent: Option<std::borrow::Cow<'a, str>>,
            #[serde(borrow, default)]
            tracestate: Option<std::borrow::Cow<'a, str>>,
        }
        let m = serde_json::from_slice::<P<'_>>(&env.raw)
            .ok()
            .and_then(|p| p.params?.meta);
        let parent = m.as_ref().and_then(|m| {
            crate::trace::parse_traceparent(m.traceparent.as_deref()?, m.tracestate.as_deref())
        });
        match parent {
            Some(p) => Arc::new(crate::trace::CallTrace {
                link: base.parent.clone().filter(|b| *b != p),
                parent: Some(p),
                ..(**base).clone()
            }),
            None => base.clone(),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn register_call(
        &mut self,
        dir: Direction,
        id: Id,
        method: Arc<str>,
        target: Option<Arc<str>>,
        mut anomalies: Vec<&'static str>,
        (progress, modern): (Option<Box<str>>, Option<Box<modern::CallMeta>>),
        trace: Option<Arc<crate::trace::CallTrace>>,
    ) {
        let inner = self.insp.clone();
        self.mcp_request_rules(dir, &id, &method, &mut anomalies);
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
            copies: Vec::new(),
            index: self.cur.and_then(|c| c.1),
            progress,
            trace,
            modern,
            cancelled: false,
            task: None,
            context: self.a2a_context.take(),
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
        if dir == Direction::ClientToServer && !self.stream {
            self.req.calls.push(key);
        }
    }

    /// A request a resumed stream replays (the server sends again what followed the client's
    /// `Last-Event-ID`): when rpctap saw it on the stream that broke and its call still waits
    /// (same id, same method), it is that call delivered again, not a new call reusing the id —
    /// neither checked nor registered a second time.
    fn redelivered(&self, dir: Direction, id: Option<&Id>, method: Option<&Arc<str>>) -> bool {
        if !self.resumed || dir != Direction::ServerToClient {
            return false;
        }
        let (Some(id), Some(method)) = (id, method) else {
            return false;
        };
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: dir,
            id: id.clone(),
        };
        self.insp.correlator.waits(&key, method)
    }

    /// Matches a response; returns the method and target of the call it answered.
    pub(super) fn on_response(
        &mut self,
        dir: Direction,
        env: &Envelope,
    ) -> (Option<Arc<str>>, Option<Arc<str>>) {
        let inner = self.insp.clone();
        let id = env.id.clone().unwrap_or(Id::Null);
        let outcome = match env.kind {
            Kind::Error => Outcome::Error {
                code: env.error_code.unwrap_or(0),
                message: env.error_message.clone().unwrap_or_default(),
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
        if dir == Direction::ServerToClient && self.a2a_stream_goes_on(&key, env) {
            return (None, None);
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
        if self.after_a2a_stream(&id) {
            flag(
                &inner,
                self.site(),
                Code::A2aTaskState,
                Some(&id),
                None,
                format!("an event on the stream of call {id} after its last one (a message, or a task ended or waiting, closes an A2A stream)"),
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

    /// An event of an A2A streaming call that is not its last (`a2a::closes_stream`): the call
    /// stays open, and is remembered so that a stream cut before its last event still ends it.
    /// Its last event ends it as any reply does, and is remembered too: a response after it is
    /// `A2A_TASK_STATE`, not a reply to no call.
    fn a2a_stream_goes_on(&mut self, key: &PendingKey, env: &Envelope) -> bool {
        if !self.a2a_streaming || env.kind != Kind::Result {
            return false;
        }
        let Some((method, asked)) = self.insp.correlator.pending_call(key) else {
            return false;
        };
        if !super::a2a::is_stream_method(&method) {
            return false;
        }
        let result = env.result();
        let closes = result.is_none_or(super::a2a::closes_stream);
        let at = match self.a2a_streams.iter().position(|s| &s.key == key) {
            Some(i) => i,
            None => {
                self.a2a_streams.push(A2aStream {
                    key: key.clone(),
                    closed: false,
                    found: Vec::new(),
                    context: None,
                });
                self.a2a_streams.len() - 1
            }
        };
        self.a2a_streams[at].closed = closes;
        if !closes {
            // Its findings wait for the call's end, which carries them.
            if let Some(r) = result {
                let mut found = std::mem::take(&mut self.a2a_streams[at].found);
                let context = self.a2a_result(key, &method, asked.as_deref(), r, &mut found);
                let s = &mut self.a2a_streams[at];
                s.found = found;
                s.context = context.or(s.context.take());
            }
        }
        !closes
    }

    /// A response with the id of an A2A streaming call of this exchange whose last event passed.
    fn after_a2a_stream(&self, id: &Id) -> bool {
        self.a2a_streams.iter().any(|s| s.closed && &s.key.id == id)
    }

    /// The exchange ended: an A2A streaming call still open had events (the client got
    /// answers), so it ends answered, at the stream's end.
    pub(super) fn end_a2a_streams(&mut self) {
        for s in std::mem::take(&mut self.a2a_streams) {
            if let Some(mut p) = self.insp.correlator.take(&s.key) {
                p.context = s.context.or(p.context);
                if s.key.direction == Direction::ClientToServer && p.exchange == self.id {
                    self.req.answered += 1;
                }
                end_call(&self.insp, &s.key, p, Outcome::Result, &s.found, None, None);
            }
        }
    }

    pub(super) fn finish_reply(
        &mut self,
        key: &PendingKey,
        mut p: Pending,
        mut outcome: Outcome,
        env: &Envelope,
        mut extra: Vec<&'static str>,
    ) {
        let inner = self.insp.clone();
        // One of this exchange's own calls (those `register_call` listed in `req.calls`).
        if key.direction == Direction::ClientToServer && p.exchange == self.id && !self.stream {
            self.req.answered += 1;
        }
        // A round that asks for input is no tool result (nor its output), nor is a task handle.
        let input = self.input_required(key, &p, env, &mut extra);
        let handle = if input {
            None
        } else {
            self.task_handle(key, env)
                .or_else(|| self.a2a_task_handle(key, &p, env))
        };
        if input {
            outcome = Outcome::InputRequired;
        } else if handle.is_none() {
            self.tool_result_rules(key, &p, env, &mut extra);
        }
        self.mcp_reply_rules(key, &p, env, input, &mut extra);
        if self.a2a_seen
            && super::a2a::is_method(&p.method)
            && key.direction == Direction::ClientToServer
        {
            if let Some(s) = self.a2a_streams.iter_mut().find(|s| &s.key == key) {
                extra.append(&mut s.found);
                p.context = s.context.take().or(p.context.take());
            }
            if env.kind == Kind::Result {
                if let Some(r) = env.result() {
                    let context =
                        self.a2a_result(key, &p.method, p.target.as_deref(), r, &mut extra);
                    p.context = context.or(p.context.take());
                }
            }
            let streamed = matches!(self.mode, ReplyMode::Sse { .. });
            let ok = env.kind == Kind::Result;
            self.a2a_card_rule(key, &p.method, streamed, ok, &mut extra);
        }
        self.error_code_rule(key, &p, env, &mut extra);
        self.subscription_reply(&mut p, env);
        self.reply_status_rules(key, &p, env.kind == Kind::Error, &mut extra);
        if let Some(h) = handle {
            // The call lives on as its task: its event comes when the task ends.
            match self.task_created(key, p, h, &mut extra) {
                None => return,
                Some(back) => p = back,
            }
        }
        let task_end = self.task_reply(key, &mut p, env, &mut extra);
        end_call(
            &inner,
            key,
            p,
            outcome,
            &extra,
            self.cur.and_then(|c| c.1),
            Some(&mut self.deferred),
        );
        for (k, c, outcome) in task_end {
            end_call(&inner, &k, c, outcome, &[], None, Some(&mut self.deferred));
        }
    }

    pub(super) fn notice_evicted(&self, evicted: Option<Arc<str>>) {
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

    /// A POST of only notifications answered with a body (`NOTIFICATION_REPLY`; the other case,
    /// a reply whose id is no call of the request, is in `on_response`). The body is kept
    /// unparsed. A server that refuses the POST answers an HTTP error whose body may be an
    /// id-less JSON-RPC error (Streamable HTTP, "Sending Messages to the Server"): that is no
    /// reply to a notification, and `HTTP_STATUS` already names the status.
    pub(super) fn body_reply_to_notifications(&mut self, body: Bytes) {
        if (200..300).contains(&self.status) {
            flag(
                &self.insp,
                self.site(),
                Code::NotificationReply,
                None,
                None,
                "a POST of only notifications was answered with a body; notifications get no reply"
                    .into(),
            );
        }
        self.reply_frames += 1;
        self.publish_unparsed(Direction::ServerToClient, body, None);
    }
}

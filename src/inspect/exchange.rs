//! One HTTP exchange's lifecycle as the inspector sees it: the request body, the response head,
//! the reply's body chunks (a JSON body gathered whole, SSE events one by one), rpctap's own
//! answers, refusals, and the end — where calls still waiting end as missing. Decides
//! `PARSE_ERROR`, `INVALID_BATCH_REPLY`, `NOT_INSPECTED` and `HTTP_STATUS`.

use super::modern;
use super::*;

/// The rules' enforcement on a stream sees the inspector through this.
impl crate::limit::enforce::Inspects for ExchangeCtx {
    fn line(&mut self, dir: Direction, msg: Bytes) {
        ExchangeCtx::line(self, dir, msg)
    }
    fn refuse(&mut self, id: Option<&Id>, method: &str, r: &crate::limit::Refusal, shadow: bool) {
        ExchangeCtx::refuse(self, id, method, r, shadow)
    }
}

/// The rule a refusal of a line or message too large to inspect is recorded under (while rules
/// are in force nothing runs undecided).
pub const TOO_LARGE_RULE: &str = "max-frame-bytes";

/// How the flag on such a line says it was refused (`check` reads it back).
pub const REFUSED_TOO_LARGE: &str =
    "refused, not passed on (rules are in force and none could be applied to it)";

impl ExchangeCtx {
    pub(super) fn site(&self) -> Site<'_> {
        Site {
            exchange: self.id,
            scope: &self.scope,
            at: self.cur,
            hold: self.holding.then_some(&self.held),
        }
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
                // Said of the request's side (a test run tells the client's doing from the
                // server's by it).
                let was = self.cur.replace((Direction::ClientToServer, None));
                flag(
                    &self.insp,
                    self.site(),
                    Code::ParseError,
                    None,
                    None,
                    format!("request body is not valid JSON: {why}"),
                );
                self.cur = was;
            }
            Body::Single(env) => {
                self.stateless_scope(&env);
                self.on_envelope(Direction::ClientToServer, env, None, None)
            }
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
        if let Some(f) = &refusal.fault {
            // An injected error: on the record as the fault it is, not as a rate limit.
            let (code, status) = match &f.action {
                crate::flow::fault::Action::Error { code, status, .. } => (*code, *status),
                _ => (refusal.code, refusal.status),
            };
            let detail = match status {
                None if f.direction == Direction::ServerToClient => format!(
                    "answered by rpctap with error {code} in the client's place; the server's \
                     request never reached the client"
                ),
                Some(s) => {
                    format!("answered by rpctap with HTTP {s}; the call never reached the server")
                }
                None => format!(
                    "answered by rpctap with error {code}; the call never reached the server"
                ),
            };
            let message =
                id.map(|id| Bytes::from(crate::limit::enforce::refusal_reply(id, refusal)));
            self.fault(f, id, Some(method), message, detail);
            if let (Some(id), false) = (id, shadow) {
                self.end_refused_in(id, &refusal.rule, f.direction);
            }
            return;
        } else if inner.bus.wants_in(Interest::REFUSAL, self.id) {
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
        if let (Some(id), false) = (id, shadow) {
            self.end_refused(id, &refusal.rule);
        }
    }

    /// A call rpctap answered itself (a refusal, an injected error) ends so.
    pub fn end_refused(&mut self, id: &Id, rule: &str) {
        self.end_refused_in(id, rule, Direction::ClientToServer)
    }

    /// A call of direction `dir` (a server's request for `ServerToClient`: answered by rpctap in
    /// the client's place) rpctap answered itself ends so.
    pub fn end_refused_in(&mut self, id: &Id, rule: &str, dir: Direction) {
        let inner = self.insp.clone();
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: dir,
            id: id.clone(),
        };
        if let Some(p) = inner.correlator.take(&key) {
            end_call(
                &inner,
                &key,
                p,
                Outcome::Refused {
                    rule: rule.to_string(),
                },
                &[],
                None,
                None,
            );
        }
        if let Some(pos) = self.req.calls.iter().position(|k| k == &key) {
            self.req.calls.remove(pos);
        }
    }

    /// The exchange's scope as the filter language reads it (`session:ID`, `exchange:N`).
    pub fn scope_text(&self) -> String {
        self.scope.to_string()
    }

    /// A `[[fault]]` rule acted on this exchange's call `id` (`message`: the frame it sent the
    /// client in the server's place, if it made one).
    pub fn fault(
        &mut self,
        f: &crate::flow::fault::Fired,
        id: Option<&Id>,
        method: Option<&str>,
        message: Option<Bytes>,
        detail: String,
    ) {
        let server_call = f.direction == Direction::ServerToClient;
        self.injected(
            (f.rule.clone(), f.action.name()),
            id,
            method,
            message,
            detail,
            server_call,
        );
    }

    /// The dashboard's user decided a held message (`crate::flow::intercept`): recorded as injected
    /// under the rule `intercept`, whatever the verdict (a timeout too).
    pub fn intercepted(
        &mut self,
        d: &crate::flow::intercept::Decision,
        direction: crate::events::Direction,
        id: Option<&Id>,
        method: Option<&str>,
    ) {
        self.injected(
            (crate::flow::intercept::RULE.into(), d.action()),
            id,
            method.filter(|m| !m.is_empty()),
            d.message(),
            d.detail(direction),
            false,
        );
    }

    /// Something rpctap did on purpose to this exchange's traffic (`rule`: the fault rule's
    /// name, or `intercept`), published as a fault event.
    /// `server_call`: the call was a server's request (its id in the server's id space).
    pub fn injected(
        &mut self,
        (rule, action): (std::sync::Arc<str>, &'static str),
        id: Option<&Id>,
        method: Option<&str>,
        message: Option<Bytes>,
        detail: String,
        server_call: bool,
    ) {
        if server_call && matches!(action, "malformed" | "wrong_id") {
            self.req.rewritten = true;
        }
        if action == "task" {
            super::tasks::fault_shown(&self.insp, message.as_deref());
        }
        let inner = &self.insp;
        if inner.bus.wants_in(Interest::FAULT, self.id) {
            inner.bus.publish(Event::Fault(crate::events::FaultEvent {
                ts: now_ns(),
                exchange: self.id,
                scope: self.scope.clone(),
                injected: rule,
                action,
                method: method.map(Into::into),
                id: id.cloned(),
                message,
                detail,
                direction: server_call.then_some(Direction::ServerToClient),
            }));
        }
    }

    /// A fault event read back from a recording, published again as it was.
    pub fn replay_fault(&mut self, f: &crate::events::FaultEvent) {
        if f.direction == Some(Direction::ServerToClient)
            && matches!(f.action, "malformed" | "wrong_id")
        {
            self.req.rewritten = true;
        }
        if f.action == "task" {
            super::tasks::fault_shown(&self.insp, f.message.as_deref());
        }
        if self.insp.bus.wants_in(Interest::FAULT, self.id) {
            self.insp.bus.publish(Event::Fault(f.clone()));
        }
    }

    /// The response's status line and headers arrived.
    pub fn response_head(&mut self, meta: &ResponseMeta<'_>) {
        let ResponseMeta {
            status,
            content_type,
            session,
            content_length,
            www_authenticate,
            headers,
        } = *meta;
        self.status = status;
        self.settle_session(session);
        let inner = self.insp.clone();
        if inner.bus.wants_in(Interest::HTTP_STATUS, self.id) {
            inner.bus.publish(Event::Http(HttpEvent::Response {
                headers: headers
                    .filter(|_| inner.bus.wants_in(Interest::HTTP_HEADERS, self.id))
                    .map(|h| inner.cfg.redact.headers(h))
                    .unwrap_or_default(),
                ts: now_ns(),
                exchange: self.id,
                status,
                content_type: content_type.map(|c| text_of(c, CONTENT_TYPES)),
                local: None,
            }));
        }
        self.mcp_session_header(session);
        self.mcp_response_head(status, www_authenticate);
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
            ReplyMode::Json {
                buf: Default::default(),
                overflow,
            }
        } else if status == 200
            && contains_ignore_case(ct, "json")
            && self
                .get_path
                .as_deref()
                .is_some_and(super::a2a::is_card_path)
        {
            let overflow = content_length.is_some_and(|n| n > inner.cfg.max_frame_bytes as u64);
            ReplyMode::Card {
                buf: Default::default(),
                overflow,
            }
        } else {
            ReplyMode::Ignore
        };
        if self.is_get_stream || !self.req.is_rpc {
            return;
        }
        let notification_only = self.req.calls.is_empty()
            && !self.req.parse_error
            && !self.req.rewritten
            && (self.req.notifications > 0 || self.req.responses > 0);
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
        self.response_chunk(chunk, None);
    }

    /// A chunk of the response body as it is forwarded: a JSON reply keeps it without a copy
    /// when it is the reply's only one.
    pub fn response_bytes(&mut self, chunk: &Bytes) {
        self.response_chunk(chunk, Some(chunk));
    }

    fn response_chunk(&mut self, chunk: &[u8], shared: Option<&Bytes>) {
        self.bytes += chunk.len() as u64;
        let max = self.insp.cfg.max_frame_bytes;
        match &mut self.mode {
            ReplyMode::Ignore => {}
            ReplyMode::Json { buf, overflow } | ReplyMode::Card { buf, overflow } => {
                if *overflow {
                    return;
                }
                if buf.len() + chunk.len() > max || buf.copied_capacity() > 2 * max {
                    *overflow = true;
                    *buf = Default::default();
                } else {
                    match shared {
                        Some(b) => buf.push(b.clone()),
                        None => buf.push_slice(chunk),
                    }
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
            ReplyMode::Json { buf, overflow } | ReplyMode::Card { buf, overflow } => {
                *overflow = true;
                *buf = Default::default();
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
        self.settle_session(None);
        let inner = self.insp.clone();
        if inner.bus.wants_in(Interest::HTTP_STATUS, self.id) {
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

    pub(super) fn on_sse_event(&mut self, ev: sse::SseEvent) {
        if ev.oversized {
            self.reply_not_inspected();
            return;
        }
        self.sse_id_seen |= ev.id.is_some();
        match ev.kind() {
            "message" => {}
            "endpoint" if self.is_get_stream => {
                self.legacy_endpoint(&ev.data);
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
    pub(super) fn reply_body(&mut self, body: Bytes, transport: Transport, sse_id: Option<String>) {
        self.reply_frames += 1;
        let inner = self.insp.clone();
        match rpc::parse_body(&body) {
            Body::ParseError(why) => {
                self.publish_unparsed_with(Direction::ServerToClient, body, sse_id, transport);
                let was = self.cur.replace((Direction::ServerToClient, None));
                flag(
                    &inner,
                    self.site(),
                    Code::ParseError,
                    None,
                    None,
                    format!("reply is not valid JSON: {why}"),
                );
                self.cur = was;
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

    /// One line of a stream (`begin_stream`), without its newline, or one text message of a
    /// WebSocket (`begin_ws`): a message or a batch in direction `dir`. One that is not JSON is
    /// flagged `PARSE_ERROR` with its first 200 characters, and those after it are inspected as
    /// usual. Blank lines are skipped.
    pub fn line(&mut self, dir: Direction, line: Bytes) {
        let t = self.transport;
        self.bytes += line.len() as u64 + 1;
        let text = line.strip_suffix(b"\r").unwrap_or(&line);
        if text.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        if dir == Direction::ServerToClient {
            self.reply_frames += 1;
        }
        let inner = self.insp.clone();
        match rpc::parse_body(&line) {
            Body::ParseError(why) => {
                // The finding quotes the line as the recording keeps it: secrets inside it
                // redacted (`Redactor::text`) when redaction is on.
                let shown = if inner.cfg.redact.has_paths() {
                    std::borrow::Cow::Owned(inner.cfg.redact.text(text))
                } else {
                    std::borrow::Cow::Borrowed(text)
                };
                let preview: String = String::from_utf8_lossy(&shown).chars().take(200).collect();
                self.cur = Some((dir, None));
                self.publish_unparsed_with(dir, line, None, t);
                let side = match (dir, t) {
                    (Direction::ServerToClient, Transport::Ws) => {
                        "a WebSocket message from the server"
                    }
                    (Direction::ClientToServer, Transport::Ws) => {
                        "a WebSocket message from the client"
                    }
                    (Direction::ServerToClient, _) => "a line on the server's stdout",
                    (Direction::ClientToServer, _) => "a line on the client's stdin",
                };
                flag(
                    &inner,
                    self.site(),
                    Code::ParseError,
                    None,
                    None,
                    format!("{side} is not JSON ({why}): {preview:?}"),
                );
                self.cur = None;
            }
            Body::Single(env) => {
                if dir == Direction::ClientToServer && t == Transport::Ws && !self.ws_decided {
                    self.ws_decided = true;
                    self.ws_session(&env);
                }
                if dir == Direction::ClientToServer && env.method.as_deref() == Some("initialize") {
                    // An MCP session's lifecycle rules apply from its `initialize` on.
                    if let Scope::Session(sid) = &self.scope {
                        let ((), ev) = inner.correlator.with_session(sid, |s| s.seen_start = true);
                        self.notice_evicted(ev);
                    }
                }
                self.on_envelope_t(dir, env, None, None, t);
            }
            Body::Batch(members) if members.is_empty() => {
                self.cur = Some((dir, None));
                flag(
                    &inner,
                    self.site(),
                    Code::InvalidEnvelope,
                    None,
                    None,
                    "an empty array is not a valid message".into(),
                );
                self.cur = None;
                self.publish_empty_batch(dir, line, None);
            }
            Body::Batch(members) => {
                self.batch_len = Some(members.len() as u32);
                for (i, env) in members.into_iter().enumerate() {
                    self.on_envelope_t(dir, env, Some(i as u32), None, t);
                }
                self.batch_len = None;
            }
        }
    }

    /// A WebSocket connection whose first request is MCP's (`initialize`, or a 2026-07-28
    /// request naming its protocol version) is an MCP session from there on: one scope named
    /// `ws-N` after its upgrade exchange, to which the session rules apply as to stdio's.
    /// Other JSON-RPC over WebSocket (`eth_subscribe`…) keeps the connection's plain scope, where
    /// ids may be reused once answered.
    fn ws_session(&mut self, env: &Envelope) {
        let mcp = env.kind == Kind::Request
            && (env.method.as_deref() == Some("initialize")
                || modern::sender(&env.raw).is_some_and(|s| s.version.is_some()));
        if mcp {
            self.scope = Scope::Session(format!("ws-{}", self.id).into());
        }
    }

    /// A stream's line (a WebSocket's message) longer than the inspection cap was passed on
    /// uninspected.
    pub fn line_not_inspected(&mut self, dir: Direction, len: u64) {
        let head = self.long[dir_index(dir)].take().map(|s| s.finish());
        self.line_not_inspected_head(dir, len, head, false);
    }

    /// A line (or WebSocket message) too large to inspect that was *not* passed on, because
    /// rules are in force and none could be applied to it: flagged as such, and a request in it
    /// counted and ended as refused (rule [`TOO_LARGE_RULE`]). Its id, when it is a request
    /// with one: the transport answers it.
    pub fn line_refused_too_large(&mut self, dir: Direction, len: u64) -> Option<Id> {
        let head = self.long[dir_index(dir)].take().map(|s| s.finish());
        let call = head
            .as_ref()
            .filter(|h| !h.result && !h.error)
            .and_then(|h| Some((h.id()?, h.method()?.to_string())));
        self.line_not_inspected_head(dir, len, head, true);
        let (id, method) = call?;
        let refusal = crate::limit::Refusal {
            rule: TOO_LARGE_RULE.into(),
            retry_after: std::time::Duration::ZERO,
            status: None,
            code: crate::limit::DEFAULT_CODE,
            limit: 0,
            fault: None,
        };
        self.refuse(Some(&id), &method, &refusal, false);
        Some(id)
    }

    /// Bytes of a line already past the inspection cap, as they are passed on: read for the
    /// line's envelope (`rpc::head`), never kept.
    pub fn line_spill(&mut self, dir: Direction, bytes: &[u8]) {
        self.long[dir_index(dir)]
            .get_or_insert_with(Default::default)
            .feed(bytes);
    }

    /// A line too large to inspect, and what its envelope said: a request with an id is
    /// counted as a call (waiting for its reply), a reply with an id ends its call — with a
    /// result, or its error's code — so neither is lost or left to end missing.
    /// `refused`: it was not passed on ([`Self::line_refused_too_large`]), and the flag says so.
    pub(crate) fn line_not_inspected_head(
        &mut self,
        dir: Direction,
        len: u64,
        head: Option<crate::rpc::head::FrameHead>,
        refused: bool,
    ) {
        self.bytes += len + 1;
        let what = if self.transport == Transport::Ws {
            "a message"
        } else {
            "a line"
        };
        let id = head.as_ref().and_then(|h| h.id());
        let method: Option<Arc<str>> = head.as_ref().and_then(|h| h.method()).map(Into::into);
        let said = head.as_ref().and_then(envelope_note).unwrap_or_default();
        self.cur = Some((dir, None));
        flag(
            &self.insp,
            self.site(),
            Code::NotInspected,
            id.as_ref(),
            method.as_ref(),
            format!(
                "{what} of {len} bytes, larger than the inspection cap ({} bytes): {}{said}",
                self.insp.cfg.max_frame_bytes,
                if refused {
                    REFUSED_TOO_LARGE
                } else {
                    "passed on, not inspected"
                }
            ),
        );
        self.cur = None;
        let (Some(h), Some(id)) = (head, id) else {
            return;
        };
        let not_inspected = Code::NotInspected.as_str();
        match method {
            Some(m) if !h.result && !h.error => {
                self.register_call(dir, id, m, None, vec![not_inspected], (None, None), None);
            }
            None if h.result || h.error => {
                let inner = self.insp.clone();
                let outcome = match h.error() {
                    Some((code, message)) => Outcome::Error {
                        code,
                        message: message.into(),
                    },
                    None if h.error => Outcome::Error {
                        code: 0,
                        message: "(in a reply too large to inspect)".into(),
                    },
                    None => Outcome::Result,
                };
                let key = PendingKey {
                    scope: self.scope.clone(),
                    direction: dir.reverse(),
                    id,
                };
                if let Some(p) = inner.correlator.take(&key) {
                    if key.direction == Direction::ClientToServer
                        && p.exchange == self.id
                        && !self.stream
                    {
                        self.req.answered += 1;
                    }
                    super::calls::end_call(&inner, &key, p, outcome, &[not_inspected], None, None);
                }
            }
            _ => {}
        }
    }

    /// A WebSocket's binary message: JSON-RPC when it is UTF-8 JSON (some servers — ganache with
    /// `--server.wsBinary` — answer every call so; its message events are marked `binary`),
    /// else shown as a binary message and not parsed.
    pub fn binary_message(&mut self, dir: Direction, data: Bytes) {
        let json = std::str::from_utf8(&data).is_ok()
            && !matches!(rpc::parse_body(&data), Body::ParseError(_));
        if json {
            self.binary_frame = true;
            self.line(dir, data);
            self.binary_frame = false;
        } else {
            self.binary(dir, data.len() as u64);
        }
    }

    /// A WebSocket's binary message of `len` bytes: shown (an event for whoever reads
    /// messages), not parsed.
    pub fn binary(&mut self, dir: Direction, len: u64) {
        self.bytes += len;
        if self.insp.bus.wants_in(Interest::NOTIFICATIONS, self.id) {
            self.insp
                .bus
                .publish(Event::Http(crate::events::HttpEvent::Binary {
                    ts: now_ns(),
                    exchange: self.id,
                    direction: dir,
                    len,
                }));
        }
    }

    /// Something of the stream was passed on without being inspected, and why.
    pub fn not_inspected(&mut self, dir: Direction, why: String) {
        self.cur = Some((dir, None));
        flag(&self.insp, self.site(), Code::NotInspected, None, None, why);
        self.cur = None;
    }

    /// The stream's framing broke in direction `dir` (a WebSocket's bytes are not RFC 6455):
    /// flagged `PARSE_ERROR`; what follows that way is passed on uninspected.
    pub fn framing_error(&mut self, dir: Direction, why: &str) {
        self.framing_error_said(
            dir,
            format!("WebSocket framing broke ({why}): the rest of this direction is passed on uninspected"),
        );
    }

    /// Offline: a recorded framing error, said again as it was.
    pub fn framing_error_said(&mut self, dir: Direction, message: String) {
        self.cur = Some((dir, None));
        flag(
            &self.insp,
            self.site(),
            Code::ParseError,
            None,
            None,
            message,
        );
        self.cur = None;
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
        if self.sse_id_seen {
            self.removed_sse_id();
        }
        self.settle_session(None);
        let inner = self.insp.clone();
        if self.stream {
            // The stream is the session: what is still pending (both ways) ends here, each call
            // naming the side that left it unanswered.
            let why = reason.describe();
            let client_left =
                format!("the client never answered it before the session ended ({why})");
            for (k, p) in inner.correlator.drain_scope(&self.scope) {
                let why = match k.direction {
                    Direction::ClientToServer => &*why,
                    Direction::ServerToClient => &client_left,
                };
                end_missing(&inner, &k, p, why, true);
            }
            if let Scope::Session(sid) = &self.scope {
                inner.end_session(sid, &why);
            }
        }
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
                        self.body_reply_to_notifications(buf.into_bytes());
                    } else {
                        self.reply_body(buf.into_bytes(), Transport::Json, None);
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
            ReplyMode::Card { buf, overflow } => {
                // Offline no body comes (the recording's `agent_card` line stands for it).
                if !overflow && !buf.is_empty() && matches!(reason, EndReason::Complete) {
                    let body = buf.into_bytes();
                    if let (Ok(card), Some(path)) =
                        (std::str::from_utf8(&body), self.get_path.clone())
                    {
                        self.agent_card(&path, card);
                    }
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
                inner.end_session(sid, "DELETE");
            }
        }
        self.end_a2a_streams();
        let parked =
            self.status == 202 && matches!(self.scope, Scope::Session(_)) && self.reply_frames == 0;
        let calls = std::mem::take(&mut self.req.calls);
        // Every call answered here (the common case): none is left to look for.
        if !parked && self.req.answered != calls.len() {
            let why = match (&reason, self.status) {
                (EndReason::Complete, s) if self.reply_frames == 0 => {
                    format!("HTTP {s} with no JSON-RPC reply")
                }
                (EndReason::Complete, _) => "the reply ended without it".to_string(),
                (r, _) => r.describe().into_owned(),
            };
            for k in &calls {
                if let Some(p) = inner.correlator.remove_all(k) {
                    if self.reply_frames == 0
                        && !(200..300).contains(&self.status)
                        && self.status != 0
                    {
                        let rejected = Outcome::Rejected {
                            status: self.status,
                        };
                        end_with_copies(&inner, k, p, &rejected, None, None);
                    } else if matches!(reason, EndReason::ClientGone) && !p.cancelled {
                        super::calls::end_abandoned(&inner, k, p, &why);
                    } else {
                        end_missing(&inner, k, p, &why, true);
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

impl ExchangeCtx {
    /// A reply to a client's call carried by a status other than 200 (`HTTP_STATUS`, a warning;
    /// the other case — notifications answered other than 202/204 — is in `response_head`).
    pub(super) fn reply_status_rules(
        &self,
        key: &PendingKey,
        p: &Pending,
        rejected: bool,
        extra: &mut Vec<&'static str>,
    ) {
        // From 2026-07-28 a server answers a request it rejects (a header that disagrees with
        // the body, a tampered requestState, a request without its `_meta`: "Server
        // Validation") with 400 — an unknown method with 404 — and the JSON-RPC error in the
        // body, as the specification says. The request is 2026-07-28's by its own `_meta` or,
        // when that is what the server rejected, by its `MCP-Protocol-Version` header.
        let header_modern = || {
            self.mcp_hdr
                .as_ref()
                .and_then(|h| h.version.as_deref())
                .is_some_and(|v| v >= super::modern::MODERN)
        };
        let modern_rejection = (400..500).contains(&self.status)
            && rejected
            && (self.sender_is_modern() || header_modern());
        if self.status != 200
            && self.status != 0
            && !self.is_get_stream
            && key.direction == Direction::ClientToServer
            && !modern_rejection
        {
            flag(
                &self.insp,
                self.site(),
                Code::HttpStatus,
                Some(&key.id),
                Some(&p.method),
                format!("a JSON-RPC reply carried by HTTP {}, not 200", self.status),
            );
            extra.push(Code::HttpStatus.as_str());
        }
    }
}

fn dir_index(dir: Direction) -> usize {
    usize::from(dir == Direction::ServerToClient)
}

/// What a too-large line's envelope said, as the end of its `NOT_INSPECTED` message:
/// ` (its envelope: {...})` with its id, method, and whether it is a result or an error (code and
/// message) — read back by `check` ([`envelope_from_note`]). None when nothing useful was read.
fn envelope_note(h: &crate::rpc::head::FrameHead) -> Option<String> {
    let id = h.id.as_deref()?;
    let mut v = format!("{{\"id\":{id}");
    if let Some(m) = &h.method {
        v.push_str(&format!(",\"method\":{m}"));
    }
    if h.result {
        v.push_str(",\"result\":true");
    }
    if h.error {
        v.push_str(&format!(
            ",\"error\":{{\"code\":{},\"message\":{}}}",
            h.code.as_deref().unwrap_or("null"),
            h.message.as_deref().unwrap_or("null")
        ));
    }
    v.push('}');
    // Only what reads back as JSON (the frame may not have been).
    serde_json::from_str::<serde_json::Value>(&v).ok()?;
    Some(format!(" (its envelope: {v})"))
}

/// The envelope a recorded `NOT_INSPECTED` message names (see [`envelope_note`]).
pub(crate) fn envelope_from_note(message: &str) -> Option<crate::rpc::head::FrameHead> {
    let (_, rest) = message.rsplit_once(" (its envelope: ")?;
    let v: serde_json::Value = serde_json::from_str(rest.strip_suffix(')')?).ok()?;
    let raw = |v: Option<&serde_json::Value>| v.filter(|v| !v.is_null()).map(|v| v.to_string());
    let error = v.get("error");
    Some(crate::rpc::head::FrameHead {
        id: v.get("id").map(|i| i.to_string()),
        method: raw(v.get("method")),
        result: v.get("result").is_some(),
        error: error.is_some(),
        code: raw(error.and_then(|e| e.get("code"))),
        message: raw(error.and_then(|e| e.get("message"))),
    })
}

//! The exchange pipeline: one client request in, one reply out.
//!
//! [`Proxy::handle`] runs the phases in order, each a function of its own (pingora's
//! request_filter / upstream_peer / response_filter are the model):
//! 1. **request** (`request_filter`) — a JSON-RPC POST body (JSON or no content type) is read
//!    ahead up to the inspection cap, parsed once, summarised for the proxy's own replies and
//!    handed to the inspector, which observes; the rate limits decide per call. A larger body
//!    streams through uninspected after what was read. Any other body streams through untouched.
//! 2. **upstream request** (`upstream_request`) — hop-by-hop headers removed, `Host` rewritten
//!    (unless `preserve_host`), `X-Forwarded-For`/`-Proto` added.
//! 3. **upstream** (in `handle`, `upstream_outcome`) — the lane (a whole request on rpctap's own
//!    client leg, `lean`; the rest on a hyper connection) or the pool; unreachable gives
//!    502, too slow 504, with a JSON-RPC error per call when the request held calls
//!    (`error_reply`).
//! 4. **response** (`response_filter`) — hop-by-hop headers removed; the inspector learns
//!    status, content type and `Mcp-Session-Id`; each body chunk goes to the client as it
//!    arrives, the inspector reading a copy first (SSE events one by one, JSON bodies whole).
//! 5. **done** — in the body: it ended, failed, or the client left; the inspector ends the
//!    exchange (calls still waiting end as missing, with why).

pub mod body;
pub mod faults;
pub mod headers;
pub mod intercept;
pub mod lean;
pub mod limits;
pub mod upstream;

use crate::inspect::{ExchangeCtx, Inspector, RequestMeta, ResponseMeta};
use crate::locks::Shared as _;
use crate::rpc::own::What;
use crate::rpc::Id;
use body::{ClientBody, ClientBodyError, ForwardBody, ReplySource, TeeBody, UpstreamBody};
use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::BodyExt;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Validated proxy settings.
#[derive(Clone, Debug)]
pub struct ProxyOptions {
    pub upstream: Uri,
    pub preserve_host: bool,
    pub upstream_insecure: bool,
    pub connect_timeout: Duration,
    /// How long to wait for the upstream's response headers.
    pub upstream_timeout: Duration,
    /// Most upstream connections kept between requests (by the client connections that made
    /// them); idle client connections beyond it hold none.
    pub upstream_idle_max: usize,
    /// A kept upstream connection unused for this long is closed instead of reused.
    pub upstream_idle_timeout: Duration,
    /// A request body that brings nothing for this long ends the exchange (`408`).
    pub body_timeout: Duration,
    /// How long the dashboard's intercept holds a message without a verdict.
    pub intercept_timeout: Duration,
    /// The filter the dashboard's intercept starts with (`--intercept`).
    pub intercept: Option<String>,
    /// `--max-header-bytes`: a head hyper read (its read buffer cannot hold it to the byte) is
    /// measured again here and refused `431` past it.
    pub max_header_bytes: usize,
    /// Who may send requests at all (`serve`: Host, Origin, content type, token), checked
    /// before anything reads a request; `None` for a plain proxy, which forwards them as they
    /// come for its upstream to decide.
    pub guard: Option<Arc<crate::server::guard::Guard>>,
}

struct Inner {
    opts: ProxyOptions,
    upstream: upstream::Upstream,
    inspector: Inspector,
    /// The rate-limit rules; swapped whole on reload. A std lock: only ever held to clone the
    /// `Arc`, never across an `.await`.
    limiter: std::sync::RwLock<Arc<crate::limit::Limiter>>,
    upstream_host: Option<HeaderValue>,
    base_path: String,
    /// The dashboard's intercept (off unless it sets a filter).
    intercept: crate::flow::intercept::Intercept,
    /// Faults armed on the clients' answers to the servers' requests (`direction = "s2c"`).
    answers: Arc<faults::Answers>,
}

/// The proxy: cheap to clone, one per listener.
#[derive(Clone)]
pub struct Proxy {
    inner: Arc<Inner>,
}

/// Errors of one exchange, by where they came from.
#[derive(Debug, thiserror::Error)]
pub enum ExchangeError {
    #[error("upstream unreachable: {0}")]
    UpstreamUnreachable(String),
    #[error("upstream did not answer within {0:?}")]
    UpstreamTimeout(Duration),
    #[error("upstream broke the protocol: {0}")]
    UpstreamProtocol(&'static str),
    #[error("could not read the request from the client: {0}")]
    Downstream(String),
    #[error("the request body stalled: no data for {0:?}")]
    RequestStalled(Duration),
    #[error("could not build the upstream request: {0}")]
    Internal(String),
    #[error("refused: {0}")]
    Undecidable(&'static str),
}

impl ExchangeError {
    /// One exhaustive mapping from error to HTTP status and what rpctap answers for (its
    /// JSON-RPC code is `What::code`'s).
    fn status_and_what(&self) -> (StatusCode, What) {
        match self {
            ExchangeError::UpstreamUnreachable(_) => (StatusCode::BAD_GATEWAY, What::Unreachable),
            ExchangeError::UpstreamTimeout(_) => (StatusCode::GATEWAY_TIMEOUT, What::Timeout),
            ExchangeError::UpstreamProtocol(_) => (StatusCode::BAD_GATEWAY, What::Unreachable),
            ExchangeError::Downstream(_) => (StatusCode::BAD_REQUEST, What::BadRequest),
            ExchangeError::RequestStalled(_) => (StatusCode::REQUEST_TIMEOUT, What::BadRequest),
            ExchangeError::Internal(_) => (StatusCode::BAD_GATEWAY, What::Unreachable),
            ExchangeError::Undecidable(_) => (StatusCode::PAYLOAD_TOO_LARGE, What::BadRequest),
        }
    }
}

pub type ProxyBody = TeeBody;

/// What the proxy keeps per client connection.
pub struct ClientConn {
    peer: SocketAddr,
    /// The peer's address as text, for the inspector's events.
    peer_text: Arc<str>,
    /// The peer's address as a header value, for `X-Forwarded-For`.
    peer_ip: HeaderValue,
    /// The upstream connection of this client connection's HTTP/1 requests.
    lane: upstream::Lane,
}

impl ClientConn {
    pub fn new(peer: SocketAddr) -> Self {
        ClientConn {
            peer,
            peer_text: peer.to_string().into(),
            peer_ip: headers::ip_header(peer.ip()),
            lane: upstream::Lane::default(),
        }
    }

    /// Drives this connection's upstream connection; run it in the client connection's task
    /// for as long as that connection lives (it never resolves).
    pub async fn drive_upstream(&self) {
        self.lane.drive().await
    }
}

impl Proxy {
    pub fn new(opts: ProxyOptions, inspector: Inspector, limiter: crate::limit::Limiter) -> Self {
        Self::with_local(opts, inspector, limiter, None)
    }

    /// A proxy whose upstream is `local` (served in this process) when given.
    pub fn with_local(
        opts: ProxyOptions,
        inspector: Inspector,
        limiter: crate::limit::Limiter,
        local: Option<Arc<dyn upstream::Local>>,
    ) -> Self {
        let mut upstream = upstream::Upstream::new(
            opts.upstream.clone(),
            opts.connect_timeout,
            opts.upstream_insecure,
            opts.upstream_idle_max,
            opts.upstream_idle_timeout,
        );
        upstream.local = local;
        let upstream_host = opts
            .upstream
            .authority()
            .and_then(|a| HeaderValue::from_str(a.as_str()).ok());
        let base_path = opts.upstream.path().trim_end_matches('/').to_string();
        let intercept = crate::flow::intercept::Intercept::redacting(
            opts.intercept_timeout,
            inspector.config().redact.clone(),
        );
        Proxy {
            inner: Arc::new(Inner {
                opts,
                upstream,
                inspector,
                limiter: std::sync::RwLock::new(Arc::new(limiter)),
                upstream_host,
                base_path,
                intercept,
                answers: Default::default(),
            }),
        }
    }

    pub fn inspector(&self) -> &Inspector {
        &self.inner.inspector
    }

    /// The intercept the dashboard drives.
    pub fn intercept(&self) -> &crate::flow::intercept::Intercept {
        &self.inner.intercept
    }

    /// Connections open now, per side (client connections are counted by whoever serves them).
    pub fn connections(&self) -> &Arc<crate::observe::metrics::Connections> {
        &self.inner.upstream.conns
    }

    /// The rules in force.
    pub fn limiter(&self) -> Arc<crate::limit::Limiter> {
        self.inner.limiter.read_any().clone()
    }

    /// Replaces the rules (a reload); connections and in-flight calls are not touched.
    pub fn set_limiter(&self, l: crate::limit::Limiter) {
        *self.inner.limiter.write_any() = Arc::new(l);
    }

    /// Handles one exchange of the client connection `conn` (the proxy and that connection's
    /// state, shared by its requests: the future owns a count of it, so the server boxes this
    /// future itself, not one awaiting it). Never fails: errors become
    /// 4xx/5xx replies. The phases, each a function below but the upstream's await (kept here
    /// so its large future is not carried twice): `request_filter` (read and inspect the
    /// request, apply the rate limits), `upstream_request` (the request as the upstream gets
    /// it), the send with its time limit (`upstream_outcome`), `response_filter` (the response
    /// head, the teed body).
    ///
    /// Not an `async fn`: what needs no await (the request's head read, the exchange begun) is
    /// done before the future is made, so the request is not carried in it, and the async
    /// block below uses what it captures in place (an `async fn` keeps a second copy of each
    /// argument). The phases between the awaits are scoped so that what one needs is not kept
    /// through the next await: a generator's state holds every value live across two awaits
    /// side by side, and this future is moved several times per call.
    pub fn handle(
        conn: Arc<(Proxy, ClientConn)>,
        req: Request<crate::server::RequestBody>,
    ) -> impl std::future::Future<Output = Response<ProxyBody>> + Send + 'static {
        use futures_util::future::Either;
        if req.body().read_by_hyper()
            && req.version() <= http::Version::HTTP_11
            && headers::head_size(&req) > conn.0.inner.opts.max_header_bytes
        {
            return Either::Left(std::future::ready(conn.0.error_reply_plain(
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
                "the request head is larger than --max-header-bytes",
            )));
        }
        if let Some(guard) = &conn.0.inner.opts.guard {
            if let Err(r) = guard.check(req.method(), req.uri(), req.headers()) {
                tracing::warn!(
                    peer = %conn.1.peer,
                    status = r.status.as_u16(),
                    why = %r.why,
                    "request refused before it was read"
                );
                let mut resp = conn.0.error_reply_plain(r.status, &r.why);
                if r.status == StatusCode::UNAUTHORIZED {
                    resp.headers_mut()
                        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
                }
                return Either::Left(std::future::ready(resp));
            }
        }
        Either::Right(Self::exchange(conn, req))
    }

    fn exchange(
        conn: Arc<(Proxy, ClientConn)>,
        mut req: Request<crate::server::RequestBody>,
    ) -> impl std::future::Future<Output = Response<ProxyBody>> + Send + 'static {
        use futures_util::future::Either;
        let (this, client) = (&conn.0, &conn.1);
        let picked = headers::pick(req.headers());
        if let Some(why) = picked.host_fault(req.version()) {
            // RFC 9112 §3.2: a 400, not a request forwarded with rpctap's own Host in its place.
            return Either::Left(std::future::ready(
                this.error_reply_plain(StatusCode::BAD_REQUEST, why),
            ));
        }
        let content_type = picked.content_type;
        let session = picked.session.map(str::to_string);
        let ctx = this.inner.inspector.begin(&RequestMeta {
            method: req.method().as_str(),
            path: req.uri().path(),
            query: req.uri().query(),
            content_type,
            session: session.as_deref(),
            protocol_version: picked.protocol_version,
            mcp_method: picked.mcp_method,
            mcp_name: picked.mcp_name,
            a2a_version: picked.a2a_version,
            peer: Some(&client.peer_text),
            peer_ip: Some(client.peer.ip()),
            headers: Some(req.headers()),
        });
        // Only a WebSocket upgrade is passed on (its messages are inspected): any other protocol
        // (`h2c`, say) would turn the connection into a tunnel nothing inspects, so its `Upgrade`
        // is removed with the hop-by-hop headers and the request handled as a plain one (as
        // nginx does).
        let websocket = picked.upgrade && crate::ws::is_websocket(req.headers());
        let upgrade = websocket;
        let hop_by_hop = picked.hop_by_hop;
        let accepts_sse = picked.accepts_sse;
        let on_lane = req.version() <= http::Version::HTTP_11;
        // Whatever the upstream could execute is read: a POST in any letter case and of any
        // content type (a `text/plain` JSON-RPC body is a call to a server that reads the body
        // whatever its type). A body that is not JSON and not said to be is passed on as the
        // form or upload it is (`request_filter`).
        let is_rpc = (req.method() == Method::POST
            || req.method().as_str().eq_ignore_ascii_case("post"))
            && !upgrade;
        let said_json = content_type.is_none_or(|c| crate::media::contains_ignore_case(c, "json"));
        let client_upgrade = upgrade.then(|| hyper::upgrade::on(&mut req));
        let (mut parts, incoming) = req.into_parts();
        // A WebSocket's calls are limited by the upgrade request's keys.
        // Under a dashboard its intercept may hold the client's messages: decided the same way.
        let dashboard = this.inner.intercept.has_dashboard();
        let ws_limits = (websocket && (dashboard || !this.limiter().is_empty())).then(|| {
            let me = this.clone();
            // Boxed: only a WebSocket has them, and every exchange's future would carry them.
            Box::new(crate::ws::Limits {
                rules: Arc::new(move || me.limiter()),
                peer: client.peer.ip(),
                session: session.clone(),
                headers: parts.headers.clone(),
                intercept: dashboard.then(|| this.inner.intercept.clone()),
            })
        });
        let incoming = ClientBody::new(incoming, this.inner.opts.body_timeout);
        let mut ex = Exchange {
            ctx,
            summary: RequestSummary {
                is_rpc,
                said_json,
                ..Default::default()
            },
            plan: None,
            accepts_sse,
            upstreamed: None,
        };
        // The exchange stays here and is lent to each phase: moving it in and out of their
        // futures would copy it several times per call.
        Either::Right(async move {
            let (this, client) = (&conn.0, &conn.1);
            let lane = on_lane.then_some(&client.lane);
            let (mut body, s2c) = {
                let read = if is_rpc {
                    read_ahead(incoming, this.inner.inspector.config().max_frame_bytes).await
                } else {
                    Ok(ReadAhead::NotRpc(incoming))
                };
                // Rules counted in a shared store (Redis): asked before deciding, one round trip for the
                // request's calls, bounded by the rules' store_timeout. Boxed: only such setups pay it.
                // The rules in force, read once for a body that will be decided.
                let limiter = matches!(read, Ok(ReadAhead::Whole(_))).then(|| this.limiter());
                // `direction = "s2c"` rules: the server's requests come on event streams (a POST's
                // reply, the GET stream), the client's answers in POSTs.
                let s2c = match &limiter {
                    Some(l) => l.stages.wants(crate::events::Direction::ServerToClient),
                    None => {
                        parts.method == Method::GET
                            && this
                                .limiter()
                                .stages
                                .wants(crate::events::Direction::ServerToClient)
                    }
                };
                let shared = match (&read, &limiter) {
                    (Ok(ReadAhead::Whole(b)), Some(l)) if l.has_shared() => {
                        let keys = crate::limit::RequestKeys {
                            peer: client.peer.ip(),
                            session: session.as_deref(),
                            headers: &parts.headers,
                        };
                        let parsed = crate::rpc::parse_body(b);
                        Some(Box::pin(crate::limit::enforce::ask_shared(l, &parsed, &keys)).await)
                    }
                    _ => None,
                };
                match this.request_filter(
                    &mut ex,
                    &mut parts,
                    read,
                    client.peer,
                    session.as_deref(),
                    (limiter, shared),
                ) {
                    Ok(body) => (body, s2c),
                    Err(Early::Error(e)) => return this.error_reply(ex, e),
                    Err(Early::Respond(resp)) => return *resp,
                }
            };
            // A client's answer to a server's request that an s2c fault was armed on (boxed: only a
            // run with such rules pays for it).
            let mut again = None;
            if s2c && !this.inner.answers.is_empty() {
                let armed = ex
                    .summary
                    .body
                    .as_ref()
                    .and_then(|b| this.inner.answers.take(session.as_deref(), b));
                if let Some(armed) = armed {
                    match Box::pin(client_answer(&mut ex, &mut parts, body, armed)).await {
                        Ok((b, twice)) => {
                            again = twice;
                            body = b;
                        }
                        Err(resp) => return *resp,
                    }
                }
            }
            // Faults that fired on the request's calls: the request-side ones done here (boxed:
            // only a run with fault rules pays for them), the reply's kept for `response_filter`.
            if ex.plan.as_ref().is_some_and(|p| !p.faults.is_empty())
                && Box::pin(request_faults(&mut ex)).await
            {
                // `close`: a body that fails at once, so hyper drops the connection unanswered.
                return Response::new(TeeBody::new(ReplySource::Broken, Some(ex.ctx)));
            }
            // The dashboard's intercept: a matching request held until decided (boxed: only a
            // dashboard with a filter set pays for it).
            if this.inner.intercept.is_on() && ex.plan.as_ref().is_none_or(|p| !p.any_refused()) {
                if let Some(b) = ex.summary.body.clone() {
                    match Box::pin(intercept::request(&this.inner.intercept, &mut ex.ctx, &b)).await
                    {
                        intercept::Intercepted::Unchanged => {}
                        intercept::Intercepted::Edited(nb) => {
                            parts
                                .headers
                                .insert(header::CONTENT_LENGTH, HeaderValue::from(nb.len()));
                            ex.summary.body = Some(nb.clone());
                            body = ForwardBody::full(nb);
                        }
                        intercept::Intercepted::Answer(a) => return intercept::answer(ex.ctx, a),
                        intercept::Intercepted::Drop => return intercept::dropped(ex.ctx),
                    }
                }
            }
            let is_head = parts.method == Method::HEAD;
            // `--otlp-propagate`: the upstream's parent becomes rpctap's span (the one header rewrite
            // asked for; without it trace headers pass unchanged).
            if let Some(tp) = ex.ctx.trace.as_ref().and_then(|t| t.traceparent()) {
                if let Ok(v) = HeaderValue::from_str(&tp) {
                    parts.headers.insert("traceparent", v);
                }
            }
            if let Err(e) = this.upstream_request(&mut parts, (upgrade, hop_by_hop), lane.is_some())
            {
                return this.error_reply(ex, e);
            }
            // The forwarding headers are added as the request is written (`upstream::send`).
            let fwd = headers::Forwarded {
                peer: &client.peer_ip,
                proto: "http",
            };
            if s2c {
                let mut headers = parts.headers.clone();
                fwd.add_to(&mut headers);
                ex.upstreamed = Some(Box::new(Upstreamed {
                    uri: parts.uri.clone(),
                    headers,
                    peer: client.peer.ip(),
                    session: session.clone(),
                    again,
                }));
            }
            // Phase 3, upstream: the send's future (a whole request's on a lane, small; any other
            // way's boxed by `Upstream::send`) is pinned here, once, and awaited once, in a block
            // of its own, so it shares its place with what the other awaits keep.
            let limit = this.inner.opts.upstream_timeout;
            let sent = {
                let mut send = std::pin::pin!(this.inner.upstream.send(
                    Request::from_parts(parts, body),
                    lane,
                    upgrade,
                    Some(fwd)
                ));
                upstream::within(lane, limit, send.as_mut()).await
            };
            let m = {
                let mut resp = match upstream_outcome(sent, limit, ex.ctx.id) {
                    Ok(r) => r,
                    Err(e) => return this.error_reply(ex, e),
                };
                if let Some(u) = ex.upstreamed.as_mut() {
                    if let Some(b) = u.again.take() {
                        // `duplicate` on a client's answer: the server gets it a second time.
                        this.post_to_server(u.uri.clone(), u.headers.clone(), b);
                    }
                }
                if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
                    let Some(client_up) = client_upgrade else {
                        // A 101 the client never asked for (RFC 9110 §15.2.2 forbids it): passing it on
                        // would switch a client that cannot follow.
                        return this.error_reply(
                            ex,
                            ExchangeError::UpstreamProtocol(
                                "101 Switching Protocols to a request that asked for no upgrade",
                            ),
                        );
                    };
                    if !crate::ws::is_websocket(resp.headers()) {
                        // The one upgrade passed on is WebSocket's: a switch to anything else
                        // would be a tunnel nothing inspects.
                        return this.error_reply(
                            ex,
                            ExchangeError::UpstreamProtocol(
                                "101 Switching Protocols to a protocol other than WebSocket",
                            ),
                        );
                    }
                    // Upgraded: the two connections are spliced as raw bytes — a WebSocket's with its
                    // messages inspected on the way (`crate::ws`).
                    let upstream_up = hyper::upgrade::on(&mut resp);
                    let ws = websocket.then(|| {
                        (
                            this.inner.inspector.begin_ws(ex.ctx.id),
                            crate::ws::negotiated(resp.headers()),
                            this.inner.inspector.config().max_frame_bytes,
                            ws_limits,
                        )
                    });
                    tokio::spawn(splice(client_up, upstream_up, ws));
                }
                let permits = ex
                    .plan
                    .as_mut()
                    .map(|p| std::mem::take(&mut p.permits))
                    .unwrap_or_default();
                match this.response_filter(resp, ex, permits, is_head) {
                    Answer::Stream(r) => return r,
                    Answer::Merge(m) => m,
                }
            };
            // Boxed: a rare path whose state would otherwise widen every exchange's future
            // (moved whole several times per call).
            Box::pin(this.merge_reply(*m)).await
        })
    }

    /// Phase 1, **request**: a JSON-RPC POST body (JSON or no content type) is read ahead up to
    /// the inspection cap, parsed once, summarised for the proxy's own replies, handed to the
    /// inspector, and checked against the rate limits (refused members are answered by rpctap;
    /// a batch goes on smaller). A larger body streams on uninspected after what was read; any
    /// other body streams through untouched.
    ///
    /// Not `async`: the caller reads the body ahead (`read_ahead`) and hands over what it read,
    /// so this phase's state is not one more future carried in every exchange's.
    fn request_filter(
        &self,
        ex: &mut Exchange,
        parts: &mut http::request::Parts,
        read: Result<ReadAhead, ClientBodyError>,
        peer: SocketAddr,
        session: Option<&str>,
        (limiter, mut shared): (
            Option<Arc<crate::limit::Limiter>>,
            Option<crate::limit::SharedVerdicts>,
        ),
    ) -> Result<ForwardBody, Early> {
        let b = match read {
            Ok(ReadAhead::Whole(b)) => b,
            Ok(ReadAhead::Partial(prefix, rest)) => {
                if ex.summary.said_json && self.rules_in_force(limiter.as_deref()) {
                    // Too large to read, so it could not be decided: while a rule is in force
                    // it does not run undecided (rpctap never inspected it).
                    ex.ctx.request_body(&prefix, false);
                    return Err(Early::Error(ExchangeError::Undecidable(
                        "the body is larger than --max-frame-bytes, so no rule could be applied to it",
                    )));
                }
                ex.ctx.request_body(&prefix, false);
                return Ok(ForwardBody::streaming(Some(prefix), rest));
            }
            Ok(ReadAhead::NotRpc(incoming)) => {
                return Ok(if http_body::Body::is_end_stream(&incoming) {
                    ForwardBody::empty()
                } else {
                    ForwardBody::streaming(None, incoming)
                })
            }
            Err(ClientBodyError::Stalled(d)) => {
                return Err(Early::Error(ExchangeError::RequestStalled(d)))
            }
            Err(e) => return Err(Early::Error(ExchangeError::Downstream(e.to_string()))),
        };
        let parsed = crate::rpc::parse_body(&b);
        if !ex.summary.said_json && matches!(parsed, crate::rpc::Body::ParseError(_)) {
            // Not JSON and not said to be (a form, an upload): no JSON-RPC server reads it as
            // a call, so it is not one.
            ex.summary.is_rpc = false;
            return Ok(ForwardBody::full(b));
        }
        ex.summary.body = Some(b.clone());
        let limiter = limiter.unwrap_or_else(|| self.limiter());
        if limiter.is_empty() {
            ex.ctx.request_parsed(&b, parsed);
            return Ok(ForwardBody::full(b));
        }
        let keys = crate::limit::RequestKeys {
            peer: peer.ip(),
            session,
            headers: &parts.headers,
        };
        let p = crate::limit::enforce::plan(&limiter, &parsed, &keys, shared.as_mut());
        ex.ctx.request_parsed(&b, parsed);
        for (i, r) in &p.shadow {
            let m = &p.members[*i];
            ex.ctx
                .refuse(m.id.as_ref().filter(|_| m.is_call), &m.method, r, true);
        }
        for m in &p.members {
            if let Some(r) = &m.refused {
                ex.ctx
                    .refuse(m.id.as_ref().filter(|_| m.is_call), &m.method, r, false);
            }
        }
        if p.all_refused() {
            // Nothing goes upstream: rpctap answers alone.
            let (status, ct, body, hdrs) = limits::whole_refusal(&p, ex.accepts_sse);
            // Its answer is on the record (and counted) like any other.
            ex.ctx
                .answer_locally(status.as_u16(), "refused by a rate-limit rule");
            ex.ctx.end(crate::inspect::EndReason::Complete);
            let mut resp = Response::new(TeeBody::new(ReplySource::Made(Some(body)), None));
            *resp.status_mut() = status;
            *resp.headers_mut() = hdrs;
            if let Some(ct) = ct {
                resp.headers_mut()
                    .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
            }
            return Err(Early::Respond(Box::new(resp)));
        }
        let body = if p.any_refused() {
            // The one rewrite rpctap does: the smaller batch, with its own length.
            let smaller = limits::allowed_body(&p);
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(smaller.len()));
            smaller
        } else {
            b
        };
        ex.plan = Some(p);
        Ok(ForwardBody::full(body))
    }

    /// Whether any rule acts on requests: a rate limit, a fault, or the dashboard's intercept.
    fn rules_in_force(&self, limiter: Option<&crate::limit::Limiter>) -> bool {
        let any = match limiter {
            Some(l) => !l.is_empty(),
            None => !self.limiter().is_empty(),
        };
        any || self.inner.intercept.is_on()
    }

    /// Phase 2, **upstream request**: the upstream's base path and origin-form target,
    /// hop-by-hop headers removed, `Host` rewritten (unless `preserve_host`). The
    /// `X-Forwarded-For`/`-Proto` headers are added as the request is written
    /// (`headers::Forwarded`, passed to `upstream::send`).
    fn upstream_request(
        &self,
        parts: &mut http::request::Parts,
        (upgrade, hop_by_hop): (bool, bool),
        on_lane: bool,
    ) -> Result<(), ExchangeError> {
        let inner = &self.inner;
        parts.uri = self
            .upstream_uri(&parts.uri, on_lane)
            .map_err(ExchangeError::Internal)?;
        parts.version = http::Version::HTTP_11;
        headers::strip_hop_by_hop(&mut parts.headers, upgrade, hop_by_hop);
        if !inner.opts.preserve_host {
            match &inner.upstream_host {
                Some(h) => {
                    headers::set(&mut parts.headers, header::HOST, h.clone());
                }
                None => {
                    parts.headers.remove(header::HOST);
                }
            }
        } else if !parts.headers.contains_key(header::HOST) {
            // An h2 client sends `:authority`, not Host: keep it as the Host header.
            if let Some(a) = parts
                .uri
                .authority()
                .and_then(|a| HeaderValue::from_str(a.as_str()).ok())
            {
                parts.headers.insert(header::HOST, a);
            }
        }
        Ok(())
    }

    /// Phase 4, **response**: hop-by-hop headers removed; the inspector learns status, content
    /// type and `Mcp-Session-Id`; the body goes to the client chunk by chunk as it arrives, the
    /// inspector reading a copy (SSE events one by one, JSON bodies whole at the end); a batch
    /// with refused members gets rpctap's refusals merged in (`merge_reply`). Phase 5, **done**,
    /// happens in the body: it ended, failed, or the client left, and the inspector ends the
    /// exchange. Not `async`: the common path awaits nothing, and a future of its own would
    /// carry the exchange once more.
    fn response_filter(
        &self,
        resp: Response<UpstreamBody>,
        mut ex: Exchange,
        permits: Vec<crate::limit::Permit>,
        is_head: bool,
    ) -> Answer {
        let (mut rparts, rbody) = resp.into_parts();
        let keep_upgrade = rparts.status == StatusCode::SWITCHING_PROTOCOLS;
        let mut picked = headers::pick(&rparts.headers);
        let (any, odd_length) = (picked.hop_by_hop, picked.odd_length);
        if any || keep_upgrade || odd_length {
            // Rare: a hop-by-hop header removed, and the head read again. The length the client
            // is told is rpctap's own (RFC 9112 §6.3): none beside a transfer coding (which
            // overrides it), and one plain value for a list hyper's client agreed with.
            if rparts.headers.contains_key(header::TRANSFER_ENCODING) {
                rparts.headers.remove(header::CONTENT_LENGTH);
            } else if odd_length {
                match http_body::Body::size_hint(&rbody).exact() {
                    Some(n) => {
                        rparts
                            .headers
                            .insert(header::CONTENT_LENGTH, HeaderValue::from(n));
                    }
                    None => {
                        rparts.headers.remove(header::CONTENT_LENGTH);
                    }
                }
            }
            headers::strip_hop_by_hop(&mut rparts.headers, keep_upgrade, any);
            picked = headers::pick(&rparts.headers);
        }
        ex.ctx.response_head(&ResponseMeta {
            status: rparts.status.as_u16(),
            content_type: picked.content_type,
            session: picked.session,
            content_length: picked.content_length,
            www_authenticate: picked.www_authenticate,
            headers: Some(&rparts.headers),
        });
        if is_head {
            ex.ctx.end(crate::inspect::EndReason::Complete);
        }
        if let Some(plan) = ex.plan.take_if(|p| p.any_refused()) {
            // A batch answered merged with refusals passes no reply stage: its reply faults are
            // on the record as not applied.
            for f in plan.call_faults() {
                if f.fired.action.on_reply() {
                    ex.ctx.fault(
                        &f.fired,
                        Some(&f.id),
                        Some(&f.method),
                        None,
                        "not applied: a batch with refused members is answered merged".into(),
                    );
                }
            }
            return Answer::Merge(Box::new(Merge {
                plan,
                rparts,
                rbody,
                ctx: ex.ctx,
                accepts_sse: ex.accepts_sse,
                permits,
            }));
        }
        let sse = picked
            .content_type
            .is_some_and(crate::media::is_event_stream);
        // Faults armed on the reply: it goes through their stage (its length may change).
        let call_faults = ex
            .plan
            .as_ref()
            .filter(|p| !p.faults.is_empty())
            .map(|p| p.call_faults())
            .unwrap_or_default();
        let interception = self.inner.intercept.is_on().then(|| faults::Interception {
            intercept: self.inner.intercept.clone(),
            methods: ex
                .summary
                .body
                .as_ref()
                .map(intercept::call_methods)
                .unwrap_or_default(),
            scope: ex.ctx.scope_text(),
        });
        let requests = ex
            .upstreamed
            .take()
            .filter(|_| sse)
            .map(|u| self.server_requests(*u));
        let stage = (!call_faults.is_empty() || interception.is_some() || requests.is_some())
            .then(|| {
                faults::Stage::new(
                    call_faults,
                    sse,
                    self.inner.inspector.config().max_frame_bytes,
                    interception,
                    requests,
                )
            })
            .flatten();
        // An event stream may stay open for hours: on HTTP/1.1 the listener writes it on
        // without hyper's connection (see `server::LongStream`).
        if sse {
            rparts.extensions.insert(crate::server::LongStream);
        }
        let body = TeeBody::new(ReplySource::Upstream(rbody), Some(ex.ctx)).holding(permits);
        let body = match stage {
            Some(stage) => {
                rparts.headers.remove(header::CONTENT_LENGTH);
                body.faulted(stage)
            }
            None => body,
        };
        Answer::Stream(Response::from_parts(rparts, body))
    }

    /// What an event stream's stage needs to decide the server's requests on it.
    fn server_requests(&self, u: Upstreamed) -> faults::ServerRequests {
        let me = self.clone();
        let (uri, headers) = (u.uri, u.headers.clone());
        faults::ServerRequests {
            limiter: self.limiter(),
            peer: u.peer,
            session: u.session,
            headers: u.headers,
            answer: Box::new(move |b| me.post_to_server(uri.clone(), headers.clone(), b)),
            answers: self.inner.answers.clone(),
        }
    }

    /// rpctap's own POST of `body` (a JSON-RPC response) to the server, made like the client's
    /// request (`uri`, `headers`: its session, its credentials); its reply read and dropped.
    fn post_to_server(&self, uri: Uri, mut headers: http::HeaderMap, body: Bytes) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.insert(
            header::ACCEPT,
            HeaderValue::from_static("application/json, text/event-stream"),
        );
        headers.insert(header::CONTENT_LENGTH, HeaderValue::from(body.len()));
        headers.remove("last-event-id");
        // Sent on the pool, not a connection's lane: the target in absolute form.
        let uri = match uri.scheme() {
            Some(_) => uri,
            None => {
                let up = &self.inner.opts.upstream;
                let built = Uri::builder()
                    .scheme(up.scheme_str().unwrap_or("http"))
                    .authority(up.authority().map(|a| a.as_str()).unwrap_or(""))
                    .path_and_query(uri.path_and_query().map(|p| p.as_str()).unwrap_or("/"))
                    .build();
                match built {
                    Ok(u) => u,
                    Err(e) => {
                        tracing::warn!(error = %e, "rpctap's answer to the server has no target");
                        return;
                    }
                }
            }
        };
        let mut req = Request::new(ForwardBody::full(body));
        *req.method_mut() = Method::POST;
        *req.uri_mut() = uri;
        *req.headers_mut() = headers;
        let me = self.clone();
        tokio::spawn(async move {
            let limit = me.inner.opts.upstream_timeout;
            match tokio::time::timeout(limit, me.inner.upstream.send(req, None, false, None)).await
            {
                Ok(Ok(resp)) => {
                    let status = resp.status();
                    let _ = tokio::time::timeout(limit, resp.into_body().collect()).await;
                    if !status.is_success() {
                        tracing::warn!(%status, "the server refused rpctap's answer in the client's place");
                    }
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "sending rpctap's answer to the server failed")
                }
                Err(_) => tracing::warn!("sending rpctap's answer to the server timed out"),
            }
        });
    }

    /// A batch some of whose members were refused: the upstream answered the smaller batch;
    /// the client gets one reply with rpctap's refusals merged in request order.
    async fn merge_reply(&self, m: Merge) -> Response<ProxyBody> {
        let Merge {
            plan,
            mut rparts,
            rbody,
            mut ctx,
            accepts_sse,
            permits,
        } = m;
        let ct = rparts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        let (is_sse, untyped) = (crate::media::is_event_stream(ct), ct.is_empty());
        rparts.headers.remove(header::CONTENT_LENGTH);
        let refusals = limits::refusal_replies(&plan);
        if is_sse {
            // The upstream's events pass one by one; the refusals follow as one last event.
            let tail = Bytes::from(format!(
                "event: message\ndata: [{}]\n\n",
                refusals.join(",")
            ));
            // The concurrency permits are held until the merged stream ends.
            return Response::from_parts(
                rparts,
                TeeBody::new(ReplySource::Upstream(rbody), Some(ctx))
                    .then(tail)
                    .holding(permits),
            );
        }
        // JSON (or no body, when only notifications went upstream): read the reply whole (it is
        // a batch reply, bounded by the inspection cap), then merge.
        let cap = self.inner.inspector.config().max_frame_bytes;
        let collected = http_body_util::Limited::new(rbody, cap).collect().await;
        let upstream = match collected {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                ctx.end(crate::inspect::EndReason::UpstreamError(e.to_string()));
                return self.error_reply_plain(
                    StatusCode::BAD_GATEWAY,
                    &format!("upstream reply unreadable: {e}"),
                );
            }
        };
        ctx.response_data(&upstream);
        ctx.end(crate::inspect::EndReason::Complete);
        let merged = limits::merge(&plan, &upstream).unwrap_or(upstream);
        // Only notifications went upstream (202/204, no body): the refusals are the reply.
        if rparts.status == StatusCode::NO_CONTENT || rparts.status == StatusCode::ACCEPTED {
            rparts.status = StatusCode::OK;
        }
        let (ct, body) = if accepts_sse && untyped {
            (
                "text/event-stream",
                Bytes::from(format!(
                    "event: message\ndata: {}\n\n",
                    String::from_utf8_lossy(&merged)
                )),
            )
        } else {
            ("application/json", merged)
        };
        rparts
            .headers
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        Response::from_parts(rparts, TeeBody::new(ReplySource::Made(Some(body)), None))
    }

    fn error_reply_plain(&self, status: StatusCode, message: &str) -> Response<ProxyBody> {
        let mut resp = Response::new(TeeBody::new(
            ReplySource::Made(Some(Bytes::from(format!("rpctap: {message}\n")))),
            None,
        ));
        *resp.status_mut() = status;
        resp
    }

    /// The request target upstream: the upstream's base path + the client's path and query;
    /// in origin form for a request on a lane (its own HTTP/1 connection), absolute for the pool.
    fn upstream_uri(&self, orig: &Uri, origin_form: bool) -> Result<Uri, String> {
        let up = &self.inner.opts.upstream;
        let pq = match (self.inner.base_path.is_empty(), orig.path_and_query()) {
            (true, Some(pq)) => pq.clone(),
            (_, pq) => {
                let pq = pq.map(|p| p.as_str()).unwrap_or("/");
                http::uri::PathAndQuery::try_from(format!("{}{}", self.inner.base_path, pq))
                    .map_err(|e| e.to_string())?
            }
        };
        if origin_form {
            return Ok(Uri::from(pq));
        }
        Uri::builder()
            .scheme(up.scheme_str().unwrap_or("http"))
            .authority(up.authority().map(|a| a.as_str()).unwrap_or(""))
            .path_and_query(pq)
            .build()
            .map_err(|e| e.to_string())
    }

    /// A reply rpctap makes itself: a JSON-RPC error per call when the request held calls (an
    /// array for a batch), one `id: null` error when the request could not be read, nothing for
    /// notifications, plain text for anything else — built from the proxy's own summary of the
    /// request. The inspector is told rpctap answered (the calls end as missing with the reason)
    /// and never reads this body as the server's.
    fn error_reply(&self, ex: Exchange, err: ExchangeError) -> Response<ProxyBody> {
        let Exchange {
            mut ctx,
            summary,
            plan,
            ..
        } = ex;
        let (status, what) = err.status_and_what();
        let message = err.to_string();
        let (batch, ids) = summary.calls(plan.as_ref());
        let a2a = summary
            .body
            .as_ref()
            .is_some_and(crate::rpc::own::body_is_a2a);
        let body = if summary.is_rpc {
            match err {
                ExchangeError::Downstream(_) | ExchangeError::RequestStalled(_) => {
                    Some(what.reply(&Id::Null, &message, a2a))
                }
                _ => what.replies(batch, &ids, &message, a2a),
            }
        } else {
            Some(format!("rpctap: {message}\n"))
        };
        let ct = if summary.is_rpc {
            "application/json"
        } else {
            "text/plain; charset=utf-8"
        };
        ctx.answer_locally(status.as_u16(), &message);
        let bytes = body.map(Bytes::from);
        let mut resp = Response::new(TeeBody::new(ReplySource::Made(bytes.clone()), Some(ctx)));
        *resp.status_mut() = status;
        if bytes.is_some() {
            resp.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        }
        resp
    }
}

/// A client's answer to a server's request under the fault armed on it: the body that goes on
/// (and the body to send a second time, `duplicate`), or rpctap's own `202 Accepted` when the
/// fault drops it. Recorded.
async fn client_answer(
    ex: &mut Exchange,
    parts: &mut http::request::Parts,
    body: ForwardBody,
    (id, fired, method): (crate::rpc::Id, crate::flow::fault::Fired, Arc<str>),
) -> Result<(ForwardBody, Option<Bytes>), Box<Response<ProxyBody>>> {
    let Some(b) = ex.summary.body.clone() else {
        return Ok((body, None));
    };
    let (what, made, detail) = faults::on_answer(&fired, &b);
    ex.ctx.fault(&fired, Some(&id), Some(&method), made, detail);
    match what {
        faults::OnAnswer::Drop => {
            ex.ctx
                .answer_locally(202, "the client's answer dropped by a fault");
            ex.ctx.end(crate::inspect::EndReason::Complete);
            let mut resp = Response::new(TeeBody::new(ReplySource::Made(None), None));
            *resp.status_mut() = StatusCode::ACCEPTED;
            Err(Box::new(resp))
        }
        faults::OnAnswer::Twice => Ok((body, Some(b))),
        faults::OnAnswer::Replace(nb) => {
            parts
                .headers
                .insert(header::CONTENT_LENGTH, HeaderValue::from(nb.len()));
            Ok((ForwardBody::full(nb), None))
        }
        faults::OnAnswer::Delay(d) => {
            tokio::time::sleep(d).await;
            Ok((body, None))
        }
        faults::OnAnswer::Throttle(bps) => Ok((ForwardBody::throttled(b, bps), None)),
        faults::OnAnswer::Unchanged => Ok((body, None)),
    }
}

/// A request's faults that act before it goes upstream: a `delay` waits here; true for a
/// `close` (the caller answers with a closed connection). Each recorded.
async fn request_faults(ex: &mut Exchange) -> bool {
    let faults = ex
        .plan
        .as_ref()
        .map(|p| p.call_faults())
        .unwrap_or_default();
    // The reply-side ones are armed by `faults` when the reply comes.
    let t = crate::limit::enforce::triage(
        faults,
        [
            "the connection closed when the call arrived, with no reply",
            "the connection closed when the server's request arrived",
        ],
    );
    for (f, detail) in t.now {
        ex.ctx
            .fault(&f.fired, Some(&f.id), Some(&f.method), None, detail);
    }
    if t.close {
        return true;
    }
    if let Some(d) = t.delay {
        tokio::time::sleep(d).await;
    }
    false
}

/// The upstream request as sent, kept while `direction = "s2c"` rules exist: rpctap's own
/// POSTs to the server (an answer in the client's place, a doubled answer) are made like it.
struct Upstreamed {
    uri: Uri,
    headers: http::HeaderMap,
    peer: std::net::IpAddr,
    session: Option<String>,
    /// A client's answer to send the server a second time (`duplicate`).
    again: Option<Bytes>,
}

/// One exchange as the proxy carries it through its phases.
struct Exchange {
    /// Set only under `direction = "s2c"` rules (boxed: the common exchange stays small).
    upstreamed: Option<Box<Upstreamed>>,
    /// The inspector's view (it observes; the proxy never reads it back). Boxed: it is most of
    /// the exchange's size, and it moves on into the reply's body (`TeeBody`), which is moved
    /// whole many times on its way out.
    ctx: Box<ExchangeCtx>,
    /// What the proxy itself knows of the request, for the replies it makes.
    summary: RequestSummary,
    /// The rate limits' decision, when rules apply.
    plan: Option<limits::Plan>,
    accepts_sse: bool,
}

/// The request as the proxy's own error replies need it: kept as the body it read (a reference
/// count, no copy), read again only on the rare path that makes such a reply.
#[derive(Debug, Default)]
struct RequestSummary {
    /// A POST, read as JSON-RPC (until its body shows it is not: see `said_json`).
    is_rpc: bool,
    /// Its content type says JSON, or it has none.
    said_json: bool,
    /// The body, when it was read whole.
    body: Option<Bytes>,
}

impl RequestSummary {
    /// Whether the request was a batch, and the ids of its calls in order — those rpctap
    /// refused (and so answered itself) left out.
    fn calls(&self, plan: Option<&limits::Plan>) -> (bool, Vec<Id>) {
        let Some(body) = &self.body else {
            return (false, Vec::new());
        };
        let refused = |id: &Id| {
            plan.is_some_and(|p| {
                p.members
                    .iter()
                    .any(|m| m.refused.is_some() && m.is_call && m.id.as_ref() == Some(id))
            })
        };
        let (batch, mut ids) = crate::rpc::call_ids(body);
        if batch {
            ids.retain(|id| !refused(id));
        }
        (batch, ids)
    }
}

/// Phase 3, **upstream**, its outcome: the response head, or why there is none — unreachable
/// (502) or too slow (504).
fn upstream_outcome(
    sent: Option<Result<Response<UpstreamBody>, String>>,
    limit: Duration,
    exchange: u64,
) -> Result<Response<UpstreamBody>, ExchangeError> {
    match sent {
        Some(Ok(r)) => Ok(r),
        Some(Err(why)) => {
            tracing::warn!(exchange, error = %why, "upstream request failed");
            Err(ExchangeError::UpstreamUnreachable(why))
        }
        None => {
            tracing::warn!(exchange, "upstream timed out");
            Err(ExchangeError::UpstreamTimeout(limit))
        }
    }
}

/// What the response phase hands the client.
// The common variant stays unboxed: it is every exchange's reply, returned once.
#[allow(clippy::large_enum_variant)]
enum Answer {
    /// The upstream's reply, streamed through the tee.
    Stream(Response<ProxyBody>),
    /// A batch with refused members: the reply is merged with rpctap's refusals.
    Merge(Box<Merge>),
}

/// What `merge_reply` needs.
struct Merge {
    plan: limits::Plan,
    rparts: http::response::Parts,
    rbody: UpstreamBody,
    ctx: Box<ExchangeCtx>,
    accepts_sse: bool,
    permits: Vec<crate::limit::Permit>,
}

/// Why the request phase ends the exchange before the upstream.
enum Early {
    /// The request could not be read.
    Error(ExchangeError),
    /// rpctap answers alone (every call refused).
    Respond(Box<Response<ProxyBody>>),
}

/// Splices an upgraded client connection to the upgraded upstream connection, byte for byte;
/// with `ws` (the inspection, the negotiated extensions, the message cap) a WebSocket's copy is
/// inspected.
async fn splice(
    client: hyper::upgrade::OnUpgrade,
    upstream: hyper::upgrade::OnUpgrade,
    ws: Option<(
        crate::inspect::ExchangeCtx,
        crate::ws::Negotiated,
        usize,
        Option<Box<crate::ws::Limits>>,
    )>,
) {
    match (client.await, upstream.await) {
        (Ok(c), Ok(u)) => {
            let mut c = hyper_util::rt::TokioIo::new(c);
            let mut u = hyper_util::rt::TokioIo::new(u);
            match ws {
                Some((ctx, neg, cap, limits)) => {
                    crate::ws::tee(c, u, ctx, neg, cap, limits.map(|l| *l)).await
                }
                None => {
                    let _ = tokio::io::copy_bidirectional(&mut c, &mut u).await;
                }
            }
        }
        (c, u) => tracing::debug!(
            client_ok = c.is_ok(),
            upstream_ok = u.is_ok(),
            "upgrade failed"
        ),
    }
}

enum ReadAhead {
    Whole(Bytes),
    Partial(Bytes, ClientBody),
    /// Not read: the request is not JSON-RPC, its body streams through untouched.
    NotRpc(ClientBody),
}

/// Reads a request body up to `cap` bytes. A body that ends within the cap is returned whole;
/// a larger one as what was read plus the rest still streaming.
async fn read_ahead(mut body: ClientBody, cap: usize) -> Result<ReadAhead, ClientBodyError> {
    let declared = http_body::Body::size_hint(&body).exact();
    if declared.is_some_and(|n| n > cap as u64) {
        return Ok(ReadAhead::Partial(Bytes::new(), body));
    }
    let mut body_read = crate::rpc::Gathered::default();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let over = body_read.len() + data.len() > cap;
        body_read.push(data);
        if over {
            return Ok(ReadAhead::Partial(body_read.into_bytes(), body));
        }
    }
    Ok(ReadAhead::Whole(body_read.into_bytes()))
}

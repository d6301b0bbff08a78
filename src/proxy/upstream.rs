//! The upstream side of the proxy.
//!
//! An HTTP/1 client connection gets its own upstream connection (a [`Lane`]): its requests are
//! sequential, so they go one after another on one kept-alive upstream connection, like a TCP
//! proxy's, without a shared pool's checkout and bookkeeping on every request. The lane is
//! opened on the first request and re-opened when the upstream closed it. Between requests a
//! lane keeps its connection only while it holds a slot of the [`IdleBudget`]
//! (`--upstream-idle-max`), so thousands of idle client connections do not pin as many
//! connections on the upstream; a kept connection unused past `--upstream-idle-timeout` is not
//! reused. On a lane, a whole request (its small body read whole, no upgrade) goes on rpctap's own
//! client leg (`super::lean`), whose body hands the connection back to the lane when it ends;
//! an upgrade or a streaming body takes a hyper client connection. HTTP/2 clients
//! multiplex many requests on one connection, so their requests share hyper-util's pooled
//! keep-alive client instead. Both go over plain TCP or rustls (system roots, falling back to
//! the bundled webpki roots; `--upstream-insecure` skips certificate verification, off by
//! default).

use super::body::{ForwardBody, LeanIo, UpstreamBody};
use super::headers::Forwarded;
use crate::locks::Locked as _;
use http::{Request, Response, Uri};
use hyper::client::conn::http1;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};
use std::time::Duration;
use tower_service::Service;

pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, ForwardBody>;

/// Any way's send but a whole request's on a lane (see [`Upstream::send`]).
type SendOther<'a> =
    Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, String>> + Send + 'a>>;
type Connector = HttpsConnector<HttpConnector>;

/// Whether TCP reaches `target`'s host and port (its scheme's port when it names none): what
/// `replay`, `probe` and `test` ask first, so a server that is down is told apart from one that
/// answers wrongly before anything is sent. The error says why, for the caller's message.
pub async fn reachable(target: &Uri, timeout: Duration) -> Result<(), String> {
    let host = target
        .host()
        .unwrap_or("127.0.0.1")
        .trim_matches(['[', ']']);
    let port =
        target
            .port_u16()
            .unwrap_or(if matches!(target.scheme_str(), Some("https" | "wss")) {
                443
            } else {
                80
            });
    match tokio::time::timeout(timeout, tokio::net::TcpStream::connect((host, port))).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no connection within {timeout:?}")),
    }
}

/// Builds the pooled client (HTTP/1 or HTTP/2, by ALPN on TLS).
pub fn build_client(connect_timeout: Duration, insecure: bool) -> UpstreamClient {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .build(connector(connect_timeout, insecure, true))
}

/// A client of any request body, with the proxy's TLS settings (`stdio --upstream`).
pub fn http_client<B>(insecure: bool) -> Client<Connector, B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(16)
        .build(connector(Duration::from_secs(10), insecure, true))
}

/// A small client for readiness probes (`GET ready_path`), with the proxy's TLS settings.
pub fn probe_client(insecure: bool) -> Client<Connector, http_body_util::Empty<bytes::Bytes>> {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(1)
        .build(connector(Duration::from_secs(5), insecure, true))
}

fn connector(connect_timeout: Duration, insecure: bool, allow_h2: bool) -> Connector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(60)));
    let with_roots = if insecure {
        let cfg = rustls::ClientConfig::builder()
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify))
            .with_no_client_auth();
        HttpsConnectorBuilder::new().with_tls_config(cfg)
    } else {
        match HttpsConnectorBuilder::new().with_native_roots() {
            Ok(b) => b,
            Err(e) => {
                tracing::debug!(error = %e, "no system root certificates; using the bundled webpki roots");
                HttpsConnectorBuilder::new().with_webpki_roots()
            }
        }
    };
    let b = with_roots.https_or_http();
    if allow_h2 {
        b.enable_all_versions().wrap_connector(http)
    } else {
        b.enable_http1().wrap_connector(http)
    }
}

/// The upstream connection of one HTTP/1 client connection; empty until its first request,
/// and while a request is on it.
///
/// A whole request goes on a lean connection (`super::lean`: written and read by rpctap in the
/// exchange's own future); a hyper connection (an upgrade, a streaming body) is not a task of
/// its own either: [`Lane::drive`] polls it inside the client connection's task, so handing a
/// request to it and getting the reply back wake no other task.
#[derive(Default)]
pub struct Lane {
    /// The connection kept between requests; shared with a lean response's body, which hands
    /// its connection back when the body has been read to its end.
    kept: Arc<Kept>,
    /// The lane's connection futures (normally one; an old one may still be closing) and the
    /// waker of the task that drives them. Std lock, held only while polling them, never across
    /// an `.await`.
    driven: Mutex<Driven>,
    /// The upstream timeout's timer, kept from request to request (taken while a request
    /// waits). Moving a registered timer later is an atomic store in tokio (the wheel entry is
    /// fixed when it fires early), so a kept-alive lane touches the timer wheel about once per
    /// timeout period instead of twice per request.
    timer: Mutex<Option<Pin<Box<tokio::time::Sleep>>>>,
}

/// A lane's connection kept between requests, and the idle budget it holds a slot of.
#[derive(Default)]
struct Kept {
    /// A std lock: held only to take or put the connection, never across an `.await`.
    conn: Mutex<Option<Held>>,
    /// The idle budget a kept connection holds a slot of (the proxy's; set at the lane's first
    /// request, so that keeping and taking a connection never touch the budget's shared count
    /// of references, only its count of slots).
    budget: std::sync::OnceLock<Arc<IdleBudget>>,
}

/// A connection of the lean leg, on its own allocation so that going to the lane and back
/// moves a pointer (a TLS connection's state is large).
pub type LeanConn = super::lean::LeanConn<Box<LeanIo>>;

/// A kept connection: rpctap's own (whole requests) or hyper's (the rest).
enum Conn {
    Lean(LeanConn),
    Hyper(http1::SendRequest<ForwardBody>),
}

/// The largest body a request on the lean leg carries. The lean leg writes a request whole
/// before it reads the answer: a body this small fits a socket's smallest send buffer, so an
/// upstream that answers early (a 401 before it reads the body) cannot leave the write waiting.
/// A larger one goes on a hyper connection, which reads the answer while it writes.
const LEAN_MAX_BODY: usize = 16 << 10;

type ConnFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

#[derive(Default)]
struct Driven {
    conns: Vec<ConnFuture>,
    waker: Option<Waker>,
}

impl Lane {
    /// Polls the lane's hyper connections for as long as the client connection lives (it
    /// never resolves; run it beside the client connection, see `server::serve_with`).
    /// Dropping it closes them.
    pub fn drive(&self) -> impl Future<Output = ()> + '_ {
        std::future::poll_fn(move |cx| {
            let mut d = self.driven.locked();
            d.conns.retain_mut(|c| c.as_mut().poll(cx).is_pending());
            match &mut d.waker {
                Some(w) if w.will_wake(cx.waker()) => {}
                w => *w = Some(cx.waker().clone()),
            }
            Poll::Pending
        })
    }

    /// Hands a new connection to the task that drives the lane.
    fn adopt(&self, conn: ConnFuture) {
        let mut d = self.driven.locked();
        d.conns.push(conn);
        if let Some(w) = &d.waker {
            w.wake_by_ref();
        }
    }

    /// The kept connection, unless it has waited longer than `idle_timeout` (then it is
    /// dropped, which closes it).
    fn take(&self, idle_timeout: Duration) -> Option<Conn> {
        let held = self.kept.conn.locked().take()?;
        self.kept.release();
        (held.since.elapsed() <= idle_timeout).then_some(held.conn)
    }
}

impl Kept {
    /// Keeps the connection for the lane's next request if the idle budget (set by
    /// `Upstream::send` at the lane's first request) has room; otherwise drops it (it closes:
    /// at once for a lean one, once its reply is done for a hyper one).
    fn put(&self, conn: Conn) {
        if self.budget.get().is_some_and(|b| b.acquire()) {
            let old = self.conn.locked().replace(Held {
                conn,
                since: std::time::Instant::now(),
            });
            if old.is_some() {
                // Not reached (a lane's connection is taken before it is put back); a slot held
                // twice would be lost for good.
                self.release();
            }
        }
    }

    /// Gives back the slot a kept connection held.
    fn release(&self) {
        if let Some(b) = self.budget.get() {
            b.held.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// A lean response's body gives its connection back here (to the lane it came from).
impl super::lean::Home<Box<LeanIo>> for Kept {
    fn keep(&self, conn: LeanConn) {
        self.put(Conn::Lean(conn));
    }
}

impl Drop for Kept {
    fn drop(&mut self) {
        let kept = self
            .conn
            .get_mut()
            .map_or_else(|p| p.into_inner().is_some(), |s| s.is_some());
        if kept {
            self.release();
        }
    }
}

/// How many lanes may keep an upstream connection between their requests
/// (`--upstream-idle-max`): idle client connections beyond it hold none, so the upstream sees at
/// most the exchanges in flight plus this many. Busy clients within it keep their fast path (a
/// kept-alive connection of their own, driven in their own task).
#[derive(Debug)]
pub struct IdleBudget {
    held: std::sync::atomic::AtomicUsize,
    max: usize,
}

impl IdleBudget {
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(IdleBudget {
            held: Default::default(),
            max,
        })
    }
    fn acquire(&self) -> bool {
        use std::sync::atomic::Ordering;
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }
    /// Connections kept between requests now.
    pub fn held(&self) -> usize {
        self.held.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A connection a lane keeps between requests (it holds a slot of the lane's idle budget until
/// it is taken for a request or the lane is dropped).
struct Held {
    conn: Conn,
    since: std::time::Instant,
}

/// An upstream served in this process instead of over the network: `rpctap serve`'s bridge to
/// stdio servers. It gets each request as the proxy would send it (after the request phase:
/// inspected, rate-limited) and answers with a head at once and a [`super::body::LocalBody`],
/// so everything the proxy does to an exchange applies to the bridge's unchanged.
pub trait Local: Send + Sync {
    fn call(&self, req: Request<ForwardBody>) -> LocalFuture;
}

pub type LocalFuture = Pin<Box<dyn Future<Output = Result<Response<UpstreamBody>, String>> + Send>>;

/// Runs `f` for at most `limit`; `None` when the time ran out first. On a lane the timer is
/// the lane's, kept from request to request; without one (HTTP/2) tokio's timeout.
pub async fn within<F: Future>(
    lane: Option<&Lane>,
    limit: Duration,
    mut f: Pin<&mut F>,
) -> Option<F::Output> {
    let Some(lane) = lane else {
        return tokio::time::timeout(limit, f).await.ok();
    };
    let deadline = tokio::time::Instant::now() + limit;
    let taken = lane.timer.locked().take();
    let mut timer = match taken {
        Some(mut t) => {
            t.as_mut().reset(deadline);
            t
        }
        None => Box::pin(tokio::time::sleep_until(deadline)),
    };
    let out = std::future::poll_fn(|cx| {
        if let Poll::Ready(v) = f.as_mut().poll(cx) {
            return Poll::Ready(Some(v));
        }
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    })
    .await;
    *lane.timer.locked() = Some(timer);
    out
}

/// Sends requests upstream: on a client connection's lane, or on the shared pool.
pub struct Upstream {
    /// A local upstream, in place of the network (`rpctap serve`).
    pub local: Option<Arc<dyn Local>>,
    pool: UpstreamClient,
    h1: Connector,
    /// Where lanes connect to (scheme and authority of `--upstream`).
    target: Uri,
    /// Lane connections open now (the metrics read it; the pool's are not counted).
    pub conns: Arc<crate::observe::metrics::Connections>,
    /// The lanes' connections kept between requests, bounded.
    pub idle: Arc<IdleBudget>,
    idle_timeout: Duration,
}

impl Upstream {
    pub fn new(
        target: Uri,
        connect_timeout: Duration,
        insecure: bool,
        idle_max: usize,
        idle_timeout: Duration,
    ) -> Self {
        Upstream {
            local: None,
            pool: build_client(connect_timeout, insecure),
            h1: connector(connect_timeout, insecure, false),
            target,
            conns: Default::default(),
            idle: IdleBudget::new(idle_max),
            idle_timeout,
        }
    }

    /// Sends `req` (its URI in absolute form, or origin form on a lane). With a lane the
    /// request goes on that lane's connection (an upgrade request — `upgrade`, what the
    /// caller's [`super::headers::pick`] found — takes the connection with it); without one, on
    /// the pool. `fwd`: the forwarding headers to add (`None` when the head has them already).
    ///
    /// Not `async`: the way is chosen here, before any await. A whole request on a lane (nearly
    /// every call) is written out now and goes on as [`Self::send_whole`]'s small future,
    /// which holds neither the request nor the state of the other ways; those go on boxed, as
    /// [`Self::send_other`]. The caller keeps this future in its own, moved several times a
    /// call: one future for every way would be the size of the largest.
    pub fn send<'a>(
        &'a self,
        mut req: Request<ForwardBody>,
        lane: Option<&'a Lane>,
        upgrade: bool,
        fwd: Option<Forwarded<'a>>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, String>> + 'a {
        use futures_util::future::Either;
        let lane = match lane {
            Some(lane) if self.local.is_none() => lane,
            _ => {
                let other: SendOther<'a> = Box::pin(self.send_other(req, lane, upgrade, fwd));
                return Either::Right(other);
            }
        };
        // The budget a kept connection holds a slot of, known to the lane before anything
        // is kept (a lean body hands its connection back with no access to the proxy).
        lane.kept.budget.get_or_init(|| self.idle.clone());
        // HTTP/1 on a connection of our own: the request target in origin form.
        if req.uri().scheme().is_some() {
            if let Some(pq) = req.uri().path_and_query().cloned() {
                *req.uri_mut() = Uri::from(pq);
            }
        }
        // A whole request (read whole, no upgrade, a body the socket takes at once, not a long
        // stream's): on the lane's lean connection, written out now.
        let whole = req.body().whole().filter(|b| b.len() <= LEAN_MAX_BODY);
        match whole {
            Some(body) if !upgrade && !super::lean::wants_lean(&req) => {
                let is_head = req.method() == http::Method::HEAD;
                let wire = super::lean::encode_request(&req, body, fwd);
                Either::Left(self.send_whole(lane, wire, is_head))
            }
            _ => {
                let other: SendOther<'a> = Box::pin(self.send_other(req, Some(lane), upgrade, fwd));
                Either::Right(other)
            }
        }
    }

    /// The ways other than a whole request on a lane's lean connection: to the local upstream,
    /// on the pool (no lane: HTTP/2), a long stream's request on a connection of its own, and
    /// the rest (a streaming body, an upgrade) on the lane's hyper connection.
    async fn send_other(
        &self,
        mut req: Request<ForwardBody>,
        lane: Option<&Lane>,
        upgrade: bool,
        fwd: Option<Forwarded<'_>>,
    ) -> Result<Response<UpstreamBody>, String> {
        // The forwarding headers go in the map unless the lean path writes them itself.
        let add = |req: &mut Request<ForwardBody>| {
            if let Some(f) = fwd {
                f.add_to(req.headers_mut());
            }
        };
        if let Some(local) = &self.local {
            add(&mut req);
            return local.call(req).await;
        }
        let Some(lane) = lane else {
            add(&mut req);
            return (self.pool.request(req).await)
                .map(|r| r.map(UpstreamBody::Hyper))
                .map_err(|e| describe(&e));
        };
        // A long stream's request: on a connection of its own, read by rpctap (`lean`).
        // Boxed: its state (a TLS stream among it) would otherwise make this future larger.
        if super::lean::wants_lean(&req) {
            let resp = Box::pin(async {
                let conn = self.dial_lean().await?;
                super::lean::send(conn, req, fwd).await
            })
            .await?;
            return Ok(resp.map(|b| UpstreamBody::Lean(Box::new(b))));
        }
        add(&mut req);
        let (reused, lean) = match lane.take(self.idle_timeout) {
            Some(Conn::Hyper(mut s)) => (s.ready().await.ok().map(|()| s), None),
            // A kept lean connection, still open: hyper takes its socket over.
            Some(Conn::Lean(mut c)) => (None, c.idle_and_open().then_some(c)),
            None => (None, None),
        };
        let was_reused = reused.is_some() || lean.is_some();
        let mut sender = match (reused, lean) {
            (Some(s), _) => s,
            (None, Some(c)) => Box::pin(self.handshake(lane, c)).await?,
            (None, None) => Box::pin(self.connect(lane)).await?,
        };
        let resp = match sender.try_send_request(req).await {
            Ok(r) => r,
            Err(e) => {
                // The kept-alive connection closed before the request was written: the
                // request was not sent, so it goes once more on a new connection. The
                // error is gone before that await (it holds the request) and the resend is
                // boxed: rare, and either would otherwise widen every send's future.
                let again = {
                    let mut e = e;
                    match e.take_message() {
                        Some(req) if was_reused => Ok(req),
                        _ => Err(describe(e.error())),
                    }
                };
                let (s, r) = Box::pin(self.resend(lane, again?)).await?;
                sender = s;
                r
            }
        };
        if !upgrade {
            lane.kept.put(Conn::Hyper(sender));
        }
        Ok(resp.map(UpstreamBody::Hyper))
    }

    /// Sends a whole request on `lane`'s lean connection (the kept one when it is still open,
    /// else a new one) and reads its response head; the body reads on, and hands the
    /// connection back to the lane at its end when the response allows (`lean::reusable`).
    /// A kept connection the upstream closed before any of the request reached it is replaced
    /// once; a request that reached it is never sent twice (it may have been acted on).
    async fn send_whole(
        &self,
        lane: &Lane,
        wire: Vec<u8>,
        is_head: bool,
    ) -> Result<Response<UpstreamBody>, String> {
        let kept = match lane.take(self.idle_timeout) {
            Some(Conn::Lean(mut c)) => c.idle_and_open().then_some(c),
            // A hyper connection: dropped (it closes).
            Some(Conn::Hyper(_)) | None => None,
        };
        let reused = kept.is_some();
        let mut conn = match kept {
            Some(c) => c,
            None => Box::pin(self.dial_lean()).await?,
        };
        // The first answer is gone before the retry's awaits (this future would keep it).
        let first = conn.exchange(&wire, is_head).await;
        let got = if reused && matches!(first, Err(super::lean::SendError::Unsent(_))) {
            drop(first);
            conn = Box::pin(self.dial_lean()).await?;
            conn.exchange(&wire, is_head).await
        } else {
            first
        };
        let (parts, framing, buf) = got?;
        let home = super::lean::reusable(&parts, &framing)
            .then(|| lane.kept.clone() as Arc<dyn super::lean::Home<Box<LeanIo>>>);
        let body = super::lean::LeanBody::new(conn, buf, framing, home);
        Ok(Response::from_parts(
            parts,
            UpstreamBody::Lean(Box::new(body)),
        ))
    }

    /// A new lean connection to the upstream (TCP, and TLS for `https`), counted open.
    async fn dial_lean(&self) -> Result<LeanConn, String> {
        let io = Box::new(self.dial().await?);
        Ok(LeanConn::new(
            io,
            crate::observe::metrics::Counted::upstream(&self.conns),
        ))
    }

    /// Sends `req` on a new connection of `lane` (the kept one closed before it was written).
    async fn resend(
        &self,
        lane: &Lane,
        req: Request<ForwardBody>,
    ) -> Result<
        (
            http1::SendRequest<ForwardBody>,
            Response<hyper::body::Incoming>,
        ),
        String,
    > {
        let mut sender = self.connect(lane).await?;
        let resp = sender.send_request(req).await.map_err(|e| describe(&e))?;
        Ok((sender, resp))
    }

    /// Opens a connection to the upstream (TCP, and TLS for `https`).
    async fn dial(&self) -> Result<LeanIo, String> {
        let mut c = self.h1.clone();
        std::future::poll_fn(|cx| c.poll_ready(cx))
            .await
            .map_err(|e| format!("client error (Connect): {e}"))?;
        c.call(self.target.clone())
            .await
            .map_err(|e| format!("client error (Connect): {}", describe(&*e)))
    }

    /// Opens a connection to the upstream for `lane`, whose task drives it.
    async fn connect(&self, lane: &Lane) -> Result<http1::SendRequest<ForwardBody>, String> {
        let conn = self.dial_lean().await?;
        self.handshake(lane, conn).await
    }

    /// A hyper client connection on `conn`'s socket (a new one, or one a lean request left),
    /// driven by `lane`'s task.
    async fn handshake(
        &self,
        lane: &Lane,
        conn: LeanConn,
    ) -> Result<http1::SendRequest<ForwardBody>, String> {
        let (io, counted) = conn.into_parts();
        let (sender, conn) = http1::Builder::new()
            .handshake(io)
            .await
            .map_err(|e| describe(&e))?;
        let conn = async move {
            let _counted = counted;
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        };
        lane.adopt(Box::pin(conn));
        Ok(sender)
    }
}

/// An error with its chain of causes, for the log and the JSON-RPC error message.
fn describe(e: &(dyn std::error::Error + 'static)) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(inner) = src {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        src = inner.source();
    }
    s
}

/// Accepts any certificate: only with `--upstream-insecure`, for self-signed test upstreams.
#[derive(Debug)]
struct NoVerify;

impl ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }
    // rustls 0.23.48 deprecates the ring provider (it has no post-quantum key exchange). rpctap
    // keeps ring for now (another provider is a dependency change of its own); the fuzz crate,
    // which resolves its own versions, already builds against that rustls.
    #[allow(deprecated)]
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// Parses and checks an upstream URL: `http://` or `https://` with a host (what `--upstream`
/// and a replay's target accept).
pub fn parse_url(s: &str) -> Result<http::Uri, String> {
    let uri: http::Uri = s
        .parse()
        .map_err(|e| format!("--upstream {s:?} is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        _ => {
            return Err(format!(
                "--upstream {s:?} must start with http:// or https://"
            ))
        }
    }
    if uri.authority().is_none() {
        return Err(format!("--upstream {s:?} has no host"));
    }
    Ok(uri)
}

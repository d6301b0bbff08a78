//! The listener: accepts TCP connections, serves each with hyper-util's auto builder (HTTP/1.1
//! and h2c, upgrades allowed) under the connection-level limits ([`ConnLimits`]: a connection
//! cap, header, keep-alive and HTTP/2 limits), and shuts down gracefully: stop accepting, let
//! in-flight exchanges finish up to a grace period, then return.
//!
//! Each connection task runs [`supervise`]: it polls the hyper connection and, beside it, one
//! timer that closes a connection whose request head is not complete within the header timeout
//! or that has had no exchange for the keep-alive timeout (never while a reply, such as an SSE
//! stream, is still going out). What it needs to know is counted in a [`ConnState`] shared by the
//! socket wrapper ([`Watched`]: bytes arrived) and the service (exchanges begun, replies ended),
//! so a request costs a few relaxed atomic operations and no timer operation.

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// JSON-RPC error code of the `503` an over-cap connection gets.
pub const CODE_OVERLOADED: i64 = -32006;

/// Connection-level limits of a listener. The defaults are the documented ones (README, "Limits
/// on connections").
#[derive(Clone, Debug, PartialEq)]
pub struct ConnLimits {
    /// Most client connections served at once; beyond it a new connection gets one `503` (with
    /// `Retry-After`, and a JSON-RPC error per call when the request holds calls) and is closed.
    pub max_connections: usize,
    /// A request head (the first one, counted from accept; a later one, from its first byte)
    /// must be complete within this, or the connection is closed.
    pub header_timeout: Duration,
    /// A client connection with no exchange in flight for this long is closed.
    pub keepalive_timeout: Duration,
    /// Largest request head (start line and headers) in bytes, HTTP/1 (`431` beyond it) and
    /// HTTP/2 (the header list).
    pub max_header_bytes: usize,
    /// Most header fields in an HTTP/1 request (`431` beyond it).
    pub max_headers: usize,
    /// Most concurrent streams of an HTTP/2 connection.
    pub h2_max_streams: u32,
}

impl Default for ConnLimits {
    fn default() -> Self {
        ConnLimits {
            max_connections: 10_000,
            header_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(300),
            max_header_bytes: 64 * 1024,
            max_headers: HYPER_MAX_HEADERS,
            h2_max_streams: 100,
        }
    }
}

/// hyper's own default count of HTTP/1 header fields (parsed on the stack; any other value makes
/// it allocate them per request, so it is only set when changed).
pub const HYPER_MAX_HEADERS: usize = 100;
/// HTTP/2 rapid-reset defence (CVE-2023-44487): most streams a client may open and reset before
/// the server has accepted them; beyond it the connection is closed with `ENHANCE_YOUR_CALM`.
pub const H2_MAX_PENDING_RESETS: usize = 20;
/// Most streams the server may reset for a client's protocol errors before closing the
/// connection.
pub const H2_MAX_LOCAL_RESETS: usize = 1024;
/// Most over-cap connections answered with a `503` at once; beyond it they are closed at accept.
const MAX_REFUSING: usize = 64;
/// How long an over-cap connection gets to send the request its `503` answers.
const REFUSE_WITHIN: Duration = Duration::from_secs(2);
/// The over-cap notice is repeated at most this often.
const NOTICE_EVERY: Duration = Duration::from_secs(10);

/// What a listener counts, for the metrics.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Client connections being served now.
    pub open: AtomicUsize,
    /// Connections answered `503` (or closed at accept) because the cap was reached.
    pub refused: AtomicU64,
    /// Connections closed because a request head was not complete in time.
    pub header_timeouts: AtomicU64,
    /// Connections closed after the keep-alive timeout.
    pub idle_closed: AtomicU64,
    /// Idle HTTP/1 connections parked now (only their socket kept, see [`Machine`]).
    pub parked: AtomicUsize,
}

/// Counts a connection in [`ListenerStats::parked`] while `on`.
struct ParkedGauge {
    stats: Arc<ListenerStats>,
    on: bool,
}

impl ParkedGauge {
    fn set(&mut self, on: bool) {
        if on != self.on {
            self.on = on;
            if on {
                self.stats.parked.fetch_add(1, Relaxed);
            } else {
                self.stats.parked.fetch_sub(1, Relaxed);
            }
        }
    }
}

impl Drop for ParkedGauge {
    fn drop(&mut self) {
        self.set(false);
    }
}

/// How a listener serves: limits, grace period, counters.
#[derive(Clone, Debug)]
pub struct ServeOptions {
    pub limits: ConnLimits,
    /// How long in-flight exchanges get to finish after the shutdown signal.
    pub grace: Duration,
    pub stats: Arc<ListenerStats>,
}

impl ServeOptions {
    pub fn new(limits: ConnLimits, grace: Duration) -> Self {
        ServeOptions {
            limits,
            grace,
            stats: Arc::default(),
        }
    }
}

/// Serves on `listener` until `shutdown` resolves, then drains for at most `grace`, with the
/// default [`ConnLimits`].
/// `per_connection` is called once per accepted connection with the peer's address and returns
/// that connection's request handler (so a handler can keep per-connection state).
pub async fn serve<M, H, F, B>(
    listener: TcpListener,
    per_connection: M,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) where
    M: Fn(SocketAddr) -> H,
    H: Fn(Request<RequestBody>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    serve_with(
        listener,
        |peer| (per_connection(peer), std::future::pending::<()>()),
        shutdown,
        ServeOptions::new(ConnLimits::default(), grace),
    )
    .await;
}

/// Like [`serve`], but `per_connection` also returns a companion future that runs in the
/// connection's own task, polled right after the connection itself, until the connection ends
/// (the proxy drives its upstream connection there, so a request and its reply never wake
/// another task).
pub async fn serve_with<M, H, S, F, B>(
    listener: TcpListener,
    per_connection: M,
    shutdown: impl Future<Output = ()>,
    opts: ServeOptions,
) where
    M: Fn(SocketAddr) -> (H, S),
    H: Fn(Request<RequestBody>) -> F + Send + Sync + 'static,
    S: Future<Output = ()> + Send + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let ServeOptions {
        limits,
        grace,
        stats,
    } = opts;
    let builders = Arc::new(Builders::new(&limits));
    let limits = Arc::new(limits);
    // The drain signal: every connection holds a receiver until it ends, so `closed()` resolves
    // when the last one is done (hyper-util's `GracefulShutdown` design; see `supervise`).
    let (drain, drain_rx) = watch::channel(());
    let refusing = Arc::new(AtomicUsize::new(0));
    let mut notices = Notices::default();
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends (the connection cap keeps below the fd limit, see
                // `raise_fd_limit`): back off, and say so at most every few seconds.
                notices.accept_failed(&e);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        if stats.open.load(Relaxed) >= limits.max_connections {
            stats.refused.fetch_add(1, Relaxed);
            notices.over_cap(limits.max_connections);
            if refusing.load(Relaxed) < MAX_REFUSING {
                refusing.fetch_add(1, Relaxed);
                let (refusing, max) = (refusing.clone(), limits.max_connections);
                tokio::spawn(async move {
                    refuse(stream, max).await;
                    refusing.fetch_sub(1, Relaxed);
                });
            }
            // else: dropped, which closes it.
            continue;
        }
        let open = Open::new(&stats);
        let state = Arc::new(ConnState::default());
        let (h, companion) = per_connection(peer);
        let h = Arc::new(h);
        let svc_state = state.clone();
        let service = hyper::service::service_fn(move |req: Request<Incoming>| {
            let active = Active::begin(&svc_state);
            let fut = h(req.map(|b| RequestBody::new(b, &svc_state)));
            Exchange {
                fut: Box::pin(fut),
                active: Some(active),
            }
        });
        let io = Watched {
            io: stream,
            prefix: None,
            state: state.clone(),
        };
        let conn = supervise(
            Machine::Parked {
                io,
                first: true,
                svc: service,
            },
            builders.clone(),
            drain_rx.clone(),
            state,
            limits.clone(),
            stats.clone(),
        );
        tokio::spawn(ConnTask {
            conn,
            companion,
            open,
            peer,
        });
    }
    drop(listener);
    tracing::info!(
        grace_secs = grace.as_secs_f64(),
        "shutting down: draining connections"
    );
    drop(drain_rx);
    let _ = drain.send(());
    if tokio::time::timeout(grace, drain.closed()).await.is_err() {
        tracing::warn!("grace period over; closing the remaining connections");
    }
}

/// An exchange's future as hyper holds it: the handler's future, boxed, and the exchange's
/// count. Boxed per request because hyper keeps its HTTP/1 connection's slot for this future
/// allocated for the connection's whole life, at this type's size — kilobytes for the proxy's
/// handler, a pointer this way — so an idle connection does not keep a handler's worth of memory.
struct Exchange<F> {
    fut: Pin<Box<F>>,
    active: Option<Active>,
}

impl<F, B> Future for Exchange<F>
where
    F: Future<Output = Response<B>>,
{
    type Output = Result<Response<Tracked<B>>, Infallible>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let resp = std::task::ready!(self.fut.as_mut().poll(cx));
        match self.active.take() {
            Some(active) => Poll::Ready(Ok(resp.map(|body| Tracked {
                body,
                _active: active,
            }))),
            // Polled again after it was ready: hyper never does.
            None => Poll::Pending,
        }
    }
}

/// hyper's HTTP/1 and HTTP/2 server builders, with the limits applied; one per listener.
pub struct Builders {
    h1: hyper::server::conn::http1::Builder,
    h2: hyper::server::conn::http2::Builder<TokioExecutor>,
}

impl Builders {
    fn new(limits: &ConnLimits) -> Self {
        let mut h1 = hyper::server::conn::http1::Builder::new();
        // A head cannot grow past the read buffer's cap (hyper answers 431); request bodies are
        // read in chunks of at most this size too. hyper's floor for it is 8 KiB.
        h1.max_buf_size(limits.max_header_bytes.max(8192));
        if limits.max_headers != HYPER_MAX_HEADERS {
            h1.max_headers(limits.max_headers);
        }
        let mut h2 = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        h2.max_concurrent_streams(limits.h2_max_streams)
            .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
            .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
            .max_local_error_reset_streams(H2_MAX_LOCAL_RESETS);
        Builders { h1, h2 }
    }
}

type Io = TokioIo<Watched>;

/// A client connection's protocol state. HTTP/1 is served by a hyper connection while
/// exchanges come, and **parked** when it has been idle a while ([`PARK_AFTER`]): hyper's
/// connection is taken apart (its read and write buffers, some 25 KiB, freed) and only the
/// socket is kept until its next bytes arrive, when a new hyper connection picks up where the
/// last one stopped. HTTP/2 (prior knowledge, seen from the first bytes) is served by one hyper
/// connection for its life.
pub enum Machine<S: hyper::service::HttpService<Incoming>> {
    /// Waiting for bytes with only the socket; `first`: nothing read yet, the protocol is still
    /// to be seen.
    Parked {
        io: Watched,
        first: bool,
        svc: S,
    },
    H1(Pin<Box<hyper::server::conn::http1::UpgradeableConnection<Io, S>>>),
    H2(Pin<Box<hyper::server::conn::http2::Connection<Io, S, TokioExecutor>>>),
    /// Closed (after a drain signal while parked), or between two of the above.
    Gone,
}

/// An HTTP/1 connection idle this long (no exchange began, none in flight, all written) is
/// parked.
const PARK_AFTER: Duration = Duration::from_secs(1);

/// What [`supervise`] does with a connection's protocol state.
pub trait Supervised {
    /// Drives the connection; `Ready` when it has ended.
    fn poll(&mut self, cx: &mut Context<'_>, b: &Builders) -> Poll<Result<(), BoxError>>;
    /// The drain signal.
    fn shutdown(&mut self);
    /// An idle HTTP/1 connection gives up hyper's state (see [`Machine`]).
    fn park(&mut self);
    /// Served by hyper over HTTP/1 now (so it may be parked).
    fn serving_h1(&self) -> bool;
    /// Parked after an exchange (not: still waiting for its first bytes).
    fn parked(&self) -> bool;
}

impl<S, B> Supervised for Machine<S>
where
    S: hyper::service::Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Unpin
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    fn serving_h1(&self) -> bool {
        matches!(self, Machine::H1(_))
    }

    fn parked(&self) -> bool {
        matches!(self, Machine::Parked { first: false, .. })
    }

    fn poll(&mut self, cx: &mut Context<'_>, b: &Builders) -> Poll<Result<(), BoxError>> {
        loop {
            match self {
                Machine::Parked { io, first, .. } => {
                    let h2 = if *first {
                        match std::task::ready!(io.poll_protocol(cx)) {
                            Ok(Some(h2)) => h2,
                            Ok(None) => return Poll::Ready(Ok(())),
                            Err(e) => return Poll::Ready(Err(e.into())),
                        }
                    } else {
                        if io.prefix.is_none() {
                            if let Err(e) = std::task::ready!(io.io.poll_read_ready(cx)) {
                                return Poll::Ready(Err(e.into()));
                            }
                        }
                        false
                    };
                    let Machine::Parked { io, svc, .. } = std::mem::replace(self, Machine::Gone)
                    else {
                        unreachable!("matched above")
                    };
                    *self = if h2 {
                        Machine::H2(Box::pin(b.h2.serve_connection(TokioIo::new(io), svc)))
                    } else {
                        Machine::H1(Box::pin(
                            b.h1.serve_connection(TokioIo::new(io), svc).with_upgrades(),
                        ))
                    };
                }
                Machine::H1(c) => return c.as_mut().poll(cx).map_err(Into::into),
                Machine::H2(c) => return c.as_mut().poll(cx).map_err(Into::into),
                Machine::Gone => return Poll::Ready(Ok(())),
            }
        }
    }

    /// The drain signal: a parked connection closes at once; a served one finishes the
    /// exchange in flight and closes instead of keeping alive.
    fn shutdown(&mut self) {
        match self {
            Machine::Parked { .. } => *self = Machine::Gone,
            Machine::H1(c) => c.as_mut().graceful_shutdown(),
            Machine::H2(c) => c.as_mut().graceful_shutdown(),
            Machine::Gone => {}
        }
    }

    /// Takes an idle HTTP/1 connection apart, keeping the socket and whatever hyper had read
    /// but not used (handed to the next connection first).
    fn park(&mut self) {
        if !matches!(self, Machine::H1(_)) {
            return;
        }
        let Machine::H1(c) = std::mem::replace(self, Machine::Gone) else {
            unreachable!("matched above")
        };
        // `None` only once upgraded, when the connection has already resolved.
        if let Some(parts) = Pin::into_inner(c).into_parts() {
            let mut io = parts.io.into_inner();
            if !parts.read_buf.is_empty() {
                io.prefix = Some(parts.read_buf);
            }
            *self = Machine::Parked {
                io,
                first: false,
                svc: parts.service,
            };
        }
    }
}

pin_project_lite::pin_project! {
    /// A connection's task: the supervised connection, then its companion, polled in this order
    /// until either ends. A struct rather than an `async` block: a block keeps what it captures
    /// apart from what it polls, so the connection (kilobytes) would take its room twice.
    struct ConnTask<C, S> {
        #[pin]
        conn: C,
        #[pin]
        companion: S,
        open: Open,
        peer: SocketAddr,
    }
}

impl<C, S> Future for ConnTask<C, S>
where
    C: Future<Output = Ended<Result<(), BoxError>>>,
    S: Future<Output = ()>,
{
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.project();
        let stats = &this.open.0;
        let peer = *this.peer;
        if let Poll::Ready(r) = this.conn.poll(cx) {
            match r {
                Ended::Conn(Err(e)) => {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
                Ended::Conn(Ok(())) => {}
                Ended::HeaderTimeout => {
                    stats.header_timeouts.fetch_add(1, Relaxed);
                    tracing::debug!(%peer, "closed: request head not complete in time");
                }
                Ended::Idle => {
                    stats.idle_closed.fetch_add(1, Relaxed);
                    tracing::debug!(%peer, "closed: idle past the keep-alive timeout");
                }
            }
            return Poll::Ready(());
        }
        this.companion.poll(cx)
    }
}

/// A connection counted open while this lives.
struct Open(Arc<ListenerStats>);

impl Open {
    fn new(stats: &Arc<ListenerStats>) -> Self {
        stats.open.fetch_add(1, Relaxed);
        Open(stats.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Relaxed);
    }
}

/// Rate-limited notices of the accept loop: the first occurrence at once, then at most one line
/// every [`NOTICE_EVERY`] with the count since the last.
#[derive(Default)]
struct Notices {
    over_cap: (Option<Instant>, u64),
    accept: (Option<Instant>, u64),
}

impl Notices {
    fn due(slot: &mut (Option<Instant>, u64)) -> Option<u64> {
        slot.1 += 1;
        let now = Instant::now();
        if slot.0.is_some_and(|t| now.duration_since(t) < NOTICE_EVERY) {
            return None;
        }
        slot.0 = Some(now);
        Some(std::mem::take(&mut slot.1))
    }
    fn over_cap(&mut self, max: usize) {
        if let Some(n) = Self::due(&mut self.over_cap) {
            tracing::warn!(
                max_connections = max,
                refused = n,
                "connection cap reached: new connections are answered 503 and closed"
            );
        }
    }
    fn accept_failed(&mut self, e: &std::io::Error) {
        if let Some(n) = Self::due(&mut self.accept) {
            tracing::warn!(error = %e, failures = n, "accept failed");
        }
    }
}

/// Answers an over-cap connection's first request with `503`, `Retry-After: 1` and
/// `Connection: close`: for a JSON-RPC call (a POST whose body parses as one, or a batch) the body
/// is a JSON-RPC error per call, otherwise one line of text. The request gets [`REFUSE_WITHIN`]
/// to arrive; its body is read up to 64 KiB.
async fn refuse(stream: TcpStream, max: usize) {
    let message = format!("rpctap: too many connections (the cap is {max}); retry later");
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let message = message.clone();
        async move { Ok::<_, Infallible>(refusal(req, &message).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .max_buf_size(16 * 1024)
        .serve_connection(TokioIo::new(stream), svc);
    let _ = tokio::time::timeout(REFUSE_WITHIN, conn).await;
}

async fn refusal(
    req: Request<Incoming>,
    message: &str,
) -> Response<http_body_util::Full<bytes::Bytes>> {
    use http_body_util::BodyExt;
    let rpc = req.method() == http::Method::POST;
    let body = if rpc {
        http_body_util::Limited::new(req.into_body(), 64 * 1024)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .ok()
    } else {
        None
    };
    let text = body.and_then(|b| {
        let (batch, ids) = crate::rpc::call_ids(&b);
        crate::rpc::error_replies(batch, &ids, CODE_OVERLOADED, message)
    });
    let (ct, text) = match text {
        Some(t) => ("application/json", t),
        None => ("text/plain; charset=utf-8", format!("{message}\n")),
    };
    let mut r = Response::new(http_body_util::Full::new(bytes::Bytes::from(text)));
    *r.status_mut() = http::StatusCode::SERVICE_UNAVAILABLE;
    let h = r.headers_mut();
    h.insert(
        http::header::RETRY_AFTER,
        http::HeaderValue::from_static("1"),
    );
    h.insert(
        http::header::CONNECTION,
        http::HeaderValue::from_static("close"),
    );
    h.insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ct),
    );
    r
}

/// What a connection's supervisor reads: written by the socket wrapper (arrivals) and the
/// service (exchanges), all relaxed — the supervisor only needs to see them eventually, on its
/// next poll or timer.
#[derive(Debug, Default)]
pub struct ConnState {
    /// Reads that returned bytes.
    reads: AtomicU32,
    /// `reads` when the last exchange ended: more since means a new request head has begun.
    reads_at_idle: AtomicU32,
    /// Exchanges begun.
    requests: AtomicU32,
    /// Exchanges whose reply has not ended.
    active: AtomicU32,
    /// The client spoke HTTP/2 (its first bytes were the connection preface): its idle frames
    /// (PING, SETTINGS) are not a request head in progress.
    h2: AtomicBool,
    /// Request bodies not yet read to their end (nor dropped): hyper is still reading one.
    bodies: AtomicU32,
    /// Bytes were written, or a write had to wait, since the last completed flush: hyper may
    /// still hold or be sending a reply.
    dirty: AtomicBool,
}

impl ConnState {
    /// Whether hyper's HTTP/1 connection is between exchanges with nothing left to do: no
    /// exchange in flight, every request body read, every reply flushed, no bytes of a next
    /// request arrived.
    fn quiescent(&self) -> bool {
        self.active.load(Relaxed) == 0
            && self.bodies.load(Relaxed) == 0
            && !self.dirty.load(Relaxed)
            && self.reads.load(Relaxed) == self.reads_at_idle.load(Relaxed)
    }
}

/// A request's body as handlers get it: hyper's, counted in its connection's state until it has
/// been read to its end or dropped (a connection is only parked between exchanges).
pub struct RequestBody {
    inner: Incoming,
    state: Option<Arc<ConnState>>,
}

impl RequestBody {
    fn new(inner: Incoming, state: &Arc<ConnState>) -> Self {
        let state = (!inner.is_end_stream()).then(|| {
            state.bodies.fetch_add(1, Relaxed);
            state.clone()
        });
        RequestBody { inner, state }
    }
    fn done(&mut self) {
        if let Some(s) = self.state.take() {
            s.bodies.fetch_sub(1, Relaxed);
        }
    }
}

impl Drop for RequestBody {
    fn drop(&mut self) {
        self.done();
    }
}

impl std::fmt::Debug for RequestBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RequestBody")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Body for RequestBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>>> {
        let r = Pin::new(&mut self.inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_))))
            || (r.is_ready() && self.inner.is_end_stream())
        {
            self.done();
        }
        r
    }
    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }
    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// One exchange counted active from its request until its reply body is dropped (sent, or
/// abandoned).
struct Active(Arc<ConnState>);

impl Active {
    fn begin(s: &Arc<ConnState>) -> Self {
        s.requests.fetch_add(1, Relaxed);
        s.active.fetch_add(1, Relaxed);
        Active(s.clone())
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        let s = &self.0;
        s.reads_at_idle.store(s.reads.load(Relaxed), Relaxed);
        s.active.fetch_sub(1, Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// A reply body that keeps its exchange counted active until it is dropped.
    pub struct Tracked<B> {
        #[pin]
        body: B,
        _active: Active,
    }
}

impl<B: Body> Body for Tracked<B> {
    type Data = B::Data;
    type Error = B::Error;
    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<B::Data>, B::Error>>> {
        self.project().body.poll_frame(cx)
    }
    #[inline]
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    #[inline]
    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// The client socket, counting the reads that brought bytes and the writes not yet flushed;
/// `prefix` holds bytes a parked connection's hyper had read and not used, read first.
pub struct Watched {
    io: TcpStream,
    prefix: Option<bytes::Bytes>,
    state: Arc<ConnState>,
}

impl Watched {
    /// Waits for the first bytes and tells the protocol: `Some(true)` for the HTTP/2 preface
    /// (`PRI …`), `Some(false)` for anything else, `None` when the client closed first.
    fn poll_protocol(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<Option<bool>>> {
        const PREFACE: &[u8] = b"PRI";
        loop {
            let mut buf = [0u8; 3];
            let mut rb = ReadBuf::new(&mut buf);
            std::task::ready!(self.io.poll_peek(cx, &mut rb))?;
            let seen = rb.filled();
            if seen.is_empty() {
                return Poll::Ready(Ok(None));
            }
            if seen.len() == PREFACE.len() || !PREFACE.starts_with(seen) {
                let h2 = seen == PREFACE;
                if h2 {
                    self.state.h2.store(true, Relaxed);
                }
                return Poll::Ready(Ok(Some(h2)));
            }
            // A prefix of the preface: wait for more. A peek leaves the socket readable, so the
            // readiness is cleared first (or the next peek would answer at once, forever).
            let _ = self.io.try_io(tokio::io::Interest::READABLE, || {
                Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
            });
        }
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(mut p) = self.prefix.take() {
            let n = p.len().min(buf.remaining());
            buf.put_slice(&p.split_to(n));
            if !p.is_empty() {
                self.prefix = Some(p);
            }
            return Poll::Ready(Ok(()));
        }
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            let s = &self.state;
            let n = s.reads.load(Relaxed);
            if n == 0 && buf.filled()[before..].starts_with(b"PRI ") {
                s.h2.store(true, Relaxed);
            }
            // Only this socket's task writes `reads`: a plain store, no locked add.
            s.reads.store(n.wrapping_add(1), Relaxed);
        }
        r
    }
}

impl AsyncWrite for Watched {
    #[inline]
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        self.state.dirty.store(true, Relaxed);
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    #[inline]
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        self.state.dirty.store(true, Relaxed);
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    #[inline]
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let r = Pin::new(&mut self.io).poll_flush(cx);
        if matches!(r, Poll::Ready(Ok(()))) {
            self.state.dirty.store(false, Relaxed);
        }
        r
    }
    #[inline]
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// How a supervised connection ended.
#[derive(Debug)]
pub enum Ended<T> {
    /// By itself (hyper's result).
    Conn(T),
    /// Closed: a request head was not complete within the header timeout.
    HeaderTimeout,
    /// Closed: no exchange for the keep-alive timeout.
    Idle,
}

/// Idle connections are looked at this many times per keep-alive timeout: one is closed after
/// `IDLE_TICKS` quiet looks in a row, between 1 and 1 + 1/(`IDLE_TICKS` − 1) times the timeout
/// after its last exchange — a timer per connection every few tens of seconds instead of a
/// timer reset on every request.
const IDLE_TICKS: u32 = 9;

/// Runs a connection's [`Machine`] until the connection ends, or closes it (drops it) when a
/// limit says so; parks it when idle; once `drain` signals, shuts it down once (a served
/// connection finishes the exchange in flight and closes instead of keeping alive; a parked one
/// closes). A receiver is held until the connection ends, which is what the drain waits for.
///
/// The drain is watched here rather than by hyper-util's `GracefulShutdown::watch`, which polls
/// its watch future on every wake of every connection — a mutex lock and a waker comparison each
/// time, a visible share of a proxied call (benches/RESULTS.md). This polls that future once, to
/// register for the wake-up, and afterwards only when the channel says a value was sent (one
/// atomic load per wake). A connection task's waker does not change, so the one registration
/// stays valid.
///
/// The limits use one timer: due at the header deadline while a head is awaited (from accept for
/// the first request; from the poll that first sees a later head's bytes, which is the wake-up
/// of their arrival), else at the next idle look, or the next park look while hyper serves
/// HTTP/1. A request whose head arrives whole in one read touches no timer.
pub async fn supervise(
    mut machine: impl Supervised,
    builders: Arc<Builders>,
    drain: watch::Receiver<()>,
    state: Arc<ConnState>,
    limits: Arc<ConnLimits>,
    stats: Arc<ListenerStats>,
) -> Ended<Result<(), BoxError>> {
    // `gate` is the receiver held for the connection's life; `signal` waits on a second one.
    let gate = drain.clone();
    let mut signal = std::pin::pin!(async move {
        let mut drain = drain;
        // Err: the sender is gone, which also means stop.
        let _ = drain.changed().await;
    });
    let (mut armed, mut fired) = (false, false);
    let tick = limits.keepalive_timeout / (IDLE_TICKS - 1);
    let start = Instant::now();
    // The first head is due `header_timeout` after accept.
    let mut head_due: Option<Instant> = Some(start + limits.header_timeout);
    // The head being timed: `reads_at_idle` and `requests` when its timer was armed.
    let mut head_of = (0u32, 0u32);
    let mut next_look = start + tick;
    // While hyper serves HTTP/1: when to look whether it has been idle long enough to park,
    // and `requests` at the last look.
    let mut park_look: Option<Instant> = None;
    let mut park_seen = u32::MAX;
    let mut timer = std::pin::pin!(tokio::time::sleep_until(
        head_due.map_or(next_look, |h| h.min(next_look)),
    ));
    let mut quiet = 0u32;
    let mut seen = 0u32;
    let mut parked_gauge = ParkedGauge { stats, on: false };
    // The timer was polled (its waker registered) since it was last reset.
    let mut registered = false;
    std::future::poll_fn(move |cx| {
        if !fired && (!armed || gate.has_changed().unwrap_or(true)) {
            armed = true;
            if signal.as_mut().poll(cx).is_ready() {
                fired = true;
                machine.shutdown();
            }
        }
        let s = &*state;
        loop {
            let polled = machine.poll(cx, &builders);
            parked_gauge.set(machine.parked());
            if let Poll::Ready(out) = polled {
                return Poll::Ready(Ended::Conn(out));
            }
            let requests = s.requests.load(Relaxed);
            if machine.serving_h1() && park_look.is_none() && !fired {
                let due = Instant::now() + PARK_AFTER;
                park_look = Some(due);
                park_seen = requests;
                if due < timer.deadline() {
                    timer.as_mut().reset(due);
                    registered = false;
                }
            }
            // The head being timed has come whole (an exchange began since): no deadline.
            if head_due.is_some() && requests != head_of.1 {
                head_due = None;
            }
            // A later request head in progress: bytes since the last exchange ended, none
            // active (an HTTP/2 client's idle frames are not one).
            if head_due.is_none() && s.active.load(Relaxed) == 0 && !s.h2.load(Relaxed) {
                let at_idle = s.reads_at_idle.load(Relaxed);
                if s.reads.load(Relaxed) != at_idle && (at_idle, requests) != head_of {
                    head_of = (at_idle, requests);
                    let due = Instant::now() + limits.header_timeout;
                    head_due = Some(due);
                    if due < timer.deadline() {
                        timer.as_mut().reset(due);
                        registered = false;
                    }
                }
            }
            // Registered and not yet due: no need to poll it again (a `Sleep` poll re-checks its
            // waker and the coop budget — a visible share of a proxied call, several polls each).
            if registered && !timer.is_elapsed() {
                return Poll::Pending;
            }
            if timer.as_mut().poll(cx).is_pending() {
                registered = true;
                return Poll::Pending;
            }
            let now = timer.deadline();
            let active = s.active.load(Relaxed);
            if let Some(due) = head_due {
                if now >= due {
                    head_due = None;
                    // Still waiting for that head: no exchange began since it was armed (for
                    // the first head, none at all).
                    if active == 0 && requests == head_of.1 {
                        return Poll::Ready(Ended::HeaderTimeout);
                    }
                }
            }
            if now >= next_look {
                next_look = now + tick;
                if active > 0 || requests != seen {
                    quiet = 0;
                    seen = requests;
                } else {
                    quiet += 1;
                    if quiet >= IDLE_TICKS {
                        return Poll::Ready(Ended::Idle);
                    }
                }
            }
            let mut parked = false;
            if let Some(due) = park_look {
                if now >= due {
                    if requests == park_seen && head_due.is_none() && !fired && s.quiescent() {
                        machine.park();
                        park_look = None;
                        parked = true;
                    } else {
                        park_seen = requests;
                        park_look = Some(now + PARK_AFTER);
                    }
                }
            }
            let due = [head_due, park_look]
                .into_iter()
                .flatten()
                .fold(next_look, Instant::min);
            timer.as_mut().reset(due);
            registered = false;
            if parked {
                // Poll the parked socket now, to be woken by its next bytes.
                continue;
            }
        }
    })
    .await
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A shutdown closes idle kept-alive connections at once (each connection registered for
    /// the drain signal on its first poll, and is woken by it), so serving returns long before
    /// the grace period; a connection that never sent a request is closed too.
    #[tokio::test]
    async fn shutdown_closes_idle_connections_without_waiting_for_the_grace() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            |_peer| {
                |_req: Request<RequestBody>| async {
                    Response::new(http_body_util::Full::new(hyper::body::Bytes::from("ok")))
                }
            },
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(30),
        ));
        let mut used = tokio::net::TcpStream::connect(addr).await.unwrap();
        used.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 1024];
        let n = used.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].ends_with(b"ok"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await; // both connections served, idle
        let started = std::time::Instant::now();
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serving ended before the grace period")
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        for conn in [&mut used, &mut silent] {
            let n = tokio::time::timeout(Duration::from_secs(1), conn.read(&mut buf))
                .await
                .expect("closed, not left open")
                .unwrap_or(0);
            assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&buf[..n]));
        }
    }
}

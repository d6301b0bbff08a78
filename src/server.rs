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
use hyper_util::server::conn::auto::Builder;
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
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
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
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
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
    let builder = Arc::new(builder(&limits));
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
        let svc_state = state.clone();
        let service = hyper::service::service_fn(move |req| {
            let active = Active::begin(&svc_state);
            let fut = h(req);
            // Boxed per request: hyper keeps its HTTP/1 connection's slot for the exchange's
            // future allocated for the connection's whole life, at the future's size (kilobytes
            // for the proxy's); boxed, an idle connection keeps a pointer.
            Exchange {
                fut: Box::pin(fut),
                active: Some(active),
            }
        });
        let io = TokioIo::new(Watched {
            io: stream,
            state: state.clone(),
        });
        let b = builder.clone();
        let conn = supervise(
            move || b.serve_connection_with_upgrades(io, service).into_owned(),
            drain_rx.clone(),
            |c| c.graceful_shutdown(),
            state,
            limits.clone(),
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

/// The hyper server builder with the limits applied.
fn builder(limits: &ConnLimits) -> Builder<TokioExecutor> {
    let mut b = Builder::new(TokioExecutor::new());
    {
        let mut h1 = b.http1();
        // A head cannot grow past the read buffer's cap (hyper answers 431); request bodies are
        // read in chunks of at most this size too. hyper's floor for it is 8 KiB.
        h1.max_buf_size(limits.max_header_bytes.max(8192));
        if limits.max_headers != HYPER_MAX_HEADERS {
            h1.max_headers(limits.max_headers);
        }
    }
    b.http2()
        .max_concurrent_streams(limits.h2_max_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(H2_MAX_PENDING_RESETS)
        .max_local_error_reset_streams(H2_MAX_LOCAL_RESETS);
    b
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

impl<C, S, E> Future for ConnTask<C, S>
where
    C: Future<Output = Ended<Result<(), E>>>,
    S: Future<Output = ()>,
    E: std::fmt::Display,
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
    h.insert(http::header::RETRY_AFTER, http::HeaderValue::from_static("1"));
    h.insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    h.insert(http::header::CONTENT_TYPE, http::HeaderValue::from_static(ct));
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

/// The client socket, counting the reads that brought bytes.
pub struct Watched {
    io: TcpStream,
    state: Arc<ConnState>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
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
        Pin::new(&mut self.io).poll_write(cx, buf)
    }
    #[inline]
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }
    #[inline]
    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
    #[inline]
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }
    #[inline]
    fn poll_shutdown(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
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

/// Runs the connection `conn` makes until it ends, or closes it (drops it) when a limit says so; once `drain`
/// signals, calls `shut` on it once (hyper then finishes the exchange in flight and closes the
/// connection instead of keeping it alive). A receiver is held until `conn` ends, which is what
/// the drain waits for.
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
/// of their arrival), else at the next idle look. A request whose head arrives whole in one read
/// touches no timer.
pub async fn supervise<C: Future>(
    conn: impl FnOnce() -> C,
    drain: watch::Receiver<()>,
    shut: fn(Pin<&mut C>),
    state: Arc<ConnState>,
    limits: Arc<ConnLimits>,
) -> Ended<C::Output> {
    // `gate` is the receiver held for the connection's life; `signal` waits on a second one.
    let gate = drain.clone();
    let mut signal = std::pin::pin!(async move {
        let mut drain = drain;
        // Err: the sender is gone, which also means stop.
        let _ = drain.changed().await;
    });
    // Made here, not passed in: an `async fn` keeps its arguments apart from its locals, so a
    // connection passed by value would take its (kilobytes of) room twice in every task.
    let mut conn = std::pin::pin!(conn());
    let (mut armed, mut fired) = (false, false);
    let tick = limits.keepalive_timeout / (IDLE_TICKS - 1);
    let start = Instant::now();
    // The first head is due `header_timeout` after accept.
    let mut head_due: Option<Instant> = Some(start + limits.header_timeout);
    // The head being timed: `reads_at_idle` and `requests` when its timer was armed.
    let mut head_of = (0u32, 0u32);
    let mut next_look = start + tick;
    let mut timer = std::pin::pin!(tokio::time::sleep_until(
        head_due.map_or(next_look, |h| h.min(next_look)),
    ));
    let mut quiet = 0u32;
    let mut seen = 0u32;
    std::future::poll_fn(move |cx| {
        if !fired && (!armed || gate.has_changed().unwrap_or(true)) {
            armed = true;
            if signal.as_mut().poll(cx).is_ready() {
                fired = true;
                shut(conn.as_mut());
            }
        }
        if let Poll::Ready(out) = conn.as_mut().poll(cx) {
            return Poll::Ready(Ended::Conn(out));
        }
        let s = &*state;
        loop {
            let requests = s.requests.load(Relaxed);
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
                    }
                }
            }
            if timer.as_mut().poll(cx).is_pending() {
                break;
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
            let due = head_due.map_or(next_look, |h| h.min(next_look));
            timer.as_mut().reset(due);
        }
        Poll::Pending
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
                |_req: Request<Incoming>| async {
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

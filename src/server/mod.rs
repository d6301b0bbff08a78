//! The listener: accepts TCP connections, serves each (HTTP/1.1 and h2c, upgrades allowed;
//! whole JSON-RPC `POST`s read and answered by `lean.rs`, everything else by hyper) under the
//! connection-level limits ([`ConnLimits`]: a connection
//! cap, header, keep-alive and HTTP/2 limits), and shuts down gracefully: stop accepting, let
//! in-flight exchanges finish up to a grace period, then return.
//!
//! Each connection task runs [`supervise`] (`machine.rs`): it drives the connection's
//! [`Machine`] — hyper's HTTP/1 connection, parked while idle, or HTTP/2 — and, beside it, one
//! timer that closes a connection whose request head is not complete within the header timeout
//! or that has had no exchange for the keep-alive timeout (never while a reply, such as an SSE
//! stream, is still going out), and parks an idle HTTP/1 one. What it needs to know is counted
//! in a [`ConnState`] (`conn.rs`) shared by the socket wrapper ([`Watched`]: bytes arrived,
//! replies flushed) and the service (exchanges begun, replies ended, bodies read), so a request
//! costs a few relaxed atomic operations and no timer operation.

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

mod conn;
pub mod guard;
mod lean;
#[cfg(feature = "fuzzing")]
pub use lean::fuzz_read_request;
mod machine;

pub use conn::{ConnState, Handoff, LongStream, RequestBody, Tracked, Watched};
pub use machine::{supervise, Builders, Ended, Machine, Supervised};

use conn::{Active, Exchange};

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

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
    /// Long streams written by their connection's supervisor now, without hyper's connection
    /// (see [`LongStream`]).
    pub streaming: AtomicUsize,
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
    B: Body + Send + Unpin + 'static,
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
    B: Body + Send + Unpin + 'static,
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
        let handoff = Arc::new(Handoff::default());
        let service = Svc {
            h: Arc::new(h),
            state: state.clone(),
            handoff: handoff.clone(),
        };
        let io = Watched {
            io: stream,
            prefix: None,
            state: state.clone(),
        };
        let conn = supervise(
            Machine::new(io, service, handoff),
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

/// A connection's service: begins each exchange (counted in the connection's state, its
/// future boxed, a long stream's hand-off prepared) for hyper or for the connection's own reading
/// of whole requests (`machine::WholeCall`).
struct Svc<H, B> {
    h: Arc<H>,
    state: Arc<ConnState>,
    handoff: Arc<Handoff<Tracked<B>>>,
}

impl<H, B> Clone for Svc<H, B> {
    fn clone(&self) -> Self {
        Svc {
            h: self.h.clone(),
            state: self.state.clone(),
            handoff: self.handoff.clone(),
        }
    }
}

impl<H, F, B> Svc<H, B>
where
    H: Fn(Request<RequestBody>) -> F,
{
    fn begin(&self, req: Request<RequestBody>) -> Exchange<F, B> {
        let active = Active::begin(&self.state);
        // A long stream may be handed to the supervisor only on HTTP/1.1, not for a HEAD.
        let handoff = (req.version() == http::Version::HTTP_11
            && req.method() != http::Method::HEAD)
            .then(|| {
                (
                    self.handoff.clone(),
                    !connection_has(req.headers(), "close"),
                )
            });
        Exchange {
            fut: Box::pin((self.h)(req)),
            active: Some(active),
            handoff,
        }
    }
}

impl<H, F, B> hyper::service::Service<Request<Incoming>> for Svc<H, B>
where
    H: Fn(Request<RequestBody>) -> F,
    F: Future<Output = Response<B>>,
    B: Body,
{
    type Response = Response<Tracked<B>>;
    type Error = Infallible;
    type Future = Exchange<F, B>;
    fn call(&self, req: Request<Incoming>) -> Self::Future {
        self.begin(req.map(|b| RequestBody::new(b, &self.state)))
    }
}

impl<H, F, B> lean::WholeCall for Svc<H, B>
where
    H: Fn(Request<RequestBody>) -> F,
    F: Future<Output = Response<B>>,
    B: Body,
{
    fn call_whole(&self, req: Request<RequestBody>) -> Exchange<F, B> {
        self.begin(req)
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
        let a2a = crate::rpc::own::body_is_a2a(&b);
        crate::rpc::own::What::Overloaded.replies(batch, &ids, message, a2a)
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

/// Whether a message's `Connection` header lists `option` (`close`, `upgrade`), in any case.
/// A walk over the head, not a lookup (asked of every request): a head holds a few headers,
/// comparing a standard name is a byte compare, and a lookup hashes the name.
pub(crate) fn connection_has(headers: &http::HeaderMap, option: &str) -> bool {
    headers
        .iter()
        .filter(|(n, _)| *n == http::header::CONNECTION)
        .filter_map(|(_, v)| v.to_str().ok())
        .any(|v| lists_option(v, option))
}

pub(crate) use crate::http1::{lists_option, plain_length};

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

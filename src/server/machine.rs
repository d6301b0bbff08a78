//! A client connection's protocol state and its supervisor: [`Machine`] (HTTP/1 whole requests
//! read by `lean.rs`, others served by hyper, parked while idle, a long stream written here, or
//! HTTP/2), [`supervise`] (one timer for the header and
//! keep-alive timeouts and the park looks; the drain signal).

use super::conn::{ConnState, Handoff, Outbox, Watched};
use super::{
    BoxError, ConnLimits, ListenerStats, H2_MAX_LOCAL_RESETS, H2_MAX_PENDING_RESETS,
    HYPER_MAX_HEADERS,
};
use hyper::body::{Body, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::Instant;

/// hyper's HTTP/1 and HTTP/2 server builders, with the limits applied; one per listener.
pub struct Builders {
    pub(super) h1: hyper::server::conn::http1::Builder,
    pub(super) h2: hyper::server::conn::http2::Builder<TokioExecutor>,
    /// The same head limits, for the requests read without hyper.
    pub(super) head: super::lean::HeadLimits,
}

impl Builders {
    pub(super) fn new(limits: &ConnLimits) -> Self {
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
        Builders {
            h1,
            h2,
            head: super::lean::HeadLimits {
                bytes: limits.max_header_bytes,
                fields: limits.max_headers,
            },
        }
    }
}

type Io = TokioIo<Watched>;

/// A client connection's protocol state. HTTP/1 is read by the lean reader (`lean.rs`) while
/// its requests are whole `POST`s, and served by a hyper connection from the first request
/// that is not (with the bytes read so far). Either is **parked** when it has been idle a while
/// (`PARK_AFTER`, a second): hyper's connection is taken apart (its read and write buffers, some
/// 25 KiB, freed), or the lean reader's state dropped, and only the socket is kept until its
/// next bytes arrive, when the lean reader picks up where the last one stopped. A **long stream** (an SSE reply marked [`super::LongStream`]) is taken over
/// the same way once hyper has written its head: its body is written here, chunk by chunk, and
/// the connection parks when it ends. HTTP/2 (prior knowledge, seen from the first bytes) is
/// served by one hyper connection for its life.
pub struct Machine<S: hyper::service::HttpService<Incoming>> {
    state: State<S>,
    /// Where the exchange puts a long stream's body for the taking.
    handoff: Arc<Handoff<S::ResBody>>,
    conn: Arc<ConnState>,
    /// The drain signal came: no keep-alive after the exchange in flight.
    closing: bool,
}

enum State<S: hyper::service::HttpService<Incoming>> {
    /// Waiting for bytes with only the socket; `first`: nothing read yet, the protocol is still
    /// to be seen.
    Parked {
        io: Watched,
        first: bool,
        svc: S,
    },
    /// Serving whole requests itself (`lean.rs`).
    Lean(Box<super::lean::Lean<S>>),
    H1(Pin<Box<hyper::server::conn::http1::UpgradeableConnection<Io, S>>>),
    H2(Pin<Box<hyper::server::conn::http2::Connection<Io, S, TokioExecutor>>>),
    /// A long stream's body, written here (hyper's connection taken apart after the head).
    Streaming(Box<Streaming<S>>),
    /// Closed (after a drain signal while parked), or between two of the above.
    Gone,
}

impl<S: hyper::service::HttpService<Incoming>> Machine<S> {
    /// A new connection, nothing read yet.
    pub fn new(io: Watched, svc: S, handoff: Arc<Handoff<S::ResBody>>) -> Self {
        Machine {
            conn: io.state.clone(),
            state: State::Parked {
                io,
                first: true,
                svc,
            },
            handoff,
            closing: false,
        }
    }
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
    /// Writing a long stream itself.
    fn streaming(&self) -> bool;
}

impl<S> Supervised for Machine<S>
where
    S: super::lean::WholeCall + Clone + Unpin + Send + 'static,
    S::Future: Send + Unpin + 'static,
    S::ResBody: Send + Unpin + 'static,
    <S::ResBody as Body>::Data: Send,
    <S::ResBody as Body>::Error: Into<BoxError>,
{
    fn serving_h1(&self) -> bool {
        matches!(self.state, State::H1(_) | State::Lean(_))
    }

    fn parked(&self) -> bool {
        matches!(self.state, State::Parked { first: false, .. })
    }

    fn streaming(&self) -> bool {
        matches!(self.state, State::Streaming(_))
    }

    fn poll(&mut self, cx: &mut Context<'_>, b: &Builders) -> Poll<Result<(), BoxError>> {
        loop {
            match &mut self.state {
                State::Parked { io, first, .. } => {
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
                    let State::Parked { io, svc, .. } =
                        std::mem::replace(&mut self.state, State::Gone)
                    else {
                        unreachable!("matched above")
                    };
                    self.state = if h2 {
                        State::H2(Box::pin(b.h2.serve_connection(TokioIo::new(io), svc)))
                    } else {
                        State::Lean(Box::new(super::lean::Lean::new(io, svc)))
                    };
                }
                State::Lean(l) => {
                    let next =
                        match std::task::ready!(l.poll(cx, &self.handoff, b.head, self.closing)) {
                            Ok(n) => n,
                            Err(e) => return Poll::Ready(Err(e)),
                        };
                    let State::Lean(l) = std::mem::replace(&mut self.state, State::Gone) else {
                        unreachable!("matched above")
                    };
                    let (io, svc) = l.into_parts();
                    match next {
                        super::lean::Next::Hyper => {
                            self.state = State::H1(Box::pin(
                                b.h1.serve_connection(TokioIo::new(io), svc).with_upgrades(),
                            ));
                        }
                        super::lean::Next::Closed => return Poll::Ready(Ok(())),
                        super::lean::Next::Stream(body, keep_alive) => {
                            self.state = Streaming::state(io, svc, body, keep_alive);
                        }
                    }
                }
                State::H1(c) => {
                    let polled = c.as_mut().poll(cx).map_err(Into::into);
                    // A long stream's head is out (flushed since its body was put aside): the
                    // rest is written here.
                    if polled.is_pending()
                        && self.handoff.waiting()
                        && !self.conn.dirty.load(Relaxed)
                    {
                        self.take_over();
                        continue;
                    }
                    return polled;
                }
                State::H2(c) => return c.as_mut().poll(cx).map_err(Into::into),
                State::Streaming(st) => {
                    let keep_alive = match std::task::ready!(st.poll(cx)) {
                        Ok(k) => k && !self.closing,
                        Err(e) => return Poll::Ready(Err(e)),
                    };
                    let State::Streaming(st) = std::mem::replace(&mut self.state, State::Gone)
                    else {
                        unreachable!("matched above")
                    };
                    if !keep_alive {
                        return Poll::Ready(Ok(()));
                    }
                    let Streaming { io, svc, .. } = *st;
                    self.state = State::Parked {
                        io,
                        first: false,
                        svc,
                    };
                }
                State::Gone => return Poll::Ready(Ok(())),
            }
        }
    }

    /// The drain signal: a parked connection closes at once; a served one finishes the
    /// exchange in flight and closes instead of keeping alive.
    fn shutdown(&mut self) {
        self.closing = true;
        match &mut self.state {
            State::Parked { .. } => self.state = State::Gone,
            State::Lean(l) if l.idle() => self.state = State::Gone,
            State::Lean(_) => {}
            State::H1(c) => c.as_mut().graceful_shutdown(),
            State::H2(c) => c.as_mut().graceful_shutdown(),
            State::Streaming(_) | State::Gone => {}
        }
    }

    /// Takes an idle HTTP/1 connection apart, keeping the socket and whatever hyper had read
    /// but not used (handed to the next connection first).
    fn park(&mut self) {
        if matches!(&self.state, State::Lean(l) if l.idle()) {
            let State::Lean(l) = std::mem::replace(&mut self.state, State::Gone) else {
                unreachable!("matched above")
            };
            let (io, svc) = l.into_parts();
            self.state = State::Parked {
                io,
                first: false,
                svc,
            };
            return;
        }
        if let Some((io, svc)) = self.take_h1() {
            self.state = State::Parked {
                io,
                first: false,
                svc,
            };
        }
    }
}

impl<S> Machine<S>
where
    S: hyper::service::HttpService<Incoming>,
    S::ResBody: 'static,
    <S::ResBody as Body>::Error: Into<BoxError>,
{
    /// Takes hyper's HTTP/1 connection apart: the socket (with whatever hyper had read but not
    /// used, handed to the next connection first) and the service. `None` when not serving
    /// HTTP/1, or once upgraded (the connection has then resolved).
    fn take_h1(&mut self) -> Option<(Watched, S)> {
        if !matches!(self.state, State::H1(_)) {
            return None;
        }
        let State::H1(c) = std::mem::replace(&mut self.state, State::Gone) else {
            unreachable!("matched above")
        };
        let parts = Pin::into_inner(c).into_parts()?;
        let mut io = parts.io.into_inner();
        if !parts.read_buf.is_empty() {
            io.prefix = Some(parts.read_buf);
        }
        Some((io, parts.service))
    }

    /// Hands the long stream waiting in the slot to [`Streaming`].
    fn take_over(&mut self) {
        let Some((io, svc)) = self.take_h1() else {
            return;
        };
        match self.handoff.take() {
            Some((body, keep_alive)) => {
                self.state = Streaming::state(io, svc, body, keep_alive);
            }
            None => {
                self.state = State::Parked {
                    io,
                    first: false,
                    svc,
                }
            }
        }
    }
}

/// A long stream written by the supervisor: each data frame of the body as one chunk of the
/// chunked coding hyper began (`{size:X}\r\n`, the data, `\r\n`; `0\r\n\r\n` at the end — trailers
/// are not sent, as hyper sends none to a client that did not ask with `TE: trailers`), a chunk
/// written whole before the next frame is asked for. The client's side is watched for its
/// close (the stream then ends, as with hyper: the body dropped, the exchange ended as the
/// client's leaving); bytes it sends meanwhile wait for the next exchange.
struct Streaming<S: hyper::service::HttpService<Incoming>> {
    io: Watched,
    svc: S,
    /// `None` once it has ended (its last chunk being written).
    body: Option<Pin<Box<S::ResBody>>>,
    /// Pieces still to write.
    out: Outbox,
    keep_alive: bool,
    /// Still watching the client's side for its close (stops once it sends bytes).
    watch_close: bool,
}

impl<S: hyper::service::HttpService<Incoming>> Streaming<S> {
    /// A connection writing `body` as chunks after its head went out.
    fn state(io: Watched, svc: S, body: Pin<Box<S::ResBody>>, keep_alive: bool) -> State<S> {
        State::Streaming(Box::new(Streaming {
            io,
            svc,
            body: Some(body),
            out: Outbox::default(),
            keep_alive,
            watch_close: true,
        }))
    }
}

impl<S> Streaming<S>
where
    S: hyper::service::HttpService<Incoming>,
    <S::ResBody as Body>::Error: Into<BoxError>,
{
    /// Writes the stream on; `Ready(Ok(keep_alive))` once its last chunk is out, or
    /// `Ready(Ok(false))` when the client closed.
    fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, BoxError>> {
        use bytes::Buf;
        loop {
            if !self.out.is_empty() {
                match self.poll_write_out(cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                    Poll::Pending => return self.poll_client_close(cx),
                }
            }
            let Some(body) = self.body.as_mut() else {
                return Poll::Ready(Ok(self.keep_alive));
            };
            match body.as_mut().poll_frame(cx) {
                Poll::Pending => return self.poll_client_close(cx),
                Poll::Ready(Some(Ok(frame))) => match frame.into_data() {
                    Ok(mut data) => {
                        let n = data.remaining();
                        self.out.push_chunk(data.copy_to_bytes(n));
                    }
                    // Trailers end the body.
                    Err(_) => self.finish(),
                },
                Poll::Ready(None) => self.finish(),
                // As hyper does: the connection is closed without the last chunk, which tells
                // the client the reply is incomplete.
                Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e.into())),
            }
        }
    }

    fn finish(&mut self) {
        self.body = None;
        self.out.push_last_chunk();
    }

    /// Writes the pending pieces, then flushes (and frees their room: a stream waits long
    /// between chunks).
    fn poll_write_out(&mut self, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        std::task::ready!(self.io.poll_write_all(cx, &mut self.out))?;
        self.out = Outbox::default();
        Poll::Ready(Ok(()))
    }

    /// Pending, unless the client has closed its side (`Ready(Ok(false))`) or the socket failed.
    fn poll_client_close(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, BoxError>> {
        if !self.watch_close || self.io.prefix.is_some() {
            return Poll::Pending;
        }
        let mut one = [0u8; 1];
        let mut rb = tokio::io::ReadBuf::new(&mut one);
        match self.io.io.poll_peek(cx, &mut rb) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(false)),
            Poll::Ready(Ok(_)) => {
                self.watch_close = false;
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
        }
    }
}

/// Counts a connection in one of [`ListenerStats`]' gauges (`parked`, `streaming`) while `on`.
pub(super) struct Gauge {
    stats: Arc<ListenerStats>,
    which: fn(&ListenerStats) -> &std::sync::atomic::AtomicUsize,
    on: bool,
}

impl Gauge {
    fn set(&mut self, on: bool) {
        if on != self.on {
            self.on = on;
            let g = (self.which)(&self.stats);
            if on {
                g.fetch_add(1, Relaxed);
            } else {
                g.fetch_sub(1, Relaxed);
            }
        }
    }
}

impl Drop for Gauge {
    fn drop(&mut self) {
        self.set(false);
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
    let mut parked_gauge = Gauge {
        stats: stats.clone(),
        which: |s| &s.parked,
        on: false,
    };
    let mut streaming_gauge = Gauge {
        stats,
        which: |s| &s.streaming,
        on: false,
    };
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
            streaming_gauge.set(machine.streaming());
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
            // A later HTTP/1 request head in progress: bytes since the last exchange ended,
            // none active (an HTTP/2 client's idle frames are not one).
            if head_due.is_none() && machine.serving_h1() && s.active.load(Relaxed) == 0 {
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

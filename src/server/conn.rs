//! A client connection's counters and wrappers: [`ConnState`] (what the supervisor reads),
//! written by the socket wrapper [`Watched`] (bytes arrived, replies flushed) and by the service
//! ([`Active`] per exchange, [`RequestBody`] per unread body); [`Tracked`] keeps an exchange
//! counted until its reply body is dropped, [`Exchange`] boxes the handler's future per request
//! and hands a long stream's body to the supervisor ([`LongStream`], [`Handoff`]). [`Outbox`]
//! holds the pieces of an answer rpctap writes itself (the lean reader's, a long stream's) until
//! [`Watched`] has written them; a request body the lean reader reads on while its exchange runs
//! reaches the handler through a [`BodyFeed`].

use crate::locks::Locked as _;
use hyper::body::{Body, Incoming};
use hyper::Response;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::Relaxed};
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

/// An exchange's future as hyper holds it: the handler's future, boxed, and the exchange's
/// count. Boxed per request because hyper keeps its HTTP/1 connection's slot for this future
/// allocated for the connection's whole life, at this type's size — kilobytes for the proxy's
/// handler, a pointer this way — so an idle connection does not keep a handler's worth of memory.
pub(super) struct Exchange<F, B> {
    pub(super) fut: Pin<Box<F>>,
    pub(super) active: Option<Active>,
    /// Where a long stream's body goes when it is handed off (see [`LongStream`]), with what
    /// the request allowed: `None` when it may not be (not HTTP/1.1, a `HEAD`).
    pub(super) handoff: Option<(Arc<Handoff<Tracked<B>>>, bool)>,
}

impl<F, B> Future for Exchange<F, B>
where
    F: Future<Output = Response<B>>,
    B: Body,
{
    type Output = Result<Response<Tracked<B>>, Infallible>;
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let resp = std::task::ready!(self.fut.as_mut().poll(cx));
        let Some(active) = self.active.take() else {
            // Polled again after it was ready: hyper never does.
            return Poll::Pending;
        };
        if let Some((slot, request_keeps_alive)) = self.handoff.take() {
            if handed_off(&resp, &active) {
                let keep_alive =
                    request_keeps_alive && !super::connection_has(resp.headers(), "close");
                let (parts, body) = resp.into_parts();
                let tracked = Tracked {
                    body: Slot::Here { body },
                    _active: Some(active),
                };
                slot.put(Box::pin(tracked), keep_alive);
                return Poll::Ready(Ok(Response::from_parts(
                    parts,
                    Tracked {
                        body: Slot::Away,
                        _active: None,
                    },
                )));
            }
        }
        Poll::Ready(Ok(resp.map(|body| Tracked {
            body: Slot::Here { body },
            _active: Some(active),
        })))
    }
}

/// Marks a reply (in its extensions) as a long stream — an SSE reply that may stay open for
/// hours: on HTTP/1.1 its body is then written by the connection's supervisor after hyper has
/// written the head, and hyper's connection (its read and write buffers, 16 KiB) is taken apart
/// instead of kept for the stream's life. Only a reply hyper would send chunked qualifies (no
/// `Content-Length`, no known size, a status with a body) and only when the request's body has
/// been read; anything else is served by hyper as usual.
#[derive(Clone, Copy, Debug)]
pub struct LongStream;

fn handed_off<B: Body>(resp: &Response<B>, active: &Active) -> bool {
    let status = resp.status().as_u16();
    resp.extensions().get::<LongStream>().is_some()
        && (200..300).contains(&status)
        && status != 204
        && !resp.headers().contains_key(http::header::CONTENT_LENGTH)
        && !resp.headers().contains_key(http::header::TRANSFER_ENCODING)
        && resp.body().size_hint().exact().is_none()
        && !resp.body().is_end_stream()
        && active.0.bodies.load(Relaxed) == 0
}

/// A long stream's body handed from the exchange to the supervisor (at most one at a time: an
/// HTTP/1 connection has one reply in flight). Std lock, held only to put or take; `full` says
/// whether there is one without locking (the supervisor asks after every poll of hyper's
/// connection).
pub struct Handoff<T> {
    slot: std::sync::Mutex<Option<(Pin<Box<T>>, bool)>>,
    full: AtomicBool,
}

impl<T> Default for Handoff<T> {
    fn default() -> Self {
        Handoff {
            slot: std::sync::Mutex::new(None),
            full: AtomicBool::new(false),
        }
    }
}

impl<T> Handoff<T> {
    fn put(&self, body: Pin<Box<T>>, keep_alive: bool) {
        *self.slot.locked() = Some((body, keep_alive));
        self.full.store(true, Relaxed);
    }
    /// The body waiting to be taken over, and whether the connection stays open after it.
    pub(super) fn take(&self) -> Option<(Pin<Box<T>>, bool)> {
        self.full.store(false, Relaxed);
        self.slot.locked().take()
    }
    pub(super) fn waiting(&self) -> bool {
        self.full.load(Relaxed)
    }
}

/// What a connection's supervisor reads: written by the socket wrapper (arrivals) and the
/// service (exchanges), all relaxed — the supervisor only needs to see them eventually, on its
/// next poll or timer.
#[derive(Debug, Default)]
pub struct ConnState {
    /// Reads that returned bytes.
    pub(super) reads: AtomicU32,
    /// `reads` when the last exchange ended: more since means a new request head has begun.
    pub(super) reads_at_idle: AtomicU32,
    /// Exchanges begun.
    pub(super) requests: AtomicU32,
    /// Exchanges whose reply has not ended.
    pub(super) active: AtomicU32,
    /// Request bodies not yet read to their end (nor dropped): hyper is still reading one.
    pub(super) bodies: AtomicU32,
    /// Bytes were written, or a write had to wait, since the last completed flush: hyper may
    /// still hold or be sending a reply.
    pub(super) dirty: AtomicBool,
}

impl ConnState {
    /// Whether hyper's HTTP/1 connection is between exchanges with nothing left to do: no
    /// exchange in flight, every request body read, every reply flushed, no bytes of a next
    /// request arrived.
    pub(super) fn quiescent(&self) -> bool {
        self.active.load(Relaxed) == 0
            && self.bodies.load(Relaxed) == 0
            && !self.dirty.load(Relaxed)
            && self.reads.load(Relaxed) == self.reads_at_idle.load(Relaxed)
    }
}

/// A request's body as handlers get it: hyper's, counted in its connection's state until it has
/// been read to its end or dropped (a connection is only parked between exchanges).
pub struct RequestBody {
    inner: Inner,
    state: Option<Arc<ConnState>>,
}

enum Inner {
    Hyper(Incoming),
    /// Read whole by the connection before the exchange began (`lean`).
    Whole(Option<bytes::Bytes>),
    /// Read by the connection as it comes while the exchange runs (`lean`, a body that had not
    /// all come with its head): `left` bytes not yet given to the handler.
    Coming {
        rx: tokio::sync::mpsc::UnboundedReceiver<bytes::Bytes>,
        left: usize,
    },
}

/// The connection's end of a [`RequestBody`] still coming: hands on the body's bytes as they
/// are read (at most `left` more; bounded by the request's `Content-Length`).
pub(super) struct BodyFeed {
    tx: tokio::sync::mpsc::UnboundedSender<bytes::Bytes>,
    left: usize,
}

impl BodyFeed {
    /// Hands on what `buf` holds of the body (taken off it); whether the body is all read.
    /// A handler that dropped the body no longer gets it: the bytes are read and let go.
    pub(super) fn feed(&mut self, buf: &mut bytes::BytesMut) -> bool {
        let n = self.left.min(buf.len());
        if n > 0 {
            self.left -= n;
            let _ = self.tx.send(buf.split_to(n).freeze());
        }
        self.left == 0
    }
}

impl RequestBody {
    /// Whether hyper read the request (not the lean reader, which holds heads to the listener's
    /// exact limits itself).
    pub fn read_by_hyper(&self) -> bool {
        matches!(self.inner, Inner::Hyper(_))
    }

    pub(super) fn new(inner: Incoming, state: &Arc<ConnState>) -> Self {
        let state = (!inner.is_end_stream()).then(|| {
            state.bodies.fetch_add(1, Relaxed);
            state.clone()
        });
        RequestBody {
            inner: Inner::Hyper(inner),
            state,
        }
    }
    /// A body of `len` bytes the connection reads as it comes, and the connection's end of it.
    pub(super) fn coming(len: usize) -> (Self, BodyFeed) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let body = RequestBody {
            inner: Inner::Coming { rx, left: len },
            state: None,
        };
        (body, BodyFeed { tx, left: len })
    }
    /// A body the connection has read whole already.
    pub(super) fn whole(b: bytes::Bytes) -> Self {
        RequestBody {
            inner: Inner::Whole((!b.is_empty()).then_some(b)),
            state: None,
        }
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
        let mut d = f.debug_struct("RequestBody");
        match &self.inner {
            Inner::Hyper(i) => d.field("inner", i),
            Inner::Whole(b) => d.field("whole", b),
            Inner::Coming { left, .. } => d.field("coming", left),
        };
        d.finish_non_exhaustive()
    }
}

impl Body for RequestBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<bytes::Bytes>, hyper::Error>>> {
        let inner = match &mut self.inner {
            Inner::Hyper(i) => i,
            Inner::Whole(b) => {
                return Poll::Ready(b.take().map(|b| Ok(hyper::body::Frame::data(b))));
            }
            Inner::Coming { left: 0, .. } => return Poll::Ready(None),
            // (The channel closes early only when the connection is gone, and the exchange
            // with it.)
            Inner::Coming { rx, left } => {
                return rx.poll_recv(cx).map(|b| {
                    b.map(|b| {
                        *left = left.saturating_sub(b.len());
                        Ok(hyper::body::Frame::data(b))
                    })
                });
            }
        };
        let r = Pin::new(&mut *inner).poll_frame(cx);
        if matches!(r, Poll::Ready(None) | Poll::Ready(Some(Err(_))))
            || (r.is_ready() && inner.is_end_stream())
        {
            self.done();
        }
        r
    }
    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Hyper(i) => i.is_end_stream(),
            Inner::Whole(b) => b.is_none(),
            Inner::Coming { left, .. } => *left == 0,
        }
    }
    fn size_hint(&self) -> http_body::SizeHint {
        match &self.inner {
            Inner::Hyper(i) => i.size_hint(),
            Inner::Whole(b) => {
                http_body::SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64))
            }
            Inner::Coming { left, .. } => http_body::SizeHint::with_exact(*left as u64),
        }
    }
}

/// One exchange counted active from its request until its reply body is dropped (sent, or
/// abandoned).
pub(super) struct Active(Arc<ConnState>);

impl Active {
    pub(super) fn begin(s: &Arc<ConnState>) -> Self {
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
        body: Slot<B>,
        _active: Option<Active>,
    }
}

pin_project_lite::pin_project! {
    /// A reply body, or (what hyper holds of a handed-off long stream) nothing: pending for ever,
    /// never polled once the supervisor has taken the connection over.
    #[project = SlotProj]
    enum Slot<B> {
        Here { #[pin] body: B },
        Away,
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
        match self.project().body.project() {
            SlotProj::Here { body } => body.poll_frame(cx),
            SlotProj::Away => Poll::Pending,
        }
    }
    #[inline]
    fn is_end_stream(&self) -> bool {
        match &self.body {
            Slot::Here { body } => body.is_end_stream(),
            Slot::Away => false,
        }
    }
    #[inline]
    fn size_hint(&self) -> http_body::SizeHint {
        match &self.body {
            Slot::Here { body } => body.size_hint(),
            Slot::Away => http_body::SizeHint::new(),
        }
    }
}

/// The client socket, counting the reads that brought bytes and the writes not yet flushed;
/// `prefix` holds bytes a parked connection's hyper had read and not used, read first.
pub struct Watched {
    pub(super) io: TcpStream,
    pub(super) prefix: Option<bytes::Bytes>,
    pub(super) state: Arc<ConnState>,
}

impl Watched {
    /// Waits for the first bytes and tells the protocol: `Some(true)` for the HTTP/2 preface
    /// (`PRI …`), `Some(false)` for anything else, `None` when the client closed first.
    pub(super) fn poll_protocol(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<Option<bool>>> {
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
                return Poll::Ready(Ok(Some(seen == PREFACE)));
            }
            // A prefix of the preface: wait for more. A peek leaves the socket readable, so the
            // readiness is cleared first (or the next peek would answer at once, forever).
            let _ = self.io.try_io(tokio::io::Interest::READABLE, || {
                Err::<(), _>(std::io::ErrorKind::WouldBlock.into())
            });
        }
    }
}

/// An answer's pieces waiting to be written, with their total: the head first, written into a
/// buffer kept for the connection's next answers (cleared, not freed, once written), then the
/// body's pieces — shared bytes, or a chunk's size line held inline. No allocation and no shared
/// count per answer or per chunk.
#[derive(Default)]
pub(super) struct Outbox {
    head: Vec<u8>,
    /// How much of `head` has been written.
    head_at: usize,
    parts: Vec<Piece>,
    len: usize,
}

/// A piece of an answer's body on its way out.
enum Piece {
    Shared(bytes::Bytes),
    /// A chunk's size line (at most 16 hex digits and CRLF): `line` from `at` on.
    Line {
        line: [u8; 18],
        at: u8,
    },
}

impl Piece {
    fn bytes(&self) -> &[u8] {
        match self {
            Piece::Shared(b) => b,
            Piece::Line { line, at } => &line[*at as usize..],
        }
    }
    /// Forgets the first `n` bytes (fewer than it holds).
    fn advance(&mut self, n: usize) {
        match self {
            Piece::Shared(b) => bytes::Buf::advance(b, n),
            Piece::Line { at, .. } => *at += n as u8,
        }
    }
}

impl Outbox {
    /// Bytes waiting.
    pub(super) fn len(&self) -> usize {
        self.len
    }
    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Writes an answer's head with `f` into the kept buffer, which goes out before the body's
    /// pieces (behind anything still waiting, it is added as a piece of its own).
    pub(super) fn push_head(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        if !self.is_empty() {
            let mut head = Vec::new();
            f(&mut head);
            self.push(bytes::Bytes::from(head));
            return;
        }
        self.head.clear();
        self.head_at = 0;
        f(&mut self.head);
        self.len += self.head.len();
    }
    pub(super) fn push(&mut self, b: bytes::Bytes) {
        if !b.is_empty() {
            self.len += b.len();
            self.parts.push(Piece::Shared(b));
        }
    }
    /// `data` as one chunk of the chunked coding (nothing when it is empty: an empty chunk
    /// would end the body).
    pub(super) fn push_chunk(&mut self, data: bytes::Bytes) {
        if data.is_empty() {
            return;
        }
        let mut line = [0u8; 18];
        line[16..].copy_from_slice(b"\r\n");
        let (mut at, mut n) = (16, data.len());
        loop {
            at -= 1;
            line[at] = b"0123456789ABCDEF"[n & 15];
            n >>= 4;
            if n == 0 {
                break;
            }
        }
        self.len += line.len() - at;
        self.parts.push(Piece::Line { line, at: at as u8 });
        self.push(data);
        self.push(bytes::Bytes::from_static(b"\r\n"));
    }
    /// The chunked coding's last chunk.
    pub(super) fn push_last_chunk(&mut self) {
        self.push(bytes::Bytes::from_static(b"0\r\n\r\n"));
    }
    /// Forgets the pieces written (the first `n` bytes).
    fn consume(&mut self, mut n: usize) {
        self.len = self.len.saturating_sub(n);
        let head = (self.head.len() - self.head_at).min(n);
        self.head_at += head;
        n -= head;
        let mut whole = 0;
        for p in &mut self.parts {
            let len = p.bytes().len();
            if n < len {
                p.advance(n);
                break;
            }
            n -= len;
            whole += 1;
        }
        self.parts.drain(..whole);
    }
}

impl Watched {
    /// Writes `out`'s pieces (vectored, as many as each write takes), then flushes.
    pub(super) fn poll_write_all(
        &mut self,
        cx: &mut Context<'_>,
        out: &mut Outbox,
    ) -> Poll<std::io::Result<()>> {
        // As many pieces as one `writev` takes.
        const MAX_IOV: usize = 1024;
        while !out.is_empty() {
            let polled = {
                let head = &out.head[out.head_at..];
                let slices: smallvec::SmallVec<[std::io::IoSlice<'_>; 4]> = (!head.is_empty())
                    .then_some(head)
                    .into_iter()
                    .chain(out.parts.iter().map(Piece::bytes))
                    .take(MAX_IOV)
                    .map(std::io::IoSlice::new)
                    .collect();
                Pin::new(&mut *self).poll_write_vectored(cx, &slices)
            };
            let n = std::task::ready!(polled)?;
            if n == 0 {
                return Poll::Ready(Err(std::io::ErrorKind::WriteZero.into()));
            }
            out.consume(n);
        }
        Pin::new(self).poll_flush(cx)
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
            // Only this socket's task writes `reads`: a plain store, no locked add.
            s.reads
                .store(s.reads.load(Relaxed).wrapping_add(1), Relaxed);
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

#[cfg(test)]
mod tests {
    use super::Outbox;
    use bytes::Bytes;

    fn waiting(o: &Outbox) -> Vec<u8> {
        let mut all = o.head[o.head_at..].to_vec();
        for p in &o.parts {
            all.extend_from_slice(p.bytes());
        }
        all
    }

    /// Pieces come off as a write takes them, whole or in part, and the count follows; the
    /// head's buffer is kept for the next answer.
    #[test]
    fn an_outbox_gives_up_what_each_write_took_and_keeps_its_head_buffer() {
        let mut o = Outbox::default();
        o.push_head(|b| b.extend_from_slice(b"HEAD\r\n\r\n"));
        let room = o.head.as_ptr();
        o.push_chunk(Bytes::from_static(b"hello, world"));
        o.push_chunk(Bytes::new());
        o.push(Bytes::new());
        o.push_chunk(Bytes::from(vec![b'x'; 0x1_2345]));
        o.push_last_chunk();
        let mut all = b"HEAD\r\n\r\nC\r\nhello, world\r\n12345\r\n".to_vec();
        all.extend_from_slice(&[b'x'; 0x1_2345]);
        all.extend_from_slice(b"\r\n0\r\n\r\n");
        assert_eq!(waiting(&o), all, "an empty chunk or piece adds nothing");
        assert_eq!(o.len(), all.len());
        let mut at = 0;
        for step in [1, 8, 3, 2, 13, 1, 2, 3, 0x1_2345, 4, 100] {
            let n = step.min(all.len() - at);
            o.consume(n);
            at += n;
            assert_eq!(waiting(&o), all[at..], "after {at} bytes written");
            assert_eq!(o.len(), all.len() - at);
        }
        assert!(o.is_empty());
        o.push_head(|b| b.extend_from_slice(b"NEXT"));
        assert_eq!(o.head.as_ptr(), room, "the same buffer, kept");
        o.push(Bytes::from_static(b" body"));
        o.push_head(|b| b.extend_from_slice(b" AFTER"));
        assert_eq!(
            waiting(&o),
            b"NEXT body AFTER",
            "a head behind a waiting piece stays behind"
        );
    }
}

//! Body wrappers of the exchange pipeline.
//!
//! - [`ClientBody`]: the client's request body under the body idle timeout.
//! - [`ForwardBody`]: what goes upstream — a request body read ahead (up to the inspection cap)
//!   followed by whatever of it is still streaming from the client.
//! - [`TeeBody`]: what goes back to the client — the upstream's reply, frame by frame, unchanged,
//!   with a copy of every data chunk handed to the inspector before the chunk is returned.

use crate::inspect::{EndReason, ExchangeCtx};
use crate::server::BoxError;
use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

/// Why a client's request body could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ClientBodyError {
    #[error(transparent)]
    Client(#[from] hyper::Error),
    #[error("the request body stalled: no data for {0:?}")]
    Stalled(Duration),
}

/// The client's request body: frames as they come, but a read that waits longer than `idle`
/// for the next one ends the body with [`ClientBodyError::Stalled`] (the slow-client defence).
/// The timer is made only when a read has to wait, so a body that arrived with its head costs
/// none.
#[derive(Debug)]
pub struct ClientBody {
    inner: crate::server::RequestBody,
    idle: Duration,
    /// Due when the waiting read gives up; `None` until a read first waits.
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
    waiting: bool,
}

impl ClientBody {
    pub fn new(inner: crate::server::RequestBody, idle: Duration) -> Self {
        ClientBody {
            inner,
            idle,
            timer: None,
            waiting: false,
        }
    }
}

impl Body for ClientBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        let this = &mut *self;
        if let Poll::Ready(f) = Pin::new(&mut this.inner).poll_frame(cx) {
            this.waiting = false;
            return Poll::Ready(f.map(|r| r.map_err(ClientBodyError::from)));
        }
        let due = tokio::time::Instant::now() + this.idle;
        let timer = match (&mut this.timer, this.waiting) {
            (Some(t), true) => t.as_mut(),
            (Some(t), false) => {
                t.as_mut().reset(due);
                t.as_mut()
            }
            (slot @ None, _) => slot
                .insert(Box::pin(tokio::time::sleep_until(due)))
                .as_mut(),
        };
        this.waiting = true;
        match timer.poll(cx) {
            Poll::Ready(()) => Poll::Ready(Some(Err(ClientBodyError::Stalled(this.idle)))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A request body: `prefix` (already read) then `rest` (still streaming).
#[derive(Debug)]
pub struct ForwardBody {
    prefix: Option<Bytes>,
    /// The client's body past what was read ahead: boxed, as this body goes through hyper's
    /// dispatch channel by value (three moves a call) and most requests are read whole.
    rest: Option<Box<ClientBody>>,
    /// A body written at a rate (`throttle` on a client's answer): boxed, off the common path.
    slow: Option<Box<Slow>>,
}

/// What is left of a throttled body, and the wait before its next piece.
#[derive(Debug)]
struct Slow {
    left: Bytes,
    piece: usize,
    step: std::time::Duration,
    wait: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl ForwardBody {
    pub fn full(b: Bytes) -> Self {
        ForwardBody {
            prefix: (!b.is_empty()).then_some(b),
            rest: None,
            slow: None,
        }
    }
    pub fn streaming(prefix: Option<Bytes>, rest: ClientBody) -> Self {
        ForwardBody {
            prefix: prefix.filter(|b| !b.is_empty()),
            rest: Some(Box::new(rest)),
            slow: None,
        }
    }
    pub fn empty() -> Self {
        ForwardBody {
            prefix: None,
            rest: None,
            slow: None,
        }
    }
    /// The whole body, when it is all here (read whole, not streaming, not throttled): such a
    /// request goes on the lean leg (`super::lean`).
    pub fn whole(&self) -> Option<&[u8]> {
        (self.rest.is_none() && self.slow.is_none()).then(|| self.prefix.as_deref().unwrap_or(&[]))
    }
    /// `b` written at `bps` bytes a second: a twentieth of a second's worth at a time.
    pub fn throttled(b: Bytes, bps: u64) -> Self {
        let piece = (bps / 20).max(1) as usize;
        ForwardBody {
            prefix: None,
            rest: None,
            slow: Some(Box::new(Slow {
                left: b,
                piece,
                step: std::time::Duration::from_secs_f64(piece as f64 / bps.max(1) as f64),
                wait: None,
            })),
        }
    }
}

impl Slow {
    fn poll_piece(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        if let Some(w) = self.wait.as_mut() {
            if w.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.wait = None;
        }
        if self.left.is_empty() {
            return Poll::Ready(None);
        }
        let piece = self.left.split_to(self.piece.min(self.left.len()));
        if !self.left.is_empty() {
            self.wait = Some(Box::pin(tokio::time::sleep(self.step)));
        }
        Poll::Ready(Some(piece))
    }
}

impl Body for ForwardBody {
    type Data = Bytes;
    type Error = ClientBodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, ClientBodyError>>> {
        if let Some(p) = self.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(p))));
        }
        if let Some(s) = self.slow.as_mut() {
            return s.poll_piece(cx).map(|p| p.map(|b| Ok(Frame::data(b))));
        }
        match self.rest.as_mut() {
            Some(rest) => Pin::new(&mut **rest).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none()
            && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
            && self.slow.as_ref().is_none_or(|s| s.left.is_empty())
    }

    fn size_hint(&self) -> SizeHint {
        let p = self.prefix.as_ref().map_or(0, |b| b.len() as u64)
            + self.slow.as_ref().map_or(0, |s| s.left.len() as u64);
        match &self.rest {
            None => SizeHint::with_exact(p),
            Some(r) => {
                let h = r.size_hint();
                let mut out = SizeHint::new();
                out.set_lower(h.lower() + p);
                if let Some(u) = h.upper() {
                    out.set_upper(u + p);
                }
                out
            }
        }
    }
}

/// The socket of a lean stream's upstream connection (plain TCP or TLS).
pub type LeanIo = hyper_rustls::MaybeHttpsStream<hyper_util::rt::TokioIo<tokio::net::TcpStream>>;

/// The upstream's reply body: read by hyper's client connection, or by rpctap itself on a lean
/// stream's connection (`super::lean`; boxed: the rare case, and a TLS state is large).
#[derive(Debug)]
pub enum UpstreamBody {
    Hyper(Incoming),
    Lean(Box<super::lean::LeanBody<Box<LeanIo>>>),
    /// Made in this process by a local upstream (`rpctap serve`'s bridge to a stdio server).
    Local(LocalBody),
}

/// A reply body fed through a channel by a local upstream (the bridge), one chunk per send; it
/// ends when every sender is gone. `queued` counts the chunks sent and not yet read, so that a
/// sender can bound what a slow client leaves waiting; `guard` is dropped with the body (the
/// bridge learns the client is gone).
pub struct LocalBody {
    rx: tokio::sync::mpsc::UnboundedReceiver<Bytes>,
    queued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl std::fmt::Debug for LocalBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LocalBody").finish_non_exhaustive()
    }
}

/// The sending side of a [`LocalBody`].
#[derive(Clone)]
pub struct LocalSender {
    tx: tokio::sync::mpsc::UnboundedSender<Bytes>,
    queued: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl LocalSender {
    /// Sends one chunk; false when the body is gone (the client left).
    pub fn send(&self, chunk: Bytes) -> bool {
        self.queued
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.tx.send(chunk).is_ok()
    }

    /// Chunks sent and not yet read by the client.
    pub fn queued(&self) -> usize {
        self.queued.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether the body is gone.
    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}

impl LocalBody {
    /// A body and its sender; `guard` is dropped when the body is.
    pub fn channel(guard: Option<Box<dyn Send + Sync>>) -> (LocalSender, LocalBody) {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let queued = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        (
            LocalSender {
                tx,
                queued: queued.clone(),
            },
            LocalBody {
                rx,
                queued,
                _guard: guard,
            },
        )
    }
}

impl Body for LocalBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let me = self.get_mut();
        match me.rx.poll_recv(cx) {
            Poll::Ready(Some(b)) => {
                me.queued.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                Poll::Ready(Some(Ok(Frame::data(b))))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = BoxError;

    #[inline]
    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match self.get_mut() {
            UpstreamBody::Hyper(b) => Pin::new(b).poll_frame(cx).map_err(BoxError::from),
            UpstreamBody::Lean(b) => Pin::new(b.as_mut()).poll_frame(cx),
            UpstreamBody::Local(b) => Pin::new(b).poll_frame(cx),
        }
    }

    #[inline]
    fn is_end_stream(&self) -> bool {
        match self {
            UpstreamBody::Hyper(b) => b.is_end_stream(),
            UpstreamBody::Lean(b) => b.is_end_stream(),
            UpstreamBody::Local(_) => false,
        }
    }

    #[inline]
    fn size_hint(&self) -> SizeHint {
        match self {
            UpstreamBody::Hyper(b) => b.size_hint(),
            UpstreamBody::Lean(b) => b.size_hint(),
            UpstreamBody::Local(_) => SizeHint::default(),
        }
    }
}

/// The source of a reply body: the upstream's stream, or a body rpctap made (an error reply).
#[derive(Debug)]
pub enum ReplySource {
    Upstream(UpstreamBody),
    Made(Option<Bytes>),
    /// A body that fails at once: hyper closes the connection without a reply (a `close`
    /// fault).
    Broken,
    /// A body that never brings anything (a request the intercept dropped): it lives until
    /// the client gives up.
    Never,
}

/// A reply body forwarded unchanged while the inspector reads a copy of each chunk.
pub struct TeeBody {
    src: ReplySource,
    /// Boxed: the body is moved whole many times on its way to hyper's connection (and by it),
    /// and the exchange's view is most of its size; one allocation is cheaper than those copies.
    ctx: Option<Box<ExchangeCtx>>,
    /// Bytes rpctap adds after the upstream's (refusals merged into an SSE batch reply); the
    /// inspector does not read them.
    tail: Option<Bytes>,
    /// Rate-limit permits of the calls in flight, released when the reply is done.
    hold: Vec<crate::limit::Permit>,
    /// Faults armed on the reply: what the client gets goes through this stage, after the
    /// inspector's copy of what the server sent.
    fault: Option<Box<super::faults::Stage>>,
}

/// A fault's (or an intercept verdict's) note as the exchange's fault event.
pub(super) fn publish(ctx: &mut ExchangeCtx, n: super::faults::Note) {
    let (rule, id) = (n.rule.clone(), n.id.clone());
    ctx.injected(
        (n.rule, n.action),
        n.id.as_ref(),
        Some(&n.method),
        n.message,
        n.detail,
        n.server_call,
    );
    if let (true, Some(id)) = (n.answered, id) {
        // rpctap answered a server's request in the client's place: it ends so.
        ctx.end_refused_in(&id, &rule, crate::events::Direction::ServerToClient);
    }
}

impl TeeBody {
    pub fn new(src: ReplySource, ctx: Option<Box<ExchangeCtx>>) -> Self {
        TeeBody {
            src,
            ctx,
            tail: None,
            hold: Vec::new(),
            fault: None,
        }
    }

    /// Sends the reply through `stage` (faults armed on it).
    pub fn faulted(mut self, stage: super::faults::Stage) -> Self {
        self.fault = Some(Box::new(stage));
        self
    }

    /// The faulted path of `poll_frame`: the stage's output first, then more of the source.
    fn poll_faulted(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        use super::faults::Out;
        loop {
            let Some(stage) = self.fault.as_mut() else {
                return Poll::Ready(None);
            };
            let out = stage.poll_out(cx);
            let decided = stage.take_notes();
            if let Some(ctx) = self.ctx.as_mut() {
                for n in decided {
                    publish(ctx, n);
                }
            }
            let Some(stage) = self.fault.as_mut() else {
                return Poll::Ready(None);
            };
            match out {
                Out::Data(b) => return Poll::Ready(Some(Ok(Frame::data(b)))),
                Out::Wait => return Poll::Pending,
                Out::End => {
                    self.end(EndReason::Complete);
                    self.hold.clear();
                    return Poll::Ready(None);
                }
                Out::Need => {}
            }
            let polled = match &mut self.src {
                ReplySource::Upstream(inc) => match Pin::new(inc).poll_frame(cx) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(r) => r,
                },
                ReplySource::Made(b) => b.take().map(|b| Ok(Frame::data(b))),
                ReplySource::Broken => None,
                ReplySource::Never => return Poll::Pending,
            };
            let mut notes = Vec::new();
            match polled {
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        if let Some(ctx) = self.ctx.as_mut() {
                            ctx.response_bytes(&data);
                        }
                        stage.feed(&data, &mut notes);
                    }
                    // Trailers pass as they are.
                    Err(frame) => return Poll::Ready(Some(Ok(frame))),
                },
                Some(Err(e)) => {
                    self.end(EndReason::UpstreamError(e.to_string()));
                    return Poll::Ready(Some(Err(e)));
                }
                None => stage.finish(&mut notes),
            }
            if let Some(ctx) = self.ctx.as_mut() {
                for n in notes {
                    publish(ctx, n);
                }
            }
        }
    }

    /// Appends `tail` after the source ends.
    pub fn then(mut self, tail: Bytes) -> Self {
        self.tail = Some(tail);
        self
    }

    /// Holds `permits` until the body is done.
    pub fn holding(mut self, permits: Vec<crate::limit::Permit>) -> Self {
        self.hold = permits;
        self
    }

    fn end(&mut self, reason: EndReason) {
        if let Some(mut ctx) = self.ctx.take() {
            ctx.end(reason);
        }
    }
}

impl Body for TeeBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if this.fault.is_some() {
            return this.poll_faulted(cx);
        }
        let polled = match &mut this.src {
            ReplySource::Upstream(inc) => match Pin::new(inc).poll_frame(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(r) => r,
            },
            ReplySource::Made(b) => b.take().map(|b| Ok(Frame::data(b))),
            ReplySource::Broken => {
                this.end(EndReason::Closed(
                    "the connection closed by a fault rule".into(),
                ));
                return Poll::Ready(Some(Err("closed by a fault rule".into())));
            }
            ReplySource::Never => return Poll::Pending,
        };
        match polled {
            Some(Ok(frame)) => {
                if let (Some(data), Some(ctx)) = (frame.data_ref(), this.ctx.as_mut()) {
                    ctx.response_bytes(data);
                }
                if this.is_src_end() {
                    this.end(EndReason::Complete);
                    if this.tail.is_none() {
                        this.hold.clear();
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Some(Err(e)) => {
                this.end(EndReason::UpstreamError(e.to_string()));
                Poll::Ready(Some(Err(e)))
            }
            None => {
                this.end(EndReason::Complete);
                this.hold.clear();
                Poll::Ready(this.tail.take().map(|t| Ok(Frame::data(t))))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.is_src_end() && self.tail.is_none() && self.fault.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        if self.tail.is_some() || self.fault.is_some() {
            return SizeHint::new();
        }
        match &self.src {
            ReplySource::Upstream(i) => i.size_hint(),
            ReplySource::Made(b) => SizeHint::with_exact(b.as_ref().map_or(0, |b| b.len() as u64)),
            ReplySource::Broken | ReplySource::Never => SizeHint::new(),
        }
    }
}

impl TeeBody {
    fn is_src_end(&self) -> bool {
        match &self.src {
            ReplySource::Upstream(i) => i.is_end_stream(),
            ReplySource::Made(b) => b.is_none(),
            ReplySource::Broken | ReplySource::Never => false,
        }
    }
}

impl Drop for TeeBody {
    fn drop(&mut self) {
        let reason = if self.is_src_end() {
            EndReason::Complete
        } else {
            EndReason::ClientGone
        };
        self.end(reason);
    }
}

//! rpctap's own HTTP/1.1 client leg, written and read here instead of by hyper's client
//! connection, for the two kinds of request that make up nearly all of an MCP server's traffic:
//!
//! - **A long stream**: a bodiless `GET` that asks for an event stream (MCP's server stream, most
//!   often open for the whole session and silent) goes on a connection of its own, never reused.
//! - **A whole request** on a client connection's lane (`super::upstream::Lane`): a request
//!   whose body was read whole and is small (a JSON-RPC POST of up to 16 KiB, a bodiless `GET`
//!   or `DELETE`) is written in one piece on the lane's kept-alive connection ([`LeanConn`]), and
//!   the connection goes back to the lane ([`Home`]) when its response's body has been read to
//!   its end and the response lets it be reused.
//!
//! Why not hyper: a hyper client connection keeps, for as long as it lives, a read buffer and a
//! write buffer, its request channel (a block of request slots) and its state — most of what an
//! idle stream cost (heaptrack; benches/RESULTS.md) — and every request and response crosses its
//! dispatch channels (a request queue, a oneshot for the response head, a channel for the body)
//! between the exchange and the connection's future: the largest part of a proxied call's cost
//! above the hyper floor (callgrind; benches/RESULTS.md). Here a connection is its socket: a
//! request is written with one write, its response head read into one buffer, and the body's
//! bytes already read are yielded from that buffer without a copy. No crate fits: hyper's own
//! decoder is private, and a separate HTTP client would bring back what this removes.
//! Requests hyper still sends: upgrades (the connection is handed over on `101`), bodies that
//! stream (larger than the inspection cap, or not JSON-RPC) or are large (hyper reads an early
//! answer while it writes), and HTTP/2 clients' (the pool).
//!
//! What it does: writes the request head as it came (method, origin-form target, headers in
//! order; a whole body's `Content-Length` said when the client did not; the forwarding headers
//! added as it writes, `headers::Forwarded`), reads the response
//! head with `httparse` (skipping `1xx` interim answers), and reads the body by its framing
//! (RFC 9112 §6.3: none for a `HEAD` or for `204`/`304`, chunked, `Content-Length`, or until
//! close), yielding each piece as it arrives — an SSE event is passed on the moment its bytes are
//! read.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderValue, CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};

use super::headers::{Forwarded, X_FORWARDED_FOR, X_FORWARDED_PROTO};
pub use crate::http1::chunked::{Chunked, Step};
pub use crate::http1::Framing;
use crate::http1::FramingFields;
use crate::server::BoxError;

/// Largest response head read (start line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// Most header fields of a response head (hyper's default too).
const MAX_HEADERS: usize = 100;
/// One read's most bytes (a stack buffer, copied into the frame it becomes): what a body that
/// trickles (an event stream, mostly idle) is read with, holding no buffer while it waits.
const READ_SIZE: usize = 8192;
/// One read's most bytes once a read filled its buffer (a large body arriving fast): read into
/// a buffer of the frame's own, fewer reads and no copy, until a read finds less.
const FAST_READ_SIZE: usize = 256 << 10;

/// Whether a request takes the lean path: an HTTP/1.1 `GET` with no body that accepts
/// `text/event-stream`, not an upgrade.
pub fn wants_lean<B: Body>(req: &Request<B>) -> bool {
    req.method() == Method::GET
        && req.version() == Version::HTTP_11
        && req.body().is_end_stream()
        && crate::media::accepts_event_stream(req.headers())
        && !super::headers::is_upgrade(req.headers())
}

/// A connection of the lean leg: its socket, and its place in the count of open upstream
/// connections (`rpctap_upstream_connections`), which goes with it while a lane keeps it.
pub struct LeanConn<T> {
    io: TokioIo<T>,
    _counted: crate::observe::metrics::Counted,
}

impl<T> std::fmt::Debug for LeanConn<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeanConn").finish_non_exhaustive()
    }
}

/// Where a connection goes back to once its response's body has been read to the end and the
/// response lets it be reused: the lane it came from (`super::upstream::Lane`).
pub trait Home<T>: Send + Sync {
    fn keep(&self, conn: LeanConn<T>);
}

/// Why a request on a lean connection failed; `Unsent` when no byte of it reached the upstream
/// (a kept connection the upstream had closed: it may go again on a new one).
#[derive(Debug)]
pub enum SendError {
    Unsent(String),
    Failed(String),
}

impl From<SendError> for String {
    fn from(e: SendError) -> String {
        match e {
            SendError::Unsent(s) | SendError::Failed(s) => s,
        }
    }
}

impl<T: hyper::rt::Read + hyper::rt::Write + Unpin> LeanConn<T> {
    pub fn new(io: T, counted: crate::observe::metrics::Counted) -> Self {
        LeanConn {
            io: TokioIo::new(io),
            _counted: counted,
        }
    }

    /// The socket and its count, for a hyper connection to take over (a request whose body
    /// streams, on a lane whose kept connection is a lean one).
    pub fn into_parts(self) -> (T, crate::observe::metrics::Counted) {
        (self.io.into_inner(), self._counted)
    }

    /// Whether a kept connection can take a request: the upstream has neither closed it nor
    /// sent anything unasked. One poll with no waker: when the socket is not known readable
    /// this answers without a system call.
    pub fn idle_and_open(&mut self) -> bool {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut one = [0u8; 1];
        let mut rb = ReadBuf::new(&mut one);
        Pin::new(&mut self.io)
            .poll_read(&mut cx, &mut rb)
            .is_pending()
    }

    /// Writes a whole request (head and body, [`encode_request`]) and reads its response head;
    /// the body's first bytes, read with the head, stay in the returned buffer.
    pub async fn exchange(
        &mut self,
        wire: &[u8],
        is_head: bool,
    ) -> Result<(http::response::Parts, Framing, Bytes), SendError> {
        let unsent = |e: std::io::Error| {
            SendError::Unsent(format!("writing the request to the upstream: {e}"))
        };
        self.io.write_all(wire).await.map_err(unsent)?;
        self.io.flush().await.map_err(unsent)?;
        let mut buf = BytesMut::new();
        loop {
            if let Some(head) = parse_head(&mut buf, is_head).map_err(SendError::Failed)? {
                return Ok(head);
            }
            if buf.len() >= MAX_HEAD {
                return Err(SendError::Failed(format!(
                    "the upstream's response head is larger than {MAX_HEAD} bytes"
                )));
            }
            buf.reserve(4096);
            let n = tokio::io::AsyncReadExt::read_buf(&mut self.io, &mut buf)
                .await
                .map_err(|e| SendError::Failed(format!("reading the upstream's response: {e}")))?;
            if n == 0 {
                return Err(SendError::Failed(
                    "the upstream closed the connection before its response head".into(),
                ));
            }
        }
    }
}

/// Sends a long stream's `req` (origin form, no body: [`wants_lean`]) on a connection of its
/// own and reads the response head; the body reads on, and the connection closes with it.
pub async fn send<T, B>(
    mut conn: LeanConn<T>,
    req: Request<B>,
    fwd: Option<Forwarded<'_>>,
) -> Result<Response<LeanBody<T>>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    let wire = encode_request(&req, &[], fwd);
    drop(req);
    let (parts, framing, buf) = conn.exchange(&wire, false).await?;
    Ok(Response::from_parts(
        parts,
        LeanBody::new(conn, buf, framing, None),
    ))
}

/// The fuzzers' view of the lean leg (`fuzz/fuzz_targets/http1_diff.rs`): sends a bodiless
/// `GET` (or `HEAD`) on `io` and reads the reply as the engine reads it — its status, the
/// `content-length` it would pass on, and its whole body — or why it failed.
#[cfg(feature = "fuzzing")]
pub async fn fuzz_read_reply<T>(io: T, is_head: bool) -> Result<(u16, Option<u64>, Vec<u8>), String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    let mut conn = LeanConn::new(
        io,
        crate::observe::metrics::Counted::upstream(&Default::default()),
    );
    let wire: &[u8] = if is_head {
        b"HEAD / HTTP/1.1\r\nhost: x\r\n\r\n"
    } else {
        b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"
    };
    let (parts, framing, buf) = conn.exchange(wire, is_head).await.map_err(String::from)?;
    let length = parts
        .headers
        .get(CONTENT_LENGTH)
        .map(|v| {
            crate::http1::plain_length(v.as_bytes())
                .ok_or("a content-length rpctap would pass on is not plain")
        })
        .transpose()?;
    let mut body = LeanBody::new(conn, buf, framing, None);
    let mut out = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
        if let Ok(d) = frame.map_err(|e| e.to_string())?.into_data() {
            out.extend_from_slice(&d);
        }
    }
    Ok((parts.status.as_u16(), length, out))
}

/// The request as it goes upstream: the client's method, target and headers, in order, then
/// the body. A whole body is framed by its length: a `Content-Length` that says it stays where
/// it was, one that does not (or a `Transfer-Encoding`, hop-by-hop and normally gone already)
/// is left out, and the length is said last when no header said it (for a body, or a method
/// that carries one — what hyper's client does). With `fwd`, the forwarding headers are written
/// as [`Forwarded::add_to`] would have put them in the map: an earlier `X-Forwarded-For` (its
/// first value) gets the client's address appended where it stands, a new one follows the
/// client's headers, and `X-Forwarded-Proto` replaces the client's.
pub fn encode_request<B>(req: &Request<B>, body: &[u8], fwd: Option<Forwarded<'_>>) -> Vec<u8> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut out = Vec::with_capacity(128 + target.len() + req.headers().len() * 40 + body.len());
    out.extend_from_slice(req.method().as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let mut line = |name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    let mut digits = itoa::Buffer::new();
    let length = digits.format(body.len()).as_bytes();
    let (mut said, mut said_for, mut said_proto) = (false, false, false);
    for (name, value) in req.headers() {
        if name == TRANSFER_ENCODING {
            continue;
        }
        if name == CONTENT_LENGTH {
            if said || value.as_bytes() != length {
                continue;
            }
            said = true;
        }
        if let Some(f) = fwd {
            if name == X_FORWARDED_FOR {
                if !std::mem::replace(&mut said_for, true) {
                    line(name.as_str().as_bytes(), &f.appended_to(value));
                }
                continue;
            }
            if name == X_FORWARDED_PROTO {
                if !std::mem::replace(&mut said_proto, true) {
                    line(name.as_str().as_bytes(), f.proto.as_bytes());
                }
                continue;
            }
        }
        line(name.as_str().as_bytes(), value.as_bytes());
    }
    if let Some(f) = fwd {
        if !said_for {
            line(b"x-forwarded-for", f.peer.as_bytes());
        }
        if !said_proto {
            line(b"x-forwarded-proto", f.proto.as_bytes());
        }
    }
    let carries_body = matches!(*req.method(), Method::POST | Method::PUT | Method::PATCH);
    if !said && (!body.is_empty() || carries_body) {
        line(b"content-length", length);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    out
}

/// Whether a response lets its connection take another request: HTTP/1.1 without
/// `Connection: close`, and a body framed by its length or chunked (not read to the close).
pub fn reusable(parts: &http::response::Parts, framing: &Framing) -> bool {
    parts.version == Version::HTTP_11
        && !matches!(framing, Framing::Close)
        && parts.extensions.get::<Closes>().is_none()
}

/// Marks a response head whose `Connection` lists `close`: found while [`parse_head`] reads the
/// headers anyway, so [`reusable`] needs no lookup in the map on every response (only such a
/// response, rare and never kept, pays for the mark).
#[derive(Clone, Copy, Debug)]
struct Closes;

/// Parses one final response head off the front of `buf` (interim `1xx` heads are dropped);
/// `None` while it is incomplete (`buf` then holds what was read, to read more after). Done, it
/// gives the head and the bytes read past it (the body's first), and leaves `buf` empty.
/// `is_head`: the answer to a `HEAD`, which has no body.
///
/// The bytes read are frozen first: each header value is a slice of them, not a copy of its
/// own (an allocation per value), as hyper's client reads heads.
#[allow(clippy::type_complexity)]
fn parse_head(
    buf: &mut BytesMut,
    is_head: bool,
) -> Result<Option<(http::response::Parts, Framing, Bytes)>, String> {
    if buf.is_empty() {
        return Ok(None);
    }
    let mut read = std::mem::take(buf).freeze();
    loop {
        // Left uninitialized: httparse writes the ones it finds (a hundred initialized headers
        // would be 3 KiB written on every response).
        let mut headers =
            [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut []);
        let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
            &mut r,
            &read,
            &mut headers,
        ) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => {
                // Back to a buffer to read into (no copy: these bytes have no other owner).
                *buf = BytesMut::from(read);
                return Ok(None);
            }
            Err(e) => return Err(format!("the upstream's response head is invalid: {e}")),
        };
        let code = r.code.unwrap_or(0);
        let status = StatusCode::from_u16(code)
            .map_err(|_| format!("the upstream answered with status {code}"))?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err("101 Switching Protocols to a request that asked for no upgrade".into());
        }
        if status.is_informational() {
            read.advance(len);
            continue;
        }
        let mut map = HeaderMap::with_capacity(r.headers.len());
        // RFC 9112 §6.3, read on the way (`http1::framing`): the one plain `Content-Length` (the
        // usual framing) goes on as it came, as rpctap would write it; any other is not passed
        // on, and rpctap's own is written in its place below.
        let (mut fields, mut closes) = (FramingFields::default(), false);
        for h in r.headers.iter() {
            let name = crate::http1::names::header_name(h.name.as_bytes())
                .map_err(|_| format!("the upstream sent an invalid header name {:?}", h.name))?;
            if name == CONTENT_LENGTH {
                if !fields.content_length(h.value) {
                    continue;
                }
            } else if name == TRANSFER_ENCODING {
                fields.transfer_encoding(h.value);
            } else if name == CONNECTION {
                closes |= std::str::from_utf8(h.value)
                    .is_ok_and(|v| crate::server::lists_option(v, "close"));
            }
            let value = HeaderValue::from_maybe_shared(read.slice_ref(h.value))
                .map_err(|_| format!("the upstream sent an invalid value for {name}"))?;
            map.append(name, value);
        }
        let version = if r.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let framing = fields
            .response(status, is_head, version == Version::HTTP_10)
            .map_err(|e| format!("the upstream's response framing is invalid: {e}"))?;
        if fields.coded() {
            // Transfer-Encoding overrides Content-Length; a reply that sent both is not one to
            // trust the connection after (RFC 9112 §6.1 and §6.3): it closes once read.
            if fields.has_length() {
                map.remove(CONTENT_LENGTH);
                closes = true;
            }
        } else if let (true, Framing::Length(n)) = (fields.odd_length(), framing) {
            map.insert(CONTENT_LENGTH, HeaderValue::from(n));
        } else if let (true, Framing::Empty) = (fields.odd_length(), framing) {
            // A HEAD's or 304's length describes another body: passed on as one value if it
            // is one, else not at all.
            if let Ok(Framing::Length(n)) = fields.response(StatusCode::OK, false, false) {
                map.insert(CONTENT_LENGTH, HeaderValue::from(n));
            }
        }
        let mut resp = Response::new(());
        // A reason phrase of the upstream's own goes on to the client (hyper's server writes
        // it), as hyper's client kept it; the canonical one needs nothing.
        if let Some(reason) = r.reason.filter(|r| Some(*r) != status.canonical_reason()) {
            if let Ok(reason) = hyper::ext::ReasonPhrase::try_from(reason.as_bytes()) {
                resp.extensions_mut().insert(reason);
            }
        }
        if closes {
            resp.extensions_mut().insert(Closes);
        }
        *resp.status_mut() = status;
        *resp.version_mut() = version;
        *resp.headers_mut() = map;
        read.advance(len);
        return Ok(Some((resp.into_parts().0, framing, read)));
    }
}

/// Where the body's reading is.
#[derive(Debug)]
enum State {
    Length(u64),
    /// Boxed: the rarer framing, and the larger state.
    Chunked(Box<Chunked>),
    Close,
    Done,
}

/// A lean response's body: frames as they are read from the upstream's socket.
pub struct LeanBody<T> {
    /// The connection, until the body ended and it went back to its lane.
    conn: Option<LeanConn<T>>,
    /// Read and not yet yielded (empty while the stream waits).
    pending: Bytes,
    state: State,
    /// Where the connection goes when the body ends cleanly (`None`: it closes with the body).
    home: Option<std::sync::Arc<dyn Home<T>>>,
    /// A failure found, given on the next poll (see [`LeanBody::fail`]).
    failed: Option<BoxError>,
    /// Some of the body was yielded.
    yielded: bool,
    /// The last read filled its buffer: the next reads go straight into large frames.
    fast: bool,
}

impl<T: hyper::rt::Read + hyper::rt::Write + Unpin> LeanBody<T> {
    /// The body after a response head: `buf` holds what was read past the head. A body that
    /// is already over (no body, or a length of 0) hands its connection back at once.
    pub fn new(
        conn: LeanConn<T>,
        buf: Bytes,
        framing: Framing,
        home: Option<std::sync::Arc<dyn Home<T>>>,
    ) -> Self {
        let state = match framing {
            Framing::Empty | Framing::Length(0) => State::Done,
            Framing::Length(n) => State::Length(n),
            Framing::Chunked => State::Chunked(Box::default()),
            Framing::Close => State::Close,
        };
        let mut body = LeanBody {
            conn: Some(conn),
            pending: buf,
            state,
            home,
            failed: None,
            yielded: false,
            fast: false,
        };
        if matches!(body.state, State::Done) {
            body.ended();
        }
        body
    }

    /// The body failed (the connection is gone with it). Once some of the body was yielded, the
    /// failure is given on the next poll, not this one: what was read before it reaches the
    /// client first — hyper's server drops what it has not written yet when a body fails, and
    /// the frame just yielded may still be in its buffer. A body that fails before any of it
    /// came fails at once (the client gets a closed connection, no head), as it did when hyper's
    /// client connection read it.
    fn fail(
        &mut self,
        cx: &mut Context<'_>,
        e: BoxError,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.state = State::Done;
        self.conn = None;
        if !self.yielded {
            return Poll::Ready(Some(Err(e)));
        }
        self.failed = Some(e);
        cx.waker().wake_by_ref();
        Poll::Pending
    }

    /// The body was read to its end by its framing: the connection goes home if nothing
    /// follows it (bytes past the body would be a reply nobody asked for: then it closes).
    fn ended(&mut self) {
        self.state = State::Done;
        let leftover = !self.pending.is_empty();
        self.pending = Bytes::new();
        if let (Some(home), false) = (self.home.take(), leftover) {
            if let Some(conn) = self.conn.take() {
                home.keep(conn);
            }
        }
    }
}

impl<T> std::fmt::Debug for LeanBody<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeanBody")
            .field("state", &self.state)
            .field("pending", &self.pending.len())
            .finish_non_exhaustive()
    }
}

/// Why a lean stream's body ended early.
#[derive(Debug, thiserror::Error)]
pub enum LeanError {
    #[error("reading the upstream's body: {0}")]
    Io(#[from] std::io::Error),
    #[error("the upstream closed the connection before the body's end")]
    Truncated,
    #[error("the upstream's chunked body is invalid: {0}")]
    Chunked(&'static str),
}

impl<T: hyper::rt::Read + hyper::rt::Write + Unpin> Body for LeanBody<T> {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        if let Some(e) = this.failed.take() {
            return Poll::Ready(Some(Err(e)));
        }
        loop {
            if matches!(this.state, State::Done) {
                return Poll::Ready(None);
            }
            if this.pending.is_empty() {
                let Some(conn) = this.conn.as_mut() else {
                    this.state = State::Done;
                    return Poll::Ready(None);
                };
                let read = if this.fast {
                    // A body arriving faster than the small reads: read straight into the
                    // frame's own buffer, a large one (given away with the frame, no copy).
                    let mut b = BytesMut::with_capacity(FAST_READ_SIZE);
                    let fut = tokio::io::AsyncReadExt::read_buf(&mut conn.io, &mut b);
                    match std::future::Future::poll(std::pin::pin!(fut), cx) {
                        Poll::Ready(Ok(n)) => {
                            this.fast = n == FAST_READ_SIZE;
                            Poll::Ready(Ok(b.freeze()))
                        }
                        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                        Poll::Pending => {
                            this.fast = false;
                            Poll::Pending
                        }
                    }
                } else {
                    let mut space = [0u8; READ_SIZE];
                    let mut rb = ReadBuf::new(&mut space);
                    match Pin::new(&mut conn.io).poll_read(cx, &mut rb) {
                        Poll::Ready(Ok(())) => {
                            this.fast = rb.filled().len() == READ_SIZE;
                            Poll::Ready(Ok(Bytes::copy_from_slice(rb.filled())))
                        }
                        Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                        Poll::Pending => Poll::Pending,
                    }
                };
                match read {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => return this.fail(cx, LeanError::Io(e).into()),
                    Poll::Ready(Ok(b)) if b.is_empty() => {
                        if matches!(this.state, State::Close) {
                            this.state = State::Done;
                            this.conn = None;
                            return Poll::Ready(None);
                        }
                        return this.fail(cx, LeanError::Truncated.into());
                    }
                    Poll::Ready(Ok(b)) => this.pending = b,
                }
            }
            let step = match &mut this.state {
                State::Length(rem) => {
                    let n = (*rem).min(this.pending.len() as u64) as usize;
                    *rem -= n as u64;
                    let data = this.pending.split_to(n);
                    if *rem == 0 {
                        this.ended();
                    }
                    Step::Data(data)
                }
                State::Close => Step::Data(std::mem::take(&mut this.pending)),
                State::Chunked(c) => match c.step(&mut this.pending) {
                    Ok(s) => s,
                    Err(e) => return this.fail(cx, LeanError::Chunked(e).into()),
                },
                State::Done => Step::End,
            };
            match step {
                Step::Data(d) if d.is_empty() => {}
                Step::Data(d) => {
                    this.yielded = true;
                    return Poll::Ready(Some(Ok(Frame::data(d))));
                }
                Step::Trailers(t) => {
                    this.ended();
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                Step::End => {
                    this.ended();
                    return Poll::Ready(None);
                }
                Step::More => {}
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done) && self.failed.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Length(n) => SizeHint::with_exact(n),
            State::Done => SizeHint::with_exact(0),
            _ => SizeHint::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interim_heads_are_skipped_and_a_partial_head_waits() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\n"[..]);
        let (parts, framing, rest) = parse_head(&mut buf, false).unwrap().unwrap();
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["content-type"], "text/event-stream");
        assert_eq!(framing, Framing::Chunked);
        assert_eq!(&rest[..], b"5\r\n", "the body's first bytes are given back");
        assert!(buf.is_empty());
        let text = &b"HTTP/1.1 200 OK\r\ncontent-le"[..];
        let mut partial = BytesMut::from(text);
        assert!(parse_head(&mut partial, false).unwrap().is_none());
        assert_eq!(&partial[..], text, "a partial head stays to be read on");
        // Read on: the whole head parses, its values whole.
        partial.extend_from_slice(b"ngth: 2\r\nx-a: b c\r\nx-a: d\r\n\r\nhi");
        let (parts, framing, rest) = parse_head(&mut partial, false).unwrap().unwrap();
        assert_eq!(framing, Framing::Length(2));
        let xa: Vec<_> = parts.headers.get_all("x-a").iter().collect();
        assert_eq!(xa, ["b c", "d"]);
        assert_eq!(&rest[..], b"hi");
        let mut bad_value = BytesMut::from(&b"HTTP/1.1 200 OK\r\nx-a: a\x7fb\r\n\r\n"[..]);
        assert!(parse_head(&mut bad_value, false).is_err());
        let mut bad = BytesMut::from(&b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n"[..]);
        assert!(parse_head(&mut bad, false).is_err());
    }

    fn request(method: Method, headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().method(method).uri("/mcp?x=1");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap()
    }

    #[test]
    fn a_whole_request_is_written_with_its_length_said_once() {
        let text = |r: &Request<()>, body: &[u8]| {
            String::from_utf8(encode_request(r, body, None)).unwrap()
        };
        // The client's Content-Length, right: kept where it was, in order.
        let r = request(
            Method::POST,
            &[("host", "up"), ("content-length", "2"), ("x-a", "1")],
        );
        assert_eq!(
            text(&r, b"{}"),
            "POST /mcp?x=1 HTTP/1.1\r\nhost: up\r\ncontent-length: 2\r\nx-a: 1\r\n\r\n{}"
        );
        // None said (the client sent chunked, now read whole): said last, and no
        // Transfer-Encoding goes with it.
        let r = request(
            Method::POST,
            &[("host", "up"), ("transfer-encoding", "chunked")],
        );
        assert_eq!(
            text(&r, b"[1]"),
            "POST /mcp?x=1 HTTP/1.1\r\nhost: up\r\ncontent-length: 3\r\n\r\n[1]"
        );
        // One that no longer says the body's length (a body rpctap changed): replaced.
        let r = request(Method::POST, &[("content-length", "40")]);
        assert_eq!(
            text(&r, b"{}"),
            "POST /mcp?x=1 HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}"
        );
        // A bodiless GET or DELETE says no length; an empty POST says 0.
        assert_eq!(
            text(&request(Method::GET, &[]), b""),
            "GET /mcp?x=1 HTTP/1.1\r\n\r\n"
        );
        assert_eq!(
            text(&request(Method::DELETE, &[("mcp-session-id", "s")]), b""),
            "DELETE /mcp?x=1 HTTP/1.1\r\nmcp-session-id: s\r\n\r\n"
        );
        assert_eq!(
            text(&request(Method::POST, &[]), b""),
            "POST /mcp?x=1 HTTP/1.1\r\ncontent-length: 0\r\n\r\n"
        );
    }

    /// The forwarding headers written with the request are the bytes the map route gives
    /// (`Forwarded::add_to`, then the head encoded): an earlier `X-Forwarded-For` (two of them,
    /// or none) and `X-Forwarded-Proto` (or none), in any place.
    #[test]
    fn forwarding_headers_are_written_as_the_map_would_hold_them() {
        let peer = HeaderValue::from_static("10.1.2.3");
        let fwd = Forwarded {
            peer: &peer,
            proto: "http",
        };
        let cases: &[&[(&str, &str)]] = &[
            &[("host", "up"), ("content-length", "2")],
            &[("x-forwarded-for", "1.1.1.1"), ("host", "up")],
            &[
                ("x-forwarded-for", "1.1.1.1"),
                ("x-a", "1"),
                ("x-forwarded-for", "2.2.2.2"),
            ],
            &[("x-forwarded-proto", "https"), ("x-a", "1")],
            &[
                ("x-a", "1"),
                ("x-forwarded-proto", "https"),
                ("x-forwarded-for", "3.3.3.3"),
                ("x-forwarded-proto", "ws"),
            ],
        ];
        for case in cases {
            let r = request(Method::POST, case);
            let written = String::from_utf8(encode_request(&r, b"{}", Some(fwd))).unwrap();
            let mut mapped = r.map(|_| ());
            fwd.add_to(mapped.headers_mut());
            let reference = String::from_utf8(encode_request(&mapped, b"{}", None)).unwrap();
            assert_eq!(written, reference, "{case:?}");
            assert!(written.contains("x-forwarded-proto: http\r\n"), "{written}");
            assert_eq!(written.matches("x-forwarded-for: ").count(), 1, "{written}");
        }
        let r = request(Method::POST, &[("x-forwarded-for", "1.1.1.1")]);
        let written = String::from_utf8(encode_request(&r, b"", Some(fwd))).unwrap();
        assert!(
            written.contains("x-forwarded-for: 1.1.1.1, 10.1.2.3\r\n"),
            "{written}"
        );
    }

    fn head(text: &str, is_head: bool) -> (http::response::Parts, Framing) {
        let (parts, framing, _) = parse_head(&mut BytesMut::from(text.as_bytes()), is_head)
            .unwrap()
            .unwrap();
        (parts, framing)
    }

    #[test]
    fn a_heads_framing_read_on_the_way_is_the_one_framing_reads() {
        let f = |text: &str| {
            parse_head(&mut BytesMut::from(text.as_bytes()), false).map(|h| h.map(|(_, f, _)| f))
        };
        let ok = |headers: &str| f(&format!("HTTP/1.1 200 OK\r\n{headers}\r\n"));
        assert_eq!(ok("content-length: 5\r\n"), Ok(Some(Framing::Length(5))));
        assert_eq!(
            ok("Content-Length: 0012\r\n"),
            Ok(Some(Framing::Length(12)))
        );
        assert_eq!(ok("content-length: 5, 5\r\n"), Ok(Some(Framing::Length(5))));
        assert!(ok("content-length: 5\r\ncontent-length: 6\r\n").is_err());
        assert!(ok("content-length: -5\r\n").is_err());
        assert!(ok("content-length: 99999999999999999999999\r\n").is_err());
        assert_eq!(
            ok("content-length: 5\r\ntransfer-encoding: chunked\r\n"),
            Ok(Some(Framing::Chunked))
        );
        assert_eq!(ok("x-a: b\r\n"), Ok(Some(Framing::Close)));
        assert_eq!(
            f("HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n"),
            Ok(Some(Framing::Empty))
        );
    }

    #[test]
    fn an_upstreams_own_reason_phrase_is_kept_a_canonical_one_needs_nothing() {
        let (p, _) = head(
            "HTTP/1.1 200 Fine Thanks\r\ncontent-length: 0\r\n\r\n",
            false,
        );
        let kept = p.extensions.get::<hyper::ext::ReasonPhrase>().unwrap();
        assert_eq!(kept.as_bytes(), b"Fine Thanks");
        let (p, _) = head("HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n", false);
        assert!(p.extensions.get::<hyper::ext::ReasonPhrase>().is_none());
    }

    #[test]
    fn a_connection_is_reused_only_when_the_response_allows() {
        let (p, f) = head("HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n", false);
        assert!(reusable(&p, &f));
        let (p, f) = head(
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n",
            false,
        );
        assert!(reusable(&p, &f));
        let (p, f) = head(
            "HTTP/1.1 200 OK\r\nconnection: keep-alive, Close\r\ncontent-length: 2\r\n\r\n",
            false,
        );
        assert!(!reusable(&p, &f), "Connection: close");
        let (p, f) = head(
            "HTTP/1.1 200 OK\r\nconnection: keep-alive\r\ncontent-length: 2\r\nConnection: upgrade,close\r\n\r\n",
            false,
        );
        assert!(!reusable(&p, &f), "close in a second Connection header");
        let (p, f) = head(
            "HTTP/1.1 200 OK\r\nconnection: keep-alive, closed\r\ncontent-length: 2\r\n\r\n",
            false,
        );
        assert!(reusable(&p, &f), "an option that only starts with close");
        let (p, f) = head("HTTP/1.0 200 OK\r\ncontent-length: 2\r\n\r\n", false);
        assert!(!reusable(&p, &f), "HTTP/1.0");
        let (p, f) = head("HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\n\r\n", false);
        assert!(!reusable(&p, &f), "a body read to the close");
        // A HEAD's answer has no body, whatever its length says.
        let (p, f) = head("HTTP/1.1 200 OK\r\ncontent-length: 99\r\n\r\n", true);
        assert_eq!(f, Framing::Empty);
        assert!(reusable(&p, &f));
    }

    /// A home that counts the connections handed back.
    #[derive(Default)]
    struct Counter(std::sync::atomic::AtomicUsize);

    type Io = TokioIo<tokio::io::DuplexStream>;

    impl Home<Io> for Counter {
        fn keep(&self, _conn: LeanConn<Io>) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Sends a request on a lean connection to a peer that answers `answer` (in `cuts`), reads
    /// the body through, and says what it read and how many times the connection went home.
    async fn through(
        answer: &str,
        cuts: &[usize],
        is_head: bool,
    ) -> (Result<Vec<u8>, String>, usize) {
        let (ours, mut theirs) = tokio::io::duplex(1 << 16);
        let counted = crate::observe::metrics::Counted::upstream(&Default::default());
        let mut conn = LeanConn::new(TokioIo::new(ours), counted);
        let answer = answer.as_bytes().to_vec();
        let cuts = cuts.to_vec();
        let peer = tokio::spawn(async move {
            let mut got = vec![0u8; 256];
            let n = tokio::io::AsyncReadExt::read(&mut theirs, &mut got)
                .await
                .unwrap();
            assert!(got[..n].starts_with(b"GET / HTTP/1.1\r\n"));
            let mut at = 0;
            for c in cuts.into_iter().chain([answer.len()]) {
                theirs.write_all(&answer[at..c]).await.unwrap();
                theirs.flush().await.unwrap();
                at = c;
                tokio::task::yield_now().await;
            }
            // Closed: a body cut short ends here, not in a wait.
            drop(theirs);
        });
        let home = std::sync::Arc::new(Counter::default());
        let wire = encode_request(&request(Method::GET, &[]).map(|_| ()), b"", None);
        let wire = String::from_utf8(wire).unwrap().replace("/mcp?x=1", "/");
        let (parts, framing, buf) = match conn.exchange(wire.as_bytes(), is_head).await {
            Ok(h) => h,
            Err(e) => return (Err(String::from(e)), 0),
        };
        let back = reusable(&parts, &framing).then(|| home.clone() as std::sync::Arc<dyn Home<Io>>);
        let body = LeanBody::new(conn, buf, framing, back);
        let read = http_body_util::BodyExt::collect(body)
            .await
            .map(|c| c.to_bytes().to_vec())
            .map_err(|e| e.to_string());
        peer.await.unwrap();
        (read, home.0.load(std::sync::atomic::Ordering::SeqCst))
    }

    #[tokio::test]
    async fn a_body_read_to_its_end_hands_its_connection_back_and_no_other_does() {
        let ok = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        // Whole in the head's read, or cut anywhere: read, and the connection goes home once.
        for cuts in [vec![], vec![10], vec![40], vec![41, 43]] {
            assert_eq!(
                through(ok, &cuts, false).await,
                (Ok(b"hello".to_vec()), 1),
                "cuts {cuts:?}"
            );
        }
        let chunked =
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nhe\r\n3\r\nllo\r\n0\r\n\r\n";
        assert_eq!(
            through(chunked, &[50, 60], false).await,
            (Ok(b"hello".to_vec()), 1)
        );
        // No body: home at once.
        assert_eq!(
            through("HTTP/1.1 204 No Content\r\n\r\n", &[], false).await,
            (Ok(vec![]), 1)
        );
        assert_eq!(
            through("HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n", &[], true).await,
            (Ok(vec![]), 1)
        );
        // Bytes past the body (an answer nobody asked for): the connection closes.
        let extra = "HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhelloHTTP/1.1 200 OK\r\n";
        assert_eq!(through(extra, &[], false).await, (Ok(b"hello".to_vec()), 0));
        // Connection: close, or a body read to the close: never home.
        let close = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(through(close, &[], false).await, (Ok(b"hello".to_vec()), 0));
        // A body cut short by the close: an error, and the connection is gone.
        let (read, home) = through(
            "HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nhel",
            &[],
            false,
        )
        .await;
        assert!(read
            .unwrap_err()
            .contains("closed the connection before the body's end"));
        assert_eq!(home, 0);
    }

    #[tokio::test]
    async fn a_large_body_arriving_fast_is_read_in_large_frames_and_whole() {
        let (ours, mut theirs) = tokio::io::duplex(1 << 20);
        let body: Vec<u8> = (0..(2usize << 20)).map(|i| (i % 251) as u8).collect();
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
        let sent = body.clone();
        let peer = tokio::spawn(async move {
            theirs.write_all(head.as_bytes()).await.unwrap();
            theirs.write_all(&sent).await.unwrap();
            theirs
        });
        let counted = crate::observe::metrics::Counted::upstream(&Default::default());
        let mut conn = LeanConn::new(TokioIo::new(ours), counted);
        let (_, framing, buf) = conn
            .exchange(b"GET / HTTP/1.1\r\n\r\n", false)
            .await
            .unwrap();
        let mut b = LeanBody::new(conn, buf, framing, None);
        let (mut got, mut frames, mut largest) = (Vec::new(), 0, 0);
        while let Some(f) = http_body_util::BodyExt::frame(&mut b).await {
            let d = f.unwrap().into_data().unwrap();
            frames += 1;
            largest = largest.max(d.len());
            got.extend_from_slice(&d);
        }
        assert!(got == body, "the body, whole and in order");
        assert!(
            largest > READ_SIZE,
            "large frames once the reads fill ({largest})"
        );
        assert!(frames < body.len() / READ_SIZE, "{frames} frames");
        drop(peer.await.unwrap());
    }

    #[tokio::test]
    async fn a_kept_connection_the_upstream_closed_is_not_taken_for_a_request() {
        let (ours, theirs) = tokio::io::duplex(64);
        let counted = crate::observe::metrics::Counted::upstream(&Default::default());
        let mut conn = LeanConn::new(TokioIo::new(ours), counted);
        assert!(conn.idle_and_open(), "open and silent");
        drop(theirs);
        assert!(!conn.idle_and_open(), "closed");
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut conn = LeanConn::new(
            TokioIo::new(ours),
            crate::observe::metrics::Counted::upstream(&Default::default()),
        );
        theirs.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        assert!(!conn.idle_and_open(), "answering what nobody asked");
    }
}

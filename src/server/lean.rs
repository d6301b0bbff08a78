//! Whole HTTP/1.1 requests read and answered by the connection itself, without hyper's
//! connection: a `POST` whose body's length the engine's framing decision gives
//! (`http1::framing`: one plain `Content-Length`, or several that agree; at most [`MAX_BODY`]),
//! no `Connection` but `keep-alive`, no `Upgrade`, `Expect` or `Transfer-Encoding`, within the
//! listener's head limits — the JSON-RPC call as clients send it. A body that came with its
//! head is given to the handler whole; one that had not all come (clients that write the head
//! and the body apart) is read here as it comes while the exchange runs, and the handler times
//! it as it times hyper's (an answer before it has all come closes the connection after it).
//! Anything else (another method, a head hyper would refuse) is handed to hyper with the bytes
//! read so far (`Watched::prefix`), as a parked connection's next request is, and hyper serves
//! the connection until it parks; a head over `--max-header-bytes` is answered `431` here, by
//! the exact limit. The answer's head is written as hyper's server writes it
//! (`http1::write::encode_head`; the tests compare the bytes with hyper's for each kind of
//! answer), its body frame by frame as it comes, counted against the length the head declared
//! (`http1::write::Declared`), at most [`WRITE_AHEAD`] gathered for one write
//! (`conn::Outbox`). A client that closes while its call is in flight, or while its answer's
//! body waits, has left, as with hyper (no half-close): the exchange is dropped.
//!
//! Why hand-written: hyper's HTTP/1 connection was the largest part of a proxied call's cost
//! above the floor (benches/RESULTS.md); no other server crate serves a request this way and
//! falls back to hyper on the same socket. The same trade rpctap's own client leg
//! (`proxy::lean`) makes on the upstream side; both are held to hyper's verdicts by the
//! `http1_diff` fuzz target.

use super::conn::{BodyFeed, Outbox, RequestBody, Watched};
use super::BoxError;
use crate::http1::write::{encode_head, Written};
use bytes::{Bytes, BytesMut};
use http::header::HeaderValue;
use http::{HeaderMap, Method, Request, StatusCode, Uri, Version};
use hyper::body::{Body, Incoming};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Largest request body read here; larger ones go to hyper (which streams them).
pub const MAX_BODY: usize = 16 * 1024;
/// Largest request head read here (hyper applies the listener's own limit to larger ones).
const MAX_HEAD: usize = 8 * 1024;
/// Most header fields read here (parsed on the stack).
const MAX_HEADERS: usize = 32;
/// Most bytes of an answer's body gathered for one write.
const WRITE_AHEAD: usize = 64 * 1024;

/// The listener's limits on a request head, as hyper applies them: a head past either is
/// left to hyper, which answers it (`431`).
#[derive(Clone, Copy, Debug)]
pub struct HeadLimits {
    pub bytes: usize,
    pub fields: usize,
}

/// A service that can begin an exchange from a request read whole (see `server::Svc`).
pub trait WholeCall:
    hyper::service::HttpService<Incoming, Error = std::convert::Infallible>
{
    fn call_whole(&self, req: Request<RequestBody>) -> Self::Future;
}

/// What a connection served here does next.
pub enum Next<B> {
    /// A request this does not read: hyper serves the connection (the bytes read are in the
    /// socket's prefix).
    Hyper,
    /// The connection is done (the client closed, or the answer said `close`).
    Closed,
    /// A long stream's head is out: its body goes to `Streaming` (keep-alive after it?).
    Stream(Pin<Box<B>>, bool),
}

/// An HTTP/1 connection between requests it reads itself, or answering one.
pub struct Lean<S: hyper::service::HttpService<Incoming>> {
    io: Watched,
    svc: S,
    /// Bytes read and not yet used (a request's start, or the next one's).
    buf: BytesMut,
    phase: Phase<S>,
    /// Pieces of the answer still to write.
    out: Outbox,
    /// While an exchange is in flight: still watching the client's side for its close (stops
    /// once it sends the next request's bytes, which wait in the socket).
    watch_close: bool,
    /// The request's body while it is still coming (read here and handed on as it comes).
    feed: Option<BodyFeed>,
}

enum Phase<S: hyper::service::HttpService<Incoming>> {
    Read,
    Call(S::Future),
    /// A long stream's head being written; its body then goes to `Streaming`.
    Handoff {
        keep_alive: bool,
    },
    Write {
        body: Option<S::ResBody>,
        chunked: bool,
        /// What the head's `content-length` said and is not written yet: the writer counts the
        /// body against it (never more; a body that ends short closes the connection).
        left: Option<crate::http1::write::Declared>,
        keep_alive: bool,
    },
}

/// A request this does not read: hyper's to answer, or a head over the listener's
/// `--max-header-bytes`, answered `431` here (hyper's read buffer cannot be held to the exact
/// limit: a head that arrives in one read may pass it by half).
enum NotLean {
    Hyper,
    TooLarge,
}

/// Where a piece of a request head sits in its buffer: offset and length.
type Span = (usize, usize);

impl<S> Lean<S>
where
    S: WholeCall,
    S::Future: Unpin,
    <S::ResBody as Body>::Error: Into<BoxError>,
{
    pub fn new(mut io: Watched, svc: S) -> Self {
        let buf = io.prefix.take().map(BytesMut::from).unwrap_or_default();
        Lean {
            io,
            svc,
            buf,
            phase: Phase::Read,
            out: Outbox::default(),
            watch_close: true,
            feed: None,
        }
    }

    /// Between exchanges with nothing read: may be parked.
    pub fn idle(&self) -> bool {
        matches!(self.phase, Phase::Read) && self.buf.is_empty()
    }

    /// Gives the socket back, with what was read and not used as its prefix.
    pub fn into_parts(mut self) -> (Watched, S) {
        if !self.buf.is_empty() {
            self.io.prefix = Some(self.buf.freeze());
        }
        (self.io, self.svc)
    }
}

impl<S> Lean<S>
where
    S: WholeCall,
    S::Future: Unpin,
    // The answer's body is kept in place while it is written (no box per answer).
    S::ResBody: Unpin,
    <S::ResBody as Body>::Error: Into<BoxError>,
{
    /// Whether the client closed its side while nothing of its is waiting to be read (a
    /// pipelined request stops the watch): then the exchange is dropped (`Next::Closed`).
    /// Pending otherwise, with the socket's read readiness registered.
    fn client_left(&mut self, cx: &mut Context<'_>) -> Poll<Result<Next<S::ResBody>, BoxError>> {
        if !self.watch_close {
            return Poll::Pending;
        }
        // Readiness first: in the common case (nothing came) no system call is made, and the
        // waker is registered for when something does.
        match self.io.io.poll_read_ready(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
            Poll::Ready(Ok(())) => {}
        }
        let mut one = [0u8; 1];
        let mut rb = tokio::io::ReadBuf::new(&mut one);
        match self.io.io.poll_peek(cx, &mut rb) {
            Poll::Ready(Ok(0)) => Poll::Ready(Ok(Next::Closed)),
            Poll::Ready(Ok(_)) => {
                self.watch_close = false;
                Poll::Pending
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e.into())),
            Poll::Pending => Poll::Pending,
        }
    }

    /// Serves requests until one it does not read, the connection's end, or a long stream.
    pub fn poll(
        &mut self,
        cx: &mut Context<'_>,
        handoff: &super::Handoff<S::ResBody>,
        limits: HeadLimits,
        closing: bool,
    ) -> Poll<Result<Next<S::ResBody>, BoxError>> {
        loop {
            match &mut self.phase {
                Phase::Read => {
                    match parse(&mut self.buf, limits) {
                        Ok(Some((req, feed))) => {
                            self.phase = Phase::Call(self.svc.call_whole(req));
                            self.feed = feed;
                            self.watch_close = self.buf.is_empty();
                            continue;
                        }
                        Err(NotLean::Hyper) => return Poll::Ready(Ok(Next::Hyper)),
                        Err(NotLean::TooLarge) => {
                            self.buf.clear();
                            let mut head = http::Response::new(());
                            *head.status_mut() = StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE;
                            let parts = head.into_parts().0;
                            self.out.push_head(|out| {
                                encode_head(&parts, None, true, out);
                            });
                            self.phase = Phase::Write {
                                body: None,
                                chunked: false,
                                left: None,
                                keep_alive: false,
                            };
                            continue;
                        }
                        Ok(None) => {}
                    }
                    if closing && self.buf.is_empty() {
                        return Poll::Ready(Ok(Next::Closed));
                    }
                    self.buf.reserve(4096);
                    let read = tokio::io::AsyncReadExt::read_buf(&mut self.io, &mut self.buf);
                    let n = std::task::ready!(std::pin::pin!(read).poll(cx))?;
                    if n == 0 {
                        return Poll::Ready(Ok(Next::Closed));
                    }
                }
                Phase::Call(fut) => {
                    // The body's bytes as they come, before the handler looks for them.
                    while let Some(feed) = &mut self.feed {
                        if feed.feed(&mut self.buf) {
                            self.feed = None;
                            self.watch_close = self.buf.is_empty();
                            break;
                        }
                        self.buf.reserve(4096);
                        let read = tokio::io::AsyncReadExt::read_buf(&mut self.io, &mut self.buf);
                        match std::pin::pin!(read).poll(cx) {
                            // The client left mid-body: the exchange is dropped.
                            Poll::Ready(Ok(0)) => return Poll::Ready(Ok(Next::Closed)),
                            Poll::Ready(Ok(_)) => {}
                            Poll::Ready(Err(e)) => return Poll::Ready(Err(e.into())),
                            Poll::Pending => break,
                        }
                    }
                    let Poll::Ready(Ok(resp)) = Pin::new(fut).poll(cx) else {
                        // As hyper's connection (no half-close): a client that closes its side
                        // while its call is in flight has left; the exchange is dropped. (While
                        // the body comes, the read above watches.)
                        if self.feed.is_none() {
                            if let Poll::Ready(r) = self.client_left(cx) {
                                return Poll::Ready(r);
                            }
                        }
                        return Poll::Pending;
                    };
                    let (parts, body) = resp.into_parts();
                    // An answer before the request's body has all come (a stalled body's
                    // timeout, say): the connection closes after it (and the feed with it).
                    let closing = closing || self.feed.is_some();
                    // hyper's view of the body: none (ended already), or its known length.
                    let length = (!body.is_end_stream()).then(|| body.size_hint().exact());
                    let mut framed = (Written::Plain, false, false, None);
                    self.out.push_head(|head| {
                        framed = encode_head(&parts, length, closing, head);
                    });
                    let (framing, has_body, close, left) = framed;
                    let keep_alive = !close && !closing;
                    let chunked = framing == Written::Chunked;
                    if handoff.waiting() {
                        self.phase = Phase::Handoff { keep_alive };
                        continue;
                    }
                    self.phase = Phase::Write {
                        // A status without a body writes none, whatever the handler gave.
                        body: has_body.then_some(body),
                        chunked,
                        left: left.filter(|_| has_body).map(crate::http1::write::Declared),
                        keep_alive,
                    };
                }
                Phase::Handoff { keep_alive } => {
                    let keep_alive = *keep_alive;
                    std::task::ready!(self.io.poll_write_all(cx, &mut self.out))?;
                    self.phase = Phase::Read;
                    return Poll::Ready(Ok(match handoff.take() {
                        Some((body, keep)) => Next::Stream(body, keep && keep_alive),
                        None => Next::Closed,
                    }));
                }
                Phase::Write {
                    body,
                    chunked,
                    left,
                    keep_alive,
                } => {
                    // More of the body only while less than `WRITE_AHEAD` waits to be written.
                    let room = self.out.len() < WRITE_AHEAD;
                    if let Some(b) = body.as_mut().filter(|_| room) {
                        match Pin::new(b).poll_frame(cx) {
                            Poll::Ready(Some(Ok(frame))) => {
                                if let Ok(mut data) = frame.into_data() {
                                    let n = bytes::Buf::remaining(&data);
                                    let mut data = bytes::Buf::copy_to_bytes(&mut data, n);
                                    if *chunked {
                                        self.out.push_chunk(data);
                                    } else if let Some(declared) = left.as_mut() {
                                        // Never more than the head declared: what goes past
                                        // it would be read as the client's next answer.
                                        let over = declared.take(&mut data);
                                        self.out.push(data);
                                        if over {
                                            tracing::warn!(
                                                "an answer's body is longer than its content-length: cut there, the connection closes"
                                            );
                                            *body = None;
                                            *keep_alive = false;
                                        }
                                    } else {
                                        self.out.push(data);
                                    }
                                }
                                // The next frame may be ready too: one write for what is,
                                // up to `WRITE_AHEAD` (a fast upstream's body is not gathered
                                // here beyond it).
                                if self.out.len() < WRITE_AHEAD {
                                    continue;
                                }
                            }
                            Poll::Ready(None) => {
                                if *chunked {
                                    self.out.push_last_chunk();
                                }
                                if left.is_some_and(|d| d.short()) {
                                    // Shorter than declared: only the close tells the client.
                                    *keep_alive = false;
                                }
                                *body = None;
                            }
                            Poll::Ready(Some(Err(e))) => return Poll::Ready(Err(e.into())),
                            Poll::Pending => {
                                if self.out.is_empty() {
                                    // An answer whose body stalls (its upstream went quiet
                                    // mid-body): a client that leaves meanwhile ends it, and
                                    // the upstream leg with it.
                                    if let Poll::Ready(r) = self.client_left(cx) {
                                        return Poll::Ready(r);
                                    }
                                    return Poll::Pending;
                                }
                            }
                        }
                    }
                    let (done, keep) = (body.is_none(), *keep_alive);
                    std::task::ready!(self.io.poll_write_all(cx, &mut self.out))?;
                    if done {
                        if !keep {
                            return Poll::Ready(Ok(Next::Closed));
                        }
                        self.phase = Phase::Read;
                    }
                }
            }
        }
    }
}

/// A whole request at the front of `buf` (taken off it), `None` while it has not all come.
fn parse(buf: &mut BytesMut, limits: HeadLimits) -> Result<Option<Whole>, NotLean> {
    if buf.is_empty() {
        return Ok(None);
    }
    let max_head = limits.bytes.min(MAX_HEAD);
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers[..limits.fields.min(MAX_HEADERS)]);
    let head_len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) if n <= max_head => n,
        Ok(httparse::Status::Partial) if buf.len() <= max_head => return Ok(None),
        Ok(httparse::Status::Complete(n)) if n > limits.bytes => return Err(NotLean::TooLarge),
        // All of it is head, and more is still to come.
        Ok(httparse::Status::Partial) if buf.len() > limits.bytes => return Err(NotLean::TooLarge),
        // Too many fields, or not a head hyper would read: hyper answers it.
        _ => return Err(NotLean::Hyper),
    };
    if req.method != Some("POST") || req.version != Some(1) {
        return Err(NotLean::Hyper);
    }
    let Some(path) = req.path.filter(|p| p.starts_with('/')) else {
        return Err(NotLean::Hyper);
    };
    let base = buf.as_ptr() as usize;
    let at = |s: &[u8]| (s.as_ptr() as usize - base, s.len());
    let path_at = at(path.as_bytes());
    let mut framing = crate::http1::FramingFields::default();
    let mut fields: [(Span, Span); MAX_HEADERS] = [((0, 0), (0, 0)); MAX_HEADERS];
    let count = req.headers.len();
    for (h, f) in req.headers.iter().zip(fields.iter_mut()) {
        let name = h.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            framing.content_length(h.value);
        } else if name.eq_ignore_ascii_case(b"connection") {
            // What most clients send; `close` and upgrades are hyper's.
            if !h.value.eq_ignore_ascii_case(b"keep-alive") {
                return Err(NotLean::Hyper);
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"upgrade")
            || name.eq_ignore_ascii_case(b"expect")
        {
            return Err(NotLean::Hyper);
        }
        *f = (at(name), at(h.value));
    }
    // The engine's one framing decision (`http1::framing`); what it does not read here — a
    // body with no length said, chunked, invalid, or larger than a whole call's — is hyper's.
    let length = match framing.request() {
        Ok(crate::http1::Framing::Length(n)) => usize::try_from(n).ok(),
        Ok(crate::http1::Framing::Empty) if framing.has_length() => Some(0),
        _ => None,
    };
    let Some(length) = length.filter(|&n| n <= MAX_BODY) else {
        return Err(NotLean::Hyper);
    };
    let head = buf.split_to(head_len).freeze();
    let Some((uri, map)) = build(&head, path_at, &fields[..count]) else {
        // Not a head hyper would take either: put the bytes back for it to answer.
        let mut all = BytesMut::with_capacity(head.len() + buf.len());
        all.extend_from_slice(&head);
        all.extend_from_slice(buf);
        *buf = all;
        return Err(NotLean::Hyper);
    };
    // A body that has not all come with its head is read as it comes (the handler times a
    // stalled one, as it does hyper's).
    let (body, feed) = if buf.len() >= length {
        (RequestBody::whole(buf.split_to(length).freeze()), None)
    } else {
        let (body, feed) = RequestBody::coming(length);
        (body, Some(feed))
    };
    let mut req = Request::new(body);
    *req.method_mut() = Method::POST;
    *req.uri_mut() = uri;
    *req.version_mut() = Version::HTTP_11;
    *req.headers_mut() = map;
    Ok(Some((req, feed)))
}

/// The fuzzers' view of the lean reader (`fuzz/fuzz_targets/http1_diff.rs`): the first
/// request in `pieces` (the bytes as they arrive, read after each as the connection reads
/// them, a body that had not all come with its head fed as it comes) as the engine reads it —
/// method, target, headers in order, body — or `None` when the engine leaves it to hyper (or
/// it has not all come).
#[cfg(feature = "fuzzing")]
#[allow(clippy::type_complexity)]
pub fn fuzz_read_request(
    pieces: &[&[u8]],
) -> Option<(String, String, Vec<(String, Vec<u8>)>, Vec<u8>)> {
    let limits = HeadLimits {
        bytes: 64 * 1024,
        fields: MAX_HEADERS,
    };
    let mut buf = BytesMut::new();
    let mut rest = pieces.iter();
    let (req, mut feed) = loop {
        buf.extend_from_slice(rest.next()?);
        match parse(&mut buf, limits) {
            Ok(Some(whole)) => break whole,
            Ok(None) => continue,
            Err(_) => return None,
        }
    };
    while let Some(f) = &mut feed {
        if f.feed(&mut buf) {
            feed = None;
            break;
        }
        buf.extend_from_slice(rest.next()?);
    }
    drop(feed);
    let (parts, body) = req.into_parts();
    let body = futures_util::FutureExt::now_or_never(http_body_util::BodyExt::collect(body))?
        .ok()?
        .to_bytes();
    let headers = parts
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.as_bytes().to_vec()))
        .collect();
    Some((
        parts.method.to_string(),
        parts.uri.to_string(),
        headers,
        body.to_vec(),
    ))
}

/// A request read here, and its body's feed while the body is still coming.
type Whole = (Request<RequestBody>, Option<BodyFeed>);

/// The request's URI and headers, their texts shared with `head` (no copy).
fn build(head: &Bytes, path: Span, fields: &[(Span, Span)]) -> Option<(Uri, HeaderMap)> {
    let slice = |(i, n): Span| head.slice(i..i + n);
    let uri = Uri::from_maybe_shared(slice(path)).ok()?;
    let mut map = HeaderMap::with_capacity(fields.len());
    for &(name, value) in fields {
        let name = crate::http1::names::header_name(head.get(name.0..name.0 + name.1)?).ok()?;
        map.append(name, HeaderValue::from_maybe_shared(slice(value)).ok()?);
    }
    Some((uri, map))
}

#[cfg(test)]
mod tests {
    use super::super::{serve, serve_with, ConnLimits, RequestBody, ServeOptions};
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full, StreamBody};
    use hyper::body::Frame;
    use hyper::{Request, Response};
    use std::convert::Infallible;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    type Answer = http_body_util::combinators::BoxBody<Bytes, Infallible>;

    /// The answer the handler gives, picked by the request's path; its body says what the
    /// handler got (method, body), so a test sees the request as the handler saw it.
    async fn answer(req: Request<RequestBody>) -> Response<Answer> {
        let path = req.uri().path().to_string();
        let method = req.method().to_string();
        let ka = req.headers().get("connection").is_some();
        if path == "/early" {
            // Answers without waiting for the request's body.
            return Response::new(Full::new(Bytes::from_static(b"early")).boxed());
        }
        // How the body reached the handler: read whole here, read here as it came, or hyper's.
        let via = format!("{:?}", req.body());
        let via = ["whole", "coming"]
            .into_iter()
            .find(|k| via.contains(&format!("{k}:")))
            .unwrap_or("hyper");
        let body = req
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let mut text = format!("{method:>4} {} ka={ka}", String::from_utf8_lossy(&body));
        if path == "/via" {
            text += &format!(" via={via}");
        }
        let mut resp = match path.as_str() {
            // A body of unknown length, in two frames: chunked.
            "/stream" => {
                let frames = vec![
                    Ok::<_, Infallible>(Frame::data(Bytes::from(text))),
                    Ok(Frame::data(Bytes::from_static(b"!"))),
                ];
                Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed())
            }
            // Twenty thousand frames of a byte each, all ready at once: gathered for writes
            // of many more pieces than one `writev` takes (the same for any request).
            "/many" => {
                let frames: Vec<_> = b"abcdefgh"
                    .iter()
                    .copied()
                    .cycle()
                    .take(20_000)
                    .map(|c| Ok::<_, Infallible>(Frame::data(Bytes::copy_from_slice(&[c]))))
                    .collect();
                Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed())
            }
            "/empty" => {
                let mut r = Response::new(Full::new(Bytes::new()).boxed());
                *r.status_mut() = http::StatusCode::NO_CONTENT;
                r
            }
            "/reason" => {
                let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
                *r.status_mut() = http::StatusCode::from_u16(299).unwrap();
                r.extensions_mut()
                    .insert(hyper::ext::ReasonPhrase::from_static(b"Fine Thanks"));
                r
            }
            "/dated" => {
                let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
                r.headers_mut().insert(
                    "date",
                    http::HeaderValue::from_static("Tue, 01 Dec 2026 00:00:00 GMT"),
                );
                r
            }
            // An HTTP/1.0 upstream's answer, of known and of unknown length.
            "/v10" | "/v10stream" => {
                let body = if path == "/v10" {
                    Full::new(Bytes::from(text)).boxed()
                } else {
                    let frames = vec![Ok::<_, Infallible>(Frame::data(Bytes::from(text)))];
                    StreamBody::new(futures_util::stream::iter(frames)).boxed()
                };
                let mut r = Response::new(body);
                *r.version_mut() = http::Version::HTTP_10;
                r
            }
            // A coding of its own: hyper adds `chunked` as the last one.
            "/gzip" => {
                let frames = vec![Ok::<_, Infallible>(Frame::data(Bytes::from(text)))];
                let mut r =
                    Response::new(StreamBody::new(futures_util::stream::iter(frames)).boxed());
                r.headers_mut()
                    .insert("transfer-encoding", http::HeaderValue::from_static("gzip"));
                r
            }
            // A length header before an empty body (left out), and on a 204.
            "/claims" | "/nocontent" => {
                let mut r = Response::new(Full::new(Bytes::new()).boxed());
                r.headers_mut()
                    .insert("content-length", http::HeaderValue::from_static("5"));
                if path == "/nocontent" {
                    *r.status_mut() = http::StatusCode::NO_CONTENT;
                }
                r
            }
            "/keep" => {
                let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
                r.headers_mut()
                    .insert("connection", http::HeaderValue::from_static("keep-alive"));
                r
            }
            "/close" => {
                let mut r = Response::new(Full::new(Bytes::from(text)).boxed());
                r.headers_mut()
                    .insert("connection", http::HeaderValue::from_static("close"));
                r
            }
            _ => Response::new(Full::new(Bytes::from(text)).boxed()),
        };
        resp.headers_mut()
            .insert("x-seen", http::HeaderValue::from_static("yes"));
        resp
    }

    async fn start() -> std::net::SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(
            listener,
            |_| answer,
            std::future::pending(),
            Duration::from_secs(1),
        ));
        addr
    }

    /// Reads what arrives until `n` answers have come whole or the connection closes (bounded).
    async fn read_answers(c: &mut TcpStream, n: usize) -> String {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while count_answers(&got) < n {
            match tokio::time::timeout_at(deadline, c.read(&mut buf)).await {
                Ok(Ok(0)) | Err(_) => break,
                Ok(Ok(k)) => got.extend_from_slice(&buf[..k]),
                Ok(Err(_)) => break,
            }
        }
        String::from_utf8_lossy(&got).into_owned()
    }

    fn count_answers(b: &[u8]) -> usize {
        let text = String::from_utf8_lossy(b);
        let mut n = 0;
        let mut rest = &text[..];
        while let Some(at) = rest.find("HTTP/1.") {
            let after = &rest[at..];
            let Some(head_end) = after.find("\r\n\r\n") else {
                break;
            };
            let head = after[..head_end].to_ascii_lowercase();
            let body = &after[head_end + 4..];
            let used = if let Some(l) = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length: "))
            {
                let l: usize = l.trim().parse().unwrap_or(0);
                if body.len() < l {
                    break;
                }
                l
            } else if head.contains("transfer-encoding:") {
                match body.find("0\r\n\r\n") {
                    Some(e) => e + 5,
                    None => break,
                }
            } else if head.starts_with("http/1.1 204") {
                0
            } else {
                // Ended by the connection's close: not whole until then.
                break;
            };
            n += 1;
            rest = &after[head_end + 4 + used..];
        }
        n
    }

    /// The date hyper writes is now's; masked for comparing.
    fn undated(s: &str) -> String {
        s.lines()
            .map(|l| {
                if l.starts_with("date: ") && !l.contains("2026 00:00:00") {
                    "date: <now>"
                } else {
                    l
                }
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    async fn one(addr: std::net::SocketAddr, raw: &str) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(raw.as_bytes()).await.unwrap();
        read_answers(&mut c, 1).await
    }

    /// Each kind of answer, to a `POST` read here and to the same request as a `GET` (which
    /// hyper reads): the same bytes but for the method the handler saw.
    #[tokio::test]
    async fn answers_are_written_as_hyper_writes_them() {
        let addr = start().await;
        for path in [
            "/",
            "/stream",
            "/many",
            "/empty",
            "/reason",
            "/dated",
            "/close",
            "/v10",
            "/v10stream",
            "/gzip",
            "/claims",
            "/nocontent",
            "/keep",
        ] {
            let req = |m: &str| {
                format!("{m} {path} HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\n\r\nhello")
            };
            let lean = one(addr, &req("POST")).await;
            let hyper = one(addr, &req("GET")).await;
            let bodiless = ["/empty", "/claims", "/nocontent"].contains(&path);
            // (`/many`'s text is cut up by its chunks' framing.)
            let many = path == "/many" && lean.len() > 100_000 && lean.ends_with("\r\n0\r\n\r\n");
            assert!(
                lean.contains("POST hello") || bodiless || many,
                "{path}: {lean}"
            );
            assert_eq!(
                undated(&lean).replace("POST", " GET"),
                undated(&hyper),
                "{path}"
            );
        }
    }

    /// Requests sent back to back in one write are answered in order; one this does not read (a
    /// `GET`, a `Transfer-Encoding`) goes to hyper with the bytes after it, and a `POST` after
    /// that is answered too.
    #[tokio::test]
    async fn pipelined_requests_and_those_left_to_hyper_are_all_answered_in_order() {
        let addr = start().await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        let post = |b: &str| {
            format!(
                "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: {}\r\n\r\n{b}",
                b.len()
            )
        };
        let all = [
            post("one"),
            post("two"),
            "GET / HTTP/1.1\r\nhost: x\r\n\r\n".to_string(),
            "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n5\r\nthree\r\n0\r\n\r\n"
                .to_string(),
            post("four"),
        ]
        .concat();
        c.write_all(all.as_bytes()).await.unwrap();
        let got = read_answers(&mut c, 5).await;
        let order: Vec<_> = ["POST one", "POST two", "GET  ka", "POST three", "POST four"]
            .iter()
            .map(|w| got.find(w).unwrap_or_else(|| panic!("{w} in {got}")))
            .collect();
        assert!(order.windows(2).all(|w| w[0] < w[1]), "{got}");
    }

    /// A body that comes in later segments than its head is read here as it comes, and the
    /// connection's next request too; `Connection: keep-alive` is read here.
    #[tokio::test]
    async fn a_body_after_its_head_is_read_as_it_comes_and_the_connection_is_kept() {
        let addr = start().await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(
            b"POST /via HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\ncontent-length: 6\r\n\r\nab",
        )
        .await
        .unwrap();
        for piece in [&b"cd"[..], b"ef"] {
            tokio::time::sleep(Duration::from_millis(50)).await;
            c.write_all(piece).await.unwrap();
        }
        let got = read_answers(&mut c, 1).await;
        assert!(got.contains("POST abcdef ka=true via=coming"), "{got}");
        // The head alone first, then the body and the next request in one write.
        c.write_all(b"POST /via HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        c.write_all(b"ePOST /via HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\nf")
            .await
            .unwrap();
        let got = read_answers(&mut c, 2).await;
        assert!(got.contains("POST e ka=false via=coming"), "{got}");
        assert!(got.contains("POST f ka=false via=whole"), "{got}");
        // A `GET` is hyper's, with its body.
        let hyper = one(
            addr,
            "GET /via HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\n\r\ng",
        )
        .await;
        assert!(hyper.contains(" GET g ka=false via=hyper"), "{hyper}");
    }

    /// An answer that comes before the request's body has all come closes the connection
    /// after it (the rest of the body is not read); a client that leaves mid-body ends its
    /// exchange.
    #[tokio::test]
    async fn an_answer_before_its_body_has_come_closes_the_connection() {
        let addr = start().await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"POST /early HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nab")
            .await
            .unwrap();
        let mut got = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(5), c.read_to_end(&mut got)).await;
        assert!(
            matches!(read, Ok(Ok(_))),
            "closed after the answer: {read:?}"
        );
        let got = String::from_utf8_lossy(&got);
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.contains("\r\nconnection: close\r\n"), "{got}");
        assert!(got.ends_with("\r\n\r\nearly"), "{got}");
    }

    /// The listener's head limits hold for requests read here: past them hyper answers `431`.
    #[tokio::test]
    async fn a_head_past_the_listeners_limits_gets_hypers_431() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let limits = ConnLimits {
            max_headers: 4,
            ..ConnLimits::default()
        };
        tokio::spawn(serve_with(
            listener,
            |_| (answer, std::future::pending::<()>()),
            std::future::pending(),
            ServeOptions::new(limits, Duration::from_secs(1)),
        ));
        let many = "POST / HTTP/1.1\r\nhost: x\r\na: 1\r\nb: 2\r\nc: 3\r\nd: 4\r\ncontent-length: 0\r\n\r\n";
        assert!(one(addr, many).await.starts_with("HTTP/1.1 431"));
        let few = "POST / HTTP/1.1\r\nhost: x\r\na: 1\r\ncontent-length: 2\r\n\r\nok";
        assert!(one(addr, few).await.contains("POST ok"));
    }

    /// A client that closes while its call is in flight (its body read or still coming) has
    /// left: the exchange is dropped.
    #[tokio::test]
    async fn a_client_that_closes_mid_call_drops_the_exchange() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let dropped = Arc::new(AtomicBool::new(false));
        let flag = dropped.clone();
        tokio::spawn(serve(
            listener,
            move |_| {
                let flag = flag.clone();
                move |_req: Request<RequestBody>| {
                    struct Guard(Arc<AtomicBool>);
                    impl Drop for Guard {
                        fn drop(&mut self) {
                            self.0.store(true, Ordering::SeqCst);
                        }
                    }
                    let guard = Guard(flag.clone());
                    async move {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        drop(guard);
                        Response::new(Full::new(Bytes::new()))
                    }
                }
            },
            std::future::pending(),
            Duration::from_secs(1),
        ));
        // A whole request, and one whose body is still coming.
        for req in [
            &b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 10\r\n\r\nab",
        ] {
            dropped.store(false, Ordering::SeqCst);
            let mut c = TcpStream::connect(addr).await.unwrap();
            c.write_all(req).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert!(!dropped.load(Ordering::SeqCst), "in flight");
            drop(c);
            let mut waited = 0;
            while !dropped.load(Ordering::SeqCst) {
                waited += 1;
                assert!(
                    waited < 100,
                    "the exchange was not dropped when its client left"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

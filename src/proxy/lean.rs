//! The lean upstream leg of a long stream: a bodiless HTTP/1.1 `GET` that asks for an event
//! stream (MCP's server stream, most often open for the whole session and silent) goes on a
//! connection of its own, written and read here instead of by hyper's client connection.
//!
//! Why not hyper: a hyper client connection keeps, for as long as it lives, a read buffer and a
//! write buffer, its request channel (a block of request slots) and its state — most of what an
//! idle stream cost (heaptrack; benches/RESULTS.md). Here an open stream holds its socket, the
//! framing state and
//! no buffer while it waits: a read goes to the stack and is copied out once, into the frame.
//! No crate fits: hyper's own decoder is private, and a separate HTTP client would bring back
//! what this removes.
//!
//! What it does: writes the request head as it came (method, origin-form target, headers in
//! order), reads the response head with `httparse` (skipping `1xx` interim answers), and reads
//! the body by its framing (RFC 9112 §6.3: none for `204`/`304`, chunked, `Content-Length`, or
//! until close), yielding each piece as it arrives — an SSE event is passed on the moment its
//! bytes are read. The connection is not reused: it closes when the body is dropped.

use bytes::{Buf, Bytes, BytesMut};
use http::header::{HeaderName, HeaderValue, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, Method, Request, Response, StatusCode, Version};
use http_body::{Body, Frame, SizeHint};
use hyper_util::rt::TokioIo;
use std::pin::Pin;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};

use crate::server::BoxError;

/// Largest response head read (start line and headers).
const MAX_HEAD: usize = 64 * 1024;
/// Most header fields of a response head (hyper's default too).
const MAX_HEADERS: usize = 100;
/// Largest chunk-size line (the size and any extensions).
const MAX_SIZE_LINE: usize = 4096;
/// Largest trailer section.
const MAX_TRAILERS: usize = 16 * 1024;
/// One read's most bytes (a stack buffer, copied into the frame it becomes).
const READ_SIZE: usize = 8192;

/// Whether a request takes the lean path: an HTTP/1.1 `GET` with no body that accepts
/// `text/event-stream`, not an upgrade.
pub fn wants_lean<B: Body>(req: &Request<B>) -> bool {
    req.method() == Method::GET
        && req.version() == Version::HTTP_11
        && req.body().is_end_stream()
        && crate::media::accepts_event_stream(req.headers())
        && !super::headers::is_upgrade(req.headers())
}

/// Sends `req` (origin form) on `io` and reads the response head; the body reads on. Only the
/// head is sent: a lean request has no body (`wants_lean`).
pub async fn send<T, B>(
    io: T,
    req: Request<B>,
    counted: crate::metrics::Counted,
) -> Result<Response<LeanBody<T>>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin,
{
    let mut io = TokioIo::new(io);
    let head = encode_head(&req);
    drop(req);
    io.write_all(&head)
        .await
        .map_err(|e| format!("writing the request to the upstream: {e}"))?;
    io.flush()
        .await
        .map_err(|e| format!("writing the request to the upstream: {e}"))?;
    let mut buf = BytesMut::new();
    loop {
        if let Some(resp) = parse_head(&mut buf)? {
            let (parts, framing) = resp;
            let state = match framing {
                Framing::Empty | Framing::Length(0) => State::Done,
                Framing::Length(n) => State::Length(n),
                Framing::Chunked => State::Chunked(Chunked::default()),
                Framing::Close => State::Close,
            };
            let body = LeanBody {
                io,
                pending: buf.freeze(),
                state,
                _counted: counted,
            };
            return Ok(Response::from_parts(parts, body));
        }
        if buf.len() >= MAX_HEAD {
            return Err(format!(
                "the upstream's response head is larger than {MAX_HEAD} bytes"
            ));
        }
        buf.reserve(4096);
        let n = tokio::io::AsyncReadExt::read_buf(&mut io, &mut buf)
            .await
            .map_err(|e| format!("reading the upstream's response: {e}"))?;
        if n == 0 {
            return Err("the upstream closed the connection before its response head".into());
        }
    }
}

/// The request head as it goes upstream: the client's method, target and headers, in order.
fn encode_head<B>(req: &Request<B>) -> Vec<u8> {
    let target = req.uri().path_and_query().map_or("/", |p| p.as_str());
    let mut out = Vec::with_capacity(128 + req.headers().len() * 48);
    out.extend_from_slice(req.method().as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in req.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out
}

/// How a response's body is delimited (RFC 9112 §6.3).
#[derive(Debug, PartialEq)]
enum Framing {
    Empty,
    Length(u64),
    Chunked,
    Close,
}

/// Parses one final response head off the front of `buf` (interim `1xx` heads are dropped);
/// `None` while it is incomplete.
#[allow(clippy::type_complexity)]
fn parse_head(buf: &mut BytesMut) -> Result<Option<(http::response::Parts, Framing)>, String> {
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut r = httparse::Response::new(&mut headers);
        let len = match r.parse(buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) => return Ok(None),
            Err(e) => return Err(format!("the upstream's response head is invalid: {e}")),
        };
        let code = r.code.unwrap_or(0);
        let status = StatusCode::from_u16(code)
            .map_err(|_| format!("the upstream answered with status {code}"))?;
        if status == StatusCode::SWITCHING_PROTOCOLS {
            return Err("101 Switching Protocols to a request that asked for no upgrade".into());
        }
        if status.is_informational() {
            buf.advance(len);
            continue;
        }
        let mut map = HeaderMap::with_capacity(r.headers.len());
        for h in r.headers.iter() {
            let name = HeaderName::from_bytes(h.name.as_bytes())
                .map_err(|_| format!("the upstream sent an invalid header name {:?}", h.name))?;
            let value = HeaderValue::from_bytes(h.value)
                .map_err(|_| format!("the upstream sent an invalid value for {name}"))?;
            map.append(name, value);
        }
        let version = if r.version == Some(0) {
            Version::HTTP_10
        } else {
            Version::HTTP_11
        };
        let framing = framing(status, &map)?;
        buf.advance(len);
        let mut resp = Response::new(());
        *resp.status_mut() = status;
        *resp.version_mut() = version;
        *resp.headers_mut() = map;
        return Ok(Some((resp.into_parts().0, framing)));
    }
}

fn framing(status: StatusCode, headers: &HeaderMap) -> Result<Framing, String> {
    if status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED {
        return Ok(Framing::Empty);
    }
    if headers.contains_key(TRANSFER_ENCODING) {
        let last = headers
            .get_all(TRANSFER_ENCODING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .rfind(|c| !c.is_empty());
        // Chunked last: chunked framing; any other last coding: the body runs to the close.
        return Ok(match last {
            Some(c) if c.eq_ignore_ascii_case("chunked") => Framing::Chunked,
            _ => Framing::Close,
        });
    }
    let mut length = None;
    for v in headers.get_all(CONTENT_LENGTH) {
        for part in v.to_str().unwrap_or("x").split(',') {
            let n: u64 = part
                .trim()
                .parse()
                .map_err(|_| "the upstream sent an invalid Content-Length".to_string())?;
            if length.is_some_and(|l| l != n) {
                return Err("the upstream sent conflicting Content-Length values".into());
            }
            length = Some(n);
        }
    }
    Ok(length.map_or(Framing::Close, Framing::Length))
}

/// Where the body's reading is.
#[derive(Debug)]
enum State {
    Length(u64),
    Chunked(Chunked),
    Close,
    Done,
}

/// A lean stream's body: frames as they are read from the upstream's socket.
pub struct LeanBody<T> {
    io: TokioIo<T>,
    /// Read and not yet yielded (empty while the stream waits).
    pending: Bytes,
    state: State,
    /// The connection counted open (`rpctap_upstream_connections`).
    _counted: crate::metrics::Counted,
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
        loop {
            if matches!(this.state, State::Done) {
                return Poll::Ready(None);
            }
            if this.pending.is_empty() {
                let mut space = [0u8; READ_SIZE];
                let mut rb = ReadBuf::new(&mut space);
                match Pin::new(&mut this.io).poll_read(cx, &mut rb) {
                    Poll::Pending => return Poll::Pending,
                    Poll::Ready(Err(e)) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(Err(LeanError::Io(e).into())));
                    }
                    Poll::Ready(Ok(())) if rb.filled().is_empty() => {
                        let close = matches!(this.state, State::Close);
                        this.state = State::Done;
                        return Poll::Ready(if close {
                            None
                        } else {
                            Some(Err(LeanError::Truncated.into()))
                        });
                    }
                    Poll::Ready(Ok(())) => this.pending = Bytes::copy_from_slice(rb.filled()),
                }
            }
            let step = match &mut this.state {
                State::Length(rem) => {
                    let n = (*rem).min(this.pending.len() as u64) as usize;
                    *rem -= n as u64;
                    let data = this.pending.split_to(n);
                    if *rem == 0 {
                        this.state = State::Done;
                        this.pending = Bytes::new();
                    }
                    Step::Data(data)
                }
                State::Close => Step::Data(std::mem::take(&mut this.pending)),
                State::Chunked(c) => match c.step(&mut this.pending) {
                    Ok(s) => s,
                    Err(e) => {
                        this.state = State::Done;
                        return Poll::Ready(Some(Err(LeanError::Chunked(e).into())));
                    }
                },
                State::Done => Step::End,
            };
            match step {
                Step::Data(d) if d.is_empty() => {}
                Step::Data(d) => return Poll::Ready(Some(Ok(Frame::data(d)))),
                Step::Trailers(t) => {
                    this.state = State::Done;
                    return Poll::Ready(Some(Ok(Frame::trailers(t))));
                }
                Step::End => {
                    this.state = State::Done;
                    this.pending = Bytes::new();
                    return Poll::Ready(None);
                }
                Step::More => {}
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.state, State::Done)
    }

    fn size_hint(&self) -> SizeHint {
        match self.state {
            State::Length(n) => SizeHint::with_exact(n),
            State::Done => SizeHint::with_exact(0),
            _ => SizeHint::new(),
        }
    }
}

/// What one step of the chunked decoder gives.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Body bytes (possibly empty).
    Data(Bytes),
    /// The trailer section (the body has ended).
    Trailers(HeaderMap),
    /// The body has ended (no trailers).
    End,
    /// Every byte given was used: more are needed.
    More,
}

/// An incremental decoder of the chunked transfer coding (RFC 9112 §7.1): fed any cut of the
/// stream, it yields the same data (chunk extensions ignored, strict CRLFs, sizes bounded to 64
/// bits, the size line to [`MAX_SIZE_LINE`], trailers to [`MAX_TRAILERS`]).
#[derive(Debug, Default)]
pub struct Chunked {
    phase: Phase,
    /// The size line's or trailer section's bytes so far.
    line: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
enum Phase {
    #[default]
    Size,
    Data(u64),
    DataCr,
    DataLf,
    Trailers,
    Done,
}

impl Chunked {
    /// Consumes from the front of `input` and says what came of it; call again while `input`
    /// is not empty (or after [`Step::Data`] with more input to come).
    pub fn step(&mut self, input: &mut Bytes) -> Result<Step, &'static str> {
        loop {
            match self.phase {
                Phase::Done => return Ok(Step::End),
                Phase::Data(rem) => {
                    if input.is_empty() {
                        return Ok(Step::More);
                    }
                    let n = rem.min(input.len() as u64) as usize;
                    let data = input.split_to(n);
                    let left = rem - n as u64;
                    self.phase = if left == 0 {
                        Phase::DataCr
                    } else {
                        Phase::Data(left)
                    };
                    return Ok(Step::Data(data));
                }
                Phase::DataCr | Phase::DataLf => {
                    let Some(&b) = input.first() else {
                        return Ok(Step::More);
                    };
                    let want = if self.phase == Phase::DataCr {
                        b'\r'
                    } else {
                        b'\n'
                    };
                    if b != want {
                        return Err("a chunk's data is not followed by CRLF");
                    }
                    input.advance(1);
                    self.phase = if self.phase == Phase::DataCr {
                        Phase::DataLf
                    } else {
                        Phase::Size
                    };
                }
                Phase::Size => {
                    let Some(line) = self.take_line(input, MAX_SIZE_LINE)? else {
                        return Ok(Step::More);
                    };
                    let size = parse_size(&line)?;
                    self.phase = if size == 0 {
                        Phase::Trailers
                    } else {
                        Phase::Data(size)
                    };
                }
                Phase::Trailers => {
                    // Lines up to an empty one; the section is parsed whole at its end.
                    let Some(pos) = memchr::memchr(b'\n', input) else {
                        self.keep(input, MAX_TRAILERS)?;
                        return Ok(Step::More);
                    };
                    let piece = input.split_to(pos + 1);
                    if self.line.len() + piece.len() > MAX_TRAILERS {
                        return Err("the trailer section is too large");
                    }
                    self.line.extend_from_slice(&piece);
                    let ended = self.line == b"\r\n" || self.line.ends_with(b"\r\n\r\n");
                    if !ended {
                        if !self.line.ends_with(b"\r\n") {
                            return Err("a trailer line does not end with CRLF");
                        }
                        continue;
                    }
                    self.phase = Phase::Done;
                    let section = std::mem::take(&mut self.line);
                    if section == b"\r\n" {
                        return Ok(Step::End);
                    }
                    return parse_trailers(&section).map(Step::Trailers);
                }
            }
        }
    }

    /// Whether the body has ended.
    pub fn done(&self) -> bool {
        self.phase == Phase::Done
    }

    /// Appends all of `input` to the line kept so far, bounded.
    fn keep(&mut self, input: &mut Bytes, max: usize) -> Result<(), &'static str> {
        if self.line.len() + input.len() > max {
            return Err("a chunk-size line or the trailer section is too long");
        }
        self.line.extend_from_slice(input);
        input.clear();
        Ok(())
    }

    /// A whole CRLF-ended line (without the CRLF), or `None` (the part kept) when it has not
    /// ended yet.
    fn take_line(
        &mut self,
        input: &mut Bytes,
        max: usize,
    ) -> Result<Option<Vec<u8>>, &'static str> {
        let Some(pos) = memchr::memchr(b'\n', input) else {
            self.keep(input, max)?;
            return Ok(None);
        };
        if self.line.len() + pos + 1 > max {
            return Err("a chunk-size line is too long");
        }
        self.line.extend_from_slice(&input[..pos + 1]);
        input.advance(pos + 1);
        let mut line = std::mem::take(&mut self.line);
        if line.len() < 2 || line[line.len() - 2] != b'\r' {
            return Err("a chunk-size line does not end with CRLF");
        }
        line.truncate(line.len() - 2);
        Ok(Some(line))
    }
}

/// The chunk size of a size line: hex digits, then optional whitespace and `;extensions`.
fn parse_size(line: &[u8]) -> Result<u64, &'static str> {
    let digits = line.iter().take_while(|b| b.is_ascii_hexdigit()).count();
    if digits == 0 {
        return Err("a chunk size is missing");
    }
    let rest = &line[digits..];
    let rest_ok = rest.is_empty()
        || matches!(
            rest.iter().find(|b| **b != b' ' && **b != b'\t'),
            Some(b';') | None
        );
    if !rest_ok {
        return Err("a chunk size is invalid");
    }
    let mut n: u64 = 0;
    for &b in &line[..digits] {
        let d = (b as char).to_digit(16).unwrap_or(0) as u64;
        n = n
            .checked_mul(16)
            .and_then(|n| n.checked_add(d))
            .ok_or("a chunk size is too large")?;
    }
    Ok(n)
}

fn parse_trailers(section: &[u8]) -> Result<HeaderMap, &'static str> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let parsed = match httparse::parse_headers(section, &mut headers) {
        Ok(httparse::Status::Complete((_, h))) => h,
        _ => return Err("the trailer section is invalid"),
    };
    let mut map = HeaderMap::with_capacity(parsed.len());
    for h in parsed {
        let name =
            HeaderName::from_bytes(h.name.as_bytes()).map_err(|_| "a trailer name is invalid")?;
        let value = HeaderValue::from_bytes(h.value).map_err(|_| "a trailer value is invalid")?;
        map.append(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Decodes `input` fed in pieces cut at `cuts`: the data, and the trailers if any.
    fn decode(
        input: &[u8],
        cuts: &[usize],
    ) -> Result<(Vec<u8>, Option<HeaderMap>, bool), &'static str> {
        let mut d = Chunked::default();
        let (mut data, mut trailers, mut ended) = (Vec::new(), None, false);
        let mut at = 0;
        for &end in cuts.iter().chain(std::iter::once(&input.len())) {
            let mut piece = Bytes::copy_from_slice(&input[at..end.max(at)]);
            at = end.max(at);
            while !ended {
                match d.step(&mut piece)? {
                    Step::Data(b) => data.extend_from_slice(&b),
                    Step::Trailers(t) => {
                        trailers = Some(t);
                        ended = true;
                    }
                    Step::End => ended = true,
                    Step::More => break,
                }
            }
        }
        Ok((data, trailers, ended))
    }

    const BODY: &[u8] = b"5\r\nhello\r\n1A;name=value\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\n\r\n";

    #[test]
    fn any_cut_decodes_like_the_whole() {
        let whole = decode(BODY, &[]).unwrap();
        assert_eq!(whole.0, b"helloabcdefghijklmnopqrstuvwxyz");
        assert!(whole.2, "ended");
        for i in 0..=BODY.len() {
            for j in i..=BODY.len() {
                assert_eq!(decode(BODY, &[i, j]).unwrap(), whole, "cut at {i}, {j}");
            }
        }
    }

    #[test]
    fn trailers_are_kept_and_any_cut_gives_them() {
        let body = b"3\r\nabc\r\n0\r\nx-check: 1\r\nx-other: two\r\n\r\n";
        let whole = decode(body, &[]).unwrap();
        let t = whole.1.clone().expect("trailers");
        assert_eq!(t["x-check"], "1");
        assert_eq!(t["x-other"], "two");
        for i in 0..=body.len() {
            assert_eq!(decode(body, &[i]).unwrap(), whole, "cut at {i}");
        }
    }

    #[test]
    fn invalid_framing_is_an_error_not_a_panic() {
        for bad in [
            &b"zz\r\n"[..],
            b"5\r\nhelloX\r\n",
            b"5\nhello\r\n",
            b"fffffffffffffffff\r\n",
            b"5 x\r\nhello\r\n",
            b"0\r\nbad trailer\r\n\r\n",
        ] {
            assert!(
                decode(bad, &[]).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let long = [b"1".to_vec(), b";".to_vec(), b"x".repeat(MAX_SIZE_LINE)].concat();
        assert!(decode(&long, &[]).is_err());
    }

    #[test]
    fn framing_follows_rfc_9112() {
        let h = |pairs: &[(&str, &str)]| {
            let mut m = HeaderMap::new();
            for (k, v) in pairs {
                m.append(
                    HeaderName::from_bytes(k.as_bytes()).unwrap(),
                    v.parse().unwrap(),
                );
            }
            m
        };
        let ok = StatusCode::OK;
        assert_eq!(
            framing(ok, &h(&[("transfer-encoding", "chunked")])),
            Ok(Framing::Chunked)
        );
        assert_eq!(
            framing(ok, &h(&[("transfer-encoding", "gzip, chunked")])),
            Ok(Framing::Chunked)
        );
        assert_eq!(
            framing(ok, &h(&[("transfer-encoding", "gzip")])),
            Ok(Framing::Close)
        );
        assert_eq!(
            framing(ok, &h(&[("content-length", "12")])),
            Ok(Framing::Length(12))
        );
        assert_eq!(
            framing(ok, &h(&[("content-length", "12, 12")])),
            Ok(Framing::Length(12))
        );
        assert!(framing(
            ok,
            &h(&[("content-length", "12"), ("content-length", "13")])
        )
        .is_err());
        assert!(framing(ok, &h(&[("content-length", "-1")])).is_err());
        assert_eq!(framing(ok, &h(&[])), Ok(Framing::Close));
        assert_eq!(
            framing(StatusCode::NO_CONTENT, &h(&[("content-length", "5")])),
            Ok(Framing::Empty)
        );
    }

    #[test]
    fn interim_heads_are_skipped_and_a_partial_head_waits() {
        let mut buf = BytesMut::from(&b"HTTP/1.1 103 Early Hints\r\nlink: </a>\r\n\r\nHTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\n"[..]);
        let (parts, framing) = parse_head(&mut buf).unwrap().unwrap();
        assert_eq!(parts.status, 200);
        assert_eq!(parts.headers["content-type"], "text/event-stream");
        assert_eq!(framing, Framing::Chunked);
        assert_eq!(&buf[..], b"5\r\n", "the body's first bytes stay");
        let mut partial = BytesMut::from(&b"HTTP/1.1 200 OK\r\ncontent-le"[..]);
        assert!(parse_head(&mut partial).unwrap().is_none());
        let mut bad = BytesMut::from(&b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n"[..]);
        assert!(parse_head(&mut bad).is_err());
    }
}

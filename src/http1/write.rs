//! What rpctap writes itself: an answer's head, as hyper's server writes it (so that a client
//! sees the same bytes whichever of the two answered), with the framing rpctap decides — a
//! `content-length` that is not one plain value is never passed on — and [`Declared`], the
//! count a writer keeps of the body against the length the head declared.

use http::{StatusCode, Version};

/// What is left of the length a head declared: the writer takes each piece of the body through
/// [`Declared::take`] (never more than declared) and asks [`Declared::short`] at the body's end
/// (a body that ended short must close the connection: only the close tells the client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Declared(pub u64);

impl Declared {
    /// The part of `data` the head's length still allows; `true` when some was cut off (the
    /// body is longer than declared: the connection must close after what was written).
    pub fn take(&mut self, data: &mut bytes::Bytes) -> bool {
        let over = data.len() as u64 > self.0;
        if over {
            data.truncate(self.0 as usize);
        }
        self.0 -= data.len() as u64;
        over
    }

    /// The body ended before the declared length.
    pub fn short(&self) -> bool {
        self.0 > 0
    }
}

/// How an answer's body goes on the wire after its head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Written {
    /// As it is (a `content-length` says where it ends), or nothing for a status without a body.
    Plain,
    /// The chunked coding.
    Chunked,
    /// As it is, the connection's close ending it (an HTTP/1.0 answer of unknown length).
    Close,
}

/// Writes a response head as hyper's server writes it to an HTTP/1.1 `POST` (`role.rs`,
/// `Server::encode`, and `Conn::enforce_version` for keep-alive): the status line in the
/// answer's own version, the headers in order (`content-length` dropped before an empty body,
/// `transfer-encoding` for a status or version that cannot chunk, `chunked` added as its last
/// coding), then the framing the body needs when no header gave it, `connection: close` when the
/// connection is closing, and `date` when there is none. Returns how the body goes, whether it is
/// written at all, and whether the connection closes after it.
pub fn encode_head(
    parts: &http::response::Parts,
    body: Option<Option<u64>>,
    closing: bool,
    out: &mut Vec<u8>,
) -> (Written, bool, bool, Option<u64>) {
    use http::header::{CONNECTION, CONTENT_LENGTH, DATE, TRANSFER_ENCODING};
    let status = parts.status;
    let v10 = parts.version == Version::HTTP_10;
    let bodiless = status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED;
    out.extend_from_slice(if v10 { b"HTTP/1.0 " } else { b"HTTP/1.1 " });
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    match parts.extensions.get::<hyper::ext::ReasonPhrase>() {
        Some(r) => out.extend_from_slice(r.as_bytes()),
        None => out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes()),
    }
    out.extend_from_slice(b"\r\n");
    let line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        out.extend_from_slice(name);
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    let (mut framed, mut framing, mut dated, mut close) = (false, Written::Plain, false, false);
    let mut declared = None;
    // Names in the map's order, each with its values (as hyper's `drain` gives them: the map's
    // `iter` gives them so, without a lookup per name). `connection: close` is added after the
    // `connection` values when the connection is closing and none said so.
    let mut in_connection = false;
    for (name, value) in &parts.headers {
        if in_connection && name != CONNECTION && closing && !close {
            line(out, b"connection", b"close");
            close = true;
        }
        in_connection = name == CONNECTION;
        let v = value.as_bytes();
        if name == CONTENT_LENGTH {
            // Before an empty body hyper leaves the header out; a second one it refuses.
            if body.is_none() || framed {
                continue;
            }
            // A length that is not plain digits is never passed on (the body's own framing is
            // used instead): what rpctap writes it frames itself.
            let Some(n) = super::plain_length(v) else {
                continue;
            };
            declared = Some(n);
            framed = true;
        } else if name == TRANSFER_ENCODING {
            if v10 || bodiless {
                continue;
            }
            framed = true;
            framing = Written::Chunked;
            if !v
                .rsplit(|&c| c == b',')
                .next()
                .is_some_and(|last| last.trim_ascii().eq_ignore_ascii_case(b"chunked"))
            {
                out.extend_from_slice(name.as_str().as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(v);
                out.extend_from_slice(b", chunked\r\n");
                continue;
            }
        } else if name == DATE {
            dated = true;
        } else if in_connection {
            close |= value
                .to_str()
                .is_ok_and(|v| super::lists_option(v, "close"));
        }
        line(out, name.as_str().as_bytes(), v);
    }
    if in_connection && closing && !close {
        line(out, b"connection", b"close");
        close = true;
    }
    // A connection closing (the drain): hyper adds this to the map, after the headers.
    if closing && !close && !parts.headers.contains_key(CONNECTION) {
        line(out, b"connection", b"close");
        close = true;
    }
    if !framed {
        match body {
            Some(None) if v10 || bodiless => framing = Written::Close,
            Some(None) => {
                line(out, b"transfer-encoding", b"chunked");
                framing = Written::Chunked;
            }
            _ if bodiless => {}
            n => {
                let n = n.flatten().unwrap_or(0);
                declared = Some(n);
                line(
                    out,
                    b"content-length",
                    itoa::Buffer::new().format(n).as_bytes(),
                )
            }
        }
    }
    if !dated {
        line(
            out,
            b"date",
            httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes(),
        );
    }
    out.extend_from_slice(b"\r\n");
    let close = close || (framing == Written::Close && !bodiless);
    let declared = declared.filter(|_| framing == Written::Plain && !bodiless);
    (framing, !bodiless, close, declared)
}

//! How an HTTP/1 message's body is delimited (RFC 9112 §6.3): the one decision rpctap's engine
//! makes for what it reads itself — requests on the lean reader (`server::lean`) and the
//! upstream's replies on the lean leg (`proxy::lean`) — read on the way through a head's
//! fields ([`FramingFields`]), never copied from the peer to the other side: the length rpctap
//! writes is always its own.
//!
//! The rules, as hyper's applies them or stricter (`http1_diff` checks every verdict):
//! - `Transfer-Encoding` overrides `Content-Length`; a message with both is read by its coding,
//!   and the length is not passed on (a reply that sent both is not one to reuse a connection
//!   after).
//! - A coding whose last is `chunked` is chunked; `chunked` given twice, or an empty element in
//!   the list (`chunked,`, which hyper and RFC 9110 read differently), is invalid; another last
//!   coding runs a reply to the close and makes a request invalid.
//! - `Content-Length` is plain digits; several fields must all say one value, and a reply's
//!   may be a list of it (`42, 42` is 42; a request's may not, as hyper's server reads it); a
//!   sign, a space inside, another value or no digits is invalid.
//! - A reply to `HEAD` and a `1xx`, `204` or `304` have no body whatever they say.
//! - HTTP/1.0 has no transfer codings: a reply in it that names one is refused.
//! - A `Transfer-Encoding` value must be ASCII text (visible characters, space, tab): hyper does
//!   not read codings out of any other, so neither does the engine — it refuses them.

use http::StatusCode;

/// How a body is delimited.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// No body.
    Empty,
    Length(u64),
    Chunked,
    /// To the connection's close (a reply only).
    Close,
}

/// A message whose framing is invalid: a request gets `400`, a reply `502`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Invalid {
    #[error("an invalid Content-Length")]
    Length,
    #[error("a Transfer-Encoding whose last coding is not chunked")]
    NotChunkedLast,
    #[error("chunked applied more than once")]
    ChunkedTwice,
    #[error("a Transfer-Encoding in an HTTP/1.0 message")]
    CodedHttp10,
    #[error("a Transfer-Encoding with an empty element")]
    EmptyCoding,
    #[error("a Transfer-Encoding that is not ASCII text")]
    OpaqueCoding,
}

/// A `Content-Length` value of plain digits (no list, no sign, no spaces; at most 18 digits, so
/// it cannot overflow).
pub fn plain_length(v: &[u8]) -> Option<u64> {
    if v.is_empty() || v.len() > 18 || !v.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(v.iter().fold(0, |n, &d| n * 10 + u64::from(d - b'0')))
}

/// The framing fields of one head, read as its fields go by.
#[derive(Clone, Copy, Debug, Default)]
pub struct FramingFields {
    /// What the `Content-Length` fields said (an error once one was invalid or disagreed).
    length: Option<Result<u64, Invalid>>,
    /// The length came as other than one plain value (a list, a second field).
    odd_length: bool,
    /// A value was a list (`5, 5`): a reply may say so, a request may not (hyper's server
    /// refuses it, so a request read so here would be read otherwise there).
    listed: bool,
    /// `Transfer-Encoding` was given.
    coded: bool,
    /// Its last coding is `chunked`.
    chunked_last: bool,
    /// How many times `chunked` was named.
    chunked: u8,
    /// A coding list with an empty element (`chunked,`): RFC 9110 lets a recipient skip it,
    /// hyper reads the last element as the last coding — an ambiguity the engine refuses.
    empty_coding: bool,
    /// A value with a byte that is not visible ASCII (obs-text, a control): hyper cannot read
    /// such a field as text, so does not see `chunked` in it and reads the body to the close,
    /// where a byte-wise reading would stop at the last chunk — two framings of one reply. Found
    /// by `http1_diff` (`Transfer-Encoding: \xe4a\xd1,chunked`); refused.
    opaque_coding: bool,
}

impl FramingFields {
    /// One `Content-Length` field's value; `true` when it is the first and one plain value
    /// (then it may be passed on as it came: it is the value rpctap would write).
    pub fn content_length(&mut self, v: &[u8]) -> bool {
        self.listed |= v.contains(&b',');
        match (self.length, plain_length(v)) {
            (None, Some(n)) => {
                self.length = Some(Ok(n));
                true
            }
            (before, _) => {
                self.odd_length = true;
                self.length = Some(list_length(v, before));
                false
            }
        }
    }

    /// One `Transfer-Encoding` field's value (the codings of all fields are one list).
    pub fn transfer_encoding(&mut self, v: &[u8]) {
        self.coded = true;
        self.opaque_coding |= !v.iter().all(|&c| c == b'\t' || (b' '..=b'~').contains(&c));
        for coding in v.split(|&c| c == b',').map(<[u8]>::trim_ascii) {
            if coding.is_empty() {
                self.empty_coding = true;
                continue;
            }
            self.chunked_last = coding.eq_ignore_ascii_case(b"chunked");
            if self.chunked_last {
                self.chunked = self.chunked.saturating_add(1);
            }
        }
    }

    /// A `Transfer-Encoding` was given.
    pub fn coded(&self) -> bool {
        self.coded
    }

    /// A `Content-Length` was given.
    pub fn has_length(&self) -> bool {
        self.length.is_some()
    }

    /// The length was given as other than one plain value: what is passed on must be rpctap's.
    pub fn odd_length(&self) -> bool {
        self.odd_length
    }

    /// The framing of a reply with `status`, to a `HEAD` when `is_head`, in HTTP/1.0 when
    /// `http10` (which has no transfer codings: one there is a faulty framing, refused).
    pub fn response(
        &self,
        status: StatusCode,
        is_head: bool,
        http10: bool,
    ) -> Result<Framing, Invalid> {
        if self.coded && http10 {
            return Err(Invalid::CodedHttp10);
        }
        if self.coded && self.empty_coding {
            return Err(Invalid::EmptyCoding);
        }
        if self.opaque_coding {
            return Err(Invalid::OpaqueCoding);
        }
        if is_head
            || status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED
        {
            return Ok(Framing::Empty);
        }
        if self.coded {
            return match (self.chunked, self.chunked_last) {
                (2.., _) => Err(Invalid::ChunkedTwice),
                (_, true) => Ok(Framing::Chunked),
                _ => Ok(Framing::Close),
            };
        }
        match self.length {
            None => Ok(Framing::Close),
            Some(Ok(n)) => Ok(Framing::Length(n)),
            Some(Err(e)) => Err(e),
        }
    }

    /// The framing of a request.
    pub fn request(&self) -> Result<Framing, Invalid> {
        if self.coded && self.empty_coding {
            return Err(Invalid::EmptyCoding);
        }
        if self.opaque_coding {
            return Err(Invalid::OpaqueCoding);
        }
        if self.coded {
            return match (self.chunked, self.chunked_last) {
                (2.., _) => Err(Invalid::ChunkedTwice),
                (_, true) => Ok(Framing::Chunked),
                _ => Err(Invalid::NotChunkedLast),
            };
        }
        if self.listed {
            return Err(Invalid::Length);
        }
        match self.length {
            None | Some(Ok(0)) => Ok(Framing::Empty),
            Some(Ok(n)) => Ok(Framing::Length(n)),
            Some(Err(e)) => Err(e),
        }
    }
}

/// The length a `Content-Length` value says, with what earlier ones said (`before`): a list of
/// plain digits that all agree; anything else is invalid.
fn list_length(value: &[u8], before: Option<Result<u64, Invalid>>) -> Result<u64, Invalid> {
    let mut length = match before {
        Some(Err(e)) => return Err(e),
        Some(Ok(n)) => Some(n),
        None => None,
    };
    for part in value.split(|&c| c == b',') {
        let n = plain_length(part.trim_ascii()).ok_or(Invalid::Length)?;
        if length.is_some_and(|l| l != n) {
            return Err(Invalid::Length);
        }
        length = Some(n);
    }
    length.ok_or(Invalid::Length)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> FramingFields {
        let mut f = FramingFields::default();
        for (n, v) in pairs {
            match *n {
                "content-length" => {
                    f.content_length(v.as_bytes());
                }
                _ => f.transfer_encoding(v.as_bytes()),
            }
        }
        f
    }

    #[test]
    fn rfc_9112_for_replies_and_requests_alike() {
        let ok = StatusCode::OK;
        let reply = |p: &[(&str, &str)]| fields(p).response(ok, false, false);
        let request = |p: &[(&str, &str)]| fields(p).request();
        let (cl, te) = ("content-length", "transfer-encoding");
        assert_eq!(reply(&[(cl, "12")]), Ok(Framing::Length(12)));
        assert_eq!(reply(&[(cl, "12, 12")]), Ok(Framing::Length(12)));
        assert_eq!(reply(&[(cl, "12"), (cl, "12")]), Ok(Framing::Length(12)));
        for bad in [
            "+12",
            "12, 13",
            "-1",
            "0x1",
            "1 2",
            "",
            "12,",
            "99999999999999999999",
        ] {
            assert_eq!(reply(&[(cl, bad)]), Err(Invalid::Length), "{bad:?}");
            assert_eq!(request(&[(cl, bad)]), Err(Invalid::Length), "{bad:?}");
        }
        assert_eq!(reply(&[(cl, "12"), (cl, "13")]), Err(Invalid::Length));
        assert_eq!(reply(&[]), Ok(Framing::Close));
        assert_eq!(request(&[]), Ok(Framing::Empty));
        // The coding overrides the length, whichever comes first.
        assert_eq!(reply(&[(cl, "5"), (te, "chunked")]), Ok(Framing::Chunked));
        assert_eq!(reply(&[(te, "chunked"), (cl, "5")]), Ok(Framing::Chunked));
        assert_eq!(reply(&[(te, "gzip"), (cl, "5")]), Ok(Framing::Close));
        assert_eq!(reply(&[(te, "gzip, Chunked")]), Ok(Framing::Chunked));
        assert_eq!(
            reply(&[(te, "gzip"), (te, "chunked")]),
            Ok(Framing::Chunked)
        );
        assert_eq!(reply(&[(te, "chunked, gzip")]), Ok(Framing::Close));
        assert_eq!(
            reply(&[(te, "chunked, chunked")]),
            Err(Invalid::ChunkedTwice)
        );
        assert_eq!(request(&[(te, "gzip")]), Err(Invalid::NotChunkedLast));
        assert_eq!(request(&[(te, "chunked"), (cl, "5")]), Ok(Framing::Chunked));
        assert_eq!(request(&[(cl, "5"), (cl, "5")]), Ok(Framing::Length(5)));
        assert_eq!(request(&[(cl, "5, 5")]), Err(Invalid::Length));
        for bodiless in [
            StatusCode::NO_CONTENT,
            StatusCode::NOT_MODIFIED,
            StatusCode::CONTINUE,
        ] {
            assert_eq!(
                fields(&[(cl, "5")]).response(bodiless, false, false),
                Ok(Framing::Empty)
            );
        }
        assert_eq!(
            fields(&[(cl, "5")]).response(ok, true, false),
            Ok(Framing::Empty)
        );
        assert_eq!(
            fields(&[(te, "chunked")]).response(ok, false, true),
            Err(Invalid::CodedHttp10)
        );
        assert!(fields(&[(cl, "5"), (cl, "5")]).odd_length());
        assert!(!fields(&[(cl, "5")]).odd_length());
    }

    /// A coding hyper cannot read as text is refused, wherever it is in the list.
    #[test]
    fn a_coding_that_is_not_ascii_text_is_refused() {
        let ok = StatusCode::OK;
        for v in [
            &b"\xe4a\xd1,chunked"[..],
            b"chunked\x01",
            b"gzip\x7f, chunked",
        ] {
            let mut f = FramingFields::default();
            f.transfer_encoding(v);
            assert_eq!(
                f.response(ok, false, false),
                Err(Invalid::OpaqueCoding),
                "{v:?}"
            );
            assert_eq!(f.request(), Err(Invalid::OpaqueCoding), "{v:?}");
        }
        let mut f = FramingFields::default();
        f.transfer_encoding(b"gzip,\tchunked");
        assert_eq!(f.response(ok, false, false), Ok(Framing::Chunked));
    }
}

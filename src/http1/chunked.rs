//! The chunked transfer coding (RFC 9112 §7.1), decoded incrementally: the one decoder of
//! rpctap's HTTP/1 engine, for every chunked body it reads itself (the upstream's replies on
//! the lean leg). Fed any cut of the stream it yields the same data — chunk extensions
//! ignored, CRLFs strict, each size line read by `httparse::parse_chunk_size` (held stricter
//! where that is lenient: see [`parse_size`]) and bounded to [`MAX_SIZE_LINE`], trailers to
//! [`MAX_TRAILERS`]. The `chunked` fuzz target checks any cut against the whole, and
//! `http1_diff` checks the framed bodies against hyper's.

use bytes::{Buf, Bytes};
use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;

/// Largest chunk-size line (the size and any extensions).
pub const MAX_SIZE_LINE: usize = 4096;
/// Largest trailer section.
pub const MAX_TRAILERS: usize = 16 * 1024;
/// Most fields of a trailer section.
const MAX_HEADERS: usize = 100;

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

/// An incremental decoder of the chunked transfer coding (see the module's comment).
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

/// The chunk size of a size line (without its CRLF), read by `httparse::parse_chunk_size` —
/// hex digits, optional whitespace, `;extensions` — and held stricter where it is lenient: at
/// least one digit (it reads an empty line as 0), and no control byte but a tab in an
/// extension (a bare LF there is how a request is smuggled past a reader that ends the line
/// at it; hyper refuses it too).
fn parse_size(line: &[u8]) -> Result<u64, &'static str> {
    if !line.first().is_some_and(u8::is_ascii_hexdigit) {
        return Err("a chunk size is missing");
    }
    if line.iter().any(|&b| (b < 0x20 && b != b'\t') || b == 0x7f) {
        return Err("a chunk-size line holds a control byte");
    }
    let mut whole = Vec::with_capacity(line.len() + 2);
    whole.extend_from_slice(line);
    whole.extend_from_slice(b"\r\n");
    match httparse::parse_chunk_size(&whole) {
        Ok(httparse::Status::Complete((n, size))) if n == whole.len() => Ok(size),
        Ok(_) => Err("a chunk size is invalid"),
        Err(_) => Err("a chunk size is invalid or too large"),
    }
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
            // What `httparse::parse_chunk_size` alone would take.
            b"\r\nhello\r\n",
            b"5;a\nb\r\nhello\r\n0\r\n\r\n",
            b"5;a\x00\r\nhello\r\n0\r\n\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
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
}

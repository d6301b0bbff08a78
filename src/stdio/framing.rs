//! Framing: a byte stream split into newline-delimited lines on a copy, holding at most the
//! inspection cap of a partial line (a longer line is handed out in pieces and reported whole).

use bytes::Bytes;

/// A line as the splitter hands it out.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    /// A whole line, without its `\n`.
    Line(Bytes),
    /// Bytes of a line already longer than the cap (passed on, not inspected).
    Spill(Bytes),
    /// The end of such a line, with its length.
    LongEnd(u64),
}

/// Splits a byte stream into lines, keeping at most `max` bytes of a partial line; a longer
/// line is handed out in pieces as it comes (`Spill`) and reported at its end (`LongEnd`).
#[derive(Debug)]
pub struct Lines {
    buf: Vec<u8>,
    max: usize,
    /// The length so far of a line beyond the cap.
    long: Option<u64>,
}

impl Lines {
    pub fn new(max: usize) -> Self {
        Lines {
            buf: Vec::new(),
            max: max.max(1),
            long: None,
        }
    }

    /// Feeds a chunk; `on` gets each piece it completes.
    pub fn feed(&mut self, mut chunk: &[u8], on: &mut dyn FnMut(Piece)) {
        while !chunk.is_empty() {
            let nl = memchr::memchr(b'\n', chunk);
            let (part, rest, ends) = match nl {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &chunk[chunk.len()..], false),
            };
            chunk = rest;
            if let Some(n) = self.long.as_mut() {
                *n += part.len() as u64;
                if !part.is_empty() {
                    on(Piece::Spill(Bytes::copy_from_slice(part)));
                }
                if ends {
                    let n = *n;
                    self.long = None;
                    on(Piece::LongEnd(n));
                }
                continue;
            }
            if self.buf.len() + part.len() > self.max {
                let held = std::mem::take(&mut self.buf);
                self.buf.shrink_to(64 << 10);
                let n = (held.len() + part.len()) as u64;
                if !held.is_empty() {
                    on(Piece::Spill(Bytes::from(held)));
                }
                on(Piece::Spill(Bytes::copy_from_slice(part)));
                if ends {
                    on(Piece::LongEnd(n));
                } else {
                    self.long = Some(n);
                }
                continue;
            }
            if ends {
                let line = if self.buf.is_empty() {
                    Bytes::copy_from_slice(part)
                } else {
                    self.buf.extend_from_slice(part);
                    let l = Bytes::from(std::mem::take(&mut self.buf));
                    self.buf.shrink_to(64 << 10);
                    l
                };
                on(Piece::Line(line));
            } else {
                self.buf.extend_from_slice(part);
            }
        }
    }

    /// The stream ended: a last line without its newline, if any.
    pub fn finish(&mut self, on: &mut dyn FnMut(Piece)) {
        if let Some(n) = self.long.take() {
            on(Piece::LongEnd(n));
        } else if !self.buf.is_empty() {
            on(Piece::Line(Bytes::from(std::mem::take(&mut self.buf))));
        }
    }

    /// Bytes of a partial line held (line mode passes them on at its newline).
    pub fn held(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<Piece> {
        let mut l = Lines::new(max);
        let mut v = Vec::new();
        for c in chunks {
            l.feed(c, &mut |p| v.push(p));
        }
        l.finish(&mut |p| v.push(p));
        v
    }

    #[test]
    fn lines_split_across_any_chunking() {
        let text = b"{\"a\":1}\n\n{\"b\":2}\r\nlast";
        for cut in 0..text.len() {
            let got = split(100, &[&text[..cut], &text[cut..]]);
            assert_eq!(
                got,
                vec![
                    Piece::Line(Bytes::from_static(b"{\"a\":1}")),
                    Piece::Line(Bytes::new()),
                    Piece::Line(Bytes::from_static(b"{\"b\":2}\r")),
                    Piece::Line(Bytes::from_static(b"last")),
                ],
                "cut at {cut}"
            );
        }
    }

    use proptest::prelude::*;

    proptest! {
        /// Any bytes, cut anywhere: the pieces put back together are the input (less the
        /// newlines), each whole line is what `split` gives, and a line over the cap is spilled
        /// and reported with its length instead.
        #[test]
        fn any_chunking_gives_the_lines_back(
            data in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'{'), Just(b'a'), proptest::num::u8::ANY],
                0..400,
            ),
            cuts in proptest::collection::vec(0usize..400, 0..8),
            max in 1usize..40,
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([data.len()]) {
                chunks.push(&data[at..c]);
                at = c;
            }
            let got = split(max, &chunks);
            // Reassembled: every byte once, in order (a newline is what separates lines).
            let mut back: Vec<u8> = Vec::new();
            let mut want: Vec<Piece> = Vec::new();
            let mut long = 0u64;
            for p in &got {
                match p {
                    Piece::Line(l) => {
                        back.extend_from_slice(l);
                        back.push(b'\n');
                    }
                    Piece::Spill(b) => back.extend_from_slice(b),
                    Piece::LongEnd(_) => back.push(b'\n'),
                }
            }
            let mut expected = data.clone();
            if !expected.is_empty() && expected.last() != Some(&b'\n') {
                expected.push(b'\n'); // the last line, given at the end without its newline
            }
            prop_assert_eq!(&back, &expected);
            let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
            let n = if data.last() == Some(&b'\n') || data.is_empty() { lines.len() - 1 } else { lines.len() };
            for l in &lines[..n] {
                if l.len() > max {
                    long += l.len() as u64;
                    want.push(Piece::LongEnd(l.len() as u64));
                } else {
                    want.push(Piece::Line(Bytes::copy_from_slice(l)));
                }
            }
            let whole: Vec<&Piece> = got.iter().filter(|p| !matches!(p, Piece::Spill(_))).collect();
            prop_assert_eq!(whole.len(), want.len());
            for (g, w) in whole.iter().zip(&want) {
                prop_assert_eq!(*g, w);
            }
            let spilled: u64 = got.iter().map(|p| match p { Piece::Spill(b) => b.len() as u64, _ => 0 }).sum();
            prop_assert_eq!(spilled, long);
        }
    }

    #[test]
    fn a_line_beyond_the_cap_spills_and_is_reported_once() {
        let got = split(4, &[b"ab", b"cdefg", b"hi\nok\n"]);
        let spilled: Vec<u8> = got
            .iter()
            .filter_map(|p| match p {
                Piece::Spill(b) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(spilled, b"abcdefghi");
        assert!(got.contains(&Piece::LongEnd(9)));
        assert_eq!(got.last(), Some(&Piece::Line(Bytes::from_static(b"ok"))));
    }
}

//! An incremental `text/event-stream` decoder (the WHATWG "event stream interpretation").
//!
//! It is fed the copied chunks of a reply as they pass and returns each event once its blank line
//! has arrived. Chunks may split anywhere: inside a line, inside a UTF-8 sequence, between `\r`
//! and `\n`. It works on bytes, so it never waits for more than the current event, and it holds
//! at most `max_event_bytes` of an event: a larger one is reported as oversized, not kept.

use bytes::{Bytes, BytesMut};

/// One dispatched event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field; `None` means the default type, `message`.
    pub event: Option<String>,
    /// The `data:` lines joined with `\n`.
    pub data: Bytes,
    /// The `id:` field set in this event, if any.
    pub id: Option<String>,
    /// The `retry:` field set in this event, if any.
    pub retry: Option<u64>,
    /// The data was larger than the cap and was dropped (the event is still reported).
    pub oversized: bool,
}

impl SseEvent {
    /// The event type, `message` by default.
    pub fn kind(&self) -> &str {
        self.event.as_deref().unwrap_or("message")
    }
}

/// The decoder's state between chunks.
#[derive(Debug)]
pub struct SseDecoder {
    line: BytesMut,
    line_oversized: bool,
    data: BytesMut,
    has_data: bool,
    event: Option<String>,
    id: Option<String>,
    retry: Option<u64>,
    oversized: bool,
    last_was_cr: bool,
    at_start: bool,
    /// The stream's first bytes, held while they may still be a UTF-8 BOM.
    bom: [u8; 3],
    bom_held: usize,
    max_event_bytes: usize,
}

impl SseDecoder {
    pub fn new(max_event_bytes: usize) -> Self {
        SseDecoder {
            line: BytesMut::new(),
            line_oversized: false,
            data: BytesMut::new(),
            has_data: false,
            event: None,
            id: None,
            retry: None,
            oversized: false,
            last_was_cr: false,
            at_start: true,
            bom: [0; 3],
            bom_held: 0,
            max_event_bytes,
        }
    }

    /// Feeds one chunk; calls `emit` for every event completed by it.
    pub fn feed(&mut self, mut chunk: &[u8], mut emit: impl FnMut(SseEvent)) {
        const BOM: &[u8] = b"\xEF\xBB\xBF";
        if self.at_start {
            // A leading UTF-8 BOM is skipped, also when it is split over chunks: the first bytes
            // are held until they are a whole BOM or cannot be one (found by fuzzing: a split
            // BOM was read as part of the first line).
            let take = (BOM.len() - self.bom_held).min(chunk.len());
            self.bom[self.bom_held..self.bom_held + take].copy_from_slice(&chunk[..take]);
            self.bom_held += take;
            chunk = &chunk[take..];
            let held = self.bom_held;
            if BOM.starts_with(&self.bom[..held]) {
                if held < BOM.len() {
                    return;
                }
                self.at_start = false;
            } else {
                self.at_start = false;
                let bytes = self.bom;
                self.feed_lines(&bytes[..held], &mut emit);
            }
            self.bom_held = 0;
        }
        self.feed_lines(chunk, &mut emit);
    }

    fn feed_lines(&mut self, mut chunk: &[u8], emit: &mut impl FnMut(SseEvent)) {
        if chunk.is_empty() {
            return;
        }
        if self.last_was_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.last_was_cr = false;
        while !chunk.is_empty() {
            match memchr::memchr2(b'\n', b'\r', chunk) {
                Some(pos) => {
                    let line_end = chunk[pos];
                    if self.line.is_empty() && !self.line_oversized {
                        // The whole line is in this chunk: read it in place, no copy — held to
                        // the same cap as a line gathered over several chunks, so the verdict
                        // never depends on where the chunks were cut (found by fuzzing).
                        if pos > self.max_event_bytes {
                            self.line_oversized = true;
                            self.end_buffered_line(emit);
                        } else {
                            self.process_line(&chunk[..pos], emit);
                        }
                    } else {
                        self.append_line(&chunk[..pos]);
                        self.end_buffered_line(emit);
                    }
                    let mut next = pos + 1;
                    if line_end == b'\r' {
                        if next < chunk.len() {
                            if chunk[next] == b'\n' {
                                next += 1;
                            }
                        } else {
                            self.last_was_cr = true;
                        }
                    }
                    chunk = &chunk[next..];
                }
                None => {
                    self.append_line(chunk);
                    break;
                }
            }
        }
    }

    /// The stream ended: an event without its blank line is discarded, as the spec says.
    /// Returns true when such an incomplete event was pending.
    pub fn finish(&mut self) -> bool {
        let incomplete = !self.line.is_empty() || self.has_data || self.bom_held > 0;
        self.bom_held = 0;
        self.reset_event();
        self.line.clear();
        incomplete
    }

    fn append_line(&mut self, part: &[u8]) {
        if self.line_oversized {
            return;
        }
        if self.line.len() + part.len() > self.max_event_bytes {
            self.line_oversized = true;
            self.line.clear();
            return;
        }
        self.line.extend_from_slice(part);
    }

    fn end_buffered_line(&mut self, emit: &mut impl FnMut(SseEvent)) {
        if std::mem::take(&mut self.line_oversized) {
            // An oversized line is almost always data: mark the event oversized.
            self.oversized = true;
            self.has_data = true;
            self.line.clear();
            return;
        }
        let line = std::mem::take(&mut self.line);
        self.process_line(&line, emit);
        self.line = line;
        self.line.clear();
    }

    fn process_line(&mut self, line: &[u8], emit: &mut impl FnMut(SseEvent)) {
        if line.is_empty() {
            self.dispatch(emit);
            return;
        }
        if line[0] == b':' {
            return; // comment / keep-alive
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.oversized {
                    return;
                }
                if self.data.len() + value.len() + 1 > self.max_event_bytes {
                    self.oversized = true;
                    self.data.clear();
                } else {
                    if self.has_data {
                        self.data.extend_from_slice(b"\n");
                    }
                    self.data.extend_from_slice(value);
                }
                self.has_data = true;
            }
            // `message` is the default type: no allocation for it.
            b"event" if value == b"message" => self.event = None,
            b"event" => self.event = Some(String::from_utf8_lossy(value).into_owned()),
            b"id" if !value.contains(&0) => {
                self.id = Some(String::from_utf8_lossy(value).into_owned());
            }
            b"retry" if !value.is_empty() && value.iter().all(u8::is_ascii_digit) => {
                self.retry = std::str::from_utf8(value).ok().and_then(|s| s.parse().ok());
            }
            _ => {}
        }
    }

    fn dispatch(&mut self, emit: &mut impl FnMut(SseEvent)) {
        if !self.has_data {
            // No data: the spec resets the buffers without dispatching; `id`/`retry` still
            // matter to a watcher, so an event with only those is reported with empty data.
            if self.id.is_some() || self.retry.is_some() {
                emit(SseEvent {
                    event: self.event.take(),
                    data: Bytes::new(),
                    id: self.id.take(),
                    retry: self.retry.take(),
                    oversized: false,
                });
            }
            self.reset_event();
            return;
        }
        let ev = SseEvent {
            event: self.event.take(),
            data: Bytes::copy_from_slice(&self.data),
            id: self.id.take(),
            retry: self.retry.take(),
            oversized: self.oversized,
        };
        self.reset_event();
        emit(ev);
    }

    fn reset_event(&mut self) {
        self.data.clear();
        self.has_data = false;
        self.event = None;
        self.id = None;
        self.retry = None;
        self.oversized = false;
    }
}

/// The lines of an event's bytes, each without its ending — `\r\n`, `\n` or a bare `\r`, as
/// the format allows — for a stage that rewrites an event whole (the fault stage): the same line
/// rule as [`SseDecoder`]'s.
pub fn lines(event: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut rest = Some(event);
    std::iter::from_fn(move || {
        let buf = rest?;
        match memchr::memchr2(b'\n', b'\r', buf) {
            Some(i) => {
                let next = if buf[i] == b'\r' && buf.get(i + 1) == Some(&b'\n') {
                    i + 2
                } else {
                    i + 1
                };
                rest = (next < buf.len()).then(|| &buf[next..]);
                Some(&buf[..i])
            }
            None => {
                rest = None;
                (!buf.is_empty()).then_some(buf)
            }
        }
    })
}

/// The end of the first event in `buf`: the offset just after the blank line that dispatches
/// it, whichever line endings it uses; `None` until that line has come. A `\r` that ends `buf`
/// may be the first half of a `\r\n`: it ends its line only `at_end` (the stream is over).
pub fn event_end(buf: &[u8], at_end: bool) -> Option<usize> {
    let mut pos = 0;
    loop {
        let i = pos + memchr::memchr2(b'\n', b'\r', &buf[pos..])?;
        let next = match (buf[i], buf.get(i + 1)) {
            (b'\r', Some(b'\n')) => i + 2,
            (b'\r', None) if !at_end => return None,
            _ => i + 1,
        };
        if i == pos {
            return Some(next);
        }
        pos = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(chunks: &[&[u8]]) -> Vec<SseEvent> {
        let mut d = SseDecoder::new(1 << 20);
        let mut out = Vec::new();
        for c in chunks {
            d.feed(c, |e| out.push(e));
        }
        out
    }

    const STREAM: &[u8] = b"\xEF\xBB\xBF: keep-alive\r\nevent: message\r\nid: 7\r\ndata: {\"jsonrpc\":\"2.0\",\r\ndata: \"id\":1,\"result\":\"\xC3\xA9\"}\r\n\r\nretry: 3000\n\ndata:plain\rdata: two\r\rdata: x\n\n:done\n";

    #[test]
    fn fields_and_line_endings() {
        let evs = decode_all(&[STREAM]);
        assert_eq!(evs.len(), 4, "{evs:?}");
        assert_eq!(evs[0].kind(), "message");
        assert_eq!(evs[0].id.as_deref(), Some("7"));
        assert_eq!(
            &evs[0].data[..],
            "{\"jsonrpc\":\"2.0\",\n\"id\":1,\"result\":\"é\"}".as_bytes()
        );
        assert_eq!(evs[1].retry, Some(3000));
        assert!(evs[1].data.is_empty());
        assert_eq!(&evs[2].data[..], b"plain\ntwo");
        assert_eq!(&evs[3].data[..], b"x");
    }

    /// Found by the `sse` fuzz target: a line longer than the cap (here an `event:` line) read
    /// in place from one chunk was taken as a field, but gathered over two chunks it marked the
    /// event oversized. Both ways it now marks the event oversized, at every split point.
    #[test]
    fn a_line_over_the_cap_is_judged_the_same_wherever_the_chunks_are_cut() {
        let stream = [
            b"event: ".as_slice(),
            &[b'x'; 40],
            b"\nretry: 11\n\ndata: ok\n\n",
        ]
        .concat();
        let decode = |chunks: &[&[u8]]| {
            let mut d = SseDecoder::new(32);
            let mut out = Vec::new();
            for c in chunks {
                d.feed(c, |e| out.push(format!("{e:?}")));
            }
            out
        };
        let whole = decode(&[&stream]);
        assert_eq!(whole.len(), 2, "{whole:?}");
        assert!(whole[0].contains("oversized: true"), "{whole:?}");
        assert!(whole[1].contains("b\"ok\""), "{whole:?}");
        for cut in 0..=stream.len() {
            let (a, b) = stream.split_at(cut);
            assert_eq!(decode(&[a, b]), whole, "cut at {cut}");
        }
    }

    /// Found by the `sse` fuzz target: a BOM split over chunks was read as the start of the
    /// first line (here turning `data:` into an unknown field).
    #[test]
    fn a_split_bom_is_skipped_like_a_whole_one() {
        let stream = b"\xEF\xBB\xBFdata: x\n\n";
        let whole = decode_all(&[stream]);
        assert_eq!(whole.len(), 1);
        assert_eq!(&whole[0].data[..], b"x");
        for a in 0..=stream.len() {
            for b in a..=stream.len() {
                let got = decode_all(&[&stream[..a], &stream[a..b], &stream[b..]]);
                assert_eq!(format!("{got:?}"), format!("{whole:?}"), "cuts at {a}, {b}");
            }
        }
        // Not a BOM: the held bytes are the line's.
        let got = decode_all(&[b"\xEF", b"data: y\n\n"]);
        assert!(got.is_empty(), "{got:?}");
        let mut d = SseDecoder::new(64);
        d.feed(b"\xEF\xBB", |_| {});
        assert!(
            d.finish(),
            "a partial BOM at the end is an incomplete stream"
        );
    }

    #[test]
    fn every_split_point_gives_the_same_events() {
        let whole = decode_all(&[STREAM]);
        for i in 0..=STREAM.len() {
            for j in i..=STREAM.len() {
                let got = decode_all(&[&STREAM[..i], &STREAM[i..j], &STREAM[j..]]);
                assert_eq!(got, whole, "split at {i},{j}");
            }
        }
        // and byte by byte
        let bytes: Vec<&[u8]> = STREAM.chunks(1).collect();
        assert_eq!(decode_all(&bytes), whole);
    }

    #[test]
    fn oversized_events_are_flagged_not_kept() {
        let mut d = SseDecoder::new(16);
        let mut out = Vec::new();
        d.feed(b"data: 0123456789abcdefghijkl\n\ndata: ok\n\n", |e| {
            out.push(e)
        });
        assert_eq!(out.len(), 2);
        assert!(out[0].oversized && out[0].data.is_empty());
        assert_eq!(&out[1].data[..], b"ok");
    }

    #[test]
    fn unfinished_event_is_reported_at_finish() {
        let mut d = SseDecoder::new(1024);
        let mut n = 0;
        d.feed(b"data: {\"a\"", |_| n += 1);
        assert_eq!(n, 0);
        assert!(d.finish());
    }
    /// The fault stage's framing ([`event_end`], [`lines`]) finds the events the decoder
    /// dispatches, with every kind of line ending, mixed.
    #[test]
    fn the_stages_framing_agrees_with_the_decoder() {
        for stream in [
            &b"data: a\n\ndata: b\r\n\r\ndata: c\r\rid: 4\rdata: d\r\n\n"[..],
            b"event: message\rdata: {\"x\":1}\r\r",
            b"data: one\ndata: two\r\n\r\n: comment\n\n",
        ] {
            let mut d = SseDecoder::new(1 << 20);
            let mut decoded = Vec::new();
            d.feed(stream, |e| decoded.push(e.data));
            let mut framed = Vec::new();
            let mut at = 0;
            while let Some(end) = event_end(&stream[at..], true) {
                let ev = &stream[at..at + end];
                let data: Vec<&[u8]> = lines(ev)
                    .filter_map(|l| l.strip_prefix(b"data:"))
                    .map(|v| v.strip_prefix(b" ").unwrap_or(v))
                    .collect();
                if !data.is_empty() {
                    framed.push(Bytes::from(data.join(&b'\n')));
                }
                at += end;
            }
            assert_eq!(at, stream.len(), "every event framed");
            let decoded: Vec<Bytes> = decoded.into_iter().filter(|d| !d.is_empty()).collect();
            assert_eq!(framed, decoded, "{}", String::from_utf8_lossy(stream));
        }
    }
}

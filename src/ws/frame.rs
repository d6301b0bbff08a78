//! RFC 6455 frames, decoded incrementally from a copy of one direction of a WebSocket
//! connection, whole messages out: masking, 16/64-bit lengths, fragmentation and continuation
//! frames, control frames interleaved in a fragmented message, ping/pong/close, and
//! permessage-deflate (RFC 7692) with and without context takeover.
//!
//! Hand-written: the maintained crates (tungstenite, fastwebsockets) read frames from a stream
//! they own, answer pings and closes themselves, and reject what they cannot follow; rpctap only
//! watches bytes it forwards untouched, whatever they are, and must keep going frame by frame
//! however the bytes are split. The framing is RFC 6455 §5.2 (a 2–14 byte header); the inflating
//! is flate2's. Memory is bounded: a message is kept up to the cap (inflated size included — a
//! deflate bomb is not inflated past it), and beyond it only counted.

use bytes::Bytes;
use flate2::{Decompress, FlushDecompress, Status};

/// What one direction's bytes turned out to hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WsEvent {
    /// A whole text message (inflated if it was compressed).
    Text(Bytes),
    /// A whole binary message: shown, not parsed.
    Binary {
        len: u64,
    },
    /// A whole binary message with its bytes (a decoder made with `keep_binary`).
    BinaryData(Bytes),
    /// A message larger than the cap (for a compressed one: inflating past it), passed on
    /// uninspected; `len` is its length on the wire (compressed, for a compressed one: how far
    /// inflating got depends on how the bytes were cut, the wire length does not).
    Oversized {
        len: u64,
        compressed: bool,
    },
    /// A compressed message that could not be inspected because an earlier oversized message
    /// broke the shared compression context (context takeover).
    ContextLost {
        len: u64,
    },
    Close {
        code: Option<u16>,
        reason: String,
    },
    Ping,
    Pong,
    /// Not RFC 6455 framing (or not inflatable): nothing after it in this direction is decoded.
    Error(String),
}

/// permessage-deflate as the handshake negotiated it, for the messages of one direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Deflate {
    /// The sender resets its compression context after each message.
    pub no_context_takeover: bool,
}

/// The end of every compressed message, removed by the sender (RFC 7692 §7.2.1).
const TAIL: [u8; 4] = [0x00, 0x00, 0xff, 0xff];

/// Compressed bytes inflated at a time.
const BLOCK: usize = 4096;

#[derive(Debug)]
enum State {
    /// Gathering a frame header.
    Header,
    /// Inside a frame's payload.
    Payload {
        remaining: u64,
        mask: Option<[u8; 4]>,
        /// Bytes of this payload already seen (the mask's phase).
        offset: u64,
        /// A control frame's opcode; `None` for a data frame.
        control: Option<u8>,
        fin: bool,
    },
    /// A framing error was seen: the rest is not decoded.
    Failed,
}

/// The message being put together from its frames.
#[derive(Debug)]
struct Message {
    text: bool,
    compressed: bool,
    data: Vec<u8>,
    /// Bytes seen (inflated, when compressed).
    len: u64,
    /// Payload bytes on the wire.
    wire: u64,
    /// Compressed bytes not inflated yet: they are inflated in blocks of [`BLOCK`] at fixed
    /// offsets of the message, so the outcome (the cap reached, or bad data found) is the same
    /// however the network cut the bytes.
    zbuf: Vec<u8>,
    over: bool,
    /// Compressed, but the context is lost: not inflated at all.
    lost: bool,
}

/// One direction's decoder.
#[derive(Debug)]
pub struct Decoder {
    head: Vec<u8>,
    state: State,
    cap: usize,
    deflate: Option<(Deflate, Box<Decompress>)>,
    /// The compression context broke (an oversized message under context takeover).
    context_lost: bool,
    msg: Option<Message>,
    control: Vec<u8>,
    /// Frames ended so far, and what the last one was (`feed_frame` stops at each).
    frames: u64,
    last: Option<FrameEnd>,
    /// Binary messages are kept (up to the cap) for whoever re-sends them.
    keep_binary: bool,
}

/// What the frame that just ended was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameEnd {
    /// A ping, pong or close frame.
    Control,
    /// A data frame that does not end its message.
    Fragment,
    /// The last frame of a message.
    Final,
}

impl Decoder {
    /// A decoder keeping messages up to `cap` bytes; `deflate` when the handshake negotiated
    /// permessage-deflate.
    pub fn new(cap: usize, deflate: Option<Deflate>) -> Self {
        Decoder {
            head: Vec::with_capacity(14),
            state: State::Header,
            cap,
            deflate: deflate.map(|d| (d, Box::new(Decompress::new(false)))),
            context_lost: false,
            msg: None,
            control: Vec::new(),
            frames: 0,
            last: None,
            keep_binary: false,
        }
    }

    /// Binary messages come out as [`WsEvent::BinaryData`] with their bytes (for a pump that
    /// must re-send them), not only their length.
    pub fn keep_binary(mut self) -> Self {
        self.keep_binary = true;
        self
    }

    /// Like [`feed`](Self::feed), but stops at the end of the current frame: returns how many
    /// bytes of `bytes` were taken, and [`last_frame`](Self::last_frame) tells what ended (all
    /// of them are taken once the framing failed).
    pub fn feed_frame(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<WsEvent>,
    ) -> (usize, Option<FrameEnd>) {
        let start = self.frames;
        let mut used = 0;
        while used < bytes.len() {
            let step = match &self.state {
                State::Failed => bytes.len() - used,
                State::Header => (header_len(&self.head) - self.head.len()).min(bytes.len() - used),
                State::Payload { remaining, .. } => {
                    (*remaining).min((bytes.len() - used) as u64) as usize
                }
            };
            self.feed(&bytes[used..used + step], out);
            used += step;
            if self.frames != start {
                return (used, self.last);
            }
        }
        (used, None)
    }

    /// Whether the bytes fed so far end between two messages (no frame or fragmented message
    /// begun): where another message may be put into the stream.
    pub fn at_message_boundary(&self) -> bool {
        matches!(self.state, State::Header) && self.head.is_empty() && self.msg.is_none()
    }

    /// Whether the bytes fed so far end inside a data frame's payload.
    pub fn in_data_frame(&self) -> bool {
        matches!(self.state, State::Payload { control: None, .. })
    }

    /// Whether the framing failed (nothing more is decoded).
    pub fn failed(&self) -> bool {
        matches!(self.state, State::Failed)
    }

    /// Feeds the next bytes (any split); the events they complete go to `out`.
    pub fn feed(&mut self, mut bytes: &[u8], out: &mut Vec<WsEvent>) {
        while !bytes.is_empty() {
            match &mut self.state {
                State::Failed => return,
                State::Header => {
                    let need = header_len(&self.head);
                    let take = (need - self.head.len()).min(bytes.len());
                    self.head.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.head.len() == header_len(&self.head) {
                        if let Err(e) = self.start_frame(out) {
                            self.fail(e, out);
                            return;
                        }
                    }
                }
                State::Payload {
                    remaining,
                    mask,
                    offset,
                    control,
                    fin,
                } => {
                    let n = (*remaining).min(bytes.len() as u64) as usize;
                    // Only a masked payload (the client's) is copied, to unmask it.
                    let chunk: std::borrow::Cow<'_, [u8]> = match mask {
                        Some(m) => bytes[..n]
                            .iter()
                            .enumerate()
                            .map(|(i, b)| b ^ m[((*offset + i as u64) % 4) as usize])
                            .collect(),
                        None => std::borrow::Cow::Borrowed(&bytes[..n]),
                    };
                    *offset += n as u64;
                    *remaining -= n as u64;
                    bytes = &bytes[n..];
                    let (done, control, fin) = (*remaining == 0, *control, *fin);
                    match control {
                        Some(_) => self.control.extend_from_slice(&chunk),
                        None => {
                            if let Err(e) = self.data(&chunk) {
                                self.fail(e, out);
                                return;
                            }
                        }
                    }
                    if done {
                        self.end_frame(control, fin, out);
                    }
                }
            }
        }
    }

    fn fail(&mut self, why: String, out: &mut Vec<WsEvent>) {
        self.state = State::Failed;
        self.msg = None;
        out.push(WsEvent::Error(why));
    }

    /// A whole header is in `head`: checks it and starts its payload.
    fn start_frame(&mut self, out: &mut Vec<WsEvent>) -> Result<(), String> {
        let h = std::mem::take(&mut self.head);
        let (b0, b1) = (h[0], h[1]);
        let fin = b0 & 0x80 != 0;
        let rsv1 = b0 & 0x40 != 0;
        if b0 & 0x30 != 0 {
            return Err("a frame with RSV2/RSV3 set (no extension negotiated them)".into());
        }
        let opcode = b0 & 0x0f;
        let mut len = u64::from(b1 & 0x7f);
        let mut at = 2;
        if len == 126 {
            len = u64::from(u16::from_be_bytes([h[2], h[3]]));
            at = 4;
        } else if len == 127 {
            let mut b = [0u8; 8];
            b.copy_from_slice(&h[2..10]);
            len = u64::from_be_bytes(b);
            if len >> 63 != 0 {
                return Err("a 64-bit frame length with its top bit set".into());
            }
            at = 10;
        }
        let mask = (b1 & 0x80 != 0).then(|| [h[at], h[at + 1], h[at + 2], h[at + 3]]);
        let control = match opcode {
            0x8..=0xa => {
                if !fin || len > 125 {
                    return Err(format!(
                        "a control frame (opcode {opcode:#x}) fragmented or longer than 125 bytes"
                    ));
                }
                if rsv1 {
                    return Err("a control frame with RSV1 set".into());
                }
                self.control.clear();
                Some(opcode)
            }
            0x0 => {
                if self.msg.is_none() {
                    return Err("a continuation frame with no message to continue".into());
                }
                if rsv1 {
                    return Err("RSV1 on a continuation frame".into());
                }
                None
            }
            0x1 | 0x2 => {
                if self.msg.is_some() {
                    return Err("a new message began inside a fragmented one".into());
                }
                if rsv1 && self.deflate.is_none() {
                    return Err(
                        "a compressed message, but permessage-deflate was not negotiated".into(),
                    );
                }
                self.msg = Some(Message {
                    text: opcode == 0x1,
                    compressed: rsv1,
                    data: Vec::new(),
                    len: 0,
                    wire: 0,
                    zbuf: Vec::new(),
                    over: false,
                    lost: rsv1 && self.context_lost,
                });
                None
            }
            other => return Err(format!("a frame with the reserved opcode {other:#x}")),
        };
        self.state = State::Payload {
            remaining: len,
            mask,
            offset: 0,
            control,
            fin,
        };
        if len == 0 {
            self.end_frame(control, fin, out);
        }
        Ok(())
    }

    /// A piece of a data frame's (unmasked) payload.
    fn data(&mut self, chunk: &[u8]) -> Result<(), String> {
        let cap = self.cap;
        let Some(m) = &mut self.msg else {
            return Ok(());
        };
        m.wire += chunk.len() as u64;
        if m.compressed {
            if m.lost || m.over {
                m.len += chunk.len() as u64;
                return Ok(());
            }
            let Some((_, inf)) = &mut self.deflate else {
                return Ok(());
            };
            let mut chunk = chunk;
            while !chunk.is_empty() && !m.over {
                let take = (BLOCK - m.zbuf.len()).min(chunk.len());
                m.zbuf.extend_from_slice(&chunk[..take]);
                chunk = &chunk[take..];
                if m.zbuf.len() == BLOCK {
                    let block = std::mem::take(&mut m.zbuf);
                    inflate(inf, &block, m, cap)?;
                    m.zbuf = block;
                    m.zbuf.clear();
                }
            }
            Ok(())
        } else {
            m.len += chunk.len() as u64;
            if !m.over {
                if m.data.len() + chunk.len() > cap {
                    m.over = true;
                    m.data = Vec::new();
                } else {
                    m.data.extend_from_slice(chunk);
                }
            }
            Ok(())
        }
    }

    fn end_frame(&mut self, control: Option<u8>, fin: bool, out: &mut Vec<WsEvent>) {
        self.state = State::Header;
        self.frames += 1;
        self.last = Some(match (control, fin) {
            (Some(_), _) => FrameEnd::Control,
            (None, false) => FrameEnd::Fragment,
            (None, true) => FrameEnd::Final,
        });
        if let Some(op) = control {
            let p = std::mem::take(&mut self.control);
            out.push(match op {
                0x8 => {
                    let code = (p.len() >= 2).then(|| u16::from_be_bytes([p[0], p[1]]));
                    let reason = p.get(2..).map(String::from_utf8_lossy).unwrap_or_default();
                    WsEvent::Close {
                        code,
                        reason: reason.into_owned(),
                    }
                }
                0x9 => WsEvent::Ping,
                _ => WsEvent::Pong,
            });
            return;
        }
        if !fin {
            return;
        }
        let Some(mut m) = self.msg.take() else {
            return;
        };
        if m.compressed && !m.lost && !m.over {
            if let Some((_, inf)) = &mut self.deflate {
                let mut rest = std::mem::take(&mut m.zbuf);
                rest.extend_from_slice(&TAIL);
                if let Err(e) = inflate(inf, &rest, &mut m, self.cap) {
                    self.fail(e, out);
                    return;
                }
            }
        }
        if let Some((d, inf)) = &mut self.deflate {
            if m.compressed {
                if d.no_context_takeover {
                    inf.reset(false);
                } else if m.over {
                    // Inflating stopped at the cap: the shared context is gone for good.
                    self.context_lost = true;
                }
            }
        }
        out.push(if m.lost {
            WsEvent::ContextLost { len: m.wire }
        } else if m.over {
            WsEvent::Oversized {
                len: m.wire,
                compressed: m.compressed,
            }
        } else if m.text {
            WsEvent::Text(Bytes::from(m.data))
        } else if self.keep_binary {
            WsEvent::BinaryData(Bytes::from(m.data))
        } else {
            WsEvent::Binary { len: m.len }
        });
    }
}

/// The header's whole length, as far as its first bytes tell (2 until they are in).
fn header_len(h: &[u8]) -> usize {
    if h.len() < 2 {
        return 2;
    }
    let ext = match h[1] & 0x7f {
        126 => 2,
        127 => 8,
        _ => 0,
    };
    2 + ext + if h[1] & 0x80 != 0 { 4 } else { 0 }
}

/// Inflates `input` into the message, never past `cap` bytes of output.
fn inflate(
    inf: &mut Decompress,
    mut input: &[u8],
    m: &mut Message,
    cap: usize,
) -> Result<(), String> {
    loop {
        let room = cap.saturating_sub(m.data.len());
        if room == 0 {
            // Is there more? One byte of room tells.
            let mut probe = Vec::with_capacity(1);
            let before = inf.total_out();
            inf.decompress_vec(input, &mut probe, FlushDecompress::Sync)
                .map_err(|e| format!("a compressed message that does not inflate: {e}"))?;
            if inf.total_out() > before {
                m.over = true;
                m.len += inf.total_out() - before;
                m.data = Vec::new();
            }
            return Ok(());
        }
        m.data.reserve_exact(room.min(64 << 10));
        let (in0, out0) = (inf.total_in(), inf.total_out());
        let status = inf
            .decompress_vec(input, &mut m.data, FlushDecompress::Sync)
            .map_err(|e| format!("a compressed message that does not inflate: {e}"))?;
        let used = (inf.total_in() - in0) as usize;
        let produced = inf.total_out() - out0;
        m.len += produced;
        input = &input[used..];
        if m.data.len() > cap {
            m.over = true;
            m.data = Vec::new();
            return Ok(());
        }
        let full = m.data.len() == m.data.capacity();
        if status == Status::StreamEnd
            || (used == 0 && produced == 0)
            || (input.is_empty() && !full)
        {
            return Ok(());
        }
    }
}

/// One frame as a client (masked, `mask` given) or a server sends it (RFC 6455 §5.2).
pub fn encode(fin: bool, rsv1: bool, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut f = vec![(u8::from(fin) << 7) | (u8::from(rsv1) << 6) | opcode];
    let m = if mask.is_some() { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(m | n as u8),
        n if n <= 0xffff => {
            f.push(m | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            f.push(m | 127);
            f.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    match mask {
        Some(k) => {
            f.extend_from_slice(&k);
            f.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
        }
        None => f.extend_from_slice(payload),
    }
    f
}

#[cfg(test)]
mod tests {
    use super::encode as frame;
    use super::*;
    use flate2::{Compress, Compression, FlushCompress};

    fn all(dec: &mut Decoder, bytes: &[u8]) -> Vec<WsEvent> {
        let mut out = Vec::new();
        dec.feed(bytes, &mut out);
        out
    }

    fn text(s: &str) -> WsEvent {
        WsEvent::Text(Bytes::copy_from_slice(s.as_bytes()))
    }

    #[test]
    fn masked_fragmented_with_a_ping_inside_split_at_every_byte() {
        let k = Some([1, 2, 3, 4]);
        let mut wire = frame(false, false, 0x1, br#"{"jsonrpc":"2.0","#, k);
        wire.extend(frame(true, false, 0x9, b"hi", k));
        wire.extend(frame(false, false, 0x0, br#""method":"m","#, k));
        wire.extend(frame(true, false, 0x0, br#""id":1}"#, k));
        wire.extend(frame(true, false, 0x8, &[0x03, 0xe8, b'o', b'k'], k));
        let want = vec![
            WsEvent::Ping,
            text(r#"{"jsonrpc":"2.0","method":"m","id":1}"#),
            WsEvent::Close {
                code: Some(1000),
                reason: "ok".into(),
            },
        ];
        assert_eq!(all(&mut Decoder::new(1 << 20, None), &wire), want);
        let mut d = Decoder::new(1 << 20, None);
        let mut out = Vec::new();
        for b in &wire {
            d.feed(std::slice::from_ref(b), &mut out);
        }
        assert_eq!(out, want, "byte by byte");
    }

    #[test]
    fn sixteen_and_sixty_four_bit_lengths_and_the_cap() {
        let mid = "x".repeat(300);
        let big = "y".repeat(70_000);
        let mut wire = frame(true, false, 0x1, mid.as_bytes(), None);
        wire.extend(frame(true, false, 0x1, big.as_bytes(), None));
        wire.extend(frame(true, false, 0x2, &[0, 1, 2], None));
        let out = all(&mut Decoder::new(100_000, None), &wire);
        assert_eq!(out[0], text(&mid));
        assert_eq!(out[1], text(&big));
        assert_eq!(out[2], WsEvent::Binary { len: 3 });
        let out = all(&mut Decoder::new(1000, None), &wire);
        assert_eq!(
            out[1],
            WsEvent::Oversized {
                len: 70_000,
                compressed: false
            }
        );
        assert_eq!(out.len(), 3, "the next message still decodes");
    }

    fn deflate(c: &mut Compress, msg: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(msg.len() + 64);
        c.compress_vec(msg, &mut out, FlushCompress::Sync).unwrap();
        assert!(out.ends_with(&TAIL));
        out.truncate(out.len() - 4);
        out
    }

    #[test]
    fn permessage_deflate_with_and_without_context_takeover() {
        for no_ctx in [false, true] {
            let mut c = Compress::new(Compression::default(), false);
            let m1 = br#"{"jsonrpc":"2.0","method":"eth_subscribe","params":["newHeads"],"id":1}"#;
            let m2 = br#"{"jsonrpc":"2.0","method":"eth_subscribe","params":["newHeads"],"id":2}"#;
            let mut wire = frame(true, true, 0x1, &deflate(&mut c, m1), None);
            if no_ctx {
                c.reset();
            }
            let z2 = deflate(&mut c, m2);
            // A compressed message fragmented: RSV1 only on its first frame.
            wire.extend(frame(false, true, 0x1, &z2[..3], None));
            wire.extend(frame(true, false, 0x0, &z2[3..], None));
            let d = Deflate {
                no_context_takeover: no_ctx,
            };
            let out = all(&mut Decoder::new(1 << 20, Some(d)), &wire);
            assert_eq!(
                out,
                vec![
                    WsEvent::Text(Bytes::copy_from_slice(m1)),
                    WsEvent::Text(Bytes::copy_from_slice(m2))
                ],
                "no_context_takeover {no_ctx}"
            );
        }
    }

    #[test]
    fn a_deflate_bomb_is_not_inflated_past_the_cap() {
        let mut c = Compress::new(Compression::best(), false);
        let bomb = vec![b'a'; 50 << 20];
        let z = deflate(&mut c, &bomb);
        assert!(z.len() < 100 << 10, "{}", z.len());
        let small = deflate(&mut c, b"{}");
        let mut wire = frame(true, true, 0x1, &z, None);
        wire.extend(frame(true, true, 0x1, &small, None));
        let mut d = Decoder::new(1 << 20, Some(Deflate::default()));
        let out = all(&mut d, &wire);
        match &out[0] {
            WsEvent::Oversized {
                len,
                compressed: true,
            } => {
                assert_eq!(*len, z.len() as u64, "its wire length")
            }
            e => panic!("{e:?}"),
        }
        // Under context takeover the next compressed message cannot be inflated any more.
        assert!(matches!(out[1], WsEvent::ContextLost { .. }), "{out:?}");
    }

    /// Found by the `ws_frames` fuzz target: an oversized compressed message reported how far
    /// inflating got, which depends on where the bytes were cut.
    #[test]
    fn an_oversized_compressed_message_is_reported_alike_however_it_is_cut() {
        let mut c = Compress::new(Compression::default(), false);
        let z = deflate(&mut c, &[b'q'; 5000]);
        let wire = frame(true, true, 0x1, &z, None);
        let whole = all(&mut Decoder::new(1000, Some(Deflate::default())), &wire);
        let mut d = Decoder::new(1000, Some(Deflate::default()));
        let mut cut = Vec::new();
        for piece in wire.chunks(3) {
            d.feed(piece, &mut cut);
        }
        assert_eq!(cut, whole);
        assert_eq!(
            whole,
            vec![WsEvent::Oversized {
                len: z.len() as u64,
                compressed: true
            }]
        );
    }

    /// Found by the `ws_frames` fuzz target: bad compressed data after enough good data to
    /// pass the cap was an error when it came in one read and an oversized message when cut.
    #[test]
    fn bad_compressed_data_past_the_cap_is_judged_alike_however_it_is_cut() {
        let mut c = Compress::new(Compression::default(), false);
        let mut z = deflate(
            &mut c,
            &(0..20_000u32)
                .map(|i| (i * 7 % 251) as u8)
                .collect::<Vec<_>>(),
        );
        z.extend_from_slice(&[0xff; 64]); // not deflate
        let wire = frame(true, true, 0x1, &z, None);
        let whole = all(&mut Decoder::new(1000, Some(Deflate::default())), &wire);
        for n in [1, 7, 100, 5000] {
            let mut d = Decoder::new(1000, Some(Deflate::default()));
            let mut cut = Vec::new();
            for piece in wire.chunks(n) {
                d.feed(piece, &mut cut);
            }
            assert_eq!(cut, whole, "pieces of {n}");
        }
    }

    #[test]
    fn framing_errors_stop_the_decoding() {
        for (wire, what) in [
            (frame(true, false, 0x0, b"x", None), "continuation"),
            (frame(false, false, 0x9, b"x", None), "control"),
            (frame(true, false, 0x3, b"", None), "reserved"),
            (frame(true, true, 0x1, b"x", None), "not negotiated"),
        ] {
            let out = all(&mut Decoder::new(100, None), &wire);
            assert!(
                matches!(&out[..], [WsEvent::Error(e)] if e.contains(what)),
                "{what}: {out:?}"
            );
        }
        let mut wire = frame(false, false, 0x1, b"a", None);
        wire.extend(frame(true, false, 0x1, b"b", None));
        assert!(matches!(
            &all(&mut Decoder::new(100, None), &wire)[..],
            [WsEvent::Error(e)] if e.contains("inside a fragmented")
        ));
    }
}

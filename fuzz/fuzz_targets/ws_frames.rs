//! The WebSocket frame decoder under any chunking: the first byte picks the message cap and
//! whether (and how) permessage-deflate was negotiated, the next ones the split points; the
//! events decoded from the pieces must be those decoded from the whole stream at once, and no
//! kept message may exceed the cap (inflated ones included); fed frame by frame
//! (`feed_frame`), the events are the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "cuts.rs"]
mod cuts;
use rpctap::ws::frame::{Decoder, Deflate, WsEvent};

fn decode(cap: usize, deflate: Option<Deflate>, pieces: &[&[u8]]) -> Vec<WsEvent> {
    let mut d = Decoder::new(cap, deflate);
    let mut out = Vec::new();
    for p in pieces {
        d.feed(p, &mut out);
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&c, rest)) = data.split_first() else {
        return;
    };
    let cap = 16 + (c as usize & 0x3f) * 64;
    let deflate = match c >> 6 {
        0 => None,
        1 => Some(Deflate {
            no_context_takeover: false,
        }),
        _ => Some(Deflate {
            no_context_takeover: true,
        }),
    };
    let (stream, pieces) = cuts::cut(rest, 1, 64);
    let whole = decode(cap, deflate, &[stream]);
    for e in &whole {
        if let WsEvent::Text(t) = e {
            assert!(
                t.len() <= cap,
                "a kept message over the cap: {} > {cap}",
                t.len()
            );
        }
    }
    assert_eq!(decode(cap, deflate, &pieces), whole);
    // Frame by frame (the rate-limited pump's way): the same events, and every frame's end is
    // reported where the whole-stream decoding has it.
    let mut d = Decoder::new(cap, deflate);
    let mut stepped = Vec::new();
    for p in &pieces {
        let mut at = 0;
        while at < p.len() {
            let (k, _) = d.feed_frame(&p[at..], &mut stepped);
            assert!(k > 0 && at + k <= p.len(), "feed_frame took {k} of {}", p.len() - at);
            at += k;
        }
    }
    assert_eq!(stepped, whole);
});

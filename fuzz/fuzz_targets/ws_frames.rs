//! The WebSocket frame decoder under any chunking: the first byte picks the message cap and
//! whether (and how) permessage-deflate was negotiated, the next ones the split points; the
//! events decoded from the pieces must be those decoded from the whole stream at once, and no
//! kept message may exceed the cap (inflated ones included).
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
});

//! The SSE decoder under any chunking: the first byte picks the event size cap and the next ones
//! the split points; the events decoded from the pieces must be those decoded from the whole
//! stream at once, and `finish` must agree too.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "cuts.rs"]
mod cuts;
use rpctap::inspect::sse::SseDecoder;

fn decode(cap: usize, pieces: &[&[u8]]) -> (Vec<String>, bool) {
    let mut d = SseDecoder::new(cap);
    let mut out = Vec::new();
    for p in pieces {
        d.feed(p, |e| out.push(format!("{e:?}")));
    }
    let partial = d.finish();
    (out, partial)
}

fuzz_target!(|data: &[u8]| {
    let Some((&c, rest)) = data.split_first() else {
        return;
    };
    let cap = 16 + (c as usize) * 16;
    let (stream, pieces) = cuts::cut(rest, 1, 64);
    let whole = decode(cap, &[stream]);
    assert_eq!(decode(cap, &pieces), whole);
});

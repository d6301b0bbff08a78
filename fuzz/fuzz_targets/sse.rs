//! The SSE decoder under any chunking: the first byte picks the event size cap and the next ones
//! the split points; the events decoded from the pieces must be those decoded from the whole
//! stream at once, and `finish` must agree too.
#![no_main]

use libfuzzer_sys::fuzz_target;
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
    let (cuts, stream) = rest.split_at(rest.len().min(8));
    let whole = decode(cap, &[stream]);
    let mut pieces = Vec::new();
    let mut at = 0;
    for &k in cuts {
        let next = (at + 1 + k as usize % 64).min(stream.len());
        pieces.push(&stream[at..next]);
        at = next;
    }
    pieces.push(&stream[at..]);
    assert_eq!(decode(cap, &pieces), whole);
});

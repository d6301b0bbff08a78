//! The HTTP/1 engine's chunked decoder (`http1::chunked::Chunked`) under any chunking: the
//! data, trailers, end and first error decoded from the pieces must be those decoded from the
//! whole body at once — and no input panics.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

#[path = "cuts.rs"]
mod cuts;
use rpctap::http1::chunked::{Chunked, Step};

/// Data, trailers (as text), ended, failed.
fn decode(pieces: &[&[u8]]) -> (Vec<u8>, Option<String>, bool, bool) {
    let mut d = Chunked::default();
    let (mut data, mut trailers) = (Vec::new(), None);
    for p in pieces {
        let mut input = Bytes::copy_from_slice(p);
        loop {
            match d.step(&mut input) {
                Ok(Step::Data(b)) => data.extend_from_slice(&b),
                Ok(Step::Trailers(t)) => {
                    trailers = Some(format!("{t:?}"));
                    return (data, trailers, true, false);
                }
                Ok(Step::End) => return (data, trailers, true, false),
                Ok(Step::More) => break,
                // An error ends decoding; the data before it is what was passed on.
                Err(_) => return (data, trailers, false, true),
            }
        }
    }
    (data, trailers, d.done(), false)
}

fuzz_target!(|data: &[u8]| {
    let (stream, pieces) = cuts::cut(data, 1, 64);
    assert_eq!(decode(&pieces), decode(&[stream]));
});

//! The envelope parser, differential: `parse_body` (the fast scanner first) must read any body
//! exactly as serde_json alone does — the same envelopes, kinds, ids, verdicts and messages. A
//! disagreement, or a panic in either, is a crash.
#![no_main]

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let body = Bytes::copy_from_slice(data);
    let fast = format!("{:?}", rpctap::rpc::parse_body(&body));
    let reference = format!("{:?}", rpctap::rpc::parse_body_reference(&body));
    assert_eq!(fast, reference, "scanner and serde_json disagree on {:?}", String::from_utf8_lossy(data));
});

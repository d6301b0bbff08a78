//! Property tests: arbitrary bytes never panic the envelope parser, the SSE decoder or the whole
//! inspector; the SSE decoder gives the same events however a stream is split.

use bytes::Bytes;
use proptest::prelude::*;
use rpctap::events::Bus;
use rpctap::inspect::sse::SseDecoder;
use rpctap::inspect::{EndReason, InspectConfig, Inspector, RequestMeta, ResponseMeta};

fn decode(chunks: &[&[u8]]) -> Vec<rpctap::inspect::sse::SseEvent> {
    let mut d = SseDecoder::new(1 << 16);
    let mut out = Vec::new();
    for c in chunks {
        d.feed(c, |e| out.push(e));
    }
    out
}

/// Bytes biased towards what matters: JSON-RPC-ish text, SSE field names, line ends, UTF-8.
fn rpcish() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just(b"{".to_vec()),
        Just(b"}".to_vec()),
        Just(b"[".to_vec()),
        Just(b"]".to_vec()),
        Just(b",".to_vec()),
        Just(b"\"jsonrpc\":\"2.0\"".to_vec()),
        Just(b"\"id\":".to_vec()),
        Just(b"\"method\":\"m\"".to_vec()),
        Just(b"\"result\":".to_vec()),
        Just(b"\"error\":{\"code\":1,\"message\":\"x\"}".to_vec()),
        Just(b"null".to_vec()),
        Just(b"1".to_vec()),
        Just(b"\"1\"".to_vec()),
        Just(b"data: ".to_vec()),
        Just(b"event: message".to_vec()),
        Just(b"id: 3".to_vec()),
        Just(b"retry: 10".to_vec()),
        Just(b":".to_vec()),
        Just(b"\r".to_vec()),
        Just(b"\n".to_vec()),
        Just(b"\r\n".to_vec()),
        Just("é".as_bytes().to_vec()),
        Just(b"\xff".to_vec()),
        prop::collection::vec(any::<u8>(), 0..8),
    ];
    prop::collection::vec(token, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, .. ProptestConfig::default() })]

    #[test]
    fn parser_never_panics(b in prop_oneof![rpcish(), prop::collection::vec(any::<u8>(), 0..256)]) {
        let _ = rpctap::rpc::parse_body(&Bytes::from(b));
    }

    #[test]
    fn sse_split_anywhere_gives_same_events(b in rpcish(), cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6)) {
        let whole = decode(&[&b]);
        let mut points: Vec<usize> = cuts.iter().map(|i| i.index(b.len() + 1)).collect();
        points.sort_unstable();
        let mut chunks = Vec::new();
        let mut last = 0;
        for p in points {
            chunks.push(&b[last..p]);
            last = p;
        }
        chunks.push(&b[last..]);
        prop_assert_eq!(decode(&chunks), whole);
    }

    #[test]
    fn inspector_never_panics(req in rpcish(), reply in rpcish(), sse in any::<bool>(), status in prop::sample::select(vec![200u16, 202, 204, 400, 404, 500])) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let insp = Inspector::new(InspectConfig::default(), Bus::default());
            let mut ex = insp.begin(&RequestMeta { method: "POST", path: "/", session: Some("s"), ..Default::default() });
            ex.request_body(&Bytes::from(req), true);
            ex.response_head(&ResponseMeta { status, content_type: Some(if sse { "text/event-stream" } else { "application/json" }), ..Default::default() });
            for c in reply.chunks(7) {
                ex.response_data(c);
            }
            ex.end(EndReason::Complete);
        });
    }
}

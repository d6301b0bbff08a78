//! Criterion micro-benchmarks of inspection: the envelope parser and a whole exchange through the
//! inspector (request + reply + correlation) for a 200 B call, a 4 KiB and a 1 MiB reply, and SSE
//! decoding throughput.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rpctap::events::Bus;
use rpctap::inspect::sse::SseDecoder;
use rpctap::inspect::{EndReason, InspectConfig, Inspector, RequestMeta, ResponseMeta};
use std::hint::black_box;

const CALL: &str = r#"{"jsonrpc":"2.0","id":12345,"method":"tools/call","params":{"name":"search","arguments":{"query":"rust reverse proxy","limit":10,"filters":{"lang":"en"}}}}"#;

fn reply_of(size: usize) -> Bytes {
    let head = r#"{"jsonrpc":"2.0","id":12345,"result":{"content":[{"type":"text","text":""#;
    let tail = r#""}],"isError":false}}"#;
    let fill = size.saturating_sub(head.len() + tail.len());
    Bytes::from(format!("{head}{}{tail}", "a".repeat(fill)))
}

fn exchange(insp: &Inspector, req: &Bytes, reply: &Bytes, ct: &str) {
    let mut ex = insp.begin(&RequestMeta {
        method: "POST",
        path: "/mcp",
        ..Default::default()
    });
    ex.request_body(req, true);
    ex.response_head(&ResponseMeta {
        status: 200,
        content_type: Some(ct),
        content_length: Some(reply.len() as u64),
        ..Default::default()
    });
    ex.response_data(reply);
    ex.end(EndReason::Complete);
}

fn benches(c: &mut Criterion) {
    let call = Bytes::from_static(CALL.as_bytes());
    assert!(call.len() <= 200, "{}", call.len());
    let mut g = c.benchmark_group("parse");
    g.throughput(Throughput::Bytes(call.len() as u64));
    g.bench_function("call_200B", |b| {
        b.iter(|| black_box(rpctap::rpc::parse_body(black_box(&call))))
    });
    for size in [4 << 10, 1 << 20] {
        let r = reply_of(size);
        g.throughput(Throughput::Bytes(r.len() as u64));
        g.bench_with_input(BenchmarkId::new("reply", size), &r, |b, r| {
            b.iter(|| black_box(rpctap::rpc::parse_body(black_box(r))))
        });
    }
    g.finish();

    let insp = Inspector::new(InspectConfig::default(), Bus::default());
    let mut g = c.benchmark_group("exchange");
    let small = reply_of(200);
    g.bench_function("call_200B_reply_200B", |b| {
        b.iter(|| exchange(&insp, &call, &small, "application/json"))
    });
    for size in [4 << 10, 1 << 20] {
        let r = reply_of(size);
        g.throughput(Throughput::Bytes(r.len() as u64));
        g.bench_with_input(BenchmarkId::new("json_reply", size), &r, |b, r| {
            b.iter(|| exchange(&insp, &call, r, "application/json"))
        });
    }
    g.finish();

    // SSE: 1,000 events of ~200 B (progress notifications), fed in 16 KiB chunks.
    let mut stream = Vec::new();
    for i in 0..1000 {
        stream.extend_from_slice(format!("event: message\nid: {i}\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":\"tok\",\"progress\":{i},\"total\":1000,\"message\":\"working\"}}}}\n\n").as_bytes());
    }
    let mut g = c.benchmark_group("sse");
    g.throughput(Throughput::Bytes(stream.len() as u64));
    g.bench_function("decode_1000_events", |b| {
        b.iter(|| {
            let mut d = SseDecoder::new(16 << 20);
            let mut n = 0;
            for chunk in stream.chunks(16 << 10) {
                d.feed(chunk, |_| n += 1);
            }
            assert_eq!(n, 1000);
        })
    });
    let sse_bytes = Bytes::from(stream.clone());
    g.bench_function("inspect_1000_events", |b| {
        b.iter(|| exchange(&insp, &call, &sse_bytes, "text/event-stream"))
    });
    g.finish();
}

criterion_group!(inspect, benches);
criterion_main!(inspect);

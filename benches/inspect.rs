//! Criterion micro-benchmarks of inspection: the envelope parser and a whole exchange through the
//! inspector (request + reply + correlation) for a 200 B call, a 4 KiB and a 1 MiB reply, and SSE
//! decoding throughput; and the MCP checks per `tools/call` (capabilities, the tool catalogue,
//! input and output schemas), each against the same exchange in a session whose handshake
//! rpctap did not see (where none of them can run).

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

/// One exchange in MCP session `sid`: a request and its JSON reply.
fn session_exchange(insp: &Inspector, sid: &str, req: &Bytes, reply: &Bytes) {
    let mut ex = insp.begin(&RequestMeta {
        method: "POST",
        path: "/mcp",
        content_type: Some("application/json"),
        session: Some(sid),
        protocol_version: Some("2025-06-18"),
        ..Default::default()
    });
    ex.request_body(req, true);
    ex.response_head(&ResponseMeta {
        status: 200,
        content_type: Some("application/json"),
        session: Some(sid),
        content_length: Some(reply.len() as u64),
        ..Default::default()
    });
    ex.response_data(reply);
    ex.end(EndReason::Complete);
}

/// A session whose `initialize` exchange and `tools/list` rpctap saw: `plain` has an input
/// schema only, `weather` also a 10-property output schema.
fn mcp_session(insp: &Inspector, sid: &str) {
    let mut ex = insp.begin(&RequestMeta {
        method: "POST",
        path: "/mcp",
        content_type: Some("application/json"),
        ..Default::default()
    });
    ex.request_body(&Bytes::from_static(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"b","version":"1"}}}"#), true);
    ex.response_head(&ResponseMeta {
        status: 200,
        content_type: Some("application/json"),
        session: Some(sid),
        ..Default::default()
    });
    ex.response_data(br#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}"#);
    ex.end(EndReason::Complete);
    session_exchange(
        insp,
        sid,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#),
        &Bytes::new(),
    );
    let props: Vec<String> = (0..10)
        .map(|i| {
            format!(
                r#""f{i}":{{"type":"{}"}}"#,
                if i % 2 == 0 { "string" } else { "number" }
            )
        })
        .collect();
    let list = format!(
        r#"{{"jsonrpc":"2.0","id":1,"result":{{"tools":[{{"name":"plain","inputSchema":{{"type":"object","properties":{{"query":{{"type":"string"}},"limit":{{"type":"integer"}}}},"required":["query"]}}}},{{"name":"weather","inputSchema":{{"type":"object"}},"outputSchema":{{"type":"object","properties":{{{}}},"required":["f0","f1"]}}}}]}}}}"#,
        props.join(",")
    );
    session_exchange(
        insp,
        sid,
        &Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#),
        &Bytes::from(list),
    );
}

fn mcp_benches(c: &mut Criterion) {
    let insp = Inspector::new(InspectConfig::default(), Bus::default());
    mcp_session(&insp, "checked");
    let mut g = c.benchmark_group("mcp");
    let plain_reply = |id: u64| {
        Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"ok"}}]}}}}"#
        ))
    };
    // ~2 KiB of structured content: the ten properties, the strings long.
    let structured = {
        let fields: Vec<String> = (0..10)
            .map(|i| {
                if i % 2 == 0 {
                    format!(r#""f{i}":"{}""#, "x".repeat(390))
                } else {
                    format!(r#""f{i}":{i}.5"#)
                }
            })
            .collect();
        format!("{{{}}}", fields.join(","))
    };
    assert!(
        (1900..2300).contains(&structured.len()),
        "{}",
        structured.len()
    );
    let structured_reply = |id: u64| {
        Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"see structuredContent"}}],"structuredContent":{structured}}}}}"#
        ))
    };
    let call = |id: u64, tool: &str| {
        Bytes::from(format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{tool}","arguments":{{"query":"rust reverse proxy","limit":10}}}}}}"#
        ))
    };
    for (name, sid) in [
        ("unchecked_session", "unseen"),
        ("checked_session", "checked"),
    ] {
        let mut id = 10u64;
        g.bench_function(format!("tools_call_no_output_schema/{name}"), |b| {
            b.iter(|| {
                id += 1;
                session_exchange(&insp, sid, &call(id, "plain"), &plain_reply(id))
            })
        });
        let mut id = 1_000_000_000u64;
        g.bench_function(format!("tools_call_2KiB_structured_10_props/{name}"), |b| {
            b.iter(|| {
                id += 1;
                session_exchange(&insp, sid, &call(id, "weather"), &structured_reply(id))
            })
        });
    }
    g.finish();
    let s = insp.stats();
    assert_eq!(
        s.schemas_compiled, 3,
        "each distinct schema compiled once: {s:?}"
    );
}

criterion_group!(inspect, benches, mcp_benches);
criterion_main!(inspect);

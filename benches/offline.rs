//! Criterion benchmarks of the offline commands on a recording: `check` (read + the live
//! inspector fed the whole recording) and `export --format exchange` / HAR, at two sizes, so
//! that throughput (bytes of recording per second) shows they stay linear. Targets: `check` ≥ 66 MB/s
//! (also timed as the binary on a 91 MB recording: benches/RESULTS.md, session 34), exports ≥ 50 MB/s.
//!
//! The recording is made the way the proxy makes one: exchanges driven through an `Inspector`
//! whose events are written as recording lines (serde's form, which the recorder's own writer
//! is held to byte for byte) — single calls, batches with a notification, and MCP session calls
//! answered over SSE with a progress notification.

use bytes::Bytes;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rpctap::events::{BusBuilder, Event, Interest, Sink};
use rpctap::inspect::{EndReason, InspectConfig, Inspector, RequestMeta, ResponseMeta};
use std::hint::black_box;
use std::sync::{Arc, Mutex};

#[derive(Debug, Default)]
struct Lines(Mutex<String>);

impl Sink for Lines {
    fn accept(&self, ev: &Event) {
        let mut s = self.0.lock().unwrap_or_else(|p| p.into_inner());
        s.push_str(&serde_json::to_string(ev).unwrap_or_default());
        s.push('\n');
    }
}

/// A recording of `calls` calls (about 480 B of recording per call).
fn recording(calls: usize) -> String {
    let lines = Arc::new(Lines::default());
    lines
        .0
        .lock()
        .unwrap()
        .push_str("{\"rpctap_recording\":1,\"part\":0,\"listen\":\"127.0.0.1:8080\",\"upstream\":\"http://127.0.0.1:9000/\"}\n");
    let mut bus = BusBuilder::default();
    bus.sink(Interest::ALL, lines.clone());
    let insp = Inspector::new(InspectConfig::default(), bus.build());
    let mut n = 0;
    let mut i = 0u64;
    while n < calls {
        i += 1;
        let (session, body, ct, reply): (Option<&str>, String, &str, String) = match i % 3 {
            0 => (
                None,
                format!(r#"[{{"jsonrpc":"2.0","id":{i},"method":"add","params":[1,2]}},{{"jsonrpc":"2.0","method":"log","params":["x"]}},{{"jsonrpc":"2.0","id":"b{i}","method":"echo","params":["hello"]}}]"#),
                "application/json",
                format!(r#"[{{"jsonrpc":"2.0","id":{i},"result":3}},{{"jsonrpc":"2.0","id":"b{i}","result":["hello"]}}]"#),
            ),
            1 => (
                None,
                format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"subtract","params":{{"minuend":42,"subtrahend":23}}}}"#),
                "application/json",
                format!(r#"{{"jsonrpc":"2.0","id":{i},"result":19}}"#),
            ),
            _ => (
                Some("5c0ffee0"),
                format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"tools/call","params":{{"name":"add","arguments":{{"a":2,"b":3}},"_meta":{{"progressToken":{i}}}}}}}"#),
                "text/event-stream",
                format!("event: message\ndata: {{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":{i},\"progress\":1}}}}\n\nevent: message\nid: {i}\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{i},\"result\":{{\"content\":[{{\"type\":\"text\",\"text\":\"5\"}}]}}}}\n\n"),
            ),
        };
        n += if i.is_multiple_of(3) { 2 } else { 1 };
        let mut ex = insp.begin(&RequestMeta {
            method: "POST",
            path: if session.is_some() {
                "/mcp"
            } else {
                "/jsonrpc"
            },
            content_type: Some("application/json"),
            session,
            ..Default::default()
        });
        ex.request_body(&Bytes::from(body), true);
        ex.response_head(&ResponseMeta {
            status: 200,
            content_type: Some(ct),
            ..Default::default()
        });
        ex.response_data(reply.as_bytes());
        ex.end(EndReason::Complete);
    }
    drop(insp);
    let s = lines.0.lock().unwrap().clone();
    s
}

fn benches(c: &mut Criterion) {
    // `RPCTAP_OFFLINE_WRITE=FILE RPCTAP_OFFLINE_CALLS=N`: write the recording instead, for
    // timing the `rpctap check` binary on it (benches/RESULTS.md).
    if let Ok(path) = std::env::var("RPCTAP_OFFLINE_WRITE") {
        let calls = std::env::var("RPCTAP_OFFLINE_CALLS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(80_000);
        std::fs::write(&path, recording(calls)).unwrap();
        return;
    }
    let mut g = c.benchmark_group("offline");
    g.sample_size(10);
    for calls in [5_000, 20_000] {
        let text = recording(calls);
        let parse = |t: &str| {
            let mut rec = rpctap::record::reader::Capture::default();
            rpctap::record::reader::parse_part(t, "bench", &mut rec, true).unwrap();
            rec
        };
        let rec = parse(&text);
        // Everything the live inspector decided, check decides again.
        let results = rpctap::inspect::recorded::check_recording(&rec);
        assert!(results.iter().all(|(_, r)| r.passes_checks));
        g.throughput(Throughput::Bytes(text.len() as u64));
        g.bench_with_input(BenchmarkId::new("check", calls), &text, |b, t| {
            b.iter(|| black_box(rpctap::inspect::recorded::check_recording(&parse(t))))
        });
        g.bench_with_input(BenchmarkId::new("export_exchange", calls), &rec, |b, r| {
            b.iter(|| black_box(rpctap::record::export::exchange_documents(r, 200, 100_000)))
        });
        g.bench_with_input(BenchmarkId::new("export_har", calls), &rec, |b, r| {
            b.iter(|| black_box(rpctap::record::export::har(r)))
        });
    }
    g.finish();
}

criterion_group!(offline, benches);
criterion_main!(offline);

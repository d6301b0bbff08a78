//! OpenTelemetry traces (`--otlp URL`, `[otel]`): one span per finished JSON-RPC call,
//! exported over OTLP/HTTP (protobuf: opentelemetry-proto's messages, encoded in `wire` straight
//! from the call — see there why not with `opentelemetry-otlp`), in batches, from a task of its
//! own fed by the event bus — off the proxy path: the bus queue is
//! bounded and drops (counted in `rpctap_otel_dropped_total`, with spans whose export failed).
//!
//! Span kinds: rpctap receives each call from its client, so the call is a `SERVER` span
//! (the conventions' server side: it covers the time until the reply went back). With
//! `--otlp-propagate`, forwarding it is also a `CLIENT` child span — the span whose id goes
//! upstream in `traceparent`, so an instrumented upstream's own `SERVER` span hangs under it.
//! Without propagation there is no child: the upstream cannot see it, and rpctap times the
//! call, not the leg, so it would repeat the `SERVER` span at twice the export cost. A refused
//! call never went upstream: no child either.
//!
//! Attributes: the RPC conventions for JSON-RPC (`rpc.system` = `jsonrpc`, `rpc.method`,
//! `rpc.jsonrpc.version`, `rpc.jsonrpc.request_id`, `rpc.jsonrpc.error_code` /
//! `error_message`) and, for MCP methods, the MCP conventions (`mcp.method.name`,
//! `mcp.session.id`, `mcp.protocol.version`, `jsonrpc.request.id`, `rpc.response.status_code`,
//! `gen_ai.tool.name` / `gen_ai.operation.name` = `execute_tool` for `tools/call`,
//! `gen_ai.prompt.name`, `mcp.resource.uri`; span name `{mcp.method.name} {target}`); the
//! network's (`network.transport`, `network.protocol.name`, `client.address`, `server.address`,
//! `server.port`); the anomaly codes as span events; an outcome other than a result is status
//! `Error` with `error.type`.
//!
//! Trace context: the request's W3C `traceparent` / `tracestate` — or MCP's
//! `params._meta.traceparent` (`tracestate`), which wins for its call — is the span's parent.
//! Sampling is parent-based (the SDK's sampler): a sampled parent is followed, an unsampled one
//! too; without a parent, `--otlp-sample` of the traces (by trace id).

use crate::events::{CallEvent, Event, Outcome, Scope, Subscription};
use crate::trace::{sampled, sampler};
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, Sampler};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Spans not exported: dropped at the bus queue, or in a failed export.
pub static DROPPED: AtomicU64 = AtomicU64::new(0);
/// Spans exported.
pub static EXPORTED: AtomicU64 = AtomicU64::new(0);

/// `[otel]` and the `--otlp*` flags, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct OtelConfig {
    /// The collector's OTLP/HTTP traces URL (`…/v1/traces`).
    pub endpoint: String,
    /// The share of root traces sampled (0..=1).
    pub sample: f64,
    /// Set `traceparent` on the upstream request to rpctap's span.
    pub propagate: bool,
    pub service_name: String,
    /// The bus queue of finished calls waiting for export.
    pub queue: usize,
}

impl OtelConfig {
    /// `http://host:4318` (the base) or a full traces URL.
    pub fn endpoint_url(url: &str) -> Result<String, String> {
        let u: http::Uri = url.parse().map_err(|e| format!("--otlp {url:?}: {e}"))?;
        if u.scheme_str() != Some("http") {
            return Err(format!(
                "--otlp {url:?}: OTLP/HTTP to an http:// collector (a local collector or sidecar) is supported"
            ));
        }
        Ok(match u.path() {
            "" | "/" => format!("{}/v1/traces", url.trim_end_matches('/')),
            _ => url.to_string(),
        })
    }
}

/// Spans per export at most (measured: larger batches convert and encode for milliseconds at a
/// time on the worker, raising the proxy's p99; a thread of its own costs more in wake-ups).
const BATCH: usize = 256;

/// Starts the exporter as a task of the proxy's runtime.
pub fn spawn(
    sub: Subscription,
    cfg: OtelConfig,
    upstream: Option<(String, u16)>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(sub, cfg, upstream))
}

/// Waits (at most `limit`) for the exporter to send its last spans (it ends when the bus
/// closes).
pub async fn finish(h: tokio::task::JoinHandle<()>, limit: Duration) {
    let _ = tokio::time::timeout(limit, h).await;
}

/// The exporter's task: reads finished calls from the bus until it closes, encodes their spans,
/// exports them in batches (every 200 ms, or at once when a batch is full).
pub async fn run(mut sub: Subscription, cfg: OtelConfig, upstream: Option<(String, u16)>) {
    let uri: http::Uri = match cfg.endpoint.parse() {
        Ok(u) => u,
        Err(e) => {
            tracing::error!(error = %e, endpoint = %cfg.endpoint, "cannot use the OTLP endpoint: no traces");
            return;
        }
    };
    let client = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_max_idle_per_host(2)
        .build_http::<http_body_util::Full<bytes::Bytes>>();
    let maker = Maker {
        sampler: sampler(cfg.sample),
        ids: RandomIdGenerator::default(),
        upstream,
    };
    let frame = wire::Frame::new(&cfg.service_name, env!("CARGO_PKG_VERSION"));
    let mut batch = Vec::with_capacity(512);
    // The batch's spans, encoded (each a `ScopeSpans.spans` field), and how many.
    let mut spans: Vec<u8> = Vec::with_capacity(BATCH * 512);
    let mut count = 0u64;
    let mut scratch = Vec::with_capacity(1024);
    let mut failing = false;
    let mut seen_drops = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        let (open, ticked) = tokio::select! {
            n = sub.rx.recv_many(&mut batch, 512) => (n > 0, false),
            _ = tick.tick() => (true, true),
        };
        for ev in batch.drain(..) {
            if let Event::Call(c) = &*ev {
                count += maker.spans(c, &mut spans, &mut scratch);
            }
        }
        let drops = sub.dropped.load(Ordering::Relaxed);
        DROPPED.fetch_add(drops - seen_drops, Ordering::Relaxed);
        seen_drops = drops;
        if count > 0 && (count >= BATCH as u64 || !open || ticked) {
            let body = frame.request(&spans);
            spans.clear();
            let n = std::mem::take(&mut count);
            match export(&client, &uri, body).await {
                Ok(()) => {
                    EXPORTED.fetch_add(n, Ordering::Relaxed);
                    if std::mem::replace(&mut failing, false) {
                        tracing::warn!(endpoint = %cfg.endpoint, "OTLP export works again");
                    }
                }
                Err(e) => {
                    DROPPED.fetch_add(n, Ordering::Relaxed);
                    if !std::mem::replace(&mut failing, true) {
                        tracing::warn!(endpoint = %cfg.endpoint, error = %e, "OTLP export failed: spans dropped (counted in rpctap_otel_dropped_total)");
                    }
                }
            }
        }
        if !open {
            break;
        }
    }
}

/// How long an export may take before its spans count as dropped.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(5);

/// POSTs one `ExportTraceServiceRequest` (OTLP/HTTP, binary protobuf).
async fn export(
    client: &hyper_util::client::legacy::Client<
        hyper_util::client::legacy::connect::HttpConnector,
        http_body_util::Full<bytes::Bytes>,
    >,
    uri: &http::Uri,
    body: Vec<u8>,
) -> Result<(), String> {
    use http_body_util::BodyExt;
    let req = http::Request::post(uri.clone())
        .header(http::header::CONTENT_TYPE, "application/x-protobuf")
        .body(http_body_util::Full::new(bytes::Bytes::from(body)))
        .map_err(|e| e.to_string())?;
    let sent = async {
        let resp = client.request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status();
        // Read to the end, so the connection is kept for the next export.
        let _ = resp.into_body().collect().await;
        if status.is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered {status}"))
        }
    };
    tokio::time::timeout(EXPORT_TIMEOUT, sent)
        .await
        .map_err(|_| format!("no answer within {EXPORT_TIMEOUT:?}"))?
}

struct Maker {
    /// Built once: the parent-based sampler boxes its inner one.
    sampler: Sampler,
    ids: RandomIdGenerator,
    /// The upstream's host and port (`None` for a stdio server).
    upstream: Option<(String, u16)>,
}

fn is_mcp(method: &str) -> bool {
    crate::rpc::is_mcp_method(method)
}

impl Maker {
    /// Encodes the spans of one call onto `out` (none if it is not sampled); how many.
    fn spans(&self, c: &CallEvent, out: &mut Vec<u8>, scratch: &mut Vec<u8>) -> u64 {
        use wire::Attr;
        let trace = c.trace.as_deref();
        let parent = trace.and_then(|t| t.parent.as_ref());
        let propagated = trace.and_then(|t| t.propagated);
        let trace_id = match (parent, propagated) {
            (Some(p), _) => p.trace_id(),
            (None, Some((t, _, _))) => t,
            (None, None) => self.ids.new_trace_id(),
        };
        if !sampled(&self.sampler, parent, trace_id) {
            return 0;
        }
        let mcp = is_mcp(&c.method);
        let end = c.ts;
        let start = end.saturating_sub(c.latency_us.unwrap_or(0).saturating_mul(1000));
        let server_id = self.ids.new_span_id();
        let state = parent.map(|p| p.trace_state().header()).unwrap_or_default();
        let id_text = c.id.to_json_text();
        let id = id_text.trim_matches('"');
        let mut attrs: Vec<(&'static str, Attr<'_>)> = Vec::with_capacity(20);
        attrs.extend([
            ("rpc.system", Attr::Str("jsonrpc")),
            ("rpc.method", Attr::Str(&c.method)),
            ("rpc.jsonrpc.version", Attr::Str("2.0")),
            ("rpc.jsonrpc.request_id", Attr::Str(id)),
        ]);
        if let Some(t) = trace {
            let net = if t.transport == "stdio" {
                "pipe"
            } else {
                "tcp"
            };
            attrs.push(("network.transport", Attr::Str(net)));
            attrs.push(("network.protocol.name", Attr::Str(t.transport)));
            if let Some(p) = &t.peer {
                let host = p.rsplit_once(':').map_or(&**p, |(h, _)| h);
                attrs.push(("client.address", Attr::Str(host.trim_matches(['[', ']']))));
            }
        }
        let session;
        if mcp {
            // The MCP conventions' names (their JSON-RPC ones too).
            attrs.push(("mcp.method.name", Attr::Str(&c.method)));
            attrs.push(("jsonrpc.request.id", Attr::Str(id)));
            attrs.push(("jsonrpc.protocol.version", Attr::Str("2.0")));
            if let Scope::Session(s) = &c.scope {
                session = s.to_string();
                attrs.push(("mcp.session.id", Attr::Str(&session)));
            }
            if let Some(v) = trace.and_then(|t| t.protocol_version.as_deref()) {
                attrs.push(("mcp.protocol.version", Attr::Str(v)));
            }
            match (&*c.method, c.target.as_deref()) {
                ("tools/call", Some(t)) => {
                    attrs.push(("gen_ai.tool.name", Attr::Str(t)));
                    attrs.push(("gen_ai.operation.name", Attr::Str("execute_tool")));
                }
                ("prompts/get", Some(t)) => attrs.push(("gen_ai.prompt.name", Attr::Str(t))),
                (m, Some(t)) if m.starts_with("resources/") => {
                    attrs.push(("mcp.resource.uri", Attr::Str(t)))
                }
                _ => {}
            }
        }
        let code_text;
        let error_type: Option<Cow<'_, str>> = match &c.outcome {
            Outcome::Result if c.anomalies.contains(&"TOOL_ERROR") => Some("tool_error".into()),
            Outcome::Result => None,
            Outcome::Error { code, message } => {
                code_text = code.to_string();
                attrs.push(("rpc.jsonrpc.error_code", Attr::Int(*code)));
                attrs.push(("rpc.jsonrpc.error_message", Attr::Str(message)));
                attrs.push(("rpc.response.status_code", Attr::Str(&code_text)));
                Some(Cow::Borrowed(&code_text))
            }
            Outcome::Refused { .. } => Some("rate_limited".into()),
            Outcome::Rejected { status } => Some(format!("http_{status}").into()),
            Outcome::Missing { .. } => Some("missing_response".into()),
        };
        if let Some(t) = &error_type {
            attrs.push(("error.type", Attr::Str(t)));
        }
        let status = error_type.as_ref().map(|_| c.outcome.label());
        let name_buf;
        let name: &str = match (c.target.as_deref(), &*c.method) {
            (Some(t), "tools/call" | "prompts/get") => {
                name_buf = format!("{} {t}", c.method);
                &name_buf
            }
            _ => &c.method,
        };
        let span = wire::Span {
            trace_id: trace_id.to_bytes(),
            state: &state,
            name,
            start,
            end,
            remote_parent: parent.is_some(),
            status: status.as_deref(),
        };
        span.encode(
            out,
            scratch,
            server_id.to_bytes(),
            parent.map(|p| p.span_id().to_bytes()),
            wire::SERVER,
            &attrs,
            &c.anomalies,
        );
        // The upstream leg only when it was propagated: without `--otlp-propagate` nothing can
        // hang under it, and it would repeat the SERVER span's interval (rpctap times the call,
        // not the leg) at twice the export cost.
        let went_upstream = propagated.is_some() && !matches!(c.outcome, Outcome::Refused { .. });
        if !went_upstream {
            return 1;
        }
        let client_id = propagated
            .map(|(_, s, _)| s)
            .unwrap_or_else(|| self.ids.new_span_id());
        let mut leg: Vec<(&'static str, Attr<'_>)> = vec![
            ("rpc.system", Attr::Str("jsonrpc")),
            ("rpc.method", Attr::Str(&c.method)),
        ];
        if let Some((host, port)) = &self.upstream {
            leg.push(("server.address", Attr::Str(host)));
            leg.push(("server.port", Attr::Int(i64::from(*port))));
        }
        wire::Span {
            remote_parent: false,
            ..span
        }
        .encode(
            out,
            scratch,
            client_id.to_bytes(),
            Some(server_id.to_bytes()),
            wire::CLIENT,
            &leg,
            &[],
        );
        2
    }
}

/// OTLP's protobuf messages (opentelemetry-proto's `trace/v1`, `common/v1`, `resource/v1`), the
/// fields rpctap sends, written straight from a call into one buffer. Written here rather than
/// with `opentelemetry-otlp`'s exporter for cost: that exporter builds each span as the SDK's
/// `SpanData`, converts it into the generated structs (a `String` per attribute key and value),
/// groups spans by resource and scope, then encodes — 0.86–0.89 of the throughput without
/// `--otlp` at 100 % sampling (benches/RESULTS.md, sessions 10 and 11; the target is ≥ 0.90),
/// of which making, converting and encoding were ~8 % of the proxy's CPU. The field numbers and
/// types are opentelemetry-proto 1.x's; the tests decode what is sent with the official
/// `opentelemetry-proto` package (tests/interop/otlp_receiver.py).
mod wire {
    pub const SERVER: u64 = 2;
    pub const CLIENT: u64 = 3;
    /// `SpanFlags`: the flags say whether the parent is remote, and it is.
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    const SAMPLED: u32 = 1;

    /// An attribute's value.
    #[derive(Clone, Copy)]
    pub enum Attr<'a> {
        Str(&'a str),
        Int(i64),
    }

    fn varint(b: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            b.push((v as u8) | 0x80);
            v >>= 7;
        }
        b.push(v as u8);
    }
    fn key(b: &mut Vec<u8>, field: u32, wire_type: u8) {
        varint(b, (u64::from(field) << 3) | u64::from(wire_type));
    }
    fn bytes(b: &mut Vec<u8>, field: u32, data: &[u8]) {
        key(b, field, 2);
        varint(b, data.len() as u64);
        b.extend_from_slice(data);
    }
    fn fixed64(b: &mut Vec<u8>, field: u32, v: u64) {
        key(b, field, 1);
        b.extend_from_slice(&v.to_le_bytes());
    }
    fn fixed32(b: &mut Vec<u8>, field: u32, v: u32) {
        key(b, field, 5);
        b.extend_from_slice(&v.to_le_bytes());
    }
    fn uint(b: &mut Vec<u8>, field: u32, v: u64) {
        key(b, field, 0);
        varint(b, v);
    }
    fn varint_len(v: u64) -> usize {
        // 7 bits a byte; at least one.
        (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
    }
    /// A nested message: `f` writes its fields after `b`'s end, then its key and length are put
    /// in front of them.
    fn message(b: &mut Vec<u8>, field: u32, f: impl FnOnce(&mut Vec<u8>)) {
        let start = b.len();
        f(b);
        let len = (b.len() - start) as u64;
        // The key and the length, made on the stack and moved in (in place: the fields shift).
        let mut head = [0u8; 16];
        let mut n = 0;
        for mut v in [(u64::from(field) << 3) | 2, len] {
            while v >= 0x80 {
                head[n] = (v as u8) | 0x80;
                v >>= 7;
                n += 1;
            }
            head[n] = v as u8;
            n += 1;
        }
        b.splice(start..start, head[..n].iter().copied());
    }
    /// `KeyValue { key = 1; AnyValue value = 2 { string_value = 1 | int_value = 3 } }`, its
    /// lengths computed ahead (the most frequent message: no moving).
    fn attribute(b: &mut Vec<u8>, field: u32, k: &str, v: Attr<'_>) {
        let any = match v {
            Attr::Str(s) => 1 + varint_len(s.len() as u64) + s.len(),
            Attr::Int(i) => 1 + varint_len(i as u64),
        };
        let kv = 1 + varint_len(k.len() as u64) + k.len() + 1 + varint_len(any as u64) + any;
        key(b, field, 2);
        varint(b, kv as u64);
        bytes(b, 1, k.as_bytes());
        key(b, 2, 2);
        varint(b, any as u64);
        match v {
            Attr::Str(s) => bytes(b, 1, s.as_bytes()),
            Attr::Int(i) => uint(b, 3, i as u64),
        }
    }

    /// A span's fields but its ids, kind, attributes and events.
    #[derive(Clone, Copy)]
    pub struct Span<'a> {
        pub trace_id: [u8; 16],
        pub state: &'a str,
        pub name: &'a str,
        /// Nanoseconds since the Unix epoch.
        pub start: u64,
        pub end: u64,
        pub remote_parent: bool,
        /// `Some(message)`: status `Error`; `None`: unset.
        pub status: Option<&'a str>,
    }

    impl Span<'_> {
        /// Appends the span as a `ScopeSpans.spans` field (2), encoded in `scratch` first.
        #[allow(clippy::too_many_arguments)]
        pub fn encode(
            &self,
            out: &mut Vec<u8>,
            scratch: &mut Vec<u8>,
            id: [u8; 8],
            parent: Option<[u8; 8]>,
            kind: u64,
            attrs: &[(&'static str, Attr<'_>)],
            events: &[&'static str],
        ) {
            let b = scratch;
            b.clear();
            bytes(b, 1, &self.trace_id);
            bytes(b, 2, &id);
            if !self.state.is_empty() {
                bytes(b, 3, self.state.as_bytes());
            }
            if let Some(p) = parent {
                bytes(b, 4, &p);
            }
            bytes(b, 5, self.name.as_bytes());
            uint(b, 6, kind);
            fixed64(b, 7, self.start);
            fixed64(b, 8, self.end);
            for (k, v) in attrs {
                attribute(b, 9, k, *v);
            }
            // `Event { time_unix_nano = 1; name = 2; attributes = 3 }`: an anomaly code each.
            for code in events {
                message(b, 11, |b| {
                    fixed64(b, 1, self.end);
                    bytes(b, 2, code.as_bytes());
                    attribute(b, 3, "rpctap.anomaly.code", Attr::Str(code));
                });
            }
            // `Status { message = 2; code = 3 }` (2: error).
            if let Some(m) = self.status {
                message(b, 15, |b| {
                    bytes(b, 2, m.as_bytes());
                    uint(b, 3, 2);
                });
            }
            let remote = if self.remote_parent { IS_REMOTE } else { 0 };
            fixed32(b, 16, SAMPLED | HAS_IS_REMOTE | remote);
            bytes(out, 2, b);
        }
    }

    /// What every export request has around its spans: the resource (`service.name`) and the
    /// instrumentation scope (`rpctap` and its version), encoded once.
    pub struct Frame {
        resource: Vec<u8>,
        scope: Vec<u8>,
    }

    impl Frame {
        pub fn new(service: &str, version: &str) -> Self {
            let mut resource = Vec::new();
            // `ResourceSpans.resource = 1 { attributes = 1 }`.
            message(&mut resource, 1, |b| {
                attribute(b, 1, "service.name", Attr::Str(service))
            });
            let mut scope = Vec::new();
            // `ScopeSpans.scope = 1 { name = 1; version = 2 }`.
            message(&mut scope, 1, |b| {
                bytes(b, 1, b"rpctap");
                bytes(b, 2, version.as_bytes());
            });
            Frame { resource, scope }
        }

        /// `ExportTraceServiceRequest { resource_spans = 1 { resource, scope_spans = 2 { scope,
        /// spans } } }` around `spans` (encoded by [`Span::encode`]).
        pub fn request(&self, spans: &[u8]) -> Vec<u8> {
            let mut out = Vec::with_capacity(spans.len() + self.resource.len() + 64);
            message(&mut out, 1, |b| {
                b.extend_from_slice(&self.resource);
                message(b, 2, |b| {
                    b.extend_from_slice(&self.scope);
                    b.extend_from_slice(spans);
                });
            });
            out
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        #[test]
        fn varints_and_nested_lengths_are_protobufs() {
            let mut b = Vec::new();
            varint(&mut b, 300);
            assert_eq!(b, [0xac, 0x02]);
            let mut m = Vec::new();
            message(&mut m, 2, |b| bytes(b, 1, &[7u8; 200]));
            // key 2/LEN, length 203 (two bytes), then key 1/LEN, length 200, the data.
            assert_eq!(&m[..5], &[0x12, 0xcb, 0x01, 0x0a, 0xc8]);
            assert_eq!(m.len(), 3 + 3 + 200);
            let mut n = Vec::new();
            uint(&mut n, 3, -1i64 as u64);
            assert_eq!(n.len(), 11, "a negative int64 is ten bytes");
            for v in [0u64, 1, 127, 128, 16_383, 16_384, u64::MAX] {
                let mut b = Vec::new();
                varint(&mut b, v);
                assert_eq!(varint_len(v), b.len(), "{v}");
            }
            // An attribute written with its lengths ahead equals one nested the plain way.
            for v in [
                Attr::Str("jsonrpc"),
                Attr::Str(&"x".repeat(300)),
                Attr::Int(-32601),
            ] {
                let mut ahead = Vec::new();
                attribute(&mut ahead, 9, "rpc.system", v);
                let mut nested = Vec::new();
                message(&mut nested, 9, |b| {
                    bytes(b, 1, b"rpc.system");
                    message(b, 2, |b| match v {
                        Attr::Str(s) => bytes(b, 1, s.as_bytes()),
                        Attr::Int(i) => uint(b, 3, i as u64),
                    });
                });
                assert_eq!(ahead, nested);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_collector_url_is_its_base_or_a_traces_url() {
        assert_eq!(
            OtelConfig::endpoint_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert!(OtelConfig::endpoint_url("https://x").is_err());
    }
}

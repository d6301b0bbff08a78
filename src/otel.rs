//! OpenTelemetry traces (`--otlp URL`, `[otel]`): one span per finished JSON-RPC call,
//! exported over OTLP/HTTP (protobuf) with the official `opentelemetry-otlp` exporter, in
//! batches, from a task of its own fed by the event bus — off the proxy path: the bus queue is
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
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry::{KeyValue, Value};
use opentelemetry_otlp::WithExportConfig;
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample, SpanData, SpanEvents,
    SpanExporter, SpanLinks,
};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

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

/// What the inspector needs to keep trace context: the root sampling share, and whether
/// rpctap's span is propagated upstream.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TraceSettings {
    pub sample: f64,
    pub propagate: bool,
}

/// What a call's span needs to know of where it came from.
#[derive(Debug, Default, Clone)]
pub struct CallTrace {
    /// The remote parent (`traceparent`, `tracestate`).
    pub parent: Option<SpanContext>,
    /// The client's address.
    pub peer: Option<Arc<str>>,
    /// The request's `MCP-Protocol-Version`.
    pub protocol_version: Option<Arc<str>>,
    /// `http`, `websocket` or `stdio`.
    pub transport: &'static str,
    /// With `--otlp-propagate`: the trace (the parent's, or a new root's), the id of rpctap's
    /// `CLIENT` span sent upstream, and whether the trace is sampled.
    pub propagated: Option<(TraceId, SpanId, bool)>,
}

impl CallTrace {
    pub fn new(
        parent: Option<SpanContext>,
        peer: Option<Arc<str>>,
        protocol_version: Option<Arc<str>>,
        transport: &'static str,
        t: TraceSettings,
    ) -> Self {
        let propagated = t.propagate.then(|| {
            let ids = RandomIdGenerator::default();
            let trace = parent
                .as_ref()
                .map_or_else(|| ids.new_trace_id(), SpanContext::trace_id);
            let sampled = sampled(&sampler(t.sample), parent.as_ref(), trace);
            (trace, ids.new_span_id(), sampled)
        });
        CallTrace {
            parent,
            peer,
            protocol_version,
            transport,
            propagated,
        }
    }

    /// The `traceparent` rpctap sends upstream (`--otlp-propagate`).
    pub fn traceparent(&self) -> Option<String> {
        let (t, s, sampled) = self.propagated?;
        Some(format!("00-{t}-{s}-{:02x}", u8::from(sampled)))
    }
}

/// A new span id (the SDK's generator).
pub fn new_span_id() -> SpanId {
    RandomIdGenerator::default().new_span_id()
}

/// The sampler (parent-based, then the share by trace id).
fn sampler(ratio: f64) -> Sampler {
    Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
}

fn sampled(sampler: &Sampler, parent: Option<&SpanContext>, trace: TraceId) -> bool {
    let cx = parent.map(|p| opentelemetry::Context::new().with_remote_span_context(p.clone()));
    sampler
        .should_sample(cx.as_ref(), trace, "", &SpanKind::Server, &[], &[])
        .decision
        == SamplingDecision::RecordAndSample
}

/// A W3C `traceparent` (`00-TRACEID-SPANID-FLAGS`) with its `tracestate`, as a remote
/// parent; `None` if it is not one.
pub fn parse_traceparent(tp: &str, ts: Option<&str>) -> Option<SpanContext> {
    let mut p = tp.trim().split('-');
    let (ver, trace, span, flags) = (p.next()?, p.next()?, p.next()?, p.next()?);
    if ver.len() != 2 || ver == "ff" || trace.len() != 32 || span.len() != 16 || flags.len() != 2 {
        return None;
    }
    if ver == "00" && p.next().is_some() {
        return None;
    }
    let trace = TraceId::from_hex(trace).ok()?;
    let span = SpanId::from_hex(span).ok()?;
    if trace == TraceId::INVALID || span == SpanId::INVALID {
        return None;
    }
    let flags = TraceFlags::new(u8::from_str_radix(flags, 16).ok()? & 1);
    let state = ts
        .and_then(|s| s.parse::<TraceState>().ok())
        .unwrap_or_default();
    Some(SpanContext::new(trace, span, flags, true, state))
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

/// The exporter's task: reads finished calls from the bus until it closes, makes their spans,
/// exports them in batches (every 200 ms, or at once when a batch is full).
pub async fn run(mut sub: Subscription, cfg: OtelConfig, upstream: Option<(String, u16)>) {
    let mut exporter = match opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
        .with_endpoint(cfg.endpoint.clone())
        .with_timeout(Duration::from_secs(5))
        .build()
    {
        Ok(e) => e,
        Err(e) => {
            tracing::error!(error = %e, endpoint = %cfg.endpoint, "cannot build the OTLP exporter: no traces");
            return;
        }
    };
    exporter.set_resource(
        &opentelemetry_sdk::Resource::builder_empty()
            .with_service_name(cfg.service_name.clone())
            .build(),
    );
    let maker = Maker {
        sampler: sampler(cfg.sample),
        ids: RandomIdGenerator::default(),
        upstream,
        scope: opentelemetry::InstrumentationScope::builder("rpctap")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build(),
    };
    let mut batch = Vec::with_capacity(512);
    let mut spans: Vec<SpanData> = Vec::new();
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
                maker.spans(c, &mut spans);
            }
        }
        let drops = sub.dropped.load(Ordering::Relaxed);
        DROPPED.fetch_add(drops - seen_drops, Ordering::Relaxed);
        seen_drops = drops;
        if !spans.is_empty() && (spans.len() >= BATCH || !open || ticked) {
            let n = spans.len() as u64;
            match exporter.export(std::mem::take(&mut spans)).await {
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
    let _ = exporter.shutdown();
}

struct Maker {
    /// Built once: the parent-based sampler boxes its inner one.
    sampler: Sampler,
    ids: RandomIdGenerator,
    /// The upstream's host and port (`None` for a stdio server).
    upstream: Option<(String, u16)>,
    scope: opentelemetry::InstrumentationScope,
}

fn is_mcp(method: &str) -> bool {
    crate::inspect::capability::is_mcp_method(method)
}

impl Maker {
    /// The spans of one call (none if it is not sampled).
    fn spans(&self, c: &CallEvent, out: &mut Vec<SpanData>) {
        let trace = c.trace.as_deref();
        let parent = trace.and_then(|t| t.parent.clone());
        let mcp = is_mcp(&c.method);
        let name: Cow<'static, str> = match (&c.target, &*c.method) {
            (Some(t), "tools/call" | "prompts/get") => format!("{} {t}", c.method).into(),
            _ => c.method.to_string().into(),
        };
        let propagated = trace.and_then(|t| t.propagated);
        let trace_id = match (&parent, propagated) {
            (Some(p), _) => p.trace_id(),
            (None, Some((t, _, _))) => t,
            (None, None) => self.ids.new_trace_id(),
        };
        if !sampled(&self.sampler, parent.as_ref(), trace_id) {
            return;
        }
        let end = SystemTime::UNIX_EPOCH + Duration::from_nanos(c.ts);
        let start = end - Duration::from_micros(c.latency_us.unwrap_or(0));
        let server_id = self.ids.new_span_id();
        let state = parent
            .as_ref()
            .map(|p| p.trace_state().clone())
            .unwrap_or_default();
        let ctx = |id| SpanContext::new(trace_id, id, TraceFlags::SAMPLED, false, state.clone());
        let id = c.id.to_json_text();
        let id: Arc<str> = id.trim_matches('"').into();
        let method = Value::from(c.method.clone());
        let mut attrs = Vec::with_capacity(16);
        attrs.extend([
            KeyValue::new("rpc.system", "jsonrpc"),
            KeyValue::new("rpc.method", method.clone()),
            KeyValue::new("rpc.jsonrpc.version", "2.0"),
            KeyValue::new("rpc.jsonrpc.request_id", Value::from(id.clone())),
        ]);
        if let Some(t) = trace {
            let net = if t.transport == "stdio" {
                "pipe"
            } else {
                "tcp"
            };
            attrs.push(KeyValue::new("network.transport", net));
            attrs.push(KeyValue::new("network.protocol.name", t.transport));
            if let Some(p) = &t.peer {
                let host = p.rsplit_once(':').map_or(&**p, |(h, _)| h);
                attrs.push(KeyValue::new(
                    "client.address",
                    host.trim_matches(['[', ']']).to_string(),
                ));
            }
        }
        if mcp {
            // The MCP conventions' names (their JSON-RPC ones too).
            attrs.push(KeyValue::new("mcp.method.name", method.clone()));
            attrs.push(KeyValue::new("jsonrpc.request.id", Value::from(id)));
            attrs.push(KeyValue::new("jsonrpc.protocol.version", "2.0"));
            if let Scope::Session(s) = &c.scope {
                attrs.push(KeyValue::new("mcp.session.id", s.to_string()));
            }
            if let Some(v) = trace.and_then(|t| t.protocol_version.as_deref()) {
                attrs.push(KeyValue::new("mcp.protocol.version", v.to_string()));
            }
            match (&*c.method, &c.target) {
                ("tools/call", Some(t)) => {
                    attrs.push(KeyValue::new("gen_ai.tool.name", Value::from(t.clone())));
                    attrs.push(KeyValue::new("gen_ai.operation.name", "execute_tool"));
                }
                ("prompts/get", Some(t)) => {
                    attrs.push(KeyValue::new("gen_ai.prompt.name", Value::from(t.clone())))
                }
                (m, Some(t)) if m.starts_with("resources/") => {
                    attrs.push(KeyValue::new("mcp.resource.uri", Value::from(t.clone())))
                }
                _ => {}
            }
        }
        let error_type: Option<String> = match &c.outcome {
            Outcome::Result if c.anomalies.contains(&"TOOL_ERROR") => Some("tool_error".into()),
            Outcome::Result => None,
            Outcome::Error { code, message } => {
                attrs.push(KeyValue::new("rpc.jsonrpc.error_code", *code));
                attrs.push(KeyValue::new("rpc.jsonrpc.error_message", message.clone()));
                attrs.push(KeyValue::new("rpc.response.status_code", code.to_string()));
                Some(code.to_string())
            }
            Outcome::Refused { .. } => Some("rate_limited".into()),
            Outcome::Rejected { status } => Some(format!("http_{status}")),
            Outcome::Missing { .. } => Some("missing_response".into()),
        };
        let status = match &error_type {
            Some(t) => {
                attrs.push(KeyValue::new("error.type", t.clone()));
                Status::error(c.outcome.label())
            }
            None => Status::Unset,
        };
        let mut events = SpanEvents::default();
        events.events = c
            .anomalies
            .iter()
            .map(|code| {
                opentelemetry::trace::Event::new(
                    *code,
                    end,
                    vec![KeyValue::new("rpctap.anomaly.code", *code)],
                    0,
                )
            })
            .collect();
        // The upstream leg only when it was propagated: without `--otlp-propagate` nothing can
        // hang under it, and it would repeat the SERVER span's interval (rpctap times the call,
        // not the leg) at twice the export cost.
        let went_upstream = propagated.is_some() && !matches!(c.outcome, Outcome::Refused { .. });
        out.push(SpanData {
            span_context: ctx(server_id),
            parent_span_id: parent.as_ref().map_or(SpanId::INVALID, |p| p.span_id()),
            parent_span_is_remote: parent.is_some(),
            span_kind: SpanKind::Server,
            name: name.clone(),
            start_time: start,
            end_time: end,
            attributes: attrs,
            dropped_attributes_count: 0,
            events,
            links: SpanLinks::default(),
            status: status.clone(),
            instrumentation_scope: self.scope.clone(),
        });
        if went_upstream {
            let client_id = propagated
                .map(|(_, s, _)| s)
                .unwrap_or_else(|| self.ids.new_span_id());
            out.push(SpanData {
                span_context: ctx(client_id),
                parent_span_id: server_id,
                parent_span_is_remote: false,
                span_kind: SpanKind::Client,
                name,
                start_time: start,
                end_time: end,
                attributes: {
                    let mut a = vec![
                        KeyValue::new("rpc.system", "jsonrpc"),
                        KeyValue::new("rpc.method", method),
                    ];
                    if let Some((host, port)) = &self.upstream {
                        a.push(KeyValue::new("server.address", host.clone()));
                        a.push(KeyValue::new("server.port", Value::I64(i64::from(*port))));
                    }
                    a
                },
                dropped_attributes_count: 0,
                events: SpanEvents::default(),
                links: SpanLinks::default(),
                status,
                instrumentation_scope: self.scope.clone(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_w3c_traceparent_and_refuses_what_is_not_one() {
        let p = parse_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            Some("rojo=00f067aa0ba902b7"),
        )
        .unwrap();
        assert_eq!(p.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(p.span_id().to_string(), "00f067aa0ba902b7");
        assert!(p.is_sampled() && p.is_remote());
        assert_eq!(p.trace_state().get("rojo"), Some("00f067aa0ba902b7"));
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "00-xyz92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert!(parse_traceparent(bad, None).is_none(), "{bad:?}");
        }
        assert_eq!(
            OtelConfig::endpoint_url("http://127.0.0.1:4318").unwrap(),
            "http://127.0.0.1:4318/v1/traces"
        );
        assert!(OtelConfig::endpoint_url("https://x").is_err());
    }
}

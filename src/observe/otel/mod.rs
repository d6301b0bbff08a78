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
            Outcome::Result | Outcome::InputRequired => None,
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
            Outcome::Cancelled { .. } => Some("cancelled".into()),
            Outcome::Abandoned { .. } => Some("abandoned".into()),
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

mod wire;

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

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
//! `gen_ai.prompt.name`, `mcp.resource.uri`; span name `{mcp.method.name} {target}`); for A2A
//! methods, beside the JSON-RPC ones, `a2a.method.name`, `a2a.protocol.version`, `a2a.task.id`,
//! `a2a.task.state` and
//! `gen_ai.conversation.id` (the call's `contextId`); the
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use wire::Attr;

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
    /// Also write the attribute names the conventions replaced.
    pub legacy_names: bool,
    /// How often the MCP metrics are exported.
    pub metrics_interval: Duration,
    /// A tool call's arguments and result on its span (`--otlp-tool-content`).
    pub tool_content: bool,
}

impl OtelConfig {
    /// The collector's OTLP/HTTP metrics URL, beside the traces one (`None` for a traces URL
    /// of another shape: no metrics are exported, and the start says so).
    pub fn metrics_url(&self) -> Option<String> {
        self.endpoint
            .strip_suffix("/v1/traces")
            .map(|base| format!("{base}/v1/metrics"))
    }

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
    stop: tokio::sync::watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(sub, cfg, upstream, stop))
}

/// Waits (at most `limit`) for the exporter to send its last spans (it ends when the bus
/// closes).
pub async fn finish(h: tokio::task::JoinHandle<()>, limit: Duration) {
    let _ = tokio::time::timeout(limit, h).await;
}

/// The exporter's task: reads finished calls from the bus until it closes or `stop` says so
/// (then what is queued is read and sent: a part that still holds the bus — a relay task, the
/// admin listener — does not keep the process waiting), encodes their spans, exports them in
/// batches (every 200 ms, or at once when a batch is full), and the MCP duration metrics
/// every `metrics_interval` and at the end.
pub async fn run(
    mut sub: Subscription,
    cfg: OtelConfig,
    upstream: Option<(String, u16)>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
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
        legacy: cfg.legacy_names,
    };
    let frame = wire::Frame::new(&cfg.service_name, env!("CARGO_PKG_VERSION"));
    let mut batch = Vec::with_capacity(512);
    // The batch's spans, encoded (each a `ScopeSpans.spans` field), and how many.
    let mut spans: Vec<u8> = Vec::with_capacity(BATCH * 512);
    let mut count = 0u64;
    let mut scratch = Vec::with_capacity(1024);
    let mut failing = false;
    let mut metrics_failing = false;
    let mut seen_drops = 0;
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let metrics_uri: Option<http::Uri> = match cfg.metrics_url().map(|u| u.parse()) {
        Some(Ok(u)) => Some(u),
        _ => {
            tracing::warn!(endpoint = %cfg.endpoint, "the OTLP endpoint is not a `/v1/traces` URL: no metrics are exported (give the collector's base URL)");
            None
        }
    };
    let mut durations = durations::Durations::new(crate::events::now_ns());
    let mut content = content::Content::default();
    let mut metric_tick = tokio::time::interval(cfg.metrics_interval);
    metric_tick.tick().await;
    loop {
        let (open, ticked, metrics_due) = tokio::select! {
            n = sub.rx.recv_many(&mut batch, 512) => (n > 0, false, false),
            _ = tick.tick() => (true, true, false),
            _ = metric_tick.tick() => (true, false, true),
            _ = stop.changed() => {
                while let Ok(ev) = sub.rx.try_recv() {
                    batch.push(ev);
                }
                (false, false, false)
            }
        };
        for ev in batch.drain(..) {
            match &*ev {
                Event::Call(c) => {
                    let tool = (&*c.method == "tools/call")
                        .then(|| content.take(&c.scope, &c.id))
                        .flatten();
                    count += maker.spans(c, tool.as_ref(), &mut spans, &mut scratch);
                    durations.record(c);
                }
                Event::Message(m) => content.message(m),
                _ => {}
            }
        }
        if let (Some(uri), true) = (
            &metrics_uri,
            (metrics_due || !open) && !durations.is_empty(),
        ) {
            let body = frame.request(&durations.encode(crate::events::now_ns()));
            match export(&client, uri, body).await {
                Ok(()) => metrics_failing = false,
                Err(e) if !std::mem::replace(&mut metrics_failing, true) => {
                    tracing::warn!(endpoint = %uri, error = %e, "OTLP metrics export failed (the next export sends the totals again)");
                }
                Err(_) => {}
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
    /// Also the attribute names the conventions replaced.
    legacy: bool,
}

/// `network.transport` and `network.protocol.name` for rpctap's transport names (the MCP
/// conventions' "Recording MCP transport": stdio is a pipe with no protocol name).
fn network<'a>(transport: &str) -> [Option<(&'static str, Attr<'a>)>; 2] {
    let (net, proto) = match transport {
        "stdio" => ("pipe", None),
        "websocket" => ("tcp", Some("websocket")),
        _ => ("tcp", Some("http")),
    };
    [
        Some(("network.transport", Attr::Str(net))),
        proto.map(|p| ("network.protocol.name", Attr::Str(p))),
    ]
}

/// A peer's `host:port` (`[v6]:port` too) as its address and port.
fn split_addr(p: &str) -> (&str, Option<i64>) {
    match p.rsplit_once(':') {
        Some((h, port)) if !h.is_empty() => (h.trim_matches(['[', ']']), port.parse().ok()),
        _ => (p.trim_matches(['[', ']']), None),
    }
}

/// What names a call's target in the conventions: the tool (and `execute_tool`), the
/// prompt, the resource's URI.
fn target_attrs<'a>(
    method: &str,
    target: Option<&'a str>,
) -> impl Iterator<Item = (&'static str, Attr<'a>)> {
    let pairs: [Option<(&'static str, Attr<'a>)>; 2] = match (method, target) {
        ("tools/call", Some(t)) => [
            Some(("gen_ai.tool.name", Attr::Str(t))),
            Some(("gen_ai.operation.name", Attr::Str("execute_tool"))),
        ],
        ("prompts/get", Some(t)) => [Some(("gen_ai.prompt.name", Attr::Str(t))), None],
        (m, Some(t)) if m.starts_with("resources/") => {
            [Some(("mcp.resource.uri", Attr::Str(t))), None]
        }
        _ => [None, None],
    };
    pairs.into_iter().flatten()
}

/// An A2A task's state in A2A's words, from the status the shared task model keeps.
fn a2a_state(status: &str) -> &str {
    match status {
        "input_required" => "input-required",
        "cancelled" => "canceled",
        s => s,
    }
}

fn is_mcp(method: &str) -> bool {
    crate::rpc::is_mcp_method(method)
}

impl Maker {
    /// Encodes the spans of one call onto `out` (none if it is not sampled); how many.
    fn spans(
        &self,
        c: &CallEvent,
        tool: Option<&(String, Option<String>)>,
        out: &mut Vec<u8>,
        scratch: &mut Vec<u8>,
    ) -> u64 {
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
        // `jsonrpc.request.id` is not set for a null id (the conventions).
        let id = (c.id != crate::rpc::Id::Null).then_some(id_text.trim_matches('"'));
        let legacy = self.legacy;
        let mut attrs: Vec<(&'static str, Attr<'_>)> = Vec::with_capacity(20);
        if !mcp {
            // The JSON-RPC conventions (the MCP ones say to use theirs instead for MCP).
            attrs.extend([
                ("rpc.system.name", Attr::Str("jsonrpc")),
                ("rpc.method", Attr::Str(&c.method)),
                ("jsonrpc.protocol.version", Attr::Str("2.0")),
            ]);
        }
        if let Some(id) = id {
            attrs.push(("jsonrpc.request.id", Attr::Str(id)));
        }
        if legacy {
            attrs.extend([
                ("rpc.system", Attr::Str("jsonrpc")),
                ("rpc.jsonrpc.version", Attr::Str("2.0")),
                ("rpc.jsonrpc.request_id", Attr::Str(id.unwrap_or(""))),
            ]);
            if mcp {
                attrs.push(("rpc.method", Attr::Str(&c.method)));
            }
        }
        if let Some(t) = trace {
            attrs.extend(network(t.transport).into_iter().flatten());
            if legacy && t.transport == "stdio" {
                attrs.push(("network.protocol.name", Attr::Str("stdio")));
            }
            if let Some(p) = &t.peer {
                let (host, port) = split_addr(p);
                attrs.push(("client.address", Attr::Str(host)));
                if let Some(port) = port {
                    attrs.push(("client.port", Attr::Int(port)));
                }
            }
        }
        let session;
        if mcp {
            attrs.push(("mcp.method.name", Attr::Str(&c.method)));
            // 2026-07-28 has no sessions: a stateless call has no `mcp.session.id`.
            if let Scope::Session(s) = &c.scope {
                session = s.to_string();
                attrs.push(("mcp.session.id", Attr::Str(&session)));
            }
            if let Some(v) = trace.and_then(|t| t.protocol_version.as_deref()) {
                attrs.push(("mcp.protocol.version", Attr::Str(v)));
            }
            attrs.extend(target_attrs(&c.method, c.target.as_deref()));
            // Opt-in (`--otlp-tool-content`): the texts as redacted for every observer.
            if let Some((args, result)) = tool {
                attrs.push(("gen_ai.tool.call.arguments", Attr::Str(args)));
                if let (Some(r), Outcome::Result) = (result, &c.outcome) {
                    attrs.push(("gen_ai.tool.call.result", Attr::Str(r)));
                }
            }
        }
        if crate::rpc::a2a::is_a2a_only(&c.method) {
            // A2A's attributes, beside the JSON-RPC ones (A2A is JSON-RPC).
            attrs.push(("a2a.method.name", Attr::Str(&c.method)));
            // The request's `A2A-Version`; absent means 0.3.
            let version = trace.and_then(|t| t.protocol_version.as_deref());
            attrs.push(("a2a.protocol.version", Attr::Str(version.unwrap_or("0.3"))));
            let task = c.task.as_deref();
            if let Some(id) = task.map(|t| &*t.id).or(c.target.as_deref()) {
                attrs.push(("a2a.task.id", Attr::Str(id)));
            }
            if let Some(s) = task.and_then(|t| t.status.as_deref()) {
                attrs.push(("a2a.task.state", Attr::Str(a2a_state(s))));
            }
            if let Some(ctx) = c.context.as_deref() {
                attrs.push(("gen_ai.conversation.id", Attr::Str(ctx)));
            }
        }
        let code_text;
        let mut status_message: Option<&str> = None;
        let error_type = super::semconv::error_type(c);
        if let Outcome::Error { code, message } = &c.outcome {
            code_text = code.to_string();
            if legacy {
                attrs.push(("rpc.jsonrpc.error_code", Attr::Int(*code)));
                attrs.push(("rpc.jsonrpc.error_message", Attr::Str(message)));
            }
            attrs.push(("rpc.response.status_code", Attr::Str(&code_text)));
            // The span's status description is the error's message (the conventions).
            status_message = Some(message);
        }
        if let Some(t) = &error_type {
            attrs.push(("error.type", Attr::Str(t)));
        }
        let label = error_type.as_ref().map(|_| c.outcome.label());
        let status = status_message.or(label.as_deref());
        let link = trace.and_then(|t| t.link.as_ref());
        let link_state = link.map(|l| l.trace_state().header()).unwrap_or_default();
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
            status,
            link: link.map(|l| {
                (
                    l.trace_id().to_bytes(),
                    l.span_id().to_bytes(),
                    link_state.as_str(),
                )
            }),
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
        // The leg is rpctap's call to the server: the same call, seen from the client side.
        let mut leg: Vec<(&'static str, Attr<'_>)> = attrs
            .iter()
            .filter(|(k, _)| !k.starts_with("client.") && !k.starts_with("network."))
            .copied()
            .collect();
        if let Some((host, port)) = &self.upstream {
            leg.push(("server.address", Attr::Str(host)));
            leg.push(("server.port", Attr::Int(i64::from(*port))));
        }
        wire::Span {
            remote_parent: false,
            link: None,
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

mod content;
mod durations;
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

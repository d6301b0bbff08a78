//! W3C trace context carried on calls: a call's remote parent (`traceparent` / `tracestate`, or
//! MCP's `params._meta.traceparent`), and with `--otlp-propagate` the ids rpctap sends upstream.
//! The inspector keeps it on each call (`CallEvent::trace`), the OTLP exporter (`otel`) turns it
//! into spans: both use this module, so the event model never depends on the exporter.

use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::trace::{
    IdGenerator, RandomIdGenerator, Sampler, SamplingDecision, ShouldSample,
};
use std::sync::Arc;

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
    /// The transport's context (the HTTP request's `traceparent`) when the call's own
    /// `params._meta` gave another parent: the span links to it (the MCP conventions: the
    /// ambient context is linked, the message's is the parent).
    pub link: Option<SpanContext>,
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
            link: None,
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
pub fn sampler(ratio: f64) -> Sampler {
    Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
}

pub fn sampled(sampler: &Sampler, parent: Option<&SpanContext>, trace: TraceId) -> bool {
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
    }
}

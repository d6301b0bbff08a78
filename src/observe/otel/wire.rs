//! OTLP's protobuf messages (opentelemetry-proto's `trace/v1`, `metrics/v1`, `common/v1`,
//! `resource/v1`),
//! the fields rpctap sends, written straight from a call into one buffer. Written here rather
//! than with `opentelemetry-otlp`'s exporter for cost: that exporter builds each span as the
//! SDK's `SpanData`, converts it into the generated structs (a `String` per attribute key and
//! value), groups spans by resource and scope, then encodes — which measured too costly at full
//! sampling (benches/RESULTS.md). The field numbers and types are opentelemetry-proto 1.x's; the
//! tests decode what is sent with the official `opentelemetry-proto` package
//! (tests/interop/otlp_receiver.py).

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
    Bool(bool),
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
        Attr::Bool(_) => 2,
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
        Attr::Bool(x) => uint(b, 2, u64::from(x)),
    }
}

/// One `HistogramDataPoint`.
pub struct Point<'a> {
    pub attrs: Vec<(&'static str, Attr<'a>)>,
    /// Nanoseconds since the epoch: the start of the cumulative count, and now.
    pub start: u64,
    pub time: u64,
    pub count: u64,
    pub sum: f64,
    /// Per bucket, not cumulative (one more than the bounds).
    pub counts: &'a [u64],
    pub min: f64,
    pub max: f64,
}

/// `AggregationTemporality.CUMULATIVE`.
const CUMULATIVE: u64 = 2;

/// Appends a histogram metric as a `ScopeMetrics.metrics` field (2): `Metric { name = 1;
/// description = 2; unit = 3; histogram = 9 { data_points = 1; aggregation_temporality = 2 } }`,
/// each point `HistogramDataPoint { start_time_unix_nano = 2; time_unix_nano = 3; count = 4;
/// sum = 5; bucket_counts = 6 (packed fixed64); explicit_bounds = 7 (packed double);
/// attributes = 9; min = 11; max = 12 }`.
pub fn histogram<'a>(
    out: &mut Vec<u8>,
    name: &str,
    description: &str,
    unit: &str,
    bounds: &[f64],
    points: impl Iterator<Item = Point<'a>>,
) {
    message(out, 2, |b| {
        bytes(b, 1, name.as_bytes());
        bytes(b, 2, description.as_bytes());
        bytes(b, 3, unit.as_bytes());
        message(b, 9, |b| {
            for p in points {
                message(b, 1, |b| {
                    fixed64(b, 2, p.start);
                    fixed64(b, 3, p.time);
                    fixed64(b, 4, p.count);
                    fixed64(b, 5, p.sum.to_bits());
                    message(b, 6, |b| {
                        for c in p.counts {
                            b.extend_from_slice(&c.to_le_bytes());
                        }
                    });
                    message(b, 7, |b| {
                        for x in bounds {
                            b.extend_from_slice(&x.to_bits().to_le_bytes());
                        }
                    });
                    for (k, v) in &p.attrs {
                        attribute(b, 9, k, *v);
                    }
                    if p.count > 0 {
                        fixed64(b, 11, p.min.to_bits());
                        fixed64(b, 12, p.max.to_bits());
                    }
                });
            }
            uint(b, 2, CUMULATIVE);
        });
    });
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
    /// A span this one links to (its trace and span id, its trace state).
    pub link: Option<([u8; 16], [u8; 8], &'a str)>,
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
        // `Link { trace_id = 1; span_id = 2; trace_state = 3; flags = 6 }`.
        if let Some((trace, span, state)) = self.link {
            message(b, 13, |b| {
                bytes(b, 1, &trace);
                bytes(b, 2, &span);
                if !state.is_empty() {
                    bytes(b, 3, state.as_bytes());
                }
                fixed32(b, 6, HAS_IS_REMOTE | IS_REMOTE);
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
    /// spans } } }` around `spans` (encoded by [`Span::encode`]) — and, the same field numbers,
    /// `ExportMetricsServiceRequest { resource_metrics = 1 { resource, scope_metrics = 2 {
    /// scope, metrics } } }` around metrics (encoded by [`histogram`]).
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
            Attr::Bool(true),
        ] {
            let mut ahead = Vec::new();
            attribute(&mut ahead, 9, "rpc.system", v);
            let mut nested = Vec::new();
            message(&mut nested, 9, |b| {
                bytes(b, 1, b"rpc.system");
                message(b, 2, |b| match v {
                    Attr::Str(s) => bytes(b, 1, s.as_bytes()),
                    Attr::Int(i) => uint(b, 3, i as u64),
                    Attr::Bool(x) => uint(b, 2, u64::from(x)),
                });
            });
            assert_eq!(ahead, nested);
        }
    }
}

//! The MCP conventions' duration histograms (`mcp.server.operation.duration`,
//! `mcp.client.operation.duration`) as the OTLP exporter keeps them: cumulative since the
//! exporter started, one series per attribute set (`semconv::operation`), encoded as an OTLP
//! `ScopeMetrics.metrics` list for each export. The series are bounded (the SDKs' default
//! cardinality limit): beyond it, calls count in one overflow series per histogram, marked
//! `otel.metric.overflow=true` as the metrics SDK specification has it.

use super::wire::{self, Attr};
use crate::events::CallEvent;
use crate::observe::semconv::{self, Instrument, Series, BUCKETS};
use std::collections::BTreeMap;

/// The most series kept (the OpenTelemetry SDKs' default cardinality limit).
pub const MAX_SERIES: usize = 2000;

/// One series' histogram.
#[derive(Clone, Debug)]
pub struct Hist {
    /// Per bucket (`BUCKETS`, then above the last bound), not cumulative: OTLP's form.
    pub counts: [u64; BUCKETS.len() + 1],
    pub count: u64,
    pub sum: f64,
    pub min: f64,
    pub max: f64,
}

impl Default for Hist {
    fn default() -> Self {
        Hist {
            counts: [0; BUCKETS.len() + 1],
            count: 0,
            sum: 0.0,
            min: f64::INFINITY,
            max: f64::NEG_INFINITY,
        }
    }
}

impl Hist {
    fn observe(&mut self, v: f64) {
        // A bucket holds the values up to and including its bound.
        let i = BUCKETS.partition_point(|b| *b < v);
        self.counts[i] += 1;
        self.count += 1;
        self.sum += v;
        self.min = self.min.min(v);
        self.max = self.max.max(v);
    }
}

/// The histograms, since `start` (ns since the epoch).
#[derive(Debug)]
pub struct Durations {
    start: u64,
    series: BTreeMap<(Instrument, Series), Hist>,
    overflow: BTreeMap<Instrument, Hist>,
}

impl Durations {
    pub fn new(start: u64) -> Self {
        Durations {
            start,
            series: BTreeMap::new(),
            overflow: BTreeMap::new(),
        }
    }

    /// Counts a finished call, if it is an MCP operation with a duration.
    pub fn record(&mut self, c: &CallEvent) {
        let Some((instrument, series, secs)) = semconv::operation(c) else {
            return;
        };
        let key = (instrument, series);
        if let Some(h) = self.series.get_mut(&key) {
            h.observe(secs);
        } else if self.series.len() < MAX_SERIES {
            self.series.entry(key).or_default().observe(secs);
        } else {
            self.overflow.entry(instrument).or_default().observe(secs);
        }
    }

    pub fn is_empty(&self) -> bool {
        self.series.is_empty() && self.overflow.is_empty()
    }

    /// The histograms as `ScopeMetrics.metrics` fields (2), each data point as of `now`.
    pub fn encode(&self, now: u64) -> Vec<u8> {
        let mut out = Vec::new();
        for instrument in Instrument::ALL {
            let points: Vec<(Option<&Series>, &Hist)> = self
                .series
                .iter()
                .filter(|((i, _), _)| *i == instrument)
                .map(|((_, s), h)| (Some(s), h))
                .chain(self.overflow.get(&instrument).map(|h| (None, h)))
                .collect();
            if points.is_empty() {
                continue;
            }
            wire::histogram(
                &mut out,
                instrument.name(),
                instrument.description(),
                "s",
                &BUCKETS,
                points.iter().map(|(s, h)| {
                    let attrs: Vec<(&'static str, Attr<'_>)> = match s {
                        Some(s) => attributes(s),
                        None => vec![("otel.metric.overflow", Attr::Bool(true))],
                    };
                    wire::Point {
                        attrs,
                        start: self.start,
                        time: now,
                        count: h.count,
                        sum: h.sum,
                        counts: &h.counts,
                        min: h.min,
                        max: h.max,
                    }
                }),
            );
        }
        out
    }
}

/// A series' attributes, as the conventions name them.
fn attributes(s: &Series) -> Vec<(&'static str, Attr<'_>)> {
    let mut a = vec![("mcp.method.name", Attr::Str(&s.method))];
    if let Some(t) = &s.tool {
        a.push(("gen_ai.tool.name", Attr::Str(t)));
        a.push(("gen_ai.operation.name", Attr::Str("execute_tool")));
    }
    if let Some(p) = &s.prompt {
        a.push(("gen_ai.prompt.name", Attr::Str(p)));
    }
    if let Some(e) = &s.error_type {
        a.push(("error.type", Attr::Str(e)));
    }
    if let Some(c) = &s.status_code {
        a.push(("rpc.response.status_code", Attr::Str(c)));
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_fall_in_the_bucket_of_their_bound() {
        let mut h = Hist::default();
        for v in [0.005, 0.01, 0.011, 400.0] {
            h.observe(v);
        }
        assert_eq!(h.counts[0], 2, "up to and including 0.01");
        assert_eq!(h.counts[1], 1);
        assert_eq!(h.counts[BUCKETS.len()], 1, "above the last bound");
        assert_eq!((h.count, h.min, h.max), (4, 0.005, 400.0));
    }
}

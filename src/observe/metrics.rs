//! Prometheus metrics (`GET /metrics` on the admin listener), kept with `prometheus-client`.
//!
//! Counters of calls, anomalies, refusals and HTTP statuses are updated from the bus, as a
//! [`Sink`] on the publishing thread (a few atomic adds and a read-locked map lookup per event;
//! nothing queued). Gauges and the counters that other parts already keep (pending calls,
//! sessions, evictions, recorder lines, feed drops, connections, the process's RSS, CPU and
//! file descriptors) are read at scrape time by [`Metrics::refresh`].
//!
//! Label values are bounded: the methods and the tool/prompt/resource names seen beyond
//! `max_label_values` (each) are counted under `other`, so a client sending random names
//! cannot grow the exposition without bound.

use crate::events::{Event, HttpEvent, Interest, Outcome, Sink};
use crate::locks::Locked as _;
use dashmap::DashSet;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::Registry;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// The events the metrics read.
pub const INTEREST: Interest = Interest::CALL
    .and(Interest::ANOMALY)
    .and(Interest::REFUSAL)
    .and(Interest::FAULT)
    .and(Interest::HTTP_STATUS);

/// The default cap on distinct values of the `method` and `target` labels (each).
pub const MAX_LABEL_VALUES: usize = 500;

/// Call durations' buckets, in seconds: 100 µs to 60 s.
const DURATION_BUCKETS: [f64; 18] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0, 60.0,
];

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    method: Arc<str>,
    target: Option<Arc<str>>,
    outcome: &'static str,
}

/// The MCP conventions' attributes of a duration series (`semconv::Series`), as Prometheus
/// labels (the OpenTelemetry-to-Prometheus names: dots made underscores); an attribute that
/// does not apply is no label (the derive would write it empty).
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct McpLabels {
    mcp_method_name: Arc<str>,
    gen_ai_tool_name: Option<Arc<str>>,
    gen_ai_operation_name: Option<&'static str>,
    gen_ai_prompt_name: Option<Arc<str>>,
    error_type: Option<Arc<str>>,
    rpc_response_status_code: Option<Arc<str>>,
}

impl EncodeLabelSet for McpLabels {
    fn encode(
        &self,
        encoder: &mut prometheus_client::encoding::LabelSetEncoder,
    ) -> Result<(), std::fmt::Error> {
        use prometheus_client::encoding::EncodeLabel;
        let labels = [
            ("mcp_method_name", Some(&*self.mcp_method_name)),
            ("gen_ai_tool_name", self.gen_ai_tool_name.as_deref()),
            ("gen_ai_operation_name", self.gen_ai_operation_name),
            ("gen_ai_prompt_name", self.gen_ai_prompt_name.as_deref()),
            ("error_type", self.error_type.as_deref()),
            (
                "rpc_response_status_code",
                self.rpc_response_status_code.as_deref(),
            ),
        ];
        for (k, v) in labels {
            if let Some(v) = v {
                (k, v).encode(encoder.encode_label())?;
            }
        }
        Ok(())
    }
}

type McpFamily = Family<McpLabels, Histogram, fn() -> Histogram>;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct MethodLabel {
    method: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CodeLabel {
    code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RuleLabel {
    rule: Arc<str>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FaultLabel {
    rule: Arc<str>,
    action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StatusLabel {
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SideLabel {
    side: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WhatLabel {
    what: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VersionLabel {
    version: &'static str,
}

/// Connections open now, per side (kept by the proxy; read at scrape time).
#[derive(Debug, Default)]
pub struct Connections {
    pub client: AtomicI64,
    pub upstream: AtomicI64,
}

/// A connection counted while this lives.
#[derive(Debug)]
pub struct Counted(&'static str, Arc<Connections>);

impl Counted {
    pub fn client(c: &Arc<Connections>) -> Self {
        c.client.fetch_add(1, Ordering::Relaxed);
        Counted("client", c.clone())
    }
    pub fn upstream(c: &Arc<Connections>) -> Self {
        c.upstream.fetch_add(1, Ordering::Relaxed);
        Counted("upstream", c.clone())
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        let g = if self.0 == "client" {
            &self.1.client
        } else {
            &self.1.upstream
        };
        g.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What the scrape reads from the running parts.
#[derive(Clone, Default)]
pub struct Sources {
    pub inspector: Option<crate::inspect::Inspector>,
    pub feed: Option<crate::observe::feed::Feed>,
    pub recorder: Option<Arc<crate::record::LineBuffer>>,
    pub connections: Option<Arc<Connections>>,
    pub listener: Option<Arc<crate::server::ListenerStats>>,
}

/// The values last turned into counter increments (sources keep totals; counters only grow).
#[derive(Default)]
struct Seen {
    recorder_lines: u64,
    recorder_lost: u64,
    feed_dropped: u64,
    store_errors: u64,
    otel_dropped: u64,
    otel_exported: u64,
    evicted_calls: u64,
    evicted_sessions: u64,
    evicted_schemas: u64,
    conns_refused: u64,
    header_timeouts: u64,
    idle_closed: u64,
    cpu_ticks: u64,
}

/// A set of label values that stops growing at its cap.
#[derive(Debug)]
struct Bounded {
    seen: DashSet<Arc<str>, foldhash::fast::RandomState>,
    cap: usize,
    other: Arc<str>,
}

impl Bounded {
    fn new(cap: usize) -> Self {
        Bounded {
            seen: DashSet::default(),
            cap,
            other: "other".into(),
        }
    }
    fn get(&self, v: &Arc<str>) -> Arc<str> {
        if self.seen.contains(v) {
            return v.clone();
        }
        if self.seen.len() < self.cap {
            self.seen.insert(v.clone());
            return v.clone();
        }
        self.other.clone()
    }
}

/// Handles already made, by label values, behind a fast hash: prometheus-client's `Family`
/// hashes its label sets with SipHash under a lock on every lookup (most of the metrics' cost per
/// call); a counter or histogram handle is an `Arc`, so it is looked up there once
/// per label set and kept here.
type Cache<K, V> = dashmap::DashMap<K, V, foldhash::fast::RandomState>;

/// A call counter's label values: method, target, outcome.
type CallKey = (Arc<str>, Option<Arc<str>>, &'static str);

/// The metrics: a registry and the handles the sink and the scrape update.
pub struct Metrics {
    call_handles: Cache<CallKey, Counter>,
    mcp_handles: Cache<(crate::observe::semconv::Instrument, McpLabels), Histogram>,
    /// The MCP conventions' histograms, under their own names (no `rpctap_` prefix): what
    /// the OTLP exporter sends as `mcp.server.operation.duration` and
    /// `mcp.client.operation.duration`, for a Prometheus that scrapes rpctap directly.
    mcp_registry: Registry,
    mcp_server: McpFamily,
    mcp_client: McpFamily,
    /// Error codes seen as label values (a server's codes are any integers).
    codes: Bounded,
    duration_handles: Cache<Arc<str>, Histogram>,
    status_handles: Cache<u16, Counter>,
    registry: Registry,
    calls: Family<CallLabels, Counter>,
    durations: Family<MethodLabel, Histogram, fn() -> Histogram>,
    anomalies: Family<CodeLabel, Counter>,
    refusals: Family<RuleLabel, Counter>,
    faults: Family<FaultLabel, Counter>,
    http: Family<StatusLabel, Counter>,
    inflight: Gauge,
    pending: Gauge,
    sessions: Gauge,
    connections: Family<SideLabel, Gauge>,
    conns_closed: Family<ReasonLabel, Counter>,
    parked: Gauge,
    streaming: Gauge,
    recorder_lines: Counter,
    recorder_lost: Counter,
    feed_dropped: Counter,
    store_errors: Counter,
    otel_dropped: Counter,
    otel_exported: Counter,
    evictions: Family<WhatLabel, Counter>,
    rss: Gauge,
    fds: Gauge,
    cpu: Counter<f64, AtomicU64>,
    start_time: Gauge,
    methods: Bounded,
    targets: Bounded,
    sources: Mutex<Sources>,
    seen: Mutex<Seen>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

fn histogram() -> Histogram {
    Histogram::new(DURATION_BUCKETS)
}

fn mcp_histogram() -> Histogram {
    Histogram::new(crate::observe::semconv::BUCKETS)
}

impl Metrics {
    pub fn new(max_label_values: usize) -> Arc<Self> {
        let mut registry = Registry::with_prefix("rpctap");
        let calls = Family::<CallLabels, Counter>::default();
        registry.register(
            "calls",
            "JSON-RPC calls ended, by method, target (tool, prompt or resource) and outcome",
            calls.clone(),
        );
        let durations = Family::<MethodLabel, Histogram, fn() -> Histogram>::new_with_constructor(
            histogram as fn() -> Histogram,
        );
        registry.register(
            "call_duration_seconds",
            "Time from a call to its reply, by method",
            durations.clone(),
        );
        let anomalies = Family::<CodeLabel, Counter>::default();
        registry.register("anomalies", "Anomalies flagged, by code", anomalies.clone());
        let refusals = Family::<RuleLabel, Counter>::default();
        registry.register(
            "refusals",
            "Calls and notifications refused by a rate-limit rule, by rule",
            refusals.clone(),
        );
        let faults = Family::<FaultLabel, Counter>::default();
        registry.register(
            "faults_injected",
            "Faults injected by a [[fault]] rule, by rule and action",
            faults.clone(),
        );
        let http = Family::<StatusLabel, Counter>::default();
        registry.register(
            "http_requests",
            "HTTP exchanges answered, by status (rpctap's own answers included)",
            http.clone(),
        );
        let inflight = Gauge::default();
        registry.register(
            "inflight_calls",
            "Client-to-server calls forwarded and waiting for their reply",
            inflight.clone(),
        );
        let pending = Gauge::default();
        registry.register(
            "pending_calls",
            "Calls waiting for their reply, both directions (the correlator's size)",
            pending.clone(),
        );
        let sessions = Gauge::default();
        registry.register("sessions", "MCP sessions tracked", sessions.clone());
        let connections = Family::<SideLabel, Gauge>::default();
        registry.register(
            "connections",
            "Open connections, by side (client, upstream)",
            connections.clone(),
        );
        let conns_closed = Family::<ReasonLabel, Counter>::default();
        registry.register(
            "connections_closed",
            "Client connections rpctap closed, by reason (refused: over --max-connections; header_timeout; idle_timeout)",
            conns_closed.clone(),
        );
        let parked = Gauge::default();
        registry.register(
            "connections_parked",
            "Idle HTTP/1 client connections parked (only their socket kept until their next request)",
            parked.clone(),
        );
        let streaming = Gauge::default();
        registry.register(
            "connections_streaming",
            "HTTP/1 client connections whose long stream (an SSE reply) rpctap writes without hyper's connection",
            streaming.clone(),
        );
        let recorder_lines = Counter::default();
        registry.register(
            "recorder_lines",
            "Lines handed to the recording",
            recorder_lines.clone(),
        );
        let recorder_lost = Counter::default();
        registry.register(
            "recorder_lost",
            "Events the recording lost because its writer fell behind or its file stopped taking writes (each gap is marked in the file)",
            recorder_lost.clone(),
        );
        let store_errors = Counter::default();
        registry.register(
            "limit_store_errors",
            "Calls for which a shared rate-limit store (Redis) did not answer in time: their rules fell back to on_store_error",
            store_errors.clone(),
        );
        let otel_dropped = Counter::default();
        registry.register(
            "otel_dropped",
            "Trace spans not exported: dropped at the exporter's queue or in a failed OTLP export",
            otel_dropped.clone(),
        );
        let otel_exported = Counter::default();
        registry.register(
            "otel_exported",
            "Trace spans exported over OTLP",
            otel_exported.clone(),
        );
        let feed_dropped = Counter::default();
        registry.register(
            "feed_dropped",
            "Events the live feed dropped for slow clients",
            feed_dropped.clone(),
        );
        let evictions = Family::<WhatLabel, Counter>::default();
        registry.register(
            "evictions",
            "Bounded state that had to let something go (pending calls, sessions, compiled tool schemas)",
            evictions.clone(),
        );
        let info = Info::new(VersionLabel {
            version: env!("CARGO_PKG_VERSION"),
        });
        registry.register("build", "rpctap's version", info);
        let rss = Gauge::default();
        let fds = Gauge::default();
        let cpu = Counter::<f64, AtomicU64>::default();
        let start_time = Gauge::default();
        let mut mcp_registry = Registry::default();
        let mcp_server = McpFamily::new_with_constructor(mcp_histogram as fn() -> Histogram);
        let mcp_client = McpFamily::new_with_constructor(mcp_histogram as fn() -> Histogram);
        for (i, family) in [
            (
                crate::observe::semconv::Instrument::ServerOperation,
                &mcp_server,
            ),
            (
                crate::observe::semconv::Instrument::ClientOperation,
                &mcp_client,
            ),
        ] {
            let name = i.name().trim_end_matches(".duration").replace('.', "_");
            mcp_registry.register_with_unit(
                format!("{name}_duration"),
                // The exposition ends the help with a period of its own.
                i.description().trim_end_matches('.'),
                prometheus_client::registry::Unit::Seconds,
                family.clone(),
            );
        }
        let m = Metrics {
            call_handles: Cache::default(),
            mcp_handles: Cache::default(),
            mcp_registry,
            mcp_server,
            mcp_client,
            codes: Bounded::new(max_label_values),
            duration_handles: Cache::default(),
            status_handles: Cache::default(),
            registry,
            calls,
            durations,
            anomalies,
            refusals,
            faults,
            http,
            inflight,
            pending,
            sessions,
            connections,
            conns_closed,
            parked,
            streaming,
            recorder_lines,
            recorder_lost,
            feed_dropped,
            store_errors,
            otel_dropped,
            otel_exported,
            evictions,
            rss,
            fds,
            cpu,
            start_time,
            methods: Bounded::new(max_label_values),
            targets: Bounded::new(max_label_values),
            sources: Mutex::new(Sources::default()),
            seen: Mutex::new(Seen::default()),
        };
        Arc::new(m)
    }

    /// Sets what the scrape reads.
    pub fn set_sources(&self, f: impl FnOnce(&mut Sources)) {
        f(&mut self.sources.locked());
    }

    /// The exposition in the Prometheus text format (after a refresh).
    pub fn render(&self) -> String {
        self.refresh();
        let mut out = String::with_capacity(8192);
        if prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry).is_err()
            || prometheus_client::encoding::prometheus_text::encode(&mut out, &self.mcp_registry)
                .is_err()
        {
            out.clear();
        }
        process_text(&mut out, &self.rss, &self.fds, &self.cpu, &self.start_time);
        out
    }

    /// Reads the gauges and the totals other parts keep.
    pub fn refresh(&self) {
        let src = self.sources.locked();
        let mut seen = self.seen.locked();
        let grow = |c: &Counter, last: &mut u64, now: u64| {
            if now > *last {
                c.inc_by(now - *last);
                *last = now;
            }
        };
        if let Some(i) = &src.inspector {
            let s = i.stats();
            self.pending.set(s.pending as i64);
            self.inflight.set(s.pending_c2s as i64);
            self.sessions.set(s.sessions as i64);
            grow(
                &self.evictions.get_or_create(&WhatLabel { what: "call" }),
                &mut seen.evicted_calls,
                s.evicted_calls,
            );
            grow(
                &self.evictions.get_or_create(&WhatLabel { what: "session" }),
                &mut seen.evicted_sessions,
                s.evicted_sessions,
            );
            grow(
                &self.evictions.get_or_create(&WhatLabel { what: "schema" }),
                &mut seen.evicted_schemas,
                s.schemas_evicted,
            );
        }
        grow(
            &self.store_errors,
            &mut seen.store_errors,
            crate::limit::store::STORE_ERRORS.load(Ordering::Relaxed),
        );
        grow(
            &self.otel_dropped,
            &mut seen.otel_dropped,
            crate::observe::otel::DROPPED.load(Ordering::Relaxed),
        );
        grow(
            &self.otel_exported,
            &mut seen.otel_exported,
            crate::observe::otel::EXPORTED.load(Ordering::Relaxed),
        );
        if let Some(f) = &src.feed {
            grow(&self.feed_dropped, &mut seen.feed_dropped, f.dropped());
        }
        if let Some(r) = &src.recorder {
            let (lines, lost) = r.counts();
            grow(&self.recorder_lines, &mut seen.recorder_lines, lines);
            grow(&self.recorder_lost, &mut seen.recorder_lost, lost);
        }
        if let Some(c) = &src.connections {
            for (side, g) in [("client", &c.client), ("upstream", &c.upstream)] {
                self.connections
                    .get_or_create(&SideLabel { side })
                    .set(g.load(Ordering::Relaxed).max(0));
            }
        }
        if let Some(l) = &src.listener {
            self.parked.set(l.parked.load(Ordering::Relaxed) as i64);
            self.streaming
                .set(l.streaming.load(Ordering::Relaxed) as i64);
            let seen = &mut *seen;
            for (reason, last, now) in [
                ("refused", &mut seen.conns_refused, &l.refused),
                (
                    "header_timeout",
                    &mut seen.header_timeouts,
                    &l.header_timeouts,
                ),
                ("idle_timeout", &mut seen.idle_closed, &l.idle_closed),
            ] {
                let c = self.conns_closed.get_or_create(&ReasonLabel { reason });
                grow(&c, last, now.load(Ordering::Relaxed));
            }
        }
        if let Some(p) = process_stats() {
            self.rss.set(p.rss_bytes as i64);
            self.fds.set(p.fds as i64);
            self.start_time.set(p.start_time_s as i64);
            if p.cpu_ticks > seen.cpu_ticks {
                self.cpu
                    .inc_by((p.cpu_ticks - seen.cpu_ticks) as f64 / p.ticks_per_s as f64);
                seen.cpu_ticks = p.cpu_ticks;
            }
        }
    }

    fn on_call(&self, c: &crate::events::CallEvent) {
        let method = self.methods.get(&c.method);
        let target = c.target.as_ref().and_then(|t| {
            matches!(&*c.method, "tools/call" | "prompts/get" | "resources/read")
                .then(|| self.targets.get(t))
        });
        let outcome = match c.outcome {
            Outcome::Result => "result",
            Outcome::InputRequired => "input_required",
            Outcome::Error { .. } => "error",
            Outcome::Refused { .. } => "refused",
            Outcome::Rejected { .. } => "rejected",
            Outcome::Missing { .. } => "missing",
            Outcome::Cancelled { .. } => "cancelled",
            Outcome::Abandoned { .. } => "abandoned",
        };
        let key = (method, target, outcome);
        match self.call_handles.get(&key) {
            Some(c) => {
                c.inc();
            }
            None => {
                let c = self.calls.get_or_create_owned(&CallLabels {
                    method: key.0.clone(),
                    target: key.1.clone(),
                    outcome,
                });
                c.inc();
                self.call_handles.insert(key.clone(), c);
            }
        }
        self.on_mcp_call(c);
        if let (Some(us), Outcome::Result | Outcome::Error { .. }) = (c.latency_us, &c.outcome) {
            let secs = us as f64 / 1e6;
            match self.duration_handles.get(&key.0) {
                Some(h) => h.observe(secs),
                None => {
                    let h = self.durations.get_or_create_owned(&MethodLabel {
                        method: key.0.clone(),
                    });
                    h.observe(secs);
                    self.duration_handles.insert(key.0, h);
                }
            }
        }
    }
}

impl Metrics {
    /// An MCP call's duration in the conventions' histogram (`semconv::operation`), its label
    /// values bounded like the other metrics'.
    fn on_mcp_call(&self, c: &crate::events::CallEvent) {
        use crate::observe::semconv::{operation, Instrument};
        let Some((instrument, s, secs)) = operation(c) else {
            return;
        };
        let labels = McpLabels {
            mcp_method_name: self.methods.get(&s.method),
            gen_ai_operation_name: s.tool.is_some().then_some("execute_tool"),
            gen_ai_tool_name: s.tool.map(|t| self.targets.get(&t)),
            gen_ai_prompt_name: s.prompt.map(|p| self.targets.get(&p)),
            error_type: s.error_type.map(|e| self.codes.get(&e)),
            rpc_response_status_code: s.status_code.map(|e| self.codes.get(&e)),
        };
        let key = (instrument, labels);
        if let Some(h) = self.mcp_handles.get(&key) {
            h.observe(secs);
            return;
        }
        let family = match instrument {
            Instrument::ServerOperation => &self.mcp_server,
            Instrument::ClientOperation => &self.mcp_client,
        };
        let h = family.get_or_create_owned(&key.1);
        h.observe(secs);
        self.mcp_handles.insert(key, h);
    }
}

impl Sink for Metrics {
    fn accept(&self, ev: &Event) {
        match ev {
            Event::Call(c) => self.on_call(c),
            Event::Anomaly(a) => {
                self.anomalies
                    .get_or_create(&CodeLabel { code: a.code })
                    .inc();
            }
            Event::Refusal(r) if !r.shadow => {
                self.refusals
                    .get_or_create(&RuleLabel {
                        rule: r.rule.clone(),
                    })
                    .inc();
            }
            Event::Fault(f) => {
                self.faults
                    .get_or_create(&FaultLabel {
                        rule: f.injected.clone(),
                        action: f.action,
                    })
                    .inc();
            }
            Event::Http(HttpEvent::Response { status, .. }) => {
                match self.status_handles.get(status) {
                    Some(c) => {
                        c.inc();
                    }
                    None => {
                        let c = self
                            .http
                            .get_or_create_owned(&StatusLabel { status: *status });
                        c.inc();
                        self.status_handles.insert(*status, c);
                    }
                }
            }
            _ => {}
        }
    }
}

/// The process's own figures, from `/proc` (Linux). No maintained crate fits: the Prometheus
/// crates that offer process metrics belong to the other client library (`prometheus`), and
/// `procfs` would be a large dependency for four numbers.
struct ProcessStats {
    rss_bytes: u64,
    fds: u64,
    cpu_ticks: u64,
    ticks_per_s: u64,
    start_time_s: u64,
}

fn process_stats() -> Option<ProcessStats> {
    #[cfg(target_os = "linux")]
    {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        // Fields after the command name (which may hold spaces) in its parentheses.
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split(' ').collect();
        // Field numbers from proc(5), minus the first two.
        let utime: u64 = f.get(11)?.parse().ok()?;
        let stime: u64 = f.get(12)?.parse().ok()?;
        let start_ticks: u64 = f.get(19)?.parse().ok()?;
        let rss_pages: u64 = f.get(21)?.parse().ok()?;
        let ticks_per_s = 100; // USER_HZ on Linux
        let page = 4096;
        let boot: u64 = std::fs::read_to_string("/proc/stat")
            .ok()?
            .lines()
            .find_map(|l| l.strip_prefix("btime "))?
            .trim()
            .parse()
            .ok()?;
        let fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
        Some(ProcessStats {
            rss_bytes: rss_pages * page,
            fds,
            cpu_ticks: utime + stime,
            ticks_per_s,
            start_time_s: boot + start_ticks / ticks_per_s,
        })
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// The standard `process_*` metrics (the names other exporters use), appended to the exposition.
fn process_text(
    out: &mut String,
    rss: &Gauge,
    fds: &Gauge,
    cpu: &Counter<f64, AtomicU64>,
    start: &Gauge,
) {
    use std::fmt::Write;
    let _ = write!(
        out,
        "# HELP process_resident_memory_bytes Resident memory size in bytes.\n\
         # TYPE process_resident_memory_bytes gauge\n\
         process_resident_memory_bytes {}\n\
         # HELP process_open_fds Number of open file descriptors.\n\
         # TYPE process_open_fds gauge\n\
         process_open_fds {}\n\
         # HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n\
         # TYPE process_cpu_seconds_total counter\n\
         process_cpu_seconds_total {}\n\
         # HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n\
         # TYPE process_start_time_seconds gauge\n\
         process_start_time_seconds {}\n",
        rss.get(),
        fds.get(),
        cpu.get(),
        start.get()
    );
}

//! What watches the traffic without acting on it: the observers the chain (`app::observers`)
//! puts on the bus — the headless log, the metrics, the live feed, the OpenTelemetry exporter
//! (the conventions' reading of a call, shared by the last two, in `semconv`).
//! The admin listener that serves the metrics and the feed (`crate::admin`) stands above them,
//! beside the proxy whose upstream it probes, and the feed's client (`crate::attach`) above it;
//! the recorder (`record`) and the dashboard's state (`view`) observe too, and have their own
//! places.

pub mod feed;
pub mod logsink;
pub mod metrics;
pub mod otel;
pub mod semconv;

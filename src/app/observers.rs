//! The observer chain of every subcommand that carries traffic (`proxy`, `demo`, `stdio`): built
//! once from the resolved options, in three steps each subcommand takes the same way —
//!
//! 1. [`Observers::attach`], before the inspector exists: each observer subscribes to the bus
//!    (or is a sink on it), and what can fail at start fails here, before any traffic — the
//!    admin listener binds, the recording opens;
//! 2. [`Observers::start`], once the inspector exists: the metrics learn their sources, the
//!    feed, the log and the trace exporter start reading;
//! 3. [`Observers::finish`], after the last exchange: each observer ends in one order — the
//!    recorder first (lossless: flushed whole, its outcome said), then the trace exporter (its
//!    last batch), the headless log (what is still queued), and the feed last (its clients get
//!    the final events before the admin listener closes).
//!
//! One failing observer never stops the others: a sink that panics is dropped by the bus, a task
//! that panics is reported here when it is finished.

use super::{AppError, Ops};
use crate::cli::LogFormat;
use crate::events::{BusBuilder, Interest, Subscription};
use std::io::Write;
use std::sync::Arc;
use std::time::Duration;

/// What the chain is made of, from the subcommand's resolved options.
pub struct Chain {
    pub log: LogFormat,
    /// Where log lines go: stdout for the proxy; stderr or a file for `stdio`, whose stdout is
    /// the client's.
    pub log_out: Box<dyn Write + Send>,
    pub record: Option<crate::record::Options>,
    /// The recording's header: what the run is (its listen address and upstream, or command).
    pub record_meta: serde_json::Value,
    pub admin: Option<crate::admin::AdminConfig>,
    /// The feed's header (mode, listen/upstream or command and pid).
    pub feed_header: serde_json::Value,
    pub otel: Option<crate::otel::OtelConfig>,
    /// The upstream's host and port for spans (`None` for a stdio server).
    pub otel_upstream: Option<(String, u16)>,
}

/// The trace exporter waiting to start: its subscription, settings and the upstream's address.
type Exporter = (Subscription, crate::otel::OtelConfig, Option<(String, u16)>);

/// The headless log waiting to start, and where its lines go.
enum Log {
    Json(Subscription, Box<dyn Write + Send>),
    Text(Arc<crate::logsink::TextLines>, Box<dyn Write + Send>),
}

/// The chain, attached to a bus.
pub struct Observers {
    /// The admin side (metrics, feed, listener), when `--admin` is on.
    pub ops: Option<Ops>,
    log: Option<Log>,
    log_task: Option<tokio::task::JoinHandle<()>>,
    record_lines: Option<Arc<crate::record::LineBuffer>>,
    recorder: Option<crate::record::Finished>,
    /// Tells the recording's writer to flush and stop.
    record_stop: tokio::sync::watch::Sender<bool>,
    otel: Option<Exporter>,
    otel_task: Option<tokio::task::JoinHandle<()>>,
}

impl Observers {
    /// Puts every observer of `chain` on `bus`; binds the admin listener and opens the
    /// recording (their errors come out here, before anything is served).
    pub async fn attach(chain: Chain, bus: &mut BusBuilder) -> Result<Observers, AppError> {
        let log = match chain.log {
            LogFormat::Off => None,
            // Every event as JSON, through a queue.
            LogFormat::Json => Some(Log::Json(bus.subscribe("log", 65_536), chain.log_out)),
            // Finished calls, notifications, anomalies, refusals, notices: lines written by
            // the publishing threads.
            LogFormat::Text => {
                let lines = crate::logsink::TextLines::new(crate::logsink::TEXT_BYTES);
                bus.sink(crate::logsink::TEXT_INTEREST, lines.clone());
                Some(Log::Text(lines, chain.log_out))
            }
        };
        let ops = match &chain.admin {
            Some(a) => {
                let recording = chain.record.as_ref().map(|r| r.path.clone());
                Some(Ops::start(a, bus, chain.feed_header, recording).await?)
            }
            None => None,
        };
        let otel = chain.otel.map(|o| {
            let sub = bus.subscribe_to("otel", o.queue, Interest::CALL);
            (sub, o, chain.otel_upstream)
        });
        let (record_stop, stop_rx) = tokio::sync::watch::channel(false);
        let (record_lines, recorder) = match chain.record {
            Some(opts) => {
                let lines = crate::record::LineBuffer::new(crate::record::BUFFER_BYTES);
                bus.sink(Interest::ALL, lines.clone());
                let r = crate::record::start(opts, chain.record_meta, lines.clone(), stop_rx)?;
                (Some(lines), Some(r))
            }
            None => (None, None),
        };
        Ok(Observers {
            ops,
            log,
            log_task: None,
            record_lines,
            recorder,
            record_stop,
            otel,
            otel_task: None,
        })
    }

    /// Starts the observers that read the bus, once the inspector exists; `sources` adds what
    /// the metrics read at scrape time beside the recorder and the feed.
    pub fn start(&mut self, sources: impl FnOnce(&mut crate::metrics::Sources)) {
        if let Some(o) = self.ops.as_mut() {
            let (feed, lines) = (o.feed.clone(), self.record_lines.clone());
            o.metrics.set_sources(|s| {
                s.feed = Some(feed);
                s.recorder = lines;
                sources(s);
            });
            o.run_feed();
        }
        self.log_task = self.log.take().map(|log| match log {
            Log::Json(sub, out) => tokio::spawn(crate::logsink::run_json(sub, out)),
            Log::Text(lines, out) => tokio::spawn(crate::logsink::run_text(lines, out)),
        });
        if let Some((sub, o, up)) = self.otel.take() {
            self.otel_task = Some(crate::otel::spawn(sub, o, up));
        }
    }

    /// Ends every observer, in the chain's order (see the module's comment). Call it after
    /// the inspector and every exchange are gone: the tasks end when the bus closes.
    pub async fn finish(self) {
        let _ = self.record_stop.send(true);
        if let Some(r) = self.recorder {
            match r.await {
                Ok(Ok(stats)) if stats.lost > 0 => tracing::warn!(
                    events = stats.events,
                    lost = stats.lost,
                    gaps = stats.gaps,
                    files = stats.files,
                    "recording closed; some events were not recorded"
                ),
                Ok(Ok(stats)) => tracing::info!(
                    events = stats.events,
                    gaps = stats.gaps,
                    files = stats.files,
                    "recording closed"
                ),
                Ok(Err(e)) => {
                    tracing::error!(error = %e, "recording failed");
                    eprintln!("rpctap: recording failed: {e}");
                }
                Err(e) => {
                    tracing::error!(error = %e, "recorder thread failed");
                    eprintln!("rpctap: recorder thread failed: {e}");
                }
            }
        }
        // The last spans are exported when the bus closes.
        if let Some(t) = self.otel_task {
            ended(
                "trace exporter",
                tokio::time::timeout(Duration::from_secs(5), t).await,
            );
        }
        // The log ends when the bus (held by the inspector) is gone; a connection that
        // outlived the grace period is not waited for.
        if let Some(t) = self.log_task {
            ended(
                "log",
                tokio::time::timeout(Duration::from_millis(500), t).await,
            );
        }
        // A feed client gets the last events before the listener closes.
        if self.ops.is_some() {
            tokio::time::sleep(crate::feed::DRAIN * 2).await;
        }
        drop(self.ops);
    }
}

/// Says how an observer's task ended, when it did not end well.
fn ended(what: &str, r: Result<Result<(), tokio::task::JoinError>, tokio::time::error::Elapsed>) {
    match r {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_panic() => tracing::error!(observer = what, "an observer panicked"),
        Ok(Err(_)) => {}
        Err(_) => tracing::debug!(observer = what, "still running at exit; left"),
    }
}

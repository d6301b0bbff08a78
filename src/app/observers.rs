//! The observer chain of every subcommand that carries traffic (`proxy`, `demo`, `stdio`,
//! `serve`): a list of [`Observer`]s built once from the resolved options ([`Chain`]), in three
//! steps each subcommand takes the same way —
//!
//! 1. [`Observers::attach`], before the inspector exists: each observer the options ask for is
//!    made and put on the bus (a subscription or a sink), and what can fail at start fails here,
//!    before any traffic — the admin listener binds, the recording opens, the hub's registration
//!    is written once the feed it names is listening;
//! 2. [`Observers::start`], once the inspector exists: each observer offers what the others read
//!    (the recorder its buffer, the feed itself), then each starts — the metrics learn their
//!    sources, the feed, the log and the trace exporter start reading;
//! 3. [`Observers::finish`], after the last exchange: each observer ends in the list's order —
//!    the recorder first (lossless: flushed whole, its outcome said), then the trace exporter
//!    (its last batch), the headless log (what is still queued), the admin side (its feed's
//!    clients get the final events before the listener closes), and the hub's registration last.
//!
//! The dashboard's subscription is made here too, from the same options, and handed to the
//! dashboard's loop ([`Observers::take_dashboard`]), which the subcommand runs.
//!
//! One failing observer never stops the others: a sink that panics is dropped by the bus, a task
//! that panics is reported here when it is finished.

use super::hub::Plan;
use super::AppError;
use crate::cli::LogFormat;
use crate::events::{BusBuilder, Interest, Subscription};
use crate::observe::metrics::Sources;
use std::future::Future;
use std::io::Write;
use std::pin::Pin;
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
    pub otel: Option<crate::observe::otel::OtelConfig>,
    /// The upstream's host and port for spans (`None` for a stdio server).
    pub otel_upstream: Option<(String, u16)>,
    /// The dashboard's subscription: what it reads (`None`: no dashboard).
    pub dashboard: Option<Interest>,
    /// The run joins the hub: registered for `rpctap watch` once its feed listens (with the
    /// wrapped server's pid, for `stdio`).
    pub hub: Option<(Plan, Option<u32>)>,
}

/// The future an observer's end is.
pub type Ending = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One observer of the traffic. It is made (and put on the bus) by [`Observers::attach`].
pub trait Observer: Send {
    /// Its name in notices.
    fn name(&self) -> &'static str;
    /// What it offers the others once the inspector exists (read by the metrics).
    fn offer(&self, _sources: &mut Sources) {}
    /// Starts reading the bus, with everything the others offered.
    fn start(&mut self, _sources: &Sources) {}
    /// Ends it. Called after the inspector and every exchange are gone: a task reading the
    /// bus ends when the bus closes.
    fn finish(self: Box<Self>) -> Ending;
}

/// The chain, attached to a bus: its observers in the order they finish.
pub struct Observers {
    list: Vec<Box<dyn Observer>>,
    /// The admin side's handles (readiness, its banner), when `--admin` is on.
    pub admin: Option<AdminSide>,
    dashboard: Option<Subscription>,
}

/// What a subcommand reads of the admin side while it runs.
#[derive(Clone)]
pub struct AdminSide {
    pub ready: Arc<crate::admin::Readiness>,
    banner: String,
}

impl AdminSide {
    /// The line printed when the listener is up.
    pub fn banner(&self) -> &str {
        &self.banner
    }
}

impl Observers {
    /// Makes every observer `chain` asks for and puts it on `bus`; binds the admin listener,
    /// opens the recording and registers in the hub (their errors come out here, before
    /// anything is served).
    pub async fn attach(chain: Chain, bus: &mut BusBuilder) -> Result<Observers, AppError> {
        let log = match chain.log {
            LogFormat::Off => None,
            // Every event as JSON, through a queue.
            LogFormat::Json => Some(Log::pending(LogKind::Json(
                bus.subscribe("log", 65_536),
                chain.log_out,
            ))),
            // Finished calls, notifications, anomalies, refusals, notices: lines written by
            // the publishing threads.
            LogFormat::Text => {
                let lines =
                    crate::observe::logsink::TextLines::new(crate::observe::logsink::TEXT_BYTES);
                bus.sink(crate::observe::logsink::TEXT_INTEREST, lines.clone());
                Some(Log::pending(LogKind::Text(lines, chain.log_out)))
            }
        };
        let admin = match &chain.admin {
            Some(a) => {
                let recording = chain.record.as_ref().map(|r| r.path.clone());
                Some(Admin::start(a, bus, chain.feed_header, recording).await?)
            }
            None => None,
        };
        let otel = chain.otel.map(|o| {
            // With `--otlp-tool-content` the `tools/call` messages too (their texts go on
            // the spans).
            let interest = if o.tool_content {
                Interest::CALL.and(Interest::MESSAGE_REST)
            } else {
                Interest::CALL
            };
            let sub = bus.subscribe_to("otel", o.queue, interest);
            Exporter {
                pending: Some((sub, o, chain.otel_upstream)),
                task: None,
                stop: tokio::sync::watch::channel(false).0,
            }
        });
        let recorder = match chain.record.clone() {
            Some(opts) => {
                let lines = crate::record::LineBuffer::new(crate::record::BUFFER_BYTES);
                bus.sink(Interest::ALL, lines.clone());
                let (stop, stop_rx) = tokio::sync::watch::channel(false);
                let finished =
                    crate::record::start(opts, chain.record_meta, lines.clone(), stop_rx)?;
                Some(Recorder {
                    lines,
                    stop,
                    finished,
                })
            }
            None => None,
        };
        let dashboard = chain
            .dashboard
            .map(|interest| bus.subscribe_to("dashboard", 65_536, interest));
        // Registered last: `watch` shows a registration once its feed answers.
        let registration = chain.hub.map(|(plan, server_pid)| Registration {
            _registered: plan.register(&chain.admin, &chain.record, server_pid),
        });
        let admin_side = admin.as_ref().map(|a| AdminSide {
            ready: a.ready.clone(),
            banner: a.banner(),
        });
        let mut list: Vec<Box<dyn Observer>> = Vec::new();
        push(&mut list, recorder);
        push(&mut list, otel);
        push(&mut list, log);
        push(&mut list, admin);
        push(&mut list, registration);
        Ok(Observers {
            list,
            admin: admin_side,
            dashboard,
        })
    }

    /// The dashboard's subscription, for its loop (once).
    pub fn take_dashboard(&mut self) -> Option<Subscription> {
        self.dashboard.take()
    }

    /// The observers' names, in the order they finish.
    pub fn names(&self) -> Vec<&'static str> {
        self.list.iter().map(|o| o.name()).collect()
    }

    /// Starts the observers that read the bus, once the inspector exists; `sources` adds what
    /// the metrics read at scrape time beside what the observers offer.
    pub fn start(&mut self, sources: impl FnOnce(&mut Sources)) {
        let mut s = Sources::default();
        for o in &self.list {
            o.offer(&mut s);
        }
        sources(&mut s);
        for o in &mut self.list {
            o.start(&s);
        }
    }

    /// Ends every observer, in the list's order (see the module's comment). Call it after the
    /// inspector and every exchange are gone.
    pub async fn finish(self) {
        for o in self.list {
            o.finish().await;
        }
    }
}

fn push<O: Observer + 'static>(list: &mut Vec<Box<dyn Observer>>, o: Option<O>) {
    if let Some(o) = o {
        list.push(Box::new(o));
    }
}

/// The recording: a sink filling a buffer that a writer thread drains into the file.
struct Recorder {
    lines: Arc<crate::record::LineBuffer>,
    /// Tells the writer to flush and stop.
    stop: tokio::sync::watch::Sender<bool>,
    finished: crate::record::Finished,
}

impl Observer for Recorder {
    fn name(&self) -> &'static str {
        "recorder"
    }
    fn offer(&self, s: &mut Sources) {
        s.recorder = Some(self.lines.clone());
    }
    fn finish(self: Box<Self>) -> Ending {
        Box::pin(async move {
            let _ = self.stop.send(true);
            match self.finished.await {
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
        })
    }
}

/// The trace exporter waiting to start: its subscription, settings and the upstream's address.
type ExporterStart = (
    Subscription,
    crate::observe::otel::OtelConfig,
    Option<(String, u16)>,
);

/// The trace exporter (`--otlp`): finished calls turned into spans.
struct Exporter {
    pending: Option<ExporterStart>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// Tells the exporter to send what is queued and end.
    stop: tokio::sync::watch::Sender<bool>,
}

impl Observer for Exporter {
    fn name(&self) -> &'static str {
        "trace exporter"
    }
    fn start(&mut self, _: &Sources) {
        if let Some((sub, o, up)) = self.pending.take() {
            self.task = Some(crate::observe::otel::spawn(
                sub,
                o,
                up,
                self.stop.subscribe(),
            ));
        }
    }
    fn finish(self: Box<Self>) -> Ending {
        // The last spans and metrics: what is queued is read and sent, then it ends.
        let _ = self.stop.send(true);
        Box::pin(ended(self.name(), self.task, Duration::from_secs(5)))
    }
}

/// The headless log waiting to start, and where its lines go.
enum LogKind {
    Json(Subscription, Box<dyn Write + Send>),
    Text(
        Arc<crate::observe::logsink::TextLines>,
        Box<dyn Write + Send>,
    ),
}

/// The headless log (`--log text|json`).
struct Log {
    pending: Option<LogKind>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Log {
    fn pending(kind: LogKind) -> Log {
        Log {
            pending: Some(kind),
            task: None,
        }
    }
}

impl Observer for Log {
    fn name(&self) -> &'static str {
        "log"
    }
    fn start(&mut self, _: &Sources) {
        self.task = self.pending.take().map(|log| match log {
            LogKind::Json(sub, out) => tokio::spawn(crate::observe::logsink::run_json(sub, out)),
            LogKind::Text(lines, out) => {
                tokio::spawn(crate::observe::logsink::run_text(lines, out))
            }
        });
    }
    fn finish(self: Box<Self>) -> Ending {
        // It ends when the bus (held by the inspector) is gone; a connection that outlived the
        // grace period is not waited for.
        Box::pin(ended(self.name(), self.task, Duration::from_millis(500)))
    }
}

/// The admin side of a running rpctap (`--admin`): metrics, the live feed, the listener.
struct Admin {
    metrics: Arc<crate::observe::metrics::Metrics>,
    feed: crate::observe::feed::Feed,
    ready: Arc<crate::admin::Readiness>,
    admin: crate::admin::AdminHandle,
    feed_sub: Option<Subscription>,
    feed_task: Option<tokio::task::JoinHandle<()>>,
}

impl Admin {
    /// Subscribes the metrics and the feed to `bus` and binds the admin listener (so a bad
    /// address fails before anything serves). `header` describes this run in the feed.
    /// `recording`: where this run records, which the agent API serves as its own session.
    async fn start(
        cfg: &crate::admin::AdminConfig,
        bus: &mut BusBuilder,
        header: serde_json::Value,
        recording: Option<std::path::PathBuf>,
    ) -> Result<Admin, AppError> {
        let metrics = crate::observe::metrics::Metrics::new(cfg.max_label_values);
        bus.sink(crate::observe::metrics::INTEREST, metrics.clone());
        let feed = crate::observe::feed::Feed::new(header, Default::default());
        let sub = feed.subscribe(bus);
        let ready = crate::admin::Readiness::new(cfg.ready_interval);
        let admin = crate::admin::start(
            cfg,
            crate::admin::AdminState {
                metrics: metrics.clone(),
                feed: feed.clone(),
                ready: ready.clone(),
                token: cfg.token.clone(),
                agent: {
                    // Its own live session (its recording, else its feed), and the hub's.
                    let agent = crate::offline::agent::Agent {
                        source: crate::hub::Home::from_env()
                            .ok()
                            .map(crate::offline::agent::Source::Home),
                        own: Some(match recording {
                            Some(p) => crate::offline::agent::Own::Recording(p),
                            None => crate::offline::agent::Own::Feed(feed.clone()),
                        }),
                        allow_replay: false,
                    };
                    let handler: crate::admin::McpHandler = Arc::new(move |m| {
                        let a = agent.clone();
                        Box::pin(async move { a.handle(&m).await })
                    });
                    Some(handler)
                },
            },
        )
        .await?;
        Ok(Admin {
            metrics,
            feed,
            ready,
            admin,
            feed_sub: Some(sub),
            feed_task: None,
        })
    }

    /// The line printed when the listener is up.
    fn banner(&self) -> String {
        let a = &self.admin.addr;
        let http = match a {
            crate::admin::AdminAddr::Tcp(t) => format!("http://{t}"),
            crate::admin::AdminAddr::Unix(_) => a.to_string(),
        };
        format!("rpctap: admin on {http} (/healthz /readyz /metrics /events /calls); watch it with: rpctap attach {a}")
    }
}

impl Observer for Admin {
    fn name(&self) -> &'static str {
        "admin"
    }
    fn offer(&self, s: &mut Sources) {
        s.feed = Some(self.feed.clone());
    }
    fn start(&mut self, s: &Sources) {
        let s = s.clone();
        self.metrics.set_sources(|m| *m = s);
        // Starts draining the bus into the feed.
        if let Some(sub) = self.feed_sub.take() {
            self.feed_task = Some(self.feed.spawn(sub));
        }
    }
    fn finish(self: Box<Self>) -> Ending {
        Box::pin(async move {
            // A feed client gets the last events before the listener closes.
            tokio::time::sleep(crate::observe::feed::DRAIN * 2).await;
            drop(self);
        })
    }
}

impl Drop for Admin {
    fn drop(&mut self) {
        if let Some(t) = &self.feed_task {
            t.abort();
        }
    }
}

/// The run's registration in the hub, removed when it finishes (after the recording closed).
struct Registration {
    _registered: Option<crate::hub::Registered>,
}

impl Observer for Registration {
    fn name(&self) -> &'static str {
        "hub registration"
    }
    fn finish(self: Box<Self>) -> Ending {
        Box::pin(async move { drop(self) })
    }
}

/// Waits (up to `within`) for an observer's task, and says how it ended when it did not end
/// well.
async fn ended(what: &'static str, task: Option<tokio::task::JoinHandle<()>>, within: Duration) {
    let Some(t) = task else { return };
    match tokio::time::timeout(within, t).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) if e.is_panic() => tracing::error!(observer = what, "an observer panicked"),
        Ok(Err(_)) => {}
        Err(_) => tracing::debug!(observer = what, "still running at exit; left"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The list is what the options ask for, in the order the module's comment promises; the
    /// dashboard's subscription is handed out once; the chain ends whole (the recording closed
    /// with its header on disk).
    #[tokio::test]
    async fn the_chain_is_the_list_the_options_ask_for_and_ends_in_its_order() {
        let dir = std::env::temp_dir().join(format!("rpctap-observers-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("run.jsonl");
        let chain = Chain {
            log: LogFormat::Text,
            log_out: Box::new(std::io::sink()),
            record: Some(crate::record::Options {
                path: path.clone(),
                max_bytes: None,
                mode: crate::record::OpenMode::New,
            }),
            record_meta: serde_json::json!({"listen": "test"}),
            admin: Some(crate::admin::AdminConfig {
                addr: crate::admin::AdminAddr::Tcp("127.0.0.1:0".parse().unwrap()),
                token: None,
                ready_path: None,
                ready_interval: Duration::from_secs(5),
                max_label_values: 10,
            }),
            feed_header: serde_json::json!({"mode": "proxy"}),
            otel: None,
            otel_upstream: None,
            dashboard: Some(Interest::CALL),
            hub: None,
        };
        let mut bus = BusBuilder::default();
        let mut o = Observers::attach(chain, &mut bus).await.unwrap();
        assert_eq!(o.names(), ["recorder", "log", "admin"]);
        assert!(o
            .admin
            .as_ref()
            .unwrap()
            .banner()
            .contains("admin on http://127.0.0.1:"));
        assert!(o.take_dashboard().is_some());
        assert!(o.take_dashboard().is_none(), "handed out once");
        o.start(|_| {});
        drop(bus.build());
        o.finish().await;
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(r#""listen":"test""#), "{text}");
        let _ = std::fs::remove_dir_all(&dir);

        // Nothing asked for: an empty chain.
        let bare = Chain {
            log: LogFormat::Off,
            log_out: Box::new(std::io::sink()),
            record: None,
            record_meta: serde_json::json!({}),
            admin: None,
            feed_header: serde_json::json!({}),
            otel: None,
            otel_upstream: None,
            dashboard: None,
            hub: None,
        };
        let mut bus = BusBuilder::default();
        let mut o = Observers::attach(bare, &mut bus).await.unwrap();
        assert!(o.names().is_empty() && o.admin.is_none() && o.take_dashboard().is_none());
    }
}

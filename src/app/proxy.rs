//! `rpctap proxy`, and what every subcommand that serves HTTP shares (`demo`, `serve`): the
//! listener bound, the observer chain attached, the inspector and the pipeline built
//! ([`RunningProxy`]), served until shutdown with the dashboard in front when stdout is a
//! terminal; rules reloaded on SIGHUP.

use super::{hub, AppError, Chain, Observers};
use crate::cli::{LogFormat, ProxyArgs};
use crate::config::{self, ProxyConfig};
use crate::events::BusBuilder;
use crate::inspect::Inspector;
use crate::proxy::Proxy;
use crate::server;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub(super) async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })
}

/// A header with the hub's part added.
fn with_meta(mut v: serde_json::Value, meta: &Option<serde_json::Value>) -> serde_json::Value {
    if let Some(m) = meta {
        hub::merge(&mut v, m.clone());
    }
    v
}

/// A proxy ready to serve: its listener bound, its inspector and observers built.
pub struct RunningProxy {
    pub listener: TcpListener,
    pub proxy: Proxy,
    pub cfg: ProxyConfig,
    /// What the listener counts (connections refused, timed out), read by the metrics.
    pub listener_stats: Arc<server::ListenerStats>,
    pub observers: Observers,
    /// `rpctap serve`'s bridge (the proxy's local upstream).
    pub bridge: Option<crate::bridge::Bridge>,
}

impl RunningProxy {
    pub async fn bind(cfg: ProxyConfig) -> Result<Self, AppError> {
        Self::bind_with(cfg, BusBuilder::default()).await
    }

    /// Like `bind`, with extra subscribers already on the bus (tests).
    pub async fn bind_with(cfg: ProxyConfig, bus: BusBuilder) -> Result<Self, AppError> {
        Self::bind_joined(cfg, bus, None).await
    }

    /// Like `bind_with`, joined to the hub by `hub` (`proxy --hub`, `serve --hub`).
    pub async fn bind_joined(
        cfg: ProxyConfig,
        mut bus: BusBuilder,
        hub: Option<hub::Plan>,
    ) -> Result<Self, AppError> {
        let listener = bind(cfg.listen).await?;
        raise_fd_limit(cfg.conn.max_connections, cfg.proxy.upstream_idle_max);
        let listener_stats = Arc::new(server::ListenerStats::default());
        let listen = listener
            .local_addr()
            .map(|a| a.to_string())
            .unwrap_or_default();
        let up = &cfg.proxy.upstream;
        let host = up.host().unwrap_or("").trim_matches(['[', ']']).to_string();
        let port = up
            .port_u16()
            .unwrap_or(if up.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        // The dashboard, when stdout is a terminal; then the headless log is off (it would
        // garble the screen).
        let dashboard = config::dashboard_on(&cfg).then_some(crate::tui::INTEREST);
        let record = hub::Plan::record(hub.as_ref(), &cfg.record);
        let admin = hub::Plan::admin(hub.as_ref(), &cfg.admin);
        // What the headers say of the session: `serve`'s own, and the hub's name for it.
        let mut meta = cfg.session_meta.clone();
        if let Some(p) = &hub {
            let m = meta.get_or_insert_with(|| serde_json::json!({}));
            hub::merge(m, p.meta());
        }
        let joined = hub.is_some();
        let mut observers = Observers::attach(
            Chain {
                log: match dashboard {
                    Some(_) => LogFormat::Off,
                    None => cfg.log,
                },
                log_out: Box::new(std::io::stdout()),
                record,
                record_meta: with_meta(
                    serde_json::json!({
                        "listen": listen,
                        "upstream": up.to_string(),
                        // What `check` needs to decide as the live inspector did.
                        "inspect": cfg.inspect.recorded_json(),
                    }),
                    &meta,
                ),
                admin,
                feed_header: with_meta(
                    serde_json::json!({
                        "mode": "proxy",
                        "listen": listen,
                        "upstream": up.to_string(),
                    }),
                    &meta,
                ),
                otel: cfg.otel.clone(),
                otel_upstream: Some((host.clone(), port)),
                dashboard,
                hub: hub.map(|p| (p, None)),
            },
            &mut bus,
        )
        .await?;
        let label = meta
            .as_ref()
            .and_then(|m| m["label"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("{host}:{port}"));
        let mut inspect = cfg.inspect.clone();
        inspect.baseline = hub::live_baseline(cfg.baseline_dir.as_deref(), joined, &label);
        let inspector = Inspector::new(inspect, bus.build());
        let limiter = config::limiter(
            &cfg.limits,
            cfg.limit_code,
            &cfg.faults,
            &cfg.deny,
            crate::flow::fault::Carrier::Http,
        )?;
        let bridge = cfg
            .bridge
            .clone()
            .map(|b| crate::bridge::Bridge::new(b, inspector.clone()));
        let local = bridge
            .clone()
            .map(|b| Arc::new(b) as Arc<dyn crate::proxy::upstream::Local>);
        let mut popts = cfg.proxy.clone();
        if let (Some(g), Ok(addr)) = (&cfg.guard, listener.local_addr()) {
            popts.guard = Some(Arc::new(crate::server::guard::Guard::new(g.clone(), addr)));
        }
        let proxy = Proxy::with_local(popts, inspector, limiter, local);
        observers.start(|s| {
            s.inspector = Some(proxy.inspector().clone());
            s.connections = Some(proxy.connections().clone());
            s.listener = Some(listener_stats.clone());
        });
        Ok(RunningProxy {
            listener,
            proxy,
            cfg,
            listener_stats,
            observers,
            bridge,
        })
    }

    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves until `shutdown`, then drains.
    pub async fn serve(self, shutdown: impl Future<Output = ()>) {
        let RunningProxy {
            listener,
            proxy,
            cfg,
            listener_stats,
            observers,
            bridge,
        } = self;
        let probe = observers.admin.as_ref().map(|o| match &bridge {
            // Ready when a child can be started.
            Some(b) => {
                let (b, ready) = (b.clone(), o.ready.clone());
                let every = cfg
                    .admin
                    .as_ref()
                    .map(|a| a.ready_interval)
                    .unwrap_or(Duration::from_secs(5))
                    .max(Duration::from_millis(50));
                tokio::spawn(async move {
                    let mut tick = tokio::time::interval(every);
                    loop {
                        tick.tick().await;
                        match b.ready() {
                            Ok(()) => ready.ok(),
                            Err(why) => ready.failed(why),
                        }
                    }
                })
            }
            None => {
                let a = cfg.admin.as_ref();
                crate::admin::spawn_upstream_probe(
                    cfg.proxy.upstream.clone(),
                    a.and_then(|a| a.ready_path.clone()),
                    cfg.proxy.upstream_insecure,
                    o.ready.clone(),
                )
            }
        });
        let bridge_sweeper = bridge.as_ref().map(|b| b.spawn_sweeper());
        let ready = observers.admin.as_ref().map(|o| o.ready.clone());
        let shutdown = async move {
            shutdown.await;
            // Readiness says so at once, while in-flight exchanges drain.
            if let Some(r) = ready {
                r.shutting_down();
            }
        };
        let sweeper = proxy.inspector().spawn_sweeper();
        let limit_sweeper = {
            let p = proxy.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    p.limiter().retain();
                }
            })
        };
        let reloader = spawn_reloader(proxy.clone(), cfg.clone());
        tracing::info!(listen = %cfg.listen, upstream = %cfg.proxy.upstream, "rpctap proxy listening");
        let p = proxy.clone();
        server::serve_with(
            listener,
            move |peer| {
                let counted = crate::observe::metrics::Counted::client(p.connections());
                // The proxy is cloned once per connection, into the connection's own state: each
                // request then clones only that (a count no other core writes), not the proxy's
                // shared one.
                let conn = Arc::new((p.clone(), crate::proxy::ClientConn::new(peer)));
                let driver = conn.clone();
                let handler = move |req| crate::proxy::Proxy::handle(conn.clone(), req);
                (handler, async move {
                    let _counted = counted;
                    driver.1.drive_upstream().await
                })
            },
            shutdown,
            server::ServeOptions {
                limits: cfg.conn.clone(),
                grace: cfg.grace,
                stats: listener_stats,
            },
        )
        .await;
        sweeper.abort();
        limit_sweeper.abort();
        reloader.abort();
        if let Some(p) = probe {
            p.abort();
        }
        if let Some(s) = bridge_sweeper {
            s.abort();
        }
        // Every child stopped and reaped before the recording closes (their last lines in it).
        if let Some(b) = &bridge {
            b.shutdown().await;
        }
        drop(proxy);
        // The recording is flushed whole before exit, even if a connection outlived the grace.
        observers.finish().await;
    }
}

/// Raises the soft limit on open files to the hard limit (as nginx's `worker_rlimit_nofile`
/// does), and says so when even that leaves too few for `max_connections` idle client
/// connections beside the kept upstream connections (an exchange in flight takes one more, its
/// upstream's; at the fd limit, accept fails and is retried).
fn raise_fd_limit(max_connections: usize, upstream_idle_max: usize) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if let (Some(cur), Some(max)) = (lim.current, lim.maximum) {
        if cur < max {
            lim.current = Some(max);
            if setrlimit(Resource::Nofile, lim).is_err() {
                lim.current = Some(cur);
            }
        }
    }
    let have = lim.current.unwrap_or(u64::MAX);
    let want = (max_connections as u64)
        .saturating_add(upstream_idle_max as u64)
        .saturating_add(64);
    if have < want {
        tracing::warn!(
            fd_limit = have,
            max_connections,
            "the open-file limit is below --max-connections: at the limit, accept fails and is retried; raise `ulimit -n` or lower --max-connections"
        );
    }
}

/// On SIGHUP, reloads the rate-limit rules from the config file; a bad file is refused with a
/// clear log line and the rules in force stay.
fn spawn_reloader(proxy: Proxy, cfg: ProxyConfig) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let Ok(mut hup) =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            else {
                return;
            };
            while hup.recv().await.is_some() {
                // One line each way, on stderr through the log (no second copy by eprintln).
                match config::reload_limits(&cfg) {
                    Ok(l) => {
                        tracing::warn!(
                            rules = l.len(),
                            faults = l.faults.len(),
                            stages = ?l.stages,
                            "rate-limit, deny and fault rules reloaded"
                        );
                        proxy.set_limiter(l);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "reload refused; the previous rules stay");
                    }
                }
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (proxy, cfg);
        }
    })
}

/// `rpctap proxy`.
pub async fn run(args: ProxyArgs, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
    let mut cfg = config::resolve(args.listen, args.upstream.as_deref(), &args.flags)?;
    // `--hub`: this proxy beside the machine's stdio shims in `rpctap watch`.
    let plan = if args.hub {
        let up = cfg.proxy.upstream.to_string();
        let label = args
            .label
            .as_deref()
            .or(cfg.proxy.upstream.host())
            .map(crate::hub::command::sanitize)
            .unwrap_or_else(|| "proxy".into());
        let command = vec![cfg.listen.to_string(), up];
        hub::prepare(
            label,
            "proxy",
            command,
            args.no_record,
            &cfg.record,
            &cfg.admin,
            &mut cfg.inspect,
        )
    } else {
        None
    };
    serve_maybe_tui(cfg, plan, "rpctap", shutdown, None).await
}

/// Serves the proxy, with the dashboard in front when stdout is a terminal (then the headless
/// log is off: it would garble the screen). Quitting the dashboard stops the proxy.
pub(crate) async fn serve_maybe_tui(
    cfg: ProxyConfig,
    hub: Option<hub::Plan>,
    title: &str,
    shutdown: impl Future<Output = ()>,
    banner: Option<&dyn Fn(SocketAddr) -> String>,
) -> Result<(), AppError> {
    // Said once the listener is bound (never before a bind that fails), on stderr: stdout is the
    // log's.
    let say = |running: &RunningProxy| {
        let addr = running.local_addr().unwrap_or(running.cfg.listen);
        match banner {
            Some(b) => eprintln!("{}", b(addr)),
            None => eprintln!(
                "rpctap: proxy on http://{addr} → {}",
                running.cfg.proxy.upstream
            ),
        }
        if let Some(o) = &running.observers.admin {
            eprintln!("{}", o.banner());
        }
    };
    if !config::dashboard_on(&cfg) {
        if cfg.proxy.intercept.is_some() {
            return Err(AppError::Terminal(
                "--intercept needs the dashboard (a terminal, without --no-tui): nobody would decide what it holds".into(),
            ));
        }
        let running = RunningProxy::bind_joined(cfg, BusBuilder::default(), hub).await?;
        say(&running);
        if banner.is_some() {
            eprintln!("Press Ctrl-C to stop.");
        }
        running.serve(shutdown).await;
        return Ok(());
    }
    let max_rows = cfg.max_rows;
    let mut running = RunningProxy::bind_joined(cfg, BusBuilder::default(), hub).await?;
    let sub = running.observers.take_dashboard();
    // The banner goes inside the dashboard (the empty list's placeholder): printed before it
    // opens, it would be hidden until quitting.
    // The keys and the admin listener first: on a small terminal (80×24) what is cut is the
    // last of the examples, never how to get help or attach.
    let mut intro: Vec<String> = Vec::new();
    if let Some(b) = banner {
        let addr = running.local_addr().unwrap_or(running.cfg.listen);
        intro.push("Every call shows up here as a row. `?` lists the keys, `q` quits.".into());
        if let Some(o) = &running.observers.admin {
            intro.push(o.banner().trim_start_matches("rpctap: ").to_string());
        }
        intro.push(String::new());
        intro.extend(b(addr).lines().map(str::to_string));
    }
    let listen = running
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let upstream = running.cfg.proxy.upstream.to_string();
    let resend = running
        .local_addr()
        .map(|proxy| crate::tui::Resend { proxy });
    let intercept = running.proxy.intercept().clone();
    let start_filter = running.cfg.proxy.intercept.clone();
    if let Some(f) = &start_filter {
        intercept.set_filter(crate::filter::Filter::parse(f).ok());
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(running.serve(async move {
        let _ = stop_rx.await;
    }));
    let mut app =
        crate::view::App::new(title, &listen, &upstream, max_rows, crate::events::now_ns());
    app.can_resend = true;
    app.intro = intro;
    app.held.filter = start_filter.unwrap_or_default();
    let result = crate::tui::run(
        app,
        sub.map(crate::tui::Source::Bus),
        shutdown,
        resend,
        None,
        Some(intercept),
        crate::tui::Screen::Stdout,
    )
    .await;
    let _ = stop_tx.send(());
    let _ = server.await;
    result.map_err(|e| AppError::Terminal(e.to_string()))
}

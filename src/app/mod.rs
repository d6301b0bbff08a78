//! The subcommands wired together: what `main` runs. Each takes a `shutdown` future so tests
//! can stop them with a oneshot and `main` with SIGINT/SIGTERM.

use crate::cli::{DemoArgs, DemoServerArgs, LogFormat, ProxyArgs};
use crate::config::{self, ProxyConfig};
use crate::demo::{self, DemoOptions};
use crate::events::BusBuilder;
use crate::inspect::Inspector;
use crate::proxy::Proxy;
use crate::server;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

pub mod hub;
pub mod observers;
pub mod serve;
pub mod stdio;
pub mod wrap;
pub use observers::{Chain, Observers};

/// Errors at the edge of every subcommand: one type, whose variant decides the exit code.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Record(#[from] crate::record::Error),
    /// The terminal (the dashboard's screen, its keys) could not be used.
    #[error("terminal: {0}")]
    Terminal(String),
    #[error(transparent)]
    Admin(#[from] crate::admin::AdminError),
    #[error(transparent)]
    Replay(#[from] crate::replay::ReplayError),
    #[error(transparent)]
    Check(#[from] crate::inspect::offline::CheckError),
    /// A file or stream named on the command line that cannot be read or written as asked.
    #[error("{0}")]
    Io(String),
    /// Nothing to check or replay: exit 2, so CI does not take silence for success.
    #[error("no calls: {0}")]
    Empty(String),
}

impl AppError {
    /// The one rule of every subcommand: 2 when the command line or its input is wrong (a bad
    /// flag or config, a file that cannot be read or is no recording, nothing to check), 1 when
    /// the run itself failed (an address that cannot be bound, a recording that cannot be
    /// written, the terminal, the admin listener).
    pub fn exit_code(&self) -> i32 {
        use crate::record::Error as R;
        match self {
            AppError::Config(_)
            | AppError::Replay(_)
            | AppError::Check(_)
            | AppError::Io(_)
            | AppError::Empty(_)
            | AppError::Record(
                R::Read { .. } | R::Format { .. } | R::Exists { .. } | R::IsDir { .. },
            )
            | AppError::Admin(
                crate::admin::AdminError::TokenRequired(_) | crate::admin::AdminError::InUse(_),
            ) => 2,
            AppError::Bind { .. }
            | AppError::Record(R::Write { .. })
            | AppError::Terminal(_)
            | AppError::Admin(_) => 1,
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
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
        let dashboard = use_tui(&cfg).then_some(crate::tui::INTEREST);
        let record = match &hub {
            Some(p) => p.record(&cfg.record),
            None => cfg.record.clone(),
        };
        let admin = match &hub {
            Some(p) => p.admin(&cfg.admin),
            None => cfg.admin.clone(),
        };
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
            crate::fault::Carrier::Http,
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
                let counted = crate::metrics::Counted::client(p.connections());
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
pub async fn proxy(args: ProxyArgs, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
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

/// Whether the dashboard runs: not `--no-tui`, and stdout is a terminal.
pub(crate) fn use_tui(cfg: &ProxyConfig) -> bool {
    use std::io::IsTerminal;
    !cfg.no_tui && std::io::stdout().is_terminal()
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
    if !use_tui(&cfg) {
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

/// `rpctap view FILE`: a recording in the dashboard.
pub async fn view(
    args: crate::cli::ViewArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let rec = crate::record::reader::read(&args.file)?;
    let title = format!("rpctap view {}", args.file.display());
    view_capture(rec, &title, args.max_rows, shutdown).await
}

/// The dashboard over one recording (`view`, `open`).
pub async fn view_capture(
    rec: crate::record::reader::Capture,
    title: &str,
    max_rows: usize,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    // Without a terminal (a pipe, a CI log): the recording as the headless log prints it, as
    // `attach` does — never the dashboard's escape codes into a file.
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        for line in rec.events.iter().filter_map(crate::logsink::text_line) {
            match writeln!(out, "{line}") {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                Err(e) => return Err(AppError::Io(format!("stdout: {e}"))),
            }
        }
        return match out.flush() {
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(AppError::Io(format!("stdout: {e}")))
            }
            _ => Ok(0),
        };
    }
    let (listen, upstream) = crate::view::header_endpoints(&rec.header);
    let mut app = crate::view::App::new(title, &listen, &upstream, max_rows, 0);
    app.load_recording(&rec);
    app.follow = false;
    crate::tui::run(
        app,
        None,
        shutdown,
        None,
        Some(&rec),
        None,
        crate::tui::Screen::Stdout,
    )
    .await
    .map_err(|e| AppError::Terminal(e.to_string()))?;
    Ok(0)
}

/// `rpctap completions SHELL`: the completion script, from the one clap definition.
pub fn completions(args: crate::cli::CompletionsArgs) -> Result<i32, AppError> {
    let mut cmd = <crate::cli::Cli as clap::CommandFactory>::command();
    clap_complete::generate(args.shell, &mut cmd, "rpctap", &mut std::io::stdout());
    Ok(0)
}

/// `rpctap man`: the manual page (roff): the options, and every subcommand with what it does.
pub fn man() -> Result<i32, AppError> {
    let cmd = <crate::cli::Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| AppError::Io(format!("man: {e}")))?;
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    match so.write_all(&out).and_then(|()| so.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(AppError::Io(format!("man: {e}"))),
    }
}

/// `rpctap attach ADDR`: the dashboard on a running rpctap's live feed.
pub async fn attach(
    args: crate::cli::AttachArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let mut target = crate::attach::FeedTarget::parse(&args.addr)
        .map_err(|e| AppError::Io(format!("attach: {e}")))?;
    if let Some(f) = &args.filter {
        // Refused here, naming the term, rather than by the feed.
        crate::filter::Filter::parse(f)
            .map_err(|why| AppError::Io(format!("--filter {f:?}: {why}")))?;
        target = target.with_filter(f);
    }
    let (tx, mut feed) = tokio::sync::mpsc::channel(65_536);
    let task = crate::attach::spawn(target.clone(), args.token.clone(), tx);
    // A refusal (401: no token, or the wrong one) ends the attach before the dashboard opens:
    // exit 2 with the reason, never a retry loop. Whatever came first is handed on.
    let first = tokio::time::timeout(Duration::from_secs(3), feed.recv())
        .await
        .ok()
        .flatten();
    if let Some(crate::attach::FeedMsg::Refused(why)) = &first {
        task.abort();
        return Err(AppError::Io(format!("attach {}: {why}", target.addr)));
    }
    // Without a terminal (or with --text): the feed as the headless log prints it.
    if args.text || !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        let r = tail_feed(first, feed, shutdown).await;
        task.abort();
        return r;
    }
    let (tx, rx) = tokio::sync::mpsc::channel(65_536);
    let forward = tokio::spawn(async move {
        if let Some(m) = first {
            let _ = tx.send(m).await;
        }
        while let Some(m) = feed.recv().await {
            if tx.send(m).await.is_err() {
                return;
            }
        }
    });
    let mut app = crate::view::App::new(
        &format!("rpctap attach {}", target.addr),
        "?",
        "?",
        args.max_rows,
        crate::events::now_ns(),
    );
    app.status = format!("connecting to {}…", target.addr);
    let r = crate::tui::run(
        app,
        Some(crate::tui::Source::Feed(rx)),
        shutdown,
        None,
        None,
        None,
        crate::tui::Screen::Stdout,
    )
    .await;
    task.abort();
    forward.abort();
    r.map_err(|e| AppError::Terminal(e.to_string()))?;
    Ok(0)
}

/// `attach --text`: each event of the feed as a `--log text` line on stdout until the feed's
/// process is gone for good, `shutdown`, or stdout closes (`| head`: a clean exit).
async fn tail_feed(
    first: Option<crate::attach::FeedMsg>,
    mut feed: tokio::sync::mpsc::Receiver<crate::attach::FeedMsg>,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    use crate::attach::FeedMsg;
    use std::io::Write;
    tokio::pin!(shutdown);
    let mut next = first;
    loop {
        let msg = match next.take() {
            Some(m) => m,
            None => tokio::select! {
                m = feed.recv() => match m {
                    Some(m) => m,
                    None => return Ok(0),
                },
                () = &mut shutdown => return Ok(0),
            },
        };
        match msg {
            FeedMsg::Event(e) => {
                let Some(line) = crate::logsink::text_line(&e) else {
                    continue;
                };
                let mut out = std::io::stdout().lock();
                match writeln!(out, "{line}").and_then(|()| out.flush()) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
                    Err(e) => return Err(AppError::Io(format!("stdout: {e}"))),
                }
            }
            FeedMsg::State(s) => eprintln!("rpctap: {s}"),
            FeedMsg::Refused(why) => return Err(AppError::Io(why)),
            FeedMsg::Header(_) | FeedMsg::Marker(_) => {}
        }
    }
}

/// `rpctap demo-server`.
pub async fn demo_server(
    args: DemoServerArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<(), AppError> {
    let listener = bind(args.listen).await?;
    let addr = listener.local_addr().unwrap_or(args.listen);
    eprintln!("rpctap demo server on http://{addr} (POST /jsonrpc, /mcp)");
    let opts = DemoOptions {
        max_delay: Duration::try_from_secs_f64(args.max_delay).unwrap_or(Duration::MAX),
        alter_add: args.alter_add,
    };
    demo::run(listener, opts, shutdown, Duration::from_secs(5)).await;
    Ok(())
}

/// `rpctap demo`: the demo server on a free loopback port, the proxy in front of it.
pub async fn demo(args: DemoArgs, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
    let demo_listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let demo_addr = demo_listener
        .local_addr()
        .map_err(|source| AppError::Bind {
            addr: args.listen,
            source,
        })?;
    let upstream = format!("http://{demo_addr}");
    let mut flags = args.flags.clone();
    // The demo shows everything: the admin listener on a free loopback port unless given.
    if flags.shared.admin.is_none() {
        flags.shared.admin = Some("127.0.0.1:0".into());
    }
    let cfg = config::resolve(Some(args.listen), Some(&upstream), &flags)?;
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let demo_task = tokio::spawn(async move {
        let mut rx = stop_rx;
        demo::run(
            demo_listener,
            DemoOptions::default(),
            async move {
                let _ = rx.changed().await;
            },
            Duration::from_secs(1),
        )
        .await;
    });
    let banner = move |bound: SocketAddr| demo_banner(bound, demo_addr);
    let served = serve_maybe_tui(cfg, None, "rpctap demo", shutdown, Some(&banner)).await;
    let _ = stop_tx.send(true);
    let _ = demo_task.await;
    served?;
    Ok(())
}

fn demo_banner(addr: SocketAddr, demo_addr: SocketAddr) -> String {
    format!(
        "rpctap demo: proxy on http://{addr} → demo server on http://{demo_addr}\n\
         Try, in another terminal:\n\
         \x20 curl -s http://{addr}/jsonrpc -H 'content-type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"method\":\"add\",\"params\":[1,2,4],\"id\":1}}'\n\
         \x20 curl -s http://{addr}/jsonrpc -H 'content-type: application/json' -d '[{{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"x\"],\"id\":\"a\"}},{{\"jsonrpc\":\"2.0\",\"method\":\"nope\",\"id\":\"b\"}}]'\n\
         \x20 curl -s http://{addr}/jsonrpc -H 'content-type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"method\":\"sleep\",\"params\":{{\"ms\":500}},\"id\":2}}'\n\
         \x20 curl -si http://{addr}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d '{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{{}},\"clientInfo\":{{\"name\":\"curl\",\"version\":\"1\"}}}}}}'"
    )
}

fn write_out(path: Option<&std::path::Path>, text: &str) -> Result<(), AppError> {
    match path {
        // Private (0600), like the recording it comes from.
        Some(p) => crate::record::create_private(p)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(|e| AppError::Io(format!("cannot write {}: {e}", p.display()))),
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .map_err(|e| AppError::Io(format!("cannot write to stdout: {e}")))
        }
    }
}

/// `rpctap replay`: 0 when every call matches, 1 on any regression.
pub async fn replay(args: crate::cli::ReplayArgs) -> Result<i32, AppError> {
    let rec = crate::record::reader::read(&args.file)?;
    let stdio = crate::replay::stdio::is_stdio(&rec);
    let mut ignore = args.ignore.clone();
    if let Some(p) = &args.config {
        ignore.extend(config::FileConfig::load(p)?.replay.ignore);
    }
    let mut headers = Vec::new();
    for h in &args.headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| AppError::Io(format!("--header {h:?} must look like `Name: value`")))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    if !(args.timeout.is_finite() && args.timeout > 0.0) {
        return Err(AppError::Io(format!(
            "--timeout must be a positive number of seconds, not {}",
            args.timeout
        )));
    }
    if !rec.messages().any(|m| {
        m.is_c2s()
            && matches!(
                m.kind,
                crate::rpc::Kind::Request | crate::rpc::Kind::Notification
            )
    }) {
        return Err(AppError::Empty(format!(
            "{}: the recording holds no client calls to replay",
            args.file.display()
        )));
    }
    let timeout = Duration::from_secs_f64(args.timeout);
    let report = if stdio || args.target_command {
        if args.target.is_some() {
            return Err(AppError::Io(format!(
                "{} is a stdio recording: replay it with --target-command [-- COMMAND …], not --target",
                args.file.display()
            )));
        }
        let command = if args.command.is_empty() {
            crate::replay::stdio::recorded_command(&rec).ok_or_else(|| {
                AppError::Io(format!(
                    "{} records no command: give one with --target-command -- COMMAND …",
                    args.file.display()
                ))
            })?
        } else {
            args.command.clone()
        };
        crate::replay::stdio::replay(&rec, &command, &ignore, timeout).await?
    } else {
        let Some(target) = &args.target else {
            return Err(AppError::Io(
                "--target URL is required to replay an HTTP recording".into(),
            ));
        };
        let opts = crate::replay::ReplayOptions {
            target: config::parse_upstream(target)?,
            ignore,
            timeout,
            headers,
            insecure: args.insecure,
            wait: Duration::from_secs_f64(args.wait),
        };
        if args.update {
            return update_recording(&args, &rec, opts).await;
        }
        crate::replay::replay(&rec, &opts).await?
    };
    let mut report = report;
    if let Some(max) = args.max_duration {
        report.limit_duration(Duration::from_secs_f64(max));
    }
    if let Some(j) = &args.junit {
        write_out(Some(j), &crate::replay::junit(&report))?;
    }
    if args.json {
        write_out(
            None,
            &format!(
                "{}\n",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            ),
        )?;
    } else {
        write_out(None, &crate::replay::text(&report))?;
    }
    Ok(if report.failed == 0 { 0 } else { 1 })
}

/// `replay --update`: the recording's client traffic goes to the target through a recording
/// proxy (this same binary, on a loopback port of its own), and what that proxy recorded becomes
/// the recording; the old one is kept as FILE.bak.
async fn update_recording(
    args: &crate::cli::ReplayArgs,
    rec: &crate::record::reader::Capture,
    mut opts: crate::replay::ReplayOptions,
) -> Result<i32, AppError> {
    let io = |what: &str, e: std::io::Error| AppError::Io(format!("{what}: {e}"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| io("cannot find a free port", e))?
        .port();
    let fresh = args.file.with_extension("jsonl.update");
    let _ = std::fs::remove_file(&fresh);
    let exe = std::env::current_exe().map_err(|e| io("cannot find rpctap itself", e))?;
    let mut proxy = tokio::process::Command::new(exe)
        .args(["proxy", "--no-tui", "--log", "off", "--listen"])
        .arg(format!("127.0.0.1:{port}"))
        .arg("--upstream")
        .arg(opts.target.to_string())
        .arg("--record")
        .arg(&fresh)
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| io("cannot start the recording proxy", e))?;
    opts.target = format!("http://127.0.0.1:{port}")
        .parse()
        .map_err(|e| AppError::Io(format!("{e}")))?;
    opts.wait = opts.wait.max(Duration::from_secs(5));
    let report = crate::replay::replay(rec, &opts).await;
    // A graceful stop: the recording is flushed whole.
    if let Some(pid) = proxy.id() {
        if let Some(pid) = rustix::process::Pid::from_raw(pid as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(15), proxy.wait()).await;
    let report = report?;
    let bak = args.file.with_extension("jsonl.bak");
    std::fs::rename(&args.file, &bak).map_err(|e| io("cannot keep the old recording", e))?;
    std::fs::rename(&fresh, &args.file).map_err(|e| io("cannot write the new recording", e))?;
    eprintln!(
        "rpctap replay: {} updated from {} ({} calls, {} differed from what was recorded); the old recording is {}",
        args.file.display(),
        args.target.as_deref().unwrap_or(""),
        report.calls.len(),
        report.failed,
        bak.display()
    );
    Ok(0)
}

/// `rpctap mock`.
pub async fn mock(
    args: crate::cli::MockArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let rec = crate::record::reader::read(&args.file)?;
    let mock = crate::replay::mock::Mock::matching(&rec, args.matching);
    if args.stdio {
        eprintln!(
            "rpctap mock: serving {} recorded calls from {} on stdin/stdout",
            mock.calls_known(),
            args.file.display()
        );
        // Blocking reads and writes of the process's own stdio, off the runtime's threads.
        let served = tokio::task::spawn_blocking(move || {
            mock.serve_stdio(std::io::stdin().lock(), std::io::stdout().lock())
        })
        .await
        .map_err(|e| AppError::Io(e.to_string()))?;
        served.map_err(|e| AppError::Io(format!("mock: {e}")))?;
        return Ok(0);
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| AppError::Bind {
            addr: args.listen,
            source,
        })?;
    eprintln!(
        "rpctap mock: serving {} recorded calls from {} on http://{}",
        mock.calls_known(),
        args.file.display(),
        listener.local_addr().unwrap_or(args.listen)
    );
    crate::replay::mock::run(listener, std::sync::Arc::new(mock), shutdown).await;
    Ok(0)
}

/// `rpctap check`: 0 when everything passes the gate, 1 when a finding fails it (by default an
/// error or a warning) or an assertion breaks.
pub fn check(args: crate::cli::CheckArgs) -> Result<i32, AppError> {
    use crate::inspect::offline::{check_document, CheckLimits};
    // The flags first, before anything is read: a bad one is named whatever the file.
    let gate = config::check_gate(&args)?;
    // A file is read once: its first line says whether it is a recording (read by the reader,
    // its rotated parts too) or exchange documents (read whole here).
    let stdin = args.file == "-";
    let mut bytes = Vec::new();
    if stdin {
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| AppError::Io(format!("cannot read stdin: {e}")))?;
    } else {
        let f = std::fs::File::open(&args.file)
            .map_err(|e| AppError::Io(format!("cannot read {}: {e}", args.file)))?;
        std::io::BufRead::read_until(
            &mut std::io::BufReader::new(std::io::Read::take(f, 1 << 20)),
            b'\n',
            &mut bytes,
        )
        .map_err(|e| AppError::Io(format!("cannot read {}: {e}", args.file)))?;
    }
    let recording = String::from_utf8_lossy(&bytes)
        .lines()
        .next()
        .is_some_and(|l| l.contains("\"rpctap_recording\""));
    if !stdin && !recording {
        bytes = std::fs::read(&args.file)
            .map_err(|e| AppError::Io(format!("cannot read {}: {e}", args.file)))?;
    }
    let limits = CheckLimits {
        max_bytes: args.max_bytes,
        max_depth: args.max_depth,
        max_nodes: args.max_nodes,
        max_envelopes: args.max_envelopes,
        ..Default::default()
    };
    let text = String::from_utf8_lossy(&bytes);
    let report;
    if recording {
        let rec = if stdin {
            let mut rec = crate::record::reader::Capture::default();
            crate::record::reader::parse_part(&text, "stdin", &mut rec, true)
                .map_err(|why| AppError::Io(format!("stdin: {why}")))?;
            rec
        } else {
            // A file: its rotated parts too.
            crate::record::reader::read(std::path::Path::new(&args.file))?
        };
        // The recording goes back through the live inspector, scope by scope, its tool lists
        // compared with its label's baseline as it is now (never written here).
        let label = crate::gate::label(&rec.header);
        let dir = args.baseline.clone().or_else(|| {
            crate::hub::Home::from_env()
                .ok()
                .map(|h| h.baselines())
                .filter(|d| crate::baseline::path(d, &label).is_file())
        });
        let baseline = match dir {
            Some(d) => Some(std::sync::Arc::new(
                crate::baseline::Live::open(&d, &label, false)
                    .map_err(|e| AppError::Io(e.to_string()))?,
            )),
            None => None,
        };
        let results = crate::inspect::recorded::check_recording_with(&rec, baseline);
        if results.is_empty() {
            return Err(AppError::Empty(format!(
                "{}: the recording holds no JSON-RPC messages",
                args.file
            )));
        }
        report = crate::gate::recording(&gate, &rec, results);
        if args.format == crate::cli::CheckFormat::Html {
            let out = gated_report(&args, &rec, &report)?;
            write_out(args.output.as_deref(), &out)?;
            return Ok(i32::from(report.failed()));
        }
    } else {
        if args.format == crate::cli::CheckFormat::Html {
            return Err(AppError::Io(
                "--format html needs a recording (an exchange document has no report)".into(),
            ));
        }
        if !(gate.expect_tools.is_empty()
            && gate.forbid_tools.is_empty()
            && gate.max_duration.is_none())
        {
            return Err(AppError::Io(
                "--expect-tool, --forbid-tool and --max-duration need a recording (an exchange document has no calls' times or sessions)".into(),
            ));
        }
        // One document, or JSON Lines of documents.
        let docs: Vec<&str> = if serde_json::from_str::<serde::de::IgnoredAny>(&text).is_ok() {
            vec![text.as_ref()]
        } else {
            text.lines().filter(|l| !l.trim().is_empty()).collect()
        };
        if docs.is_empty() {
            return Err(AppError::Empty(format!("{} is empty", args.file)));
        }
        let mut anything = false;
        let mut results = Vec::new();
        for (i, d) in docs.into_iter().enumerate() {
            let r = check_document(d.as_bytes(), &limits)?;
            anything |= r.request_count > 0 || !r.findings.is_empty();
            results.push((format!("document:{}", i + 1), r));
        }
        if !anything {
            return Err(AppError::Empty(format!(
                "{}: no request or response in it",
                args.file
            )));
        }
        report = crate::gate::evaluate(&gate, "exchange".into(), results, &[]);
        if args.format == crate::cli::CheckFormat::Json {
            // A document's result is printed bare, as seed 004 has it.
            let out: String = report
                .scopes
                .iter()
                .map(|s| format!("{}\n", serde_json::to_string(&s.result).unwrap_or_default()))
                .collect();
            write_out(args.output.as_deref(), &out)?;
            return Ok(i32::from(report.failed()));
        }
    }
    let out = match args.format {
        crate::cli::CheckFormat::Json => crate::gate::json(&report),
        crate::cli::CheckFormat::Text => crate::gate::text(&report),
        crate::cli::CheckFormat::Junit | crate::cli::CheckFormat::Html => {
            crate::gate::junit(&report)
        }
    };
    write_out(args.output.as_deref(), &out)?;
    Ok(i32::from(report.failed()))
}

/// `check --format html`: the recording's report under the gate's verdict (what failed it,
/// the drift against the baseline among it), with the diff against `--diff-from` and the
/// replay's output when given — what a CI job's artifact needs to say why it failed.
fn gated_report(
    args: &crate::cli::CheckArgs,
    rec: &crate::record::reader::Capture,
    report: &crate::gate::Report,
) -> Result<String, AppError> {
    let mut sections = vec![crate::record::report::Section {
        id: "gate",
        title: if report.failed() {
            "Gate: FAIL".into()
        } else {
            "Gate: pass".into()
        },
        failed: report.failed(),
        text: crate::gate::text(report),
    }];
    if let Some(golden) = &args.diff_from {
        let (gn, g) = recording_named(golden)?;
        let th = crate::diff::Thresholds {
            min_us: 100_000,
            ratio: 2.0,
        };
        let d = crate::diff::diff(&gn, &g, &args.file, rec, th);
        sections.push(crate::record::report::Section {
            id: "diff",
            title: format!("Diff against {gn}"),
            failed: d.regressions() > 0,
            text: crate::diff::text(&d),
        });
    }
    if let Some(f) = &args.replay_report {
        let text = std::fs::read_to_string(f)
            .map_err(|e| AppError::Io(format!("cannot read {}: {e}", f.display())))?;
        sections.push(crate::record::report::Section {
            id: "replay",
            title: format!("Replay ({})", f.display()),
            failed: false,
            text,
        });
    }
    Ok(crate::record::report::html_with(rec, &args.file, &sections))
}

/// A recording named by its path or, in the state directory, by its session name.
fn recording_named(what: &str) -> Result<(String, crate::record::reader::Capture), AppError> {
    let path = std::path::PathBuf::from(what);
    let path = if path.is_file() {
        path
    } else {
        crate::hub::Home::from_env()
            .and_then(|h| h.find(what))
            .map_err(|e| AppError::Io(format!("{what}: not a file, and {e}")))?
    };
    let rec = crate::record::reader::read(&path)?;
    Ok((path.display().to_string(), rec))
}

/// `rpctap baseline show|accept|reset`.
pub fn baseline(args: crate::cli::BaselineArgs) -> Result<i32, AppError> {
    use crate::cli::BaselineAction;
    let dir = match args.dir {
        Some(d) => d,
        None => crate::hub::Home::from_env()
            .map_err(|e| AppError::Io(e.to_string()))?
            .baselines(),
    };
    let io = |e: crate::baseline::BaselineError| AppError::Io(e.to_string());
    match args.action {
        BaselineAction::Show { label: Some(l) } => {
            match crate::baseline::load(&dir, &l).map_err(io)? {
                Some(b) => write_out(
                    None,
                    &format!("{}\n", serde_json::to_string_pretty(&b).unwrap_or_default()),
                )?,
                None => {
                    return Err(AppError::Empty(format!(
                        "no baseline for {l} in {}",
                        dir.display()
                    )))
                }
            }
        }
        BaselineAction::Show { label: None } => {
            let mut names: Vec<String> = std::fs::read_dir(&dir)
                .map(|rd| {
                    rd.flatten()
                        .filter_map(|e| {
                            let p = e.path();
                            let b: crate::baseline::Baseline =
                                serde_json::from_slice(&std::fs::read(&p).ok()?).ok()?;
                            Some(format!("{}\t{} tools", b.label, b.tools.len()))
                        })
                        .collect()
                })
                .unwrap_or_default();
            names.sort();
            let out: String = names.iter().map(|n| format!("{n}\n")).collect();
            write_out(None, &out)?;
        }
        BaselineAction::Accept { session, label } => {
            let (name, rec) = recording_named(&session)?;
            let label = label.unwrap_or_else(|| crate::gate::label(&rec.header));
            let Some(tools) = crate::diff::last_tool_list(&rec) else {
                return Err(AppError::Empty(format!(
                    "{name}: no complete tools/list in it"
                )));
            };
            let n = tools.len();
            let p = crate::baseline::save(
                &dir,
                &crate::baseline::Baseline {
                    label: label.clone(),
                    accepted_ns: crate::events::now_ns(),
                    tools,
                },
            )
            .map_err(io)?;
            eprintln!(
                "rpctap baseline: {label}: {n} tools from {name} accepted ({})",
                p.display()
            );
        }
        BaselineAction::Reset { label } => {
            let had = crate::baseline::reset(&dir, &label).map_err(io)?;
            eprintln!(
                "rpctap baseline: {label}: {}",
                if had { "reset" } else { "had no baseline" }
            );
        }
    }
    Ok(0)
}

/// `rpctap mcp`: the recordings as an MCP server on stdio.
pub async fn agent(args: crate::cli::McpArgs) -> Result<i32, AppError> {
    let source = match args.dir {
        Some(d) => crate::agent::Source::Dir(d),
        None => crate::agent::Source::Home(
            crate::hub::Home::from_env().map_err(|e| AppError::Io(e.to_string()))?,
        ),
    };
    crate::agent::serve_stdio(crate::agent::Agent {
        source: Some(source),
        own: None,
        allow_replay: args.allow_replay,
    })
    .await
    .map_err(|e| AppError::Io(format!("stdio: {e}")))?;
    Ok(0)
}

/// `rpctap diff A B`.
pub fn diff(args: crate::cli::DiffArgs) -> Result<i32, AppError> {
    let (an, a) = recording_named(&args.a)?;
    let (bn, b) = recording_named(&args.b)?;
    let th = crate::diff::Thresholds {
        min_us: (args.duration_threshold * 1e6) as u64,
        ratio: args.duration_ratio,
    };
    let d = crate::diff::diff(&an, &a, &bn, &b, th);
    let out = match args.format {
        crate::cli::DiffFormat::Text => crate::diff::text(&d),
        crate::cli::DiffFormat::Markdown => crate::diff::markdown(&d),
        crate::cli::DiffFormat::Json => {
            format!("{}\n", serde_json::to_string_pretty(&d).unwrap_or_default())
        }
    };
    write_out(None, &out)?;
    Ok(i32::from(args.exit_code && d.regressions() > 0))
}

/// `rpctap export`.
pub fn export(args: crate::cli::ExportArgs) -> Result<i32, AppError> {
    let rec = crate::record::reader::read(&args.file)?;
    let text = match args.format {
        crate::cli::ExportFormat::Exchange => {
            let (docs, warnings) =
                crate::record::export::exchange_documents(&rec, args.max_envelopes, args.max_bytes);
            for w in warnings {
                eprintln!("rpctap export: {w}");
            }
            docs.iter().map(|d| format!("{d}\n")).collect::<String>()
        }
        crate::cli::ExportFormat::Har => {
            format!(
                "{}\n",
                serde_json::to_string_pretty(&crate::record::export::har(&rec)).unwrap_or_default()
            )
        }
        crate::cli::ExportFormat::Html => {
            crate::record::report::html(&rec, &args.file.display().to_string())
        }
    };
    write_out(args.output.as_deref(), &text)?;
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::AppError;
    use crate::record::Error as R;

    /// One rule for every subcommand: the input wrong is 2, the run failed is 1 — a terminal
    /// that cannot be used is 1 in `view`, `watch` and `attach` as in `proxy` and `stdio`.
    #[test]
    fn the_variant_decides_the_exit_code() {
        let io = || std::io::Error::other("x");
        let p = std::path::PathBuf::from("f.jsonl");
        let two = [
            AppError::Io("cannot write out.xml".into()),
            AppError::Empty("f.jsonl".into()),
            AppError::Record(R::Read {
                path: p.clone(),
                source: io(),
            }),
            AppError::Record(R::Format {
                path: p.clone(),
                why: "x".into(),
            }),
            AppError::Record(R::Exists { path: p.clone() }),
            AppError::Config(crate::config::ConfigError::Invalid("x".into())),
        ];
        for e in two {
            assert_eq!(e.exit_code(), 2, "{e:?}");
        }
        let one = [
            AppError::Terminal("not a terminal".into()),
            AppError::Record(R::Write {
                path: p,
                source: io(),
            }),
            AppError::Bind {
                addr: ([127, 0, 0, 1], 1).into(),
                source: io(),
            },
        ];
        for e in one {
            assert_eq!(e.exit_code(), 1, "{e:?}");
        }
    }
}

//! `rpctap stdio -- COMMAND …`: the stdio transport (`crate::stdio`) wired to the inspector and
//! the observer chain: the child spawned, both relays and its stderr's started, the session
//! ended with the child's exit, rpctap's exit code the child's. Unless `--no-hub`, the session
//! joins the hub (`super::hub`): recorded into the state directory, its feed on a socket there.

use super::{AppError, Chain, Observers};
use crate::cli::{LogFormat, StdioArgs};
use crate::events::BusBuilder;
use crate::inspect::{EndReason, Inspector};
use crate::locks::Locked as _;
use crate::stdio::child::{catch_signals, describe_exit, exit_code, spawn, spawn_signal_forwarder};
use crate::stdio::relay::{client_to_server, server_to_client, ClientOut};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// `rpctap stdio`: returns the exit code (the child's status).
pub async fn run(args: StdioArgs) -> Result<i32, AppError> {
    let flags = args.flags();
    let file = crate::config::load_file(&flags)?;
    // stdout is the client's: the log is off unless asked for, and then on stderr or a file.
    let mut shared = crate::config::resolve_shared(&flags, &file, LogFormat::Off)?;
    let limiter = crate::config::limiter(
        &shared.limits,
        shared.limit_code,
        &shared.faults,
        &shared.deny,
        crate::flow::fault::Carrier::Stdio,
    )?;
    let faults_on = !limiter.stages.is_empty();
    let limiter = Arc::new(limiter);
    let log_out: Option<Box<dyn Write + Send>> = match (&shared.log, &args.log_file) {
        (LogFormat::Off, _) => None,
        (_, Some(p)) => Some(Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| {
                    crate::config::ConfigError::Invalid(format!("--log-file {}: {e}", p.display()))
                })?,
        )),
        (_, None) => Some(Box::new(std::io::stderr())),
    };

    // What the recording, the feed and the hub hold of the command: its secrets scrubbed (and
    // those secrets scrubbed from its stderr too). Its environment is never recorded.
    // With --upstream: the URL and the headers' names (never their values).
    let described: Vec<String> = match &args.upstream {
        Some(url) => std::iter::once(format!("--upstream={url}"))
            .chain(args.headers.iter().map(|h| {
                format!(
                    "--header={}=…",
                    h.split_once('=').map(|(n, _)| n).unwrap_or(h)
                )
            }))
            .collect(),
        None => args.command.clone(),
    };
    let (command, secrets) = crate::hub::command::scrub(&described);
    let label = args
        .label
        .as_deref()
        .map(crate::hub::command::sanitize)
        .unwrap_or_else(|| match &args.upstream {
            Some(url) => url
                .parse::<http::Uri>()
                .ok()
                .and_then(|u| u.host().map(crate::hub::command::sanitize))
                .unwrap_or_else(|| "upstream".into()),
            None => crate::hub::command::label_of(&args.command),
        });
    let mut plan = if args.no_hub {
        None
    } else {
        super::hub::prepare(
            label.clone(),
            "stdio",
            command.clone(),
            args.no_record,
            &shared.record,
            &shared.admin,
            &mut shared.inspect,
        )
    };

    let caught = catch_signals();
    let mut server = match &args.upstream {
        Some(url) => {
            let uri = crate::config::parse_upstream(url)?;
            let headers = args
                .headers
                .iter()
                .map(|h| crate::bridge::remote::parse_header(h))
                .collect::<Result<Vec<_>, _>>()
                .map_err(crate::config::ConfigError::Invalid)?;
            let max = shared.inspect.max_frame_bytes;
            match crate::bridge::remote::Remote::start(uri, headers, args.upstream_insecure, max) {
                Ok(r) => Server::Remote(r),
                Err(e) => {
                    return Err(AppError::Terminal(format!(
                        "cannot start the bridge to {url}: {e}"
                    )))
                }
            }
        }
        None => match spawn(&args.command) {
            Ok(c) => Server::Child(c),
            Err(e) => {
                eprintln!("rpctap: cannot run {:?}: {e}", args.command.join(" "));
                return Ok(match e.kind() {
                    std::io::ErrorKind::NotFound => 127,
                    _ => 126,
                });
            }
        },
    };
    let pid = server.pid();
    let session = match &plan {
        Some(p) => p.name.clone(),
        None => format!("stdio-{pid}"),
    };
    let server_pid = server.child_pid();
    let chain = |plan: Option<&super::hub::Plan>, log_out: Box<dyn Write + Send>| {
        let mut record_meta = serde_json::json!({
            "transport": "stdio",
            "command": &command,
            "pid": pid,
            "label": &label,
            "inspect": shared.inspect.recorded_json(),
        });
        if let Some(url) = &args.upstream {
            record_meta["upstream"] =
                serde_json::json!(crate::hub::command::scrub(std::slice::from_ref(url)).0[0]);
        }
        let mut feed_header = serde_json::json!({ "mode": "stdio", "command": &command, "pid": pid, "label": &label });
        if let Some(p) = plan {
            super::hub::merge(&mut record_meta, p.meta());
            super::hub::merge(&mut feed_header, p.meta());
        }
        // `--no-record` wins over a recording the config file names.
        let record = match args.no_record {
            true => None,
            false => super::hub::Plan::record(plan, &shared.record),
        };
        Chain {
            log: shared.log,
            log_out,
            record,
            record_meta,
            admin: super::hub::Plan::admin(plan, &shared.admin),
            feed_header,
            otel: shared.otel.clone(),
            otel_upstream: None,
            dashboard: args.dashboard.then_some(crate::tui::INTEREST),
            hub: plan.map(|p| (p.clone(), server_pid)),
        }
    };
    // One writer for every attempt below (a retry must not lose the log).
    let log_out = log_out.map(|w| SharedWriter(Arc::new(Mutex::new(w))));
    let mut bus = BusBuilder::default();
    let mut observers = loop {
        let out: Box<dyn Write + Send> = match &log_out {
            Some(w) => Box::new(w.clone()),
            None => Box::new(std::io::sink()),
        };
        match Observers::attach(chain(plan.as_ref(), out), &mut bus).await {
            Ok(o) => break o,
            // What the hub added failed (a full disk, a socket path too long): the session
            // goes on without it, as without the hub.
            Err(e) if plan.as_mut().is_some_and(|p| p.give_up(&e)) => {
                bus = BusBuilder::default();
            }
            Err(e) => {
                server.kill();
                return Err(e);
            }
        }
    };
    let mut inspect = shared.inspect.clone();
    inspect.baseline =
        super::hub::live_baseline(shared.baseline_dir.as_deref(), plan.is_some(), &label);
    // `--dashboard`: the dashboard on the terminal, with its intercept.
    let dashboard = match observers.take_dashboard() {
        Some(sub) => Some(start_dashboard(&args, &label, &command, sub, &shared)?),
        None => None,
    };
    let hold = dashboard.as_ref().map(|d| crate::stdio::relay::Hold {
        intercept: d.intercept.clone(),
        rt: tokio::runtime::Handle::current(),
    });
    let inspector = Inspector::new(inspect, bus.build());
    observers.start(|s| s.inspector = Some(inspector.clone()));
    if let (Some(o), None) = (&observers.admin, &plan) {
        eprintln!("{}", o.banner());
    }
    let sweeper = inspector.spawn_sweeper();
    let ctx = Arc::new(Mutex::new(inspector.begin_stream(&session)));
    let max = shared.inspect.max_frame_bytes;
    let out = Arc::new(Mutex::new(ClientOut::new()));

    // Client → server.
    let Some((child_in, mut child_out)) = server.pipes() else {
        server.kill();
        return Err(AppError::Terminal(
            "the child's pipes were not set up".into(),
        ));
    };
    let child_in: crate::stdio::relay::ChildIn = Arc::new(Mutex::new(child_in));
    // The server's requests decided by `direction = "s2c"` rules.
    let requests = limiter
        .stages
        .wants(crate::events::Direction::ServerToClient)
        .then(|| crate::stdio::relay::ServerRequests {
            limiter: limiter.clone(),
            session: session.clone(),
            child_in: Arc::downgrade(&child_in),
        });
    {
        let ctx = ctx.clone();
        let out = out.clone();
        // Whole lines for the rules, and for the dashboard's intercept.
        let limiter = (!limiter.is_empty() || hold.is_some()).then_some(limiter);
        let session = session.clone();
        let rt = tokio::runtime::Handle::current();
        let hold = hold.clone();
        std::thread::Builder::new()
            .name("rpctap-stdin".into())
            .spawn(move || {
                let l = limiter.as_deref();
                client_to_server(
                    child_in,
                    &ctx,
                    &out,
                    l,
                    max,
                    &session,
                    Some(&rt),
                    hold.as_ref(),
                );
            })
            .map_err(|e| AppError::Terminal(format!("cannot start the relay: {e}")))?;
    }
    // Server → client: ends at the child's stdout EOF.
    let (s2c_done, s2c_rx) = tokio::sync::oneshot::channel::<()>();
    {
        let ctx = ctx.clone();
        let out = out.clone();
        std::thread::Builder::new()
            .name("rpctap-stdout".into())
            .spawn(move || {
                server_to_client(
                    &mut child_out,
                    &ctx,
                    &out,
                    max,
                    faults_on,
                    hold.as_ref(),
                    requests.as_ref(),
                );
                let _ = s2c_done.send(());
            })
            .map_err(|e| AppError::Terminal(format!("cannot start the relay: {e}")))?;
    }
    // The server's stderr: passed on unchanged, each line a bounded `stderr` event.
    let stderr_done = server.stderr().and_then(|err| {
        let inspector = inspector.clone();
        let scope = crate::events::Scope::Session(session.as_str().into());
        std::thread::Builder::new()
            .name("rpctap-stderr".into())
            .spawn(move || {
                crate::stdio::relay::server_stderr(
                    err,
                    std::io::stderr(),
                    crate::events::STDERR_LINE_MAX,
                    |line, cut| {
                        let text = String::from_utf8_lossy(line);
                        inspector.publish(crate::events::Event::Stderr(
                            crate::events::StderrEvent {
                                ts: crate::events::now_ns(),
                                scope: scope.clone(),
                                line: crate::hub::command::scrub_text(&text, &secrets),
                                cut,
                            },
                        ));
                    },
                );
            })
            .ok()
    });
    let signals = server
        .child_pid()
        .map(|pid| spawn_signal_forwarder(pid, caught));
    let alive = observers.admin.as_ref().map(|o| {
        let ready = o.ready.clone();
        let every = ready_interval(&shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every / 2);
            loop {
                tick.tick().await;
                ready.ok();
            }
        })
    });
    let (how, code) = server.wait().await?;
    if let Some(s) = signals {
        s.abort();
    }
    if let Some(a) = alive {
        a.abort();
    }
    if let Some(o) = &observers.admin {
        o.ready.failed(how.clone());
    }
    // What the child wrote before it exited is relayed and inspected before its calls end (a
    // grandchild that keeps the pipe open gets two seconds).
    let _ = tokio::time::timeout(Duration::from_secs(2), s2c_rx).await;
    if let Some(t) = stderr_done {
        // Its last lines are in the recording before the session ends (a grandchild holding
        // the pipe is not waited for).
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::task::spawn_blocking(move || t.join()),
        )
        .await;
    }
    ctx.locked().end(EndReason::Closed(how.clone()));
    tracing::info!(pid, status = %how, "server exited");
    if let Some(d) = dashboard {
        d.stop().await;
    }
    sweeper.abort();
    drop(ctx);
    drop(inspector);
    observers.finish().await;
    Ok(code)
}

/// `stdio --dashboard`'s dashboard: on a thread of its own (its own runtime, at a lower
/// priority), drawing on /dev/tty; it ends when the session does (or on `q`, the session going
/// on without it).
struct Dashboard {
    intercept: crate::flow::intercept::Intercept,
    stop: tokio::sync::oneshot::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Dashboard {
    /// Ends it and waits (a second at most) for the terminal to be restored.
    async fn stop(self) {
        let _ = self.stop.send(());
        let t = self.thread;
        let _ = tokio::time::timeout(
            Duration::from_secs(1),
            tokio::task::spawn_blocking(move || t.join()),
        )
        .await;
    }
}

fn start_dashboard(
    args: &StdioArgs,
    label: &str,
    command: &[String],
    sub: crate::events::Subscription,
    shared: &crate::config::Shared,
) -> Result<Dashboard, AppError> {
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    {
        return Err(AppError::Terminal(format!(
            "--dashboard needs a terminal (/dev/tty): {e} — a client started by a desktop app has none; watch it with `rpctap watch` instead"
        )));
    }
    let timeout = args
        .intercept_timeout
        .map(Duration::from_secs_f64)
        .unwrap_or(crate::flow::intercept::DEFAULT_TIMEOUT);
    let intercept =
        crate::flow::intercept::Intercept::redacting(timeout, shared.inspect.redact.clone());
    if let Some(f) = &args.intercept {
        let parsed = crate::filter::Filter::parse(f)
            .map_err(|why| crate::config::ConfigError::Invalid(format!("--intercept: {why}")))?;
        intercept.set_filter(Some(parsed));
    }
    let mut app = crate::view::App::new(
        &format!("rpctap stdio {label}"),
        "stdio",
        &command.join(" "),
        100_000,
        crate::events::now_ns(),
    );
    app.status =
        "the session's dashboard: I intercepts its messages, q closes it (the session goes on)"
            .into();
    app.held.filter = args.intercept.clone().unwrap_or_default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let ic = intercept.clone();
    let thread = std::thread::Builder::new()
        .name("rpctap-dashboard".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => {
                    tracing::warn!(error = %e, "the dashboard could not start");
                    return;
                }
            };
            let r = rt.block_on(crate::tui::run(
                app,
                Some(crate::tui::Source::Bus(sub)),
                async move {
                    let _ = stopped.await;
                },
                None,
                None,
                Some(ic),
                crate::tui::Screen::Tty,
            ));
            if let Err(e) = r {
                tracing::warn!(error = %e, "the dashboard ended");
            }
        })
        .map_err(|e| AppError::Terminal(format!("cannot start the dashboard: {e}")))?;
    Ok(Dashboard {
        intercept,
        stop,
        thread,
    })
}

/// What the relays talk to: a child process, or a remote HTTP server (`--upstream`).
enum Server {
    Child(std::process::Child),
    Remote(crate::bridge::remote::Remote),
}

type Pipes = (Box<dyn Write + Send>, Box<dyn std::io::Read + Send>);

impl Server {
    /// The child's pid, or rpctap's own for a remote server (it names the session).
    fn pid(&self) -> u32 {
        self.child_pid().unwrap_or_else(std::process::id)
    }

    fn child_pid(&self) -> Option<u32> {
        match self {
            Server::Child(c) => Some(c.id()),
            Server::Remote(_) => None,
        }
    }

    fn pipes(&mut self) -> Option<Pipes> {
        match self {
            Server::Child(c) => {
                let (i, o) = (c.stdin.take()?, c.stdout.take()?);
                Some((Box::new(i), Box::new(o)))
            }
            Server::Remote(r) => {
                let (i, o) = r.take_pipes()?;
                Some((Box::new(i), Box::new(o)))
            }
        }
    }

    fn stderr(&mut self) -> Option<std::process::ChildStderr> {
        match self {
            Server::Child(c) => c.stderr.take(),
            Server::Remote(_) => None,
        }
    }

    fn kill(self) {
        if let Server::Child(mut c) = self {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Waits for the end: the child's exit (how, and its shell exit code), or the remote
    /// session's (0).
    async fn wait(self) -> Result<(String, i32), AppError> {
        match self {
            Server::Child(mut c) => {
                let status = tokio::task::spawn_blocking(move || c.wait())
                    .await
                    .map_err(|e| AppError::Terminal(format!("waiting for the server: {e}")))?
                    .map_err(|e| AppError::Terminal(format!("waiting for the server: {e}")))?;
                Ok((describe_exit(&status), exit_code(&status)))
            }
            Server::Remote(r) => Ok((r.wait().await, 0)),
        }
    }
}

/// The log's writer, shared by the attempts to attach the observers.
#[derive(Clone)]
struct SharedWriter(Arc<Mutex<Box<dyn Write + Send>>>);

impl Write for SharedWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.locked().write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.locked().flush()
    }
}

fn ready_interval(shared: &crate::config::Shared) -> Duration {
    shared
        .admin
        .as_ref()
        .map(|a| a.ready_interval)
        .unwrap_or(Duration::from_secs(5))
        .max(Duration::from_millis(50))
}

//! rpctap's own proxy run inside another subcommand, in front of a server on a loopback port of
//! its own (bound to port 0: no port is picked and freed before the proxy takes it): `probe` and
//! `test` speak through it so everything they send is inspected and recorded as live traffic is,
//! and `replay --update` records the target's new answers through it. It is configured from the
//! same flags `proxy` and `serve` take (parsed by clap, resolved by `config`), so it is the proxy
//! users run, not a copy.

use super::{AppError, RunningProxy};
use std::net::SocketAddr;
use std::path::Path;

/// What the proxy goes in front of.
#[derive(Debug, Clone)]
pub enum InFront {
    /// An HTTP server (its URL: the proxy's `--upstream`).
    Upstream(String),
    /// A stdio server's command (`serve`'s bridge, a child per session).
    Command(Vec<String>),
}

/// The proxy, serving until [`Running::finish`].
pub struct Running {
    pub addr: SocketAddr,
    /// Where it serves MCP (`serve`'s `--path`; `/` in front of an upstream).
    pub path: String,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

/// Clap's parse of flags for a subcommand's `Args`.
fn args_of<A: clap::Args + clap::FromArgMatches>(argv: &[String]) -> Result<A, AppError> {
    let cmd = A::augment_args(clap::Command::new("rpctap").no_binary_name(true));
    let m = cmd
        .try_get_matches_from(argv)
        .map_err(|e| AppError::Io(format!("the in-process proxy's flags: {e}")))?;
    A::from_arg_matches(&m).map_err(|e| AppError::Io(format!("the in-process proxy's flags: {e}")))
}

/// Starts the proxy headless (no dashboard, no log) on `127.0.0.1:0`, recording to `record`
/// when given.
pub async fn start(to: &InFront, record: Option<&Path>) -> Result<Running, AppError> {
    let mut argv: Vec<String> = ["--listen", "127.0.0.1:0", "--no-tui", "--log", "off"]
        .into_iter()
        .map(String::from)
        .collect();
    if let Some(r) = record {
        argv.push("--record".into());
        argv.push(r.display().to_string());
    }
    let (cfg, path) = match to {
        InFront::Upstream(u) => {
            argv.push("--upstream".into());
            argv.push(u.clone());
            let a: crate::cli::ProxyArgs = args_of(&argv)?;
            let cfg = crate::config::resolve(a.listen, a.upstream.as_deref(), &a.flags)?;
            (cfg, "/".to_string())
        }
        InFront::Command(c) => {
            argv.push("--".into());
            argv.extend(c.iter().cloned());
            let a: crate::cli::ServeArgs = args_of(&argv)?;
            let path = a.path.clone();
            (crate::config::resolve_serve(&a)?.cfg, path)
        }
    };
    let running = RunningProxy::bind(cfg).await?;
    let addr = running
        .local_addr()
        .ok_or_else(|| AppError::Io("the in-process proxy has no address".into()))?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(running.serve(async move {
        let _ = stopped.await;
    }));
    Ok(Running {
        addr,
        path,
        stop,
        task,
    })
}

impl Running {
    /// Stops the proxy and drains it: its recording is flushed whole when this returns.
    pub async fn finish(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

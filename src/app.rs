//! The subcommands wired together: what `main` runs. Each takes a `shutdown` future so tests
//! can stop them with a oneshot and `main` with SIGINT/SIGTERM.

use crate::cli::{DemoArgs, DemoServerArgs, LogFormat, ProxyArgs};
use crate::config::{self, ProxyConfig};
use crate::demo::{self, DemoOptions};
use crate::events::BusBuilder;
use crate::inspect::Inspector;
use crate::proxy::Proxy;
use crate::{logsink, server};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

/// Errors at the edge of a subcommand.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

impl AppError {
    /// 2 for usage errors, 1 for everything else.
    pub fn exit_code(&self) -> i32 {
        match self {
            AppError::Config(_) => 2,
            AppError::Bind { .. } => 1,
        }
    }
}

async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })
}

/// A proxy ready to serve: its listener bound, its inspector and observers built.
pub struct RunningProxy {
    pub listener: TcpListener,
    pub proxy: Proxy,
    pub cfg: ProxyConfig,
    log: Option<crate::events::Subscription>,
}

impl RunningProxy {
    pub async fn bind(cfg: ProxyConfig) -> Result<Self, AppError> {
        Self::bind_with(cfg, BusBuilder::default()).await
    }

    /// Like `bind`, with extra subscribers already on the bus (tests, the dashboard).
    pub async fn bind_with(cfg: ProxyConfig, mut bus: BusBuilder) -> Result<Self, AppError> {
        let listener = bind(cfg.listen).await?;
        let log = (cfg.log != LogFormat::Off).then(|| bus.subscribe("log", 65_536));
        let inspector = Inspector::new(cfg.inspect, bus.build());
        let proxy = Proxy::new(cfg.proxy.clone(), inspector);
        Ok(RunningProxy {
            listener,
            proxy,
            cfg,
            log,
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
            log,
        } = self;
        let log_task = log.map(|sub| {
            let format = cfg.log;
            tokio::spawn(logsink::run(sub, format, std::io::stdout()))
        });
        let sweeper = proxy.inspector().spawn_sweeper();
        tracing::info!(listen = %cfg.listen, upstream = %cfg.proxy.upstream, "rpctap proxy listening");
        let p = proxy.clone();
        server::serve(
            listener,
            move |req, peer| {
                let p = p.clone();
                async move { p.handle(req, peer).await }
            },
            shutdown,
            cfg.grace,
        )
        .await;
        sweeper.abort();
        drop(proxy);
        if let Some(t) = log_task {
            // The log ends when every sender (held by the inspector) is gone; don't wait forever
            // on connections that outlived the grace period.
            let _ = tokio::time::timeout(Duration::from_millis(500), t).await;
        }
    }
}

/// `rpctap proxy`.
pub async fn proxy(args: ProxyArgs, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
    let cfg = config::resolve(args.listen, args.upstream.as_deref(), &args.flags)?;
    let running = RunningProxy::bind(cfg).await?;
    running.serve(shutdown).await;
    Ok(())
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
        max_delay: Duration::from_millis(args.max_delay_ms),
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
    let cfg = config::resolve(Some(args.listen), Some(&upstream), &args.flags)?;
    let running = RunningProxy::bind(cfg).await?;
    let addr = running.local_addr().unwrap_or(args.listen);
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
    eprintln!("{}", demo_banner(addr, demo_addr));
    running.serve(shutdown).await;
    let _ = stop_tx.send(true);
    let _ = demo_task.await;
    Ok(())
}

fn demo_banner(addr: SocketAddr, demo_addr: SocketAddr) -> String {
    format!(
        "rpctap demo: proxy on http://{addr} → demo server on http://{demo_addr}\n\
         Try, in another terminal:\n\
         \x20 curl -s http://{addr}/jsonrpc -H 'content-type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"method\":\"add\",\"params\":[1,2,4],\"id\":1}}'\n\
         \x20 curl -s http://{addr}/jsonrpc -H 'content-type: application/json' -d '[{{\"jsonrpc\":\"2.0\",\"method\":\"echo\",\"params\":[\"x\"],\"id\":\"a\"}},{{\"jsonrpc\":\"2.0\",\"method\":\"nope\",\"id\":\"b\"}}]'\n\
         \x20 curl -s http://{addr}/jsonrpc -H 'content-type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"method\":\"sleep\",\"params\":{{\"ms\":500}},\"id\":2}}'\n\
         \x20 curl -si http://{addr}/mcp -H 'content-type: application/json' -H 'accept: application/json, text/event-stream' -d '{{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{{\"protocolVersion\":\"2025-06-18\",\"capabilities\":{{}},\"clientInfo\":{{\"name\":\"curl\",\"version\":\"1\"}}}}}}'\n\
         Press Ctrl-C to stop."
    )
}

//! `rpctap demo` (the embedded demo upstream behind a proxy, with its instructions) and
//! `rpctap demo-server` (the upstream alone).

use super::proxy::{bind, serve_maybe_tui};
use super::AppError;
use crate::cli::{DemoArgs, DemoServerArgs};
use crate::config::{self};
use crate::demo::{self, DemoOptions};
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

/// `rpctap demo-server`.
pub async fn server(
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
pub async fn run(args: DemoArgs, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
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

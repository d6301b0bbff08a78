//! `rpctap serve --listen ADDR -- COMMAND …`: the proxy with the bridge (`crate::bridge`) as
//! its upstream — a Streamable HTTP MCP endpoint in front of a stdio server, one child per
//! session (or one for all with `--shared`). Everything `proxy` has applies: the dashboard or
//! the log, recording, limits, the admin listener (`/readyz` ready when a child can be
//! started), the feed, `--hub`, OTLP.

use super::AppError;
use crate::cli::ServeArgs;
use std::future::Future;
use std::net::SocketAddr;

/// `rpctap serve`.
pub async fn run(args: ServeArgs, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
    let crate::config::Serve {
        mut cfg,
        label,
        command,
    } = crate::config::resolve_serve(&args)?;
    let plan = if args.hub {
        super::hub::prepare(
            label.clone(),
            "serve",
            command,
            args.no_record,
            &cfg.record,
            &cfg.admin,
            &mut cfg.inspect,
        )
    } else {
        None
    };
    let path = args.path.clone();
    let shared = args.shared;
    let banner = move |addr: SocketAddr| {
        format!(
            "rpctap: serve on http://{addr} → {label}, endpoint {path} ({})",
            if shared {
                "one server for every session"
            } else {
                "one server per session"
            }
        )
    };
    super::proxy::serve_maybe_tui(cfg, plan, "rpctap serve", shutdown, Some(&banner)).await
}

//! `rpctap serve --listen ADDR -- COMMAND …`: the proxy with the bridge (`crate::bridge`) as
//! its upstream — a Streamable HTTP MCP endpoint in front of a stdio server, one child per
//! session (or one for all with `--shared`). Everything `proxy` has applies: the dashboard or
//! the log, recording, limits, the admin listener (`/readyz` ready when a child can be
//! started), the feed, `--hub`, OTLP.

use super::AppError;
use crate::cli::ServeArgs;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;

/// Sessions served at once unless `--max-sessions` says otherwise.
pub const DEFAULT_MAX_SESSIONS: usize = 100;

/// `rpctap serve`.
pub async fn run(args: ServeArgs, shutdown: impl Future<Output = ()>) -> Result<(), AppError> {
    let label = args
        .label
        .as_deref()
        .map(crate::hub::command::sanitize)
        .unwrap_or_else(|| crate::hub::command::label_of(&args.command));
    // The config's upstream is the bridge: named after the command, never reached by network.
    let mut cfg = crate::config::resolve(args.listen, Some("http://localhost/"), &args.flags)?;
    cfg.proxy.upstream = format!("stdio://{label}/")
        .parse()
        .unwrap_or_else(|_| http::Uri::from_static("stdio://server/"));
    if !args.path.starts_with('/') {
        return Err(crate::config::ConfigError::Invalid(format!(
            "--path {:?} must start with /",
            args.path
        ))
        .into());
    }
    let token = args.auth_token.clone().filter(|t| !t.is_empty());
    if token.is_none() && crate::server::guard::Guard::needs_token(&cfg.listen) {
        return Err(crate::config::ConfigError::Invalid(format!(
            "--listen {} is not a loopback address: anyone who reaches it could run the server's tools; set --auth-token (or RPCTAP_SERVE_TOKEN)",
            cfg.listen
        ))
        .into());
    }
    cfg.guard = Some(crate::server::guard::GuardConfig {
        allow_hosts: args.allow_host.clone(),
        allow_origins: args.allow_origin.clone(),
        token,
        json_posts: true,
    });
    // `--max-sessions` caps the sessions served (each a child) and, as everywhere, those the
    // inspector remembers.
    let max_sessions = args
        .flags
        .shared
        .max_sessions
        .unwrap_or(DEFAULT_MAX_SESSIONS);
    let (command, secrets) = crate::hub::command::scrub(&args.command);
    let plan = if args.hub {
        super::hub::prepare(
            label.clone(),
            "serve",
            command.clone(),
            args.no_record,
            &cfg.record,
            &cfg.admin,
            &mut cfg.inspect,
        )
    } else {
        None
    };
    cfg.session_meta = Some(serde_json::json!({
        "transport": "serve",
        "command": command,
        "label": label,
    }));
    let tui = super::proxy::use_tui(&cfg);
    cfg.bridge = Some(crate::bridge::BridgeOptions {
        command: args.command.clone(),
        path: args.path.clone(),
        shared: args.shared,
        restart: args.restart,
        session_idle: Duration::from_secs_f64(args.session_idle.max(0.01)),
        max_sessions,
        stop_grace: Duration::from_secs_f64(args.stop_grace),
        legacy_sse: args.legacy_sse,
        max_line: cfg.inspect.max_frame_bytes,
        keepalive: Duration::from_secs(15),
        pass_stderr: !tui,
        secrets,
    });
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

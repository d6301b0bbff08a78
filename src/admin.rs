//! The admin listener (`--admin ADDR`, a TCP address or `unix:PATH`): health and readiness
//! probes, Prometheus metrics, the live event feed and the recent calls.
//!
//! - `GET /healthz` — 200 while the process serves.
//! - `GET /readyz` — 200 when the upstream answered a probe within the last interval (a TCP
//!   connect, or `GET ready_path`; for `rpctap stdio`, while the child runs); 503 with a
//!   one-line reason otherwise, and during graceful shutdown.
//! - `GET /metrics` — the Prometheus text exposition ([`crate::observe::metrics`]).
//! - `GET /events` — the live feed as NDJSON ([`crate::observe::feed`]).
//! - `GET /calls?limit=N` — the most recent ended calls as a JSON array (newest last).
//!
//! `/events` and `/calls` carry the traffic itself: on a loopback address or a unix socket they
//! are open; on any other address rpctap refuses to start without a token, and then they need
//! `Authorization: Bearer TOKEN` (compared in constant time). The probes and the metrics carry
//! no message content and are always open.

use crate::locks::Locked as _;
use crate::observe::feed::Feed;
use crate::observe::metrics::Metrics;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Where the admin listener listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl AdminAddr {
    /// `unix:PATH`, or a listen address as `--listen` takes it.
    pub fn parse(s: &str) -> Result<AdminAddr, String> {
        if let Some(p) = s.strip_prefix("unix:") {
            if p.is_empty() {
                return Err("unix: needs a path, e.g. unix:/run/rpctap/admin.sock".into());
            }
            return Ok(AdminAddr::Unix(PathBuf::from(p)));
        }
        crate::cli::parse_listen(s).map(AdminAddr::Tcp)
    }
    /// Whether only this machine can reach it (loopback, or a unix socket).
    pub fn is_local(&self) -> bool {
        match self {
            AdminAddr::Tcp(a) => a.ip().is_loopback(),
            AdminAddr::Unix(_) => true,
        }
    }
}

impl std::fmt::Display for AdminAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdminAddr::Tcp(a) => write!(f, "{a}"),
            AdminAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// Validated admin settings.
#[derive(Clone, Debug)]
pub struct AdminConfig {
    pub addr: AdminAddr,
    /// Required for `/events` and `/calls` when set (and to start on a non-local address).
    pub token: Option<String>,
    /// Probe the upstream with `GET` of this path instead of a TCP connect.
    pub ready_path: Option<String>,
    /// How often the upstream is probed; ready means a probe succeeded within the last one.
    pub ready_interval: Duration,
    /// Distinct `method` / `target` label values before `other`.
    pub max_label_values: usize,
}

/// Errors starting the admin listener.
#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    #[error("--admin {0} is not a loopback address: /events and /calls would expose the traffic; set --admin-token (or RPCTAP_ADMIN_TOKEN)")]
    TokenRequired(AdminAddr),
    #[error("--admin {0}: another rpctap is serving on that socket (still answering); choose another path")]
    InUse(AdminAddr),
    #[error("cannot listen on admin address {addr}: {source}")]
    Bind {
        addr: AdminAddr,
        source: std::io::Error,
    },
}

/// Whether the process is ready to serve: set by probes, cleared at shutdown.
#[derive(Debug)]
pub struct Readiness {
    started: Instant,
    shutting_down: AtomicBool,
    /// Milliseconds since `started` of the last successful probe, +1 (0: none yet).
    last_ok_ms: AtomicU64,
    interval: Duration,
    /// Why the last probe failed.
    why: Mutex<String>,
}

impl Readiness {
    pub fn new(interval: Duration) -> Arc<Self> {
        Arc::new(Readiness {
            started: Instant::now(),
            shutting_down: AtomicBool::new(false),
            last_ok_ms: AtomicU64::new(0),
            interval,
            why: Mutex::new("the upstream has not been probed yet".into()),
        })
    }
    pub fn ok(&self) {
        let ms = self.started.elapsed().as_millis() as u64 + 1;
        self.last_ok_ms.store(ms, Ordering::Relaxed);
    }
    pub fn failed(&self, why: String) {
        self.last_ok_ms.store(0, Ordering::Relaxed);
        *self.why.locked() = why;
    }
    pub fn shutting_down(&self) {
        self.shutting_down.store(true, Ordering::Relaxed);
    }
    /// `Ok` when ready, else the reason.
    pub fn state(&self) -> Result<(), String> {
        if self.shutting_down.load(Ordering::Relaxed) {
            return Err("shutting down".into());
        }
        let last = self.last_ok_ms.load(Ordering::Relaxed);
        if last == 0 {
            return Err(self.why.locked().clone());
        }
        let age = Duration::from_millis(self.started.elapsed().as_millis() as u64 + 1 - last);
        // A probe runs every interval: allow one missed beat of scheduling slack.
        if age > self.interval * 2 + Duration::from_millis(500) {
            return Err(format!(
                "the upstream has not answered a probe for {:.1} s",
                age.as_secs_f64()
            ));
        }
        Ok(())
    }
}

/// Probes `upstream` every `interval` until aborted: a TCP connect to its host and port, or a
/// `GET` of `path` (any HTTP status below 500 counts as an answer).
pub fn spawn_upstream_probe(
    upstream: http::Uri,
    path: Option<String>,
    insecure: bool,
    ready: Arc<Readiness>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let host = upstream.host().unwrap_or("127.0.0.1").to_string();
        let port = upstream
            .port_u16()
            .unwrap_or(if upstream.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        let client = path
            .as_ref()
            .map(|_| crate::proxy::upstream::probe_client(insecure));
        let mut tick = tokio::time::interval(ready.interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let limit = ready.interval.max(Duration::from_millis(200));
            let res: Result<(), String> = match (&client, &path) {
                (Some(c), Some(p)) => {
                    let base = upstream.to_string();
                    let url = format!("{}{}", base.trim_end_matches('/'), p);
                    match http::Request::get(&url).body(http_body_util::Empty::<Bytes>::new()) {
                        Ok(req) => match tokio::time::timeout(limit, c.request(req)).await {
                            Ok(Ok(r)) if r.status().as_u16() < 500 => Ok(()),
                            Ok(Ok(r)) => Err(format!("GET {url} answered {}", r.status())),
                            Ok(Err(e)) => Err(format!("GET {url} failed: {e}")),
                            Err(_) => Err(format!("GET {url} timed out")),
                        },
                        Err(e) => Err(format!("bad ready path {p:?}: {e}")),
                    }
                }
                _ => match tokio::time::timeout(
                    limit,
                    tokio::net::TcpStream::connect((host.as_str(), port)),
                )
                .await
                {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(format!("upstream {host}:{port} refused a connection: {e}")),
                    Err(_) => Err(format!(
                        "upstream {host}:{port} did not accept a connection"
                    )),
                },
            };
            match res {
                Ok(()) => ready.ok(),
                Err(why) => ready.failed(why),
            }
        }
    })
}

/// What the admin listener serves from.
#[derive(Clone)]
pub struct AdminState {
    pub metrics: Arc<Metrics>,
    pub feed: Feed,
    pub ready: Arc<Readiness>,
    pub token: Option<String>,
    /// `/mcp`: what answers one JSON-RPC message of the agent API (`rpctap mcp` over HTTP,
    /// with this rpctap's own live session); given by the app, which knows the agent.
    pub agent: Option<McpHandler>,
}

/// Answers one JSON-RPC message (its reply, or `None` for a notification).
pub type McpHandler = Arc<
    dyn Fn(serde_json::Value) -> futures_util::future::BoxFuture<'static, Option<serde_json::Value>>
        + Send
        + Sync,
>;

/// The running admin listener; dropping it (or `stop`) closes it and every connection.
pub struct AdminHandle {
    task: tokio::task::JoinHandle<()>,
    pub addr: AdminAddr,
    /// A unix socket this process made: (its path, device, inode), removed at the end if it is
    /// still that file (a later process may have replaced a socket it found dead).
    owned: Option<(PathBuf, u64, u64)>,
}

impl AdminHandle {
    pub fn stop(self) {
        self.task.abort();
    }
}

impl Drop for AdminHandle {
    fn drop(&mut self) {
        self.task.abort();
        #[cfg(unix)]
        if let Some((p, dev, ino)) = &self.owned {
            use std::os::unix::fs::MetadataExt;
            if std::fs::symlink_metadata(p).is_ok_and(|m| m.dev() == *dev && m.ino() == *ino) {
                let _ = std::fs::remove_file(p);
            }
        }
    }
}

/// Binds the admin listener and serves it in the background.
pub async fn start(cfg: &AdminConfig, state: AdminState) -> Result<AdminHandle, AdminError> {
    if !cfg.addr.is_local() && cfg.token.as_deref().is_none_or(str::is_empty) {
        return Err(AdminError::TokenRequired(cfg.addr.clone()));
    }
    let bind_err = |source| AdminError::Bind {
        addr: cfg.addr.clone(),
        source,
    };
    match &cfg.addr {
        AdminAddr::Tcp(a) => {
            let l = tokio::net::TcpListener::bind(a).await.map_err(bind_err)?;
            let bound = l.local_addr().map_err(bind_err)?;
            let addr = AdminAddr::Tcp(bound);
            // Without a token (loopback only), any web page could read the feed and drive the
            // agent API through a rebound name: Host and Origin must name this listener.
            let guard = state.token.as_deref().is_none_or(str::is_empty).then(|| {
                Arc::new(crate::server::guard::Guard::new(
                    crate::server::guard::GuardConfig::default(),
                    bound,
                ))
            });
            let task = tokio::spawn(async move {
                let mut conns = tokio::task::JoinSet::new();
                loop {
                    match l.accept().await {
                        Ok((s, _)) => {
                            let _ = s.set_nodelay(true);
                            conns.spawn(serve_conn(TokioIo::new(s), state.clone(), guard.clone()));
                        }
                        Err(e) => {
                            tracing::warn!(error = %e, "admin accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                    while conns.try_join_next().is_some() {}
                }
            });
            Ok(AdminHandle {
                task,
                addr,
                owned: None,
            })
        }
        AdminAddr::Unix(p) => {
            #[cfg(unix)]
            {
                // A socket whose process is gone (nothing answers) is replaced; a live one is
                // never taken over.
                if std::fs::symlink_metadata(p).is_ok_and(|m| {
                    use std::os::unix::fs::FileTypeExt;
                    m.file_type().is_socket()
                }) {
                    if std::os::unix::net::UnixStream::connect(p).is_ok() {
                        return Err(AdminError::InUse(cfg.addr.clone()));
                    }
                    let _ = std::fs::remove_file(p);
                }
                let l = tokio::net::UnixListener::bind(p).map_err(bind_err)?;
                let owned = {
                    use std::os::unix::fs::{MetadataExt, PermissionsExt};
                    std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o600))
                        .map_err(bind_err)?;
                    std::fs::symlink_metadata(p)
                        .ok()
                        .map(|m| (p.clone(), m.dev(), m.ino()))
                };
                let task = tokio::spawn(async move {
                    let mut conns = tokio::task::JoinSet::new();
                    loop {
                        match l.accept().await {
                            Ok((s, _)) => {
                                conns.spawn(serve_conn(TokioIo::new(s), state.clone(), None));
                            }
                            Err(e) => {
                                tracing::warn!(error = %e, "admin accept failed");
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                        }
                        while conns.try_join_next().is_some() {}
                    }
                });
                Ok(AdminHandle {
                    task,
                    addr: cfg.addr.clone(),
                    owned,
                })
            }
            #[cfg(not(unix))]
            Err(bind_err(std::io::Error::other(
                "unix sockets need a unix system",
            )))
        }
    }
}

async fn serve_conn<I>(io: I, state: AdminState, guard: Option<Arc<crate::server::guard::Guard>>)
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
        let state = state.clone();
        let refused = guard
            .as_ref()
            .and_then(|g| g.check(req.method(), req.uri(), req.headers()).err());
        async move {
            if let Some(r) = refused {
                return Ok::<_, Infallible>(text(
                    r.status,
                    format!("{}\n", r.why),
                    "text/plain; charset=utf-8",
                ));
            }
            if req.uri().path() == "/mcp" {
                return Ok::<_, Infallible>(mcp(req, &state).await);
            }
            Ok::<_, Infallible>(route(req, &state))
        }
    });
    let _ = hyper::server::conn::http1::Builder::new()
        .serve_connection(io, svc)
        .await;
}

type AdminBody = BoxBody<Bytes, Infallible>;

fn text(status: StatusCode, body: impl Into<Bytes>, ct: &'static str) -> Response<AdminBody> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(ct),
    );
    r
}

/// Whether the request carries the token (always, when none is set).
fn authorized(req: &Request<Incoming>, token: Option<&str>) -> bool {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return true;
    };
    let given = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("bearer "))
        })
        .unwrap_or("");
    use subtle::ConstantTimeEq;
    bool::from(given.as_bytes().ct_eq(token.as_bytes()))
}

/// `/events?filter=…` (the filter language, URL-encoded): `Ok(None)` without one, a 400 naming
/// the term it cannot read.
fn events_filter(req: &Request<Incoming>) -> Result<Option<crate::filter::Filter>, String> {
    let Some(q) = req.uri().query() else {
        return Ok(None);
    };
    let Some(text) = form_urlencoded::parse(q.as_bytes())
        .find(|(k, _)| k == "filter")
        .map(|(_, v)| v.into_owned())
    else {
        return Ok(None);
    };
    crate::filter::Filter::parse(&text)
        .map(|f| (!f.is_empty()).then_some(f))
        .map_err(|why| format!("filter {text:?}: {why}\n"))
}

/// The answer to a request for a token-guarded endpoint without the token.
fn unauthorized() -> Response<AdminBody> {
    let mut r = text(
        StatusCode::UNAUTHORIZED,
        "this endpoint needs Authorization: Bearer TOKEN\n",
        "text/plain; charset=utf-8",
    );
    r.headers_mut().insert(
        http::header::WWW_AUTHENTICATE,
        http::HeaderValue::from_static("Bearer"),
    );
    r
}

/// The largest `/mcp` request body.
const MCP_BODY_MAX: usize = 1 << 20;

/// `POST /mcp`: one JSON-RPC message (or a batch) to the agent API, its reply as JSON (the
/// Streamable HTTP transport without a session: every call stands alone). Behind the token, as
/// `/events` is.
async fn mcp(req: Request<Incoming>, st: &AdminState) -> Response<AdminBody> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    let Some(agent) = st.agent.clone() else {
        return text(
            StatusCode::NOT_FOUND,
            "no state directory to serve\n",
            PLAIN,
        );
    };
    if !authorized(&req, st.token.as_deref()) {
        return unauthorized();
    }
    // POST only: no server stream to open (GET) and no session to end (DELETE).
    if req.method() != Method::POST {
        return text(StatusCode::METHOD_NOT_ALLOWED, "POST only\n", PLAIN);
    }
    // JSON only: the content types a web page may send without asking first are refused.
    if !crate::server::guard::is_json(req.headers()) {
        return text(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "POST /mcp takes Content-Type: application/json\n",
            PLAIN,
        );
    }
    let body = match http_body_util::Limited::new(req.into_body(), MCP_BODY_MAX)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(_) => return text(StatusCode::PAYLOAD_TOO_LARGE, "body over 1 MiB\n", PLAIN),
    };
    let msg: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => {
            return text(
                StatusCode::BAD_REQUEST,
                serde_json::json!({"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":format!("parse error: {e}")}}).to_string(),
                "application/json",
            )
        }
    };
    let reply = match &msg {
        serde_json::Value::Array(batch) => {
            let mut out = Vec::new();
            for m in batch {
                out.extend(agent(m.clone()).await);
            }
            (!out.is_empty()).then_some(serde_json::Value::Array(out))
        }
        m => agent(m.clone()).await,
    };
    match reply {
        Some(r) => text(StatusCode::OK, r.to_string(), "application/json"),
        None => text(StatusCode::ACCEPTED, "", PLAIN),
    }
}

fn route(req: Request<Incoming>, st: &AdminState) -> Response<AdminBody> {
    const PLAIN: &str = "text/plain; charset=utf-8";
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n", PLAIN);
    }
    match req.uri().path() {
        "/healthz" => text(StatusCode::OK, "ok\n", PLAIN),
        "/readyz" => match st.ready.state() {
            Ok(()) => text(StatusCode::OK, "ready\n", PLAIN),
            Err(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                format!("not ready: {why}\n"),
                PLAIN,
            ),
        },
        "/metrics" => text(
            StatusCode::OK,
            st.metrics.render(),
            prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
        ),
        "/events" | "/calls" if !authorized(&req, st.token.as_deref()) => unauthorized(),
        "/events" => match events_filter(&req)
            .map_err(|why| (StatusCode::BAD_REQUEST, why))
            .and_then(|f| {
                st.feed
                    .attach_filtered(f)
                    .map_err(|e| (StatusCode::SERVICE_UNAVAILABLE, format!("{e}\n")))
            }) {
            Ok(client) => {
                let stream = futures_util::stream::unfold(client.rx, |mut rx| async move {
                    rx.recv()
                        .await
                        .map(|line| (Ok::<_, Infallible>(Frame::data(line)), rx))
                });
                let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
                r.headers_mut().insert(
                    http::header::CONTENT_TYPE,
                    http::HeaderValue::from_static("application/x-ndjson"),
                );
                r.headers_mut().insert(
                    http::header::CACHE_CONTROL,
                    http::HeaderValue::from_static("no-store"),
                );
                r
            }
            Err((status, why)) => text(status, why, PLAIN),
        },
        "/calls" => {
            let asked = req
                .uri()
                .query()
                .and_then(|q| q.split('&').find_map(|kv| kv.strip_prefix("limit=")));
            let limit = match asked.map(str::parse::<usize>) {
                None => 100,
                Some(Ok(n)) if n >= 1 => n,
                Some(_) => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!(
                            "limit={} is not a whole number ≥ 1\n",
                            asked.unwrap_or_default()
                        ),
                        PLAIN,
                    )
                }
            };
            let calls = st.feed.recent_calls(limit);
            let body = serde_json::to_vec(&calls).unwrap_or_else(|_| b"[]".to_vec());
            text(StatusCode::OK, body, "application/json")
        }
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: /healthz /readyz /metrics /events /calls\n",
            PLAIN,
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admin_addresses() {
        assert_eq!(
            AdminAddr::parse(":9100").unwrap(),
            AdminAddr::Tcp("127.0.0.1:9100".parse().unwrap())
        );
        assert!(AdminAddr::parse(":9100").unwrap().is_local());
        assert!(!AdminAddr::parse("0.0.0.0:9100").unwrap().is_local());
        assert!(AdminAddr::parse("unix:/tmp/a.sock").unwrap().is_local());
        assert!(AdminAddr::parse("unix:").is_err());
    }

    #[test]
    fn readiness_needs_a_recent_probe_and_ends_at_shutdown() {
        let r = Readiness::new(Duration::from_secs(5));
        assert!(r.state().unwrap_err().contains("not been probed"));
        r.ok();
        assert!(r.state().is_ok());
        r.failed("upstream 127.0.0.1:1 refused a connection".into());
        assert!(r.state().unwrap_err().contains("refused"));
        r.ok();
        r.shutting_down();
        assert_eq!(r.state().unwrap_err(), "shutting down");
    }
}

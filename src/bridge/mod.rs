//! The bridge: a Streamable HTTP MCP endpoint in front of stdio servers (`rpctap serve`), and a
//! stdio server in front of a remote Streamable HTTP one (`rpctap stdio --upstream`, in
//! `remote`).
//!
//! `rpctap serve` is the proxy with a local upstream ([`crate::proxy::upstream::Local`]): every
//! request goes through the proxy's own pipeline first — inspected, rate-limited, recorded, on
//! the admin, the feed, the hub and OTLP like any proxied exchange — and then reaches
//! [`Bridge`], which plays the HTTP server's part for a stdio child:
//!
//! - **Sessions.** An `initialize` without `Mcp-Session-Id` opens a session: rpctap's own id (128
//!   random bits) in the reply's header, and, by default, a child of its own. `--shared` runs one
//!   child for every session with request ids (and progress tokens, and cancels' `requestId`)
//!   rewritten on the way in and back on the way out, so that two clients' `id: 1` each get their
//!   own reply; every rewrite is published as a `notice` (`bridge-rewrite`: both ids), so the
//!   dashboard and the recording show it. A POST without a session that is no `initialize` (a
//!   2026-07-28 stateless call, `server/discover`) goes to one stateless child, with ids rewritten
//!   the same way, started on the first such call.
//! - **Replies.** A POST's requests are written to the child's stdin as lines (a batch one line
//!   per member, each member's bytes unchanged); the reply is an SSE stream when the client
//!   accepts one (each of the child's replies an event as soon as its line arrives, with the
//!   progress notifications of the POST's requests, and the server's requests and notifications
//!   while the POST is open), else a JSON body once every reply is in. A POST of only
//!   notifications or responses gets `202`. The head goes out at once: a slow tool never meets
//!   the proxy's upstream timeout.
//! - **Server messages** not tied to a POST go to the session's GET stream, else wait (at most
//!   [`BACKLOG`] of them) for one to open; with `--shared` a notification goes to every session,
//!   a request to the session that called last.
//! - **Ends.** A session ends on `DELETE`, after `--session-idle` with nothing in flight, when
//!   its GET stream and all its requests are gone (after [`LINGER`], so a reconnect keeps it),
//!   or when its child exits; then its child is stopped (SIGTERM, SIGKILL after the grace) and
//!   reaped, and its id answers `404`. A child that exits answers each of its pending calls with
//!   a JSON-RPC error at once (`-32603`, the exit status or signal and its last stderr line).
//!   `--max-sessions` caps the sessions (beyond: `503`). With `--shared`, `--restart` decides
//!   whether a child that exited is started again (backoff from 0.5 s, doubling to 30 s).
//! - `--legacy-sse`: the 2024-11-05 HTTP+SSE transport beside it (`GET /sse` opens a session and
//!   announces its `POST /message?sessionId=…`; every server message goes on that stream).

pub mod child;
pub mod remote;

use crate::locks::Locked as _;
use crate::proxy::body::{ForwardBody, LocalBody, LocalSender, UpstreamBody};
use bytes::{Bytes, BytesMut};
use http::{HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use serde::Deserialize;
use serde_json::value::RawValue;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// Server messages kept for a session without a stream to take them.
pub const BACKLOG: usize = 256;
/// How long a session whose GET stream and requests are all gone is kept for a reconnect.
pub const LINGER: Duration = Duration::from_secs(2);
/// Queued chunks beyond which a stream's client counts as not reading (notifications to it
/// are dropped; replies never are).
const SLOW_CLIENT: usize = 1024;
/// JSON-RPC code of the bridge's own errors (a child that exited, a session not found).
pub const CODE_INTERNAL: i64 = -32603;
/// The Streamable HTTP transport's code for an unknown session (as the SDKs answer it).
pub const CODE_NO_SESSION: i64 = -32001;

/// The bridge's own answer instead of a session (boxed: the rare path).
type Refusal = Box<Response<UpstreamBody>>;

/// When a `--shared` child that exited is started again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Restart {
    Never,
    OnFailure,
    Always,
}

/// The bridge's settings.
#[derive(Clone, Debug)]
pub struct BridgeOptions {
    pub command: Vec<String>,
    /// The endpoint's path (`/mcp`).
    pub path: String,
    pub shared: bool,
    pub restart: Restart,
    pub session_idle: Duration,
    pub max_sessions: usize,
    /// SIGTERM to SIGKILL.
    pub stop_grace: Duration,
    pub legacy_sse: bool,
    pub max_line: usize,
    /// A comment on idle GET streams this often (a client that left is noticed).
    pub keepalive: Duration,
    /// Whether the children's stderr is passed on to rpctap's (not under the dashboard).
    pub pass_stderr: bool,
    /// Secrets of the command (`hub::command::scrub`), scrubbed from stderr lines.
    pub secrets: Vec<String>,
}

/// What kind of child a worker runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// One session's own.
    Own,
    /// Every session's (`--shared`).
    Shared,
    /// The stateless calls'.
    Stateless,
}

/// One child and the table that routes its lines.
struct Worker {
    kind: Kind,
    child: Mutex<Option<Arc<child::Child>>>,
    routes: Mutex<Routes>,
    started: Instant,
}

#[derive(Default)]
struct Routes {
    /// Calls in flight, by the id the child sees.
    calls: HashMap<Box<str>, Call>,
    /// Progress tokens in flight, by the token the child sees.
    tokens: HashMap<Box<str>, Token>,
    /// (session, client id) → child id, for cancels (rewriting workers).
    by_client: HashMap<(Arc<str>, Box<str>), Box<str>>,
    next: u64,
    /// The sessions on this child (more than one with `--shared`).
    sessions: Vec<Weak<Session>>,
    /// The session that called last (a server request goes there).
    last_caller: Weak<Session>,
    /// Why it is gone, once it is.
    dead: Option<String>,
    /// Invalid requests in flight (their ids, oldest first): a reply with `"id": null` answers
    /// the oldest.
    invalid: VecDeque<Box<str>>,
}

/// A message read without caring what its members hold (an invalid request's id).
#[derive(Deserialize)]
struct Loose<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<&'a RawValue>,
}

struct Call {
    post: Arc<Post>,
    /// The client's id when the child sees another.
    client_id: Option<Box<str>>,
    token: Option<Box<str>>,
}

struct Token {
    post: Arc<Post>,
    client_token: Option<Box<str>>,
}

/// One POST's reply stream.
struct Post {
    session: Arc<Session>,
    tx: LocalSender,
    sse: bool,
    st: Mutex<PostState>,
}

struct PostState {
    remaining: usize,
    parts: Vec<Bytes>,
}

/// A session (or one stateless POST's stand-in).
pub struct Session {
    id: Arc<str>,
    worker: Arc<Worker>,
    st: Mutex<SessionState>,
}

struct SessionState {
    get: Option<LocalSender>,
    had_get: bool,
    /// Open SSE posts, newest last.
    posts: Vec<Weak<Post>>,
    backlog: VecDeque<Bytes>,
    inflight: usize,
    last: Instant,
    last_keepalive: Instant,
    legacy: bool,
    ended: bool,
}

impl Session {
    fn new(id: Arc<str>, worker: Arc<Worker>, legacy: bool) -> Arc<Session> {
        let now = Instant::now();
        Arc::new(Session {
            id,
            worker,
            st: Mutex::new(SessionState {
                get: None,
                had_get: false,
                posts: Vec::new(),
                backlog: VecDeque::new(),
                inflight: 0,
                last: now,
                last_keepalive: now,
                legacy,
                ended: false,
            }),
        })
    }
}

/// The bridge: the proxy's local upstream for `rpctap serve`.
#[derive(Clone)]
pub struct Bridge {
    inner: Arc<Inner>,
}

struct Inner {
    opts: BridgeOptions,
    inspector: crate::inspect::Inspector,
    st: Mutex<BridgeState>,
    /// Held while the one shared or stateless child is looked for and, when there is none,
    /// started: two sessions that open at the same moment get one child, never two (the
    /// state's lock cannot be held across the start, which takes it too). Never held across
    /// an await.
    starting: Mutex<()>,
}

#[derive(Default)]
struct BridgeState {
    sessions: HashMap<Arc<str>, Arc<Session>>,
    shared: Option<Arc<Worker>>,
    stateless: Option<Arc<Worker>>,
    /// `--shared` restarts: failures in a row, and no start before this.
    failures: u32,
    not_before: Option<Instant>,
    /// The shared child exited and `--restart` says no more.
    given_up: Option<String>,
    children_started: u64,
    shutting_down: bool,
    /// Sessions being opened (their child starting): counted against `--max-sessions`.
    opening: usize,
}

/// How many sessions and children there are (the tests' and `/readyz`'s view).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BridgeStats {
    pub sessions: usize,
    pub children: usize,
    pub children_started: u64,
}

/// The members of a message the bridge routes by, borrowed from its bytes (so that an id can
/// be replaced where it stands).
#[derive(Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    id: Option<&'a RawValue>,
    #[serde(borrow, default)]
    method: Option<std::borrow::Cow<'a, str>>,
    #[serde(borrow, default)]
    params: Option<Params<'a>>,
}

#[derive(Deserialize)]
struct Params<'a> {
    #[serde(borrow, default, rename = "_meta")]
    meta: Option<Meta<'a>>,
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
    #[serde(borrow, default, rename = "requestId")]
    request_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Meta<'a> {
    #[serde(borrow, default, rename = "progressToken")]
    progress_token: Option<&'a RawValue>,
}

/// Where `inner` (a slice of `outer`) starts in it.
fn offset(outer: &[u8], inner: &str) -> Option<usize> {
    let (o, i) = (outer.as_ptr() as usize, inner.as_ptr() as usize);
    (i >= o && i + inner.len() <= o + outer.len()).then(|| i - o)
}

/// `line` with the given slices replaced (each `(slice of line, replacement)`).
fn splice(line: &[u8], mut edits: Vec<(&str, String)>) -> Bytes {
    edits.sort_by_key(|(s, _)| s.as_ptr() as usize);
    let mut out = BytesMut::with_capacity(line.len() + 16);
    let mut at = 0;
    for (s, with) in edits {
        let Some(o) = offset(line, s) else { continue };
        if o < at {
            continue;
        }
        out.extend_from_slice(&line[at..o]);
        out.extend_from_slice(with.as_bytes());
        at = o + s.len();
    }
    out.extend_from_slice(&line[at..]);
    out.freeze()
}

fn sse_event(line: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(line.len() + 24);
    b.extend_from_slice(b"event: message\ndata: ");
    b.extend_from_slice(line);
    b.extend_from_slice(b"\n\n");
    b.freeze()
}

/// A JSON-RPC error reply to the call whose id is `id` (its JSON text), as a line's bytes.
pub fn error_line(id: &str, code: i64, message: &str) -> Bytes {
    let id = crate::rpc::Id::from_json_text(id).unwrap_or(crate::rpc::Id::Null);
    Bytes::from(crate::rpc::error_reply(&id, code, message, None))
}

/// The bridge's own answer: `status`, with a JSON body when given.
fn local(status: StatusCode, json: Option<Bytes>) -> Response<UpstreamBody> {
    let (tx, b) = LocalBody::channel(None);
    let mut r = Response::new(UpstreamBody::Local(b));
    *r.status_mut() = status;
    if let Some(body) = json {
        tx.send(body);
        r.headers_mut().insert(
            http::header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
    r
}

/// A `200` SSE stream's head over `body`.
fn sse_response(body: LocalBody) -> Response<UpstreamBody> {
    let mut r = Response::new(UpstreamBody::Local(body));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    r.headers_mut().insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    r
}

fn error_reply(status: StatusCode, code: i64, message: &str) -> Response<UpstreamBody> {
    local(status, Some(error_line("null", code, message)))
}

fn refuse(status: StatusCode, code: i64, message: &str) -> Refusal {
    Box::new(error_reply(status, code, message))
}

fn new_session_id() -> Arc<str> {
    let mut b = [0u8; 16];
    if getrandom::fill(&mut b).is_err() {
        // No OS randomness: still unique within the process.
        let n = crate::events::now_ns().to_le_bytes();
        b[..8].copy_from_slice(&n);
    }
    let mut s = String::with_capacity(32);
    for x in b {
        s.push_str(&format!("{x:02x}"));
    }
    s.into()
}

/// Drops with a SSE stream's body: its session learns the client is gone.
struct StreamGone(Weak<Session>);
impl Drop for StreamGone {
    fn drop(&mut self) {
        if let Some(s) = self.0.upgrade() {
            s.st.locked().last = Instant::now();
        }
    }
}

impl Bridge {
    pub fn new(opts: BridgeOptions, inspector: crate::inspect::Inspector) -> Self {
        Bridge {
            inner: Arc::new(Inner {
                opts,
                inspector,
                st: Mutex::new(BridgeState::default()),
                starting: Mutex::new(()),
            }),
        }
    }

    pub fn stats(&self) -> BridgeStats {
        let st = self.inner.st.locked();
        let own = st
            .sessions
            .values()
            .filter(|s| s.worker.kind == Kind::Own && s.worker.child.locked().is_some())
            .count();
        let extra = [&st.shared, &st.stateless]
            .iter()
            .filter(|w| w.as_ref().is_some_and(|w| w.child.locked().is_some()))
            .count();
        BridgeStats {
            sessions: st.sessions.len(),
            children: own + extra,
            children_started: st.children_started,
        }
    }

    /// Whether a new session could start now, and why not.
    pub fn ready(&self) -> Result<(), String> {
        let st = self.inner.st.locked();
        if st.shutting_down {
            return Err("shutting down".into());
        }
        if let Some(why) = &st.given_up {
            return Err(format!(
                "the shared server is gone and --restart is never: {why}"
            ));
        }
        if st.sessions.len() >= self.inner.opts.max_sessions {
            return Err(format!(
                "--max-sessions {} reached",
                self.inner.opts.max_sessions
            ));
        }
        drop(st);
        which(&self.inner.opts.command[0])
            .map(|_| ())
            .ok_or_else(|| format!("cannot find {:?} to run", self.inner.opts.command[0]))
    }

    /// Runs the sessions' timers (idle, linger, keep-alive) until aborted.
    pub fn spawn_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let every = (me.inner.opts.session_idle / 4)
                .clamp(Duration::from_millis(50), Duration::from_secs(1));
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                me.sweep();
            }
        })
    }

    fn sweep(&self) {
        let sessions: Vec<Arc<Session>> =
            self.inner.st.locked().sessions.values().cloned().collect();
        let now = Instant::now();
        for s in sessions {
            let why = {
                let mut st = s.st.locked();
                let st = &mut *st;
                if let Some(g) = &st.get {
                    if g.is_closed() {
                        st.get = None;
                        st.last = now;
                    } else if now.duration_since(st.last_keepalive) >= self.inner.opts.keepalive {
                        st.last_keepalive = now;
                        g.send(Bytes::from_static(b": keepalive\n\n"));
                    }
                }
                st.posts
                    .retain(|p| p.upgrade().is_some_and(|p| !p.tx.is_closed()));
                let quiet = st.inflight == 0 && st.posts.is_empty() && st.get.is_none();
                let idle = now.duration_since(st.last);
                if quiet && idle >= self.inner.opts.session_idle {
                    Some("idle")
                } else if quiet && st.had_get && idle >= LINGER {
                    Some("its client left")
                } else {
                    None
                }
            };
            if let Some(why) = why {
                self.end_session(&s, why);
            }
        }
        // The stateless child: stopped when idle too.
        let w = {
            let st = self.inner.st.locked();
            st.stateless.clone()
        };
        if let Some(w) = w {
            let quiet = w.routes.locked().calls.is_empty();
            if quiet && w.started.elapsed() >= self.inner.opts.session_idle {
                let idle_for = w
                    .routes
                    .locked()
                    .last_caller
                    .upgrade()
                    .map(|s| s.st.locked().last.elapsed())
                    .unwrap_or(Duration::MAX);
                if idle_for >= self.inner.opts.session_idle {
                    let mut st = self.inner.st.locked();
                    if st.stateless.as_ref().is_some_and(|x| Arc::ptr_eq(x, &w)) {
                        st.stateless = None;
                    }
                    drop(st);
                    if let Some(c) = w.child.locked().take() {
                        c.stop();
                    }
                }
            }
        }
    }

    /// Stops every child and waits until each is reaped (at most the grace and a second).
    pub async fn shutdown(&self) {
        let (sessions, workers) = {
            let mut st = self.inner.st.locked();
            let st = &mut *st;
            st.shutting_down = true;
            let s: Vec<_> = st.sessions.drain().map(|(_, s)| s).collect();
            let w: Vec<_> = [st.shared.take(), st.stateless.take()]
                .into_iter()
                .flatten()
                .collect();
            (s, w)
        };
        let mut children = Vec::new();
        for s in &sessions {
            self.close_streams(s);
            if s.worker.kind == Kind::Own {
                if let Some(c) = s.worker.child.locked().take() {
                    children.push(c);
                }
            }
        }
        for w in workers {
            if let Some(c) = w.child.locked().take() {
                children.push(c);
            }
        }
        for c in &children {
            c.stop();
        }
        let wait = futures_util::future::join_all(children.iter().map(|c| c.exited()));
        let _ =
            tokio::time::timeout(self.inner.opts.stop_grace + Duration::from_secs(2), wait).await;
    }

    fn spawn_worker(&self, kind: Kind, label: &str) -> Result<Arc<Worker>, String> {
        let worker = Arc::new(Worker {
            kind,
            child: Mutex::new(None),
            routes: Mutex::new(Routes::default()),
            started: Instant::now(),
        });
        let owner = Arc::new(WorkerOwner {
            bridge: Arc::downgrade(&self.inner),
            worker: Arc::downgrade(&worker),
            scope: crate::events::Scope::Session(label.into()),
        });
        let c = child::Child::spawn(
            &self.inner.opts.command,
            self.inner.opts.max_line,
            self.inner.opts.stop_grace,
            owner,
        )
        .map_err(|e| format!("cannot run {:?}: {e}", self.inner.opts.command.join(" ")))?;
        tracing::info!(pid = c.pid, kind = ?kind, session = label, "bridge: started a server");
        *worker.child.locked() = Some(c);
        self.inner.st.locked().children_started += 1;
        Ok(worker)
    }

    /// `spawn_worker` for a request: a child that cannot start is the request's `502`.
    fn start_worker(&self, kind: Kind, label: &str) -> Result<Arc<Worker>, Refusal> {
        self.spawn_worker(kind, label).map_err(|e| {
            refuse(
                StatusCode::BAD_GATEWAY,
                CODE_INTERNAL,
                &format!("rpctap: {e}"),
            )
        })
    }

    /// A new session (an `initialize` without a session id).
    fn open_session(&self, legacy: bool) -> Result<Arc<Session>, Refusal> {
        let id = new_session_id();
        let worker = {
            let mut st = self.inner.st.locked();
            if st.shutting_down {
                return Err(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    CODE_INTERNAL,
                    "rpctap is shutting down",
                ));
            }
            if st.sessions.len() + st.opening >= self.inner.opts.max_sessions {
                return Err(refuse(
                    StatusCode::SERVICE_UNAVAILABLE,
                    CODE_INTERNAL,
                    &format!(
                        "rpctap: --max-sessions {} reached; try again later",
                        self.inner.opts.max_sessions
                    ),
                ));
            }
            let w = if self.inner.opts.shared {
                if let Some(why) = &st.given_up {
                    return Err(refuse(
                        StatusCode::SERVICE_UNAVAILABLE,
                        CODE_INTERNAL,
                        &format!(
                            "rpctap: the shared server is gone ({why}) and --restart is never"
                        ),
                    ));
                }
                if st.not_before.is_some_and(|t| Instant::now() < t) {
                    let mut r = error_reply(
                        StatusCode::SERVICE_UNAVAILABLE,
                        CODE_INTERNAL,
                        "rpctap: the shared server is restarting",
                    );
                    r.headers_mut()
                        .insert(http::header::RETRY_AFTER, HeaderValue::from_static("1"));
                    return Err(Box::new(r));
                }
                st.shared.clone()
            } else {
                None
            };
            // Counted in the same lock as the cap's check: concurrent initializes stay under it.
            st.opening += 1;
            w
        };
        let opened = self.open_worker(worker, &id);
        self.inner.st.locked().opening -= 1;
        let worker = opened?;
        let s = Session::new(id.clone(), worker.clone(), legacy);
        worker.routes.locked().sessions.push(Arc::downgrade(&s));
        self.inner.st.locked().sessions.insert(id, s.clone());
        Ok(s)
    }

    /// The session's worker: the shared one, or a child of its own started now.
    fn open_worker(&self, shared: Option<Arc<Worker>>, id: &str) -> Result<Arc<Worker>, Refusal> {
        if let Some(w) = shared {
            return Ok(w);
        }
        let kind = if self.inner.opts.shared {
            Kind::Shared
        } else {
            Kind::Own
        };
        if kind == Kind::Own {
            return self.start_worker(kind, id);
        }
        let _one = self.inner.starting.locked();
        // Started by another session while this one waited for the lock.
        if let Some(w) = self.inner.st.locked().shared.clone() {
            return Ok(w);
        }
        let w = self.start_worker(kind, "shared")?;
        self.inner.st.locked().shared = Some(w.clone());
        Ok(w)
    }

    /// The stateless calls' stand-in session (one per POST) on the stateless child.
    fn stateless_session(&self) -> Result<Arc<Session>, Refusal> {
        let _one = self.inner.starting.locked();
        let existing = self.inner.st.locked().stateless.clone();
        let worker = match existing {
            Some(w) if w.routes.locked().dead.is_none() => w,
            _ => {
                let w = self.start_worker(Kind::Stateless, "stateless")?;
                self.inner.st.locked().stateless = Some(w.clone());
                w
            }
        };
        Ok(Session::new(new_session_id(), worker, false))
    }

    fn session(&self, id: &str) -> Option<Arc<Session>> {
        self.inner.st.locked().sessions.get(id).cloned()
    }

    /// Ends a session: out of the table (its id answers 404 from now on), its streams closed,
    /// its own child stopped.
    fn end_session(&self, s: &Arc<Session>, why: &str) {
        let removed = self.inner.st.locked().sessions.remove(&s.id).is_some();
        {
            let mut st = s.st.locked();
            if st.ended {
                return;
            }
            st.ended = true;
        }
        if removed {
            tracing::info!(session = %s.id, why, "bridge: session ended");
        }
        self.close_streams(s);
        if s.worker.kind == Kind::Own {
            if let Some(c) = s.worker.child.locked().take() {
                c.stop();
            }
        } else {
            let mut r = s.worker.routes.locked();
            r.sessions
                .retain(|w| w.upgrade().is_some_and(|x| !Arc::ptr_eq(&x, s)));
            // Its calls on a shared child are forgotten: nobody is there for their replies.
            r.calls.retain(|_, c| !Arc::ptr_eq(&c.post.session, s));
            r.tokens.retain(|_, t| !Arc::ptr_eq(&t.post.session, s));
            r.by_client.retain(|(sid, _), _| **sid != *s.id);
        }
    }

    fn close_streams(&self, s: &Arc<Session>) {
        let mut st = s.st.locked();
        st.get = None;
        st.posts.clear();
    }

    async fn handle(self, req: Request<ForwardBody>) -> Result<Response<UpstreamBody>, String> {
        let path = req.uri().path().to_string();
        let opts = &self.inner.opts;
        if opts.legacy_sse && path == "/sse" && req.method() == Method::GET {
            return Ok(self.legacy_open());
        }
        if opts.legacy_sse && path == "/message" && req.method() == Method::POST {
            let sid = req.uri().query().and_then(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .find(|(k, _)| k == "sessionId")
                    .map(|(_, v)| v.into_owned())
            });
            let body = match self.read_body(req).await {
                Ok(b) => b,
                Err(r) => return Ok(r),
            };
            return Ok(match sid.and_then(|id| self.session(&id)) {
                Some(s) => self.legacy_post(&s, body),
                None => error_reply(StatusCode::NOT_FOUND, CODE_NO_SESSION, "Session not found"),
            });
        }
        if path != opts.path {
            return Ok(error_reply(
                StatusCode::NOT_FOUND,
                -32601,
                &format!(
                    "rpctap serve: nothing at {path}; the MCP endpoint is {}",
                    opts.path
                ),
            ));
        }
        let sid = req
            .headers()
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let sse = crate::media::accepts_event_stream(req.headers());
        match *req.method() {
            Method::POST => {
                let body = match self.read_body(req).await {
                    Ok(b) => b,
                    Err(r) => return Ok(r),
                };
                Ok(self.post(sid.as_deref(), body, sse))
            }
            Method::GET => Ok(match sid.as_deref().map(|id| self.session(id)) {
                None => error_reply(
                    StatusCode::BAD_REQUEST,
                    -32000,
                    "Bad Request: Mcp-Session-Id header is required",
                ),
                Some(None) => {
                    error_reply(StatusCode::NOT_FOUND, CODE_NO_SESSION, "Session not found")
                }
                Some(Some(s)) => self.get_stream(&s),
            }),
            Method::DELETE => Ok(match sid.as_deref().map(|id| self.session(id)) {
                None => error_reply(
                    StatusCode::BAD_REQUEST,
                    -32000,
                    "Bad Request: Mcp-Session-Id header is required",
                ),
                Some(None) => {
                    error_reply(StatusCode::NOT_FOUND, CODE_NO_SESSION, "Session not found")
                }
                Some(Some(s)) => {
                    self.end_session(&s, "DELETE");
                    local(StatusCode::OK, None)
                }
            }),
            _ => {
                let mut r =
                    error_reply(StatusCode::METHOD_NOT_ALLOWED, -32000, "Method not allowed");
                r.headers_mut().insert(
                    http::header::ALLOW,
                    HeaderValue::from_static("GET, POST, DELETE"),
                );
                Ok(r)
            }
        }
    }

    async fn read_body(&self, req: Request<ForwardBody>) -> Result<Bytes, Response<UpstreamBody>> {
        let limited = http_body_util::Limited::new(req.into_body(), self.inner.opts.max_line);
        match limited.collect().await {
            Ok(b) => Ok(b.to_bytes()),
            Err(e) => Err(error_reply(
                StatusCode::PAYLOAD_TOO_LARGE,
                -32600,
                &format!("rpctap: the request body could not be read whole (at most --max-frame-bytes): {e}"),
            )),
        }
    }

    /// The messages of a POST body: a batch's members, or the one message.
    fn messages(body: &Bytes) -> Result<Vec<Bytes>, String> {
        let trimmed = body.trim_ascii_start();
        if trimmed.first() == Some(&b'[') {
            let members: Vec<&RawValue> =
                serde_json::from_slice(body).map_err(|e| e.to_string())?;
            Ok(members
                .into_iter()
                .map(|m| body.slice_ref(m.get().as_bytes()))
                .collect())
        } else {
            let _: &RawValue = serde_json::from_slice(body).map_err(|e| e.to_string())?;
            let end = body.trim_ascii_end().len();
            let start = body.len() - trimmed.len();
            Ok(vec![body.slice(start..end.max(start))])
        }
    }

    fn post(&self, sid: Option<&str>, body: Bytes, sse: bool) -> Response<UpstreamBody> {
        let msgs = match Self::messages(&body) {
            Ok(m) if !m.is_empty() => m,
            Ok(_) => {
                return error_reply(
                    StatusCode::BAD_REQUEST,
                    -32600,
                    "Invalid Request: an empty batch",
                )
            }
            Err(e) => {
                return error_reply(
                    StatusCode::BAD_REQUEST,
                    -32700,
                    &format!("Parse error: {e}"),
                )
            }
        };
        let initialize = msgs.iter().any(|m| {
            serde_json::from_slice::<Envelope>(m)
                .is_ok_and(|e| e.method.as_deref() == Some("initialize"))
        });
        let (session, new) = match sid {
            Some(id) => match self.session(id) {
                Some(s) => (s, false),
                None => {
                    return error_reply(StatusCode::NOT_FOUND, CODE_NO_SESSION, "Session not found")
                }
            },
            None if initialize => match self.open_session(false) {
                Ok(s) => (s, true),
                Err(r) => return *r,
            },
            None => match self.stateless_session() {
                Ok(s) => (s, false),
                Err(r) => return *r,
            },
        };
        let (tx, body) = LocalBody::channel(Some(Box::new(StreamGone(Arc::downgrade(&session)))));
        let post = Arc::new(Post {
            session: session.clone(),
            tx,
            sse,
            st: Mutex::new(PostState {
                remaining: 0,
                parts: Vec::new(),
            }),
        });
        let requests = match self.forward(&session, &post, &msgs) {
            Ok(n) => n,
            Err(why) => {
                let how = format!("rpctap: the server is gone: {why}");
                if new {
                    self.end_session(&session, "its server could not be reached");
                }
                return error_reply(StatusCode::NOT_FOUND, CODE_NO_SESSION, &how);
            }
        };
        let mut resp = if requests == 0 {
            local(StatusCode::ACCEPTED, None)
        } else if sse {
            sse_response(body)
        } else {
            let mut r = Response::new(UpstreamBody::Local(body));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            r
        };
        if new {
            if let Ok(v) = HeaderValue::from_str(&session.id) {
                resp.headers_mut().insert("mcp-session-id", v);
            }
        }
        resp
    }

    /// Writes a POST's messages to the session's child, registering its requests' routes;
    /// returns how many requests await a reply.
    fn forward(&self, s: &Arc<Session>, post: &Arc<Post>, msgs: &[Bytes]) -> Result<usize, String> {
        let w = &s.worker;
        let Some(child) = w.child.locked().clone() else {
            return Err(w
                .routes
                .locked()
                .dead
                .clone()
                .unwrap_or_else(|| "stopped".into()));
        };
        let rewrite = w.kind != Kind::Own;
        let mut requests = 0;
        let mut lines = Vec::with_capacity(msgs.len());
        {
            let mut r = w.routes.locked();
            if let Some(d) = &r.dead {
                return Err(d.clone());
            }
            r.last_caller = Arc::downgrade(s);
            for m in msgs {
                let Ok(env) = serde_json::from_slice::<Envelope>(m) else {
                    // An invalid request that carries an id (a method that is no string) still
                    // gets a reply: by its id, or with `"id": null` when the server could not
                    // read it — then it goes to the oldest such request's POST.
                    if let Ok(Loose {
                        id: Some(id),
                        method: Some(_),
                    }) = serde_json::from_slice::<Loose>(m)
                    {
                        if id.get() != "null" {
                            requests += 1;
                            r.calls.insert(
                                id.get().into(),
                                Call {
                                    post: post.clone(),
                                    client_id: None,
                                    token: None,
                                },
                            );
                            r.invalid.push_back(id.get().into());
                        }
                    }
                    lines.push(m.clone());
                    continue;
                };
                let token = env
                    .params
                    .as_ref()
                    .and_then(|p| p.meta.as_ref())
                    .and_then(|m| m.progress_token);
                let mut edits: Vec<(&str, String)> = Vec::new();
                match (env.id, &env.method) {
                    (Some(id), Some(method)) => {
                        requests += 1;
                        let client_id = id.get();
                        let child_id: Box<str> = if rewrite {
                            r.next += 1;
                            let n = r.next.to_string();
                            edits.push((client_id, n.clone()));
                            // Said only when the id changed: "id 1 is 1" tells nobody anything.
                            if client_id != n {
                                self.inner.inspector.publish(crate::events::Event::Notice(crate::events::NoticeEvent {
                                    ts: crate::events::now_ns(),
                                    what: "bridge-rewrite",
                                    message: format!("session {}: {method} id {client_id} is {n} on the shared server", s.id),
                                }));
                            }
                            r.by_client
                                .insert((s.id.clone(), client_id.into()), n.as_str().into());
                            n.into()
                        } else {
                            client_id.into()
                        };
                        let child_token: Option<Box<str>> = token.map(|t| {
                            if rewrite {
                                r.next += 1;
                                let n = format!("\"rpctap-{}\"", r.next);
                                edits.push((t.get(), n.clone()));
                                n.into()
                            } else {
                                t.get().into()
                            }
                        });
                        if let Some(ct) = &child_token {
                            r.tokens.insert(
                                ct.clone(),
                                Token {
                                    post: post.clone(),
                                    client_token: rewrite
                                        .then(|| token.map(|t| t.get().into()))
                                        .flatten(),
                                },
                            );
                        }
                        r.calls.insert(
                            child_id,
                            Call {
                                post: post.clone(),
                                client_id: rewrite.then(|| client_id.into()),
                                token: child_token,
                            },
                        );
                    }
                    (None, Some(method)) if rewrite && method == "notifications/cancelled" => {
                        if let Some(rid) = env.params.as_ref().and_then(|p| p.request_id) {
                            if let Some(n) = r.by_client.get(&(s.id.clone(), rid.get().into())) {
                                edits.push((rid.get(), n.to_string()));
                            }
                        }
                    }
                    _ => {}
                }
                lines.push(if edits.is_empty() {
                    m.clone()
                } else {
                    splice(m, edits)
                });
            }
        }
        if requests > 0 {
            post.st.locked().remaining = requests;
            let mut st = s.st.locked();
            st.inflight += requests;
            st.last = Instant::now();
            if post.sse {
                st.posts.push(Arc::downgrade(post));
            }
        } else {
            s.st.locked().last = Instant::now();
        }
        for l in lines {
            let mut line = BytesMut::with_capacity(l.len() + 1);
            line.extend_from_slice(&l);
            line.extend_from_slice(b"\n");
            if !child.send(line.freeze()) {
                return Err("its stdin is closed".into());
            }
        }
        Ok(requests)
    }

    fn get_stream(&self, s: &Arc<Session>) -> Response<UpstreamBody> {
        let mut st = s.st.locked();
        if st.get.as_ref().is_some_and(|g| !g.is_closed()) {
            return error_reply(
                StatusCode::CONFLICT,
                -32000,
                "Conflict: only one SSE stream is allowed per session",
            );
        }
        let (tx, body) = LocalBody::channel(Some(Box::new(StreamGone(Arc::downgrade(s)))));
        // An SSE comment first: the head and the stream's start reach the client at once.
        tx.send(Bytes::from_static(b": rpctap\n\n"));
        for m in st.backlog.drain(..) {
            tx.send(sse_event(&m));
        }
        st.get = Some(tx);
        st.had_get = true;
        st.last = Instant::now();
        st.last_keepalive = Instant::now();
        drop(st);
        sse_response(body)
    }

    /// `GET /sse` (`--legacy-sse`): a session whose every server message goes on this stream,
    /// announced by an `endpoint` event.
    fn legacy_open(&self) -> Response<UpstreamBody> {
        let s = match self.open_session(true) {
            Ok(s) => s,
            Err(r) => return *r,
        };
        let (tx, body) = LocalBody::channel(Some(Box::new(StreamGone(Arc::downgrade(&s)))));
        tx.send(Bytes::from(format!(
            "event: endpoint\ndata: /message?sessionId={}\n\n",
            s.id
        )));
        {
            let mut st = s.st.locked();
            st.get = Some(tx);
            st.had_get = true;
        }
        sse_response(body)
    }

    /// `POST /message?sessionId=…` (`--legacy-sse`): `202`, the replies on the session's stream.
    fn legacy_post(&self, s: &Arc<Session>, body: Bytes) -> Response<UpstreamBody> {
        let msgs = match Self::messages(&body) {
            Ok(m) => m,
            Err(e) => {
                return error_reply(
                    StatusCode::BAD_REQUEST,
                    -32700,
                    &format!("Parse error: {e}"),
                )
            }
        };
        // The replies go to the session's stream: a post that is no stream of its own.
        let (tx, _body) = LocalBody::channel(None);
        let post = Arc::new(Post {
            session: s.clone(),
            tx,
            sse: false,
            st: Mutex::new(PostState {
                remaining: 0,
                parts: Vec::new(),
            }),
        });
        match self.forward(s, &post, &msgs) {
            Ok(_) => local(StatusCode::ACCEPTED, None),
            Err(why) => error_reply(
                StatusCode::NOT_FOUND,
                CODE_NO_SESSION,
                &format!("rpctap: the server is gone: {why}"),
            ),
        }
    }
}

/// Delivers a server message to a session: its newest open SSE post, else its GET stream,
/// else its backlog (bounded).
fn deliver(s: &Arc<Session>, line: &Bytes, prefer_post: bool) {
    let mut st = s.st.locked();
    if st.legacy {
        if let Some(g) = &st.get {
            g.send(sse_event(line));
        }
        return;
    }
    if prefer_post {
        st.posts
            .retain(|p| p.upgrade().is_some_and(|p| !p.tx.is_closed()));
        if let Some(p) = st.posts.last().and_then(Weak::upgrade) {
            if p.tx.queued() < SLOW_CLIENT {
                p.tx.send(sse_event(line));
            }
            return;
        }
    }
    if let Some(g) = st.get.as_ref().filter(|g| !g.is_closed()) {
        if g.queued() < SLOW_CLIENT {
            g.send(sse_event(line));
        }
        return;
    }
    if st.backlog.len() >= BACKLOG {
        st.backlog.pop_front();
    }
    st.backlog.push_back(line.clone());
}

/// Sends a reply to its POST: an SSE event now, or a part of the JSON body (sent whole with the
/// last part); the POST ends with its last reply.
fn reply_to(post: &Arc<Post>, line: Bytes) {
    let s = &post.session;
    if s.st.locked().legacy {
        deliver(s, &line, false);
    } else if post.sse {
        post.tx.send(sse_event(&line));
    }
    let done = {
        let mut st = post.st.locked();
        st.remaining = st.remaining.saturating_sub(1);
        if !post.sse {
            st.parts.push(line);
        }
        st.remaining == 0
    };
    {
        let mut st = s.st.locked();
        st.inflight = st.inflight.saturating_sub(1);
        st.last = Instant::now();
        if done {
            st.posts
                .retain(|p| p.upgrade().is_some_and(|p| !Arc::ptr_eq(&p, post)));
        }
    }
    if done && !post.sse {
        let parts = std::mem::take(&mut post.st.locked().parts);
        let body = if parts.len() == 1 {
            parts.into_iter().next().unwrap_or_default()
        } else {
            crate::rpc::join_array(parts.iter().map(|p| &p[..]))
        };
        post.tx.send(body);
    }
}

/// A worker's child reports here.
struct WorkerOwner {
    bridge: Weak<Inner>,
    worker: Weak<Worker>,
    scope: crate::events::Scope,
}

impl child::Owner for WorkerOwner {
    fn line(&self, line: Bytes) {
        let Some(w) = self.worker.upgrade() else {
            return;
        };
        let Ok(env) = serde_json::from_slice::<Envelope>(&line) else {
            // Not a message the bridge can route (a batch, a stray line): to every session.
            for s in live_sessions(&w) {
                deliver(&s, &line, true);
            }
            return;
        };
        match (env.id, &env.method) {
            // A reply: to its POST, its id as the client sent it.
            (Some(id), None) => {
                let call = {
                    let mut r = w.routes.locked();
                    let mut c = r.calls.remove(id.get());
                    if c.is_some() {
                        r.invalid.retain(|i| **i != *id.get());
                    } else if id.get() == "null" {
                        // The answer to an invalid request the server could not read the id of.
                        if let Some(i) = r.invalid.pop_front() {
                            c = r.calls.remove(&i);
                        }
                    }
                    if let Some(c) = &c {
                        if let Some(t) = &c.token {
                            r.tokens.remove(t);
                        }
                        if let Some(cid) = &c.client_id {
                            let key = (c.post.session.id.clone(), cid.clone());
                            r.by_client.remove(&key);
                        }
                    }
                    c
                };
                match call {
                    Some(c) => {
                        let line = match &c.client_id {
                            Some(cid) => splice(&line, vec![(id.get(), cid.to_string())]),
                            None => line.clone(),
                        };
                        reply_to(&c.post, line);
                    }
                    None => {
                        // A reply nobody waits for (a call its session left): the last caller's.
                        if let Some(s) = w.routes.locked().last_caller.upgrade() {
                            deliver(&s, &line, true);
                        }
                    }
                }
            }
            (_, Some(method)) => {
                let token = env.params.as_ref().and_then(|p| p.progress_token);
                if method == "notifications/progress" {
                    if let Some(t) = token {
                        let found = w
                            .routes
                            .locked()
                            .tokens
                            .get(t.get())
                            .map(|k| (k.post.clone(), k.client_token.clone()));
                        if let Some((post, client_token)) = found {
                            let line = match client_token {
                                Some(ct) => splice(&line, vec![(t.get(), ct.to_string())]),
                                None => line.clone(),
                            };
                            if post.sse && !post.tx.is_closed() {
                                if post.tx.queued() < SLOW_CLIENT {
                                    post.tx.send(sse_event(&line));
                                }
                            } else {
                                deliver(&post.session, &line, true);
                            }
                            return;
                        }
                    }
                }
                let request = env.id.is_some();
                if w.kind != Kind::Shared || request {
                    let target = if w.kind == Kind::Own {
                        live_sessions(&w).into_iter().next()
                    } else {
                        w.routes.locked().last_caller.upgrade()
                    };
                    if let Some(s) = target {
                        deliver(&s, &line, true);
                    }
                } else {
                    for s in live_sessions(&w) {
                        deliver(&s, &line, true);
                    }
                }
            }
            _ => {
                for s in live_sessions(&w) {
                    deliver(&s, &line, true);
                }
            }
        }
    }

    fn stderr(&self, line: &[u8], cut: bool) {
        let Some(b) = self.bridge.upgrade() else {
            return;
        };
        if b.opts.pass_stderr {
            use std::io::Write;
            let mut e = std::io::stderr().lock();
            let _ = e.write_all(line).and_then(|()| e.write_all(b"\n"));
        }
        let text = String::from_utf8_lossy(line);
        b.inspector
            .publish(crate::events::Event::Stderr(crate::events::StderrEvent {
                ts: crate::events::now_ns(),
                scope: self.scope.clone(),
                line: crate::redact::scrub_text(&text, &b.opts.secrets),
                cut,
            }));
    }

    fn exited(&self, how: String, failed: bool) {
        let Some(w) = self.worker.upgrade() else {
            return;
        };
        let Some(inner) = self.bridge.upgrade() else {
            return;
        };
        let bridge = Bridge { inner };
        let (calls, sessions) = {
            let mut r = w.routes.locked();
            r.dead = Some(how.clone());
            r.tokens.clear();
            r.by_client.clear();
            let calls: Vec<(Box<str>, Call)> = r.calls.drain().collect();
            let sessions: Vec<Arc<Session>> = r.sessions.iter().filter_map(Weak::upgrade).collect();
            (calls, sessions)
        };
        w.child.locked().take();
        // Each pending call answered at once, with why.
        for (child_id, c) in calls {
            let id = c.client_id.as_deref().unwrap_or(&child_id).to_string();
            reply_to(
                &c.post,
                error_line(&id, CODE_INTERNAL, &format!("rpctap: {how}")),
            );
        }
        let stopping = bridge.inner.st.locked().shutting_down;
        for s in &sessions {
            if !s.st.locked().ended {
                bridge.inner.inspector.publish(crate::events::Event::Notice(
                    crate::events::NoticeEvent {
                        ts: crate::events::now_ns(),
                        what: "bridge-exit",
                        message: format!("session {}: {how}; the session ended", s.id),
                    },
                ));
            }
            bridge.end_session(s, "its server exited");
        }
        if w.kind == Kind::Shared && !stopping {
            bridge.shared_exited(&w, &how, failed);
        }
        if w.kind == Kind::Stateless {
            let mut st = bridge.inner.st.locked();
            if st.stateless.as_ref().is_some_and(|x| Arc::ptr_eq(x, &w)) {
                st.stateless = None;
            }
        }
    }
}

impl Bridge {
    /// The shared child exited: by `--restart`, started again after the backoff, or not.
    fn shared_exited(&self, w: &Arc<Worker>, how: &str, failed: bool) {
        let restart = match self.inner.opts.restart {
            Restart::Never => false,
            Restart::OnFailure => failed,
            Restart::Always => true,
        };
        let delay = {
            let mut st = self.inner.st.locked();
            if st.shared.as_ref().is_some_and(|x| Arc::ptr_eq(x, w)) {
                st.shared = None;
            }
            if !restart {
                st.given_up = Some(how.to_string());
                return;
            }
            // A child that ran a minute is no crash loop: the backoff starts over.
            if w.started.elapsed() >= Duration::from_secs(60) {
                st.failures = 0;
            }
            let d = Duration::from_millis(500)
                .saturating_mul(1u32 << st.failures.min(6))
                .min(Duration::from_secs(30));
            st.failures += 1;
            st.not_before = Some(Instant::now() + d);
            d
        };
        tracing::warn!(
            delay_ms = delay.as_millis() as u64,
            reason = how,
            "bridge: the shared server exited; restarting it"
        );
        let me = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            if me.inner.st.locked().shutting_down {
                return;
            }
            match me.spawn_worker(Kind::Shared, "shared") {
                Ok(nw) => {
                    let mut st = me.inner.st.locked();
                    st.shared = Some(nw);
                    st.not_before = None;
                }
                Err(e) => {
                    tracing::error!(error = %e, "bridge: the shared server could not be restarted");
                    me.inner.st.locked().given_up = Some(e);
                }
            }
        });
    }
}

fn live_sessions(w: &Worker) -> Vec<Arc<Session>> {
    w.routes
        .locked()
        .sessions
        .iter()
        .filter_map(Weak::upgrade)
        .collect()
}

impl crate::proxy::upstream::Local for Bridge {
    fn call(&self, req: Request<ForwardBody>) -> crate::proxy::upstream::LocalFuture {
        Box::pin(self.clone().handle(req))
    }
}

/// The program `prog` resolves to on `PATH` (or as a path).
pub fn which(prog: &str) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let runnable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if prog.contains('/') {
        let p = std::path::PathBuf::from(prog);
        return runnable(&p).then_some(p);
    }
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| std::path::Path::new(if d.is_empty() { "." } else { d }).join(prog))
        .find(|p| runnable(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_tokens_are_replaced_where_they_stand() {
        let line = Bytes::from_static(br#"{"jsonrpc":"2.0","id":"a b","method":"tools/call","params":{"_meta":{"progressToken":7},"name":"x"}}"#);
        let env: Envelope = serde_json::from_slice(&line).unwrap();
        let id = env.id.unwrap().get();
        let t = env
            .params
            .as_ref()
            .unwrap()
            .meta
            .as_ref()
            .unwrap()
            .progress_token
            .unwrap()
            .get();
        let out = splice(&line, vec![(t, "\"rpctap-2\"".into()), (id, "1".into())]);
        assert_eq!(
            &out[..],
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"_meta":{"progressToken":"rpctap-2"},"name":"x"}}"#
        );
        // A slice of another buffer is never spliced in.
        let other = String::from("\"a b\"");
        assert_eq!(splice(&line, vec![(other.as_str(), "9".into())]), line);
    }

    #[test]
    fn a_batch_is_split_into_its_members_bytes_unchanged() {
        let body = Bytes::from_static(b" [ {\"id\":1, \"method\":\"a\"} ,{\"method\":\"b\"}]\n");
        let m = Bridge::messages(&body).unwrap();
        assert_eq!(
            m,
            vec![
                Bytes::from_static(b"{\"id\":1, \"method\":\"a\"}"),
                Bytes::from_static(b"{\"method\":\"b\"}")
            ]
        );
        let one = Bridge::messages(&Bytes::from_static(b"{\"id\":1}\r\n")).unwrap();
        assert_eq!(one, vec![Bytes::from_static(b"{\"id\":1}")]);
        assert!(Bridge::messages(&Bytes::from_static(b"{nope")).is_err());
    }

    #[test]
    fn error_lines_keep_the_client_id() {
        assert_eq!(
            &error_line("\"x\"", -32603, "gone")[..],
            br#"{"jsonrpc":"2.0","id":"x","error":{"code":-32603,"message":"gone"}}"#
        );
        assert_eq!(
            &error_line("null", -32001, "Session not found")[..],
            br#"{"jsonrpc":"2.0","id":null,"error":{"code":-32001,"message":"Session not found"}}"#
        );
    }
}

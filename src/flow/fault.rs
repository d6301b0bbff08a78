//! Fault injection: `[[fault]]` rules (and `--fault` flags) that make a server misbehave on
//! purpose, so that a client's author can see what their client does when a tool is slow,
//! errors, never answers, answers twice or with the wrong id, or when the stream dies.
//!
//! A rule matches calls the way a `[[limit]]` rule does (method, tool and resource globs) and
//! further by session and peer; `after` skips the first N matching calls, `count` stops after N
//! faults, `probability` fires on a share of the rest. It lives in the [`crate::limit::Limiter`]
//! beside the rate limits, so every transport that decides its calls there (HTTP, stdio,
//! WebSocket) decides faults too, and a SIGHUP reload replaces both at once.
//!
//! What a fault does is split by when it acts:
//! - **instead of the server** (`error`, `status`): the call never reaches the server; rpctap
//!   answers it, through the rate limits' refusal path (a [`crate::limit::Refusal`] that names
//!   the rule and says it was injected);
//! - **on the request** (`delay` with `at = "request"`, `close`): the transport waits, or closes
//!   the connection (the child's pipes);
//! - **on the reply** (`delay`, `drop`, `duplicate`, `wrong_id`, `malformed`, `throttle`,
//!   `cut_stream_after`): armed by the call's id and applied by the transport when the server's
//!   reply (or the stream carrying it) passes.
//!
//! A rule with `direction = "s2c"` matches the server's requests (sampling, elicitation, roots)
//! by method and swaps the roles: `error` answers the server in the client's place, `delay`
//! holds the request before the client gets it, the reply actions act on the client's answer
//! (armed by the server request's id on the client's side of each transport).
//!
//! The inspector always sees what the server sent; what a fault made instead is published as an
//! [`crate::events::FaultEvent`] naming the rule (its bytes when it made a frame), so that
//! `check` never blames the server for it.

use crate::rpc::CallInfo;
use globset::{Glob, GlobMatcher};
use serde::Deserialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The JSON-RPC code of an injected error when the rule names none.
pub const DEFAULT_CODE: i64 = -32000;

/// One rule as written in the config file (`[[fault]]`) or a `--fault` flag.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    /// Shown in the events it makes; defaults to `fault N`.
    pub name: Option<String>,
    pub method: Option<String>,
    pub tool: Option<String>,
    pub resource: Option<String>,
    /// The A2A skill a message names (`rpc::a2a::skill_of`).
    pub skill: Option<String>,
    /// A glob on the MCP session id (stdio sessions are named as in the recording).
    pub session: Option<String>,
    /// The client's IP address (HTTP and WebSocket; stdio's is 127.0.0.1).
    pub peer: Option<String>,
    /// A request header of the client's and a glob on its value: `"x-client-id=ci-*"` (HTTP
    /// and WebSocket: the upgrade request's).
    pub header: Option<String>,
    /// Whose calls: `c2s` (the client's, the default) or `s2c` (the server's requests to the
    /// client: sampling, elicitation, roots — matched by `method`; the roles swap: `error` is
    /// rpctap answering the server in the client's place, the reply actions act on the
    /// client's answer on its way to the server).
    pub direction: Option<String>,
    /// Fires on this share of the matching calls (0–1, default 1).
    pub probability: Option<f64>,
    /// Fires at most this many times (default: no end).
    pub count: Option<u64>,
    /// Lets the first N matching calls through untouched.
    pub after: Option<u64>,
    /// `"2s"`, `"150ms"`: the request or the reply held this long.
    pub delay: Option<String>,
    /// `request` (default for `delay`) or `reply`.
    pub at: Option<String>,
    /// Answered by rpctap with this error; the call never reaches the server.
    pub error: Option<ErrorSpec>,
    /// Answered by rpctap with this HTTP status (HTTP only).
    pub status: Option<u16>,
    /// The reply is never delivered: the client's timeout decides.
    #[serde(default)]
    pub drop: bool,
    /// The reply delivered twice.
    #[serde(default)]
    pub duplicate: bool,
    /// The reply delivered with an id no call has.
    #[serde(default)]
    pub wrong_id: bool,
    /// The reply's JSON cut in half.
    #[serde(default)]
    pub malformed: bool,
    /// The stream carrying the reply (an SSE response, a stdio session) closed after N more
    /// messages from the server.
    pub cut_stream_after: Option<u32>,
    /// With `cut_stream_after`: closed in the middle of the message after the Nth.
    #[serde(default)]
    pub mid_event: bool,
    /// The connection (the child's pipes) closed when the call arrives.
    #[serde(default)]
    pub close: bool,
    /// `"1KiB/s"`: the reply written at this rate.
    pub throttle: Option<String>,
    /// MCP tasks: the task a reply shows (a `tasks/get` reply, a task handle) made `fail`
    /// (status `failed` with an injected error), `cancel` (status `cancelled`) or `stall`
    /// (status `working`, so that it never ends for the client).
    pub task: Option<String>,
}

/// An injected error: `error = { code = -32000, message = "…", data = … }`.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ErrorSpec {
    pub code: Option<i64>,
    pub message: Option<String>,
    pub data: Option<serde_json::Value>,
}

/// A rule's error, naming the rule and the setting.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("fault rule {rule}: {message}")]
pub struct FaultError {
    pub rule: String,
    pub message: String,
}

/// Where the request or reply is held by a `delay`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Request,
    Reply,
}

/// What a fault does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    Delay(Duration, At),
    /// Answered by rpctap: (HTTP status or none, code, message, data).
    Error {
        status: Option<u16>,
        code: i64,
        message: Arc<str>,
        data: Option<Arc<serde_json::Value>>,
    },
    Drop,
    Duplicate,
    WrongId,
    Malformed,
    CutStreamAfter {
        n: u32,
        mid_event: bool,
    },
    Close,
    /// Bytes per second.
    Throttle(u64),
    /// The reply's bytes replaced by what a stage makes of them (`crate::flow`).
    Edit(Edit),
}

/// A change a stage makes to a reply (a deny list hiding tools from `tools/list`, say): applied
/// by every transport where it applies the other reply faults, and recorded as injected.
pub trait ReplyEdit: Send + Sync {
    /// The action's name in events and metrics.
    fn name(&self) -> &'static str;
    /// The reply as the client gets it and what was done; `None` when there is nothing to
    /// change.
    fn edit(&self, reply: &[u8]) -> Option<(Vec<u8>, String)>;
}

/// A [`ReplyEdit`] in an [`Action`] (equal when it is the same edit).
#[derive(Clone)]
pub struct Edit(pub Arc<dyn ReplyEdit>);

impl PartialEq for Edit {
    fn eq(&self, other: &Edit) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl std::fmt::Debug for Edit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Edit({})", self.0.name())
    }
}

/// What a `task` fault makes of the task a reply shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TaskFault {
    Fail,
    Cancel,
    Stall,
}

/// A `task` fault: the task object in a reply (a 2026-07-28 `tasks/get` result or task handle,
/// a 2025-11-25 `tasks/get` result or `{"task": {…}}` handle) gets the status the rule names,
/// its `result`, `error` and `inputRequests` replaced to match.
struct TaskEdit {
    kind: TaskFault,
    rule: Arc<str>,
}

impl ReplyEdit for TaskEdit {
    fn name(&self) -> &'static str {
        "task"
    }

    fn edit(&self, reply: &[u8]) -> Option<(Vec<u8>, String)> {
        let mut v: serde_json::Value = serde_json::from_slice(reply).ok()?;
        let task = crate::rpc::task_in_mut(v.get_mut("result")?)?.as_object_mut()?;
        let was = task.get("status")?.as_str()?.to_string();
        for k in ["result", "error", "inputRequests"] {
            task.remove(k);
        }
        let status = match self.kind {
            TaskFault::Fail => {
                task.insert(
                    "error".into(),
                    serde_json::json!({
                        "code": -32603,
                        "message": format!("rpctap: injected task failure ({})", self.rule)
                    }),
                );
                "failed"
            }
            TaskFault::Cancel => "cancelled",
            TaskFault::Stall => "working",
        };
        task.insert("status".into(), status.into());
        let id = task.get("taskId").and_then(|t| t.as_str()).unwrap_or("?");
        let detail = format!("task {id}: status {was} made {status}");
        Some((serde_json::to_vec(&v).ok()?, detail))
    }
}

impl Action {
    /// The action's name, as events and metrics show it.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Delay(..) => "delay",
            Action::Error { status: None, .. } => "error",
            Action::Error { .. } => "status",
            Action::Drop => "drop",
            Action::Duplicate => "duplicate",
            Action::WrongId => "wrong_id",
            Action::Malformed => "malformed",
            Action::CutStreamAfter { .. } => "cut_stream_after",
            Action::Close => "close",
            Action::Throttle(_) => "throttle",
            Action::Edit(e) => e.0.name(),
        }
    }

    /// Whether it acts on the call's reply (armed by the call's id).
    pub fn on_reply(&self) -> bool {
        matches!(
            self,
            Action::Delay(_, At::Reply)
                | Action::Drop
                | Action::Duplicate
                | Action::WrongId
                | Action::Malformed
                | Action::CutStreamAfter { .. }
                | Action::Throttle(_)
                | Action::Edit(_)
        )
    }
}

/// The transport a rule set serves: actions with no meaning there are refused at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Carrier {
    Http,
    Stdio,
    WebSocket,
    /// Not known yet (the config's first read): only what no transport accepts is refused.
    Any,
}

/// A fault that fired for one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    pub rule: Arc<str>,
    pub action: Action,
    /// Whose call it fired on: the client's (`ClientToServer`) or a server's request.
    pub direction: crate::events::Direction,
}

struct Rule {
    name: Arc<str>,
    /// Whose calls it matches: the client's (`c2s`) or the server's requests (`s2c`).
    direction: crate::events::Direction,
    calls: crate::rpc::CallGlobs,
    session: Option<GlobMatcher>,
    peer: Option<std::net::IpAddr>,
    header: Option<(http::HeaderName, GlobMatcher)>,
    probability: f64,
    count: Option<u64>,
    after: u64,
    action: Action,
    /// Matching calls seen, and faults fired.
    seen: AtomicU64,
    fired: AtomicU64,
}

/// The fault rules in force (empty: none, and nothing on the hot path but one length check).
#[derive(Default)]
pub struct Faults {
    rules: Vec<Rule>,
    /// Whether any rule matches the server's requests (their relays decide them only then).
    s2c: bool,
    /// Seeds the `probability` draws (each draw hashes the rule's count with it).
    seed: foldhash::fast::RandomState,
}

impl std::fmt::Debug for Faults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Faults")
            .field("rules", &self.rules.len())
            .finish()
    }
}

fn glob(rule: &str, what: &str, p: &Option<String>) -> Result<Option<GlobMatcher>, FaultError> {
    p.as_deref()
        .map(|p| {
            Glob::new(p)
                .map(|g| g.compile_matcher())
                .map_err(|e| FaultError {
                    rule: rule.to_string(),
                    message: format!("{what} glob {p:?}: {e}"),
                })
        })
        .transpose()
}

/// `1KiB/s`, `500B/s`, `2MiB/s` → bytes per second.
fn parse_throttle(s: &str) -> Result<u64, String> {
    let per = s
        .trim()
        .strip_suffix("/s")
        .ok_or_else(|| format!("throttle {s:?} must be a rate per second, e.g. \"1KiB/s\""))?;
    let n = crate::units::size(per).map_err(|e| format!("throttle {s:?}: {e}"))?;
    if n == 0 {
        return Err(format!("throttle {s:?} must be more than 0 bytes a second"));
    }
    Ok(n)
}

impl FaultSpec {
    /// A rule from `--fault 'method=tools/call,tool=slow,delay=2s'`: the config's keys, comma
    /// separated; a flag (`drop`, `duplicate`…) alone means true, `error=CODE[:MESSAGE]`.
    pub fn parse_flag(s: &str) -> Result<FaultSpec, FaultError> {
        let err = |m: String| FaultError {
            rule: s.to_string(),
            message: m,
        };
        let mut spec = FaultSpec {
            name: Some(s.to_string()),
            ..Default::default()
        };
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, v) = match part.split_once('=') {
                Some((k, v)) => (k.trim(), Some(v.trim())),
                None => (part, None),
            };
            let text = |v: Option<&str>| {
                v.map(str::to_string)
                    .ok_or_else(|| err(format!("`{k}` needs a value: {k}=…")))
            };
            let num = |v: Option<&str>| -> Result<u64, FaultError> {
                let t = text(v)?;
                t.parse()
                    .map_err(|_| err(format!("`{k}={t}`: not a whole number")))
            };
            let flag = |v: Option<&str>| -> Result<bool, FaultError> {
                match v {
                    None | Some("true") => Ok(true),
                    Some("false") => Ok(false),
                    Some(o) => Err(err(format!("`{k}={o}`: true or false"))),
                }
            };
            match k {
                "name" => spec.name = Some(text(v)?),
                "method" => spec.method = Some(text(v)?),
                "tool" => spec.tool = Some(text(v)?),
                "skill" => spec.skill = Some(text(v)?),
                "resource" => spec.resource = Some(text(v)?),
                "session" => spec.session = Some(text(v)?),
                "peer" => spec.peer = Some(text(v)?),
                "header" => spec.header = Some(text(v)?),
                "direction" => spec.direction = Some(text(v)?),
                "probability" => {
                    let t = text(v)?;
                    spec.probability = Some(
                        t.parse()
                            .map_err(|_| err(format!("`probability={t}`: a number 0–1")))?,
                    )
                }
                "count" => spec.count = Some(num(v)?),
                "after" => spec.after = Some(num(v)?),
                "delay" => spec.delay = Some(text(v)?),
                "at" => spec.at = Some(text(v)?),
                "status" => spec.status = Some(num(v)?.try_into().unwrap_or(u16::MAX)),
                "error" => {
                    let t = text(v)?;
                    let (code, message) = match t.split_once(':') {
                        Some((c, m)) => (c, Some(m.to_string())),
                        None => (t.as_str(), None),
                    };
                    let code = code
                        .trim()
                        .parse()
                        .map_err(|_| err(format!("`error={t}`: error=CODE[:MESSAGE]")))?;
                    spec.error = Some(ErrorSpec {
                        code: Some(code),
                        message,
                        data: None,
                    })
                }
                "drop" => spec.drop = flag(v)?,
                "duplicate" => spec.duplicate = flag(v)?,
                "wrong_id" => spec.wrong_id = flag(v)?,
                "malformed" => spec.malformed = flag(v)?,
                "close" => spec.close = flag(v)?,
                "mid_event" => spec.mid_event = flag(v)?,
                "cut_stream_after" => {
                    spec.cut_stream_after = Some(num(v)?.try_into().unwrap_or(u32::MAX))
                }
                "throttle" => spec.throttle = Some(text(v)?),
                "task" => spec.task = Some(text(v)?),
                other => {
                    return Err(err(format!(
                    "unknown key `{other}` (method, tool, resource, skill, session, peer, header, \
                         direction, \
                         probability, count, after, name; one action: delay[, at], error, \
                         status, drop, duplicate, wrong_id, malformed, cut_stream_after[, \
                         mid_event], close, throttle, task)"
                )))
                }
            }
        }
        Ok(spec)
    }

    /// The one action the rule names.
    fn action(
        &self,
        rule: &str,
        carrier: Carrier,
        dir: crate::events::Direction,
    ) -> Result<Action, FaultError> {
        let err = |m: String| FaultError {
            rule: rule.to_string(),
            message: m,
        };
        let mut actions: Vec<Action> = Vec::new();
        let at = match self.at.as_deref() {
            None | Some("request") => At::Request,
            Some("reply") => At::Reply,
            Some(o) => return Err(err(format!("at = {o:?}: request or reply"))),
        };
        if self.at.is_some() && self.delay.is_none() {
            return Err(err("`at` goes with `delay`".into()));
        }
        if let Some(d) = &self.delay {
            let d = humantime::parse_duration(d)
                .map_err(|e| err(format!("delay = {d:?}: {e} (e.g. \"2s\", \"150ms\")")))?;
            actions.push(Action::Delay(d, at));
        }
        if self.error.is_some() || self.status.is_some() {
            let e = self.error.clone().unwrap_or_default();
            if let Some(s) = self.status {
                if !(400..=599).contains(&s) {
                    return Err(err(format!("status = {s}: an HTTP error status, 400–599")));
                }
            }
            actions.push(Action::Error {
                status: self.status,
                code: e.code.unwrap_or(DEFAULT_CODE),
                message: e
                    .message
                    .unwrap_or_else(|| format!("rpctap: injected fault ({rule})"))
                    .into(),
                data: e.data.map(Arc::new),
            });
        }
        for (on, a) in [
            (self.drop, Action::Drop),
            (self.duplicate, Action::Duplicate),
            (self.wrong_id, Action::WrongId),
            (self.malformed, Action::Malformed),
            (self.close, Action::Close),
        ] {
            if on {
                actions.push(a);
            }
        }
        if let Some(n) = self.cut_stream_after {
            actions.push(Action::CutStreamAfter {
                n,
                mid_event: self.mid_event,
            });
        } else if self.mid_event {
            return Err(err("`mid_event` goes with `cut_stream_after`".into()));
        }
        if let Some(t) = &self.throttle {
            actions.push(Action::Throttle(parse_throttle(t).map_err(err)?));
        }
        if let Some(t) = &self.task {
            let kind = match t.as_str() {
                "fail" => TaskFault::Fail,
                "cancel" => TaskFault::Cancel,
                "stall" => TaskFault::Stall,
                o => return Err(err(format!("task = {o:?}: fail, cancel or stall"))),
            };
            actions.push(Action::Edit(Edit(Arc::new(TaskEdit {
                kind,
                rule: rule.into(),
            }))));
        }
        let action = match actions.len() {
            1 => actions.remove(0),
            0 => {
                return Err(err(
                    "no action: give one of delay, error, status, drop, duplicate, wrong_id, \
                     malformed, cut_stream_after, close, throttle, task"
                        .into(),
                ))
            }
            _ => {
                let names: Vec<&str> = actions.iter().map(Action::name).collect();
                return Err(err(format!(
                    "one action per rule, this one has {} (write a rule for each)",
                    names.join(", ")
                )));
            }
        };
        let meaningless = match (carrier, &action) {
            (
                Carrier::Stdio,
                Action::Error {
                    status: Some(_), ..
                },
            ) => Some("an HTTP status means nothing over stdio (use `error`)"),
            (
                Carrier::WebSocket,
                Action::Error {
                    status: Some(_), ..
                },
            ) => Some("an HTTP status means nothing inside a WebSocket (use `error`)"),
            (
                Carrier::WebSocket,
                Action::CutStreamAfter {
                    mid_event: true, ..
                },
            ) => Some("a WebSocket message cannot be cut in the middle (drop `mid_event`)"),
            _ => None,
        };
        let meaningless = meaningless.or(match (dir, &action) {
            (crate::events::Direction::ClientToServer, _) => None,
            (
                _,
                Action::Error {
                    status: Some(_), ..
                },
            ) => Some(
                "direction = \"s2c\": rpctap answers the server's request in the client's \
                 place with a JSON-RPC error (`error`), not an HTTP status",
            ),
            (_, Action::CutStreamAfter { .. }) => Some(
                "direction = \"s2c\": `cut_stream_after` cuts the server's stream after a call \
                 of the client's (a c2s rule); use `close` to end the session at the server's \
                 request",
            ),

            _ => None,
        });
        if let Some(m) = meaningless {
            return Err(err(m.into()));
        }
        Ok(action)
    }
}

impl Faults {
    /// The rules for `carrier`, in order; each named `fault N` unless it has a name.
    pub fn new(specs: &[FaultSpec], carrier: Carrier) -> Result<Faults, FaultError> {
        let mut rules = Vec::new();
        for (i, s) in specs.iter().enumerate() {
            let name: Arc<str> = s
                .name
                .clone()
                .unwrap_or_else(|| format!("fault {}", i + 1))
                .into();
            let err = |m: String| FaultError {
                rule: name.to_string(),
                message: m,
            };
            let probability = s.probability.unwrap_or(1.0);
            if !(0.0..=1.0).contains(&probability) {
                return Err(err(format!("probability = {probability}: between 0 and 1")));
            }
            let peer = s
                .peer
                .as_deref()
                .map(|p| {
                    p.parse()
                        .map_err(|_| err(format!("peer = {p:?}: an IP address")))
                })
                .transpose()?;
            let direction = match s.direction.as_deref() {
                None | Some("c2s") => crate::events::Direction::ClientToServer,
                Some("s2c") => {
                    if s.tool.is_some() || s.resource.is_some() || s.skill.is_some() {
                        return Err(err(
                            "direction = \"s2c\": `tool`, `resource` and `skill` name the \
                             client's calls; match the server's requests by `method` \
                             (\"sampling/createMessage\", \"elicitation/*\", \"roots/list\")"
                                .into(),
                        ));
                    }
                    crate::events::Direction::ServerToClient
                }
                Some(d) => return Err(err(format!("direction = {d:?}: c2s or s2c"))),
            };
            let rule_name = name.to_string();
            let header = match s.header.as_deref() {
                None => None,
                Some(h) => {
                    let (n, g) = h.split_once('=').ok_or_else(|| {
                        err(format!("header = {h:?}: NAME=GLOB (\"x-client-id=ci-*\")"))
                    })?;
                    let name = http::HeaderName::from_bytes(n.trim().as_bytes())
                        .map_err(|_| err(format!("header = {h:?}: {n:?} is not a header name")))?;
                    let g = glob(&rule_name, "header", &Some(g.trim().to_string()))?
                        .ok_or_else(|| err(format!("header = {h:?}: a glob after `=`")))?;
                    Some((name, g))
                }
            };
            rules.push(Rule {
                calls: crate::rpc::CallGlobs {
                    method: glob(&name, "method", &s.method)?,
                    tool: glob(&name, "tool", &s.tool)?,
                    resource: glob(&name, "resource", &s.resource)?,
                    skill: glob(&name, "skill", &s.skill)?,
                },
                session: glob(&name, "session", &s.session)?,
                peer,
                header,
                probability,
                count: s.count,
                after: s.after.unwrap_or(0),
                action: s.action(&name, carrier, direction)?,
                direction,
                seen: AtomicU64::new(0),
                fired: AtomicU64::new(0),
                name,
            });
        }
        Ok(Faults {
            s2c: rules
                .iter()
                .any(|r| r.direction == crate::events::Direction::ServerToClient),
            rules,
            seed: Default::default(),
        })
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether a rule matches the server's requests (`direction = "s2c"`).
    pub fn has_s2c(&self) -> bool {
        self.s2c
    }

    /// The first rule that fires for the client's `call` (counted as seen by every rule it
    /// matches before that one).
    pub fn decide(
        &self,
        call: &CallInfo<'_>,
        session: Option<&str>,
        peer: std::net::IpAddr,
        headers: &http::HeaderMap,
    ) -> Option<Fired> {
        self.decide_in(
            crate::events::Direction::ClientToServer,
            call,
            session,
            peer,
            headers,
        )
    }

    /// The first rule of direction `dir` that fires for `call` (a request of the client's
    /// for `ClientToServer`, of the server's for `ServerToClient`).
    pub fn decide_in(
        &self,
        dir: crate::events::Direction,
        call: &CallInfo<'_>,
        session: Option<&str>,
        peer: std::net::IpAddr,
        headers: &http::HeaderMap,
    ) -> Option<Fired> {
        for r in &self.rules {
            let matches = r.direction == dir
                && r.calls.matches(call)
                && r.session
                    .as_ref()
                    .is_none_or(|g| session.is_some_and(|s| g.is_match(s)))
                && r.peer.is_none_or(|p| p == peer)
                && r.header.as_ref().is_none_or(|(n, g)| {
                    headers
                        .get(n)
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| g.is_match(v))
                });
            if !matches {
                continue;
            }
            let n = r.seen.fetch_add(1, Ordering::Relaxed);
            if n < r.after {
                continue;
            }
            if r.probability < 1.0 {
                use std::hash::BuildHasher;
                let draw = self
                    .seed
                    .hash_one((Arc::as_ptr(&r.name) as *const u8 as usize, n));
                if (draw >> 11) as f64 / (1u64 << 53) as f64 >= r.probability {
                    continue;
                }
            }
            // `count`: taken only while below it, so that concurrent calls never exceed it.
            let took = r
                .fired
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |f| {
                    r.count.is_none_or(|c| f < c).then_some(f + 1)
                })
                .is_ok();
            if took {
                return Some(Fired {
                    rule: r.name.clone(),
                    action: r.action.clone(),
                    direction: dir,
                });
            }
        }
        None
    }
}

/// A reply with its `id` replaced by one no call has (`"rpctap-wrong-id-…"`, keeping the
/// original in the string); `None` when it is not a JSON object with an id.
pub fn with_wrong_id(reply: &[u8]) -> Option<Vec<u8>> {
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(reply).ok()?;
    let id = v.get_mut("id")?;
    *id = serde_json::Value::String(format!("rpctap-wrong-id-{id}"));
    serde_json::to_vec(&v).ok()
}

/// The first half of a reply's bytes (at least one byte short of whole JSON).
pub fn malformed(reply: &[u8]) -> Vec<u8> {
    let trimmed = reply.trim_ascii_end();
    trimmed[..trimmed.len() / 2].to_vec()
}

/// What a fault that changes a reply's bytes makes of it (every transport the same): the frames
/// the client gets in its place, the frame it made (for the record), and what it did.
#[derive(Debug, PartialEq)]
pub struct Reshaped {
    /// None (dropped), the reply twice, or one frame (changed, or the reply as it was).
    pub frames: Vec<bytes::Bytes>,
    pub made: Option<bytes::Bytes>,
    pub detail: std::borrow::Cow<'static, str>,
}

/// `drop`, `duplicate`, `wrong_id` and `malformed` applied to one reply (`fired`'s call's: the
/// server's reply to a client's call, or the client's answer to a server's request); `None`
/// for the actions that change when or how fast it goes, not what it is (the transport times
/// those).
pub fn reshape(fired: &Fired, reply: &bytes::Bytes) -> Option<Reshaped> {
    use bytes::Bytes;
    let s2c = fired.direction == crate::events::Direction::ServerToClient;
    let say = |c2s: &'static str, s2c_text: &'static str| {
        std::borrow::Cow::Borrowed(if s2c { s2c_text } else { c2s })
    };
    Some(match &fired.action {
        Action::Drop => Reshaped {
            frames: Vec::new(),
            made: None,
            detail: say(
                "the reply dropped: the client never gets it",
                "the client's answer dropped: the server never gets it",
            ),
        },
        Action::Duplicate => Reshaped {
            frames: vec![reply.clone(), reply.clone()],
            made: Some(reply.clone()),
            detail: say(
                "the reply delivered twice",
                "the client's answer delivered to the server twice",
            ),
        },
        Action::WrongId => match with_wrong_id(reply) {
            Some(w) => {
                let w = Bytes::from(w);
                Reshaped {
                    frames: vec![w.clone()],
                    made: Some(w),
                    detail: say(
                        "the reply delivered with an id no call has",
                        "the client's answer delivered with an id no request of the server's has",
                    ),
                }
            }
            None => Reshaped {
                frames: vec![reply.clone()],
                made: None,
                detail: "the reply has no id to change: passed on".into(),
            },
        },
        Action::Malformed => {
            let half = Bytes::from(malformed(reply));
            Reshaped {
                frames: vec![half.clone()],
                made: Some(half),
                detail: say(
                    "the reply's JSON cut in half",
                    "the client's answer's JSON cut in half",
                ),
            }
        }
        Action::Edit(e) => match e.0.edit(reply) {
            Some((b, detail)) => {
                let b = Bytes::from(b);
                Reshaped {
                    frames: vec![b.clone()],
                    made: Some(b),
                    detail: detail.into(),
                }
            }
            None => Reshaped {
                frames: vec![reply.clone()],
                made: None,
                detail: "nothing to change: passed on".into(),
            },
        },
        _ => return None,
    })
}

/// Replies a transport holds for faults armed by their call's id: what the transport does with
/// the reply to a call whose fault acts on the reply.
#[derive(Debug, Default)]
pub struct Armed {
    /// By the call's id: the fault and the call's method.
    by_id: std::collections::HashMap<String, (Fired, Arc<str>)>,
}

impl Armed {
    pub fn arm(&mut self, id: &crate::rpc::Id, f: Fired, method: &str) {
        // Bounded by the calls in flight of one stream: a reply takes its entry out; an entry
        // whose reply never comes is dropped with the stream.
        self.by_id.insert(id.to_json_text(), (f, method.into()));
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// The fault armed for the reply with this id, and its call's method (taken out).
    pub fn take(&mut self, id: &crate::rpc::Id) -> Option<(Fired, Arc<str>)> {
        if self.by_id.is_empty() {
            return None;
        }
        self.by_id.remove(&id.to_json_text())
    }
}

/// A `cut_stream_after` counting down the server's messages on the stream carrying the call's
/// reply (an SSE response, a stdio session, a WebSocket): the same countdown on every transport.
#[derive(Debug)]
pub struct Cut {
    pub fired: Fired,
    pub id: crate::rpc::Id,
    pub method: Arc<str>,
    /// Messages still passed on before the cut.
    pub left: u32,
    pub mid_event: bool,
}

impl Cut {
    /// A cut for the fault `fired` (a `cut_stream_after`) on call `id`; `None` for another action.
    pub fn of(fired: &Fired, id: &crate::rpc::Id, method: &str) -> Option<Cut> {
        match fired.action {
            Action::CutStreamAfter { n, mid_event } => Some(Cut {
                fired: fired.clone(),
                id: id.clone(),
                method: method.into(),
                left: n,
                mid_event,
            }),
            _ => None,
        }
    }

    /// One more of the server's messages: the cut, taken out of `slot`, when it is due at this
    /// one; else one fewer left.
    pub fn due(slot: &mut Option<Cut>) -> Option<Cut> {
        match slot.as_mut() {
            Some(c) if c.left == 0 => slot.take(),
            Some(c) => {
                c.left -= 1;
                None
            }
            None => None,
        }
    }
}

/// The id of a single reply (a response, not a request), for [`Armed::take`].
pub fn reply_id(frame: &bytes::Bytes) -> Option<crate::rpc::Id> {
    match crate::rpc::parse_body(frame) {
        crate::rpc::Body::Single(e) if e.kind.is_response() => e.id,
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(method: &str, tool: Option<&str>) -> CallInfo<'static> {
        CallInfo {
            method: Box::leak(method.to_string().into_boxed_str()),
            tool: tool.map(|t| &*Box::leak(t.to_string().into_boxed_str())),
            resource: None,
            raw: b"",
        }
    }
    const LO: std::net::IpAddr = std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

    #[test]
    fn flags_read_as_the_config_does() {
        let s =
            FaultSpec::parse_flag("method=tools/call,tool=slow,delay=2s,at=reply,count=3").unwrap();
        assert_eq!(s.method.as_deref(), Some("tools/call"));
        assert_eq!(s.tool.as_deref(), Some("slow"));
        assert_eq!(s.delay.as_deref(), Some("2s"));
        assert_eq!(s.count, Some(3));
        let f = Faults::new(&[s], Carrier::Http).unwrap();
        let fired = f
            .decide(
                &call("tools/call", Some("slow")),
                None,
                LO,
                &http::HeaderMap::new(),
            )
            .unwrap();
        assert_eq!(
            fired.action,
            Action::Delay(Duration::from_secs(2), At::Reply)
        );
        let e = FaultSpec::parse_flag("tool=boom,error=-32042:it broke").unwrap();
        let f = Faults::new(&[e], Carrier::Stdio).unwrap();
        match f
            .decide(
                &call("tools/call", Some("boom")),
                None,
                LO,
                &http::HeaderMap::new(),
            )
            .unwrap()
            .action
        {
            Action::Error { code, message, .. } => {
                assert_eq!((code, &*message), (-32042, "it broke"))
            }
            a => panic!("{a:?}"),
        }
        assert!(FaultSpec::parse_flag("tool=x,explode").is_err());
    }

    #[test]
    fn a_rule_names_exactly_one_action_that_means_something_on_its_transport() {
        let two = FaultSpec {
            drop: true,
            duplicate: true,
            ..Default::default()
        };
        let e = Faults::new(&[two], Carrier::Http).unwrap_err();
        assert!(e.message.contains("one action per rule"), "{e}");
        let none = FaultSpec {
            tool: Some("x".into()),
            ..Default::default()
        };
        assert!(Faults::new(&[none], Carrier::Http)
            .unwrap_err()
            .message
            .contains("no action"));
        let status = FaultSpec {
            status: Some(503),
            ..Default::default()
        };
        assert!(Faults::new(std::slice::from_ref(&status), Carrier::Http).is_ok());
        let e = Faults::new(&[status], Carrier::Stdio).unwrap_err();
        assert!(e.message.contains("over stdio"), "{e}");
        let bad = FaultSpec {
            throttle: Some("fast".into()),
            ..Default::default()
        };
        assert!(Faults::new(&[bad], Carrier::Http).is_err());
    }

    #[test]
    fn after_count_and_probability_decide_which_calls_fire() {
        let s = FaultSpec {
            method: Some("tools/*".into()),
            after: Some(2),
            count: Some(3),
            drop: true,
            ..Default::default()
        };
        let f = Faults::new(&[s], Carrier::Stdio).unwrap();
        let c = call("tools/call", None);
        let fired: Vec<bool> = (0..8)
            .map(|_| f.decide(&c, None, LO, &http::HeaderMap::new()).is_some())
            .collect();
        assert_eq!(fired, [false, false, true, true, true, false, false, false]);
        assert!(f
            .decide(&call("ping", None), None, LO, &http::HeaderMap::new())
            .is_none());

        let half = FaultSpec {
            probability: Some(0.5),
            drop: true,
            ..Default::default()
        };
        let f = Faults::new(&[half], Carrier::Stdio).unwrap();
        let n = (0..4000)
            .filter(|_| f.decide(&c, None, LO, &http::HeaderMap::new()).is_some())
            .count();
        assert!((1700..2300).contains(&n), "{n} of 4000 at probability 0.5");
        let never = FaultSpec {
            probability: Some(0.0),
            drop: true,
            ..Default::default()
        };
        let f = Faults::new(&[never], Carrier::Stdio).unwrap();
        assert!((0..100).all(|_| f.decide(&c, None, LO, &http::HeaderMap::new()).is_none()));
    }

    #[test]
    fn a_header_narrows_a_rule() {
        let f = Faults::new(
            &[FaultSpec::parse_flag("header=x-client-id=ci-*,drop").unwrap()],
            Carrier::Http,
        )
        .unwrap();
        let c = call("ping", None);
        let mut h = http::HeaderMap::new();
        assert!(f.decide(&c, None, LO, &h).is_none(), "no header: no match");
        h.insert("x-client-id", "ci-42".parse().unwrap());
        assert!(f.decide(&c, None, LO, &h).is_some());
        h.insert("x-client-id", "dev".parse().unwrap());
        assert!(f.decide(&c, None, LO, &h).is_none());
        let bad = Faults::new(
            &[FaultSpec::parse_flag("header=nope,drop").unwrap()],
            Carrier::Http,
        );
        assert!(bad.unwrap_err().message.contains("NAME=GLOB"));
    }

    #[test]
    fn s2c_rules_decide_only_the_servers_requests_and_c2s_rules_only_the_clients() {
        use crate::events::Direction::{ClientToServer as C2s, ServerToClient as S2c};
        let h = http::HeaderMap::new();
        let f = Faults::new(
            &[
                FaultSpec::parse_flag("name=theirs,direction=s2c,method=sampling/*,drop").unwrap(),
                FaultSpec::parse_flag("name=ours,direction=c2s,method=sampling/*,duplicate")
                    .unwrap(),
            ],
            Carrier::Stdio,
        )
        .unwrap();
        assert!(f.has_s2c());
        let sampling = call("sampling/createMessage", None);
        let s = f.decide_in(S2c, &sampling, None, LO, &h).unwrap();
        assert_eq!((&*s.rule, s.direction), ("theirs", S2c));
        let c = f.decide_in(C2s, &sampling, None, LO, &h).unwrap();
        assert_eq!((&*c.rule, c.direction), ("ours", C2s));
        assert_eq!(f.decide(&sampling, None, LO, &h).unwrap().rule, c.rule);
        assert!(f
            .decide_in(S2c, &call("roots/list", None), None, LO, &h)
            .is_none());
        let only_c2s = Faults::new(
            &[FaultSpec::parse_flag("direction=c2s,drop").unwrap()],
            Carrier::Stdio,
        )
        .unwrap();
        assert!(!only_c2s.has_s2c());
        assert!(only_c2s.decide_in(S2c, &sampling, None, LO, &h).is_none());
        // What has no meaning on the server's requests is refused at start, saying why.
        for (flag, carrier, says) in [
            ("direction=s2c,tool=x,drop", Carrier::Stdio, "by `method`"),
            ("direction=s2c,status=503", Carrier::Stdio, "over stdio"),
            (
                "direction=s2c,cut_stream_after=1",
                Carrier::Stdio,
                "use `close`",
            ),
            (
                "direction=s2c,status=503",
                Carrier::Http,
                "not an HTTP status",
            ),
            ("direction=sideways,drop", Carrier::Stdio, "c2s or s2c"),
        ] {
            let e = Faults::new(&[FaultSpec::parse_flag(flag).unwrap()], carrier).unwrap_err();
            assert!(e.message.contains(says), "{flag}: {e}");
        }
        for carrier in [Carrier::Stdio, Carrier::Http, Carrier::WebSocket] {
            assert!(Faults::new(
                &[FaultSpec::parse_flag("direction=s2c,throttle=1KiB/s").unwrap()],
                carrier
            )
            .is_ok());
        }
    }

    #[test]
    fn session_and_peer_narrow_a_rule() {
        let s = FaultSpec {
            session: Some("abc*".into()),
            peer: Some("10.0.0.1".into()),
            drop: true,
            ..Default::default()
        };
        let f = Faults::new(&[s], Carrier::Http).unwrap();
        let c = call("ping", None);
        let ten: std::net::IpAddr = "10.0.0.1".parse().unwrap();
        assert!(f
            .decide(&c, Some("abcdef"), ten, &http::HeaderMap::new())
            .is_some());
        assert!(f
            .decide(&c, Some("xyz"), ten, &http::HeaderMap::new())
            .is_none());
        assert!(f.decide(&c, None, ten, &http::HeaderMap::new()).is_none());
        assert!(f
            .decide(&c, Some("abcdef"), LO, &http::HeaderMap::new())
            .is_none());
    }

    #[test]
    fn wrong_ids_and_malformed_replies() {
        let r = br#"{"jsonrpc":"2.0","id":7,"result":{"ok":true}}"#;
        let w = with_wrong_id(r).unwrap();
        let v: serde_json::Value = serde_json::from_slice(&w).unwrap();
        assert_eq!(v["id"], "rpctap-wrong-id-7");
        assert_eq!(v["result"]["ok"], true);
        let m = malformed(r);
        assert!(serde_json::from_slice::<serde_json::Value>(&m).is_err());
        assert!(!m.is_empty() && r.starts_with(&m));
        assert_eq!(
            reply_id(&bytes::Bytes::from_static(r)),
            Some(crate::rpc::Id::Num("7".into()))
        );
    }
}

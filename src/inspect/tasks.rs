//! MCP tasks: a `tools/call` the server answers with a task handle instead of a result — the
//! `io.modelcontextprotocol/tasks` extension of 2026-07-28 (`resultType: "task"`, `tasks/get`,
//! `tasks/update`, `tasks/cancel`, `notifications/tasks`) and the experimental tasks of
//! 2025-11-25 (a request's `params.task`, a `{"task": {…}}` result, `tasks/get`, `tasks/result`,
//! `notifications/tasks/status`). A task is one call from its creation to its end: the call that
//! created it waits here (not in the correlator) and its event comes when a poll, a
//! notification or `tasks/result` shows a terminal status — its outcome the task's, its latency
//! the task's whole life. Each poll, update and cancel names its task ([`TaskRef`]) so that
//! views fold them under it. Decides `MCP_TASK_UNDECLARED`, `MCP_TASK_STATUS`, `MCP_TASK_POLL`,
//! `MCP_TASK_BINDING` and `MCP_TASK_UNFINISHED`.
//!
//! Only messages the envelope's one pass marked (`Envelope::task_hint`: a `task` object, a
//! `resultType` of `"task"`), the tasks methods' own messages and sessions' ends come here; the table is a std mutex taken by synchronous code only, bounded
//! by the pending-call cap (a task is a call that waits).

use super::calls::{end_call, flag_call};
use super::capability::Caps;
use super::*;
use crate::events::TaskRef;
use crate::locks::Locked as _;
use serde_json::Value;
use std::collections::{HashMap, VecDeque};

/// A poll this much sooner than the server's `pollIntervalMs` (in tenths) is too fast: arrival
/// times on the proxy jitter by a little, the client's own clock does not.
const FAST_TENTHS: u64 = 9;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Working,
    InputRequired,
    Completed,
    Failed,
    Cancelled,
}

impl Status {
    fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "working" => Status::Working,
            "input_required" => Status::InputRequired,
            "completed" => Status::Completed,
            "failed" => Status::Failed,
            "cancelled" => Status::Cancelled,
            _ => return None,
        })
    }

    fn as_str(self) -> &'static str {
        match self {
            Status::Working => "working",
            Status::InputRequired => "input_required",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Cancelled => "cancelled",
        }
    }

    fn terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Cancelled)
    }
}

/// Findings given once per task.
const FLAG_FAST: u8 = 1;
const FLAG_AFTER_END: u8 = 2;
const FLAG_AFTER_TTL: u8 = 4;

/// What a task handle says of its task, whether it is in the 2025-11-25 shape, and whether it
/// is an A2A task (`a2a`: created by a message, none of MCP's rules on its creation and polls).
pub(super) struct Handle(Seen, bool, bool);

/// One task rpctap saw created.
#[derive(Debug)]
struct Task {
    /// The creating call's key, and the call itself until the task ends.
    key: PendingKey,
    call: Option<Pending>,
    origin_exchange: u64,
    group: Option<Arc<str>>,
    status: Status,
    /// The 2025-11-25 experimental shape.
    legacy: bool,
    /// An A2A task: its states are read as MCP's statuses (`a2a::State::as_mcp`), its
    /// findings are `A2A_TASK_STATE`, and MCP's creation and polling rules do not apply.
    a2a: bool,
    created: Instant,
    polls: u32,
    last_poll: Option<Instant>,
    interval_ms: Option<u64>,
    ttl_ms: Option<u64>,
    flagged: u8,
    /// A `task` fault showed the client this terminal status (the server's task went on).
    shown_end: Option<Status>,
}

/// A task rpctap stops waiting for: its id, its creating call, and the end a fault showed the
/// client, if one did.
type Ended = (Arc<str>, PendingKey, Pending, Option<Status>);

/// Every task seen, by `taskId`, oldest first for eviction.
#[derive(Debug, Default)]
pub(super) struct Table {
    map: HashMap<Arc<str>, Task>,
    order: VecDeque<Arc<str>>,
}

impl Table {
    /// The eviction order without the tasks the map no longer holds.
    fn prune_order(&mut self) {
        let Table { map, order } = self;
        order.retain(|id| map.contains_key(id));
    }
}

/// What a message says of a task: its shape read once, loosely (a missing member is `None`).
#[derive(Debug, Default)]
struct Seen {
    id: Option<String>,
    status: Option<String>,
    interval_ms: Option<u64>,
    /// `Some(None)`: `null` (unlimited).
    ttl_ms: Option<Option<u64>>,
    has_result: bool,
    error: Option<(i64, String)>,
    has_input: bool,
    message: Option<String>,
}

impl Seen {
    /// What an A2A result or stream event shows of its task (`a2a::task_shown`), in the
    /// statuses of the shared model.
    fn of_a2a(result: &Value) -> Option<Seen> {
        let shown = super::a2a::task_shown(result)?;
        let failed = matches!(
            shown.state,
            super::a2a::State::Failed | super::a2a::State::Rejected
        );
        Some(Seen {
            id: Some(shown.id),
            status: Some(shown.state.as_mcp().into()),
            error: failed.then(|| (0, shown.message.clone().unwrap_or_default())),
            message: shown.message,
            ..Seen::default()
        })
    }

    /// A task object: 2026-07-28's (`pollIntervalMs`, `ttlMs`, the payload inlined) or
    /// 2025-11-25's (`pollInterval`, `ttl`).
    fn of(v: &Value) -> Seen {
        let num = |k: &str| v.get(k).and_then(Value::as_u64);
        let ttl = |k: &str| v.get(k).map(Value::as_u64);
        Seen {
            id: v.get("taskId").and_then(Value::as_str).map(str::to_string),
            status: v.get("status").and_then(Value::as_str).map(str::to_string),
            interval_ms: num("pollIntervalMs").or_else(|| num("pollInterval")),
            ttl_ms: ttl("ttlMs").or_else(|| ttl("ttl")),
            has_result: v.get("result").is_some_and(Value::is_object),
            error: v.get("error").map(|e| {
                (
                    e.get("code").and_then(Value::as_i64).unwrap_or(0),
                    e.get("message")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                        .to_string(),
                )
            }),
            has_input: v.get("inputRequests").is_some_and(Value::is_object),
            message: v
                .get("statusMessage")
                .and_then(Value::as_str)
                .map(str::to_string),
        }
    }
}

use crate::rpc::member;

/// The outcome a task's end gives the call that created it.
fn outcome_of(status: Status, seen: &Seen, id: &str) -> Outcome {
    match status {
        Status::Failed => {
            let (code, message) = seen.error.clone().unwrap_or_else(|| {
                (
                    0,
                    seen.message
                        .clone()
                        .unwrap_or_else(|| format!("task {id} failed")),
                )
            });
            Outcome::Error {
                code,
                message: message.into(),
            }
        }
        Status::Cancelled => Outcome::Cancelled {
            reason: match &seen.message {
                Some(m) => format!("task {id} cancelled: {m}"),
                None => format!("task {id} cancelled"),
            },
        },
        _ => Outcome::Result,
    }
}

/// An RFC 3339 timestamp (`2026-12-07T10:00:00Z`, `…T10:00:00.123+01:00`) in ns since the
/// Unix epoch; `None` for anything else. Written here: one timestamp format, no date crate.
fn rfc3339_ns(s: &str) -> Option<u64> {
    let b = s.as_bytes();
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let t = s.get(r)?;
        t.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| t.parse().ok())?
    };
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let mut i = 19;
    let mut frac_ns = 0i64;
    if b.get(i) == Some(&b'.') {
        let digits = b[i + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        let f = s.get(i + 1..i + 1 + digits.min(9))?;
        frac_ns = f.parse::<i64>().ok()? * 10i64.pow(9 - f.len() as u32);
        i += 1 + digits;
    }
    let offset = match b.get(i)? {
        b'Z' | b'z' => 0,
        sign @ (b'+' | b'-') => {
            let m = num(i + 1..i + 3)? * 60 + num(i + 4..i + 6)?;
            if *sign == b'-' {
                -m
            } else {
                m
            }
        }
        _ => return None,
    };
    // Days since the epoch of a civil date (Howard Hinnant's algorithm).
    let (y2, m2) = if mo <= 2 {
        (y - 1, mo + 9)
    } else {
        (y, mo - 3)
    };
    let era = y2.div_euclid(400);
    let yoe = y2 - era * 400;
    let doy = (153 * m2 + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + h * 3600 + mi * 60 + sec - offset * 60;
    u64::try_from(secs)
        .ok()?
        .checked_mul(1_000_000_000)?
        .checked_add(frac_ns as u64)
}

/// A call rpctap ends outside a message (a session's end, a TTL run out): the finding goes on
/// the creating call.
fn end_unfinished(inner: &Inner, key: &PendingKey, mut p: Pending, task_id: &str, why: &str) {
    let reason = format!("task {task_id} reached no terminal status: {why}");
    let msg = format!(
        "{reason} (tasks extension, \"Task Polling\": a client polls until a terminal status)"
    );
    flag_call(inner, key, &p, Code::McpTaskUnfinished, msg);
    if let Some(t) = p.task.as_mut() {
        t.status.get_or_insert_with(|| "working".into());
    }
    end_call(
        inner,
        key,
        p,
        Outcome::Missing { reason },
        &[Code::McpTaskUnfinished.as_str()],
        None,
        None,
    );
}

/// A session ended: its tasks that never ended end now, unfinished.
pub(super) fn end_session_tasks(inner: &Inner, sid: &str, why: &str) {
    let ended: Vec<Ended> = {
        let mut t = inner.tasks.locked();
        let mut out = Vec::new();
        for (id, task) in t.map.iter_mut() {
            if task.group.as_deref() == Some(sid) {
                if let Some(p) = task.call.take() {
                    out.push((id.clone(), task.key.clone(), p, task.shown_end));
                }
            }
        }
        t.map.retain(|_, task| task.group.as_deref() != Some(sid));
        t.prune_order();
        out
    };
    for (id, key, p, shown) in ended {
        end_open(
            inner,
            &id,
            &key,
            p,
            shown,
            &format!("its session ended ({why})"),
        );
    }
}

/// A task rpctap gives up on: unfinished — unless a fault showed the client its end, so that
/// the client stopped because of rpctap, which is no peer's fault.
fn end_open(
    inner: &Inner,
    id: &str,
    key: &PendingKey,
    p: Pending,
    shown: Option<Status>,
    why: &str,
) {
    match shown {
        Some(s) => {
            let reason = format!(
                "task {id}: a fault rule showed the client `{}`; the server's task had not ended: {why}",
                s.as_str()
            );
            end_call(inner, key, p, Outcome::Missing { reason }, &[], None, None);
        }
        None => end_unfinished(inner, key, p, id, why),
    }
}

/// A `task` fault sent the client `frame` (a reply, or an SSE event carrying one): when it
/// shows a task ended, the client stops there — the task's later silence is not the server's.
pub(super) fn fault_shown(inner: &Inner, frame: Option<&[u8]>) {
    let Some(frame) = frame else { return };
    let json: Vec<u8> = if frame.first() == Some(&b'{') {
        frame.to_vec()
    } else {
        sse::lines(frame)
            .filter_map(|l| l.strip_prefix(b"data:"))
            .flat_map(|d| {
                d.strip_prefix(b" ")
                    .unwrap_or(d)
                    .iter()
                    .copied()
                    .chain([b'\n'])
            })
            .collect()
    };
    let Some(result) = member(&json, "result") else {
        return;
    };
    let Some((task, _)) = crate::rpc::task_in(&result) else {
        return;
    };
    let seen = Seen::of(task);
    let (Some(id), Some(status)) = (seen.id, seen.status.as_deref().and_then(Status::parse)) else {
        return;
    };
    if status.terminal() {
        if let Some(t) = inner.tasks.locked().map.get_mut(id.as_str()) {
            t.shown_end = Some(status);
        }
    }
}

/// Ends the tasks whose TTL and the call timeout after it have passed without a terminal
/// status, and forgets tasks past their TTL; returns how many ended.
pub(super) fn sweep(inner: &Inner) -> usize {
    let now = inner.clock.now();
    let grace = inner.cfg.call_timeout;
    let ended: Vec<(Ended, u64)> = {
        let mut t = inner.tasks.locked();
        let mut out = Vec::new();
        let mut gone = Vec::new();
        for (id, task) in t.map.iter_mut() {
            let Some(ttl) = task.ttl_ms else { continue };
            let until = task.created + Duration::from_millis(ttl) + grace;
            if now < until {
                continue;
            }
            if let Some(p) = task.call.take() {
                out.push(((id.clone(), task.key.clone(), p, task.shown_end), ttl));
            }
            gone.push(id.clone());
        }
        for id in &gone {
            t.map.remove(id);
        }
        if !gone.is_empty() {
            t.prune_order();
        }
        out
    };
    let n = ended.len();
    let secs = grace.as_secs_f64();
    for ((id, key, p, shown), ttl) in ended {
        let why = format!("its TTL ({ttl} ms) and the call timeout ({secs} s) after it passed");
        end_open(inner, &id, &key, p, shown, &why);
    }
    n
}

impl ExchangeCtx {
    /// A client's `tasks/get` for a task rpctap knows: counted as a poll,
    /// and flagged when it comes too soon after the last one (`pollIntervalMs`), after the task
    /// ended or after its TTL — each once per task.
    pub(super) fn task_request(
        &self,
        dir: Direction,
        method: &str,
        target: Option<&Arc<str>>,
        id: &Id,
        anomalies: &mut Vec<&'static str>,
    ) {
        // `tasks/result` (2025-11-25) is how a client fetches an ended task's result: no poll.
        if dir != Direction::ClientToServer || !matches!(method, "tasks/get" | "GetTask") {
            return;
        }
        let Some(task_id) = target else { return };
        let now = self.insp.clock.now();
        let mut found: Vec<(u8, String)> = Vec::new();
        {
            let mut t = self.insp.tasks.locked();
            let Some(task) = t.map.get_mut(&**task_id) else {
                return;
            };
            let since = task.last_poll.unwrap_or(task.created);
            task.polls = task.polls.saturating_add(1);
            task.last_poll = Some(now);
            // A2A has no poll interval, and a client may get an ended task (its artifacts)
            // at any time: counted, never judged.
            if task.a2a {
                return;
            }
            let mut say = |bit: u8, f: &mut u8, text: String| {
                if *f & bit == 0 {
                    *f |= bit;
                    found.push((bit, text));
                }
            };
            if task.status.terminal() {
                say(FLAG_AFTER_END, &mut task.flagged, format!(
                    "`{method}` for task {task_id}, which already ended {} (tasks extension, \"Task Polling\": a client polls until a terminal status)",
                    task.status.as_str()
                ));
            } else if let Some(ttl) = task.ttl_ms {
                if now >= task.created + Duration::from_millis(ttl) {
                    say(FLAG_AFTER_TTL, &mut task.flagged, format!(
                        "`{method}` for task {task_id} after its TTL ({ttl} ms) ran out: the server may have discarded it (tasks extension, \"Task Polling\")"
                    ));
                }
            }
            if let Some(want) = task.interval_ms {
                let ms = now.saturating_duration_since(since).as_millis() as u64;
                if ms * 10 < want * FAST_TENTHS && !task.status.terminal() {
                    say(FLAG_FAST, &mut task.flagged, format!(
                        "task {task_id} polled {ms} ms after the {}; the server asked for {want} ms (`pollIntervalMs`: clients SHOULD honour it, tasks extension \"Task Polling\"; flagged once per task)",
                        if task.polls <= 1 { "task's creation" } else { "previous poll" }
                    ));
                }
            }
        }
        for (_, text) in found {
            self.flag_here(
                dir,
                Code::McpTaskPoll,
                Some(id),
                Some(&Arc::from(method)),
                text,
            );
            if !anomalies.contains(&Code::McpTaskPoll.as_str()) {
                anomalies.push(Code::McpTaskPoll.as_str());
            }
        }
    }

    /// A reply that is a task handle (`CreateTaskResult`): what it says of the task, and
    /// whether it is in the 2025-11-25 shape.
    pub(super) fn task_handle(&self, key: &PendingKey, env: &Envelope) -> Option<Handle> {
        if !env.task_hint || env.kind != Kind::Result || key.direction != Direction::ClientToServer
        {
            return None;
        }
        let (task, legacy) = crate::rpc::task_in(env.result()?)?;
        Some(Handle(Seen::of(task), legacy, false))
    }

    /// A task rpctap saw created by an A2A call.
    pub(super) fn a2a_task_known(&self, id: &str) -> bool {
        self.insp.tasks.locked().map.get(id).is_some_and(|t| t.a2a)
    }

    /// An A2A message's reply that shows a task not yet ended (a task handed back at once, or a
    /// stream that closed with the task waiting on the client): the call lives on as its task.
    /// A message that continues a task rpctap knows (`params.message.taskId`) updates that task
    /// instead (`task_reply`).
    pub(super) fn a2a_task_handle(
        &self,
        key: &PendingKey,
        p: &Pending,
        env: &Envelope,
    ) -> Option<Handle> {
        if !self.a2a_seen
            || env.kind != Kind::Result
            || key.direction != Direction::ClientToServer
            || !super::a2a::is_message_method(&p.method)
        {
            return None;
        }
        if p.target
            .as_ref()
            .is_some_and(|t| self.insp.tasks.locked().map.contains_key(&**t))
        {
            return None;
        }
        let seen = Seen::of_a2a(env.result()?)?;
        let open = seen
            .status
            .as_deref()
            .and_then(Status::parse)
            .is_some_and(|s| !s.terminal());
        open.then_some(Handle(seen, false, true))
    }

    /// A task handle's call is kept as its task (`None`); a handle that cannot be one (no id,
    /// no known status, a method without tasks) gives the call back to end as usual.
    pub(super) fn task_created(
        &self,
        key: &PendingKey,
        p: Pending,
        Handle(seen, legacy, a2a): Handle,
        extra: &mut Vec<&'static str>,
    ) -> Option<Pending> {
        if a2a {
            return self.keep_task(key, p, seen, legacy, a2a, extra);
        }
        // Declared on the request (2026-07-28's per-request capabilities, 2025-11-25's
        // `params.task`); a request that declares nothing of its own, in a session whose
        // `initialize` declared the extension, has it from there (no per-request
        // capabilities exist in that handshake).
        let declared = match p.modern.as_ref().and_then(|m| m.caps) {
            Some(c) => c.has(Caps::TASKS_EXT),
            None => key.scope.group().is_some_and(|g| {
                self.insp
                    .correlator
                    .peek_session(g, |s| s.mcp.client_caps)
                    .flatten()
                    .is_some_and(|c| c.has(Caps::TASKS_EXT))
            }),
        };
        if &*p.method != "tools/call" {
            self.flag_reply(
                key,
                &p.method,
                Code::McpTaskUndeclared,
                format!("a task handle answers `{}`: only `tools/call` may be answered with a task (tasks extension, \"Supported Methods\"); the client MUST treat it as an invalid response", p.method),
                extra,
            );
            return Some(p);
        }
        if !declared {
            let why = if legacy {
                "its request asked for no task (`params.task`, 2025-11-25 tasks: a server returns a task only when the request is task-augmented)"
            } else {
                "its request's `_meta` capabilities do not declare the `io.modelcontextprotocol/tasks` extension (a server MUST NOT return CreateTaskResult to a client that did not include it on its request, tasks extension \"Capability Negotiation\")"
            };
            self.flag_reply(
                key,
                &p.method,
                Code::McpTaskUndeclared,
                format!("a task handle for call {}: {why}", key.id),
                extra,
            );
        }
        self.keep_task(key, p, seen, legacy, false, extra)
    }

    /// The call of a task handle is kept as its task (`None`), unless the handle names no task
    /// or no status the model knows (the call is given back to end as usual).
    fn keep_task(
        &self,
        key: &PendingKey,
        mut p: Pending,
        seen: Seen,
        legacy: bool,
        a2a: bool,
        extra: &mut Vec<&'static str>,
    ) -> Option<Pending> {
        let code = if a2a {
            Code::A2aTaskState
        } else {
            Code::McpTaskStatus
        };
        let Some(task_id) = seen.id.clone() else {
            self.flag_reply(
                key,
                &p.method,
                code,
                "a task handle without a string `taskId`".into(),
                extra,
            );
            return Some(p);
        };
        let status = seen.status.as_deref().and_then(Status::parse);
        let Some(status) = status else {
            let known = if a2a {
                "none of A2A's task states (A2A, \"TaskState\")"
            } else {
                "none of working, input_required, completed, failed, cancelled (tasks extension, \"Task Status\")"
            };
            self.flag_reply(
                key,
                &p.method,
                code,
                format!("task {task_id} created in a state that is {known}"),
                extra,
            );
            return Some(p);
        };
        let task_id: Arc<str> = Arc::from(task_id);
        p.anomalies.append(extra);
        p.task = Some(Box::new(TaskRef {
            id: task_id.clone(),
            status: Some(status.as_str().into()),
            origin_exchange: None,
            origin_id: None,
            polls: 0,
        }));
        let now = self.insp.clock.now();
        let task = Task {
            key: key.clone(),
            origin_exchange: p.exchange,
            call: Some(p),
            group: key.scope.group().cloned(),
            status,
            legacy,
            a2a,
            created: now,
            polls: 0,
            last_poll: None,
            interval_ms: seen.interval_ms,
            ttl_ms: seen.ttl_ms.flatten(),
            flagged: 0,
            shown_end: None,
        };
        let evicted = {
            let mut t = self.insp.tasks.locked();
            let mut evicted = None;
            if !t.map.contains_key(&task_id)
                && t.map.len() >= self.insp.cfg.limits.max_pending.max(1)
            {
                while let Some(old) = t.order.pop_front() {
                    if let Some(o) = t.map.remove(&old) {
                        evicted = o.call.map(|c| (old, o.key, c));
                        break;
                    }
                }
            }
            if let Some(old) = t.map.insert(task_id.clone(), task) {
                // A server that hands out one id twice: the older task is the newer now.
                if let Some(c) = old.call {
                    evicted = Some((task_id.clone(), old.key, c));
                }
            } else {
                t.order.push_back(task_id.clone());
            }
            evicted
        };
        if let Some((id, k, c)) = evicted {
            end_unfinished(
                &self.insp,
                &k,
                c,
                &id,
                "rpctap forgot it: too many open tasks (the pending-call cap)",
            );
        }
        None
    }

    /// A reply to `tasks/get`, `tasks/update`, `tasks/cancel`, `tasks/result` or `tasks/list`:
    /// names its task on the call's event, judges what it says of the task (of each task, for
    /// a list), and returns the creating calls of the tasks it shows ended, with their outcomes.
    pub(super) fn task_reply(
        &self,
        key: &PendingKey,
        p: &mut Pending,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) -> Vec<(PendingKey, Pending, Outcome)> {
        if key.direction != Direction::ClientToServer {
            return Vec::new();
        }
        match &*p.method {
            "tasks/get" | "tasks/update" | "tasks/cancel" | "tasks/result" => self
                .one_task_reply(key, p, env, extra)
                .into_iter()
                .collect(),
            m if super::a2a::is_task_method(m) || super::a2a::is_message_method(m) => self
                .one_task_reply(key, p, env, extra)
                .into_iter()
                .collect(),
            "tasks/list" if env.kind == Kind::Result => self.task_list(key, p, env, extra),
            _ => Vec::new(),
        }
    }

    /// A `tasks/list` reply (2025-11-25): each listed task rpctap knows has the status the list
    /// shows, judged like a poll's (a list is no poll: it is not counted, nor its rate), and
    /// a listed task of another stateless client is the binding rule's case.
    fn task_list(
        &self,
        key: &PendingKey,
        p: &Pending,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) -> Vec<(PendingKey, Pending, Outcome)> {
        let mut ended = Vec::new();
        let Some(Value::Array(tasks)) =
            member(&env.raw, "result").and_then(|mut r| r.get_mut("tasks").map(Value::take))
        else {
            return ended;
        };
        for task in &tasks {
            let seen = Seen::of(task);
            let Some(task_id) = seen.id.as_deref().map(Arc::<str>::from) else {
                continue;
            };
            let group = {
                let t = self.insp.tasks.locked();
                match t.map.get(&*task_id) {
                    Some(known) => known.group.clone(),
                    None => continue,
                }
            };
            self.binding_rule(key, &p.method, &task_id, group.as_deref(), extra);
            let (_, end) = self.task_status(&task_id, &seen, false, key, &p.method, true, extra);
            ended.extend(end);
        }
        ended
    }

    /// Another stateless client's task answered with its data (`mine` asked; `theirs` created
    /// it): a task belongs to the client that created it.
    fn binding_rule(
        &self,
        key: &PendingKey,
        method: &Arc<str>,
        task_id: &str,
        theirs: Option<&str>,
        extra: &mut Vec<&'static str>,
    ) {
        if let (Some(mine), Some(theirs)) = (key.scope.group(), theirs) {
            let stateless = |g: &str| g.starts_with(crate::events::STATELESS_PREFIX);
            if &**mine != theirs && stateless(mine) && stateless(theirs) {
                let msg = format!("`{method}` from {mine} for task {task_id}, which {theirs} created, answered with its data: a task belongs to the client that created it (tasks extension, security: bind tasks to their requestor)");
                self.flag_reply(key, method, Code::McpTaskBinding, msg, extra);
            }
        }
    }

    /// [`Self::task_reply`] for the methods about one task.
    fn one_task_reply(
        &self,
        key: &PendingKey,
        p: &mut Pending,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) -> Option<(PendingKey, Pending, Outcome)> {
        let method = &*p.method;
        let task_id = p.target.clone()?;
        let known = {
            let t = self.insp.tasks.locked();
            t.map.get(&task_id).map(|task| {
                (
                    task.origin_exchange,
                    task.key.id.clone(),
                    task.group.clone(),
                    task.legacy,
                    task.a2a,
                )
            })
        };
        let Some((origin_exchange, origin_id, group, legacy, a2a)) = known else {
            self.unknown_task(key, p, &task_id, env, extra);
            return None;
        };
        let mut tref = TaskRef {
            id: task_id.clone(),
            status: None,
            origin_exchange: Some(origin_exchange),
            origin_id: Some(origin_id),
            polls: 0,
        };
        if env.kind == Kind::Result {
            self.binding_rule(key, &p.method, &task_id, group.as_deref(), extra);
        }
        let seen = match (method, env.kind) {
            // An A2A task's every reply that shows it (a task, a stream's last event).
            (_, Kind::Result) if a2a => env.result().and_then(Seen::of_a2a),
            (_, _) if a2a => None,
            ("tasks/get", Kind::Result) => env.result().map(Seen::of),
            ("tasks/cancel", Kind::Result) if legacy => env.result().map(Seen::of),
            ("tasks/result", Kind::Result) => Some(Seen {
                status: Some("completed".into()),
                has_result: true,
                ..Seen::default()
            }),
            ("tasks/result", Kind::Error) => Some(Seen {
                status: Some("failed".into()),
                error: Some((
                    env.error_code.unwrap_or(0),
                    env.error_message.as_deref().unwrap_or_default().to_string(),
                )),
                ..Seen::default()
            }),
            _ => None,
        };
        let ended = match seen {
            Some(seen) if seen.status.is_some() => {
                // MCP 2026-07-28's `tasks/get` inlines an ended task's payload; A2A 0.3's
                // `tasks/get` (the same name) answers a task, whose artifacts are optional.
                let full = method == "tasks/get" && !legacy && !a2a;
                let (status, ended) =
                    self.task_status(&task_id, &seen, full, key, &p.method, true, extra);
                tref.status = status.map(|s| Arc::from(s.as_str()));
                ended
            }
            _ => None,
        };
        p.task = Some(Box::new(tref));
        ended
    }

    /// A `tasks/get` answered with a task rpctap never saw created, though it was created while
    /// rpctap watched (its `createdAt`, a second's slack): the server gave out a task that is
    /// nobody's here, or another's (the binding rule: an unknown task id is `-32602`).
    fn unknown_task(
        &self,
        key: &PendingKey,
        p: &Pending,
        task_id: &str,
        env: &Envelope,
        extra: &mut Vec<&'static str>,
    ) {
        if &*p.method != "tasks/get" || env.kind != Kind::Result {
            return;
        }
        let start = self
            .insp
            .watch_start
            .load(std::sync::atomic::Ordering::Relaxed);
        let Some(result) = env.result() else {
            return;
        };
        if result.get("status").is_none() {
            return;
        }
        let Some(created) = result
            .get("createdAt")
            .and_then(Value::as_str)
            .and_then(rfc3339_ns)
        else {
            return;
        };
        if start == 0 || created < start.saturating_add(1_000_000_000) {
            return;
        }
        let msg = format!("`tasks/get` for task {task_id}, created while rpctap watched but never handed out through it, answered with its data: an unknown task id is `-32602` (tasks extension, \"Error Handling\"; a task belongs to its requestor)");
        self.flag_reply(key, &p.method, Code::McpTaskBinding, msg, extra);
    }

    /// A server's `notifications/tasks` (2026-07-28) or `notifications/tasks/status`
    /// (2025-11-25): the task's status as it is now. Returns the creating call when it shows the
    /// task ended.
    pub(super) fn task_notified(&mut self, dir: Direction, env: &Envelope) {
        if dir != Direction::ServerToClient {
            return;
        }
        let full = match env.method.as_deref() {
            Some("notifications/tasks") => true,
            Some("notifications/tasks/status") => false,
            _ => return,
        };
        let Some(params) = member(&env.raw, "params") else {
            return;
        };
        let seen = Seen::of(&params);
        let Some(task_id) = seen.id.as_deref().map(Arc::<str>::from) else {
            return;
        };
        let key = PendingKey {
            scope: self.scope.clone(),
            direction: dir,
            id: Id::Null,
        };
        let mut sink = Vec::new();
        let method: Arc<str> = env.method.clone().unwrap_or_else(|| "".into());
        let (_, ended) = self.task_status(&task_id, &seen, full, &key, &method, false, &mut sink);
        if let Some((k, c, outcome)) = ended {
            end_call(
                &self.insp,
                &k,
                c,
                outcome,
                &[],
                None,
                Some(&mut self.deferred),
            );
        }
    }

    /// What a poll's reply (`on_reply`) or a notification says of its task's status: judged
    /// against the state machine and the payload its status needs (2026-07-28's `tasks/get`,
    /// `full`), and recorded; returns the status and, when the task ended, its creating call.
    #[allow(clippy::too_many_arguments)]
    fn task_status(
        &self,
        task_id: &Arc<str>,
        seen: &Seen,
        full: bool,
        key: &PendingKey,
        method: &Arc<str>,
        on_reply: bool,
        extra: &mut Vec<&'static str>,
    ) -> (Option<Status>, Option<(PendingKey, Pending, Outcome)>) {
        let Some(text) = seen.status.as_deref() else {
            return (None, None);
        };
        let mut problems: Vec<String> = Vec::new();
        let status = Status::parse(text);
        if status.is_none() {
            problems.push(format!("status {text:?} is none of working, input_required, completed, failed, cancelled (tasks extension, \"Task Status\")"));
        }
        if let (true, Some(s)) = (full, status) {
            let need = match s {
                Status::Completed if !seen.has_result => Some("`result`"),
                Status::Failed if seen.error.is_none() => Some("`error`"),
                Status::InputRequired if !seen.has_input => Some("`inputRequests`"),
                _ => None,
            };
            if let Some(n) = need {
                problems.push(format!("status {text} without its {n} (tasks extension, \"Task Polling\": the server MUST return it)"));
            }
            if seen.has_result && s != Status::Completed {
                problems.push(format!(
                    "a `result` while the status is {text}: a result comes with `completed` only"
                ));
            }
        }
        let mut ended = None;
        let mut code = Code::McpTaskStatus;
        {
            let mut t = self.insp.tasks.locked();
            if let Some(task) = t.map.get_mut(&**task_id) {
                if task.a2a {
                    code = Code::A2aTaskState;
                }
                if let Some(s) = status {
                    if task.status.terminal() && s != task.status {
                        let rule = if task.a2a {
                            "a terminal state is final (A2A, \"Task Lifecycle\")"
                        } else {
                            "a terminal status is final (tasks extension, \"Task Status\" state diagram)"
                        };
                        problems.push(format!(
                            "task {task_id} ended {} and is now {}: {rule}",
                            task.status.as_str(),
                            s.as_str()
                        ));
                    } else if !task.status.terminal() {
                        task.status = s;
                        if let Some(ms) = seen.interval_ms {
                            task.interval_ms = Some(ms);
                        }
                        if let Some(ttl) = seen.ttl_ms {
                            task.ttl_ms = ttl;
                        }
                        if s.terminal() {
                            if let Some(mut c) = task.call.take() {
                                if let Some(r) = c.task.as_mut() {
                                    r.status = Some(s.as_str().into());
                                    r.polls = task.polls;
                                }
                                ended = Some((task.key.clone(), c, outcome_of(s, seen, task_id)));
                            }
                        }
                    }
                }
            }
        }
        if !problems.is_empty() {
            let msg = format!("task {task_id}: {}", problems.join("; "));
            if on_reply {
                self.flag_reply(key, method, code, msg, extra);
            } else {
                self.flag_here(key.direction, code, None, Some(method), msg);
            }
        }
        (status, ended)
    }
}

#[cfg(test)]
mod tests {
    use super::super::modern::rule_tests::{codes, events, post};
    use super::*;
    use crate::events::{BusBuilder, CallEvent, Subscription};

    const V: Option<&str> = Some("2026-07-28");

    fn setup() -> (Inspector, Subscription) {
        let mut bus = BusBuilder::default();
        let sub = bus.subscribe("t", 1 << 12);
        (
            Inspector::offline(InspectConfig::default(), bus.build()),
            sub,
        )
    }

    /// A 2026-07-28 request's body: `_meta` with or without the tasks extension.
    fn req(id: u32, method: &str, params: &str, ext: bool) -> String {
        let caps = if ext {
            r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#
        } else {
            "{}"
        };
        let meta = format!(
            r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"t","version":"1"}},"io.modelcontextprotocol/clientCapabilities":{caps}}}"#
        );
        let params = if params.is_empty() {
            format!("{{{meta}}}")
        } else {
            format!("{{{params},{meta}}}")
        };
        format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#)
    }

    fn task(id: u32, status: &str, extra: &str) -> String {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"result":{{"resultType":"complete","taskId":"t1","status":"{status}","createdAt":"2026-12-07T10:00:00Z","lastUpdatedAt":"2026-12-07T10:00:00Z","ttlMs":60000,"pollIntervalMs":100{extra}}}}}"#
        )
    }

    const HANDLE: &str = r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t1","status":"working","createdAt":"2026-12-07T10:00:00Z","lastUpdatedAt":"2026-12-07T10:00:00Z","ttlMs":60000,"pollIntervalMs":100}}"#;

    /// An inspector that saw a declaring client's `tools/call` answered with task `t1`.
    fn with_task() -> (Inspector, Subscription) {
        let (insp, sub) = setup();
        let call = req(1, "tools/call", r#""name":"slow","arguments":{}"#, true);
        post(&insp, V, &call, &[HANDLE]);
        (insp, sub)
    }

    /// 2025-11-25's task-augmented `tools/call` (id 7) and its handle for task `old`.
    const LEGACY_CALL: &str = r#"{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"slow","arguments":{},"task":{"ttl":60000}}}"#;
    const LEGACY_HANDLE: &str = r#"{"jsonrpc":"2.0","id":7,"result":{"task":{"taskId":"old","status":"working","ttl":60000,"pollInterval":50,"createdAt":"2025-11-25T10:00:00Z"}}}"#;

    /// An inspector that saw 2025-11-25's task `old` created.
    fn with_legacy_task() -> (Inspector, Subscription) {
        let (insp, sub) = setup();
        post(&insp, None, LEGACY_CALL, &[LEGACY_HANDLE]);
        (insp, sub)
    }

    fn calls(ev: &[Event]) -> Vec<&CallEvent> {
        ev.iter()
            .filter_map(|e| match e {
                Event::Call(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    fn poll(insp: &Inspector, at_ms: u64, id: u32, reply: &str) {
        insp.set_time(at_ms * 1_000_000);
        post(
            insp,
            V,
            &req(id, "tasks/get", r#""taskId":"t1""#, true),
            &[reply],
        );
    }

    /// The call that created a task ends when a poll shows it completed: one event, its outcome
    /// the task's, its latency the task's whole life, its polls counted; each poll names it.
    #[test]
    fn a_task_is_one_call_from_its_handle_to_its_end() {
        let (insp, mut sub) = with_task();
        let ev = events(&mut sub);
        assert!(calls(&ev).is_empty(), "the call waits for its task: {ev:?}");
        assert!(codes(&ev).is_empty(), "{:?}", codes(&ev));
        poll(&insp, 150, 2, &task(2, "working", ""));
        poll(&insp, 300, 3, &task(3, "working", ""));
        poll(
            &insp,
            450,
            4,
            &task(4, "completed", r#","result":{"content":[]}"#),
        );
        let ev = events(&mut sub);
        assert!(codes(&ev).is_empty(), "{:?}", codes(&ev));
        let c = calls(&ev);
        assert_eq!(c.len(), 4, "three polls and the task's call: {c:?}");
        for (p, status) in c[..3].iter().zip(["working", "working", "completed"]) {
            assert_eq!(&*p.method, "tasks/get");
            let t = p.task.as_deref().expect("a poll names its task");
            assert_eq!(&*t.id, "t1");
            assert_eq!(t.status.as_deref(), Some(status));
            assert_eq!(t.origin_id, Some(Id::Num("1".into())));
        }
        let origin = c[3];
        assert_eq!(&*origin.method, "tools/call");
        assert_eq!(origin.id, Id::Num("1".into()));
        assert_eq!(origin.outcome, Outcome::Result);
        assert_eq!(origin.latency_us, Some(450_000));
        let t = origin.task.as_deref().unwrap();
        assert_eq!((t.status.as_deref(), t.polls), (Some("completed"), 3));
    }

    #[test]
    fn polls_too_fast_after_the_end_and_a_changed_end_are_flagged() {
        let (insp, mut sub) = with_task();
        poll(&insp, 20, 2, &task(2, "working", ""));
        poll(&insp, 40, 3, &task(3, "input_required", ""));
        let ev = events(&mut sub);
        // Once per task, with the measured interval; and input_required without its requests.
        assert_eq!(codes(&ev), ["MCP_TASK_POLL", "MCP_TASK_STATUS"]);
        let msg = ev.iter().find_map(|e| match e {
            Event::Anomaly(a) if a.code == "MCP_TASK_POLL" => Some(a.message.clone()),
            _ => None,
        });
        assert!(msg.unwrap().contains("polled 20 ms"));
        poll(
            &insp,
            500,
            4,
            &task(4, "failed", r#","error":{"code":-32603,"message":"boom"}"#),
        );
        let ev = events(&mut sub);
        let origin = calls(&ev)
            .into_iter()
            .find(|c| &*c.method == "tools/call")
            .unwrap();
        assert_eq!(
            origin.outcome,
            Outcome::Error {
                code: -32603,
                message: "boom".into()
            }
        );
        poll(
            &insp,
            900,
            5,
            &task(5, "completed", r#","result":{"content":[]}"#),
        );
        assert_eq!(
            codes(&events(&mut sub)),
            ["MCP_TASK_POLL", "MCP_TASK_STATUS"]
        );
    }

    #[test]
    fn a_task_for_a_client_that_did_not_declare_the_extension_is_flagged() {
        let (insp, mut sub) = setup();
        post(
            &insp,
            V,
            &req(1, "tools/call", r#""name":"slow","arguments":{}"#, false),
            &[HANDLE],
        );
        assert_eq!(codes(&events(&mut sub)), ["MCP_TASK_UNDECLARED"]);
        // A method without tasks answered with one: flagged, and the call ends at its reply.
        post(
            &insp,
            V,
            &req(2, "prompts/get", r#""name":"p""#, true),
            &[&HANDLE.replace("\"id\":1", "\"id\":2")],
        );
        let ev = events(&mut sub);
        assert_eq!(codes(&ev), ["MCP_TASK_UNDECLARED"]);
        assert_eq!(calls(&ev).len(), 1);
    }

    #[test]
    fn another_clients_task_answered_is_flagged() {
        let (insp, mut sub) = with_task();
        insp.set_time(200_000_000);
        let other = req(2, "tasks/get", r#""taskId":"t1""#, true)
            .replace(r#""name":"t""#, r#""name":"other""#);
        post(&insp, V, &other, &[&task(2, "working", "")]);
        let ev = events(&mut sub);
        assert_eq!(codes(&ev), ["MCP_TASK_BINDING"], "{ev:?}");
    }

    /// 2025-11-25: `params.task` asks, `{"task":{…}}` answers, `tasks/result` gives the result.
    #[test]
    fn the_2025_11_25_shape_is_one_call_too() {
        let (insp, mut sub) = with_legacy_task();
        let (call, handle) = (LEGACY_CALL, LEGACY_HANDLE);
        insp.set_time(100_000_000);
        let get = r#"{"jsonrpc":"2.0","id":8,"method":"tasks/get","params":{"taskId":"old"}}"#;
        post(
            &insp,
            None,
            get,
            &[
                r#"{"jsonrpc":"2.0","id":8,"result":{"taskId":"old","status":"completed","ttl":60000,"pollInterval":50,"createdAt":"2025-11-25T10:00:00Z"}}"#,
            ],
        );
        insp.set_time(120_000_000);
        let res = r#"{"jsonrpc":"2.0","id":9,"method":"tasks/result","params":{"taskId":"old"}}"#;
        post(
            &insp,
            None,
            res,
            &[r#"{"jsonrpc":"2.0","id":9,"result":{"content":[]}}"#],
        );
        let ev = events(&mut sub);
        assert!(codes(&ev).is_empty(), "{:?}", codes(&ev));
        let c = calls(&ev);
        let origin = c.iter().find(|c| &*c.method == "tools/call").unwrap();
        assert_eq!(
            (origin.outcome.clone(), origin.latency_us),
            (Outcome::Result, Some(100_000))
        );
        // Without `params.task`, the handle is flagged.
        let bare = call
            .replace(r#","task":{"ttl":60000}"#, "")
            .replace("\"id\":7", "\"id\":10");
        post(
            &insp,
            None,
            &bare,
            &[&handle
                .replace("\"id\":7", "\"id\":10")
                .replace("\"old\"", "\"old2\"")],
        );
        assert_eq!(codes(&events(&mut sub)), ["MCP_TASK_UNDECLARED"]);
    }

    /// 2025-11-25's `tasks/list`: a listed task's status counts like a poll's (a failed task
    /// ends its call; a terminal task listed as working again is flagged), but the list is no
    /// poll; tasks rpctap does not know are left alone.
    #[test]
    fn a_task_list_moves_the_tasks_it_lists() {
        let (insp, mut sub) = with_legacy_task();
        insp.set_time(80_000_000);
        let list = r#"{"jsonrpc":"2.0","id":8,"method":"tasks/list","params":{}}"#;
        let listed = |id: u32, status: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"result":{{"tasks":[{{"taskId":"elsewhere","status":"working"}},{{"taskId":"old","status":"{status}","statusMessage":"no disk","ttl":60000,"createdAt":"2025-11-25T10:00:00Z"}}]}}}}"#
            )
        };
        post(&insp, None, list, &[&listed(8, "failed")]);
        let ev = events(&mut sub);
        assert!(codes(&ev).is_empty(), "{:?}", codes(&ev));
        let c = calls(&ev);
        let origin = c
            .iter()
            .find(|c| &*c.method == "tools/call")
            .expect("the list showed the task failed: its call ended");
        assert_eq!(origin.latency_us, Some(80_000));
        assert!(
            matches!(&origin.outcome, Outcome::Error { message, .. } if message.contains("no disk")),
            "{:?}",
            origin.outcome
        );
        let t = origin.task.as_deref().expect("the call names its task");
        assert_eq!((t.status.as_deref(), t.polls), (Some("failed"), 0));
        let l = c.iter().find(|c| &*c.method == "tasks/list").unwrap();
        assert!(l.task.is_none(), "a list is about many tasks");
        post(
            &insp,
            None,
            &list.replace("\"id\":8", "\"id\":9"),
            &[&listed(9, "working")],
        );
        assert_eq!(codes(&events(&mut sub)), ["MCP_TASK_STATUS"]);
    }

    /// A task's end told by `notifications/tasks` on the client's `subscriptions/listen`
    /// stream, no poll needed: the call ends there, with the task's error.
    #[test]
    fn a_task_notification_ends_its_call() {
        let (insp, mut sub) = with_task();
        insp.set_time(300_000_000);
        let ack = r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"notifications":{"taskIds":["t1"]}}}"#;
        let done = r#"{"jsonrpc":"2.0","method":"notifications/tasks","params":{"taskId":"t1","status":"failed","createdAt":"2026-12-07T10:00:00Z","lastUpdatedAt":"2026-12-07T10:00:00Z","ttlMs":60000,"error":{"code":-32603,"message":"disk full"}}}"#;
        let listen = req(
            2,
            "subscriptions/listen",
            r#""notifications":{"taskIds":["t1"]}"#,
            true,
        );
        post(&insp, V, &listen, &[ack, done]);
        let ev = events(&mut sub);
        assert!(codes(&ev).is_empty(), "{:?}", codes(&ev));
        let origin = calls(&ev)
            .into_iter()
            .find(|c| &*c.method == "tools/call")
            .expect("the task's call ended");
        assert_eq!(
            (origin.outcome.clone(), origin.latency_us),
            (
                Outcome::Error {
                    code: -32603,
                    message: "disk full".into()
                },
                Some(300_000)
            )
        );
    }

    #[test]
    fn rfc3339_timestamps_read_as_the_epoch_does() {
        assert_eq!(rfc3339_ns("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            rfc3339_ns("2026-12-07T10:00:00Z"),
            Some(1_796_637_600_000_000_000)
        );
        assert_eq!(
            rfc3339_ns("2026-12-07T11:00:00.5+01:00"),
            Some(1_796_637_600_500_000_000)
        );
        assert_eq!(
            rfc3339_ns("2000-02-29T23:59:59.123456789-00:30"),
            rfc3339_ns("2000-03-01T00:29:59.123456789Z")
        );
        for bad in [
            "",
            "2026-12-07",
            "2026-12-07T10:00:00",
            "2026-1x-07T10:00:00Z",
        ] {
            assert_eq!(rfc3339_ns(bad), None, "{bad}");
        }
    }

    /// A poll answered with a task created while rpctap watched but never handed out through
    /// it: flagged; one created before rpctap watched is not rpctap's to judge.
    #[test]
    fn an_unknown_task_answered_with_data_is_flagged_when_rpctap_saw_its_creation_time() {
        let (insp, mut sub) = setup();
        insp.set_watch_start(crate::events::now_ns() - 60_000_000_000);
        let answer = |created: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":2,"result":{{"resultType":"complete","taskId":"zz","status":"working","createdAt":"{created}","lastUpdatedAt":"{created}","ttlMs":null}}}}"#
            )
        };
        // Long before rpctap watched: not judged.
        post(
            &insp,
            V,
            &req(2, "tasks/get", r#""taskId":"zz""#, true),
            &[&answer("2020-01-01T00:00:00Z")],
        );
        assert!(codes(&events(&mut sub)).is_empty());
        // After rpctap started to watch.
        post(
            &insp,
            V,
            &req(2, "tasks/get", r#""taskId":"zz""#, true),
            &[&answer("2100-01-01T00:00:00Z")],
        );
        assert_eq!(codes(&events(&mut sub)), ["MCP_TASK_BINDING"]);
    }

    /// A task still working when its stdio session ends: its call ends missing, naming it.
    #[test]
    fn a_task_open_when_its_session_ends_is_unfinished() {
        let (insp, mut sub) = setup();
        let mut s = insp.begin_stream("stdio-1");
        s.line(Direction::ClientToServer, Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","arguments":{},"task":{}}}"#));
        s.line(Direction::ServerToClient, Bytes::from_static(br#"{"jsonrpc":"2.0","id":1,"result":{"task":{"taskId":"s1","status":"working","ttl":null}}}"#));
        s.end(EndReason::Complete);
        let ev = events(&mut sub);
        assert_eq!(codes(&ev), ["MCP_TASK_UNFINISHED"]);
        let c = calls(&ev);
        assert_eq!(c.len(), 1);
        match &c[0].outcome {
            Outcome::Missing { reason } => assert!(reason.contains("task s1"), "{reason}"),
            o => panic!("{o:?}"),
        }
    }
}

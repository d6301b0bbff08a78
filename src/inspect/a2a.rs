//! A2A (Agent2Agent, 1.0 and 0.3): what rpctap reads of it, so that a correct agent raises no
//! finding and a wrong one is named.
//!
//! - Streams: A2A's streaming methods (`SendStreamingMessage`, `SubscribeToTask`, 0.3's
//!   `message/stream`, `tasks/resubscribe`) answer with an SSE stream of *several responses
//!   carrying the call's id*, one per task event. Plain JSON-RPC reads the second one as a
//!   response to no call; here the call stays open across its events and ends at the event after
//!   which the server closes the stream (`closes_stream`) — a message, or a task in a terminal or
//!   interrupted state — or at the stream's end (`calls.rs` keeps the open streams).
//! - Tasks: what a result or event shows of its task (`task_shown`, `task_of`), read by the one
//!   task model (`tasks.rs`), the task an A2A request names (`request_target`), the conversation
//!   a reply names (`context_of`: the call's `context`, its session).
//! - The agent card (`CardFacts`), kept per inspector and held against what the agent does.
//! - Which requests are A2A's (`ExchangeCtx::a2a_request`: a name A2A uses is not enough) and
//!   the rules on them: `A2A_PART`, `A2A_PUSH_URL`, `A2A_CARD` (streaming, push notifications,
//!   a skill the card does not declare), `A2A_VERSION`, `A2A_TASK_ID` (`A2A_TASK_STATE` is the
//!   task model's and the streams').

use serde_json::Value;

pub use crate::rpc::a2a::{is_a2a_only, is_method, is_stream_method};

use super::*;
use crate::locks::Locked as _;

/// A task state, either version's spelling (`TASK_STATE_INPUT_REQUIRED`, `input-required`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Submitted,
    Working,
    InputRequired,
    AuthRequired,
    Completed,
    Failed,
    Canceled,
    Rejected,
    Unknown,
}

impl State {
    pub fn parse(s: &str) -> State {
        let s = s.strip_prefix("TASK_STATE_").unwrap_or(s);
        // Any letter case, `-` and `_` alike (1.0's `INPUT_REQUIRED`, 0.3's `input-required`).
        let is = |a: &str| {
            s.len() == a.len()
                && s.bytes().zip(a.bytes()).all(|(x, y)| {
                    x.eq_ignore_ascii_case(&y) || (matches!(x, b'-' | b'_') && y == b'_')
                })
        };
        if is("submitted") {
            State::Submitted
        } else if is("working") {
            State::Working
        } else if is("input_required") {
            State::InputRequired
        } else if is("auth_required") {
            State::AuthRequired
        } else if is("completed") {
            State::Completed
        } else if is("failed") {
            State::Failed
        } else if is("canceled") || is("cancelled") {
            State::Canceled
        } else if is("rejected") {
            State::Rejected
        } else {
            State::Unknown
        }
    }

    /// The task will not change again.
    pub fn terminal(self) -> bool {
        matches!(
            self,
            State::Completed | State::Failed | State::Canceled | State::Rejected
        )
    }

    /// The server closes a stream here: the task ended or waits on the client.
    pub fn closes_stream(self) -> bool {
        self.terminal() || matches!(self, State::InputRequired | State::AuthRequired)
    }
}

impl State {
    /// The MCP tasks status the shared task model (`tasks`) keeps for it: A2A's waiting states
    /// are MCP's `input_required`, its `rejected` a `failed`, its `submitted` a `working`.
    pub fn as_mcp(self) -> &'static str {
        match self {
            State::Submitted | State::Working => "working",
            State::InputRequired | State::AuthRequired => "input_required",
            State::Completed => "completed",
            State::Failed | State::Rejected => "failed",
            State::Canceled => "cancelled",
            State::Unknown => "unknown",
        }
    }
}

/// What a result or stream event of an A2A call shows of a task.
#[derive(Debug, PartialEq)]
pub struct Shown {
    pub id: String,
    pub state: State,
    /// The text of the status message, when it has one.
    pub message: Option<String>,
}

/// The task a result shows: 1.0's `{"task": …}` (a message call's) or `{"statusUpdate": …}` (a
/// stream's), 0.3's `kind: "status-update"`, or a task itself (`GetTask`, `CancelTask`, 0.3's
/// `kind: "task"`). An artifact update or a message shows no state.
pub fn task_shown(result: &Value) -> Option<Shown> {
    let (holder, id) = if let Some(t) = result.get("task") {
        (t, t.get("id"))
    } else if let Some(u) = result.get("statusUpdate") {
        (u, u.get("taskId"))
    } else if result.get("kind").and_then(Value::as_str) == Some("status-update") {
        (result, result.get("taskId"))
    } else {
        (result, result.get("id"))
    };
    let status = holder.get("status")?;
    let message = status.get("message").and_then(|m| {
        let parts = m.get("parts")?.as_array()?;
        let text: String = parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect();
        (!text.is_empty()).then_some(text)
    });
    Some(Shown {
        id: id?.as_str()?.to_string(),
        state: State::parse(status.get("state")?.as_str()?),
        message,
    })
}

/// The task a result or stream event is about: 1.0's `task.id`, `statusUpdate.taskId`,
/// `artifactUpdate.taskId`, `message.taskId`; a task itself (`GetTask`) or 0.3's events (`id` of
/// a `kind: "task"`, else `taskId`).
pub fn task_of(result: &Value) -> Option<&str> {
    let id = if let Some(t) = result.get("task") {
        t.get("id")
    } else if let Some(h) = ["statusUpdate", "artifactUpdate", "message"]
        .iter()
        .find_map(|k| result.get(*k))
    {
        h.get("taskId")
    } else if result.get("status").is_some() && result.get("kind").is_none_or(|k| k == "task") {
        // A task itself (1.0's `GetTask`, 0.3's `kind: "task"`).
        result.get("id")
    } else {
        result.get("taskId")
    };
    id?.as_str().filter(|s| !s.is_empty())
}

/// The conversation (`contextId`) a result or stream event names: 1.0's `task`, `message`,
/// `statusUpdate` or `artifactUpdate` member's, or the result's own (a task `GetTask` answers,
/// 0.3's events, tagged by `kind`).
pub fn context_of(result: &Value) -> Option<&str> {
    let holder = ["task", "message", "statusUpdate", "artifactUpdate"]
        .iter()
        .find_map(|k| result.get(*k))
        .unwrap_or(result);
    holder.get("contextId")?.as_str()
}

/// The task an A2A request names: `params.id` of the task methods, `params.message.taskId` of a
/// message that continues a task.
pub fn request_target(method: &str, params: &Value) -> Option<std::sync::Arc<str>> {
    let id = if is_message_method(method) {
        params.get("message")?.get("taskId")?
    } else {
        params.get("id")?
    };
    // An empty id (proto3's default, as some clients write an unset one) names no task.
    id.as_str()
        .filter(|s| !s.is_empty())
        .map(std::sync::Arc::from)
}

pub use crate::rpc::a2a::is_message_method;

/// A method about one task, named by `params.id`.
pub fn is_task_method(method: &str) -> bool {
    matches!(
        method,
        "GetTask"
            | "CancelTask"
            | "SubscribeToTask"
            | "tasks/get"
            | "tasks/cancel"
            | "tasks/resubscribe"
    )
}

/// A push notification URL the request gives that is not `https`: the agent would send the
/// task's updates (and the token that authenticates them) in clear. 1.0's
/// `CreateTaskPushNotificationConfig` (the config is the params) and a message's
/// `configuration.taskPushNotificationConfig`; 0.3's `tasks/pushNotificationConfig/set` and
/// `configuration.pushNotificationConfig`.
pub fn insecure_push_url(method: &str, params: &Value) -> Option<String> {
    let config = match method {
        "CreateTaskPushNotificationConfig" => Some(params),
        "tasks/pushNotificationConfig/set" => params.get("pushNotificationConfig"),
        m if is_message_method(m) => params.get("configuration").and_then(|c| {
            c.get("taskPushNotificationConfig")
                .or_else(|| c.get("pushNotificationConfig"))
        }),
        _ => None,
    }?;
    let url = config.get("url")?.as_str()?;
    let https = url
        .get(..8)
        .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    (!https).then(|| url.to_string())
}

/// Where an agent serves its card: 1.0 and 0.3's `/.well-known/agent-card.json`, 0.2's
/// `/.well-known/agent.json` (under any base path).
pub fn is_card_path(path: &str) -> bool {
    path.ends_with("/.well-known/agent-card.json") || path.ends_with("/.well-known/agent.json")
}

/// What rpctap reads of an agent card: enough to say what the agent is, and to hold it to it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CardFacts {
    pub name: Option<String>,
    pub version: Option<String>,
    /// `capabilities.streaming` / `.pushNotifications`, when the card says.
    pub streaming: Option<bool>,
    pub push: Option<bool>,
    /// The A2A versions its interfaces speak (1.0: each `supportedInterfaces[].protocolVersion`;
    /// 0.3: `protocolVersion`).
    pub protocol_versions: Vec<String>,
    pub skills: Vec<String>,
}

impl CardFacts {
    /// The card's facts; an unreadable card has none.
    pub fn read(card: &str) -> CardFacts {
        let Ok(v) = serde_json::from_str::<Value>(card) else {
            return CardFacts::default();
        };
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(str::to_string);
        let caps = v.get("capabilities");
        let flag = |k: &str| caps.and_then(|c| c.get(k)).and_then(Value::as_bool);
        let mut protocol_versions: Vec<String> = v
            .get("supportedInterfaces")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|i| text(i.get("protocolVersion")))
            .chain(text(v.get("protocolVersion")))
            .collect();
        protocol_versions.dedup();
        CardFacts {
            name: text(v.get("name")),
            version: text(v.get("version")),
            streaming: flag("streaming"),
            push: flag("pushNotifications"),
            protocol_versions,
            skills: v
                .get("skills")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(|s| text(s.get("id")))
                .collect(),
        }
    }

    /// One line: `NAME VERSION (A2A 1.0; streaming; 2 skills: a, b)`.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if !self.protocol_versions.is_empty() {
            parts.push(format!("A2A {}", self.protocol_versions.join(", ")));
        }
        match self.streaming {
            Some(true) => parts.push("streaming".into()),
            Some(false) => parts.push("no streaming".into()),
            None => {}
        }
        if self.push == Some(true) {
            parts.push("push notifications".into());
        }
        parts.push(match self.skills.len() {
            0 => "no skills".into(),
            1 => format!("1 skill: {}", self.skills[0]),
            n => format!("{n} skills: {}", self.skills.join(", ")),
        });
        format!(
            "{}{} ({})",
            self.name.as_deref().unwrap_or("(no name)"),
            self.version
                .as_deref()
                .map(|v| format!(" {v}"))
                .unwrap_or_default(),
            parts.join("; ")
        )
    }
}

/// Major.minor of a version (`1.0.2` → `1.0`, `0.3` → `0.3`): what A2A's versions are
/// negotiated by.
fn major_minor(v: &str) -> &str {
    match v.match_indices('.').nth(1) {
        Some((i, _)) => &v[..i],
        None => v,
    }
}

/// An A2A method named as the request's version does not name it: 1.0's PascalCase names
/// (`SendMessage`) under 0.3 — which an absent `A2A-Version` means —, or 0.3's (`message/send`)
/// under 1.0 or later. Why, when it is so.
pub fn version_mismatch(method: &str, version: Option<&str>) -> Option<String> {
    let v = version.unwrap_or("0.3");
    let legacy = v.starts_with("0.");
    let named_legacy = method.contains('/');
    if legacy == named_legacy {
        return None;
    }
    let said = match version {
        Some(v) => format!("`A2A-Version: {v}`"),
        None => "no `A2A-Version` (which means 0.3)".to_string(),
    };
    let whose = if named_legacy { "0.3's" } else { "1.0's" };
    Some(format!(
        "`{method}` is A2A {whose} name, sent with {said}: the agent reads the request as another version's"
    ))
}

/// At most this many problems are said of one message.
const MAX_PROBLEMS: usize = 3;

/// What is malformed in the messages, parts and artifacts of a request's `params` (`request`)
/// or a result: a part that is not exactly one of 1.0's `text`, `raw`, `url`, `data` (0.3: a
/// `kind` of `text`, `file` or `data` with its member), a message without `messageId`, `role` or
/// `parts`, an artifact without `artifactId` or `parts`. Each names where it is (`$.result.…`).
pub fn malformed(v: &Value, request: bool) -> Vec<String> {
    let mut out = Vec::new();
    if request {
        if let Some(m) = v.get("message") {
            message(m, "$.params.message", &mut out);
        }
        return out;
    }
    let at = "$.result";
    if let Some(m) = v.get("message") {
        message(m, "$.result.message", &mut out);
    } else if let Some(t) = v.get("task") {
        task(t, "$.result.task", &mut out);
    } else if let Some(u) = v.get("statusUpdate") {
        status_message(u, "$.result.statusUpdate", &mut out);
    } else if let Some(u) = v.get("artifactUpdate") {
        if let Some(a) = u.get("artifact") {
            artifact(a, "$.result.artifactUpdate.artifact", &mut out);
        }
    } else {
        match v.get("kind").and_then(Value::as_str) {
            Some("message") => message(v, at, &mut out),
            Some("status-update") => status_message(v, at, &mut out),
            Some("artifact-update") => {
                if let Some(a) = v.get("artifact") {
                    artifact(a, "$.result.artifact", &mut out);
                }
            }
            _ if v.get("id").is_some() && v.get("status").is_some() => task(v, at, &mut out),
            _ => {}
        }
    }
    out.truncate(MAX_PROBLEMS);
    out
}

fn say(out: &mut Vec<String>, text: String) {
    if out.len() < MAX_PROBLEMS {
        out.push(text);
    }
}

fn task(t: &Value, at: &str, out: &mut Vec<String>) {
    status_message(t, at, out);
    if let Some(h) = t.get("history").and_then(Value::as_array) {
        for (i, m) in h.iter().enumerate() {
            message(m, &format!("{at}.history[{i}]"), out);
        }
    }
    if let Some(a) = t.get("artifacts").and_then(Value::as_array) {
        for (i, a) in a.iter().enumerate() {
            artifact(a, &format!("{at}.artifacts[{i}]"), out);
        }
    }
}

fn status_message(holder: &Value, at: &str, out: &mut Vec<String>) {
    if let Some(m) = holder.get("status").and_then(|s| s.get("message")) {
        message(m, &format!("{at}.status.message"), out);
    }
}

fn message(m: &Value, at: &str, out: &mut Vec<String>) {
    if !m.is_object() {
        return say(out, format!("{at} is not an object"));
    }
    for key in ["messageId", "role"] {
        if !m.get(key).is_some_and(Value::is_string) {
            say(out, format!("{at} has no string `{key}`"));
        }
    }
    parts(m, at, out);
}

fn artifact(a: &Value, at: &str, out: &mut Vec<String>) {
    if !a.get("artifactId").is_some_and(Value::is_string) {
        say(out, format!("{at} has no string `artifactId`"));
    }
    parts(a, at, out);
}

fn parts(holder: &Value, at: &str, out: &mut Vec<String>) {
    let Some(parts) = holder.get("parts").and_then(Value::as_array) else {
        return say(out, format!("{at} has no `parts` array"));
    };
    for (i, p) in parts.iter().enumerate() {
        if let Some(why) = part(p) {
            say(out, format!("{at}.parts[{i}] {why}"));
        }
    }
}

/// Why a part is malformed: 0.3's are tagged by `kind`, 1.0's hold exactly one content member.
fn part(p: &Value) -> Option<String> {
    if !p.is_object() {
        return Some("is not an object".into());
    }
    if let Some(kind) = p.get("kind") {
        let (member, is_kind): (&str, fn(&Value) -> bool) = match kind.as_str() {
            Some("text") => ("text", Value::is_string),
            Some("file") => ("file", Value::is_object),
            Some("data") => ("data", Value::is_object),
            _ => {
                return Some(format!(
                    "has `kind` {kind}, none of text, file, data (A2A 0.3)"
                ))
            }
        };
        return (!p.get(member).is_some_and(is_kind))
            .then(|| format!("of kind {kind} has no `{member}` of its type"));
    }
    let content: Vec<&str> = ["text", "raw", "url", "data"]
        .into_iter()
        .filter(|k| p.get(*k).is_some())
        .collect();
    match content.len() {
        1 => None,
        0 => Some("has none of `text`, `raw`, `url`, `data` (a part holds exactly one)".into()),
        _ => Some(format!(
            "has {} (a part holds exactly one of `text`, `raw`, `url`, `data`)",
            content.join(" and ")
        )),
    }
}

fn state_at(status: Option<&Value>) -> Option<State> {
    status?.get("state")?.as_str().map(State::parse)
}

/// A stream event (a streaming call's `result`) after which the server ends the stream: a
/// message, a task or status update in a state that closes it, or 0.3's `final: true`.
/// Artifact updates and working states keep it open.
pub fn closes_stream(result: &Value) -> bool {
    // 1.0: exactly one of these members.
    if result.get("message").is_some() {
        return true;
    }
    if let Some(task) = result.get("task") {
        return state_at(task.get("status")).is_some_and(State::closes_stream);
    }
    if let Some(up) = result.get("statusUpdate") {
        return state_at(up.get("status")).is_some_and(State::closes_stream);
    }
    if result.get("artifactUpdate").is_some() {
        return false;
    }
    // 0.3: the result is the event, tagged by `kind`.
    match result.get("kind").and_then(Value::as_str) {
        Some("message") => true,
        Some("task") => state_at(result.get("status")).is_some_and(State::closes_stream),
        Some("status-update") => {
            result.get("final").and_then(Value::as_bool) == Some(true)
                || state_at(result.get("status")).is_some_and(State::closes_stream)
        }
        Some("artifact-update") => false,
        // Something else: not an event this reading knows; end the call on it rather than
        // keep it open on a guess.
        _ => true,
    }
}

impl ExchangeCtx {
    /// An A2A request (a method only A2A has, or a task method): the task it names (when the
    /// envelope's pass found no target), its malformed parts (`A2A_PART`) and a push URL in
    /// clear (`A2A_PUSH_URL`). Its params are read again: only A2A's requests pay for it.
    pub(super) fn a2a_request(
        &mut self,
        dir: Direction,
        method: &Arc<str>,
        raw: &[u8],
        id: &Id,
        target: &mut Option<Arc<str>>,
        anomalies: &mut Vec<&'static str>,
    ) {
        let Some(params) = crate::rpc::member(raw, "params") else {
            return;
        };
        let named = match target {
            None if is_task_method(method) || is_message_method(method) => {
                request_target(method, &params)
            }
            _ => None,
        };
        // A method named as A2A's is A2A's only with more to say so — its `A2A-Version`, an
        // agent card seen, a message shaped as A2A's (`parts`), a task rpctap saw A2A create —:
        // a JSON-RPC API of its own may well have a `SendMessage` or a `GetTask`.
        let a2a = self.a2a_version.is_some()
            || self.insp.a2a_card.locked().is_some()
            || params
                .get("message")
                .and_then(|m| m.get("parts"))
                .is_some_and(Value::is_array)
            || named
                .as_deref()
                .or(target.as_deref())
                .is_some_and(|t| self.a2a_task_known(t));
        if !a2a {
            return;
        }
        self.a2a_seen = true;
        self.a2a_streaming |= is_stream_method(method);
        if named.is_some() {
            *target = named;
        }
        // A skill the message names that the agent's card does not declare (`A2A_CARD`).
        let undeclared = crate::rpc::a2a::skill_of(&params).and_then(|skill| {
            let card = self.insp.a2a_card.locked().clone()?;
            if card.skills.iter().any(|s| s == skill) {
                return None;
            }
            let name = card.name.as_deref().unwrap_or("the agent");
            Some(if card.skills.is_empty() {
                format!("the message names skill {skill:?}; {name}'s card declares no skills")
            } else {
                format!(
                    "the message names skill {skill:?}, which {name}'s card does not declare (it declares {})",
                    card.skills.join(", ")
                )
            })
        });
        // The first message of a conversation names none: its reply will.
        self.a2a_context = params
            .get("message")
            .and_then(|m| m.get("contextId"))
            .and_then(Value::as_str)
            .map(Arc::from);
        let mut say = |code: Code, text: String| {
            self.flag_here(dir, code, Some(id), Some(method), text);
            if !anomalies.contains(&code.as_str()) {
                anomalies.push(code.as_str());
            }
        };
        for problem in malformed(&params, true) {
            say(Code::A2aPart, problem);
        }
        if let Some(why) = undeclared {
            say(Code::A2aCard, why);
        }
        if is_a2a_only(method) {
            if let Some(why) = version_mismatch(method, self.a2a_version.as_deref()) {
                say(Code::A2aVersion, why);
            }
        }
        if let Some(url) = insecure_push_url(method, &params) {
            say(
                Code::A2aPushUrl,
                format!("push notification URL {url} is not https: the agent would send the task's updates and their token in clear"),
            );
        }
    }

    /// The upstream served its agent card (`path`): kept as the agent's word (the
    /// `A2A_CARD` rule holds the agent to it), and published for the dashboard, the log and the
    /// recording (offline, the recording's event comes back here).
    pub fn agent_card(&mut self, path: &str, card: &str) {
        let facts = Arc::new(CardFacts::read(card));
        *self.insp.a2a_card.locked() = Some(facts);
        if self.insp.bus.wants_in(Interest::HTTP_AUTH, self.id) {
            self.insp.bus.publish(Event::Http(HttpEvent::AgentCard {
                ts: now_ns(),
                exchange: self.id,
                path: path.to_string(),
                card: card.to_string(),
            }));
        }
    }

    /// An A2A call answered with what the agent's card says it does not do: a stream when
    /// `capabilities.streaming` is false, a push notification config when
    /// `capabilities.pushNotifications` is false (`A2A_CARD`); a success (`ok`) to a request in
    /// a version its card lists no interface for (`A2A_VERSION`).
    pub(super) fn a2a_card_rule(
        &self,
        key: &PendingKey,
        method: &Arc<str>,
        streamed: bool,
        ok: bool,
        extra: &mut Vec<&'static str>,
    ) {
        let Some(card) = self.insp.a2a_card.locked().clone() else {
            return;
        };
        if ok && is_a2a_only(method) && !card.protocol_versions.is_empty() {
            let asked = self.a2a_version.as_deref().unwrap_or("0.3");
            let listed = card
                .protocol_versions
                .iter()
                .any(|v| major_minor(v) == major_minor(asked));
            if !listed {
                let name = card.name.as_deref().unwrap_or("the agent");
                let msg = format!(
                    "{name} answered an A2A {asked} request though its card lists only {} (an agent answers a version it does not support with VersionNotSupportedError, -32009)",
                    card.protocol_versions.join(", ")
                );
                self.flag_reply(key, method, Code::A2aVersion, msg, extra);
            }
        }
        let said = if streamed && is_stream_method(method) && card.streaming == Some(false) {
            "streamed its answer to `{m}` though its card says `capabilities.streaming: false`"
        } else if method.contains("ushNotificationConfig") && card.push == Some(false) {
            "took `{m}` though its card says `capabilities.pushNotifications: false` (it should answer PushNotificationNotSupportedError)"
        } else {
            return;
        };
        let name = card.name.as_deref().unwrap_or("the agent");
        let msg = format!("{name} {}", said.replace("{m}", method));
        self.flag_reply(key, method, Code::A2aCard, msg, extra);
    }

    /// A result of an A2A call (its reply, or an event of its stream): its malformed parts
    /// (`A2A_PART`) and, for a call about one task (`asked`: the task its request named), an
    /// answer about another task (`A2A_TASK_ID`), flagged on the call (`extra`: its findings);
    /// the conversation it names.
    pub(super) fn a2a_result(
        &self,
        key: &PendingKey,
        method: &Arc<str>,
        asked: Option<&str>,
        result: &Value,
        extra: &mut Vec<&'static str>,
    ) -> Option<Arc<str>> {
        for problem in malformed(result, false) {
            self.flag_reply(key, method, Code::A2aPart, problem, extra);
        }
        if let (Some(asked), Some(got)) = (asked, task_of(result)) {
            if asked != got {
                let msg = format!("`{method}` about task {asked} answered about task {got}: an agent answers a task it does not have with TaskNotFoundError (-32001), never with another task");
                self.flag_reply(key, method, Code::A2aTaskId, msg, extra);
            }
        }
        context_of(result).map(Arc::from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn states_read_in_both_spellings() {
        assert_eq!(
            State::parse("TASK_STATE_INPUT_REQUIRED"),
            State::InputRequired
        );
        assert_eq!(State::parse("input-required"), State::InputRequired);
        assert_eq!(State::parse("canceled"), State::Canceled);
        assert_eq!(State::parse("TASK_STATE_WORKING"), State::Working);
        assert_eq!(State::parse("sleeping"), State::Unknown);
        assert!(State::Rejected.terminal() && !State::AuthRequired.terminal());
        assert!(State::AuthRequired.closes_stream() && !State::Working.closes_stream());
    }

    #[test]
    fn the_task_a_result_shows_in_each_shape() {
        let shown = |v: Value| task_shown(&v).map(|s| (s.id, s.state, s.message));
        let ctx = json!({"task": {"id": "t", "contextId": "c9", "status": {"state": "working"}}});
        assert_eq!(context_of(&ctx), Some("c9"));
        let waiting = json!({"state": "TASK_STATE_INPUT_REQUIRED", "message": {"role": "ROLE_AGENT", "parts": [{"text": "which "}, {"text": "colour?"}]}});
        assert_eq!(
            shown(json!({"task": {"id": "t1", "status": waiting}})),
            Some((
                "t1".into(),
                State::InputRequired,
                Some("which colour?".into())
            ))
        );
        assert_eq!(
            shown(
                json!({"statusUpdate": {"taskId": "t2", "status": {"state": "TASK_STATE_COMPLETED"}}})
            ),
            Some(("t2".into(), State::Completed, None))
        );
        assert_eq!(
            shown(
                json!({"kind": "status-update", "taskId": "t3", "status": {"state": "canceled"}, "final": true})
            ),
            Some(("t3".into(), State::Canceled, None))
        );
        assert_eq!(
            shown(json!({"id": "t4", "kind": "task", "status": {"state": "working"}})),
            Some(("t4".into(), State::Working, None))
        );
        assert_eq!(
            shown(json!({"message": {"messageId": "m", "parts": []}})),
            None
        );
        assert_eq!(
            shown(json!({"artifactUpdate": {"taskId": "t", "artifact": {}}})),
            None
        );
        let get = json!({"id": "t9"});
        assert_eq!(request_target("GetTask", &get).as_deref(), Some("t9"));
        let resume = json!({"message": {"taskId": "t8", "parts": []}});
        assert_eq!(
            request_target("SendMessage", &resume).as_deref(),
            Some("t8")
        );
        let fresh = json!({"message": {"parts": []}});
        assert_eq!(request_target("SendMessage", &fresh), None);
    }

    #[test]
    fn malformed_parts_messages_and_artifacts_are_named_where_they_are() {
        let good = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
            "history": [{"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}],
            "artifacts": [{"artifactId": "a", "parts": [{"data": {"x": 1}}, {"url": "https://x"}]}]}});
        assert!(malformed(&good, false).is_empty());
        let legacy = json!({"kind": "message", "messageId": "m", "role": "agent",
            "parts": [{"kind": "text", "text": "hi"}, {"kind": "file", "file": {"uri": "x"}}]});
        assert!(malformed(&legacy, false).is_empty());
        let bad = json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"},
            "artifacts": [{"parts": [{"text": "a", "data": {}}, {}]}]}});
        assert_eq!(
            malformed(&bad, false),
            vec![
                "$.result.task.artifacts[0] has no string `artifactId`",
                "$.result.task.artifacts[0].parts[0] has text and data (a part holds exactly one of `text`, `raw`, `url`, `data`)",
                "$.result.task.artifacts[0].parts[1] has none of `text`, `raw`, `url`, `data` (a part holds exactly one)",
            ]
        );
        let req = json!({"message": {"messageId": "m", "role": "user", "parts": [{"kind": "text", "text": 5}]}});
        assert_eq!(
            malformed(&req, true),
            vec!["$.params.message.parts[0] of kind \"text\" has no `text` of its type"]
        );
        let push = json!({"taskId": "t", "url": "http://hooks.example/a2a", "token": "x"});
        assert_eq!(
            insecure_push_url("CreateTaskPushNotificationConfig", &push).as_deref(),
            Some("http://hooks.example/a2a")
        );
        let send = json!({"message": {}, "configuration": {"pushNotificationConfig": {"url": "HTTPS://ok"}}});
        assert_eq!(insecure_push_url("message/send", &send), None);
    }

    #[test]
    fn a_method_named_in_another_version_is_a_mismatch() {
        assert!(version_mismatch("SendMessage", Some("1.0")).is_none());
        assert!(version_mismatch("message/send", None).is_none());
        assert!(version_mismatch("message/send", Some("0.3.0")).is_none());
        assert!(version_mismatch("SendMessage", None)
            .unwrap()
            .contains("no `A2A-Version` (which means 0.3)"));
        assert!(version_mismatch("tasks/get", Some("1.0"))
            .unwrap()
            .contains("0.3's name"));
        assert_eq!(major_minor("1.0.2"), "1.0");
        assert_eq!(major_minor("0.3"), "0.3");
    }

    #[test]
    fn a_stream_closes_on_a_message_or_a_state_that_ends_it() {
        let open = [
            json!({"task": {"id": "t", "status": {"state": "TASK_STATE_SUBMITTED"}}}),
            json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_WORKING"}}}),
            json!({"artifactUpdate": {"taskId": "t", "artifact": {"parts": []}}}),
            json!({"kind": "status-update", "status": {"state": "working"}, "final": false}),
            json!({"kind": "artifact-update", "artifact": {"parts": []}}),
        ];
        let closing = [
            json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": []}}),
            json!({"task": {"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}}}),
            json!({"statusUpdate": {"taskId": "t", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}}),
            json!({"kind": "status-update", "status": {"state": "working"}, "final": true}),
            json!({"kind": "task", "status": {"state": "failed"}}),
            json!({"kind": "message", "parts": []}),
            json!(42),
        ];
        for r in &open {
            assert!(!closes_stream(r), "{r}");
        }
        for r in &closing {
            assert!(closes_stream(r), "{r}");
        }
    }
}

//! Enforcement of the rules on JSON-RPC messages, for every transport: each call of a parsed
//! body decided (`plan`), the shared stores asked once per body (`ask_shared`), a stream's
//! message (a stdio line, a WebSocket message) decided and inspected (`limit_message`), and
//! rpctap's own replies to refused calls. HTTP's framing of the outcome (statuses, a merged
//! batch reply) is `proxy::limits`'.
//!
//! It sees the inspector only through [`Inspects`], so the rules stay below the inspector.

use super::{CallInfo, Decision, Limiter, Permit, Refusal, RequestKeys, SharedVerdicts};
use crate::events::Direction;
use crate::rpc::{self, Body, Envelope, Id, Kind};
use bytes::Bytes;

/// What enforcing the rules on a stream tells the inspector: the message itself, and each
/// refusal (or, `shadow`, would-be refusal) of one of its members.
pub trait Inspects {
    fn line(&mut self, dir: crate::events::Direction, msg: Bytes);
    fn refuse(&mut self, id: Option<&Id>, method: &str, refusal: &Refusal, shadow: bool);
}

/// One member of the request, as the plan sees it.
#[derive(Debug)]
pub struct Member {
    pub raw: Bytes,
    pub id: Option<Id>,
    pub method: String,
    pub is_call: bool,
    pub refused: Option<Refusal>,
}

/// What to do with a request.
#[derive(Debug, Default)]
pub struct Plan {
    pub batch: bool,
    pub members: Vec<Member>,
    pub permits: Vec<Permit>,
    /// Shadow rules' would-be refusals: (member index, refusal).
    pub shadow: Vec<(usize, Refusal)>,
    /// Faults that fired for calls that go on (delays, reply faults, `close`): (member index,
    /// fault). An injected error is a refusal instead.
    pub faults: Vec<(usize, crate::flow::fault::Fired)>,
}

impl Plan {
    pub fn any_refused(&self) -> bool {
        self.members.iter().any(|m| m.refused.is_some())
    }
    pub fn all_refused(&self) -> bool {
        !self.members.is_empty() && self.members.iter().all(|m| m.refused.is_some())
    }
}

fn info(e: &Envelope) -> CallInfo<'_> {
    let method = e.method.as_deref().unwrap_or("");
    let (tool, resource) = match method {
        "resources/read" | "resources/subscribe" | "resources/unsubscribe" => {
            (None, e.target.as_deref())
        }
        _ => (e.target.as_deref(), None),
    };
    CallInfo {
        method,
        tool,
        resource,
        raw: &e.raw,
    }
}

/// Whether the rules count a message: a call or a notification — and an invalid message that
/// names a method (no `jsonrpc`, say), which a lenient server may still execute: what could
/// run is counted, never let through for being invalid.
fn counted(e: &Envelope) -> bool {
    matches!(e.kind, Kind::Request | Kind::Notification)
        || (e.kind == Kind::Invalid && e.method.is_some())
}

/// A parsed body's messages and whether it is a batch (`None`: not JSON).
fn members(parsed: &Body) -> Option<(Vec<&Envelope>, bool)> {
    match parsed {
        Body::Single(e) => Some((vec![e], false)),
        Body::Batch(v) => Some((v.iter().collect(), true)),
        Body::ParseError(_) => None,
    }
}

/// The calls and notifications of a parsed body, as the rules see them (`None` for the other
/// members), in order.
pub fn calls(parsed: &Body) -> Vec<Option<CallInfo<'_>>> {
    let Some((envs, _)) = members(parsed) else {
        return vec![];
    };
    envs.into_iter()
        .map(|e| counted(e).then(|| info(e)))
        .collect()
}

/// The shared stores' verdicts for a parsed body (one round trip); empty without shared rules.
pub async fn ask_shared(
    limiter: &Limiter,
    parsed: &Body,
    keys: &RequestKeys<'_>,
) -> SharedVerdicts {
    if !limiter.has_shared() {
        return Default::default();
    }
    limiter.ask_shared(&calls(parsed), keys).await
}

/// Decides every request and notification of a parsed body; `shared`, the shared stores'
/// verdicts for it (`ask_shared`).
pub fn plan(
    limiter: &Limiter,
    parsed: &Body,
    keys: &RequestKeys<'_>,
    shared: Option<&mut SharedVerdicts>,
) -> Plan {
    plan_in(Direction::ClientToServer, limiter, parsed, keys, shared)
}

/// [`plan`] for the messages of direction `dir`: the server's requests (`ServerToClient`) are
/// decided by the `direction = "s2c"` fault rules only (rate limits count the client's calls);
/// an `error` among them is a refusal whose reply goes to the server.
pub fn plan_in(
    dir: Direction,
    limiter: &Limiter,
    parsed: &Body,
    keys: &RequestKeys<'_>,
    mut shared: Option<&mut SharedVerdicts>,
) -> Plan {
    let Some((envs, batch)) = members(parsed) else {
        return Plan::default();
    };
    // The pipeline's stages (deny, faults) on what could run: a request, a notification, or an
    // invalid message that names a method.
    let staged = limiter.stages.wants(dir);
    let decide_fault = |e: &Envelope| {
        (staged && counted(e))
            .then(|| {
                limiter.stages.decide(&crate::flow::Msg {
                    dir,
                    kind: e.kind,
                    call: &info(e),
                    session: keys.session,
                    peer: keys.peer,
                    headers: keys.headers,
                })
            })
            .flatten()
    };
    let rate = dir == Direction::ClientToServer && limiter.has_rate_rules();
    // Stages alone: a request none of them acts on costs its matching and no plan.
    let mut early: Vec<Option<crate::flow::fault::Fired>> = Vec::new();
    if !rate {
        early = envs.iter().map(|e| decide_fault(e)).collect();
        if early.iter().all(Option::is_none) {
            return Plan::default();
        }
    }
    let mut plan = Plan {
        batch,
        ..Default::default()
    };
    for (i, e) in envs.into_iter().enumerate() {
        let mut refused = None;
        if counted(e) && rate {
            let mut shadow = Vec::new();
            let verdicts = shared.as_deref_mut().map(|v| (i, v));
            match limiter.check_with(&info(e), keys, &mut shadow, verdicts) {
                Decision::Allow(p) => plan.permits.extend(p),
                Decision::Refuse(r) => refused = Some(r),
            }
            plan.shadow.extend(shadow.into_iter().map(|r| (i, r)));
        }
        // Faults are decided on what the rate limits let through.
        let fired = match early.get_mut(i) {
            Some(f) => f.take(),
            None if refused.is_none() => decide_fault(e),
            None => None,
        };
        if let Some(f) = fired {
            match &f.action {
                crate::flow::fault::Action::Error { status, code, .. } => {
                    refused = Some(Refusal {
                        rule: f.rule.clone(),
                        retry_after: std::time::Duration::ZERO,
                        status: *status,
                        code: *code,
                        limit: 0,
                        fault: Some(f),
                    })
                }
                _ => plan.faults.push((i, f)),
            }
        }
        plan.members.push(Member {
            raw: e.raw.clone(),
            id: e.id.clone(),
            method: e.method.as_deref().unwrap_or("").to_string(),
            is_call: e.kind == Kind::Request || (counted(e) && e.id.is_some()),
            refused,
        });
    }
    plan
}

/// What happens to one message of a stream (a stdio line, a WebSocket message) under the
/// rules.
#[derive(Debug)]
pub struct Limited {
    pub forward: Forward,
    /// rpctap's own reply to the refused calls: one error, or a batch of them.
    pub reply: Option<Vec<u8>>,
    /// Faults that fired for calls that go on (the transport applies them).
    pub faults: Vec<CallFault>,
}

/// A fault that fired for a call that goes on to the server.
#[derive(Debug, Clone)]
pub struct CallFault {
    pub id: Id,
    pub method: String,
    pub fired: crate::flow::fault::Fired,
}

/// How the faults that fired for a message split, decided once for every transport: what acts
/// before the message goes on (the longest `delay`, a `close`), each with what the recording
/// says of it, and what acts on the replies, for the transport to arm in its own framing.
#[derive(Debug, Default)]
pub struct Triage {
    pub delay: Option<std::time::Duration>,
    pub close: bool,
    /// Done now (a delay, a close): to record, with its detail.
    pub now: Vec<(CallFault, String)>,
    /// On the server's replies to these calls (a client's calls), a stream's cut apart.
    pub replies: Vec<CallFault>,
    /// A server's requests' faults, on the client's answers to them.
    pub answers: Vec<CallFault>,
    /// `cut-stream`: the reply's stream cut after some messages.
    pub cuts: Vec<CallFault>,
}

/// Splits `faults` (see [`Triage`]); `closed` says what a `close` does on this transport, for
/// a client's call and for a server's request (`[call, server's request]`).
pub fn triage(faults: Vec<CallFault>, closed: [&str; 2]) -> Triage {
    use crate::flow::fault::{Action, At};
    let mut t = Triage::default();
    for f in faults {
        let s2c = f.fired.direction == Direction::ServerToClient;
        let detail = match &f.fired.action {
            Action::Delay(d, At::Request) => {
                t.delay = Some(t.delay.unwrap_or_default().max(*d));
                match s2c {
                    true => format!(
                        "the server's request held {} before it reached the client",
                        crate::units::show_secs(*d)
                    ),
                    false => format!("the request held {}", crate::units::show_secs(*d)),
                }
            }
            Action::Close => {
                t.close = true;
                closed[usize::from(s2c)].to_string()
            }
            a if s2c && a.on_reply() => {
                t.answers.push(f);
                continue;
            }
            Action::CutStreamAfter { .. } => {
                t.cuts.push(f);
                continue;
            }
            a if a.on_reply() => {
                t.replies.push(f);
                continue;
            }
            // Answered by rpctap (an `error`) before it could go on: never here.
            _ => continue,
        };
        t.now.push((f, detail));
    }
    t
}

impl Plan {
    /// The faults that fired, with their calls' ids.
    pub fn call_faults(&self) -> Vec<CallFault> {
        self.faults
            .iter()
            .filter_map(|(i, f)| {
                let m = &self.members[*i];
                Some(CallFault {
                    id: m.id.clone()?,
                    method: m.method.clone(),
                    fired: f.clone(),
                })
            })
            .collect()
    }
}

/// What of a stream's message goes on.
#[derive(Debug, PartialEq, Eq)]
pub enum Forward {
    /// The message as it came.
    Unchanged,
    /// A batch without its refused members.
    Smaller(Bytes),
    /// Nothing: every member was refused.
    Nothing,
}

/// Inspects one message of a stream in direction `dir` and applies the rules to it: refused
/// calls end as refused in the inspector, shadow rules' would-be refusals are published.
pub fn limit_message(
    limiter: &Limiter,
    ctx: &mut impl Inspects,
    dir: crate::events::Direction,
    msg: Bytes,
    keys: &RequestKeys<'_>,
    shared: Option<&mut SharedVerdicts>,
) -> Limited {
    let unchanged = Limited {
        forward: Forward::Unchanged,
        reply: None,
        faults: Vec::new(),
    };
    let parsed = rpc::parse_body(&msg);
    if limiter.is_empty() || matches!(parsed, Body::ParseError(_)) {
        ctx.line(dir, msg);
        return unchanged;
    }
    let plan = plan_in(dir, limiter, &parsed, keys, shared);
    ctx.line(dir, msg);
    for (i, r) in &plan.shadow {
        let m = &plan.members[*i];
        ctx.refuse(m.id.as_ref().filter(|_| m.is_call), &m.method, r, true);
    }
    let faults = plan.call_faults();
    if !plan.any_refused() {
        return Limited {
            faults,
            ..unchanged
        };
    }
    for m in &plan.members {
        if let Some(r) = &m.refused {
            ctx.refuse(m.id.as_ref().filter(|_| m.is_call), &m.method, r, false);
        }
    }
    let replies = refusal_replies(&plan);
    let reply = (!replies.is_empty()).then(|| {
        if plan.batch {
            format!("[{}]", replies.join(",")).into_bytes()
        } else {
            replies.join("\n").into_bytes()
        }
    });
    let forward = if plan.all_refused() {
        Forward::Nothing
    } else {
        Forward::Smaller(allowed_body(&plan))
    };
    Limited {
        forward,
        reply,
        faults,
    }
}

/// The JSON-RPC error rpctap answers a refused call with (an injected fault's is as its rule
/// wrote it: it stands in for the server's on purpose, and the recording says it was injected).
use crate::rpc::own::What;

pub fn refusal_reply(id: &Id, r: &Refusal) -> String {
    if let Some(crate::flow::fault::Action::Error {
        code,
        message,
        data,
        ..
    }) = r.fault.as_ref().map(|f| &f.action)
    {
        return rpc::error_reply(id, *code, message, data.as_deref().cloned());
    }
    let secs = (r.retry_after.as_millis() as f64 / 1000.0).max(0.001);
    rpc::error_reply(
        id,
        r.code,
        "Rate limited",
        Some(serde_json::json!({
            "retry_after": secs,
            "limit": &*r.rule,
            "rpctap": { "what": What::RateLimited.name(), "side": What::RateLimited.side() },
        })),
    )
}

/// The upstream request body with the refused members left out (a smaller batch).
pub fn allowed_body(plan: &Plan) -> Bytes {
    rpc::join_array(
        plan.members
            .iter()
            .filter(|m| m.refused.is_none())
            .map(|m| &m.raw[..]),
    )
}

/// rpctap's own replies to the refused calls, in request order.
pub fn refusal_replies(plan: &Plan) -> Vec<String> {
    plan.members
        .iter()
        .filter_map(|m| match (&m.refused, m.is_call, &m.id) {
            (Some(r), true, Some(id)) => Some(refusal_reply(id, r)),
            _ => None,
        })
        .collect()
}

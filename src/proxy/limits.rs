//! Rate-limit enforcement on the exchange pipeline: deciding per call, splitting a batch into
//! what goes upstream and what rpctap answers itself, and merging the two back into one reply.
//! This is the one place where rpctap rewrites what it forwards, and only when a rule refuses.

use crate::limit::{CallInfo, Decision, Limiter, Permit, Refusal, RequestKeys};
use crate::rpc::{self, Body, Envelope, Id, Kind};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

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
    }
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
        .map(|e| matches!(e.kind, Kind::Request | Kind::Notification).then(|| info(e)))
        .collect()
}

/// The shared stores' verdicts for a parsed body (one round trip); empty without shared rules.
pub async fn ask_shared(
    limiter: &Limiter,
    parsed: &Body,
    keys: &RequestKeys<'_>,
) -> crate::limit::SharedVerdicts {
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
    mut shared: Option<&mut crate::limit::SharedVerdicts>,
) -> Plan {
    let Some((envs, batch)) = members(parsed) else {
        return Plan::default();
    };
    let mut plan = Plan {
        batch,
        ..Default::default()
    };
    for (i, e) in envs.into_iter().enumerate() {
        let mut refused = None;
        if matches!(e.kind, Kind::Request | Kind::Notification) {
            let mut shadow = Vec::new();
            let verdicts = shared.as_deref_mut().map(|v| (i, v));
            match limiter.check_with(&info(e), keys, &mut shadow, verdicts) {
                Decision::Allow(p) => plan.permits.extend(p),
                Decision::Refuse(r) => refused = Some(r),
            }
            plan.shadow.extend(shadow.into_iter().map(|r| (i, r)));
        }
        plan.members.push(Member {
            raw: e.raw.clone(),
            id: e.id.clone(),
            method: e.method.as_deref().unwrap_or("").to_string(),
            is_call: e.kind == Kind::Request,
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
    ctx: &mut crate::inspect::ExchangeCtx,
    dir: crate::events::Direction,
    msg: Bytes,
    keys: &RequestKeys<'_>,
    shared: Option<&mut crate::limit::SharedVerdicts>,
) -> Limited {
    let unchanged = Limited {
        forward: Forward::Unchanged,
        reply: None,
    };
    let parsed = rpc::parse_body(&msg);
    if limiter.is_empty() || matches!(parsed, Body::ParseError(_)) {
        ctx.line(dir, msg);
        return unchanged;
    }
    let plan = plan(limiter, &parsed, keys, shared);
    ctx.line(dir, msg);
    for (i, r) in &plan.shadow {
        let m = &plan.members[*i];
        ctx.refuse(m.id.as_ref().filter(|_| m.is_call), &m.method, r, true);
    }
    if !plan.any_refused() {
        return unchanged;
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
    Limited { forward, reply }
}

/// The JSON-RPC error rpctap answers a refused call with.
pub fn refusal_reply(id: &Id, r: &Refusal) -> String {
    let secs = (r.retry_after.as_millis() as f64 / 1000.0).max(0.001);
    rpc::error_reply(
        id,
        r.code,
        "Rate limited",
        Some(serde_json::json!({ "retry_after": secs, "limit": &*r.rule })),
    )
}

/// The upstream request body with the refused members left out (a smaller batch).
pub fn allowed_body(plan: &Plan) -> Bytes {
    let parts: Vec<&[u8]> = plan
        .members
        .iter()
        .filter(|m| m.refused.is_none())
        .map(|m| &m.raw[..])
        .collect();
    let mut out = Vec::with_capacity(parts.iter().map(|p| p.len() + 1).sum::<usize>() + 2);
    out.push(b'[');
    for (i, p) in parts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(p);
    }
    out.push(b']');
    Bytes::from(out)
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

/// The client's reply when every member was refused: (status, content type, body, headers).
pub fn whole_refusal(
    plan: &Plan,
    sse: bool,
) -> (StatusCode, Option<&'static str>, Bytes, HeaderMap) {
    let replies = refusal_replies(plan);
    let mut headers = HeaderMap::new();
    let refusals: Vec<&Refusal> = plan
        .members
        .iter()
        .filter_map(|m| m.refused.as_ref())
        .collect();
    let all_429 = !refusals.is_empty() && refusals.iter().all(|r| r.status == Some(429));
    let retry = refusals
        .iter()
        .map(|r| r.retry_after)
        .max()
        .unwrap_or_default();
    let retry_secs = retry.as_secs() + u64::from(retry.subsec_nanos() > 0);
    if all_429 {
        let limit = refusals.iter().map(|r| r.limit).min().unwrap_or(0);
        for (k, v) in [
            ("retry-after", retry_secs.max(1).to_string()),
            ("ratelimit-limit", limit.to_string()),
            ("ratelimit-remaining", "0".to_string()),
            ("ratelimit-reset", retry_secs.max(1).to_string()),
        ] {
            if let Ok(v) = HeaderValue::from_str(&v) {
                headers.insert(k, v);
            }
        }
    }
    if replies.is_empty() {
        // Only notifications: dropped, no reply (per the spec).
        let status = if all_429 {
            StatusCode::TOO_MANY_REQUESTS
        } else if sse {
            StatusCode::ACCEPTED
        } else {
            StatusCode::NO_CONTENT
        };
        return (status, None, Bytes::new(), headers);
    }
    let payload = if plan.batch {
        format!("[{}]", replies.join(","))
    } else {
        replies.join("")
    };
    let status = if all_429 {
        StatusCode::TOO_MANY_REQUESTS
    } else {
        StatusCode::OK
    };
    let (ct, body) = if sse && !all_429 {
        (
            "text/event-stream",
            format!("event: message\ndata: {payload}\n\n"),
        )
    } else {
        ("application/json", payload)
    };
    (status, Some(ct), Bytes::from(body), headers)
}

/// Merges the upstream's reply to the smaller batch with rpctap's refusals, in request order;
/// replies the upstream sent that match no member (a null-id error…) follow. `None` when the
/// upstream's body is not JSON-RPC (then it is forwarded as it is).
pub fn merge(plan: &Plan, upstream: &Bytes) -> Option<Bytes> {
    let replies: Vec<Envelope> = if upstream.iter().all(u8::is_ascii_whitespace) {
        Vec::new()
    } else {
        match rpc::parse_body(upstream) {
            Body::Batch(v) => v,
            Body::Single(e) => vec![e],
            Body::ParseError(_) => return None,
        }
    };
    let mut used = vec![false; replies.len()];
    let mut out: Vec<String> = Vec::new();
    for m in &plan.members {
        match (&m.refused, m.is_call, &m.id) {
            (Some(r), true, Some(id)) => out.push(refusal_reply(id, r)),
            (None, true, Some(id)) => {
                if let Some(i) = replies
                    .iter()
                    .enumerate()
                    .position(|(i, e)| !used[i] && e.id.as_ref() == Some(id))
                {
                    used[i] = true;
                    out.push(String::from_utf8_lossy(&replies[i].raw).into_owned());
                }
            }
            _ => {}
        }
    }
    for (i, e) in replies.iter().enumerate() {
        if !used[i] {
            out.push(String::from_utf8_lossy(&e.raw).into_owned());
        }
    }
    Some(Bytes::from(format!("[{}]", out.join(","))))
}

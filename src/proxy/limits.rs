//! Rate-limit enforcement on the HTTP exchange: the client's reply when every member of a
//! request was refused (statuses, `Retry-After`, SSE or JSON), and the upstream's reply to a
//! smaller batch merged back with rpctap's refusals. Deciding the calls is `limit::enforce`'s.
//! This is the one place where rpctap rewrites what it forwards over HTTP, and only when a rule
//! refuses.

use crate::limit::enforce::refusal_reply;
pub use crate::limit::enforce::{allowed_body, refusal_replies, Plan};
use crate::limit::Refusal;
use crate::rpc::{self, Body, Envelope};
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};

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
    // `[[fault]] status = N`: the whole request answered with that status (the JSON-RPC errors
    // in a JSON body, as a server that failed would send them).
    let injected_status = refusals
        .first()
        .filter(|r| r.fault.is_some())
        .and_then(|r| r.status)
        .filter(|s| *s != 429 && refusals.iter().all(|r| r.status == Some(*s)))
        .and_then(|s| StatusCode::from_u16(s).ok());
    if let Some(status) = injected_status {
        let replies = refusal_replies(plan);
        let payload = if plan.batch {
            format!("[{}]", replies.join(","))
        } else {
            replies.join("")
        };
        return (
            status,
            Some("application/json"),
            Bytes::from(payload),
            headers,
        );
    }
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

//! A call's verdict: what came back against what the recording holds.

use super::*;

/// One call's verdict: what came back against what the recording holds.
pub(super) fn judge(
    recorded_calls: &Expected<'_>,
    ignore: &[Pattern],
    exchange: u64,
    call: &MessageEvent,
    status: Option<u16>,
    replies: &HashMap<String, rpc::Envelope>,
    latency_ms: f64,
) -> CallReport {
    let this = recorded_calls;
    let id = call.id_text().unwrap_or_else(|| "null".into());
    let rec_outcome = this.outcome(call);
    let rec_reply = this.reply(call);
    let recorded = match (&rec_outcome, rec_reply) {
        (Outcome::Result, _) => "Succeeded".to_string(),
        (Outcome::InputRequired, _) => "Input required".to_string(),
        (Outcome::Error { .. }, Some(r)) => format!(
            "Error reported ({})",
            member(&r.json_text(), "error")
                .and_then(|e| e.get("code").cloned())
                .unwrap_or_default()
        ),
        (Outcome::Rejected { status }, _) => format!("Rejected (HTTP {status})"),
        (Outcome::Refused { .. }, _) => "Refused".to_string(),
        _ => "No reply".to_string(),
    };
    // A null-id error answers the whole request when there is no reply of its own.
    let got = replies.get(&id).or_else(|| replies.get("null"));
    let (verdict, pass, diffs) = match got {
        None => {
            let v = match status {
                Some(s) if !(200..300).contains(&s) => Verdict::Rejected { status: s },
                _ => Verdict::NoReply,
            };
            let pass = match (&v, &rec_outcome) {
                (Verdict::Rejected { status }, Outcome::Rejected { status: rec }) => status == rec,
                (Verdict::NoReply, Outcome::Missing { .. }) => true,
                _ => false,
            };
            (v, pass, vec![])
        }
        Some(env) => {
            let actual_raw = std::str::from_utf8(&env.raw).unwrap_or("");
            let (key, v) = if env.kind == Kind::Error {
                ("error", Verdict::ErrorReported)
            } else {
                ("result", Verdict::Succeeded)
            };
            let expected = rec_reply.and_then(|r| member(&r.json_text(), key));
            let actual = member(actual_raw, key);
            let mut diffs = if expected.is_none() {
                // The recorded reply was the other kind (or none).
                let other = if key == "error" { "result" } else { "error" };
                diff::diff(
                    other,
                    rec_reply
                        .and_then(|r| member(&r.json_text(), other))
                        .as_ref(),
                    None,
                    ignore,
                )
                .into_iter()
                .chain(diff::diff(key, None, actual.as_ref(), ignore))
                .collect()
            } else {
                diff::diff(key, expected.as_ref(), actual.as_ref(), ignore)
            };
            if expected.is_none() && rec_reply.is_none() && diffs.is_empty() {
                diffs.push(Diff {
                    path: "$".into(),
                    expected: recorded.clone(),
                    actual: v.to_string(),
                });
            }
            if diffs.is_empty() {
                (v, true, diffs)
            } else {
                (Verdict::Mismatch, false, diffs)
            }
        }
    };
    CallReport {
        exchange,
        scope: call.scope.to_string(),
        method: call.method.as_deref().unwrap_or_default().to_string(),
        target: call.target.as_deref().map(str::to_string),
        id,
        verdict,
        recorded,
        pass,
        diffs,
        latency_ms,
    }
}

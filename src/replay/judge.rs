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
            let moved_on = key == "result"
                && !diffs.is_empty()
                && is_task_poll(call.method.as_deref().unwrap_or_default())
                && expected.as_ref().is_some_and(still_working)
                && actual.as_ref().is_some_and(|a| task_state(a).is_some());
            if diffs.is_empty() || moved_on {
                // A poll that found a task still working when recorded may find it further on
                // when replayed (the server's pace is not the recording's): not a difference.
                // The poll that found it ended is judged as any reply.
                (v, true, Vec::new())
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

/// A method that reads a task's state: MCP's `tasks/get`, A2A's `GetTask`.
fn is_task_poll(method: &str) -> bool {
    matches!(method, "tasks/get" | "GetTask")
}

/// A task's state as a poll's result shows it: MCP's `status`, A2A's `status.state` (either
/// version's spelling), lower case without A2A 1.0's `TASK_STATE_` prefix.
fn task_state(result: &serde_json::Value) -> Option<String> {
    let status = result.get("status")?;
    let s = status
        .as_str()
        .or_else(|| status.get("state")?.as_str())?
        .to_ascii_lowercase();
    Some(s.strip_prefix("task_state_").unwrap_or(&s).to_string())
}

/// Whether a poll's result shows a task at work (one the server moves on by itself, unlike one
/// that waits for input or has ended).
fn still_working(result: &serde_json::Value) -> bool {
    task_state(result).is_some_and(|s| matches!(s.as_str(), "working" | "submitted"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_poll_of_a_working_task_is_told_apart_from_its_end() {
        assert!(still_working(&json!({"taskId": "t", "status": "working"})));
        assert!(still_working(
            &json!({"id": "t", "status": {"state": "TASK_STATE_WORKING"}})
        ));
        assert!(still_working(
            &json!({"id": "t", "status": {"state": "submitted"}})
        ));
        for ended in [
            json!({"taskId": "t", "status": "completed"}),
            json!({"taskId": "t", "status": "input_required"}),
            json!({"id": "t", "status": {"state": "TASK_STATE_INPUT_REQUIRED"}}),
            json!({"content": []}),
        ] {
            assert!(!still_working(&ended), "{ended}");
        }
        assert_eq!(
            task_state(&json!({"id": "t", "status": {"state": "TASK_STATE_COMPLETED"}})).as_deref(),
            Some("completed")
        );
        assert!(
            is_task_poll("GetTask") && is_task_poll("tasks/get") && !is_task_poll("tasks/cancel")
        );
    }
}

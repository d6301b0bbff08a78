//! A2A (Agent2Agent): what rpctap reads of it so that a correct agent raises no finding.
//!
//! A2A rides JSON-RPC 2.0 over HTTP; its streaming methods (`SendStreamingMessage`,
//! `SubscribeToTask`, and 0.3's `message/stream`, `tasks/resubscribe`) answer with an SSE
//! stream of *several responses carrying the call's id*, one per task event (A2A 1.0,
//! "JSON-RPC Protocol Binding"; 0.3 the same with `kind`-tagged results). Plain JSON-RPC
//! reads the second one as a response to no call; here a streaming call stays open across its
//! events and ends at the event after which the server closes the stream — a message, or a
//! task in a terminal or interrupted state — or at the stream's end.

use serde_json::Value;

pub use crate::rpc::a2a::{is_method, is_stream_method};

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
        let is =
            |a: &str| s.eq_ignore_ascii_case(a) || s.eq_ignore_ascii_case(&a.replace('_', "-"));
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
    let (id, status) = if let Some(t) = result.get("task") {
        (t.get("id"), t.get("status"))
    } else if let Some(u) = result.get("statusUpdate") {
        (u.get("taskId"), u.get("status"))
    } else if result.get("kind").and_then(Value::as_str) == Some("status-update") {
        (result.get("taskId"), result.get("status"))
    } else {
        (result.get("id"), result.get("status"))
    };
    let status = status?;
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

/// The task an A2A request names: `params.id` of the task methods, `params.message.taskId` of a
/// message that continues a task.
pub fn request_target(method: &str, raw: &[u8]) -> Option<std::sync::Arc<str>> {
    let v: Value = serde_json::from_slice(raw).ok()?;
    let params = v.get("params")?;
    let id = if is_message_method(method) {
        params.get("message")?.get("taskId")?
    } else {
        params.get("id")?
    };
    id.as_str().map(std::sync::Arc::from)
}

/// A method that sends a message (and may create or continue a task).
pub fn is_message_method(method: &str) -> bool {
    matches!(
        method,
        "SendMessage" | "SendStreamingMessage" | "message/send" | "message/stream"
    )
}

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
        let get = br#"{"jsonrpc":"2.0","id":1,"method":"GetTask","params":{"id":"t9"}}"#;
        assert_eq!(request_target("GetTask", get).as_deref(), Some("t9"));
        let resume = br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"taskId":"t8","parts":[]}}}"#;
        assert_eq!(request_target("SendMessage", resume).as_deref(), Some("t8"));
        let fresh =
            br#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"parts":[]}}}"#;
        assert_eq!(request_target("SendMessage", fresh), None);
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

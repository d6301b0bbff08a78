//! A2A's JSON-RPC method names (1.0 and 0.3), read by the inspector and by rpctap's own error
//! paths (`own`: an A2A request gets codes A2A does not use).

/// A2A 1.0 method names, then 0.3's.
const METHODS: &[&str] = &[
    "SendMessage",
    "SendStreamingMessage",
    "GetTask",
    "ListTasks",
    "CancelTask",
    "SubscribeToTask",
    "CreateTaskPushNotificationConfig",
    "GetTaskPushNotificationConfig",
    "ListTaskPushNotificationConfigs",
    "DeleteTaskPushNotificationConfig",
    "GetExtendedAgentCard",
    "message/send",
    "message/stream",
    "tasks/get",
    "tasks/cancel",
    "tasks/resubscribe",
    "tasks/pushNotificationConfig/set",
    "tasks/pushNotificationConfig/get",
    "tasks/pushNotificationConfig/list",
    "tasks/pushNotificationConfig/delete",
    "agent/getAuthenticatedExtendedCard",
];

/// A method that sends a message (and may create or continue a task).
pub fn is_message_method(method: &str) -> bool {
    matches!(
        method,
        "SendMessage" | "SendStreamingMessage" | "message/send" | "message/stream"
    )
}

/// The skill a message's params name, for rules that match one (`skill = "GLOB"`). A2A has no
/// field for it — a client sends a message to the agent, which picks the skill — so clients that
/// pick one name it in the message's metadata, as a `skill` key (the convention agents that
/// route by skill read; `skillId` and `skill_id` too). `None` when the message names none.
pub fn skill_of(params: &serde_json::Value) -> Option<&str> {
    let meta = params.get("message")?.get("metadata")?;
    ["skill", "skillId", "skill_id"]
        .iter()
        .find_map(|k| meta.get(*k)?.as_str())
}

/// The skill a request (`method`, its whole bytes `raw`) names, when it sends an A2A message:
/// its params read again, for a rule or filter that asks.
pub fn message_skill(method: &str, raw: &[u8]) -> Option<String> {
    if !is_message_method(method) {
        return None;
    }
    skill_of(&super::member(raw, "params")?).map(str::to_string)
}

/// An A2A method (either version's name).
pub fn is_method(method: &str) -> bool {
    METHODS.contains(&method)
}

/// A method answered with a stream of responses sharing the call's id.
pub fn is_stream_method(method: &str) -> bool {
    matches!(
        method,
        "SendStreamingMessage" | "SubscribeToTask" | "message/stream" | "tasks/resubscribe"
    )
}

/// A method only A2A has: 0.3's `tasks/get` and `tasks/cancel` are MCP's names too, so they
/// alone say nothing of the protocol.
pub fn is_a2a_only(method: &str) -> bool {
    is_method(method) && !matches!(method, "tasks/get" | "tasks/cancel")
}

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

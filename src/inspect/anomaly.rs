//! The anomaly codes: stable names, severities and what each means. Every code has one
//! severity: `error` (the protocol was broken), `warning` (something is likely wrong), `info`
//! (worth knowing, never failing `check` by default).

use crate::events::Severity;

/// Everything the inspector can flag. The string form is stable: logs, recordings, the
/// offline checker and tests use it. What each means is [`Code::help`] (one text, for the docs
/// here and for the reports that explain a rule).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    DuplicateId,
    UnmatchedResponse,
    IdTypeMismatch,
    MissingResponse,
    NotificationReply,
    InvalidBatchReply,
    InvalidEnvelope,
    ParseError,
    NullIdResponse,
    UnsafeId,
    DuplicateMember,
    HttpStatus,
    ToolError,
    NotInspected,
    McpEarlyRequest,
    McpSessionChanged,
    McpDirection,
    McpCapability,
    McpOutputSchema,
    McpInputSchema,
    McpUnknownTool,
    McpHeaderMismatch,
    McpSessionLost,
    McpProgress,
    McpCancelUnknown,
    McpLargeResult,
    McpAuth,
    McpRequestState,
    McpInputResponse,
    McpMeta,
    McpVersion,
    McpDeprecated,
    McpResultShape,
    McpUnaskedLog,
    McpRemoved,
    McpErrorCode,
    McpTaskUndeclared,
    McpTaskStatus,
    McpTaskPoll,
    McpTaskBinding,
    McpTaskUnfinished,
    McpToolOrder,
    McpToolDrift,
    A2aTaskState,
    A2aPart,
    A2aPushUrl,
    A2aCard,
    A2aVersion,
    A2aTaskId,
}

impl Code {
    pub const ALL: [Code; 49] = [
        Code::DuplicateId,
        Code::UnmatchedResponse,
        Code::IdTypeMismatch,
        Code::MissingResponse,
        Code::NotificationReply,
        Code::InvalidBatchReply,
        Code::InvalidEnvelope,
        Code::ParseError,
        Code::NullIdResponse,
        Code::UnsafeId,
        Code::DuplicateMember,
        Code::HttpStatus,
        Code::ToolError,
        Code::NotInspected,
        Code::McpEarlyRequest,
        Code::McpSessionChanged,
        Code::McpDirection,
        Code::McpCapability,
        Code::McpOutputSchema,
        Code::McpInputSchema,
        Code::McpUnknownTool,
        Code::McpHeaderMismatch,
        Code::McpSessionLost,
        Code::McpProgress,
        Code::McpCancelUnknown,
        Code::McpLargeResult,
        Code::McpAuth,
        Code::McpRequestState,
        Code::McpInputResponse,
        Code::McpMeta,
        Code::McpVersion,
        Code::McpDeprecated,
        Code::McpResultShape,
        Code::McpUnaskedLog,
        Code::McpRemoved,
        Code::McpErrorCode,
        Code::McpTaskUndeclared,
        Code::McpTaskStatus,
        Code::McpTaskPoll,
        Code::McpTaskBinding,
        Code::McpTaskUnfinished,
        Code::McpToolOrder,
        Code::McpToolDrift,
        Code::A2aTaskState,
        Code::A2aPart,
        Code::A2aPushUrl,
        Code::A2aCard,
        Code::A2aVersion,
        Code::A2aTaskId,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Code::DuplicateId => "DUPLICATE_ID",
            Code::UnmatchedResponse => "UNMATCHED_RESPONSE",
            Code::IdTypeMismatch => "ID_TYPE_MISMATCH",
            Code::MissingResponse => "MISSING_RESPONSE",
            Code::NotificationReply => "NOTIFICATION_REPLY",
            Code::InvalidBatchReply => "INVALID_BATCH_REPLY",
            Code::InvalidEnvelope => "INVALID_ENVELOPE",
            Code::ParseError => "PARSE_ERROR",
            Code::NullIdResponse => "NULL_ID_RESPONSE",
            Code::UnsafeId => "UNSAFE_ID",
            Code::DuplicateMember => "DUPLICATE_MEMBER",
            Code::HttpStatus => "HTTP_STATUS",
            Code::ToolError => "TOOL_ERROR",
            Code::NotInspected => "NOT_INSPECTED",
            Code::McpEarlyRequest => "MCP_EARLY_REQUEST",
            Code::McpSessionChanged => "MCP_SESSION_CHANGED",
            Code::McpDirection => "MCP_DIRECTION",
            Code::McpCapability => "MCP_CAPABILITY",
            Code::McpOutputSchema => "MCP_OUTPUT_SCHEMA",
            Code::McpInputSchema => "MCP_INPUT_SCHEMA",
            Code::McpUnknownTool => "MCP_UNKNOWN_TOOL",
            Code::McpHeaderMismatch => "MCP_HEADER_MISMATCH",
            Code::McpSessionLost => "MCP_SESSION_LOST",
            Code::McpProgress => "MCP_PROGRESS",
            Code::McpCancelUnknown => "MCP_CANCEL_UNKNOWN",
            Code::McpLargeResult => "MCP_LARGE_RESULT",
            Code::McpAuth => "MCP_AUTH",
            Code::McpRequestState => "MCP_REQUEST_STATE",
            Code::McpInputResponse => "MCP_INPUT_RESPONSE",
            Code::McpMeta => "MCP_META",
            Code::McpVersion => "MCP_VERSION",
            Code::McpDeprecated => "MCP_DEPRECATED",
            Code::McpResultShape => "MCP_RESULT_SHAPE",
            Code::McpUnaskedLog => "MCP_UNASKED_LOG",
            Code::McpRemoved => "MCP_REMOVED",
            Code::McpErrorCode => "MCP_ERROR_CODE",
            Code::McpTaskUndeclared => "MCP_TASK_UNDECLARED",
            Code::McpTaskStatus => "MCP_TASK_STATUS",
            Code::A2aTaskState => "A2A_TASK_STATE",
            Code::A2aPart => "A2A_PART",
            Code::A2aPushUrl => "A2A_PUSH_URL",
            Code::A2aCard => "A2A_CARD",
            Code::A2aTaskId => "A2A_TASK_ID",
            Code::A2aVersion => "A2A_VERSION",
            Code::McpTaskPoll => "MCP_TASK_POLL",
            Code::McpTaskBinding => "MCP_TASK_BINDING",
            Code::McpTaskUnfinished => "MCP_TASK_UNFINISHED",
            Code::McpToolOrder => "MCP_TOOL_ORDER",
            Code::McpToolDrift => "MCP_TOOL_DRIFT",
        }
    }

    /// What the code means, in one paragraph (the reports' rule help: SARIF, the web view).
    pub fn help(self) -> &'static str {
        match self {
            Code::DuplicateId => "A request reuses an id still pending in its scope and direction, or (in an MCP session) an id already used in that session.",
            Code::UnmatchedResponse => "A response whose id matches no pending call.",
            Code::IdTypeMismatch => "A response id that matches a pending call only when its JSON type is ignored.",
            Code::MissingResponse => "A call whose exchange or stream ended, or whose timeout passed, with no reply.",
            Code::NotificationReply => "A response to a notification, or a body in reply to a notification-only POST.",
            Code::InvalidBatchReply => "A batch answered by something other than an array.",
            Code::InvalidEnvelope => "Not a valid JSON-RPC request or response.",
            Code::ParseError => "A frame on a JSON-RPC exchange that is not valid JSON (or not UTF-8).",
            Code::NullIdResponse => "`id: null` on anything but a -32700/-32600 error.",
            Code::UnsafeId => "A numeric id with a fraction, or beyond ±(2^53−1).",
            Code::DuplicateMember => "A message with a member given twice (`method`, `id`, `params.name`…): read as the last one, as most servers' parsers do, but a parser that keeps the first reads another message.",
            Code::HttpStatus => "A JSON-RPC reply carried by a status other than 200, or a notification-only POST answered by other than 202/204.",
            Code::ToolError => "An MCP `tools/call` result with `isError: true`.",
            Code::NotInspected => "A frame larger than the inspection cap: forwarded, not inspected.",
            Code::McpEarlyRequest => "MCP: a request other than `initialize`/`ping` before the client sent `notifications/initialized`, in a session whose start rpctap saw.",
            Code::McpSessionChanged => "MCP: the server answered a request in one session with a different `Mcp-Session-Id`.",
            Code::McpDirection => "MCP: a request or notification only the other side may send (`initialize` from the server, `sampling/createMessage` from the client).",
            Code::McpCapability => "MCP: a request or notification that needs a capability the other side did not declare in the session's `initialize` exchange.",
            Code::McpOutputSchema => "MCP: a `tools/call` result whose `structuredContent` fails the tool's `outputSchema`, or lacks it when the tool declares one.",
            Code::McpInputSchema => "MCP: `tools/call` arguments that fail the tool's `inputSchema`.",
            Code::McpUnknownTool => "MCP: `tools/call` of a name absent from the session's complete `tools/list`.",
            Code::McpHeaderMismatch => "MCP: `Mcp-Method`/`Mcp-Name` disagree with the body, or `MCP-Protocol-Version` differs from the negotiated version (or is missing where that version requires it).",
            Code::McpSessionLost => "MCP: a `404` to a request carrying a session id rpctap saw created and not deleted.",
            Code::McpProgress => "MCP: a progress notification whose token no pending call carries, or whose `progress` does not increase.",
            Code::McpCancelUnknown => "MCP: `notifications/cancelled` for a request id never sent in the session.",
            Code::McpLargeResult => "MCP: a result larger than the large-result threshold.",
            Code::McpAuth => "MCP: a `401` without a `WWW-Authenticate` header naming `resource_metadata`.",
            Code::McpRequestState => "MCP 2026-07-28: a retry whose `requestState` differs from, or leaves out, the one its `input_required` round issued, or one that no round of the client issued.",
            Code::McpInputResponse => "MCP 2026-07-28: a retry's `inputResponses` keys differ from the `inputRequests` keys its round issued (one missing, or one not asked), or answer a round nobody issued.",
            Code::McpMeta => "MCP 2026-07-28: a request without the `_meta` keys every request must carry (`io.modelcontextprotocol/protocolVersion`, `…/clientCapabilities`).",
            Code::McpVersion => "MCP 2026-07-28: a request in a protocol version the server's `server/discover` did not list in `supportedVersions`.",
            Code::McpDeprecated => "MCP: a feature deprecated in the session's protocol version (roots, sampling and logging since 2026-07-28); the finding names the replacement.",
            Code::McpResultShape => "MCP 2026-07-28: a result without what the version requires of it — `resultType`, and on a complete result of a cacheable method its caching hints (`ttlMs`, `cacheScope`).",
            Code::McpUnaskedLog => "MCP 2026-07-28: a server's `notifications/message` for a request that did not ask for log messages (its `_meta` has no `io.modelcontextprotocol/logLevel`).",
            Code::McpRemoved => "MCP 2026-07-28: a method that revision removed (`initialize`, `ping`, `logging/setLevel`, `resources/subscribe`, `tasks/result`, `notifications/elicitation/complete`, …) sent in it.",
            Code::McpErrorCode => "MCP 2026-07-28: an error in that version's exchange with a code the revision renumbered (a resource not found answered `-32002`, which is `-32602` from 2026-07-28).",
            Code::McpTaskUndeclared => "MCP tasks: a task handle (`CreateTaskResult`) for a request that did not declare the tasks extension (2026-07-28) or ask for a task (2025-11-25), or for a method that has no tasks.",
            Code::A2aTaskId => "A2A: a call about one task answered with another task (a `GetTask`, `CancelTask`, `SubscribeToTask` or a message continuing a task).",
            Code::A2aPart => "A2A: a malformed part (not exactly one of text, raw, url, data; 0.3: a kind without its member), or a message or artifact without its id or parts.",
            Code::A2aPushUrl => "A2A: a push notification URL that is not https (the agent would send task updates and their token in clear).",
            Code::A2aVersion => "A2A: a method named as another version names it (1.0's under 0.3, which an absent A2A-Version means, or 0.3's under 1.0), or an agent answering a version its card lists no interface for.",
            Code::A2aCard => "A2A: an agent doing what its agent card says it does not (streaming, push notifications), or a message naming a skill the card does not declare.",
            Code::A2aTaskState => "A2A tasks: a state the task state machine does not allow (a task that changes after a terminal state — completed, failed, canceled, rejected — or a state unknown to it), or an event on a stream after its last one.",
            Code::McpTaskStatus => "MCP tasks: a status the task state machine does not allow (a terminal task that changes, a status unknown to it) or a task whose payload does not match its status.",
            Code::McpTaskPoll => "MCP tasks: the client polled faster than the task's `pollIntervalMs`, or after the task ended or its TTL ran out.",
            Code::McpTaskBinding => "MCP tasks: one client's task polled, updated or cancelled by another, and answered.",
            Code::McpTaskUnfinished => "MCP tasks: a task that reached no terminal status before its session ended or its TTL ran out.",
            Code::McpToolOrder => "MCP 2026-07-28: a complete `tools/list` of the same tools as the last one, in another order (servers SHOULD list tools deterministically, for clients' and prompt caches).",
            Code::McpToolDrift => "MCP: a complete `tools/list` that differs from the server label's trusted baseline — an error when a safety annotation got less safe or a schema changed, else a warning.",
        }
    }

    /// The specification section the rule comes from; `None` for rpctap's own judgements (a
    /// size threshold, a frame not inspected, a drift from the user's baseline).
    pub fn spec(self) -> Option<&'static str> {
        match self {
            Code::DuplicateId => Some("https://www.jsonrpc.org/specification#request_object"),
            Code::UnmatchedResponse => Some("https://www.jsonrpc.org/specification#response_object"),
            Code::IdTypeMismatch => Some("https://www.jsonrpc.org/specification#response_object"),
            Code::MissingResponse => Some("https://www.jsonrpc.org/specification#request_object"),
            Code::NotificationReply => Some("https://www.jsonrpc.org/specification#notification"),
            Code::InvalidBatchReply => Some("https://www.jsonrpc.org/specification#batch"),
            Code::InvalidEnvelope => Some("https://www.jsonrpc.org/specification#request_object"),
            Code::ParseError => Some("https://www.jsonrpc.org/specification#error_object"),
            Code::NullIdResponse => Some("https://www.jsonrpc.org/specification#response_object"),
            Code::UnsafeId => Some("https://www.jsonrpc.org/specification#request_object"),
            Code::DuplicateMember => Some("https://www.rfc-editor.org/rfc/rfc8259#section-4"),
            Code::HttpStatus => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#sending-messages-to-the-server"),
            Code::ToolError => Some("https://modelcontextprotocol.io/specification/2025-11-25/server/tools#error-handling"),
            Code::NotInspected => None,
            Code::McpEarlyRequest => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/lifecycle#initialization"),
            Code::McpSessionChanged => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#session-management"),
            Code::McpDirection => Some("https://modelcontextprotocol.io/specification/2025-11-25/schema"),
            Code::McpCapability => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/lifecycle#capability-negotiation"),
            Code::McpOutputSchema => Some("https://modelcontextprotocol.io/specification/2025-11-25/server/tools#output-schema"),
            Code::McpInputSchema => Some("https://modelcontextprotocol.io/specification/2025-11-25/server/tools#tool"),
            Code::McpUnknownTool => Some("https://modelcontextprotocol.io/specification/2025-11-25/server/tools#error-handling"),
            Code::McpHeaderMismatch => Some("https://modelcontextprotocol.io/specification/2026-07-28/basic/transports/streamable-http"),
            Code::McpSessionLost => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/transports#session-management"),
            Code::McpProgress => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/progress"),
            Code::McpCancelUnknown => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/utilities/cancellation"),
            Code::McpLargeResult => None,
            Code::McpAuth => Some("https://modelcontextprotocol.io/specification/2025-11-25/basic/authorization#authorization-server-location"),
            Code::McpRequestState => Some("https://modelcontextprotocol.io/specification/2026-07-28/basic/patterns/mrtr"),
            Code::McpInputResponse => Some("https://modelcontextprotocol.io/specification/2026-07-28/basic/patterns/mrtr"),
            Code::McpMeta => Some("https://modelcontextprotocol.io/specification/2026-07-28/basic"),
            Code::McpVersion => Some("https://modelcontextprotocol.io/specification/2026-07-28/basic/versioning"),
            Code::McpDeprecated => Some("https://modelcontextprotocol.io/specification/2026-07-28/deprecated"),
            Code::McpResultShape => Some("https://modelcontextprotocol.io/specification/2026-07-28/basic"),
            Code::McpUnaskedLog => Some("https://modelcontextprotocol.io/specification/2026-07-28/changelog"),
            Code::McpRemoved => Some("https://modelcontextprotocol.io/specification/2026-07-28/changelog"),
            Code::McpErrorCode => Some("https://modelcontextprotocol.io/specification/2026-07-28/changelog"),
            Code::McpTaskUndeclared => Some("https://github.com/modelcontextprotocol/ext-tasks/blob/main/specification/2026-07-28/tasks.md"),
            Code::McpTaskStatus => Some("https://github.com/modelcontextprotocol/ext-tasks/blob/main/specification/2026-07-28/tasks.md"),
            Code::A2aTaskState
            | Code::A2aPart
            | Code::A2aPushUrl
            | Code::A2aCard
            | Code::A2aTaskId
            | Code::A2aVersion => {
                Some("https://a2a-protocol.org/latest/specification/")
            }
            Code::McpTaskPoll => Some("https://github.com/modelcontextprotocol/ext-tasks/blob/main/specification/2026-07-28/tasks.md"),
            Code::McpTaskBinding => Some("https://github.com/modelcontextprotocol/ext-tasks/blob/main/specification/2026-07-28/tasks.md"),
            Code::McpTaskUnfinished => Some("https://github.com/modelcontextprotocol/ext-tasks/blob/main/specification/2026-07-28/tasks.md"),
            Code::McpToolOrder => Some("https://modelcontextprotocol.io/specification/2026-07-28/server/tools"),
            Code::McpToolDrift => None,
        }
    }

    pub fn severity(self) -> Severity {
        match self {
            Code::DuplicateId
            | Code::UnmatchedResponse
            | Code::IdTypeMismatch
            | Code::MissingResponse
            | Code::NotificationReply
            | Code::InvalidBatchReply
            | Code::InvalidEnvelope
            | Code::ParseError
            | Code::McpCapability
            | Code::McpDirection
            | Code::McpOutputSchema
            | Code::McpHeaderMismatch
            | Code::McpRequestState
            | Code::McpMeta
            | Code::McpVersion
            | Code::McpResultShape
            | Code::McpUnaskedLog
            | Code::McpRemoved
            | Code::McpTaskUndeclared
            | Code::McpTaskStatus
            | Code::A2aTaskState
            | Code::A2aPart
            | Code::A2aTaskId
            | Code::McpTaskBinding
            // At its worst; a drift that is no safety or schema change is flagged a warning.
            | Code::McpToolDrift => Severity::Error,
            Code::NullIdResponse
            | Code::UnsafeId
            | Code::DuplicateMember
            | Code::HttpStatus
            | Code::McpInputResponse
            | Code::McpEarlyRequest
            | Code::McpSessionChanged
            | Code::McpInputSchema
            | Code::McpUnknownTool
            | Code::McpSessionLost
            | Code::McpProgress
            | Code::McpCancelUnknown
            | Code::McpLargeResult
            | Code::McpAuth
            | Code::McpErrorCode
            | Code::McpTaskPoll
            | Code::A2aPushUrl
            | Code::A2aCard
            | Code::A2aVersion
            | Code::McpTaskUnfinished => Severity::Warning,
            // What a tool said of itself, what rpctap did not read, and a feature still working
            // but on its way out: shown and counted, never failing `check` by default.
            Code::ToolError | Code::NotInspected | Code::McpDeprecated | Code::McpToolOrder => {
                Severity::Info
            }
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

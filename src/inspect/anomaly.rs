//! The anomaly codes: stable names, severities and what each means.

use crate::events::Severity;

/// Everything the inspector can flag. The string form is stable: logs, recordings, the
/// offline checker and tests use it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Code {
    /// A request reuses an id still pending in its scope and direction, or (in an MCP
    /// session) an id already used in that session.
    DuplicateId,
    /// A response whose id matches no pending call.
    UnmatchedResponse,
    /// A response id that matches a pending call only when its JSON type is ignored.
    IdTypeMismatch,
    /// A call whose exchange or stream ended, or whose timeout passed, with no reply.
    MissingResponse,
    /// A response to a notification, or a body in reply to a notification-only POST.
    NotificationReply,
    /// A batch answered by something other than an array.
    InvalidBatchReply,
    /// Not a valid JSON-RPC request or response.
    InvalidEnvelope,
    /// A frame on a JSON-RPC exchange that is not valid JSON (or not UTF-8).
    ParseError,
    /// `id: null` on anything but a -32700/-32600 error.
    NullIdResponse,
    /// A numeric id with a fraction, or beyond ±(2^53−1).
    UnsafeId,
    /// A JSON-RPC reply carried by a status other than 200, or a notification-only POST
    /// answered by other than 202/204.
    HttpStatus,
    /// An MCP `tools/call` result with `isError: true`.
    ToolError,
    /// A frame larger than the inspection cap: forwarded, not inspected.
    NotInspected,
    /// MCP: a request other than `initialize`/`ping` before the client sent
    /// `notifications/initialized`, in a session whose start rpctap saw.
    McpEarlyRequest,
    /// MCP: the server answered a request in one session with a different `Mcp-Session-Id`.
    McpSessionChanged,
}

impl Code {
    pub const ALL: [Code; 15] = [
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
        Code::HttpStatus,
        Code::ToolError,
        Code::NotInspected,
        Code::McpEarlyRequest,
        Code::McpSessionChanged,
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
            Code::HttpStatus => "HTTP_STATUS",
            Code::ToolError => "TOOL_ERROR",
            Code::NotInspected => "NOT_INSPECTED",
            Code::McpEarlyRequest => "MCP_EARLY_REQUEST",
            Code::McpSessionChanged => "MCP_SESSION_CHANGED",
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
            | Code::ParseError => Severity::Error,
            Code::NullIdResponse
            | Code::UnsafeId
            | Code::HttpStatus
            | Code::ToolError
            | Code::NotInspected
            | Code::McpEarlyRequest
            | Code::McpSessionChanged => Severity::Warning,
        }
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

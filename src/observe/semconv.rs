//! The OpenTelemetry semantic conventions' reading of a call (the MCP conventions of
//! semantic-conventions-genai, `docs/gen-ai/mcp.md`, and the JSON-RPC ones): its `error.type`,
//! and the series of the MCP operation-duration metrics it counts in. One reading, for the
//! spans and metrics exported over OTLP (`otel`) and their mirror on `/metrics` (`metrics`), so
//! the three never name a call differently.

use crate::events::{CallEvent, Direction, Outcome};
use std::borrow::Cow;
use std::sync::Arc;

/// The conventions' buckets for MCP durations, in seconds.
pub const BUCKETS: [f64; 14] = [
    0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];

/// Which MCP operation-duration histogram a call counts in. rpctap reports what the MCP server
/// it fronts would: a client's request is an operation the server received
/// (`mcp.server.operation.duration`); a server's own request to the client (sampling,
/// elicitation, roots) one the server sent (`mcp.client.operation.duration`, "observed on
/// the sender").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Instrument {
    ServerOperation,
    ClientOperation,
}

impl Instrument {
    pub const ALL: [Instrument; 2] = [Instrument::ServerOperation, Instrument::ClientOperation];

    /// The OpenTelemetry name.
    pub fn name(self) -> &'static str {
        match self {
            Instrument::ServerOperation => "mcp.server.operation.duration",
            Instrument::ClientOperation => "mcp.client.operation.duration",
        }
    }

    /// The conventions' description.
    pub fn description(self) -> &'static str {
        match self {
            Instrument::ServerOperation => "MCP request or notification duration as observed on the receiver from the time it was received until the result or ack is sent.",
            Instrument::ClientOperation => "The duration of the MCP request or notification as observed on the sender from the time it was sent until the response or ack is received.",
        }
    }
}

/// A series of an MCP duration histogram: its attributes (each `None` when it does not apply).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Series {
    /// `mcp.method.name`.
    pub method: Arc<str>,
    /// `gen_ai.tool.name` (with `gen_ai.operation.name` = `execute_tool`).
    pub tool: Option<Arc<str>>,
    /// `gen_ai.prompt.name`.
    pub prompt: Option<Arc<str>>,
    /// `error.type`.
    pub error_type: Option<Arc<str>>,
    /// `rpc.response.status_code`: the JSON-RPC error code.
    pub status_code: Option<Arc<str>>,
}

/// `error.type` of a call that failed (`None` when it did not): the JSON-RPC error code as a
/// string, `tool_error` for a tool result with `isError`, else a low-cardinality word for what
/// rpctap saw instead of a reply.
pub fn error_type(c: &CallEvent) -> Option<Cow<'static, str>> {
    Some(match &c.outcome {
        Outcome::Result if c.anomalies.contains(&"TOOL_ERROR") => "tool_error".into(),
        Outcome::Result | Outcome::InputRequired => return None,
        Outcome::Error { code, .. } => code.to_string().into(),
        Outcome::Refused { .. } => "rate_limited".into(),
        Outcome::Rejected { status } => format!("http_{status}").into(),
        Outcome::Missing { .. } => "missing_response".into(),
        Outcome::Cancelled { .. } => "cancelled".into(),
        Outcome::Abandoned { .. } => "abandoned".into(),
    })
}

/// The MCP duration a call counts in: its histogram, its series and its duration in seconds
/// (`None` for a call that is not MCP's, or that has no duration: refused, never answered).
pub fn operation(c: &CallEvent) -> Option<(Instrument, Series, f64)> {
    if !crate::rpc::is_mcp_method(&c.method)
        || matches!(
            c.outcome,
            Outcome::Refused { .. } | Outcome::Missing { .. } | Outcome::Abandoned { .. }
        )
    {
        return None;
    }
    let secs = c.latency_us? as f64 / 1e6;
    let instrument = match c.direction {
        Direction::ClientToServer => Instrument::ServerOperation,
        Direction::ServerToClient => Instrument::ClientOperation,
    };
    let (tool, prompt) = match &*c.method {
        "tools/call" => (c.target.clone(), None),
        "prompts/get" => (None, c.target.clone()),
        _ => (None, None),
    };
    let status_code = match &c.outcome {
        Outcome::Error { code, .. } => Some(Arc::from(code.to_string())),
        _ => None,
    };
    Some((
        instrument,
        Series {
            method: c.method.clone(),
            tool,
            prompt,
            error_type: error_type(c).map(|e| Arc::from(&*e)),
            status_code,
        },
        secs,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rpc::Id;

    fn call(method: &str, target: Option<&str>, outcome: Outcome, dir: Direction) -> CallEvent {
        let mut c = CallEvent::for_test(method, Id::Num("1".into()), outcome, 250_000);
        c.target = target.map(Into::into);
        c.direction = dir;
        c
    }

    #[test]
    fn a_call_counts_where_the_conventions_put_it() {
        let c = call(
            "tools/call",
            Some("add"),
            Outcome::Error {
                code: -32602,
                message: "bad".into(),
            },
            Direction::ClientToServer,
        );
        let (i, s, secs) = operation(&c).unwrap();
        assert_eq!(i.name(), "mcp.server.operation.duration");
        assert_eq!(secs, 0.25);
        assert_eq!(s.tool.as_deref(), Some("add"));
        assert_eq!(s.error_type.as_deref(), Some("-32602"));
        assert_eq!(s.status_code.as_deref(), Some("-32602"));
        let asked = call(
            "sampling/createMessage",
            None,
            Outcome::Result,
            Direction::ServerToClient,
        );
        let (i, s, _) = operation(&asked).unwrap();
        assert_eq!(i.name(), "mcp.client.operation.duration");
        assert_eq!((s.error_type, s.tool), (None, None));
        assert!(operation(&call(
            "eth_call",
            None,
            Outcome::Result,
            Direction::ClientToServer
        ))
        .is_none());
        let refused = Outcome::Refused { rule: "r".into() };
        assert!(operation(&call(
            "tools/list",
            None,
            refused,
            Direction::ClientToServer
        ))
        .is_none());
    }
}

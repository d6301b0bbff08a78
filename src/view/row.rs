//! The rows of the call list, and what a live event or a recording line becomes before the
//! state applies it.

use super::{Text, FROM_CALL, SCOPE_WIDTH};
use crate::events::{Direction, Outcome};

/// A row's outcome, for display.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowOutcome {
    Pending,
    Notification,
    Result,
    /// A multi round-trip call's round that ended asking for input.
    InputRequired,
    Error(i64),
    Refused(String),
    Rejected(u16),
    Missing(String),
    /// Cancelled by the client (`notifications/cancelled`), no reply.
    Cancelled(String),
    /// The client went away before the reply.
    Abandoned(String),
    /// An `http` row: an authorization exchange around an MCP endpoint, and its status.
    Http(u16),
}

impl From<&Outcome> for RowOutcome {
    fn from(o: &Outcome) -> Self {
        match o {
            Outcome::Result => RowOutcome::Result,
            Outcome::InputRequired => RowOutcome::InputRequired,
            Outcome::Error { code, .. } => RowOutcome::Error(*code),
            Outcome::Refused { rule } => RowOutcome::Refused(rule.clone()),
            Outcome::Rejected { status } => RowOutcome::Rejected(*status),
            Outcome::Missing { reason } => RowOutcome::Missing(reason.clone()),
            Outcome::Cancelled { reason } => RowOutcome::Cancelled(reason.clone()),
            Outcome::Abandoned { reason } => RowOutcome::Abandoned(reason.clone()),
        }
    }
}

impl RowOutcome {
    pub fn label(&self) -> String {
        match self {
            RowOutcome::Pending => "pending".into(),
            RowOutcome::Notification => "notif".into(),
            RowOutcome::Result => "result".into(),
            RowOutcome::InputRequired => "input".into(),
            RowOutcome::Error(c) => format!("error {c}"),
            RowOutcome::Refused(_) => "refused".into(),
            RowOutcome::Rejected(s) => format!("HTTP {s}"),
            RowOutcome::Missing(_) => "missing".into(),
            RowOutcome::Cancelled(_) => "cancelled".into(),
            RowOutcome::Abandoned(_) => "abandoned".into(),
            RowOutcome::Http(s) => format!("HTTP {s}"),
        }
    }
    pub fn is_error(&self) -> bool {
        matches!(
            self,
            RowOutcome::Error(_)
                | RowOutcome::Refused(_)
                | RowOutcome::Rejected(_)
                | RowOutcome::Missing(_)
        ) || matches!(self, RowOutcome::Http(s) if *s >= 400)
    }
}

/// An exchange as the state keys it: its source (0 for the one source of `proxy`, `view` or
/// `attach`; under `watch`, 1 + its server's index) and its number in that source's process —
/// two processes' `exchange:1` are two keys.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ex {
    pub src: u32,
    pub n: u64,
}

/// One row of the call list.
#[derive(Clone, Debug)]
pub struct Row {
    pub seq: u64,
    pub ts_ns: u64,
    pub exchange: Ex,
    pub scope: Text,
    /// `c→s` or `s→c`.
    pub direction: Direction,
    pub method: Text,
    pub target: Option<Text>,
    /// Exact id text, or empty for notifications.
    pub id: Text,
    pub outcome: RowOutcome,
    pub latency_us: Option<u64>,
    pub size: usize,
    pub anomalies: Vec<String>,
    pub anomaly_text: Vec<String>,
    /// What `[[fault]]` rules did to this call (`RULE: action — detail`).
    pub injected: Vec<String>,
    pub request: Option<Text>,
    pub reply: Option<Text>,
    /// Other messages of the same SSE stream (progress notifications…), in order.
    pub stream: Vec<Text>,
    pub transport: &'static str,
    /// The server's label under `watch` (empty with one source).
    pub server: Text,
    /// An MCP multi round-trip call: the `input_required` rounds before this final one, oldest
    /// first (their rows are folded into this one).
    pub rounds: Option<Box<Rounds>>,
    /// This row is a round folded into a later row of its call: not listed.
    pub folded: bool,
    /// An MCP task this call created: its status as the last poll or its end showed it, and
    /// its polls (their rows folded into this one).
    pub task: Option<Box<TaskRow>>,
    /// What its result costs an agent's context (`result_tokens`): counted the first time it
    /// is shown, by the renderer, never on the proxy's path nor for rows no one looks at.
    pub tokens: std::sync::OnceLock<Option<u32>>,
    /// An A2A call's conversation, as the sessions view keys it (`a2a:CONTEXT`): known when
    /// the call ends (the first message of a conversation names none, its reply does).
    pub conversation: Option<Text>,
}

/// The task a call created, as its row shows it.
#[derive(Clone, Debug, Default)]
pub struct TaskRow {
    pub id: Text,
    pub status: Text,
    pub polls: Vec<Poll>,
}

/// A `tasks/get`, `tasks/update`, `tasks/cancel` or `tasks/result` call folded under its task.
#[derive(Clone, Debug)]
pub struct Poll {
    pub method: Text,
    pub id: Text,
    pub status: Option<Text>,
    pub latency_us: Option<u64>,
    pub anomalies: Vec<String>,
    pub reply: Option<Text>,
}

/// The earlier rounds of a multi round-trip call, and when its first request started.
#[derive(Clone, Debug, Default)]
pub struct Rounds {
    pub started_ns: u64,
    pub list: Vec<Round>,
    /// The server's time in the earlier rounds, summed.
    pub earlier_us: u64,
    /// The server's time in the row's own (last) round.
    pub own_us: Option<u64>,
}

impl Rounds {
    /// The server's time over every round (the rest of the row's latency is the client's).
    pub fn server_us(&self) -> u64 {
        self.earlier_us + self.own_us.unwrap_or(0)
    }
}

/// One `input_required` round: its id, its request, the reply that asked for input, and the
/// server's time in it.
#[derive(Clone, Debug)]
pub struct Round {
    pub id: Text,
    pub request: Option<Text>,
    pub reply: Option<Text>,
    pub latency_us: Option<u64>,
}

/// The session or stateless client a scope's text belongs to (`stateless:CLIENT#N` →
/// `stateless:CLIENT`).
pub fn scope_group(scope: &str) -> &str {
    if scope.starts_with(crate::events::STATELESS_PREFIX) {
        if let Some((g, _)) = scope.rsplit_once('#') {
            return g;
        }
    }
    scope
}

impl Row {
    pub fn display_method(&self) -> String {
        match &self.target {
            Some(t) => format!("{} {}", self.method, t),
            None => self.method.to_string(),
        }
    }
    /// The scope as the list shows it: a session id whole when it fits the column
    /// (`stdio-4413`), else its first characters and `…`; `#exchange` without a session.
    pub fn scope_short(&self) -> String {
        // Under `watch` the column names the server: each shim is one session.
        if !self.server.is_empty() {
            return match self.server.chars().count() <= SCOPE_WIDTH {
                true => self.server.to_string(),
                false => self
                    .server
                    .chars()
                    .take(SCOPE_WIDTH - 1)
                    .chain(['…'])
                    .collect(),
            };
        }
        let session = self.scope.strip_prefix("session:").or_else(|| {
            // A stateless client: its name.
            scope_group(&self.scope).strip_prefix(crate::events::STATELESS_PREFIX)
        });
        match session {
            Some(s) if s.chars().count() <= SCOPE_WIDTH => s.to_string(),
            Some(s) => s.chars().take(SCOPE_WIDTH - 1).chain(['…']).collect(),
            None => format!("#{}", self.exchange.n),
        }
    }
    /// The tokens of its reply's `result` (compact JSON, as `rpctap cost` counts it) under
    /// o200k_base; `None` without a result the dashboard still holds.
    pub fn result_tokens(&self) -> Option<u32> {
        if let Some(n) = self.tokens.get() {
            return *n;
        }
        // Not counted (nor remembered) before its reply came.
        let reply = self.reply.as_deref()?;
        let n = crate::rpc::member(reply.as_bytes(), "result").map(|r| {
            let n = crate::tokens::Tokenizer::default().count_json(&r).tokens;
            u32::try_from(n).unwrap_or(u32::MAX)
        });
        *self.tokens.get_or_init(|| n)
    }

    /// The row was made from its call's end alone: its messages were never seen here.
    pub fn messages_unseen(&self) -> bool {
        self.transport == FROM_CALL
    }
    pub(super) fn detail_bytes(&self) -> usize {
        self.request.as_ref().map_or(0, |t| t.len())
            + self.reply.as_ref().map_or(0, |t| t.len())
            + self.stream.iter().map(|t| t.len()).sum::<usize>()
            + self.rounds.as_ref().map_or(0, |r| {
                r.list
                    .iter()
                    .map(|x| {
                        x.request.as_ref().map_or(0, |t| t.len())
                            + x.reply.as_ref().map_or(0, |t| t.len())
                    })
                    .sum()
            })
            + self.task.as_ref().map_or(0, |t| {
                t.polls
                    .iter()
                    .map(|p| p.reply.as_ref().map_or(0, |t| t.len()))
                    .sum()
            })
    }
}

/// The HTTP side of an exchange, for the detail pane.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HttpMeta {
    pub method: String,
    pub path: String,
    /// The request's `Mcp-Session-Id` (re-sending a call sends it again).
    pub session: Option<String>,
    /// The request's `MCP-Protocol-Version` (sent again too).
    pub protocol_version: Option<String>,
    pub status: Option<u16>,
    pub content_type: Option<String>,
    /// Both heads' headers, secrets redacted (kept for the newest exchanges only).
    pub request_headers: Vec<(String, String)>,
    pub response_headers: Vec<(String, String)>,
}

/// A transport's name as the dashboard shows it.
pub fn transport_label(t: crate::events::Transport) -> &'static str {
    use crate::events::Transport::*;
    match t {
        Json => "json",
        Sse | LegacySse => "sse",
        Stdio => "stdio",
        Ws => "ws",
    }
}

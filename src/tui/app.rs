//! The dashboard's state: plain data, updated by events and keys, rendered by `ui`.
//!
//! It keeps the newest `max_rows` calls (one row per JSON-RPC call or notification, each batch
//! member and each message of an SSE stream its own row) and at most `max_detail_bytes` of
//! message text for the detail pane: older rows keep their summary and lose their text first.

use crate::events::Direction;
use crate::events::{Event, Outcome};
use crate::rpc::Kind;
use std::collections::VecDeque;
use std::sync::Arc;

/// The state's maps hash with foldhash: they are keyed by short strings and exchange numbers
/// and touched several times per call, where SipHash's DoS resistance buys nothing (every map
/// here is bounded).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;

/// Text the state shares between rows, maps and the detail pane: cloning it is a reference
/// count, not a copy (a call's scope, id and method appear in several places).
pub type Text = Arc<str>;

/// A row's outcome, for display.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RowOutcome {
    Pending,
    Notification,
    Result,
    Error(i64),
    Refused(String),
    Rejected(u16),
    Missing(String),
    /// An `http` row: an authorization exchange around an MCP endpoint, and its status.
    Http(u16),
}

impl From<&Outcome> for RowOutcome {
    fn from(o: &Outcome) -> Self {
        match o {
            Outcome::Result => RowOutcome::Result,
            Outcome::Error { code, .. } => RowOutcome::Error(*code),
            Outcome::Refused { rule } => RowOutcome::Refused(rule.clone()),
            Outcome::Rejected { status } => RowOutcome::Rejected(*status),
            Outcome::Missing { reason } => RowOutcome::Missing(reason.clone()),
        }
    }
}

impl RowOutcome {
    pub fn label(&self) -> String {
        match self {
            RowOutcome::Pending => "pending".into(),
            RowOutcome::Notification => "notif".into(),
            RowOutcome::Result => "result".into(),
            RowOutcome::Error(c) => format!("error {c}"),
            RowOutcome::Refused(_) => "refused".into(),
            RowOutcome::Rejected(s) => format!("HTTP {s}"),
            RowOutcome::Missing(_) => "missing".into(),
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

/// One row of the call list.
#[derive(Clone, Debug)]
pub struct Row {
    pub seq: u64,
    pub ts_ns: u64,
    pub exchange: u64,
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
    pub request: Option<Text>,
    pub reply: Option<Text>,
    /// Other messages of the same SSE stream (progress notifications…), in order.
    pub stream: Vec<Text>,
    pub transport: &'static str,
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
        match self.scope.strip_prefix("session:") {
            Some(s) if s.chars().count() <= SCOPE_WIDTH => s.to_string(),
            Some(s) => s.chars().take(SCOPE_WIDTH - 1).chain(['…']).collect(),
            None => format!("#{}", self.exchange),
        }
    }
    /// The row was made from its call's end alone: its messages were never seen here.
    pub fn messages_unseen(&self) -> bool {
        self.transport == FROM_CALL
    }
    fn detail_bytes(&self) -> usize {
        self.request.as_ref().map_or(0, |t| t.len())
            + self.reply.as_ref().map_or(0, |t| t.len())
            + self.stream.iter().map(|t| t.len()).sum::<usize>()
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
}

/// The tabs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum View {
    Calls,
    Anomalies,
    Methods,
    Sessions,
}

impl View {
    pub const ALL: [View; 4] = [View::Calls, View::Anomalies, View::Methods, View::Sessions];
    pub fn title(self) -> &'static str {
        match self {
            View::Calls => "Calls",
            View::Anomalies => "Anomalies",
            View::Methods => "Methods",
            View::Sessions => "Sessions",
        }
    }
    fn next(self) -> View {
        match self {
            View::Calls => View::Anomalies,
            View::Anomalies => View::Methods,
            View::Methods => View::Sessions,
            View::Sessions => View::Calls,
        }
    }
}

/// What a key asks the event loop to do (I/O stays out of the state).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    None,
    Quit,
    /// Copy this text to the clipboard (OSC 52) and save it to a file; `what` names it for
    /// the status line (`curl`, …).
    Copy {
        text: String,
        what: &'static str,
    },
    /// Write this exchange document to a file.
    Export(String),
    /// Re-send this request body to the upstream (proxy mode).
    Resend {
        path: String,
        body: String,
    },
}

#[derive(Clone, Debug, Default)]
pub struct MethodStats {
    pub count: u64,
    pub errors: u64,
    pub latencies: Vec<u64>,
}

#[derive(Clone, Debug, Default)]
pub struct SessionStats {
    pub calls: u64,
    pub errors: u64,
    pub anomalies: u64,
    pub last_ns: u64,
}

/// The dashboard's state.
#[derive(Debug)]
pub struct App {
    pub title: String,
    pub listen: String,
    pub upstream: String,
    /// `r` works only when rpctap proxies (not when viewing a recording).
    pub can_resend: bool,
    pub started_ns: u64,
    pub now_ns: u64,
    pub rows: VecDeque<Row>,
    pub max_rows: usize,
    pub max_detail_bytes: usize,
    detail_bytes: usize,
    next_seq: u64,
    /// (scope, direction of the request, id) → seq of the pending row.
    /// Duplicated ids queue up in order.
    open: HashMap<(Text, Direction, Text), VecDeque<u64>>,
    /// exchange → seqs of its call rows (to attach stream messages).
    by_exchange: HashMap<u64, Vec<u64>>,
    /// The newest messages applied: (exchange, direction, batch index, the row each went to).
    /// The inspector publishes a message's findings right after it, so an anomaly about a
    /// frame is pinned on the row of the frame it names.
    recent: VecDeque<(u64, Direction, Option<u32>, Option<u64>)>,
    /// Calls that ended (an outcome came), since the start; the list's rows also hold
    /// notifications, counted in `notifications_total`.
    pub calls_total: u64,
    pub notifications_total: u64,
    pub errors_total: u64,
    pub anomalies_total: u64,
    /// Calls ended per second, newest last (60 s).
    pub per_second: VecDeque<u64>,
    current_second: u64,
    /// Recent latencies (µs) for the percentiles.
    pub recent_latencies: VecDeque<u64>,
    /// Per method; at most `max_rows` methods (the least used go first).
    pub methods: HashMap<Text, MethodStats>,
    /// Per MCP session; at most `max_rows` (the least recently seen go first).
    pub sessions: HashMap<Text, SessionStats>,
    /// All traffic without a session, together.
    pub no_session: SessionStats,
    pub anomaly_rows: VecDeque<(u64, String, String, String)>,
    /// exchange → its HTTP request line and status (dropped with the exchange's rows).
    pub http: HashMap<u64, HttpMeta>,
    pub dropped: u64,
    /// 1 when every exchange is shown; k when the dashboard shows one exchange in k (the
    /// counters then count each call shown k times).
    pub sample: u64,
    pub view: View,
    /// Index into the filtered list of the current view.
    pub selected: usize,
    pub follow: bool,
    pub detail: bool,
    pub detail_scroll: u16,
    pub help: bool,
    pub filter: String,
    pub editing_filter: bool,
    pub filter_input: String,
    /// A message for the status line: set through `say`, it clears itself `STATUS_FOR` later;
    /// set directly (a standing hint), it stays.
    pub status: String,
    status_at: Option<u64>,
    pub no_color: bool,
    pub page: usize,
}

const SSE_STREAM_KEEP: usize = 64;
const RECENT_KEEP: usize = 64;
/// The transport of a row made from a call whose messages were not seen.
const FROM_CALL: &str = "-";
/// The scope column's width.
pub const SCOPE_WIDTH: usize = 10;
/// How long a status message stays.
const STATUS_FOR: u64 = 5_000_000_000;
const LATENCY_WINDOW: usize = 10_000;

impl App {
    pub fn new(title: &str, listen: &str, upstream: &str, max_rows: usize, now_ns: u64) -> Self {
        App {
            title: title.to_string(),
            listen: listen.to_string(),
            upstream: upstream.to_string(),
            can_resend: false,
            started_ns: now_ns,
            now_ns,
            rows: VecDeque::new(),
            max_rows: max_rows.max(1),
            max_detail_bytes: 64 << 20,
            detail_bytes: 0,
            next_seq: 0,
            open: HashMap::default(),
            by_exchange: HashMap::default(),
            recent: VecDeque::new(),
            calls_total: 0,
            notifications_total: 0,
            errors_total: 0,
            anomalies_total: 0,
            per_second: VecDeque::from(vec![0; 60]),
            current_second: now_ns / 1_000_000_000,
            recent_latencies: VecDeque::new(),
            methods: HashMap::default(),
            sessions: HashMap::default(),
            no_session: SessionStats::default(),
            anomaly_rows: VecDeque::new(),
            http: HashMap::default(),
            dropped: 0,
            sample: 1,
            view: View::Calls,
            selected: 0,
            follow: true,
            detail: false,
            detail_scroll: 0,
            help: false,
            filter: String::new(),
            editing_filter: false,
            filter_input: String::new(),
            status: String::new(),
            status_at: None,
            no_color: false,
            page: 10,
        }
    }

    fn row_mut(&mut self, seq: u64) -> Option<&mut Row> {
        let first = self.rows.front()?.seq;
        let i = seq.checked_sub(first)? as usize;
        self.rows.get_mut(i)
    }

    pub fn row(&self, seq: u64) -> Option<&Row> {
        let first = self.rows.front()?.seq;
        let i = seq.checked_sub(first)? as usize;
        self.rows.get(i)
    }

    /// Shows a message in the status line for a few seconds.
    pub fn say(&mut self, msg: impl Into<String>) {
        self.status = msg.into();
        self.status_at = Some(self.now_ns);
    }

    /// Advances the clock (the per-second buckets roll, an old status message goes).
    pub fn tick(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        if let Some(at) = self.status_at {
            if now_ns.saturating_sub(at) >= STATUS_FOR {
                self.status.clear();
                self.status_at = None;
            }
        }
        let sec = now_ns / 1_000_000_000;
        while self.current_second < sec {
            self.current_second += 1;
            self.per_second.push_back(0);
            if self.per_second.len() > 60 {
                self.per_second.pop_front();
            }
            if sec - self.current_second > 60 {
                self.current_second = sec;
            }
        }
    }

    fn push_row(&mut self, row: Row) -> u64 {
        let seq = row.seq;
        self.detail_bytes += row.detail_bytes();
        self.rows.push_back(row);
        while self.rows.len() > self.max_rows {
            if let Some(old) = self.rows.pop_front() {
                self.detail_bytes -= old.detail_bytes();
                if old.outcome == RowOutcome::Pending {
                    // Its outcome never came (or was among the dropped display events): the
                    // row goes, and so does its place in the open calls.
                    let key = (old.scope.clone(), old.direction, old.id.clone());
                    if let Some(q) = self.open.get_mut(&key) {
                        q.retain(|s| *s != old.seq);
                        if q.is_empty() {
                            self.open.remove(&key);
                        }
                    }
                }
                self.by_exchange.remove(&old.exchange);
                if self.rows.front().is_none_or(|r| r.exchange != old.exchange) {
                    self.http.remove(&old.exchange);
                }
            }
            if !self.follow && self.selected > 0 {
                self.selected -= 1;
            }
        }
        self.enforce_detail_budget();
        seq
    }

    fn enforce_detail_budget(&mut self) {
        let mut i = 0;
        while self.detail_bytes > self.max_detail_bytes && i < self.rows.len() {
            let r = &mut self.rows[i];
            let b = r.detail_bytes();
            if b > 0 {
                r.request = None;
                r.reply = None;
                r.stream.clear();
                self.detail_bytes -= b;
            }
            i += 1;
        }
    }

    fn add_detail(&mut self, seq: u64, f: impl FnOnce(&mut Row)) {
        let mut delta = 0isize;
        if let Some(r) = self.row_mut(seq) {
            let before = r.detail_bytes() as isize;
            f(r);
            delta = r.detail_bytes() as isize - before;
        }
        self.detail_bytes = (self.detail_bytes as isize + delta).max(0) as usize;
        self.enforce_detail_budget();
    }

    /// Applies one bus event.
    pub fn apply(&mut self, ev: &Event) {
        match ev {
            Event::Message(m) => {
                self.apply_message(MessageIn {
                    ts_ns: m.ts,
                    exchange: m.exchange,
                    scope: m.scope.to_string().into(),
                    c2s: m.direction == crate::events::Direction::ClientToServer,
                    kind: m.kind,
                    id: m.id.as_ref().map(|i| i.to_json_text().into()),
                    method: m.method.clone(),
                    target: m.target.clone(),
                    raw: String::from_utf8_lossy(&m.message).into(),
                    transport: m.transport,
                    batch_index: m.batch_index,
                });
            }
            Event::Call(c) => self.apply_call_at(CallIn {
                ts_ns: c.ts,
                exchange: c.exchange,
                scope: c.scope.to_string().into(),
                direction: c.direction,
                id: c.id.to_json_text().into(),
                method: c.method.clone(),
                target: c.target.clone(),
                outcome: RowOutcome::from(&c.outcome),
                latency_us: c.latency_us,
                anomalies: c.anomalies.iter().map(|a| Text::from(*a)).collect(),
            }),
            Event::Http(crate::events::HttpEvent::Request {
                exchange,
                method,
                path,
                session,
                protocol_version,
                ..
            }) => {
                self.apply_http_request(
                    *exchange,
                    method,
                    path,
                    session.as_deref(),
                    protocol_version.as_deref(),
                );
            }
            Event::Http(crate::events::HttpEvent::Response {
                exchange,
                status,
                content_type,
                ..
            }) => {
                self.apply_http_response(*exchange, *status, content_type.clone());
            }
            Event::Http(crate::events::HttpEvent::Auth {
                ts,
                exchange,
                method,
                path,
                status,
                www_authenticate,
            }) => {
                self.apply_auth(
                    *ts,
                    *exchange,
                    method,
                    path,
                    *status,
                    www_authenticate.as_deref(),
                );
            }
            Event::Http(crate::events::HttpEvent::Binary {
                ts,
                exchange,
                direction,
                len,
            }) => self.apply_binary(*ts, *exchange, *direction, *len),
            Event::Anomaly(a) => self.apply_anomaly(AnomalyIn {
                ts_ns: a.ts,
                exchange: a.exchange,
                scope: a.scope.to_string().into(),
                direction: a.direction,
                batch_index: a.batch_index,
                id: a.id.as_ref().map(|i| i.to_json_text().into()),
                code: a.code.into(),
                message: a.message.clone(),
            }),
            _ => {}
        }
    }

    /// An authorization exchange around an MCP endpoint: a row of its own (kind `http`), its
    /// challenge in the detail pane. `-http` in the filter (or `h`) hides these rows.
    pub fn apply_auth(
        &mut self,
        ts_ns: u64,
        exchange: u64,
        method: &str,
        path: &str,
        status: u16,
        www_authenticate: Option<&str>,
    ) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let detail: Text = match www_authenticate {
            Some(w) => format!("WWW-Authenticate: {w}").into(),
            None => Text::from(""),
        };
        let row = Row {
            seq,
            ts_ns,
            exchange,
            scope: format!("exchange:{exchange}").into(),
            direction: Direction::ClientToServer,
            method: format!("{method} {path}").into(),
            target: None,
            id: Text::from(""),
            outcome: RowOutcome::Http(status),
            latency_us: None,
            size: 0,
            anomalies: vec![],
            anomaly_text: vec![],
            request: (!detail.is_empty()).then_some(detail),
            reply: None,
            stream: vec![],
            transport: "http",
        };
        self.push_row(row);
    }

    /// A WebSocket's binary message: a row of its own (shown, not parsed).
    pub fn apply_binary(&mut self, ts_ns: u64, exchange: u64, direction: Direction, len: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let row = Row {
            seq,
            ts_ns,
            exchange,
            scope: format!("exchange:{exchange}").into(),
            direction,
            method: Text::from("(binary message)"),
            target: None,
            id: Text::from(""),
            outcome: RowOutcome::Notification,
            latency_us: None,
            size: len as usize,
            anomalies: vec![],
            anomaly_text: vec![],
            request: Some(
                format!("a binary message of {len} bytes: not JSON-RPC, not parsed").into(),
            ),
            reply: None,
            stream: vec![],
            transport: "ws",
        };
        self.push_row(row);
    }

    pub fn apply_http_request(
        &mut self,
        exchange: u64,
        method: &str,
        path: &str,
        session: Option<&str>,
        protocol_version: Option<&str>,
    ) {
        if self.http.len() >= self.max_rows * 2 {
            // Exchanges without rows (GET pages…) must not accumulate.
            let min = exchange.saturating_sub(self.max_rows as u64);
            self.http.retain(|k, _| *k > min);
        }
        self.http.insert(
            exchange,
            HttpMeta {
                method: method.to_string(),
                path: path.to_string(),
                session: session.map(str::to_string),
                protocol_version: protocol_version.map(str::to_string),
                ..Default::default()
            },
        );
    }

    pub fn apply_http_response(
        &mut self,
        exchange: u64,
        status: u16,
        content_type: Option<String>,
    ) {
        if let Some(h) = self.http.get_mut(&exchange) {
            h.status = Some(status);
            h.content_type = content_type;
        }
    }

    /// Applies one message (live or from a recording).
    pub fn apply_message(&mut self, m: MessageIn) {
        let dir = if m.c2s {
            Direction::ClientToServer
        } else {
            Direction::ServerToClient
        };
        match m.kind {
            Kind::Request | Kind::Notification | Kind::Invalid
                if m.method.is_some() || m.kind != Kind::Invalid =>
            {
                let seq = self.next_seq;
                self.next_seq += 1;
                let is_call = m.kind != Kind::Notification && m.id.is_some();
                if !is_call {
                    self.notifications_total += self.sample.max(1);
                }
                let stream_target = match (&m.method, &m.target, m.transport) {
                    (
                        Some(method),
                        Some(target),
                        crate::events::Transport::Ws | crate::events::Transport::Stdio,
                    ) => Some(Text::from(format!("{method} [{target}]"))),
                    _ => None,
                };
                let id = m.id.unwrap_or_else(|| Text::from(""));
                let row = Row {
                    seq,
                    ts_ns: m.ts_ns,
                    exchange: m.exchange,
                    scope: m.scope.clone(),
                    direction: dir,
                    method: m.method.unwrap_or_else(|| Text::from("")),
                    target: m.target,
                    id: id.clone(),
                    outcome: if is_call {
                        RowOutcome::Pending
                    } else {
                        RowOutcome::Notification
                    },
                    latency_us: None,
                    size: m.raw.len(),
                    anomalies: vec![],
                    anomaly_text: vec![],
                    request: Some(m.raw.clone()),
                    reply: None,
                    stream: vec![],
                    transport: transport_label(m.transport),
                };
                self.push_row(row);
                self.note_recent(m.exchange, dir, m.batch_index, Some(seq));
                if is_call {
                    self.open
                        .entry((m.scope.clone(), dir, id))
                        .or_default()
                        .push_back(seq);
                    self.by_exchange.entry(m.exchange).or_default().push(seq);
                } else if !m.c2s && m.kind == Kind::Notification && stream_target.is_some() {
                    // A subscription's notification (a WebSocket's `eth_subscription`, …):
                    // counted in the methods view under its subscription.
                    if let Some(key) = stream_target {
                        self.method_mut(&key).count += self.sample.max(1);
                    }
                } else if !m.c2s
                    && matches!(
                        m.transport,
                        crate::events::Transport::Sse | crate::events::Transport::LegacySse
                    )
                {
                    // A server notification inside a stream: also shown with the calls it serves.
                    self.show_with_exchange(m.exchange, &m.raw);
                }
                self.session_touch(&m.scope, m.ts_ns);
            }
            _ => {
                // A response: attach to its call.
                let req_dir = dir.reverse();
                let key = (
                    m.scope.clone(),
                    req_dir,
                    m.id.unwrap_or_else(|| Text::from("")),
                );
                let seq = self.open.get(&key).and_then(|q| {
                    q.iter()
                        .copied()
                        .find(|s| self.row(*s).is_some_and(|r| r.reply.is_none()))
                });
                self.note_recent(m.exchange, dir, m.batch_index, seq);
                if let Some(seq) = seq {
                    let raw = m.raw.clone();
                    self.add_detail(seq, |r| {
                        r.size += raw.len();
                        r.reply = Some(raw);
                    });
                } else {
                    // A reply the inspector could not attach to a call (id null, an unknown id,
                    // not JSON): shown with the calls of its exchange, so its body is never lost.
                    self.show_with_exchange(m.exchange, &m.raw);
                }
            }
        }
    }

    /// Remembers which row a message went to (a bounded window: findings follow their message
    /// closely, interleaved at most with other exchanges' events).
    fn note_recent(&mut self, exchange: u64, dir: Direction, batch: Option<u32>, seq: Option<u64>) {
        if self.recent.len() >= RECENT_KEEP {
            self.recent.pop_front();
        }
        self.recent.push_back((exchange, dir, batch, seq));
    }

    /// Shows a message with the calls of its exchange (in their detail's stream list).
    fn show_with_exchange(&mut self, exchange: u64, raw: &Text) {
        for s in self.by_exchange.get(&exchange).cloned().unwrap_or_default() {
            self.add_detail(s, |r| {
                if r.stream.len() < SSE_STREAM_KEEP {
                    r.stream.push(raw.clone());
                }
            });
        }
    }

    fn session_touch(&mut self, scope: &Text, ts: u64) {
        let s = self.session_mut(scope);
        s.last_ns = s.last_ns.max(ts);
    }

    /// A scope's statistics: an MCP session's own, made on first sight, or — for traffic
    /// without a session, scoped per exchange — the one "(no session)" line. The session map is
    /// held to `max_rows` sessions: past that, the least recently seen eighth goes (amortized:
    /// the sort runs once per `max_rows / 8` new sessions).
    fn session_mut(&mut self, scope: &Text) -> &mut SessionStats {
        if !scope.starts_with("session:") {
            return &mut self.no_session;
        }
        if !self.sessions.contains_key(scope) {
            make_room(&mut self.sessions, self.max_rows, |s| s.last_ns);
        }
        self.sessions.entry(scope.clone()).or_default()
    }

    /// A method's statistics, made on first sight; at most `max_rows` methods (a peer can send
    /// any number of names): past that, the least used eighth goes.
    fn method_mut(&mut self, method: &Text) -> &mut MethodStats {
        if !self.methods.contains_key(method) {
            make_room(&mut self.methods, self.max_rows, |m| m.count);
        }
        self.methods.entry(method.clone()).or_default()
    }

    /// Applies a call's outcome (a test's shorthand: no exchange, target or findings).
    #[allow(clippy::too_many_arguments)]
    pub fn apply_call(
        &mut self,
        scope: Text,
        dir: Direction,
        id: Text,
        method: &Text,
        outcome: RowOutcome,
        latency_us: Option<u64>,
        ts: u64,
    ) {
        self.apply_call_at(CallIn {
            ts_ns: ts,
            exchange: 0,
            scope,
            direction: dir,
            id,
            method: method.clone(),
            target: None,
            outcome,
            latency_us,
            anomalies: vec![],
        });
    }

    /// Applies a call's outcome: its row gets the outcome and every code the inspector raised
    /// on it. A call whose request row is not here (a feed attached after the call began, a
    /// display event dropped) gets a row of its own, made from the call.
    pub fn apply_call_at(&mut self, c: CallIn) {
        // Under sampling each call shown stands for `sample` calls in the counters.
        let w = self.sample.max(1);
        let (ts, latency_us, outcome) = (c.ts_ns, c.latency_us, c.outcome);
        self.calls_total += w;
        let err = outcome.is_error();
        if err {
            self.errors_total += w;
        }
        if let Some(b) = self.per_second.back_mut() {
            *b += w;
        }
        if let Some(l) = latency_us {
            self.recent_latencies.push_back(l);
            if self.recent_latencies.len() > LATENCY_WINDOW {
                self.recent_latencies.pop_front();
            }
        }
        let ms = self.method_mut(&c.method);
        ms.count += w;
        if err {
            ms.errors += w;
        }
        if let Some(l) = latency_us {
            if ms.latencies.len() >= 2048 {
                ms.latencies.remove(0);
            }
            ms.latencies.push(l);
        }
        let s = self.session_mut(&c.scope);
        s.calls += w;
        if err {
            s.errors += w;
        }
        s.last_ns = s.last_ns.max(ts);
        let key = (c.scope, c.direction, c.id);
        let seq = self.open.get_mut(&key).and_then(VecDeque::pop_front);
        if self.open.get(&key).is_some_and(VecDeque::is_empty) {
            self.open.remove(&key);
        }
        let codes = c.anomalies;
        match seq {
            Some(seq) => {
                if let Some(r) = self.row_mut(seq) {
                    r.outcome = outcome;
                    r.latency_us = latency_us;
                    // An ended call is marked with exactly the codes the inspector gave it (the
                    // ones pinned while it waited were provisional); findings about its
                    // exchange stay in its detail.
                    r.anomalies.clear();
                    for code in codes {
                        if !r.anomalies.iter().any(|a| **a == *code) {
                            r.anomalies.push(code.to_string());
                        }
                    }
                }
            }
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let started = ts.saturating_sub(latency_us.unwrap_or(0) * 1000);
                let (scope, direction, id) = key;
                let mut anomalies: Vec<String> = Vec::new();
                for code in codes {
                    if !anomalies.iter().any(|a| **a == *code) {
                        anomalies.push(code.to_string());
                    }
                }
                self.push_row(Row {
                    seq,
                    ts_ns: started,
                    exchange: c.exchange,
                    scope,
                    direction,
                    method: c.method,
                    target: c.target,
                    id,
                    outcome,
                    latency_us,
                    size: 0,
                    anomalies,
                    anomaly_text: vec![],
                    request: None,
                    reply: None,
                    stream: vec![],
                    transport: FROM_CALL,
                });
            }
        }
    }

    /// Applies an anomaly: counted, listed, and pinned on the row of the message it concerns —
    /// the message just applied when the finding names that frame (the inspector publishes a
    /// message's findings right after it), else the newest row of its scope with its id, else
    /// the newest row of its exchange.
    pub fn apply_anomaly(&mut self, a: AnomalyIn) {
        self.anomalies_total += 1;
        self.session_mut(&a.scope).anomalies += 1;
        self.anomaly_rows.push_back((
            a.ts_ns,
            a.code.to_string(),
            a.scope.to_string(),
            a.message.clone(),
        ));
        if self.anomaly_rows.len() > self.max_rows {
            self.anomaly_rows.pop_front();
        }
        let id = a.id.as_ref();
        let same_id = |r: &Row| id.is_none_or(|i| r.id == *i);
        let just_applied = a.direction.and_then(|d| {
            let &(_, dir, batch, seq) = self.recent.iter().rev().find(|m| m.0 == a.exchange)?;
            let seq = seq.filter(|_| dir == d && batch == a.batch_index)?;
            self.row(seq).filter(|r| same_id(r)).map(|r| r.seq)
        });
        let target = just_applied.or_else(|| {
            let newest = |f: &dyn Fn(&Row) -> bool| {
                self.rows
                    .iter()
                    .rev()
                    .take(10_000)
                    .find(|r| f(r))
                    .map(|r| r.seq)
            };
            match id {
                Some(i) => newest(&|r| {
                    r.scope == a.scope && r.id == *i && a.direction.is_none_or(|d| r.direction == d)
                })
                .or_else(|| newest(&|r| r.scope == a.scope && r.id == *i)),
                None => newest(&|r| r.exchange == a.exchange),
            }
        });
        if let Some(seq) = target {
            if let Some(r) = self.row_mut(seq) {
                // A call that ended carries its call's codes (`apply_call_at`); a waiting call
                // shows what was flagged so far, a notification or stray reply all of it.
                let open = r.outcome == RowOutcome::Pending || r.id.is_empty();
                if open && !r.anomalies.iter().any(|c| **c == *a.code) {
                    r.anomalies.push(a.code.to_string());
                }
                r.anomaly_text.push(format!("{}: {}", a.code, a.message));
            }
        }
    }

    /// Rows shown in the Calls view (the Anomalies view shows anomalies).
    pub fn visible(&self) -> Vec<&Row> {
        self.visible_range(0, usize::MAX)
    }

    /// How many rows the Calls view shows. Without a filter that is every row, counted without
    /// a scan: the screen is drawn ten times a second over up to `max_rows` rows.
    pub fn visible_len(&self) -> usize {
        if self.filter.trim().is_empty() {
            return self.rows.len();
        }
        let f = self.filter_parsed();
        self.rows.iter().filter(|r| f.matches(r)).count()
    }

    /// `n` rows of the Calls view from position `start`.
    pub fn visible_range(&self, start: usize, n: usize) -> Vec<&Row> {
        if self.filter.trim().is_empty() {
            let end = start.saturating_add(n).min(self.rows.len());
            return self.rows.range(start.min(end)..end).collect();
        }
        let f = self.filter_parsed();
        self.rows
            .iter()
            .filter(|r| f.matches(r))
            .skip(start)
            .take(n)
            .collect()
    }

    /// The applied filter (only a filter that parsed is ever applied).
    fn filter_parsed(&self) -> Filter {
        Filter::parse(&self.filter).unwrap_or_default()
    }

    /// Why the filter being typed cannot be read, if it cannot.
    pub fn filter_error(&self) -> Option<String> {
        Filter::parse(&self.filter_input).err()
    }

    fn list_len(&self) -> usize {
        match self.view {
            View::Calls => self.visible_len(),
            View::Anomalies => self.anomaly_rows.len(),
            View::Methods => self.methods.len(),
            View::Sessions => self.sessions.len() + usize::from(self.no_session.last_ns > 0),
        }
    }

    /// The selected row of the Calls view, following the newest when `follow`.
    pub fn selected_row(&self) -> Option<&Row> {
        let n = self.visible_len();
        if n == 0 {
            return None;
        }
        let i = if self.follow {
            n - 1
        } else {
            self.selected.min(n - 1)
        };
        self.visible_range(i, 1).into_iter().next()
    }

    pub fn selected_index(&self) -> usize {
        let n = self.list_len();
        if n == 0 {
            0
        } else if self.follow && self.view == View::Calls {
            n - 1
        } else {
            self.selected.min(n - 1)
        }
    }

    fn move_by(&mut self, delta: isize) {
        let n = self.list_len();
        if n == 0 {
            return;
        }
        let cur = self.selected_index() as isize;
        let next = (cur + delta).clamp(0, n as isize - 1) as usize;
        self.selected = next;
        self.follow = false;
        self.detail_scroll = 0;
    }

    /// Handles a key; returns what the event loop should do.
    pub fn handle_key(&mut self, key: Key) -> Action {
        if self.editing_filter {
            match key {
                Key::Esc => {
                    self.editing_filter = false;
                    self.filter_input.clear();
                }
                Key::Enter => match Filter::parse(&self.filter_input) {
                    Ok(_) => {
                        self.editing_filter = false;
                        self.filter = std::mem::take(&mut self.filter_input);
                        self.selected = 0;
                    }
                    // Kept open, the reason beside what was typed.
                    Err(why) => self.say(format!("filter not applied: {why}")),
                },
                Key::Backspace => {
                    self.filter_input.pop();
                }
                Key::Char(c) => self.filter_input.push(c),
                _ => {}
            }
            return Action::None;
        }
        if self.help {
            self.help = false;
            if key == Key::Char('q') {
                return Action::Quit;
            }
            return Action::None;
        }
        match key {
            Key::Char('q') => return Action::Quit,
            Key::Char('?') => self.help = true,
            Key::Up | Key::Char('k') => {
                if self.detail {
                    self.detail_scroll = self.detail_scroll.saturating_sub(1);
                } else {
                    self.move_by(-1)
                }
            }
            Key::Down | Key::Char('j') => {
                if self.detail {
                    self.detail_scroll = self.detail_scroll.saturating_add(1);
                } else {
                    self.move_by(1)
                }
            }
            Key::PageUp => self.move_by(-(self.page as isize)),
            Key::PageDown => self.move_by(self.page as isize),
            Key::Char('g') | Key::Home => {
                self.selected = 0;
                self.follow = false;
            }
            Key::Char('G') | Key::End => {
                self.follow = true;
            }
            Key::Enter => {
                self.detail = !self.detail;
                self.detail_scroll = 0;
            }
            Key::Tab => {
                self.view = self.view.next();
                self.selected = 0;
            }
            Key::Char('/') => {
                self.editing_filter = true;
                self.filter_input = self.filter.clone();
            }
            Key::Esc => {
                if self.detail {
                    self.detail = false;
                } else {
                    self.filter.clear();
                }
            }
            Key::Char('f') => {
                if !self.follow {
                    self.follow = true;
                } else {
                    self.selected = self.selected_index();
                    self.follow = false;
                }
            }
            Key::Char('c') => self.clear(),
            Key::Char('h') => {
                // Hides (or shows again) the `http` rows: the `-http` filter token.
                let mut toks: Vec<&str> = self.filter.split_whitespace().collect();
                let had = toks.len();
                toks.retain(|t| *t != "-http");
                if toks.len() == had {
                    toks.push("-http");
                }
                self.filter = toks.join(" ");
                self.selected = 0;
            }
            Key::Char('y') => {
                if let Some(r) = self.selected_row() {
                    if let Some(req) = &r.request {
                        return self.copy_request(r, req);
                    }
                }
            }
            Key::Char('e') => return Action::Export(self.export_document()),
            Key::Char('r') => {
                if !self.can_resend {
                    self.say(if self.listen == "stdio" {
                        "re-send is unavailable for a stdio session: its stdin belongs to the client"
                    } else {
                        "re-send works in proxy mode only"
                    });
                } else if let Some(req) = self.selected_row().and_then(|r| r.request.clone()) {
                    let path = self
                        .selected_row()
                        .and_then(|r| self.http.get(&r.exchange))
                        .map_or_else(|| "/".to_string(), |h| h.path.clone());
                    return Action::Resend {
                        path,
                        body: req.to_string(),
                    };
                }
            }
            Key::ScrollUp => self.move_by(-3),
            Key::ScrollDown => self.move_by(3),
            _ => {}
        }
        Action::None
    }

    /// A `curl` command that sends `req` as the call was sent: the recorded path and query, and
    /// its `Mcp-Session-Id` (the secrets the recording redacted are never in it).
    /// What `y` copies for a row: the request as a `curl` command over HTTP; over stdio the
    /// JSON-RPC line piped into the recorded command (curl cannot reach a stdio server); over
    /// WebSocket the message itself (curl does not speak WebSocket).
    fn copy_request(&self, r: &Row, req: &str) -> Action {
        let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        match r.transport {
            "stdio" => {
                let line = format!("printf '%s\\n' {}", q(req));
                let text = if self.upstream.is_empty() {
                    line
                } else {
                    format!("{line} | {}", self.upstream)
                };
                Action::Copy {
                    text,
                    what: "a line for the server's stdin",
                }
            }
            "ws" => Action::Copy {
                text: req.to_string(),
                what: "the WebSocket message (curl does not apply)",
            },
            _ => Action::Copy {
                text: self.curl_command(r.exchange, req),
                what: "curl",
            },
        }
    }

    pub fn curl_command(&self, exchange: u64, req: &str) -> String {
        let q = |s: &str| format!("'{}'", s.replace('\'', "'\\''"));
        let (path, session, version) = self.http.get(&exchange).map_or(("/", None, None), |h| {
            (
                h.path.as_str(),
                h.session.as_deref(),
                h.protocol_version.as_deref(),
            )
        });
        let mut c = format!(
            "curl -s {} -H 'content-type: application/json' -H 'accept: application/json, text/event-stream'",
            q(&format!("http://{}{}", self.listen, path))
        );
        if let Some(s) = session {
            c.push_str(&format!(" -H {}", q(&format!("mcp-session-id: {s}"))));
        }
        if let Some(v) = version {
            c.push_str(&format!(" -H {}", q(&format!("mcp-protocol-version: {v}"))));
        }
        c.push_str(&format!(" --data-raw {}", q(req)));
        c
    }

    /// The selected call (detail open) or the filtered list, as an exchange document.
    pub fn export_document(&self) -> String {
        let rows: Vec<&Row> = if self.detail {
            self.selected_row().into_iter().collect()
        } else {
            self.visible()
                .into_iter()
                .filter(|r| r.direction == Direction::ClientToServer)
                .collect()
        };
        // One document per scope (ids are unique only within a scope), scopes in order of
        // first appearance, one per line — as `rpctap export --format exchange` writes them.
        let mut scopes: Vec<(&str, Vec<&Row>)> = Vec::new();
        for r in rows {
            match scopes.iter_mut().find(|(s, _)| *s == &*r.scope) {
                Some((_, v)) => v.push(r),
                None => scopes.push((&r.scope, vec![r])),
            }
        }
        scopes
            .iter()
            .map(|(_, rows)| {
                let req: Vec<&str> = rows.iter().filter_map(|r| r.request.as_deref()).collect();
                let resp: Vec<&str> = rows.iter().filter_map(|r| r.reply.as_deref()).collect();
                format!(
                    "{{\"request\":[{}],\"response\":[{}]}}",
                    req.join(","),
                    resp.join(",")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    pub fn clear(&mut self) {
        self.rows.clear();
        self.open.clear();
        self.by_exchange.clear();
        self.recent.clear();
        self.anomaly_rows.clear();
        self.detail_bytes = 0;
        self.selected = 0;
        self.follow = true;
    }

    /// p50, p95, p99 of recent latencies, in µs.
    pub fn percentiles(&self) -> Option<(u64, u64, u64)> {
        percentiles(self.recent_latencies.iter().copied().collect())
    }

    pub fn pending(&self) -> usize {
        self.open.values().map(VecDeque::len).sum()
    }

    pub fn calls_per_second(&self) -> u64 {
        // the last complete second
        let n = self.per_second.len();
        if n >= 2 {
            self.per_second[n - 2]
        } else {
            0
        }
    }
}

/// Makes room for one more entry in a map held to `cap` entries: when full, the eighth with the
/// lowest `rank` goes (one sort per `cap / 8` insertions).
fn make_room<V>(map: &mut HashMap<Text, V>, cap: usize, rank: impl Fn(&V) -> u64) {
    if map.len() < cap {
        return;
    }
    let mut ranked: Vec<(u64, Text)> = map.iter().map(|(k, v)| (rank(v), k.clone())).collect();
    ranked.sort_unstable();
    for (_, k) in ranked.iter().take((cap / 8).max(1)) {
        map.remove(k);
    }
}

/// p50, p95, p99 of a sample.
pub fn percentiles(mut v: Vec<u64>) -> Option<(u64, u64, u64)> {
    if v.is_empty() {
        return None;
    }
    v.sort_unstable();
    let at = |p: f64| v[((v.len() as f64 - 1.0) * p).round() as usize];
    Some((at(0.50), at(0.95), at(0.99)))
}

/// A message as the dashboard takes it (from a live event or a recording line).
#[derive(Clone, Debug)]
pub struct MessageIn {
    pub ts_ns: u64,
    pub exchange: u64,
    pub scope: Text,
    pub c2s: bool,
    pub kind: Kind,
    pub id: Option<Text>,
    pub method: Option<Text>,
    pub target: Option<Text>,
    pub raw: Text,
    pub transport: crate::events::Transport,
    /// Its index in its batch, when batched.
    pub batch_index: Option<u32>,
}

/// A call's end, as the dashboard applies it (live or from a recording).
#[derive(Clone, Debug)]
pub struct CallIn {
    pub ts_ns: u64,
    pub exchange: u64,
    pub scope: Text,
    /// The direction of the request.
    pub direction: Direction,
    pub id: Text,
    pub method: Text,
    pub target: Option<Text>,
    pub outcome: RowOutcome,
    pub latency_us: Option<u64>,
    /// Every code the inspector raised on the call (its `call` line's `anomalies`).
    pub anomalies: Vec<Text>,
}

/// An anomaly, as the dashboard applies it (live or from a recording).
#[derive(Clone, Debug)]
pub struct AnomalyIn {
    pub ts_ns: u64,
    pub exchange: u64,
    pub scope: Text,
    /// The frame it concerns: its direction and batch index (when it concerns one).
    pub direction: Option<Direction>,
    pub batch_index: Option<u32>,
    pub id: Option<Text>,
    pub code: Text,
    pub message: String,
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

/// Keys the dashboard understands (independent of the terminal library).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Up,
    Down,
    PageUp,
    PageDown,
    Home,
    End,
    Enter,
    Esc,
    Tab,
    Backspace,
    ScrollUp,
    ScrollDown,
}

/// The filter language (the Calls view's `/`): terms separated by spaces, all of which must
/// hold (AND); `-term` negates one. A term is a word — `error` (the call failed: a JSON-RPC
/// error, refused, rejected or missing), `anomaly` (flagged), `pending`, `http` (the
/// authorization rows) — or `field:value`:
/// `method:GLOB`, `tool:GLOB` (also `prompt:` and `resource:`: the call's target), `status:`
/// (`ok`, `error`, `missing`, `refused`, `pending`, `flagged`, `notification`), `dir:` (`c2s`
/// or `s2c`), `id:`, `session:` (part of the scope), `code:` (an anomaly code, a glob),
/// `subscription:`; a token with `/` or `*` is a method glob; anything else is free text,
/// searched in the method, target, id and both messages. A term it cannot read is an error that
/// names it.
#[derive(Debug, Default)]
pub struct Filter {
    terms: Vec<(bool, Term)>,
}

#[derive(Debug)]
enum Term {
    Error,
    Anomaly,
    Pending,
    Http,
    Ok,
    Missing,
    Refused,
    Notification,
    Dir(Direction),
    Id(String),
    Session(String),
    Subscription(String),
    Method(globset::GlobMatcher),
    Target(globset::GlobMatcher),
    Code(globset::GlobMatcher),
    Text(String),
}

/// The fields `field:value` knows.
const FIELDS: &str = "method, tool, prompt, resource, status, dir, id, session, code, subscription";

fn glob(field: &str, g: &str) -> Result<globset::GlobMatcher, String> {
    globset::GlobBuilder::new(g)
        .case_insensitive(true)
        .build()
        .map(|g| g.compile_matcher())
        .map_err(|e| format!("{field}:{g} is not a glob: {}", e.kind()))
}

impl Filter {
    pub fn parse(s: &str) -> Result<Filter, String> {
        let mut f = Filter::default();
        for tok in s.split_whitespace() {
            let (neg, t) = match tok.strip_prefix('-').or_else(|| tok.strip_prefix('!')) {
                Some(rest) if !rest.is_empty() => (true, rest),
                _ => (false, tok),
            };
            f.terms.push((neg, Self::term(t)?));
        }
        Ok(f)
    }

    fn term(t: &str) -> Result<Term, String> {
        Ok(match t {
            "error" | "errors" => Term::Error,
            "anomaly" | "anomalies" | "flagged" => Term::Anomaly,
            "pending" => Term::Pending,
            "http" | "kind:http" => Term::Http,
            _ => match t.split_once(':') {
                // A URL or other text with a colon is text, not a field.
                Some((field, value))
                    if !field.is_empty()
                        && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                        && !value.starts_with('/') =>
                {
                    if value.is_empty() {
                        return Err(format!("{field}: needs a value"));
                    }
                    match field.to_ascii_lowercase().as_str() {
                        "method" => Term::Method(glob(field, value)?),
                        "tool" | "prompt" | "resource" | "target" => {
                            Term::Target(glob(field, value)?)
                        }
                        "code" => Term::Code(glob(field, value)?),
                        "id" => Term::Id(value.trim_matches('"').to_string()),
                        "session" | "scope" => Term::Session(value.to_string()),
                        "subscription" => Term::Subscription(value.trim_matches('"').to_string()),
                        "dir" => match value.to_ascii_lowercase().as_str() {
                            "c2s" | "c→s" | "client" | "in" => Term::Dir(Direction::ClientToServer),
                            "s2c" | "s→c" | "server" | "out" => {
                                Term::Dir(Direction::ServerToClient)
                            }
                            _ => return Err(format!("dir:{value}: use dir:c2s or dir:s2c")),
                        },
                        "status" => match value.to_ascii_lowercase().as_str() {
                            "ok" | "result" => Term::Ok,
                            "error" | "errors" | "failed" => Term::Error,
                            "missing" => Term::Missing,
                            "refused" => Term::Refused,
                            "pending" => Term::Pending,
                            "flagged" | "anomaly" => Term::Anomaly,
                            "notification" | "notif" => Term::Notification,
                            _ => {
                                return Err(format!(
                                    "status:{value}: use ok, error, missing, refused, pending, flagged or notification"
                                ))
                            }
                        },
                        _ => {
                            return Err(format!(
                                "unknown filter field `{field}:` (fields: {FIELDS})"
                            ))
                        }
                    }
                }
                _ if t.contains('/') || t.contains('*') => Term::Method(glob("method", t)?),
                _ => Term::Text(t.to_lowercase()),
            },
        })
    }

    pub fn matches(&self, r: &Row) -> bool {
        self.terms.iter().all(|(neg, t)| Self::holds(t, r) != *neg)
    }

    fn holds(t: &Term, r: &Row) -> bool {
        let target_is =
            |g: &globset::GlobMatcher| r.target.as_ref().is_some_and(|t| g.is_match(&**t));
        match t {
            Term::Error => r.outcome.is_error(),
            Term::Anomaly => !r.anomalies.is_empty(),
            Term::Pending => r.outcome == RowOutcome::Pending,
            Term::Http => r.transport == "http",
            Term::Ok => r.outcome == RowOutcome::Result,
            Term::Missing => matches!(r.outcome, RowOutcome::Missing(_)),
            Term::Refused => matches!(r.outcome, RowOutcome::Refused(_)),
            Term::Notification => r.outcome == RowOutcome::Notification,
            Term::Dir(d) => r.direction == *d,
            Term::Id(i) => r.id.trim_matches('"') == i,
            Term::Session(s) => r.scope.contains(s.as_str()),
            Term::Subscription(s) => r
                .target
                .as_deref()
                .is_some_and(|t| t.trim_matches('"') == s),
            Term::Method(g) => g.is_match(&*r.method) || target_is(g),
            Term::Target(g) => target_is(g),
            Term::Code(g) => r.anomalies.iter().any(|a| g.is_match(a)),
            Term::Text(t) => {
                let has = |s: &str| s.to_lowercase().contains(t.as_str());
                has(&r.method)
                    || r.target.as_deref().is_some_and(has)
                    || has(&r.id)
                    || r.request.as_deref().is_some_and(has)
                    || r.reply.as_deref().is_some_and(has)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(
        ex: u64,
        c2s: bool,
        kind: Kind,
        id: Option<&str>,
        method: Option<&str>,
        raw: &str,
    ) -> MessageIn {
        MessageIn {
            ts_ns: 1_000_000_000 * ex,
            exchange: ex,
            scope: format!("exchange:{ex}").into(),
            c2s,
            kind,
            id: id.map(Text::from),
            method: method.map(Text::from),
            target: None,
            raw: raw.into(),
            transport: crate::events::Transport::Json,
            batch_index: None,
        }
    }

    fn app_with_calls() -> App {
        let mut a = App::new("t", "l", "u", 100, 0);
        a.apply_message(msg(
            1,
            true,
            Kind::Request,
            Some("1"),
            Some("add"),
            r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}"#,
        ));
        a.apply_message(msg(
            1,
            false,
            Kind::Result,
            Some("1"),
            None,
            r#"{"jsonrpc":"2.0","id":1,"result":3}"#,
        ));
        a.apply_call(
            "exchange:1".into(),
            Direction::ClientToServer,
            "1".into(),
            &"add".into(),
            RowOutcome::Result,
            Some(1500),
            1,
        );
        a.apply_message(msg(
            2,
            true,
            Kind::Request,
            Some("2"),
            Some("nope"),
            r#"{"jsonrpc":"2.0","method":"nope","id":2}"#,
        ));
        a.apply_message(msg(
            3,
            true,
            Kind::Notification,
            None,
            Some("log"),
            r#"{"jsonrpc":"2.0","method":"log"}"#,
        ));
        a
    }

    #[test]
    fn pending_rows_update_in_place() {
        let mut a = app_with_calls();
        assert_eq!(a.rows.len(), 3);
        assert_eq!(a.rows[1].outcome, RowOutcome::Pending);
        assert_eq!(a.pending(), 1);
        a.apply_message(msg(
            2,
            false,
            Kind::Error,
            Some("2"),
            None,
            r#"{"jsonrpc":"2.0","id":2,"error":{"code":-32601,"message":"x"}}"#,
        ));
        a.apply_call(
            "exchange:2".into(),
            Direction::ClientToServer,
            "2".into(),
            &"nope".into(),
            RowOutcome::Error(-32601),
            Some(900),
            2,
        );
        assert_eq!(a.rows[1].outcome, RowOutcome::Error(-32601));
        assert!(a.rows[1].reply.is_some());
        assert_eq!((a.pending(), a.calls_total, a.errors_total), (0, 2, 1));
    }

    #[test]
    fn keys_move_filter_and_views() {
        let mut a = app_with_calls();
        assert!(a.follow);
        assert_eq!(&*a.selected_row().unwrap().method, "log");
        a.handle_key(Key::Up);
        assert!(!a.follow);
        assert_eq!(&*a.selected_row().unwrap().method, "nope");
        a.handle_key(Key::Char('g'));
        assert_eq!(&*a.selected_row().unwrap().method, "add");
        a.handle_key(Key::Char('G'));
        assert!(a.follow);
        // filter: pending
        a.handle_key(Key::Char('/'));
        for c in "pending".chars() {
            a.handle_key(Key::Char(c));
        }
        assert!(a.editing_filter);
        a.handle_key(Key::Enter);
        assert_eq!(a.visible().len(), 1);
        assert_eq!(&*a.visible()[0].method, "nope");
        a.handle_key(Key::Esc);
        assert_eq!(a.visible().len(), 3);
        a.filter = "add*".into();
        assert_eq!(a.visible().len(), 1);
        a.filter = "id:2".into();
        assert_eq!(&*a.visible()[0].method, "nope");
        a.filter = "params".into(); // free text in the messages
        assert_eq!(a.visible().len(), 1);
        a.filter.clear();
        assert_eq!(a.handle_key(Key::Tab), Action::None);
        assert_eq!(a.view, View::Anomalies);
        a.handle_key(Key::Tab);
        a.handle_key(Key::Tab);
        a.handle_key(Key::Tab);
        assert_eq!(a.view, View::Calls);
        assert_eq!(a.handle_key(Key::Char('?')), Action::None);
        assert!(a.help);
        a.handle_key(Key::Char('x'));
        assert!(!a.help);
        assert_eq!(a.handle_key(Key::Char('q')), Action::Quit);
    }

    #[test]
    fn authorization_exchanges_are_http_rows_that_h_hides() {
        let mut a = App::new("t", "l", "u", 100, 0);
        a.apply_auth(1, 7, "POST", "/mcp", 401, Some(r#"Bearer realm="x""#));
        a.apply_auth(
            2,
            8,
            "GET",
            "/.well-known/oauth-protected-resource",
            200,
            None,
        );
        let rows = a.visible();
        assert_eq!(rows.len(), 2);
        assert_eq!(&*rows[0].method, "POST /mcp");
        assert_eq!(rows[0].outcome.label(), "HTTP 401");
        assert!(rows[0].outcome.is_error() && !rows[1].outcome.is_error());
        assert_eq!(
            rows[0].request.as_deref(),
            Some(r#"WWW-Authenticate: Bearer realm="x""#)
        );
        a.handle_key(Key::Char('h'));
        assert_eq!(a.filter, "-http");
        assert_eq!(a.visible_len(), 0);
        a.handle_key(Key::Char('h'));
        assert_eq!(a.visible_len(), 2);
        a.filter = "http error".into();
        assert_eq!(a.visible_len(), 1);
    }

    #[test]
    fn a_reply_that_matches_no_call_is_shown_with_its_exchange() {
        let mut a = App::new("t", "l", "u", 100, 0);
        let msg = |c2s: bool, kind: Kind, id: Option<&str>, raw: &str| MessageIn {
            ts_ns: 1,
            exchange: 9,
            scope: "exchange:9".into(),
            c2s,
            kind,
            id: id.map(Text::from),
            method: (kind == Kind::Request).then(|| Text::from("server/discover")),
            target: None,
            raw: raw.into(),
            transport: crate::events::Transport::Json,
            batch_index: None,
        };
        a.apply_message(msg(true, Kind::Request, Some("1"), r#"{"id":1}"#));
        let body = r#"{"jsonrpc":"2.0","id":null,"error":{"code":-32000,"message":"Bad Request"}}"#;
        a.apply_message(msg(false, Kind::Error, Some("null"), body));
        let r = a.rows.back().unwrap();
        assert!(r.reply.is_none());
        assert_eq!(
            r.stream,
            vec![Text::from(body)],
            "the unattached body is there"
        );
    }

    #[test]
    fn export_without_a_filter_gives_one_document_per_scope() {
        let mut a = App::new("t", "l", "u", 100, 0);
        for (ex, scope) in [(1, "exchange:1"), (2, "exchange:2"), (3, "session:s")] {
            for (c2s, kind, raw) in [
                (
                    true,
                    Kind::Request,
                    r#"{"jsonrpc":"2.0","id":1,"method":"m"}"#,
                ),
                (
                    false,
                    Kind::Result,
                    r#"{"jsonrpc":"2.0","id":1,"result":1}"#,
                ),
            ] {
                a.apply_message(MessageIn {
                    ts_ns: 1,
                    exchange: ex,
                    scope: scope.into(),
                    c2s,
                    kind,
                    id: Some("1".into()),
                    method: c2s.then(|| Text::from("m")),
                    target: None,
                    raw: raw.into(),
                    transport: crate::events::Transport::Json,
                    batch_index: None,
                });
            }
        }
        let out = a.export_document();
        let docs: Vec<&str> = out.lines().collect();
        assert_eq!(docs.len(), 3, "{out}");
        for d in docs {
            let r = crate::inspect::offline::check_document(
                d.as_bytes(),
                &crate::inspect::offline::CheckLimits::default(),
            )
            .unwrap();
            assert!(r.findings.is_empty(), "no false DUPLICATE_ID: {d}");
        }
    }

    #[test]
    fn curl_and_resend_use_the_calls_path_and_session() {
        let mut a = app_with_calls();
        a.handle_key(Key::Char('g'));
        let ex = a.selected_row().unwrap().exchange;
        a.apply_http_request(ex, "POST", "/mcp?x=1", Some("sess'1"), Some("2025-06-18"));
        match a.handle_key(Key::Char('y')) {
            Action::Copy { text: c, what } => {
                assert_eq!(what, "curl");
                assert!(c.contains(&format!("'http://{}/mcp?x=1'", a.listen)), "{c}");
                assert!(c.contains(r#"-H 'mcp-session-id: sess'\''1'"#), "{c}");
                assert!(c.contains("-H 'mcp-protocol-version: 2025-06-18'"), "{c}");
            }
            other => panic!("{other:?}"),
        }
        a.can_resend = true;
        match a.handle_key(Key::Char('r')) {
            Action::Resend { path, .. } => assert_eq!(path, "/mcp?x=1"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn actions_carry_what_the_loop_needs() {
        let mut a = app_with_calls();
        a.handle_key(Key::Char('g'));
        match a.handle_key(Key::Char('y')) {
            Action::Copy { text: c, .. } => {
                assert!(c.starts_with("curl ") && c.contains(r#""method":"add""#))
            }
            other => panic!("{other:?}"),
        }
        a.handle_key(Key::Enter);
        match a.handle_key(Key::Char('e')) {
            Action::Export(d) => {
                let v: serde_json::Value = serde_json::from_str(&d).unwrap();
                assert_eq!(v["request"][0]["method"], "add");
                assert_eq!(v["response"][0]["result"], 3);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            a.handle_key(Key::Char('r')),
            Action::None,
            "no re-send when viewing"
        );
        a.can_resend = true;
        assert!(matches!(
            a.handle_key(Key::Char('r')),
            Action::Resend { .. }
        ));
        a.handle_key(Key::Char('c'));
        assert!(a.rows.is_empty());
    }

    #[test]
    fn memory_is_bounded() {
        let mut a = App::new("t", "l", "u", 1000, 0);
        a.max_detail_bytes = 100_000;
        let big = "x".repeat(1000);
        for i in 0..10_000u64 {
            a.apply_message(msg(
                i,
                true,
                Kind::Request,
                Some(&i.to_string()),
                Some("m"),
                &big,
            ));
            a.apply_call(
                format!("exchange:{i}").into(),
                Direction::ClientToServer,
                i.to_string().into(),
                &"m".into(),
                RowOutcome::Result,
                Some(i),
                i,
            );
        }
        assert_eq!(a.rows.len(), 1000);
        let kept: usize = a.rows.iter().filter(|r| r.request.is_some()).count();
        assert!((90..=100).contains(&kept), "{kept}");
        assert_eq!(a.pending(), 0);
        assert!(a.recent_latencies.len() <= LATENCY_WINDOW);
    }

    #[test]
    fn percentiles_are_right() {
        assert_eq!(percentiles((1..=100).collect()), Some((51, 95, 99)));
        assert_eq!(percentiles(vec![]), None);
    }

    #[test]
    fn scope_and_method_tables_stay_bounded_under_any_traffic() {
        // Clients can open any number of sessions, and a peer can invent method names.
        let mut a = App::new("t", "l", "u", 100, 0);
        for i in 0..5_000u64 {
            let method = format!("m{i}");
            a.apply_message(msg(
                i,
                true,
                Kind::Request,
                Some("1"),
                Some(&method),
                r#"{"jsonrpc":"2.0","method":"m","id":1}"#,
            ));
            a.apply_call(
                format!("session:{i}").into(),
                Direction::ClientToServer,
                "1".into(),
                &method.as_str().into(),
                RowOutcome::Result,
                Some(10),
                i * 1_000_000_000,
            );
        }
        assert!(a.sessions.len() <= 100, "{}", a.sessions.len());
        assert!(a.methods.len() <= 100, "{}", a.methods.len());
        // The newest survive; traffic without a session is one line.
        assert!(a.sessions.contains_key("session:4999"));
        assert_eq!(a.no_session.calls, 0);
        assert!(a.no_session.last_ns > 0, "the requests had exchange scopes");
        assert!(a.methods.contains_key("m4999"));
        assert_eq!(a.calls_total, 5_000);
        assert!(a.rows.len() <= 100);
        // The calls' outcomes named other scopes: their request rows stayed pending, and each
        // outcome got a row of its own (no request seen); evicted rows leave the open calls.
        assert!(a
            .rows
            .iter()
            .all(|r| (r.outcome == RowOutcome::Pending) == r.request.is_some()));
        let pending_rows = a.rows.iter().filter(|r| r.request.is_some()).count();
        assert_eq!(a.pending(), pending_rows);
    }

    #[test]
    fn a_call_whose_request_was_not_seen_gets_a_row_of_its_own() {
        // A feed attached while the call was in flight: only its outcome arrives.
        let mut a = App::new("t", "l", "u", 100, 0);
        a.apply_call_at(CallIn {
            ts_ns: 10_000_000,
            exchange: 7,
            scope: "session:s1".into(),
            direction: Direction::ClientToServer,
            id: "3".into(),
            method: "tools/call".into(),
            target: Some("add".into()),
            outcome: RowOutcome::Result,
            latency_us: Some(1_500),
            anomalies: vec!["TOOL_ERROR".into()],
        });
        assert_eq!(a.rows.len(), 1);
        let r = &a.rows[0];
        assert_eq!((r.exchange, &*r.method, &*r.id), (7, "tools/call", "3"));
        assert_eq!(r.display_method(), "tools/call add");
        assert_eq!(r.outcome, RowOutcome::Result);
        assert_eq!(r.ts_ns, 10_000_000 - 1_500_000, "when the call started");
        assert!(r.request.is_none());
        assert_eq!(r.anomalies, ["TOOL_ERROR"], "the call's own findings");
        assert_eq!(a.calls_total, 1);
        assert_eq!(a.pending(), 0);
    }

    #[test]
    fn under_sampling_each_call_shown_counts_for_the_stride() {
        let mut a = app_with_calls();
        let before = (a.calls_total, a.errors_total);
        a.sample = 4;
        a.apply_call(
            "exchange:2".into(),
            Direction::ClientToServer,
            "2".into(),
            &"nope".into(),
            RowOutcome::Error(-32601),
            Some(900),
            2,
        );
        assert_eq!(
            (a.calls_total, a.errors_total),
            (before.0 + 4, before.1 + 4)
        );
        assert_eq!(a.methods["nope"].count, 4);
    }

    #[test]
    fn a_subscriptions_notifications_are_counted_under_it_in_the_methods_view() {
        let mut a = App::new("t", "l", "u", 100, 0);
        for _ in 0..3 {
            let mut m = msg(
                1,
                false,
                Kind::Notification,
                None,
                Some("eth_subscription"),
                r#"{"jsonrpc":"2.0","method":"eth_subscription","params":{"subscription":"0x1","result":{}}}"#,
            );
            m.target = Some("0x1".into());
            m.transport = crate::events::Transport::Ws;
            a.apply_message(m);
        }
        assert_eq!(a.methods["eth_subscription [0x1]"].count, 3);
        assert_eq!(a.methods.len(), 1);
    }

    #[test]
    fn a_websocket_binary_message_is_a_row_of_its_own() {
        let mut a = App::new("t", "l", "u", 100, 0);
        a.apply(&Event::Http(crate::events::HttpEvent::Binary {
            ts: 1,
            exchange: 7,
            direction: Direction::ServerToClient,
            len: 5,
        }));
        let r = a.rows.back().expect("a row");
        assert_eq!(&*r.method, "(binary message)");
        assert_eq!((r.size, r.transport, r.exchange), (5, "ws", 7));
    }

    fn filtered(a: &mut App, f: &str) -> Vec<String> {
        a.filter = f.into();
        a.visible()
            .iter()
            .map(|r| {
                format!(
                    "{}{}",
                    r.method,
                    r.target
                        .as_deref()
                        .map(|t| format!(" {t}"))
                        .unwrap_or_default()
                )
            })
            .collect()
    }

    /// An app with a tools/call that failed with a JSON-RPC error and was flagged, one that
    /// succeeded, a plain call and a notification.
    fn app_for_filters() -> App {
        let mut a = App::new("t", "l", "u", 100, 0);
        let call = |a: &mut App, ex: u64, id: &str, method: &str, target: Option<&str>| {
            a.apply_message(MessageIn {
                ts_ns: ex,
                exchange: ex,
                scope: "session:abc".into(),
                c2s: true,
                kind: Kind::Request,
                id: Some(id.into()),
                method: Some(method.into()),
                target: target.map(Text::from),
                raw: format!(r#"{{"id":{id},"method":"{method}"}}"#).into(),
                transport: crate::events::Transport::Json,
                batch_index: None,
            });
        };
        call(&mut a, 1, "1", "tools/call", Some("add"));
        call(&mut a, 2, "2", "tools/call", Some("echo"));
        call(&mut a, 3, "3", "ping", None);
        a.apply_message(MessageIn {
            ts_ns: 4,
            exchange: 4,
            scope: "session:abc".into(),
            c2s: false,
            kind: Kind::Notification,
            id: None,
            method: Some("notifications/message".into()),
            target: None,
            raw: r#"{"method":"notifications/message"}"#.into(),
            transport: crate::events::Transport::Json,
            batch_index: None,
        });
        let end = |a: &mut App, ex: u64, id: &str, method: &str, outcome, anomalies: Vec<Text>| {
            a.apply_call_at(CallIn {
                ts_ns: ex + 10,
                exchange: ex,
                scope: "session:abc".into(),
                direction: Direction::ClientToServer,
                id: id.into(),
                method: method.into(),
                target: None,
                outcome,
                latency_us: Some(5),
                anomalies,
            })
        };
        end(
            &mut a,
            1,
            "1",
            "tools/call",
            RowOutcome::Error(-32602),
            vec!["MCP_INPUT_SCHEMA".into()],
        );
        end(&mut a, 2, "2", "tools/call", RowOutcome::Result, vec![]);
        end(
            &mut a,
            3,
            "3",
            "ping",
            RowOutcome::Missing("gone".into()),
            vec!["MISSING_RESPONSE".into()],
        );
        a
    }

    #[test]
    fn filter_terms_combine_with_and_and_negate() {
        let mut a = app_for_filters();
        assert_eq!(filtered(&mut a, "tools/* error"), ["tools/call add"]);
        assert_eq!(
            filtered(&mut a, "error anomaly"),
            ["tools/call add", "ping"]
        );
        assert_eq!(filtered(&mut a, "error anomaly -ping"), ["tools/call add"]);
        assert_eq!(filtered(&mut a, "tool:add"), ["tools/call add"]);
        assert_eq!(filtered(&mut a, "tool:e*"), ["tools/call echo"]);
        assert_eq!(
            filtered(&mut a, "method:tools/call -tool:add"),
            ["tools/call echo"]
        );
        assert_eq!(filtered(&mut a, "status:ok"), ["tools/call echo"]);
        assert_eq!(filtered(&mut a, "status:missing"), ["ping"]);
        assert_eq!(
            filtered(&mut a, "status:flagged"),
            ["tools/call add", "ping"]
        );
        assert_eq!(
            filtered(&mut a, "status:notification"),
            ["notifications/message"]
        );
        assert_eq!(filtered(&mut a, "dir:s2c"), ["notifications/message"]);
        assert_eq!(filtered(&mut a, "-dir:s2c id:3"), ["ping"]);
        assert_eq!(filtered(&mut a, "code:mcp_*"), ["tools/call add"]);
        assert_eq!(filtered(&mut a, "session:ab echo"), ["tools/call echo"]);
        assert_eq!(
            filtered(&mut a, "code:MISSING_RESPONSE tools/*"),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_filter_that_cannot_be_read_says_why_and_is_not_applied() {
        for (bad, says) in [
            ("tool2:add", "unknown filter field `tool2:`"),
            ("status:weird", "status:weird"),
            ("dir:up", "dir:up"),
            ("id:", "id: needs a value"),
            ("method:[x", "not a glob"),
        ] {
            let e = Filter::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(
            Filter::parse("http://host/x -http").is_ok(),
            "a URL is text"
        );
        let mut a = app_for_filters();
        a.handle_key(Key::Char('/'));
        for c in "tol:add".chars() {
            a.handle_key(Key::Char(c));
        }
        assert!(a
            .filter_error()
            .unwrap()
            .contains("unknown filter field `tol:`"));
        a.handle_key(Key::Enter);
        assert!(a.editing_filter, "kept open to be mended");
        assert!(a.status.contains("filter not applied"), "{}", a.status);
        assert_eq!(a.filter, "");
    }

    #[test]
    fn counters_say_what_they_count_and_status_messages_clear() {
        let mut a = app_for_filters();
        assert_eq!(
            (a.calls_total, a.notifications_total, a.rows.len()),
            (3, 1, 4)
        );
        a.say("re-sent through the proxy");
        a.tick(a.now_ns + 1_000_000_000);
        assert_eq!(a.status, "re-sent through the proxy");
        a.tick(a.now_ns + STATUS_FOR);
        assert_eq!(a.status, "", "a status message goes by itself");
        a.status = "standing hint".into();
        a.tick(a.now_ns + 10 * STATUS_FOR);
        assert_eq!(a.status, "standing hint", "a hint set directly stays");
    }

    #[test]
    fn y_on_a_stdio_call_copies_a_line_for_the_command_and_on_websocket_the_message() {
        let mut a = App::new("t", "stdio", "python3 server.py", 100, 0);
        for (ex, t) in [
            (1, crate::events::Transport::Stdio),
            (2, crate::events::Transport::Ws),
        ] {
            a.apply_message(MessageIn {
                ts_ns: ex,
                exchange: ex,
                scope: format!("exchange:{ex}").into(),
                c2s: true,
                kind: Kind::Request,
                id: Some("1".into()),
                method: Some("ping".into()),
                target: None,
                raw: r#"{"jsonrpc":"2.0","id":1,"method":"it's"}"#.into(),
                transport: t,
                batch_index: None,
            });
        }
        a.handle_key(Key::Char('g'));
        match a.handle_key(Key::Char('y')) {
            Action::Copy { text, what } => {
                assert_eq!(
                    text,
                    r#"printf '%s\n' '{"jsonrpc":"2.0","id":1,"method":"it'\''s"}' | python3 server.py"#
                );
                assert!(what.contains("stdin"), "{what}");
                assert!(!text.contains("curl"));
            }
            other => panic!("{other:?}"),
        }
        a.handle_key(Key::Char('G'));
        match a.handle_key(Key::Char('y')) {
            Action::Copy { text, what } => {
                assert_eq!(text, r#"{"jsonrpc":"2.0","id":1,"method":"it's"}"#);
                assert!(what.contains("curl does not apply"), "{what}");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_stdio_recording_names_its_command_and_stdio_scopes_stay_apart() {
        let h = serde_json::json!({"transport": "stdio", "command": ["python3", "server.py"]});
        assert_eq!(
            crate::tui::header_endpoints(&h),
            ("stdio".to_string(), "python3 server.py".to_string())
        );
        let feed = serde_json::json!({"mode": "stdio", "command": ["npx", "x"]});
        assert_eq!(crate::tui::header_endpoints(&feed).1, "npx x");
        let proxy = serde_json::json!({"listen": "127.0.0.1:1", "upstream": "http://u"});
        assert_eq!(crate::tui::header_endpoints(&proxy).0, "127.0.0.1:1");
        let mut a = App::new("t", "l", "u", 100, 0);
        for sc in [
            "session:stdio-4413",
            "session:stdio-4422",
            "session:0f3c9a1e-77aa-4b",
        ] {
            a.apply_message(MessageIn {
                ts_ns: 1,
                exchange: 1,
                scope: sc.into(),
                c2s: true,
                kind: Kind::Notification,
                id: None,
                method: Some("n".into()),
                target: None,
                raw: "{}".into(),
                transport: crate::events::Transport::Stdio,
                batch_index: None,
            });
        }
        let shown: Vec<String> = a.rows.iter().map(Row::scope_short).collect();
        assert_eq!(shown, ["stdio-4413", "stdio-4422", "0f3c9a1e-…"]);
    }
}

//! The dashboard's state: plain data, updated by events and keys, drawn by a renderer.
//!
//! It keeps the newest `max_rows` calls (one row per JSON-RPC call or notification, each batch
//! member and each message of an SSE stream its own row) and at most `max_detail_bytes` of
//! message text for the detail pane: older rows keep their summary and lose their text first.
//!
//! It applies the bus's events as they are ([`App::apply`]) and depends on no renderer: the
//! terminal draws it (`tui::ui`), and a second renderer can drive the same state. Its rooms:
//! this file holds the state and how events change it; `row` the rows and the key they are
//! kept under; `keys` the views, selection and keys; `filter` the filter
//! language; `export` what a row is copied or exported as; `servers` many sources under
//! `watch`; `info` what a session declared and used; `load` what a recording or a feed's
//! header becomes.

use crate::events::Direction;
use crate::events::Event;
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

mod export;
mod filter;
mod held;
mod info;
mod keys;
mod load;
mod row;
mod servers;
#[cfg(test)]
mod tests;

pub use crate::filter::Filter;
pub use held::{HeldKey, HeldPane, HeldRow};
pub use keys::{Action, Key, View};
pub use load::header_endpoints;
pub use row::{
    scope_group, transport_label, Ex, HttpMeta, Poll, Round, Rounds, Row, RowOutcome, TaskRow,
};
pub use servers::ServerInfo;

#[derive(Clone, Debug, Default)]
pub struct MethodStats {
    pub count: u64,
    pub errors: u64,
    pub latencies: Vec<u64>,
}

/// One line of the Anomalies view, and the call row it was pinned on (Enter goes there).
#[derive(Clone, Debug)]
pub struct AnomalyRow {
    pub ts_ns: u64,
    pub code: String,
    pub scope: String,
    pub message: String,
    pub row: Option<u64>,
}

/// Where Enter came from (Esc goes back): the view, its filter and selection.
#[derive(Clone, Debug)]
pub struct Back {
    pub view: View,
    pub filter: String,
    pub selected: usize,
    pub follow: bool,
}

#[derive(Clone, Debug, Default)]
pub struct SessionStats {
    pub calls: u64,
    pub errors: u64,
    pub anomalies: u64,
    pub last_ns: u64,
}

/// The results' tokens the methods and sessions views show ([`App::token_totals`]).
#[derive(Debug, Default)]
pub struct TokenTotals {
    /// Per method and tool: (p50, p95).
    pub methods: std::collections::HashMap<String, (u32, u32)>,
    /// Per session, as the sessions view keys them: the sum.
    pub sessions: std::collections::HashMap<String, u64>,
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
    /// A past recording on screen: how long it spans (the header says so instead of `up`).
    pub recorded_ns: Option<u64>,
    pub rows: VecDeque<Row>,
    /// Rows folded into a later round of their call (kept, not listed).
    folded: usize,
    /// MCP tasks seen created (by source and `taskId`): the row of the call that created each,
    /// whose status a poll or a `notifications/tasks` moves.
    task_rows: std::collections::HashMap<(u32, Text), u64>,
    pub max_rows: usize,
    pub max_detail_bytes: usize,
    detail_bytes: usize,
    next_seq: u64,
    /// (scope, direction of the request, id) → seq of the pending row.
    /// Duplicated ids queue up in order.
    open: HashMap<(Text, Direction, Text), VecDeque<u64>>,
    /// exchange → seqs of its call rows (to attach stream messages).
    by_exchange: HashMap<Ex, Vec<u64>>,
    /// The newest messages applied: (exchange, direction, batch index, the row each went to).
    /// The inspector publishes a message's findings right after it, so an anomaly about a
    /// frame is pinned on the row of the frame it names.
    recent: VecDeque<(Ex, Direction, Option<u32>, Option<u64>)>,
    /// Calls that ended (an outcome came), since the start; the list's rows also hold
    /// notifications, counted in `notifications_total`.
    pub calls_total: u64,
    pub notifications_total: u64,
    pub errors_total: u64,
    pub anomalies_total: u64,
    /// Faults `[[fault]]` rules injected (not anomalies: nothing the server did).
    pub faults_total: u64,
    /// Calls ended per second, newest last (60 s).
    pub per_second: VecDeque<u64>,
    current_second: u64,
    /// Recent latencies (µs) for the percentiles.
    pub recent_latencies: VecDeque<u64>,
    /// Per method; at most `max_rows` methods (the least used go first).
    pub methods: HashMap<Text, MethodStats>,
    /// Per MCP session; at most `max_rows` (the least recently seen go first).
    pub sessions: HashMap<Text, SessionStats>,
    /// `method_tokens` and `session_tokens` as last walked, and when (`now_ns`): a walk over
    /// every row the list holds runs at most once a second, not on every frame.
    tokens_walked: std::sync::Mutex<Option<(u64, std::sync::Arc<TokenTotals>)>>,
    /// All traffic without a session, together.
    pub no_session: SessionStats,
    pub anomaly_rows: VecDeque<AnomalyRow>,
    /// exchange → its HTTP request line and status (dropped with the exchange's rows).
    pub http: HashMap<Ex, HttpMeta>,
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
    /// The filter in force when `/` opened the input: what Esc puts back (the list filters as
    /// the input is typed, whenever what is typed so far reads).
    filter_before: String,
    /// A message for the status line: set through `say`, it clears itself `STATUS_FOR` later;
    /// set directly (a standing hint), it stays.
    pub status: String,
    status_at: Option<u64>,
    pub no_color: bool,
    pub page: usize,
    /// The servers `watch` shows (empty for one source).
    pub servers: Vec<ServerInfo>,
    /// The newest stderr lines of stdio servers: (time, server, line).
    pub stderr: VecDeque<(u64, Text, Text)>,
    /// Set by Enter on an Anomalies, Methods or Sessions row; Esc returns to it.
    pub back: Option<Back>,
    /// Shown in place of the empty call list (the demo's instructions).
    pub intro: Vec<String>,
    /// The help popup's first line shown.
    pub help_scroll: u16,
    /// The detail pane over the whole list (`z`).
    pub detail_full: bool,
    /// Text searched in the detail pane (`/` there), its input while typed, and the match `n`
    /// has reached.
    pub find: String,
    pub find_input: String,
    pub editing_find: bool,
    pub find_hit: usize,
    /// The declarations popup (`i`).
    pub info: bool,
    /// The intercept: its filter, what it holds (`held`).
    pub held: HeldPane,

    /// The exchanges whose headers are kept, oldest first.
    with_headers: VecDeque<Ex>,
}

const SSE_STREAM_KEEP: usize = 64;
/// Exchanges whose headers the detail pane can show (about 0.5 KiB each).
pub const HEADERS_KEEP: usize = 4096;
const RECENT_KEEP: usize = 64;
/// The transport of a row made from a call whose messages were not seen.
const FROM_CALL: &str = "-";
/// The Sessions view's line for traffic without an MCP session.
pub const NO_SESSION: &str = "(no session)";
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
            recorded_ns: None,
            rows: VecDeque::new(),
            folded: 0,
            task_rows: Default::default(),
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
            faults_total: 0,
            per_second: VecDeque::from(vec![0; 60]),
            current_second: now_ns / 1_000_000_000,
            recent_latencies: VecDeque::new(),
            methods: HashMap::default(),
            sessions: HashMap::default(),
            tokens_walked: Default::default(),
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
            filter_before: String::new(),
            status: String::new(),
            status_at: None,
            no_color: false,
            page: 10,
            servers: Vec::new(),
            stderr: VecDeque::new(),
            back: None,
            intro: Vec::new(),
            help_scroll: 0,
            detail_full: false,
            find: String::new(),
            find_input: String::new(),
            editing_find: false,
            find_hit: 0,
            info: false,
            held: HeldPane::default(),

            with_headers: VecDeque::new(),
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
                self.folded -= usize::from(old.folded);
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
                if let Some(rounds) = &mut r.rounds {
                    for x in &mut rounds.list {
                        x.request = None;
                        x.reply = None;
                    }
                }
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

    /// Applies one bus event (of the one source).
    pub fn apply(&mut self, ev: &Event) {
        self.apply_in(0, ev);
    }

    /// Applies one event of source `src` (see [`Ex`]): the state reads the bus's events as
    /// they are, live, from a feed or from a recording — no renderer's types in between.
    pub(super) fn apply_in(&mut self, src: u32, ev: &Event) {
        match ev {
            Event::Message(m) => self.on_message(src, m),
            Event::Call(c) => self.on_call(src, c),
            Event::Http(crate::events::HttpEvent::Request {
                exchange,
                method,
                path,
                session,
                protocol_version,
                headers,
                ..
            }) => {
                let x = Self::ex(src, *exchange);
                self.apply_http_request(
                    x,
                    method,
                    path,
                    session.as_deref(),
                    protocol_version.as_deref(),
                );
                self.keep_headers(x, headers, true);
            }
            Event::Http(crate::events::HttpEvent::Response {
                exchange,
                status,
                content_type,
                headers,
                ..
            }) => {
                let x = Self::ex(src, *exchange);
                self.apply_http_response(x, *status, content_type.as_ref().map(|c| c.to_string()));
                self.keep_headers(x, headers, false);
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
                    Self::ex(src, *exchange),
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
            }) => self.apply_binary(*ts, Self::ex(src, *exchange), *direction, *len),
            Event::Http(crate::events::HttpEvent::AgentCard {
                ts,
                exchange,
                path,
                card,
            }) => self.apply_agent_card(*ts, Self::ex(src, *exchange), path, card),
            Event::Anomaly(a) => self.on_anomaly(src, a),
            Event::Stderr(e) => self.apply_stderr(src, e.ts, &e.line),
            Event::Fault(f) => {
                let scope = self.scope_of(src, &f.scope);
                let id = f.id.as_ref().map(|i| i.to_json_text());
                self.apply_fault(
                    Self::ex(src, f.exchange),
                    &scope,
                    id.as_deref()
                        .map(|i| (i, f.direction.unwrap_or(Direction::ClientToServer))),
                    &format!("{}: {} — {}", f.injected, f.action, f.detail),
                );
            }
            _ => {}
        }
    }

    /// A row of its own for an HTTP exchange that carries no JSON-RPC but matters (kind
    /// `http`): `-http` in the filter (or `h`) hides these rows.
    fn http_row(&mut self, ts_ns: u64, exchange: Ex, method: String, status: u16) -> Row {
        let seq = self.next_seq;
        self.next_seq += 1;
        Row {
            seq,
            ts_ns,
            exchange,
            scope: self.scope_of(exchange.src, &crate::events::Scope::Exchange(exchange.n)),
            direction: Direction::ClientToServer,
            method: method.into(),
            target: None,
            id: Text::from(""),
            outcome: RowOutcome::Http(status),
            latency_us: None,
            size: 0,
            anomalies: vec![],
            anomaly_text: vec![],
            injected: vec![],
            request: None,
            reply: None,
            stream: vec![],
            transport: "http",
            server: self.server_label(exchange.src),
            rounds: None,
            folded: false,
            task: None,
            tokens: Default::default(),
            conversation: None,
        }
    }

    /// An authorization exchange around an MCP endpoint: an HTTP row, its challenge in the
    /// detail pane.
    pub fn apply_auth(
        &mut self,
        ts_ns: u64,
        exchange: Ex,
        method: &str,
        path: &str,
        status: u16,
        www_authenticate: Option<&str>,
    ) {
        let mut row = self.http_row(ts_ns, exchange, format!("{method} {path}"), status);
        row.request = www_authenticate.map(|w| format!("WWW-Authenticate: {w}").into());
        self.push_row(row);
    }

    /// An A2A agent card: an HTTP row (`GET PATH`, what the card says of the agent as its
    /// target), the card pretty in its detail.
    pub fn apply_agent_card(&mut self, ts_ns: u64, exchange: Ex, path: &str, card: &str) {
        let facts = crate::inspect::a2a::CardFacts::read(card);
        let pretty = serde_json::from_str::<serde_json::Value>(card)
            .ok()
            .and_then(|v| serde_json::to_string_pretty(&v).ok())
            .unwrap_or_else(|| card.to_string());
        let mut row = self.http_row(ts_ns, exchange, format!("GET {path}"), 200);
        row.target = Some(format!("A2A agent card: {}", facts.describe()).into());
        row.size = card.len();
        row.reply = Some(pretty.into());
        self.push_row(row);
    }

    /// A WebSocket's binary message: a row of its own (shown, not parsed).
    pub fn apply_binary(&mut self, ts_ns: u64, exchange: Ex, direction: Direction, len: u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        let row = Row {
            seq,
            ts_ns,
            exchange,
            scope: self.scope_of(exchange.src, &crate::events::Scope::Exchange(exchange.n)),
            direction,
            method: Text::from("(binary message)"),
            target: None,
            id: Text::from(""),
            outcome: RowOutcome::Notification,
            latency_us: None,
            size: len as usize,
            anomalies: vec![],
            anomaly_text: vec![],
            injected: vec![],
            request: Some(
                format!("a binary message of {len} bytes: not JSON-RPC, not parsed").into(),
            ),
            reply: None,
            stream: vec![],
            transport: "ws",
            server: self.server_label(exchange.src),
            rounds: None,
            folded: false,
            task: None,
            tokens: Default::default(),
            conversation: None,
        };
        self.push_row(row);
    }

    pub fn apply_http_request(
        &mut self,
        exchange: Ex,
        method: &str,
        path: &str,
        session: Option<&str>,
        protocol_version: Option<&str>,
    ) {
        if self.http.len() >= self.max_rows * 2 {
            // Exchanges without rows (GET pages…) must not accumulate.
            let min = exchange.n.saturating_sub(self.max_rows as u64);
            self.http.retain(|k, _| k.src != exchange.src || k.n > min);
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

    /// Keeps an exchange's headers for the detail pane, for the newest [`HEADERS_KEEP`]
    /// exchanges (an older one keeps its request line and status).
    fn keep_headers(&mut self, exchange: Ex, headers: &crate::events::Headers, request: bool) {
        let pairs = headers.pairs();
        if pairs.is_empty() {
            return;
        }
        let Some(h) = self.http.get_mut(&exchange) else {
            return;
        };
        if h.request_headers.is_empty() && h.response_headers.is_empty() {
            self.with_headers.push_back(exchange);
        }
        if request {
            h.request_headers = pairs;
        } else {
            h.response_headers = pairs;
        }
        while self.with_headers.len() > HEADERS_KEEP {
            if let Some(old) = self.with_headers.pop_front() {
                if let Some(h) = self.http.get_mut(&old) {
                    h.request_headers = Vec::new();
                    h.response_headers = Vec::new();
                }
            }
        }
    }

    pub fn apply_http_response(&mut self, exchange: Ex, status: u16, content_type: Option<String>) {
        if let Some(h) = self.http.get_mut(&exchange) {
            h.status = Some(status);
            h.content_type = content_type;
        }
    }

    /// Applies one message of source `src` (live or from a recording).
    fn on_message(&mut self, src: u32, m: &crate::events::MessageEvent) {
        let dir = m.direction;
        let c2s = dir == Direction::ClientToServer;
        let exchange = Self::ex(src, m.exchange);
        let scope = self.scope_of(src, &m.scope);
        let id: Option<Text> = m.id.as_ref().map(|i| i.to_json_text().into());
        let method: Option<Text> = m.method.clone();
        let raw: Text = String::from_utf8_lossy(&m.message).into();
        match m.kind {
            Kind::Request | Kind::Notification | Kind::Invalid
                if method.is_some() || m.kind != Kind::Invalid =>
            {
                let seq = self.next_seq;
                self.next_seq += 1;
                let is_call = m.kind != Kind::Notification && id.is_some();
                if !is_call {
                    self.notifications_total += self.sample.max(1);
                }
                let stream_target = match (&method, &m.target, m.transport) {
                    (
                        Some(method),
                        Some(target),
                        crate::events::Transport::Ws | crate::events::Transport::Stdio,
                    ) => Some(Text::from(format!("{method} [{target}]"))),
                    _ => None,
                };
                let id = id.unwrap_or_else(|| Text::from(""));
                let row = Row {
                    seq,
                    ts_ns: m.ts,
                    exchange,
                    scope: scope.clone(),
                    direction: dir,
                    method: method.unwrap_or_else(|| Text::from("")),
                    target: m.target.clone(),
                    id: id.clone(),
                    outcome: if is_call {
                        RowOutcome::Pending
                    } else {
                        RowOutcome::Notification
                    },
                    latency_us: None,
                    size: raw.len(),
                    anomalies: vec![],
                    anomaly_text: vec![],
                    injected: vec![],
                    request: Some(raw.clone()),
                    reply: None,
                    stream: vec![],
                    transport: transport_label(m.transport),
                    server: self.server_label(src),
                    rounds: None,
                    folded: false,
                    task: None,
                    tokens: Default::default(),
                    conversation: None,
                };
                self.push_row(row);
                self.note_recent(exchange, dir, m.batch_index, Some(seq));
                if !c2s
                    && matches!(
                        m.method.as_deref(),
                        Some("notifications/tasks" | "notifications/tasks/status")
                    )
                {
                    self.task_notified(src, seq, &raw);
                }
                if is_call {
                    self.open
                        .entry((scope.clone(), dir, id))
                        .or_default()
                        .push_back(seq);
                    self.by_exchange.entry(exchange).or_default().push(seq);
                } else if !c2s && m.kind == Kind::Notification && stream_target.is_some() {
                    // A subscription's notification (a WebSocket's `eth_subscription`, …):
                    // counted in the methods view under its subscription.
                    if let Some(key) = stream_target {
                        self.method_mut(&key).count += self.sample.max(1);
                    }
                } else if !c2s
                    && matches!(
                        m.transport,
                        crate::events::Transport::Sse | crate::events::Transport::LegacySse
                    )
                {
                    // A server notification inside a stream: also shown with the calls it serves.
                    self.show_with_exchange(exchange, &raw);
                }
                self.session_touch(&scope, m.ts);
            }
            _ => {
                // A response: attach to its call.
                let req_dir = dir.reverse();
                let key = (scope, req_dir, id.unwrap_or_else(|| Text::from("")));
                let seq = self.open.get(&key).and_then(|q| {
                    q.iter()
                        .copied()
                        .find(|s| self.row(*s).is_some_and(|r| r.reply.is_none()))
                });
                self.note_recent(exchange, dir, m.batch_index, seq);
                if let Some(seq) = seq {
                    self.task_handle(src, seq, &raw);
                    self.task_listed(src, seq, &raw);
                    self.add_detail(seq, |r| {
                        r.size += raw.len();
                        r.reply = Some(raw);
                    });
                } else {
                    // A reply the inspector could not attach to a call (id null, an unknown id,
                    // not JSON): shown with the calls of its exchange, so its body is never lost.
                    self.show_with_exchange(exchange, &raw);
                }
            }
        }
    }

    /// A `tools/call` answered with a task handle: its row shows the task's status from now on
    /// (`task:working`), before any poll.
    fn task_handle(&mut self, src: u32, seq: u64, raw: &str) {
        if !raw.contains("\"task\"") || self.row(seq).is_none_or(|r| &*r.method != "tools/call") {
            return;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(raw) else {
            return;
        };
        let Some((t, _)) = crate::rpc::task_in(&v["result"]) else {
            return;
        };
        let (Some(id), Some(status)) = (t["taskId"].as_str(), t["status"].as_str()) else {
            return;
        };
        let id = Text::from(id);
        if self.task_rows.len() >= self.max_rows {
            let rows = &self.rows;
            let first = rows.front().map_or(0, |r| r.seq);
            self.task_rows.retain(|_, s| *s >= first);
        }
        self.task_rows.insert((src, id.clone()), seq);
        if let Some(row) = self.row_mut(seq) {
            let task = row.task.get_or_insert_with(Default::default);
            task.id = id;
            task.status = Text::from(status);
        }
    }

    /// A `tasks/list` reply (2025-11-25): each listed task with a row here shows the status the
    /// list gives it (the list itself stays a row of its own: it is about many tasks).
    fn task_listed(&mut self, src: u32, seq: u64, raw: &str) {
        if self.row(seq).is_none_or(|r| &*r.method != "tasks/list") {
            return;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(raw) else {
            return;
        };
        let Some(tasks) = v["result"]["tasks"].as_array() else {
            return;
        };
        for t in tasks {
            let (Some(id), Some(status)) = (t["taskId"].as_str(), t["status"].as_str()) else {
                continue;
            };
            let Some(&row) = self.task_rows.get(&(src, Text::from(id))) else {
                continue;
            };
            if let Some(task) = self.row_mut(row).and_then(|r| r.task.as_mut()) {
                task.status = Text::from(status);
            }
        }
    }

    /// A server's `notifications/tasks` (`…/tasks/status`): the task's row shows its status,
    /// and the notification is folded under it like a poll.
    fn task_notified(&mut self, src: u32, me: u64, raw: &str) {
        let Ok(v) = serde_json::from_str::<serde_json::Value>(raw) else {
            return;
        };
        let p = &v["params"];
        let (Some(id), Some(status)) = (p["taskId"].as_str(), p["status"].as_str()) else {
            return;
        };
        let Some(&seq) = self.task_rows.get(&(src, Text::from(id))) else {
            return;
        };
        if self.row(seq).is_none_or(|r| r.task.is_none()) {
            return;
        }
        let Some(n) = self.row_mut(me) else { return };
        n.folded = true;
        let poll = Poll {
            method: n.method.clone(),
            id: n.id.clone(),
            status: Some(Text::from(status)),
            latency_us: None,
            anomalies: n.anomalies.clone(),
            reply: n.request.take(),
        };
        self.folded += 1;
        if let Some(task) = self.row_mut(seq).and_then(|r| r.task.as_mut()) {
            task.status = Text::from(status);
            task.polls.push(poll);
        }
    }

    /// Remembers which row a message went to (a bounded window: findings follow their message
    /// closely, interleaved at most with other exchanges' events).
    fn note_recent(&mut self, exchange: Ex, dir: Direction, batch: Option<u32>, seq: Option<u64>) {
        if self.recent.len() >= RECENT_KEEP {
            self.recent.pop_front();
        }
        self.recent.push_back((exchange, dir, batch, seq));
    }

    /// Shows a message with the calls of its exchange (in their detail's stream list).
    fn show_with_exchange(&mut self, exchange: Ex, raw: &Text) {
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

    /// A scope's statistics: an MCP session's or an A2A conversation's (`a2a:CONTEXT`) own,
    /// made on first sight, or — for traffic without a session, scoped per exchange — the one
    /// "(no session)" line. The session map is
    /// held to `max_rows` sessions: past that, the least recently seen eighth goes (amortized:
    /// the sort runs once per `max_rows / 8` new sessions).
    fn session_mut(&mut self, scope: &Text) -> &mut SessionStats {
        if scope.starts_with(crate::events::STATELESS_PREFIX) {
            // A stateless client's exchanges are its session here.
            let g = Text::from(scope_group(scope));
            if !self.sessions.contains_key(&g) {
                make_room(&mut self.sessions, self.max_rows, |s| s.last_ns);
            }
            return self.sessions.entry(g).or_default();
        }
        if !scope.starts_with("session:") && !scope.starts_with("a2a:") {
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

    /// Applies a call's outcome: its row gets the outcome and every code the inspector raised
    /// on it. A call whose request row is not here (a feed attached after the call began, a
    /// display event dropped) gets a row of its own, made from the call.
    fn on_call(&mut self, src: u32, c: &crate::events::CallEvent) {
        // Under sampling each call shown stands for `sample` calls in the counters.
        let w = self.sample.max(1);
        let (ts, latency_us, outcome) = (c.ts, c.latency_us, RowOutcome::from(&c.outcome));
        let scope = self.scope_of(src, &c.scope);
        let method: Text = c.method.clone();
        self.calls_total += w;
        // As the error counts mean it (`events::call_failed`): not the expected discovery
        // fallback, and a tool's own failure too.
        let err = match &outcome {
            RowOutcome::Error(code) => !crate::events::expected_error(&method, *code),
            RowOutcome::Result | RowOutcome::InputRequired => c.anomalies.contains(&"TOOL_ERROR"),
            o => o.is_error(),
        };
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
        // Per tool, prompt or resource: `tools/call search` apart from `tools/call fetch`.
        let key = match crate::events::stat_key(&method[..], c.target.as_deref()) {
            std::borrow::Cow::Owned(k) => Text::from(k),
            std::borrow::Cow::Borrowed(_) => method.clone(),
        };
        // A round that asked for input is part of the call that continues it: the methods view
        // counts that call once, its latency the server's time over every round (the client's
        // time between rounds is not the server's).
        let round = outcome == RowOutcome::InputRequired;
        if !round {
            let ms = self.method_mut(&key);
            ms.count += w;
            if err {
                ms.errors += w;
            }
        }
        let method_key = key;
        // An A2A call counts in its conversation's line, not its exchange's.
        let conversation = c.context.as_ref().map(|c| Text::from(format!("a2a:{c}")));
        let s = self.session_mut(conversation.as_ref().unwrap_or(&scope));
        s.calls += w;
        if err {
            s.errors += w;
        }
        s.last_ns = s.last_ns.max(ts);
        if let Some(sv) = self.server(src) {
            sv.calls += w;
            sv.errors += u64::from(err) * w;
            sv.last_ns = sv.last_ns.max(ts);
        }
        let key = (scope, c.direction, Text::from(c.id.to_json_text()));
        let seq = self.open.get_mut(&key).and_then(VecDeque::pop_front);
        if self.open.get(&key).is_some_and(VecDeque::is_empty) {
            self.open.remove(&key);
        }
        let codes = &c.anomalies;
        let continues = c.continues.as_ref().map(|i| Text::from(i.to_json_text()));
        let seq = match seq {
            Some(seq) => {
                if let Some(r) = self.row_mut(seq) {
                    r.outcome = outcome;
                    r.latency_us = latency_us;
                    r.conversation = conversation;
                    // An ended call is marked with exactly the codes the inspector gave it (the
                    // ones pinned while it waited were provisional); findings about its
                    // exchange stay in its detail.
                    r.anomalies.clear();
                    for code in codes {
                        if !r.anomalies.iter().any(|a| a == code) {
                            r.anomalies.push(code.to_string());
                        }
                    }
                }
                seq
            }
            None => {
                let seq = self.next_seq;
                self.next_seq += 1;
                let started = ts.saturating_sub(latency_us.unwrap_or(0) * 1000);
                let (scope, direction, id) = key;
                let mut anomalies: Vec<String> = Vec::new();
                for code in codes {
                    if !anomalies.iter().any(|a| a == code) {
                        anomalies.push(code.to_string());
                    }
                }
                self.push_row(Row {
                    seq,
                    ts_ns: started,
                    exchange: Self::ex(src, c.exchange),
                    scope,
                    direction,
                    method,
                    target: c.target.clone(),
                    id,
                    outcome,
                    latency_us,
                    size: 0,
                    anomalies,
                    anomaly_text: vec![],
                    injected: vec![],
                    request: None,
                    reply: None,
                    stream: vec![],
                    transport: FROM_CALL,
                    server: self.server_label(src),
                    rounds: None,
                    folded: false,
                    task: None,
                    tokens: Default::default(),
                    conversation,
                })
            }
        };
        if let Some(prev) = continues {
            self.fold_round(seq, &prev);
        }
        if !round {
            let server = match self.row(seq).and_then(|r| r.rounds.as_ref()) {
                Some(rounds) => Some(rounds.server_us()),
                None => latency_us,
            };
            if let Some(l) = server {
                let ms = self.method_mut(&method_key);
                if ms.latencies.len() >= 2048 {
                    ms.latencies.remove(0);
                }
                ms.latencies.push(l);
            }
        }
        if let Some(t) = &c.task {
            self.on_task(src, seq, t);
        }
    }

    /// A call of a task: a poll (update, cancel) is folded under the row of the call that
    /// created the task, whose status it shows; the creating call's own end gives the task's
    /// last status.
    fn on_task(&mut self, src: u32, seq: u64, t: &crate::events::TaskRef) {
        let status: Option<Text> = t.status.clone();
        let (Some(ox), Some(oid)) = (t.origin_exchange, t.origin_id.as_ref()) else {
            if let Some(r) = self.row_mut(seq) {
                let task = r.task.get_or_insert_with(|| {
                    Box::new(TaskRow {
                        id: t.id.clone(),
                        ..TaskRow::default()
                    })
                });
                if let Some(s) = status {
                    task.status = s;
                }
            }
            return;
        };
        let origin = Self::ex(src, ox);
        let oid = Text::from(oid.to_json_text());
        let Some(i) = self
            .rows
            .iter()
            .rposition(|r| r.exchange == origin && r.id == oid && !r.folded && r.seq < seq)
        else {
            return; // the creating call was not seen here: the poll stays a row of its own
        };
        let Some(me) = self.row_mut(seq) else { return };
        me.folded = true;
        let poll = Poll {
            method: me.method.clone(),
            id: me.id.clone(),
            status: status.clone(),
            latency_us: me.latency_us,
            anomalies: me.anomalies.clone(),
            reply: me.reply.take(),
        };
        self.folded += 1;
        let r = &mut self.rows[i];
        let task = r.task.get_or_insert_with(|| {
            Box::new(TaskRow {
                id: t.id.clone(),
                status: Text::from("working"),
                polls: Vec::new(),
            })
        });
        if let Some(s) = status {
            task.status = s;
        }
        task.polls.push(poll);
    }

    /// A retry ended: the round it continues (the newest `input_required` row of its session or
    /// client with that id) is folded into it — listed no more, its request and reply kept in
    /// this row's rounds — and the call's latency runs from the first round's request.
    fn fold_round(&mut self, seq: u64, prev: &Text) {
        let Some(me) = self.row(seq) else { return };
        let group = scope_group(&me.scope).to_string();
        let direction = me.direction;
        let Some(i) = self.rows.iter().rposition(|r| {
            r.seq < seq
                && !r.folded
                && r.outcome == RowOutcome::InputRequired
                && r.id == *prev
                && r.direction == direction
                && scope_group(&r.scope) == group
        }) else {
            return;
        };
        let old = &mut self.rows[i];
        old.folded = true;
        // A row with rounds of its own shows their wall time: its own round's server time was
        // kept apart when they were folded into it.
        let mut rounds = old.rounds.take().map(|b| *b).unwrap_or_else(|| Rounds {
            started_ns: old.ts_ns,
            list: Vec::new(),
            earlier_us: 0,
            own_us: old.latency_us,
        });
        let own = rounds.own_us;
        rounds.list.push(Round {
            id: old.id.clone(),
            request: old.request.take(),
            reply: old.reply.take(),
            latency_us: own,
        });
        rounds.earlier_us += own.unwrap_or(0);
        self.folded += 1;
        if let Some(r) = self.row_mut(seq) {
            rounds.own_us = r.latency_us;
            let end = r.ts_ns + r.latency_us.unwrap_or(0) * 1000;
            r.latency_us = Some(end.saturating_sub(rounds.started_ns) / 1000);
            r.rounds = Some(Box::new(rounds));
        }
    }

    /// Applies an anomaly: counted, listed, and pinned on the row of the message it concerns —
    /// the message just applied when the finding names that frame (the inspector publishes a
    /// message's findings right after it), else the newest row of its scope with its id, else
    /// the newest row of its exchange.
    fn on_anomaly(&mut self, src: u32, a: &crate::events::AnomalyEvent) {
        let scope = self.scope_of(src, &a.scope);
        let exchange = Self::ex(src, a.exchange);
        self.anomalies_total += 1;
        self.session_mut(&scope).anomalies += 1;
        if let Some(sv) = self.server(src) {
            sv.anomalies += 1;
        }
        if self.anomaly_rows.len() >= self.max_rows {
            self.anomaly_rows.pop_front();
        }
        let id: Option<Text> = a.id.as_ref().map(|i| i.to_json_text().into());
        let id = id.as_ref();
        let same_id = |r: &Row| id.is_none_or(|i| r.id == *i);
        let just_applied = a.direction.and_then(|d| {
            let &(_, dir, batch, seq) = self.recent.iter().rev().find(|m| m.0 == exchange)?;
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
                    r.scope == scope && r.id == *i && a.direction.is_none_or(|d| r.direction == d)
                })
                .or_else(|| newest(&|r| r.scope == scope && r.id == *i)),
                None => newest(&|r| r.exchange == exchange),
            }
        });
        if let Some(seq) = target {
            if let Some(r) = self.row_mut(seq) {
                // A call that ended carries its call's codes (`on_call`); a waiting call
                // shows what was flagged so far, a notification or stray reply all of it.
                let open = r.outcome == RowOutcome::Pending || r.id.is_empty();
                if open && !r.anomalies.iter().any(|c| c == a.code) {
                    r.anomalies.push(a.code.to_string());
                }
                r.anomaly_text.push(format!("{}: {}", a.code, a.message));
            }
        }
        self.anomaly_rows.push_back(AnomalyRow {
            ts_ns: a.ts,
            code: a.code.to_string(),
            scope: scope.to_string(),
            message: a.message.clone(),
            row: target,
        });
    }

    /// A fault a rule injected: marked on its call's row (the newest with its scope and id,
    /// else the exchange's), counted apart from anomalies.
    /// A fault on the call `id` of direction `dir` (a server's request for `ServerToClient`:
    /// its id is in the server's id space), or on the exchange when it names no call.
    pub fn apply_fault(
        &mut self,
        exchange: Ex,
        scope: &Text,
        id: Option<(&str, Direction)>,
        text: &str,
    ) {
        self.faults_total += 1;
        let target = self.rows.iter_mut().rev().take(10_000).find(|r| match id {
            Some((i, dir)) => r.scope == *scope && &*r.id == i && r.direction == dir,
            None => r.exchange == exchange,
        });
        if let Some(r) = target {
            r.injected.push(text.to_string());
        }
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

    /// The Methods view's lines: the most called first.
    pub fn methods_sorted(&self) -> Vec<(&Text, &MethodStats)> {
        let mut list: Vec<(&Text, &MethodStats)> = self.methods.iter().collect();
        list.sort_by(|a, b| b.1.count.cmp(&a.1.count).then(a.0.cmp(b.0)));
        list
    }

    /// The tokens of the results the list holds, per method and tool and per session (see
    /// [`TokenTotals`]), walked at most once a second of `now_ns` (counting a row's result is
    /// remembered on the row; walking every row on each frame would not be).
    pub fn token_totals(&self) -> std::sync::Arc<TokenTotals> {
        let mut walked = self
            .tokens_walked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some((at, totals)) = &*walked {
            if self.now_ns.saturating_sub(*at) < 1_000_000_000 {
                return totals.clone();
            }
        }
        let totals = std::sync::Arc::new(TokenTotals {
            methods: self.method_tokens(),
            sessions: self
                .session_tokens()
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
        });
        *walked = Some((self.now_ns, totals.clone()));
        totals
    }

    /// The tokens of the results the list holds, per method and tool as the methods view keys
    /// them: (p50, p95) of the newest 1,000 of each. Counted as they are shown
    /// (`Row::result_tokens`: once per row, by the renderer, never on the proxy's path).
    pub fn method_tokens(&self) -> std::collections::HashMap<String, (u32, u32)> {
        const EACH: usize = 1000;
        let mut per: std::collections::HashMap<(Text, Option<Text>), Vec<u32>> =
            std::collections::HashMap::new();
        for r in self.rows.iter().rev().filter(|r| r.reply.is_some()) {
            let target = r
                .target
                .clone()
                .filter(|_| crate::events::stat_keeps_target(&r.method));
            let v = per.entry((r.method.clone(), target)).or_default();
            if v.len() < EACH {
                v.extend(r.result_tokens());
            }
        }
        per.into_iter()
            .filter(|(_, v)| !v.is_empty())
            .map(|((m, t), mut v)| {
                v.sort_unstable();
                let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
                let key = crate::events::stat_key(&m, t.as_deref()).into_owned();
                (key, (at(0.5), at(0.95)))
            })
            .collect()
    }

    /// The tokens of the results the list holds, summed per session as the sessions view keys
    /// them (a stateless client's group, an MCP session, an A2A conversation, or "(no
    /// session)"); counted as `method_tokens` counts them.
    pub fn session_tokens(&self) -> std::collections::HashMap<&str, u64> {
        let mut per: std::collections::HashMap<&str, u64> = std::collections::HashMap::new();
        for r in self.rows.iter().filter(|r| r.reply.is_some()) {
            let key = if let Some(c) = &r.conversation {
                c
            } else if r.scope.starts_with(crate::events::STATELESS_PREFIX) {
                scope_group(&r.scope)
            } else if r.scope.starts_with("session:") {
                &r.scope
            } else {
                NO_SESSION
            };
            *per.entry(key).or_default() += u64::from(r.result_tokens().unwrap_or(0));
        }
        per
    }

    /// The Sessions view's lines: the most recently seen first, then "(no session)".
    pub fn sessions_sorted(&self) -> Vec<(&str, &SessionStats)> {
        let mut list: Vec<(&str, &SessionStats)> =
            self.sessions.iter().map(|(k, v)| (&**k, v)).collect();
        list.sort_by(|a, b| b.1.last_ns.cmp(&a.1.last_ns).then(a.0.cmp(b.0)));
        if self.no_session.last_ns > 0 {
            list.push((NO_SESSION, &self.no_session));
        }
        list
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

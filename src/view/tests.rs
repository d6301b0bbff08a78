//! The state's transitions, without a terminal.

use super::*;
use crate::events::{AnomalyEvent, CallEvent, MessageEvent, Outcome, Scope, Severity};
use crate::rpc::Id;

// The tests feed the state the bus's own events, through `App::apply` as the dashboard does;
// these builders spell an event with the fields a test cares about.

/// A message, as the tests spell it.
#[derive(Clone)]
struct Msg {
    ts_ns: u64,
    exchange: u64,
    scope: Text,
    c2s: bool,
    kind: Kind,
    id: Option<Text>,
    method: Option<Text>,
    target: Option<Text>,
    raw: Text,
    transport: crate::events::Transport,
    batch_index: Option<u32>,
}

/// A call's end, as the tests spell it.
struct CallEnd {
    ts_ns: u64,
    exchange: u64,
    scope: Text,
    direction: Direction,
    id: Text,
    method: Text,
    target: Option<Text>,
    outcome: RowOutcome,
    latency_us: Option<u64>,
    anomalies: Vec<Text>,
    continues: Option<Text>,
    task: Option<crate::events::TaskRef>,
}

/// A finding, as the tests spell it.
struct Finding {
    ts_ns: u64,
    exchange: u64,
    scope: Text,
    direction: Option<Direction>,
    batch_index: Option<u32>,
    id: Option<Text>,
    code: Text,
    message: String,
}

fn scope(t: &str) -> Scope {
    Scope::parse(t).unwrap_or_else(|| Scope::Session(t.into()))
}

fn id(t: &str) -> Id {
    serde_json::from_str(t).unwrap_or(Id::Str(t.into()))
}

fn leak(t: &str) -> &'static str {
    Box::leak(t.to_string().into_boxed_str())
}

fn outcome(o: RowOutcome) -> Outcome {
    match o {
        RowOutcome::Result
        | RowOutcome::Pending
        | RowOutcome::Notification
        | RowOutcome::Http(_) => Outcome::Result,
        RowOutcome::InputRequired => Outcome::InputRequired,
        RowOutcome::Error(code) => Outcome::Error {
            code,
            message: "m".into(),
        },
        RowOutcome::Refused(rule) => Outcome::Refused { rule },
        RowOutcome::Rejected(status) => Outcome::Rejected { status },
        RowOutcome::Missing(reason) => Outcome::Missing { reason },
        RowOutcome::Cancelled(reason) => Outcome::Cancelled { reason },
        RowOutcome::Abandoned(reason) => Outcome::Abandoned { reason },
    }
}

impl From<Msg> for Event {
    fn from(m: Msg) -> Event {
        Event::Message(MessageEvent {
            ts: m.ts_ns,
            exchange: m.exchange,
            scope: scope(&m.scope),
            direction: if m.c2s {
                Direction::ClientToServer
            } else {
                Direction::ServerToClient
            },
            transport: m.transport,
            kind: m.kind,
            id: m.id.map(|i| id(&i)),
            method: m.method,
            target: m.target,
            batch_index: m.batch_index,
            batch_len: None,
            sse_id: None,
            message: bytes::Bytes::copy_from_slice(m.raw.as_bytes()),
            unparsed: false,
            binary: false,
        })
    }
}

impl From<CallEnd> for Event {
    fn from(c: CallEnd) -> Event {
        Event::Call(CallEvent {
            ts: c.ts_ns,
            exchange: c.exchange,
            scope: scope(&c.scope),
            direction: c.direction,
            method: c.method,
            target: c.target,
            id: id(&c.id),
            outcome: outcome(c.outcome),
            latency_us: c.latency_us,
            anomalies: c.anomalies.iter().map(|a| leak(a)).collect(),
            request_index: None,
            response_index: None,
            continues: c.continues.map(|i| id(&i)),
            task: c.task.map(Box::new),
            context: None,
            trace: None,
        })
    }
}

impl From<Finding> for Event {
    fn from(a: Finding) -> Event {
        Event::Anomaly(AnomalyEvent {
            ts: a.ts_ns,
            exchange: a.exchange,
            scope: scope(&a.scope),
            code: leak(&a.code),
            severity: Severity::Warning,
            id: a.id.map(|i| id(&i)),
            method: None,
            direction: a.direction,
            batch_index: a.batch_index,
            message: a.message,
        })
    }
}

/// The tests' shorthands, each through [`App::apply`].
trait Feed {
    fn apply_message(&mut self, m: Msg);
    fn apply_call_at(&mut self, c: CallEnd);
    fn apply_anomaly(&mut self, a: Finding);
    #[allow(clippy::too_many_arguments)]
    fn apply_call(
        &mut self,
        scope: Text,
        dir: Direction,
        id: Text,
        method: &Text,
        outcome: RowOutcome,
        latency_us: Option<u64>,
        ts: u64,
    );
}

impl Feed for App {
    fn apply_message(&mut self, m: Msg) {
        self.apply(&m.into());
    }
    fn apply_call_at(&mut self, c: CallEnd) {
        self.apply(&c.into());
    }
    fn apply_anomaly(&mut self, a: Finding) {
        self.apply(&a.into());
    }
    fn apply_call(
        &mut self,
        scope: Text,
        direction: Direction,
        id: Text,
        method: &Text,
        outcome: RowOutcome,
        latency_us: Option<u64>,
        ts: u64,
    ) {
        self.apply_call_at(CallEnd {
            ts_ns: ts,
            exchange: 0,
            scope,
            direction,
            id,
            method: method.clone(),
            target: None,
            outcome,
            latency_us,
            anomalies: vec![],
            continues: None,
            task: None,
        });
    }
}

fn msg(ex: u64, c2s: bool, kind: Kind, id: Option<&str>, method: Option<&str>, raw: &str) -> Msg {
    Msg {
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

/// A call's request and its result, in exchange `ex` (the id is `ex` too).
fn exchange_pair(a: &mut App, ex: u64, method: &str, request: &str, result: &str) {
    let n = ex.to_string();
    a.apply_message(msg(
        ex,
        true,
        Kind::Request,
        Some(&n),
        Some(method),
        request,
    ));
    a.apply_message(msg(ex, false, Kind::Result, Some(&n), None, result));
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
    assert_eq!(a.view, View::Stderr);
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
    a.apply_auth(
        1,
        Ex { src: 0, n: 7 },
        "POST",
        "/mcp",
        401,
        Some(r#"Bearer realm="x""#),
    );
    a.apply_auth(
        2,
        Ex { src: 0, n: 8 },
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
fn a_results_tokens_are_counted_when_shown_and_per_tool_in_the_methods_view() {
    let mut a = App::new("t", "l", "u", 100, 0);
    let results = [
        r#"{"content":[{"type":"text","text":"hello world"}]}"#,
        r#"{"content":[{"type":"text","text":"a much longer answer, with several more words in it"}]}"#,
    ];
    for (i, result) in results.iter().enumerate() {
        let id = (i + 1).to_string();
        let ex = i as u64 + 1;
        a.apply_message(msg(
            ex,
            true,
            Kind::Request,
            Some(&id),
            Some("tools/call"),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"say"}}}}"#
            ),
        ));
        // Before its reply: nothing counted, nothing remembered.
        assert_eq!(a.rows.back().unwrap().result_tokens(), None);
        a.apply_message(msg(
            ex,
            false,
            Kind::Result,
            Some(&id),
            None,
            &format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#),
        ));
    }
    let want: Vec<u32> = results
        .iter()
        .map(|r| {
            let v: serde_json::Value = serde_json::from_str(r).unwrap();
            crate::tokens::Tokenizer::default().count_json(&v).tokens as u32
        })
        .collect();
    let got: Vec<Option<u32>> = a.rows.iter().map(|r| r.result_tokens()).collect();
    assert_eq!(got, vec![Some(want[0]), Some(want[1])]);
    assert!(want[1] > want[0]);
    // Per session: both results, in "(no session)" (plain JSON-RPC exchanges).
    let per_session = a.session_tokens();
    assert_eq!(
        per_session.get(super::NO_SESSION).copied(),
        Some(u64::from(want[0] + want[1]))
    );
    let toks = a.method_tokens();
    assert_eq!(
        toks.get("tools/call"),
        Some(&(want[1], want[1])),
        "{toks:?}"
    );
    // The views' totals: walked once a second, not on every frame.
    let first = a.token_totals();
    assert_eq!(first.methods, toks);
    assert_eq!(
        first.sessions.get(super::NO_SESSION).copied(),
        Some(u64::from(want[0] + want[1]))
    );
    a.apply_message(msg(
        9,
        true,
        Kind::Request,
        Some("9"),
        Some("tools/call"),
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"other"}}"#,
    ));
    a.apply_message(msg(
        9,
        false,
        Kind::Result,
        Some("9"),
        None,
        r#"{"jsonrpc":"2.0","id":9,"result":{"content":[]}}"#,
    ));
    assert!(std::sync::Arc::ptr_eq(&first, &a.token_totals()));
    a.now_ns += 1_000_000_000;
    let later = a.token_totals();
    assert!(!std::sync::Arc::ptr_eq(&first, &later));
    assert_ne!(
        later.methods, first.methods,
        "the third result is in: {later:?}"
    );
}

/// A2A calls count in their conversation's line of the sessions view (`a2a:CONTEXT`, known when
/// the call ends), with their results' tokens; `session:` finds a conversation's rows.
#[test]
fn a2a_calls_are_grouped_by_their_conversation() {
    let mut a = App::new("t", "l", "u", 100, 0);
    for (ex, context) in [
        (1u64, Some("c-1")),
        (2, Some("c-1")),
        (3, Some("c-2")),
        (4, None),
    ] {
        let n = ex.to_string();
        exchange_pair(
            &mut a,
            ex,
            "SendMessage",
            &format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"SendMessage","params":{{}}}}"#),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{n},"result":{{"message":{{"messageId":"m{n}","role":"ROLE_AGENT","parts":[{{"text":"hi"}}]}}}}}}"#
            ),
        );
        let mut c = CallEvent::for_test("SendMessage", id(&n), Outcome::Result, 10);
        c.exchange = ex;
        c.scope = Scope::Exchange(ex);
        c.context = context.map(Into::into);
        a.apply(&Event::Call(c));
    }
    let sessions: Vec<(String, u64)> = a
        .sessions_sorted()
        .iter()
        .map(|(k, s)| (k.to_string(), s.calls))
        .collect();
    assert!(sessions.contains(&("a2a:c-1".into(), 2)), "{sessions:?}");
    assert!(sessions.contains(&("a2a:c-2".into(), 1)), "{sessions:?}");
    assert!(
        sessions.contains(&(super::NO_SESSION.into(), 1)),
        "a call with no conversation: {sessions:?}"
    );
    let tokens = a.session_tokens();
    assert!(
        tokens["a2a:c-1"] > 0 && tokens["a2a:c-1"] == 2 * tokens["a2a:c-2"],
        "{tokens:?}"
    );
    a.filter = "session:a2a:c-1".into();
    let shown: Vec<u64> = a.visible().iter().map(|r| r.exchange.n).collect();
    assert_eq!(shown, [1, 2]);
}

#[test]
fn an_a2a_agent_card_is_an_http_row_with_the_card_in_its_detail() {
    let mut a = App::new("t", "l", "u", 100, 0);
    let card = r#"{"name":"travel agent","version":"2.1","capabilities":{"streaming":true,"pushNotifications":true},"supportedInterfaces":[{"protocolVersion":"1.0"}],"skills":[{"id":"flights"},{"id":"hotels"}]}"#;
    a.apply_agent_card(1, Ex { src: 0, n: 3 }, "/.well-known/agent-card.json", card);
    let rows = a.visible();
    assert_eq!(rows.len(), 1);
    assert_eq!(&*rows[0].method, "GET /.well-known/agent-card.json");
    assert_eq!(
        rows[0].target.as_deref(),
        Some("A2A agent card: travel agent 2.1 (A2A 1.0; streaming; push notifications; 2 skills: flights, hotels)")
    );
    assert_eq!(rows[0].outcome.label(), "HTTP 200");
    let detail = rows[0].reply.as_deref().unwrap();
    assert!(
        detail.contains("\n  \"name\": \"travel agent\""),
        "pretty: {detail}"
    );
    // `h` hides it with the other HTTP rows.
    a.handle_key(Key::Char('h'));
    assert_eq!(a.visible_len(), 0);
}

#[test]
fn the_info_popup_of_an_a2a_call_holds_what_was_used_against_the_agents_card() {
    let mut a = App::new("t", "l", "u", 100, 0);
    let card = r#"{"name":"quiet agent","version":"1","capabilities":{"streaming":false},"supportedInterfaces":[{"protocolVersion":"1.0"}],"skills":[{"id":"s1"}]}"#;
    a.apply_agent_card(1, Ex { src: 0, n: 1 }, "/.well-known/agent-card.json", card);
    for (ex, method) in [
        (2, "SendMessage"),
        (3, "SendStreamingMessage"),
        (4, "SendMessage"),
    ] {
        a.apply_message(msg(
            ex,
            true,
            Kind::Request,
            Some("1"),
            Some(method),
            &format!(r#"{{"jsonrpc":"2.0","id":1,"method":"{method}"}}"#),
        ));
    }
    a.follow = false;
    a.selected = 2;
    a.handle_key(Key::Char('i'));
    let lines = a.session_info().join("\n");
    for want in [
        "A2A agent",
        "quiet agent 1 (A2A 1.0; no streaming; 1 skill: s1)",
        "streaming: no; push notifications: not said",
        "  ✓ SendMessage ×2",
        "✗ SendStreamingMessage ×1 — the card says the agent does not",
    ] {
        assert!(lines.contains(want), "{want} missing in:\n{lines}");
    }
}

#[test]
fn a_reply_that_matches_no_call_is_shown_with_its_exchange() {
    let mut a = App::new("t", "l", "u", 100, 0);
    let msg = |c2s: bool, kind: Kind, id: Option<&str>, raw: &str| Msg {
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
            a.apply_message(Msg {
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
    a.apply_call_at(CallEnd {
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
        continues: None,
        task: None,
    });
    assert_eq!(a.rows.len(), 1);
    let r = &a.rows[0];
    assert_eq!((r.exchange.n, &*r.method, &*r.id), (7, "tools/call", "3"));
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
    assert_eq!((r.size, r.transport, r.exchange.n), (5, "ws", 7));
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
        a.apply_message(Msg {
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
    a.apply_message(Msg {
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
        a.apply_call_at(CallEnd {
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
            continues: None,
            task: None,
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
    // As it was typed, the list was filtered by what read so far (`tol`, as text); `tol:` never
    // applied. Esc puts back the filter from before.
    assert_eq!(a.filter, "tol");
    a.handle_key(Key::Esc);
    assert_eq!(a.filter, "");
}

/// The list filters as the filter is typed, and Enter keeps it.
#[test]
fn the_list_filters_as_the_filter_is_typed() {
    let mut a = app_for_filters();
    let all = a.visible_len();
    a.handle_key(Key::Char('/'));
    for c in "status:error".chars() {
        a.handle_key(Key::Char(c));
    }
    assert_eq!(a.filter, "status:error", "in force before Enter");
    let errors = a.visible_len();
    assert!(errors < all && errors > 0, "{errors} of {all}");
    a.handle_key(Key::Enter);
    assert!(!a.editing_filter);
    assert_eq!(
        (a.filter.as_str(), a.visible_len()),
        ("status:error", errors)
    );
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
        a.apply_message(Msg {
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
        crate::view::header_endpoints(&h),
        ("stdio".to_string(), "python3 server.py".to_string())
    );
    let feed = serde_json::json!({"mode": "stdio", "command": ["npx", "x"]});
    assert_eq!(crate::view::header_endpoints(&feed).1, "npx x");
    let proxy = serde_json::json!({"listen": "127.0.0.1:1", "upstream": "http://u"});
    assert_eq!(crate::view::header_endpoints(&proxy).0, "127.0.0.1:1");
    let mut a = App::new("t", "l", "u", 100, 0);
    for sc in [
        "session:stdio-4413",
        "session:stdio-4422",
        "session:0f3c9a1e-77aa-4b",
    ] {
        a.apply_message(Msg {
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

#[test]
fn many_sources_keep_their_calls_apart_and_the_server_filter_finds_them() {
    let line = |l: &str| crate::record::reader::parse_line(l).unwrap();
    let req = |ts: u64| {
        line(&format!(
            r#"{{"event":"message","ts":{ts},"exchange":1,"scope":"exchange:1","direction":"c2s","transport":"json","kind":"request","id":1,"method":"add","message":{{"jsonrpc":"2.0","id":1,"method":"add"}}}}"#
        ))
    };
    let call = |ts: u64, outcome: &str| {
        line(&format!(
            r#"{{"event":"call","ts":{ts},"exchange":1,"scope":"exchange:1","direction":"c2s","method":"add","id":1,"outcome":{outcome},"latency_us":5}}"#
        ))
    };
    let mut a = App::new("w", "hub", "h", 100, 0);
    let server = |name: &str, label: &str| ServerInfo {
        name: name.into(),
        label: label.into(),
        live: true,
        ..Default::default()
    };
    let one = a.add_server(server("weather-1", "weather"));
    let two = a.add_server(server("git-2", "git"));
    // Both processes number their first exchange 1 and their first call id 1.
    a.apply_from(one, &req(1));
    a.apply_from(two, &req(2));
    a.apply_from(two, &call(3, r#""error","code":-32000,"message":"x""#));
    a.apply_from(one, &call(4, r#""result""#));
    assert_eq!(a.rows.len(), 2, "one row per call, not merged");
    let by = |label: &str| a.rows.iter().find(|r| &*r.server == label).unwrap();
    assert_eq!(by("weather").outcome, RowOutcome::Result);
    assert_eq!(by("git").outcome, RowOutcome::Error(-32000));
    assert_eq!(by("git").scope_short(), "git");
    assert_ne!(by("git").scope, by("weather").scope);
    assert_eq!((a.servers[1].calls, a.servers[1].errors), (1, 1));
    a.filter = "server:weather".into();
    assert_eq!(a.visible().len(), 1);
    a.filter = "server:git-*".into();
    assert_eq!(&*a.visible()[0].server, "git");
    a.filter.clear();
    // The servers' list: Enter shows one server's calls.
    a.view = View::Sessions;
    a.servers[0].live = false;
    assert_eq!(&*a.servers_sorted()[0].name, "git-2", "live servers first");
    a.handle_key(Key::Enter);
    assert_eq!((a.view, a.filter.as_str()), (View::Calls, "server:git-2"));
    assert_eq!(a.visible().len(), 1);
    // Stderr lines keep their server.
    a.apply_from(
        one,
        &line(r#"{"event":"stderr","ts":5,"scope":"session:weather-1","line":"listening"}"#),
    );
    assert_eq!(
        a.stderr.back().map(|s| (&*s.1, &*s.2)),
        Some(("weather", "listening"))
    );
}

/// Two tools called in one session, one failing with a finding; returns the state.
fn app_with_tools() -> App {
    let mut a = App::new("t", "l", "u", 100, 0);
    for (ex, id, tool) in [(1u64, "1", "add"), (2, "2", "echo"), (3, "3", "add")] {
        a.apply_message(Msg {
            ts_ns: ex * 1_000_000_000,
            exchange: ex,
            scope: "session:abc".into(),
            c2s: true,
            kind: Kind::Request,
            id: Some(id.into()),
            method: Some("tools/call".into()),
            target: Some(tool.into()),
            raw: format!(r#"{{"id":{id},"method":"tools/call"}}"#).into(),
            transport: crate::events::Transport::Json,
            batch_index: None,
        });
        if ex == 3 {
            a.apply_anomaly(Finding {
                ts_ns: ex * 1_000_000_000,
                exchange: ex,
                scope: "session:abc".into(),
                direction: Some(Direction::ClientToServer),
                batch_index: None,
                id: Some(id.into()),
                code: "MCP_INPUT_SCHEMA".into(),
                message: "b is missing".into(),
            });
        }
        a.apply_call_at(CallEnd {
            ts_ns: ex * 1_000_000_000 + 5_000,
            exchange: ex,
            scope: "session:abc".into(),
            direction: Direction::ClientToServer,
            id: id.into(),
            method: "tools/call".into(),
            target: Some(tool.into()),
            outcome: if ex == 3 {
                RowOutcome::Error(-32602)
            } else {
                RowOutcome::Result
            },
            latency_us: Some(5),
            anomalies: if ex == 3 {
                vec!["MCP_INPUT_SCHEMA".into()]
            } else {
                vec![]
            },
            continues: None,
            task: None,
        });
    }
    a
}

#[test]
fn enter_on_a_summary_opens_the_calls_behind_it_and_esc_comes_back() {
    let mut a = app_with_tools();
    // Methods are per tool.
    let names: Vec<String> = a
        .methods_sorted()
        .iter()
        .map(|(k, _)| k.to_string())
        .collect();
    assert_eq!(names, ["tools/call add", "tools/call echo"]);
    assert_eq!(a.methods["tools/call add"].errors, 1);

    // From an Anomalies row to its call, detail open.
    a.view = View::Anomalies;
    a.handle_key(Key::Enter);
    assert_eq!(a.view, View::Calls);
    let r = a.selected_row().unwrap();
    assert_eq!((&*r.id, r.target.as_deref()), ("3", Some("add")));
    assert!(a.detail);
    a.handle_key(Key::Esc); // the detail first
    a.handle_key(Key::Esc); // then back
    assert_eq!(a.view, View::Anomalies);

    // From a Methods row to that tool's calls.
    a.view = View::Methods;
    a.selected = 0;
    a.handle_key(Key::Enter);
    assert_eq!(
        (a.view, a.filter.as_str()),
        (View::Calls, "method:tools/call tool:add")
    );
    let ids: Vec<&str> = a.visible().iter().map(|r| &*r.id).collect();
    assert_eq!(ids, ["1", "3"]);
    a.handle_key(Key::Esc);
    assert_eq!((a.view, a.filter.as_str()), (View::Methods, ""));

    // From a Sessions row to its calls.
    a.view = View::Sessions;
    a.selected = 0;
    a.handle_key(Key::Enter);
    assert_eq!(a.filter, "session:abc");
    assert_eq!(a.visible().len(), 3);
    a.handle_key(Key::Esc);
    assert_eq!(a.view, View::Sessions);
    // Esc again, with nowhere to go back to: clears the filter, as before.
    a.filter = "error".into();
    a.view = View::Calls;
    a.handle_key(Key::Esc);
    assert!(a.filter.is_empty());
}

#[test]
fn the_help_popup_scrolls_and_any_other_key_closes_it() {
    let mut a = App::new("t", "l", "u", 100, 0);
    a.handle_key(Key::Char('?'));
    a.handle_key(Key::Down);
    a.handle_key(Key::Char('j'));
    assert!(a.help);
    assert_eq!(a.help_scroll, 2);
    a.handle_key(Key::Up);
    assert_eq!(a.help_scroll, 1);
    a.handle_key(Key::Char('x'));
    assert!(!a.help);
    assert_eq!(a.help_scroll, 0);
}

#[test]
fn the_info_popup_holds_what_was_used_against_what_was_declared() {
    let mut a = App::new("t", "l", "u", 100, 0);
    let s = "session:s1";
    let m = |ex: u64, c2s: bool, kind: Kind, id: Option<&str>, method: Option<&str>, raw: &str| {
        let mut m = msg(ex, c2s, kind, id, method, raw);
        m.scope = s.into();
        m
    };
    a.apply_message(m(1, true, Kind::Request, Some("0"), Some("initialize"),
        r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{"roots":{}},"clientInfo":{"name":"cli","version":"1.0"}}}"#));
    a.apply_message(m(1, false, Kind::Result, Some("0"), None,
        r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"srv","version":"2.1"}}}"#));
    a.apply_call(
        s.into(),
        Direction::ClientToServer,
        "0".into(),
        &"initialize".into(),
        RowOutcome::Result,
        Some(5),
        1,
    );
    a.apply_message(m(
        2,
        true,
        Kind::Request,
        Some("1"),
        Some("tools/call"),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
    ));
    a.apply_message(m(
        3,
        false,
        Kind::Notification,
        None,
        Some("notifications/message"),
        r#"{"jsonrpc":"2.0","method":"notifications/message"}"#,
    ));
    a.follow = false;
    a.selected = 0;
    a.handle_key(Key::Char('i'));
    assert!(a.info);
    let lines = a.session_info().join("\n");
    for want in [
        "session: session:s1",
        "cli 1.0 — asks protocol 2025-06-18",
        "capabilities: roots",
        "srv 2.1 — protocol 2025-06-18",
        "capabilities: tools",
        "✓ tools: tools/call ×1",
        "✗ logging: notifications/message ×1 — not declared by the server",
    ] {
        assert!(lines.contains(want), "{want} missing in:\n{lines}");
    }
    a.handle_key(Key::Char('x'));
    assert!(!a.info, "any key closes it");
}

#[test]
fn find_in_the_detail_steps_through_matches_and_esc_clears_it_first() {
    let mut a = app_with_calls();
    a.handle_key(Key::Enter);
    assert!(a.detail);
    a.handle_key(Key::Char('/'));
    assert!(
        a.editing_find && !a.editing_filter,
        "/ in the detail finds, not filters"
    );
    for c in "jsonrpc".chars() {
        a.handle_key(Key::Char(c));
    }
    a.handle_key(Key::Enter);
    assert_eq!((a.find.as_str(), a.find_hit), ("jsonrpc", 0));
    a.handle_key(Key::Char('n'));
    assert_eq!(a.find_hit, 1);
    a.handle_key(Key::Char('z'));
    assert!(a.detail_full);
    a.handle_key(Key::Esc);
    assert!(a.find.is_empty() && a.detail, "the find goes first");
    a.handle_key(Key::Esc);
    assert!(!a.detail && !a.detail_full);
}

#[test]
fn the_detail_has_both_heads_headers_for_the_newest_exchanges() {
    let mut a = App::new("t", "l", "u", 10_000, 0);
    let line = |l: &str| crate::record::reader::parse_line(l).unwrap();
    for x in 1..=(HEADERS_KEEP as u64 + 1) {
        a.apply(&line(&format!(r#"{{"event":"http","phase":"request","ts":{x},"exchange":{x},"method":"POST","path":"/mcp","headers":[["content-type","application/json"],["authorization","[REDACTED]"]]}}"#)));
        a.apply(&line(&format!(r#"{{"event":"http","phase":"response","ts":{x},"exchange":{x},"status":200,"headers":[["mcp-session-id","s1"]]}}"#)));
    }
    let newest = &a.http[&Ex {
        src: 0,
        n: HEADERS_KEEP as u64 + 1,
    }];
    assert_eq!(
        newest.request_headers,
        [
            ("content-type".to_string(), "application/json".to_string()),
            ("authorization".to_string(), "[REDACTED]".to_string())
        ]
    );
    assert_eq!(
        newest.response_headers,
        [("mcp-session-id".to_string(), "s1".to_string())]
    );
    let oldest = &a.http[&Ex { src: 0, n: 1 }];
    assert!(
        oldest.request_headers.is_empty(),
        "bounded: the oldest exchange's went"
    );
    assert_eq!(oldest.status, Some(200), "its request line and status stay");
}

#[test]
fn an_injected_fault_marks_its_call_and_counts_apart_from_anomalies() {
    let mut a = app_with_calls();
    let before = a.anomalies_total;
    a.apply(&Event::Fault(crate::events::FaultEvent {
        ts: 1,
        exchange: 1,
        scope: crate::events::Scope::Exchange(1),
        injected: "lost".into(),
        action: "drop",
        method: Some("add".into()),
        id: Some(crate::rpc::Id::Num("1".into())),
        message: None,
        detail: "the reply dropped".into(),
        direction: None,
    }));
    assert_eq!(a.faults_total, 1);
    assert_eq!(a.anomalies_total, before, "not an anomaly");
    let row = a.rows.iter().find(|r| &*r.id == "1").unwrap();
    assert_eq!(row.injected, ["lost: drop — the reply dropped"]);
    assert!(a
        .rows
        .iter()
        .filter(|r| &*r.id != "1")
        .all(|r| r.injected.is_empty()));
    // A fault on the server's request 1 marks that request's row, not the client's call 1.
    a.apply_message(msg(
        1,
        false,
        Kind::Request,
        Some("1"),
        Some("sampling/createMessage"),
        r#"{"jsonrpc":"2.0","method":"sampling/createMessage","params":{},"id":1}"#,
    ));
    a.apply(&Event::Fault(crate::events::FaultEvent {
        ts: 2,
        exchange: 1,
        scope: crate::events::Scope::Exchange(1),
        injected: "refused".into(),
        action: "error",
        method: Some("sampling/createMessage".into()),
        id: Some(crate::rpc::Id::Num("1".into())),
        message: None,
        detail: "answered by rpctap in the client's place".into(),
        direction: Some(Direction::ServerToClient),
    }));
    let server = a
        .rows
        .iter()
        .find(|r| &*r.id == "1" && r.direction == Direction::ServerToClient)
        .unwrap();
    assert_eq!(server.injected.len(), 1, "{:?}", server.injected);
    assert!(server.injected[0].starts_with("refused: error"));
    let client = a
        .rows
        .iter()
        .find(|r| &*r.id == "1" && r.direction == Direction::ClientToServer)
        .unwrap();
    assert_eq!(client.injected, ["lost: drop — the reply dropped"]);
}

fn held_row(n: u64, direction: Direction, method: &str, id: &str, frame: &str) -> HeldRow {
    HeldRow {
        n,
        direction,
        method: method.into(),
        target: None,
        id: id.into(),
        scope: "exchange:9".into(),
        held_ms: 1_000,
        left_ms: 59_000,
        shown: frame.into(),
        frame: frame.into(),
    }
}

#[test]
fn intercept_keys_set_the_filter_and_decide_the_selected_held_message() {
    let mut a = app_with_calls();
    // Without an intercept (a recording, attach, watch): `I` says where it works.
    assert_eq!(a.handle_key(Key::Char('I')), Action::None);
    assert!(!a.held.editing);
    assert!(a.status.contains("not over attach"), "{}", a.status);
    a.held.available = true;
    a.handle_key(Key::Char('I'));
    assert!(a.held.editing);
    for c in "bogus:x".chars() {
        a.handle_key(Key::Char(c));
    }
    assert_eq!(a.handle_key(Key::Enter), Action::None, "not applied");
    assert!(a.held.editing, "kept open with the reason");
    assert!(a.status.contains("intercept not set"), "{}", a.status);
    for _ in 0..7 {
        a.handle_key(Key::Backspace);
    }
    for c in "method:add".chars() {
        a.handle_key(Key::Char(c));
    }
    assert_eq!(
        a.handle_key(Key::Enter),
        Action::Intercept(Some("method:add".into()))
    );
    assert_eq!(a.held.filter, "method:add");
    // Nothing held: the verdict keys say so.
    assert_eq!(a.handle_key(Key::Char('F')), Action::None);
    assert!(a.status.contains("nothing is held"));
    let call = r#"{"jsonrpc":"2.0","method":"add","params":[5,5],"id":7}"#;
    a.set_held(
        vec![
            held_row(4, Direction::ClientToServer, "add", "7", call),
            held_row(
                5,
                Direction::ServerToClient,
                "add",
                "8",
                r#"{"jsonrpc":"2.0","id":8,"result":1}"#,
            ),
        ],
        0,
    );
    assert_eq!(
        a.handle_key(Key::Char('D')),
        Action::Held {
            n: 4,
            what: HeldKey::Drop
        }
    );
    // E opens the frame, readable.
    match a.handle_key(Key::Char('E')) {
        Action::Held {
            n: 4,
            what: HeldKey::Edit(t),
        } => assert!(t.contains("\n") && t.contains("\"params\""), "{t}"),
        other => panic!("{other:?}"),
    }
    // A: the earlier answer to `add` (3), with this call's id.
    match a.handle_key(Key::Char('A')) {
        Action::Held {
            n: 4,
            what: HeldKey::Answer(t),
        } => {
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            assert_eq!(v["id"], 7);
            assert_eq!(v["result"], 3);
        }
        other => panic!("{other:?}"),
    }
    // `]` selects the next; a reply is not answered.
    a.handle_key(Key::Char(']'));
    assert_eq!(a.held_selected().map(|h| h.n), Some(5));
    assert_eq!(a.handle_key(Key::Char('A')), Action::None);
    assert!(a.status.contains("answers a held call"), "{}", a.status);
    assert_eq!(
        a.handle_key(Key::Char('F')),
        Action::Held {
            n: 5,
            what: HeldKey::Forward
        }
    );
    // The selection follows its message when the list changes under it.
    a.set_held(
        vec![held_row(5, Direction::ServerToClient, "add", "8", "{}")],
        0,
    );
    assert_eq!(a.held_selected().map(|h| h.n), Some(5));
    // An empty filter turns it off.
    a.handle_key(Key::Char('I'));
    for _ in 0.."method:add".len() {
        a.handle_key(Key::Backspace);
    }
    assert_eq!(a.handle_key(Key::Enter), Action::Intercept(None));
    assert!(a.held.filter.is_empty());
}

/// The error counts mean what users mean: a tool's own failure (`isError`, `TOOL_ERROR`) is one;
/// a pre-2026 server's `-32601` to `server/discover` (the `auto` mode's fallback) is not.
#[test]
fn tool_failures_count_as_errors_and_the_discovery_fallback_does_not() {
    let mut a = App::new("t", "l", "u", 100, 0);
    let call = |ex: u64, method: &str, outcome: RowOutcome, anomalies: Vec<Text>| CallEnd {
        ts_ns: ex,
        exchange: ex,
        scope: "s".into(),
        direction: Direction::ClientToServer,
        id: ex.to_string().into(),
        method: method.into(),
        target: None,
        outcome,
        latency_us: Some(5),
        anomalies,
        continues: None,
        task: None,
    };
    a.apply_call_at(call(
        1,
        "server/discover",
        RowOutcome::Error(-32601),
        vec![],
    ));
    a.apply_call_at(call(
        2,
        "tools/call",
        RowOutcome::Result,
        vec!["TOOL_ERROR".into()],
    ));
    a.apply_call_at(call(3, "tools/call", RowOutcome::Result, vec![]));
    a.apply_call_at(call(
        4,
        "server/discover",
        RowOutcome::Error(-32603),
        vec![],
    ));
    assert_eq!((a.calls_total, a.errors_total), (4, 2));
    assert_eq!(a.methods["server/discover"].errors, 1);
    assert_eq!(a.methods["tools/call"].errors, 1);
}

/// An MCP task: the call that created it is one row from its request to the task's end, its
/// polls folded under it (listed no more), its status the last poll's.
#[test]
fn a_tasks_polls_fold_under_the_call_that_created_it() {
    use crate::events::TaskRef;
    let mut a = App::new("t", "l", "u", 100, 0);
    a.apply_message(msg(
        1,
        true,
        Kind::Request,
        Some("1"),
        Some("tools/call"),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow"}}"#,
    ));
    a.apply_message(msg(
        1,
        false,
        Kind::Result,
        Some("1"),
        None,
        r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"task","taskId":"t1","status":"working"}}"#,
    ));
    // The handle alone: the row shows the task's status, before any poll…
    let status = |a: &App| {
        let r = a.rows.iter().find(|r| !r.folded).unwrap();
        r.task.as_ref().map(|t| t.status.to_string())
    };
    assert_eq!(status(&a).as_deref(), Some("working"));
    // …and a `notifications/tasks` moves it.
    a.apply_message(msg(
        1,
        false,
        Kind::Notification,
        None,
        Some("notifications/tasks"),
        r#"{"jsonrpc":"2.0","method":"notifications/tasks","params":{"taskId":"t1","status":"input_required","inputRequests":{}}}"#,
    ));
    assert_eq!(status(&a).as_deref(), Some("input_required"));
    let poll = |status: &str| TaskRef {
        id: "t1".into(),
        status: Some(status.into()),
        origin_exchange: Some(1),
        origin_id: Some(crate::rpc::Id::Num("1".into())),
        polls: 0,
    };
    for (ex, status) in [(2, "working"), (3, "input_required"), (4, "completed")] {
        let id = ex.to_string();
        exchange_pair(
            &mut a,
            ex,
            "tasks/get",
            &format!(
                r#"{{"jsonrpc":"2.0","id":{ex},"method":"tasks/get","params":{{"taskId":"t1"}}}}"#
            ),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{ex},"result":{{"taskId":"t1","status":"{status}"}}}}"#
            ),
        );
        a.apply_call_at(CallEnd {
            ts_ns: ex * 1_000_000_000 + 1,
            exchange: ex,
            scope: format!("exchange:{ex}").into(),
            direction: Direction::ClientToServer,
            id: id.as_str().into(),
            method: "tasks/get".into(),
            target: Some("t1".into()),
            outcome: RowOutcome::Result,
            latency_us: Some(300),
            anomalies: vec![],
            continues: None,
            task: Some(poll(status)),
        });
        assert_eq!(a.visible_len(), 1, "the polls are folded");
        let r = a.rows.iter().find(|r| !r.folded).unwrap();
        assert_eq!(r.outcome, RowOutcome::Pending, "the task's call is open");
        assert_eq!(&*r.task.as_ref().unwrap().status, status);
    }
    a.apply_call_at(CallEnd {
        ts_ns: 4_000_000_002,
        exchange: 1,
        scope: "exchange:1".into(),
        direction: Direction::ClientToServer,
        id: "1".into(),
        method: "tools/call".into(),
        target: Some("slow".into()),
        outcome: RowOutcome::Result,
        latency_us: Some(3_000_000),
        anomalies: vec![],
        continues: None,
        task: Some(TaskRef {
            id: "t1".into(),
            status: Some("completed".into()),
            origin_exchange: None,
            origin_id: None,
            polls: 3,
        }),
    });
    assert_eq!(a.visible_len(), 1);
    let r = a.rows.iter().find(|r| !r.folded).unwrap();
    assert_eq!(
        (r.outcome.clone(), r.latency_us),
        (RowOutcome::Result, Some(3_000_000))
    );
    let t = r.task.as_ref().unwrap();
    // The notification and the three polls, folded under the task.
    assert_eq!((&*t.id, &*t.status, t.polls.len()), ("t1", "completed", 4));
    assert!(t.polls[3].reply.as_deref().unwrap().contains("completed"));
    assert!(detail_text(&mut a).contains("t1 · completed · 3 polls"));
}

/// The detail pane of the selected row, as drawn on a 200×60 terminal.
fn detail_text(a: &mut App) -> String {
    a.follow = false;
    a.selected = 0;
    a.handle_key(Key::Enter);
    let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(200, 60)).unwrap();
    t.draw(|f| crate::tui::ui::draw(f, a)).unwrap();
    format!("{}", t.backend())
}

/// An A2A task polled with `GetTask`: its polls folded under the message that created it and
/// counted as polls in its detail, the last poll's reply (with the task's artifacts) shown.
#[test]
fn an_a2a_tasks_get_task_polls_are_counted_in_its_detail() {
    use crate::events::TaskRef;
    let mut a = App::new("t", "l", "u", 100, 0);
    a.apply_message(msg(
        1,
        true,
        Kind::Request,
        Some("1"),
        Some("SendMessage"),
        r#"{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m1","role":"ROLE_USER","parts":[{"text":"slow"}]}}}"#,
    ));
    a.apply_message(msg(
        1,
        false,
        Kind::Result,
        Some("1"),
        None,
        r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"id":"t1","contextId":"c1","status":{"state":"TASK_STATE_WORKING"}}}}"#,
    ));
    for (ex, state) in [(2u64, "TASK_STATE_WORKING"), (3, "TASK_STATE_COMPLETED")] {
        let n = ex.to_string();
        exchange_pair(
            &mut a,
            ex,
            "GetTask",
            &format!(r#"{{"jsonrpc":"2.0","id":{ex},"method":"GetTask","params":{{"id":"t1"}}}}"#),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{ex},"result":{{"id":"t1","contextId":"c1","status":{{"state":"{state}"}},"artifacts":[{{"artifactId":"a1","parts":[{{"text":"the slow result"}}]}}]}}}}"#
            ),
        );
        let mut c = CallEvent::for_test("GetTask", id(&n), Outcome::Result, 300);
        c.exchange = ex;
        c.scope = Scope::Exchange(ex);
        c.target = Some("t1".into());
        c.task = Some(Box::new(TaskRef {
            id: "t1".into(),
            status: Some(if ex == 3 { "completed" } else { "working" }.into()),
            origin_exchange: Some(1),
            origin_id: Some(Id::Num("1".into())),
            polls: 0,
        }));
        a.apply(&Event::Call(c));
    }
    let mut c = CallEvent::for_test("SendMessage", id("1"), Outcome::Result, 900_000);
    c.task = Some(Box::new(TaskRef {
        id: "t1".into(),
        status: Some("completed".into()),
        origin_exchange: None,
        origin_id: None,
        polls: 2,
    }));
    a.apply(&Event::Call(c));
    assert_eq!(a.visible_len(), 1, "the polls are folded");
    let text = detail_text(&mut a);
    assert!(text.contains("task t1 · completed · 2 polls"), "{text}");
    assert!(text.contains("the slow result"), "the artifacts: {text}");
}

/// A multi round-trip call folded into one row keeps the server's time apart from the client's:
/// 100 ms and 200 ms of rounds around a 5 s wait on a human.
#[test]
fn a_multi_round_rows_latency_splits_the_servers_time_from_the_clients() {
    let mut a = App::new("t", "l", "u", 100, 0);
    for (ex, id, start_ms, took_ms, outcome, continues) in [
        (1u64, "1", 900u64, 100u64, RowOutcome::InputRequired, None),
        (2, "2", 6000, 200, RowOutcome::Result, Some("1")),
    ] {
        let mut m = msg(
            ex,
            true,
            Kind::Request,
            Some(id),
            Some("tools/call"),
            &format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"deploy"}}}}"#
            ),
        );
        m.ts_ns = start_ms * 1_000_000;
        m.scope = "stateless:c/1@127.0.0.1#1".into();
        a.apply_message(m);
        a.apply_call_at(CallEnd {
            ts_ns: (start_ms + took_ms) * 1_000_000,
            exchange: ex,
            scope: "stateless:c/1@127.0.0.1#1".into(),
            direction: Direction::ClientToServer,
            id: id.into(),
            method: "tools/call".into(),
            target: Some("deploy".into()),
            outcome,
            latency_us: Some(took_ms * 1000),
            anomalies: vec![],
            continues: continues.map(Text::from),
            task: None,
        });
    }
    assert_eq!(a.visible_len(), 1);
    let r = a.rows.iter().find(|r| !r.folded).unwrap();
    let rounds = r.rounds.as_ref().unwrap();
    assert_eq!(r.latency_us, Some(5_300_000), "the wall time");
    assert_eq!(rounds.server_us(), 300_000, "the server's");
    assert_eq!(rounds.list[0].latency_us, Some(100_000));
    // The methods view: one call, the server's 0.3 s.
    let m = &a.methods["tools/call deploy"];
    assert_eq!((m.count, &m.latencies[..]), (1, &[300_000][..]));
}

/// A `tasks/list` reply moves the status of each task it lists that has a row here; the list
/// keeps a row of its own.
#[test]
fn a_task_list_moves_the_rows_of_the_tasks_it_lists() {
    let mut a = App::new("t", "l", "u", 100, 0);
    let mut say = |ex: u64, req: bool, kind: Kind, method: Option<&str>, body: &str| {
        let id = ex.to_string();
        a.apply_message(msg(ex, req, kind, Some(&id), method, body));
    };
    say(
        1,
        true,
        Kind::Request,
        Some("tools/call"),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"slow","task":{}}}"#,
    );
    say(
        1,
        false,
        Kind::Result,
        None,
        r#"{"jsonrpc":"2.0","id":1,"result":{"task":{"taskId":"t1","status":"working"}}}"#,
    );
    say(
        2,
        true,
        Kind::Request,
        Some("tasks/list"),
        r#"{"jsonrpc":"2.0","id":2,"method":"tasks/list"}"#,
    );
    say(
        2,
        false,
        Kind::Result,
        None,
        r#"{"jsonrpc":"2.0","id":2,"result":{"tasks":[{"taskId":"t0","status":"failed"},{"taskId":"t1","status":"input_required"}]}}"#,
    );
    let rows: Vec<_> = a.rows.iter().filter(|r| !r.folded).collect();
    assert_eq!(rows.len(), 2, "the call and the list");
    let status = rows[0].task.as_ref().map(|t| t.status.to_string());
    assert_eq!(status.as_deref(), Some("input_required"));
    assert!(rows[1].task.is_none());
}

//! Screens of the dashboard at 80×24, 120×40 and 200×50, one per view (and the demo's
//! getting-started panel), with deterministic state (fixed timestamps and ids), rendered by
//! ratatui's TestBackend and compared with insta snapshots.

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use rpctap::tui::app::{App, Key, MessageIn, RowOutcome};

#[allow(clippy::too_many_arguments)]
fn m(
    ts_s: u64,
    ex: u64,
    scope: &str,
    c2s: bool,
    kind: &'static str,
    id: Option<&str>,
    method: Option<&str>,
    target: Option<&str>,
    raw: &str,
) -> MessageIn {
    MessageIn {
        ts_ns: 1_796_000_000_000_000_000 + ts_s * 1_000_000_000 + 123_000_000,
        exchange: ex,
        scope: scope.into(),
        c2s,
        kind: serde_json::from_value(serde_json::Value::String(kind.into())).unwrap(),
        id: id.map(Into::into),
        method: method.map(Into::into),
        target: target.map(Into::into),
        raw: raw.into(),
        transport: if scope.starts_with("session:") {
            rpctap::events::Transport::Sse
        } else {
            rpctap::events::Transport::Json
        },
        batch_index: None,
    }
}

fn app() -> App {
    let t0 = 1_796_000_000_000_000_000;
    let mut a = App::new(
        "rpctap demo",
        "127.0.0.1:8080",
        "http://127.0.0.1:9000/",
        100_000,
        t0,
    );
    let s = "session:3f2a9c0d11aa4b7e";
    a.apply_message(m(
        1,
        1,
        "exchange:1",
        true,
        "request",
        Some("1"),
        Some("subtract"),
        None,
        r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42,"subtrahend":23},"id":1}"#,
    ));
    a.apply_message(m(
        1,
        1,
        "exchange:1",
        false,
        "result",
        Some("1"),
        None,
        None,
        r#"{"jsonrpc":"2.0","id":1,"result":19}"#,
    ));
    a.apply_call(
        "exchange:1".into(),
        rpctap::events::Direction::ClientToServer,
        "1".into(),
        &"subtract".into(),
        RowOutcome::Result,
        Some(1_250),
        t0,
    );
    a.apply_message(m(
        2,
        2,
        "exchange:2",
        true,
        "request",
        Some("\"3\""),
        Some("nope"),
        None,
        r#"{"jsonrpc":"2.0","method":"nope","id":"3"}"#,
    ));
    a.apply_message(m(
        2,
        2,
        "exchange:2",
        false,
        "error",
        Some("\"3\""),
        None,
        None,
        r#"{"jsonrpc":"2.0","id":"3","error":{"code":-32601,"message":"Method not found"}}"#,
    ));
    a.apply_call(
        "exchange:2".into(),
        rpctap::events::Direction::ClientToServer,
        "\"3\"".into(),
        &"nope".into(),
        RowOutcome::Error(-32601),
        Some(980),
        t0,
    );
    a.apply_http_request(3, "POST", "/mcp", None, None);
    a.apply_http_response(3, 200, Some("text/event-stream".into()));
    a.apply_message(m(3, 3, s, true, "request", Some("5"), Some("tools/call"), Some("slow"), r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"steps":2},"_meta":{"progressToken":"p"}}}"#));
    a.apply_message(m(3, 3, s, false, "notification", None, Some("notifications/progress"), None, r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":2}}"#));
    a.apply_message(m(3, 3, s, false, "result", Some("5"), None, None, r#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"done after 2 steps"}],"isError":false}}"#));
    a.apply_call(
        s.into(),
        rpctap::events::Direction::ClientToServer,
        "5".into(),
        &"tools/call".into(),
        RowOutcome::Result,
        Some(204_000),
        t0,
    );
    a.apply_message(m(
        4,
        4,
        s,
        true,
        "request",
        Some("6"),
        Some("tools/call"),
        Some("fail"),
        r#"{"jsonrpc":"2.0","id":6,"method":"tools/call","params":{"name":"fail","arguments":{}}}"#,
    ));
    a.apply_anomaly(rpctap::tui::app::AnomalyIn {
        ts_ns: t0 + 4_000_000_000,
        exchange: 4,
        scope: s.into(),
        direction: Some(rpctap::events::Direction::ServerToClient),
        batch_index: None,
        id: Some("6".into()),
        code: "TOOL_ERROR".into(),
        message: "tool `fail` reported a failure (isError: true) inside a successful reply".into(),
    });
    a.apply_call_at(rpctap::tui::app::CallIn {
        ts_ns: t0,
        exchange: 4,
        scope: s.into(),
        direction: rpctap::events::Direction::ClientToServer,
        id: "6".into(),
        method: "tools/call".into(),
        target: Some("fail".into()),
        outcome: RowOutcome::Result,
        latency_us: Some(700),
        anomalies: vec!["TOOL_ERROR".into()],
        continues: None,
    });
    a.apply_message(m(
        5,
        5,
        "exchange:5",
        true,
        "request",
        Some("7"),
        Some("sleep"),
        None,
        r#"{"jsonrpc":"2.0","method":"sleep","params":[30000],"id":7}"#,
    ));
    a.apply_message(m(
        6,
        6,
        "exchange:6",
        true,
        "request",
        Some("8"),
        Some("add"),
        None,
        r#"{"jsonrpc":"2.0","method":"add","params":[1],"id":8}"#,
    ));
    a.apply_call(
        "exchange:6".into(),
        rpctap::events::Direction::ClientToServer,
        "8".into(),
        &"add".into(),
        RowOutcome::Refused("add=2/min".into()),
        Some(20),
        t0,
    );
    a.tick(t0 + 7_000_000_000);
    a.no_color = true;
    a
}

fn screen(a: &App, w: u16, h: u16) -> String {
    let mut t = Terminal::new(TestBackend::new(w, h)).unwrap();
    t.draw(|f| rpctap::tui::ui::draw(f, a)).unwrap();
    format!("{}", t.backend())
}

#[test]
fn every_view_at_three_sizes() {
    for (w, h) in [(80u16, 24u16), (120, 40), (200, 50)] {
        let mut a = app();
        insta::assert_snapshot!(format!("calls_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Up);
        a.handle_key(Key::Up);
        a.handle_key(Key::Up);
        a.handle_key(Key::Enter);
        insta::assert_snapshot!(format!("detail_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Enter);
        a.handle_key(Key::Tab);
        insta::assert_snapshot!(format!("anomalies_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Tab);
        insta::assert_snapshot!(format!("methods_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Tab);
        insta::assert_snapshot!(format!("sessions_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Tab);
        a.apply(&rpctap::record::reader::parse_line(
            r#"{"event":"stderr","ts":1760000007123000000,"scope":"session:stdio-4413","line":"INFO  server listening on stdio"}"#,
        ).unwrap());
        insta::assert_snapshot!(format!("stderr_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Tab);
        a.handle_key(Key::Char('/'));
        for c in "error".chars() {
            a.handle_key(Key::Char(c));
        }
        a.handle_key(Key::Enter);
        insta::assert_snapshot!(format!("filtered_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Char('?'));
        insta::assert_snapshot!(format!("help_{w}x{h}"), screen(&a, w, h));
    }
}

#[test]
fn the_demo_opens_on_its_instructions() {
    for (w, h) in [(80u16, 24u16), (120, 40), (200, 50)] {
        let mut a = App::new(
            "rpctap demo",
            "127.0.0.1:8080",
            "http://127.0.0.1:9000/",
            100,
            1_796_000_000_000_000_000,
        );
        a.intro = vec![
            "rpctap demo: proxy on http://127.0.0.1:8080 → demo server on http://127.0.0.1:9000".into(),
            "Try, in another terminal:".into(),
            "  curl -s http://127.0.0.1:8080/jsonrpc -H 'content-type: application/json' -d '{\"jsonrpc\":\"2.0\",\"method\":\"add\",\"params\":[1,2,4],\"id\":1}'".into(),
            String::new(),
            "admin on http://127.0.0.1:9100 (/healthz /readyz /metrics /events /calls); watch it with: rpctap attach 127.0.0.1:9100".into(),
        ];
        insta::assert_snapshot!(format!("intro_{w}x{h}"), screen(&a, w, h));
    }
}

#[test]
fn the_full_screen_detail_with_a_find_and_the_declarations_popup() {
    for (w, h) in [(80u16, 24u16), (120, 40), (200, 50)] {
        let mut a = app();
        for _ in 0..3 {
            a.handle_key(Key::Up);
        }
        a.handle_key(Key::Enter);
        a.handle_key(Key::Char('z'));
        a.handle_key(Key::Char('/'));
        for c in "progress".chars() {
            a.handle_key(Key::Char(c));
        }
        a.handle_key(Key::Enter);
        insta::assert_snapshot!(format!("detail_full_find_{w}x{h}"), screen(&a, w, h));
        a.handle_key(Key::Esc);
        a.handle_key(Key::Esc);
        a.handle_key(Key::Char('i'));
        insta::assert_snapshot!(format!("info_{w}x{h}"), screen(&a, w, h));
    }
}

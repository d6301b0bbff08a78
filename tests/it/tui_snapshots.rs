//! Screens of the dashboard at 80×24, 120×40 and 200×50, one per view (and the demo's
//! getting-started panel), with deterministic state (fixed timestamps and ids), rendered by
//! ratatui's TestBackend and compared with insta snapshots.

use ratatui::backend::TestBackend;
use ratatui::Terminal;
use rpctap::events::Event;
use rpctap::view::{App, Key};

const T0: u64 = 1_796_000_000_000_000_000;

/// One event as a recording line spells it, applied as `view` applies a recording's.
fn ev(line: &str) -> Event {
    rpctap::record::reader::parse_line(line).unwrap_or_else(|e| panic!("{e}: {line}"))
}

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
) -> Event {
    let mut line = serde_json::json!({
        "event": "message",
        "ts": T0 + ts_s * 1_000_000_000 + 123_000_000,
        "exchange": ex,
        "scope": scope,
        "direction": if c2s { "c2s" } else { "s2c" },
        "transport": if scope.starts_with("session:") { "sse" } else { "json" },
        "kind": kind,
        "message": serde_json::from_str::<serde_json::Value>(raw).unwrap(),
    });
    if let Some(i) = id {
        line["id"] = serde_json::from_str(i).unwrap();
    }
    if let Some(x) = method {
        line["method"] = x.into();
    }
    if let Some(t) = target {
        line["target"] = t.into();
    }
    ev(&line.to_string())
}

/// A call's end: `outcome` as a recording's `call` line spells it.
#[allow(clippy::too_many_arguments)]
fn call(
    ex: u64,
    scope: &str,
    id: &str,
    method: &str,
    target: Option<&str>,
    outcome: serde_json::Value,
    latency_us: u64,
    anomalies: &[&str],
) -> Event {
    let mut line = serde_json::json!({
        "event": "call",
        "ts": T0,
        "exchange": ex,
        "scope": scope,
        "direction": "c2s",
        "method": method,
        "id": serde_json::from_str::<serde_json::Value>(id).unwrap(),
        "latency_us": latency_us,
        "anomalies": anomalies,
    });
    if let Some(t) = target {
        line["target"] = t.into();
    }
    for (k, v) in outcome.as_object().into_iter().flatten() {
        line[k] = v.clone();
    }
    ev(&line.to_string())
}

fn app() -> App {
    let t0 = T0;
    let mut a = App::new(
        "rpctap demo",
        "127.0.0.1:8080",
        "http://127.0.0.1:9000/",
        100_000,
        t0,
    );
    let s = "session:3f2a9c0d11aa4b7e";
    a.apply(&m(
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
    a.apply(&m(
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
    let result = serde_json::json!({"outcome": "result"});
    a.apply(&call(
        1,
        "exchange:1",
        "1",
        "subtract",
        None,
        result.clone(),
        1_250,
        &[],
    ));
    a.apply(&m(
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
    a.apply(&m(
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
    let not_found =
        serde_json::json!({"outcome": "error", "code": -32601, "message": "Method not found"});
    a.apply(&call(
        2,
        "exchange:2",
        "\"3\"",
        "nope",
        None,
        not_found,
        980,
        &[],
    ));
    a.apply(&ev(
        r#"{"event":"http","phase":"request","ts":1,"exchange":3,"method":"POST","path":"/mcp"}"#,
    ));
    a.apply(&ev(r#"{"event":"http","phase":"response","ts":1,"exchange":3,"status":200,"content_type":"text/event-stream"}"#));
    a.apply(&m(3, 3, s, true, "request", Some("5"), Some("tools/call"), Some("slow"), r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"steps":2},"_meta":{"progressToken":"p"}}}"#));
    a.apply(&m(3, 3, s, false, "notification", None, Some("notifications/progress"), None, r#"{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"p","progress":1,"total":2}}"#));
    a.apply(&m(3, 3, s, false, "result", Some("5"), None, None, r#"{"jsonrpc":"2.0","id":5,"result":{"content":[{"type":"text","text":"done after 2 steps"}],"isError":false}}"#));
    a.apply(&call(
        3,
        s,
        "5",
        "tools/call",
        None,
        result.clone(),
        204_000,
        &[],
    ));
    a.apply(&m(
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
    a.apply(&ev(&format!(
        r#"{{"event":"anomaly","ts":{},"exchange":4,"scope":"{s}","direction":"s2c","id":6,"code":"TOOL_ERROR","severity":"warning","message":"tool `fail` reported a failure (isError: true) inside a successful reply"}}"#,
        t0 + 4_000_000_000
    )));
    a.apply(&call(
        4,
        s,
        "6",
        "tools/call",
        Some("fail"),
        result,
        700,
        &["TOOL_ERROR"],
    ));
    a.apply(&m(
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
    a.apply(&m(
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
    let refused = serde_json::json!({"outcome": "refused", "rule": "add=2/min"});
    a.apply(&call(6, "exchange:6", "8", "add", None, refused, 20, &[]));
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

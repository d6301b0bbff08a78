//! OpenTelemetry traces against a real OTLP/HTTP receiver built on the official protobuf
//! definitions (`opentelemetry-proto` from PyPI, tests/interop/otlp_receiver.py): for known
//! traffic, the spans' names, kinds, attributes, parents, events and statuses; an unsampled
//! parent gives no span; `--otlp-propagate` sets the upstream's `traceparent` to rpctap's
//! `CLIENT` span (the upstream leg, made only then), and without it the header passes unchanged.

use crate::common::*;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

const T1: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
const T2: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
const UNSAMPLED: &str = "00-11111111111111111111111111111111-2222222222222222-00";

pub fn receiver(dir: &Scratch) -> (Proc, SocketAddr, std::path::PathBuf) {
    let env = installed("otel", &["opentelemetry-proto==1.45.2"]);
    let port = free_port();
    let out = dir.join("spans.jsonl");
    let p = Proc::spawn(
        std::process::Command::new(env.join("bin/python"))
            .arg(root().join("tests/interop/otlp_receiver.py"))
            .arg(port.to_string())
            .arg(&out)
            .stdout(std::process::Stdio::null()),
    );
    (p, format!("127.0.0.1:{port}").parse().unwrap(), out)
}

/// The spans received, once at least `n` have come (10 s at most).
pub async fn spans(out: &std::path::Path, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        let v: Vec<Value> = std::fs::read_to_string(out)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        if v.len() >= n {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("fewer than {n} spans: {:?}", std::fs::read_to_string(out));
}

fn otel_flags(collector: SocketAddr, propagate: bool) -> rpctap::cli::ProxyFlags {
    rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            otlp: Some(format!("http://{collector}")),
            limits: vec!["subtract=1/min".into()],
            ..Default::default()
        },
        otlp_propagate: propagate,
        ..Default::default()
    }
}

/// A receiver, the demo server, and a proxy in front of the demo exporting to the receiver with
/// the flags `tweak` leaves; the spans go to `out`.
struct Rig {
    p: TestProxy,
    out: std::path::PathBuf,
    _receiver: Proc,
    _demo: Stop,
}

async fn rig(dir: &Scratch, tweak: impl FnOnce(&mut rpctap::cli::ProxyFlags)) -> Rig {
    let (receiver, collector, out) = receiver(dir);
    wait_listening(collector).await;
    let (demo, stop) = start_demo().await;
    let mut flags = otel_flags(collector, false);
    tweak(&mut flags);
    let p = start_proxy_flags(&format!("http://{demo}"), flags).await;
    Rig {
        p,
        out,
        _receiver: receiver,
        _demo: stop,
    }
}

// Span kinds in OTLP: 2 SERVER, 3 CLIENT; status codes: 0 unset, 2 error.
const SERVER: i64 = 2;
const CLIENT: i64 = 3;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_carry_the_conventions_attributes_parents_events_and_statuses() {
    let dir = Scratch::new("otel");
    let Rig { p, out, .. } = &rig(&dir, |_| {}).await;
    let json = |tp: &'static str| [("content-type", "application/json"), ("traceparent", tp)];
    // A JSON-RPC call under a sampled parent.
    let r = send(
        p.addr,
        "POST",
        "/jsonrpc",
        &json(T1),
        r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1}"#,
    )
    .await;
    assert_eq!(r.json()["result"], 3);
    // An error reply, no parent.
    post_json(
        p.addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"nope","id":"e1"}"#,
    )
    .await;
    // Under an unsampled parent: no span.
    send(
        p.addr,
        "POST",
        "/jsonrpc",
        &json(UNSAMPLED),
        r#"{"jsonrpc":"2.0","method":"add","params":[5,5],"id":7}"#,
    )
    .await;
    // Refused by a rate-limit rule: a span, no upstream leg.
    for id in [2, 3] {
        post_json(
            p.addr,
            "/jsonrpc",
            &format!(r#"{{"jsonrpc":"2.0","method":"subtract","params":[3,1],"id":{id}}}"#),
        )
        .await;
    }
    // MCP: a tool call whose `_meta.traceparent` is its parent, and a failing tool (an
    // anomaly: a span event).
    let sid = mcp_session(p.addr).await;
    let mcp = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{{"name":"echo","arguments":{{"text":"hi"}},"_meta":{{"traceparent":"{T2}"}}}}}}"#
    );
    assert_eq!(send(p.addr, "POST", "/mcp", &mcp, call).await.status, 200);
    let fail = r#"{"jsonrpc":"2.0","id":12,"method":"tools/call","params":{"name":"fail","arguments":{}}}"#;
    assert_eq!(send(p.addr, "POST", "/mcp", &mcp, fail).await.status, 200);
    // The HTTP request's `traceparent` and the message's own: the message's is the parent,
    // the transport's a link (the conventions' "ambient context").
    let both: Vec<(&str, &str)> = mcp.iter().copied().chain([("traceparent", T1)]).collect();
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":13,"method":"prompts/get","params":{{"name":"greet","arguments":{{"name":"x"}},"_meta":{{"traceparent":"{T2}"}}}}}}"#
    );
    send(p.addr, "POST", "/mcp", &both, call).await;

    // add, nope, subtract ×2, initialize, echo, fail, greet: one SERVER span each (no CLIENT
    // leg without --otlp-propagate).
    let all = spans(out, 8).await;
    let server = |name: &str| -> Vec<&Value> {
        all.iter()
            .filter(|s| s["name"] == name && s["kind"] == SERVER)
            .collect()
    };
    let child_of = |s: &Value| -> Vec<&Value> {
        all.iter()
            .filter(|c| c["parent_span_id"] == s["span_id"] && c["kind"] == CLIENT)
            .collect()
    };
    assert!(all
        .iter()
        .all(|s| s["service"] == "rpctap" && s["scope"] == "rpctap"));

    let add = server("add");
    assert_eq!(add.len(), 1, "the unsampled call has no span: {add:?}");
    let add = add[0];
    assert_eq!(add["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
    assert_eq!(
        add["parent_span_id"], "00f067aa0ba902b7",
        "the traceparent's span"
    );
    assert_eq!(add["status"], 0);
    let a = &add["attributes"];
    // The JSON-RPC conventions' current names, and none of the replaced ones.
    assert_eq!(a["rpc.system.name"], "jsonrpc");
    assert_eq!(a["rpc.method"], "add");
    assert_eq!(a["jsonrpc.protocol.version"], "2.0");
    assert_eq!(a["jsonrpc.request.id"], "1");
    assert_eq!(a["network.transport"], "tcp");
    assert_eq!(a["network.protocol.name"], "http");
    assert_eq!(a["client.address"], "127.0.0.1");
    assert!(a["client.port"].as_i64().unwrap() > 0);
    assert!(a.get("mcp.method.name").is_none(), "not an MCP method");
    for old in [
        "rpc.system",
        "rpc.jsonrpc.version",
        "rpc.jsonrpc.request_id",
        "rpc.jsonrpc.error_code",
    ] {
        assert!(
            all.iter().all(|s| s["attributes"].get(old).is_none()),
            "{old}"
        );
    }
    assert!(
        all.iter().all(|s| s["kind"] == SERVER),
        "no CLIENT leg without propagation: {all:?}"
    );
    assert!(child_of(add).is_empty());

    let nope = server("nope")[0];
    assert_eq!(nope["status"], 2, "an error reply is an error status");
    assert_eq!(nope["parent_span_id"], "", "no parent: a root span");
    assert_eq!(nope["attributes"]["rpc.response.status_code"], "-32601");
    assert_eq!(nope["attributes"]["error.type"], "-32601");
    assert_eq!(nope["attributes"]["jsonrpc.request.id"], "e1");
    assert_eq!(
        nope["status_message"], "Method not found",
        "the status description is the error's message"
    );

    let sub = server("subtract");
    assert_eq!(sub.len(), 2);
    let refused: Vec<_> = sub
        .iter()
        .filter(|s| s["attributes"]["error.type"] == "rate_limited")
        .collect();
    assert_eq!(refused.len(), 1, "{sub:?}");
    assert_eq!(refused[0]["status"], 2);
    assert!(
        child_of(refused[0]).is_empty(),
        "a refused call never went upstream"
    );

    let echo = server("tools/call echo");
    assert_eq!(echo.len(), 1, "span name `{{mcp.method.name}} {{target}}`");
    let echo = echo[0];
    assert_eq!(
        echo["trace_id"], "0af7651916cd43dd8448eb211c80319c",
        "_meta.traceparent"
    );
    assert_eq!(echo["parent_span_id"], "b7ad6b7169203331");
    assert!(
        echo["links"].as_array().unwrap().is_empty(),
        "no ambient context"
    );
    let e = &echo["attributes"];
    assert!(
        e.get("rpc.system.name").is_none() && e.get("rpc.method").is_none(),
        "MCP's own names"
    );
    assert_eq!(e["network.transport"], "tcp");
    assert_eq!(e["network.protocol.name"], "http");
    assert_eq!(e["mcp.method.name"], "tools/call");
    assert_eq!(e["mcp.session.id"], sid.as_str());
    assert_eq!(e["mcp.protocol.version"], "2025-06-18");
    assert_eq!(e["gen_ai.tool.name"], "echo");
    assert_eq!(e["gen_ai.operation.name"], "execute_tool");
    assert_eq!(e["jsonrpc.request.id"], "11");
    assert!(
        e.get("gen_ai.tool.call.arguments").is_none(),
        "tool content only with --otlp-tool-content"
    );

    let fail = server("tools/call fail")[0];
    assert_eq!(
        fail["events"],
        serde_json::json!(["TOOL_ERROR"]),
        "anomalies as events"
    );
    assert_eq!(fail["status"], 2);
    assert_eq!(fail["attributes"]["error.type"], "tool_error");
    assert_eq!(server("initialize").len(), 1);
    let greet = server("prompts/get greet");
    assert_eq!(greet.len(), 1, "{all:?}");
    assert_eq!(greet[0]["parent_span_id"], "b7ad6b7169203331");
    assert_eq!(
        greet[0]["links"],
        serde_json::json!([{"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736", "span_id": "00f067aa0ba902b7"}])
    );
    assert_eq!(greet[0]["attributes"]["gen_ai.prompt.name"], "greet");
}

/// `--otlp-legacy-names`: the names the conventions replaced are written beside the current
/// ones (for dashboards not yet moved), `network.protocol.name="stdio"` among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_names_are_written_beside_the_current_ones_when_asked() {
    let dir = Scratch::new("otel-legacy");
    let Rig { p, out, .. } = &rig(&dir, |f| f.shared.otlp_legacy_names = true).await;
    post_json(
        p.addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"nope","id":"e1"}"#,
    )
    .await;
    let s = &spans(out, 1).await[0];
    let a = &s["attributes"];
    assert_eq!(a["rpc.system"], "jsonrpc");
    assert_eq!(a["rpc.system.name"], "jsonrpc");
    assert_eq!(a["rpc.jsonrpc.version"], "2.0");
    assert_eq!(a["rpc.jsonrpc.request_id"], "e1");
    assert_eq!(a["jsonrpc.request.id"], "e1");
    assert_eq!(a["rpc.jsonrpc.error_code"], -32601);
    assert_eq!(a["rpc.jsonrpc.error_message"], "Method not found");
    assert_eq!(a["rpc.response.status_code"], "-32601");
}

/// What the upstream got as `traceparent`, per call.
type Seen = Arc<Mutex<Vec<Option<String>>>>;

async fn header_upstream() -> (SocketAddr, Stop, Seen) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let (addr, stop) = start_upstream(move |parts, _body| {
        s.lock().unwrap().push(
            parts
                .headers
                .get("traceparent")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string),
        );
        Box::pin(async { json_reply(200, r#"{"jsonrpc":"2.0","id":1,"result":true}"#) })
    })
    .await;
    (addr, stop, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trace_headers_pass_unchanged_unless_propagation_is_asked_for() {
    let dir = Scratch::new("otel-prop");
    let (_r, collector, out) = receiver(&dir);
    wait_listening(collector).await;
    let body = r#"{"jsonrpc":"2.0","method":"m","id":1}"#;
    let h = [("content-type", "application/json"), ("traceparent", T1)];

    let (up, _u, seen) = header_upstream().await;
    let p = start_proxy_flags(&format!("http://{up}"), otel_flags(collector, false)).await;
    send(p.addr, "POST", "/", &h, body).await;
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![Some(T1.to_string())],
        "unchanged"
    );
    drop(p);

    let (up, _u, seen) = header_upstream().await;
    let p = start_proxy_flags(&format!("http://{up}"), otel_flags(collector, true)).await;
    send(p.addr, "POST", "/", &h, body).await;
    post_json(p.addr, "/", body).await; // no parent: a new trace, propagated too
    let got = seen.lock().unwrap().clone();
    // The first proxy's one span, then two SERVER and two CLIENT spans.
    let all = spans(&out, 5).await;
    let client = |tp: &str| {
        let parts: Vec<&str> = tp.split('-').collect();
        all.iter()
            .find(|s| s["kind"] == CLIENT && s["span_id"] == parts[2] && s["trace_id"] == parts[1])
            .cloned()
    };
    let first = got[0].clone().expect("a traceparent upstream");
    assert!(
        first.starts_with("00-4bf92f3577b34da6a3ce929d0e0e4736-"),
        "{first}"
    );
    assert_ne!(first, T1, "rewritten to rpctap's span");
    assert!(first.ends_with("-01"));
    let leg = client(&first).expect("the propagated id is rpctap's CLIENT span");
    assert_eq!(leg["attributes"]["server.address"], "127.0.0.1");
    assert_eq!(leg["attributes"]["server.port"], up.port() as i64);
    let server = all
        .iter()
        .find(|s| s["span_id"] == leg["parent_span_id"])
        .unwrap();
    assert_eq!(server["parent_span_id"], "00f067aa0ba902b7");
    let second = got[1].clone().expect("a root trace is propagated too");
    assert!(client(&second).is_some(), "{second}: {all:?}");
}

/// The MCP conventions' own example, "Stdio transport — Initialize / Tool call", through
/// `rpctap stdio` in front of the Python SDK's server: the SERVER spans carry what the example's
/// tables list (name, kind, unset status, `jsonrpc.request.id`, `mcp.method.name`,
/// `mcp.session.id`, `mcp.protocol.version` — the session's, no header on a pipe —,
/// `network.transport` = `pipe` and no protocol name, `gen_ai.*` for the tool), the tool call's
/// parent is its `params._meta.traceparent`; the duration metrics come over OTLP as the
/// conventions define them (name, unit, buckets, cumulative) and on `/metrics` under their
/// Prometheus names, which promtool accepts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_conventions_stdio_example_and_the_mcp_duration_metrics() {
    use std::io::{BufRead, Write};
    let dir = Scratch::new("otel-stdio");
    let (_r, collector, out) = receiver(&dir);
    wait_listening(collector).await;
    let python = installed("mcp1", &["mcp<2", "json-rpc", "werkzeug"]).join("bin/python");
    let admin = free_port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rpctap"))
        .args(["stdio", "--otlp", &format!("http://{collector}")])
        .args(["--otlp-metrics-interval", "200ms"])
        .args(["--admin", &format!("127.0.0.1:{admin}"), "--"])
        .arg(&python)
        .args([script("mcp1_server.py").as_str(), "stdio"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut ask = |line: &str, reply: bool| -> Option<Value> {
        writeln!(stdin, "{line}").unwrap();
        stdin.flush().unwrap();
        reply.then(|| {
            let mut l = String::new();
            stdout.read_line(&mut l).unwrap();
            serde_json::from_str(&l).unwrap()
        })
    };
    let init = ask(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        true,
    )
    .unwrap();
    assert_eq!(init["result"]["protocolVersion"], "2025-06-18");
    ask(
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        false,
    );
    let call = format!(
        r#"{{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{{"name":"add","arguments":{{"a":2,"b":3}},"_meta":{{"traceparent":"{T2}"}}}}}}"#
    );
    let r = ask(&call, true).unwrap();
    assert_eq!(r["id"], 3, "{r}");
    // The mirror on `/metrics`, while the shim runs.
    wait_listening(format!("127.0.0.1:{admin}").parse().unwrap()).await;
    let text = send(
        format!("127.0.0.1:{admin}").parse().unwrap(),
        "GET",
        "/metrics",
        &[],
        "",
    )
    .await
    .text();
    let count = |labels: &str| {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(&format!(
                    "mcp_server_operation_duration_seconds_count{{{labels}}}"
                ))
            })
            .map(|v| v.trim().to_string())
    };
    assert_eq!(
        count(r#"mcp_method_name="tools/call",gen_ai_tool_name="add",gen_ai_operation_name="execute_tool""#)
            .as_deref(),
        Some("1"),
        "{text}"
    );
    assert_eq!(
        count(r#"mcp_method_name="initialize""#).as_deref(),
        Some("1"),
        "{text}"
    );
    let mut lint = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool is installed by scripts/peers.sh (Debian's prometheus)");
    lint.stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let lint = lint.wait_with_output().unwrap();
    assert!(
        lint.status.success() && lint.stdout.is_empty() && lint.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&lint.stdout),
        String::from_utf8_lossy(&lint.stderr)
    );
    drop(stdin);
    assert!(child.wait().unwrap().success());

    let all = spans(&out, 2).await;
    let server = |name: &str| {
        all.iter()
            .find(|s| s["name"] == name && s["kind"] == SERVER)
            .unwrap_or_else(|| panic!("no {name} span: {all:?}"))
    };
    let init = server("initialize");
    let tool = server("tools/call add");
    for (s, id) in [(init, "1"), (tool, "3")] {
        let a = &s["attributes"];
        assert_eq!(s["status"], 0, "{s}");
        assert_eq!(a["jsonrpc.request.id"], id);
        assert_eq!(a["mcp.protocol.version"], "2025-06-18", "{s}");
        assert!(!a["mcp.session.id"].as_str().unwrap().is_empty());
        assert_eq!(a["network.transport"], "pipe");
        assert!(a.get("network.protocol.name").is_none(), "{s}");
        assert!(a.get("rpc.system.name").is_none(), "{s}");
    }
    assert_eq!(init["attributes"]["mcp.method.name"], "initialize");
    let t = &tool["attributes"];
    assert_eq!(t["mcp.method.name"], "tools/call");
    assert_eq!(t["gen_ai.tool.name"], "add");
    assert_eq!(t["gen_ai.operation.name"], "execute_tool");
    assert_eq!(tool["trace_id"], "0af7651916cd43dd8448eb211c80319c");
    assert_eq!(tool["parent_span_id"], "b7ad6b7169203331");

    // OTLP metrics: the last export (each is the whole cumulative state).
    let metrics = std::fs::read_to_string(format!("{}.metrics", out.display())).unwrap();
    let last: Vec<Value> = metrics
        .rsplit_once(r#"{"export_points""#)
        .map(|(_, tail)| tail)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let point = |method: &str| {
        last.iter()
            .find(|p| p["attributes"]["mcp.method.name"] == method)
            .unwrap_or_else(|| panic!("no {method} point: {last:?}"))
    };
    let p = point("tools/call");
    assert_eq!(p["name"], "mcp.server.operation.duration");
    assert_eq!(p["unit"], "s");
    assert_eq!(p["temporality"], 2, "cumulative");
    assert_eq!(p["service"], "rpctap");
    assert_eq!(p["count"], 1);
    assert_eq!(p["attributes"]["gen_ai.tool.name"], "add");
    assert_eq!(p["attributes"]["gen_ai.operation.name"], "execute_tool");
    assert_eq!(
        p["explicit_bounds"],
        serde_json::json!([
            0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0
        ])
    );
    let buckets: Vec<u64> = serde_json::from_value(p["bucket_counts"].clone()).unwrap();
    assert_eq!((buckets.len(), buckets.iter().sum::<u64>()), (15, 1));
    assert!(p["sum"].as_f64().unwrap() > 0.0 && p["min"] == p["max"]);
    assert_eq!(point("initialize")["count"], 1);
}

/// `--otlp-tool-content`: a tool call's arguments and result on its span, redacted as
/// recordings are (`--redact-path`); without it, neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_content_is_on_the_span_only_when_asked_and_redacted() {
    let dir = Scratch::new("otel-content");
    let Rig { p, out, .. } = &rig(&dir, |f| {
        f.shared.otlp_tool_content = true;
        f.shared.redact_paths = vec!["params.arguments.secret".into()];
    })
    .await;
    let sid = mcp_session(p.addr).await;
    let mcp = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello there","secret":"s3cr3t"}}}"#;
    assert_eq!(send(p.addr, "POST", "/mcp", &mcp, call).await.status, 200);
    let all = spans(out, 2).await;
    let echo = all
        .iter()
        .find(|s| s["name"] == "tools/call echo")
        .unwrap_or_else(|| panic!("{all:?}"));
    let a = &echo["attributes"];
    let args = a["gen_ai.tool.call.arguments"].as_str().unwrap();
    assert!(
        args.contains("hello there") && !args.contains("s3cr3t"),
        "{args}"
    );
    let result = a["gen_ai.tool.call.result"].as_str().unwrap();
    assert!(result.contains("hello there"), "{result}");
    let init = all.iter().find(|s| s["name"] == "initialize").unwrap();
    assert!(init["attributes"]
        .get("gen_ai.tool.call.arguments")
        .is_none());
}

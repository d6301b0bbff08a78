//! Faults injected on purpose (`--fault`, `[[fault]]`): the official Python SDK 2.x client
//! against real servers through rpctap, one fault per call, over HTTP (SSE and JSON replies),
//! stdio (server-everything) and WebSocket (the `websockets` peer). For each fault the client's
//! observed behaviour (its result or exception, and when) is asserted; each fault is in the
//! recording as injected, `/metrics` counts it per rule, and `check` of the recording lists the
//! faults apart and blames the server for nothing they caused.

use crate::common::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn sdk() -> PathBuf {
    installed("mcp2", &["mcp>=2,<3"])
}

/// The fault client's report: one entry per call.
fn client(args: &[&str]) -> Vec<Value> {
    let v = json_stdout(
        Command::new(sdk().join("bin/python"))
            .arg(root().join("tests/interop/fault_client.py"))
            .args(args),
        "the fault client",
    );
    v.as_array().unwrap().clone()
}

/// The Python SDK 2.x server in `mode` on a free port.
async fn py_server(mode: &str) -> (Proc, u16) {
    let port = free_port();
    let p = Proc::spawn(
        Command::new(sdk().join("bin/python"))
            .arg(root().join("tests/interop/mcp2_server.py"))
            .args([mode, &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(([127, 0, 0, 1], port).into()).await;
    (p, port)
}

/// `rpctap proxy` with an admin listener, recording into `file`, with `faults`.
fn proxy(
    upstream: &str,
    file: &Path,
    faults: &[&str],
) -> (Proc, std::net::SocketAddr, std::net::SocketAddr) {
    let mut cmd = proxy_cmd(upstream, true);
    cmd.args(["--record", file.to_str().unwrap()]);
    for f in faults {
        cmd.args(["--fault", f]);
    }
    let (p, addrs, _) = spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    (p, addrs[0], addrs[1])
}

fn text(r: &Value) -> &str {
    r["result"]["content"][0]["text"].as_str().unwrap_or("")
}

fn elapsed(r: &Value) -> f64 {
    r["elapsed"].as_f64().unwrap()
}

/// The recording's fault events: (action, rule).
fn recorded_faults(file: &Path) -> Vec<(String, String)> {
    let rec = rpctap::record::reader::read(file).unwrap();
    rec.events
        .iter()
        .filter_map(|e| match e {
            rpctap::events::Event::Fault(f) => Some((f.action.to_string(), f.injected.to_string())),
            _ => None,
        })
        .collect()
}

/// `check`'s JSON report: (exit code, per-scope lines).
fn check_json(file: &Path) -> (Option<i32>, Vec<Value>) {
    let c = check_recording(file);
    let lines = c
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (c.exit, lines)
}

/// The `websockets` server behind `rpctap proxy --fault …` (recording into `file`), and the
/// `ws_peer.py` client in `mode` through it: its report, the proxy, the server.
async fn ws_client_through_faults(mode: &str, file: &Path, faults: &[&str]) -> (Value, Proc, Proc) {
    let (server, port, env) = ws_peer_server().await;
    let (p, addr, _) = proxy(&format!("http://127.0.0.1:{port}"), file, faults);
    let v = json_stdout(
        Command::new(env.join("bin/python"))
            .arg(root().join("tests/interop/ws_peer.py"))
            .args([mode, &format!("ws://{addr}/")]),
        "the WebSocket client",
    );
    (v, p, server)
}

/// The recording holds exactly these fault actions (in any order), and `check` passes it;
/// returns the check's lines.
fn recorded_and_clean(file: &Path, actions: &[&str]) -> Vec<Value> {
    let mut got: Vec<String> = recorded_faults(file).into_iter().map(|(a, _)| a).collect();
    got.sort();
    let mut want: Vec<&str> = actions.to_vec();
    want.sort();
    assert_eq!(got, want);
    let (code, lines) = check_json(file);
    assert_eq!(code, Some(0), "{lines:#?}");
    lines
}

fn metrics(admin: std::net::SocketAddr) -> String {
    let out = Command::new("curl")
        .args(["-sf", &format!("http://{admin}/metrics")])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_python_sdk_client_meets_each_fault_over_streamable_http_with_sse_replies() {
    let (_server, port) = py_server("sse").await;
    let work = Scratch::new("inject-sse");
    let file = work.join("sse.jsonl");
    let faults = [
        "name=slow-add,tool=add,delay=1500ms,at=reply,count=1",
        "name=boom,tool=fail,error=-32042:injected boom",
        "name=lost,tool=add,drop,count=1",
        "name=twice,tool=add,duplicate,count=1",
        "name=renamed,tool=add,wrong_id,count=1",
        "name=cut,tool=slow,cut_stream_after=1",
    ];
    let (mut p, addr, admin) = proxy(&format!("http://127.0.0.1:{port}"), &file, &faults);
    let url = format!("http://{addr}/mcp");
    let r = client(&[
        &url,
        "auto",
        "2",
        r#"add:{"a":2,"b":3}"#,
        "fail:{}",
        r#"add:{"a":2,"b":3}"#,
        r#"add:{"a":1,"b":1}"#,
        r#"add:{"a":1,"b":2}"#,
        r#"slow:{"steps":3}"#,
        r#"add:{"a":4,"b":4}"#,
    ]);
    assert_eq!(r.len(), 7, "{r:#?}");
    // delay: the answer, late.
    assert_eq!(text(&r[0]), "5", "{:?}", r[0]);
    assert!(elapsed(&r[0]) >= 1.4, "held 1.5 s: {:?}", r[0]);
    // error: rpctap's error instead of the tool's own result.
    assert_eq!(r[1]["exception"], "MCPError", "{:?}", r[1]);
    assert!(r[1]["message"].as_str().unwrap().contains("injected boom"));
    // drop: the client's own timeout (2 s) decides.
    assert!(
        r[2]["message"].as_str().unwrap().contains("timed out"),
        "{:?}",
        r[2]
    );
    assert!(elapsed(&r[2]) >= 1.9, "{:?}", r[2]);
    // The 2026-07-28 client gets `add`'s reply as a JSON body: doubled, two JSON texts in one
    // body, which it cannot parse; with a wrong id, it waits for its own and times out.
    assert!(
        r[3]["message"].as_str().unwrap().contains("parse JSON"),
        "{:?}",
        r[3]
    );
    assert!(elapsed(&r[3]) < 1.0, "{:?}", r[3]);
    assert!(
        r[4]["message"].as_str().unwrap().contains("timed out"),
        "{:?}",
        r[4]
    );
    // cut after one event (`slow` answers over SSE): the first progress arrived, then the
    // stream ended without a reply.
    assert_eq!(r[5]["exception"], "MCPError", "{:?}", r[5]);
    assert!(r[5]["message"]
        .as_str()
        .unwrap()
        .contains("without a response"));
    assert_eq!(r[5]["progress"], serde_json::json!([1.0]));
    // And the session goes on.
    assert_eq!(text(&r[6]), "8", "{:?}", r[6]);

    let m = metrics(admin);
    for (rule, action) in [
        ("slow-add", "delay"),
        ("boom", "error"),
        ("lost", "drop"),
        ("twice", "duplicate"),
        ("renamed", "wrong_id"),
        ("cut", "cut_stream_after"),
    ] {
        let line = format!(r#"rpctap_faults_injected_total{{rule="{rule}",action="{action}"}} 1"#);
        assert!(m.contains(&line), "{line} in\n{m}");
    }
    p.term();
    let mut got = recorded_faults(&file);
    got.sort();
    let mut want: Vec<(String, String)> = [
        ("cut_stream_after", "cut"),
        ("delay", "slow-add"),
        ("drop", "lost"),
        ("duplicate", "twice"),
        ("error", "boom"),
        ("wrong_id", "renamed"),
    ]
    .iter()
    .map(|(a, r)| (a.to_string(), r.to_string()))
    .collect();
    want.sort();
    assert_eq!(got, want);
    let (exit, lines) = check_json(&file);
    assert_eq!(exit, Some(0), "no server anomaly: {lines:#?}");
    let injected: Vec<&Value> = lines
        .iter()
        .flat_map(|l| l["injected"].as_array().into_iter().flatten())
        .collect();
    assert_eq!(injected.len(), 6, "{lines:#?}");
    // The cut call's missing reply is listed, allowed, naming the fault.
    let missing: Vec<&Value> = lines
        .iter()
        .flat_map(|l| l["result"]["findings"].as_array().into_iter().flatten())
        .filter(|f| f["code"] == "MISSING_RESPONSE")
        .collect();
    assert!(!missing.is_empty(), "{lines:#?}");
    for f in missing {
        assert_eq!(f["allowed"], true, "{f}");
        assert!(f["message"].as_str().unwrap().contains("`cut`"), "{f}");
    }

    // The 2025 client's session: every reply an SSE event. A doubled one is taken once; one
    // with a wrong id is still taken, as the reply on the POST's own stream.
    let file = work.join("legacy.jsonl");
    let (mut p, addr, _) = proxy(
        &format!("http://127.0.0.1:{port}"),
        &file,
        &[
            "name=twice,tool=add,duplicate,count=1",
            "name=renamed,tool=add,wrong_id,count=1",
        ],
    );
    let r = client(&[
        &format!("http://{addr}/mcp"),
        "legacy",
        "2",
        r#"add:{"a":1,"b":1}"#,
        r#"add:{"a":1,"b":2}"#,
        r#"add:{"a":1,"b":3}"#,
    ]);
    assert_eq!(
        [text(&r[0]), text(&r[1]), text(&r[2])],
        ["2", "3", "4"],
        "{r:#?}"
    );
    p.term();
    let mut got: Vec<String> = recorded_faults(&file).into_iter().map(|(a, _)| a).collect();
    got.sort();
    assert_eq!(got, ["duplicate", "wrong_id"]);
    let (exit, lines) = check_json(&file);
    assert_eq!(exit, Some(0), "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_replies_take_a_status_a_cut_body_a_slow_body_and_a_held_request() {
    let (_server, port) = py_server("json").await;
    let work = Scratch::new("inject-json");
    let file = work.join("json.jsonl");
    let faults = [
        "name=unavailable,tool=add,status=503,count=1",
        "name=halved,tool=add,malformed,count=1",
        "name=trickle,tool=add,throttle=200B/s,count=1",
        "name=queued,tool=add,delay=1s,count=1",
    ];
    let (mut p, addr, _) = proxy(&format!("http://127.0.0.1:{port}"), &file, &faults);
    let url = format!("http://{addr}/mcp");
    let r = client(&[
        &url,
        "legacy",
        "5",
        r#"add:{"a":1,"b":1}"#,
        r#"add:{"a":1,"b":2}"#,
        r#"add:{"a":1,"b":3}"#,
        r#"add:{"a":1,"b":4}"#,
        r#"add:{"a":1,"b":5}"#,
    ]);
    // A 503 and a reply that is not JSON: the client raises for each, at once.
    for i in [0, 1] {
        assert!(r[i]["exception"].is_string(), "{:?}", r[i]);
        assert!(elapsed(&r[i]) < 2.0, "{:?}", r[i]);
    }
    // The throttled reply (~150 bytes at 200 B/s) arrives whole, slowly.
    assert_eq!(text(&r[2]), "4", "{:?}", r[2]);
    assert!(elapsed(&r[2]) >= 0.4, "{:?}", r[2]);
    // The held request.
    assert_eq!(text(&r[3]), "5", "{:?}", r[3]);
    assert!(elapsed(&r[3]) >= 0.9, "{:?}", r[3]);
    assert_eq!(text(&r[4]), "6", "{:?}", r[4]);
    p.term();
    let mut got: Vec<String> = recorded_faults(&file).into_iter().map(|(a, _)| a).collect();
    got.sort();
    assert_eq!(got, ["delay", "malformed", "status", "throttle"]);
    let (exit, lines) = check_json(&file);
    assert_eq!(exit, Some(0), "{lines:#?}");
}

fn everything_js() -> PathBuf {
    installed("node", NODE_PACKAGES)
        .join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_faults_over_stdio_in_front_of_server_everything() {
    let work = Scratch::new("inject-stdio");
    let file = work.join("stdio.jsonl");
    let calls = serde_json::json!([
        r#"echo:{"message":"hi"}"#,
        r#"get-sum:{"a":2,"b":3}"#,
        r#"echo:{"message":"lost"}"#,
        r#"get-sum:{"a":1,"b":1}"#,
        r#"echo:{"message":"renamed"}"#,
        r#"trigger-long-running-operation:{"duration":0.6,"steps":3}"#,
    ])
    .to_string();
    let faults = [
        "name=boom,tool=echo,error=-32042:injected boom,count=1",
        "name=late,tool=get-sum,delay=1500ms,at=reply,count=1",
        "name=lost,tool=echo,drop,count=1",
        "name=twice,tool=get-sum,duplicate,count=1",
        "name=renamed,tool=echo,wrong_id,count=1",
        "name=cut,tool=trigger-long-running-operation,cut_stream_after=1",
    ];
    let bin = env!("CARGO_BIN_EXE_rpctap").to_string();
    let mut args: Vec<String> = vec![
        "--stdio".into(),
        "auto".into(),
        "2".into(),
        calls,
        bin,
        "stdio".into(),
        "--no-hub".into(),
        "--record".into(),
        file.to_str().unwrap().into(),
    ];
    for f in faults {
        args.push("--fault".into());
        args.push(f.into());
    }
    args.extend([
        "--".into(),
        "node".into(),
        everything_js().to_str().unwrap().into(),
        "stdio".into(),
    ]);
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = client(&a);
    assert_eq!(r[0]["exception"], "MCPError", "{:?}", r[0]);
    assert!(r[0]["message"].as_str().unwrap().contains("injected boom"));
    assert!(text(&r[1]).contains('5'), "{:?}", r[1]);
    assert!(elapsed(&r[1]) >= 1.4, "{:?}", r[1]);
    // Dropped: the client's timeout.
    assert!(r[2]["exception"].is_string(), "{:?}", r[2]);
    assert!(elapsed(&r[2]) >= 1.9, "{:?}", r[2]);
    assert!(text(&r[3]).contains('2'), "{:?}", r[3]);
    // Over stdio the id is all the client has: a reply with a wrong one answers nothing, and
    // the call times out.
    assert!(r[4]["exception"].is_string(), "{:?}", r[4]);
    assert!(elapsed(&r[4]) >= 1.9, "{:?}", r[4]);
    // Cut after the first progress: the session is gone.
    assert!(
        r[5]["exception"].is_string() || r[5]["session_exception"].is_string(),
        "{:?}",
        r[5]
    );
    recorded_and_clean(
        &file,
        &[
            "cut_stream_after",
            "delay",
            "drop",
            "duplicate",
            "error",
            "wrong_id",
        ],
    );
}

/// The fault client with sampling on (`FAULT_CLIENT_SAMPLING=1`), spawning `rpctap stdio
/// --record FILE --fault …  -- SERVER…`, each call read with a timeout of `timeout` seconds.
fn sampling_client_over_stdio(
    calls: &[&str],
    timeout: &str,
    file: &Path,
    faults: &[&str],
    server: &[&str],
) -> Vec<Value> {
    let mut args: Vec<String> = vec![
        root()
            .join("tests/interop/fault_client.py")
            .to_str()
            .unwrap()
            .into(),
        "--stdio".into(),
        "auto".into(),
        timeout.into(),
        serde_json::json!(calls).to_string(),
        env!("CARGO_BIN_EXE_rpctap").into(),
        "stdio".into(),
        "--no-hub".into(),
        "--record".into(),
        file.to_str().unwrap().into(),
    ];
    for f in faults {
        args.extend(["--fault".into(), f.to_string()]);
    }
    args.push("--".into());
    args.extend(server.iter().map(|a| a.to_string()));
    let v = json_stdout(
        Command::new(sdk().join("bin/python"))
            .args(&args)
            .env("FAULT_CLIENT_SAMPLING", "1"),
        "the fault client",
    );
    v.as_array().unwrap().clone()
}

/// One rule per action a server's request can meet, each named for the call it fires on (with
/// `count=1` they fire in this order, one call each).
const EVERY_S2C_FAULT: &[&str] = &[
    "name=refused,error=-32042:no model here",
    "name=held,delay=1s",
    "name=lost,drop",
    "name=twice,duplicate",
    "name=renamed,wrong_id",
    "name=cut,malformed",
    "name=late,delay=1s,at=reply",
    "name=slow,throttle=100B/s",
    "name=closed,close",
];

/// `rules` (each `name=…,ACTION`), each written behind `prefix` (the matcher they share).
fn rules_behind(prefix: &str, rules: &[&str]) -> Vec<String> {
    rules.iter().map(|r| format!("{prefix},{r}")).collect()
}

/// The recording's fault events are `actions`, in this order, each on a server's request (its
/// `direction` is `s2c`).
fn recorded_on_server_requests(file: &Path, actions: &[&str]) {
    let rec = rpctap::record::reader::read(file).unwrap();
    let got: Vec<(String, Option<rpctap::events::Direction>)> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            rpctap::events::Event::Fault(f) => Some((f.action.to_string(), f.direction)),
            _ => None,
        })
        .collect();
    let s2c = Some(rpctap::events::Direction::ServerToClient);
    let want: Vec<_> = actions.iter().map(|a| (a.to_string(), s2c)).collect();
    assert_eq!(
        got, want,
        "each fault recorded once, as the server's request's"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_the_servers_sampling_requests_meet_each_s2c_fault() {
    // The Python SDK 1.x server's `ask` tool asks the client's model (`sampling/createMessage`)
    // and waits 2 s for the answer; the Python SDK 2.x client answers it. One `direction =
    // "s2c"` rule per call, each firing once, in order.
    let work = Scratch::new("inject-s2c-stdio");
    let file = work.join("s2c.jsonl");
    let ask = |q: &str| format!(r#"ask:{{"question":"{q}","timeout":2}}"#);
    let calls: Vec<String> = [
        "refused", "held", "lost", "twice", "renamed", "cut", "late", "closed",
    ]
    .iter()
    .map(|q| ask(q))
    .collect();
    let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
    let s2c = "direction=s2c,method=sampling/*,count=1";
    let faults = rules_behind(
        s2c,
        &[
            "name=refused,error=-32042:no model here",
            "name=held,delay=1s",
            "name=lost,drop",
            "name=twice,duplicate",
            // Matches nothing here (the client is never asked for roots): skipped.
            "name=roots,method=roots/list,drop",
            "name=renamed,wrong_id",
            "name=cut,malformed",
            "name=late,delay=1s,at=reply",
            "name=closed,close",
        ],
    );
    let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
    let py = installed("mcp1", &["mcp<2", "json-rpc", "werkzeug"]).join("bin/python");
    let server = root().join("tests/interop/mcp1_server.py");
    let r = sampling_client_over_stdio(
        &calls,
        "6",
        &file,
        &faults,
        &[py.to_str().unwrap(), server.to_str().unwrap(), "stdio"],
    );
    assert_eq!(r.len(), 8, "{r:#?}");
    // rpctap answered in the client's place: the client was never asked.
    assert_eq!(r[0]["sampled"], 0, "{:?}", r[0]);
    assert!(text(&r[0]).contains("no model here"), "{:?}", r[0]);
    // Held a second before the client got it.
    assert_eq!(text(&r[1]), "the model said: 42 (held)", "{:?}", r[1]);
    assert!(elapsed(&r[1]) >= 1.0, "{:?}", r[1]);
    // The client answered; the answer never reached the server, which gave up after 2 s.
    assert_eq!(r[2]["sampled"], 1, "{:?}", r[2]);
    assert!(
        text(&r[2]).starts_with("no answer from the model"),
        "{:?}",
        r[2]
    );
    assert!(elapsed(&r[2]) >= 1.9, "{:?}", r[2]);
    // Two answers for one request: the server takes the first and goes on.
    assert_eq!(text(&r[3]), "the model said: 42 (twice)", "{:?}", r[3]);
    // An answer with an id the server never used answers nothing.
    assert_eq!(r[4]["sampled"], 1, "{:?}", r[4]);
    assert!(
        text(&r[4]).starts_with("no answer from the model"),
        "{:?}",
        r[4]
    );
    // Half an answer: not JSON; the request is never answered.
    assert!(!text(&r[5]).contains("said"), "{:?}", r[5]);
    assert!(elapsed(&r[5]) >= 1.9, "{:?}", r[5]);
    // The answer held a second on its way to the server.
    assert_eq!(text(&r[6]), "the model said: 42 (late)", "{:?}", r[6]);
    assert!(elapsed(&r[6]) >= 1.0, "{:?}", r[6]);
    // The session closed when the server asked.
    assert!(
        r[7]["exception"].is_string() || r[7]["session_exception"].is_string(),
        "{:?}",
        r[7]
    );
    recorded_on_server_requests(
        &file,
        &[
            "error",
            "delay",
            "drop",
            "duplicate",
            "wrong_id",
            "malformed",
            "delay",
            "close",
        ],
    );
    // `check` blames the server for nothing the faults did — the calls the close left
    // unanswered included — but for what FastMCP did of its own: answering the cut JSON with a
    // log (`notifications/message`) it never declared the `logging` capability for.
    let (code, lines) = check_json(&file);
    let failing: Vec<(String, String)> = lines
        .iter()
        .flat_map(|l| {
            l["result"]["findings"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .filter(|f| f["allowed"] != true)
        .map(|f| {
            (
                f["code"].as_str().unwrap_or("").to_string(),
                f["message"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    assert_eq!(code, Some(1), "{lines:#?}");
    assert_eq!(failing.len(), 1, "{failing:#?}");
    assert_eq!(failing[0].0, "MCP_CAPABILITY", "{failing:#?}");
    assert!(
        failing[0].1.contains("notifications/message"),
        "{failing:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_stdio_server_everythings_sampling_request_refused_held_doubled_and_closed() {
    // server-everything (the TypeScript SDK server) registers `trigger-sampling-request` for a
    // client that declares sampling.
    let work = Scratch::new("inject-s2c-everything");
    let file = work.join("s2c.jsonl");
    let call = |p: &str| format!(r#"trigger-sampling-request:{{"prompt":"{p}","maxTokens":5}}"#);
    let calls: Vec<String> = ["refused", "held", "twice", "late", "closed"]
        .iter()
        .map(|p| call(p))
        .collect();
    let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
    let faults = [
        "direction=s2c,method=sampling/createMessage,count=1,name=refused,error=-32042:no model here",
        "direction=s2c,method=sampling/createMessage,count=1,name=held,delay=1s",
        "direction=s2c,method=sampling/createMessage,count=1,name=twice,duplicate",
        "direction=s2c,method=sampling/createMessage,count=1,name=late,delay=1s,at=reply",
        "direction=s2c,method=sampling/createMessage,count=1,name=closed,close",
    ];
    let js = everything_js();
    let r = sampling_client_over_stdio(
        &calls,
        "6",
        &file,
        &faults,
        &["node", js.to_str().unwrap(), "stdio"],
    );
    assert_eq!(r.len(), 5, "{r:#?}");
    // The server's request failed with rpctap's error, the client never asked.
    assert_eq!(r[0]["sampled"], 0, "{:?}", r[0]);
    let failed = format!("{}", r[0]);
    assert!(failed.contains("no model here"), "{failed}");
    for (i, p) in [(1, "held"), (2, "twice"), (3, "late")] {
        assert_eq!(r[i]["sampled"], 1, "{:?}", r[i]);
        assert!(
            text(&r[i]).contains(&format!(
                "42 (Resource trigger-sampling-request context: {p})"
            )),
            "{:?}",
            r[i]
        );
    }
    assert!(elapsed(&r[1]) >= 1.0 && elapsed(&r[3]) >= 1.0, "{r:?}");
    assert!(
        r[4]["exception"].is_string() || r[4]["session_exception"].is_string(),
        "{:?}",
        r[4]
    );
    recorded_and_clean(&file, &["close", "delay", "delay", "duplicate", "error"]);
}

/// The fault client with sampling on against `url` (the 2025 protocol, `legacy`: a session,
/// so that the server has a way to ask).
fn sampling_client(url: &str, calls: &[&str]) -> Vec<Value> {
    let v = json_stdout(
        Command::new(sdk().join("bin/python"))
            .arg(root().join("tests/interop/fault_client.py"))
            .args([url, "legacy", "6"])
            .args(calls)
            .env("FAULT_CLIENT_SAMPLING", "1"),
        "the fault client",
    );
    v.as_array().unwrap().clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_the_servers_sampling_requests_meet_each_s2c_fault() {
    // The Python SDK 2.x server's `ask` asks the client's model on its event stream and waits
    // 2 s; the Python SDK 2.x client answers in a POST of its own.
    let (_server, port) = py_server("sse").await;
    let work = Scratch::new("inject-s2c-http");
    let file = work.join("s2c.jsonl");
    let s2c = "direction=s2c,method=sampling/*,count=1";
    let faults = rules_behind(s2c, EVERY_S2C_FAULT);
    let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
    let (_p, addr, admin) = proxy(&format!("http://127.0.0.1:{port}"), &file, &faults);
    let calls: Vec<String> = [
        "refused", "held", "lost", "twice", "renamed", "cut", "late", "slow", "closed", "after",
    ]
    .iter()
    .map(|q| format!(r#"ask:{{"question":"{q}"}}"#))
    .collect();
    let url = format!("http://{addr}/mcp");
    let r = tokio::task::spawn_blocking(move || {
        let calls: Vec<&str> = calls.iter().map(String::as_str).collect();
        sampling_client(&url, &calls)
    })
    .await
    .unwrap();
    assert_eq!(r.len(), 10, "{r:#?}");
    let said = |i: usize, q: &str| {
        assert_eq!(
            text(&r[i]),
            format!("the model said: 42 ({q})"),
            "{:?}",
            r[i]
        );
        assert_eq!(r[i]["sampled"], 1, "{:?}", r[i]);
    };
    let unanswered = |i: usize, sampled: u64| {
        assert_eq!(text(&r[i]), "no answer from the model in 2s", "{:?}", r[i]);
        assert_eq!(r[i]["sampled"], sampled, "{:?}", r[i]);
    };
    // rpctap answered the server (a POST of its own) in the client's place.
    assert_eq!(r[0]["sampled"], 0, "{:?}", r[0]);
    assert_eq!(
        text(&r[0]),
        "the model failed: MCPError: no model here",
        "{:?}",
        r[0]
    );
    said(1, "held");
    assert!(elapsed(&r[1]) >= 1.0, "{:?}", r[1]);
    // The client's answer never reached the server.
    unanswered(2, 1);
    // Sent twice: the server takes the first.
    said(3, "twice");
    // An id the server never used; half a JSON text (the server answers that POST 400).
    unanswered(4, 1);
    unanswered(5, 1);
    said(6, "late");
    assert!(elapsed(&r[6]) >= 1.0, "{:?}", r[6]);
    // About 150 bytes at 100 a second.
    said(7, "slow");
    assert!(elapsed(&r[7]) >= 1.0, "{:?}", r[7]);
    // The event stream carrying the request closed: the client never saw it.
    unanswered(8, 0);
    // The session goes on.
    said(9, "after");
    recorded_on_server_requests(
        &file,
        &[
            "error",
            "delay",
            "drop",
            "duplicate",
            "wrong_id",
            "malformed",
            "delay",
            "throttle",
            "close",
        ],
    );
    let m = metrics(admin);
    for rule in ["refused", "lost", "twice", "closed"] {
        assert!(
            m.lines()
                .any(|l| l.starts_with("rpctap_faults_injected_total")
                    && l.contains(&format!("rule=\"{rule}\""))
                    && l.ends_with(" 1")),
            "{rule}: {m}"
        );
    }
    let (code, lines) = check_json(&file);
    assert_eq!(code, Some(0), "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http_server_everythings_sampling_request_refused_held_doubled_and_closed() {
    // server-everything over Streamable HTTP asks on the tool call's own event stream.
    let port = free_port();
    let _server = Proc::spawn(
        Command::new("node")
            .arg(everything_js())
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(([127, 0, 0, 1], port).into()).await;
    let work = Scratch::new("inject-s2c-http-everything");
    let file = work.join("s2c.jsonl");
    let s2c = "direction=s2c,method=sampling/createMessage,count=1";
    let faults = rules_behind(
        s2c,
        &[
            "name=refused,error=-32042:no model here",
            "name=held,delay=1s",
            "name=twice,duplicate",
            "name=late,delay=1s,at=reply",
            "name=closed,close",
        ],
    );
    let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
    let (_p, addr, _admin) = proxy(&format!("http://127.0.0.1:{port}"), &file, &faults);
    let call = r#"trigger-sampling-request:{"prompt":"p","maxTokens":5}"#;
    let url = format!("http://{addr}/mcp");
    let r = tokio::task::spawn_blocking(move || sampling_client(&url, &[call; 5]))
        .await
        .unwrap();
    assert_eq!(r.len(), 5, "{r:#?}");
    assert_eq!(r[0]["sampled"], 0, "{:?}", r[0]);
    assert!(
        r[0]["message"]
            .as_str()
            .unwrap_or("")
            .contains("no model here"),
        "{:?}",
        r[0]
    );
    for c in &r[1..4] {
        assert_eq!(c["sampled"], 1, "{c:?}");
        assert!(text(c).contains("fault-model"), "{c:?}");
    }
    assert!(elapsed(&r[1]) >= 1.0 && elapsed(&r[3]) >= 1.0, "{r:?}");
    // The tool call's own stream closed at the server's request: the call never completes.
    assert!(r[4]["exception"].is_string(), "{:?}", r[4]);
    let mut got: Vec<String> = recorded_faults(&file).into_iter().map(|(a, _)| a).collect();
    got.sort();
    assert_eq!(got, ["close", "delay", "delay", "duplicate", "error"]);
    // `check` passes — or, when server-everything refused (400) the client's answer to the
    // request it replayed on the resumed stream (its own race: the run then never completes the
    // closed call), it says exactly that and nothing else.
    let (code, lines) = check_json(&file);
    if code != Some(0) {
        let findings: Vec<&Value> = lines
            .iter()
            .filter_map(|l| l["result"]["findings"].as_array())
            .flatten()
            .collect();
        let said = |f: &Value, code: &str, words: &str| {
            f["code"] == code && f["message"].as_str().unwrap_or("").contains(words)
        };
        assert!(
            findings
                .iter()
                .any(|f| said(f, "HTTP_STATUS", "answered HTTP 400"))
                && findings.iter().all(|f| {
                    said(f, "HTTP_STATUS", "answered HTTP 400")
                        || said(f, "MISSING_RESPONSE", "after the fault `closed`")
                }),
            "{lines:#?}"
        );
    }
    // The Python client resumes the closed stream (a GET with `Last-Event-ID`) and the server
    // replays its request there: the call delivered again, not a second call under its id.
    let text = serde_json::to_string(&lines).unwrap();
    assert!(!text.contains("DUPLICATE_ID"), "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_the_servers_requests_meet_each_s2c_fault() {
    // The `websockets` server asks its client (`sampling/createMessage`) for each `ask` and
    // waits 2 s; the `websockets` client answers (deflate, context takeover).
    let work = Scratch::new("inject-s2c-ws");
    let file = work.join("s2c.jsonl");
    let s2c = "direction=s2c,method=sampling/*,count=1";
    let faults = rules_behind(s2c, EVERY_S2C_FAULT);
    let faults: Vec<&str> = faults.iter().map(String::as_str).collect();
    let (v, mut p, _server) = ws_client_through_faults("asked", &file, &faults).await;
    let said = |q: &str| {
        assert_eq!(
            v[q]["got"]["content"]["text"],
            format!("42 ({q})"),
            "{q}: {v}"
        );
        assert_eq!(v[q]["sampled"], 1, "{q}: {v}");
    };
    let unanswered = |q: &str| {
        assert_eq!(v[q]["got"], "timeout", "{q}: {v}");
        assert_eq!(v[q]["sampled"], 1, "{q}: {v}");
    };
    assert_eq!(v["refused"]["sampled"], 0, "{v}");
    assert_eq!(v["refused"]["got"]["error"]["code"], -32042, "{v}");
    assert_eq!(
        v["refused"]["got"]["error"]["message"], "no model here",
        "{v}"
    );
    said("held");
    assert!(v["held"]["secs"].as_f64().unwrap() >= 1.0, "{v}");
    unanswered("lost");
    said("twice");
    unanswered("renamed");
    unanswered("cut");
    said("late");
    assert!(v["late"]["secs"].as_f64().unwrap() >= 1.0, "{v}");
    said("slow");
    assert!(v["slow"]["secs"].as_f64().unwrap() >= 0.4, "{v}");
    // What reached the server: the doubled and the renamed answers for no request of its, the
    // cut one not JSON.
    assert_eq!(v["stats"]["got"]["stray"], 2, "{v}");
    assert_eq!(v["stats"]["got"]["bad"], 1, "{v}");
    assert_eq!(v["closed"]["got"], "connection closed", "{v}");
    assert_eq!(v["closed"]["sampled"], 0, "{v}");
    // The recording is whole once the proxy has ended (the last fault, `close`, happens just
    // before the client's last answer: under load its line may still be in the writer's queue).
    p.term();
    recorded_on_server_requests(
        &file,
        &[
            "error",
            "delay",
            "drop",
            "duplicate",
            "wrong_id",
            "malformed",
            "delay",
            "throttle",
            "close",
        ],
    );
    let (code, lines) = check_json(&file);
    assert_eq!(code, Some(0), "{lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_an_error_a_held_request_and_a_dropped_connection() {
    let work = Scratch::new("inject-ws");
    let file = work.join("ws.jsonl");
    let faults = [
        "name=boom,method=add,error=-32042:injected boom,count=1",
        "name=queued,method=echo,delay=1s,count=1",
        "name=gone,method=stats,close",
    ];
    let (v, mut p, _server) = ws_client_through_faults("faulted", &file, &faults).await;
    assert_eq!(v["add"]["error"]["code"], -32042, "{v}");
    assert_eq!(
        v["add2"]["result"], 5,
        "the next add reaches the server: {v}"
    );
    assert_eq!(v["echo"]["result"], serde_json::json!(["x"]), "{v}");
    assert!(v["echo_secs"].as_f64().unwrap() >= 0.9, "{v}");
    assert_eq!(v["stats"], "connection closed", "{v}");
    p.term();
    let mut got: Vec<String> = recorded_faults(&file).into_iter().map(|(a, _)| a).collect();
    got.sort();
    assert_eq!(got, ["close", "delay", "error"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_the_servers_replies_are_dropped_doubled_held_slowed_renamed_cut() {
    let work = Scratch::new("inject-ws-replies");
    let file = work.join("ws.jsonl");
    let faults = [
        "name=lost,method=add,drop,count=1",
        "name=twice,method=add,duplicate,count=1",
        "name=late,method=add,delay=1s,at=reply,count=1",
        "name=slow,method=add,throttle=100B/s,count=1",
        "name=renamed,method=echo,wrong_id,count=1",
        "name=broken,method=echo,malformed,count=1",
        "name=cut,method=subscribe,cut_stream_after=1",
    ];
    // Compressed with context takeover (the `websockets` default): once a reply is changed or
    // left out, rpctap sends the server's messages on uncompressed.
    let (v, mut p, _server) = ws_client_through_faults("replies", &file, &faults).await;
    assert_eq!(v["dropped"], "timeout", "{v}");
    assert_eq!(v["doubled"]["result"], 4, "{v}");
    assert_eq!(v["doubled_again"]["result"], 4, "the same reply again: {v}");
    assert_eq!(v["doubled_again"]["id"], 2, "{v}");
    assert_eq!(v["late"]["result"], 6, "{v}");
    assert!(v["late_secs"].as_f64().unwrap() >= 0.9, "{v}");
    assert_eq!(v["slow"]["result"], 8, "{v}");
    assert!(
        v["slow_secs"].as_f64().unwrap() >= 0.2,
        "a ~40-byte frame at 100 B/s: {v}"
    );
    assert!(
        v["renamed"]["id"]
            .as_str()
            .is_some_and(|i| i.starts_with("rpctap-wrong-id")),
        "{v}"
    );
    assert!(v["cut_json"]["not_json"].is_string(), "{v}");
    assert_eq!(v["sub"]["result"], "sub-1", "{v}");
    assert_eq!(v["after_cut"], "connection closed", "{v}");
    p.term();
    recorded_and_clean(
        &file,
        &[
            "cut_stream_after",
            "delay",
            "drop",
            "duplicate",
            "malformed",
            "throttle",
            "wrong_id",
        ],
    );
}

#[test]
fn a_rule_with_no_action_or_one_that_means_nothing_on_its_transport_is_refused_at_start() {
    let out = rpctap()
        .args([
            "stdio",
            "--no-hub",
            "--fault",
            "tool=x,status=503",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "a usage error");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("means nothing over stdio"), "{err}");
    let out = rpctap()
        .args([
            "proxy",
            "--no-tui",
            "--upstream",
            "http://127.0.0.1:9",
            "--fault",
            "tool=x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no action"));
}

/// rpctap's demo server on a free port (its `/jsonrpc` answers `add`, `echo`…).
async fn demo_upstream() -> (Proc, u16) {
    let port = free_port();
    let p = Proc::spawn(
        rpctap()
            .args(["demo-server", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(([127, 0, 0, 1], port).into()).await;
    (p, port)
}

/// A POST of one JSON-RPC call through curl: (curl's exit code, the body it got).
fn post(addr: std::net::SocketAddr, body: &str) -> (Option<i32>, String) {
    let out = Command::new("curl")
        .args(["-s", "-H", "content-type: application/json", "-d", body])
        .arg(format!("http://{addr}/jsonrpc"))
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_drops_the_connection_unanswered_and_sighup_reloads_the_faults_and_deny_rules() {
    let (_upstream, port) = demo_upstream().await;
    let work = Scratch::new("inject-reload");
    let config = work.join("rpctap.toml");
    std::fs::write(
        &config,
        "[[fault]]\nname = \"hang-up\"\nmethod = \"add\"\nclose = true\n",
    )
    .unwrap();
    let file = work.join("reload.jsonl");
    let mut cmd = proxy_cmd(&format!("http://127.0.0.1:{port}"), false);
    cmd.args([
        "--config",
        config.to_str().unwrap(),
        "--record",
        file.to_str().unwrap(),
    ]);
    let (mut p, addrs, rx) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    let mut log = Vec::new();
    // Each reload waited for on what rpctap says (not by polling calls).
    let mut reloads = 0;
    let mut reload = |p: &Proc| {
        signal(p.id(), "HUP");
        reloads += 1;
        assert!(eventually(std::time::Duration::from_secs(10), || said(
            &rx,
            &mut log,
            "rules reloaded"
        )
            == reloads));
    };
    let call = r#"{"jsonrpc":"2.0","id":1,"method":"add","params":[1,2]}"#;
    // curl 52: "empty reply from server" — the connection closed with no response at all.
    let (code, body) = post(addrs[0], call);
    assert_eq!(code, Some(52), "{body}");
    assert!(body.is_empty());
    // Other methods pass.
    let (code, body) = post(
        addrs[0],
        r#"{"jsonrpc":"2.0","id":2,"method":"echo","params":["x"]}"#,
    );
    assert_eq!(code, Some(0));
    assert!(body.contains("\"result\""), "{body}");
    // A new rule set from the file, on SIGHUP.
    std::fs::write(
        &config,
        "[[fault]]\nname = \"nope\"\nmethod = \"add\"\nerror = { code = -32099, message = \"reloaded\" }\n",
    )
    .unwrap();
    reload(&p);
    let (_, reloaded) = post(addrs[0], call);
    assert!(
        reloaded.contains("-32099") && reloaded.contains("reloaded"),
        "{reloaded}"
    );
    // The pipeline's other stages are reloaded with them: a `[[deny]]` table now refuses echo.
    std::fs::write(&config, "[[deny]]\nname = \"no echo\"\nmethod = \"echo\"\n").unwrap();
    reload(&p);
    let echo = r#"{"jsonrpc":"2.0","id":3,"method":"echo","params":["x"]}"#;
    let (_, denied) = post(addrs[0], echo);
    assert!(
        denied.contains("-32601") && denied.contains("denied by rpctap rule"),
        "{denied}"
    );
    let (_, body) = post(addrs[0], call);
    assert!(
        body.contains("\"result\""),
        "the fault rule is gone: {body}"
    );
    p.term();
    let got: Vec<(String, String)> = recorded_faults(&file);
    assert!(
        got.iter().any(|(a, r)| a == "error" && r == "no echo"),
        "{got:?}"
    );
    assert_eq!(
        got.first().map(|(a, r)| (a.as_str(), r.as_str())),
        Some(("close", "hang-up"))
    );
    assert!(
        got.iter().any(|(a, r)| a == "error" && r == "nope"),
        "{got:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_fault_in_a_batch_merged_with_refusals_is_recorded_as_not_applied() {
    let (_upstream, port) = demo_upstream().await;
    let work = Scratch::new("inject-merged");
    let file = work.join("merged.jsonl");
    let mut cmd = proxy_cmd(&format!("http://127.0.0.1:{port}"), false);
    cmd.args([
        "--record",
        file.to_str().unwrap(),
        "--limit",
        "echo=1/h",
        "--fault",
        "name=lost,method=add,drop",
    ]);
    let (mut p, addrs, _) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"echo","params":["a"]},{"jsonrpc":"2.0","id":2,"method":"echo","params":["b"]},{"jsonrpc":"2.0","id":3,"method":"add","params":[1,2]}]"#;
    let (code, body) = post(addrs[0], batch);
    assert_eq!(code, Some(0), "{body}");
    let replies: Vec<Value> = serde_json::from_str(&body).unwrap();
    assert_eq!(replies.len(), 3, "{body}");
    assert!(
        replies.iter().any(|r| r["id"] == 3 && r["result"] == 3),
        "{body}"
    );
    p.term();
    let rec = rpctap::record::reader::read(&file).unwrap();
    let details: Vec<String> = rec
        .events
        .iter()
        .filter_map(|e| match e {
            rpctap::events::Event::Fault(f) => Some(f.detail.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(details.len(), 1, "{details:?}");
    assert!(details[0].starts_with("not applied"), "{details:?}");
}

/// The recording of a run under `--deny tool=echo` holds the refusal of the denied call and the
/// `tools/list` replies changed, each as injected by the deny rule, and `check` passes it.
fn deny_recorded(file: &Path, lists: usize) {
    let got = recorded_faults(file);
    let refused = got
        .iter()
        .filter(|(a, r)| a == "error" && r == "deny 1")
        .count();
    let hidden = got
        .iter()
        .filter(|(a, r)| a == "deny" && r == "deny")
        .count();
    assert_eq!((refused, hidden), (1, lists), "{got:?}");
    let (code, lines) = check_json(file);
    assert_eq!(code, Some(0), "{lines:#?}");
}

/// The Python SDK client's view under `--deny tool=echo`: `echo` not offered, its call answered
/// with an error saying why, the other tool working.
fn denied_as_the_client_saw_it(r: &[Value], other: &str) {
    let tools: Vec<&str> = r[0]["tools"]
        .as_array()
        .unwrap_or_else(|| panic!("{r:?}"))
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(!tools.contains(&"echo"), "{tools:?}");
    assert!(tools.contains(&other), "{tools:?}");
    assert_eq!(r[1]["exception"], "MCPError", "{:?}", r[1]);
    let m = r[1]["message"].as_str().unwrap();
    assert!(
        m.contains("\"echo\"") && m.contains("denied by rpctap"),
        "{m}"
    );
    assert!(r[2]["result"].is_object(), "{:?}", r[2]);
    assert_ne!(r[2]["result"]["isError"], true, "{:?}", r[2]);
}

/// `--deny` is a stage of the acting pipeline that no transport names: the same rule refuses a
/// tool's call (`-32601`, never reaching the server) and hides the tool from `tools/list` over
/// HTTP with SSE and with JSON replies (the Python SDK's server and client), the bridge (`serve`
/// in front of server-everything), stdio (server-everything) and WebSocket (a `websockets`
/// peer, compressed with context takeover), and is recorded as injected on each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_tool_is_refused_and_hidden_on_every_transport() {
    let work = Scratch::new("deny");
    for mode in ["sse", "json"] {
        let (_server, port) = py_server(mode).await;
        let file = work.join(format!("{mode}.jsonl"));
        let mut cmd = proxy_cmd(&format!("http://127.0.0.1:{port}"), false);
        cmd.args(["--record", file.to_str().unwrap(), "--deny", "tool=echo"]);
        let (mut p, addrs, _) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
        let url = format!("http://{}/mcp", addrs[0]);
        let r = client(&[
            &url,
            "auto",
            "5",
            "@tools",
            r#"echo:{"text":"hi"}"#,
            r#"add:{"a":2,"b":3}"#,
        ]);
        denied_as_the_client_saw_it(&r, "add");
        assert!(text(&r[2]).contains('5'), "{:?}", r[2]);
        p.term();
        deny_recorded(&file, 1);
    }

    // The bridge: `rpctap serve` in front of server-everything over stdio, the SDK's client
    // over Streamable HTTP.
    let file = work.join("serve.jsonl");
    let (mut p, addrs) = serve_with(
        &["--record", file.to_str().unwrap(), "--deny", "tool=echo"],
        &["serve on http://"],
    );
    let r = client(&[
        &format!("http://{}/mcp", addrs[0]),
        "auto",
        "5",
        "@tools",
        r#"echo:{"message":"hi"}"#,
        r#"get-sum:{"a":2,"b":3}"#,
    ]);
    denied_as_the_client_saw_it(&r, "get-sum");
    p.term();
    deny_recorded(&file, 1);

    let file = work.join("stdio.jsonl");
    let calls = serde_json::json!([
        "@tools",
        r#"echo:{"message":"hi"}"#,
        r#"get-sum:{"a":2,"b":3}"#
    ])
    .to_string();
    let r = client(&[
        "--stdio",
        "auto",
        "5",
        &calls,
        env!("CARGO_BIN_EXE_rpctap"),
        "stdio",
        "--no-hub",
        "--record",
        file.to_str().unwrap(),
        "--deny",
        "tool=echo",
        "--",
        "node",
        everything_js().to_str().unwrap(),
        "stdio",
    ]);
    denied_as_the_client_saw_it(&r, "get-sum");
    assert!(text(&r[2]).contains('5'), "{:?}", r[2]);
    deny_recorded(&file, 1);

    let file = work.join("ws.jsonl");
    let (server, port, env) = ws_peer_server().await;
    let mut cmd = proxy_cmd(&format!("http://127.0.0.1:{port}"), false);
    cmd.args(["--record", file.to_str().unwrap(), "--deny", "tool=echo"]);
    let (mut p, addrs, _) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    let v = json_stdout(
        Command::new(env.join("bin/python"))
            .arg(root().join("tests/interop/ws_peer.py"))
            .args(["denied", &format!("ws://{}/", addrs[0])]),
        "the WebSocket client",
    );
    for list in ["list", "list2"] {
        assert_eq!(
            v[list]["result"]["tools"],
            serde_json::json!([{ "name": "add" }]),
            "{v}"
        );
    }
    assert_eq!(v["denied"]["error"]["code"], -32601, "{v}");
    assert_eq!(v["add"]["result"], 5, "{v}");
    assert_eq!(
        v["stats"]["result"]["tools/call"], 0,
        "the server never saw it: {v}"
    );
    p.term();
    drop(server);
    deny_recorded(&file, 2);
}

/// A `delay` holds its own message only, on every transport (as two calls over HTTP are two
/// requests): over WebSocket a reply held (`at = "reply"`) or a call held (`at = "request"`) is
/// overtaken by the next call's reply, which comes at once — the stream is not held behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_websocket_a_delayed_message_waits_alone_and_the_next_call_overtakes_it() {
    let work = Scratch::new("inject-ws-overtaken");
    let file = work.join("ws.jsonl");
    let faults = [
        "name=late-reply,method=add,delay=1s,at=reply,count=1",
        "name=late-call,method=add,delay=1s,count=1",
    ];
    let (v, mut p, _server) = ws_client_through_faults("overtaken", &file, &faults).await;
    for (pair, (late, quick)) in [(1, 2), (3, 4)].into_iter().enumerate() {
        let got = &v["order"][pair];
        assert_eq!(got[0][0], quick, "the next call's reply first: {v}");
        assert!(got[0][1].as_f64().unwrap() < 0.8, "at once: {v}");
        assert_eq!(got[1][0], late, "{v}");
        assert!(got[1][1].as_f64().unwrap() >= 0.9, "held: {v}");
        assert_eq!(got[1][2], 3, "{v}");
    }
    p.term();
    recorded_and_clean(&file, &["delay", "delay"]);
}

/// The same over stdio in front of server-everything: a call held on its way (`at =
/// "request"`) is overtaken by the `ping` after it, whose reply comes at once.
#[test]
fn over_stdio_a_call_held_on_its_way_is_overtaken_by_the_next() {
    let work = Scratch::new("inject-stdio-overtaken");
    let file = work.join("stdio.jsonl");
    let mut p = LineProc::spawn(
        rpctap()
            .args([
                "stdio",
                "--no-hub",
                "--record",
                file.to_str().unwrap(),
                "--fault",
                "name=late-call,tool=get-sum,delay=1s",
                "--",
                "node",
                everything_js().to_str().unwrap(),
                "stdio",
            ])
            .stderr(Stdio::null()),
    );
    p.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
    );
    p.reply(1);
    p.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let t0 = std::time::Instant::now();
    p.send(
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"get-sum","arguments":{"a":2,"b":3}}}"#,
    );
    p.send(r#"{"jsonrpc":"2.0","id":3,"method":"ping"}"#);
    p.reply(3);
    let pinged = t0.elapsed();
    let sum = p.reply(2);
    let summed = t0.elapsed();
    assert!(
        pinged < std::time::Duration::from_millis(800),
        "the ping was held behind the call: {pinged:?}"
    );
    assert!(
        summed >= std::time::Duration::from_millis(950),
        "{summed:?}"
    );
    assert!(sum.contains('5'), "{sum}");
    p.rest();
    let _ = p.proc.0.wait();
    recorded_and_clean(&file, &["delay"]);
}

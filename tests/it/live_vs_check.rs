//! One inspector, live and offline: the misbehaving upstream's whole repertoire goes through a
//! recording proxy, and for every case the codes the live inspector flagged (the recording's
//! `anomaly` lines) are exactly the codes `rpctap check` finds in the recording — per scope.

use crate::common::*;
use std::time::Duration;

fn scratch(name: &str) -> Scratch {
    Scratch::new(&format!("lvc-{name}"))
}

/// POSTs call `n` (`method`, `params`) to `/mcp` with headers `h`: its exchange gets exactly
/// `codes` live (sorted).
async fn step_codes(
    p: &mut TestProxy,
    h: &[(&str, &str)],
    n: usize,
    method: &str,
    params: &str,
    codes: &[&str],
) {
    let body = format!(r#"{{"jsonrpc":"2.0","id":{n},"method":"{method}","params":{{{params}}}}}"#);
    let _ = send(p.addr, "POST", "/mcp", h, body).await;
    let mut got: Vec<String> = anomalies(&p.drain_exchange().await)
        .into_iter()
        .map(|a| a.0)
        .collect();
    got.sort();
    assert_eq!(got, codes, "step {n} ({method}) live");
}

#[tokio::test]
async fn every_misbehaving_case_gets_the_same_codes_live_and_in_check() {
    let call1 = r#"{"jsonrpc":"2.0","method":"m","id":1}"#;
    let batch12 =
        r#"[{"jsonrpc":"2.0","method":"m","id":1},{"jsonrpc":"2.0","method":"m","id":2}]"#;
    let tool =
        r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t","arguments":{}},"id":1}"#;
    // (case, request body, the codes its scope must get — live and in check)
    let table: Vec<(&str, String, Vec<&str>)> = vec![
        ("dup", format!("[{call1},{call1}]"), vec!["DUPLICATE_ID"]),
        (
            "unmatched",
            format!("[{call1}]"),
            vec!["UNMATCHED_RESPONSE"],
        ),
        ("type", call1.into(), vec!["ID_TYPE_MISMATCH"]),
        ("missing", batch12.into(), vec!["MISSING_RESPONSE"]),
        (
            "notif",
            format!(r#"[{call1},{{"jsonrpc":"2.0","method":"n"}}]"#),
            vec!["NOTIFICATION_REPLY"],
        ),
        ("batch", format!("[{call1}]"), vec!["INVALID_BATCH_REPLY"]),
        // A batch of two answered by one object: the single reply also answers neither call.
        (
            "batch",
            r#"[{"jsonrpc":"2.0","method":"m","id":7},{"jsonrpc":"2.0","method":"m","id":8}]"#
                .into(),
            vec![
                "INVALID_BATCH_REPLY",
                "MISSING_RESPONSE",
                "MISSING_RESPONSE",
                "UNMATCHED_RESPONSE",
            ],
        ),
        (
            "invalid",
            r#"{"jsonrpc":"1.0","method":"m","id":1}"#.into(),
            vec!["INVALID_ENVELOPE"],
        ),
        ("invalid-reply", call1.into(), vec!["INVALID_ENVELOPE"]),
        ("parse", call1.into(), vec!["PARSE_ERROR"]),
        ("nullid", call1.into(), vec!["NULL_ID_RESPONSE"]),
        (
            "unsafe",
            r#"{"jsonrpc":"2.0","method":"m","id":12345678901234567890}"#.into(),
            vec!["UNSAFE_ID"],
        ),
        // A JSON-RPC error carried by HTTP 500.
        ("status", call1.into(), vec!["HTTP_STATUS"]),
        (
            "notif-status",
            r#"{"jsonrpc":"2.0","method":"n"}"#.into(),
            vec!["HTTP_STATUS"],
        ),
        // A notification answered with a reply, and one refused with HTTP 400 and an id-less
        // error (which the transport allows: no reply to the notification).
        (
            "notif-body",
            r#"{"jsonrpc":"2.0","method":"n"}"#.into(),
            vec!["HTTP_STATUS", "NOTIFICATION_REPLY"],
        ),
        (
            "notif-refused",
            r#"{"jsonrpc":"2.0","method":"n"}"#.into(),
            vec!["HTTP_STATUS"],
        ),
        ("tool", tool.into(), vec!["TOOL_ERROR"]),
        // A reply body that is not JSON.
        (
            "notjson",
            call1.into(),
            vec!["MISSING_RESPONSE", "PARSE_ERROR"],
        ),
        (
            "empty-batch",
            format!("[{call1}]"),
            vec!["INVALID_ENVELOPE", "MISSING_RESPONSE"],
        ),
        // The client's body is not JSON, and the server answers it as if it were a call.
        (
            "default",
            "{not json".into(),
            vec!["PARSE_ERROR", "UNMATCHED_RESPONSE"],
        ),
        ("reject", call1.into(), vec![]),
    ];
    let (up, _u) = misbehaving_upstream().await;
    let dir = scratch("table");
    let file = dir.join("rec.jsonl");
    let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let mut want = Codes::new();
    for (n, (name, body, codes)) in table.iter().enumerate() {
        let h = [("content-type", "application/json"), MCP_ACCEPT];
        let _ = send(
            p.addr,
            "POST",
            &format!("/rpc?case={name}"),
            &h,
            body.clone(),
        )
        .await;
        let mut got: Vec<String> = anomalies(&p.drain_exchange().await)
            .into_iter()
            .map(|a| a.0)
            .collect();
        got.sort();
        assert_eq!(got, codes.clone(), "case {name} (#{n}) live");
        if !codes.is_empty() {
            want.insert(
                format!("exchange:{}", n + 1),
                codes.iter().map(|c| c.to_string()).collect(),
            );
        }
    }
    drop(p.stop);
    p.served.await.unwrap(); // the recording is whole once the proxy has finished
    assert_eq!(
        live_codes(&file),
        want,
        "the recording holds the live codes"
    );
    let Checked {
        codes: checked,
        exit,
        ..
    } = check_recording(&file);
    assert_eq!(
        checked, want,
        "check of the recording finds exactly the live codes"
    );
    assert_eq!(exit, Some(1), "error findings make check fail");
}

#[tokio::test]
async fn mcp_sessions_and_timeouts_get_the_same_codes_live_and_in_check() {
    let (up, _u) = misbehaving_upstream().await;
    let dir = scratch("mcp");
    let file = dir.join("rec.jsonl");
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            call_timeout: Some(0.3),
            ..record_flags(&file).shared
        },
        ..record_flags(&file)
    };
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let h = |sid: Option<&'static str>| {
        let mut h = vec![("content-type", "application/json"), MCP_ACCEPT];
        if let Some(s) = sid {
            h.push(("mcp-session-id", s));
            h.push(("mcp-protocol-version", "2025-06-18"));
        }
        h
    };
    let steps: [(&str, Option<&'static str>, &str); 5] = [
        (
            "init",
            None,
            r#"{"jsonrpc":"2.0","method":"initialize","params":{},"id":0}"#,
        ),
        (
            "early",
            Some("sess-A"),
            r#"{"jsonrpc":"2.0","method":"tools/list","id":1}"#,
        ),
        (
            "changed",
            Some("sess-A"),
            r#"{"jsonrpc":"2.0","method":"ping","id":2}"#,
        ),
        (
            "early",
            Some("sess-A"),
            r#"{"jsonrpc":"2.0","method":"ping","id":1}"#,
        ),
        // Answered 202 in a session: the reply never comes, the call times out.
        (
            "accepted",
            Some("sess-A"),
            r#"{"jsonrpc":"2.0","method":"ping","id":3}"#,
        ),
    ];
    for (case, sid, body) in steps {
        let _ = send(p.addr, "POST", &format!("/rpc?case={case}"), &h(sid), body).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await; // the call timeout passes for id 3
    let mut live: Vec<String> = anomalies(&p.drain().await)
        .into_iter()
        .map(|a| a.0)
        .collect();
    live.sort();
    assert_eq!(
        live,
        vec![
            "DUPLICATE_ID",
            "MCP_EARLY_REQUEST",
            "MCP_SESSION_CHANGED",
            "MISSING_RESPONSE"
        ],
    );
    drop(p.stop);
    p.served.await.unwrap(); // the recording is whole once the proxy has finished
    let want = live_codes(&file);
    assert_eq!(
        want.get("session:sess-A").map(Vec::len),
        Some(4),
        "{want:?}"
    );
    let checked = check_recording(&file).codes;
    assert_eq!(checked, want, "the timeout falls where it did live");
}

#[tokio::test]
async fn rpctaps_own_answers_are_not_the_servers_errors_live_or_in_check() {
    // Nothing listens on the upstream's port: each call gets rpctap's 502 with its id, and ends
    // missing ("upstream unreachable") — no HTTP_STATUS against a server that never answered.
    let dir = scratch("down");
    let file = dir.join("rec.jsonl");
    let port = free_port();
    let mut p = start_proxy_flags(&format!("http://127.0.0.1:{port}"), record_flags(&file)).await;
    let r = post_json(p.addr, "/rpc", r#"{"jsonrpc":"2.0","method":"m","id":5}"#).await;
    assert_eq!(r.status, 502);
    assert_eq!(r.json()["id"], 5);
    assert_eq!(r.json()["error"]["code"], -32003);
    let ev = p.drain().await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    let c = calls(&ev);
    assert!(
        matches!(&c[0].outcome, rpctap::events::Outcome::Missing { reason } if reason.contains("unreachable")),
        "{:?}",
        c[0].outcome
    );
    drop(p.stop);
    p.served.await.unwrap(); // the recording is whole once the proxy has finished
    let Checked {
        codes: checked,
        exit,
        ..
    } = check_recording(&file);
    assert!(checked.is_empty(), "{checked:?}");
    assert_eq!(exit, Some(0));
}

#[tokio::test]
async fn an_unreadable_request_gets_an_id_null_error() {
    // A chunked body cut off by a bad chunk header: rpctap cannot read it and says so, with the
    // id null the specification gives a request whose id could not be read.
    let (up, _u) = misbehaving_upstream().await;
    let p = start_proxy(&format!("http://{up}")).await;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"POST /rpc HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n5\r\n{\"jso\r\nzz\r\n")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
    let text = String::from_utf8_lossy(&buf);
    assert!(text.starts_with("HTTP/1.1 400"), "{text}");
    eprintln!("{text}");
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
    let json_start = body.find('{').unwrap_or(0);
    let v: serde_json::Value =
        serde_json::from_str(body[json_start..].trim_end_matches(['\r', '\n', '0'])).unwrap();
    assert_eq!(v["id"], serde_json::Value::Null);
    assert_eq!(v["error"]["code"], -32005);
}

/// MCP 2026-07-28's codes, live and in `check` alike: a scripted stateless server (discovery,
/// a tool that maps an argument to `Mcp-Param-Region` and asks for confirmation in an
/// `input_required` round, a listen stream, a log line) and a raw client that breaks one rule at
/// a time. The recording's per-client codes are exactly the live run's.
#[tokio::test]
async fn mcp_2026_07_28_codes_are_the_same_live_and_in_check() {
    let (up, _u) = start_upstream(|_parts, body| {
        Box::pin(async move {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = v["id"].clone();
            let ok = |result: serde_json::Value| {
                serde_json::json!({"jsonrpc":"2.0","id":id,"result":result}).to_string()
            };
            let reply = match v["method"].as_str().unwrap_or("") {
                // "Server Validation": a request without its `_meta` is refused with 400 and
                // the JSON-RPC error (as the conformance suite's reference server does).
                _ if v["params"]["_meta"].is_null() => json_reply(
                    400,
                    &serde_json::json!({"jsonrpc":"2.0","id":id,"error":{"code":-32602,"message":"Invalid params: missing _meta"}}).to_string(),
                ),
                "server/discover" => json_reply(
                    200,
                    &ok(serde_json::json!({"resultType":"complete","supportedVersions":["2026-07-28"],"ttlMs":60000,"cacheScope":"public","capabilities":{"tools":{"listChanged":true},"prompts":{}}})),
                ),
                // A listing without what 2026-07-28 asks of it (its type, its caching hints).
                "prompts/list" => json_reply(200, &ok(serde_json::json!({"prompts":[]}))),
                "tools/list" => json_reply(
                    200,
                    &ok(serde_json::json!({"resultType":"complete","ttlMs":0,"cacheScope":"private","tools":[{"name":"deploy","inputSchema":{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}},{"name":"chatty","inputSchema":{"type":"object"}}]})),
                ),
                "tools/call" if v["params"]["name"] == "chatty" => sse_reply(&[
                    r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"hi"}}"#,
                    &ok(serde_json::json!({"resultType":"complete","content":[]})),
                ]),
                "tools/call" if v["params"]["inputResponses"].is_null() => json_reply(
                    200,
                    &ok(serde_json::json!({"resultType":"input_required","inputRequests":{"confirm":{"method":"elicitation/create","params":{"message":"deploy?","requestedSchema":{"type":"object"}}}},"requestState":"st-1"})),
                ),
                "subscriptions/listen" => sse_reply(&[
                    r#"{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}"#,
                    r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed","params":{"_meta":{"io.modelcontextprotocol/subscriptionId":1}}}"#,
                ]),
                _ => json_reply(200, &ok(serde_json::json!({"resultType":"complete","content":[]}))),
            };
            reply
        })
    })
    .await;
    let dir = scratch("modern");
    let file = dir.join("rec.jsonl");
    let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let meta = |version: &str, caps: &str| {
        format!(
            r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"{version}","io.modelcontextprotocol/clientInfo":{{"name":"raw","version":"1"}}{caps}}}"#
        )
    };
    let caps = r#","io.modelcontextprotocol/clientCapabilities":{}"#;
    // (the codes it must get, version, method, tool, Mcp-Param-Region, params)
    type Step<'a> = (
        Vec<&'a str>,
        &'a str,
        &'a str,
        Option<&'a str>,
        Option<&'a str>,
        String,
    );
    let steps: Vec<Step> = vec![
        (
            vec![],
            "2026-07-28",
            "server/discover",
            None,
            None,
            meta("2026-07-28", caps),
        ),
        (
            vec![],
            "2026-07-28",
            "tools/list",
            None,
            None,
            meta("2026-07-28", caps),
        ),
        // The round asks for elicitation, which this call's _meta did not declare.
        (
            vec!["MCP_CAPABILITY"],
            "2026-07-28",
            "tools/call",
            Some("deploy"),
            Some("eu"),
            format!(
                r#""name":"deploy","arguments":{{"region":"eu"}},{}"#,
                meta("2026-07-28", caps)
            ),
        ),
        // Its retry changes the state, and its header disagrees with the argument.
        (
            vec!["MCP_HEADER_MISMATCH", "MCP_REQUEST_STATE"],
            "2026-07-28",
            "tools/call",
            Some("deploy"),
            Some("us"),
            format!(
                r#""name":"deploy","arguments":{{"region":"eu"}},"inputResponses":{{"confirm":{{"action":"accept","content":{{}}}}}},"requestState":"st-2",{}"#,
                meta("2026-07-28", caps)
            ),
        ),
        (
            vec!["MCP_VERSION"],
            "2027-01-01",
            "tools/list",
            None,
            None,
            meta("2027-01-01", caps),
        ),
        (
            vec!["MCP_META"],
            "2026-07-28",
            "tools/list",
            None,
            None,
            meta("2026-07-28", ""),
        ),
        // No `_meta` at all, refused with 400 as the specification says: the missing keys
        // are the client's fault, the status is right (no `HTTP_STATUS`).
        (
            vec!["MCP_META"],
            "2026-07-28",
            "server/discover",
            None,
            None,
            String::new(),
        ),
        (
            vec![],
            "2026-07-28",
            "subscriptions/listen",
            None,
            None,
            format!(
                r#""notifications":{{"toolsListChanged":true}},{}"#,
                meta("2026-07-28", caps)
            ),
        ),
        (
            vec!["MCP_RESULT_SHAPE"],
            "2026-07-28",
            "prompts/list",
            None,
            None,
            meta("2026-07-28", caps),
        ),
        // Logging asked for (a deprecated feature: flagged once per client)…
        (
            vec!["MCP_DEPRECATED"],
            "2026-07-28",
            "tools/call",
            Some("chatty"),
            None,
            format!(
                r#""name":"chatty","arguments":{{}},{}"#,
                meta(
                    "2026-07-28",
                    r#","io.modelcontextprotocol/clientCapabilities":{},"io.modelcontextprotocol/logLevel":"info""#
                )
            ),
        ),
        // …and a log message on the stream of a call that did not ask for one.
        (
            vec!["MCP_UNASKED_LOG"],
            "2026-07-28",
            "tools/call",
            Some("chatty"),
            None,
            format!(
                r#""name":"chatty","arguments":{{}},{}"#,
                meta("2026-07-28", caps)
            ),
        ),
    ];
    for (n, (codes, version, method, tool, region, params)) in steps.into_iter().enumerate() {
        let mut h = vec![
            ("content-type", "application/json"),
            MCP_ACCEPT,
            ("mcp-protocol-version", version),
            ("mcp-method", method),
        ];
        if let Some(t) = tool {
            h.push(("mcp-name", t));
        }
        if let Some(r) = region {
            h.push(("mcp-param-region", r));
        }
        step_codes(&mut p, &h, n, method, &params, &codes).await;
    }
    drop(p.stop);
    p.served.await.unwrap();
    let want = live_codes(&file);
    // One client's group, and the request without `_meta` in its exchange (no clientInfo to
    // group it by).
    assert_eq!(
        want.keys().collect::<Vec<_>>(),
        vec!["exchange:7", "stateless:raw/1@127.0.0.1"],
        "{want:?}"
    );
    assert_eq!(want["exchange:7"], ["MCP_META"], "no HTTP_STATUS: {want:?}");
    let c = check_recording(&file);
    assert_eq!(c.codes, want, "check finds exactly the live codes");
    assert_eq!(c.exit, Some(1));
}

/// MCP tasks against a misbehaving task server, each `MCP_TASK_*` rule (and `MCP_TOOL_ORDER`)
/// provoked once and found alike live and by `check`: a task for a client that did not declare
/// the extension, a poll too soon, another client's poll answered, a completed task without its
/// result, a finished task that changes, a reordered tool list, and a task left running when its
/// session is deleted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mcp_tasks_codes_are_the_same_live_and_in_check() {
    let polls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let lists = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (up, _u) = start_upstream(move |parts, body| {
        let polls = polls.clone();
        let lists = lists.clone();
        Box::pin(async move {
            if parts.method == http::Method::DELETE {
                return http::Response::builder().status(200).body(boxed("")).unwrap();
            }
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = v["id"].clone();
            let ok = |result: serde_json::Value| {
                json_reply(
                    200,
                    &serde_json::json!({"jsonrpc":"2.0","id":id,"result":result}).to_string(),
                )
            };
            let task = |status: &str| {
                serde_json::json!({"taskId":"T1","status":status,"createdAt":"2026-12-07T10:00:00Z","lastUpdatedAt":"2026-12-07T10:00:00Z","ttlMs":600000,"pollIntervalMs":1000})
            };
            match v["method"].as_str().unwrap_or("") {
                "tools/list" => {
                    let n = lists.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let names = if n == 0 { ["a", "b"] } else { ["b", "a"] };
                    let tools: Vec<_> = names
                        .iter()
                        .map(|n| serde_json::json!({"name":n,"inputSchema":{"type":"object"}}))
                        .collect();
                    ok(serde_json::json!({"resultType":"complete","tools":tools,"ttlMs":0,"cacheScope":"public"}))
                }
                "tools/call" if !v["params"]["task"].is_null() => {
                    ok(serde_json::json!({"task":{"taskId":"L1","status":"working","ttl":null}}))
                }
                "tools/call" => {
                    let mut t = task("working");
                    t["resultType"] = "task".into();
                    if v["params"]["_meta"]["io.modelcontextprotocol/clientCapabilities"]["extensions"].is_null() {
                        t["taskId"] = "T0".into();
                    }
                    ok(t)
                }
                "tasks/get" => {
                    let n = polls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let mut t = task(match n {
                        0 | 1 => "working",
                        2 => "completed",
                        _ => "working",
                    });
                    t["resultType"] = "complete".into();
                    ok(t)
                }
                _ => ok(serde_json::json!({"resultType":"complete"})),
            }
        })
    })
    .await;
    let dir = scratch("tasks");
    let file = dir.join("rec.jsonl");
    let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let meta = |client: &str, ext: bool| {
        let caps = if ext {
            r#"{"extensions":{"io.modelcontextprotocol/tasks":{}}}"#
        } else {
            "{}"
        };
        format!(
            r#""_meta":{{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientInfo":{{"name":"{client}","version":"1"}},"io.modelcontextprotocol/clientCapabilities":{caps}}}"#
        )
    };
    // (codes, method, Mcp-Name, params, session)
    type Step<'a> = (
        Vec<&'a str>,
        &'a str,
        Option<&'a str>,
        String,
        Option<&'a str>,
    );
    let steps: Vec<Step> = vec![
        (vec![], "tools/list", None, meta("raw", true), None),
        (
            vec!["MCP_TASK_UNDECLARED"],
            "tools/call",
            Some("a"),
            format!(r#""name":"a","arguments":{{}},{}"#, meta("raw", false)),
            None,
        ),
        (
            vec![],
            "tools/call",
            Some("a"),
            format!(r#""name":"a","arguments":{{}},{}"#, meta("raw", true)),
            None,
        ),
        (
            vec!["MCP_TASK_POLL"],
            "tasks/get",
            Some("T1"),
            format!(r#""taskId":"T1",{}"#, meta("raw", true)),
            None,
        ),
        (
            vec!["MCP_TASK_BINDING"],
            "tasks/get",
            Some("T1"),
            format!(r#""taskId":"T1",{}"#, meta("other", true)),
            None,
        ),
        (
            vec!["MCP_TASK_STATUS"],
            "tasks/get",
            Some("T1"),
            format!(r#""taskId":"T1",{}"#, meta("raw", true)),
            None,
        ),
        (
            vec!["MCP_TASK_POLL", "MCP_TASK_STATUS"],
            "tasks/get",
            Some("T1"),
            format!(r#""taskId":"T1",{}"#, meta("raw", true)),
            None,
        ),
        (
            vec!["MCP_TOOL_ORDER"],
            "tools/list",
            None,
            meta("raw", true),
            None,
        ),
        // 2025-11-25 in a session: a task asked for, then the session deleted while it runs.
        (
            vec![],
            "tools/call",
            None,
            r#""name":"slow","arguments":{},"task":{"ttl":60000}"#.to_string(),
            Some("s-tasks"),
        ),
    ];
    for (n, (codes, method, name, params, session)) in steps.into_iter().enumerate() {
        let mut h = vec![("content-type", "application/json"), MCP_ACCEPT];
        match session {
            Some(s) => h.extend([
                ("mcp-session-id", s),
                ("mcp-protocol-version", "2025-11-25"),
            ]),
            None => h.extend([
                ("mcp-protocol-version", "2026-07-28"),
                ("mcp-method", method),
            ]),
        }
        if let Some(t) = name {
            h.push(("mcp-name", t));
        }
        step_codes(&mut p, &h, n, method, &params, &codes).await;
    }
    let h = [
        ("mcp-session-id", "s-tasks"),
        ("mcp-protocol-version", "2025-11-25"),
    ];
    let _ = send(p.addr, "DELETE", "/mcp", &h, String::new()).await;
    let got: Vec<String> = anomalies(&p.drain_exchange().await)
        .into_iter()
        .map(|a| a.0)
        .collect();
    assert_eq!(got, ["MCP_TASK_UNFINISHED"], "the deleted session's task");
    drop(p.stop);
    p.served.await.unwrap();
    let want = live_codes(&file);
    let c = check_recording(&file);
    assert_eq!(c.codes, want, "check finds exactly the live codes");
    assert_eq!(c.exit, Some(1));
}

//! The MCP-level checks against a misbehaving MCP server (hand-written here, over Streamable
//! HTTP): a scripted session in which each of the MCP codes is provoked exactly once, live and in
//! `rpctap check` of the recording, with well-behaved traffic around each case that must stay
//! clean.

mod common;

use common::*;
use std::time::Duration;

const SID: &str = "sess-mcp-1";
const VERSION: &str = "2025-06-18";

fn result(id: &serde_json::Value, r: serde_json::Value) -> String {
    serde_json::json!({"jsonrpc":"2.0","id":id,"result":r}).to_string()
}

/// The misbehaving server. It declares only `tools` (no `listChanged`), lists three tools, and
/// answers each method as the case needs.
async fn bad_mcp_server() -> (std::net::SocketAddr, Stop) {
    start_upstream(|parts, body| {
        Box::pin(async move {
            if parts.uri.path() == "/auth" {
                let challenge = if parts.uri.query() == Some("good") {
                    r#"Bearer resource_metadata="https://example.test/.well-known/oauth-protected-resource""#
                } else {
                    r#"Bearer realm="mcp""#
                };
                return http::Response::builder()
                    .status(401)
                    .header("www-authenticate", challenge)
                    .body(boxed(""))
                    .unwrap();
            }
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            let id = v["id"].clone();
            let method = v["method"].as_str().unwrap_or("").to_string();
            let sid = parts
                .headers
                .get("mcp-session-id")
                .and_then(|h| h.to_str().ok())
                .unwrap_or("");
            if method == "ping" && sid == SID && v["id"] == 77 {
                // The server restarted: it no longer knows the session.
                return http::Response::builder().status(404).body(boxed("Session not found")).unwrap();
            }
            if id.is_null() {
                return http::Response::builder().status(202).body(boxed("")).unwrap();
            }
            let num = serde_json::json!({"type": "number"});
            match method.as_str() {
                "initialize" => {
                    let mut r = json_reply(200, &result(&id, serde_json::json!({
                        "protocolVersion": VERSION,
                        "capabilities": {"tools": {}},
                        "serverInfo": {"name": "bad", "version": "1"}
                    })));
                    r.headers_mut().insert("mcp-session-id", SID.parse().unwrap());
                    r
                }
                "tools/list" => json_reply(200, &result(&id, serde_json::json!({"tools": [
                    {"name": "add", "inputSchema": {"type": "object", "properties": {"a": num, "b": num}, "required": ["a", "b"]},
                     "outputSchema": {"type": "object", "properties": {"sum": {"type": "integer"}}, "required": ["sum"]}},
                    {"name": "big", "inputSchema": {"type": "object"}},
                    {"name": "slow", "inputSchema": {"type": "object"}}
                ]}))),
                "tools/call" => match v["params"]["name"].as_str() {
                    Some("add") => {
                        let args = &v["params"]["arguments"];
                        // Wrong type in the output when asked to add 2 and 2.
                        let sum = if args["a"] == 2 { serde_json::json!("four") } else { serde_json::json!(3) };
                        json_reply(200, &result(&id, serde_json::json!({
                            "content": [{"type": "text", "text": sum.to_string()}],
                            "structuredContent": {"sum": sum}
                        })))
                    }
                    Some("big") => json_reply(200, &result(&id, serde_json::json!({
                        "content": [{"type": "text", "text": "x".repeat(1_200_000)}]
                    }))),
                    Some("slow") => {
                        let token = v["params"]["_meta"]["progressToken"].clone();
                        let p = |n: f64| serde_json::json!({"jsonrpc":"2.0","method":"notifications/progress",
                            "params":{"progressToken": token, "progress": n, "total": 3}}).to_string();
                        let done = result(&id, serde_json::json!({"content": [{"type": "text", "text": "done"}]}));
                        // The second notification repeats the first one's progress.
                        sse_reply(&[&p(1.0), &p(1.0), &p(2.0), &done])
                    }
                    _ => json_reply(200, &serde_json::json!({"jsonrpc":"2.0","id":id,
                        "error":{"code":-32602,"message":"Unknown tool"}}).to_string()),
                },
                "resources/list" => json_reply(200, &result(&id, serde_json::json!({"resources": []}))),
                _ => json_reply(200, &result(&id, serde_json::json!({}))),
            }
        })
    })
    .await
}

/// A step of the script: its name, the request's headers and body, and the codes it must get.
type Step<'a> = (&'a str, &'a [(&'a str, &'a str)], String, Vec<&'a str>);

#[tokio::test]
async fn each_mcp_code_once_live_and_in_check() {
    let (up, _u) = bad_mcp_server().await;
    let dir = Scratch::new("mcp-checks");
    let file = dir.join("rec.jsonl");
    let flags = rpctap::cli::ProxyFlags {
        record: Some(file.clone()),
        ..Default::default()
    };
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let base = [("content-type", "application/json"), MCP_ACCEPT];
    let session = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", SID),
        ("mcp-protocol-version", VERSION),
    ];
    // (headers, body, the codes it must get — live)
    let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
    let call = |id: u32, name: &str, args: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}"#
        )
    };
    let wrong_method = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", SID),
        ("mcp-protocol-version", VERSION),
        ("mcp-method", "tools/call"),
    ];
    let old_version = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", SID),
        ("mcp-protocol-version", "2025-03-26"),
    ];
    let slow = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"slow","arguments":{},"_meta":{"progressToken":"tok-1"}}}"#;
    let steps: Vec<Step> = vec![
        ("initialize", &base, init.into(), vec![]),
        ("initialized", &session, r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.into(), vec![]),
        ("tools/list", &session, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.into(), vec![]),
        ("good call", &session, call(2, "add", r#"{"a":1,"b":2}"#), vec![]),
        ("bad output", &session, call(3, "add", r#"{"a":2,"b":2}"#), vec!["MCP_OUTPUT_SCHEMA"]),
        ("bad input", &session, call(4, "add", r#"{"a":"one","b":2}"#), vec!["MCP_INPUT_SCHEMA"]),
        ("unknown tool", &session, call(5, "nope", "{}"), vec!["MCP_UNKNOWN_TOOL"]),
        ("large result", &session, call(6, "big", "{}"), vec!["MCP_LARGE_RESULT"]),
        ("no capability", &session, r#"{"jsonrpc":"2.0","id":7,"method":"resources/list"}"#.into(), vec!["MCP_CAPABILITY"]),
        ("header", &wrong_method, r#"{"jsonrpc":"2.0","id":8,"method":"tools/list"}"#.into(), vec!["MCP_HEADER_MISMATCH"]),
        ("version", &old_version, r#"{"jsonrpc":"2.0","id":10,"method":"ping"}"#.into(), vec!["MCP_HEADER_MISMATCH"]),
        ("progress", &session, slow.into(), vec!["MCP_PROGRESS"]),
        ("cancel", &session, r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":999,"reason":"x"}}"#.into(), vec!["MCP_CANCEL_UNKNOWN"]),
        // A cancel of a request that was sent (and already answered) is a race, not flagged.
        ("late cancel", &session, r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":9}}"#.into(), vec![]),
        ("auth", &base, init.into(), vec!["MCP_AUTH"]),
        ("auth ok", &base, init.into(), vec![]),
        // The session is gone on the server (restarted): the 404 is flagged once.
        ("lost", &session, r#"{"jsonrpc":"2.0","id":77,"method":"ping"}"#.into(), vec!["MCP_SESSION_LOST"]),
    ];
    let mut all = Vec::new();
    for (name, h, body, want) in &steps {
        let path = match *name {
            "auth" => "/auth",
            "auth ok" => "/auth?good",
            _ => "/mcp",
        };
        let r = send(p.addr, "POST", path, h, body.clone()).await;
        assert!(r.status.as_u16() < 500, "{name}: {}", r.status);
        let mut got: Vec<String> = anomalies(&p.drain_exchange().await)
            .into_iter()
            .map(|a| a.0)
            .collect();
        got.sort();
        assert_eq!(got, *want, "{name}: live");
        all.extend(got);
    }
    // Every MCP code of the table was provoked, each exactly once.
    let mcp: Vec<&String> = all
        .iter()
        .filter(|c| c.starts_with("MCP_") && *c != "MCP_HEADER_MISMATCH")
        .collect();
    let mut uniq = mcp.clone();
    uniq.dedup();
    assert_eq!(mcp.len(), uniq.len(), "{all:?}");
    for code in [
        "MCP_CAPABILITY",
        "MCP_OUTPUT_SCHEMA",
        "MCP_INPUT_SCHEMA",
        "MCP_UNKNOWN_TOOL",
        "MCP_SESSION_LOST",
        "MCP_PROGRESS",
        "MCP_CANCEL_UNKNOWN",
        "MCP_LARGE_RESULT",
        "MCP_AUTH",
    ] {
        assert_eq!(
            all.iter().filter(|c| *c == code).count(),
            1,
            "{code}: {all:?}"
        );
    }
    // The header rule: once for the method, once for the version.
    assert_eq!(
        all.iter().filter(|c| *c == "MCP_HEADER_MISMATCH").count(),
        2
    );
    drop(p.stop);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let live = live_codes(&file);
    let checked = check_recording(&file);
    assert_eq!(checked.codes, live, "check finds exactly the live codes");
    let mut flat: Vec<String> = live.values().flatten().cloned().collect();
    flat.sort();
    all.sort();
    assert_eq!(flat, all, "the recording holds every live code");
    assert_eq!(checked.exit, Some(1), "MCP errors fail check");
}

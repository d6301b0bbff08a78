//! Inspection over real sockets: a deliberately misbehaving upstream triggers every anomaly code,
//! each exactly once with the right id; the demo server's whole repertoire raises none.

use crate::common::*;
use bytes::Bytes;
use http::Response;
use rpctap::events::{Event, Outcome};
use std::time::Duration;

async fn case(
    proxy: &mut TestProxy,
    name: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Vec<(String, Option<String>)> {
    let mut h = vec![("content-type", "application/json"), MCP_ACCEPT];
    h.extend_from_slice(headers);
    let _ = send(
        proxy.addr,
        "POST",
        &format!("/rpc?case={name}"),
        &h,
        body.to_string(),
    )
    .await;
    anomalies(&proxy.drain_exchange().await)
}

fn one(code: &str, id: Option<&str>) -> Vec<(String, Option<String>)> {
    vec![(code.to_string(), id.map(str::to_string))]
}

#[tokio::test]
async fn every_anomaly_code_is_flagged_once_with_the_right_id() {
    let (up, _u) = misbehaving_upstream().await;
    let mut p = start_proxy(&format!("http://{up}")).await;
    let call1 = r#"{"jsonrpc":"2.0","method":"m","id":1}"#;

    assert_eq!(
        case(
            &mut p,
            "dup",
            &[],
            r#"[{"jsonrpc":"2.0","method":"m","id":1},{"jsonrpc":"2.0","method":"m","id":1}]"#
        )
        .await,
        one("DUPLICATE_ID", Some("1"))
    );
    assert_eq!(
        case(&mut p, "unmatched", &[], &format!("[{call1}]")).await,
        one("UNMATCHED_RESPONSE", Some("99"))
    );
    assert_eq!(
        case(&mut p, "type", &[], call1).await,
        one("ID_TYPE_MISMATCH", Some("\"1\""))
    );
    assert_eq!(
        case(
            &mut p,
            "missing",
            &[],
            r#"[{"jsonrpc":"2.0","method":"m","id":1},{"jsonrpc":"2.0","method":"m","id":2}]"#
        )
        .await,
        one("MISSING_RESPONSE", Some("2"))
    );
    assert_eq!(
        case(
            &mut p,
            "notif",
            &[],
            &format!(r#"[{call1},{{"jsonrpc":"2.0","method":"n"}}]"#)
        )
        .await,
        one("NOTIFICATION_REPLY", Some("5"))
    );
    assert_eq!(
        case(&mut p, "batch", &[], &format!("[{call1}]")).await,
        one("INVALID_BATCH_REPLY", Some("1"))
    );
    assert_eq!(
        case(
            &mut p,
            "invalid",
            &[],
            r#"{"jsonrpc":"1.0","method":"m","id":1}"#
        )
        .await,
        one("INVALID_ENVELOPE", Some("1"))
    );
    assert_eq!(
        case(&mut p, "invalid-reply", &[], call1).await,
        one("INVALID_ENVELOPE", Some("1"))
    );
    assert_eq!(
        case(&mut p, "parse", &[], call1).await,
        one("PARSE_ERROR", None)
    );
    assert_eq!(
        case(&mut p, "nullid", &[], call1).await,
        one("NULL_ID_RESPONSE", None)
    );
    assert_eq!(
        case(
            &mut p,
            "unsafe",
            &[],
            r#"{"jsonrpc":"2.0","method":"m","id":12345678901234567890}"#
        )
        .await,
        one("UNSAFE_ID", Some("12345678901234567890"))
    );
    assert_eq!(
        case(&mut p, "status", &[], call1).await,
        one("HTTP_STATUS", Some("1"))
    );
    assert_eq!(
        case(
            &mut p,
            "notif-status",
            &[],
            r#"{"jsonrpc":"2.0","method":"n"}"#
        )
        .await,
        one("HTTP_STATUS", None)
    );
    assert_eq!(
        case(
            &mut p,
            "tool",
            &[],
            r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"t","arguments":{}},"id":1}"#
        )
        .await,
        one("TOOL_ERROR", Some("1"))
    );
    // MCP lifecycle: a session rpctap saw start, a request before notifications/initialized.
    assert!(case(
        &mut p,
        "init",
        &[],
        r#"{"jsonrpc":"2.0","method":"initialize","params":{},"id":0}"#
    )
    .await
    .is_empty());
    assert_eq!(
        case(
            &mut p,
            "early",
            &[
                ("mcp-session-id", "sess-A"),
                ("mcp-protocol-version", "2025-06-18")
            ],
            r#"{"jsonrpc":"2.0","method":"tools/list","id":1}"#
        )
        .await,
        one("MCP_EARLY_REQUEST", Some("1"))
    );
    assert_eq!(
        case(
            &mut p,
            "changed",
            &[
                ("mcp-session-id", "sess-A"),
                ("mcp-protocol-version", "2025-06-18")
            ],
            r#"{"jsonrpc":"2.0","method":"ping","id":2}"#
        )
        .await,
        one("MCP_SESSION_CHANGED", None)
    );
    // Ids already used in an MCP session may not be used again, even after their reply.
    assert_eq!(
        case(
            &mut p,
            "early",
            &[
                ("mcp-session-id", "sess-A"),
                ("mcp-protocol-version", "2025-06-18")
            ],
            r#"{"jsonrpc":"2.0","method":"ping","id":1}"#
        )
        .await,
        one("DUPLICATE_ID", Some("1"))
    );
    // A 404 without a JSON-RPC body: the call is rejected, which is no anomaly.
    assert!(case(&mut p, "reject", &[], call1).await.is_empty());

    assert_eq!(p.inspector.pending_calls(), 0, "every call ended");
}

#[tokio::test]
async fn oversized_frames_are_forwarded_and_flagged_not_inspected() {
    let (up, _u) = misbehaving_upstream().await;
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            max_frame_bytes: Some(1024),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let r = send(
        p.addr,
        "POST",
        "/rpc?case=big",
        &[("content-type", "application/json")],
        r#"{"jsonrpc":"2.0","method":"m","id":1}"#,
    )
    .await;
    assert_eq!(r.body.len(), 4096 + 36);
    let a = anomalies(&p.drain().await);
    assert_eq!(a[0], ("NOT_INSPECTED".to_string(), None));
}

#[tokio::test]
async fn demo_repertoire_raises_no_anomaly_json_and_sse() {
    let (demo, _d) = start_demo().await;
    let mut p = start_proxy(&format!("http://{demo}")).await;
    for body in [
        r#"{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}"#,
        r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 2}"#,
        r#"[{"jsonrpc": "2.0", "method": "add", "params": [1, 2, 4], "id": "1"},{"jsonrpc": "2.0", "method": "echo", "params": {"hello": "world"}},{"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": "2"},{"jsonrpc": "2.0", "method": "nope", "id": "3"}]"#,
        r#"{"jsonrpc": "2.0", "method": "echo", "params": ["fire and forget"]}"#,
        r#"[{"jsonrpc": "2.0", "method": "echo"},{"jsonrpc": "2.0", "method": "echo"}]"#,
        r#"{"jsonrpc": "2.0", "method": "error", "params": [-32001, "Rate limited", {"retry_after": 1}], "id": 7}"#,
        r#"{"jsonrpc": "2.0", "method": "sleep", "params": {"ms": 10}, "id": "slow"}"#,
        r#"{"jsonrpc": "2.0", "method": "add", "params": ["x"], "id": 8}"#,
        r#"{"jsonrpc": "2.0", "method": "echo", "id": 9.5e0}"#,
        r#"{"jsonrpc": "2.0", "method": "echo", "id": 12345678901234567890}"#,
    ] {
        let _ = post_json(p.addr, "/jsonrpc", body).await;
    }
    let ev = p.drain().await;
    let codes: Vec<String> = anomalies(&ev).into_iter().map(|a| a.0).collect();
    // The last two requests use unsafe ids on purpose; nothing else may be flagged.
    assert_eq!(codes, vec!["UNSAFE_ID", "UNSAFE_ID"], "{codes:?}");
    assert_eq!(calls(&ev).len(), 10);

    for accept in ["application/json, text/event-stream", "application/json"] {
        let h = |sid: &str| {
            vec![
                ("content-type", "application/json".to_string()),
                ("accept", accept.to_string()),
                ("mcp-session-id", sid.to_string()),
                ("mcp-protocol-version", "2025-06-18".to_string()),
            ]
        };
        let init = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;
        let r = send(
            p.addr,
            "POST",
            "/mcp",
            &[("content-type", "application/json"), ("accept", accept)],
            init,
        )
        .await;
        let sid = r.headers["mcp-session-id"].to_str().unwrap().to_string();
        let post = |body: &'static str| {
            let hs = h(&sid);
            let addr = p.addr;
            async move {
                let hr: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (*k, v.as_str())).collect();
                send(addr, "POST", "/mcp", &hr, body).await
            }
        };
        assert_eq!(
            post(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)
                .await
                .status,
            202
        );
        // The session's GET stream, open while the calls run.
        let get_addr = p.addr;
        let get_sid = sid.clone();
        let stream = tokio::spawn(async move {
            send(
                get_addr,
                "GET",
                "/mcp",
                &[
                    ("accept", "text/event-stream"),
                    ("mcp-session-id", &get_sid),
                    ("mcp-protocol-version", "2025-06-18"),
                ],
                "",
            )
            .await
        });
        for body in [
            r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
            r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}"#,
            r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"slow","arguments":{"steps":2,"delay_ms":10},"_meta":{"progressToken":"p"}}}"#,
            r#"{"jsonrpc":"2.0","id":6,"method":"resources/list"}"#,
            r#"{"jsonrpc":"2.0","id":7,"method":"resources/read","params":{"uri":"demo://readme"}}"#,
            r#"{"jsonrpc":"2.0","id":8,"method":"prompts/list"}"#,
            r#"{"jsonrpc":"2.0","id":9,"method":"prompts/get","params":{"name":"greet","arguments":{"name":"x"}}}"#,
            r#"[{"jsonrpc":"2.0","id":10,"method":"ping"},{"jsonrpc":"2.0","id":11,"method":"tools/list"}]"#,
            r#"{"jsonrpc":"2.0","id":12,"method":"nope"}"#,
        ] {
            let r = post(body).await;
            assert_eq!(r.status, 200, "{body}");
        }
        let ended = send(
            p.addr,
            "DELETE",
            "/mcp",
            &[
                ("mcp-session-id", &sid),
                ("mcp-protocol-version", "2025-06-18"),
            ],
            "",
        )
        .await;
        assert_eq!(ended.status, 200);
        let s = tokio::time::timeout(Duration::from_secs(5), stream)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(s.status, 200);
        let ev = p.drain().await;
        assert!(anomalies(&ev).is_empty(), "{accept}: {:?}", anomalies(&ev));
        let c = calls(&ev);
        assert_eq!(c.len(), 13, "{accept}");
        assert!(c
            .iter()
            .all(|c| matches!(c.outcome, Outcome::Result | Outcome::Error { .. })));
        let slow = c
            .iter()
            .find(|c| c.target.as_deref() == Some("slow"))
            .unwrap();
        assert_eq!(slow.outcome, Outcome::Result);
        let progress = ev
            .iter()
            .filter(|e| matches!(&***e, Event::Message(m) if m.method.as_deref() == Some("notifications/progress")))
            .count();
        assert_eq!(
            progress,
            if accept.contains("event-stream") {
                2
            } else {
                0
            }
        );
    }
    // The `fail` tool is a tool error, flagged as a warning.
    let sid = mcp_session(p.addr).await;
    let r = send(
        p.addr,
        "POST",
        "/mcp",
        &[
            ("content-type", "application/json"),
            MCP_ACCEPT,
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"fail","arguments":{}}}"#,
    )
    .await;
    assert_eq!(sse_data(&r.text())[0]["result"]["isError"], true);
    assert_eq!(anomalies(&p.drain().await), one("TOOL_ERROR", Some("1")));
}

#[tokio::test]
async fn legacy_http_sse_transport_is_correlated_across_exchanges() {
    // 2024-11-05 transport: GET /sse gives an `endpoint` event; POSTs to it are answered 202 and
    // their replies come on the GET stream.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let rx = std::sync::Arc::new(tokio::sync::Mutex::new(Some(rx)));
    let (up, _u) = start_upstream(move |parts, body| {
        let tx = tx.clone();
        let rx = rx.clone();
        Box::pin(async move {
            if parts.method == http::Method::GET {
                let mut rx = rx.lock().await.take().unwrap();
                let (otx, orx) = tokio::sync::mpsc::channel::<
                    Result<http_body::Frame<Bytes>, std::convert::Infallible>,
                >(8);
                tokio::spawn(async move {
                    let _ = otx
                        .send(Ok(http_body::Frame::data(Bytes::from_static(
                            b"event: endpoint\ndata: /messages?sessionId=legacy1\n\n",
                        ))))
                        .await;
                    while let Some(req) = rx.recv().await {
                        let v: serde_json::Value = serde_json::from_slice(&req).unwrap();
                        if v["method"] == "never" {
                            continue; // never answered
                        }
                        let reply = serde_json::json!({"jsonrpc":"2.0","id":v["id"],"result":{}});
                        let _ = otx
                            .send(Ok(http_body::Frame::data(Bytes::from(format!(
                                "event: message\ndata: {reply}\n\n"
                            )))))
                            .await;
                    }
                });
                let mut orx = orx;
                let body =
                    http_body_util::StreamBody::new(futures_util::stream::poll_fn(move |cx| {
                        orx.poll_recv(cx)
                    }));
                return Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(http_body_util::combinators::UnsyncBoxBody::new(body))
                    .unwrap();
            }
            tx.send(body).await.unwrap();
            Response::builder()
                .status(202)
                .body(boxed("Accepted"))
                .unwrap()
        })
    })
    .await;
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            call_timeout: Some(0.3),
            ..Default::default()
        },
        ..Default::default()
    };
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let addr = p.addr;
    let req = http::Request::get(format!("http://{addr}/sse"))
        .header("accept", "text/event-stream")
        .body(http_body_util::Full::new(Bytes::new()))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let mut stream = resp.into_body();
    use http_body_util::BodyExt;
    let first = stream.frame().await.unwrap().unwrap().into_data().unwrap();
    assert!(first.starts_with(b"event: endpoint"));
    let r = post_json(
        addr,
        "/messages?sessionId=legacy1",
        r#"{"jsonrpc":"2.0","method":"tools/list","id":1}"#,
    )
    .await;
    assert_eq!(r.status, 202);
    let r = post_json(
        addr,
        "/messages?sessionId=legacy1",
        r#"{"jsonrpc":"2.0","method":"never","id":2}"#,
    )
    .await;
    assert_eq!(r.status, 202);
    let reply = tokio::time::timeout(Duration::from_secs(5), stream.frame())
        .await
        .unwrap()
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    assert!(String::from_utf8_lossy(&reply).contains(r#""id":1"#));
    tokio::time::sleep(Duration::from_millis(1500)).await; // the call timeout passes for id 2
    let ev = p.drain().await;
    let c = calls(&ev);
    let one_ = c.iter().find(|c| c.id.to_string() == "1").unwrap();
    assert_eq!(one_.outcome, Outcome::Result);
    assert_eq!(one_.scope.to_string(), "session:legacy1");
    let two = c.iter().find(|c| c.id.to_string() == "2").unwrap();
    assert!(
        matches!(&two.outcome, Outcome::Missing { reason } if reason.contains("no reply within")),
        "{:?}",
        two.outcome
    );
    assert_eq!(anomalies(&ev), one("MISSING_RESPONSE", Some("2")));
    let legacy = ev.iter().any(|e| matches!(&**e, Event::Message(m) if m.transport == rpctap::events::Transport::LegacySse));
    assert!(legacy);
}

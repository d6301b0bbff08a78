//! The MCP-level checks against a misbehaving MCP server (hand-written here, over Streamable
//! HTTP): a scripted session in which each of the MCP codes is provoked exactly once, live and in
//! `rpctap check` of the recording, with well-behaved traffic around each case that must stay
//! clean.

use crate::common::*;

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
            if parts.uri.path() == "/.well-known/oauth-protected-resource" {
                return json_reply(200, r#"{"resource":"http://127.0.0.1/mcp","authorization_servers":["https://auth.example.test"]}"#);
            }
            if parts.uri.path() == "/auth" {
                let good = parts.uri.query() == Some("good");
                let challenge = if good {
                    r#"Bearer resource_metadata="https://example.test/.well-known/oauth-protected-resource""#
                } else {
                    r#"Bearer realm="mcp""#
                };
                // The good one also offers DPoP (RFC 9449), first and without the metadata: a
                // client reads every challenge, and so does the rule.
                let mut r = http::Response::builder().status(401);
                if good {
                    r = r.header("www-authenticate", r#"DPoP algs="ES256""#);
                }
                return r
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
        shared: rpctap::cli::SharedFlags {
            record: Some(file.clone()),
            ..Default::default()
        },
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
    let mut events = Vec::new();
    for (name, h, body, want) in &steps {
        let path = match *name {
            "auth" => "/auth",
            "auth ok" => "/auth?good",
            _ => "/mcp",
        };
        let r = send(p.addr, "POST", path, h, body.clone()).await;
        assert!(r.status.as_u16() < 500, "{name}: {}", r.status);
        let evs = p.drain_exchange().await;
        for e in &evs {
            if let rpctap::events::Event::Anomaly(a) = &**e {
                eprintln!("{name}: {} {}", a.code, a.message);
            }
        }
        let mut got: Vec<String> = anomalies(&evs).into_iter().map(|a| a.0).collect();
        got.sort();
        assert_eq!(got, *want, "{name}: live");
        all.extend(got);
        events.extend(evs);
    }
    // The authorization exchanges around the endpoint are shown although they carry no
    // JSON-RPC: both challenges and the discovery document.
    let r = send(
        p.addr,
        "GET",
        "/.well-known/oauth-protected-resource",
        &[],
        "",
    )
    .await;
    assert_eq!(r.status, 200);
    events.extend(p.drain_exchange().await);
    let auth: Vec<(String, u16, Option<String>)> = events
        .iter()
        .filter_map(|e| match &**e {
            rpctap::events::Event::Http(rpctap::events::HttpEvent::Auth {
                path,
                status,
                www_authenticate,
                ..
            }) => Some((path.clone(), *status, www_authenticate.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(
        auth,
        vec![
            ("/auth".to_string(), 401, Some(r#"Bearer realm="mcp""#.to_string())),
            (
                "/auth".to_string(),
                401,
                Some(r#"Bearer resource_metadata="https://example.test/.well-known/oauth-protected-resource""#.to_string())
            ),
            ("/.well-known/oauth-protected-resource".to_string(), 200, None),
        ]
    );
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
    p.served.await.unwrap(); // the recording is whole once the proxy has finished
    let live = live_codes(&file);
    let checked = check_recording(&file);
    assert_eq!(checked.codes, live, "check finds exactly the live codes");
    let mut flat: Vec<String> = live.values().flatten().cloned().collect();
    flat.sort();
    all.sort();
    assert_eq!(flat, all, "the recording holds every live code");
    let rec = rpctap::record::reader::read(&file).unwrap();
    let recorded_auth = rec
        .http()
        .filter(|h| matches!(h, rpctap::events::HttpEvent::Auth { .. }))
        .count();
    assert_eq!(
        recorded_auth, 3,
        "the recording holds the authorization exchanges"
    );
    // `rpctap view` shows them as http rows.
    let mut app = rpctap::view::App::new("t", "l", "u", 1000, 0);
    app.load_recording(&rec);
    let http: Vec<String> = app
        .visible()
        .iter()
        .filter(|r| r.transport == "http")
        .map(|r| format!("{} {}", r.method, r.outcome.label()))
        .collect();
    assert_eq!(
        http,
        vec![
            "POST /auth HTTP 401",
            "POST /auth HTTP 401",
            "GET /.well-known/oauth-protected-resource HTTP 200"
        ]
    );
    assert_eq!(checked.exit, Some(1), "MCP errors fail check");
}

/// The inspector alone (no sockets): the finer points of each rule.
mod rules {
    use bytes::Bytes;
    use rpctap::events::{BusBuilder, Direction, Event, Subscription};
    use rpctap::inspect::{EndReason, InspectConfig, Inspector, RequestMeta, ResponseMeta};

    struct T {
        insp: Inspector,
        sub: Subscription,
    }

    impl T {
        fn new(cfg: InspectConfig) -> T {
            let mut bus = BusBuilder::default();
            let sub = bus.subscribe("t", 1 << 16);
            T {
                insp: Inspector::new(cfg, bus.build()),
                sub,
            }
        }

        /// One POST: request headers (session, version, Mcp-Method, Mcp-Name), body, an SSE
        /// reply of `events` (JSON-RPC messages), the reply's session header.
        #[allow(clippy::too_many_arguments)]
        fn post(
            &self,
            session: Option<&str>,
            version: Option<&str>,
            mcp_method: Option<&str>,
            mcp_name: Option<&str>,
            body: &str,
            events: &[&str],
            reply_session: Option<&str>,
        ) {
            let mut ex = self.insp.begin(&RequestMeta {
                method: "POST",
                path: "/mcp",
                content_type: Some("application/json"),
                session,
                protocol_version: version,
                mcp_method,
                mcp_name,
                ..Default::default()
            });
            ex.request_body(&Bytes::from(body.to_string()), true);
            let (status, ct) = if events.is_empty() {
                (202, None)
            } else {
                (200, Some("text/event-stream"))
            };
            ex.response_head(&ResponseMeta {
                status,
                content_type: ct,
                session: reply_session,
                ..Default::default()
            });
            for e in events {
                ex.response_data(format!("event: message\ndata: {e}\n\n").as_bytes());
            }
            ex.end(EndReason::Complete);
        }

        fn codes(&mut self) -> Vec<(String, String)> {
            let mut out = Vec::new();
            while let Ok(e) = self.sub.rx.try_recv() {
                if let Event::Anomaly(a) = &*e {
                    out.push((a.code.to_string(), a.message.clone()));
                }
            }
            out
        }

        /// initialize (client and server capabilities as given) + initialized, in session `sid`.
        fn open(&mut self, sid: &str, version: &str, client: &str, server: &str) {
            let init = format!(
                r#"{{"jsonrpc":"2.0","id":0,"method":"initialize","params":{{"protocolVersion":"{version}","capabilities":{client},"clientInfo":{{"name":"t","version":"1"}}}}}}"#
            );
            let reply = format!(
                r#"{{"jsonrpc":"2.0","id":0,"result":{{"protocolVersion":"{version}","capabilities":{server},"serverInfo":{{"name":"s","version":"1"}}}}}}"#
            );
            self.post(None, None, None, None, &init, &[&reply], Some(sid));
            self.post(
                Some(sid),
                Some(version),
                None,
                None,
                r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
                &[],
                None,
            );
            assert_eq!(self.codes(), vec![], "a clean handshake");
        }
    }

    fn only(codes: &[(String, String)], code: &str) -> Vec<String> {
        codes
            .iter()
            .filter(|c| c.0 == code)
            .map(|c| c.1.clone())
            .collect()
    }

    #[test]
    fn server_requests_need_the_clients_capabilities_and_notifications_are_flagged_once() {
        let mut t = T::new(InspectConfig::default());
        t.open("S", "2025-06-18", r#"{"roots":{}}"#, r#"{"tools":{}}"#);
        let v = Some("2025-06-18");
        // The server asks for sampling (not offered) and roots (offered) on a call's stream,
        // and says its tools changed (no listChanged declared) — twice.
        let changed = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;
        t.post(
            Some("S"),
            v,
            None,
            None,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            &[
                r#"{"jsonrpc":"2.0","id":"a","method":"sampling/createMessage","params":{"messages":[],"maxTokens":1}}"#,
                r#"{"jsonrpc":"2.0","id":"b","method":"roots/list"}"#,
                changed,
                changed,
                r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[]}}"#,
            ],
            None,
        );
        let c = t.codes();
        let caps = only(&c, "MCP_CAPABILITY");
        assert_eq!(caps.len(), 2, "{c:?}");
        // Each says whose fault it is.
        assert!(
            caps[0].contains("sampling/createMessage")
                && caps[0].contains("client capability `sampling`")
                && caps[0].ends_with("the server used a capability the client did not offer"),
            "{caps:?}"
        );
        assert!(
            caps[1].contains("tools.listChanged")
                && caps[1].contains("once per session")
                && caps[1].ends_with("the server sent it without declaring the capability itself"),
            "{caps:?}"
        );
        // A client that subscribes where the server has resources but no `subscribe`.
        let mut t = T::new(InspectConfig::default());
        t.open(
            "R",
            "2025-06-18",
            "{}",
            r#"{"resources":{"subscribe":false}}"#,
        );
        t.post(
            Some("R"),
            v,
            None,
            None,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/subscribe","params":{"uri":"file:///a"}}"#,
            &[r#"{"jsonrpc":"2.0","id":1,"result":{}}"#],
            None,
        );
        let c = t.codes();
        assert_eq!(only(&c, "MCP_CAPABILITY").len(), 1, "{c:?}");
        let found = &only(&c, "MCP_CAPABILITY")[0];
        assert!(
            found.contains("resources.subscribe")
                && found.ends_with("the client used a capability the server did not offer"),
            "{found}"
        );
        // Plain JSON-RPC, or a session whose handshake rpctap did not see: nothing to judge by.
        t.post(
            Some("unseen"),
            None,
            None,
            None,
            r#"{"jsonrpc":"2.0","id":1,"method":"resources/list"}"#,
            &[r#"{"jsonrpc":"2.0","id":1,"result":{"resources":[]}}"#],
            None,
        );
        assert_eq!(t.codes(), vec![]);
    }

    #[test]
    fn a_challenge_configured_secret_is_redacted_in_the_auth_finding_too() {
        let cfg = InspectConfig {
            redact: std::sync::Arc::new(rpctap::redact::Redactor::new(
                &["WWW-Authenticate".into()],
                &[],
            )),
            ..Default::default()
        };
        let mut t = T::new(cfg);
        let mut ex = t.insp.begin(&RequestMeta {
            method: "POST",
            path: "/mcp",
            content_type: Some("application/json"),
            ..Default::default()
        });
        ex.request_body(
            &Bytes::from_static(br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{}}"#),
            true,
        );
        ex.response_head(&ResponseMeta {
            status: 401,
            www_authenticate: Some("Bearer realm=\"s3cret-tenant\""),
            ..Default::default()
        });
        ex.end(EndReason::Complete);
        let auth = only(&t.codes(), "MCP_AUTH");
        assert_eq!(auth.len(), 1);
        assert!(
            auth[0].contains("[REDACTED]") && !auth[0].contains("s3cret"),
            "{auth:?}"
        );
    }

    #[test]
    fn an_unknown_tool_needs_every_page_and_list_changed_makes_the_list_stale() {
        let mut t = T::new(InspectConfig::default());
        t.open("P", "2025-06-18", "{}", r#"{"tools":{"listChanged":true}}"#);
        let v = Some("2025-06-18");
        let call = |id: u32, name: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"{name}","arguments":{{}}}}}}"#
            )
        };
        let ok = |id: u32| format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[]}}}}"#);
        t.post(Some("P"), v, None, None, r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
            &[r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"c2"}}"#], None);
        // Only the first page seen: `b` may be on the next one.
        t.post(Some("P"), v, None, None, &call(2, "b"), &[&ok(2)], None);
        assert_eq!(t.codes(), vec![]);
        t.post(Some("P"), v, None, None, r#"{"jsonrpc":"2.0","id":3,"method":"tools/list","params":{"cursor":"c2"}}"#,
            &[r#"{"jsonrpc":"2.0","id":3,"result":{"tools":[{"name":"b","inputSchema":{"type":"object"}}]}}"#], None);
        t.post(Some("P"), v, None, None, &call(4, "b"), &[&ok(4)], None);
        t.post(Some("P"), v, None, None, &call(5, "a"), &[&ok(5)], None);
        assert_eq!(t.codes(), vec![], "both pages make the list");
        t.post(Some("P"), v, None, None, &call(6, "zz"), &[&ok(6)], None);
        assert_eq!(only(&t.codes(), "MCP_UNKNOWN_TOOL").len(), 1);
        // The server says its list changed: a new tool may be called before the next list.
        t.post(
            Some("P"),
            v,
            None,
            None,
            &call(7, "a"),
            &[
                r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#,
                &ok(7),
            ],
            None,
        );
        t.post(Some("P"), v, None, None, &call(8, "new"), &[&ok(8)], None);
        assert_eq!(t.codes(), vec![]);
    }

    #[test]
    fn routing_headers_of_2026_07_28_and_base64_names() {
        let mut t = T::new(InspectConfig::default());
        let v = Some("2026-07-28");
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tööl","arguments":{},"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
        let ok = [r#"{"jsonrpc":"2.0","id":1,"result":{"resultType":"complete","content":[]}}"#];
        // Both headers right (the name base64-encoded, as non-ASCII names must be).
        t.post(
            None,
            v,
            Some("tools/call"),
            Some("=?base64?dMO2w7Zs?="),
            call,
            &ok,
            None,
        );
        assert_eq!(t.codes(), vec![]);
        // Missing on a request of that version.
        t.post(None, v, None, None, call, &ok, None);
        let c = t.codes();
        let m = only(&c, "MCP_HEADER_MISMATCH");
        assert_eq!(m.len(), 1, "{c:?}");
        assert!(
            m[0].contains("no Mcp-Method") && m[0].contains("no Mcp-Name"),
            "{m:?}"
        );
        // A wrong name.
        t.post(None, v, Some("tools/call"), Some("other"), call, &ok, None);
        assert_eq!(only(&t.codes(), "MCP_HEADER_MISMATCH").len(), 1);
        // Not required before 2026-07-28, and never on a notification.
        let old = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"tööl","arguments":{}}}"#;
        t.post(None, Some("2025-11-25"), None, None, old, &ok, None);
        t.post(
            None,
            v,
            None,
            None,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
            &[],
            None,
        );
        assert_eq!(t.codes(), vec![]);
    }

    #[test]
    fn progress_and_cancel_in_their_scopes() {
        let mut t = T::new(InspectConfig::default());
        // Stateless (no session): progress on the call's own stream, increasing, is clean; a
        // token nobody asked for is not.
        let call = r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"x","arguments":{},"_meta":{"progressToken":7}}}"#;
        let p = |tok: &str, n: u32| {
            format!(
                r#"{{"jsonrpc":"2.0","method":"notifications/progress","params":{{"progressToken":{tok},"progress":{n}}}}}"#
            )
        };
        let done = r#"{"jsonrpc":"2.0","id":1,"result":{"content":[]}}"#;
        t.post(
            None,
            None,
            None,
            None,
            call,
            &[&p("7", 1), &p("7", 2), done],
            None,
        );
        assert_eq!(t.codes(), vec![]);
        t.post(None, None, None, None, call, &[&p("\"7\"", 1), done], None);
        let c = t.codes();
        assert_eq!(
            only(&c, "MCP_PROGRESS").len(),
            1,
            "a string token is not the number token: {c:?}"
        );
        // After the reply, the token is free: progress for it is flagged.
        t.post(None, None, None, None, call, &[done, &p("7", 3)], None);
        assert_eq!(only(&t.codes(), "MCP_PROGRESS").len(), 1);
        // A cancel outside a session cannot be judged (each POST is its own scope).
        t.post(
            None,
            None,
            None,
            None,
            r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":5}}"#,
            &[],
            None,
        );
        assert_eq!(t.codes(), vec![]);
    }

    #[test]
    fn stdio_sessions_get_the_same_rules_and_schemas_are_bounded() {
        let cfg = InspectConfig {
            max_schemas: 1,
            ..Default::default()
        };
        let mut t = T::new(cfg);
        let mut ex = t.insp.begin_stream("stdio-1");
        let line = |ex: &mut rpctap::inspect::ExchangeCtx, d: Direction, s: &str| {
            ex.line(d, Bytes::from(s.to_string()))
        };
        use Direction::*;
        line(
            &mut ex,
            ClientToServer,
            r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        );
        line(
            &mut ex,
            ServerToClient,
            r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"s","version":"1"}}}"#,
        );
        line(
            &mut ex,
            ClientToServer,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        );
        line(
            &mut ex,
            ClientToServer,
            r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        );
        line(
            &mut ex,
            ServerToClient,
            r#"{"jsonrpc":"2.0","id":1,"result":{"tools":[{"name":"a","inputSchema":{"type":"object","required":["q"]}},{"name":"b","inputSchema":{"type":"object"},"outputSchema":{"type":"object","required":["n"]}}]}}"#,
        );
        assert_eq!(t.codes(), vec![]);
        // With room for one compiled schema, each use compiles again — and still judges.
        line(
            &mut ex,
            ClientToServer,
            r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"a","arguments":{}}}"#,
        );
        line(
            &mut ex,
            ServerToClient,
            r#"{"jsonrpc":"2.0","id":2,"result":{"content":[]}}"#,
        );
        line(
            &mut ex,
            ClientToServer,
            r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"b","arguments":{}}}"#,
        );
        line(
            &mut ex,
            ServerToClient,
            r#"{"jsonrpc":"2.0","id":3,"result":{"content":[],"structuredContent":{"m":1}}}"#,
        );
        line(
            &mut ex,
            ClientToServer,
            r#"{"jsonrpc":"2.0","id":4,"method":"prompts/list"}"#,
        );
        line(
            &mut ex,
            ServerToClient,
            r#"{"jsonrpc":"2.0","id":4,"result":{"prompts":[]}}"#,
        );
        ex.end(EndReason::Closed("exit 0".into()));
        let c = t.codes();
        let input = only(&c, "MCP_INPUT_SCHEMA");
        let output = only(&c, "MCP_OUTPUT_SCHEMA");
        assert!(
            input.len() == 1 && input[0].contains("at `/`") && input[0].contains("\"q\""),
            "{c:?}"
        );
        assert!(output.len() == 1 && output[0].contains("\"n\""), "{c:?}");
        assert_eq!(
            only(&c, "MCP_CAPABILITY").len(),
            1,
            "prompts were never offered: {c:?}"
        );
        let s = t.insp.stats();
        assert_eq!(s.schemas_kept, 1, "{s:?}");
        assert!(s.schemas_evicted >= 2, "{s:?}");
    }
}

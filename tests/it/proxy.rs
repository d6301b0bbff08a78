//! The proxy core over real sockets: seed 000 through the proxy byte for byte, SSE streaming,
//! upstream failures, pass-through of non-JSON-RPC traffic, headers, h2c, bad input, shutdown.

use crate::common::*;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Seed 000's Hurl cases: (body, expected status).
const SEED_CASES: [(&str, u16); 6] = [
    (
        r#"{"jsonrpc": "2.0", "method": "subtract", "params": {"minuend": 42, "subtrahend": 23}, "id": 1}"#,
        200,
    ),
    (
        r#"[
  {"jsonrpc": "2.0", "method": "add", "params": [1, 2, 4], "id": "1"},
  {"jsonrpc": "2.0", "method": "echo", "params": {"hello": "world"}},
  {"jsonrpc": "2.0", "method": "echo", "params": ["x"], "id": "2"},
  {"jsonrpc": "2.0", "method": "nope", "id": "3"}
]"#,
        200,
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "echo", "params": ["fire and forget"]}"#,
        204,
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "error", "params": {"code": -32001, "message": "Rate limited", "data": {"retry_after": 1}}, "id": 7}"#,
        200,
    ),
    (
        r#"{"jsonrpc": "2.0", "method": "sleep", "params": {"ms": 200}, "id": "slow"}"#,
        200,
    ),
    ("{\"jsonrpc\": \"2.0\", \"method\":\n", 200),
];

#[tokio::test]
async fn seed_000_cases_pass_through_byte_identical() {
    let (demo, _d) = start_demo().await;
    let mut proxy = start_proxy(&format!("http://{demo}")).await;
    for (body, status) in SEED_CASES {
        let direct = post_json(demo, "/jsonrpc", body).await;
        let t0 = Instant::now();
        let via = post_json(proxy.addr, "/jsonrpc", body).await;
        let took = t0.elapsed();
        assert_eq!(direct.status, status, "{body}");
        assert_eq!(via.status, direct.status, "{body}");
        assert_eq!(via.body, direct.body, "{body}");
        assert_eq!(
            via.headers.get("content-type"),
            direct.headers.get("content-type")
        );
        if body.contains("sleep") {
            assert!(took >= Duration::from_millis(200));
        }
    }
    // The seed's assertions, on what came through the proxy.
    let r = post_json(proxy.addr, "/jsonrpc", SEED_CASES[0].0)
        .await
        .json();
    assert_eq!(
        (r["result"].clone(), r["id"].clone()),
        (19.into(), 1.into())
    );
    let r = post_json(proxy.addr, "/jsonrpc", SEED_CASES[1].0)
        .await
        .json();
    assert_eq!(r.as_array().unwrap().len(), 3);
    assert_eq!(r[0]["result"], 7);
    assert_eq!(r[1]["result"][0], "x");
    assert_eq!(r[2]["error"]["code"], -32601);
    let r = post_json(proxy.addr, "/jsonrpc", SEED_CASES[3].0)
        .await
        .json();
    assert_eq!(r["error"]["code"], -32001);
    assert_eq!(r["error"]["message"], "Rate limited");
    assert_eq!(r["error"]["data"]["retry_after"], 1);
    let r = post_json(proxy.addr, "/jsonrpc", SEED_CASES[5].0)
        .await
        .json();
    assert_eq!(r["error"]["code"], -32700);
    assert!(r["id"].is_null());
    // Only the deliberately broken request was flagged.
    let ev = proxy.drain().await;
    let codes: Vec<String> = anomalies(&ev).into_iter().map(|a| a.0).collect();
    assert_eq!(codes, vec!["PARSE_ERROR", "PARSE_ERROR"], "{codes:?}");
}

#[tokio::test]
async fn sse_events_arrive_one_by_one() {
    // The upstream sends event 1, then waits until the test has seen event 1 through the
    // proxy before it sends event 2.
    let (seen_tx, seen_rx) = tokio::sync::oneshot::channel::<()>();
    let seen_rx = std::sync::Mutex::new(Some(seen_rx));
    let (up, _u) = start_upstream(move |_parts, _body| {
        let rx = seen_rx.lock().unwrap().take();
        Box::pin(async move {
            let (tx, chan) = tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, std::convert::Infallible>>(4);
            tokio::spawn(async move {
                let _ = tx.send(Ok(http_body::Frame::data(Bytes::from_static(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progress\":1}}\n\n")))).await;
                if let Some(rx) = rx {
                    let _ = tokio::time::timeout(Duration::from_secs(10), rx).await;
                }
                let _ = tx.send(Ok(http_body::Frame::data(Bytes::from_static(b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}\n\n")))).await;
            });
            let body = http_body_util::StreamBody::new(tokio_stream_from(chan));
            Response::builder()
                .header("content-type", "text/event-stream")
                .body(http_body_util::combinators::UnsyncBoxBody::new(body))
                .unwrap()
        })
    })
    .await;
    let mut proxy = start_proxy(&format!("http://{up}")).await;
    let req = Request::post(format!("http://{}/mcp", proxy.addr))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(Full::new(Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"slow\"}}")))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    let mut body = resp.into_body();
    let t0 = Instant::now();
    let first = tokio::time::timeout(Duration::from_secs(5), body.frame())
        .await
        .expect("first event must arrive while the upstream still holds the second")
        .unwrap()
        .unwrap()
        .into_data()
        .unwrap();
    let first_latency = t0.elapsed();
    assert!(first.starts_with(
        b"event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\""
    ));
    seen_tx.send(()).unwrap();
    let rest = body.collect().await.unwrap().to_bytes();
    assert!(rest.ends_with(b"\"result\":{}}\n\n"));
    eprintln!("first SSE event through the proxy after {first_latency:?}");
    let ev = proxy.drain().await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    let c = calls(&ev);
    assert_eq!(c.len(), 1);
    assert_eq!(c[0].outcome, rpctap::events::Outcome::Result);
}

/// A channel receiver as a Stream (tokio-stream is not a dependency for one adapter).
fn tokio_stream_from<T: Send + 'static>(
    mut rx: tokio::sync::mpsc::Receiver<T>,
) -> impl futures_util::Stream<Item = T> + Send {
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

#[tokio::test]
async fn upstream_down_gives_502_with_the_call_id() {
    // A port with nothing listening.
    let dead: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut proxy = start_proxy(&format!("http://{dead}")).await;
    let r = post_json(
        proxy.addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"add","params":[1,2],"id":"abc"}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY);
    let v = r.json();
    assert_eq!(v["id"], "abc");
    assert_eq!(v["jsonrpc"], "2.0");
    let code = v["error"]["code"].as_i64().unwrap();
    assert!((-32099..=-32000).contains(&code), "{code}");
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("upstream unreachable"));
    // A batch gets one error per call, ids in order; notifications get none.
    let r = post_json(
        proxy.addr,
        "/jsonrpc",
        r#"[{"jsonrpc":"2.0","method":"a","id":1},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","method":"b","id":"2"}]"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY);
    let v = r.json();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert_eq!(
        (v[0]["id"].clone(), v[1]["id"].clone()),
        (1.into(), "2".into())
    );
    // Plain HTTP gets a plain 502.
    let r = send(proxy.addr, "GET", "/", &[], "").await;
    assert_eq!(r.status, StatusCode::BAD_GATEWAY);
    // The proxy's own error replies are not the server's: no anomaly, and each call ends as
    // missing, saying the upstream was unreachable.
    let ev = proxy.drain().await;
    let c = calls(&ev);
    assert_eq!(c.len(), 3);
    assert!(c.iter().all(|c| matches!(&c.outcome,
        rpctap::events::Outcome::Missing { reason } if reason.contains("upstream unreachable"))));
    let codes: Vec<String> = anomalies(&ev).into_iter().map(|a| a.0).collect();
    assert!(
        codes.is_empty(),
        "rpctap's own 502s are not the server's protocol errors: {codes:?}"
    );
}

#[tokio::test]
async fn upstream_timeout_gives_504() {
    let (up, _u) = start_upstream(|_p, _b| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Response::new(boxed("late"))
        })
    })
    .await;
    let flags = rpctap::cli::ProxyFlags {
        upstream_timeout: Some(0.3),
        ..Default::default()
    };
    let proxy = start_proxy_flags(&format!("http://{up}"), flags).await;
    let r = post_json(
        proxy.addr,
        "/rpc",
        r#"{"jsonrpc":"2.0","method":"x","id":5}"#,
    )
    .await;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT);
    assert_eq!(r.json()["id"], 5);
    assert_eq!(
        r.json()["error"]["code"],
        rpctap::rpc::own::What::Timeout.code(false)
    );
}

#[tokio::test]
async fn the_upstream_timeout_holds_for_each_call_of_a_kept_alive_connection() {
    // The upstream waits as long as the call's `params.ms` says.
    let (up, _u) = start_upstream(|_p, b| {
        Box::pin(async move {
            let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
            let ms = v["params"]["ms"].as_u64().unwrap();
            tokio::time::sleep(Duration::from_millis(ms)).await;
            let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":{ms}}}"#, v["id"]);
            Response::builder()
                .header("content-type", "application/json")
                .body(boxed(reply))
                .unwrap()
        })
    })
    .await;
    let flags = rpctap::cli::ProxyFlags {
        upstream_timeout: Some(0.4),
        ..Default::default()
    };
    let proxy = start_proxy_flags(&format!("http://{up}"), flags).await;
    let (mut tx, _conn) = one_connection(proxy.addr).await;
    // (wait in ms, answered in time): each call gets the whole limit from its own start, also
    // when an earlier call's deadline passes while it waits, and after a call that timed out.
    let plan = [
        (250, true),
        (250, true),
        (1000, false),
        (50, true),
        (300, true),
        (1000, false),
    ];
    for (i, (ms, in_time)) in plan.into_iter().enumerate() {
        let req = json_post(
            "/rpc",
            format!(r#"{{"jsonrpc":"2.0","method":"wait","id":{i},"params":{{"ms":{ms}}}}}"#),
        );
        let t0 = std::time::Instant::now();
        let r = tx.send_request(req).await.unwrap();
        let status = r.status();
        let body = r.into_body().collect().await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        let took = t0.elapsed();
        if in_time {
            assert_eq!(
                (status, &v["result"]),
                (StatusCode::OK, &serde_json::json!(ms)),
                "call {i}"
            );
        } else {
            assert_eq!(status, StatusCode::GATEWAY_TIMEOUT, "call {i}");
            assert_eq!(
                v["error"]["code"],
                rpctap::rpc::own::What::Timeout.code(false)
            );
            assert!(
                took >= Duration::from_millis(390),
                "call {i} timed out early: {took:?}"
            );
            assert!(
                took < Duration::from_millis(950),
                "call {i} timed out late: {took:?}"
            );
        }
    }
}

#[tokio::test]
async fn non_json_rpc_passes_untouched_and_headers_are_rewritten() {
    // The upstream answers with what it received, so the test can see what the proxy sent.
    let (up, _u) = start_upstream(|parts, body| {
        Box::pin(async move {
            let headers: serde_json::Map<String, serde_json::Value> = parts
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").into()))
                .collect();
            let echo = serde_json::json!({ "method": parts.method.as_str(), "uri": parts.uri.to_string(), "headers": headers, "body_len": body.len() });
            if parts.uri.path() == "/.well-known/oauth-authorization-server" {
                return Response::builder()
                    .header("content-type", "application/json")
                    .header("x-custom", "kept")
                    .header("set-cookie", "a=b")
                    .body(boxed("{\"issuer\":\"http://auth\",  \"odd spacing\": [1,2 ]}"))
                    .unwrap();
            }
            Response::builder()
                .header("content-type", "text/plain")
                .header("keep-alive", "timeout=5")
                .body(boxed(echo.to_string()))
                .unwrap()
        })
    })
    .await;
    let mut proxy = start_proxy(&format!("http://{up}")).await;
    let direct = send(
        up,
        "GET",
        "/.well-known/oauth-authorization-server",
        &[],
        "",
    )
    .await;
    let via = send(
        proxy.addr,
        "GET",
        "/.well-known/oauth-authorization-server",
        &[],
        "",
    )
    .await;
    assert_eq!(via.status, 200);
    assert_eq!(via.body, direct.body);
    assert_eq!(via.headers["x-custom"], "kept");
    assert_eq!(via.headers["set-cookie"], "a=b");

    let via = send(
        proxy.addr,
        "PUT",
        "/files/a.txt?x=1&y=%20",
        &[
            ("connection", "x-hop"),
            ("x-hop", "secret"),
            ("te", "trailers"),
            ("x-forwarded-for", "10.1.2.3"),
            ("authorization", "Bearer t"),
        ],
        "some bytes",
    )
    .await;
    assert!(
        via.headers.get("keep-alive").is_none(),
        "hop-by-hop reply headers are removed"
    );
    let v: serde_json::Value = serde_json::from_slice(&via.body).unwrap();
    assert_eq!(v["method"], "PUT");
    assert_eq!(v["uri"], "/files/a.txt?x=1&y=%20");
    assert_eq!(v["body_len"], 10);
    let h = &v["headers"];
    assert_eq!(h["host"], up.to_string(), "Host is the upstream's");
    assert_eq!(h["x-forwarded-for"], "10.1.2.3, 127.0.0.1");
    assert_eq!(h["x-forwarded-proto"], "http");
    assert_eq!(h["authorization"], "Bearer t", "end-to-end headers pass");
    assert!(h.get("x-hop").is_none() && h.get("te").is_none());
    // Non-JSON-RPC traffic raises nothing.
    let ev = proxy.drain().await;
    assert!(anomalies(&ev).is_empty());
    assert!(calls(&ev).is_empty());

    // A whole JSON-RPC POST goes on the lean path, which writes the forwarding headers into the
    // request as it encodes it: the upstream sees the same.
    for (client_sent, want) in [
        (Some("10.1.2.3"), "10.1.2.3, 127.0.0.1"),
        (None, "127.0.0.1"),
    ] {
        let mut headers = vec![("content-type", "application/json")];
        headers.extend(client_sent.map(|v| ("x-forwarded-for", v)));
        headers.push(("x-forwarded-proto", "https"));
        let via = send(
            proxy.addr,
            "POST",
            "/rpc",
            &headers,
            r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        )
        .await;
        let v: serde_json::Value = serde_json::from_slice(&via.body).unwrap();
        assert_eq!(v["method"], "POST");
        assert_eq!(v["headers"]["x-forwarded-for"], want);
        assert_eq!(v["headers"]["x-forwarded-proto"], "http", "replaced");
    }

    // --preserve-host keeps the client's Host.
    let flags = rpctap::cli::ProxyFlags {
        preserve_host: true,
        ..Default::default()
    };
    let proxy2 = start_proxy_flags(&format!("http://{up}"), flags).await;
    let via = send(proxy2.addr, "GET", "/x", &[("host", "example.test")], "").await;
    let v: serde_json::Value = serde_json::from_slice(&via.body).unwrap();
    assert_eq!(v["headers"]["host"], "example.test");
}

#[tokio::test]
async fn h2c_clients_are_accepted() {
    let (demo, _d) = start_demo().await;
    let proxy = start_proxy(&format!("http://{demo}")).await;
    let c = hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .http2_only(true)
        .build_http::<Full<Bytes>>();
    let req = Request::post(format!("http://{}/jsonrpc", proxy.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"add","params":[2,3],"id":1}"#,
        )))
        .unwrap();
    let resp = c.request(req).await.unwrap();
    assert_eq!(resp.version(), http::Version::HTTP_2);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], br#"{"jsonrpc":"2.0","id":1,"result":5}"#);
}

#[tokio::test]
async fn bad_input_gets_clear_answers_and_no_panic() {
    let (demo, _d) = start_demo().await;
    let mut proxy = start_proxy(&format!("http://{demo}")).await;
    // Invalid JSON: the server's -32700 passes through; rpctap flags PARSE_ERROR.
    let r = post_json(proxy.addr, "/jsonrpc", "{not json").await;
    assert_eq!(r.json()["error"]["code"], -32700);
    // Invalid UTF-8.
    let r = send(
        proxy.addr,
        "POST",
        "/jsonrpc",
        &[("content-type", "application/json")],
        Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"method\":\"\xff\xfe\",\"id\":1}"),
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32700);
    // 10,000-deep nesting: forwarded, answered, no crash.
    let deep = format!(
        r#"{{"jsonrpc":"2.0","method":"echo","id":1,"params":{}{}}}"#,
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let r = post_json(proxy.addr, "/jsonrpc", &deep).await;
    assert_eq!(r.status, 200);
    assert!(r.json()["error"]["code"].as_i64().is_some());
    // A 100 MiB body: streamed past the inspection cap; the demo refuses it with 413.
    let big = Bytes::from(vec![b' '; 100 << 20]);
    let r = send(
        proxy.addr,
        "POST",
        "/jsonrpc",
        &[("content-type", "application/json")],
        big,
    )
    .await;
    assert!(
        r.status == StatusCode::PAYLOAD_TOO_LARGE || r.status == StatusCode::BAD_GATEWAY,
        "{}",
        r.status
    );
    // A client that disconnects mid-stream: the proxy carries on.
    let sid = mcp_session(proxy.addr).await;
    let mut s = TcpStream::connect(proxy.addr).await.unwrap();
    let body = r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"slow","arguments":{"steps":5,"delay_ms":100},"_meta":{"progressToken":1}}}"#;
    let req = format!(
        "POST /mcp HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\naccept: application/json, text/event-stream\r\nmcp-session-id: {sid}\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    drop(s);
    tokio::time::sleep(Duration::from_millis(700)).await;
    // Still serving.
    let r = post_json(
        proxy.addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"add","params":[1,1],"id":1}"#,
    )
    .await;
    assert_eq!(r.json()["result"], 2);
    let ev = proxy.drain().await;
    let cut = calls(&ev)
        .into_iter()
        .find(|c| c.id.to_string() == "9")
        .expect("the cut call has an outcome");
    assert!(
        // The client's doing: `abandoned`, no failure of the server's.
        matches!(&cut.outcome, rpctap::events::Outcome::Abandoned { reason } if reason.contains("client disconnected")),
        "{:?}",
        cut.outcome
    );
}

#[tokio::test]
async fn upstream_reset_mid_reply_ends_the_call_as_missing() {
    // A raw upstream that sends half a chunked reply, then closes the socket.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 8192];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n10\r\ndata: {\"jsonrpc\"\r\n")
                    .await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                drop(s);
            });
        }
    });
    let mut proxy = start_proxy(&format!("http://{up}")).await;
    let req = Request::post(format!("http://{}/mcp", proxy.addr))
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from_static(
            br#"{"jsonrpc":"2.0","method":"x","id":3}"#,
        )))
        .unwrap();
    let resp = client().request(req).await.unwrap();
    assert_eq!(resp.status(), 200);
    assert!(
        resp.into_body().collect().await.is_err(),
        "the client sees the reply cut short"
    );
    let ev = proxy.drain().await;
    let c = calls(&ev);
    assert_eq!(c.len(), 1);
    assert!(
        matches!(&c[0].outcome, rpctap::events::Outcome::Missing { reason } if reason.contains("upstream")),
        "{:?}",
        c[0].outcome
    );
    assert_eq!(
        anomalies(&ev),
        vec![("MISSING_RESPONSE".to_string(), Some("3".to_string()))]
    );
}

#[tokio::test]
async fn graceful_shutdown_lets_in_flight_calls_finish() {
    let (demo, _d) = start_demo().await;
    let proxy = start_proxy(&format!("http://{demo}")).await;
    let addr = proxy.addr;
    let inflight = tokio::spawn(async move {
        post_json(
            addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"sleep","params":[400],"id":1}"#,
        )
        .await
    });
    wait_pending(&proxy.inspector, 1).await; // in flight before the shutdown starts
    drop(proxy.stop);
    let r = inflight.await.unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"]["slept_ms"], 400);
    assert!(
        eventually(Duration::from_secs(2), || std::net::TcpStream::connect(
            addr
        )
        .is_err()),
        "no longer accepting"
    );
}

#[test]
fn cli_usage_errors_name_the_flag_and_exit_2() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpctap"))
        .args(["proxy", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--upstream"));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpctap"))
        .args(["proxy", "--upstream", "ftp://x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn binary_runs_and_exits_0_on_sigterm() {
    let port = free_port();
    let child = Proc::spawn(
        rpctap()
            .args(["demo", "--no-tui", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped()),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let ok = rt.block_on(async {
        wait_listening(addr).await;
        let r = post_json(
            addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"add","params":[40,2],"id":1}"#,
        )
        .await;
        r.json()["result"] == 42
    });
    assert!(ok);
    let o = child.term_output();
    assert_eq!(o.status.code(), Some(0));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("add id=1 result"),
        "the headless log shows the call: {out}"
    );
}

/// One HTTP/1 client connection to `addr`: its sender, and the task that drives it.
async fn one_connection(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http1::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (tx, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .unwrap();
    (tx, tokio::spawn(conn))
}

/// A JSON POST to `path` (Host `localhost`).
fn json_post(path: &str, body: String) -> Request<Full<Bytes>> {
    Request::post(path)
        .header("host", "localhost")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

/// A raw keep-alive upstream that counts its connections, and the connections the proxy
/// closed. It answers each request with the JSON-RPC id it was given; the second reply on a
/// connection says `Connection: close` and the connection ends; a connection idle for `idle` is
/// closed without a word.
async fn counting_upstream(
    idle: Duration,
) -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let closed = std::sync::Arc::new(AtomicUsize::new(0));
    let (n, c) = (conns.clone(), closed.clone());
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            n.fetch_add(1, Ordering::SeqCst);
            let c = c.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                for served in 1.. {
                    // Read one request: head, then Content-Length bytes of body.
                    let body = loop {
                        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                            let len: usize = head
                                .lines()
                                .find_map(|l| l.strip_prefix("content-length:"))
                                .map(|v| v.trim().parse().unwrap())
                                .unwrap_or(0);
                            if buf.len() >= end + 4 + len {
                                let body = buf[end + 4..end + 4 + len].to_vec();
                                buf.drain(..end + 4 + len);
                                break body;
                            }
                        }
                        let mut chunk = [0u8; 4096];
                        match tokio::time::timeout(idle, s.read(&mut chunk)).await {
                            Ok(Ok(0)) => {
                                c.fetch_add(1, Ordering::SeqCst); // the proxy closed it
                                return;
                            }
                            Ok(Err(_)) | Err(_) => return, // gone, or idle: close
                            Ok(Ok(k)) => buf.extend_from_slice(&chunk[..k]),
                        }
                    };
                    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                    let reply = format!(r#"{{"jsonrpc":"2.0","id":{},"result":"ok"}}"#, v["id"]);
                    let close = served == 2;
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n{}\r\n",
                        reply.len(),
                        if close { "connection: close\r\n" } else { "" }
                    );
                    if s.write_all(format!("{head}{reply}").as_bytes())
                        .await
                        .is_err()
                        || close
                    {
                        return;
                    }
                }
            });
        }
    });
    (up, conns, closed)
}

#[tokio::test]
async fn an_http1_client_keeps_one_upstream_connection_and_reopens_it_when_closed() {
    use std::sync::atomic::Ordering;
    let (up, conns, _) = counting_upstream(Duration::from_millis(100)).await;
    let mut proxy = start_proxy(&format!("http://{up}")).await;
    // One client connection, requests one after another.
    let (mut tx, _conn) = one_connection(proxy.addr).await;
    let mut call = |id: u32| {
        let req = json_post(
            "/jsonrpc",
            format!(r#"{{"jsonrpc":"2.0","method":"m","id":{id}}}"#),
        );
        let f = tx.send_request(req);
        async move {
            let r = f.await.unwrap();
            assert_eq!(r.status(), 200);
            let b = r.into_body().collect().await.unwrap().to_bytes();
            assert_eq!(b, format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"ok"}}"#));
        }
    };
    // Two calls share one upstream connection; the second reply closes it ("connection:
    // close"), so the third opens another.
    for id in 1..=3 {
        call(id).await;
    }
    assert_eq!(
        conns.load(Ordering::SeqCst),
        2,
        "1 and 2 shared a connection"
    );
    // The upstream drops the idle connection silently; the next call opens a new one.
    tokio::time::sleep(Duration::from_millis(400)).await;
    call(4).await;
    call(5).await;
    assert_eq!(
        conns.load(Ordering::SeqCst),
        3,
        "4 and 5 shared a new connection"
    );
    let ev = proxy.drain().await;
    assert_eq!(calls(&ev).len(), 5);
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
}

#[tokio::test]
async fn the_upstream_connection_closes_with_its_client_connection() {
    use std::sync::atomic::Ordering;
    // The upstream keeps idle connections for a minute: only the proxy can close them here.
    let (up, conns, closed) = counting_upstream(Duration::from_secs(60)).await;
    let mut proxy = start_proxy(&format!("http://{up}")).await;
    for round in 1..=2 {
        let (mut tx, driver) = one_connection(proxy.addr).await;
        let req = json_post(
            "/jsonrpc",
            format!(r#"{{"jsonrpc":"2.0","method":"m","id":{round}}}"#),
        );
        let r = tx.send_request(req).await.unwrap();
        let b = r.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(
            b,
            format!(r#"{{"jsonrpc":"2.0","id":{round},"result":"ok"}}"#)
        );
        assert_eq!(
            closed.load(Ordering::SeqCst),
            round - 1,
            "still open while the client is"
        );
        // The client goes away: its upstream connection is closed too, not left idle.
        drop(tx);
        let _ = driver.await;
        let t0 = std::time::Instant::now();
        while closed.load(Ordering::SeqCst) < round && t0.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(closed.load(Ordering::SeqCst), round, "round {round}");
    }
    assert_eq!(conns.load(Ordering::SeqCst), 2);
    let ev = proxy.drain().await;
    assert_eq!(calls(&ev).len(), 2);
}

#[test]
fn rpctap_threads_sets_the_runtime_threads() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rpctap"))
        .args(["demo-server", "--listen", "127.0.0.1:0"])
        .env("RPCTAP_THREADS", "0")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("RPCTAP_THREADS"));
    for n in [1usize, 3] {
        let port = free_port();
        let mut child = Proc::spawn(
            rpctap()
                .args(["demo-server", "--listen", &format!("127.0.0.1:{port}")])
                .env("RPCTAP_THREADS", n.to_string())
                .stderr(std::process::Stdio::null()),
        );
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(wait_listening(format!("127.0.0.1:{port}").parse().unwrap()));
        let workers = std::fs::read_dir(format!("/proc/{}/task", child.id()))
            .unwrap()
            .filter_map(|t| std::fs::read_to_string(t.unwrap().path().join("comm")).ok())
            .filter(|c| c.trim() == "tokio-rt-worker")
            .count();
        child.term();
        assert_eq!(workers, n);
    }
}

/// The dashboard's `y` on an MCP `tools/call` row: the copied curl command, run as is against
/// the proxy, gets the result the client got (path, session and protocol version included).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copied_curl_of_an_mcp_tools_call_gets_the_clients_result() {
    let (demo, _d) = start_demo().await;
    let mut proxy = start_proxy(&format!("http://{demo}")).await;
    let sid = mcp_session(proxy.addr).await;
    let call = r#"{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}"#;
    let r = send(
        proxy.addr,
        "POST",
        "/mcp",
        &[
            ("content-type", "application/json"),
            MCP_ACCEPT,
            ("mcp-session-id", &sid),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        call,
    )
    .await;
    let client_saw = sse_data(&r.text()).remove(0)["result"].clone();
    assert_eq!(client_saw["content"][0]["text"], "5");
    let mut app = rpctap::view::App::new("t", &proxy.addr.to_string(), "u", 100, 0);
    for e in proxy.drain().await {
        app.apply(&e);
    }
    let row = app
        .rows
        .iter()
        .find(|r| &*r.method == "tools/call")
        .expect("a tools/call row");
    let curl = app.curl_command(row.exchange, row.request.as_deref().unwrap());
    assert!(curl.contains("mcp-protocol-version: 2025-06-18"), "{curl}");
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("sh")
            .args(["-c", &curl])
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let got = sse_data(&text).remove(0)["result"].clone();
    assert_eq!(got, client_saw, "{text}");
}

/// A hyper upstream (HTTP/1.1, keep-alive) that counts its connections and answers by method:
/// `HEAD` a length and no body, `GET` a chunked body of two pieces, `DELETE` 204, a `POST` the
/// length of what it read and the connection it came on.
async fn method_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let conns = std::sync::Arc::new(AtomicUsize::new(0));
    let n = conns.clone();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let conn = n.fetch_add(1, Ordering::SeqCst) + 1;
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(
                    move |req: Request<hyper::body::Incoming>| async move {
                        let method = req.method().clone();
                        let got = req.into_body().collect().await.unwrap().to_bytes();
                        let r = Response::builder().header("x-conn", conn.to_string());
                        let body: http_body_util::combinators::BoxBody<
                            Bytes,
                            std::convert::Infallible,
                        > = match method.as_str() {
                            "HEAD" => {
                                return Ok::<_, std::convert::Infallible>(
                                    r.header("content-length", "5")
                                        .body(Full::new(Bytes::new()).boxed())
                                        .unwrap(),
                                )
                            }
                            "GET" => {
                                let pieces = futures_util::stream::iter([
                                    Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(
                                        Bytes::from("chun"),
                                    )),
                                    Ok(hyper::body::Frame::data(Bytes::from("ked"))),
                                ]);
                                http_body_util::StreamBody::new(pieces).boxed()
                            }
                            "DELETE" => {
                                return Ok(r
                                    .status(204)
                                    .body(Full::new(Bytes::new()).boxed())
                                    .unwrap())
                            }
                            _ => Full::new(Bytes::from(format!(
                                r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#,
                                got.len()
                            )))
                            .boxed(),
                        };
                        Ok(r.body(body).unwrap())
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(s), svc)
                    .await;
            });
        }
    });
    (addr, conns)
}

#[tokio::test]
async fn one_client_connection_takes_every_kind_of_request_on_both_upstream_legs() {
    use std::sync::atomic::Ordering;
    let (up, conns) = method_upstream().await;
    // A small inspection cap: a larger body streams on uninspected (hyper's leg).
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            max_frame_bytes: Some(1024),
            ..Default::default()
        },
        ..Default::default()
    };
    let p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let (mut tx, _conn) = one_connection(p.addr).await;
    let mut send = |method: &str, body: String| {
        let req = Request::builder()
            .method(method)
            .uri("/mcp")
            .header("host", "localhost")
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let f = tx.send_request(req);
        async move {
            let r = f.await.unwrap();
            let status = r.status();
            let conn = r.headers()["x-conn"].to_str().unwrap().to_string();
            let length = r.headers().get("content-length").cloned();
            let b = r.into_body().collect().await.unwrap().to_bytes();
            (status, conn, length, String::from_utf8(b.to_vec()).unwrap())
        }
    };
    let call = r#"{"jsonrpc":"2.0","method":"m","id":1}"#.to_string();
    let answer = format!(r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#, call.len());
    // Whole requests, one after another: one upstream connection, kept.
    let (s, first, _, b) = send("POST", call.clone()).await;
    assert_eq!((s.as_u16(), b.as_str()), (200, answer.as_str()));
    let (s, c, len, b) = send("HEAD", String::new()).await;
    assert_eq!(
        (s.as_u16(), c.as_str(), b.as_str()),
        (200, first.as_str(), "")
    );
    assert_eq!(len.unwrap(), "5", "a HEAD's length passes, with no body");
    let (s, c, _, b) = send("GET", String::new()).await;
    assert_eq!(
        (s.as_u16(), c.as_str(), b.as_str()),
        (200, first.as_str(), "chunked")
    );
    let (s, c, _, _) = send("DELETE", String::new()).await;
    assert_eq!((s.as_u16(), c.as_str()), (204, first.as_str()));
    assert_eq!(
        conns.load(Ordering::SeqCst),
        1,
        "whole requests share one connection"
    );
    // A body over the cap streams on hyper's leg, which takes the kept connection's socket over.
    let big = format!(
        r#"{{"jsonrpc":"2.0","method":"m","id":1,"params":{{"pad":"{}"}}}}"#,
        "x".repeat(4000)
    );
    let (s, streamed, _, b) = send("POST", big.clone()).await;
    assert_eq!(s, 200);
    assert_eq!(
        b,
        format!(r#"{{"jsonrpc":"2.0","id":1,"result":{}}}"#, big.len())
    );
    assert_eq!(streamed, first, "the same connection, now hyper's");
    // And back: whole requests again (a hyper connection is not taken apart: a new one), kept.
    let (_, c1, _, b) = send("POST", call.clone()).await;
    assert_eq!(b, answer);
    let (_, c2, _, _) = send("POST", call.clone()).await;
    assert_eq!(c1, c2);
    assert_ne!(c1, streamed);
    assert_eq!(conns.load(Ordering::SeqCst), 2);
}

/// A proxy on loopback refuses a request whose `Host` names another server (a web page under a
/// rebound name: rpctap gives the upstream its own `Host`, so the upstream's DNS-rebinding check
/// could no longer see it) before anything reaches the upstream; its own names pass, `Origin`
/// goes to the upstream unchanged (its check stays the upstream's), `--allow-host` admits a
/// name, and `--preserve-host` leaves the `Host` — and its check — to the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_loopback_proxy_refuses_a_rebound_host_and_leaves_origin_to_the_upstream() {
    // (Host, Origin) of each request the upstream got.
    type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let (up, _u) = start_upstream(move |parts, _| {
        let h = |n: &str| {
            parts
                .headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        s.lock()
            .unwrap()
            .push((h("host").unwrap_or_default(), h("origin")));
        Box::pin(async { json_reply(200, r#"{"jsonrpc":"2.0","id":1,"result":true}"#) })
    })
    .await;
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#;
    let json = ("content-type", "application/json");
    let p = start_proxy(&format!("http://{up}")).await;
    let port = p.addr.port();
    let evil = format!("evil.example:{port}");
    let r = send(p.addr, "POST", "/mcp", &[json, ("host", &evil)], body).await;
    assert_eq!(r.status, 403, "{:?}", r.body);
    assert!(String::from_utf8_lossy(&r.body).contains("DNS rebinding"));
    assert!(
        seen.lock().unwrap().is_empty(),
        "nothing reached the upstream"
    );
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let r = send(p.addr, "POST", "/mcp", &[json, ("host", &host)], body).await;
        assert_eq!(r.status, 200, "{host}");
    }
    let r = send(
        p.addr,
        "POST",
        "/mcp",
        &[json, ("origin", "http://evil.example")],
        body,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        seen.lock().unwrap().last().unwrap(),
        &(up.to_string(), Some("http://evil.example".to_string())),
        "the upstream gets its own Host and the page's Origin, to check"
    );
    let allowed = rpctap::cli::ProxyFlags {
        allow_host: vec!["evil.example".into()],
        ..Default::default()
    };
    let p2 = start_proxy_flags(&format!("http://{up}"), allowed).await;
    let evil2 = format!("evil.example:{}", p2.addr.port());
    let r = send(p2.addr, "POST", "/mcp", &[json, ("host", &evil2)], body).await;
    assert_eq!(r.status, 200);
    let preserved = rpctap::cli::ProxyFlags {
        preserve_host: true,
        ..Default::default()
    };
    let p3 = start_proxy_flags(&format!("http://{up}"), preserved).await;
    let evil3 = format!("evil.example:{}", p3.addr.port());
    let r = send(p3.addr, "POST", "/mcp", &[json, ("host", &evil3)], body).await;
    assert_eq!(r.status, 200);
    assert_eq!(
        seen.lock().unwrap().last().unwrap().0,
        evil3,
        "the upstream's to judge"
    );
}

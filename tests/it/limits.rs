//! Rate limits through the proxy, over real sockets: exact counts, batch split and merge, the
//! all-refused batch that never reaches the upstream, dropped notifications, 429 mode, shadow
//! rules, concurrency, and reloads that keep the old rules on a bad file.

use crate::common::*;
use bytes::Bytes;
use http::Response;
use rpctap::events::{Event, Outcome};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// An upstream that answers like the demo's /jsonrpc and remembers every body it received.
async fn counting_upstream() -> (std::net::SocketAddr, Stop, Arc<Mutex<Vec<String>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s2 = seen.clone();
    let (addr, stop) = start_upstream(move |_p, body| {
        s2.lock()
            .unwrap()
            .push(String::from_utf8_lossy(&body).into_owned());
        Box::pin(async move {
            match rpctap::demo::jsonrpc::handle_body(&body, &Default::default()).await {
                Some(t) => Response::builder()
                    .header("content-type", "application/json")
                    .body(boxed(t))
                    .unwrap(),
                None => Response::builder().status(204).body(boxed("")).unwrap(),
            }
        })
    })
    .await;
    (addr, stop, seen)
}

fn config(name: &str, text: &str) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("rpctap-limits-{}-{name}.toml", std::process::id()));
    std::fs::write(&p, text).unwrap();
    p
}

async fn proxy_with(up: std::net::SocketAddr, name: &str, toml: &str) -> TestProxy {
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            config: Some(config(name, toml)),
            ..Default::default()
        },
        ..Default::default()
    };
    start_proxy_flags(&format!("http://{up}"), flags).await
}

#[tokio::test]
async fn quick_flag_rule_exact_counts() {
    let (up, _u, seen) = counting_upstream().await;
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            limits: vec!["add=2/min".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let mut results = Vec::new();
    for i in 0..5 {
        let r = post_json(
            p.addr,
            "/jsonrpc",
            &format!(r#"{{"jsonrpc":"2.0","method":"add","params":[1,{i}],"id":{i}}}"#),
        )
        .await;
        assert_eq!(r.status, 200);
        results.push(r.json());
    }
    assert_eq!(
        results.iter().filter(|r| r.get("result").is_some()).count(),
        2
    );
    let refused = &results[2];
    assert_eq!(refused["id"], 2);
    assert_eq!(refused["error"]["code"], -32001);
    assert_eq!(refused["error"]["message"], "Rate limited");
    assert_eq!(refused["error"]["data"]["limit"], "add=2/min");
    let retry = refused["error"]["data"]["retry_after"].as_f64().unwrap();
    assert!(retry > 0.0 && retry <= 30.0, "{retry}");
    // Other methods are not limited; refused calls never reached the upstream.
    assert_eq!(
        post_json(
            p.addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":9}"#
        )
        .await
        .json()["result"][0],
        1
    );
    assert_eq!(seen.lock().unwrap().len(), 3);
    let ev = p.drain().await;
    let refused_calls: Vec<_> = calls(&ev)
        .into_iter()
        .filter(|c| matches!(&c.outcome, Outcome::Refused { rule } if rule == "add=2/min"))
        .collect();
    assert_eq!(refused_calls.len(), 3, "refusals are outcomes");
    assert!(
        anomalies(&ev).is_empty(),
        "refusals are not anomalies: {:?}",
        anomalies(&ev)
    );
}

#[tokio::test]
async fn batch_split_merge_and_all_refused_never_reach_the_upstream() {
    let (up, _u, seen) = counting_upstream().await;
    let mut p = proxy_with(
        up,
        "batch",
        "[[limit]]\nname = \"echo-1\"\nmethod = \"echo\"\nrate = \"1/min\"\nburst = 1\n",
    )
    .await;
    let batch = r#"[{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1},{"jsonrpc":"2.0","method":"echo","params":["a"],"id":"2"},{"jsonrpc":"2.0","method":"echo","params":["b"],"id":3},{"jsonrpc":"2.0","method":"echo","params":["n"]},{"jsonrpc":"2.0","method":"subtract","params":[5,1],"id":4}]"#;
    let r = post_json(p.addr, "/jsonrpc", batch).await;
    assert_eq!(r.status, 200);
    let v = r.json();
    let ids: Vec<serde_json::Value> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["id"].clone())
        .collect();
    assert_eq!(
        ids,
        vec![
            serde_json::json!(1),
            serde_json::json!("2"),
            serde_json::json!(3),
            serde_json::json!(4)
        ],
        "request order"
    );
    assert_eq!(v[0]["result"], 3);
    assert_eq!(v[1]["result"][0], "a");
    assert_eq!(v[2]["error"]["data"]["limit"], "echo-1");
    assert_eq!(v[3]["result"], 4);
    // The upstream received only the allowed members, as a smaller batch.
    let got: serde_json::Value = serde_json::from_str(&seen.lock().unwrap()[0]).unwrap();
    assert_eq!(got.as_array().unwrap().len(), 3);
    assert_eq!(got[1]["id"], "2");

    // Every member refused: rpctap answers alone.
    let r = post_json(p.addr, "/jsonrpc", r#"[{"jsonrpc":"2.0","method":"echo","params":[1],"id":5},{"jsonrpc":"2.0","method":"echo","params":[2],"id":6}]"#).await;
    let v = r.json();
    assert_eq!(v.as_array().unwrap().len(), 2);
    assert!(v
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["error"]["code"] == -32001));
    // A refused notification: dropped, no reply.
    let r = post_json(
        p.addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"echo","params":["n"]}"#,
    )
    .await;
    assert_eq!(r.status, 204);
    assert!(r.body.is_empty());
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "the all-refused requests never reached the upstream"
    );
    // Batch whose allowed members are notifications only: the refusals alone come back.
    let r = post_json(p.addr, "/jsonrpc", r#"[{"jsonrpc":"2.0","method":"add","params":[1]},{"jsonrpc":"2.0","method":"echo","params":[2],"id":7}]"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()[0]["id"], 7);
    let ev = p.drain().await;
    let notes = ev
        .iter()
        .filter(|e| matches!(&***e, Event::Refusal(r) if r.id.is_none() && !r.shadow))
        .count();
    assert_eq!(
        notes, 2,
        "the dropped notifications are recorded as refusals"
    );
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
}

#[tokio::test]
async fn status_429_mode_has_retry_after_and_ratelimit_headers() {
    let (up, _u, _seen) = counting_upstream().await;
    let p = proxy_with(
        up,
        "429",
        "[[limit]]\nname = \"strict\"\nrate = \"1/h\"\nkey = \"header:x-api-key\"\nstatus = 429\n",
    )
    .await;
    let h = [("content-type", "application/json"), ("x-api-key", "k1")];
    let call = r#"{"jsonrpc":"2.0","method":"echo","params":[1],"id":1}"#;
    assert_eq!(send(p.addr, "POST", "/jsonrpc", &h, call).await.status, 200);
    let r = send(p.addr, "POST", "/jsonrpc", &h, call).await;
    assert_eq!(r.status, 429);
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!(retry > 3000 && retry <= 3600, "{retry}");
    assert_eq!(r.headers["ratelimit-limit"], "1");
    assert_eq!(r.headers["ratelimit-remaining"], "0");
    assert_eq!(r.json()["error"]["code"], -32001);
    // Another key has its own budget.
    let r = send(
        p.addr,
        "POST",
        "/jsonrpc",
        &[("content-type", "application/json"), ("x-api-key", "k2")],
        call,
    )
    .await;
    assert_eq!(r.status, 200);
}

#[tokio::test]
async fn mcp_clients_get_refusals_as_sse_and_shadow_rules_only_count() {
    let (demo, _d) = start_demo().await;
    let mut p = proxy_with(
        demo,
        "mcp",
        "[[limit]]\nname = \"shadow-all\"\nmethod = \"tools/*\"\nrate = \"1/h\"\nshadow = true\n\n[[limit]]\nname = \"slow-tool\"\ntool = \"sl*\"\nrate = \"1/h\"\nkey = \"session\"\n",
    )
    .await;
    let sid = mcp_session(p.addr).await;
    let h = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let slow = |id: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow","arguments":{{"steps":1,"delay_ms":1}}}}}}"#
        )
    };
    let r = send(p.addr, "POST", "/mcp", &h, slow(1)).await;
    assert_eq!(
        sse_data(&r.text())[0]["result"]["content"][0]["text"],
        "done after 1 steps"
    );
    let r = send(p.addr, "POST", "/mcp", &h, slow(2)).await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let d = sse_data(&r.text());
    assert_eq!(d[0]["id"], 2);
    assert_eq!(d[0]["error"]["data"]["limit"], "slow-tool");
    // Another tool passes (the shadow rule would refuse it, but only counts).
    let r = send(p.addr, "POST", "/mcp", &h, r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}"#).await;
    assert_eq!(sse_data(&r.text())[0]["result"]["content"][0]["text"], "x");
    let ev = p.drain().await;
    let shadow: Vec<_> = ev
        .iter()
        .filter_map(|e| match &**e {
            Event::Refusal(r) if r.shadow => Some(r.rule.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        shadow,
        vec!["shadow-all", "shadow-all"],
        "tools/call 2 and 3 exceeded the shadow rule"
    );
    // `Accept` is matched in any letter case: the refusal is still an SSE reply.
    let upper = [
        ("content-type", "application/json"),
        ("accept", "Application/JSON, Text/Event-Stream"),
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let r = send(p.addr, "POST", "/mcp", &upper, slow(4)).await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    assert_eq!(
        sse_data(&r.text())[0]["error"]["data"]["limit"],
        "slow-tool"
    );
}

#[tokio::test]
async fn concurrency_limit_releases_when_the_reply_ends() {
    let (demo, _d) = start_demo().await;
    let p = proxy_with(
        demo,
        "conc",
        "[[limit]]\nname = \"one-sleep\"\nmethod = \"sleep\"\nconcurrency = 1\n",
    )
    .await;
    let addr = p.addr;
    let first = tokio::spawn(async move {
        post_json(
            addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"sleep","params":[300],"id":1}"#,
        )
        .await
    });
    wait_pending(&p.inspector, 1).await; // the first sleep holds the permit
    let second = post_json(
        addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"sleep","params":[1],"id":2}"#,
    )
    .await;
    assert_eq!(second.json()["error"]["data"]["limit"], "one-sleep");
    let other = post_json(
        addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"add","params":[1],"id":3}"#,
    )
    .await;
    assert_eq!(other.json()["result"], 1);
    assert_eq!(first.await.unwrap().json()["result"]["slept_ms"], 300);
    let third = post_json(
        addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"sleep","params":[1],"id":4}"#,
    )
    .await;
    assert_eq!(
        third.json()["result"]["slept_ms"],
        1,
        "released when the first reply ended"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_rules_and_keeps_the_old_ones_on_a_bad_file() {
    use std::process::{Command, Stdio};
    let (demo, _d) = start_demo().await;
    let cfg = config(
        "reload",
        "[[limit]]\nname = \"v1\"\nmethod = \"add\"\nrate = \"1/h\"\n",
    );
    // Bound by rpctap itself (port 0) and read from its banner: no port picked and dropped.
    let (child, addrs, rx) = spawn_with_banner(
        rpctap()
            .args([
                "proxy",
                "--listen",
                "127.0.0.1:0",
                "--upstream",
                &format!("http://{demo}"),
                "--config",
                cfg.to_str().unwrap(),
                "--no-tui",
                "--log",
                "off",
            ])
            .stdout(Stdio::null()),
        &["proxy on http://"],
    );
    let addr = addrs[0];
    let mut log = Vec::new();
    let add = |id: u32| format!(r#"{{"jsonrpc":"2.0","method":"add","params":[1],"id":{id}}}"#);
    assert_eq!(
        post_json(addr, "/jsonrpc", &add(1)).await.json()["result"],
        1
    );
    assert_eq!(
        post_json(addr, "/jsonrpc", &add(2)).await.json()["error"]["data"]["limit"],
        "v1"
    );
    let hup = |pid: u32| {
        Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap()
    };
    // A bad file: refused, the old rule stays.
    std::fs::write(
        &cfg,
        "[[limit]]\nname = \"v2\"\nrate = \"ten per second\"\n",
    )
    .unwrap();
    hup(child.id());
    // Waited for on what rpctap says, not for a while.
    assert!(eventually(Duration::from_secs(10), || said(
        &rx,
        &mut log,
        "reload refused"
    ) == 1));
    assert_eq!(
        post_json(addr, "/jsonrpc", &add(3)).await.json()["error"]["data"]["limit"],
        "v1"
    );
    // A good file: the new rules apply, the connection pool is untouched.
    std::fs::write(
        &cfg,
        "[[limit]]\nname = \"v3\"\nmethod = \"echo\"\nrate = \"1/h\"\n",
    )
    .unwrap();
    hup(child.id());
    assert!(eventually(Duration::from_secs(10), || said(
        &rx,
        &mut log,
        "rules reloaded"
    ) == 1));
    assert_eq!(
        post_json(addr, "/jsonrpc", &add(4)).await.json()["result"],
        1
    );
    let mut child = child;
    assert!(child.term().success());
    said_in_all(&rx, &mut log, "");
    let err = log.concat();
    assert!(
        err.contains("reload refused") && err.contains("ten per second"),
        "{err}"
    );
    assert_eq!(err.matches("reload refused").count(), 1, "said once: {err}");
    assert!(
        err.contains("rules reloaded") && err.contains("rules=1"),
        "{err}"
    );
    assert!(
        !err.contains('\x1b'),
        "no colour codes when stderr is not a terminal: {err}"
    );
    let _ = Bytes::new();
}

/// A batch with a refused member answered as SSE: the merged stream outlives the handler, and
/// the concurrency permit of its allowed call is held until that stream ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partly_refused_sse_batch_holds_its_permits_until_the_stream_ends() {
    let (demo, _d) = start_demo().await;
    let p = proxy_with(
        demo,
        "sse-merge",
        "[[limit]]\nname = \"one-at-a-time\"\nmethod = \"tools/call\"\nconcurrency = 1\n\n\
         [[limit]]\nname = \"one-ping\"\nmethod = \"ping\"\nrate = \"1/h\"\nburst = 1\n",
    )
    .await;
    let addr = p.addr;
    let sid = mcp_session(addr).await;
    let h = |sid: &str| {
        vec![
            ("content-type".to_string(), "application/json".to_string()),
            (
                "accept".into(),
                "application/json, text/event-stream".into(),
            ),
            ("mcp-session-id".into(), sid.to_string()),
            ("mcp-protocol-version".into(), "2025-06-18".into()),
        ]
    };
    let call = |id: u32, delay: u32| {
        format!(
            r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"slow","arguments":{{"steps":3,"delay_ms":{delay}}}}}}}"#
        )
    };
    let result_of = |text: &str, id: u32| -> serde_json::Value {
        sse_data(text)
            .into_iter()
            .flat_map(|v| match v {
                serde_json::Value::Array(a) => a,
                v => vec![v],
            })
            .find(|v| v["id"] == id)
            .unwrap_or_default()
    };
    let batch = format!(
        r#"[{},{{"jsonrpc":"2.0","id":2,"method":"ping"}},{{"jsonrpc":"2.0","id":3,"method":"ping"}}]"#,
        call(1, 300)
    );
    let hs = h(&sid);
    let first = tokio::spawn(async move {
        let hv: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        send(addr, "POST", "/mcp", &hv, batch).await
    });
    wait_pending(&p.inspector, 1).await;
    tokio::time::sleep(Duration::from_millis(150)).await; // the handler has returned; the stream goes on
    let hs = h(&sid);
    let hv: Vec<(&str, &str)> = hs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let second = send(addr, "POST", "/mcp", &hv, call(4, 1)).await;
    assert_eq!(
        result_of(&second.text(), 4)["error"]["data"]["limit"],
        "one-at-a-time",
        "the streaming batch still holds the permit: {}",
        second.text()
    );
    let first = first.await.unwrap();
    let text = first.text();
    assert_eq!(
        result_of(&text, 3)["error"]["data"]["limit"],
        "one-ping",
        "{text}"
    );
    assert!(result_of(&text, 1)["result"].is_object(), "{text}");
    let third = send(addr, "POST", "/mcp", &hv, call(5, 1)).await;
    assert!(
        result_of(&third.text(), 5)["result"].is_object(),
        "released when the merged stream ended: {}",
        third.text()
    );
}

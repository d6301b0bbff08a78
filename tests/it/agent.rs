//! The agent API: `rpctap mcp` over stdio driven by the Python SDK 2.x client (an agent's view:
//! the tools with their schemas, a call with an `MCP_UNKNOWN_TOOL` found and fetched, 1,000 calls
//! walked page by page, `find_anomalies` equal to `check`, `replay_call` refused and allowed), the
//! same server checked by rpctap's own rules from a recording of that agent's session, and `/mcp`
//! on a running proxy's admin listener behind its token.

use crate::common::*;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_rpctap");

/// The sessions the agent reads: one where the client calls a tool the server never listed,
/// one of 1,000 calls. Returns the demo's address (it stays up for the replay).
async fn sessions(dir: &Path) -> (std::net::SocketAddr, Stop) {
    let (demo, stop) = start_demo().await;
    let mut p = start_proxy_flags(
        &format!("http://{demo}"),
        record_flags(&dir.join("unknown.jsonl")),
    )
    .await;
    let sid = mcp_session(p.addr).await;
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":1,"b":2}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"nosuch","arguments":{}}}"#,
    ] {
        send(p.addr, "POST", "/mcp", &mcp_headers(&sid), body).await;
    }
    let codes: Vec<String> = anomalies(&p.drain().await)
        .into_iter()
        .map(|a| a.0)
        .collect();
    assert!(codes.contains(&"MCP_UNKNOWN_TOOL".to_string()), "{codes:?}");
    drop(p.stop);
    p.served.await.unwrap();
    let p = start_proxy_flags(
        &format!("http://{demo}"),
        record_flags(&dir.join("big.jsonl")),
    )
    .await;
    for i in 0..1000 {
        let body = format!(r#"{{"jsonrpc":"2.0","id":{i},"method":"add","params":[{i},1]}}"#);
        post_json(p.addr, "/jsonrpc", &body).await;
    }
    drop(p.stop);
    p.served.await.unwrap();
    (demo, stop)
}

fn client(dir: &Path, target: &str, server: &[&str]) -> serde_json::Value {
    let py = installed("mcp2", &["mcp>=2,<3"]).join("bin/python");
    let out = Command::new(py)
        .arg(root().join("tests/interop/agent_client.py"))
        .arg(dir)
        .arg(dir.join("unknown.jsonl"))
        .arg(dir.join("big.jsonl"))
        .arg(target)
        .arg("--")
        .args(server)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_reads_sessions_through_rpctap_mcp_and_it_obeys_its_own_rules() {
    let dir = Scratch::new("agent");
    let (demo, _d) = sessions(&dir).await;
    let d = dir.to_str().unwrap().to_string();
    let target = format!("http://{demo}");
    // Without --allow-replay.
    let (d2, t2) = (dir.to_path_buf(), target.clone());
    let out = tokio::task::spawn_blocking(move || {
        client(&d2, &t2, &[BIN, "mcp", "--dir", &d2.to_string_lossy()])
    })
    .await
    .unwrap();
    let tools = out["tools"].as_object().unwrap();
    let mut names: Vec<&String> = tools.keys().collect();
    names.sort();
    assert_eq!(
        names,
        vec![
            "check",
            "cost",
            "diff",
            "find_anomalies",
            "get_call",
            "list_calls",
            "list_sessions",
            "replay_call",
            "stats"
        ]
    );
    for (name, t) in tools {
        assert!(
            t["output"].is_object() && t["input"]["type"] == "object",
            "{name}: {t}"
        );
        assert_eq!(t["read_only"], name != "replay_call", "{name}");
    }
    let sessions: Vec<&str> = out["sessions"]["data"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    // The call the server never listed, with its finding, and fetched whole.
    let unknown = &out["unknown"]["data"]["calls"];
    assert_eq!(unknown.as_array().unwrap().len(), 1, "{unknown}");
    assert_eq!(unknown[0]["target"], "nosuch");
    assert!(unknown[0]["anomalies"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a == "MCP_UNKNOWN_TOOL"));
    let got = &out["get_call"]["data"];
    assert!(
        got["request"]["text"]
            .as_str()
            .unwrap()
            .contains("\"nosuch\""),
        "{got}"
    );
    assert!(got["reply"]["text"].as_str().is_some(), "{got}");
    assert!(
        got["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "MCP_UNKNOWN_TOOL"),
        "{got}"
    );
    assert_eq!(got["http"]["status"], 200, "{got}");
    // find_anomalies is check's findings.
    let (_, checked, _) = {
        let o = Command::new(BIN)
            .args(["check", &format!("{d}/unknown.jsonl")])
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            (),
        )
    };
    let mut want: Vec<String> = checked
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .flat_map(|v| {
            v["result"]["findings"]
                .as_array()
                .cloned()
                .unwrap_or_default()
        })
        .map(|f| f["code"].as_str().unwrap().to_string())
        .collect();
    let mut found: Vec<String> = out["anomalies"]["data"]["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["code"].as_str().unwrap().to_string())
        .collect();
    want.sort();
    found.sort();
    assert!(!want.is_empty());
    assert_eq!(found, want);
    // 1,000 calls in pages of 100: each once, none missed.
    assert_eq!(out["pages"], 10);
    let seen: Vec<u64> = out["seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    assert_eq!(seen, (0..1000).collect::<Vec<u64>>());
    let add = out["stats"]["data"]["methods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["method"] == "add")
        .cloned()
        .unwrap();
    assert_eq!(
        (add["calls"].clone(), add["errors"].clone()),
        (1000.into(), 0.into()),
        "{add}"
    );
    assert_eq!(
        out["check"]["data"]["passed"], false,
        "the unknown tool fails the gate"
    );
    // The context cost is `rpctap cost`'s, in the tokenizer asked for.
    let cost = &out["cost"]["data"];
    let o = Command::new(BIN)
        .args([
            "cost",
            &format!("{d}/unknown.jsonl"),
            "--tokenizer",
            "cl100k",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let cli: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(cost["tokenizer"], "cl100k_base");
    assert_eq!(cost["definitions"], cli["definitions"], "{cost}");
    assert_eq!(cost["methods"], cli["methods"]);
    assert!(
        cost["definitions"][0]["total"].as_u64().unwrap() > 0,
        "{cost}"
    );
    // replay_call refused without --allow-replay, said clearly.
    assert_eq!(out["replay"]["error"], true);
    assert!(
        out["replay"]["text"]
            .as_str()
            .unwrap()
            .contains("--allow-replay"),
        "{}",
        out["replay"]
    );
    assert_eq!(out["resources"].as_array().unwrap().len(), 2);

    // With it, through a recording shim: the verdict of one call against the demo; and the
    // agent's own session breaks no rule rpctap checks.
    let rec = dir.join("agent-session.jsonl");
    let (d2, t2, r2) = (dir.to_path_buf(), target.clone(), rec.clone());
    let out = tokio::task::spawn_blocking(move || {
        client(
            &d2,
            &t2,
            &[
                BIN,
                "stdio",
                "--no-hub",
                "--record",
                &r2.to_string_lossy(),
                "--",
                BIN,
                "mcp",
                "--dir",
                &d2.to_string_lossy(),
                "--allow-replay",
            ],
        )
    })
    .await
    .unwrap();
    let replay = &out["replay"]["data"];
    assert_eq!(replay["verdict"], "Succeeded", "{}", out["replay"]);
    assert_eq!(replay["pass"], true);
    let o = Command::new(BIN)
        .args(["check", rec.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&o.stdout);
    assert_eq!(o.status.code(), Some(0), "{text}");
    assert!(
        text.lines().all(|l| l.contains("\"findingCount\":0")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listener_serves_the_agent_api_behind_its_token() {
    let dir = Scratch::new("agent-admin");
    let (demo, _d) = sessions(&dir).await;
    let admin_port = free_port();
    let listen = free_port();
    let mut proxy = Command::new(BIN)
        .args(["proxy", "--no-tui", "--log", "off"])
        .args(["--listen", &format!("127.0.0.1:{listen}")])
        .args(["--upstream", &format!("http://{demo}")])
        .args([
            "--admin",
            &format!("127.0.0.1:{admin_port}"),
            "--admin-token",
            "s3cret",
        ])
        .spawn()
        .unwrap();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
    wait_listening(addr).await;
    let list = format!(
        r#"{{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{{"name":"list_calls","arguments":{{"session":"{}","filter":"code:MCP_UNKNOWN_TOOL"}}}}}}"#,
        dir.join("unknown.jsonl").display()
    );
    // Without the token: 401, as /events.
    let r = send(
        addr,
        "POST",
        "/mcp",
        &[("content-type", "application/json")],
        list.clone(),
    )
    .await;
    assert_eq!(r.status, 401);
    let auth = [
        ("content-type", "application/json"),
        ("authorization", "Bearer s3cret"),
    ];
    let r = send(addr, "POST", "/mcp", &auth, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#).await;
    assert_eq!(r.json()["result"]["serverInfo"]["name"], "rpctap");
    let r = send(
        addr,
        "POST",
        "/mcp",
        &auth,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(r.json()["result"]["tools"].as_array().unwrap().len(), 9);
    let r = send(addr, "POST", "/mcp", &auth, list).await;
    let v = r.json();
    assert_eq!(
        v["result"]["structuredContent"]["calls"][0]["target"], "nosuch",
        "{v}"
    );
    let _ = proxy.kill();
    let _ = proxy.wait();
}

/// The MCP Inspector's CLI sees the same server: the eight tools, and the unknown-tool call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_cli_lists_the_tools_and_finds_the_call() {
    let dir = Scratch::new("agent-inspector");
    let (_demo, _d) = sessions(&dir).await;
    let node = installed("node", NODE_PACKAGES);
    let inspector = node.join("node_modules/.bin/mcp-inspector");
    let d = dir.to_str().unwrap().to_string();
    let run = move |extra: Vec<String>| {
        json_stdout(
            Command::new(&inspector)
                .args(["--cli", BIN, "mcp", "--dir", &d])
                .args(extra),
            "the Inspector CLI",
        )
    };
    let unknown = dir.join("unknown.jsonl").display().to_string();
    let (tools, calls) = tokio::task::spawn_blocking(move || {
        (
            run(vec!["--method".into(), "tools/list".into()]),
            run(vec![
                "--method".into(),
                "tools/call".into(),
                "--tool-name".into(),
                "list_calls".into(),
                "--tool-arg".into(),
                format!("session={unknown}"),
                "filter=code:MCP_UNKNOWN_TOOL".into(),
            ]),
        )
    })
    .await
    .unwrap();
    let names: Vec<&str> = tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.len(), 9, "{names:?}");
    assert!(tools["tools"]
        .as_array()
        .unwrap()
        .iter()
        .all(|t| t["outputSchema"].is_object()));
    assert_eq!(
        calls["structuredContent"]["calls"][0]["target"], "nosuch",
        "{calls}"
    );
}

/// A session that starts (a recording appears) is said as `notifications/resources/list_changed`
/// on the stdio server, and listed as a resource.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_session_is_a_resource_list_change() {
    use std::io::{BufRead, Write};
    let dir = Scratch::new("agent-changed");
    let (_demo, _d) = sessions(&dir).await;
    let mut server = Command::new(BIN)
        .args(["mcp", "--dir", dir.to_str().unwrap()])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = server.stdin.take().unwrap();
    let stdout = server.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    writeln!(stdin, r#"{{"jsonrpc":"2.0","id":1,"method":"initialize","params":{{"protocolVersion":"2025-11-25","capabilities":{{}},"clientInfo":{{"name":"t","version":"1"}}}}}}"#).unwrap();
    let first = rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap();
    assert!(
        first.contains("\"resources\":{\"listChanged\":true}"),
        "{first}"
    );
    // Nothing changes: no notification within the watcher's first polls.
    assert!(rx
        .recv_timeout(std::time::Duration::from_millis(1500))
        .is_err());
    std::fs::copy(dir.join("unknown.jsonl"), dir.join("another.jsonl")).unwrap();
    let note = rx.recv_timeout(std::time::Duration::from_secs(5)).unwrap();
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(&note).unwrap()["method"],
        "notifications/resources/list_changed"
    );
    writeln!(
        stdin,
        r#"{{"jsonrpc":"2.0","id":2,"method":"resources/list"}}"#
    )
    .unwrap();
    let list: serde_json::Value =
        serde_json::from_str(&rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap())
            .unwrap();
    let uris: Vec<&str> = list["result"]["resources"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["uri"].as_str().unwrap())
        .collect();
    assert!(uris.contains(&"rpctap://session/another"), "{uris:?}");
    drop(stdin);
    let _ = server.wait();
}

/// `get_call` on a stdio session (one exchange for the whole stream): each call's findings are
/// its own — the `initialize` does not list a later call's `TOOL_ERROR` (issue 62.6).
#[test]
fn get_call_on_a_stdio_session_gives_each_call_its_own_findings() {
    use std::io::{BufRead, Write};
    let dir = Scratch::new("agent-stdio-findings");
    let file = dir.join("stdio.jsonl");
    let py2 = installed("mcp2", &["mcp>=2,<3"]).join("bin/python");
    let mut p = Proc::spawn(
        rpctap()
            .args(["stdio", "--record", file.to_str().unwrap(), "--"])
            .arg(&py2)
            .arg(root().join("tests/interop/mcp2_server.py"))
            .arg("stdio")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped()),
    );
    let mut stdin = p.0.stdin.take().unwrap();
    let mut out = std::io::BufReader::new(p.0.stdout.take().unwrap());
    let mut line = String::new();
    for msg in [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"fail","arguments":{}}}"#,
    ] {
        writeln!(stdin, "{msg}").unwrap();
        if msg.contains("\"id\"") {
            line.clear();
            out.read_line(&mut line).unwrap();
        }
    }
    drop(stdin);
    let _ = p.0.wait();
    let mut agent = Proc::spawn(
        rpctap()
            .args(["mcp", "--dir", dir.to_str().unwrap()])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped()),
    );
    let mut ain = agent.0.stdin.take().unwrap();
    let mut aout = std::io::BufReader::new(agent.0.stdout.take().unwrap());
    let mut ask = |id: u32, body: String| -> serde_json::Value {
        writeln!(ain, "{body}").unwrap();
        loop {
            let mut l = String::new();
            assert!(aout.read_line(&mut l).unwrap() > 0, "the agent API ended");
            let v: serde_json::Value = serde_json::from_str(&l).unwrap();
            if v["id"] == id {
                return v;
            }
        }
    };
    ask(1, r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#.into());
    let mut findings = |index: u32| -> Vec<String> {
        let call = serde_json::json!({"jsonrpc":"2.0","id":10 + index,"method":"tools/call","params":{"name":"get_call","arguments":{"session": file, "index": index}}});
        let v = ask(10 + index, call.to_string());
        let data = &v["result"]["structuredContent"];
        data["findings"]
            .as_array()
            .unwrap_or_else(|| panic!("{v}"))
            .iter()
            .map(|f| f["code"].as_str().unwrap().to_string())
            .collect()
    };
    let init = findings(0);
    let failed = findings(1);
    assert!(!init.contains(&"TOOL_ERROR".to_string()), "{init:?}");
    assert!(failed.contains(&"TOOL_ERROR".to_string()), "{failed:?}");
}

/// A proxy's admin listener serves its own live session as `this`, without joining the hub:
/// from its recording when it records (bodies too), else from what its feed keeps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_listeners_agent_api_sees_its_own_live_session() {
    let dir = Scratch::new("agent-own");
    let (demo, _d) = start_demo().await;
    for record in [false, true] {
        let admin_port = free_port();
        let listen = free_port();
        let mut cmd = Command::new(BIN);
        cmd.args(["proxy", "--no-tui", "--log", "off"])
            .args(["--listen", &format!("127.0.0.1:{listen}")])
            .args(["--upstream", &format!("http://{demo}")])
            .args(["--admin", &format!("127.0.0.1:{admin_port}")])
            // An empty state directory: nothing of the hub's to list.
            .env("RPCTAP_HOME", dir.join(format!("home-{record}")));
        if record {
            cmd.args(["--record", dir.join("own.jsonl").to_str().unwrap()]);
        }
        let _proxy = Proc::spawn(&mut cmd);
        let admin = std::net::SocketAddr::from(([127, 0, 0, 1], admin_port));
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], listen));
        wait_listening(admin).await;
        wait_listening(addr).await;
        post_json(
            addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","id":1,"method":"add","params":[2,3]}"#,
        )
        .await;
        post_json(
            addr,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","id":2,"method":"nosuch"}"#,
        )
        .await;
        let ask = |name: &str, args: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{{"name":"{name}","arguments":{args}}}}}"#
            )
        };
        let json = [("content-type", "application/json")];
        // The recording is at most 100 ms behind.
        let mut calls = serde_json::Value::Null;
        for _ in 0..50 {
            let r = send(
                admin,
                "POST",
                "/mcp",
                &json,
                ask("list_calls", r#"{"session":"this"}"#),
            )
            .await;
            calls = r.json()["result"]["structuredContent"].clone();
            if calls["total"] == 2 {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        assert_eq!(calls["total"], 2, "record={record}: {calls}");
        assert_eq!(calls["calls"][1]["method"], "nosuch", "{calls}");
        let r = send(admin, "POST", "/mcp", &json, ask("list_sessions", "{}")).await;
        let s = &r.json()["result"]["structuredContent"]["sessions"];
        assert_eq!(s[0]["name"], "this", "{s}");
        assert_eq!(s[0]["live"], true);
        assert_eq!(s[0]["calls"], 2);
        assert_eq!(s[0]["errors"], 1, "{s}");
        let r = send(
            admin,
            "POST",
            "/mcp",
            &json,
            ask("get_call", r#"{"session":"this","index":0}"#),
        )
        .await;
        let c = &r.json()["result"]["structuredContent"];
        assert_eq!(c["call"]["method"], "add", "{c}");
        if record {
            assert_eq!(
                c["reply"]["text"], r#"{"jsonrpc":"2.0","id":1,"result":5}"#,
                "the bodies come from the recording: {c}"
            );
        }
    }
}

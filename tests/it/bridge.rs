//! The bridge: `rpctap serve` in front of server-everything over stdio, against the same
//! server's own Streamable HTTP mode — the Python SDK 2.x client (auto and legacy), the
//! Inspector CLI and the conformance suite see the same; sessions and their children (20 at
//! once, DELETE, idle, a child killed with -9, `--shared` with colliding ids); and `rpctap stdio
//! --upstream` in front of the Python SDK 2.x HTTP server.

use crate::common::*;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rpctap");

fn everything_js(dir: &Path) -> PathBuf {
    dir.join("node_modules/@modelcontextprotocol/server-everything/dist/index.js")
}

/// `rpctap serve` headless on a free port in front of server-everything over stdio, with
/// `extra` flags; its process and address.
fn serve(extra: &[&str]) -> (Proc, SocketAddr) {
    let (p, addrs) = serve_with(extra, &["serve on http://"]);
    (p, addrs[0])
}

fn node_modules(packages: &[&str]) -> PathBuf {
    installed("node", packages)
}

/// The processes whose parent is `pid`, with their state letter (`Z`: a zombie).
fn children_of(pid: u32) -> Vec<(u32, char)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so read after its last ')'.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let f: Vec<&str> = rest.split_whitespace().collect();
        if f.len() > 1 && f[1] == pid.to_string() {
            let child: u32 = e.file_name().to_string_lossy().parse().unwrap_or(0);
            out.push((child, f[0].chars().next().unwrap_or('?')));
        }
    }
    out.sort();
    out
}

fn tool_call(id: u64, name: &str, args: serde_json::Value) -> String {
    serde_json::json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":name,"arguments":args}}).to_string()
}

/// The Python SDK 2.x client's view of a session with server-everything at `url`.
fn python_client(url: &str, mode: &str) -> serde_json::Value {
    let venv = installed("mcp2", &["mcp>=2,<3"]);
    json_stdout(
        Command::new(venv.join("bin/python"))
            .arg(root().join("tests/interop/everything_client.py"))
            .args([url, mode]),
        &format!("client ({mode}, {url})"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_gives_sdk_clients_and_the_conformance_suite_what_server_everything_http_gives() {
    let dir = node_modules(NODE_PACKAGES);
    let port = free_port();
    let _http = Proc::spawn(
        Command::new("node")
            .arg(everything_js(&dir))
            .arg("streamableHttp")
            .env("PORT", port.to_string())
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port))).await;
    let work = Scratch::new("bridge-same");
    let file = work.join("serve.jsonl");
    let (mut bridge, addr) = serve(&["--record", file.to_str().unwrap()]);
    let direct = format!("http://127.0.0.1:{port}/mcp");
    let via = format!("http://{addr}/mcp");
    let (d, v) = (direct.clone(), via.clone());
    let (sdk_direct, sdk_via) = tokio::task::spawn_blocking(move || {
        let modes = ["auto", "legacy"];
        (
            modes.map(|m| python_client(&d, m)),
            modes.map(|m| python_client(&v, m)),
        )
    })
    .await
    .unwrap();
    for (d, v) in sdk_direct.iter().zip(&sdk_via) {
        assert_eq!(d, v, "the SDK client's results through `rpctap serve`");
        assert_eq!(d["progress"].as_array().unwrap().len(), 3, "{d}");
        assert_eq!(d["sum"]["content"][0]["text"], "The sum of 2 and 3 is 5.");
    }
    // The Inspector CLI over HTTP.
    let inspector = dir.join("node_modules/.bin/mcp-inspector");
    let cli = move |url: String, args: Vec<&'static str>| {
        json_stdout(
            Command::new(&inspector)
                .args(["--cli", &url, "--transport", "http"])
                .args(args),
            "the Inspector CLI",
        )
    };
    let (d, v) = (direct.clone(), via.clone());
    let (insp_direct, insp_via) = tokio::task::spawn_blocking(move || {
        let runs = |url: &str| {
            (
                cli(url.to_string(), vec!["--method", "tools/list"]),
                cli(
                    url.to_string(),
                    vec![
                        "--method",
                        "tools/call",
                        "--tool-name",
                        "get-sum",
                        "--tool-arg",
                        "a=4",
                        "--tool-arg",
                        "b=5",
                    ],
                ),
            )
        };
        (runs(&d), runs(&v))
    })
    .await
    .unwrap();
    assert_eq!(
        insp_direct, insp_via,
        "the Inspector CLI's results through `rpctap serve`"
    );
    assert_eq!(insp_via.1["content"][0]["text"], "The sum of 4 and 5 is 9.");
    // The conformance suite's server scenarios: the same verdicts.
    let cd = verdicts(&conformance_server(direct, work.to_path_buf()).await);
    let cv = verdicts(&conformance_server(via, work.to_path_buf()).await);
    assert!(cd.len() >= 20, "the suite ran its scenarios: {cd:?}");
    // DNS rebinding protection is `serve`'s own (issue 61): it passes through rpctap whatever
    // the server behind it does (server-everything over HTTP checks no Host); every other
    // scenario's verdict is the server's, the same through `rpctap serve`.
    let rebinding = |v: &[String]| {
        v.iter()
            .filter(|l| !l.contains("dns-rebinding-protection"))
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        rebinding(&cd),
        rebinding(&cv),
        "every scenario's verdict is the same through `rpctap serve`"
    );
    assert!(
        cv.iter()
            .any(|l| l.starts_with('✓') && l.contains("dns-rebinding-protection: 2 passed")),
        "{cv:?}"
    );
    // Recorded: one scope per session, and `check` reads what the live run flagged.
    let status = bridge.term();
    assert!(status.success(), "{status:?}");
    let c = check_recording(&file);
    let text = std::fs::read_to_string(&file).unwrap();
    let drift: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("MCP_TOOL_DRIFT"))
        .take(3)
        .collect();
    assert_eq!(c.codes, live_codes(&file), "{drift:?}");
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["transport"], "serve", "{header}");
    let sessions: std::collections::BTreeSet<String> = text
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|v| v["event"] == "call")
        .filter_map(|v| {
            v["scope"]
                .as_str()
                .filter(|s| s.starts_with("session:"))
                .map(str::to_string)
        })
        .collect();
    // Two SDK sessions, four Inspector runs, the suite's many.
    assert!(sessions.len() >= 6, "{sessions:?}");
    // Every child was stopped and reaped with the bridge.
    assert!(children_of(bridge.id()).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_sessions_are_twenty_children_and_none_is_left_after_delete_and_idle() {
    // The idle timer leaves room for twenty children to start on two busy cores (a session
    // opened first must not idle out before the last one is up); the waits below are on the
    // state itself.
    let (mut bridge, addr) = serve(&["--session-idle", "10s", "--stop-grace", "2s"]);
    let mut sids = Vec::new();
    let opened = futures_util::future::join_all((0..20).map(|_| mcp_session(addr))).await;
    sids.extend(opened);
    let kids = children_of(bridge.id());
    assert_eq!(kids.len(), 20, "one child per session: {kids:?}");
    // Each session answers, from its own child.
    for sid in &sids[..3] {
        let r = send(
            addr,
            "POST",
            "/mcp",
            &mcp_headers(sid),
            tool_call(1, "echo", serde_json::json!({"message": sid})),
        )
        .await;
        assert_eq!(r.status, 200);
        let v = sse_data(&r.text());
        assert_eq!(v[0]["result"]["content"][0]["text"], format!("Echo: {sid}"));
    }
    for sid in &sids[..10] {
        let r = send(
            addr,
            "DELETE",
            "/mcp",
            &[
                ("mcp-session-id", sid.as_str()),
                ("mcp-protocol-version", "2025-06-18"),
            ],
            "",
        )
        .await;
        assert_eq!(r.status, 200);
    }
    // The ended sessions answer 404 (the spec's word for a session that is gone).
    let r = send(
        addr,
        "POST",
        "/mcp",
        &mcp_headers(&sids[0]),
        tool_call(2, "echo", serde_json::json!({"message": "x"})),
    )
    .await;
    assert_eq!(r.status, 404, "{}", r.text());
    assert!(
        eventually(Duration::from_secs(10), || children_of(bridge.id()).len()
            == 10),
        "the deleted sessions' children are gone: {:?}",
        children_of(bridge.id())
    );
    // The rest go idle (10 s here) and are stopped too: no child, no zombie.
    assert!(
        eventually(Duration::from_secs(40), || children_of(bridge.id())
            .is_empty()),
        "idle sessions' children are gone: {:?}",
        children_of(bridge.id())
    );
    let r = send(
        addr,
        "POST",
        "/mcp",
        &mcp_headers(&sids[15]),
        tool_call(3, "echo", serde_json::json!({"message": "x"})),
    )
    .await;
    assert_eq!(r.status, 404);
    // A new session after all that gets a new child.
    let sid = mcp_session(addr).await;
    assert_eq!(children_of(bridge.id()).len(), 1);
    drop(sid);
    assert!(bridge.term().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_killed_mid_call_answers_at_once_and_ends_only_its_session() {
    let (mut bridge, addrs) = serve_with(
        &["--admin", "127.0.0.1:0"],
        &["serve on http://", "admin on http://"],
    );
    let (addr, admin) = (addrs[0], addrs[1]);
    let a = mcp_session(addr).await;
    let b = mcp_session(addr).await;
    let kids = children_of(bridge.id());
    assert_eq!(kids.len(), 2);
    // A's child started first: the lower pid.
    let a_child = kids[0].0;
    let call = tool_call(
        7,
        "trigger-long-running-operation",
        serde_json::json!({"duration": 20, "steps": 20}),
    );
    let h = mcp_headers(&a).map(|(k, v)| (k.to_string(), v.to_string()));
    let pending = tokio::spawn(async move {
        let h: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        send(addr, "POST", "/mcp", &h, call).await
    });
    // The call on its way in the child when it dies: waited for on the gauge.
    let t0 = Instant::now();
    while metric(&http_text(admin, "/metrics").await, "rpctap_inflight_calls") < 1.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the call never went out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(a_child, "KILL");
    let killed = Instant::now();
    let r = tokio::time::timeout(Duration::from_secs(5), pending)
        .await
        .expect("the call ended")
        .unwrap();
    assert!(
        killed.elapsed() < Duration::from_secs(1),
        "answered within a second: {:?}",
        killed.elapsed()
    );
    let msgs = sse_data(&r.text());
    let reply = msgs
        .iter()
        .find(|m| m.get("id").is_some())
        .expect("a reply");
    assert_eq!(reply["id"], 7);
    assert_eq!(reply["error"]["code"], -32603, "{reply}");
    let message = reply["error"]["message"].as_str().unwrap();
    assert!(message.contains("signal 9"), "{message}");
    // A is gone; B is not.
    let r = send(
        addr,
        "POST",
        "/mcp",
        &mcp_headers(&a),
        tool_call(8, "echo", serde_json::json!({"message": "a"})),
    )
    .await;
    assert_eq!(r.status, 404);
    let r = send(
        addr,
        "POST",
        "/mcp",
        &mcp_headers(&b),
        tool_call(8, "echo", serde_json::json!({"message": "b"})),
    )
    .await;
    assert_eq!(
        sse_data(&r.text())[0]["result"]["content"][0]["text"],
        "Echo: b"
    );
    assert!(
        children_of(bridge.id()).iter().all(|(_, s)| *s != 'Z'),
        "no zombie"
    );
    assert_eq!(children_of(bridge.id()).len(), 1);
    assert!(bridge.term().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_child_gives_each_client_its_own_reply_for_the_same_ids() {
    let (mut bridge, addr) = serve(&["--shared", "--admin", "127.0.0.1:0"]);
    let a = mcp_session(addr).await;
    let b = mcp_session(addr).await;
    assert_eq!(
        children_of(bridge.id()).len(),
        1,
        "one child for both sessions"
    );
    for round in 0..5 {
        let one = |sid: String, what: &'static str| async move {
            let h = mcp_headers(&sid);
            // The same id in both sessions, at once; a slow call beside a fast one.
            let r = send(
                addr,
                "POST",
                "/mcp",
                &h,
                format!(
                    "[{},{}]",
                    tool_call(1, "echo", serde_json::json!({"message": what})),
                    tool_call(
                        2,
                        "trigger-long-running-operation",
                        serde_json::json!({"duration": 0.2, "steps": 2})
                    ),
                ),
            )
            .await;
            sse_data(&r.text())
        };
        let (ra, rb) = tokio::join!(one(a.clone(), "from a"), one(b.clone(), "from b"));
        for (msgs, what) in [(ra, "from a"), (rb, "from b")] {
            let replies: Vec<&serde_json::Value> =
                msgs.iter().filter(|m| m.get("id").is_some()).collect();
            assert_eq!(replies.len(), 2, "round {round}: {msgs:?}");
            let echo = replies
                .iter()
                .find(|m| m["id"] == 1)
                .expect("id 1 back as sent");
            assert_eq!(
                echo["result"]["content"][0]["text"],
                format!("Echo: {what}")
            );
            assert!(replies.iter().any(|m| m["id"] == 2));
        }
    }
    assert!(bridge.term().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stdio_upstream_is_the_http_server_as_a_stdio_server() {
    let venv = installed("mcp2", &["mcp>=2,<3"]);
    let port = free_port();
    let server = root().join("tests/interop/mcp2_server.py");
    let _http = Proc::spawn(
        Command::new(venv.join("bin/python"))
            .arg(&server)
            .args(["sse", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port))).await;
    let work = Scratch::new("bridge-upstream");
    let url = format!("http://127.0.0.1:{port}/mcp");
    for mode in ["legacy", "auto"] {
        let file = work.join(format!("upstream-{mode}.jsonl"));
        let (u, f, v, srv) = (url.clone(), file.clone(), venv.clone(), server.clone());
        let (direct, via) = tokio::task::spawn_blocking(move || {
            let run = |command: Vec<String>| {
                let mut c = Command::new(v.join("bin/python"));
                c.arg(root().join("tests/interop/mcp2_client.py"));
                if command.len() == 1 {
                    c.args([command[0].as_str(), mode]);
                } else {
                    c.args(["--stdio", mode]).args(&command);
                }
                c.env("BRIDGE_TOKEN", "Bearer s3cret-bridge-token")
                    .env("RPCTAP_HOME", f.parent().unwrap());
                json_stdout(&mut c, mode)
            };
            let python = v.join("bin/python").display().to_string();
            (
                // The same server over stdio, spawned by the client itself (legacy); in `auto`
                // the HTTP server answers `server/discover` otherwise than its stdio twin (a
                // 400 without a session, then the initialize fallback), so the reference is the
                // SDK's HTTP client against that same server …
                if mode == "legacy" {
                    run(vec![python, srv.display().to_string(), "stdio".into()])
                } else {
                    run(vec![u.clone()])
                },
                // … and over HTTP, behind `rpctap stdio --upstream`.
                run(vec![
                    BIN.into(),
                    "stdio".into(),
                    "--no-hub".into(),
                    "--record".into(),
                    f.display().to_string(),
                    "--upstream".into(),
                    u,
                    "--header".into(),
                    "Authorization=env:BRIDGE_TOKEN".into(),
                ]),
            )
        })
        .await
        .unwrap();
        assert_eq!(
            direct, via,
            "{mode}: the client's results through `rpctap stdio --upstream`"
        );
        assert_eq!(via["add"]["content"][0]["text"], "5", "{via}");
        let c = check_recording(&file);
        // The SDK's server logs without declaring `logging` (a real rule break, before
        // 2026-07-28 only): the one error, found live and by `check` alike.
        assert_eq!(
            c.exit,
            Some(if mode == "legacy" { 1 } else { 0 }),
            "{mode}: {}",
            c.stdout
        );
        assert_eq!(c.codes, live_codes(&file), "{mode}");
        let codes: std::collections::BTreeSet<&String> = c.codes.values().flatten().collect();
        for code in codes {
            assert!(
                ["MCP_CAPABILITY", "TOOL_ERROR", "MCP_DEPRECATED"].contains(&code.as_str()),
                "{mode}: {code}"
            );
        }
        assert!(c.matched >= 7, "{mode}: {}", c.stdout);
        let text = std::fs::read_to_string(&file).unwrap();
        assert!(
            !text.contains("s3cret-bridge-token"),
            "the header's value is never recorded"
        );
        assert!(text.contains(&url), "the recording names its upstream");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_sse_behind_serve_is_the_python_sdk_1_legacy_server() {
    let venv = installed("mcp1", &["mcp<2", "json-rpc", "werkzeug"]);
    let server = root().join("tests/interop/mcp1_server.py");
    let port = free_port();
    let _legacy = Proc::spawn(
        Command::new(venv.join("bin/python"))
            .arg(&server)
            .args(["legacy", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port))).await;
    let mut cmd = Command::new(BIN);
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--no-tui",
        "--log",
        "off",
        "--legacy-sse",
        "--",
    ])
    .arg(venv.join("bin/python"))
    .arg(&server)
    .arg("stdio")
    .stdin(Stdio::null())
    .stdout(Stdio::null());
    let (mut bridge, addr, _rest) = spawn_with_banner(&mut cmd, &["serve on http://"]);
    let addr = addr[0];
    let v = venv.clone();
    let (direct, via) = tokio::task::spawn_blocking(move || {
        let run = |args: Vec<String>| {
            json_stdout(
                Command::new(v.join("bin/python"))
                    .arg(root().join("tests/interop/mcp1_client.py"))
                    .args(args),
                "the 1.x client",
            )
        };
        (
            run(vec![
                format!("http://127.0.0.1:{port}/sse"),
                "legacy".into(),
            ]),
            // The legacy transport and the streamable one, from the same bridge.
            run(vec![
                format!("http://{addr}/sse"),
                "legacy".into(),
                format!("http://{addr}/mcp"),
            ]),
        )
    })
    .await
    .unwrap();
    assert_eq!(
        direct, via[0],
        "the legacy SSE client's results through `rpctap serve --legacy-sse`"
    );
    assert_eq!(via[0]["add"], via[1]["add"]);
    assert_eq!(
        via[1]["progress"].as_array().unwrap().len(),
        3,
        "{}",
        via[1]
    );
    assert!(bridge.term().success());
    assert!(children_of(bridge.id()).is_empty());
}

/// `--shared`: sessions that initialize at the same moment share one child, never two, and
/// each gets its own reply to the same request id (the ids rewritten on the way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_sessions_opened_at_once_start_one_child() {
    let (bridge, addr) = serve(&["--shared"]);
    let sids = futures_util::future::join_all((0..8).map(|_| mcp_session(addr))).await;
    let kids = children_of(bridge.id());
    assert_eq!(kids.len(), 1, "one shared child: {kids:?}");
    let replies = futures_util::future::join_all(sids.iter().map(|sid| async move {
        let r = send(
            addr,
            "POST",
            "/mcp",
            &mcp_headers(sid),
            tool_call(1, "echo", serde_json::json!({"message": sid})),
        )
        .await;
        (sid.clone(), sse_data(&r.text()))
    }))
    .await;
    for (sid, v) in replies {
        // The shared child's notifications may come first on the stream.
        let reply = v.iter().find(|m| m.get("id").is_some()).expect("a reply");
        assert_eq!(reply["id"], 1, "{v:?}");
        assert_eq!(
            reply["result"]["content"][0]["text"],
            format!("Echo: {sid}")
        );
    }
    assert_eq!(children_of(bridge.id()).len(), 1);
}

/// `--shared` says an id rewrite only when the id changed: no "id 2 is 2" (issue 62.17).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shared_id_rewrites_are_said_only_when_the_id_changes() {
    let work = Scratch::new("bridge-rewrites");
    let file = work.join("shared.jsonl");
    let (mut bridge, addr) = serve(&["--shared", "--record", file.to_str().unwrap()]);
    // `initialize` (id 0) becomes 1 on the shared server; the next call is its 2.
    let sid = mcp_session(addr).await;
    for id in [2, 7] {
        let r = send(
            addr,
            "POST",
            "/mcp",
            &mcp_headers(&sid),
            tool_call(id, "echo", serde_json::json!({"message": "x"})),
        )
        .await;
        assert_eq!(r.status, 200);
    }
    assert!(bridge.term().success());
    let notices: Vec<String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["event"] == "notice" && v["what"] == "bridge-rewrite")
        .map(|v| v["message"].as_str().unwrap_or_default().to_string())
        .collect();
    assert!(
        notices.iter().any(|m| m.contains("id 0 is 1")),
        "{notices:?}"
    );
    assert!(
        notices.iter().any(|m| m.contains("id 7 is 3")),
        "{notices:?}"
    );
    assert!(
        !notices.iter().any(|m| m.contains("id 2 is 2")),
        "{notices:?}"
    );
}

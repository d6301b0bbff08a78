//! Recording, replay, mock, export and check — end to end with the real binary and real sockets.

use crate::common::*;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_rpctap");

fn tmp(name: &str) -> Scratch {
    Scratch::new(name)
}

fn spawn(args: &[&str]) -> Proc {
    Proc::spawn(
        rpctap()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

/// Runs the proxy binary with `--record` in front of `upstream`, runs `traffic`, stops it.
async fn record<F, Fut>(upstream: std::net::SocketAddr, file: &Path, extra: &[&str], traffic: F)
where
    F: FnOnce(std::net::SocketAddr) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut args = vec![
        "proxy".to_string(),
        "--listen".into(),
        addr.to_string(),
        "--upstream".into(),
        format!("http://{upstream}"),
        "--record".into(),
        file.display().to_string(),
        "--log".into(),
        "off".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let mut child = Proc::spawn(
        rpctap()
            .args(&args)
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    wait_listening(addr).await;
    traffic(addr).await;
    assert!(child.term().success());
}

async fn demo_traffic(p: std::net::SocketAddr) {
    post_json(p, "/jsonrpc", r#"[{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1},{"jsonrpc":"2.0","method":"echo","params":["n"]},{"jsonrpc":"2.0","method":"nope","id":"x"}]"#).await;
    post_json(
        p,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"subtract","params":{"minuend":42,"subtrahend":23},"id":2}"#,
    )
    .await;
    post_json(
        p,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"echo","params":["fire and forget"]}"#,
    )
    .await;
    let sid = mcp_session(p).await;
    let h = mcp_headers(&sid);
    send(
        p,
        "POST",
        "/mcp",
        &h,
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
    )
    .await;
    send(p, "POST", "/mcp", &h, r#"{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"add","arguments":{"a":2,"b":3}}}"#).await;
    send(p, "POST", "/mcp", &h, r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"slow","arguments":{"steps":2,"delay_ms":5},"_meta":{"progressToken":"t"}}}"#).await;
    send(
        p,
        "POST",
        "/mcp",
        &h,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"fail","arguments":{}}}"#,
    )
    .await;
    send(
        p,
        "DELETE",
        "/mcp",
        &[
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        "",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn record_replay_round_trip_and_a_changed_server_fails() {
    let dir = tmp("roundtrip");
    let file = dir.join("demo.jsonl");
    let (demo, _d) = start_demo().await;
    record(demo, &file, &[], demo_traffic).await;

    // Same server: every call passes.
    let out = Command::new(BIN)
        .args([
            "replay",
            file.to_str().unwrap(),
            "--target",
            &format!("http://{demo}"),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains("8 passed, 0 failed"), "{text}");
    assert!(
        text.contains("Error reported"),
        "the recorded -32601 is expected again: {text}"
    );

    // A changed server (add answers one more): exit 1, the diff names the path.
    let (changed, _c) = start_demo_with(rpctap::demo::DemoOptions {
        alter_add: true,
        ..Default::default()
    })
    .await;
    let junit = dir.join("junit.xml");
    let out = Command::new(BIN)
        .args([
            "replay",
            file.to_str().unwrap(),
            "--target",
            &format!("http://{changed}"),
            "--junit",
            junit.to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("result: expected 3, got 4"), "{text}");
    assert!(
        text.contains("result.content[0].text: expected \"5\", got \"6\""),
        "{text}"
    );
    // JUnit XML a JUnit parser accepts: one test case per call, the two regressions failing.
    let xml = std::fs::read_to_string(&junit).unwrap();
    let report = quick_junit::Report::deserialize_from_str(&xml).expect("valid JUnit XML");
    assert_eq!(report.tests, 8);
    assert_eq!(report.failures, 2);
    // --ignore makes the changed values acceptable.
    let out = Command::new(BIN)
        .args([
            "replay",
            file.to_str().unwrap(),
            "--target",
            &format!("http://{changed}"),
            "--ignore",
            "result",
            "--json",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["failed"], 0);
    assert_eq!(v["calls"].as_array().unwrap().len(), 8);
    // Nothing listening: the server is down, not changed — exit 2 with one clear line, no
    // per-call verdicts; a missing file is exit 2 too.
    let dead = format!("http://127.0.0.1:{}", free_port());
    let out = Command::new(BIN)
        .args(["replay", file.to_str().unwrap(), "--target", &dead])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot reach the target"));
    assert!(out.stdout.is_empty());
    let out = Command::new(BIN)
        .args(["replay", "/nonexistent.jsonl", "--target", &dead])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));

    // The recording checks clean, scope by scope; the tool error is a warning.
    let out = Command::new(BIN)
        .args(["check", file.to_str().unwrap()])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(lines.len() >= 3);
    assert!(lines.iter().all(|l| l["result"]["passesChecks"] == true));
    assert!(text.contains("TOOL_ERROR"));

    // Recording file is private.
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&file).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_serves_recorded_answers_with_the_clients_ids() {
    let dir = tmp("mock");
    let file = dir.join("demo.jsonl");
    let (demo, d) = start_demo().await;
    record(demo, &file, &[], demo_traffic).await;
    drop(d); // the real server is gone: the client now talks to the mock only

    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let _mock = spawn(&[
        "mock",
        file.to_str().unwrap(),
        "--listen",
        &addr.to_string(),
    ]);
    wait_listening(addr).await;
    // Different ids than recorded; same methods and params.
    let r = post_json(addr, "/jsonrpc", r#"{"jsonrpc":"2.0","method":"subtract","params":{"subtrahend":23,"minuend":42},"id":"mine-7"}"#).await;
    assert_eq!(
        r.json(),
        serde_json::json!({"jsonrpc":"2.0","id":"mine-7","result":19})
    );
    let r = post_json(addr, "/jsonrpc", r#"[{"jsonrpc":"2.0","method":"add","params":[1,2],"id":100},{"jsonrpc":"2.0","method":"nope","id":101}]"#).await;
    let v = r.json();
    assert_eq!(
        v[0],
        serde_json::json!({"jsonrpc":"2.0","id":100,"result":3})
    );
    assert_eq!(v[1]["id"], 101);
    assert_eq!(v[1]["error"]["code"], -32601);
    // Notifications: no reply.
    let r = post_json(
        addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"echo","params":["fire and forget"]}"#,
    )
    .await;
    assert_eq!(r.status, 204);
    // MCP: a session, SSE replies, _meta ignored when matching.
    let sid = mcp_session(addr).await;
    let h = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
    ];
    let r = send(addr, "POST", "/mcp", &h, r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"slow","arguments":{"steps":2,"delay_ms":5},"_meta":{"progressToken":"other"}}}"#).await;
    assert_eq!(r.headers["content-type"], "text/event-stream");
    let d = sse_data(&r.text());
    // The progress recorded inside the reply stream comes first, with the live token.
    assert_eq!(d.len(), 3, "{d:?}");
    for (i, p) in d[..2].iter().enumerate() {
        assert_eq!(p["method"], "notifications/progress");
        assert_eq!(p["params"]["progressToken"], "other");
        assert_eq!(p["params"]["progress"], i as u64 + 1);
    }
    assert_eq!(d[2]["id"], 42);
    assert_eq!(d[2]["result"]["content"][0]["text"], "done after 2 steps");
    // JSON when the client accepts only JSON.
    let r = send(
        addr,
        "POST",
        "/mcp",
        &[
            ("content-type", "application/json"),
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-06-18"),
        ],
        r#"{"jsonrpc":"2.0","id":43,"method":"tools/list"}"#,
    )
    .await;
    assert_eq!(r.json()["id"], 43);
    assert!(r.json()["result"]["tools"].as_array().unwrap().len() >= 4);
    // Unmatched: an error naming the closest recorded method.
    let r = post_json(
        addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"substract","params":[1,1],"id":9}"#,
    )
    .await;
    let v = r.json();
    assert_eq!(v["error"]["code"], -32601);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`subtract`"),
        "{v}"
    );
    let r = post_json(
        addr,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"add","params":[5,5],"id":10}"#,
    )
    .await;
    assert_eq!(r.json()["error"]["code"], -32602);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_at_most_the_flush_interval() {
    let dir = tmp("kill9");
    let file = dir.join("load.jsonl");
    let (demo, _d) = start_demo().await;
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = spawn(&[
        "proxy",
        "--listen",
        &addr.to_string(),
        "--upstream",
        &format!("http://{demo}"),
        "--record",
        file.to_str().unwrap(),
        "--log",
        "off",
    ]);
    wait_listening(addr).await;
    // 8 clients send calls with unique ids for ~1.2 s (bounded), noting when each was answered.
    let answered = std::sync::Arc::new(std::sync::Mutex::new(Vec::<(u64, Instant)>::new()));
    let deadline = Instant::now() + Duration::from_millis(1200);
    let mut tasks = Vec::new();
    for w in 0..8u64 {
        let answered = answered.clone();
        tasks.push(tokio::spawn(async move {
            let c = client();
            for i in 0..100_000u64 {
                if Instant::now() > deadline {
                    break;
                }
                let id = w * 1_000_000 + i;
                let req = http::Request::post(format!("http://{addr}/jsonrpc"))
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(format!(
                        r#"{{"jsonrpc":"2.0","method":"add","params":[1,{i}],"id":{id}}}"#
                    ))))
                    .unwrap();
                let Ok(resp) = c.request(req).await else {
                    break;
                };
                use http_body_util::BodyExt;
                if resp.into_body().collect().await.is_ok() {
                    answered.lock().unwrap().push((id, Instant::now()));
                }
            }
        }));
    }
    // Killed while the clients are busy: once calls are being answered, not after a while.
    let t0 = Instant::now();
    let settled = rpctap::record::FLUSH_EVERY + Duration::from_millis(100);
    while answered
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, t)| t.elapsed() > settled)
        .count()
        < 150
    {
        assert!(t0.elapsed() < Duration::from_secs(10), "no calls answered");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let killed_at = Instant::now();
    child.0.kill().unwrap(); // SIGKILL
    child.0.wait().unwrap();
    for t in tasks {
        let _ = t.await;
    }
    let rec = rpctap::record::reader::read(&file).unwrap();
    assert!(
        rec.warnings.len() <= 1,
        "at most the torn last line: {:?}",
        rec.warnings
    );
    let recorded: std::collections::HashSet<String> =
        rec.calls().map(|c| c.id.to_json_text()).collect();
    let answered = answered.lock().unwrap().clone();
    let before: Vec<u64> = answered
        .iter()
        .filter(|(_, t)| *t + rpctap::record::FLUSH_EVERY + Duration::from_millis(50) < killed_at)
        .map(|(id, _)| *id)
        .collect();
    assert!(before.len() > 100, "the load ran: {}", before.len());
    let lost: Vec<&u64> = before
        .iter()
        .filter(|id| !recorded.contains(&id.to_string()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} calls answered before the flush interval are missing",
        lost.len(),
        before.len()
    );
    eprintln!(
        "{} calls answered, {} recorded, {} answered before kill − flush interval",
        answered.len(),
        recorded.len(),
        before.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_reach_the_recording_the_har_or_the_log() {
    let dir = tmp("secrets");
    let file = dir.join("s.jsonl");
    let (demo, _d) = start_demo().await;
    record(demo, &file, &["--redact-path", "params.arguments.password", "--redact-header", "x-api-key"], |p| async move {
        let sid = mcp_session(p).await;
        let h = [
            ("content-type", "application/json"),
            MCP_ACCEPT,
            ("mcp-session-id", sid.as_str()),
            ("mcp-protocol-version", "2025-06-18"),
            ("authorization", "Bearer TOPSECRET-AUTH"),
            ("x-api-key", "TOPSECRET-KEY"),
            ("cookie", "session=TOPSECRET-COOKIE"),
        ];
        send(p, "POST", "/mcp", &h, r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi","password":"TOPSECRET-PW"}}}"#).await;
    })
    .await;
    let rec = std::fs::read_to_string(&file).unwrap();
    assert!(!rec.contains("TOPSECRET"), "{rec}");
    assert!(rec.contains("[REDACTED]"));
    let har = Command::new(BIN)
        .args(["export", file.to_str().unwrap(), "--format", "har"])
        .output()
        .unwrap();
    let har_text = String::from_utf8(har.stdout).unwrap();
    assert!(!har_text.contains("TOPSECRET"));
    let v: serde_json::Value = serde_json::from_str(&har_text).unwrap();
    assert_eq!(v["log"]["version"], "1.2");
    let entries = v["log"]["entries"].as_array().unwrap();
    let call = entries
        .iter()
        .find(|e| e["_rpctap"]["methods"][0] == "tools/call")
        .unwrap();
    assert_eq!(call["response"]["content"]["mimeType"], "text/event-stream");
    assert!(call["response"]["content"]["text"]
        .as_str()
        .unwrap()
        .starts_with("event: message\n"));
    assert!(call["request"]["postData"]["text"]
        .as_str()
        .unwrap()
        .contains("[REDACTED]"));

    // The JSON log of a live proxy with the same traffic.
    let port = free_port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = Proc::spawn(
        rpctap()
            .args([
                "proxy",
                "--listen",
                &addr.to_string(),
                "--upstream",
                &format!("http://{demo}"),
                "--log",
                "json",
                "--redact-path",
                "params.arguments.password",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    );
    wait_listening(addr).await;
    let sid = mcp_session(addr).await;
    let h = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", sid.as_str()),
        ("mcp-protocol-version", "2025-06-18"),
        ("authorization", "Bearer TOPSECRET-AUTH"),
    ];
    send(addr, "POST", "/mcp", &h, r#"{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi","password":"TOPSECRET-PW"}}}"#).await;
    let out = child.term_output();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains("tools/call"));
    assert!(
        !log.contains("TOPSECRET") && !String::from_utf8_lossy(&out.stderr).contains("TOPSECRET")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_and_exported_chunks_respect_the_limits() {
    let dir = tmp("rotate");
    let file = dir.join("r.jsonl");
    let (demo, _d) = start_demo().await;
    record(demo, &file, &["--record-max-bytes", "4000"], |p| async move {
        for i in 0..40 {
            post_json(p, "/jsonrpc", &format!(r#"[{{"jsonrpc":"2.0","method":"echo","params":["{}"],"id":{i}}},{{"jsonrpc":"2.0","method":"echo","params":[1]}}]"#, "x".repeat(i * 10))).await;
        }
    })
    .await;
    assert!(
        dir.join("r.jsonl.1").exists() && dir.join("r.jsonl.2").exists(),
        "rotated"
    );
    for n in ["r.jsonl", "r.jsonl.1"] {
        assert!(std::fs::metadata(dir.join(n)).unwrap().len() <= 4000);
    }
    let rec = rpctap::record::reader::read(&file).unwrap();
    assert_eq!(rec.calls().count(), 40, "every part is read");
    let out = Command::new(BIN)
        .args([
            "export",
            file.to_str().unwrap(),
            "--format",
            "exchange",
            "--max-envelopes",
            "5",
            "--max-bytes",
            "1500",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let docs: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(docs.len() > 10);
    let mut ids = Vec::new();
    for (line, d) in text.lines().zip(&docs) {
        let req = d["request"].as_array().unwrap();
        let resp = d["response"].as_array().unwrap();
        assert!(req.len() <= 5 && resp.len() <= 5);
        assert!(line.len() <= 1500, "{}", line.len());
        // whole calls: every request with an id has its reply in the same document
        for r in req.iter().filter(|r| r.get("id").is_some()) {
            assert!(resp.iter().any(|x| x["id"] == r["id"]));
            ids.push(r["id"].as_u64().unwrap());
        }
        // and each document checks clean on its own, within seed 004's limits
        let mut c = Command::new(BIN)
            .args(["check", "-"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        use std::io::Write;
        c.stdin.take().unwrap().write_all(line.as_bytes()).unwrap();
        let o = c.wait_with_output().unwrap();
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&o.stdout)
        );
    }
    ids.sort_unstable();
    assert_eq!(ids, (0..40).collect::<Vec<u64>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_example_recording_checks_clean_and_replays() {
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/recordings/demo.jsonl");
    let out = Command::new(BIN).args(["check", file]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let (demo, _d) = start_demo().await;
    let out = Command::new(BIN)
        .args(["replay", file, "--target", &format!("http://{demo}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    assert!(text.contains(" 0 failed"), "{text}");

    // Media types are case-insensitive: the same recording with its SSE replies typed
    // `Text/Event-Stream` replays the same and exports its SSE bodies as events.
    let original = std::fs::read_to_string(file).unwrap();
    let upper = original.replace("text/event-stream", "Text/Event-Stream");
    assert!(upper.contains(r#""content_type":"Text/Event-Stream""#));
    let dir = tmp("upper-media-type");
    let upper_file = dir.join("upper.jsonl");
    std::fs::write(&upper_file, upper).unwrap();
    let out = Command::new(BIN)
        .args(["replay", upper_file.to_str().unwrap()])
        .args(["--target", &format!("http://{demo}")])
        .output()
        .unwrap();
    let upper_text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{upper_text}");
    let summary = |t: &str| t.lines().last().unwrap_or("").to_string();
    assert_eq!(summary(&upper_text), summary(&text));
    let har = Command::new(BIN)
        .args(["export", upper_file.to_str().unwrap(), "--format", "har"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&har.stdout).unwrap();
    let sse: Vec<&str> = v["log"]["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["response"]["content"]["mimeType"] == "Text/Event-Stream")
        .filter_map(|e| e["response"]["content"]["text"].as_str())
        .filter(|t| !t.is_empty())
        .collect();
    assert!(!sse.is_empty());
    for t in sse {
        assert!(t.starts_with("event: message\n"), "{t}");
    }
}

/// `--record-append` adds a run (its own header) after what a recording holds; `check` reads the
/// runs apart (exchange numbers start again in each), and the file stays private.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_run_appends_to_a_recording_and_checks_apart() {
    let (demo, _d) = start_demo().await;
    let dir = tmp("append");
    let file = dir.join("two-runs.jsonl");
    record(demo, &file, &[], demo_traffic).await;
    let first = rpctap::record::reader::read(&file).unwrap();
    record(demo, &file, &["--record-append"], demo_traffic).await;
    let both = rpctap::record::reader::read(&file).unwrap();
    assert_eq!(both.runs.len(), 2, "two runs, each with its header");
    assert_eq!(both.runs[1].1["appended"], true);
    assert_eq!(both.events.len(), 2 * first.events.len());
    let out = rpctap()
        .args(["check", file.to_str().unwrap()])
        .output()
        .unwrap();
    let lines = String::from_utf8_lossy(&out.stdout).lines().count();
    let first_lines = rpctap::inspect::recorded::check_recording(&first).len();
    assert_eq!(
        lines,
        2 * first_lines,
        "each run's scopes checked on their own"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
}

/// The session of the wrong-row report: `add` with a bad argument as id 3, an unknown tool as
/// id 4, `echo` reusing id 3.
async fn wrong_row_traffic(p: std::net::SocketAddr) {
    let sid = mcp_session(p).await;
    let h = mcp_headers(&sid);
    for body in [
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"add","arguments":{"a":"one","b":2}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"nope","arguments":{}}}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}"#,
    ] {
        send(p, "POST", "/mcp", &h, body).await;
    }
}

/// Each flagged call's row carries its own code, live and in `view`; the `anomaly` filter finds
/// every flagged call.
fn assert_own_rows(app: &mut rpctap::view::App, how: &str) {
    let codes = |target: &str| -> Vec<String> {
        let r = app
            .rows
            .iter()
            .find(|r| r.target.as_deref() == Some(target))
            .unwrap_or_else(|| panic!("{how}: no row for {target}"));
        r.anomalies.clone()
    };
    assert_eq!(codes("add"), ["MCP_INPUT_SCHEMA"], "{how}");
    assert_eq!(codes("nope"), ["MCP_UNKNOWN_TOOL"], "{how}");
    assert_eq!(codes("echo"), ["DUPLICATE_ID"], "{how}");
    let text = |target: &str| {
        app.rows
            .iter()
            .find(|r| r.target.as_deref() == Some(target))
            .map(|r| r.anomaly_text.join("\n"))
            .unwrap_or_default()
    };
    assert!(text("echo").contains("DUPLICATE_ID"), "{how}");
    assert!(
        !text("add").contains("DUPLICATE_ID"),
        "{how}: {}",
        text("add")
    );
    app.filter = "anomaly".into();
    let mut flagged: Vec<String> = app
        .visible()
        .iter()
        .filter_map(|r| r.target.as_deref().map(str::to_string))
        .collect();
    flagged.sort();
    assert_eq!(flagged, ["add", "echo", "nope"], "{how}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_finding_is_pinned_on_its_own_row_live_and_in_view() {
    let (up, _s) = start_demo().await;
    // Live: the dashboard fed from the bus.
    let mut p = start_proxy(&format!("http://{up}")).await;
    wrong_row_traffic(p.addr).await;
    let mut live = rpctap::view::App::new("t", "l", "u", 1000, 0);
    for e in p.drain().await {
        live.apply(&e);
    }
    assert_own_rows(&mut live, "live");
    // `view`: the recording of the same traffic, loaded as `rpctap view` loads it.
    let dir = tmp("wrong-row");
    let file = dir.join("s.jsonl");
    record(up, &file, &[], wrong_row_traffic).await;
    let rec = rpctap::record::reader::read(&file).unwrap();
    let mut view = rpctap::view::App::new("t", "l", "u", 1000, 0);
    view.load_recording(&rec);
    assert_own_rows(&mut view, "view");
    assert_dashboard_matches_calls(&file);
}

/// An observer that panics at every call it sees.
#[derive(Debug)]
struct Panicky;

impl rpctap::events::Sink for Panicky {
    fn accept(&self, ev: &rpctap::events::Event) {
        if matches!(ev, rpctap::events::Event::Call(_)) {
            panic!("a broken observer");
        }
    }
}

/// One failing observer is dropped and the rest go on: the proxy answers every call and the
/// recorder records every one of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_observer_leaves_the_proxy_answering_and_the_recorder_recording() {
    let (up, _s) = start_demo().await;
    let dir = tmp("panicky");
    let file = dir.join("p.jsonl");
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            record: Some(file.clone()),
            log: Some(rpctap::cli::LogFormat::Off),
            ..Default::default()
        },
        ..Default::default()
    };
    let cfg = rpctap::config::resolve(
        Some("127.0.0.1:0".parse().unwrap()),
        Some(&format!("http://{up}")),
        &flags,
    )
    .unwrap();
    let mut bus = rpctap::events::BusBuilder::default();
    bus.sink(rpctap::events::Interest::ALL, std::sync::Arc::new(Panicky));
    let running = rpctap::app::RunningProxy::bind_with(cfg, bus)
        .await
        .unwrap();
    let addr = running.local_addr().unwrap();
    let (stop, sd) = tokio::sync::oneshot::channel::<()>();
    let served = tokio::spawn(running.serve(async move {
        let _ = sd.await;
    }));
    for i in 0..20 {
        let r = post_json(
            addr,
            "/jsonrpc",
            &format!(r#"{{"jsonrpc":"2.0","method":"add","params":[{i},1],"id":{i}}}"#),
        )
        .await;
        assert_eq!(r.json()["result"], i + 1, "answered after the panic too");
    }
    let _ = stop.send(());
    served.await.unwrap();
    assert_eq!(answered_calls(&file), 20, "every call recorded");
}

/// A recording's header is on disk as soon as rpctap listens: a process killed before any
/// traffic leaves a session `sessions` and `watch` can read, not an empty file (issue 62).
#[test]
fn a_process_killed_before_any_traffic_leaves_its_header() {
    let dir = Scratch::new("record-header-at-once");
    let file = dir.join("quiet.jsonl");
    let mut cmd = proxy_cmd("http://127.0.0.1:9", false);
    cmd.args(["--record", file.to_str().unwrap()]);
    let (p, _addrs, _rest) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    // The banner is printed once the recorder is running; its first write needs no traffic.
    assert!(
        eventually(std::time::Duration::from_secs(5), || std::fs::metadata(
            &file
        )
        .is_ok_and(|m| m.len() > 0)),
        "nothing on disk"
    );
    signal(p.0.id(), "KILL");
    let text = std::fs::read_to_string(&file).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert!(header.get("rpctap_recording").is_some(), "{text}");
}

/// A mock of one client's session answers another client: the MCP Inspector's CLI (its own
/// `initialize`, with its own client info, version and capabilities) against a mock of
/// the Python SDK 2.x client's stdio session with the Python SDK 2.x server gets the recorded
/// server's tools, resources and tool results — with each `--match`.
#[test]
fn a_mock_answers_any_clients_protocol_plumbing_from_the_recorded_server() {
    let tmp = Scratch::new("mock-plumbing");
    let file = tmp.join("py.jsonl");
    let py2 = installed("mcp2", &["mcp>=2,<3"]).join("bin/python");
    let out = Command::new(&py2)
        .arg(script("mcp2_client.py"))
        .args(["--stdio", "legacy", env!("CARGO_BIN_EXE_rpctap"), "stdio"])
        .args(["--no-hub", "--record", file.to_str().unwrap(), "--"])
        .arg(&py2)
        .args([script("mcp2_server.py"), "stdio".into()])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let inspector = installed("node", NODE_PACKAGES).join("node_modules/.bin/mcp-inspector");
    for matching in ["method-params", "sequential"] {
        let run = |extra: &[&str]| {
            json_stdout(
                Command::new(&inspector)
                    .args(["--cli", env!("CARGO_BIN_EXE_rpctap"), "mock", "--stdio"])
                    .args(["--match", matching, file.to_str().unwrap()])
                    .args(extra),
                "the Inspector CLI",
            )
        };
        let tools = run(&["--method", "tools/list"]);
        let names: Vec<&str> = tools["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"add") && names.contains(&"echo"),
            "{matching}: {tools}"
        );
        let resources = run(&["--method", "resources/list"]);
        assert_eq!(
            resources["resources"][0]["uri"], "demo://readme",
            "{matching}: {resources}"
        );
        let sum = run(&[
            "--method",
            "tools/call",
            "--tool-name",
            "add",
            "--tool-arg",
            "a=2",
            "b=3",
        ]);
        assert_eq!(sum["content"][0]["text"], "5", "{matching}: {sum}");
        let readme = run(&["--method", "resources/read", "--uri", "demo://readme"]);
        assert!(
            readme["contents"][0]["text"].is_string(),
            "{matching}: {readme}"
        );
    }
}

//! The admin listener of a running rpctap (the real binary, as a sidecar runs it): health and
//! readiness (following a real upstream that stops and comes back, and shutdown), Prometheus
//! metrics after known traffic (checked by `promtool` and scraped by a real Prometheus server),
//! label cardinality, the live feed and recent calls, and the token rules.

use crate::common::*;
use http_body_util::BodyExt;
use std::io::BufRead;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// A running `rpctap proxy` with its admin listener, addresses read from its banner.
struct Sidecar {
    proc: Proc,
    listen: SocketAddr,
    admin: SocketAddr,
}

fn addr_after(line: &str, marker: &str) -> Option<SocketAddr> {
    let rest = line.split(marker).nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

fn start_sidecar(upstream: &str, extra: &[&str]) -> Sidecar {
    let mut cmd = proxy_cmd(upstream, true);
    cmd.args(extra);
    let (proc, addrs, _rest) =
        spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    Sidecar {
        proc,
        listen: addrs[0],
        admin: addrs[1],
    }
}

async fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> Reply {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth
        .as_deref()
        .map(|a| vec![("authorization", a)])
        .unwrap_or_default();
    send(addr, "GET", path, &headers, "").await
}

/// Polls `/readyz` until it answers `want` (or fails after `limit`).
async fn ready_becomes(admin: SocketAddr, want: u16, limit: Duration) -> String {
    let deadline = Instant::now() + limit;
    loop {
        let r = get(admin, "/readyz", None).await;
        if r.status.as_u16() == want {
            return r.text();
        }
        assert!(
            Instant::now() < deadline,
            "/readyz stayed {} ({}) instead of {want}",
            r.status,
            r.text()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn demo_server(port: u16) -> Proc {
    Proc::spawn(
        rpctap()
            .args(["demo-server", "--listen", &format!("127.0.0.1:{port}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    )
}

async fn wait_port(port: u16) {
    wait_listening(SocketAddr::from(([127, 0, 0, 1], port))).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_follows_the_upstream_and_turns_503_at_shutdown() {
    let port = free_port();
    let mut upstream = demo_server(port);
    wait_port(port).await;
    let mut s = start_sidecar(
        &format!("http://127.0.0.1:{port}"),
        &["--ready-interval", "0.1", "--grace", "5"],
    );
    assert_eq!(get(s.admin, "/healthz", None).await.text(), "ok\n");
    ready_becomes(s.admin, 200, Duration::from_secs(10)).await;

    // The upstream stops: 503 with the reason; it comes back: 200.
    upstream.term();
    let why = ready_becomes(s.admin, 503, Duration::from_secs(10)).await;
    assert!(why.starts_with("not ready: "), "{why}");
    assert!(why.contains(&format!("127.0.0.1:{port}")), "{why}");
    assert_eq!(
        get(s.admin, "/healthz", None).await.status,
        200,
        "alive all along"
    );
    let _upstream = demo_server(port);
    wait_port(port).await;
    ready_becomes(s.admin, 200, Duration::from_secs(10)).await;

    // Shutdown: a slow call in flight keeps the process draining; readiness says 503 at once
    // while health still answers.
    let listen = s.listen;
    let slow = tokio::spawn(async move {
        post_json(
            listen,
            "/jsonrpc",
            r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":1500},"id":1}"#,
        )
        .await
    });
    // In flight when the signal comes: waited for on the gauge, not for a while.
    let t0 = std::time::Instant::now();
    while metric(
        &get(s.admin, "/metrics", None).await.text(),
        "rpctap_inflight_calls",
    ) < 1.0
    {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the call never went out"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    signal(s.proc.id(), "TERM");
    let why = ready_becomes(s.admin, 503, Duration::from_secs(1)).await;
    assert_eq!(why, "not ready: shutting down\n");
    assert_eq!(get(s.admin, "/healthz", None).await.status, 200);
    let reply = slow.await.unwrap();
    assert_eq!(
        reply.json()["result"],
        serde_json::json!({"slept_ms": 1500})
    );
    assert_eq!(s.proc.0.wait().unwrap().code(), Some(0));
}

/// The value of one sample line of a Prometheus exposition.
fn sample(text: &str, name_and_labels: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(name_and_labels)?.trim().parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_each_outcome_and_pass_promtool_and_a_prometheus_server_scrapes_them() {
    let (up, _stop) = start_demo().await;
    let s = start_sidecar(
        &format!("http://{up}"),
        &[
            "--limit",
            "add=3/m",
            "--upstream-timeout",
            "0.3",
            "--metrics-max-labels",
            "6",
        ],
    );
    let call = |m: &str, id: u32| {
        format!(r#"{{"jsonrpc":"2.0","method":"{m}","params":[1,2],"id":{id}}}"#)
    };
    for id in 0..4 {
        post_json(s.listen, "/jsonrpc", &call("add", id)).await; // 3 results, 1 refused
    }
    post_json(s.listen, "/jsonrpc", &call("nope", 9)).await; // error
    post_json(s.listen, "/nowhere", &call("echo", 10)).await; // HTTP 404: rejected
    post_json(
        s.listen,
        "/jsonrpc",
        r#"{"jsonrpc":"2.0","method":"sleep","params":{"ms":2000},"id":11}"#,
    )
    .await; // rpctap's 504: missing
            // Random method names beyond the cap count under `other`.
    for i in 0..20 {
        post_json(s.listen, "/jsonrpc", &call(&format!("random-{i}"), 100 + i)).await;
    }
    let m = get(s.admin, "/metrics", None).await;
    assert_eq!(m.status, 200);
    assert!(m.headers["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/plain; version=0.0.4"));
    let text = m.text();
    let want = [
        (
            r#"rpctap_calls_total{method="add",target="",outcome="result"}"#,
            3.0,
        ),
        (
            r#"rpctap_calls_total{method="add",target="",outcome="refused"}"#,
            1.0,
        ),
        (
            r#"rpctap_calls_total{method="nope",target="",outcome="error"}"#,
            1.0,
        ),
        (
            r#"rpctap_calls_total{method="echo",target="",outcome="rejected"}"#,
            1.0,
        ),
        (
            r#"rpctap_calls_total{method="sleep",target="",outcome="missing"}"#,
            1.0,
        ),
        (r#"rpctap_refusals_total{rule="add=3/m"}"#, 1.0),
        (r#"rpctap_http_requests_total{status="404"}"#, 1.0),
        (r#"rpctap_http_requests_total{status="200"}"#, 25.0), // refusals answer 200 by default
        (r#"rpctap_http_requests_total{status="504"}"#, 1.0),
        (r#"rpctap_call_duration_seconds_count{method="add"}"#, 3.0),
        (r#"rpctap_build_info{version=""#, 1.0),
    ];
    for (k, v) in want {
        let got = if k.ends_with('"') {
            text.lines()
                .find(|l| l.starts_with(k))
                .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        } else {
            sample(&text, k)
        };
        assert_eq!(got, Some(v), "{k}\n{text}");
    }
    // 6 distinct methods at most (add, nope, echo, sleep, then two random ones); the rest:
    let other = sample(
        &text,
        r#"rpctap_calls_total{method="other",target="",outcome="error"}"#,
    )
    .unwrap();
    assert_eq!(other, 18.0, "{text}");
    let methods: std::collections::HashSet<&str> = text
        .lines()
        .filter(|l| l.starts_with("rpctap_calls_total{"))
        .filter_map(|l| l.split("method=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(methods.len(), 7, "{methods:?}"); // 6 + other
    for g in [
        "rpctap_pending_calls 0",
        "rpctap_inflight_calls 0",
        "rpctap_recorder_lost_total 0",
        "rpctap_feed_dropped_total 0",
    ] {
        assert!(text.lines().any(|l| l == g), "{g}\n{text}");
    }
    assert!(sample(&text, "process_resident_memory_bytes").unwrap() > 1e6);
    assert!(sample(&text, "process_open_fds").unwrap() > 3.0);

    // promtool (Prometheus's own linter) accepts the exposition.
    let mut lint = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool is installed by scripts/peers.sh (Debian's prometheus)");
    std::io::Write::write_all(&mut lint.stdin.take().unwrap(), text.as_bytes()).unwrap();
    let out = lint.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // A real Prometheus scrapes it; its query API returns the counts.
    let tmp = Scratch::new("admin-prometheus");
    let port = free_port();
    let cfg = tmp.join("prometheus.yml");
    std::fs::write(
        &cfg,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: rpctap\n    static_configs:\n      - targets: ['{}']\n",
            s.admin
        ),
    )
    .unwrap();
    let _prom = Proc::spawn(
        Command::new("prometheus")
            .arg(format!("--config.file={}", cfg.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                tmp.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null()),
    );
    let prom = SocketAddr::from(([127, 0, 0, 1], port));
    wait_listening(prom).await;
    let query = |q: &str| {
        let q: String = q
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => (b as char).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("/api/v1/query?query={q}")
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let expect = [
        (r#"rpctap_calls_total{method="add",outcome="result"}"#, "3"),
        (r#"rpctap_calls_total{method="add",outcome="refused"}"#, "1"),
        (
            r#"rpctap_calls_total{method="sleep",outcome="missing"}"#,
            "1",
        ),
        (r#"sum(rpctap_calls_total)"#, "27"),
    ];
    for (q, v) in expect {
        loop {
            let r = get(prom, &query(q), None).await;
            // 503 while its storage starts.
            let j: serde_json::Value = serde_json::from_slice(&r.body).unwrap_or_default();
            if let Some(got) = j["data"]["result"][0]["value"][1].as_str() {
                assert_eq!(got, v, "{q}: {j}");
                break;
            }
            assert!(Instant::now() < deadline, "Prometheus never had {q}: {j}");
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_feed_gives_a_late_client_the_recent_events_then_the_live_ones_and_calls_lists_them() {
    let (up, _stop) = start_demo().await;
    let s = start_sidecar(&format!("http://{up}"), &[]);
    let call =
        |id: u32| format!(r#"{{"jsonrpc":"2.0","method":"add","params":[{id},1],"id":{id}}}"#);
    for id in 1..=3 {
        post_json(s.listen, "/jsonrpc", &call(id)).await;
    }
    // Late: the backlog first.
    let resp = client()
        .request(
            http::Request::get(format!("http://{}/events", s.admin))
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let mut body = resp.into_body();
    let mut lines: Vec<serde_json::Value> = Vec::new();
    let mut partial = Vec::new();
    let mut sent_live = false;
    let deadline = Instant::now() + Duration::from_secs(20);
    let calls_of = |lines: &[serde_json::Value]| {
        lines
            .iter()
            .filter(|l| l["event"] == "call")
            .map(|l| l["id"].as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    while calls_of(&lines) != vec![1, 2, 3, 4] {
        assert!(Instant::now() < deadline, "{lines:?}");
        let f = tokio::time::timeout(Duration::from_secs(10), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        partial.extend_from_slice(&f.into_data().unwrap());
        while let Some(i) = partial.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = partial.drain(..=i).collect();
            lines.push(serde_json::from_slice(&line).unwrap());
        }
        if calls_of(&lines) == vec![1, 2, 3] && !sent_live {
            sent_live = true;
            post_json(s.listen, "/jsonrpc", &call(4)).await; // live
        }
    }
    assert_eq!(lines[0]["rpctap_feed"], 1);
    assert_eq!(lines[0]["mode"], "proxy");
    assert_eq!(lines[0]["listen"], s.listen.to_string());
    // Each line but the feed's own markers is a recording line: the recording's reader reads it.
    for l in lines[1..].iter().filter(|l| l["event"] != "feed") {
        rpctap::record::reader::parse_line(&l.to_string()).unwrap();
    }
    assert!(lines.iter().any(|l| l["event"] == "message"
        && l["direction"] == "s2c"
        && l["message"]["result"] == 5));

    let recent = get(s.admin, "/calls?limit=2", None).await.json();
    let ids: Vec<u64> = recent
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["id"].as_u64().unwrap())
        .collect();
    assert_eq!(ids, vec![3, 4], "the most recent, newest last");
    for bad in ["abc", "0", ""] {
        let r = get(s.admin, &format!("/calls?limit={bad}"), None).await;
        assert_eq!(r.status, 400, "limit={bad}");
        assert!(r.text().contains("limit="), "{}", r.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_traffic_endpoints_need_a_token_off_loopback() {
    let (up, _stop) = start_demo().await;
    // Refused at start: no token on a non-loopback admin address.
    let out = rpctap()
        .args([
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            &format!("http://{up}"),
            "--admin",
            "0.0.0.0:0",
            "--no-tui",
        ])
        .env_remove("RPCTAP_ADMIN_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--admin-token"), "{err}");

    // With the token (from the environment, as a Secret would give it).
    let mut cmd = rpctap();
    cmd.args([
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        &format!("http://{up}"),
        "--admin",
        "0.0.0.0:0",
        "--no-tui",
        "--log",
        "off",
    ])
    .env("RPCTAP_ADMIN_TOKEN", "s3cret-token")
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut p = Proc::spawn(&mut cmd);
    let mut err = std::io::BufReader::new(p.0.stderr.take().unwrap());
    let mut line = String::new();
    let admin = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0);
        if let Some(a) = addr_after(&line, "admin on http://") {
            break SocketAddr::from(([127, 0, 0, 1], a.port()));
        }
    };
    assert!(!line.contains("s3cret"), "the token is never printed");
    for open in ["/healthz", "/metrics"] {
        assert_eq!(get(admin, open, None).await.status, 200, "{open} is open");
    }
    for path in ["/events", "/calls"] {
        let r = get(admin, path, None).await;
        assert_eq!(r.status, 401, "{path} without the token");
        assert_eq!(r.headers["www-authenticate"], "Bearer");
        assert_eq!(get(admin, path, Some("wrong")).await.status, 401);
        assert_eq!(get(admin, path, Some("s3cret-token-")).await.status, 401);
    }
    assert_eq!(get(admin, "/calls", Some("s3cret-token")).await.status, 200);
    // `attach` without the token, or with the wrong one: exit 2 saying why, no retry loop.
    for token in [None, Some("wrong")] {
        let mut a = rpctap();
        a.args(["attach", &admin.to_string()])
            .env_remove("RPCTAP_ADMIN_TOKEN")
            .stdin(Stdio::null());
        if let Some(t) = token {
            a.args(["--token", t]);
        }
        let started = std::time::Instant::now();
        let out = a.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{token:?}: {err}");
        assert!(err.contains("token"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // /events streams: read its head only.
    let resp = client()
        .request(
            http::Request::get(format!("http://{admin}/events"))
                .header("authorization", "Bearer s3cret-token")
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readiness_by_get_path_counts_answers_below_500_and_the_feed_is_redacted() {
    // An upstream whose health path fails while `/sick` is set.
    let sick = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = sick.clone();
    let (up, _stop) = start_upstream(move |parts, _body| {
        let sick = s2.load(std::sync::atomic::Ordering::Relaxed);
        Box::pin(async move {
            let status = match parts.uri.path() {
                "/health" if sick => 503,
                "/health" => 204,
                _ => 200,
            };
            let mut r = http::Response::new(boxed(
                r#"{"jsonrpc":"2.0","id":1,"result":{"token":"abc"}}"#,
            ));
            *r.status_mut() = http::StatusCode::from_u16(status).unwrap();
            r.headers_mut()
                .insert("content-type", "application/json".parse().unwrap());
            r
        })
    })
    .await;
    let s = start_sidecar(
        &format!("http://{up}"),
        &[
            "--ready-path",
            "/health",
            "--ready-interval",
            "0.1",
            "--redact-path",
            "params.password",
            "--redact-path",
            "result.token",
        ],
    );
    ready_becomes(s.admin, 200, Duration::from_secs(10)).await;
    sick.store(true, std::sync::atomic::Ordering::Relaxed);
    let why = ready_becomes(s.admin, 503, Duration::from_secs(10)).await;
    assert!(why.contains("/health answered 503"), "{why}");
    sick.store(false, std::sync::atomic::Ordering::Relaxed);
    ready_becomes(s.admin, 200, Duration::from_secs(10)).await;

    // The feed carries what the recording would: secrets redacted.
    let resp = client()
        .request(
            http::Request::get(format!("http://{}/events", s.admin))
                .body(http_body_util::Full::new(bytes::Bytes::new()))
                .unwrap(),
        )
        .await
        .unwrap();
    let mut body = resp.into_body();
    post_json(
        s.listen,
        "/rpc",
        r#"{"jsonrpc":"2.0","id":1,"method":"login","params":{"user":"u","password":"hunter2"}}"#,
    )
    .await;
    let mut text = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !text.contains("\"event\":\"call\"") {
        assert!(Instant::now() < deadline, "{text}");
        let f = tokio::time::timeout(Duration::from_secs(5), body.frame())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&f.into_data().unwrap()));
    }
    assert!(text.contains("\"method\":\"login\""), "{text}");
    assert!(
        !text.contains("hunter2") && !text.contains("\"abc\""),
        "{text}"
    );
    assert!(text.contains("REDACTED"), "{text}");
}

#[test]
fn the_demo_turns_the_admin_listener_on_and_prints_it() {
    let mut p = Proc::spawn(
        rpctap()
            .args([
                "demo",
                "--no-tui",
                "--listen",
                "127.0.0.1:0",
                "--log",
                "off",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped()),
    );
    let mut err = std::io::BufReader::new(p.0.stderr.take().unwrap());
    let mut line = String::new();
    let admin = loop {
        line.clear();
        assert!(err.read_line(&mut line).unwrap() > 0, "no admin banner");
        if let Some(a) = addr_after(&line, "admin on http://") {
            break a;
        }
    };
    assert!(admin.ip().is_loopback());
    assert!(line.contains(&format!("rpctap attach {admin}")), "{line}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let r = rt.block_on(get(admin, "/healthz", None));
    assert_eq!(r.status, 200);
}

/// One keep-alive HTTP/1.1 call on `s`; the connection stays open afterwards.
async fn call_on(s: &mut tokio::net::TcpStream, body: &str) -> String {
    use tokio::io::AsyncWriteExt;
    let req = format!(
        "POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    read_response(s).await.expect("closed").1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_connections_beyond_the_idle_budget_hold_no_upstream_connection() {
    let (up, _stop) = start_demo().await;
    let s = start_sidecar(&format!("http://{up}"), &["--upstream-idle-max", "2"]);
    let mut clients = Vec::new();
    for i in 0..5 {
        let mut c = tokio::net::TcpStream::connect(s.listen).await.unwrap();
        let r = call_on(
            &mut c,
            &format!(r#"{{"jsonrpc":"2.0","method":"add","params":[{i},1],"id":{i}}}"#),
        )
        .await;
        assert!(r.contains(&format!("\"result\":{}", i + 1)), "{r}");
        clients.push(c); // kept open, idle
    }
    let gauge = |text: &str, side: &str| {
        sample(text, &format!("rpctap_connections{{side=\"{side}\"}}")).unwrap()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = get(s.admin, "/metrics", None).await.text();
        let (client, upstream) = (gauge(&text, "client"), gauge(&text, "upstream"));
        if client == 5.0 && upstream == 2.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "5 idle clients should hold 2 upstream connections: client {client}, upstream {upstream}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // They all still work: a client without a kept connection gets a new one for its call.
    for (i, c) in clients.iter_mut().enumerate() {
        let r = call_on(
            c,
            &format!(r#"{{"jsonrpc":"2.0","method":"add","params":[{i},2],"id":{i}}}"#),
        )
        .await;
        assert!(r.contains(&format!("\"result\":{}", i + 2)), "{r}");
    }
}

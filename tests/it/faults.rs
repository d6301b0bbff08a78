//! Fault injection through the real binary. Upstream side: a scripted upstream misbehaves in one
//! way per request path, one call goes to each, and for every case (a) the client gets the
//! documented answer, (b) the call ends with exactly one outcome in the recording, (c) nothing
//! leaks — no pending call, no client connection, the proxy's file descriptors back to where
//! they were. (An upstream that refuses connections, and a reset mid-reply on a kept
//! connection, are in tests/proxy.rs.) Client side: clients that go away mid-request, mid-batch
//! (split by a rate limit), mid-SSE reply, and after pipelining 100 calls — every call that
//! reached the inspector ends exactly once, and nothing leaks. rpctap's own faults: the
//! recording's disk fills, the recording is moved or deleted underneath it (a `kill -9` under
//! load is in tests/record.rs).

use crate::common::*;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the fault upstream does with the request it read, by path.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// Reads the request and never answers (the proxy's upstream timeout answers).
    Silent,
    /// Sends a response head, then nothing, then closes after 1.5 s.
    HeadThenStall,
    /// A JSON reply cut short by a reset (Content-Length 100, 20 bytes sent).
    ResetMidJson,
    /// An SSE reply reset between two events (the call's reply never came).
    ResetBetweenEvents,
    /// An SSE reply reset inside the event that carried the call's reply.
    ResetInsideEvent,
    /// A chunked reply closed inside a chunk.
    PartialChunk,
    /// Content-Length says 10, the reply is longer.
    ShortLength,
    /// Content-Length says 100, 36 bytes come, then the close.
    LongLength,
    /// A chunk size that is not hexadecimal.
    BadChunked,
    /// Answers before reading the request body, then closes.
    AnswerBeforeBody,
    /// `100 Continue`, then nothing.
    ContinueThenNothing,
    /// `101 Switching Protocols` to a request that asked for no upgrade.
    UnaskedUpgrade,
}

const CASES: &[(Fault, &str, &str)] = &[
    // The client's documented answer — the status line it gets (the proxy's own 504/502, or the
    // upstream's head passed on, whose body then ends early) — and the call's one outcome.
    (Fault::Silent, "HTTP/1.1 504", "missing"),
    (Fault::HeadThenStall, "HTTP/1.1 200", "missing"),
    (Fault::ResetMidJson, "HTTP/1.1 200", "missing"),
    (Fault::ResetBetweenEvents, "HTTP/1.1 200", "missing"),
    (Fault::ResetInsideEvent, "HTTP/1.1 200", "missing"),
    (Fault::PartialChunk, "HTTP/1.1 200", "missing"),
    (Fault::ShortLength, "HTTP/1.1 200", "missing"),
    (Fault::LongLength, "HTTP/1.1 200", "missing"),
    // hyper writes a response head with the first bytes of its body: a body that fails before
    // any arrive leaves the client a closed connection and nothing else (rpctap does not make
    // up a reply once the upstream's head is passed on).
    (Fault::BadChunked, "", "missing"),
    (Fault::AnswerBeforeBody, "HTTP/1.1 200", "result"),
    (Fault::ContinueThenNothing, "HTTP/1.1 504", "missing"),
    (Fault::UnaskedUpgrade, "HTTP/1.1 502", "missing"),
];

/// Reads a request head (and, unless `skip_body`, its Content-Length body) from `s`.
async fn read_request(s: &mut TcpStream, skip_body: bool) -> Option<String> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&buf).into_owned();
        if let Some((head, rest)) = text.split_once("\r\n\r\n") {
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if skip_body || rest.len() >= len {
                return Some(head.to_string());
            }
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Closes `s` with a reset (SO_LINGER 0) instead of a FIN.
fn reset(s: TcpStream) {
    let _ = s.set_zero_linger();
    drop(s);
}

async fn misbehave(mut s: TcpStream) {
    let Some(head) = read_request(&mut s, false).await else {
        return;
    };
    let path = head.split_whitespace().nth(1).unwrap_or("").to_string();
    let Some(fault) = path
        .strip_prefix("/case/")
        .and_then(|n| n.parse::<usize>().ok())
        .and_then(|n| CASES.get(n))
        .map(|c| c.0)
    else {
        return;
    };
    let id = path.trim_start_matches("/case/").to_string();
    let reply = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"ok-{id}"}}"#);
    let sse_head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    let chunk = |text: &str| format!("{:x}\r\n{text}\r\n", text.len());
    match fault {
        Fault::Silent => tokio::time::sleep(Duration::from_secs(5)).await,
        Fault::HeadThenStall => {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n")
                .await;
            tokio::time::sleep(Duration::from_millis(1500)).await;
        }
        Fault::ResetMidJson => {
            let _ = s
                .write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{}", &reply[..20])
                        .as_bytes(),
                )
                .await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            reset(s);
        }
        Fault::ResetBetweenEvents => {
            let ev = chunk("data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n");
            let _ = s.write_all(format!("{sse_head}{ev}").as_bytes()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            reset(s);
        }
        Fault::ResetInsideEvent => {
            let ev = chunk(&format!("data: {}", &reply[..25]));
            let _ = s.write_all(format!("{sse_head}{ev}").as_bytes()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            reset(s);
        }
        Fault::PartialChunk => {
            let _ = s
                .write_all(
                    format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n40\r\n{}", &reply[..10])
                        .as_bytes(),
                )
                .await;
        }
        Fault::ShortLength => {
            let _ = s
                .write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 10\r\n\r\n{reply}").as_bytes())
                .await;
        }
        Fault::LongLength => {
            let _ = s
                .write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{reply}").as_bytes())
                .await;
        }
        Fault::BadChunked => {
            let _ = s
                .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nZZ\r\nnot a chunk\r\n")
                .await;
        }
        Fault::AnswerBeforeBody => unreachable!("answered in `serve_faults`"),
        Fault::ContinueThenNothing => {
            let _ = s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await;
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        Fault::UnaskedUpgrade => {
            let _ = s
                .write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x-fault\r\nConnection: upgrade\r\n\r\n")
                .await;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    }
}

/// The fault upstream: each connection gets its path's fault (one request per connection).
async fn serve_faults(l: TcpListener) {
    loop {
        let Ok((mut s, _)) = l.accept().await else {
            return;
        };
        tokio::spawn(async move {
            // AnswerBeforeBody needs the head only: peek at it first.
            let mut peek = [0u8; 64];
            let n = s.peek(&mut peek).await.unwrap_or(0);
            let line = String::from_utf8_lossy(&peek[..n]).into_owned();
            let before_body = CASES
                .iter()
                .position(|c| matches!(c.0, Fault::AnswerBeforeBody))
                .map(|i| format!("/case/{i} "));
            if before_body.is_some_and(|p| line.contains(&p)) {
                let _ = read_request(&mut s, true).await;
                let id = line
                    .split("/case/")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .unwrap_or("0")
                    .to_string();
                let reply = format!(r#"{{"jsonrpc":"2.0","id":{id},"result":"early"}}"#);
                let _ = s
                    .write_all(format!("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{reply}", reply.len()).as_bytes())
                    .await;
                return;
            }
            misbehave(s).await;
        });
    }
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Sends one call to `/case/{i}` on a fresh connection and returns what came back, up to the
/// close (or 6 s).
async fn call_case(addr: SocketAddr, i: usize) -> String {
    let body = format!(r#"{{"jsonrpc":"2.0","method":"fault/{i}","id":{i}}}"#);
    let mut s = TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST /case/{i} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut got = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(6), s.read_to_end(&mut got)).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// `rpctap proxy` (the real binary) in front of `upstream`, recording to a scratch file, with its
/// admin listener; `extra` flags added.
struct Expected {
    proc: Proc,
    listen: SocketAddr,
    admin: SocketAddr,
    file: std::path::PathBuf,
    /// The process's open descriptors once it is up, before any traffic.
    baseline: usize,
    _tmp: Scratch,
}

fn recorded_proxy(upstream: SocketAddr, name: &str, extra: &[&str]) -> Expected {
    let tmp = Scratch::new(name);
    let file = tmp.join("faults.jsonl");
    let mut cmd = proxy_cmd(&format!("http://{upstream}"), true);
    cmd.args(extra).arg("--record").arg(&file);
    let (proc, addrs, _rest) =
        spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    let baseline = fds(proc.id());
    Expected {
        proc,
        listen: addrs[0],
        admin: addrs[1],
        file,
        baseline,
        _tmp: tmp,
    }
}

impl Expected {
    /// Waits (up to 10 s) until nothing is left: no pending call, no client connection, no more
    /// descriptors than at the start; then stops the proxy, which flushes the recording.
    async fn assert_nothing_left_and_stop(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let text = http_text(self.admin, "/metrics").await;
            let pending = metric(&text, "rpctap_pending_calls");
            let clients = metric(&text, "rpctap_connections{side=\"client\"}");
            let now = fds(self.proc.id());
            if pending == 0.0 && clients == 0.0 && now <= self.baseline {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "left over: {pending} pending calls, {clients} client connections, fds {now} (baseline {})",
                self.baseline
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(self.proc.term().success());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_upstream_fault_gets_its_answer_one_outcome_and_leaks_nothing() {
    let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up_addr = up.local_addr().unwrap();
    tokio::spawn(serve_faults(up));
    let mut p = recorded_proxy(
        up_addr,
        "faults",
        &["--upstream-timeout", "1", "--call-timeout", "1"],
    );
    let listen = p.listen;
    let answers =
        futures_util::future::join_all((0..CASES.len()).map(|i| call_case(listen, i))).await;
    for (i, ((fault, want, _), got)) in CASES.iter().zip(&answers).enumerate() {
        if want.is_empty() {
            assert!(
                got.is_empty(),
                "case {i} {fault:?}: want a bare close, got {got:?}"
            );
        }
        assert!(
            got.starts_with(want),
            "case {i} {fault:?}: want {want}, got {got:?}"
        );
        if want.ends_with("504") || want.ends_with("502") {
            assert!(
                got.contains(&format!("\"id\":{i}")),
                "case {i}: a JSON-RPC error with the call's id: {got}"
            );
        }
    }
    // (c) Nothing left: no pending call, no client connection, the descriptors back.
    p.assert_nothing_left_and_stop().await;
    // (b) Exactly one outcome per call.
    let text = std::fs::read_to_string(&p.file).unwrap();
    let mut outcomes = vec![Vec::new(); CASES.len()];
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["event"] == "call" {
            let id = v["id"].as_u64().expect("numeric id") as usize;
            outcomes[id].push(v["outcome"].as_str().unwrap_or("?").to_string());
        }
    }
    for (i, o) in outcomes.iter().enumerate() {
        let (fault, _, want) = CASES[i];
        assert_eq!(
            o,
            &[want],
            "case {i} {fault:?}: exactly one outcome, {want}"
        );
    }
}

/// The recorded `call` events' outcomes, by id text.
fn outcomes_by_id(file: &std::path::Path) -> std::collections::BTreeMap<String, Vec<String>> {
    let mut out = std::collections::BTreeMap::<String, Vec<String>>::new();
    for line in std::fs::read_to_string(file).unwrap().lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        if v["event"] == "call" {
            out.entry(v["id"].to_string())
                .or_default()
                .push(v["outcome"].as_str().unwrap_or("?").to_string());
        }
    }
    out
}

/// Writes `bytes` on a new connection, reads for `wait` (none: not at all), and closes.
async fn hit_and_run(addr: SocketAddr, bytes: &[u8], wait: Duration) -> Vec<u8> {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut got = vec![0u8; 64 * 1024];
    let n = match tokio::time::timeout(wait, s.read(&mut got)).await {
        Ok(Ok(n)) => n,
        _ => 0,
    };
    got.truncate(n);
    got
}

fn post(path: &str, body: &str, extra: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_that_go_away_leave_every_call_one_outcome_and_nothing_behind() {
    let (up, _up) = start_demo().await;
    let mut p = recorded_proxy(up, "client-faults", &["--limit", "add=1/min"]);
    let listen = p.listen;
    // Mid request body: the head promises 200 bytes, 20 come, then the close.
    let head = "POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{\"jsonrpc\":\"2.0\",";
    hit_and_run(listen, head.as_bytes(), Duration::ZERO).await;
    // Mid batch split by a rate limit: "b2" is refused (add: 1 a minute), "b1" and "b3" go on;
    // the client leaves while the upstream sleeps on "b3".
    let batch = r#"[{"jsonrpc":"2.0","method":"add","params":[1,1],"id":"b1"},{"jsonrpc":"2.0","method":"add","params":[1,2],"id":"b2"},{"jsonrpc":"2.0","method":"sleep","params":[800],"id":"b3"}]"#;
    hit_and_run(
        listen,
        post("/jsonrpc", batch, "").as_bytes(),
        Duration::from_millis(100),
    )
    .await;
    // Mid SSE reply: a slow tool streams progress; the client reads the start and leaves.
    let sid = mcp_session(listen).await;
    let slow = r#"{"jsonrpc":"2.0","id":"s1","method":"tools/call","params":{"name":"slow","arguments":{"steps":5,"delay_ms":200},"_meta":{"progressToken":"t1"}}}"#;
    let extra = format!(
        "Accept: application/json, text/event-stream\r\nMcp-Session-Id: {sid}\r\nMCP-Protocol-Version: 2025-06-18\r\n"
    );
    let got = hit_and_run(
        listen,
        post("/mcp", slow, &extra).as_bytes(),
        Duration::from_millis(500),
    )
    .await;
    assert!(
        String::from_utf8_lossy(&got).starts_with("HTTP/1.1 200"),
        "the SSE reply had begun: {}",
        String::from_utf8_lossy(&got)
    );
    // 100 pipelined calls, then the close at once.
    let many: String = (0..100)
        .map(|i| {
            post(
                "/jsonrpc",
                &format!(r#"{{"jsonrpc":"2.0","method":"sleep","params":[20],"id":"p{i}"}}"#),
                "",
            )
        })
        .collect();
    hit_and_run(listen, many.as_bytes(), Duration::ZERO).await;
    // Nothing left behind once the sleeps are over.
    p.assert_nothing_left_and_stop().await;
    let outcomes = outcomes_by_id(&p.file);
    for (id, o) in &outcomes {
        assert_eq!(o.len(), 1, "call {id}: exactly one outcome, got {o:?}");
    }
    assert_eq!(outcomes["\"b2\""], ["refused"], "{outcomes:?}");
    for id in ["\"b1\"", "\"b3\"", "\"s1\""] {
        assert!(
            outcomes.contains_key(id),
            "call {id} was seen and ended: {outcomes:?}"
        );
    }
    // The calls the client left before their replies are its doing: `abandoned`, not the
    // server's `missing`.
    for id in ["\"b3\"", "\"s1\""] {
        assert_eq!(outcomes[id], ["abandoned"], "{id}: {outcomes:?}");
    }
    assert!(
        outcomes.keys().any(|k| k.starts_with("\"p")),
        "some pipelined calls reached the proxy: {outcomes:?}"
    );
}

/// Sends `n` calls to the demo's `/jsonrpc` through `proxy`, eight at a time on kept
/// connections; returns how many got their right result.
async fn demo_calls(proxy: SocketAddr, n: usize) -> usize {
    let next = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let ok = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (next, ok) = (next.clone(), ok.clone());
        tasks.push(tokio::spawn(async move {
            let c = client();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= n {
                    break;
                }
                let body = format!(
                    r#"{{"jsonrpc":"2.0","method":"subtract","params":[{},2],"id":{i}}}"#,
                    i + 2
                );
                let req = http::Request::post(format!("http://{proxy}/jsonrpc"))
                    .header("content-type", "application/json")
                    .body(http_body_util::Full::new(bytes::Bytes::from(body)))
                    .unwrap();
                let Ok(resp) = c.request(req).await else {
                    continue;
                };
                let b = http_body_util::BodyExt::collect(resp.into_body())
                    .await
                    .unwrap()
                    .to_bytes();
                let v: serde_json::Value = serde_json::from_slice(&b).unwrap_or_default();
                if v["result"] == i && v["id"] == i {
                    ok.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    ok.load(std::sync::atomic::Ordering::Relaxed)
}

/// rpctap's own fault: the recording's disk fills (here a file-size limit, as a small
/// filesystem would: writes past it fail with EFBIG). The proxy keeps answering every call,
/// says so once, counts what it could not record, and the file stays readable (its last line at
/// most torn) and checks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_under_the_recording_loses_lines_not_calls() {
    let (demo, _d) = start_demo().await;
    let tmp = Scratch::new("disk-full");
    let file = tmp.join("full.jsonl");
    let inner = proxy_cmd(&format!("http://{demo}"), true);
    // `ulimit -f` (in 512-byte blocks in sh) caps every file the process writes; SIGXFSZ is
    // ignored (as the shell's `trap ''` leaves it through exec), so a write past the cap fails
    // with EFBIG instead of killing the process.
    let mut argv: Vec<String> = vec![inner.get_program().to_string_lossy().into_owned()];
    argv.extend(inner.get_args().map(|a| a.to_string_lossy().into_owned()));
    argv.extend(["--record".into(), file.to_string_lossy().into_owned()]);
    let quoted: Vec<String> = argv.iter().map(|a| format!("'{a}'")).collect();
    let mut cmd = std::process::Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -f 256; trap '' XFSZ; exec {}",
            quoted.join(" ")
        ))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null());
    let (mut proc, addrs, rx) =
        spawn_with_banner(&mut cmd, &["proxy on http://", "admin on http://"]);
    let mut log = Vec::new();
    let n = 1500;
    assert_eq!(
        demo_calls(addrs[0], n).await,
        n,
        "every call answered, right"
    );
    // The recorder counts what it lost once its writes fail (within its flush period).
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = http_text(addrs[1], "/metrics").await;
        if metric(&metrics, "rpctap_recorder_lost_total") > 0.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let lost = metric(&metrics, "rpctap_recorder_lost_total");
    assert!(lost > 0.0, "the lost lines are counted: {lost}");
    assert!(proc.term().success());
    // Every line it wrote, to its stderr's end: said once in the whole run.
    assert_eq!(
        said_in_all(&rx, &mut log, "recording writes fail"),
        1,
        "said once: {log:?}"
    );
    let len = std::fs::metadata(&file).unwrap().len();
    assert!(len <= 256 * 512, "{len}");
    let rec = rpctap::record::reader::read(&file).expect("the file stays readable");
    assert!(
        rec.warnings.len() <= 1,
        "at most the torn line: {:?}",
        rec.warnings
    );
    let answered = rec.calls().count();
    assert!(
        answered > 0 && answered < n,
        "{answered} calls recorded of {n}"
    );
    let c = check_recording(&file);
    assert_eq!(c.exit, Some(0), "{}", c.stdout);
}

/// rpctap's own fault: the recording is moved away (as log rotation does) and then deleted
/// underneath it. Each time, within a second, rpctap starts a new file at the path (its header
/// says `reopened`) and says so; the moved file keeps what was written before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recording_moved_or_deleted_underneath_goes_on_in_a_new_file() {
    let (demo, _d) = start_demo().await;
    let tmp = Scratch::new("moved");
    let file = tmp.join("rec.jsonl");
    let mut cmd = proxy_cmd(&format!("http://{demo}"), false);
    cmd.arg("--record").arg(&file);
    let (mut proc, addrs, rx) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    let mut log = Vec::new();
    let calls_in = |f: &std::path::Path| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .matches("{\"event\":\"call\"")
            .count()
    };
    assert_eq!(demo_calls(addrs[0], 20).await, 20);
    assert!(eventually(Duration::from_secs(3), || calls_in(&file) == 20));
    let moved = tmp.join("rec.jsonl.old");
    std::fs::rename(&file, &moved).unwrap();
    assert!(
        eventually(Duration::from_secs(3), || file.exists()),
        "a new file at the path"
    );
    assert_eq!(demo_calls(addrs[0], 30).await, 30);
    assert!(eventually(Duration::from_secs(3), || calls_in(&file) == 30));
    std::fs::remove_file(&file).unwrap();
    assert!(eventually(Duration::from_secs(3), || file.exists()));
    assert_eq!(demo_calls(addrs[0], 40).await, 40);
    assert!(proc.term().success());
    assert_eq!(
        said_in_all(&rx, &mut log, "deleted or moved away"),
        2,
        "{log:?}"
    );
    let old = rpctap::record::reader::read(&moved).unwrap();
    assert_eq!(
        old.calls().count(),
        20,
        "the moved file keeps the first calls"
    );
    let now = rpctap::record::reader::read(&file).unwrap();
    assert_eq!(now.header["reopened"], true);
    assert_eq!(
        now.calls().count(),
        40,
        "the last calls are in the new file"
    );
    assert!(now.warnings.is_empty(), "{:?}", now.warnings);
}

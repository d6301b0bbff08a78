//! The listener's limits against slow and abusive clients, over real sockets: a half-sent
//! request head is closed after the header timeout (also when it trickles in byte by byte), a
//! connection that sends nothing too; a kept-alive connection is closed after the keep-alive
//! timeout but never while its reply (an SSE stream) is still going; a stalled request body ends
//! with 408; heads over the size or count caps get 431; HTTP/2 advertises its stream limit and
//! the rapid-reset pattern ends the connection; beyond `--max-connections` a new connection gets
//! a 503 with `Retry-After` and a JSON-RPC error per call; 10,000 connections at once are served
//! by the real binary; 1,000 slowloris connections leave a normal client served.

use crate::common::*;
use rpctap::cli::ProxyFlags;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const CALL: &str = r#"{"jsonrpc":"2.0","method":"add","params":[2,3],"id":7}"#;

fn request(body: &str) -> String {
    format!(
        "POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// How long until the peer closes `s` (reading and discarding anything it sends), up to `limit`.
async fn closed_after(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(limit.saturating_sub(start.elapsed()), s.read(&mut chunk)).await
        {
            Ok(Ok(0)) | Ok(Err(_)) => return Some(start.elapsed()),
            Ok(Ok(_)) => continue,
            Err(_) => return None,
        }
    }
}

async fn proxy_with(flags: ProxyFlags) -> (TestProxy, Stop) {
    let (up, stop_up) = start_demo().await;
    (
        start_proxy_flags(&format!("http://{up}"), flags).await,
        stop_up,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_sent_head_is_closed_after_the_header_timeout_even_when_it_trickles() {
    let (p, _up) = proxy_with(ProxyFlags {
        header_timeout: Some(0.6),
        ..Default::default()
    })
    .await;
    let limit = Duration::from_secs(5);
    // Half a head, then nothing.
    let mut half = TcpStream::connect(p.addr).await.unwrap();
    half.write_all(b"POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    // Nothing at all after connecting.
    let mut silent = TcpStream::connect(p.addr).await.unwrap();
    // A whole call first, then the next head one byte every 100 ms: the deadline runs from its
    // first byte and is not pushed back by the trickle.
    let mut drip = TcpStream::connect(p.addr).await.unwrap();
    drip.write_all(request(CALL).as_bytes()).await.unwrap();
    let (head, body) = read_response(&mut drip).await.expect("served");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("\"result\":5"), "{body}");
    let (h, s) = tokio::join!(
        closed_after(&mut half, limit),
        closed_after(&mut silent, limit)
    );
    for (name, t) in [("half head", h), ("silent", s)] {
        let t = t.unwrap_or_else(|| panic!("{name}: still open after {limit:?}"));
        assert!(
            t >= Duration::from_millis(500),
            "{name}: closed early, {t:?}"
        );
    }
    let started = Instant::now();
    let dripper = async {
        for b in b"POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
        {
            if drip.write_all(&[*b]).await.is_err() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(3), dripper).await;
    let waited = started.elapsed();
    let t = closed_after(&mut drip, limit)
        .await
        .expect("the trickling head is closed");
    assert!(
        waited + t < Duration::from_millis(2500),
        "the trickle held the connection for {:?}",
        waited + t
    );
    // The proxy still serves.
    let r = post_json(p.addr, "/jsonrpc", CALL).await;
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_closes_an_idle_connection_but_never_one_whose_sse_reply_is_open() {
    use http_body_util::StreamBody;
    // The reply: one SSE event at once, the second 1.5 s later, then the end.
    let (up, _up) = start_upstream(|_parts, _body| {
        Box::pin(async {
            let events = futures_util::stream::unfold(0u8, |n| async move {
                match n {
                    0 => Some((
                        Ok::<_, std::convert::Infallible>(hyper::body::Frame::data(bytes::Bytes::from(
                            "data: {\"jsonrpc\":\"2.0\",\"id\":1,\"result\":1}\n\n",
                        ))),
                        1,
                    )),
                    1 => {
                        tokio::time::sleep(Duration::from_millis(1500)).await;
                        Some((
                            Ok(hyper::body::Frame::data(bytes::Bytes::from(
                                "data: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\"}\n\n",
                            ))),
                            2,
                        ))
                    }
                    _ => None,
                }
            });
            let body = http_body_util::combinators::UnsyncBoxBody::new(StreamBody::new(events));
            http::Response::builder()
                .header("content-type", "text/event-stream")
                .body(body)
                .unwrap()
        })
    })
    .await;
    let p = start_proxy_flags(
        &format!("http://{up}"),
        ProxyFlags {
            keepalive_timeout: Some(0.4),
            ..Default::default()
        },
    )
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    let call = r#"{"jsonrpc":"2.0","method":"tools/call","params":{"name":"x"},"id":1}"#;
    s.write_all(
        format!(
            "POST /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: application/json, text/event-stream\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{call}",
            call.len()
        )
        .as_bytes(),
    )
    .await
    .unwrap();
    // Read the chunked SSE reply to its end: the silent 1.5 s in the middle is longer than the
    // keep-alive timeout, and the connection must stay up through it.
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    while !got.ends_with(b"0\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut chunk))
            .await
            .expect("reply within 5 s")
            .unwrap();
        assert!(
            n > 0,
            "closed mid-stream after {:?}: {}",
            started.elapsed(),
            String::from_utf8_lossy(&got)
        );
        got.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&got);
    assert!(text.contains("notifications/message"), "{text}");
    assert!(started.elapsed() >= Duration::from_millis(1400));
    // Now idle: closed after the keep-alive timeout (at most 1 + 1/8 of it, plus scheduling).
    let t = closed_after(&mut s, Duration::from_secs(5))
        .await
        .expect("idle connection closed");
    assert!(
        t >= Duration::from_millis(350) && t < Duration::from_millis(1500),
        "{t:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_request_body_ends_with_408_and_a_json_rpc_error() {
    let (p, _up) = proxy_with(ProxyFlags {
        body_timeout: Some(0.5),
        ..Default::default()
    })
    .await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"jsonrpc\":")
        .await
        .unwrap();
    let started = Instant::now();
    let (head, body) = tokio::time::timeout(Duration::from_secs(5), read_response(&mut s))
        .await
        .expect("answered")
        .expect("an answer before the close");
    assert!(started.elapsed() >= Duration::from_millis(450));
    assert!(head.starts_with("HTTP/1.1 408"), "{head}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["id"], serde_json::Value::Null, "{v}");
    assert_eq!(
        v["error"]["code"],
        rpctap::rpc::own::What::BadRequest.code(false)
    );
    assert!(
        v["error"]["message"].as_str().unwrap().contains("stalled"),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heads_over_the_size_or_count_cap_get_431() {
    let (p, _up) = proxy_with(ProxyFlags {
        max_header_bytes: Some(16 * 1024),
        max_headers: Some(20),
        ..Default::default()
    })
    .await;
    let big = format!(
        "GET /jsonrpc HTTP/1.1\r\nHost: localhost\r\nX-Big: {}\r\n\r\n",
        "a".repeat(20 * 1024)
    );
    let many = format!(
        "GET /jsonrpc HTTP/1.1\r\nHost: localhost\r\n{}\r\n",
        (0..30)
            .map(|i| format!("X-H{i}: v\r\n"))
            .collect::<String>()
    );
    for (name, req) in [("size", big), ("count", many)] {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        let _ = s.write_all(req.as_bytes()).await;
        let mut buf = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf)).await;
        let text = String::from_utf8_lossy(&buf);
        assert!(text.starts_with("HTTP/1.1 431"), "{name}: {text}");
    }
    // Within the caps: served.
    let r = send(
        p.addr,
        "POST",
        "/jsonrpc",
        &[
            ("content-type", "application/json"),
            ("x-fine", &"b".repeat(8 * 1024)),
        ],
        CALL,
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_advertises_its_stream_limit_and_ends_a_rapid_reset_connection() {
    let (mut p, _up) = proxy_with(ProxyFlags {
        h2_max_streams: Some(7),
        ..Default::default()
    })
    .await;
    let tcp = TcpStream::connect(p.addr).await.unwrap();
    let (mut h2, conn) = h2::client::handshake(tcp).await.unwrap();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let mut conn = conn;
    // The connection task reports how the connection ended.
    let max = {
        // Let the SETTINGS exchange happen: one real request.
        let req = http::Request::post(format!("http://{}/jsonrpc", p.addr))
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let (resp, mut body) = h2.send_request(req, false).unwrap();
        body.send_data(bytes::Bytes::from(CALL), true).unwrap();
        let resp = tokio::select! {
            r = resp => r.unwrap(),
            _ = &mut conn => panic!("connection ended"),
        };
        assert_eq!(resp.status(), 200);
        conn.max_concurrent_send_streams()
    };
    assert_eq!(max, 7, "the advertised SETTINGS_MAX_CONCURRENT_STREAMS");
    tokio::spawn(async move {
        let _ = done_tx.send(conn.await);
    });
    // The rapid-reset pattern: open streams and cancel each at once, far past the defence's
    // allowance (20 pending resets).
    let mut sent = 0;
    for _ in 0..500 {
        let mut h = match h2.clone().ready().await {
            Ok(h) => h,
            Err(_) => break,
        };
        // A whole call each (so some reach the inspector), reset at once.
        let req = http::Request::post(format!("http://{}/jsonrpc", p.addr))
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        match h.send_request(req, false) {
            Ok((_resp, mut stream)) => {
                let call = format!(
                    r#"{{"jsonrpc":"2.0","method":"sleep","params":[50],"id":{}}}"#,
                    1000 + sent
                );
                let _ = stream.send_data(bytes::Bytes::from(call), true);
                stream.send_reset(h2::Reason::CANCEL);
                sent += 1;
            }
            Err(_) => break,
        }
    }
    let ended = tokio::time::timeout(Duration::from_secs(5), done_rx)
        .await
        .expect("the server ends a rapid-reset connection")
        .unwrap();
    let e = ended.expect_err("ended with an error, not cleanly");
    // The server's GOAWAY(ENHANCE_YOUR_CALM), or — when the client is still writing resets as
    // the server closes — the closed socket itself.
    assert!(
        e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) || e.is_io(),
        "after {sent} reset streams: {e}"
    );
    // Other clients are still served.
    let r = post_json(p.addr, "/jsonrpc", CALL).await;
    assert_eq!(r.status, 200);
    // Every call of a reset stream that reached the inspector ended exactly once, and nothing
    // is left: no pending call, no open client connection.
    for _ in 0..100 {
        if p.inspector.pending_calls() == 0 && p.listener.open.load(Ordering::Relaxed) == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(p.inspector.pending_calls(), 0);
    assert_eq!(p.listener.open.load(Ordering::Relaxed), 0);
    let ev = p.drain().await;
    let mut asked = std::collections::BTreeMap::<String, usize>::new();
    let mut ended = std::collections::BTreeMap::<String, usize>::new();
    for e in &ev {
        match &**e {
            rpctap::events::Event::Message(m) if m.kind == rpctap::rpc::Kind::Request => {
                *asked.entry(m.id.as_ref().unwrap().to_string()).or_default() += 1
            }
            rpctap::events::Event::Call(c) => *ended.entry(c.id.to_string()).or_default() += 1,
            _ => {}
        }
    }
    // (Whether a reset stream's call reached the inspector depends on whether the proxy read
    // its body before the reset: some do, some do not; the two ordinary calls always do.)
    assert!(asked.values().sum::<usize>() >= 2, "{asked:?}");
    assert_eq!(
        asked, ended,
        "each call that reached the inspector ended exactly once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_the_connection_cap_a_new_connection_gets_503_with_retry_after_and_rpc_errors() {
    let (p, _up) = proxy_with(ProxyFlags {
        max_connections: Some(3),
        ..Default::default()
    })
    .await;
    let mut held = Vec::new();
    for _ in 0..3 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(request(CALL).as_bytes()).await.unwrap();
        let (head, _) = read_response(&mut s).await.expect("served");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        held.push(s);
    }
    // A call: one JSON-RPC error with its id.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(request(CALL).as_bytes()).await.unwrap();
    let (head, body) = read_response(&mut s)
        .await
        .expect("a 503, not a bare close");
    let lower = head.to_ascii_lowercase();
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(lower.contains("retry-after: 1"), "{head}");
    assert!(lower.contains("connection: close"), "{head}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["id"], 7, "{v}");
    assert_eq!(
        v["error"]["code"],
        rpctap::rpc::own::What::Overloaded.code(false)
    );
    assert!(
        closed_after(&mut s, Duration::from_secs(3)).await.is_some(),
        "closed after the 503"
    );
    // A batch: an error per call, none for the notification.
    let batch = r#"[{"jsonrpc":"2.0","method":"add","params":[1,1],"id":"a"},{"jsonrpc":"2.0","method":"notify"},{"jsonrpc":"2.0","method":"add","params":[1,2],"id":2}]"#;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(request(batch).as_bytes()).await.unwrap();
    let (head, body) = read_response(&mut s).await.expect("a 503");
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    let ids: Vec<_> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].clone())
        .collect();
    assert_eq!(ids, [serde_json::json!("a"), serde_json::json!(2)]);
    // Not a call: plain text.
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let (head, body) = read_response(&mut s).await.expect("a 503");
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(body.contains("too many connections"), "{body}");
    // The held connections still work, and once one closes a new one is served.
    let (head, _) = {
        held[0].write_all(request(CALL).as_bytes()).await.unwrap();
        read_response(&mut held[0]).await.expect("served")
    };
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    drop(held.pop());
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(request(CALL).as_bytes()).await.unwrap();
        let (head, _) = read_response(&mut s).await.expect("answered");
        if head.starts_with("HTTP/1.1 200") {
            break;
        }
        assert!(Instant::now() < deadline, "the freed slot was never reused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Raises this process's soft open-file limit to its hard limit and returns it.
fn raise_fd_limit() -> u64 {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    if let (Some(cur), Some(max)) = (lim.current, lim.maximum) {
        if cur < max {
            lim.current = Some(max);
            let _ = setrlimit(Resource::Nofile, lim);
        }
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// `rpctap proxy` (the real binary, headless, defaults but `extra`); its stderr lines after the
/// banner go to the returned channel.
fn spawn_proxy(
    upstream: SocketAddr,
    extra: &[&str],
) -> (Proc, SocketAddr, std::sync::mpsc::Receiver<String>) {
    let mut cmd = proxy_cmd(&format!("http://{upstream}"), false);
    cmd.args(extra);
    let (proc, addrs, rest) = spawn_with_banner(&mut cmd, &["proxy on http://"]);
    (proc, addrs[0], rest)
}

/// Ten thousand client connections open at once, each served a call (the binary with its
/// defaults: cap 10,000); the next connection is answered 503 and the notice says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_connections_at_once_are_served_and_the_next_gets_503() {
    let fds = raise_fd_limit();
    // This process holds the client sides (and the in-process upstream's few connections).
    let n: usize = if fds >= 10_300 {
        10_000
    } else {
        (fds as usize).saturating_sub(300)
    };
    eprintln!("open-file limit {fds}: {n} connections");
    let (up, _up) = start_demo().await;
    let cap = n.to_string();
    let extra: Vec<&str> = if n == 10_000 {
        vec![]
    } else {
        vec!["--max-connections", &cap]
    };
    let (_proc, addr, notices) = spawn_proxy(up, &extra);
    // Each connects and makes a call (64 at a time, so the upstream sees a bounded number in
    // flight), then stays open, idle: all of them at once at the end.
    let mut conns = Vec::with_capacity(n);
    let mut served = 0usize;
    while conns.len() < n {
        let group = 64.min(n - conns.len());
        let replies = futures_util::future::join_all((0..group).map(|_| async move {
            let mut s = TcpStream::connect(addr).await.ok()?;
            s.write_all(request(CALL).as_bytes()).await.ok()?;
            let r = read_response(&mut s).await?;
            Some((s, r))
        }))
        .await;
        for r in replies {
            let (s, (head, body)) = r.expect("a reply on every connection");
            assert!(head.starts_with("HTTP/1.1 200"), "{head}");
            assert!(body.contains("\"result\":5"), "{body}");
            served += 1;
            conns.push(s);
        }
    }
    assert_eq!(served, n);
    let mut extra_conn = TcpStream::connect(addr).await.unwrap();
    extra_conn
        .write_all(request(CALL).as_bytes())
        .await
        .unwrap();
    let (head, body) = read_response(&mut extra_conn).await.expect("a 503");
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    assert!(body.contains("too many connections"), "{body}");
    let notice = notices
        .recv_timeout(Duration::from_secs(5))
        .expect("a notice on stderr");
    assert!(notice.contains("connection cap reached"), "{notice}");
    assert!(
        notices.try_recv().is_err(),
        "one notice, not one per connection"
    );
}

/// 1,000 connections trickling request heads (slowloris) while a normal client makes calls:
/// every call is answered, and the slow connections are closed at the header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_slowloris_connections_leave_a_normal_client_served() {
    raise_fd_limit();
    let (p, _up) = proxy_with(ProxyFlags {
        header_timeout: Some(1.5),
        ..Default::default()
    })
    .await;
    let mut slow = Vec::new();
    for _ in 0..1000 {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(b"POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    let trickle = {
        let mut slow = std::mem::take(&mut slow);
        tokio::spawn(async move {
            let mut closed = 0;
            for _ in 0..40 {
                closed = 0;
                for s in slow.iter_mut() {
                    if s.write_all(b"X").await.is_err() {
                        closed += 1;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            closed
        })
    };
    let mut normal = TcpStream::connect(p.addr).await.unwrap();
    let mut worst = Duration::ZERO;
    for _ in 0..100 {
        let t = Instant::now();
        normal.write_all(request(CALL).as_bytes()).await.unwrap();
        let (head, body) = read_response(&mut normal).await.expect("served");
        assert!(head.starts_with("HTTP/1.1 200"), "{head}");
        assert!(body.contains("\"result\":5"));
        worst = worst.max(t.elapsed());
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Functional bound only (the latency ratio is measured in benches/connections.sh).
    assert!(worst < Duration::from_secs(1), "worst call {worst:?}");
    let closed = trickle.await.unwrap();
    assert_eq!(
        closed, 1000,
        "every slowloris connection closed by the header timeout"
    );
}

/// Waits (up to 5 s) until the listener counts `n` parked connections.
async fn wait_parked(p: &TestProxy, n: usize, step: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.listener.parked.load(std::sync::atomic::Ordering::Relaxed) != n {
        assert!(
            Instant::now() < deadline,
            "{step}: parked {} (want {n})",
            p.listener.parked.load(std::sync::atomic::Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An idle kept-alive connection is parked (hyper's connection taken apart, the socket kept):
/// its next request is served on the same connection — also one whose head and body arrive in
/// pieces, and two pipelined in one write; a connection in the middle of a request body, or with
/// a reply still streaming, is never parked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_parked_and_served_again_on_its_next_request() {
    let (p, _up) = proxy_with(ProxyFlags::default()).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(request(CALL).as_bytes()).await.unwrap();
    let (head, _) = read_response(&mut s).await.expect("served");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    wait_parked(&p, 1, "after the first call").await;
    // In pieces: half the head, then the rest with the body.
    let req = request(r#"{"jsonrpc":"2.0","method":"add","params":[4,4],"id":8}"#);
    let (a, b) = req.split_at(20);
    s.write_all(a.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.write_all(b.as_bytes()).await.unwrap();
    let (head, body) = read_response(&mut s).await.expect("served after parking");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("\"result\":8"), "{body}");
    wait_parked(&p, 1, "after the call in pieces").await;
    // Two pipelined in one write: both answered, in order.
    let two = request(r#"{"jsonrpc":"2.0","method":"add","params":[1,1],"id":1}"#)
        + &request(r#"{"jsonrpc":"2.0","method":"add","params":[2,2],"id":2}"#);
    s.write_all(two.as_bytes()).await.unwrap();
    let both = read_responses(&mut s, 2).await.expect("both");
    let (first, second) = (&both[0].1, &both[1].1);
    assert!(
        first.contains("\"id\":1") && first.contains("\"result\":2"),
        "{first}"
    );
    assert!(
        second.contains("\"id\":2") && second.contains("\"result\":4"),
        "{second}"
    );
    wait_parked(&p, 1, "after the pipelined calls").await;
    // A body that pauses longer than the park delay: the exchange is in flight, nothing parks.
    let body = r#"{"jsonrpc":"2.0","method":"add","params":[3,3],"id":3}"#;
    let head = format!(
        "POST /jsonrpc HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).await.unwrap();
    s.write_all(&body.as_bytes()[..10]).await.unwrap();
    wait_parked(&p, 0, "while a body is in progress").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        p.listener.parked.load(std::sync::atomic::Ordering::Relaxed),
        0
    );
    s.write_all(&body.as_bytes()[10..]).await.unwrap();
    let (head, got) = read_response(&mut s).await.expect("served");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(got.contains("\"result\":6"), "{got}");
    wait_parked(&p, 1, "after the paused body").await;
    // The client closes a parked connection: no longer counted.
    drop(s);
    wait_parked(&p, 0, "after the client closed").await;
}

/// A raw upstream on loopback: each `GET`'s socket is handed to the test with the request head
/// it read and the connection's number (0 for the first accepted), and the test writes the reply
/// byte by byte as it likes; a `POST` is answered with a fixed JSON reply, on the same connection
/// for as long as it stays open.
async fn raw_upstream() -> (
    SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<(String, TcpStream)>,
    Arc<std::sync::atomic::AtomicUsize>,
) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::Relaxed);
            let tx = tx.clone();
            tokio::spawn(async move {
                loop {
                    let mut head = Vec::new();
                    let mut byte = [0u8; 1];
                    while !head.ends_with(b"\r\n\r\n") {
                        match s.read(&mut byte).await {
                            Ok(1) => head.push(byte[0]),
                            _ => return,
                        }
                    }
                    let head = String::from_utf8_lossy(&head).into_owned();
                    if head.starts_with("GET") {
                        let _ = tx.send((head, s));
                        return;
                    }
                    let len = content_length(&head);
                    let mut body = vec![0u8; len];
                    if s.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let reply = r#"{"jsonrpc":"2.0","id":7,"result":5}"#;
                    let out = format!("HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{reply}", reply.len());
                    if s.write_all(out.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (addr, rx, accepted)
}

/// One chunk of the chunked coding.
fn chunk(data: &str) -> String {
    format!("{:X}\r\n{data}\r\n", data.len())
}

/// A chunked body's data so far, and whether its last chunk has come (assumes valid framing).
fn dechunk(mut raw: &[u8]) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    loop {
        let Some(eol) = raw.windows(2).position(|w| w == b"\r\n") else {
            return (out, false);
        };
        let size = std::str::from_utf8(&raw[..eol])
            .unwrap()
            .split(';')
            .next()
            .unwrap();
        let size = usize::from_str_radix(size.trim(), 16).unwrap();
        if size == 0 {
            return (out, raw[eol + 2..].starts_with(b"\r\n"));
        }
        let data = &raw[eol + 2..];
        if data.len() < size + 2 {
            out.extend_from_slice(&data[..data.len().min(size)]);
            return (out, false);
        }
        out.extend_from_slice(&data[..size]);
        raw = &data[size + 2..];
    }
}

/// Reads `s` into `raw` until `done(head, body)` holds (5 s at most).
async fn read_until(s: &mut TcpStream, raw: &mut Vec<u8>, done: impl Fn(&str, &[u8]) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            if done(&String::from_utf8_lossy(&raw[..end]), &raw[end + 4..]) {
                return;
            }
        }
        let mut buf = [0u8; 4096];
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => raw.extend_from_slice(&buf[..n]),
            other => panic!(
                "no more bytes ({other:?}); so far: {:?}",
                String::from_utf8_lossy(raw)
            ),
        }
    }
}

/// Waits (up to 5 s) until the listener counts `n` long streams written without hyper.
async fn wait_streaming(p: &TestProxy, n: usize, step: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.listener.streaming.load(Ordering::Relaxed) != n {
        assert!(
            Instant::now() < deadline,
            "{step}: streaming {} (want {n})",
            p.listener.streaming.load(Ordering::Relaxed)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The upstream `u` answers the stream's head and first event; the client `c` gets them
/// (`raw`: what it read), chunked, and the listener counts the stream as written without hyper.
async fn first_event(p: &TestProxy, c: &mut TcpStream, u: &mut TcpStream, raw: &mut Vec<u8>) {
    u.write_all(format!("{SSE_HEAD}{}", chunk(EV1)).as_bytes())
        .await
        .unwrap();
    read_until(c, raw, |_, body| dechunk(body).0 == EV1.as_bytes()).await;
    let head = String::from_utf8_lossy(raw).to_ascii_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("content-type: text/event-stream"), "{head}");
    assert!(head.contains("transfer-encoding: chunked"), "{head}");
    wait_streaming(p, 1, "the stream open").await;
}

const STREAM_GET: &str = "GET /mcp HTTP/1.1\r\nHost: localhost\r\nAccept: text/event-stream\r\nX-First: 1\r\nX-Second: 2\r\n\r\n";
const SSE_HEAD: &str =
    "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n";
const EV1: &str =
    "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/one\"}\n\n";
const EV2: &str =
    "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/two\"}\n\n";

/// A long stream (an MCP GET stream) holds neither of hyper's connections while it is open: the
/// upstream leg is rpctap's own (the request head goes as it came, headers in order), the client
/// leg is written by the listener once hyper has written the head (counted in
/// `streaming`). Events pass unchanged and one by one — one cut across three writes too — and
/// are inspected; when the stream ends the client's connection serves its next request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_holds_no_hyper_connection_passes_unchanged_and_the_connection_serves_on() {
    let (up, mut gets, accepted) = raw_upstream().await;
    let mut p = start_proxy_flags(&format!("http://{up}"), ProxyFlags::default()).await;
    let mut c = TcpStream::connect(p.addr).await.unwrap();
    // A call first: its upstream connection is kept for this client connection (its lane)...
    c.write_all(request(CALL).as_bytes()).await.unwrap();
    let (head, _) = read_response(&mut c).await.expect("served");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert_eq!(accepted.load(Ordering::Relaxed), 1);
    // ...and the stream goes on a connection of its own.
    c.write_all(STREAM_GET.as_bytes()).await.unwrap();
    let (head, mut u) = tokio::time::timeout(Duration::from_secs(5), gets.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(head.starts_with("GET /mcp HTTP/1.1\r\n"), "{head}");
    assert_eq!(
        accepted.load(Ordering::Relaxed),
        2,
        "the stream's own upstream connection"
    );
    assert!(head.contains("accept: text/event-stream\r\n"), "{head}");
    let (a, b) = (
        head.find("x-first: 1").unwrap(),
        head.find("x-second: 2").unwrap(),
    );
    assert!(a < b, "headers in their order: {head}");
    let mut raw = Vec::new();
    first_event(&p, &mut c, &mut u, &mut raw).await;
    // The second event cut across three writes: it comes whole, after the first.
    let two = chunk(EV2);
    for piece in [&two[..3], &two[3..20], &two[20..]] {
        u.write_all(piece.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let both = format!("{EV1}{EV2}");
    read_until(&mut c, &mut raw, |_, body| {
        dechunk(body).0 == both.as_bytes()
    })
    .await;
    u.write_all(b"0\r\n\r\n").await.unwrap();
    read_until(&mut c, &mut raw, |_, body| dechunk(body).1).await;
    wait_streaming(&p, 0, "the stream ended").await;
    // The same connection serves the next request.
    c.write_all(request(CALL).as_bytes()).await.unwrap();
    let (head, body) = read_response(&mut c)
        .await
        .expect("served after the stream");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("\"result\":5"), "{body}");
    // Both events were inspected.
    let mut seen = Vec::new();
    while let Ok(e) = p.events.rx.try_recv() {
        if let rpctap::events::Event::Message(m) = &*e {
            seen.push(format!("{m:?}"));
        }
    }
    for method in ["notifications/one", "notifications/two"] {
        assert!(
            seen.iter().any(|m| m.contains(method)),
            "{method} in {seen:?}"
        );
    }
}

/// A long stream whose client leaves: the listener ends it (the exchange ends, its upstream
/// connection — rpctap's own — is closed) and counts it no more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_stream_whose_client_leaves_closes_its_upstream_connection() {
    let (up, mut gets, _) = raw_upstream().await;
    let p = start_proxy_flags(&format!("http://{up}"), ProxyFlags::default()).await;
    let mut c = TcpStream::connect(p.addr).await.unwrap();
    c.write_all(STREAM_GET.as_bytes()).await.unwrap();
    let (_, mut u) = gets.recv().await.unwrap();
    let mut raw = Vec::new();
    first_event(&p, &mut c, &mut u, &mut raw).await;
    drop(c);
    let mut buf = [0u8; 64];
    let n = tokio::time::timeout(Duration::from_secs(5), u.read(&mut buf))
        .await
        .expect("the upstream connection closed after the client left");
    assert!(matches!(n, Ok(0) | Err(_)), "{n:?}");
    wait_streaming(&p, 0, "the client left").await;
}

/// Whatever framing the upstream gives a stream's reply — a length, none (to the close), chunks
/// with extensions and trailers, an error status — the client gets the same body bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_streams_upstream_framing_is_read_whatever_it_is() {
    let (up, mut gets, _) = raw_upstream().await;
    let p = start_proxy_flags(&format!("http://{up}"), ProxyFlags::default()).await;
    let sse = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n";
    let cases: Vec<(String, &str, bool)> = vec![
        (format!("{sse}content-length: {}\r\n\r\n{EV1}", EV1.len()), EV1, false),
        (format!("{sse}connection: close\r\n\r\n{EV1}{EV2}"), "", true),
        (
            format!("{sse}transfer-encoding: chunked\r\n\r\n{:X};ext=1\r\n{EV1}\r\n0\r\nx-t: 1\r\n\r\n", EV1.len()),
            EV1,
            false,
        ),
        (
            "HTTP/1.1 405 Method Not Allowed\r\ncontent-type: text/plain\r\ncontent-length: 3\r\n\r\nno\n".to_string(),
            "no\n",
            false,
        ),
    ];
    for (reply, want, close_delimited) in cases {
        let mut c = TcpStream::connect(p.addr).await.unwrap();
        c.write_all(STREAM_GET.as_bytes()).await.unwrap();
        let (_, mut u) = gets.recv().await.unwrap();
        u.write_all(reply.as_bytes()).await.unwrap();
        let want = if close_delimited {
            drop(u);
            format!("{EV1}{EV2}")
        } else {
            want.to_string()
        };
        let mut raw = Vec::new();
        read_until(&mut c, &mut raw, |head, body| {
            if head
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked")
            {
                let (data, ended) = dechunk(body);
                ended && data == want.as_bytes()
            } else {
                body == want.as_bytes()
            }
        })
        .await;
    }
}

//! JSON-RPC over WebSocket through rpctap: a real peer (Python `websockets`, with and without
//! permessage-deflate) gets identical results direct and proxied, every message is inspected and
//! correlated, nothing is flagged, and the recording checks to the live codes; a misbehaving
//! server (test code over raw TCP) gets its wrong id, its missing reply and its close, and its
//! fragmented replies — split over TCP writes at every byte, with a ping inside — correlated.

use crate::common::*;
use rpctap::events::{Direction, Event, HttpEvent, Transport};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn record_flags(file: &std::path::Path) -> rpctap::cli::ProxyFlags {
    rpctap::cli::SharedFlags {
        record: Some(file.to_path_buf()),
        ..Default::default()
    }
    .into()
}

/// Events until the WebSocket stream's own end (`http end` with a WebSocket reason).
async fn drain_ws(p: &mut TestProxy) -> Vec<Arc<Event>> {
    let mut out = Vec::new();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(10), p.events.rx.recv()).await
    {
        let end = matches!(&*e, Event::Http(HttpEvent::End { reason, .. }) if reason.contains("WebSocket"));
        out.push(e);
        if end {
            break;
        }
    }
    out
}

fn ws_messages(ev: &[Arc<Event>], dir: Direction) -> usize {
    ev.iter()
        .filter(|e| matches!(&***e, Event::Message(m) if m.transport == Transport::Ws && m.direction == dir))
        .count()
}

/// `rpctap mock FILE` on a free port.
async fn mock_of(file: &std::path::Path) -> (Proc, SocketAddr) {
    let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let p = Proc::spawn(
        rpctap()
            .args([
                "mock",
                file.to_str().unwrap(),
                "--listen",
                &addr.to_string(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    wait_listening(addr).await;
    (p, addr)
}

/// The Python `websockets` peer (tests/interop/ws_peer.py), from the `ws` venv.
fn ws_peer() -> (std::path::PathBuf, std::path::PathBuf) {
    let env = installed("ws", &["websockets==17.4"]);
    (
        env.join("bin/python"),
        root().join("tests/interop/ws_peer.py"),
    )
}

/// The peer's JSON-RPC server on a free port, `mode` `deflate` or `plain`.
async fn ws_peer_server(mode: &str) -> (Proc, SocketAddr) {
    let (py, script) = ws_peer();
    let port = free_port();
    let server = Proc::spawn(
        std::process::Command::new(py)
            .arg(script)
            .args(["server", &port.to_string(), mode])
            .stdout(std::process::Stdio::null()),
    );
    let up: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(up).await;
    (server, up)
}

/// Runs the peer as a client (`role`: client, limited, eth) against `url`; what it printed.
async fn ws_peer_client(role: &str, url: String, mode: &str) -> serde_json::Value {
    let (py, script) = ws_peer();
    let args = [role.to_string(), url, mode.to_string()];
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new(py)
            .arg(script)
            .args(&args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{role} {mode}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_websockets_with_and_without_deflate_identical_inspected_and_checked() {
    let dir = Scratch::new("ws-interop");
    for mode in ["deflate", "plain"] {
        let (_server, up) = ws_peer_server(mode).await;
        let file = dir.join(format!("{mode}.jsonl"));
        let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
        let direct = ws_peer_client("client", format!("ws://{up}/"), mode).await;
        let via = ws_peer_client("client", format!("ws://{}/rpc", p.addr), mode).await;
        assert_eq!(direct, via, "{mode}: the same through rpctap");
        assert_eq!(via["add"]["result"], 5);
        assert_eq!(via["batch"].as_array().unwrap().len(), 2);
        assert_eq!(via["notifications"][2]["params"]["result"]["n"], 2);
        assert_eq!(via["big"], true);
        let ext = if mode == "deflate" {
            serde_json::json!(["PerMessageDeflate"])
        } else {
            serde_json::json!([])
        };
        assert_eq!(via["extensions"], ext, "{mode}");
        let ev = drain_ws(&mut p).await;
        // Every message inspected: add, the batch's three members, subscribe, echo (200 KB),
        // unsubscribe; back: add, two batch replies, subscribe, three notifications, echo,
        // unsubscribe.
        assert_eq!(ws_messages(&ev, Direction::ClientToServer), 7, "{mode}");
        assert_eq!(ws_messages(&ev, Direction::ServerToClient), 9, "{mode}");
        assert!(anomalies(&ev).is_empty(), "{mode}: {:?}", anomalies(&ev));
        let cs = calls(&ev);
        assert_eq!(cs.len(), 6, "{mode}: {cs:?}");
        // The subscription: its call, its three notifications and its unsubscribe carry its id.
        let sub = |m: &str| {
            cs.iter()
                .find(|c| &*c.method == m)
                .and_then(|c| c.target.as_deref().map(str::to_string))
        };
        assert_eq!(sub("subscribe").as_deref(), Some("sub-1"), "{mode}");
        assert_eq!(sub("unsubscribe").as_deref(), Some("sub-1"), "{mode}");
        let attributed = ev
            .iter()
            .filter(|e| matches!(&***e, Event::Message(m) if m.method.as_deref() == Some("subscription") && m.target.as_deref() == Some("sub-1")))
            .count();
        assert_eq!(
            attributed, 3,
            "{mode}: notifications attributed to their subscription"
        );
        assert!(
            cs.iter()
                .all(|c| c.outcome == rpctap::events::Outcome::Result
                    && matches!(c.scope, rpctap::events::Scope::Exchange(_))),
            "{mode}: {cs:?}"
        );
        drop(p.stop);
        p.served.await.unwrap(); // the recording is whole once the proxy has finished
        let c = check_recording(&file);
        assert_eq!(c.exit, Some(0), "{}", c.stdout);
        assert_eq!(c.codes, live_codes(&file));
        assert_eq!(
            c.matched, 6,
            "{mode}: check matched every call: {}",
            c.stdout
        );
        let rec = rpctap::record::reader::read(&file).unwrap();
        assert_eq!(
            rec.messages()
                .filter(|m| m.transport == Transport::Ws)
                .count(),
            16,
            "{mode}: recorded as ws messages (decompressed)"
        );
        // Exported as HAR: the WebSocket's messages as Chrome writes them, batches whole.
        let out = rpctap()
            .args(["export", "--format", "har", file.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let har: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let entry = har["log"]["entries"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["_resourceType"] == "websocket")
            .expect("a websocket entry");
        let frames = entry["_webSocketMessages"].as_array().unwrap();
        let sent = frames.iter().filter(|f| f["type"] == "send").count();
        assert_eq!((sent, frames.len() - sent), (5, 8), "{mode}: {frames:?}");
        let batches = frames
            .iter()
            .filter(|f| f["data"].as_str().is_some_and(|d| d.starts_with('[')))
            .count();
        assert_eq!(
            batches, 2,
            "{mode}: the batch and its reply, whole: {frames:?}"
        );
        // Replayed: a new WebSocket to the server, the six calls as recorded.
        let out = rpctap()
            .args([
                "replay",
                file.to_str().unwrap(),
                "--target",
                &format!("http://{up}"),
            ])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(0), "{mode}: replay: {text}");
        assert!(
            text.lines()
                .last()
                .unwrap_or("")
                .starts_with("6 passed, 0 failed"),
            "{mode}: {text}"
        );
        assert!(!text.contains("warning"), "{mode}: {text}");
        // Served as a mock over WebSocket: the client gets what the server gave it, the
        // subscription's notifications included.
        let (_mock, mock) = mock_of(&file).await;
        let mut mocked = ws_peer_client("client", format!("ws://{mock}/rpc"), mode).await;
        assert_eq!(
            mocked["extensions"],
            serde_json::json!([]),
            "the mock offers no extension"
        );
        mocked["extensions"] = via["extensions"].clone();
        assert_eq!(mocked, via, "{mode}: the mock answers as the server did");
    }
}

/// A frame as a client (masked) or a server sends it.
fn frame(fin: bool, opcode: u8, payload: &[u8], mask: bool) -> Vec<u8> {
    let mut f = vec![(u8::from(fin) << 7) | opcode];
    let m = if mask { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => f.push(m | n as u8),
        n => {
            f.push(m | 126);
            f.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    if mask {
        let k = [7, 1, 9, 3];
        f.extend_from_slice(&k);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ k[i % 4]));
    } else {
        f.extend_from_slice(payload);
    }
    f
}

async fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

/// The misbehaving WebSocket server: what it does depends on the request path.
async fn bad_ws_server() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let head = read_head(&mut s).await;
                let case = head.split_whitespace().nth(1).unwrap_or("/").to_string();
                s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n").await.unwrap();
                // The client's one call.
                let mut dec = rpctap::ws::frame::Decoder::new(1 << 20, None);
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while got.is_empty() {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        return;
                    }
                    dec.feed(&buf[..n], &mut got);
                }
                let reply = br#"{"jsonrpc":"2.0","id":1,"result":"fine"}"#;
                match case.as_str() {
                    "/wrong-id" => {
                        let wrong = br#"{"jsonrpc":"2.0","id":2,"result":"fine"}"#;
                        s.write_all(&frame(true, 1, wrong, false)).await.unwrap();
                        s.write_all(&frame(true, 8, &[0x03, 0xe8], false))
                            .await
                            .unwrap();
                    }
                    "/no-reply" => {
                        let mut close = vec![0x03, 0xf3]; // 1011
                        close.extend_from_slice(b"server is going away");
                        s.write_all(&frame(true, 8, &close, false)).await.unwrap();
                    }
                    "/bytewise" | "/ping-inside" => {
                        let mut wire = frame(false, 1, &reply[..10], false);
                        if case == "/ping-inside" {
                            wire.extend(frame(true, 9, b"are you there", false));
                        }
                        wire.extend(frame(false, 0, &reply[10..20], false));
                        wire.extend(frame(true, 0, &reply[20..], false));
                        wire.extend(frame(true, 8, &[0x03, 0xe8], false));
                        if case == "/bytewise" {
                            for b in wire {
                                s.write_all(&[b]).await.unwrap();
                                s.flush().await.unwrap();
                                tokio::time::sleep(Duration::from_millis(1)).await;
                            }
                        } else {
                            s.write_all(&wire).await.unwrap();
                        }
                    }
                    "/binary" => {
                        // A binary message first: shown, not parsed; then the reply.
                        let mut wire = frame(true, 2, &[0, 1, 2, 3, 0xff], false);
                        wire.extend(frame(true, 1, reply, false));
                        wire.extend(frame(true, 8, &[0x03, 0xe8], false));
                        s.write_all(&wire).await.unwrap();
                    }
                    "/slow" => {
                        // A fragmented reply, its second half 400 ms later: a refusal rpctap
                        // puts in for the client must wait for its end.
                        s.write_all(&frame(false, 1, &reply[..10], false))
                            .await
                            .unwrap();
                        tokio::time::sleep(Duration::from_millis(400)).await;
                        s.write_all(&frame(true, 0, &reply[10..], false))
                            .await
                            .unwrap();
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        s.write_all(&frame(true, 8, &[0x03, 0xe8], false))
                            .await
                            .unwrap();
                    }
                    _ => {}
                }
                // The server closes after its close frame.
                tokio::time::sleep(Duration::from_millis(50)).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_misbehaving_websocket_server_gets_the_same_codes_live_and_in_check() {
    let up = bad_ws_server().await;
    let dir = Scratch::new("ws-bad");
    let file = dir.join("rec.jsonl");
    let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let call = br#"{"jsonrpc":"2.0","method":"m","id":1}"#;
    let cases: [(&str, Vec<&str>, Option<&str>); 5] = [
        (
            "/wrong-id",
            vec!["MISSING_RESPONSE", "UNMATCHED_RESPONSE"],
            None,
        ),
        (
            "/no-reply",
            vec!["MISSING_RESPONSE"],
            Some("WebSocket closed by the server: 1011 server is going away"),
        ),
        ("/bytewise", vec![], None),
        ("/ping-inside", vec![], None),
        ("/binary", vec![], None),
    ];
    for (path, want, reason) in cases {
        let mut s = TcpStream::connect(p.addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").as_bytes()).await.unwrap();
        let head = read_head(&mut s).await;
        assert!(head.starts_with("HTTP/1.1 101"), "{path}: {head}");
        s.write_all(&frame(true, 1, call, true)).await.unwrap();
        // Read the server's frames (passed through unchanged) until it closes.
        let mut dec = rpctap::ws::frame::Decoder::new(1 << 20, None);
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => dec.feed(&buf[..n], &mut got),
                _ => break,
            }
            if got
                .iter()
                .any(|e| matches!(e, rpctap::ws::frame::WsEvent::Close { .. }))
            {
                break;
            }
        }
        drop(s);
        let ev = drain_ws(&mut p).await;
        let mut codes: Vec<String> = anomalies(&ev).into_iter().map(|a| a.0).collect();
        codes.sort();
        assert_eq!(codes, want, "{path}");
        let cs = calls(&ev);
        assert_eq!(cs.len(), 1, "{path}: one outcome: {cs:?}");
        let binary: Vec<(Direction, u64)> = ev
            .iter()
            .filter_map(|e| match &**e {
                Event::Http(HttpEvent::Binary { direction, len, .. }) => Some((*direction, *len)),
                _ => None,
            })
            .collect();
        let want_binary = if path == "/binary" {
            vec![(Direction::ServerToClient, 5)]
        } else {
            vec![]
        };
        assert_eq!(
            binary, want_binary,
            "{path}: binary messages shown, not parsed"
        );
        match reason {
            Some(r) => assert!(
                matches!(&cs[0].outcome, rpctap::events::Outcome::Missing { reason } if reason == r),
                "{path}: {:?}",
                cs[0].outcome
            ),
            None if want.is_empty() => {
                assert_eq!(cs[0].outcome, rpctap::events::Outcome::Result, "{path}");
                let texts: Vec<_> = got
                    .iter()
                    .filter_map(|e| match e {
                        rpctap::ws::frame::WsEvent::Text(t) => Some(t.clone()),
                        _ => None,
                    })
                    .collect();
                assert_eq!(
                    texts,
                    vec![bytes::Bytes::from_static(
                        br#"{"jsonrpc":"2.0","id":1,"result":"fine"}"#
                    )],
                    "{path}: the client got the reply, byte for byte"
                );
            }
            None => {}
        }
    }
    drop(p.stop);
    p.served.await.unwrap(); // the recording is whole once the proxy has finished
    let c = check_recording(&file);
    assert_eq!(c.codes, live_codes(&file), "{}", c.stdout);
    assert_eq!(c.exit, Some(1));
    let rec = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        rec.lines()
            .filter(|l| l.contains(r#""phase":"binary""#) && l.contains(r#""len":5"#))
            .count(),
        1,
        "the binary message is on the record"
    );
}

/// Rate limits on a WebSocket: a rule letting 3 `add` through refuses the 4th and 5th, a batch
/// member and a notification; rpctap answers the refused calls on the stream, the server never
/// sees them, and — with permessage-deflate and context takeover, where leaving a message out
/// would break the server's inflating — every later message still reaches the server intact.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_refuse_calls_on_the_stream_with_and_without_deflate() {
    let dir = Scratch::new("ws-limits");
    for mode in ["deflate", "plain"] {
        let (_server, up) = ws_peer_server(mode).await;
        let file = dir.join(format!("{mode}.jsonl"));
        let flags = rpctap::cli::ProxyFlags {
            shared: rpctap::cli::SharedFlags {
                limits: vec!["add=3/min".into()],
                ..record_flags(&file).shared
            },
            ..record_flags(&file)
        };
        let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
        let v = ws_peer_client("limited", format!("ws://{}/rpc", p.addr), mode).await;
        for i in 1..=3 {
            assert_eq!(v[i.to_string()]["result"], i + 1, "{mode}: {v}");
        }
        for i in ["4", "5", "6"] {
            let e = &v[i]["error"];
            assert_eq!(e["message"], "Rate limited", "{mode}: call {i}: {v}");
            assert_eq!(e["data"]["limit"], "add=3/min", "{mode}");
        }
        let text = v["text"].as_str().unwrap();
        assert_eq!(
            v["7"]["result"][0], text,
            "{mode}: the batch's allowed member"
        );
        for i in [8, 9] {
            assert_eq!(
                v[i.to_string()]["result"],
                serde_json::json!([text, i]),
                "{mode}"
            );
        }
        assert_eq!(
            v["10"]["result"]["add"], 3,
            "{mode}: no refused call reached the server: {v}"
        );
        let ev = drain_ws(&mut p).await;
        assert!(anomalies(&ev).is_empty(), "{mode}: {:?}", anomalies(&ev));
        let cs = calls(&ev);
        let refused: Vec<_> = cs
            .iter()
            .filter(|c| matches!(&c.outcome, rpctap::events::Outcome::Refused { rule } if rule == "add=3/min"))
            .map(|c| c.id.to_string())
            .collect();
        assert_eq!(refused, ["4", "5", "6"], "{mode}: {cs:?}");
        let answered = cs
            .iter()
            .filter(|c| c.outcome == rpctap::events::Outcome::Result)
            .count();
        assert_eq!(answered, 7, "{mode}: {cs:?}");
        let refusals = ev
            .iter()
            .filter(|e| matches!(&***e, Event::Refusal(r) if !r.shadow))
            .count();
        assert_eq!(refusals, 4, "{mode}: three calls and the notification");
        drop(p.stop);
        p.served.await.unwrap(); // the recording is whole once the proxy has finished
        let c = check_recording(&file);
        assert_eq!(c.exit, Some(0), "{}", c.stdout);
        assert_eq!(c.codes, live_codes(&file));
    }
}

/// A refusal is put in between two of the server's messages, never inside one: the server is
/// halfway through a fragmented reply when the client's second call is refused; the client gets
/// the whole reply, then rpctap's error, as valid framing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_waits_for_the_end_of_the_servers_fragmented_message() {
    let up = bad_ws_server().await;
    let flags = rpctap::cli::ProxyFlags {
        shared: rpctap::cli::SharedFlags {
            limits: vec!["m=1/min".into()],
            ..Default::default()
        },
        ..Default::default()
    };
    let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
    let mut s = TcpStream::connect(p.addr).await.unwrap();
    s.write_all(b"GET /slow HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").await.unwrap();
    let head = read_head(&mut s).await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(&frame(
        true,
        1,
        br#"{"jsonrpc":"2.0","method":"m","id":1}"#,
        true,
    ))
    .await
    .unwrap();
    // The server halfway through its fragmented reply: its first fragment has come (waited
    // for on the wire, not for a while).
    let mut dec = rpctap::ws::frame::Decoder::new(1 << 20, None);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let mut framed = false;
    while !framed {
        let n = tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf))
            .await
            .expect("the server's first fragment")
            .unwrap();
        assert!(n > 0, "closed before the reply began");
        let mut at = 0;
        while at < n {
            let (k, end) = dec.feed_frame(&buf[at..n], &mut got);
            framed |= end.is_some();
            if k == 0 {
                break;
            }
            at += k;
        }
    }
    // The second call, sent in two fragments with a ping between them.
    let second = br#"{"jsonrpc":"2.0","method":"m","id":2}"#;
    let mut wire = frame(false, 1, &second[..12], true);
    wire.extend(frame(true, 9, b"ping", true));
    wire.extend(frame(true, 0, &second[12..], true));
    s.write_all(&wire).await.unwrap();
    while !got
        .iter()
        .any(|e| matches!(e, rpctap::ws::frame::WsEvent::Close { .. }))
    {
        match tokio::time::timeout(Duration::from_secs(5), s.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => dec.feed(&buf[..n], &mut got),
            _ => break,
        }
    }
    use rpctap::ws::frame::WsEvent;
    let texts: Vec<serde_json::Value> = got
        .iter()
        .filter_map(|e| match e {
            WsEvent::Text(t) => Some(serde_json::from_slice(t).unwrap()),
            _ => None,
        })
        .collect();
    assert!(
        !got.iter().any(|e| matches!(e, WsEvent::Error(_))),
        "valid framing: {got:?}"
    );
    assert_eq!(texts.len(), 2, "{got:?}");
    assert_eq!(
        texts[0]["result"], "fine",
        "the server's reply first, whole"
    );
    assert_eq!(texts[1]["id"], 2);
    assert_eq!(texts[1]["error"]["message"], "Rate limited");
    drop(s);
    let ev = drain_ws(&mut p).await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    let cs = calls(&ev);
    assert_eq!(cs.len(), 2, "{cs:?}");
    assert!(cs
        .iter()
        .any(|c| c.outcome == rpctap::events::Outcome::Result));
    assert!(cs.iter().any(
        |c| matches!(&c.outcome, rpctap::events::Outcome::Refused { rule } if rule == "m=1/min")
    ));
}

/// A real Ethereum JSON-RPC node (ganache, from npm) over WebSocket through rpctap: the block
/// number, a batch, `eth_subscribe("newHeads")` with three blocks mined (`evm_mine`) and their
/// three `eth_subscription` notifications, `eth_unsubscribe` — every call correlated, the
/// notifications attributed to their subscription, nothing flagged, the recording clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ganache_newheads_subscription_is_correlated_and_attributed() {
    ganache_case(&[], false).await;
}

/// The same with ganache started as users start it with `--server.wsBinary false` on its
/// command line: it then answers every call in a binary frame (the flag's string value is
/// truthy), which is UTF-8 JSON all the same — read as JSON-RPC, marked binary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ganache_answering_in_binary_frames_is_inspected_all_the_same() {
    ganache_case(&["--server.wsBinary", "false"], true).await;
}

async fn ganache_case(extra: &[&str], binary: bool) {
    let node = installed("node", NODE_PACKAGES);
    let port = free_port();
    let mut g = std::process::Command::new(node.join("node_modules/.bin/ganache"));
    g.args([
        "--server.host",
        "127.0.0.1",
        "--server.port",
        &port.to_string(),
        "--logging.quiet",
    ])
    .args(extra);
    let _ganache = Proc::spawn(
        g.stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null()),
    );
    let up: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    wait_listening(up).await;
    let dir = Scratch::new(&format!("ws-ganache-{binary}"));
    let file = dir.join("eth.jsonl");
    let mut p = start_proxy_flags(&format!("http://{up}"), record_flags(&file)).await;
    let v = ws_peer_client("eth", format!("ws://{}/", p.addr), "deflate").await;
    assert_eq!(v["blockNumber"]["result"], "0x0", "{v}");
    assert_eq!(v["batch"].as_array().unwrap().len(), 2, "{v}");
    assert_eq!(v["heads"], serde_json::json!([1, 2, 3]), "{v}");
    let sub = v["subscription"].as_str().unwrap().to_string();
    assert_eq!(v["heads_subscription"], serde_json::json!([sub]));
    assert_eq!(v["unsubscribe"]["result"], true);
    assert_eq!(v["after"]["result"], "0x3");
    let ev = drain_ws(&mut p).await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    let cs = calls(&ev);
    assert_eq!(cs.len(), 9, "{cs:?}");
    assert!(
        cs.iter()
            .all(|c| c.outcome == rpctap::events::Outcome::Result),
        "{cs:?}"
    );
    let target = |m: &str| {
        cs.iter()
            .find(|c| &*c.method == m)
            .and_then(|c| c.target.as_deref().map(str::to_string))
    };
    assert_eq!(target("eth_subscribe").as_deref(), Some(sub.as_str()));
    assert_eq!(target("eth_unsubscribe").as_deref(), Some(sub.as_str()));
    let heads = ev
        .iter()
        .filter(|e| matches!(&***e, Event::Message(m) if m.method.as_deref() == Some("eth_subscription") && m.target.as_deref() == Some(sub.as_str())))
        .count();
    assert_eq!(
        heads, 3,
        "the newHeads notifications under their subscription"
    );
    let binary_replies = ev
        .iter()
        .filter(|e| matches!(&***e, Event::Message(m) if m.binary && m.direction == rpctap::events::Direction::ServerToClient))
        .count();
    if binary {
        assert!(
            binary_replies >= 9,
            "every reply came binary: {binary_replies}"
        );
    } else {
        assert_eq!(binary_replies, 0);
    }
    assert!(
        !ev.iter()
            .any(|e| matches!(&**e, Event::Http(rpctap::events::HttpEvent::Binary { .. }))),
        "no message left as an unread binary row"
    );
    drop(p.stop);
    p.served.await.unwrap(); // the recording is whole once the proxy has finished
    let c = check_recording(&file);
    assert_eq!(c.exit, Some(0), "{}", c.stdout);
    assert_eq!(c.matched, 9, "{}", c.stdout);
    // The recording as a mock node: the same answers, the mined blocks' heads after each
    // `evm_mine` as recorded.
    let (_mock, mock) = mock_of(&file).await;
    let mocked = ws_peer_client("eth", format!("ws://{mock}/"), "deflate").await;
    assert_eq!(mocked, v, "the mock answers as ganache did");
}

/// A message larger than the inspection cap: without rules it is not held — it streams on
/// (uncompressed) or goes on as it came (compressed, inflating past the cap), flagged
/// NOT_INSPECTED, and the client gets what it gets directly. Under a rule (a rate limit here)
/// nothing runs undecided (issue 61's rule, as an HTTP body over the cap is refused): the
/// client's big call is not passed on, the connection is closed with 1009 (message too big),
/// and the recording says it was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_beyond_the_cap_passes_uninspected_or_under_a_rule_is_refused() {
    for mode in ["deflate", "plain"] {
        let (_server, up) = ws_peer_server(mode).await;
        let direct = ws_peer_client("client", format!("ws://{up}/"), mode).await;
        for limited in [false, true] {
            let flags = rpctap::cli::ProxyFlags {
                shared: rpctap::cli::SharedFlags {
                    limits: if limited {
                        vec!["add=100/min".into()]
                    } else {
                        vec![]
                    },
                    max_frame_bytes: Some(64 << 10),
                    ..Default::default()
                },
                ..Default::default()
            };
            let mut p = start_proxy_flags(&format!("http://{up}"), flags).await;
            let via = ws_peer_client("client", format!("ws://{}/rpc", p.addr), mode).await;
            let ev = drain_ws(&mut p).await;
            let found: Vec<(&str, &str)> = ev
                .iter()
                .filter_map(|e| match &**e {
                    Event::Anomaly(a) => Some((a.code, a.message.as_str())),
                    _ => None,
                })
                .collect();
            assert!(
                found.iter().all(|a| a.0 == "NOT_INSPECTED"),
                "{mode}: {found:?}"
            );
            if limited {
                for k in ["add", "batch", "subscribe", "notifications"] {
                    assert_eq!(via[k], direct[k], "{mode}: {k}");
                }
                assert_eq!(via["big"], "closed 1009", "{mode}: {via}");
                assert!(
                    found.iter().any(|a| a.1.starts_with("refused: a message")),
                    "{mode}: {found:?}"
                );
                continue;
            }
            assert_eq!(direct, via, "{mode}");
            assert_eq!(
                via["big"], true,
                "{mode}: the 200 KB echo went through whole"
            );
            let lost = found
                .iter()
                .filter(|a| a.1.contains("compression context"))
                .count();
            // The big call and its big reply: passed on, not inspected (so the call is not
            // correlated, and its reply is rightly not flagged). Compressed with context
            // takeover, the messages after them cannot be inflated either: the unsubscribe and
            // its reply.
            let (want_codes, want_lost, want_calls) = match mode {
                "deflate" => (4, 2, 4),
                _ => (2, 0, 5),
            };
            assert_eq!(
                (found.len(), lost),
                (want_codes, want_lost),
                "{mode}: {found:?}"
            );
            let cs = calls(&ev);
            assert_eq!(
                cs.len(),
                want_calls,
                "{mode}: each inspected call has its outcome: {cs:?}"
            );
        }
    }
}

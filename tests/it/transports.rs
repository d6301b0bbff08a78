//! Transports around the JSON-RPC: https upstreams (rustls), WebSocket upgrades passed through as
//! raw bytes, server→client requests answered by a client POST, and the JSON log.

use crate::common::*;
use bytes::Bytes;
use http::Response;
use hyper_util::rt::TokioIo;
use rpctap::events::{Direction, Outcome};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An https upstream with a self-signed certificate, answering one JSON-RPC reply.
async fn tls_upstream() -> std::net::SocketAddr {
    let cert =
        rcgen::generate_simple_self_signed(vec!["localhost".into(), "127.0.0.1".into()]).unwrap();
    let der = rustls::pki_types::CertificateDer::from(cert.cert.der().to_vec());
    let key = rustls::pki_types::PrivateKeyDer::try_from(cert.signing_key.serialize_der()).unwrap();
    let cfg = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(vec![der], key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = l.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(s).await else {
                    return;
                };
                let svc = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(
                        Response::builder()
                            .header("content-type", "application/json")
                            .body(http_body_util::Full::new(Bytes::from_static(
                                br#"{"jsonrpc":"2.0","id":1,"result":"over tls"}"#,
                            )))
                            .unwrap(),
                    )
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), svc)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn https_upstream_verified_by_default_and_insecure_on_request() {
    let up = tls_upstream().await;
    // Verification is on by default: a self-signed upstream is refused with a 502 naming it.
    let p = start_proxy(&format!("https://{up}")).await;
    let r = post_json(p.addr, "/", r#"{"jsonrpc":"2.0","method":"m","id":1}"#).await;
    assert_eq!(r.status, 502);
    assert!(
        r.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .contains("certificate"),
        "{}",
        r.text()
    );
    // --upstream-insecure accepts it.
    let flags = rpctap::cli::ProxyFlags {
        upstream_insecure: true,
        ..Default::default()
    };
    let p = start_proxy_flags(&format!("https://{up}"), flags).await;
    let r = post_json(p.addr, "/", r#"{"jsonrpc":"2.0","method":"m","id":1}"#).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["result"], "over tls");
}

#[tokio::test]
async fn websocket_upgrade_passes_through_as_raw_bytes() {
    // A raw upstream: answers the upgrade with 101, then echoes bytes back.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let mut head = Vec::new();
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    let n = s.read(&mut buf).await.unwrap();
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                }
                let text = String::from_utf8_lossy(&head).to_lowercase();
                assert!(text.contains("upgrade: websocket"), "{text}");
                s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nconnection: upgrade\r\nupgrade: websocket\r\nsec-websocket-accept: x\r\n\r\n").await.unwrap();
                loop {
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        break;
                    }
                    s.write_all(&buf[..n]).await.unwrap();
                }
            });
        }
    });
    let p = start_proxy(&format!("http://{up}")).await;
    let mut c = TcpStream::connect(p.addr).await.unwrap();
    c.write_all(b"GET /ws HTTP/1.1\r\nhost: localhost\r\nconnection: Upgrade\r\nupgrade: websocket\r\nsec-websocket-key: dGhlIHNhbXBsZSBub25jZQ==\r\nsec-websocket-version: 13\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = c.read(&mut buf).await.unwrap();
    let head = String::from_utf8_lossy(&buf[..n]).to_lowercase();
    assert!(head.starts_with("http/1.1 101"), "{head}");
    assert!(head.contains("upgrade: websocket"));
    let frame = b"\x81\x85\x37\xfa\x21\x3d\x7f\x9f\x4d\x51\x58"; // a masked "Hello" frame
    c.write_all(frame).await.unwrap();
    let mut got = vec![0u8; frame.len()];
    tokio::time::timeout(Duration::from_secs(5), c.read_exact(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&got, frame);
}

#[tokio::test]
async fn server_to_client_requests_are_answered_by_a_client_post() {
    // The upstream asks the client for sampling on the POST's SSE stream before its reply; the
    // client answers with a POST that the upstream accepts with 202.
    let (up, _u) = start_upstream(|parts, body| {
        Box::pin(async move {
            let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            if v.get("method").is_some() {
                let events = [
                    r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{"messages":[],"maxTokens":5}}"#,
                    r#"{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}"#,
                    r#"{"jsonrpc":"2.0","id":4,"result":{"content":[],"isError":false}}"#,
                ];
                let body: String = events.iter().map(|e| format!("event: message\ndata: {e}\n\n")).collect();
                Response::builder().header("content-type", "text/event-stream").body(boxed(body)).unwrap()
            } else {
                assert_eq!(parts.headers["mcp-session-id"], "S");
                Response::builder().status(202).body(boxed("")).unwrap()
            }
        })
    })
    .await;
    let mut p = start_proxy(&format!("http://{up}")).await;
    let h = [
        ("content-type", "application/json"),
        MCP_ACCEPT,
        ("mcp-session-id", "S"),
    ];
    let r = send(
        p.addr,
        "POST",
        "/mcp",
        &h,
        r#"{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"ask","arguments":{}}}"#,
    )
    .await;
    assert_eq!(sse_data(&r.text()).len(), 3);
    let r = send(p.addr, "POST", "/mcp", &h, r#"{"jsonrpc":"2.0","id":"s1","result":{"role":"assistant","content":{"type":"text","text":"hi"}}}"#).await;
    assert_eq!(r.status, 202);
    let ev = p.drain().await;
    assert!(anomalies(&ev).is_empty(), "{:?}", anomalies(&ev));
    let c = calls(&ev);
    assert_eq!(c.len(), 2);
    let s2c = c
        .iter()
        .find(|c| c.direction == Direction::ServerToClient)
        .unwrap();
    assert_eq!(&*s2c.method, "sampling/createMessage");
    assert_eq!(s2c.outcome, Outcome::Result);
    let c2s = c
        .iter()
        .find(|c| c.direction == Direction::ClientToServer)
        .unwrap();
    assert_eq!(c2s.target.as_deref(), Some("ask"));
}

#[test]
fn json_log_is_one_json_object_per_line() {
    let port = free_port();
    let child = Proc::spawn(
        rpctap()
            .args([
                "demo",
                "--log",
                "json",
                "--listen",
                &format!("127.0.0.1:{port}"),
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null()),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    rt.block_on(async {
        wait_listening(addr).await;
        post_json(addr, "/jsonrpc", r#"[{"jsonrpc":"2.0","method":"add","params":[1,2],"id":1},{"jsonrpc":"2.0","method":"echo","id":1}]"#).await;
    });
    let out = child.term_output();
    let text = String::from_utf8(out.stdout).unwrap();
    let events: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"http") && kinds.contains(&"message") && kinds.contains(&"call"));
    let dup = events
        .iter()
        .find(|e| e["event"] == "anomaly")
        .expect("the duplicate id is flagged");
    assert_eq!(dup["code"], "DUPLICATE_ID");
    assert_eq!(dup["id"], 1);
    let msg = events.iter().find(|e| e["event"] == "message").unwrap();
    assert_eq!(
        msg["message"]["method"], "add",
        "messages are logged verbatim as JSON"
    );
}

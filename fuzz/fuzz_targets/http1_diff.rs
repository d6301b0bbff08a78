//! rpctap's HTTP/1 engine against hyper, on the same bytes: a request as the lean reader reads
//! it (`server::fuzz_read_request`) against hyper's server, and a reply as the lean upstream
//! leg reads it (`proxy::lean::fuzz_read_reply`) against hyper's client, each cut into pieces
//! for the engine as the input's first bytes say (`cuts.rs`). Every verdict agrees, or the engine is
//! the stricter one: whatever the engine accepts, hyper accepts alike — the same method,
//! target and body of a request; the same status and body of a reply — and the length the
//! engine would pass on for a reply is the length of the body it delivers.
#![no_main]

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use libfuzzer_sys::fuzz_target;
use std::cell::RefCell;
use std::rc::Rc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "cuts.rs"]
mod cuts;

thread_local! {
    static RT: tokio::runtime::Runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
}

/// The first request hyper's server reads from `bytes`: method, target, body.
async fn hyper_request(bytes: &[u8]) -> Option<(String, String, Vec<u8>)> {
    let (a, mut b) = tokio::io::duplex(1 << 20);
    let seen: Rc<RefCell<Option<(String, String, Vec<u8>)>>> = Rc::default();
    let s = seen.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        let s = s.clone();
        async move {
            let (parts, body) = req.into_parts();
            if let Ok(body) = body.collect().await {
                s.borrow_mut().get_or_insert((
                    parts.method.to_string(),
                    parts.uri.to_string(),
                    body.to_bytes().to_vec(),
                ));
            }
            Ok::<_, std::convert::Infallible>(hyper::Response::new(Empty::<Bytes>::new()))
        }
    });
    // Half-close kept: the bytes end with the write side closed, and the request in flight still
    // counts.
    let conn = hyper::server::conn::http1::Builder::new()
        .half_close(true)
        .serve_connection(TokioIo::new(a), svc);
    let write = async {
        let _ = b.write_all(bytes).await;
        let _ = b.shutdown().await;
        let mut sink = Vec::new();
        let _ = b.read_to_end(&mut sink).await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(2), futures::future::join(conn, write)).await;
    seen.take()
}

/// The reply hyper's client reads from `pieces` (written apart, then the end): its status and
/// whole body, or why not.
async fn hyper_reply(pieces: &[&[u8]], is_head: bool) -> Result<(u16, Vec<u8>), String> {
    let (a, b) = tokio::io::duplex(1 << 20);
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(a))
        .await
        .map_err(|e| e.to_string())?;
    let driver = tokio::task::spawn_local(async move {
        let _ = conn.await;
    });
    let feeder = tokio::task::spawn_local(feed(b, pieces.iter().map(|p| p.to_vec()).collect()));
    let req = hyper::Request::builder()
        .method(if is_head { "HEAD" } else { "GET" })
        .uri("/")
        .header("host", "x")
        .body(Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let out = async {
        let resp = send.send_request(req).await.map_err(|e| e.to_string())?;
        let status = resp.status().as_u16();
        let body = resp.into_body().collect().await.map_err(|e| e.to_string())?;
        Ok::<_, String>((status, body.to_bytes().to_vec()))
    }
    .await;
    driver.abort();
    feeder.abort();
    out
}

/// Writes `pieces` to the server side of a pipe, each after the reader had its turn, then ends
/// it (the request written to it is read and dropped).
async fn feed(mut b: tokio::io::DuplexStream, pieces: Vec<Vec<u8>>) {
    let mut req = [0u8; 256];
    let _ = b.read(&mut req).await;
    for p in pieces {
        if b.write_all(&p).await.is_err() {
            return;
        }
        tokio::task::yield_now().await;
    }
    let _ = b.shutdown().await;
    let mut sink = Vec::new();
    let _ = b.read_to_end(&mut sink).await;
}

/// The engine's reading of the same pieces.
async fn engine_reply(pieces: &[&[u8]], is_head: bool) -> Result<(u16, Option<u64>, Vec<u8>), String> {
    let (a, b) = tokio::io::duplex(1 << 20);
    let feeder = tokio::task::spawn_local(feed(b, pieces.iter().map(|p| p.to_vec()).collect()));
    let out = rpctap::proxy::lean::fuzz_read_reply(TokioIo::new(a), is_head).await;
    feeder.abort();
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    RT.with(|rt| {
        let local = tokio::task::LocalSet::new();
        local.block_on(rt, async {
            if mode & 1 == 0 {
                // A request, cut where the input says: what the engine reads, hyper reads alike.
                let (stream, pieces) = cuts::cut(rest, 1, 64);
                let Some((method, target, _headers, body)) = rpctap::server::fuzz_read_request(&pieces) else {
                    return;
                };
                let Some((hm, ht, hb)) = hyper_request(stream).await else {
                    panic!("the engine read {method} {target} ({} body bytes); hyper read no request", body.len());
                };
                assert_eq!((&method, &target, &body), (&hm, &ht, &hb), "the engine and hyper read different requests");
            } else {
                let is_head = mode & 2 != 0;
                let (stream, pieces) = cuts::cut(rest, 1, 64);
                let engine = tokio::time::timeout(Duration::from_secs(2), engine_reply(&pieces, is_head)).await;
                let hyper = tokio::time::timeout(Duration::from_secs(2), hyper_reply(&[stream], is_head)).await;
                let (Ok(engine), Ok(hyper)) = (engine, hyper) else {
                    return;
                };
                if let Ok((status, length, body)) = &engine {
                    if let Some(n) = length {
                        if !is_head && !matches!(status, 100..=199 | 204 | 304) {
                            assert_eq!(*n, body.len() as u64, "the length passed on is not the body's");
                        }
                    }
                    match &hyper {
                        Ok((hs, hb)) => assert_eq!((status, body), (hs, hb), "the engine and hyper read different replies"),
                        Err(e) => panic!("the engine read a {status} reply of {} bytes that hyper refused: {e}", body.len()),
                    }
                }
            }
        })
    });
});

//! The WebSocket load benchmark's two ends (benches/load.sh), with tokio-tungstenite:
//!
//!   ws_bench server ADDR              a JSON-RPC server: every call's reply carries its id
//!   ws_bench load URL CONNS SECS      CONNS WebSockets, each sending one call at a time for
//!                                     SECS seconds; prints `calls/s p50_us p99_us errors`
//!
//! No permessage-deflate on either end (tungstenite has none): the row measures framing and
//! inspection, not compression.

use futures_util::{SinkExt, StreamExt};
use std::time::{Duration, Instant};
use tokio_tungstenite::tungstenite::Message;

const CALL: &str = r#""method":"tools/call","params":{"name":"search","arguments":{"query":"rust reverse proxy","limit":10}}}"#;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("server") => server(&args[2]).await,
        Some("load") => {
            let conns: usize = args[3].parse().expect("CONNS");
            let secs: u64 = args[4].parse().expect("SECS");
            load(&args[2], conns, Duration::from_secs(secs)).await
        }
        _ => eprintln!("usage: ws_bench server ADDR | load URL CONNS SECS"),
    }
}

async fn server(addr: &str) {
    let l = tokio::net::TcpListener::bind(addr).await.expect("bind");
    while let Ok((s, _)) = l.accept().await {
        tokio::spawn(async move {
            let Ok(ws) = tokio_tungstenite::accept_async(s).await else {
                return;
            };
            let (mut tx, mut rx) = ws.split();
            while let Some(Ok(m)) = rx.next().await {
                let Message::Text(t) = m else { continue };
                // The id is what follows `"id":` up to the next comma.
                let id = t
                    .as_str()
                    .split_once(r#""id":"#)
                    .and_then(|(_, r)| r.split([',', '}']).next())
                    .unwrap_or("null");
                let reply = format!(
                    r#"{{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":"10 results"}}]}}}}"#
                );
                if tx.send(Message::text(reply)).await.is_err() {
                    return;
                }
            }
        });
    }
}

async fn load(url: &str, conns: usize, d: Duration) {
    let end = Instant::now() + d;
    let mut tasks = Vec::new();
    for c in 0..conns {
        let url = url.to_string();
        tasks.push(tokio::spawn(async move {
            let (mut ws, _) = tokio_tungstenite::connect_async(url)
                .await
                .expect("connect");
            let (mut lat, mut errors) = (Vec::new(), 0u64);
            let mut n = 0u64;
            while Instant::now() < end {
                n += 1;
                let t0 = Instant::now();
                let call = format!(
                    r#"{{"jsonrpc":"2.0","id":{},{CALL}"#,
                    c as u64 * 1_000_000_000 + n
                );
                if ws.send(Message::text(call)).await.is_err() {
                    errors += 1;
                    break;
                }
                match ws.next().await {
                    Some(Ok(Message::Text(_))) => lat.push(t0.elapsed().as_micros() as u64),
                    _ => {
                        errors += 1;
                        break;
                    }
                }
            }
            let _ = ws.close(None).await;
            (lat, errors)
        }));
    }
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        if let Ok((l, e)) = t.await {
            all.extend(l);
            errors += e;
        }
    }
    all.sort_unstable();
    let pct = |p: f64| {
        all.get(((all.len() as f64 * p) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    println!(
        "{:.0} {} {} {errors}",
        all.len() as f64 / d.as_secs_f64(),
        pct(0.5),
        pct(0.99)
    );
}

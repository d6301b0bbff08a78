//! The floor under rpctap's load numbers: the smallest reverse proxy on rpctap's own stack —
//! hyper's HTTP/1 server, and per client connection one kept-alive hyper HTTP/1 client
//! connection driven in the same task — forwarding without looking at anything (no inspection,
//! no events, no header rules beyond `Host`). `benches/load.sh` runs it beside nginx and rpctap,
//! so what the stack itself costs per request is measured, not guessed; rpctap minus this row is
//! what rpctap's own work costs.
//!
//!     cargo run --release --example hyper_floor -- 127.0.0.1:8081 127.0.0.1:8080
//!
//! Worker threads: `RPCTAP_THREADS` (default 1), like rpctap's.

use http::header::{HeaderValue, HOST};
use http::{Response, StatusCode, Uri};
use http_body_util::{combinators::BoxBody, BodyExt, Empty};
use hyper::body::{Bytes, Incoming};
use hyper::client::conn::http1 as client;
use hyper::server::conn::http1 as server;
use hyper_util::rt::TokioIo;
use std::sync::{Arc, Mutex};
use tokio::net::{TcpListener, TcpStream};

type Body = BoxBody<Bytes, hyper::Error>;

/// The same allocator as rpctap's binary, so the floor differs from rpctap only in rpctap's work.
#[global_allocator]
static GLOBAL: rpctap::alloc::Mimalloc = rpctap::alloc::Mimalloc;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        return Err("usage: hyper_floor LISTEN_ADDR UPSTREAM_ADDR".into());
    };
    let threads = match std::env::var("RPCTAP_THREADS") {
        Ok(v) => v.parse()?,
        Err(_) => 1,
    };
    let host = HeaderValue::from_str(&upstream)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?
        .block_on(async move {
            let listener = TcpListener::bind(&listen).await?;
            loop {
                let (stream, _) = listener.accept().await?;
                let (upstream, host) = (upstream.clone(), host.clone());
                // A connection's error ends that connection only (wrk closes its connections
                // mid-request at the end of a round; that is not worth a line).
                tokio::spawn(async move {
                    let _ = connection(stream, &upstream, host).await;
                });
            }
        })
}

/// Serves one client connection over one upstream connection, both in this task.
async fn connection(
    stream: TcpStream,
    upstream: &str,
    host: HeaderValue,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    stream.set_nodelay(true)?;
    let up = TcpStream::connect(upstream).await?;
    up.set_nodelay(true)?;
    let (sender, up_conn) = client::handshake::<_, Incoming>(TokioIo::new(up)).await?;
    // HTTP/1 requests of one connection come one at a time: the sender is taken and put back.
    let lane = Arc::new(Mutex::new(Some(sender)));
    let service = hyper::service::service_fn(move |mut req: http::Request<Incoming>| {
        let (lane, host) = (lane.clone(), host.clone());
        async move {
            let taken = lane.lock().map_or(None, |mut g| g.take());
            let Some(mut sender) = taken else {
                return Ok::<_, hyper::Error>(bad_gateway());
            };
            if let Some(pq) = req.uri().path_and_query().cloned() {
                *req.uri_mut() = Uri::from(pq);
            }
            req.headers_mut().insert(HOST, host);
            let resp = sender.send_request(req).await;
            if let Ok(mut g) = lane.lock() {
                *g = Some(sender);
            }
            Ok(match resp {
                Ok(r) => r.map(|b| b.boxed()),
                Err(_) => bad_gateway(),
            })
        }
    });
    let served = server::Builder::new().serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        biased;
        r = served => r?,
        r = up_conn => r?,
    }
    Ok(())
}

fn bad_gateway() -> Response<Body> {
    let mut r = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *r.status_mut() = StatusCode::BAD_GATEWAY;
    r
}

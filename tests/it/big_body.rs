//! A 50 MiB reply streams through the proxy without the proxy holding it: the process's RSS
//! grows by far less than the body. (Its own test binary, so no other test shares the process.)

use crate::common::*;
use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use std::convert::Infallible;

fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

const SIZE: usize = 50 << 20;
const CHUNK: usize = 64 << 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_mib_reply_streams_with_bounded_memory() {
    for chunked in [false, true] {
        // The upstream generates the body on the fly: a JSON-RPC reply whose result is a long string.
        let (up, _u) = start_upstream(move |_p, b| {
            Box::pin(async move {
                if b.windows(4).any(|w| w == b"warm") {
                    return Response::new(boxed(r#"{"jsonrpc":"2.0","id":0,"result":0}"#));
                }
                let head = Bytes::from_static(b"{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"");
                let tail = Bytes::from_static(b"\"}");
                let filler = Bytes::from(vec![b'x'; CHUNK]);
                let n = (SIZE - head.len() - tail.len()) / CHUNK;
                let total = head.len() + n * CHUNK + tail.len();
                let frames = std::iter::once(head)
                    .chain(std::iter::repeat_n(filler, n))
                    .chain(std::iter::once(tail))
                    .map(|b| Ok::<_, Infallible>(http_body::Frame::data(b)));
                let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
                let mut r = Response::builder().header("content-type", "application/json");
                if !chunked {
                    r = r.header("content-length", total.to_string());
                }
                r.body(http_body_util::combinators::UnsyncBoxBody::new(body))
                    .unwrap()
            })
        })
        .await;
        let mut proxy = start_proxy(&format!("http://{up}")).await;
        // Warm up allocator and pools.
        let _ = post_json(
            proxy.addr,
            "/",
            r#"{"jsonrpc":"2.0","method":"warm","id":0}"#,
        )
        .await;
        let before = rss_bytes();
        let req = Request::post(format!("http://{}/", proxy.addr))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from_static(
                br#"{"jsonrpc":"2.0","method":"big","id":1}"#,
            )))
            .unwrap();
        let resp = client().request(req).await.unwrap();
        let mut body = resp.into_body();
        let mut got = 0usize;
        let mut peak = before;
        while let Some(f) = body.frame().await {
            if let Ok(d) = f.unwrap().into_data() {
                got += d.len();
            }
            peak = peak.max(rss_bytes());
        }
        assert!(got >= SIZE - CHUNK, "{got}");
        let growth = peak.saturating_sub(before);
        eprintln!(
            "chunked={chunked}: 50 MiB through the proxy, peak RSS growth {:.1} MiB",
            growth as f64 / 1048576.0
        );
        // The inspection cap is 16 MiB: a body beyond it is not held (a chunked one is held up to
        // the cap, then dropped); either way far less than the body.
        let limit = if chunked { 24 << 20 } else { 8 << 20 };
        assert!(growth < limit, "RSS grew {growth} bytes");
        let ev = proxy.drain().await;
        let codes: Vec<String> = anomalies(&ev).into_iter().map(|a| a.0).collect();
        assert!(codes.contains(&"NOT_INSPECTED".to_string()), "{codes:?}");
    }
}

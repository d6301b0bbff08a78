//! The listener: accepts TCP connections, serves each with hyper-util's auto builder (HTTP/1.1
//! and h2c, upgrades allowed), and shuts down gracefully: stop accepting, let in-flight exchanges
//! finish up to a grace period, then return.

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::watch;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Serves on `listener` until `shutdown` resolves, then drains for at most `grace`.
/// `per_connection` is called once per accepted connection with the peer's address and returns
/// that connection's request handler (so a handler can keep per-connection state).
pub async fn serve<M, H, F, B>(
    listener: TcpListener,
    per_connection: M,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) where
    M: Fn(SocketAddr) -> H,
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    serve_with(
        listener,
        |peer| (per_connection(peer), std::future::pending::<()>()),
        shutdown,
        grace,
    )
    .await;
}

/// Like [`serve`], but `per_connection` also returns a companion future that runs in the
/// connection's own task, polled right after the connection itself, until the connection ends
/// (the proxy drives its upstream connection there, so a request and its reply never wake
/// another task).
pub async fn serve_with<M, H, S, F, B>(
    listener: TcpListener,
    per_connection: M,
    shutdown: impl Future<Output = ()>,
    grace: Duration,
) where
    M: Fn(SocketAddr) -> (H, S),
    H: Fn(Request<Incoming>) -> F + Send + Sync + 'static,
    S: Future<Output = ()> + Send + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    let builder = Builder::new(TokioExecutor::new());
    // The drain signal: every connection holds a receiver until it ends, so `closed()` resolves
    // when the last one is done (hyper-util's `GracefulShutdown` design; see `until_drained`).
    let (drain, drain_rx) = watch::channel(());
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let (h, companion) = per_connection(peer);
        let service = hyper::service::service_fn(move |req| {
            let fut = h(req);
            async move { Ok::<_, Infallible>(fut.await) }
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let conn = until_drained(conn, drain_rx.clone(), |c| c.graceful_shutdown());
        tokio::spawn(async move {
            tokio::select! {
                biased;
                r = conn => {
                    if let Err(e) = r {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                }
                () = companion => {}
            }
        });
    }
    drop(listener);
    tracing::info!(
        grace_secs = grace.as_secs_f64(),
        "shutting down: draining connections"
    );
    drop(drain_rx);
    let _ = drain.send(());
    if tokio::time::timeout(grace, drain.closed()).await.is_err() {
        tracing::warn!("grace period over; closing the remaining connections");
    }
}

/// Runs `conn` until it ends; once `drain` signals, calls `shut` on it once (hyper then finishes
/// the exchange in flight and closes the connection instead of keeping it alive). A receiver is
/// held until `conn` ends, which is what the drain waits for.
///
/// Written here rather than taken from hyper-util's `GracefulShutdown::watch`, which polls its
/// watch future on every wake of every connection — a mutex lock and a waker comparison each
/// time, a visible share of a proxied call (benches/RESULTS.md). This polls that future once, to
/// register for the wake-up, and afterwards only when the channel says a value was sent (one
/// atomic load per wake). A connection task's waker does not change, so the one registration
/// stays valid.
async fn until_drained<C: Future>(
    conn: C,
    drain: watch::Receiver<()>,
    shut: fn(Pin<&mut C>),
) -> C::Output {
    // `gate` is the receiver held for the connection's life; `signal` waits on a second one.
    let gate = drain.clone();
    let mut signal = std::pin::pin!(async move {
        let mut drain = drain;
        // Err: the sender is gone, which also means stop.
        let _ = drain.changed().await;
    });
    let mut conn = std::pin::pin!(conn);
    let (mut armed, mut fired) = (false, false);
    std::future::poll_fn(move |cx| {
        if !fired && (!armed || gate.has_changed().unwrap_or(true)) {
            armed = true;
            if signal.as_mut().poll(cx).is_ready() {
                fired = true;
                shut(conn.as_mut());
            }
        }
        conn.as_mut().poll(cx)
    })
    .await
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {},
        () = term => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A shutdown closes idle kept-alive connections at once (each connection registered for
    /// the drain signal on its first poll, and is woken by it), so serving returns long before
    /// the grace period; a connection that never sent a request is closed too.
    #[tokio::test]
    async fn shutdown_closes_idle_connections_without_waiting_for_the_grace() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            |_peer| {
                |_req: Request<Incoming>| async {
                    Response::new(http_body_util::Full::new(hyper::body::Bytes::from("ok")))
                }
            },
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(30),
        ));
        let mut used = tokio::net::TcpStream::connect(addr).await.unwrap();
        used.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 1024];
        let n = used.read(&mut buf).await.unwrap();
        assert!(
            buf[..n].ends_with(b"ok"),
            "{:?}",
            String::from_utf8_lossy(&buf[..n])
        );
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await; // both connections served, idle
        let started = std::time::Instant::now();
        stop.send(()).unwrap();
        tokio::time::timeout(Duration::from_secs(5), server)
            .await
            .expect("serving ended before the grace period")
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
        for conn in [&mut used, &mut silent] {
            let n = tokio::time::timeout(Duration::from_secs(1), conn.read(&mut buf))
                .await
                .expect("closed, not left open")
                .unwrap_or(0);
            assert_eq!(n, 0, "{:?}", String::from_utf8_lossy(&buf[..n]));
        }
    }
}

//! The listener: accepts TCP connections, serves each with hyper-util's auto builder (HTTP/1.1
//! and h2c, upgrades allowed), and shuts down gracefully: stop accepting, let in-flight exchanges
//! finish up to a grace period, then return.

use hyper::body::{Body, Incoming};
use hyper::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;

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
    let graceful = GracefulShutdown::new();
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
        let conn = graceful.watch(conn);
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
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("grace period over; closing the remaining connections");
    }
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

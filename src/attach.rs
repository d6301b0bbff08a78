//! `rpctap attach ADDR`: the client of a running rpctap's live feed (`GET /events` on its
//! admin listener). A background task keeps the connection — reconnecting with a backoff when
//! it drops — and hands the dashboard the feed's header, its events (parsed as recording lines,
//! with the reader's types) and the connection's state.

use crate::admin::AdminAddr;
use crate::events::Event;
use crate::record::reader::parse_line;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::sync::mpsc;

/// What the feed task tells the dashboard.
#[derive(Debug)]
pub enum FeedMsg {
    /// Connected: the feed's header line (mode, listen, upstream or command, start time).
    Header(serde_json::Value),
    Event(Box<Event>),
    /// The feed's own markers (`{"event":"feed",…}`): the live point, the sampling stride.
    Marker(serde_json::Value),
    /// The connection's state, for the header (e.g. "feed lost: …; reconnecting").
    State(String),
    /// The admin listener refused this client (a token is needed, or the wrong one was
    /// given): the task stops — retrying cannot help.
    Refused(String),
}

/// Where the feed is.
#[derive(Clone, Debug)]
pub struct FeedTarget {
    pub addr: AdminAddr,
    /// The `Host` header and the text shown.
    pub host: String,
    /// The feed's path and query: `/events`, or `/events?filter=…`.
    pub path: String,
}

impl FeedTarget {
    /// Asks the feed for only what `filter` (the filter language) matches.
    pub fn with_filter(mut self, filter: &str) -> Self {
        let q: String = form_urlencoded::byte_serialize(filter.as_bytes()).collect();
        self.path = format!("/events?filter={q}");
        self
    }

    /// `http://HOST:PORT[/…]`, `IP:PORT`, `:PORT` or `unix:PATH`.
    pub fn parse(s: &str) -> Result<FeedTarget, String> {
        let bare = s
            .strip_prefix("http://")
            .map(|r| r.split('/').next().unwrap_or(r));
        let addr = match bare {
            Some(hp) => match crate::cli::parse_listen(hp) {
                Ok(a) => AdminAddr::Tcp(a),
                Err(_) => {
                    // A host name: resolved once, here.
                    use std::net::ToSocketAddrs;
                    let a = hp
                        .to_socket_addrs()
                        .map_err(|e| format!("{s:?}: {e}"))?
                        .next()
                        .ok_or_else(|| format!("{s:?}: no address"))?;
                    AdminAddr::Tcp(a)
                }
            },
            None => AdminAddr::parse(s)?,
        };
        let host = match &addr {
            AdminAddr::Tcp(a) => a.to_string(),
            AdminAddr::Unix(_) => "localhost".to_string(),
        };
        Ok(FeedTarget {
            addr,
            host,
            path: "/events".into(),
        })
    }
}

/// Why one connection ended.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("{0}")]
    Http(String),
    #[error("the feed needs a token: pass --token (or set RPCTAP_ADMIN_TOKEN)")]
    Unauthorized,
    #[error("the feed answered HTTP {0}")]
    Status(u16),
    #[error("the feed ended")]
    Ended,
}

/// Keeps the feed connected until `tx` is closed, reconnecting after a drop.
pub fn spawn(
    target: FeedTarget,
    token: Option<String>,
    tx: mpsc::Sender<FeedMsg>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut backoff = Duration::from_millis(250);
        loop {
            let r = stream_once(&target, token.as_deref(), &tx, &mut backoff).await;
            if tx.is_closed() {
                return;
            }
            let why = match r {
                Ok(()) => FeedError::Ended.to_string(),
                Err(e @ FeedError::Unauthorized) => {
                    let _ = tx.send(FeedMsg::Refused(e.to_string())).await;
                    return;
                }
                Err(e) => e.to_string(),
            };
            let _ = tx
                .send(FeedMsg::State(format!("feed lost ({why}); reconnecting…")))
                .await;
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(Duration::from_secs(2));
        }
    })
}

async fn stream_once(
    target: &FeedTarget,
    token: Option<&str>,
    tx: &mpsc::Sender<FeedMsg>,
    backoff: &mut Duration,
) -> Result<(), FeedError> {
    let req = {
        let mut b = http::Request::get(target.path.as_str())
            .header(http::header::HOST, &target.host)
            .header(http::header::ACCEPT, "application/x-ndjson");
        if let Some(t) = token {
            b = b.header(http::header::AUTHORIZATION, format!("Bearer {t}"));
        }
        b.body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| FeedError::Http(e.to_string()))?
    };
    let resp = match &target.addr {
        AdminAddr::Tcp(a) => {
            let s = tokio::net::TcpStream::connect(a)
                .await
                .map_err(FeedError::Connect)?;
            send(TokioIo::new(s), req).await?
        }
        AdminAddr::Unix(p) => {
            #[cfg(unix)]
            {
                let s = tokio::net::UnixStream::connect(p)
                    .await
                    .map_err(FeedError::Connect)?;
                send(TokioIo::new(s), req).await?
            }
            #[cfg(not(unix))]
            {
                let _ = p;
                return Err(FeedError::Connect(std::io::Error::other("no unix sockets")));
            }
        }
    };
    match resp.status().as_u16() {
        200 => {}
        401 => return Err(FeedError::Unauthorized),
        s => return Err(FeedError::Status(s)),
    }
    *backoff = Duration::from_millis(250);
    let mut body = resp.into_body();
    let mut partial: Vec<u8> = Vec::new();
    let mut first = true;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| FeedError::Http(e.to_string()))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        partial.extend_from_slice(&data);
        let mut start = 0;
        while let Some(i) = memchr::memchr(b'\n', &partial[start..]) {
            let line = String::from_utf8_lossy(&partial[start..start + i]).into_owned();
            start += i + 1;
            let msg = if first {
                first = false;
                match serde_json::from_str::<serde_json::Value>(&line) {
                    Ok(h) if h.get("rpctap_feed").is_some() => FeedMsg::Header(h),
                    _ => return Err(FeedError::Http("not an rpctap feed".into())),
                }
            } else if line.starts_with("{\"event\":\"feed\"") {
                match serde_json::from_str::<serde_json::Value>(&line) {
                    Ok(v) => FeedMsg::Marker(v),
                    Err(_) => continue,
                }
            } else {
                match parse_line(&line) {
                    Ok(ev) => FeedMsg::Event(Box::new(ev)),
                    Err(e) => {
                        tracing::debug!(error = %e, "feed line skipped");
                        continue;
                    }
                }
            };
            if tx.send(msg).await.is_err() {
                return Ok(());
            }
        }
        partial.drain(..start);
    }
    Ok(())
}

async fn send<I>(
    io: I,
    req: http::Request<http_body_util::Empty<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, FeedError>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| FeedError::Http(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| FeedError::Http(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feed_targets_as_users_type_them() {
        let t = FeedTarget::parse("http://127.0.0.1:9100/events").unwrap();
        assert_eq!(t.addr, AdminAddr::Tcp("127.0.0.1:9100".parse().unwrap()));
        let t = FeedTarget::parse(":9100").unwrap();
        assert_eq!(t.host, "127.0.0.1:9100");
        let t = FeedTarget::parse("unix:/tmp/x.sock").unwrap();
        assert_eq!(t.addr, AdminAddr::Unix("/tmp/x.sock".into()));
        assert!(FeedTarget::parse("nonsense").is_err());
    }
}

//! JSON-RPC over WebSocket: what the handshake negotiated (`permessage-deflate` and its
//! context takeover per direction), and the tee — the upgraded connection passes through byte
//! for byte in both directions as soon as bytes arrive, while a copy of each direction is decoded
//! ([`frame::Decoder`]) into whole messages that the inspector reads as one stream, one scope
//! per connection. A close frame or a dropped connection ends the calls still pending.

pub mod frame;

use crate::events::Direction;
use crate::inspect::{EndReason, ExchangeCtx};
use frame::{Decoder, Deflate, WsEvent};
use http::HeaderMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Whether a request asks to become a WebSocket (`Upgrade: websocket`).
pub fn is_websocket(h: &HeaderMap) -> bool {
    h.get_all(http::header::UPGRADE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("websocket"))
        })
}

/// The extensions the server's `101` accepted, as the decoders need them.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// permessage-deflate for the client's messages.
    pub client: Option<Deflate>,
    /// permessage-deflate for the server's messages.
    pub server: Option<Deflate>,
    /// An extension rpctap cannot decode (it may use the RSV bits): nothing is inspected.
    pub unknown: Option<String>,
}

/// Reads the `101` response's `Sec-WebSocket-Extensions`.
pub fn negotiated(h: &HeaderMap) -> Negotiated {
    let mut n = Negotiated::default();
    for v in h
        .get_all("sec-websocket-extensions")
        .iter()
        .filter_map(|v| v.to_str().ok())
    {
        for ext in v.split(',') {
            let mut parts = ext.split(';').map(str::trim);
            let name = parts.next().unwrap_or("");
            if name.is_empty() {
                continue;
            }
            if !name.eq_ignore_ascii_case("permessage-deflate") {
                n.unknown = Some(name.to_string());
                continue;
            }
            let (mut client, mut server) = (Deflate::default(), Deflate::default());
            for p in parts {
                let key = p.split('=').next().unwrap_or("").trim();
                if key.eq_ignore_ascii_case("client_no_context_takeover") {
                    client.no_context_takeover = true;
                } else if key.eq_ignore_ascii_case("server_no_context_takeover") {
                    server.no_context_takeover = true;
                }
                // Window sizes need nothing: inflating with the largest window reads any.
            }
            n.client = Some(client);
            n.server = Some(server);
        }
    }
    n
}

/// What the two directions share: the inspection, and the first close frame seen.
struct Shared {
    ctx: ExchangeCtx,
    close: Option<String>,
}

/// Passes the upgraded connection through and inspects it; returns when both directions are
/// done. `cap` is the largest message inspected.
pub async fn tee<C, U>(client: C, upstream: U, ctx: ExchangeCtx, neg: Negotiated, cap: usize)
where
    C: AsyncRead + AsyncWrite + Unpin,
    U: AsyncRead + AsyncWrite + Unpin,
{
    let shared = Arc::new(Mutex::new(Shared { ctx, close: None }));
    let inspect = match &neg.unknown {
        Some(ext) => {
            lock(&shared).ctx.not_inspected(
                Direction::ServerToClient,
                format!("the WebSocket negotiated the extension {ext}, which rpctap cannot decode: its messages are passed on, not inspected"),
            );
            false
        }
        None => true,
    };
    let (cr, cw) = tokio::io::split(client);
    let (ur, uw) = tokio::io::split(upstream);
    let up = pump(
        cr,
        uw,
        inspect.then(|| Decoder::new(cap, neg.client)),
        shared.clone(),
        Direction::ClientToServer,
    );
    let down = pump(
        ur,
        cw,
        inspect.then(|| Decoder::new(cap, neg.server)),
        shared.clone(),
        Direction::ServerToClient,
    );
    // Each direction runs until its reader ends (passing the end on); when one side has gone,
    // the other gets a moment to finish its closing handshake.
    tokio::pin!(up, down);
    tokio::select! {
        _ = &mut up => { let _ = tokio::time::timeout(LINGER, down).await; }
        _ = &mut down => { let _ = tokio::time::timeout(LINGER, up).await; }
    }
    let mut s = lock(&shared);
    let why = s
        .close
        .take()
        .unwrap_or_else(|| "the WebSocket connection ended without a close frame".into());
    s.ctx.end(EndReason::Closed(why));
}

/// How long the other direction may run once one has ended.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// One direction: what is read is written on at once, then a copy decoded. The std mutex is
/// taken only between awaits.
async fn pump<R, W>(
    mut r: R,
    mut w: W,
    mut dec: Option<Decoder>,
    shared: Arc<Mutex<Shared>>,
    dir: Direction,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 << 10];
    let mut events = Vec::new();
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
        let Some(d) = &mut dec else { continue };
        d.feed(&buf[..n], &mut events);
        if events.is_empty() {
            continue;
        }
        let mut s = lock(&shared);
        for ev in events.drain(..) {
            apply(&mut s, dir, ev);
        }
    }
    let _ = w.shutdown().await;
}

fn apply(s: &mut Shared, dir: Direction, ev: WsEvent) {
    match ev {
        WsEvent::Text(t) => s.ctx.line(dir, t),
        WsEvent::Binary { .. } | WsEvent::Ping | WsEvent::Pong => {}
        WsEvent::Oversized { len, compressed } => {
            if compressed {
                s.ctx.not_inspected(dir, format!(
                    "a compressed message ({len} bytes on the wire) inflating past the inspection cap: passed on, not inspected"
                ));
            } else {
                s.ctx.line_not_inspected(dir, len);
            }
        }
        WsEvent::ContextLost { len } => s.ctx.not_inspected(
            dir,
            format!("a compressed message ({len} bytes) after one too large to inflate shared its compression context: passed on, not inspected"),
        ),
        WsEvent::Close { code, reason } => {
            if s.close.is_none() {
                let side = match dir {
                    Direction::ClientToServer => "the client",
                    Direction::ServerToClient => "the server",
                };
                s.close = Some(match code {
                    Some(c) if reason.is_empty() => format!("WebSocket closed by {side}: {c}"),
                    Some(c) => format!("WebSocket closed by {side}: {c} {reason}"),
                    None => format!("WebSocket closed by {side} (no status code)"),
                });
            }
        }
        WsEvent::Error(why) => s.ctx.framing_error(dir, &why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_negotiated_deflate_per_direction() {
        let mut h = HeaderMap::new();
        h.insert(
            "sec-websocket-extensions",
            "permessage-deflate; server_no_context_takeover; client_max_window_bits=12"
                .parse()
                .unwrap(),
        );
        let n = negotiated(&h);
        assert_eq!(
            n.server,
            Some(Deflate {
                no_context_takeover: true
            })
        );
        assert_eq!(n.client, Some(Deflate::default()));
        assert_eq!(n.unknown, None);
        h.insert("sec-websocket-extensions", "x-webkit-foo".parse().unwrap());
        assert_eq!(negotiated(&h).unknown.as_deref(), Some("x-webkit-foo"));
        assert_eq!(negotiated(&HeaderMap::new()), Negotiated::default());
    }
}

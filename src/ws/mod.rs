//! JSON-RPC over WebSocket: what the handshake negotiated (`permessage-deflate` and its
//! context takeover per direction), and the tee — the upgraded connection passes through byte
//! for byte in both directions as soon as bytes arrive, while a copy of each direction is decoded
//! ([`frame::Decoder`]) into whole messages that the inspector reads as one stream, one scope
//! per connection. A close frame or a dropped connection ends the calls still pending.
//!
//! Rate limits: with rules in force when the connection upgrades, the client's data frames are
//! held until their message is whole (control frames pass at once; a message outgrowing the
//! inspection cap streams on, uninspected and so unlimited), so that a refused call can be taken
//! out. Its JSON-RPC error goes to the client as an unmasked text frame of rpctap's own, put in
//! between two of the server's messages — the one case where rpctap writes into the stream. A
//! batch with refused members goes on as a smaller batch in a frame of rpctap's (masked, not
//! compressed), and the refused members' errors come as their own batch. Leaving out (or
//! rewriting) a compressed message of a direction with context takeover would break the
//! server's inflating of every later message (they may refer back to it): from the first such
//! refusal on, rpctap re-sends that direction's data messages uncompressed, one frame each.

pub mod frame;

use crate::events::Direction;
use crate::inspect::{EndReason, ExchangeCtx};
use crate::intercept::Verdict;
use crate::limit::enforce::{limit_message, Forward};
use crate::limit::Limiter;
use bytes::Bytes;
use frame::{Decoder, Deflate, FrameEnd, WsEvent};
use http::HeaderMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

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

/// The rate limits of one WebSocket connection: the rules in force (read at each message, so
/// a reload applies) and the keys of the upgrade request.
pub struct Limits {
    pub rules: Arc<dyn Fn() -> Arc<Limiter> + Send + Sync>,
    pub peer: std::net::IpAddr,
    pub session: Option<String>,
    pub headers: HeaderMap,
    /// The dashboard's intercept, when a dashboard drives this proxy.
    pub intercept: Option<crate::intercept::Intercept>,
}

/// Passes the upgraded connection through and inspects it; returns when both directions are
/// done. `cap` is the largest message inspected; `limits`, when rules are in force.
pub async fn tee<C, U>(
    client: C,
    upstream: U,
    ctx: ExchangeCtx,
    neg: Negotiated,
    cap: usize,
    limits: Option<Limits>,
) where
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
    let limits = limits.filter(|_| inspect);
    let (cr, cw) = tokio::io::split(client);
    let (ur, uw) = tokio::io::split(upstream);
    // rpctap's own frames to the client (refusals), put in between the server's messages.
    let (to_client, injected) = match limits {
        Some(_) => {
            let (tx, rx) = mpsc::channel(64);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let up = {
        let shared = shared.clone();
        async move {
            match (limits, to_client) {
                (Some(l), Some(tx)) => {
                    let dec = Decoder::new(cap, neg.client).keep_binary();
                    limited(cr, uw, dec, shared, l, neg.client, tx, cap).await;
                }
                _ => {
                    let dec = inspect.then(|| Decoder::new(cap, neg.client).keep_binary());
                    pump(cr, uw, dec, shared, Direction::ClientToServer, None).await;
                }
            }
        }
    };
    let down = pump(
        ur,
        cw,
        // Binary messages kept: one that holds UTF-8 JSON is JSON-RPC (ganache's wsBinary).
        inspect.then(|| Decoder::new(cap, neg.server).keep_binary()),
        shared.clone(),
        Direction::ServerToClient,
        injected,
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

/// A fault the client's direction does before a message goes on.
enum WsBefore {
    Delay(std::time::Duration),
    Close,
}

/// A message's faults over WebSocket: the request-side ones returned, each recorded. The
/// reply-side ones are not applied over WebSocket yet (a server message would have to be
/// re-framed, and re-compressed under a shared deflate context): recorded as not applied.
fn ws_faults(
    ctx: &mut ExchangeCtx,
    faults: Vec<crate::limit::enforce::CallFault>,
) -> Vec<WsBefore> {
    use crate::fault::{Action, At};
    let mut out = Vec::new();
    for f in faults {
        let detail = match &f.fired.action {
            Action::Delay(d, At::Request) => {
                out.push(WsBefore::Delay(*d));
                format!("the request held {}", crate::units::show_secs(*d))
            }
            Action::Close => {
                out.push(WsBefore::Close);
                "the WebSocket connection dropped when the call arrived".to_string()
            }
            a => format!(
                "not applied: `{}` on a reply is not done over WebSocket yet",
                a.name()
            ),
        };
        ctx.fault(&f.fired, Some(&f.id), Some(&f.method), None, detail);
    }
    out
}

/// How long the other direction may run once one has ended.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

fn lock(s: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The next frame rpctap puts in; never, without a channel.
async fn next_injected(rx: &mut Option<mpsc::Receiver<Bytes>>) -> Option<Bytes> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// One direction: what is read is written on at once, then a copy decoded. The std mutex is
/// taken only between awaits. `inject`: frames of rpctap's own to put in between two messages
/// (the server's direction, with rate limits).
async fn pump<R, W>(
    mut r: R,
    mut w: W,
    mut dec: Option<Decoder>,
    shared: Arc<Mutex<Shared>>,
    dir: Direction,
    mut inject: Option<mpsc::Receiver<Bytes>>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 16 << 10];
    let mut events = Vec::new();
    'read: loop {
        let between = dec.as_ref().is_some_and(Decoder::at_message_boundary);
        let n = tokio::select! {
            biased;
            f = next_injected(&mut inject), if between && inject.is_some() => {
                match f {
                    // Empty: a `close` fault — the client's connection dropped.
                    Some(f) if f.is_empty() => {
                        let _ = w.shutdown().await;
                        break;
                    }
                    Some(f) => {
                        if w.write_all(&f).await.is_err() {
                            break;
                        }
                    }
                    None => inject = None,
                }
                continue;
            }
            n = r.read(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            },
        };
        let Some(d) = &mut dec else {
            if w.write_all(&buf[..n]).await.is_err() {
                break;
            }
            continue;
        };
        match &mut inject {
            // A frame of rpctap's waits: the bytes go on frame by frame, and it goes in at the
            // first boundary between two messages.
            Some(rx) if !rx.is_empty() => {
                let mut at = 0;
                while at < n {
                    let (k, _) = d.feed_frame(&buf[at..n], &mut events);
                    if w.write_all(&buf[at..at + k]).await.is_err() {
                        break 'read;
                    }
                    at += k;
                    while d.at_message_boundary() {
                        let Ok(f) = rx.try_recv() else { break };
                        if w.write_all(&f).await.is_err() {
                            break 'read;
                        }
                    }
                }
            }
            _ => {
                if w.write_all(&buf[..n]).await.is_err() {
                    break;
                }
                d.feed(&buf[..n], &mut events);
            }
        }
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

/// Held bytes beyond the cap by this much mean the message cannot inflate to within the cap
/// (deflate grows incompressible data by far less): it streams on, uninspected.
fn hold_limit(cap: usize) -> usize {
    cap + cap / 8 + 1024
}

/// The client's direction under rate limits: a data message is held until whole, then
/// inspected and decided; control frames go on at once.
#[allow(clippy::too_many_arguments)]
async fn limited<R, W>(
    mut r: R,
    mut w: W,
    mut dec: Decoder,
    shared: Arc<Mutex<Shared>>,
    lim: Limits,
    deflate: Option<Deflate>,
    to_client: mpsc::Sender<Bytes>,
    cap: usize,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let dir = Direction::ClientToServer;
    let takeover = deflate.is_some_and(|d| !d.no_context_takeover);
    // From the first compressed message left out (with context takeover) on: data messages are
    // re-sent uncompressed from what was decoded.
    let mut rewrite = false;
    // The current frame's bytes, and the current message's frames not yet passed on.
    let (mut cur, mut held): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
    // The message outgrew the hold: its bytes (and anything between them) go on as they come.
    let mut streaming = false;
    let mut buf = vec![0u8; 16 << 10];
    let mut events = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let mut replies: Vec<Bytes> = Vec::new();
    let mut fatal = false;
    // Request-side faults of the messages read: a delay before they go on, or a close.
    let mut before: Vec<WsBefore> = Vec::new();
    // A message the dashboard's intercept holds: its verdict to come, its text, its frames as
    // they came, whether it was compressed, and whether those frames can go on as they are.
    #[allow(clippy::type_complexity)]
    let mut intercepted: Option<(HoldOf, Bytes, Vec<u8>, bool, bool)> = None;
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let mut at = 0;
        while at < n {
            if dec.failed() {
                // Not RFC 6455 framing: nothing can be decided any more; all goes on.
                out.extend_from_slice(&buf[at..n]);
                break;
            }
            let (k, end) = dec.feed_frame(&buf[at..n], &mut events);
            let piece = &buf[at..at + k];
            at += k;
            if streaming {
                out.extend_from_slice(piece);
            } else if !(rewrite && dec.in_data_frame()) {
                // (In rewrite mode a data frame's own bytes are dropped: its message is re-sent.)
                cur.extend_from_slice(piece);
            }
            if rewrite
                && (dec.in_data_frame()
                    || matches!(end, Some(FrameEnd::Fragment | FrameEnd::Final)))
            {
                cur.clear();
            }
            match end {
                Some(FrameEnd::Control) => out.append(&mut cur),
                Some(FrameEnd::Fragment) => held.append(&mut cur),
                Some(FrameEnd::Final) => {
                    held.append(&mut cur);
                    let was_streaming = std::mem::replace(&mut streaming, false);
                    let compressed = held.first().is_some_and(|b| b & 0x40 != 0);
                    let rules = (lim.rules)();
                    let keys = crate::limit::RequestKeys {
                        peer: lim.peer,
                        session: lim.session.as_deref(),
                        headers: &lim.headers,
                    };
                    // Rules counted in a shared store are asked first, outside the lock.
                    let mut verdicts = None;
                    if rules.has_shared() && !was_streaming {
                        if let Some(WsEvent::Text(t)) =
                            events.iter().find(|e| matches!(e, WsEvent::Text(_)))
                        {
                            let parsed = crate::rpc::parse_body(t);
                            verdicts = Some(
                                crate::limit::enforce::ask_shared(&rules, &parsed, &keys).await,
                            );
                        }
                    }
                    {
                        let mut s = lock(&shared);
                        for ev in events.drain(..) {
                            let keep_raw = !rewrite && !was_streaming;
                            match ev {
                                WsEvent::Text(t) if !was_streaming => {
                                    let l = limit_message(
                                        &rules,
                                        &mut s.ctx,
                                        dir,
                                        t.clone(),
                                        &keys,
                                        verdicts.as_mut(),
                                    );
                                    let dropped = l.forward != Forward::Unchanged;
                                    if !dropped && l.reply.is_none() {
                                        if let Some(p) = lim
                                            .intercept
                                            .as_ref()
                                            .and_then(|ic| hold(ic, &s.ctx, &t))
                                        {
                                            // Decided below, outside the lock; what follows
                                            // waits with it (a WebSocket is one ordered stream).
                                            intercepted = Some((
                                                p,
                                                t,
                                                std::mem::take(&mut held),
                                                compressed,
                                                keep_raw,
                                            ));
                                            before.extend(ws_faults(&mut s.ctx, l.faults));
                                            continue;
                                        }
                                    }
                                    match l.forward {
                                        Forward::Unchanged if keep_raw => out.append(&mut held),
                                        Forward::Unchanged => out.extend(frame::encode(
                                            true,
                                            false,
                                            0x1,
                                            &t,
                                            Some(mask()),
                                        )),
                                        Forward::Smaller(b) => out.extend(frame::encode(
                                            true,
                                            false,
                                            0x1,
                                            &b,
                                            Some(mask()),
                                        )),
                                        Forward::Nothing => {}
                                    }
                                    if dropped {
                                        held.clear();
                                        rewrite |= takeover && compressed;
                                    }
                                    replies.extend(l.reply.map(|r| {
                                        Bytes::from(frame::encode(true, false, 0x1, &r, None))
                                    }));
                                    before.extend(ws_faults(&mut s.ctx, l.faults));
                                }
                                WsEvent::BinaryData(b) if rewrite => {
                                    out.extend(frame::encode(true, false, 0x2, &b, Some(mask())));
                                }
                                WsEvent::BinaryData(_) => out.append(&mut held),
                                WsEvent::Oversized { .. } | WsEvent::ContextLost { .. }
                                    if rewrite =>
                                {
                                    // Not inflated, so it cannot be re-sent: the connection cannot
                                    // go on.
                                    s.ctx.not_inspected(dir, "a message too large to inspect after rpctap had to re-send the client's messages uncompressed: it cannot be passed on, and the connection is closed".into());
                                    fatal = true;
                                }
                                other => {
                                    if matches!(
                                        other,
                                        WsEvent::Oversized { .. } | WsEvent::ContextLost { .. }
                                    ) && keep_raw
                                    {
                                        out.append(&mut held);
                                    }
                                    apply(&mut s, dir, other);
                                }
                            }
                        }
                    }
                    held.clear();
                    if let Some((p, t, raw, compressed, keep_raw)) = intercepted.take() {
                        if w.write_all(&out).await.is_err() {
                            break;
                        }
                        out.clear();
                        let (d, id, method) = (p.0.wait().await, p.1, p.2);
                        lock(&shared)
                            .ctx
                            .intercepted(&d, dir, id.as_ref(), Some(&method));
                        let text = |b: &[u8]| frame::encode(true, false, 0x1, b, Some(mask()));
                        match d.verdict {
                            Verdict::Forward if keep_raw => out.extend_from_slice(&raw),
                            Verdict::Forward => out.extend(text(&t)),
                            Verdict::Edit(b) => {
                                out.extend(text(&b));
                                rewrite |= takeover && compressed;
                            }
                            Verdict::Drop => rewrite |= takeover && compressed,
                            Verdict::Answer(b) => {
                                replies
                                    .push(Bytes::from(frame::encode(true, false, 0x1, &b, None)));
                                rewrite |= takeover && compressed;
                            }
                        }
                    }
                    if fatal {
                        // 1009: message too big (RFC 6455 §7.4.1), to both sides.
                        let close = |m| frame::encode(true, false, 0x8, &1009u16.to_be_bytes(), m);
                        let _ = w.write_all(&out).await;
                        let _ = w.write_all(&close(Some(mask()))).await;
                        let _ = w.shutdown().await;
                        let _ = to_client.send(Bytes::from(close(None))).await;
                        return;
                    }
                }
                None => {
                    if !streaming && !rewrite && held.len() + cur.len() > hold_limit(cap) {
                        streaming = true;
                        out.append(&mut held);
                        out.append(&mut cur);
                    }
                }
            }
            if dec.failed() && !rewrite {
                out.append(&mut held);
                out.append(&mut cur);
            }
            if !events.is_empty() {
                // Control frames' events (a close, a ping).
                let mut s = lock(&shared);
                for ev in events.drain(..) {
                    apply(&mut s, dir, ev);
                }
            }
        }
        let mut close = false;
        for b in before.drain(..) {
            match b {
                WsBefore::Delay(d) => tokio::time::sleep(d).await,
                WsBefore::Close => close = true,
            }
        }
        if close {
            // `close`: both sides' connections dropped, no close frame (a crash, as a client sees it).
            let _ = w.shutdown().await;
            let _ = to_client.send(Bytes::new()).await;
            return;
        }
        if !out.is_empty() {
            if w.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
        for f in replies.drain(..) {
            if to_client.send(f).await.is_err() {
                break;
            }
        }
    }
    // A message never finished: what the client sent goes on as it is.
    if !rewrite {
        held.append(&mut cur);
        let _ = w.write_all(&held).await;
    }
    let _ = w.shutdown().await;
}

/// A held client message: its verdict to come, its id and method.
type HoldOf = (crate::intercept::Pending, Option<crate::rpc::Id>, String);

/// Holds a client message when the intercept's filter matches it.
fn hold(ic: &crate::intercept::Intercept, ctx: &ExchangeCtx, t: &Bytes) -> Option<HoldOf> {
    crate::intercept::hold_body(ic, Direction::ClientToServer, t, &ctx.scope_text(), |_| {
        None
    })
}

/// A masking key for a frame of rpctap's own to the server (RFC 6455 §5.3: unpredictable).
fn mask() -> [u8; 4] {
    let mut k = [0u8; 4];
    if getrandom::fill(&mut k).is_err() {
        k = [0x5a, 0xc3, 0x9e, 0x17];
    }
    k
}

fn apply(s: &mut Shared, dir: Direction, ev: WsEvent) {
    match ev {
        WsEvent::Text(t) => s.ctx.line(dir, t),
        WsEvent::Binary { len } => s.ctx.binary(dir, len),
        WsEvent::BinaryData(b) => s.ctx.binary_message(dir, b),
        WsEvent::Ping | WsEvent::Pong => {}
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

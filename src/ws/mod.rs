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
//!
//! Both directions decide message by message in one loop (`whole`, per `Side`): the
//! client's by the rules, the server's by the reply faults the client's calls armed
//! (`crate::flow::fault`: dropped, doubled, renamed, cut, held, slowed) — run only when fault rules
//! exist as the connection opens — and either by the dashboard's intercept. What a message
//! becomes is planned under the lock and carried out after it (`Step`).

pub mod frame;

use crate::events::Direction;
use crate::inspect::{EndReason, ExchangeCtx};
use crate::limit::enforce::{limit_message, Forward};
use crate::limit::Limiter;
use crate::locks::Locked as _;
use bytes::Bytes;
use frame::{Decoder, Deflate, FrameEnd, WsEvent};
use http::HeaderMap;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;

/// Whether a request asks to become a WebSocket (`Upgrade: websocket`).
pub fn is_websocket(h: &HeaderMap) -> bool {
    // Every token names WebSocket (RFC 6455 sends exactly one): a list that offers another
    // protocol too would let the upstream switch to one nothing here inspects.
    let mut tokens = h
        .get_all(http::header::UPGRADE)
        .iter()
        .flat_map(|v| v.to_str().unwrap_or(",").split(','))
        .map(str::trim)
        .peekable();
    tokens.peek().is_some() && tokens.all(|t| t.eq_ignore_ascii_case("websocket"))
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

/// What the two directions share: the inspection, the first close frame seen, and what the
/// client's direction arms for the server's (reply faults by call id, a cut, the calls for the
/// intercept's filter).
struct Shared {
    ctx: ExchangeCtx,
    close: Option<String>,
    armed: crate::flow::fault::Armed,
    cut: Option<crate::flow::fault::Cut>,
    calls: Vec<(crate::rpc::Id, Arc<str>, Option<Arc<str>>)>,
    /// Faults armed on the client's answers to the server's requests (`direction = "s2c"`).
    answers: crate::flow::fault::Armed,
}

/// The rate limits of one WebSocket connection: the rules in force (read at each message, so
/// a reload applies) and the keys of the upgrade request.
pub struct Limits {
    pub rules: Arc<dyn Fn() -> Arc<Limiter> + Send + Sync>,
    pub peer: std::net::IpAddr,
    pub session: Option<String>,
    pub headers: HeaderMap,
    /// The dashboard's intercept, when a dashboard drives this proxy.
    pub intercept: Option<crate::flow::intercept::Intercept>,
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
    let shared = Arc::new(Mutex::new(Shared {
        ctx,
        close: None,
        armed: Default::default(),
        cut: None,
        calls: Vec::new(),
        answers: Default::default(),
    }));
    let inspect = match &neg.unknown {
        Some(ext) => {
            shared.locked().ctx.not_inspected(
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
    // The server's messages are decided one by one when faults can act on them or a dashboard
    // may hold them; else they pass as they come.
    let server_whole = limits
        .as_ref()
        .is_some_and(|l| l.intercept.is_some() || !(l.rules)().stages.is_empty());
    let server_intercept = limits.as_ref().and_then(|l| l.intercept.clone());
    // rpctap's own frames to the client (refusals), put in between the server's messages; and
    // to the server (answers to its requests in the client's place), between the client's.
    let (to_client, injected) = match limits {
        Some(_) => {
            let (tx, rx) = mpsc::channel(64);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    // rpctap's own frames to the server (answers in the client's place, delayed messages).
    let (to_server, to_server_rx) = match limits {
        Some(_) => {
            let (tx, rx) = mpsc::channel(64);
            (Some(tx), Some(rx))
        }
        None => (None, None),
    };
    let requests = match (limits.as_ref().filter(|_| server_whole), &to_server) {
        (Some(l), Some(tx)) => Some(Requests {
            rules: l.rules.clone(),
            peer: l.peer,
            session: l.session.clone(),
            headers: l.headers.clone(),
            to_server: tx.clone(),
        }),
        _ => None,
    };
    let later_to_client = to_client.clone();
    let up = {
        let shared = shared.clone();
        async move {
            match (limits, to_client, to_server) {
                (Some(lim), Some(to_client), Some(later)) => {
                    let dec = Decoder::new(cap, neg.client).keep_binary();
                    let side = Side::Client {
                        lim,
                        to_client,
                        replies: server_whole,
                        inject: to_server_rx,
                        later,
                    };
                    whole(cr, uw, dec, shared, side, (neg.client, cap)).await;
                }
                _ => {
                    let dec = inspect.then(|| Decoder::new(cap, neg.client).keep_binary());
                    pump(cr, uw, dec, shared, Direction::ClientToServer, None).await;
                }
            }
        }
    };
    let down = {
        let shared = shared.clone();
        async move {
            // Binary messages kept: one that holds UTF-8 JSON is JSON-RPC (ganache's wsBinary).
            if server_whole {
                let dec = Decoder::new(cap, neg.server).keep_binary();
                let side = Side::Server {
                    inject: injected,
                    intercept: server_intercept,
                    requests,
                    later: later_to_client,
                };
                whole(ur, cw, dec, shared, side, (neg.server, cap)).await;
            } else {
                let dec = inspect.then(|| Decoder::new(cap, neg.server).keep_binary());
                pump(ur, cw, dec, shared, Direction::ServerToClient, injected).await;
            }
        }
    };
    // Each direction runs until its reader ends (passing the end on); when one side has gone,
    // the other gets a moment to finish its closing handshake.
    tokio::pin!(up, down);
    tokio::select! {
        _ = &mut up => { let _ = tokio::time::timeout(LINGER, down).await; }
        _ = &mut down => { let _ = tokio::time::timeout(LINGER, up).await; }
    }
    let mut s = shared.locked();
    let why = s
        .close
        .take()
        .unwrap_or_else(|| "the WebSocket connection ended without a close frame".into());
    s.ctx.end(EndReason::Closed(why));
}

/// What a direction does next for one message, in order, once the lock is released.
enum Step {
    /// Bytes to the peer.
    Write(Vec<u8>),
    /// A frame of rpctap's own back to the peer that sent the message: the client (a refusal,
    /// an answer) or the server (an answer to its request in the client's place).
    Reply(Bytes),
    /// A message held by a `delay` fault: sent after this long, between two of this direction's
    /// messages — the others pass meanwhile, as calls over HTTP are each their own request.
    Later(Vec<u8>, std::time::Duration),
    /// Bytes written at this many bytes a second (`throttle`).
    Slow(Vec<u8>, u64),
    /// The connection dropped: both sides' (`close`: true), or the client's (a cut).
    Close(bool),
    /// A message the dashboard's intercept holds: it alone waits; sent as decided.
    Held(Box<HeldMsg>),
}

/// A held message: its verdict to come, its text, and whether it was compressed (its frames
/// are not sent: what the verdict says goes in their place, uncompressed).
struct HeldMsg {
    hold: HoldOf,
    text: Bytes,
    compressed: bool,
}

impl HeldMsg {
    fn step(hold: HoldOf, text: Bytes, compressed: bool) -> Step {
        Step::Held(Box::new(HeldMsg {
            hold,
            text,
            compressed,
        }))
    }
}

/// The plan for one message, built under the lock.
#[derive(Default)]
struct Plan {
    steps: Vec<Step>,
    out: Vec<u8>,
}

impl Plan {
    fn write(&mut self, b: &[u8]) {
        self.out.extend_from_slice(b);
    }

    fn step(&mut self, s: Step) {
        if !self.out.is_empty() {
            self.steps.push(Step::Write(std::mem::take(&mut self.out)));
        }
        self.steps.push(s);
    }

    fn finish(mut self) -> Vec<Step> {
        if !self.out.is_empty() {
            self.steps.push(Step::Write(self.out));
        }
        self.steps
    }
}

/// The direction [`whole`] runs for, and what only it has.
enum Side {
    /// The client's messages: the rate limits and faults decide them (inspecting them); rpctap's
    /// own replies go to the server's direction on `to_client`. `replies`: whether that
    /// direction applies the reply-side faults armed here.
    Client {
        lim: Limits,
        to_client: mpsc::Sender<Bytes>,
        replies: bool,
        /// rpctap's own frames for the server (answers to its requests, delayed messages),
        /// put between two of the client's messages.
        inject: Option<mpsc::Receiver<Bytes>>,
        /// The way into `inject`, for this direction's delayed messages.
        later: mpsc::Sender<Bytes>,
    },
    /// The server's messages: the reply faults the client's calls armed, the intercept, the
    /// `direction = "s2c"` rules on the server's requests; rpctap's own frames for the client
    /// come in on `inject`, put between two messages.
    Server {
        inject: Option<mpsc::Receiver<Bytes>>,
        intercept: Option<crate::flow::intercept::Intercept>,
        requests: Option<Requests>,
        /// The way into `inject`, for this direction's delayed messages.
        later: Option<mpsc::Sender<Bytes>>,
    },
}

/// What the server's direction needs to decide the server's requests: the rules in force, the
/// upgrade request's keys, and the way to the server for rpctap's answers.
struct Requests {
    rules: Arc<dyn Fn() -> Arc<Limiter> + Send + Sync>,
    peer: std::net::IpAddr,
    session: Option<String>,
    headers: HeaderMap,
    to_server: mpsc::Sender<Bytes>,
}

impl Side {
    fn dir(&self) -> Direction {
        match self {
            Side::Client { .. } => Direction::ClientToServer,
            Side::Server { .. } => Direction::ServerToClient,
        }
    }

    /// A frame of rpctap's own towards this direction's peer (masked to a server, RFC 6455
    /// §5.3; never to a client).
    fn frame(&self, opcode: u8, payload: &[u8]) -> Vec<u8> {
        let key = matches!(self, Side::Client { .. }).then(mask);
        frame::encode(true, false, opcode, payload, key)
    }

    /// Where rpctap's own frames for this direction's peer wait.
    fn inject(&mut self) -> &mut Option<mpsc::Receiver<Bytes>> {
        match self {
            Side::Client { inject, .. } | Side::Server { inject, .. } => inject,
        }
    }

    /// Where this direction's delayed messages go in (between two of its messages).
    fn later(&self) -> Option<mpsc::Sender<Bytes>> {
        match self {
            Side::Client { later, .. } => Some(later.clone()),
            Side::Server { later, .. } => later.clone(),
        }
    }

    fn intercept(&self) -> Option<&crate::flow::intercept::Intercept> {
        match self {
            Side::Client { lim, .. } => lim.intercept.as_ref(),
            Side::Server { intercept, .. } => intercept.as_ref(),
        }
        .filter(|i| i.is_on())
    }
}

/// A client message's faults: the request-side ones planned (a `delay` returned: the caller
/// sends the message later); the reply-side ones armed for the server's direction (`replies`),
/// else recorded as not applied. Each recorded when done.
fn ws_faults(
    s: &mut Shared,
    faults: Vec<crate::limit::enforce::CallFault>,
    replies: bool,
    plan: &mut Plan,
) -> Option<std::time::Duration> {
    let t = crate::limit::enforce::triage(
        faults,
        [
            "the WebSocket connection dropped when the call arrived",
            "the WebSocket connection dropped when the server's request arrived",
        ],
    );
    if t.close {
        plan.step(Step::Close(true));
    }
    // Recorded when the client's answer passes.
    for f in t.answers {
        s.answers.arm(&f.id, f.fired, &f.method);
    }
    let mut now = t.now;
    for f in t.cuts.into_iter().chain(t.replies) {
        if !replies {
            let detail = format!(
                "not applied: `{}` on a reply (this connection opened before fault rules existed)",
                f.fired.action.name()
            );
            now.push((f, detail));
        } else if matches!(
            f.fired.action,
            crate::flow::fault::Action::CutStreamAfter { .. }
        ) {
            // Recorded when the cut happens.
            s.cut = crate::flow::fault::Cut::of(&f.fired, &f.id, &f.method);
        } else {
            s.armed.arm(&f.id, f.fired, &f.method);
        }
    }
    for (f, detail) in now {
        s.ctx
            .fault(&f.fired, Some(&f.id), Some(&f.method), None, detail);
    }
    t.delay
}

/// One whole text message of the server's under the faults its call armed: (planned — else it
/// goes on unchanged —, its bytes changed).
fn server_faults(side: &Side, s: &mut Shared, t: &Bytes, plan: &mut Plan) -> (bool, bool) {
    if let Some(c) = crate::flow::fault::Cut::due(&mut s.cut) {
        s.ctx.fault(
            &c.fired,
            Some(&c.id),
            Some(&c.method),
            None,
            "the WebSocket connection cut before this message".into(),
        );
        plan.step(Step::Close(false));
        return (true, false);
    }
    let Some(armed) =
        crate::flow::fault::reply_id(t).and_then(|id| s.armed.take(&id).map(|(f, m)| (id, f, m)))
    else {
        return (false, false);
    };
    armed_reply(side, s, t, plan, armed)
}

/// A reply — the server's to a client's call, or the client's answer to a server's request —
/// under the fault armed for it: (planned — else it goes on unchanged —, its bytes changed).
fn armed_reply(
    side: &Side,
    s: &mut Shared,
    t: &Bytes,
    plan: &mut Plan,
    (id, fired, method): (crate::rpc::Id, crate::flow::fault::Fired, Arc<str>),
) -> (bool, bool) {
    use crate::flow::fault::{Action, At};
    let what = match fired.direction {
        Direction::ClientToServer => "the reply",
        Direction::ServerToClient => "the client's answer",
    };
    if let Some(r) = crate::flow::fault::reshape(&fired, t) {
        for f in &r.frames {
            plan.write(&side.frame(0x1, f));
        }
        s.ctx
            .fault(&fired, Some(&id), Some(&method), r.made, r.detail.into());
        return (true, true);
    }
    let (detail, planned) = match &fired.action {
        Action::Delay(d, At::Reply) => {
            // It alone waits: what its peer sends after it passes meanwhile.
            plan.step(Step::Later(side.frame(0x1, t), *d));
            (format!("{what} held {}", crate::units::show_secs(*d)), true)
        }
        Action::Throttle(bps) => {
            plan.step(Step::Slow(side.frame(0x1, t), *bps));
            (format!("{what} written at {bps} bytes a second"), true)
        }
        _ => return (false, false),
    };
    s.ctx.fault(&fired, Some(&id), Some(&method), None, detail);
    (planned, planned)
}

/// Messages held by `delay` faults across every connection, at most [`MAX_LATER`] at once: past
/// that a held message goes at once, so memory is bounded by configuration, not by traffic.
static LATER: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
const MAX_LATER: usize = 4096;

/// Takes a place among the held messages; false when they are full.
fn later_room() -> bool {
    LATER
        .fetch_update(
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
            |n| (n < MAX_LATER).then_some(n + 1),
        )
        .is_ok()
}

/// A message a `delay` holds (`t` as it came, or what the rules let `forward` of it) sent after
/// `d`, in between two of this direction's messages.
fn send_later(side: &Side, plan: &mut Plan, forward: &Forward, t: &Bytes, d: std::time::Duration) {
    let b = match forward {
        Forward::Unchanged => t,
        Forward::Smaller(b) => b,
        Forward::Nothing => return,
    };
    plan.step(Step::Later(side.frame(0x1, b), d));
}

/// How long the other direction may run once one has ended.
const LINGER: std::time::Duration = std::time::Duration::from_secs(5);

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
        let mut s = shared.locked();
        for ev in events.drain(..) {
            apply(&mut s, dir, ev);
        }
    }
    let _ = w.shutdown().await;
}

/// Whether this direction refuses a message too large to inspect: the client's, while a rule
/// is in force or the intercept is on (nothing runs undecided); else it streams on.
fn refuses_too_large(side: &Side) -> bool {
    match side {
        Side::Client { lim, .. } => {
            !(lim.rules)().is_empty() || lim.intercept.as_ref().is_some_and(|i| i.is_on())
        }
        Side::Server { .. } => false,
    }
}

/// Closes the connection with 1009 (message too big, RFC 6455 §7.4.1) to both sides, after
/// `out` (what came before the message).
async fn too_big<W: AsyncWrite + Unpin>(side: &Side, w: &mut W, out: &[u8]) {
    let close = |m| frame::encode(true, false, 0x8, &1009u16.to_be_bytes(), m);
    let _ = w.write_all(out).await;
    match side {
        Side::Client { to_client, .. } => {
            let _ = w.write_all(&close(Some(mask()))).await;
            let _ = w.shutdown().await;
            let _ = to_client.send(Bytes::from(close(None))).await;
        }
        Side::Server { .. } => {
            let _ = w.write_all(&close(None)).await;
            let _ = w.shutdown().await;
        }
    }
}

/// Held bytes beyond the cap by this much mean the message cannot inflate to within the cap
/// (deflate grows incompressible data by far less): it streams on, uninspected.
fn hold_limit(cap: usize) -> usize {
    cap + cap / 8 + 1024
}

/// One direction, message by message: a data message is held until whole, then inspected and
/// decided — the client's by the rate limits and faults, the server's by the reply faults its
/// call armed — and the dashboard's intercept may hold either; control frames go on at once.
/// Used when rules are in force or a dashboard drives the proxy (else [`pump`] passes bytes
/// as they come).
async fn whole<R, W>(
    mut r: R,
    mut w: W,
    mut dec: Decoder,
    shared: Arc<Mutex<Shared>>,
    mut side: Side,
    (deflate, cap): (Option<Deflate>, usize),
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    use crate::flow::intercept::Verdict;
    let dir = side.dir();
    let takeover = deflate.is_some_and(|d| !d.no_context_takeover);
    // From the first compressed message left out or changed (with context takeover) on: data
    // messages are re-sent uncompressed from what was decoded (the peer's inflater never saw
    // the original).
    let mut rewrite = false;
    // The current frame's bytes, and the current message's frames not yet passed on.
    let (mut cur, mut held): (Vec<u8>, Vec<u8>) = (Vec::new(), Vec::new());
    // The message outgrew the hold: its bytes (and anything between them) go on as they come.
    let mut streaming = false;
    let mut buf = vec![0u8; 16 << 10];
    let mut events = Vec::new();
    let mut out: Vec<u8> = Vec::new();
    let mut fatal = false;
    'read: loop {
        let between = held.is_empty() && cur.is_empty() && !streaming;
        let n = match side.inject() {
            // rpctap's own frames for this direction's peer go in between two messages.
            Some(rx) if between => {
                tokio::select! {
                    biased;
                    f = rx.recv() => {
                        match f {
                            // Empty: a `close` fault — this side's connection dropped.
                            Some(f) if f.is_empty() => {
                                let _ = w.shutdown().await;
                                return;
                            }
                            Some(f) => {
                                if w.write_all(&f).await.is_err() {
                                    break 'read;
                                }
                            }
                            None => *side.inject() = None,
                        }
                        continue 'read;
                    }
                    n = r.read(&mut buf) => n,
                }
            }
            _ => r.read(&mut buf).await,
        };
        let n = match n {
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
                    let mut plan = Plan::default();
                    match &side {
                        Side::Client { lim, .. } => {
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
                                        crate::limit::enforce::ask_shared(&rules, &parsed, &keys)
                                            .await,
                                    );
                                }
                            }
                            let mut s = shared.locked();
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
                                        let replies =
                                            matches!(side, Side::Client { replies: true, .. });
                                        let delay = ws_faults(&mut s, l.faults, replies, &mut plan);
                                        // The client's answer to a server's request an s2c
                                        // fault was armed on.
                                        let answer = (!s.answers.is_empty())
                                            .then(|| crate::flow::fault::reply_id(&t))
                                            .flatten()
                                            .and_then(|id| {
                                                s.answers.take(&id).map(|(f, m)| (id, f, m))
                                            });
                                        if let Some(a) = answer {
                                            let (done, changed) =
                                                armed_reply(&side, &mut s, &t, &mut plan, a);
                                            rewrite |= takeover
                                                && compressed
                                                && (changed || (done && !keep_raw));
                                            if done {
                                                continue;
                                            }
                                        }
                                        if let Some(d) = delay {
                                            // The call alone waits; the client's later
                                            // messages pass meanwhile.
                                            send_later(&side, &mut plan, &l.forward, &t, d);
                                            rewrite |= takeover && compressed;
                                            if let Some(r) = l.reply {
                                                plan.step(Step::Reply(Bytes::from(frame::encode(
                                                    true, false, 0x1, &r, None,
                                                ))));
                                            }
                                            continue;
                                        }
                                        let dropped = l.forward != Forward::Unchanged;
                                        let ic = side.intercept();
                                        if ic.is_some() {
                                            remember_calls(&mut s, &t);
                                        }
                                        let hold = ic
                                            .filter(|_| !dropped && l.reply.is_none())
                                            .and_then(|ic| hold(ic, dir, &s, &t));
                                        if let Some(h) = hold {
                                            held.clear();
                                            plan.step(HeldMsg::step(h, t, compressed));
                                            continue;
                                        }
                                        match l.forward {
                                            Forward::Unchanged if keep_raw => plan.write(&held),
                                            Forward::Unchanged => plan.write(&side.frame(0x1, &t)),
                                            Forward::Smaller(b) => plan.write(&side.frame(0x1, &b)),
                                            Forward::Nothing => {}
                                        }
                                        if dropped {
                                            rewrite |= takeover && compressed;
                                        }
                                        if let Some(r) = l.reply {
                                            plan.step(Step::Reply(Bytes::from(frame::encode(
                                                true, false, 0x1, &r, None,
                                            ))));
                                        }
                                    }
                                    WsEvent::BinaryData(b) if rewrite => {
                                        plan.write(&side.frame(0x2, &b));
                                    }
                                    WsEvent::BinaryData(_) => plan.write(&held),
                                    other => {
                                        fatal |= passed(
                                            &mut s, &side, dir, other, rewrite, keep_raw, &held,
                                            &mut plan,
                                        );
                                    }
                                }
                            }
                        }
                        Side::Server { requests, .. } => {
                            // The `direction = "s2c"` rules in force, when there are any.
                            let rules = requests
                                .as_ref()
                                .map(|r| (r.rules)())
                                .filter(|l| l.stages.wants(Direction::ServerToClient));
                            let mut s = shared.locked();
                            for ev in events.drain(..) {
                                let keep_raw = !rewrite && !was_streaming;
                                match ev {
                                    WsEvent::Text(t) if !was_streaming => {
                                        // The inspector sees what the server sent.
                                        if let (Some(rules), Some(rq)) = (&rules, requests) {
                                            let keys = crate::limit::RequestKeys {
                                                peer: rq.peer,
                                                session: rq.session.as_deref(),
                                                headers: &rq.headers,
                                            };
                                            let l = limit_message(
                                                rules,
                                                &mut s.ctx,
                                                dir,
                                                t.clone(),
                                                &keys,
                                                None,
                                            );
                                            let delay =
                                                ws_faults(&mut s, l.faults, true, &mut plan);
                                            if let Some(r) = l.reply {
                                                // rpctap's answer in the client's place.
                                                plan.step(Step::Reply(Bytes::from(frame::encode(
                                                    true,
                                                    false,
                                                    0x1,
                                                    &r,
                                                    Some(mask()),
                                                ))));
                                            }
                                            if let Some(d) = delay {
                                                // The server's request alone waits.
                                                send_later(&side, &mut plan, &l.forward, &t, d);
                                                rewrite |= takeover && compressed;
                                                continue;
                                            }
                                            match l.forward {
                                                Forward::Unchanged => {}
                                                Forward::Smaller(b) => {
                                                    rewrite |= takeover && compressed;
                                                    plan.write(&side.frame(0x1, &b));
                                                    continue;
                                                }
                                                Forward::Nothing => {
                                                    rewrite |= takeover && compressed;
                                                    continue;
                                                }
                                            }
                                        } else {
                                            s.ctx.line(dir, t.clone());
                                        }
                                        let (done, changed) =
                                            server_faults(&side, &mut s, &t, &mut plan);
                                        rewrite |= takeover
                                            && compressed
                                            && (changed || (done && !keep_raw));
                                        if done {
                                            continue;
                                        }
                                        let calls = std::mem::take(&mut s.calls);
                                        let hold = side.intercept().and_then(|ic| {
                                            crate::flow::intercept::hold_body(
                                                ic,
                                                dir,
                                                &t,
                                                &s.ctx.scope_text(),
                                                |id| {
                                                    calls
                                                        .iter()
                                                        .find(|(i, _, _)| i == id)
                                                        .map(|(_, m, tg)| (&**m, tg.as_deref()))
                                                },
                                            )
                                        });
                                        s.calls = calls;
                                        if let Some(h) = hold {
                                            held.clear();
                                            plan.step(HeldMsg::step(h, t, compressed));
                                            continue;
                                        }
                                        if keep_raw {
                                            plan.write(&held);
                                        } else {
                                            plan.write(&side.frame(0x1, &t));
                                        }
                                    }
                                    WsEvent::BinaryData(b) if rewrite => {
                                        s.ctx.binary_message(dir, b.clone());
                                        plan.write(&side.frame(0x2, &b));
                                    }
                                    WsEvent::BinaryData(b) => {
                                        s.ctx.binary_message(dir, b);
                                        plan.write(&held);
                                    }
                                    other => {
                                        fatal |= passed(
                                            &mut s, &side, dir, other, rewrite, keep_raw, &held,
                                            &mut plan,
                                        );
                                    }
                                }
                            }
                        }
                    }
                    held.clear();
                    if fatal {
                        too_big(&side, &mut w, &out).await;
                        return;
                    }
                    // What came before the message (control frames) goes first.
                    if !out.is_empty() {
                        if w.write_all(&out).await.is_err() {
                            break 'read;
                        }
                        out.clear();
                    }
                    for step in plan.finish() {
                        let ok = match step {
                            Step::Write(b) => w.write_all(&b).await.is_ok(),
                            Step::Reply(f) => match &side {
                                Side::Client { to_client, .. } => to_client.send(f).await.is_ok(),
                                Side::Server {
                                    requests: Some(r), ..
                                } => r.to_server.send(f).await.is_ok(),
                                Side::Server { .. } => true,
                            },
                            Step::Later(b, d) => match (side.later(), later_room()) {
                                (Some(tx), true) => {
                                    tokio::spawn(async move {
                                        tokio::time::sleep(d).await;
                                        let _ = tx.send(Bytes::from(b)).await;
                                        LATER.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                                    });
                                    true
                                }
                                // No way in between two messages, or too many held: sent now
                                // rather than lost.
                                (_, room) => {
                                    if room {
                                        LATER.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
                                    }
                                    w.write_all(&b).await.is_ok()
                                }
                            },
                            Step::Slow(b, bps) => {
                                let piece = (bps / 20).max(1) as usize;
                                let mut ok = true;
                                for (i, part) in b.chunks(piece).enumerate() {
                                    if i > 0 {
                                        tokio::time::sleep(std::time::Duration::from_millis(50))
                                            .await;
                                    }
                                    if w.write_all(part).await.is_err() || w.flush().await.is_err()
                                    {
                                        ok = false;
                                        break;
                                    }
                                }
                                ok
                            }
                            Step::Close(both) => {
                                // `close`: the connection dropped, no close frame (a crash, as
                                // the peer sees it); a cut: the client's.
                                let _ = w.shutdown().await;
                                match &side {
                                    Side::Client { to_client, .. } => {
                                        let _ = to_client.send(Bytes::new()).await;
                                    }
                                    Side::Server {
                                        requests: Some(r), ..
                                    } if both => {
                                        let _ = r.to_server.send(Bytes::new()).await;
                                    }
                                    Side::Server { .. } => {}
                                }
                                return;
                            }
                            Step::Held(h) => {
                                // It alone waits for its verdict: the messages after it pass
                                // meanwhile, and what the verdict sends goes in between two
                                // messages, uncompressed (the compressed stream goes on
                                // without it).
                                let HeldMsg {
                                    hold: (p, id, method),
                                    text,
                                    compressed,
                                } = *h;
                                rewrite |= takeover && compressed;
                                let later = side.later();
                                let to_client = match &side {
                                    Side::Client { to_client, .. } => Some(to_client.clone()),
                                    Side::Server { .. } => None,
                                };
                                let masked = matches!(side, Side::Client { .. });
                                let shared = shared.clone();
                                tokio::spawn(async move {
                                    let d = p.wait().await;
                                    shared.locked().ctx.intercepted(
                                        &d,
                                        dir,
                                        id.as_ref(),
                                        Some(&method),
                                    );
                                    let ours = |b: &[u8]| {
                                        frame::encode(true, false, 0x1, b, masked.then(mask))
                                    };
                                    let (to, f) = match d.verdict {
                                        Verdict::Forward => (later, ours(&text)),
                                        Verdict::Edit(b) => (later, ours(&b)),
                                        // A server message answered is a server message
                                        // replaced; a client's call answered goes back to it.
                                        Verdict::Answer(b) if dir == Direction::ServerToClient => {
                                            (later, ours(&b))
                                        }
                                        Verdict::Answer(b) => {
                                            (to_client, frame::encode(true, false, 0x1, &b, None))
                                        }
                                        Verdict::Drop => return,
                                    };
                                    if let Some(tx) = to {
                                        let _ = tx.send(Bytes::from(f)).await;
                                    }
                                });
                                true
                            }
                        };
                        if !ok {
                            break 'read;
                        }
                    }
                }
                None => {
                    let over = held.len() + cur.len() > hold_limit(cap);
                    if over && !streaming && refuses_too_large(&side) {
                        // While a rule is in force nothing runs undecided: a call too large to
                        // read is not passed on (as an HTTP body over the cap is refused).
                        shared.locked().ctx.not_inspected(
                            dir,
                            format!(
                                "refused: a message of more than {} bytes, larger than the inspection cap, not passed on (rules are in force and none could be applied to it); the connection closed with 1009",
                                held.len() + cur.len()
                            ),
                        );
                        too_big(&side, &mut w, &out).await;
                        return;
                    }
                    if over && !streaming && !rewrite {
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
                let mut s = shared.locked();
                for ev in events.drain(..) {
                    apply(&mut s, dir, ev);
                }
            }
        }
        if !out.is_empty() {
            if w.write_all(&out).await.is_err() {
                break;
            }
            out.clear();
        }
    }
    // A message never finished: what the peer sent goes on as it is.
    if !rewrite {
        held.append(&mut cur);
        let _ = w.write_all(&held).await;
    }
    let _ = w.shutdown().await;
}

/// A message event other than a decided text or binary message: inspected, and its frames
/// passed on when they can be; true when it cannot go on (the connection must close).
#[allow(clippy::too_many_arguments)]
fn passed(
    s: &mut Shared,
    side: &Side,
    dir: Direction,
    ev: WsEvent,
    rewrite: bool,
    keep_raw: bool,
    held: &[u8],
    plan: &mut Plan,
) -> bool {
    let too_large = matches!(ev, WsEvent::Oversized { .. } | WsEvent::ContextLost { .. });
    if too_large && refuses_too_large(side) {
        // While a rule is in force nothing runs undecided: not passed on.
        let what = match ev {
            WsEvent::Oversized { len, .. } => format!("refused: a message of {len} bytes"),
            _ => "refused: a compressed message whose context was lost".to_string(),
        };
        s.ctx.not_inspected(dir, format!("{what}, too large to inspect, not passed on (rules are in force and none could be applied to it); the connection closed with 1009"));
        return true;
    }
    if rewrite && too_large {
        // Not inflated, so it cannot be re-sent: the connection cannot go on.
        s.ctx.not_inspected(dir, "a message too large to inspect after rpctap had to re-send the messages uncompressed: it cannot be passed on, and the connection is closed".into());
        return true;
    }
    if keep_raw && matches!(ev, WsEvent::Oversized { .. } | WsEvent::ContextLost { .. }) {
        plan.write(held);
    }
    apply(s, dir, ev);
    false
}

/// The client's calls in a message, remembered for their replies (the intercept's filter).
fn remember_calls(s: &mut Shared, t: &Bytes) {
    const KEPT: usize = 4096;
    let calls = crate::flow::intercept::call_methods(t);
    if s.calls.len() + calls.len() > KEPT {
        let n = (s.calls.len() + calls.len() - KEPT).min(s.calls.len());
        s.calls.drain(..n);
    }
    s.calls.extend(calls);
}

/// A held message: its verdict to come, its id and method.
type HoldOf = (
    crate::flow::intercept::Pending,
    Option<crate::rpc::Id>,
    String,
);

/// Holds a client message when the intercept's filter matches it.
fn hold(
    ic: &crate::flow::intercept::Intercept,
    dir: Direction,
    s: &Shared,
    t: &Bytes,
) -> Option<HoldOf> {
    crate::flow::intercept::hold_body(ic, dir, t, &s.ctx.scope_text(), |_| None)
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

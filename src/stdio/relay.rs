//! The two relays: plain threads doing blocking reads and writes (the fewest hops between the
//! pipes), each inspecting its direction's lines before the bytes that complete them are passed
//! on; with rate limits the client's lines are held until whole and decided, and rpctap's own
//! replies go to the client between two of the server's lines.

use super::framing::{Lines, Piece};
use crate::events::Direction;
use crate::inspect::ExchangeCtx;
use crate::limit::enforce::Forward;
use crate::limit::Limiter;
use crate::locks::Locked as _;
use bytes::Bytes;
use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

/// The child's stdin, shared by the client's relay and the threads of held messages.
pub type ChildIn = Arc<Mutex<Box<dyn Write + Send>>>;

/// The relays' read size.
const CHUNK: usize = 64 << 10;

/// The client's stdout, shared by the server's relay and rpctap's own replies (refusals):
/// those go in only between two lines.
pub struct ClientOut {
    at_line_start: bool,
    queued: Vec<u8>,
    /// Faults armed on the server's replies (`crate::flow::fault`): by call id, and a cut of the
    /// session after a number of the server's messages.
    armed: crate::flow::fault::Armed,
    cut: Option<crate::flow::fault::Cut>,
    /// Faults armed on the client's answers to the server's requests (`direction = "s2c"`),
    /// by the server request's id.
    answers: crate::flow::fault::Armed,
    /// A fault closed the client's side: nothing more is written.
    closed: bool,
    /// Under the dashboard's intercept: the client's calls waiting for their replies (a reply's
    /// method and target are its call's, for the filter). Bounded by [`CALLS_KEPT`].
    calls: Vec<(
        crate::rpc::Id,
        std::sync::Arc<str>,
        Option<std::sync::Arc<str>>,
    )>,
}

/// The most calls remembered for the intercept's filter (the oldest forgotten first).
const CALLS_KEPT: usize = 4096;

/// The dashboard's intercept on a stdio session, and the runtime its held messages wait on
/// (each on a thread of its own, so the lines after it pass).
#[derive(Clone)]
pub struct Hold {
    pub intercept: crate::flow::intercept::Intercept,
    pub rt: tokio::runtime::Handle,
}

impl ClientOut {
    /// Nothing written yet: at a line's start.
    pub fn new() -> Self {
        ClientOut {
            at_line_start: true,
            queued: Vec::new(),
            armed: Default::default(),
            cut: None,
            answers: Default::default(),
            closed: false,
            calls: Vec::new(),
        }
    }
}

/// Closes the client's side of the session for a fault: rpctap's stdout is pointed at
/// /dev/null (the client reads EOF) and nothing more is written to it.
fn close_client(out: &Mutex<ClientOut>) {
    let mut st = out.locked();
    if st.closed {
        return;
    }
    st.closed = true;
    let _ = std::io::stdout().lock().flush();
    match std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY-free: rustix's dup2 onto fd 1 replaces the client's pipe; no Rust object owns
        // fd 1 but `std::io::stdout`, which keeps writing to whatever fd 1 is.
        Ok(null) => {
            if let Err(e) = rustix::stdio::dup2_stdout(&null) {
                tracing::warn!(error = %e, "closing stdout for a fault failed");
            }
        }
        Err(e) => tracing::warn!(error = %e, "opening /dev/null failed"),
    }
}

impl Default for ClientOut {
    fn default() -> Self {
        Self::new()
    }
}

fn write_out(out: &Mutex<ClientOut>, chunk: &[u8]) -> std::io::Result<()> {
    let mut st = out.locked();
    if st.closed {
        return Ok(());
    }
    let mut so = std::io::stdout().lock();
    so.write_all(chunk)?;
    if let Some(&last) = chunk.last() {
        st.at_line_start = last == b'\n';
    }
    if st.at_line_start && !st.queued.is_empty() {
        so.write_all(&st.queued)?;
        st.queued.clear();
    }
    so.flush()
}

/// rpctap's own line to the client: now if the server's output is between lines, else right
/// after the server's current line ends.
fn inject(out: &Mutex<ClientOut>, line: &[u8]) -> std::io::Result<()> {
    let mut st = out.locked();
    if st.closed {
        return Ok(());
    }
    if st.at_line_start {
        let mut so = std::io::stdout().lock();
        so.write_all(line)?;
        so.flush()
    } else {
        st.queued.extend_from_slice(line);
        Ok(())
    }
}

/// Applies the rules to one client line (inspecting it): what goes to the server and
/// rpctap's own reply, each a line with its newline.
fn limit_line(
    limiter: &Limiter,
    ctx: &mut ExchangeCtx,
    line: Bytes,
    session: &str,
    shared: Option<&mut crate::limit::SharedVerdicts>,
) -> Limited {
    let headers = http::HeaderMap::new();
    let keys = stdio_keys(session, &headers);
    let l = crate::limit::enforce::limit_message(
        limiter,
        ctx,
        Direction::ClientToServer,
        line.clone(),
        &keys,
        shared,
    );
    let newline = |b: &[u8]| {
        let mut v = b.to_vec();
        v.push(b'\n');
        v
    };
    Limited {
        forward: match l.forward {
            Forward::Unchanged => Some(line),
            Forward::Smaller(b) => Some(Bytes::from(newline(&b))),
            Forward::Nothing => None,
        },
        reply: l.reply.map(|r| newline(&r)),
        faults: l.faults,
    }
}

/// A stdio session's keys: the local peer, the session.
fn stdio_keys<'a>(session: &'a str, headers: &'a http::HeaderMap) -> crate::limit::RequestKeys<'a> {
    crate::limit::RequestKeys {
        peer: std::net::IpAddr::from([127, 0, 0, 1]),
        session: Some(session),
        headers,
    }
}

/// What a client line became under the rate-limit rules.
struct Limited {
    /// What goes to the server (`None`: nothing).
    forward: Option<Bytes>,
    /// rpctap's own reply to the client (a line, with its newline).
    reply: Option<Vec<u8>>,
    /// Faults that fired for the line's calls.
    faults: Vec<crate::limit::enforce::CallFault>,
}

/// What a line's faults ask of the relay before the line goes on.
#[derive(Default)]
struct Before {
    delay: Option<std::time::Duration>,
    close: bool,
}

/// Applies a line's faults (the client's calls', or the server's requests' for `direction =
/// "s2c"` rules): the request-side ones are returned for the relay to do, the reply-side ones
/// armed on `out` (on the server's replies, or on the client's answers); each recorded.
fn arm_faults(
    c: &mut ExchangeCtx,
    out: &Mutex<ClientOut>,
    faults: Vec<crate::limit::enforce::CallFault>,
) -> Before {
    let t = crate::limit::enforce::triage(
        faults,
        [
            "the session closed when the call arrived (the child's stdin and the client's stdout)",
            "the session closed when the server's request arrived (the child's stdin and the \
             client's stdout)",
        ],
    );
    {
        let mut o = out.locked();
        // Each recorded when it acts: the cut when it happens, the others when the reply (the
        // client's answer) passes.
        for f in t.cuts {
            o.cut = crate::flow::fault::Cut::of(&f.fired, &f.id, &f.method);
        }
        for f in t.replies {
            o.armed.arm(&f.id, f.fired, &f.method);
        }
        for f in t.answers {
            o.answers.arm(&f.id, f.fired, &f.method);
        }
    }
    for (f, detail) in t.now {
        c.fault(&f.fired, Some(&f.id), Some(&f.method), None, detail);
    }
    Before {
        delay: t.delay,
        close: t.close,
    }
}

/// One read of `from` into `buf` (an interrupted read retried); `None` at its end or on an
/// error (logged, naming `what`).
fn read_some(from: &mut impl Read, buf: &mut [u8], what: &str) -> Option<usize> {
    loop {
        match from.read(buf) {
            Ok(0) => return None,
            Ok(n) => return Some(n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "reading {what} failed");
                return None;
            }
        }
    }
}

/// Reads rpctap's stdin; inspects and passes on to the child's stdin. At EOF the child's stdin
/// is closed (once no held message waits to be written to it). With `limiter` (rules, or a
/// dashboard's intercept: `hold`) lines are whole before they go on.
#[allow(clippy::too_many_arguments)]
pub fn client_to_server(
    child_in: ChildIn,
    ctx: &Arc<Mutex<ExchangeCtx>>,
    out: &Arc<Mutex<ClientOut>>,
    limiter: Option<&Limiter>,
    max: usize,
    session: &str,
    rt: Option<&tokio::runtime::Handle>,
    hold: Option<&Hold>,
) {
    let mut lines = Lines::new(max);
    let mut buf = vec![0u8; CHUNK];
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let dir = Direction::ClientToServer;
    // A line too large to inspect, decided at its first spilled piece: refused (not passed on)
    // while a rule is in force or the intercept is on — nothing runs undecided —, else passed
    // on as it comes.
    let mut refusing_long: Option<bool> = None;
    while let Some(n) = read_some(&mut input, &mut buf, "stdin") {
        let chunk = &buf[..n];
        let sent = match limiter {
            None => {
                {
                    let mut c = ctx.locked();
                    lines.feed(chunk, &mut |p| inspect_piece(&mut c, dir, p));
                }
                child_in.locked().write_all(chunk)
            }
            Some(l) => {
                // Whole lines only, so that a refused call can be taken out.
                let mut to_child: Vec<u8> = Vec::with_capacity(chunk.len());
                let mut replies: Vec<Vec<u8>> = Vec::new();
                let mut pieces = Vec::new();
                lines.feed(chunk, &mut |p| pieces.push(p));
                // Rules counted in a shared store are asked first, the session not locked.
                let shared: Vec<Option<crate::limit::SharedVerdicts>> = pieces
                    .iter()
                    .map(|p| match (p, rt) {
                        (Piece::Line(line), Some(rt)) if l.has_shared() => {
                            let headers = http::HeaderMap::new();
                            let keys = stdio_keys(session, &headers);
                            let parsed = crate::rpc::parse_body(line);
                            Some(rt.block_on(crate::limit::enforce::ask_shared(l, &parsed, &keys)))
                        }
                        _ => None,
                    })
                    .collect();
                let mut close = false;
                {
                    let mut c = ctx.locked();
                    for (p, mut shared) in pieces.into_iter().zip(shared) {
                        match p {
                            Piece::Line(line) => {
                                let mut r = limit_line(l, &mut c, line, session, shared.as_mut());
                                let before = arm_faults(&mut c, out, std::mem::take(&mut r.faults));
                                if before.close {
                                    close = true;
                                    break;
                                }
                                if let Some(d) = before.delay {
                                    // The call alone waits: the lines after it pass meanwhile
                                    // (as calls over HTTP, each a request of its own).
                                    if let Some(f) = r.forward.take() {
                                        drop(c);
                                        let _ = child_in.locked().write_all(&to_child);
                                        to_child.clear();
                                        send_later(
                                            To::Server(child_in.clone()),
                                            with_nl(&trim_nl(&f)),
                                            d,
                                        );
                                        c = ctx.locked();
                                    }
                                    replies.extend(r.reply);
                                    continue;
                                }
                                if let Some(f) = r.forward {
                                    if let Some(a) = armed_answer(out, &f) {
                                        // What came before it goes first; it goes as its
                                        // fault says (its thread when held).
                                        drop(c);
                                        let _ = child_in.locked().write_all(&to_child);
                                        to_child.clear();
                                        let to = To::Server(child_in.clone());
                                        armed_line(ctx, &to, trim_nl(&f), a);
                                        c = ctx.locked();
                                        replies.extend(r.reply);
                                        continue;
                                    }
                                    if let Some(h) = hold.filter(|h| h.intercept.is_on()) {
                                        remember_calls(out, &f);
                                        let frame = trim_nl(&f);
                                        if let Some(p) = crate::flow::intercept::hold_body(
                                            &h.intercept,
                                            dir,
                                            &frame,
                                            &c.scope_text(),
                                            |_| None,
                                        ) {
                                            // What came before it goes first; it goes when
                                            // decided, and the lines after it meanwhile.
                                            let _ = child_in.locked().write_all(&to_child);
                                            to_child.clear();
                                            release_held(
                                                h,
                                                p,
                                                (dir, frame),
                                                ctx,
                                                out,
                                                Some(&child_in),
                                            );
                                            replies.extend(r.reply);
                                            continue;
                                        }
                                    }
                                    to_child.extend_from_slice(&f);
                                    if !f.ends_with(b"\n") {
                                        to_child.push(b'\n');
                                    }
                                }
                                replies.extend(r.reply);
                            }
                            Piece::Spill(b) => {
                                c.line_spill(dir, &b);
                                let refuse = *refusing_long.get_or_insert_with(|| {
                                    !l.is_empty() || hold.is_some_and(|h| h.intercept.is_on())
                                });
                                if !refuse {
                                    to_child.extend_from_slice(&b)
                                }
                            }
                            Piece::LongEnd(n) if refusing_long.take() == Some(true) => {
                                if let Some(id) = c.line_refused_too_large(dir, n) {
                                    replies.push(with_nl(
                                        crate::rpc::own::What::BadRequest
                                            .reply(&id, TOO_LARGE, false)
                                            .as_bytes(),
                                    ));
                                }
                            }
                            Piece::LongEnd(n) => {
                                c.line_not_inspected(dir, n);
                                to_child.push(b'\n');
                            }
                        }
                    }
                }
                for r in replies {
                    if let Err(e) = inject(out, &r) {
                        tracing::debug!(error = %e, "writing to stdout failed");
                    }
                }
                if close {
                    let _ = child_in.locked().write_all(&to_child);
                    close_client(out);
                    break;
                }
                child_in.locked().write_all(&to_child)
            }
        };
        if let Err(e) = sent {
            // The child closed its stdin (or exited): nothing more can reach it.
            tracing::debug!(error = %e, "writing to the server's stdin failed");
            break;
        }
    }
    // A last line without its newline: passed on as it is.
    let mut rest: Vec<u8> = Vec::new();
    {
        let mut c = ctx.locked();
        if limiter.is_some() && lines.held() > 0 {
            lines.finish(&mut |p| {
                if let Piece::Line(l) = &p {
                    rest.extend_from_slice(l);
                }
                inspect_piece(&mut c, dir, p);
            });
        } else {
            lines.finish(&mut |p| inspect_piece(&mut c, dir, p));
        }
    }
    if !rest.is_empty() {
        let _ = child_in.locked().write_all(&rest);
    }
    drop(child_in);
}

/// What rpctap answers a call in a line too large to inspect while rules are in force.
const TOO_LARGE: &str =
    "the line is larger than --max-frame-bytes, so no rule could be applied to it: not passed on";

/// A line without its newline (what the filter and the editor see).
fn trim_nl(line: &Bytes) -> Bytes {
    let n = line.len()
        - line
            .iter()
            .rev()
            .take_while(|b| **b == b'\n' || **b == b'\r')
            .count();
    line.slice(..n)
}

/// The client's calls in `line`, remembered for their replies (the intercept's filter).
fn remember_calls(out: &Mutex<ClientOut>, line: &Bytes) {
    let calls = crate::flow::intercept::call_methods(&trim_nl(line));
    if calls.is_empty() {
        return;
    }
    let mut o = out.locked();
    if o.calls.len() + calls.len() > CALLS_KEPT {
        let drop_n = (o.calls.len() + calls.len() - CALLS_KEPT).min(o.calls.len());
        o.calls.drain(..drop_n);
    }
    o.calls.extend(calls);
}

/// A held message's thread: waits for its verdict, records it, and sends what it says — to the
/// server (the client's messages) or the client (the server's, and rpctap's answers).
fn release_held(
    h: &Hold,
    (pending, id, method): (
        crate::flow::intercept::Pending,
        Option<crate::rpc::Id>,
        String,
    ),
    (dir, frame): (Direction, Bytes),
    ctx: &Arc<Mutex<ExchangeCtx>>,
    out: &Arc<Mutex<ClientOut>>,
    child_in: Option<&ChildIn>,
) {
    use crate::flow::intercept::Verdict;
    let (rt, ctx, out, child_in) = (h.rt.clone(), ctx.clone(), out.clone(), child_in.cloned());
    let fallback = (frame.clone(), child_in.clone(), out.clone());
    let spawned = std::thread::Builder::new()
        .name("rpctap-held".into())
        .spawn(move || {
            let d = rt.block_on(pending.wait());
            let line = |b: &[u8]| {
                let mut v = b.to_vec();
                v.push(b'\n');
                v
            };
            let (to_server, to_client) = match &d.verdict {
                Verdict::Forward => (Some(line(&frame)), None),
                Verdict::Edit(b) => (Some(line(b)), None),
                Verdict::Drop => (None, None),
                Verdict::Answer(b) => (None, Some(line(b))),
            };
            let (to_server, to_client) = if dir == Direction::ClientToServer {
                (to_server, to_client)
            } else {
                // The server's message goes on (as it came or edited) to the client.
                (None, to_server.or(to_client))
            };
            {
                let mut c = ctx.locked();
                c.intercepted(&d, dir, id.as_ref(), Some(&method));
                if let (Direction::ClientToServer, Some(a)) = (dir, &to_client) {
                    // rpctap's answer ends the call as a reply would.
                    c.line(Direction::ServerToClient, trim_nl(&Bytes::from(a.clone())));
                }
            }
            if let (Some(b), Some(w)) = (to_server, &child_in) {
                if let Err(e) = w.locked().write_all(&b) {
                    tracing::debug!(error = %e, "writing a held message to the server failed");
                }
            }
            if let Some(b) = to_client {
                let _ = inject(&out, &b);
            }
        });
    if let Err(e) = spawned {
        // No thread to hold it on: it goes on as it came.
        tracing::warn!(error = %e, "could not start a held message's thread: forwarded");
        let (frame, child_in, out) = fallback;
        let mut l = frame.to_vec();
        l.push(b'\n');
        match child_in {
            Some(w) if dir == Direction::ClientToServer => {
                let _ = w.locked().write_all(&l);
            }
            _ => {
                let _ = inject(&out, &l);
            }
        }
    }
}

/// What the server's relay needs to decide the server's requests (`direction = "s2c"` fault
/// rules): the rules, the session, and the child's stdin for rpctap's answers in the client's
/// place — weak, so that the client's relay still closes it at its EOF.
pub struct ServerRequests {
    pub limiter: Arc<Limiter>,
    pub session: String,
    pub child_in: std::sync::Weak<Mutex<Box<dyn Write + Send>>>,
}

/// Reads the child's stdout; inspects and passes on to rpctap's stdout.
pub fn server_to_client(
    child_out: &mut impl Read,
    ctx: &Arc<Mutex<ExchangeCtx>>,
    out: &Arc<Mutex<ClientOut>>,
    max: usize,
    faults: bool,
    hold: Option<&Hold>,
    requests: Option<&ServerRequests>,
) {
    if faults || hold.is_some() || requests.is_some() {
        return server_to_client_faulty(child_out, ctx, out, max, hold, requests);
    }
    let mut lines = Lines::new(max);
    let mut buf = vec![0u8; CHUNK];
    let dir = Direction::ServerToClient;
    let mut client_gone = false;
    while let Some(n) = read_some(child_out, &mut buf, "the server's stdout") {
        let chunk = &buf[..n];
        {
            let mut c = ctx.locked();
            lines.feed(chunk, &mut |p| inspect_piece(&mut c, dir, p));
        }
        if !client_gone {
            if let Err(e) = write_out(out, chunk) {
                // The client stopped reading: keep draining the child so it is not blocked,
                // and keep inspecting.
                tracing::debug!(error = %e, "writing to stdout failed");
                client_gone = true;
            }
        }
    }
    let mut c = ctx.locked();
    lines.finish(&mut |p| inspect_piece(&mut c, dir, p));
}

/// The server's relay when fault rules are in force: line by line, so that a reply a fault
/// acts on can be held, dropped, doubled or changed, and the session cut between (or inside)
/// two messages. The inspector still reads every line as the server wrote it.
fn server_to_client_faulty(
    child_out: &mut impl Read,
    ctx: &Arc<Mutex<ExchangeCtx>>,
    out: &Arc<Mutex<ClientOut>>,
    max: usize,
    hold: Option<&Hold>,
    requests: Option<&ServerRequests>,
) {
    let mut lines = Lines::new(max);
    let mut buf = vec![0u8; CHUNK];
    let dir = Direction::ServerToClient;
    while let Some(n) = read_some(child_out, &mut buf, "the server's stdout") {
        let mut pieces = Vec::new();
        lines.feed(&buf[..n], &mut |p| pieces.push(p));
        for p in pieces {
            let line = match p {
                Piece::Line(l) => l,
                Piece::Spill(b) => {
                    ctx.locked().line_spill(dir, &b);
                    let _ = write_out(out, &b);
                    continue;
                }
                Piece::LongEnd(n) => {
                    ctx.locked().line_not_inspected(dir, n);
                    let _ = write_out(out, b"\n");
                    continue;
                }
            };
            let line = match requests {
                Some(r) => match server_request(r, ctx, out, line) {
                    Some(l) => l,
                    None => continue,
                },
                None => {
                    ctx.locked().line(dir, line.clone());
                    line
                }
            };
            if let Some(h) = hold.filter(|h| h.intercept.is_on()) {
                if held_reply(h, ctx, out, &line) {
                    continue;
                }
            }
            faulty_line(ctx, out, line);
        }
    }
    let mut c = ctx.locked();
    lines.finish(&mut |p| inspect_piece(&mut c, dir, p));
}

/// One of the server's lines inspected and, when it holds the server's requests, decided by
/// the `direction = "s2c"` fault rules: an `error` answered to the server in the client's
/// place, a `delay` or `close` done here, the reply-side faults armed on the client's answer.
/// What goes on to the client (`None`: nothing).
fn server_request(
    r: &ServerRequests,
    ctx: &Mutex<ExchangeCtx>,
    out: &Arc<Mutex<ClientOut>>,
    line: Bytes,
) -> Option<Bytes> {
    let headers = http::HeaderMap::new();
    let keys = stdio_keys(&r.session, &headers);
    let (l, before) = {
        let mut c = ctx.locked();
        let mut l = crate::limit::enforce::limit_message(
            &r.limiter,
            &mut *c,
            Direction::ServerToClient,
            line.clone(),
            &keys,
            None,
        );
        let faults = std::mem::take(&mut l.faults);
        let before = arm_faults(&mut c, out, faults);
        (l, before)
    };
    let child_in = r.child_in.upgrade();
    if let (Some(reply), Some(w)) = (&l.reply, &child_in) {
        To::Server(w.clone()).write(&with_nl(reply));
    }
    if before.close {
        close_client(out);
        if let Some(w) = &child_in {
            // The child reads EOF (its stdin's pipe dropped), whoever else holds the handle.
            *w.locked() = Box::new(std::io::sink());
        }
        return None;
    }
    let forward = match l.forward {
        Forward::Unchanged => Some(line),
        Forward::Smaller(b) => Some(b),
        Forward::Nothing => None,
    };
    match (before.delay, forward) {
        // The server's request alone waits: its other lines pass meanwhile.
        (Some(d), Some(f)) => {
            send_later(To::Client(out.clone()), with_nl(&trim_nl(&f)), d);
            None
        }
        (_, f) => f,
    }
}

/// Holds one of the server's lines when the intercept's filter matches it (a reply's method
/// and target are its call's): true when held (it goes on when decided).
fn held_reply(
    h: &Hold,
    ctx: &Arc<Mutex<ExchangeCtx>>,
    out: &Arc<Mutex<ClientOut>>,
    line: &Bytes,
) -> bool {
    let calls = std::mem::take(&mut out.locked().calls);
    let scope = ctx.locked().scope_text();
    let held = crate::flow::intercept::hold_body(
        &h.intercept,
        Direction::ServerToClient,
        line,
        &scope,
        |id| {
            calls
                .iter()
                .find(|(i, _, _)| i == id)
                .map(|(_, m, t)| (&**m, t.as_deref()))
        },
    );
    {
        // Put back (with the replied call forgotten).
        let replied = crate::flow::fault::reply_id(line);
        let mut o = out.locked();
        let mut calls = calls;
        if let Some(id) = replied {
            calls.retain(|(i, _, _)| *i != id);
        }
        calls.append(&mut o.calls);
        o.calls = calls;
    }
    match held {
        Some(p) => {
            release_held(
                h,
                p,
                (Direction::ServerToClient, line.clone()),
                ctx,
                out,
                None,
            );
            true
        }
        None => false,
    }
}

/// Where a line a fault acts on goes: the client (rpctap's stdout, the server's replies) or
/// the server (the child's stdin, the client's answers to its requests).
#[derive(Clone)]
enum To {
    Client(Arc<Mutex<ClientOut>>),
    Server(ChildIn),
}

impl To {
    /// Bytes in the stream's order.
    fn write(&self, b: &[u8]) {
        match self {
            To::Client(o) => {
                let _ = write_out(o, b);
            }
            To::Server(w) => {
                if let Err(e) = w.locked().write_all(b) {
                    tracing::debug!(error = %e, "writing to the server's stdin failed");
                }
            }
        }
    }

    /// A whole line sent later (a delayed one): in between two of the stream's lines.
    fn later(&self, b: &[u8]) {
        match self {
            To::Client(o) => {
                let _ = inject(o, b);
            }
            To::Server(_) => self.write(b),
        }
    }
}

/// A whole line sent after `d`, between two of the stream's lines: the message a `delay` fault
/// holds waits alone, the stream's other messages pass meanwhile (as calls over HTTP, each a
/// request of its own). One thread keeps every held line in time order (not a thread each: a
/// delay rule on every call would make one per call); past [`MAX_DELAYED`] held at once, a line
/// goes at once, so memory is bounded by that, not by traffic.
fn send_later(to: To, line: Vec<u8>, d: std::time::Duration) {
    static DELAYER: std::sync::OnceLock<Option<std::sync::mpsc::Sender<Delayed>>> =
        std::sync::OnceLock::new();
    let tx = DELAYER.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("rpctap-fault-delay".into())
            .spawn(move || delayer(rx))
            .ok()
            .map(|_| tx)
    });
    let held = Delayed {
        at: std::time::Instant::now() + d,
        to,
        line,
    };
    // No thread to hold it: sent at once rather than lost.
    let unsent = match tx {
        Some(t) => t.send(held).err().map(|e| e.0),
        None => Some(held),
    };
    if let Some(h) = unsent {
        h.to.later(&h.line);
    }
}

/// The most lines [`send_later`] holds at once.
const MAX_DELAYED: usize = 4096;

/// A line held by a `delay`, and when and where it goes.
struct Delayed {
    at: std::time::Instant,
    to: To,
    line: Vec<u8>,
}

/// The delay thread: held lines sent in time order as they fall due.
fn delayer(rx: std::sync::mpsc::Receiver<Delayed>) {
    use std::sync::mpsc::RecvTimeoutError;
    let mut held: Vec<Delayed> = Vec::new();
    loop {
        let now = std::time::Instant::now();
        // Due ones go (a few at a time: the list is small and kept in no order).
        let mut i = 0;
        while i < held.len() {
            if held[i].at <= now {
                let h = held.swap_remove(i);
                h.to.later(&h.line);
            } else {
                i += 1;
            }
        }
        let next = held.iter().map(|h| h.at).min();
        let got = match next {
            Some(at) => rx.recv_timeout(at.saturating_duration_since(now)),
            None => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
        };
        match got {
            Ok(h) if held.len() >= MAX_DELAYED => {
                tracing::warn!(
                    held = held.len(),
                    "too many delayed lines: this one sent now"
                );
                h.to.later(&h.line);
            }
            Ok(h) => held.push(h),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
    }
}

fn with_nl(b: &[u8]) -> Vec<u8> {
    let mut v = Vec::with_capacity(b.len() + 1);
    v.extend_from_slice(b);
    v.push(b'\n');
    v
}

/// One whole line of the server's, passed on under the faults armed for it.
fn faulty_line(ctx: &Mutex<ExchangeCtx>, out: &std::sync::Arc<Mutex<ClientOut>>, line: Bytes) {
    let (armed, cut_now) = {
        let mut o = out.locked();
        let armed = crate::flow::fault::reply_id(&line)
            .and_then(|id| o.armed.take(&id).map(|(f, m)| (id, f, m)));
        // The cut counts every message of the server's from the call on.
        let cut_now = crate::flow::fault::Cut::due(&mut o.cut);
        (armed, cut_now)
    };
    if let Some(cut) = cut_now {
        let detail = if cut.mid_event {
            let half = crate::flow::fault::malformed(&line);
            let _ = write_out(out, &half);
            "the session cut in the middle of a message".to_string()
        } else {
            "the session cut before this message".to_string()
        };
        ctx.locked()
            .fault(&cut.fired, Some(&cut.id), Some(&cut.method), None, detail);
        close_client(out);
        return;
    }
    match armed {
        Some(a) => armed_line(ctx, &To::Client(out.clone()), line, a),
        None => {
            let _ = write_out(out, &with_nl(&line));
        }
    }
}

/// The client's answer to a server's request a `direction = "s2c"` fault armed (taken out),
/// when `line` is one.
fn armed_answer(
    out: &Mutex<ClientOut>,
    line: &Bytes,
) -> Option<(crate::rpc::Id, crate::flow::fault::Fired, Arc<str>)> {
    if out.locked().answers.is_empty() {
        return None;
    }
    let id = crate::flow::fault::reply_id(line)?;
    out.locked().answers.take(&id).map(|(f, m)| (id, f, m))
}

/// A reply (the server's to a call, or the client's answer to a server's request) passed on
/// to `to` under the fault armed for it, and recorded.
fn armed_line(
    ctx: &Mutex<ExchangeCtx>,
    to: &To,
    line: Bytes,
    (id, fired, method): (crate::rpc::Id, crate::flow::fault::Fired, Arc<str>),
) {
    use crate::flow::fault::{Action, At};
    if let Some(r) = crate::flow::fault::reshape(&fired, &line) {
        for f in &r.frames {
            to.write(&with_nl(f));
        }
        ctx.locked()
            .fault(&fired, Some(&id), Some(&method), r.made, r.detail.into());
        return;
    }
    let what = match fired.direction {
        Direction::ClientToServer => "the reply",
        Direction::ServerToClient => "the client's answer",
    };
    let detail = match &fired.action {
        Action::Delay(d, At::Reply) => {
            send_later(to.clone(), with_nl(&line), *d);
            format!("{what} held {}", crate::units::show_secs(*d))
        }
        Action::Throttle(bps) => {
            let l = with_nl(&line);
            let piece = ((*bps / 20).max(1)) as usize;
            for part in l.chunks(piece) {
                to.write(part);
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            format!("{what} written at {bps} bytes a second")
        }
        _ => {
            to.write(&with_nl(&line));
            return;
        }
    };
    ctx.locked()
        .fault(&fired, Some(&id), Some(&method), None, detail);
}

fn inspect_piece(c: &mut ExchangeCtx, dir: Direction, p: Piece) {
    match p {
        Piece::Line(l) => c.line(dir, l),
        Piece::Spill(b) => c.line_spill(dir, &b),
        Piece::LongEnd(n) => c.line_not_inspected(dir, n),
    }
}

/// The server's stderr: every chunk passed to rpctap's stderr as it comes (unchanged), and each
/// line handed to `line` (at most `max` bytes of it, then `cut` is true; the rest of a longer
/// line is passed on but not kept). Ends at EOF.
pub fn server_stderr(
    mut from: impl Read,
    mut to: impl Write,
    max: usize,
    mut line: impl FnMut(&[u8], bool),
) {
    let mut buf = vec![0u8; 8 << 10];
    let mut lines = StderrLines::new(max);
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => break,
        };
        let chunk = &buf[..n];
        // What the server says reaches the client's stderr first, whatever happens to the copy.
        let _ = to.write_all(chunk).and_then(|()| to.flush());
        lines.feed(chunk, &mut line);
    }
    lines.finish(&mut line);
}

/// A stderr stream split into lines of at most `max` bytes (the rest of a longer line cut, and
/// said so), a trailing `\r` dropped; shared by the stdio relay and the bridge's children.
pub struct StderrLines {
    cur: Vec<u8>,
    cut: bool,
    max: usize,
}

impl StderrLines {
    pub fn new(max: usize) -> Self {
        StderrLines {
            cur: Vec::new(),
            cut: false,
            max,
        }
    }

    /// Feeds a chunk; `line` gets each line it completes, and whether it was cut.
    pub fn feed(&mut self, chunk: &[u8], line: &mut impl FnMut(&[u8], bool)) {
        for part in chunk.split_inclusive(|b| *b == b'\n') {
            let (body, ends) = match part.strip_suffix(b"\n") {
                Some(b) => (b, true),
                None => (part, false),
            };
            let room = self.max.saturating_sub(self.cur.len());
            if body.len() > room {
                self.cut = true;
            }
            self.cur.extend_from_slice(&body[..body.len().min(room)]);
            if ends {
                let text = self.cur.strip_suffix(b"\r").unwrap_or(&self.cur);
                line(text, self.cut);
                self.cur.clear();
                self.cut = false;
            }
        }
    }

    /// The stream ended: its last, unterminated line.
    pub fn finish(&mut self, line: &mut impl FnMut(&[u8], bool)) {
        if !self.cur.is_empty() {
            line(&self.cur, self.cut);
            self.cur.clear();
        }
    }
}

#[cfg(test)]
mod stderr_tests {
    use super::server_stderr;

    #[test]
    fn stderr_passes_unchanged_and_its_lines_are_bounded() {
        let input = b"one\r\ntwo is long\nthr".to_vec();
        let mut passed = Vec::new();
        let mut lines = Vec::new();
        // Read in 3-byte pieces: lines are whole across reads.
        struct Slow(std::io::Cursor<Vec<u8>>);
        impl std::io::Read for Slow {
            fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
                let n = b.len().min(3);
                self.0.read(&mut b[..n])
            }
        }
        server_stderr(
            Slow(std::io::Cursor::new(input.clone())),
            &mut passed,
            6,
            |l, cut| lines.push((String::from_utf8_lossy(l).into_owned(), cut)),
        );
        assert_eq!(passed, input, "the client's stderr gets every byte");
        assert_eq!(
            lines,
            [
                ("one".to_string(), false),
                ("two is".to_string(), true),
                ("thr".to_string(), false)
            ]
        );
    }
}

#[cfg(test)]
mod delay_tests {
    use super::*;
    use std::time::Duration;

    /// What a test's "child stdin" got.
    #[derive(Clone, Default)]
    struct Got(Arc<Mutex<Vec<u8>>>);
    impl Write for Got {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.locked().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn held_lines_go_in_time_order_from_one_thread() {
        let got = Got::default();
        let to = To::Server(Arc::new(Mutex::new(Box::new(got.clone()))));
        let t0 = std::time::Instant::now();
        send_later(to.clone(), b"late\n".to_vec(), Duration::from_millis(300));
        send_later(to.clone(), b"soon\n".to_vec(), Duration::from_millis(50));
        to.write(b"now\n");
        let deadline = t0 + Duration::from_secs(5);
        while got.0.locked().len() < 14 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(t0.elapsed() >= Duration::from_millis(300));
        assert_eq!(&*got.0.locked(), b"now\nsoon\nlate\n");
    }
}

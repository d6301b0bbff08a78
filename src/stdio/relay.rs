//! The two relays: plain threads doing blocking reads and writes (the fewest hops between the
//! pipes), each inspecting its direction's lines before the bytes that complete them are passed
//! on; with rate limits the client's lines are held until whole and decided, and rpctap's own
//! replies go to the client between two of the server's lines.

use super::framing::{Lines, Piece};
use crate::events::Direction;
use crate::inspect::ExchangeCtx;
use crate::limit::enforce::Forward;
use crate::limit::Limiter;
use bytes::Bytes;
use std::io::{Read, Write};
use std::sync::Mutex;

/// The relays' read size.
const CHUNK: usize = 64 << 10;

/// The client's stdout, shared by the server's relay and rpctap's own replies (refusals):
/// those go in only between two lines.
pub struct ClientOut {
    at_line_start: bool,
    queued: Vec<u8>,
}

impl ClientOut {
    /// Nothing written yet: at a line's start.
    pub fn new() -> Self {
        ClientOut {
            at_line_start: true,
            queued: Vec::new(),
        }
    }
}

impl Default for ClientOut {
    fn default() -> Self {
        Self::new()
    }
}

pub fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

fn write_out(out: &Mutex<ClientOut>, chunk: &[u8]) -> std::io::Result<()> {
    let mut st = locked(out);
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
    let mut st = locked(out);
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
}

/// Reads rpctap's stdin; inspects and passes on to the child's stdin. At EOF the child's stdin
/// is closed.
pub fn client_to_server(
    mut child_in: impl Write,
    ctx: &Mutex<ExchangeCtx>,
    out: &Mutex<ClientOut>,
    limiter: Option<&Limiter>,
    max: usize,
    session: &str,
    rt: Option<&tokio::runtime::Handle>,
) {
    let mut lines = Lines::new(max);
    let mut buf = vec![0u8; CHUNK];
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let dir = Direction::ClientToServer;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "reading stdin failed");
                break;
            }
        };
        let chunk = &buf[..n];
        let sent = match limiter {
            None => {
                {
                    let mut c = locked(ctx);
                    lines.feed(chunk, &mut |p| inspect_piece(&mut c, dir, p));
                }
                child_in.write_all(chunk)
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
                {
                    let mut c = locked(ctx);
                    for (p, mut shared) in pieces.into_iter().zip(shared) {
                        match p {
                            Piece::Line(line) => {
                                let r = limit_line(l, &mut c, line, session, shared.as_mut());
                                if let Some(f) = r.forward {
                                    to_child.extend_from_slice(&f);
                                    if !f.ends_with(b"\n") {
                                        to_child.push(b'\n');
                                    }
                                }
                                replies.extend(r.reply);
                            }
                            Piece::Spill(b) => to_child.extend_from_slice(&b),
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
                child_in.write_all(&to_child)
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
        let mut c = locked(ctx);
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
        let _ = child_in.write_all(&rest);
    }
    drop(child_in);
}

/// Reads the child's stdout; inspects and passes on to rpctap's stdout.
pub fn server_to_client(
    child_out: &mut impl Read,
    ctx: &Mutex<ExchangeCtx>,
    out: &Mutex<ClientOut>,
    max: usize,
) {
    let mut lines = Lines::new(max);
    let mut buf = vec![0u8; CHUNK];
    let dir = Direction::ServerToClient;
    let mut client_gone = false;
    loop {
        let n = match child_out.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!(error = %e, "reading the server's stdout failed");
                break;
            }
        };
        let chunk = &buf[..n];
        {
            let mut c = locked(ctx);
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
    let mut c = locked(ctx);
    lines.finish(&mut |p| inspect_piece(&mut c, dir, p));
}

fn inspect_piece(c: &mut ExchangeCtx, dir: Direction, p: Piece) {
    match p {
        Piece::Line(l) => c.line(dir, l),
        Piece::Spill(_) => {}
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

//! `rpctap stdio -- COMMAND …`: wraps a stdio MCP (or any newline-delimited JSON-RPC) server.
//!
//! rpctap spawns the command and relays its own stdin to the child's stdin and the child's
//! stdout to its own stdout, byte for byte and as soon as bytes arrive (a partial line is passed
//! on before its newline); the child's stderr is the child's own (inherited). Each direction is
//! split into lines on a copy and every line goes through the one inspector, in one scope (the
//! session `stdio-PID`). A line is inspected *before* the bytes that complete it are passed on,
//! so a reply can never be seen before the call it answers.
//!
//! The relays are two plain threads doing blocking reads and writes: the fewest hops between
//! the pipes (a runtime's stdio goes through its blocking pool). The runtime keeps signals,
//! the admin listener, the log and the recorder.
//!
//! Rate limits: with rules in force, the client's lines are passed on whole (a line is held
//! until its newline, so a refused call can be taken out); a refused call's JSON-RPC error is
//! written to the client's stdout between two of the server's lines — the one case where rpctap
//! writes into the stream. A batch with refused members is passed on without them, and their
//! errors go to the client as one array line of their own. Concurrency rules
//! (`max_concurrent`) do not apply on stdio: there is no exchange to hold a permit for.
//!
//! Process handling: SIGINT, SIGTERM and SIGHUP are forwarded to the child; when the client
//! closes stdin the child's stdin is closed; the child gets SIGTERM if rpctap dies (Linux
//! `PR_SET_PDEATHSIG`, so no orphan); rpctap always reaps it (no zombie) and exits with its
//! status (128+N for a signal, as a shell reports it). Calls still pending when the child has
//! exited end `MISSING_RESPONSE` with the exit status as the reason.

use crate::app::AppError;
use crate::cli::{LogFormat, StdioArgs};
use crate::events::{BusBuilder, Direction};
use crate::inspect::{EndReason, ExchangeCtx, Inspector};
use crate::limit::enforce::Forward;
use crate::limit::Limiter;
use bytes::Bytes;
use std::io::{Read, Write};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The relays' read size.
const CHUNK: usize = 64 << 10;

/// A line as the splitter hands it out.
#[derive(Debug, PartialEq, Eq)]
pub enum Piece {
    /// A whole line, without its `\n`.
    Line(Bytes),
    /// Bytes of a line already longer than the cap (passed on, not inspected).
    Spill(Bytes),
    /// The end of such a line, with its length.
    LongEnd(u64),
}

/// Splits a byte stream into lines, keeping at most `max` bytes of a partial line; a longer
/// line is handed out in pieces as it comes (`Spill`) and reported at its end (`LongEnd`).
#[derive(Debug)]
pub struct Lines {
    buf: Vec<u8>,
    max: usize,
    /// The length so far of a line beyond the cap.
    long: Option<u64>,
}

impl Lines {
    pub fn new(max: usize) -> Self {
        Lines {
            buf: Vec::new(),
            max: max.max(1),
            long: None,
        }
    }

    /// Feeds a chunk; `on` gets each piece it completes.
    pub fn feed(&mut self, mut chunk: &[u8], on: &mut dyn FnMut(Piece)) {
        while !chunk.is_empty() {
            let nl = memchr::memchr(b'\n', chunk);
            let (part, rest, ends) = match nl {
                Some(i) => (&chunk[..i], &chunk[i + 1..], true),
                None => (chunk, &chunk[chunk.len()..], false),
            };
            chunk = rest;
            if let Some(n) = self.long.as_mut() {
                *n += part.len() as u64;
                if !part.is_empty() {
                    on(Piece::Spill(Bytes::copy_from_slice(part)));
                }
                if ends {
                    let n = *n;
                    self.long = None;
                    on(Piece::LongEnd(n));
                }
                continue;
            }
            if self.buf.len() + part.len() > self.max {
                let held = std::mem::take(&mut self.buf);
                self.buf.shrink_to(64 << 10);
                let n = (held.len() + part.len()) as u64;
                if !held.is_empty() {
                    on(Piece::Spill(Bytes::from(held)));
                }
                on(Piece::Spill(Bytes::copy_from_slice(part)));
                if ends {
                    on(Piece::LongEnd(n));
                } else {
                    self.long = Some(n);
                }
                continue;
            }
            if ends {
                let line = if self.buf.is_empty() {
                    Bytes::copy_from_slice(part)
                } else {
                    self.buf.extend_from_slice(part);
                    let l = Bytes::from(std::mem::take(&mut self.buf));
                    self.buf.shrink_to(64 << 10);
                    l
                };
                on(Piece::Line(line));
            } else {
                self.buf.extend_from_slice(part);
            }
        }
    }

    /// The stream ended: a last line without its newline, if any.
    pub fn finish(&mut self, on: &mut dyn FnMut(Piece)) {
        if let Some(n) = self.long.take() {
            on(Piece::LongEnd(n));
        } else if !self.buf.is_empty() {
            on(Piece::Line(Bytes::from(std::mem::take(&mut self.buf))));
        }
    }

    /// Bytes of a partial line held (line mode passes them on at its newline).
    pub fn held(&self) -> usize {
        self.buf.len()
    }
}

/// The client's stdout, shared by the server's relay and rpctap's own replies (refusals):
/// those go in only between two lines.
struct ClientOut {
    at_line_start: bool,
    queued: Vec<u8>,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
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

/// How a process ended, as the reason of the calls it left unanswered.
pub fn describe_exit(status: &ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return format!("the server exited: killed by signal {sig}");
        }
    }
    match status.code() {
        Some(c) => format!("the server exited with status {c}"),
        None => "the server exited".into(),
    }
}

/// The exit code a shell would report for `status`.
pub fn exit_code(status: &ExitStatus) -> i32 {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(sig) = status.signal() {
            return 128 + sig;
        }
    }
    status.code().unwrap_or(1)
}

fn spawn(command: &[String]) -> std::io::Result<Child> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::process::CommandExt;
        // SAFETY: between fork and exec only async-signal-safe calls are allowed; prctl is a
        // plain system call. The child gets SIGTERM when rpctap dies, so it is never orphaned.
        unsafe {
            cmd.pre_exec(|| {
                rustix::process::set_parent_process_death_signal(Some(
                    rustix::process::Signal::TERM,
                ))
                .map_err(std::io::Error::from)
            });
        }
    }
    cmd.spawn()
}

/// The signals rpctap forwards, caught from before the child starts (so none is lost, and
/// none takes rpctap down with its default action).
#[cfg(unix)]
type Caught = Option<(
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
)>;
#[cfg(not(unix))]
type Caught = ();

#[cfg(unix)]
fn catch_signals() -> Caught {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
        signal(SignalKind::hangup()),
    ) {
        (Ok(a), Ok(b), Ok(c)) => Some((a, b, c)),
        _ => None,
    }
}
#[cfg(not(unix))]
fn catch_signals() -> Caught {}

/// Forwards SIGINT, SIGTERM and SIGHUP to the child until aborted.
fn spawn_signal_forwarder(pid: u32, caught: Caught) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let Some((mut int, mut term, mut hup)) = caught else {
                return;
            };
            let Some(pid) = rustix::process::Pid::from_raw(pid as i32) else {
                return;
            };
            loop {
                let sig = tokio::select! {
                    _ = int.recv() => rustix::process::Signal::INT,
                    _ = term.recv() => rustix::process::Signal::TERM,
                    _ = hup.recv() => rustix::process::Signal::HUP,
                };
                tracing::debug!(
                    ?sig,
                    pid = pid.as_raw_nonzero().get(),
                    "forwarding a signal to the server"
                );
                let _ = rustix::process::kill_process(pid, sig);
            }
        }
        #[cfg(not(unix))]
        {
            let _ = (pid, caught);
        }
    })
}

/// `rpctap stdio`: returns the exit code (the child's status).
pub async fn run(args: StdioArgs) -> Result<i32, AppError> {
    let flags = args.flags();
    let file = crate::config::load_file(&flags)?;
    let mut shared = crate::config::resolve_shared(&flags, &file)?;
    // stdout is the client's: the log is off unless asked for, and then on stderr or a file.
    if flags.log.is_none() && file.log.is_none() {
        shared.log = LogFormat::Off;
    }
    let limiter = Limiter::new(&shared.limits, shared.limit_code)
        .map_err(|e| crate::config::ConfigError::Invalid(e.to_string()))?;
    let log_out: Option<Box<dyn Write + Send>> = match (&shared.log, &args.log_file) {
        (LogFormat::Off, _) => None,
        (_, Some(p)) => Some(Box::new(
            std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(p)
                .map_err(|e| {
                    crate::config::ConfigError::Invalid(format!("--log-file {}: {e}", p.display()))
                })?,
        )),
        (_, None) => Some(Box::new(std::io::stderr())),
    };

    let caught = catch_signals();
    let mut child = match spawn(&args.command) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rpctap: cannot run {:?}: {e}", args.command.join(" "));
            return Ok(match e.kind() {
                std::io::ErrorKind::NotFound => 127,
                _ => 126,
            });
        }
    };
    let pid = child.id();
    let session = format!("stdio-{pid}");

    let mut bus = BusBuilder::default();
    let chain = crate::app::Chain {
        log: shared.log,
        log_out: log_out.unwrap_or_else(|| Box::new(std::io::sink())),
        record: shared.record.clone(),
        record_meta: serde_json::json!({
            "transport": "stdio",
            // The command line only: its environment is never recorded.
            "command": &args.command,
            "inspect": shared.inspect.recorded_json(),
        }),
        admin: shared.admin.clone(),
        feed_header: serde_json::json!({ "mode": "stdio", "command": &args.command, "pid": pid }),
        otel: shared.otel.clone(),
        otel_upstream: None,
    };
    let mut observers = match crate::app::Observers::attach(chain, &mut bus).await {
        Ok(o) => o,
        Err(e) => {
            let _ = child.kill();
            let _ = child.wait();
            return Err(e);
        }
    };
    let inspector = Inspector::new(shared.inspect.clone(), bus.build());
    observers.start(|s| s.inspector = Some(inspector.clone()));
    if let Some(o) = &observers.ops {
        eprintln!("{}", o.banner());
    }
    let sweeper = inspector.spawn_sweeper();
    let ctx = Arc::new(Mutex::new(inspector.begin_stream(&session)));
    let max = shared.inspect.max_frame_bytes;
    let out = Arc::new(Mutex::new(ClientOut {
        at_line_start: true,
        queued: Vec::new(),
    }));

    // Client → server.
    let (Some(child_in), Some(mut child_out)) = (child.stdin.take(), child.stdout.take()) else {
        let _ = child.kill();
        let _ = child.wait();
        return Err(AppError::Terminal(
            "the child's pipes were not set up".into(),
        ));
    };
    {
        let ctx = ctx.clone();
        let out = out.clone();
        let limiter = (!limiter.is_empty()).then_some(limiter);
        let session = session.clone();
        let rt = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("rpctap-stdin".into())
            .spawn(move || {
                let l = limiter.as_ref();
                client_to_server(child_in, &ctx, &out, l, max, &session, Some(&rt));
            })
            .map_err(|e| AppError::Terminal(format!("cannot start the relay: {e}")))?;
    }
    // Server → client: ends at the child's stdout EOF.
    let (s2c_done, s2c_rx) = tokio::sync::oneshot::channel::<()>();
    {
        let ctx = ctx.clone();
        let out = out.clone();
        std::thread::Builder::new()
            .name("rpctap-stdout".into())
            .spawn(move || {
                server_to_client(&mut child_out, &ctx, &out, max);
                let _ = s2c_done.send(());
            })
            .map_err(|e| AppError::Terminal(format!("cannot start the relay: {e}")))?;
    }
    let signals = spawn_signal_forwarder(pid, caught);
    let alive = observers.ops.as_ref().map(|o| {
        let ready = o.ready.clone();
        let every = ready_interval(&shared);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every / 2);
            loop {
                tick.tick().await;
                ready.ok();
            }
        })
    });
    let status = tokio::task::spawn_blocking(move || child.wait())
        .await
        .map_err(|e| AppError::Terminal(format!("waiting for the server: {e}")))?
        .map_err(|e| AppError::Terminal(format!("waiting for the server: {e}")))?;
    signals.abort();
    if let Some(a) = alive {
        a.abort();
    }
    let how = describe_exit(&status);
    if let Some(o) = &observers.ops {
        o.ready.failed(how.clone());
    }
    // What the child wrote before it exited is relayed and inspected before its calls end (a
    // grandchild that keeps the pipe open gets two seconds).
    let _ = tokio::time::timeout(Duration::from_secs(2), s2c_rx).await;
    locked(&ctx).end(EndReason::Closed(how.clone()));
    tracing::info!(pid, status = %how, "server exited");
    sweeper.abort();
    drop(ctx);
    drop(inspector);
    observers.finish().await;
    Ok(exit_code(&status))
}

fn ready_interval(shared: &crate::config::Shared) -> Duration {
    shared
        .admin
        .as_ref()
        .map(|a| a.ready_interval)
        .unwrap_or(Duration::from_secs(5))
        .max(Duration::from_millis(50))
}

/// Reads rpctap's stdin; inspects and passes on to the child's stdin. At EOF the child's stdin
/// is closed.
fn client_to_server(
    mut child_in: std::process::ChildStdin,
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
fn server_to_client(
    child_out: &mut std::process::ChildStdout,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<Piece> {
        let mut l = Lines::new(max);
        let mut v = Vec::new();
        for c in chunks {
            l.feed(c, &mut |p| v.push(p));
        }
        l.finish(&mut |p| v.push(p));
        v
    }

    #[test]
    fn lines_split_across_any_chunking() {
        let text = b"{\"a\":1}\n\n{\"b\":2}\r\nlast";
        for cut in 0..text.len() {
            let got = split(100, &[&text[..cut], &text[cut..]]);
            assert_eq!(
                got,
                vec![
                    Piece::Line(Bytes::from_static(b"{\"a\":1}")),
                    Piece::Line(Bytes::new()),
                    Piece::Line(Bytes::from_static(b"{\"b\":2}\r")),
                    Piece::Line(Bytes::from_static(b"last")),
                ],
                "cut at {cut}"
            );
        }
    }

    use proptest::prelude::*;

    proptest! {
        /// Any bytes, cut anywhere: the pieces put back together are the input (less the
        /// newlines), each whole line is what `split` gives, and a line over the cap is spilled
        /// and reported with its length instead.
        #[test]
        fn any_chunking_gives_the_lines_back(
            data in proptest::collection::vec(
                prop_oneof![Just(b'\n'), Just(b'{'), Just(b'a'), proptest::num::u8::ANY],
                0..400,
            ),
            cuts in proptest::collection::vec(0usize..400, 0..8),
            max in 1usize..40,
        ) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            let mut chunks = Vec::new();
            let mut at = 0;
            for c in cuts.into_iter().chain([data.len()]) {
                chunks.push(&data[at..c]);
                at = c;
            }
            let got = split(max, &chunks);
            // Reassembled: every byte once, in order (a newline is what separates lines).
            let mut back: Vec<u8> = Vec::new();
            let mut want: Vec<Piece> = Vec::new();
            let mut long = 0u64;
            for p in &got {
                match p {
                    Piece::Line(l) => {
                        back.extend_from_slice(l);
                        back.push(b'\n');
                    }
                    Piece::Spill(b) => back.extend_from_slice(b),
                    Piece::LongEnd(_) => back.push(b'\n'),
                }
            }
            let mut expected = data.clone();
            if !expected.is_empty() && expected.last() != Some(&b'\n') {
                expected.push(b'\n'); // the last line, given at the end without its newline
            }
            prop_assert_eq!(&back, &expected);
            let lines: Vec<&[u8]> = data.split(|b| *b == b'\n').collect();
            let n = if data.last() == Some(&b'\n') || data.is_empty() { lines.len() - 1 } else { lines.len() };
            for l in &lines[..n] {
                if l.len() > max {
                    long += l.len() as u64;
                    want.push(Piece::LongEnd(l.len() as u64));
                } else {
                    want.push(Piece::Line(Bytes::copy_from_slice(l)));
                }
            }
            let whole: Vec<&Piece> = got.iter().filter(|p| !matches!(p, Piece::Spill(_))).collect();
            prop_assert_eq!(whole.len(), want.len());
            for (g, w) in whole.iter().zip(&want) {
                prop_assert_eq!(*g, w);
            }
            let spilled: u64 = got.iter().map(|p| match p { Piece::Spill(b) => b.len() as u64, _ => 0 }).sum();
            prop_assert_eq!(spilled, long);
        }
    }

    #[test]
    fn a_line_beyond_the_cap_spills_and_is_reported_once() {
        let got = split(4, &[b"ab", b"cdefg", b"hi\nok\n"]);
        let spilled: Vec<u8> = got
            .iter()
            .filter_map(|p| match p {
                Piece::Spill(b) => Some(b.to_vec()),
                _ => None,
            })
            .flatten()
            .collect();
        assert_eq!(spilled, b"abcdefghi");
        assert!(got.contains(&Piece::LongEnd(9)));
        assert_eq!(got.last(), Some(&Piece::Line(Bytes::from_static(b"ok"))));
    }
}

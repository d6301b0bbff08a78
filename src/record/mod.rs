//! Recordings: the JSON Lines format (schema in `docs/recording.md`), the lossless writer, and
//! the reader that the offline commands (`replay`, `mock`, `export`, `check`) share.
//!
//! The recorder is a bus sink: each event is serialized into its line on the thread that
//! publishes it (so no event crosses threads) and appended to a bounded buffer; a writer thread
//! of its own takes the buffer every 10 ms, writes whole lines, flushes at least every 100 ms and
//! at shutdown, rotates to numbered files at `max_bytes`, and turns any lines the full buffer
//! could not take into an explicit `gap` record.
//!
//! The file's own faults do not stop the proxy. When writes fail (a full disk, a file-size
//! limit, an I/O error), the writer says so once, counts every line it cannot write as lost, and
//! tries again each second; when a write succeeds it closes any torn line and records a `gap`
//! for what was lost. When the file is deleted or moved away underneath it (checked each second),
//! it starts a new file at the same path, with a header saying `reopened`.

pub mod export;
pub mod reader;

use crate::events::{now_ns, Event, MessageEvent, Sink};
use serde_json::json;
use std::cell::RefCell;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The format version written in every header line.
pub const FORMAT_VERSION: u64 = 1;

/// How often the writer flushes at the least.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The buffer between the proxy's threads and the writer, in bytes (over a second of full load).
pub const BUFFER_BYTES: usize = 64 << 20;

/// Lines serialized on the publishing threads, waiting for the writer.
#[derive(Debug)]
pub struct LineBuffer {
    /// A std lock: held only to append one line or to swap the buffer, never across an `.await`.
    lines: Mutex<Vec<u8>>,
    cap: usize,
    /// Lines the full buffer could not take.
    lost: AtomicU64,
    /// Lines it took.
    taken: AtomicU64,
    /// Lines the writer took but could not write (the file's writes failed).
    write_lost: AtomicU64,
}

thread_local! {
    /// Each publishing thread's scratch space for one line.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(Vec::with_capacity(4096));
}

impl LineBuffer {
    pub fn new(cap: usize) -> Arc<LineBuffer> {
        Arc::new(LineBuffer {
            lines: Mutex::new(Vec::new()),
            cap,
            lost: AtomicU64::new(0),
            taken: AtomicU64::new(0),
            write_lost: AtomicU64::new(0),
        })
    }

    /// Lines taken and lines lost so far — by the full buffer or by failed writes (for the
    /// metrics).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.taken.load(Ordering::Relaxed),
            self.lost.load(Ordering::Relaxed) + self.write_lost.load(Ordering::Relaxed),
        )
    }

    /// Swaps the waiting lines into `out` (which must be empty), leaving `out`'s old allocation
    /// for the next lines.
    fn take(&self, out: &mut Vec<u8>) {
        match self.lines.lock() {
            Ok(mut g) => std::mem::swap(&mut *g, out),
            Err(p) => std::mem::swap(&mut *p.into_inner(), out),
        }
    }
}

impl Sink for LineBuffer {
    fn accept(&self, ev: &Event) {
        SCRATCH.with(|s| {
            // Neither can fail in practice (a sink does not publish; events serialize); if one
            // did, the line is counted as lost, never dropped silently.
            let Ok(mut line) = s.try_borrow_mut() else {
                self.lost.fetch_add(1, Ordering::Relaxed);
                return;
            };
            line.clear();
            if write_line(&mut line, ev).is_err() {
                self.lost.fetch_add(1, Ordering::Relaxed);
                return;
            }
            line.push(b'\n');
            let mut g = match self.lines.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            if g.len() + line.len() > self.cap {
                drop(g);
                self.lost.fetch_add(1, Ordering::Relaxed);
            } else {
                g.extend_from_slice(&line);
                drop(g);
                self.taken.fetch_add(1, Ordering::Relaxed);
            }
        });
    }
}

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub path: PathBuf,
    /// Rotate when a file reaches this size.
    pub max_bytes: Option<u64>,
    /// What to do when the file exists.
    pub mode: OpenMode,
}

/// What `--record` does with an existing file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OpenMode {
    /// Refuse an existing file (the default: a recording is evidence, never lost by accident).
    #[default]
    New,
    /// `--record-append`: add a run, with its own header, after the last part.
    Append,
    /// `--force`: overwrite it (and drop its old rotated parts).
    Overwrite,
}

/// Recording errors, naming the file.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot write recording {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read recording {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an rpctap recording: {why}")]
    Format { path: PathBuf, why: String },
    #[error("{path} exists: --record-append adds to it, --force overwrites it")]
    Exists { path: PathBuf },
    #[error("--record {path} is a directory: give a file path (e.g. {path}/session.jsonl)")]
    IsDir { path: PathBuf },
}

/// What the writer wrote.
#[derive(Debug, Default, Clone)]
pub struct RecordStats {
    pub events: u64,
    pub gaps: u64,
    pub lost: u64,
    pub files: u32,
}

/// The path of part `n` of a recording (`FILE`, `FILE.1`, `FILE.2`…).
pub fn part_path(base: &Path, n: u32) -> PathBuf {
    if n == 0 {
        base.to_path_buf()
    } else {
        let mut s = base.as_os_str().to_owned();
        s.push(format!(".{n}"));
        PathBuf::from(s)
    }
}

/// Opens an existing recording for appending, keeping it private.
fn append_private(path: &Path) -> std::io::Result<File> {
    let f = std::fs::OpenOptions::new().append(true).open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

/// Creates (or truncates) a private file (mode 0600): recordings and everything exported from
/// them hold the same traffic.
pub fn create_private(path: &Path) -> std::io::Result<File> {
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let f = o.open(path)?;
    // An existing file keeps its mode through open(): make sure it is private too.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(f)
}

struct Writer {
    opts: RecordOptions,
    meta: serde_json::Value,
    out: BufWriter<File>,
    part: u32,
    bytes: u64,
    stats: RecordStats,
}

impl Writer {
    fn open(opts: RecordOptions, mut meta: serde_json::Value) -> Result<Self, RecordError> {
        let path = part_path(&opts.path, 0);
        if path.is_dir() {
            return Err(RecordError::IsDir { path });
        }
        let exists = path.exists();
        let (f, part, bytes) = match opts.mode {
            OpenMode::New if exists => {
                return Err(RecordError::Exists { path });
            }
            OpenMode::Append if exists => {
                // The last part, so rotation goes on numbering after it.
                let mut last = 0;
                while part_path(&opts.path, last + 1).exists() {
                    last += 1;
                }
                let p = part_path(&opts.path, last);
                let f = append_private(&p).map_err(|source| RecordError::Write {
                    path: p.clone(),
                    source,
                })?;
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                if let Some(m) = meta.as_object_mut() {
                    m.insert("appended".into(), serde_json::Value::Bool(true));
                }
                (f, last, len)
            }
            _ => {
                if opts.mode == OpenMode::Overwrite {
                    let mut n = 1;
                    while std::fs::remove_file(part_path(&opts.path, n)).is_ok() {
                        n += 1;
                    }
                }
                let f =
                    create_private(&path).map_err(|source| RecordError::Write { path, source })?;
                (f, 0, 0)
            }
        };
        let mut w = Writer {
            opts,
            meta,
            out: BufWriter::with_capacity(256 << 10, f),
            part,
            bytes,
            stats: RecordStats {
                files: 1,
                ..Default::default()
            },
        };
        w.header()?;
        // Only the run's first header says it was appended; its rotated parts continue it.
        if let Some(m) = w.meta.as_object_mut() {
            m.remove("appended");
        }
        Ok(w)
    }

    fn err(&self, source: std::io::Error) -> RecordError {
        RecordError::Write {
            path: part_path(&self.opts.path, self.part),
            source,
        }
    }

    fn header(&mut self) -> Result<(), RecordError> {
        let mut h = json!({
            "rpctap_recording": FORMAT_VERSION,
            "rpctap_version": env!("CARGO_PKG_VERSION"),
            "created_ns": now_ns(),
            "part": self.part,
        });
        if let (Some(h), Some(m)) = (h.as_object_mut(), self.meta.as_object()) {
            for (k, v) in m {
                h.insert(k.clone(), v.clone());
            }
        }
        let line = h.to_string();
        self.raw_line(line.as_bytes())
    }

    fn raw_line(&mut self, line: &[u8]) -> Result<(), RecordError> {
        self.out.write_all(line).map_err(|e| self.err(e))?;
        self.out.write_all(b"\n").map_err(|e| self.err(e))?;
        self.bytes += line.len() as u64 + 1;
        Ok(())
    }

    /// Whether `len` more bytes fit in the current file (always, without rotation).
    fn fits(&self, len: usize) -> bool {
        self.opts
            .max_bytes
            .is_none_or(|max| self.bytes + len as u64 <= max)
    }

    /// Whole lines, newlines included.
    fn raw(&mut self, lines: &[u8]) -> Result<(), RecordError> {
        self.out.write_all(lines).map_err(|e| self.err(e))?;
        self.bytes += lines.len() as u64;
        Ok(())
    }

    fn line(&mut self, line: &[u8]) -> Result<(), RecordError> {
        if let Some(max) = self.opts.max_bytes {
            if self.bytes + line.len() as u64 + 1 > max && self.bytes > 0 {
                self.rotate()?;
            }
        }
        self.raw_line(line)
    }

    fn rotate(&mut self) -> Result<(), RecordError> {
        self.out.flush().map_err(|e| self.err(e))?;
        self.part += 1;
        let path = part_path(&self.opts.path, self.part);
        let f = create_private(&path).map_err(|source| RecordError::Write { path, source })?;
        self.out = BufWriter::with_capacity(256 << 10, f);
        self.bytes = 0;
        self.stats.files += 1;
        self.header()
    }

    fn flush(&mut self) -> Result<(), RecordError> {
        self.out.flush().map_err(|e| self.err(e))
    }

    /// Whether the file being written is no longer at its path (deleted, or moved away as log
    /// rotation does).
    fn moved_away(&self) -> bool {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let open = self.out.get_ref().metadata();
            let at = std::fs::metadata(part_path(&self.opts.path, self.part));
            match (open, at) {
                (Ok(o), Ok(a)) => o.ino() != a.ino() || o.dev() != a.dev(),
                (Ok(_), Err(_)) => true,
                _ => false,
            }
        }
        #[cfg(not(unix))]
        false
    }

    /// Starts a new file at the current part's path (after `moved_away`), its header marked
    /// `reopened`.
    fn reopen(&mut self) -> Result<(), RecordError> {
        // What is buffered still belongs to the old file.
        let _ = self.out.flush();
        let path = part_path(&self.opts.path, self.part);
        let f = create_private(&path).map_err(|source| RecordError::Write { path, source })?;
        self.out = BufWriter::with_capacity(256 << 10, f);
        self.bytes = 0;
        self.stats.files += 1;
        if let Some(m) = self.meta.as_object_mut() {
            m.insert("reopened".into(), serde_json::Value::Bool(true));
        }
        let r = self.header();
        if let Some(m) = self.meta.as_object_mut() {
            m.remove("reopened");
        }
        r
    }

    /// After a failed write: what the buffer still holds is dropped (counted as lost with its
    /// round), so it is not written later out of order.
    fn discard_buffer(&mut self) {
        if let Ok(f) = self.out.get_ref().try_clone() {
            let old = std::mem::replace(&mut self.out, BufWriter::with_capacity(256 << 10, f));
            let _ = old.into_parts();
        }
    }

    /// After failed writes: what was buffered is written if it can be, then a newline ends any
    /// torn line and a `gap` records how many lines were lost.
    fn resume(&mut self, lost: u64, why: &str) -> Result<(), RecordError> {
        self.flush()?;
        self.raw(b"\n")?;
        let gap = json!({ "event": "gap", "ts": now_ns(), "lost": lost,
            "message": format!("the recording's writes failed ({why}); these events were not recorded") });
        self.raw_line(gap.to_string().as_bytes())?;
        self.flush()
    }
}

/// The file stopped taking writes: since when, why, and how many lines were lost since.
struct Failing {
    error: String,
    lost: u64,
    next_try: Instant,
}

/// How often a failing recording is tried again, and a written one checked for being moved away.
const RETRY_EVERY: Duration = Duration::from_secs(1);

/// The writer's outcome, delivered when it is done.
pub type Finished = tokio::sync::oneshot::Receiver<Result<RecordStats, RecordError>>;

/// How often the writer takes the waiting lines.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

/// Opens the recording (so a bad path fails before the proxy starts) and starts the writer
/// thread, which writes what `lines` collects until `stop` fires or the bus is gone; its outcome
/// comes on the returned channel. The file writes block, so they stay off the runtime's threads.
pub fn start(
    opts: RecordOptions,
    meta: serde_json::Value,
    lines: Arc<LineBuffer>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Finished, RecordError> {
    let path = opts.path.clone();
    let w = Writer::open(opts, meta)?;
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("rpctap-recorder".into())
        .spawn(move || {
            let _ = done.send(run(w, lines, stop));
        })
        .map_err(|source| RecordError::Write { path, source })?;
    Ok(finished)
}

fn run(
    mut w: Writer,
    lines: Arc<LineBuffer>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<RecordStats, RecordError> {
    let mut lost_reported = 0u64;
    let mut last_flush = Instant::now();
    let mut last_check = Instant::now();
    let mut dirty = false;
    let mut batch: Vec<u8> = Vec::new();
    let mut failing: Option<Failing> = None;
    loop {
        // Stop asked, or nobody can publish any more (the bus is gone): write what is
        // waiting, then finish.
        let closing =
            *stop.borrow() || stop.has_changed().is_err() || Arc::strong_count(&lines) == 1;
        batch.clear();
        lines.take(&mut batch);
        if let Some(f) = &mut failing {
            if Instant::now() >= f.next_try {
                match w.resume(f.lost, &f.error) {
                    Ok(()) => {
                        tracing::warn!(path = %w.opts.path.display(), lost = f.lost, "recording resumed: writes succeed again");
                        w.stats.gaps += 1;
                        w.stats.lost += f.lost;
                        failing = None;
                    }
                    Err(_) => f.next_try = Instant::now() + RETRY_EVERY,
                }
            }
        }
        if let Some(f) = &mut failing {
            let n = memchr::memchr_iter(b'\n', &batch).count() as u64;
            f.lost += n;
            lines.write_lost.fetch_add(n, Ordering::Relaxed);
            if closing {
                w.stats.lost += f.lost;
                return Ok(w.stats);
            }
            std::thread::sleep(DRAIN_EVERY);
            continue;
        }
        if !closing && last_check.elapsed() >= RETRY_EVERY {
            last_check = Instant::now();
            if w.moved_away() {
                tracing::warn!(path = %w.opts.path.display(), "the recording file was deleted or moved away: a new one continues at its path");
                if let Err(e) = w.reopen() {
                    tracing::error!(error = %e, "the recording could not be started again");
                }
            }
        }
        match write_round(
            &mut w,
            &lines,
            &batch,
            &mut lost_reported,
            &mut dirty,
            &mut last_flush,
            closing,
        ) {
            Ok(()) => {}
            Err(e) => {
                // Said once; the lines of this round (some perhaps half written) count as lost.
                let n = memchr::memchr_iter(b'\n', &batch).count() as u64;
                tracing::error!(error = %e, "recording writes fail: the traffic goes on, and the events are counted as lost until writes succeed again");
                lines.write_lost.fetch_add(n, Ordering::Relaxed);
                w.discard_buffer();
                failing = Some(Failing {
                    error: match &e {
                        RecordError::Write { source, .. } => source.to_string(),
                        other => other.to_string(),
                    },
                    lost: n,
                    next_try: Instant::now() + RETRY_EVERY,
                });
            }
        }
        if closing {
            if let Some(f) = &failing {
                w.stats.lost += f.lost;
            }
            return Ok(w.stats);
        }
        std::thread::sleep(DRAIN_EVERY);
    }
}

/// One round of the writer: the batch, a gap for what the full buffer lost, a flush when due.
fn write_round(
    w: &mut Writer,
    lines: &LineBuffer,
    batch: &[u8],
    lost_reported: &mut u64,
    dirty: &mut bool,
    last_flush: &mut Instant,
    closing: bool,
) -> Result<(), RecordError> {
    {
        if !batch.is_empty() {
            // Every line in the batch ends with its newline: the batch is written whole, and
            // split into lines only when it would cross a rotation.
            // Counted with memchr: a byte-by-byte count was a large share of `--record`'s cost.
            let n = memchr::memchr_iter(b'\n', batch).count() as u64;
            if w.fits(batch.len()) {
                w.raw(batch)?;
            } else {
                for line in batch.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    w.line(line)?;
                }
            }
            w.stats.events += n;
            *dirty = true;
        }
        let lost = lines.lost.load(Ordering::Relaxed);
        if lost > *lost_reported {
            let gap = json!({ "event": "gap", "ts": now_ns(), "lost": lost - *lost_reported,
                "message": "the recorder fell behind; these events were not recorded" });
            w.line(gap.to_string().as_bytes())?;
            w.stats.gaps += 1;
            w.stats.lost += lost - *lost_reported;
            tracing::warn!(lost = lost - *lost_reported, "recording gap");
            *lost_reported = lost;
            *dirty = true;
        }
        // Flush when a round brought nothing new, at least every FLUSH_EVERY under load, and
        // at the end.
        if *dirty && (last_flush.elapsed() >= FLUSH_EVERY || batch.is_empty() || closing) {
            w.flush()?;
            *last_flush = Instant::now();
            *dirty = false;
        }
        if closing {
            w.flush()?;
        }
    }
    Ok(())
}

/// Writes one event as its recording line.
///
/// The lines of an exchange's usual events — HTTP request/response/end, messages, calls — are
/// written field by field, byte for byte what serde's derive writes (tests hold them to that):
/// serde writes these nested, internally tagged and flattened shapes through its generic map
/// path, and re-validates messages the parser already accepted. Other events take serde.
pub fn write_line(out: &mut Vec<u8>, ev: &Event) -> serde_json::Result<()> {
    match ev {
        Event::Message(m) => message_line(out, m),
        Event::Http(h) => http_line(out, h),
        Event::Call(c) => call_line(out, c),
        other => serde_json::to_writer(out, other),
    }
}

/// Appends one JSON object's members to a line.
struct Line<'a>(&'a mut Vec<u8>);

impl Line<'_> {
    /// `{"event":"<event>"`.
    fn open<'a>(out: &'a mut Vec<u8>, event: &str) -> Line<'a> {
        out.extend_from_slice(b"{\"event\":\"");
        out.extend_from_slice(event.as_bytes());
        out.push(b'"');
        Line(out)
    }
    // Inlined into each caller, where `name` is a literal: its copy becomes a few moves of
    // known length instead of a call.
    #[inline(always)]
    fn key(&mut self, name: &str) {
        self.0.reserve(name.len() + 4);
        self.0.extend_from_slice(b",\"");
        self.0.extend_from_slice(name.as_bytes());
        self.0.extend_from_slice(b"\":");
    }
    #[inline(always)]
    fn str(&mut self, name: &str, v: &str) {
        self.key(name);
        json_str(self.0, v);
    }
    /// A string known to need no escaping (a fixed name).
    #[inline(always)]
    fn name(&mut self, name: &str, v: &str) {
        self.key(name);
        self.0.push(b'"');
        self.0.extend_from_slice(v.as_bytes());
        self.0.push(b'"');
    }
    #[inline(always)]
    fn num(&mut self, name: &str, v: impl itoa::Integer) {
        self.key(name);
        self.0
            .extend_from_slice(itoa::Buffer::new().format(v).as_bytes());
    }
    /// `Scope`'s text written in place when nothing in it needs escaping (serde's `Serialize`
    /// builds the text first, on every line).
    fn scope(&mut self, scope: &crate::events::Scope) -> serde_json::Result<()> {
        use crate::events::Scope;
        self.key("scope");
        match scope {
            Scope::Exchange(n) => {
                self.0.extend_from_slice(b"\"exchange:");
                self.0
                    .extend_from_slice(itoa::Buffer::new().format(*n).as_bytes());
                self.0.push(b'"');
                Ok(())
            }
            Scope::Session(id) if is_plain(id) => {
                self.0.extend_from_slice(b"\"session:");
                self.0.extend_from_slice(id.as_bytes());
                self.0.push(b'"');
                Ok(())
            }
            other => serde_json::to_writer(&mut *self.0, other),
        }
    }
    fn id(&mut self, id: &crate::rpc::Id) -> serde_json::Result<()> {
        self.key("id");
        match id {
            crate::rpc::Id::Str(s) => {
                json_str(self.0, s);
                Ok(())
            }
            // An integer literal as is; any other number through serde, which checks it is one.
            crate::rpc::Id::Num(n) if crate::rpc::is_integer_literal(n) => {
                self.0.extend_from_slice(n.as_bytes());
                Ok(())
            }
            other => serde_json::to_writer(&mut *self.0, other),
        }
    }
    fn close(self) {
        self.0.push(b'}');
    }
}

/// A JSON string, byte for byte what serde_json writes: copied as is when nothing in it needs
/// escaping (no control character, quote or backslash — nearly every header, path and name),
/// else serde_json's escaping.
fn json_str(out: &mut Vec<u8>, s: &str) {
    if is_plain(s) {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(out, s);
    }
}

/// Whether `s` needs no escaping in a JSON string (no control character, quote or backslash).
fn is_plain(s: &str) -> bool {
    // No early exit: a loop LLVM can vectorize, and strings here are short.
    !s.bytes().fold(false, |esc, b| {
        esc | (b < 0x20) | (b == b'"') | (b == b'\\')
    })
}

fn direction_name(d: crate::events::Direction) -> &'static str {
    match d {
        crate::events::Direction::ClientToServer => "c2s",
        crate::events::Direction::ServerToClient => "s2c",
    }
}

fn transport_name(t: crate::events::Transport) -> &'static str {
    match t {
        crate::events::Transport::Json => "json",
        crate::events::Transport::Sse => "sse",
        crate::events::Transport::LegacySse => "legacy-sse",
        crate::events::Transport::Stdio => "stdio",
        crate::events::Transport::Ws => "ws",
    }
}

fn kind_name(k: crate::rpc::Kind) -> &'static str {
    match k {
        crate::rpc::Kind::Request => "request",
        crate::rpc::Kind::Notification => "notification",
        crate::rpc::Kind::Result => "result",
        crate::rpc::Kind::Error => "error",
        crate::rpc::Kind::Invalid => "invalid",
    }
}

/// An HTTP event's line.
fn http_line(out: &mut Vec<u8>, h: &crate::events::HttpEvent) -> serde_json::Result<()> {
    use crate::events::HttpEvent;
    fn head<'a>(out: &'a mut Vec<u8>, phase: &str, ts: u64, exchange: u64) -> Line<'a> {
        let mut l = Line::open(out, "http");
        l.name("phase", phase);
        l.num("ts", ts);
        l.num("exchange", exchange);
        l
    }
    fn headers(l: &mut Line<'_>, h: &crate::events::Headers) {
        l.key("headers");
        l.0.push(b'[');
        for (i, (k, v)) in h.0.iter().enumerate() {
            if i > 0 {
                l.0.push(b',');
            }
            l.0.push(b'[');
            // A header name is a lower-case token: nothing in it needs escaping.
            l.0.push(b'"');
            l.0.extend_from_slice(k.as_str().as_bytes());
            l.0.extend_from_slice(b"\",");
            match v.to_str() {
                Ok(text) => json_str(l.0, text), // visible ASCII (the usual case)
                Err(_) => json_str(l.0, &String::from_utf8_lossy(v.as_bytes())),
            }
            l.0.push(b']');
        }
        l.0.push(b']');
    }
    match h {
        HttpEvent::Request {
            ts,
            exchange,
            method,
            path,
            peer,
            session,
            protocol_version,
            headers: hs,
        } => {
            let mut l = head(out, "request", *ts, *exchange);
            l.str("method", method);
            l.str("path", path);
            l.str("peer", peer);
            if let Some(s) = session {
                l.str("session", s);
            }
            if let Some(v) = protocol_version {
                l.str("protocol_version", v);
            }
            headers(&mut l, hs);
            l.close();
        }
        HttpEvent::Response {
            ts,
            exchange,
            status,
            content_type,
            headers: hs,
            local,
        } => {
            let mut l = head(out, "response", *ts, *exchange);
            l.num("status", *status);
            if let Some(ct) = content_type {
                l.str("content_type", ct);
            }
            headers(&mut l, hs);
            if let Some(why) = local {
                l.str("local", why);
            }
            l.close();
        }
        HttpEvent::Endpoint { ts, exchange, url } => {
            let mut l = head(out, "endpoint", *ts, *exchange);
            l.str("url", url);
            l.close();
        }
        HttpEvent::Binary {
            ts,
            exchange,
            direction,
            len,
        } => {
            let mut l = head(out, "binary", *ts, *exchange);
            l.name("direction", direction_name(*direction));
            l.num("len", *len);
            l.close();
        }
        HttpEvent::Auth {
            ts,
            exchange,
            method,
            path,
            status,
            www_authenticate,
        } => {
            let mut l = head(out, "auth", *ts, *exchange);
            l.str("method", method);
            l.str("path", path);
            l.num("status", *status);
            if let Some(w) = www_authenticate {
                l.str("www_authenticate", w);
            }
            l.close();
        }
        HttpEvent::End {
            ts,
            exchange,
            reason,
            bytes,
        } => {
            let mut l = head(out, "end", *ts, *exchange);
            l.str("reason", reason);
            l.num("bytes", *bytes);
            l.close();
        }
    }
    Ok(())
}

/// A call's line (its outcome's members flattened into it).
fn call_line(out: &mut Vec<u8>, c: &crate::events::CallEvent) -> serde_json::Result<()> {
    use crate::events::Outcome;
    let mut l = Line::open(out, "call");
    l.num("ts", c.ts);
    l.num("exchange", c.exchange);
    l.scope(&c.scope)?;
    l.name("direction", direction_name(c.direction));
    l.str("method", &c.method);
    if let Some(t) = &c.target {
        l.str("target", t);
    }
    l.id(&c.id)?;
    match &c.outcome {
        Outcome::Result => l.name("outcome", "result"),
        Outcome::Error { code, message } => {
            l.name("outcome", "error");
            l.num("code", *code);
            l.str("message", message);
        }
        Outcome::Refused { rule } => {
            l.name("outcome", "refused");
            l.str("rule", rule);
        }
        Outcome::Rejected { status } => {
            l.name("outcome", "rejected");
            l.num("status", *status);
        }
        Outcome::Missing { reason } => {
            l.name("outcome", "missing");
            l.str("reason", reason);
        }
    }
    if let Some(v) = c.latency_us {
        l.num("latency_us", v);
    }
    l.key("anomalies");
    l.0.push(b'[');
    for (i, a) in c.anomalies.iter().enumerate() {
        if i > 0 {
            l.0.push(b',');
        }
        json_str(l.0, a);
    }
    l.0.push(b']');
    if let Some(v) = c.request_index {
        l.num("request_index", v);
    }
    if let Some(v) = c.response_index {
        l.num("response_index", v);
    }
    l.close();
    Ok(())
}

/// A message event's line. A message of any kind but `invalid` is a slice the JSON parser
/// accepted (or the redactor's re-serialization of one), so it goes out as is; an invalid one
/// may not be JSON and takes the checked path.
fn message_line(out: &mut Vec<u8>, m: &MessageEvent) -> serde_json::Result<()> {
    let mut l = Line::open(out, "message");
    l.num("ts", m.ts);
    l.num("exchange", m.exchange);
    l.scope(&m.scope)?;
    l.name("direction", direction_name(m.direction));
    l.name("transport", transport_name(m.transport));
    l.name("kind", kind_name(m.kind));
    if let Some(id) = &m.id {
        l.id(id)?;
    }
    if let Some(v) = &m.method {
        l.str("method", v);
    }
    if let Some(v) = &m.target {
        l.str("target", v);
    }
    if let Some(v) = m.batch_index {
        l.num("batch_index", v);
    }
    if let Some(v) = m.batch_len {
        l.num("batch_len", v);
    }
    if let Some(v) = &m.sse_id {
        l.str("sse_id", v);
    }
    l.key("message");
    if m.kind == crate::rpc::Kind::Invalid {
        serde_json::to_writer(&mut *l.0, &crate::events::RawMessage(&m.message))?;
    } else {
        l.0.extend_from_slice(&m.message);
    }
    if m.unparsed {
        l.key("unparsed");
        l.0.extend_from_slice(b"true");
    }
    if m.binary {
        l.key("binary");
        l.0.extend_from_slice(b"true");
    }
    l.close();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{BusBuilder, Event, NoticeEvent};

    #[test]
    fn lines_from_many_threads_arrive_whole() {
        let lines = LineBuffer::new(BUFFER_BYTES);
        let mut b = BusBuilder::default();
        b.sink(crate::events::Interest::ALL, lines.clone());
        let bus = b.build();
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let bus = bus.clone();
                s.spawn(move || {
                    for i in 0..1000 {
                        bus.publish(Event::Notice(NoticeEvent {
                            ts: t * 10_000 + i,
                            what: "test",
                            message: "x".repeat((i % 97) as usize),
                        }));
                    }
                });
            }
        });
        let mut out = Vec::new();
        lines.take(&mut out);
        let parsed: Vec<serde_json::Value> = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("a whole line"))
            .collect();
        assert_eq!(parsed.len(), 4000);
        // Each thread's lines keep their order.
        for t in 0..4u64 {
            let ts: Vec<u64> = parsed
                .iter()
                .map(|v| v["ts"].as_u64().unwrap())
                .filter(|ts| ts / 10_000 == t)
                .collect();
            assert!(ts.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(lines.lost.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn fixed_names_are_serdes() {
        use crate::events::{Direction, Transport};
        use crate::rpc::Kind;
        let q = |n: &str| format!("\"{n}\"");
        for d in [Direction::ClientToServer, Direction::ServerToClient] {
            assert_eq!(serde_json::to_string(&d).unwrap(), q(direction_name(d)));
        }
        for t in [
            Transport::Json,
            Transport::Sse,
            Transport::LegacySse,
            Transport::Stdio,
        ] {
            assert_eq!(serde_json::to_string(&t).unwrap(), q(transport_name(t)));
        }
        for k in [
            Kind::Request,
            Kind::Notification,
            Kind::Result,
            Kind::Error,
            Kind::Invalid,
        ] {
            assert_eq!(serde_json::to_string(&k).unwrap(), q(kind_name(k)));
        }
    }

    /// The recorder's line for `ev` is byte for byte what serde writes for it.
    fn assert_written_as_serde_writes(ev: Event) {
        let mut fast = Vec::new();
        write_line(&mut fast, &ev).unwrap();
        let slow = serde_json::to_vec(&ev).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&fast),
            String::from_utf8_lossy(&slow)
        );
    }

    #[test]
    fn call_lines_are_what_serde_writes() {
        use crate::events::{CallEvent, Direction, Outcome, Scope};
        use crate::rpc::Id;
        let base = CallEvent {
            ts: 1_796_015_737_927_874_787,
            exchange: 12,
            scope: Scope::Session("s\"1\u{7}".into()),
            direction: Direction::ServerToClient,
            method: "sampling/createMessage".into(),
            target: Some("t\\x".into()),
            id: Id::Str("a\u{e9}\n".into()),
            outcome: Outcome::Result,
            latency_us: Some(2871),
            anomalies: vec!["DUPLICATE_ID", "UNSAFE_ID"],
            request_index: Some(0),
            response_index: Some(u32::MAX),
            trace: None,
        };
        let mut calls = vec![base.clone()];
        for outcome in [
            Outcome::Error {
                code: -32601,
                message: "Method \"x\" not found".into(),
            },
            Outcome::Refused {
                rule: "tools/*=10/s".into(),
            },
            Outcome::Rejected { status: 429 },
            Outcome::Missing {
                reason: "no reply within 30 s".into(),
            },
        ] {
            calls.push(CallEvent {
                outcome,
                scope: Scope::Exchange(u64::MAX),
                direction: Direction::ClientToServer,
                target: None,
                id: Id::Num("12345678901234567890".into()),
                latency_us: None,
                anomalies: vec![],
                request_index: None,
                response_index: None,
                ..base.clone()
            });
        }
        // Ids written in place or through serde, and a session scope that needs no escaping.
        for n in ["0", "-0", "-7", "42", "1.5", "1e3", "01", "-", "", "x"] {
            calls.push(CallEvent {
                id: Id::Num(n.into()),
                scope: Scope::Session("f3e7159a43955c476660e7949b898fe7".into()),
                ..base.clone()
            });
        }
        calls.push(CallEvent {
            id: Id::Null,
            ..base
        });
        for c in calls {
            assert_written_as_serde_writes(Event::Call(c));
        }
    }

    #[test]
    fn http_lines_are_what_serde_writes() {
        use crate::events::{Headers, HttpEvent};
        let mut hm = http::HeaderMap::new();
        hm.insert("host", http::HeaderValue::from_static("127.0.0.1:9000"));
        hm.append("x-a", http::HeaderValue::from_static("say \"hi\" \\ there"));
        hm.append("x-a", http::HeaderValue::from_static("second"));
        hm.insert(
            "x-bin",
            http::HeaderValue::from_bytes(b"caf\xe9\t").unwrap(),
        );
        let events = [
            HttpEvent::Request {
                ts: 1_796_015_737_927_874_787,
                exchange: 3,
                method: "POST".into(),
                path: "/mcp?sessionId=a\"b".into(),
                peer: "[::1]:4000".into(),
                session: Some("s\u{e9}ss\u{1}".into()),
                protocol_version: Some("2025-06-18".into()),
                headers: Headers(hm.clone()),
            },
            HttpEvent::Request {
                ts: 1,
                exchange: 0,
                method: "GET".into(),
                path: "/".into(),
                peer: String::new(),
                session: None,
                protocol_version: None,
                headers: Headers::default(),
            },
            HttpEvent::Response {
                ts: 2,
                exchange: 3,
                status: 200,
                content_type: Some("text/event-stream".into()),
                headers: Headers(hm),
                local: None,
            },
            HttpEvent::Response {
                ts: 2,
                exchange: 3,
                status: 502,
                content_type: None,
                headers: Headers::default(),
                local: Some("upstream unreachable: \"refused\"".into()),
            },
            HttpEvent::Endpoint {
                ts: 3,
                exchange: 4,
                url: "/messages/?session_id=a\"b".into(),
            },
            HttpEvent::End {
                ts: 5,
                exchange: u64::MAX,
                reason: "client went away: \"reset\"".into(),
                bytes: 1 << 40,
            },
        ];
        for h in events {
            assert_written_as_serde_writes(Event::Http(h));
        }
    }

    #[test]
    fn message_lines_are_what_serde_writes() {
        use crate::events::{Direction, Scope, Transport};
        use crate::rpc::Kind;
        let base = MessageEvent {
            ts: 1_796_015_737_927_874_787,
            exchange: 7,
            scope: Scope::Session("ab\"c".into()),
            direction: Direction::ServerToClient,
            transport: Transport::Sse,
            kind: Kind::Request,
            id: Some(crate::rpc::Id::Str("x\u{e9}\"".into())),
            method: Some("tools/call".into()),
            target: Some("se\u{e9}arch \"q\"".into()),
            batch_index: Some(3),
            batch_len: Some(5),
            sse_id: Some("ev-1\n".into()),
            message: bytes::Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":"x\u00e9","method":"m", "params" : [1, 2.50]}"#,
            ),
            unparsed: false,
            binary: false,
        };
        let numeric = MessageEvent {
            id: Some(crate::rpc::Id::Num("12345678901234567890".into())),
            kind: Kind::Result,
            ..base.clone()
        };
        let minimal = MessageEvent {
            scope: Scope::Exchange(9),
            id: None,
            method: None,
            target: None,
            batch_index: None,
            batch_len: None,
            sse_id: None,
            kind: Kind::Notification,
            ..base.clone()
        };
        let not_json = MessageEvent {
            kind: Kind::Invalid,
            message: bytes::Bytes::from_static(b"{\"jsonrpc\": \xff"),
            unparsed: true,
            ..minimal.clone()
        };
        let invalid_json = MessageEvent {
            kind: Kind::Invalid,
            message: bytes::Bytes::from_static(b"[1, 2]"),
            ..minimal.clone()
        };
        let binary = MessageEvent {
            binary: true,
            ..base.clone()
        };
        for m in [base, numeric, minimal, not_json, invalid_json, binary] {
            assert_written_as_serde_writes(Event::Message(m));
        }
    }

    #[tokio::test]
    async fn events_the_queue_could_not_hold_become_a_gap_record() {
        let dir = std::env::temp_dir().join(format!("rpctap-gap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("gap.jsonl");
        let notice = |i| {
            Event::Notice(NoticeEvent {
                ts: i,
                what: "test",
                message: format!("n{i}"),
            })
        };
        // Room for exactly two lines.
        let one = serde_json::to_vec(&notice(0)).unwrap().len() + 1;
        let lines = LineBuffer::new(2 * one);
        let mut b = BusBuilder::default();
        b.sink(crate::events::Interest::ALL, lines.clone());
        let bus = b.build();
        for i in 0..10 {
            bus.publish(notice(i));
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let task = start(
            RecordOptions {
                path: path.clone(),
                max_bytes: None,
                mode: OpenMode::Overwrite,
            },
            serde_json::json!({}),
            lines,
            stop_rx,
        )
        .unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(true).unwrap();
        let stats = task.await.unwrap().unwrap();
        assert_eq!((stats.events, stats.lost, stats.gaps), (2, 8, 1));
        let rec = reader::read(&path).unwrap();
        let gap = rec.events.iter().find_map(|e| match e {
            reader::RecEvent::Other(v) if v["event"] == "gap" => Some(v.clone()),
            _ => None,
        });
        assert_eq!(gap.unwrap()["lost"], 8);
    }
}

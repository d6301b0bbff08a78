//! Recordings: the JSON Lines format (schema in `docs/recording.md`), the lossless writer, and
//! the reader that the offline commands (`replay`, `mock`, `export`, `check`) share.
//!
//! The recorder is a bus sink: each event is serialized into its line on the thread that
//! publishes it (so no event crosses threads) and appended to a bounded buffer; a writer thread
//! of its own takes the buffer every 10 ms, writes whole lines, flushes at least every 100 ms and
//! at shutdown, rotates to numbered files at `max_bytes`, and turns any lines the full buffer
//! could not take into an explicit `gap` record.

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
        })
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
            }
        });
    }
}

#[derive(Clone, Debug)]
pub struct RecordOptions {
    pub path: PathBuf,
    /// Rotate when a file reaches this size.
    pub max_bytes: Option<u64>,
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

fn create_private(path: &Path) -> std::io::Result<File> {
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
    fn open(opts: RecordOptions, meta: serde_json::Value) -> Result<Self, RecordError> {
        let path = part_path(&opts.path, 0);
        let f = create_private(&path).map_err(|source| RecordError::Write { path, source })?;
        let mut w = Writer {
            opts,
            meta,
            out: BufWriter::with_capacity(256 << 10, f),
            part: 0,
            bytes: 0,
            stats: RecordStats {
                files: 1,
                ..Default::default()
            },
        };
        w.header()?;
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
}

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
    let mut dirty = false;
    let mut batch: Vec<u8> = Vec::new();
    loop {
        // Stop asked, or nobody can publish any more (the bus is gone): write what is
        // waiting, then finish.
        let closing =
            *stop.borrow() || stop.has_changed().is_err() || Arc::strong_count(&lines) == 1;
        batch.clear();
        lines.take(&mut batch);
        if !batch.is_empty() {
            // Every line in the batch ends with its newline: the batch is written whole, and
            // split into lines only when it would cross a rotation.
            let n = batch.iter().filter(|&&b| b == b'\n').count() as u64;
            if w.fits(batch.len()) {
                w.raw(&batch)?;
            } else {
                for line in batch.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
                    w.line(line)?;
                }
            }
            w.stats.events += n;
            dirty = true;
        }
        let lost = lines.lost.load(Ordering::Relaxed);
        if lost > lost_reported {
            let gap = json!({ "event": "gap", "ts": now_ns(), "lost": lost - lost_reported,
                "message": "the recorder fell behind; these events were not recorded" });
            w.line(gap.to_string().as_bytes())?;
            w.stats.gaps += 1;
            w.stats.lost += lost - lost_reported;
            tracing::warn!(lost = lost - lost_reported, "recording gap");
            lost_reported = lost;
            dirty = true;
        }
        // Flush when a round brought nothing new, at least every FLUSH_EVERY under load, and
        // at the end.
        if dirty && (last_flush.elapsed() >= FLUSH_EVERY || batch.is_empty() || closing) {
            w.flush()?;
            last_flush = Instant::now();
            dirty = false;
        }
        if closing {
            w.flush()?;
            return Ok(w.stats);
        }
        std::thread::sleep(DRAIN_EVERY);
    }
}

/// Writes one event as its recording line.
fn write_line(out: &mut Vec<u8>, ev: &Event) -> serde_json::Result<()> {
    match ev {
        Event::Message(m) => message_line(out, m),
        Event::Http(h) => http_line(out, h),
        other => serde_json::to_writer(out, other),
    }
}

/// A JSON string, byte for byte what serde_json writes: copied as is when nothing in it needs
/// escaping (no control character, quote or backslash — nearly every header, path and name),
/// else serde_json's escaping.
fn json_str(out: &mut Vec<u8>, s: &str) -> serde_json::Result<()> {
    if s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
        Ok(())
    } else {
        serde_json::to_writer(out, s)
    }
}

/// An HTTP event's line, byte for byte what serde's derive writes (a test holds it to that),
/// written field by field: three of an exchange's lines are these, and serde writes nested
/// internally tagged enums through its generic map path.
fn http_line(out: &mut Vec<u8>, h: &crate::events::HttpEvent) -> serde_json::Result<()> {
    use crate::events::HttpEvent;
    fn head(out: &mut Vec<u8>, phase: &str, ts: u64, exchange: u64) -> serde_json::Result<()> {
        out.extend_from_slice(b"{\"event\":\"http\",\"phase\":\"");
        out.extend_from_slice(phase.as_bytes());
        out.extend_from_slice(b"\",\"ts\":");
        serde_json::to_writer(&mut *out, &ts)?;
        out.extend_from_slice(b",\"exchange\":");
        serde_json::to_writer(&mut *out, &exchange)
    }
    fn str_field(out: &mut Vec<u8>, name: &str, v: &str) -> serde_json::Result<()> {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        json_str(out, v)
    }
    fn headers(out: &mut Vec<u8>, h: &crate::events::Headers) -> serde_json::Result<()> {
        out.extend_from_slice(b",\"headers\":[");
        for (i, (k, v)) in h.0.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.push(b'[');
            json_str(out, k.as_str())?;
            out.push(b',');
            json_str(out, &String::from_utf8_lossy(v.as_bytes()))?;
            out.push(b']');
        }
        out.push(b']');
        Ok(())
    }
    match h {
        HttpEvent::Request {
            ts,
            exchange,
            method,
            path,
            peer,
            session,
            headers: hs,
        } => {
            head(out, "request", *ts, *exchange)?;
            str_field(out, "method", method)?;
            str_field(out, "path", path)?;
            str_field(out, "peer", peer)?;
            if let Some(s) = session {
                str_field(out, "session", s)?;
            }
            headers(out, hs)?;
        }
        HttpEvent::Response {
            ts,
            exchange,
            status,
            content_type,
            headers: hs,
        } => {
            head(out, "response", *ts, *exchange)?;
            out.extend_from_slice(b",\"status\":");
            serde_json::to_writer(&mut *out, status)?;
            if let Some(ct) = content_type {
                str_field(out, "content_type", ct)?;
            }
            headers(out, hs)?;
        }
        HttpEvent::End {
            ts,
            exchange,
            reason,
            bytes,
        } => {
            head(out, "end", *ts, *exchange)?;
            str_field(out, "reason", reason)?;
            out.extend_from_slice(b",\"bytes\":");
            serde_json::to_writer(&mut *out, bytes)?;
        }
    }
    out.push(b'}');
    Ok(())
}

/// A message event's line, byte for byte what serde's derive writes (a test holds it to
/// that), written field by field: a call is two message lines, and this skips serde's
/// buffering of internally tagged enums and the re-validation of a message the parser already
/// accepted. A message of any kind but `invalid` is a slice the JSON parser accepted (or the
/// redactor's re-serialization of one), so it goes out as is; an invalid one may not be JSON
/// and takes the checked path.
fn message_line(out: &mut Vec<u8>, m: &MessageEvent) -> serde_json::Result<()> {
    fn field<T: serde::Serialize + ?Sized>(
        out: &mut Vec<u8>,
        name: &str,
        v: &T,
    ) -> serde_json::Result<()> {
        out.extend_from_slice(b",\"");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b"\":");
        serde_json::to_writer(out, v)
    }
    out.extend_from_slice(b"{\"event\":\"message\",\"ts\":");
    serde_json::to_writer(&mut *out, &m.ts)?;
    field(out, "exchange", &m.exchange)?;
    field(out, "scope", &m.scope)?;
    field(out, "direction", &m.direction)?;
    field(out, "transport", &m.transport)?;
    field(out, "kind", &m.kind)?;
    if let Some(id) = &m.id {
        field(out, "id", id)?;
    }
    if let Some(v) = &m.method {
        field(out, "method", v)?;
    }
    if let Some(v) = &m.target {
        field(out, "target", v)?;
    }
    if let Some(v) = &m.batch_index {
        field(out, "batch_index", v)?;
    }
    if let Some(v) = &m.sse_id {
        field(out, "sse_id", v)?;
    }
    if m.kind == crate::rpc::Kind::Invalid {
        field(out, "message", &crate::events::RawMessage(&m.message))?;
    } else {
        out.extend_from_slice(b",\"message\":");
        out.extend_from_slice(&m.message);
    }
    out.push(b'}');
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
                headers: Headers(hm.clone()),
            },
            HttpEvent::Request {
                ts: 1,
                exchange: 0,
                method: "GET".into(),
                path: "/".into(),
                peer: String::new(),
                session: None,
                headers: Headers::default(),
            },
            HttpEvent::Response {
                ts: 2,
                exchange: 3,
                status: 200,
                content_type: Some("text/event-stream".into()),
                headers: Headers(hm),
            },
            HttpEvent::Response {
                ts: 2,
                exchange: 3,
                status: 502,
                content_type: None,
                headers: Headers::default(),
            },
            HttpEvent::End {
                ts: 5,
                exchange: u64::MAX,
                reason: "client went away: \"reset\"".into(),
                bytes: 1 << 40,
            },
        ];
        for h in events {
            let mut fast = Vec::new();
            http_line(&mut fast, &h).unwrap();
            let slow = serde_json::to_vec(&Event::Http(h)).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&slow)
            );
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
            sse_id: Some("ev-1\n".into()),
            message: bytes::Bytes::from_static(
                br#"{"jsonrpc":"2.0","id":"x\u00e9","method":"m", "params" : [1, 2.50]}"#,
            ),
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
            sse_id: None,
            kind: Kind::Notification,
            ..base.clone()
        };
        let not_json = MessageEvent {
            kind: Kind::Invalid,
            message: bytes::Bytes::from_static(b"{\"jsonrpc\": \xff"),
            ..minimal.clone()
        };
        let invalid_json = MessageEvent {
            kind: Kind::Invalid,
            message: bytes::Bytes::from_static(b"[1, 2]"),
            ..minimal.clone()
        };
        for m in [base, numeric, minimal, not_json, invalid_json] {
            let mut fast = Vec::new();
            message_line(&mut fast, &m).unwrap();
            let slow = serde_json::to_vec(&Event::Message(m)).unwrap();
            assert_eq!(
                String::from_utf8_lossy(&fast),
                String::from_utf8_lossy(&slow)
            );
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

//! Recordings: the JSON Lines format (schema in `docs/recording.md`), the lossless writer, and
//! the reader that the offline commands (`replay`, `mock`, `export`, `check`) share.
//!
//! The recorder is a bus sink: each event is serialized into its line on the thread that
//! publishes it (so no event crosses threads), straight into that thread's own bounded buffer
//! ([`crate::events::lines`]); a writer thread of its own takes the buffers every 10 ms (merged
//! by time), writes whole lines, flushes at least every 100 ms and at shutdown, rotates to
//! numbered files at `max_bytes`, and turns any lines a full buffer could not take into an
//! explicit `gap` record.
//!
//! The file's own faults do not stop the proxy. When writes fail (a full disk, a file-size
//! limit, an I/O error), the writer says so once, counts every line it cannot write as lost, and
//! tries again each second; when a write succeeds it closes any torn line and records a `gap`
//! for what was lost. When the file is deleted or moved away underneath it (checked each second),
//! it starts a new file at the same path, with a header saying `reopened`.
//!
//! Its rooms: this file holds the sink (`LineBuffer`), the options and `start`; `writer` the
//! file writer (rotation, failures, `gap` records); `line` the line encoder.

pub mod export;
mod line;
pub mod reader;
pub mod report;
mod writer;

pub use line::write_line;
pub use writer::{create_private, part_path};
use writer::{run, Writer};

use crate::events::lines::{LineShards, Lines};
use crate::events::{now_ns, Event, Sink};
use serde_json::json;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The format version written in every header line.
pub const FORMAT_VERSION: u64 = 1;

/// How often the writer flushes at the least.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The buffer between the proxy's threads and the writer, in bytes (over a second of full load).
pub const BUFFER_BYTES: usize = 64 << 20;

/// Lines serialized on the publishing threads, waiting for the writer: each thread's in a
/// buffer of its own ([`LineShards`]), merged by time when the writer takes them.
#[derive(Debug)]
pub struct LineBuffer {
    lines: LineShards,
    /// Lines the writer took from the buffers.
    taken: AtomicU64,
    /// Lines the writer took but could not write (the file's writes failed).
    write_lost: AtomicU64,
}

impl LineBuffer {
    pub fn new(cap: usize) -> Arc<LineBuffer> {
        Arc::new(LineBuffer {
            lines: LineShards::new(cap),
            taken: AtomicU64::new(0),
            write_lost: AtomicU64::new(0),
        })
    }

    /// Lines taken and lines lost so far — by a full buffer or by failed writes (for the
    /// metrics).
    pub fn counts(&self) -> (u64, u64) {
        (
            self.taken.load(Ordering::Relaxed),
            self.lost() + self.write_lost.load(Ordering::Relaxed),
        )
    }

    /// Lines the full buffers could not take.
    fn lost(&self) -> u64 {
        self.lines.lost()
    }

    /// Takes the waiting lines into `batch`, in time order, and how many there are.
    fn take(&self, bufs: &mut Vec<Lines>, batch: &mut Vec<u8>) -> u64 {
        let n = self.lines.drain(bufs, batch) as u64;
        self.taken.fetch_add(n, Ordering::Relaxed);
        n
    }
}

impl Sink for LineBuffer {
    fn accept(&self, ev: &Event) {
        // Events serialize; a line that could not would be counted as lost, never dropped
        // silently.
        self.lines.put(ev.ts(), |line| {
            write_line(line, ev)?;
            line.push(b'\n');
            serde_json::Result::Ok(())
        });
    }
}

#[derive(Clone, Debug)]
pub struct Options {
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
pub enum Error {
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
pub struct Stats {
    pub events: u64,
    pub gaps: u64,
    pub lost: u64,
    pub files: u32,
}

/// The writer's outcome, delivered when it is done.
pub type Finished = tokio::sync::oneshot::Receiver<Result<Stats, Error>>;

/// Opens the recording (so a bad path fails before the proxy starts) and starts the writer
/// thread, which writes what `lines` collects until `stop` fires or the bus is gone; its outcome
/// comes on the returned channel. The file writes block, so they stay off the runtime's threads.
pub fn start(
    opts: Options,
    meta: serde_json::Value,
    lines: Arc<LineBuffer>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Finished, Error> {
    let path = opts.path.clone();
    let w = Writer::open(opts, meta)?;
    let (done, finished) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("rpctap-recorder".into())
        .spawn(move || {
            let _ = done.send(run(w, lines, stop));
        })
        .map_err(|source| Error::Write { path, source })?;
    Ok(finished)
}

/// The name a recording's server goes by in reports: the label its header gives (a stdio shim,
/// a proxy in the hub), else its upstream's host and port.
pub fn label(header: &serde_json::Value) -> String {
    if let Some(l) = header.get("label").and_then(|l| l.as_str()) {
        return l.to_string();
    }
    header
        .get("upstream")
        .and_then(|u| u.as_str())
        .and_then(|u| u.parse::<http::Uri>().ok())
        .and_then(|u| {
            let host = u.host()?.to_string();
            Some(match u.port_u16() {
                Some(p) => format!("{host}:{p}"),
                None => host,
            })
        })
        .unwrap_or_else(|| "server".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{BusBuilder, Event, NoticeEvent};

    #[test]
    fn lines_from_many_threads_arrive_whole() {
        let lines = LineBuffer::new(BUFFER_BYTES);
        let bus = bus_into(&lines);
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
        assert_eq!(lines.take(&mut Vec::new(), &mut out), 4000);
        let parsed: Vec<serde_json::Value> = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).expect("a whole line"))
            .collect();
        assert_eq!(parsed.len(), 4000);
        // Each thread's lines keep their order, and the lines are merged in time order.
        let all: Vec<u64> = parsed.iter().map(|v| v["ts"].as_u64().unwrap()).collect();
        assert!(all.windows(2).all(|w| w[0] <= w[1]));
        for t in 0..4u64 {
            let ts: Vec<u64> = parsed
                .iter()
                .map(|v| v["ts"].as_u64().unwrap())
                .filter(|ts| ts / 10_000 == t)
                .collect();
            assert!(ts.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(lines.counts(), (4000, 0));
    }

    fn notice(i: u64) -> Event {
        Event::Notice(NoticeEvent {
            ts: i,
            what: "test",
            message: format!("n{i}"),
        })
    }

    /// A bus whose one sink is `lines`.
    fn bus_into(lines: &Arc<LineBuffer>) -> crate::events::Bus {
        let mut b = BusBuilder::default();
        b.sink(crate::events::Interest::ALL, lines.clone());
        b.build()
    }

    /// The writer on `path` (overwritten), taking from `lines` until `stop`.
    fn start_at(
        path: &std::path::Path,
        lines: Arc<LineBuffer>,
        stop: tokio::sync::watch::Receiver<bool>,
    ) -> Finished {
        start(
            Options {
                path: path.to_path_buf(),
                max_bytes: None,
                mode: OpenMode::Overwrite,
            },
            serde_json::json!({}),
            lines,
            stop,
        )
        .unwrap()
    }

    /// A batch larger than the writer's direct-write size goes to the file after the header
    /// the `BufWriter` still holds, and the small batches after it follow in order.
    #[tokio::test]
    async fn a_large_batch_lands_after_the_header_and_before_what_follows() {
        let dir = std::env::temp_dir().join(format!("rpctap-bigbatch-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("big.jsonl");
        let lines = LineBuffer::new(8 << 20);
        let bus = bus_into(&lines);
        // ~60 B a line: the first batch is far over 16 KiB.
        for i in 0..3000 {
            bus.publish(notice(i));
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let task = start_at(&path, lines, stop_rx);
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in 3000..3010 {
            bus.publish(notice(i));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(true).unwrap();
        let stats = task.await.unwrap().unwrap();
        assert_eq!((stats.events, stats.lost), (3010, 0));
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.starts_with("{\"rpctap_recording\""), "{}", &text[..80]);
        let rec = reader::read(&path).unwrap();
        let ts: Vec<u64> = rec
            .events
            .iter()
            .filter_map(|e| match e {
                Event::Notice(n) => Some(n.ts),
                _ => None,
            })
            .collect();
        assert_eq!(ts, (0..3010).collect::<Vec<u64>>());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn events_the_queue_could_not_hold_become_a_gap_record() {
        let dir = std::env::temp_dir().join(format!("rpctap-gap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("gap.jsonl");
        // The smallest buffers (4 KiB each, and a pool of 4 KiB; this thread writes to one):
        // it takes lines while they fit in 8 KiB, and refuses the rest.
        let mut held = 0;
        let fit = (0..)
            .take_while(|&i| {
                held += serde_json::to_vec(&notice(i)).unwrap().len() + 1;
                held <= 8192
            })
            .count() as u64;
        let lines = LineBuffer::new(0);
        let bus = bus_into(&lines);
        for i in 0..fit + 8 {
            bus.publish(notice(i));
        }
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let task = start_at(&path, lines, stop_rx);
        tokio::time::sleep(Duration::from_millis(50)).await;
        stop_tx.send(true).unwrap();
        let stats = task.await.unwrap().unwrap();
        assert_eq!((stats.events, stats.lost, stats.gaps), (fit, 8, 1));
        let rec = reader::read(&path).unwrap();
        let gap = rec.events.iter().find_map(|e| match e {
            Event::Gap(g) => Some(g.lost),
            _ => None,
        });
        assert_eq!(gap, Some(8));
    }
}

//! The recording's file writer: a thread of its own takes the sink's lines every 10 ms, writes
//! whole lines, flushes at least every 100 ms, rotates to numbered parts at `max_bytes`, turns
//! lines the sink could not hold into `gap` records, and rides out the file's own faults (a full
//! disk, the file moved away) without stopping the proxy.

use super::*;

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

pub use crate::private::create as create_private;

/// A batch at least this large is written to the file directly (see `Writer::raw`).
const DIRECT_WRITE: usize = 16 << 10;

pub(super) struct Writer {
    opts: Options,
    meta: serde_json::Value,
    out: BufWriter<File>,
    part: u32,
    bytes: u64,
    stats: Stats,
}

impl Writer {
    pub(super) fn open(opts: Options, mut meta: serde_json::Value) -> Result<Self, Error> {
        let path = part_path(&opts.path, 0);
        if path.is_dir() {
            return Err(Error::IsDir { path });
        }
        let exists = path.exists();
        let (f, part, bytes) = match opts.mode {
            OpenMode::New if exists => {
                return Err(Error::Exists { path });
            }
            OpenMode::Append if exists => {
                // The last part, so rotation goes on numbering after it.
                let mut last = 0;
                while part_path(&opts.path, last + 1).exists() {
                    last += 1;
                }
                let p = part_path(&opts.path, last);
                let f = append_private(&p).map_err(|source| Error::Write {
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
                let f = create_private(&path).map_err(|source| Error::Write { path, source })?;
                (f, 0, 0)
            }
        };
        let mut w = Writer {
            opts,
            meta,
            out: BufWriter::with_capacity(256 << 10, f),
            part,
            bytes,
            stats: Stats {
                files: 1,
                ..Default::default()
            },
        };
        w.header()?;
        // On disk at once: a session killed before any traffic is still a session (`sessions`
        // and `watch` read its header), not an empty file.
        w.flush()?;
        // Only the run's first header says it was appended; its rotated parts continue it.
        if let Some(m) = w.meta.as_object_mut() {
            m.remove("appended");
        }
        Ok(w)
    }

    fn err(&self, source: std::io::Error) -> Error {
        Error::Write {
            path: part_path(&self.opts.path, self.part),
            source,
        }
    }

    fn header(&mut self) -> Result<(), Error> {
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

    fn raw_line(&mut self, line: &[u8]) -> Result<(), Error> {
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

    /// Whole lines, newlines included. A large batch is already the one buffer a write wants:
    /// it goes to the file straight after what the `BufWriter` holds, not copied into it first
    /// (that copy was a tenth of `--record`'s cost).
    fn raw(&mut self, lines: &[u8]) -> Result<(), Error> {
        if lines.len() >= DIRECT_WRITE {
            self.out.flush().map_err(|e| self.err(e))?;
            self.out
                .get_mut()
                .write_all(lines)
                .map_err(|e| self.err(e))?;
        } else {
            self.out.write_all(lines).map_err(|e| self.err(e))?;
        }
        self.bytes += lines.len() as u64;
        Ok(())
    }

    fn line(&mut self, line: &[u8]) -> Result<(), Error> {
        if let Some(max) = self.opts.max_bytes {
            if self.bytes + line.len() as u64 + 1 > max && self.bytes > 0 {
                self.rotate()?;
            }
        }
        self.raw_line(line)
    }

    fn rotate(&mut self) -> Result<(), Error> {
        self.out.flush().map_err(|e| self.err(e))?;
        self.part += 1;
        let path = part_path(&self.opts.path, self.part);
        let f = create_private(&path).map_err(|source| Error::Write { path, source })?;
        self.out = BufWriter::with_capacity(256 << 10, f);
        self.bytes = 0;
        self.stats.files += 1;
        self.header()
    }

    fn flush(&mut self) -> Result<(), Error> {
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
    fn reopen(&mut self) -> Result<(), Error> {
        // What is buffered still belongs to the old file.
        let _ = self.out.flush();
        let path = part_path(&self.opts.path, self.part);
        let f = create_private(&path).map_err(|source| Error::Write { path, source })?;
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
    fn resume(&mut self, lost: u64, why: &str) -> Result<(), Error> {
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

/// How often the writer takes the waiting lines.
const DRAIN_EVERY: Duration = Duration::from_millis(10);

pub(super) fn run(
    mut w: Writer,
    lines: Arc<LineBuffer>,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Stats, Error> {
    let mut lost_reported = 0u64;
    let mut last_flush = Instant::now();
    let mut last_check = Instant::now();
    let mut dirty = false;
    let mut batch: Vec<u8> = Vec::new();
    let mut bufs = Vec::new();
    let mut failing: Option<Failing> = None;
    loop {
        // Stop asked, or nobody can publish any more (the bus is gone): write what is
        // waiting, then finish.
        let closing =
            *stop.borrow() || stop.has_changed().is_err() || Arc::strong_count(&lines) == 1;
        batch.clear();
        let n = lines.take(&mut bufs, &mut batch);
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
            (&batch, n),
            &mut lost_reported,
            &mut dirty,
            &mut last_flush,
            closing,
        ) {
            Ok(()) => {}
            Err(e) => {
                // Said once; the lines of this round (some perhaps half written) count as lost.
                tracing::error!(error = %e, "recording writes fail: the traffic goes on, and the events are counted as lost until writes succeed again");
                lines.write_lost.fetch_add(n, Ordering::Relaxed);
                w.discard_buffer();
                failing = Some(Failing {
                    error: match &e {
                        Error::Write { source, .. } => source.to_string(),
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

/// One round of the writer: the batch (its bytes and lines), a gap for what the full buffer
/// lost, a flush when due.
fn write_round(
    w: &mut Writer,
    lines: &LineBuffer,
    (batch, n): (&[u8], u64),
    lost_reported: &mut u64,
    dirty: &mut bool,
    last_flush: &mut Instant,
    closing: bool,
) -> Result<(), Error> {
    {
        if !batch.is_empty() {
            // Every line in the batch ends with its newline: the batch is written whole, and
            // split into lines only when it would cross a rotation.
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
        let lost = lines.lost();
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

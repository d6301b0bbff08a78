//! Per-thread line buffers for the sinks that write a line per event (the text log, the
//! recorder): each line is written straight into the publishing thread's own buffer, under a
//! lock only that thread and the drainer ever take, so no line is copied, queued or allocated
//! on its own, and no two cores write the same cache line.
//!
//! Each buffer keeps, beside its bytes, every line's time and end. The drainer takes all the
//! buffers at one instant (every lock held together, for the swaps only): a line written after a
//! line it follows — the same exchange's next event, published on another thread after its task
//! moved — is never taken in an earlier drain than it. Within a drain the lines are merged by
//! their times, each buffer's own lines in the order they were written; the times are the
//! events' own, so a merge can only misorder two events if the system clock steps back between
//! them within one drain.
//!
//! Bounded: half of the sink's bytes are shared out equally among the buffers, and a buffer past
//! its share takes the bytes of its lines from the other half, a pool common to all, until the
//! drainer has been (one thread's burst — a 4 MiB message, say — can fill half of the whole,
//! and touches shared state only then). A line neither can hold is refused and counted (the sink
//! reports them: the log says it skipped them, the recorder writes a `gap`).

use crate::locks::Locked as _;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// The number of buffers (2 KiB of locks, whatever the number of threads); more threads than
/// this share them, in the order they first write.
pub const SHARDS: usize = 16;

/// Lines written by one thread and not yet drained: their bytes (each line with its newline)
/// and, for each line, its time and where it ends.
#[derive(Debug, Default)]
pub struct Lines {
    bytes: Vec<u8>,
    marks: Vec<(u64, usize)>,
}

impl Lines {
    /// The lines' bytes, in the order written.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
    /// How many lines.
    pub fn count(&self) -> usize {
        self.marks.len()
    }
    pub fn is_empty(&self) -> bool {
        self.marks.is_empty()
    }
    /// Swaps the lines' bytes with `other` (clear them after: their marks stay).
    fn swap_bytes(&mut self, other: &mut Vec<u8>) {
        std::mem::swap(&mut self.bytes, other);
    }
    /// Empties them, keeping the allocations for the next lines.
    pub fn clear(&mut self) {
        self.bytes.clear();
        self.marks.clear();
    }
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct Shard(Mutex<Lines>);

/// The buffers of one sink.
#[derive(Debug)]
pub struct LineShards {
    shards: Box<[Shard]>,
    /// Bytes each buffer holds of its own.
    share: usize,
    /// Bytes the buffers past their shares hold together at most, and hold now (emptied with
    /// them).
    pool: usize,
    pooled: AtomicUsize,
    /// Lines refused (no room, or a line that could not be written).
    lost: AtomicU64,
}

/// Which buffer the current thread writes to: each thread takes the next number once.
fn shard_of() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    MINE.with(|m| {
        let mut i = m.get();
        if i == usize::MAX {
            i = NEXT.fetch_add(1, Ordering::Relaxed);
            m.set(i);
        }
        i % SHARDS
    })
}

impl LineShards {
    /// Buffers holding `total_bytes` together at most (4 KiB a buffer and 4 KiB of pool at
    /// the least).
    pub fn new(total_bytes: usize) -> LineShards {
        LineShards {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            share: (total_bytes / 2 / SHARDS).max(4096),
            pool: (total_bytes / 2).max(4096),
            pooled: AtomicUsize::new(0),
            lost: AtomicU64::new(0),
        }
    }

    /// Takes `n` bytes from the pool, if it has them.
    fn take_pooled(&self, n: usize) -> bool {
        self.pooled
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |used| {
                used.checked_add(n).filter(|&u| u <= self.pool)
            })
            .is_ok()
    }

    /// Writes one line of time `ts` (`write` appends it, newline included, or nothing when the
    /// event has no line) into the calling thread's buffer; whether it was taken. A line `write`
    /// fails on is cut off, not kept in part. A refused line is counted in [`Self::lost`].
    pub fn put<E>(&self, ts: u64, write: impl FnOnce(&mut Vec<u8>) -> Result<(), E>) -> bool {
        let shard = &self.shards[shard_of()];
        let mut g = shard.0.locked();
        // What a writer that panicked left of its line (the bus drops such a sink, but its
        // last line must not run into the next) ends at the last whole line.
        let before = g.marks.last().map_or(0, |m| m.1);
        g.bytes.truncate(before);
        if write(&mut g.bytes).is_ok() {
            let end = g.bytes.len();
            // The line's bytes past the buffer's share come from the pool.
            let over = end.saturating_sub(self.share) - before.saturating_sub(self.share);
            if over == 0 || self.take_pooled(over) {
                if end > before {
                    g.marks.push((ts, end));
                }
                return true;
            }
        }
        g.bytes.truncate(before);
        drop(g);
        self.lost.fetch_add(1, Ordering::Relaxed);
        false
    }

    /// Lines refused so far.
    pub fn lost(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    /// Takes every buffer's lines into `into` (one [`Lines`] per buffer; each must be empty,
    /// and keeps its allocations for that buffer's next lines), all at one instant.
    pub fn take(&self, into: &mut Vec<Lines>) {
        into.resize_with(self.shards.len(), Lines::default);
        let mut held: Vec<_> = self.shards.iter().map(|s| s.0.locked()).collect();
        for (g, b) in held.iter_mut().zip(into.iter_mut()) {
            // Whole lines only (see `put`).
            let end = g.marks.last().map_or(0, |m| m.1);
            g.bytes.truncate(end);
            std::mem::swap(&mut **g, b);
        }
        // Every buffer is empty now: so is the pool.
        self.pooled.store(0, Ordering::Relaxed);
    }

    /// Takes every buffer's lines (see [`take`](Self::take)) and appends them to `batch` in
    /// time order; returns how many lines. `bufs` is the drainer's own set of buffers, kept
    /// between drains for their allocations. When one buffer alone has lines (one runtime
    /// thread, or a quiet moment) they are in order already: an empty `batch` then swaps
    /// allocations with that buffer instead of copying it.
    pub fn drain(&self, bufs: &mut Vec<Lines>, batch: &mut Vec<u8>) -> usize {
        self.take(bufs);
        let mut live = bufs.iter_mut().filter(|b| !b.is_empty());
        let n = match (live.next(), live.next()) {
            (None, _) => 0,
            (Some(one), None) => {
                let n = one.count();
                if batch.is_empty() {
                    one.swap_bytes(batch);
                } else {
                    batch.extend_from_slice(one.bytes());
                }
                n
            }
            _ => {
                let mut n = 0;
                for line in merged(bufs) {
                    batch.extend_from_slice(line);
                    n += 1;
                }
                n
            }
        };
        bufs.iter_mut().for_each(Lines::clear);
        n
    }
}

/// Every line of `bufs` (newline included), merged by time: each buffer's own lines in the
/// order they were written, a tie going to the earlier buffer.
pub fn merged(bufs: &[Lines]) -> impl Iterator<Item = &[u8]> {
    // (buffer, next line) for each buffer with lines left.
    let mut at: Vec<(usize, usize)> = (0..bufs.len())
        .filter(|&i| !bufs[i].is_empty())
        .map(|i| (i, 0))
        .collect();
    std::iter::from_fn(move || {
        let (k, _) = at
            .iter()
            .enumerate()
            .min_by_key(|(_, (b, n))| bufs[*b].marks[*n].0)?;
        let (b, n) = at[k];
        let lines = &bufs[b];
        let start = if n == 0 { 0 } else { lines.marks[n - 1].1 };
        let line = lines.bytes.get(start..lines.marks[n].1)?;
        if n + 1 == lines.marks.len() {
            at.remove(k);
        } else {
            at[k].1 += 1;
        }
        Some(line)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(bufs: &[Lines]) -> Vec<String> {
        merged(bufs)
            .map(|l| String::from_utf8(l.to_vec()).unwrap())
            .collect()
    }

    fn lines(of: &[(u64, &str)]) -> Lines {
        let mut l = Lines::default();
        for (ts, t) in of {
            l.bytes.extend_from_slice(t.as_bytes());
            l.bytes.push(b'\n');
            l.marks.push((*ts, l.bytes.len()));
        }
        l
    }

    #[test]
    fn lines_are_merged_by_time_each_buffers_order_kept() {
        let bufs = [
            lines(&[(1, "a1"), (5, "a5"), (5, "a5b"), (9, "a9"), (3, "a3-late")]),
            Lines::default(),
            lines(&[(2, "b2"), (5, "b5"), (1000, "b1000")]),
            lines(&[(0, "c0")]),
        ];
        assert_eq!(
            text(&bufs),
            [
                "c0\n",
                "a1\n",
                "b2\n",
                "a5\n",
                "a5b\n",
                "b5\n",
                "a9\n",
                "a3-late\n",
                "b1000\n"
            ],
            "merged by time; a tie goes to the earlier buffer; a buffer's order is kept"
        );
        assert!(text(&[]).is_empty());
    }

    #[test]
    fn a_drain_gives_every_line_once_in_time_order() {
        let s = LineShards::new(1 << 20);
        let put = |ts: u64, t: &str| {
            assert!(s.put(ts, |v: &mut Vec<u8>| -> Result<(), ()> {
                v.extend_from_slice(t.as_bytes());
                v.push(b'\n');
                Ok(())
            }))
        };
        let (mut bufs, mut batch) = (Vec::new(), Vec::new());
        assert_eq!(s.drain(&mut bufs, &mut batch), 0);
        assert!(batch.is_empty());
        // One thread's lines: taken as they are.
        put(3, "a3");
        put(1, "a1-late");
        assert_eq!(s.drain(&mut bufs, &mut batch), 2);
        assert_eq!(batch, b"a3\na1-late\n");
        // A batch not yet empty is added to, not replaced.
        put(4, "a4");
        assert_eq!(s.drain(&mut bufs, &mut batch), 1);
        assert_eq!(batch, b"a3\na1-late\na4\n");
        batch.clear();
        // Two threads' lines: merged by time.
        put(10, "a10");
        put(30, "a30");
        // (A thread whose number falls on this thread's buffer is passed over.)
        let mine = shard_of();
        let other = || {
            std::thread::scope(|sc| {
                sc.spawn(|| {
                    shard_of() != mine && {
                        put(20, "b20");
                        true
                    }
                })
                .join()
                .unwrap()
            })
        };
        assert!(other() || other());
        assert_eq!(s.drain(&mut bufs, &mut batch), 3);
        assert_eq!(batch, b"a10\nb20\na30\n");
        batch.clear();
        assert_eq!(s.drain(&mut bufs, &mut batch), 0, "each line once");
        assert!(batch.is_empty() && bufs.iter().all(Lines::is_empty));
    }

    #[test]
    fn a_full_buffer_refuses_lines_and_a_failed_line_leaves_nothing() {
        let s = LineShards::new(0); // 4096 bytes a buffer, and a pool of 4096
        let line = |v: &mut Vec<u8>| -> Result<(), ()> {
            v.extend_from_slice(&[b'x'; 99]);
            v.push(b'\n');
            Ok(())
        };
        let taken = (0..100).filter(|&i| s.put(i, line)).count();
        assert_eq!(
            taken, 81,
            "lines are taken while the buffer's share and the pool hold them"
        );
        assert_eq!(s.lost(), 19);
        // Another thread still has its own share, and no pool.
        std::thread::scope(|sc| {
            sc.spawn(|| {
                let theirs = (0..100).filter(|&i| s.put(i, line)).count();
                assert_eq!(theirs, 41, "its share, and the few bytes the pool had left");
            });
        });
        assert_eq!(s.lost(), 19 + 59);
        assert!(!s.put(7, |v: &mut Vec<u8>| {
            v.extend_from_slice(b"half");
            Err(())
        }));
        assert_eq!(s.lost(), 19 + 59 + 1);
        let mut bufs = Vec::new();
        s.take(&mut bufs);
        let all: usize = bufs.iter().map(Lines::count).sum();
        assert_eq!(all, 81 + 41);
        assert!(bufs.iter().all(|b| b.bytes().len() == b.count() * 100));
        // Taken away, the buffer takes lines again; a failed line leaves no bytes behind.
        for b in &mut bufs {
            b.clear();
        }
        assert!(!s.put(8, |v: &mut Vec<u8>| {
            v.extend_from_slice(b"half");
            Err(())
        }));
        assert!(s.put(9, line));
        s.take(&mut bufs);
        assert_eq!(text(&bufs), [format!("{}\n", "x".repeat(99))]);
    }

    /// A writer that panicked half-way leaves nothing of its line behind.
    #[test]
    fn a_line_half_written_by_a_panic_is_cut_off() {
        let s = LineShards::new(1 << 20);
        let half = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.put(1, |v: &mut Vec<u8>| -> Result<(), ()> {
                v.extend_from_slice(b"{\"half");
                panic!("a writer's bug");
            })
        }));
        assert!(half.is_err());
        let mut bufs = Vec::new();
        s.take(&mut bufs);
        assert!(
            bufs.iter().all(|b| b.bytes().is_empty()),
            "drained: nothing"
        );
        bufs.iter_mut().for_each(Lines::clear);
        let half = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            s.put(1, |v: &mut Vec<u8>| -> Result<(), ()> {
                v.extend_from_slice(b"{\"half");
                panic!("a writer's bug");
            })
        }));
        assert!(half.is_err());
        assert!(s.put(2, |v: &mut Vec<u8>| -> Result<(), ()> {
            v.extend_from_slice(b"whole\n");
            Ok(())
        }));
        s.take(&mut bufs);
        assert_eq!(text(&bufs), ["whole\n"]);
    }

    /// Lines written on many threads, each thread's in time order: every one comes out once,
    /// whole, and in time order overall.
    #[test]
    fn lines_from_many_threads_come_out_whole_and_in_time_order() {
        let s = LineShards::new(64 << 20);
        std::thread::scope(|sc| {
            for t in 0..4u64 {
                let s = &s;
                sc.spawn(move || {
                    for i in 0..1000u64 {
                        let ts = i * 4 + t;
                        assert!(s.put(ts, |v: &mut Vec<u8>| -> Result<(), ()> {
                            v.extend_from_slice(
                                format!("{ts} {}\n", "y".repeat((i % 37) as usize)).as_bytes(),
                            );
                            Ok(())
                        }));
                    }
                });
            }
        });
        let mut bufs = Vec::new();
        s.take(&mut bufs);
        let ts: Vec<u64> = merged(&bufs)
            .map(|l| {
                let l = std::str::from_utf8(l).unwrap();
                assert!(l.ends_with('\n'));
                l.split(' ').next().unwrap().parse().unwrap()
            })
            .collect();
        assert_eq!(ts, (0..4000).collect::<Vec<u64>>());
        assert_eq!(s.lost(), 0);
    }

    /// The drainer's cut is one instant: a line written after another (on any thread) is never
    /// taken in an earlier drain than it.
    #[test]
    fn a_later_line_is_never_drained_before_an_earlier_one() {
        let s = LineShards::new(64 << 20);
        let done = std::sync::atomic::AtomicBool::new(false);
        let mut drained: Vec<Vec<u64>> = Vec::new();
        // Two threads take turns: each line is written after the one before it, the next on
        // the other thread.
        let turn = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|sc| {
            for t in 0..2u64 {
                let (s, turn) = (&s, &turn);
                sc.spawn(move || loop {
                    let n = turn.load(Ordering::Acquire);
                    if n >= 4_000 {
                        return;
                    }
                    if n % 2 == t {
                        s.put(n, |v: &mut Vec<u8>| -> Result<(), ()> {
                            v.extend_from_slice(format!("{n}\n").as_bytes());
                            Ok(())
                        });
                        turn.store(n + 1, Ordering::Release);
                    } else {
                        std::thread::yield_now();
                    }
                });
            }
            let mut bufs = Vec::new();
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while !done.load(Ordering::Relaxed) {
                assert!(
                    std::time::Instant::now() < deadline,
                    "the lines never all came"
                );
                s.take(&mut bufs);
                let got: Vec<u64> = merged(&bufs)
                    .map(|l| std::str::from_utf8(l).unwrap().trim().parse().unwrap())
                    .collect();
                let last = got.last().copied();
                drained.push(got);
                bufs.iter_mut().for_each(Lines::clear);
                if last == Some(3_999) {
                    done.store(true, Ordering::Relaxed);
                }
            }
        });
        let all: Vec<u64> = drained.concat();
        assert_eq!(all, (0..4_000).collect::<Vec<u64>>());
    }
}

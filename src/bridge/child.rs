//! One stdio server the bridge runs: spawned with its three pipes (SIGTERM to it if rpctap
//! dies), its stdin fed whole lines by one writer task (so that two sessions' lines never
//! interleave), its stdout read line by line and handed to the owner, its stderr split into
//! bounded lines (the last one kept: a crash's reason), and its exit reported once, after its
//! last stdout line. Stopping it is SIGTERM, then SIGKILL after the grace; tokio's wait reaps it,
//! so no child is left a zombie.

use crate::locks::Locked as _;
use crate::stdio::relay::StderrLines;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::sync::{mpsc, Notify};

/// What a child's owner is told.
pub trait Owner: Send + Sync + 'static {
    /// One line of the child's stdout (without its newline).
    fn line(&self, line: Bytes);
    /// One line of its stderr (`cut`: longer than the events keep).
    fn stderr(&self, line: &[u8], cut: bool);
    /// It exited (after its last stdout line): how, as a call's error says it.
    fn exited(&self, how: String, failed: bool);
}

/// A running child.
pub struct Child {
    pub pid: u32,
    stdin: mpsc::UnboundedSender<Bytes>,
    stop: Arc<Notify>,
    /// Its last stderr line (a crash's reason).
    last_stderr: Arc<Mutex<String>>,
    /// Set once it exited.
    done: Arc<tokio::sync::watch::Sender<bool>>,
}

impl Child {
    /// Starts `command`; `max_line` bounds a stdout line (a longer one is dropped, said in the
    /// log), `grace` is the time between SIGTERM and SIGKILL when stopped.
    pub fn spawn(
        command: &[String],
        max_line: usize,
        grace: Duration,
        owner: Arc<dyn Owner>,
    ) -> std::io::Result<Arc<Child>> {
        let cmd = crate::stdio::child::prepare(command)?;
        let mut child = tokio::process::Command::from(cmd).spawn()?;
        let pid = child.id().unwrap_or(0);
        let (Some(mut stdin), Some(stdout), Some(mut stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            let _ = child.start_kill();
            return Err(std::io::Error::other("the child's pipes were not set up"));
        };
        let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
        tokio::spawn(async move {
            while let Some(line) = rx.recv().await {
                if stdin.write_all(&line).await.is_err() || stdin.flush().await.is_err() {
                    break;
                }
            }
            // Every sender gone (the child is being stopped): its stdin closes.
        });
        let last_stderr = Arc::new(Mutex::new(String::new()));
        let err_done = {
            let owner = owner.clone();
            let last = last_stderr.clone();
            tokio::spawn(async move {
                let mut lines = StderrLines::new(crate::events::STDERR_LINE_MAX);
                let mut buf = vec![0u8; 8 << 10];
                let mut each = |l: &[u8], cut: bool| {
                    if !l.is_empty() {
                        *last.locked() = String::from_utf8_lossy(l).into_owned();
                    }
                    owner.stderr(l, cut);
                };
                while let Ok(n) = stderr.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    lines.feed(&buf[..n], &mut each);
                }
                lines.finish(&mut each);
            })
        };
        let out_done = {
            let owner = owner.clone();
            tokio::spawn(async move {
                let mut r = tokio::io::BufReader::with_capacity(64 << 10, stdout);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    // Bounded: a line longer than the cap is read on and dropped.
                    let mut over = false;
                    loop {
                        let buf = match r.fill_buf().await {
                            Ok(b) => b,
                            Err(_) => return,
                        };
                        if buf.is_empty() {
                            if !line.is_empty() && !over {
                                owner.line(Bytes::from(std::mem::take(&mut line)));
                            }
                            return;
                        }
                        let (take, ends) = match memchr::memchr(b'\n', buf) {
                            Some(i) => (i + 1, true),
                            None => (buf.len(), false),
                        };
                        if !over && line.len() + take <= max_line + 1 {
                            line.extend_from_slice(&buf[..take]);
                        } else {
                            over = true;
                        }
                        r.consume(take);
                        if ends {
                            break;
                        }
                    }
                    if over {
                        tracing::warn!(
                            pid,
                            max_line,
                            "a line of the server's longer than --max-frame-bytes was dropped"
                        );
                        continue;
                    }
                    while matches!(line.last(), Some(b'\n' | b'\r')) {
                        line.pop();
                    }
                    if !line.is_empty() {
                        owner.line(Bytes::copy_from_slice(&line));
                    }
                }
            })
        };
        let stop = Arc::new(Notify::new());
        let (done_tx, _) = tokio::sync::watch::channel(false);
        let done = Arc::new(done_tx);
        {
            let stop = stop.clone();
            let last = last_stderr.clone();
            let done = done.clone();
            tokio::spawn(async move {
                let status = tokio::select! {
                    s = child.wait() => s,
                    _ = stop.notified() => {
                        signal(pid, rustix::process::Signal::TERM);
                        match tokio::time::timeout(grace, child.wait()).await {
                            Ok(s) => s,
                            Err(_) => {
                                let _ = child.start_kill();
                                child.wait().await
                            }
                        }
                    }
                };
                // Its last lines first (a grandchild holding the pipes gets a second).
                let _ = tokio::time::timeout(Duration::from_secs(1), out_done).await;
                let _ = tokio::time::timeout(Duration::from_secs(1), err_done).await;
                let (how, failed) = match &status {
                    Ok(s) => (crate::stdio::describe_exit(s), !s.success()),
                    Err(e) => (format!("the server could not be waited for: {e}"), true),
                };
                let last = last.locked().clone();
                let how = if failed && !last.is_empty() {
                    format!("{how}; its last stderr line: {last}")
                } else {
                    how
                };
                tracing::info!(pid, status = %how, "bridge: a server exited");
                done.send_replace(true);
                owner.exited(how, failed);
            });
        }
        Ok(Arc::new(Child {
            pid,
            stdin: tx,
            stop,
            last_stderr,
            done,
        }))
    }

    /// Writes one line (with its newline) to the child's stdin; false once it is gone.
    pub fn send(&self, line: Bytes) -> bool {
        self.stdin.send(line).is_ok()
    }

    /// Stops it: SIGTERM, SIGKILL after the grace; reaped either way.
    pub fn stop(&self) {
        self.stop.notify_one();
    }

    /// Waits until it has exited and been reaped.
    pub async fn exited(&self) {
        let mut rx = self.done.subscribe();
        let _ = rx.wait_for(|d| *d).await;
    }

    /// Its last stderr line.
    pub fn last_stderr(&self) -> String {
        self.last_stderr.locked().clone()
    }
}

fn signal(pid: u32, sig: rustix::process::Signal) {
    if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
        let _ = rustix::process::kill_process(p, sig);
    }
}

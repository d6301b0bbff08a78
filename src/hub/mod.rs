//! The hub: where the sessions of every rpctap on this machine live, and who is running now.
//!
//! Nothing runs as "the hub": it is two directories every rpctap agrees on. A shim (`rpctap
//! stdio -- CMD` with no flag) records its session into the state directory's `sessions/` and
//! registers in the runtime directory — its live feed's unix socket (`NAME.sock`) and what it
//! is (`NAME.json`: label, command with secrets scrubbed, pid, recording). `rpctap watch`,
//! `sessions`, `open` and `prune` read those directories. A registration whose socket no
//! longer answers belongs to a process that is gone, and whoever sees it removes it; a live one
//! is never taken over (every name carries its start time and pid, so no two collide).
//!
//! Where: `RPCTAP_HOME` if set (sessions and sockets both under it), else
//! `$XDG_STATE_HOME/rpctap`, else `~/.local/state/rpctap`; sockets in `$XDG_RUNTIME_DIR/rpctap`,
//! else `run/` under the state directory. Directories are created 0700, files 0600.

pub mod clients;
pub mod command;
pub mod watch;

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The state directory's default size cap (`RPCTAP_STATE_MAX_BYTES` changes it).
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// Hub errors, naming the path.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("no state directory: set RPCTAP_HOME, XDG_STATE_HOME or HOME")]
    NoHome,
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{0}")]
    NotFound(String),
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// The two directories.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Home {
    /// Sessions (`sessions/`) and, later, baselines.
    pub state: PathBuf,
    /// Live registrations and feed sockets.
    pub runtime: PathBuf,
}

impl Home {
    /// From the environment (see the module's comment).
    pub fn from_env() -> Result<Home, HubError> {
        Home::resolve(|k| std::env::var_os(k).filter(|v| !v.is_empty()))
    }

    /// From `var`, an environment lookup (a test passes its own).
    pub fn resolve(var: impl Fn(&str) -> Option<std::ffi::OsString>) -> Result<Home, HubError> {
        if let Some(h) = var("RPCTAP_HOME") {
            let state = PathBuf::from(h);
            return Ok(Home {
                runtime: state.join("run"),
                state,
            });
        }
        let state = match (var("XDG_STATE_HOME"), var("HOME")) {
            (Some(x), _) => PathBuf::from(x).join("rpctap"),
            (None, Some(h)) => PathBuf::from(h).join(".local/state/rpctap"),
            (None, None) => return Err(HubError::NoHome),
        };
        let runtime = match var("XDG_RUNTIME_DIR") {
            Some(r) => PathBuf::from(r).join("rpctap"),
            None => state.join("run"),
        };
        Ok(Home { state, runtime })
    }

    pub fn sessions(&self) -> PathBuf {
        self.state.join("sessions")
    }

    /// Creates both directories (0700; an existing one is made private too).
    pub fn create(&self) -> Result<(), HubError> {
        for d in [self.sessions(), self.runtime.clone()] {
            private_dir(&d)?;
        }
        Ok(())
    }

    /// Where a session of `name` records.
    /// Where tool baselines are kept (one file per server label).
    pub fn baselines(&self) -> PathBuf {
        self.state.join("baselines")
    }

    pub fn recording(&self, name: &str) -> PathBuf {
        self.sessions().join(format!("{name}.jsonl"))
    }

    /// Where a session of `name` serves its feed.
    pub fn socket(&self, name: &str) -> PathBuf {
        self.runtime.join(format!("{name}.sock"))
    }

    fn registration_path(&self, name: &str) -> PathBuf {
        self.runtime.join(format!("{name}.json"))
    }
}

fn private_dir(d: &Path) -> Result<(), HubError> {
    crate::private::dir(d).map_err(io(d))
}

/// A session's name: its label, its start (UTC, to the second) and its pid —
/// `weather-20261202T014100Z-4242` — unique on this machine, sortable by start per label.
pub fn session_name(label: &str, started: SystemTime, pid: u32) -> String {
    let t = humantime::format_rfc3339_seconds(started).to_string();
    let compact: String = t.chars().filter(|c| *c != '-' && *c != ':').collect();
    format!("{}-{compact}-{pid}", command::sanitize(label))
}

/// What a live rpctap says about itself in the runtime directory.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Registration {
    pub name: String,
    pub label: String,
    /// `stdio` or `proxy`.
    pub mode: String,
    /// The wrapped command, its secrets scrubbed (stdio), or `[listen, upstream]` (proxy).
    pub command: Vec<String>,
    /// rpctap's own pid (the registration lives as long as it does).
    pub pid: u32,
    /// The wrapped server's pid (stdio).
    #[serde(default)]
    pub server_pid: Option<u32>,
    /// Start, ns since the epoch.
    pub started: u64,
    /// The live feed's admin address, as `attach` takes it (`unix:PATH` in the runtime
    /// directory, or the `--admin` address the user gave).
    pub feed: String,
    pub recording: Option<PathBuf>,
}

/// A live registration: removed when dropped (the admin listener removes its own socket).
#[derive(Debug)]
pub struct Registered {
    path: PathBuf,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

impl Home {
    /// Writes `r` (0600, whole: written aside, then renamed in).
    pub fn register(&self, r: &Registration) -> Result<Registered, HubError> {
        let path = self.registration_path(&r.name);
        let tmp = path.with_extension("json.tmp");
        let text = serde_json::to_vec_pretty(r).unwrap_or_default();
        {
            let mut f = crate::record::create_private(&tmp).map_err(io(&tmp))?;
            std::io::Write::write_all(&mut f, &text).map_err(io(&tmp))?;
        }
        std::fs::rename(&tmp, &path).map_err(io(&path))?;
        Ok(Registered { path })
    }

    /// The registrations whose process still answers on its socket; the others (a process
    /// killed, a machine restarted) are removed.
    pub fn live(&self) -> Vec<Registration> {
        let Ok(dir) = std::fs::read_dir(&self.runtime) else {
            return vec![];
        };
        let mut out = Vec::new();
        for e in dir.flatten() {
            let p = e.path();
            if p.extension().and_then(|x| x.to_str()) != Some("json") {
                continue;
            }
            let Some(r) = std::fs::read(&p)
                .ok()
                .and_then(|b| serde_json::from_slice::<Registration>(&b).ok())
            else {
                // Being written (the rename is atomic, so a torn one is not ours): skipped.
                continue;
            };
            if answers(&r.feed) {
                out.push(r);
            } else if !pid_alive(r.pid) || started_long_ago(&p) {
                if let Some(sock) = r.feed.strip_prefix("unix:") {
                    let sock = Path::new(sock);
                    // Only a socket in the runtime directory is the hub's to clean.
                    if sock.parent() == Some(self.runtime.as_path()) {
                        let _ = std::fs::remove_file(sock);
                    }
                }
                let _ = std::fs::remove_file(&p);
            }
        }
        out.sort_by(|a, b| (a.started, &a.name).cmp(&(b.started, &b.name)));
        out
    }
}

/// Whether a feed's listener accepts a connection (its process is alive).
pub fn answers(feed: &str) -> bool {
    match crate::admin::AdminAddr::parse(feed) {
        #[cfg(unix)]
        Ok(crate::admin::AdminAddr::Unix(p)) => std::os::unix::net::UnixStream::connect(p).is_ok(),
        Ok(crate::admin::AdminAddr::Tcp(a)) => {
            std::net::TcpStream::connect_timeout(&a, Duration::from_millis(300)).is_ok()
        }
        _ => false,
    }
}

/// Whether a process of that pid exists (it may be another one: the socket decides).
pub fn pid_alive(pid: u32) -> bool {
    rustix::process::Pid::from_raw(pid as i32)
        .is_some_and(|p| rustix::process::test_kill_process(p).is_ok())
}

/// A registration older than a few seconds whose socket does not answer is stale even when its
/// pid was reused; a fresh one may still be binding its socket.
fn started_long_ago(p: &Path) -> bool {
    std::fs::metadata(p)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|d| d > Duration::from_secs(5))
}

/// One session, live or on disk.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct SessionInfo {
    pub name: String,
    pub label: String,
    pub mode: String,
    pub command: Vec<String>,
    pub pid: Option<u32>,
    /// Start, ns since the epoch.
    pub started: u64,
    pub live: bool,
    pub recording: Option<PathBuf>,
    /// The recording's size (all its parts), bytes.
    pub bytes: u64,
    pub calls: u64,
    pub errors: u64,
    pub anomalies: u64,
}

/// A live session as its registration describes it (its counts come from its recording).
impl From<&Registration> for SessionInfo {
    fn from(r: &Registration) -> Self {
        SessionInfo {
            name: r.name.clone(),
            label: r.label.clone(),
            mode: r.mode.clone(),
            command: r.command.clone(),
            pid: r.server_pid.or(Some(r.pid)),
            started: r.started,
            live: true,
            recording: r.recording.clone(),
            bytes: 0,
            calls: 0,
            errors: 0,
            anomalies: 0,
        }
    }
}

impl Home {
    /// Every session: the live ones and the recorded ones, newest first (at most `limit` of
    /// the recorded ones are read).
    pub fn sessions_list(&self, limit: usize) -> Vec<SessionInfo> {
        let live = self.live();
        let mut out: Vec<SessionInfo> = Vec::new();
        let mut files = self.recorded_files();
        files.sort_by_key(|f| std::cmp::Reverse(f.1));
        for (path, _, _) in files.into_iter().take(limit) {
            let Some(mut s) = summarize(&path) else {
                continue;
            };
            if live.iter().any(|r| r.name == s.name) {
                s.live = true;
            }
            out.push(s);
        }
        for r in &live {
            if !out.iter().any(|s| s.name == r.name) {
                out.push(SessionInfo::from(r));
            }
        }
        out.sort_by(|a, b| b.started.cmp(&a.started).then(a.name.cmp(&b.name)));
        out
    }

    /// The recordings in `sessions/`: (path, modified, size of all parts).
    pub fn recorded_files(&self) -> Vec<(PathBuf, SystemTime, u64)> {
        let dir = self.sessions();
        let Ok(rd) = std::fs::read_dir(&dir) else {
            return vec![];
        };
        let mut sizes: std::collections::HashMap<PathBuf, (SystemTime, u64)> = Default::default();
        for e in rd.flatten() {
            let p = e.path();
            let Some(name) = p.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            // `NAME.jsonl` and its rotated parts `NAME.jsonl.1`, … count together.
            let Some(idx) = name.find(".jsonl") else {
                continue;
            };
            let base = dir.join(&name[..idx + ".jsonl".len()]);
            let Ok(m) = e.metadata() else { continue };
            let modified = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
            let entry = sizes.entry(base).or_insert((modified, 0));
            entry.0 = entry.0.max(modified);
            entry.1 += m.len();
        }
        sizes
            .into_iter()
            .filter(|(p, _)| p.exists())
            .map(|(p, (t, n))| (p, t, n))
            .collect()
    }

    /// Finds a session by name, unique prefix or label (its newest session), or a file.
    pub fn find(&self, what: &str) -> Result<PathBuf, HubError> {
        let p = PathBuf::from(what);
        if p.is_file() {
            return Ok(p);
        }
        let exact = self.recording(what);
        if exact.is_file() {
            return Ok(exact);
        }
        let all = self.sessions_list(usize::MAX);
        let by_prefix: Vec<&SessionInfo> =
            all.iter().filter(|s| s.name.starts_with(what)).collect();
        let pick = match by_prefix.as_slice() {
            [one] => Some(*one),
            [] => all.iter().find(|s| s.label == what),
            many if many.iter().all(|s| s.label == many[0].label) => Some(many[0]),
            many => {
                return Err(HubError::NotFound(format!(
                    "{what:?} names {} sessions: {}",
                    many.len(),
                    many.iter()
                        .take(5)
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )))
            }
        };
        pick.and_then(|s| s.recording.clone())
            .filter(|p| p.is_file())
            .ok_or_else(|| {
                HubError::NotFound(format!(
                    "no session or file {what:?} (sessions are in {}; `rpctap sessions` lists them)",
                    self.sessions().display()
                ))
            })
    }

    /// The ended sessions older than `age` (by their last write), oldest first.
    pub fn older_than(&self, age: Duration) -> Vec<(PathBuf, u64)> {
        let live: Vec<PathBuf> = self
            .live()
            .into_iter()
            .filter_map(|r| r.recording)
            .collect();
        let now = SystemTime::now();
        let mut old: Vec<(PathBuf, SystemTime, u64)> = self
            .recorded_files()
            .into_iter()
            .filter(|(p, t, _)| !live.contains(p) && now.duration_since(*t).is_ok_and(|d| d >= age))
            .collect();
        old.sort_by_key(|(_, t, _)| *t);
        old.into_iter().map(|(p, _, n)| (p, n)).collect()
    }

    /// Deletes a recording and its rotated parts.
    pub fn remove(&self, recording: &Path) -> Result<(), HubError> {
        std::fs::remove_file(recording).map_err(io(recording))?;
        for n in 1.. {
            let part = crate::record::part_path(recording, n);
            if std::fs::remove_file(&part).is_err() {
                break;
            }
        }
        Ok(())
    }

    /// Keeps `sessions/` under `max` bytes, removing the oldest ended sessions first; returns
    /// what went (the caller says it once).
    pub fn enforce_cap(&self, max: u64) -> Vec<PathBuf> {
        let mut files = self.recorded_files();
        let mut total: u64 = files.iter().map(|f| f.2).sum();
        if total <= max {
            return vec![];
        }
        let live: Vec<PathBuf> = self
            .live()
            .into_iter()
            .filter_map(|r| r.recording)
            .collect();
        files.sort_by_key(|f| f.1);
        let mut gone = Vec::new();
        for (p, _, n) in files {
            if total <= max {
                break;
            }
            if live.contains(&p) {
                continue;
            }
            if self.remove(&p).is_ok() {
                total = total.saturating_sub(n);
                gone.push(p);
            }
        }
        gone
    }
}

/// The state directory's cap: `RPCTAP_STATE_MAX_BYTES` (a size such as `2GiB`), else
/// [`DEFAULT_MAX_BYTES`].
pub fn max_bytes_from_env() -> Result<u64, String> {
    match std::env::var("RPCTAP_STATE_MAX_BYTES") {
        Ok(v) if !v.trim().is_empty() => {
            crate::units::size(&v).map_err(|e| format!("RPCTAP_STATE_MAX_BYTES={v:?}: {e}"))
        }
        _ => Ok(DEFAULT_MAX_BYTES),
    }
}

/// A recording's header and counts, read without building its events (one pass over the
/// lines, looking only at each line's start and its outcome).
pub fn summarize(path: &Path) -> Option<SessionInfo> {
    use std::io::BufRead;
    let f = std::fs::File::open(path).ok()?;
    let mut lines = std::io::BufReader::new(f).lines();
    let header: serde_json::Value = serde_json::from_str(&lines.next()?.ok()?).ok()?;
    header.get("rpctap_recording")?;
    let name = path
        .file_name()?
        .to_str()?
        .trim_end_matches(".jsonl")
        .to_string();
    let s = |k: &str| header.get(k).and_then(|v| v.as_str()).map(str::to_string);
    let command = header
        .get("command")
        .and_then(|c| c.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_else(|| {
            [s("listen"), s("upstream")]
                .into_iter()
                .flatten()
                .collect::<Vec<_>>()
        });
    let mut info = SessionInfo {
        label: s("label").unwrap_or_else(|| command::label_of(&command)),
        mode: s("transport")
            .map(|t| if t == "stdio" { "stdio" } else { "proxy" }.to_string())
            .unwrap_or_else(|| "proxy".into()),
        pid: header.get("pid").and_then(|p| p.as_u64()).map(|p| p as u32),
        started: header
            .get("started")
            .and_then(|v| v.as_u64())
            .unwrap_or_default(),
        name,
        command,
        live: false,
        recording: Some(path.to_path_buf()),
        bytes: 0,
        calls: 0,
        errors: 0,
        anomalies: 0,
    };
    let mut n = 0;
    loop {
        let part = crate::record::part_path(path, n);
        let Ok(m) = std::fs::metadata(&part) else {
            break;
        };
        info.bytes += m.len();
        if n > 0 {
            if let Ok(f) = std::fs::File::open(&part) {
                count(std::io::BufReader::new(f).lines(), &mut info);
            }
        }
        n += 1;
    }
    count(lines, &mut info);
    Some(info)
}

fn count(lines: impl Iterator<Item = std::io::Result<String>>, info: &mut SessionInfo) {
    for l in lines.map_while(Result::ok) {
        if l.starts_with("{\"event\":\"call\"") {
            info.calls += 1;
            // As `events::call_failed` counts: not the expected discovery fallback, and a
            // tool's own failure too.
            let expected = l.contains("\"method\":\"server/discover\"") && l.contains("-32601");
            if (l.contains("\"outcome\":\"error\"") && !expected) || l.contains("\"TOOL_ERROR\"") {
                info.errors += 1;
            }
        } else if l.starts_with("{\"event\":\"anomaly\"") {
            info.anomalies += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sessions` counts errors as the dashboard does (`events::call_failed`).
    #[test]
    fn the_discovery_fallback_is_no_error_and_a_tool_failure_is_one() {
        let lines = [
            r#"{"event":"call","ts":1,"exchange":1,"scope":"s","direction":"c2s","method":"server/discover","id":1,"outcome":"error","code":-32601,"message":"Method not found","latency_us":1,"anomalies":[]}"#,
            r#"{"event":"call","ts":2,"exchange":2,"scope":"s","direction":"c2s","method":"tools/call","id":2,"outcome":"result","latency_us":1,"anomalies":["TOOL_ERROR"]}"#,
            r#"{"event":"call","ts":3,"exchange":3,"scope":"s","direction":"c2s","method":"tools/call","id":3,"outcome":"error","code":-32602,"message":"bad","latency_us":1,"anomalies":[]}"#,
            r#"{"event":"call","ts":4,"exchange":4,"scope":"s","direction":"c2s","method":"tools/list","id":4,"outcome":"result","latency_us":1,"anomalies":[]}"#,
        ];
        let mut info = SessionInfo::default();
        count(lines.iter().map(|l| Ok(l.to_string())), &mut info);
        assert_eq!((info.calls, info.errors), (4, 2));
    }
    use std::ffi::OsString;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<OsString> + 'a {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn where_things_live() {
        let h = Home::resolve(env(&[("RPCTAP_HOME", "/h"), ("XDG_RUNTIME_DIR", "/r")])).unwrap();
        assert_eq!(
            (h.state.as_path(), h.runtime.as_path()),
            (Path::new("/h"), Path::new("/h/run"))
        );
        let h = Home::resolve(env(&[("XDG_STATE_HOME", "/s"), ("XDG_RUNTIME_DIR", "/r")])).unwrap();
        assert_eq!(h.state, Path::new("/s/rpctap"));
        assert_eq!(h.runtime, Path::new("/r/rpctap"));
        let h = Home::resolve(env(&[("HOME", "/u")])).unwrap();
        assert_eq!(h.state, Path::new("/u/.local/state/rpctap"));
        assert_eq!(h.runtime, Path::new("/u/.local/state/rpctap/run"));
        assert!(Home::resolve(env(&[])).is_err());
    }

    #[test]
    fn names_are_unique_per_start_and_pid_and_sort_by_start() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        assert_eq!(
            session_name("we ather", t, 42),
            "we-ather-20270115T080000Z-42"
        );
        let later = t + Duration::from_secs(1);
        assert!(session_name("a", t, 9) < session_name("a", later, 1));
    }
}

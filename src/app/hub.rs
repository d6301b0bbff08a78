//! Joining the hub (`crate::hub`) from a subcommand that carries traffic, and the hub's own
//! subcommands: `sessions`, `open`, `prune` and `watch`.
//!
//! Joining never stops the traffic: a state directory that cannot be made, a recording that
//! cannot be opened or a socket that cannot be bound there is a warning on stderr, and the run
//! goes on without what failed.

use super::AppError;
use crate::hub::{Home, Registered, Registration};
use std::future::Future;
use std::time::SystemTime;

/// What joining the hub adds to a run, beside the user's own options (which it never changes):
/// a recording in `sessions/` and the feed's socket in the runtime directory, each only where
/// the user chose none. The observer chain is built from both ([`Plan::record`],
/// [`Plan::admin`]).
#[derive(Clone)]
pub struct Plan {
    home: Home,
    pub name: String,
    pub label: String,
    mode: &'static str,
    command: Vec<String>,
    started: SystemTime,
    /// The recording and the feed socket the hub chose (not the user's own).
    record: Option<crate::record::Options>,
    admin: Option<crate::admin::AdminConfig>,
}

/// Prepares the hub's part of a run: a session name, the recording in `sessions/` (unless the
/// user chose one, or `--no-record`), the feed's socket in the runtime directory (unless
/// `--admin`). `None` (said on stderr) when the hub cannot be used. Joining the hub turns the
/// secrets preset on (`inspect`), before the inspector exists.
pub fn prepare(
    label: String,
    mode: &'static str,
    command: Vec<String>,
    no_record: bool,
    user_record: &Option<crate::record::Options>,
    user_admin: &Option<crate::admin::AdminConfig>,
    inspect: &mut crate::inspect::InspectConfig,
) -> Option<Plan> {
    let home = match Home::from_env().and_then(|h| h.create().map(|()| h)) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("rpctap: warning: the hub is unavailable ({e}); this session is neither recorded nor shown by `rpctap watch`");
            return None;
        }
    };
    match crate::hub::max_bytes_from_env() {
        Ok(max) => {
            let gone = home.enforce_cap(max);
            if !gone.is_empty() {
                eprintln!(
                    "rpctap: the state directory passed its cap of {} bytes: removed the {} oldest sessions (RPCTAP_STATE_MAX_BYTES sets the cap)",
                    max,
                    gone.len()
                );
            }
        }
        Err(e) => eprintln!("rpctap: warning: {e}; the cap is not applied"),
    }
    let started = SystemTime::now();
    let name = crate::hub::session_name(&label, started, std::process::id());
    let record = (user_record.is_none() && !no_record).then(|| crate::record::Options {
        path: home.recording(&name),
        max_bytes: None,
        mode: crate::record::OpenMode::New,
    });
    let admin = user_admin.is_none().then(|| crate::admin::AdminConfig {
        addr: crate::admin::AdminAddr::Unix(home.socket(&name)),
        token: None,
        ready_path: None,
        ready_interval: std::time::Duration::from_secs(5),
        max_label_values: crate::observe::metrics::MAX_LABEL_VALUES,
    });
    if !inspect.redact.preset() {
        inspect.redact = std::sync::Arc::new((*inspect.redact).clone().with_preset());
    }
    Some(Plan {
        home,
        name,
        label,
        mode,
        command,
        started,
        record,
        admin,
    })
}

impl Plan {
    /// The recording of a run joined by `plan` (if it is): the user's, else the hub's.
    pub fn record(
        plan: Option<&Plan>,
        user: &Option<crate::record::Options>,
    ) -> Option<crate::record::Options> {
        user.clone().or_else(|| plan?.record.clone())
    }

    /// The admin listener of a run joined by `plan` (if it is): the user's, else the hub's
    /// feed socket.
    pub fn admin(
        plan: Option<&Plan>,
        user: &Option<crate::admin::AdminConfig>,
    ) -> Option<crate::admin::AdminConfig> {
        user.clone().or_else(|| plan?.admin.clone())
    }

    /// After a failed attach: drops what the hub added (the user's own settings stay) and says
    /// so; `false` when the hub added nothing, so the error is the user's.
    pub fn give_up(&mut self, why: &dyn std::fmt::Display) -> bool {
        if self.record.is_none() && self.admin.is_none() {
            return false;
        }
        eprintln!(
            "rpctap: warning: the hub's recording or feed failed ({why}); going on without them"
        );
        self.record = None;
        self.admin = None;
        true
    }

    /// Registers the run, for `watch` (which shows it once its feed answers).
    pub fn register(
        &self,
        admin: &Option<crate::admin::AdminConfig>,
        record: &Option<crate::record::Options>,
        server_pid: Option<u32>,
    ) -> Option<Registered> {
        let feed = admin.as_ref()?.addr.to_string();
        let r = Registration {
            name: self.name.clone(),
            label: self.label.clone(),
            mode: self.mode.into(),
            command: self.command.clone(),
            pid: std::process::id(),
            server_pid,
            started: self
                .started
                .duration_since(SystemTime::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(0),
            feed,
            recording: record.as_ref().map(|o| o.path.clone()),
        };
        match self.home.register(&r) {
            Ok(reg) => Some(reg),
            Err(e) => {
                eprintln!("rpctap: warning: cannot register in the hub ({e}); `rpctap watch` will not see this session live");
                None
            }
        }
    }

    /// What the recording's header and the feed's header say about the session.
    pub fn meta(&self) -> serde_json::Value {
        serde_json::json!({
            "label": self.label,
            "session": self.name,
            "started": self.started.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0),
        })
    }
}

/// The live tool baseline of a server `label`: in `dir` when given, else — joined to the hub —
/// in the state directory. A baseline that cannot be read is a warning (nothing is compared).
pub fn live_baseline(
    dir: Option<&std::path::Path>,
    hub: bool,
    label: &str,
) -> Option<std::sync::Arc<crate::baseline::Live>> {
    let dir = match dir {
        Some(d) => d.to_path_buf(),
        None if hub => Home::from_env().ok()?.baselines(),
        None => return None,
    };
    match crate::baseline::Live::open(&dir, label, true) {
        Ok(l) => Some(std::sync::Arc::new(l)),
        Err(e) => {
            eprintln!("rpctap: warning: tool baseline not used: {e}");
            None
        }
    }
}

/// Adds `extra`'s members to the object `v`.
pub fn merge(v: &mut serde_json::Value, extra: serde_json::Value) {
    if let (Some(o), serde_json::Value::Object(e)) = (v.as_object_mut(), extra) {
        o.extend(e);
    }
}

fn home() -> Result<Home, AppError> {
    Home::from_env().map_err(|e| AppError::Io(e.to_string()))
}

/// `rpctap sessions [--json]`.
pub fn sessions(args: crate::cli::SessionsArgs) -> Result<i32, AppError> {
    let home = home()?;
    let list = home.sessions_list(args.limit);
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&list).unwrap_or_else(|_| "[]".into())
        );
        return Ok(0);
    }
    if list.is_empty() {
        println!(
            "no sessions yet in {} — wrap a server with `rpctap stdio -- CMD …` or `rpctap config wrap`",
            home.sessions().display()
        );
        return Ok(0);
    }
    println!(
        "{:<44} {:<20} {:>7} {:<6} {:>6} {:>6} {:>6}  COMMAND",
        "SESSION", "LABEL", "PID", "STATE", "CALLS", "ERRORS", "ANOMS"
    );
    for s in &list {
        println!(
            "{:<44} {:<20} {:>7} {:<6} {:>6} {:>6} {:>6}  {}",
            s.name,
            s.label,
            s.pid.map(|p| p.to_string()).unwrap_or_else(|| "-".into()),
            if s.live { "live" } else { "ended" },
            s.calls,
            s.errors,
            s.anomalies,
            s.command.join(" ")
        );
    }
    Ok(0)
}

/// `rpctap open SESSION|FILE|-`: as `view`.
pub async fn open(
    args: crate::cli::OpenArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let (rec, title) = if args.session == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut b)
            .map_err(|e| AppError::Io(format!("cannot read stdin: {e}")))?;
        let mut rec = crate::record::reader::Capture::default();
        crate::record::reader::parse_part(&String::from_utf8_lossy(&b), "stdin", &mut rec, true)
            .map_err(|why| AppError::Io(format!("stdin: {why}")))?;
        (rec, "rpctap open -".to_string())
    } else {
        let path = home()
            .and_then(|h| {
                h.find(&args.session)
                    .map_err(|e| AppError::Io(e.to_string()))
            })
            .or_else(|e| {
                // Without a home, a file still opens.
                let p = std::path::PathBuf::from(&args.session);
                if p.is_file() {
                    Ok(p)
                } else {
                    Err(e)
                }
            })?;
        (
            crate::record::reader::read(&path)?,
            format!("rpctap open {}", path.display()),
        )
    };
    super::view::view_capture(rec, &title, args.max_rows, shutdown).await
}

/// `rpctap prune --older-than AGE [--dry-run] [--yes]`.
pub fn prune(args: crate::cli::PruneArgs) -> Result<i32, AppError> {
    let home = home()?;
    let old = home.older_than(args.older_than);
    let total: u64 = old.iter().map(|(_, n)| n).sum();
    let age = humantime::format_duration(args.older_than);
    if old.is_empty() {
        println!("no ended session is older than {age}");
        return Ok(0);
    }
    for (p, n) in &old {
        println!(
            "{}{} ({n} bytes)",
            if args.dry_run { "would delete " } else { "" },
            p.display()
        );
    }
    if args.dry_run {
        println!(
            "{} sessions, {total} bytes, older than {age} (dry run: nothing deleted)",
            old.len()
        );
        return Ok(0);
    }
    if !args.yes {
        if !std::io::IsTerminal::is_terminal(&std::io::stdin()) {
            return Err(AppError::Io(format!(
                "{} sessions would be deleted: pass --yes to delete them, or --dry-run to list them",
                old.len()
            )));
        }
        eprint!(
            "delete these {} sessions ({total} bytes)? [y/N] ",
            old.len()
        );
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        if !matches!(answer.trim(), "y" | "Y" | "yes") {
            println!("nothing deleted");
            return Ok(0);
        }
    }
    let mut failed = 0;
    for (p, _) in &old {
        if let Err(e) = home.remove(p) {
            eprintln!("rpctap: {e}");
            failed += 1;
        }
    }
    println!("deleted {} sessions ({total} bytes)", old.len() - failed);
    Ok(if failed > 0 { 1 } else { 0 })
}

/// `rpctap watch` (and bare `rpctap` on a terminal): the dashboard over every session.
pub async fn watch(
    args: crate::cli::WatchArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let home = home()?;
    if let Err(e) = home.create() {
        return Err(AppError::Io(e.to_string()));
    }
    let (tx, rx) = tokio::sync::mpsc::channel(65_536);
    let task = crate::hub::watch::spawn(home.clone(), args.history, tx);
    let mut app = crate::view::App::new(
        "rpctap watch",
        "hub",
        &home.state.display().to_string(),
        args.max_rows,
        crate::events::now_ns(),
    );
    app.view = crate::view::View::Sessions;
    app.status = format!(
        "watching {} — wrap servers with `rpctap config wrap` or `rpctap stdio -- CMD`",
        home.runtime.display()
    );
    let r = crate::tui::run(
        app,
        Some(crate::tui::Source::Watch(rx)),
        shutdown,
        None,
        None,
        None,
        crate::tui::Screen::Stdout,
    )
    .await;
    task.abort();
    r.map_err(|e| AppError::Terminal(e.to_string()))?;
    Ok(0)
}

//! The child process: spawned with its pipes (and SIGTERM if rpctap dies), the signals rpctap
//! gets forwarded to it, and how it exited — as a shell reports it, and as the reason of the
//! calls it left unanswered.

use std::process::{Child, Command, ExitStatus, Stdio};

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

pub fn spawn(command: &[String]) -> std::io::Result<Child> {
    prepare(command)?.spawn()
}

/// The command with its three pipes, and SIGTERM to the child if rpctap dies (no orphan).
pub fn prepare(command: &[String]) -> std::io::Result<Command> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| std::io::Error::other("no command"))?;
    let mut cmd = Command::new(prog);
    cmd.args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
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
    Ok(cmd)
}

/// The signals rpctap forwards, caught from before the child starts (so none is lost, and
/// none takes rpctap down with its default action).
#[cfg(unix)]
pub type Caught = Option<(
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
    tokio::signal::unix::Signal,
)>;
#[cfg(not(unix))]
pub type Caught = ();

#[cfg(unix)]
pub fn catch_signals() -> Caught {
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
pub fn catch_signals() -> Caught {}

/// Forwards SIGINT, SIGTERM and SIGHUP to the child until aborted.
pub fn spawn_signal_forwarder(pid: u32, caught: Caught) -> tokio::task::JoinHandle<()> {
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

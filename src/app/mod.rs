//! The subcommands wired together: what `main` runs, one file per subcommand or family —
//! `proxy` (and the serving every proxying subcommand shares), `demo`, `serve`, `stdio`, `view`
//! (a recording or a live feed in the dashboard), `replay` (and `mock`), `check` (and `diff`,
//! `baseline`), `probe` (and `test`), `export`, `agent`, `hub` (`watch`, `sessions`, `open`, `prune`), `wrap`
//! (`config wrap|unwrap`) — with the one observer chain they share (`observers`) and the one
//! error type whose variant decides the exit code. Each serving subcommand takes a `shutdown`
//! future so tests can stop it with a oneshot and `main` with SIGINT/SIGTERM.

pub mod agent;
pub mod check;
pub mod demo;
pub mod export;
pub mod hub;
pub mod inproc;
pub mod observers;
pub mod probe;
pub mod proxy;
pub mod replay;
pub mod serve;
pub mod stdio;
pub mod view;
pub mod wrap;
pub use observers::{Chain, Observers};
pub use proxy::RunningProxy;

use crate::config;
use std::net::SocketAddr;

/// Errors at the edge of every subcommand: one type, whose variant decides the exit code.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error(transparent)]
    Config(#[from] config::ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error(transparent)]
    Record(#[from] crate::record::Error),
    /// The terminal (the dashboard's screen, its keys) could not be used.
    #[error("terminal: {0}")]
    Terminal(String),
    #[error(transparent)]
    Admin(#[from] crate::admin::AdminError),
    #[error(transparent)]
    Replay(#[from] crate::replay::ReplayError),
    #[error(transparent)]
    Check(#[from] crate::inspect::offline::CheckError),
    /// A file or stream named on the command line that cannot be read or written as asked.
    #[error("{0}")]
    Io(String),
    /// Nothing to check or replay: exit 2, so CI does not take silence for success.
    #[error("no calls: {0}")]
    Empty(String),
}

impl AppError {
    /// The one rule of every subcommand: 2 when the command line or its input is wrong (a bad
    /// flag or config, a file that cannot be read or is no recording, nothing to check), 1 when
    /// the run itself failed (an address that cannot be bound, a recording that cannot be
    /// written, the terminal, the admin listener).
    pub fn exit_code(&self) -> i32 {
        use crate::record::Error as R;
        match self {
            AppError::Config(_)
            | AppError::Replay(_)
            | AppError::Check(_)
            | AppError::Io(_)
            | AppError::Empty(_)
            | AppError::Record(
                R::Read { .. } | R::Format { .. } | R::Exists { .. } | R::IsDir { .. },
            )
            | AppError::Admin(
                crate::admin::AdminError::TokenRequired(_) | crate::admin::AdminError::InUse(_),
            ) => 2,
            AppError::Bind { .. }
            | AppError::Record(R::Write { .. })
            | AppError::Terminal(_)
            | AppError::Admin(_) => 1,
        }
    }
}

/// `rpctap completions SHELL`: the completion script, from the one clap definition.
pub fn completions(args: crate::cli::CompletionsArgs) -> Result<i32, AppError> {
    let mut cmd = <crate::cli::Cli as clap::CommandFactory>::command();
    clap_complete::generate(args.shell, &mut cmd, "rpctap", &mut std::io::stdout());
    Ok(0)
}

/// `rpctap man`: the manual page (roff): the options, and every subcommand with what it does.
pub fn man() -> Result<i32, AppError> {
    let cmd = <crate::cli::Cli as clap::CommandFactory>::command();
    let mut out = Vec::new();
    clap_mangen::Man::new(cmd)
        .render(&mut out)
        .map_err(|e| AppError::Io(format!("man: {e}")))?;
    use std::io::Write;
    let mut so = std::io::stdout().lock();
    match so.write_all(&out).and_then(|()| so.flush()) {
        Ok(()) => Ok(0),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(0),
        Err(e) => Err(AppError::Io(format!("man: {e}"))),
    }
}

pub(super) fn write_out(path: Option<&std::path::Path>, text: &str) -> Result<(), AppError> {
    match path {
        // Private (0600), like the recording it comes from.
        Some(p) => crate::record::create_private(p)
            .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
            .map_err(|e| AppError::Io(format!("cannot write {}: {e}", p.display()))),
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())
                .and_then(|_| out.flush())
                .map_err(|e| AppError::Io(format!("cannot write to stdout: {e}")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::AppError;
    use crate::record::Error as R;

    /// One rule for every subcommand: the input wrong is 2, the run failed is 1 — a terminal
    /// that cannot be used is 1 in `view`, `watch` and `attach` as in `proxy` and `stdio`.
    #[test]
    fn the_variant_decides_the_exit_code() {
        let io = || std::io::Error::other("x");
        let p = std::path::PathBuf::from("f.jsonl");
        let two = [
            AppError::Io("cannot write out.xml".into()),
            AppError::Empty("f.jsonl".into()),
            AppError::Record(R::Read {
                path: p.clone(),
                source: io(),
            }),
            AppError::Record(R::Format {
                path: p.clone(),
                why: "x".into(),
            }),
            AppError::Record(R::Exists { path: p.clone() }),
            AppError::Config(crate::config::ConfigError::Invalid("x".into())),
        ];
        for e in two {
            assert_eq!(e.exit_code(), 2, "{e:?}");
        }
        let one = [
            AppError::Terminal("not a terminal".into()),
            AppError::Record(R::Write {
                path: p,
                source: io(),
            }),
            AppError::Bind {
                addr: ([127, 0, 0, 1], 1).into(),
                source: io(),
            },
        ];
        for e in one {
            assert_eq!(e.exit_code(), 1, "{e:?}");
        }
    }
}

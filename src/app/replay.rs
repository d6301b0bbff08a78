//! `rpctap replay` (a recording's calls re-sent to a server and judged) and `rpctap mock` (a
//! recording served as the server).

use super::{write_out, AppError};
use crate::config::{self};
use std::future::Future;
use tokio::net::TcpListener;

/// `rpctap replay`: 0 when every call matches, 1 on any regression.
pub async fn run(args: crate::cli::ReplayArgs) -> Result<i32, AppError> {
    let flags = config::replay(&args)?;
    let rec = crate::record::reader::read(&args.file)?;
    let stdio = crate::replay::stdio::is_stdio(&rec);
    if !rec.messages().any(|m| {
        m.is_c2s()
            && matches!(
                m.kind,
                crate::rpc::Kind::Request | crate::rpc::Kind::Notification
            )
    }) {
        return Err(AppError::Empty(format!(
            "{}: the recording holds no client calls to replay",
            args.file.display()
        )));
    }
    let config::Replay {
        ignore,
        headers,
        timeout,
        wait,
        target,
        max_duration,
    } = flags;
    let report = if stdio || args.target_command {
        if target.is_some() {
            return Err(AppError::Io(format!(
                "{} is a stdio recording: replay it with --target-command [-- COMMAND …], not --target",
                args.file.display()
            )));
        }
        let command = if args.command.is_empty() {
            crate::replay::stdio::recorded_command(&rec).ok_or_else(|| {
                AppError::Io(format!(
                    "{} records no command: give one with --target-command -- COMMAND …",
                    args.file.display()
                ))
            })?
        } else {
            args.command.clone()
        };
        crate::replay::stdio::replay(&rec, &command, &ignore, timeout).await?
    } else {
        let Some(target) = target else {
            return Err(AppError::Io(
                "--target URL is required to replay an HTTP recording".into(),
            ));
        };
        let opts = crate::replay::ReplayOptions {
            target,
            ignore,
            timeout,
            headers,
            insecure: args.insecure,
            wait,
            pace: args.pace,
        };
        if args.update {
            return update_recording(&args, &rec, opts).await;
        }
        crate::replay::replay(&rec, &opts).await?
    };
    let mut report = report;
    if let Some(max) = max_duration {
        report.limit_duration(max);
    }
    if let Some(j) = &args.junit {
        write_out(Some(j), &crate::replay::junit(&report))?;
    }
    if args.json {
        write_out(
            None,
            &format!(
                "{}\n",
                serde_json::to_string_pretty(&report).unwrap_or_default()
            ),
        )?;
    } else {
        write_out(None, &crate::replay::text(&report))?;
    }
    Ok(if report.failed == 0 { 0 } else { 1 })
}

/// `replay --update`: the recording's client traffic goes to the target through a recording
/// proxy (rpctap's own, in this process: `inproc`), and what that proxy recorded becomes the
/// recording; the old one is kept as FILE.bak.
async fn update_recording(
    args: &crate::cli::ReplayArgs,
    rec: &crate::record::reader::Capture,
    mut opts: crate::replay::ReplayOptions,
) -> Result<i32, AppError> {
    let io = |what: &str, e: std::io::Error| AppError::Io(format!("{what}: {e}"));
    let fresh = args.file.with_extension("jsonl.update");
    let _ = std::fs::remove_file(&fresh);
    // rpctap's own proxy, in this process, recording what the target answers.
    let proxy = super::inproc::start(
        &super::inproc::InFront::Upstream(opts.target.to_string()),
        Some(&fresh),
    )
    .await?;
    opts.target = format!("http://{}", proxy.addr)
        .parse()
        .map_err(|e| AppError::Io(format!("{e}")))?;
    let report = crate::replay::replay(rec, &opts).await;
    // Drained: the recording is flushed whole.
    proxy.finish().await;
    let report = report?;
    let bak = args.file.with_extension("jsonl.bak");
    std::fs::rename(&args.file, &bak).map_err(|e| io("cannot keep the old recording", e))?;
    std::fs::rename(&fresh, &args.file).map_err(|e| io("cannot write the new recording", e))?;
    eprintln!(
        "rpctap replay: {} updated from {} ({} calls, {} differed from what was recorded); the old recording is {}",
        args.file.display(),
        args.target.as_deref().unwrap_or(""),
        report.calls.len(),
        report.failed,
        bak.display()
    );
    Ok(0)
}

/// `rpctap mock`.
pub async fn mock(
    args: crate::cli::MockArgs,
    shutdown: impl Future<Output = ()>,
) -> Result<i32, AppError> {
    let rec = crate::record::reader::read(&args.file)?;
    let mock = crate::replay::mock::Mock::matching(&rec, args.matching);
    if args.stdio {
        eprintln!(
            "rpctap mock: serving {} recorded calls from {} on stdin/stdout",
            mock.calls_known(),
            args.file.display()
        );
        // Blocking reads and writes of the process's own stdio, off the runtime's threads.
        let served = tokio::task::spawn_blocking(move || {
            mock.serve_stdio(std::io::stdin().lock(), std::io::stdout().lock())
        })
        .await
        .map_err(|e| AppError::Io(e.to_string()))?;
        served.map_err(|e| AppError::Io(format!("mock: {e}")))?;
        return Ok(0);
    }
    let listener = TcpListener::bind(args.listen)
        .await
        .map_err(|source| AppError::Bind {
            addr: args.listen,
            source,
        })?;
    eprintln!(
        "rpctap mock: serving {} recorded calls from {} on http://{}",
        mock.calls_known(),
        args.file.display(),
        listener.local_addr().unwrap_or(args.listen)
    );
    crate::replay::mock::run(listener, std::sync::Arc::new(mock), shutdown).await;
    Ok(0)
}

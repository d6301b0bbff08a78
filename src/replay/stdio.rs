//! Replaying a stdio recording: the server command is spawned again and the client's recorded
//! lines are written to its stdin in order, by the stream driver ([`super::stream`]).

use super::stream::{drive, from_server, FromServer, Peer};
use super::{Expected, ReplayError, Report};
use crate::events::MessageEvent;
use crate::record::reader::Capture;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The command a stdio recording was made with (its header's `command`).
pub fn recorded_command(rec: &Capture) -> Option<Vec<String>> {
    let c = rec.header.get("command")?.as_array()?;
    let v: Vec<String> = c
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Whether a recording was made by `rpctap stdio`.
pub fn is_stdio(rec: &Capture) -> bool {
    rec.header.get("transport").and_then(|t| t.as_str()) == Some("stdio")
}

/// Replays a stdio recording against `command`.
pub async fn replay(
    rec: &Capture,
    command: &[String],
    ignore: &[String],
    timeout: Duration,
) -> Result<Report, ReplayError> {
    let (prog, args) = command
        .split_first()
        .ok_or_else(|| ReplayError::Unreachable("(no command)".into(), "empty command".into()))?;
    let shown = command.join(" ");
    let mut child = tokio::process::Command::new(prog)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| ReplayError::Unreachable(shown.clone(), e.to_string()))?;
    let (Some(mut stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
        return Err(ReplayError::Unreachable(shown, "no pipes".into()));
    };
    let (tx, rx) = mpsc::unbounded_channel::<FromServer>();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            for msg in from_server(line.as_bytes()) {
                if tx.send(msg).is_err() {
                    return;
                }
            }
        }
    });
    let (out, mut to_stdin) = mpsc::unbounded_channel::<String>();
    let writer = tokio::spawn(async move {
        while let Some(mut line) = to_stdin.recv().await {
            line.push('\n');
            stdin.write_all(line.as_bytes()).await?;
            let _ = stdin.flush().await;
        }
        Ok::<(), std::io::Error>(())
    });
    let mut report = Report {
        target: shown.clone(),
        ..Default::default()
    };
    let msgs: Vec<&MessageEvent> = rec.messages().collect();
    drive(
        &Expected::new(rec),
        &msgs,
        ignore,
        timeout,
        Peer { out, rx },
        &mut report,
    )
    .await;
    if let Ok(Ok(Err(e))) = tokio::time::timeout(Duration::from_secs(1), writer).await {
        report
            .warnings
            .push(format!("the server's stdin closed: {e}"));
    }
    // The client's end: stdin closes (the writer has ended), the server gets a moment to
    // exit, then it is stopped.
    if tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    reader.abort();
    Ok(report)
}

//! Replaying a stdio recording: the server command is spawned again and the client's recorded
//! lines are written to its stdin in order. After a line with calls, its replies are awaited
//! (by id) and judged as on HTTP. The client's recorded answers to server requests (sampling,
//! elicitation, roots) are not sent in that order but when the server makes the request again
//! — typically while one of the client's calls waits for it.

use super::diff::Pattern;
use super::{judge, Recorded, ReplayError, Report};
use crate::record::reader::{RecMessage, Recording};
use crate::rpc::{self, Body, Kind};
use std::collections::HashMap;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

/// The command a stdio recording was made with (its header's `command`).
pub fn recorded_command(rec: &Recording) -> Option<Vec<String>> {
    let c = rec.header.get("command")?.as_array()?;
    let v: Vec<String> = c
        .iter()
        .filter_map(|x| x.as_str().map(str::to_string))
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Whether a recording was made by `rpctap stdio`.
pub fn is_stdio(rec: &Recording) -> bool {
    rec.header.get("transport").and_then(|t| t.as_str()) == Some("stdio")
}

/// The client's lines of a recording, in order (a batch's members joined back into one line).
fn client_lines(rec: &Recording) -> Vec<Vec<&RecMessage>> {
    let mut out: Vec<Vec<&RecMessage>> = Vec::new();
    let mut open: Option<Vec<&RecMessage>> = None;
    for m in rec.messages().filter(|m| m.is_c2s()) {
        match (m.batch_index, m.batch_len) {
            (Some(i), Some(n)) => {
                let cur = open.get_or_insert_with(Vec::new);
                cur.push(m);
                if i + 1 >= n {
                    out.extend(open.take());
                }
            }
            _ => {
                out.extend(open.take());
                out.push(vec![m]);
            }
        }
    }
    out.extend(open.take());
    out
}

fn line_text(members: &[&RecMessage]) -> String {
    if members.len() == 1 && members[0].batch_index.is_none() {
        return members[0].wire_text().into_owned();
    }
    let parts: Vec<String> = members.iter().map(|m| m.wire_text().into_owned()).collect();
    format!("[{}]", parts.join(","))
}

/// What the server said, as the reader hands it over.
enum FromServer {
    /// A reply to one of the client's calls, by id text.
    Reply(String, rpc::Envelope),
    /// A request of the server's, by id text.
    Request(String),
}

/// Replays a stdio recording against `command`.
pub async fn replay(
    rec: &Recording,
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
    let (tx, mut rx) = mpsc::unbounded_channel::<FromServer>();
    let reader = tokio::spawn(async move {
        let mut lines = BufReader::new(stdout).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let envs = match rpc::parse_body(&bytes::Bytes::from(line)) {
                Body::Single(e) => vec![e],
                Body::Batch(v) => v,
                Body::ParseError(_) => continue,
            };
            for e in envs {
                let id = e.id.as_ref().map(|i| i.to_json_text());
                let msg = match (e.kind, id) {
                    (Kind::Result | Kind::Error, Some(id)) => FromServer::Reply(id, e),
                    (Kind::Request, Some(id)) => FromServer::Request(id),
                    _ => continue,
                };
                if tx.send(msg).is_err() {
                    return;
                }
            }
        }
    });
    let recorded = Recorded::new(rec);
    let patterns: Vec<Pattern> = ignore.iter().map(|p| Pattern::parse(p)).collect();
    let mut report = Report {
        target: shown.clone(),
        ..Default::default()
    };
    let mut replies: HashMap<String, rpc::Envelope> = HashMap::new();
    // The client's answers to server requests, by the request's id.
    let lines = client_lines(rec);
    let mut answers: HashMap<String, String> = HashMap::new();
    for members in &lines {
        if members.iter().all(|m| m.is_response()) {
            for m in members.iter() {
                if let Some(id) = m.id_text() {
                    answers.insert(id.to_string(), format!("{}\n", m.wire_text()));
                }
            }
        }
    }
    // Takes what the server said; answers a request of its at once when the recording has the
    // answer.
    macro_rules! take {
        ($msg:expr) => {
            match $msg {
                FromServer::Reply(id, e) => {
                    replies.insert(id, e);
                }
                FromServer::Request(id) => {
                    if let Some(a) = answers.remove(&id) {
                        let _ = stdin.write_all(a.as_bytes()).await;
                        let _ = stdin.flush().await;
                    }
                }
            }
        };
    }
    for members in lines.iter().filter(|l| !l.iter().all(|m| m.is_response())) {
        let mut text = line_text(members);
        text.push('\n');
        let t0 = Instant::now();
        if let Err(e) = stdin.write_all(text.as_bytes()).await {
            report
                .warnings
                .push(format!("the server's stdin closed: {e}"));
            break;
        }
        let _ = stdin.flush().await;
        let calls: Vec<&RecMessage> = members
            .iter()
            .copied()
            .filter(|m| {
                m.kind == Kind::Request
                    || (m.kind == Kind::Invalid && m.id.is_some() && m.method.is_some())
            })
            .collect();
        if calls.is_empty() {
            continue;
        }
        report.exchanges += 1;
        let deadline = t0 + timeout;
        while calls
            .iter()
            .any(|c| c.id_text().is_some_and(|id| !replies.contains_key(id)))
        {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, rx.recv()).await {
                Ok(Some(msg)) => take!(msg),
                _ => break,
            }
        }
        let latency_ms = t0.elapsed().as_secs_f64() * 1e3;
        for call in calls {
            let c = judge(
                &recorded,
                &patterns,
                call.exchange,
                call,
                Some(200),
                &replies,
                latency_ms,
            );
            if let Some(id) = call.id_text() {
                replies.remove(id);
            }
            if c.pass {
                report.passed += 1;
            } else {
                report.failed += 1;
            }
            report.calls.push(c);
        }
    }
    if !answers.is_empty() {
        let mut ids: Vec<&String> = answers.keys().collect();
        ids.sort();
        report.warnings.push(format!(
            "the server did not make the requests the client answered in the recording (ids {})",
            ids.iter()
                .map(|s| s.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    // The client's end: stdin closes, the server gets a moment to exit, then it is stopped.
    drop(stdin);
    if tokio::time::timeout(Duration::from_secs(5), child.wait())
        .await
        .is_err()
    {
        let _ = child.kill().await;
    }
    reader.abort();
    Ok(report)
}

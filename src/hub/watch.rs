//! What `rpctap watch` reads: every live registration's feed (found within half a second of
//! its start, marked ended as soon as its feed drops and its socket stops answering) and the
//! newest past sessions from disk (bounded: `history` of them, read once), handed to the
//! dashboard as one ordered stream of sources and their events.

use super::{Home, SessionInfo};
use crate::attach::{FeedMsg, FeedTarget};
use crate::events::Event;
use std::collections::HashSet;
use std::time::{Duration, SystemTime};
use tokio::sync::mpsc;

/// How often the runtime directory is looked at.
pub const POLL: Duration = Duration::from_millis(500);

/// What the watcher tells the dashboard. Sources are numbered from 1 in the order of their
/// `Server` message.
#[derive(Debug)]
pub enum WatchMsg {
    /// A new source: a live session or a past one.
    Server {
        src: u32,
        info: SessionInfo,
    },
    Event {
        src: u32,
        event: Box<Event>,
    },
    /// The source's process is gone (or its feed refused us: `why`).
    Ended {
        src: u32,
        why: Option<String>,
    },
    /// About the watch itself (a session that could not be read…).
    Note(String),
}

/// Starts the watcher; it stops when `tx` closes.
pub fn spawn(
    home: Home,
    history: usize,
    tx: mpsc::Sender<WatchMsg>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut next_src = 1u32;
        // Session names already shown (live or past): a session is never shown twice.
        let mut known: HashSet<String> = HashSet::new();
        let mut live: Vec<(String, u32, tokio::task::JoinHandle<()>)> = Vec::new();
        let token = std::env::var("RPCTAP_ADMIN_TOKEN")
            .ok()
            .filter(|t| !t.is_empty());
        // The past first, oldest to newest, so that live sessions come after them.
        let h = home.clone();
        let past = tokio::task::spawn_blocking(move || {
            let mut list: Vec<SessionInfo> = h
                .sessions_list(history)
                .into_iter()
                .filter(|s| !s.live)
                .collect();
            list.reverse();
            list
        })
        .await
        .unwrap_or_default();
        for s in &past {
            known.insert(s.name.clone());
        }
        if !load_past(past, &mut next_src, &tx).await {
            return;
        }
        let mut tick = tokio::time::interval(POLL);
        loop {
            tick.tick().await;
            if tx.is_closed() {
                break;
            }
            let h = home.clone();
            let (regs, files) = tokio::task::spawn_blocking(move || (h.live(), h.recorded_files()))
                .await
                .unwrap_or_default();
            for r in &regs {
                if !known.insert(r.name.clone()) {
                    continue;
                }
                let src = next_src;
                next_src += 1;
                let info = SessionInfo::from(r);
                if tx.send(WatchMsg::Server { src, info }).await.is_err() {
                    return;
                }
                let task = follow(src, r.feed.clone(), token.clone(), tx.clone());
                live.push((r.name.clone(), src, task));
            }
            // A registration gone (its process exited and removed it, or was found dead).
            let mut i = 0;
            while i < live.len() {
                if regs.iter().any(|r| r.name == live[i].0) {
                    i += 1;
                    continue;
                }
                let (_, src, task) = live.swap_remove(i);
                // The feed's last events first (it ends on its own when the process closes it).
                let _ = tokio::time::timeout(Duration::from_secs(1), task).await;
                let _ = tx.send(WatchMsg::Ended { src, why: None }).await;
            }
            // Sessions that ran and ended between two looks (or while a name was unknown):
            // read from disk once their file has been quiet for two seconds.
            for (path, modified, _) in files {
                let Some(name) = session_name_of(&path) else {
                    continue;
                };
                let quiet = SystemTime::now()
                    .duration_since(modified)
                    .is_ok_and(|d| d > Duration::from_secs(2));
                if known.contains(&name) || !quiet || regs.iter().any(|r| r.name == name) {
                    continue;
                }
                known.insert(name);
                let p = path.clone();
                let info = tokio::task::spawn_blocking(move || super::summarize(&p))
                    .await
                    .ok()
                    .flatten();
                if let Some(info) = info {
                    if !load_past(vec![info], &mut next_src, &tx).await {
                        return;
                    }
                }
            }
        }
        for (_, _, t) in live {
            t.abort();
        }
    })
}

fn session_name_of(p: &std::path::Path) -> Option<String> {
    Some(p.file_name()?.to_str()?.strip_suffix(".jsonl")?.to_string())
}

/// Reads past sessions and hands them on, their events merged in time order (sessions that ran
/// side by side — a desktop client's servers — interleave in the calls list as they happened);
/// `false` when the dashboard is gone.
async fn load_past(
    infos: Vec<SessionInfo>,
    next_src: &mut u32,
    tx: &mpsc::Sender<WatchMsg>,
) -> bool {
    let mut read = Vec::new();
    for info in infos {
        let Some(path) = info.recording.clone() else {
            continue;
        };
        let rec = tokio::task::spawn_blocking(move || crate::record::reader::read(&path)).await;
        match rec {
            Ok(Ok(r)) => {
                let src = *next_src;
                *next_src += 1;
                if tx.send(WatchMsg::Server { src, info }).await.is_err() {
                    return false;
                }
                read.push((src, r.events.into_iter().peekable()));
            }
            Ok(Err(e)) => {
                if tx
                    .send(WatchMsg::Note(format!("{}: {e}", info.name)))
                    .await
                    .is_err()
                {
                    return false;
                }
            }
            Err(_) => {}
        }
    }
    // The earliest next event of any session, each time (a few sessions: a scan is enough).
    loop {
        let next = read
            .iter_mut()
            .filter_map(|(src, evs)| Some((evs.peek()?.ts(), *src)))
            .min();
        let Some((_, src)) = next else { break };
        let Some(event) = read
            .iter_mut()
            .find(|(s, _)| *s == src)
            .and_then(|(_, evs)| evs.next())
        else {
            break;
        };
        let msg = WatchMsg::Event {
            src,
            event: Box::new(event),
        };
        if tx.send(msg).await.is_err() {
            return false;
        }
    }
    for (src, _) in read {
        if tx.send(WatchMsg::Ended { src, why: None }).await.is_err() {
            return false;
        }
    }
    true
}

/// Follows one live session's feed until its process is gone.
fn follow(
    src: u32,
    feed: String,
    token: Option<String>,
    tx: mpsc::Sender<WatchMsg>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let target = match FeedTarget::parse(&feed) {
            Ok(t) => t,
            Err(e) => {
                let _ = tx.send(WatchMsg::Ended { src, why: Some(e) }).await;
                return;
            }
        };
        let (ftx, mut frx) = mpsc::channel(4096);
        let task = crate::attach::spawn(target, token, ftx);
        // The backlog of a reconnect to the same process is on screen already.
        let mut started: Option<serde_json::Value> = None;
        let mut seen_live = false;
        let mut in_backlog = false;
        while let Some(m) = frx.recv().await {
            match m {
                FeedMsg::Header(h) => {
                    let s = h.get("started").cloned();
                    in_backlog = seen_live && s == started;
                    started = s;
                }
                FeedMsg::Marker(v) => {
                    if v.get("live").is_some() {
                        seen_live = true;
                        in_backlog = false;
                    }
                }
                FeedMsg::Event(event) => {
                    if in_backlog || matches!(*event, Event::Notice(_)) {
                        continue;
                    }
                    if tx.send(WatchMsg::Event { src, event }).await.is_err() {
                        break;
                    }
                }
                FeedMsg::State(_) => {
                    // The feed dropped: the process is gone unless its socket still answers.
                    let f = feed.clone();
                    let alive = tokio::task::spawn_blocking(move || super::answers(&f))
                        .await
                        .unwrap_or(false);
                    if !alive {
                        break;
                    }
                }
                FeedMsg::Refused(why) => {
                    let _ = tx
                        .send(WatchMsg::Ended {
                            src,
                            why: Some(why),
                        })
                        .await;
                    task.abort();
                    return;
                }
            }
        }
        task.abort();
        let _ = tx.send(WatchMsg::Ended { src, why: None }).await;
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two past sessions that ran side by side reach the dashboard with their events
    /// interleaved in time, not one session after the other.
    #[tokio::test]
    async fn past_sessions_side_by_side_come_in_time_order() {
        let dir = std::env::temp_dir().join(format!("rpctap-watch-order-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let home = Home {
            state: dir.clone(),
            runtime: dir.join("run"),
        };
        std::fs::create_dir_all(home.sessions()).unwrap();
        for (name, start) in [("a", 1_000u64), ("b", 1_500)] {
            let mut text = format!(
                "{{\"rpctap_recording\":1,\"part\":0,\"created_ns\":{start},\"transport\":\"stdio\",\"label\":\"{name}\"}}\n"
            );
            for i in 0..4u64 {
                let ts = start + i * 1_000;
                text.push_str(&format!(
                    "{{\"event\":\"message\",\"ts\":{ts},\"exchange\":1,\"scope\":\"session:{name}\",\"direction\":\"c2s\",\"transport\":\"stdio\",\"kind\":\"notification\",\"method\":\"n\",\"message\":{{\"jsonrpc\":\"2.0\",\"method\":\"n\"}}}}\n"
                ));
            }
            std::fs::write(home.sessions().join(format!("{name}.jsonl")), text).unwrap();
        }
        let (tx, mut rx) = mpsc::channel(64);
        let task = spawn(home, 10, tx);
        let mut ts = Vec::new();
        let mut ended = 0;
        while ended < 2 {
            match tokio::time::timeout(Duration::from_secs(5), rx.recv()).await {
                Ok(Some(WatchMsg::Event { event, .. })) => ts.push(event.ts()),
                Ok(Some(WatchMsg::Ended { .. })) => ended += 1,
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        task.abort();
        let _ = std::fs::remove_dir_all(&dir);
        assert_eq!(ts.len(), 8, "{ts:?}");
        assert!(ts.windows(2).all(|w| w[0] <= w[1]), "{ts:?}");
    }
}

//! The live event feed: what `GET /events` on the admin listener streams and `rpctap attach`
//! reads. Built once for the HTTP proxy and `rpctap stdio`.
//!
//! One bus subscriber (a bounded queue, drained on a timer so the proxy's threads never wake
//! this task per event) keeps a bounded backlog of recent events and hands each event, as a
//! recording line (`record::write_line`, so a reader of recordings reads the feed), to every
//! attached client. Each client has its own bounded queue: a client that reads too slowly loses
//! lines — counted, and told so by a `notice` line — and never slows the relay or the others.
//! A client that attaches late first gets the backlog (the recent events still in memory),
//! then the live stream, with nothing lost or doubled in between: both are taken under the
//! one lock the drain holds.
//!
//! Wire format (NDJSON, `application/x-ndjson`): a header line
//! `{"rpctap_feed":1,"version":…,"started":NS,"mode":"proxy","listen":…,"upstream":…}` (for
//! `stdio`: `"mode":"stdio","command":[…],"pid":N}`), then one recording line
//! per event with a `"seq"` member first (the event's number in this process's feed, so a client
//! that reconnects skips what it already has). Lines carry what the recording carries (secrets
//! already redacted).

use crate::events::{Event, Subscription};
use bytes::Bytes;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// The feed format version in its header line.
pub const FEED_VERSION: u64 = 1;
/// How often the bus queue is drained.
pub const DRAIN: Duration = Duration::from_millis(20);
/// The bus queue's capacity (events).
pub const BUS_QUEUE: usize = 65_536;
/// A client's queue (lines).
pub const CLIENT_QUEUE: usize = 16_384;

/// Bounds of what the feed keeps.
#[derive(Clone, Copy, Debug)]
pub struct FeedLimits {
    /// Recent events kept for late clients.
    pub backlog_events: usize,
    /// …and at most this many bytes of their messages.
    pub backlog_bytes: usize,
    /// Recent ended calls kept for `GET /calls`.
    pub recent_calls: usize,
    /// Clients attached at once.
    pub max_clients: usize,
}

impl Default for FeedLimits {
    fn default() -> Self {
        FeedLimits {
            backlog_events: 20_000,
            backlog_bytes: 16 << 20,
            recent_calls: 1_000,
            max_clients: 16,
        }
    }
}

/// Why a client could not attach.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    #[error("too many feed clients (at most {0})")]
    TooManyClients(usize),
}

struct Client {
    tx: mpsc::Sender<Bytes>,
    dropped: u64,
    reported: u64,
}

#[derive(Default)]
struct State {
    /// Recent events with their feed numbers.
    backlog: VecDeque<(u64, Arc<Event>)>,
    next_seq: u64,
    backlog_bytes: usize,
    calls: VecDeque<Arc<Event>>,
    clients: Vec<Client>,
}

struct Inner {
    header: Bytes,
    limits: FeedLimits,
    /// A std lock: held by the drain for one batch and by `attach`, never across an `.await`.
    state: Mutex<State>,
    /// Lines dropped because a client's queue was full, plus events the bus queue dropped.
    dropped: AtomicU64,
    bus_dropped: Arc<AtomicU64>,
}

/// The feed: cheap to clone.
#[derive(Clone)]
pub struct Feed {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Feed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feed").finish_non_exhaustive()
    }
}

/// An attached client: its lines (header and backlog first).
pub struct FeedClient {
    pub rx: mpsc::Receiver<Bytes>,
}

fn message_bytes(ev: &Event) -> usize {
    match ev {
        Event::Message(m) => m.message.len(),
        _ => 0,
    }
}

/// An event's feed line: its recording line with `"seq":N` first.
fn line_of(seq: u64, ev: &Event) -> Option<Bytes> {
    let mut line = Vec::with_capacity(256);
    crate::record::write_line(&mut line, ev).ok()?;
    let body = line.strip_prefix(b"{")?;
    let mut out = Vec::with_capacity(line.len() + 24);
    out.extend_from_slice(b"{\"seq\":");
    out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
    out.push(b',');
    out.extend_from_slice(body);
    out.push(b'\n');
    Some(Bytes::from(out))
}

impl Feed {
    /// A feed over `sub` (a subscription to every event), described by `header` (mode, listen,
    /// upstream or command). Call [`Feed::spawn`] to run it.
    pub fn new(sub_dropped: Arc<AtomicU64>, header: serde_json::Value, limits: FeedLimits) -> Self {
        let mut h = serde_json::json!({
            "rpctap_feed": FEED_VERSION,
            "version": env!("CARGO_PKG_VERSION"),
            // Tells a reconnecting client whether this is the process it saw before.
            "started": crate::events::now_ns(),
        });
        if let (Some(h), serde_json::Value::Object(extra)) = (h.as_object_mut(), header) {
            h.extend(extra);
        }
        let mut header = h.to_string().into_bytes();
        header.push(b'\n');
        Feed {
            inner: Arc::new(Inner {
                header: Bytes::from(header),
                limits,
                state: Mutex::new(State::default()),
                dropped: AtomicU64::new(0),
                bus_dropped: sub_dropped,
            }),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Lines lost to slow clients plus events lost by the feed's bus queue.
    pub fn dropped(&self) -> u64 {
        self.inner.dropped.load(Ordering::Relaxed) + self.inner.bus_dropped.load(Ordering::Relaxed)
    }

    pub fn clients(&self) -> usize {
        self.state().clients.len()
    }

    /// Drains `sub` every [`DRAIN`] until every publisher is gone.
    pub fn spawn(&self, mut sub: Subscription) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(DRAIN);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            let mut batch = Vec::new();
            loop {
                tick.tick().await;
                let open = loop {
                    match sub.rx.try_recv() {
                        Ok(ev) => batch.push(ev),
                        Err(mpsc::error::TryRecvError::Empty) => break true,
                        Err(mpsc::error::TryRecvError::Disconnected) => break false,
                    }
                };
                me.push(&mut batch);
                if !open {
                    // The publishers are gone: the clients' streams end.
                    me.state().clients.clear();
                    return;
                }
            }
        })
    }

    /// Takes in a batch of events (emptying it).
    pub fn push(&self, batch: &mut Vec<Arc<Event>>) {
        if batch.is_empty() {
            self.report_drops();
            return;
        }
        let limits = self.inner.limits;
        let mut st = self.state();
        let with_clients = !st.clients.is_empty();
        for ev in batch.drain(..) {
            let seq = st.next_seq;
            st.next_seq += 1;
            if with_clients {
                if let Some(line) = line_of(seq, &ev) {
                    let mut dropped = 0;
                    st.clients
                        .retain_mut(|c| match c.tx.try_send(line.clone()) {
                            Ok(()) => true,
                            Err(mpsc::error::TrySendError::Full(_)) => {
                                c.dropped += 1;
                                dropped += 1;
                                true
                            }
                            Err(mpsc::error::TrySendError::Closed(_)) => false,
                        });
                    if dropped > 0 {
                        self.inner.dropped.fetch_add(dropped, Ordering::Relaxed);
                    }
                }
            }
            if matches!(&*ev, Event::Call(_)) && limits.recent_calls > 0 {
                if st.calls.len() >= limits.recent_calls {
                    st.calls.pop_front();
                }
                st.calls.push_back(ev.clone());
            }
            st.backlog_bytes += message_bytes(&ev);
            st.backlog.push_back((seq, ev));
            while st.backlog.len() > limits.backlog_events
                || (st.backlog_bytes > limits.backlog_bytes && st.backlog.len() > 1)
            {
                if let Some((_, old)) = st.backlog.pop_front() {
                    st.backlog_bytes -= message_bytes(&old);
                }
            }
        }
        drop(st);
        self.report_drops();
    }

    /// Tells each client that lost lines since the last report how many, in a `notice` line.
    fn report_drops(&self) {
        let mut st = self.state();
        for c in st.clients.iter_mut() {
            if c.dropped > c.reported {
                let ev = Event::Notice(crate::events::NoticeEvent {
                    ts: crate::events::now_ns(),
                    what: "feed_dropped",
                    message: format!(
                        "{} events were not sent to this client: it read too slowly",
                        c.dropped - c.reported
                    ),
                });
                if let Some(line) = line_of(u64::MAX, &ev) {
                    if c.tx.try_send(line).is_ok() {
                        c.reported = c.dropped;
                    }
                }
            }
        }
    }

    /// Attaches a client: its queue holds the header and the backlog, then live lines.
    pub fn attach(&self) -> Result<FeedClient, FeedError> {
        let mut st = self.state();
        if st.clients.len() >= self.inner.limits.max_clients {
            return Err(FeedError::TooManyClients(self.inner.limits.max_clients));
        }
        // The backlog may be larger than the queue: it goes first, whole.
        let (tx, rx) = mpsc::channel(CLIENT_QUEUE + st.backlog.len() + 1);
        let _ = tx.try_send(self.inner.header.clone());
        for (seq, ev) in &st.backlog {
            if let Some(line) = line_of(*seq, ev) {
                let _ = tx.try_send(line);
            }
        }
        st.clients.push(Client {
            tx,
            dropped: 0,
            reported: 0,
        });
        Ok(FeedClient { rx })
    }

    /// The most recent ended calls, newest last, as recording lines' JSON values.
    pub fn recent_calls(&self, limit: usize) -> Vec<serde_json::Value> {
        let st = self.state();
        let skip = st.calls.len().saturating_sub(limit);
        st.calls
            .iter()
            .skip(skip)
            .filter_map(|e| serde_json::to_value(&**e).ok())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::NoticeEvent;

    fn notice(i: u64) -> Arc<Event> {
        Arc::new(Event::Notice(NoticeEvent {
            ts: i,
            what: "test",
            message: "x".into(),
        }))
    }

    fn lines(c: &mut FeedClient) -> Vec<serde_json::Value> {
        let mut v = Vec::new();
        while let Ok(l) = c.rx.try_recv() {
            v.push(serde_json::from_slice(&l).unwrap());
        }
        v
    }

    #[test]
    fn a_late_client_gets_the_backlog_then_live_lines_nothing_lost_or_doubled() {
        let feed = Feed::new(
            Default::default(),
            serde_json::json!({"mode": "proxy"}),
            FeedLimits {
                backlog_events: 3,
                ..Default::default()
            },
        );
        feed.push(&mut (0..5).map(notice).collect());
        let mut c = feed.attach().unwrap();
        feed.push(&mut vec![notice(5)]);
        let got = lines(&mut c);
        assert_eq!(got[0]["rpctap_feed"], 1);
        assert_eq!(got[0]["mode"], "proxy");
        let ts: Vec<u64> = got[1..].iter().map(|l| l["ts"].as_u64().unwrap()).collect();
        assert_eq!(ts, vec![2, 3, 4, 5], "the backlog is bounded; then live");
        let seq: Vec<u64> = got[1..]
            .iter()
            .map(|l| l["seq"].as_u64().unwrap())
            .collect();
        assert_eq!(seq, vec![2, 3, 4, 5], "each event keeps its number");
    }

    #[test]
    fn a_slow_client_loses_lines_counted_and_is_told_so() {
        let feed = Feed::new(
            Default::default(),
            serde_json::json!({}),
            FeedLimits::default(),
        );
        let mut c = feed.attach().unwrap();
        let n = CLIENT_QUEUE + 100;
        feed.push(&mut (0..n as u64).map(notice).collect());
        assert_eq!(feed.dropped(), 100);
        let got = lines(&mut c);
        assert_eq!(got.len(), CLIENT_QUEUE + 1);
        feed.push(&mut Vec::new()); // the next drain tells it
        let got = lines(&mut c);
        assert_eq!(got.len(), 1);
        assert_eq!(got[0]["what"], "feed_dropped");
        assert!(got[0]["message"]
            .as_str()
            .unwrap()
            .starts_with("100 events"));
        // A gone client is forgotten.
        drop(c);
        feed.push(&mut vec![notice(1)]);
        assert_eq!(feed.clients(), 0);
    }
}
